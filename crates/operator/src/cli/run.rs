//! `omni-operator run`: controllers (behind leader election), admission webhook, metrics and
//! health probes in one process.
//!
//! [`run_operator`] is the library entry: tests and the sandbox embed the whole operator with
//! a client of their choice.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use futures::future::{BoxFuture, FutureExt, Shared};

use crate::api::{OmniControlPlane, OmniMachine, OmniWorkers};
use crate::controllers::{self, Clock, Context, Scope, SystemClock};
use crate::helm::{Helm, HelmConfig};
use crate::leader::{LeaderConfig, LeaderElector};
use crate::metrics::Metrics;
use crate::secret_policy::SecretPolicy;
use crate::secure_metrics::{self, SecureMetricsConfig};
use crate::webhook::{self, WebhookConfig};

/// How long controllers may take to finish in-flight reconciles on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long releasing the Lease on shutdown may take.
pub const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest a shutdown takes: the controllers' drain, the Lease release, then the servers'
/// (webhook, probes, metrics) drain. The pod's termination grace period must exceed it.
pub const SHUTDOWN_MAX: Duration = Duration::from_secs(
    SHUTDOWN_GRACE.as_secs()
        + LEASE_RELEASE_TIMEOUT.as_secs()
        + crate::tls::SHUTDOWN_GRACE.as_secs(),
);

const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Arguments of `omni-operator run` (the Helm chart passes exactly these).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Namespace to watch (defaults to the pod's namespace). With `--all-namespaces` it only
    /// names the operator's own namespace (the default Lease namespace); the chart always sets
    /// `POD_NAMESPACE`, so the two must not conflict.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Watch every namespace (needs cluster-wide RBAC).
    #[arg(long)]
    pub all_namespaces: bool,
    /// Only reconcile while holding the leader Lease.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (defaults to the watched namespace).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Address of `/metrics`; `0` disables.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: String,
    /// Serve `/metrics` over HTTPS, only to callers whose bearer token (TokenReview) belongs to
    /// a user allowed `get` on the URL `/metrics` (SubjectAccessReview). Off: plain HTTP for
    /// everyone.
    #[arg(long, env = "METRICS_SECURE", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub metrics_secure: bool,
    /// Directory with the secure metrics serving certificate; unset serves a self-signed one
    /// generated at start.
    #[arg(long, value_parser = parse_non_empty_path)]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Certificate file name in the metrics cert directory.
    #[arg(long, default_value = "tls.crt")]
    pub metrics_cert_name: String,
    /// Key file name in the metrics cert directory.
    #[arg(long, default_value = "tls.key")]
    pub metrics_key_name: String,
    /// Address of `/healthz` and `/readyz`; `0` disables.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: String,
    /// Serve the validating admission webhook.
    #[arg(long, env = "ENABLE_WEBHOOKS", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_enabled: bool,
    /// Address of the webhook server.
    #[arg(long, default_value = "0.0.0.0:9443", value_parser = parse_bind_address)]
    pub webhook_bind_address: SocketAddr,
    /// Directory with the webhook serving certificate.
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub webhook_cert_dir: PathBuf,
    /// Certificate file name in the cert directory.
    #[arg(long, default_value = "tls.crt")]
    pub webhook_cert_name: String,
    /// Key file name in the cert directory.
    #[arg(long, default_value = "tls.key")]
    pub webhook_key_name: String,
    /// Helm executable used by OmniHelmRelease.
    #[arg(long, env = "HELM_BINARY", default_value = "helm")]
    pub helm_binary: PathBuf,
    /// Most helm processes running at once (each release runs at most one at a time).
    #[arg(long, env = "HELM_MAX_CONCURRENT", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub helm_max_concurrent: u16,
    /// Most requests in flight to the Kubernetes API at once (watches aside); more wait their
    /// turn instead of each opening a connection (see docs/performance.md).
    #[arg(long, env = "KUBE_API_MAX_IN_FLIGHT", default_value_t = crate::api_client::MANAGEMENT_MAX_IN_FLIGHT as u16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub kube_api_max_in_flight: u16,
    /// How often an in-sync OmniSecretSync re-reads its workload copy to repair drift (Go
    /// duration; `0` turns the periodic check off, leaving only change-driven syncs).
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    pub secret_sync_resync_interval: Duration,
    /// Directory that `file:` patches and manifests of OmniClusters are read from; nothing
    /// outside it is ever read. Unset refuses every `file:` entry.
    #[arg(long, env = "TEMPLATE_ROOT", value_parser = parse_non_empty_path)]
    pub template_root: Option<PathBuf>,
    /// Writable directory for helm's cache, config and data and the per-release session
    /// directories (emptied of stale sessions at start-up). Defaults to
    /// `$TMPDIR/omni-operator-helm`; the chart points it into its emptyDir.
    #[arg(long, env = "HELM_WORK_DIR", value_parser = parse_non_empty_path)]
    pub helm_work_dir: Option<PathBuf>,
    /// Use a Secret as an OmniHelmRelease's or OmniSecretSync's kubeconfig, repository
    /// credentials or sync source only when it carries the label `omni.texashpc.com/usable-by`
    /// naming that kind (for clusters where those objects' authors may not read every Secret).
    #[arg(long, env = "REQUIRE_SECRET_OPT_IN")]
    pub require_secret_opt_in: bool,
    /// With `--all-namespaces`, let an OmniKubeconfigExport write its Secret into a namespace
    /// other than its own.
    #[arg(long, env = "ALLOW_CROSS_NAMESPACE_EXPORT")]
    pub allow_cross_namespace_export: bool,
    /// Benchmarks only: model the original implementation's costs (see `crate::baseline`).
    #[arg(long, hide = true, value_parser = crate::baseline::parse)]
    pub baseline_quirks: Option<crate::baseline::Quirks>,
}

fn parse_non_empty_path(value: &str) -> Result<PathBuf, String> {
    if value.trim().is_empty() {
        return Err("must not be empty".to_string());
    }
    Ok(PathBuf::from(value))
}

/// Parses a periodic interval: a Go duration of at least 10s such as `5m`, or `0` (off).
fn parse_interval(value: &str) -> Result<Duration, String> {
    use crate::api::duration::{GoDuration, MIN_INTERVAL};
    let d = GoDuration::parse(value).map_err(|e| e.to_string())?;
    if d.is_negative() {
        return Err(format!(
            "{value:?} is negative; use 0 to turn the check off"
        ));
    }
    if d.is_positive() && d < MIN_INTERVAL {
        return Err(format!(
            "{value:?} is shorter than {MIN_INTERVAL}; use 0 to turn the check off"
        ));
    }
    d.to_std()
        .ok_or_else(|| format!("{value:?} is out of range"))
}

/// Everything [`run_operator`] needs besides the client.
#[derive(Clone)]
pub struct OperatorConfig {
    /// Namespace scope.
    pub scope: Scope,
    /// Lease settings when leader election is on.
    pub leader: Option<LeaderConfig>,
    /// `/metrics` address.
    pub metrics_bind: Option<SocketAddr>,
    /// Serve `/metrics` over HTTPS to authorised callers only; `None` serves plain HTTP.
    pub metrics_secure: Option<SecureMetricsConfig>,
    /// Probe address.
    pub health_bind: Option<SocketAddr>,
    /// Webhook server settings when enabled.
    pub webhook: Option<WebhookConfig>,
    /// Helm executable (for the OmniHelmRelease controller).
    pub helm_binary: PathBuf,
    /// Writable directory for helm's cache, config and per-release session files.
    pub helm_work_dir: PathBuf,
    /// Directory `file:` entries are confined to; `None` refuses them.
    pub template_root: Option<PathBuf>,
    /// Floor for periodic intervals of stored objects that bypassed admission
    /// ([`crate::api::duration::MIN_INTERVAL`] from the command line; embedders running short
    /// scenarios may lower it).
    pub min_interval: Duration,
    /// Most helm processes at once.
    pub helm_max_concurrent: usize,
    /// OmniSecretSync drift re-check interval; zero turns it off.
    pub secret_sync_resync: Duration,
    /// Which Secrets objects may use, and where exports may write.
    pub secret_policy: SecretPolicy,
    /// Time source of the controllers.
    pub clock: Arc<dyn Clock>,
    /// Metrics registry (shared so embedders can read it).
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for OperatorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorConfig")
            .field("scope", &self.scope)
            .field("leader", &self.leader)
            .field("metrics_bind", &self.metrics_bind)
            .field("metrics_secure", &self.metrics_secure)
            .field("health_bind", &self.health_bind)
            .field("webhook", &self.webhook.as_ref().map(|w| w.bind))
            .field("helm_binary", &self.helm_binary)
            .field("helm_work_dir", &self.helm_work_dir)
            .field("template_root", &self.template_root)
            .finish_non_exhaustive()
    }
}

impl OperatorConfig {
    /// A configuration for embedding: the given scope, no leader election, no servers.
    pub fn embedded(scope: Scope) -> Self {
        Self {
            scope,
            leader: None,
            metrics_bind: None,
            metrics_secure: None,
            health_bind: None,
            webhook: None,
            helm_binary: PathBuf::from("helm"),
            helm_work_dir: embedded_helm_work_dir(),
            template_root: None,
            // Embedded scenarios (tests, the sandbox) use second-scale intervals.
            min_interval: Duration::from_secs(1),
            helm_max_concurrent: DEFAULT_HELM_MAX_CONCURRENT,
            secret_sync_resync: controllers::secret_sync::RESYNC,
            secret_policy: SecretPolicy::default(),
            clock: Arc::new(SystemClock),
            metrics: Arc::new(Metrics::new()),
        }
    }
}

/// Default size of the helm process pool: two keeps a 2-CPU operator pod responsive while a
/// slow chart download or `--wait` is in progress.
pub const DEFAULT_HELM_MAX_CONCURRENT: usize = 2;

/// Without `--helm-work-dir`, helm's state lives under the temp dir (the chart always passes
/// the flag, pointing into its emptyDir, because the container's root filesystem is read-only).
pub fn default_helm_work_dir() -> PathBuf {
    std::env::temp_dir().join("omni-operator-helm")
}

/// A work directory of its own for each embedded operator: the helm driver empties
/// `sessions/` at start-up, which must never hit another running operator's sessions (tests
/// run several in one process, and several test processes at once).
fn embedded_helm_work_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "omni-operator-helm-embedded-{}-{n}",
        std::process::id()
    ))
}

/// Starts the helm driver; a missing or unusable helm disables only OmniHelmRelease.
async fn start_helm(config: &OperatorConfig) -> Option<Helm> {
    let helm_config = HelmConfig {
        binary: config.helm_binary.clone(),
        work_dir: config.helm_work_dir.clone(),
        max_concurrent: config.helm_max_concurrent,
    };
    match Helm::new(helm_config).await {
        Ok(h) => {
            tracing::info!(version = %h.version(), "helm driver ready");
            Some(h)
        }
        Err(e) => {
            tracing::warn!(binary = %config.helm_binary.display(), error = %e, "helm is unavailable; OmniHelmRelease objects will report it");
            None
        }
    }
}

fn optional_addr(flag: &str, value: &str) -> anyhow::Result<Option<SocketAddr>> {
    if value == "0" {
        return Ok(None);
    }
    parse_bind_address(value)
        .map(Some)
        .map_err(|err| anyhow::anyhow!("--{flag}: {err}"))
}

/// Parses a listen address. Besides `HOST:PORT` it accepts `:PORT` (all IPv4 interfaces), the
/// form Kubernetes manifests and Go controllers conventionally use.
pub fn parse_bind_address(value: &str) -> Result<SocketAddr, String> {
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    full.parse()
        .map_err(|_| format!("{value:?} is not a listen address such as 0.0.0.0:8080 or :8080"))
}

fn resolve_namespace(flag: Option<&str>) -> anyhow::Result<String> {
    if let Some(ns) = flag.map(str::trim).filter(|s| !s.is_empty()) {
        return Ok(ns.to_string());
    }
    match std::fs::read_to_string(SA_NAMESPACE_FILE) {
        Ok(ns) if !ns.trim().is_empty() => Ok(ns.trim().to_string()),
        _ => anyhow::bail!(
            "POD_NAMESPACE is required when {SA_NAMESPACE_FILE} is unavailable (or pass --all-namespaces)"
        ),
    }
}

/// Turns flags into an [`OperatorConfig`].
pub fn config_from_args(args: &Args) -> anyhow::Result<OperatorConfig> {
    let scope = if args.all_namespaces {
        Scope::All
    } else {
        Scope::Namespace(resolve_namespace(args.namespace.as_deref())?)
    };
    let leader = if args.leader_elect {
        let ns = match (&args.leader_election_namespace, &scope) {
            (Some(ns), _) => ns.clone(),
            (None, Scope::Namespace(ns)) => ns.clone(),
            (None, Scope::All) => resolve_namespace(args.namespace.as_deref())
                .context("--leader-election-namespace is needed with --all-namespaces")?,
        };
        Some(LeaderConfig::new(ns))
    } else {
        None
    };
    Ok(OperatorConfig {
        scope,
        leader,
        metrics_bind: optional_addr("metrics-bind-address", &args.metrics_bind_address)?,
        metrics_secure: args.metrics_secure.then(|| SecureMetricsConfig {
            cert_dir: args.metrics_cert_dir.clone(),
            cert_name: args.metrics_cert_name.clone(),
            key_name: args.metrics_key_name.clone(),
        }),
        health_bind: optional_addr("health-probe-bind-address", &args.health_probe_bind_address)?,
        webhook: args.webhook_enabled.then(|| WebhookConfig {
            bind: args.webhook_bind_address,
            cert_dir: args.webhook_cert_dir.clone(),
            cert_name: args.webhook_cert_name.clone(),
            key_name: args.webhook_key_name.clone(),
        }),
        helm_binary: args.helm_binary.clone(),
        helm_work_dir: args
            .helm_work_dir
            .clone()
            .unwrap_or_else(default_helm_work_dir),
        template_root: args.template_root.clone(),
        min_interval: crate::api::duration::MIN_INTERVAL
            .to_std()
            .unwrap_or(Duration::from_secs(10)),
        helm_max_concurrent: usize::from(args.helm_max_concurrent),
        secret_sync_resync: args.secret_sync_resync_interval,
        secret_policy: SecretPolicy {
            require_opt_in: args.require_secret_opt_in,
            allow_cross_namespace_export: args.allow_cross_namespace_export,
        },
        clock: Arc::new(SystemClock),
        metrics: Arc::new(Metrics::new()),
    })
}

/// Runs the subcommand until SIGINT/SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let config = config_from_args(&args)?;
    crate::baseline::install(args.baseline_quirks.unwrap_or_default());
    let kube_config = kube::Config::infer()
        .await
        .context("connect to the Kubernetes API")?;
    let client = crate::api_client::client(kube_config, usize::from(args.kube_api_max_in_flight))
        .context("connect to the Kubernetes API")?;
    run_operator(config, client, shutdown_signal()).await?;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

type Stop = Shared<BoxFuture<'static, ()>>;

async fn serve_http(
    addr: SocketAddr,
    router: Router,
    stop: Stop,
    what: &'static str,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind {what} server to {addr}"))?;
    tracing::info!(%addr, "{what} server listening");
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
        .with_context(|| format!("{what} server"))
}

/// Runs the whole operator with `client` until `shutdown` completes (or leadership is lost,
/// which is an error so the process restarts and re-joins the election).
pub async fn run_operator(
    config: OperatorConfig,
    client: kube::Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let stop: Stop = async move {
        let _ = stop_rx.wait_for(|v| *v).await;
    }
    .boxed()
    .shared();
    let ready = Arc::new(AtomicBool::new(false));
    let mut servers = tokio::task::JoinSet::new();

    if let Some(addr) = config.health_bind {
        let r = ready.clone();
        let router = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ready = r.load(Ordering::SeqCst);
                    async move {
                        if ready {
                            (StatusCode::OK, "ok")
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                        }
                    }
                }),
            );
        servers.spawn(serve_http(addr, router, stop.clone(), "health probe"));
    }
    if let Some(addr) = config.metrics_bind {
        let metrics = config.metrics.clone();
        match config.metrics_secure.clone() {
            None => servers.spawn(serve_http(
                addr,
                secure_metrics::plain_router(metrics),
                stop.clone(),
                "metrics",
            )),
            Some(secure) => {
                let (client, s) = (client.clone(), stop.clone());
                servers.spawn(async move {
                    secure_metrics::serve(addr, &secure, metrics, client, s)
                        .await
                        .context("metrics server")
                })
            }
        };
    }
    if let Some(wh) = config.webhook.clone() {
        let s = stop.clone();
        servers.spawn(async move { webhook::serve(wh, s).await.context("webhook server") });
    }

    let shutdown = shutdown.boxed().shared();
    // Ready means "this replica serves": its probes, metrics and webhook. Leadership is not
    // readiness: a standby must be Ready, or a rolling update (maxUnavailable 0) would wait
    // forever for a new pod that cannot lead while the old one holds the Lease, and the
    // webhook Service would have no endpoint on a standby.
    ready.store(true, Ordering::SeqCst);
    let result = lead_and_reconcile(&config, client, stop.clone(), shutdown, ready).await;
    let _ = stop_tx.send(true);
    while let Some(joined) = servers.join_next().await {
        match joined {
            Ok(Err(e)) => {
                tracing::error!(error = %format!("{e:#}"), "server stopped with an error")
            }
            Err(e) => tracing::error!(error = %e, "server task failed"),
            Ok(Ok(())) => {}
        }
    }
    result
}

async fn lead_and_reconcile(
    config: &OperatorConfig,
    client: kube::Client,
    stop: Stop,
    shutdown: Shared<BoxFuture<'static, ()>>,
    ready: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let elector = config
        .leader
        .clone()
        .map(|c| LeaderElector::new(client.clone(), c));
    // Start of the last successful renewal (or of the acquisition): what the renewal deadline
    // and the write fence count from.
    let mut renewed_at = tokio::time::Instant::now();
    if let Some(elector) = &elector {
        let leader = elector.config();
        tracing::info!(identity = %leader.identity, "waiting for leadership");
        loop {
            let started = tokio::time::Instant::now();
            let attempt = elector.try_acquire_or_renew(leader.renew_deadline);
            tokio::select! {
                _ = shutdown.clone() => return Ok(()),
                result = attempt => match result {
                    Ok(true) => {
                        renewed_at = started;
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "leader election"),
                },
            }
            tokio::select! {
                _ = shutdown.clone() => return Ok(()),
                _ = tokio::time::sleep(leader.retry_period) => {}
            }
        }
        tracing::info!("acquired leadership");
    }
    let renewed = Arc::new(std::sync::Mutex::new(renewed_at));
    let pod = std::env::var("POD_NAME").ok();
    let helm = start_helm(config).await;
    let ctx = Arc::new(
        Context::new(
            client,
            config.scope.clone(),
            config.clock.clone(),
            config.metrics.clone(),
            pod,
        )
        .with_helm(helm)
        .with_secret_sync_resync(config.secret_sync_resync)
        .with_template_root(config.template_root.clone())
        .with_min_interval(config.min_interval)
        .with_secret_policy(config.secret_policy),
    );
    let (ctl_tx, mut ctl_rx) = tokio::sync::watch::channel(false);
    let ctl_stop: Stop = async move {
        let _ = ctl_rx.wait_for(|v| *v).await;
    }
    .boxed()
    .shared();
    let mut controllers = tokio::task::JoinSet::new();
    controllers.spawn(controllers::connection::run(ctx.clone(), ctl_stop.clone()));
    controllers.spawn(controllers::cluster::run(ctx.clone(), ctl_stop.clone()));
    controllers.spawn(controllers::children::run::<OmniControlPlane>(
        ctx.clone(),
        ctl_stop.clone(),
    ));
    controllers.spawn(controllers::children::run::<OmniWorkers>(
        ctx.clone(),
        ctl_stop.clone(),
    ));
    controllers.spawn(controllers::children::run::<OmniMachine>(
        ctx.clone(),
        ctl_stop.clone(),
    ));
    controllers.spawn(controllers::secret_sync::run(ctx.clone(), ctl_stop.clone()));
    controllers.spawn(controllers::kubeconfig_export::run(
        ctx.clone(),
        ctl_stop.clone(),
    ));
    controllers.spawn(controllers::helm_release::run(
        ctx.clone(),
        ctl_stop.clone(),
    ));

    let lost = async {
        let Some(elector) = &elector else {
            return std::future::pending::<()>().await;
        };
        let leader = elector.config();
        loop {
            tokio::time::sleep(leader.retry_period).await;
            let started = tokio::time::Instant::now();
            let last = *renewed.lock().unwrap_or_else(|p| p.into_inner());
            let stop_at = leader.stop_leading_at(last);
            if started >= stop_at {
                tracing::warn!("no renewal within the renew deadline; stepping down");
                return;
            }
            // The attempt has only the time left until the deadline: a hung API server must
            // not keep the leader writing past the point where a standby may take over.
            match elector.try_acquire_or_renew(stop_at - started).await {
                Ok(true) => *renewed.lock().unwrap_or_else(|p| p.into_inner()) = started,
                Ok(false) => return,
                Err(e) => tracing::warn!(error = %e, "could not renew leadership"),
            }
        }
    };
    let outcome = tokio::select! {
        _ = shutdown => Ok(()),
        _ = stop => Ok(()),
        _ = lost => Err(anyhow::anyhow!("lost leadership; exiting so the replica can re-join the election")),
        _ = controllers.join_next() => Err(anyhow::anyhow!("a controller stopped unexpectedly")),
    };
    ready.store(false, Ordering::SeqCst);
    let _ = ctl_tx.send(true);
    // In-flight reconciles get a grace period, but never past the write fence of the last
    // renewal: by then every task writing on our behalf (Omni calls, helm processes, workload
    // writes) is aborted, before a standby can take the Lease over.
    let mut drain_until = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    if let Some(elector) = &elector {
        let last = *renewed.lock().unwrap_or_else(|p| p.into_inner());
        drain_until = drain_until.min(elector.config().write_fence(last));
    }
    let drained = tokio::time::timeout_at(drain_until, async {
        while controllers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("in-flight reconciles did not finish in time; aborting them");
        controllers.abort_all();
        while controllers.join_next().await.is_some() {}
    }
    // From here on nothing writes on this replica's behalf (tests order this line against the
    // successor's takeover).
    match &elector {
        Some(elector) => {
            tracing::info!(identity = %elector.config().identity, "controllers stopped")
        }
        None => tracing::info!("controllers stopped"),
    }
    if let Some(elector) = &elector
        && let Err(e) = elector.release(LEASE_RELEASE_TIMEOUT).await
    {
        tracing::warn!(error = %e, "could not release the leader Lease");
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn bind_addresses_accept_port_only_form() {
        assert_eq!(
            parse_bind_address(":9443").unwrap(),
            "0.0.0.0:9443".parse().unwrap()
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(parse_bind_address("8080").unwrap_err().contains(":8080"));
        assert_eq!(optional_addr("metrics-bind-address", "0").unwrap(), None);
        assert_eq!(
            optional_addr("metrics-bind-address", ":8443").unwrap(),
            Some("0.0.0.0:8443".parse().unwrap())
        );
        assert!(
            optional_addr("metrics-bind-address", "nope")
                .unwrap_err()
                .to_string()
                .contains("--metrics-bind-address")
        );
    }

    #[test]
    fn chart_flags_parse() {
        let cli = Cli::try_parse_from([
            "run",
            "--namespace",
            "omni",
            "--leader-elect",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "127.0.0.1:8081",
            "--webhook-enabled",
            "false",
            "--helm-binary",
            "/usr/bin/helm",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let config = config_from_args(&cli.args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.scope, Scope::Namespace("omni".into()));
        assert_eq!(config.metrics_bind, None);
        assert!(config.webhook.is_none());
        assert_eq!(config.leader.map(|l| l.namespace), Some("omni".to_string()));
        assert_eq!(config.helm_binary, PathBuf::from("/usr/bin/helm"));
        assert_eq!(config.helm_max_concurrent, DEFAULT_HELM_MAX_CONCURRENT);
        assert_eq!(config.secret_sync_resync, Duration::from_secs(300));
        assert_eq!(config.secret_policy, SecretPolicy::default());
    }

    #[test]
    fn the_baseline_flag_parses_and_stays_out_of_the_help() {
        use crate::baseline::Quirk;
        use clap::CommandFactory as _;
        let help = Cli::command().render_long_help().to_string();
        assert!(!help.contains("baseline"), "{help}");
        let cli = Cli::try_parse_from(["run", "--namespace", "omni", "--baseline-quirks=all"])
            .unwrap_or_else(|e| panic!("{e}"));
        let quirks = cli.args.baseline_quirks.unwrap_or_default();
        assert!(quirks.has(Quirk::ConnectionPerCall) && quirks.has(Quirk::StatusEveryReconcile));
        let default = Cli::try_parse_from(["run", "--namespace", "omni"]).unwrap();
        assert_eq!(default.args.baseline_quirks, None);
        assert!(
            Cli::try_parse_from(["run", "--namespace", "omni", "--baseline-quirks=turbo"]).is_err()
        );
    }

    #[test]
    fn metrics_are_plain_unless_secure_is_asked_for_in_either_spelling() {
        let config_of = |flags: &[&str]| {
            let cli = Cli::try_parse_from([&["run", "--namespace", "omni"], flags].concat())
                .unwrap_or_else(|e| panic!("{e}"));
            config_from_args(&cli.args).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(config_of(&[]).metrics_secure, None);
        assert_eq!(config_of(&["--metrics-secure=false"]).metrics_secure, None);
        let self_signed = SecureMetricsConfig {
            cert_dir: None,
            cert_name: "tls.crt".into(),
            key_name: "tls.key".into(),
        };
        assert_eq!(
            config_of(&["--metrics-secure"]).metrics_secure,
            Some(self_signed.clone())
        );
        // The original operator's chart passes the value explicitly.
        assert_eq!(
            config_of(&["--metrics-secure=true"]).metrics_secure,
            Some(self_signed)
        );
        assert_eq!(
            config_of(&["--metrics-secure", "--metrics-cert-dir", "/certs"]).metrics_secure,
            Some(SecureMetricsConfig {
                cert_dir: Some(PathBuf::from("/certs")),
                cert_name: "tls.crt".into(),
                key_name: "tls.key".into(),
            })
        );
    }

    #[test]
    fn secret_policy_flags_parse() {
        let cli = Cli::try_parse_from([
            "run",
            "--namespace",
            "omni",
            "--require-secret-opt-in",
            "--allow-cross-namespace-export",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let config = config_from_args(&cli.args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config.secret_policy,
            SecretPolicy {
                require_opt_in: true,
                allow_cross_namespace_export: true,
            }
        );
    }

    #[test]
    fn tuning_flags_parse_and_reject_nonsense() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["run", "--namespace", "omni"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|cli| config_from_args(&cli.args))
        };
        let config = parse(&[
            "--helm-max-concurrent",
            "6",
            "--secret-sync-resync-interval",
            "1h30m",
        ])
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.helm_max_concurrent, 6);
        assert_eq!(config.secret_sync_resync, Duration::from_secs(5400));
        let off = parse(&["--secret-sync-resync-interval", "0"])
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(off.secret_sync_resync, Duration::ZERO);
        for bad in [
            &["--helm-max-concurrent", "0"][..],
            &["--secret-sync-resync-interval", "5 minutes"][..],
            &["--secret-sync-resync-interval=-1m"][..],
            &["--secret-sync-resync-interval", "9s"][..],
            &["--template-root", ""][..],
            &["--helm-work-dir", ""][..],
        ] {
            let err = match parse(bad) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{bad:?} was accepted"),
            };
            let flag = bad[0].split('=').next().unwrap_or_default();
            assert!(err.contains(flag), "{bad:?}: {err}");
        }
    }

    #[test]
    fn each_embedded_operator_gets_its_own_helm_work_dir() {
        // The driver empties sessions/ at start-up; two operators must never share it.
        let a = OperatorConfig::embedded(Scope::All).helm_work_dir;
        let b = OperatorConfig::embedded(Scope::All).helm_work_dir;
        assert_ne!(a, b);
    }

    #[test]
    fn helm_work_dir_and_template_root_flags() {
        let cli = Cli::try_parse_from([
            "run",
            "--namespace",
            "omni",
            "--helm-work-dir",
            "/work/helm",
            "--template-root",
            "/templates",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let config = config_from_args(&cli.args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.helm_work_dir, PathBuf::from("/work/helm"));
        assert_eq!(config.template_root, Some(PathBuf::from("/templates")));
        assert_eq!(config.min_interval, Duration::from_secs(10));
    }

    #[test]
    fn all_namespaces_wins_over_the_pod_namespace_which_then_holds_the_lease() {
        let cli = Cli::try_parse_from([
            "run",
            "--namespace",
            "omni",
            "--all-namespaces",
            "--leader-elect",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let config = config_from_args(&cli.args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.scope, Scope::All);
        assert_eq!(config.leader.map(|l| l.namespace), Some("omni".to_string()));
    }
}
