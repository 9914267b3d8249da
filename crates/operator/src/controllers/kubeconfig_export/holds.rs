//! The export's hold on its Secret ([`keys::KUBECONFIG_IN_USE_FINALIZER`]) and the Secret's
//! end: consumers that still need it keep it, an owned one is deleted or released, nothing
//! else is touched.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};

use super::outcome::{ExportFailure, Waiting};
use super::target::{holds, is_owned};
use crate::api::common::DeletionPolicy;
use crate::api::keys;
use crate::api::{OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::decoded::api_resource;
use crate::controllers::shared::error::Error;
use crate::controllers::shared::finalizer::{self, Finalizer, set_secret_finalizers};
use crate::domain::delete_guard::{Deleted, delete_observed};

/// Whether `consumer` (an OmniHelmRelease or OmniSecretSync, decoded loosely so one bad object
/// cannot hide the others) uses the Secret `secret` of its namespace as its kubeconfig and may
/// still need it: a live one to work, a deleting one until the operator has finished its
/// cleanup (its finalizer is gone).
pub(crate) fn needs_kubeconfig(consumer: &DynamicObject, secret: &str) -> bool {
    consumer
        .data
        .pointer("/spec/kubeconfigSecretRef/name")
        .and_then(serde_json::Value::as_str)
        == Some(secret)
        && (consumer.metadata.deletion_timestamp.is_none()
            || finalizer::has_finalizer(consumer, Finalizer::Current))
}

/// The OmniHelmReleases and OmniSecretSyncs in `ns` that still need Secret `secret`, named for
/// a status message (`OmniHelmRelease "app"`).
pub(super) async fn consumers(ctx: &Context, ns: &str, secret: &str) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    for ar in [
        api_resource::<OmniHelmRelease>(),
        api_resource::<OmniSecretSync>(),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        for obj in api.list(&ListParams::default()).await? {
            if needs_kubeconfig(&obj, secret) {
                found.push(format!("{} {:?}", ar.kind, obj.name_any()));
            }
        }
    }
    Ok(found)
}

/// Puts the hold on `secret`, which this export owns but wrote before exports held their
/// Secrets.
pub(super) async fn add_hold(api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    let mut list = secret.finalizers().to_vec();
    list.push(keys::KUBECONFIG_IN_USE_FINALIZER.to_string());
    set_secret_finalizers(api, &secret.metadata, list).await
}

/// Lifts the hold from `secret`; a Secret already being deleted then goes.
pub(super) async fn release_hold(api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    if !holds(secret) {
        return Ok(());
    }
    let rest = secret
        .finalizers()
        .iter()
        .filter(|f| *f != keys::KUBECONFIG_IN_USE_FINALIZER)
        .cloned()
        .collect();
    set_secret_finalizers(api, &secret.metadata, rest).await
}

/// Deletes the Secret `ns/name` if this export owns it. `Ok(Err(..))`: it kept changing while
/// being judged (retried with backoff).
pub(super) async fn delete_owned(
    ctx: &Context,
    e: &OmniKubeconfigExport,
    ns: &str,
    name: &str,
) -> Result<Result<(), ExportFailure>, Error> {
    let api = ctx.api::<Secret>(ns);
    // Conditional on the checked object (uid and resourceVersion): a Secret replaced in between
    // by one this export does not own survives. A changed one is read and judged again.
    for _ in 0..4 {
        let Some(observed) = api.get_opt(name).await?.filter(|s| is_owned(s, e)) else {
            return Ok(Ok(()));
        };
        if holds(&observed) {
            // The hold comes off first, so the delete removes the Secret rather than marking it.
            release_hold(&api, &observed).await?;
            continue;
        }
        if observed.metadata.deletion_timestamp.is_some() {
            // Already being deleted; what is left is someone else's finalizer.
            return Ok(Ok(()));
        }
        match delete_observed(&api, &observed).await? {
            Deleted::Removed | Deleted::Gone => return Ok(Ok(())),
            Deleted::Changed => continue,
        }
    }
    Ok(Err(ExportFailure::TargetKeepsChanging {
        namespace: ns.to_string(),
        name: name.to_string(),
    }))
}

/// The target's namespace/name: status first when both are recorded, else spec.
pub(super) fn target_location(e: &OmniKubeconfigExport) -> (String, String) {
    let st = e.status.clone().unwrap_or_default();
    match (st.target_secret_namespace, st.target_secret_ref) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => (ns, name),
        _ => (
            e.effective_target_namespace(),
            e.spec.target_secret_ref.name.clone(),
        ),
    }
}

/// What is left of a deleting export's part in its Secret's end.
#[derive(Debug)]
pub(super) enum TargetEnd {
    /// Deleted (`Delete`) or released (`Orphan`), or there was nothing of ours.
    Done,
    /// Consumers still need the Secret.
    Waiting(Waiting),
    /// The Secret kept changing while it was being deleted.
    Failed(ExportFailure),
}

/// The deleting export's part in its Secret's end: under `Delete` (or when the Secret is being
/// deleted anyway) it waits while consumers still need the Secret, then removes it (`Delete`)
/// or just lifts its hold (`Orphan`).
pub(super) async fn end_target(
    ctx: &Context,
    e: &OmniKubeconfigExport,
) -> Result<TargetEnd, Error> {
    if e.spec.target_secret_ref.name.is_empty() {
        return Ok(TargetEnd::Done);
    }
    let (ns, name) = target_location(e);
    let api = ctx.api::<Secret>(&ns);
    let Some(secret) = api.get_opt(&name).await?.filter(|s| is_owned(s, e)) else {
        return Ok(TargetEnd::Done);
    };
    let delete = e.spec.deletion_policy == DeletionPolicy::Delete;
    if delete || secret.metadata.deletion_timestamp.is_some() {
        let users = consumers(ctx, &ns, &name).await?;
        if !users.is_empty() {
            return Ok(TargetEnd::Waiting(Waiting {
                namespace: ns,
                name,
                users,
                deletes: delete,
            }));
        }
    }
    if !delete {
        release_hold(&api, &secret).await?;
        return Ok(TargetEnd::Done);
    }
    Ok(match delete_owned(ctx, e, &ns, &name).await? {
        Ok(()) => TargetEnd::Done,
        Err(f) => TargetEnd::Failed(f),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(spec_secret: &str, deleting: bool, finalizers: &[&str]) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniHelmRelease",
            "metadata": {"name": "app", "namespace": "ns", "finalizers": finalizers},
            "spec": {"kubeconfigSecretRef": {"name": spec_secret}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if deleting {
            obj.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        obj
    }

    #[test]
    fn a_consumer_needs_the_kubeconfig_until_its_own_cleanup_is_done() {
        let ours = crate::api::keys::FINALIZER;
        assert!(needs_kubeconfig(&consumer("kc", false, &[]), "kc"), "live");
        assert!(
            needs_kubeconfig(&consumer("kc", true, &[ours]), "kc"),
            "uninstalling"
        );
        assert!(
            !needs_kubeconfig(&consumer("kc", true, &["other.example/x"]), "kc"),
            "our cleanup is done; another finalizer is not ours to wait for"
        );
        assert!(!needs_kubeconfig(&consumer("other", false, &[]), "kc"));
    }
}
