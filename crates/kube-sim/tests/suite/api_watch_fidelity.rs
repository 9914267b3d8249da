//! Watch fidelity: bookmarks, `timeoutSeconds`, streams cut by the test hook, and kube-rs
//! (watcher + reflector, and a Controller using the finalizer helper) recovering from a cut.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{reflector, watcher};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

async fn start(bookmarks: Duration) -> (RunningKubeSim, kube::Client) {
    let sim = KubeSim::builder()
        .bookmark_interval(bookmarks)
        .start()
        .await
        .unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    (sim, client)
}

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Opens a raw watch and returns a stream of decoded events.
async fn raw_watch(
    sim: &RunningKubeSim,
    query: &str,
) -> impl futures::Stream<Item = Value> + Unpin + use<> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&{query}",
        sim.base_url
    );
    let resp = client.get(uri.parse().unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().into_data_stream();
    let lines = body
        .map(|chunk| chunk.unwrap())
        .scan(String::new(), |buf, chunk| {
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
            let mut out = Vec::new();
            while let Some(i) = buf.find('\n') {
                let line: String = buf.drain(..=i).collect();
                out.push(serde_json::from_str::<Value>(line.trim()).unwrap());
            }
            futures::future::ready(Some(futures::stream::iter(out)))
        })
        .flatten();
    Box::pin(lines)
}

#[tokio::test]
async fn bookmarks_carry_the_latest_resource_version_when_allowed() {
    let (sim, client) = start(Duration::from_millis(200)).await;
    let mut events = raw_watch(&sim, "allowWatchBookmarks=true").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    let added = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added["type"], "ADDED");
    let bookmark = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
    let bookmark_rv: u64 = bookmark["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(bookmark_rv >= rv, "{bookmark_rv} < {rv}");

    // Without allowWatchBookmarks only real events arrive.
    let mut plain = raw_watch(&sim, "").await;
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    for _ in 0..3 {
        let e = tokio::time::timeout(WAIT, plain.next())
            .await
            .unwrap()
            .unwrap();
        assert_ne!(e["type"], "BOOKMARK", "{e}");
        if e["object"]["metadata"]["name"] == "b" {
            return;
        }
    }
    panic!("the create of b never arrived");
}

#[tokio::test]
async fn a_selector_watch_sees_objects_enter_and_leave_the_selection() {
    let (sim, client) = start(Duration::from_secs(60)).await;
    let mut events = raw_watch(&sim, "labelSelector=team%3Dblue").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("x")).await.unwrap();
    let label = |team: &str| {
        kube::api::Patch::Merge(serde_json::json!({"metadata": {"labels": {"team": team}}}))
    };
    let params = kube::api::PatchParams::default();
    let joined = api.patch("x", &params, &label("blue")).await.unwrap();
    let relabelled = api.patch("x", &params, &label("red")).await.unwrap();
    // Changes outside the selection are not reported at all.
    api.patch("x", &params, &label("green")).await.unwrap();
    api.create(&PostParams::default(), &cm("marker"))
        .await
        .unwrap();
    api.patch("marker", &params, &label("blue")).await.unwrap();

    let mut next = async || {
        tokio::time::timeout(WAIT, events.next())
            .await
            .unwrap()
            .unwrap()
    };
    let added = next().await;
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(
        added["object"]["metadata"]["resourceVersion"].as_str(),
        joined.metadata.resource_version.as_deref()
    );
    // Leaving: DELETED with the last state that matched, at the new resourceVersion.
    let left = next().await;
    assert_eq!(left["type"], "DELETED", "{left}");
    assert_eq!(left["object"]["metadata"]["labels"]["team"], "blue");
    assert_eq!(
        left["object"]["metadata"]["resourceVersion"].as_str(),
        relabelled.metadata.resource_version.as_deref()
    );
    let marker = next().await;
    assert_eq!(marker["type"], "ADDED", "{marker}");
    assert_eq!(marker["object"]["metadata"]["name"], "marker");
}

#[tokio::test]
async fn timeout_seconds_and_cut_watches_end_the_stream() {
    let (sim, _client) = start(Duration::from_secs(60)).await;
    let mut timed = raw_watch(&sim, "timeoutSeconds=1").await;
    let end = tokio::time::timeout(WAIT, timed.next()).await.unwrap();
    assert!(end.is_none(), "{end:?}");

    let mut cut = raw_watch(&sim, "").await;
    let mut other = raw_watch(&sim, "").await;
    // Cutting another resource's watches leaves these open...
    tokio::time::sleep(Duration::from_millis(100)).await;
    sim.hooks().cut_watches(Some("secrets"));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), cut.next())
            .await
            .is_err(),
        "a configmaps watch ended when secrets watches were cut"
    );
    // ...cutting all of them ends both.
    sim.hooks().cut_watches(None);
    assert!(
        tokio::time::timeout(WAIT, cut.next())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tokio::time::timeout(WAIT, other.next())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_reflector_catches_up_after_its_watch_is_cut() {
    let (sim, client) = start(Duration::from_secs(60)).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()));
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    assert!(
        reader
            .state()
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("before"))
    );

    sim.hooks().cut_watches(None);
    api.create(&PostParams::default(), &cm("after"))
        .await
        .unwrap();
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let names: Vec<String> = reader
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if names == vec!["after".to_string()] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reflector state stuck at {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReconcileError(String);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_with_a_finalizer_survives_a_cut_watch() {
    let (sim, client) = start(Duration::from_secs(60)).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cleanups = Arc::new(AtomicUsize::new(0));
    let ctx = Arc::new((api.clone(), cleanups.clone()));
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .run(
            |obj: Arc<ConfigMap>, ctx: Arc<(Api<ConfigMap>, Arc<AtomicUsize>)>| async move {
                let counter = ctx.1.clone();
                finalizer(
                    &ctx.0,
                    "test.kube-sim.io/cleanup",
                    obj,
                    |event| async move {
                        match event {
                            Finalizer::Apply(_) => Ok::<_, ReconcileError>(Action::await_change()),
                            Finalizer::Cleanup(_) => {
                                counter.fetch_add(1, Ordering::SeqCst);
                                Ok(Action::await_change())
                            }
                        }
                    },
                )
                .await
                .map_err(|e| ReconcileError(e.to_string()))
            },
            |_obj, _err: &ReconcileError, _ctx| Action::requeue(Duration::from_millis(200)),
            ctx,
        )
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    api.create(&PostParams::default(), &cm("guarded"))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let obj = api.get("guarded").await.unwrap();
        if obj
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"test.kube-sim.io/cleanup".to_string())
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "finalizer never added"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    sim.hooks().cut_watches(None);
    api.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while api.get_opt("guarded").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "deletion never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cleanups.load(Ordering::SeqCst), 1);
    task.abort();
}

#[tokio::test]
async fn a_resumed_watch_can_be_expired_and_a_reflector_lists_again() {
    let (sim, client) = start(Duration::from_secs(60)).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    let rv = api
        .get("before")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sim.hooks().expire_watch_resumes(Some("configmaps"), 1.0);
    // Resuming from a resourceVersion is answered with a 410 ERROR event, as by a server whose
    // watch cache has moved on; a watch without one still starts.
    let mut resumed = raw_watch(&sim, &format!("resourceVersion={rv}")).await;
    let gone = tokio::time::timeout(WAIT, resumed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone["type"], "ERROR", "{gone}");
    assert_eq!(gone["object"]["code"], 410, "{gone}");
    let mut fresh = raw_watch(&sim, "").await;
    let added = tokio::time::timeout(WAIT, fresh.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added["type"], "ADDED", "{added}");

    // A reflector whose watches keep expiring still converges by listing again.
    sim.hooks().clear_random_faults();
    sim.hooks().expire_watch_resumes(Some("configmaps"), 0.5);
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()));
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    for round in 0..5 {
        sim.hooks().cut_watches(None);
        api.create(&PostParams::default(), &cm(&format!("after-{round}")))
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while reader.state().len() < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reflector stuck at {} objects",
            reader.state().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        sim.hooks()
            .injected_failures()
            .get(&410)
            .is_some_and(|n| *n >= 1)
    );
    task.abort();
}
