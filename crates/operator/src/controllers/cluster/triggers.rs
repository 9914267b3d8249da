//! What of an OmniCluster wakes the objects that refer to it: each dependant kind names what
//! it reads of its cluster ([`ClusterTrigger`]), and its controller's watch of the clusters
//! passes only a change of that.

use futures::{Stream, StreamExt as _};
use kube::api::Api;

use crate::api::OmniCluster;
use crate::api::common::{ConditionStatus, condition_types as ct, find_condition};
use crate::controllers::shared::decoded::Cached;
use crate::controllers::shared::triggers::{
    Deletions, Triggers, alongside, changes_from, decoded, deletion_mark, hash_of, own_change,
};
use crate::controllers::shared::watches::{SharedWatch, WatchEvent};

/// What of an OmniCluster wakes the objects that refer to it: what they read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterTrigger {
    /// A change of the cluster itself (its spec generation, labels, annotations, finalizers,
    /// the deletion mark), a condition turning (its type and status, e.g. `Ready` becoming
    /// `True` once Omni runs the cluster), `Ready`'s reason changing, or Omni reporting its
    /// Kubernetes API ready or not: for dependants that read its spec or wait on it (exports,
    /// releases, children).
    ChangesAndConditions,
    /// What [`ClusterTrigger::ChangesAndConditions`] passes, and what Omni reports of the
    /// cluster's health in its typed status: the phase, each machine set's phase, readiness and
    /// counts, the upgrade phases and the health checks' states. For dependants that wait for
    /// the cluster to be healthy (releases with `spec.clusterHealth`); its messages and times
    /// still wake nobody.
    Health,
    /// Only the connection it names and the deletion mark, besides its appearance and deletion:
    /// for the connection (the key's hold and a waiting deletion read nothing else of it).
    Connection,
    /// Only what names it: its name in Omni (`spec.clusterName`, else its own) and the deletion
    /// mark, besides its appearance and deletion, and what a dependant's first action waits
    /// for (its `Ready` status and reason, its Kubernetes API readiness): for dependants that
    /// read nothing else of it (secret syncs). A spec edit of a cluster used to re-run every
    /// sync of it, a no-op pass each: 10,000 passes for 100 edits in the benchmark.
    Identity,
}

/// The OmniClusters among `events` (a subscription to the clusters' shared watch) whose change
/// can matter to the objects referring to one: its first sighting, its deletion, and what
/// `trigger` says. The rest of its status moving with Omni (phase, machine counts, messages,
/// timestamps) wakes nobody: it would re-run every dependant of the cluster on each write.
pub(crate) fn cluster_triggers(
    events: impl Stream<Item = WatchEvent<OmniCluster>> + Send + 'static,
    trigger: ClusterTrigger,
) -> impl Stream<Item = Triggers<OmniCluster>> + Send + 'static {
    changes_of(events, trigger).map(Ok)
}

/// The OmniClusters of `namespace` whose change wakes a dependant reading what `trigger` says, on
/// a watch of their own (the controllers filter the shared watch the same way): for a test to
/// see what wakes a dependant.
pub fn cluster_changes(
    client: kube::Client,
    namespace: &str,
    trigger: ClusterTrigger,
) -> impl Stream<Item = OmniCluster> + Send + use<> {
    let mut watch = SharedWatch::new(Api::namespaced(client, namespace));
    let changes = changes_of(watch.subscribe(), trigger);
    decoded(alongside(watch, changes))
}

fn changes_of(
    events: impl Stream<Item = WatchEvent<OmniCluster>> + Send + 'static,
    trigger: ClusterTrigger,
) -> impl Stream<Item = Cached<OmniCluster>> + Send + 'static {
    changes_from(
        events,
        move |cached: &Cached<OmniCluster>| {
            // An undecodable cluster is woken for by what its metadata says.
            let Some(o) = cached.decoded() else {
                return own_change(cached);
            };
            match trigger {
                ClusterTrigger::ChangesAndConditions => own_change(o) ^ condition_states(o),
                ClusterTrigger::Health => own_change(o) ^ condition_states(o) ^ health_states(o),
                ClusterTrigger::Identity => identity(o),
                ClusterTrigger::Connection => {
                    hash_of((&o.spec.connection_ref.name, deletion_mark(&o.metadata)))
                }
            }
        },
        Deletions::Pass,
    )
}

/// A hash of what names `cluster` (its name in Omni and its deletion mark) and of its
/// readiness.
fn identity(cluster: &OmniCluster) -> u64 {
    hash_of((
        cluster.effective_cluster_name(),
        deletion_mark(&cluster.metadata),
        readiness(cluster),
    ))
}

/// A hash of what Omni reports of `cluster`'s health in its typed status (values, not texts).
fn health_states(cluster: &OmniCluster) -> u64 {
    let Some(s) = &cluster.status else {
        return hash_of(());
    };
    let sets: Vec<_> = s
        .machine_sets
        .iter()
        .map(|m| (&m.id, &m.phase, m.ready, m.ready_machines, m.total_machines))
        .collect();
    let checks: Vec<_> = s.health_checks.iter().map(|h| (&h.id, &h.state)).collect();
    hash_of((
        &s.omni_phase,
        sets,
        &s.kubernetes_upgrade_phase,
        &s.talos_upgrade_phase,
        checks,
    ))
}

/// A hash of `cluster`'s condition types and statuses (not their messages or times) and of
/// its readiness.
fn condition_states(cluster: &OmniCluster) -> u64 {
    let states: Vec<_> = cluster
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| (&c.type_, &c.status))
        .collect();
    hash_of((states, readiness(cluster)))
}

/// What dependants wait for of `cluster` (`spec.startWhen`) and say in their message: its
/// `Ready` status and reason, and whether Omni reports its Kubernetes API ready.
fn readiness(cluster: &OmniCluster) -> (Option<(&ConditionStatus, &str)>, Option<bool>) {
    let status = cluster.status.as_ref();
    let ready = status
        .and_then(|s| find_condition(&s.conditions, ct::READY))
        .map(|c| (&c.status, c.reason.as_str()));
    (ready, status.and_then(|s| s.kubernetes_api_ready))
}
