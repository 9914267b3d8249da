//! Types shared by several kinds: references, patches, machine-set fields, conditions, and the
//! schema helpers that keep every generated CRD schema structural.

use super::Reason;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

pub(crate) use omni_client::template::is_uuid;

use super::validation::{FieldError, Validation};

/// Reference to another object of this API in the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the referenced object (same namespace).
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Reference to a key in a Secret in the same namespace, where the key defaults to
/// `serviceAccountKey`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ServiceAccountSecretRef {
    /// Name of the Secret holding the Omni service-account key.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key within the Secret whose value is the base64 service-account key.
    #[serde(default = "default_service_account_key")]
    pub key: String,
}

/// Default key of the Omni service-account Secret.
pub(crate) fn default_service_account_key() -> String {
    "serviceAccountKey".to_string()
}

/// Reference to a kubeconfig stored in a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct KubeconfigSecretRef {
    /// Name of the Secret holding a workload-cluster kubeconfig.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key within the Secret whose value is the kubeconfig.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

/// Default Secret key for kubeconfigs.
pub(crate) fn default_kubeconfig_key() -> String {
    "kubeconfig".to_string()
}

/// A Talos machine-configuration patch, taken either from a file under the cluster's
/// `templateRoot` or inline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    /// Path of a patch file (at most 1 MiB), relative to the OmniCluster's `spec.templateRoot`
    /// or the operator's template root; `..` segments are rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Name of the patch in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Overrides the ID Omni derives for the patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_override: Option<String>,
    /// Labels for the patch resource in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations for the patch resource in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// The patch itself: a Talos strategic-merge machine-configuration document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_schema")]
    pub inline: Option<serde_json::Value>,
}

/// Machine-class based allocation of a machine set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct MachineClass {
    /// Name of the Omni machine class.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Number of machines: a positive count, or `unlimited` (also `infinity` or `∞`).
    pub size: MachineClassSize,
}

/// An integer count or a keyword; serialised as whichever the user wrote.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum MachineClassSize {
    /// A machine count.
    Count(i64),
    /// A keyword such as `unlimited`.
    Keyword(String),
}

impl JsonSchema for MachineClassSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MachineClassSize".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

/// Keywords Omni accepts for an unbounded machine-class size.
pub(crate) const UNLIMITED_SIZES: [&str; 3] = ["unlimited", "infinity", "∞"];

/// Fields shared by OmniControlPlane and OmniWorkers (a machine set): exactly one of `machines`
/// or `machineClass`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetFields {
    /// Labels for the machine set in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations for the machine set in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Omni machine IDs (UUIDs) assigned statically to this set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub machines: Option<Vec<String>>,
    /// Allocate machines from an Omni machine class instead of listing them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_class: Option<MachineClass>,
    /// Machine-configuration patches for every machine in the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Vec<Patch>>,
    /// Talos system extensions to install. Left out, Omni keeps the extensions the machines
    /// have; an explicit `[]` removes them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_extensions: Option<Vec<String>>,
    /// Extra kernel arguments (static machine sets only). Left out, Omni keeps the machines'
    /// arguments; an explicit `[]` clears them (ignored with `machineClass`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_args: Option<Vec<String>>,
}

/// The CEL rule both machine-set kinds carry on `spec`.
pub(crate) const MACHINE_SET_CEL_RULE: &str = "has(self.machines) != has(self.machineClass)";

/// Status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

/// One aspect of an object's state, in the shape of Kubernetes' `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When `status` last changed.
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: jiff::Timestamp,
    /// Machine-readable CamelCase reason for the last transition.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// Human-readable details.
    #[schemars(length(max = 32768))]
    pub message: String,
}

impl Condition {
    /// A condition stamped with `now` as its transition time (kept by `set_condition` when
    /// the status does not change).
    pub(crate) fn new(
        type_: &str,
        status: ConditionStatus,
        reason: Reason,
        message: impl Into<String>,
        observed_generation: Option<i64>,
        now: jiff::Timestamp,
    ) -> Self {
        Self {
            type_: type_.to_string(),
            status,
            observed_generation,
            last_transition_time: now,
            reason: reason.as_str().to_string(),
            message: message.into(),
        }
    }
}

impl Condition {
    /// The `Accepted` condition of an object that names the OmniCluster `cluster`: whether that
    /// cluster exists. Every kind that names a cluster reports it this one way.
    pub(crate) fn accepted(
        cluster: &str,
        exists: bool,
        observed_generation: Option<i64>,
        now: jiff::Timestamp,
    ) -> Self {
        let (reason, message) = if exists {
            (
                Reason::Accepted,
                format!("attached to OmniCluster {cluster:?}"),
            )
        } else {
            (Reason::MissingCluster, missing_cluster(cluster))
        };
        Self::new(
            condition_types::ACCEPTED,
            exists.into(),
            reason,
            message,
            observed_generation,
            now,
        )
    }
}

/// The message of a reference to the OmniCluster `cluster` that does not exist.
pub(crate) fn missing_cluster(cluster: &str) -> String {
    format!("OmniCluster {cluster:?} does not exist")
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// Inserts or updates the condition of `new.type_` the way apimachinery's
/// `SetStatusCondition` does: `lastTransitionTime` moves only when `status` changes; reason,
/// message and observedGeneration are overwritten; other types are untouched. Returns whether
/// anything changed, so callers can skip no-op status writes.
pub(crate) fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = new.last_transition_time;
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation != new.observed_generation {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of type `type_`; returns whether there was one.
pub(crate) fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The condition of the given type, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Condition type strings used across the API.
pub(crate) mod condition_types {
    /// Overall readiness.
    pub(crate) const READY: &str = "Ready";
    /// The object cannot make progress without a change of its spec (or of what it names);
    /// present only while `True` (kstatus).
    pub(crate) const STALLED: &str = "Stalled";
    /// The object is converging, or waiting for something to appear or become ready;
    /// present only while `True` (kstatus).
    pub(crate) const RECONCILING: &str = "Reconciling";
    /// `spec.suspend` is set: the operator leaves the object's target alone; present only
    /// while `True`.
    pub(crate) const SUSPENDED: &str = "Suspended";
    /// Omni answered.
    pub(crate) const REACHABLE: &str = "Reachable";
    /// A child found its parent cluster.
    pub(crate) const ACCEPTED: &str = "Accepted";
    /// The rendered template passed validation.
    pub(crate) const VALIDATED: &str = "Validated";
    /// Desired state was written to its destination.
    pub(crate) const SYNCED: &str = "Synced";
    /// A kubeconfig was exported.
    pub(crate) const EXPORTED: &str = "Exported";
    /// A Helm release was installed or upgraded.
    pub(crate) const RELEASED: &str = "Released";
    /// The live objects of a Helm release differ from it (inverted, like `Stalled`).
    pub(crate) const DRIFTED: &str = "Drifted";
    /// The last `helm test` of a release passed.
    pub(crate) const TEST_SUCCESS: &str = "TestSuccess";
}

/// Schema for a condition list: a list-map keyed by `type`, so server-side apply merges by type.
pub(crate) fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Schema for an RFC 3339 timestamp.
pub(crate) fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

/// Schema for arbitrary JSON kept verbatim by the API server.
pub(crate) fn any_json_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema for a string list with set semantics (the API server rejects duplicates).
pub(crate) fn string_set_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "string" },
        "minItems": 1,
        "x-kubernetes-list-type": "set",
    })
}

/// Schema for a [`DeletionPolicy`] field.
pub(crate) fn delete_orphan_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Delete", "Orphan"] })
}

/// What happens to an external object when the custom resource that manages it is deleted.
///
/// The CRD schema allows only these two spellings, and the API server checks the schema
/// before any webhook runs, so only data stored past the schema fails to decode (reported as
/// `InvalidObject`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Delete the external object (only if this resource owns it).
    Delete,
    /// Leave the external object in place.
    Orphan,
}

/// When a dependant of an OmniCluster (an export, a secret sync, a Helm release) first acts
/// (`spec.startWhen`). Once it has (a kubeconfig exported, a copy written, a release
/// installed), its cluster's later state does not hold it: an upgrade or a lost machine does
/// not stop rotations, drift repairs or upgrades.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartWhen {
    /// When the OmniCluster is `Ready`: Omni reports it running, every machine set ready with
    /// all its machines, the Kubernetes API ready.
    #[default]
    ClusterReady,
    /// As soon as Omni reports the cluster's Kubernetes API ready (`status.kubernetesAPIReady`):
    /// for what the cluster needs to become Ready, such as its CNI or a Secret the CNI reads.
    #[serde(rename = "KubernetesAPIReady")]
    KubernetesApiReady,
    /// As soon as the OmniCluster exists, whatever Omni says of it: the original operator's
    /// behaviour, for a kubeconfig Secret that does not depend on the cluster being up.
    ClusterExists,
}

impl StartWhen {
    /// The spellings the CRD schema allows.
    pub(crate) const VALUES: [&str; 3] = ["ClusterReady", "KubernetesAPIReady", "ClusterExists"];
}

/// Schema for a [`StartWhen`] field.
pub(crate) fn start_when_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": StartWhen::VALUES })
}

/// The problem of a `spec.serviceAccountName`, if it has one: a ServiceAccount's name is a DNS
/// subdomain (the CRD schema says so too; this covers objects stored past it).
pub(crate) fn service_account_name_error(
    name: Option<&str>,
) -> Option<super::validation::FieldError> {
    let name = name?;
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    (name.len() > 253 || !name.split('.').all(label_ok)).then(|| {
        super::validation::FieldError::invalid(
            "spec.serviceAccountName",
            name,
            "must be the name of a ServiceAccount (a DNS subdomain: lower-case letters, digits, '-' and '.')",
        )
    })
}

/// True when `s` is empty or only whitespace (Go's `strings.TrimSpace(s) == ""`).
pub(crate) fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// Checks the patch rule shared by clusters, machine sets and machines: exactly one of `file`
/// or `inline` per patch. `base` is the list path, e.g. `spec.patches`.
pub(crate) fn validate_patches(patches: Option<&[Patch]>, base: &str, out: &mut Validation) {
    for (i, patch) in patches.unwrap_or_default().iter().enumerate() {
        let path = format!("{base}[{i}]");
        let has_file = patch.file.as_deref().is_some_and(|f| !f.is_empty());
        // `inline: null` decodes to None, matching the original's "present with non-empty raw JSON".
        let has_inline = patch.inline.is_some();
        match (has_file, has_inline) {
            (false, false) => out.push(FieldError::required(
                &path,
                "patch requires exactly one of file or inline",
            )),
            (true, true) => out.push(FieldError::invalid(
                &path,
                patch.file.as_deref().unwrap_or_default(),
                "patch must not set both file and inline",
            )),
            _ => {}
        }
        if let Some(file) = patch.file.as_deref().filter(|f| !f.is_empty()) {
            validate_file_reference(&format!("{path}.file"), file, out);
        }
        // Omni's config-patch rules (fields and documents it owns, such as the cluster CAs and
        // the service-account key) are enforced here so such a patch never reaches Omni. The
        // content may hold keys, so the message names the field, never the value.
        if !has_file
            && let Some(inline) = &patch.inline
            && let Ok(content) = omni_client::template::inline_content(inline)
            && let Err(why) = omni_client::template::check_config_patch(&content)
        {
            out.push(FieldError::forbidden(format!("{path}.inline"), why));
        }
    }
}

/// Rules for a `file:` reference (patch or manifest): `..` segments are rejected because files
/// must stay inside the operator's template root; an absolute path only warns, since it works
/// when it lies inside that root.
pub(crate) fn validate_file_reference(path: &str, file: &str, out: &mut Validation) {
    if has_parent_segment(file) {
        out.push(FieldError::invalid(
            path,
            file,
            "must not contain \"..\" segments: files are read only inside the operator's template root",
        ));
    } else if file.starts_with('/') {
        out.warn(format!(
            "{path}: {file:?} is an absolute path; it is read only if it lies inside the operator's template root (prefer a path relative to it)"
        ));
    }
}

/// True when a `/`-separated path has a `..` segment.
pub(crate) fn has_parent_segment(file: &str) -> bool {
    file.split('/').any(|segment| segment == "..")
}

/// Machine-set rules shared by OmniControlPlane and OmniWorkers (paths under `spec`).
pub(crate) fn validate_machine_set(fields: &MachineSetFields, out: &mut Validation) {
    if let Some(class) = &fields.machine_class {
        match &class.size {
            MachineClassSize::Count(n) if *n <= 0 => out.push(FieldError::invalid(
                "spec.machineClass.size",
                n.to_string(),
                "machineClass size must be greater than zero",
            )),
            MachineClassSize::Keyword(k) if !UNLIMITED_SIZES.contains(&k.as_str()) => out.push(
                FieldError::not_supported("spec.machineClass.size", k, &UNLIMITED_SIZES),
            ),
            _ => {}
        }
    }
    let machines = fields.machines.as_deref().unwrap_or_default();
    for (i, id) in machines.iter().enumerate() {
        let path = format!("spec.machines[{i}]");
        if !is_uuid(id) {
            out.push(FieldError::invalid(&path, id, "machine ID must be a UUID"));
        }
        if machines.iter().filter(|other| *other == id).count() > 1 {
            out.push(FieldError::duplicate(&path, id));
        }
    }
    validate_patches(fields.patches.as_deref(), "spec.patches", out);
    if fields.machine_class.is_some()
        && let Some(args) = fields.kernel_args.as_ref().filter(|a| !a.is_empty())
    {
        out.push(FieldError::invalid(
            "spec.kernelArgs",
            args.join(" "),
            "kernelArgs are supported only for static machine sets",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_condition_follows_apimachinery() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let mut conds = Vec::new();
        let ready = |status: bool, reason: Reason, generation: i64, at| {
            Condition::new(
                "Ready",
                status.into(),
                reason,
                format!("m-{reason}"),
                Some(generation),
                at,
            )
        };
        assert!(set_condition(
            &mut conds,
            ready(false, Reason::SyncFailed, 1, t0)
        ));
        assert!(set_condition(
            &mut conds,
            Condition::new(
                "Synced",
                ConditionStatus::True,
                Reason::Synced,
                "",
                Some(1),
                t0
            )
        ));
        // Same status: reason/message/generation change, transition time stays.
        assert!(set_condition(
            &mut conds,
            ready(false, Reason::StatusFailed, 2, t1)
        ));
        let r = find_condition(&conds, "Ready").unwrap();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str(), r.observed_generation),
            ("StatusFailed", "m-StatusFailed", Some(2))
        );
        assert_eq!(r.last_transition_time, t0);
        // Identical update is a no-op.
        assert!(!set_condition(
            &mut conds,
            ready(false, Reason::StatusFailed, 2, t1)
        ));
        // Status flip moves the transition time.
        assert!(set_condition(
            &mut conds,
            ready(true, Reason::StatusFailed, 2, t1)
        ));
        assert_eq!(
            find_condition(&conds, "Ready")
                .unwrap()
                .last_transition_time,
            t1
        );
        assert_eq!(
            find_condition(&conds, "Ready").map(|c| c.status),
            Some(ConditionStatus::True)
        );
        assert!(find_condition(&conds, "Validated").is_none());
        assert_eq!(conds.len(), 2);
        assert_eq!(
            conds[1].type_, "Synced",
            "other types untouched and order kept"
        );
    }

    #[test]
    fn uuid_forms_accepted_by_go() {
        assert!(is_uuid("11111111-1111-4111-8111-111111111111"));
        assert!(is_uuid("urn:uuid:11111111-1111-4111-8111-111111111111"));
        assert!(is_uuid("URN:UUID:11111111-1111-4111-8111-111111111111"));
        assert!(is_uuid("{11111111-1111-4111-8111-111111111111}"));
        assert!(is_uuid("11111111111141118111111111111111"));
        assert!(is_uuid("ABCDEFAB-1111-4111-8111-111111111111"));
        assert!(!is_uuid("machine-1"));
        assert!(!is_uuid(""));
        assert!(!is_uuid("11111111-1111-4111-8111-11111111111g"));
        assert!(!is_uuid("11111111_1111_4111_8111_111111111111"));
        assert!(!is_uuid("(11111111-1111-4111-8111-111111111111)"));
    }

    /// Each policy enum decodes exactly the spellings its CRD schema allows and writes them back
    /// as they are; anything else does not decode.
    #[test]
    fn policy_enums_decode_the_values_of_their_schema() {
        use super::super::helm_release::{HelmDeletionPolicy, uninstall_orphan_schema};
        use super::super::kubeconfig_export::{ExportFormat, export_format_schema};

        fn check<T>(schema: Schema, refused: &str) -> Vec<T>
        where
            T: serde::de::DeserializeOwned + Serialize + std::fmt::Debug,
        {
            let values = schema.get("enum").and_then(serde_json::Value::as_array);
            let values = values.cloned().unwrap_or_default();
            assert!(!values.is_empty(), "{schema:?}");
            let decoded: Vec<T> = values
                .iter()
                .map(|v| serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}")))
                .collect();
            for (value, policy) in values.iter().zip(&decoded) {
                assert_eq!(serde_json::to_value(policy).ok().as_ref(), Some(value));
            }
            assert!(
                serde_json::from_value::<T>(refused.into()).is_err(),
                "{refused}"
            );
            decoded
        }
        let mut generator = SchemaGenerator::default();
        check::<DeletionPolicy>(delete_orphan_schema(&mut generator), "delete");
        check::<HelmDeletionPolicy>(uninstall_orphan_schema(&mut generator), "");
        let starts = check::<StartWhen>(start_when_schema(&mut generator), "KubernetesApiReady");
        assert_eq!(
            starts,
            [
                StartWhen::ClusterReady,
                StartWhen::KubernetesApiReady,
                StartWhen::ClusterExists
            ]
        );
        let formats = check::<ExportFormat>(export_format_schema(&mut generator), "ArgoCdCluster");
        for format in formats {
            assert_eq!(ExportFormat::parse(format.as_str()), Some(format));
            assert_eq!(
                serde_json::to_value(format).ok(),
                Some(format.as_str().into())
            );
        }
    }

    #[test]
    fn machine_class_size_keeps_int_or_string() {
        let n: MachineClassSize = serde_json::from_str("3").unwrap();
        assert_eq!(n, MachineClassSize::Count(3));
        let s: MachineClassSize = serde_json::from_str("\"unlimited\"").unwrap();
        assert_eq!(s, MachineClassSize::Keyword("unlimited".into()));
        assert_eq!(serde_json::to_string(&n).unwrap(), "3");
    }

    #[test]
    fn patch_rule() {
        let mut v = Validation::new();
        let patches = vec![
            Patch {
                file: Some("a.yaml".into()),
                ..Default::default()
            },
            Patch::default(),
            Patch {
                file: Some("a.yaml".into()),
                inline: Some(serde_json::json!({})),
                ..Default::default()
            },
            Patch {
                inline: Some(serde_json::json!({"machine": {}})),
                ..Default::default()
            },
            Patch {
                file: Some(String::new()),
                ..Default::default()
            },
        ];
        validate_patches(Some(&patches), "spec.patches", &mut v);
        let got: Vec<String> = v.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            vec![
                "spec.patches[1]: Required value: patch requires exactly one of file or inline".to_string(),
                "spec.patches[2]: Invalid value: \"a.yaml\": patch must not set both file and inline".to_string(),
                "spec.patches[4]: Required value: patch requires exactly one of file or inline".to_string(),
            ]
        );
    }
}
