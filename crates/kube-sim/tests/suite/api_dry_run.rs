//! `dryRun=All`: every write runs all checks and returns what would be stored, and nothing
//! changes: no stored object, no resourceVersion bump, no watch event. `kubectl apply
//! --dry-run=server` and `kubectl diff` rely on this.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, Config};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::json;

async fn start() -> (RunningKubeSim, Client, Api<ConfigMap>) {
    let sim = KubeSim::builder().start().await.unwrap();
    let config = Config::new(sim.base_url.parse().unwrap());
    let client = Client::try_from(config).unwrap();
    let api = Api::namespaced(client.clone(), "default");
    (sim, client, api)
}

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": value}})).unwrap()
}

fn dry_post() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

#[tokio::test]
async fn dry_run_writes_return_the_result_and_store_nothing() {
    let (_sim, _client, api) = start().await;
    let live = api
        .create(&PostParams::default(), &cm("live", "1"))
        .await
        .unwrap();
    let rv = live.metadata.resource_version.clone().unwrap();
    let watch_from = rv.clone();

    // create: the would-be object comes back (uid, timestamp) without a resourceVersion.
    let would = api.create(&dry_post(), &cm("ghost", "1")).await.unwrap();
    assert_eq!(would.metadata.name.as_deref(), Some("ghost"));
    assert!(would.metadata.uid.is_some());
    assert!(would.metadata.creation_timestamp.is_some());
    assert_eq!(would.metadata.resource_version, None);
    assert!(api.get_opt("ghost").await.unwrap().is_none());
    // ...and still fails as a real create would.
    let exists = api.create(&dry_post(), &cm("live", "2")).await.unwrap_err();
    assert!(
        matches!(exists, kube::Error::Api(ref s) if s.code == 409),
        "{exists}"
    );

    // update (PUT): the changed object comes back; the stored one is unchanged.
    let mut changed = live.clone();
    changed.data = Some([("k".to_string(), "2".to_string())].into());
    let would = api.replace("live", &dry_post(), &changed).await.unwrap();
    assert_eq!(would.data.unwrap()["k"], "2");
    let stored = api.get("live").await.unwrap();
    assert_eq!(stored.data.unwrap()["k"], "1");
    assert_eq!(
        stored.metadata.resource_version.as_deref(),
        Some(rv.as_str())
    );

    // merge patch and server-side apply.
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let would = api
        .patch(
            "live",
            &dry_patch,
            &Patch::Merge(json!({"data": {"k": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(would.data.unwrap()["k"], "3");
    let dry_apply = PatchParams {
        dry_run: true,
        ..PatchParams::apply("tester")
    };
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": "4"}});
    let would = api
        .patch("applied", &dry_apply, &Patch::Apply(applied))
        .await
        .unwrap();
    assert_eq!(would.data.unwrap()["k"], "4");
    assert!(api.get_opt("applied").await.unwrap().is_none());

    // delete: the object is returned and stays; preconditions are still checked.
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    api.delete("live", &dry_delete).await.unwrap();
    let stale = DeleteParams {
        dry_run: true,
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let conflict = api.delete("live", &stale).await.unwrap_err();
    assert!(
        matches!(conflict, kube::Error::Api(ref s) if s.code == 409),
        "{conflict}"
    );
    api.delete_collection(&dry_delete, &Default::default())
        .await
        .unwrap();
    let stored = api.get("live").await.unwrap();
    assert_eq!(stored.data.unwrap()["k"], "1");
    assert_eq!(
        stored.metadata.resource_version.as_deref(),
        Some(rv.as_str())
    );

    // No watcher saw any of it: the next event after `rv` is the real write below.
    let mut events = api
        .watch(&WatchParams::default().timeout(10), &watch_from)
        .await
        .unwrap()
        .boxed();
    api.patch(
        "live",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "real"}})),
    )
    .await
    .unwrap();
    match events.next().await {
        Some(Ok(WatchEvent::Modified(o))) => assert_eq!(o.data.unwrap()["k"], "real"),
        other => panic!("expected the real write first, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_dry_run_value_is_rejected() {
    let (sim, client, _api) = start().await;
    let req = http::Request::post("/api/v1/namespaces/default/configmaps?dryRun=Some")
        .header("content-type", "application/json")
        .body(br#"{"metadata":{"name":"x"}}"#.to_vec())
        .unwrap();
    let err = client.request::<serde_json::Value>(req).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a Status, got {err:?}");
    };
    assert_eq!(status.code, 422);
    assert!(status.message.contains("dryRun"), "{}", status.message);
    assert!(
        status.message.contains(r#"supported values: "All""#),
        "{}",
        status.message
    );
    assert!(
        sim.store()
            .list_objects("", "configmaps", Some("default"))
            .is_empty()
    );
}
