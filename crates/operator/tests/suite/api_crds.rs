//! CRD generation: names, schema facts users and the API server rely on, structural-schema
//! validity, and YAML round-tripping of `omni-operator crds` output.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use omni_operator::api::{self, GROUP, KINDS, VERSION};
use serde_json::{Value, json};

fn crd(kind: &str) -> CustomResourceDefinition {
    api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

/// The root openAPIV3Schema of a kind as JSON.
fn schema(kind: &str) -> Value {
    let crd = crd(kind);
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Follows `properties`/`items` along a dotted path (`spec.chart.values`, `spec.machines[]`).
fn node<'a>(root: &'a Value, path: &str) -> &'a Value {
    let mut cur = root;
    for part in path.split('.') {
        let (name, item) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        cur = cur
            .get("properties")
            .and_then(|p| p.get(name))
            .unwrap_or_else(|| panic!("no property {path}"));
        if item {
            cur = cur
                .get("items")
                .unwrap_or_else(|| panic!("no items at {path}"));
        }
    }
    cur
}

fn required_of(root: &Value, path: &str) -> BTreeSet<String> {
    let n = if path.is_empty() {
        root
    } else {
        node(root, path)
    };
    n.get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn one_crd_per_kind_in_kinds_order_with_parity_names() {
    let crds = api::crds();
    let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(kinds, KINDS.to_vec());
    let expected = [
        ("omniconnections", "omniconnection", "oconn"),
        ("omniclusters", "omnicluster", "ocl"),
        ("omnicontrolplanes", "omnicontrolplane", "ocp"),
        ("omniworkers", "omniworkers", "owk"),
        ("omnimachines", "omnimachine", "omach"),
        ("omnikubeconfigexports", "omnikubeconfigexport", "okx"),
        ("omnihelmreleases", "omnihelmrelease", "ohr"),
        ("omnisecretsyncs", "omnisecretsync", "oss"),
    ];
    for (crd, (plural, singular, short)) in crds.iter().zip(expected) {
        let names = &crd.spec.names;
        assert_eq!(names.plural, plural);
        assert_eq!(names.singular.as_deref(), Some(singular));
        assert_eq!(names.short_names.as_deref(), Some(&[short.to_string()][..]));
        assert_eq!(names.categories.as_deref(), Some(&["omni".to_string()][..]));
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.{GROUP}").as_str())
        );
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.versions.len(), 1);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, VERSION);
        assert!(v.served && v.storage);
        let sub = v.subresources.as_ref().expect("subresources");
        assert!(sub.status.is_some(), "{plural} has a status subresource");
        assert!(sub.scale.is_none());
        assert_eq!(
            api::crd_file_name(crd),
            format!("omni.texashpc.com_{plural}.yaml")
        );
        let root = schema(&names.kind);
        assert_eq!(
            required_of(&root, ""),
            BTreeSet::from(["spec".to_string()]),
            "{plural}: spec required"
        );
    }
}

#[test]
fn printer_columns() {
    let columns = |kind: &str| -> Vec<(String, String, String)> {
        crd(kind).spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, c.type_, c.json_path))
            .collect()
    };
    let ready = (
        "Ready".to_string(),
        "string".to_string(),
        r#".status.conditions[?(@.type=="Ready")].status"#.to_string(),
    );
    let age = (
        "Age".to_string(),
        "date".to_string(),
        ".metadata.creationTimestamp".to_string(),
    );
    for kind in KINDS {
        let cols = columns(kind);
        assert_eq!(cols.last(), Some(&age), "{kind} ends with Age");
        let is_child = matches!(kind, "OmniControlPlane" | "OmniWorkers" | "OmniMachine");
        if is_child {
            assert!(
                cols.iter()
                    .any(|c| c.0 == "Accepted" && c.2.contains(r#"@.type=="Accepted""#)),
                "{kind}"
            );
            assert!(
                cols.iter()
                    .any(|c| c.0 == "Cluster" && c.2 == ".spec.clusterRef.name"),
                "{kind}"
            );
        } else {
            assert!(cols.contains(&ready), "{kind} shows Ready");
            assert!(cols.iter().any(|c| c.0 == "Reason"), "{kind} shows Reason");
        }
    }
    assert!(
        columns("OmniConnection")
            .iter()
            .any(|c| c.0 == "Endpoint" && c.2 == ".spec.endpoint")
    );
    assert!(
        columns("OmniCluster")
            .iter()
            .any(|c| c.0 == "Cluster" && c.2 == ".status.clusterName")
    );
    // Omni's view of the cluster: phase and machines by default, versions with -o wide.
    for (name, path) in [
        ("Phase", ".status.omniPhase"),
        ("Ready Machines", ".status.readyMachines"),
        ("Kubernetes", ".status.kubernetesVersion"),
        ("Talos", ".status.talosVersion"),
    ] {
        assert!(
            columns("OmniCluster")
                .iter()
                .any(|c| c.0 == name && c.2 == path),
            "OmniCluster column {name}"
        );
    }
    assert!(
        columns("OmniKubeconfigExport")
            .iter()
            .any(|c| c.0 == "Expires" && c.1 == "string" && c.2 == ".status.expirationTime")
    );
    assert!(
        columns("OmniHelmRelease")
            .iter()
            .any(|c| c.0 == "Revision" && c.1 == "integer")
    );
}

#[test]
fn defaults_match_parity() {
    let cases: &[(&str, &str, Value)] = &[
        (
            "OmniConnection",
            "spec.auth.serviceAccountSecretRef.key",
            json!("serviceAccountKey"),
        ),
        ("OmniCluster", "spec.syncInterval", json!("5m")),
        (
            "OmniCluster",
            "spec.kubernetes.manifests[].mode",
            json!("full"),
        ),
        (
            "OmniKubeconfigExport",
            "spec.targetSecretRef.key",
            json!("kubeconfig"),
        ),
        (
            "OmniHelmRelease",
            "spec.kubeconfigSecretRef.key",
            json!("kubeconfig"),
        ),
        ("OmniHelmRelease", "spec.namespace", json!("default")),
        ("OmniHelmRelease", "spec.timeout", json!("5m")),
        ("OmniHelmRelease", "spec.deletionPolicy", json!("Uninstall")),
        // The original had none (the field was required); docs/decisions.md says why `Delete`.
        (
            "OmniKubeconfigExport",
            "spec.deletionPolicy",
            json!("Delete"),
        ),
        ("OmniHelmRelease", "spec.chart.values", json!({})),
        (
            "OmniSecretSync",
            "spec.kubeconfigSecretRef.key",
            json!("kubeconfig"),
        ),
    ];
    for (kind, path, want) in cases {
        assert_eq!(
            node(&schema(kind), path).get("default"),
            Some(want),
            "{kind} {path}"
        );
    }
    // Fields the original has without a CRD default (docs/parity.md#the-api) must not get one.
    for (kind, path) in [
        ("OmniSecretSync", "spec.deletionPolicy"),
        ("OmniKubeconfigExport", "spec.ttl"),
        ("OmniControlPlane", "spec.machines"),
        ("OmniConnection", "spec.insecureSkipTLSVerify"),
        ("OmniCluster", "spec.suspend"),
    ] {
        assert_eq!(
            node(&schema(kind), path).get("default"),
            None,
            "{kind} {path}"
        );
    }
}

#[test]
fn decoding_applies_the_same_defaults_as_the_schema() {
    let cluster: api::OmniCluster = serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster", "metadata": {"name": "c"},
        "spec": {"connectionRef": {"name": "x"}, "kubernetes": {"version": "v1.35.0", "manifests": [{"name": "m", "inline": []}]},
                 "talos": {"version": "v1.13.2"}}
    }))
    .unwrap();
    assert_eq!(cluster.spec.sync_interval.as_str(), "5m");
    assert_eq!(
        cluster.spec.kubernetes.manifests.unwrap()[0].mode,
        api::cluster::ManifestMode::Full
    );
    let release: api::OmniHelmRelease = serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniHelmRelease", "metadata": {"name": "r"},
        "spec": {"clusterRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "k"},
                 "chart": {"repository": "https://x", "chart": "c", "version": "1"}}
    }))
    .unwrap();
    assert_eq!(release.spec.kubeconfig_secret_ref.key, "kubeconfig");
    assert_eq!(release.spec.namespace, "default");
    assert_eq!(release.spec.timeout.as_str(), "5m");
    assert_eq!(
        release.spec.deletion_policy,
        api::helm_release::HelmDeletionPolicy::Uninstall
    );
    assert_eq!(release.spec.chart.values, json!({}));
    let conn: api::OmniConnection = serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniConnection", "metadata": {"name": "o"},
        "spec": {"endpoint": "https://omni", "auth": {"serviceAccountSecretRef": {"name": "s"}}}
    }))
    .unwrap();
    assert_eq!(
        conn.spec.auth.service_account_secret_ref.key,
        "serviceAccountKey"
    );
}

/// Typed spec fields write back exactly what was stored: durations as written (`1.5h`, not
/// `1h30m0s`; even one Go rejects), policies and the format in their CRD spelling.
#[test]
fn typed_spec_fields_serialise_as_written() {
    fn round_trip<K: serde::de::DeserializeOwned + serde::Serialize>(kind: &str, spec: Value) {
        let object = json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": kind,
            "metadata": {"name": "x", "namespace": "ns"}, "spec": spec,
        });
        let decoded: K = serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{e}"));
        let written = serde_json::to_value(&decoded).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written["spec"], object["spec"], "{kind}");
    }
    round_trip::<api::OmniCluster>(
        "OmniCluster",
        json!({
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0", "healthChecks": [{"name": "h", "job": {"kind": "Job"}, "interval": "45.5s"}]},
            "talos": {"version": "v1.13.2"},
            "features": {"backupConfiguration": {"interval": "1d"}},
            "syncInterval": "1.5h",
        }),
    );
    round_trip::<api::OmniHelmRelease>(
        "OmniHelmRelease",
        json!({
            "clusterRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "k", "key": "kubeconfig"},
            "namespace": "default",
            "chart": {"repository": "https://x", "chart": "c", "version": "1", "values": {}},
            "timeout": "90s", "deletionPolicy": "Orphan", "driftCheckInterval": "0",
        }),
    );
    round_trip::<api::OmniKubeconfigExport>(
        "OmniKubeconfigExport",
        json!({
            "clusterRef": {"name": "c"}, "targetSecretRef": {"name": "t", "key": "kubeconfig"},
            "serviceAccount": {"user": "u", "groups": ["g"]},
            "ttl": "1440m", "renewBefore": "+4h", "deletionPolicy": "Delete", "format": "ArgoCDCluster",
        }),
    );
    round_trip::<api::OmniSecretSync>(
        "OmniSecretSync",
        json!({
            "clusterRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "k", "key": "kubeconfig"},
            "sourceSecretRef": {"name": "s"}, "targetSecretRef": {"name": "t", "namespace": "n"},
            "deletionPolicy": "Orphan",
        }),
    );
}

#[test]
fn enums_patterns_and_bounds() {
    let enum_of = |kind: &str, path: &str| node(&schema(kind), path).get("enum").cloned();
    assert_eq!(
        enum_of("OmniCluster", "spec.kubernetes.manifests[].mode"),
        Some(json!(["one-time", "full"]))
    );
    assert_eq!(
        enum_of("OmniWorkers", "spec.updateStrategy.type"),
        Some(json!(["Rolling", "Unset"]))
    );
    assert_eq!(
        enum_of("OmniKubeconfigExport", "spec.deletionPolicy"),
        Some(json!(["Delete", "Orphan"]))
    );
    assert_eq!(
        enum_of("OmniKubeconfigExport", "spec.format"),
        Some(json!([
            "Kubeconfig",
            "ArgoCDCluster",
            "FluxValue",
            "ClusterAPI"
        ]))
    );
    assert!(
        !required_of(&schema("OmniKubeconfigExport"), "spec").contains("format"),
        "spec.format is optional: manifests without it keep today's Secret"
    );
    assert_eq!(
        enum_of("OmniSecretSync", "spec.deletionPolicy"),
        Some(json!(["Delete", "Orphan"]))
    );
    assert_eq!(
        enum_of("OmniHelmRelease", "spec.deletionPolicy"),
        Some(json!(["Uninstall", "Orphan"]))
    );

    let pattern = |kind: &str, path: &str| {
        node(&schema(kind), path)["pattern"]
            .as_str()
            .map(String::from)
    };
    let version = Some(r"^v[0-9]+\.[0-9]+\.[0-9]+$".to_string());
    let dns_label = Some("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$".to_string());
    assert_eq!(
        pattern("OmniConnection", "spec.endpoint"),
        Some("^(https?|grpc)://.+".to_string())
    );
    assert_eq!(pattern("OmniCluster", "spec.kubernetes.version"), version);
    assert_eq!(pattern("OmniCluster", "spec.talos.version"), version);
    assert_eq!(
        pattern("OmniCluster", "spec.clusterName"),
        Some("^[A-Za-z0-9_-]+$".to_string())
    );
    assert_eq!(
        pattern("OmniWorkers", "spec.workerSetName"),
        Some("^[A-Za-z0-9_-]+$".to_string())
    );
    assert_eq!(
        pattern("OmniKubeconfigExport", "spec.contextNamespace"),
        dns_label
    );
    assert_eq!(
        pattern("OmniKubeconfigExport", "spec.targetSecretRef.namespace"),
        dns_label
    );

    let ctx = node(&schema("OmniKubeconfigExport"), "spec.contextNamespace").clone();
    assert_eq!(
        (ctx["minLength"].as_i64(), ctx["maxLength"].as_i64()),
        (Some(1), Some(63))
    );
    for (kind, path) in [
        ("OmniCluster", "spec.connectionRef.name"),
        ("OmniConnection", "spec.auth.serviceAccountSecretRef.name"),
        ("OmniControlPlane", "spec.clusterRef.name"),
        ("OmniControlPlane", "spec.machineClass.name"),
        ("OmniControlPlane", "spec.bootstrapSpec.clusterUUID"),
        ("OmniMachine", "spec.install.disk"),
        ("OmniCluster", "spec.kubernetes.manifests[].name"),
        ("OmniCluster", "spec.features.backupConfiguration.interval"),
        ("OmniKubeconfigExport", "spec.serviceAccount.user"),
        ("OmniHelmRelease", "spec.chart.repository"),
        ("OmniHelmRelease", "spec.releaseName"),
    ] {
        assert_eq!(
            node(&schema(kind), path)["minLength"].as_i64(),
            Some(1),
            "{kind} {path}"
        );
    }
    assert_eq!(
        node(&schema("OmniWorkers"), "spec.machines")["minItems"].as_i64(),
        Some(1)
    );
    assert_eq!(
        node(
            &schema("OmniWorkers"),
            "spec.updateStrategy.rolling.maxParallelism"
        )["minimum"]
            .as_f64(),
        Some(1.0)
    );
    assert_eq!(
        node(&schema("OmniHelmRelease"), "spec.maxHistory")["minimum"].as_f64(),
        Some(0.0)
    );

    let groups = node(
        &schema("OmniKubeconfigExport"),
        "spec.serviceAccount.groups",
    )
    .clone();
    assert_eq!(groups["x-kubernetes-list-type"], json!("set"));
    assert_eq!(groups["minItems"], json!(1));
    assert_eq!(groups["items"]["type"], json!("string"));
}

#[test]
fn required_fields() {
    let req = |kind: &str, path: &str| required_of(&schema(kind), path);
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(req("OmniConnection", "spec"), set(&["auth", "endpoint"]));
    assert_eq!(
        req("OmniCluster", "spec"),
        set(&["connectionRef", "kubernetes", "talos"])
    );
    assert_eq!(
        req("OmniCluster", "spec.kubernetes.manifests[]"),
        set(&["name"])
    );
    assert_eq!(req("OmniControlPlane", "spec"), set(&["clusterRef"]));
    assert_eq!(
        req("OmniControlPlane", "spec.machineClass"),
        set(&["name", "size"])
    );
    assert_eq!(req("OmniWorkers", "spec"), set(&["clusterRef"]));
    assert_eq!(req("OmniMachine", "spec"), set(&["clusterRef"]));
    assert_eq!(
        req("OmniKubeconfigExport", "spec"),
        set(&["clusterRef", "serviceAccount", "targetSecretRef", "ttl"])
    );
    assert_eq!(
        req("OmniKubeconfigExport", "spec.serviceAccount"),
        set(&["groups", "user"])
    );
    assert_eq!(
        req("OmniKubeconfigExport", "spec.targetSecretRef"),
        set(&["name"])
    );
    assert_eq!(
        req("OmniHelmRelease", "spec"),
        set(&["chart", "clusterRef", "kubeconfigSecretRef"])
    );
    assert_eq!(
        // `repository` is optional: an oci:// chart names its registry itself.
        req("OmniHelmRelease", "spec.chart"),
        set(&["chart", "version"])
    );
    assert_eq!(
        req("OmniSecretSync", "spec"),
        set(&[
            "clusterRef",
            "deletionPolicy",
            "kubeconfigSecretRef",
            "targetSecretRef"
        ])
    );
    // `sourceSecretRef` is optional with `data`, `namespace` with `namespaceSelector`:
    // admission asks for them.
    assert_eq!(
        req("OmniSecretSync", "spec.targetSecretRef"),
        set(&["name"])
    );
}

#[test]
fn kubernetes_specific_extensions() {
    for kind in ["OmniControlPlane", "OmniWorkers"] {
        let spec = node(&schema(kind), "spec").clone();
        assert_eq!(
            spec["x-kubernetes-validations"],
            json!([{"rule": "has(self.machines) != has(self.machineClass)",
                    "message": "exactly one of machines or machineClass is required"}]),
            "{kind}"
        );
        assert_eq!(
            node(&schema(kind), "spec.machineClass.size")["x-kubernetes-int-or-string"],
            json!(true)
        );
        assert_eq!(
            node(&schema(kind), "spec.patches[].inline")["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
    }
    let policy = node(&schema("OmniCluster"), "spec.deletePolicy").clone();
    assert_eq!(
        policy["x-kubernetes-validations"][0]["message"],
        json!("orphan and destroyMachines cannot both be true")
    );
    // A list of objects or (Omni v1.8) a YAML string: kept verbatim, checked by admission.
    let manifest_inline =
        node(&schema("OmniCluster"), "spec.kubernetes.manifests[].inline").clone();
    assert_eq!(
        manifest_inline["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    assert_eq!(manifest_inline.get("type"), None);
    assert_eq!(
        node(&schema("OmniHelmRelease"), "spec.chart.values")["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    for kind in KINDS {
        let conditions = node(&schema(kind), "status.conditions").clone();
        assert_eq!(conditions["x-kubernetes-list-type"], json!("map"), "{kind}");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            json!(["type"]),
            "{kind}"
        );
        let item = &conditions["items"];
        assert_eq!(
            item["properties"]["status"]["enum"],
            json!(["True", "False", "Unknown"])
        );
        assert_eq!(
            item["properties"]["lastTransitionTime"]["format"],
            json!("date-time")
        );
    }
}

/// A checker for Kubernetes' structural-schema rules (plus the extension constraints the API
/// server enforces), returning every violation with its path.
fn structural_violations(node: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    const ALLOWED: &[&str] = &[
        "description",
        "type",
        "format",
        "title",
        "default",
        "maximum",
        "minimum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "properties",
        "additionalProperties",
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
        "x-kubernetes-embedded-resource",
    ];
    for key in obj.keys() {
        if !ALLOWED.contains(&key.as_str()) {
            out.push(format!(
                "{path}: keyword {key:?} is not allowed in a structural schema"
            ));
        }
    }
    let ty = obj.get("type").and_then(Value::as_str);
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    if ty.is_none() && !preserve && !int_or_string {
        out.push(format!("{path}: type is required"));
    }
    if let Some(t) = ty
        && !["object", "array", "string", "integer", "number", "boolean"].contains(&t)
    {
        out.push(format!("{path}: unknown type {t:?}"));
    }
    if int_or_string && ty.is_some() {
        out.push(format!("{path}: int-or-string must not also have a type"));
    }
    if obj.contains_key("nullable") && ty.is_none() {
        out.push(format!("{path}: nullable without type"));
    }
    if root && (obj.contains_key("nullable") || obj.contains_key("default")) {
        out.push(format!("{path}: root must not be nullable or defaulted"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        out.push(format!(
            "{path}: properties and additionalProperties are mutually exclusive"
        ));
    }
    if ty == Some("array") {
        match obj.get("items") {
            Some(items) if items.is_object() => {
                structural_violations(items, &format!("{path}[]"), false, out)
            }
            _ => out.push(format!("{path}: array needs a single items schema")),
        }
    } else if obj.contains_key("items") {
        out.push(format!("{path}: items on a non-array"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        if ty != Some("object") {
            out.push(format!("{path}: properties on a non-object"));
        }
        for (name, child) in props {
            if root && name == "metadata" {
                continue;
            }
            structural_violations(child, &format!("{path}.{name}"), false, out);
        }
        for r in obj
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !r.as_str().is_some_and(|r| props.contains_key(r)) {
                out.push(format!("{path}: required {r} is not a property"));
            }
        }
    }
    if let Some(extra) = obj.get("additionalProperties") {
        if extra.is_object() {
            structural_violations(extra, &format!("{path}.*"), false, out);
        } else if extra != &json!(true) && extra != &json!(false) {
            out.push(format!("{path}: bad additionalProperties"));
        }
    }
    match obj.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None => {
            if obj.contains_key("x-kubernetes-list-map-keys") {
                out.push(format!("{path}: list-map-keys without list-type map"));
            }
        }
        Some("map") => {
            let item = &obj["items"];
            let item_required = item
                .get("required")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let keys = obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if keys.is_empty() || item["type"] != json!("object") {
                out.push(format!(
                    "{path}: list-type map needs object items and map keys"
                ));
            }
            for key in keys {
                if !item_required.contains(&key) {
                    out.push(format!("{path}: map key {key} must be required in items"));
                }
            }
        }
        Some("set") => {
            let t = obj["items"]["type"].as_str().unwrap_or_default();
            if !["string", "integer", "number", "boolean"].contains(&t) {
                out.push(format!("{path}: list-type set needs scalar items"));
            }
        }
        Some("atomic") => {}
        Some(other) => out.push(format!("{path}: unknown list-type {other}")),
    }
    if let Some(rules) = obj.get("x-kubernetes-validations") {
        let ok = rules.as_array().is_some_and(|rs| {
            rs.iter().all(|r| {
                r.get("rule")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            })
        });
        if !ok {
            out.push(format!(
                "{path}: every x-kubernetes-validations entry needs a rule"
            ));
        }
    }
    let type_matches = |v: &Value| match ty {
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        _ => true,
    };
    if let Some(default) = obj.get("default")
        && !type_matches(default)
    {
        out.push(format!("{path}: default {default} does not match type"));
    }
    if let Some(values) = obj.get("enum") {
        if !values
            .as_array()
            .is_some_and(|vs| !vs.is_empty() && vs.iter().all(type_matches))
        {
            out.push(format!("{path}: enum values must match the type"));
        }
        if let Some(default) = obj.get("default")
            && !values.as_array().is_some_and(|vs| vs.contains(default))
        {
            out.push(format!("{path}: default is not one of the enum values"));
        }
    }
}

#[test]
fn every_schema_is_structural() {
    for kind in KINDS {
        let mut violations = Vec::new();
        structural_violations(&schema(kind), kind, true, &mut violations);
        assert!(
            violations.is_empty(),
            "{kind} schema is not structural:\n{}",
            violations.join("\n")
        );
    }
}

#[test]
fn structural_checker_catches_violations() {
    // The checker itself must be able to fail, or the test above proves nothing.
    let bad = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "untyped": {"description": "x"},
                    "choice": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "ref": {"$ref": "#/definitions/X"},
                    "list": {"type": "array"},
                    "nul": {"nullable": true},
                    "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
                    "set": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "set"},
                    "mode": {"type": "string", "enum": ["a"], "default": "b"}
                }
            }
        }
    });
    let mut violations = Vec::new();
    structural_violations(&bad, "X", true, &mut violations);
    for needle in [
        "X.spec.untyped: type is required",
        "keyword \"anyOf\"",
        "keyword \"$ref\"",
        "X.spec.list: array needs a single items schema",
        "X.spec.nul: nullable without type",
        "X.spec.both: properties and additionalProperties",
        "X.spec.set: list-type set needs scalar items",
        "X.spec.mode: default is not one of the enum values",
    ] {
        assert!(
            violations.iter().any(|v| v.contains(needle)),
            "missing {needle:?} in {violations:#?}"
        );
    }
}

#[test]
fn no_nullable_anywhere() {
    // Optional fields are omitted rather than nulled, as controller-gen output does.
    for c in api::crds() {
        let text = serde_json::to_string(&c).unwrap();
        assert!(
            !text.contains("\"nullable\""),
            "{} has nullable",
            c.spec.names.kind
        );
        assert!(!text.contains("\"$ref\""), "{} has $ref", c.spec.names.kind);
    }
}

#[test]
fn yaml_round_trips_and_is_deterministic() {
    let yaml = api::crds_yaml();
    assert_eq!(yaml, api::crds_yaml(), "output must be deterministic");
    assert!(yaml.starts_with("apiVersion: apiextensions.k8s.io/v1\n"));
    assert_eq!(yaml.matches("\n---\n").count(), KINDS.len() - 1);
    let parsed: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&yaml).unwrap();
    assert_eq!(parsed, api::crds());
    let per_file: Vec<String> = api::crds()
        .iter()
        .map(|c| api::crd_yaml(c).unwrap())
        .collect();
    assert_eq!(per_file.join("---\n"), yaml);
    for (text, c) in per_file.iter().zip(api::crds()) {
        let one: CustomResourceDefinition = serde_saphyr::from_str(text).unwrap();
        assert_eq!(one, c);
    }
}

#[test]
fn descriptions_explain_fields() {
    // `kubectl explain` shows these; every spec field of every kind should say something.
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                let p = format!("{path}.{name}");
                if name != "apiVersion" && name != "kind" && name != "metadata" {
                    if child
                        .get("description")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        missing.push(p.clone());
                    }
                    walk(child, &p, missing);
                }
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), missing);
        }
    }
    for kind in KINDS {
        let mut missing = Vec::new();
        walk(&schema(kind), kind, &mut missing);
        assert!(
            missing.is_empty(),
            "fields without description: {missing:?}"
        );
    }
}
