//! Hostile-tenant tests (issue 12): someone who may edit the operator's custom resources and
//! create Secrets, but not read Secrets, must not be able to run commands in the operator's
//! pod, read its files, leak its credentials, or make it delete objects it does not own.
//!
//! The operator runs in-process against a management kube-sim, with a second kube-sim as the
//! workload cluster and the real helm binary (`.cache/test-tools/bin/helm`). Servers the
//! tenant would point the operator at are started by the tests and record what reaches them.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::server::RunningKubeSim;
use omni_operator::api::keys::USABLE_BY_LABEL;
use omni_operator::api::{OmniCluster, OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync};
use omni_operator::domain::secret_policy::SecretPolicy;
use serde_json::{Value, json};
use support::conditions::{Cond, is_false, is_true};
use support::env::{CONNECTION, Env, EnvBuilder, Namespaced, eventually, eventually_within};
use support::{WAIT, operator_logs};

const WORKLOAD_TOKEN: &str = "workload-token-7f3a";
/// Appears next to a YAML syntax error; must never be echoed anywhere.
const SECRET_XYZ: &str = "SECRET-XYZ";
const READY: Cond = is_true("Ready");

// ---------------------------------------------------------------------------------------------
// Environment.

/// The tenant's environment: no OmniConnection (a test that needs one creates it), a workload
/// cluster without an authenticator, like the OmniHelmRelease tests (helm (client-go) sends no
/// credentials over plain HTTP), the real helm, and a second namespace `elsewhere`.
fn tenant() -> EnvBuilder {
    Env::builder()
        .without_connection()
        .with_workload()
        .real_helm()
        .other_namespace("elsewhere")
}

/// Starts the environment and creates OmniCluster `workload`, Secret `workload-kubeconfig` (a
/// kubeconfig of the workload cluster with an inline token: what the operator accepts) and
/// Secret `registry`.
async fn start(builder: EnvBuilder) -> Env {
    let env = builder.start().await;
    let _: OmniCluster = env
        .create_spec(
            "workload",
            json!({"connectionRef": {"name": CONNECTION}, "talos": {"version": "v1.11.5"},
                   "kubernetes": {"version": "v1.34.2"}}),
        )
        .await;
    env.create_secret(
        "workload-kubeconfig",
        json!({"kubeconfig": env.workload_kubeconfig(WORKLOAD_TOKEN)}),
    )
    .await;
    env.create_secret("registry", json!({"password": "registry-password"}))
        .await;
    env
}

/// The Secrets in the workload cluster's namespace `apps`, where the syncs copy to.
fn workload_secrets(env: &Env) -> Api<Secret> {
    Api::namespaced(env.workload().client.clone(), "apps")
}

/// OmniSecretSync `name` copying Secret `source` into `apps/<name>-copy` of the workload
/// cluster, reached with the kubeconfig in Secret `kubeconfig_secret`.
async fn sync(env: &Env, name: &str, kubeconfig_secret: &str, source: &str) {
    let _: OmniSecretSync = env
        .create_spec(
            name,
            json!({
                "clusterRef": {"name": "workload"},
                // The stand-in OmniCluster is never synced to Omni: act as soon as it exists.
                "startWhen": "ClusterExists",
                "kubeconfigSecretRef": {"name": kubeconfig_secret, "key": "kubeconfig"},
                "sourceSecretRef": {"name": source},
                "targetSecretRef": {"name": format!("{name}-copy"), "namespace": "apps"},
                "createNamespace": true,
                "deletionPolicy": "Delete",
            }),
        )
        .await;
}

/// OmniHelmRelease `name` of `chart` into the workload cluster, reached with the kubeconfig in
/// Secret `kubeconfig_secret`.
async fn release(env: &Env, name: &str, kubeconfig_secret: &str, chart: Value) {
    let _: OmniHelmRelease = env
        .create_spec(
            name,
            json!({
                "clusterRef": {"name": "workload"},
                // The stand-in OmniCluster is never synced to Omni: act as soon as it exists.
                "startWhen": "ClusterExists",
                "kubeconfigSecretRef": {"name": kubeconfig_secret},
                "namespace": "default",
                "chart": chart,
                "timeout": "30s",
                "deletionPolicy": "Orphan",
            }),
        )
        .await;
}

/// Everything the operator said about the tenant's object `name`: its status, all Events and
/// the operator's log.
async fn everything_said<K: Namespaced>(env: &Env, name: &str) -> String {
    let obj = env
        .api::<K>()
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    format!(
        "{}\n{}\n{}",
        serde_json::to_string(&obj).unwrap_or_default(),
        serde_json::to_string(&env.events().await).unwrap_or_default(),
        operator_logs()
    )
}

/// Waits until `Ready` is False with `reason` and returns its message.
async fn refused<K: Namespaced>(env: &Env, name: &str, reason: &'static str) -> String {
    let refusal = is_false("Ready").because(reason);
    refusal.message(&env.wait_cond::<K>(name, refusal).await)
}

/// Like [`refused`], but fails at once when `violated` reports that the operator did what it
/// must not (so a regression fails on the breach itself, not on a missing condition).
async fn refused_without<K: Namespaced>(
    env: &Env,
    name: &str,
    reason: &'static str,
    violated: impl AsyncFn() -> Option<String>,
) -> String {
    let refusal = is_false("Ready").because(reason);
    let api = env.api::<K>();
    eventually_within(&format!("{name} refused with {reason}"), WAIT, async || {
        if let Some(breach) = violated().await {
            panic!("{name}: {breach}");
        }
        let obj = api.get_opt(name).await.ok().flatten()?;
        refusal.holds(&obj).then(|| refusal.message(&obj))
    })
    .await
}

/// A kubeconfig for `server` whose user is `user_yaml` (indented by four spaces).
fn kubeconfig_with_user(server: &str, cluster_extra: &str, user_yaml: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster:\n    server: {server}\n{cluster_extra}contexts:\n- name: w\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user:\n{user_yaml}"
    )
}

/// A kubeconfig whose `exec` plugin would create `marker` (and then hand out a valid token).
fn exec_kubeconfig(server: &str, cluster_extra: &str, marker: &Path) -> String {
    let credential = format!(
        r#"{{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{{"token":"{WORKLOAD_TOKEN}"}}}}"#
    );
    let script = format!("touch {}; echo '{credential}'", marker.display());
    kubeconfig_with_user(
        server,
        cluster_extra,
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: /bin/sh\n      args: [\"-c\", {}]\n      interactiveMode: Never\n",
            serde_json::to_string(&script).unwrap_or_default()
        ),
    )
}

/// Gives a command the operator might have started time to leave its trace.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

// ---------------------------------------------------------------------------------------------
// Item 1: kubeconfigs are data, never code.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_sync_never_runs_an_exec_kubeconfig() {
    let env = start(tenant()).await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let marker = dir.path().join("ran");
    env.create_secret(
        "exec-kubeconfig",
        json!({"kubeconfig": exec_kubeconfig(&env.workload().sim.base_url, "", &marker)}),
    )
    .await;
    sync(&env, "exec", "exec-kubeconfig", "registry").await;
    let ran = async || {
        marker
            .exists()
            .then(|| "the exec plugin ran in the operator".to_string())
    };
    let message = refused_without::<OmniSecretSync>(&env, "exec", "ValidationFailed", &ran).await;
    assert!(message.contains("users[0].user.exec"), "{message}");
    settle().await;
    assert_eq!(ran().await, None);
    assert!(
        workload_secrets(&env)
            .get_opt("exec-copy")
            .await
            .ok()
            .flatten()
            .is_none()
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_release_never_hands_an_exec_kubeconfig_to_helm() {
    let env = start(tenant()).await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let marker = dir.path().join("ran");
    // Over HTTPS: helm (client-go) uses credentials, exec plugins included, only over TLS.
    let server = RecordingServer::start().await;
    let ca = base64::engine::general_purpose::STANDARD.encode(&server.ca_pem);
    let kubeconfig = exec_kubeconfig(
        &server.url,
        &format!("    certificate-authority-data: {ca}\n"),
        &marker,
    );
    env.create_secret("exec-kubeconfig", json!({"kubeconfig": kubeconfig}))
        .await;
    release(
        &env,
        "exec",
        "exec-kubeconfig",
        json!({"repository": "http://127.0.0.1:1", "chart": "demo", "version": "0.1.0"}),
    )
    .await;
    let ran = async || {
        marker
            .exists()
            .then(|| "helm ran the exec plugin".to_string())
            .or_else(|| server.reached())
    };
    let message = refused_without::<OmniHelmRelease>(&env, "exec", "ValidationFailed", &ran).await;
    assert!(message.contains("users[0].user.exec"), "{message}");
    settle().await;
    assert_eq!(ran().await, None);
    env.shutdown().await;
}

/// An HTTPS server (certificate from a CA the tests hand out) that records every request.
struct RecordingServer {
    url: String,
    ca_pem: String,
    requests: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
}

impl RecordingServer {
    async fn start() -> RecordingServer {
        let ca = kube_sim::tls::CertificateAuthority::generate("tenant-chosen server CA")
            .unwrap_or_else(|e| panic!("{e}"));
        let serving = ca
            .issue_server(&["127.0.0.1", "localhost"])
            .unwrap_or_else(|e| panic!("{e}"));
        let config = ca.server_config(&serving).unwrap_or_else(|e| panic!("{e}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let recorded = requests.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let recorded = recorded.clone();
            async move {
                let auth = req
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if let Ok(mut r) = recorded.lock() {
                    r.push(format!("{} {} {auth}", req.method(), req.uri()));
                }
                http::StatusCode::UNAUTHORIZED
            }
        });
        tokio::spawn(support::chart_repo::serve_tls_counting(
            listener,
            app,
            config,
            connections.clone(),
        ));
        RecordingServer {
            url: format!("https://{addr}"),
            ca_pem: ca.cert_pem().to_string(),
            requests,
            connections,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// What reached the server, if anything did.
    fn reached(&self) -> Option<String> {
        let connections = self.connections.load(Ordering::SeqCst);
        (connections > 0).then(|| {
            format!(
                "{connections} connection(s) reached the tenant's server; requests: {:?}",
                self.requests()
            )
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_file_is_never_read_nor_sent() {
    let env = start(tenant()).await;
    let server = RecordingServer::start().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "FILE-TOKEN-0c9d").unwrap_or_else(|e| panic!("{e}"));
    let ca = base64::engine::general_purpose::STANDARD.encode(&server.ca_pem);
    let kubeconfig = kubeconfig_with_user(
        &server.url,
        &format!("    certificate-authority-data: {ca}\n"),
        &format!("    tokenFile: {}\n", token_file.display()),
    );
    env.create_secret("file-kubeconfig", json!({"kubeconfig": kubeconfig}))
        .await;
    sync(&env, "file", "file-kubeconfig", "registry").await;
    let reached = async || server.reached();
    let message =
        refused_without::<OmniSecretSync>(&env, "file", "ValidationFailed", &reached).await;
    assert!(message.contains("users[0].user.tokenFile"), "{message}");
    settle().await;
    assert_eq!(server.reached(), None);
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Item 5: no secret text in errors.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_syntax_error_does_not_echo_the_secret_next_to_it() {
    let env = start(tenant()).await;
    let broken = format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {SECRET_XYZ}\n    : [broken\n"
    );
    env.create_secret("broken-kubeconfig", json!({"kubeconfig": broken}))
        .await;
    sync(&env, "broken", "broken-kubeconfig", "registry").await;
    release(
        &env,
        "broken",
        "broken-kubeconfig",
        json!({"repository": "http://127.0.0.1:1", "chart": "demo", "version": "0.1.0"}),
    )
    .await;
    let messages = [
        refused::<OmniSecretSync>(&env, "broken", "ValidationFailed").await,
        refused::<OmniHelmRelease>(&env, "broken", "ValidationFailed").await,
    ];
    let said = everything_said::<OmniSecretSync>(&env, "broken").await
        + &everything_said::<OmniHelmRelease>(&env, "broken").await;
    assert!(!said.contains(SECRET_XYZ), "{said}");
    for message in messages {
        assert!(
            message.contains("kubeconfig is not valid YAML (error at line 7, column 5)"),
            "{message}"
        );
    }
    env.shutdown().await;
}

#[test]
fn patch_syntax_error_does_not_echo_the_secret_next_to_it() {
    let patch = format!("machine:\n  env:\n    API_KEY: {SECRET_XYZ}\n  : [broken\n");
    let err = omni_client::template::check_config_patch(&patch)
        .err()
        .unwrap_or_else(|| panic!("a broken patch was accepted"));
    assert!(!err.contains(SECRET_XYZ), "{err}");
    assert!(
        err.starts_with("patch is not valid YAML (error at line"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Item 6: Secret references cannot be turned against the operator.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_omni_key_never_serves_as_repository_credentials() {
    let env = start(tenant()).await;
    let registry = RecordingServer::start().await;
    env.create_secret(
        "omni-key",
        json!({"serviceAccountKey": "b21uaS1rZXktZG8tbm90LWxlYWs="}),
    )
    .await;
    env.connection_at(CONNECTION, "https://127.0.0.1:1", "omni-key")
        .await;
    let host = registry.url.trim_start_matches("https://");
    release(
        &env,
        "steal",
        "workload-kubeconfig",
        json!({
            // Never reached: the credentials are refused first. (An absolute URL, as admission
            // and the controller's own check of the spec require.)
            "repository": format!("https://{host}/unused"),
            "chart": format!("oci://{host}/charts/demo"),
            "version": "0.1.0",
            "credentialsSecretRef": {"name": "omni-key", "usernameKey": "serviceAccountKey",
                                     "passwordKey": "serviceAccountKey"},
        }),
    )
    .await;
    let reached = async || registry.reached();
    let message =
        refused_without::<OmniHelmRelease>(&env, "steal", "ValidationFailed", &reached).await;
    assert!(
        message.contains("Omni service-account key of OmniConnection \"omni\""),
        "{message}"
    );
    settle().await;
    assert_eq!(registry.reached(), None);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_never_becomes_a_sync_source() {
    let env = start(tenant()).await;
    let _: Secret = env
        .create(json!({
            "metadata": {
                "name": "operator-token",
                "namespace": env.ns,
                "annotations": {"kubernetes.io/service-account.name": "default"},
            },
            "type": "kubernetes.io/service-account-token",
            "stringData": {"token": "sa-token-do-not-copy"},
        }))
        .await;
    sync(&env, "steal", "workload-kubeconfig", "operator-token").await;
    let copied = async || {
        let copy = workload_secrets(&env).get_opt("steal-copy").await;
        copy.ok()
            .flatten()
            .map(|_| "the token was copied into the workload cluster".to_string())
    };
    let message =
        refused_without::<OmniSecretSync>(&env, "steal", "ValidationFailed", &copied).await;
    assert!(
        message.contains("kubernetes.io/service-account-token"),
        "{message}"
    );
    settle().await;
    assert_eq!(copied().await, None);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_required_opt_in_only_labelled_secrets_are_used() {
    let strict = SecretPolicy {
        require_opt_in: true,
        ..SecretPolicy::default()
    };
    let env = start(tenant().secret_policy(strict)).await;
    sync(&env, "opt-in", "workload-kubeconfig", "registry").await;
    let message = refused::<OmniSecretSync>(&env, "opt-in", "ValidationFailed").await;
    assert!(message.contains(USABLE_BY_LABEL), "{message}");
    for name in ["workload-kubeconfig", "registry"] {
        let _: Secret = env
            .patch(
                name,
                json!({"metadata": {"labels": {USABLE_BY_LABEL: "OmniHelmRelease.OmniSecretSync"}}}),
            )
            .await;
    }
    env.wait::<OmniSecretSync>("opt-in", "Synced once opted in", |s| READY.holds(s))
        .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_export_writes_only_into_its_own_namespace() {
    let env = start(tenant().watch_all_namespaces()).await;
    let export = async |name: &str, target_ns: &str| {
        let _: OmniKubeconfigExport = env
            .create_spec(
                name,
                json!({
                    "clusterRef": {"name": "workload"},
                    "startWhen": "ClusterExists",
                    "targetSecretRef": {"name": "planted", "namespace": target_ns},
                    "serviceAccount": {"user": "automation", "groups": ["automation"]},
                    "ttl": "1h",
                    "deletionPolicy": "Delete",
                }),
            )
            .await;
    };
    export("away", "elsewhere").await;
    let message = refused::<OmniKubeconfigExport>(&env, "away", "ValidationFailed").await;
    assert!(
        message.contains("--allow-cross-namespace-export"),
        "{message}"
    );
    // The same export into its own namespace goes on (to the missing OmniConnection).
    export("home", &env.ns).await;
    let message = refused::<OmniKubeconfigExport>(&env, "home", "MissingConnection").await;
    assert!(message.contains("OmniConnection"), "{message}");
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Item 8: deletes are guarded.

/// Waits until `sim` has received a DELETE of a Secret (counted before any injected latency).
async fn wait_for_secret_delete(sim: &RunningKubeSim) {
    eventually("the operator deleted a Secret", || {
        sim.hooks()
            .counts()
            .iter()
            .any(|(k, n)| k.verb == "delete" && k.resource == "secrets" && *n > 0)
    })
    .await;
}

/// Deletes `name` and creates an unowned Secret of the same name, through `api`.
async fn replace_with_unowned(api: &Api<Secret>, name: &str) -> String {
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let replacement: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"owner": "someone else"},
    }))
    .unwrap_or_else(|e| panic!("fixture: {e}"));
    api.create(&PostParams::default(), &replacement)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .uid()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_copy_replaced_during_deletion_survives() {
    let env = start(tenant()).await;
    sync(&env, "copy", "workload-kubeconfig", "registry").await;
    env.wait::<OmniSecretSync>("copy", "Synced", |s| READY.holds(s))
        .await;
    // The operator's DELETE of its copy is held long enough to swap the object under it.
    env.workload().sim.hooks().add_latency(
        Some("delete"),
        Some("secrets"),
        Duration::from_secs(5),
        Some(1),
    );
    env.delete::<OmniSecretSync>("copy").await;
    wait_for_secret_delete(&env.workload().sim).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newcomer = replace_with_unowned(&workload_secrets(&env), "copy-copy").await;
    env.wait_gone::<OmniSecretSync>("copy").await;
    let survivor = workload_secrets(&env)
        .get_opt("copy-copy")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(survivor.and_then(|s| s.uid()), Some(newcomer));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_target_replaced_during_deletion_survives() {
    let env = start(tenant()).await;
    let export: OmniKubeconfigExport = env
        .create_spec(
            "edge",
            json!({
                "clusterRef": {"name": "workload"},
                "startWhen": "ClusterExists",
                "targetSecretRef": {"name": "edge-kubeconfig"},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "1h",
                "deletionPolicy": "Delete",
            }),
        )
        .await;
    // Wait for the finalizer, then give the export a target it owns (as an earlier export
    // would have written it).
    env.wait::<OmniKubeconfigExport>("edge", "finalized", |e| !e.finalizers().is_empty())
        .await;
    let _: Secret = env
        .create(json!({
            "metadata": {
                "name": "edge-kubeconfig",
                "namespace": env.ns,
                "labels": {"omni.texashpc.com/kubeconfig-export-uid": export.uid().unwrap_or_default()},
                "annotations": {"omni.texashpc.com/kubeconfig-export-name": "edge"},
            },
            "stringData": {"kubeconfig": "exported"},
        }))
        .await;
    env.kube.hooks().add_latency(
        Some("delete"),
        Some("secrets"),
        Duration::from_secs(5),
        Some(1),
    );
    env.delete::<OmniKubeconfigExport>("edge").await;
    wait_for_secret_delete(&env.kube).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newcomer = replace_with_unowned(&env.api::<Secret>(), "edge-kubeconfig").await;
    env.wait_gone::<OmniKubeconfigExport>("edge").await;
    let survivor = env
        .api::<Secret>()
        .get_opt("edge-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(survivor.and_then(|s| s.uid()), Some(newcomer));
    env.shutdown().await;
}
