//! OmniCluster + children → Omni cluster template (pure).
//!
//! The rendered YAML is hashed into `status.templateHash`, so its bytes must depend only on the
//! objects' content, never on list order from the API server: children are selected by
//! `spec.clusterRef.name` and sorted by their effective Omni names.

use std::path::Path;

use omni_client::template::{
    BackupConfiguration, BootstrapSpec, Cluster, Document, Features, FileResolver, HealthCheck,
    Install, KubernetesCluster, Machine, MachineClass, MachineSet, Manifest, Patch,
    RollingStrategy, Size, TalosCluster, Template, UpdateStrategy,
};
use sha2::{Digest, Sha256};

use crate::api::Reason;
use crate::api::common::{self, MachineClassSize, MachineSetFields};
use crate::api::workers::{self, RESERVED_WORKER_SET_NAME, StrategyType};
use crate::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};

/// A rendered template and the children it was built from.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The template model.
    pub template: Template,
    /// The exact YAML that is validated, synced and hashed.
    pub yaml: String,
    /// Lowercase hex SHA-256 of `yaml`.
    pub hash: String,
    /// `metadata.name` of the selected OmniControlPlane.
    pub control_plane_ref: String,
    /// `metadata.name`s of the selected OmniWorkers, in rendered order.
    pub workers_refs: Vec<String>,
    /// `metadata.name`s of the selected OmniMachines, in rendered order.
    pub machine_refs: Vec<String>,
    /// The Omni machine sets the template declares, with the object each comes from: the
    /// control plane first, then the workers in rendered order.
    pub machine_sets: Vec<RenderedSet>,
}

/// One Omni machine set of a rendered template and the custom resource it comes from, so that
/// what Omni reports of the set can be told in the user's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedSet {
    /// The Omni machine-set ID: `<cluster>-control-planes`, or `<cluster>-<workers set name>`.
    pub id: String,
    /// `OmniControlPlane` or `OmniWorkers`.
    pub kind: &'static str,
    /// The object's `metadata.name`.
    pub name: String,
    /// The machine class the set allocates from, when it does.
    pub machine_class: Option<String>,
}

/// Why a cluster could not be rendered. Messages are the ones users see in conditions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// Zero or several OmniControlPlanes reference the cluster.
    #[error("expected exactly one OmniControlPlane referencing {namespace}/{name}, found {found}")]
    ControlPlaneCount {
        /// Cluster namespace.
        namespace: String,
        /// Cluster `metadata.name`.
        name: String,
        /// How many were found.
        found: usize,
    },
    /// Two manifests share a name.
    #[error(
        "duplicate Kubernetes manifest name {0:?} for OmniCluster.spec.kubernetes.manifests[] conflicts with OmniCluster.spec.kubernetes.manifests[]"
    )]
    DuplicateManifest(String),
    /// A worker set uses the control plane's reserved name.
    #[error("workers {0:?} uses reserved workerSetName \"control-planes\"")]
    ReservedWorkerSetName(String),
    /// A numeric field is outside what Omni accepts.
    #[error("{object}: {field} must not be negative")]
    Negative {
        /// `Kind ns/name` of the object.
        object: String,
        /// The field path.
        field: String,
    },
}

impl RenderError {
    /// The condition reason the cluster controller reports (`Validated=False`).
    pub fn reason(&self) -> Reason {
        match self {
            RenderError::ControlPlaneCount { .. } => Reason::MissingTemplate,
            _ => Reason::ValidationFailed,
        }
    }
}

/// Why `file:` entries are refused when the operator was started without a template root.
pub const NO_TEMPLATE_ROOT: &str =
    "file entries are disabled: the operator was started without --template-root";

/// Where `file:` references of this cluster's template are read from.
///
/// `deployment_root` is the directory the operator's deployment chose (`--template-root`);
/// without it every `file:` entry is refused. `spec.templateRoot` may only narrow that root: a
/// relative value names a subdirectory of it, an absolute one must lie inside it (checked on
/// the resolved path, so symlinks cannot widen it). A `spec.templateRoot` that fails these
/// checks refuses every file with a message saying why, so only templates that use files are
/// affected.
pub fn file_resolver(cluster: &OmniCluster, deployment_root: Option<&Path>) -> FileResolver {
    let Some(root) = deployment_root else {
        return FileResolver::disabled(NO_TEMPLATE_ROOT);
    };
    match cluster.spec.template_root.as_deref() {
        Some(narrower) if !narrower.is_empty() => narrow(root, narrower),
        _ => FileResolver::with_root(root),
    }
}

/// A resolver confined to `narrower` (`spec.templateRoot`) inside `root`.
fn narrow(root: &Path, narrower: &str) -> FileResolver {
    let refuse =
        |why: String| FileResolver::disabled(format!("spec.templateRoot {narrower:?} {why}"));
    let candidate = Path::new(narrower);
    if candidate
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return refuse("must not contain \"..\"".to_string());
    }
    let canonical_root = match root.canonicalize() {
        Ok(r) => r,
        Err(e) => {
            return refuse(format!(
                "cannot be used: template root {}: {e}",
                root.display()
            ));
        }
    };
    match canonical_root.join(candidate).canonicalize() {
        Ok(dir) if dir.starts_with(&canonical_root) => {
            FileResolver::with_root(dir).also_inside(canonical_root)
        }
        Ok(_) => refuse("is outside the operator's template root".to_string()),
        Err(e) => refuse(format!("cannot be used: {e}")),
    }
}

fn same_scope(
    cluster: &OmniCluster,
    namespace: Option<&String>,
    cluster_ref: &common::LocalObjectReference,
) -> bool {
    namespace == cluster.metadata.namespace.as_ref()
        && Some(&cluster_ref.name) == cluster.metadata.name.as_ref()
}

/// `systemExtensions` and `kernelArgs` are optional lists in Omni's template: left out, Omni
/// keeps what the machines have; an explicit `[]` clears. The field's presence in the custom
/// resource is passed through unchanged (see docs/decisions.md).
fn optional_list(list: Option<&Vec<String>>) -> Option<Vec<String>> {
    list.cloned()
}

/// `kernelArgs: []` where Omni allows no kernel arguments at all (a machine-class set, or the
/// cluster level of a cluster with a machine-class set) has nothing to clear, and Omni would
/// refuse the whole template for it; the original operator dropped it, so it stays dropped
/// and such manifests keep applying. A non-empty list there is still refused by validation.
fn kernel_args_where_allowed(list: Option<&Vec<String>>, allowed: bool) -> Option<Vec<String>> {
    match list {
        Some(args) if args.is_empty() && !allowed => None,
        other => optional_list(other),
    }
}

fn patches(list: Option<&Vec<common::Patch>>) -> Vec<Patch> {
    list.map(|l| {
        l.iter()
            .map(|p| Patch {
                file: p.file.clone().unwrap_or_default(),
                name: p.name.clone().unwrap_or_default(),
                id_override: p.id_override.clone().unwrap_or_default(),
                labels: p.labels.clone().unwrap_or_default(),
                annotations: p.annotations.clone().unwrap_or_default(),
                inline: p.inline.clone(),
            })
            .collect()
    })
    .unwrap_or_default()
}

fn machine_set(fields: &MachineSetFields) -> MachineSet {
    MachineSet {
        labels: fields.labels.clone().unwrap_or_default(),
        annotations: fields.annotations.clone().unwrap_or_default(),
        machines: fields.machines.clone().unwrap_or_default(),
        machine_class: fields.machine_class.as_ref().map(|mc| MachineClass {
            name: mc.name.clone(),
            size: match &mc.size {
                MachineClassSize::Count(n) => Size::Count(*n),
                MachineClassSize::Keyword(k) => Size::Keyword(k.clone()),
            },
        }),
        patches: patches(fields.patches.as_ref()),
        system_extensions: optional_list(fields.system_extensions.as_ref()),
        kernel_args: kernel_args_where_allowed(
            fields.kernel_args.as_ref(),
            fields.machine_class.is_none(),
        ),
        ..MachineSet::default()
    }
}

fn strategy(
    object: &str,
    field: &str,
    s: Option<&workers::UpdateStrategy>,
) -> Result<Option<UpdateStrategy>, RenderError> {
    let Some(s) = s else { return Ok(None) };
    let rolling =
        match &s.rolling {
            None => None,
            Some(r) => Some(RollingStrategy {
                max_parallelism: r.max_parallelism.map(u32::try_from).transpose().map_err(
                    |_| RenderError::Negative {
                        object: object.to_string(),
                        field: format!("spec.{field}.rolling.maxParallelism"),
                    },
                )?,
            }),
        };
    Ok(Some(UpdateStrategy {
        kind: match s.type_ {
            None => String::new(),
            Some(StrategyType::Rolling) => "Rolling".into(),
            Some(StrategyType::Unset) => "Unset".into(),
        },
        rolling,
    }))
}

/// The children of one cluster a render uses: its one control plane, its workers by effective
/// set name and its machines by effective ID (both sorted, so the template is stable).
struct Selected<'a> {
    control_plane: &'a OmniControlPlane,
    workers: Vec<(String, &'a OmniWorkers)>,
    machines: Vec<(String, &'a OmniMachine)>,
}

/// The children among the slices that reference `cluster` from its namespace, checked against
/// what the template allows (exactly one control plane, no reserved worker set name).
fn select<'a>(
    cluster: &OmniCluster,
    control_planes: &'a [OmniControlPlane],
    workers: &'a [OmniWorkers],
    machines: &'a [OmniMachine],
) -> Result<Selected<'a>, RenderError> {
    let selected_cps: Vec<&OmniControlPlane> = control_planes
        .iter()
        .filter(|cp| {
            same_scope(
                cluster,
                cp.metadata.namespace.as_ref(),
                &cp.spec.cluster_ref,
            )
        })
        .collect();
    let [control_plane] = selected_cps.as_slice() else {
        return Err(RenderError::ControlPlaneCount {
            namespace: cluster.metadata.namespace.clone().unwrap_or_default(),
            name: cluster.metadata.name.clone().unwrap_or_default(),
            found: selected_cps.len(),
        });
    };
    let mut workers: Vec<(String, &OmniWorkers)> = workers
        .iter()
        .filter(|w| same_scope(cluster, w.metadata.namespace.as_ref(), &w.spec.cluster_ref))
        .map(|w| (w.effective_worker_set_name(), w))
        .collect();
    workers.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.metadata.name.cmp(&b.1.metadata.name))
    });
    let mut machines: Vec<(String, &OmniMachine)> = machines
        .iter()
        .filter(|m| same_scope(cluster, m.metadata.namespace.as_ref(), &m.spec.cluster_ref))
        .map(|m| (m.effective_machine_id(), m))
        .collect();
    machines.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.metadata.name.cmp(&b.1.metadata.name))
    });
    Ok(Selected {
        control_plane,
        workers,
        machines,
    })
}

/// The `Cluster` document of `cluster`; `kernel_args` only where every machine set lists
/// static machines (`any_machine_class` false).
fn cluster_document(cluster: &OmniCluster, any_machine_class: bool) -> Cluster {
    let spec = &cluster.spec;
    let manifests = spec.kubernetes.manifests.as_deref().unwrap_or_default();
    Cluster {
        name: cluster.effective_cluster_name(),
        labels: spec.labels.clone().unwrap_or_default(),
        annotations: spec.annotations.clone().unwrap_or_default(),
        kubernetes: KubernetesCluster {
            version: spec.kubernetes.version.clone(),
            manifests: manifests.iter().map(manifest).collect(),
            healthchecks: spec
                .kubernetes
                .health_checks
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|h| HealthCheck {
                    name: h.name.clone().unwrap_or_default(),
                    id_override: h.id_override.clone().unwrap_or_default(),
                    job: h.job.clone(),
                    file: h.file.clone().unwrap_or_default(),
                    interval: h.interval.clone().unwrap_or_default(),
                    labels: h.labels.clone().unwrap_or_default(),
                    annotations: h.annotations.clone().unwrap_or_default(),
                })
                .collect(),
        },
        talos: TalosCluster {
            version: spec.talos.version.clone(),
        },
        features: spec.features.as_ref().map(|f| Features {
            enable_workload_proxy: f.enable_workload_proxy,
            use_embedded_discovery_service: f.use_embedded_discovery_service,
            disk_encryption: f.disk_encryption,
            enable_node_audit_skip: f.enable_node_audit_skip,
            disable_public_discovery_service: f.disable_public_discovery_service,
            backup_configuration: f
                .backup_configuration
                .as_ref()
                .map(|b| BackupConfiguration {
                    interval: b.interval.clone(),
                }),
        }),
        patches: patches(spec.patches.as_ref()),
        system_extensions: optional_list(spec.system_extensions.as_ref()),
        kernel_args: kernel_args_where_allowed(spec.kernel_args.as_ref(), !any_machine_class),
    }
}

/// One manifest of the cluster as the template writes it.
fn manifest(m: &crate::api::cluster::KubernetesManifest) -> Manifest {
    let file = m.file.clone().unwrap_or_default();
    Manifest {
        name: m.name.clone(),
        mode: m.mode.as_str().to_string(),
        // Without a file the inline content is always written, `[]` included; a YAML string
        // stays a string.
        inline: file.is_empty().then(|| match &m.inline {
            Some(serde_json::Value::Null) | None => serde_json::Value::Array(Vec::new()),
            Some(content) => content.clone(),
        }),
        file,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
    }
}

/// The `ControlPlane` document of `control_plane`, of a cluster in `namespace`.
fn control_plane_document(
    namespace: &str,
    control_plane: &OmniControlPlane,
) -> Result<MachineSet, RenderError> {
    let mut cp = machine_set(&control_plane.spec.machine_set);
    cp.bootstrap_spec = control_plane
        .spec
        .bootstrap_spec
        .as_ref()
        .map(|b| BootstrapSpec {
            cluster_uuid: b.cluster_uuid.clone(),
            snapshot: b.snapshot.clone(),
        });
    cp.upgrade_strategy = strategy(
        &format!(
            "OmniControlPlane {}/{}",
            namespace,
            control_plane.metadata.name.as_deref().unwrap_or_default()
        ),
        "upgradeStrategy",
        control_plane.spec.upgrade_strategy.as_ref(),
    )?;
    Ok(cp)
}

/// The `Workers` document of `workers` under its effective set name `name`.
fn workers_document(
    namespace: &str,
    name: &str,
    workers: &OmniWorkers,
) -> Result<MachineSet, RenderError> {
    let object = format!(
        "OmniWorkers {}/{}",
        namespace,
        workers.metadata.name.as_deref().unwrap_or_default()
    );
    let spec = &workers.spec;
    let mut set = machine_set(&spec.machine_set);
    set.name = name.to_string();
    set.update_strategy = strategy(&object, "updateStrategy", spec.update_strategy.as_ref())?;
    set.upgrade_strategy = strategy(&object, "upgradeStrategy", spec.upgrade_strategy.as_ref())?;
    set.delete_strategy = strategy(&object, "deleteStrategy", spec.delete_strategy.as_ref())?;
    Ok(set)
}

/// The `Machine` document of `machine` under its effective ID `id`.
fn machine_document(id: &str, machine: &OmniMachine) -> Machine {
    let s = &machine.spec;
    Machine {
        name: id.to_string(),
        labels: s.labels.clone().unwrap_or_default(),
        annotations: s.annotations.clone().unwrap_or_default(),
        locked: s.locked,
        install: s.install.as_ref().map(|i| Install {
            disk: i.disk.clone().unwrap_or_default(),
            disk_selector: i.disk_selector.clone().unwrap_or_default(),
        }),
        patches: patches(s.patches.as_ref()),
        system_extensions: optional_list(s.system_extensions.as_ref()),
        kernel_args: optional_list(s.kernel_args.as_ref()),
    }
}

/// Renders `cluster` with the children (from the same namespace) that reference it: select
/// the children, check what the template allows, build one document each, hash the YAML.
///
/// Children of other clusters or namespaces in the slices are ignored, so callers may pass
/// everything they listed.
pub fn render(
    cluster: &OmniCluster,
    control_planes: &[OmniControlPlane],
    workers: &[OmniWorkers],
    machines: &[OmniMachine],
) -> Result<Rendered, RenderError> {
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let selected = select(cluster, control_planes, workers, machines)?;
    let manifests = cluster
        .spec
        .kubernetes
        .manifests
        .as_deref()
        .unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for m in manifests {
        if !seen.insert(m.name.as_str()) {
            return Err(RenderError::DuplicateManifest(m.name.clone()));
        }
    }
    for (effective, w) in &selected.workers {
        if effective == RESERVED_WORKER_SET_NAME {
            return Err(RenderError::ReservedWorkerSetName(
                w.metadata.name.clone().unwrap_or_default(),
            ));
        }
    }
    let any_machine_class = selected
        .control_plane
        .spec
        .machine_set
        .machine_class
        .is_some()
        || selected
            .workers
            .iter()
            .any(|(_, w)| w.spec.machine_set.machine_class.is_some());

    let mut documents = Vec::with_capacity(2 + selected.workers.len() + selected.machines.len());
    documents.push(Document::Cluster(cluster_document(
        cluster,
        any_machine_class,
    )));
    documents.push(Document::ControlPlane(control_plane_document(
        &namespace,
        selected.control_plane,
    )?));
    for (effective, w) in &selected.workers {
        documents.push(Document::Workers(workers_document(
            &namespace, effective, w,
        )?));
    }
    for (effective, m) in &selected.machines {
        documents.push(Document::Machine(machine_document(effective, m)));
    }

    let cluster_name = cluster.effective_cluster_name();
    let class = |fields: &MachineSetFields| fields.machine_class.as_ref().map(|c| c.name.clone());
    let mut machine_sets = vec![RenderedSet {
        id: format!("{cluster_name}-{RESERVED_WORKER_SET_NAME}"),
        kind: "OmniControlPlane",
        name: selected
            .control_plane
            .metadata
            .name
            .clone()
            .unwrap_or_default(),
        machine_class: class(&selected.control_plane.spec.machine_set),
    }];
    machine_sets.extend(selected.workers.iter().map(|(effective, w)| RenderedSet {
        id: format!("{cluster_name}-{effective}"),
        kind: "OmniWorkers",
        name: w.metadata.name.clone().unwrap_or_default(),
        machine_class: class(&w.spec.machine_set),
    }));

    let template = Template { documents };
    let yaml = template.to_yaml();
    let hash = hex::encode(Sha256::digest(yaml.as_bytes()));
    Ok(Rendered {
        template,
        yaml,
        hash,
        control_plane_ref: selected
            .control_plane
            .metadata
            .name
            .clone()
            .unwrap_or_default(),
        workers_refs: selected
            .workers
            .iter()
            .map(|(_, w)| w.metadata.name.clone().unwrap_or_default())
            .collect(),
        machine_refs: selected
            .machines
            .iter()
            .map(|(_, m)| m.metadata.name.clone().unwrap_or_default())
            .collect(),
        machine_sets,
    })
}
