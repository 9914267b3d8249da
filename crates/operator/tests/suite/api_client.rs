//! The operator's Kubernetes clients bound their requests in flight, watches aside. kube-rs
//! opens one HTTP/1.1 connection per concurrent request: before the bound, a cold start of
//! thousands of objects held thousands of TLS connections, and at 1,000 clusters the operator
//! ran the machine out of memory (docs/performance.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Query, State};
use axum::response::IntoResponse;
use omni_operator::process::api_client;

/// What a test API server saw of a client: the connections that carried a request, the HTTP
/// versions asked in, and the most lists in flight at once.
#[derive(Default)]
struct Server {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Peer addresses seen: one per connection.
    peers: std::sync::Mutex<std::collections::HashSet<std::net::SocketAddr>>,
    versions: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Server {
    fn connections(&self) -> usize {
        self.peers.lock().map(|p| p.len()).unwrap_or_default()
    }

    /// Records a request from `peer` in HTTP `version`.
    fn saw(&self, peer: std::net::SocketAddr, version: http::Version) {
        if let Ok(mut peers) = self.peers.lock() {
            peers.insert(peer);
        }
        if let Ok(mut versions) = self.versions.lock() {
            versions.insert(format!("{version:?}"));
        }
    }

    /// A list's answer (JSON), after 100 ms in flight.
    async fn list(&self) -> &'static str {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[]}"#
    }
}

#[derive(serde::Deserialize)]
struct Params {
    watch: Option<String>,
}

/// A list answers after a while; a watch streams until the client goes away.
async fn handle(
    State(s): State<Arc<Server>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    version: http::Version,
    Query(p): Query<Params>,
) -> axum::response::Response {
    s.saw(peer, version);
    if p.watch.as_deref() == Some("true") {
        let events = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Some((Ok::<_, std::io::Error>(axum::body::Bytes::new()), ()))
        });
        return axum::body::Body::from_stream(events).into_response();
    }
    let list = s.list().await;
    ([(http::header::CONTENT_TYPE, "application/json")], list).into_response()
}

async fn serve() -> (Arc<Server>, String) {
    let state = Arc::new(Server::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let app = Router::new()
        .fallback(handle)
        .with_state(state.clone())
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, format!("http://{addr}"))
}

async fn list_all(client: &kube::Client, n: usize) {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let lists = (0..n).map(|_| {
        let api = api.clone();
        async move { api.list(&Default::default()).await }
    });
    for result in futures::future::join_all(lists).await {
        result.unwrap_or_else(|e| panic!("list: {e}"));
    }
}

#[tokio::test]
async fn requests_beyond_the_bound_wait_for_a_slot_and_share_its_connections() {
    let (server, url) = serve().await;
    let config = kube::Config::new(url.parse().unwrap_or_else(|e| panic!("{e}")));
    let client = api_client::client(config, 4).unwrap_or_else(|e| panic!("{e}"));
    list_all(&client, 40).await;
    assert_eq!(server.most_in_flight.load(Ordering::SeqCst), 4);
    assert!(
        server.connections() <= 4,
        "{} connections for 4 slots",
        server.connections()
    );
}

/// Without the bound, what the test above guards against: one connection per request.
#[tokio::test]
async fn an_unbounded_kube_client_opens_a_connection_per_concurrent_request() {
    let (server, url) = serve().await;
    let config = kube::Config::new(url.parse().unwrap_or_else(|e| panic!("{e}")));
    let client = kube::Client::try_from(config).unwrap_or_else(|e| panic!("{e}"));
    list_all(&client, 40).await;
    assert!(server.most_in_flight.load(Ordering::SeqCst) > 4);
    assert!(server.connections() > 4);
}

#[tokio::test]
async fn watches_never_wait_for_a_slot_and_hold_none() {
    let (_server, url) = serve().await;
    let config = kube::Config::new(url.parse().unwrap_or_else(|e| panic!("{e}")));
    let client = api_client::client(config, 2).unwrap_or_else(|e| panic!("{e}"));
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let mut watches = Vec::new();
    for _ in 0..4 {
        let stream =
            tokio::time::timeout(Duration::from_secs(5), api.watch(&Default::default(), "0"))
                .await
                .unwrap_or_else(|_| panic!("a watch waited for a slot"))
                .unwrap_or_else(|e| panic!("watch: {e}"));
        watches.push(stream);
    }
    tokio::time::timeout(Duration::from_secs(10), list_all(&client, 4))
        .await
        .unwrap_or_else(|_| panic!("running watches held the slots"));
}

/// A TLS API server offering `h2` and `http/1.1` in ALPN, as a real one does, with a
/// certificate for `hosts`, whose lists answer as [`Server::list`] does; returns what it saw,
/// its URL (`https://127.0.0.1:<port>`) and its CA (PEM).
async fn serve_tls(hosts: &[&str]) -> (Arc<Server>, String, String) {
    let ca = kube_sim::tls::CertificateAuthority::generate("api-client-test-ca")
        .unwrap_or_else(|e| panic!("{e}"));
    let serving = ca.issue_server(hosts).unwrap_or_else(|e| panic!("{e}"));
    let tls =
        kube_sim::tls::TlsServer::new(ca.server_config(&serving).unwrap_or_else(|e| panic!("{e}")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let seen = Arc::new(Server::default());
    let state = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, peer)) = listener.accept().await {
            let (tls, seen) = (tls.clone(), state.clone());
            tokio::spawn(async move {
                let Ok((stream, _)) = tls.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let seen = seen.clone();
                    async move {
                        seen.saw(peer, req.version());
                        let list = seen.list().await;
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from_static(list.as_bytes())),
                        ))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            });
        }
    });
    (seen, format!("https://{addr}"), ca.cert_pem().to_owned())
}

/// A workload kubeconfig (YAML) for `url`, trusting `ca_pem`, with an optional
/// `tls-server-name`.
fn workload_kubeconfig(url: &str, ca_pem: &str, tls_server_name: Option<&str>) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let name = tls_server_name
        .map(|n| format!(", tls-server-name: '{n}'"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: w\n\
         clusters: [{{name: w, cluster: {{server: '{url}', certificate-authority-data: '{ca}'{name}}}}}]\n\
         users: [{{name: w, user: {{token: not-a-secret}}}}]\n\
         contexts: [{{name: w, context: {{cluster: w, user: w}}}}]\n"
    )
}

/// The operator's client of the workload cluster `kubeconfig` names.
async fn workload_client(kubeconfig: &str) -> kube::Client {
    let limits = omni_operator::domain::helm::source::Limits {
        connect: Duration::from_secs(5),
        read: Duration::from_secs(30),
        request: Duration::from_secs(60),
    };
    omni_operator::domain::workload::client_from_kubeconfig(kubeconfig.as_bytes(), limits)
        .await
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// A workload cluster's client negotiates HTTP/2, so its requests in flight (still bounded)
/// share one connection; over HTTP/1.1 each of them held its own.
#[tokio::test]
async fn a_workload_client_multiplexes_its_requests_in_flight_over_one_connection() {
    let (seen, url, ca_pem) = serve_tls(&["127.0.0.1"]).await;
    let client = workload_client(&workload_kubeconfig(&url, &ca_pem, None)).await;
    list_all(&client, 40).await;
    let versions = seen.versions.lock().map(|v| v.clone()).unwrap_or_default();
    assert_eq!(versions.into_iter().collect::<Vec<_>>(), ["HTTP/2.0"]);
    assert_eq!(
        seen.connections(),
        1,
        "requests in flight each held a connection"
    );
    assert_eq!(
        seen.most_in_flight.load(Ordering::SeqCst),
        8,
        "the bound on requests in flight to one workload cluster"
    );
}

/// A kubeconfig's `tls-server-name` is the name the server's certificate is checked against,
/// whatever address `server` gives; without it, the address must be in the certificate.
#[tokio::test]
async fn a_workload_client_checks_the_certificate_against_tls_server_name() {
    let (_seen, url, ca_pem) = serve_tls(&["api.internal"]).await;
    let named = workload_client(&workload_kubeconfig(&url, &ca_pem, Some("api.internal"))).await;
    list_all(&named, 1).await;

    let unnamed = workload_client(&workload_kubeconfig(&url, &ca_pem, None)).await;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(unnamed, "default");
    let refused = api.list(&Default::default()).await;
    assert!(
        refused.is_err(),
        "a certificate for api.internal was accepted for 127.0.0.1"
    );
}
