//! What `helm install` and `helm upgrade` share: the drift and adoption Events, the run marks
//! on the new revision, and reading where the release landed when Helm failed.

use kube::runtime::events::EventType;

use super::inputs::Problem;
use super::outcome::{After, Done, HelmFailure, action_name};
use super::ownership::run_labels;
use super::state::HelmState;
use crate::api::keys::ADOPT_ANNOTATION;
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::shared::context::Context;
use crate::domain::helm::args::InstallVerb;
use crate::domain::helm::source::{Fetch, Fetched};
use crate::domain::helm::{
    ChartSource, HelmError, HelmStatus, ReleaseInfo, ReleaseRequest, ReleaseSession,
    RepositoryAuth, Revision,
};

/// A Helm run about to install or upgrade the release, with what the pass knows about it.
pub(crate) struct HelmRun<'a> {
    pub(crate) ctx: &'a Context,
    /// The controller's configuration: the chart source policy and time bounds.
    pub(crate) state: &'a HelmState,
    pub(crate) r: &'a OmniHelmRelease,
    /// The release as this pass resolved it.
    pub(crate) req: &'a ReleaseRequest,
    pub(crate) session: &'a ReleaseSession,
    pub(crate) auth: &'a RepositoryAuth,
    /// Helm's view of the release before the run.
    pub(crate) current: Option<&'a ReleaseInfo>,
    /// Someone else's release, taken over on the user's request.
    pub(crate) adopting: bool,
    /// The inputs were applied before, so the release changed out of band.
    pub(crate) drift: bool,
}

impl HelmRun<'_> {
    /// The chart of the request, fetched and verified into the session's directory under the
    /// deployment's chart source policy ([`crate::domain::helm::source`]).
    async fn fetch_chart(&self) -> Result<Fetched, Problem> {
        chart_fetch(self.state, self.r, self.req, self.auth)
            .run(self.session.dir())
            .await
            .map_err(Problem::from)
    }
}

/// The fetch of `req`'s chart (at `req`'s version) with `auth`, under the deployment's chart
/// source policy and time bounds.
pub(crate) fn chart_fetch<'a>(
    state: &'a HelmState,
    r: &'a OmniHelmRelease,
    req: &'a ReleaseRequest,
    auth: &'a RepositoryAuth,
) -> Fetch<'a> {
    let (repository, chart) = match &req.chart {
        ChartSource::Repository { url, chart } => (url.as_str(), chart.as_str()),
        ChartSource::Oci { reference } => ("", reference.as_str()),
    };
    Fetch {
        repository,
        chart,
        version: &req.chart_version,
        insecure: r.spec.chart.insecure,
        auth,
        policy: &state.chart_sources,
        roots: &state.roots,
        limits: state.limits,
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
    /// Runs `verb` (over kept history when `replace`); `undone` tells whether Helm undid a
    /// failure itself.
    pub(crate) async fn run(
        &self,
        verb: InstallVerb,
        replace: bool,
        undone: UndoneBy,
    ) -> Result<Done, HelmFailure> {
        let (ctx, r, req) = (self.ctx, self.r, self.req);
        let name = &req.release_name;
        // The chart first: helm gets an archive the operator fetched and verified, or nothing.
        let chart = self.fetch_chart().await.map_err(HelmFailure::Blocked)?;
        tracing::debug!(release = %name, digest = %chart.digest, "chart fetched and verified");
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
        let revision = Revision {
            labels: run_labels(self.session.run_id(), next_revision),
            replace,
        };
        match self
            .session
            .install_or_upgrade(verb, req, &revision, &chart.path)
            .await
        {
            Ok(info) => {
                if self.adopting {
                    ctx.event(
                        r,
                        EventType::Normal,
                        Reason::Adopted,
                        format!(
                            "adopted Helm release {name:?} in namespace {:?} ({ADOPT_ANNOTATION})",
                            req.namespace
                        ),
                    )
                    .await;
                }
                if info.status == HelmStatus::Deployed {
                    let tests = super::test_hooks::after(r, req, self.session, verb, &info).await?;
                    Ok(Done::Deployed {
                        verb,
                        info,
                        digest: req.digest.clone(),
                        tests,
                    })
                } else {
                    Err(HelmFailure::NotDeployed {
                        verb,
                        name: name.clone(),
                        info,
                    })
                }
            }
            Err(err) => {
                let message = helm_failure(action_name(verb), name, &err);
                let after = match self.session.status(req).await {
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
                Err(HelmFailure::RunFailed {
                    verb,
                    message,
                    after,
                })
            }
        }
    }
}
