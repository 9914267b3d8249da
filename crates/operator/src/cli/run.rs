//! `omni-operator run`: its flags, turned into an [`OperatorConfig`] for the operator process
//! ([`crate::process::runtime`], which tests and the sandbox embed directly).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::controllers::{Scope, SystemClock};
use crate::domain::helm::source::{ChartSourcePolicy, HostPattern};
use crate::domain::identity_policy::IdentityPolicy;
use crate::domain::secret_policy::SecretPolicy;
use crate::domain::tenancy::{Tenancy, Timeouts};
use crate::process::leader::LeaderConfig;
use crate::process::metrics::Metrics;
use crate::process::secure_metrics::SecureMetricsConfig;
use crate::process::shard::Shard;
use crate::process::webhook::WebhookConfig;

pub(crate) use crate::process::runtime::default_helm_work_dir;
pub use crate::process::runtime::{OperatorConfig, SHUTDOWN_MAX, run_operator};

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
    pub(crate) all_namespaces: bool,
    /// Only reconcile while holding the leader Lease.
    #[arg(long)]
    pub(crate) leader_elect: bool,
    /// Namespace of the leader Lease (defaults to the watched namespace).
    #[arg(long)]
    pub(crate) leader_election_namespace: Option<String>,
    /// Name of the leader Lease. Defaults to `5dc6398d.texashpc.com` (the original's) on the
    /// default shard and to `omni-operator-shard-NAME` on a shard whose selector names one
    /// value of `sharding.omni.texashpc.com/key`; any other selector needs it.
    #[arg(long, env = "LEADER_ELECTION_ID", value_parser = parse_lease_name)]
    pub(crate) leader_election_id: Option<String>,
    /// Reconcile only the objects of the operator's kinds whose labels match this selector
    /// (sharding, Flux's convention): `sharding.omni.texashpc.com/key=NAME` on shard NAME,
    /// `!sharding.omni.texashpc.com/key` on the default shard. Unset: every object.
    #[arg(long, env = "WATCH_LABEL_SELECTOR", value_parser = parse_selector)]
    pub(crate) watch_label_selector: Option<Shard>,
    /// Address of `/metrics`; `0` disables.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub(crate) metrics_bind_address: String,
    /// Serve `/metrics` over HTTPS, only to callers whose bearer token (TokenReview) belongs to
    /// a user allowed `get` on the URL `/metrics` (SubjectAccessReview). Off: plain HTTP for
    /// everyone.
    #[arg(long, env = "METRICS_SECURE", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub metrics_secure: bool,
    /// Directory with the secure metrics serving certificate; unset serves a self-signed one
    /// generated at start.
    #[arg(long, value_parser = parse_non_empty_path)]
    pub(crate) metrics_cert_dir: Option<PathBuf>,
    /// Certificate file name in the metrics cert directory.
    #[arg(long, default_value = "tls.crt")]
    pub(crate) metrics_cert_name: String,
    /// Key file name in the metrics cert directory.
    #[arg(long, default_value = "tls.key")]
    pub(crate) metrics_key_name: String,
    /// Address of `/healthz` and `/readyz`; `0` disables.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub(crate) health_probe_bind_address: String,
    /// Serve the validating admission webhook.
    #[arg(long, env = "ENABLE_WEBHOOKS", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) webhook_enabled: bool,
    /// Address of the webhook server.
    #[arg(long, default_value = "0.0.0.0:9443", value_parser = parse_bind_address)]
    pub(crate) webhook_bind_address: SocketAddr,
    /// Directory with the webhook serving certificate.
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub(crate) webhook_cert_dir: PathBuf,
    /// Certificate file name in the cert directory.
    #[arg(long, default_value = "tls.crt")]
    pub(crate) webhook_cert_name: String,
    /// Key file name in the cert directory.
    #[arg(long, default_value = "tls.key")]
    pub(crate) webhook_key_name: String,
    /// Helm executable used by OmniHelmRelease.
    #[arg(long, env = "HELM_BINARY", default_value = "helm")]
    pub helm_binary: PathBuf,
    /// Most helm processes running at once (each release runs at most one at a time).
    #[arg(long, env = "HELM_MAX_CONCURRENT", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) helm_max_concurrent: u16,
    /// Most requests in flight to the Kubernetes API at once (watches aside); more wait their
    /// turn instead of each opening a connection (see docs/performance.md).
    #[arg(long, env = "KUBE_API_MAX_IN_FLIGHT", default_value_t = crate::process::api_client::MANAGEMENT_MAX_IN_FLIGHT as u16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) kube_api_max_in_flight: u16,
    /// Most reconciles each controller runs at once (0: unbounded). Objects beyond it wait
    /// their turn in the controller's queue (see docs/performance.md).
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = crate::process::runtime::DEFAULT_MAX_CONCURRENT_RECONCILES, value_parser = clap::value_parser!(u16).range(0..=4096))]
    pub(crate) max_concurrent_reconciles: u16,
    /// How often an in-sync OmniSecretSync re-reads its workload copy to repair drift (Go
    /// duration; `0` turns the periodic check off, leaving only change-driven syncs).
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    pub(crate) secret_sync_resync_interval: Duration,
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
    pub(crate) require_secret_opt_in: bool,
    /// With `--all-namespaces`, let an OmniKubeconfigExport write its Secret into a namespace
    /// other than its own.
    #[arg(long, env = "ALLOW_CROSS_NAMESPACE_EXPORT")]
    pub(crate) allow_cross_namespace_export: bool,
    /// Honour `serviceAccount.allowClusterAdmin` of OmniKubeconfigExports. `false` (the lockdown
    /// profile) refuses every cluster-admin-equivalent identity, whatever the object says.
    #[arg(long, env = "ALLOW_CLUSTER_ADMIN_EXPORTS", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) allow_cluster_admin_exports: bool,
    /// A user or group the workload clusters trust like `system:masters`, besides the built-in
    /// ones (every `system:` name but `system:authenticated`, and `kubeadm:cluster-admins`);
    /// repeatable or comma-separated. Exports need `allowClusterAdmin` for it.
    #[arg(
        long = "privileged-identity",
        env = "PRIVILEGED_IDENTITIES",
        value_delimiter = ','
    )]
    pub(crate) privileged_identities: Vec<String>,
    /// Longest `ttl` an OmniKubeconfigExport may ask for (Go duration).
    #[arg(long, env = "MAX_EXPORT_TTL", default_value = "8760h", value_parser = parse_positive_duration)]
    pub(crate) max_export_ttl: Duration,
    /// Hosts OmniHelmRelease charts may be fetched from (repositories, the chart URLs their
    /// indexes list, redirects, registries and their token services): `host`, `*.domain` or an
    /// IP, each optionally with `:port`; comma-separated or repeated. Unset: any host.
    #[arg(long = "chart-source-allowed-hosts", env = "CHART_SOURCE_ALLOWED_HOSTS",
          value_delimiter = ',', value_parser = parse_host_pattern)]
    pub(crate) chart_source_allowed_hosts: Vec<HostPattern>,
    /// Never fetch charts from loopback, link-local or private addresses (checked on the
    /// addresses a name resolves to, before connecting). Off by default: air-gapped
    /// installations serve charts from private networks.
    #[arg(long, env = "CHART_SOURCE_DENY_PRIVATE_NETWORKS", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) chart_source_deny_private_networks: bool,
    /// Honour `spec.chart.insecure: true` of OmniHelmReleases (credentials over plain HTTP,
    /// plain-HTTP registries). `false` refuses such objects.
    #[arg(long, env = "ALLOW_INSECURE_CHART_SOURCES", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) allow_insecure_chart_sources: bool,
    /// Time to establish a connection (TCP and TLS) to a workload API server or chart source.
    #[arg(long, env = "CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) connect_timeout: Duration,
    /// Silence tolerated from a workload API server or chart source while waiting for its
    /// answer or the next part of it.
    #[arg(long, env = "READ_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub(crate) read_timeout: Duration,
    /// Longest request to a workload API server or chart source, answer included.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "60s", value_parser = parse_positive_duration)]
    pub(crate) request_timeout: Duration,
    /// Time to establish a connection to Omni.
    #[arg(long, env = "OMNI_CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) omni_connect_timeout: Duration,
    /// Longest unary Omni call (watches are kept alive by HTTP/2 pings instead).
    #[arg(long, env = "OMNI_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub(crate) omni_request_timeout: Duration,
    /// Reconciles of one controller that the objects of one target (a kubeconfig Secret, an
    /// OmniCluster, an OmniConnection) hold at once while the target is slow; one whose passes
    /// end within 5 s may hold up to four times as many. The others wait their turn without
    /// holding a slot, so a server that never answers delays only its own objects.
    #[arg(long, env = "MAX_RECONCILES_PER_TARGET", default_value_t = crate::controllers::DEFAULT_PER_TARGET,
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub(crate) max_reconciles_per_target: u16,
    /// ServiceAccount (in each object's own namespace) the operator impersonates to read the
    /// Secrets an OmniConnection, OmniSecretSync or OmniHelmRelease references when the object
    /// names no `spec.serviceAccountName`: the lockdown convention. Unset: such reads use the
    /// operator's own identity.
    #[arg(long, env = "DEFAULT_SERVICE_ACCOUNT")]
    pub(crate) default_service_account: Option<String>,
    /// How OmniClusters that do not set `spec.changePolicy.destructive` treat a plan that would
    /// destroy something in Omni: `Allow` applies it, `RequireApproval` holds it until the
    /// annotation `omni.texashpc.com/approve-plan` carries its hash (docs/plan.md).
    #[arg(
        long,
        env = "DEFAULT_DESTRUCTIVE_POLICY",
        default_value = "Allow",
        value_name = "Allow|RequireApproval"
    )]
    pub(crate) default_destructive_policy: crate::api::plan::DestructivePolicy,
    /// Benchmarks only: model the original implementation's costs (see `crate::benchmark`).
    #[arg(long, hide = true, value_parser = crate::benchmark::parse)]
    pub baseline_quirks: Option<crate::benchmark::Quirks>,
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

fn parse_selector(value: &str) -> Result<Shard, String> {
    Shard::parse(value).map_err(|e| e.to_string())
}

/// A Lease name: a DNS subdomain (lowercase alphanumerics, `-` and `.`, at most 253).
fn parse_lease_name(value: &str) -> Result<String, String> {
    if crate::api::cluster::is_dns1123_subdomain(value) {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "{value:?} is not a Lease name (a lowercase DNS subdomain)"
        ))
    }
}

fn parse_host_pattern(value: &str) -> Result<HostPattern, String> {
    HostPattern::parse(value)
}

/// Parses a positive Go duration such as `24h`.
pub(crate) fn parse_positive_duration(value: &str) -> Result<Duration, String> {
    let d = crate::api::duration::GoDuration::parse(value).map_err(|e| e.to_string())?;
    if !d.is_positive() {
        return Err(format!("{value:?} must be greater than zero"));
    }
    d.to_std()
        .ok_or_else(|| format!("{value:?} is out of range"))
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
pub(crate) fn parse_bind_address(value: &str) -> Result<SocketAddr, String> {
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
    let shard = args.watch_label_selector.clone().unwrap_or_default();
    let leader = if args.leader_elect {
        let ns = match (&args.leader_election_namespace, &scope) {
            (Some(ns), _) => ns.clone(),
            (None, Scope::Namespace(ns)) => ns.clone(),
            (None, Scope::All) => resolve_namespace(args.namespace.as_deref())
                .context("--leader-election-namespace is needed with --all-namespaces")?,
        };
        let name = match &args.leader_election_id {
            Some(name) => name.clone(),
            None => shard.default_lease_name().map_err(anyhow::Error::msg)?,
        };
        Some(LeaderConfig {
            name,
            ..LeaderConfig::new(ns)
        })
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
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        secret_policy: SecretPolicy {
            require_opt_in: args.require_secret_opt_in,
            allow_cross_namespace_export: args.allow_cross_namespace_export,
        },
        tenancy: Tenancy {
            identity: IdentityPolicy {
                honour_allow_cluster_admin: args.allow_cluster_admin_exports,
                privileged: args
                    .privileged_identities
                    .iter()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
                max_ttl: args.max_export_ttl,
                ..IdentityPolicy::default()
            },
            chart_sources: ChartSourcePolicy {
                allowed_hosts: args.chart_source_allowed_hosts.clone(),
                deny_private_networks: args.chart_source_deny_private_networks,
                allow_insecure: args.allow_insecure_chart_sources,
            },
            timeouts: Timeouts {
                connect: args.connect_timeout,
                read: args.read_timeout,
                request: args.request_timeout,
                omni_connect: args.omni_connect_timeout,
                omni_request: args.omni_request_timeout,
            },
            per_target_reconciles: args.max_reconciles_per_target,
            default_service_account: args
                .default_service_account
                .clone()
                .filter(|n| !n.trim().is_empty()),
        },
        default_destructive: args.default_destructive_policy,
        clock: Arc::new(SystemClock),
        metrics: Arc::new(Metrics::new()),
        baseline: args.baseline_quirks.unwrap_or_default(),
        shard,
    })
}

/// Runs the subcommand until SIGINT/SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let config = config_from_args(&args)?;
    if config.baseline != crate::benchmark::Quirks::default() {
        tracing::warn!(
            quirks = ?config.baseline,
            "baseline quirks are on: this process models the original implementation for benchmarks"
        );
    }
    let mut kube_config = kube::Config::infer()
        .await
        .context("connect to the Kubernetes API")?;
    // The program name is the field manager the API server records for our writes: per
    // shard, so an object's managedFields show which shard wrote it.
    let agent = format!(
        "{}/{}",
        config.shard.program_name(),
        env!("CARGO_PKG_VERSION")
    );
    kube_config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&agent).context("user agent")?,
    ));
    let client =
        crate::process::api_client::client(kube_config, usize::from(args.kube_api_max_in_flight))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::runtime::DEFAULT_HELM_MAX_CONCURRENT;
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
        assert_eq!(config.max_concurrent_reconciles, 256);
    }

    #[test]
    fn the_reconcile_bound_takes_zero_for_unbounded_and_refuses_too_many() {
        let parse = |value: &str| {
            Cli::try_parse_from(["run", &format!("--max-concurrent-reconciles={value}")])
                .map(|cli| cli.args.max_concurrent_reconciles)
        };
        assert_eq!(parse("0").ok(), Some(0));
        assert_eq!(parse("64").ok(), Some(64));
        for bad in ["4097", "-1", "many"] {
            let err = parse(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("--max-concurrent-reconciles"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_baseline_flag_parses_and_stays_out_of_the_help() {
        use crate::benchmark::Quirk;
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

    /// The configuration `run --namespace omni EXTRA…` makes, or the error text naming the flag.
    fn parse(extra: &[&str]) -> Result<OperatorConfig, String> {
        let mut argv = vec!["run", "--namespace", "omni"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())
            .and_then(|cli| config_from_args(&cli.args).map_err(|e| e.to_string()))
    }

    #[test]
    fn identity_policy_flags_parse() {
        let default = parse(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(default.tenancy.identity, IdentityPolicy::default());
        let strict = parse(&[
            "--allow-cluster-admin-exports=false",
            "--privileged-identity=platform:admins,oidc:ops",
            "--privileged-identity",
            "breakglass",
            "--max-export-ttl=24h",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!strict.tenancy.identity.honour_allow_cluster_admin);
        assert_eq!(
            strict.tenancy.identity.privileged,
            ["platform:admins", "oidc:ops", "breakglass"]
        );
        assert_eq!(
            strict.tenancy.identity.max_ttl,
            Duration::from_secs(24 * 3600)
        );
        for bad in ["--max-export-ttl=0", "--max-export-ttl=a year"] {
            let err = parse(&[bad]).err().unwrap_or_default();
            assert!(err.contains("--max-export-ttl"), "{bad}: {err}");
        }
    }

    #[test]
    fn chart_source_and_timeout_flags_parse() {
        let default = parse(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(default.tenancy, Tenancy::default());
        let locked = parse(&[
            "--chart-source-allowed-hosts=charts.example.com,*.internal:8443",
            "--chart-source-deny-private-networks",
            "--allow-insecure-chart-sources=false",
            "--connect-timeout=3s",
            "--read-timeout=5s",
            "--request-timeout=20s",
            "--omni-connect-timeout=4s",
            "--omni-request-timeout=15s",
            "--max-reconciles-per-target=8",
            "--default-service-account=tenant",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let sources = &locked.tenancy.chart_sources;
        let hosts: Vec<String> = sources
            .allowed_hosts
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(hosts, ["charts.example.com", "*.internal:8443"]);
        assert!(sources.deny_private_networks && !sources.allow_insecure);
        let t = locked.tenancy.timeouts;
        assert_eq!(
            [t.connect, t.read, t.request, t.omni_connect, t.omni_request],
            [3, 5, 20, 4, 15].map(Duration::from_secs)
        );
        assert_eq!(locked.tenancy.per_target_reconciles, 8);
        assert_eq!(
            locked.tenancy.default_service_account.as_deref(),
            Some("tenant")
        );
        for bad in [
            "--chart-source-allowed-hosts=https://x",
            "--read-timeout=0s",
        ] {
            let err = parse(&[bad]).err().unwrap_or_default();
            let flag = bad.split('=').next().unwrap_or_default();
            assert!(err.contains(flag), "{bad}: {err}");
        }
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
    fn shard_flags_pick_the_selector_and_a_lease_per_shard() {
        use crate::api::keys::SHARD_LABEL;
        use crate::process::leader::LEASE_NAME;
        let lease = |c: &OperatorConfig| c.leader.as_ref().map(|l| l.name.clone());
        let plain = parse(&["--leader-elect"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plain.shard, Shard::all());
        assert_eq!(lease(&plain).as_deref(), Some(LEASE_NAME));
        let default = parse(&[
            "--leader-elect",
            &format!("--watch-label-selector=!{SHARD_LABEL}"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lease(&default).as_deref(), Some(LEASE_NAME));
        assert_eq!(
            default.shard.selector(),
            Some(format!("!{SHARD_LABEL}").as_str())
        );
        let one = parse(&[
            "--leader-elect",
            "--watch-label-selector",
            &format!("{SHARD_LABEL}=shard1"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lease(&one).as_deref(), Some("omni-operator-shard-shard1"));
        assert_eq!(one.shard.name(), Some("shard1"));
        let named = parse(&[
            "--leader-elect",
            "--watch-label-selector=team=blue",
            "--leader-election-id=blue.example.com",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lease(&named).as_deref(), Some("blue.example.com"));
        // A selector that names no shard needs a Lease name, but only with leader election.
        let err = parse(&["--leader-elect", "--watch-label-selector=team=blue"]).unwrap_err();
        assert!(err.contains("--leader-election-id"), "{err}");
        assert!(parse(&["--watch-label-selector=team=blue"]).is_ok());
        for (bad, flag) in [
            ("--watch-label-selector=a in (b", "--watch-label-selector"),
            ("--leader-election-id=Not_A_Lease", "--leader-election-id"),
        ] {
            let err = parse(&[bad]).unwrap_err();
            assert!(err.contains(flag), "{bad}: {err}");
        }
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
