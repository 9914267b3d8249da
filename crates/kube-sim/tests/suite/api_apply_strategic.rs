//! Server-side apply (create on apply, managedFields, fieldManager required) and
//! strategic merge patches (per-name list merge, `$patch: delete`, 415 for CRs).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::json;

async fn start() -> (RunningKubeSim, Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    (sim, client)
}

#[tokio::test]
async fn apply_creates_then_updates_and_records_the_manager() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PatchParams::apply("helm");
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg"}, "data": {"a": "1"}});
    let created = api.patch("cfg", &pp, &Patch::Apply(&first)).await.unwrap();
    assert_eq!(created.data.unwrap()["a"], "1");
    let mf = created.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("helm"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(mf[0].fields_type.as_deref(), Some("FieldsV1"));
    let fields = serde_json::to_value(mf[0].fields_v1.as_ref().unwrap()).unwrap();
    assert!(fields.pointer("/f:data/f:a").is_some(), "{fields}");

    let second = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg"}, "data": {"a": "2", "b": "3"}});
    let updated = api.patch("cfg", &pp, &Patch::Apply(&second)).await.unwrap();
    let data = updated.data.unwrap();
    assert_eq!(data["a"], "2");
    assert_eq!(data["b"], "3");
    assert_eq!(updated.metadata.managed_fields.unwrap().len(), 1);
}

#[tokio::test]
async fn apply_without_field_manager_is_invalid() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let err = api
        .patch("x", &PatchParams::default(), &Patch::Apply(&body))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert_eq!(s.reason, "Invalid");
            assert!(
                s.message.contains("fieldManager: Required value"),
                "{}",
                s.message
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn strategic_merge_merges_containers_by_name() {
    let (_sim, client) = start().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "side:1"}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]},
        {"name": "side", "$patch": "delete"}]}}}});
    let out = api
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let v = serde_json::to_value(out).unwrap();
    let containers = v.pointer("/spec/template/spec/containers").unwrap();
    assert_eq!(containers.as_array().unwrap().len(), 1, "{containers}");
    assert_eq!(containers[0]["image"], "app:2");
    let env: Vec<&str> = containers[0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(env, ["A", "B"]);
}
