//! The client against a scripted in-test gRPC server on loopback: what goes over the wire (signed
//! headers on unary and streaming calls, the kubeconfig `context`), how answers are decoded
//! (watch markers, tombstones, ERRORED), the Teardown fallback for old servers, client-side
//! deadlines, the TLS paths, and that nothing secret reaches the logs.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::{Stream, StreamExt};
use omni_client::auth::{generate_key, verify_signature};
use omni_client::proto::cosi::resource::{
    self as cosi, Event, EventType, Metadata, Resource, state_server,
};
use omni_client::proto::management::{self as mgmt, management_service_server};
use omni_client::resources::{NAMESPACE, TypedResource};
use omni_client::state::{WatchEvent, WatchTarget, is_tombstone};
use omni_client::{Client, ClientConfig, ManagementError, ServiceAccountKey, StateError};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// One call as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: &'static str,
    timestamp: String,
    payload: String,
    signature: String,
    context: Option<String>,
}

#[derive(Default)]
struct Fake {
    seen: Mutex<Vec<Seen>>,
    teardown_calls: AtomicUsize,
    /// Stored resources by id (the teardown fallback reads and updates them).
    store: Mutex<HashMap<String, Resource>>,
    updates: Mutex<Vec<(Resource, cosi::UpdateOptions)>>,
}

impl Fake {
    fn record<T>(&self, path: &'static str, request: &Request<T>) {
        let md = request.metadata();
        let get = |k: &str| md.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
        self.seen.lock().unwrap().push(Seen {
            path,
            timestamp: get("x-sidero-timestamp").unwrap_or_default(),
            payload: get("x-sidero-payload").unwrap_or_default(),
            signature: get("x-sidero-signature").unwrap_or_default(),
            context: get("context"),
        });
    }
}

fn resource(id: &str, version: &str, finalizers: &[&str]) -> Resource {
    Resource {
        metadata: Some(Metadata {
            namespace: NAMESPACE.into(),
            r#type: "Clusters.omni.sidero.dev".into(),
            id: id.into(),
            version: version.into(),
            phase: "running".into(),
            finalizers: finalizers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
        spec: Some(cosi::Spec::default()),
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

struct StateSvc(Arc<Fake>);

#[tonic::async_trait]
impl state_server::State for StateSvc {
    async fn get(
        &self,
        request: Request<cosi::GetRequest>,
    ) -> Result<Response<cosi::GetResponse>, Status> {
        self.0.record("/cosi.resource.State/Get", &request);
        let id = request.into_inner().id;
        if id == "stall" {
            // Never answers: only the client's own deadline ends the call.
            futures::future::pending::<()>().await;
        }
        match self.0.store.lock().unwrap().get(&id) {
            Some(r) => Ok(Response::new(cosi::GetResponse {
                resource: Some(r.clone()),
            })),
            None => Err(Status::not_found(format!(
                "resource Clusters.omni.sidero.dev(default/{id}@undefined) doesn't exist"
            ))),
        }
    }

    type ListStream = BoxStream<cosi::ListResponse>;

    async fn list(
        &self,
        request: Request<cosi::ListRequest>,
    ) -> Result<Response<Self::ListStream>, Status> {
        self.0.record("/cosi.resource.State/List", &request);
        let mut items: Vec<_> = self.0.store.lock().unwrap().values().cloned().collect();
        items.sort_by(|a, b| {
            a.metadata
                .as_ref()
                .map(|m| m.id.clone())
                .cmp(&b.metadata.as_ref().map(|m| m.id.clone()))
        });
        let stream = futures::stream::iter(
            items
                .into_iter()
                .map(|r| Ok(cosi::ListResponse { resource: Some(r) })),
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn create(
        &self,
        request: Request<cosi::CreateRequest>,
    ) -> Result<Response<cosi::CreateResponse>, Status> {
        self.0.record("/cosi.resource.State/Create", &request);
        Err(Status::already_exists("resource already exists"))
    }

    async fn update(
        &self,
        request: Request<cosi::UpdateRequest>,
    ) -> Result<Response<cosi::UpdateResponse>, Status> {
        self.0.record("/cosi.resource.State/Update", &request);
        let inner = request.into_inner();
        let mut new = inner.new_resource.unwrap_or_default();
        let options = inner.options.unwrap_or_default();
        self.0.updates.lock().unwrap().push((new.clone(), options));
        let id = new
            .metadata
            .as_ref()
            .map(|m| m.id.clone())
            .unwrap_or_default();
        let mut store = self.0.store.lock().unwrap();
        let stored = store
            .get(&id)
            .cloned()
            .ok_or_else(|| Status::not_found("gone"))?;
        let stored_version = stored.metadata.as_ref().unwrap().version.clone();
        if new.metadata.as_ref().unwrap().version != stored_version {
            return Err(Status::failed_precondition("update conflict"));
        }
        let next: u64 = stored_version.parse::<u64>().unwrap() + 1;
        new.metadata.as_mut().unwrap().version = next.to_string();
        store.insert(id, new.clone());
        Ok(Response::new(cosi::UpdateResponse {
            resource: Some(new),
        }))
    }

    async fn destroy(
        &self,
        request: Request<cosi::DestroyRequest>,
    ) -> Result<Response<cosi::DestroyResponse>, Status> {
        self.0.record("/cosi.resource.State/Destroy", &request);
        Err(Status::failed_precondition(
            "resource has pending finalizers [a]",
        ))
    }

    type WatchStream = BoxStream<cosi::WatchResponse>;

    async fn watch(
        &self,
        request: Request<cosi::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.0.record("/cosi.resource.State/Watch", &request);
        let req = request.into_inner();
        if req.api_version != 1 {
            return Err(Status::invalid_argument("test server wants api_version 1"));
        }
        let event = |t: EventType, r: Option<Resource>, error: Option<&str>| cosi::WatchResponse {
            event: vec![Event {
                resource: r,
                event_type: t as i32,
                old: None,
                error: error.map(str::to_owned),
                bookmark: None,
            }],
        };
        let mut tombstone = resource("ghost", "undefined", &[]);
        tombstone.spec = Some(cosi::Spec::default());
        let responses = vec![
            cosi::WatchResponse { event: vec![] },
            event(EventType::Created, Some(resource("a", "1", &[])), None),
            event(EventType::Noop, None, None),
            event(EventType::Destroyed, Some(tombstone), None),
            event(
                EventType::Bootstrapped,
                Some(resource("", "undefined", &[])),
                None,
            ),
            event(EventType::Errored, None, Some("buffer overrun")),
            // Never delivered to the caller: ERRORED ends the stream.
            event(EventType::Created, Some(resource("b", "1", &[])), None),
        ];
        Ok(Response::new(Box::pin(futures::stream::iter(
            responses.into_iter().map(Ok),
        ))))
    }

    async fn teardown(
        &self,
        request: Request<cosi::TeardownRequest>,
    ) -> Result<Response<cosi::TeardownResponse>, Status> {
        self.0.record("/cosi.resource.State/Teardown", &request);
        self.0.teardown_calls.fetch_add(1, Ordering::SeqCst);
        Err(Status::unimplemented("unknown method Teardown"))
    }

    async fn teardown_and_destroy(
        &self,
        _request: Request<cosi::TeardownAndDestroyRequest>,
    ) -> Result<Response<cosi::TeardownAndDestroyResponse>, Status> {
        Err(Status::unimplemented("not used"))
    }
}

struct MgmtSvc(Arc<Fake>);

#[tonic::async_trait]
impl management_service_server::ManagementService for MgmtSvc {
    async fn kubeconfig(
        &self,
        request: Request<mgmt::KubeconfigRequest>,
    ) -> Result<Response<mgmt::KubeconfigResponse>, Status> {
        self.0
            .record("/management.ManagementService/Kubeconfig", &request);
        let cluster = request
            .metadata()
            .get("context")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Status::invalid_argument("cluster name is not in context"))?;
        let req = request.into_inner();
        if cluster == "empty" {
            return Ok(Response::new(mgmt::KubeconfigResponse {
                kubeconfig: vec![],
            }));
        }
        let ttl = req.service_account_ttl.unwrap_or_default();
        let body = format!(
            "cluster={cluster} sa={} ttl={} user={} groups={}",
            req.service_account,
            ttl.seconds,
            req.service_account_user,
            req.service_account_groups.join(",")
        );
        Ok(Response::new(mgmt::KubeconfigResponse {
            kubeconfig: body.into_bytes(),
        }))
    }

    async fn create_service_account(
        &self,
        request: Request<mgmt::CreateServiceAccountRequest>,
    ) -> Result<Response<mgmt::CreateServiceAccountResponse>, Status> {
        self.0.record(
            "/management.ManagementService/CreateServiceAccount",
            &request,
        );
        let req = request.into_inner();
        Ok(Response::new(mgmt::CreateServiceAccountResponse {
            public_key_id: format!("{}:{}:{}", req.name, req.use_user_role, req.role),
        }))
    }
}

struct Harness {
    fake: Arc<Fake>,
    addr: std::net::SocketAddr,
    key: ServiceAccountKey,
    public: String,
}

async fn start(tls: Option<tonic::transport::ServerTlsConfig>) -> Harness {
    let fake = Arc::new(Fake::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).unwrap();
    }
    let router = builder
        .add_service(state_server::StateServer::new(StateSvc(fake.clone())))
        .add_service(management_service_server::ManagementServiceServer::new(
            MgmtSvc(fake.clone()),
        ));
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    let (key, public, _) = generate_key("wire-test", Duration::from_secs(3600)).unwrap();
    Harness {
        fake,
        addr,
        key,
        public,
    }
}

impl Harness {
    fn client(&self, scheme: &str, timeout: Duration, insecure: bool) -> Client {
        let mut config = ClientConfig::new(
            format!("{scheme}://{}/ignored/path", self.addr),
            self.key.clone(),
        );
        config.request_timeout = timeout;
        config.insecure_skip_tls_verify = insecure;
        Client::new(config).unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        self.fake.seen.lock().unwrap().clone()
    }
}

/// Every call the server saw carries a valid `siderov1` signature over its own method.
fn assert_all_signed(h: &Harness) {
    let seen = h.seen();
    assert!(!seen.is_empty());
    for call in seen {
        let payload: serde_json::Value = serde_json::from_str(&call.payload)
            .unwrap_or_else(|e| panic!("{}: payload not JSON: {e}", call.path));
        assert_eq!(payload["method"], call.path);
        assert_eq!(
            payload["headers"]["x-sidero-timestamp"][0],
            call.timestamp.as_str()
        );
        assert_eq!(
            payload["headers"]["context"],
            match &call.context {
                Some(c) => serde_json::json!([c]),
                None => serde_json::Value::Null,
            }
        );
        let fields: Vec<&str> = call.signature.split(' ').collect();
        assert_eq!(fields.len(), 4, "{}", call.signature);
        assert_eq!(fields[0], "siderov1");
        assert_eq!(fields[1], "wire-test");
        assert_eq!(fields[2], h.key.fingerprint());
        let sig = STANDARD.decode(fields[3]).unwrap();
        verify_signature(&h.public, call.payload.as_bytes(), &sig)
            .unwrap_or_else(|e| panic!("{}: {e}", call.path));
    }
}

#[tokio::test]
async fn unary_and_streaming_calls_are_signed_and_errors_are_typed() {
    let h = start(None).await;
    h.fake
        .store
        .lock()
        .unwrap()
        .insert("a".into(), resource("a", "3", &[]));
    let client = h.client("http", Duration::from_secs(30), false);
    assert_eq!(client.endpoint().display(), format!("grpc://{}", h.addr));
    let state = client.state();

    let got = state
        .get(NAMESPACE, "Clusters.omni.sidero.dev", "a")
        .await
        .unwrap();
    assert_eq!(got.metadata.unwrap().version, "3");
    let missing = state
        .get(NAMESPACE, "Clusters.omni.sidero.dev", "nope")
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
    assert_eq!(
        state
            .get_optional(NAMESPACE, "Clusters.omni.sidero.dev", "nope")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        state
            .list(NAMESPACE, "Clusters.omni.sidero.dev", &[])
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(client.ping().await.unwrap(), format!("grpc://{}", h.addr));

    let create = state
        .create(
            TypedResource::new("a", omni_client::proto::specs::ClusterSpec::default())
                .into_resource(),
            "",
        )
        .await
        .unwrap_err();
    assert!(matches!(create, StateError::AlreadyExists(_)), "{create:?}");
    let destroy = state
        .destroy(NAMESPACE, "Clusters.omni.sidero.dev", "a", "")
        .await
        .unwrap_err();
    assert!(matches!(destroy, StateError::Conflict(_)), "{destroy:?}");

    let mut stale = resource("a", "2", &[]);
    stale
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .insert("x".into(), "y".into());
    let conflict = state.update(stale, "", Some("running")).await.unwrap_err();
    assert!(matches!(conflict, StateError::Conflict(_)), "{conflict:?}");
    assert!(conflict.is_retryable());
    let (_, options) = h.fake.updates.lock().unwrap().last().cloned().unwrap();
    assert_eq!(options.expected_phase.as_deref(), Some("running"));

    let _stream = state
        .watch(&WatchTarget::kind(
            NAMESPACE,
            "Clusters.omni.sidero.dev",
            vec![],
        ))
        .await
        .unwrap();

    let paths: Vec<&str> = h.seen().iter().map(|s| s.path).collect();
    for expected in ["Get", "List", "Create", "Destroy", "Update", "Watch"] {
        assert!(
            paths.contains(&format!("/cosi.resource.State/{expected}").as_str()),
            "{expected} not seen in {paths:?}"
        );
    }
    assert_all_signed(&h);
}

#[tokio::test]
async fn watch_skips_the_ready_marker_and_noops_and_ends_after_errored() {
    let h = start(None).await;
    let client = h.client("grpc", Duration::from_secs(30), false);
    let mut stream = client
        .state()
        .watch(&WatchTarget::kind(
            NAMESPACE,
            "Clusters.omni.sidero.dev",
            vec![],
        ))
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = stream.next().await {
        got.push(item);
    }
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        matches!(&got[0], Ok(WatchEvent::Created(r)) if r.metadata.as_ref().unwrap().id == "a")
    );
    assert!(matches!(&got[1], Ok(WatchEvent::Destroyed(r)) if is_tombstone(r)));
    assert!(matches!(&got[2], Ok(WatchEvent::Bootstrapped)));
    assert_eq!(
        got[3],
        Err(StateError::WatchFailed("buffer overrun".into()))
    );
}

#[tokio::test]
async fn teardown_falls_back_to_update_once_unimplemented_is_seen() {
    let h = start(None).await;
    h.fake
        .store
        .lock()
        .unwrap()
        .insert("a".into(), resource("a", "5", &["ClusterController"]));
    h.fake
        .store
        .lock()
        .unwrap()
        .insert("b".into(), resource("b", "1", &[]));
    let client = h.client("http", Duration::from_secs(30), false);
    let state = client.state();
    let ready = state
        .teardown(NAMESPACE, "Clusters.omni.sidero.dev", "a", "")
        .await
        .unwrap();
    assert!(!ready, "finalizers remain");
    let stored = h.fake.store.lock().unwrap()["a"].clone();
    let meta = stored.metadata.unwrap();
    assert_eq!(meta.phase, "tearingDown");
    assert_eq!(meta.finalizers, ["ClusterController"]);
    let (_, options) = h.fake.updates.lock().unwrap()[0].clone();
    assert_eq!(options.expected_phase.as_deref(), Some("running"));

    // Already tearing down: no second update, readiness from finalizers.
    assert!(
        !state
            .teardown(NAMESPACE, "Clusters.omni.sidero.dev", "a", "")
            .await
            .unwrap()
    );
    assert_eq!(h.fake.updates.lock().unwrap().len(), 1);
    // The fallback is remembered by every clone of the client.
    assert!(
        client
            .clone()
            .state()
            .teardown(NAMESPACE, "Clusters.omni.sidero.dev", "b", "")
            .await
            .unwrap()
    );
    assert_eq!(h.fake.teardown_calls.load(Ordering::SeqCst), 1);
    let missing = state
        .teardown(NAMESPACE, "Clusters.omni.sidero.dev", "zzz", "")
        .await
        .unwrap_err();
    assert!(missing.is_not_found());
}

#[tokio::test]
async fn a_stalled_call_ends_with_deadline_exceeded() {
    let h = start(None).await;
    let client = h.client("http", Duration::from_millis(500), false);
    let err = client
        .state()
        .get(NAMESPACE, "Clusters.omni.sidero.dev", "stall")
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::DeadlineExceeded(_)), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable() {
    // Bind and drop to get a loopback port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (key, _, _) = generate_key("t", Duration::from_secs(60)).unwrap();
    let client = Client::new(ClientConfig::new(format!("grpc://127.0.0.1:{port}"), key)).unwrap();
    let err = client.ping().await.unwrap_err();
    assert!(matches!(err, StateError::Unavailable(_)), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn kubeconfig_sends_the_cluster_context_inside_the_signature() {
    let h = start(None).await;
    let client = h.client("http", Duration::from_secs(30), false);
    let kubeconfig = client
        .kubeconfig(
            "prod",
            Duration::from_secs(3600),
            "ci",
            &["system:masters".into(), "ops".into()],
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(kubeconfig).unwrap(),
        "cluster=prod sa=true ttl=3600 user=ci groups=system:masters,ops"
    );
    let empty = client
        .kubeconfig("empty", Duration::from_secs(3600), "ci", &[])
        .await
        .unwrap_err();
    assert_eq!(empty, ManagementError::EmptyKubeconfig);
    assert_eq!(empty.to_string(), "response was empty");
    assert!(matches!(
        client.kubeconfig("prod", Duration::ZERO, "ci", &[]).await,
        Err(ManagementError::InvalidRequest(_))
    ));
    let id = client
        .create_service_account("bot", &h.public, Some("Reader"))
        .await
        .unwrap();
    assert_eq!(id, "bot:false:Reader");
    let seen = h.seen();
    assert_eq!(seen[0].context.as_deref(), Some("prod"));
    assert!(seen[0].payload.contains(r#""context":["prod"]"#));
    assert_all_signed(&h);
}

fn tls_config() -> tonic::transport::ServerTlsConfig {
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let identity =
        tonic::transport::Identity::from_pem(cert.cert.pem(), cert.signing_key.serialize_pem());
    tonic::transport::ServerTlsConfig::new().identity(identity)
}

#[tokio::test]
async fn tls_with_an_untrusted_certificate_needs_insecure_skip_verify() {
    let h = start(Some(tls_config())).await;
    let verified = h.client("https", Duration::from_secs(30), false);
    assert_eq!(verified.endpoint().display(), format!("https://{}", h.addr));
    let err = verified.ping().await.unwrap_err();
    assert!(matches!(err, StateError::Unavailable(_)), "{err:?}");
    let insecure = h.client("https", Duration::from_secs(30), true);
    assert_eq!(
        insecure.ping().await.unwrap(),
        format!("https://{}", h.addr)
    );
    assert_all_signed(&h);
}

#[tokio::test(flavor = "current_thread")]
async fn trace_logs_never_contain_key_material_signatures_or_kubeconfigs() {
    let capture = crate::trace_capture::this_thread("trace");

    let h = start(None).await;
    let client = h.client("http", Duration::from_secs(30), false);
    tracing::info!(?client, key = ?h.key, "client under test");
    client.ping().await.unwrap();
    let kubeconfig = client
        .kubeconfig("prod", Duration::from_secs(60), "ci", &[])
        .await
        .unwrap();
    let _ = client
        .state()
        .get(NAMESPACE, "Clusters.omni.sidero.dev", "nope")
        .await;

    let logs = capture.text();
    assert!(
        logs.contains("signed Omni request"),
        "trace logging was not captured:\n{logs}"
    );
    assert!(logs.contains(h.key.fingerprint()));
    let secret_bits = [
        "PGP PRIVATE KEY".to_owned(),
        "PGP PUBLIC KEY".to_owned(),
        "siderov1".to_owned(),
        "x-sidero-payload".to_owned(),
        String::from_utf8(kubeconfig).unwrap(),
    ];
    for bit in secret_bits {
        assert!(!logs.contains(&bit), "logs contain {bit:?}:\n{logs}");
    }
    for call in h.seen() {
        let sig = call.signature.rsplit(' ').next().unwrap().to_owned();
        assert!(!logs.contains(&sig), "logs contain a signature");
    }
}
