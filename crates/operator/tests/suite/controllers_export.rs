//! OmniKubeconfigExport system tests with an injectable clock: rotation happens exactly at
//! expiry − renewBefore (boundary included) and not a second earlier, and a target Secret the
//! export does not own is left byte-for-byte untouched until it is explicitly adopted.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use omni_operator::api::{OmniCluster, OmniKubeconfigExport};
use omni_operator::controllers::Clock;
use omni_sim::RunningOmniSim;
use serde_json::{Value, json};
use support::env::{Env, EnvBuilder, NS, SAMPLE_CLUSTER};
use support::{condition, ready, sample, secret_text, status_time, wait_for, writes_to};
use tokio::time::Instant;

/// gRPC status code 14 (Unavailable); the operator crate does not depend on tonic directly.
const UNAVAILABLE: i32 = 14;
const WAIT: Duration = Duration::from_secs(120);

/// kube-sim, omni-sim and the operator with a test clock; the sample cluster Ready.
/// Minted kubeconfigs point at an address that resolves nowhere.
async fn start() -> Env {
    with_samples(Env::builder().without_connection().test_clock()).await
}

/// Like [`start`], with minted kubeconfigs pointing at a workload kube-sim that accepts only
/// the tokens omni-sim mints for the sample cluster.
async fn with_workload() -> Env {
    let builder = Env::builder()
        .without_connection()
        .test_clock()
        .with_workload_accepting_tokens_of("edge-sample");
    with_samples(builder).await
}

async fn with_samples(builder: EnvBuilder) -> Env {
    let env = builder.start().await;
    env.apply_samples(SAMPLE_CLUSTER, |_| {}).await;
    env.wait::<OmniCluster>("edge-sample", "Ready", ready).await;
    env
}

impl Env {
    async fn export(&self, name: &str, target: &str) {
        self.create::<OmniKubeconfigExport>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniKubeconfigExport",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterRef": {"name": "edge-sample"},
                "targetSecretRef": {"name": target},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "1h",
                "renewBefore": "10m",
                "deletionPolicy": "Delete",
            },
        }))
        .await;
    }

    /// Touches the export so the controller reconciles it now, and waits until it has.
    async fn poke(&self, name: &str, n: u32) {
        let before = self.reconciles("OmniKubeconfigExport");
        self.api::<OmniKubeconfigExport>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": n.to_string()}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("poke: {e}"));
        let until = Instant::now() + WAIT;
        while self.reconciles("OmniKubeconfigExport") <= before {
            assert!(Instant::now() < until, "the poke never caused a reconcile");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_happens_exactly_at_expiry_minus_renew_before() {
    let env = start().await;
    let t0 = env.clock().now();
    env.export("rot", "rot-kubeconfig").await;
    let exports = env.api::<OmniKubeconfigExport>();
    let first = wait_for(&exports, "rot", "Ready", ready).await;
    let next = t0 + jiff::SignedDuration::from_secs(50 * 60);
    assert_eq!(status_time(&first, "lastRotationTime"), Some(t0));
    assert_eq!(status_time(&first, "nextRotationTime"), Some(next));
    assert_eq!(
        status_time(&first, "expirationTime"),
        Some(t0 + jiff::SignedDuration::from_secs(3600))
    );
    let secrets = env.api::<Secret>();
    let before = secrets
        .get("rot-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // One second early: nothing is minted or written.
    env.clock().set(next - jiff::SignedDuration::from_secs(1));
    env.poke("rot", 1).await;
    env.poke("rot", 2).await;
    let unchanged = secrets
        .get("rot-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(unchanged.resource_version(), before.resource_version());
    let e = exports.get("rot").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status_time(&e, "lastRotationTime"), Some(t0));
    assert_eq!(
        env.rotated_events("rot").await,
        0,
        "an Event announced a rotation too early"
    );

    // The target Secret carries exactly the original's labels and annotations
    // (docs/parity.md#the-exported-secret).
    let uid = first.uid().unwrap_or_default();
    let labels = before.labels();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("omni-cluster-operator")
    );
    assert_eq!(
        labels.get("omni.texashpc.com/kubeconfig-export-uid"),
        Some(&uid)
    );
    assert_eq!(
        labels.get("omni.texashpc.com/cluster").map(String::as_str),
        Some("edge-sample")
    );
    let ann = before.annotations();
    assert_eq!(
        ann.get("omni.texashpc.com/kubeconfig-export-name")
            .map(String::as_str),
        Some("rot")
    );
    assert_eq!(
        ann.get("omni.texashpc.com/kubeconfig-export-namespace")
            .map(String::as_str),
        Some(NS)
    );
    let stored = before
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    assert!(!stored.is_empty(), "no kubeconfig under the default key");
    assert_eq!(
        ann.get("omni.texashpc.com/kubeconfig-hash"),
        Some(&hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            &stored
        )))
    );
    assert_eq!(
        ann.get("omni.texashpc.com/kubeconfig-expiration-time")
            .map(String::as_str),
        Some(
            (t0 + jiff::SignedDuration::from_secs(3600))
                .to_string()
                .as_str()
        )
    );
    assert_eq!(
        ann.get("omni.texashpc.com/kubeconfig-last-rotation-time")
            .map(String::as_str),
        Some(t0.to_string().as_str())
    );
    assert_eq!(
        ann.get("omni.texashpc.com/kubeconfig-export-spec-hash")
            .map(String::len),
        Some(64)
    );
    assert!(before.metadata.owner_references.is_none());
    assert_eq!(before.type_.as_deref(), Some("Opaque"));

    // Exactly at the boundary: rotated.
    env.clock().set(next);
    env.poke("rot", 3).await;
    let rotated = wait_for(&exports, "rot", "rotated at the planned time", |e| {
        status_time(e, "lastRotationTime") == Some(next)
    })
    .await;
    assert_eq!(
        status_time(&rotated, "nextRotationTime"),
        Some(next + jiff::SignedDuration::from_secs(50 * 60))
    );
    let after = secrets
        .get("rot-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(after.resource_version(), before.resource_version());
    assert_eq!(
        after
            .annotations()
            .get("omni.texashpc.com/kubeconfig-last-rotation-time")
            .map(String::as_str),
        Some(next.to_string().as_str())
    );
    let until = Instant::now() + WAIT;
    while env.rotated_events("rot").await == 0 {
        assert!(Instant::now() < until, "no Event announced the rotation");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.shutdown().await;
}

impl Env {
    /// Events with reason `KubeconfigRotated` about the export `name`.
    async fn rotated_events(&self, name: &str) -> usize {
        self.events_of(name)
            .await
            .iter()
            .filter(|(reason, _)| reason == "KubeconfigRotated")
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_target_secret_is_untouched_until_adopted() {
    let env = start().await;
    let secrets = env.api::<Secret>();
    let theirs: Secret = serde_json::from_value(json!({
        "metadata": {"name": "taken", "namespace": NS, "labels": {"team": "other"}},
        "stringData": {"kubeconfig": "somebody else's"},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let original = secrets
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    env.export("grabby", "taken").await;
    let exports = env.api::<OmniKubeconfigExport>();
    let refused = wait_for(&exports, "grabby", "refused as TargetNotOwned", |e| {
        condition(e, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "TargetNotOwned")
    })
    .await;
    let (_, _, message) = condition(&refused, "Ready").unwrap_or_default();
    assert!(
        message.contains("taken") && message.contains("omni.texashpc.com/adopt"),
        "{message}"
    );
    env.poke("grabby", 1).await;
    env.poke("grabby", 2).await;
    let now = secrets.get("taken").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_value(&now).unwrap_or_default(),
        serde_json::to_value(&original).unwrap_or_default(),
        "the unowned Secret changed"
    );

    // Adoption is explicit.
    secrets
        .patch(
            "taken",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"omni.texashpc.com/adopt": "true"}}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The controller also polls an unowned target; a touch just makes it look now.
    env.poke("grabby", 3).await;
    wait_for(&exports, "grabby", "Ready", ready).await;
    let adopted = secrets.get("taken").await.unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = adopted
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
        .unwrap_or_default();
    assert!(
        kubeconfig.contains("apiVersion: v1") || kubeconfig.contains("clusters"),
        "{kubeconfig}"
    );
    assert!(
        !adopted
            .annotations()
            .contains_key("omni.texashpc.com/adopt")
    );
    assert_eq!(
        adopted
            .annotations()
            .get("omni.texashpc.com/kubeconfig-export-name")
            .map(String::as_str),
        Some("grabby")
    );
    env.shutdown().await;
}

impl Env {
    /// An export of the sample cluster with `spec` merged over a valid default spec.
    async fn export_with(&self, name: &str, spec: Value) {
        let mut full = json!({
            "clusterRef": {"name": "edge-sample"},
            "targetSecretRef": {"name": format!("{name}-kubeconfig")},
            "serviceAccount": {"user": "automation", "groups": ["automation"]},
            "ttl": "1h",
            "renewBefore": "10m",
            "deletionPolicy": "Delete",
        });
        if let (Some(base), Some(over)) = (full.as_object_mut(), spec.as_object()) {
            for (k, v) in over {
                base.insert(k.clone(), v.clone());
            }
        }
        self.create::<OmniKubeconfigExport>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniKubeconfigExport",
            "metadata": {"name": name, "namespace": NS},
            "spec": full,
        }))
        .await;
    }

    /// Waits for `Ready=False` with `reason`; returns the export and the condition message.
    async fn wait_reason(&self, name: &str, reason: &str) -> (OmniKubeconfigExport, String) {
        let e = wait_for(
            &self.api::<OmniKubeconfigExport>(),
            name,
            "reporting the expected reason",
            |e| condition(e, "Ready").is_some_and(|(s, r, _)| s == "False" && r == reason),
        )
        .await;
        let (_, _, message) = condition(&e, "Ready").unwrap_or_default();
        (e, message)
    }
}

fn status_str(e: &OmniKubeconfigExport, field: &str) -> String {
    serde_json::to_value(e).unwrap_or_default()["status"][field]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_export_is_idle_and_every_failure_reason_is_reported() {
    let env = start().await;
    let exports = env.api::<OmniKubeconfigExport>();

    // Ready, then idle: further reconciles write nothing to either API (only the pokes).
    env.export_with("idle", json!({})).await;
    wait_for(&exports, "idle", "Ready", ready).await;
    // Settle first: the Ready write's own follow-ups, and the cluster controller of the same
    // operator recording Omni's converging status, must be over before the idle window.
    let settle = Instant::now() + WAIT;
    for round in 100.. {
        let (kube, omni) = (env.kube.writes_total(), env.omni.writes_total());
        env.poke("idle", round).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if env.kube.writes_total() == kube + 1 && env.omni.writes_total() == omni {
            break;
        }
        assert!(Instant::now() < settle, "the operator never went quiet");
    }
    // Only what an export writes (the cluster controller is not under test here).
    let export_writes = || writes_to(&env.kube, &["omnikubeconfigexports", "secrets", "events"]);
    let kube_before = export_writes();
    let omni_before = env.omni.writes_total();
    let minted_before = kubeconfig_mints(&env.omni);
    for n in 1..=3 {
        env.poke("idle", n).await;
    }
    assert_eq!(
        export_writes() - kube_before,
        3,
        "an idle export wrote to the API server beyond the three pokes"
    );
    assert_eq!(
        env.omni.writes_total(),
        omni_before,
        "an idle export wrote to Omni"
    );
    assert_eq!(
        kubeconfig_mints(&env.omni),
        minted_before,
        "an idle export minted a new kubeconfig"
    );

    // ValidationFailed: system:masters needs the explicit opt-in.
    env.export_with(
        "masters",
        json!({"serviceAccount": {"user": "root", "groups": ["system:masters"]}}),
    )
    .await;
    // The webhook's own rules (admission is bypassed here), with the field they are about.
    let (_, message) = env.wait_reason("masters", "ValidationFailed").await;
    assert_eq!(
        message,
        "spec.serviceAccount.groups[0]: Forbidden: system:masters requires serviceAccount.allowClusterAdmin: true"
    );
    assert!(
        env.api::<Secret>()
            .get_opt("masters-kubeconfig")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "a cluster-admin kubeconfig was exported without allowClusterAdmin"
    );

    // MissingCluster.
    env.export_with("lost", json!({"clusterRef": {"name": "nope"}}))
        .await;
    let (lost, message) = env.wait_reason("lost", "MissingCluster").await;
    assert_eq!(message, r#"OmniCluster "nope" does not exist"#);
    assert_eq!(
        condition(&lost, "Accepted").map(|(s, r, _)| (s, r)),
        Some(("False".into(), "MissingCluster".into()))
    );

    // MissingConnection: the cluster exists, its connection does not; the cluster is still named.
    let mut cluster = sample("02-omnicluster.yaml")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no sample cluster"));
    cluster["metadata"]["name"] = json!("stray");
    cluster["spec"]["connectionRef"]["name"] = json!("no-such-connection");
    env.create::<OmniCluster>(cluster).await;
    // Before its first kubeconfig an export waits for its cluster's Ready, which this one never
    // reaches without its connection; act as soon as it exists to see the connection missing.
    env.export_with(
        "stray",
        json!({"clusterRef": {"name": "stray"}, "startWhen": "ClusterExists"}),
    )
    .await;
    let (stray, message) = env.wait_reason("stray", "MissingConnection").await;
    assert!(
        message.starts_with(r#"failed to get OmniConnection "no-such-connection": "#),
        "{message}"
    );
    assert_eq!(status_str(&stray, "clusterName"), "stray");
    assert_eq!(
        condition(&stray, "Accepted").map(|(s, _, _)| s),
        Some("True".into())
    );

    // ExportFailed while Omni refuses to mint; recovers to Exported once it stops refusing.
    env.omni
        .inject_failure(omni_sim::methods::KUBECONFIG, UNAVAILABLE.into(), 1_000_000);
    env.export_with("refused", json!({})).await;
    let (_, message) = env.wait_reason("refused", "ExportFailed").await;
    assert!(
        message.starts_with("failed to export kubeconfig: "),
        "{message}"
    );
    env.omni
        .inject_failure(omni_sim::methods::KUBECONFIG, UNAVAILABLE.into(), 0);
    let recovered = wait_for(&exports, "refused", "Ready", ready).await;
    assert_eq!(
        condition(&recovered, "Exported").map(|(s, r, _)| (s, r)),
        Some(("True".into(), "Exported".into()))
    );

    // A rotation that Omni refuses keeps the last good state visible in status.
    let good = exports.get("idle").await.unwrap_or_else(|e| panic!("{e}"));
    let good_hash = status_str(&good, "kubeconfigHash");
    assert_eq!(good_hash.len(), 64);
    let next = status_time(&good, "nextRotationTime").unwrap_or_else(|| panic!("no next"));
    env.omni
        .inject_failure(omni_sim::methods::KUBECONFIG, UNAVAILABLE.into(), 1_000_000);
    env.clock().set(next);
    env.poke("idle", 10).await;
    let (failed, _) = env.wait_reason("idle", "ExportFailed").await;
    assert_eq!(status_str(&failed, "kubeconfigHash"), good_hash);
    assert_eq!(
        status_time(&failed, "lastRotationTime"),
        status_time(&good, "lastRotationTime")
    );
    assert_eq!(
        status_time(&failed, "expirationTime"),
        status_time(&good, "expirationTime")
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_re_exports_and_deletion_follows_the_policy() {
    let env = start().await;
    let exports = env.api::<OmniKubeconfigExport>();
    let secrets = env.api::<Secret>();
    let ann = |s: &Secret, k: &str| s.annotations().get(k).cloned().unwrap_or_default();

    env.export_with("del", json!({})).await;
    wait_for(&exports, "del", "Ready", ready).await;
    let first = secrets
        .get("del-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first_hash = ann(&first, "omni.texashpc.com/kubeconfig-export-spec-hash");

    // renewBefore is not part of the spec hash: no re-export.
    exports
        .patch(
            "del",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewBefore": "20m"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    env.poke("del", 1).await;
    env.poke("del", 2).await;
    let same = secrets
        .get("del-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(same.resource_version(), first.resource_version());

    // The user is: the kubeconfig is minted again and the Secret rewritten.
    exports
        .patch(
            "del",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"serviceAccount": {"user": "someone-else"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rewritten = wait_for(&secrets, "del-kubeconfig", "rewritten", |s| {
        ann(s, "omni.texashpc.com/kubeconfig-export-spec-hash") != first_hash
    })
    .await;
    assert_ne!(
        ann(&rewritten, "omni.texashpc.com/kubeconfig-hash"),
        ann(&first, "omni.texashpc.com/kubeconfig-hash"),
        "the spec changed but the kubeconfig was not minted again"
    );
    let e = wait_for(&exports, "del", "re-exported for the new user", |e| {
        status_str(e, "serviceAccountUser") == "someone-else" && ready(e)
    })
    .await;
    assert_eq!(
        status_str(&e, "kubeconfigHash"),
        ann(&rewritten, "omni.texashpc.com/kubeconfig-hash")
    );

    // Delete removes the Secret with the export.
    exports
        .delete("del", &Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    while exports.get_opt("del").await.ok().flatten().is_some()
        || secrets
            .get_opt("del-kubeconfig")
            .await
            .ok()
            .flatten()
            .is_some()
    {
        assert!(
            Instant::now() < until,
            "Delete policy: export or Secret still there"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Orphan keeps it, unchanged.
    env.export_with("keep", json!({"deletionPolicy": "Orphan"}))
        .await;
    wait_for(&exports, "keep", "Ready", ready).await;
    let kept = secrets
        .get("keep-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    exports
        .delete("keep", &Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    while exports.get_opt("keep").await.ok().flatten().is_some() {
        assert!(Instant::now() < until, "Orphan policy: export never went");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = secrets
        .get("keep-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("Orphan policy removed the Secret: {e}"));
    // Unchanged but for the export's hold, which an orphaned Secret must not keep: nothing
    // would ever lift it.
    assert!(after.finalizers().is_empty(), "{:?}", after.finalizers());
    assert_eq!(after.data, kept.data);
    assert_eq!(after.metadata.labels, kept.metadata.labels);
    assert_eq!(after.metadata.annotations, kept.metadata.annotations);
    env.shutdown().await;
}

/// An adopted target is anyone's Secret: its stored kubeconfig is checked before the usability
/// probe, so an `exec` plugin planted in it (with annotations that make it look reusable) never
/// runs; the export replaces it with a freshly minted kubeconfig instead (issue 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_exec_kubeconfig_is_replaced_never_run() {
    let env = start().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let marker = dir.path().join("ran");
    let planted = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: w\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\n      interactiveMode: Never\n",
        marker.display()
    );
    let export: OmniKubeconfigExport = serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniKubeconfigExport",
        "metadata": {"name": "planted", "namespace": NS},
        "spec": {
            "clusterRef": {"name": "edge-sample"},
            "targetSecretRef": {"name": "planted-kubeconfig"},
            "serviceAccount": {"user": "automation", "groups": ["automation"]},
            "ttl": "1h",
            "renewBefore": "10m",
            "deletionPolicy": "Delete",
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let cluster = env
        .api::<OmniCluster>()
        .get("edge-sample")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let spec_hash = export
        .spec_hash(&cluster.effective_cluster_name())
        .unwrap_or_else(|e| panic!("{e}"));
    let expires = env.clock().now() + jiff::SignedDuration::from_secs(3600);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": "planted-kubeconfig",
            "namespace": NS,
            "annotations": {
                "omni.texashpc.com/adopt": "true",
                "omni.texashpc.com/kubeconfig-export-spec-hash": spec_hash,
                "omni.texashpc.com/kubeconfig-hash":
                    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(planted.as_bytes())),
                "omni.texashpc.com/kubeconfig-expiration-time": expires.to_string(),
            },
        },
        "stringData": {"kubeconfig": planted},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    env.api::<OmniKubeconfigExport>()
        .create(&PostParams::default(), &export)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    loop {
        assert!(
            !marker.exists(),
            "the planted exec plugin ran in the operator"
        );
        let replaced = env
            .api::<Secret>()
            .get("planted-kubeconfig")
            .await
            .ok()
            .and_then(|s| s.data?.get("kubeconfig").cloned())
            .is_some_and(|k| k.0 != planted.as_bytes());
        if replaced {
            break;
        }
        assert!(
            Instant::now() < until,
            "the planted kubeconfig was never replaced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !marker.exists(),
        "the planted exec plugin ran in the operator"
    );
    env.shutdown().await;
}

// ---- spec.format: the Secret shapes Argo CD and Flux read ----

/// Argo CD's `ClusterConfig` as its declarative-setup documentation lists it: a `config` with
/// any field Argo CD does not know fails to decode.
#[derive(serde::Deserialize, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // Fields are read through Debug and the asserts below.
struct ArgoClusterConfig {
    username: Option<String>,
    password: Option<String>,
    bearer_token: Option<String>,
    tls_client_config: Option<ArgoTlsClientConfig>,
    aws_auth_config: Option<Value>,
    exec_provider_config: Option<Value>,
    disable_compression: Option<bool>,
    proxy_url: Option<String>,
}

/// Argo CD's `TLSClientConfig` (`[]byte` fields are base64 strings in JSON).
#[derive(serde::Deserialize, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
struct ArgoTlsClientConfig {
    insecure: bool,
    server_name: Option<String>,
    cert_data: Option<String>,
    key_data: Option<String>,
    ca_data: Option<String>,
}

fn data_keys(s: &Secret) -> Vec<String> {
    s.data.iter().flatten().map(|(k, _)| k.clone()).collect()
}

const ARGOCD_LABEL: &str = "argocd.argoproj.io/secret-type";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argocd_cluster_secret_has_the_shape_argo_cd_reads() {
    let env = with_workload().await;
    let server = env.workload().sim.base_url.clone();
    env.export_with("argo", json!({"format": "ArgoCDCluster"}))
        .await;
    let e = wait_for(&env.api::<OmniKubeconfigExport>(), "argo", "Ready", ready).await;
    let secret = env
        .api::<Secret>()
        .get("argo-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(data_keys(&secret), ["config", "name", "server"]);
    assert_eq!(
        secret.labels().get(ARGOCD_LABEL).map(String::as_str),
        Some("cluster")
    );
    assert_eq!(
        secret_text(&secret, "name"),
        "edge-sample",
        "the Omni cluster name"
    );
    assert_eq!(secret_text(&secret, "server"), server);
    let config: ArgoClusterConfig = serde_json::from_str(&secret_text(&secret, "config"))
        .unwrap_or_else(|e| panic!("config is not an Argo CD ClusterConfig: {e}"));
    assert!(config.exec_provider_config.is_none() && config.aws_auth_config.is_none());
    let tls = config
        .tls_client_config
        .as_ref()
        .unwrap_or_else(|| panic!("no tlsClientConfig: {config:?}"));
    assert!(!tls.insecure);
    let token = config
        .bearer_token
        .clone()
        .unwrap_or_else(|| panic!("no bearerToken"));

    // Argo CD connects with server + bearerToken: the workload cluster knows who that is.
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: argo\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: argo\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: {token}\n"
    );
    let (user, groups) = support::whoami(&support::client_from_kubeconfig(&kubeconfig).await)
        .await
        .unwrap_or_else(|e| panic!("whoami: {e}"));
    assert_eq!(user, "automation");
    assert!(groups.contains(&"automation".to_string()), "{groups:?}");

    assert_eq!(status_str(&e, "targetSecretKey"), "config");
    assert_eq!(
        Some(&status_str(&e, "kubeconfigHash")),
        secret
            .annotations()
            .get("omni.texashpc.com/kubeconfig-hash")
    );
    let (_, _, message) = condition(&e, "Ready").unwrap_or_default();
    assert!(message.contains("ArgoCDCluster"), "{message}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flux_value_secret_holds_a_kubeconfig_that_reaches_the_workload_cluster() {
    let env = with_workload().await;
    env.export_with("flux", json!({"format": "FluxValue"}))
        .await;
    let e = wait_for(&env.api::<OmniKubeconfigExport>(), "flux", "Ready", ready).await;
    let secret = env
        .api::<Secret>()
        .get("flux-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(data_keys(&secret), ["value"]);
    assert!(!secret.labels().contains_key(ARGOCD_LABEL));
    assert_eq!(status_str(&e, "targetSecretKey"), "value");

    // What Flux does with `spec.kubeConfig.secretRef`: a client from the `value` key.
    let client = support::client_from_kubeconfig(&secret_text(&secret, "value")).await;
    let (user, groups) = support::whoami(&client)
        .await
        .unwrap_or_else(|e| panic!("whoami: {e}"));
    assert_eq!(user, "automation");
    assert!(groups.contains(&"automation".to_string()), "{groups:?}");
    // The workload cluster does check: without the token it answers 401.
    let server = env.workload().sim.base_url.clone();
    let anonymous = kube::Client::try_from(kube::Config::new(
        server.parse().unwrap_or_else(|e| panic!("{e}")),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    match support::whoami(&anonymous).await {
        Err(kube::Error::Api(s)) if s.code == 401 => {}
        other => panic!("expected 401 without credentials, got {other:?}"),
    }
    env.shutdown().await;
}

/// Creates an export in `format`, checks that nothing is minted or written a second before
/// `expiry − renewBefore`, and that at that moment the Secret is rewritten in the same shape
/// (`keys`) with a `KubeconfigRotated` Event. Minted kubeconfigs reach a real workload
/// kube-sim, so the reuse probe works on what the shape stored.
async fn rotated_in_shape(format: &str, keys: &[&str]) {
    let env = with_workload().await;
    let t0 = env.clock().now();
    env.export_with("rot", json!({"format": format})).await;
    let exports = env.api::<OmniKubeconfigExport>();
    let first = wait_for(&exports, "rot", "Ready", ready).await;
    let next = t0 + jiff::SignedDuration::from_secs(50 * 60);
    assert_eq!(status_time(&first, "lastRotationTime"), Some(t0));
    assert_eq!(status_time(&first, "nextRotationTime"), Some(next));
    let secrets = env.api::<Secret>();
    let before = secrets
        .get("rot-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(data_keys(&before), keys);

    env.clock().set(next - jiff::SignedDuration::from_secs(1));
    env.poke("rot", 1).await;
    env.poke("rot", 2).await;
    let unchanged = secrets
        .get("rot-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        unchanged.resource_version(),
        before.resource_version(),
        "the stored {format} Secret was not reused before its rotation"
    );
    assert_eq!(env.rotated_events("rot").await, 0);

    env.clock().set(next);
    env.poke("rot", 3).await;
    let rotated = wait_for(&exports, "rot", "rotated at the planned time", |e| {
        status_time(e, "lastRotationTime") == Some(next)
    })
    .await;
    assert_eq!(
        status_time(&rotated, "nextRotationTime"),
        Some(next + jiff::SignedDuration::from_secs(50 * 60))
    );
    let after = secrets
        .get("rot-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(after.resource_version(), before.resource_version());
    assert_eq!(data_keys(&after), keys);
    assert_eq!(
        after
            .annotations()
            .get("omni.texashpc.com/kubeconfig-last-rotation-time")
            .map(String::as_str),
        Some(next.to_string().as_str())
    );
    assert_eq!(
        Some(&status_str(&rotated, "kubeconfigHash")),
        after.annotations().get("omni.texashpc.com/kubeconfig-hash")
    );
    let until = Instant::now() + WAIT;
    while env.rotated_events("rot").await == 0 {
        assert!(Instant::now() < until, "no Event announced the rotation");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argocd_cluster_secret_is_rotated_in_its_shape() {
    rotated_in_shape("ArgoCDCluster", &["config", "name", "server"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flux_value_secret_is_rotated_in_its_shape() {
    rotated_in_shape("FluxValue", &["value"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_change_rewrites_the_secret_in_the_new_shape() {
    let env = start().await;
    let exports = env.api::<OmniKubeconfigExport>();
    let secrets = env.api::<Secret>();
    env.export_with("shape", json!({})).await;
    wait_for(&exports, "shape", "Ready", ready).await;
    // A key of someone else's survives every change of shape.
    secrets
        .patch(
            "shape-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"notes": "kept"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    for (format, keys, argocd) in [
        (
            json!("ArgoCDCluster"),
            vec!["config", "name", "notes", "server"],
            true,
        ),
        (json!("FluxValue"), vec!["notes", "value"], false),
        // Removing the field is the default shape again.
        (Value::Null, vec!["kubeconfig", "notes"], false),
    ] {
        exports
            .patch(
                "shape",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"format": format}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let secret = wait_for(&secrets, "shape-kubeconfig", "in the new shape", |s| {
            data_keys(s) == keys
        })
        .await;
        assert_eq!(
            secret.labels().contains_key(ARGOCD_LABEL),
            argocd,
            "{format}: {:?}",
            secret.labels()
        );
        assert_eq!(secret_text(&secret, "notes"), "kept");
        let e = wait_for(&exports, "shape", "Ready for the new shape", |e| {
            ready(e)
                && e.status.as_ref().and_then(|s| s.observed_generation) == e.metadata.generation
        })
        .await;
        assert_eq!(
            Some(&status_str(&e, "kubeconfigHash")),
            secret
                .annotations()
                .get("omni.texashpc.com/kubeconfig-hash"),
            "{format}"
        );
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_an_unknown_format_naming_the_field() {
    let (_kube, client) = support::kube_sim().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in omni_operator::api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("CRD: {e}"));
    }
    let exports: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &kube::discovery::ApiResource::erase::<OmniKubeconfigExport>(&()),
    );
    let export: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniKubeconfigExport",
        "metadata": {"name": "typo", "namespace": "default"},
        "spec": {
            "clusterRef": {"name": "edge"},
            "targetSecretRef": {"name": "edge-kc"},
            "serviceAccount": {"user": "u", "groups": ["g"]},
            "ttl": "1h",
            "deletionPolicy": "Delete",
            "format": "argocd",
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + WAIT;
    let refusal = loop {
        match exports.create(&PostParams::default(), &export).await {
            Err(kube::Error::Api(s)) if s.code == 404 && Instant::now() < until => {
                // The CRD is not served yet.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(kube::Error::Api(s)) => break s,
            other => panic!("an unknown format was stored: {other:?}"),
        }
    };
    assert_eq!(refusal.code, 422);
    assert!(
        refusal.message.contains("spec.format") && refusal.message.contains("ArgoCDCluster"),
        "{}",
        refusal.message
    );
}

/// How many kubeconfigs omni-sim has been asked to mint.
fn kubeconfig_mints(sim: &RunningOmniSim) -> u64 {
    sim.call_counts()
        .iter()
        .filter(|((m, _), _)| m == omni_sim::methods::KUBECONFIG)
        .map(|(_, n)| *n)
        .sum()
}

/// A GitOps prune deletes an export and its Secret together, and the Secret's deletion can
/// reach the export's controller before the export's own deletion does (the two come on
/// different watches). The pass that finds the Secret gone must not mint a credential and write
/// it back for an export that is already being deleted: with `Orphan`, that Secret would
/// outlive both. Failed before the export re-read itself ahead of minting: one more mint, and
/// the Secret written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_pruned_with_its_secret_mints_no_new_one() {
    let env = start().await;
    env.export_with("pruned", json!({"deletionPolicy": "Orphan"}))
        .await;
    env.wait::<OmniKubeconfigExport>("pruned", "Ready", ready)
        .await;
    let mints = kubeconfig_mints(&env.omni);

    // The exports' watch lags: it is cut, and its next request waits five seconds.
    let hooks = env.kube.hooks();
    for verb in ["watch", "list"] {
        hooks.add_latency(
            Some(verb),
            Some("omnikubeconfigexports"),
            Duration::from_secs(5),
            Some(1),
        );
    }
    hooks.cut_watches(Some("omnikubeconfigexports"));
    env.delete::<OmniKubeconfigExport>("pruned").await;
    env.delete::<Secret>("pruned-kubeconfig").await;

    env.wait_gone::<OmniKubeconfigExport>("pruned").await;
    assert_eq!(
        kubeconfig_mints(&env.omni),
        mints,
        "a kubeconfig was minted for an export being deleted"
    );
    assert!(
        env.api::<Secret>()
            .get_opt("pruned-kubeconfig")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "the pruned Secret was written again"
    );
    env.shutdown().await;
}
