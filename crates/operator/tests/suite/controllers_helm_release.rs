//! OmniHelmRelease end to end: the operator embedded in-process against kube-sim (management
//! cluster), a second kube-sim as the workload cluster, the real helm binary
//! (`.cache/test-tools/bin/helm`, from `scripts/install-test-tools`; the test fails when it is
//! missing) and a chart repository served by the test with basic auth (`index.yaml` plus `.tgz`
//! files made by `helm package`).
//!
//! Covers: install → Ready/deployed/revision 1; a values change → revision 2; a kubeconfig
//! rotation alone → still revision 2; a failing upgrade with `atomic` → rolled back and a Warning
//! Event; deletion with Uninstall (release gone) and Orphan (release kept); wrong repository
//! credentials → a condition naming the problem without the password; an HTTPS repository
//! behind a private CA fails until the credentials Secret carries the CA; a deletion whose
//! kubeconfig Secret is gone explains itself and Orphan finishes it; a release stuck in
//! `pending-upgrade` is reported, then recovered once `recoverStuckRelease` allows it; a release
//! deleted out of band is reinstalled by the periodic drift check. No repository password or
//! kubeconfig token ever shows up in status, Events or the operator's logs.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::RunningKubeSim;
use omni_operator::api::{OmniCluster, OmniHelmRelease};
use serde_json::{Value, json};
use support::chart_repo::{Repo, run_helm, start_repo, write_chart};
use support::env::{Env, NS};
use support::{condition, helm_bin, operator_logs, wait_for, wait_gone};
use tokio::time::Instant;

const USER: &str = "chart-reader";
const PASSWORD: &str = "s3cret-repo-password";
const WRONG_PASSWORD: &str = "not-the-password-xyz";
/// Bearer tokens of the workload kubeconfig before and after a rotation.
const TOKEN_ONE: &str = "kubeconfig-token-one-5d1c9e";
const TOKEN_TWO: &str = "kubeconfig-token-two-88ab04";
const SECRETS: [&str; 4] = [PASSWORD, WRONG_PASSWORD, TOKEN_ONE, TOKEN_TWO];
/// Generous: the machine is shared and loaded, and helm is a subprocess.
pub(crate) const WAIT: Duration = Duration::from_secs(300);

fn assert_no_secrets(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} contains a secret: {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Environment.

/// The shared environment without an OmniConnection (a release needs only its OmniCluster to
/// exist, which is never Ready here), with a workload cluster, the chart repository over HTTP
/// and over HTTPS behind a private CA, and the Secrets the releases use.
pub(crate) struct Helm {
    pub(crate) env: Env,
    pub(crate) repo: Repo,
    /// The same repository over HTTPS, its certificate issued by a private CA.
    tls_repo: Repo,
    _helm_dir: tempfile::TempDir,
}

impl std::ops::Deref for Helm {
    type Target = Env;

    fn deref(&self) -> &Env {
        &self.env
    }
}

fn workload_kubeconfig(sim: &RunningKubeSim, token: &str) -> String {
    Kubeconfig::new(
        sim.base_url.clone(),
        "admin",
        Credential::Token(token.into()),
    )
    .to_yaml()
    .unwrap_or_else(|e| panic!("kubeconfig: {e}"))
}

impl Helm {
    pub(crate) async fn start() -> Helm {
        Helm::start_with(Env::builder().without_connection()).await
    }

    /// [`Helm::start`] from `builder` (e.g. with the OmniConnection, for clusters that Omni
    /// runs).
    pub(crate) async fn start_with(builder: support::env::EnvBuilder) -> Helm {
        // The capturing subscriber is installed before the operator logs anything.
        operator_logs();
        let helm_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let env = builder
            .with_workload()
            .helm(helm_bin(), helm_dir.path().to_path_buf())
            .start()
            .await;
        let repo = start_repo(USER, PASSWORD, None).await;
        let ca = kube_sim::tls::CertificateAuthority::generate("private chart repository CA")
            .unwrap_or_else(|e| panic!("{e}"));
        let serving = ca
            .issue_server(&["127.0.0.1", "localhost"])
            .unwrap_or_else(|e| panic!("{e}"));
        let tls_repo = start_repo(
            USER,
            PASSWORD,
            Some(ca.server_config(&serving).unwrap_or_else(|e| panic!("{e}"))),
        )
        .await;
        for (name, data) in [
            (
                "workload-kubeconfig",
                json!({"kubeconfig": workload_kubeconfig(&env.workload().sim, TOKEN_ONE)}),
            ),
            (
                "repo-credentials",
                json!({"username": USER, "password": PASSWORD}),
            ),
            (
                "repo-credentials-with-ca",
                json!({"username": USER, "password": PASSWORD, "ca.crt": ca.cert_pem()}),
            ),
            (
                "wrong-credentials",
                json!({"username": USER, "password": WRONG_PASSWORD}),
            ),
        ] {
            env.create_secret(name, data).await;
        }
        let _: OmniCluster = env
            .create_spec(
                "workload",
                json!({
                    "connectionRef": {"name": "omni"},
                    "talos": {"version": "v1.11.5"},
                    "kubernetes": {"version": "v1.34.2"},
                }),
            )
            .await;
        Helm {
            env,
            repo,
            tls_repo,
            _helm_dir: helm_dir,
        }
    }

    pub(crate) async fn shutdown(self) {
        self.env.shutdown().await;
    }

    pub(crate) fn releases(&self) -> Api<OmniHelmRelease> {
        self.env.api()
    }

    pub(crate) async fn create_release(&self, name: &str, extra: Value) {
        let mut obj = json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniHelmRelease",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterRef": {"name": "workload"},
                // The stand-in OmniCluster is never synced to Omni: act as soon as it exists.
                "startWhen": "ClusterExists",
                "kubeconfigSecretRef": {"name": "workload-kubeconfig"},
                "namespace": "default",
                "chart": {
                    "repository": self.repo.url,
                    "chart": "demo",
                    "version": "0.1.0",
                    "values": {"greeting": "hello"},
                    "credentialsSecretRef": {"name": "repo-credentials"},
                    // The test repository is plain HTTP: credentials go there only on request.
                    "insecure": true,
                },
            }
        });
        merge(&mut obj["spec"], extra);
        let typed: OmniHelmRelease =
            serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
        self.releases()
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }

    pub(crate) async fn patch_spec(&self, name: &str, spec: Value) {
        let _: OmniHelmRelease = self.env.patch_spec(name, spec).await;
    }

    /// Revisions Helm stored for `release` in the workload cluster (its release Secrets).
    pub(crate) async fn helm_revisions(&self, release: &str) -> Vec<i64> {
        let secrets: Api<Secret> = Api::namespaced(self.workload().client.clone(), "default");
        let lp = ListParams::default().labels(&format!("owner=helm,name={release}"));
        let mut revisions: Vec<i64> = secrets
            .list(&lp)
            .await
            .unwrap_or_else(|e| panic!("list release Secrets: {e}"))
            .items
            .iter()
            .filter_map(|s| s.labels().get("version")?.parse().ok())
            .collect();
        revisions.sort_unstable();
        revisions
    }

    /// Writes what an interrupted `helm upgrade` leaves behind: a newest revision in
    /// `pending-upgrade`, started long ago. Helm stores each revision as a Secret whose
    /// `release` value is base64 of the (optionally gzipped) release JSON.
    async fn leave_pending_upgrade(&self, release: &str, revision: i64) {
        let record = json!({
            "name": release,
            "namespace": "default",
            "version": revision,
            "info": {
                "first_deployed": "2020-01-01T00:00:00Z",
                "last_deployed": "2020-01-01T00:00:00Z",
                "status": "pending-upgrade",
                "description": "Preparing upgrade",
            },
            "chart": {"metadata": {"apiVersion": "v2", "name": "demo", "version": "0.1.0", "appVersion": "1"}},
            "config": {"greeting": "hello"},
            // What the interrupted upgrade was applying: helm's rollback diffs against it.
            "manifest": format!(
                "---\n# Source: demo/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {release}-config\ndata:\n  greeting: \"hello\"\n"
            ),
        });
        let encoded = base64::engine::general_purpose::STANDARD.encode(record.to_string());
        // Helm gives the new revision the previous one's custom labels (the ownership labels).
        let mut labels = self.release_labels(release).await;
        labels.extend([
            ("name".to_string(), release.to_string()),
            ("owner".to_string(), "helm".to_string()),
            ("status".to_string(), "pending-upgrade".to_string()),
            ("version".to_string(), revision.to_string()),
        ]);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("sh.helm.release.v1.{release}.v{revision}"), "labels": labels},
            "type": "helm.sh/release.v1",
            "stringData": {"release": encoded},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<Secret>::namespaced(self.workload().client.clone(), "default")
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("write pending revision: {e}"));
    }

    /// Removes a release behind the operator's back: its Helm records and its ConfigMap.
    async fn delete_out_of_band(&self, release: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.workload().client.clone(), "default");
        let lp = ListParams::default().labels(&format!("owner=helm,name={release}"));
        for s in secrets
            .list(&lp)
            .await
            .unwrap_or_else(|e| panic!("list: {e}"))
            .items
        {
            secrets
                .delete(&s.name_any(), &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("delete release Secret: {e}"));
        }
        Api::<ConfigMap>::namespaced(self.workload().client.clone(), "default")
            .delete(&format!("{release}-config"), &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete ConfigMap: {e}"));
    }

    /// Checks status, Events and logs for every secret this environment knows.
    pub(crate) async fn assert_nothing_leaked(&self) {
        for r in self
            .releases()
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list: {e}"))
            .items
        {
            assert_no_secrets(
                "status",
                &serde_json::to_string(&r.status).unwrap_or_default(),
            );
        }
        let all = self.env.events().await;
        assert!(!all.is_empty(), "the operator published Events");
        assert_no_secrets("Events", &serde_json::to_string(&all).unwrap_or_default());
        let logs = operator_logs();
        assert!(!logs.is_empty(), "the operator's logs were captured");
        assert_no_secrets("operator logs", &logs);
    }

    pub(crate) async fn greeting(&self, release: &str) -> Option<String> {
        let cms: Api<ConfigMap> = Api::namespaced(self.workload().client.clone(), "default");
        cms.get_opt(&format!("{release}-config"))
            .await
            .unwrap_or_else(|e| panic!("get ConfigMap: {e}"))
            .and_then(|cm| cm.data?.get("greeting").cloned())
    }

    pub(crate) fn reconciles(&self) -> u64 {
        self.env.reconciles("OmniHelmRelease")
    }

    pub(crate) async fn events(&self, name: &str) -> Vec<(String, String, String)> {
        self.env
            .events()
            .await
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }
}

pub(crate) fn merge(base: &mut Value, extra: Value) {
    if let (Value::Object(b), Value::Object(e)) = (base, extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}

pub(crate) fn revision(r: &OmniHelmRelease) -> Option<i64> {
    r.status.as_ref().and_then(|s| s.release_revision)
}

pub(crate) fn ready_at(r: &OmniHelmRelease, rev: i64) -> bool {
    condition(r, "Ready").is_some_and(|(s, _, _)| s == "True")
        && revision(r) == Some(rev)
        && r.status.as_ref().and_then(|s| s.release_status.as_deref()) == Some("deployed")
}

/// Waits until the controller has finished at least one more reconcile than `before`.
pub(crate) async fn reconciled_since(env: &Helm, before: u64) {
    let until = Instant::now() + WAIT;
    while env.reconciles() <= before {
        assert!(Instant::now() < until, "no reconcile happened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Touches release `name` (an annotation no one reads) and waits for the reconcile it wakes.
pub(crate) async fn poke(env: &Helm, name: &str) {
    let before = env.reconciles();
    let _: OmniHelmRelease = env
        .env
        .patch(
            name,
            json!({"metadata": {"annotations": {"test/poke": "1"}}}),
        )
        .await;
    reconciled_since(env, before).await;
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_lifecycle_upgrades_only_on_change_and_rolls_back_failures() {
    let env = Helm::start().await;
    let api = env.releases();

    // Install.
    env.create_release("demo", json!({"atomic": true})).await;
    let r = wait_for(&api, "demo", "Ready at revision 1", |r| ready_at(r, 1)).await;
    assert_eq!(
        condition(&r, "Released").map(|c| c.1),
        Some("HelmInstalled".into())
    );
    assert_eq!(env.helm_revisions("demo").await, vec![1]);
    assert_eq!(env.greeting("demo").await.as_deref(), Some("hello"));

    // A values change upgrades to revision 2.
    env.patch_spec(
        "demo",
        json!({"chart": {"values": {"greeting": "bonjour"}}}),
    )
    .await;
    let r = wait_for(&api, "demo", "Ready at revision 2", |r| ready_at(r, 2)).await;
    assert_eq!(
        condition(&r, "Ready").map(|c| c.1),
        Some("HelmUpgraded".into())
    );
    assert_eq!(env.greeting("demo").await.as_deref(), Some("bonjour"));

    // A kubeconfig rotation alone re-checks the release but creates no revision.
    let before = env.reconciles();
    let workload_writes = env.workload().sim.writes_total();
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let rotated = workload_kubeconfig(&env.workload().sim, TOKEN_TWO);
    secrets
        .patch(
            "workload-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"kubeconfig": rotated}})),
        )
        .await
        .unwrap_or_else(|e| panic!("rotate: {e}"));
    reconciled_since(&env, before).await;
    assert_eq!(env.helm_revisions("demo").await, vec![1, 2]);
    assert_eq!(
        env.workload().sim.writes_total(),
        workload_writes,
        "a rotation must not write to the workload cluster"
    );
    let r = api.get("demo").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(ready_at(&r, 2), "{:#?}", r.status);

    // A failing upgrade with atomic: Helm rolls back, the object reports the failure and a
    // Warning Event says it was rolled back; the last good values stay live.
    env.patch_spec(
        "demo",
        json!({"chart": {"values": {"greeting": "hola", "brokenNamespace": "does-not-exist"}}}),
    )
    .await;
    let r = wait_for(&api, "demo", "failed and rolled back", |r| {
        condition(r, "Ready")
            .is_some_and(|(s, reason, _)| s == "False" && reason == "ReconcileFailed")
            && revision(r).is_some_and(|v| v >= 4)
    })
    .await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    assert!(
        message.starts_with("Helm upgrade failed for release \"demo\""),
        "{message}"
    );
    assert_eq!(
        r.status.as_ref().and_then(|s| s.release_status.as_deref()),
        Some("deployed"),
        "rolled back to a deployed revision"
    );
    assert_eq!(env.greeting("demo").await.as_deref(), Some("bonjour"));
    let events = env.events("demo").await;
    assert!(
        events
            .iter()
            .any(|(t, reason, _)| t == "Warning" && reason == "RolledBack"),
        "{events:#?}"
    );

    // Fixing the values recovers.
    env.patch_spec(
        "demo",
        json!({"chart": {"values": {"greeting": "hej", "brokenNamespace": null}}}),
    )
    .await;
    wait_for(&api, "demo", "Ready again", |r| {
        condition(r, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!(env.greeting("demo").await.as_deref(), Some("hej"));

    // Delete with the default policy: the release is uninstalled.
    api.delete("demo", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&api, "demo").await;
    assert_eq!(env.helm_revisions("demo").await, Vec::<i64>::new());
    assert_eq!(env.greeting("demo").await, None);

    // Orphan keeps the release.
    env.create_release("kept", json!({"deletionPolicy": "Orphan"}))
        .await;
    wait_for(&api, "kept", "Ready at revision 1", |r| ready_at(r, 1)).await;
    api.delete("kept", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&api, "kept").await;
    assert_eq!(env.helm_revisions("kept").await, vec![1]);
    assert_eq!(env.greeting("kept").await.as_deref(), Some("hello"));
    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_and_a_missing_kubeconfig_are_reported_without_secrets() {
    let env = Helm::start().await;
    let api = env.releases();

    env.create_release(
        "locked",
        json!({"chart": {
            "repository": env.repo.url, "chart": "demo", "version": "0.1.0", "insecure": true,
            "credentialsSecretRef": {"name": "wrong-credentials"},
        }}),
    )
    .await;
    let r = wait_for(&api, "locked", "failed on credentials", |r| {
        condition(r, "Ready")
            .is_some_and(|(s, reason, _)| s == "False" && reason == "ChartFetchFailed")
    })
    .await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    assert!(
        message.contains("401") || message.contains("Unauthorized"),
        "{message}"
    );
    assert!(message.contains("chart repository"), "{message}");
    assert_no_secrets(
        "status",
        &serde_json::to_string(&r.status).unwrap_or_default(),
    );
    assert_eq!(env.helm_revisions("locked").await, Vec::<i64>::new());

    // The right credentials fix it (the Secret change alone triggers the retry promptly).
    env.patch_spec(
        "locked",
        json!({"chart": {"credentialsSecretRef": {"name": "repo-credentials"}}}),
    )
    .await;
    wait_for(&api, "locked", "Ready at revision 1", |r| ready_at(r, 1)).await;

    // A deletion whose kubeconfig Secret is gone says why it waits and how to finish it.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    secrets
        .delete("workload-kubeconfig", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete Secret: {e}"));
    api.delete("locked", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    // The Secret's deletion alone is reported MissingSecret first (the release is not deleting
    // yet); the deletion's own report adds how to finish it.
    wait_for(&api, "locked", "explains the blocked deletion", |r| {
        condition(r, "Ready").is_some_and(|(_, reason, message)| {
            reason == "MissingSecret" && message.contains("deletionPolicy to Orphan")
        })
    })
    .await;
    env.patch_spec("locked", json!({"deletionPolicy": "Orphan"}))
        .await;
    wait_gone(&api, "locked").await;
    assert_eq!(
        env.helm_revisions("locked").await,
        vec![1],
        "orphaned, not uninstalled"
    );

    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_behind_a_private_ca_needs_the_ca_from_the_credentials_secret() {
    let env = Helm::start().await;
    let api = env.releases();
    env.create_release(
        "private",
        json!({"chart": {
            "repository": env.tls_repo.url, "chart": "demo", "version": "0.1.0",
            "credentialsSecretRef": {"name": "repo-credentials"},
        }}),
    )
    .await;
    let r = wait_for(&api, "private", "failed on the unknown CA", |r| {
        condition(r, "Ready")
            .is_some_and(|(s, reason, _)| s == "False" && reason == "ChartFetchFailed")
    })
    .await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    assert!(
        message.contains("certificate") || message.contains("x509"),
        "{message}"
    );
    assert_eq!(env.helm_revisions("private").await, Vec::<i64>::new());

    // The same credentials plus the CA bundle (default key `ca.crt`): installed.
    env.patch_spec(
        "private",
        json!({"chart": {"credentialsSecretRef": {"name": "repo-credentials-with-ca"}}}),
    )
    .await;
    wait_for(&api, "private", "Ready at revision 1", |r| ready_at(r, 1)).await;
    assert_eq!(env.greeting("private").await.as_deref(), Some("hello"));
    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_and_deleted_releases_are_repaired() {
    let env = Helm::start().await;
    let api = env.releases();

    // A release whose last upgrade was interrupted long ago is reported, not touched...
    env.create_release("stuck", json!({})).await;
    wait_for(&api, "stuck", "Ready at revision 1", |r| ready_at(r, 1)).await;
    env.leave_pending_upgrade("stuck", 2).await;
    // Any change to the object triggers a look at the release.
    env.patch_spec("stuck", json!({"timeout": "4m"})).await;
    let r = wait_for(&api, "stuck", "reported as stuck", |r| {
        condition(r, "Ready").is_some_and(|(s, reason, _)| s == "False" && reason == "ReleaseStuck")
    })
    .await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    assert!(message.contains("pending-upgrade"), "{message}");
    assert!(message.contains("recoverStuckRelease"), "{message}");
    assert_eq!(
        r.status.as_ref().and_then(|s| s.release_status.as_deref()),
        Some("pending-upgrade")
    );
    assert_eq!(env.helm_revisions("stuck").await, vec![1, 2]);

    // ...until recovery is allowed: rolled back to revision 1, a Warning Event, then Ready.
    env.patch_spec("stuck", json!({"recoverStuckRelease": true}))
        .await;
    let r = wait_for(&api, "stuck", "recovered", |r| {
        condition(r, "Ready").is_some_and(|(s, _, _)| s == "True")
            && r.status.as_ref().and_then(|s| s.release_status.as_deref()) == Some("deployed")
    })
    .await;
    assert!(revision(&r).is_some_and(|v| v >= 3), "{:#?}", r.status);
    let events = env.events("stuck").await;
    assert!(
        events.iter().any(|(t, reason, note)| t == "Warning"
            && reason == "StuckReleaseRecovered"
            && note.contains("rolled it back to revision 1")),
        "{events:#?}"
    );
    assert_eq!(env.greeting("stuck").await.as_deref(), Some("hello"));

    // A release deleted out of band comes back at the next drift check, with a Warning Event.
    env.create_release("drift", json!({"driftCheckInterval": "2s"}))
        .await;
    wait_for(&api, "drift", "Ready at revision 1", |r| ready_at(r, 1)).await;
    // No check that the ConfigMap is gone in between: the 2s drift check may already have
    // put it back.
    env.delete_out_of_band("drift").await;
    let until = Instant::now() + WAIT;
    while env.greeting("drift").await.is_none() {
        assert!(
            Instant::now() < until,
            "the deleted release was never reinstalled"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for(&api, "drift", "Ready again", |r| ready_at(r, 1)).await;
    assert_eq!(env.helm_revisions("drift").await, vec![1]);
    let events = env.events("drift").await;
    assert!(
        events.iter().any(|(t, reason, note)| t == "Warning"
            && reason == "DriftDetected"
            && note.contains("missing")),
        "{events:#?}"
    );
    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Ownership: the operator never takes over a release it did not install.

impl Helm {
    /// Runs helm by hand against the workload cluster (a person or another tool), with the
    /// local copy of the demo chart at `./demo`.
    fn helm_by_hand(&self, args: &[&str]) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            workload_kubeconfig(&self.workload().sim, TOKEN_ONE),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        write_chart(dir.path(), "0.1.0");
        let chart = dir.path().join("demo").display().to_string();
        let kubeconfig = kubeconfig.display().to_string();
        let mut full: Vec<&str> = args
            .iter()
            .map(|a| if *a == "./demo" { chart.as_str() } else { a })
            .collect();
        full.extend(["--kubeconfig", &kubeconfig, "--namespace", "default"]);
        run_helm(&full, dir.path());
    }

    /// The labels helm keeps on the newest revision's storage Secret.
    async fn release_labels(&self, release: &str) -> BTreeMap<String, String> {
        let newest = self.helm_revisions(release).await.last().copied();
        let Some(newest) = newest else {
            return BTreeMap::new();
        };
        Api::<Secret>::namespaced(self.workload().client.clone(), "default")
            .get(&format!("sh.helm.release.v1.{release}.v{newest}"))
            .await
            .unwrap_or_else(|e| panic!("release Secret: {e}"))
            .labels()
            .clone()
    }
}

fn not_owned(r: &OmniHelmRelease) -> bool {
    condition(r, "Ready").is_some_and(|(s, reason, _)| s == "False" && reason == "TargetNotOwned")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_installed_by_hand_is_left_alone_until_adopted() {
    let env = Helm::start().await;
    let api = env.releases();
    env.helm_by_hand(&["install", "manual", "./demo", "--set", "greeting=by-hand"]);
    assert_eq!(env.helm_revisions("manual").await, vec![1]);

    // An OmniHelmRelease for it reports TargetNotOwned and changes nothing.
    env.create_release("manual", json!({})).await;
    let r = wait_for(&api, "manual", "TargetNotOwned", not_owned).await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    assert!(
        message.contains("was not installed by this OmniHelmRelease"),
        "{message}"
    );
    assert!(message.contains("omni.texashpc.com/adopt"), "{message}");
    assert_eq!(
        revision(&r),
        None,
        "someone else's revision is not recorded"
    );
    // A few more looks (any change of the object triggers one) still change nothing.
    let before = env.reconciles();
    env.patch_spec("manual", json!({"timeout": "4m"})).await;
    reconciled_since(&env, before).await;
    assert_eq!(env.helm_revisions("manual").await, vec![1]);
    assert_eq!(env.greeting("manual").await.as_deref(), Some("by-hand"));

    // Deleting it (deletionPolicy Uninstall, the default) leaves the release in place.
    api.delete("manual", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&api, "manual").await;
    assert_eq!(env.helm_revisions("manual").await, vec![1]);
    assert_eq!(env.greeting("manual").await.as_deref(), Some("by-hand"));
    let events = env.events("manual").await;
    assert!(
        events.iter().any(|(t, reason, note)| t == "Warning"
            && reason == "UninstallSkipped"
            && note.contains("left Helm release \"manual\"")),
        "{events:#?}"
    );

    // With the adopt annotation: taken over with exactly one upgrade, which stamps ownership.
    let mut obj = json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniHelmRelease",
        "metadata": {"name": "manual", "namespace": NS,
                     "annotations": {"omni.texashpc.com/adopt": "true"}},
        "spec": {
            "clusterRef": {"name": "workload"},
            // The stand-in OmniCluster is never synced to Omni: act as soon as it exists.
            "startWhen": "ClusterExists",
            "kubeconfigSecretRef": {"name": "workload-kubeconfig"},
            "namespace": "default",
            "chart": {
                "repository": env.repo.url, "chart": "demo", "version": "0.1.0", "insecure": true,
                "values": {"greeting": "adopted"},
                "credentialsSecretRef": {"name": "repo-credentials"},
            },
        }
    });
    let typed: OmniHelmRelease =
        serde_json::from_value(obj.take()).unwrap_or_else(|e| panic!("{e}"));
    let created = api
        .create(&PostParams::default(), &typed)
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    let r = wait_for(&api, "manual", "adopted at revision 2", |r| ready_at(r, 2)).await;
    assert_eq!(env.helm_revisions("manual").await, vec![1, 2]);
    assert_eq!(env.greeting("manual").await.as_deref(), Some("adopted"));
    let labels = env.release_labels("manual").await;
    assert_eq!(
        labels.get("omni.texashpc.com/owner-uid"),
        created.metadata.uid.as_ref(),
        "{labels:?}"
    );
    assert_eq!(
        labels
            .get("omni.texashpc.com/owner-name")
            .map(String::as_str),
        Some("manual")
    );
    assert!(
        env.events("manual")
            .await
            .iter()
            .any(|(_, reason, _)| reason == "Adopted")
    );
    drop(r);

    // Now it is ours: an out-of-band `helm upgrade` keeps our labels (helm merges them), so
    // the drift is repaired rather than refused...
    env.helm_by_hand(&["upgrade", "manual", "./demo", "--set", "greeting=again"]);
    env.patch_spec("manual", json!({"timeout": "3m"})).await;
    wait_for(&api, "manual", "Ready at revision 4", |r| ready_at(r, 4)).await;
    assert_eq!(env.greeting("manual").await.as_deref(), Some("adopted"));
    // ...and deleting the object uninstalls it.
    api.delete("manual", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&api, "manual").await;
    assert_eq!(env.helm_revisions("manual").await, Vec::<i64>::new());
    env.assert_nothing_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_objects_for_one_release_do_not_fight_over_it() {
    let env = Helm::start().await;
    let api = env.releases();
    env.create_release("first", json!({"releaseName": "shared"}))
        .await;
    let first = wait_for(&api, "first", "Ready at revision 1", |r| ready_at(r, 1)).await;

    env.create_release(
        "second",
        json!({"releaseName": "shared", "driftCheckInterval": "1s",
               "chart": {"repository": env.repo.url, "chart": "demo", "version": "0.1.0", "insecure": true,
                         "values": {"greeting": "second"},
                         "credentialsSecretRef": {"name": "repo-credentials"}}}),
    )
    .await;
    let r = wait_for(&api, "second", "TargetNotOwned", not_owned).await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    let uid = first.metadata.uid.clone().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "belongs to OmniHelmRelease {NS}/first (uid {uid})"
        )),
        "{message}"
    );
    // Several drift checks of the second object later, still the first object's revision.
    let before = env.reconciles();
    reconciled_since(&env, before + 3).await;
    assert_eq!(env.helm_revisions("shared").await, vec![1]);
    assert_eq!(env.greeting("shared").await.as_deref(), Some("hello"));
    let first = api.get("first").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(ready_at(&first, 1), "{:#?}", first.status);

    // Deleting the second object leaves the first one's release alone.
    api.delete("second", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&api, "second").await;
    assert_eq!(env.helm_revisions("shared").await, vec![1]);
    assert_eq!(env.greeting("shared").await.as_deref(), Some("hello"));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_name_that_looks_like_a_flag_reaches_helm_as_a_name() {
    let env = Helm::start().await;
    let api = env.releases();
    // Without `--` helm would read "-g" as its `--generate-name` flag.
    env.create_release("dash", json!({"releaseName": "-g"}))
        .await;
    let r = wait_for(&api, "dash", "a failure", |r| {
        condition(r, "Ready")
            .is_some_and(|(s, reason, _)| s == "False" && reason == "ReconcileFailed")
    })
    .await;
    let (_, _, message) = condition(&r, "Ready").unwrap_or_default();
    assert!(
        message.contains("Release name is invalid: -g"),
        "helm must have been given \"-g\" as the release name: {message}"
    );
    assert!(!message.contains("flag"), "{message}");
    env.shutdown().await;
}

/// A suspended release ignores a values change (no Helm run, `Ready` kept, `Suspended=True`)
/// until it is resumed, then upgrades once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_release_ignores_a_values_change_until_resumed_then_upgrades_once() {
    let env = Helm::start().await;
    let api = env.releases();
    env.create_release("paused", json!({})).await;
    wait_for(&api, "paused", "Ready at revision 1", |r| ready_at(r, 1)).await;
    env.patch_spec("paused", json!({"suspend": true})).await;
    wait_for(&api, "paused", "Suspended", |r| {
        condition(r, "Suspended").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let before = env.reconciles();
    env.patch_spec(
        "paused",
        json!({"chart": {"values": {"greeting": "bonjour"}}}),
    )
    .await;
    reconciled_since(&env, before).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = api.get("paused").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ready_at(&r, 1),
        "Ready kept while suspended: {:#?}",
        r.status
    );
    assert_eq!(
        condition(&r, "Suspended").map(|c| (c.0, c.1)),
        Some(("True".into(), "Suspended".into()))
    );
    assert_eq!(env.helm_revisions("paused").await, vec![1]);
    assert_eq!(env.greeting("paused").await.as_deref(), Some("hello"));

    // Resumed: one upgrade with the values changed meanwhile, and no more.
    env.patch_spec("paused", json!({"suspend": false})).await;
    let r = wait_for(&api, "paused", "Ready at revision 2", |r| ready_at(r, 2)).await;
    assert_eq!(condition(&r, "Suspended"), None);
    assert_eq!(env.greeting("paused").await.as_deref(), Some("bonjour"));
    poke(&env, "paused").await;
    assert_eq!(env.helm_revisions("paused").await, vec![1, 2]);
    env.shutdown().await;
}
