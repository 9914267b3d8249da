//! The CI smoke run of the benchmark (`omni-bench`), here so that it measures the
//! `omni-operator` binary cargo built for these tests: a small fleet converges, every change arrives, and the
//! converged fleet left alone gets no write from the operator. Figures (times, CPU, memory) are
//! printed, never asserted: speed goals live in the benchmark itself.

use std::path::PathBuf;
use std::time::Duration;

use omni_bench::emulators::OmniLatency;
use omni_bench::fleet::FleetSpec;
use omni_bench::{RunConfig, report, run_once};

/// The smoke runs' settings: the operator binary cargo built for these tests, a 5 s idle
/// window and `edits` edits.
fn config(helm: Option<PathBuf>, edits: usize) -> RunConfig {
    RunConfig {
        operator_binary: PathBuf::from(env!("CARGO_BIN_EXE_omni-operator")),
        original_binary: None,
        helm,
        omni_latency: OmniLatency {
            per_rpc_ms: 1,
            per_connect_ms: 5,
        },
        idle: Duration::from_secs(5),
        edits,
        edit_spacing: Duration::from_millis(10),
        cold_start_limit: Duration::from_secs(240),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_converged_fleet_left_alone_gets_no_operator_write() {
    let config = config(None, 10);
    // Scaled down from the 50 clusters / 500 syncs, which take over four minutes in a
    // debug build on two shared cores: 10 clusters (40 cluster objects) and 100 syncs over 2
    // workload clusters exercise every controller and path the same way.
    let spec = FleetSpec {
        clusters: 10,
        syncs: 100,
        workload_clusters: 2,
        helm_releases: 0,
        sets: false,
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

/// The baseline model (`omni-bench --baseline`, every quirk on) converges a small fleet into
/// the state the operator reaches: a model that never converges compares nothing. It did not
/// once children's `Ready` followed their cluster's while the model's predicate kept the
/// cluster's condition changes from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_baseline_model_converges_a_fleet_too() {
    let mut config = config(None, 2);
    config.idle = Duration::from_secs(2);
    config.cold_start_limit = Duration::from_secs(90);
    let spec = FleetSpec {
        clusters: 2,
        syncs: 10,
        workload_clusters: 1,
        helm_releases: 0,
        sets: false,
    };
    let run = run_once(&config, &spec, "all").await.unwrap();
    println!("{}", report::run_table(&run));

    assert!(
        run.cold_start.converged,
        "the model did not converge: {:?}",
        run.cold_start.progress
    );
    // Two clusters' template resources in Omni, every copy in the workload cluster.
    assert_eq!(
        (run.end_state.omni_resources, run.end_state.workload_secrets),
        (12, 10)
    );
}

/// The set scenario (`omni-bench --sets`) on a few clusters: both sets and everything they
/// generate converge, the converged fleet left alone gets no write (the run itself fails on one),
/// and the template change and the relabel out of the selector and back reach every cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_converged_fleet_of_sets_left_alone_gets_no_operator_write() {
    let helm =
        omni_sandbox::find_helm(None).expect("helm is needed: run scripts/install-test-tools");
    let config = config(Some(helm), 4);
    let spec = FleetSpec {
        clusters: 4,
        syncs: 0,
        workload_clusters: 0,
        helm_releases: 0,
        sets: true,
    };
    let run = run_once(&config, &spec, "none").await.unwrap();
    println!("{}", report::run_table(&run));

    assert!(
        run.cold_start.converged,
        "the sets did not converge: {:?}",
        run.cold_start.progress
    );
    // run_once fails on an idle write with the sets; the figure says the same.
    assert_eq!(run.idle.writes_per_minute.total(), 0.0);
    let reach = run
        .cold_start
        .progress
        .sets
        .as_ref()
        .expect("the sets' reach");
    assert_eq!((reach.releases, reach.copies), (4, 4));
    let floor = &run.cold_start.floor;
    for kind in ["OmniHelmRelease", "OmniSecretSync", "OmniKubeconfigExport"] {
        assert_eq!(
            floor.kinds[kind].generated, floor.kinds[kind].objects,
            "{kind}"
        );
    }
    assert_eq!(floor.kinds["OmniKubeconfigExport"].generated, 8);
    let sets = run.sets.expect("the set phases ran");
    assert_eq!(sets.generated, 16);
    let steps: Vec<(&str, bool, usize)> = sets
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.converged, s.clusters))
        .collect();
    assert_eq!(
        steps,
        vec![
            (omni_bench::sets::TEMPLATE_CHANGE, true, 4),
            (omni_bench::sets::RELABEL_OUT, true, 1),
            (omni_bench::sets::RELABEL_IN, true, 1),
        ]
    );
}
