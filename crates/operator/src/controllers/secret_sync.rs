//! OmniSecretSync: copy a management-cluster Secret into a workload cluster.
//!
//! Fixes over the original: a target Secret this sync does not own is never written (unless it
//! carries the adoption annotation), labels and annotations added by others survive updates,
//! and the copy is re-checked every [`RESYNC`] so drift in the workload cluster is corrected.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};

use super::index::{RefKey, namespace_of};
use super::pipeline::{Cleanup, Pipeline, unless_deleted_meanwhile};
use super::{Context, Error, RetryPolicy, drive, indexed_controller_for, pipeline};
use crate::api::common::{
    Condition, DeletionPolicy, condition_types as ct, reasons, set_condition,
};
use crate::api::secret_sync::OmniSecretSyncStatus;
use crate::api::validation::Validation;
use crate::api::{OmniCluster, OmniSecretSync};
use crate::delete_guard::{Deleted, delete_observed};
use crate::secret_policy::{self, SecretUse};
use crate::workload::WorkloadError;

/// Periodic re-check of a synced Secret (drift correction).
pub const RESYNC: Duration = Duration::from_secs(300);
/// Re-check while a dependency is missing.
pub const RETRY: Duration = Duration::from_secs(60);
/// Annotation a user puts on an existing workload Secret to let a sync take it over.
pub const ADOPT_ANNOTATION: &str = "omni.texashpc.com/adopt";
/// Condition reason for a target Secret that belongs to someone else.
pub const REASON_TARGET_NOT_OWNED: &str = "TargetNotOwned";

const KIND: &str = "OmniSecretSync";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "omni-cluster-operator");
const UID_LABEL: &str = "omni.texashpc.com/secret-sync-uid";
const CLUSTER_LABEL: &str = "omni.texashpc.com/cluster";
const NAME_ANNOTATION: &str = "omni.texashpc.com/secret-sync-name";
const SOURCE_ANNOTATION: &str = "omni.texashpc.com/secret-sync-source";
const HASH_ANNOTATION: &str = "omni.texashpc.com/secret-sync-hash";
const CONTENT_ANNOTATION: &str = "omni.texashpc.com/secret-sync-content";

/// Lowercase hex SHA-256 of `{"version":"v1","type":..,"data":{key: base64}}` (keys sorted;
/// empty data is `null`).
pub fn content_hash(type_: &str, data: &BTreeMap<String, ByteString>) -> String {
    let encoded: Option<BTreeMap<&str, String>> = (!data.is_empty()).then(|| {
        data.iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    base64::engine::general_purpose::STANDARD.encode(&v.0),
                )
            })
            .collect()
    });
    // Field order matters for the hash; build the text by hand rather than rely on map order.
    let payload = format!(
        "{{\"version\":\"v1\",\"type\":{},\"data\":{}}}",
        serde_json::Value::String(type_.to_string()),
        serde_json::to_string(&encoded).unwrap_or_else(|_| "null".into())
    );
    hex::encode(Sha256::digest(payload.as_bytes()))
}

/// Whether `secret` belongs to `sync`: by UID label when the sync has a UID, else by name
/// annotation.
pub fn is_owned(secret: &Secret, sync: &OmniSecretSync) -> bool {
    match sync.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => {
            secret.labels().get(UID_LABEL).map(String::as_str) == Some(uid)
        }
        _ => secret.annotations().get(NAME_ANNOTATION) == sync.metadata.name.as_ref(),
    }
}

/// Whether the user allowed taking `secret` over.
pub fn adoptable(secret: &Secret) -> bool {
    secret
        .annotations()
        .get(ADOPT_ANNOTATION)
        .map(String::as_str)
        == Some("true")
}

/// The target Secret as this sync wants it (parity §8.3).
pub fn desired_target(
    sync: &OmniSecretSync,
    source: &Secret,
    cluster_name: &str,
) -> (Secret, String) {
    let type_ = sync
        .spec
        .type_
        .clone()
        .or_else(|| source.type_.clone())
        .unwrap_or_else(|| "Opaque".to_string());
    let data = source.data.clone().unwrap_or_default();
    let hash = content_hash(&type_, &data);
    let mut labels = sync.spec.labels.clone().unwrap_or_default();
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    labels.insert(
        UID_LABEL.into(),
        sync.metadata.uid.clone().unwrap_or_default(),
    );
    labels.insert(CLUSTER_LABEL.into(), cluster_name.into());
    let mut annotations = sync.spec.annotations.clone().unwrap_or_default();
    annotations.insert(NAME_ANNOTATION.into(), sync.name_any());
    annotations.insert(
        SOURCE_ANNOTATION.into(),
        format!(
            "{}/{}",
            source.namespace().unwrap_or_default(),
            source.name_any()
        ),
    );
    annotations.insert(HASH_ANNOTATION.into(), hash.clone());
    annotations.insert(CONTENT_ANNOTATION.into(), "v1".into());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(sync.spec.target_secret_ref.name.clone()),
            namespace: Some(sync.spec.target_secret_ref.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some(type_),
        data: (!data.is_empty()).then_some(data),
        ..Secret::default()
    };
    (secret, hash)
}

/// What to do with the workload cluster's target Secret.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// It does not exist: create it.
    Create(Secret),
    /// It already matches.
    NoChange,
    /// Update it to this object (third-party labels/annotations kept).
    Update(Secret),
    /// The type differs (immutable): delete and create.
    Recreate(Secret),
    /// It exists and belongs to someone else: leave it alone.
    NotOwned,
}

/// Pure: compare the existing target with the desired one.
pub fn plan(sync: &OmniSecretSync, existing: Option<&Secret>, desired: Secret) -> Plan {
    let Some(existing) = existing else {
        return Plan::Create(desired);
    };
    if !is_owned(existing, sync) && !adoptable(existing) {
        return Plan::NotOwned;
    }
    if existing.type_ != desired.type_ {
        return Plan::Recreate(desired);
    }
    let mut merged = existing.clone();
    let labels = merged.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(desired.metadata.labels.clone().unwrap_or_default());
    let annotations = merged
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.extend(desired.metadata.annotations.clone().unwrap_or_default());
    // Adoption is a one-time permission; once owned, the marker has done its job.
    annotations.remove(ADOPT_ANNOTATION);
    merged.data = desired.data.clone();
    if merged.data.is_none() && existing.data.as_ref().is_some_and(BTreeMap::is_empty) {
        merged.data = existing.data.clone();
    }
    merged.string_data = None;
    if merged.metadata.labels == existing.metadata.labels
        && merged.metadata.annotations == existing.metadata.annotations
        && merged.data.clone().unwrap_or_default() == existing.data.clone().unwrap_or_default()
    {
        Plan::NoChange
    } else {
        Plan::Update(merged)
    }
}

/// Why an OmniSecretSync is not synced; the message is its condition's and Event's.
#[derive(Debug, thiserror::Error)]
pub enum SecretSyncFailure {
    /// The spec is invalid (it bypassed admission).
    #[error("{0}")]
    InvalidSpec(String),
    /// The Secret policy refuses a Secret the sync would read.
    #[error("{0}")]
    Refused(String),
    /// The referenced OmniCluster does not exist.
    #[error("OmniCluster {cluster:?} does not exist")]
    MissingCluster {
        /// `spec.clusterRef.name`.
        cluster: String,
    },
    /// The source Secret does not exist.
    #[error("source Secret \"{namespace}/{name}\" does not exist")]
    MissingSource {
        /// The sync's namespace.
        namespace: String,
        /// `spec.sourceSecretRef.name`.
        name: String,
    },
    /// The kubeconfig Secret does not exist.
    #[error("kubeconfig Secret \"{namespace}/{name}\" does not exist")]
    MissingKubeconfig {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
    },
    /// The kubeconfig Secret lacks the key.
    #[error("kubeconfig Secret \"{namespace}/{name}\" does not contain key {key:?}")]
    MissingKubeconfigKey {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
        /// `spec.kubeconfigSecretRef.key`.
        key: String,
    },
    /// The kubeconfig does not make a usable client.
    #[error("kubeconfig Secret \"{namespace}/{name}\" key {key:?} is invalid: {detail}")]
    InvalidKubeconfig {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
        /// `spec.kubeconfigSecretRef.key`.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The kubeconfig Secret could not be read.
    #[error("load workload kubeconfig: {0}")]
    KubeconfigUnreadable(WorkloadError),
    /// A request to the workload cluster failed during `step`.
    #[error("{step}: {error}")]
    Workload {
        /// What was being done, naming the object.
        step: String,
        /// The workload cluster's answer.
        #[source]
        error: kube::Error,
    },
    /// The target changed while its type was being replaced.
    #[error(
        "workload Secret \"{namespace}/{name}\" changed while its type was being replaced; it was left alone and is checked again"
    )]
    TargetChanged {
        /// The target's namespace.
        namespace: String,
        /// The target's name.
        name: String,
    },
    /// The target exists and belongs to someone else.
    #[error(
        "workload Secret \"{namespace}/{name}\" exists and is not owned by this OmniSecretSync; it was left unchanged (annotate it {ADOPT_ANNOTATION}=\"true\" to let the sync take it over)"
    )]
    TargetNotOwned {
        /// The target's namespace.
        namespace: String,
        /// The target's name.
        name: String,
    },
    /// Deleting a copy the sync owns failed (the workload cluster's message).
    #[error("{0}")]
    DeleteFailed(String),
}

impl SecretSyncFailure {
    /// The condition reason this failure is reported under.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) | Self::Refused(_) | Self::InvalidKubeconfig { .. } => {
                reasons::VALIDATION_FAILED
            }
            Self::MissingCluster { .. } => reasons::MISSING_CLUSTER,
            Self::MissingSource { .. }
            | Self::MissingKubeconfig { .. }
            | Self::MissingKubeconfigKey { .. } => reasons::MISSING_SECRET,
            Self::KubeconfigUnreadable(_) | Self::Workload { .. } | Self::TargetChanged { .. } => {
                reasons::SYNC_FAILED
            }
            Self::TargetNotOwned { .. } => REASON_TARGET_NOT_OWNED,
            Self::DeleteFailed(_) => reasons::DELETE_FAILED,
        }
    }

    /// What the reconcile does next.
    pub fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) | Self::Refused(_) => RetryPolicy::AwaitChange,
            // An unowned target lives in the workload cluster, which is not watched: poll so
            // an adoption annotation is noticed. Missing references are polled likewise.
            Self::TargetNotOwned { .. }
            | Self::MissingCluster { .. }
            | Self::MissingSource { .. }
            | Self::MissingKubeconfig { .. }
            | Self::MissingKubeconfigKey { .. }
            | Self::InvalidKubeconfig { .. } => RetryPolicy::Poll(RETRY),
            Self::KubeconfigUnreadable(_)
            | Self::Workload { .. }
            | Self::TargetChanged { .. }
            | Self::DeleteFailed(_) => RetryPolicy::Backoff,
        }
    }
}

/// [`SecretSyncFailure::Workload`] for a failed `step`.
fn workload_failed(step: String) -> impl FnOnce(kube::Error) -> SecretSyncFailure {
    move |error| SecretSyncFailure::Workload { step, error }
}

struct Synced {
    hash: String,
    type_: String,
    changed: bool,
}

async fn sync_target(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    source: &Secret,
    cluster_name: &str,
) -> Result<Synced, SecretSyncFailure> {
    let target = &sync.spec.target_secret_ref;
    let (ns, name) = (&target.namespace, &target.name);
    if sync.spec.create_namespace {
        let namespaces: Api<Namespace> = Api::all(workload.clone());
        let found = namespaces
            .get_opt(ns)
            .await
            .map_err(workload_failed(format!("get workload namespace {ns:?}")))?;
        if found.is_none() {
            let n = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            match namespaces.create(&PostParams::default(), &n).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    return Err(workload_failed(format!("create workload namespace {ns:?}"))(e));
                }
            }
        }
    }
    let api: Api<Secret> = Api::namespaced(workload.clone(), ns);
    let existing = api.get_opt(name).await.map_err(workload_failed(format!(
        "get workload Secret \"{ns}/{name}\""
    )))?;
    let (desired, hash) = desired_target(sync, source, cluster_name);
    let type_ = desired.type_.clone().unwrap_or_default();
    let pp = PostParams::default();
    let changed = match plan(sync, existing.as_ref(), desired) {
        Plan::NoChange => false,
        Plan::NotOwned => {
            return Err(SecretSyncFailure::TargetNotOwned {
                namespace: ns.clone(),
                name: name.clone(),
            });
        }
        Plan::Create(s) => {
            api.create(&pp, &s).await.map_err(workload_failed(format!(
                "create workload Secret \"{ns}/{name}\""
            )))?;
            true
        }
        Plan::Update(s) => {
            api.replace(name, &pp, &s)
                .await
                .map_err(workload_failed(format!(
                    "update workload Secret \"{ns}/{name}\""
                )))?;
            true
        }
        Plan::Recreate(s) => {
            // Only the copy that was judged (same uid and resourceVersion) is deleted.
            if let Some(observed) = existing.as_ref() {
                let deleted = delete_observed(&api, observed)
                    .await
                    .map_err(workload_failed(format!(
                        "delete workload Secret \"{ns}/{name}\" to change its type"
                    )))?;
                if deleted == Deleted::Changed {
                    return Err(SecretSyncFailure::TargetChanged {
                        namespace: ns.clone(),
                        name: name.clone(),
                    });
                }
            }
            api.create(&pp, &s).await.map_err(workload_failed(format!(
                "create workload Secret \"{ns}/{name}\""
            )))?;
            true
        }
    };
    Ok(Synced {
        hash,
        type_,
        changed,
    })
}

/// Deletes the workload Secret `ns/name` if it exists and this sync owns it. The delete is
/// conditional on the checked object ([`delete_observed`]): a Secret replaced in between by one
/// this sync does not own survives.
async fn delete_owned(
    workload: &kube::Client,
    sync: &OmniSecretSync,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let api: Api<Secret> = Api::namespaced(workload.clone(), ns);
    // A changed object is read and judged again; three rounds outlast any honest writer.
    for _ in 0..3 {
        let observed = match api.get_opt(name).await {
            Ok(Some(s)) if is_owned(&s, sync) => s,
            Ok(_) => return Ok(()),
            Err(e) => return Err(format!("get workload Secret \"{ns}/{name}\": {e}")),
        };
        match delete_observed(&api, &observed).await {
            Ok(Deleted::Deleted | Deleted::Gone) => return Ok(()),
            Ok(Deleted::Changed) => continue,
            Err(e) => return Err(format!("delete workload Secret \"{ns}/{name}\": {e}")),
        }
    }
    Err(format!(
        "workload Secret \"{ns}/{name}\" keeps changing while it is being deleted; retrying"
    ))
}

fn kubeconfig_failure(sync: &OmniSecretSync, e: WorkloadError) -> SecretSyncFailure {
    let namespace = sync.namespace().unwrap_or_default();
    let name = sync.spec.kubeconfig_secret_ref.name.clone();
    let key = sync.spec.kubeconfig_secret_ref.key.clone();
    match e {
        WorkloadError::MissingSecret { .. } => {
            SecretSyncFailure::MissingKubeconfig { namespace, name }
        }
        WorkloadError::MissingKey { .. } => SecretSyncFailure::MissingKubeconfigKey {
            namespace,
            name,
            key,
        },
        WorkloadError::Invalid { detail, .. } => SecretSyncFailure::InvalidKubeconfig {
            namespace,
            name,
            key,
            detail,
        },
        WorkloadError::Refused { reason } => SecretSyncFailure::Refused(reason),
        e @ WorkloadError::Read { .. } => SecretSyncFailure::KubeconfigUnreadable(e),
    }
}

/// What one pass did, and whether the cluster it names exists (`accepted`; `None` when the
/// pass did not look).
pub(crate) struct SyncOutcome {
    result: Result<Synced, SecretSyncFailure>,
    accepted: Option<bool>,
}

impl SyncOutcome {
    fn failed(failure: SecretSyncFailure, accepted: Option<bool>) -> Self {
        Self {
            result: Err(failure),
            accepted,
        }
    }
}

/// Pure: the status after an attempt. Times move only when the outcome or the copy changed.
fn desired_status(
    sync: &OmniSecretSync,
    outcome: &SyncOutcome,
    now: jiff::Timestamp,
) -> OmniSecretSyncStatus {
    let SyncOutcome { result, accepted } = outcome;
    let old = sync.status.clone().unwrap_or_default();
    let generation = sync.metadata.generation;
    let mut s = old.clone();
    s.observed_generation = generation;
    s.cluster_ref = Some(sync.spec.cluster_ref.name.clone());
    s.kubeconfig_secret_ref = Some(sync.spec.kubeconfig_secret_ref.name.clone());
    s.kubeconfig_secret_key = Some(sync.spec.kubeconfig_secret_ref.key.clone());
    s.source_secret_ref = Some(sync.spec.source_secret_ref.name.clone());
    let set = |s: &mut OmniSecretSyncStatus, type_: &str, ok: bool, reason: &str, message: &str| {
        set_condition(
            &mut s.conditions,
            Condition::new(type_, ok.into(), reason, message, generation, now),
        );
    };
    if let Some(accepted) = *accepted {
        let name = &sync.spec.cluster_ref.name;
        if accepted {
            set(
                &mut s,
                ct::ACCEPTED,
                true,
                reasons::ACCEPTED,
                &format!("attached to OmniCluster {name:?}"),
            );
        } else {
            set(
                &mut s,
                ct::ACCEPTED,
                false,
                reasons::MISSING_CLUSTER,
                &format!("OmniCluster {name:?} does not exist"),
            );
        }
    }
    let changed_copy;
    match result {
        Ok(done) => {
            let t = &sync.spec.target_secret_ref;
            let m = format!(
                "synced Secret {:?} to workload Secret \"{}/{}\"",
                sync.spec.source_secret_ref.name, t.namespace, t.name
            );
            set(&mut s, ct::SYNCED, true, reasons::SYNCED, &m);
            set(&mut s, ct::READY, true, reasons::SYNCED, &m);
            s.target_secret_ref = Some(t.name.clone());
            s.target_namespace = Some(t.namespace.clone());
            s.secret_type = Some(done.type_.clone());
            s.secret_hash = Some(done.hash.clone());
            s.last_error = Some(String::new());
            changed_copy = done.changed;
        }
        Err(f) => {
            let message = f.to_string();
            set(&mut s, ct::SYNCED, false, f.reason(), &message);
            set(&mut s, ct::READY, false, f.reason(), &message);
            s.last_error = Some(message);
            changed_copy = false;
        }
    }
    if s != old || changed_copy {
        s.last_attempt_time = Some(now);
        if result.is_ok() {
            s.last_sync_time = Some(now);
        }
    }
    s
}

/// A client of the workload cluster from the sync's kubeconfig Secret.
async fn workload_client(
    ctx: &Context,
    sync: &OmniSecretSync,
) -> Result<kube::Client, SecretSyncFailure> {
    let namespace = sync.namespace().unwrap_or_default();
    let k = &sync.spec.kubeconfig_secret_ref;
    ctx.workload
        .get(&namespace, &k.name, &k.key, &ctx.secret_policy, KIND)
        .await
        .map_err(|e| kubeconfig_failure(sync, e))
}

/// Deletes the copy this sync owns when its deletion policy says so.
async fn delete(ctx: &Context, sync: &OmniSecretSync) -> Result<Cleanup<SyncOutcome>, Error> {
    if sync.deletion_policy() != Some(DeletionPolicy::Delete) {
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
    let Some(source) = ctx.api::<Secret>(&namespace).get_opt(source_name).await? else {
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
    if sync.deletion_policy() == Some(DeletionPolicy::Delete)
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

/// Runs the OmniSecretSync controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (controller, index) = indexed_controller_for::<OmniSecretSync>(&ctx, |s| {
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
            super::cluster_changes(ctx.watch_api::<OmniCluster>()),
            move |c: OmniCluster| {
                index.get(&RefKey::new("cluster", &namespace_of(&c), &c.name_any()))
            },
        )
        .watches(
            ctx.watch_api::<Secret>(),
            watcher::Config::default(),
            move |secret: Secret| {
                by_secret.get(&RefKey::new(
                    "secret",
                    &namespace_of(&secret),
                    &secret.name_any(),
                ))
            },
        );
    drive::<OmniSecretSync, _, _>(controller, ctx, shutdown, pipeline::reconcile).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::find_condition;

    fn sync() -> OmniSecretSync {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniSecretSync",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u-1", "generation": 1},
            "spec": {
                "clusterRef": {"name": "prod"},
                "kubeconfigSecretRef": {"name": "kc", "key": "kubeconfig"},
                "sourceSecretRef": {"name": "src"},
                "targetSecretRef": {"name": "dst", "namespace": "apps"},
                "labels": {"team": "a"},
                "deletionPolicy": "Delete"
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn source() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("src".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([
                ("a".to_string(), ByteString(b"one".to_vec())),
                ("b".to_string(), ByteString(b"two".to_vec())),
            ])),
            ..Secret::default()
        }
    }

    #[test]
    fn hash_matches_the_documented_payload() {
        let data = source().data.unwrap_or_default();
        let expected = hex::encode(Sha256::digest(
            br#"{"version":"v1","type":"Opaque","data":{"a":"b25l","b":"dHdv"}}"#,
        ));
        assert_eq!(content_hash("Opaque", &data), expected);
        let empty = hex::encode(Sha256::digest(
            br#"{"version":"v1","type":"Opaque","data":null}"#,
        ));
        assert_eq!(content_hash("Opaque", &BTreeMap::new()), empty);
    }

    #[test]
    fn unowned_target_is_left_alone_unless_adoptable() {
        let s = sync();
        let (desired, _) = desired_target(&s, &source(), "prod");
        let mut foreign = Secret {
            metadata: ObjectMeta {
                name: Some("dst".into()),
                namespace: Some("apps".into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        assert_eq!(plan(&s, Some(&foreign), desired.clone()), Plan::NotOwned);
        foreign.metadata.annotations = Some(BTreeMap::from([(
            ADOPT_ANNOTATION.to_string(),
            "true".to_string(),
        )]));
        let Plan::Update(updated) = plan(&s, Some(&foreign), desired) else {
            panic!("adoptable target must be updated");
        };
        assert!(is_owned(&updated, &s));
        assert!(!updated.annotations().contains_key(ADOPT_ANNOTATION));
    }

    #[test]
    fn update_keeps_third_party_metadata_and_idle_is_no_change() {
        let s = sync();
        let (desired, _) = desired_target(&s, &source(), "prod");
        let Plan::Create(created) = plan(&s, None, desired.clone()) else {
            panic!("missing target must be created");
        };
        assert_eq!(created.labels().get("team").map(String::as_str), Some("a"));
        assert_eq!(
            created.labels().get(UID_LABEL).map(String::as_str),
            Some("u-1")
        );
        let mut live = created.clone();
        live.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("other".into(), "x".into());
        assert_eq!(plan(&s, Some(&live), desired.clone()), Plan::NoChange);
        live.data = Some(BTreeMap::from([(
            "a".to_string(),
            ByteString(b"drift".to_vec()),
        )]));
        let Plan::Update(fixed) = plan(&s, Some(&live), desired.clone()) else {
            panic!("drift must be corrected");
        };
        assert_eq!(fixed.labels().get("other").map(String::as_str), Some("x"));
        assert_eq!(fixed.data, source().data);
        live.type_ = Some("kubernetes.io/tls".into());
        assert!(matches!(plan(&s, Some(&live), desired), Plan::Recreate(_)));
    }

    /// Each failure knows its condition reason and what happens next; the messages are the
    /// ones the docs and system tests pin.
    #[test]
    fn failures_carry_their_reason_retry_and_message() {
        let (ns, name) = ("apps".to_string(), "dst".to_string());
        let cases = [
            (
                SecretSyncFailure::MissingCluster {
                    cluster: "prod".into(),
                },
                "MissingCluster",
                RetryPolicy::Poll(RETRY),
                r#"OmniCluster "prod" does not exist"#.to_string(),
            ),
            (
                SecretSyncFailure::MissingKubeconfigKey {
                    namespace: ns.clone(),
                    name: "kc".into(),
                    key: "value".into(),
                },
                "MissingSecret",
                RetryPolicy::Poll(RETRY),
                r#"kubeconfig Secret "apps/kc" does not contain key "value""#.to_string(),
            ),
            (
                SecretSyncFailure::InvalidSpec("spec.targetSecretRef.name: required".into()),
                "ValidationFailed",
                RetryPolicy::AwaitChange,
                "spec.targetSecretRef.name: required".to_string(),
            ),
            (
                SecretSyncFailure::TargetChanged {
                    namespace: ns.clone(),
                    name: name.clone(),
                },
                "SyncFailed",
                RetryPolicy::Backoff,
                r#"workload Secret "apps/dst" changed while its type was being replaced; it was left alone and is checked again"#.to_string(),
            ),
            (
                SecretSyncFailure::TargetNotOwned {
                    namespace: ns,
                    name,
                },
                REASON_TARGET_NOT_OWNED,
                RetryPolicy::Poll(RETRY),
                format!(
                    r#"workload Secret "apps/dst" exists and is not owned by this OmniSecretSync; it was left unchanged (annotate it {ADOPT_ANNOTATION}="true" to let the sync take it over)"#
                ),
            ),
            (
                SecretSyncFailure::DeleteFailed("delete workload Secret \"apps/dst\": x".into()),
                "DeleteFailed",
                RetryPolicy::Backoff,
                "delete workload Secret \"apps/dst\": x".to_string(),
            ),
        ];
        for (failure, reason, retry, message) in cases {
            assert_eq!(failure.reason(), reason, "{failure:?}");
            assert_eq!(failure.retry(), retry, "{failure:?}");
            assert_eq!(failure.to_string(), message);
        }
    }

    #[test]
    fn a_failure_is_the_status_reason_and_last_error() {
        let s = sync();
        let missing = SecretSyncFailure::MissingSource {
            namespace: "ns".into(),
            name: "src".into(),
        };
        let failed = desired_status(
            &s,
            &SyncOutcome::failed(missing, Some(true)),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let ready = find_condition(&failed.conditions, "Ready");
        assert_eq!(ready.map(|c| c.reason.as_str()), Some("MissingSecret"));
        assert_eq!(
            failed.last_error.as_deref(),
            Some(r#"source Secret "ns/src" does not exist"#)
        );
    }

    /// A spec that bypassed admission is refused by the webhook's own rules, naming the field,
    /// and waits for a change.
    #[test]
    fn an_invalid_spec_is_reported_with_the_webhooks_field_path() {
        let mut s = sync();
        s.spec.deletion_policy = "Keep".into();
        let validation = Pipeline::validate(&s);
        assert!(!validation.is_valid());
        let outcome = <OmniSecretSync as Pipeline>::invalid(validation.error_summary());
        let status = desired_status(&s, &outcome, jiff::Timestamp::UNIX_EPOCH);
        let ready = find_condition(&status.conditions, "Ready");
        assert_eq!(
            ready.map(|c| (c.reason.as_str(), c.message.as_str())),
            Some((
                "ValidationFailed",
                r#"spec.deletionPolicy: Unsupported value: "Keep": supported values: "Delete", "Orphan""#
            ))
        );
        assert_eq!(
            outcome.result.err().map(|f| f.retry()),
            Some(RetryPolicy::AwaitChange)
        );
    }

    #[test]
    fn idle_status_is_stable() {
        let mut s = sync();
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let ok = || SyncOutcome {
            result: Ok(Synced {
                hash: "h".into(),
                type_: "Opaque".into(),
                changed: false,
            }),
            accepted: Some(true),
        };
        let first = desired_status(&s, &ok(), t0);
        assert_eq!(first.last_sync_time, Some(t0));
        let ready = find_condition(&first.conditions, "Ready").map(|c| c.message.clone());
        assert_eq!(
            ready.as_deref(),
            Some(r#"synced Secret "src" to workload Secret "apps/dst""#)
        );
        s.status = Some(first.clone());
        let again = desired_status(&s, &ok(), t0 + jiff::SignedDuration::from_secs(300));
        assert_eq!(again, first);
    }
}
