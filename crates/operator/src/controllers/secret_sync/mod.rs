//! OmniSecretSync: copy a management-cluster Secret into a workload cluster.
//!
//! Fixes over the original: a target Secret this sync does not own is never written (unless it
//! carries the adoption annotation), labels and annotations added by others survive updates,
//! and the copy is re-checked every `RESYNC` so drift in the workload cluster is corrected.

mod failure;
mod outcome;
mod target;
mod write;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;

pub(crate) use self::failure::SecretSyncFailure;
use self::failure::kubeconfig_failure;
pub(crate) use self::outcome::SyncOutcome;
use self::outcome::desired_status;
pub(crate) use self::target::{UID_LABEL, adoptable};
use self::write::{delete_owned, sync_target};
use super::index::{RefKey, namespace_of};
use super::pipeline::{Cleanup, Pipeline, unless_deleted_meanwhile};
use super::{
    Cached, Context, Error, Shutdown, Watches, cluster_changes_of, drive, indexed_controller_for,
    pipeline, secret_changes_of,
};
use crate::api::common::DeletionPolicy;
use crate::api::secret_sync::OmniSecretSyncStatus;
use crate::api::validation::Validation;
use crate::api::{OmniCluster, OmniSecretSync};
use crate::secret_policy::{self, SecretUse};

/// Periodic re-check of a synced Secret (drift correction).
pub(crate) const RESYNC: Duration = Duration::from_secs(300);
/// Re-check while a dependency is missing.
pub(crate) const RETRY: Duration = Duration::from_secs(60);
/// Annotation a user puts on an existing workload Secret to let a sync take it over.
pub(crate) const ADOPT_ANNOTATION: &str = "omni.texashpc.com/adopt";
/// Condition reason for a target Secret that belongs to someone else.
pub(crate) const REASON_TARGET_NOT_OWNED: &str = "TargetNotOwned";

const KIND: &str = "OmniSecretSync";

/// A client of the workload cluster from the sync's kubeconfig Secret.
async fn workload_client(
    ctx: &Context,
    sync: &OmniSecretSync,
) -> Result<kube::Client, SecretSyncFailure> {
    let namespace = sync.namespace().unwrap_or_default();
    let k = &sync.spec.kubeconfig_secret_ref;
    let reader = ctx.reader(&namespace, sync.spec.service_account_name.as_deref());
    ctx.workload
        .get(
            &reader,
            &namespace,
            &k.name,
            &k.key,
            &ctx.secret_policy,
            KIND,
        )
        .await
        .map_err(|e| kubeconfig_failure(sync, e))
}

/// Deletes the copy this sync owns when its deletion policy says so.
async fn delete(ctx: &Context, sync: &OmniSecretSync) -> Result<Cleanup<SyncOutcome>, Error> {
    if sync.spec.deletion_policy != DeletionPolicy::Delete {
        return Ok(Cleanup::Done);
    }
    let workload = match workload_client(ctx, sync).await {
        Ok(c) => c,
        Err(f) => return Ok(Cleanup::Waiting(SyncOutcome::failed(f, None))),
    };
    let st = sync.status.clone().unwrap_or_default();
    let (ns, name) = match (st.target_namespace, st.target_secret_ref) {
        (Some(ns), Some(name)) => (ns, name),
        _ => (
            sync.spec.target_secret_ref.namespace.clone(),
            sync.spec.target_secret_ref.name.clone(),
        ),
    };
    Ok(match delete_owned(&workload, sync, &ns, &name).await {
        Ok(()) => Cleanup::Done,
        Err(m) => Cleanup::Waiting(SyncOutcome::failed(
            SecretSyncFailure::DeleteFailed(m),
            None,
        )),
    })
}

/// Observe the cluster, source and kubeconfig; copy the source into the workload cluster.
async fn apply(ctx: &Context, sync: &OmniSecretSync) -> Result<SyncOutcome, Error> {
    let namespace = sync.namespace().unwrap_or_default();
    let cluster_name = &sync.spec.cluster_ref.name;
    let Some(cluster) = ctx
        .api::<OmniCluster>(&namespace)
        .get_opt(cluster_name)
        .await?
    else {
        let f = SecretSyncFailure::MissingCluster {
            cluster: cluster_name.clone(),
        };
        return unless_deleted_meanwhile(ctx, sync, SyncOutcome::failed(f, Some(false))).await;
    };
    let source_name = &sync.spec.source_secret_ref.name;
    let reader = ctx.reader(&namespace, sync.spec.service_account_name.as_deref());
    let read = crate::impersonation::get::<Secret>(&ctx.client, &reader, &namespace, source_name);
    let source = match read.await {
        Ok(source) => source,
        Err(e @ crate::impersonation::ReadError::Denied { .. }) => {
            let f = SecretSyncFailure::AccessDenied(format!("{e} (spec.sourceSecretRef)"));
            return Ok(SyncOutcome::failed(f, Some(true)));
        }
        Err(crate::impersonation::ReadError::Api(e)) => return Err(e.into()),
    };
    let Some(source) = source else {
        let f = SecretSyncFailure::MissingSource {
            namespace: namespace.clone(),
            name: source_name.clone(),
        };
        return unless_deleted_meanwhile(ctx, sync, SyncOutcome::failed(f, Some(true))).await;
    };
    // Before anything is copied: the Omni key and service-account tokens never leave.
    if let Some(reason) = secret_policy::check(
        &ctx.client,
        &ctx.secret_policy,
        &source,
        KIND,
        SecretUse::SyncSource,
    )
    .await?
    {
        let f = SecretSyncFailure::Refused(reason);
        return Ok(SyncOutcome::failed(f, Some(true)));
    }
    let workload = match workload_client(ctx, sync).await {
        Ok(c) => c,
        Err(f) => {
            return unless_deleted_meanwhile(ctx, sync, SyncOutcome::failed(f, Some(true))).await;
        }
    };
    // A renamed target under Delete: remove the previous copy if it is ours.
    let st = sync.status.clone().unwrap_or_default();
    let t = &sync.spec.target_secret_ref;
    if sync.spec.deletion_policy == DeletionPolicy::Delete
        && let (Some(old_ns), Some(old_name)) = (&st.target_namespace, &st.target_secret_ref)
        && (old_ns != &t.namespace || old_name != &t.name)
        && let Err(m) = delete_owned(&workload, sync, old_ns, old_name).await
    {
        let f = SecretSyncFailure::DeleteFailed(m);
        return Ok(SyncOutcome::failed(f, Some(true)));
    }
    let result = sync_target(&workload, sync, &source, &cluster.effective_cluster_name()).await;
    Ok(SyncOutcome {
        result,
        accepted: Some(true),
    })
}

impl Pipeline for OmniSecretSync {
    type Outcome = SyncOutcome;
    const LEGACY_FINALIZER: bool = false;

    /// The kubeconfig Secret: the workload API server every pass talks to.
    fn target(&self) -> Option<String> {
        let ns = self.namespace().unwrap_or_default();
        Some(format!(
            "kubeconfig:{ns}/{}",
            self.spec.kubeconfig_secret_ref.name
        ))
    }

    fn validate(&self) -> Validation {
        crate::api::secret_sync::validate(self, None)
    }

    fn invalid(summary: String) -> SyncOutcome {
        SyncOutcome::failed(SecretSyncFailure::InvalidSpec(summary), None)
    }

    async fn apply(self: Arc<Self>, ctx: Arc<Context>) -> Result<SyncOutcome, Error> {
        apply(&ctx, &self).await
    }

    fn desired_status(&self, outcome: &SyncOutcome, now: jiff::Timestamp) -> OmniSecretSyncStatus {
        desired_status(self, outcome, now)
    }

    fn next(&self, outcome: SyncOutcome, ctx: &Context) -> Result<Action, Error> {
        match outcome.result {
            Ok(_) if ctx.secret_sync_resync.is_zero() => Ok(Action::await_change()),
            Ok(_) => Ok(Action::requeue(super::periodic(ctx.secret_sync_resync))),
            Err(f) => f.retry().action().ok_or(f.into()),
        }
    }

    async fn cleanup(self: Arc<Self>, ctx: Arc<Context>) -> Result<Cleanup<SyncOutcome>, Error> {
        delete(&ctx, &self).await
    }
}

/// The OmniSecretSync controller, subscribed to `watches`: runs until `shutdown` completes.
pub fn start<S: Shutdown>(
    ctx: Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniSecretSync>(&ctx, watches, |s| {
        let ns = namespace_of(s);
        vec![
            RefKey::new("cluster", &ns, &s.spec.cluster_ref.name),
            RefKey::new("secret", &ns, &s.spec.source_secret_ref.name),
            RefKey::new("secret", &ns, &s.spec.kubeconfig_secret_ref.name),
        ]
    });
    let by_secret = index.clone();
    let controller = controller
        .watches_stream(
            cluster_changes_of(watches, super::ClusterTrigger::Identity),
            move |c: Cached<OmniCluster>| index.referring_to("cluster", &c),
        )
        .watches_stream(secret_changes_of(watches), move |secret: Cached<Secret>| {
            by_secret.referring_to("secret", &secret)
        });
    drive::<OmniSecretSync, _, _>(controller, ctx, shutdown, pipeline::reconcile)
}

#[cfg(test)]
mod fixtures;
