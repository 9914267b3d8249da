//! What the unit tests of the shared machinery and the integration suite need of a management
//! cluster and of Omni: kube-sim with the operator's CRDs, objects created from JSON, and
//! omni-sim with one service account. Loopback only; every server stops when dropped or shut
//! down. The suite includes this file by path, so it names this crate `omni_operator`, as the
//! suite does.

use std::time::Duration;

use kube::api::{DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;

use omni_operator::api::OmniCluster;

/// A kube-sim and a client of it (kube-sim's admin).
pub(crate) async fn kube_sim() -> (kube_sim::server::RunningKubeSim, kube::Client) {
    let sim = kube_sim::server::KubeSim::builder()
        .start()
        .await
        .unwrap_or_else(|e| panic!("start kube-sim: {e}"));
    let uri: http::Uri = sim.base_url.parse().unwrap_or_else(|e| panic!("uri: {e}"));
    let client =
        kube::Client::try_from(kube::Config::new(uri)).unwrap_or_else(|e| panic!("client: {e}"));
    (sim, client)
}

/// Installs the operator's CRDs and creates `namespace`; returns once the kinds are served.
pub(crate) async fn install_operator_api(client: &kube::Client, namespace: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for crd in omni_operator::api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("create CRD: {e}"));
    }
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))
            .unwrap_or_else(|e| panic!("{e}"));
    kube::Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("namespace: {e}"));
    let clusters: kube::Api<OmniCluster> = kube::Api::namespaced(client.clone(), namespace);
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while clusters.list(&ListParams::default()).await.is_err() {
        assert!(tokio::time::Instant::now() < until, "CRDs never servable");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An OmniConnection named `name` in `namespace` at `endpoint`, its key in Secret `secret`.
pub(crate) fn connection_doc(
    namespace: &str,
    name: &str,
    endpoint: &str,
    secret: &str,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniConnection",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "endpoint": endpoint,
            "auth": {"serviceAccountSecretRef": {"name": secret, "key": "serviceAccountKey"}}
        }
    })
}

/// Creates an object of one of the operator's kinds from its JSON (`apiVersion`, `kind` and
/// `metadata.namespace` set).
pub(crate) async fn create_json(client: &kube::Client, obj: serde_json::Value) {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let namespace = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (group, version) = api_version
        .split_once('/')
        .map(|(g, v)| (g.to_string(), v.to_string()))
        .unwrap_or_else(|| (String::new(), api_version.clone()));
    let ar = ApiResource {
        group,
        version,
        api_version,
        kind: kind.clone(),
        plural: format!("{}s", kind.to_lowercase()),
    };
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(client.clone(), &namespace, &ar);
    let typed: DynamicObject =
        serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
    api.create(&PostParams::default(), &typed)
        .await
        .unwrap_or_else(|e| panic!("create {kind}: {e}"));
}

/// A client of an API server that does not exist (connections are refused).
pub(crate) fn unreachable_client() -> kube::Client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("bind: {e}"))
        .port();
    let uri: http::Uri = format!("http://127.0.0.1:{port}")
        .parse()
        .unwrap_or_else(|e| panic!("uri: {e}"));
    kube::Client::try_from(kube::Config::new(uri)).unwrap_or_else(|e| panic!("client: {e}"))
}

/// An omni-sim with the service account `account` (operator role), and its key.
pub(crate) async fn omni_sim_with_account(account: &str) -> (omni_sim::RunningOmniSim, String) {
    let sim = omni_sim::OmniSim::builder()
        .start()
        .await
        .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
    let key = sim
        .register_service_account(account, omni_sim::Role::Operator)
        .unwrap_or_else(|e| panic!("register {account}: {e}"));
    (sim, key)
}
