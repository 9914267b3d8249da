//! Status and requeue decisions of `outcome.rs`, one scenario per test.

use super::*;
use crate::api::common::{ConditionStatus, find_condition};
use crate::api::keys;
use crate::controllers::helm_release::inputs::request;
use crate::controllers::helm_release::test_support::{at, info, release};
use crate::controllers::shared::error::Error;

/// The digest of `r`'s inputs, as its pass resolves them.
fn input_digest(r: &OmniHelmRelease) -> String {
    request(r).digest
}

/// A pass that found the cluster and ended with `result`.
fn attached(result: Result<Done, HelmFailure>) -> Outcome {
    Outcome::new(Found::cluster(true), result)
}

/// The next reconcile after `outcome` (drift checks at least 10 s apart, unspread); `Err`
/// hands a failure to the backoff.
fn next_reconcile(r: &OmniHelmRelease, outcome: Outcome) -> Result<Action, Error> {
    let floor = Duration::from_secs(10);
    match outcome.result {
        Ok(_) => Ok(recheck(r, floor, 1.0)),
        Err(failure) => retry_policy(r, &failure, floor, 1.0).after(failure),
    }
}

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
    let outcome = attached(Ok(Done::Deployed {
        verb: InstallVerb::Install,
        info: info("deployed", 1),
        digest: input_digest(&r),
        tests: None,
    }));
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
        next_reconcile(&r, outcome).ok(),
        Some(Action::requeue(Duration::from_secs(300)))
    );
}

#[test]
fn an_unchanged_release_is_described_by_its_last_recorded_action() {
    let r = applied();
    let s = desired_status(
        &r,
        &attached(Ok(Done::InSync(Some(info("deployed", 2))))),
        now(),
    );
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
    let outcome = attached(Err(HelmFailure::Refused {
        name: "app".into(),
        namespace: "default".into(),
        owner: Ownership::OwnedByOther("OmniHelmRelease ns/b (uid u)".into()),
    }));
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
    assert!(next_reconcile(&r, outcome).is_ok());
}

#[test]
fn a_young_pending_release_is_reported_and_looked_at_after_its_timeout() {
    let r = applied();
    let pending = at("pending-upgrade", 3, Some("2026-11-23T01:59:00Z"));
    let outcome = attached(Err(HelmFailure::Locked {
        name: "app".into(),
        release: pending,
        timeout: r.spec.timeout.to_string(),
        retry_after: Duration::from_secs(245),
    }));
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.release_revision, Some(3));
    assert_eq!(s.release_status.as_deref(), Some("pending-upgrade"));
    let (_, reason, message) = condition(&s, ct::READY);
    assert_eq!(reason, Reason::ReleasePending);
    assert!(message.starts_with(r#"Helm release "app" is pending-upgrade at revision 3 since 2026-11-23T01:59:00Z; another Helm operation"#), "{message}");
    assert_eq!(
        next_reconcile(&r, outcome).ok(),
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
        let outcome = attached(Err(HelmFailure::Stuck {
            name: "app".into(),
            release: info("pending-upgrade", 1),
            timeout: r.spec.timeout.to_string(),
            because,
        }));
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
            next_reconcile(&r, outcome).ok(),
            Some(Action::requeue(RETRY))
        );
    }
}

#[test]
fn a_failed_install_that_helm_removed_forgets_the_revision_and_fails_the_reconcile() {
    let r = applied();
    let outcome = attached(Err(HelmFailure::RunFailed {
        verb: InstallVerb::Install,
        message: "Helm install failed for release \"app\": boom".into(),
        after: After::Gone,
    }));
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
    match next_reconcile(&r, outcome) {
        Err(Error::Failed(failure)) => {
            assert_eq!(failure.reason(), Reason::ReconcileFailed);
            assert_eq!(
                failure.to_string(),
                "Helm install failed for release \"app\": boom"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_upgrade_that_ended_in_another_status_is_recorded_but_not_counted_as_applied() {
    let mut r = applied();
    r.spec.chart.version = "2.0.0".into();
    let outcome = attached(Err(HelmFailure::NotDeployed {
        verb: InstallVerb::Upgrade,
        name: "app".into(),
        info: info("failed", 3),
    }));
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.release_revision, Some(3));
    assert_ne!(s.last_applied_digest, Some(input_digest(&r)));
    let message = r#"Helm upgrade of release "app" ended in status failed"#;
    assert_eq!(s.last_error.as_deref(), Some(message));
    assert!(matches!(
        next_reconcile(&r, outcome),
        Err(Error::Failed(f)) if f.to_string() == message
    ));
}

#[test]
fn acceptance_follows_the_cluster_and_is_left_alone_before_and_after_it() {
    let r = applied();
    let missing = HelmFailure::MissingCluster {
        cluster: "c".into(),
    };
    let s = desired_status(
        &r,
        &Outcome::new(Found::cluster(false), Err(missing)),
        now(),
    );
    assert_eq!(
        condition(&s, ct::ACCEPTED),
        (
            ConditionStatus::False,
            Reason::MissingCluster.to_string(),
            r#"OmniCluster "c" does not exist"#.to_string()
        )
    );
    for outcome in [
        Outcome::failed(HelmFailure::InvalidSpec("spec.timeout: bad".into())),
        Outcome::failed(HelmFailure::UninstallBlocked(Problem::MissingSecret(
            "gone".into(),
        ))),
        Outcome::failed(HelmFailure::UninstallFailed("helm uninstall failed".into())),
    ] {
        let s = desired_status(&r, &outcome, now());
        assert!(
            find_condition(&s.conditions, ct::ACCEPTED).is_none(),
            "{outcome:?}"
        );
        assert_eq!(condition(&s, ct::READY).0, ConditionStatus::False);
    }
    let blocked = attached(Err(HelmFailure::Blocked(Problem::MissingSecret(
        "no kubeconfig".into(),
    ))));
    let s = desired_status(&r, &blocked, now());
    assert_eq!(condition(&s, ct::ACCEPTED).0, ConditionStatus::True);
    assert_eq!(condition(&s, ct::READY).1, Reason::MissingSecret);
    // A kubeconfig an export is about to write: waiting, under its own reason.
    let pending = attached(Err(HelmFailure::Blocked(Problem::KubeconfigPending(
        "written by an export".into(),
    ))));
    let s = desired_status(&r, &pending, now());
    assert_eq!(condition(&s, ct::READY).1, Reason::KubeconfigPending);
    assert_eq!(condition(&s, ct::RECONCILING).0, ConditionStatus::True);
}

#[test]
fn a_failed_uninstall_is_recorded_as_the_last_action_and_retried_with_backoff() {
    let r = applied();
    let outcome = Outcome::failed(HelmFailure::UninstallFailed("Helm uninstall failed".into()));
    let s = desired_status(&r, &outcome, now());
    assert_eq!(s.last_action.as_deref(), Some("Uninstall"));
    assert!(next_reconcile(&r, outcome).is_err());
    let invalid = Outcome::failed(HelmFailure::InvalidSpec("spec.timeout: bad".into()));
    assert_eq!(
        next_reconcile(&r, invalid).ok(),
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

/// Issue 30's input problems under kstatus: a Secret the release's ServiceAccount may not read
/// needs RBAC or the spec changed (stalled, still looked at again: RBAC is not watched); a
/// chart source that failed and a server that did not answer in time are retried.
#[test]
fn a_denied_read_stalls_and_a_timeout_or_failed_fetch_is_retried() {
    let blocked = |p: Problem| HelmFailure::Blocked(p);
    let denied = blocked(Problem::AccessDenied("may not read".into()));
    assert_eq!(denied.reason(), Reason::AccessDenied);
    assert_eq!(denied.disposition(), Disposition::Stalled);
    assert_eq!(denied.retry(), RetryPolicy::Poll(RETRY));
    for (problem, reason) in [
        (Problem::TimedOut("no answer".into()), Reason::Timeout),
        (
            Problem::ChartUnavailable("unreachable".into()),
            Reason::ChartFetchFailed,
        ),
    ] {
        let failure = blocked(problem);
        assert_eq!(failure.reason(), reason);
        assert_eq!(failure.disposition(), Disposition::Retrying, "{reason:?}");
    }
}

/// A missing values source waits (Normal, `Reconciling`): its watch wakes the release when it
/// appears, and the drift check looks again in case the watch cannot see it; never the
/// backoff.
#[test]
fn a_missing_values_source_waits_for_its_watch_and_the_drift_check() {
    let missing = HelmFailure::Blocked(Problem::ValuesSourceMissing(
        "ConfigMap \"ns/values\" does not exist (spec.chart.valuesFrom[0])".into(),
    ));
    assert_eq!(missing.reason(), Reason::ValuesSourceMissing);
    assert_eq!(missing.disposition(), Disposition::Waiting);
    let mut r = applied();
    let floor = std::time::Duration::from_secs(10);
    assert_eq!(
        retry_policy(&r, &missing, floor, 1.0),
        RetryPolicy::Poll(std::time::Duration::from_secs(300))
    );
    r.spec.drift_check_interval = "0".into();
    assert_eq!(
        retry_policy(&r, &missing, floor, 1.0),
        RetryPolicy::AwaitChange
    );
}
