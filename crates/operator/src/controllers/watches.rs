//! One watch per kind for the whole operator, shared by every controller that reads the kind.
//!
//! Each kind's objects are listed, watched, decoded ([`Cached`]) and cached once. The watch
//! fills the kind's one cache (when a controller reads it) and then hands every event to each
//! subscriber; each subscriber decides for itself what of the event wakes it (`runner.rs`). Every
//! controller used to open its own watch of each kind it read: eight of OmniClusters and four of
//! Secrets, each with its own copy of the objects where it cached them.
//!
//! Subscribing happens while the controllers are built, before [`Watches::run`] takes the
//! watches: a subscriber sees every event from the first list on, and the type system rules out
//! a subscriber arriving after the first events went by.

use std::future::Future;

use futures::channel::mpsc;
use futures::{FutureExt as _, SinkExt as _, Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};

use super::{Cached, Context, OwnKind, strip_for_cache};
use crate::api::{
    OmniCluster, OmniConnection, OmniControlPlane, OmniHelmRelease, OmniKubeconfigExport,
    OmniMachine, OmniSecretSync, OmniWorkers,
};

/// How many events a subscriber may lag behind its watch before the watch waits for it. The
/// controllers take their events into their schedulers as they come, even with every reconcile
/// slot taken, so the wait is short; the bound keeps a stalled subscriber from growing a queue
/// without end.
const SUBSCRIBER_BUFFER: usize = 1024;

/// The events of one kind's watch, as a subscriber receives them.
pub(crate) type WatchEvent<K> = watcher::Event<Cached<K>>;

/// The watch of kind `K`: its one cache and its subscribers.
pub(crate) struct SharedWatch<K: OwnKind> {
    api: Api<Cached<K>>,
    /// Set once some controller reads the kind's cache.
    writer: Option<Writer<Cached<K>>>,
    subscribers: Vec<mpsc::Sender<WatchEvent<K>>>,
}

impl<K: OwnKind> SharedWatch<K> {
    pub(crate) fn new(api: Api<Cached<K>>) -> Self {
        Self {
            api,
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

    /// Every event of the watch, from its first list on.
    pub(crate) fn subscribe(&mut self) -> impl Stream<Item = WatchEvent<K>> + Send + use<K> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        self.subscribers.push(tx);
        rx
    }

    fn is_used(&self) -> bool {
        self.writer.is_some() || !self.subscribers.is_empty()
    }

    /// Watches the kind until dropped: each event fills the cache, then goes to every
    /// subscriber still listening. A failed watch request is retried with a backoff.
    pub(crate) async fn run(self) {
        let Self {
            api,
            mut writer,
            mut subscribers,
        } = self;
        let kind = K::kind(&());
        let mut events = watcher(api, watcher::Config::default())
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

/// A kind with one shared watch in [`Watches`].
pub(crate) trait SharedKind: OwnKind {
    /// This kind's watch among `watches`.
    fn watch(watches: &mut Watches) -> &mut SharedWatch<Self>;
}

/// The operator's watches, one per kind it reads. Controllers subscribe while they are built;
/// [`Watches::run`] then watches every kind some controller reads.
pub struct Watches {
    connections: SharedWatch<OmniConnection>,
    clusters: SharedWatch<OmniCluster>,
    control_planes: SharedWatch<OmniControlPlane>,
    workers: SharedWatch<OmniWorkers>,
    machines: SharedWatch<OmniMachine>,
    secret_syncs: SharedWatch<OmniSecretSync>,
    helm_releases: SharedWatch<OmniHelmRelease>,
    kubeconfig_exports: SharedWatch<OmniKubeconfigExport>,
    secrets: SharedWatch<Secret>,
}

impl Watches {
    /// The watches of the operator's scope (`ctx.scope`), none started yet.
    pub fn new(ctx: &Context) -> Self {
        Self {
            connections: SharedWatch::new(ctx.watch_api()),
            clusters: SharedWatch::new(ctx.watch_api()),
            control_planes: SharedWatch::new(ctx.watch_api()),
            workers: SharedWatch::new(ctx.watch_api()),
            machines: SharedWatch::new(ctx.watch_api()),
            secret_syncs: SharedWatch::new(ctx.watch_api()),
            helm_releases: SharedWatch::new(ctx.watch_api()),
            kubeconfig_exports: SharedWatch::new(ctx.watch_api()),
            secrets: SharedWatch::new(ctx.watch_api()),
        }
    }

    /// The watch of kind `K`.
    pub(crate) fn of<K: SharedKind>(&mut self) -> &mut SharedWatch<K> {
        K::watch(self)
    }

    /// How many kinds some controller reads, each one watch.
    pub fn count(&self) -> usize {
        [
            self.connections.is_used(),
            self.clusters.is_used(),
            self.control_planes.is_used(),
            self.workers.is_used(),
            self.machines.is_used(),
            self.secret_syncs.is_used(),
            self.helm_releases.is_used(),
            self.kubeconfig_exports.is_used(),
            self.secrets.is_used(),
        ]
        .into_iter()
        .filter(|used| *used)
        .count()
    }

    /// Runs every watch some controller reads until `shutdown` completes. Dropping the watches
    /// ends their subscribers' streams.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let mut running = futures::stream::FuturesUnordered::new();
        macro_rules! start {
            ($($watch:ident),*) => {$(
                if self.$watch.is_used() {
                    running.push(self.$watch.run().boxed());
                }
            )*};
        }
        start!(
            connections,
            clusters,
            control_planes,
            workers,
            machines,
            secret_syncs,
            helm_releases,
            kubeconfig_exports,
            secrets
        );
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

macro_rules! shared_kinds {
    ($($kind:ty => $field:ident),* $(,)?) => {$(
        impl SharedKind for $kind {
            fn watch(watches: &mut Watches) -> &mut SharedWatch<Self> {
                &mut watches.$field
            }
        }
    )*};
}

shared_kinds!(
    OmniConnection => connections,
    OmniCluster => clusters,
    OmniControlPlane => control_planes,
    OmniWorkers => workers,
    OmniMachine => machines,
    OmniSecretSync => secret_syncs,
    OmniHelmRelease => helm_releases,
    OmniKubeconfigExport => kubeconfig_exports,
    Secret => secrets,
);
