//! Where a release stands: pure functions of what one look at Helm found ([`Observation`]),
//! the object's spec and its stored status. [`super::decide`] picks the action from it.

use std::time::Duration;

use super::ownership::{Claim, Ownership, Starter};
use crate::api::OmniHelmRelease;
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::api::keys::{FORCE_AT_ANNOTATION, new_request};
use crate::domain::helm::{HelmStatus, ReleaseInfo, ReleaseRequest};

/// What to do about a release Helm reports in a `pending-*` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pending {
    /// Younger than its timeout: another Helm run may still own it; look again after this long.
    Wait(Duration),
    /// Older than its timeout, and recovery is not allowed: report it.
    Stuck,
    /// Older than its timeout, and `spec.recoverStuckRelease` allows recovering it.
    Recover,
    /// Started by an earlier operator process, which is gone: recovered at once.
    Abandoned,
}

/// Pure decision for a release in `pending-*` (`None` when it is not pending). A revision an
/// earlier operator process started (and this object owns, see `super::starter`) was
/// abandoned when that process ended. Otherwise the age counts from the pending revision's
/// `last_deployed`, which Helm stamps when the operation starts; a record without it is treated
/// as old, since no running operation writes such a record.
pub(crate) fn pending(
    info: &ReleaseInfo,
    now: jiff::Timestamp,
    timeout: Duration,
    recover_allowed: bool,
    started_by: Starter,
) -> Option<Pending> {
    if !info.status.is_pending() {
        return None;
    }
    if started_by == Starter::EarlierRun {
        return Some(Pending::Abandoned);
    }
    let started = info
        .last_deployed
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let age = started.map(|t| now.duration_since(t).try_into().unwrap_or(Duration::ZERO));
    Some(match age {
        Some(age) if age <= timeout => Pending::Wait(timeout - age + Duration::from_secs(5)),
        _ if recover_allowed => Pending::Recover,
        _ => Pending::Stuck,
    })
}

/// What one look at Helm found during a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observation {
    /// Helm's view of the release (`helm status`); `None` when there is none.
    pub(crate) release: Option<ReleaseInfo>,
    /// What this object may do with it, from the pass's first look (its labels are not read
    /// again after a recovery: a rollback may change the revision, not the owner).
    pub(crate) claim: Claim,
    /// A stuck revision was recovered earlier in this pass; this look is the one after it.
    pub(crate) recovered: bool,
}

/// Where the release stands, in the terms the next action is chosen by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReleaseState {
    /// No release by that name, or one uninstalled with its history kept: install it.
    Absent,
    /// Someone else's, and adoption was not asked for.
    NotOurs(Ownership),
    /// A Helm operation on it is unfinished (`pending-*`), with the verdict on it.
    Pending(Pending, ReleaseInfo),
    /// Deployed at the revision this object last applied with the current inputs.
    InSync,
    /// Present, but its inputs changed, it failed, or it changed out of band: upgrade it.
    OutOfSync,
}

/// Pure: where a release that is not pending stands against the stored status and the
/// current inputs' `digest`: absent when missing or uninstalled, in sync when deployed at the
/// revision this object last applied with the same digest, out of sync otherwise.
pub(crate) fn sync_state(
    current: Option<&ReleaseInfo>,
    stored: &OmniHelmReleaseStatus,
    digest: &str,
) -> ReleaseState {
    let Some(info) = current else {
        return ReleaseState::Absent;
    };
    if info.status == HelmStatus::Uninstalled {
        return ReleaseState::Absent;
    }
    let same_inputs = stored.last_applied_digest.as_deref() == Some(digest);
    let same_revision = stored.release_revision == Some(info.revision);
    if info.status == HelmStatus::Deployed && same_inputs && same_revision {
        ReleaseState::InSync
    } else {
        ReleaseState::OutOfSync
    }
}

/// The release's state plus the facts that shape the action on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) release: ReleaseState,
    /// Someone else's release, taken over on the user's request.
    pub(crate) adopting: bool,
    /// The stored status records a successful apply of the current inputs, so a Helm run
    /// now means the release changed out of band (drift).
    pub(crate) inputs_applied: bool,
    /// A stuck revision was recovered earlier in this pass.
    pub(crate) recovered: bool,
    /// A force request (`omni.texashpc.com/force-at`) not handled yet: one upgrade even
    /// when in sync.
    pub(crate) forced: bool,
}

/// Pure: the state of the release `req` from one look, the spec and the stored status. A look
/// after a recovery is never pending again in the same pass: the recovery ended that
/// operation, and whatever Helm reports now is for the install or upgrade to deal with.
/// `upgrade_every_trigger` is the baseline model's quirk (benchmarks only): a release in sync
/// is upgraded anyway, as the original does.
pub(crate) fn determine(
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    look: &Observation,
    now: jiff::Timestamp,
    upgrade_every_trigger: bool,
) -> State {
    let stored = r.status.clone().unwrap_or_default();
    let digest = &req.digest;
    let release = match (&look.release, &look.claim) {
        (None, _) => ReleaseState::Absent,
        (Some(_), Claim::Refused(o)) => ReleaseState::NotOurs(o.clone()),
        (Some(info), claim) => {
            let started_by = match claim {
                Claim::Ours(starter) => *starter,
                _ => Starter::Unknown,
            };
            let verdict = if look.recovered {
                None
            } else {
                pending(
                    info,
                    now,
                    req.timeout,
                    r.spec.recover_stuck_release,
                    started_by,
                )
            };
            match verdict {
                Some(verdict) => ReleaseState::Pending(verdict, info.clone()),
                None => match sync_state(Some(info), &stored, digest) {
                    ReleaseState::InSync if upgrade_every_trigger => ReleaseState::OutOfSync,
                    state => state,
                },
            }
        }
    };
    let handled = stored.last_handled_force_at.as_deref();
    State {
        release,
        adopting: look.claim == Claim::Adopting,
        inputs_applied: stored.last_applied_digest.as_deref() == Some(digest.as_str()),
        recovered: look.recovered,
        forced: new_request(&r.metadata, FORCE_AT_ANNOTATION, handled).is_some(),
    }
}

#[cfg(test)]
#[path = "release_tests.rs"]
mod tests;
