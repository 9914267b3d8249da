//! The measured phases of one run: applying the fleet, the cold start, the idle window and the
//! change latency, plus the end-state digest that variants are compared by.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::StreamExt as _;
use kube::api::{Patch, PatchParams, PostParams};
use omni_client::proto::specs::ClusterSpec;
use omni_sim::store::{StoreEvent, decode_spec, meta};
use serde_json::{Value, json};

use crate::emulators::{self, Emulators, OPERATOR_USER};
use crate::fleet::{self, FleetSpec};
use crate::operator::OperatorProcess;

/// How many creates the bench has in flight while applying the fleet.
const APPLY_CONCURRENCY: usize = 16;

/// The operator's kinds, for status checks and the write breakdown.
pub const KINDS: &[&str] = &[
    "OmniConnection",
    "OmniCluster",
    "OmniControlPlane",
    "OmniWorkers",
    "OmniMachine",
    "OmniKubeconfigExport",
    "OmniSecretSync",
    "OmniHelmRelease",
    "OmniHelmReleaseSet",
    "OmniSecretSyncSet",
    "OmniKubeconfigExportSet",
];

/// Applies every object of the fleet as the bench's own user; returns how long it took.
pub async fn apply(emu: &Emulators, spec: &FleetSpec) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let repo = emu.chart_repo.as_ref().map(|r| r.url.as_str());
    let objects = fleet::objects(spec, emu.omni.endpoint(), repo);
    // The operator is not running yet, so the order of creation does not matter.
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(&objects)
        .map(|o| async move {
            let api = emulators::api(&emu.client, o.kind)?;
            api.create(
                &PostParams::default(),
                &serde_json::from_value(o.manifest.clone())?,
            )
            .await?;
            Ok(())
        })
        .buffer_unordered(APPLY_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<()>>()?;
    Ok(started.elapsed())
}

/// Writes the operator made so far, per API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Writes {
    /// To the management Kubernetes API, as the operator's user.
    pub management: u64,
    /// To the workload clusters' APIs (only the operator writes there).
    pub workload: u64,
    /// Write RPCs to Omni (only the operator makes any).
    pub omni: u64,
}

impl Writes {
    /// Writes of all three APIs.
    pub fn total(&self) -> u64 {
        self.management + self.workload + self.omni
    }

    /// The writes made after `before` was taken.
    pub fn since(&self, before: &Writes) -> Writes {
        Writes {
            management: self.management - before.management,
            workload: self.workload - before.workload,
            omni: self.omni - before.omni,
        }
    }
}

/// The operator's writes so far, and which management resources they went to.
pub fn writes(emu: &Emulators) -> (Writes, BTreeMap<String, u64>) {
    let mut by_resource = BTreeMap::new();
    let mut management = 0;
    for (key, n) in emu.management.hooks().counts() {
        if key.is_write() && key.user == OPERATOR_USER {
            management += n;
            let what = match &key.subresource {
                Some(sub) => format!("{} {}/{sub}", key.verb, key.resource),
                None => format!("{} {}", key.verb, key.resource),
            };
            *by_resource.entry(what).or_insert(0) += n;
        }
    }
    let workload = emu
        .workloads
        .clusters()
        .iter()
        .filter_map(|(name, _)| emu.workloads.get(name))
        .map(|sim| sim.writes_total())
        .sum();
    (
        Writes {
            management,
            workload,
            omni: emu.omni.writes_total(),
        },
        by_resource,
    )
}

/// Calls the operator made to Omni so far (reads, writes and watches opened), whatever their
/// outcome.
pub fn omni_calls(emu: &Emulators) -> u64 {
    emu.omni.call_counts().values().sum()
}

/// How far the fleet has converged.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Progress {
    /// Custom resources Ready at their current generation.
    pub ready: usize,
    /// Custom resources in all.
    pub objects: usize,
    /// OmniClusters whose Omni cluster exists.
    pub omni_clusters: usize,
    /// Synced Secrets present in their workload cluster with the source's current data.
    pub synced: usize,
    /// The first few custom resources not yet Ready, with what their status says: an
    /// unconverged run names what it waits on.
    pub waiting: Vec<String>,
    /// How many custom resources are not yet Ready, by kind and the reason their status gives:
    /// what the last of a cold start wait on.
    pub not_ready: BTreeMap<String, usize>,
    /// With the sets: what the workload clusters hold of them.
    pub sets: Option<crate::sets::Reach>,
}

/// How many not-Ready objects [`Progress::waiting`] names.
const WAITING_SAMPLE: usize = 10;

impl Progress {
    /// Whether everything has converged.
    pub fn done(&self, spec: &FleetSpec) -> bool {
        self.ready == self.objects
            && self.objects == spec.objects()
            && self.omni_clusters == spec.clusters
            && self.synced == spec.syncs
            && self.sets.as_ref().is_none_or(crate::sets::Reach::done)
    }
}

/// An object's `Ready` condition, with the generations it is of.
struct ReadyCondition<'a> {
    generation: Option<i64>,
    observed: Option<i64>,
    ready: Option<&'a Value>,
}

impl<'a> ReadyCondition<'a> {
    fn of(obj: &'a Value) -> Self {
        Self {
            generation: obj["metadata"]["generation"].as_i64(),
            observed: obj["status"]["observedGeneration"].as_i64(),
            ready: obj["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready")),
        }
    }
}

/// Below how many not-Ready objects a progress line says what they wait on.
const TAIL: usize = 1_000;

/// `Kind Reason`: why an object is not Ready, as its `Ready` condition says; `not reconciled
/// yet` before its first status, `older generation` while its status is of an earlier spec.
fn not_ready_reason(kind: &str, obj: &Value) -> String {
    let ReadyCondition {
        generation,
        observed,
        ready,
    } = ReadyCondition::of(obj);
    let reason = match ready {
        _ if observed.is_none() => "not reconciled yet",
        _ if observed != generation => "older generation",
        Some(c) => c["reason"].as_str().unwrap_or("no reason"),
        None => "no Ready condition",
    };
    format!("{kind} {reason}")
}

/// The progress line's account of the last objects not yet Ready (`None` while there are more
/// than [`TAIL`] or none): the most common reasons first.
fn tail_summary(p: &Progress) -> Option<String> {
    let left = p.objects.saturating_sub(p.ready);
    if left == 0 || left > TAIL {
        return None;
    }
    let mut counts: Vec<(&String, &usize)> = p.not_ready.iter().collect();
    counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = counts
        .iter()
        .take(6)
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    let more = counts.len().saturating_sub(6);
    let more = if more > 0 {
        format!(", {more} more")
    } else {
        String::new()
    };
    Some(format!("not Ready: {}{more}", parts.join(", ")))
}

/// `kind/name: reason: message` of a not-Ready object, from its `Ready` condition.
fn waiting_on(kind: &str, obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let ReadyCondition {
        generation,
        observed,
        ready,
    } = ReadyCondition::of(obj);
    let said = match ready {
        Some(c) => format!(
            "{}: {}",
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        ),
        None => "no Ready condition".to_string(),
    };
    if observed == generation {
        format!("{kind}/{name}: {said}")
    } else {
        format!("{kind}/{name}: generation {generation:?} observed {observed:?}; {said}")
    }
}

/// Whether `obj` is Ready at its generation. The original implementation gives the three parts
/// of a cluster no `Ready` condition, only `Accepted` (their cluster exists): a part without a
/// `Ready` condition counts when it is Accepted. The operator always writes both together.
fn ready_at_generation(kind: &str, obj: &Value) -> bool {
    let generation = obj["metadata"]["generation"].as_i64();
    let conditions = obj["status"]["conditions"].as_array();
    let is_true = |type_: &str| {
        conditions.is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
    };
    let has_ready = conditions.is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready"));
    let is_part = matches!(kind, "OmniControlPlane" | "OmniWorkers" | "OmniMachine");
    obj["status"]["observedGeneration"].as_i64() == generation
        && (is_true("Ready") || (is_part && !has_ready && is_true("Accepted")))
}

/// The operator's custom resources in the fleet's namespace: how many, how many Ready at their
/// generation, and the first few that are not.
pub fn custom_resources(emu: &Emulators) -> anyhow::Result<Progress> {
    let store = emu.management.store();
    let mut p = Progress::default();
    for kind in KINDS {
        let ar = emulators::api_resource(kind)?;
        for obj in store.list_objects(&ar.group, &ar.plural, Some(fleet::NAMESPACE)) {
            p.objects += 1;
            if ready_at_generation(kind, &obj) {
                p.ready += 1;
                continue;
            }
            *p.not_ready.entry(not_ready_reason(kind, &obj)).or_default() += 1;
            if p.waiting.len() < WAITING_SAMPLE {
                p.waiting.push(waiting_on(kind, &obj));
            }
        }
    }
    Ok(p)
}

/// How long the convergence check pauses after a check that took `cost`: at least 250 ms, and
/// ten times the check's own cost, so that the check takes at most a tenth of a core. A check
/// reads every object of the fleet from the stores (its cost grows with the fleet), and it
/// runs on the same cores as the operator: at a fixed 250 ms the checks of a 3,000-cluster
/// cold start took a quarter of the bench process's CPU, counted as emulator CPU and taken from
/// the operator. The converge time is late by at most one pause.
pub fn poll_pause(cost: Duration) -> Duration {
    (cost * 10).max(Duration::from_millis(250))
}

/// Reads the convergence state straight from the emulators' stores (no API requests, so the
/// counters only hold the operator's traffic).
pub fn progress(emu: &Emulators, spec: &FleetSpec) -> anyhow::Result<Progress> {
    let store = emu.management.store();
    let mut p = custom_resources(emu)?;
    if spec.sets {
        p.sets = Some(crate::sets::reach(emu, spec, &crate::sets::Expect::all()));
    }
    let wanted: std::collections::BTreeSet<String> =
        (0..spec.clusters).map(fleet::cluster_name).collect();
    p.omni_clusters = emu
        .omni
        .list(omni_sim::types::ty::CLUSTER)
        .iter()
        .filter(|r| wanted.contains(&meta(r).id))
        .count();
    let sources: HashMap<String, Value> = store
        .list_objects("", "secrets", Some(fleet::NAMESPACE))
        .into_iter()
        .filter_map(|s| {
            let name = s["metadata"]["name"].as_str()?.to_owned();
            Some((name, s["data"].clone()))
        })
        .collect();
    for i in 0..spec.workload_clusters.min(spec.clusters) {
        let Some(sim) = emulators::workload(emu, i) else {
            continue;
        };
        for target in sim
            .store()
            .list_objects("", "secrets", Some(fleet::TARGET_NAMESPACE))
        {
            let Some(name) = target["metadata"]["name"].as_str() else {
                continue;
            };
            if sources
                .get(name)
                .is_some_and(|data| *data == target["data"])
            {
                p.synced += 1;
            }
        }
    }
    Ok(p)
}

/// What the cold start measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ColdStart {
    /// Seconds from the operator's start until everything converged.
    pub converged_secs: f64,
    /// Whether it converged before the time limit.
    pub converged: bool,
    /// The state at the end.
    pub progress: Progress,
    /// Operator CPU seconds used meanwhile.
    pub operator_cpu_secs: f64,
    /// Operator peak RSS, in MiB.
    pub operator_peak_rss_mib: f64,
    /// Most sockets the operator held open at once (sampled every 250 ms): one per connection.
    pub operator_peak_sockets: u64,
    /// CPU seconds the bench process (the emulators) used meanwhile.
    pub emulator_cpu_secs: f64,
    /// The operator's writes meanwhile.
    pub writes: Writes,
    /// Its management writes by verb and resource (e.g. `patch omniclusters/status`).
    pub management_writes: BTreeMap<String, u64>,
    /// Connections the operator opened to Omni.
    pub omni_connections: u64,
    /// Calls the operator made to Omni (reads, writes, watches opened).
    pub omni_calls: u64,
    /// The management writes by kind, per object and against their floor.
    pub floor: crate::floor::WriteFloor,
}

/// Waits until the fleet converges (or `limit` passes), sampling the operator.
pub async fn cold_start(
    emu: &Emulators,
    spec: &FleetSpec,
    operator: &mut OperatorProcess,
    started: Instant,
    limit: Duration,
) -> anyhow::Result<ColdStart> {
    let own_cpu = crate::operator::own_cpu_secs();
    let mut peak_sockets = 0;
    let (converged, last) = until_converged(emu, spec, started, limit, || {
        operator.check_alive()?;
        peak_sockets = peak_sockets.max(operator.sample()?.sockets);
        Ok(())
    })
    .await?;
    let converged_secs = started.elapsed().as_secs_f64();
    let sample = operator.sample()?;
    let (cold_writes, management_writes) = writes(emu);
    let floor = crate::floor::WriteFloor::of(emu, &management_writes)?;
    Ok(ColdStart {
        converged_secs,
        converged,
        progress: last,
        operator_cpu_secs: sample.cpu_secs,
        operator_peak_rss_mib: mib(sample.peak_rss_bytes),
        operator_peak_sockets: peak_sockets.max(sample.sockets),
        emulator_cpu_secs: crate::operator::own_cpu_secs() - own_cpu,
        writes: cold_writes,
        management_writes,
        omni_connections: emu.omni.connections_accepted(),
        omni_calls: omni_calls(emu),
        floor,
    })
}

/// Checks the fleet ([`progress`]) until it has converged or `limit` has passed since
/// `started`, printing how far it got every 10 s while that changes (every 2 s, with what the
/// last objects wait on, once fewer than `TAIL` are left). `before_each` runs before
/// every check: it fails the run when an operator process died, and may sample it. Returns
/// whether the fleet converged, and the last check.
pub async fn until_converged(
    emu: &Emulators,
    spec: &FleetSpec,
    started: Instant,
    limit: Duration,
    mut before_each: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<(bool, Progress)> {
    let mut last = Progress::default();
    let mut last_print = Instant::now();
    loop {
        before_each()?;
        let checked = Instant::now();
        let p = progress(emu, spec)?;
        let pause = poll_pause(checked.elapsed());
        if p.done(spec) {
            return Ok((true, p));
        }
        if started.elapsed() > limit {
            return Ok((false, p));
        }
        let tail = tail_summary(&p);
        // In the tail, every 2 s: a short tail would otherwise go by unnamed.
        let every = Duration::from_secs(if tail.is_some() { 2 } else { 10 });
        if last_print.elapsed() > every && p != last {
            let sets = p.sets.as_ref().map_or(String::new(), |r| {
                format!(", sets: {} releases and {} copies", r.releases, r.copies)
            });
            let tail = tail.map_or(String::new(), |t| format!("; {t}"));
            eprintln!(
                "    {:>5.0}s: {}/{} Ready, {} Omni clusters, {} Secrets synced{sets}{tail}",
                started.elapsed().as_secs_f64(),
                p.ready,
                spec.objects(),
                p.omni_clusters,
                p.synced
            );
            last_print = Instant::now();
        }
        last = p;
        tokio::time::sleep(pause).await;
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// After convergence Omni's own status keeps moving for a while (machines and phases settle),
/// and the operator rightly mirrors it; the idle window starts once the operator has made no
/// write for [`QUIET`] (waiting at most `limit`). `alive` fails the run when an operator
/// process died. Returns the seconds it took.
pub async fn settle(
    emu: &Emulators,
    limit: Duration,
    mut alive: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut last = writes(emu).0;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < QUIET && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(250)).await;
        alive()?;
        let now = writes(emu).0;
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// How long the operator must make no write before the fleet counts as settled.
pub const QUIET: Duration = Duration::from_secs(3);

/// What the idle window measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Idle {
    /// Length of the window in seconds.
    pub secs: f64,
    /// Operator writes per minute, per API.
    pub writes_per_minute: WritesPerMinute,
    /// Which management writes the operator made (verb resource[/subresource] → count).
    pub management_writes: BTreeMap<String, u64>,
    /// Operator CPU seconds per minute (60 = one core busy).
    pub operator_cpu_secs_per_minute: f64,
    /// Operator RSS at the end, in MiB.
    pub operator_rss_mib: f64,
    /// Emulator CPU seconds per minute.
    pub emulator_cpu_secs_per_minute: f64,
    /// Connections opened to Omni during the window.
    pub omni_connections: u64,
    /// Calls to Omni per minute (reads, writes, watches opened): the periodic passes' reads.
    pub omni_calls_per_minute: f64,
}

/// Writes per minute.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct WritesPerMinute {
    /// Management API.
    pub management: f64,
    /// All workload APIs together.
    pub workload: f64,
    /// Omni.
    pub omni: f64,
}

impl WritesPerMinute {
    /// All APIs.
    pub fn total(&self) -> f64 {
        self.management + self.workload + self.omni
    }
}

/// Watches the converged fleet for `window` with nothing changing.
pub async fn idle(
    emu: &Emulators,
    operator: &mut OperatorProcess,
    window: Duration,
) -> anyhow::Result<Idle> {
    let (before, before_by) = writes(emu);
    let cpu = operator.sample()?.cpu_secs;
    let own = crate::operator::own_cpu_secs();
    let connections = emu.omni.connections_accepted();
    let calls = omni_calls(emu);
    let started = Instant::now();
    tokio::time::sleep(window).await;
    operator.check_alive()?;
    let secs = started.elapsed().as_secs_f64();
    let per_minute = |n: f64| n * 60.0 / secs;
    let (after, after_by) = writes(emu);
    let delta = after.since(&before);
    let sample = operator.sample()?;
    let management_writes = after_by
        .into_iter()
        .filter_map(|(k, n)| {
            let d = n - before_by.get(&k).copied().unwrap_or(0);
            (d > 0).then_some((k, d))
        })
        .collect();
    Ok(Idle {
        secs,
        writes_per_minute: WritesPerMinute {
            management: per_minute(delta.management as f64),
            workload: per_minute(delta.workload as f64),
            omni: per_minute(delta.omni as f64),
        },
        management_writes,
        operator_cpu_secs_per_minute: per_minute(sample.cpu_secs - cpu),
        operator_rss_mib: mib(sample.rss_bytes),
        emulator_cpu_secs_per_minute: per_minute(crate::operator::own_cpu_secs() - own),
        omni_connections: emu.omni.connections_accepted() - connections,
        omni_calls_per_minute: per_minute((omni_calls(emu) - calls) as f64),
    })
}

/// Percentiles of one latency series, in milliseconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Percentiles {
    /// Changes measured.
    pub count: usize,
    /// Changes never observed at the far end within the time limit.
    pub missing: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// Nearest-rank percentiles of `samples` (milliseconds).
pub fn percentiles(mut samples: Vec<f64>, missing: usize) -> Percentiles {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| -> f64 {
        if samples.is_empty() {
            return 0.0;
        }
        let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1]
    };
    Percentiles {
        count: samples.len(),
        missing,
        p50_ms: at(0.50),
        p90_ms: at(0.90),
        p99_ms: at(0.99),
        max_ms: samples.last().copied().unwrap_or(0.0),
    }
}

/// What the change-latency phase measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Latency {
    /// OmniCluster spec edit committed in Kubernetes → the matching Omni Cluster write.
    pub cluster_to_omni: Percentiles,
    /// Source Secret edit committed → the workload Secret holding the new data.
    pub secret_to_workload: Percentiles,
    /// Operator writes during the phase.
    pub writes: Writes,
}

/// A change and when each end saw it; keys are (object name, new value).
type Seen = Arc<Mutex<HashMap<(String, String), Instant>>>;

fn mark(seen: &Seen, key: (String, String)) {
    let now = Instant::now();
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_insert(now);
}

/// Commit observers: each records the first moment its store committed a given change, on this
/// process's one monotonic clock. Their feeds are the stores' own change broadcasts, so the
/// emulators need no extra hook and the operator's traffic is not disturbed.
struct Observers {
    kube: Seen,
    omni: Seen,
    workload: Seen,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Observers {
    fn start(emu: &Emulators, spec: &FleetSpec) -> Self {
        let (kube, omni, workload): (Seen, Seen, Seen) = Default::default();
        let mut tasks = Vec::new();
        let mut rx = emu.management.store().subscribe();
        let k = kube.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let ev = match rx.recv().await {
                    Ok(ev) => ev,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                };
                let name = ev.object["metadata"]["name"].as_str().unwrap_or_default();
                match ev.resource.as_str() {
                    "omniclusters" => {
                        let proxy = &ev.object["spec"]["features"]["enableWorkloadProxy"];
                        mark(&k, (name.to_owned(), proxy.to_string()));
                    }
                    "secrets" => {
                        mark(
                            &k,
                            (name.to_owned(), ev.object["data"]["value"].to_string()),
                        );
                    }
                    _ => {}
                }
            }
        }));
        let mut rx = emu.omni.store().subscribe();
        let o = omni.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let ev = match rx.recv().await {
                    Ok(ev) => ev,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                };
                let r = match ev.as_ref() {
                    StoreEvent::Created(r) | StoreEvent::Updated { new: r, .. } => r,
                    StoreEvent::Destroyed(_) => continue,
                };
                if meta(r).r#type != omni_sim::types::ty::CLUSTER {
                    continue;
                }
                if let Ok(spec) = decode_spec::<ClusterSpec>(r) {
                    let proxy = spec.features.is_some_and(|f| f.enable_workload_proxy);
                    mark(&o, (meta(r).id.clone(), json!(proxy).to_string()));
                }
            }
        }));
        for i in 0..spec.workload_clusters {
            let Some(sim) = emulators::workload(emu, i) else {
                continue;
            };
            let mut rx = sim.store().subscribe();
            let w = workload.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let ev = match rx.recv().await {
                        Ok(ev) => ev,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return,
                    };
                    if ev.resource == "secrets" && ev.kind != "DELETED" {
                        let name = ev.object["metadata"]["name"].as_str().unwrap_or_default();
                        mark(
                            &w,
                            (name.to_owned(), ev.object["data"]["value"].to_string()),
                        );
                    }
                }
            }));
        }
        Self {
            kube,
            omni,
            workload,
            tasks,
        }
    }

    /// Latencies (ms) of the `changes` seen at both ends, and how many are still missing.
    fn latencies(&self, far: &Seen, changes: &[(String, String)]) -> (Vec<f64>, usize) {
        let near = self.kube.lock().unwrap_or_else(|p| p.into_inner());
        let far = far.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut missing = 0;
        for key in changes {
            match (near.get(key), far.get(key)) {
                (Some(a), Some(b)) => out.push(b.saturating_duration_since(*a).as_secs_f64() * 1e3),
                _ => missing += 1,
            }
        }
        (out, missing)
    }
}

impl Drop for Observers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A stream of `edits` spec edits (up to one per OmniCluster, turning
/// `features.enableWorkloadProxy` on; source Secrets get new data), one every `spacing`, as the bench's user; then waits up to `limit` for
/// each to arrive at the far end.
pub async fn change_latency(
    emu: &Emulators,
    spec: &FleetSpec,
    edits: usize,
    spacing: Duration,
    limit: Duration,
) -> anyhow::Result<Latency> {
    let observers = Observers::start(emu, spec);
    let before = writes(emu).0;
    let clusters = emulators::api(&emu.client, "OmniCluster")?;
    let secrets = emulators::api(&emu.client, "Secret")?;
    let mut cluster_changes = Vec::new();
    let mut secret_changes = Vec::new();
    let params = PatchParams::default();
    for e in 0..edits {
        // Each OmniCluster is edited at most once: flipping the flag back would repeat a value
        // the observers have already seen, and its arrival could not be told apart.
        if e < spec.clusters {
            let name = fleet::cluster_name(e);
            clusters
                .patch(
                    &name,
                    &params,
                    &Patch::Merge(json!({"spec": {"features": {"enableWorkloadProxy": true}}})),
                )
                .await?;
            cluster_changes.push((name, json!(true).to_string()));
        }
        if spec.syncs > 0 {
            let j = e % spec.syncs;
            let revision = 1 + (e / spec.syncs) as u64;
            let value = fleet::source_value(j, revision);
            secrets
                .patch(
                    &fleet::sync_name(j),
                    &params,
                    &Patch::Merge(json!({"stringData": {"value": value}})),
                )
                .await?;
            let encoded = json!(STANDARD.encode(value.as_bytes())).to_string();
            secret_changes.push((fleet::sync_name(j), encoded));
        }
        tokio::time::sleep(spacing).await;
    }
    let deadline = Instant::now() + limit;
    loop {
        let (a, missing_a) = observers.latencies(&observers.omni, &cluster_changes);
        let (b, missing_b) = observers.latencies(&observers.workload, &secret_changes);
        if (missing_a == 0 && missing_b == 0) || Instant::now() > deadline {
            return Ok(Latency {
                cluster_to_omni: percentiles(a, missing_a),
                secret_to_workload: percentiles(b, missing_b),
                writes: writes(emu).0.since(&before),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A digest of what Omni and the workload clusters hold that the fleet decides (Omni resource
/// specs of the template kinds; workload Secrets' type and data), so two variants can be
/// checked to end in the same state. Server-assigned fields (versions, UIDs, timestamps) are
/// left out.
pub fn end_state(emu: &Emulators, spec: &FleetSpec) -> EndState {
    use omni_sim::types::ty;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let (mut omni, mut workload) = (hasher.clone(), hasher.clone());
    let mut omni_resources = 0;
    for t in [
        ty::CLUSTER,
        ty::MACHINE_SET,
        ty::MACHINE_SET_NODE,
        ty::CONFIG_PATCH,
        ty::MANIFEST_GROUP,
    ] {
        let mut rs: Vec<(String, Vec<u8>)> = emu
            .omni
            .list(t)
            .into_iter()
            .map(|r| {
                let id = meta(&r).id.clone();
                (id, r.spec.map(|s| s.proto_spec).unwrap_or_default())
            })
            .collect();
        rs.sort();
        omni_resources += rs.len();
        for h in [&mut hasher, &mut omni] {
            t.hash(h);
            rs.hash(h);
        }
    }
    let mut workload_secrets = 0;
    for i in 0..spec.workload_clusters {
        let Some(sim) = emulators::workload(emu, i) else {
            continue;
        };
        let mut secrets: Vec<String> = sim
            .store()
            .list_objects("", "secrets", Some(fleet::TARGET_NAMESPACE))
            .into_iter()
            .filter_map(|s| workload_secret_state(&s))
            .collect();
        secrets.sort();
        workload_secrets += secrets.len();
        for h in [&mut hasher, &mut workload] {
            i.hash(h);
            secrets.hash(h);
        }
    }
    EndState {
        omni_resources,
        workload_secrets,
        digest: format!("{:016x}", hasher.finish()),
        omni_digest: format!("{:016x}", omni.finish()),
        workload_digest: format!("{:016x}", workload.finish()),
    }
}

/// What a workload Secret contributes to the end state: type and data of a synced Secret; for
/// Helm's release records (whose data holds timestamps) only the name of the deployed release,
/// so a variant that upgrades more often still ends in the same state.
fn workload_secret_state(secret: &Value) -> Option<String> {
    let name = &secret["metadata"]["name"];
    if secret["type"] == "helm.sh/release.v1" {
        let labels = &secret["metadata"]["labels"];
        return (labels["status"] == "deployed").then(|| format!("release {}", labels["name"]));
    }
    Some(format!("{name} {} {}", secret["type"], secret["data"]))
}

/// See [`end_state`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EndState {
    /// Omni resources of the template kinds.
    pub omni_resources: usize,
    /// Secrets in the workload clusters' target namespace (for Helm: deployed releases).
    pub workload_secrets: usize,
    /// Hash over both.
    pub digest: String,
    /// Hash over the Omni resources alone: which half differs when `digest` does.
    pub omni_digest: String,
    /// Hash over the workload Secrets alone.
    pub workload_digest: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_a_cold_start_is_named_by_kind_and_reason() {
        let waiting = |generation: i64, observed: i64, reason: &str| {
            serde_json::json!({
                "metadata": {"name": "x", "generation": generation},
                "status": {"observedGeneration": observed, "conditions": [
                    {"type": "Ready", "status": "False", "reason": reason, "message": "m"}
                ]}
            })
        };
        assert_eq!(
            not_ready_reason("OmniSecretSync", &waiting(1, 1, "ClusterNotReady")),
            "OmniSecretSync ClusterNotReady"
        );
        assert_eq!(
            not_ready_reason("OmniCluster", &waiting(2, 1, "Running")),
            "OmniCluster older generation"
        );
        assert_eq!(
            not_ready_reason(
                "OmniWorkers",
                &serde_json::json!({"metadata": {"generation": 1}})
            ),
            "OmniWorkers not reconciled yet"
        );
        assert_eq!(
            not_ready_reason(
                "OmniWorkers",
                &serde_json::json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1}})
            ),
            "OmniWorkers no Ready condition"
        );

        let mut p = Progress {
            objects: 5_000,
            ready: 3_000,
            ..Progress::default()
        };
        p.not_ready
            .insert("OmniSecretSync ClusterNotReady".into(), 1_990);
        p.not_ready
            .insert("OmniCluster WaitingForMachines".into(), 10);
        // More than the tail: the line stays short.
        assert_eq!(tail_summary(&p), None);
        p.ready = 4_000;
        p.not_ready
            .insert("OmniSecretSync ClusterNotReady".into(), 990);
        assert_eq!(
            tail_summary(&p).as_deref(),
            Some(
                "not Ready: OmniSecretSync ClusterNotReady 990, OmniCluster WaitingForMachines 10"
            )
        );
        for i in 0..7 {
            p.not_ready.insert(format!("OmniMachine R{i}"), 1);
        }
        assert!(tail_summary(&p).unwrap().ends_with(", 3 more"), "{p:?}");
        p.ready = p.objects;
        assert_eq!(tail_summary(&p), None);
    }

    #[test]
    fn the_convergence_check_takes_at_most_a_tenth_of_a_core() {
        assert_eq!(
            poll_pause(Duration::from_millis(3)),
            Duration::from_millis(250)
        );
        assert_eq!(
            poll_pause(Duration::from_millis(80)),
            Duration::from_millis(800)
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let p = percentiles((1..=100).map(f64::from).collect(), 2);
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!((p.count, p.missing), (100, 2));
        assert_eq!(percentiles(Vec::new(), 0).p99_ms, 0.0);
    }

    #[test]
    fn helm_release_records_count_by_deployed_name_only() {
        let record = |version: &str, status: &str| {
            json!({"metadata": {"name": format!("sh.helm.release.v1.h-1.v{version}"),
                "labels": {"name": "h-1", "owner": "helm", "status": status, "version": version}},
                "type": "helm.sh/release.v1", "data": {"release": format!("at-{version}")}})
        };
        assert_eq!(
            workload_secret_state(&record("1", "deployed")),
            workload_secret_state(&record("7", "deployed"))
        );
        assert_eq!(workload_secret_state(&record("1", "superseded")), None);
        let synced =
            json!({"metadata": {"name": "s-1"}, "type": "Opaque", "data": {"value": "dg=="}});
        assert_eq!(
            workload_secret_state(&synced).as_deref(),
            Some(r#""s-1" "Opaque" {"value":"dg=="}"#)
        );
    }

    #[test]
    fn ready_means_ready_at_the_current_generation() {
        let ready = json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True"}]}});
        let stale = json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True"}]}});
        let failing = json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "False"}]}});
        for kind in ["OmniCluster", "OmniWorkers"] {
            assert!(ready_at_generation(kind, &ready));
            assert!(!ready_at_generation(kind, &stale));
            assert!(!ready_at_generation(kind, &failing));
        }
    }

    #[test]
    fn a_part_without_a_ready_condition_is_ready_when_accepted() {
        // The original implementation's parts: `Accepted` only.
        let accepted = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "conditions": [{"type": "Accepted", "status": "True"}]}});
        let missing = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "conditions": [{"type": "Accepted", "status": "False"}]}});
        // The operator's parts say whether their cluster is Ready: Accepted alone is not enough.
        let waiting = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "conditions": [{"type": "Accepted", "status": "True"},
                {"type": "Ready", "status": "False"}]}});
        assert!(ready_at_generation("OmniMachine", &accepted));
        assert!(!ready_at_generation("OmniMachine", &missing));
        assert!(!ready_at_generation("OmniMachine", &waiting));
        assert!(!ready_at_generation("OmniCluster", &accepted));
    }

    #[test]
    fn a_waiting_object_is_named_with_what_its_status_says() {
        let failing = json!({"metadata": {"name": "c-1", "generation": 2},
            "status": {"observedGeneration": 2, "conditions": [
                {"type": "Ready", "status": "False", "reason": "Waiting", "message": "no cluster"}]}});
        let stale = json!({"metadata": {"name": "c-2", "generation": 3},
            "status": {"observedGeneration": 2}});
        assert_eq!(
            waiting_on("OmniCluster", &failing),
            "OmniCluster/c-1: Waiting: no cluster"
        );
        assert_eq!(
            waiting_on("OmniWorkers", &stale),
            "OmniWorkers/c-2: generation Some(3) observed Some(2); no Ready condition"
        );
    }
}
