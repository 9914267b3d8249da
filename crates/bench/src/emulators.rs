//! Fresh emulators for one measured run: the management kube-sim (HTTPS, token users), omni-sim
//! with a machine pool sized to the fleet and equal per-RPC / per-connect latency, a workload
//! kube-sim per exported cluster, and (with Helm releases) a chart repository.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_sim::auth::{Identity, StaticAuthenticator};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::{KubeSim, RunningKubeSim};
use kube_sim::tls::CertificateAuthority;
use omni_sandbox::chart_repo::ChartRepo;
use omni_sandbox::workload::Workloads;
use omni_sim::{OmniSim, PoolMachine, Role, RunningOmniSim};
use serde_json::json;

use crate::fleet::{self, FleetSpec};

/// The user the bench applies and edits the fleet as.
pub const BENCH_USER: &str = "omni-bench";
/// The user the operator authenticates as; its writes are the ones counted.
pub const OPERATOR_USER: &str = "system:serviceaccount:omni-bench:omni-operator";
/// The chart every OmniHelmRelease installs.
pub const CHART: &str = "bench-app";
/// Its version.
pub const CHART_VERSION: &str = "0.1.0";

/// Latency added to every Omni call and every new Omni connection, the same for every variant
/// (loopback would otherwise flatter a design that makes many calls or connections).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct OmniLatency {
    /// Added to each gRPC call, in milliseconds.
    pub per_rpc_ms: u64,
    /// Added to each accepted connection before it is served, in milliseconds.
    pub per_connect_ms: u64,
}

/// One set of running emulators.
pub struct Emulators {
    /// Management cluster.
    pub management: RunningKubeSim,
    /// A client of it as [`BENCH_USER`].
    pub client: kube::Client,
    /// Omni.
    pub omni: RunningOmniSim,
    /// Workload clusters, started when Omni mints their first kubeconfig.
    pub workloads: Arc<Workloads>,
    /// The operator's kubeconfig (token of [`OPERATOR_USER`]).
    pub operator_kubeconfig: PathBuf,
    /// The Omni service-account key the OmniConnection uses.
    pub omni_key: String,
    /// Chart repository for OmniHelmReleases.
    pub chart_repo: Option<ChartRepo>,
}

/// Where each kind is served: group, version, plural (from the operator's CRDs, computed once).
pub fn api_resource(kind: &str) -> anyhow::Result<ApiResource> {
    static SERVED: std::sync::OnceLock<Vec<ApiResource>> = std::sync::OnceLock::new();
    let served = SERVED.get_or_init(|| {
        let mut out = vec![
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Secret"),
                "secrets",
            ),
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "ConfigMap"),
                "configmaps",
            ),
        ];
        for crd in omni_operator::api::crds() {
            let version = crd
                .spec
                .versions
                .iter()
                .find(|v| v.storage)
                .map(|v| v.name.clone())
                .unwrap_or_else(|| "v1alpha1".into());
            out.push(ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&crd.spec.group, &version, &crd.spec.names.kind),
                &crd.spec.names.plural,
            ));
        }
        out
    });
    served
        .iter()
        .find(|ar| ar.kind == kind)
        .cloned()
        .with_context(|| format!("no CRD for kind {kind}"))
}

/// A namespaced dynamic API of `kind` in the fleet's namespace.
pub fn api(client: &kube::Client, kind: &str) -> anyhow::Result<Api<DynamicObject>> {
    Ok(Api::namespaced_with(
        client.clone(),
        fleet::NAMESPACE,
        &api_resource(kind)?,
    ))
}

fn token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("bench-{nanos:x}-{}", std::process::id())
}

async fn client_for(kubeconfig: &Kubeconfig) -> anyhow::Result<kube::Client> {
    let parsed = kube::config::Kubeconfig::from_yaml(&kubeconfig.to_yaml()?)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

impl Emulators {
    /// Starts everything for `spec`, installs the CRDs, the namespace and the Omni key Secret.
    pub async fn start(
        spec: &FleetSpec,
        latency: OmniLatency,
        dir: &Path,
        helm: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let ca = CertificateAuthority::generate("omni-bench-ca")?;
        let serving = ca.issue_server(&["localhost", "127.0.0.1"])?;
        let authenticator = Arc::new(StaticAuthenticator::new().without_anonymous());
        let (bench_token, operator_token) = (token(), format!("op-{}", token()));
        authenticator.add_token(
            bench_token.clone(),
            Identity::new(BENCH_USER, &["system:masters"]),
        );
        authenticator.add_token(
            operator_token.clone(),
            Identity::new(OPERATOR_USER, &["system:serviceaccounts"]),
        );
        let management = KubeSim::builder()
            .tls(ca.server_config(&serving)?)
            .authenticator(authenticator)
            // A watcher that briefly falls behind during the cold start should resume, not
            // re-list: size the history to the fleet.
            .watch_history((spec.objects() * 4).max(10_000))
            .start()
            .await?;
        let kubeconfig = |user: &str, token: &str| {
            Kubeconfig::new(
                management.base_url.clone(),
                user,
                Credential::Token(token.to_owned()),
            )
            .with_ca_pem(ca.cert_pem())
            .with_cluster_name("omni-bench")
            .with_namespace(fleet::NAMESPACE)
        };
        let client = client_for(&kubeconfig(BENCH_USER, &bench_token)).await?;
        let operator_kubeconfig = dir.join("operator.kubeconfig");
        kubeconfig("omni-operator", &operator_token).write(&operator_kubeconfig)?;

        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in omni_operator::api::crds() {
            crds.create(&PostParams::default(), &crd).await?;
        }
        let namespaces: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Namespace"),
                "namespaces",
            ),
        );
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": fleet::NAMESPACE},
                }))?,
            )
            .await?;
        // CRDs are served once a list answers.
        wait_served(&client).await?;

        let workloads = Arc::new(Workloads::new(CertificateAuthority::generate(
            "omni-bench-workload-ca",
        )?));
        let mut builder = OmniSim::builder()
            .status_step(Duration::from_millis(100))
            .workload_provider(workloads.clone());
        for i in 0..spec.clusters {
            for (role, label) in [(0u8, "control-plane"), (1, "worker")] {
                builder = builder.machine(PoolMachine {
                    id: fleet::machine_id(i, role),
                    labels: [("role".to_owned(), label.to_owned())].into(),
                    disconnected: false,
                });
            }
        }
        let omni = builder.start().await?;
        if latency.per_rpc_ms > 0 {
            for method in omni_rpc_methods() {
                omni.set_latency(method, Duration::from_millis(latency.per_rpc_ms));
            }
        }
        omni.set_connect_latency(Duration::from_millis(latency.per_connect_ms));
        let omni_key = omni.register_service_account("omni-bench", Role::Operator)?;
        let secrets = api(&client, "Secret")?;
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": fleet::OMNI_KEY_SECRET, "namespace": fleet::NAMESPACE},
                    "stringData": {"serviceAccountKey": omni_key},
                }))?,
            )
            .await?;

        let chart_repo = match (spec.needs_helm(), helm) {
            (false, _) => None,
            (true, Some(helm)) => Some(ChartRepo::start(helm, dir, CHART, CHART_VERSION).await?),
            (true, None) => {
                anyhow::bail!("--helm-releases and --sets need helm (HELM_BIN or --helm-binary)")
            }
        };
        Ok(Self {
            management,
            client,
            omni,
            workloads,
            operator_kubeconfig,
            omni_key,
            chart_repo,
        })
    }

    /// Stops the servers (the workload clusters too, so runs do not accumulate them).
    pub async fn shutdown(self) {
        for (name, _) in self.workloads.clusters() {
            if let Some(sim) = self.workloads.get(&name) {
                sim.handle.abort();
            }
        }
        self.management.shutdown();
        self.omni.shutdown().await;
    }
}

/// Every Omni RPC the operator makes, for the equal per-call latency.
fn omni_rpc_methods() -> [&'static str; 10] {
    use omni_sim::methods as m;
    [
        m::GET,
        m::LIST,
        m::CREATE,
        m::UPDATE,
        m::DESTROY,
        m::WATCH,
        m::TEARDOWN,
        m::TEARDOWN_AND_DESTROY,
        m::KUBECONFIG,
        m::CREATE_SERVICE_ACCOUNT,
    ]
}

async fn wait_served(client: &kube::Client) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let clusters = api(client, "OmniCluster")?;
        if clusters.list(&Default::default()).await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the CRDs were never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The workload kube-sim of cluster `i`, if Omni has minted a kubeconfig for it.
pub fn workload(emulators: &Emulators, i: usize) -> Option<Arc<RunningKubeSim>> {
    emulators.workloads.get(&fleet::cluster_name(i))
}
