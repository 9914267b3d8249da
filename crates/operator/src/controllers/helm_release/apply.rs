//! What `helm install` and `helm upgrade` share: the drift and adoption Events, the run marks
//! on the new revision, and reading where the release landed when Helm failed.

use kube::runtime::events::EventType;

use super::outcome::{After, Applied, Outcome, action_name};
use super::ownership::run_labels;
use crate::api::OmniHelmRelease;
use crate::api::Reason;
use crate::api::keys::ADOPT_ANNOTATION;
use crate::controllers::Context;
use crate::helm::args::InstallVerb;
use crate::helm::{HelmError, ReleaseInfo, ReleaseRequest, ReleaseSession, RepositoryAuth};

/// A Helm run about to install or upgrade the release, with what the pass knows about it.
pub(crate) struct HelmRun<'a> {
    pub ctx: &'a Context,
    pub r: &'a OmniHelmRelease,
    pub session: &'a ReleaseSession,
    pub auth: &'a RepositoryAuth,
    /// Helm's view of the release before the run.
    pub current: Option<&'a ReleaseInfo>,
    /// Someone else's release, taken over on the user's request.
    pub adopting: bool,
    /// The inputs were applied before, so the release changed out of band.
    pub drift: bool,
}

/// Names what `atomic` undid after a failed run, judged from where the release landed.
pub(crate) type UndoneBy = fn(&OmniHelmRelease, &After) -> Option<String>;

/// "Helm <action> failed for release …", with Helm's error summary.
pub(crate) fn helm_failure(action: &str, name: &str, err: &HelmError) -> String {
    format!(
        "Helm {} failed for release {name:?}: {}",
        action.to_lowercase(),
        err.detail()
    )
}

impl HelmRun<'_> {
    /// Runs `verb` with `req`; `undone` tells whether Helm undid a failure itself.
    pub(crate) async fn run(
        &self,
        verb: InstallVerb,
        mut req: ReleaseRequest,
        undone: UndoneBy,
    ) -> Outcome {
        let (ctx, r) = (self.ctx, self.r);
        let name = r.effective_release_name();
        if self.drift {
            let seen = self.current.map_or_else(
                || "missing".to_string(),
                |c| format!("{} at revision {}", c.status, c.revision),
            );
            ctx.event(
                r,
                EventType::Warning,
                Reason::DriftDetected,
                format!("Helm release {name:?} drifted ({seen}); re-applying"),
            )
            .await;
        }
        // Mark the revision Helm is about to create (the next after the newest) as this
        // process's, so that a `pending-*` revision left by a kill is recognised and recovered
        // at once.
        let next_revision = self.current.map_or(1, |c| c.revision + 1);
        req.owner_labels
            .extend(run_labels(self.session.run_id(), next_revision));
        let applied = match self.session.install_or_upgrade(verb, &req, self.auth).await {
            Ok(info) => {
                if self.adopting {
                    ctx.event(
                        r,
                        EventType::Normal,
                        Reason::Adopted,
                        format!(
                            "adopted Helm release {name:?} in namespace {:?} ({ADOPT_ANNOTATION})",
                            r.spec.namespace
                        ),
                    )
                    .await;
                }
                if info.status == "deployed" {
                    Applied::Deployed(info)
                } else {
                    Applied::NotDeployed(info)
                }
            }
            Err(err) => {
                let message = helm_failure(action_name(verb), &name, &err);
                let after = match self.session.status(&name, &r.spec.namespace).await {
                    Ok(Some(info)) => After::Release(info),
                    Ok(None) => After::Gone,
                    Err(_) => After::Unknown,
                };
                if let Some(undone) = undone(r, &after) {
                    ctx.event(
                        r,
                        EventType::Warning,
                        Reason::RolledBack,
                        format!("{message}; {undone}"),
                    )
                    .await;
                }
                Applied::Failed { message, after }
            }
        };
        Outcome::Ran { verb, applied }
    }
}
