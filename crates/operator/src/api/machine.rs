//! OmniMachine: per-machine settings of one Omni machine in an OmniCluster.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, LocalObjectReference, Patch, conditions_schema, is_uuid, validate_patches,
};
use super::validation::{FieldError, Validation};

/// Desired state of an OmniMachine: settings for one machine, identified by its Omni machine
/// ID (`spec.machineID`, or `metadata.name` when that is the ID).
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniMachine",
    plural = "omnimachines",
    singular = "omnimachine",
    namespaced,
    status = "OmniMachineStatus",
    shortname = "omach",
    category = "omni",
    doc = "Settings of one Omni machine in an OmniCluster; rendered as a Machine document of the template.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "Machine ID", type_ = "string", json_path = ".status.machineID"),
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
pub struct OmniMachineSpec {
    /// Labels for the machine in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations for the machine in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// The OmniCluster (same namespace) this machine belongs to.
    pub cluster_ref: LocalObjectReference,
    /// Omni machine ID (a UUID); defaults to `metadata.name`.
    #[serde(rename = "machineID", default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
    /// Lock the machine against configuration changes (Omni allows this for workers only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub locked: bool,
    /// Installation settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<MachineInstall>,
    /// Machine-configuration patches for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Vec<Patch>>,
    /// Talos system extensions for this machine. Left out, the set's or cluster's apply (or
    /// Omni keeps what the machine has); an explicit `[]` removes them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_extensions: Option<Vec<String>>,
    /// Extra kernel arguments for this machine. Left out, the set's or cluster's apply (or
    /// Omni keeps what the machine has); an explicit `[]` clears them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_args: Option<Vec<String>>,
}

/// Talos installation settings: exactly one of `disk` and `diskSelector`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineInstall {
    /// Disk to install Talos on, e.g. `/dev/nvme0n1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub disk: Option<String>,
    /// CEL expression choosing the install disk among the machine's disks, e.g.
    /// `disk.transport == "nvme"`. Needs an Omni speaking backend API 3 (the OmniConnection
    /// reports which); mutually exclusive with `disk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub disk_selector: Option<String>,
}

/// Observed state of an OmniMachine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniMachineStatus {
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
    /// Effective Omni machine ID.
    #[serde(rename = "machineID", default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl OmniMachine {
    /// Omni machine ID: `spec.machineID` when set, else `metadata.name`.
    pub fn effective_machine_id(&self) -> String {
        match self.spec.machine_id.as_deref() {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => self.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// Admission rules for OmniMachine (create and update alike).
pub fn validate(new: &OmniMachine, _old: Option<&OmniMachine>) -> Validation {
    let mut v = Validation::new();
    let id = new.effective_machine_id();
    if !is_uuid(&id) {
        v.push(FieldError::invalid(
            "spec.machineID",
            id,
            "machineID must be a UUID; set spec.machineID when metadata.name is not the Omni machine ID",
        ));
    }
    if let Some(install) = &new.spec.install {
        match (install.disk.as_deref(), install.disk_selector.as_deref()) {
            (None, None) => v.push(FieldError::required(
                "spec.install",
                "install requires exactly one of disk or diskSelector",
            )),
            (Some(_), Some(selector)) => v.push(FieldError::invalid(
                "spec.install.diskSelector",
                selector,
                "install.disk and install.diskSelector are mutually exclusive",
            )),
            _ => {}
        }
    }
    validate_patches(new.spec.patches.as_deref(), "spec.patches", &mut v);
    v
}
