//! Reading a cluster back out of Omni as a template: the inverse of translation, for taking
//! existing clusters under management.
//!
//! The export aims at a template that translates back into exactly the resources Omni holds,
//! so that syncing it changes nothing. Where that is impossible (a config patch for a machine
//! that no template machine set lists, content stored in Omni's compressed form, a label in
//! Omni's reserved namespace) the resource is listed in [`Exported::unexpressed`] with the
//! reason, instead of being guessed at: syncing the template would change or delete it.
//!
//! Unlike Omni's own `cluster template export`, contents are kept as strings (stored byte for
//! byte, where re-encoding a mapping would reformat it), generated patch IDs are recognised
//! (an `idOverride` only where the ID is not the one the template would generate), and
//! manifests, health checks, kernel arguments and install disks are exported too.

use std::collections::{BTreeMap, BTreeSet};

use super::api::BackendApi;
use super::files::FileResolver;
use super::model::{
    BackupConfiguration, BootstrapSpec, Cluster, Descriptors, Document, Features, HealthCheck,
    Install, KubernetesCluster, Machine, MachineClass, MachineSet, Manifest, Patch,
    RollingStrategy, Size, TalosCluster, Template, UpdateStrategy,
};
use super::state::TemplateState;
use super::sync::{SyncError, collect_owned};
use super::translate::{ResourceRef, Spec, keys, types};
use super::validate::{CONTROL_PLANES, RESERVED_PREFIX, is_uuid};
use super::yaml::{self, Node};
use crate::duration::GoDuration;
use crate::proto::cosi::resource::Resource;
use crate::proto::specs;
use crate::proto::specs::machine_set_spec::{
    self as set_spec, UpdateStrategy as WireStrategy, UpdateStrategyConfig,
};

/// A cluster as a template, and what the template cannot say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exported {
    /// The template: Cluster, ControlPlane, Workers sorted by name, Machines sorted by ID.
    pub template: Template,
    /// Each resource (or part of one) the template leaves out or cannot reproduce exactly:
    /// syncing the template would change or delete it.
    pub unexpressed: Vec<Unexpressed>,
}

/// A resource the template cannot reproduce exactly, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unexpressed {
    /// The resource (`Type(id)`), or `template` for a rule the whole template breaks.
    pub resource: String,
    /// Why, and what syncing the template would do to it.
    pub reason: String,
}

impl std::fmt::Display for Unexpressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.resource, self.reason)
    }
}

/// Why a cluster could not be exported at all.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Omni has no cluster of that name.
    #[error("cluster {0:?} does not exist in Omni")]
    NotFound(String),
    /// Reading Omni failed.
    #[error(transparent)]
    Read(#[from] SyncError),
    /// The cluster resource's spec does not decode.
    #[error("cluster {0:?}: its spec cannot be decoded")]
    UndecodableCluster(String),
}

/// Reads cluster `name` from Omni (what a template of it owns, as a sync would read it) and
/// exports it. `ignored_annotations` are annotations a writer adds to everything it syncs
/// (such as Omni's `managed-by-gitops-tools` or an owner stamp): they are left out of the
/// template without being reported.
pub async fn export_cluster<S: TemplateState>(
    state: &S,
    name: &str,
    api: BackendApi,
    ignored_annotations: &[&str],
) -> Result<Exported, ExportError> {
    let owned = collect_owned(state, name, api).await?;
    export_template(name, &owned, api, ignored_annotations)
}

/// Pure: the template of cluster `name` from the resources a template of it owns (as
/// [`export_cluster`] reads them).
pub fn export_template(
    name: &str,
    owned: &BTreeMap<ResourceRef, Resource>,
    api: BackendApi,
    ignored_annotations: &[&str],
) -> Result<Exported, ExportError> {
    let cluster_ref = ResourceRef::new(types::CLUSTER, name);
    let cluster = owned
        .get(&cluster_ref)
        .ok_or_else(|| ExportError::NotFound(name.to_string()))?;
    let Some(Spec::Cluster(spec)) = typed(cluster) else {
        return Err(ExportError::UndecodableCluster(name.to_string()));
    };
    let mut x = Exporter {
        cluster: name.to_string(),
        ignored: ignored_annotations.iter().map(|s| s.to_string()).collect(),
        unexpressed: Vec::new(),
    };
    let mut index = Index::new(owned);
    let cluster_doc = x.cluster_doc(cluster, spec, &index);
    let mut sets = Sets::default();
    for set in index.of_type(types::MACHINE_SET) {
        x.machine_set(set, &mut index, &mut sets);
    }
    for stray in std::mem::take(&mut index.nodes).into_values().flatten() {
        x.note(
            stray,
            "names a machine set the cluster does not have: syncing deletes it",
        );
    }
    x.machine_patches(api, &index, &mut sets);
    x.machine_extensions(&index, &mut sets);
    x.install_disks(&index, &mut sets);
    x.stray_set_patches(&index, &sets);
    Ok(x.finish(cluster_doc, sets))
}

/// What a template of the cluster owns, sorted by whom it belongs to: the cluster, a machine
/// set or a machine.
struct Index<'a> {
    owned: &'a BTreeMap<ResourceRef, Resource>,
    patches: Layers<&'a Resource>,
    extensions: Layers<&'a Resource>,
    /// The machine-set nodes by machine set; a set takes its own out.
    nodes: BTreeMap<String, Vec<&'a Resource>>,
    /// The template-written kernel arguments by machine.
    kernel_args: BTreeMap<String, &'a Resource>,
    /// The template-written install-disk configs by machine.
    install_disks: BTreeMap<String, &'a Resource>,
}

impl<'a> Index<'a> {
    fn new(owned: &'a BTreeMap<ResourceRef, Resource>) -> Self {
        let mut index = Self {
            owned,
            patches: Layers::default(),
            extensions: Layers::default(),
            nodes: BTreeMap::new(),
            kernel_args: BTreeMap::new(),
            install_disks: BTreeMap::new(),
        };
        for patch in index.of_type(types::CONFIG_PATCH) {
            index.patches.add(patch);
        }
        for ext in index.of_type(types::EXTENSIONS_CONFIGURATION) {
            index.extensions.add(ext);
        }
        for node in index.of_type(types::MACHINE_SET_NODE) {
            let set = label(node, keys::MACHINE_SET).unwrap_or_default();
            index.nodes.entry(set).or_default().push(node);
        }
        index.kernel_args = index.template_written(types::KERNEL_ARGS);
        index.install_disks = index.template_written(types::MACHINE_INSTALL_DISK_CONFIG);
        index
    }

    /// The resources of type `t`, in ID order.
    fn of_type(&self, t: &str) -> Vec<&'a Resource> {
        self.owned
            .iter()
            .filter(|(r, _)| r.resource_type == t)
            .map(|(_, res)| res)
            .collect()
    }

    /// The resources of type `t` a template wrote, by ID.
    fn template_written(&self, t: &str) -> BTreeMap<String, &'a Resource> {
        self.of_type(t)
            .into_iter()
            .filter(|r| annotation(r, keys::MANAGED_BY_TEMPLATES).is_some())
            .map(|r| (id(r), r))
            .collect()
    }
}

/// The machine sets exported so far and the machines they list.
#[derive(Default)]
struct Sets {
    control_plane: Option<MachineSet>,
    workers: Vec<MachineSet>,
    /// The Machine documents, by machine.
    machines: BTreeMap<String, Machine>,
    /// The machines a static machine set of the template lists.
    listed: BTreeSet<String>,
}

impl Sets {
    /// Whether the template has the machine set of ID `set` (`<cluster>-<name>`).
    fn has(&self, cluster: &str, set: &str) -> bool {
        (self.control_plane.is_some() && *set == format!("{cluster}-{CONTROL_PLANES}"))
            || self
                .workers
                .iter()
                .any(|w| format!("{cluster}-{}", w.name) == *set)
    }
}

/// A machine set's place in the cluster, from its ID and labels.
struct SetRole {
    /// The set's ID.
    id: String,
    /// Its name in the template (the ID without the cluster's name).
    name: String,
    /// Whether it is the control plane.
    control_plane: bool,
    /// The role label a translation writes on it.
    label: &'static str,
}

/// The steps of [`export_template`], each reporting what it cannot express, in the order a
/// reader of the template meets it.
impl Exporter {
    /// The Cluster document: its descriptors, versions, manifests, health checks, features,
    /// patches and extensions.
    fn cluster_doc(
        &mut self,
        cluster: &Resource,
        spec: specs::ClusterSpec,
        index: &Index<'_>,
    ) -> Cluster {
        let name = self.cluster.clone();
        let (labels, annotations) = self.descriptors(cluster, &[], &[keys::MANAGED_BY_TEMPLATES]);
        if annotation(cluster, keys::MANAGED_BY_TEMPLATES).is_none() {
            self.note(
                cluster,
                "was not created from a template: taking it over adds the annotation omni.sidero.dev/managed-by-cluster-templates",
            );
        }
        let features = spec.features.unwrap_or_default();
        let backup = match &spec.backup_configuration {
            None => None,
            Some(b) if b.enabled && b.interval.as_ref().is_some_and(|d| nanos(d) > 0) => {
                b.interval.as_ref().map(|d| BackupConfiguration {
                    interval: go_duration(d).into(),
                })
            }
            Some(_) => {
                self.note(
                    cluster,
                    "has an etcd backup configuration a template cannot state (disabled, or without an interval): syncing removes it",
                );
                None
            }
        };
        let any_feature = features.enable_workload_proxy
            || features.disk_encryption
            || features.use_embedded_discovery_service
            || features.enable_node_audit_skip
            || features.disable_public_discovery_service
            || backup.is_some();
        Cluster {
            name: name.clone(),
            labels,
            annotations,
            kubernetes: KubernetesCluster {
                version: format!("v{}", spec.kubernetes_version),
                manifests: self.manifests(&index.of_type(types::KUBERNETES_MANIFEST_GROUP)),
                healthchecks: self.health_checks(&index.of_type(types::KUBERNETES_HEALTH_CHECK)),
            },
            talos: TalosCluster {
                version: format!("v{}", spec.talos_version),
            },
            features: any_feature.then(|| Features {
                enable_workload_proxy: features.enable_workload_proxy,
                use_embedded_discovery_service: features.use_embedded_discovery_service,
                disk_encryption: features.disk_encryption,
                enable_node_audit_skip: features.enable_node_audit_skip,
                disable_public_discovery_service: features
                    .disable_public_discovery_service
                    .then_some(true),
                backup_configuration: backup,
            }),
            patches: self.patches(
                &index.patches.cluster,
                &format!("cluster-{name}"),
                200,
                &[keys::CLUSTER],
            ),
            kernel_args: None,
            system_extensions: self.extensions(
                index.extensions.cluster.as_slice(),
                &format!("schematic-{name}"),
                &[keys::CLUSTER],
            ),
        }
    }

    /// One machine set of the cluster into `sets`, with the machines it lists (taken out of
    /// `index.nodes`); left out, and reported, when a template cannot state it.
    fn machine_set(&mut self, set: &Resource, index: &mut Index<'_>, sets: &mut Sets) {
        let Some((role, spec)) = self.set_role(set) else {
            return;
        };
        let mut doc = self.set_doc(set, &role, &spec, index);
        let members = index.nodes.remove(&role.id).unwrap_or_default();
        if let Some(a) = &spec.machine_allocation {
            doc.machine_class = Some(MachineClass {
                name: a.name.clone(),
                size: if a.allocation_type == set_spec::machine_allocation::Type::Unlimited as i32 {
                    Size::Keyword("unlimited".into())
                } else {
                    Size::Count(i64::from(a.machine_count))
                },
            });
            for node in members {
                self.note(
                    node,
                    "is listed by hand in a machine set that allocates machines from a machine class: a template cannot state both, so syncing deletes it",
                );
            }
        } else {
            self.static_members(&mut doc, &role, members, index, sets);
        }
        if role.control_plane {
            sets.control_plane = Some(doc);
        } else {
            sets.workers.push(doc);
        }
    }

    /// Where machine set `set` belongs and its spec, or `None` (reported) when a template
    /// cannot state it: its spec does not decode, its ID is not the cluster's, or it lacks its
    /// role label.
    fn set_role(&mut self, set: &Resource) -> Option<(SetRole, specs::MachineSetSpec)> {
        let set_id = id(set);
        let Some(Spec::MachineSet(spec)) = typed(set) else {
            self.note(set, "its spec cannot be decoded: syncing replaces it");
            return None;
        };
        let control_plane = set_id == format!("{}-{CONTROL_PLANES}", self.cluster);
        let Some(name) = set_id.strip_prefix(&format!("{}-", self.cluster)) else {
            self.note(
                set,
                "its ID does not start with the cluster's name: syncing deletes it",
            );
            return None;
        };
        let role = if control_plane {
            keys::ROLE_CONTROLPLANE
        } else {
            keys::ROLE_WORKER
        };
        if label(set, role).is_none() {
            self.note(
                set,
                &format!("lacks the role label {role}: syncing deletes it"),
            );
            return None;
        }
        let role = SetRole {
            name: name.to_string(),
            id: set_id,
            control_plane,
            label: role,
        };
        Some((role, spec))
    }

    /// The MachineSet document of `set` without its machines: descriptors, strategies,
    /// bootstrap spec, patches and extensions, less what its role cannot state.
    fn set_doc(
        &mut self,
        set: &Resource,
        role: &SetRole,
        spec: &specs::MachineSetSpec,
        index: &Index<'_>,
    ) -> MachineSet {
        let (labels, annotations) = self.descriptors(set, &[keys::CLUSTER, role.label], &[]);
        let mut doc = MachineSet {
            name: if role.control_plane {
                String::new()
            } else {
                role.name.clone()
            },
            labels,
            annotations,
            update_strategy: self.strategy(
                set,
                "update",
                spec.update_strategy,
                spec.update_strategy_config.as_ref(),
                WireStrategy::Rolling,
            ),
            delete_strategy: self.strategy(
                set,
                "delete",
                spec.delete_strategy,
                spec.delete_strategy_config.as_ref(),
                WireStrategy::Unset,
            ),
            upgrade_strategy: self.strategy(
                set,
                "upgrade",
                spec.upgrade_strategy,
                spec.upgrade_strategy_config.as_ref(),
                WireStrategy::Unset,
            ),
            bootstrap_spec: spec.bootstrap_spec.as_ref().map(|b| BootstrapSpec {
                cluster_uuid: b.cluster_uuid.clone(),
                snapshot: b.snapshot.clone(),
            }),
            patches: self.patches(
                index
                    .patches
                    .machine_set
                    .get(&role.id)
                    .map_or(&[], Vec::as_slice),
                &role.id,
                400,
                &[keys::CLUSTER, keys::MACHINE_SET],
            ),
            system_extensions: self.extensions(
                index
                    .extensions
                    .machine_set
                    .get(&role.id)
                    .map_or(&[], Vec::as_slice),
                &format!("schematic-{}", role.id),
                &[keys::CLUSTER, keys::MACHINE_SET],
            ),
            ..MachineSet::default()
        };
        if spec.machine_class.is_some() {
            self.note(
                set,
                "uses the deprecated machineClass field, which templates do not write: syncing replaces it with machineAllocation",
            );
        }
        if role.control_plane && (doc.update_strategy.is_some() || doc.delete_strategy.is_some()) {
            self.note(
                set,
                "has an update or delete strategy, which a control plane cannot state in a template: syncing resets it",
            );
            doc.update_strategy = None;
            doc.delete_strategy = None;
        }
        if !role.control_plane && doc.bootstrap_spec.is_some() {
            self.note(
                set,
                "has a bootstrap spec, which only a control plane can state: syncing removes it",
            );
            doc.bootstrap_spec = None;
        }
        doc
    }

    /// The machines a static machine set lists (`members`, its nodes), sorted, each with a
    /// Machine document where it has more than its ID; kernel arguments go on the set when
    /// every machine has the same, else on each machine.
    fn static_members(
        &mut self,
        doc: &mut MachineSet,
        role: &SetRole,
        members: Vec<&Resource>,
        index: &Index<'_>,
        sets: &mut Sets,
    ) {
        let mut listed = Vec::new();
        for node in members {
            let machine = id(node);
            if !is_uuid(&machine) {
                self.note(
                    node,
                    "is not a machine UUID, which templates require: syncing deletes it",
                );
                continue;
            }
            self.node(
                node,
                &machine,
                role.label,
                role.control_plane,
                &mut sets.machines,
            );
            sets.listed.insert(machine.clone());
            listed.push(machine);
        }
        listed.sort();
        let args: Vec<Option<Vec<String>>> = listed
            .iter()
            .map(|m| index.kernel_args.get(m).and_then(|r| self.kernel_args(r)))
            .collect();
        let shared = args.first().cloned().flatten();
        if shared.is_some() && args.iter().all(|a| *a == shared) {
            doc.kernel_args = shared;
        } else {
            for (machine, args) in listed.iter().zip(args) {
                if let Some(args) = args {
                    machine_doc(&mut sets.machines, machine).kernel_args = Some(args);
                }
            }
        }
        doc.machines = listed;
    }

    /// The config patches of single machines: those of a machine the template lists go on its
    /// Machine document (on API 2 its install-disk patch as its install disk); those of any
    /// other machine are reported.
    fn machine_patches(&mut self, api: BackendApi, index: &Index<'_>, sets: &mut Sets) {
        for (machine, patches) in &index.patches.cluster_machine {
            if !sets.listed.contains(machine) {
                for patch in patches {
                    self.note(
                        patch,
                        &format!(
                            "is a config patch of machine {machine}, which no machine set of the template lists (a machine allocated from a machine class, or one outside the cluster), and Omni's own template export cannot express it either: syncing deletes it. To keep it, re-create it as a patch of the machine itself (label omni.sidero.dev/machine={machine} instead of the cluster labels), which templates do not own, or move its content into the machine set's patches"
                        ),
                    );
                }
                continue;
            }
            let prefix = format!("cm-{machine}");
            let mut regular = Vec::new();
            for patch in patches {
                if id(patch) == format!("000-cm-{machine}-install-disk")
                    && !api.install_disk_is_resource()
                {
                    match install_disk_of(patch) {
                        Some(disk) => {
                            machine_doc(&mut sets.machines, machine).install = Some(Install {
                                disk,
                                disk_selector: String::new(),
                            });
                        }
                        None => self.note(
                            patch,
                            "is an install-disk patch holding more than the install disk: syncing replaces it",
                        ),
                    }
                } else {
                    regular.push(*patch);
                }
            }
            let exported = self.patches(
                &regular,
                &prefix,
                400,
                &[keys::CLUSTER, keys::CLUSTER_MACHINE],
            );
            if !exported.is_empty() {
                machine_doc(&mut sets.machines, machine).patches = exported;
            }
        }
    }

    /// The extensions of single machines: on the Machine document of a machine the template
    /// lists, reported for any other machine.
    fn machine_extensions(&mut self, index: &Index<'_>, sets: &mut Sets) {
        for (machine, exts) in &index.extensions.cluster_machine {
            if !sets.listed.contains(machine) {
                for ext in exts {
                    self.note(
                        ext,
                        &format!("belongs to machine {machine}, which no machine set of the template lists: syncing deletes it"),
                    );
                }
                continue;
            }
            if let Some(list) = self.extensions(
                exts,
                &format!("schematic-{machine}"),
                &[keys::CLUSTER, keys::CLUSTER_MACHINE],
            ) {
                machine_doc(&mut sets.machines, machine).system_extensions = Some(list);
            }
        }
    }

    /// The install disks (API 3 resources) of the machines the template lists.
    fn install_disks(&mut self, index: &Index<'_>, sets: &mut Sets) {
        for (machine, disk) in &index.install_disks {
            if !sets.listed.contains(machine) {
                continue;
            }
            if let Some(Spec::MachineInstallDiskConfig(d)) = typed(disk) {
                self.unexpected_descriptors(disk, &[], &[keys::MANAGED_BY_TEMPLATES]);
                machine_doc(&mut sets.machines, machine).install = Some(Install {
                    disk: d.disk,
                    disk_selector: d.disk_selector,
                });
            }
        }
    }

    /// Reports the patches of machine sets the template does not have.
    fn stray_set_patches(&mut self, index: &Index<'_>, sets: &Sets) {
        for (set, patches) in &index.patches.machine_set {
            if !sets.has(&self.cluster, set) {
                for patch in patches {
                    self.note(patch, &format!("belongs to machine set {set:?}, which the cluster does not have: syncing deletes it"));
                }
            }
        }
    }

    /// The template of `cluster` and `sets` (Cluster, ControlPlane, Workers sorted by name,
    /// Machines sorted by ID) and what it does not express, a missing control plane and the
    /// template rules it breaks included.
    fn finish(mut self, cluster: Cluster, sets: Sets) -> Exported {
        let name = self.cluster.clone();
        let mut documents = vec![Document::Cluster(cluster)];
        match sets.control_plane {
            Some(cp) => documents.push(Document::ControlPlane(cp)),
            None => self.unexpressed.push(Unexpressed {
                resource: format!("{}({name}-{CONTROL_PLANES})", types::MACHINE_SET),
                reason: "the cluster has no control-plane machine set, which a template requires"
                    .into(),
            }),
        }
        let mut workers = sets.workers;
        workers.sort_by(|a, b| a.name.cmp(&b.name));
        documents.extend(workers.into_iter().map(Document::Workers));
        documents.extend(sets.machines.into_values().map(Document::Machine));
        let template = Template { documents };
        if let Err(errors) = template.validate(&FileResolver::disabled(
            "an exported template refers to no files",
        )) {
            for e in errors.0 {
                self.unexpressed.push(Unexpressed {
                    resource: "template".into(),
                    reason: e.to_string(),
                });
            }
        }
        Exported {
            template,
            unexpressed: self.unexpressed,
        }
    }
}

/// Resources of one type split by whom they belong to, from their labels.
struct Layers<T> {
    cluster: Vec<T>,
    machine_set: BTreeMap<String, Vec<T>>,
    cluster_machine: BTreeMap<String, Vec<T>>,
}

impl<T> Default for Layers<T> {
    fn default() -> Self {
        Self {
            cluster: Vec::new(),
            machine_set: BTreeMap::new(),
            cluster_machine: BTreeMap::new(),
        }
    }
}

impl<'a> Layers<&'a Resource> {
    fn add(&mut self, r: &'a Resource) {
        if let Some(machine) = label(r, keys::CLUSTER_MACHINE) {
            self.cluster_machine.entry(machine).or_default().push(r);
        } else if let Some(set) = label(r, keys::MACHINE_SET) {
            self.machine_set.entry(set).or_default().push(r);
        } else {
            self.cluster.push(r);
        }
    }
}

/// The export under way: the cluster, the annotations to leave out, what was not expressed.
struct Exporter {
    cluster: String,
    ignored: BTreeSet<String>,
    unexpressed: Vec<Unexpressed>,
}

impl Exporter {
    fn note(&mut self, r: &Resource, reason: &str) {
        self.unexpressed.push(Unexpressed {
            resource: reference(r).to_string(),
            reason: reason.to_string(),
        });
    }

    /// The user labels and annotations of `r`: everything but the `system_labels` and
    /// `system_annotations` a translation writes itself and the ignored annotations. A key in
    /// Omni's reserved namespace cannot be a template descriptor and is reported.
    fn descriptors(
        &mut self,
        r: &Resource,
        system_labels: &[&str],
        system_annotations: &[&str],
    ) -> (Descriptors, Descriptors) {
        let m = r.metadata.clone().unwrap_or_default();
        let mut labels = Descriptors::new();
        let mut reserved = Vec::new();
        for (k, v) in m.labels {
            if system_labels.contains(&k.as_str()) {
                continue;
            }
            if k.starts_with(RESERVED_PREFIX) {
                reserved.push(format!("label {k}"));
            } else {
                labels.insert(k, v);
            }
        }
        let mut annotations = Descriptors::new();
        for (k, v) in m.annotations {
            if system_annotations.contains(&k.as_str()) || self.ignored.contains(&k) {
                continue;
            }
            if k.starts_with(RESERVED_PREFIX) {
                reserved.push(format!("annotation {k}"));
            } else {
                annotations.insert(k, v);
            }
        }
        if !reserved.is_empty() {
            reserved.sort();
            self.note(
                r,
                &format!(
                    "carries {} in Omni's reserved namespace, which a template cannot set: syncing removes {}",
                    reserved.join(", "),
                    if reserved.len() == 1 { "it" } else { "them" }
                ),
            );
        }
        (labels, annotations)
    }

    /// Reports any label or annotation of `r` besides the expected ones (for resources whose
    /// template form has no descriptors).
    fn unexpected_descriptors(&mut self, r: &Resource, labels: &[&str], annotations: &[&str]) {
        let (l, a) = self.descriptors(r, labels, annotations);
        if !l.is_empty() || !a.is_empty() {
            let keys: Vec<String> = l.keys().chain(a.keys()).cloned().collect();
            self.note(
                r,
                &format!(
                    "carries {} that a template cannot set here: syncing removes them",
                    keys.join(", ")
                ),
            );
        }
    }

    /// The patches of one owner, in the order that reproduces their IDs: a patch whose ID is the
    /// one a template generates (`<weight>-<prefix>-<name>`) goes to the position of that
    /// weight, the others (`idOverride`) fill the gaps in ID order and follow. When the gaps
    /// cannot be filled that way, every patch keeps ID order and gets an `idOverride` wherever
    /// its position would generate another ID.
    fn patches(
        &mut self,
        resources: &[&Resource],
        prefix: &str,
        base_weight: usize,
        system_labels: &[&str],
    ) -> Vec<Patch> {
        let mut sorted: Vec<&Resource> = resources.to_vec();
        sorted.sort_by_key(|r| id(r));
        // Each usable patch with its name and content.
        let mut found = Vec::new();
        for r in sorted {
            let Some(data) = self.plain_data(r) else {
                continue;
            };
            let name = match annotation(r, keys::NAME) {
                Some(name) if !name.is_empty() => name,
                _ => {
                    self.note(
                        r,
                        "has no name annotation, which templates always write: syncing adds one",
                    );
                    id(r)
                }
            };
            found.push((r, name, data));
        }
        let generated = |weight: usize, name: &str| format!("{weight:03}-{prefix}-{name}");
        let order = generated_order(&found, base_weight, &generated)
            .unwrap_or_else(|| (0..found.len()).collect());
        let mut out = Vec::new();
        for index in order {
            let (r, name, data) = &found[index];
            let patch_id = id(r);
            let (labels, annotations) = self.descriptors(r, system_labels, &[keys::NAME]);
            out.push(Patch {
                id_override: if generated(base_weight + out.len(), name) == patch_id {
                    String::new()
                } else {
                    patch_id
                },
                name: name.clone(),
                labels,
                annotations,
                inline: Some(serde_json::Value::String(data.clone())),
                ..Patch::default()
            });
        }
        out
    }

    /// The plain content of a config patch or manifest group, or `None` (reported) when Omni
    /// holds it compressed or it does not decode.
    fn plain_data(&mut self, r: &Resource) -> Option<String> {
        let (data, compressed) = match typed(r) {
            Some(Spec::ConfigPatch(p)) => (p.data, p.compressed_data),
            Some(Spec::KubernetesManifestGroup(m)) => (m.data, m.compressed_data),
            _ => {
                self.note(r, "its spec cannot be decoded: syncing deletes it");
                return None;
            }
        };
        if !compressed.is_empty() {
            self.note(
                r,
                "Omni holds its content compressed, which this export cannot read: syncing deletes it. Copy its content from Omni into the exported manifests (with its ID as idOverride) before applying them",
            );
            return None;
        }
        Some(data)
    }

    fn manifests(&mut self, groups: &[&Resource]) -> Vec<Manifest> {
        let mut sorted = groups.to_vec();
        sorted.sort_by_key(|r| id(r));
        let mut out = Vec::new();
        for r in sorted {
            let group_id = id(r);
            let Some(Spec::KubernetesManifestGroup(spec)) = typed(r) else {
                self.note(r, "its spec cannot be decoded: syncing deletes it");
                continue;
            };
            let name = annotation(r, keys::NAME).unwrap_or_default();
            let expected = format!("{:03}-cluster-{}-{name}", 200 + out.len(), self.cluster);
            if name.is_empty() || expected != group_id {
                self.note(
                    r,
                    "its ID is not one a template generates for its position and name (manifests have no idOverride): syncing deletes it",
                );
                continue;
            }
            let mode = match specs::kubernetes_manifest_group_spec::Mode::try_from(spec.mode) {
                Ok(specs::kubernetes_manifest_group_spec::Mode::Full) => "full",
                Ok(specs::kubernetes_manifest_group_spec::Mode::OneTime) => "one-time",
                _ => {
                    self.note(r, "has no mode a template can state: syncing deletes it");
                    continue;
                }
            };
            let Some(data) = self.plain_data(r) else {
                continue;
            };
            let (labels, annotations) = self.descriptors(r, &[keys::CLUSTER], &[keys::NAME]);
            out.push(Manifest {
                name,
                mode: mode.into(),
                // No content is `inline: []`, which a manifest custom resource requires.
                inline: Some(if data.is_empty() {
                    serde_json::Value::Array(Vec::new())
                } else {
                    serde_json::Value::String(data)
                }),
                labels,
                annotations,
                ..Manifest::default()
            });
        }
        out
    }

    fn health_checks(&mut self, checks: &[&Resource]) -> Vec<HealthCheck> {
        let mut sorted = checks.to_vec();
        sorted.sort_by_key(|r| id(r));
        let prefix = format!("cluster-{}-", self.cluster);
        let mut out = Vec::new();
        for r in sorted {
            let Some(Spec::KubernetesHealthCheck(spec)) = typed(r) else {
                self.note(r, "its spec cannot be decoded: syncing deletes it");
                continue;
            };
            let check_id = id(r);
            let (name, id_override) = match check_id.strip_prefix(&prefix) {
                Some(name) if !name.is_empty() => (name.to_string(), String::new()),
                _ => (String::new(), check_id.clone()),
            };
            let (labels, annotations) = self.descriptors(r, &[keys::CLUSTER], &[]);
            out.push(HealthCheck {
                name,
                id_override,
                job: Some(serde_json::Value::String(spec.job)),
                interval: spec
                    .interval
                    .as_ref()
                    .filter(|d| nanos(d) > 0)
                    .map(|d| go_duration(d).into())
                    .unwrap_or_default(),
                labels,
                annotations,
                ..HealthCheck::default()
            });
        }
        out
    }

    /// The extensions of one owner: its one configuration with the expected ID and labels.
    fn extensions(
        &mut self,
        resources: &[&Resource],
        expected_id: &str,
        system_labels: &[&str],
    ) -> Option<Vec<String>> {
        let mut found = None;
        for r in resources {
            if id(r) != expected_id {
                self.note(
                    r,
                    &format!("is not the extensions configuration a template generates (that is {expected_id}): syncing deletes it"),
                );
                continue;
            }
            let Some(Spec::ExtensionsConfiguration(spec)) = typed(r) else {
                self.note(r, "its spec cannot be decoded: syncing deletes it");
                continue;
            };
            self.unexpected_descriptors(r, system_labels, &[]);
            found = Some(spec.extensions);
        }
        found
    }

    /// A machine of a static set: its descriptors and lock become a Machine document.
    fn node(
        &mut self,
        node: &Resource,
        machine: &str,
        role: &str,
        control_plane: bool,
        machines: &mut BTreeMap<String, Machine>,
    ) {
        let (labels, annotations) = self.descriptors(
            node,
            &[keys::CLUSTER, role, keys::MACHINE_SET],
            &[keys::LOCKED],
        );
        let locked = annotation(node, keys::LOCKED).is_some();
        if locked && control_plane {
            self.note(
                node,
                "is a locked control-plane machine, which a template cannot state: syncing unlocks it",
            );
        }
        if !labels.is_empty() || !annotations.is_empty() || (locked && !control_plane) {
            let doc = machine_doc(machines, machine);
            doc.labels = labels;
            doc.annotations = annotations;
            doc.locked = locked && !control_plane;
        }
    }

    /// The arguments of a machine's template-written KernelArgs.
    fn kernel_args(&mut self, r: &Resource) -> Option<Vec<String>> {
        self.unexpected_descriptors(r, &[], &[keys::MANAGED_BY_TEMPLATES]);
        match typed(r) {
            Some(Spec::KernelArgs(k)) => Some(k.args),
            _ => {
                self.note(r, "its spec cannot be decoded: syncing replaces it");
                None
            }
        }
    }

    /// A machine set's strategy: `None` when it is the template's default (no config).
    fn strategy(
        &mut self,
        set: &Resource,
        which: &str,
        value: i32,
        config: Option<&UpdateStrategyConfig>,
        default: WireStrategy,
    ) -> Option<UpdateStrategy> {
        let kind = match WireStrategy::try_from(value) {
            Ok(WireStrategy::Rolling) => "Rolling",
            Ok(WireStrategy::Unset) => "Unset",
            Err(_) => {
                self.note(
                    set,
                    &format!("has an unknown {which} strategy {value}: syncing resets it"),
                );
                return None;
            }
        };
        let rolling = match config {
            None => None,
            Some(UpdateStrategyConfig { rolling: Some(r) }) => Some(RollingStrategy {
                max_parallelism: Some(r.max_parallelism),
            }),
            Some(UpdateStrategyConfig { rolling: None }) => {
                self.note(
                    set,
                    &format!("has an empty {which} strategy configuration: syncing removes it"),
                );
                None
            }
        };
        if rolling.is_none() && value == default as i32 {
            return None;
        }
        Some(UpdateStrategy {
            kind: kind.into(),
            rolling,
        })
    }
}

/// The order of `found` (patches with their names, in ID order) in which every patch whose ID
/// a template generates sits at the position of its weight and the rest fill the gaps; `None`
/// when a gap stays (too few of the rest) or two patches claim one position.
fn generated_order<T>(
    found: &[(T, String, String)],
    base_weight: usize,
    generated: &impl Fn(usize, &str) -> String,
) -> Option<Vec<usize>>
where
    T: std::ops::Deref<Target = Resource>,
{
    let mut slots: BTreeMap<usize, usize> = BTreeMap::new();
    let mut rest = Vec::new();
    for (index, (r, name, _)) in found.iter().enumerate() {
        let patch_id = id(r);
        let weight = patch_id
            .get(..3)
            .and_then(|w| w.parse::<usize>().ok())
            .filter(|w| *w >= base_weight && generated(*w, name) == patch_id);
        match weight {
            Some(w) if !slots.contains_key(&(w - base_weight)) => {
                slots.insert(w - base_weight, index);
            }
            _ => rest.push(index),
        }
    }
    let mut rest = rest.into_iter();
    let last = slots.keys().next_back().copied();
    let mut order = Vec::with_capacity(found.len());
    if let Some(last) = last {
        for position in 0..=last {
            order.push(match slots.get(&position) {
                Some(index) => *index,
                None => rest.next()?,
            });
        }
    }
    order.extend(rest);
    Some(order)
}

/// The Machine document of `machine`, created on first use.
fn machine_doc<'a>(machines: &'a mut BTreeMap<String, Machine>, machine: &str) -> &'a mut Machine {
    machines
        .entry(machine.to_string())
        .or_insert_with(|| Machine {
            name: machine.to_string(),
            ..Machine::default()
        })
}

/// The disk of an install-disk patch that holds exactly what a template writes for it.
fn install_disk_of(patch: &Resource) -> Option<String> {
    let Some(Spec::ConfigPatch(p)) = typed(patch) else {
        return None;
    };
    if !p.compressed_data.is_empty() {
        return None;
    }
    let value: serde_json::Value = serde_saphyr::from_str(&p.data).ok()?;
    let disk = value
        .get("machine")?
        .get("install")?
        .get("disk")?
        .as_str()?
        .to_string();
    // What the template would write for this disk, byte for byte.
    let written = yaml::emit_document(
        &Node::Map(vec![(
            "machine".into(),
            Node::Map(vec![(
                "install".into(),
                Node::Map(vec![("disk".into(), Node::Str(disk.clone()))]),
            )]),
        )]),
        4,
    );
    (written == p.data).then_some(disk)
}

fn reference(r: &Resource) -> ResourceRef {
    let m = r.metadata.clone().unwrap_or_default();
    ResourceRef::new(m.r#type, m.id)
}

fn id(r: &Resource) -> String {
    r.metadata
        .as_ref()
        .map(|m| m.id.clone())
        .unwrap_or_default()
}

fn label(r: &Resource, key: &str) -> Option<String> {
    r.metadata.as_ref()?.labels.get(key).cloned()
}

fn annotation(r: &Resource, key: &str) -> Option<String> {
    r.metadata.as_ref()?.annotations.get(key).cloned()
}

fn typed(r: &Resource) -> Option<Spec> {
    let m = r.metadata.as_ref()?;
    let bytes = r.spec.as_ref().map_or(&[][..], |s| s.proto_spec.as_slice());
    Spec::decode(&m.r#type, bytes).ok()
}

fn nanos(d: &prost_types::Duration) -> i64 {
    d.seconds
        .saturating_mul(1_000_000_000)
        .saturating_add(i64::from(d.nanos))
}

/// A protobuf duration in Go's syntax, which parses back to the same duration.
fn go_duration(d: &prost_types::Duration) -> String {
    GoDuration::from_nanos(nanos(d)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::sync::to_wire;
    use crate::template::{DesiredResource, translate_for};

    /// A template with every part an export has to reproduce (shared with the operator's
    /// export tests).
    const RICH: &str = include_str!("testdata/round-trip.yaml");

    fn resources(template: &Template, api: BackendApi) -> BTreeMap<ResourceRef, Resource> {
        let files = FileResolver::disabled("no files");
        translate_for(template, &files, api)
            .unwrap_or_else(|e| panic!("translate: {e}"))
            .iter()
            .map(|d: &DesiredResource| (d.reference(), to_wire(d)))
            .collect()
    }

    type Pairs = Vec<(String, String)>;

    /// What a sync compares: type, ID, labels, annotations, spec.
    fn comparable(
        owned: &BTreeMap<ResourceRef, Resource>,
    ) -> BTreeMap<ResourceRef, (Pairs, Pairs, Option<Spec>)> {
        owned
            .iter()
            .map(|(r, res)| {
                let m = res.metadata.clone().unwrap_or_default();
                let sorted = |h: std::collections::HashMap<String, String>| {
                    let mut v: Vec<(String, String)> = h.into_iter().collect();
                    v.sort();
                    v
                };
                (
                    r.clone(),
                    (sorted(m.labels), sorted(m.annotations), typed(res)),
                )
            })
            .collect()
    }

    #[test]
    fn an_exported_template_translates_back_to_the_same_resources() {
        let template = Template::parse(RICH).unwrap_or_else(|e| panic!("{e}"));
        for api in [BackendApi::V2, BackendApi::V3] {
            let owned = resources(&template, api);
            let exported = export_template("prod-1", &owned, api, &[])
                .unwrap_or_else(|e| panic!("export: {e}"));
            assert_eq!(exported.unexpressed, Vec::new(), "{api:?}");
            let again = resources(&exported.template, api);
            assert_eq!(
                comparable(&again),
                comparable(&owned),
                "{api:?}\n{}",
                exported.template.to_yaml()
            );
            // Generated IDs are recognised: only the patch that had one keeps its override.
            let yaml = exported.template.to_yaml();
            assert_eq!(yaml.matches("idOverride").count(), 2, "{yaml}");
        }
    }

    #[test]
    fn what_a_template_cannot_say_is_listed() {
        let template = Template::parse(RICH).unwrap_or_else(|e| panic!("{e}"));
        let mut owned = resources(&template, BackendApi::V2);
        // A patch of a machine that a machine class allocated, made in Omni's UI.
        let patch = DesiredResource {
            id: "500-ui-made".into(),
            labels: [
                (keys::CLUSTER.to_string(), "prod-1".to_string()),
                (
                    keys::CLUSTER_MACHINE.to_string(),
                    "44444444-4444-4444-8444-444444444444".to_string(),
                ),
            ]
            .into(),
            annotations: [(keys::NAME.to_string(), "ui".to_string())].into(),
            spec: Spec::ConfigPatch(specs::ConfigPatchSpec {
                data: "machine: {}\n".into(),
                ..Default::default()
            }),
        };
        owned.insert(patch.reference(), to_wire(&patch));
        // Content Omni stores compressed.
        let compressed = DesiredResource {
            id: "201-cluster-prod-1-big".into(),
            labels: [(keys::CLUSTER.to_string(), "prod-1".to_string())].into(),
            annotations: [(keys::NAME.to_string(), "big".to_string())].into(),
            spec: Spec::ConfigPatch(specs::ConfigPatchSpec {
                compressed_data: vec![1, 2, 3],
                ..Default::default()
            }),
        };
        owned.insert(compressed.reference(), to_wire(&compressed));
        // A reserved label on a machine set, and bookkeeping annotations that are ignored.
        if let Some(m) = owned
            .get_mut(&ResourceRef::new(types::MACHINE_SET, "prod-1-gpu"))
            .and_then(|r| r.metadata.as_mut())
        {
            m.labels
                .insert("omni.sidero.dev/something".into(), String::new());
            m.annotations
                .insert("owner-stamp".into(), "ns/x/uid".into());
        }
        let exported = export_template("prod-1", &owned, BackendApi::V2, &["owner-stamp"])
            .unwrap_or_else(|e| panic!("export: {e}"));
        let listed: Vec<String> = exported
            .unexpressed
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(listed.len(), 3, "{listed:#?}");
        assert!(listed[0].starts_with("ConfigPatches.omni.sidero.dev(201-cluster-prod-1-big): Omni holds its content compressed"), "{listed:#?}");
        assert!(
            listed[1].starts_with(
                "MachineSets.omni.sidero.dev(prod-1-gpu): carries label omni.sidero.dev/something"
            ),
            "{listed:#?}"
        );
        assert!(
            listed[2].contains("500-ui-made")
                && listed[2]
                    .contains("label omni.sidero.dev/machine=44444444-4444-4444-8444-444444444444"),
            "{listed:#?}"
        );
        assert!(!exported.template.to_yaml().contains("owner-stamp"));
    }

    /// Generated IDs keep their positions and overrides fill the gaps; a gap nothing can fill
    /// falls back to ID order (with overrides where the position generates another ID).
    #[test]
    fn patches_keep_the_positions_their_ids_were_generated_at() {
        let patch = |id: &str, name: &str| {
            to_wire(&DesiredResource {
                id: id.into(),
                labels: BTreeMap::new(),
                annotations: [(keys::NAME.to_string(), name.to_string())].into(),
                spec: Spec::ConfigPatch(specs::ConfigPatchSpec::default()),
            })
        };
        let generated = |w: usize, name: &str| format!("{w:03}-p-{name}");
        let order = |ids: &[(&str, &str)]| {
            let resources: Vec<Resource> = ids.iter().map(|(id, n)| patch(id, n)).collect();
            let found: Vec<(&Resource, String, String)> = resources
                .iter()
                .zip(ids)
                .map(|(r, (_, n))| (r, n.to_string(), String::new()))
                .collect();
            generated_order(&found, 200, &generated)
        };
        // In ID order: 200-p-a, 202-p-c, 999-x (an override) → a, the override, c.
        assert_eq!(
            order(&[("200-p-a", "a"), ("202-p-c", "c"), ("999-x", "b")]),
            Some(vec![0, 2, 1])
        );
        assert_eq!(
            order(&[("200-p-a", "a"), ("202-p-c", "c")]),
            None,
            "a gap stays"
        );
        assert_eq!(order(&[("9-odd", "a")]), Some(vec![0]));
    }

    #[test]
    fn an_unknown_cluster_is_an_error() {
        let err = export_template("nope", &BTreeMap::new(), BackendApi::V2, &[])
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(r#"cluster "nope" does not exist in Omni"#)
        );
    }
}
