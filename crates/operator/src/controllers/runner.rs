//! How a controller is built and driven: its watch and cache, its triggers, its error policy
//! and the metrics around each reconcile.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::watches::{SharedKind, SharedWatch, WatchEvent, Watches};
use super::{Cached, Context, Error, error_policy, index, reconcile_decoded};

use crate::api::OmniCluster;

/// The key an object's backoff is tracked under.
pub(crate) fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Runs one reconcile with metrics and backoff bookkeeping.
pub(crate) async fn instrumented<K, F>(obj: &K, ctx: &Context, fut: F) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: Future<Output = Result<Action, Error>>,
{
    let kind = K::kind(&());
    let started = Instant::now();
    let result = fut.await;
    // A stale cache is no failure: the reconcile runs again at once on the stored object.
    let failed = result
        .as_ref()
        .is_err_and(|e| !matches!(e, Error::StaleCache(_)));
    ctx.metrics
        .reconciled(&kind, started.elapsed().as_secs_f64(), failed);
    if result.is_ok() {
        ctx.reset_backoff(&object_key(obj));
    }
    result
}

/// A namespaced kind the operator watches, caches decoded and shares between tasks: each of its
/// own kinds, and Secrets.
pub(crate) trait OwnKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + DeserializeOwned
    + Clone
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> OwnKind for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// What stops a controller: a future that completes when the operator shuts down (or loses its
/// leadership).
pub trait Shutdown: Future<Output = ()> + Send + Sync + 'static {}

impl<S: Future<Output = ()> + Send + Sync + 'static> Shutdown for S {}

/// A controller of kind `K`, reading its objects from the kind's shared watch and cache
/// ([`Watches`]) as [`Cached`] values, so one undecodable object cannot stall the whole watch
/// (see [`reconcile_decoded`]).
///
/// Its own objects trigger a reconcile only when [`own_change`] differs: a status write (ours
/// included) is not a reason to reconcile again. Without this filter every status write of a
/// failing or waiting object re-ran its reconcile at once, bypassing both the backoff and the
/// computed requeue (a hot loop of hundreds of writes per second). Watches of other kinds,
/// whose status a controller may depend on, are unaffected.
///
/// It keeps a [`RefIndex`](index::RefIndex) of its objects by what they refer to (`keys`) from
/// the same watch, for the controller's mapped watches.
pub(crate) fn indexed_controller_for<K>(
    ctx: &Context,
    watches: &mut Watches,
    keys: fn(&K) -> Vec<index::RefKey>,
) -> (
    kube::runtime::Controller<Cached<K>>,
    Arc<index::RefIndex<K>>,
)
where
    K: SharedKind,
{
    use futures::StreamExt as _;
    let index = Arc::new(index::RefIndex::new(keys));
    let kept = index.clone();
    let watch = watches.of::<K>();
    let reader = watch.store();
    let events = watch.subscribe().inspect(move |event| kept.apply(event));
    let triggers = changes_from(events, own_change, Deletions::Skip).map(Ok);
    let controller = kube::runtime::Controller::for_stream(triggers, reader).with_config(
        kube::runtime::controller::Config::default().concurrency(ctx.max_concurrent_reconciles),
    );
    (controller, index)
}

/// The objects of kind `K` the shared watch applies or deletes, unfiltered: for mapped watches
/// whose mapper decides alone what matters.
pub(crate) fn touched<K: SharedKind>(
    watches: &mut Watches,
) -> impl futures::Stream<Item = Result<Cached<K>, kube::runtime::watcher::Error>> + Send + use<K> {
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event;
    watches.of::<K>().subscribe().filter_map(|event| {
        std::future::ready(match event {
            Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => Some(Ok(o)),
            Event::Init | Event::InitDone => None,
        })
    })
}

/// The objects of kind `K` whose own change (see [`own_change`]) can matter to another kind's
/// objects, from the shared watch: first sightings, deletions, and a change of spec, labels,
/// annotations, finalizers or the deletion mark. A status write alone wakes nobody: the
/// cluster reads its children's specs, and each child's controller writes the child's status
/// after every spec edit, which re-rendered the cluster a second time.
pub(crate) fn own_changes_of<K: SharedKind>(
    watches: &mut Watches,
) -> impl futures::Stream<Item = Result<Cached<K>, kube::runtime::watcher::Error>> + Send + use<K> {
    use futures::StreamExt as _;
    changes_from(watches.of::<K>().subscribe(), own_change, Deletions::Pass).map(Ok)
}

/// What no reconcile reads, dropped before an object enters the watch cache: the field
/// managers' records and the copy of the whole object `kubectl apply` keeps in an annotation
/// together often outweigh the rest of the object, and the cache holds every object.
pub(crate) fn strip_for_cache(obj: &mut impl Resource) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
}

/// What of an OmniCluster wakes the objects that refer to it: what they read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterTrigger {
    /// A change of the cluster itself (its spec generation, labels, annotations, finalizers,
    /// the deletion mark) or a condition turning (its type and status, e.g. `Synced` becoming
    /// `True` once Omni holds the cluster): for dependants that read its spec or wait on it
    /// (exports, releases, children).
    ChangesAndConditions,
    /// Only the connection it names and the deletion mark, besides its appearance and deletion:
    /// for the connection (the key's hold and a waiting deletion read nothing else of it).
    Connection,
    /// Only what names it: its name in Omni (`spec.clusterName`, else its own) and the deletion
    /// mark, besides its appearance and deletion: for dependants that read nothing else of it
    /// (secret syncs). A spec edit of a cluster used to re-run every sync of it, a no-op pass
    /// each: 10,000 passes for 100 edits in the benchmark.
    Identity,
}

/// The OmniClusters whose change can matter to the objects referring to one, from the shared
/// watch: its first sighting, its deletion, and what `trigger` says. The rest of its status
/// moving with Omni (phase, machine counts, messages, timestamps) wakes nobody: it would re-run
/// every dependant of the cluster on each write.
pub(crate) fn cluster_changes_of(
    watches: &mut Watches,
    trigger: ClusterTrigger,
) -> impl futures::Stream<Item = Result<Cached<OmniCluster>, kube::runtime::watcher::Error>> + Send + use<>
{
    use futures::StreamExt as _;
    cluster_changes_from(watches.of::<OmniCluster>().subscribe(), trigger).map(Ok)
}

/// The OmniClusters of `namespace` whose change wakes a dependant reading what `trigger` says, on
/// a watch of their own (the controllers filter the shared watch the same way): for a test to
/// see what wakes a dependant.
pub fn cluster_changes(
    client: kube::Client,
    namespace: &str,
    trigger: ClusterTrigger,
) -> impl futures::Stream<Item = OmniCluster> + Send + use<> {
    let mut watch = SharedWatch::new(Api::namespaced(client, namespace));
    let changes = cluster_changes_from(watch.subscribe(), trigger);
    decoded(alongside(watch, changes))
}

fn cluster_changes_from(
    events: impl futures::Stream<Item = WatchEvent<OmniCluster>> + Send + 'static,
    trigger: ClusterTrigger,
) -> impl futures::Stream<Item = Cached<OmniCluster>> + Send + 'static {
    changes_from(
        events,
        move |cached: &Cached<OmniCluster>| {
            // An undecodable cluster is woken for by what its metadata says.
            let Some(o) = cached.decoded() else {
                return own_change(cached);
            };
            match trigger {
                ClusterTrigger::ChangesAndConditions => own_change(o) ^ condition_states(o),
                ClusterTrigger::Identity => identity(o),
                ClusterTrigger::Connection => {
                    hash_of((&o.spec.connection_ref.name, deletion_mark(&o.metadata)))
                }
            }
        },
        Deletions::Pass,
    )
}

/// A hash of what names `cluster`: its name in Omni and its deletion mark.
fn identity(cluster: &OmniCluster) -> u64 {
    hash_of((
        cluster.effective_cluster_name(),
        deletion_mark(&cluster.metadata),
    ))
}

/// A hash of `value`: what a trigger reads of an object, to tell whether it changed (and the
/// fingerprint of an Event's happening).
pub(super) fn hash_of(value: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// When the object was marked for deletion, if it was.
fn deletion_mark(meta: &kube::api::ObjectMeta) -> Option<jiff::Timestamp> {
    meta.deletion_timestamp.as_ref().map(|t| t.0)
}

/// The Secrets whose content can matter to the objects that read them, from the shared watch:
/// a first sighting, a change of type, data, labels or annotations (the Secret policy reads the
/// last two), the deletion mark, and the deletion. A finalizer added or lifted (the holds of
/// exports and connections) or any other metadata moving wakes nobody: each such write of an
/// export's kubeconfig Secret re-ran every secret sync using it.
pub(crate) fn secret_changes_of(
    watches: &mut Watches,
) -> impl futures::Stream<Item = Result<Cached<Secret>, kube::runtime::watcher::Error>> + Send + use<>
{
    use futures::StreamExt as _;
    secret_changes_from(watches.of::<Secret>().subscribe()).map(Ok)
}

/// The Secrets of `namespace` whose change wakes a reader, on a watch of their own (the
/// controllers filter the shared watch the same way): for a test to see what wakes a reader.
pub fn secret_changes(
    client: kube::Client,
    namespace: &str,
) -> impl futures::Stream<Item = Secret> + Send + use<> {
    let mut watch = SharedWatch::new(Api::namespaced(client, namespace));
    let changes = secret_changes_from(watch.subscribe());
    decoded(alongside(watch, changes))
}

fn secret_changes_from(
    events: impl futures::Stream<Item = WatchEvent<Secret>> + Send + 'static,
) -> impl futures::Stream<Item = Cached<Secret>> + Send + 'static {
    changes_from(
        events,
        |cached: &Cached<Secret>| {
            let Some(s) = cached.decoded() else {
                return own_change(cached);
            };
            let data: Vec<(&String, &Vec<u8>)> =
                s.data.iter().flatten().map(|(k, v)| (k, &v.0)).collect();
            hash_of((
                &s.type_,
                data,
                &s.metadata.labels,
                &s.metadata.annotations,
                deletion_mark(&s.metadata),
            ))
        },
        Deletions::Pass,
    )
}

/// `stream`, with `watch` running for as long as it is polled.
fn alongside<K: SharedKind, T: Send + 'static>(
    watch: SharedWatch<K>,
    stream: impl futures::Stream<Item = T> + Send + 'static,
) -> impl futures::Stream<Item = T> + Send + 'static {
    use futures::StreamExt as _;
    let watching = futures::stream::once(watch.run()).filter_map(|()| std::future::ready(None));
    futures::stream::select(stream, watching)
}

/// The decoded objects of `stream`.
fn decoded<K: SharedKind>(
    stream: impl futures::Stream<Item = Cached<K>> + Send + 'static,
) -> impl futures::Stream<Item = K> + Send + 'static {
    use futures::StreamExt as _;
    stream.filter_map(|c| std::future::ready(c.decoded().cloned()))
}

/// Whether [`changes_from`] passes on deletions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deletions {
    /// For readers of another kind, which a deletion may concern.
    Pass,
    /// For the kind's own controller: a deleted object has nothing left to reconcile (its
    /// finalizer let it go).
    Skip,
}

/// The objects of a watch whose `state` changed since they were last passed on, plus first
/// sightings and (unless skipped) deletions. Objects gone while the watch was down are
/// forgotten at the re-list.
fn changes_from<K>(
    events: impl futures::Stream<Item = kube::runtime::watcher::Event<K>> + Send + 'static,
    mut state: impl FnMut(&K) -> u64 + Send + 'static,
    deletions: Deletions,
) -> impl futures::Stream<Item = K> + Send + 'static
where
    K: Resource + Send + 'static,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut relisted: Option<std::collections::HashSet<String>> = None;
    events.filter_map(move |event| {
        let uid = |o: &K| o.meta().uid.clone().unwrap_or_default();
        let out = match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let id = uid(&o);
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(id.clone());
                }
                let now = state(&o);
                (seen.insert(id, now) != Some(now)).then_some(o)
            }
            watcher::Event::Delete(o) => {
                seen.remove(&uid(&o));
                (deletions == Deletions::Pass).then_some(o)
            }
            watcher::Event::Init => {
                relisted = Some(std::collections::HashSet::new());
                None
            }
            watcher::Event::InitDone => {
                if let Some(listed) = relisted.take() {
                    seen.retain(|id, _| listed.contains(id));
                }
                None
            }
        };
        std::future::ready(out)
    })
}

/// A hash of `cluster`'s condition types and statuses (not their messages or times).
fn condition_states(cluster: &OmniCluster) -> u64 {
    let states: Vec<_> = cluster
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| (&c.type_, &c.status))
        .collect();
    hash_of(states)
}

/// The parts of an object of our own kinds whose change calls for a reconcile: `generation`
/// (spec), labels, annotations (e.g. the adopt annotation), finalizers and the deletion mark.
/// `status` and `resourceVersion` are deliberately left out.
pub(crate) fn own_change<K: Resource>(obj: &K) -> u64 {
    let meta = obj.meta();
    hash_of((
        meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.finalizers,
        deletion_mark(meta),
    ))
}

/// Runs `controller` until `shutdown` completes: each decoded object is handed to `reconcile`;
/// failures back off per object (`error_policy`).
pub(crate) async fn drive<K, F, Fut>(
    controller: kube::runtime::Controller<Cached<K>>,
    ctx: Arc<Context>,
    shutdown: impl Shutdown,
    reconcile: F,
) where
    K: OwnKind,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    use futures::StreamExt as _;
    let kind = K::kind(&());
    controller
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx| reconcile_decoded(obj, ctx, reconcile),
            error_policy,
            ctx,
        )
        .for_each(|r| {
            log_outcome(&kind, r);
            std::future::ready(())
        })
        .await;
}

/// Logs each reconcile outcome of a controller stream at debug level (failures are logged
/// with their backoff by the error policy).
pub(crate) fn log_outcome<T: Debug, E: std::fmt::Display>(kind: &str, result: Result<T, E>) {
    match result {
        Ok(obj) => tracing::debug!(kind, object = ?obj, "reconciled"),
        Err(e) => tracing::debug!(kind, error = %e, "reconcile did not complete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_no_field_manager_records_or_applied_copy() {
        let mut obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniSecretSync",
            "metadata": {
                "name": "s", "namespace": "n",
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
                    "omni.texashpc.com/adopt": "true"
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
            },
            "spec": {"a": 1}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        strip_for_cache(&mut obj);
        assert!(
            obj.metadata
                .managed_fields
                .iter()
                .flatten()
                .next()
                .is_none()
        );
        assert_eq!(
            obj.annotations().keys().collect::<Vec<_>>(),
            vec!["omni.texashpc.com/adopt"]
        );
        assert_eq!(obj.data["spec"]["a"], 1);
    }
}
