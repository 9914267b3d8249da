//! Fault suite — operator killed. The embedded operator is killed (its task aborted where it
//! stands, no draining) and a new one started against the same management kube-sim, omni-sim
//! and workload kube-sim, at pseudo-random points while clusters are created, synced and deleted,
//! a kubeconfig is exported and rotated, a Secret is synced and a Helm release is installed,
//! upgraded and uninstalled. After each run the last operator must converge everything with no
//! manual step: nothing orphaned in Omni or the workload cluster, bystander objects untouched,
//! no release whose latest revision is left `pending-*`, and no file with a kubeconfig credential or a password left in
//! helm's work directory or `TMPDIR`.
//!
//! CI: 4 runs × 25 kill points = 100. `FAULT_SOAK=1`: 20 runs × 25. `FAULT_SEED=<n>` replays a
//! run sequence (the seed is printed).

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use rand::{Rng, SeedableRng};
use serde_json::json;
use support::stack::{CLUSTER, Operator, Stack};
use support::{condition, ready};

const EXPORT: &str = "prod-kubeconfig";
const RELEASE: &str = "app";
const SYNC: &str = "registry";
const SECOND: &str = "second";
/// What phase 2 deletes, in this order.
const DELETED: [(&str, &str); 4] = [
    ("OmniCluster", SECOND),
    ("OmniHelmRelease", RELEASE),
    ("OmniSecretSync", SYNC),
    ("OmniKubeconfigExport", EXPORT),
];
const KILLS_PER_RUN: usize = 25;
/// How long the last operator may take to converge (helm and kube-sim on a loaded machine).
const CONVERGE_LIMIT: Duration = Duration::from_secs(180);

fn registry_password(run: usize, step: usize) -> String {
    format!("registry-password-{run}-{step}-9d2f7c")
}

fn seed() -> u64 {
    std::env::var("FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(13)
        })
}

/// Kills and restarts the operator `kills` times at random intervals while `work` runs, then
/// goes on killing (if kills are left) until they are used up. Returns the operator now
/// running and the number of kills made.
async fn with_kills<F: std::future::Future<Output = ()>>(
    stack: &Stack,
    mut operator: Operator,
    rng: &mut rand::rngs::StdRng,
    kills: usize,
    work: F,
) -> Operator {
    let gaps: Vec<Duration> = (0..kills)
        .map(|_| Duration::from_millis(rng.gen_range(40..900)))
        .collect();
    tokio::pin!(work);
    let mut work_done = false;
    for gap in gaps {
        let sleep = tokio::time::sleep(gap);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                _ = &mut work, if !work_done => work_done = true,
            }
        }
        operator.kill().await;
        operator = stack.start_operator();
    }
    if !work_done {
        work.await;
    }
    operator
}

/// Polls `check` until it returns `None` (converged) or panics with its last answer.
async fn converge<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let until = tokio::time::Instant::now() + CONVERGE_LIMIT;
    loop {
        let Some(problem) = check().await else {
            return;
        };
        assert!(
            tokio::time::Instant::now() < until,
            "{what} never converged: {problem}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Helm's records of the release: (revision, status) of each.
async fn release_records(stack: &Stack) -> Vec<(String, String)> {
    Api::<Secret>::namespaced(stack.workload_client.clone(), "default")
        .list(&ListParams::default().labels(&format!("owner=helm,name={RELEASE}")))
        .await
        .unwrap_or_else(|e| panic!("list release records: {e}"))
        .items
        .iter()
        .map(|s| {
            (
                s.labels().get("version").cloned().unwrap_or_default(),
                s.labels().get("status").cloned().unwrap_or_default(),
            )
        })
        .collect()
}

async fn greeting(stack: &Stack) -> Option<String> {
    Api::<ConfigMap>::namespaced(stack.workload_client.clone(), "default")
        .get_opt(&format!("{RELEASE}-config"))
        .await
        .unwrap_or_else(|e| panic!("get ConfigMap: {e}"))
        .and_then(|c| c.data?.get("greeting").cloned())
}

async fn copy_of(stack: &Stack) -> Option<String> {
    Api::<Secret>::namespaced(stack.workload_client.clone(), "apps")
        .get_opt("registry-credentials")
        .await
        .unwrap_or_else(|e| panic!("get copy: {e}"))
        .and_then(|s| s.data?.get("password").cloned())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// A workload object no OmniSecretSync or release owns; returns its resourceVersion.
async fn plant_bystander(stack: &Stack) -> String {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bystander", "namespace": "default"},
        "stringData": {"note": "not the operator's"},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    Api::<Secret>::namespaced(stack.workload_client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("bystander: {e}"))
        .resource_version()
        .unwrap_or_default()
}

/// Figures of one run.
#[derive(Default, Debug)]
struct Run {
    kills: usize,
    writes_while_converging: u64,
    recoveries: usize,
}

async fn one_run(run: usize, rng: &mut rand::rngs::StdRng) -> Run {
    let stack = Stack::start(&format!("killed-{run}")).await;
    let ns = stack.ns.clone();
    let bystander_rv = plant_bystander(&stack).await;
    let mut figures = Run::default();
    let mut secrets: Vec<String> = vec![stack.omni_key.clone()];
    let operator = stack.start_operator();

    // Phase 1: everything is created and changed while the operator keeps dying.
    let first = KILLS_PER_RUN / 2;
    let password = registry_password(run, 0);
    secrets.push(password.clone());
    stack
        .create_secret("registry-credentials", json!({"password": password}))
        .await;
    let final_password = registry_password(run, 1);
    secrets.push(final_password.clone());
    let script = async {
        stack.create_export(EXPORT).await;
        stack.create_release(RELEASE, EXPORT, "hello").await;
        stack.create_sync(SYNC, EXPORT).await;
        stack
            .create_cluster(SECOND, "aaaaaaaa-0000-4000-8000-000000000002")
            .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // An upgrade, a rotation (a new user forces a new kubeconfig), a changed source.
        stack
            .patch(
                "OmniHelmRelease",
                RELEASE,
                json!({"spec": {"chart": {"values": {"greeting": "bonjour"}}}}),
            )
            .await;
        stack
            .patch(
                "OmniKubeconfigExport",
                EXPORT,
                json!({"spec": {"serviceAccount": {"user": "automation-2"}}}),
            )
            .await;
        Api::<Secret>::namespaced(stack.client.clone(), &ns)
            .patch(
                "registry-credentials",
                &PatchParams::default(),
                &Patch::Merge(&json!({"stringData": {"password": final_password}})),
            )
            .await
            .unwrap_or_else(|e| panic!("change source: {e}"));
    };
    let operator = with_kills(&stack, operator, rng, first, script).await;
    figures.kills += first;

    // The operator now running converges everything.
    stack.mgmt.hooks().reset();
    let check = || async {
        for (kind, name) in [
            ("OmniCluster", CLUSTER),
            ("OmniCluster", SECOND),
            ("OmniKubeconfigExport", EXPORT),
            ("OmniSecretSync", SYNC),
            ("OmniHelmRelease", RELEASE),
        ] {
            let obj = stack.api(kind).get_opt(name).await.ok().flatten();
            if !obj.as_ref().is_some_and(ready) {
                return Some(format!(
                    "{kind} {name}: {:?}",
                    obj.and_then(|o| condition(&o, "Ready"))
                ));
            }
        }
        let records = release_records(&stack).await;
        // Helm's rollback writes its new revision before it supersedes the one it replaces: a
        // kill in between leaves that older record `pending-*` behind a later one. Helm never
        // looks at it again and it blocks nothing; a release is stuck while its latest
        // revision is pending.
        let latest = records
            .iter()
            .max_by_key(|(version, _)| version.parse::<u64>().unwrap_or(0));
        if latest.is_none_or(|(_, status)| status.starts_with("pending-")) {
            return Some(format!("release records {records:?}"));
        }
        if greeting(&stack).await.as_deref() != Some("bonjour") {
            return Some(format!("greeting {:?}", greeting(&stack).await));
        }
        if copy_of(&stack).await.as_deref() != Some(final_password.as_str()) {
            return Some("the copy holds an old password".into());
        }
        let export = stack
            .api("OmniKubeconfigExport")
            .get_opt(EXPORT)
            .await
            .ok()
            .flatten();
        if export.is_none_or(|e| e.data["status"]["serviceAccountUser"] != "automation-2") {
            return Some("the kubeconfig was not rotated".into());
        }
        None
    };
    converge("after the first kills", check).await;
    figures.writes_while_converging = support::writes_to(
        &stack.mgmt,
        &[
            "omniclusters",
            "omnikubeconfigexports",
            "omnisecretsyncs",
            "omnihelmreleases",
            "secrets",
        ],
    );
    if let Some(token) = stack.exported_token(EXPORT).await {
        secrets.push(token);
    }

    // Phase 2: everything is deleted while the operator keeps dying.
    let deletions = async {
        for (kind, name) in DELETED {
            stack.delete(kind, name).await;
        }
    };
    let operator = with_kills(&stack, operator, rng, KILLS_PER_RUN - first, deletions).await;
    figures.kills += KILLS_PER_RUN - first;
    converge("after the deletions", || async {
        for (kind, name) in DELETED {
            if let Some(obj) = stack.api(kind).get_opt(name).await.ok().flatten() {
                return Some(format!("{kind} {name}: {:?}", condition(&obj, "Ready")));
            }
        }
        let records = release_records(&stack).await;
        if !records.is_empty() || greeting(&stack).await.is_some() {
            return Some(format!("release still installed: {records:?}"));
        }
        if copy_of(&stack).await.is_some() {
            return Some("the synced copy is still there".into());
        }
        if Api::<Secret>::namespaced(stack.client.clone(), &stack.ns)
            .get_opt(EXPORT)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            return Some("the kubeconfig Secret is still there".into());
        }
        let in_omni: Vec<String> = stack
            .omni
            .list(omni_sim::types::ty::CLUSTER)
            .iter()
            .map(|r| {
                r.metadata
                    .as_ref()
                    .map(|m| m.id.clone())
                    .unwrap_or_default()
            })
            .filter(|id| id != CLUSTER)
            .collect();
        if !in_omni.is_empty() {
            return Some(format!("clusters left in Omni: {in_omni:?}"));
        }
        None
    })
    .await;
    figures.recoveries = recovered_releases(&stack).await;
    operator.stop().await;

    let bystander = Api::<Secret>::namespaced(stack.workload_client.clone(), "default")
        .get("bystander")
        .await
        .unwrap_or_else(|e| panic!("the bystander is gone: {e}"));
    assert_eq!(
        bystander.resource_version().unwrap_or_default(),
        bystander_rv,
        "an object the operator does not own was written"
    );
    let refs: Vec<&str> = secrets
        .iter()
        .map(String::as_str)
        .chain([support::stack::REPO_PASSWORD])
        .collect();
    let left = stack.files_holding(&refs);
    assert!(
        left.is_empty(),
        "files holding a credential outlived the operator: {left:?}"
    );
    support::leaks::assert_no_secret_leaks(&stack.client, &[], &refs).await;
    stack.shutdown().await;
    figures
}

/// Stuck-release recoveries the operators reported (Events with reason StuckReleaseRecovered).
async fn recovered_releases(stack: &Stack) -> usize {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(stack.client.clone(), &stack.ns)
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("StuckReleaseRecovered"))
                .count()
        })
        .unwrap_or(0)
}

/// Every operator start has a fresh helm run id, so a revision left `pending-*` by a killed
/// one is recovered at once by the next (seed 42 kills one during `helm install`; before the
/// run marks the release waited its 5-minute timeout as `ReleasePending`, then `ReleaseStuck`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_killed_at_random_points_always_converges_cleanly() {
    let seed = seed();
    eprintln!("faults_operator_killed: seed = {seed} (FAULT_SEED={seed} replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let runs = if std::env::var_os("FAULT_SOAK").is_some() {
        20
    } else {
        4
    };
    let mut total = Run::default();
    let started = std::time::Instant::now();
    for run in 0..runs {
        let figures = one_run(run, &mut rng).await;
        eprintln!("run {run}: {figures:?}");
        total.kills += figures.kills;
        total.recoveries += figures.recoveries;
        total.writes_while_converging += figures.writes_while_converging;
    }
    support::leaks::report(
        "operator killed",
        json!({
            "seed": seed,
            "runs": runs,
            "kill_points": total.kills,
            "stuck_release_recoveries": total.recoveries,
            "management_writes_while_converging_per_object": total.writes_while_converging as f64 / (runs as f64 * 5.0),
            "seconds": started.elapsed().as_secs_f64(),
        }),
    );
}

/// The Event messages of reason `reason` in the stack's namespace.
async fn events_with_reason(stack: &Stack, reason: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(stack.client.clone(), &stack.ns)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"))
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// One deterministic kill point: the operator dies while `helm install` runs (the workload
/// API holds helm's first ConfigMap write), leaving the release `pending-install`. The next
/// operator recognises the revision as an earlier process's (its run labels) and recovers it
/// at once, far inside the release's 5-minute timeout: no `ReleasePending` wait, no
/// `ReleaseStuck`, no `spec.recoverStuckRelease` needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_pending_install_by_a_killed_operator_is_recovered_at_once() {
    /// Far below the release's `timeout` (5 min, the default): only the run marks explain it.
    const RECOVERY_LIMIT: Duration = Duration::from_secs(60);
    let stack = Stack::start("killed-install").await;
    // Helm's write of the chart's ConfigMap (after its pending-install record) hangs until the
    // rules are cleared; its earlier reads of the ConfigMap pass.
    for verb in ["create", "patch"] {
        stack.workload.hooks().add_latency(
            Some(verb),
            Some("configmaps"),
            Duration::from_secs(600),
            None,
        );
    }
    let operator = stack.start_operator();
    stack.create_export(EXPORT).await;
    stack.create_release(RELEASE, EXPORT, "hello").await;
    converge("helm install started", || async {
        let records = release_records(&stack).await;
        (!records.iter().any(|(_, s)| s == "pending-install"))
            .then(|| format!("release records {records:?}"))
    })
    .await;

    operator.kill().await;
    stack.workload.hooks().clear_latency();
    assert_eq!(
        release_records(&stack).await,
        [("1".to_string(), "pending-install".to_string())],
        "the killed operator left the install pending"
    );
    let started = tokio::time::Instant::now();
    let operator = stack.start_operator();
    let until = started + RECOVERY_LIMIT;
    loop {
        let release = stack
            .api("OmniHelmRelease")
            .get_opt(RELEASE)
            .await
            .ok()
            .flatten();
        let records = release_records(&stack).await;
        if release.as_ref().is_some_and(ready)
            && records.iter().all(|(_, s)| s == "deployed")
            && greeting(&stack).await.as_deref() == Some("hello")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "not recovered within {RECOVERY_LIMIT:?}: {:?}, records {records:?}",
            release.and_then(|r| condition(&r, "Ready"))
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let recovery = started.elapsed();
    let recovered = events_with_reason(&stack, "StuckReleaseRecovered").await;
    assert!(
        recovered.len() == 1 && recovered[0].contains("left by an earlier operator process"),
        "{recovered:?}"
    );
    assert!(
        events_with_reason(&stack, "ReleaseStuck").await.is_empty(),
        "the release was never reported stuck"
    );
    operator.stop().await;

    let token = stack
        .exported_token(EXPORT)
        .await
        .unwrap_or_else(|| panic!("the exported kubeconfig has a token"));
    let refs = [
        stack.omni_key.as_str(),
        token.as_str(),
        support::stack::REPO_PASSWORD,
    ];
    let left = stack.files_holding(&refs);
    assert!(left.is_empty(), "files holding a credential: {left:?}");
    let scan = support::leaks::assert_no_secret_leaks(&stack.client, &[], &refs).await;
    support::leaks::report(
        "operator killed during helm install",
        json!({
            "cases": 1,
            "kill_points": 1,
            "stuck_release_recoveries": recovered.len(),
            "recovery_seconds": recovery.as_secs_f64(),
            "release_timeout_seconds": 300,
            "texts_scanned": scan.texts,
        }),
    );
    stack.shutdown().await;
}
