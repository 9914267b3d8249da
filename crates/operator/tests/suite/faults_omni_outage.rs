//! Fault suite, Omni outage: Omni answers every call `UNAVAILABLE`, or (separately) hangs every
//! call past the client's deadline, while OmniClusters are created, edited and deleted and a
//! kubeconfig export comes due for rotation. During the outage each touched object reports a
//! failure condition and retries with backoff; the cluster being deleted keeps its finalizer.
//! Once Omni is back everything converges with no manual step, each change reached Omni exactly
//! once, Omni holds exactly what the custom resources say, and nothing writes afterwards.
//!
//! "5 simulated minutes": the outage lasts 5 minutes. What matters for the operator is
//! how the outage compares with its retry schedule (backoff 5 s · 2ⁿ, capped at 300 s) and its
//! deadlines (30 s per Omni call, 60 s per pass): a 5-minute outage is 5 backoff steps (retries
//! at about 5, 15, 35, 75 and 155 s) and, when Omni hangs, about 6 hung attempts of 30 s. In CI
//! the window is scaled down to keep the file well under 2 minutes: 20 s for `UNAVAILABLE`
//! (retries at about 5 and 15 s, the next one after the outage ends) and 40 s for the hang (one
//! attempt ends at its 30 s deadline, the retry is hung when Omni recovers and goes through).
//! Each phase also lasts until every object has reported its failure and retried at least once,
//! whatever the machine's speed. `FAULT_SOAK=1` runs the real 5 minutes for both modes, with a
//! 60 s quiet check afterwards instead of 5 s.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use omni_client::proto::specs::ClusterSpec;
use omni_operator::api::{OmniCluster, OmniConnection, OmniKubeconfigExport};
use omni_operator::controllers::OMNI_DEADLINE;
use omni_sim::types::ty;
use omni_sim::{AppliedWrites, Outage, RunningOmniSim};
use serde_json::json;
use support::conditions::{Cond, is_false, is_true};
use support::env::{CONNECTION, Env, Namespaced, eventually_within};
use support::status_time;
use tokio::time::Instant;

const FINALIZER: &str = "omni.texashpc.com/finalizer";
const READY: Cond = is_true("Ready");

fn soak() -> bool {
    std::env::var("FAULT_SOAK").is_ok_and(|v| v == "1")
}

/// How long Omni stays down (see the module comment for the scaling).
fn outage_window(mode: Outage) -> Duration {
    match (soak(), mode) {
        (true, _) => Duration::from_secs(300),
        (false, Outage::Unavailable) => Duration::from_secs(20),
        (false, Outage::Hang) => Duration::from_secs(40),
    }
}

fn quiet_window() -> Duration {
    Duration::from_secs(if soak() { 60 } else { 5 })
}

/// OmniCluster `name` with its control plane of one `machine`, re-checked every 5 minutes (so
/// only the outage and the changes make the operator call Omni).
async fn cluster(env: &Env, name: &str, machine: &str) {
    env.cluster(name, machine, json!({"syncInterval": "5m"}))
        .await;
}

/// What changed in Omni's applied writes since `before`.
fn writes_since(before: &AppliedWrites, now: &AppliedWrites) -> BTreeMap<String, u64> {
    now.iter()
        .filter_map(|(k, n)| {
            let d = n - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (format!("{} {}({})", k.0, k.1, k.2), d))
        })
        .collect()
}

/// The environment with a test clock, where exported kubeconfigs point at a closed port (the
/// operator's usability probe is then inconclusive and keeps them, as with a workload cluster
/// that is down); clusters `edit-me` and `delete-me` Ready and an export of `edit-me`'s
/// kubeconfig done.
async fn start() -> Env {
    let env = Env::builder()
        .test_clock()
        .kubeconfigs_point_at_a_closed_port()
        .start()
        .await;
    cluster(&env, "edit-me", "aaaaaaaa-0000-4000-8000-000000000001").await;
    cluster(&env, "delete-me", "aaaaaaaa-0000-4000-8000-000000000002").await;
    let _: OmniKubeconfigExport = env
        .create_spec(
            "kc",
            json!({
                "clusterRef": {"name": "edit-me"},
                "targetSecretRef": {"name": "kc-kubeconfig"},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "24h",
                "renewBefore": "4h",
                "deletionPolicy": "Delete",
            }),
        )
        .await;
    for name in ["edit-me", "delete-me"] {
        env.wait_cond::<OmniCluster>(name, READY).await;
    }
    env.wait_cond::<OmniKubeconfigExport>("kc", READY).await;
    env.wait_cond::<OmniConnection>(CONNECTION, READY).await;
    env
}

/// The bearer token of the kubeconfig exported by `kc` (a secret the leak scan looks for).
async fn exported_token(env: &Env) -> String {
    env.exported_token("kc-kubeconfig")
        .await
        .unwrap_or_default()
}

/// Omni's Kubernetes version of `cluster`, if Omni has that cluster.
fn omni_kubernetes_version(omni: &RunningOmniSim, cluster: &str) -> Option<String> {
    let r = omni.get(ty::CLUSTER, cluster)?;
    let spec: ClusterSpec = omni_sim::store::decode_spec(&r).ok()?;
    Some(spec.kubernetes_version)
}

/// Whether a failure message says what the outage looks like from the operator.
fn names_the_outage(mode: Outage, message: &str) -> bool {
    let m = message.to_lowercase();
    match mode {
        Outage::Unavailable => m.contains("unavailable"),
        Outage::Hang => m.contains("deadline exceeded"),
    }
}

/// Waits until object `name` reports `Ready=False` with `reason` and a message naming the
/// outage, for at most one pass's deadline and 30 s; returns the message.
async fn reports_the_outage<K: Namespaced>(
    env: &Env,
    name: &str,
    reason: &'static str,
    mode: Outage,
) -> String {
    let failed = is_false("Ready").because(reason);
    let api = env.api::<K>();
    let limit = OMNI_DEADLINE + Duration::from_secs(30);
    eventually_within(&format!("{name} reporting {reason}"), limit, async || {
        let obj = api.get_opt(name).await.ok().flatten()?;
        failed
            .holds(&obj)
            .then(|| failed.message(&obj))
            .filter(|message| names_the_outage(mode, message))
    })
    .await
}

async fn scenario(mode: Outage) {
    let env = start().await;
    let clusters = env.api::<OmniCluster>();
    let exports = env.api::<OmniKubeconfigExport>();
    let token_before = exported_token(&env).await;
    let next_rotation = status_time(
        &exports.get("kc").await.unwrap_or_else(|e| panic!("{e}")),
        "nextRotationTime",
    )
    .unwrap_or_else(|| panic!("the export has no nextRotationTime"));
    // Let reconciles queued by the setup run out, then take the baseline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes_before = env.omni.applied_writes();
    let mints_before = env
        .omni
        .call_count(omni_sim::methods::KUBECONFIG, omni_sim::Outcome::Ok);

    // Omni goes down; meanwhile users create, edit and delete clusters and a rotation comes due.
    env.omni.set_outage(Some(mode));
    let outage_started = Instant::now();
    cluster(&env, "new", "aaaaaaaa-0000-4000-8000-000000000003").await;
    let _: OmniCluster = env
        .patch_spec("edit-me", json!({"kubernetes": {"version": "v1.35.1"}}))
        .await;
    env.delete::<OmniCluster>("delete-me").await;
    env.clock().set(next_rotation);
    let _: OmniKubeconfigExport = env
        .patch(
            "kc",
            json!({"metadata": {"annotations": {"test/rotate": "now"}}}),
        )
        .await;

    // Each object reports the outage within one pass's deadline (a hung call ends at its own
    // 30 s deadline), instead of waiting on Omni forever.
    let mut collected = Vec::new();
    for (name, reason) in [
        ("new", "SyncFailed"),
        ("edit-me", "SyncFailed"),
        ("delete-me", "DeleteFailed"),
    ] {
        collected.push(reports_the_outage::<OmniCluster>(&env, name, reason, mode).await);
    }
    collected
        .push(reports_the_outage::<OmniKubeconfigExport>(&env, "kc", "ExportFailed", mode).await);
    let first_failures = outage_started.elapsed();

    // The deleted cluster keeps its finalizer while Omni cannot confirm the teardown.
    let deleting = clusters
        .get("delete-me")
        .await
        .unwrap_or_else(|e| panic!("delete-me vanished during the outage: {e}"));
    assert!(
        deleting.finalizers().iter().any(|f| f == FINALIZER),
        "delete-me lost its finalizer during the outage"
    );
    assert!(env.omni.get(ty::CLUSTER, "delete-me").is_some());
    assert!(
        writes_since(&writes_before, &env.omni.applied_writes()).is_empty(),
        "Omni applied writes during the outage"
    );

    // The failed objects retry later (with backoff) while Omni is still down.
    let calls_at_failure = env.omni.outage_calls();
    let outage = outage_window(mode);
    eventually_within(
        "a retry during the outage",
        outage + OMNI_DEADLINE,
        async || (env.omni.outage_calls() > calls_at_failure).then_some(()),
    )
    .await;
    tokio::time::sleep(outage.saturating_sub(outage_started.elapsed())).await;
    let still_deleting = clusters
        .get("delete-me")
        .await
        .unwrap_or_else(|e| panic!("delete-me vanished during the outage: {e}"));
    assert!(still_deleting.finalizers().iter().any(|f| f == FINALIZER));

    // Omni is back: everything converges by itself.
    env.omni.set_outage(None);
    let outage_lasted = outage_started.elapsed();
    let faults = env.omni.outage_calls();
    let recovered = Instant::now();
    env.wait_cond::<OmniCluster>("new", READY).await;
    env.wait::<OmniCluster>("edit-me", "Ready with the edit synced", |c| {
        READY.holds(c)
            && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
    })
    .await;
    env.wait_gone::<OmniCluster>("delete-me").await;
    env.wait::<OmniKubeconfigExport>("kc", "rotated", |e| {
        READY.holds(e) && status_time(e, "lastRotationTime") == Some(next_rotation)
    })
    .await;
    env.wait_cond::<OmniConnection>(CONNECTION, READY).await;
    let recovery = recovered.elapsed();

    // Omni holds exactly what the custom resources say.
    let mut omni_clusters: Vec<String> = env
        .omni
        .list(ty::CLUSTER)
        .iter()
        .filter_map(|r| r.metadata.as_ref().map(|m| m.id.clone()))
        .collect();
    omni_clusters.sort();
    assert_eq!(omni_clusters, ["edit-me", "new"]);
    assert_eq!(
        omni_kubernetes_version(&env.omni, "edit-me").as_deref(),
        Some("1.35.1")
    );
    assert_eq!(
        omni_kubernetes_version(&env.omni, "new").as_deref(),
        Some("1.35.0")
    );
    let token_after = exported_token(&env).await;
    assert_ne!(token_after, token_before, "the kubeconfig was not rotated");

    // Each change reached Omni exactly once, however many attempts the outage cost.
    let writes = writes_since(&writes_before, &env.omni.applied_writes());
    let duplicates: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "duplicate Omni writes: {duplicates:?}"
    );
    for expected in [
        "create Clusters.omni.sidero.dev(new)",
        "update Clusters.omni.sidero.dev(edit-me)",
        "teardown Clusters.omni.sidero.dev(delete-me)",
        "destroy Clusters.omni.sidero.dev(delete-me)",
    ] {
        assert_eq!(writes.get(expected), Some(&1), "{expected}: {writes:#?}");
    }
    let mints = env
        .omni
        .call_count(omni_sim::methods::KUBECONFIG, omni_sim::Outcome::Ok)
        - mints_before;
    assert_eq!(mints, 1, "one rotation minted {mints} kubeconfigs");

    // Quiet afterwards: no Omni write, no write to the operator's objects or Secrets.
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.kube.hooks().reset();
    let omni_writes = env.omni.writes_total();
    tokio::time::sleep(quiet_window()).await;
    assert_eq!(
        env.omni.writes_total() - omni_writes,
        0,
        "Omni writes after converging"
    );
    let kube_writes = support::writes_to(
        &env.kube,
        &[
            "omniclusters",
            "omniconnections",
            "omnikubeconfigexports",
            "omnicontrolplanes",
            "secrets",
        ],
    );
    assert_eq!(kube_writes, 0, "Kubernetes writes after converging");

    let scan = support::leaks::assert_no_secret_leaks(
        &env.client,
        &collected,
        &[&env.key, &token_before, &token_after],
    )
    .await;
    let per_object = |prefix: &str| -> u64 {
        writes
            .iter()
            .filter(|(k, _)| k.contains(prefix))
            .map(|(_, n)| n)
            .sum()
    };
    support::leaks::report(
        &format!(
            "omni-outage-{}",
            match mode {
                Outage::Unavailable => "unavailable",
                Outage::Hang => "hang",
            }
        ),
        json!({
            "soak": soak(),
            "outage_secs": outage_lasted.as_secs_f64(),
            "simulated_outage_secs": 300,
            "faults_injected": faults,
            "cases": ["create", "edit", "delete", "kubeconfig rotation"],
            "first_failure_reported_secs": first_failures.as_secs_f64(),
            "recovery_secs": recovery.as_secs_f64(),
            "omni_writes_applied": writes.values().sum::<u64>(),
            "omni_writes_per_converged_object": {
                "new (created)": per_object("(new"),
                "edit-me (edited)": per_object("(edit-me"),
                "delete-me (deleted)": per_object("(delete-me"),
                "kc (rotated; kubeconfig mints)": mints,
            },
            "duplicate_writes": 0,
            "quiet_secs": quiet_window().as_secs(),
            "leak_scan": {"texts": scan.texts, "bytes": scan.bytes, "secrets": scan.secrets},
        }),
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_omni_delays_changes_and_everything_converges_once_it_is_back() {
    scenario(Outage::Unavailable).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_omni_fails_each_pass_at_its_deadline_and_everything_converges_once_it_answers() {
    scenario(Outage::Hang).await;
}
