//! Hostile-tenant tests (issue 12): someone who may edit the operator's custom resources and
//! create Secrets, but not read Secrets, must not be able to run commands in the operator's
//! pod, read its files, leak its credentials, or make it delete objects it does not own.
//!
//! The operator runs in-process against a management kube-sim, with a second kube-sim as the
//! workload cluster and the real helm binary (`.cache/test-tools/bin/helm`). Servers the
//! tenant would point the operator at are started by the tests and record what reaches them.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::RunningKubeSim;
use omni_operator::api::{OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync};
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::secret_policy::{SecretPolicy, USABLE_BY_LABEL};
use serde_json::{Value, json};
use support::{condition, helm_bin, kube_sim, operator_logs, wait_for, wait_gone};
use tokio::time::Instant;

const NS: &str = "tenant";
const WORKLOAD_TOKEN: &str = "workload-token-7f3a";
/// Appears next to a YAML syntax error; must never be echoed anywhere.
const SECRET_XYZ: &str = "SECRET-XYZ";
const WAIT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------------------------
// Environment.

struct Env {
    mgmt: RunningKubeSim,
    client: kube::Client,
    workload: RunningKubeSim,
    workload_client: kube::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _helm_dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn object<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
}

impl Env {
    async fn start(scope: Scope, policy: SecretPolicy) -> Env {
        operator_logs();
        let (mgmt, client) = kube_sim().await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in omni_operator::api::crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("create CRD: {e}"));
        }
        for ns in [NS, "elsewhere"] {
            Api::<Namespace>::all(client.clone())
                .create(
                    &PostParams::default(),
                    &object(json!({"metadata": {"name": ns}})),
                )
                .await
                .unwrap_or_else(|e| panic!("namespace: {e}"));
        }
        let syncs: Api<OmniSecretSync> = Api::namespaced(client.clone(), NS);
        let until = Instant::now() + WAIT;
        while syncs.list(&ListParams::default()).await.is_err() {
            assert!(Instant::now() < until, "CRDs never became servable");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Without an authenticator, like the OmniHelmRelease tests: helm (client-go) sends no
        // credentials over plain HTTP.
        let (workload, workload_client) = kube_sim().await;
        Api::<omni_operator::api::OmniCluster>::namespaced(client.clone(), NS)
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster",
                    "metadata": {"name": "workload", "namespace": NS},
                    "spec": {"connectionRef": {"name": "omni"}, "talos": {"version": "v1.11.5"},
                             "kubernetes": {"version": "v1.34.2"}},
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("OmniCluster: {e}"));
        let helm_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut config = OperatorConfig::embedded(scope);
        config.secret_policy = policy;
        config.helm_binary = helm_bin();
        config.helm_work_dir = helm_dir.path().to_path_buf();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run_operator(config, client.clone(), async move {
            let _ = rx.await;
        }));
        let env = Env {
            mgmt,
            client,
            workload,
            workload_client,
            stop: Some(tx),
            _helm_dir: helm_dir,
        };
        env.secret(
            "workload-kubeconfig",
            json!({"stringData": {"kubeconfig": env.good_kubeconfig()}}),
        )
        .await;
        env.secret(
            "registry",
            json!({"stringData": {"password": "registry-password"}}),
        )
        .await;
        env
    }

    /// A kubeconfig of the workload cluster with an inline token: what the operator accepts.
    fn good_kubeconfig(&self) -> String {
        Kubeconfig::new(
            self.workload.base_url.clone(),
            "tenant",
            Credential::Token(WORKLOAD_TOKEN.into()),
        )
        .to_yaml()
        .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn secret(&self, name: &str, extra: Value) {
        let mut v = json!({"metadata": {"name": name, "namespace": NS}});
        if let (Some(t), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, val) in e {
                if k == "metadata" {
                    for (mk, mv) in val.as_object().into_iter().flatten() {
                        t["metadata"][mk] = mv.clone();
                    }
                } else {
                    t.insert(k.clone(), val.clone());
                }
            }
        }
        self.secrets()
            .create(&PostParams::default(), &object(v))
            .await
            .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn syncs(&self) -> Api<OmniSecretSync> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn releases(&self) -> Api<OmniHelmRelease> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn exports(&self) -> Api<OmniKubeconfigExport> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn workload_secrets(&self) -> Api<Secret> {
        Api::namespaced(self.workload_client.clone(), "apps")
    }

    async fn sync(&self, name: &str, kubeconfig_secret: &str, source: &str) {
        self.syncs()
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniSecretSync",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "clusterRef": {"name": "workload"},
                        "kubeconfigSecretRef": {"name": kubeconfig_secret, "key": "kubeconfig"},
                        "sourceSecretRef": {"name": source},
                        "targetSecretRef": {"name": format!("{name}-copy"), "namespace": "apps"},
                        "createNamespace": true,
                        "deletionPolicy": "Delete",
                    },
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("OmniSecretSync: {e}"));
    }

    async fn release(&self, name: &str, kubeconfig_secret: &str, chart: Value) {
        self.releases()
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniHelmRelease",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "clusterRef": {"name": "workload"},
                        "kubeconfigSecretRef": {"name": kubeconfig_secret},
                        "namespace": "default",
                        "chart": chart,
                        "timeout": "30s",
                        "deletionPolicy": "Orphan",
                    },
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("OmniHelmRelease: {e}"));
    }

    /// Everything the operator said about the tenant's objects: their status and all Events.
    async fn everything_said<K>(&self, api: &Api<K>, name: &str) -> String
    where
        K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        let obj = api.get(name).await.unwrap_or_else(|e| panic!("{e}"));
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), NS);
        let events = events
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items;
        format!(
            "{}\n{}\n{}",
            serde_json::to_string(&obj).unwrap_or_default(),
            serde_json::to_string(&events).unwrap_or_default(),
            operator_logs()
        )
    }
}

/// Waits until `Ready` is False with `reason` and returns its message.
async fn refused<K>(api: &Api<K>, name: &str, reason: &str) -> String
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj = wait_for(api, name, &format!("refused with {reason}"), |o| {
        condition(o, "Ready").is_some_and(|(s, r, _)| s == "False" && r == reason)
    })
    .await;
    condition(&obj, "Ready")
        .map(|(_, _, m)| m)
        .unwrap_or_default()
}

/// Like [`refused`], but fails at once when `violated` reports that the operator did what it
/// must not (so a regression fails on the breach itself, not on a missing condition).
async fn refused_without<K>(
    api: &Api<K>,
    name: &str,
    reason: &str,
    violated: impl AsyncFn() -> Option<String>,
) -> String
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let until = Instant::now() + WAIT;
    loop {
        if let Some(breach) = violated().await {
            panic!("{name}: {breach}");
        }
        let ready = api
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|obj| condition(&obj, "Ready"));
        if let Some((status, r, message)) = &ready
            && status == "False"
            && r == reason
        {
            return message.clone();
        }
        assert!(
            Instant::now() < until,
            "{name}: never refused with {reason}; Ready is {ready:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let marker = dir.path().join("ran");
    env.secret(
        "exec-kubeconfig",
        json!({"stringData": {"kubeconfig": exec_kubeconfig(&env.workload.base_url, "", &marker)}}),
    )
    .await;
    env.sync("exec", "exec-kubeconfig", "registry").await;
    let ran = async || {
        marker
            .exists()
            .then(|| "the exec plugin ran in the operator".to_string())
    };
    let message = refused_without(&env.syncs(), "exec", "ValidationFailed", &ran).await;
    assert!(message.contains("users[0].user.exec"), "{message}");
    settle().await;
    assert_eq!(ran().await, None);
    assert!(
        env.workload_secrets()
            .get_opt("exec-copy")
            .await
            .ok()
            .flatten()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_release_never_hands_an_exec_kubeconfig_to_helm() {
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
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
    env.secret(
        "exec-kubeconfig",
        json!({"stringData": {"kubeconfig": kubeconfig}}),
    )
    .await;
    env.release(
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
    let message = refused_without(&env.releases(), "exec", "ValidationFailed", &ran).await;
    assert!(message.contains("users[0].user.exec"), "{message}");
    settle().await;
    assert_eq!(ran().await, None);
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
        let counted = connections.clone();
        tokio::spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let (acceptor, service) = (
                    acceptor.clone(),
                    hyper_util::service::TowerToHyperService::new(app.clone()),
                );
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
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
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
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
    env.secret(
        "file-kubeconfig",
        json!({"stringData": {"kubeconfig": kubeconfig}}),
    )
    .await;
    env.sync("file", "file-kubeconfig", "registry").await;
    let reached = async || server.reached();
    let message = refused_without(&env.syncs(), "file", "ValidationFailed", &reached).await;
    assert!(message.contains("users[0].user.tokenFile"), "{message}");
    settle().await;
    assert_eq!(server.reached(), None);
}

// ---------------------------------------------------------------------------------------------
// Item 5: no secret text in errors.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_syntax_error_does_not_echo_the_secret_next_to_it() {
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
    let broken = format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {SECRET_XYZ}\n    : [broken\n"
    );
    env.secret(
        "broken-kubeconfig",
        json!({"stringData": {"kubeconfig": broken}}),
    )
    .await;
    env.sync("broken", "broken-kubeconfig", "registry").await;
    env.release(
        "broken",
        "broken-kubeconfig",
        json!({"repository": "http://127.0.0.1:1", "chart": "demo", "version": "0.1.0"}),
    )
    .await;
    let messages = [
        refused(&env.syncs(), "broken", "ValidationFailed").await,
        refused(&env.releases(), "broken", "ValidationFailed").await,
    ];
    let said = env.everything_said(&env.syncs(), "broken").await
        + &env.everything_said(&env.releases(), "broken").await;
    assert!(!said.contains(SECRET_XYZ), "{said}");
    for message in messages {
        assert!(
            message.contains("kubeconfig is not valid YAML (error at line 7, column 5)"),
            "{message}"
        );
    }
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
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
    let registry = RecordingServer::start().await;
    env.secret(
        "omni-key",
        json!({"stringData": {"serviceAccountKey": "b21uaS1rZXktZG8tbm90LWxlYWs="}}),
    )
    .await;
    Api::<omni_operator::api::OmniConnection>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniConnection",
                "metadata": {"name": "omni", "namespace": NS},
                "spec": {"endpoint": "https://127.0.0.1:1",
                         "auth": {"serviceAccountSecretRef": {"name": "omni-key"}}},
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("OmniConnection: {e}"));
    let host = registry.url.trim_start_matches("https://");
    env.release(
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
    let message = refused_without(&env.releases(), "steal", "ValidationFailed", &reached).await;
    assert!(
        message.contains("Omni service-account key of OmniConnection \"omni\""),
        "{message}"
    );
    settle().await;
    assert_eq!(registry.reached(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_never_becomes_a_sync_source() {
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
    env.secret(
        "operator-token",
        json!({
            "metadata": {"annotations": {"kubernetes.io/service-account.name": "default"}},
            "type": "kubernetes.io/service-account-token",
            "stringData": {"token": "sa-token-do-not-copy"},
        }),
    )
    .await;
    env.sync("steal", "workload-kubeconfig", "operator-token")
        .await;
    let copied = async || {
        let copy = env.workload_secrets().get_opt("steal-copy").await;
        copy.ok()
            .flatten()
            .map(|_| "the token was copied into the workload cluster".to_string())
    };
    let message = refused_without(&env.syncs(), "steal", "ValidationFailed", &copied).await;
    assert!(
        message.contains("kubernetes.io/service-account-token"),
        "{message}"
    );
    settle().await;
    assert_eq!(copied().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_required_opt_in_only_labelled_secrets_are_used() {
    let strict = SecretPolicy {
        require_opt_in: true,
        ..SecretPolicy::default()
    };
    let env = Env::start(Scope::Namespace(NS.into()), strict).await;
    env.sync("opt-in", "workload-kubeconfig", "registry").await;
    let message = refused(&env.syncs(), "opt-in", "ValidationFailed").await;
    assert!(message.contains(USABLE_BY_LABEL), "{message}");
    for name in ["workload-kubeconfig", "registry"] {
        env.secrets()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {USABLE_BY_LABEL: "OmniHelmRelease.OmniSecretSync"}}}),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    wait_for(&env.syncs(), "opt-in", "Synced once opted in", |s| {
        condition(s, "Ready").is_some_and(|(st, _, _)| st == "True")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_export_writes_only_into_its_own_namespace() {
    let env = Env::start(Scope::All, SecretPolicy::default()).await;
    let export = |name: &str, target_ns: &str| {
        object::<OmniKubeconfigExport>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniKubeconfigExport",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterRef": {"name": "workload"},
                "targetSecretRef": {"name": "planted", "namespace": target_ns},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "1h",
                "deletionPolicy": "Delete",
            },
        }))
    };
    env.exports()
        .create(&PostParams::default(), &export("away", "elsewhere"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let message = refused(&env.exports(), "away", "ValidationFailed").await;
    assert!(
        message.contains("--allow-cross-namespace-export"),
        "{message}"
    );
    // The same export into its own namespace goes on (to the missing OmniConnection).
    env.exports()
        .create(&PostParams::default(), &export("home", NS))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let message = refused(&env.exports(), "home", "MissingConnection").await;
    assert!(message.contains("OmniConnection"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Item 8: deletes are guarded.

/// Waits until `sim` has received a DELETE of a Secret (counted before any injected latency).
async fn wait_for_secret_delete(sim: &RunningKubeSim) {
    let until = Instant::now() + WAIT;
    loop {
        let deletes: u64 = sim
            .hooks()
            .counts()
            .iter()
            .filter(|(k, _)| k.verb == "delete" && k.resource == "secrets")
            .map(|(_, n)| n)
            .sum();
        if deletes > 0 {
            return;
        }
        assert!(
            Instant::now() < until,
            "the operator never deleted a Secret"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deletes `name` and creates an unowned Secret of the same name, through `api`.
async fn replace_with_unowned(api: &Api<Secret>, name: &str) -> String {
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let replacement: Secret = object(json!({
        "metadata": {"name": name},
        "stringData": {"owner": "someone else"},
    }));
    api.create(&PostParams::default(), &replacement)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .uid()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_copy_replaced_during_deletion_survives() {
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
    env.sync("copy", "workload-kubeconfig", "registry").await;
    wait_for(&env.syncs(), "copy", "Synced", |s| {
        condition(s, "Ready").is_some_and(|(st, _, _)| st == "True")
    })
    .await;
    // The operator's DELETE of its copy is held long enough to swap the object under it.
    env.workload.hooks().add_latency(
        Some("delete"),
        Some("secrets"),
        Duration::from_secs(5),
        Some(1),
    );
    env.syncs()
        .delete("copy", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for_secret_delete(&env.workload).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newcomer = replace_with_unowned(&env.workload_secrets(), "copy-copy").await;
    wait_gone(&env.syncs(), "copy").await;
    let survivor = env
        .workload_secrets()
        .get_opt("copy-copy")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(survivor.and_then(|s| s.uid()), Some(newcomer));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_target_replaced_during_deletion_survives() {
    let env = Env::start(Scope::Namespace(NS.into()), SecretPolicy::default()).await;
    let export: OmniKubeconfigExport = object(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniKubeconfigExport",
        "metadata": {"name": "edge", "namespace": NS},
        "spec": {
            "clusterRef": {"name": "workload"},
            "targetSecretRef": {"name": "edge-kubeconfig"},
            "serviceAccount": {"user": "automation", "groups": ["automation"]},
            "ttl": "1h",
            "deletionPolicy": "Delete",
        },
    }));
    let export = env
        .exports()
        .create(&PostParams::default(), &export)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Wait for the finalizer, then give the export a target it owns (as an earlier export
    // would have written it).
    wait_for(&env.exports(), "edge", "finalized", |e| {
        !e.finalizers().is_empty()
    })
    .await;
    env.secret(
        "edge-kubeconfig",
        json!({
            "metadata": {
                "labels": {"omni.texashpc.com/kubeconfig-export-uid": export.uid().unwrap_or_default()},
                "annotations": {"omni.texashpc.com/kubeconfig-export-name": "edge"},
            },
            "stringData": {"kubeconfig": "exported"},
        }),
    )
    .await;
    env.mgmt.hooks().add_latency(
        Some("delete"),
        Some("secrets"),
        Duration::from_secs(5),
        Some(1),
    );
    env.exports()
        .delete("edge", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for_secret_delete(&env.mgmt).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newcomer = replace_with_unowned(&env.secrets(), "edge-kubeconfig").await;
    wait_gone(&env.exports(), "edge").await;
    let survivor = env
        .secrets()
        .get_opt("edge-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(survivor.and_then(|s| s.uid()), Some(newcomer));
}
