//! kube-rs against the HTTP server: CRUD, label selectors, conflicts,
//! merge patch, status subresource, watch, and Status error shapes.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client, Config};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::json;

async fn start() -> (RunningKubeSim, Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let config = Config::new(sim.base_url.parse().unwrap());
    let client = Client::try_from(config).unwrap();
    (sim, client)
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn create_get_list_with_selectors_and_not_found_status() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", json!({"app": "y"})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("c", json!({})))
        .await
        .unwrap();
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        let mut v: Vec<String> = l
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app=x"))
                .await
                .unwrap()
        ),
        ["a"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app!=x"))
                .await
                .unwrap()
        ),
        ["b", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app"))
                .await
                .unwrap()
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("!app"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    let err = api.get("missing").await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 404);
            assert_eq!(s.reason, "NotFound");
            assert_eq!(s.message, "configmaps \"missing\" not found");
        }
        other => panic!("unexpected {other:?}"),
    }
    let dup = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(dup, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"));
}

#[tokio::test]
async fn stale_replace_conflicts_and_merge_patch_applies() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": null, "n": "1"}})),
    )
    .await
    .unwrap();
    let now = api.get("a").await.unwrap();
    assert_eq!(
        now.data.as_ref().unwrap().get("n").map(String::as_str),
        Some("1")
    );
    assert!(!now.data.as_ref().unwrap().contains_key("k"));
    let err = api
        .replace("a", &PostParams::default(), &first)
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"));
    let strategic = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"m": "2"}})),
        )
        .await
        .unwrap();
    let data = strategic.data.unwrap();
    assert_eq!((data["n"].as_str(), data["m"].as_str()), ("1", "2"));
}

#[tokio::test]
async fn main_endpoint_ignores_status_and_status_endpoint_ignores_spec() {
    let (_sim, client) = start().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}}},
        "status": {"replicas": 7}
    }))
    .unwrap();
    let d = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let p = api
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    let status_before = p.status.as_ref().and_then(|s| s.replicas);
    assert_ne!(status_before, Some(9));
    let s = api
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}, "status": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(s.status.and_then(|s| s.replicas), Some(4));
    assert_eq!(s.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(s.metadata.generation, Some(2));
}

#[tokio::test]
async fn watch_streams_changes_and_reports_expired_versions() {
    let sim = KubeSim::builder().watch_history(2).start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let start_rv = sim.store().resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default(), &start_rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("w", json!({})))
        .await
        .unwrap();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o.metadata.name.as_deref(), Some("w")),
        other => panic!("unexpected {other:?}"),
    }
    api.delete("w", &DeleteParams::default()).await.unwrap();
    assert!(matches!(
        stream.try_next().await.unwrap(),
        Some(WatchEvent::Deleted(_))
    ));
    for i in 0..4 {
        api.create(&PostParams::default(), &cm(&format!("x{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut old = api
        .watch(&WatchParams::default(), &start_rv)
        .await
        .unwrap()
        .boxed();
    match old.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn namespace_deletion_removes_its_contents_then_itself() {
    let (_sim, client) = start().await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gone"}})).unwrap(),
    )
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "gone");
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    nss.delete("gone", &DeleteParams::default()).await.unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(nss.get_opt("gone").await.unwrap().is_none());
    let err = api
        .create(&PostParams::default(), &cm("b", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}

fn owned_cm(name: &str, owner: &ConfigMap) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid
    }]}}))
    .unwrap()
}

#[tokio::test]
async fn deleting_an_owner_collects_dependents_unless_orphaned() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let child = api
        .create(&PostParams::default(), &owned_cm("child", &owner))
        .await
        .unwrap();
    api.create(&PostParams::default(), &owned_cm("grandchild", &child))
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(api.get_opt("child").await.unwrap().is_none());
    assert!(api.get_opt("grandchild").await.unwrap().is_none());

    let owner = api
        .create(&PostParams::default(), &cm("owner2", json!({})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &owned_cm("kept", &owner))
        .await
        .unwrap();
    api.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    let kept = api.get("kept").await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}
