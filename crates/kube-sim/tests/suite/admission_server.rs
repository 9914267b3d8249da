//! Admission through the server: with `KubeSimBuilder::admission`, writes over HTTP reach the
//! stored ValidatingWebhookConfigurations before they are persisted, and the client sees the
//! API server's answer (the denial Status, warnings as `Warning` headers).

use crate::webhook_server;

use std::sync::Arc;

use kube_sim::admission::WebhookDispatcher;
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::{Value, json};
use webhook_server::TestWebhook;

/// Denies ConfigMaps whose `data.forbidden` is set, warns about `data.deprecated`.
fn decide() -> webhook_server::Decide {
    Arc::new(|review: &Value| {
        let object = &review["request"]["object"];
        if object.pointer("/data/forbidden").is_some() {
            json!({"allowed": false, "status": {"code": 422, "reason": "Invalid", "message": "data.forbidden: not allowed here"}})
        } else if object.pointer("/data/deprecated").is_some() {
            json!({"allowed": true, "warnings": ["data.deprecated: will be removed"]})
        } else {
            json!({"allowed": true})
        }
    })
}

async fn start(failure_policy: &str) -> (RunningKubeSim, TestWebhook, reqwest_like::Client) {
    let webhook = TestWebhook::start(&["webhook.ops.svc"], decide()).await;
    let dispatcher = WebhookDispatcher::new();
    dispatcher.register_service("ops", "webhook", 443, webhook.addr);
    let sim = KubeSim::builder()
        .admission(dispatcher)
        .start()
        .await
        .unwrap();
    let client = reqwest_like::Client::new(&sim.base_url);
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "configmaps"},
        "webhooks": [{
            "name": "configmaps.test.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "clientConfig": {"service": {"namespace": "ops", "name": "webhook", "path": "/validate"}, "caBundle": webhook.ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["configmaps"]}],
        }],
    });
    let (code, _, body) = client
        .send(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            "application/json",
            &config,
        )
        .await;
    assert_eq!(code, 201, "{body}");
    (sim, webhook, client)
}

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn denied_writes_are_not_persisted_and_allowed_ones_carry_warnings() {
    let (sim, webhook, client) = start("Fail").await;

    let (code, _, body) = client
        .send(
            "POST",
            CM,
            "application/json",
            &configmap("bad", json!({"forbidden": "x"})),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "admission webhook \"configmaps.test.io\" denied the request: data.forbidden: not allowed here"
    );
    assert!(
        sim.store()
            .get("", "configmaps", Some("default"), "bad")
            .is_err()
    );

    let (code, headers, body) = client
        .send(
            "POST",
            CM,
            "application/json",
            &configmap("ok", json!({"deprecated": "x"})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    assert!(
        headers
            .iter()
            .any(|w| w.contains("data.deprecated: will be removed")),
        "{headers:?}"
    );

    // An update that would add the forbidden key is refused and leaves the object as it was.
    let (code, _, _) = client
        .send(
            "PATCH",
            &format!("{CM}/ok"),
            "application/merge-patch+json",
            &json!({"data": {"forbidden": "y"}}),
        )
        .await;
    assert_eq!(code, 422);
    let stored = sim
        .store()
        .get("", "configmaps", Some("default"), "ok")
        .unwrap();
    assert!(stored.pointer("/data/forbidden").is_none());

    // The review carried the operation, the user and both objects.
    let reviews = webhook.seen();
    let update = reviews
        .iter()
        .find(|r| r["request"]["operation"] == "UPDATE")
        .expect("the update was reviewed");
    assert_eq!(update["request"]["oldObject"]["metadata"]["name"], "ok");
    assert_eq!(update["request"]["object"]["data"]["forbidden"], "y");
    assert_eq!(update["request"]["userInfo"]["username"], "system:admin");

    let (code, _, _) = client
        .send(
            "DELETE",
            &format!("{CM}/ok"),
            "application/json",
            &json!({}),
        )
        .await;
    assert_eq!(code, 200);
    assert!(
        webhook
            .seen()
            .iter()
            .any(|r| r["request"]["operation"] == "DELETE")
    );
}

#[tokio::test]
async fn webhook_calls_reuse_one_connection_like_the_real_api_server() {
    let (_sim, webhook, client) = start("Fail").await;
    for name in ["a", "b", "c"] {
        let (code, _, body) = client
            .send("POST", CM, "application/json", &configmap(name, json!({})))
            .await;
        assert_eq!(code, 201, "{body}");
    }
    assert_eq!(webhook.seen().len(), 3);
    assert_eq!(webhook.connections(), 1);
}

#[tokio::test]
async fn a_webhook_that_went_away_after_a_call_fails_the_next_write_closed() {
    let (sim, webhook, client) = start("Fail").await;
    let (code, _, body) = client
        .send("POST", CM, "application/json", &configmap("a", json!({})))
        .await;
    assert_eq!(code, 201, "{body}");
    // Its open connection goes with it: the kept connection must not hide that.
    webhook.stop();
    let (code, _, body) = client
        .send("POST", CM, "application/json", &configmap("b", json!({})))
        .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        sim.store()
            .get("", "configmaps", Some("default"), "b")
            .is_err()
    );
}

#[tokio::test]
async fn an_unreachable_webhook_fails_closed_or_open_by_policy() {
    let (sim, webhook, client) = start("Fail").await;
    webhook.stop();
    let (code, _, body) = client
        .send("POST", CM, "application/json", &configmap("a", json!({})))
        .await;
    assert_eq!(code, 500, "{body}");
    assert_eq!(body["reason"], "InternalError");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("failed calling webhook \"configmaps.test.io\""),
        "{body}"
    );
    assert!(
        sim.store()
            .get("", "configmaps", Some("default"), "a")
            .is_err()
    );

    let (sim, webhook, client) = start("Ignore").await;
    webhook.stop();
    let (code, _, body) = client
        .send("POST", CM, "application/json", &configmap("a", json!({})))
        .await;
    assert_eq!(code, 201, "{body}");
    assert!(
        sim.store()
            .get("", "configmaps", Some("default"), "a")
            .is_ok()
    );
}

/// A tiny HTTP/1.1 client over hyper, so the test sees raw status codes and headers.
mod reqwest_like {
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::rt::TokioExecutor;
    use serde_json::Value;

    pub struct Client {
        base: String,
        inner: HyperClient<hyper_util::client::legacy::connect::HttpConnector, Full<bytes::Bytes>>,
    }

    impl Client {
        pub fn new(base: &str) -> Self {
            Self {
                base: base.to_owned(),
                inner: HyperClient::builder(TokioExecutor::new()).build_http(),
            }
        }

        /// Returns the status code, the `Warning` headers and the JSON body.
        pub async fn send(
            &self,
            method: &str,
            path: &str,
            content_type: &str,
            body: &Value,
        ) -> (u16, Vec<String>, Value) {
            let req = hyper::Request::builder()
                .method(method)
                .uri(format!("{}{path}", self.base))
                .header("content-type", content_type)
                .body(Full::new(bytes::Bytes::from(body.to_string())))
                .unwrap();
            let resp = self.inner.request(req).await.unwrap();
            let code = resp.status().as_u16();
            let warnings = resp
                .headers()
                .get_all("warning")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (
                code,
                warnings,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }
    }
}

/// A patch without a resourceVersion never fails because another write landed between the
/// server's read and its write (here: made by the webhook while the patch is being admitted);
/// the server recomputes it on the newer object, as the real API server's update loop does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconditional_patch_survives_a_concurrent_write() {
    let store: Arc<std::sync::OnceLock<kube_sim::store::Store>> = Arc::default();
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let decide: webhook_server::Decide = {
        let (store, writes) = (store.clone(), writes.clone());
        Arc::new(move |review: &Value| {
            // On the first UPDATE review, write the object behind the patch's back.
            if review["request"]["operation"] == "UPDATE"
                && writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
                && let Some(store) = store.get()
            {
                let mut current = store
                    .get("", "configmaps", Some("default"), "raced")
                    .unwrap();
                current["data"]["other"] = json!("written concurrently");
                store
                    .update("", "configmaps", Some("default"), "raced", current)
                    .unwrap();
            }
            json!({"allowed": true})
        })
    };
    let webhook = TestWebhook::start(&["webhook.ops.svc"], decide).await;
    let dispatcher = WebhookDispatcher::new();
    dispatcher.register_service("ops", "webhook", 443, webhook.addr);
    let sim = KubeSim::builder()
        .admission(dispatcher)
        .start()
        .await
        .unwrap();
    let _ = store.set(sim.store().clone());
    let client = reqwest_like::Client::new(&sim.base_url);
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "racer"},
        "webhooks": [{"name": "racer.test.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"namespace": "ops", "name": "webhook", "path": "/validate"}, "caBundle": webhook.ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["configmaps"]}]}],
    });
    let (code, _, body) = client
        .send(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            "application/json",
            &config,
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, _, _) = client
        .send(
            "POST",
            CM,
            "application/json",
            &configmap("raced", json!({"mine": "1"})),
        )
        .await;
    assert_eq!(code, 201);

    let (code, _, body) = client
        .send(
            "PATCH",
            &format!("{CM}/raced"),
            "application/merge-patch+json",
            &json!({"data": {"mine": "2"}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let stored = sim
        .store()
        .get("", "configmaps", Some("default"), "raced")
        .unwrap();
    assert_eq!(stored["data"]["mine"], "2");
    assert_eq!(
        stored["data"]["other"], "written concurrently",
        "the concurrent write was lost"
    );
    assert!(
        writes.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "the patch was not re-admitted"
    );
}
