//! Set-based label selectors, field selectors, JSON patch and malformed bodies.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Config};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::json;

async fn start() -> (RunningKubeSim, Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    (sim, client)
}

async fn seed(api: &Api<ConfigMap>) {
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "cache")] {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"tier": tier}}, "data": {"k": "v"}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

async fn names(api: &Api<ConfigMap>, lp: &ListParams) -> Vec<String> {
    let mut v: Vec<String> = api
        .list(lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn set_based_and_field_selectors_filter_lists() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    seed(&api).await;
    assert_eq!(
        names(&api, &ListParams::default().labels("tier in (web,db)")).await,
        ["a", "b"]
    );
    assert_eq!(
        names(&api, &ListParams::default().labels("tier notin (web,db)")).await,
        ["c"]
    );
    assert_eq!(
        names(
            &api,
            &ListParams::default().labels("tier in (web,db),tier!=db")
        )
        .await,
        ["a"]
    );
    assert_eq!(
        names(&api, &ListParams::default().fields("metadata.name=b")).await,
        ["b"]
    );
    assert_eq!(
        names(&api, &ListParams::default().fields("metadata.name!=b")).await,
        ["a", "c"]
    );
}

fn json_patch_req(name: &str, ops: &serde_json::Value) -> http::Request<Vec<u8>> {
    http::Request::patch(format!("/api/v1/namespaces/default/configmaps/{name}"))
        .header("content-type", "application/json-patch+json")
        .body(ops.to_string().into_bytes())
        .unwrap()
}

#[tokio::test]
async fn json_patch_applies_operations_and_failed_test_leaves_object_unchanged() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    seed(&api).await;
    let ops = json!([
        {"op": "add", "path": "/data/n", "value": "1"},
        {"op": "remove", "path": "/data/k"},
        {"op": "replace", "path": "/metadata/labels/tier", "value": "edge"}
    ]);
    let patched: ConfigMap = client.request(json_patch_req("a", &ops)).await.unwrap();
    let data = patched.data.unwrap();
    assert_eq!(data.get("n").map(String::as_str), Some("1"));
    assert!(!data.contains_key("k"));
    assert_eq!(patched.metadata.labels.unwrap()["tier"], "edge");
    let failing = json!([
        {"op": "test", "path": "/data/n", "value": "2"},
        {"op": "add", "path": "/data/z", "value": "1"}
    ]);
    let err = client
        .request::<ConfigMap>(json_patch_req("a", &failing))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 422));
    assert!(!api.get("a").await.unwrap().data.unwrap().contains_key("z"));
}

#[tokio::test]
async fn garbage_bodies_get_bad_request_and_the_server_keeps_serving() {
    let (sim, client) = start().await;
    let garbage: [&[u8]; 5] = [b"", b"{", b"[1,2]", b"\xff\xfe\x00", b"\"str\""];
    for body in garbage {
        let req = http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(body.to_vec())
            .unwrap();
        let err = client.request::<serde_json::Value>(req).await.unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.reason == "BadRequest"),
            "{err:?}"
        );
        let req = http::Request::patch("/api/v1/namespaces/default/configmaps/x")
            .header("content-type", "application/json-patch+json")
            .body(body.to_vec())
            .unwrap();
        assert!(client.request::<serde_json::Value>(req).await.is_err());
    }
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    seed(&api).await;
    assert_eq!(
        sim.store()
            .list_objects("", "configmaps", Some("default"))
            .len(),
        3
    );
}

#[tokio::test]
async fn limit_and_continue_page_through_every_object_once() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    seed(&api).await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(1));
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(second.items.len(), 1);
    assert!(
        second
            .metadata
            .continue_
            .as_deref()
            .unwrap_or("")
            .is_empty()
    );
    let mut all: Vec<String> = first
        .items
        .into_iter()
        .chain(second.items)
        .filter_map(|c| c.metadata.name)
        .collect();
    all.sort();
    assert_eq!(all, ["a", "b", "c"]);
}

/// kube's `list_metadata`/`get_metadata` ask for `PartialObjectMetadata[List]`: the real server
/// answers with the metadata alone (the operator lists Secrets that way, for their finalizers,
/// without their data).
#[tokio::test]
async fn metadata_only_lists_and_gets_carry_no_data() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    seed(&api).await;
    let req = |accept: &str| {
        http::Request::get("/api/v1/namespaces/default/configmaps?labelSelector=tier%3Dweb")
            .header("accept", accept)
            .body(Vec::new())
            .unwrap()
    };
    let raw: serde_json::Value = client
        .request(req(
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        ))
        .await
        .unwrap();
    assert_eq!(raw["kind"], "PartialObjectMetadataList");
    assert_eq!(raw["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(raw["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(raw["items"][0]["metadata"]["name"], "a");
    assert!(raw["items"][0].get("data").is_none(), "{raw}");
    assert_eq!(
        raw["items"].as_array().map(Vec::len),
        Some(1),
        "selectors apply"
    );

    let listed = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 3);
    let one = api.get_metadata("b").await.unwrap();
    assert_eq!(one.metadata.labels.unwrap_or_default()["tier"], "db");
    let raw: serde_json::Value = client
        .request(
            http::Request::get("/api/v1/namespaces/default/configmaps/b")
                .header(
                    "accept",
                    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                )
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(raw["kind"], "PartialObjectMetadata");
    assert!(raw.get("data").is_none(), "{raw}");
}

/// kube's `watch_metadata` (and a metadata-only reflector) asks for `PartialObjectMetadata`:
/// the real server sends every event's object as its metadata alone. kube-sim sent whole
/// objects before (the operator decoded them either way, so nothing caught it).
#[tokio::test]
async fn metadata_only_watches_carry_no_data() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::WatchParams;
    use kube::core::WatchEvent;
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let raw = |rv: &str| {
        http::Request::get(format!(
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=2"
        ))
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap()
    };
    let rv = api
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    seed(&api).await;
    let body = client.request_text(raw(&rv)).await.unwrap();
    let lines: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        assert_eq!(line["type"], "ADDED");
        assert_eq!(line["object"]["kind"], "PartialObjectMetadata", "{line}");
        assert!(line["object"].get("data").is_none(), "{line}");
        assert!(line["object"]["metadata"]["name"].is_string(), "{line}");
    }
    let mut events = api
        .watch_metadata(&WatchParams::default().timeout(2), &rv)
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    while let Some(event) = events.try_next().await.unwrap() {
        if let WatchEvent::Added(meta) = event {
            names.push(meta.metadata.name.unwrap_or_default());
        }
    }
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
}
