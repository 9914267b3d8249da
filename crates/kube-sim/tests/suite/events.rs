//! Events are one resource served through two APIs: what a controller writes through
//! events.k8s.io/v1 (kube-rs `Recorder`) is what `kubectl describe`, `kubectl get events` and
//! `kubectl events` read through core v1, with the real server's field mapping, shared
//! resourceVersions, watches and field selectors. The kubectl tests need
//! `scripts/install-test-tools` (or `KUBECTL_BIN`).

use crate::tools;

use std::path::PathBuf;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::discovery::ApiResource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::{Value, json};

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

struct Cluster {
    sim: RunningKubeSim,
    client: kube::Client,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let sim = KubeSim::builder().start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        Kubeconfig::new(&sim.base_url, "admin", Credential::Token("admin".into()))
            .write(&kubeconfig)
            .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
        Cluster {
            sim,
            client,
            kubeconfig,
            _dir: dir,
        }
    }

    async fn kubectl(&self, args: &[&str]) -> tools::Run {
        tools::run("kubectl", &self.kubeconfig, self._dir.path(), args).await
    }

    async fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> tools::Run {
        tools::run_stdin("kubectl", &self.kubeconfig, self._dir.path(), args, stdin).await
    }

    /// Installs the Widget CRD and creates `names` in `default`; returns their references.
    async fn widgets(&self, names: &[&str]) -> Vec<ObjectReference> {
        self.kubectl_stdin(&["apply", "-f", "-"], WIDGET_CRD)
            .await
            .ok();
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/widgets.example.com",
        ])
        .await
        .ok();
        let resource = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), "default", &resource);
        let mut refs = Vec::new();
        for name in names {
            let widget = DynamicObject::new(name, &resource).data(json!({"spec": {"size": 1}}));
            let created = api.create(&PostParams::default(), &widget).await.unwrap();
            refs.push(ObjectReference {
                api_version: Some("example.com/v1".into()),
                kind: Some("Widget".into()),
                name: created.metadata.name.clone(),
                namespace: created.metadata.namespace.clone(),
                uid: created.metadata.uid.clone(),
                ..Default::default()
            });
        }
        refs
    }

    fn recorder(&self) -> Recorder {
        Recorder::new(
            self.client.clone(),
            Reporter {
                controller: "widget-controller".into(),
                instance: Some("widget-controller-0".into()),
            },
        )
    }
}

fn event(type_: EventType, reason: &str, note: &str) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    }
}

fn json_of(run: &tools::Run) -> Value {
    serde_json::from_str(run.ok()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_lists_the_events_a_controller_recorded_through_events_k8s_io() {
    let cluster = Cluster::start().await;
    let refs = cluster.widgets(&["w1", "w2"]).await;
    let recorder = cluster.recorder();
    let failed = event(EventType::Warning, "SyncFailed", "could not reach omni");
    recorder.publish(&failed, &refs[0]).await.unwrap();
    // The same event again: the Recorder patches the series instead of creating another.
    recorder.publish(&failed, &refs[0]).await.unwrap();
    recorder
        .publish(&event(EventType::Normal, "Ready", "in sync"), &refs[0])
        .await
        .unwrap();
    recorder
        .publish(
            &event(EventType::Normal, "Unrelated", "other widget"),
            &refs[1],
        )
        .await
        .unwrap();

    let described = cluster.kubectl(&["describe", "widget", "w1"]).await;
    let text = described.ok();
    let events = text.split("Events:").nth(1).unwrap_or_default();
    let failed_row = events
        .lines()
        .find(|l| l.contains("SyncFailed"))
        .unwrap_or_else(|| panic!("{text}"));
    for cell in [
        "Warning",
        "widget-controller",
        "could not reach omni",
        "(x2 over",
    ] {
        assert!(failed_row.contains(cell), "{cell}: {text}");
    }
    let ready_row = events.lines().find(|l| l.contains("Ready"));
    assert!(
        ready_row.is_some_and(|r| r.contains("Normal") && r.contains("in sync")),
        "{text}"
    );
    assert!(!events.contains("Unrelated"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_events_and_kubectl_events_find_them_by_involved_object() {
    let cluster = Cluster::start().await;
    let refs = cluster.widgets(&["w1", "w2"]).await;
    let recorder = cluster.recorder();
    recorder
        .publish(
            &event(EventType::Warning, "SyncFailed", "could not reach omni"),
            &refs[0],
        )
        .await
        .unwrap();
    recorder
        .publish(
            &event(EventType::Normal, "Unrelated", "other widget"),
            &refs[1],
        )
        .await
        .unwrap();

    let all = json_of(
        &cluster
            .kubectl(&["get", "events", "-A", "-o", "json"])
            .await,
    );
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2), "{all}");

    let selected = json_of(
        &cluster
            .kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=w1,type=Warning,reason=SyncFailed",
                "-o",
                "json",
            ])
            .await,
    );
    let items = selected["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{selected}");
    let core = &items[0];
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["kind"], "Widget");
    assert_eq!(core["involvedObject"]["uid"], json!(refs[0].uid));
    assert_eq!(core["message"], "could not reach omni");
    assert_eq!(core["reportingComponent"], "widget-controller");
    assert_eq!(core["reportingInstance"], "widget-controller-0");
    assert!(core.get("regarding").is_none() && core.get("note").is_none());

    let by_uid = json_of(
        &cluster
            .kubectl(&[
                "get",
                "events",
                "--field-selector",
                &format!(
                    "involvedObject.kind=Widget,involvedObject.namespace=default,involvedObject.uid={}",
                    refs[0].uid.as_deref().unwrap()
                ),
                "-o",
                "json",
            ])
            .await,
    );
    assert_eq!(
        by_uid["items"].as_array().map(Vec::len),
        Some(1),
        "{by_uid}"
    );

    // The server prints the Event columns kubectl shows.
    let table = cluster.kubectl(&["get", "events"]).await;
    let header = table.ok().lines().next().unwrap_or_default().to_owned();
    for column in ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"] {
        assert!(header.contains(column), "{header}");
    }
    assert!(table.stdout.contains("widget/w1"), "{}", table.stdout);

    let listed = cluster.kubectl(&["events", "--for", "widget/w1"]).await;
    let text = listed.ok();
    assert!(
        text.contains("SyncFailed") && text.contains("could not reach omni"),
        "{text}"
    );
    assert!(!text.contains("Unrelated"), "{text}");

    // A label Events cannot be selected by is refused, as by the real server.
    let bad = cluster
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.color=red",
        ])
        .await;
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr
            .contains("field label not supported: involvedObject.color"),
        "{}",
        bad.stderr
    );
}

#[tokio::test]
async fn a_core_event_is_the_same_object_through_events_k8s_io() {
    let cluster = Cluster::start().await;
    let core: Api<CoreEvent> = Api::namespaced(cluster.client.clone(), "default");
    let v1: Api<EventsV1Event> = Api::namespaced(cluster.client.clone(), "default");
    let mut written: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "pod-a.1"},
        "involvedObject": {"kind": "Pod", "name": "pod-a", "namespace": "default"},
        "reason": "BackOff", "message": "restarting", "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"}, "count": 3,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z",
    }))
    .unwrap();
    written = core.create(&PostParams::default(), &written).await.unwrap();

    let read = v1.get("pod-a.1").await.unwrap();
    assert_eq!(read.metadata.uid, written.metadata.uid);
    assert_eq!(
        read.metadata.resource_version,
        written.metadata.resource_version
    );
    assert_eq!(read.note.as_deref(), Some("restarting"));
    assert_eq!(
        read.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("pod-a")
    );
    assert_eq!(
        read.deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("kubelet")
    );
    assert_eq!(read.deprecated_count, Some(3));

    // events.k8s.io selects with its own spelling; the core one is not a label there.
    let selected = v1
        .list(&ListParams::default().fields("regarding.name=pod-a,reason=BackOff"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let wrong = v1
        .list(&ListParams::default().fields("involvedObject.name=pod-a"))
        .await
        .unwrap_err();
    assert!(
        wrong
            .to_string()
            .contains("field label not supported: involvedObject.name"),
        "{wrong}"
    );

    // One object: deleting through one API deletes it from the other.
    v1.delete("pod-a.1", &Default::default()).await.unwrap();
    assert!(core.get_opt("pod-a.1").await.unwrap().is_none());
    assert!(
        cluster
            .sim
            .store()
            .list_objects("events.k8s.io", "events", None)
            .is_empty()
    );
}

#[tokio::test]
async fn a_core_watch_sees_events_written_through_events_k8s_io_and_back() {
    let cluster = Cluster::start().await;
    let core: Api<CoreEvent> = Api::namespaced(cluster.client.clone(), "default");
    let v1: Api<EventsV1Event> = Api::namespaced(cluster.client.clone(), "default");
    let params = WatchParams::default().fields("involvedObject.name=w1");
    let mut core_watch = core.watch(&params, "0").await.unwrap().boxed();
    let mut v1_watch = v1
        .watch(&WatchParams::default().fields("regarding.name=w1"), "0")
        .await
        .unwrap()
        .boxed();

    let recorded: EventsV1Event = serde_json::from_value(json!({
        "metadata": {"name": "w1.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "widget-controller", "reportingInstance": "widget-controller-0",
        "action": "Reconcile", "reason": "Ready", "type": "Normal", "note": "in sync",
        "regarding": {"kind": "Widget", "name": "w1", "namespace": "default"},
    }))
    .unwrap();
    let created = v1.create(&PostParams::default(), &recorded).await.unwrap();
    // An Event about another object is outside both watches' selections.
    let other: EventsV1Event = serde_json::from_value(json!({
        "metadata": {"name": "w2.1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "c", "reportingInstance": "c-0", "action": "A",
        "reason": "Other", "type": "Normal", "regarding": {"kind": "Widget", "name": "w2"},
    }))
    .unwrap();
    v1.create(&PostParams::default(), &other).await.unwrap();

    match core_watch.try_next().await.unwrap() {
        Some(WatchEvent::Added(e)) => {
            assert_eq!(e.message.as_deref(), Some("in sync"));
            assert_eq!(e.reporting_component.as_deref(), Some("widget-controller"));
            assert_eq!(
                e.metadata.resource_version,
                created.metadata.resource_version
            );
        }
        other => panic!("{other:?}"),
    }
    match v1_watch.try_next().await.unwrap() {
        Some(WatchEvent::Added(e)) => assert_eq!(e.note.as_deref(), Some("in sync")),
        other => panic!("{other:?}"),
    }

    // An update through core v1 reaches the events.k8s.io watch in its spelling.
    let mut current = core.get("w1.1").await.unwrap();
    current.message = Some("still in sync".into());
    core.replace("w1.1", &PostParams::default(), &current)
        .await
        .unwrap();
    match v1_watch.try_next().await.unwrap() {
        Some(WatchEvent::Modified(e)) => {
            assert_eq!(e.note.as_deref(), Some("still in sync"));
            assert_eq!(e.reporting_controller.as_deref(), Some("widget-controller"));
        }
        other => panic!("{other:?}"),
    }
}
