//! Server-side field validation (`?fieldValidation=`) on create, update and patch: `Strict`
//! refuses unknown and duplicate fields with the API server's wording, `Warn` (the default)
//! prunes and returns `Warning` headers, `Ignore` prunes silently.

use http::{Method, Request};
use kube::Client;
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::{Value, json};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

async fn start() -> (RunningKubeSim, Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer"},
                        "chart": {"type": "object", "properties": {
                            "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}}}]}});
    let (status, _, body) = send(
        &client,
        Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        crd.to_string(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (sim, client)
}

/// Sends a raw request; returns the status, the `Warning` headers and the JSON body.
async fn send(
    client: &Client,
    method: Method,
    uri: &str,
    content_type: &str,
    body: String,
) -> (u16, Vec<String>, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body.into_bytes())
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (
        status,
        warnings,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A Widget body with `values` at `spec` (unknown) and `size` twice.
const SLOPPY: &str = r#"{"apiVersion": "example.com/v1", "kind": "Widget",
    "metadata": {"name": "w"}, "spec": {"size": 1, "size": 2, "values": {"replicas": 3}}}"#;

#[tokio::test]
async fn strict_create_refuses_unknown_and_duplicate_fields_in_the_servers_words() {
    let (sim, client) = start().await;
    let (status, _, body) = send(
        &client,
        Method::POST,
        &format!("{WIDGETS}?fieldValidation=Strict"),
        "application/json",
        SLOPPY.into(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(
        body["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: \
         duplicate field \"spec.size\", unknown field \"spec.values\""
    );
    assert!(
        sim.store()
            .get_object("example.com", "widgets", Some("default"), "w")
            .is_none()
    );
}

#[tokio::test]
async fn warn_is_the_default_it_prunes_and_sends_warning_headers() {
    let (sim, client) = start().await;
    let (status, warnings, body) = send(
        &client,
        Method::POST,
        WIDGETS,
        "application/json",
        SLOPPY.into(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        warnings,
        vec![
            r#"299 - "duplicate field \"spec.size\"""#,
            r#"299 - "unknown field \"spec.values\"""#,
        ]
    );
    let stored = sim
        .store()
        .get_object("example.com", "widgets", Some("default"), "w")
        .unwrap();
    // The last duplicate wins, as in Go's decoder.
    assert_eq!(stored["spec"], json!({"size": 2}));
}

#[tokio::test]
async fn ignore_prunes_silently() {
    let (_sim, client) = start().await;
    let (status, warnings, body) = send(
        &client,
        Method::POST,
        &format!("{WIDGETS}?fieldValidation=Ignore"),
        "application/json",
        SLOPPY.into(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(body["spec"], json!({"size": 2}));
}

#[tokio::test]
async fn strict_update_and_merge_patch_refuse_unknown_fields_and_keep_the_object() {
    let (sim, client) = start().await;
    let good = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1}});
    let (status, _, _) = send(
        &client,
        Method::POST,
        WIDGETS,
        "application/json",
        good.to_string(),
    )
    .await;
    assert_eq!(status, 201);

    let mut replaced = good.clone();
    replaced["spec"]["values"] = json!({"replicas": 3});
    let (status, _, body) = send(
        &client,
        Method::PUT,
        &format!("{WIDGETS}/w?fieldValidation=Strict"),
        "application/json",
        replaced.to_string(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: \
         unknown field \"spec.values\""
    );

    // Values where the schema keeps unknown fields are fine; misplaced ones are not.
    let (status, _, body) = send(
        &client,
        Method::PATCH,
        &format!("{WIDGETS}/w?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec": {"chart": {"values": {"anything": 1}}, "values": {"replicas": 3}}}"#.into(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "strict decoding error: unknown field \"spec.values\""
    );
    let stored = sim
        .store()
        .get_object("example.com", "widgets", Some("default"), "w")
        .unwrap();
    assert_eq!(stored["spec"], json!({"size": 1}));
}

#[tokio::test]
async fn unknown_metadata_fields_are_checked_for_built_in_kinds_too() {
    let (_sim, client) = start().await;
    let (status, _, body) = send(
        &client,
        Method::POST,
        "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        "application/json",
        r#"{"metadata": {"name": "c", "lables": {"a": "b"}}, "data": {"k": "v"}}"#.into(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
         unknown field \"metadata.lables\""
    );
}

#[tokio::test]
async fn an_unsupported_directive_is_invalid() {
    let (_sim, client) = start().await;
    let (status, _, body) = send(
        &client,
        Method::POST,
        &format!("{WIDGETS}?fieldValidation=Loose"),
        "application/json",
        SLOPPY.into(),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["details"]["kind"], "CreateOptions");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Unsupported value: \"Loose\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
    );
}
