//! The CI smoke run of the benchmark: a small fleet converges, every change arrives, and the
//! converged fleet left alone gets no write from the operator. Figures (times, CPU, memory) are
//! printed, never asserted: speed goals live in the benchmark itself.

use std::path::PathBuf;
use std::time::Duration;

use omni_bench::emulators::OmniLatency;
use omni_bench::fleet::FleetSpec;
use omni_bench::{RunConfig, report, run_once};

/// The `omni-operator` binary of this build (target/<profile>/omni-operator), brought up to date
/// first: `cargo test -p omni-bench` alone does not rebuild another package's binary, and a stale
/// one would measure old code. The workspace's test build is asked for, so the binary has the
/// feature set `cargo test --workspace` gives it (a no-op right after that command).
/// `OMNI_OPERATOR_BIN` names a binary to use as it is instead.
fn operator_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("OMNI_OPERATOR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build
        .args(["test", "--workspace", "--no-run", "--quiet"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build.status().unwrap();
    assert!(status.success(), "building omni-operator failed");
    let binary = profile_dir.join("omni-operator");
    assert!(binary.is_file(), "{} was not built", binary.display());
    binary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_converged_fleet_left_alone_gets_no_operator_write() {
    let config = RunConfig {
        operator_binary: operator_binary(),
        helm: None,
        omni_latency: OmniLatency {
            per_rpc_ms: 1,
            per_connect_ms: 5,
        },
        idle: Duration::from_secs(5),
        edits: 10,
        edit_spacing: Duration::from_millis(10),
        cold_start_limit: Duration::from_secs(240),
    };
    // Scaled down from the 50 clusters / 500 syncs, which take over four minutes in a
    // debug build on two shared cores: 10 clusters (40 cluster objects) and 100 syncs over 2
    // workload clusters exercise every controller and path the same way.
    let spec = FleetSpec {
        clusters: 10,
        syncs: 100,
        workload_clusters: 2,
        helm_releases: 0,
    };
    let run = run_once(&config, &spec, "none").await.unwrap();
    println!("{}", report::run_table(&run));

    assert!(
        run.cold_start.converged,
        "the fleet did not converge: {:?}",
        run.cold_start.progress
    );
    assert_eq!(
        run.idle.writes_per_minute.total(),
        0.0,
        "the operator wrote while nothing changed: {:?} per minute; management writes {:?}",
        run.idle.writes_per_minute,
        run.idle.management_writes
    );
    let latency = run.latency.expect("the change phase ran");
    assert_eq!(
        (
            latency.cluster_to_omni.count,
            latency.cluster_to_omni.missing
        ),
        (10, 0),
        "every OmniCluster edit reaches Omni"
    );
    assert_eq!(
        (
            latency.secret_to_workload.count,
            latency.secret_to_workload.missing
        ),
        (10, 0),
        "every source Secret edit reaches its workload cluster"
    );
    // Both ends hold the whole fleet.
    assert_eq!(run.end_state.workload_secrets, 100);
}

/// The null operator (the operator's watches, nothing else) lists a small fleet through the
/// operator's credentials and holds its watches; its figures are printed, never asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_null_operator_lists_the_fleet_with_the_operators_watches() {
    let config = RunConfig {
        operator_binary: PathBuf::new(),
        helm: None,
        omni_latency: OmniLatency {
            per_rpc_ms: 1,
            per_connect_ms: 5,
        },
        idle: Duration::from_secs(2),
        edits: 0,
        edit_spacing: Duration::from_millis(10),
        cold_start_limit: Duration::from_secs(60),
    };
    let spec = FleetSpec {
        clusters: 5,
        syncs: 20,
        workload_clusters: 1,
        helm_releases: 0,
    };
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_omni-bench"));
    // Fails when the child cannot start, is refused a list or watch, or never lists.
    let null = omni_bench::null_operator::run(&config, &spec, &bench)
        .await
        .unwrap_or_else(|e| panic!("the null operator did not list the fleet: {e:#}"));
    println!("{}", report::null_table(&null, None));
}
