//! OmniCluster and its children end to end: the operator embedded in-process against kube-sim
//! (management cluster, plus a second one as the workload cluster) and omni-sim (Omni). Covers the
//! shipped samples becoming Ready in the documented order, idle reconciles writing nothing
//! anywhere, each condition reason of the cluster and child kinds, drift repair, the three
//! deletion policies, retries after API failures, metrics, and that no credential leaks into
//! logs, Events or status.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use omni_operator::api::{
    OmniCluster, OmniConnection, OmniControlPlane, OmniKubeconfigExport, OmniMachine,
    OmniSecretSync, OmniWorkers,
};
use omni_sim::types::{label, ty};
use serde_json::json;
use support::conditions::{assert_cond, is_false, is_true};
use support::env::{Env, KEY_FIELD, KEY_SECRET, NS, SAMPLE_CLUSTER, eventually};
use support::{WAIT, condition, ready};
use tokio::time::Instant;

const CP: &str = "11111111-1111-4111-8111-111111111111";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_become_ready_and_idle_reconciles_write_nothing() {
    let env = Env::builder().without_connection().start().await;

    // Applied in the documented order: connection, cluster, control plane, workers, machines.
    env.apply_samples(SAMPLE_CLUSTER, |doc| {
        if doc["kind"] == "OmniCluster" {
            // Frequent re-checks so the idle phase below sees many reconciles.
            doc["spec"]["syncInterval"] = json!("1s");
        }
    })
    .await;

    let conn = env
        .wait::<OmniConnection>("omni-sample", "Ready", ready)
        .await;
    assert_cond(&conn, is_true("Reachable").because("ConnectionReady"));
    support::conditions::assert_absent(&conn, "Stalled");
    let (_, _, message) = condition(&conn, "Ready").unwrap_or_default();
    assert!(message.starts_with("connected to "), "{message}");

    // Children may arrive after a first render: wait until all of them are in the template.
    let cluster = env
        .wait::<OmniCluster>("edge-sample", "Ready with every child", |c| {
            is_true("Ready").because("Running").holds(c)
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.machine_refs.len() == 2 && s.workers_refs.len() == 1)
        })
        .await;
    assert_eq!(
        condition(&cluster, "Ready").map(|c| c.2).as_deref(),
        Some(
            r#"Omni reports cluster "edge-sample" running: 2/2 machines healthy, Kubernetes API ready"#
        )
    );
    assert_cond(&cluster, is_true("Synced").because("Synced"));
    assert_cond(&cluster, is_true("Validated").because("Validated"));
    let status = cluster.status.clone().unwrap_or_default();
    assert_eq!(status.cluster_name.as_deref(), Some("edge-sample"));
    assert_eq!(status.connection_ref.as_deref(), Some("omni-sample"));
    assert_eq!(
        status.control_plane_ref.as_deref(),
        Some("edge-sample-control-plane")
    );
    assert_eq!(status.workers_refs, vec!["edge-sample-workers".to_string()]);
    assert_eq!(
        status.machine_refs.len(),
        2,
        "machines: {:?}",
        status.machine_refs
    );
    let hash = status.template_hash.clone().unwrap_or_default();
    assert!(
        hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{hash}"
    );
    assert!(env.omni.get(ty::CLUSTER, "edge-sample").is_some());

    for name in ["edge-sample-control-plane"] {
        let cp = env.wait::<OmniControlPlane>(name, "Accepted", ready).await;
        assert_cond(&cp, is_true("Accepted").because("Accepted"));
    }
    let w = env
        .wait::<OmniWorkers>("edge-sample-workers", "Accepted", ready)
        .await;
    assert_cond(&w, is_true("Accepted").because("Accepted"));
    for name in ["edge-sample-control-plane-0", "edge-sample-worker-0"] {
        let m = env.wait::<OmniMachine>(name, "Accepted", ready).await;
        assert_cond(&m, is_true("Accepted").because("Accepted"));
    }

    // Idle: once Omni's own status has settled, three more reconciles of every cluster change
    // nothing in either API server. Omni status converges over a few ticks, so the window is
    // retried until it is quiet (a controller that writes on every pass never gets there).
    let until = Instant::now() + WAIT;
    loop {
        let kube_before = env.kube.writes_total();
        let omni_before = env.omni.writes_total();
        let start = env.reconciles("OmniCluster");
        eventually("three more OmniCluster reconciles", || {
            env.reconciles("OmniCluster") >= start + 3
        })
        .await;
        let kube_delta = env.kube.writes_total() - kube_before;
        let omni_delta = env.omni.writes_total() - omni_before;
        if kube_delta == 0 && omni_delta == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "reconciles keep writing: {kube_delta} Kubernetes writes, {omni_delta} Omni writes"
        );
    }

    // Metrics: one info series per object with its readiness, and Omni calls by outcome.
    let count = |text: &str, method: &str, outcome: &str| -> u64 {
        let prefix =
            format!(r#"omni_operator_omni_rpcs_total{{method="{method}",outcome="{outcome}"}} "#);
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    // Counters are bumped by reconciles still running when the idle window closed, so wait
    // for them rather than read them once.
    let text = env
        .metrics_when(|t| {
            t.contains(r#"name="edge-sample",ready="True",reason="Running""#)
                && t.contains(r#"name="omni-sample",ready="True",reason="ConnectionReady""#)
                && count(t, "sync", "unchanged") >= 3
        })
        .await;
    for series in [
        format!(
            r#"omni_operator_resource_info{{kind="OmniCluster",namespace="{NS}",name="edge-sample",ready="True",reason="Running",suspended="false"}} 1"#
        ),
        format!(
            r#"omni_operator_resource_info{{kind="OmniConnection",namespace="{NS}",name="omni-sample",ready="True",reason="ConnectionReady",suspended="false"}} 1"#
        ),
    ] {
        assert!(text.contains(&series), "missing {series} in\n{text}");
    }
    let count = |method: &str, outcome: &str| count(&text, method, outcome);
    assert!(count("sync", "changed") >= 1, "{text}");
    assert!(count("sync", "unchanged") >= 3, "{text}");
    assert!(count("ping", "unchanged") >= 1, "{text}");

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn condition_reasons_of_clusters_and_children() {
    let env = Env::builder().start().await;

    // MissingConnection: the connection does not exist.
    env.cluster(
        "lonely",
        CP,
        json!({"connectionRef": {"name": "nope"}, "syncInterval": "5m"}),
    )
    .await;
    let c = env
        .wait_cond::<OmniCluster>("lonely", is_false("Synced").because("MissingConnection"))
        .await;
    assert_eq!(
        condition(&c, "Ready"),
        Some((
            "False".into(),
            "MissingConnection".into(),
            r#"failed to get OmniConnection "nope": omniconnections.omni.texashpc.com "nope" not found"#
                .into()
        ))
    );
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_name.clone()),
        Some("lonely".into())
    );

    // MissingTemplate: no OmniControlPlane.
    env.cluster("headless", "", json!({"syncInterval": "5m"}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("headless", is_false("Validated").because("MissingTemplate"))
        .await;
    assert_eq!(
        condition(&c, "Ready").map(|c| c.2),
        Some(format!(
            "expected exactly one OmniControlPlane referencing {NS}/headless, found 0"
        ))
    );

    // ValidationFailed: a spec the webhook would reject (admission bypassed here).
    env.cluster("negative", CP, json!({"syncInterval": "-1m"}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>(
            "negative",
            is_false("Validated").because("ValidationFailed"),
        )
        .await;
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(message.contains("syncInterval"), "{message}");
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_name.as_deref()),
        Some("negative"),
        "a cluster failing validation still reports its effective name"
    );

    // OmniRejected: Omni refuses a Talos version it does not know; only a spec change helps,
    // so the cluster is stalled at once.
    env.cluster(
        "unknown-talos",
        "33333333-3333-4333-8333-333333333333",
        json!({"talos": {"version": "v1.99.0"}, "syncInterval": "5m"}),
    )
    .await;
    let c = env
        .wait_cond::<OmniCluster>("unknown-talos", is_false("Synced").because("OmniRejected"))
        .await;
    assert_cond(&c, is_false("Ready").because("OmniRejected"));
    assert_cond(&c, is_true("Stalled").because("OmniRejected"));
    support::conditions::assert_absent(&c, "Reconciling");
    assert_cond(&c, is_true("Validated").because("Validated"));
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(message.starts_with("sync failed: "), "{message}");
    assert!(
        c.status
            .as_ref()
            .and_then(|s| s.last_attempt_time)
            .is_some()
    );

    // Suspended: nothing is sent to Omni; a cluster that never reported keeps `Ready` unknown.
    env.cluster(
        "paused",
        "44444444-4444-4444-8444-444444444444",
        json!({"suspend": true}),
    )
    .await;
    let c = env
        .wait_cond::<OmniCluster>("paused", is_true("Suspended").because("Suspended"))
        .await;
    assert_eq!(
        condition(&c, "Ready").map(|c| (c.0, c.1)),
        Some(("Unknown".into(), "Suspended".into()))
    );
    assert_eq!(
        condition(&c, "Suspended").map(|c| c.2).as_deref(),
        Some("spec.suspend is set: nothing is written to Omni and Ready keeps its last state")
    );
    assert!(env.omni.get(ty::CLUSTER, "paused").is_none());
    let expected = format!(
        r#"omni_operator_resource_info{{kind="OmniCluster",namespace="{NS}",name="paused",ready="Unknown",reason="Suspended",suspended="true"}} 1"#
    );
    let text = env.metrics_when(|t| t.contains(&expected)).await;
    assert!(text.contains(&expected), "{text}");
    // Resuming syncs it.
    env.patch::<OmniCluster>("paused", json!({"spec": {"suspend": false}}))
        .await;
    env.wait_cond::<OmniCluster>("paused", is_true("Ready").because("Running"))
        .await;
    assert!(env.omni.get(ty::CLUSTER, "paused").is_some());

    // clusterName override: the Omni cluster carries the override.
    env.cluster(
        "renamed",
        "55555555-5555-4555-8555-555555555555",
        json!({"clusterName": "prod_east-1"}),
    )
    .await;
    let c = env.wait::<OmniCluster>("renamed", "Ready", ready).await;
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_name.clone()),
        Some("prod_east-1".into())
    );
    assert!(env.omni.get(ty::CLUSTER, "prod_east-1").is_some());
    assert!(env.omni.get(ty::CLUSTER, "renamed").is_none());

    // Children: MissingCluster until the parent exists, then Accepted.
    env.create_spec::<OmniWorkers>("early-workers", json!({"clusterRef": {"name": "late"}, "machines": ["66666666-6666-4666-8666-666666666666"]})).await;
    let w = env
        .wait_cond::<OmniWorkers>(
            "early-workers",
            is_false("Accepted").because("MissingCluster"),
        )
        .await;
    assert_cond(&w, is_false("Ready").because("MissingCluster"));
    assert_eq!(
        condition(&w, "Accepted").map(|c| c.2).as_deref(),
        Some(r#"OmniCluster "late" does not exist"#)
    );
    env.cluster("late", "77777777-7777-4777-8777-777777777777", json!({}))
        .await;
    // Accepted once the parent exists; Ready once the parent is (a child is part of it).
    env.wait_cond::<OmniWorkers>("early-workers", is_true("Accepted").because("Accepted"))
        .await;
    let w = env
        .wait_cond::<OmniWorkers>("early-workers", is_true("Ready").because("Accepted"))
        .await;
    support::conditions::assert_absent(&w, "Reconciling");
    // The new workers reached Omni through the parent.
    let late = env
        .wait::<OmniCluster>("late", "Ready with workers", |c| {
            ready(c)
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.workers_refs == vec!["early-workers".to_string()])
        })
        .await;
    assert!(ready(&late));

    // Events record transitions with the condition reasons.
    let events = env.events().await;
    let reasons: Vec<(String, String, String)> = events
        .iter()
        .map(|e| {
            (
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (name, reason, type_) in [
        // Waiting for a sibling, a connection or a cluster is Normal; what only a spec change
        // fixes is a Warning.
        ("lonely", "MissingConnection", "Normal"),
        ("headless", "MissingTemplate", "Normal"),
        ("unknown-talos", "OmniRejected", "Warning"),
        ("negative", "ValidationFailed", "Warning"),
        ("paused", "Suspended", "Normal"),
        ("paused", "Running", "Normal"),
        ("early-workers", "MissingCluster", "Normal"),
        ("early-workers", "Accepted", "Normal"),
    ] {
        assert!(
            reasons.contains(&(name.into(), reason.into(), type_.into())),
            "no {type_} Event {reason} for {name}: {reasons:?}"
        );
    }

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

async fn machine_joined(env: &Env, machine: &str, cluster: &str) {
    eventually("machine joined its cluster", || {
        env.omni
            .machine_labels(machine)
            .and_then(|l| l.get(label::CLUSTER).cloned())
            .as_deref()
            == Some(cluster)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_policies_reach_omni_and_connections_wait_for_clusters() {
    let env = Env::builder().start().await;
    env.wait::<OmniConnection>("omni", "Ready", ready).await;

    let keep = "aaaaaaaa-0000-4000-8000-000000000001";
    let wipe = "aaaaaaaa-0000-4000-8000-000000000002";
    let orphan = "aaaaaaaa-0000-4000-8000-000000000003";
    for id in [keep, wipe, orphan] {
        env.connect_machine(id);
    }
    env.cluster("keep", keep, json!({})).await;
    env.cluster(
        "wipe",
        wipe,
        json!({"deletePolicy": {"destroyMachines": true}}),
    )
    .await;
    env.cluster("orphan", orphan, json!({"deletePolicy": {"orphan": true}}))
        .await;
    for name in ["keep", "wipe", "orphan"] {
        env.wait::<OmniCluster>(name, "Ready", ready).await;
    }
    machine_joined(&env, keep, "keep").await;
    machine_joined(&env, wipe, "wipe").await;
    // Disconnected machines are what destroyMachines removes from Omni.
    assert!(env.omni.set_machine_disconnected(keep, true));
    assert!(env.omni.set_machine_disconnected(wipe, true));

    // The connection's deletion waits for every cluster that uses it.
    env.delete::<OmniConnection>("omni").await;
    let conn = env
        .wait_cond::<OmniConnection>("omni", is_false("Ready").because("Deleting"))
        .await;
    assert_eq!(
        condition(&conn, "Ready").map(|c| c.2).as_deref(),
        Some("waiting for OmniCluster references to be deleted: keep, orphan, wipe")
    );
    assert_cond(&conn, is_true("Reconciling").because("Deleting"));
    support::conditions::assert_absent(&conn, "Stalled");

    // Default policy: the Omni cluster is deleted, machines stay registered.
    env.delete::<OmniCluster>("keep").await;
    env.wait_gone::<OmniCluster>("keep").await;
    assert!(env.omni.get(ty::CLUSTER, "keep").is_none());
    assert!(
        env.omni.get(ty::LINK, keep).is_some(),
        "without destroyMachines the machine stays registered"
    );

    // destroyMachines: the disconnected machine is removed from Omni too.
    env.delete::<OmniCluster>("wipe").await;
    env.wait_gone::<OmniCluster>("wipe").await;
    assert!(env.omni.get(ty::CLUSTER, "wipe").is_none());
    assert!(env.omni.get(ty::LINK, wipe).is_none());

    // Orphan: the Omni cluster survives.
    let writes = env.omni.writes_total();
    env.delete::<OmniCluster>("orphan").await;
    env.wait_gone::<OmniCluster>("orphan").await;
    assert!(env.omni.get(ty::CLUSTER, "orphan").is_some());
    assert_eq!(
        env.omni.writes_total(),
        writes,
        "orphan deletion wrote to Omni"
    );

    // With no cluster left, the connection goes.
    env.wait_gone::<OmniConnection>("omni").await;

    // Omni's teardown took more than one pass: the waiting was reported while it lasted.
    let events = env.events().await;
    for name in ["keep", "wipe"] {
        assert!(
            events.iter().any(|e| {
                e.reason.as_deref() == Some("Deleting")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("waiting for Omni to delete"))
            }),
            "no Deleting Event for {name}"
        );
    }

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_without_a_connection_fails_until_orphaned() {
    let env = Env::builder().without_connection().start().await;
    env.cluster(
        "stranded",
        CP,
        json!({"connectionRef": {"name": "gone"}, "syncInterval": "5m"}),
    )
    .await;
    env.wait_cond::<OmniCluster>("stranded", is_false("Ready").because("MissingConnection"))
        .await;
    env.delete::<OmniCluster>("stranded").await;
    let c = env
        .wait_cond::<OmniCluster>("stranded", is_false("Ready").because("DeleteFailed"))
        .await;
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.starts_with(r#"cannot delete remote Omni cluster without OmniConnection "gone": "#),
        "{message}"
    );
    // The documented way out: orphan it.
    env.patch::<OmniCluster>(
        "stranded",
        json!({"spec": {"deletePolicy": {"orphan": true}}}),
    )
    .await;
    env.wait_gone::<OmniCluster>("stranded").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_changes_and_omni_drift_are_synced_and_legacy_finalizers_are_honoured() {
    let env = Env::builder().start().await;
    let patch = json!({"patches": [{"name": "kubespan", "inline": {"machine": {"network": {"kubespan": {"enabled": true}}}}}]});
    env.cluster("drift", "bbbbbbbb-0000-4000-8000-000000000001", patch)
        .await;
    let before = env.wait::<OmniCluster>("drift", "Ready", ready).await;
    let hash = before
        .status
        .as_ref()
        .and_then(|s| s.template_hash.clone())
        .unwrap_or_default();

    // Out-of-band removal of a template resource in Omni is repaired at the next re-check.
    let patches = env
        .omni
        .store()
        .list_labeled(ty::CONFIG_PATCH, label::CLUSTER, "drift");
    let removed = patches
        .iter()
        .map(|r| omni_sim::store::id(r).to_string())
        .find(|id| id.contains("kubespan"))
        .unwrap_or_else(|| panic!("no kubespan ConfigPatch in Omni"));
    assert!(
        env.omni
            .store()
            .remove(omni_sim::types::DEFAULT_NS, ty::CONFIG_PATCH, &removed)
            .is_some()
    );
    let writes = env.omni.writes_total();
    eventually("the removed ConfigPatch is restored", || {
        env.omni.get(ty::CONFIG_PATCH, &removed).is_some()
    })
    .await;
    assert!(env.omni.writes_total() > writes);
    let after_drift = env.wait::<OmniCluster>("drift", "Ready", ready).await;
    assert_eq!(
        after_drift
            .status
            .as_ref()
            .and_then(|s| s.template_hash.clone()),
        Some(hash.clone()),
        "the template did not change, only Omni did"
    );

    // A spec change re-renders (new hash) and reaches Omni.
    let writes = env.omni.writes_total();
    env.patch::<OmniCluster>(
        "drift",
        json!({"spec": {"kubernetes": {"version": "v1.35.1"}}}),
    )
    .await;
    let changed = env
        .wait::<OmniCluster>("drift", "re-synced with a new hash", |c| {
            ready(c)
                && c.status.as_ref().is_some_and(|s| {
                    s.template_hash.as_deref() != Some(hash.as_str())
                        && s.observed_generation == c.metadata.generation
                })
        })
        .await;
    assert!(env.omni.writes_total() > writes);
    assert_cond(&changed, is_true("Synced").because("Synced"));

    // StatusFailed: Omni's ClusterStatus cannot be decoded (pinned so Omni's controllers leave
    // it alone, then corrupted). The template is still synced.
    env.cluster(
        "unreadable",
        "bbbbbbbb-0000-4000-8000-000000000003",
        json!({}),
    )
    .await;
    env.wait::<OmniCluster>("unreadable", "Ready", ready).await;
    support::make_cluster_status_unreadable(&env.omni, "unreadable");
    let c = env
        .wait_cond::<OmniCluster>("unreadable", is_false("Ready").because("StatusFailed"))
        .await;
    assert_cond(&c, is_true("Synced").because("Synced"));
    assert_cond(&c, is_true("Validated").because("Validated"));

    // An object from before the group rename keeps only its legacy finalizer, and deleting it
    // removes that finalizer once Omni is clean.
    let legacy = "omni.texas-hpc.org/finalizer";
    let _: OmniCluster = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "old", "namespace": NS, "finalizers": [legacy]},
            "spec": {
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
                "syncInterval": "1s",
            },
        }))
        .await;
    env.create_spec::<OmniControlPlane>("old-cp", json!({"clusterRef": {"name": "old"}, "machines": ["bbbbbbbb-0000-4000-8000-000000000002"]})).await;
    let old = env.wait::<OmniCluster>("old", "Ready", ready).await;
    assert_eq!(old.metadata.finalizers, Some(vec![legacy.to_string()]));
    assert!(env.omni.get(ty::CLUSTER, "old").is_some());
    env.delete::<OmniCluster>("old").await;
    env.wait_gone::<OmniCluster>("old").await;
    assert!(env.omni.get(ty::CLUSTER, "old").is_none());

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_moved_to_another_cluster_re_renders_both() {
    let env = Env::builder().start().await;
    env.cluster(
        "left",
        "cccccccc-0000-4000-8000-000000000001",
        json!({"syncInterval": "1h"}),
    )
    .await;
    env.cluster(
        "right",
        "cccccccc-0000-4000-8000-000000000002",
        json!({"syncInterval": "1h"}),
    )
    .await;
    env.create_spec::<OmniWorkers>("mover", json!({"clusterRef": {"name": "left"}, "machines": ["cccccccc-0000-4000-8000-000000000003"]})).await;
    let workers_of = |c: &OmniCluster| {
        c.status
            .as_ref()
            .map(|s| s.workers_refs.clone())
            .unwrap_or_default()
    };
    env.wait::<OmniCluster>("left", "Ready with the workers", |c| {
        ready(c) && workers_of(c) == vec!["mover".to_string()]
    })
    .await;
    env.wait::<OmniCluster>("right", "Ready", ready).await;

    env.patch::<OmniWorkers>("mover", json!({"spec": {"clusterRef": {"name": "right"}}}))
        .await;
    env.wait::<OmniCluster>("right", "Ready with the workers", |c| {
        ready(c) && workers_of(c) == vec!["mover".to_string()]
    })
    .await;
    // The cluster it left re-renders too. Re-checks are an hour apart here, so only the move
    // itself can have triggered that.
    env.wait::<OmniCluster>("left", "Ready without the workers", |c| {
        ready(c) && workers_of(c).is_empty()
    })
    .await;
    // Ready follows the cluster, which re-renders when the child joins it and may not be Ready
    // at the moment the child is first accepted: the child turns Ready once it is again.
    env.wait::<OmniWorkers>("mover", "Accepted by right and Ready", |w| {
        is_true("Accepted").because("Accepted").holds(w)
            && w.status.as_ref().and_then(|s| s.cluster_ref.as_deref()) == Some("right")
            && ready(w)
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_kubernetes_writes_are_retried_with_backoff() {
    let env = Env::builder().start().await;
    // The first two writes to this cluster (adding the finalizer) fail with a server error.
    env.kube
        .hooks()
        .fail_next("patch", "omniclusters", Some(NS), Some("flaky"), 500, 2);
    env.cluster("flaky", "dddddddd-0000-4000-8000-000000000001", json!({}))
        .await;
    let c = env.wait::<OmniCluster>("flaky", "Ready", ready).await;
    assert!(
        c.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "omni.texashpc.com/finalizer")
    );
    let text = env.metrics.encode().unwrap_or_default();
    let errors: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"omni_operator_reconcile_errors_total{kind="OmniCluster"} "#)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(errors >= 2, "{text}");
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_samples_in_order_become_ready_and_then_stay_quiet() {
    let env = Env::builder()
        .without_connection()
        .with_workload()
        .start()
        .await;
    // The workload cluster Omni hands out kubeconfigs for.
    let workload = &env.workload().sim;
    let registry_token = "ghcr-pat-5c1b9d7e0a";
    let _: Secret = env.create(json!({
        "metadata": {"name": "edge-sample-ghcr", "namespace": NS},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{registry_token}"}}}}}}"#)},
    }))
    .await;

    // The documented order: connection, cluster and children, exports, secret sync
    // (07, OmniHelmRelease, needs a chart repository and has its own tests).
    env.apply_samples(SAMPLE_CLUSTER, |_| {}).await;
    env.apply_samples(
        &["06-omnikubeconfigexport.yaml", "08-omnisecretsync.yaml"],
        |_| {},
    )
    .await;

    env.wait::<OmniCluster>("edge-sample", "Ready", ready).await;
    for name in [
        "edge-sample-automation-kubeconfig",
        "edge-sample-gitops-kubeconfig",
    ] {
        env.wait::<OmniKubeconfigExport>(name, "Ready", ready).await;
    }
    // Seconds until each exported kubeconfig expires: within the sample's 12h TTL.
    let prefix = format!(
        r#"omni_operator_kubeconfig_expiry_seconds{{namespace="{NS}",name="edge-sample-gitops-kubeconfig"}} "#
    );
    let text = env.metrics_when(|t| t.contains(&prefix)).await;
    let expiry: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no expiry series in\n{text}"));
    assert!(expiry > 0.0 && expiry <= 12.0 * 3600.0, "{expiry}");
    let exported = env
        .api::<Secret>()
        .get("edge-sample-gitops-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("exported Secret: {e}"));
    assert!(
        exported
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("workload.kubeconfig")),
        "the configured key holds the kubeconfig"
    );
    let sync = env
        .wait::<OmniSecretSync>("edge-sample-ghcr", "Ready", ready)
        .await;
    assert_cond(&sync, is_true("Synced").because("Synced"));
    // The copy exists in the workload cluster, in the namespace the sync created.
    let copy = Api::<Secret>::namespaced(env.workload().client.clone(), "flux-system")
        .get("edge-sample-ghcr")
        .await
        .unwrap_or_else(|e| panic!("synced Secret: {e}"));
    assert_eq!(
        copy.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    let copied = copy
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
        .unwrap_or_default();
    assert!(copied.contains(registry_token));

    // Everything Ready: re-checks of every kind now write nothing in either API server.
    let until = Instant::now() + WAIT;
    loop {
        let kube_before = env.kube.writes_total();
        let workload_before = workload.writes_total();
        let omni_before = env.omni.writes_total();
        let start = env.reconciles("OmniCluster");
        // The sample's syncInterval is 5m: edits of the sample-free dependencies trigger
        // reconciles instead, through the watches. Touching an unrelated annotation on the
        // connection re-runs the connection and every cluster using it.
        env.patch::<OmniConnection>(
            "omni-sample",
            json!({"metadata": {"annotations": {"poke": start.to_string()}}}),
        )
        .await;
        eventually("another OmniCluster reconcile", || {
            env.reconciles("OmniCluster") > start
        })
        .await;
        // One write is ours (the poke).
        let kube_delta = env.kube.writes_total() - kube_before - 1;
        let workload_delta = workload.writes_total() - workload_before;
        let omni_delta = env.omni.writes_total() - omni_before;
        if kube_delta == 0 && workload_delta == 0 && omni_delta == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "reconciles keep writing: {kube_delta} management, {workload_delta} workload, {omni_delta} Omni"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Neither the registry credential nor the Omni key shows up in logs, Events or status.
    assert!(!support::operator_logs().contains(registry_token));
    let events = env.events().await;
    assert!(
        !serde_json::to_string(&events)
            .unwrap_or_default()
            .contains(registry_token)
    );
    assert!(
        !serde_json::to_string(&sync)
            .unwrap_or_default()
            .contains(registry_token)
    );
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_reasons_and_a_fixed_secret_is_picked_up() {
    let env = Env::builder().without_connection().start().await;
    env.connection("pending", "later").await;
    let c = env
        .wait_cond::<OmniConnection>("pending", is_false("Ready").because("MissingSecret"))
        .await;
    assert_cond(&c, is_false("Reachable").because("MissingSecret"));
    // A Secret not there yet is waited for, not a stall.
    assert_cond(&c, is_true("Reconciling").because("MissingSecret"));
    support::conditions::assert_absent(&c, "Stalled");
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.starts_with(r#"failed to connect to Omni: MissingSecret "later": "#),
        "{message}"
    );

    // The env file Omni prints instead of the bare key: refused, and the key stays hidden.
    env.create_secret(
        "later",
        json!({ KEY_FIELD: format!("export OMNI_ENDPOINT={}\nexport OMNI_SERVICE_ACCOUNT_KEY={}\n", env.omni.endpoint(), env.key) }),
    )
    .await;
    let c = env
        .wait::<OmniConnection>("pending", "reports the env file", |c| {
            condition(c, "Ready").is_some_and(|(_, _, m)| m.contains("environment assignments"))
        })
        .await;
    assert_cond(&c, is_false("Ready").because("MissingSecret"));
    // Only a change of the Secret helps now.
    assert_cond(&c, is_true("Stalled").because("MissingSecret"));
    support::conditions::assert_absent(&c, "Reconciling");

    // Fixing the Secret makes the connection Ready.
    env.patch::<Secret>("later", json!({"stringData": { KEY_FIELD: env.key }}))
        .await;
    let c = env.wait::<OmniConnection>("pending", "Ready", ready).await;
    support::conditions::assert_absent(&c, "Stalled");
    assert_eq!(
        c.status.as_ref().and_then(|s| s.connection_ref.clone()),
        Some("pending".into())
    );
    assert!(c.status.as_ref().and_then(|s| s.last_check_time).is_some());

    // ConnectionFailed: nothing answers at the endpoint.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
    };
    env.connection_at("nowhere", &format!("http://127.0.0.1:{closed}"), KEY_SECRET)
        .await;
    let c = env
        .wait_cond::<OmniConnection>("nowhere", is_false("Ready").because("ConnectionFailed"))
        .await;
    assert_cond(&c, is_false("Reachable").because("ConnectionFailed"));
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.starts_with("failed to connect to Omni: list Omni clusters: "),
        "{message}"
    );

    let events = env.events().await;
    let seen = |name: &str, reason: &str, type_: &str| {
        events.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some(type_)
        })
    };
    assert!(seen("pending", "MissingSecret", "Warning"));
    assert!(seen("pending", "ConnectionReady", "Normal"));
    assert!(seen("nowhere", "ConnectionFailed", "Warning"));
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Ownership: the operator never changes or deletes Omni resources it did not create.

/// What a user-visible change would alter: phase, spec, labels and annotations as text (Omni's
/// own controllers add a finalizer and bump the version by themselves).
fn user_view(r: Option<omni_client::proto::cosi::resource::Resource>) -> Option<String> {
    let r = r?;
    let m = r.metadata?;
    let labels: std::collections::BTreeMap<_, _> = m.labels.into_iter().collect();
    let annotations: std::collections::BTreeMap<_, _> = m.annotations.into_iter().collect();
    Some(format!(
        "{} {:?} {labels:?} {annotations:?}",
        m.phase,
        r.spec.map(|s| s.proto_spec).unwrap_or_default()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_omni_cluster_the_operator_did_not_create_survives_until_adopted() {
    let env = Env::builder().start().await;
    env.wait::<OmniConnection>("omni", "Ready", ready).await;
    env.omni.put(support::foreign_cluster("prod"));
    let untouched = user_view(env.omni.get(ty::CLUSTER, "prod"));

    // Created suspended and deleted: the existing Omni cluster is not deleted.
    env.cluster(
        "prod-suspended",
        "",
        json!({"clusterName": "prod", "suspend": true}),
    )
    .await;
    env.wait_cond::<OmniCluster>("prod-suspended", is_true("Suspended").because("Suspended"))
        .await;
    env.delete::<OmniCluster>("prod-suspended").await;
    env.wait_gone::<OmniCluster>("prod-suspended").await;
    assert_eq!(user_view(env.omni.get(ty::CLUSTER, "prod")), untouched);
    assert!(
        env.events_of("prod-suspended")
            .await
            .iter()
            .any(|(reason, note)| reason == "DeleteSkipped"
                && note.contains("was not created by this OmniCluster")),
    );

    // Active: SyncFailed, nothing written to the existing cluster.
    env.connect_machine(CP);
    env.cluster("prod", CP, json!({})).await;
    let c = env
        .wait_cond::<OmniCluster>("prod", is_false("Synced").because("SyncFailed"))
        .await;
    let message = condition(&c, "Synced").map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains(
            "Omni cluster \"prod\" already exists and was not created by this OmniCluster"
        ),
        "{message}"
    );
    assert!(message.contains("omni.texashpc.com/adopt"), "{message}");
    assert_eq!(user_view(env.omni.get(ty::CLUSTER, "prod")), untouched);
    assert!(
        env.omni
            .get(ty::MACHINE_SET, "prod-control-planes")
            .is_none()
    );

    // Adopted: it differs from the manifests, so the plan is held first and nothing written;
    // approving the plan by its hash syncs it, and stamps it with the owner.
    env.patch::<OmniCluster>(
        "prod",
        json!({"metadata": {"annotations": {"omni.texashpc.com/adopt": "true"}}}),
    )
    .await;
    let held = env
        .wait_cond::<OmniCluster>("prod", is_false("Synced").because("AdoptionDiff"))
        .await;
    assert_eq!(user_view(env.omni.get(ty::CLUSTER, "prod")), untouched);
    let hash = held
        .status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .map(|p| p.hash.clone())
        .unwrap_or_default();
    env.patch::<OmniCluster>(
        "prod",
        json!({"metadata": {"annotations": {"omni.texashpc.com/approve-plan": hash}}}),
    )
    .await;
    env.wait_cond::<OmniCluster>("prod", is_true("Synced").because("Synced"))
        .await;
    // The Event follows the status write.
    support::env::eventually_within("the PlanApplied Event", WAIT, async || {
        env.events_of("prod")
            .await
            .iter()
            .any(|(reason, note)| reason == "PlanApplied" && note.contains(&hash))
            .then_some(())
    })
    .await;
    let stamped = env
        .omni
        .get(ty::CLUSTER, "prod")
        .and_then(|r| r.metadata)
        .map(|m| m.annotations)
        .unwrap_or_default();
    let uid = c.metadata.uid.clone().unwrap_or_default();
    assert_eq!(
        stamped.get("omni.texashpc.com/owner").map(String::as_str),
        Some(format!("{NS}/prod/{uid}").as_str()),
        "{stamped:?}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_patch_with_a_colliding_id_is_not_overwritten() {
    let env = Env::builder().start().await;
    env.wait::<OmniConnection>("omni", "Ready", ready).await;
    env.connect_machine(CP);
    // Someone else's patch, with no cluster label (applies to no cluster of ours).
    env.omni.put(omni_sim::store::resource(
        ty::CONFIG_PATCH,
        "400-shared-patch",
        "",
        Vec::new(),
        &omni_client::proto::specs::ConfigPatchSpec {
            data: "machine:\n  network:\n    hostname: theirs\n".into(),
            ..Default::default()
        },
    ));
    let theirs = env.omni.get(ty::CONFIG_PATCH, "400-shared-patch");
    env.cluster(
        "edge",
        CP,
        json!({"patches": [{"name": "mine", "idOverride": "400-shared-patch",
                            "inline": {"machine": {"network": {"hostname": "mine"}}}}]}),
    )
    .await;
    let c = env
        .wait_cond::<OmniCluster>("edge", is_false("Synced").because("SyncFailed"))
        .await;
    let message = condition(&c, "Synced").map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains("ConfigPatches.omni.sidero.dev(default/400-shared-patch) already exists"),
        "{message}"
    );
    assert_eq!(env.omni.get(ty::CONFIG_PATCH, "400-shared-patch"), theirs);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_cluster_is_not_deleted_under_either_name() {
    let env = Env::builder().start().await;
    env.connect_machine(CP);
    env.cluster("edge", CP, json!({})).await;
    env.wait_cond::<OmniCluster>("edge", is_true("Synced").because("Synced"))
        .await;
    // The webhook would refuse this; here it is bypassed (no webhook in this environment).
    env.patch::<OmniCluster>(
        "edge",
        json!({"spec": {"clusterName": "elsewhere", "suspend": true}}),
    )
    .await;
    env.delete::<OmniCluster>("edge").await;
    let c = env
        .wait_cond::<OmniCluster>("edge", is_false("Ready").because("DeleteFailed"))
        .await;
    let message = condition(&c, "Ready").map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains("spec.clusterName was changed from \"edge\" to \"elsewhere\""),
        "{message}"
    );
    assert!(env.omni.get(ty::CLUSTER, "edge").is_some());
    // Restoring the name lets the deletion finish (the cluster is ours).
    env.patch::<OmniCluster>("edge", json!({"spec": {"clusterName": "edge"}}))
        .await;
    env.wait_gone::<OmniCluster>("edge").await;
    assert!(env.omni.get(ty::CLUSTER, "edge").is_none());
    env.shutdown().await;
}

/// A cluster's reconcile reads its control plane, workers and machines from the controller's
/// caches (filled by the watches that wake it), never by listing them. Each reconcile used to
/// list all three kinds of its namespace; with every cluster reconciling at once in a cold
/// start, that held clusters × children objects in memory (20 GiB at 1,000 clusters in
/// omni-bench). This test failed before the change (3 lists per reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_reconciles_read_children_from_the_cache_never_by_listing() {
    let env = Env::builder().start().await;
    env.cluster("cached", "dddddddd-0000-4000-8000-000000000002", json!({}))
        .await;
    env.wait::<OmniCluster>("cached", "Ready", ready).await;
    // syncInterval 1s: the cluster keeps reconciling.
    let until = Instant::now() + WAIT;
    while env.reconciles("OmniCluster") < 6 {
        assert!(Instant::now() < until, "the cluster stopped reconciling");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lists: u64 = env
        .kube
        .hooks()
        .counts()
        .iter()
        .filter(|(k, _)| {
            k.verb == "list"
                && ["omnicontrolplanes", "omniworkers", "omnimachines"]
                    .contains(&k.resource.as_str())
        })
        .map(|(_, n)| n)
        .sum();
    // One initial list per watch: the children controllers' and the cluster controller's.
    assert!(lists <= 6, "{lists} lists of child kinds");
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

/// One Omni connection per OmniConnection, kept while the key is: a change of the key Secret's
/// metadata (the connection controller's own `omni-key-in-use` finalizer, a label) opens no new
/// one. The client cache was keyed on the Secret's resourceVersion, so that finalizer alone
/// cost a second connection at every start (omni-bench: 2 Omni connections for one
/// OmniConnection). This test failed before the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_omni_connection_outlives_changes_to_the_key_secrets_metadata() {
    let env = Env::builder().start().await;
    env.cluster("kept", "dddddddd-0000-4000-8000-000000000003", json!({}))
        .await;
    env.wait::<OmniCluster>("kept", "Ready", ready).await;
    let _: Secret = env
        .patch(
            KEY_SECRET,
            json!({"metadata": {"labels": {"team": "platform"}}}),
        )
        .await;
    let _: OmniCluster = env
        .patch_spec("kept", json!({"features": {"enableWorkloadProxy": true}}))
        .await;
    env.wait::<OmniCluster>("kept", "synced at generation 2", |c| {
        ready(c) && c.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
    })
    .await;
    assert_eq!(env.omni.connections_accepted(), 1);
    env.shutdown().await;
}

/// A child kind the operator may not list (a role without `list` on OmniMachines) leaves the
/// cluster controller's cache of that kind unfilled. Reconciles used to wait for that cache
/// without bound, so every OmniCluster hung with no word in its status. Now a reconcile gives
/// up after a few seconds, names the kind in its conditions and retries with backoff, and the
/// cluster syncs once the list is allowed. This test failed before the change (the cluster
/// never got a condition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_kind_the_operator_cannot_list_is_named_in_the_cluster_status() {
    let env = Env::builder().refuse_lists_of("omnimachines").start().await;
    env.cluster("blind", "dddddddd-0000-4000-8000-000000000004", json!({}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("blind", is_false("Ready").because("ReconcileFailed"))
        .await;
    let message = is_false("Synced").because("ReconcileFailed").message(&c);
    assert!(message.contains("OmniMachines"), "{message}");
    assert!(
        env.omni.get(ty::CLUSTER, "blind").is_none(),
        "nothing is synced without the children"
    );

    // Lists allowed again: the watch fills its cache and the next retry syncs.
    env.kube.hooks().clear_random_faults();
    env.wait::<OmniCluster>("blind", "Ready", ready).await;
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

/// Omni creates a cluster's status after the cluster, so a pass that syncs a new cluster often
/// finds no status to read. Nothing on the operator's side changes when Omni's status appears,
/// so the cluster must look again soon on its own, not after its (here hour-long) sync
/// interval. At 1,000 clusters in the benchmark, one cluster stayed `StatusFailed` this way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_its_status_in_omni_reaches_a_cluster_before_its_sync_interval() {
    let env = Env::builder().start().await;
    env.cluster(
        "watched",
        "dddddddd-0000-4000-8000-000000000002",
        json!({"syncInterval": "1h"}),
    )
    .await;
    let omni_phase = |c: &OmniCluster| c.status.as_ref().and_then(|s| s.omni_phase.clone());
    env.wait::<OmniCluster>("watched", "Omni's phase RUNNING", |c| {
        omni_phase(c).as_deref() == Some("RUNNING")
    })
    .await;
    let started = Instant::now();
    env.omni
        .set_cluster_status(
            "watched",
            omni_client::proto::specs::cluster_status_spec::Phase::ScalingDown,
            false,
        )
        .unwrap_or_else(|e| panic!("set the ClusterStatus: {e}"));
    env.wait::<OmniCluster>("watched", "Omni's phase SCALING_DOWN", |c| {
        omni_phase(c).as_deref() == Some("SCALING_DOWN")
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "seen after {:?}",
        started.elapsed()
    );
    // Omni's status is watched, not polled: a status that cannot be decoded is reported at once
    // and a repair seen at once, without a pass of the cluster's own.
    support::make_cluster_status_unreadable(&env.omni, "watched");
    env.wait_cond::<OmniCluster>("watched", is_false("Ready").because("StatusFailed"))
        .await;
    env.omni
        .set_cluster_status(
            "watched",
            omni_client::proto::specs::cluster_status_spec::Phase::Running,
            true,
        )
        .unwrap_or_else(|e| panic!("repair the ClusterStatus: {e}"));
    env.wait::<OmniCluster>("watched", "Omni's status read again", |c| {
        condition(c, "Ready").is_some_and(|(_, reason, _)| reason != "StatusFailed")
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_status_watch_an_unreadable_status_is_read_again_before_the_sync_interval() {
    let env = Env::builder().start().await;
    // Omni refuses the operator's status watches (a role that may not watch every cluster):
    // statuses are read from Omni on each pass, and re-read while unreadable.
    const PERMISSION_DENIED: i32 = 7;
    env.omni
        .inject_failure(omni_sim::methods::WATCH, PERMISSION_DENIED.into(), u32::MAX);
    env.cluster(
        "late",
        "dddddddd-0000-4000-8000-000000000001",
        json!({"syncInterval": "1h"}),
    )
    .await;
    env.wait::<OmniCluster>("late", "Ready", ready).await;
    support::make_cluster_status_unreadable(&env.omni, "late");
    // A spec change makes a pass, which finds the status unreadable.
    env.patch::<OmniCluster>(
        "late",
        json!({"spec": {"kubernetes": {"version": "v1.35.1"}}}),
    )
    .await;
    env.wait_cond::<OmniCluster>("late", is_false("Ready").because("StatusFailed"))
        .await;
    // Ready turning wakes the children, whose writes may wake the cluster once more: let that
    // pass, so that what follows can only come from the cluster's own re-check.
    loop {
        let passes = env.reconciles("OmniCluster");
        tokio::time::sleep(Duration::from_secs(3)).await;
        if env.reconciles("OmniCluster") == passes {
            break;
        }
    }
    let started = Instant::now();
    env.omni
        .set_cluster_status(
            "late",
            omni_client::proto::specs::cluster_status_spec::Phase::Running,
            true,
        )
        .unwrap_or_else(|e| panic!("repair the ClusterStatus: {e}"));
    env.wait::<OmniCluster>("late", "Omni's status read again", |c| {
        condition(c, "Ready").is_some_and(|(_, reason, _)| reason != "StatusFailed")
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "read again after {:?}",
        started.elapsed()
    );
    env.shutdown().await;
}
