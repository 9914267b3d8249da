//! The operator process: controllers (behind leader election), admission webhook, metrics and
//! health probes, and their shutdown. `omni-operator run` ([`crate::cli::run`]) turns flags into
//! an [`OperatorConfig`] and calls [`run_operator`]; tests and the sandbox embed the whole
//! operator the same way with a client of their choice.

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

use crate::benchmark::Quirks;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::omni::OmniClients;
use crate::controllers::shared::setup::Setup;
use crate::controllers::shared::watches::Watches;
use crate::controllers::{self, Clock, Scope, SystemClock};
use crate::domain::helm::{Helm, HelmConfig};
use crate::domain::secret_policy::SecretPolicy;
use crate::domain::workload::WorkloadClients;
use crate::process::leader::{LeaderConfig, LeaderElector};
use crate::process::metrics::Metrics;
use crate::process::secure_metrics::{self, SecureMetricsConfig};
use crate::process::shard::Shard;
use crate::process::webhook::{self, WebhookConfig};

/// How long controllers may take to finish in-flight reconciles on shutdown.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long releasing the Lease on shutdown may take.
pub(crate) const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest a shutdown takes: the controllers' drain, the Lease release, then the servers'
/// (webhook, probes, metrics) drain. The pod's termination grace period must exceed it.
pub const SHUTDOWN_MAX: Duration = Duration::from_secs(
    SHUTDOWN_GRACE.as_secs()
        + LEASE_RELEASE_TIMEOUT.as_secs()
        + crate::process::tls::SHUTDOWN_GRACE.as_secs(),
);

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
    /// (`crate::api::duration::MIN_INTERVAL` from the command line; embedders running short
    /// scenarios may lower it).
    pub min_interval: Duration,
    /// Most helm processes at once.
    pub(crate) helm_max_concurrent: usize,
    /// OmniSecretSync drift re-check interval; zero turns it off.
    pub secret_sync_resync: Duration,
    /// Most reconciles each controller runs at once; zero is unbounded.
    pub max_concurrent_reconciles: u16,
    /// Which Secrets objects may use, and where exports may write.
    pub secret_policy: SecretPolicy,
    /// The deployment's multi-tenancy settings.
    pub tenancy: crate::domain::tenancy::Tenancy,
    /// How OmniClusters without `spec.changePolicy.destructive` treat destructive plans.
    pub default_destructive: crate::api::plan::DestructivePolicy,
    /// Time source of the controllers.
    pub clock: Arc<dyn Clock>,
    /// Metrics registry (shared so embedders can read it).
    pub metrics: Arc<Metrics>,
    /// The behaviours of the original modelled for `omni-bench --baseline` (none by default).
    pub baseline: Quirks,
    /// The objects this replica set reconciles (`--watch-label-selector`; all by default).
    pub shard: Shard,
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
            .field("shard", &self.shard.selector())
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
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
            secret_policy: SecretPolicy::default(),
            tenancy: crate::domain::tenancy::Tenancy::default(),
            default_destructive: crate::api::plan::DestructivePolicy::Allow,
            clock: Arc::new(SystemClock),
            metrics: Arc::new(Metrics::new()),
            baseline: Quirks::default(),
            shard: Shard::all(),
        }
    }
}

/// Default size of the helm process pool: two keeps a 2-CPU operator pod responsive while a
/// slow chart download or `--wait` is in progress.
pub(crate) const DEFAULT_HELM_MAX_CONCURRENT: usize = 2;

/// Default bound on each controller's reconciles in flight: at 1,000 clusters it held the idle
/// operator at zero CPU and change latency under 250 ms, where the unbounded runner polled
/// thousands of waiting passes (docs/performance.md).
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 256;

/// Without `--helm-work-dir`, helm's state lives under the temp dir (the chart always passes
/// the flag, pointing into its emptyDir, because the container's root filesystem is read-only).
pub(crate) fn default_helm_work_dir() -> PathBuf {
    std::env::temp_dir().join("omni-operator-helm")
}

/// A work directory of its own for each embedded operator: the helm driver empties
/// `sessions/` at start-up, which must never hit another running operator's sessions (tests
/// run several in one process, and several test processes at once).
fn embedded_helm_work_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "omni-operator-helm-embedded-{}",
        uuid::Uuid::new_v4().simple()
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
        let (c, s) = (client.clone(), stop.clone());
        servers.spawn(async move { webhook::serve(wh, c, s).await.context("webhook server") });
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

/// Waits until `elector` holds the Lease; the start of the successful attempt (what the renewal
/// deadline and the write fence count from), or `None` when `shutdown` came first.
async fn acquire(
    elector: &LeaderElector,
    shutdown: &Shared<BoxFuture<'static, ()>>,
) -> Option<tokio::time::Instant> {
    let leader = elector.config();
    tracing::info!(identity = %leader.identity, "waiting for leadership");
    loop {
        let started = tokio::time::Instant::now();
        let attempt = elector.try_acquire_or_renew(leader.renew_deadline);
        tokio::select! {
            _ = shutdown.clone() => return None,
            result = attempt => match result {
                Ok(true) => {
                    tracing::info!("acquired leadership");
                    return Some(started);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election"),
            },
        }
        tokio::select! {
            _ = shutdown.clone() => return None,
            _ = tokio::time::sleep(leader.retry_period) => {}
        }
    }
}

/// Renews the Lease of `elector` until a renewal fails for good; `renewed` holds the start of
/// the last successful one. Returns when leadership is lost (or never, without an elector).
async fn keep_leading(
    elector: Option<&LeaderElector>,
    renewed: &std::sync::Mutex<tokio::time::Instant>,
) {
    let Some(elector) = elector else {
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
}

/// Starts every controller and the shared watches on the tasks of `controllers`, until
/// `stop` completes.
async fn start_controllers(
    config: &OperatorConfig,
    client: kube::Client,
    stop: Stop,
    controllers: &mut tokio::task::JoinSet<()>,
) {
    let pod = std::env::var("POD_NAME").ok();
    let helm = start_helm(config).await;
    let tenancy = &config.tenancy;
    let timeouts = tenancy.timeouts;
    let omni = OmniClients::new(client.clone())
        .with_timeouts(timeouts.omni_connect, timeouts.omni_request)
        .with_default_service_account(tenancy.default_service_account.clone());
    let setup = Setup {
        config,
        omni: Arc::new(if config.baseline.connects_per_call() {
            omni.without_reuse()
        } else {
            omni
        }),
        workload: Arc::new(WorkloadClients::new(client.clone()).with_limits(timeouts.outbound())),
        helm,
    };
    let ctx = Arc::new(
        Context::new(
            client,
            config.scope.clone(),
            config.clock.clone(),
            config.metrics.clone(),
            pod,
        )
        .with_max_concurrent_reconciles(config.max_concurrent_reconciles)
        .with_per_target_reconciles(tenancy.per_target_reconciles)
        .with_baseline(config.baseline)
        .with_shard(config.shard.clone()),
    );
    // Every controller subscribes to the kinds it reads before the watches start: one watch
    // and one cache per kind, shared.
    let mut watches = Watches::new(&ctx);
    for controller in controllers::start_all(&ctx, &setup, &mut watches, stop.clone()) {
        controllers.spawn(controller);
    }
    tracing::debug!(kinds = watches.count(), "watching");
    controllers.spawn(watches.run(stop));
}

/// Gives the in-flight reconciles of `controllers` until `until`, then aborts what is left.
async fn drain(controllers: &mut tokio::task::JoinSet<()>, until: tokio::time::Instant) {
    let drained = tokio::time::timeout_at(until, async {
        while controllers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("in-flight reconciles did not finish in time; aborting them");
        controllers.abort_all();
        while controllers.join_next().await.is_some() {}
    }
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
        match acquire(elector, &shutdown).await {
            Some(started) => renewed_at = started,
            None => return Ok(()),
        }
    }
    let renewed = std::sync::Mutex::new(renewed_at);
    let (ctl_tx, mut ctl_rx) = tokio::sync::watch::channel(false);
    let ctl_stop: Stop = async move {
        let _ = ctl_rx.wait_for(|v| *v).await;
    }
    .boxed()
    .shared();
    let mut controllers = tokio::task::JoinSet::new();
    start_controllers(config, client, ctl_stop, &mut controllers).await;
    let outcome = tokio::select! {
        _ = shutdown => Ok(()),
        _ = stop => Ok(()),
        _ = keep_leading(elector.as_ref(), &renewed) => Err(anyhow::anyhow!("lost leadership; exiting so the replica can re-join the election")),
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
    drain(&mut controllers, drain_until).await;
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
