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
//! function of it (`outcome::next_action`). Failures are `ClusterFailure`s, which know
//! their condition reason and retry policy. `children.rs` holds the child caches the render
//! reads from, `ownership.rs` whose an Omni cluster is, `omni_state.rs` Omni's view in status,
//! `plan.rs` the gate between planning and writing (`spec.changePolicy`, approval, adoption).

mod children;
mod delete;
mod failure;
mod omni_state;
mod outcome;
mod ownership;
pub(crate) mod plan;
mod sync;

use std::future::Future;

use futures::StreamExt as _;
use std::sync::Arc;
use std::time::Duration;

use kube::Resource as _;
use kube::runtime::controller::Action;

pub(crate) use self::children::ChildCaches;
use self::children::{ChildKind, child_mapper, cluster_keys, omni_status_key};
use self::delete::cleanup;
pub(crate) use self::failure::ClusterFailure;
use self::outcome::{Outcome, desired_status, next_action};
pub(crate) use self::ownership::OMNI_OWNER_ANNOTATION;
use self::sync::apply_cluster;
use super::pipeline::{self, Cleanup, Pipeline};
use super::{Cached, Context, Error, Shutdown, Watches, drive, indexed_controller_for, touched};
use crate::api::{OmniCluster, OmniConnection, OmniControlPlane, OmniMachine, OmniWorkers};

/// How long the Omni work of one pass may take: the ownership check, plan and apply of a sync;
/// the status read; one delete step. Each call is bounded by the client's request timeout
/// ([`omni_client::transport::DEFAULT_REQUEST_TIMEOUT`], 30 s) as well, so a hung Omni fails
/// the pass (and the object retries with backoff) instead of wedging the object.
pub const OMNI_DEADLINE: Duration = Duration::from_secs(60);

/// Value of Omni's `omni.sidero.dev/managed-by-gitops-tools` annotation on everything this
/// operator writes: Omni's UI then tells people who manages the resource.
pub(crate) const GITOPS_TOOL: &str = "omni-operator";

/// How often `cluster` is re-checked: its `syncInterval`, clamped to the floor for intervals
/// stored without admission (so a tiny one cannot hot-loop).
fn sync_interval(cluster: &OmniCluster, ctx: &Context) -> Duration {
    crate::api::duration::clamp_interval(
        cluster
            .sync_interval()
            .to_std()
            .unwrap_or(Duration::from_secs(300)),
        ctx.min_interval,
    )
}

/// The pipeline's steps for OmniCluster.
impl Pipeline for OmniCluster {
    type Outcome = Outcome;
    const LEGACY_FINALIZER: bool = true;

    /// The OmniConnection: the Omni every pass talks to.
    fn target(&self) -> Option<String> {
        let ns = kube::ResourceExt::namespace(self).unwrap_or_default();
        Some(format!("connection:{ns}/{}", self.spec.connection_ref.name))
    }

    fn validate(&self) -> crate::api::validation::Validation {
        crate::api::cluster::validate_stored(self)
    }

    fn invalid(summary: String) -> Outcome {
        Outcome::failed(ClusterFailure::InvalidSpec(summary))
    }

    async fn apply(self: Arc<Self>, ctx: Arc<Context>) -> Result<Outcome, Error> {
        apply_cluster(&ctx, &self).await
    }

    fn desired_status(
        &self,
        outcome: &Outcome,
        now: jiff::Timestamp,
    ) -> crate::api::cluster::OmniClusterStatus {
        desired_status(self, outcome, now)
    }

    fn next(&self, outcome: Outcome, ctx: &Context) -> Result<Action, Error> {
        let status_failing = outcome::status_failing_for(self, ctx.clock.now());
        next_action(
            outcome,
            super::periodic(sync_interval(self, ctx)),
            status_failing,
        )
        .map_err(Error::from)
    }

    /// One Event when a plan that was held, or pre-approved, is applied with its approval.
    async fn announce(
        &self,
        ctx: &Context,
        outcome: &Outcome,
        old: Option<&crate::api::cluster::OmniClusterStatus>,
        _new: &crate::api::cluster::OmniClusterStatus,
    ) {
        let hash = match outcome {
            Outcome::Synced(s) if s.changed => s.approved.as_deref(),
            // A deletion runs over several passes: announced on its first.
            Outcome::Deleting { approved, .. }
                if old
                    .and_then(|s| {
                        crate::api::common::find_condition(
                            &s.conditions,
                            crate::api::common::condition_types::READY,
                        )
                    })
                    .is_none_or(|c| c.reason != crate::api::common::reasons::DELETING) =>
            {
                approved.as_deref()
            }
            _ => None,
        };
        if let Some(hash) = hash {
            ctx.event(
                self,
                kube::runtime::events::EventType::Normal,
                crate::plan::REASON_PLAN_APPLIED,
                format!(
                    "applied plan {hash}, approved by the annotation {}",
                    crate::plan::APPROVE_ANNOTATION
                ),
            )
            .await;
        }
    }

    async fn cleanup(self: Arc<Self>, ctx: Arc<Context>) -> Result<Cleanup<Outcome>, Error> {
        let step = cleanup(&ctx, &self).await?;
        if matches!(step, Cleanup::Done) {
            ctx.omni.forget_status_of(
                &self.metadata.namespace.clone().unwrap_or_default(),
                &self.spec.connection_ref.name,
                &self.effective_cluster_name(),
            );
        }
        Ok(step)
    }
}

/// The OmniCluster controller, subscribed to `watches`: runs until `shutdown` completes.
pub fn start<S: Shutdown>(
    ctx: Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniCluster>(&ctx, watches, cluster_keys);
    let (by_cp, by_workers, by_machine) = (index.clone(), index.clone(), index.clone());
    let by_omni_status = index.clone();
    // A change of a cluster's status in Omni, from the connection's status watch.
    let status_changes = ctx.omni.status_changes().flat_map(move |change| {
        let key = omni_status_key(&change.namespace, &change.connection, &change.cluster);
        futures::stream::iter(by_omni_status.get(&key))
    });
    if let Ok(mut slot) = ctx.cluster_children.write() {
        *slot = Some(ChildCaches {
            control_planes: watches.of::<OmniControlPlane>().store(),
            workers: watches.of::<OmniWorkers>().store(),
            machines: watches.of::<OmniMachine>().store(),
        });
    }
    let controller = controller
        .watches_stream(
            touched::<OmniConnection>(watches),
            move |conn: Cached<OmniConnection>| {
                if !crate::baseline::mapped_event_passes("connection→cluster", conn.meta()) {
                    return Vec::new();
                }
                index.referring_to("connection", &conn)
            },
        )
        .watches_stream(
            touched::<OmniControlPlane>(watches),
            child_mapper::<OmniControlPlane>(by_cp, ChildKind::ControlPlane),
        )
        .watches_stream(
            touched::<OmniWorkers>(watches),
            child_mapper::<OmniWorkers>(by_workers, ChildKind::Workers),
        )
        .watches_stream(
            touched::<OmniMachine>(watches),
            child_mapper::<OmniMachine>(by_machine, ChildKind::Machine),
        )
        .reconcile_on(status_changes);
    async move {
        drive::<OmniCluster, _, _>(controller, ctx.clone(), shutdown, pipeline::reconcile).await;
        if let Ok(mut slot) = ctx.cluster_children.write() {
            *slot = None;
        }
    }
}
