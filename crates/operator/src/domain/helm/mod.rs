//! Driver for the `helm` binary, used by the OmniHelmRelease controller.
//!
//! Rust has no Helm SDK, so the operator runs the official helm CLI (v4, or v3.13+) as a
//! subprocess. Every session gets a private working directory (mode 0700) holding the workload
//! kubeconfig, the values file, the chart archive the operator fetched and verified
//! ([`source`]), empty repository and registry files, and helm's own cache, config and data
//! directories, all removed when the session ends; nothing of it is ever logged. helm never
//! reaches a chart repository or registry and never sees their credentials: it installs the
//! local archive, so no helm cache is shared between objects.
//!
//! Concurrency: at most one session per release at a time (a per-release lock), a bounded
//! number of helm processes overall (a semaphore), and each workload API server's share of
//! them (`Helm::target_share`).

pub mod args;
pub mod output;
pub mod source;
pub(crate) mod values;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedMutexGuard, Semaphore};

pub(crate) use output::{HelmStatus, HistoryEntry, ReleaseInfo, TestHook};

use args::{CallFiles, InstallVerb};

/// Which command-line dialect the helm binary speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelmFlavor {
    /// helm 3.13 or newer: `--atomic`, boolean `--wait`.
    V3,
    /// helm 4: `--rollback-on-failure`, `--wait=watcher|hookOnly`.
    V4,
}

/// Where a chart comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChartSource {
    /// A chart name in an HTTP(S) chart repository.
    Repository {
        /// Repository URL (the one with `index.yaml`).
        url: String,
        /// Chart name in that repository.
        chart: String,
    },
    /// A full `oci://` chart reference.
    Oci {
        /// The reference, e.g. `oci://ghcr.io/org/charts/app`.
        reference: String,
    },
}

impl ChartSource {
    /// Builds the source from the OmniHelmRelease fields: a chart starting with `oci://` is a
    /// full reference and the repository is ignored.
    pub(crate) fn from_spec(repository: &str, chart: &str) -> Self {
        let chart = chart.trim();
        if chart.starts_with("oci://") {
            ChartSource::Oci {
                reference: chart.to_string(),
            }
        } else {
            ChartSource::Repository {
                url: repository.trim().to_string(),
                chart: chart.to_string(),
            }
        }
    }
}

/// One release as one pass of its OmniHelmRelease resolved it from the spec: everything helm
/// needs to read, install, upgrade, roll back or uninstall it. Built once per pass, so every
/// action works on the same name, namespace, timeout and inputs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReleaseRequest {
    /// Names the release in its workload cluster for the helm driver's per-release lock, so two
    /// objects pointing at the same release never run helm on it at once.
    pub(crate) lock_key: String,
    /// Digest of the inputs that define the release (target, chart, version, values; not the
    /// kubeconfig and not the operation knobs): a release applied with this digest is as the
    /// spec wants it. Not sent to helm.
    pub(crate) digest: String,
    /// Release name.
    pub(crate) release_name: String,
    /// Release namespace in the workload cluster.
    pub namespace: String,
    /// Chart location.
    pub chart: ChartSource,
    /// Chart version (or constraint).
    pub(crate) chart_version: String,
    /// Values (a JSON object).
    pub values: serde_json::Value,
    /// Create the namespace on install.
    pub create_namespace: bool,
    /// Wait for resources to become ready (otherwise only for hooks).
    pub wait: bool,
    /// With `wait`, also wait for Jobs to complete.
    pub(crate) wait_for_jobs: bool,
    /// Helm's per-operation timeout.
    pub timeout: Duration,
    /// Roll back (or uninstall, on install) when the operation fails.
    pub atomic: bool,
    /// Skip hooks.
    pub(crate) disable_hooks: bool,
    /// Skip installing CRDs from the chart.
    pub(crate) skip_crds: bool,
    /// Revisions to keep on upgrade (0 = helm's default).
    pub(crate) max_history: u32,
    /// Release labels naming the owning OmniHelmRelease (`--labels`, helm 3.13+). Helm keeps
    /// them as labels of its storage Secret and carries them over to later revisions.
    pub(crate) owner_labels: Vec<(String, String)>,
}

/// What one install or upgrade adds to its release's request: what is particular to the
/// revision it creates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Revision {
    /// Release labels beyond the owner's: the marks of the operator process that starts the
    /// revision.
    pub(crate) labels: Vec<(String, String)>,
    /// Install over a release that was uninstalled with its history kept (`--replace`).
    pub(crate) replace: bool,
}

/// Credentials for a chart repository or OCI registry, and a CA bundle to trust.
#[derive(Clone, Default)]
pub(crate) struct RepositoryAuth {
    /// Basic-auth user name (HTTP repositories) or registry user name (OCI).
    pub username: Option<String>,
    /// Password or token. Never logged or shown in errors.
    pub password: Option<String>,
    /// PEM CA bundle for the repository's TLS certificate.
    pub ca_bundle: Option<Vec<u8>>,
}

impl fmt::Debug for RepositoryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepositoryAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("ca_bundle", &self.ca_bundle.as_ref().map(|b| b.len()))
            .finish()
    }
}

/// Failures of a helm invocation. Messages never contain the kubeconfig, passwords or values.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// The binary could not be started.
    #[error("cannot run helm binary {path:?}: {message}")]
    Spawn {
        /// Configured binary path.
        path: PathBuf,
        /// Why it failed.
        message: String,
    },
    /// The binary is too old or reports an unknown version.
    #[error("helm version {version:?} is not supported; helm 3.13 or newer is required")]
    Unsupported {
        /// What `helm version` printed.
        version: String,
    },
    /// Helm ran and reported an error.
    #[error("helm {action} failed: {message}")]
    Failed {
        /// The helm verb.
        action: &'static str,
        /// Helm's error text, redacted and shortened.
        message: String,
    },
    /// Helm did not finish in time and was killed.
    #[error("helm {action} did not finish within {seconds}s")]
    Timeout {
        /// The helm verb.
        action: &'static str,
        /// The limit.
        seconds: u64,
    },
    /// Helm's output could not be understood.
    #[error("unexpected output from helm {action}: {message}")]
    Output {
        /// The helm verb.
        action: &'static str,
        /// The parse error.
        message: String,
    },
    /// The private working files could not be written.
    #[error("cannot prepare helm working files: {0}")]
    Io(String),
}

impl HelmError {
    /// The message without the `helm <verb> failed:` prefix when helm itself reported the
    /// failure, for callers that already name the action.
    pub fn detail(&self) -> String {
        match self {
            HelmError::Failed { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

impl From<std::io::Error> for HelmError {
    fn from(err: std::io::Error) -> Self {
        HelmError::Io(err.to_string())
    }
}

/// Driver configuration.
#[derive(Clone, Debug)]
pub struct HelmConfig {
    /// Path or name of the helm binary.
    pub binary: PathBuf,
    /// Writable directory for helm's cache/config/data and the private session directories.
    pub work_dir: PathBuf,
    /// Maximum number of helm processes running at once.
    pub max_concurrent: usize,
}

/// Shared helm driver; cheap to clone.
#[derive(Clone)]
pub struct Helm {
    inner: Arc<Inner>,
}

struct Inner {
    config: HelmConfig,
    flavor: HelmFlavor,
    version: String,
    processes: Semaphore,
    run_id: String,
    release_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each workload API server's share of `processes` ([`Helm::target_share`]).
    targets: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Extra time granted to a helm process beyond its own `--timeout`, for start-up and reading
/// the chart, before it is killed.
const PROCESS_GRACE: Duration = Duration::from_secs(90);
/// Limit for quick read-only calls (status, history, version, login).
const QUICK_CALL_LIMIT: Duration = Duration::from_secs(120);

/// Start-up attempts before helm is declared unavailable, and the pause after each failure.
/// Without them one transient failure (a file of the previous process's sessions vanishing
/// while `sessions/` is emptied, a spawn refused with "text file busy") disabled every
/// OmniHelmRelease for the life of the process.
const START_ATTEMPTS: u32 = 3;
const START_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Whether a start-up failure may pass on its own. A too-old helm, unreadable version output
/// or a hung `helm version` (which already took its full limit) are not retried.
fn transient_at_start(err: &HelmError) -> bool {
    matches!(
        err,
        HelmError::Spawn { .. } | HelmError::Io(_) | HelmError::Failed { .. }
    )
}

impl Helm {
    /// Prepares helm's directories (see `prepare_work_dir`) and detects the helm version,
    /// retrying failures that may be transient (`START_ATTEMPTS`).
    pub async fn new(config: HelmConfig) -> Result<Self, HelmError> {
        let mut attempt = 1;
        loop {
            match Self::start(&config).await {
                Ok(helm) => return Ok(helm),
                Err(err) if attempt < START_ATTEMPTS && transient_at_start(&err) => {
                    tracing::info!(error = %err, attempt, "helm driver start failed; retrying");
                    tokio::time::sleep(START_RETRY_PAUSE * attempt).await;
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }

    async fn start(config: &HelmConfig) -> Result<Self, HelmError> {
        let config = config.clone();
        prepare_work_dir(&config.work_dir)?;
        let processes = Semaphore::new(config.max_concurrent.max(1));
        let version_args = [
            "version".to_string(),
            "--template".into(),
            "{{.Version}}".into(),
        ];
        let home = tempfile::Builder::new()
            .prefix("version-")
            .tempdir_in(config.work_dir.join("sessions"))?;
        let out = exec(
            &config,
            &processes,
            "version",
            &version_args,
            QUICK_CALL_LIMIT,
            &[],
            home.path(),
        )
        .await?;
        let version = out.trim().to_string();
        let flavor = parse_flavor(&version)?;
        Ok(Helm {
            inner: Arc::new(Inner {
                flavor,
                version,
                processes,
                // Random per driver, so per operator process (and per start of an embedded
                // operator): revisions are marked with it to tell whose helm run left them.
                run_id: uuid::Uuid::new_v4().simple().to_string(),
                release_locks: Mutex::new(HashMap::new()),
                targets: Mutex::new(HashMap::new()),
                config,
            }),
        })
    }

    /// How many of the pool's helm processes one workload API server may hold at once: all but
    /// one when the pool has more than one, so a server that never answers cannot take every
    /// process (and with it every other release's install) for the length of helm's timeouts.
    pub(crate) fn target_share(&self) -> usize {
        self.inner
            .config
            .max_concurrent
            .max(1)
            .saturating_sub(1)
            .max(1)
    }

    /// The semaphore of workload API server `server`'s share of the process pool.
    fn target_permits(&self, server: &str) -> Arc<Semaphore> {
        let mut targets = match self.inner.targets.lock() {
            Ok(t) => t,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Forget servers nobody is working on, so the table stays small.
        targets.retain(|_, s| Arc::strong_count(s) > 1);
        targets
            .entry(server.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.target_share())))
            .clone()
    }

    /// This driver's run id: 32 hex digits, random per [`Helm::new`], so per operator process.
    /// Revisions this process starts carry it as a release label, so that a `pending-*`
    /// revision can later be told apart as this process's own, an earlier process's (gone,
    /// since leader election fences every earlier leader) or someone else's.
    pub(crate) fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The detected dialect.
    pub fn flavor(&self) -> HelmFlavor {
        self.inner.flavor
    }

    /// The version string helm reported, e.g. `v4.1.4`.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// Opens a session for one release in one workload cluster: takes the release's lock (so
    /// no two helm operations on it overlap) and writes the private kubeconfig.
    /// `release_key` must identify the release across clusters (e.g. kubeconfig Secret plus
    /// release namespace and name). The session's helm processes count against the workload
    /// API server's share of the process pool ([`Helm::target_share`]).
    pub(crate) async fn session(
        &self,
        release_key: &str,
        kubeconfig: &crate::domain::kubeconfig::WorkloadKubeconfig,
    ) -> Result<ReleaseSession, HelmError> {
        let lock = {
            let mut locks = self
                .inner
                .release_locks
                .lock()
                .map_err(|_| HelmError::Io("release lock table poisoned".to_string()))?;
            // Forget locks nobody holds or waits for, so the table stays as small as the
            // number of releases being worked on.
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            locks
                .entry(release_key.to_string())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
                .clone()
        };
        let guard = lock.lock_owned().await;
        let target = self.target_permits(kubeconfig.server());
        let dir = tempfile::Builder::new()
            .prefix("release-")
            .tempdir_in(self.inner.config.work_dir.join("sessions"))?;
        set_mode(dir.path(), 0o700)?;
        let session = ReleaseSession {
            helm: self.clone(),
            _guard: guard,
            target,
            kubeconfig: dir.path().join("kubeconfig"),
            values: dir.path().join("values.json"),
            repository_config: dir.path().join("repositories.yaml"),
            repository_cache: dir.path().join("repository-cache"),
            registry_config: dir.path().join("registry.json"),
            kubeconfig_secrets: kubeconfig.secrets(),
            dir,
        };
        write_private(&session.kubeconfig, &kubeconfig.to_bytes())?;
        write_private(
            &session.repository_config,
            b"apiVersion: \"\"\nrepositories: []\n",
        )?;
        write_private(&session.registry_config, b"{}")?;
        create_private_dir(&session.repository_cache)?;
        Ok(session)
    }
}

/// Runs helm with a private environment whose home (and helm's cache, config and data
/// directories) is `home`; `secrets` are scrubbed from any error text.
async fn exec(
    config: &HelmConfig,
    processes: &Semaphore,
    action: &'static str,
    args: &[String],
    limit: Duration,
    secrets: &[&str],
    home: &Path,
) -> Result<String, HelmError> {
    let _permit = processes
        .acquire()
        .await
        .map_err(|_| HelmError::Io("helm process pool closed".to_string()))?;
    let mut command = tokio::process::Command::new(&config.binary);
    command
        .args(args)
        .env_clear()
        // helm's caches, config and data are the session's own (deleted with it): nothing one
        // object's helm run keeps can serve another object.
        .env("HELM_CACHE_HOME", home.join("helm-cache"))
        .env("HELM_CONFIG_HOME", home.join("helm-config"))
        .env("HELM_DATA_HOME", home.join("helm-data"))
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Keep only what helm legitimately needs from the operator's environment: never the
    // operator's own kubeconfig or service-account settings.
    for key in [
        "PATH",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "TMPDIR",
    ] {
        if let Ok(value) = std::env::var(key) {
            command.env(key, value);
        }
    }
    let child = command.spawn().map_err(|err| HelmError::Spawn {
        path: config.binary.clone(),
        message: err.to_string(),
    })?;
    let output = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(HelmError::Timeout {
                action,
                seconds: limit.as_secs(),
            });
        }
    };
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(HelmError::Failed {
            action,
            message: error_summary(&stderr, secrets),
        })
    }
}

/// One release's exclusive helm session (see `Helm::session`). Dropping it removes the
/// private files and releases the lock.
pub struct ReleaseSession {
    helm: Helm,
    _guard: OwnedMutexGuard<()>,
    /// The workload API server's share of the process pool.
    target: Arc<Semaphore>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    values: PathBuf,
    repository_config: PathBuf,
    repository_cache: PathBuf,
    registry_config: PathBuf,
    /// Credential strings of the kubeconfig, scrubbed from every error text of this session.
    kubeconfig_secrets: Vec<String>,
}

impl ReleaseSession {
    /// The run id of the driver this session belongs to (see [`Helm::run_id`]).
    pub(crate) fn run_id(&self) -> &str {
        self.helm.run_id()
    }
}

impl fmt::Debug for ReleaseSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseSession")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// What one `helm test` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TestRun {
    /// Why the tests did not pass (helm's error, credentials removed); `None` when they did.
    pub(crate) failure: Option<String>,
    /// Each test hook and the phase of its last run.
    pub(crate) hooks: Vec<TestHook>,
}

/// What an uninstall did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UninstallOutcome {
    /// The release was removed.
    Uninstalled,
    /// There was no such release.
    NotFound,
}

impl ReleaseSession {
    fn files(&self) -> CallFiles<'_> {
        CallFiles {
            kubeconfig: &self.kubeconfig,
            values: &self.values,
            repository_config: &self.repository_config,
            repository_cache: &self.repository_cache,
            registry_config: &self.registry_config,
        }
    }

    async fn run(
        &self,
        action: &'static str,
        args: Vec<String>,
        limit: Duration,
    ) -> Result<String, HelmError> {
        let inner = &self.helm.inner;
        let _share = self
            .target
            .acquire()
            .await
            .map_err(|_| HelmError::Io("helm process pool closed".to_string()))?;
        let scrub: Vec<&str> = self.kubeconfig_secrets.iter().map(String::as_str).collect();
        exec(
            &inner.config,
            &inner.processes,
            action,
            &args,
            limit,
            &scrub,
            self.dir.path(),
        )
        .await
    }

    /// Current release state, or `None` when the release does not exist.
    pub(crate) async fn status(
        &self,
        req: &ReleaseRequest,
    ) -> Result<Option<ReleaseInfo>, HelmError> {
        match self
            .run("status", args::status(req, &self.files()), QUICK_CALL_LIMIT)
            .await
        {
            Ok(out) => output::parse_release(&out)
                .map(Some)
                .map_err(|err| HelmError::Output {
                    action: "status",
                    message: err.to_string(),
                }),
            Err(HelmError::Failed { message, .. }) if output::is_release_not_found(&message) => {
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The release labels of the newest revision (helm's own `name`, `owner`, `status`,
    /// `version`, `modifiedAt` included), or `None` when the release does not exist.
    pub(crate) async fn labels(
        &self,
        req: &ReleaseRequest,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, HelmError> {
        match self
            .run(
                "get metadata",
                args::metadata(req, &self.files()),
                QUICK_CALL_LIMIT,
            )
            .await
        {
            Ok(out) => output::parse_labels(&out)
                .map(Some)
                .map_err(|err| HelmError::Output {
                    action: "get metadata",
                    message: err.to_string(),
                }),
            Err(HelmError::Failed { message, .. }) if output::is_release_not_found(&message) => {
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Release history, oldest first; empty when the release does not exist.
    pub(crate) async fn history(
        &self,
        req: &ReleaseRequest,
    ) -> Result<Vec<HistoryEntry>, HelmError> {
        match self
            .run(
                "history",
                args::history(req, &self.files()),
                QUICK_CALL_LIMIT,
            )
            .await
        {
            Ok(out) => output::parse_history(&out).map_err(|err| HelmError::Output {
                action: "history",
                message: err.to_string(),
            }),
            Err(HelmError::Failed { message, .. }) if output::is_release_not_found(&message) => {
                Ok(Vec::new())
            }
            Err(err) => Err(err),
        }
    }

    /// The session's private directory, where a fetched chart archive goes ([`source`]).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Installs (when `verb` is Install) or upgrades the release from `archive`, a chart the
    /// operator fetched and verified into this session's directory, and returns helm's view of
    /// the release.
    pub(crate) async fn install_or_upgrade(
        &self,
        verb: InstallVerb,
        req: &ReleaseRequest,
        revision: &Revision,
        archive: &Path,
    ) -> Result<ReleaseInfo, HelmError> {
        let values = serde_json::to_vec(&req.values)
            .map_err(|err| HelmError::Io(format!("cannot encode values: {err}")))?;
        write_private(&self.values, &values)?;
        let args = args::install_or_upgrade(
            verb,
            self.helm.flavor(),
            req,
            revision,
            &self.files(),
            archive,
        );
        let action = verb.as_str();
        let out = self.run(action, args, req.timeout + PROCESS_GRACE).await?;
        output::parse_release(&out).map_err(|err| HelmError::Output {
            action,
            message: err.to_string(),
        })
    }

    /// Runs the release's test hooks (`helm test`, at most `timeout`) and reads their phases
    /// back from the release. A test that fails is a [`TestRun`] that did not pass, not an
    /// error; an error is helm failing to run or to answer.
    pub(crate) async fn test(
        &self,
        req: &ReleaseRequest,
        timeout: Duration,
    ) -> Result<TestRun, HelmError> {
        let ran = self
            .run(
                "test",
                args::test(req, timeout, &self.files()),
                timeout + PROCESS_GRACE,
            )
            .await;
        let failure = match ran {
            Ok(_) => None,
            Err(HelmError::Failed { message, .. }) => Some(message),
            Err(HelmError::Timeout { seconds, .. }) => {
                Some(format!("helm test did not finish within {seconds}s"))
            }
            Err(err) => return Err(err),
        };
        let out = self
            .run("status", args::status(req, &self.files()), QUICK_CALL_LIMIT)
            .await?;
        let hooks = output::parse_test_hooks(&out).map_err(|err| HelmError::Output {
            action: "status",
            message: err.to_string(),
        })?;
        Ok(TestRun { failure, hooks })
    }

    /// The rendered objects of the release's newest revision (`helm get manifest`), as YAML
    /// documents; hooks are not among them.
    pub(crate) async fn manifest(&self, req: &ReleaseRequest) -> Result<String, HelmError> {
        self.run(
            "get manifest",
            args::manifest(req, &self.files()),
            QUICK_CALL_LIMIT,
        )
        .await
    }

    /// Rolls the release back to `revision`.
    pub(crate) async fn rollback(
        &self,
        req: &ReleaseRequest,
        revision: i64,
    ) -> Result<(), HelmError> {
        let args = args::rollback(self.helm.flavor(), req, revision, &self.files());
        self.run("rollback", args, req.timeout + PROCESS_GRACE)
            .await?;
        Ok(())
    }

    /// Uninstalls the release; a missing release is not an error.
    pub(crate) async fn uninstall(
        &self,
        req: &ReleaseRequest,
    ) -> Result<UninstallOutcome, HelmError> {
        let args = args::uninstall(self.helm.flavor(), req, &self.files());
        match self
            .run("uninstall", args, req.timeout + PROCESS_GRACE)
            .await
        {
            Ok(out) if output::is_release_not_found(&out) => Ok(UninstallOutcome::NotFound),
            Ok(_) => Ok(UninstallOutcome::Uninstalled),
            Err(HelmError::Failed { message, .. }) if output::is_release_not_found(&message) => {
                Ok(UninstallOutcome::NotFound)
            }
            Err(err) => Err(err),
        }
    }
}

/// Maps `helm version` output to a dialect.
pub fn parse_flavor(version: &str) -> Result<HelmFlavor, HelmError> {
    let unsupported = || HelmError::Unsupported {
        version: version.to_string(),
    };
    let numbers: Vec<u64> = version
        .trim()
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .take(2)
        .map(|part| part.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| unsupported())?;
    match numbers.as_slice() {
        [4, ..] => Ok(HelmFlavor::V4),
        // 3.13 is the first helm 3 with release labels (`--labels`, `get metadata` labels),
        // which the ownership check depends on.
        [3, minor] if *minor >= 13 => Ok(HelmFlavor::V3),
        _ => Err(unsupported()),
    }
}

/// The useful part of helm's stderr: the last few non-empty lines without the `Error: ` prefix,
/// with every secret replaced, shortened to a size that fits a condition message.
pub fn error_summary(stderr: &str, secrets: &[&str]) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(3);
    let mut text = lines[start..].join("; ");
    if let Some(rest) = text.strip_prefix("Error: ") {
        text = rest.to_string();
    }
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret, "[redacted]");
    }
    const LIMIT: usize = 1024;
    if text.len() > LIMIT {
        let mut cut = LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    if text.is_empty() {
        "helm exited with an error and printed nothing".to_string()
    } else {
        text
    }
}

/// The credential values of a kubeconfig (tokens, passwords, client keys), so they can be
/// scrubbed from helm's error output. Unparseable input yields nothing: the controller has
/// already rejected such a kubeconfig before any helm call.
pub fn kubeconfig_secrets(kubeconfig: &[u8]) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(kubeconfig) else {
        return Vec::new();
    };
    let Ok(doc) = serde_saphyr::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for user in doc["users"].as_array().into_iter().flatten() {
        for key in ["token", "password", "client-key-data"] {
            if let Some(value) = user["user"][key].as_str()
                && !value.is_empty()
            {
                found.push(value.to_string());
            }
        }
    }
    found
}

/// Creates the private `sessions` directory under `work_dir` (mode 0700) and removes whatever an
/// earlier process left in it: a session killed mid-way (OOM, SIGKILL) leaves a workload
/// kubeconfig and a chart behind, which must not outlive it. The `cache`, `config` and `data`
/// directories earlier versions shared between every helm call are removed too.
///
/// helm's `HELM_CACHE_HOME`, `HELM_CONFIG_HOME` and `HELM_DATA_HOME` always point into the
/// session of each call; the operator's own environment values for them are deliberately
/// ignored, so one flag decides where helm writes.
pub(crate) fn prepare_work_dir(work_dir: &Path) -> Result<(), HelmError> {
    std::fs::create_dir_all(work_dir)?;
    let sessions = work_dir.join("sessions");
    // remove_dir_all does not follow symlinks, so a planted link cannot redirect the clean-up.
    match std::fs::remove_dir_all(&sessions) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    for shared in ["cache", "config", "data"] {
        match std::fs::remove_dir_all(work_dir.join(shared)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    create_private_dir(&sessions)
}

fn create_private_dir(path: &Path) -> Result<(), HelmError> {
    std::fs::create_dir_all(path)?;
    set_mode(path, 0o700)
}

fn write_private(path: &Path, contents: &[u8]) -> Result<(), HelmError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)?;
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), HelmError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake helm that fails its first `version` call and answers the later ones.
    fn flaky_helm(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let script = dir.join("helm");
        let marker = dir.join("called-once");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nif [ ! -e '{m}' ]; then : > '{m}'; echo 'transient' >&2; exit 1; fi\necho v4.1.4\n",
                m = marker.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        script
    }

    #[tokio::test]
    async fn a_transient_start_failure_does_not_disable_helm() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let config = HelmConfig {
            binary: flaky_helm(dir.path()),
            work_dir: dir.path().join("work"),
            max_concurrent: 1,
        };
        let helm = Helm::new(config)
            .await
            .unwrap_or_else(|e| panic!("the second attempt succeeds: {e}"));
        assert_eq!(helm.version(), "v4.1.4");
        assert_eq!(helm.run_id().len(), 32);
    }

    #[tokio::test]
    async fn an_unsupported_helm_is_not_retried() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (script, calls) = (dir.path().join("helm"), dir.path().join("calls"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho call >> '{}'\necho v3.12.0\n",
                calls.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let config = HelmConfig {
            binary: script,
            work_dir: dir.path().join("work"),
            max_concurrent: 1,
        };
        assert!(matches!(
            Helm::new(config).await,
            Err(HelmError::Unsupported { .. })
        ));
        let text = std::fs::read_to_string(&calls).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text.lines().count(), 1, "asked once, not retried");
    }

    #[test]
    fn flavors() {
        assert_eq!(parse_flavor("v4.1.4").unwrap(), HelmFlavor::V4);
        assert_eq!(parse_flavor("v3.14.2").unwrap(), HelmFlavor::V3);
        assert_eq!(parse_flavor("v3.13.0").unwrap(), HelmFlavor::V3);
        assert!(
            parse_flavor("v3.12.3").is_err(),
            "no release labels before 3.13"
        );
        assert!(parse_flavor("v3.8.0").is_err());
        assert!(parse_flavor("v2.17.0").is_err());
        assert!(parse_flavor("garbage").is_err());
    }

    #[test]
    fn chart_source_from_spec() {
        assert_eq!(
            ChartSource::from_spec("https://x/", " oci://r/c "),
            ChartSource::Oci {
                reference: "oci://r/c".into()
            }
        );
        assert_eq!(
            ChartSource::from_spec(" https://x/ ", "c"),
            ChartSource::Repository {
                url: "https://x/".into(),
                chart: "c".into()
            }
        );
    }

    #[test]
    fn error_summary_redacts_and_strips() {
        let stderr = "\nError: looks like \"https://u:hunter2@x\" is not a valid chart repository: 401 hunter2\n";
        let msg = error_summary(stderr, &["hunter2"]);
        assert!(!msg.contains("hunter2"));
        assert!(msg.starts_with("looks like"));
        assert!(msg.contains("[redacted]"));
        assert_eq!(
            error_summary("", &[]),
            "helm exited with an error and printed nothing"
        );
        let long = "é".repeat(2000);
        assert!(error_summary(&long, &[]).len() <= 1024 + '…'.len_utf8());
    }

    #[test]
    fn kubeconfig_credentials_are_collected_for_scrubbing() {
        let kubeconfig = b"apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user:\n    token: tok-123\n- name: b\n  user:\n    username: admin\n    password: pw-456\n- name: c\n  user:\n    client-key-data: S0VZ\n";
        let found = kubeconfig_secrets(kubeconfig);
        assert_eq!(found, vec!["tok-123", "pw-456", "S0VZ"]);
        assert!(kubeconfig_secrets(b"not: [yaml").is_empty());
        let msg = error_summary("Error: Unauthorized: bearer tok-123", &["tok-123"]);
        assert!(!msg.contains("tok-123"), "{msg}");
    }

    #[test]
    fn auth_debug_hides_password() {
        let auth = RepositoryAuth {
            username: Some("u".into()),
            password: Some("hunter2".into()),
            ca_bundle: None,
        };
        assert!(!format!("{auth:?}").contains("hunter2"));
    }
}
