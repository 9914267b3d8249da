//! A whole system for the fault suite: a management kube-sim with the CRDs, omni-sim whose minted
//! kubeconfigs point at a workload kube-sim, a chart repository, and the embedded operator,
//! which a scenario can start, stop gracefully, or kill (abort mid-work) and start again against
//! the same emulators.
//!
//! Helm runs through a wrapper that points `TMPDIR` into the stack's own directory, and the
//! operator's helm work directory lives there too, so a scenario can check afterwards that no
//! file holding a kubeconfig credential or a repository password was left behind.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;
use kube_sim::server::RunningKubeSim;
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::process::metrics::Metrics;
use omni_sim::{OmniSim, Role, RunningOmniSim};
use serde_json::{Value, json};

use super::chart_repo::{Repo, start_repo};
use super::{helm_bin, kube_sim};

/// The chart repository's user and password (a secret of every scenario).
pub const REPO_USER: &str = "chart-reader";
pub const REPO_PASSWORD: &str = "stack-repo-password-7f3a91";
/// Name of the OmniConnection, the OmniCluster (also its name in Omni) and its control plane.
pub const CONNECTION: &str = "omni";
pub const CLUSTER: &str = "prod";
const GROUP: &str = "omni.texashpc.com";

/// The emulators, the chart repository and the directories helm uses.
pub struct Stack {
    pub ns: String,
    pub mgmt: RunningKubeSim,
    pub client: kube::Client,
    pub omni: RunningOmniSim,
    /// The Omni service-account key (a secret).
    pub omni_key: String,
    pub workload: RunningKubeSim,
    pub workload_client: kube::Client,
    pub repo: Repo,
    pub metrics: Arc<Metrics>,
    dir: tempfile::TempDir,
}

/// The API resource of one of the operator's kinds.
pub fn resource(kind: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{GROUP}/v1alpha1"),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// An object of one of the operator's kinds in `ns`.
pub fn ours(kind: &str, ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// Creates the empty namespace `name`.
pub async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
        .unwrap_or_else(|e| panic!("{e}"));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

impl Stack {
    /// Starts everything and creates, in namespace `ns`: the Omni key Secret, the chart
    /// repository credentials, OmniConnection [`CONNECTION`] and OmniCluster [`CLUSTER`] with
    /// one control-plane machine. The operator is not started.
    pub async fn start(ns: &str) -> Stack {
        super::operator_logs();
        let (mgmt, client) = kube_sim().await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in omni_operator::api::crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("create CRD: {e}"));
        }
        create_namespace(&client, ns).await;
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &resource("OmniCluster"));
        let until = tokio::time::Instant::now() + super::WAIT;
        while clusters.list(&ListParams::default()).await.is_err() {
            assert!(tokio::time::Instant::now() < until, "CRDs never servable");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (workload, workload_client) = kube_sim().await;
        let omni = OmniSim::builder()
            // Static machine IDs in these tests are not seeded: let them connect.
            .auto_register_machines(true)
            .status_step(Duration::from_millis(20))
            .workload_provider(Arc::new(super::WorkloadAt(workload.base_url.clone())))
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        let omni_key = omni
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        let repo = start_repo(REPO_USER, REPO_PASSWORD, None).await;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap_or_else(|e| panic!("{e}"));
        let stack = Stack {
            ns: ns.to_string(),
            mgmt,
            client,
            omni,
            omni_key,
            workload,
            workload_client,
            repo,
            metrics: Arc::new(Metrics::new()),
            dir,
        };
        stack
            .create_secret(
                "omni-service-account",
                json!({"serviceAccountKey": stack.omni_key}),
            )
            .await;
        stack
            .create_secret(
                "repo-credentials",
                json!({"username": REPO_USER, "password": REPO_PASSWORD}),
            )
            .await;
        stack
            .create(ours(
                "OmniConnection",
                ns,
                CONNECTION,
                json!({
                    "endpoint": stack.omni.endpoint(),
                    "auth": {"serviceAccountSecretRef": {"name": "omni-service-account", "key": "serviceAccountKey"}},
                }),
            ))
            .await;
        stack
            .create_cluster(CLUSTER, "aaaaaaaa-0000-4000-8000-000000000001")
            .await;
        stack
    }

    /// Creates an object of any kind from its JSON (plural = lowercase kind + "s"), in the
    /// stack's namespace unless it names another.
    pub async fn create(&self, mut obj: Value) {
        if obj["metadata"]["namespace"].is_null() {
            obj["metadata"]["namespace"] = json!(self.ns);
        }
        super::create_json(&self.client, obj).await;
    }

    /// Creates a Secret in the stack's namespace from `stringData`.
    pub async fn create_secret(&self, name: &str, data: Value) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "stringData": data,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("create Secret {name}: {e}"));
    }

    /// The usual dependants of an export, in the stack's namespace: the OmniKubeconfigExport
    /// `names.export` (its Secret has the same name), an OmniHelmRelease `names.release` of the
    /// stack's chart and an OmniSecretSync `names.sync` copying the Secret
    /// `registry-credentials` (created here with `registry_password`) into `apps`, both using the
    /// exported kubeconfig. Nothing is awaited beyond the creates.
    pub async fn create_export_with_consumers(
        &self,
        names: Dependants<'_>,
        registry_password: &str,
    ) {
        self.create_secret(
            "registry-credentials",
            json!({"password": registry_password}),
        )
        .await;
        self.create_export(names.export).await;
        self.create_release(names.release, names.export, "hello")
            .await;
        self.create_sync(names.sync, names.export).await;
    }

    /// Objects of one of the operator's kinds in the stack's namespace.
    pub fn api(&self, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &resource(kind))
    }

    /// The operator's helm work directory (cache, config, per-release sessions).
    pub fn helm_work_dir(&self) -> PathBuf {
        self.dir.path().join("helm-work")
    }

    /// The `TMPDIR` helm runs with.
    pub fn tmp_dir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// A helm wrapper that runs the test tools' helm with `TMPDIR` in the stack's directory.
    fn helm_wrapper(&self) -> PathBuf {
        let script = self.dir.path().join("helm");
        if !script.exists() {
            let text = format!(
                "#!/bin/sh\nTMPDIR='{}'\nexport TMPDIR\nexec '{}' \"$@\"\n",
                self.tmp_dir().display(),
                helm_bin().display()
            );
            std::fs::write(&script, text).unwrap_or_else(|e| panic!("write helm wrapper: {e}"));
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("chmod: {e}"));
        }
        script
    }

    /// The configuration every operator of this stack runs with.
    pub fn operator_config(&self) -> OperatorConfig {
        let mut config = OperatorConfig::embedded(Scope::Namespace(self.ns.clone()));
        config.metrics = self.metrics.clone();
        config.helm_binary = self.helm_wrapper();
        config.helm_work_dir = self.helm_work_dir();
        config.min_interval = Duration::from_secs(1);
        config.secret_sync_resync = Duration::from_secs(5);
        config
    }

    /// Starts an operator against the stack.
    pub fn start_operator(&self) -> Operator {
        Operator::spawn(self.operator_config(), self.client.clone())
    }

    /// Files under the helm work directory and `TMPDIR` whose content holds one of `secrets`
    /// (paths relative to the stack's directory).
    pub fn files_holding(&self, secrets: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for root in [self.helm_work_dir(), self.tmp_dir()] {
            walk(&root, &mut |path| {
                let Ok(bytes) = std::fs::read(path) else {
                    return;
                };
                let text = String::from_utf8_lossy(&bytes);
                if secrets
                    .iter()
                    .filter(|s| s.len() >= 8)
                    .any(|s| text.contains(s))
                {
                    let shown = path.strip_prefix(self.dir.path()).unwrap_or(path);
                    found.push(shown.display().to_string());
                }
            });
        }
        found
    }

    pub async fn shutdown(self) {
        self.omni.shutdown().await;
        self.mgmt.shutdown();
        self.workload.shutdown();
    }
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, visit),
            Ok(t) if t.is_file() => visit(&path),
            _ => {}
        }
    }
}

/// One running embedded operator.
pub struct Operator {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Operator {
    /// Starts an embedded operator with `config` against the API server behind `client`.
    pub fn spawn(config: OperatorConfig, client: kube::Client) -> Operator {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run_operator(config, client, async move {
            let _ = rx.await;
        }));
        Operator {
            stop: Some(tx),
            task,
        }
    }

    /// Kills the operator where it stands, like a crashed or OOM-killed pod: its task is aborted
    /// at its next await point, in-flight reconciles and helm processes are dropped, nothing
    /// drains. Returns once the task is gone.
    pub async fn kill(mut self) {
        // Abort before the stop channel is dropped: a dropped sender would start a graceful
        // shutdown instead.
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Stops the operator gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match (&mut self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("operator stopped with an error: {e:#}"),
            Err(e) => panic!("operator task failed: {e}"),
        }
    }
}

/// Names of an export and the release and sync that use its Secret.
#[derive(Debug, Clone, Copy)]
pub struct Dependants<'a> {
    pub export: &'a str,
    pub release: &'a str,
    pub sync: &'a str,
}
