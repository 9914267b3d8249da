//! OmniHelmRelease: a Helm release installed directly into a workload cluster through an
//! explicitly named kubeconfig Secret.

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::cluster::duration_error;
use super::common::{
    Condition, KubeconfigSecretRef, LocalObjectReference, any_json_schema, conditions_schema,
    date_time_schema, is_blank,
};
use super::duration::{Bounds, DurationError, DurationField, MAX_TIMEOUT, short_interval_error};
use super::helm_policies::{
    ClusterHealthGate, DriftDetection, DriftedObject, HelmTest, InstallPolicy, ReleaseHistoryEntry,
    TestHookStatus, UpgradePolicy,
};
use super::validation::{FieldError, Validation};

/// Desired state of an OmniHelmRelease.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniHelmRelease",
    plural = "omnihelmreleases",
    singular = "omnihelmrelease",
    namespaced,
    status = "OmniHelmReleaseStatus",
    shortname = "ohr",
    category = "omni",
    doc = "A Helm release reconciled directly in a workload cluster, using a kubeconfig Secret named explicitly.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "Chart", type_ = "string", json_path = ".spec.chart.chart"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.chartVersion"),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.releaseRevision"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.releaseStatus",
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
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OmniHelmReleaseSpec {
    /// The OmniCluster (same namespace) the release belongs to; the release waits until it exists.
    pub cluster_ref: LocalObjectReference,
    /// Secret (same namespace) with the workload-cluster kubeconfig Helm uses, typically
    /// written by an OmniKubeconfigExport.
    pub kubeconfig_secret_ref: KubeconfigSecretRef,
    /// Stop acting on the target (no Helm install, upgrade or drift check; a values change waits for the resume) while keeping the object, its status and its
    /// finalizer; `Ready` keeps its last state and `Suspended=True` says so. Deletion still
    /// applies the deletion policy. Resuming acts once on what changed meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// When the object first acts: `ClusterReady` (the default) waits for the OmniCluster's
    /// `Ready`; `KubernetesAPIReady` only for Omni to report the cluster's Kubernetes API
    /// ready (for what the cluster needs to become Ready, such as its CNI); `ClusterExists` as
    /// soon as the OmniCluster exists (the original operator's behaviour). Once it has acted,
    /// the cluster's later state does not hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::start_when_schema")]
    pub start_when: Option<super::common::StartWhen>,
    /// Helm release name; defaults to `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub release_name: Option<String>,
    /// Workload-cluster namespace of the release.
    #[serde(default = "default_release_namespace")]
    #[schemars(length(min = 1))]
    pub namespace: String,
    /// Which chart to install.
    pub chart: HelmChart,
    /// Create the release namespace on install when it is missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_namespace: bool,
    /// Wait until the release's resources are ready (otherwise only hooks are waited for).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,
    /// Also wait for Jobs to complete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait_for_jobs: bool,
    /// Time limit of each Helm operation, in Go duration syntax.
    #[serde(default = "default_timeout")]
    pub timeout: DurationField,
    /// Roll back a failed install or upgrade (and clean up resources created by a failed upgrade).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomic: bool,
    /// Skip chart hooks on install, upgrade and uninstall.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_hooks: bool,
    /// Do not install the chart's CRDs.
    #[serde(
        default,
        rename = "skipCRDs",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub skip_crds: bool,
    /// Revisions kept per release on upgrade; 0 keeps Helm's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_history: Option<i64>,
    /// `Uninstall` removes the release when this object is deleted; `Orphan` leaves it running.
    #[serde(default)]
    #[schemars(schema_with = "uninstall_orphan_schema")]
    pub deletion_policy: HelmDeletionPolicy,
    /// Let the operator recover a release left in `pending-install`, `pending-upgrade` or
    /// `pending-rollback` for longer than `timeout` (an interrupted Helm run): a pending upgrade
    /// or rollback is rolled back to the previous revision, a pending install is uninstalled,
    /// then the release is applied again. Off by default because another tool may still be
    /// working on the release; without it a stuck release is only reported.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recover_stuck_release: bool,
    /// How often a healthy release is compared with Helm's view of it in the workload cluster,
    /// so a release deleted, failed or changed out of band is repaired; Go duration syntax,
    /// `0` disables the periodic check (changes to this object or its Secrets still trigger it).
    #[serde(default = "default_drift_check_interval")]
    pub drift_check_interval: DurationField,
    /// OmniHelmReleases (same namespace, same OmniCluster) that must be `Ready` at their
    /// current generation before this release is installed or upgraded; until then it reports
    /// `DependencyNotReady` and runs no Helm. Deleting a release others depend on waits until
    /// they are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<LocalObjectReference>,
    /// Wait with installs and upgrades until the OmniCluster reports this state from Omni
    /// (reason `ClusterNotHealthy` meanwhile). A deployed release is never removed because the
    /// cluster is unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_health: Option<ClusterHealthGate>,
    /// What happens after a failed install: retries and their remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<InstallPolicy>,
    /// What happens after a failed upgrade: retries and their remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradePolicy>,
    /// Compare the release's objects with the live ones in the workload cluster at each drift
    /// check, and report or correct differences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_detection: Option<DriftDetection>,
    /// Run `helm test` after each install and upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<HelmTest>,
    /// ServiceAccount (same namespace) whose identity reads the Secrets this object references:
    /// the operator impersonates it, so the object can use only what the ServiceAccount may
    /// read. Unset: the operator's `--default-service-account`, else the operator's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
}

/// The chart to install.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct HelmChart {
    /// HTTP(S) chart repository URL; required unless `chart` is an `oci://` reference (then it
    /// is not used, and may be left out).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1))]
    pub repository: String,
    /// Chart name in the repository, or a full `oci://` reference.
    #[schemars(length(min = 1))]
    pub chart: String,
    /// Chart version, or a range of versions (`>=1.2 <2`, `1.x`, `^1.2`, `~1.2.3`): the newest
    /// version the repository's index (an OCI registry's tags) lists within it is installed,
    /// and a newer one published later is upgraded to at the next drift check.
    #[schemars(length(min = 1))]
    pub version: String,
    /// Values passed to the chart; must be an object.
    #[serde(default = "empty_object")]
    #[schemars(schema_with = "any_json_schema")]
    pub values: serde_json::Value,
    /// Secret (same namespace) with credentials for the chart repository or OCI registry
    /// and/or a CA bundle to trust for it.
    #[serde(
        default,
        rename = "credentialsSecretRef",
        skip_serializing_if = "Option::is_none"
    )]
    pub credentials_secret_ref: Option<ChartCredentialsRef>,
    /// Allow plain HTTP where TLS is otherwise required: credentials may then be sent to an
    /// `http://` repository, and an `oci://` registry is spoken to over plain HTTP. The operator
    /// may be run so that it is never honoured (`--allow-insecure-chart-sources=false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// ConfigMaps and Secrets (same namespace) whose values are merged, in order, beneath
    /// `values`: each later source is merged over the earlier ones, and `values` over them all.
    /// A change of a source upgrades the release once.
    #[serde(default, rename = "valuesFrom", skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesReference>,
}

/// One source of chart values (`spec.chart.valuesFrom[]`), read as the release's
/// ServiceAccount when it has one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesReference {
    /// `ConfigMap` or `Secret`.
    #[schemars(schema_with = "values_source_kind_schema")]
    pub kind: ValuesSourceKind,
    /// Name of the ConfigMap or Secret, in the release's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key holding the values: a YAML map of values, or (with `targetPath`) one value.
    #[serde(default = "default_values_key")]
    #[schemars(length(min = 1, max = 253))]
    pub values_key: String,
    /// Where the key's content goes, in dot notation (`a.b.c`; `\.` for a dot inside a name):
    /// set there as one string value instead of being merged as a map of values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 250))]
    pub target_path: Option<String>,
    /// A missing object or key contributes nothing instead of holding the release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// The kinds a values source may be (`spec.chart.valuesFrom[].kind`). Only these spellings
/// pass the CRD schema.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValuesSourceKind {
    /// A ConfigMap (`data`, else `binaryData`).
    ConfigMap,
    /// A Secret (`data`); the Secret policy applies.
    Secret,
}

impl ValuesSourceKind {
    /// The kind's name, as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        }
    }
}

fn values_source_kind_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["ConfigMap", "Secret"] })
}

fn default_values_key() -> String {
    "values.yaml".to_string()
}

/// Where the chart repository credentials live. Keys absent from the Secret are not used, so a
/// Secret holding only `ca.crt` configures a CA bundle without a login.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartCredentialsRef {
    /// Secret name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key of the user name (basic auth or registry login).
    #[serde(default = "default_username_key")]
    #[schemars(length(min = 1))]
    pub username_key: String,
    /// Key of the password or token.
    #[serde(default = "default_password_key")]
    #[schemars(length(min = 1))]
    pub password_key: String,
    /// Key of a PEM CA bundle trusted for the repository's TLS certificate.
    #[serde(default = "default_ca_key")]
    #[schemars(length(min = 1))]
    pub ca_key: String,
}

fn default_username_key() -> String {
    "username".to_string()
}

fn default_password_key() -> String {
    "password".to_string()
}

fn default_ca_key() -> String {
    "ca.crt".to_string()
}

impl ChartCredentialsRef {
    /// The first problem of this reference, with its field path below `spec.chart`.
    pub(crate) fn problem(&self) -> Option<(&'static str, &'static str)> {
        if is_blank(&self.name) {
            Some(("name", "credentialsSecretRef.name is required"))
        } else if is_blank(&self.username_key) {
            Some((
                "usernameKey",
                "credentialsSecretRef.usernameKey must not be blank",
            ))
        } else if is_blank(&self.password_key) {
            Some((
                "passwordKey",
                "credentialsSecretRef.passwordKey must not be blank",
            ))
        } else if is_blank(&self.ca_key) {
            Some(("caKey", "credentialsSecretRef.caKey must not be blank"))
        } else {
            None
        }
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Default workload namespace of a release.
pub(crate) fn default_release_namespace() -> String {
    "default".to_string()
}

/// Default `spec.timeout`.
pub(crate) fn default_timeout() -> DurationField {
    "5m".into()
}

/// Default `spec.driftCheckInterval`.
pub(crate) fn default_drift_check_interval() -> DurationField {
    "5m".into()
}

pub(crate) fn uninstall_orphan_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Uninstall", "Orphan"] })
}

/// What deleting an OmniHelmRelease does to the release (`spec.deletionPolicy`). Only these
/// spellings pass the CRD schema, which the API server checks before any webhook runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HelmDeletionPolicy {
    /// Run `helm uninstall` (the default).
    #[default]
    Uninstall,
    /// Leave the release in the workload cluster.
    Orphan,
}

/// Observed state of an OmniHelmRelease.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniHelmReleaseStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Released` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Name of the referenced OmniCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<String>,
    /// Name of the kubeconfig Secret used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<String>,
    /// Key of the kubeconfig in that Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_key: Option<String>,
    /// Helm release name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,
    /// Workload namespace of the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Chart name or reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// Chart version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_version: Option<String>,
    /// Helm revision after the last action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_revision: Option<i64>,
    /// Helm's release status, e.g. `deployed`, `failed`, `uninstalled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_status: Option<String>,
    /// `Install`, `Upgrade` or `Uninstall`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,
    /// When Helm was last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_attempt_time: Option<jiff::Timestamp>,
    /// When Helm last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_success_time: Option<jiff::Timestamp>,
    /// Error of the last attempt; empty after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Digest of the inputs (target, chart, version, values, chart-affecting flags) of the last
    /// successful install or upgrade; Helm runs again only when it changes or the release
    /// drifted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_digest: Option<String>,
    /// Digest of the inputs of the last install or upgrade attempted, successful or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_digest: Option<String>,
    /// Chart version of the last install or upgrade attempted: a range in
    /// `spec.chart.version` as it resolved then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_chart_version: Option<String>,
    /// `metadata.generation` of the last install or upgrade attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_generation: Option<i64>,
    /// Failed installs of the current inputs counted against `spec.install.remediation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_failures: Option<i64>,
    /// Failed upgrades of the current inputs counted against `spec.upgrade.remediation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_failures: Option<i64>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of the `omni.texashpc.com/force-at` annotation last handled (one forced
    /// install or upgrade per value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
    /// The value of the `omni.texashpc.com/reset-at` annotation last handled (the failure
    /// counts were reset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reset_at: Option<String>,
    /// The test hooks of the last `helm test` run, with their phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_hooks: Vec<TestHookStatus>,
    /// The last Helm revisions this object made, newest first (five, or `maxHistory` when it
    /// is lower).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<ReleaseHistoryEntry>,
    /// Live objects that differed from the release at the last drift check (at most ten).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted_objects: Vec<DriftedObject>,
}

impl OmniHelmRelease {
    /// Helm release name: `spec.releaseName` when set, else `metadata.name`.
    pub fn effective_release_name(&self) -> String {
        match self.spec.release_name.as_deref() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => self.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// Parsed `spec.driftCheckInterval`; `None` when the periodic check is off (`0`).
    pub(crate) fn drift_check_interval(
        &self,
    ) -> Result<Option<std::time::Duration>, &DurationError> {
        let interval = self.spec.drift_check_interval.duration()?;
        Ok(interval.to_std().filter(|d| !d.is_zero()))
    }
}

const VALUES_NOT_OBJECT: &str = "helm release values must be a JSON object";
const DRIFT_NEGATIVE: &str = "driftCheckInterval must not be negative";

/// Whether `s` is an absolute URL with a scheme and a host, e.g. `https://charts.example.com/x`.
pub(crate) fn is_absolute_url(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    scheme_ok && !host.is_empty() && !host.chars().any(char::is_whitespace)
}

/// Admission rules for OmniHelmRelease (create and update alike): `validate_stored` plus the floors
/// and ceilings of its durations.
pub fn validate(new: &OmniHelmRelease, _old: Option<&OmniHelmRelease>) -> Validation {
    rules(new, Bounds::Enforce)
}

/// The rules the controller re-checks on stored objects (the webhook may have been bypassed).
/// The bounds of durations are not among them: the controller clamps those instead, so a value
/// stored without admission still works, within the bounds.
pub(crate) fn validate_stored(new: &OmniHelmRelease) -> Validation {
    rules(new, Bounds::Clamped)
}

fn rules(new: &OmniHelmRelease, bounds: Bounds) -> Validation {
    let mut v = Validation::new();
    if let Some(e) =
        super::common::service_account_name_error(new.spec.service_account_name.as_deref())
    {
        v.push(e);
    }
    let spec = &new.spec;
    target_rules(spec, &mut v);
    chart_rules(&spec.chart, &mut v);
    timing_rules(spec, bounds, &mut v);
    super::helm_policies::rules(
        new.metadata.name.as_deref().unwrap_or_default(),
        spec,
        &mut v,
    );
    if !spec.chart.values.is_object() {
        v.push(FieldError::invalid(
            "spec.chart.values",
            spec.chart.values.to_string(),
            VALUES_NOT_OBJECT,
        ));
    }
    // No warning on every apply that the release writes to the workload cluster (the
    // original's): it is what the kind is for, nothing the user should change, and a warning
    // printed on every apply hides the ones that are (decisions.md).
    v
}

/// Where the release goes: the cluster, its kubeconfig, the release name and namespace.
fn target_rules(spec: &OmniHelmReleaseSpec, v: &mut Validation) {
    if is_blank(&spec.cluster_ref.name) {
        v.push(FieldError::required(
            "spec.clusterRef.name",
            "clusterRef.name is required",
        ));
    }
    if is_blank(&spec.kubeconfig_secret_ref.name) {
        v.push(FieldError::required(
            "spec.kubeconfigSecretRef.name",
            "kubeconfig Secret name is required",
        ));
    }
    if is_blank(&spec.kubeconfig_secret_ref.key) {
        v.push(FieldError::required(
            "spec.kubeconfigSecretRef.key",
            "kubeconfig Secret key must not be blank",
        ));
    }
    match spec.release_name.as_deref() {
        Some(name) if is_blank(name) => v.push(FieldError::required(
            "spec.releaseName",
            "releaseName must not be blank when set",
        )),
        Some(name) if name.trim() != name => v.push(FieldError::invalid(
            "spec.releaseName",
            name,
            "releaseName must not include leading or trailing whitespace",
        )),
        _ => {}
    }
    if is_blank(&spec.namespace) {
        v.push(FieldError::required(
            "spec.namespace",
            "namespace is required",
        ));
    } else if spec.namespace.trim() != spec.namespace {
        v.push(FieldError::invalid(
            "spec.namespace",
            &spec.namespace,
            "namespace must not include leading or trailing whitespace",
        ));
    }
}

/// Where the chart comes from: repository, name, version and credentials.
fn chart_rules(chart: &HelmChart, v: &mut Validation) {
    let oci = chart.chart.trim().starts_with("oci://");
    if is_blank(&chart.repository) {
        // An oci:// reference names its registry itself.
        if !oci {
            v.push(FieldError::required(
                "spec.chart.repository",
                "chart.repository is required unless chart.chart is an oci:// reference",
            ));
        }
    } else if !is_absolute_url(chart.repository.trim()) {
        v.push(FieldError::invalid(
            "spec.chart.repository",
            &chart.repository,
            "chart.repository must be an absolute URL",
        ));
    }
    if is_blank(&chart.chart) {
        v.push(FieldError::required(
            "spec.chart.chart",
            "chart.chart is required",
        ));
    } else if let Err(e) = crate::domain::helm::source::location::check_chart(&chart.chart) {
        v.push(FieldError::invalid(e.field, &chart.chart, e.detail));
    } else if !chart.chart.trim().starts_with("oci://")
        && is_absolute_url(chart.repository.trim())
        && let Err(e) = crate::domain::helm::source::location::check_repository(&chart.repository)
    {
        v.push(FieldError::invalid(e.field, &chart.repository, e.detail));
    }
    if is_blank(&chart.version) {
        v.push(FieldError::required(
            "spec.chart.version",
            "chart.version is required",
        ));
    } else if !crate::domain::helm::source::index::is_version_or_range(&chart.version) {
        v.push(FieldError::invalid(
            "spec.chart.version",
            &chart.version,
            "chart.version must be a version or a range of versions (e.g. 1.2.3, >=1.2 <2, 1.x, ^1.2, ~1.2.3)",
        ));
    }
    if let Some((field, problem)) = chart
        .credentials_secret_ref
        .as_ref()
        .and_then(ChartCredentialsRef::problem)
    {
        v.push(FieldError::required(
            format!("spec.chart.credentialsSecretRef.{field}"),
            problem,
        ));
    }
    values_from_rules(&chart.values_from, v);
}

/// Each values source names an object, a usable key and, when set, a usable path.
fn values_from_rules(sources: &[ValuesReference], v: &mut Validation) {
    for (i, source) in sources.iter().enumerate() {
        let at = |field: &str| format!("spec.chart.valuesFrom[{i}].{field}");
        if is_blank(&source.name) {
            v.push(FieldError::required(
                at("name"),
                "valuesFrom[].name is required",
            ));
        } else if source.name.trim() != source.name {
            v.push(FieldError::invalid(
                at("name"),
                &source.name,
                "valuesFrom[].name must not include leading or trailing whitespace",
            ));
        }
        if !is_config_key(&source.values_key) {
            v.push(FieldError::invalid(
                at("valuesKey"),
                &source.values_key,
                "valuesFrom[].valuesKey must be a ConfigMap or Secret key: letters, digits, '-', '_' and '.'",
            ));
        }
        if let Some(path) = &source.target_path
            && let Err(problem) = crate::domain::helm::values::split_path(path)
        {
            v.push(FieldError::invalid(at("targetPath"), path, problem));
        }
    }
}

/// Whether `key` may name an entry of a ConfigMap's or Secret's data.
fn is_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// How long Helm may take, how often drift is looked for, and how much history is kept.
fn timing_rules(spec: &OmniHelmReleaseSpec, bounds: Bounds, v: &mut Validation) {
    match spec.timeout.duration() {
        Ok(t) if !t.is_positive() => v.push(FieldError::invalid(
            "spec.timeout",
            spec.timeout.as_str(),
            "timeout must be greater than zero",
        )),
        Ok(t) if bounds == Bounds::Enforce && t > MAX_TIMEOUT => v.push(FieldError::invalid(
            "spec.timeout",
            spec.timeout.as_str(),
            "timeout must be at most 1h",
        )),
        Ok(_) => {}
        Err(_) => v.push(duration_error("spec.timeout", "timeout", &spec.timeout)),
    }
    match spec.drift_check_interval.duration() {
        Ok(d) if d.is_negative() => v.push(FieldError::invalid(
            "spec.driftCheckInterval",
            spec.drift_check_interval.as_str(),
            DRIFT_NEGATIVE,
        )),
        Ok(_) if bounds == Bounds::Clamped => {}
        Ok(_) => {
            if let Some(e) = short_interval_error(
                "spec.driftCheckInterval",
                "driftCheckInterval",
                &spec.drift_check_interval,
                "no periodic check",
            ) {
                v.push(e);
            }
        }
        Err(_) => v.push(duration_error(
            "spec.driftCheckInterval",
            "driftCheckInterval",
            &spec.drift_check_interval,
        )),
    }
    if let Some(h) = spec.max_history
        && h < 0
    {
        v.push(FieldError::invalid(
            "spec.maxHistory",
            h.to_string(),
            "maxHistory must not be negative",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(spec_extra: serde_json::Value) -> OmniHelmRelease {
        let mut spec = serde_json::json!({
            "clusterRef": {"name": "c"},
            "kubeconfigSecretRef": {"name": "kc"},
            "chart": {"repository": "https://charts.example.com", "chart": "app", "version": "1.0.0"}
        });
        if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), spec_extra) {
            spec.extend(extra);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniHelmRelease",
            "metadata": {"name": "app", "namespace": "ns"},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn stuck_recovery_is_off_and_drift_checks_run_every_five_minutes_by_default() {
        let r = release(serde_json::json!({}));
        assert!(!r.spec.recover_stuck_release);
        assert_eq!(r.spec.drift_check_interval.as_str(), "5m");
        assert_eq!(
            r.drift_check_interval().ok().flatten(),
            Some(std::time::Duration::from_secs(300))
        );
        assert!(validate(&r, None).errors.is_empty());
        let off = release(serde_json::json!({"driftCheckInterval": "0"}));
        assert_eq!(off.drift_check_interval().ok().flatten(), None);
        assert!(validate(&off, None).errors.is_empty());
    }

    #[test]
    fn drift_check_interval_must_be_a_non_negative_duration() {
        let bad = release(serde_json::json!({"driftCheckInterval": "5 minutes"}));
        let errors = validate(&bad, None);
        assert_eq!(errors.errors.len(), 1, "{errors:?}");
        assert_eq!(errors.errors[0].path, "spec.driftCheckInterval");
        let negative = release(serde_json::json!({"driftCheckInterval": "-1m"}));
        let errors = validate(&negative, None).errors;
        assert_eq!(errors[0].path, "spec.driftCheckInterval");
        assert_eq!(errors[0].detail, DRIFT_NEGATIVE);
    }

    /// Admission bounds the timeout (1h) and the drift check (10 s); a stored object keeps
    /// them, and the controller clamps them instead of refusing the object.
    #[test]
    fn duration_bounds_are_admission_rules_the_controller_clamps_instead() {
        let r = release(serde_json::json!({"timeout": "2h", "driftCheckInterval": "2s"}));
        assert!(validate_stored(&r).is_valid(), "{:?}", validate_stored(&r));
        let paths: Vec<String> = validate(&r, None)
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, ["spec.timeout", "spec.driftCheckInterval"]);
    }

    #[test]
    fn values_sources_need_a_name_a_usable_key_and_a_usable_path() {
        let chart = |values_from: serde_json::Value| {
            release(serde_json::json!({"chart": {
                "repository": "https://charts.example.com", "chart": "app", "version": "1.0.0",
                "valuesFrom": values_from,
            }}))
        };
        let fine = chart(serde_json::json!([
            {"kind": "ConfigMap", "name": "defaults"},
            {"kind": "Secret", "name": "tokens", "valuesKey": "token", "targetPath": "auth.token", "optional": true},
        ]));
        assert!(
            validate(&fine, None).is_valid(),
            "{:?}",
            validate(&fine, None)
        );
        let source = &fine.spec.chart.values_from[0];
        assert_eq!(source.values_key, "values.yaml");
        assert!(!source.optional && source.target_path.is_none());

        let bad = chart(serde_json::json!([
            {"kind": "ConfigMap", "name": " "},
            {"kind": "Secret", "name": "s", "valuesKey": "a/b"},
            {"kind": "Secret", "name": "t", "targetPath": "a..b"},
        ]));
        let paths: Vec<String> = validate(&bad, None)
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.chart.valuesFrom[0].name",
                "spec.chart.valuesFrom[1].valuesKey",
                "spec.chart.valuesFrom[2].targetPath",
            ]
        );
        // Any other kind does not decode: the CRD schema refuses it before admission.
        let unknown = serde_json::from_value::<ValuesReference>(
            serde_json::json!({"kind": "Namespace", "name": "x"}),
        );
        assert!(unknown.is_err());
    }

    #[test]
    fn absolute_urls() {
        assert!(is_absolute_url(
            "https://kubernetes-sigs.github.io/metrics-server/"
        ));
        assert!(is_absolute_url("http://127.0.0.1:8080"));
        assert!(is_absolute_url("oci://ghcr.io/charts"));
        assert!(!is_absolute_url("charts.example.com"));
        assert!(!is_absolute_url("/charts"));
        assert!(!is_absolute_url("https://"));
        assert!(!is_absolute_url("://host"));
        assert!(!is_absolute_url("1http://host"));
    }
}
