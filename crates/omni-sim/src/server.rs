//! The gRPC services: `cosi.resource.State` and `management.ManagementService`, each call going
//! through fault injection, signature verification, role checks and validation in Omni's order.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use omni_client::proto::cosi::resource::{
    CreateRequest, CreateResponse, DestroyRequest, DestroyResponse, Event, EventType, GetRequest,
    GetResponse, ListRequest, ListResponse, Metadata, Resource, Spec, TeardownAndDestroyRequest,
    TeardownAndDestroyResponse, TeardownRequest, TeardownResponse, UpdateRequest, UpdateResponse,
    WatchRequest, WatchResponse, state_server::State,
};
use omni_client::proto::management::{
    CreateServiceAccountRequest, CreateServiceAccountResponse, KubeconfigRequest,
    KubeconfigResponse, management_service_server::ManagementService,
};
use omni_client::proto::specs::ClusterUuid;
use tokio::sync::{broadcast, mpsc, watch};
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

use crate::auth::{Authenticator, Identity, KeyError};
use crate::clock::Clock;
use crate::store::{
    PHASE_RUNNING, Store, StoreEvent, VERSION_UNDEFINED, decode_spec, matches_queries, meta,
    reference,
};
use crate::types::{DEFAULT_NS, Role, ty};
use crate::validate::{Op, validate};
use crate::yaml_spec::with_yaml;
use crate::{WorkloadEndpoint, WorkloadProvider, token};

/// Full gRPC method paths served by the simulator.
#[allow(missing_docs)]
pub mod methods {
    pub const GET: &str = "/cosi.resource.State/Get";
    pub const LIST: &str = "/cosi.resource.State/List";
    pub const CREATE: &str = "/cosi.resource.State/Create";
    pub const UPDATE: &str = "/cosi.resource.State/Update";
    pub const DESTROY: &str = "/cosi.resource.State/Destroy";
    pub const WATCH: &str = "/cosi.resource.State/Watch";
    pub const TEARDOWN: &str = "/cosi.resource.State/Teardown";
    pub const TEARDOWN_AND_DESTROY: &str = "/cosi.resource.State/TeardownAndDestroy";
    pub const KUBECONFIG: &str = "/management.ManagementService/Kubeconfig";
    pub const CREATE_SERVICE_ACCOUNT: &str = "/management.ManagementService/CreateServiceAccount";
}

/// Result of one call, for [`CallCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The call succeeded (for streams: the stream was opened).
    Ok,
    /// The call failed with this code.
    Error(Code),
}

/// Calls per (method, outcome).
pub type CallCounts = HashMap<(String, Outcome), u64>;

/// Client writes the store applied, per (verb, resource type, resource ID): the verbs are
/// `create`, `update`, `teardown` (only the call that started the teardown) and `destroy`.
pub type AppliedWrites = BTreeMap<(String, String, String), u64>;

/// An outage of the whole API, every method at once (a test-only fault; off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Every call is answered `UNAVAILABLE` before it reaches authentication or the store, and
    /// open watches are cut with `UNAVAILABLE`, as when Omni is down behind its load balancer.
    Unavailable,
    /// Every call hangs: it is neither answered nor processed until the outage ends (a client
    /// with a deadline gives up first), and open watches deliver nothing meanwhile.
    Hang,
}

/// Per-method instrumentation: call counts, injected failures, latency and outages.
#[derive(Debug)]
pub(crate) struct Hooks {
    counts: Mutex<CallCounts>,
    failures: Mutex<HashMap<String, (Code, u32)>>,
    latency: Mutex<HashMap<String, Duration>>,
    writes: AtomicU64,
    applied: Mutex<AppliedWrites>,
    outage: watch::Sender<Option<Outage>>,
    outage_calls: AtomicU64,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            counts: Mutex::default(),
            failures: Mutex::default(),
            latency: Mutex::default(),
            writes: AtomicU64::new(0),
            applied: Mutex::default(),
            outage: watch::Sender::new(None),
            outage_calls: AtomicU64::new(0),
        }
    }
}

impl Hooks {
    /// Starts (`Some`) or ends (`None`) an outage of every method. Calls hung by
    /// [`Outage::Hang`] go on normally once it ends, if their client still waits.
    pub(crate) fn set_outage(&self, outage: Option<Outage>) {
        self.outage.send_replace(outage);
    }

    /// Calls that met an outage (answered `UNAVAILABLE`, or hung), whatever became of them.
    pub(crate) fn outage_calls(&self) -> u64 {
        self.outage_calls.load(Ordering::SeqCst)
    }

    /// A copy of the applied-write counters.
    pub(crate) fn applied_writes(&self) -> AppliedWrites {
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn applied(&self, verb: &str, resource_type: &str, id: &str) {
        *self
            .applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((verb.to_string(), resource_type.to_string(), id.to_string()))
            .or_default() += 1;
    }

    /// Holds a call while an outage is in force: `Err(UNAVAILABLE)` for
    /// [`Outage::Unavailable`]; for [`Outage::Hang`], waits until the outage ends (or the
    /// simulator shuts down), then checks again.
    async fn pass_outage(&self, shutdown: &watch::Receiver<bool>) -> Result<(), Status> {
        let mut outage = self.outage.subscribe();
        let mut shutdown = shutdown.clone();
        let mut counted = false;
        loop {
            let current = *outage.borrow_and_update();
            if current.is_some() && !counted {
                self.outage_calls.fetch_add(1, Ordering::SeqCst);
                counted = true;
            }
            match current {
                None => return Ok(()),
                Some(Outage::Unavailable) => return Err(outage_status()),
                Some(Outage::Hang) => {
                    tokio::select! {
                        changed = outage.changed() => {
                            if changed.is_err() {
                                return Err(outage_status());
                            }
                        }
                        _ = shutdown.wait_for(|s| *s) => {
                            return Err(Status::unavailable("server is shutting down"));
                        }
                    }
                }
            }
        }
    }

    /// Makes the next `count` calls of `method` fail with `code` (after authentication).
    pub(crate) fn inject_failure(&self, method: &str, code: Code, count: u32) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(method.to_string(), (code, count));
    }

    /// Delays every call of `method` by `delay` (zero removes the delay).
    pub(crate) fn set_latency(&self, method: &str, delay: Duration) {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        if delay.is_zero() {
            l.remove(method);
        } else {
            l.insert(method.to_string(), delay);
        }
    }

    /// A copy of the call counters.
    pub(crate) fn call_counts(&self) -> CallCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Number of write RPCs received (Create, Update, Destroy, Teardown, TeardownAndDestroy),
    /// whatever their outcome.
    pub(crate) fn writes_total(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    fn record<T>(&self, method: &str, r: &Result<T, Status>) {
        let outcome = match r {
            Ok(_) => Outcome::Ok,
            Err(s) => Outcome::Error(s.code()),
        };
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((method.to_string(), outcome))
            .or_default() += 1;
    }

    fn take_failure(&self, method: &str) -> Option<Status> {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let entry = f.get_mut(method)?;
        if entry.1 == 0 {
            return None;
        }
        entry.1 -= 1;
        Some(Status::new(entry.0, "injected failure"))
    }
}

/// Everything the services share.
pub(crate) struct Shared {
    /// Resource store.
    pub(crate) store: Arc<Store>,
    /// Key registry and verifier.
    pub(crate) auth: Arc<Authenticator>,
    /// Instrumentation.
    pub(crate) hooks: Arc<Hooks>,
    /// Server clock.
    pub(crate) clock: Arc<dyn Clock>,
    /// Where minted kubeconfigs point.
    pub(crate) workload: Mutex<Arc<dyn WorkloadProvider>>,
    /// Flips to true on shutdown; ends open watches.
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// What a client sees of an [`Outage::Unavailable`].
fn outage_status() -> Status {
    Status::unavailable("connection refused: Omni is unavailable (injected outage)")
}

impl Shared {
    async fn begin(&self, method: &str, md: &MetadataMap, write: bool) -> Result<Identity, Status> {
        // An outage stops the call before anything else: it never reached Omni.
        self.hooks.pass_outage(&self.shutdown).await?;
        let delay = self
            .hooks
            .latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(method)
            .copied();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if write {
            self.hooks.writes.fetch_add(1, Ordering::SeqCst);
        }
        let ident = self.auth.authenticate(method, md).map_err(|reason| {
            // The reason never contains key material; clients only see "invalid signature".
            tracing::debug!(%method, %reason, "rejected request signature");
            Status::unauthenticated("invalid signature")
        })?;
        if let Some(status) = self.hooks.take_failure(method) {
            return Err(status);
        }
        Ok(ident)
    }
}

/// How the State API exposes a resource type (docs/omni-wire.md#who-may-read-and-write-what).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    UserWritable,
    ReadOnly,
    Link,
    Public,
    AdminRead,
    Forbidden,
}

fn access(t: &str) -> Access {
    match t {
        ty::CLUSTER
        | ty::CONFIG_PATCH
        | ty::MACHINE_SET
        | ty::MACHINE_SET_NODE
        | ty::KERNEL_ARGS
        | ty::EXTENSIONS_CONFIGURATION
        | ty::MANIFEST_GROUP
        | ty::HEALTH_CHECK
        | ty::MACHINE_CLASS
        | ty::MACHINE_INSTALL_DISK_CONFIG => Access::UserWritable,
        ty::CLUSTER_STATUS
        | ty::MANIFESTS_STATUS
        | ty::MACHINE_SET_STATUS
        | ty::CONTROL_PLANE_STATUS
        | ty::LOAD_BALANCER_STATUS
        | ty::KUBERNETES_UPGRADE_STATUS
        | ty::TALOS_UPGRADE_STATUS
        | ty::CLUSTER_MACHINE_STATUS
        | ty::HEALTH_CHECK_STATUS
        | ty::CLUSTER_CONFIG_VERSION
        | ty::MACHINE_STATUS
        | ty::CLUSTER_UUID => Access::ReadOnly,
        ty::LINK => Access::Link,
        // Omni v1.9.3's state access lets any valid signature read these, and nobody write
        // them. Notifications must be among them: omnictl lists them before every command.
        ty::TALOS_VERSION
        | ty::KUBERNETES_VERSION
        | ty::NAMESPACE
        | ty::RESOURCE_DEFINITION
        | ty::SYS_VERSION
        | ty::NOTIFICATION => Access::Public,
        ty::IDENTITY | ty::USER => Access::AdminRead,
        _ => Access::Forbidden,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Read,
    Write,
    Remove,
}

fn insufficient(role: Role) -> String {
    format!(
        "unauthorized: access denied: insufficient role: {:?}",
        role.as_str()
    )
}

fn need(ident: &Identity, role: Role, prefix: &str) -> Result<(), Status> {
    if ident.role < role {
        return Err(Status::permission_denied(format!(
            "{prefix}{}",
            insufficient(ident.role)
        )));
    }
    Ok(())
}

/// Authorizes a COSI call; messages carry the `failed to validate: ` prefix like Omni's.
fn authorize(ident: &Identity, t: &str, verb: Verb) -> Result<(), Status> {
    const P: &str = "failed to validate: ";
    let read_only = || Status::permission_denied(format!("{P}only read access is permitted"));
    match (access(t), verb) {
        (Access::Forbidden, _) => Err(Status::permission_denied(format!(
            "{P}access is not permitted"
        ))),
        (Access::Public, Verb::Read) => Ok(()),
        (Access::AdminRead, Verb::Read) => need(ident, Role::Admin, P),
        (Access::UserWritable | Access::ReadOnly | Access::Link, Verb::Read) => {
            need(ident, Role::Reader, P)
        }
        (Access::UserWritable, _) | (Access::Link, Verb::Remove) => {
            need(ident, Role::Reader, P)?;
            need(ident, Role::Operator, P)
        }
        (Access::Link, Verb::Write) => Err(Status::permission_denied(format!(
            "{P}only teardown and destroy are permitted"
        ))),
        (Access::ReadOnly | Access::Public | Access::AdminRead, _) => Err(read_only()),
    }
}

fn invalid(msg: String) -> Status {
    Status::invalid_argument(format!("failed to validate: {msg}"))
}

fn tombstone(ns: &str, t: &str, id: &str) -> Resource {
    Resource {
        metadata: Some(Metadata {
            namespace: ns.to_string(),
            r#type: t.to_string(),
            id: id.to_string(),
            version: VERSION_UNDEFINED.to_string(),
            phase: PHASE_RUNNING.to_string(),
            ..Default::default()
        }),
        spec: Some(Spec::default()),
    }
}

/// A watch event; its resources carry their `yaml_spec`, as Omni's do.
fn event(event_type: EventType, resource: Resource, old: Option<Resource>) -> Event {
    Event {
        resource: Some(with_yaml(resource)),
        event_type: event_type as i32,
        old: old.map(with_yaml),
        error: None,
        bookmark: None,
    }
}

/// The `cosi.resource.State` service.
#[derive(Debug, Clone)]
pub(crate) struct StateService(pub Arc<Shared>);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl StateService {
    async fn get_inner(&self, req: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let ident = self.0.begin(methods::GET, req.metadata(), false).await?;
        let r = req.into_inner();
        authorize(&ident, &r.r#type, Verb::Read)?;
        let resource = self.0.store.get(&r.namespace, &r.r#type, &r.id)?;
        Ok(Response::new(GetResponse {
            resource: Some(with_yaml(resource)),
        }))
    }

    async fn list_inner(
        &self,
        req: Request<ListRequest>,
    ) -> Result<Response<BoxStream<ListResponse>>, Status> {
        let ident = self.0.begin(methods::LIST, req.metadata(), false).await?;
        let r = req.into_inner();
        authorize(&ident, &r.r#type, Verb::Read)?;
        let opts = r.options.unwrap_or_default();
        let id_re = id_regex(opts.id_query.as_ref().map(|q| q.regexp.as_str()))?;
        let items: Vec<Result<ListResponse, Status>> = self
            .0
            .store
            .list(&r.namespace, &r.r#type, &opts.label_query)
            .into_iter()
            .filter(|res| id_re.as_ref().is_none_or(|re| re.is_match(&meta(res).id)))
            .map(|resource| {
                Ok(ListResponse {
                    resource: Some(with_yaml(resource)),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(items))))
    }

    async fn create_inner(
        &self,
        req: Request<CreateRequest>,
    ) -> Result<Response<CreateResponse>, Status> {
        let ident = self.0.begin(methods::CREATE, req.metadata(), true).await?;
        let r = req.into_inner();
        let resource = r
            .resource
            .ok_or_else(|| Status::invalid_argument("resource is missing"))?;
        let md = resource
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("metadata is missing"))?;
        authorize(&ident, &md.r#type, Verb::Write)?;
        if resource.spec.is_none() {
            return Err(Status::invalid_argument("spec is missing"));
        }
        validate(&self.0.store, Op::Create(&resource)).map_err(invalid)?;
        let owner = r.options.map(|o| o.owner).unwrap_or_default();
        let stored = self.0.store.create(resource, &owner)?;
        self.0.hooks.applied("create", &md.r#type, &md.id);
        Ok(Response::new(CreateResponse {
            resource: Some(stored),
        }))
    }

    async fn update_inner(
        &self,
        req: Request<UpdateRequest>,
    ) -> Result<Response<UpdateResponse>, Status> {
        let ident = self.0.begin(methods::UPDATE, req.metadata(), true).await?;
        let r = req.into_inner();
        let resource = r
            .new_resource
            .ok_or_else(|| Status::invalid_argument("resource is missing"))?;
        let md = resource
            .metadata
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("metadata is missing"))?
            .clone();
        authorize(&ident, &md.r#type, Verb::Write)?;
        if resource.spec.is_none() {
            return Err(Status::invalid_argument("spec is missing"));
        }
        let old = self
            .0
            .store
            .try_get(&md.namespace, &md.r#type, &md.id)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "resource {} doesn't exist",
                    reference(&md.namespace, &md.r#type, &md.id, &md.version)
                ))
            })?;
        validate(
            &self.0.store,
            Op::Update {
                old: &old,
                new: &resource,
            },
        )
        .map_err(invalid)?;
        let opts = r.options.unwrap_or_default();
        let stored = self
            .0
            .store
            .update(resource, &opts.owner, opts.expected_phase.as_deref())?;
        self.0.hooks.applied("update", &md.r#type, &md.id);
        Ok(Response::new(UpdateResponse {
            resource: Some(stored),
        }))
    }

    /// Shared checks of Destroy and Teardown: role, existence, destroy validations. Returns
    /// the resource as it was.
    fn removal_checks(
        &self,
        ident: &Identity,
        ns: &str,
        t: &str,
        id: &str,
    ) -> Result<Resource, Status> {
        authorize(ident, t, Verb::Remove)?;
        let old = self.0.store.get(ns, t, id)?;
        validate(&self.0.store, Op::Destroy(&old)).map_err(invalid)?;
        Ok(old)
    }

    async fn destroy_inner(
        &self,
        req: Request<DestroyRequest>,
    ) -> Result<Response<DestroyResponse>, Status> {
        let ident = self.0.begin(methods::DESTROY, req.metadata(), true).await?;
        let r = req.into_inner();
        self.removal_checks(&ident, &r.namespace, &r.r#type, &r.id)?;
        let owner = r.options.map(|o| o.owner).unwrap_or_default();
        self.0
            .store
            .destroy(&r.namespace, &r.r#type, &r.id, &owner)?;
        self.0.hooks.applied("destroy", &r.r#type, &r.id);
        Ok(Response::new(DestroyResponse {}))
    }

    async fn teardown_inner(
        &self,
        req: Request<TeardownRequest>,
    ) -> Result<Response<TeardownResponse>, Status> {
        let ident = self
            .0
            .begin(methods::TEARDOWN, req.metadata(), true)
            .await?;
        let r = req.into_inner();
        let old = self.removal_checks(&ident, &r.namespace, &r.r#type, &r.id)?;
        let owner = r.options.map(|o| o.owner).unwrap_or_default();
        let destroy_ready = self
            .0
            .store
            .teardown(&r.namespace, &r.r#type, &r.id, &owner)?;
        // Repeating a teardown changes nothing; only the first one counts as a write.
        if meta(&old).phase != crate::store::PHASE_TEARING_DOWN {
            self.0.hooks.applied("teardown", &r.r#type, &r.id);
        }
        Ok(Response::new(TeardownResponse { destroy_ready }))
    }

    async fn teardown_and_destroy_inner(
        &self,
        req: Request<TeardownAndDestroyRequest>,
    ) -> Result<Response<TeardownAndDestroyResponse>, Status> {
        let ident = self
            .0
            .begin(methods::TEARDOWN_AND_DESTROY, req.metadata(), true)
            .await?;
        let r = req.into_inner();
        self.removal_checks(&ident, &r.namespace, &r.r#type, &r.id)?;
        let owner = r.options.map(|o| o.owner).unwrap_or_default();
        let store = &self.0.store;
        let mut rx = store.subscribe();
        let ready = store.teardown(&r.namespace, &r.r#type, &r.id, &owner)?;
        self.0
            .hooks
            .applied("teardown_and_destroy", &r.r#type, &r.id);
        if ready {
            store.destroy(&r.namespace, &r.r#type, &r.id, &owner)?;
            return Ok(Response::new(TeardownAndDestroyResponse {}));
        }
        let mut shutdown = self.0.shutdown.clone();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return Err(Status::unavailable("server is shutting down")),
                ev = rx.recv() => {
                    if let Err(broadcast::error::RecvError::Closed) = ev {
                        return Err(Status::unavailable("server is shutting down"));
                    }
                }
            }
            match store.try_get(&r.namespace, &r.r#type, &r.id) {
                None => return Ok(Response::new(TeardownAndDestroyResponse {})),
                Some(cur) if meta(&cur).finalizers.is_empty() => {
                    match store.destroy(&r.namespace, &r.r#type, &r.id, &owner) {
                        Ok(()) | Err(crate::store::StoreError::NotFound(_)) => {
                            return Ok(Response::new(TeardownAndDestroyResponse {}));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Some(_) => {}
            }
        }
    }

    async fn watch_inner(
        &self,
        req: Request<WatchRequest>,
    ) -> Result<Response<BoxStream<WatchResponse>>, Status> {
        let ident = self.0.begin(methods::WATCH, req.metadata(), false).await?;
        let r = req.into_inner();
        authorize(&ident, &r.r#type, Verb::Read)?;
        let opts = r.options.clone().unwrap_or_default();
        if opts.start_from_bookmark.is_some() {
            return Err(Status::failed_precondition("invalid bookmark"));
        }
        if r.id.is_some() && (opts.bootstrap_contents || !opts.label_query.is_empty()) {
            return Err(Status::unimplemented(
                "bootstrap contents and label queries are not supported for single resource watches",
            ));
        }
        let id_re = id_regex(opts.id_query.as_ref().map(|q| q.regexp.as_str()))?;
        let (snapshot, rx) = self.0.store.snapshot_and_subscribe(&r.namespace, &r.r#type);
        let (tx, out) = mpsc::channel::<Result<WatchResponse, Status>>(256);
        let task = WatchTask {
            req: r,
            queries: opts.label_query,
            id_re,
            aggregated: opts.aggregated,
            bootstrap: opts.bootstrap_contents,
            tx,
            shutdown: self.0.shutdown.clone(),
            outage: self.0.hooks.outage.subscribe(),
        };
        tokio::spawn(task.run(snapshot, rx));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out),
        )))
    }
}

fn id_regex(re: Option<&str>) -> Result<Option<regex::Regex>, Status> {
    match re {
        None | Some("") => Ok(None),
        Some(re) => regex::Regex::new(re)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("invalid id query: {e}"))),
    }
}

struct WatchTask {
    req: WatchRequest,
    queries: Vec<omni_client::proto::cosi::resource::LabelQuery>,
    id_re: Option<regex::Regex>,
    aggregated: bool,
    bootstrap: bool,
    tx: mpsc::Sender<Result<WatchResponse, Status>>,
    shutdown: watch::Receiver<bool>,
    outage: watch::Receiver<Option<Outage>>,
}

impl WatchTask {
    fn matches(&self, r: &Resource) -> bool {
        let md = meta(r);
        match &self.req.id {
            Some(id) => &md.id == id,
            None => {
                matches_queries(r, &self.queries)
                    && self.id_re.as_ref().is_none_or(|re| re.is_match(&md.id))
            }
        }
    }

    async fn send(&self, events: Vec<Event>) -> bool {
        let events: Vec<Event> = events
            .into_iter()
            .filter(|e| {
                // Old clients (api_version < 1) do not understand these event types.
                self.req.api_version >= 1
                    || (e.event_type != EventType::Bootstrapped as i32
                        && e.event_type != EventType::Errored as i32)
            })
            .collect();
        if events.is_empty() {
            return true;
        }
        if self.aggregated {
            return self
                .tx
                .send(Ok(WatchResponse { event: events }))
                .await
                .is_ok();
        }
        for e in events {
            if self
                .tx
                .send(Ok(WatchResponse { event: vec![e] }))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Translates a store change into the event this watch sees, including label-match
    /// transitions (start matching → CREATED, stop matching → DESTROYED).
    fn translate(&self, ev: &StoreEvent) -> Option<Event> {
        let (ns, t) = ev.kind();
        if ns != self.req.namespace || t != self.req.r#type {
            return None;
        }
        match ev {
            StoreEvent::Created(r) => self
                .matches(r)
                .then(|| event(EventType::Created, r.clone(), None)),
            StoreEvent::Destroyed(r) => self
                .matches(r)
                .then(|| event(EventType::Destroyed, r.clone(), None)),
            StoreEvent::Updated { old, new } => match (self.matches(old), self.matches(new)) {
                (true, true) => Some(event(EventType::Updated, new.clone(), Some(old.clone()))),
                (false, true) => Some(event(EventType::Created, new.clone(), None)),
                (true, false) => Some(event(EventType::Destroyed, new.clone(), None)),
                (false, false) => None,
            },
        }
    }

    /// Waits out an [`Outage::Hang`]; `false` when the stream must end: the outage is
    /// [`Outage::Unavailable`] (the client is told so), the client left or the server stops.
    async fn survives_outage(&mut self) -> bool {
        loop {
            let current = *self.outage.borrow_and_update();
            match current {
                None => return true,
                Some(Outage::Unavailable) => {
                    let _ = self.tx.send(Err(outage_status())).await;
                    return false;
                }
                Some(Outage::Hang) => {
                    tokio::select! {
                        changed = self.outage.changed() => {
                            if changed.is_err() {
                                return false;
                            }
                        }
                        _ = self.shutdown.changed() => return false,
                        _ = self.tx.closed() => return false,
                    }
                }
            }
        }
    }

    async fn run(mut self, snapshot: Vec<Resource>, mut rx: broadcast::Receiver<Arc<StoreEvent>>) {
        // The empty first response tells the client the watch is established.
        if self
            .tx
            .send(Ok(WatchResponse { event: vec![] }))
            .await
            .is_err()
        {
            return;
        }
        let initial: Vec<Event> = match &self.req.id {
            Some(id) => vec![match snapshot.into_iter().find(|r| &meta(r).id == id) {
                Some(r) => event(EventType::Created, r, None),
                None => event(
                    EventType::Destroyed,
                    tombstone(&self.req.namespace, &self.req.r#type, id),
                    None,
                ),
            }],
            None if self.bootstrap => {
                let mut evs: Vec<Event> = snapshot
                    .into_iter()
                    .filter(|r| self.matches(r))
                    .map(|r| event(EventType::Created, r, None))
                    .collect();
                evs.push(event(
                    EventType::Bootstrapped,
                    tombstone(&self.req.namespace, &self.req.r#type, ""),
                    None,
                ));
                evs
            }
            None => Vec::new(),
        };
        if !self.send(initial).await {
            return;
        }
        loop {
            let ev = tokio::select! {
                _ = self.shutdown.changed() => return,
                _ = self.tx.closed() => return,
                changed = self.outage.changed() => {
                    if changed.is_err() || !self.survives_outage().await {
                        return;
                    }
                    continue;
                }
                ev = rx.recv() => ev,
            };
            // A hung server delivers nothing until it recovers.
            if !self.survives_outage().await {
                return;
            }
            match ev {
                Ok(ev) => {
                    if let Some(e) = self.translate(&ev)
                        && !self.send(vec![e]).await
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let errored = Event {
                        resource: None,
                        event_type: EventType::Errored as i32,
                        old: None,
                        error: Some("watch buffer overrun".into()),
                        bookmark: None,
                    };
                    self.send(vec![errored]).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

macro_rules! instrumented {
    ($self:ident, $method:expr, $call:expr) => {{
        let r = $call.await;
        $self.0.hooks.record($method, &r);
        r
    }};
}

#[tonic::async_trait]
impl State for StateService {
    async fn get(&self, req: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        instrumented!(self, methods::GET, self.get_inner(req))
    }

    type ListStream = BoxStream<ListResponse>;

    async fn list(&self, req: Request<ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        instrumented!(self, methods::LIST, self.list_inner(req))
    }

    async fn create(
        &self,
        req: Request<CreateRequest>,
    ) -> Result<Response<CreateResponse>, Status> {
        instrumented!(self, methods::CREATE, self.create_inner(req))
    }

    async fn update(
        &self,
        req: Request<UpdateRequest>,
    ) -> Result<Response<UpdateResponse>, Status> {
        instrumented!(self, methods::UPDATE, self.update_inner(req))
    }

    async fn destroy(
        &self,
        req: Request<DestroyRequest>,
    ) -> Result<Response<DestroyResponse>, Status> {
        instrumented!(self, methods::DESTROY, self.destroy_inner(req))
    }

    type WatchStream = BoxStream<WatchResponse>;

    async fn watch(
        &self,
        req: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        instrumented!(self, methods::WATCH, self.watch_inner(req))
    }

    async fn teardown(
        &self,
        req: Request<TeardownRequest>,
    ) -> Result<Response<TeardownResponse>, Status> {
        instrumented!(self, methods::TEARDOWN, self.teardown_inner(req))
    }

    async fn teardown_and_destroy(
        &self,
        req: Request<TeardownAndDestroyRequest>,
    ) -> Result<Response<TeardownAndDestroyResponse>, Status> {
        instrumented!(
            self,
            methods::TEARDOWN_AND_DESTROY,
            self.teardown_and_destroy_inner(req)
        )
    }
}

/// Longest service-account kubeconfig TTL Omni allows (10 × 365 days = 87600h).
pub(crate) const MAX_KUBECONFIG_TTL_SECS: i64 = 87_600 * 3600;

/// The `management.ManagementService` service.
#[derive(Debug, Clone)]
pub(crate) struct ManagementSvc(pub Arc<Shared>);

/// Omni's rules for a kubeconfig request, in its order: the role, then the request's fields.
/// Returns the cluster and the TTL.
fn check_kubeconfig_request(
    ident: &Identity,
    cluster: Option<String>,
    r: &KubeconfigRequest,
) -> Result<(String, prost_types::Duration), Status> {
    if !r.service_account {
        return Err(Status::unimplemented(
            "the simulator only issues service-account kubeconfigs",
        ));
    }
    need(ident, Role::Reader, "")?;
    need(ident, Role::Operator, "")?;
    let cluster =
        cluster.ok_or_else(|| Status::invalid_argument("cluster name is not in context"))?;
    if r.service_account_user.is_empty() {
        return Err(Status::invalid_argument(
            "service account user name is not set",
        ));
    }
    let ttl = r
        .service_account_ttl
        .ok_or_else(|| Status::invalid_argument("service account ttl is not set"))?;
    if ttl.seconds < 0 || (ttl.seconds == 0 && ttl.nanos <= 0) {
        return Err(Status::invalid_argument(
            "service account ttl is must be positive",
        ));
    }
    if ttl.seconds > MAX_KUBECONFIG_TTL_SECS
        || (ttl.seconds == MAX_KUBECONFIG_TTL_SECS && ttl.nanos > 0)
    {
        return Err(Status::invalid_argument(
            "service account ttl is too long (max allowed: 87600h0m0s)",
        ));
    }
    Ok((cluster, ttl))
}

/// The minted kubeconfig: one cluster, context and user, all called `name`.
fn kubeconfig_yaml(name: &str, endpoint: &WorkloadEndpoint, jwt: &str) -> String {
    let mut yaml = String::new();
    yaml.push_str("apiVersion: v1\nkind: Config\nclusters:\n  - cluster:\n");
    yaml.push_str(&format!("      server: {}\n", q(&endpoint.server)));
    if let Some(ca) = &endpoint.ca_data {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(ca);
        yaml.push_str(&format!("      certificate-authority-data: {b64}\n"));
    }
    yaml.push_str(&format!("    name: {}\n", q(name)));
    yaml.push_str("contexts:\n  - context:\n");
    yaml.push_str(&format!("      cluster: {}\n", q(name)));
    yaml.push_str("      namespace: default\n");
    yaml.push_str(&format!("      user: {}\n", q(name)));
    yaml.push_str(&format!("    name: {}\n", q(name)));
    yaml.push_str(&format!("current-context: {}\n", q(name)));
    yaml.push_str("users:\n");
    yaml.push_str(&format!("  - name: {}\n    user:\n", q(name)));
    yaml.push_str(&format!("      token: {}\n", q(jwt)));
    yaml
}

/// YAML double-quoted scalar (JSON string syntax is valid YAML).
fn q(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

impl ManagementSvc {
    async fn kubeconfig_inner(
        &self,
        req: Request<KubeconfigRequest>,
    ) -> Result<Response<KubeconfigResponse>, Status> {
        let ident = self
            .0
            .begin(methods::KUBECONFIG, req.metadata(), false)
            .await?;
        let header = |k: &str| {
            req.metadata()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let cluster = header("cluster").or_else(|| header("context"));
        let r = req.get_ref();
        let (cluster, ttl) = check_kubeconfig_request(&ident, cluster, r)?;
        let uuid_res = self
            .0
            .store
            .get(DEFAULT_NS, ty::CLUSTER_UUID, &cluster)
            .map_err(|e| Status::unknown(format!("failed to get cluster UUID: {e}")))?;
        let uuid: ClusterUuid = decode_spec(&uuid_res).unwrap_or_default();
        let account = ident
            .email
            .split('@')
            .next()
            .unwrap_or(&ident.name)
            .to_string();
        let now = self.0.clock.now();
        let expires_at = now
            .checked_add(jiff::SignedDuration::new(ttl.seconds, ttl.nanos))
            .map_err(|_| Status::invalid_argument("service account ttl is too long"))?;
        let claims = token::TokenClaims {
            user: r.service_account_user.clone(),
            groups: r.service_account_groups.clone(),
            cluster: cluster.clone(),
            cluster_uuid: uuid.uuid,
            issuer: format!("omni-{account}-service-account-issuer"),
            issued_at: now,
            expires_at,
        };
        let jwt = token::mint(&claims);
        let endpoint = self
            .0
            .workload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .endpoint(&cluster);
        let name = format!("{account}-{cluster}-{}", r.service_account_user);
        Ok(Response::new(KubeconfigResponse {
            kubeconfig: kubeconfig_yaml(&name, &endpoint, &jwt).into_bytes(),
        }))
    }

    async fn create_service_account_inner(
        &self,
        req: Request<CreateServiceAccountRequest>,
    ) -> Result<Response<CreateServiceAccountResponse>, Status> {
        let ident = self
            .0
            .begin(methods::CREATE_SERVICE_ACCOUNT, req.metadata(), true)
            .await?;
        need(&ident, Role::Admin, "")?;
        let r = req.into_inner();
        if r.name.is_empty() {
            return Err(Status::invalid_argument("service account name is not set"));
        }
        let role = if r.use_user_role {
            ident.role
        } else {
            r.role
                .parse::<Role>()
                .map_err(|e| Status::invalid_argument(e.to_string()))?
        };
        if role > ident.role {
            return Err(Status::permission_denied(insufficient(ident.role)));
        }
        let fp = self
            .0
            .auth
            .register(&r.name, &r.armored_pgp_public_key, role, None, true)
            .map_err(|e| match e {
                KeyError::AlreadyExists(m) => Status::already_exists(m),
                other => Status::invalid_argument(other.to_string()),
            })?;
        Ok(Response::new(CreateServiceAccountResponse {
            public_key_id: fp,
        }))
    }
}

#[tonic::async_trait]
impl ManagementService for ManagementSvc {
    async fn kubeconfig(
        &self,
        req: Request<KubeconfigRequest>,
    ) -> Result<Response<KubeconfigResponse>, Status> {
        instrumented!(self, methods::KUBECONFIG, self.kubeconfig_inner(req))
    }

    async fn create_service_account(
        &self,
        req: Request<CreateServiceAccountRequest>,
    ) -> Result<Response<CreateServiceAccountResponse>, Status> {
        instrumented!(
            self,
            methods::CREATE_SERVICE_ACCOUNT,
            self.create_service_account_inner(req)
        )
    }
}

/// Tower layer implementing Omni's gate: only HTTP/2 requests whose `content-type` starts with
/// `application/grpc` reach the gRPC services; everything else (the web UI in real Omni) gets
/// `415 Unsupported Media Type` here.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GrpcGateLayer;

impl<S> tower::Layer<S> for GrpcGateLayer {
    type Service = GrpcGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcGate { inner }
    }
}

/// See [`GrpcGateLayer`].
#[derive(Debug, Clone)]
pub(crate) struct GrpcGate<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for GrpcGate<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let grpc = req.version() == http::Version::HTTP_2
            && req
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/grpc"));
        if !grpc {
            let mut resp = http::Response::new(tonic::body::Body::empty());
            *resp.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return Box::pin(async move { Ok(resp) });
        }
        Box::pin(self.inner.call(req))
    }
}
