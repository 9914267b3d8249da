//! The null operator of the benchmark against a small fleet.

use std::path::PathBuf;
use std::time::Duration;

use omni_bench::emulators::OmniLatency;
use omni_bench::fleet::FleetSpec;
use omni_bench::{RunConfig, report};

/// The null operator (the operator's watches, nothing else) lists a small fleet through the
/// operator's credentials and holds its watches; its figures are printed, never asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_null_operator_lists_the_fleet_with_the_operators_watches() {
    let config = RunConfig {
        operator_binary: PathBuf::new(),
        original_binary: None,
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
        sets: false,
    };
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_omni-bench"));
    // Fails when the child cannot start, is refused a list or watch, or never lists.
    let null = omni_bench::null_operator::run(&config, &spec, &bench)
        .await
        .unwrap_or_else(|e| panic!("the null operator did not list the fleet: {e:#}"));
    println!("{}", report::null_table(&null, None));
}
