//! OmniWorkers: one worker machine set of an OmniCluster (any number per cluster).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, LocalObjectReference, MachineSetFields, conditions_schema, validate_machine_set,
};
use super::validation::{FieldError, Validation};

/// Worker-set name Omni reserves for the control plane.
pub(crate) const RESERVED_WORKER_SET_NAME: &str = "control-planes";

/// Desired state of an OmniWorkers: a worker machine set of the referenced OmniCluster.
/// Exactly one of `machines` or `machineClass` is required.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniWorkers",
    plural = "omniworkers",
    singular = "omniworkers",
    namespaced,
    status = "OmniWorkersStatus",
    shortname = "owk",
    category = "omni",
    doc = "A worker machine set of an OmniCluster; rendered as one Workers document of the template.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(
        name = "Worker Set",
        type_ = "string",
        json_path = ".status.workerSetName"
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
pub struct OmniWorkersSpec {
    /// The OmniCluster (same namespace) this worker set belongs to.
    pub cluster_ref: LocalObjectReference,
    /// Name of the worker set in Omni; defaults to `metadata.name`. Must be unique within the
    /// cluster and must not be `control-planes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub worker_set_name: Option<String>,
    /// Machines, machine class, patches, extensions and kernel arguments of the set.
    #[serde(flatten)]
    pub machine_set: MachineSetFields,
    /// How configuration changes roll out across the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    /// How Talos/Kubernetes upgrades roll out across the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<UpdateStrategy>,
    /// How machines are removed from the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_strategy: Option<UpdateStrategy>,
}

/// A machine-set rollout strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// `Rolling` or `Unset`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<StrategyType>,
    /// Settings of the rolling strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling: Option<RollingStrategy>,
}

/// Strategy type names Omni accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StrategyType {
    /// Change a bounded number of machines at a time.
    Rolling,
    /// Omni's default behaviour.
    Unset,
}

/// Rolling strategy settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingStrategy {
    /// How many machines may change at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_parallelism: Option<i32>,
}

/// Observed state of an OmniWorkers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniWorkersStatus {
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
    /// Effective worker-set name in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_set_name: Option<String>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl OmniWorkers {
    /// Worker-set name in Omni: `spec.workerSetName` when set, else `metadata.name`.
    pub fn effective_worker_set_name(&self) -> String {
        match self.spec.worker_set_name.as_deref() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => self.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// Admission rules for OmniWorkers (create and update alike).
pub fn validate(new: &OmniWorkers, _old: Option<&OmniWorkers>) -> Validation {
    let mut v = Validation::new();
    validate_machine_set(&new.spec.machine_set, &mut v);
    if new.spec.worker_set_name.as_deref() == Some(RESERVED_WORKER_SET_NAME) {
        v.push(FieldError::invalid(
            "spec.workerSetName",
            RESERVED_WORKER_SET_NAME,
            "workerSetName is reserved by Omni",
        ));
    }
    v
}
