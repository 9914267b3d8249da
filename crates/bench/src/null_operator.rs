//! The null operator: a child process that opens the operator's watches of the management API
//! (the same resources, as many times as the operator opens them) and does nothing
//! else. What the emulators spend serving it is the floor of what any operator costs them, so
//! comparing it with the real operator's own CPU at the same fleet tells whether the emulators
//! could be what limits a run.
//!
//! The child is the `omni-bench` executable again, started with [`ENV`] set (see `main`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::RunConfig;
use crate::emulators::Emulators;
use crate::fleet::{self, FleetSpec};
use crate::operator::{OperatorProcess, own_cpu_secs};

/// Set in the environment of the child process that is to act as the null operator.
pub const ENV: &str = "OMNI_BENCH_NULL_OPERATOR";

/// Printed by the child once every watch has listed its objects.
const LISTED: &str = "null operator: every watch listed";

/// The operator's watches of the management API, per kind: one per kind, shared by every
/// controller that reads it (`Watches` in `crates/operator/src/controllers/watches.rs`). Until
/// the watches were shared, each controller opened its own: 26 in all, eight of them of
/// OmniClusters and four of Secrets (this list said 27: it counted one OmniCluster watch too
/// many). Secrets and ConfigMaps are watched as metadata only, as the operator does.
pub const WATCHES: &[(&str, Watch)] = &[
    ("OmniConnection", Watch::Whole),
    ("OmniCluster", Watch::Whole),
    ("OmniControlPlane", Watch::Whole),
    ("OmniWorkers", Watch::Whole),
    ("OmniMachine", Watch::Whole),
    ("OmniSecretSync", Watch::Whole),
    ("OmniHelmRelease", Watch::Whole),
    ("OmniKubeconfigExport", Watch::Whole),
    ("Secret", Watch::Metadata),
    ("ConfigMap", Watch::Metadata),
];

/// What a watch of [`WATCHES`] receives of each object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The whole object.
    Whole,
    /// Its metadata only (`PartialObjectMetadata`).
    Metadata,
}

/// The child side: opens [`WATCHES`] in the fleet's namespace with the operator's credentials
/// (`KUBECONFIG`), prints `LISTED` once each has listed, and keeps them open until killed.
pub async fn serve() -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("the null operator's client (KUBECONFIG)")?;
    let mut streams = Vec::new();
    for (kind, watch) in WATCHES {
        let ar = crate::emulators::api_resource(kind)?;
        let index = streams.len();
        let config = watcher::Config::default();
        let namespace = fleet::NAMESPACE;
        streams.push(match watch {
            Watch::Whole => {
                let api: kube::Api<kube::api::DynamicObject> =
                    kube::Api::namespaced_with(client.clone(), namespace, &ar);
                watcher(api, config)
                    .default_backoff()
                    .map(move |event| (index, init_done(&event)))
                    .boxed()
            }
            // An `Api` of partial objects asks for metadata only.
            Watch::Metadata => {
                let api: kube::Api<kube::core::PartialObjectMeta<kube::api::DynamicObject>> =
                    kube::Api::namespaced_with(client.clone(), namespace, &ar);
                watcher(api, config)
                    .default_backoff()
                    .map(move |event| (index, init_done(&event)))
                    .boxed()
            }
        });
    }
    let mut listed = vec![false; streams.len()];
    let mut all = futures::stream::select_all(streams);
    let mut announced = false;
    while let Some((index, init_done)) = all.next().await {
        if init_done {
            listed[index] = true;
        }
        if !announced && listed.iter().all(|l| *l) {
            println!("{LISTED}");
            announced = true;
        }
    }
    Ok(())
}

/// Whether `event` says the watch has listed every object.
fn init_done<T, E>(event: &Result<watcher::Event<T>, E>) -> bool {
    matches!(event, Ok(watcher::Event::InitDone))
}

/// What serving the null operator cost.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NullResult {
    /// Fleet size.
    pub fleet: FleetSpec,
    /// Watches the null operator held open.
    pub watches: usize,
    /// Seconds from its start until every watch had listed.
    pub listed_secs: f64,
    /// The emulators' CPU seconds until then.
    pub emulator_cpu_secs_cold: f64,
    /// The null operator's own CPU seconds until then.
    pub null_cpu_secs_cold: f64,
    /// Its peak resident memory, in MiB.
    pub null_peak_rss_mib: f64,
    /// The emulators' CPU seconds per minute while the watches are held open.
    pub emulator_cpu_secs_per_minute_idle: f64,
}

/// Starts fresh emulators with `spec`'s fleet, runs the null operator (`bench_binary`, the
/// `omni-bench` executable) against them until it has listed everything and then for the idle
/// window, and reports the cost.
pub async fn run(
    config: &RunConfig,
    spec: &FleetSpec,
    bench_binary: &Path,
) -> anyhow::Result<NullResult> {
    let dir = tempfile::Builder::new()
        .prefix("omni-bench-null-")
        .tempdir()?;
    let emu = Emulators::start(spec, config.omni_latency, dir.path(), None).await?;
    crate::phases::apply(&emu, spec).await?;
    let result = measure(config, spec, &emu, dir.path(), bench_binary).await;
    emu.shutdown().await;
    result
}

async fn measure(
    config: &RunConfig,
    spec: &FleetSpec,
    emu: &Emulators,
    dir: &Path,
    bench_binary: &Path,
) -> anyhow::Result<NullResult> {
    let own = own_cpu_secs();
    let started = Instant::now();
    let mut child = OperatorProcess::start_null(bench_binary, &emu.operator_kubeconfig, dir)?;
    let outcome = async {
        loop {
            child.check_alive()?;
            let log = std::fs::read_to_string(&child.log).unwrap_or_default();
            if log.contains(LISTED) {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < config.cold_start_limit,
                "the null operator did not list everything within {:?}",
                config.cold_start_limit
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let listed_secs = started.elapsed().as_secs_f64();
        let emulator_cpu_secs_cold = own_cpu_secs() - own;
        let cold = child.sample()?;
        let idle_own = own_cpu_secs();
        let idle_started = Instant::now();
        tokio::time::sleep(config.idle).await;
        child.check_alive()?;
        let per_minute = 60.0 / idle_started.elapsed().as_secs_f64();
        Ok(NullResult {
            fleet: *spec,
            watches: WATCHES.len(),
            listed_secs,
            emulator_cpu_secs_cold,
            null_cpu_secs_cold: cold.cpu_secs,
            null_peak_rss_mib: cold.peak_rss_bytes as f64 / (1024.0 * 1024.0),
            emulator_cpu_secs_per_minute_idle: (own_cpu_secs() - idle_own) * per_minute,
        })
    }
    .await;
    child.stop().await;
    outcome
}
