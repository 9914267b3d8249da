//! OmniControlPlane, OmniWorkers and OmniMachine: report whether the referenced OmniCluster
//! exists (`Accepted`), and `Ready` once it exists and is Ready itself (a child is part of its
//! cluster: kstatus readers waiting for a child wait for the cluster). Event-driven, no Omni
//! calls;
//! their content reaches Omni through the parent cluster's reconcile, whose render also
//! reports what is wrong with a child's spec (on the cluster, where it stops the sync).
//!
//! The three kinds run the shared pipeline with one implementation: no finalizer (nothing
//! outside the object is theirs), no state, and the default next reconcile (only on a change
//! of the child or of its cluster).

use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;

use super::cluster::dependants::not_ready;
use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::Cached;
use super::shared::error::{Disposition, Failure, PassError, RetryPolicy};
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefKey, namespace_of};
use super::shared::pipeline::{Outcome, Pipeline};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::status::{Reported, Standing, reported, set_standing};
use super::shared::watches::{OwnKind, Watches};
use crate::api::Reason;
use crate::api::common::{Condition, missing_cluster, set_condition};
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

/// Why a child is not Ready: the OmniCluster it names does not exist, or is not Ready. The
/// cluster's watch wakes the child when it appears or its `Ready` turns.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChildFailure {
    /// The OmniCluster does not exist (`Accepted=False`).
    #[error("{}", missing_cluster(cluster))]
    MissingCluster {
        /// `spec.clusterRef.name`.
        cluster: String,
    },
    /// The OmniCluster exists (`Accepted=True`) and is not Ready.
    #[error("{0}")]
    ClusterNotReady(String),
}

impl Failure for ChildFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::MissingCluster { .. } => Reason::MissingCluster,
            Self::ClusterNotReady(_) => Reason::ClusterNotReady,
        }
    }

    fn retry(&self) -> RetryPolicy {
        RetryPolicy::AwaitChange
    }

    /// A child waits for its cluster either way.
    fn disposition(&self) -> Disposition {
        Disposition::Waiting
    }
}

/// Pure: the conditions of a child after `result` (`Ok`: its cluster exists and is Ready),
/// merged into `current`: `Accepted` says whether the cluster exists, `Ready` whether the
/// child is part of a Ready cluster.
pub(crate) fn child_conditions(
    current: Vec<Condition>,
    cluster: &str,
    result: Result<(), &ChildFailure>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Vec<Condition> {
    let exists = !matches!(result, Err(ChildFailure::MissingCluster { .. }));
    let accepted = Condition::accepted(cluster, exists, generation, now);
    let mut conditions = current;
    set_condition(&mut conditions, accepted.clone());
    match result {
        Ok(()) => {
            let message = format!("attached to OmniCluster {cluster:?}, which is Ready");
            set_standing(
                &mut conditions,
                Standing::Ready,
                Reason::Accepted,
                &message,
                generation,
                now,
            );
        }
        Err(failure) => {
            set_standing(
                &mut conditions,
                failure.disposition().into(),
                failure.reason(),
                &failure.to_string(),
                generation,
                now,
            );
        }
    }
    conditions
}

/// The pipeline's steps, the same for the three child kinds.
impl<K: Child> Pipeline for K {
    type State = ();
    type Found = ();
    /// Attached to its cluster, which is Ready.
    type Done = ();
    type Failure = ChildFailure;
    const FINALIZER: Finalizer = Finalizer::None;

    /// A child's rules are the cluster's to report: its render checks every child it selects
    /// and reports the first problem as `Validated=False` on the cluster, which is what stops
    /// the sync. The child itself only says whether it is attached.
    fn validate(&self) -> Result<(), ChildFailure> {
        Ok(())
    }

    async fn apply(&self, ctx: &Context, (): &()) -> Result<Outcome<Self>, PassError<Self>> {
        let name = self.cluster_ref();
        let cluster = ctx
            .api::<OmniCluster>(&self.namespace().unwrap_or_default())
            .get_opt(name)
            .await?;
        Ok(match cluster {
            None => Outcome::failed(ChildFailure::MissingCluster {
                cluster: name.to_string(),
            }),
            Some(cluster) => match not_ready(&cluster) {
                Some(why) => Outcome::failed(ChildFailure::ClusterNotReady(why)),
                None => Outcome::done(()),
            },
        })
    }

    fn desired_status(&self, outcome: &Outcome<Self>, now: jiff::Timestamp) -> Self::Status {
        let conditions = child_conditions(
            self.stored_conditions().to_vec(),
            self.cluster_ref(),
            outcome.result.as_ref().map(|_| ()),
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
    // Not filtered by the baseline model's predicate (`Quirks::mapped_events`), which passes
    // no status change: a child's `Ready` follows its cluster's, so the model's children
    // waited for ever. The original filters this watch, but its children report only whether
    // the cluster exists; and no loop runs through here (no child status wakes a cluster).
    let clusters = watches.of::<OmniCluster>().subscribe();
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
    fn accepted_follows_the_parent_and_ready_its_readiness() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let missing = ChildFailure::MissingCluster {
            cluster: "prod".into(),
        };
        let c = child_conditions(Vec::new(), "prod", Err(&missing), Some(1), t0);
        let got = |c: &[Condition]| -> Vec<(String, ConditionStatus, String)> {
            c.iter()
                .map(|c| (c.type_.clone(), c.status, c.reason.clone()))
                .collect()
        };
        assert_eq!(
            got(&c),
            [
                (
                    "Accepted".into(),
                    ConditionStatus::False,
                    "MissingCluster".into()
                ),
                (
                    "Ready".into(),
                    ConditionStatus::False,
                    "MissingCluster".into()
                ),
                (
                    "Reconciling".into(),
                    ConditionStatus::True,
                    "MissingCluster".into()
                ),
            ]
        );
        assert!(
            c.iter()
                .all(|c| c.message == r#"OmniCluster "prod" does not exist"#)
        );
        let t1 = t0 + jiff::SignedDuration::from_secs(60);
        let starved = ChildFailure::ClusterNotReady(
            "waiting for OmniCluster \"prod\" to become Ready (its status says why it is not)"
                .into(),
        );
        let c1 = child_conditions(c.clone(), "prod", Err(&starved), Some(1), t1);
        assert_eq!(
            got(&c1),
            [
                ("Accepted".into(), ConditionStatus::True, "Accepted".into()),
                (
                    "Ready".into(),
                    ConditionStatus::False,
                    "ClusterNotReady".into()
                ),
                (
                    "Reconciling".into(),
                    ConditionStatus::True,
                    "ClusterNotReady".into()
                ),
            ]
        );
        let c2 = child_conditions(c1.clone(), "prod", Ok(()), Some(2), t1);
        assert_eq!(
            got(&c2),
            [
                ("Accepted".into(), ConditionStatus::True, "Accepted".into()),
                ("Ready".into(), ConditionStatus::True, "Accepted".into()),
            ]
        );
        assert!(c2.iter().all(|c| c.observed_generation == Some(2)));
        // Unchanged inputs keep the transition time: no status write on idle reconciles.
        let c3 = child_conditions(
            c2.clone(),
            "prod",
            Ok(()),
            Some(2),
            t1 + jiff::SignedDuration::from_secs(60),
        );
        assert_eq!(c3, c2);
        assert_eq!(starved.retry(), RetryPolicy::AwaitChange);
    }
}
