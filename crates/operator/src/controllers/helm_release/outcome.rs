//! What a reconcile found or did ([`Outcome`]: [`Done`] or a [`HelmFailure`]), and the pure
//! functions that turn it into the one status written per reconcile ([`desired_status`]) and
//! the next reconcile ([`recheck`], [`retry_policy`]).

use std::time::Duration;

use kube::runtime::controller::Action;

use super::budget::Spent;
use super::inputs::{Problem, drift_interval};
use super::ownership::Ownership;
use crate::api::common::{condition_types as ct, missing_cluster};
use crate::api::helm_policies::ClusterHealthRequirement;
use crate::api::helm_policies::{DriftMode, DriftedObject};
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::api::keys::{ADOPT_ANNOTATION, RESET_AT_ANNOTATION};
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::shared::error::{Disposition, Failure, RetryPolicy};
use crate::controllers::shared::pipeline;
use crate::controllers::shared::status::{self, Standing};
use crate::domain::helm::args::InstallVerb;
use crate::domain::helm::{ReleaseInfo, ReleaseRequest, TestRun};

/// Re-check while a dependency (cluster, Secret, helm) is missing.
pub(crate) const RETRY: Duration = Duration::from_secs(60);

/// What a blocked deletion can do instead of waiting.
pub(crate) const WAY_OUT: &str =
    "set spec.deletionPolicy to Orphan to finish deleting without uninstalling";

/// What one reconcile found or did: whether the OmniCluster it names exists (`found`, once it
/// looked) and how it ended; everything the status and the next reconcile follow from.
pub(crate) type Outcome = pipeline::Outcome<OmniHelmRelease>;

/// Why a `pending-*` release is reported stuck rather than recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StuckBecause {
    /// `spec.recoverStuckRelease` is off.
    RecoveryNotAllowed,
    /// A pending upgrade or rollback without an earlier revision to return to.
    NoEarlierRevision,
}

impl StuckBecause {
    /// What a person can do about it.
    fn hint(self) -> &'static str {
        match self {
            StuckBecause::RecoveryNotAllowed => {
                "set spec.recoverStuckRelease to true to let the operator recover it, or recover it by hand (helm rollback)"
            }
            StuckBecause::NoEarlierRevision => {
                "there is no earlier revision to roll back to, so it must be recovered by hand"
            }
        }
    }
}

/// Where a release stands after a failed Helm run (`helm status` read afterwards).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum After {
    Release(ReleaseInfo),
    /// No release any more (e.g. `atomic` removed a failed install).
    Gone,
    /// `helm status` failed too.
    Unknown,
}

/// A pass that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Done {
    /// The release is as last applied (Helm's view of it, when there is one).
    InSync(Option<ReleaseInfo>),
    /// The release is as last applied, and its live objects were compared with it
    /// (`spec.driftDetection`): what differed, and whether it was put back.
    Checked {
        /// Helm's view of the release.
        release: ReleaseInfo,
        /// What the comparison found.
        drift: DriftFound,
    },
    /// Helm installed or upgraded the release, and reports the new revision deployed.
    Deployed {
        /// Install or upgrade.
        verb: InstallVerb,
        /// Helm's view of the new revision.
        info: ReleaseInfo,
        /// The digest of the inputs it applied.
        digest: String,
        /// What `helm test` found afterwards, when `spec.test` runs it (a failure here is one
        /// `spec.test.ignoreFailures` lets pass).
        tests: Option<TestRun>,
    },
    /// `spec.suspend`: no Helm ran.
    Suspended,
}

/// What a pass found on its way, which the status reports whatever the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Found {
    /// Whether the cluster it names exists, once the pass looked.
    pub(crate) cluster: Option<bool>,
    /// The inputs an install or upgrade of this pass applies (a range in `spec.chart.version`
    /// resolved), once known.
    pub(crate) inputs: Option<Inputs>,
}

impl Found {
    /// The cluster was looked at: it exists or not.
    pub(crate) fn cluster(exists: bool) -> Self {
        Self {
            cluster: Some(exists),
            inputs: None,
        }
    }
}

/// The inputs of an install or upgrade: their digest and the chart version they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inputs {
    pub(crate) digest: String,
    pub(crate) chart_version: String,
}

impl Inputs {
    /// The inputs of `req`.
    pub(crate) fn of(req: &ReleaseRequest) -> Self {
        Self {
            digest: req.digest.clone(),
            chart_version: req.chart_version.clone(),
        }
    }
}

/// "Helm release … is pending-… at revision … since …".
fn pending_text(name: &str, info: &ReleaseInfo) -> String {
    let since = info.last_deployed.as_deref().unwrap_or("an unknown time");
    format!(
        "Helm release {name:?} is {} at revision {} since {since}",
        info.status, info.revision
    )
}

/// Why a release is not as the spec wants it; the message is the condition's and the
/// Event's. Each variant carries what its message names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelmFailure {
    /// The spec breaks a rule; the message names the field.
    #[error("{0}")]
    InvalidSpec(String),
    /// The OmniCluster named by `spec.clusterRef` does not exist.
    #[error("{}", missing_cluster(cluster))]
    MissingCluster {
        /// `spec.clusterRef.name`.
        cluster: String,
    },
    /// The OmniCluster exists, nothing was installed yet, and the release waits for it
    /// (`spec.startWhen`): why.
    #[error("{0}")]
    ClusterNotReady(String),
    /// An input (kubeconfig, chart credentials, helm binary) is missing or unusable.
    #[error("{0}")]
    Blocked(Problem),
    /// Helm could not be started or read, or a recovery failed: the message says which.
    #[error("{0}")]
    Helm(String),
    /// Someone else's release, left alone.
    #[error(
        "Helm release {name:?} in namespace {namespace:?} {}; it was left unchanged (annotate this OmniHelmRelease {ADOPT_ANNOTATION}=\"true\" to take it over)",
        owner.whose()
    )]
    Refused {
        /// The release name.
        name: String,
        /// The release namespace.
        namespace: String,
        /// Whose it is.
        owner: Ownership,
    },
    /// A young `pending-*` release, looked at again after `retry_after`.
    #[error(
        "{}; another Helm operation may still own it, so it is left alone until its timeout {timeout} has passed",
        pending_text(name, release)
    )]
    Locked {
        /// The release name.
        name: String,
        /// Helm's view of it.
        release: ReleaseInfo,
        /// `spec.timeout` as written.
        timeout: String,
        /// When to look again.
        retry_after: Duration,
    },
    /// A `pending-*` release past its timeout that is not recovered.
    #[error(
        "{}, longer than its timeout {timeout}; {}",
        pending_text(name, release),
        because.hint()
    )]
    Stuck {
        /// The release name.
        name: String,
        /// Helm's view of it.
        release: ReleaseInfo,
        /// `spec.timeout` as written.
        timeout: String,
        /// Why it is not recovered.
        because: StuckBecause,
    },
    /// Helm succeeded, yet the release ended in another status than `deployed`.
    #[error(
        "Helm {} of release {name:?} ended in status {}",
        verb.as_str(),
        info.status
    )]
    NotDeployed {
        /// Install or upgrade.
        verb: InstallVerb,
        /// The release name.
        name: String,
        /// Helm's view of the revision.
        info: ReleaseInfo,
    },
    /// Helm failed to install or upgrade (`message` says how); the release stands at `after`.
    #[error("{message}")]
    RunFailed {
        /// Install or upgrade.
        verb: InstallVerb,
        /// What failed.
        message: String,
        /// Where the release stands now.
        after: After,
    },
    /// A deletion cannot uninstall: an input is missing.
    #[error("{0}")]
    UninstallBlocked(Problem),
    /// A deletion's `helm uninstall` (or the look before it) failed.
    #[error("{0}")]
    UninstallFailed(String),
    /// A release named in `spec.dependsOn` is not Ready at its current generation.
    #[error("waiting for OmniHelmRelease {name:?} (spec.dependsOn), which {why}")]
    DependencyNotReady {
        /// The dependency's name.
        name: String,
        /// What it lacks.
        why: String,
    },
    /// The OmniCluster is not as healthy as `spec.clusterHealth` asks.
    #[error("waiting for OmniCluster {cluster:?} to be {}: {what}", requirement_name(*require))]
    ClusterNotHealthy {
        /// `spec.clusterRef.name`.
        cluster: String,
        /// The level asked for.
        require: ClusterHealthRequirement,
        /// The first part that is not as asked.
        what: String,
    },
    /// The tests after an install or upgrade failed (and `spec.test.ignoreFailures` is off):
    /// the revision is deployed, but counts as a failed attempt.
    #[error("{message}")]
    TestFailed {
        /// The install or upgrade the tests followed.
        verb: InstallVerb,
        /// Helm's view of the revision tested.
        info: ReleaseInfo,
        /// What `helm test` found.
        tests: TestRun,
        /// What failed.
        message: String,
    },
    /// An install or upgrade failed (or its tests did) under a remediation policy: counted in
    /// `spent`, and remediated as `remedied` says; the release stands at `after`.
    #[error("{}", attempt_text(cause, spent, remedied.as_deref()))]
    AttemptFailed {
        /// The failure itself (`RunFailed`, `NotDeployed` or `TestFailed`).
        cause: Box<HelmFailure>,
        /// The budget after it.
        spent: Spent,
        /// What the remediation did, when it ran.
        remedied: Option<String>,
        /// Where the release stands after the remediation.
        after: After,
    },
    /// A later pass over a release whose budget is spent: no Helm call.
    #[error("{message}")]
    Exhausted {
        /// The budget.
        spent: Spent,
        /// The message of the attempt that spent it.
        message: String,
    },
    /// The live objects could not be compared or put back.
    #[error("{0}")]
    DriftCheck(String),
    /// A deletion waits for the releases that depend on this one to be deleted first.
    #[error(
        "waiting for OmniHelmRelease {} to be deleted first: {} on this release (spec.dependsOn)",
        names(.0),
        if .0.len() == 1 { "it depends" } else { "they depend" }
    )]
    DependantsRemain(Vec<String>),
}

/// `"a"`, or `"a", "b"`: names for messages.
fn names(list: &[String]) -> String {
    list.iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name of a health level in messages.
fn requirement_name(require: ClusterHealthRequirement) -> &'static str {
    match require {
        ClusterHealthRequirement::Ready => "Ready",
        ClusterHealthRequirement::Running => "Running",
        ClusterHealthRequirement::None => "anything",
    }
}

/// What an attempt that failed under a remediation policy says: the failure, the remediation,
/// and the budget (with what ends a spent one).
fn attempt_text(cause: &HelmFailure, spent: &Spent, remedied: Option<&str>) -> String {
    let mut text = cause.to_string();
    if let Some(remedied) = remedied {
        text.push_str(&format!("; {remedied}"));
    }
    if spent.exhausted() {
        text.push_str(&format!(
            "; {}, no further attempt until the spec or the chart changes or annotation {RESET_AT_ANNOTATION} is set",
            spent.text()
        ));
    } else {
        text.push_str(&format!("; {}, retrying", spent.text()));
    }
    text
}

impl Failure for HelmFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::InvalidSpec(_) => Reason::ValidationFailed,
            Self::MissingCluster { .. } => Reason::MissingCluster,
            Self::ClusterNotReady(_) => Reason::ClusterNotReady,
            Self::Blocked(problem) | Self::UninstallBlocked(problem) => problem.reason(),
            Self::Helm(_)
            | Self::NotDeployed { .. }
            | Self::RunFailed { .. }
            | Self::UninstallFailed(_) => Reason::ReconcileFailed,
            Self::Refused { .. } => Reason::TargetNotOwned,
            Self::Locked { .. } => Reason::ReleasePending,
            Self::Stuck { .. } => Reason::ReleaseStuck,
            Self::DependencyNotReady { .. } => Reason::DependencyNotReady,
            Self::ClusterNotHealthy { .. } => Reason::ClusterNotHealthy,
            Self::TestFailed { .. } => Reason::TestFailed,
            Self::AttemptFailed { spent, .. } if spent.exhausted() => Reason::RetriesExhausted,
            Self::AttemptFailed { cause, .. } => cause.reason(),
            Self::Exhausted { .. } => Reason::RetriesExhausted,
            Self::DriftCheck(_) => Reason::ReconcileFailed,
            Self::DependantsRemain(_) => Reason::Deleting,
        }
    }

    /// Failures of Helm itself back off per object; missing inputs and stuck releases are
    /// looked at again after [`RETRY`]; a locked release once its operation may have ended.
    /// Someone else's release waits for a change here (the adopt annotation); its controller
    /// also looks again at the drift check ([`retry_policy`]).
    fn retry(&self) -> RetryPolicy {
        match self {
            // Dependencies, the cluster and dependants wake the release when they change.
            Self::InvalidSpec(_)
            | Self::Refused { .. }
            | Self::DependencyNotReady { .. }
            | Self::ClusterNotHealthy { .. }
            | Self::Exhausted { .. } => RetryPolicy::AwaitChange,
            Self::AttemptFailed { spent, .. } if spent.exhausted() => RetryPolicy::AwaitChange,
            Self::MissingCluster { .. }
            | Self::ClusterNotReady(_)
            | Self::Blocked(_)
            | Self::Stuck { .. }
            | Self::UninstallBlocked(_) => RetryPolicy::Poll(RETRY),
            // A dependant's deletion wakes the release; a dependant that stops depending on it
            // (an edit of its `dependsOn`) is noticed at the next look.
            Self::DependantsRemain(_) => RetryPolicy::Poll(RETRY),
            Self::Locked { retry_after, .. } => RetryPolicy::Poll(*retry_after),
            Self::Helm(_)
            | Self::NotDeployed { .. }
            | Self::RunFailed { .. }
            | Self::TestFailed { .. }
            | Self::AttemptFailed { .. }
            | Self::DriftCheck(_)
            | Self::UninstallFailed(_) => RetryPolicy::Backoff,
        }
    }

    /// The cluster, its readiness and health, a dependency, a Secret, another Helm operation
    /// still running and the dependants of a deletion are waited for; a spec, an unusable
    /// input, a Secret the release's ServiceAccount may not read (RBAC or the spec must
    /// change), no helm, someone else's release, a release stuck past its timeout and a spent
    /// retry budget need a person; Helm's own failures (tests included), a chart source that
    /// failed, a drift check that failed and a server that did not answer in time are retried.
    fn disposition(&self) -> Disposition {
        match self {
            Self::MissingCluster { .. }
            | Self::ClusterNotReady(_)
            | Self::Locked { .. }
            | Self::DependencyNotReady { .. }
            | Self::ClusterNotHealthy { .. }
            | Self::DependantsRemain(_) => Disposition::Waiting,
            Self::Blocked(problem) | Self::UninstallBlocked(problem) => match problem {
                Problem::MissingSecret(_)
                | Problem::KubeconfigPending(_)
                | Problem::ValuesSourceMissing(_) => Disposition::Waiting,
                Problem::Invalid(_) | Problem::AccessDenied(_) | Problem::HelmUnavailable(_) => {
                    Disposition::Stalled
                }
                Problem::TimedOut(_) | Problem::ChartUnavailable(_) => Disposition::Retrying,
            },
            Self::InvalidSpec(_)
            | Self::Refused { .. }
            | Self::Stuck { .. }
            | Self::Exhausted { .. } => Disposition::Stalled,
            Self::AttemptFailed { spent, .. } if spent.exhausted() => Disposition::Stalled,
            Self::Helm(_)
            | Self::NotDeployed { .. }
            | Self::RunFailed { .. }
            | Self::TestFailed { .. }
            | Self::AttemptFailed { .. }
            | Self::DriftCheck(_)
            | Self::UninstallFailed(_) => Disposition::Retrying,
        }
    }
}

impl HelmFailure {
    /// Whether the pass ran an install or upgrade (successful or not): what handles a force
    /// request.
    pub(crate) fn ran_helm(&self) -> bool {
        matches!(
            self,
            Self::NotDeployed { .. }
                | Self::RunFailed { .. }
                | Self::TestFailed { .. }
                | Self::AttemptFailed { .. }
        )
    }
}

impl Outcome {
    /// The `Ready` reason and message of a pass that deployed a new revision of `r`'s release
    /// (`None` for any other): each such Helm action is worth an Event, even when the `Ready`
    /// reason (and so the condition Event) stays the same.
    pub(crate) fn deployed(&self, r: &OmniHelmRelease) -> Option<(Reason, String)> {
        match &self.result {
            Ok(Done::Deployed { verb, info, .. }) => Some(success_condition(
                Some(action_name(*verb)),
                &r.effective_release_name(),
                info.revision,
            )),
            _ => None,
        }
    }
}

/// The status-and-metrics name of an install-or-upgrade verb (`status.lastAction`).
pub(crate) fn action_name(verb: InstallVerb) -> &'static str {
    match verb {
        InstallVerb::Install => "Install",
        InstallVerb::Upgrade => "Upgrade",
    }
}

/// Reason and message of a healthy release after `action` (docs/parity.md#condition-wording).
///
/// The original reports `ReconcileFailed` on a *healthy* release whose last action is neither
/// Install nor Upgrade; a `Ready=True` condition must not say "failed" (docs/decisions.md), so
/// such a release is described by its revision instead: revision 1 was an install, later ones
/// upgrades.
pub(crate) fn success_condition(
    action: Option<&str>,
    name: &str,
    revision: i64,
) -> (Reason, String) {
    match action {
        Some("Install") => (
            Reason::HelmInstalled,
            format!("installed Helm release {name:?} revision {revision}"),
        ),
        Some("Upgrade") => (
            Reason::HelmUpgraded,
            format!("upgraded Helm release {name:?} to revision {revision}"),
        ),
        _ if revision <= 1 => (
            Reason::HelmInstalled,
            format!("Helm release {name:?} is deployed at revision {revision}"),
        ),
        _ => (
            Reason::HelmUpgraded,
            format!("Helm release {name:?} is deployed at revision {revision}"),
        ),
    }
}

type Draft = status::Draft<OmniHelmReleaseStatus>;

/// A status draft of `r` starting from the stored status, so failures keep the last good
/// release data.
fn draft(r: &OmniHelmRelease, now: jiff::Timestamp) -> Draft {
    let mut s = r.status.clone().unwrap_or_default();
    s.observed_generation = r.metadata.generation;
    s.cluster_ref = Some(r.spec.cluster_ref.name.clone());
    s.kubeconfig_secret_ref = Some(r.spec.kubeconfig_secret_ref.name.clone());
    s.kubeconfig_secret_key = Some(r.spec.kubeconfig_secret_ref.key.clone());
    s.release_name = Some(r.effective_release_name());
    s.namespace = Some(r.spec.namespace.clone());
    if s.chart.is_none() {
        s.chart = Some(r.spec.chart.chart.clone());
    }
    if s.chart_version.is_none() {
        s.chart_version = Some(r.spec.chart.version.clone());
    }
    Draft::new(s, r.metadata.generation, now, ct::RELEASED)
}

impl Draft {
    /// A failure: conditions, `lastError` and `lastAttemptTime`.
    fn failed(&mut self, failure: &HelmFailure) {
        let message = failure.to_string();
        self.failed_with(failure);
        self.s.last_error = Some(message);
        self.s.last_attempt_time = Some(self.now());
    }

    fn record(&mut self, info: &ReleaseInfo) {
        self.s.release_revision = Some(info.revision);
        self.s.release_status = Some(info.status.to_string());
        if !info.chart.is_empty() {
            self.s.chart = Some(info.chart.clone());
        }
        if !info.chart_version.is_empty() {
            self.s.chart_version = Some(info.chart_version.clone());
        }
    }

    /// Helm ran `verb` and left the release at `info`.
    fn ran(&mut self, r: &OmniHelmRelease, verb: InstallVerb, info: Option<&ReleaseInfo>) {
        let now = self.now();
        self.s.last_action = Some(action_name(verb).to_string());
        self.s.last_attempt_time = Some(now);
        if let Some(info) = info {
            self.record(info);
            self.s.last_success_time = Some(now);
            self.s.last_error = None;
            self.s.chart = Some(r.spec.chart.chart.clone());
        }
    }
}

/// Pure: the status `r` should have after `outcome`, starting from its stored status.
pub(crate) fn desired_status(
    r: &OmniHelmRelease,
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> OmniHelmReleaseStatus {
    let mut d = draft(r, now);
    // Before the cluster was looked at, or while deleting: `Accepted` stays as it was.
    if let Some(exists) = outcome.found.cluster {
        d.accepted(&r.spec.cluster_ref.name, exists);
    }
    // What this pass installed or tried to: a range as resolved in this pass, else the spec.
    let inputs = outcome
        .found
        .inputs
        .clone()
        .unwrap_or_else(|| Inputs::of(&super::inputs::request(r)));
    d.requests(r, outcome);
    if !matches!(outcome.result, Ok(Done::Suspended)) {
        d.resume();
    }
    match &outcome.result {
        Ok(Done::Suspended) => d.suspend(SUSPENDED),
        Ok(Done::InSync(current)) => d.in_sync(r, current.as_ref()),
        Ok(Done::Checked { release, drift }) => {
            d.in_sync(r, Some(release));
            d.drift(drift);
        }
        Ok(Done::Deployed {
            verb,
            info,
            digest,
            tests,
        }) => {
            d.ran(r, *verb, Some(info));
            d.attempted(
                r,
                &Inputs {
                    digest: digest.clone(),
                    ..inputs
                },
            );
            d.s.last_applied_digest = Some(digest.clone());
            d.clear_failures();
            let (reason, m) = success_condition(
                Some(action_name(*verb)),
                &r.effective_release_name(),
                info.revision,
            );
            d.outcome(Standing::Ready, reason, &m);
            d.tested(tests.as_ref());
            d.history(r, info, digest, tests.as_ref());
        }
        Err(failure) => d.failure(r, failure, &inputs),
    }
    if r.spec
        .drift_detection
        .as_ref()
        .is_none_or(|dd| dd.mode == crate::api::helm_policies::DriftMode::Disabled)
    {
        d.no_drift_detection();
    }
    d.s
}

/// The message of `Suspended=True` on a release.
pub(crate) const SUSPENDED: &str = "spec.suspend is set: Helm does not install, upgrade or check the release, and a changed spec waits until it is resumed; Ready keeps its last state";

impl Draft {
    /// A release as last applied.
    fn in_sync(&mut self, r: &OmniHelmRelease, current: Option<&ReleaseInfo>) {
        if let Some(info) = current {
            self.record(info);
        }
        let stored = r.status.clone().unwrap_or_default();
        let revision = stored.release_revision.unwrap_or_default();
        let (reason, m) = success_condition(
            stored.last_action.as_deref(),
            &r.effective_release_name(),
            revision,
        );
        self.outcome(Standing::Ready, reason, &m);
        self.s.last_error = None;
        self.clear_failures();
    }

    /// Everything a failed pass records: what Helm left, the budget, the conditions.
    fn failure(&mut self, r: &OmniHelmRelease, failure: &HelmFailure, inputs: &Inputs) {
        match failure {
            HelmFailure::Refused { .. } => {
                // Nothing in the status may describe someone else's release as ours:
                // without a digest and revision the stored status can never pass for
                // "installed before labels" later.
                self.s.last_applied_digest = None;
                self.s.release_revision = None;
                self.s.release_status = None;
            }
            HelmFailure::Locked { release, .. } | HelmFailure::Stuck { release, .. } => {
                self.record(release);
            }
            HelmFailure::AttemptFailed {
                cause,
                spent,
                after,
                ..
            } => {
                self.attempt(r, cause, inputs);
                self.after(after);
                self.spent(spent);
            }
            HelmFailure::UninstallFailed(_) => self.s.last_action = Some("Uninstall".into()),
            other => self.attempt(r, other, inputs),
        }
        self.failed(failure);
    }

    /// What a failed install or upgrade (or its tests) left, uncounted.
    fn attempt(&mut self, r: &OmniHelmRelease, failure: &HelmFailure, inputs: &Inputs) {
        let digest = &inputs.digest;
        match failure {
            HelmFailure::NotDeployed { verb, info, .. } => {
                self.ran(r, *verb, Some(info));
                self.attempted(r, inputs);
                self.history(r, info, digest, None);
            }
            HelmFailure::TestFailed {
                verb, info, tests, ..
            } => {
                self.ran(r, *verb, Some(info));
                self.attempted(r, inputs);
                self.tested(Some(tests));
                self.history(r, info, digest, Some(tests));
            }
            HelmFailure::RunFailed { verb, after, .. } => {
                self.ran(r, *verb, None);
                self.attempted(r, inputs);
                self.after(after);
                // The revision the failed run left is one this object made; a deployed one
                // after a failure is Helm's own rollback (`atomic`), not ours.
                if let After::Release(info) = after
                    && info.status == crate::domain::helm::HelmStatus::Failed
                {
                    self.history(r, info, digest, None);
                }
            }
            _ => {}
        }
    }

    /// Where a failed run (or its remediation) left the release.
    fn after(&mut self, after: &After) {
        match after {
            After::Release(info) => self.record(info),
            After::Gone => {
                self.s.release_revision = None;
                self.s.release_status = None;
            }
            After::Unknown => {}
        }
    }
}

/// Pure: when a release whose pass came to `done` is looked at again: at its drift check
/// (`spec.driftCheckInterval`, at least `floor`, scaled by `spread`), or only on a change.
pub(crate) fn recheck(r: &OmniHelmRelease, floor: Duration, spread: f64) -> Action {
    match drift_interval(r, floor) {
        Some(interval) => Action::requeue(interval.mul_f64(spread)),
        None => Action::await_change(),
    }
}

/// Pure: what follows `failure`: its own policy, except that someone else's release is looked
/// at again at the drift check too (it may go, or be handed over), and so is a missing values
/// source, which its watch wakes the release for (the drift check covers a watch that cannot
/// see it, e.g. without RBAC to watch ConfigMaps).
pub(crate) fn retry_policy(
    r: &OmniHelmRelease,
    failure: &HelmFailure,
    floor: Duration,
    spread: f64,
) -> RetryPolicy {
    match failure {
        HelmFailure::Refused { .. } | HelmFailure::Blocked(Problem::ValuesSourceMissing(_)) => {
            match drift_interval(r, floor) {
                Some(interval) => RetryPolicy::Poll(interval.mul_f64(spread)),
                None => RetryPolicy::AwaitChange,
            }
        }
        other => other.retry(),
    }
}

/// What one comparison of the live objects found, and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriftFound {
    /// `Warn` or `Enabled`.
    pub(crate) mode: DriftMode,
    /// Every object that differed (its deletion, or its differing fields).
    pub(crate) objects: Vec<DriftedObject>,
    /// Whether they were put back (`Enabled`).
    pub(crate) corrected: bool,
}

impl DriftFound {
    /// `Deployment apps/web (/spec/replicas)`, or `ConfigMap apps/cfg (deleted)`.
    pub(crate) fn describe(o: &DriftedObject) -> String {
        let what = if o.deleted {
            "deleted".to_string()
        } else {
            o.fields.join(", ")
        };
        if o.namespace.is_empty() {
            format!("{} {} ({what})", o.kind, o.name)
        } else {
            format!("{} {}/{} ({what})", o.kind, o.namespace, o.name)
        }
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
