//! What of a watched object wakes a controller: each subscriber of a kind's shared watch
//! filters its events by a hash of what it reads of the object, so a change of anything else
//! (a status write above all) wakes nobody.

use std::collections::{HashMap, HashSet};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::{Api, ObjectMeta};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use super::decoded::Cached;
use super::watches::{OwnKind, SharedWatch, WatchEvent, Watches};
use crate::api::keys;

/// A watched stream as kube-runtime's controller takes it.
pub(crate) type Triggers<K> = Result<Cached<K>, watcher::Error>;

/// The objects of a watch that are applied or deleted, unfiltered: for mapped watches whose
/// mapper decides alone what matters.
pub(crate) fn touched<K: OwnKind>(
    events: impl Stream<Item = WatchEvent<K>> + Send + 'static,
) -> impl Stream<Item = Triggers<K>> + Send + 'static {
    events.filter_map(|event| {
        std::future::ready(match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                Some(Ok(o))
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        })
    })
}

/// The objects of a watch whose own change (see [`own_change`]) can matter to another kind's
/// objects: first sightings, deletions, and a change of spec, labels, annotations, finalizers
/// or the deletion mark. A status write alone wakes nobody: the cluster reads its children's
/// specs, and each child's controller writes the child's status after every spec edit, which
/// re-rendered the cluster a second time.
pub(crate) fn own_changes<K: OwnKind>(
    events: impl Stream<Item = WatchEvent<K>> + Send + 'static,
) -> impl Stream<Item = Triggers<K>> + Send + 'static {
    changes_from(events, own_change, Deletions::Pass).map(Ok)
}

/// A hash of `value`: what a trigger reads of an object, to tell whether it changed.
pub(crate) fn hash_of(value: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// When the object was marked for deletion, if it was.
pub(crate) fn deletion_mark(meta: &ObjectMeta) -> Option<jiff::Timestamp> {
    meta.deletion_timestamp.as_ref().map(|t| t.0)
}

/// A Secret as the operator watches it: its metadata only. Its data is read when a pass needs
/// it, as whoever the pass acts for; the watch neither holds every Secret's content in memory
/// nor sees it.
pub(crate) type SecretMeta = PartialObjectMeta<Secret>;

/// The Secrets whose content can matter to the objects that read them, from the shared
/// metadata watch: a first sighting, a change of labels or annotations (the Secret policy reads
/// both), of a finalizer not the operator's, of the deletion mark, the deletion, and any other
/// write ([`SecretSeen`]). The operator's own holds added or lifted (the exports' and
/// connections' finalizers) wake nobody: each such write of an export's kubeconfig Secret
/// re-ran every secret sync using it.
pub(crate) fn secret_changes_of(
    watches: &mut Watches,
) -> impl Stream<Item = Triggers<SecretMeta>> + Send + use<> {
    secret_changes_from(watches.of::<SecretMeta>().subscribe()).map(Ok)
}

/// The Secrets of `namespace` whose change wakes a reader, on a watch of their own (the
/// controllers filter the shared watch the same way): for a test to see what wakes a reader.
pub fn secret_changes(
    client: kube::Client,
    namespace: &str,
) -> impl Stream<Item = PartialObjectMeta<Secret>> + Send + use<> {
    let mut watch = SharedWatch::new(Api::namespaced(client, namespace));
    let changes = secret_changes_from(watch.subscribe());
    decoded(alongside(watch, changes))
}

/// What [`secret_changes_from`] remembers of a Secret. Its data is not watched, so a write
/// that leaves the metadata as it was (a new value, a new type) shows only as a new
/// `resourceVersion`; `epoch` counts those writes. A write whose only visible change is the
/// operator's own hold is taken for a write of the hold alone, which is what the operator
/// writes (the finalizers, nothing else): a single write that changed the data and added or
/// lifted one of those holds together is noticed at the reader's next periodic pass.
#[derive(Debug)]
pub(crate) struct SecretSeen {
    /// Labels, annotations, finalizers other than the operator's holds, deletion mark, epoch.
    state: u64,
    epoch: u64,
    holds: u64,
    version: Option<String>,
}

impl PartialEq for SecretSeen {
    fn eq(&self, other: &Self) -> bool {
        self.state == other.state
    }
}

impl SecretSeen {
    fn of(before: Option<&SecretSeen>, meta: &ObjectMeta) -> Self {
        let is_hold = |f: &&String| {
            *f == keys::KEY_IN_USE_FINALIZER || *f == keys::KUBECONFIG_IN_USE_FINALIZER
        };
        let finalizers = meta.finalizers.iter().flatten();
        let holds = hash_of(finalizers.clone().filter(is_hold).collect::<Vec<_>>());
        let others: Vec<&String> = finalizers.filter(|f| !is_hold(f)).collect();
        let epoch = match before {
            None => 0,
            Some(b) if b.version == meta.resource_version || b.holds != holds => b.epoch,
            Some(b) => b.epoch + 1,
        };
        Self {
            state: hash_of((
                &meta.labels,
                &meta.annotations,
                others,
                deletion_mark(meta),
                epoch,
            )),
            epoch,
            holds,
            version: meta.resource_version.clone(),
        }
    }
}

fn secret_changes_from(
    events: impl Stream<Item = WatchEvent<SecretMeta>> + Send + 'static,
) -> impl Stream<Item = Cached<SecretMeta>> + Send + 'static {
    changes_since(
        events,
        |before: Option<&SecretSeen>, cached: &Cached<SecretMeta>| {
            SecretSeen::of(before, cached.meta())
        },
        Deletions::Pass,
    )
}

/// `stream`, with `watch` running for as long as it is polled.
pub(crate) fn alongside<K: OwnKind, T: Send + 'static>(
    watch: SharedWatch<K>,
    stream: impl Stream<Item = T> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static {
    let watching = futures::stream::once(watch.run()).filter_map(|()| std::future::ready(None));
    futures::stream::select(stream, watching)
}

/// The decoded objects of `stream`.
pub(crate) fn decoded<K: OwnKind>(
    stream: impl Stream<Item = Cached<K>> + Send + 'static,
) -> impl Stream<Item = K> + Send + 'static {
    stream.filter_map(|c| std::future::ready(c.decoded().cloned()))
}

/// Whether [`changes_from`] passes on deletions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletions {
    /// For readers of another kind, which a deletion may concern.
    Pass,
    /// For the kind's own controller: a deleted object has nothing left to reconcile (its
    /// finalizer let it go).
    Skip,
}

/// The objects of a watch whose `state` changed since they were last passed on, plus first
/// sightings and (unless skipped) deletions. Objects gone while the watch was down are
/// forgotten at the re-list, so the memory holds one entry per live object.
pub(crate) fn changes_from<K>(
    events: impl Stream<Item = watcher::Event<K>> + Send + 'static,
    mut state: impl FnMut(&K) -> u64 + Send + 'static,
    deletions: Deletions,
) -> impl Stream<Item = K> + Send + 'static
where
    K: Resource + Send + 'static,
{
    changes_since(events, move |_: Option<&u64>, o: &K| state(o), deletions)
}

/// [`changes_from`] for a state that depends on the one seen before (`state(previous, obj)`):
/// an object is passed on when its new state differs from the previous one (`PartialEq`, which
/// may compare only part of it).
pub(crate) fn changes_since<K, S>(
    events: impl Stream<Item = watcher::Event<K>> + Send + 'static,
    mut state: impl FnMut(Option<&S>, &K) -> S + Send + 'static,
    deletions: Deletions,
) -> impl Stream<Item = K> + Send + 'static
where
    K: Resource + Send + 'static,
    S: PartialEq + Send + 'static,
{
    let mut seen: HashMap<String, S> = HashMap::new();
    let mut relisted: Option<HashSet<String>> = None;
    events.filter_map(move |event| {
        let uid = |o: &K| o.meta().uid.clone().unwrap_or_default();
        let out = match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let id = uid(&o);
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(id.clone());
                }
                let before = seen.get(&id);
                let now = state(before, &o);
                let changed = before != Some(&now);
                seen.insert(id, now);
                changed.then_some(o)
            }
            watcher::Event::Delete(o) => {
                seen.remove(&uid(&o));
                (deletions == Deletions::Pass).then_some(o)
            }
            watcher::Event::Init => {
                relisted = Some(HashSet::new());
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
