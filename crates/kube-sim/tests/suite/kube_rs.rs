//! kube-rs driven against kube-sim: kubeconfig loading, TLS and authentication first.

use crate::auth_probe;
use crate::kube_client;

use auth_probe::AuthProbe;
use kube_sim::auth::Identity;
use kube_sim::kubeconfig::{Credential, Kubeconfig};

async fn whoami(client: &kube::Client) -> serde_json::Value {
    let req = http::Request::get("/whoami").body(Vec::new()).unwrap();
    client.request::<serde_json::Value>(req).await.unwrap()
}

#[tokio::test]
async fn kube_rs_authenticates_with_a_client_certificate_kubeconfig() {
    let probe = AuthProbe::start().await;
    let cert = probe
        .ca
        .issue_client("kube-sim-admin", &["system:masters"])
        .unwrap();
    let kc = Kubeconfig::new(
        probe.url(),
        "kube-sim-admin",
        Credential::ClientCertificate {
            cert_pem: cert.cert_pem.clone(),
            key_pem: cert.key_pem.clone(),
        },
    )
    .with_ca_pem(probe.ca.cert_pem());
    let client = kube_client::client_for(&kc).await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "35");
    let me = whoami(&client).await;
    assert_eq!(me["username"], "kube-sim-admin");
    assert_eq!(
        me["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );
}

#[tokio::test]
async fn kube_rs_authenticates_with_a_token_and_a_bad_token_is_401() {
    let probe = AuthProbe::start().await;
    probe.auth.add_token(
        "operator-token",
        Identity::new("system:serviceaccount:ops:op", &[]),
    );
    let good = Kubeconfig::new(
        probe.url(),
        "op",
        Credential::Token("operator-token".into()),
    )
    .with_ca_pem(probe.ca.cert_pem());
    let me = whoami(&kube_client::client_for(&good).await).await;
    assert_eq!(me["username"], "system:serviceaccount:ops:op");
    assert_eq!(
        me["groups"],
        serde_json::json!([
            "system:serviceaccounts",
            "system:serviceaccounts:ops",
            "system:authenticated"
        ])
    );

    let mut bad = good.clone();
    bad.credential = Credential::Token("wrong".into());
    let err = kube_client::client_for(&bad)
        .await
        .apiserver_version()
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 401);
            assert_eq!(status.reason, "Unauthorized");
        }
        other => panic!("expected a 401 Status, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_rs_refuses_a_server_outside_the_kubeconfig_ca() {
    let probe = AuthProbe::start().await;
    let other = kube_sim::tls::CertificateAuthority::generate("other").unwrap();
    let kc = Kubeconfig::new(probe.url(), "anon", Credential::None).with_ca_pem(other.cert_pem());
    assert!(
        kube_client::client_for(&kc)
            .await
            .apiserver_version()
            .await
            .is_err()
    );
}
