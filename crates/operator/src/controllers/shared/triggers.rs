//! What of a watched object wakes a controller: each subscriber of a kind's shared watch
//! filters its events by a hash of what it reads of the object, so a change of anything else
//! (a status write above all) wakes nobody.

use std::collections::{HashMap, HashSet};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher;

use super::decoded::Cached;
use super::watches::{OwnKind, SharedWatch, WatchEvent, Watches};

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

/// The Secrets whose content can matter to the objects that read them, from the shared watch:
/// a first sighting, a change of type, data, labels or annotations (the Secret policy reads the
/// last two), the deletion mark, and the deletion. A finalizer added or lifted (the holds of
/// exports and connections) or any other metadata moving wakes nobody: each such write of an
/// export's kubeconfig Secret re-ran every secret sync using it.
pub(crate) fn secret_changes_of(
    watches: &mut Watches,
) -> impl Stream<Item = Triggers<Secret>> + Send + use<> {
    secret_changes_from(watches.of::<Secret>().subscribe()).map(Ok)
}

/// The Secrets of `namespace` whose change wakes a reader, on a watch of their own (the
/// controllers filter the shared watch the same way): for a test to see what wakes a reader.
pub fn secret_changes(
    client: kube::Client,
    namespace: &str,
) -> impl Stream<Item = Secret> + Send + use<> {
    let mut watch = SharedWatch::new(Api::namespaced(client, namespace));
    let changes = secret_changes_from(watch.subscribe());
    decoded(alongside(watch, changes))
}

fn secret_changes_from(
    events: impl Stream<Item = WatchEvent<Secret>> + Send + 'static,
) -> impl Stream<Item = Cached<Secret>> + Send + 'static {
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
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut relisted: Option<HashSet<String>> = None;
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
