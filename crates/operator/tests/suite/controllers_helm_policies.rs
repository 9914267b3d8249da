//! OmniHelmRelease at Flux's depth, end to end with the real helm binary against a workload
//! kube-sim (the environment of `controllers_helm_release`): `dependsOn` ordering of installs
//! and deletions, the cluster health gate on an Omni upgrade in flight, remediation with a retry
//! budget (and the reset annotation), live-object drift in `Warn` and `Enabled` mode with an
//! ignored path and a deleted object, the reconcile and force annotations, `helm test` with its
//! results in status and a failing test remediated, `status.history`, and chart version ranges
//! (HTTP index and OCI tags) followed as new versions are published.
//!
//! Pods never run in kube-sim: [`Kubelet`] plays the kubelet for test hook Pods, giving each the
//! phase its `demo.example/outcome` annotation names.

use crate::controllers_helm_release::{Helm, merge, ready_at, reconciled_since, revision};
use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use omni_client::proto::specs::{kubernetes_upgrade_status_spec, talos_upgrade_status_spec};
use omni_operator::api::{OmniCluster, OmniHelmRelease};
use serde_json::{Value, json};
use support::chart_server::{ChartServer, Entry, Serve, digest, index, package};
use support::env::Env;
use support::{condition, wait_for, wait_gone};

/// The chart of `env`'s repository at 0.1.0 with `values`.
fn chart(env: &Helm, values: Value) -> Value {
    json!({
        "repository": env.repo.url,
        "chart": "demo",
        "version": "0.1.0",
        "values": values,
        "credentialsSecretRef": {"name": "repo-credentials"},
        // The test repository is plain HTTP: credentials go there only on request.
        "insecure": true,
    })
}

fn reason(r: &OmniHelmRelease, type_: &str) -> Option<(String, String, String)> {
    condition(r, type_)
}

fn not_ready_because(r: &OmniHelmRelease, why: &str) -> bool {
    reason(r, "Ready").is_some_and(|(s, reason, _)| s == "False" && reason == why)
}

fn status_of(r: &OmniHelmRelease) -> omni_operator::api::helm_release::OmniHelmReleaseStatus {
    r.status.clone().unwrap_or_default()
}

async fn annotate(env: &Helm, name: &str, key: &str, value: &str) {
    let _: OmniHelmRelease = env
        .env
        .patch(name, json!({"metadata": {"annotations": {key: value}}}))
        .await;
}

/// The Events about `name` with `reason`.
async fn events_with(env: &Helm, name: &str, reason: &str) -> Vec<(String, String)> {
    env.events(name)
        .await
        .into_iter()
        .filter(|(_, r, _)| r == reason)
        .map(|(t, _, note)| (t, note))
        .collect()
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waits_for_its_dependencies_and_goes_before_them() {
    let env = Helm::start().await;
    let api = env.releases();
    // The dependency fails first: its install hits a namespace that does not exist.
    let broken = json!({"greeting": "hello", "brokenNamespace": "does-not-exist"});
    env.create_release("base", json!({"chart": chart(&env, broken)}))
        .await;
    wait_for(&api, "base", "failed", |r| {
        not_ready_because(r, "ReconcileFailed")
    })
    .await;
    env.create_release(
        "app",
        json!({"chart": chart(&env, json!({"greeting": "app"})), "dependsOn": [{"name": "base"}]}),
    )
    .await;
    let app = wait_for(&api, "app", "waiting for base", |r| {
        not_ready_because(r, "DependencyNotReady")
    })
    .await;
    let (_, _, message) = reason(&app, "Ready").unwrap_or_default();
    assert!(
        message.starts_with("waiting for OmniHelmRelease \"base\" (spec.dependsOn), which is not Ready (ReconcileFailed"),
        "{message}"
    );
    assert_eq!(env.helm_revisions("app").await, Vec::<i64>::new());
    // Waiting is Normal, never a Warning.
    let waiting = events_with(&env, "app", "DependencyNotReady").await;
    assert!(
        !waiting.is_empty() && waiting.iter().all(|(t, _)| t == "Normal"),
        "{waiting:?}"
    );

    // The dependency turns Ready: the dependant is woken and installs.
    env.patch_spec(
        "base",
        json!({"chart": {"values": {"brokenNamespace": null}}}),
    )
    .await;
    wait_for(&api, "base", "Ready", |r| {
        reason(r, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    wait_for(&api, "app", "installed", |r| ready_at(r, 1)).await;
    assert_eq!(env.greeting("app").await.as_deref(), Some("app"));

    // A cycle is a spec problem, named; undone, both are Ready again.
    env.patch_spec("base", json!({"dependsOn": [{"name": "app"}]}))
        .await;
    let base = wait_for(&api, "base", "a cycle", |r| {
        not_ready_because(r, "ValidationFailed")
    })
    .await;
    let (_, _, message) = reason(&base, "Ready").unwrap_or_default();
    assert_eq!(
        message,
        "spec.dependsOn: dependency cycle base → app → base"
    );
    env.patch_spec("base", json!({"dependsOn": null})).await;
    wait_for(&api, "base", "Ready", |r| {
        reason(r, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;

    // Deleting the dependency first: it waits for its dependant, which goes first.
    api.delete("base", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    let base = wait_for(&api, "base", "waiting for its dependant", |r| {
        reason(r, "Ready").is_some_and(|(_, _, m)| m.contains("\"app\" to be deleted first"))
    })
    .await;
    assert!(base.metadata.deletion_timestamp.is_some());
    assert!(!env.helm_revisions("base").await.is_empty());
    api.delete("app", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&api, "app").await;
    wait_gone(&api, "base").await;
    assert_eq!(env.helm_revisions("app").await, Vec::<i64>::new());
    assert_eq!(env.helm_revisions("base").await, Vec::<i64>::new());
    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waits_for_an_omni_upgrade_to_end_and_is_kept_during_the_next() {
    let env = Helm::start_with(Env::builder()).await;
    let api = env.releases();
    env.env
        .cluster("hc", "cccccccc-0000-4000-8000-000000000001", json!({}))
        .await;
    let phases = |c: &OmniCluster| {
        let s = c.status.clone().unwrap_or_default();
        (s.omni_phase, s.talos_upgrade_phase)
    };
    env.env
        .wait::<OmniCluster>("hc", "running in Omni", |c| {
            phases(c) == (Some("RUNNING".into()), Some("Done".into()))
        })
        .await;
    let upgrading = |talos| {
        env.env
            .omni
            .set_upgrade_phases("hc", kubernetes_upgrade_status_spec::Phase::Done, talos)
            .unwrap_or_else(|e| panic!("set upgrade phases: {e}"));
    };
    upgrading(talos_upgrade_status_spec::Phase::Upgrading);
    env.env
        .wait::<OmniCluster>("hc", "upgrading Talos", |c| {
            phases(c).1.as_deref() == Some("Upgrading")
        })
        .await;
    env.create_release(
        "gated",
        json!({"clusterRef": {"name": "hc"}, "clusterHealth": {"require": "Running"}}),
    )
    .await;
    let r = wait_for(&api, "gated", "waiting for the cluster", |r| {
        not_ready_because(r, "ClusterNotHealthy")
    })
    .await;
    let (_, _, message) = reason(&r, "Ready").unwrap_or_default();
    assert_eq!(
        message,
        "waiting for OmniCluster \"hc\" to be Running: a Talos upgrade is in flight (Upgrading)"
    );
    assert_eq!(env.helm_revisions("gated").await, Vec::<i64>::new());

    // The upgrade ends: the cluster's status wakes the release, which installs.
    upgrading(talos_upgrade_status_spec::Phase::Done);
    wait_for(&api, "gated", "installed", |r| ready_at(r, 1)).await;

    // The next upgrade holds the release again, but never removes it.
    upgrading(talos_upgrade_status_spec::Phase::Upgrading);
    wait_for(&api, "gated", "waiting again", |r| {
        not_ready_because(r, "ClusterNotHealthy")
    })
    .await;
    assert_eq!(env.helm_revisions("gated").await, vec![1]);
    assert_eq!(env.greeting("gated").await.as_deref(), Some("hello"));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_keeps_failing_is_rolled_back_once_then_stops_until_reset() {
    let env = Helm::start().await;
    let api = env.releases();
    env.create_release(
        "flaky",
        json!({
            "driftCheckInterval": "10s",
            "upgrade": {"remediation": {"retries": 1, "strategy": "Rollback", "remediateLastFailure": false}},
        }),
    )
    .await;
    wait_for(&api, "flaky", "installed", |r| ready_at(r, 1)).await;
    env.patch_spec(
        "flaky",
        json!({"chart": {"values": {"greeting": "hola", "brokenNamespace": "does-not-exist"}}}),
    )
    .await;
    // Upgrade 2 fails and is rolled back (3); the retry (4) fails and spends the budget.
    let r = wait_for(&api, "flaky", "retries exhausted", |r| {
        not_ready_because(r, "RetriesExhausted")
    })
    .await;
    let s = status_of(&r);
    assert_eq!(s.upgrade_failures, Some(2), "{s:#?}");
    assert_eq!(
        reason(&r, "Stalled").map(|c| (c.0, c.1)),
        Some(("True".into(), "RetriesExhausted".into()))
    );
    let (_, _, message) = reason(&r, "Ready").unwrap_or_default();
    assert!(
        message.ends_with("upgrade failed 2 times (retries: 1), no further attempt until the spec or the chart changes or annotation omni.texashpc.com/reset-at is set"),
        "{message}"
    );
    assert_eq!(env.helm_revisions("flaky").await, vec![1, 2, 3, 4]);
    let remediated = events_with(&env, "flaky", "Remediated").await;
    assert_eq!(remediated.len(), 1, "{remediated:?}");
    assert!(
        remediated[0].1.contains("rolled it back to revision 1"),
        "{remediated:?}"
    );
    // The failure that spent the last retry is left as it is (`remediateLastFailure: false`).
    assert_eq!(s.release_status.as_deref(), Some("failed"));
    assert_eq!(revision(&r), Some(4));
    // History: the revisions this object made, newest first.
    let history: Vec<(i64, String)> = s
        .history
        .iter()
        .map(|h| (h.revision, h.status.clone()))
        .collect();
    assert_eq!(history[0], (4, "failed".to_string()), "{history:?}");
    assert!(
        s.history
            .iter()
            .any(|h| h.revision == 1 && h.chart_version == "0.1.0" && !h.digest.is_empty()),
        "{:#?}",
        s.history
    );

    // No Helm for a full drift interval (and more): no write to the workload cluster at all.
    let writes = env.workload().sim.writes_total();
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(env.workload().sim.writes_total(), writes);
    assert_eq!(env.helm_revisions("flaky").await, vec![1, 2, 3, 4]);

    // The reset annotation spends a new budget on the same inputs.
    annotate(&env, "flaky", "omni.texashpc.com/reset-at", "r1").await;
    let r = wait_for(&api, "flaky", "retried and exhausted again", |r| {
        status_of(r).last_handled_reset_at.as_deref() == Some("r1")
            && not_ready_because(r, "RetriesExhausted")
            && revision(r).is_some_and(|v| v >= 6)
    })
    .await;
    assert_eq!(status_of(&r).upgrade_failures, Some(2));
    assert_eq!(env.helm_revisions("flaky").await, vec![1, 2, 3, 4, 5, 6, 7]);

    // A spec change ends it.
    env.patch_spec(
        "flaky",
        json!({"chart": {"values": {"brokenNamespace": null}}}),
    )
    .await;
    let r = wait_for(&api, "flaky", "Ready", |r| {
        reason(r, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!(reason(&r, "Stalled"), None);
    assert_eq!(status_of(&r).upgrade_failures, None);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_objects_that_drift_are_reported_or_put_back_and_requests_run_a_pass() {
    let env = Helm::start().await;
    let api = env.releases();
    let workload = env.workload().client.clone();
    let deployments: Api<Deployment> = Api::namespaced(workload.clone(), "default");
    let config_maps: Api<ConfigMap> = Api::namespaced(workload.clone(), "default");
    env.create_release(
        "web",
        json!({
            "chart": chart(&env, json!({"greeting": "hello", "web": {"replicas": 2}})),
            "driftCheckInterval": "10s",
            "driftDetection": {
                "mode": "Warn",
                "ignore": [{"paths": ["/data/greeting"], "target": {"kind": "ConfigMap"}}],
            },
        }),
    )
    .await;
    wait_for(&api, "web", "installed, not drifted", |r| {
        ready_at(r, 1) && reason(r, "Drifted").is_some_and(|(s, _, _)| s == "False")
    })
    .await;

    // Undrifted: a periodic drift check writes nothing, anywhere.
    let object_versions = async || {
        let d = deployments
            .get("web-web")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let c = config_maps
            .get("web-config")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (d.resource_version(), c.resource_version())
    };
    let versions = object_versions().await;
    let status_writes = support::writes_to(&env.env.kube, &["omnihelmreleases"]);
    let before = env.reconciles();
    reconciled_since(&env, before + 1).await;
    assert_eq!(object_versions().await, versions);
    assert_eq!(
        support::writes_to(&env.env.kube, &["omnihelmreleases"]),
        status_writes
    );

    // Someone scales the Deployment and edits the ignored field.
    let merge_patch = |v: Value| Patch::Merge(v);
    deployments
        .patch(
            "web-web",
            &PatchParams::default(),
            &merge_patch(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    config_maps
        .patch(
            "web-config",
            &PatchParams::default(),
            &merge_patch(json!({"data": {"greeting": "tampered"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A reconcile request runs a pass (and the drift check) now, not at the next interval.
    annotate(
        &env,
        "web",
        "omni.texashpc.com/reconcile-requested-at",
        "t1",
    )
    .await;
    let r = wait_for(&api, "web", "drift reported", |r| {
        status_of(r).last_handled_reconcile_at.as_deref() == Some("t1")
            && reason(r, "Drifted").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let s = status_of(&r);
    let drifted: Vec<(String, String, bool, Vec<String>)> = s
        .drifted_objects
        .iter()
        .map(|o| (o.kind.clone(), o.name.clone(), o.deleted, o.fields.clone()))
        .collect();
    assert_eq!(
        drifted,
        vec![(
            "Deployment".to_string(),
            "web-web".to_string(),
            false,
            vec!["/spec/replicas".to_string()]
        )]
    );
    assert_eq!(
        reason(&r, "Ready").map(|c| c.0),
        Some("True".into()),
        "drift in Warn mode is reported, the release stays Ready"
    );
    let warned = events_with(&env, "web", "DriftDetected").await;
    assert!(!warned.is_empty(), "an Event says so");
    // Warn changes nothing.
    let scaled = deployments
        .get("web-web")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(5));

    // Enabled puts the Deployment back, without a new revision, and leaves the ignored field.
    env.patch_spec("web", json!({"driftDetection": {"mode": "Enabled"}}))
        .await;
    wait_for(&api, "web", "drift corrected", |r| {
        reason(r, "Drifted")
            .is_some_and(|(s, reason, _)| s == "False" && reason == "DriftCorrected")
    })
    .await;
    let back = deployments
        .get("web-web")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(env.helm_revisions("web").await, vec![1]);
    assert_eq!(
        env.greeting("web").await.as_deref(),
        Some("tampered"),
        "an ignored field is not put back"
    );
    let corrected = env.env.metrics.encode().unwrap_or_default();
    assert!(
        corrected.contains(r#"omni_operator_helm_drift_corrections_total{namespace="#),
        "{corrected}"
    );

    // A deleted ConfigMap of the release is drift: recreated.
    config_maps
        .delete("web-config", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    annotate(
        &env,
        "web",
        "omni.texashpc.com/reconcile-requested-at",
        "t2",
    )
    .await;
    let r = wait_for(&api, "web", "the ConfigMap recreated", |r| {
        status_of(r).last_handled_reconcile_at.as_deref() == Some("t2")
            && reason(r, "Drifted").is_some_and(|(_, _, m)| m.contains("web-config (deleted)"))
    })
    .await;
    assert_eq!(env.greeting("web").await.as_deref(), Some("hello"));
    assert_eq!(revision(&r), Some(1));
    assert_eq!(env.helm_revisions("web").await, vec![1]);

    // A force request makes exactly one new revision.
    annotate(&env, "web", "omni.texashpc.com/force-at", "f1").await;
    wait_for(&api, "web", "forced", |r| {
        status_of(r).last_handled_force_at.as_deref() == Some("f1") && ready_at(r, 2)
    })
    .await;
    annotate(
        &env,
        "web",
        "omni.texashpc.com/reconcile-requested-at",
        "t3",
    )
    .await;
    wait_for(&api, "web", "t3 handled", |r| {
        status_of(r).last_handled_reconcile_at.as_deref() == Some("t3")
    })
    .await;
    assert_eq!(env.helm_revisions("web").await, vec![1, 2]);
    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

/// Plays the kubelet for test hook Pods of the workload cluster: each Pod annotated
/// `demo.example/outcome` gets that phase, once.
struct Kubelet(tokio::task::JoinHandle<()>);

impl Kubelet {
    fn start(client: kube::Client) -> Kubelet {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        Kubelet(tokio::spawn(async move {
            loop {
                for pod in pods
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let outcome = pod.annotations().get("demo.example/outcome").cloned();
                    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
                    if let (Some(outcome), None) = (outcome, phase) {
                        let _ = pods
                            .patch_status(
                                &pod.name_any(),
                                &PatchParams::default(),
                                &Patch::Merge(json!({"status": {"phase": outcome}})),
                            )
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }))
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_test_results_are_reported_and_a_failing_test_is_remediated() {
    let env = Helm::start().await;
    let _kubelet = Kubelet::start(env.workload().client.clone());
    let api = env.releases();
    let mut spec = json!({
        "test": {"enable": true, "timeout": "2m"},
        "upgrade": {"remediation": {"retries": 0, "remediateLastFailure": true}},
    });
    merge(
        &mut spec,
        json!({"chart": chart(&env, json!({"greeting": "hello", "test": {"outcome": "Succeeded"}}))}),
    );
    env.create_release("tested", spec).await;
    let r = wait_for(&api, "tested", "installed and tested", |r| {
        ready_at(r, 1) && reason(r, "TestSuccess").is_some()
    })
    .await;
    assert_eq!(
        reason(&r, "TestSuccess").map(|c| (c.0, c.1)),
        Some(("True".into(), "TestSucceeded".into()))
    );
    let s = status_of(&r);
    let hooks: Vec<(String, String)> = s
        .test_hooks
        .iter()
        .map(|h| (h.name.clone(), h.phase.clone()))
        .collect();
    assert_eq!(
        hooks,
        vec![("tested-test".to_string(), "Succeeded".to_string())]
    );
    assert_eq!(s.history[0].revision, 1);
    assert_eq!(s.history[0].test_result.as_deref(), Some("Succeeded"));

    // An upgrade whose test fails counts as a failed upgrade: rolled back, budget spent.
    env.patch_spec(
        "tested",
        json!({"chart": {"values": {"greeting": "hola", "test": {"outcome": "Failed"}}}}),
    )
    .await;
    let r = wait_for(&api, "tested", "test failed, rolled back", |r| {
        not_ready_because(r, "RetriesExhausted") && revision(r) == Some(3)
    })
    .await;
    assert_eq!(
        reason(&r, "TestSuccess").map(|c| (c.0, c.1)),
        Some(("False".into(), "TestFailed".into()))
    );
    let s = status_of(&r);
    assert_eq!(s.release_status.as_deref(), Some("deployed"));
    assert_eq!(s.test_hooks[0].phase, "Failed");
    let tested: Vec<(i64, Option<String>)> = s
        .history
        .iter()
        .map(|h| (h.revision, h.test_result.clone()))
        .collect();
    assert_eq!(
        tested[..2],
        [
            (2, Some("Failed".to_string())),
            (1, Some("Succeeded".to_string()))
        ]
    );
    assert_eq!(env.greeting("tested").await.as_deref(), Some("hello"));
    assert_eq!(events_with(&env, "tested", "Remediated").await.len(), 1);
    env.shutdown().await;
}

/// The request annotations on the other kinds: `reconcile-requested-at` runs a pass and is
/// recorded on each; `force-at` makes an OmniCluster read Omni's view fresh and an
/// OmniKubeconfigExport mint a new kubeconfig, once per value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_annotations_work_on_the_other_kinds() {
    use omni_operator::api::{OmniKubeconfigExport, OmniSecretSync};
    let env = Helm::start_with(Env::builder()).await;
    let cluster = "anno";
    env.env
        .cluster(
            cluster,
            "cccccccc-0000-4000-8000-000000000002",
            json!({"syncInterval": "1h"}),
        )
        .await;
    env.env
        .wait::<OmniCluster>(cluster, "Ready", support::ready)
        .await;
    let requests = |value: &Value| {
        (
            value["status"]["lastHandledReconcileAt"]
                .as_str()
                .map(str::to_string),
            value["status"]["lastHandledForceAt"]
                .as_str()
                .map(str::to_string),
        )
    };
    let annotate_any = async |kind_name: (&str, &str), key: &str, value: &str| {
        let body = json!({"metadata": {"annotations": {key: value}}});
        match kind_name.0 {
            "OmniCluster" => {
                let _: OmniCluster = env.env.patch(kind_name.1, body).await;
            }
            "OmniKubeconfigExport" => {
                let _: OmniKubeconfigExport = env.env.patch(kind_name.1, body).await;
            }
            _ => {
                let _: OmniSecretSync = env.env.patch(kind_name.1, body).await;
            }
        }
    };

    // OmniCluster: a reconcile request and a forced sync are recorded.
    annotate_any(
        ("OmniCluster", cluster),
        "omni.texashpc.com/reconcile-requested-at",
        "r1",
    )
    .await;
    annotate_any(("OmniCluster", cluster), "omni.texashpc.com/force-at", "f1").await;
    env.env
        .wait::<OmniCluster>(cluster, "both requests handled", |c| {
            requests(&serde_json::to_value(c).unwrap_or_default())
                == (Some("r1".into()), Some("f1".into()))
        })
        .await;

    // OmniKubeconfigExport: force-at mints a new kubeconfig once.
    let _: OmniKubeconfigExport = env
        .env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniKubeconfigExport",
            "metadata": {"name": "kc", "namespace": support::env::NS},
            "spec": {
                "clusterRef": {"name": cluster},
                "targetSecretRef": {"name": "kc"},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "24h",
                "deletionPolicy": "Delete",
            },
        }))
        .await;
    env.env
        .wait::<OmniKubeconfigExport>("kc", "Ready", support::ready)
        .await;
    assert!(env.env.exported_token("kc").await.is_some());
    annotate_any(
        ("OmniKubeconfigExport", "kc"),
        "omni.texashpc.com/force-at",
        "f1",
    )
    .await;
    env.env
        .wait::<OmniKubeconfigExport>("kc", "force handled", |e| {
            requests(&serde_json::to_value(e).unwrap_or_default()).1 == Some("f1".into())
        })
        .await;
    let rotated = |events: Vec<(String, String)>| {
        events
            .iter()
            .filter(|(reason, _)| reason == "KubeconfigRotated")
            .count()
    };
    assert_eq!(
        rotated(env.env.events_of("kc").await),
        1,
        "a new kubeconfig was minted and written"
    );
    let second = env.env.exported_token("kc").await;
    // Handled once: a later pass reuses it.
    annotate_any(
        ("OmniKubeconfigExport", "kc"),
        "omni.texashpc.com/reconcile-requested-at",
        "r1",
    )
    .await;
    env.env
        .wait::<OmniKubeconfigExport>("kc", "r1 handled", |e| {
            requests(&serde_json::to_value(e).unwrap_or_default()).0 == Some("r1".into())
        })
        .await;
    assert_eq!(env.env.exported_token("kc").await, second);
    assert_eq!(rotated(env.env.events_of("kc").await), 1, "minted once");
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------

/// Publishes chart `demo` at `version` in `repo`, an HTTP chart repository, and rewrites its
/// index to list `listed` (every version published so far).
fn publish_http(repo: &ChartServer, version: &str, listed: &mut Vec<(String, String)>) {
    let archive = package("demo", version, &format!("v{version}"));
    let file = format!("demo-{version}.tgz");
    listed.push((version.to_string(), digest(&archive)));
    repo.put(&format!("/{file}"), archive, "application/gzip");
    let urls: Vec<String> = listed
        .iter()
        .map(|(v, _)| format!("demo-{v}.tgz"))
        .collect();
    let entries: Vec<Entry<'_>> = listed
        .iter()
        .zip(&urls)
        .map(|((v, d), url)| Entry {
            name: "demo",
            version: v,
            digest: d,
            url,
        })
        .collect();
    repo.put("/index.yaml", index(&entries), "application/yaml");
}

/// Publishes chart `demo` at `version` in `registry`, an OCI registry (as `charts/demo`), and
/// rewrites its tag list to `tags` (every version published so far).
fn publish_oci(registry: &ChartServer, version: &str, tags: &mut Vec<String>) {
    let chart = package("demo", version, &format!("v{version}"));
    let config = format!(r#"{{"name":"demo","version":"{version}","apiVersion":"v2"}}"#);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json",
                   "digest": format!("sha256:{}", digest(config.as_bytes())), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                    "digest": format!("sha256:{}", digest(&chart)), "size": chart.len()}],
    })
    .to_string();
    registry.put(
        &format!("/v2/charts/demo/manifests/{version}"),
        manifest,
        "application/vnd.oci.image.manifest.v1+json",
    );
    registry.put(
        &format!("/v2/charts/demo/blobs/sha256:{}", digest(config.as_bytes())),
        config.into_bytes(),
        "application/vnd.cncf.helm.config.v1+json",
    );
    registry.put(
        &format!("/v2/charts/demo/blobs/sha256:{}", digest(&chart)),
        chart,
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
    );
    tags.push(version.to_string());
    registry.put(
        "/v2/charts/demo/tags/list",
        json!({"name": "charts/demo", "tags": tags}).to_string(),
        "application/json",
    );
}

/// The chart version in status and the one last attempted.
fn versions(r: &OmniHelmRelease) -> (Option<String>, Option<String>) {
    let s = status_of(r);
    (s.chart_version, s.last_attempted_chart_version)
}

fn at_version(r: &OmniHelmRelease, version: &str) -> bool {
    let want = Some(version.to_string());
    reason(r, "Ready").is_some_and(|(s, _, _)| s == "True") && versions(r) == (want.clone(), want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_picks_the_highest_matching_version_and_follows_a_newly_published_one() {
    let env = Helm::start().await;
    let api = env.releases();
    let repo = ChartServer::start(Serve::default()).await;
    let mut listed = Vec::new();
    for version in ["0.1.0", "0.2.0", "1.0.0"] {
        publish_http(&repo, version, &mut listed);
    }
    // Masterminds' spelling, as Flux and helm take it: comparators apart, a space between.
    env.create_release(
        "ranged",
        json!({
            "releaseName": "ranged",
            "driftCheckInterval": "1s",
            "chart": {"repository": repo.url, "chart": "demo", "version": ">=0.1 <1"},
        }),
    )
    .await;
    let r = wait_for(&api, "ranged", "0.2.0 installed", |r| {
        at_version(r, "0.2.0")
    })
    .await;
    assert_eq!(revision(&r), Some(1));
    assert_eq!(env.greeting("ranged").await.as_deref(), Some("v0.2.0"));

    // A new version inside the range is upgraded to at the next drift check; one outside is not.
    publish_http(&repo, "0.3.0", &mut listed);
    publish_http(&repo, "1.1.0", &mut listed);
    let r = wait_for(&api, "ranged", "0.3.0 upgraded to", |r| {
        at_version(r, "0.3.0")
    })
    .await;
    assert_eq!(revision(&r), Some(2));
    assert_eq!(env.greeting("ranged").await.as_deref(), Some("v0.3.0"));
    // An unchanged index changes nothing: drift checks come and go without a new revision.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let r = api.get("ranged").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(revision(&r), Some(2), "no upgrade without a new version");
    assert_eq!(env.helm_revisions("ranged").await, vec![1, 2]);

    // OCI: the tags are the versions; `repository` may be left out of an oci:// chart.
    let registry = ChartServer::start(Serve::default()).await;
    let mut tags = Vec::new();
    for version in ["0.1.0", "0.2.0", "1.0.0"] {
        publish_oci(&registry, version, &mut tags);
    }
    env.create_release(
        "ranged-oci",
        json!({
            "releaseName": "ranged-oci",
            "driftCheckInterval": "1s",
            "chart": {"chart": format!("oci://{}/charts/demo", registry.addr),
                      "version": "0.x", "insecure": true},
        }),
    )
    .await;
    let r = wait_for(&api, "ranged-oci", "0.2.0 pulled", |r| {
        at_version(r, "0.2.0")
    })
    .await;
    assert_eq!(revision(&r), Some(1));
    publish_oci(&registry, "0.4.0", &mut tags);
    let r = wait_for(&api, "ranged-oci", "0.4.0 upgraded to", |r| {
        at_version(r, "0.4.0")
    })
    .await;
    assert_eq!(revision(&r), Some(2));
    assert_eq!(env.greeting("ranged-oci").await.as_deref(), Some("v0.4.0"));
    env.shutdown().await;
}
