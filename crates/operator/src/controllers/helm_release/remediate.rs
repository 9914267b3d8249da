//! Remediation of a failed install or upgrade under `spec.install.remediation` or
//! `spec.upgrade.remediation`: the failure is counted against the budget and, when the budget
//! says so, undone in the same pass (a failed install uninstalled; a failed upgrade rolled back
//! to the last deployed revision, or uninstalled), with a Warning Event. The next attempt
//! follows after the backoff; a spent budget stops the release at `RetriesExhausted`.

use kube::runtime::events::EventType;

use super::budget::{self, Spent};
use super::outcome::{After, HelmFailure};
use super::recover::{Recovery, recovery};
use crate::api::helm_policies::RemediationStrategy;
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::shared::context::Context;
use crate::domain::helm::args::InstallVerb;
use crate::domain::helm::{HelmStatus, ReleaseInfo, ReleaseRequest, ReleaseSession};

/// The install or upgrade a failure of that kind was, where it left the release, and whether
/// Helm undid it itself (`atomic`: the failed install is gone, the failed upgrade rolled back).
fn attempt_of(failure: &HelmFailure) -> Option<(InstallVerb, After, bool)> {
    match failure {
        HelmFailure::RunFailed { verb, after, .. } => {
            let undone = match after {
                After::Gone => true,
                After::Release(info) => info.status == HelmStatus::Deployed,
                After::Unknown => false,
            };
            Some((*verb, after.clone(), undone))
        }
        HelmFailure::NotDeployed { verb, info, .. }
        | HelmFailure::TestFailed { verb, info, .. } => {
            Some((*verb, After::Release(info.clone()), false))
        }
        _ => None,
    }
}

/// How a counted failure is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remedy {
    /// Nothing is left to undo: Helm's `atomic` did it.
    Nothing,
    /// `helm uninstall`.
    Uninstall,
    /// `helm rollback` to the last deployed revision before the failed one.
    Rollback,
}

/// Pure: the remedy for a failed `verb` (`undone` by Helm already or not) under `strategy`.
pub(crate) fn remedy(verb: InstallVerb, undone: bool, strategy: RemediationStrategy) -> Remedy {
    match (verb, strategy) {
        _ if undone => Remedy::Nothing,
        (InstallVerb::Install, _) | (InstallVerb::Upgrade, RemediationStrategy::Uninstall) => {
            Remedy::Uninstall
        }
        (InstallVerb::Upgrade, RemediationStrategy::Rollback) => Remedy::Rollback,
    }
}

/// `failure` counted against `r`'s budget and remediated when the budget says so; `failure`
/// itself when no policy counts it (or it is no failed attempt).
pub(crate) async fn remediate(
    ctx: &Context,
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    session: &ReleaseSession,
    failure: HelmFailure,
) -> HelmFailure {
    let Some((verb, after, undone)) = attempt_of(&failure) else {
        return failure;
    };
    let Some(spent) = budget::spend(r, &req.digest, verb) else {
        return failure;
    };
    if !spent.remediates() {
        return HelmFailure::AttemptFailed {
            cause: Box::new(failure),
            spent,
            remedied: None,
            after,
        };
    }
    let (remedied, after) = match remedy(verb, undone, spent.policy.strategy) {
        Remedy::Nothing => (None, after),
        Remedy::Uninstall => undo(session, req, Undo::Uninstall).await,
        Remedy::Rollback => match &after {
            After::Release(info) => rollback(session, req, info).await,
            _ => (
                Some("not rolled back: the failed release could not be read".to_string()),
                after,
            ),
        },
    };
    if let Some(done) = &remedied {
        announce(ctx, r, &req.release_name, verb, &spent, done).await;
    }
    HelmFailure::AttemptFailed {
        cause: Box::new(failure),
        spent,
        remedied,
        after,
    }
}

/// What an undo runs.
enum Undo {
    Uninstall,
    Rollback(i64),
}

/// Rolls the failed revision `info` back to the newest earlier revision that was deployed.
async fn rollback(
    session: &ReleaseSession,
    req: &ReleaseRequest,
    info: &ReleaseInfo,
) -> (Option<String>, After) {
    let history = match session.history(req).await {
        Ok(h) => h,
        Err(err) => {
            let read = After::Release(info.clone());
            return (
                Some(format!("remediation failed: read history: {err}")),
                read,
            );
        }
    };
    match recovery(info, &history) {
        Recovery::Rollback(revision) => undo(session, req, Undo::Rollback(revision)).await,
        Recovery::Uninstall => undo(session, req, Undo::Uninstall).await,
        Recovery::Impossible => (
            Some("no earlier revision to roll back to".to_string()),
            After::Release(info.clone()),
        ),
    }
}

/// Runs `undo` and reads where the release landed.
async fn undo(
    session: &ReleaseSession,
    req: &ReleaseRequest,
    undo: Undo,
) -> (Option<String>, After) {
    let (result, done) = match undo {
        Undo::Uninstall => (
            session.uninstall(req).await.map(|_| ()),
            "uninstalled it".to_string(),
        ),
        Undo::Rollback(revision) => (
            session.rollback(req, revision).await,
            format!("rolled it back to revision {revision}"),
        ),
    };
    let after = match session.status(req).await {
        Ok(Some(info)) => After::Release(info),
        Ok(None) => After::Gone,
        Err(_) => After::Unknown,
    };
    match result {
        Ok(()) => (Some(done), after),
        Err(err) => (Some(format!("remediation failed: {err}")), after),
    }
}

/// The Warning Event of a remediation.
async fn announce(
    ctx: &Context,
    r: &OmniHelmRelease,
    name: &str,
    verb: InstallVerb,
    spent: &Spent,
    done: &str,
) {
    ctx.event(
        r,
        EventType::Warning,
        Reason::Remediated,
        format!(
            "Helm {} of release {name:?} failed; {done} ({})",
            verb.as_str(),
            spent.text()
        ),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::info;

    #[test]
    fn each_failure_has_its_remedy() {
        use RemediationStrategy::{Rollback, Uninstall};
        let cases = [
            (InstallVerb::Install, false, Rollback, Remedy::Uninstall),
            (InstallVerb::Install, true, Rollback, Remedy::Nothing),
            (InstallVerb::Upgrade, false, Rollback, Remedy::Rollback),
            (InstallVerb::Upgrade, false, Uninstall, Remedy::Uninstall),
            (InstallVerb::Upgrade, true, Rollback, Remedy::Nothing),
            (InstallVerb::Upgrade, true, Uninstall, Remedy::Nothing),
        ];
        for (verb, undone, strategy, expected) in cases {
            assert_eq!(
                remedy(verb, undone, strategy),
                expected,
                "{verb:?} {undone} {strategy:?}"
            );
        }
    }

    #[test]
    fn helm_undid_only_an_atomic_run_that_left_a_deployed_revision_or_nothing() {
        let run = |after| HelmFailure::RunFailed {
            verb: InstallVerb::Upgrade,
            message: "boom".into(),
            after,
        };
        let undone = |f: &HelmFailure| attempt_of(f).map(|(_, _, u)| u);
        assert_eq!(undone(&run(After::Gone)), Some(true));
        assert_eq!(
            undone(&run(After::Release(info("deployed", 4)))),
            Some(true)
        );
        assert_eq!(undone(&run(After::Release(info("failed", 4)))), Some(false));
        assert_eq!(undone(&run(After::Unknown)), Some(false));
        let tested = HelmFailure::TestFailed {
            verb: InstallVerb::Upgrade,
            info: info("deployed", 4),
            tests: crate::domain::helm::TestRun {
                failure: Some("x".into()),
                hooks: Vec::new(),
            },
            message: "x".into(),
        };
        assert_eq!(
            undone(&tested),
            Some(false),
            "a deployed revision whose tests failed"
        );
        assert_eq!(undone(&HelmFailure::Helm("x".into())), None);
    }
}
