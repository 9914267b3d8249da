//! OmniHelmRelease: a Helm release in a workload cluster, driven through the helm CLI
//! ([`crate::helm`]) with the kubeconfig from an explicitly named Secret.
//!
//! Differences from the original (see `docs/helm.md`): Helm runs only when the input digest
//! (target, chart, version, values) changed or the release drifted (missing, failed, or changed
//! out of band), so a kubeconfig rotation alone creates no revision; a periodic drift check
//! repairs out-of-band changes; a failed upgrade that Helm rolled back (`atomic`) raises a
//! Warning Event; a release stuck in `pending-*` longer than its timeout is reported, and
//! recovered when `spec.recoverStuckRelease` allows it; repository credentials and a CA bundle
//! come from a Secret; a deletion whose kubeconfig Secret is gone reports why and how to finish
//! it instead of waiting silently.
//!
//! Shape (docs/architecture.md): a pass gathers its inputs (`inputs`), looks at the release
//! (`state::Observation`), determines its state (`state::determine`, pure), picks the next
//! action (`decide::next_action`, pure) and carries it out (`install.rs`, `upgrade.rs`,
//! `recover.rs`; a deletion in `uninstall.rs`). Every pass ends in one `outcome::Outcome`,
//! from which the status (`outcome::desired_status`, pure) is written once.

mod apply;
mod decide;
mod inputs;
mod install;
mod outcome;
mod ownership;
mod recover;
mod state;
mod uninstall;
mod upgrade;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use self::apply::HelmRun;
use self::decide::{NextAction, next_action};
pub(crate) use self::outcome::HelmFailure;
use self::outcome::{Outcome, StuckBecause, desired_status, next_reconcile};
pub(crate) use self::ownership::Starter;
pub use self::ownership::{Ownership, ownership};
pub use self::recover::recovery;
pub(crate) use self::state::Plan;
use self::state::{Observation, determine};
pub use self::state::{pending, plan};
use super::index::{RefKey, namespace_of};
use super::pipeline::{self, Cleanup, Pipeline, unless_deleted_meanwhile};
use super::{
    Cached, Context, Error, Shutdown, Watches, cluster_changes_of, drive, indexed_controller_for,
    touched,
};
use crate::api::common::{condition_types as ct, find_condition};
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::api::validation::Validation;
use crate::api::{OmniCluster, OmniHelmRelease};
use crate::helm::{ReleaseInfo, ReleaseSession, RepositoryAuth};

const KIND: &str = "OmniHelmRelease";

/// Re-check while a dependency (cluster, Secret, helm) is missing.
pub(crate) const RETRY: Duration = Duration::from_secs(60);
/// Reason while a `pending-*` release is younger than its timeout (another Helm run may own it).
pub(crate) const REASON_RELEASE_PENDING: &str = "ReleasePending";
/// Reason when a release has been `pending-*` for longer than its timeout.
pub(crate) const REASON_RELEASE_STUCK: &str = "ReleaseStuck";
/// Event reason when a stuck release was recovered (`spec.recoverStuckRelease`).
pub(crate) const REASON_STUCK_RECOVERED: &str = "StuckReleaseRecovered";
/// Reason when the operator has no usable helm binary.
pub(crate) const REASON_HELM_UNAVAILABLE: &str = "HelmUnavailable";
/// Event reason when Helm rolled a failed upgrade back (`atomic`).
pub(crate) const REASON_ROLLED_BACK: &str = "RolledBack";
/// Event reason when a deletion left a release alone because this object does not own it.
pub(crate) const REASON_UNINSTALL_SKIPPED: &str = "UninstallSkipped";
/// Event reason when an existing release was taken over on the user's request.
pub(crate) const REASON_ADOPTED: &str = "Adopted";
/// Event reason when a healthy-looking release drifted and is repaired.
pub(crate) const REASON_DRIFT: &str = "DriftDetected";

/// Release label (helm `--labels`, kept on helm's storage Secret) holding the UID of the
/// OmniHelmRelease that owns the release. UIDs are random per object and per management
/// cluster, so this names both the object and the management cluster it lives in.
pub(crate) const OWNER_UID_LABEL: &str = "omni.texashpc.com/owner-uid";
/// Release label with the owning OmniHelmRelease's namespace (for people; the UID decides).
pub(crate) const OWNER_NAMESPACE_LABEL: &str = "omni.texashpc.com/owner-namespace";
/// Release label with the owning OmniHelmRelease's name, when it fits a label value (63 chars).
pub(crate) const OWNER_NAME_LABEL: &str = "omni.texashpc.com/owner-name";

/// Release label naming the operator process that started the revision: its helm driver's
/// run id ([`crate::helm::Helm::run_id`]), random per process.
pub(crate) const STARTED_BY_RUN_LABEL: &str = "omni.texashpc.com/started-by-run";
/// Release label with the revision number that process started. Helm merges release labels
/// into later revisions, so a revision someone else starts on top of ours (a `helm upgrade` by
/// hand, a rollback) inherits our run label but not a matching revision number.
pub(crate) const STARTED_REVISION_LABEL: &str = "omni.texashpc.com/started-revision";

/// The pipeline's steps for OmniHelmRelease. A pass reads the object fresh (`READ_FRESH`): the
/// watch cache can lag behind this controller's own last status write, and planning from a
/// stale digest or revision would create a needless revision.
impl Pipeline for OmniHelmRelease {
    type Outcome = Outcome;
    const LEGACY_FINALIZER: bool = false;
    const READ_FRESH: bool = true;

    /// The kubeconfig Secret: the workload API server helm talks to.
    fn target(&self) -> Option<String> {
        let ns = self.namespace().unwrap_or_default();
        Some(format!(
            "kubeconfig:{ns}/{}",
            self.spec.kubeconfig_secret_ref.name
        ))
    }

    fn validate(&self) -> Validation {
        crate::api::helm_release::validate_stored(self)
    }

    fn invalid(summary: String) -> Outcome {
        Outcome::Invalid(summary)
    }

    async fn apply(self: Arc<Self>, ctx: Arc<Context>) -> Result<Outcome, Error> {
        attached(&ctx, &self, ctx.clock.now()).await
    }

    fn desired_status(&self, outcome: &Outcome, now: jiff::Timestamp) -> OmniHelmReleaseStatus {
        desired_status(self, outcome, now)
    }

    fn next(&self, outcome: Outcome, ctx: &Context) -> Result<Action, Error> {
        next_reconcile(self, &outcome, ctx.min_interval, super::periodic_spread())
    }

    async fn cleanup(self: Arc<Self>, ctx: Arc<Context>) -> Result<Cleanup<Outcome>, Error> {
        uninstall::delete(&ctx, &self).await
    }

    /// Condition Events fire on reason changes only; each Helm action that deployed a revision
    /// is worth one too.
    async fn announce(
        &self,
        ctx: &Context,
        outcome: &Outcome,
        old: Option<&OmniHelmReleaseStatus>,
        new: &OmniHelmReleaseStatus,
    ) {
        let ready = |s: &OmniHelmReleaseStatus| find_condition(&s.conditions, ct::READY).cloned();
        if let (true, Some(now_ready), Some(was_ready)) =
            (outcome.deployed(), ready(new), old.and_then(ready))
            && now_ready.reason == was_ready.reason
        {
            ctx.event(
                self,
                EventType::Normal,
                &now_ready.reason,
                now_ready.message,
            )
            .await;
        }
    }
}

/// The pass of an object that is not being deleted: its inputs, then the release.
async fn attached(
    ctx: &Context,
    r: &OmniHelmRelease,
    now: jiff::Timestamp,
) -> Result<Outcome, Error> {
    let namespace = r.namespace().unwrap_or_default();
    let cluster = ctx
        .api::<OmniCluster>(&namespace)
        .get_opt(&r.spec.cluster_ref.name)
        .await?;
    if cluster.is_none() {
        return unless_deleted_meanwhile(ctx, r, Outcome::MissingCluster).await;
    }
    let kubeconfig = match inputs::kubeconfig(ctx, r).await? {
        Ok(k) => k,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, Outcome::Blocked(problem)).await,
    };
    let auth = match inputs::repository_auth(ctx, r).await? {
        Ok(a) => a,
        Err(problem) => return unless_deleted_meanwhile(ctx, r, Outcome::Blocked(problem)).await,
    };
    let Some(helm) = &ctx.helm else {
        return Ok(Outcome::Blocked(inputs::Problem::HelmUnavailable(
            "no usable helm binary; set --helm-binary (or HELM_BINARY) to helm 3.13 or newer"
                .to_string(),
        )));
    };
    if let Err(problem) = inputs::reachable(ctx, r, &kubeconfig).await {
        return Ok(Outcome::Blocked(problem));
    }
    let session = match helm
        .session(&inputs::release_key(r), &kubeconfig.checked)
        .await
    {
        Ok(s) => s,
        Err(err) => {
            return Ok(Outcome::HelmFailed(format!(
                "cannot start Helm for release {:?}: {err}",
                r.effective_release_name()
            )));
        }
    };
    Ok(converge(ctx, r, &session, &auth, now).await)
}

/// Looks at the release, then takes the next action. Only a recovery is followed by another
/// look and action in the same pass (the install or upgrade it makes way for); the state
/// after a recovery is never pending, so a pass makes at most one recovery and one install
/// or upgrade.
async fn converge(
    ctx: &Context,
    r: &OmniHelmRelease,
    session: &ReleaseSession,
    auth: &RepositoryAuth,
    now: jiff::Timestamp,
) -> Outcome {
    let mut look = match observe(r, session).await {
        Ok(look) => look,
        Err(message) => return Outcome::HelmFailed(message),
    };
    loop {
        let run = |adopting, drift| HelmRun {
            ctx,
            r,
            session,
            auth,
            current: look.release.as_ref(),
            adopting,
            drift,
        };
        return match next_action(&determine(r, &look, now)) {
            NextAction::Nothing => Outcome::InSync(look.release),
            NextAction::Refuse(o) => Outcome::Refused(o),
            NextAction::Wait { release, after } => Outcome::Locked {
                release,
                retry_after: after,
            },
            NextAction::ReportStuck(release) => Outcome::Stuck {
                release,
                because: StuckBecause::RecoveryNotAllowed,
            },
            NextAction::Install { adopting, drift } => {
                install::install(&run(adopting, drift)).await
            }
            NextAction::Upgrade { adopting, drift } => {
                upgrade::upgrade(&run(adopting, drift)).await
            }
            NextAction::Recover { release, abandoned } => {
                if let Some(outcome) = recover::recover(ctx, r, session, &release, abandoned).await
                {
                    return outcome;
                }
                look = Observation {
                    release: match read_release(r, session).await {
                        Ok(release) => release,
                        Err(message) => return Outcome::HelmFailed(message),
                    },
                    recovered: true,
                    ..look
                };
                continue;
            }
        };
    }
}

/// One look at the release: Helm's view, and (for a release that exists) its labels, which
/// decide the claim on it. The error is the message to report.
async fn observe(r: &OmniHelmRelease, session: &ReleaseSession) -> Result<Observation, String> {
    let name = r.effective_release_name();
    let release = read_release(r, session).await?;
    let claim = match &release {
        None => ownership::Claim::Ours(Starter::Unknown),
        Some(info) => {
            let labels = session
                .labels(&name, &r.spec.namespace)
                .await
                .map_err(|err| format!("read labels of Helm release {name:?}: {err}"))?
                .unwrap_or_default();
            ownership::claim(r, &labels, info, session.run_id())
        }
    };
    Ok(Observation {
        release,
        claim,
        recovered: false,
    })
}

/// Helm's view of the release (`helm status`); the error is the message to report.
async fn read_release(
    r: &OmniHelmRelease,
    session: &ReleaseSession,
) -> Result<Option<ReleaseInfo>, String> {
    let name = r.effective_release_name();
    session
        .status(&name, &r.spec.namespace)
        .await
        .map_err(|err| format!("read Helm release {name:?}: {err}"))
}

/// The OmniHelmRelease controller, subscribed to `watches`: runs until `shutdown` completes.
pub fn start<S: Shutdown>(
    ctx: Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniHelmRelease>(&ctx, watches, |x| {
        let ns = namespace_of(x);
        let mut keys = vec![
            RefKey::new("cluster", &ns, &x.spec.cluster_ref.name),
            RefKey::new("secret", &ns, &x.spec.kubeconfig_secret_ref.name),
        ];
        if let Some(c) = &x.spec.chart.credentials_secret_ref {
            keys.push(RefKey::new("secret", &ns, &c.name));
        }
        keys
    });
    let by_secret = index.clone();
    let controller = controller
        .watches_stream(
            cluster_changes_of(watches, super::ClusterTrigger::ChangesAndConditions),
            move |c: Cached<OmniCluster>| index.referring_to("cluster", &c),
        )
        // A kubeconfig or credentials change re-checks the release (a rotation alone does
        // not upgrade it: the digest excludes the kubeconfig).
        .watches_stream(touched::<Secret>(watches), move |s: Cached<Secret>| {
            by_secret.referring_to("secret", &s)
        });
    drive::<OmniHelmRelease, _, _>(controller, ctx, shutdown, pipeline::reconcile)
}

#[cfg(test)]
mod test_support;
