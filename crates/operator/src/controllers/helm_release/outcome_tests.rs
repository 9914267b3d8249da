//! Status and requeue decisions of `outcome.rs`, one scenario per test.

use super::*;
use crate::api::Reason;
use crate::api::common::{ConditionStatus, find_condition};
use crate::api::keys;
use crate::controllers::helm_release::test_support::{at, info, release};

fn now() -> jiff::Timestamp {
    "2026-11-23T02:00:00Z".parse().unwrap()
}

/// The object as last applied at revision 2 with its current inputs, installed and ready.
fn applied() -> OmniHelmRelease {
    let mut r = release(serde_json::json!({}));
    r.metadata.generation = Some(3);
    r.status = Some(OmniHelmReleaseStatus {
        last_applied_digest: Some(input_digest(&r)),
        release_revision: Some(2),
        release_status: Some("deployed".into()),
        last_action: Some("Upgrade".into()),
        ..OmniHelmReleaseStatus::default()
    });
    r
}

fn condition(s: &OmniHelmReleaseStatus, type_: &str) -> (ConditionStatus, String, String) {
    let c = find_condition(&s.conditions, type_).unwrap_or_else(|| panic!("no {type_}"));
    (c.status, c.reason.clone(), c.message.clone())
}

#[test]
fn a_healthy_release_never_reports_a_failure_reason() {
    let (reason, message) = success_condition(Some("Install"), "app", 1);
    assert_eq!(reason, Reason::HelmInstalled);
    assert_eq!(message, r#"installed Helm release "app" revision 1"#);
    let (reason, message) = success_condition(Some("Upgrade"), "app", 4);
    assert_eq!(reason, Reason::HelmUpgraded);
    assert_eq!(message, r#"upgraded Helm release "app" to revision 4"#);
    // Status restored from a backup, or written by another tool: no recorded action.
    for (action, revision, expected) in [
        (None, 1, Reason::HelmInstalled),
        (None, 3, Reason::HelmUpgraded),
        (Some("Uninstall"), 2, Reason::HelmUpgraded),
    ] {
        let (reason, message) = success_condition(action, "app", revision);
        assert_eq!(reason, expected, "{action:?} revision {revision}");
        assert!(
            message.contains(&format!("revision {revision}")),
            "{message}"
        );
    }
}

#[test]
fn a_deployed_install_records_the_revision_and_the_applied_inputs() {
    let r = release(serde_json::json!({}));
    let outcome = Outcome::Ran {
        verb: InstallVerb::Install,
        applied: Applied::Deployed(info("deployed", 1)),
    };
    let s = desired_status(&r, &outcome, now());
    assert_eq!(
        condition(&s, ct::READY),
        (
            ConditionStatus::True,
            Reason::HelmInstalled.to_string(),
            r#"installed Helm release "app" revision 1"#.to_string()
        )
    );
    assert_eq!(condition(&s, ct::ACCEPTED).0, ConditionStatus::True);
    assert_eq!(s.last_applied_digest, Some(input_digest(&r)));
    assert_eq!(s.release_revision, Some(1));
    assert_eq!(s.last_action.as_deref(), Some("Install"));
    assert_eq!(s.last_success_time, Some(now()));
    assert_eq!(s.last_error, None);
    assert!(outcome.deployed(&r).is_some());
    assert_eq!(
        next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0).ok(),
        Some(Action::requeue(Duration::from_secs(300)))
    );
}

#[test]
fn an_unchanged_release_is_described_by_its_last_recorded_action() {
    let r = applied();
    let s = desired_status(&r, &Outcome::InSync(Some(info("deployed", 2))), now());
    assert_eq!(
        condition(&s, ct::READY),
        (
            ConditionStatus::True,
            Reason::HelmUpgraded.to_string(),
            r#"upgraded Helm release "app" to revision 2"#.to_string()
        )
    );
    assert_eq!(s.last_attempt_time, None, "nothing was attempted");
}

#[test]
fn a_refused_release_leaves_nothing_in_the_status_that_could_claim_it_later() {
    let r = applied();
    let outcome = Outcome::Refused(Ownership::OwnedByOther(
        "OmniHelmRelease ns/b (uid u)".into(),
    ));
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.last_applied_digest, None);
    assert_eq!(s.release_revision, None);
    assert_eq!(s.release_status, None);
    let (status, reason, message) = condition(&s, ct::READY);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "TargetNotOwned")
    );
    assert!(
        message.contains("belongs to OmniHelmRelease ns/b (uid u)"),
        "{message}"
    );
    assert!(message.contains(keys::ADOPT_ANNOTATION), "{message}");
    assert!(next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0).is_ok());
}

#[test]
fn a_young_pending_release_is_reported_and_looked_at_after_its_timeout() {
    let r = applied();
    let pending = at("pending-upgrade", 3, Some("2026-11-23T01:59:00Z"));
    let outcome = Outcome::Locked {
        release: pending,
        retry_after: Duration::from_secs(245),
    };
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.release_revision, Some(3));
    assert_eq!(s.release_status.as_deref(), Some("pending-upgrade"));
    let (_, reason, message) = condition(&s, ct::READY);
    assert_eq!(reason, Reason::ReleasePending);
    assert!(message.starts_with(r#"Helm release "app" is pending-upgrade at revision 3 since 2026-11-23T01:59:00Z; another Helm operation"#), "{message}");
    assert_eq!(
        next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0).ok(),
        Some(Action::requeue(Duration::from_secs(245)))
    );
}

#[test]
fn a_stuck_release_says_how_to_get_it_unstuck() {
    let r = applied();
    for (because, hint) in [
        (
            StuckBecause::RecoveryNotAllowed,
            "set spec.recoverStuckRelease to true",
        ),
        (
            StuckBecause::NoEarlierRevision,
            "no earlier revision to roll back to",
        ),
    ] {
        let outcome = Outcome::Stuck {
            release: info("pending-upgrade", 1),
            because,
        };
        let s = desired_status(&r, &outcome, now());
        let (_, reason, message) = condition(&s, ct::READY);
        assert_eq!(reason, Reason::ReleaseStuck);
        assert!(
            message.contains("since an unknown time, longer than its timeout"),
            "{message}"
        );
        assert!(message.contains(hint), "{message}");
        assert_eq!(s.last_error.as_deref(), Some(message.as_str()));
        assert_eq!(
            next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0).ok(),
            Some(Action::requeue(RETRY))
        );
    }
}

#[test]
fn a_failed_install_that_helm_removed_forgets_the_revision_and_fails_the_reconcile() {
    let r = applied();
    let outcome = Outcome::Ran {
        verb: InstallVerb::Install,
        applied: Applied::Failed {
            message: "Helm install failed for release \"app\": boom".into(),
            after: After::Gone,
        },
    };
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.release_revision, None);
    assert_eq!(s.release_status, None);
    assert_eq!(s.last_action.as_deref(), Some("Install"));
    assert_eq!(s.last_attempt_time, Some(now()));
    assert_eq!(
        s.last_applied_digest,
        r.status
            .as_ref()
            .and_then(|s| s.last_applied_digest.clone())
    );
    assert_eq!(condition(&s, ct::RELEASED).1, Reason::ReconcileFailed);
    match next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0) {
        Err(Error::HelmRelease(HelmFailure { reason, message })) => {
            assert_eq!(reason, Reason::ReconcileFailed);
            assert_eq!(message, "Helm install failed for release \"app\": boom");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_upgrade_that_ended_in_another_status_is_recorded_but_not_counted_as_applied() {
    let mut r = applied();
    r.spec.chart.version = "2.0.0".into();
    let outcome = Outcome::Ran {
        verb: InstallVerb::Upgrade,
        applied: Applied::NotDeployed(info("failed", 3)),
    };
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.release_revision, Some(3));
    assert_ne!(s.last_applied_digest, Some(input_digest(&r)));
    let message = r#"Helm upgrade of release "app" ended in status failed"#;
    assert_eq!(s.last_error.as_deref(), Some(message));
    assert!(matches!(
        next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0),
        Err(Error::HelmRelease(HelmFailure { message: m, .. })) if m == message
    ));
}

#[test]
fn acceptance_follows_the_cluster_and_is_left_alone_before_and_after_it() {
    let r = applied();
    let s = desired_status(&r, &Outcome::MissingCluster, now());
    assert_eq!(
        condition(&s, ct::ACCEPTED),
        (
            ConditionStatus::False,
            Reason::MissingCluster.to_string(),
            r#"OmniCluster "c" does not exist"#.to_string()
        )
    );
    for outcome in [
        Outcome::Invalid("spec.timeout: bad".into()),
        Outcome::UninstallBlocked(Problem::MissingSecret("gone".into())),
        Outcome::UninstallFailed("helm uninstall failed".into()),
    ] {
        let s = desired_status(&r, &outcome, now());
        assert!(
            find_condition(&s.conditions, ct::ACCEPTED).is_none(),
            "{outcome:?}"
        );
        assert_eq!(condition(&s, ct::READY).0, ConditionStatus::False);
    }
    let blocked = Outcome::Blocked(Problem::MissingSecret("no kubeconfig".into()));
    let s = desired_status(&r, &blocked, now());
    assert_eq!(condition(&s, ct::ACCEPTED).0, ConditionStatus::True);
    assert_eq!(condition(&s, ct::READY).1, Reason::MissingSecret);
}

#[test]
fn a_failed_uninstall_is_recorded_as_the_last_action_and_retried_with_backoff() {
    let r = applied();
    let outcome = Outcome::UninstallFailed("Helm uninstall failed".into());
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.last_action.as_deref(), Some("Uninstall"));
    assert!(next_reconcile(&r, &outcome, Duration::from_secs(10), 1.0).is_err());
    let invalid = Outcome::Invalid("spec.timeout: bad".into());
    assert_eq!(
        next_reconcile(&r, &invalid, Duration::from_secs(10), 1.0).ok(),
        Some(Action::await_change()),
        "only a spec change can fix an invalid spec"
    );
}

/// An input problem keeps its condition reason when its message says what it blocks.
#[test]
fn an_input_problem_knows_its_reason() {
    let missing = Problem::MissingSecret("kubeconfig Secret \"ns/kc\" does not exist".into());
    assert_eq!(missing.reason(), Reason::MissingSecret);
    let blocked = missing.map_message(|m| format!("cannot uninstall: {m}"));
    assert_eq!(blocked.reason(), Reason::MissingSecret);
    assert_eq!(
        blocked.to_string(),
        "cannot uninstall: kubeconfig Secret \"ns/kc\" does not exist"
    );
    assert_eq!(
        Problem::Invalid("x".into()).reason(),
        Reason::ValidationFailed
    );
    assert_eq!(
        Problem::HelmUnavailable("x".into()).reason(),
        Reason::HelmUnavailable
    );
}
