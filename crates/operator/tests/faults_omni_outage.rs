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

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use kube_sim::server::RunningKubeSim;
use omni_client::proto::specs::ClusterSpec;
use omni_operator::api::{OmniCluster, OmniConnection, OmniKubeconfigExport};
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::controllers::cluster::OMNI_DEADLINE;
use omni_operator::metrics::Metrics;
use omni_sim::types::ty;
use omni_sim::{AppliedWrites, OmniSim, Outage, Role, RunningOmniSim};
use serde_json::{Value, json};
use support::{TestClock, condition, create_json, kube_sim, ready, wait_for, wait_gone};
use tokio::time::Instant;

const NS: &str = "outage";
const FINALIZER: &str = "omni.texashpc.com/finalizer";

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

fn ours(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

fn cluster(name: &str) -> Value {
    ours(
        "OmniCluster",
        name,
        json!({
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "syncInterval": "5m",
        }),
    )
}

fn control_plane(cluster: &str, machine: &str) -> Value {
    ours(
        "OmniControlPlane",
        &format!("{cluster}-cp"),
        json!({"clusterRef": {"name": cluster}, "machines": [machine]}),
    )
}

/// `(status, reason, message)` of `Ready`.
fn ready_condition(obj: &impl serde::Serialize) -> (String, String, String) {
    condition(obj, "Ready").unwrap_or_default()
}

fn status_time(obj: &impl serde::Serialize, field: &str) -> Option<jiff::Timestamp> {
    serde_json::to_value(obj).ok()?["status"][field]
        .as_str()?
        .parse()
        .ok()
}

/// The bearer token of a kubeconfig the operator exported (a secret the leak scan looks for).
fn exported_token(secret: &Secret) -> String {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
        .unwrap_or_default()
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

/// Polls `probe` until it yields a value; panics naming `what` after `limit`.
async fn eventually<T>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < until,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Env {
    mgmt: RunningKubeSim,
    client: kube::Client,
    omni: RunningOmniSim,
    key: String,
    clock: Arc<TestClock>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Env {
    /// kube-sim, omni-sim and the embedded operator; clusters `edit-me` and `delete-me` Ready
    /// and an export of `edit-me`'s kubeconfig done.
    async fn start() -> Env {
        let (mgmt, client) = kube_sim().await;
        support::install_operator_api(&client, NS).await;
        let omni = OmniSim::builder()
            // Static machine IDs in these tests are not seeded: let them connect.
            .auto_register_machines(true)
            .status_step(Duration::from_millis(20))
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        // Exported kubeconfigs point at a closed loopback port: the operator's usability probe
        // is then inconclusive and keeps them, as with a workload cluster that is down.
        omni.set_workload_provider(Arc::new(omni_sim::FixedWorkloadProvider(format!(
            "https://127.0.0.1:{}",
            support::free_addr().port()
        ))));
        let key = omni
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        create_json(
            &client,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "omni-service-account", "namespace": NS},
                "stringData": {"serviceAccountKey": key},
            }),
        )
        .await;

        let start = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
            .unwrap_or_else(|e| panic!("{e}"));
        let clock = Arc::new(TestClock::new(start));
        let _ = support::operator_logs();
        let mut config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
        config.metrics = Arc::new(Metrics::new());
        config.clock = clock.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run_operator(config, client.clone(), async move {
            let _ = rx.await;
        }));
        let env = Env {
            mgmt,
            client,
            omni,
            key,
            clock,
            stop: Some(tx),
        };

        let c = &env.client;
        create_json(
            c,
            ours(
                "OmniConnection",
                "omni",
                json!({
                    "endpoint": env.omni.endpoint(),
                    "auth": {"serviceAccountSecretRef": {"name": "omni-service-account", "key": "serviceAccountKey"}},
                }),
            ),
        )
        .await;
        create_json(c, cluster("edit-me")).await;
        create_json(
            c,
            control_plane("edit-me", "aaaaaaaa-0000-4000-8000-000000000001"),
        )
        .await;
        create_json(c, cluster("delete-me")).await;
        create_json(
            c,
            control_plane("delete-me", "aaaaaaaa-0000-4000-8000-000000000002"),
        )
        .await;
        create_json(
            c,
            ours(
                "OmniKubeconfigExport",
                "kc",
                json!({
                    "clusterRef": {"name": "edit-me"},
                    "targetSecretRef": {"name": "kc-kubeconfig"},
                    "serviceAccount": {"user": "automation", "groups": ["automation"]},
                    "ttl": "24h",
                    "renewBefore": "4h",
                    "deletionPolicy": "Delete",
                }),
            ),
        )
        .await;
        for name in ["edit-me", "delete-me"] {
            wait_for(&env.clusters(), name, "Ready", ready).await;
        }
        wait_for(&env.exports(), "kc", "Ready", ready).await;
        wait_for(&env.connections(), "omni", "Ready", ready).await;
        env
    }

    fn clusters(&self) -> Api<OmniCluster> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn exports(&self) -> Api<OmniKubeconfigExport> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn connections(&self) -> Api<OmniConnection> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn exported_token(&self) -> String {
        let secret = Api::<Secret>::namespaced(self.client.clone(), NS)
            .get("kc-kubeconfig")
            .await
            .unwrap_or_else(|e| panic!("exported Secret: {e}"));
        exported_token(&secret)
    }

    /// Omni's Kubernetes version of `cluster`, if Omni has that cluster.
    fn omni_kubernetes_version(&self, cluster: &str) -> Option<String> {
        let r = self.omni.get(ty::CLUSTER, cluster)?;
        let spec: ClusterSpec = omni_sim::store::decode_spec(&r).ok()?;
        Some(spec.kubernetes_version)
    }

    async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.omni.shutdown().await;
        self.mgmt.shutdown();
    }
}

/// Whether a failure message says what the outage looks like from the operator.
fn names_the_outage(mode: Outage, message: &str) -> bool {
    let m = message.to_lowercase();
    match mode {
        Outage::Unavailable => m.contains("unavailable"),
        Outage::Hang => m.contains("deadline exceeded"),
    }
}

async fn scenario(mode: Outage) {
    let env = Env::start().await;
    let token_before = env.exported_token().await;
    let next_rotation = status_time(
        &env.exports()
            .get("kc")
            .await
            .unwrap_or_else(|e| panic!("{e}")),
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
    create_json(&env.client, cluster("new")).await;
    create_json(
        &env.client,
        control_plane("new", "aaaaaaaa-0000-4000-8000-000000000003"),
    )
    .await;
    env.clusters()
        .patch(
            "edit-me",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"kubernetes": {"version": "v1.35.1"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("edit: {e}"));
    env.clusters()
        .delete("delete-me", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    env.clock.set(next_rotation);
    env.exports()
        .patch(
            "kc",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test/rotate": "now"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("poke export: {e}"));

    // Each object reports the outage within one pass's deadline (a hung call ends at its own
    // 30 s deadline), instead of waiting on Omni forever.
    let failure_limit = OMNI_DEADLINE + Duration::from_secs(30);
    let clusters = env.clusters();
    let exports = env.exports();
    let mut collected = Vec::new();
    for (name, reason) in [
        ("new", "SyncFailed"),
        ("edit-me", "SyncFailed"),
        ("delete-me", "DeleteFailed"),
    ] {
        let (_, _, message) = eventually(
            &format!("{name} reporting {reason}"),
            failure_limit,
            async || {
                let c = clusters.get_opt(name).await.ok().flatten()?;
                let (status, r, message) = ready_condition(&c);
                (status == "False" && r == reason && names_the_outage(mode, &message))
                    .then_some((status, r, message))
            },
        )
        .await;
        collected.push(message);
    }
    let (_, _, message) = eventually("kc reporting ExportFailed", failure_limit, async || {
        let e = exports.get_opt("kc").await.ok().flatten()?;
        let (status, r, message) = ready_condition(&e);
        (status == "False" && r == "ExportFailed" && names_the_outage(mode, &message))
            .then_some((status, r, message))
    })
    .await;
    collected.push(message);
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
    eventually(
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
    wait_for(&clusters, "new", "Ready", ready).await;
    wait_for(&clusters, "edit-me", "Ready with the edit synced", |c| {
        ready(c) && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
    })
    .await;
    wait_gone(&clusters, "delete-me").await;
    wait_for(&exports, "kc", "rotated", |e| {
        ready(e) && status_time(e, "lastRotationTime") == Some(next_rotation)
    })
    .await;
    wait_for(&env.connections(), "omni", "Ready", ready).await;
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
        env.omni_kubernetes_version("edit-me").as_deref(),
        Some("1.35.1")
    );
    assert_eq!(
        env.omni_kubernetes_version("new").as_deref(),
        Some("1.35.0")
    );
    let token_after = env.exported_token().await;
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
    env.mgmt.hooks().reset();
    let omni_writes = env.omni.writes_total();
    tokio::time::sleep(quiet_window()).await;
    assert_eq!(
        env.omni.writes_total() - omni_writes,
        0,
        "Omni writes after converging"
    );
    let kube_writes = support::writes_to(
        &env.mgmt,
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
