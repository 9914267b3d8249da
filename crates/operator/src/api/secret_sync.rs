//! OmniSecretSync: copies a management-cluster Secret into a workload cluster.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, DeletionPolicy, KubeconfigSecretRef, LocalObjectReference, conditions_schema,
    date_time_schema, delete_orphan_schema, is_blank,
};
use super::validation::{FieldError, Validation};

/// Desired state of an OmniSecretSync: which Secret to copy, into which workload cluster
/// (through which kubeconfig Secret) and under which name.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniSecretSync",
    plural = "omnisecretsyncs",
    singular = "omnisecretsync",
    namespaced,
    status = "OmniSecretSyncStatus",
    shortname = "oss",
    category = "omni",
    doc = "Copies the data of a Secret in this namespace into a Secret of a workload cluster.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(
        name = "Target Namespace",
        type_ = "string",
        json_path = ".spec.targetSecretRef.namespace"
    ),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.targetSecretRef.name"
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
pub struct OmniSecretSyncSpec {
    /// The OmniCluster (same namespace) the target belongs to; the sync waits until it exists.
    pub cluster_ref: LocalObjectReference,
    /// Secret (same namespace) with the workload-cluster kubeconfig. Cannot be changed after
    /// creation, so Secret data cannot be redirected to another cluster.
    pub kubeconfig_secret_ref: KubeconfigSecretRef,
    /// Stop acting on the target (no copy, no drift repair) while keeping the object, its status and its
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
    /// Secret in this namespace whose `data` is copied.
    pub source_secret_ref: LocalObjectReference,
    /// Where the copy is written in the workload cluster.
    pub target_secret_ref: WorkloadSecretRef,
    /// Secret type of the copy; defaults to the source Secret's type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Labels added to the copy (operator labels take precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to the copy (operator annotations take precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Create the target namespace when it is missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_namespace: bool,
    /// `Delete` removes the copy (if this sync owns it) when the sync is deleted; `Orphan` keeps it.
    #[schemars(schema_with = "delete_orphan_schema")]
    pub deletion_policy: DeletionPolicy,
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

/// A Secret in the workload cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct WorkloadSecretRef {
    /// Secret name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Namespace in the workload cluster.
    #[schemars(length(min = 1))]
    pub namespace: String,
}

/// Observed state of an OmniSecretSync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniSecretSyncStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Synced` and `Ready`.
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
    /// Name of the source Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_secret_ref: Option<String>,
    /// Name of the workload Secret last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_secret_ref: Option<String>,
    /// Workload namespace of that Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    /// Secret type written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
    /// Lowercase hex SHA-256 of the synced type and data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_hash: Option<String>,
    /// When a sync was last attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_attempt_time: Option<jiff::Timestamp>,
    /// When a sync last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_sync_time: Option<jiff::Timestamp>,
    /// Error of the last attempt; empty after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of the `omni.texashpc.com/force-at` annotation last handled (the copy written once per value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
}

/// Admission rules for OmniSecretSync. On update the kubeconfig Secret reference is immutable.
pub fn validate(new: &OmniSecretSync, old: Option<&OmniSecretSync>) -> Validation {
    let mut v = Validation::new();
    if let Some(e) =
        super::common::service_account_name_error(new.spec.service_account_name.as_deref())
    {
        v.push(e);
    }
    let spec = &new.spec;
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
    if is_blank(&spec.source_secret_ref.name) {
        v.push(FieldError::required(
            "spec.sourceSecretRef.name",
            "source Secret name is required",
        ));
    }
    if is_blank(&spec.target_secret_ref.name) {
        v.push(FieldError::required(
            "spec.targetSecretRef.name",
            "target Secret name is required",
        ));
    }
    if is_blank(&spec.target_secret_ref.namespace) {
        v.push(FieldError::required(
            "spec.targetSecretRef.namespace",
            "target Secret namespace is required",
        ));
    }
    if let Some(t) = spec.type_.as_deref()
        && is_blank(t)
    {
        v.push(FieldError::invalid(
            "spec.type",
            t,
            "type must not be blank",
        ));
    }
    if let Some(old) = old {
        if old.spec.kubeconfig_secret_ref.name != spec.kubeconfig_secret_ref.name {
            v.push(FieldError::forbidden(
                "spec.kubeconfigSecretRef.name",
                "kubeconfigSecretRef.name is immutable",
            ));
        }
        if old.spec.kubeconfig_secret_ref.key != spec.kubeconfig_secret_ref.key {
            v.push(FieldError::forbidden(
                "spec.kubeconfigSecretRef.key",
                "kubeconfigSecretRef.key is immutable",
            ));
        }
    }
    // No warning on every apply (the original's): see OmniHelmRelease's rules.
    v
}
