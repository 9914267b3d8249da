//! OmniSecretSync: copy a management-cluster Secret (or keys of several, mapped and templated)
//! into a workload cluster, in one namespace or every namespace a selector matches.
//!
//! Fixes over the original: a target Secret this sync does not own is never written (unless it
//! carries the adoption annotation), labels and annotations added by others survive updates,
//! and the copy is re-checked every `RESYNC` so drift in the workload cluster is corrected.

mod failure;
mod namespaces;
mod outcome;
mod target;
mod write;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use self::failure::{SecretSyncFailure, kubeconfig_failure};
use self::outcome::{SyncDone, SyncOutcome, desired_status};
use self::target::Content;
use self::write::{Synced, delete_owned, sync_target};
use super::cluster::dependants::start_gate;
use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::kubeconfig_export::writing_export;
use super::shared::context::Context;
use super::shared::decoded::Cached;
use super::shared::error::{PassError, periodic};
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefKey, namespace_of};
use super::shared::pipeline::{Cleanup, Pipeline, unless_deleted_meanwhile, webhook_rules};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::setup::Setup;
use super::shared::status::reported;
use super::shared::triggers::{SecretMeta, secret_changes_of};
use super::shared::watches::Watches;
use crate::api::common::DeletionPolicy;
use crate::api::secret_sync::OmniSecretSyncStatus;
use crate::api::{OmniCluster, OmniKubeconfigExport, OmniSecretSync};
use crate::domain::fleet_template::ClusterFacts;
use crate::domain::impersonation::{self, ReadError, Reader};
use crate::domain::secret_data::DataError;
use crate::domain::secret_policy::{self, SecretPolicy, SecretUse};
use crate::domain::workload::{WorkloadClients, WorkloadError};
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
    /// The exports, to tell a kubeconfig Secret that an export is about to write from one
    /// nobody makes.
    exports: Store<Cached<OmniKubeconfigExport>>,
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
        .map_err(|e| match e {
            WorkloadError::MissingSecret { .. } => {
                match writing_export(&state.exports, &namespace, &k.name) {
                    Some(export) => SecretSyncFailure::KubeconfigPending {
                        namespace: namespace.clone(),
                        name: k.name.clone(),
                        export,
                    },
                    None => kubeconfig_failure(sync, e),
                }
            }
            e => kubeconfig_failure(sync, e),
        })
}

/// Whether the sync copies by `namespaceSelector`, now or at its last pass (its copies are
/// then found by their label, wherever they are).
fn spread_out(sync: &OmniSecretSync) -> bool {
    sync.spec.target_secret_ref.namespace_selector.is_some()
        || sync
            .status
            .as_ref()
            .is_some_and(|s| s.synced_namespace_count.is_some())
}

/// Deletes the copies this sync owns when its deletion policy says so.
async fn delete(state: &SyncState, sync: &OmniSecretSync) -> Cleanup<SyncOutcome> {
    if sync.spec.deletion_policy != DeletionPolicy::Delete {
        return Cleanup::Done;
    }
    let workload = match workload_client(state, sync).await {
        Ok(c) => c,
        Err(f) => return Cleanup::Waiting(SyncOutcome::failed(f)),
    };
    if spread_out(sync) {
        return match namespaces::remove_copies(&workload, sync, None).await {
            Ok(_) => Cleanup::Done,
            Err(f) => Cleanup::Waiting(SyncOutcome::failed(f)),
        };
    }
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

/// Every source Secret of `sync`, by handle, read as the sync's reader and allowed by the
/// Secret policy; or why not.
async fn read_sources(
    ctx: &Context,
    state: &SyncState,
    sync: &OmniSecretSync,
) -> Result<Result<BTreeMap<String, Secret>, SecretSyncFailure>, kube::Error> {
    let namespace = sync.namespace().unwrap_or_default();
    let reader = Reader::of(
        &namespace,
        sync.spec.service_account_name.as_deref(),
        state.default_service_account.as_deref(),
    );
    let mut sources = BTreeMap::new();
    for (handle, name, field) in sync.spec.source_refs() {
        let source =
            match impersonation::get::<Secret>(&ctx.client, &reader, &namespace, name).await {
                Ok(Some(source)) => source,
                Ok(None) => {
                    let f = SecretSyncFailure::MissingSource {
                        namespace,
                        name: name.to_string(),
                    };
                    return Ok(Err(f));
                }
                Err(e @ ReadError::Denied { .. }) => {
                    return Ok(Err(SecretSyncFailure::AccessDenied(format!(
                        "{e} ({field})"
                    ))));
                }
                Err(ReadError::Api(e)) => return Err(e),
            };
        // Before anything is copied: the Omni key and service-account tokens never leave.
        let policy = &state.secret_policy;
        if let Some(reason) =
            secret_policy::check(&ctx.client, policy, &source, KIND, SecretUse::SyncSource).await?
        {
            return Ok(Err(SecretSyncFailure::Refused(reason)));
        }
        sources.insert(handle.to_string(), source);
    }
    Ok(Ok(sources))
}

/// The copy's content from `sources`, or the failure naming the entry or template.
fn content_of(
    sync: &OmniSecretSync,
    sources: &BTreeMap<String, Secret>,
    cluster: &OmniCluster,
) -> Result<Content, SecretSyncFailure> {
    Content::of(sync, sources, &ClusterFacts::of(cluster)).map_err(|e| match e {
        DataError::MissingKey { secret, key, field } => SecretSyncFailure::MissingSourceKey {
            namespace: sync.namespace().unwrap_or_default(),
            name: secret,
            key,
            field,
        },
        DataError::Template(e) => SecretSyncFailure::TemplateFailed(e),
    })
}

/// Observe the cluster, sources and kubeconfig; write the copy into the workload cluster.
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
    let sources = match read_sources(ctx, state, sync).await? {
        Ok(sources) => sources,
        Err(f @ SecretSyncFailure::MissingSource { .. }) => {
            return unless_deleted_meanwhile(ctx, sync, failed(true, f)).await;
        }
        Err(f) => return Ok(failed(true, f)),
    };
    let content = match content_of(sync, &sources, &cluster) {
        Ok(content) => content,
        Err(f) => return Ok(failed(true, f)),
    };
    let workload = match workload_client(state, sync).await {
        Ok(c) => c,
        Err(f) => return unless_deleted_meanwhile(ctx, sync, failed(true, f)).await,
    };
    let omni_name = cluster.effective_cluster_name();
    let result = match &sync.spec.target_secret_ref.namespace_selector {
        Some(selector) => {
            namespaces::sync_selected(&workload, sync, &content, &omni_name, selector)
                .await
                .and_then(|spread| {
                    if spread.failed.is_empty() {
                        let changed = spread.changed;
                        Ok(Synced::new(&content, changed, Some(spread.synced)))
                    } else {
                        Err(SecretSyncFailure::Namespaces(spread))
                    }
                })
        }
        None => sync_one(&workload, sync, &content, &omni_name).await,
    };
    Ok(SyncOutcome::new(Some(true), result.map(SyncDone::Copied)))
}

/// The copy in `spec.targetSecretRef.namespace`. Under `Delete`, a copy left under a former
/// name or namespace, or in the namespaces a former `namespaceSelector` matched, is removed
/// (if this sync owns it).
async fn sync_one(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    content: &Content,
    cluster_name: &str,
) -> Result<Synced, SecretSyncFailure> {
    let st = sync.status.clone().unwrap_or_default();
    let t = &sync.spec.target_secret_ref;
    let mut changed = false;
    if sync.spec.deletion_policy == DeletionPolicy::Delete {
        if st.synced_namespace_count.is_some() {
            let keep = Some((t.namespace.as_str(), t.name.as_str()));
            changed |= namespaces::remove_copies(workload, sync, keep).await?;
        } else if let (Some(old_ns), Some(old_name)) = (&st.target_namespace, &st.target_secret_ref)
            && (old_ns != &t.namespace || old_name != &t.name)
        {
            delete_owned(workload, sync, old_ns, old_name)
                .await
                .map_err(SecretSyncFailure::DeleteFailed)?;
        }
    }
    changed |= sync_target(workload, sync, content, cluster_name).await?;
    Ok(Synced::new(content, changed, None))
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
        let mut keys = vec![
            RefKey::new("cluster", &ns, &s.spec.cluster_ref.name),
            RefKey::new("secret", &ns, &s.spec.kubeconfig_secret_ref.name),
        ];
        // Every source: a change of any of them copies again.
        for (_, name, _) in s.spec.source_refs() {
            keys.push(RefKey::new("secret", &ns, name));
        }
        keys
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
        .watches_stream(
            secret_changes_of(watches),
            move |secret: Cached<SecretMeta>| by_secret.referring_to("secret", &secret),
        );
    let state = SyncState {
        workload: setup.workload.clone(),
        secret_policy: setup.config.secret_policy,
        resync: setup.config.secret_sync_resync,
        default_service_account: setup.config.tenancy.default_service_account.clone(),
        exports: watches.of::<OmniKubeconfigExport>().store(),
    };
    drive::<OmniSecretSync>(controller, ctx.clone(), state, shutdown)
}

#[cfg(test)]
mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    fn export(
        name: &str,
        namespace: &str,
        target: serde_json::Value,
    ) -> Cached<OmniKubeconfigExport> {
        let export: OmniKubeconfigExport = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniKubeconfigExport",
            "metadata": {"name": name, "namespace": namespace, "uid": name},
            "spec": {
                "clusterRef": {"name": "edge"},
                "targetSecretRef": target,
                "serviceAccount": {"user": "argocd", "groups": ["argocd"]},
                "ttl": "24h",
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Cached::new(export)
    }

    /// A missing kubeconfig Secret that an export of the namespace (or one writing into it)
    /// is about to write is told apart from one nobody makes.
    #[test]
    fn the_export_that_writes_a_kubeconfig_is_found() {
        let mut writer = Writer::<Cached<OmniKubeconfigExport>>::new(());
        for obj in [
            export("here", "ns", serde_json::json!({"name": "kc"})),
            export(
                "there",
                "other",
                serde_json::json!({"name": "remote", "namespace": "ns"}),
            ),
            export("elsewhere", "other", serde_json::json!({"name": "kc"})),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(obj));
        }
        let exports = writer.as_reader();
        assert_eq!(
            writing_export(&exports, "ns", "kc").as_deref(),
            Some("here")
        );
        assert_eq!(
            writing_export(&exports, "ns", "remote").as_deref(),
            Some("there")
        );
        assert_eq!(writing_export(&exports, "ns", "nobody-makes-it"), None);
        assert_eq!(writing_export(&exports, "other", "remote"), None);

        let pending = SecretSyncFailure::KubeconfigPending {
            namespace: "ns".into(),
            name: "kc".into(),
            export: "here".into(),
        };
        use crate::controllers::shared::error::{Disposition, Failure as _};
        assert_eq!(pending.reason(), crate::api::Reason::KubeconfigPending);
        assert_eq!(pending.disposition(), Disposition::Waiting);
    }
}
