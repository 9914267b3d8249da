//! Status that tells the truth (issue 32): an OmniCluster is Ready only when Omni runs it with
//! its machines, converges (`Reconciling`) while it waits for them, stalls at once on a version
//! Omni refuses, and a suspended object keeps its Ready state without firing the shipped alert.
//! Every write to Omni leaves its trace even when the object is edited again at once, and
//! objects applied together in any order wait without a Warning or a reconcile error.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use omni_operator::api::{OmniCluster, OmniKubeconfigExport};
use serde_json::{Value, json};
use support::conditions::{assert_absent, assert_cond, is_false, is_true};
use support::env::{Env, NS, eventually_within};
use support::{WAIT, condition, ready};

/// The label matchers of the shipped `OmniOperatorObjectNotReady` alert, read from the chart's
/// PrometheusRule template (`omni_operator_resource_info{ready="False",...} == 1`).
fn alert_matchers() -> Vec<(String, String)> {
    let rule = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/omni-cluster-operator/templates/prometheusrule.yaml"
    ))
    .unwrap_or_else(|e| panic!("read the PrometheusRule template: {e}"));
    let (_, after) = rule
        .split_once("alert: OmniOperatorObjectNotReady")
        .unwrap_or_else(|| panic!("no OmniOperatorObjectNotReady alert"));
    let expr = after
        .lines()
        .find_map(|l| l.trim().strip_prefix("expr: "))
        .unwrap_or_else(|| panic!("the alert has no expr"));
    let selector = expr
        .strip_prefix("omni_operator_resource_info{")
        .and_then(|rest| rest.split_once("} == 1"))
        .map(|(labels, _)| labels)
        .unwrap_or_else(|| panic!("unexpected alert expression {expr}"));
    selector
        .split(',')
        .map(|m| {
            let (k, v) = m
                .split_once('=')
                .unwrap_or_else(|| panic!("matcher {m} is not an equality"));
            (k.trim().to_string(), v.trim().trim_matches('"').to_string())
        })
        .collect()
}

/// The `omni_operator_resource_info` series of OmniCluster `name`, if it is 1.
fn info_series(metrics: &str, kind: &str, name: &str) -> Option<String> {
    let key = format!(r#"kind="{kind}",namespace="{NS}",name="{name}","#);
    metrics
        .lines()
        .find(|l| l.starts_with("omni_operator_resource_info{") && l.contains(&key))
        .filter(|l| l.ends_with(" 1"))
        .map(str::to_string)
}

/// Whether the shipped alert's expression selects `series`.
fn alert_selects(series: &str) -> bool {
    alert_matchers()
        .iter()
        .all(|(k, v)| series.contains(&format!(r#"{k}="{v}""#)))
}

/// A cluster whose one control-plane machine has never connected to Omni is `Ready=False` with
/// `Reconciling=True` and a reason naming the OmniControlPlane that waits, for as long as the
/// machine stays away, and the shipped alert's expression selects it (suspended, it does not);
/// the machine connecting makes it Ready. A Kubernetes version Omni refuses for the cluster's
/// Talos version then stalls it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_starved_of_machines_waits_for_them_and_alerts_until_they_arrive() {
    let env = Env::builder().unknown_machines_stay_away().start().await;
    let machine = "eeeeeeee-0000-4000-8000-000000000001";
    env.cluster("starved", machine, json!({"syncInterval": "5m"}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("starved", is_false("Ready").because("WaitingForMachines"))
        .await;
    assert_cond(&c, is_true("Reconciling").because("WaitingForMachines"));
    assert_cond(&c, is_true("Synced").because("Synced"));
    assert_absent(&c, "Stalled");
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.contains(r#"OmniControlPlane "starved-cp" has 0 of 1 machines healthy"#)
            || message.contains(r#"OmniControlPlane "starved-cp" has no machines"#),
        "{message}"
    );
    // It stays so: Omni does not run a cluster without machines.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = env.api::<OmniCluster>().get("starved").await.ok();
    assert!(
        still.as_ref().is_some_and(|c| is_true("Reconciling")
            .because("WaitingForMachines")
            .holds(c)),
        "{still:?}"
    );
    let text = env
        .metrics_when(|t| {
            info_series(t, "OmniCluster", "starved")
                .is_some_and(|s| s.contains(r#"reason="WaitingForMachines""#))
        })
        .await;
    let series = info_series(&text, "OmniCluster", "starved").unwrap_or_default();
    assert!(alert_selects(&series), "the alert misses {series}");

    // Suspended, it keeps its Ready state and leaves the alert.
    env.patch_spec::<OmniCluster>("starved", json!({"suspend": true}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("starved", is_true("Suspended").because("Suspended"))
        .await;
    assert_cond(&c, is_false("Ready").because("WaitingForMachines"));
    let text = env
        .metrics_when(|t| {
            info_series(t, "OmniCluster", "starved")
                .is_some_and(|s| s.contains("suspended=\"true\""))
        })
        .await;
    let series = info_series(&text, "OmniCluster", "starved").unwrap_or_default();
    assert!(
        !alert_selects(&series),
        "the alert selects suspended {series}"
    );
    env.patch_spec::<OmniCluster>("starved", json!({"suspend": false}))
        .await;
    env.wait::<OmniCluster>("starved", "resumed", |c| {
        condition(c, "Suspended").is_none()
    })
    .await;

    // The machine arrives: Ready.
    env.connect_machine(machine);
    let c = env
        .wait_cond::<OmniCluster>("starved", is_true("Ready").because("Running"))
        .await;
    assert_absent(&c, "Reconciling");
    let text = env
        .metrics_when(|t| {
            info_series(t, "OmniCluster", "starved").is_some_and(|s| s.contains("ready=\"True\""))
        })
        .await;
    let series = info_series(&text, "OmniCluster", "starved").unwrap_or_default();
    assert!(!alert_selects(&series), "the alert selects Ready {series}");

    // A Kubernetes version Omni refuses for Talos 1.13: stalled at once, no retry loop first.
    env.patch_spec::<OmniCluster>("starved", json!({"kubernetes": {"version": "v1.32.3"}}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("starved", is_false("Synced").because("OmniRejected"))
        .await;
    assert_cond(&c, is_true("Stalled").because("OmniRejected"));
    assert_cond(&c, is_false("Ready").because("OmniRejected"));
    let (_, _, message) = condition(&c, "Stalled").unwrap_or_default();
    assert!(
        message.contains("is not compatible with Talos version"),
        "{message}"
    );
    env.shutdown().await;
}

/// A suspended export keeps `Ready=True`, says `Suspended=True` with one Normal Event, mints
/// nothing while suspended, and is out of the shipped alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_export_keeps_its_ready_state_and_says_so() {
    let env = Env::builder().start().await;
    env.cluster("edge", "eeeeeeee-0000-4000-8000-000000000002", json!({}))
        .await;
    env.create_spec::<OmniKubeconfigExport>(
        "kc",
        json!({
            "clusterRef": {"name": "edge"},
            "targetSecretRef": {"name": "kc"},
            "serviceAccount": {"user": "automation", "groups": ["automation"]},
            "ttl": "24h",
            "renewBefore": "4h",
        }),
    )
    .await;
    env.wait::<OmniKubeconfigExport>("kc", "Ready", ready).await;
    let mint = || {
        env.omni
            .call_count(omni_sim::methods::KUBECONFIG, omni_sim::Outcome::Ok)
    };
    let mints = mint();
    env.patch_spec::<OmniKubeconfigExport>("kc", json!({"suspend": true, "ttl": "12h"}))
        .await;
    let e = env
        .wait_cond::<OmniKubeconfigExport>("kc", is_true("Suspended").because("Suspended"))
        .await;
    assert_cond(&e, is_true("Ready").because("Exported"));
    assert_absent(&e, "Reconciling");
    let events: Vec<Event> = env.events().await;
    let suspended: Vec<&Event> = events
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("kc")
                && e.reason.as_deref() == Some("Suspended")
        })
        .collect();
    assert_eq!(suspended.len(), 1, "{events:?}");
    assert_eq!(suspended[0].type_.as_deref(), Some("Normal"));
    let text = env
        .metrics_when(|t| {
            info_series(t, "OmniKubeconfigExport", "kc")
                .is_some_and(|s| s.contains("suspended=\"true\""))
        })
        .await;
    let series = info_series(&text, "OmniKubeconfigExport", "kc").unwrap_or_default();
    assert!(series.contains(r#"ready="True""#), "{series}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        mint(),
        mints,
        "a suspended export mints nothing, although its ttl changed"
    );
    env.shutdown().await;
}

/// The issue's race: a spec edit followed at once by a label edit. The label edit makes the
/// status write of the sync find a newer object, and the pass runs again; the sync's record
/// (times, output, the `ChangesApplied` Event and the log line) must survive it, 20 times of 20.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_edit_followed_at_once_by_a_label_edit_records_the_sync_every_time() {
    let env = Env::builder().start().await;
    let name = "traced-twenty";
    env.cluster(
        name,
        "eeeeeeee-0000-4000-8000-000000000003",
        json!({"syncInterval": "5m"}),
    )
    .await;
    let mut last = env.wait::<OmniCluster>(name, "Ready", ready).await;
    let applied_events = |events: &[Event]| -> u64 {
        events
            .iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reason.as_deref() == Some("ChangesApplied")
            })
            .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64))
            .sum()
    };
    let log_lines = |logs: &str| {
        logs.lines()
            .filter(|l| l.contains("applied changes to Omni") && l.contains(&format!("/{name}")))
            .count()
    };
    let events_before = applied_events(&env.events().await);
    let lines_before = log_lines(&support::operator_logs());
    for i in 1..=20u32 {
        // Times have second precision: one edit per second keeps the records apart.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let before = last.status.clone().unwrap_or_default();
        env.patch_spec::<OmniCluster>(
            name,
            json!({"patches": [{"name": "traced", "inline": {"machine": {"env": {"TRY": i.to_string()}}}}]}),
        )
        .await;
        env.patch::<OmniCluster>(
            name,
            json!({"metadata": {"labels": {"try": i.to_string()}}}),
        )
        .await;
        last = env
            .wait::<OmniCluster>(name, &format!("try {i} recorded"), |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.last_sync_time > before.last_sync_time
                        && s.last_sync_output.as_deref().is_some_and(|o| !o.is_empty())
                        && s.observed_generation == c.metadata.generation
                })
            })
            .await;
        let want = events_before + u64::from(i);
        eventually_within(&format!("ChangesApplied Event {i}"), WAIT, async || {
            (applied_events(&env.events().await) >= want).then_some(())
        })
        .await;
        let logged = log_lines(&support::operator_logs());
        assert!(
            logged >= lines_before + i as usize,
            "try {i}: {logged} log lines (before: {lines_before})"
        );
    }
    env.shutdown().await;
}

/// A cluster, its children, its export and a secret sync applied in one go, dependants first:
/// every object waits for what it needs (`Reconciling`, Normal Events), nothing reports a
/// Warning or counts a reconcile error, and everything becomes Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_a_cluster_with_its_children_and_export_together_warns_nothing() {
    let env = Env::builder().start().await;
    let errors_before = reconcile_errors(&env);
    let objects: Vec<(&str, &str, Value)> = vec![
        (
            "OmniKubeconfigExport",
            "together-kc",
            json!({
                "clusterRef": {"name": "together"},
                "targetSecretRef": {"name": "together-kc"},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "24h",
                "renewBefore": "4h",
            }),
        ),
        (
            "OmniMachine",
            "together-m0",
            json!({"clusterRef": {"name": "together"}, "machineID": "eeeeeeee-0000-4000-8000-000000000006"}),
        ),
        (
            "OmniWorkers",
            "together-workers",
            json!({"clusterRef": {"name": "together"}, "machines": ["eeeeeeee-0000-4000-8000-000000000006"]}),
        ),
        (
            "OmniControlPlane",
            "together-cp",
            json!({"clusterRef": {"name": "together"}, "machines": ["eeeeeeee-0000-4000-8000-000000000004"]}),
        ),
        (
            "OmniCluster",
            "together",
            json!({
                "connectionRef": {"name": support::env::CONNECTION},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
            }),
        ),
    ];
    for (kind, name, spec) in objects {
        env.create_any_of_ours(support::stack::ours(kind, NS, name, spec))
            .await;
    }
    env.wait::<OmniCluster>("together", "Ready", ready).await;
    env.wait::<OmniKubeconfigExport>("together-kc", "Ready", ready)
        .await;
    // Let the last passes run out.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let warnings: Vec<(String, String, String)> = env
        .events()
        .await
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            (
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect();
    assert!(warnings.is_empty(), "Warning Events: {warnings:#?}");
    assert_eq!(
        reconcile_errors(&env),
        errors_before,
        "reconcile errors counted"
    );
    env.shutdown().await;
}

/// `omni_operator_reconcile_errors_total` summed over kinds.
fn reconcile_errors(env: &Env) -> u64 {
    env.metrics
        .encode()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("omni_operator_reconcile_errors_total{"))
        .filter_map(|l| {
            l.rsplit_once(' ')
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        })
        .sum()
}
