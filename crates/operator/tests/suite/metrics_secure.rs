//! `--metrics-secure`: `/metrics` over HTTPS (here the self-signed certificate generated at
//! start), only for bearer tokens whose user the cluster allows `get` on `/metrics` — checked
//! with TokenReview and SubjectAccessReview against kube-sim with RBAC on. The operator holds
//! only the chart's metrics-auth ClusterRole, and the scraper is bound to the chart's
//! metrics-reader ClusterRole, so the chart's RBAC is what makes it work.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube_sim::auth::{Identity, StaticAuthenticator};
use kube_sim::server::{KubeSim, RunningKubeSim};
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::process::secure_metrics::SecureMetricsConfig;
use serde_json::json;

const ADMIN_TOKEN: &str = "admin-token-7c20d1";
const OPERATOR_TOKEN: &str = "operator-token-5b1f0c";
const SCRAPER_TOKEN: &str = "prometheus-token-93ad7e";
const STRANGER_TOKEN: &str = "stranger-token-0e44b2";

/// Release namespace of the rendered chart, where the operator's service account lives.
const NS: &str = "omni-system";

/// kube-sim with RBAC and the chart's metrics RBAC (`metrics.secure=true`): the operator runs as
/// the chart's service account with nothing but the metrics-auth ClusterRole, the Prometheus
/// service account is bound to the chart's metrics-reader ClusterRole, the stranger to nothing.
async fn cluster() -> (RunningKubeSim, kube::Client, kube::Client) {
    let chart = support::render_operator_chart(NS, &["metrics.secure=true"]);
    let named = |kind: &str, suffix: &str| {
        support::of_kind(&chart, kind)
            .into_iter()
            .find(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(suffix))
            })
            .cloned()
            .unwrap_or_else(|| panic!("the chart renders no {kind} *{suffix}"))
    };
    let reader = named("ClusterRole", "-metrics-reader");
    let auth_role = named("ClusterRole", "-metrics-auth-role");
    let auth_binding = named("ClusterRoleBinding", "-metrics-auth-rolebinding");
    let operator_account = auth_binding["subjects"][0]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("binding subject"))
        .to_string();

    let auth = Arc::new(StaticAuthenticator::new().without_anonymous());
    auth.add_token(ADMIN_TOKEN, Identity::new("admin", &["system:masters"]));
    auth.add_token(
        OPERATOR_TOKEN,
        Identity::new(
            format!("system:serviceaccount:{NS}:{operator_account}"),
            &[],
        ),
    );
    auth.add_token(
        SCRAPER_TOKEN,
        Identity::new("system:serviceaccount:monitoring:prometheus", &[]),
    );
    auth.add_token(STRANGER_TOKEN, Identity::new("stranger", &[]));
    let sim = KubeSim::builder()
        .authenticator(auth)
        .authorizer(Arc::new(kube_sim::wiring::RbacAuthorizer))
        .start()
        .await
        .unwrap_or_else(|e| panic!("start kube-sim: {e}"));
    let base_url = sim.base_url.clone();
    let client_with = |token: &str| {
        let mut config = kube::Config::new(base_url.parse().unwrap_or_else(|e| panic!("{e}")));
        config.auth_info.token = Some(token.to_string().into());
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
    };
    let admin = client_with(ADMIN_TOKEN);
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    for role in [&reader, &auth_role] {
        let role = serde_json::from_value(role.clone()).unwrap_or_else(|e| panic!("{e}"));
        roles
            .create(&PostParams::default(), &role)
            .await
            .unwrap_or_else(|e| panic!("create ClusterRole: {e}"));
    }
    let scraper_binding = json!({
        "metadata": {"name": "prometheus-metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": reader["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    });
    for binding in [auth_binding, scraper_binding] {
        let binding = serde_json::from_value(binding).unwrap_or_else(|e| panic!("{e}"));
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap_or_else(|e| panic!("create ClusterRoleBinding: {e}"));
    }
    (sim, admin, client_with(OPERATOR_TOKEN))
}

/// GET `/metrics` over HTTPS, trusting any certificate (the endpoint's is self-signed), with
/// `token` as bearer token when given; `None` while nothing answers.
async fn scrape(addr: std::net::SocketAddr, token: Option<&str>) -> Option<(u16, String)> {
    let mut config = kube::Config::new(
        format!("https://{addr}")
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    config.accept_invalid_certs = true;
    config.auth_info.token = token.map(|t| t.to_string().into());
    let client = kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"));
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let response = client.send(request.map(Into::into)).await.ok()?;
    let code = response.status().as_u16();
    let body = response.into_body().collect_bytes().await.ok()?;
    Some((code, String::from_utf8_lossy(&body).into_owned()))
}

fn token_reviews(sim: &RunningKubeSim) -> u64 {
    sim.hooks()
        .counts()
        .iter()
        .filter(|(key, _)| key.resource == "tokenreviews" && key.verb == "create")
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test]
async fn only_tokens_allowed_to_get_metrics_can_scrape_and_none_is_logged() {
    support::operator_logs();
    let (sim, admin, operator_client) = cluster().await;
    let addr = support::free_addr();
    let mut config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
    config.metrics_bind = Some(addr);
    config.metrics_secure = Some(SecureMetricsConfig {
        cert_dir: None,
        cert_name: "tls.crt".into(),
        key_name: "tls.key".into(),
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(run_operator(config, operator_client, async move {
        let _ = stopped.await;
    }));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let (code, body) = loop {
        if let Some(answer) = scrape(addr, Some(SCRAPER_TOKEN)).await {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the secure metrics endpoint never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("omni_operator_reconciles"), "{body}");

    let mut answers = vec![body];
    for (token, expected) in [
        (None, 401),
        (Some("not-a-token-anyone-issued"), 401),
        (Some(STRANGER_TOKEN), 403),
    ] {
        let (code, body) = scrape(addr, token)
            .await
            .unwrap_or_else(|| panic!("the endpoint stopped answering"));
        assert_eq!(code, expected, "token {token:?}: {body}");
        answers.push(body);
    }

    // A scraper every 15 s must not cost two reviews per scrape: the decision is cached.
    let reviews_before = token_reviews(&sim);
    for _ in 0..3 {
        let (code, body) = scrape(addr, Some(SCRAPER_TOKEN))
            .await
            .unwrap_or_else(|| panic!("the endpoint stopped answering"));
        assert_eq!(code, 200, "{body}");
        answers.push(body);
    }
    assert_eq!(token_reviews(&sim), reviews_before);

    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(120), operator)
        .await
        .unwrap_or_else(|_| panic!("operator did not stop"))
        .unwrap_or_else(|e| panic!("operator task: {e}"));
    assert!(result.is_ok(), "{result:?}");
    // The log was captured (so the scan below is not vacuous).
    assert!(support::operator_logs().contains("secure metrics server listening"));
    support::leaks::assert_no_secret_leaks(
        &admin,
        &answers,
        &[ADMIN_TOKEN, OPERATOR_TOKEN, SCRAPER_TOKEN, STRANGER_TOKEN],
    )
    .await;
}
