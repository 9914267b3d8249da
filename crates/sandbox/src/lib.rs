//! omni-sandbox: the whole system in one process — a management kube-sim over HTTPS, omni-sim
//! with a machine pool, the operator (controllers and admission webhook, called by kube-sim),
//! a workload kube-sim per Omni cluster, and a chart repository for the sample Helm release.

#![warn(missing_docs)]

pub mod chart_repo;
pub mod cli;
pub mod pod;
pub mod samples;
pub mod status;
pub mod workload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sim::admission::WebhookDispatcher;
use kube_sim::auth::StaticAuthenticator;
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::{KubeSim, RunningKubeSim};
use kube_sim::tls::CertificateAuthority;
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::process::webhook::WebhookConfig;
use omni_sim::{OmniSim, PoolMachine, Role, RunningOmniSim};
use serde_json::json;

use crate::chart_repo::ChartRepo;
use crate::workload::Workloads;

/// The namespace the operator watches and the samples live in.
pub const NAMESPACE: &str = "omni-cluster-operator-system";
/// Name of the webhook Service the ValidatingWebhookConfiguration points at.
const WEBHOOK_SERVICE: &str = "omni-cluster-operator-webhook-service";

/// How to start the sandbox.
#[derive(Debug, Clone)]
pub struct Options {
    /// Management API address (port 0: any free port).
    pub listen: SocketAddr,
    /// Working directory for the kubeconfig, certificates and helm state.
    pub dir: PathBuf,
    /// Helm executable for OmniHelmRelease.
    pub helm: PathBuf,
    /// Do not apply the samples.
    pub empty: bool,
    /// Run the operator as the Helm chart deploys it (see [`pod`]) instead of in-process.
    pub as_deployed: Option<AsDeployed>,
}

/// How to run the operator from its chart ([`Options::as_deployed`]).
#[derive(Debug, Clone)]
pub struct AsDeployed {
    /// The built `omni-operator` binary (mapped to the image's `/omni-operator`).
    pub operator_binary: PathBuf,
    /// Extra `--set` values for the operator chart.
    pub values: Vec<String>,
}

/// Name of the chart release the as-deployed mode renders.
const RELEASE: &str = "omni-cluster-operator";
/// The webhook serving-certificate Secret the as-deployed mode provides (cert-manager's job).
const WEBHOOK_CERT_SECRET: &str = "omni-cluster-operator-webhook-cert";

/// A running sandbox. Dropping it stops everything but the operator, which stops with
/// [`Sandbox::shutdown`].
pub struct Sandbox {
    /// Management cluster.
    pub management: RunningKubeSim,
    /// Admin client of the management cluster.
    pub client: kube::Client,
    /// Omni simulator.
    pub omni: RunningOmniSim,
    /// Workload clusters.
    pub workloads: Arc<Workloads>,
    /// Path of the admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The objects applied from the samples: `(kind, name)`.
    pub applied: Vec<(String, String)>,
    /// The operator's pod in the as-deployed mode.
    pub pod: Option<pod::Pod>,
    /// Where the operator serves `/metrics` (plain HTTP in-process; as the chart configures it
    /// in the as-deployed mode), on loopback.
    pub metrics: SocketAddr,
    deployer: Option<Deployer>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    operator: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _repo: Option<ChartRepo>,
}

/// The machines of the pool: the two the samples name, plus spares in two classes.
fn machine_pool() -> Vec<PoolMachine> {
    let machine = |id: &str, labels: &[(&str, &str)]| PoolMachine {
        id: id.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        disconnected: false,
    };
    let mut pool = vec![
        machine(
            "11111111-1111-4111-8111-111111111111",
            &[("role", "control-plane"), ("arch", "amd64")],
        ),
        machine(
            "22222222-2222-4222-8222-222222222222",
            &[("role", "worker"), ("arch", "amd64"), ("gpu", "true")],
        ),
    ];
    for i in 1..=2 {
        pool.push(machine(
            &format!("33333333-3333-4333-8333-00000000000{i}"),
            &[("role", "control-plane"), ("arch", "amd64")],
        ));
    }
    for i in 1..=5 {
        pool.push(machine(
            &format!("44444444-4444-4444-8444-00000000000{i}"),
            &[("role", "worker"), ("arch", "amd64")],
        ));
    }
    pool
}

/// A port that is free right now on loopback.
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

fn write_private(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)?;
    Ok(())
}

impl Sandbox {
    /// Starts everything; `progress` is told each step as it begins.
    pub async fn start(opts: &Options, progress: impl Fn(&str)) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&opts.dir)
            .with_context(|| format!("creating {}", opts.dir.display()))?;
        // Every path handed on is absolute: the pod runner's script changes its root and
        // directory, so a relative `--dir` (the default, `sandbox`) would name nothing there.
        let opts = &Options {
            dir: std::fs::canonicalize(&opts.dir)
                .with_context(|| format!("resolving {}", opts.dir.display()))?,
            helm: std::path::absolute(&opts.helm)?,
            as_deployed: opts
                .as_deployed
                .as_ref()
                .map(|deployed| -> anyhow::Result<AsDeployed> {
                    Ok(AsDeployed {
                        operator_binary: std::path::absolute(&deployed.operator_binary)?,
                        values: deployed.values.clone(),
                    })
                })
                .transpose()?,
            ..opts.clone()
        };
        let ca = CertificateAuthority::generate("omni-sandbox-ca")?;

        progress("starting the management cluster (kube-sim, HTTPS)");
        let dispatcher = WebhookDispatcher::new();
        let serving = ca.issue_server(&["localhost", "127.0.0.1"])?;
        let tls = ca.server_config(&serving)?;
        let authenticator = Arc::new(StaticAuthenticator::new().without_anonymous());
        let builder = |addr: SocketAddr| {
            let b = KubeSim::builder()
                .listen(addr)
                .tls(tls.clone())
                .authenticator(authenticator.clone())
                .admission(dispatcher.clone());
            // As deployed, the chart's own RBAC is what authorises the operator.
            match opts.as_deployed {
                Some(_) => b.authorizer(Arc::new(kube_sim::wiring::RbacAuthorizer)),
                None => b,
            }
        };
        let management = match builder(opts.listen).start().await {
            Ok(m) => m,
            Err(e) if opts.listen.port() != 0 => {
                progress(&format!("{e}; using a free port instead"));
                builder(SocketAddr::new(opts.listen.ip(), 0))
                    .start()
                    .await?
            }
            Err(e) => return Err(e.into()),
        };
        let admin = ca.issue_client("sandbox-admin", &["system:masters"])?;
        let kubeconfig_path = opts.dir.join("kubeconfig");
        let kubeconfig = Kubeconfig::new(
            management.base_url.clone(),
            "sandbox-admin",
            Credential::ClientCertificate {
                cert_pem: admin.cert_pem.clone(),
                key_pem: admin.key_pem.clone(),
            },
        )
        .with_ca_pem(ca.cert_pem())
        .with_cluster_name("omni-sandbox")
        .with_namespace(NAMESPACE);
        kubeconfig.write(&kubeconfig_path)?;
        let client = {
            let parsed = kube::config::Kubeconfig::from_yaml(&kubeconfig.to_yaml()?)?;
            let config = kube::Config::from_custom_kubeconfig(
                parsed,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?;
            kube::Client::try_from(config)?
        };

        progress("installing the CRDs and the operator namespace");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in omni_operator::api::crds() {
            crds.create(&PostParams::default(), &crd).await?;
        }
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;

        progress("starting omni-sim with 9 machines in two machine classes");
        // Workload clusters get their own CA, like separate real clusters.
        let workloads = Arc::new(Workloads::new(CertificateAuthority::generate(
            "omni-sandbox-workload-ca",
        )?));
        let mut omni_builder = OmniSim::builder()
            .status_step(Duration::from_millis(100))
            .machine_class("control-plane", &["role=control-plane"])
            .machine_class("workers", &["role=worker"])
            .workload_provider(workloads.clone());
        for m in machine_pool() {
            omni_builder = omni_builder.machine(m);
        }
        let omni = omni_builder.start().await?;
        // The template's manifests appear in the workload cluster, as Omni's manifest sync
        // writes them.
        omni.set_manifest_sink(Some(workloads.clone()));
        let key = omni.register_service_account("omni-sandbox", Role::Operator)?;
        write_private(&opts.dir.join("omni-service-account.key"), key.as_bytes())?;

        let (stop, operator, pod, deployer, metrics) = match &opts.as_deployed {
            Some(deployed) => {
                progress("running the operator as the Helm chart deploys it");
                let deployer = Deployer {
                    opts: opts.clone(),
                    deployed: deployed.clone(),
                    api: management
                        .base_url
                        .rsplit_once("://")
                        .map_or(management.base_url.as_str(), |(_, a)| a)
                        .parse()
                        .context("the management API address")?,
                    ca: Arc::new(ca),
                    authenticator: authenticator.clone(),
                    dispatcher: dispatcher.clone(),
                    pods: std::sync::atomic::AtomicU32::new(0),
                };
                let pod = deployer.start_pod(&client).await?;
                let metrics = pod.metrics;
                (None, None, Some(pod.pod), Some(deployer), metrics)
            }
            None => {
                progress("starting the operator and registering its admission webhook");
                let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
                let (stop, operator) =
                    start_in_process(opts, &client, &ca, &dispatcher, metrics).await?;
                (Some(stop), Some(operator), None, None, metrics)
            }
        };

        let mut sandbox = Sandbox {
            management,
            client,
            omni,
            workloads,
            kubeconfig: kubeconfig_path,
            applied: Vec::new(),
            pod,
            metrics,
            deployer,
            stop,
            operator,
            _repo: None,
        };
        if !opts.empty {
            progress("serving a chart repository for the sample OmniHelmRelease");
            let docs = samples::load()?;
            let (chart, version) = samples::helm_chart(&docs).unwrap_or_default();
            let repo = if chart.is_empty() {
                None
            } else {
                Some(ChartRepo::start(&opts.helm, &opts.dir, &chart, &version).await?)
            };
            progress("creating the Secrets the samples reference");
            sandbox.create_sample_secrets(&key).await?;
            progress("applying config/samples");
            let rewritten = samples::rewrite(
                docs,
                sandbox.omni.endpoint(),
                repo.as_ref().map(|r| r.url.as_str()),
            );
            sandbox.applied = samples::apply(&sandbox.client, &rewritten).await?;
            sandbox._repo = repo;
        }
        Ok(sandbox)
    }

    async fn create_sample_secrets(&self, key: &str) -> anyhow::Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), NAMESPACE);
        let docker = json!({"auths": {"ghcr.io": {"username": "sandbox", "password": "not-a-real-token",
            "auth": base64::engine::general_purpose::STANDARD.encode("sandbox:not-a-real-token")}}});
        for (name, ty, data) in [
            (
                "omni-service-account",
                "Opaque",
                json!({"serviceAccountKey": key}),
            ),
            (
                "edge-sample-ghcr",
                "kubernetes.io/dockerconfigjson",
                json!({".dockerconfigjson": docker.to_string()}),
            ),
        ] {
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": NAMESPACE},
                "type": ty,
                "stringData": data,
            }))?;
            secrets
                .patch(
                    name,
                    &PatchParams::apply("omni-sandbox").force(),
                    &Patch::Apply(&secret),
                )
                .await
                .with_context(|| format!("creating Secret {name}"))?;
        }
        Ok(())
    }

    /// Stops the operator (its controllers and webhook), then the servers.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(op) = self.operator.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), op).await;
        }
        if let Some(mut pod) = self.pod.take() {
            let _ = pod.terminate().await;
        }
    }
}

/// Runs the operator in this process with the webhook on a free port.
async fn start_in_process(
    opts: &Options,
    client: &kube::Client,
    ca: &CertificateAuthority,
    dispatcher: &WebhookDispatcher,
    metrics: SocketAddr,
) -> anyhow::Result<(
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
)> {
    let webhook_dir = opts.dir.join("webhook-certs");
    std::fs::create_dir_all(&webhook_dir)?;
    let webhook_host = format!("{WEBHOOK_SERVICE}.{NAMESPACE}.svc");
    let webhook_cert = ca.issue_server(&[webhook_host.as_str()])?;
    write_private(
        &webhook_dir.join("tls.crt"),
        webhook_cert.cert_pem.as_bytes(),
    )?;
    write_private(
        &webhook_dir.join("tls.key"),
        webhook_cert.key_pem.as_bytes(),
    )?;
    let webhook_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    dispatcher.register_service(NAMESPACE, WEBHOOK_SERVICE, 443, webhook_addr);
    let mut config = OperatorConfig::embedded(Scope::Namespace(NAMESPACE.into()));
    config.webhook = Some(WebhookConfig {
        bind: webhook_addr,
        cert_dir: webhook_dir,
        cert_name: "tls.crt".into(),
        key_name: "tls.key".into(),
    });
    // `/metrics` as the chart serves it by default (plain HTTP), on loopback.
    config.metrics_bind = Some(metrics);
    config.helm_binary = opts.helm.clone();
    config.helm_work_dir = opts.dir.join("helm-operator");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(run_operator(config, client.clone(), async move {
        let _ = stopped.await;
    }));
    wait_for_webhook(webhook_addr).await?;
    register_webhook(client, ca).await?;
    Ok((stop, operator))
}

/// Kinds of the rendered operator chart that the management cluster stores; the Deployment
/// becomes the pod instead, and cert-manager's kinds are not served here.
const APPLIED_KINDS: &[&str] = &[
    "Namespace",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "Service",
    "ValidatingWebhookConfiguration",
];

/// What the as-deployed mode needs to start (further) pods of the operator chart.
struct Deployer {
    opts: Options,
    deployed: AsDeployed,
    api: SocketAddr,
    ca: Arc<CertificateAuthority>,
    authenticator: Arc<StaticAuthenticator>,
    dispatcher: WebhookDispatcher,
    pods: std::sync::atomic::AtomicU32,
}

impl Sandbox {
    /// In the as-deployed mode, starts one more pod of the operator chart (as a rolling update
    /// does) with ports of its own, and moves the webhook Service to it; returns once it is
    /// Ready.
    pub async fn start_another_pod(&self) -> anyhow::Result<pod::Pod> {
        let deployer = self
            .deployer
            .as_ref()
            .context("the sandbox does not run the operator as deployed")?;
        Ok(deployer.start_pod(&self.client).await?.pod)
    }
}

impl Deployer {
    /// Renders the operator chart, applies its RBAC, Service and webhook configuration, does what
    /// cert-manager and the token controller would (serving certificate, CA bundle, a token for the
    /// service account), and starts the Deployment's pod; returns once it is Ready.
    async fn start_pod(&self, client: &kube::Client) -> anyhow::Result<StartedPod> {
        let (opts, deployed, ca) = (&self.opts, &self.deployed, &self.ca);
        let (authenticator, dispatcher) = (&self.authenticator, &self.dispatcher);
        let index = self.pods.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (health, metrics, webhook) = (free_port()?, free_port()?, free_port()?);
        let mut values = vec![
            "certManager.enabled=false".to_string(),
            format!("webhook.certSecretName={WEBHOOK_CERT_SECRET}"),
            format!(
                "webhook.caBundle={}",
                base64::engine::general_purpose::STANDARD.encode(ca.cert_pem())
            ),
            format!("healthProbe.port={health}"),
            format!("metrics.port={metrics}"),
            format!("webhook.port={webhook}"),
        ];
        values.extend(deployed.values.iter().cloned());
        let chart = repo_root().join("charts/omni-cluster-operator");
        let docs = pod::helm_template(&opts.helm, &chart, RELEASE, NAMESPACE, &values)?;
        for doc in docs.iter().filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| APPLIED_KINDS.contains(&k))
        }) {
            if doc["kind"] == "Namespace" && doc["metadata"]["name"] == NAMESPACE {
                continue;
            }
            apply_builtin(client, doc).await?;
        }
        let webhook_service = docs
            .iter()
            .find(|d| d["kind"] == "Service" && d["spec"]["ports"][0]["port"] == 443)
            .and_then(|d| d["metadata"]["name"].as_str());
        if let Some(service) = webhook_service {
            dispatcher.register_service(
                NAMESPACE,
                service,
                443,
                SocketAddr::from(([127, 0, 0, 1], webhook)),
            );
        }
        let deployment = pod::find_deployment(&docs)?;
        let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let token = format!("sa-token-{}", uuid_like());
        authenticator.add_token(
            token.clone(),
            kube_sim::auth::Identity::new(
                format!("system:serviceaccount:{NAMESPACE}:{account}"),
                &[
                    "system:serviceaccounts",
                    &format!("system:serviceaccounts:{NAMESPACE}"),
                ],
            ),
        );
        let host = webhook_service
            .map(|s| format!("{s}.{NAMESPACE}.svc"))
            .unwrap_or_default();
        let serving = ca.issue_server(&[host.as_str()])?;
        let mut cert = std::collections::BTreeMap::new();
        cert.insert("tls.crt".to_string(), serving.cert_pem.clone().into_bytes());
        cert.insert("tls.key".to_string(), serving.key_pem.clone().into_bytes());
        cert.insert("ca.crt".to_string(), ca.cert_pem().as_bytes().to_vec());
        let pod_dir = opts.dir.join(format!("pod-{index}"));
        std::fs::create_dir_all(&pod_dir)?;
        let ctx = pod::PodContext {
            namespace: NAMESPACE.into(),
            name: format!("{RELEASE}-controller-manager-{index}"),
            api: self.api,
            api_ca_pem: ca.cert_pem().to_string(),
            token,
            binaries: [
                (
                    pod::IMAGE_OPERATOR_PATH.to_string(),
                    deployed.operator_binary.clone(),
                ),
                (pod::IMAGE_HELM_PATH.to_string(), opts.helm.clone()),
            ]
            .into_iter()
            .collect(),
            secrets: [(WEBHOOK_CERT_SECRET.to_string(), cert)]
                .into_iter()
                .collect(),
            dir: pod_dir,
        };
        let mut spec = pod::ContainerSpec::from_deployment(deployment, &ctx)?;
        // A pod listens in a network namespace of its own; this one shares the host's, where
        // the nearest private equivalent is loopback.
        spec.args = pod::loopback_binds(&spec.args);
        let mut pod = pod::Pod::start(spec, &ctx).await?;
        pod.wait_ready(Duration::from_secs(60)).await?;
        Ok(StartedPod {
            pod,
            metrics: SocketAddr::from(([127, 0, 0, 1], metrics)),
        })
    }
}

/// A started pod of the operator chart and its metrics address.
struct StartedPod {
    pod: pod::Pod,
    metrics: SocketAddr,
}

/// Server-side applies one rendered object of a built-in kind in [`APPLIED_KINDS`].
async fn apply_builtin(client: &kube::Client, doc: &serde_json::Value) -> anyhow::Result<()> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let (group, plural, namespaced) = match kind {
        "Namespace" => ("", "namespaces", false),
        "ServiceAccount" => ("", "serviceaccounts", true),
        "Service" => ("", "services", true),
        "Role" => ("rbac.authorization.k8s.io", "roles", true),
        "RoleBinding" => ("rbac.authorization.k8s.io", "rolebindings", true),
        "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles", false),
        "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings", false),
        "ValidatingWebhookConfiguration" => (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            false,
        ),
        other => bail!("the chart's kind {other} is not applied here"),
    };
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), NAMESPACE, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let obj: DynamicObject = serde_json::from_value(doc.clone())?;
    api.patch(
        name,
        &PatchParams::apply("omni-sandbox").force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying the chart's {kind} {name}"))?;
    Ok(())
}

/// A unique-enough suffix for tokens (not a secret of any strength: loopback tests only).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{nanos:x}-{}", std::process::id())
}

async fn wait_for_webhook(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if tokio::time::Instant::now() > deadline {
            bail!("the operator's webhook did not start listening on {addr}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The ValidatingWebhookConfiguration the operator chart installs, with our CA.
async fn register_webhook(client: &kube::Client, ca: &CertificateAuthority) -> anyhow::Result<()> {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca.cert_pem());
    let webhooks: Vec<serde_json::Value> = omni_operator::api::crds()
        .iter()
        .map(|crd| {
            let kind = crd.spec.names.kind.to_lowercase();
            json!({
                "name": format!("v{kind}-v1alpha1.kb.io"),
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "service": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE,
                                "path": format!("/validate-omni-texashpc-com-v1alpha1-{kind}"), "port": 443},
                    "caBundle": ca_bundle,
                },
                "rules": [{"apiGroups": ["omni.texashpc.com"], "apiVersions": ["v1alpha1"],
                           "operations": ["CREATE", "UPDATE"], "resources": [crd.spec.names.plural],
                           "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            })
        })
        .collect();
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "omni-cluster-operator-validating-webhook-configuration"},
        "webhooks": webhooks,
    });
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    );
    api.create(&PostParams::default(), &serde_json::from_value(config)?)
        .await?;
    // The CRDs are served once a list succeeds.
    let clusters: Api<omni_operator::api::OmniCluster> = Api::namespaced(client.clone(), NAMESPACE);
    clusters.list(&ListParams::default()).await?;
    Ok(())
}

/// Finds helm: the given path (`--helm-binary` or `HELM_BINARY`, the operator's own names), the
/// repository's test tools, `PATH`; `None` when there is none.
pub fn find_helm(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let tools = repo_root().join(".cache/test-tools/bin/helm");
    if tools.is_file() {
        return Some(tools);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("helm"))
            .find(|p| p.is_file())
    })
}

/// The repository checkout this binary was built from.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
