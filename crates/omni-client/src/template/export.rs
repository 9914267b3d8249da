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
    let by_type = |t: &str| -> Vec<&Resource> {
        owned
            .iter()
            .filter(|(r, _)| r.resource_type == t)
            .map(|(_, res)| res)
            .collect()
    };

    // Who each resource belongs to: the cluster, a machine set or a machine.
    let mut layers: Layers<&Resource> = Layers::default();
    for patch in by_type(types::CONFIG_PATCH) {
        layers.add(patch);
    }
    let mut extensions: Layers<&Resource> = Layers::default();
    for ext in by_type(types::EXTENSIONS_CONFIGURATION) {
        extensions.add(ext);
    }
    let mut nodes: BTreeMap<String, Vec<&Resource>> = BTreeMap::new();
    for node in by_type(types::MACHINE_SET_NODE) {
        let set = label(node, keys::MACHINE_SET).unwrap_or_default();
        nodes.entry(set).or_default().push(node);
    }
    let kernel_args: BTreeMap<String, &Resource> = by_type(types::KERNEL_ARGS)
        .into_iter()
        .filter(|r| annotation(r, keys::MANAGED_BY_TEMPLATES).is_some())
        .map(|r| (id(r), r))
        .collect();
    let install_disks: BTreeMap<String, &Resource> = by_type(types::MACHINE_INSTALL_DISK_CONFIG)
        .into_iter()
        .filter(|r| annotation(r, keys::MANAGED_BY_TEMPLATES).is_some())
        .map(|r| (id(r), r))
        .collect();

    // Cluster.
    let (labels, annotations) = x.descriptors(cluster, &[], &[keys::MANAGED_BY_TEMPLATES]);
    if annotation(cluster, keys::MANAGED_BY_TEMPLATES).is_none() {
        x.note(
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
            x.note(
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
    let cluster_doc = Cluster {
        name: name.to_string(),
        labels,
        annotations,
        kubernetes: KubernetesCluster {
            version: format!("v{}", spec.kubernetes_version),
            manifests: x.manifests(&by_type(types::KUBERNETES_MANIFEST_GROUP)),
            healthchecks: x.health_checks(&by_type(types::KUBERNETES_HEALTH_CHECK)),
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
        patches: x.patches(
            &layers.cluster,
            &format!("cluster-{name}"),
            200,
            &[keys::CLUSTER],
        ),
        kernel_args: None,
        system_extensions: x.extensions(
            extensions.cluster.as_slice(),
            &format!("schematic-{name}"),
            &[keys::CLUSTER],
        ),
    };

    // Machine sets and their machines.
    let mut control_plane = None;
    let mut workers = Vec::new();
    let mut machines: BTreeMap<String, Machine> = BTreeMap::new();
    let mut template_machines = BTreeSet::new();
    for set in by_type(types::MACHINE_SET) {
        let set_id = id(set);
        let Some(Spec::MachineSet(spec)) = typed(set) else {
            x.note(set, "its spec cannot be decoded: syncing replaces it");
            continue;
        };
        let is_control_plane = set_id == format!("{name}-{CONTROL_PLANES}");
        let Some(set_name) = set_id.strip_prefix(&format!("{name}-")) else {
            x.note(
                set,
                "its ID does not start with the cluster's name: syncing deletes it",
            );
            continue;
        };
        let role = if is_control_plane {
            keys::ROLE_CONTROLPLANE
        } else {
            keys::ROLE_WORKER
        };
        if label(set, role).is_none() {
            x.note(
                set,
                &format!("lacks the role label {role}: syncing deletes it"),
            );
            continue;
        }
        let (labels, annotations) = x.descriptors(set, &[keys::CLUSTER, role], &[]);
        let mut doc = MachineSet {
            name: if is_control_plane {
                String::new()
            } else {
                set_name.to_string()
            },
            labels,
            annotations,
            update_strategy: x.strategy(
                set,
                "update",
                spec.update_strategy,
                spec.update_strategy_config.as_ref(),
                WireStrategy::Rolling,
            ),
            delete_strategy: x.strategy(
                set,
                "delete",
                spec.delete_strategy,
                spec.delete_strategy_config.as_ref(),
                WireStrategy::Unset,
            ),
            upgrade_strategy: x.strategy(
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
            patches: x.patches(
                layers.machine_set.get(&set_id).map_or(&[], Vec::as_slice),
                &set_id,
                400,
                &[keys::CLUSTER, keys::MACHINE_SET],
            ),
            system_extensions: x.extensions(
                extensions
                    .machine_set
                    .get(&set_id)
                    .map_or(&[], Vec::as_slice),
                &format!("schematic-{set_id}"),
                &[keys::CLUSTER, keys::MACHINE_SET],
            ),
            ..MachineSet::default()
        };
        if spec.machine_class.is_some() {
            x.note(
                set,
                "uses the deprecated machineClass field, which templates do not write: syncing replaces it with machineAllocation",
            );
        }
        if is_control_plane && (doc.update_strategy.is_some() || doc.delete_strategy.is_some()) {
            x.note(
                set,
                "has an update or delete strategy, which a control plane cannot state in a template: syncing resets it",
            );
            doc.update_strategy = None;
            doc.delete_strategy = None;
        }
        if !is_control_plane && doc.bootstrap_spec.is_some() {
            x.note(
                set,
                "has a bootstrap spec, which only a control plane can state: syncing removes it",
            );
            doc.bootstrap_spec = None;
        }
        let members = nodes.remove(&set_id).unwrap_or_default();
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
                x.note(
                    node,
                    "is listed by hand in a machine set that allocates machines from a machine class: a template cannot state both, so syncing deletes it",
                );
            }
        } else {
            let mut listed = Vec::new();
            for node in members {
                let machine = id(node);
                if !is_uuid(&machine) {
                    x.note(
                        node,
                        "is not a machine UUID, which templates require: syncing deletes it",
                    );
                    continue;
                }
                x.node(node, &machine, role, is_control_plane, &mut machines);
                template_machines.insert(machine.clone());
                listed.push(machine);
            }
            listed.sort();
            // Kernel arguments: one list for the whole set when every machine has the same,
            // else each machine's own.
            let args: Vec<Option<Vec<String>>> = listed
                .iter()
                .map(|m| kernel_args.get(m).and_then(|r| x.kernel_args(r)))
                .collect();
            let shared = args.first().cloned().flatten();
            if shared.is_some() && args.iter().all(|a| *a == shared) {
                doc.kernel_args = shared;
            } else {
                for (machine, args) in listed.iter().zip(args) {
                    if let Some(args) = args {
                        machine_doc(&mut machines, machine).kernel_args = Some(args);
                    }
                }
            }
            doc.machines = listed;
        }
        if is_control_plane {
            control_plane = Some(doc);
        } else {
            workers.push(doc);
        }
    }
    for stray in nodes.into_values().flatten() {
        x.note(
            stray,
            "names a machine set the cluster does not have: syncing deletes it",
        );
    }

    // What belongs to single machines.
    for (machine, patches) in &layers.cluster_machine {
        if !template_machines.contains(machine) {
            for patch in patches {
                x.note(
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
                        machine_doc(&mut machines, machine).install = Some(Install {
                            disk,
                            disk_selector: String::new(),
                        });
                    }
                    None => x.note(
                        patch,
                        "is an install-disk patch holding more than the install disk: syncing replaces it",
                    ),
                }
            } else {
                regular.push(*patch);
            }
        }
        let exported = x.patches(
            &regular,
            &prefix,
            400,
            &[keys::CLUSTER, keys::CLUSTER_MACHINE],
        );
        if !exported.is_empty() {
            machine_doc(&mut machines, machine).patches = exported;
        }
    }
    for (machine, exts) in &extensions.cluster_machine {
        if !template_machines.contains(machine) {
            for ext in exts {
                x.note(
                    ext,
                    &format!("belongs to machine {machine}, which no machine set of the template lists: syncing deletes it"),
                );
            }
            continue;
        }
        if let Some(list) = x.extensions(
            exts,
            &format!("schematic-{machine}"),
            &[keys::CLUSTER, keys::CLUSTER_MACHINE],
        ) {
            machine_doc(&mut machines, machine).system_extensions = Some(list);
        }
    }
    for (machine, disk) in &install_disks {
        if !template_machines.contains(machine) {
            continue;
        }
        if let Some(Spec::MachineInstallDiskConfig(d)) = typed(disk) {
            x.unexpected_descriptors(disk, &[], &[keys::MANAGED_BY_TEMPLATES]);
            machine_doc(&mut machines, machine).install = Some(Install {
                disk: d.disk,
                disk_selector: d.disk_selector,
            });
        }
    }
    for (set, patches) in &layers.machine_set {
        let known = (control_plane.is_some() && *set == format!("{name}-{CONTROL_PLANES}"))
            || workers.iter().any(|w| format!("{name}-{}", w.name) == *set);
        if !known {
            for patch in patches {
                x.note(patch, &format!("belongs to machine set {set:?}, which the cluster does not have: syncing deletes it"));
            }
        }
    }

    let mut documents = vec![Document::Cluster(cluster_doc)];
    match control_plane {
        Some(cp) => documents.push(Document::ControlPlane(cp)),
        None => x.unexpressed.push(Unexpressed {
            resource: format!("{}({name}-{CONTROL_PLANES})", types::MACHINE_SET),
            reason: "the cluster has no control-plane machine set, which a template requires"
                .into(),
        }),
    }
    workers.sort_by(|a, b| a.name.cmp(&b.name));
    documents.extend(workers.into_iter().map(Document::Workers));
    documents.extend(machines.into_values().map(Document::Machine));
    let template = Template { documents };
    if let Err(errors) = template.validate(&FileResolver::disabled(
        "an exported template refers to no files",
    )) {
        for e in errors.0 {
            x.unexpressed.push(Unexpressed {
                resource: "template".into(),
                reason: e.to_string(),
            });
        }
    }
    Ok(Exported {
        template,
        unexpressed: x.unexpressed,
    })
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
