//! Fault suite: conflicts and errors from the management Kubernetes API. While the operator
//! brings up a fleet (a connection, a cluster with its control plane, a kubeconfig export, a
//! secret sync and a helm release), kube-sim answers 20 % of its updates and patches with 409
//! Conflict and 5 % of all writes with 500 or 503, cuts every watch stream every 2 s and
//! answers half of the watch resumptions with 410 Gone. Everything must converge, each object
//! within a bounded number of write requests, and, once converged, stay quiet under the same
//! faults (a conflict or a re-list is no reason to write).
//!
//! `FAULT_SOAK=1` holds the converged fleet under the faults for 2 minutes instead of 10 s.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::stack::{CLUSTER, CONNECTION, Dependants, REPO_PASSWORD, Stack};
use support::{ready, wait_for};

const NS: &str = "conflicts";
const EXPORT: &str = "prod-admin";
const SYNC: &str = "registry";
const RELEASE: &str = "demo";
const SYNCED_PASSWORD: &str = "synced-registry-password-5e1c";
const SEED: u64 = 0x13;

/// Write requests one converged object may cost, failed ones included. A clean run needs
/// 2–6 per object (finalizer, status with observedGeneration, a condition change or two); a
/// quarter of the writes failing and each failure retried with a fresh read at most doubles
/// that, and cut watches add reconciles but no writes. Measured: see the FAULT_REPORT figures.
const WRITES_PER_OBJECT_BOUND: u64 = 20;

/// The fleet's objects: (kind, plural, name).
const FLEET: &[(&str, &str, &str)] = &[
    ("OmniConnection", "omniconnections", CONNECTION),
    ("OmniCluster", "omniclusters", CLUSTER),
    ("OmniControlPlane", "omnicontrolplanes", "prod-cp"),
    ("OmniKubeconfigExport", "omnikubeconfigexports", EXPORT),
    ("OmniSecretSync", "omnisecretsyncs", SYNC),
    ("OmniHelmRelease", "omnihelmreleases", RELEASE),
];

/// Write attempts one real change of a converged object may cost (its status following Omni's
/// cluster status, say): the write and its retries after injected failures. Writes without a
/// change are never allowed.
const RETRIES_PER_CHANGE: u64 = 4;

const GROUP: &str = "omni.texashpc.com";

fn soak() -> bool {
    std::env::var("FAULT_SOAK").is_ok_and(|v| v == "1")
}

async fn create_fleet(stack: &Stack) {
    stack
        .create_export_with_consumers(
            Dependants {
                export: EXPORT,
                release: RELEASE,
                sync: SYNC,
            },
            SYNCED_PASSWORD,
        )
        .await;
}

/// The faults of this scenario, on the management API only.
fn inject_faults(stack: &Stack) {
    let hooks = stack.mgmt.hooks();
    hooks.seed_random_faults(SEED);
    hooks.fail_randomly(&["update", "patch"], None, 409, 0.20);
    let writes = ["create", "update", "patch", "delete"];
    hooks.fail_randomly(&writes, None, 500, 0.025);
    hooks.fail_randomly(&writes, None, 503, 0.025);
    hooks.expire_watch_resumes(None, 0.5);
}

/// Write requests each fleet object received so far (failed ones included).
fn writes_per_object(stack: &Stack) -> BTreeMap<String, u64> {
    FLEET
        .iter()
        .map(|(kind, plural, name)| {
            (
                format!("{kind}/{name}"),
                stack.mgmt.hooks().writes_to_object(plural, Some(NS), name),
            )
        })
        .collect()
}

/// Cuts every open watch stream every 2 s, as an API server behind a flaky load balancer does.
struct Cutter {
    last: tokio::time::Instant,
    cuts: u64,
}

impl Cutter {
    fn new() -> Cutter {
        Cutter {
            last: tokio::time::Instant::now(),
            cuts: 0,
        }
    }

    fn tick(&mut self, stack: &Stack) {
        if self.last.elapsed() >= Duration::from_secs(2) {
            stack.mgmt.hooks().cut_watches(None);
            self.last = tokio::time::Instant::now();
            self.cuts += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_converges_through_conflicts_errors_and_cut_watches() {
    let stack = Stack::start(NS).await;
    create_fleet(&stack).await;
    stack.mgmt.hooks().reset();
    inject_faults(&stack);
    let mut cutter = Cutter::new();
    let operator = stack.start_operator();

    for (kind, _, name) in FLEET {
        let api = stack.api(kind);
        let until = tokio::time::Instant::now() + support::WAIT;
        loop {
            cutter.tick(&stack);
            if let Ok(Some(obj)) = api.get_opt(name).await
                && ready(&obj)
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "{kind}/{name} never became Ready under API faults"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let converged = writes_per_object(&stack);
    let over: Vec<String> = converged
        .iter()
        .filter(|(_, n)| **n > WRITES_PER_OBJECT_BOUND)
        .map(|(o, n)| format!("{o}: {n}"))
        .collect();
    assert!(
        over.is_empty(),
        "objects over {WRITES_PER_OBJECT_BOUND} writes to converge: {over:?} (all: {converged:?})"
    );

    // Converged and still under the same faults: re-lists, cut watches and conflicts are no
    // reason to write; only a real change of an object (its resourceVersion moved) is.
    let hold = if soak() {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(10)
    };
    // Let reconciles queued before the last status write run out.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Versions are read before the write counts: a write landing between the two readings then
    // shows as a change without a counted write, never as a write without a change.
    let stored_version = |kind: &str, name: &str| {
        stack
            .mgmt
            .store()
            .get(GROUP, &format!("{}s", kind.to_lowercase()), Some(NS), name)
            .ok()
            .and_then(|o| {
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_default()
    };
    let mut versions: BTreeMap<String, (String, u64)> = FLEET
        .iter()
        .map(|(kind, _, name)| (format!("{kind}/{name}"), (stored_version(kind, name), 0)))
        .collect();
    let before = writes_per_object(&stack);
    let until = tokio::time::Instant::now() + hold;
    while tokio::time::Instant::now() < until {
        cutter.tick(&stack);
        for (kind, _, name) in FLEET {
            let rv = stored_version(kind, name);
            if let Some(seen) = versions.get_mut(&format!("{kind}/{name}"))
                && seen.0 != rv
            {
                *seen = (rv, seen.1 + 1);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = writes_per_object(&stack);
    let loud: Vec<String> = after
        .iter()
        .filter_map(|(object, n)| {
            let written = n - before.get(object).copied().unwrap_or(0);
            let changes = versions.get(object).map_or(0, |(_, c)| *c);
            (written > RETRIES_PER_CHANGE * changes)
                .then(|| format!("{object}: {written} writes for {changes} changes"))
        })
        .collect();
    let held: BTreeMap<&String, [u64; 2]> = after
        .iter()
        .map(|(object, n)| {
            let written = n - before.get(object).copied().unwrap_or(0);
            (
                object,
                [written, versions.get(object).map_or(0, |(_, c)| *c)],
            )
        })
        .collect();
    assert!(
        loud.is_empty(),
        "converged objects wrote more than {RETRIES_PER_CHANGE} times per real change while \
         faults happened: {loud:?}"
    );
    for (kind, _, name) in FLEET {
        wait_for(&stack.api(kind), name, "still Ready", ready).await;
    }
    let injected = stack.mgmt.hooks().injected_failures();
    stack.mgmt.hooks().clear_random_faults();
    operator.stop().await;

    let token = stack
        .exported_token(EXPORT)
        .await
        .unwrap_or_else(|| panic!("the exported kubeconfig has a token"));
    let scan = support::leaks::assert_no_secret_leaks(
        &stack.client,
        &[],
        &[&stack.omni_key, REPO_PASSWORD, SYNCED_PASSWORD, &token],
    )
    .await;
    let injected: BTreeMap<String, u64> = injected
        .into_iter()
        .map(|(code, n)| (code.to_string(), n))
        .collect();
    support::leaks::report(
        "management API conflicts and errors",
        json!({
            "faults_injected": injected,
            "watch_cuts": cutter.cuts,
            "objects": FLEET.len(),
            "writes_per_converged_object": converged,
            "writes_per_object_bound": WRITES_PER_OBJECT_BOUND,
            "quiet_hold_s": hold.as_secs(),
            "writes_and_changes_while_held": held,
            "texts_scanned": scan.texts,
        }),
    );
    stack.shutdown().await;
}
