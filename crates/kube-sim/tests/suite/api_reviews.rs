//! Delegated authentication and authorization through kube-rs: TokenReview and
//! SubjectAccessReview answered as the real API server answers them, by the same authenticator
//! and RBAC authorizer that guard kube-sim itself.

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube_sim::auth::{Identity, StaticAuthenticator};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::json;

/// kube-sim with RBAC on and three tokens: an admin, a server allowed to delegate
/// (`system:auth-delegator`), and a user with no rights at all.
async fn sim_with_rbac() -> RunningKubeSim {
    let auth = Arc::new(StaticAuthenticator::new().without_anonymous());
    auth.add_token("admin-token", Identity::new("root", &["system:masters"]));
    auth.add_token(
        "delegator-token",
        Identity::new("system:serviceaccount:ops:operator", &[]),
    );
    auth.add_token("alice-token", Identity::new("alice", &["devs"]));
    let sim = KubeSim::builder()
        .authenticator(auth)
        .authorizer(Arc::new(kube_sim::wiring::RbacAuthorizer))
        .start()
        .await
        .unwrap();
    let admin = client(&sim, "admin-token");
    let bindings: Api<ClusterRoleBinding> = Api::all(admin);
    let delegate = serde_json::from_value(json!({
        "metadata": {"name": "operator-auth-delegator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": "ops"}]
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &delegate)
        .await
        .unwrap();
    sim
}

fn client(sim: &RunningKubeSim, token: &str) -> kube::Client {
    let mut config = kube::Config::new(sim.base_url.parse().unwrap());
    config.auth_info.token = Some(token.to_string().into());
    kube::Client::try_from(config).unwrap()
}

async fn review_token(sim: &RunningKubeSim, token: &str) -> Result<TokenReview, kube::Error> {
    let reviews: Api<TokenReview> = Api::all(client(sim, "delegator-token"));
    let review = serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
    reviews.create(&PostParams::default(), &review).await
}

#[tokio::test]
async fn a_token_review_names_the_tokens_user_and_groups() {
    let sim = sim_with_rbac().await;
    let answered = review_token(&sim, "alice-token").await.unwrap();
    let status = answered.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.unwrap();
    assert_eq!(user.username.as_deref(), Some("alice"));
    assert_eq!(
        user.groups.unwrap(),
        vec!["devs".to_string(), "system:authenticated".to_string()]
    );
    assert_eq!(
        status.audiences.unwrap(),
        vec!["https://kubernetes.default.svc.cluster.local".to_string()]
    );
}

#[tokio::test]
async fn an_unknown_token_is_unauthenticated_and_an_empty_one_is_a_bad_request() {
    let sim = sim_with_rbac().await;
    let status = review_token(&sim, "nobody-knows-this")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_ne!(status.authenticated, Some(true));
    assert_eq!(status.user.and_then(|u| u.username), None);
    match review_token(&sim, "").await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 400);
            assert_eq!(
                s.message,
                "token is required for TokenReview in authentication"
            );
        }
        other => panic!("expected 400, got {other:?}"),
    }
}

#[tokio::test]
async fn only_users_allowed_to_delegate_may_review_tokens() {
    let sim = sim_with_rbac().await;
    let reviews: Api<TokenReview> = Api::all(client(&sim, "alice-token"));
    let review = serde_json::from_value(json!({"spec": {"token": "admin-token"}})).unwrap();
    match reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "tokenreviews.authentication.k8s.io is forbidden: User \"alice\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
}

async fn may_get_metrics(sim: &RunningKubeSim, user: &str, groups: &[&str]) -> bool {
    let reviews: Api<SubjectAccessReview> = Api::all(client(sim, "delegator-token"));
    let review = serde_json::from_value(json!({
        "spec": {"user": user, "groups": groups,
                 "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    }))
    .unwrap();
    let answered = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    assert_eq!(
        answered.spec.user.as_deref(),
        Some(user),
        "the spec is echoed"
    );
    answered.status.unwrap().allowed
}

#[tokio::test]
async fn a_subject_access_review_answers_for_the_named_user_and_groups() {
    let sim = sim_with_rbac().await;
    assert!(!may_get_metrics(&sim, "alice", &["devs"]).await);
    let admin = client(&sim, "admin-token");
    let reader = serde_json::from_value(json!({
        "metadata": {"name": "metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &reader)
        .await
        .unwrap();
    let bind_devs = serde_json::from_value(json!({
        "metadata": {"name": "devs-read-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin)
        .create(&PostParams::default(), &bind_devs)
        .await
        .unwrap();
    assert!(may_get_metrics(&sim, "alice", &["devs"]).await);
    // The groups are taken as given: alice without `devs` is not a member.
    assert!(!may_get_metrics(&sim, "alice", &[]).await);
    assert!(!may_get_metrics(&sim, "bob", &["ops"]).await);
}

#[tokio::test]
async fn a_subject_access_review_needs_a_user_or_group() {
    let sim = sim_with_rbac().await;
    let reviews: Api<SubjectAccessReview> = Api::all(client(&sim, "delegator-token"));
    let review = serde_json::from_value(json!({
        "spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    }))
    .unwrap();
    match reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message
                    .contains("at least one of user or group must be specified"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
}
