//! Validating admission webhooks, called the way the real API server calls them.
//!
//! For each write the emulator asks every `ValidatingWebhookConfiguration` in the store (sorted
//! by name, webhooks in order) whether it applies: `rules` (operations, apiGroups, apiVersions,
//! resources incl. `*`, `*/*`, `res/*`, `*/sub`, scope), `namespaceSelector` (matched against
//! the namespace's labels, which always include `kubernetes.io/metadata.name`; for a Namespace
//! itself its own labels; never for other cluster-scoped objects) and `objectSelector` (matched
//! against the new or the old object's labels). Matching webhooks receive an
//! `admission.k8s.io/v1` AdmissionReview over HTTPS trusting `caBundle`, bounded by
//! `timeoutSeconds` (default 10). A call error is ignored under `failurePolicy: Ignore` and
//! fails the request with an internal error under `Fail` (the default). A denial becomes
//! `admission webhook "<name>" denied the request: <message>` with the webhook's status code
//! (raised to 400 when lower) and reason. Warnings from all webhooks are returned in order.
//!
//! There is no cluster DNS, so `clientConfig.service` references are resolved through a
//! registry the test or sandbox fills ([`WebhookDispatcher::register_service`]); TLS still
//! verifies the server name `<service>.<namespace>.svc`, like the real server.
//!
//! `matchConditions` are CEL expressions over `object`, `oldObject` and `request` (the
//! AdmissionRequest), evaluated after the rules and selectors match: any `false` skips the
//! webhook; otherwise an evaluation error skips it under `failurePolicy: Ignore` and refuses the
//! request (403 Forbidden) under `Fail`, as the real server does. Only kube-sim's CEL subset is
//! understood (see `cel.rs`); an expression beyond it counts as an evaluation error, so it is
//! noticed rather than silently skipped. The `authorizer` variable is not emulated.
//!
//! Webhooks are never called for webhook configuration objects themselves, so a broken webhook
//! can always be removed. `matchPolicy: Equivalent` version conversion is not emulated.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tls;

/// The API group of webhook configurations, whose writes are never sent to webhooks.
pub const ADMISSIONREGISTRATION_GROUP: &str = "admissionregistration.k8s.io";

/// Default per-call timeout when a webhook sets no `timeoutSeconds`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The operation being admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Create.
    Create,
    /// Update, patch or apply of an existing object.
    Update,
    /// Delete.
    Delete,
    /// Connect (exec, proxy, …).
    Connect,
}

impl Operation {
    /// The wire name (`CREATE`, `UPDATE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }

    /// The options kind sent in `request.options` for this operation.
    fn options_kind(self) -> Option<&'static str> {
        match self {
            Self::Create => Some("CreateOptions"),
            Self::Update => Some("UpdateOptions"),
            Self::Delete => Some("DeleteOptions"),
            Self::Connect => None,
        }
    }
}

/// The authenticated user, as sent in `request.userInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewUser {
    /// User name.
    pub username: String,
    /// User UID, if known.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// Everything the dispatcher needs to know about one write.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    /// The operation.
    pub operation: Operation,
    /// API group of the resource (`""` for core).
    pub group: String,
    /// API version of the request.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource (`status`, …) or empty.
    pub subresource: String,
    /// Kind of the object.
    pub kind: String,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// Object name (may be empty for generateName creates).
    pub name: String,
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// The new object (create/update), `None` for delete.
    pub object: Option<Value>,
    /// The existing object (update/delete), `None` for create.
    pub old_object: Option<Value>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// Operation options as sent by the client, if any (`fieldManager`, `propagationPolicy`, …).
    pub options: Option<Value>,
    /// Who is asking.
    pub user: ReviewUser,
    /// Labels of the request's namespace as stored (without `kubernetes.io/metadata.name`,
    /// which the dispatcher adds), or `None` when the namespace is not stored.
    pub namespace_labels: Option<BTreeMap<String, String>>,
}

/// A request refused by admission, in the shape of a Kubernetes `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (may be empty, as when a webhook sets none).
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, as the webhook returned them (or absent).
    pub details: Option<Value>,
}

impl Rejection {
    /// The rejection as a `v1` Status object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// The outcome of admitting one request.
pub type AdmissionResult = Result<Vec<String>, Rejection>;

/// `(namespace, name, port)` of a webhook Service.
type ServiceKey = (String, String, u16);

/// Calls validating webhooks; holds the service-name registry used in place of cluster DNS.
/// Like the real API server's webhook client, it keeps connections open and reuses them (and
/// each `caBundle`'s TLS configuration) instead of dialling and handshaking for every call.
#[derive(Debug, Default, Clone)]
pub struct WebhookDispatcher {
    services: Arc<RwLock<HashMap<ServiceKey, SocketAddr>>>,
    pool: Arc<std::sync::Mutex<Pool>>,
}

/// Where a connection leads and whom it trusts: a connection is reused only for the same.
type ConnectionKey = (String, String, Vec<u8>);

/// Idle webhook connections and the TLS configurations built so far.
#[derive(Default)]
struct Pool {
    idle: HashMap<ConnectionKey, Vec<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>,
    tls: HashMap<Vec<u8>, Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("targets", &self.idle.len())
            .finish_non_exhaustive()
    }
}

/// Idle connections kept per webhook target.
const IDLE_PER_TARGET: usize = 8;

impl WebhookDispatcher {
    /// A dispatcher with no registered services.
    pub fn new() -> Self {
        Self::default()
    }

    /// Routes `clientConfig.service` `{namespace, name, port}` to a local address.
    pub fn register_service(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        if let Ok(mut map) = self.services.write() {
            map.insert((namespace.to_owned(), name.to_owned(), port), addr);
        }
    }

    fn resolve_service(&self, namespace: &str, name: &str, port: u16) -> Option<SocketAddr> {
        self.services
            .read()
            .ok()?
            .get(&(namespace.to_owned(), name.to_owned(), port))
            .copied()
    }

    /// Admits `request` against the stored `ValidatingWebhookConfiguration` objects.
    ///
    /// Returns the warnings of all called webhooks, or the first rejection (in configuration
    /// name order, then webhook order), like the real server.
    pub async fn admit(
        &self,
        configurations: &[Value],
        request: &AdmissionRequest,
    ) -> AdmissionResult {
        if request.group == ADMISSIONREGISTRATION_GROUP
            && matches!(
                request.resource.as_str(),
                "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
            )
        {
            return Ok(Vec::new());
        }
        let mut configs: Vec<&Value> = configurations.iter().collect();
        configs.sort_by(|a, b| name_of(a).cmp(name_of(b)));
        let hooks: Vec<Webhook> = configs
            .iter()
            .flat_map(|c| {
                c.get("webhooks")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|w| serde_json::from_value::<Webhook>(w.clone()).ok())
            })
            .filter(|w| webhook_applies(w, request))
            .collect();
        // The `request` variable is built only when some matching webhook has conditions:
        // this runs on every write.
        let mut review: Option<Value> = None;
        let mut called = Vec::with_capacity(hooks.len());
        for hook in &hooks {
            if hook.match_conditions.is_empty() {
                called.push(hook);
                continue;
            }
            let review = review.get_or_insert_with(|| review_for(request, ""));
            if match_conditions_call(hook, request, &review["request"])? {
                called.push(hook);
            }
        }
        let hooks = called;

        // The real server calls validating webhooks in parallel and reports the first error.
        let outcomes =
            futures::future::join_all(hooks.iter().map(|hook| self.call_checked(hook, request)))
                .await;
        let mut warnings = Vec::new();
        for outcome in outcomes {
            warnings.extend(outcome?);
        }
        Ok(warnings)
    }

    async fn call_checked(&self, hook: &Webhook, request: &AdmissionRequest) -> AdmissionResult {
        if request.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(Rejection {
                code: 400,
                reason: "BadRequest".to_owned(),
                message: format!(
                    "admission webhook \"{}\" has side effects and does not support dry run",
                    hook.name
                ),
                details: None,
            });
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let review = review_for(request, &uid);
        let timeout = hook.timeout_seconds.map_or(DEFAULT_TIMEOUT, |s| {
            Duration::from_secs(u64::from(s.clamp(1, 30)))
        });
        let called = tokio::time::timeout(timeout, self.post(hook, &review)).await;
        let response = match called {
            Ok(Ok(body)) => parse_response(&body, &uid),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(CallError::Timeout(timeout)),
        };
        match response {
            Ok(resp) if resp.allowed => Ok(resp.warnings),
            Ok(resp) => Err(denied(&hook.name, resp.status.as_ref())),
            Err(e) if hook.failure_policy == "Ignore" => {
                tracing::warn!(webhook = %hook.name, error = %e, "ignoring failed webhook call");
                Ok(Vec::new())
            }
            Err(e) => Err(Rejection {
                code: 500,
                reason: "InternalError".to_owned(),
                message: format!(
                    "Internal error occurred: failed calling webhook \"{}\": {e}",
                    hook.name
                ),
                details: Some(json!({"causes": [{"message": format!(
                    "failed calling webhook \"{}\": {e}", hook.name)}]})),
            }),
        }
    }

    /// POSTs the review and returns the response body, over an idle connection to the same
    /// target when there is one; a reused connection the server has closed meanwhile is
    /// replaced by a fresh one (the request was never received), as Go's HTTP client does.
    async fn post(&self, hook: &Webhook, review: &Value) -> Result<Bytes, CallError> {
        let target = self.target(hook)?;
        let ca = match hook.client_config.ca_bundle.as_deref() {
            Some(b64) if !b64.is_empty() => STANDARD
                .decode(b64)
                .map_err(|_| CallError::Config("caBundle is not valid base64".to_owned()))?,
            _ => {
                return Err(CallError::Config(
                    "no caBundle to trust the webhook server".to_owned(),
                ));
            }
        };
        let url = target.url.clone();
        let wrap = |e: String| CallError::Post {
            url: url.clone(),
            error: e,
        };
        let body = Bytes::from(serde_json::to_vec(review).map_err(|e| wrap(e.to_string()))?);
        let key: ConnectionKey = (target.addr.clone(), target.server_name.clone(), ca.clone());
        let request = || {
            http::Request::post(&target.path_and_query)
                .header(http::header::HOST, &target.host_header)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::ACCEPT, "application/json")
                .body(Full::new(body.clone()))
                .map_err(|e| wrap(e.to_string()))
        };
        let (mut sender, response) = match self.idle_connection(&key) {
            Some(mut sender) => match sender.send_request(request()?).await {
                Ok(response) => (sender, response),
                Err(e) if e.is_canceled() || e.is_closed() || sender.is_closed() => {
                    let mut fresh = self.connect(&target, &ca).await?;
                    let response = fresh
                        .send_request(request()?)
                        .await
                        .map_err(|e| wrap(e.to_string()))?;
                    (fresh, response)
                }
                Err(e) => return Err(wrap(e.to_string())),
            },
            None => {
                let mut fresh = self.connect(&target, &ca).await?;
                let response = fresh
                    .send_request(request()?)
                    .await
                    .map_err(|e| wrap(e.to_string()))?;
                (fresh, response)
            }
        };
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| wrap(e.to_string()))?
            .to_bytes();
        // The connection is free again once the response is read.
        if sender.ready().await.is_ok() {
            self.keep_idle(key, sender);
        }
        if !status.is_success() {
            return Err(CallError::Status(status.as_u16()));
        }
        Ok(bytes)
    }

    fn idle_connection(
        &self,
        key: &ConnectionKey,
    ) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.idle.get_mut(key)?;
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn keep_idle(
        &self,
        key: ConnectionKey,
        sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    ) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.idle.entry(key).or_default();
        idle.retain(|s| !s.is_closed());
        if idle.len() < IDLE_PER_TARGET {
            idle.push(sender);
        }
    }

    /// The TLS configuration trusting `ca`, built once per bundle.
    fn tls_config(&self, ca: &[u8]) -> Result<Arc<rustls::ClientConfig>, CallError> {
        if let Some(config) = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tls
            .get(ca)
        {
            return Ok(config.clone());
        }
        let config =
            tls::client_config_from_pem(ca).map_err(|e| CallError::Config(e.to_string()))?;
        self.pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tls
            .insert(ca.to_vec(), config.clone());
        Ok(config)
    }

    /// Dials, verifies the server against `ca` and starts an HTTP/1.1 connection.
    async fn connect(
        &self,
        target: &Target,
        ca: &[u8],
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, CallError> {
        let tls_config = self.tls_config(ca)?;
        let server_name = rustls::pki_types::ServerName::try_from(target.server_name.clone())
            .map_err(|_| {
                CallError::Config(format!("invalid server name {}", target.server_name))
            })?;
        let wrap = |e: String| CallError::Post {
            url: target.url.clone(),
            error: e,
        };
        let tcp = tokio::net::TcpStream::connect(target.addr.as_str())
            .await
            .map_err(|e| wrap(format!("dial tcp {}: {e}", target.addr)))?;
        let tls = tokio_rustls::TlsConnector::from(tls_config)
            .connect(server_name, tcp)
            .await
            .map_err(|e| wrap(format!("tls: {e}")))?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| wrap(e.to_string()))?;
        // The connection task ends when the server closes it or the last sender is dropped.
        tokio::spawn(conn);
        Ok(sender)
    }

    fn target(&self, hook: &Webhook) -> Result<Target, CallError> {
        let cc = &hook.client_config;
        if let Some(url) = cc.url.as_deref() {
            return Target::from_url(url);
        }
        let Some(svc) = &cc.service else {
            return Err(CallError::Config(
                "clientConfig has neither url nor service".to_owned(),
            ));
        };
        let port = svc.port.unwrap_or(443);
        let host = format!("{}.{}.svc", svc.name, svc.namespace);
        let path = svc.path.clone().unwrap_or_else(|| "/".to_owned());
        let url = format!("https://{host}:{port}{path}");
        let addr = self
            .resolve_service(&svc.namespace, &svc.name, port)
            .ok_or_else(|| CallError::Post {
                url: url.clone(),
                error: format!(
                    "service \"{}/{}:{port}\" has no endpoint",
                    svc.namespace, svc.name
                ),
            })?;
        Ok(Target {
            addr: addr.to_string(),
            server_name: host.clone(),
            host_header: format!("{host}:{port}"),
            path_and_query: path,
            url,
        })
    }
}

/// Where one call goes.
struct Target {
    addr: String,
    server_name: String,
    host_header: String,
    path_and_query: String,
    url: String,
}

impl Target {
    fn from_url(url: &str) -> Result<Self, CallError> {
        let bad = || CallError::Config(format!("invalid webhook url {url:?}"));
        let rest = url.strip_prefix("https://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(bad());
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                (h, p.parse::<u16>().map_err(|_| bad())?)
            }
            _ => (authority, 443),
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Self {
            addr: if bare.contains(':') {
                format!("[{bare}]:{port}")
            } else {
                format!("{bare}:{port}")
            },
            server_name: bare.to_owned(),
            host_header: authority.to_owned(),
            path_and_query: path.to_owned(),
            url: url.to_owned(),
        })
    }
}

/// Why a webhook call produced no usable answer.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("failed to call webhook: {0}")]
    Config(String),
    #[error("failed to call webhook: Post \"{url}\": {error}")]
    Post { url: String, error: String },
    #[error("failed to call webhook: the server responded with status {0}")]
    Status(u16),
    #[error("failed to call webhook: context deadline exceeded after {0:?}")]
    Timeout(Duration),
    #[error("received invalid webhook response: {0}")]
    Invalid(String),
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ServiceRef {
    namespace: String,
    name: String,
    path: Option<String>,
    port: Option<u16>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ClientConfig {
    url: Option<String>,
    service: Option<ServiceRef>,
    ca_bundle: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RuleWithOperations {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    scope: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "camelCase")]
struct LabelSelector {
    match_labels: BTreeMap<String, String>,
    match_expressions: Vec<SelectorRequirement>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct SelectorRequirement {
    key: String,
    operator: String,
    values: Vec<String>,
}

impl LabelSelector {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|req| {
                let value = labels.get(&req.key);
                match req.operator.as_str() {
                    "In" => value.is_some_and(|v| req.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !req.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    // An unknown operator is invalid; the real server refuses such configs.
                    _ => false,
                }
            })
    }
}

fn default_failure_policy() -> String {
    "Fail".to_owned()
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MatchCondition {
    name: String,
    expression: String,
}

/// Whether `hook`'s `matchConditions` let it be called for `request` (`review_request` is the
/// AdmissionRequest as the webhook would receive it, bound to the CEL variable `request`).
fn match_conditions_call(
    hook: &Webhook,
    request: &AdmissionRequest,
    review_request: &Value,
) -> Result<bool, Rejection> {
    let null = Value::Null;
    let vars = [
        ("object", request.object.as_ref().unwrap_or(&null)),
        ("oldObject", request.old_object.as_ref().unwrap_or(&null)),
        ("request", review_request),
    ];
    let mut first_error = None;
    for condition in &hook.match_conditions {
        match crate::cel::holds_with(&condition.expression, &vars) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                let detail = match e {
                    crate::cel::CelError::Runtime(m) => m,
                    crate::cel::CelError::Unsupported(m) => {
                        format!("kube-sim cannot evaluate this expression ({m})")
                    }
                };
                first_error.get_or_insert((condition.name.clone(), detail));
            }
        }
    }
    match first_error {
        None => Ok(true),
        Some(_) if hook.failure_policy == "Ignore" => Ok(false),
        Some((name, detail)) => {
            let resource = if request.group.is_empty() {
                request.resource.clone()
            } else {
                format!("{}.{}", request.resource, request.group)
            };
            Err(Rejection {
                code: 403,
                reason: "Forbidden".to_owned(),
                message: format!(
                    "{resource} \"{}\" is forbidden: failed to evaluate match condition {name:?} of webhook {:?}: {detail}",
                    request.name, hook.name
                ),
                details: None,
            })
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Webhook {
    name: String,
    #[serde(default)]
    client_config: ClientConfig,
    #[serde(default)]
    rules: Vec<RuleWithOperations>,
    #[serde(default = "default_failure_policy")]
    failure_policy: String,
    #[serde(default)]
    namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    object_selector: Option<LabelSelector>,
    #[serde(default)]
    side_effects: String,
    #[serde(default)]
    timeout_seconds: Option<u32>,
    #[serde(default)]
    match_conditions: Vec<MatchCondition>,
}

fn webhook_applies(hook: &Webhook, req: &AdmissionRequest) -> bool {
    hook.rules.iter().any(|r| rule_matches(r, req))
        && namespace_selector_matches(hook.namespace_selector.as_ref(), req)
        && object_selector_matches(hook.object_selector.as_ref(), req)
}

fn rule_matches(rule: &RuleWithOperations, req: &AdmissionRequest) -> bool {
    let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
    let scope_ok = match rule.scope.as_deref() {
        Some("Cluster") => !req.namespaced,
        Some("Namespaced") => req.namespaced,
        _ => true,
    };
    scope_ok
        && any(&rule.operations, req.operation.as_str())
        && any(&rule.api_groups, &req.group)
        && any(&rule.api_versions, &req.version)
        && rule
            .resources
            .iter()
            .any(|r| resource_matches(r, &req.resource, &req.subresource))
}

/// Webhook resource patterns: `*` = every resource but no subresource, `*/*` = everything,
/// `res/*` = every subresource of `res`, `*/sub` = `sub` of every resource.
fn resource_matches(pattern: &str, resource: &str, subresource: &str) -> bool {
    let (pr, ps) = pattern.split_once('/').unwrap_or((pattern, ""));
    (pr == "*" || pr == resource)
        && (ps == subresource || (ps == "*" && !subresource.is_empty()) || pattern == "*/*")
}

fn labels_of(obj: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let labels = obj?.pointer("/metadata/labels")?.as_object()?;
    Some(
        labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
    )
}

fn namespace_selector_matches(selector: Option<&LabelSelector>, req: &AdmissionRequest) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let labels = if req.group.is_empty() && req.resource == "namespaces" {
        let mut l = labels_of(req.object.as_ref().or(req.old_object.as_ref())).unwrap_or_default();
        l.insert("kubernetes.io/metadata.name".to_owned(), req.name.clone());
        l
    } else if !req.namespaced || req.namespace.is_empty() {
        // Other cluster-scoped objects are never skipped by a namespace selector.
        return true;
    } else {
        let mut l = req.namespace_labels.clone().unwrap_or_default();
        l.insert(
            "kubernetes.io/metadata.name".to_owned(),
            req.namespace.clone(),
        );
        l
    };
    selector.matches(&labels)
}

fn object_selector_matches(selector: Option<&LabelSelector>, req: &AdmissionRequest) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    [req.object.as_ref(), req.old_object.as_ref()]
        .into_iter()
        .flatten()
        .any(|o| selector.matches(&labels_of(Some(o)).unwrap_or_default()))
}

/// Builds the `admission.k8s.io/v1` AdmissionReview sent to a webhook.
fn review_for(req: &AdmissionRequest, uid: &str) -> Value {
    let kind = json!({"group": req.group, "version": req.version, "kind": req.kind});
    let resource = json!({"group": req.group, "version": req.version, "resource": req.resource});
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": req.name,
        "operation": req.operation.as_str(),
        "userInfo": {"username": req.user.username, "groups": req.user.groups},
        "object": req.object,
        "oldObject": req.old_object,
        "dryRun": req.dry_run,
    });
    if !req.user.uid.is_empty() {
        request["userInfo"]["uid"] = json!(req.user.uid);
    }
    if !req.subresource.is_empty() {
        request["subResource"] = json!(req.subresource);
        request["requestSubResource"] = json!(req.subresource);
    }
    if !req.namespace.is_empty() {
        request["namespace"] = json!(req.namespace);
    }
    if let Some(kind) = req.operation.options_kind() {
        let mut options = req.options.clone().unwrap_or_else(|| json!({}));
        if let Some(map) = options.as_object_mut() {
            map.insert("kind".to_owned(), json!(kind));
            map.insert("apiVersion".to_owned(), json!("meta.k8s.io/v1"));
        }
        request["options"] = options;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ReviewResponse {
    uid: String,
    allowed: bool,
    status: Option<Value>,
    warnings: Vec<String>,
}

fn parse_response(body: &[u8], uid: &str) -> Result<ReviewResponse, CallError> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| CallError::Invalid(format!("decoding AdmissionReview: {e}")))?;
    if review.get("apiVersion").and_then(Value::as_str) != Some("admission.k8s.io/v1")
        || review.get("kind").and_then(Value::as_str) != Some("AdmissionReview")
    {
        return Err(CallError::Invalid(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview".to_owned(),
        ));
    }
    let response = review
        .get("response")
        .cloned()
        .ok_or_else(|| CallError::Invalid("webhook response was absent".to_owned()))?;
    let response: ReviewResponse = serde_json::from_value(response)
        .map_err(|e| CallError::Invalid(format!("decoding response: {e}")))?;
    if response.uid != uid {
        return Err(CallError::Invalid(format!(
            "expected response.uid=\"{uid}\", got \"{}\"",
            response.uid
        )));
    }
    Ok(response)
}

/// The rejection for a webhook that answered `allowed: false` with `status`.
fn denied(name: &str, status: Option<&Value>) -> Rejection {
    let field = |k: &str| {
        status
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let message = field("message");
    let reason = field("reason");
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let by = format!("admission webhook \"{name}\" denied the request");
    let message = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    Rejection {
        code,
        reason,
        message,
        details: status.and_then(|s| s.get("details")).cloned(),
    }
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(op: Operation, resource: &str, ns: &str, labels: Value) -> AdmissionRequest {
        AdmissionRequest {
            operation: op,
            group: "omni.texashpc.com".into(),
            version: "v1alpha1".into(),
            resource: resource.into(),
            subresource: String::new(),
            kind: "OmniCluster".into(),
            namespaced: true,
            name: "c".into(),
            namespace: ns.into(),
            object: Some(json!({"metadata": {"name": "c", "labels": labels}})),
            old_object: None,
            dry_run: false,
            options: None,
            user: ReviewUser {
                username: "alice".into(),
                uid: String::new(),
                groups: vec!["system:authenticated".into()],
            },
            namespace_labels: Some(BTreeMap::from([("team".to_owned(), "a".to_owned())])),
        }
    }

    fn hook(extra: Value) -> Webhook {
        let mut base = json!({
            "name": "v.example.com",
            "clientConfig": {"url": "https://127.0.0.1:1/x"},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["omni.texashpc.com"],
                       "apiVersions": ["v1alpha1"], "resources": ["omniclusters"]}]
        });
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn match_conditions_skip_call_or_refuse_as_the_failure_policy_says() {
        let spec_changed = json!({"matchConditions": [{"name": "spec-changed",
            "expression": "request.operation != 'UPDATE' || object.spec != oldObject.spec"}]});
        let mut update = request(Operation::Update, "omniclusters", "a", json!({}));
        update.object = Some(json!({"metadata": {"finalizers": []}, "spec": {"x": 1}}));
        update.old_object = Some(json!({"metadata": {"finalizers": ["f"]}, "spec": {"x": 1}}));
        let review = review_for(&update, "");
        let h = hook(spec_changed.clone());
        assert_eq!(
            match_conditions_call(&h, &update, &review["request"]),
            Ok(false)
        );
        update.object = Some(json!({"metadata": {}, "spec": {"x": 2}}));
        let review = review_for(&update, "");
        assert_eq!(
            match_conditions_call(&h, &update, &review["request"]),
            Ok(true)
        );
        let create = request(Operation::Create, "omniclusters", "a", json!({}));
        let review = review_for(&create, "");
        assert_eq!(
            match_conditions_call(&h, &create, &review["request"]),
            Ok(true)
        );

        // An expression that fails to evaluate: refused under Fail, skipped under Ignore.
        let broken = json!({"matchConditions": [{"name": "broken",
            "expression": "object.nothing.here == 1"}]});
        let err = match_conditions_call(&hook(broken.clone()), &create, &review["request"])
            .expect_err("Fail refuses");
        assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
        assert!(err.message.contains("\"broken\""), "{}", err.message);
        let mut ignore = broken;
        ignore["failurePolicy"] = json!("Ignore");
        assert_eq!(
            match_conditions_call(&hook(ignore), &create, &review["request"]),
            Ok(false)
        );
        // A false condition wins over an error in another one.
        let mixed = json!({"matchConditions": [
            {"name": "broken", "expression": "object.nothing.here == 1"},
            {"name": "never", "expression": "request.operation == 'DELETE'"}]});
        assert_eq!(
            match_conditions_call(&hook(mixed), &create, &review["request"]),
            Ok(false)
        );
    }

    #[test]
    fn rules_match_operation_group_version_and_resource() {
        let h = hook(json!({}));
        assert!(webhook_applies(
            &h,
            &request(Operation::Create, "omniclusters", "a", json!({}))
        ));
        assert!(!webhook_applies(
            &h,
            &request(Operation::Delete, "omniclusters", "a", json!({}))
        ));
        assert!(!webhook_applies(
            &h,
            &request(Operation::Create, "omniworkers", "a", json!({}))
        ));
        let mut other_version = request(Operation::Create, "omniclusters", "a", json!({}));
        other_version.version = "v1".into();
        assert!(!webhook_applies(&h, &other_version));
    }

    #[test]
    fn resource_patterns_follow_the_subresource_rules() {
        assert!(resource_matches("*", "pods", ""));
        assert!(!resource_matches("*", "pods", "status"));
        assert!(resource_matches("*/*", "pods", "status"));
        assert!(resource_matches("*/*", "pods", ""));
        assert!(resource_matches("pods/*", "pods", "log"));
        assert!(!resource_matches("pods/*", "pods", ""));
        assert!(resource_matches("*/status", "x", "status"));
        assert!(!resource_matches("*/status", "x", ""));
        assert!(resource_matches("pods/status", "pods", "status"));
        assert!(!resource_matches("pods", "pods", "status"));
    }

    #[test]
    fn scope_restricts_namespaced_and_cluster_resources() {
        let cluster_only = hook(json!({"rules": [{"operations": ["*"], "apiGroups": ["*"],
            "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"}]}));
        let mut r = request(Operation::Create, "omniclusters", "a", json!({}));
        assert!(!webhook_applies(&cluster_only, &r));
        r.namespaced = false;
        r.namespace.clear();
        assert!(webhook_applies(&cluster_only, &r));
    }

    #[test]
    fn namespace_selector_sees_stored_labels_and_the_metadata_name_label() {
        let by_team = hook(json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}));
        let by_name = hook(json!({"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]}]}}));
        let r = request(Operation::Create, "omniclusters", "a", json!({}));
        assert!(webhook_applies(&by_team, &r));
        assert!(webhook_applies(&by_name, &r));
        let mut other = request(Operation::Create, "omniclusters", "b", json!({}));
        other.namespace_labels = None;
        assert!(!webhook_applies(&by_team, &other));
        assert!(!webhook_applies(&by_name, &other));
    }

    #[test]
    fn namespace_selector_never_skips_other_cluster_scoped_objects() {
        let h = hook(
            json!({"namespaceSelector": {"matchLabels": {"team": "zzz"}},
            "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]}),
        );
        let mut r = request(Operation::Create, "clusterthings", "", json!({}));
        r.namespaced = false;
        assert!(webhook_applies(&h, &r));
        // A Namespace is matched on its own labels.
        let mut ns = request(Operation::Create, "namespaces", "", json!({"team": "zzz"}));
        ns.group.clear();
        ns.namespaced = false;
        assert!(webhook_applies(&h, &ns));
        ns.object = Some(json!({"metadata": {"labels": {}}}));
        assert!(!webhook_applies(&h, &ns));
    }

    #[test]
    fn object_selector_matches_new_or_old_labels() {
        let h = hook(json!({"objectSelector": {"matchExpressions": [
            {"key": "validate", "operator": "NotIn", "values": ["skip"]}]}}));
        assert!(webhook_applies(
            &h,
            &request(Operation::Create, "omniclusters", "a", json!({}))
        ));
        let skipped = request(
            Operation::Create,
            "omniclusters",
            "a",
            json!({"validate": "skip"}),
        );
        assert!(!webhook_applies(&h, &skipped));
        let mut update = skipped.clone();
        update.operation = Operation::Update;
        update.old_object = Some(json!({"metadata": {"labels": {}}}));
        assert!(webhook_applies(&h, &update), "the old object still matches");
        let exists = hook(json!({"objectSelector": {"matchExpressions": [
            {"key": "x", "operator": "Exists"}]}}));
        assert!(!webhook_applies(
            &exists,
            &request(Operation::Create, "omniclusters", "a", json!({}))
        ));
    }

    #[test]
    fn review_carries_the_request_fields_webhooks_read() {
        let mut r = request(Operation::Update, "omniclusters", "a", json!({"x": "y"}));
        r.old_object = Some(json!({"metadata": {"name": "c"}}));
        r.subresource = "status".into();
        r.dry_run = true;
        r.options = Some(json!({"fieldManager": "kubectl"}));
        let v = review_for(&r, "u-1");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        let q = &v["request"];
        assert_eq!(q["uid"], "u-1");
        assert_eq!(q["operation"], "UPDATE");
        assert_eq!(
            q["kind"],
            json!({"group": "omni.texashpc.com", "version": "v1alpha1", "kind": "OmniCluster"})
        );
        assert_eq!(q["resource"]["resource"], "omniclusters");
        assert_eq!(q["subResource"], "status");
        assert_eq!(q["namespace"], "a");
        assert_eq!(q["name"], "c");
        assert_eq!(q["dryRun"], true);
        assert_eq!(q["userInfo"]["username"], "alice");
        assert_eq!(q["object"]["metadata"]["labels"]["x"], "y");
        assert_eq!(q["oldObject"]["metadata"]["name"], "c");
        assert_eq!(q["options"]["kind"], "UpdateOptions");
        assert_eq!(q["options"]["fieldManager"], "kubectl");
    }

    #[test]
    fn denial_shapes_follow_the_api_server() {
        let d = denied(
            "v.example.com",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "no"})),
        );
        assert_eq!(d.code, 403);
        assert_eq!(d.reason, "Forbidden");
        assert_eq!(
            d.message,
            "admission webhook \"v.example.com\" denied the request: no"
        );
        let d = denied("w", Some(&json!({"code": 200})));
        assert_eq!(d.code, 400);
        assert_eq!(
            d.message,
            "admission webhook \"w\" denied the request without explanation"
        );
        let d = denied("w", None);
        assert_eq!((d.code, d.reason.as_str()), (400, ""));
        let d = denied("w", Some(&json!({"reason": "Because"})));
        assert_eq!(
            d.message,
            "admission webhook \"w\" denied the request: Because"
        );
        assert_eq!(d.to_status()["status"], "Failure");
    }

    #[test]
    fn responses_must_echo_the_uid_and_be_an_admission_review() {
        let ok = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"1","allowed":true,"warnings":["w"]}}"#;
        let r = parse_response(ok, "1").unwrap();
        assert!(r.allowed);
        assert_eq!(r.warnings, vec!["w"]);
        assert!(parse_response(ok, "2").is_err());
        assert!(parse_response(br#"{"apiVersion":"v1","kind":"Status"}"#, "1").is_err());
        assert!(parse_response(b"nope", "1").is_err());
    }

    #[test]
    fn urls_split_into_address_server_name_and_path() {
        let t = Target::from_url("https://127.0.0.1:9443/validate?x=1").unwrap();
        assert_eq!(
            (
                t.addr.as_str(),
                t.server_name.as_str(),
                t.path_and_query.as_str()
            ),
            ("127.0.0.1:9443", "127.0.0.1", "/validate?x=1")
        );
        let t = Target::from_url("https://localhost").unwrap();
        assert_eq!(
            (t.addr.as_str(), t.path_and_query.as_str()),
            ("localhost:443", "/")
        );
        let t = Target::from_url("https://[::1]:8443/v").unwrap();
        assert_eq!(
            (t.addr.as_str(), t.server_name.as_str()),
            ("[::1]:8443", "::1")
        );
        assert!(Target::from_url("http://127.0.0.1/").is_err());
    }

    #[tokio::test]
    async fn webhook_configuration_writes_are_never_sent_to_webhooks() {
        let config = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "all.example.com", "clientConfig": {"url": "https://127.0.0.1:1/"},
            "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]}]});
        let mut r = request(
            Operation::Delete,
            "validatingwebhookconfigurations",
            "",
            json!({}),
        );
        r.group = ADMISSIONREGISTRATION_GROUP.into();
        r.version = "v1".into();
        r.namespaced = false;
        let d = WebhookDispatcher::new();
        assert_eq!(d.admit(std::slice::from_ref(&config), &r).await, Ok(vec![]));
        // The same unreachable webhook fails an ordinary write (failurePolicy defaults to Fail).
        let mut pod = request(Operation::Create, "pods", "a", json!({}));
        pod.group.clear();
        pod.version = "v1".into();
        let err = d.admit(&[config], &pod).await.unwrap_err();
        assert_eq!(err.code, 500);
        assert!(
            err.message
                .starts_with("Internal error occurred: failed calling webhook \"all.example.com\""),
            "{}",
            err.message
        );
    }
}
