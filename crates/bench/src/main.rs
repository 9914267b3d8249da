//! `omni-bench`: see `docs/performance.md`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use omni_bench::emulators::OmniLatency;
use omni_bench::fleet::FleetSpec;
use omni_bench::{RunConfig, report, run_once};

/// The quirks of the original implementation the operator's hidden `--baseline-quirks` flag
/// models, one at a time; `all` is every one together.
const QUIRKS: &[&str] = &[
    "status-every-reconcile",
    "connection-per-call",
    "helm-upgrade-every-trigger",
];

/// Benchmarks omni-operator at scale against kube-sim and omni-sim.
#[derive(Debug, Parser)]
#[command(name = "omni-bench", version)]
struct Args {
    /// OmniClusters (each with an OmniControlPlane, OmniWorkers and an OmniMachine).
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    /// OmniSecretSyncs (default: 10 per cluster).
    #[arg(long)]
    syncs: Option<usize>,
    /// Clusters with an OmniKubeconfigExport whose workload API receives the syncs (default:
    /// a tenth of the clusters, between 1 and 100).
    #[arg(long)]
    workload_clusters: Option<usize>,
    /// OmniHelmReleases (need helm).
    #[arg(long, default_value_t = 0)]
    helm_releases: usize,
    /// The fleet-set scenario: one OmniHelmReleaseSet and one OmniSecretSyncSet with minted
    /// credentials over every cluster (needs helm), then a template change rolled out 10 % at a
    /// time and a relabel of 10 % of the clusters out of the selector and back. Without
    /// --syncs / --workload-clusters / --helm-releases, the fleet has no hand-written ones.
    #[arg(long)]
    sets: bool,
    /// Length of the idle window, in seconds.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Spec edits in the change-latency phase (0 skips the phase).
    #[arg(long, default_value_t = 100)]
    edits: usize,
    /// Milliseconds between two edits.
    #[arg(long, default_value_t = 20)]
    edit_spacing_ms: u64,
    /// Give up on a cold start after this many seconds (the run is reported unconverged).
    #[arg(long, default_value_t = 900)]
    cold_start_limit_secs: u64,
    /// Latency added to every Omni call (equal for every variant).
    #[arg(long, default_value_t = 2)]
    omni_rpc_latency_ms: u64,
    /// Latency added to every new Omni connection (equal for every variant).
    #[arg(long, default_value_t = 20)]
    omni_connect_latency_ms: u64,
    /// Also run these cluster counts (comma-separated; syncs and workload clusters scale in
    /// proportion) and fit the growth exponent of every figure.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<usize>,
    /// Compare the operator with its model of the original implementation: each quirk alone
    /// and all together, fresh emulators per run, alternating order.
    #[arg(long)]
    baseline: bool,
    /// Repetitions per variant with --baseline (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repetitions: u32,
    /// Only these variants with --baseline (default: each quirk, then `all`, then `original`
    /// with --original-binary).
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// The original implementation's binary, built from its source (docs/performance.md): with
    /// --baseline, the variant `original` runs it against the same emulators and fleet.
    #[arg(long)]
    original_binary: Option<PathBuf>,
    /// Write the results as JSON here (`-` for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// The omni-operator binary (default: beside this one, rebuilt first when run by cargo).
    #[arg(long)]
    operator_binary: Option<PathBuf>,
    /// Helm, for --helm-releases (default: HELM_BIN, .cache/test-tools/bin/helm, PATH).
    #[arg(long)]
    helm_binary: Option<PathBuf>,
    /// After the operator's run, serve the same fleet to the null operator (only the operator's
    /// watches, nothing else) and compare what the emulators spend on it with the operator's
    /// own CPU.
    #[arg(long)]
    null_operator: bool,
    /// Split the fleet over this many operator processes by the shard label (shard 0 the
    /// default shard, unlabelled): per-shard CPU and RSS, and a failed run if any object was
    /// written by two shards (see crates/bench/src/shards.rs).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    shards: u16,
}

/// With `cargo run`, brings the operator binary beside this one up to date, so a benchmark never
/// measures stale code.
fn build_operator_when_run_by_cargo() -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let exe = std::env::current_exe()?;
    let release = exe
        .parent()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n == "release");
    let mut cmd = std::process::Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "-p",
        "omni-operator",
        "--bin",
        "omni-operator",
    ]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .context("running cargo build -p omni-operator")?;
    anyhow::ensure!(status.success(), "cargo build -p omni-operator failed");
    Ok(())
}

fn spec_for(args: &Args, clusters: usize) -> FleetSpec {
    // The set scenario brings its own per-cluster objects: hand-written ones only when asked.
    let default_syncs = if args.sets { 0.0 } else { 10.0 };
    let hand_written = !args.sets || args.syncs.is_some_and(|s| s > 0) || args.helm_releases > 0;
    let default_share = if hand_written { 0.1 } else { 0.0 };
    let syncs_per_cluster = args
        .syncs
        .map_or(default_syncs, |s| s as f64 / args.clusters.max(1) as f64);
    let workload_share = args
        .workload_clusters
        .map_or(default_share, |w| w as f64 / args.clusters.max(1) as f64);
    let workload_clusters = match (clusters == args.clusters, args.workload_clusters) {
        (true, Some(w)) => w,
        _ if workload_share == 0.0 => 0,
        _ => ((clusters as f64 * workload_share).round() as usize).clamp(1, 100.min(clusters)),
    };
    FleetSpec {
        clusters,
        syncs: match (clusters == args.clusters, args.syncs) {
            (true, Some(s)) => s,
            _ => (clusters as f64 * syncs_per_cluster).round() as usize,
        },
        workload_clusters,
        helm_releases: args.helm_releases,
        sets: args.sets,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if std::env::var_os(omni_bench::null_operator::ENV).is_some() {
        return omni_bench::null_operator::serve().await;
    }
    let args = Args::parse();
    if args.operator_binary.is_none() {
        build_operator_when_run_by_cargo()?;
    }
    let helm = match (args.helm_releases > 0 || args.sets, &args.helm_binary) {
        (false, _) => None,
        (true, explicit) => Some(omni_sandbox::find_helm(explicit.as_deref()).context(
            "--helm-releases and --sets need helm: pass --helm-binary or run scripts/install-test-tools",
        )?),
    };
    let config = RunConfig {
        operator_binary: omni_bench::operator::locate_binary(args.operator_binary.as_deref())?,
        original_binary: match &args.original_binary {
            Some(p) if !p.is_file() => {
                anyhow::bail!("--original-binary {} does not exist", p.display())
            }
            p => p.clone(),
        },
        helm,
        omni_latency: OmniLatency {
            per_rpc_ms: args.omni_rpc_latency_ms,
            per_connect_ms: args.omni_connect_latency_ms,
        },
        idle: Duration::from_secs(args.idle_secs),
        edits: args.edits,
        edit_spacing: Duration::from_millis(args.edit_spacing_ms),
        cold_start_limit: Duration::from_secs(args.cold_start_limit_secs),
    };
    let spec = spec_for(&args, args.clusters);
    spec.validate()?;

    let mut output = serde_json::Map::new();
    let mut outcome = Ok(());
    if args.shards > 1 {
        eprintln!("==> {} clusters over {} shards", spec.clusters, args.shards);
        let run = omni_bench::shards::run(&config, &spec, usize::from(args.shards)).await?;
        let table = omni_bench::shards::table(&run);
        print!("{}", table.as_ref().unwrap_or_else(|t| t));
        output.insert("sharded".into(), serde_json::to_value(&run)?);
        if table.is_err() {
            outcome = Err(anyhow::anyhow!(
                "the sharded run failed: an object written by two shards or by another shard, or no convergence"
            ));
        }
    } else if args.baseline {
        let variants: Vec<String> = if args.variants.is_empty() {
            QUIRKS
                .iter()
                .filter(|q| spec.helm_releases > 0 || **q != "helm-upgrade-every-trigger")
                .map(|q| (*q).to_owned())
                .chain(["all".to_owned()])
                .chain(
                    args.original_binary
                        .is_some()
                        .then(|| omni_bench::ORIGINAL.to_owned()),
                )
                .collect()
        } else {
            args.variants.clone()
        };
        let mut order: Vec<String> = vec!["none".to_owned()];
        order.extend(variants.iter().filter(|v| *v != "none").cloned());
        let mut runs = Vec::new();
        for rep in 0..args.repetitions {
            // Alternate the order so drift over time (caches, thermal) favours no variant.
            let this_round: Vec<&String> = if rep % 2 == 0 {
                order.iter().collect()
            } else {
                order.iter().rev().collect()
            };
            for variant in this_round {
                eprintln!(
                    "==> repetition {} of {}: {variant}",
                    rep + 1,
                    args.repetitions
                );
                let r = run_once(&config, &spec, variant).await?;
                eprint!("{}", report::run_table(&r));
                runs.push(r);
            }
        }
        let comparison = report::compare(runs);
        println!(
            "\nbaseline comparison (medians of {} repetitions; ratio = variant / operator):",
            args.repetitions
        );
        print!("{}", report::comparison_table(&comparison));
        output.insert("baseline".into(), serde_json::to_value(&comparison)?);
    } else {
        let mut sizes: Vec<usize> = args.sweep.clone();
        sizes.push(args.clusters);
        sizes.sort_unstable();
        sizes.dedup();
        let mut runs = Vec::new();
        for clusters in sizes {
            let spec = spec_for(&args, clusters);
            eprintln!(
                "==> {} clusters, {} syncs over {} workload clusters{}",
                spec.clusters,
                spec.syncs,
                spec.workload_clusters,
                if spec.sets { ", the fleet sets" } else { "" }
            );
            let r = run_once(&config, &spec, "none").await?;
            print!("{}", report::run_table(&r));
            runs.push(r);
        }
        if args.null_operator {
            let spec = spec_for(&args, args.clusters);
            eprintln!("==> null operator, {} clusters", spec.clusters);
            let null =
                omni_bench::null_operator::run(&config, &spec, &std::env::current_exe()?).await?;
            let operator = runs.iter().find(|r| r.fleet == spec);
            print!("\n{}", report::null_table(&null, operator));
            output.insert("null_operator".into(), serde_json::to_value(&null)?);
        }
        if runs.len() > 1 {
            let sweep = report::sweep(runs);
            print!("\n{}", report::sweep_table(&sweep));
            output.insert("sweep".into(), serde_json::to_value(&sweep)?);
        } else {
            output.insert("run".into(), serde_json::to_value(&runs[0])?);
        }
    }
    output.insert(
        "omni_latency".into(),
        serde_json::to_value(config.omni_latency)?,
    );
    match args.json.as_deref() {
        None => {}
        Some(p) if p.as_os_str() == "-" => {
            println!("{}", serde_json::to_string_pretty(&output)?)
        }
        Some(p) => std::fs::write(p, serde_json::to_string_pretty(&output)?)
            .with_context(|| format!("writing {}", p.display()))?,
    }
    outcome
}
