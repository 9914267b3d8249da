//! Streaming lists (`sendInitialEvents=true`): initial ADDED events for the selected
//! objects, then the `k8s.io/initial-events-end` bookmark; selectors filter live events.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, Config};
use kube_sim::server::KubeSim;
use serde_json::json;

fn cm(name: &str, tier: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": tier}}})).unwrap()
}

#[tokio::test]
async fn streaming_list_ends_with_the_initial_events_bookmark() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("a", "web"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", "db"))
        .await
        .unwrap();
    let wp = WatchParams::streaming_lists().labels("tier=web");
    let mut stream = api.watch(&wp, "").await.unwrap().boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o.metadata.name.as_deref(), Some("a")),
        other => panic!("expected ADDED a, got {other:?}"),
    }
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Bookmark(b)) => assert_eq!(
            b.metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        ),
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    api.create(&PostParams::default(), &cm("c", "db"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("d", "web"))
        .await
        .unwrap();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o.metadata.name.as_deref(), Some("d")),
        other => panic!("expected ADDED d (c filtered out), got {other:?}"),
    }
}
