//! One operator against omni-sim at a chosen backend API version: kube-sim with our CRDs and a
//! namespace, omni-sim, the key Secret, an OmniConnection `omni` and the embedded operator.
//! The Omni 2026 system tests run their scenarios on it once per backend API version.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use omni_client::proto::cosi::resource::Resource;
use omni_operator::api::{OmniCluster, OmniConnection, OmniControlPlane};
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_sim::{OmniSim, Role, RunningOmniSim};
use serde_json::json;
use tokio::time::Instant;

use super::{WAIT, condition, install_operator_api, wait_for};

/// Namespace of every object; the OmniCluster (and Omni cluster) is `demo`.
pub const NS: &str = "omni-api";
pub const CLUSTER: &str = "demo";
/// The static control-plane machine of [`OmniApiEnv::static_cluster`].
pub const MACHINE: &str = "22222222-2222-4222-8222-222222222222";
/// Omni's annotation naming the tool that manages a resource.
pub const GITOPS_ANNOTATION: &str = "omni.sidero.dev/managed-by-gitops-tools";

/// The running system; [`OmniApiEnv::shutdown`] stops it and checks the key was never logged.
pub struct OmniApiEnv {
    pub kube: kube_sim::server::RunningKubeSim,
    pub client: kube::Client,
    pub sim: RunningOmniSim,
    /// The Omni service-account key (a secret).
    pub key: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    operator: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl OmniApiEnv {
    /// omni-sim speaking backend API `api_version`; machines named by static IDs connect
    /// without being seeded.
    pub async fn start(api_version: u32) -> OmniApiEnv {
        OmniApiEnv::start_with(api_version, true).await
    }

    /// `auto_register`: whether machines named by static IDs connect without being seeded.
    pub async fn start_with(api_version: u32, auto_register: bool) -> OmniApiEnv {
        super::operator_logs();
        let (kube, client) = super::kube_sim().await;
        install_operator_api(&client, NS).await;
        let sim = OmniSim::builder()
            .auto_register_machines(auto_register)
            .status_step(Duration::from_millis(20))
            .backend_api_version(api_version)
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        let key = sim
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "omni-key", "namespace": NS},
            "stringData": {"serviceAccountKey": key},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("create Secret: {e}"));
        let config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let operator = tokio::spawn(run_operator(config, client.clone(), async move {
            let _ = rx.await;
        }));
        let env = OmniApiEnv {
            kube,
            client,
            sim,
            key,
            stop: Some(tx),
            operator: Some(operator),
        };
        env.create::<OmniConnection>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": "omni", "namespace": NS},
            "spec": {
                "endpoint": env.sim.endpoint(),
                "auth": {"serviceAccountSecretRef": {"name": "omni-key", "key": "serviceAccountKey"}},
            },
        }))
        .await;
        env
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create<K>(&self, obj: serde_json::Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let typed: K = serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
        self.api::<K>()
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", typed.name_any()))
    }

    /// OmniCluster `demo` (Kubernetes v1.35.0, Talos v1.13.2, synced every second) with `extra`
    /// merged into its spec, and a control plane of the one static machine [`MACHINE`].
    pub async fn static_cluster(&self, extra: serde_json::Value) {
        let mut spec = json!({
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "syncInterval": "1s",
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        self.create::<OmniCluster>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": CLUSTER, "namespace": NS},
            "spec": spec,
        }))
        .await;
        self.create::<OmniControlPlane>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniControlPlane",
            "metadata": {"name": "demo-cp", "namespace": NS},
            "spec": {"clusterRef": {"name": CLUSTER}, "machines": [MACHINE]},
        }))
        .await;
    }

    /// Merge-patches the OmniCluster's spec (`null` removes a field).
    pub async fn patch_cluster_spec(&self, spec: serde_json::Value) {
        self.api::<OmniCluster>()
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .unwrap_or_else(|e| panic!("patch OmniCluster: {e}"));
    }

    /// Waits until the OmniCluster's `Synced` condition has `status`.
    pub async fn synced(&self, status: &str) -> OmniCluster {
        wait_for(&self.api::<OmniCluster>(), CLUSTER, "Synced", |c| {
            condition(c, "Synced").is_some_and(|(s, _, _)| s == status)
        })
        .await
    }

    /// Waits until the OmniCluster satisfies `pred`.
    pub async fn cluster_until(
        &self,
        what: &str,
        pred: impl Fn(&OmniCluster) -> bool,
    ) -> OmniCluster {
        wait_for(&self.api::<OmniCluster>(), CLUSTER, what, pred).await
    }

    /// Annotates the key Secret, which makes the connection controller check Omni again at
    /// once (instead of at its 5-minute re-check), e.g. after an Omni upgrade.
    pub async fn touch_key_secret(&self, value: &str) {
        self.api::<Secret>()
            .patch(
                "omni-key",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": value}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("touch Secret: {e}"));
    }

    pub async fn shutdown(mut self) {
        let logs = super::operator_logs();
        assert!(!logs.contains(&self.key), "the key appears in the logs");
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.operator.take() {
            let joined = tokio::time::timeout(WAIT, task)
                .await
                .unwrap_or_else(|_| panic!("operator did not stop"));
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("operator failed: {e:#}"),
                Err(e) => panic!("operator task: {e}"),
            }
        }
        self.sim.shutdown().await;
        // kube-sim is left serving until the test's runtime ends. Aborting it first would put
        // watchers the operator leaves behind (the export controller's cluster reflector,
        // spawned without a shutdown path or backoff) into a retry loop that spins forever
        // once the runtime starts shutting down, hanging the test.
        drop(self.kube);
    }
}

/// Polls `pred` (over omni-sim's store, typically) until it holds; panics after [`WAIT`].
pub async fn eventually(what: &str, mut pred: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while !pred() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An annotation of an Omni resource.
pub fn annotation(r: &Resource, key: &str) -> Option<String> {
    r.metadata.as_ref()?.annotations.get(key).cloned()
}
