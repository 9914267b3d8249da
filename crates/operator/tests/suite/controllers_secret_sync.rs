//! OmniSecretSync system tests: the operator (in-process) against a management kube-sim and a
//! workload kube-sim reached through a kubeconfig Secret. Data is copied (never the source's
//! metadata) with ownership metadata on the copy; source changes and drift in the workload
//! cluster are corrected; an unowned target is left byte-for-byte untouched; Delete removes
//! the copy and Orphan keeps it; no synced value appears in status or Events.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use omni_operator::api::{OmniCluster, OmniSecretSync};
use serde_json::{Value, json};
use support::env::{Env, EnvBuilder, NS};
use support::{condition, ready, wait_for};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(120);
const SECRET_VALUE: &str = "registry-password-do-not-leak";

fn secret(name: &str, ns: &str, extra: Value) -> Secret {
    let mut v = json!({"metadata": {"name": name, "namespace": ns}});
    if let (Some(t), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in e {
            if k == "metadata" {
                if let Some(m) = val.as_object() {
                    for (mk, mv) in m {
                        t["metadata"][mk] = mv.clone();
                    }
                }
            } else {
                t.insert(k.clone(), val.clone());
            }
        }
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

/// The bearer token of the workload kubeconfig.
const WORKLOAD_TOKEN: &str = "workload-token";

/// The management cluster, a workload cluster that accepts only [`WORKLOAD_TOKEN`], the
/// kubeconfig Secret `workload-kubeconfig`, the source Secret `registry` (with metadata the
/// copy must not get) and the OmniCluster `workload` (whose connection does not exist).
async fn start() -> Env {
    with_fixtures(Env::builder()).await
}

/// With `resync`, only the OmniSecretSync controller runs, re-checking at that interval.
async fn with_fixtures(builder: EnvBuilder) -> Env {
    let env = builder
        .without_connection()
        .with_workload_token(WORKLOAD_TOKEN)
        .start()
        .await;
    let secrets = env.api::<Secret>();
    for s in [
        secret(
            "workload-kubeconfig",
            NS,
            json!({"stringData": {"kubeconfig": env.workload_kubeconfig(WORKLOAD_TOKEN)}}),
        ),
        secret(
            "registry",
            NS,
            json!({"metadata": {"labels": {"source-only": "yes"}, "annotations": {"source-note": "x"}},
                   "stringData": {"password": SECRET_VALUE}}),
        ),
    ] {
        secrets
            .create(&PostParams::default(), &s)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let _: OmniCluster = env
        .create_spec(
            "workload",
            json!({"connectionRef": {"name": "omni"}, "talos": {"version": "v1.11.5"},
                   "kubernetes": {"version": "v1.34.2"}}),
        )
        .await;
    env
}

impl Env {
    async fn sync(&self, name: &str, target: &str, extra: Value) {
        let mut v = json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniSecretSync",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterRef": {"name": "workload"},
                // The stand-in OmniCluster is never synced to Omni: act as soon as it exists.
                "startWhen": "ClusterExists",
                "kubeconfigSecretRef": {"name": "workload-kubeconfig", "key": "kubeconfig"},
                "sourceSecretRef": {"name": "registry"},
                "targetSecretRef": {"name": target, "namespace": "apps"},
                "createNamespace": true,
                "deletionPolicy": "Delete",
            },
        });
        if let Some(e) = extra.as_object() {
            for (k, val) in e {
                v["spec"][k] = val.clone();
            }
        }
        let typed: OmniSecretSync = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
        self.syncs()
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn syncs(&self) -> Api<OmniSecretSync> {
        self.api()
    }

    fn targets(&self) -> Api<Secret> {
        Api::namespaced(self.workload().client.clone(), "apps")
    }

    async fn touch(&self, name: &str, n: u32) {
        self.syncs()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"test/touch": n.to_string()}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn data(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_copied_kept_in_sync_and_deleted_by_policy() {
    let env = start().await;
    env.sync(
        "copy",
        "registry-copy",
        json!({"type": "Opaque", "labels": {"team": "platform"}}),
    )
    .await;
    let synced = wait_for(&env.syncs(), "copy", "Synced", |s| {
        condition(s, "Ready").is_some_and(|(st, r, _)| st == "True" && r == "Synced")
    })
    .await;
    let target = env
        .targets()
        .get("registry-copy")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(data(&target, "password").as_deref(), Some(SECRET_VALUE));
    assert_eq!(target.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        target.labels().get("team").map(String::as_str),
        Some("platform")
    );
    assert!(
        !target.labels().contains_key("source-only"),
        "source metadata was copied"
    );
    assert!(
        !target.annotations().contains_key("source-note"),
        "source metadata was copied"
    );

    // A source change is copied.
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .patch(
            "registry",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "rotated-value"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(
        &env.targets(),
        "registry-copy",
        "updated from the source",
        |s| data(s, "password").as_deref() == Some("rotated-value"),
    )
    .await;

    // Drift in the workload cluster is corrected at the next check.
    env.targets()
        .patch(
            "registry-copy",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "tampered"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    env.touch("copy", 1).await;
    wait_for(&env.targets(), "registry-copy", "repaired", |s| {
        data(s, "password").as_deref() == Some("rotated-value")
    })
    .await;

    // No synced value in status or Events.
    let status = serde_json::to_string(&synced.status).unwrap_or_default();
    assert!(!status.contains(SECRET_VALUE) && !status.contains("rotated-value"));
    let events: Api<K8sEvent> = Api::namespaced(env.client.clone(), NS);
    let all = serde_json::to_string(
        &events
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items,
    )
    .unwrap_or_default();
    assert!(
        !all.contains(SECRET_VALUE) && !all.contains("rotated-value"),
        "{all}"
    );

    // Orphan keeps the copy; Delete (the default) removes it.
    env.sync("kept", "registry-kept", json!({"deletionPolicy": "Orphan"}))
        .await;
    wait_for(&env.targets(), "registry-kept", "created", |_| true).await;
    env.syncs()
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    env.syncs()
        .delete("copy", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    while env
        .targets()
        .get_opt("registry-copy")
        .await
        .ok()
        .flatten()
        .is_some()
        || env.syncs().get_opt("kept").await.ok().flatten().is_some()
    {
        assert!(Instant::now() < until, "deletion never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        env.targets()
            .get_opt("registry-kept")
            .await
            .ok()
            .flatten()
            .is_some(),
        "Orphan removed the copy"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_target_is_left_untouched_with_a_condition() {
    let env = start().await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "apps"}}))
        .unwrap_or_else(|e| panic!("{e}"));
    Api::<Namespace>::all(env.workload().client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let original = env
        .targets()
        .create(
            &PostParams::default(),
            &secret(
                "theirs",
                "apps",
                json!({"stringData": {"password": "theirs"}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    env.sync("grabby", "theirs", json!({})).await;
    let refused = wait_for(&env.syncs(), "grabby", "refused", |s| {
        condition(s, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "TargetNotOwned")
    })
    .await;
    let (_, _, message) = condition(&refused, "Ready").unwrap_or_default();
    assert!(message.contains("theirs"), "{message}");
    env.touch("grabby", 1).await;
    env.touch("grabby", 2).await;
    // Give the touches time to be reconciled; the object must still be byte-for-byte the same.
    wait_for(&env.syncs(), "grabby", "still refused", |s| {
        condition(s, "Ready").is_some_and(|(_, r, _)| r == "TargetNotOwned")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = env
        .targets()
        .get("theirs")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_value(&now).unwrap_or_default(),
        serde_json::to_value(&original).unwrap_or_default()
    );
    // Deleting the sync leaves the unowned Secret alone too.
    env.syncs()
        .delete("grabby", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    while env.syncs().get_opt("grabby").await.ok().flatten().is_some() {
        assert!(Instant::now() < until, "deletion never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        env.targets()
            .get_opt("theirs")
            .await
            .ok()
            .flatten()
            .is_some()
    );
    env.shutdown().await;
}

impl Env {
    /// Touches the sync and waits until the controller has reconciled since.
    async fn poke_sync(&self, name: &str, n: u32) {
        let before = self.reconciles("OmniSecretSync");
        self.touch(name, n).await;
        let until = Instant::now() + WAIT;
        while self.reconciles("OmniSecretSync") <= before {
            assert!(Instant::now() < until, "the touch never caused a reconcile");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for `Ready=False` with `reason` and returns the condition message.
    async fn wait_sync_reason(&self, name: &str, reason: &str) -> String {
        let s = wait_for(&self.syncs(), name, reason, |s| {
            condition(s, "Ready").is_some_and(|(st, r, _)| st == "False" && r == reason)
        })
        .await;
        let (_, _, message) = condition(&s, "Ready").unwrap_or_default();
        assert!(!message.contains(SECRET_VALUE), "{message}");
        assert!(!message.contains("workload-token"), "{message}");
        message
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_secret_is_idle_and_every_failure_reason_is_reported() {
    let env = start().await;

    // Ready, then idle: reconciles write nothing to the workload cluster and only the touches
    // reach the management API server.
    env.sync("idle", "idle-copy", json!({})).await;
    wait_for(&env.syncs(), "idle", "Ready", |s| {
        condition(s, "Ready").is_some_and(|(st, _, _)| st == "True")
    })
    .await;
    // Let the other controllers settle first: the parent OmniCluster has no connection here,
    // so it reports MissingConnection once (status and Event), then waits for its interval.
    wait_for(
        &Api::<OmniCluster>::namespaced(env.client.clone(), NS),
        "workload",
        "MissingConnection",
        |c| condition(c, "Ready").is_some_and(|(_, r, _)| r == "MissingConnection"),
    )
    .await;
    let settle = Instant::now() + WAIT;
    for round in 100.. {
        let w = env.kube.writes_total();
        env.poke_sync("idle", round).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if env.kube.writes_total() == w + 1 {
            break;
        }
        assert!(
            Instant::now() < settle,
            "the management API server never went quiet"
        );
    }
    let mgmt_before = env.kube.writes_total();
    let workload_before = env.workload().sim.writes_total();
    for n in 1..=3 {
        env.poke_sync("idle", n).await;
    }
    assert_eq!(
        env.workload().sim.writes_total(),
        workload_before,
        "an idle sync wrote to the workload cluster"
    );
    assert_eq!(
        env.kube.writes_total() - mgmt_before,
        3,
        "an idle sync wrote to the management API server beyond the three touches"
    );

    // MissingCluster.
    env.sync("lost", "lost-copy", json!({"clusterRef": {"name": "nope"}}))
        .await;
    assert_eq!(
        env.wait_sync_reason("lost", "MissingCluster").await,
        r#"OmniCluster "nope" does not exist"#
    );

    // MissingSecret: the source, then a kubeconfig key that is not there.
    env.sync(
        "nosource",
        "nosource-copy",
        json!({"sourceSecretRef": {"name": "absent"}}),
    )
    .await;
    assert_eq!(
        env.wait_sync_reason("nosource", "MissingSecret").await,
        format!(r#"source Secret "{NS}/absent" does not exist"#)
    );
    env.sync(
        "nokey",
        "nokey-copy",
        json!({"kubeconfigSecretRef": {"name": "workload-kubeconfig", "key": "wrong"}}),
    )
    .await;
    assert_eq!(
        env.wait_sync_reason("nokey", "MissingSecret").await,
        format!(r#"kubeconfig Secret "{NS}/workload-kubeconfig" does not contain key "wrong""#)
    );

    // ValidationFailed: the kubeconfig cannot be parsed.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let broken_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
    };
    let unreachable = Kubeconfig::new(
        format!("http://127.0.0.1:{broken_port}"),
        "automation",
        Credential::Token(WORKLOAD_TOKEN.into()),
    );
    for s in [
        secret(
            "garbage-kubeconfig",
            NS,
            json!({"stringData": {"kubeconfig": "clusters: [unterminated"}}),
        ),
        secret(
            "unreachable-kubeconfig",
            NS,
            json!({"stringData": {"kubeconfig": unreachable.to_yaml().unwrap_or_default()}}),
        ),
    ] {
        secrets
            .create(&PostParams::default(), &s)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    env.sync(
        "garbage",
        "garbage-copy",
        json!({"kubeconfigSecretRef": {"name": "garbage-kubeconfig", "key": "kubeconfig"}}),
    )
    .await;
    let message = env.wait_sync_reason("garbage", "ValidationFailed").await;
    assert!(
        message.starts_with(&format!(
            r#"kubeconfig Secret "{NS}/garbage-kubeconfig" key "kubeconfig" is invalid: "#
        )),
        "{message}"
    );

    // SyncFailed: the workload API server cannot be reached; the error names the target.
    env.sync(
        "offline",
        "offline-copy",
        json!({"kubeconfigSecretRef": {"name": "unreachable-kubeconfig", "key": "kubeconfig"}}),
    )
    .await;
    let message = env.wait_sync_reason("offline", "SyncFailed").await;
    assert!(message.contains("apps"), "{message}");
    let offline = env
        .syncs()
        .get("offline")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let last_error = serde_json::to_value(&offline).unwrap_or_default()["status"]["lastError"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(last_error, message);

    // DeleteFailed: under Delete the copy cannot be removed while the workload cluster is out of
    // reach, so the sync stays (finalizer held); Orphan is the way out.
    env.syncs()
        .delete("offline", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let message = env.wait_sync_reason("offline", "DeleteFailed").await;
    assert!(message.contains("offline-copy"), "{message}");
    env.syncs()
        .patch(
            "offline",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionPolicy": "Orphan"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    while env
        .syncs()
        .get_opt("offline")
        .await
        .ok()
        .flatten()
        .is_some()
    {
        assert!(Instant::now() < until, "Orphan did not release the sync");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_change_re_syncs_and_repairs_drift() {
    let env = start().await;
    env.sync("kc", "kc-copy", json!({})).await;
    wait_for(&env.syncs(), "kc", "Synced", |s| {
        condition(s, "Ready").is_some_and(|(st, _, _)| st == "True")
    })
    .await;
    // One more reconcile, which writes nothing, so no reconcile is still pending below.
    env.poke_sync("kc", 1).await;
    // Drift nobody announces to the operator...
    env.targets()
        .patch(
            "kc-copy",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "tampered"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // ...is repaired as soon as the kubeconfig Secret changes (e.g. a rotated credential).
    let kubeconfigs: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let current = kubeconfigs
        .get("workload-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let yaml = data(&current, "kubeconfig").unwrap_or_default();
    kubeconfigs
        .patch(
            "workload-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"kubeconfig": format!("{yaml}\n# rotated\n")}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(&env.targets(), "kc-copy", "repaired", |s| {
        data(s, "password").as_deref() == Some(SECRET_VALUE)
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_repaired_by_the_periodic_re_check_alone() {
    // The fixtures' cluster names no connection; its status moving wakes no sync (they read
    // only its name), so nothing but the timer wakes this one.
    let env = with_fixtures(Env::builder().secret_sync_resync(Duration::from_secs(1))).await;
    env.sync("periodic", "periodic-copy", json!({})).await;
    wait_for(&env.syncs(), "periodic", "Synced", |s| {
        condition(s, "Ready").is_some_and(|(st, _, _)| st == "True")
    })
    .await;
    // One more reconcile, which writes nothing, so none is pending when the drift happens.
    env.poke_sync("periodic", 1).await;
    // Nothing in the management cluster changes: only the timer can notice this.
    env.targets()
        .patch(
            "periodic-copy",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "tampered"}, "metadata": {"labels": {"intruder": "yes"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let repaired = wait_for(&env.targets(), "periodic-copy", "repaired", |s| {
        data(s, "password").as_deref() == Some(SECRET_VALUE)
    })
    .await;
    // Labels others add (a policy engine, say) are documented to survive the repair.
    assert_eq!(
        repaired.labels().get("intruder").map(String::as_str),
        Some("yes")
    );
    env.shutdown().await;
}

/// New syncs get their finalizer and their status in one pass each. Before, the pass after the
/// finalizer was added started from a watch cache that had not seen it yet, tried to add it
/// again, was refused with `409 Conflict` and waited out a 5 s error backoff (in the bench's
/// cold start, 95 of 143 objects did). This test failed before the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_syncs_get_their_finalizer_and_status_without_a_conflict() {
    let env = start().await;
    let names: Vec<String> = (0..10).map(|i| format!("batch-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        env.sync(name, &format!("batch-target-{i}"), json!({}))
            .await;
    }
    for name in &names {
        wait_for(&env.syncs(), name, "Ready", ready).await;
    }
    let text = env.metrics.encode().unwrap_or_default();
    let errors = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"omni_operator_reconcile_errors_total{kind="OmniSecretSync"} "#)
        })
        .unwrap_or("0");
    assert_eq!(errors.trim(), "0", "no failed pass: {text}");
    // The test's own creates are the other writes.
    let patches: Vec<_> = env
        .kube
        .hooks()
        .counts()
        .into_iter()
        .filter(|(k, _)| k.resource == "omnisecretsyncs" && k.is_write() && k.verb != "create")
        .collect();
    let total: u64 = patches.iter().map(|(_, n)| n).sum();
    assert_eq!(
        total,
        2 * names.len() as u64,
        "one finalizer and one status write per sync: {patches:?}"
    );
    env.shutdown().await;
}
