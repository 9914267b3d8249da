//! The fleet sets: one generic engine, three thin instances (`kinds.rs`). A set generates one
//! ordinary object of its member kind per OmniCluster its selector matches (and, with minted
//! credentials, one OmniKubeconfigExport per cluster beside it); each generated object keeps its
//! own controller, status, metrics and deletion semantics.
//!
//! The engine runs on the shared pipeline like every kind: `plan.rs` decides from the caches
//! what to create, put back, update (in rollout waves), withdraw or leave (pure), `act.rs`
//! carries that out (IO), `outcome.rs` turns the report into the set's status (pure). A set is
//! woken by its OmniClusters (their labels, spec and conditions) and by the objects it
//! generated, never by polling; a pass with nothing to do writes nothing.

mod act;
pub(crate) mod kinds;
mod outcome;
#[cfg(test)]
mod pace_tests;
mod plan;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::{Cached, cached_ref};
use super::shared::index::{RefIndex, RefKey, namespace_of};
use super::shared::pace::StatusPacer;
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::status::{Conditioned, Reported};
use super::shared::triggers::{Deletions, changes_from, deletion_mark, hash_of};
use super::shared::watches::{OwnKind, Watches};
use crate::api::common::{Condition, condition_types, find_condition};
use crate::api::fleet::{
    ClusterSelector, FleetSetStatus, MemberTemplate, Rollout, SetCredentials, StopMatchingBehavior,
    TemplateSpec,
};
use crate::api::validation::Validation;
use crate::api::{OmniCluster, OmniKubeconfigExport, Reason};

/// How long a pass waits for the caches it reads to be filled before it backs off.
const CACHE_WAIT: Duration = Duration::from_secs(5);

/// The least time between two status writes of a set that only move its counts (`ready`,
/// `updated`, `desired`, `matchedClusters`): a rollout over a thousand clusters would
/// otherwise write the set once per object turning Ready.
pub(crate) const STATUS_PACE: Duration = Duration::from_secs(5);

/// A kind a set generates (OmniHelmRelease, OmniSecretSync, OmniKubeconfigExport): what the
/// engine reads and writes of it.
pub(crate) trait Member: OwnKind + Serialize + Reported {
    /// Its spec, which a set's template is.
    type Spec: TemplateSpec + Clone + PartialEq + Send + Sync;
    /// A new object `name` with `spec`.
    fn build(name: &str, spec: Self::Spec) -> Self;
    /// Its spec.
    fn spec(&self) -> &Self::Spec;
    /// `status.observedGeneration`.
    fn observed_generation(&self) -> Option<i64>;
    /// The kubeconfig Secret it uses, if it uses one.
    fn kubeconfig_secret(&self) -> Option<&str>;
    /// Its kind's admission rules, which every generated object passes before it is written.
    fn admission(&self) -> Validation;
}

/// A set kind: what the engine reads of it.
pub(crate) trait SetKind: OwnKind + Serialize + Reported<Status = FleetSetStatus> {
    /// The kind it generates.
    type Member: Member;
    /// Suffix of the names of the exports it mints (kept apart from the other sets' exports).
    const MINT_SUFFIX: &'static str;
    /// `spec.clusterSelector`.
    fn selector(&self) -> &ClusterSelector;
    /// `spec.template`.
    fn template(&self) -> &MemberTemplate<<Self::Member as Member>::Spec>;
    /// `spec.credentials`, for the kinds that take them.
    fn credentials(&self) -> Option<&SetCredentials>;
    /// `spec.stopMatchingBehavior`.
    fn stop_matching(&self) -> StopMatchingBehavior;
    /// `spec.rollout`.
    fn rollout(&self) -> &Rollout;
    /// The kind's admission rules.
    fn admission(&self) -> Validation;
    /// The kind's defaults on a rendered spec, before it is decoded (the Helm set names every
    /// release after itself).
    fn complete(&self, spec: &mut serde_json::Value) {
        let _ = spec;
    }
}

impl Conditioned for FleetSetStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
    fn handled_reconcile_mut(&mut self) -> &mut Option<String> {
        &mut self.last_handled_reconcile_at
    }
}

/// What a set's controller reads: the caches of the clusters, its member kind and the exports.
pub(crate) struct SetState<S: SetKind> {
    clusters: Store<Cached<OmniCluster>>,
    members: Store<Cached<S::Member>>,
    exports: Store<Cached<OmniKubeconfigExport>>,
    /// The pace of the sets' count-only status writes.
    pub(crate) pacer: StatusPacer,
}

/// Whether `member`'s `Ready` is `True` at its current generation.
pub(crate) fn ready_at_generation<M: Member>(member: &M) -> bool {
    member.observed_generation() == member.meta().generation
        && find_condition(member.stored_conditions(), condition_types::READY)
            .is_some_and(|c| c.status == crate::api::common::ConditionStatus::True)
}

/// The decoded objects of `store` in `namespace`.
fn cached_in<K: OwnKind>(store: &Store<Cached<K>>, namespace: &str) -> Vec<Arc<K>> {
    store
        .state()
        .iter()
        .filter_map(|c| match c.as_ref() {
            Cached::Decoded(k) if k.namespace().as_deref() == Some(namespace) => Some(k.clone()),
            _ => None,
        })
        .collect()
}

/// The set that generated `obj`, from its controller owner reference.
fn owning_set<S: SetKind>(obj: &impl Resource) -> Option<ObjectRef<Cached<S>>> {
    let kind = S::kind(&());
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| cached_ref(&o.name, obj.meta().namespace.as_deref()))
}

/// A hash of what of a generated object a set reads: its spec generation, metadata it sets,
/// the deletion mark and its readiness (reason and message, which the set's status quotes).
fn member_state<M: Member>(cached: &Cached<M>) -> u64 {
    let Some(m) = cached.decoded() else {
        return hash_of(cached.meta().resource_version.as_deref());
    };
    let meta = m.meta();
    let ready = find_condition(m.stored_conditions(), condition_types::READY)
        .map(|c| (c.status, c.reason.clone(), c.message.clone()));
    let owners: Vec<_> = meta
        .owner_references
        .iter()
        .flatten()
        .map(|o| &o.uid)
        .collect();
    hash_of((
        meta.generation,
        &meta.labels,
        &meta.annotations,
        owners,
        deletion_mark(meta),
        m.observed_generation(),
        format!("{ready:?}"),
    ))
}

/// The index keys of a set: its namespace (every cluster of it may match) and the objects in
/// the way of its names (so their deletion wakes it).
fn set_keys<S: SetKind>(set: &S) -> Vec<RefKey> {
    let ns = namespace_of(set);
    let mut keys = vec![RefKey::new("namespace", &ns, "")];
    for failing in set
        .stored_status()
        .map(|s| s.failing.as_slice())
        .unwrap_or_default()
    {
        if failing.reason == Reason::NameCollision.as_str() {
            keys.push(RefKey::new("collision", &ns, &failing.name));
        }
    }
    keys
}

/// The controller of set kind `S`, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<S, Sh>(
    ctx: &Arc<Context>,
    watches: &mut Watches,
    shutdown: Sh,
) -> impl Future<Output = ()> + Send + use<S, Sh>
where
    S: SetKind + super::shared::pipeline::Pipeline<State = SetState<S>>,
    Sh: Shutdown,
{
    let (controller, index) = indexed_controller_for::<S>(ctx, watches, set_keys::<S>);
    let (by_cluster, by_member, by_export) = (index.clone(), index.clone(), index);
    let member_events = changes_from(
        watches.of::<S::Member>().subscribe(),
        member_state::<S::Member>,
        Deletions::Pass,
    )
    .map(Ok);
    let export_events = changes_from(
        watches.of::<OmniKubeconfigExport>().subscribe(),
        member_state::<OmniKubeconfigExport>,
        Deletions::Pass,
    )
    .map(Ok);
    let controller = controller
        .watches_stream(
            cluster_triggers(
                watches.of::<OmniCluster>().subscribe(),
                ClusterTrigger::ChangesAndConditions,
            ),
            move |c: Cached<OmniCluster>| {
                by_cluster.get(&RefKey::new("namespace", &namespace_of(&c), ""))
            },
        )
        .watches_stream(member_events, move |m: Cached<S::Member>| {
            woken_by::<S, _>(&by_member, &m)
        })
        .watches_stream(export_events, move |e: Cached<OmniKubeconfigExport>| {
            woken_by::<S, _>(&by_export, &e)
        });
    let state = SetState::<S> {
        clusters: watches.of::<OmniCluster>().store(),
        members: watches.of::<S::Member>().store(),
        exports: watches.of::<OmniKubeconfigExport>().store(),
        pacer: StatusPacer::new(STATUS_PACE),
    };
    drive::<S>(controller, ctx.clone(), state, shutdown)
}

/// The sets a change of `obj` (a generated object, or one in the way of a set's name) wakes.
fn woken_by<S: SetKind, K: OwnKind>(
    index: &RefIndex<S>,
    obj: &Cached<K>,
) -> Vec<ObjectRef<Cached<S>>> {
    let mut sets = index.referring_to("collision", obj);
    sets.extend(owning_set::<S>(obj));
    sets
}
