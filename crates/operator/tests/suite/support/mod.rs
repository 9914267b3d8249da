//! Shared setup of the controller system tests: free loopback ports, a tiny HTTP GET, and a
//! Kubernetes client that points at a closed port (for tests of the process shell that must
//! not depend on an API server).

#![allow(dead_code)]

pub mod chart_repo;
pub mod chart_server;
pub mod conditions;
pub mod env;
pub mod leaks;
pub mod real;
pub mod stack;
pub mod stack_objects;
#[path = "../../../src/controllers/shared/test_env.rs"]
mod test_env;

pub(crate) use test_env::{
    connection_doc, create_json, install_operator_api, kube_sim, unreachable_client,
};

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback address whose port was free a moment ago.
pub fn free_addr() -> SocketAddr {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("addr: {e}"))
}

/// GET `path` from `addr`; `(status code, body)`, or `None` while nothing listens.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// Polls `path` until it answers with `code` (generous deadline: the machine is loaded).
pub async fn wait_for_status(addr: SocketAddr, path: &str, code: u16) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some((c, body)) = http_get(addr, path).await
            && c == code
        {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} on {addr} never answered {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `(status, reason, message)` of the condition `type_` in an object's status.
pub fn condition(obj: &impl serde::Serialize, type_: &str) -> Option<(String, String, String)> {
    let v = serde_json::to_value(obj).ok()?;
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("status"), text("reason"), text("message"))
        })
}

/// The timestamp at `status.<field>` of `obj`, when it holds one.
pub fn status_time(obj: &impl serde::Serialize, field: &str) -> Option<jiff::Timestamp> {
    serde_json::to_value(obj).ok()?["status"][field]
        .as_str()?
        .parse()
        .ok()
}

/// Whether the object's `Ready` condition is `True`.
pub fn ready(obj: &impl serde::Serialize) -> bool {
    condition(obj, "Ready").is_some_and(|(s, _, _)| s == "True")
}

/// The value under `key` in `secret`'s data, as text (empty when there is none).
pub fn secret_text(secret: &k8s_openapi::api::core::v1::Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// The bearer token of the kubeconfig under `kubeconfig` in `secret` (as an export writes it: a
/// secret the leak scans look for), if it has one.
pub fn kubeconfig_token(secret: &k8s_openapi::api::core::v1::Secret) -> Option<String> {
    secret_text(secret, "kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
        .filter(|t| !t.is_empty())
}

/// The documents of one file in `config/samples/`.
pub fn sample(file: &str) -> Vec<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/samples")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.split("\n---")
        .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
        .map(|d| {
            serde_saphyr::from_str::<serde_json::Value>(d).unwrap_or_else(|e| panic!("{file}: {e}"))
        })
        .collect()
}

/// How long the system tests wait for a state: generous, because the machine is shared and
/// helm runs as a subprocess; only a failing test ever waits this long.
pub const WAIT: Duration = Duration::from_secs(300);

/// `omni-operator validate -f` on a file holding `manifest`: whether it passed, and what it
/// printed (stdout, then stderr).
pub fn validate_manifest(manifest: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("manifest.yaml");
    std::fs::write(&file, manifest).unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omni-operator"))
        .args(["validate", "-f"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let printed =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), printed)
}

/// Polls `name` until `pred` holds; panics with the last seen status after [`WAIT`].
pub async fn wait_for<K>(api: &kube::Api<K>, name: &str, what: &str, pred: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let current = api.get_opt(name).await.ok().flatten();
        if let Some(obj) = &current
            && pred(obj)
        {
            return obj.clone();
        }
        if tokio::time::Instant::now() > until {
            let status = current
                .and_then(|o| serde_json::to_value(o).ok())
                .map(|v| v["status"].clone());
            panic!("{name}: never {what}; last status: {status:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls until `name` no longer exists; panics with its status after [`WAIT`].
pub async fn wait_gone<K>(api: &kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        match api.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(obj)) if tokio::time::Instant::now() > until => {
                let v = serde_json::to_value(obj).unwrap_or_default();
                panic!("{name} was never deleted; status: {:#}", v["status"]);
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Write requests `sim` has served for `resources` (plural names), from every client: the
/// part of the API server one controller is responsible for, while others may still be busy.
pub fn writes_to(sim: &kube_sim::server::RunningKubeSim, resources: &[&str]) -> u64 {
    sim.hooks()
        .counts()
        .iter()
        .filter(|(k, _)| k.is_write() && resources.contains(&k.resource.as_str()))
        .map(|(_, n)| n)
        .sum()
}

/// The real helm binary the tests drive: `$HELM_BIN`, else the one `scripts/install-test-tools`
/// puts in `.cache/test-tools/bin`.
pub fn helm_bin() -> std::path::PathBuf {
    let path = std::env::var_os("HELM_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../.cache/test-tools/bin/helm")
        });
    assert!(
        path.is_file(),
        "helm not found at {}: run scripts/install-test-tools (or set HELM_BIN)",
        path.display()
    );
    path
}

/// `helm template` of the operator chart as release `omni-cluster-operator` in `namespace` with
/// `--set` arguments, as parsed documents.
pub fn render_operator_chart(namespace: &str, sets: &[&str]) -> Vec<serde_json::Value> {
    let chart =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/omni-cluster-operator");
    let mut command = std::process::Command::new(helm_bin());
    command
        .arg("template")
        .arg("omni-cluster-operator")
        .arg(chart)
        .args(["--namespace", namespace]);
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command.output().unwrap_or_else(|e| panic!("run helm: {e}"));
    assert!(
        output.status.success(),
        "helm template {sets:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap_or_else(|e| panic!("UTF-8 output: {e}"));
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("rendered YAML parses: {e}"));
    docs.into_iter().filter(|doc| !doc.is_null()).collect()
}

/// The operator configuration the rendered chart's Deployment gives: the manager container's
/// arguments parsed exactly as the binary parses them (its `run` flags plus the global
/// `--log-format`), with the namespace the Deployment passes through `POD_NAMESPACE`.
pub fn chart_operator_config(
    docs: &[serde_json::Value],
    namespace: &str,
) -> omni_operator::cli::run::OperatorConfig {
    use clap::{Args as _, FromArgMatches as _};
    use omni_operator::cli::run::{Args, config_from_args};
    let deployments = of_kind(docs, "Deployment");
    assert_eq!(deployments.len(), 1, "one Deployment");
    let manager = deployments[0]["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "manager"))
        .unwrap_or_else(|| panic!("no manager container"));
    let mut argv = vec!["omni-operator".to_string()];
    argv.extend(manager["args"].as_array().into_iter().flatten().map(|a| {
        a.as_str()
            .unwrap_or_else(|| panic!("string arg"))
            .to_string()
    }));
    argv.push(format!("--namespace={namespace}"));
    let command = clap::Command::new("omni-operator")
        .arg(
            clap::Arg::new("log-format")
                .long("log-format")
                .global(true)
                .value_parser(["json", "text"]),
        )
        .subcommand(Args::augment_args(clap::Command::new("run")));
    let matches = command
        .try_get_matches_from(&argv)
        .unwrap_or_else(|e| panic!("the chart's arguments {argv:?} do not parse: {e}"));
    let (_, run) = matches
        .subcommand()
        .unwrap_or_else(|| panic!("run subcommand"));
    let args = Args::from_arg_matches(run).unwrap_or_else(|e| panic!("{e}"));
    config_from_args(&args).unwrap_or_else(|e| panic!("{e}"))
}

/// The documents of `kind` among rendered `docs`.
pub fn of_kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    docs.iter().filter(|doc| doc["kind"] == kind).collect()
}

/// The repository checkout the tests run in.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|e| panic!("repository root: {e}"))
}

/// Writes an admin kubeconfig of `sim` (a bearer token kube-sim accepts) to `dir/kubeconfig`,
/// with `namespace` as the context's namespace when given, for tools run as processes.
pub fn write_kubeconfig(
    sim: &kube_sim::server::RunningKubeSim,
    dir: &std::path::Path,
    namespace: Option<&str>,
) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let mut kubeconfig = kube_sim::kubeconfig::Kubeconfig::new(
        sim.base_url.clone(),
        "admin",
        kube_sim::kubeconfig::Credential::Token("admin".into()),
    );
    if let Some(ns) = namespace {
        kubeconfig = kubeconfig.with_namespace(ns);
    }
    kubeconfig
        .write(&path)
        .unwrap_or_else(|e| panic!("write kubeconfig: {e}"));
    path
}

/// A client that reaches the API server the way `kubeconfig` (YAML) says.
pub async fn client_from_kubeconfig(kubeconfig: &str) -> kube::Client {
    let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig)
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
}

/// A client of `sim` that sends no credentials (kube-sim's admin unless it authenticates).
pub fn client_of(sim: &kube_sim::server::RunningKubeSim) -> kube::Client {
    let uri: http::Uri = sim.base_url.parse().unwrap_or_else(|e| panic!("uri: {e}"));
    kube::Client::try_from(kube::Config::new(uri)).unwrap_or_else(|e| panic!("client: {e}"))
}

#[derive(Clone)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.lock() {
            Ok(mut b) => b.extend_from_slice(buf),
            Err(poisoned) => poisoned.into_inner().extend_from_slice(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything the operator logged so far at trace level, so tests can check that no secret is
/// ever logged (all tests of one binary share one subscriber; the first call installs it).
pub fn operator_logs() -> String {
    logs_with("omni_operator=trace")
}

/// [`operator_logs`] with the capture recording what `filter` selects; only the first call in
/// a test binary installs the capture, so its filter holds for every test of the binary.
pub fn logs_with(filter: &str) -> String {
    static LOGS: std::sync::OnceLock<LogBuffer> = std::sync::OnceLock::new();
    let buffer = LOGS.get_or_init(|| {
        let buffer = LogBuffer(std::sync::Arc::default());
        let writer = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(move || writer.clone())
            .try_init();
        buffer
    });
    let bytes = match buffer.0.lock() {
        Ok(b) => b.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A clock for the operator that the test moves by hand (rotation deadlines).
#[derive(Debug)]
pub struct TestClock(std::sync::Mutex<jiff::Timestamp>);

impl TestClock {
    /// A clock reading `start`.
    pub fn new(start: jiff::Timestamp) -> Self {
        Self(std::sync::Mutex::new(start))
    }

    /// Sets the time.
    pub fn set(&self, t: jiff::Timestamp) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

impl omni_operator::controllers::Clock for TestClock {
    fn now(&self) -> jiff::Timestamp {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Points every kubeconfig omni-sim mints at one workload API server.
pub struct WorkloadAt(pub String);

impl omni_sim::WorkloadProvider for WorkloadAt {
    fn endpoint(&self, _cluster: &str) -> omni_sim::WorkloadEndpoint {
        omni_sim::WorkloadEndpoint {
            server: self.0.clone(),
            ca_data: None,
        }
    }
}

/// Accepts the unexpired bearer tokens omni-sim mints for the cluster named here, as the
/// workload cluster behind Omni does; any other request is a 401.
pub struct OmniTokens(pub String);

impl kube_sim::request::Authenticator for OmniTokens {
    fn authenticate(
        &self,
        headers: &http::HeaderMap,
        _peer_cert_der: Option<&[u8]>,
    ) -> Option<kube_sim::request::UserInfo> {
        let token = headers
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?;
        let claims = omni_sim::token::decode(token)?;
        if claims.cluster != self.0 || claims.is_expired(jiff::Timestamp::now()) {
            return None;
        }
        let mut groups = claims.groups;
        groups.push("system:authenticated".to_owned());
        Some(kube_sim::request::UserInfo {
            name: claims.user,
            groups,
        })
    }
}

/// `(user, groups)` the API server behind `client` authenticates it as (`kubectl auth whoami`).
pub async fn whoami(client: &kube::Client) -> Result<(String, Vec<String>), kube::Error> {
    let request = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
            }))
            .unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("request: {e}"));
    let review: serde_json::Value = client.request(request).await?;
    let info = &review["status"]["userInfo"];
    let groups = info["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(String::from))
        .collect();
    Ok((
        info["username"].as_str().unwrap_or_default().to_string(),
        groups,
    ))
}

/// An Omni cluster made by someone else (the UI, omnictl, another tool): no owner stamp, and
/// nothing else of a template (no machine sets).
pub fn foreign_cluster(name: &str) -> omni_client::proto::cosi::resource::Resource {
    omni_sim::store::resource(
        omni_sim::types::ty::CLUSTER,
        name,
        "",
        Vec::new(),
        &omni_client::proto::specs::ClusterSpec {
            kubernetes_version: "1.34.0".into(),
            talos_version: "1.12.0".into(),
            ..Default::default()
        },
    )
}

/// Makes Omni's ClusterStatus of `cluster` undecodable, as a status the operator cannot read
/// (`StatusFailed`): pinned first so Omni's controllers leave it alone, then its spec bytes
/// replaced with garbage. The cluster must exist in Omni (wait for it to be Ready first).
pub fn make_cluster_status_unreadable(omni: &omni_sim::RunningOmniSim, cluster: &str) {
    omni.set_cluster_status(
        cluster,
        omni_client::proto::specs::cluster_status_spec::Phase::Running,
        true,
    )
    .unwrap_or_else(|e| panic!("pin the ClusterStatus of {cluster}: {e}"));
    omni.store().modify(
        omni_sim::types::DEFAULT_NS,
        omni_sim::types::ty::CLUSTER_STATUS,
        cluster,
        |r| {
            if let Some(spec) = r.spec.as_mut() {
                spec.proto_spec = vec![0xff; 3];
            }
        },
    );
}
