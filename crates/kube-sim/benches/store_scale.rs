//! Scale benchmark of kube-sim over HTTP: loads N OmniSecretSyncs (the chart's CRD, so schema
//! pruning, defaulting and validation run on every write), keeps K watchers on that kind and K on
//! another kind open, then measures create, list (whole and paged), update and watch fan-out.
//!
//! Run: `cargo bench -p kube-sim --bench store_scale` (knobs: `BENCH_OBJECTS`, `BENCH_WATCHERS`,
//! `BENCH_UPDATES`, `BENCH_CLIENTS`). Prints a table and one `BENCH_JSON {..}` line. Figures are
//! for the whole process (server and the bench's own HTTP clients on loopback).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube_sim::server::KubeSim;
use serde_json::{Value, json};

const GROUP_PATH: &str = "/apis/omni.texashpc.com/v1alpha1/namespaces/default/omnisecretsyncs";
const OTHER_PATH: &str = "/api/v1/namespaces/default/configmaps";

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One HTTP/1.1 keep-alive connection to the server.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Conn {
    async fn open(addr: &str) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .expect("handshake");
        tokio::spawn(conn);
        Conn { sender }
    }

    async fn send(&mut self, method: &str, path: &str, ct: &str, body: Vec<u8>) -> (u16, Bytes) {
        self.sender.ready().await.expect("connection ready");
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", ct)
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let resp = self.sender.send_request(req).await.expect("response");
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, bytes)
    }
}

fn sync(i: usize) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniSecretSync",
        "metadata": {"name": format!("sync-{i:06}"), "namespace": "default",
            "labels": {"bench/cluster": format!("c{}", i % 100)}},
        "spec": {
            "clusterRef": {"name": format!("c{}", i % 100)},
            "deletionPolicy": "Delete",
            "kubeconfigSecretRef": {"name": "kubeconfig"},
            "sourceSecretRef": {"name": format!("source-{i}")},
            "targetSecretRef": {"name": format!("target-{i}"), "namespace": "apps"},
            "labels": {"team": "bench"},
        }
    })
}

/// Process CPU seconds (user + system) and RSS / peak RSS in MiB, from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields after the command: state is index 0, utime 11, stime 12; 100 ticks per second.
    (ticks(11) + ticks(12)) / 100.0
}

fn rss_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

struct Phase {
    name: &'static str,
    ops: usize,
    wall: Duration,
    cpu: f64,
}

impl Phase {
    fn row(&self) -> String {
        format!(
            "{:<22} {:>8} {:>10.3} {:>12.0} {:>10.2}",
            self.name,
            self.ops,
            self.wall.as_secs_f64(),
            self.ops as f64 / self.wall.as_secs_f64().max(1e-9),
            self.cpu
        )
    }
}

async fn measure<F, Fut>(name: &'static str, ops: usize, f: F) -> Phase
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    f().await;
    Phase {
        name,
        ops,
        wall: t0.elapsed(),
        cpu: cpu_seconds() - cpu0,
    }
}

/// Runs `total` requests over `clients` connections; `make(i)` gives method, path, type, body.
async fn spread<M>(addr: &str, clients: usize, total: usize, make: M)
where
    M: Fn(usize) -> (&'static str, String, &'static str, Vec<u8>) + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (make, next, addr) = (make.clone(), next.clone(), addr.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    break;
                }
                let (method, path, ct, body) = make(i);
                let (status, body) = conn.send(method, &path, ct, body).await;
                assert!(
                    status < 300,
                    "{method} {path}: {status} {}",
                    String::from_utf8_lossy(&body)
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
}

/// Opens a watch from `rv` and counts the events it delivers (one JSON line each).
async fn watcher(addr: String, path: String, rv: String, seen: Arc<AtomicU64>) {
    let mut conn = Conn::open(&addr).await;
    conn.sender.ready().await.expect("ready");
    let req = http::Request::get(format!("{path}?watch=true&resourceVersion={rv}"))
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = conn.sender.send_request(req).await.expect("watch response");
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(data) = frame.data_ref() {
            let lines = data.iter().filter(|b| **b == b'\n').count() as u64;
            seen.fetch_add(lines, Ordering::Relaxed);
        }
    }
}

fn main() {
    let objects = knob("BENCH_OBJECTS", 10_000);
    let watchers = knob("BENCH_WATCHERS", 20);
    let updates = knob("BENCH_UPDATES", 5_000);
    let clients = knob("BENCH_CLIENTS", 8);
    let lists = knob("BENCH_LISTS", 10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(objects, watchers, updates, clients, lists));
}

async fn run(objects: usize, watchers: usize, updates: usize, clients: usize, lists: usize) {
    let sim = KubeSim::builder().start().await.expect("kube-sim");
    let addr = sim.base_url.trim_start_matches("http://").to_owned();
    let crd_file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../charts/omni-cluster-operator-crds/crds/omni.texashpc.com_omnisecretsyncs.yaml",
    );
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(crd_file).expect("CRD file"))
        .expect("CRD yaml");
    let mut admin = Conn::open(&addr).await;
    let (status, body) = admin
        .send(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            serde_json::to_vec(&crd).expect("json"),
        )
        .await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));

    let mut phases = Vec::new();
    phases.push(
        measure("create", objects, || {
            spread(&addr, clients, objects, |i| {
                (
                    "POST",
                    GROUP_PATH.to_owned(),
                    "application/json",
                    serde_json::to_vec(&sync(i)).expect("json"),
                )
            })
        })
        .await,
    );
    phases.push(
        measure("list (all)", lists, || async {
            for _ in 0..lists {
                let (status, body) = admin.send("GET", GROUP_PATH, "", Vec::new()).await;
                assert_eq!(status, 200);
                assert!(body.len() > objects * 100);
            }
        })
        .await,
    );
    let page = 500;
    let pages = lists * objects.div_ceil(page);
    phases.push(
        measure("list (pages of 500)", pages, || async {
            for _ in 0..lists {
                let mut token = String::new();
                loop {
                    let path = format!("{GROUP_PATH}?limit={page}&continue={token}");
                    let (status, body) = admin.send("GET", &path, "", Vec::new()).await;
                    assert_eq!(status, 200);
                    let list: Value = serde_json::from_slice(&body).expect("list");
                    match list.pointer("/metadata/continue").and_then(Value::as_str) {
                        Some(c) if !c.is_empty() => token = c.to_owned(),
                        _ => break,
                    }
                }
            }
        })
        .await,
    );
    phases.push(
        measure("list (label selector)", lists, || async {
            for _ in 0..lists {
                let path = format!("{GROUP_PATH}?labelSelector=bench%2Fcluster%3Dc7");
                let (status, _) = admin.send("GET", &path, "", Vec::new()).await;
                assert_eq!(status, 200);
            }
        })
        .await,
    );

    // Watchers of the benchmarked kind and as many of another kind, which must see none of it.
    let (_, rv_body) = admin.send("GET", GROUP_PATH, "", Vec::new()).await;
    let rv =
        serde_json::from_slice::<Value>(&rv_body).expect("list")["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_owned();
    let seen = Arc::new(AtomicU64::new(0));
    let other_seen = Arc::new(AtomicU64::new(0));
    for _ in 0..watchers {
        tokio::spawn(watcher(
            addr.clone(),
            GROUP_PATH.to_owned(),
            rv.clone(),
            seen.clone(),
        ));
        tokio::spawn(watcher(
            addr.clone(),
            OTHER_PATH.to_owned(),
            rv.clone(),
            other_seen.clone(),
        ));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let expected = (updates * watchers) as u64;
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    spread(&addr, clients, updates, move |i| {
        (
            "PATCH",
            format!("{GROUP_PATH}/sync-{:06}", i % objects),
            "application/merge-patch+json",
            serde_json::to_vec(&json!({"spec": {"labels": {"round": i.to_string()}}}))
                .expect("json"),
        )
    })
    .await;
    phases.push(Phase {
        name: "update (patch)",
        ops: updates,
        wall: t0.elapsed(),
        cpu: cpu_seconds() - cpu0,
    });
    // Fan-out is complete when every watcher has seen every update (or 60 s passed: a watcher
    // that was ended for lagging never catches up, which the delivered count shows).
    let give_up = Instant::now() + Duration::from_secs(60);
    while seen.load(Ordering::Relaxed) < expected && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered = seen.load(Ordering::Relaxed);
    phases.push(Phase {
        name: "update + watch fan-out",
        ops: delivered as usize,
        wall: t0.elapsed(),
        cpu: cpu_seconds() - cpu0,
    });

    println!(
        "kube-sim store_scale: {objects} OmniSecretSyncs, {watchers}+{watchers} watchers, {updates} updates, {clients} clients"
    );
    println!(
        "{:<22} {:>8} {:>10} {:>12} {:>10}",
        "phase", "ops", "wall s", "ops/s", "cpu s"
    );
    for p in &phases {
        println!("{}", p.row());
    }
    let (rss, peak) = (rss_mib("VmRSS:"), rss_mib("VmHWM:"));
    println!(
        "watch events delivered {delivered} of {expected}; other-kind watchers got {}; RSS {rss:.0} MiB, peak {peak:.0} MiB",
        other_seen.load(Ordering::Relaxed)
    );
    let report = json!({
        "objects": objects, "watchers": watchers, "updates": updates, "clients": clients,
        "delivered": delivered, "expected": expected,
        "rss_mib": rss, "peak_rss_mib": peak,
        "phases": phases.iter().map(|p| json!({
            "name": p.name, "ops": p.ops, "wall_s": p.wall.as_secs_f64(),
            "ops_per_s": p.ops as f64 / p.wall.as_secs_f64().max(1e-9), "cpu_s": p.cpu,
        })).collect::<Vec<_>>(),
    });
    println!("BENCH_JSON {report}");
    sim.shutdown();
}
