//! Validating webhooks called over real HTTPS: a webhook served by the test with its own CA
//! denies, allows with warnings, goes down (failurePolicy Ignore vs Fail), is addressed by
//! Service through the resolver, and is skipped by selectors.

use crate::webhook_server;

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_sim::admission::{AdmissionRequest, Operation, ReviewUser, WebhookDispatcher};
use serde_json::{Value, json};
use webhook_server::TestWebhook;

fn configuration(name: &str, webhooks: Vec<Value>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks
    })
}

fn hook(name: &str, client_config: Value, extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": client_config,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["configmaps"]}]
    });
    if let (Some(h), Some(extra)) = (h.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            h.insert(k.clone(), v.clone());
        }
    }
    h
}

fn create_configmap(ns: &str, labels: Value, data: Value) -> AdmissionRequest {
    AdmissionRequest {
        operation: Operation::Create,
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
        subresource: String::new(),
        kind: "ConfigMap".into(),
        namespaced: true,
        name: "cm".into(),
        namespace: ns.into(),
        object: Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": ns, "labels": labels}, "data": data})),
        old_object: None,
        dry_run: false,
        options: Some(json!({"fieldManager": "kubectl-client-side-apply"})),
        user: ReviewUser {
            username: "alice".into(),
            uid: String::new(),
            groups: vec!["devs".into(), "system:authenticated".into()],
        },
        namespace_labels: Some(BTreeMap::from([("env".to_owned(), "prod".to_owned())])),
    }
}

/// Denies ConfigMaps whose data has `forbidden: "true"`, with a 403 and a message.
fn deny_forbidden_data() -> webhook_server::Decide {
    Arc::new(|review: &Value| {
        let req = &review["request"];
        let obj = if req["object"].is_null() {
            &req["oldObject"]
        } else {
            &req["object"]
        };
        if obj["data"]["forbidden"] == "true" {
            json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden",
                   "message": "data.forbidden must not be true"}})
        } else {
            json!({"allowed": true, "warnings": ["looks fine"]})
        }
    })
}

#[tokio::test]
async fn a_denying_webhook_fails_the_write_with_the_api_server_message() {
    let wh = TestWebhook::start(&["127.0.0.1"], deny_forbidden_data()).await;
    let config = configuration(
        "deny",
        vec![hook(
            "deny.example.com",
            json!({"url": wh.url(), "caBundle": wh.ca_bundle}),
            json!({}),
        )],
    );
    let d = WebhookDispatcher::new();
    let err = d
        .admit(
            std::slice::from_ref(&config),
            &create_configmap("a", json!({}), json!({"forbidden": "true"})),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(err.reason, "Forbidden");
    assert_eq!(
        err.message,
        "admission webhook \"deny.example.com\" denied the request: data.forbidden must not be true"
    );

    let warnings = d
        .admit(
            &[config],
            &create_configmap("a", json!({}), json!({"ok": "yes"})),
        )
        .await
        .unwrap();
    assert_eq!(warnings, vec!["looks fine"]);

    // What the webhook received is a complete v1 AdmissionReview.
    let seen = wh.seen();
    assert_eq!(seen.len(), 2);
    let req = &seen[0]["request"];
    assert_eq!(seen[0]["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["namespace"], "a");
    assert_eq!(req["name"], "cm");
    assert_eq!(
        req["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(req["userInfo"]["username"], "alice");
    assert_eq!(req["object"]["data"]["forbidden"], "true");
    assert_eq!(req["oldObject"], Value::Null);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert!(!req["uid"].as_str().unwrap_or("").is_empty());
    assert_ne!(seen[0]["request"]["uid"], seen[1]["request"]["uid"]);
}

#[tokio::test]
async fn an_unreachable_webhook_fails_closed_or_open_by_failure_policy() {
    let wh = TestWebhook::start(&["127.0.0.1"], deny_forbidden_data()).await;
    let url = wh.url();
    let ca = wh.ca_bundle.clone();
    wh.stop();
    drop(wh);
    let d = WebhookDispatcher::new();
    let req = create_configmap("a", json!({}), json!({}));

    let fail = configuration(
        "fail",
        vec![hook(
            "fail.example.com",
            json!({"url": url, "caBundle": ca}),
            json!({"failurePolicy": "Fail"}),
        )],
    );
    let err = d.admit(&[fail], &req).await.unwrap_err();
    assert_eq!(err.code, 500);
    assert_eq!(err.reason, "InternalError");
    assert!(
        err.message.starts_with(
            "Internal error occurred: failed calling webhook \"fail.example.com\": failed to call webhook: Post \"https://127.0.0.1:"
        ),
        "{}",
        err.message
    );

    let ignore = configuration(
        "ignore",
        vec![hook(
            "ignore.example.com",
            json!({"url": url, "caBundle": ca}),
            json!({"failurePolicy": "Ignore"}),
        )],
    );
    assert_eq!(d.admit(&[ignore], &req).await, Ok(vec![]));
}

#[tokio::test]
async fn a_webhook_certificate_from_an_untrusted_ca_is_a_call_failure() {
    let wh = TestWebhook::start(&["127.0.0.1"], deny_forbidden_data()).await;
    let other = TestWebhook::start(&["127.0.0.1"], deny_forbidden_data()).await;
    let config = configuration(
        "c",
        vec![hook(
            "tls.example.com",
            json!({"url": wh.url(), "caBundle": other.ca_bundle}),
            json!({}),
        )],
    );
    let err = WebhookDispatcher::new()
        .admit(&[config], &create_configmap("a", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(err.code, 500);
    assert!(wh.seen().is_empty());
}

#[tokio::test]
async fn service_references_resolve_through_the_registry_and_verify_the_service_name() {
    let wh = TestWebhook::start(&["webhook.ops.svc"], deny_forbidden_data()).await;
    let config = configuration(
        "svc",
        vec![hook(
            "svc.example.com",
            json!({"service": {"namespace": "ops", "name": "webhook", "path": "/validate", "port": 8443},
                   "caBundle": wh.ca_bundle}),
            json!({}),
        )],
    );
    let d = WebhookDispatcher::new();
    let req = create_configmap("a", json!({}), json!({"forbidden": "true"}));

    // Not registered: no endpoint, and the default policy fails the request.
    let err = d
        .admit(std::slice::from_ref(&config), &req)
        .await
        .unwrap_err();
    assert_eq!(err.code, 500);
    assert!(err.message.contains("webhook.ops.svc"), "{}", err.message);

    d.register_service("ops", "webhook", 8443, wh.addr);
    let err = d.admit(&[config], &req).await.unwrap_err();
    assert_eq!(err.code, 403, "{}", err.message);
    assert_eq!(wh.seen().len(), 1);
}

#[tokio::test]
async fn selectors_decide_which_requests_reach_the_webhook() {
    let wh = TestWebhook::start(&["127.0.0.1"], deny_forbidden_data()).await;
    let cc = json!({"url": wh.url(), "caBundle": wh.ca_bundle});
    let config = configuration(
        "sel",
        vec![
            hook(
                "prod-only.example.com",
                cc.clone(),
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
            ),
            hook(
                "opted-in.example.com",
                cc,
                json!({"objectSelector": {"matchLabels": {"validate": "yes"}},
                       "rules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
                                  "resources": ["configmaps"]}]}),
            ),
        ],
    );
    let d = WebhookDispatcher::new();
    let bad = json!({"forbidden": "true"});

    // Namespace labelled env=prod: the first webhook denies.
    let err = d
        .admit(
            std::slice::from_ref(&config),
            &create_configmap("a", json!({}), bad.clone()),
        )
        .await
        .unwrap_err();
    assert!(err.message.contains("prod-only.example.com"));

    // Another namespace without the label: nothing is called.
    let mut dev = create_configmap("b", json!({}), bad.clone());
    dev.namespace_labels = None;
    assert_eq!(
        d.admit(std::slice::from_ref(&config), &dev).await,
        Ok(vec![])
    );
    assert_eq!(wh.seen().len(), 1);

    // DELETE of an opted-in object reaches the second webhook with oldObject set.
    let mut delete = dev.clone();
    delete.operation = Operation::Delete;
    delete.old_object = delete.object.take();
    delete.old_object.as_mut().unwrap()["metadata"]["labels"] = json!({"validate": "yes"});
    let err = d.admit(&[config], &delete).await.unwrap_err();
    assert!(
        err.message.contains("opted-in.example.com"),
        "{}",
        err.message
    );
    let seen = wh.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1]["request"]["operation"], "DELETE");
    assert_eq!(seen[1]["request"]["object"], Value::Null);
    assert_eq!(seen[1]["request"]["oldObject"]["data"]["forbidden"], "true");
    assert_eq!(seen[1]["request"]["options"]["kind"], "DeleteOptions");
}

/// Webhooks written with kube-rs (as the operator's is) parse what we send, and what they
/// answer is understood: a `deny` without a code becomes a 400 with kube-rs's message.
#[tokio::test]
async fn reviews_interoperate_with_kube_rs_admission_types() {
    use kube::core::DynamicObject;
    use kube::core::admission::{
        AdmissionRequest as KubeRequest, AdmissionResponse, AdmissionReview,
    };

    let decide: webhook_server::Decide = Arc::new(|review: &Value| {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone())
            .expect("kube-rs parses the AdmissionReview we send");
        let req: KubeRequest<DynamicObject> = review.try_into().expect("review has a request");
        assert_eq!(req.name, "cm");
        assert_eq!(req.namespace.as_deref(), Some("a"));
        assert_eq!(req.user_info.username.as_deref(), Some("alice"));
        let resp = AdmissionResponse::from(&req).deny(format!("{} is not welcome", req.name));
        let mut v = serde_json::to_value(resp.into_review()).unwrap();
        // The fixture server re-adds the uid it received; keep the rest of kube-rs's answer.
        v["response"].as_object_mut().unwrap().remove("uid");
        v["response"].clone()
    });
    let wh = TestWebhook::start(&["127.0.0.1"], decide).await;
    let config = configuration(
        "kube-rs",
        vec![hook(
            "kube-rs.example.com",
            json!({"url": wh.url(), "caBundle": wh.ca_bundle}),
            json!({}),
        )],
    );
    let err = WebhookDispatcher::new()
        .admit(&[config], &create_configmap("a", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(err.code, 400, "{err:?}");
    assert_eq!(
        err.message,
        "admission webhook \"kube-rs.example.com\" denied the request: cm is not welcome"
    );
    assert_eq!(wh.seen().len(), 1);
}
