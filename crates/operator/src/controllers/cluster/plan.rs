//! The plan step of a cluster pass, between observing Omni and writing to it: the pass's plan
//! judged by [`crate::domain::plan`] under the object's `spec.changePolicy` (or the cluster
//! controller's default destructive policy), its approval annotation and whether it adopts an
//! existing Omni cluster. No I/O: it only reads what the pass already has (the object, the
//! controller's state, the connection's hash key).

use kube::ResourceExt;
use omni_client::template::Plan;

use super::state::ClusterState;
use crate::api::keys::APPROVE_PLAN_ANNOTATION;
use crate::api::plan::{ChangeMode, DestructivePolicy, PlanStatus};
use crate::api::{OmniCluster, OmniConnection};
use crate::domain::plan::{
    ChangeSet, Decision, Hold, OPERATOR_BOOKKEEPING, Situation, decide, hold_message, ignored,
};

/// A plan that is not applied, and how it is reported.
#[derive(Debug)]
pub(crate) struct HeldPlan {
    /// Why.
    pub(crate) hold: Hold,
    /// `status.plan`.
    pub(crate) plan: PlanStatus,
    /// The condition message.
    pub(crate) message: String,
}

/// What the pass does with its plan.
#[derive(Debug)]
pub(super) enum Gate {
    /// Write nothing: Omni matches (or, in mode `Plan`, matches as far as a user can see).
    InSync,
    /// Write the plan; `approved` is its hash when the approval annotation released it.
    Apply {
        /// The approved hash.
        approved: Option<String>,
    },
    /// Write nothing and report the plan.
    Hold(Box<HeldPlan>),
}

fn mode(cluster: &OmniCluster) -> ChangeMode {
    cluster
        .spec
        .change_policy
        .as_ref()
        .and_then(|p| p.mode)
        .unwrap_or_default()
}

fn destructive_policy(cluster: &OmniCluster, state: &ClusterState) -> DestructivePolicy {
    cluster
        .spec
        .change_policy
        .as_ref()
        .and_then(|p| p.destructive)
        .unwrap_or(state.default_destructive)
}

/// The value of the approval annotation, if set.
fn approval(cluster: &OmniCluster) -> Option<&str> {
    cluster
        .annotations()
        .get(APPROVE_PLAN_ANNOTATION)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// The gate of a sync: `plan` is the pass's plan, `adopting` whether the Omni cluster exists
/// without this object's stamp and the adopt annotation asks to take it over.
pub(super) fn gate(
    state: &ClusterState,
    cluster: &OmniCluster,
    conn: &OmniConnection,
    plan: &Plan,
    adopting: bool,
) -> Gate {
    let (mode, destructive_policy) = (mode(cluster), destructive_policy(cluster, state));
    // What `decide` answers for these inputs whatever the change set: judging it is left out
    // where nothing could hold it (the default, and most passes of a cold start).
    if plan.is_empty() {
        return Gate::InSync;
    }
    if mode == ChangeMode::Apply && destructive_policy == DestructivePolicy::Allow && !adopting {
        return Gate::Apply { approved: None };
    }
    let changes = ChangeSet::from_plan(plan, &OPERATOR_BOOKKEEPING);
    let hash = changes.hash(&state.omni.plan_key(conn));
    let approval = approval(cluster);
    let decision = decide(&Situation {
        mode,
        destructive_policy,
        adopting,
        nothing_to_write: plan.is_empty(),
        changes: &changes,
        hash: &hash,
        approval,
    });
    match decision {
        Decision::InSync => Gate::InSync,
        Decision::Apply { approved } => Gate::Apply {
            approved: approved.then_some(hash),
        },
        Decision::Hold(hold) => Gate::Hold(Box::new(held(
            cluster,
            hold,
            &changes,
            &hash,
            approval,
            &plan.cluster,
        ))),
    }
}

/// The gate of a deletion that would delete Omni cluster `name` (the object owns it and does
/// not orphan it): `None` when it may go ahead, else why it is held. Mode `Plan` never writes
/// to Omni, so it holds a deletion too (until the mode changes or `deletePolicy.orphan` is
/// set); `RequireApproval` holds it until approved.
pub(super) fn deletion_gate(
    state: &ClusterState,
    cluster: &OmniCluster,
    conn: &OmniConnection,
    name: &str,
) -> Result<Option<String>, Box<HeldPlan>> {
    let changes = ChangeSet::deletion(name, cluster.destroy_machines_on_delete());
    let hash = changes.hash(&state.omni.plan_key(conn));
    let approval = approval(cluster);
    let hold = if mode(cluster) == ChangeMode::Plan {
        Hold::PlanOnly
    } else if destructive_policy(cluster, state) == DestructivePolicy::RequireApproval {
        if approval == Some(hash.as_str()) {
            return Ok(Some(hash));
        }
        Hold::ApprovalRequired
    } else {
        return Ok(None);
    };
    Err(Box::new(held(
        cluster, hold, &changes, &hash, approval, name,
    )))
}

fn held(
    cluster: &OmniCluster,
    hold: Hold,
    changes: &ChangeSet,
    hash: &str,
    approval: Option<&str>,
    omni_cluster: &str,
) -> HeldPlan {
    let stale = ignored(approval, hash);
    HeldPlan {
        hold,
        plan: changes.status(hash, cluster.metadata.generation.unwrap_or_default(), stale),
        message: hold_message(hold, changes, hash, stale, omni_cluster),
    }
}
