//! OmniControlPlane: the control-plane machine set of an OmniCluster (exactly one per cluster).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, LocalObjectReference, MachineSetFields, conditions_schema, validate_machine_set,
};
use super::validation::Validation;

/// Desired state of an OmniControlPlane: which machines form the control plane of the
/// referenced OmniCluster. Exactly one of `machines` or `machineClass` is required.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniControlPlane",
    plural = "omnicontrolplanes",
    singular = "omnicontrolplane",
    namespaced,
    status = "OmniControlPlaneStatus",
    shortname = "ocp",
    category = "omni",
    doc = "The control-plane machine set of an OmniCluster; rendered as the template's ControlPlane document.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Accepted")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Accepted")].reason"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.machines) != has(self.machineClass)",
    "message": "exactly one of machines or machineClass is required",
}]))]
pub struct OmniControlPlaneSpec {
    /// The OmniCluster (same namespace) this control plane belongs to.
    pub cluster_ref: LocalObjectReference,
    /// Machines, machine class, patches, extensions and kernel arguments of the set.
    #[serde(flatten)]
    pub machine_set: MachineSetFields,
    /// Restore the cluster from an etcd backup when it is first created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_spec: Option<BootstrapSpec>,
    /// How Talos/Kubernetes upgrades roll out across the control plane (Omni v1.6). Omni
    /// accepts no update or delete strategy for the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<super::workers::UpdateStrategy>,
}

/// Where to restore a new cluster's etcd from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// UUID of the cluster the backup was taken from.
    #[serde(rename = "clusterUUID")]
    #[schemars(length(min = 1))]
    pub cluster_uuid: String,
    /// Name of the backup snapshot.
    #[schemars(length(min = 1))]
    pub snapshot: String,
}

/// Observed state of an OmniControlPlane.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniControlPlaneStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`: whether the referenced OmniCluster exists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Name of the referenced OmniCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<String>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// Admission rules for OmniControlPlane (create and update alike).
pub fn validate(new: &OmniControlPlane, _old: Option<&OmniControlPlane>) -> Validation {
    let mut v = Validation::new();
    validate_machine_set(&new.spec.machine_set, &mut v);
    v
}
