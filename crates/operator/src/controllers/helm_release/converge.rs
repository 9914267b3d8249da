//! One pass over a valid OmniHelmRelease that is not being deleted: its inputs, then the
//! release (look → state → action), ending in one `Outcome`.

use kube::ResourceExt;

use super::apply::{HelmRun, chart_fetch};
use super::decide::{NextAction, next_action};
use super::inputs::{self, Kubeconfig, Problem};
use super::outcome::{Done, Found, HelmFailure, Inputs, Outcome, StuckBecause};
use super::ownership::{self, Starter};
use super::release::{Observation, determine};
use super::state::HelmState;
use super::{budget, drift, gates, install, recover, remediate, upgrade, values_from};
use crate::api::keys::force_requested;
use crate::api::{OmniCluster, OmniHelmRelease};
use crate::controllers::cluster::dependants::start_gate;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::PassError;
use crate::controllers::shared::pipeline::unless_deleted_meanwhile;
use crate::domain::helm::source::index::is_exact;
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
        return unless_deleted_meanwhile(ctx, r, Outcome::new(Found::cluster(false), Err(missing)))
            .await;
    };
    let attached = |result| Outcome::new(Found::cluster(true), result);
    // Suspended first: no gate is looked at, nothing runs.
    if r.spec.suspend {
        return Ok(attached(Ok(Done::Suspended)));
    }
    // Before its first install, a release waits for its cluster (`spec.startWhen`).
    let installed = r
        .status
        .as_ref()
        .is_some_and(|s| s.release_revision.is_some() || s.last_applied_digest.is_some());
    if let Some(why) = start_gate(&cluster, r.spec.start_when, installed) {
        let waiting = attached(Err(HelmFailure::ClusterNotReady(why)));
        return unless_deleted_meanwhile(ctx, r, waiting).await;
    }
    // The gates of every install or upgrade, before any input is read or Helm runs.
    if let Some(waiting) = shut_gate(state, r, &namespace, &cluster) {
        return unless_deleted_meanwhile(ctx, r, attached(Err(waiting))).await;
    }
    let blocked = |problem| attached(Err(HelmFailure::Blocked(problem)));
    let auth = match inputs::repository_auth(ctx, state, r).await? {
        Ok(a) => a,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, blocked(problem)).await,
    };
    // The values of this pass, from spec.chart.valuesFrom and spec.chart.values; a changed
    // source is a change of the inputs.
    let values = match values_from::chart_values(ctx, state, r).await? {
        Ok(v) => v,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, blocked(problem)).await,
    };
    // A range in spec.chart.version names the version it admits now: a newly published one is
    // a change of the inputs.
    let req = match resolve(state, r, &auth, values).await {
        Ok(req) => req,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, blocked(problem)).await,
    };
    let attached = |result| Outcome {
        found: Found {
            cluster: Some(true),
            inputs: Some(Inputs::of(&req)),
        },
        result,
    };
    if let Some(spent) = spent_budget(r, &req) {
        return unless_deleted_meanwhile(ctx, r, attached(Err(spent))).await;
    }
    let blocked = |problem| attached(Err(HelmFailure::Blocked(problem)));
    let kubeconfig = match inputs::kubeconfig(ctx, state, r).await? {
        Ok(k) => k,
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
        kubeconfig: &kubeconfig,
    };
    let result = release.converge(ctx, state).await;
    Ok(attached(result))
}

/// The release request of this pass: at the spec's version when it is exact (nothing is
/// fetched), else at the newest version the range admits in the repository's index or the
/// registry's tags, read as an install would read them (same policy, credentials and bounds).
async fn resolve(
    state: &HelmState,
    r: &OmniHelmRelease,
    auth: &RepositoryAuth,
    values: serde_json::Value,
) -> Result<ReleaseRequest, Problem> {
    let spec_version = r.spec.chart.version.trim();
    let spec_req = inputs::request_at(r, spec_version, values);
    if is_exact(&spec_req.chart_version) {
        return Ok(spec_req);
    }
    let version = chart_fetch(state, r, &spec_req, auth).resolve().await?;
    Ok(inputs::request_at(r, &version, spec_req.values))
}

/// Pure: the gate that stops the pass before any input is read: a dependency that is not
/// Ready, or a cluster that is not as healthy as asked.
fn shut_gate(
    state: &HelmState,
    r: &OmniHelmRelease,
    namespace: &str,
    cluster: &OmniCluster,
) -> Option<HelmFailure> {
    if let Some(shut) = gates::dependencies(r, |name| state.release(namespace, name)) {
        return Some(shut);
    }
    gates::cluster_health(r, cluster)
}

/// Pure: a spent retry budget for the inputs of `req`, which stops the pass before Helm runs
/// (a force request still gets its one attempt).
fn spent_budget(r: &OmniHelmRelease, req: &ReleaseRequest) -> Option<HelmFailure> {
    let forced = force_requested(r).is_some();
    let spent = budget::exhausted(r, &req.digest).filter(|_| !forced)?;
    let stored = r.status.as_ref().and_then(|s| s.last_error.clone());
    Some(HelmFailure::Exhausted {
        spent,
        message: stored.unwrap_or_else(|| spent.text()),
    })
}

/// The release of one pass, with what acting on it takes.
struct Release<'a> {
    r: &'a OmniHelmRelease,
    req: &'a ReleaseRequest,
    session: &'a ReleaseSession,
    auth: &'a RepositoryAuth,
    /// The kubeconfig as read and checked in this pass (the drift check's client).
    kubeconfig: &'a Kubeconfig,
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
                NextAction::Nothing => self.in_sync(ctx, state, look.release).await,
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
                    let result = install::install(&run(adopting, drift)).await;
                    self.remediated(ctx, result).await
                }
                NextAction::Upgrade { adopting, drift } => {
                    let result = upgrade::upgrade(&run(adopting, drift)).await;
                    self.remediated(ctx, result).await
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

    /// A release as last applied: with drift detection on, its live objects are compared
    /// (and put back in `Enabled` mode).
    async fn in_sync(
        &self,
        ctx: &Context,
        state: &HelmState,
        release: Option<ReleaseInfo>,
    ) -> Result<Done, HelmFailure> {
        match (drift::mode(self.r), release) {
            (Some(mode), Some(release)) => {
                let found = drift::check(
                    ctx,
                    state,
                    self.r,
                    self.req,
                    self.session,
                    self.kubeconfig,
                    mode,
                )
                .await?;
                Ok(Done::Checked {
                    release,
                    drift: found,
                })
            }
            (_, release) => Ok(Done::InSync(release)),
        }
    }

    /// `result` of an install or upgrade, its failure counted and remediated under the
    /// release's remediation policy.
    async fn remediated(
        &self,
        ctx: &Context,
        result: Result<Done, HelmFailure>,
    ) -> Result<Done, HelmFailure> {
        match result {
            Err(failure) => {
                Err(remediate::remediate(ctx, self.r, self.req, self.session, failure).await)
            }
            ok => ok,
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
