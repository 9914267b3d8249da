//! The real-API-server tier: etcd and kube-apiserver (`test-apiserver`, built by
//! `scripts/install-test-tools`) with both charts installed by the real helm, and the operator
//! run as the chart deploys it: its arguments, its ServiceAccount's token (so exactly the
//! chart's RBAC), and its admission webhook registered by the chart and called by the API server
//! over TLS. Omni is omni-sim; workload clusters stay kube-sim (the workload side is not what
//! this tier is about).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, PostParams};
use omni_operator::cli::run::OperatorConfig;
use serde_json::{Value, json};
use test_apiserver::ControlPlane;

use super::stack::Operator;

/// The operator chart's release namespace (the samples' namespace too).
pub const NS: &str = "omni-cluster-operator-system";
/// The chart's release names.
pub const CRD_RELEASE: &str = "omni-cluster-operator-crds";
pub const RELEASE: &str = "omni-cluster-operator";
/// The chart's ServiceAccount and webhook Service.
pub const SERVICE_ACCOUNT: &str = "omni-cluster-operator-controller-manager";
pub const WEBHOOK_SERVICE: &str = "omni-cluster-operator-webhook-service";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A helm run's exit status and output.
#[derive(Debug)]
pub struct HelmRun {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl HelmRun {
    /// Panics with the output unless helm succeeded; returns stderr (where helm prints the API
    /// server's warnings).
    pub fn expect_ok(self, what: &str) -> String {
        assert!(
            self.ok,
            "{what} failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self.stderr
    }
}

/// The real control plane, an admin client and a private helm home.
pub struct RealCluster {
    pub cp: ControlPlane,
    pub admin: kube::Client,
    home: tempfile::TempDir,
}

impl RealCluster {
    /// Starts etcd and kube-apiserver; fails with instructions when they are not built.
    pub async fn start() -> RealCluster {
        let cp = ControlPlane::start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let admin = cp
            .admin_client()
            .await
            .unwrap_or_else(|e| panic!("admin client: {e}"));
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("helm home: {e}"));
        RealCluster { cp, admin, home }
    }

    /// Runs the real helm against the control plane as its admin.
    pub fn helm(&self, args: &[&str]) -> HelmRun {
        let home = self.home.path();
        let out = Command::new(super::helm_bin())
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("KUBECONFIG", self.cp.admin_kubeconfig_path())
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .unwrap_or_else(|e| panic!("run helm: {e}"));
        HelmRun {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `helm install` of the CRD chart; returns helm's stderr.
    pub fn install_crd_chart(&self) -> String {
        let chart = repo().join("charts/omni-cluster-operator-crds");
        self.helm(&["install", CRD_RELEASE, &chart.display().to_string()])
            .expect_ok("helm install of the CRD chart")
    }

    /// Waits until every CRD of ours is Established and its custom resources are served.
    pub async fn wait_established(&self) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin.clone());
        let until = tokio::time::Instant::now() + super::WAIT;
        for crd in omni_operator::api::crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            loop {
                let current = crds.get_opt(&name).await.ok().flatten();
                let established = current
                    .as_ref()
                    .and_then(|c| c.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < until,
                    "CRD {name} never Established: {:?}",
                    current.and_then(|c| c.status)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let clusters: Api<omni_operator::api::OmniCluster> = Api::all(self.admin.clone());
        while clusters.list(&ListParams::default()).await.is_err() {
            assert!(
                tokio::time::Instant::now() < until,
                "custom resources never served"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `helm install` of the operator chart into [`NS`] with the webhook certificate the test
    /// provides (`ca_pem` becomes the `caBundle`; cert-manager is not installed here) and
    /// `sets`; returns helm's stderr.
    pub fn install_operator_chart(&self, ca_pem: &str, sets: &[&str]) -> String {
        let chart = repo().join("charts/omni-cluster-operator");
        let mut args = vec![
            "install".to_string(),
            RELEASE.to_string(),
            chart.display().to_string(),
            "--namespace".into(),
            NS.into(),
            "--create-namespace".into(),
        ];
        for set in chart_sets(ca_pem)
            .iter()
            .map(String::as_str)
            .chain(sets.iter().copied())
        {
            args.push("--set".into());
            args.push(set.to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.helm(&args)
            .expect_ok("helm install of the operator chart")
    }

    /// A client authenticated with a token of the chart's ServiceAccount.
    pub async fn operator_client(&self) -> kube::Client {
        self.cp
            .service_account_client(NS, SERVICE_ACCOUNT)
            .await
            .unwrap_or_else(|e| panic!("ServiceAccount client: {e}"))
    }
}

/// The `--set` values that replace cert-manager with a certificate the test made.
fn chart_sets(ca_pem: &str) -> Vec<String> {
    vec![
        "certManager.enabled=false".into(),
        "webhook.certSecretName=omni-cluster-operator-webhook-cert".into(),
        format!(
            "webhook.caBundle={}",
            base64::engine::general_purpose::STANDARD.encode(ca_pem)
        ),
    ]
}

/// The webhook's serving certificate, as cert-manager or the user would provide it: for
/// `<service>.<namespace>.svc`, signed by a CA of its own.
pub struct WebhookCert {
    pub ca_pem: String,
    pub dir: tempfile::TempDir,
}

impl WebhookCert {
    pub fn generate() -> WebhookCert {
        let ca_key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)
            .unwrap_or_else(|e| panic!("{e}"));
        let leaf_key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let leaf = rcgen::CertificateParams::new(vec![format!("{WEBHOOK_SERVICE}.{NS}.svc")])
            .unwrap_or_else(|e| panic!("{e}"))
            .signed_by(&leaf_key, &*ca)
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("tls.crt"), leaf.pem()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("tls.key"), leaf_key.serialize_pem())
            .unwrap_or_else(|e| panic!("{e}"));
        WebhookCert {
            ca_pem: ca.pem(),
            dir,
        }
    }
}

/// The operator configuration the chart's Deployment arguments give (`helm template` with the
/// same values, parsed by the binary's own flags), bound to loopback ports instead of the pod's.
pub fn chart_operator_config(ca_pem: &str, sets: &[&str]) -> OperatorConfig {
    let mut all: Vec<String> = chart_sets(ca_pem);
    all.extend(sets.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    super::chart_operator_config(&super::render_operator_chart(NS, &all), NS)
}

/// The operator running as the chart deploys it, against a [`RealCluster`].
pub struct Deployed {
    pub operator: Option<Operator>,
    pub client: kube::Client,
    pub webhook: SocketAddr,
    pub metrics: Arc<omni_operator::process::metrics::Metrics>,
    /// The serving certificate (the chart's Secret): another replica mounts the same.
    pub cert: Arc<WebhookCert>,
    _helm_dir: tempfile::TempDir,
}

impl Deployed {
    /// Installs the operator chart (with `sets`), routes its webhook Service to a loopback
    /// port, and starts the operator there with the chart's arguments and its ServiceAccount's
    /// token. `identity` names this replica (the Lease holder).
    pub async fn start(cluster: &RealCluster, sets: &[&str], identity: &str) -> Deployed {
        let cert = Arc::new(WebhookCert::generate());
        let stderr = cluster.install_operator_chart(&cert.ca_pem, sets);
        assert_no_warnings("helm install of the operator chart", &stderr);
        Self::start_replica(cluster, cert, sets, identity).await
    }

    /// Starts one more replica of an installed chart (the webhook Service moves to it).
    pub async fn start_replica(
        cluster: &RealCluster,
        cert: Arc<WebhookCert>,
        sets: &[&str],
        identity: &str,
    ) -> Deployed {
        let mut config = chart_operator_config(&cert.ca_pem, sets);
        let webhook = super::free_addr();
        let helm_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        if let Some(w) = config.webhook.as_mut() {
            w.bind = webhook;
            w.cert_dir = cert.dir.path().to_path_buf();
        } else {
            panic!("the chart's operator serves no webhook");
        }
        if let Some(leader) = config.leader.as_mut() {
            leader.identity = identity.to_string();
        }
        config.metrics_bind = None;
        config.metrics_secure = None;
        config.health_bind = None;
        config.helm_binary = super::helm_bin();
        config.helm_work_dir = helm_dir.path().to_path_buf();
        let metrics = config.metrics.clone();
        let client = cluster.operator_client().await;
        let operator = Operator::spawn(config, client.clone());
        wait_listening(webhook).await;
        cluster.cp.route_service(NS, WEBHOOK_SERVICE, 443, webhook);
        Deployed {
            operator: Some(operator),
            client,
            webhook,
            metrics,
            cert,
            _helm_dir: helm_dir,
        }
    }

    /// Stops the operator gracefully.
    pub async fn stop(mut self) {
        if let Some(operator) = self.operator.take() {
            tokio::time::timeout(super::WAIT, operator.stop())
                .await
                .unwrap_or_else(|_| panic!("the operator did not stop"));
        }
    }
}

/// Waits until something accepts connections on `addr` (the webhook server is up).
async fn wait_listening(addr: SocketAddr) {
    let until = tokio::time::Instant::now() + super::WAIT;
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < until,
            "nothing listens on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Panics on any line of helm's stderr that carries an API server warning.
pub fn assert_no_warnings(what: &str, stderr: &str) {
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.to_lowercase().contains("warning"))
        .collect();
    assert!(
        warnings.is_empty(),
        "{what} printed warnings: {warnings:#?}"
    );
}

/// Creates any object given as JSON with `client` (plural: lower-cased kind plus `s`).
pub async fn create(client: &kube::Client, obj: Value) -> Result<Value, kube::Error> {
    let api = dynamic_api(client, &obj);
    let typed: kube::api::DynamicObject =
        serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
    api.create(&PostParams::default(), &typed)
        .await
        .map(|o| serde_json::to_value(o).unwrap_or_default())
}

/// The namespaced dynamic API of `obj`'s kind.
pub fn dynamic_api(client: &kube::Client, obj: &Value) -> Api<kube::api::DynamicObject> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let plural = omni_operator::api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .map_or_else(
            || format!("{}s", kind.to_lowercase()),
            |c| c.spec.names.plural,
        );
    let resource = kube::discovery::ApiResource {
        group,
        version,
        api_version,
        kind,
        plural,
    };
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or(NS);
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The shipped samples (`config/samples/`), pointed at omni-sim and at the test's chart
/// repository (its `demo` chart, with `credentials` as the repository's Secret).
pub fn samples(omni_endpoint: &str, repo_url: &str, credentials: &str) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("config/samples"))
        .unwrap_or_else(|e| panic!("samples: {e}"))
        .map(|e| e.unwrap_or_else(|e| panic!("{e}")).path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for mut doc in super::sample(&name) {
            match doc["kind"].as_str() {
                Some("OmniConnection") => doc["spec"]["endpoint"] = json!(omni_endpoint),
                Some("OmniHelmRelease") => {
                    doc["spec"]["chart"] = json!({
                        "repository": repo_url,
                        "chart": "demo",
                        "version": "0.1.0",
                        "credentialsSecretRef": {"name": credentials},
                        // The test repository is plain HTTP: credentials go there on request.
                        "insecure": repo_url.starts_with("http://"),
                    });
                }
                // The set's template names the same chart source; its values (a template
                // from the cluster's facts) stay as the sample wrote them.
                Some("OmniHelmReleaseSet") => {
                    let chart = &mut doc["spec"]["template"]["chart"];
                    chart["repository"] = json!(repo_url);
                    chart["chart"] = json!("demo");
                    chart["version"] = json!("0.1.0");
                    chart["credentialsSecretRef"] = json!({"name": credentials});
                    chart["insecure"] = json!(repo_url.starts_with("http://"));
                }
                _ => {}
            }
            docs.push(doc);
        }
    }
    docs
}
