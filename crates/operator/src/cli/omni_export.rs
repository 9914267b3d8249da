//! `omni-operator omni export --cluster NAME`: reads a cluster from Omni and prints the
//! OmniCluster, OmniControlPlane, OmniWorkers and OmniMachine manifests that describe it, with
//! the adopt annotation, for taking existing clusters under management (docs/plan.md).
//!
//! The manifests render into a template that translates back into exactly the resources Omni
//! holds, so adopting them changes nothing in Omni but the operator's ownership stamp. What a
//! template cannot express (a patch of a machine allocated from a machine class, content Omni
//! stores compressed, labels in Omni's reserved namespace) is listed at the top of the output
//! as comments, each with what applying the manifests would do to it; the operator's adoption
//! then holds with `AdoptionDiff` instead of changing it unasked.

use std::process::ExitCode;

use anyhow::Context as _;
use omni_client::template::{
    Cluster, Document, Features, Machine, MachineSet, Manifest, Patch, Size, Template,
    UpdateStrategy, export_cluster,
};
use serde_json::{Map, Value, json};

use crate::api::keys::ADOPT_ANNOTATION;
use crate::cli::omni_template::{
    Connection, OmniApi, backend_api, client, deadline, parse_omni_api,
};
use crate::domain::plan::OPERATOR_BOOKKEEPING;

/// Arguments of `omni export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cluster's name in Omni.
    #[arg(long)]
    pub cluster: String,
    /// Namespace of the manifests (where the OmniConnection is).
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// The OmniConnection the OmniCluster uses.
    #[arg(long, default_value = "omni")]
    pub connection: String,
    /// `metadata.name` of the OmniCluster (default: the cluster name, lowercased, `_` as `-`);
    /// its children are named after it.
    #[arg(long)]
    pub name: Option<String>,
    /// Omni backend API version the cluster was synced for: `auto`, `2` or `3`.
    #[arg(long, value_name = "auto|2|3", default_value = "auto", value_parser = parse_omni_api)]
    pub omni_api: OmniApi,
    /// Connection settings.
    #[command(flatten)]
    pub omni: Connection,
}

/// Runs `omni export`, printing the manifests to stdout.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    run_with_output(args, &mut std::io::stdout()).await
}

/// Runs `omni export`, writing the manifests into `out`; a note goes to stderr when something
/// could not be expressed.
pub async fn run_with_output(
    args: Args,
    out: &mut (impl std::io::Write + Send),
) -> anyhow::Result<ExitCode> {
    let client = client(&args.omni)?;
    let api = backend_api(&client, args.omni_api).await?;
    let state = client.template_state(deadline(&args.omni)?);
    let exported = export_cluster(&state, &args.cluster, api, &OPERATOR_BOOKKEEPING)
        .await
        .with_context(|| format!("export Omni cluster {:?}", args.cluster))?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| object_name(&args.cluster));
    let target = Target {
        name: &name,
        namespace: &args.namespace,
        connection: &args.connection,
    };
    writeln!(
        out,
        "# Omni cluster {:?} from {}, exported by omni-operator omni export.",
        args.cluster, args.omni.endpoint
    )?;
    writeln!(
        out,
        "# With the adopt annotation the OmniCluster takes the cluster over: it writes nothing to Omni but its\n# ownership stamp while these manifests match, and holds with AdoptionDiff where they do not (docs/plan.md)."
    )?;
    let (docs, notes) = manifests(&exported.template, &target)?;
    let unexpressed: Vec<String> = exported
        .unexpressed
        .iter()
        .map(ToString::to_string)
        .chain(notes)
        .collect();
    if unexpressed.is_empty() {
        writeln!(
            out,
            "# Everything the cluster's template owns in Omni is expressed."
        )?;
    } else {
        writeln!(
            out,
            "# Not expressed (applying these manifests would change or delete them in Omni):"
        )?;
        for item in &unexpressed {
            writeln!(out, "#   - {item}")?;
        }
        eprintln!(
            "warning: {} resources of Omni cluster {:?} could not be expressed; they are listed at the top of the output",
            unexpressed.len(),
            args.cluster
        );
    }
    for doc in docs {
        writeln!(out, "---")?;
        out.write_all(to_yaml(&doc)?.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the manifests go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// `metadata.name` of the OmniCluster.
    pub(crate) name: &'a str,
    /// Namespace of every manifest.
    pub(crate) namespace: &'a str,
    /// The OmniConnection's name.
    pub(crate) connection: &'a str,
}

/// A Kubernetes object name for Omni cluster `cluster`: Omni allows `_` and capitals, object
/// names do not.
pub(crate) fn object_name(cluster: &str) -> String {
    let name: String = cluster
        .chars()
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.');
    if name.is_empty() {
        "cluster".into()
    } else {
        name.to_string()
    }
}

/// A manifest as YAML; multi-line content as literal blocks, which keep it byte for byte.
pub(crate) fn to_yaml(doc: &Value) -> anyhow::Result<String> {
    serde_saphyr::to_string(doc).context("write YAML")
}

/// Pure: the custom resources of `template` (as [`crate::domain::render::render`] would render
/// back into it), in apply order: OmniCluster, OmniControlPlane, OmniWorkers, OmniMachines; and
/// what the custom resources cannot state although a template can.
pub(crate) fn manifests(
    template: &Template,
    target: &Target<'_>,
) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let cluster = template
        .cluster()
        .context("the exported template has no Cluster document")?;
    let mut notes = Vec::new();
    let spec = cluster_spec(cluster, target, &mut notes);
    let mut docs = vec![object(
        target,
        "OmniCluster",
        target.name.to_string(),
        Value::Object(spec),
    )];
    let cluster_ref = json!({"name": target.name});
    let mut workers = Vec::new();
    let mut machines = Vec::new();
    for doc in &template.documents {
        match doc {
            Document::Cluster(_) => {}
            Document::ControlPlane(set) => {
                let mut spec = machine_set(set, &cluster_ref);
                if let Some(b) = &set.bootstrap_spec {
                    spec.insert(
                        "bootstrapSpec".into(),
                        json!({"clusterUUID": b.cluster_uuid, "snapshot": b.snapshot}),
                    );
                }
                strategy(&mut spec, "upgradeStrategy", set.upgrade_strategy.as_ref())?;
                docs.push(object(
                    target,
                    "OmniControlPlane",
                    format!("{}-control-plane", target.name),
                    Value::Object(spec),
                ));
            }
            Document::Workers(set) => {
                let set_name = if set.name.is_empty() {
                    "workers"
                } else {
                    set.name.as_str()
                };
                let mut spec = machine_set(set, &cluster_ref);
                spec.insert("workerSetName".into(), json!(set_name));
                strategy(&mut spec, "updateStrategy", set.update_strategy.as_ref())?;
                strategy(&mut spec, "upgradeStrategy", set.upgrade_strategy.as_ref())?;
                strategy(&mut spec, "deleteStrategy", set.delete_strategy.as_ref())?;
                workers.push(object(
                    target,
                    "OmniWorkers",
                    format!("{}-{}", target.name, object_name(set_name)),
                    Value::Object(spec),
                ));
            }
            Document::Machine(m) => machines.push(object(
                target,
                "OmniMachine",
                format!("{}-{}", target.name, object_name(&m.name)),
                machine(m, &cluster_ref),
            )),
        }
    }
    docs.extend(workers);
    docs.extend(machines);
    Ok((docs, notes))
}

/// A custom resource of `kind` named `name` in the target's namespace; an OmniCluster carries
/// the adopt annotation.
fn object(target: &Target<'_>, kind: &str, name: String, spec: Value) -> Value {
    let mut metadata = json!({"name": name, "namespace": target.namespace});
    if kind == "OmniCluster" {
        metadata["annotations"] = json!({ ADOPT_ANNOTATION: "true" });
    }
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    })
}

/// The OmniCluster spec of the template's Cluster; what it cannot state goes to `notes`.
fn cluster_spec(
    cluster: &Cluster,
    target: &Target<'_>,
    notes: &mut Vec<String>,
) -> Map<String, Value> {
    let mut spec = Map::new();
    spec.insert("connectionRef".into(), json!({"name": target.connection}));
    spec.insert("clusterName".into(), json!(cluster.name));
    descriptors(&mut spec, &cluster.labels, &cluster.annotations);
    spec.insert(
        "kubernetes".into(),
        Value::Object(kubernetes_spec(cluster, notes)),
    );
    spec.insert("talos".into(), json!({"version": cluster.talos.version}));
    if let Some(f) = &cluster.features {
        spec.insert("features".into(), Value::Object(features_spec(f)));
    }
    common_fields(
        &mut spec,
        &cluster.patches,
        &cluster.system_extensions,
        &cluster.kernel_args,
    );
    spec
}

/// `spec.kubernetes` of the OmniCluster: version, manifests, health checks. A manifest
/// without content cannot be stated and goes to `notes`.
fn kubernetes_spec(cluster: &Cluster, notes: &mut Vec<String>) -> Map<String, Value> {
    let mut kubernetes = Map::new();
    kubernetes.insert("version".into(), json!(cluster.kubernetes.version));
    // A manifest custom resource needs content (or a file); an empty group cannot be stated.
    let (empty, stated): (Vec<&Manifest>, Vec<&Manifest>) =
        cluster.kubernetes.manifests.iter().partition(|m| {
            m.file.is_empty()
                && m.inline.as_ref().is_none_or(|i| match i {
                    Value::Array(items) => items.is_empty(),
                    Value::String(text) => text.trim().is_empty(),
                    _ => false,
                })
        });
    for m in empty {
        notes.push(format!(
            "manifest {:?}: it has no content, which an OmniCluster manifest cannot state: applying deletes its manifest group (and renumbers the manifests after it)",
            m.name
        ));
    }
    if !stated.is_empty() {
        kubernetes.insert(
            "manifests".into(),
            Value::Array(stated.into_iter().map(manifest).collect()),
        );
    }
    if !cluster.kubernetes.healthchecks.is_empty() {
        let checks = cluster.kubernetes.healthchecks.iter().map(|h| {
            let mut c = Map::new();
            put_str(&mut c, "name", &h.name);
            put_str(&mut c, "idOverride", &h.id_override);
            if let Some(job) = &h.job {
                c.insert("job".into(), job.clone());
            }
            put_str(&mut c, "file", &h.file);
            put_str(&mut c, "interval", h.interval.as_str());
            descriptors(&mut c, &h.labels, &h.annotations);
            Value::Object(c)
        });
        kubernetes.insert("healthChecks".into(), Value::Array(checks.collect()));
    }
    kubernetes
}

/// `spec.features` of the OmniCluster: the features switched on, and the etcd backup.
fn features_spec(f: &Features) -> Map<String, Value> {
    let mut features = Map::new();
    for (key, on) in [
        ("enableWorkloadProxy", f.enable_workload_proxy),
        (
            "useEmbeddedDiscoveryService",
            f.use_embedded_discovery_service,
        ),
        ("diskEncryption", f.disk_encryption),
        ("enableNodeAuditSkip", f.enable_node_audit_skip),
    ] {
        if on {
            features.insert(key.into(), json!(true));
        }
    }
    if let Some(disabled) = f.disable_public_discovery_service {
        features.insert("disablePublicDiscoveryService".into(), json!(disabled));
    }
    if let Some(b) = &f.backup_configuration {
        features.insert(
            "backupConfiguration".into(),
            json!({"interval": b.interval.as_str()}),
        );
    }
    features
}

fn put_str(map: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        map.insert(key.into(), json!(value));
    }
}

fn descriptors(
    map: &mut Map<String, Value>,
    labels: &std::collections::BTreeMap<String, String>,
    annotations: &std::collections::BTreeMap<String, String>,
) {
    if !labels.is_empty() {
        map.insert("labels".into(), json!(labels));
    }
    if !annotations.is_empty() {
        map.insert("annotations".into(), json!(annotations));
    }
}

fn patch(p: &Patch) -> Value {
    let mut m = Map::new();
    put_str(&mut m, "name", &p.name);
    put_str(&mut m, "idOverride", &p.id_override);
    put_str(&mut m, "file", &p.file);
    descriptors(&mut m, &p.labels, &p.annotations);
    if let Some(inline) = &p.inline {
        m.insert("inline".into(), inline.clone());
    }
    Value::Object(m)
}

fn manifest(m: &Manifest) -> Value {
    let mut v = Map::new();
    v.insert("name".into(), json!(m.name));
    v.insert("mode".into(), json!(m.mode));
    if let Some(inline) = &m.inline {
        v.insert("inline".into(), inline.clone());
    }
    put_str(&mut v, "file", &m.file);
    descriptors(&mut v, &m.labels, &m.annotations);
    Value::Object(v)
}

/// `patches`, `systemExtensions` and `kernelArgs`, which every kind has.
fn common_fields(
    spec: &mut Map<String, Value>,
    patches: &[Patch],
    system_extensions: &Option<Vec<String>>,
    kernel_args: &Option<Vec<String>>,
) {
    if !patches.is_empty() {
        spec.insert(
            "patches".into(),
            Value::Array(patches.iter().map(patch).collect()),
        );
    }
    // Optional lists: left out means "not managed", `[]` means "none".
    if let Some(list) = system_extensions {
        spec.insert("systemExtensions".into(), json!(list));
    }
    if let Some(list) = kernel_args {
        spec.insert("kernelArgs".into(), json!(list));
    }
}

fn machine_set(set: &MachineSet, cluster_ref: &Value) -> Map<String, Value> {
    let mut spec = Map::new();
    spec.insert("clusterRef".into(), cluster_ref.clone());
    descriptors(&mut spec, &set.labels, &set.annotations);
    if !set.machines.is_empty() {
        spec.insert("machines".into(), json!(set.machines));
    }
    if let Some(class) = &set.machine_class {
        let size = match &class.size {
            Size::Count(n) => json!(n),
            Size::Keyword(k) => json!(k),
        };
        spec.insert(
            "machineClass".into(),
            json!({"name": class.name, "size": size}),
        );
    }
    common_fields(
        &mut spec,
        &set.patches,
        &set.system_extensions,
        &set.kernel_args,
    );
    spec
}

fn strategy(
    spec: &mut Map<String, Value>,
    key: &str,
    s: Option<&UpdateStrategy>,
) -> anyhow::Result<()> {
    let Some(s) = s else {
        return Ok(());
    };
    let mut v = Map::new();
    put_str(&mut v, "type", &s.kind);
    if let Some(r) = &s.rolling {
        let mut rolling = Map::new();
        if let Some(p) = r.max_parallelism {
            let p = i32::try_from(p)
                .with_context(|| format!("{key}.rolling.maxParallelism {p} is out of range"))?;
            rolling.insert("maxParallelism".into(), json!(p));
        }
        v.insert("rolling".into(), Value::Object(rolling));
    }
    spec.insert(key.into(), Value::Object(v));
    Ok(())
}

fn machine(m: &Machine, cluster_ref: &Value) -> Value {
    let mut spec = Map::new();
    spec.insert("clusterRef".into(), cluster_ref.clone());
    spec.insert("machineID".into(), json!(m.name));
    descriptors(&mut spec, &m.labels, &m.annotations);
    if m.locked {
        spec.insert("locked".into(), json!(true));
    }
    if let Some(install) = &m.install {
        let mut i = Map::new();
        put_str(&mut i, "disk", &install.disk);
        put_str(&mut i, "diskSelector", &install.disk_selector);
        spec.insert("install".into(), Value::Object(i));
    }
    common_fields(&mut spec, &m.patches, &m.system_extensions, &m.kernel_args);
    Value::Object(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};
    use omni_client::template::{BackendApi, FileResolver, translate_for};

    /// The template the export tests of omni-client reproduce too.
    const TEMPLATE: &str =
        include_str!("../../../omni-client/src/template/testdata/round-trip.yaml");

    fn typed<T: serde::de::DeserializeOwned>(doc: &Value) -> T {
        // Through YAML, as `kubectl apply` would read the printed manifests.
        let text = to_yaml(doc).unwrap_or_else(|e| panic!("{e}"));
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// The manifests render into a template that translates into the same resources.
    #[test]
    fn the_manifests_render_back_into_the_template() {
        let template = Template::parse(TEMPLATE).unwrap_or_else(|e| panic!("{e}"));
        let target = Target {
            name: &object_name("prod-1"),
            namespace: "ops",
            connection: "omni",
        };
        assert_eq!(target.name, "prod-1");
        let (docs, notes) = manifests(&template, &target).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(notes, Vec::<String>::new());
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "OmniCluster",
                "OmniControlPlane",
                "OmniWorkers",
                "OmniWorkers",
                "OmniWorkers",
                "OmniMachine"
            ]
        );
        assert_eq!(docs[0]["metadata"]["annotations"][ADOPT_ANNOTATION], "true");
        let mut cluster: OmniCluster = typed(&docs[0]);
        cluster.metadata.uid = Some("u".into());
        let cps: Vec<OmniControlPlane> = vec![typed(&docs[1])];
        let workers: Vec<OmniWorkers> = vec![typed(&docs[2]), typed(&docs[3]), typed(&docs[4])];
        let machines: Vec<OmniMachine> = vec![typed(&docs[5])];
        for doc in &docs {
            let kind = doc["kind"].as_str().unwrap_or_default();
            let v = crate::api::validate_dynamic(kind, doc, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                v.is_valid(),
                "{kind} is refused by admission: {}",
                v.error_summary()
            );
        }
        let rendered = crate::domain::render::render(&cluster, &cps, &workers, &machines)
            .unwrap_or_else(|e| panic!("{e}"));
        let files = FileResolver::disabled("none");
        for api in [BackendApi::V2, BackendApi::V3] {
            let mut want = translate_for(&template, &files, api).unwrap_or_else(|e| panic!("{e}"));
            let mut got =
                translate_for(&rendered.template, &files, api).unwrap_or_else(|e| panic!("{e}"));
            omni_client::template::sort_for_apply(&mut want);
            omni_client::template::sort_for_apply(&mut got);
            assert_eq!(got, want, "{api:?}");
        }
    }

    #[test]
    fn an_empty_manifest_group_is_not_expressed() {
        let mut template = Template::parse(TEMPLATE).unwrap_or_else(|e| panic!("{e}"));
        if let Some(Document::Cluster(c)) = template.documents.first_mut() {
            c.kubernetes.manifests[0].inline = Some(Value::Array(Vec::new()));
        }
        let target = Target {
            name: "prod-1",
            namespace: "ops",
            connection: "omni",
        };
        let (docs, notes) = manifests(&template, &target).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("manifest \"cni\": it has no content"),
            "{notes:?}"
        );
        assert_eq!(
            docs[0]["spec"]["kubernetes"]["manifests"][0]["name"],
            "once"
        );
    }

    #[test]
    fn object_names_are_kubernetes_names() {
        assert_eq!(object_name("Prod_East-1"), "prod-east-1");
        assert_eq!(object_name("__"), "cluster");
    }
}
