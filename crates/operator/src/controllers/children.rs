//! OmniControlPlane, OmniWorkers and OmniMachine: report whether the referenced OmniCluster
//! exists (`Accepted`, plus `Ready` mirroring it for kstatus). Event-driven, no Omni calls;
//! their content reaches Omni through the parent cluster's reconcile, whose render also
//! reports what is wrong with a child's spec (on the cluster, where it stops the sync).
//!
//! The three kinds run the shared pipeline with one implementation: no finalizer (nothing
//! outside the object is theirs), no state, and the default next reconcile (only on a change
//! of the child or of its cluster).

use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;

use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::Cached;
use super::shared::error::{Failure, PassError, RetryPolicy};
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefKey, namespace_of};
use super::shared::pipeline::{Outcome, Pipeline};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::status::{Reported, reported};
use super::shared::watches::{OwnKind, Watches};
use crate::api::Reason;
use crate::api::common::{Condition, condition_types, missing_cluster, set_condition};
use crate::api::control_plane::OmniControlPlaneStatus;
use crate::api::machine::OmniMachineStatus;
use crate::api::workers::OmniWorkersStatus;
use crate::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};

/// What the child controller needs from each child kind.
pub(crate) trait Child:
    Reported<Scope = k8s_openapi::NamespaceResourceScope> + OwnKind + Send + Sync + 'static
{
    /// `spec.clusterRef.name`.
    fn cluster_ref(&self) -> &str;
    /// The status to store, given the computed conditions.
    fn status_with(&self, conditions: Vec<Condition>) -> Self::Status;
}

/// Why a child is not attached: the OmniCluster it names does not exist. The cluster's watch
/// wakes the child when it appears.
#[derive(Debug, thiserror::Error)]
#[error("{}", missing_cluster(cluster))]
pub(crate) struct MissingCluster {
    /// `spec.clusterRef.name`.
    cluster: String,
}

impl Failure for MissingCluster {
    fn reason(&self) -> Reason {
        Reason::MissingCluster
    }

    fn retry(&self) -> RetryPolicy {
        RetryPolicy::AwaitChange
    }
}

/// Pure: the `Accepted` and `Ready` conditions after merging into `current`.
pub(crate) fn child_conditions(
    current: Vec<Condition>,
    cluster: &str,
    cluster_exists: bool,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Vec<Condition> {
    let accepted = Condition::accepted(cluster, cluster_exists, generation, now);
    // kstatus readers look at `Ready`: it says the same as `Accepted`.
    let ready = Condition {
        type_: condition_types::READY.to_string(),
        ..accepted.clone()
    };
    let mut conditions = current;
    set_condition(&mut conditions, accepted);
    set_condition(&mut conditions, ready);
    conditions
}

/// The pipeline's steps, the same for the three child kinds.
impl<K: Child> Pipeline for K {
    type State = ();
    type Found = ();
    /// Attached to its cluster.
    type Done = ();
    type Failure = MissingCluster;
    const FINALIZER: Finalizer = Finalizer::None;

    /// A child's rules are the cluster's to report: its render checks every child it selects
    /// and reports the first problem as `Validated=False` on the cluster, which is what stops
    /// the sync. The child itself only says whether it is attached.
    fn validate(&self) -> Result<(), MissingCluster> {
        Ok(())
    }

    async fn apply(&self, ctx: &Context, (): &()) -> Result<Outcome<Self>, PassError<Self>> {
        let cluster = self.cluster_ref();
        let exists = ctx
            .api::<OmniCluster>(&self.namespace().unwrap_or_default())
            .get_opt(cluster)
            .await?
            .is_some();
        Ok(if exists {
            Outcome::done(())
        } else {
            Outcome::failed(MissingCluster {
                cluster: cluster.to_string(),
            })
        })
    }

    fn desired_status(&self, outcome: &Outcome<Self>, now: jiff::Timestamp) -> Self::Status {
        let conditions = child_conditions(
            self.stored_conditions().to_vec(),
            self.cluster_ref(),
            outcome.result.is_ok(),
            self.meta().generation,
            now,
        );
        self.status_with(conditions)
    }
}

macro_rules! child_kind {
    ($kind:ident => $status:ident { $($extra:ident: $value:expr),* $(,)? }) => {
        reported!($kind => $status);

        impl Child for $kind {
            fn cluster_ref(&self) -> &str {
                &self.spec.cluster_ref.name
            }
            #[allow(clippy::redundant_closure_call)]
            fn status_with(&self, conditions: Vec<Condition>) -> $status {
                $status {
                    observed_generation: self.metadata.generation,
                    conditions,
                    cluster_ref: Some(self.spec.cluster_ref.name.clone()),
                    last_handled_reconcile_at: self
                        .status
                        .as_ref()
                        .and_then(|s| s.last_handled_reconcile_at.clone()),
                    $($extra: ($value)(self),)*
                }
            }
        }
    };
}

child_kind!(OmniControlPlane => OmniControlPlaneStatus {});
child_kind!(OmniWorkers => OmniWorkersStatus {
    worker_set_name: |w: &OmniWorkers| Some(w.effective_worker_set_name()),
});
child_kind!(OmniMachine => OmniMachineStatus {
    machine_id: |m: &OmniMachine| Some(m.effective_machine_id()),
});

/// The controller of child kind `K`, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<K: Child + std::fmt::Debug, S: Shutdown>(
    ctx: &Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<K, S> {
    let (controller, index) = indexed_controller_for::<K>(ctx, watches, |c| {
        vec![RefKey::new("cluster", &namespace_of(c), c.cluster_ref())]
    });
    let clusters = ctx
        .baseline
        .mapped_events(watches.of::<OmniCluster>().subscribe());
    let controller = controller.watches_stream(
        cluster_triggers(clusters, ClusterTrigger::ChangesAndConditions),
        move |cluster: Cached<OmniCluster>| index.referring_to("cluster", &cluster),
    );
    let ctx = ctx.clone();
    async move { drive::<K>(controller, ctx, (), shutdown).await }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::ConditionStatus;

    #[test]
    fn accepted_and_ready_follow_parent_existence() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let c = child_conditions(Vec::new(), "prod", false, Some(1), t0);
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|c| c.status == ConditionStatus::False
            && c.reason == "MissingCluster"
            && c.message == r#"OmniCluster "prod" does not exist"#));
        let t1 = t0 + jiff::SignedDuration::from_secs(60);
        let c2 = child_conditions(c.clone(), "prod", true, Some(2), t1);
        assert!(c2.iter().all(|c| c.status == ConditionStatus::True
            && c.reason == "Accepted"
            && c.message == r#"attached to OmniCluster "prod""#
            && c.last_transition_time == t1
            && c.observed_generation == Some(2)));
        // Unchanged inputs keep the transition time: no status write on idle reconciles.
        let c3 = child_conditions(
            c2.clone(),
            "prod",
            true,
            Some(2),
            t1 + jiff::SignedDuration::from_secs(60),
        );
        assert_eq!(c3, c2);
    }
}
