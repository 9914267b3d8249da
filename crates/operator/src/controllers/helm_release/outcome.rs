//! What a reconcile found or did ([`Outcome`]), and the pure functions that turn it into the
//! one status written per reconcile ([`desired_status`]) and the next reconcile
//! ([`next_reconcile`]).

use std::time::Duration;

use kube::runtime::controller::Action;

use super::inputs::{Problem, drift_check};
use super::ownership::Ownership;
use super::state::input_digest;
use super::{REASON_RELEASE_PENDING, REASON_RELEASE_STUCK, RETRY};
use crate::api::OmniHelmRelease;
use crate::api::common::{condition_types as ct, reasons};
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::controllers::secret_sync::{ADOPT_ANNOTATION, REASON_TARGET_NOT_OWNED};
use crate::controllers::{Error, status};
use crate::helm::ReleaseInfo;
use crate::helm::args::InstallVerb;

/// Why a `pending-*` release is reported stuck rather than recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StuckBecause {
    /// `spec.recoverStuckRelease` is off.
    RecoveryNotAllowed,
    /// A pending upgrade or rollback without an earlier revision to return to.
    NoEarlierRevision,
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

/// The result of `helm install` or `helm upgrade`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Helm reports the new revision deployed.
    Deployed(ReleaseInfo),
    /// Helm succeeded, yet the release ended in another status.
    NotDeployed(ReleaseInfo),
    /// Helm failed (`message` says how), and the release stands at `after`.
    Failed { message: String, after: After },
}

/// A failed Helm run, install, upgrade or uninstall, reported in the object's conditions under
/// `reason` and retried with the per-object backoff.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct HelmFailure {
    /// The condition reason it is reported under.
    pub reason: &'static str,
    /// The message in the condition.
    pub message: String,
}

/// What one reconcile found or did: everything the status and the next reconcile follow from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The spec breaks a rule; the message names the field.
    Invalid(String),
    /// The OmniCluster named by `spec.clusterRef` does not exist.
    MissingCluster,
    /// An input (kubeconfig, chart credentials, helm binary) is missing or unusable.
    Blocked(Problem),
    /// Helm could not be started or read, or a recovery failed: the message says which.
    HelmFailed(String),
    /// Someone else's release, left alone.
    Refused(Ownership),
    /// A young `pending-*` release, looked at again after `retry_after`.
    Locked {
        release: ReleaseInfo,
        retry_after: Duration,
    },
    /// A `pending-*` release past its timeout that is not recovered.
    Stuck {
        release: ReleaseInfo,
        because: StuckBecause,
    },
    /// The release is as last applied (Helm's view of it, when there is one).
    InSync(Option<ReleaseInfo>),
    /// Helm installed or upgraded the release, or tried to.
    Ran { verb: InstallVerb, applied: Applied },
    /// A deletion cannot uninstall: an input is missing.
    UninstallBlocked(Problem),
    /// A deletion's `helm uninstall` (or the look before it) failed.
    UninstallFailed(String),
}

impl Outcome {
    /// Whether a new revision was deployed: each such Helm action is worth an Event, even when
    /// the `Ready` reason (and so the condition Event) stays the same.
    pub(crate) fn deployed(&self) -> bool {
        matches!(
            self,
            Outcome::Ran {
                applied: Applied::Deployed(_),
                ..
            }
        )
    }
}

/// The status-and-metrics name of an install-or-upgrade verb (`status.lastAction`).
pub(crate) fn action_name(verb: InstallVerb) -> &'static str {
    match verb {
        InstallVerb::Install => "Install",
        InstallVerb::Upgrade => "Upgrade",
    }
}

/// What a blocked deletion can do instead of waiting.
pub(crate) const WAY_OUT: &str =
    "set spec.deletionPolicy to Orphan to finish deleting without uninstalling";

/// Reason and message of a failing outcome; `None` for the healthy ones.
fn failure(r: &OmniHelmRelease, outcome: &Outcome) -> Option<(&'static str, String)> {
    let name = r.effective_release_name();
    let timeout = &r.spec.timeout;
    let pending = |info: &ReleaseInfo| {
        let since = info.last_deployed.as_deref().unwrap_or("an unknown time");
        format!(
            "Helm release {name:?} is {} at revision {} since {since}",
            info.status, info.revision
        )
    };
    Some(match outcome {
        Outcome::Invalid(m) => (reasons::VALIDATION_FAILED, m.clone()),
        Outcome::MissingCluster => (
            reasons::MISSING_CLUSTER,
            format!("OmniCluster {:?} does not exist", r.spec.cluster_ref.name),
        ),
        Outcome::Blocked(problem) | Outcome::UninstallBlocked(problem) => {
            (problem.reason(), problem.to_string())
        }
        Outcome::HelmFailed(m) | Outcome::UninstallFailed(m) => {
            (reasons::RECONCILE_FAILED, m.clone())
        }
        Outcome::Refused(o) => (
            REASON_TARGET_NOT_OWNED,
            format!(
                "Helm release {name:?} in namespace {:?} {}; it was left unchanged (annotate this OmniHelmRelease {ADOPT_ANNOTATION}=\"true\" to take it over)",
                r.spec.namespace,
                o.whose()
            ),
        ),
        Outcome::Locked { release, .. } => (
            REASON_RELEASE_PENDING,
            format!(
                "{}; another Helm operation may still own it, so it is left alone until its timeout {timeout} has passed",
                pending(release)
            ),
        ),
        Outcome::Stuck { release, because } => (
            REASON_RELEASE_STUCK,
            format!(
                "{}, longer than its timeout {timeout}; {}",
                pending(release),
                match because {
                    StuckBecause::RecoveryNotAllowed => {
                        "set spec.recoverStuckRelease to true to let the operator recover it, or recover it by hand (helm rollback)"
                    }
                    StuckBecause::NoEarlierRevision => {
                        "there is no earlier revision to roll back to, so it must be recovered by hand"
                    }
                }
            ),
        ),
        Outcome::Ran { verb, applied } => match applied {
            Applied::Deployed(_) => return None,
            Applied::NotDeployed(info) => (
                reasons::RECONCILE_FAILED,
                format!(
                    "Helm {} of release {name:?} ended in status {}",
                    action_name(*verb).to_lowercase(),
                    info.status
                ),
            ),
            Applied::Failed { message, .. } => (reasons::RECONCILE_FAILED, message.clone()),
        },
        Outcome::InSync(_) => return None,
    })
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
) -> (&'static str, String) {
    match action {
        Some("Install") => (
            reasons::HELM_INSTALLED,
            format!("installed Helm release {name:?} revision {revision}"),
        ),
        Some("Upgrade") => (
            reasons::HELM_UPGRADED,
            format!("upgraded Helm release {name:?} to revision {revision}"),
        ),
        _ if revision <= 1 => (
            reasons::HELM_INSTALLED,
            format!("Helm release {name:?} is deployed at revision {revision}"),
        ),
        _ => (
            reasons::HELM_UPGRADED,
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
    fn failed(&mut self, reason: &str, message: &str) {
        self.outcome(false, reason, message);
        self.s.last_error = Some(message.to_string());
        self.s.last_attempt_time = Some(self.now());
    }

    fn record(&mut self, info: &ReleaseInfo) {
        self.s.release_revision = Some(info.revision);
        self.s.release_status = Some(info.status.clone());
        if !info.chart.is_empty() {
            self.s.chart = Some(info.chart.clone());
        }
        if !info.chart_version.is_empty() {
            self.s.chart_version = Some(info.chart_version.clone());
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
    let stored = r.status.clone().unwrap_or_default();
    let name = r.effective_release_name();
    match outcome {
        // Before the cluster was looked at, or while deleting: `Accepted` stays as it was.
        Outcome::Invalid(_) | Outcome::UninstallBlocked(_) => {}
        Outcome::UninstallFailed(_) => d.s.last_action = Some("Uninstall".into()),
        Outcome::MissingCluster => {
            let m = format!("OmniCluster {:?} does not exist", r.spec.cluster_ref.name);
            d.set(ct::ACCEPTED, false, reasons::MISSING_CLUSTER, &m);
        }
        _ => d.set(
            ct::ACCEPTED,
            true,
            reasons::ACCEPTED,
            &format!("attached to OmniCluster {:?}", r.spec.cluster_ref.name),
        ),
    }
    match outcome {
        Outcome::Refused(_) => {
            // Nothing in the status may describe someone else's release as ours: without a
            // digest and revision the stored status can never pass for "installed before
            // labels" later.
            d.s.last_applied_digest = None;
            d.s.release_revision = None;
            d.s.release_status = None;
        }
        Outcome::Locked { release, .. } | Outcome::Stuck { release, .. } => d.record(release),
        Outcome::InSync(current) => {
            if let Some(info) = current {
                d.record(info);
            }
            let revision = stored.release_revision.unwrap_or_default();
            let (reason, m) = success_condition(stored.last_action.as_deref(), &name, revision);
            d.outcome(true, reason, &m);
            d.s.last_error = None;
        }
        Outcome::Ran { verb, applied } => {
            let action = action_name(*verb);
            d.s.last_action = Some(action.to_string());
            d.s.last_attempt_time = Some(now);
            match applied {
                Applied::Deployed(info) | Applied::NotDeployed(info) => {
                    d.record(info);
                    d.s.last_success_time = Some(now);
                    d.s.last_error = None;
                    d.s.chart = Some(r.spec.chart.chart.clone());
                }
                Applied::Failed { after, .. } => match after {
                    After::Release(info) => d.record(info),
                    After::Gone => {
                        d.s.release_revision = None;
                        d.s.release_status = None;
                    }
                    After::Unknown => {}
                },
            }
            if let Applied::Deployed(info) = applied {
                d.s.last_applied_digest = Some(input_digest(r));
                let (reason, m) = success_condition(Some(action), &name, info.revision);
                d.outcome(true, reason, &m);
            }
        }
        _ => {}
    }
    if let Some((reason, message)) = failure(r, outcome) {
        d.failed(reason, &message);
    }
    d.s
}

/// Pure: when to reconcile again. Failures of Helm itself return an error (the message is in
/// the status too), which backs off per object; missing inputs are looked at again after
/// [`RETRY`]; a healthy or refused release waits for its drift check.
pub(crate) fn next_reconcile(
    r: &OmniHelmRelease,
    outcome: &Outcome,
    min_interval: Duration,
    spread: f64,
) -> Result<Action, Error> {
    match outcome {
        Outcome::Invalid(_) => Ok(Action::await_change()),
        Outcome::MissingCluster
        | Outcome::Blocked(_)
        | Outcome::Stuck { .. }
        | Outcome::UninstallBlocked(_) => Ok(Action::requeue(RETRY)),
        Outcome::Locked { retry_after, .. } => Ok(Action::requeue(*retry_after)),
        Outcome::Refused(_) | Outcome::InSync(_) => Ok(drift_check(r, min_interval, spread)),
        Outcome::HelmFailed(_) | Outcome::UninstallFailed(_) | Outcome::Ran { .. } => {
            match failure(r, outcome) {
                Some((reason, message)) => Err(HelmFailure { reason, message }.into()),
                None => Ok(drift_check(r, min_interval, spread)),
            }
        }
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
