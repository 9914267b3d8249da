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

use kube::ResourceExt;
use kube::runtime::controller::Action;

use self::failure::{SecretSyncFailure, kubeconfig_failure};
use self::outcome::{SyncDone, SyncOutcome, desired_status};
use self::write::{delete_owned, sync_target};
use super::cluster::dependants::start_gate;
use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::Cached;
use super::shared::error::{PassError, periodic};
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefKey, namespace_of};
use super::shared::pipeline::{Cleanup, Pipeline, unless_deleted_meanwhile, webhook_rules};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::setup::Setup;
use super::shared::status::reported;
use super::shared::triggers::secret_changes_of;
use super::shared::watches::Watches;
use crate::api::common::DeletionPolicy;
use crate::api::secret_sync::OmniSecretSyncStatus;
use crate::api::{OmniCluster, OmniSecretSync};
use crate::domain::impersonation::{self, ReadError, Reader};
use crate::domain::secret_policy::{self, SecretPolicy, SecretUse};
use crate::domain::workload::WorkloadClients;
use k8s_openapi::api::core::v1::Secret;

/// Periodic re-check of a synced Secret (drift correction), unless configured otherwise.
pub(crate) const RESYNC: Duration = Duration::from_secs(300);

const KIND: &str = "OmniSecretSync";

/// What the OmniSecretSync controller keeps and is configured with.
pub(crate) struct SyncState {
    /// Clients of the workload clusters, by kubeconfig Secret.
    workload: Arc<WorkloadClients>,
    /// Which Secrets a sync may read.
    secret_policy: SecretPolicy,
    /// How often a synced copy is re-checked for drift in the workload cluster, which the
    /// operator does not watch; zero turns the re-check off.
    resync: Duration,
    /// Whose identity reads the Secrets of a sync without `spec.serviceAccountName`
    /// (`--default-service-account`); unset, the operator's.
    default_service_account: Option<String>,
}

reported!(OmniSecretSync => OmniSecretSyncStatus, suspended: |s| s.spec.suspend);

/// A client of the workload cluster from the sync's kubeconfig Secret.
async fn workload_client(
    state: &SyncState,
    sync: &OmniSecretSync,
) -> Result<kube::Client, SecretSyncFailure> {
    let namespace = sync.namespace().unwrap_or_default();
    let k = &sync.spec.kubeconfig_secret_ref;
    let reader = Reader::of(
        &namespace,
        sync.spec.service_account_name.as_deref(),
        state.default_service_account.as_deref(),
    );
    state
        .workload
        .get(
            &reader,
            &namespace,
            &k.name,
            &k.key,
            &state.secret_policy,
            KIND,
        )
        .await
        .map_err(|e| kubeconfig_failure(sync, e))
}

/// Deletes the copy this sync owns when its deletion policy says so.
async fn delete(state: &SyncState, sync: &OmniSecretSync) -> Cleanup<SyncOutcome> {
    if sync.spec.deletion_policy != DeletionPolicy::Delete {
        return Cleanup::Done;
    }
    let workload = match workload_client(state, sync).await {
        Ok(c) => c,
        Err(f) => return Cleanup::Waiting(SyncOutcome::failed(f)),
    };
    let st = sync.status.clone().unwrap_or_default();
    let (ns, name) = match (st.target_namespace, st.target_secret_ref) {
        (Some(ns), Some(name)) => (ns, name),
        _ => (
            sync.spec.target_secret_ref.namespace.clone(),
            sync.spec.target_secret_ref.name.clone(),
        ),
    };
    match delete_owned(&workload, sync, &ns, &name).await {
        Ok(()) => Cleanup::Done,
        Err(m) => Cleanup::Waiting(SyncOutcome::failed(SecretSyncFailure::DeleteFailed(m))),
    }
}

/// Observe the cluster, source and kubeconfig; copy the source into the workload cluster.
async fn apply(
    ctx: &Context,
    state: &SyncState,
    sync: &OmniSecretSync,
) -> Result<SyncOutcome, PassError<OmniSecretSync>> {
    let namespace = sync.namespace().unwrap_or_default();
    let cluster_name = &sync.spec.cluster_ref.name;
    let failed = |found: bool, failure| SyncOutcome::new(Some(found), Err(failure));
    let Some(cluster) = ctx
        .api::<OmniCluster>(&namespace)
        .get_opt(cluster_name)
        .await?
    else {
        let f = SecretSyncFailure::MissingCluster {
            cluster: cluster_name.clone(),
        };
        return unless_deleted_meanwhile(ctx, sync, failed(false, f)).await;
    };
    if sync.spec.suspend {
        return Ok(SyncOutcome::new(Some(true), Ok(SyncDone::Suspended)));
    }
    // Before its first copy, a sync waits for its cluster (`spec.startWhen`).
    let copied = sync
        .status
        .as_ref()
        .is_some_and(|s| s.secret_hash.is_some());
    if let Some(why) = start_gate(&cluster, sync.spec.start_when, copied) {
        return Ok(failed(true, SecretSyncFailure::ClusterNotReady(why)));
    }
    let source_name = &sync.spec.source_secret_ref.name;
    let reader = Reader::of(
        &namespace,
        sync.spec.service_account_name.as_deref(),
        state.default_service_account.as_deref(),
    );
    let source =
        match impersonation::get::<Secret>(&ctx.client, &reader, &namespace, source_name).await {
            Ok(source) => source,
            Err(e @ ReadError::Denied { .. }) => {
                let f = SecretSyncFailure::AccessDenied(format!("{e} (spec.sourceSecretRef)"));
                return Ok(failed(true, f));
            }
            Err(ReadError::Api(e)) => return Err(e.into()),
        };
    let Some(source) = source else {
        let f = SecretSyncFailure::MissingSource {
            namespace: namespace.clone(),
            name: source_name.clone(),
        };
        return unless_deleted_meanwhile(ctx, sync, failed(true, f)).await;
    };
    // Before anything is copied: the Omni key and service-account tokens never leave.
    if let Some(reason) = secret_policy::check(
        &ctx.client,
        &state.secret_policy,
        &source,
        KIND,
        SecretUse::SyncSource,
    )
    .await?
    {
        return Ok(failed(true, SecretSyncFailure::Refused(reason)));
    }
    let workload = match workload_client(state, sync).await {
        Ok(c) => c,
        Err(f) => return unless_deleted_meanwhile(ctx, sync, failed(true, f)).await,
    };
    // A renamed target under Delete: remove the previous copy if it is ours.
    let st = sync.status.clone().unwrap_or_default();
    let t = &sync.spec.target_secret_ref;
    if sync.spec.deletion_policy == DeletionPolicy::Delete
        && let (Some(old_ns), Some(old_name)) = (&st.target_namespace, &st.target_secret_ref)
        && (old_ns != &t.namespace || old_name != &t.name)
        && let Err(m) = delete_owned(&workload, sync, old_ns, old_name).await
    {
        return Ok(failed(true, SecretSyncFailure::DeleteFailed(m)));
    }
    let result = sync_target(&workload, sync, &source, &cluster.effective_cluster_name()).await;
    Ok(SyncOutcome::new(Some(true), result.map(SyncDone::Copied)))
}

impl Pipeline for OmniSecretSync {
    type State = SyncState;
    /// Whether the cluster it names exists, once the pass looked.
    type Found = Option<bool>;
    type Done = SyncDone;
    type Failure = SecretSyncFailure;
    const FINALIZER: Finalizer = Finalizer::Current;

    /// The kubeconfig Secret: the workload API server every pass talks to.
    fn target(&self) -> Option<String> {
        let ns = self.namespace().unwrap_or_default();
        Some(format!(
            "kubeconfig:{ns}/{}",
            self.spec.kubeconfig_secret_ref.name
        ))
    }

    fn validate(&self) -> Result<(), SecretSyncFailure> {
        webhook_rules(
            crate::api::secret_sync::validate(self, None),
            SecretSyncFailure::InvalidSpec,
        )
    }

    async fn apply(
        &self,
        ctx: &Context,
        state: &SyncState,
    ) -> Result<SyncOutcome, PassError<Self>> {
        apply(ctx, state, self).await
    }

    async fn cleanup(
        &self,
        _ctx: &Context,
        state: &SyncState,
    ) -> Result<Cleanup<SyncOutcome>, PassError<Self>> {
        Ok(delete(state, self).await)
    }

    fn desired_status(&self, outcome: &SyncOutcome, now: jiff::Timestamp) -> OmniSecretSyncStatus {
        desired_status(self, outcome, now)
    }

    /// A synced copy is looked at again every `resync` (drift in the workload cluster is not
    /// watched), or only on a change when the re-check is off; a suspended one when it changes.
    fn recheck(&self, done: &SyncDone, _ctx: &Context, state: &SyncState) -> Action {
        if state.resync.is_zero() || matches!(done, SyncDone::Suspended) {
            Action::await_change()
        } else {
            Action::requeue(periodic(state.resync))
        }
    }
}

/// The OmniSecretSync controller, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<S: Shutdown>(
    ctx: &Arc<Context>,
    setup: &Setup<'_>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniSecretSync>(ctx, watches, |s| {
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
            cluster_triggers(
                watches.of::<OmniCluster>().subscribe(),
                ClusterTrigger::Identity,
            ),
            move |c: Cached<OmniCluster>| index.referring_to("cluster", &c),
        )
        .watches_stream(secret_changes_of(watches), move |secret: Cached<Secret>| {
            by_secret.referring_to("secret", &secret)
        });
    let state = SyncState {
        workload: setup.workload.clone(),
        secret_policy: setup.config.secret_policy,
        resync: setup.config.secret_sync_resync,
        default_service_account: setup.config.tenancy.default_service_account.clone(),
    };
    drive::<OmniSecretSync>(controller, ctx.clone(), state, shutdown)
}

#[cfg(test)]
mod fixtures;
