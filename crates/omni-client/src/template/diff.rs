//! What each change of a plan does to its resource, field by field.
//!
//! A plan ([`super::Plan`]) says which resources are created, updated and deleted; a
//! [`ResourceChange`] keeps the resource as Omni holds it and as the template wants it, so
//! callers can list the fields that differ ([`ResourceChange::fields`]) and judge a change by
//! its typed spec (a machine set shrinking, a machine class changing).
//!
//! Content that may hold credentials (a config patch's or manifest group's data, a health
//! check's Job) is never shown: a field holding content displays as its size only, and
//! carries a SHA-256 of the bytes that callers may fold into a keyed hash of the plan (see
//! [`FieldValue::Content`]).

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};

use super::translate::{ResourceRef, Spec};
use crate::duration::GoDuration;
use crate::proto::cosi::resource::Resource;
use crate::proto::specs;

/// Phase value of live resources; a change shows the phase only when it is another one.
const PHASE_RUNNING: &str = "running";

/// What a change does to its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeAction {
    /// The resource does not exist yet.
    Create,
    /// The resource exists and differs (a release of a machine's kernel arguments included).
    Update,
    /// The resource is torn down and destroyed.
    Delete,
}

impl ChangeAction {
    /// The verb, as in `create`.
    pub fn verb(self) -> &'static str {
        match self {
            ChangeAction::Create => "create",
            ChangeAction::Update => "update",
            ChangeAction::Delete => "delete",
        }
    }
}

impl fmt::Display for ChangeAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.verb())
    }
}

/// The value of one field of a resource.
#[derive(Clone, PartialEq, Eq)]
pub enum FieldValue {
    /// A value shown as it is (versions, counts, label values, strategies).
    Text(String),
    /// Content that may hold credentials: only its size is shown. `sha256` tells two contents
    /// apart; it is for a keyed hash of the plan, never for display (a digest of a short
    /// secret can be guessed).
    Content {
        /// Size in bytes.
        len: usize,
        /// SHA-256 of the bytes.
        sha256: [u8; 32],
    },
}

impl FieldValue {
    fn content(bytes: &[u8]) -> Self {
        FieldValue::Content {
            len: bytes.len(),
            sha256: Sha256::digest(bytes).into(),
        }
    }

    /// A stable text form for hashing: the text itself, or the content's size and digest.
    pub fn canonical(&self) -> String {
        match self {
            FieldValue::Text(text) => format!("text:{text}"),
            FieldValue::Content { len, sha256 } => {
                format!("content:{len}:{}", hex::encode(sha256))
            }
        }
    }
}

impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Text(text) => f.write_str(text),
            FieldValue::Content { len, .. } => write!(f, "<{len} bytes>"),
        }
    }
}

// Written by hand so that not even a digest of content reaches logs through `{:?}`.
impl fmt::Debug for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Text(text) => write!(f, "{text:?}"),
            FieldValue::Content { len, .. } => write!(f, "<{len} bytes>"),
        }
    }
}

/// One field that a change sets, changes or removes. `path` is `labels.<key>`,
/// `annotations.<key>`, `metadata.phase` or `spec.<field>` (camelCase, as Omni's YAML shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    /// Which field.
    pub path: String,
    /// Its value in Omni; `None` when it has none.
    pub before: Option<FieldValue>,
    /// Its value once the change is applied; `None` when it is removed.
    pub after: Option<FieldValue>,
}

impl fmt::Display for FieldChange {
    /// `path: before → after`, `(none)` standing for a missing side.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side =
            |v: &Option<FieldValue>| v.as_ref().map_or("(none)".to_string(), |v| v.to_string());
        write!(
            f,
            "{}: {} → {}",
            self.path,
            side(&self.before),
            side(&self.after)
        )
    }
}

/// One resource of a plan: how Omni holds it (`None` for a create) and how it will be (`None`
/// for a delete).
#[derive(Clone)]
pub struct ResourceChange {
    /// What happens to it.
    pub action: ChangeAction,
    /// Which resource.
    pub resource: ResourceRef,
    before: Option<Resource>,
    after: Option<Resource>,
}

// Written by hand: the resources carry patch contents.
impl fmt::Debug for ResourceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceChange")
            .field("action", &self.action)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

fn reference(r: &Resource) -> ResourceRef {
    let m = r.metadata.clone().unwrap_or_default();
    ResourceRef::new(m.r#type, m.id)
}

impl ResourceChange {
    /// A resource to create, as it will be written.
    pub fn create(after: &Resource) -> Self {
        Self {
            action: ChangeAction::Create,
            resource: reference(after),
            before: None,
            after: Some(after.clone()),
        }
    }

    /// A resource to update from `before` (as Omni holds it) to `after`.
    pub fn update(before: &Resource, after: &Resource) -> Self {
        Self {
            action: ChangeAction::Update,
            resource: reference(after),
            before: Some(before.clone()),
            after: Some(after.clone()),
        }
    }

    /// A resource to delete, as Omni holds it.
    pub fn delete(before: &Resource) -> Self {
        Self {
            action: ChangeAction::Delete,
            resource: reference(before),
            before: Some(before.clone()),
            after: None,
        }
    }

    /// The typed spec as Omni holds it (`None` for a create, or when it does not decode).
    pub fn spec_before(&self) -> Option<Spec> {
        self.before.as_ref().and_then(typed_spec)
    }

    /// The typed spec once applied (`None` for a delete).
    pub fn spec_after(&self) -> Option<Spec> {
        self.after.as_ref().and_then(typed_spec)
    }

    /// The labels as Omni holds them (empty for a create).
    pub fn labels_before(&self) -> BTreeMap<String, String> {
        labels_of(self.before.as_ref())
    }

    /// The labels once applied (empty for a delete).
    pub fn labels_after(&self) -> BTreeMap<String, String> {
        labels_of(self.after.as_ref())
    }

    /// Every field whose value differs between Omni and the template, sorted by path. For a
    /// create that is every field the template sets, for a delete every field Omni holds.
    pub fn fields(&self) -> Vec<FieldChange> {
        let before = self.before.as_ref().map(flatten).unwrap_or_default();
        let mut after = self.after.as_ref().map(flatten).unwrap_or_default();
        let mut out = Vec::new();
        for (path, old) in before {
            let new = after.remove(&path);
            if new.as_ref() != Some(&old) {
                out.push(FieldChange {
                    path,
                    before: Some(old),
                    after: new,
                });
            }
        }
        out.extend(after.into_iter().map(|(path, new)| FieldChange {
            path,
            before: None,
            after: Some(new),
        }));
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }
}

fn labels_of(r: Option<&Resource>) -> BTreeMap<String, String> {
    r.and_then(|r| r.metadata.as_ref())
        .map(|m| m.labels.clone().into_iter().collect())
        .unwrap_or_default()
}

fn spec_bytes(r: &Resource) -> &[u8] {
    r.spec.as_ref().map_or(&[], |s| s.proto_spec.as_slice())
}

fn typed_spec(r: &Resource) -> Option<Spec> {
    let t = r
        .metadata
        .as_ref()
        .map(|m| m.r#type.as_str())
        .unwrap_or_default();
    Spec::decode(t, spec_bytes(r)).ok()
}

/// Every field of `r` that a change can touch, by path.
fn flatten(r: &Resource) -> BTreeMap<String, FieldValue> {
    let mut out = Fields::default();
    let m = r.metadata.clone().unwrap_or_default();
    if !m.phase.is_empty() && m.phase != PHASE_RUNNING {
        out.text("metadata.phase", m.phase);
    }
    for (k, v) in m.labels {
        out.text(&format!("labels.{k}"), v);
    }
    for (k, v) in m.annotations {
        out.text(&format!("annotations.{k}"), v);
    }
    match Spec::decode(&m.r#type, spec_bytes(r)) {
        Ok(spec) => spec_fields(&spec, &mut out),
        // A spec that does not decode is shown as content: it still differs from the template's.
        Err(_) => {
            out.0
                .insert("spec".into(), FieldValue::content(spec_bytes(r)));
        }
    }
    out.0
}

#[derive(Default)]
struct Fields(BTreeMap<String, FieldValue>);

impl Fields {
    fn text(&mut self, path: &str, value: impl Into<String>) {
        self.0
            .insert(path.to_string(), FieldValue::Text(value.into()));
    }
    fn flag(&mut self, path: &str, value: bool) {
        self.text(path, value.to_string());
    }
    fn list(&mut self, path: &str, items: &[String]) {
        self.text(
            path,
            serde_json::to_string(items).unwrap_or_else(|_| String::from("[]")),
        );
    }
    /// A data field: plain text in `data`, or Omni's compressed form in `compressedData`
    /// (only one of them is set).
    fn data(&mut self, data: &str, compressed: &[u8]) {
        if compressed.is_empty() {
            self.0
                .insert("spec.data".into(), FieldValue::content(data.as_bytes()));
        } else {
            self.0.insert(
                "spec.compressedData".into(),
                FieldValue::content(compressed),
            );
        }
    }
    fn strategy(
        &mut self,
        name: &str,
        value: i32,
        config: Option<&specs::machine_set_spec::UpdateStrategyConfig>,
    ) {
        let text = specs::machine_set_spec::UpdateStrategy::try_from(value)
            .map_or_else(|_| value.to_string(), |s| s.as_str_name().to_string());
        self.text(&format!("spec.{name}"), text);
        if let Some(rolling) = config.and_then(|c| c.rolling.as_ref()) {
            self.text(
                &format!("spec.{name}Config.rolling.maxParallelism"),
                rolling.max_parallelism.to_string(),
            );
        }
    }
    fn allocation(&mut self, name: &str, a: &specs::machine_set_spec::MachineAllocation) {
        self.text(&format!("spec.{name}.name"), a.name.clone());
        self.text(
            &format!("spec.{name}.machineCount"),
            a.machine_count.to_string(),
        );
        let kind = specs::machine_set_spec::machine_allocation::Type::try_from(a.allocation_type)
            .map_or_else(
                |_| a.allocation_type.to_string(),
                |t| t.as_str_name().to_string(),
            );
        self.text(&format!("spec.{name}.allocationType"), kind);
    }
}

fn duration_text(d: &prost_types::Duration) -> String {
    GoDuration::from_nanos(
        d.seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(d.nanos)),
    )
    .to_string()
}

fn spec_fields(spec: &Spec, out: &mut Fields) {
    match spec {
        Spec::Cluster(c) => {
            out.text("spec.kubernetesVersion", c.kubernetes_version.clone());
            out.text("spec.talosVersion", c.talos_version.clone());
            if let Some(f) = &c.features {
                out.flag("spec.features.enableWorkloadProxy", f.enable_workload_proxy);
                out.flag("spec.features.diskEncryption", f.disk_encryption);
                out.flag(
                    "spec.features.useEmbeddedDiscoveryService",
                    f.use_embedded_discovery_service,
                );
                out.flag(
                    "spec.features.enableNodeAuditSkip",
                    f.enable_node_audit_skip,
                );
                out.flag(
                    "spec.features.disablePublicDiscoveryService",
                    f.disable_public_discovery_service,
                );
            }
            if let Some(b) = &c.backup_configuration {
                out.flag("spec.backupConfiguration.enabled", b.enabled);
                if let Some(interval) = &b.interval {
                    out.text("spec.backupConfiguration.interval", duration_text(interval));
                }
            }
        }
        Spec::ConfigPatch(p) => out.data(&p.data, &p.compressed_data),
        Spec::MachineSet(s) => {
            out.strategy(
                "updateStrategy",
                s.update_strategy,
                s.update_strategy_config.as_ref(),
            );
            out.strategy(
                "deleteStrategy",
                s.delete_strategy,
                s.delete_strategy_config.as_ref(),
            );
            out.strategy(
                "upgradeStrategy",
                s.upgrade_strategy,
                s.upgrade_strategy_config.as_ref(),
            );
            if let Some(a) = &s.machine_allocation {
                out.allocation("machineAllocation", a);
            }
            if let Some(a) = &s.machine_class {
                out.allocation("machineClass", a);
            }
            if let Some(b) = &s.bootstrap_spec {
                out.text("spec.bootstrapSpec.clusterUUID", b.cluster_uuid.clone());
                out.text("spec.bootstrapSpec.snapshot", b.snapshot.clone());
            }
        }
        Spec::MachineSetNode(_) => {}
        Spec::KernelArgs(k) => out.list("spec.args", &k.args),
        Spec::ExtensionsConfiguration(e) => out.list("spec.extensions", &e.extensions),
        Spec::KubernetesManifestGroup(m) => {
            out.data(&m.data, &m.compressed_data);
            let mode = specs::kubernetes_manifest_group_spec::Mode::try_from(m.mode)
                .map_or_else(|_| m.mode.to_string(), |x| x.as_str_name().to_string());
            out.text("spec.mode", mode);
        }
        Spec::KubernetesHealthCheck(h) => {
            out.0
                .insert("spec.job".into(), FieldValue::content(h.job.as_bytes()));
            if let Some(interval) = &h.interval {
                out.text("spec.interval", duration_text(interval));
            }
        }
        Spec::MachineInstallDiskConfig(d) => {
            out.text("spec.disk", d.disk.clone());
            out.text("spec.diskSelector", d.disk_selector.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::cosi::resource::{Metadata, Spec as WireSpec};
    use crate::template::translate::types;
    use std::collections::HashMap;

    fn resource(t: &str, id: &str, labels: &[(&str, &str)], spec: &Spec) -> Resource {
        Resource {
            metadata: Some(Metadata {
                r#type: t.into(),
                id: id.into(),
                phase: "running".into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<HashMap<_, _>>(),
                ..Default::default()
            }),
            spec: Some(WireSpec {
                proto_spec: spec.encode(),
                yaml_spec: String::new(),
            }),
        }
    }

    fn set(count: u32) -> Spec {
        Spec::MachineSet(specs::MachineSetSpec {
            update_strategy: 1,
            machine_allocation: Some(specs::machine_set_spec::MachineAllocation {
                name: "gpu".into(),
                machine_count: count,
                allocation_type: 0,
            }),
            ..Default::default()
        })
    }

    #[test]
    fn an_update_lists_only_the_fields_that_differ() {
        let before = resource(
            types::MACHINE_SET,
            "c-w",
            &[("a", "1"), ("b", "2")],
            &set(3),
        );
        let after = resource(
            types::MACHINE_SET,
            "c-w",
            &[("a", "1"), ("c", "3")],
            &set(2),
        );
        let change = ResourceChange::update(&before, &after);
        let shown: Vec<String> = change.fields().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "labels.b: 2 → (none)",
                "labels.c: (none) → 3",
                "spec.machineAllocation.machineCount: 3 → 2",
            ]
        );
    }

    #[test]
    fn content_is_shown_by_size_only_and_told_apart_by_digest() {
        let patch = |data: &str| {
            resource(
                types::CONFIG_PATCH,
                "200-cluster-c-x",
                &[],
                &Spec::ConfigPatch(specs::ConfigPatchSpec {
                    data: data.into(),
                    ..Default::default()
                }),
            )
        };
        let change =
            ResourceChange::update(&patch("password: hunter2\n"), &patch("password: hunter3\n"));
        let fields = change.fields();
        assert_eq!(fields.len(), 1);
        let text = format!("{} {:?}", fields[0], fields[0]);
        assert!(!text.contains("hunter"), "{text}");
        assert_eq!(fields[0].to_string(), "spec.data: <18 bytes> → <18 bytes>");
        assert_ne!(
            fields[0].before.as_ref().map(FieldValue::canonical),
            fields[0].after.as_ref().map(FieldValue::canonical)
        );
        // Same content, no change.
        assert!(
            ResourceChange::update(&patch("a: 1\n"), &patch("a: 1\n"))
                .fields()
                .is_empty()
        );
    }

    #[test]
    fn creates_and_deletes_list_every_field_of_their_side() {
        let r = resource(
            types::KERNEL_ARGS,
            "m",
            &[],
            &Spec::KernelArgs(specs::KernelArgsSpec {
                args: vec!["console=ttyS0".into()],
            }),
        );
        let created = ResourceChange::create(&r).fields();
        assert_eq!(created.len(), 1);
        assert_eq!(
            created[0].to_string(),
            r#"spec.args: (none) → ["console=ttyS0"]"#
        );
        let deleted = ResourceChange::delete(&r).fields();
        assert_eq!(
            deleted[0].to_string(),
            r#"spec.args: ["console=ttyS0"] → (none)"#
        );
        assert_eq!(ResourceChange::delete(&r).resource.id, "m");
        assert!(ResourceChange::create(&r).spec_before().is_none());
    }

    #[test]
    fn a_phase_other_than_running_is_a_field() {
        let mut before = resource(types::MACHINE_SET, "c-w", &[], &set(1));
        if let Some(m) = before.metadata.as_mut() {
            m.phase = "tearingDown".into();
        }
        let after = resource(types::MACHINE_SET, "c-w", &[], &set(1));
        let shown: Vec<String> = ResourceChange::update(&before, &after)
            .fields()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["metadata.phase: tearingDown → (none)"]);
    }
}
