//! One watch per kind for the whole operator, shared by every controller that reads the kind.
//!
//! Each kind's objects are listed, watched, decoded ([`Cached`]) and cached once. The watch
//! fills the kind's one cache (when a controller reads it) and then hands every event to each
//! subscriber; each subscriber decides for itself what of the event wakes it (`triggers.rs`).
//! Every controller used to open its own watch of each kind it read: eight of OmniClusters and
//! four of Secrets, each with its own copy of the objects where it cached them.
//!
//! Subscribing happens while the controllers are built, before [`Watches::run`] takes the
//! watches: a subscriber sees every event from the first list on, and the type system rules out
//! a subscriber arriving after the first events went by. A kind is watched once some controller
//! asks for it ([`Watches::of`]), so a new kind needs no entry here.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;

use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::{FutureExt as _, SinkExt as _, Stream, StreamExt as _};
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;

use super::context::{Context, Scope};
use super::decoded::Cached;

/// How many events a subscriber may lag behind its watch before the watch waits for it. The
/// controllers take their events into their schedulers as they come, even with every reconcile
/// slot taken, so the wait is short; the bound keeps a stalled subscriber from growing a queue
/// without end.
const SUBSCRIBER_BUFFER: usize = 1024;

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

/// What no reconcile reads, dropped before an object enters the watch cache: the field
/// managers' records and the copy of the whole object `kubectl apply` keeps in an annotation
/// together often outweigh the rest of the object, and the cache holds every object.
pub(crate) fn strip_for_cache(obj: &mut impl Resource) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
}

/// The events of one kind's watch, as a subscriber receives them.
pub(crate) type WatchEvent<K> = watcher::Event<Cached<K>>;

/// The watch of kind `K`: its one cache and its subscribers.
pub(crate) struct SharedWatch<K: OwnKind> {
    api: Api<Cached<K>>,
    /// The shard's label selector, for a kind of ours (`--watch-label-selector`); `None`
    /// watches every object.
    selector: Option<String>,
    /// Set once some controller reads the kind's cache.
    writer: Option<Writer<Cached<K>>>,
    subscribers: Vec<mpsc::Sender<WatchEvent<K>>>,
}

impl<K: OwnKind> SharedWatch<K> {
    pub(crate) fn new(api: Api<Cached<K>>) -> Self {
        Self {
            api,
            selector: None,
            writer: None,
            subscribers: Vec::new(),
        }
    }

    /// The kind's cache, filled by this watch before any subscriber hears of a change.
    pub(crate) fn store(&mut self) -> Store<Cached<K>> {
        self.writer
            .get_or_insert_with(|| reflector::store::Writer::new(()))
            .as_reader()
    }

    /// Watches every object of the kind whatever the shard's selector: for a kind other
    /// objects refer to by name, which a shard reads across shards (its reconciles stay
    /// gated by the selector, in `runner::drive`).
    pub(crate) fn whole(&mut self) -> &mut Self {
        self.selector = None;
        self
    }

    /// Every event of the watch, from its first list on.
    pub(crate) fn subscribe(&mut self) -> impl Stream<Item = WatchEvent<K>> + Send + use<K> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        self.subscribers.push(tx);
        rx
    }

    /// Watches the kind until dropped: each event fills the cache, then goes to every
    /// subscriber still listening. A failed watch request is retried with a backoff.
    pub(crate) async fn run(self) {
        let Self {
            api,
            selector,
            mut writer,
            mut subscribers,
        } = self;
        let kind = K::kind(&());
        let mut config = watcher::Config::default();
        if let Some(selector) = &selector {
            config = config.labels(selector);
        }
        let mut events = watcher(api, config)
            .default_backoff()
            .modify(strip_for_cache)
            .boxed();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(%kind, %error, "watch failed; retrying after a backoff");
                    continue;
                }
            };
            if let Some(writer) = writer.as_mut() {
                writer.apply_watcher_event(&event);
            }
            let mut any_gone = false;
            for subscriber in &mut subscribers {
                // A subscriber is gone once its controller stopped.
                any_gone |= subscriber.send(event.clone()).await.is_err();
            }
            if any_gone {
                subscribers.retain(|s| !s.is_closed());
            }
        }
    }
}

/// A [`SharedWatch`] of some kind, as [`Watches`] holds it.
trait AnyWatch: Send {
    /// Whether some controller reads the kind.
    fn is_used(&self) -> bool;
    /// The watch, to be downcast to its kind.
    fn as_any(&mut self) -> &mut dyn Any;
    /// Watches the kind until dropped.
    fn run(self: Box<Self>) -> BoxFuture<'static, ()>;
}

impl<K: OwnKind> AnyWatch for SharedWatch<K> {
    fn is_used(&self) -> bool {
        self.writer.is_some() || !self.subscribers.is_empty()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }

    fn run(self: Box<Self>) -> BoxFuture<'static, ()> {
        SharedWatch::run(*self).boxed()
    }
}

/// The operator's watches, one per kind some controller reads. Controllers subscribe while
/// they are built; [`Watches::run`] then watches every kind some controller reads.
pub(crate) struct Watches {
    client: Client,
    scope: Scope,
    /// The shard's label selector, applied to the watches of our own kinds.
    selector: Option<String>,
    kinds: HashMap<TypeId, Box<dyn AnyWatch>>,
}

impl Watches {
    /// The watches of the operator's scope (`ctx.scope`), none started yet.
    pub(crate) fn new(ctx: &Context) -> Self {
        Self {
            client: ctx.client.clone(),
            scope: ctx.scope.clone(),
            selector: ctx.shard.selector().map(str::to_owned),
            kinds: HashMap::new(),
        }
    }

    /// The watch of kind `K`, made on first ask.
    pub(crate) fn of<K: OwnKind>(&mut self) -> &mut SharedWatch<K> {
        let (client, scope) = (&self.client, &self.scope);
        // Shards split only our own kinds: the Secrets (and other data) their objects refer
        // to carry no shard label, and each shard reads those it needs.
        let selector = (K::group(&()) == crate::api::GROUP)
            .then(|| self.selector.clone())
            .flatten();
        let watch = self.kinds.entry(TypeId::of::<K>()).or_insert_with(|| {
            let api = match scope {
                Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
                Scope::All => Api::all(client.clone()),
            };
            let mut watch = SharedWatch::<K>::new(api);
            watch.selector = selector;
            Box::new(watch)
        });
        watch
            .as_any()
            .downcast_mut::<SharedWatch<K>>()
            .expect("the watch kept under a kind's TypeId is that kind's")
    }

    /// How many kinds some controller reads, each one watch.
    pub(crate) fn count(&self) -> usize {
        self.kinds.values().filter(|w| w.is_used()).count()
    }

    /// Runs every watch some controller reads until `shutdown` completes. Dropping the watches
    /// ends their subscribers' streams.
    pub(crate) async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let mut running: futures::stream::FuturesUnordered<_> = self
            .kinds
            .into_values()
            .filter(|w| w.is_used())
            .map(AnyWatch::run)
            .collect();
        // The watches retry forever; should they all end, the controllers still stop only on
        // `shutdown`.
        let all = async {
            while running.next().await.is_some() {}
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = shutdown => {}
            () = all => {}
        }
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
