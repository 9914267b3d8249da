//! One pass over a valid OmniHelmRelease that is not being deleted: its inputs, then the
//! release (look → state → action), ending in one `Outcome`.

use kube::ResourceExt;

use super::apply::HelmRun;
use super::decide::{NextAction, next_action};
use super::inputs::{self, Problem};
use super::outcome::{Done, HelmFailure, Outcome, StuckBecause};
use super::ownership::{self, Starter};
use super::release::{Observation, determine};
use super::state::HelmState;
use super::{install, recover, upgrade};
use crate::api::{OmniCluster, OmniHelmRelease};
use crate::controllers::cluster::dependants::start_gate;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::PassError;
use crate::controllers::shared::pipeline::unless_deleted_meanwhile;
use crate::domain::helm::{ReleaseInfo, ReleaseRequest, ReleaseSession, RepositoryAuth};

/// The pass of an object that is not being deleted: its inputs, then the release.
pub(super) async fn attached(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
) -> Result<Outcome, PassError<OmniHelmRelease>> {
    let namespace = r.namespace().unwrap_or_default();
    let cluster = ctx
        .api::<OmniCluster>(&namespace)
        .get_opt(&r.spec.cluster_ref.name)
        .await?;
    let Some(cluster) = cluster else {
        let missing = HelmFailure::MissingCluster {
            cluster: r.spec.cluster_ref.name.clone(),
        };
        return unless_deleted_meanwhile(ctx, r, Outcome::new(Some(false), Err(missing))).await;
    };
    let attached = |result| Outcome::new(Some(true), result);
    if r.spec.suspend {
        return Ok(attached(Ok(Done::Suspended)));
    }
    // Before its first install, a release waits for its cluster (`spec.startWhen`).
    let installed = r
        .status
        .as_ref()
        .is_some_and(|s| s.release_revision.is_some() || s.last_applied_digest.is_some());
    if let Some(why) = start_gate(&cluster, r.spec.start_when, installed) {
        return Ok(attached(Err(HelmFailure::ClusterNotReady(why))));
    }
    let blocked = |problem| attached(Err(HelmFailure::Blocked(problem)));
    let kubeconfig = match inputs::kubeconfig(ctx, state, r).await? {
        Ok(k) => k,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, blocked(problem)).await,
    };
    let auth = match inputs::repository_auth(ctx, state, r).await? {
        Ok(a) => a,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, blocked(problem)).await,
    };
    let Some(helm) = &state.helm else {
        return Ok(blocked(Problem::HelmUnavailable(
            "no usable helm binary; set --helm-binary (or HELM_BINARY) to helm 3.13 or newer"
                .to_string(),
        )));
    };
    if let Err(problem) = inputs::reachable(state, r, &kubeconfig).await {
        return Ok(blocked(problem));
    }
    let req = inputs::request(r);
    let session = match helm.session(&req.lock_key, &kubeconfig.checked).await {
        Ok(s) => s,
        Err(err) => {
            return Ok(attached(Err(HelmFailure::Helm(format!(
                "cannot start Helm for release {:?}: {err}",
                req.release_name
            )))));
        }
    };
    let release = Release {
        r,
        req: &req,
        session: &session,
        auth: &auth,
    };
    Ok(attached(release.converge(ctx, state).await))
}

/// The release of one pass, with what acting on it takes.
struct Release<'a> {
    r: &'a OmniHelmRelease,
    req: &'a ReleaseRequest,
    session: &'a ReleaseSession,
    auth: &'a RepositoryAuth,
}

impl Release<'_> {
    /// Looks at the release, then takes the next action. Only a recovery is followed by
    /// another look and action in the same pass (the install or upgrade it makes way for); the
    /// state after a recovery is never pending, so a pass makes at most one recovery and one
    /// install or upgrade.
    async fn converge(&self, ctx: &Context, state: &HelmState) -> Result<Done, HelmFailure> {
        let (r, req) = (self.r, self.req);
        let now = ctx.clock.now();
        let mut look = self.observe().await?;
        loop {
            let run = |adopting, drift| HelmRun {
                ctx,
                state,
                r,
                req,
                session: self.session,
                auth: self.auth,
                current: look.release.as_ref(),
                adopting,
                drift,
            };
            let state_now = determine(r, req, &look, now, state.upgrade_every_trigger);
            return match next_action(&state_now) {
                NextAction::Nothing => Ok(Done::InSync(look.release)),
                NextAction::Refuse(owner) => Err(HelmFailure::Refused {
                    name: req.release_name.clone(),
                    namespace: req.namespace.clone(),
                    owner,
                }),
                NextAction::Wait { release, after } => Err(HelmFailure::Locked {
                    name: req.release_name.clone(),
                    release,
                    timeout: r.spec.timeout.to_string(),
                    retry_after: after,
                }),
                NextAction::ReportStuck(release) => Err(HelmFailure::Stuck {
                    name: req.release_name.clone(),
                    release,
                    timeout: r.spec.timeout.to_string(),
                    because: StuckBecause::RecoveryNotAllowed,
                }),
                NextAction::Install { adopting, drift } => {
                    install::install(&run(adopting, drift)).await
                }
                NextAction::Upgrade { adopting, drift } => {
                    upgrade::upgrade(&run(adopting, drift)).await
                }
                NextAction::Recover { release, abandoned } => {
                    recover::recover(ctx, r, req, self.session, &release, abandoned).await?;
                    look = Observation {
                        release: self.read().await?,
                        recovered: true,
                        ..look
                    };
                    continue;
                }
            };
        }
    }

    /// One look at the release: Helm's view, and (for a release that exists) its labels,
    /// which decide the claim on it.
    async fn observe(&self) -> Result<Observation, HelmFailure> {
        let release = self.read().await?;
        let claim = match &release {
            None => ownership::Claim::Ours(Starter::Unknown),
            Some(info) => {
                let labels = self
                    .session
                    .labels(self.req)
                    .await
                    .map_err(|err| {
                        HelmFailure::Helm(format!(
                            "read labels of Helm release {:?}: {err}",
                            self.req.release_name
                        ))
                    })?
                    .unwrap_or_default();
                ownership::claim(self.r, self.req, &labels, info, self.session.run_id())
            }
        };
        Ok(Observation {
            release,
            claim,
            recovered: false,
        })
    }

    /// Helm's view of the release (`helm status`).
    async fn read(&self) -> Result<Option<ReleaseInfo>, HelmFailure> {
        self.session.status(self.req).await.map_err(|err| {
            HelmFailure::Helm(format!(
                "read Helm release {:?}: {err}",
                self.req.release_name
            ))
        })
    }
}
