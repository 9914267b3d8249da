//! The controllers and the machinery they share.
//!
//! Every kind's reconcile is the same pipeline (see `docs/operations.md`): dereference →
//! validate → build (pure) → apply (write only differences) → status (write only when changed,
//! Events on condition transitions). This module holds what all kinds need: the [`Context`],
//! the error type and its backoff policy, the status writer and the Event publisher. A new kind
//! plugs in as one submodule exposing `async fn run(ctx, shutdown)`.
//!
//! Each kind's own objects are watched as `DynamicObject`s and decoded per reconcile
//! ([`reconcile_decoded`]): one object with bad stored data (it bypassed the CRD schema) then gets
//! a `Ready=False` reason `InvalidObject` condition and an Event, is not retried until it changes,
//! and cannot stall the watch of every other object of its kind. See `docs/decisions.md`.

pub mod children;
pub mod cluster;
pub mod connection;
pub mod finalizer;
pub mod helm_release;
pub mod index;
pub mod kubeconfig_export;
pub mod omni;
pub(crate) mod pipeline;
pub mod secret_sync;
pub mod status;

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use rand::Rng;
use serde::de::DeserializeOwned;

use crate::api::OmniCluster;
use crate::api::common::{Condition, ConditionStatus};
use crate::metrics::Metrics;

/// Where the operator looks for objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only this namespace (the default deployment; a namespaced Role suffices).
    Namespace(String),
    /// Every namespace (needs a ClusterRole).
    All,
}

/// Source of the current time, injectable so tests can move time (rotation deadlines).
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> jiff::Timestamp;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// Name under which the operator reports Events.
pub const REPORTER: &str = "omni-operator";

/// Shared state handed to every reconcile.
pub struct Context {
    /// Client of the management cluster.
    pub client: Client,
    /// Namespace scope.
    pub scope: Scope,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// Omni clients per OmniConnection.
    pub omni: omni::OmniClients,
    /// Kubernetes clients of workload clusters per kubeconfig Secret.
    pub workload: crate::workload::WorkloadClients,
    /// The helm driver; `None` when no usable helm binary was found (OmniHelmRelease then
    /// reports that on each object instead of failing the whole operator).
    pub helm: Option<crate::helm::Helm>,
    /// How often a synced OmniSecretSync re-checks its copy for drift in the workload cluster,
    /// which the operator does not watch.
    pub secret_sync_resync: Duration,
    /// Directory `file:` patches and manifests of OmniClusters are confined to
    /// (`--template-root`); `None` refuses every `file:` entry.
    pub template_root: Option<std::path::PathBuf>,
    /// Floor for periodic intervals read from stored objects (`syncInterval`,
    /// `driftCheckInterval`, time between kubeconfig rotations) that bypassed admission.
    pub min_interval: Duration,
    /// Which Secrets objects may use, and where exports may write.
    pub secret_policy: crate::secret_policy::SecretPolicy,
    /// The OmniCluster controller's caches of its children, while it runs.
    pub(crate) cluster_children: std::sync::RwLock<Option<cluster::ChildCaches>>,
    recorder: Recorder,
    failures: Mutex<HashMap<String, u32>>,
}

impl Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Builds a context; `instance` identifies this replica in Events (usually the pod name).
    pub fn new(
        client: Client,
        scope: Scope,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        instance: Option<String>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_string(),
                instance,
            },
        );
        Self {
            omni: omni::OmniClients::new(client.clone()),
            workload: crate::workload::WorkloadClients::new(client.clone()),
            client,
            scope,
            clock,
            metrics,
            helm: None,
            secret_sync_resync: secret_sync::RESYNC,
            template_root: None,
            min_interval: crate::api::duration::MIN_INTERVAL
                .to_std()
                .unwrap_or(Duration::from_secs(10)),
            secret_policy: crate::secret_policy::SecretPolicy::default(),
            cluster_children: std::sync::RwLock::new(None),
            recorder,
            failures: Mutex::default(),
        }
    }

    /// Sets the helm driver (builder style, so `new` stays stable for embedders).
    pub fn with_helm(mut self, helm: Option<crate::helm::Helm>) -> Self {
        self.helm = helm;
        self
    }

    /// Replaces the OmniSecretSync drift re-check interval (tests use a short one); zero turns
    /// the periodic re-check off.
    pub fn with_secret_sync_resync(mut self, every: Duration) -> Self {
        self.secret_sync_resync = every;
        self
    }

    /// Sets the directory `file:` entries are confined to (builder style).
    pub fn with_template_root(mut self, root: Option<std::path::PathBuf>) -> Self {
        self.template_root = root;
        self
    }

    /// Replaces the floor for periodic intervals of stored objects (tests use a short one).
    pub fn with_min_interval(mut self, floor: Duration) -> Self {
        self.min_interval = floor;
        self
    }

    /// Sets the Secret policy (`--require-secret-opt-in`, `--allow-cross-namespace-export`).
    pub fn with_secret_policy(mut self, policy: crate::secret_policy::SecretPolicy) -> Self {
        self.secret_policy = policy;
        self
    }

    /// An API handle for `K` in `namespace`.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// An API handle covering the operator's scope, for watches.
    pub fn watch_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.scope {
            Scope::Namespace(ns) => Api::namespaced(self.client.clone(), ns),
            Scope::All => Api::all(self.client.clone()),
        }
    }

    /// A `DynamicObject` API handle for kind `K` covering the operator's scope, for the
    /// decode-tolerant watch of each controller's own kind.
    pub fn dynamic_watch_api<K: Resource<DynamicType = ()>>(&self) -> Api<DynamicObject> {
        let ar = ApiResource::erase::<K>(&());
        match &self.scope {
            Scope::Namespace(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            Scope::All => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Publishes an Event about `obj`. Failures are logged, never fatal: Events are advisory.
    pub async fn event<K>(&self, obj: &K, type_: EventType, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.event_for(obj.object_ref(&()), type_, reason, note)
            .await;
    }

    /// Publishes an Event about the object `reference`.
    pub async fn event_for(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let mut note = note;
        // The Events API caps notes at 1 KiB; cut on a character boundary.
        if note.len() > 1000 {
            let mut end = 1000;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "could not publish Event");
        }
    }

    /// Publishes at most one Event for a status write, for the condition transition that says
    /// the most (see [`status::event_worthy`]).
    pub async fn condition_events<K>(&self, obj: &K, old: &[Condition], new: &[Condition])
    where
        K: Resource<DynamicType = ()>,
    {
        if let Some(c) = status::event_worthy(old, new) {
            let type_ = if status::condition_healthy(c) {
                EventType::Normal
            } else {
                EventType::Warning
            };
            let note = format!("{}={:?}: {}", c.type_, c.status, c.message);
            self.event(obj, type_, &c.reason, note).await;
        }
    }

    /// Next retry delay after one more failure of the object `key`: exponential from 5s,
    /// capped at 5m, with ±20% jitter so many failing objects do not retry in lockstep.
    pub fn backoff(&self, key: &str) -> Duration {
        let failures = {
            let mut map = match self.failures.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            let n = map.entry(key.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        backoff_delay(failures, rand::thread_rng().gen_range(0.8..1.2))
    }

    /// Forgets the failure count of `key` after a successful reconcile.
    pub fn reset_backoff(&self, key: &str) {
        let mut map = match self.failures.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.remove(key);
    }
}

/// A periodic re-check's delay spread by ±10 %, so objects created together (a cold start, a
/// GitOps apply of a fleet) do not come due together for ever after, in waves that hit Omni,
/// helm and the workload clusters at once.
pub(crate) fn periodic(period: Duration) -> Duration {
    period.mul_f64(periodic_spread())
}

/// The factor [`periodic`] scales a period by: uniform in [0.9, 1.1).
pub(crate) fn periodic_spread() -> f64 {
    rand::thread_rng().gen_range(0.9..1.1)
}

/// The un-jittered delay is 5s·2^(failures-1), capped at 300s; `jitter` scales it.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(10);
    let base = (5u64 << exp).min(300) as f64;
    Duration::from_secs_f64(base * jitter)
}

/// Why a reconcile failed. The object's status already explains user-facing failures; this
/// error drives logging and backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the management cluster failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A status could not be serialised.
    #[error("could not serialise status: {0}")]
    Serialize(#[from] serde_json::Error),
    /// An OmniConnection failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    Connection(#[from] connection::ConnectionFailure),
    /// An OmniSecretSync failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    SecretSync(#[from] secret_sync::SecretSyncFailure),
    /// An OmniHelmRelease failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    HelmRelease(#[from] helm_release::HelmFailure),
    /// An OmniKubeconfigExport failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    Export(#[from] kubeconfig_export::ExportFailure),
    /// An OmniCluster failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterFailure),
    /// The cached copy a status was computed from is older than the stored object, which it
    /// carries; nothing was written (see [`status::write`]).
    #[error("the cached copy of the object is older than the stored one")]
    StaleCache(Box<serde_json::Value>),
}

impl Error {
    /// [`Error::StaleCache`] carrying `stored`, the object as the server holds it now.
    pub fn stale_cache<K: serde::Serialize>(stored: &K) -> Result<Self, Error> {
        Ok(Self::StaleCache(Box::new(serde_json::to_value(stored)?)))
    }
}

/// What a reconcile that ended in a failure (reported in the object's conditions) does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryPolicy {
    /// Nothing until the object changes: retrying cannot help (a spec or policy problem).
    AwaitChange,
    /// Look again after this delay: what is missing is not watched, or not by this controller.
    Poll(Duration),
    /// Fail the reconcile, so the per-object exponential backoff retries it.
    Backoff,
}

impl RetryPolicy {
    /// The next reconcile, or `None` under [`RetryPolicy::Backoff`] (the reconcile fails).
    pub fn action(self) -> Option<Action> {
        match self {
            Self::AwaitChange => Some(Action::await_change()),
            Self::Poll(after) => Some(Action::requeue(after)),
            Self::Backoff => None,
        }
    }
}

/// How many times in a row one reconcile goes on from a newer stored copy
/// ([`Error::StaleCache`]) before leaving the object to the error backoff: adding the
/// finalizer takes one, a status write racing another writer one more.
const STALE_CACHE_RERUNS: usize = 3;

/// Condition reason for an object whose stored data does not decode as its kind.
pub const REASON_INVALID_OBJECT: &str = "InvalidObject";

/// The API resource of kind `K` (the dynamic type of its `DynamicObject` watch).
pub fn api_resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Decodes a watched `DynamicObject` as kind `K`.
pub fn decode<K: DeserializeOwned>(obj: &DynamicObject) -> Result<K, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(obj)?)
}

/// A reference to the object `name` in `namespace` of kind `K`, for mappers.
pub fn dyn_ref<K: Resource<DynamicType = ()>>(
    name: &str,
    namespace: Option<&str>,
) -> ObjectRef<DynamicObject> {
    let r = ObjectRef::new_with(name, api_resource::<K>());
    match namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

/// Pure: the conditions of an undecodable object (raw `status.conditions` if readable, with
/// `Ready=False` reason `InvalidObject` upserted). `None` when nothing would change.
pub fn invalid_object_conditions(
    raw_status: Option<&serde_json::Value>,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<Vec<Condition>> {
    let mut conditions: Vec<Condition> = raw_status
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let changed = crate::api::common::set_condition(
        &mut conditions,
        Condition::new(
            "Ready",
            ConditionStatus::False,
            REASON_INVALID_OBJECT,
            message,
            generation,
            now,
        ),
    );
    changed.then_some(conditions)
}

/// Decodes `obj` as `K` and runs `inner`; an undecodable object gets a condition and an Event
/// instead and is left alone until it changes.
pub async fn reconcile_decoded<K, F, Fut>(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
    inner: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut + Copy,
    Fut: Future<Output = Result<Action, Error>>,
{
    let mut obj = obj;
    let mut reruns = 0;
    let err = loop {
        let k = match decode::<K>(&obj) {
            Ok(k) => k,
            Err(e) => break e,
        };
        match inner(Arc::new(k), ctx.clone()).await {
            // The watch cache lagged behind the server (or has not seen our own write yet):
            // go on from the server's copy, rather than waiting for the cache (its watcher may
            // be backing off) or a backoff.
            Err(Error::StaleCache(stored)) if reruns < STALE_CACHE_RERUNS => {
                reruns += 1;
                obj = Arc::new(serde_json::from_value(*stored)?);
            }
            other => return other,
        }
    };
    let kind = K::kind(&());
    let name = obj.name_any();
    let namespace = obj.namespace().unwrap_or_default();
    let message = format!("stored {kind} cannot be decoded: {err}; fix or delete the object");
    tracing::warn!(kind = %kind, namespace = %namespace, name = %name, error = %err, "undecodable object");
    let status = obj.data.get("status");
    if let Some(conditions) =
        invalid_object_conditions(status, &message, obj.metadata.generation, ctx.clock.now())
    {
        let ar = api_resource::<K>();
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ar);
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        ctx.event_for(
            obj.object_ref(&ar),
            EventType::Warning,
            REASON_INVALID_OBJECT,
            format!("Ready=False: {message}"),
        )
        .await;
    }
    Ok(Action::await_change())
}

/// [`error_policy`] for the `DynamicObject` watches.
pub fn error_policy_dyn(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = format!(
        "{}/{}/{}",
        obj.types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default(),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    let delay = ctx.backoff(&key);
    tracing::warn!(object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The key an object's backoff is tracked under.
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// The error policy of every controller: retry with per-object exponential backoff.
pub fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    let key = object_key(obj.as_ref());
    let delay = ctx.backoff(&key);
    tracing::warn!(object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs one reconcile with metrics and backoff bookkeeping.
pub async fn instrumented<K, F>(obj: &K, ctx: &Context, fut: F) -> Result<Action, Error>
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

/// A controller of kind `K` watching its objects as `DynamicObject`s, so one undecodable object
/// cannot stall the whole watch (see [`reconcile_decoded`]).
///
/// Its own objects trigger a reconcile only when [`own_change`] differs: a status write (ours
/// included) is not a reason to reconcile again. Without this filter every status write of a
/// failing or waiting object re-ran its reconcile at once, bypassing both the backoff and the
/// computed requeue (a hot loop of hundreds of writes per second). Watches of other kinds,
/// whose status a controller may depend on, are unaffected.
pub fn controller_for<K: Resource<DynamicType = ()>>(
    ctx: &Context,
) -> kube::runtime::Controller<DynamicObject> {
    controller_with::<K>(ctx, |_| {})
}

/// [`controller_for`] with a [`RefIndex`](index::RefIndex) of its objects by what they refer
/// to (`keys`), kept from the same watch, for the controller's mapped watches.
pub fn indexed_controller_for<K>(
    ctx: &Context,
    keys: fn(&K) -> Vec<index::RefKey>,
) -> (
    kube::runtime::Controller<DynamicObject>,
    Arc<index::RefIndex<K>>,
)
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
{
    let index = Arc::new(index::RefIndex::new(keys));
    let kept = index.clone();
    let controller = controller_with::<K>(ctx, move |event| kept.apply(event));
    (controller, index)
}

fn controller_with<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    mut on_event: impl FnMut(&kube::runtime::watcher::Event<DynamicObject>) + Send + 'static,
) -> kube::runtime::Controller<DynamicObject> {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, reflector, watcher};
    let ar = api_resource::<K>();
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let triggers = watcher(ctx.dynamic_watch_api::<K>(), watcher::Config::default())
        .default_backoff()
        .modify(strip_for_cache)
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                on_event(event);
            }
        })
        .applied_objects()
        .predicate_filter(own_change, kube::runtime::PredicateConfig::default());
    kube::runtime::Controller::for_stream_with(triggers, reader, ar)
}

/// What no reconcile reads, dropped before an object enters the watch cache: the field
/// managers' records and the copy of the whole object `kubectl apply` keeps in an annotation
/// together often outweigh the rest of the object, and the cache holds every object.
fn strip_for_cache(obj: &mut DynamicObject) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
}

/// The watch events of OmniClusters that can matter to the objects referring to one (its secret
/// syncs, releases, exports and children): its first sighting, a change of what [`own_change`]
/// covers (spec generation, labels, annotations, finalizers, the deletion mark), a condition
/// turning (its type and status, e.g. `Synced` becoming `True` once Omni holds the cluster) and
/// its deletion. The rest of its status moving with Omni (phase, machine counts, messages,
/// timestamps) wakes nobody: it would re-run every dependant of the cluster on each write.
pub fn cluster_changes(
    api: Api<OmniCluster>,
) -> impl futures::Stream<Item = Result<OmniCluster, kube::runtime::watcher::Error>> + Send + 'static
{
    use kube::runtime::{WatchStreamExt as _, watcher};
    cluster_changes_from(watcher(api, watcher::Config::default()).default_backoff())
}

/// [`cluster_changes`] of a given OmniCluster watch (e.g. one that also fills a cache).
pub fn cluster_changes_from(
    events: impl futures::Stream<
        Item = Result<kube::runtime::watcher::Event<OmniCluster>, kube::runtime::watcher::Error>,
    > + Send
    + 'static,
) -> impl futures::Stream<Item = Result<OmniCluster, kube::runtime::watcher::Error>> + Send + 'static
{
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut relisted: Option<std::collections::HashSet<String>> = None;
    events.filter_map(move |event| {
        let uid = |o: &OmniCluster| o.meta().uid.clone().unwrap_or_default();
        let out = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let id = uid(&o);
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(id.clone());
                }
                let state = own_change(&o).unwrap_or_default() ^ condition_states(&o);
                (seen.insert(id, state) != Some(state)).then_some(Ok(o))
            }
            Ok(watcher::Event::Delete(o)) => {
                seen.remove(&uid(&o));
                Some(Ok(o))
            }
            Ok(watcher::Event::Init) => {
                relisted = Some(std::collections::HashSet::new());
                None
            }
            // Objects gone while the watch was down are forgotten.
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = relisted.take() {
                    seen.retain(|id, _| listed.contains(id));
                }
                None
            }
            Err(e) => Some(Err(e)),
        };
        std::future::ready(out)
    })
}

/// A hash of `cluster`'s condition types and statuses (not their messages or times).
fn condition_states(cluster: &OmniCluster) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for c in cluster.status.iter().flat_map(|s| &s.conditions) {
        c.type_.hash(&mut h);
        c.status.hash(&mut h);
    }
    h.finish()
}

/// The parts of an object of our own kinds whose change calls for a reconcile: `generation`
/// (spec), labels, annotations (e.g. the adopt annotation), finalizers and the deletion mark.
/// `status` and `resourceVersion` are deliberately left out.
pub fn own_change<K: Resource>(obj: &K) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let meta = obj.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp.as_ref().map(|t| t.0).hash(&mut h);
    Some(h.finish())
}

/// Runs `controller` until `shutdown` completes: each object is decoded as `K` and handed to
/// `reconcile`; failures back off per object ([`error_policy_dyn`]).
pub async fn drive<K, F, Fut>(
    controller: kube::runtime::Controller<DynamicObject>,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    use futures::StreamExt as _;
    let kind = K::kind(&());
    controller
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx| reconcile_decoded(obj, ctx, reconcile),
            error_policy_dyn,
            ctx,
        )
        .for_each(|r| {
            log_outcome(&kind, r);
            std::future::ready(())
        })
        .await;
}

/// Logs each reconcile outcome of a controller stream at debug level (failures are logged
/// with their backoff by [`error_policy_dyn`]).
pub fn log_outcome<T: Debug, E: std::fmt::Display>(kind: &str, result: Result<T, E>) {
    match result {
        Ok(obj) => tracing::debug!(kind, object = ?obj, "reconciled"),
        Err(e) => tracing::debug!(kind, error = %e, "reconcile did not complete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Periodic re-checks of objects created together drift apart: each delay lands within
    /// ±10 % of the period, and they are not all the same.
    #[test]
    fn periodic_rechecks_are_spread_by_ten_percent() {
        let period = Duration::from_secs(300);
        let delays: Vec<Duration> = (0..200).map(|_| periodic(period)).collect();
        let (low, high) = (Duration::from_secs(270), Duration::from_secs(330));
        assert!(delays.iter().all(|d| (low..high).contains(d)), "{delays:?}");
        assert!(delays.iter().any(|d| *d != delays[0]), "no spread");
    }

    #[test]
    fn the_cache_keeps_no_field_manager_records_or_applied_copy() {
        let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
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

    #[test]
    fn undecodable_object_gets_invalid_object_condition_once() {
        let raw: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "bad", "namespace": "ns", "generation": 2},
            "spec": {"connectionRef": {"name": "omni"}, "kubernetes": {"version": 7}},
            "status": {"conditions": [{
                "type": "Synced", "status": "True", "reason": "Synced", "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(decode::<crate::api::OmniCluster>(&raw).is_err());
        let now = jiff::Timestamp::UNIX_EPOCH;
        let conditions = invalid_object_conditions(raw.data.get("status"), "bad", Some(2), now)
            .unwrap_or_else(|| panic!("a first report must change the conditions"));
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        assert_eq!(
            ready.map(|c| c.reason.as_str()),
            Some(REASON_INVALID_OBJECT)
        );
        assert!(
            conditions.iter().any(|c| c.type_ == "Synced"),
            "other conditions are kept"
        );
        let stored = serde_json::json!({ "conditions": conditions });
        assert_eq!(
            invalid_object_conditions(Some(&stored), "bad", Some(2), now),
            None,
            "a second reconcile of the same bad object writes nothing"
        );
    }

    #[test]
    fn backoff_grows_exponentially_and_caps() {
        assert_eq!(backoff_delay(1, 1.0), Duration::from_secs(5));
        assert_eq!(backoff_delay(2, 1.0), Duration::from_secs(10));
        assert_eq!(backoff_delay(4, 1.0), Duration::from_secs(40));
        assert_eq!(backoff_delay(7, 1.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(40, 1.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(1, 1.2), Duration::from_secs(6));
    }
}
