//! OmniControlPlane, OmniWorkers and OmniMachine: report whether the referenced OmniCluster
//! exists (`Accepted`, plus `Ready` mirroring it for kstatus). Event-driven, no Omni calls;
//! their content reaches Omni through the parent cluster's reconcile.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt};

use super::index::{RefKey, namespace_of};
use super::status::Reported;
use super::watches::SharedKind;
use super::{
    Cached, Context, Error, Shutdown, Watches, cluster_changes_of, drive, indexed_controller_for,
    instrumented, status,
};
use crate::api::common::{Condition, condition_types, set_condition};
use crate::api::control_plane::OmniControlPlaneStatus;
use crate::api::machine::OmniMachineStatus;
use crate::api::workers::OmniWorkersStatus;
use crate::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};

/// What the child controller needs from each child kind.
pub(crate) trait Child:
    Reported<Scope = NamespaceResourceScope> + Send + Sync + 'static
{
    /// `spec.clusterRef.name`.
    fn cluster_ref(&self) -> &str;
    /// The status to store, given the computed conditions.
    fn desired_status(&self, conditions: Vec<Condition>) -> Self::Status;
}

impl Child for OmniControlPlane {
    fn cluster_ref(&self) -> &str {
        &self.spec.cluster_ref.name
    }
    fn desired_status(&self, conditions: Vec<Condition>) -> Self::Status {
        OmniControlPlaneStatus {
            observed_generation: self.metadata.generation,
            conditions,
            cluster_ref: Some(self.spec.cluster_ref.name.clone()),
        }
    }
}

impl Child for OmniWorkers {
    fn cluster_ref(&self) -> &str {
        &self.spec.cluster_ref.name
    }
    fn desired_status(&self, conditions: Vec<Condition>) -> Self::Status {
        OmniWorkersStatus {
            observed_generation: self.metadata.generation,
            conditions,
            cluster_ref: Some(self.spec.cluster_ref.name.clone()),
            worker_set_name: Some(self.effective_worker_set_name()),
        }
    }
}

impl Child for OmniMachine {
    fn cluster_ref(&self) -> &str {
        &self.spec.cluster_ref.name
    }
    fn desired_status(&self, conditions: Vec<Condition>) -> Self::Status {
        OmniMachineStatus {
            observed_generation: self.metadata.generation,
            conditions,
            cluster_ref: Some(self.spec.cluster_ref.name.clone()),
            machine_id: Some(self.effective_machine_id()),
        }
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

async fn reconcile<K: Child>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented(obj.as_ref(), &ctx, async {
        let namespace = obj.namespace().unwrap_or_default();
        let cluster = obj.cluster_ref().to_string();
        // dereference
        let exists = ctx
            .api::<OmniCluster>(&namespace)
            .get_opt(&cluster)
            .await?
            .is_some();
        // build
        let old = obj.stored_conditions().to_vec();
        let conditions = child_conditions(
            old.clone(),
            &cluster,
            exists,
            obj.meta().generation,
            ctx.clock.now(),
        );
        let desired = obj.desired_status(conditions.clone());
        // status
        status::report(ctx.as_ref(), obj.as_ref(), &desired).await?;
        Ok(Action::await_change())
    })
    .await
}

/// The controller of child kind `K`, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<K: Child + SharedKind, S: Shutdown>(
    ctx: Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<K, S> {
    let (controller, index) = indexed_controller_for::<K>(&ctx, watches, |c| {
        vec![RefKey::new("cluster", &namespace_of(c), c.cluster_ref())]
    });
    let controller = controller.watches_stream(
        cluster_changes_of(watches, super::ClusterTrigger::ChangesAndConditions),
        move |cluster: Cached<OmniCluster>| {
            if !crate::baseline::mapped_event_passes(&K::kind(&()), cluster.meta()) {
                return Vec::new();
            }
            index.referring_to("cluster", &cluster)
        },
    );
    drive::<K, _, _>(controller, ctx, shutdown, reconcile::<K>)
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
