//! Where a release stands: pure functions of what one look at Helm found ([`Observation`]),
//! the object's spec and its stored status. [`super::decide`] picks the action from it.

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::inputs::timeout_of;
use super::ownership::{Claim, Ownership, Starter};
use crate::api::OmniHelmRelease;
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::helm::{ChartSource, ReleaseInfo};

/// What to do with the release, decided from Helm's view and the stored status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// No release exists: install it.
    Install,
    /// The release exists but its inputs changed or it drifted: upgrade it.
    Upgrade,
    /// The deployed release is the one last applied with the current inputs.
    UpToDate,
}

/// Digest of the inputs that define the release. Deliberately excludes the kubeconfig bytes
/// (a rotation must not upgrade) and operation knobs like `wait` or `timeout`.
pub fn input_digest(r: &OmniHelmRelease) -> String {
    let spec = &r.spec;
    let source = match ChartSource::from_spec(&spec.chart.repository, &spec.chart.chart) {
        ChartSource::Repository { url, chart } => {
            serde_json::json!({"repository": url, "chart": chart})
        }
        ChartSource::Oci { reference } => serde_json::json!({"oci": reference}),
    };
    // serde_json maps are sorted, so the encoding (and digest) is stable.
    let inputs = serde_json::json!({
        "clusterRef": spec.cluster_ref.name,
        "kubeconfigSecret": spec.kubeconfig_secret_ref.name,
        "kubeconfigKey": spec.kubeconfig_secret_ref.key,
        "releaseName": r.effective_release_name(),
        "namespace": spec.namespace,
        "source": source,
        "version": spec.chart.version.trim(),
        "values": spec.chart.values,
        "skipCRDs": spec.skip_crds,
    });
    hex::encode(Sha256::digest(inputs.to_string().as_bytes()))
}

/// Pure decision: install when missing, upgrade unless the deployed revision is the one this
/// object last applied with the same digest.
pub fn plan(current: Option<&ReleaseInfo>, stored: &OmniHelmReleaseStatus, digest: &str) -> Plan {
    let Some(info) = current else {
        return Plan::Install;
    };
    if info.status == "uninstalled" {
        return Plan::Install;
    }
    let same_inputs = stored.last_applied_digest.as_deref() == Some(digest);
    let same_revision = stored.release_revision == Some(info.revision);
    if info.status == "deployed" && same_inputs && same_revision {
        Plan::UpToDate
    } else {
        Plan::Upgrade
    }
}

/// What to do about a release Helm reports in a `pending-*` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
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
/// earlier operator process started (and this object owns, see [`super::starter`]) was
/// abandoned when that process ended. Otherwise the age counts from the pending revision's
/// `last_deployed`, which Helm stamps when the operation starts; a record without it is treated
/// as old, since no running operation writes such a record.
pub fn pending(
    info: &ReleaseInfo,
    now: jiff::Timestamp,
    timeout: Duration,
    recover_allowed: bool,
    started_by: Starter,
) -> Option<Pending> {
    if !info.is_pending() {
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
    pub release: Option<ReleaseInfo>,
    /// What this object may do with it, from the pass's first look (its labels are not read
    /// again after a recovery: a rollback may change the revision, not the owner).
    pub claim: Claim,
    /// A stuck revision was recovered earlier in this pass; this look is the one after it.
    pub recovered: bool,
}

/// Where the release stands, in the terms the next action is chosen by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReleaseState {
    /// No release by that name, or one uninstalled with its history kept.
    Absent,
    /// Someone else's, and adoption was not asked for.
    NotOurs(Ownership),
    /// A Helm operation on it is unfinished (`pending-*`), with the verdict on it.
    Pending(Pending, ReleaseInfo),
    /// Deployed at the revision this object last applied with the current inputs.
    InSync,
    /// Present, but its inputs changed, it failed, or it changed out of band.
    OutOfSync,
}

/// The release's state plus the facts that shape the action on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub release: ReleaseState,
    /// Someone else's release, taken over on the user's request.
    pub adopting: bool,
    /// The stored status records a successful apply of the current inputs, so a Helm run
    /// now means the release changed out of band (drift).
    pub inputs_applied: bool,
    /// A stuck revision was recovered earlier in this pass.
    pub recovered: bool,
}

/// Pure: the state of the release from one look, the spec and the stored status. A look after
/// a recovery is never pending again in the same pass: the recovery ended that operation, and
/// whatever Helm reports now is for the install or upgrade to deal with.
pub(crate) fn determine(r: &OmniHelmRelease, look: &Observation, now: jiff::Timestamp) -> State {
    let stored = r.status.clone().unwrap_or_default();
    let digest = input_digest(r);
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
                    timeout_of(r),
                    r.spec.recover_stuck_release,
                    started_by,
                )
            };
            match verdict {
                Some(verdict) => ReleaseState::Pending(verdict, info.clone()),
                // The `helm-upgrade-every-trigger` quirk of the baseline model applies here.
                None => {
                    match crate::baseline::upgrade_every_trigger(plan(Some(info), &stored, &digest))
                    {
                        Plan::Install => ReleaseState::Absent,
                        Plan::UpToDate => ReleaseState::InSync,
                        Plan::Upgrade => ReleaseState::OutOfSync,
                    }
                }
            }
        }
    };
    State {
        release,
        adopting: look.claim == Claim::Adopting,
        inputs_applied: stored.last_applied_digest.as_deref() == Some(digest.as_str()),
        recovered: look.recovered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::{at, info, release};

    #[test]
    fn digest_tracks_inputs_but_not_operation_knobs() {
        let a = release(serde_json::json!({"replicas": 1}));
        let mut b = a.clone();
        b.spec.wait = true;
        b.spec.timeout = "10m".into();
        b.spec.atomic = true;
        assert_eq!(input_digest(&a), input_digest(&b));
        let mut c = a.clone();
        c.spec.chart.values = serde_json::json!({"replicas": 2});
        assert_ne!(input_digest(&a), input_digest(&c));
        let mut v = a.clone();
        v.spec.chart.version = "1.0.1".into();
        assert_ne!(input_digest(&a), input_digest(&v));
        let mut t = a.clone();
        t.spec.namespace = "other".into();
        assert_ne!(input_digest(&a), input_digest(&t));
    }

    #[test]
    fn pending_release_waits_for_its_timeout_then_is_stuck_or_recovered() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let five_min = Duration::from_secs(300);
        let young = at("pending-upgrade", 3, Some("2026-11-23T01:58:00.5+00:00"));
        assert_eq!(
            pending(&young, now, five_min, true, Starter::Unknown),
            Some(Pending::Wait(Duration::from_millis(180_500 + 5_000)))
        );
        let old = at("pending-upgrade", 3, Some("2026-11-23T01:54:59Z"));
        assert_eq!(
            pending(&old, now, five_min, false, Starter::Unknown),
            Some(Pending::Stuck)
        );
        assert_eq!(
            pending(&old, now, five_min, true, Starter::Unknown),
            Some(Pending::Recover)
        );
        let unknown = at("pending-install", 1, None);
        assert_eq!(
            pending(&unknown, now, five_min, false, Starter::Unknown),
            Some(Pending::Stuck)
        );
        let deployed = at("deployed", 3, Some("2020-01-01T00:00:00Z"));
        assert_eq!(
            pending(&deployed, now, five_min, true, Starter::EarlierRun),
            None
        );
    }

    #[test]
    fn a_pending_revision_of_an_earlier_operator_process_is_recovered_at_once() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let five_min = Duration::from_secs(300);
        // Started a second ago by a process that is gone: no wait, with or without the opt-in.
        let fresh = at("pending-install", 1, Some("2026-11-23T01:59:59Z"));
        for allowed in [false, true] {
            assert_eq!(
                pending(&fresh, now, five_min, allowed, Starter::EarlierRun),
                Some(Pending::Abandoned)
            );
        }
        // This process's own pending revision, or an unmarked one, waits as before.
        for started_by in [Starter::ThisRun, Starter::Unknown] {
            assert!(matches!(
                pending(&fresh, now, five_min, true, started_by),
                Some(Pending::Wait(_))
            ));
        }
    }

    #[test]
    fn plan_upgrades_only_on_change_or_drift() {
        let r = release(serde_json::json!({}));
        let digest = input_digest(&r);
        let applied = OmniHelmReleaseStatus {
            last_applied_digest: Some(digest.clone()),
            release_revision: Some(2),
            ..OmniHelmReleaseStatus::default()
        };
        assert_eq!(plan(None, &applied, &digest), Plan::Install);
        assert_eq!(
            plan(Some(&info("deployed", 2)), &applied, &digest),
            Plan::UpToDate
        );
        assert_eq!(
            plan(Some(&info("deployed", 2)), &applied, "other"),
            Plan::Upgrade,
            "inputs changed"
        );
        assert_eq!(
            plan(Some(&info("deployed", 3)), &applied, &digest),
            Plan::Upgrade,
            "upgraded out of band"
        );
        assert_eq!(
            plan(Some(&info("failed", 2)), &applied, &digest),
            Plan::Upgrade,
            "failed release is repaired"
        );
        assert_eq!(
            plan(Some(&info("uninstalled", 2)), &applied, &digest),
            Plan::Install
        );
        assert_eq!(
            plan(
                Some(&info("deployed", 1)),
                &OmniHelmReleaseStatus::default(),
                &digest
            ),
            Plan::Upgrade,
            "an adopted release without a recorded digest gets our inputs applied"
        );
    }

    /// The object as last applied at revision 2 with its current inputs.
    fn applied_at_revision_2() -> OmniHelmRelease {
        let mut r = release(serde_json::json!({}));
        r.status = Some(OmniHelmReleaseStatus {
            last_applied_digest: Some(input_digest(&r)),
            release_revision: Some(2),
            ..OmniHelmReleaseStatus::default()
        });
        r
    }

    #[test]
    fn the_state_of_a_release_follows_from_one_look() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let r = applied_at_revision_2();
        let ours = Claim::Ours(Starter::Unknown);
        let old_pending = at("pending-upgrade", 3, Some("2026-11-23T01:00:00Z"));
        let young_pending = at("pending-upgrade", 3, Some("2026-11-23T01:59:00Z"));
        let refused = Claim::Refused(Ownership::Unowned);
        let cases: [(&str, Option<ReleaseInfo>, Claim, bool, ReleaseState); 11] = [
            (
                "no release",
                None,
                ours.clone(),
                false,
                ReleaseState::Absent,
            ),
            (
                "uninstalled, history kept",
                Some(info("uninstalled", 2)),
                ours.clone(),
                false,
                ReleaseState::Absent,
            ),
            (
                "the one we applied",
                Some(info("deployed", 2)),
                ours.clone(),
                false,
                ReleaseState::InSync,
            ),
            (
                "upgraded by someone else",
                Some(info("deployed", 3)),
                ours.clone(),
                false,
                ReleaseState::OutOfSync,
            ),
            (
                "failed",
                Some(info("failed", 2)),
                ours.clone(),
                false,
                ReleaseState::OutOfSync,
            ),
            (
                "someone else's",
                Some(info("deployed", 2)),
                refused.clone(),
                false,
                ReleaseState::NotOurs(Ownership::Unowned),
            ),
            (
                "someone else's, even when pending",
                Some(old_pending.clone()),
                refused,
                false,
                ReleaseState::NotOurs(Ownership::Unowned),
            ),
            (
                "pending, younger than its timeout",
                Some(young_pending.clone()),
                ours.clone(),
                false,
                ReleaseState::Pending(
                    Pending::Wait(Duration::from_secs(245)),
                    young_pending.clone(),
                ),
            ),
            (
                "pending past its timeout, recovery not allowed",
                Some(old_pending.clone()),
                ours.clone(),
                false,
                ReleaseState::Pending(Pending::Stuck, old_pending.clone()),
            ),
            (
                "pending, started by an earlier operator process",
                Some(young_pending.clone()),
                Claim::Ours(Starter::EarlierRun),
                false,
                ReleaseState::Pending(Pending::Abandoned, young_pending),
            ),
            (
                "still pending right after a recovery",
                Some(old_pending),
                ours,
                true,
                ReleaseState::OutOfSync,
            ),
        ];
        for (scenario, release, claim, recovered, expected) in cases {
            let look = Observation {
                release,
                claim,
                recovered,
            };
            assert_eq!(determine(&r, &look, now).release, expected, "{scenario}");
        }
    }

    #[test]
    fn an_adopted_pending_release_is_recovered_by_its_timeout_never_as_abandoned() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let mut r = applied_at_revision_2();
        r.spec.recover_stuck_release = true;
        let stuck = at("pending-upgrade", 3, Some("2026-11-23T01:00:00Z"));
        let look = Observation {
            release: Some(stuck.clone()),
            claim: Claim::Adopting,
            recovered: false,
        };
        let state = determine(&r, &look, now);
        assert_eq!(
            state.release,
            ReleaseState::Pending(Pending::Recover, stuck)
        );
        assert!(state.adopting);
    }

    #[test]
    fn inputs_count_as_applied_only_with_the_current_digest() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let look = Observation {
            release: None,
            claim: Claim::Ours(Starter::Unknown),
            recovered: false,
        };
        let mut r = applied_at_revision_2();
        assert!(determine(&r, &look, now).inputs_applied);
        r.spec.chart.version = "2.0.0".into();
        assert!(!determine(&r, &look, now).inputs_applied);
        r.status = None;
        assert!(!determine(&r, &look, now).inputs_applied);
    }
}
