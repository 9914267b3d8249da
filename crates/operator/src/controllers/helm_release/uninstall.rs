//! Deletion: `helm uninstall` of a release this object owns (unless `deletionPolicy: Orphan`),
//! then the finalizer goes. A deletion that cannot uninstall says why and how to finish it
//! instead of waiting silently (the original waits forever).

use kube::ResourceExt;
use kube::runtime::events::EventType;

use super::apply::helm_failure;
use super::inputs::{Problem, kubeconfig, request};
use super::outcome::{HelmFailure, Outcome, WAY_OUT};
use super::ownership::{Ownership, ownership};
use super::state::HelmState;
use crate::api::helm_release::HelmDeletionPolicy;
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::Error;
use crate::controllers::shared::pipeline::Cleanup;
use crate::domain::helm::{HelmError, ReleaseRequest, ReleaseSession};

/// Deletes `r`'s release: `Done` once the finalizer may go, `Waiting` while it cannot.
pub(crate) async fn delete(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
) -> Result<Cleanup<Outcome>, Error> {
    if r.spec.deletion_policy == HelmDeletionPolicy::Orphan {
        return Ok(Cleanup::Done);
    }
    let waiting = |failure| Cleanup::Waiting(Outcome::failed(failure));
    // Releases that depend on this one go first (they are uninstalled before it).
    let dependants = state.dependants(&r.namespace().unwrap_or_default(), &r.name_any());
    if !dependants.is_empty() {
        return Ok(waiting(HelmFailure::DependantsRemain(dependants)));
    }
    let req = request(r);
    let name = &req.release_name;
    let kubeconfig = match kubeconfig(ctx, state, r).await? {
        Ok(k) => k,
        Err(problem) => {
            return Ok(waiting(HelmFailure::UninstallBlocked(problem.map_message(
                |m| {
                    format!("cannot uninstall Helm release {name:?}: {m}; restore it, or {WAY_OUT}")
                },
            ))));
        }
    };
    let Some(helm) = &state.helm else {
        return Ok(waiting(HelmFailure::UninstallBlocked(
            Problem::HelmUnavailable(format!(
                "cannot uninstall Helm release {name:?}: no usable helm binary; fix --helm-binary, or {WAY_OUT}"
            )),
        )));
    };
    let result = match helm.session(&req.lock_key, &kubeconfig.checked).await {
        Ok(session) => uninstall_if_owned(r, &req, &session).await,
        Err(e) => Err(e),
    };
    match result {
        Err(err) => {
            return Ok(waiting(HelmFailure::UninstallFailed(format!(
                "{}; retrying, or {WAY_OUT}",
                helm_failure("Uninstall", name, &err)
            ))));
        }
        Ok(Removal::NotOwned(o)) => {
            ctx.event(
                r,
                EventType::Warning,
                Reason::UninstallSkipped,
                format!(
                    "left Helm release {name:?} in namespace {:?} in place: it {}",
                    req.namespace,
                    o.whose()
                ),
            )
            .await;
        }
        Ok(Removal::Missing) => {}
        Ok(Removal::Uninstalled) => {
            ctx.event(
                r,
                EventType::Normal,
                Reason::HelmUninstalled,
                format!("uninstalled Helm release {name:?}"),
            )
            .await;
        }
    }
    Ok(Cleanup::Done)
}

/// What the deletion did with the release.
enum Removal {
    Uninstalled,
    /// There was no release.
    Missing,
    /// The release is not this object's; it was left alone.
    NotOwned(Ownership),
}

/// Uninstalls the release only when this object owns it (an adopt annotation alone is not
/// enough: a release is ours once an install or upgrade by this object labelled it).
async fn uninstall_if_owned(
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    session: &ReleaseSession,
) -> Result<Removal, HelmError> {
    let Some(info) = session.status(req).await? else {
        return Ok(Removal::Missing);
    };
    let labels = session.labels(req).await?.unwrap_or_default();
    let o = ownership(r, req, &labels, &info);
    if !o.is_ours() {
        return Ok(Removal::NotOwned(o));
    }
    session.uninstall(req).await?;
    Ok(Removal::Uninstalled)
}
