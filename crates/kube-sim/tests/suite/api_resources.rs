//! Discovery, Secret defaulting, CRD registration and write counters.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Discovery;
use kube::{Api, Client, Config};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::json;

async fn start() -> (RunningKubeSim, Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    (sim, client)
}

fn widget_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

#[tokio::test]
async fn kube_discovery_sees_builtins_and_registered_crds() {
    let (sim, client) = start().await;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(widget_crd()).unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let conds = created.data["status"]["conditions"].as_array().unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True")
    );

    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.has_group("apps"));
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);

    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"a": 1}})).unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    assert!(
        sim.store()
            .get_object("example.com", "widgets", Some("default"), "w")
            .is_some()
    );

    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        sim.store()
            .resource_type("example.com", "widgets")
            .is_none()
    );
    assert!(
        sim.store()
            .get_object("example.com", "widgets", Some("default"), "w")
            .is_none()
    );
    let err = widgets.get("w").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}

#[tokio::test]
async fn secrets_fold_string_data_default_opaque_and_keep_type_immutable() {
    let (_sim, client) = start().await;
    let api: Api<Secret> = Api::namespaced(client, "default");
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"token": "abc"}}))
            .unwrap();
    let created = api.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert_eq!(created.data.unwrap()["token"].0, b"abc");
    assert!(created.string_data.is_none());
    let mut changed = api.get("s").await.unwrap();
    changed.type_ = Some("kubernetes.io/tls".into());
    let err = api
        .replace("s", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 422 && s.reason == "Invalid"));
}

#[tokio::test]
async fn writes_are_counted_separately_from_reads() {
    let (sim, client) = start().await;
    let api: Api<Secret> = Api::namespaced(client, "default");
    assert_eq!(sim.writes_total(), 0);
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
    api.get("s").await.unwrap();
    api.get("s").await.unwrap();
    assert_eq!(sim.writes_total(), 1);
    assert_eq!(sim.hooks().writes_to("secrets"), 1);
    assert_eq!(sim.hooks().reads_total(), 2);
}

#[tokio::test]
async fn injected_failures_hit_only_matching_requests_and_run_out() {
    let (sim, client) = start().await;
    let api: Api<Secret> = Api::namespaced(client, "default");
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
    sim.hooks()
        .fail_next("get", "secrets", Some("default"), Some("s"), 500, 2);
    for _ in 0..2 {
        let err = api.get("s").await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(s) if s.code == 500 && s.reason == "InternalError"));
    }
    api.get("s").await.unwrap();
    sim.hooks()
        .fail_next("create", "secrets", None, None, 500, 1);
    assert!(api.get("s").await.is_ok());
    let t: Secret = serde_json::from_value(json!({"metadata": {"name": "t"}})).unwrap();
    assert!(api.create(&PostParams::default(), &t).await.is_err());
    api.create(&PostParams::default(), &t).await.unwrap();
}
