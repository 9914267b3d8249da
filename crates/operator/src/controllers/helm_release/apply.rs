//! What `helm install` and `helm upgrade` share: the drift and adoption Events, the run marks
//! on the new revision, and reading where the release landed when Helm failed.

use kube::runtime::events::EventType;

use super::inputs::Problem;
use super::outcome::{After, Applied, Outcome, action_name};
use super::ownership::run_labels;
use super::{REASON_ADOPTED, REASON_DRIFT, REASON_ROLLED_BACK};
use crate::api::OmniHelmRelease;
use crate::controllers::Context;
use crate::controllers::secret_sync::ADOPT_ANNOTATION;
use crate::helm::args::InstallVerb;
use crate::helm::source::{Fetch, Fetched};
use crate::helm::{
    ChartSource, HelmError, ReleaseInfo, ReleaseRequest, ReleaseSession, RepositoryAuth,
};

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

impl HelmRun<'_> {
    /// The chart of `req`, fetched and verified into the session's directory under the
    /// deployment's chart source policy ([`crate::helm::source`]).
    async fn fetch_chart(&self, req: &ReleaseRequest) -> Result<Fetched, Problem> {
        let (repository, chart) = match &req.chart {
            ChartSource::Repository { url, chart } => (url.as_str(), chart.as_str()),
            ChartSource::Oci { reference } => ("", reference.as_str()),
        };
        let tenancy = &self.ctx.tenancy;
        Fetch {
            repository,
            chart,
            version: &req.chart_version,
            insecure: self.r.spec.chart.insecure,
            auth: self.auth,
            policy: &tenancy.chart_sources,
            limits: tenancy.timeouts.outbound(),
        }
        .run(self.session.dir())
        .await
        .map_err(Problem::from)
    }
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
        // The chart first: helm gets an archive the operator fetched and verified, or nothing.
        let chart = match self.fetch_chart(&req).await {
            Ok(chart) => chart,
            Err(problem) => return Outcome::Blocked(problem),
        };
        tracing::debug!(release = %name, digest = %chart.digest, "chart fetched and verified");
        if self.drift {
            let seen = self.current.map_or_else(
                || "missing".to_string(),
                |c| format!("{} at revision {}", c.status, c.revision),
            );
            ctx.event(
                r,
                EventType::Warning,
                REASON_DRIFT,
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
        let applied = match self
            .session
            .install_or_upgrade(verb, &req, &chart.path)
            .await
        {
            Ok(info) => {
                if self.adopting {
                    ctx.event(
                        r,
                        EventType::Normal,
                        REASON_ADOPTED,
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
                        REASON_ROLLED_BACK,
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
