//! Template → the Omni resources it stands for (pure apart from reading referenced files).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use prost::Message as _;

use super::api::BackendApi;
use super::files::{FileError, FileResolver};
use super::model::{
    Cluster, Descriptors, Document, Machine, MachineSet, Patch, Template, UpdateStrategy,
};
use super::validate::{CONTROL_PLANES, allocation, healthcheck_id, inline_content, workers_name};
use super::yaml::{self, Node};
use crate::duration::DurationField;
use crate::proto::specs;

/// Namespace of every resource the template writes.
pub const NAMESPACE: &str = "default";

/// COSI type strings of the resources templates touch.
pub mod types {
    /// `Cluster`.
    pub const CLUSTER: &str = "Clusters.omni.sidero.dev";
    /// `ConfigPatch`.
    pub const CONFIG_PATCH: &str = "ConfigPatches.omni.sidero.dev";
    /// `MachineSet`.
    pub const MACHINE_SET: &str = "MachineSets.omni.sidero.dev";
    /// `MachineSetNode`.
    pub const MACHINE_SET_NODE: &str = "MachineSetNodes.omni.sidero.dev";
    /// `KernelArgs`.
    pub const KERNEL_ARGS: &str = "KernelArgs.omni.sidero.dev";
    /// `ExtensionsConfiguration`.
    pub const EXTENSIONS_CONFIGURATION: &str = "ExtensionsConfigurations.omni.sidero.dev";
    /// `KubernetesManifestGroup`.
    pub const KUBERNETES_MANIFEST_GROUP: &str = "KubernetesManifestGroups.omni.sidero.dev";
    /// `KubernetesHealthCheck`.
    pub const KUBERNETES_HEALTH_CHECK: &str = "KubernetesHealthChecks.omni.sidero.dev";
    /// `KubernetesHealthCheckStatus` (namespace `ephemeral`, read-only).
    pub const KUBERNETES_HEALTH_CHECK_STATUS: &str =
        "KubernetesHealthCheckStatuses.omni.sidero.dev";
    /// `MachineInstallDiskConfig` (backend API 3).
    pub const MACHINE_INSTALL_DISK_CONFIG: &str = "MachineInstallDiskConfigs.omni.sidero.dev";
    /// `Link` (SideroLink), torn down when machines are destroyed.
    pub const LINK: &str = "Links.omni.sidero.dev";
    /// `MachineStatus`.
    pub const MACHINE_STATUS: &str = "MachineStatuses.omni.sidero.dev";
    /// `ClusterStatus`.
    pub const CLUSTER_STATUS: &str = "ClusterStatuses.omni.sidero.dev";
    /// `ClusterKubernetesManifestsStatus` (ID: the cluster name).
    pub const CLUSTER_KUBERNETES_MANIFESTS_STATUS: &str =
        "ClusterKubernetesManifestsStatuses.omni.sidero.dev";
    /// `MachineSetStatus`.
    pub const MACHINE_SET_STATUS: &str = "MachineSetStatuses.omni.sidero.dev";
    /// `ControlPlaneStatus`.
    pub const CONTROL_PLANE_STATUS: &str = "ControlPlaneStatuses.omni.sidero.dev";
    /// `LoadBalancerStatus`.
    pub const LOAD_BALANCER_STATUS: &str = "LoadBalancerStatuses.omni.sidero.dev";
    /// `KubernetesUpgradeStatus`.
    pub const KUBERNETES_UPGRADE_STATUS: &str = "KubernetesUpgradeStatuses.omni.sidero.dev";
    /// `TalosUpgradeStatus`.
    pub const TALOS_UPGRADE_STATUS: &str = "TalosUpgradeStatuses.omni.sidero.dev";
    /// `ClusterMachineStatus`.
    pub const CLUSTER_MACHINE_STATUS: &str = "ClusterMachineStatuses.omni.sidero.dev";
    /// `MachineClass` (ID = class name).
    pub const MACHINE_CLASS: &str = "MachineClasses.omni.sidero.dev";
    /// `ClusterUUID` (ID = cluster name); a kubeconfig needs it.
    pub const CLUSTER_UUID: &str = "ClusterUUIDs.omni.sidero.dev";
    /// `TalosVersion` (ID = version without `v`).
    pub const TALOS_VERSION: &str = "TalosVersions.omni.sidero.dev";
    /// `PublicKey` (ID = key fingerprint; not reachable through the State API).
    pub const PUBLIC_KEY: &str = "PublicKeys.omni.sidero.dev";
}

/// Label and annotation keys templates write or read.
pub mod keys {
    /// Cluster label.
    pub const CLUSTER: &str = "omni.sidero.dev/cluster";
    /// Control-plane role label.
    pub const ROLE_CONTROLPLANE: &str = "omni.sidero.dev/role-controlplane";
    /// Worker role label.
    pub const ROLE_WORKER: &str = "omni.sidero.dev/role-worker";
    /// Machine-set label.
    pub const MACHINE_SET: &str = "omni.sidero.dev/machine-set";
    /// Cluster-machine label.
    pub const CLUSTER_MACHINE: &str = "omni.sidero.dev/cluster-machine";
    /// Machine label (machine-scoped patches).
    pub const MACHINE: &str = "omni.sidero.dev/machine";
    /// System-patch label.
    pub const SYSTEM_PATCH: &str = "omni.sidero.dev/system-patch";
    /// Nodes created by Omni's machine-set-node controller (not template-owned).
    pub const MANAGED_BY_MACHINE_SET_NODE_CONTROLLER: &str =
        "omni.sidero.dev/managed-by-machine-set-node-controller";
    /// Disconnected machine (MachineStatus).
    pub const DISCONNECTED: &str = "omni.sidero.dev/disconnected";
    /// Annotation marking resources written by templates.
    pub const MANAGED_BY_TEMPLATES: &str = "omni.sidero.dev/managed-by-cluster-templates";
    /// Annotation naming the GitOps tool that manages a resource; Omni's UI shows it.
    pub const MANAGED_BY_GITOPS_TOOLS: &str = "omni.sidero.dev/managed-by-gitops-tools";
    /// Annotation locking a machine.
    pub const LOCKED: &str = "omni.sidero.dev/locked";
    /// Patch / manifest name annotation.
    pub const NAME: &str = "name";
}

/// The spec of a template-written resource, as the typed protobuf message.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// `Clusters.omni.sidero.dev`.
    Cluster(specs::ClusterSpec),
    /// `ConfigPatches.omni.sidero.dev`.
    ConfigPatch(specs::ConfigPatchSpec),
    /// `MachineSets.omni.sidero.dev`.
    MachineSet(specs::MachineSetSpec),
    /// `MachineSetNodes.omni.sidero.dev`.
    MachineSetNode(specs::MachineSetNodeSpec),
    /// `KernelArgs.omni.sidero.dev`.
    KernelArgs(specs::KernelArgsSpec),
    /// `ExtensionsConfigurations.omni.sidero.dev`.
    ExtensionsConfiguration(specs::ExtensionsConfigurationSpec),
    /// `KubernetesManifestGroups.omni.sidero.dev`.
    KubernetesManifestGroup(specs::KubernetesManifestGroupSpec),
    /// `KubernetesHealthChecks.omni.sidero.dev`.
    KubernetesHealthCheck(specs::KubernetesHealthCheckSpec),
    /// `MachineInstallDiskConfigs.omni.sidero.dev` (backend API 3).
    MachineInstallDiskConfig(specs::MachineInstallDiskConfigSpec),
}

/// A stored spec could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SpecDecodeError {
    /// The resource type is not one templates write.
    #[error("resource type {0} is not written by templates")]
    UnknownType(String),
    /// The bytes are not the type's protobuf message.
    #[error("cannot decode {resource_type} spec: {source}")]
    Protobuf {
        /// The resource type.
        resource_type: String,
        /// The decoder error.
        source: prost::DecodeError,
    },
}

impl Spec {
    /// The COSI type this spec belongs to.
    pub(crate) fn resource_type(&self) -> &'static str {
        match self {
            Spec::Cluster(_) => types::CLUSTER,
            Spec::ConfigPatch(_) => types::CONFIG_PATCH,
            Spec::MachineSet(_) => types::MACHINE_SET,
            Spec::MachineSetNode(_) => types::MACHINE_SET_NODE,
            Spec::KernelArgs(_) => types::KERNEL_ARGS,
            Spec::ExtensionsConfiguration(_) => types::EXTENSIONS_CONFIGURATION,
            Spec::KubernetesManifestGroup(_) => types::KUBERNETES_MANIFEST_GROUP,
            Spec::KubernetesHealthCheck(_) => types::KUBERNETES_HEALTH_CHECK,
            Spec::MachineInstallDiskConfig(_) => types::MACHINE_INSTALL_DISK_CONFIG,
        }
    }

    /// Protobuf encoding for `Spec.proto_spec`.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Spec::Cluster(m) => m.encode_to_vec(),
            Spec::ConfigPatch(m) => m.encode_to_vec(),
            Spec::MachineSet(m) => m.encode_to_vec(),
            Spec::MachineSetNode(m) => m.encode_to_vec(),
            Spec::KernelArgs(m) => m.encode_to_vec(),
            Spec::ExtensionsConfiguration(m) => m.encode_to_vec(),
            Spec::KubernetesManifestGroup(m) => m.encode_to_vec(),
            Spec::KubernetesHealthCheck(m) => m.encode_to_vec(),
            Spec::MachineInstallDiskConfig(m) => m.encode_to_vec(),
        }
    }

    /// Decodes a stored `proto_spec` of `resource_type`.
    pub fn decode(resource_type: &str, bytes: &[u8]) -> Result<Spec, SpecDecodeError> {
        let err = |source| SpecDecodeError::Protobuf {
            resource_type: resource_type.to_string(),
            source,
        };
        Ok(match resource_type {
            types::CLUSTER => Spec::Cluster(specs::ClusterSpec::decode(bytes).map_err(err)?),
            types::CONFIG_PATCH => {
                Spec::ConfigPatch(specs::ConfigPatchSpec::decode(bytes).map_err(err)?)
            }
            types::MACHINE_SET => {
                Spec::MachineSet(specs::MachineSetSpec::decode(bytes).map_err(err)?)
            }
            types::MACHINE_SET_NODE => {
                Spec::MachineSetNode(specs::MachineSetNodeSpec::decode(bytes).map_err(err)?)
            }
            types::KERNEL_ARGS => {
                Spec::KernelArgs(specs::KernelArgsSpec::decode(bytes).map_err(err)?)
            }
            types::EXTENSIONS_CONFIGURATION => Spec::ExtensionsConfiguration(
                specs::ExtensionsConfigurationSpec::decode(bytes).map_err(err)?,
            ),
            types::KUBERNETES_MANIFEST_GROUP => Spec::KubernetesManifestGroup(
                specs::KubernetesManifestGroupSpec::decode(bytes).map_err(err)?,
            ),
            types::KUBERNETES_HEALTH_CHECK => Spec::KubernetesHealthCheck(
                specs::KubernetesHealthCheckSpec::decode(bytes).map_err(err)?,
            ),
            types::MACHINE_INSTALL_DISK_CONFIG => Spec::MachineInstallDiskConfig(
                specs::MachineInstallDiskConfigSpec::decode(bytes).map_err(err)?,
            ),
            other => return Err(SpecDecodeError::UnknownType(other.to_string())),
        })
    }
}

/// Identity of a resource in namespace `default`; displays as Omni prints it: `Type(id)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceRef {
    /// COSI type string.
    pub resource_type: String,
    /// Resource ID.
    pub id: String,
}

impl ResourceRef {
    /// A reference from type and ID.
    pub fn new(resource_type: impl Into<String>, id: impl Into<String>) -> Self {
        ResourceRef {
            resource_type: resource_type.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.resource_type, self.id)
    }
}

/// One resource a template wants to exist.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredResource {
    /// Resource ID.
    pub id: String,
    /// Metadata labels.
    pub labels: BTreeMap<String, String>,
    /// Metadata annotations.
    pub annotations: BTreeMap<String, String>,
    /// Typed spec.
    pub spec: Spec,
}

impl DesiredResource {
    /// The COSI type.
    pub fn resource_type(&self) -> &'static str {
        self.spec.resource_type()
    }

    /// Type and ID.
    pub fn reference(&self) -> ResourceRef {
        ResourceRef::new(self.resource_type(), self.id.clone())
    }
}

/// Rank of a type in apply order (Omni's order: clusters first, nodes and kernel args last;
/// the install disk before the node that makes the machine installable).
pub(crate) fn type_rank(resource_type: &str) -> u8 {
    match resource_type {
        types::CLUSTER => 1,
        types::EXTENSIONS_CONFIGURATION => 2,
        types::CONFIG_PATCH => 3,
        types::MACHINE_INSTALL_DISK_CONFIG => 4,
        types::KUBERNETES_MANIFEST_GROUP => 5,
        types::KUBERNETES_HEALTH_CHECK => 6,
        types::MACHINE_SET => 7,
        types::MACHINE_SET_NODE => 8,
        types::KERNEL_ARGS => 9,
        _ => 10,
    }
}

/// Why a (validated) template could not be turned into resources.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// The template has no single Cluster document.
    #[error("template must contain exactly one Cluster document")]
    NoCluster,
    /// A referenced file could not be read.
    #[error("{field}: {source}")]
    File {
        /// Where the file is referenced.
        field: String,
        /// Why it could not be read.
        source: FileError,
    },
    /// A field's value cannot be translated.
    #[error("{field}: {message}")]
    Invalid {
        /// Where.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Cluster-level kernel args cannot apply to a machine-class machine set.
    #[error(
        "machine set {machine_set:?}: kernelArgs cannot be defined at cluster level for this machine set since it uses a machine class"
    )]
    ClusterKernelArgsWithMachineClass {
        /// The machine-set ID.
        machine_set: String,
    },
    /// Two generated resources of one type share an ID.
    #[error("duplicate resource {0}")]
    DuplicateId(ResourceRef),
}

fn strip_v(version: &str) -> String {
    version.trim_start_matches('v').to_string()
}

fn to_proto_duration(
    field: &str,
    value: &DurationField,
) -> Result<Option<prost_types::Duration>, TranslateError> {
    let nanos = value
        .duration()
        .map_err(|e| TranslateError::Invalid {
            field: field.to_string(),
            message: e.to_string(),
        })?
        .as_nanos();
    if nanos <= 0 {
        return Ok(None);
    }
    // A positive i64 of nanoseconds always fits: seconds as i64, the rest below 10^9.
    Ok(Some(prost_types::Duration {
        seconds: nanos / 1_000_000_000,
        nanos: (nanos % 1_000_000_000) as i32,
    }))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn apply_descriptors(
    labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
    user_labels: &Descriptors,
    user_annotations: &Descriptors,
) {
    labels.extend(user_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    annotations.extend(user_annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
}

/// Translation state: the inputs every document needs and the resources produced so far.
struct Translator<'a> {
    files: &'a FileResolver,
    api: BackendApi,
    template: &'a Template,
    /// The template's Cluster document: names the resources of every other document.
    cluster: &'a Cluster,
    /// Which set each machine is in.
    machine_set_of: BTreeMap<&'a str, &'a MachineSet>,
    out: Vec<DesiredResource>,
}

impl Translator<'_> {
    fn content(
        &self,
        field: &str,
        file: &str,
        inline: Option<&serde_json::Value>,
    ) -> Result<String, TranslateError> {
        match inline {
            Some(value) if file.is_empty() => {
                inline_content(value).map_err(|message| TranslateError::Invalid {
                    field: format!("{field}.inline"),
                    message,
                })
            }
            _ => {
                let bytes = self
                    .files
                    .read(file)
                    .map_err(|source| TranslateError::File {
                        field: format!("{field}.file"),
                        source,
                    })?;
                String::from_utf8(bytes).map_err(|_| TranslateError::Invalid {
                    field: format!("{field}.file"),
                    message: "file is not UTF-8 text".into(),
                })
            }
        }
    }

    fn patches(
        &mut self,
        field: &str,
        patches: &[Patch],
        prefix: &str,
        base_weight: usize,
        base_labels: &BTreeMap<String, String>,
    ) -> Result<(), TranslateError> {
        for (i, p) in patches.iter().enumerate() {
            let name = if p.name.is_empty() { &p.file } else { &p.name };
            let weight = base_weight + i;
            let id = if p.id_override.is_empty() {
                format!("{weight:03}-{prefix}-{name}")
            } else {
                p.id_override.clone()
            };
            let data = self.content(&format!("{field}[{i}]"), &p.file, p.inline.as_ref())?;
            let mut l = base_labels.clone();
            let mut a = labels(&[(keys::NAME, name)]);
            apply_descriptors(&mut l, &mut a, &p.labels, &p.annotations);
            self.out.push(DesiredResource {
                id,
                labels: l,
                annotations: a,
                spec: Spec::ConfigPatch(specs::ConfigPatchSpec {
                    data,
                    ..Default::default()
                }),
            });
        }
        Ok(())
    }

    fn extensions(
        &mut self,
        id: String,
        labels: BTreeMap<String, String>,
        list: &Option<Vec<String>>,
    ) {
        if let Some(extensions) = list {
            self.out.push(DesiredResource {
                id,
                labels,
                annotations: BTreeMap::new(),
                spec: Spec::ExtensionsConfiguration(specs::ExtensionsConfigurationSpec {
                    extensions: extensions.clone(),
                }),
            });
        }
    }

    fn kernel_args(&mut self, machine: &str, args: &[String]) {
        self.out.push(DesiredResource {
            id: machine.to_string(),
            labels: BTreeMap::new(),
            annotations: labels(&[(keys::MANAGED_BY_TEMPLATES, "")]),
            spec: Spec::KernelArgs(specs::KernelArgsSpec {
                args: args.to_vec(),
            }),
        });
    }
}

fn strategy(s: &UpdateStrategy) -> i32 {
    match s.kind.as_str() {
        "Unset" => specs::machine_set_spec::UpdateStrategy::Unset as i32,
        _ => specs::machine_set_spec::UpdateStrategy::Rolling as i32,
    }
}

fn strategy_config(s: &UpdateStrategy) -> Option<specs::machine_set_spec::UpdateStrategyConfig> {
    s.rolling
        .as_ref()
        .map(|r| specs::machine_set_spec::UpdateStrategyConfig {
            rolling: Some(specs::machine_set_spec::RollingUpdateStrategyConfig {
                max_parallelism: r.max_parallelism.unwrap_or(0),
            }),
        })
}

/// Translates a template into the resources it describes, in template order (documents in
/// order; within a document: main resource, children, patches, extensions). Callers validate
/// first; this still reports what it cannot translate.
pub fn translate(
    template: &Template,
    files: &FileResolver,
) -> Result<Vec<DesiredResource>, TranslateError> {
    translate_for(template, files, BackendApi::V2)
}

/// [`translate`] for a given backend API version: on API 3 a machine's install disk becomes a
/// `MachineInstallDiskConfig` (ID = machine) instead of a config patch, and only there can it be
/// chosen by `install.diskSelector`.
pub fn translate_for(
    template: &Template,
    files: &FileResolver,
    api: BackendApi,
) -> Result<Vec<DesiredResource>, TranslateError> {
    let cluster = template.cluster().ok_or(TranslateError::NoCluster)?;
    let mut t = Translator {
        files,
        api,
        template,
        cluster,
        machine_set_of: machine_sets_by_machine(template),
        out: Vec::new(),
    };
    for doc in &template.documents {
        match doc {
            Document::Cluster(c) => t.cluster_document(c)?,
            Document::ControlPlane(ms) => t.machine_set_document(ms, true)?,
            Document::Workers(ms) => t.machine_set_document(ms, false)?,
            Document::Machine(m) => t.machine_document(m)?,
        }
    }
    check_unique_ids(&t.out)?;
    Ok(t.out)
}

/// Which set each machine is in, for kernel-arg inheritance.
fn machine_sets_by_machine(template: &Template) -> BTreeMap<&str, &MachineSet> {
    let mut machine_set_of = BTreeMap::new();
    for doc in &template.documents {
        match doc {
            Document::ControlPlane(ms) | Document::Workers(ms) => {
                for id in &ms.machines {
                    machine_set_of.insert(id.as_str(), ms);
                }
            }
            Document::Cluster(_) | Document::Machine(_) => {}
        }
    }
    machine_set_of
}

/// Two generated resources of one type with the same ID are an error.
fn check_unique_ids(resources: &[DesiredResource]) -> Result<(), TranslateError> {
    let mut seen = BTreeSet::new();
    for r in resources {
        if !seen.insert(r.reference()) {
            return Err(TranslateError::DuplicateId(r.reference()));
        }
    }
    Ok(())
}

/// The Cluster resource of a `Cluster` document.
fn cluster_resource(c: &Cluster) -> Result<DesiredResource, TranslateError> {
    let features = c.features.clone().unwrap_or_default();
    let backup = match &features.backup_configuration {
        Some(b) => to_proto_duration("features.backupConfiguration.interval", &b.interval)?.map(
            |interval| specs::EtcdBackupConf {
                interval: Some(interval),
                enabled: true,
            },
        ),
        None => None,
    };
    let mut l = BTreeMap::new();
    let mut a = labels(&[(keys::MANAGED_BY_TEMPLATES, "")]);
    apply_descriptors(&mut l, &mut a, &c.labels, &c.annotations);
    Ok(DesiredResource {
        id: c.name.clone(),
        labels: l,
        annotations: a,
        spec: Spec::Cluster(specs::ClusterSpec {
            kubernetes_version: strip_v(&c.kubernetes.version),
            talos_version: strip_v(&c.talos.version),
            features: Some(specs::cluster_spec::Features {
                enable_workload_proxy: features.enable_workload_proxy,
                disk_encryption: features.disk_encryption,
                use_embedded_discovery_service: features.use_embedded_discovery_service,
                enable_node_audit_skip: features.enable_node_audit_skip,
                disable_public_discovery_service: features
                    .disable_public_discovery_service
                    .unwrap_or(false),
            }),
            backup_configuration: backup,
        }),
    })
}

/// The MachineSet spec of a `ControlPlane` / `Workers` document (`set_id` names it in errors).
fn machine_set_spec(
    ms: &MachineSet,
    set_id: &str,
    cluster: &Cluster,
) -> Result<specs::MachineSetSpec, TranslateError> {
    let mut spec = specs::MachineSetSpec {
        update_strategy: ms.update_strategy.as_ref().map_or(
            specs::machine_set_spec::UpdateStrategy::Rolling as i32,
            strategy,
        ),
        update_strategy_config: ms.update_strategy.as_ref().and_then(strategy_config),
        delete_strategy: ms.delete_strategy.as_ref().map_or(0, strategy),
        delete_strategy_config: ms.delete_strategy.as_ref().and_then(strategy_config),
        upgrade_strategy: ms.upgrade_strategy.as_ref().map_or(0, strategy),
        upgrade_strategy_config: ms.upgrade_strategy.as_ref().and_then(strategy_config),
        bootstrap_spec: ms.bootstrap_spec.as_ref().map(|b| {
            specs::machine_set_spec::BootstrapSpec {
                cluster_uuid: b.cluster_uuid.clone(),
                snapshot: b.snapshot.clone(),
            }
        }),
        ..Default::default()
    };
    if let Some(mc) = &ms.machine_class {
        let (allocation_type, machine_count) =
            allocation(&mc.size).map_err(|message| TranslateError::Invalid {
                field: "machineClass.size".into(),
                message,
            })?;
        if cluster.kernel_args.is_some() {
            return Err(TranslateError::ClusterKernelArgsWithMachineClass {
                machine_set: set_id.to_string(),
            });
        }
        spec.machine_allocation = Some(specs::machine_set_spec::MachineAllocation {
            name: mc.name.clone(),
            machine_count,
            allocation_type,
        });
    }
    Ok(spec)
}

impl Translator<'_> {
    /// Cluster, its patches, manifests, health checks and extensions.
    fn cluster_document(&mut self, c: &Cluster) -> Result<(), TranslateError> {
        let name = self.cluster.name.as_str();
        let cluster_label = labels(&[(keys::CLUSTER, name)]);
        self.out.push(cluster_resource(c)?);
        let prefix = format!("cluster-{name}");
        self.patches("patches", &c.patches, &prefix, 200, &cluster_label)?;
        self.manifests(c, &prefix, &cluster_label)?;
        self.health_checks(c, &cluster_label)?;
        self.extensions(
            format!("schematic-{name}"),
            cluster_label,
            &c.system_extensions,
        );
        Ok(())
    }

    fn manifests(
        &mut self,
        c: &Cluster,
        prefix: &str,
        cluster_label: &BTreeMap<String, String>,
    ) -> Result<(), TranslateError> {
        for (i, m) in c.kubernetes.manifests.iter().enumerate() {
            let field = format!("kubernetes.manifests[{i}]");
            let mname = if m.name.is_empty() { &m.file } else { &m.name };
            let mode = match m.mode.as_str() {
                "full" => specs::kubernetes_manifest_group_spec::Mode::Full,
                "one-time" => specs::kubernetes_manifest_group_spec::Mode::OneTime,
                other => {
                    return Err(TranslateError::Invalid {
                        field: format!("{field}.mode"),
                        message: format!("unknown manifest mode {other:?}"),
                    });
                }
            };
            let data = self.content(&field, &m.file, m.inline.as_ref())?;
            let mut l = cluster_label.clone();
            let mut a = labels(&[(keys::NAME, mname)]);
            apply_descriptors(&mut l, &mut a, &m.labels, &m.annotations);
            self.out.push(DesiredResource {
                id: format!("{:03}-{prefix}-{mname}", 200 + i),
                labels: l,
                annotations: a,
                spec: Spec::KubernetesManifestGroup(specs::KubernetesManifestGroupSpec {
                    data,
                    mode: mode as i32,
                    ..Default::default()
                }),
            });
        }
        Ok(())
    }

    fn health_checks(
        &mut self,
        c: &Cluster,
        cluster_label: &BTreeMap<String, String>,
    ) -> Result<(), TranslateError> {
        for (i, h) in c.kubernetes.healthchecks.iter().enumerate() {
            let field = format!("kubernetes.healthchecks[{i}]");
            let job = if h.file.is_empty() {
                self.content(&field, "", h.job.as_ref())?
            } else {
                self.content(&field, &h.file, None)?
            };
            let interval = if h.interval.is_empty() {
                None
            } else {
                to_proto_duration(&format!("{field}.interval"), &h.interval)?
            };
            let mut l = cluster_label.clone();
            let mut a = BTreeMap::new();
            apply_descriptors(&mut l, &mut a, &h.labels, &h.annotations);
            self.out.push(DesiredResource {
                id: healthcheck_id(&self.cluster.name, &h.name, &h.id_override),
                labels: l,
                annotations: a,
                spec: Spec::KubernetesHealthCheck(specs::KubernetesHealthCheckSpec {
                    job,
                    interval,
                }),
            });
        }
        Ok(())
    }

    /// MachineSet, its nodes (with the kernel args of machines without a document), patches and
    /// extensions.
    fn machine_set_document(
        &mut self,
        ms: &MachineSet,
        control_plane: bool,
    ) -> Result<(), TranslateError> {
        let name = self.cluster.name.as_str();
        let (set_id, role) = if control_plane {
            (format!("{name}-{CONTROL_PLANES}"), keys::ROLE_CONTROLPLANE)
        } else {
            (format!("{name}-{}", workers_name(ms)), keys::ROLE_WORKER)
        };
        let mut l = labels(&[(keys::CLUSTER, name), (role, "")]);
        let mut a = BTreeMap::new();
        apply_descriptors(&mut l, &mut a, &ms.labels, &ms.annotations);
        let spec = machine_set_spec(ms, &set_id, self.cluster)?;
        self.out.push(DesiredResource {
            id: set_id.clone(),
            labels: l,
            annotations: a,
            spec: Spec::MachineSet(spec),
        });
        self.machine_set_nodes(ms, &set_id, role);
        let set_labels = labels(&[(keys::CLUSTER, name), (keys::MACHINE_SET, &set_id)]);
        self.patches("patches", &ms.patches, &set_id, 400, &set_labels)?;
        self.extensions(
            format!("schematic-{set_id}"),
            set_labels,
            &ms.system_extensions,
        );
        Ok(())
    }

    fn machine_set_nodes(&mut self, ms: &MachineSet, set_id: &str, role: &str) {
        let (template, cluster) = (self.template, self.cluster);
        for machine in &ms.machines {
            let machine_doc = template.documents.iter().find_map(|d| match d {
                Document::Machine(m) if &m.name == machine => Some(m),
                _ => None,
            });
            let mut l = labels(&[
                (keys::CLUSTER, &cluster.name),
                (role, ""),
                (keys::MACHINE_SET, set_id),
            ]);
            let mut a = BTreeMap::new();
            if let Some(m) = machine_doc {
                apply_descriptors(&mut l, &mut a, &m.labels, &m.annotations);
                if m.locked {
                    a.insert(keys::LOCKED.to_string(), String::new());
                }
            }
            self.out.push(DesiredResource {
                id: machine.clone(),
                labels: l,
                annotations: a,
                spec: Spec::MachineSetNode(specs::MachineSetNodeSpec {}),
            });
            if machine_doc.is_none()
                && let Some(args) = ms.kernel_args.as_ref().or(cluster.kernel_args.as_ref())
            {
                self.kernel_args(machine, args);
            }
        }
    }

    /// The machine's install disk, patches, kernel args and extensions.
    fn machine_document(&mut self, m: &Machine) -> Result<(), TranslateError> {
        let machine_labels = labels(&[
            (keys::CLUSTER, &self.cluster.name),
            (keys::CLUSTER_MACHINE, &m.name),
        ]);
        self.install_disk(m, &machine_labels)?;
        self.patches(
            "patches",
            &m.patches,
            &format!("cm-{}", m.name),
            400,
            &machine_labels,
        )?;
        let set = self.machine_set_of.get(m.name.as_str());
        let args = m
            .kernel_args
            .as_ref()
            .or_else(|| set.and_then(|s| s.kernel_args.as_ref()))
            .or(self.cluster.kernel_args.as_ref());
        if let Some(args) = args {
            self.kernel_args(&m.name, args);
        }
        self.extensions(
            format!("schematic-{}", m.name),
            machine_labels,
            &m.system_extensions,
        );
        Ok(())
    }

    /// On backend API 3 a `MachineInstallDiskConfig`; before, the install-disk config patch
    /// (and no way to express a disk selector).
    fn install_disk(
        &mut self,
        m: &Machine,
        machine_labels: &BTreeMap<String, String>,
    ) -> Result<(), TranslateError> {
        let Some(install) = &m.install else {
            return Ok(());
        };
        if self.api.install_disk_is_resource()
            && (!install.disk.is_empty() || !install.disk_selector.is_empty())
        {
            self.out.push(DesiredResource {
                id: m.name.clone(),
                labels: BTreeMap::new(),
                annotations: labels(&[(keys::MANAGED_BY_TEMPLATES, "")]),
                spec: Spec::MachineInstallDiskConfig(specs::MachineInstallDiskConfigSpec {
                    disk_selector: install.disk_selector.clone(),
                    disk: install.disk.clone(),
                }),
            });
        } else if !install.disk_selector.is_empty() {
            return Err(TranslateError::Invalid {
                field: "install.diskSelector".into(),
                message: format!(
                    "needs Omni backend API version 3; the connected Omni speaks version {}",
                    self.api.version()
                ),
            });
        } else if !install.disk.is_empty() {
            let doc = Node::Map(vec![(
                "machine".into(),
                Node::Map(vec![(
                    "install".into(),
                    Node::Map(vec![("disk".into(), Node::Str(install.disk.clone()))]),
                )]),
            )]);
            let mut l = machine_labels.clone();
            l.insert(keys::SYSTEM_PATCH.into(), String::new());
            self.out.push(DesiredResource {
                id: format!("000-cm-{}-install-disk", m.name),
                labels: l,
                annotations: labels(&[(keys::NAME, "install-disk")]),
                spec: Spec::ConfigPatch(specs::ConfigPatchSpec {
                    data: yaml::emit_document(&doc, 4),
                    ..Default::default()
                }),
            });
        }
        Ok(())
    }
}

/// Sorts resources into apply order: by type rank, then by ID (Go leaves the order within a
/// type unspecified; ID order keeps runs reproducible).
pub fn sort_for_apply(resources: &mut [DesiredResource]) {
    resources.sort_by(|a, b| {
        type_rank(a.resource_type())
            .cmp(&type_rank(b.resource_type()))
            .then_with(|| a.id.cmp(&b.id))
    });
}
