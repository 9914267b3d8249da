//! Differential fidelity: the same scripted requests against kube-sim and the real
//! kube-apiserver (`test-apiserver`, built by `scripts/install-test-tools`), answers compared:
//! status codes, reasons, causes and their field paths, messages, `Warning` headers, the objects
//! returned (volatile metadata masked), SSA managed fields and watch event sequences, for the
//! kinds the operator uses (our custom resources from the CRD chart, Secrets, Events, Leases,
//! Namespaces).
//!
//! A difference is either fixed in kube-sim or listed in [`DELIBERATE`] with its reason (and in
//! kube-sim's README). Every difference found is printed before the assertion fails, so one run
//! shows them all.

use std::time::Duration;

use http_body_util::BodyExt as _;
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::{Value, json};
use test_apiserver::ControlPlane;

const NS: &str = "diff";
const GROUP_PATH: &str = "/apis/omni.texashpc.com/v1alpha1/namespaces/diff";

/// Differences kept on purpose: `(step, JSON pointer into the compared answer, why)`.
const DELIBERATE: &[(&str, &str, &str)] = &[];

/// The answer to one request, as compared.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

impl Answer {
    fn as_value(&self) -> Value {
        json!({"code": self.code, "warnings": self.warnings, "body": self.body})
    }
}

struct Pair {
    _sim: RunningKubeSim,
    sim: kube::Client,
    _real: ControlPlane,
    real: kube::Client,
    differences: Vec<String>,
}

async fn send(client: &kube::Client, method: &str, path: &str, ct: &str, body: &[u8]) -> Answer {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, ct)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::from(body.to_vec()))
        .expect("request");
    let response = client.send(request).await.expect("send");
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer {
        code,
        warnings,
        body: normalize(body),
    }
}

/// Masks what differs between any two servers (and two runs): uids, timestamps, resource
/// versions, the API server's own bookkeeping.
fn normalize(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                    for volatile in ["uid", "resourceVersion", "creationTimestamp"] {
                        if meta.contains_key(volatile) {
                            meta.insert(volatile.into(), json!("<set>"));
                        }
                    }
                    if meta.contains_key("deletionTimestamp") {
                        meta.insert("deletionTimestamp".into(), json!("<set>"));
                    }
                    if let Some(entries) =
                        meta.get_mut("managedFields").and_then(Value::as_array_mut)
                    {
                        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                            entry.insert("time".into(), json!("<set>"));
                        }
                        // Both servers sort by time to the second first: whether two writes
                        // fell in one second is chance, so the order compared ignores time.
                        entries.sort_by_key(|e| {
                            ["operation", "manager", "apiVersion", "subresource"]
                                .map(|k| e[k].as_str().unwrap_or_default().to_string())
                        });
                    }
                }
                if let Some(details) = map.get_mut("details").and_then(Value::as_object_mut)
                    && details.contains_key("uid")
                {
                    details.insert("uid".into(), json!("<set>"));
                }
                for child in map.values_mut() {
                    walk(child);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// Where two JSON values differ: `pointer: sim vs real` lines.
fn diff(pointer: &str, sim: &Value, real: &Value, out: &mut Vec<(String, String)>) {
    match (sim, real) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                diff(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{pointer}/{i}"), x, y, out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push((
            pointer.to_string(),
            format!("kube-sim {a}\n        real     {b}"),
        )),
    }
}

impl Pair {
    async fn start() -> Pair {
        let real = ControlPlane::start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let real_client = real.admin_client().await.expect("admin client");
        let sim = KubeSim::builder().start().await.expect("kube-sim");
        let sim_client =
            kube::Client::try_from(kube::Config::new(sim.base_url.parse().expect("url")))
                .expect("client");
        Pair {
            _sim: sim,
            sim: sim_client,
            _real: real,
            real: real_client,
            differences: Vec::new(),
        }
    }

    /// Sends the same request to both; records the differences; returns both answers.
    async fn both(
        &mut self,
        step: &str,
        method: &str,
        path: &str,
        ct: &str,
        body: Option<&Value>,
    ) -> (Answer, Answer) {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let sim = send(&self.sim, method, path, ct, &bytes).await;
        let real = send(&self.real, method, path, ct, &bytes).await;
        self.compare(step, &sim.as_value(), &real.as_value());
        (sim, real)
    }

    fn compare(&mut self, step: &str, sim: &Value, real: &Value) {
        let mut found = Vec::new();
        diff("", sim, real, &mut found);
        for (pointer, text) in found {
            let deliberate = DELIBERATE
                .iter()
                .any(|(s, p, _)| *s == step && pointer.starts_with(p));
            if !deliberate {
                self.differences
                    .push(format!("{step}: {pointer}\n        {text}"));
            }
        }
    }

    async fn post(&mut self, step: &str, path: &str, body: Value) -> (Answer, Answer) {
        self.both(step, "POST", path, "application/json", Some(&body))
            .await
    }

    async fn get(&mut self, step: &str, path: &str) -> (Answer, Answer) {
        self.both(step, "GET", path, "application/json", None).await
    }

    async fn delete(&mut self, step: &str, path: &str) -> (Answer, Answer) {
        self.both(step, "DELETE", path, "application/json", None)
            .await
    }

    async fn patch(&mut self, step: &str, path: &str, ct: &str, body: Value) -> (Answer, Answer) {
        self.both(step, "PATCH", path, ct, Some(&body)).await
    }

    /// GET then PUT of `path` changed by `edit`, on each server with its own resourceVersion.
    async fn put_edited(
        &mut self,
        step: &str,
        path: &str,
        edit: impl Fn(&mut Value),
    ) -> (Answer, Answer) {
        let mut answers = Vec::new();
        for client in [&self.sim, &self.real] {
            let request = http::Request::get(path.trim_end_matches("/status"))
                .body(Vec::new())
                .expect("request");
            let mut raw: Value = client
                .request(request)
                .await
                .unwrap_or_else(|e| panic!("{step}: {e}"));
            edit(&mut raw);
            let bytes = raw.to_string().into_bytes();
            answers.push(send(client, "PUT", path, "application/json", &bytes).await);
        }
        let (sim, real) = (answers.remove(0), answers.remove(0));
        self.compare(step, &sim.as_value(), &real.as_value());
        (sim, real)
    }

    /// Waits until `path` lists on both (a new CRD's resource is served).
    async fn wait_served(&self, path: &str) {
        for client in [&self.sim, &self.real] {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                if send(client, "GET", path, "", &[]).await.code == 200 {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{path} never served"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn chart_crds() -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/omni-cluster-operator-crds/crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("CRD chart")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| serde_saphyr::from_str(&std::fs::read_to_string(f).expect("read")).expect("CRD"))
        .collect()
}

fn cluster(name: &str) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
        },
    })
}

fn control_plane(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniControlPlane",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// The events of a watch on `path`, until the OmniCluster `applied` is deleted (the script's
/// last OmniCluster event) or nothing arrives for a minute.
async fn watch_until_applied_is_deleted(client: kube::Client, path: String) -> Vec<Value> {
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("request");
    let response = client.send(request).await.expect("watch");
    let mut body = response.into_body();
    let (mut events, mut buffer) = (Vec::new(), Vec::<u8>::new());
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(Duration::from_secs(60), body.frame()).await
    {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.extend_from_slice(&data);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let last =
                event["type"] == "DELETED" && event["object"]["metadata"]["name"] == "applied";
            events.push(normalize(event));
            if last {
                return events;
            }
        }
    }
    events
}

/// The whole script in one test: one real control plane start, every step compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sim_answers_like_the_real_api_server() {
    let mut pair = Pair::start().await;
    let clusters = format!("{GROUP_PATH}/omniclusters");
    let planes = format!("{GROUP_PATH}/omnicontrolplanes");

    // CRDs: the warnings the real server gives about our schemas.
    for crd in chart_crds() {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let bytes = crd.to_string().into_bytes();
        let sim = send(&pair.sim, "POST", path, "application/json", &bytes).await;
        let real = send(&pair.real, "POST", path, "application/json", &bytes).await;
        // The stored CRD carries server-set status and defaults; code and warnings are what a
        // client (helm) sees.
        pair.compare(
            &format!("create CRD {name}"),
            &json!({"code": sim.code, "warnings": sim.warnings}),
            &json!({"code": real.code, "warnings": real.warnings}),
        );
    }
    pair.post(
        "create namespace",
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    pair.wait_served(&clusters).await;
    pair.wait_served(&planes).await;

    // A watch from now on, compared at the end.
    let list_rv = |client: kube::Client, path: String| async move {
        let request = http::Request::get(path).body(Vec::new()).expect("request");
        let list: Value = client.request(request).await.expect("list");
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let sim_rv = list_rv(pair.sim.clone(), clusters.clone()).await;
    let real_rv = list_rv(pair.real.clone(), clusters.clone()).await;
    let watch = |client: kube::Client, rv: String| {
        let path = format!("{clusters}?watch=true&resourceVersion={rv}");
        tokio::spawn(async move { watch_until_applied_is_deleted(client, path).await })
    };
    let sim_watch = watch(pair.sim.clone(), sim_rv);
    let real_watch = watch(pair.real.clone(), real_rv);

    // Create with a status: a status subresource makes the server drop it.
    let mut with_status = cluster("edge");
    with_status["status"] = json!({"observedGeneration": 7, "phase": "Ready"});
    pair.post("create with status", &clusters, with_status)
        .await;
    pair.get("get created", &format!("{clusters}/edge")).await;
    pair.post("create again", &clusters, cluster("edge")).await;

    // Metadata validation.
    pair.post("bad name", &clusters, cluster("Bad_Name")).await;
    let mut bad_label = cluster("labelled");
    bad_label["metadata"]["labels"] = json!({"team": "not a valid value!"});
    pair.post("bad label value", &clusters, bad_label).await;
    let mut bad_label_key = cluster("labelled");
    bad_label_key["metadata"]["labels"] = json!({"bad key/with/slashes": "x"});
    pair.post("bad label key", &clusters, bad_label_key).await;
    // One bad key per request: Go walks a map in random order, so two would be listed in
    // either order.
    for (step, key) in [
        ("bad label key name part", "example.com/bad name"),
        ("bad label key prefix", "Bad_Prefix/x"),
    ] {
        let mut bad = cluster("labelled");
        bad["metadata"]["labels"] = json!({ key: "x" });
        pair.post(step, &clusters, bad).await;
    }
    let mut bad_annotation = cluster("annotated");
    bad_annotation["metadata"]["annotations"] = json!({"not valid!": "x"});
    pair.post("bad annotation key", &clusters, bad_annotation)
        .await;
    let mut bad_finalizer = cluster("finalized");
    bad_finalizer["metadata"]["finalizers"] = json!(["not a finalizer"]);
    pair.post("bad finalizer", &clusters, bad_finalizer).await;

    // Schema validation: types, patterns, enums, required, minimum, int-or-string, CEL.
    let mut wrong_type = cluster("wrong-type");
    wrong_type["spec"]["kubernetes"]["version"] = json!(5);
    pair.post("integer for a string", &clusters, wrong_type)
        .await;
    let mut wrong_float = cluster("wrong-float");
    wrong_float["spec"]["kubernetes"]["version"] = json!(1.5);
    pair.post("number for a string", &clusters, wrong_float)
        .await;
    let mut pattern = cluster("pattern");
    pattern["spec"]["talos"]["version"] = json!("1.13");
    pair.post("pattern", &clusters, pattern).await;
    let mut missing = cluster("missing");
    missing["spec"]
        .as_object_mut()
        .map(|s| s.remove("connectionRef"));
    pair.post("required", &clusters, missing).await;
    let mut enum_violation = cluster("enum");
    enum_violation["spec"]["kubernetes"]["manifests"] =
        json!([{"name": "m", "mode": "sometimes", "inline": []}]);
    pair.post("enum", &clusters, enum_violation).await;
    let mut cel = cluster("cel");
    cel["spec"]["deletePolicy"] = json!({"orphan": true, "destroyMachines": true});
    pair.post("CEL rule", &clusters, cel).await;
    let mut cel_and_schema = cluster("cel-and-schema");
    cel_and_schema["spec"]["deletePolicy"] = json!({"orphan": true, "destroyMachines": "yes"});
    pair.post("CEL rule beside a schema error", &clusters, cel_and_schema)
        .await;
    pair.post(
        "CEL rule on the spec",
        &planes,
        control_plane("both", json!({"clusterRef": {"name": "edge"}})),
    )
    .await;
    pair.post(
        "minimum",
        &planes,
        control_plane(
            "minimum",
            json!({"clusterRef": {"name": "edge"}, "machines": ["m"],
                   "upgradeStrategy": {"type": "Rolling", "rolling": {"maxParallelism": 0}}}),
        ),
    )
    .await;
    pair.post(
        "number for an integer",
        &planes,
        control_plane(
            "fraction",
            json!({"clusterRef": {"name": "edge"}, "machines": ["m"],
                   "upgradeStrategy": {"type": "Rolling", "rolling": {"maxParallelism": 1.5}}}),
        ),
    )
    .await;
    pair.post(
        "whole number for an integer",
        &planes,
        control_plane(
            "whole",
            json!({"clusterRef": {"name": "edge"}, "machines": ["m"],
                   "upgradeStrategy": {"type": "Rolling", "rolling": {"maxParallelism": 2.0}}}),
        ),
    )
    .await;
    pair.post(
        "boolean for int-or-string",
        &planes,
        control_plane(
            "int-or-string",
            json!({"clusterRef": {"name": "edge"}, "machineClass": {"name": "c", "size": true}}),
        ),
    )
    .await;

    // Unknown fields: refused under Strict, a warning by default.
    let mut unknown = cluster("unknown");
    unknown["spec"]["colour"] = json!("blue");
    pair.post(
        "unknown field, strict",
        &format!("{clusters}?fieldValidation=Strict"),
        unknown.clone(),
    )
    .await;
    pair.post("unknown field, warn", &clusters, unknown).await;

    // Spec edits, status through its subresource only.
    pair.patch(
        "merge patch of the spec",
        &format!("{clusters}/edge"),
        "application/merge-patch+json",
        json!({"spec": {"suspend": true}, "status": {"phase": "ignored"}}),
    )
    .await;
    pair.put_edited(
        "status through /status",
        &format!("{clusters}/edge/status"),
        |o| {
            o["status"] = json!({"observedGeneration": 2});
            o["spec"]["suspend"] = json!(false);
        },
    )
    .await;
    pair.put_edited(
        "status through the main resource",
        &format!("{clusters}/edge"),
        |o| {
            o["status"] = json!({"observedGeneration": 9});
        },
    )
    .await;
    pair.put_edited("stale update", &format!("{clusters}/edge"), |o| {
        o["metadata"]["resourceVersion"] = json!("1");
    })
    .await;

    // Server-side apply: creation drops status, managed fields, conflicts.
    let mut applied = cluster("applied");
    applied["status"] = json!({"observedGeneration": 3});
    pair.patch(
        "apply creates",
        &format!("{clusters}/applied?fieldManager=alpha"),
        "application/apply-patch+yaml",
        applied,
    )
    .await;
    let mut other = cluster("applied");
    other["spec"]["kubernetes"]["version"] = json!("v1.35.1");
    pair.patch(
        "apply conflicts",
        &format!("{clusters}/applied?fieldManager=beta"),
        "application/apply-patch+yaml",
        other.clone(),
    )
    .await;
    pair.patch(
        "apply forced",
        &format!("{clusters}/applied?fieldManager=beta&force=true"),
        "application/apply-patch+yaml",
        other,
    )
    .await;

    // Finalizers and deletion.
    pair.patch(
        "add a finalizer",
        &format!("{clusters}/edge"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": ["omni.texashpc.com/finalizer"]}}),
    )
    .await;
    pair.delete("delete held by a finalizer", &format!("{clusters}/edge"))
        .await;
    pair.patch(
        "add a finalizer while deleting",
        &format!("{clusters}/edge"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": ["omni.texashpc.com/finalizer", "other.example.com/x"]}}),
    )
    .await;
    pair.patch(
        "spec edit while deleting",
        &format!("{clusters}/edge"),
        "application/merge-patch+json",
        json!({"spec": {"suspend": false}}),
    )
    .await;
    pair.patch(
        "release the finalizer",
        &format!("{clusters}/edge"),
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    pair.get("gone", &format!("{clusters}/edge")).await;
    pair.delete("delete missing", &format!("{clusters}/edge"))
        .await;
    pair.delete("delete without finalizers", &format!("{clusters}/applied"))
        .await;

    // Secrets.
    let secrets = format!("/api/v1/namespaces/{NS}/secrets");
    pair.post(
        "secret with stringData",
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "key"},
               "stringData": {"serviceAccountKey": "c2VjcmV0"}}),
    )
    .await;
    pair.put_edited("secret type change", &format!("{secrets}/key"), |o| {
        o["type"] = json!("kubernetes.io/tls");
    })
    .await;

    // Leases (leader election).
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    pair.post(
        "lease",
        &leases,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "omni-operator"},
               "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
    )
    .await;
    pair.put_edited(
        "lease taken over with a stale version",
        &format!("{leases}/omni-operator"),
        |o| {
            o["spec"]["holderIdentity"] = json!("b");
            o["metadata"]["resourceVersion"] = json!("2");
        },
    )
    .await;

    // Events (events.k8s.io, as kube-rs's Recorder writes them).
    pair.post(
        "event",
        &format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"),
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "edge.1"},
               "eventTime": "2026-01-01T00:00:00.000000Z",
               "reportingController": "omni-operator", "reportingInstance": "omni-operator-0",
               "action": "Reconcile", "reason": "Synced", "type": "Normal", "note": "synced",
               "regarding": {"apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster",
                             "namespace": NS, "name": "edge"}}),
    )
    .await;

    // The watch saw the same sequence.
    let (sim_events, real_events) = (
        sim_watch.await.expect("kube-sim watch"),
        real_watch.await.expect("real watch"),
    );
    let summary = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| {
                format!(
                    "{} {} gen={} finalizers={} deleting={}",
                    e["type"].as_str().unwrap_or_default(),
                    e["object"]["metadata"]["name"].as_str().unwrap_or_default(),
                    e["object"]["metadata"]["generation"],
                    e["object"]["metadata"]["finalizers"],
                    e["object"]["metadata"]["deletionTimestamp"].is_string()
                )
            })
            .collect()
    };
    if sim_events != real_events {
        eprintln!(
            "watch events\n  kube-sim: {:#?}\n  real: {:#?}",
            summary(&sim_events),
            summary(&real_events)
        );
    }
    pair.compare(
        "watch of OmniClusters",
        &Value::Array(sim_events),
        &Value::Array(real_events),
    );

    // Namespace deletion: Terminating while an object in it is held by a finalizer (the test
    // control plane has no namespace controller; kube-sim's emulates it and would remove an
    // empty namespace at once), and no new objects in it.
    let mut held = cluster("held");
    held["metadata"]["finalizers"] = json!(["omni.texashpc.com/finalizer"]);
    pair.post("create held", &clusters, held).await;
    pair.delete("delete namespace", &format!("/api/v1/namespaces/{NS}"))
        .await;
    pair.post(
        "create in a terminating namespace",
        &clusters,
        cluster("late"),
    )
    .await;

    assert!(
        pair.differences.is_empty(),
        "{} difference(s) between kube-sim and kube-apiserver:\n{}",
        pair.differences.len(),
        pair.differences.join("\n")
    );
}
