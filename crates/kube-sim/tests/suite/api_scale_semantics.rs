//! What the scale work must not change, and what it fixed: paged lists continue from the last
//! key served (real-server tokens), a watcher that falls behind resumes from history instead of
//! ending, a busy resource type does not disturb watchers of another, and a changed CRD schema
//! applies to the very next write.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, Config};
use kube_sim::server::KubeSim;
use serde_json::{Value, json};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

fn stored_cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

/// More events than a watcher's live buffer holds (4,096).
const BURST: usize = 5000;

/// Every page of a list is as of its first page, and so is the list's resourceVersion, as a
/// real API server serves it: objects created while the client pages are in no page, and a
/// watch from the list's resourceVersion tells of each of them. Continuing from the last key
/// with the current state lost an object created behind the cursor: it was in no page, and
/// the last page's later resourceVersion started the watch after its creation.
#[tokio::test]
async fn paged_lists_are_one_snapshot_and_a_watch_from_it_misses_nothing() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    paging_while_objects_change(client, "default").await;

    // A list forgotten meanwhile is 410 Gone, as a compacted one is on a real server.
    let api: Api<ConfigMap> = Api::namespaced(
        Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap(),
        "default",
    );
    let again = api.list(&ListParams::default().limit(1)).await.unwrap();
    let token = again.metadata.continue_.clone().unwrap();
    api.list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    match api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected a Status, got {other:?}"),
    }
}

/// The same scenario against the real kube-apiserver: what kube-sim does above is what it
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_pages_one_snapshot_too() {
    let real = test_apiserver::ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = real.admin_client().await.expect("admin client");
    paging_while_objects_change(client, "default").await;
}

/// Pages through five ConfigMaps of `namespace` (which has no others) while one is created
/// behind the cursor, one ahead of it and one deleted; checks the pages, their
/// resourceVersion, and what a watch from it tells.
async fn paging_while_objects_change(client: Client, namespace: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let names = |l: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .filter(|n| n != "kube-root-ca.crt")
            .collect()
    };
    assert_eq!(names(&first), ["c0", "c1"]);
    let token = first.metadata.continue_.clone().unwrap();
    // Created while the client pages: one behind the cursor, one ahead of it; one deleted.
    api.create(&PostParams::default(), &cm("a-late"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("c9")).await.unwrap();
    api.delete("c3", &Default::default()).await.unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["c2", "c3"]);
    let last = api
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(&last), ["c4"]);
    assert_eq!(last.metadata.continue_.as_deref().unwrap_or(""), "");
    let rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(
        second.metadata.resource_version.as_deref(),
        Some(rv.as_str())
    );
    assert_eq!(last.metadata.resource_version.as_deref(), Some(rv.as_str()));

    // What the pages left out, a watch from the list's resourceVersion tells.
    let events: Vec<(&str, String)> = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .filter_map(|e| async move {
            match e.unwrap() {
                WatchEvent::Added(o) => Some(("ADDED", o.metadata.name.unwrap())),
                WatchEvent::Deleted(o) => Some(("DELETED", o.metadata.name.unwrap())),
                WatchEvent::Bookmark(_) => None,
                other => Some(("OTHER", format!("{other:?}"))),
            }
        })
        .take(3)
        .collect()
        .await;
    assert_eq!(
        events,
        [
            ("ADDED", "a-late".to_string()),
            ("ADDED", "c9".to_string()),
            ("DELETED", "c3".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_continue_token_the_server_did_not_issue_is_a_bad_request() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let err = api
        .list(&ListParams::default().limit(1).continue_token("2"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 400);
            assert!(s.message.contains("continue"), "{}", s.message);
        }
        other => panic!("expected a Status, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watcher_that_falls_behind_resumes_from_history_without_losing_events() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = sim.store().resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    // The test runtime has one thread: the stream cannot drain while this burst is written.
    for i in 0..BURST {
        sim.store()
            .create(
                "",
                "configmaps",
                Some("default"),
                stored_cm(&format!("c{i:05}")),
            )
            .unwrap();
    }
    for i in 0..BURST {
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Added(o)) => {
                assert_eq!(o.metadata.name.unwrap(), format!("c{i:05}"));
            }
            other => panic!("event {i}: unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_busy_resource_type_does_not_end_watches_of_another() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let rv = sim.store().resource_version().to_string();
    let mut stream = secrets
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    for i in 0..BURST {
        sim.store()
            .create(
                "",
                "configmaps",
                Some("default"),
                stored_cm(&format!("c{i:05}")),
            )
            .unwrap();
    }
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "after-the-burst"}})).unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Added(o)) => {
            assert_eq!(o.metadata.name.as_deref(), Some("after-the-burst"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_changed_crd_schema_applies_to_the_next_write() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = Client::try_from(Config::new(sim.base_url.parse().unwrap())).unwrap();
    let crd_with_max = |max: u64| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "string", "maxLength": max}}}}}}}]}})
    };
    let crds: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    let crd = crds
        .create(
            &PostParams::default(),
            &serde_json::from_value(crd_with_max(3)).unwrap(),
        )
        .await
        .unwrap();
    let widgets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("example.com", "v1", "Widget"),
            "widgets",
        ),
    );
    let widget = |name: &str| -> kube::api::DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": "large"}}))
        .unwrap()
    };
    let refused = widgets
        .create(&PostParams::default(), &widget("first"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 422),
        "{refused:?}"
    );
    let mut relaxed: kube::api::DynamicObject = serde_json::from_value(crd_with_max(10)).unwrap();
    relaxed.metadata.resource_version = crd.metadata.resource_version;
    crds.replace("widgets.example.com", &PostParams::default(), &relaxed)
        .await
        .unwrap();
    widgets
        .create(&PostParams::default(), &widget("second"))
        .await
        .unwrap();
}
