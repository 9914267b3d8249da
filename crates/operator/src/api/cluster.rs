//! OmniCluster: one Omni cluster, rendered together with its children into an Omni cluster
//! template and synced through an OmniConnection.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, LocalObjectReference, Patch, conditions_schema, date_time_schema,
    has_parent_segment, validate_file_reference, validate_patches,
};
use super::duration::{DurationField, GoDuration, short_interval_error};
use super::keys;
use super::validation::{FieldError, Validation};

/// Desired state of an OmniCluster. Exactly one OmniControlPlane must reference it; OmniWorkers
/// and OmniMachine objects are optional.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniCluster",
    plural = "omniclusters",
    singular = "omnicluster",
    namespaced,
    status = "OmniClusterStatus",
    shortname = "ocl",
    category = "omni",
    doc = "A Sidero Omni cluster managed through an Omni cluster template.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".status.clusterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.omniPhase"),
    printcolumn(
        name = "Ready Machines",
        type_ = "string",
        json_path = ".status.readyMachines"
    ),
    printcolumn(
        name = "Kubernetes",
        type_ = "string",
        json_path = ".status.kubernetesVersion",
        priority = 1
    ),
    printcolumn(
        name = "Talos",
        type_ = "string",
        json_path = ".status.talosVersion",
        priority = 1
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(name = "Plan", type_ = "string", json_path = ".status.plan.summary"),
    printcolumn(name = "Last Sync", type_ = "date", json_path = ".status.lastSyncTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OmniClusterSpec {
    /// Labels copied onto the Omni `Cluster` document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations copied onto the Omni `Cluster` document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// OmniConnection (same namespace) used to reach Omni.
    pub connection_ref: LocalObjectReference,
    /// Name of the cluster in Omni; defaults to `metadata.name`. It cannot change once the
    /// operator manages the Omni cluster (`status.clusterName` is set): to move to another
    /// Omni cluster, create a new OmniCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub cluster_name: Option<String>,
    /// Kubernetes version and cluster manifests.
    pub kubernetes: KubernetesSpec,
    /// Talos Linux version.
    pub talos: TalosSpec,
    /// Optional Omni cluster features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<ClusterFeatures>,
    /// Machine-configuration patches applied to every machine of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Vec<Patch>>,
    /// Talos system extensions for every machine. Left out, Omni keeps the extensions the
    /// machines have; an explicit `[]` removes them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_extensions: Option<Vec<String>>,
    /// Kernel arguments for every machine; only valid when all machine sets list static machines.
    /// Left out, Omni keeps the machines' arguments; an explicit `[]` clears them (ignored, as
    /// before, when a machine set uses a machine class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_args: Option<Vec<String>>,
    /// Subdirectory of the operator's template root (`--template-root`) that file-backed
    /// patches and manifests resolve under: relative to that root, or an absolute path inside
    /// it. It can only narrow the root, never widen it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_root: Option<String>,
    /// What deleting this object does to the cluster in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_policy: Option<DeletePolicy>,
    /// How often the template is re-synced to Omni, in Go duration syntax (`5m`, `1h`).
    #[serde(default = "default_sync_interval")]
    pub sync_interval: DurationField,
    /// Stop syncing to Omni while keeping the object, its status and its finalizer.
    /// Deletion still removes the Omni cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Whether, and when, planned changes are written to Omni: observe only (`mode: Plan`),
    /// or hold destructive plans for approval (`destructive: RequireApproval`). Unset: every
    /// plan is applied (docs/plan.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_policy: Option<super::plan::ChangePolicy>,
}

/// Default `spec.syncInterval`.
pub(crate) fn default_sync_interval() -> DurationField {
    "5m".into()
}

/// Interval used when `syncInterval` is zero, negative or unparseable.
pub(crate) const DEFAULT_SYNC_INTERVAL: GoDuration = GoDuration::from_secs(300);

/// Kubernetes settings of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesSpec {
    /// Kubernetes version, e.g. `v1.35.0`.
    #[schemars(regex(pattern = r"^v[0-9]+\.[0-9]+\.[0-9]+$"))]
    pub version: String,
    /// Manifests Omni applies to the workload cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Vec<KubernetesManifest>>,
    /// Health checks Omni runs in the workload cluster while it upgrades Talos (Omni v1.9): a
    /// failing check holds the upgrade until it passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_checks: Option<Vec<KubernetesHealthCheck>>,
}

/// A health check: a Kubernetes Job Omni runs in the workload cluster; the Job succeeding
/// means healthy. Exactly one of `job` and `file`; at least one of `name` and `idOverride`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesHealthCheck {
    /// Name of the check; the Omni resource is `cluster-<cluster>-<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Replaces the Omni resource ID derived from `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_override: Option<String>,
    /// The Job manifest, inline (`kind: Job`). Omni names the Job `omni-healthcheck-<id>`
    /// and runs it in the manifest's namespace (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::any_json_schema")]
    pub job: Option<serde_json::Value>,
    /// Path of a file holding the Job manifest (at most 1 MiB), relative to `spec.templateRoot`
    /// or the operator's template root; `..` segments are rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// How often Omni re-runs the check while it holds an upgrade, in Go duration syntax;
    /// Omni's default is `30s`, and a set value must be at least `5s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<DurationField>,
    /// Labels for the health-check resource in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations for the health-check resource in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// A manifest Omni applies to the workload cluster, inline or from a file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesManifest {
    /// Unique name of the manifest within the cluster.
    #[schemars(length(min = 1))]
    pub name: String,
    /// `full` keeps the objects in sync; `one-time` applies them once.
    #[serde(default)]
    pub mode: ManifestMode,
    /// The manifests, inline: a list of Kubernetes objects, or (Omni v1.8) a multi-document
    /// YAML string of them, passed to Omni byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::any_json_schema")]
    pub inline: Option<serde_json::Value>,
    /// Path of a manifest file (at most 1 MiB), relative to `spec.templateRoot` or the
    /// operator's template root; `..` segments are rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Labels for the manifest group in Omni (Omni v1.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations for the manifest group in Omni (Omni v1.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// How Omni applies a manifest.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ManifestMode {
    /// Apply once, then leave alone.
    #[serde(rename = "one-time")]
    OneTime,
    /// Keep in sync.
    #[default]
    #[serde(rename = "full")]
    Full,
}

impl ManifestMode {
    /// The wire form (`one-time` / `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            ManifestMode::OneTime => "one-time",
            ManifestMode::Full => "full",
        }
    }
}

/// Talos settings of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TalosSpec {
    /// Talos version, e.g. `v1.13.2`.
    #[schemars(regex(pattern = r"^v[0-9]+\.[0-9]+\.[0-9]+$"))]
    pub version: String,
}

/// Omni cluster features.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFeatures {
    /// Expose workload services through Omni's workload proxy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_workload_proxy: bool,
    /// Use Omni's embedded discovery service.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_embedded_discovery_service: bool,
    /// Encrypt machine disks with keys held by Omni.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disk_encryption: bool,
    /// Let the `omni.sidero.dev/node-audit-skip` annotation on Kubernetes nodes exempt them
    /// from Omni's Kubernetes node audit (Omni v1.10).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_node_audit_skip: bool,
    /// Turn the public discovery service off (Omni v1.10; on by default). Omni allows it only
    /// for clusters created with Talos 1.14 or newer and only with
    /// `useEmbeddedDiscoveryService`, so the cluster keeps a discovery service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_public_discovery_service: Option<bool>,
    /// etcd backups taken by Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_configuration: Option<BackupConfiguration>,
}

/// etcd backup settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct BackupConfiguration {
    /// Backup interval in Go duration syntax, passed to Omni as is; `0` disables backups.
    #[schemars(length(min = 1))]
    pub interval: DurationField,
}

/// What happens in Omni when the OmniCluster is deleted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.orphan) && self.orphan && has(self.destroyMachines) && self.destroyMachines)",
    "message": "orphan and destroyMachines cannot both be true",
}]))]
pub struct DeletePolicy {
    /// Keep the cluster in Omni; only the Kubernetes object goes away.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphan: bool,
    /// When deleting the Omni cluster, also forcibly remove machines that are disconnected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub destroy_machines: bool,
}

/// Observed state of an OmniCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniClusterStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (Omni reports the cluster running and usable), `Synced` (the template reached
    /// Omni), `Validated`, and while they hold `Reconciling`, `Stalled` and `Suspended`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// OmniConnection used for the last sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_ref: Option<String>,
    /// Omni endpoint used for the last sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Name of the cluster in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// Lowercase hex SHA-256 of the rendered template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
    /// When a sync was last attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_attempt_time: Option<jiff::Timestamp>,
    /// When a sync last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_sync_time: Option<jiff::Timestamp>,
    /// Trimmed output of the last sync (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_output: Option<String>,
    /// Trimmed Omni cluster status after the last sync (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status_output: Option<String>,
    /// Name of the OmniControlPlane in the rendered template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<String>,
    /// Names of the OmniWorkers in the rendered template, in template order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers_refs: Vec<String>,
    /// Names of the OmniMachines in the rendered template, in template order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine_refs: Vec<String>,
    /// The last run of each health check (`spec.kubernetes.healthChecks`) as Omni reports it,
    /// sorted by ID. Omni runs them while it upgrades Talos; a `FAILED` one holds the upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheckStatus>,
    /// Omni's cluster phase (`SCALING_UP`, `SCALING_DOWN`, `RUNNING`, `DESTROYING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omni_phase: Option<String>,
    /// Healthy/total machines as Omni counts them, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_machines: Option<String>,
    /// Talos version Omni reports for the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub talos_version: Option<String>,
    /// Kubernetes version Omni reports for the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Whether Omni reports the cluster's Kubernetes API ready (what dependants with
    /// `startWhen: KubernetesAPIReady` wait for).
    #[serde(
        default,
        rename = "kubernetesAPIReady",
        skip_serializing_if = "Option::is_none"
    )]
    pub kubernetes_api_ready: Option<bool>,
    /// Each Omni machine set with its phase and machine counts, sorted by ID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine_sets: Vec<MachineSetState>,
    /// Sync state of the cluster's Kubernetes manifests in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<ManifestsState>,
    /// Omni's Kubernetes upgrade phase (`Done`, `Upgrading`, `Failed`, `Reverting`); anything
    /// but `Done` is an upgrade in flight or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_upgrade_phase: Option<String>,
    /// Omni's Talos upgrade phase (`Done`, `Upgrading`, `Failed`, `Reverting`,
    /// `UpdatingMachineSchematics`); anything but `Done` is an upgrade in flight or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub talos_upgrade_phase: Option<String>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of the `omni.texashpc.com/force-at` annotation last handled (an Omni sync with a fresh read of Omni's status once per value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
    /// The changes the operator computed and has not applied to Omni (mode `Plan`, a plan
    /// held for approval, an adoption that differs); absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<super::plan::PlanStatus>,
}

/// One Omni machine set as Omni last reported it (`MachineSetStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetState {
    /// Omni machine-set ID (`<cluster>-control-planes`, `<cluster>-<workers name>`).
    pub id: String,
    /// Omni's phase (`ScalingUp`, `Running`, `Upgrading`, ...).
    pub phase: String,
    /// Whether Omni reports the set ready.
    pub ready: bool,
    /// Machines Omni counts healthy.
    pub ready_machines: u32,
    /// Machines in the set.
    pub total_machines: u32,
}

/// The sync state of a cluster's Kubernetes manifests (Omni's `ClusterKubernetesManifestsStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestsState {
    /// Whether every manifest is applied as declared (`outOfSync` is 0).
    pub applied: bool,
    /// Manifests in all groups.
    pub total: u32,
    /// Manifests not yet applied as declared.
    pub out_of_sync: u32,
    /// Omni's last error applying them (empty when the last apply succeeded). Always written:
    /// a status write is a merge patch, which would keep a left-out nested field.
    #[serde(default)]
    pub last_error: String,
    /// Each manifest group with Omni's phase (`PENDING`, `PROGRESSING`, `APPLIED`, `DELETING`).
    /// Always written, for the same reason.
    #[serde(default)]
    pub groups: Vec<ManifestGroupState>,
    /// The groups Omni has not applied as declared, each with the manifests still pending or
    /// being deleted (empty when everything is applied). Always written, for the same reason.
    #[serde(default)]
    pub out_of_sync_groups: Vec<ManifestGroupSyncState>,
}

/// At most this many manifests are listed per group in `outOfSyncGroups[].manifests`; the
/// group's `outOfSync` count tells how many there are.
pub(crate) const OUT_OF_SYNC_MANIFESTS_LISTED: usize = 10;

/// A manifest group Omni has not applied as declared.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestGroupSyncState {
    /// Omni manifest-group ID.
    pub id: String,
    /// `PENDING`, `PROGRESSING` or `DELETING` (the group is no longer declared and its
    /// objects are being pruned).
    pub phase: String,
    /// How Omni applies the group: `full` or `one-time`.
    pub mode: String,
    /// Manifests in the group.
    pub total: u32,
    /// The group's manifests not applied as declared.
    pub out_of_sync: u32,
    /// The first 10 of them, sorted by kind, namespace and name.
    #[serde(default)]
    pub manifests: Vec<OutOfSyncManifest>,
}

/// One Kubernetes object of a manifest group that Omni has not applied as declared.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutOfSyncManifest {
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// `PENDING` (not applied yet) or `DELETING` (no longer declared, not pruned yet).
    pub phase: String,
}

/// One manifest group's phase in Omni.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestGroupState {
    /// Omni manifest-group ID.
    pub id: String,
    /// `PENDING`, `PROGRESSING`, `APPLIED` or `DELETING`.
    pub phase: String,
}

/// The last run of one health check (Omni's `KubernetesHealthCheckStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// Omni health-check ID (`cluster-<cluster>-<name>`, or the `idOverride`).
    pub id: String,
    /// `RUNNING`, `FAILED`, `PASSED`, or `UNKNOWN` (not run, or no longer watched).
    pub state: String,
    /// One line: why the last run failed (kept while the next run is `RUNNING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tail of the failing Job's output (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Namespace of the runner Job in the workload cluster, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_namespace: Option<String>,
    /// Name of the runner Job (`omni-healthcheck-<id>`), while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
}

impl OmniCluster {
    /// Name of the cluster in Omni: `spec.clusterName` when set, else `metadata.name`.
    pub fn effective_cluster_name(&self) -> String {
        match self.spec.cluster_name.as_deref() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => self.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// The resync interval: `spec.syncInterval` when it parses and is positive, otherwise 5m.
    /// Controllers raise it to their floor with `super::duration::clamp_interval`.
    pub fn sync_interval(&self) -> GoDuration {
        match self.spec.sync_interval.duration() {
            Ok(d) if d.is_positive() => d,
            _ => DEFAULT_SYNC_INTERVAL,
        }
    }

    /// Whether deletion should leave the Omni cluster in place.
    pub(crate) fn orphan_on_delete(&self) -> bool {
        self.spec.delete_policy.as_ref().is_some_and(|p| p.orphan)
    }

    /// Whether deletion should destroy disconnected machines.
    pub(crate) fn destroy_machines_on_delete(&self) -> bool {
        self.spec
            .delete_policy
            .as_ref()
            .is_some_and(|p| p.destroy_machines)
    }
}

/// Builds the "must be a duration" error used for every duration field.
pub(crate) fn duration_error(path: &str, field: &str, value: &DurationField) -> FieldError {
    FieldError::invalid(
        path,
        value.as_str(),
        format!("{field} must be a duration such as 24h, 1h30m or 90s"),
    )
}

/// Admission rules for OmniCluster (create and update alike): `validate_stored` plus the
/// bounds of `spec.syncInterval` and the immutability of the Omni cluster's name.
pub fn validate(new: &OmniCluster, old: Option<&OmniCluster>) -> Validation {
    let mut v = validate_stored(new);
    validate_talos_version(new, old, &mut v);
    // Renaming would point the object (and its deletion) at a different Omni cluster.
    if let Some(previous) = old
        .and_then(|o| o.status.as_ref())
        .and_then(|s| s.cluster_name.as_deref())
        .filter(|n| !n.is_empty())
        && new.effective_cluster_name() != previous
    {
        v.push(FieldError::forbidden(
            "spec.clusterName",
            format!(
                "clusterName is immutable once the Omni cluster is managed (status.clusterName is {previous:?}); create a new OmniCluster instead"
            ),
        ));
    }
    if let Some(e) = short_interval_error(
        "spec.syncInterval",
        "syncInterval",
        &new.spec.sync_interval,
        "the default, 5m",
    ) {
        v.push(e);
    }
    v
}

/// The rules the cluster controller re-checks on stored objects (the webhook may have been
/// bypassed). Interval bounds are not among them: the controller clamps those instead
/// (see [`OmniCluster::sync_interval`]).
pub(crate) fn validate_stored(new: &OmniCluster) -> Validation {
    let mut v = Validation::new();
    let spec = &new.spec;
    if let Some(backup) = spec
        .features
        .as_ref()
        .and_then(|f| f.backup_configuration.as_ref())
    {
        let path = "spec.features.backupConfiguration.interval";
        match backup.interval.duration() {
            Ok(d) if d.is_negative() => v.push(FieldError::invalid(
                path,
                backup.interval.as_str(),
                "interval must not be negative",
            )),
            Ok(_) => {}
            Err(_) => v.push(duration_error(path, "interval", &backup.interval)),
        }
    }
    validate_discovery_features(new, &mut v);
    if let Some(policy) = &spec.delete_policy
        && policy.orphan
        && policy.destroy_machines
    {
        v.push(FieldError::invalid(
            "spec.deletePolicy",
            "orphan: true, destroyMachines: true",
            "orphan and destroyMachines cannot both be true",
        ));
    }
    match spec.sync_interval.duration() {
        Ok(d) if d.is_negative() => v.push(FieldError::invalid(
            "spec.syncInterval",
            spec.sync_interval.as_str(),
            "syncInterval must not be negative",
        )),
        Ok(_) => {}
        Err(_) => v.push(duration_error(
            "spec.syncInterval",
            "syncInterval",
            &spec.sync_interval,
        )),
    }
    validate_patches(spec.patches.as_deref(), "spec.patches", &mut v);
    validate_manifests(
        spec.kubernetes.manifests.as_deref().unwrap_or_default(),
        &mut v,
    );
    validate_health_checks(new, &mut v);
    if let Some(root) = spec.template_root.as_deref()
        && has_parent_segment(root)
    {
        v.push(FieldError::invalid(
            "spec.templateRoot",
            root,
            "must not contain \"..\" segments: it may only narrow the operator's template root",
        ));
    }
    if spec.kernel_args.as_ref().is_some_and(|a| !a.is_empty()) {
        v.warn(
            "cluster-level kernelArgs are valid only when every machine set uses static machines instead of machineClass",
        );
    }
    v
}

/// The rules of `spec.kubernetes.manifests[]`: exactly one of `file` and `inline`, inline
/// content Omni can take, files inside the template root.
fn validate_manifests(manifests: &[KubernetesManifest], v: &mut Validation) {
    for (i, manifest) in manifests.iter().enumerate() {
        let path = format!("spec.kubernetes.manifests[{i}]");
        let has_file = manifest.file.as_deref().is_some_and(|f| !f.is_empty());
        let has_inline = match &manifest.inline {
            Some(serde_json::Value::Array(items)) => !items.is_empty(),
            Some(serde_json::Value::String(text)) => !text.trim().is_empty(),
            Some(serde_json::Value::Null) | None => false,
            Some(_) => {
                v.push(FieldError::invalid(
                    format!("{path}.inline"),
                    "",
                    "inline must be a list of Kubernetes objects or a multi-document YAML string",
                ));
                true
            }
        };
        if !has_file && let Some(why) = manifest.inline.as_ref().and_then(inline_manifest_error) {
            v.push(FieldError::invalid(format!("{path}.inline"), "", why));
        }
        match (has_file, has_inline) {
            (false, false) => v.push(FieldError::required(
                &path,
                "manifest requires exactly one of file or inline",
            )),
            (true, true) => v.push(FieldError::invalid(
                &path,
                manifest.file.as_deref().unwrap_or_default(),
                "manifest must not set both file and inline",
            )),
            _ => {}
        }
        if let Some(file) = manifest.file.as_deref().filter(|f| !f.is_empty()) {
            validate_file_reference(&format!("{path}.file"), file, v);
        }
    }
}

/// Omni refuses a health-check re-check interval below this (`kubernetes_healthchecks.go`).
pub(crate) const MIN_HEALTH_CHECK_INTERVAL: GoDuration = GoDuration::from_secs(5);

/// Omni's rules for `spec.kubernetes.healthChecks[]`, checked before anything reaches Omni:
/// a name or ID, exactly one of `job` and `file`, a Job manifest, an interval of at least 5s
/// (or none: Omni's 30s), unique IDs that make a valid runner Job name.
fn validate_health_checks(cluster: &OmniCluster, v: &mut Validation) {
    let cluster_name = cluster.effective_cluster_name();
    let mut ids = std::collections::BTreeSet::new();
    let checks = cluster.spec.kubernetes.health_checks.as_deref();
    for (i, check) in checks.unwrap_or_default().iter().enumerate() {
        let path = format!("spec.kubernetes.healthChecks[{i}]");
        let name = check.name.as_deref().filter(|n| !n.is_empty());
        let id_override = check.id_override.as_deref().filter(|n| !n.is_empty());
        let id = match (id_override, name) {
            (Some(id), _) => Some(id.to_string()),
            (None, Some(name)) => Some(format!("cluster-{cluster_name}-{name}")),
            (None, None) => {
                v.push(FieldError::required(
                    format!("{path}.name"),
                    "health check requires name or idOverride",
                ));
                None
            }
        };
        if let Some(id) = id {
            let runner = format!("omni-healthcheck-{id}");
            if !is_dns1123_subdomain(&runner) {
                v.push(FieldError::invalid(
                    format!("{path}.{}", if id_override.is_some() { "idOverride" } else { "name" }),
                    &id,
                    format!(
                        "healthcheck ID {id:?} cannot be used to build the runner name {runner:?}: it must be a lowercase RFC 1123 subdomain"
                    ),
                ));
            }
            if !ids.insert(id.clone()) {
                v.push(FieldError::duplicate(format!("{path}.name"), id));
            }
        }
        let file = check.file.as_deref().filter(|f| !f.is_empty());
        match (file, &check.job) {
            (None, None) => v.push(FieldError::required(
                &path,
                "health check requires exactly one of job or file",
            )),
            (Some(file), Some(_)) => v.push(FieldError::invalid(
                &path,
                file,
                "health check must not set both job and file",
            )),
            (Some(file), None) => validate_file_reference(&format!("{path}.file"), file, v),
            (None, Some(job)) => {
                if let Some(kind) = job_kind(job)
                    && kind != "Job"
                {
                    v.push(FieldError::invalid(
                        format!("{path}.job.kind"),
                        &kind,
                        "healthcheck job manifest must be a Kubernetes Job (kind: Job)",
                    ));
                }
            }
        }
        if let Some(interval) = &check.interval {
            let field = format!("{path}.interval");
            match interval.duration() {
                Err(_) => v.push(duration_error(&field, "interval", interval)),
                Ok(d) if d.is_negative() => v.push(FieldError::invalid(
                    &field,
                    interval.as_str(),
                    "interval must not be negative",
                )),
                Ok(d) if d.is_positive() && d < MIN_HEALTH_CHECK_INTERVAL => {
                    v.push(FieldError::invalid(
                        &field,
                        interval.as_str(),
                        "healthcheck interval must be at least 5s",
                    ))
                }
                Ok(_) => {}
            }
        }
    }
}

/// The `kind` of an inline Job manifest (a mapping, or YAML text holding one); `None` when
/// it cannot be told (Omni's own check then decides).
fn job_kind(job: &serde_json::Value) -> Option<String> {
    let parsed;
    let manifest = match job {
        serde_json::Value::String(text) => {
            parsed = serde_saphyr::from_str::<serde_json::Value>(text).ok()?;
            &parsed
        }
        other => other,
    };
    Some(
        manifest
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string(),
    )
}

/// Kubernetes' DNS-1123 subdomain rule (Omni names the runner Job after the health check).
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// One part of a DNS-1123 subdomain: lowercase letters, digits and `-`, alphanumeric at both
/// ends (its length is the caller's rule).
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Omni v1.10's rules for turning the public discovery service off (`validations/cluster.go`):
/// Talos 1.14 or newer, and the embedded discovery service instead. Omni checks the Talos
/// version the cluster was created with; a version below 1.14 in the spec means that one was
/// too (Omni forbids minor downgrades).
fn validate_discovery_features(cluster: &OmniCluster, v: &mut Validation) {
    let Some(features) = cluster.spec.features.as_ref() else {
        return;
    };
    if features.disable_public_discovery_service != Some(true) {
        return;
    }
    let path = "spec.features.disablePublicDiscoveryService";
    let talos = &cluster.spec.talos.version;
    if talos_minor(talos).is_some_and(|version| version < (1, 14)) {
        v.push(FieldError::invalid(
            path,
            "true",
            format!(
                "the public discovery service can only be configured for clusters created with Talos 1.14 or newer (spec.talos.version is {talos})"
            ),
        ));
    }
    if !features.use_embedded_discovery_service {
        v.push(FieldError::invalid(
            path,
            "true",
            "the discovery service cannot be disabled entirely: keep the public discovery service enabled or enable the embedded discovery service",
        ));
    }
}

/// `(major, minor)` of a `vX.Y.Z` version.
pub(crate) fn talos_minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Why inline manifests cannot be Kubernetes objects, if they cannot. Never quotes the content
/// (manifests may carry Secrets).
fn inline_manifest_error(inline: &serde_json::Value) -> Option<String> {
    let documents: Vec<serde_json::Value> = match inline {
        serde_json::Value::Array(items) => items.clone(),
        serde_json::Value::String(text) => {
            match serde_saphyr::from_multiple::<serde_json::Value>(text) {
                Ok(docs) => docs.into_iter().filter(|d| !d.is_null()).collect(),
                Err(_) => return Some("inline manifests are not valid YAML".to_string()),
            }
        }
        _ => return None,
    };
    for (i, doc) in documents.iter().enumerate() {
        let is_object = doc
            .get("apiVersion")
            .is_some_and(serde_json::Value::is_string)
            && doc.get("kind").is_some_and(serde_json::Value::is_string);
        if !is_object {
            return Some(format!(
                "document {i} is not a Kubernetes object (apiVersion and kind are required)"
            ));
        }
    }
    None
}

/// Omni v1.10's oldest Talos release for new clusters (`MinTalosVersion`): the catalogue marks
/// older ones deprecated and Omni refuses them unless the cluster already runs a deprecated one.
pub(crate) const MIN_TALOS_VERSION: (u64, u64, u64) = (1, 9, 0);

/// Omni's Talos version rules that can be checked without Omni: a new OmniCluster may not ask
/// for a release below [`MIN_TALOS_VERSION`] (refused; a warning when it adopts an existing
/// Omni cluster, which Omni lets keep its version), and lowering the Talos minor warns: Omni
/// refuses it below the version the cluster was created with, which only Omni knows. The cap
/// at the newest release an Omni supports is Omni's own; the sync reports it.
fn validate_talos_version(new: &OmniCluster, old: Option<&OmniCluster>, v: &mut Validation) {
    let version = &new.spec.talos.version;
    let Some(parsed) = talos_semver(version) else {
        return;
    };
    match old {
        None if parsed < MIN_TALOS_VERSION => {
            let (major, minor, patch) = MIN_TALOS_VERSION;
            let bare = version.trim_start_matches('v');
            let why = format!(
                "talos version {bare:?} is no longer supported: Omni refuses Talos releases older than v{major}.{minor}.{patch} for new clusters"
            );
            if keys::adopt_requested(&new.metadata) {
                v.warn(format!(
                    "spec.talos.version: {why} (the adopted Omni cluster may keep the release it runs)"
                ));
            } else {
                v.push(FieldError::invalid("spec.talos.version", version, why));
            }
        }
        None => {}
        Some(old) => {
            let before = &old.spec.talos.version;
            if let (Some(from), Some(to)) = (talos_minor(before), talos_minor(version))
                && to < from
            {
                v.warn(format!(
                    "spec.talos.version: {before} -> {version} lowers the Talos minor version; Omni refuses it (downgrading from version ... is not supported) if the cluster was created with a newer minor"
                ));
            }
        }
    }
}

/// `(major, minor, patch)` of a `vX.Y.Z` version.
fn talos_semver(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next()?.parse().ok()?;
    Some((major, minor, patch))
}
