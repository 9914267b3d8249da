//! Deletion: `helm uninstall` of a release this object owns (unless `deletionPolicy: Orphan`),
//! then the finalizer goes. A deletion that cannot uninstall says why and how to finish it
//! instead of waiting silently (the original waits forever).

use kube::runtime::events::EventType;

use super::REASON_UNINSTALL_SKIPPED;
use super::apply::helm_failure;
use super::inputs::{Problem, kubeconfig, release_key, timeout_of};
use super::outcome::{Outcome, WAY_OUT};
use super::ownership::{Ownership, ownership};
use crate::api::OmniHelmRelease;
use crate::api::common::reasons;
use crate::api::helm_release::HelmDeletionPolicy;
use crate::controllers::pipeline::Cleanup;
use crate::controllers::{Context, Error};
use crate::helm::{HelmError, ReleaseSession};

/// Deletes `r`'s release: `Done` once the finalizer may go, `Waiting` while it cannot.
pub(crate) async fn delete(ctx: &Context, r: &OmniHelmRelease) -> Result<Cleanup<Outcome>, Error> {
    if r.spec.deletion_policy == HelmDeletionPolicy::Orphan {
        return Ok(Cleanup::Done);
    }
    let name = r.effective_release_name();
    let kubeconfig = match kubeconfig(ctx, r).await? {
        Ok(k) => k,
        Err(problem) => {
            return Ok(Cleanup::Waiting(Outcome::UninstallBlocked(
                problem.map_message(|m| {
                    format!("cannot uninstall Helm release {name:?}: {m}; restore it, or {WAY_OUT}")
                }),
            )));
        }
    };
    let Some(helm) = &ctx.helm else {
        return Ok(Cleanup::Waiting(Outcome::UninstallBlocked(
            Problem::HelmUnavailable(format!(
                "cannot uninstall Helm release {name:?}: no usable helm binary; fix --helm-binary, or {WAY_OUT}"
            )),
        )));
    };
    let result = match helm.session(&release_key(r), &kubeconfig.checked).await {
        Ok(session) => uninstall_if_owned(r, &session).await,
        Err(e) => Err(e),
    };
    match result {
        Err(err) => {
            return Ok(Cleanup::Waiting(Outcome::UninstallFailed(format!(
                "{}; retrying, or {WAY_OUT}",
                helm_failure("Uninstall", &name, &err)
            ))));
        }
        Ok(Removal::NotOwned(o)) => {
            ctx.event(
                r,
                EventType::Warning,
                REASON_UNINSTALL_SKIPPED,
                format!(
                    "left Helm release {name:?} in namespace {:?} in place: it {}",
                    r.spec.namespace,
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
                reasons::HELM_UNINSTALLED,
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
    session: &ReleaseSession,
) -> Result<Removal, HelmError> {
    let (name, ns) = (r.effective_release_name(), &r.spec.namespace);
    let Some(info) = session.status(&name, ns).await? else {
        return Ok(Removal::Missing);
    };
    let labels = session.labels(&name, ns).await?.unwrap_or_default();
    let o = ownership(r, &labels, &info);
    if !o.is_ours() {
        return Ok(Removal::NotOwned(o));
    }
    session
        .uninstall(&name, ns, timeout_of(r), r.spec.disable_hooks, r.spec.wait)
        .await?;
    Ok(Removal::Uninstalled)
}
