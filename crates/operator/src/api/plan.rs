//! The change plan of an OmniCluster: `spec.changePolicy` (whether, and when, what the
//! operator plans is written to Omni) and `status.plan` (what it would change there).
//!
//! See docs/plan.md for the workflow; the decisions themselves are in `domain::plan`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether, and when, the changes the operator plans for a cluster are written to Omni.
/// Without it a cluster behaves as before the field existed: every plan is applied at once
/// (unless the operator's `--default-destructive-policy` says otherwise).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangePolicy {
    /// `Apply` (the default) writes every plan to Omni; `Plan` only computes it and shows it
    /// in `status.plan`, and never writes to Omni (deletion included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ChangeMode>,
    /// `Allow` applies destructive plans like any other; `RequireApproval` holds a plan that
    /// would destroy something (a machine set, a static machine, a config patch or a manifest
    /// group deleted; a machine set shrunk; a machine class changed under allocated
    /// machines; the cluster itself deleted) until the annotation
    /// `omni.texashpc.com/approve-plan` equals the plan's hash. Unset: the operator's
    /// `--default-destructive-policy` (chart value `changePolicy.defaultDestructive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<DestructivePolicy>,
}

/// `Apply` (the default) writes every plan to Omni; `Plan` only computes it and shows it in
/// `status.plan`, and never writes to Omni, deletion included.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ChangeMode {
    /// Write each plan to Omni.
    #[default]
    Apply,
    /// Compute and show each plan; never write to Omni.
    Plan,
}

/// `Allow` applies a plan that would destroy something like any other; `RequireApproval` holds
/// it, all of it, until the annotation `omni.texashpc.com/approve-plan` equals its hash
/// (`status.plan.hash`). Unset: the operator's `--default-destructive-policy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DestructivePolicy {
    /// Apply destructive plans like any other.
    #[default]
    Allow,
    /// Hold a destructive plan, all of it, until it is approved by its hash.
    RequireApproval,
}

impl DestructivePolicy {
    /// The spelling in manifests and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            DestructivePolicy::Allow => "Allow",
            DestructivePolicy::RequireApproval => "RequireApproval",
        }
    }
}

impl std::str::FromStr for DestructivePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Allow" => Ok(DestructivePolicy::Allow),
            "RequireApproval" => Ok(DestructivePolicy::RequireApproval),
            other => Err(format!(
                "{other:?} is not a destructive-change policy: use Allow or RequireApproval"
            )),
        }
    }
}

/// What the operator would change in Omni and has not: the plan computed in the last pass
/// that was not applied (mode `Plan`, held for approval, or an adoption that differs).
/// Absent when Omni matches the manifests or the last plan was applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// The plan's hash (64 hex digits): approve the plan by setting the annotation
    /// `omni.texashpc.com/approve-plan` to it. It changes only when the plan does.
    pub hash: String,
    /// `metadata.generation` the plan was computed for.
    pub generation: i64,
    /// One line, e.g. `1 to create, 2 to update, 1 to delete (destructive)`.
    pub summary: String,
    /// Creates, updates and deletes per Omni resource type, sorted by type.
    #[serde(default)]
    pub counts: Vec<PlanCount>,
    /// Whether applying the plan would destroy something.
    #[serde(default)]
    pub destructive: bool,
    /// What it would destroy, one line each (at most 20 listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destructive_changes: Vec<String>,
    /// The value of `omni.texashpc.com/approve-plan` found on the object when it approves
    /// another (earlier) plan: it was ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_approval: Option<String>,
    /// Each change: the resource and the fields it changes (contents by size only). At most
    /// 100 are listed; `omittedChanges` counts the rest. `omni-operator plan` prints them.
    #[serde(default)]
    pub changes: Vec<PlannedChange>,
    /// Changes not listed in `changes` (the hash covers them all).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_changes: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Changes of one Omni resource type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCount {
    /// The Omni resource type, e.g. `ConfigPatches`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Resources to create.
    pub create: u32,
    /// Resources to update.
    pub update: u32,
    /// Resources to delete.
    pub delete: u32,
}

/// One resource the plan creates, updates or deletes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedChange {
    /// `create`, `update` or `delete`.
    pub action: String,
    /// The Omni resource type, e.g. `MachineSets`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The resource's ID.
    pub id: String,
    /// The fields it sets or changes (creates and updates; at most 20 per change). A
    /// config patch's or manifest's content shows as its size only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<PlannedField>,
    /// Fields not listed in `fields`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_fields: u32,
}

/// One field a change sets, changes or removes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedField {
    /// `labels.<key>`, `annotations.<key>`, `metadata.phase` or `spec.<field>`.
    pub path: String,
    /// Its value in Omni now; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Its value once applied; absent when it is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}
