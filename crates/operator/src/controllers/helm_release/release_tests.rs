//! Scenarios of `release.rs`: digests, pending verdicts and the state of a release.

use super::*;
use crate::controllers::helm_release::inputs::request;
use crate::controllers::helm_release::test_support::{at, info, release};

/// The digest of `r`'s inputs, as its pass resolves them.
fn input_digest(r: &OmniHelmRelease) -> String {
    request(r).digest
}

/// The state of `r`'s release after one look `look` at `now`.
fn determine(r: &OmniHelmRelease, look: &Observation, now: jiff::Timestamp) -> State {
    super::determine(r, &request(r), look, now, false)
}

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
fn a_release_is_upgraded_only_on_change_or_drift() {
    let r = release(serde_json::json!({}));
    let digest = input_digest(&r);
    let applied = OmniHelmReleaseStatus {
        last_applied_digest: Some(digest.clone()),
        release_revision: Some(2),
        ..OmniHelmReleaseStatus::default()
    };
    assert_eq!(sync_state(None, &applied, &digest), ReleaseState::Absent);
    assert_eq!(
        sync_state(Some(&info("deployed", 2)), &applied, &digest),
        ReleaseState::InSync
    );
    assert_eq!(
        sync_state(Some(&info("deployed", 2)), &applied, "other"),
        ReleaseState::OutOfSync,
        "inputs changed"
    );
    assert_eq!(
        sync_state(Some(&info("deployed", 3)), &applied, &digest),
        ReleaseState::OutOfSync,
        "upgraded out of band"
    );
    assert_eq!(
        sync_state(Some(&info("failed", 2)), &applied, &digest),
        ReleaseState::OutOfSync,
        "failed release is repaired"
    );
    assert_eq!(
        sync_state(Some(&info("uninstalled", 2)), &applied, &digest),
        ReleaseState::Absent
    );
    assert_eq!(
        sync_state(
            Some(&info("deployed", 1)),
            &OmniHelmReleaseStatus::default(),
            &digest
        ),
        ReleaseState::OutOfSync,
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

/// The baseline model's `helm-upgrade-every-trigger` upgrades a release in sync, and nothing
/// else.
#[test]
fn the_baseline_quirk_upgrades_a_release_in_sync_only() {
    let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
    let r = applied_at_revision_2();
    let req = request(&r);
    let look = |release| Observation {
        release: Some(release),
        claim: Claim::Ours(Starter::Unknown),
        recovered: false,
    };
    let in_sync = look(info("deployed", 2));
    assert_eq!(
        super::determine(&r, &req, &in_sync, now, true).release,
        ReleaseState::OutOfSync
    );
    let uninstalled = look(info("uninstalled", 2));
    assert_eq!(
        super::determine(&r, &req, &uninstalled, now, true).release,
        ReleaseState::Absent
    );
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
