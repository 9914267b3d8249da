//! The recovery of a release stuck in `pending-*`: roll back to the last good revision, or
//! uninstall an unfinished install (it is installed again in the same pass).

use kube::runtime::events::EventType;

use super::outcome::{HelmFailure, StuckBecause};
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::shared::context::Context;
use crate::domain::helm::{HelmStatus, HistoryEntry, ReleaseInfo, ReleaseRequest, ReleaseSession};

/// How a stuck release is recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// Roll back to this earlier revision (pending upgrade or rollback).
    Rollback(i64),
    /// Remove the half-installed release (pending install); it is installed again afterwards.
    Uninstall,
    /// No earlier revision to return to; a person has to decide.
    Impossible,
}

/// Pure choice of the recovery for a stuck release: a pending install is uninstalled; a pending
/// upgrade or rollback goes back to the newest earlier revision that was deployed (or, failing
/// that, the newest earlier one that is not itself pending).
pub(crate) fn recovery(info: &ReleaseInfo, history: &[HistoryEntry]) -> Recovery {
    if info.status == HelmStatus::PendingInstall {
        return Recovery::Uninstall;
    }
    let earlier = || {
        history
            .iter()
            .filter(|h| h.revision < info.revision && !h.status.is_pending())
    };
    earlier()
        .filter(|h| matches!(h.status, HelmStatus::Deployed | HelmStatus::Superseded))
        .map(|h| h.revision)
        .max()
        .or_else(|| earlier().map(|h| h.revision).max())
        .map_or(Recovery::Impossible, Recovery::Rollback)
}

/// Recovers the `pending-*` release `info` of `req`. `Ok`: recovered (a Warning Event says
/// how), the pass goes on with a fresh look; `Err`: the pass ends with it. `abandoned` when an
/// earlier operator process left the revision, rather than it outliving its timeout.
pub(crate) async fn recover(
    ctx: &Context,
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    session: &ReleaseSession,
    info: &ReleaseInfo,
    abandoned: bool,
) -> Result<(), HelmFailure> {
    let name = &req.release_name;
    let history = session.history(req).await.map_err(|err| {
        HelmFailure::Helm(format!("read Helm release history of {name:?}: {err}"))
    })?;
    let (result, done) = match recovery(info, &history) {
        Recovery::Impossible => {
            return Err(HelmFailure::Stuck {
                name: name.clone(),
                release: info.clone(),
                timeout: r.spec.timeout.to_string(),
                because: StuckBecause::NoEarlierRevision,
            });
        }
        Recovery::Rollback(revision) => (
            session.rollback(req, revision).await,
            format!("rolled it back to revision {revision}"),
        ),
        Recovery::Uninstall => (
            session.uninstall(req).await.map(|_| ()),
            "uninstalled the unfinished install".to_string(),
        ),
    };
    if let Err(err) = result {
        return Err(HelmFailure::Helm(format!(
            "recover stuck Helm release {name:?}: {err}"
        )));
    }
    let since = info.last_deployed.as_deref().unwrap_or("an unknown time");
    let why = if abandoned {
        "left by an earlier operator process that ended while Helm ran".to_string()
    } else {
        format!("longer than its timeout {}", r.spec.timeout)
    };
    ctx.event(
        r,
        EventType::Warning,
        Reason::StuckReleaseRecovered,
        format!(
            "Helm release {name:?} is {} at revision {} since {since}, {why}; {done}",
            info.status, info.revision
        ),
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::info;

    fn entry(revision: i64, status: &str) -> HistoryEntry {
        HistoryEntry {
            revision,
            status: HelmStatus::parse(status),
            chart: "app-1.0.0".into(),
            description: String::new(),
        }
    }

    #[test]
    fn recovery_rolls_back_to_the_last_good_revision_or_uninstalls_an_install() {
        let history = [
            entry(1, "superseded"),
            entry(2, "deployed"),
            entry(3, "failed"),
            entry(4, "pending-upgrade"),
        ];
        assert_eq!(
            recovery(&info("pending-upgrade", 4), &history),
            Recovery::Rollback(2)
        );
        assert_eq!(
            recovery(&info("pending-rollback", 4), &history[..]),
            Recovery::Rollback(2)
        );
        let only_failed = [entry(1, "failed"), entry(2, "pending-upgrade")];
        assert_eq!(
            recovery(&info("pending-upgrade", 2), &only_failed),
            Recovery::Rollback(1)
        );
        assert_eq!(
            recovery(&info("pending-upgrade", 1), &[entry(1, "pending-upgrade")]),
            Recovery::Impossible
        );
        assert_eq!(
            recovery(&info("pending-install", 1), &[entry(1, "pending-install")]),
            Recovery::Uninstall
        );
    }
}
