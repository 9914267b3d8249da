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

#[derive(Default)]
struct Server {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Peer addresses seen: one per connection.
    peers: std::sync::Mutex<std::collections::HashSet<std::net::SocketAddr>>,
}

impl Server {
    fn connections(&self) -> usize {
        self.peers.lock().map(|p| p.len()).unwrap_or_default()
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
    Query(p): Query<Params>,
) -> axum::response::Response {
    if let Ok(mut peers) = s.peers.lock() {
        peers.insert(peer);
    }
    if p.watch.as_deref() == Some("true") {
        let events = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Some((Ok::<_, std::io::Error>(axum::body::Bytes::new()), ()))
        });
        return axum::body::Body::from_stream(events).into_response();
    }
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.most_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.in_flight.fetch_sub(1, Ordering::SeqCst);
    axum::Json(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []
    }))
    .into_response()
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
