//! OmniCluster: render the cluster and its children into an Omni cluster template, keep Omni
//! in line with it, report Omni's view, and delete the Omni cluster on deletion.
//!
//! Unlike the original, a reconcile that finds Omni already matching the template writes
//! nothing: the change set is computed (reads only) and applied only when non-empty, and
//! status timestamps move only when something was applied.
//!
//! Shape (docs/architecture.md): a pass validates the stored object (the webhook's rules),
//! then syncs it (`sync.rs`: dereference, render, plan, apply, read Omni's view) or deletes it
//! (`delete.rs`), and ends in one `outcome::Outcome`. The status is derived from it by a pure
//! function (`outcome::desired_status`) and written once; the next reconcile is another pure
//! function of it (`outcome::recheck`, `outcome::retry_policy`). Failures are
//! `ClusterFailure`s, which know their condition reason and retry policy. `children.rs` holds
//! the child caches the render reads from, `ownership.rs` whose an Omni cluster is,
//! `omni_state.rs` Omni's view in status, `plan.rs` the gate between planning and writing
//! (`spec.changePolicy`, approval, adoption; the rules are `domain::plan`'s), `triggers.rs`
//! what of a cluster wakes its dependants.

mod children;
mod delete;
pub(crate) mod dependants;
mod failure;
mod omni_state;
mod outcome;
mod ownership;
mod plan;
mod readiness;
mod state;
mod sync;
pub(crate) mod triggers;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use self::children::{ChildCaches, ChildKind, child_mapper, cluster_keys, omni_status_key};
use self::failure::ClusterFailure;
use self::outcome::{Done, Outcome, desired_status, recheck, retry_policy, status_failing_for};
use self::state::{ClusterState, sync_interval};
pub use self::sync::OMNI_DEADLINE;
use crate::api::cluster::OmniClusterStatus;
use crate::api::common::{condition_types as ct, find_condition};
use crate::api::keys::APPROVE_PLAN_ANNOTATION;
use crate::api::{OmniCluster, OmniConnection, OmniControlPlane, OmniMachine, OmniWorkers, Reason};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::decoded::Cached;
use crate::controllers::shared::error::{PassError, RetryPolicy, periodic};
use crate::controllers::shared::finalizer::Finalizer;
use crate::controllers::shared::pipeline::{Cleanup, Pipeline, webhook_rules};
use crate::controllers::shared::runner::{Shutdown, drive, indexed_controller_for};
use crate::controllers::shared::setup::Setup;
use crate::controllers::shared::status::reported;
use crate::controllers::shared::triggers::{own_changes, touched};
use crate::controllers::shared::watches::Watches;

reported!(OmniCluster => OmniClusterStatus, suspended: |c| c.spec.suspend);

/// The pipeline's steps for OmniCluster.
impl Pipeline for OmniCluster {
    type State = ClusterState;
    /// What the render recorded, once the pass got that far.
    type Found = Option<Box<outcome::Rendition>>;
    type Done = Done;
    type Failure = ClusterFailure;
    const FINALIZER: Finalizer = Finalizer::CurrentOrLegacy;

    /// The OmniConnection: the Omni every pass talks to.
    fn target(&self) -> Option<String> {
        let ns = kube::ResourceExt::namespace(self).unwrap_or_default();
        Some(format!("connection:{ns}/{}", self.spec.connection_ref.name))
    }

    fn validate(&self) -> Result<(), ClusterFailure> {
        webhook_rules(
            crate::api::cluster::validate_stored(self),
            ClusterFailure::InvalidSpec,
        )
    }

    async fn apply(&self, ctx: &Context, state: &ClusterState) -> Result<Outcome, PassError<Self>> {
        Ok(sync::apply_cluster(ctx, state, self).await?)
    }

    async fn cleanup(
        &self,
        ctx: &Context,
        state: &ClusterState,
    ) -> Result<Cleanup<Outcome>, PassError<Self>> {
        let step = delete::cleanup(ctx, state, self).await?;
        if matches!(step, Cleanup::Done) {
            state.omni.forget_status_of(
                &self.metadata.namespace.clone().unwrap_or_default(),
                &self.spec.connection_ref.name,
                &self.effective_cluster_name(),
            );
        }
        Ok(step)
    }

    fn desired_status(&self, outcome: &Outcome, now: jiff::Timestamp) -> OmniClusterStatus {
        desired_status(self, outcome, now)
    }

    fn recheck(&self, done: &Done, ctx: &Context, state: &ClusterState) -> Action {
        let status_failing = status_failing_for(self, ctx.clock.now());
        recheck(done, periodic(sync_interval(self, state)), status_failing)
    }

    fn retry(&self, failure: &ClusterFailure, state: &ClusterState) -> RetryPolicy {
        retry_policy(failure, periodic(sync_interval(self, state)))
    }

    fn forget(&self, state: &ClusterState) {
        state.unrecorded.forget(&self.uid().unwrap_or_default());
    }

    /// One Event per change set written to Omni, counting its changes per resource type, once
    /// its status records it; and one when a plan that was held, or pre-approved, is applied
    /// with its approval.
    async fn announce(
        &self,
        ctx: &Context,
        outcome: &Outcome,
        old: Option<&OmniClusterStatus>,
        _new: &OmniClusterStatus,
    ) {
        let hash = match &outcome.result {
            Ok(Done::Synced(s)) => match s.unrecorded(old) {
                Some(applied) => {
                    ctx.event(
                        self,
                        EventType::Normal,
                        Reason::ChangesApplied,
                        format!("applied to Omni: {}", applied.summary),
                    )
                    .await;
                    applied.approved.as_deref()
                }
                None => None,
            },
            // A deletion runs over several passes: announced on its first.
            Ok(Done::Deleting { approved, .. })
                if old
                    .and_then(|s| find_condition(&s.conditions, ct::READY))
                    .is_none_or(|c| c.reason != Reason::Deleting) =>
            {
                approved.as_deref()
            }
            _ => None,
        };
        if let Some(hash) = hash {
            ctx.event(
                self,
                EventType::Normal,
                Reason::PlanApplied,
                format!(
                    "applied plan {hash}, approved by the annotation {APPROVE_PLAN_ANNOTATION}"
                ),
            )
            .await;
        }
    }
}

/// The OmniCluster controller, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<S: Shutdown>(
    ctx: &Arc<Context>,
    setup: &Setup<'_>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniCluster>(ctx, watches, cluster_keys);
    let (by_cp, by_workers, by_machine) = (index.clone(), index.clone(), index.clone());
    let by_omni_status = index.clone();
    // A change of a cluster's status in Omni, from the connection's status watch.
    let status_changes = setup.omni.status_changes().flat_map(move |change| {
        let key = omni_status_key(&change.namespace, &change.connection, &change.cluster);
        futures::stream::iter(by_omni_status.get(&key))
    });
    let children = ChildCaches {
        control_planes: watches.of::<OmniControlPlane>().store(),
        workers: watches.of::<OmniWorkers>().store(),
        machines: watches.of::<OmniMachine>().store(),
    };
    let state = ClusterState::new(setup, children);
    let connections = ctx
        .baseline
        .mapped_events(watches.of::<OmniConnection>().subscribe());
    let controller = controller
        .watches_stream(touched(connections), move |conn: Cached<OmniConnection>| {
            index.referring_to("connection", &conn)
        })
        .watches_stream(
            own_changes(watches.of::<OmniControlPlane>().subscribe()),
            child_mapper::<OmniControlPlane>(by_cp, ChildKind::ControlPlane),
        )
        .watches_stream(
            own_changes(watches.of::<OmniWorkers>().subscribe()),
            child_mapper::<OmniWorkers>(by_workers, ChildKind::Workers),
        )
        .watches_stream(
            own_changes(watches.of::<OmniMachine>().subscribe()),
            child_mapper::<OmniMachine>(by_machine, ChildKind::Machine),
        )
        .reconcile_on(status_changes);
    drive::<OmniCluster>(controller, ctx.clone(), state, shutdown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::shared::status::Reported as _;

    /// The info metric's `suspended` label comes from the kind: only an OmniCluster can be.
    /// (A macro matching the kind as a type once lost this.)
    #[test]
    fn only_a_suspended_cluster_reports_suspended() {
        let cluster = |suspend: bool| -> OmniCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "omni.texashpc.com/v1alpha1",
                "kind": "OmniCluster",
                "metadata": {"name": "edge", "namespace": "ops"},
                "spec": {"connectionRef": {"name": "omni"}, "suspend": suspend,
                         "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}},
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(cluster(true).suspended());
        assert!(!cluster(false).suspended());
    }
}
