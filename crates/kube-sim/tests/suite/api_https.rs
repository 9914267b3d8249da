//! HTTPS serving with the edges modules wired in: client-certificate and token
//! identities reach the server, rejected credentials get 401.

use crate::kube_client;

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
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

#[tokio::test]
async fn rbac_authorizer_denies_with_the_real_message_and_bindings_grant() {
    let auth = Arc::new(StaticAuthenticator::new().without_anonymous());
    auth.add_token("admin", Identity::new("root", &["system:masters"]));
    auth.add_token("dev", Identity::new("dev", &[]));
    let sim = KubeSim::builder()
        .authenticator(auth)
        .authorizer(Arc::new(kube_sim::wiring::RbacAuthorizer))
        .start()
        .await
        .unwrap();
    let client = |tok: &str| {
        let mut c = kube::Config::new(sim.base_url.parse().unwrap());
        c.auth_info.token = Some(tok.to_string().into());
        kube::Client::try_from(c).unwrap()
    };
    // `kubectl auth can-i`: a SelfSubjectAccessReview answered by the same authorizer.
    let can_i = async |tok: &str, verb: &str| {
        let reviews: Api<SelfSubjectAccessReview> = Api::all(client(tok));
        let review: SelfSubjectAccessReview = serde_json::from_value(json!({
            "spec": {"resourceAttributes": {"verb": verb, "resource": "configmaps", "namespace": "default"}}
        }))
        .unwrap();
        let answered = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap();
        let status = answered.status.unwrap();
        assert_eq!(
            answered.spec.resource_attributes.unwrap().verb.as_deref(),
            Some(verb)
        );
        status.allowed
    };
    assert!(can_i("admin", "delete").await);
    assert!(!can_i("dev", "get").await);
    let dev: Api<ConfigMap> = Api::namespaced(client("dev"), "default");
    match dev.get("x").await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "configmaps \"x\" is forbidden: User \"dev\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\""
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let admin = kube::Api::<kube::api::DynamicObject>::all_with(
        client("admin"),
        &kube::api::ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&()),
    );
    let crb = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "dev-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dev"}]
    }))
    .unwrap();
    admin.create(&PostParams::default(), &crb).await.unwrap();
    assert!(can_i("dev", "get").await);
    match dev.get("x").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 404, "{}", s.message),
        other => panic!("expected 404, got {other:?}"),
    }
}
