//! The HTTP API server: discovery, and get/list/watch/create/update/
//! merge-patch/delete over the [`Store`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::admission::{AdmissionRequest, Operation, ReviewUser, WebhookDispatcher};
use crate::crd::{crd_established, default_builtin};
use crate::error::ApiError;
use crate::field_validation::{Directive, Findings, duplicate_fields, prune_metadata};
use crate::gc::{collect_dependents, purge_namespace};
use crate::hooks::{CounterKey, Hooks};
use crate::patch::{field_set, json_patch, merge_patch, strategic_merge};
use crate::request::{Authenticator, Authorizer, RequestInfo, UserInfo};
use crate::selectors::{field_selector_matches, selector_matches};
use crate::store::{Preconditions, ResourceType, Store, Write};
use crate::watch::{WatchOptions, watch};

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// Underlying error.
        source: std::io::Error,
    },
}

/// Configures a [`KubeSim`] before starting it.
pub struct KubeSimBuilder {
    addr: SocketAddr,
    history: crate::store::HistoryLimit,
    authenticator: Option<Arc<dyn Authenticator>>,
    authorizer: Option<Arc<dyn Authorizer>>,
    tls: Option<Arc<rustls::ServerConfig>>,
    admission: Option<WebhookDispatcher>,
    bookmark_interval: std::time::Duration,
}

/// Entry point: `KubeSim::builder().start().await`.
pub struct KubeSim;

impl KubeSim {
    /// A builder listening on `127.0.0.1:0` with the real API server's watch history: per
    /// resource type at least 1000 events and everything from the last 75 seconds, up to
    /// 102,400 events.
    pub fn builder() -> KubeSimBuilder {
        KubeSimBuilder {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            history: crate::store::HistoryLimit {
                min: 1000,
                max: 102_400,
                fresh: std::time::Duration::from_secs(75),
            },
            authenticator: None,
            authorizer: None,
            tls: None,
            admission: None,
            bookmark_interval: std::time::Duration::from_secs(60),
        }
    }
}

/// A running server.
pub struct RunningKubeSim {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The server task.
    pub handle: tokio::task::JoinHandle<()>,
    store: Store,
    hooks: Arc<Hooks>,
}

impl RunningKubeSim {
    /// Request counters.
    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// Total write requests served so far.
    pub fn writes_total(&self) -> u64 {
        self.hooks.writes_total()
    }

    /// The backing store (read or seed objects directly).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves an extra resource type.
    pub fn register(&self, t: ResourceType) {
        self.store.register(t);
    }

    /// Stops the server.
    pub fn shutdown(self) {
        self.handle.abort();
    }
}

struct AppState {
    store: Store,
    hooks: Arc<Hooks>,
    authenticator: Option<Arc<dyn Authenticator>>,
    authorizer: Option<Arc<dyn Authorizer>>,
    admission: Option<WebhookDispatcher>,
    bookmark_interval: std::time::Duration,
}

impl KubeSimBuilder {
    /// Interval of BOOKMARK events on watches with `allowWatchBookmarks=true` (default one
    /// minute, like the real server).
    pub fn bookmark_interval(mut self, interval: std::time::Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Calls the stored `ValidatingWebhookConfiguration`s on every write, through this
    /// dispatcher (which resolves `clientConfig.service` references); without it no webhook
    /// is called.
    pub fn admission(mut self, dispatcher: WebhookDispatcher) -> Self {
        self.admission = Some(dispatcher);
        self
    }

    /// Serve HTTPS with this configuration (see [`crate::tls`]); verified client
    /// certificates reach the authenticator as the peer certificate.
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// Listen address (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Number of events kept per resource type for watch resumption, whatever their age.
    pub fn watch_history(mut self, n: usize) -> Self {
        self.history = crate::store::HistoryLimit::fixed(n);
        self
    }

    /// Authenticator; without one every caller is `system:admin`.
    pub fn authenticator(mut self, a: Arc<dyn Authenticator>) -> Self {
        self.authenticator = Some(a);
        self
    }

    /// Authorizer; without one everything is allowed.
    pub fn authorizer(mut self, a: Arc<dyn Authorizer>) -> Self {
        self.authorizer = Some(a);
        self
    }

    /// Binds and serves plain HTTP.
    pub async fn start(self) -> Result<RunningKubeSim, StartError> {
        let store = Store::with_history(self.history);
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: self.addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| StartError::Bind {
            addr: self.addr,
            source,
        })?;
        let hooks = Arc::new(Hooks::default());
        let state = Arc::new(AppState {
            store: store.clone(),
            hooks: hooks.clone(),
            authenticator: self.authenticator,
            authorizer: self.authorizer,
            admission: self.admission,
            bookmark_interval: self.bookmark_interval,
        });
        let app = axum::Router::new().fallback(handle).with_state(state);
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let handle = match self.tls {
            None => tokio::spawn(async move {
                use axum::serve::ListenerExt as _;
                let listener = listener.tap_io(|tcp| no_delay(tcp));
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "kube-sim server stopped");
                }
            }),
            Some(config) => {
                tokio::spawn(serve_tls(listener, crate::tls::TlsServer::new(config), app))
            }
        };
        Ok(RunningKubeSim {
            base_url: format!("{scheme}://{local}"),
            handle,
            store,
            hooks,
        })
    }
}

/// Sends each write at once, as a real API server does (Go sets `TCP_NODELAY` on every TCP
/// connection). With Nagle's algorithm an HTTP/2 answer's DATA frame waited for the client's
/// delayed acknowledgement of its HEADERS frame: about 40 ms on every answer.
fn no_delay(tcp: &tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "kube-sim could not set TCP_NODELAY");
    }
}

/// Accept loop for HTTPS: each connection's verified client certificate is put
/// into every request's extensions, so authentication can see it.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: crate::tls::TlsServer,
    app: axum::Router,
) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => {
                no_delay(&tcp);
                tcp
            }
            Err(e) => {
                // Usually descriptor exhaustion: back off instead of spinning on the error.
                tracing::warn!(error = %e, "kube-sim accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let tls = tls.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let (stream, peer) = match tls.accept(tcp).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "kube-sim TLS handshake failed");
                    return;
                }
            };
            let svc =
                hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                    if let Some(p) = &peer {
                        req.extensions_mut().insert(p.clone());
                    }
                    tower::ServiceExt::oneshot(app.clone(), req)
                });
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "kube-sim connection ended");
            }
        });
    }
}

pub(crate) fn json_response(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) fn err_response(e: &ApiError) -> Response {
    json_response(e.code, &e.to_status())
}

/// A parsed resource path.
pub(crate) struct Target {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) namespace: Option<String>,
    pub(crate) resource: String,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, mut rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest.to_vec()),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest.to_vec()),
        _ => return None,
    };
    let mut namespace = None;
    if rest.len() >= 3 && rest[0] == "namespaces" && !matches!(rest[2], "status" | "finalize") {
        namespace = Some(rest[1].to_string());
        rest = rest[2..].to_vec();
    }
    let resource = rest.first()?.to_string();
    Some(Target {
        group,
        version,
        namespace,
        resource,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    })
}

async fn handle(
    State(st): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    peer: Option<axum::Extension<crate::tls::PeerCertificate>>,
    body: Bytes,
) -> Response {
    let peer_der = peer.as_ref().map(|p| p.0.0.as_slice());
    let user = match &st.authenticator {
        None => UserInfo::admin(),
        Some(a) => match a.authenticate(&headers, peer_der) {
            Some(u) => u,
            None => return err_response(&ApiError::unauthorized()),
        },
    };
    let user =
        match crate::impersonation::apply(&headers, user, st.authorizer.as_deref(), &st.store) {
            Ok(u) => u,
            Err(e) => return err_response(&e),
        };
    let path = uri.path();
    if let Some(resp) = crate::discovery::serve(&st.store, path, &headers) {
        return resp;
    }
    let Some(t) = parse_path(path) else {
        return err_response(&ApiError::with_code(
            404,
            "the server could not find the requested resource",
        ));
    };
    if t.resource.is_empty()
        || (path.trim_end_matches('/').ends_with(&t.version)
            && t.name.is_none()
            && t.resource == t.version)
    {
        return err_response(&ApiError::with_code(
            404,
            "the server could not find the requested resource",
        ));
    }
    let Some(rt) = st
        .store
        .resource_type(&t.group, &t.resource)
        .filter(|r| r.version == t.version)
    else {
        return err_response(&ApiError::with_code(
            404,
            "the server could not find the requested resource",
        ));
    };
    let watch = q.get("watch").is_some_and(|v| v == "true" || v == "1");
    let verb = match (&method, t.name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if watch => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => {
            return err_response(&ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    let ns = if rt.namespaced {
        t.namespace.clone()
    } else {
        None
    };
    let info = RequestInfo {
        verb: verb.to_string(),
        api_group: t.group.clone(),
        api_version: t.version.clone(),
        resource: t.resource.clone(),
        subresource: t.subresource.clone(),
        namespace: ns.clone(),
        name: t.name.clone(),
        kind: rt.kind.clone(),
        path: path.to_string(),
        is_resource_request: true,
    };
    st.hooks.count(CounterKey {
        verb: verb.to_string(),
        resource: t.resource.clone(),
        subresource: t.subresource.clone(),
        user: user.name.clone(),
    });
    if let Some(name) = t.name.as_deref()
        && matches!(verb, "create" | "update" | "patch" | "delete")
    {
        st.hooks
            .count_object_write(&t.resource, ns.as_deref(), name);
    }
    if let Some(az) = &st.authorizer
        && let Err(reason) = az.authorize(&user, &info, &st.store)
    {
        return err_response(&ApiError::forbidden(
            &t.group,
            &t.resource,
            t.name.as_deref().unwrap_or(""),
            reason,
        ));
    }
    if let Some(code) = st
        .hooks
        .take_failure(verb, &t.resource, ns.as_deref(), t.name.as_deref())
    {
        return err_response(&ApiError::with_code(
            code,
            "injected failure (kube-sim test hook)",
        ));
    }
    if t.group == "authentication.k8s.io" && t.resource == "selfsubjectreviews" {
        return self_subject_review(verb, &user);
    }
    if t.group == "authorization.k8s.io" && t.resource == "selfsubjectaccessreviews" {
        return self_subject_access_review(&st, verb, &user, &headers, &body);
    }
    let reviewers = crate::reviews::Reviewers {
        authenticator: st.authenticator.as_deref(),
        authorizer: st.authorizer.as_deref(),
        store: &st.store,
    };
    if let Some(resp) = crate::reviews::serve(&t.group, &t.resource, verb, &body, &reviewers) {
        return resp;
    }
    let delay = st.hooks.take_latency(verb, &t.resource);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(value) = q.get("dryRun").filter(|v| *v != "All") {
        return err_response(&ApiError::invalid(
            "meta.k8s.io",
            options_kind(verb),
            "",
            vec![crate::error::Cause {
                reason: "FieldValueNotSupported".into(),
                message: format!("Unsupported value: {value:?}: supported values: \"All\""),
                field: "dryRun".into(),
            }],
        ));
    }
    if matches!(verb, "list" | "watch" | "deletecollection")
        && let Err(e) = crate::selectors::check_field_selector(&q, &t.group, &t.resource)
    {
        return err_response(&e);
    }
    let gate = Gate {
        dispatcher: st.admission.as_ref(),
        hooks: &st.hooks,
        bookmark_interval: st.bookmark_interval,
        store: &st.store,
        user: &user,
        rt: &rt,
        t: &t,
        ns: ns.as_deref(),
        dry_run: q.get("dryRun").is_some_and(|v| v == "All")
            || (matches!(verb, "delete" | "deletecollection") && body_requests_dry_run(&body)),
        warnings: std::sync::Mutex::new(Vec::new()),
    };
    // A patch without a resourceVersion is applied to whatever is current: like the real
    // server's update loop, recompute it when a concurrent write got in between our read and
    // our write, instead of reporting a conflict the client never asked for.
    let unconditional_patch = verb == "patch" && !body.windows(15).any(|w| w == b"resourceVersion");
    let mut res = serve_verb(&gate, verb, &q, &headers, &body).await;
    for _ in 0..8 {
        match &res {
            Err(e)
                if unconditional_patch
                    && e.code == 409
                    && e.message.contains("has been modified") =>
            {
                res = serve_verb(&gate, verb, &q, &headers, &body).await;
            }
            _ => break,
        }
    }
    let mut resp = match res {
        Ok(r) => r,
        Err(e) => err_response(&e),
    };
    let mut warnings = gate.warnings.lock().map(|w| w.clone()).unwrap_or_default();
    // A recomputed patch finds the same problems again; each is reported once.
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    for w in warnings {
        // A quoted-string (RFC 9110): quotes and backslashes are escaped.
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!("299 - \"{quoted}\"");
        if let Ok(value) = axum::http::HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", value);
        }
    }
    resp
}

/// DeleteOptions may come as the request body, and clients (kube-rs among them) put
/// `dryRun: ["All"]` there instead of in the query.
fn body_requests_dry_run(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|o| o.get("dryRun").and_then(Value::as_array).cloned())
        .is_some_and(|values| values.iter().any(|v| v == "All"))
}

/// The options kind the real server names when it rejects a request parameter.
fn options_kind(verb: &str) -> &'static str {
    match verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        "delete" | "deletecollection" => "DeleteOptions",
        "list" | "watch" => "ListOptions",
        _ => "GetOptions",
    }
}

/// `kubectl auth can-i`: asks the configured authorizer about the request described in the
/// review (without an authorizer everything is allowed, as with `AlwaysAllow`).
fn self_subject_access_review(
    st: &AppState,
    verb: &str,
    user: &UserInfo,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    if verb != "create" {
        return err_response(&ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let review = match parse_body(headers, body) {
        Ok(r) => r,
        Err(e) => return err_response(&e),
    };
    let attrs = match crate::rbac::review_attributes(&review) {
        Ok(a) => a,
        Err(e) => {
            return err_response(&ApiError::invalid(
                "authorization.k8s.io",
                "SelfSubjectAccessReview",
                "",
                vec![crate::error::Cause {
                    reason: "FieldValueInvalid".into(),
                    message: e.to_string(),
                    field: "spec".into(),
                }],
            ));
        }
    };
    let info = RequestInfo::from(attrs);
    let decision = match &st.authorizer {
        // A denial by RBAC carries no reason (it has no opinion); the 403 message is for
        // requests, not reviews.
        Some(az) => az
            .authorize(user, &info, &st.store)
            .map(|()| String::new())
            .map_err(|_| String::new()),
        None => Ok(String::new()),
    };
    json_response(201, &crate::rbac::review_response(&review, decision))
}

/// `kubectl auth whoami`: who the server thinks the caller is. Only `create` exists.
fn self_subject_review(verb: &str, user: &UserInfo) -> Response {
    if verb != "create" {
        return err_response(&ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    json_response(
        201,
        &json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
            "metadata": {"creationTimestamp": null},
            "status": {"userInfo": {"username": user.name, "groups": user.groups}},
        }),
    )
}

/// Validating admission for one request: every write passes through [`Gate::check`] after
/// defaulting and before it is persisted, as on the real server.
pub(crate) struct Gate<'a> {
    dispatcher: Option<&'a WebhookDispatcher>,
    hooks: &'a Hooks,
    bookmark_interval: std::time::Duration,
    store: &'a Store,
    user: &'a UserInfo,
    rt: &'a ResourceType,
    t: &'a Target,
    ns: Option<&'a str>,
    dry_run: bool,
    /// Warnings returned by webhooks, sent back as `Warning` headers.
    warnings: std::sync::Mutex<Vec<String>>,
}

impl Gate<'_> {
    /// Adds warnings to send back as `Warning` headers.
    fn warn(&self, warnings: Vec<String>) {
        if let Ok(mut w) = self.warnings.lock() {
            w.extend(warnings);
        }
    }

    /// Stores a new object (or, under `dryRun=All`, only computes it).
    fn create(&self, obj: Value) -> Result<Value, ApiError> {
        let (store, t) = (self.store, self.t);
        let write = Write::from_dry_run(self.dry_run);
        let created = store.create_as(&t.group, &t.resource, self.ns, obj, write)?;
        if write == Write::DryRun {
            return Ok(created);
        }
        crd_established(store, &t.group, &t.resource, created)
    }

    /// Replaces an object (or, under `dryRun=All`, only computes the result).
    fn update(&self, name: &str, obj: Value) -> Result<Value, ApiError> {
        let write = Write::from_dry_run(self.dry_run);
        self.store
            .update_as(&self.t.group, &self.t.resource, self.ns, name, obj, write)
    }

    /// Records a create, update or patch in `managedFields` under the request's field
    /// manager: `fieldManager`, else the client's program name from its User-Agent.
    fn record_update(
        &self,
        old: Option<&Value>,
        obj: &mut Value,
        q: &HashMap<String, String>,
        headers: &HeaderMap,
    ) {
        let manager = q
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .cloned()
            .or_else(|| {
                headers
                    .get("user-agent")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|ua| ua.split('/').next())
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let subresource = self.t.subresource.as_deref();
        let shape = crate::apply::Shape::of(
            &self.t.group,
            &self.t.resource,
            crate::crd::serves(self.store, &self.t.group, &self.t.resource),
            self.rt.status_subresource,
            subresource,
        );
        crate::apply::record_update(old, obj, &manager, subresource, &shape, &now);
    }

    /// Asks the webhooks whose rules match; a denial or a failed call under
    /// `failurePolicy: Fail` becomes the request's error.
    async fn check(
        &self,
        operation: Operation,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(dispatcher) = self.dispatcher else {
            return Ok(());
        };
        let configurations = self.store.list_objects(
            crate::admission::ADMISSIONREGISTRATION_GROUP,
            "validatingwebhookconfigurations",
            None,
        );
        if configurations.is_empty() {
            return Ok(());
        }
        let name = object
            .or(old)
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .or(self.t.name.as_deref())
            .unwrap_or_default();
        let namespace_labels = self.ns.and_then(|ns| {
            let stored = self.store.get("", "namespaces", None, ns).ok()?;
            Some(
                stored
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                            .collect()
                    })
                    .unwrap_or_default(),
            )
        });
        let request = AdmissionRequest {
            operation,
            group: self.t.group.clone(),
            version: self.t.version.clone(),
            resource: self.t.resource.clone(),
            subresource: self.t.subresource.clone().unwrap_or_default(),
            kind: self.rt.kind.clone(),
            namespaced: self.rt.namespaced,
            name: name.to_owned(),
            namespace: self.ns.unwrap_or_default().to_owned(),
            object: object.cloned(),
            old_object: old.cloned(),
            dry_run: self.dry_run,
            options: None,
            user: ReviewUser {
                username: self.user.name.clone(),
                uid: String::new(),
                groups: self.user.groups.clone(),
            },
            namespace_labels,
        };
        match dispatcher.admit(&configurations, &request).await {
            Ok(warnings) => {
                if let Ok(mut w) = self.warnings.lock() {
                    w.extend(warnings);
                }
                Ok(())
            }
            Err(rejection) => {
                let mut e = ApiError::with_code(rejection.code, &rejection.message);
                e.reason = rejection.reason;
                Err(e)
            }
        }
    }
}

/// Decodes a create/update body: JSON (or YAML, a JSON superset here) or, for the kinds
/// client-go's typed clients send that way, protobuf.
fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with(crate::protobuf::MEDIA_TYPE) {
        return crate::protobuf::decode(body);
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(&format!(
            "the body of the request could not be decoded: {e}"
        ))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not a JSON object",
        ));
    }
    let mut v = v;
    crate::numbers::normalize(&mut v);
    Ok(v)
}

/// One verb of one resource, by the API server's steps for it.
async fn serve_verb(
    gate: &Gate<'_>,
    verb: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    match verb {
        "get" => get(gate, headers).await,
        "list" => list(gate, q, headers).await,
        "watch" => watch(
            gate.store,
            gate.hooks,
            WatchOptions {
                bookmark_interval: gate.bookmark_interval,
                table: crate::table::wanted(headers),
                metadata_only: crate::partial::wanted(headers) == Some("PartialObjectMetadata"),
            },
            gate.rt,
            gate.t,
            gate.ns,
            q,
        ),
        "create" => create(gate, q, headers, body).await,
        "update" => update(gate, q, headers, body).await,
        "patch" => patch(gate, q, headers, body).await,
        "delete" => delete(gate, body).await,
        "deletecollection" => delete_collection(gate, q).await,
        _ => Err(ApiError::method_not_allowed("unsupported verb")),
    }
}

/// `get`: the object, as a Table or PartialObjectMetadata when the client asks for one.
async fn get(gate: &Gate<'_>, headers: &HeaderMap) -> Result<Response, ApiError> {
    let (store, rt, t, ns) = (gate.store, gate.rt, gate.t, gate.ns);
    let name = t.name.as_deref().unwrap_or("");
    let obj = store.get(&t.group, &t.resource, ns, name)?;
    if crate::table::wanted(headers) {
        let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion")});
        return Ok(json_response(
            200,
            &crate::table::render(store, rt, std::slice::from_ref(&obj), meta),
        ));
    }
    if crate::partial::wanted(headers) == Some("PartialObjectMetadata") {
        return Ok(json_response(200, &crate::partial::object(&obj)));
    }
    Ok(json_response(200, &obj))
}

/// `list`: a page of the objects the selectors select (Table, metadata-only or full).
async fn list(
    gate: &Gate<'_>,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (store, rt, t, ns) = (gate.store, gate.rt, gate.t, gate.ns);
    let empty = serde_json::Map::new();
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let label_selector = q.get("labelSelector").filter(|s| !s.is_empty());
    let field_selector = q.get("fieldSelector").filter(|s| !s.is_empty());
    // Selectors are evaluated on the view the client asked for.
    let as_stored = crate::events::storage_of(&t.group, &t.resource).is_none();
    let page = match q.get("continue").map(String::as_str) {
        None | Some("") => store.page(&t.group, &t.resource, ns, limit, |stored| {
            let viewed;
            let o = if as_stored {
                stored
            } else {
                viewed = crate::events::to_view(&t.group, &t.resource, stored.clone());
                &viewed
            };
            let labels = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            label_selector.is_none_or(|s| selector_matches(s, labels))
                && field_selector
                    .is_none_or(|s| field_selector_matches(s, &t.group, &t.resource, o))
        }),
        // Every page of a list is as of its first page, as the real server serves it from
        // that page's etcd revision; a list forgotten meanwhile is 410, as one compacted.
        Some(token) => store
            .next_page(decode_continue(token)?, limit)
            .ok_or_else(|| {
                ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter.",
                )
            })?,
    };
    let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(id) = page.next {
        let last = page.items.last().map(|o| key_of(o)).unwrap_or_default();
        meta["continue"] = json!(encode_continue(
            page.resource_version,
            &last,
            id,
            rt.namespaced
        ));
        // The real server can count what follows only without selectors.
        if label_selector.is_none() && field_selector.is_none() {
            meta["remainingItemCount"] = json!(page.remaining);
        }
    }
    fn view<'v>(
        t: &Target,
        as_stored: bool,
        o: &'v std::sync::Arc<Value>,
    ) -> std::borrow::Cow<'v, Value> {
        if as_stored {
            std::borrow::Cow::Borrowed(&**o)
        } else {
            std::borrow::Cow::Owned(crate::events::to_view(
                &t.group,
                &t.resource,
                Value::clone(o),
            ))
        }
    }
    if crate::table::wanted(headers) {
        let objects: Vec<Value> = page
            .items
            .iter()
            .map(|o| view(t, as_stored, o).into_owned())
            .collect();
        return Ok(json_response(
            200,
            &crate::table::render(store, rt, &objects, meta),
        ));
    }
    if crate::partial::wanted(headers) == Some("PartialObjectMetadataList") {
        let items = page.items.iter().map(|o| &**o);
        return Ok(json_response(200, &crate::partial::list(items, meta)));
    }
    // Serialised straight from the stored objects: a list copies no object.
    let mut out = Vec::with_capacity(64 + page.items.len() * 512);
    out.extend_from_slice(b"{\"apiVersion\":");
    let write = |out: &mut Vec<u8>, v: &Value| {
        // Serialising a Value into memory cannot fail.
        let _ = serde_json::to_writer(out, v);
    };
    write(&mut out, &json!(rt.api_version()));
    out.extend_from_slice(b",\"items\":[");
    for (i, o) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(&mut out, &view(t, as_stored, o));
    }
    out.extend_from_slice(b"],\"kind\":");
    write(&mut out, &json!(format!("{}List", rt.kind)));
    out.extend_from_slice(b",\"metadata\":");
    write(&mut out, &meta);
    out.push(b'}');
    Ok((StatusCode::OK, [("content-type", "application/json")], out).into_response())
}

/// `create`: decode, prune and default, drop a status the subresource owns, validate,
/// record the manager, admit, store.
async fn create(
    gate: &Gate<'_>,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (store, rt, t) = (gate.store, gate.rt, gate.t);
    let directive = Directive::from_query(q, "CreateOptions")?;
    let mut obj = parse_body(headers, body)?;
    let mut findings = Findings {
        duplicate: duplicate_fields(body),
        unknown: prune_metadata(&mut obj),
    };
    default_builtin(&t.group, &t.resource, &mut obj, None)?;
    findings
        .unknown
        .extend(crate::schema::prune_and_default_object(store, rt, &mut obj));
    gate.warn(findings.enforce(directive, Some((&rt.kind, &rt.version)))?);
    drop_status_on_create(rt, &mut obj);
    crate::schema::validate(store, rt, &obj, None)?;
    gate.warn(crate::crd::unevaluated_rule_warnings(
        &t.group,
        &t.resource,
        &obj,
    ));
    gate.record_update(None, &mut obj, q, headers);
    gate.check(Operation::Create, Some(&obj), None).await?;
    let created = gate.create(obj)?;
    Ok(json_response(201, &created))
}

/// `update`: as `create`, against the stored object, with the status split after decoding.
async fn update(
    gate: &Gate<'_>,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (store, rt, t, ns) = (gate.store, gate.rt, gate.t, gate.ns);
    let name = t.name.as_deref().unwrap_or("");
    let directive = Directive::from_query(q, "UpdateOptions")?;
    let mut obj = parse_body(headers, body)?;
    let mut findings = Findings {
        duplicate: duplicate_fields(body),
        unknown: prune_metadata(&mut obj),
    };
    let old = store.get(&t.group, &t.resource, ns, name)?;
    // Decoding (pruning, unknown-field warnings) sees the whole body; the status split
    // comes after it, as in the API server's update strategy.
    findings
        .unknown
        .extend(crate::schema::prune_and_default_object(store, rt, &mut obj));
    keep_status_split(rt, t, &old, &mut obj);
    default_builtin(&t.group, &t.resource, &mut obj, Some(&old))?;
    gate.warn(findings.enforce(directive, Some((&rt.kind, &rt.version)))?);
    crate::schema::validate(store, rt, &obj, Some(&old))?;
    gate.record_update(Some(&old), &mut obj, q, headers);
    gate.check(Operation::Update, Some(&obj), Some(&old))
        .await?;
    let updated = gate.update(name, obj)?;
    Ok(json_response(200, &updated))
}

/// `patch`: merge, strategic, JSON or apply patch over the stored object, then as `update`.
async fn patch(
    gate: &Gate<'_>,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (store, rt, t, ns) = (gate.store, gate.rt, gate.t, gate.ns);
    let name = t.name.as_deref().unwrap_or("");
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let merge = ct.starts_with("application/merge-patch+json");
    let strategic = ct.starts_with("application/strategic-merge-patch+json");
    let apply = ct.starts_with("application/apply-patch+yaml");
    if !merge && !strategic && !apply && !ct.starts_with("application/json-patch+json") {
        return Err(ApiError::unsupported_media_type(ct));
    }
    // Custom resources have no patch-merge keys, so the real server refuses these.
    if strategic && crate::crd::serves(store, &t.group, &t.resource) {
        return Err(ApiError::unsupported_media_type(ct));
    }
    let patch: Value = if apply {
        let text = std::str::from_utf8(body)
            .map_err(|_| ApiError::bad_request("the body of the request could not be decoded"))?;
        serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(&format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(&format!(
                "the body of the request could not be decoded: {e}"
            ))
        })?
    };
    let mut patch = patch;
    crate::numbers::normalize(&mut patch);
    if apply {
        return server_side_apply(gate, name, q, patch).await;
    }
    let directive = Directive::from_query(q, "PatchOptions")?;
    let old = store.get(&t.group, &t.resource, ns, name)?;
    let mut obj = old.clone();
    // Merge patches are decoded strictly too; a JSON patch is a list of operations.
    let mut findings = Findings {
        duplicate: if merge || strategic {
            duplicate_fields(body)
        } else {
            Vec::new()
        },
        unknown: Vec::new(),
    };
    if merge {
        merge_patch(&mut obj, &patch);
    } else if strategic {
        strategic_merge(&mut obj, &patch);
    } else {
        json_patch(&mut obj, &patch)?;
    }
    findings.unknown = prune_metadata(&mut obj);
    findings
        .unknown
        .extend(crate::schema::prune_and_default_object(store, rt, &mut obj));
    keep_status_split(rt, t, &old, &mut obj);
    default_builtin(&t.group, &t.resource, &mut obj, Some(&old))?;
    gate.warn(findings.enforce(directive, None)?);
    crate::schema::validate(store, rt, &obj, Some(&old))?;
    gate.record_update(Some(&old), &mut obj, q, headers);
    gate.check(Operation::Update, Some(&obj), Some(&old))
        .await?;
    let updated = gate.update(name, obj)?;
    Ok(json_response(200, &updated))
}

/// `delete`: preconditions, admission, finalizers, garbage collection, namespace purge and
/// CRD unregistration.
async fn delete(gate: &Gate<'_>, body: &Bytes) -> Result<Response, ApiError> {
    let (store, t, ns) = (gate.store, gate.t, gate.ns);
    let name = t.name.as_deref().unwrap_or("");
    let mut pre = Preconditions::default();
    if !body.is_empty()
        && let Ok(opts) = serde_json::from_slice::<Value>(body)
    {
        pre.uid = opts
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        pre.resource_version = opts
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    let orphan = !body.is_empty()
        && serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|o| {
                o.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(|p| p == "Orphan")
            })
            .unwrap_or(false);
    let existing = store.get(&t.group, &t.resource, ns, name)?;
    gate.check(Operation::Delete, None, Some(&existing)).await?;
    if gate.dry_run {
        // Every check ran (preconditions included); nothing is deleted.
        pre.check(&existing, &t.group, &t.resource, name)?;
        return Ok(json_response(200, &existing));
    }
    crate::gc::prepare_foreground(store, body, &t.group, &t.resource, ns, name);
    let (obj, gone) = store.delete(&t.group, &t.resource, ns, name, &pre)?;
    if gone && let Some(uid) = obj.pointer("/metadata/uid").and_then(Value::as_str) {
        collect_dependents(store, uid, orphan);
    }
    if t.group.is_empty() && t.resource == "namespaces" {
        purge_namespace(store, name);
    }
    if gone
        && t.group == "apiextensions.k8s.io"
        && t.resource == "customresourcedefinitions"
        && let (Some(g), Some(p)) = (
            obj.pointer("/spec/group").and_then(Value::as_str),
            obj.pointer("/spec/names/plural").and_then(Value::as_str),
        )
    {
        store.unregister(g, p);
    }
    if gone {
        Ok(json_response(
            200,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": name, "group": t.group, "kind": t.resource, "uid": obj.pointer("/metadata/uid")}}),
        ))
    } else {
        Ok(json_response(200, &obj))
    }
}

/// `deletecollection`: `delete` of each selected object, admitted one by one.
async fn delete_collection(
    gate: &Gate<'_>,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (store, t, ns) = (gate.store, gate.t, gate.ns);
    // Label and field selectors narrow the collection, as for list.
    for o in store
        .list_objects(&t.group, &t.resource, ns)
        .into_iter()
        .filter(|o| crate::selectors::selected(q, &t.group, &t.resource, o))
    {
        if let Some(n) = o.pointer("/metadata/name").and_then(Value::as_str) {
            let ons = o.pointer("/metadata/namespace").and_then(Value::as_str);
            gate.check(Operation::Delete, None, Some(&o)).await?;
            if !gate.dry_run {
                store.delete(&t.group, &t.resource, ons, n, &Preconditions::default())?;
            }
        }
    }
    Ok(json_response(
        200,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    ))
}

/// `(namespace, name)` of a stored object.
fn key_of(obj: &Value) -> (String, String) {
    let meta = |field: &str| {
        obj.pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (meta("namespace"), meta("name"))
}

/// A continue token shaped like the real server's, base64 of `{"v":"meta.k8s.io/v1","rv":..,
/// "start":..}` (`start`: the key after which the next page begins), plus the number of the
/// list's snapshot (`list`), which the next page is served from.
fn encode_continue(rv: u64, last: &(String, String), list: u64, namespaced: bool) -> String {
    use base64::Engine;
    let key = if namespaced {
        format!("{}/{}\u{0}", last.0, last.1)
    } else {
        format!("{}\u{0}", last.1)
    };
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": key, "list": list});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

/// The list snapshot a continue token continues; 400 when it is not one of ours.
fn decode_continue(token: &str) -> Result<u64, ApiError> {
    use base64::Engine;
    let invalid = || ApiError::bad_request(&format!("continue key is not valid: {token:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| invalid())?;
    let parsed: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if parsed.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1")
        || parsed.get("start").and_then(Value::as_str).is_none()
    {
        return Err(invalid());
    }
    parsed
        .get("list")
        .and_then(Value::as_u64)
        .ok_or_else(invalid)
}

/// With a status subresource, a create through the main endpoint drops `status`, as the real
/// server's create strategy does (a controller writes it through `/status` afterwards).
fn drop_status_on_create(rt: &ResourceType, obj: &mut Value) {
    if rt.status_subresource
        && let Some(map) = obj.as_object_mut()
    {
        map.remove("status");
    }
}

/// With a status subresource, the main endpoint ignores status and `/status`
/// ignores everything but status, as on the real server.
fn keep_status_split(rt: &ResourceType, t: &Target, old: &Value, obj: &mut Value) {
    if !rt.status_subresource {
        return;
    }
    if t.subresource.as_deref() == Some("status") {
        let status = obj.get("status").cloned();
        let rv = obj.pointer("/metadata/resourceVersion").cloned();
        *obj = old.clone();
        match status {
            Some(s) => obj["status"] = s,
            None => {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        match rv {
            Some(rv) => obj["metadata"]["resourceVersion"] = rv,
            None => {
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
            }
        }
    } else if let Some(s) = old.get("status") {
        obj["status"] = s.clone();
    } else if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
}

/// Server-side apply: `fieldManager` is required; a missing object is created;
/// otherwise the applied configuration is merged over the live object and the
/// manager's `managedFields` entry is recorded. Conflict detection between
/// managers is not emulated (see README).
async fn server_side_apply(
    gate: &Gate<'_>,
    name: &str,
    q: &HashMap<String, String>,
    patch: Value,
) -> Result<Response, ApiError> {
    let (store, rt, t, ns) = (gate.store, gate.rt, gate.t, gate.ns);
    let Some(manager) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![crate::error::Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        ));
    };
    if !patch.is_object() {
        return Err(ApiError::bad_request("apply patch must be an object"));
    }
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let api_version = patch
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut fields = json!({});
    field_set(&patch, &mut fields);
    // Identity (apiVersion, kind, name, namespace) and what the strategy resets are nobody's.
    crate::apply::Shape::of(
        &t.group,
        &t.resource,
        crate::crd::serves(store, &t.group, &t.resource),
        rt.status_subresource,
        t.subresource.as_deref(),
    )
    .trim_applied(&mut fields);
    let entry = json!({
        "manager": manager, "operation": "Apply", "apiVersion": api_version,
        "time": now, "fieldsType": "FieldsV1", "fieldsV1": fields,
    });
    let set_entry = |obj: &mut Value| {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            let mut list: Vec<Value> = meta
                .get("managedFields")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            list.retain(|e| {
                !(e.get("manager").and_then(Value::as_str) == Some(manager.as_str())
                    && e.get("operation").and_then(Value::as_str) == Some("Apply"))
            });
            list.push(entry.clone());
            crate::apply::sort_entries(&mut list);
            meta.insert("managedFields".into(), Value::Array(list));
        }
    };
    match store.get(&t.group, &t.resource, ns, name) {
        Err(e) if e.code == 404 => {
            let mut obj = patch;
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("name".into(), json!(name));
                if let Some(ns) = ns {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
            default_builtin(&t.group, &t.resource, &mut obj, None)?;
            crate::schema::prune_and_default_object(store, rt, &mut obj);
            drop_status_on_create(rt, &mut obj);
            set_entry(&mut obj);
            crate::schema::validate(store, rt, &obj, None)?;
            gate.check(Operation::Create, Some(&obj), None).await?;
            let created = gate.create(obj)?;
            Ok(json_response(201, &created))
        }
        Err(e) => Err(e),
        Ok(old) => {
            let mut obj = old.clone();
            let mut applied = patch;
            if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
            let force = q.get("force").is_some_and(|v| v == "true");
            let (others, dropped) = crate::apply::resolve(
                &old,
                &applied,
                &fields,
                manager,
                force,
                &t.group,
                &t.resource,
                name,
            )?;
            merge_patch(&mut obj, &applied);
            crate::apply::remove_paths(&mut obj, &dropped);
            obj["metadata"]["managedFields"] = Value::Array(others);
            set_entry(&mut obj);
            crate::schema::prune_and_default_object(store, rt, &mut obj);
            keep_status_split(rt, t, &old, &mut obj);
            default_builtin(&t.group, &t.resource, &mut obj, Some(&old))?;
            crate::schema::validate(store, rt, &obj, Some(&old))?;
            gate.check(Operation::Update, Some(&obj), Some(&old))
                .await?;
            let updated = gate.update(name, obj)?;
            Ok(json_response(200, &updated))
        }
    }
}
