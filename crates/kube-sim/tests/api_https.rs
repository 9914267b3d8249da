//! HTTPS serving with the edges modules wired in: client-certificate and token
//! identities reach the server, rejected credentials get 401.

#[path = "fixtures/kube_client.rs"]
mod kube_client;

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube_sim::auth::{Identity, StaticAuthenticator};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::KubeSim;
use kube_sim::tls::CertificateAuthority;
use serde_json::json;

#[tokio::test]
async fn https_with_client_certificates_and_tokens() {
    let ca = CertificateAuthority::generate("kube-sim-ca").unwrap();
    let serving = ca.issue_localhost_server().unwrap();
    let auth = Arc::new(StaticAuthenticator::new().without_anonymous());
    auth.add_token("tok", Identity::new("robot", &["system:masters"]));
    let sim = KubeSim::builder()
        .tls(ca.server_config(&serving).unwrap())
        .authenticator(auth)
        .start()
        .await
        .unwrap();
    assert!(sim.base_url.starts_with("https://"), "{}", sim.base_url);

    let cert = ca.issue_client("admin", &["system:masters"]).unwrap();
    let kc = Kubeconfig::new(
        sim.base_url.clone(),
        "admin",
        Credential::ClientCertificate {
            cert_pem: cert.cert_pem.clone(),
            key_pem: cert.key_pem.clone(),
        },
    )
    .with_ca_pem(ca.cert_pem());
    let client = kube_client::client_for(&kc).await;
    assert_eq!(client.apiserver_version().await.unwrap().minor, "35");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();

    let token = Kubeconfig::new(
        sim.base_url.clone(),
        "robot",
        Credential::Token("tok".into()),
    )
    .with_ca_pem(ca.cert_pem());
    let api: Api<ConfigMap> = Api::namespaced(kube_client::client_for(&token).await, "default");
    assert_eq!(api.get("c").await.unwrap().data.unwrap()["k"], "v");

    let mut bad = token.clone();
    bad.credential = Credential::Token("wrong".into());
    let api: Api<ConfigMap> = Api::namespaced(kube_client::client_for(&bad).await, "default");
    match api.get("c").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
}
