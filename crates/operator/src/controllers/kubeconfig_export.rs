//! OmniKubeconfigExport: mint a service-account kubeconfig in Omni and keep it, rotated, in a
//! Secret.
//!
//! Fixes over the original: a target Secret this export does not own is never written or
//! deleted (unless annotated `omni.texashpc.com/adopt: "true"`), and failures keep the last
//! known hash and rotation times in status instead of clearing them.
//!
//! The export holds its Secret while OmniHelmReleases or OmniSecretSyncs use it as their
//! kubeconfig ([`IN_USE_FINALIZER`] on the Secret, and a wait in the export's own deletion), so
//! that deleting everything at once — a GitOps prune, a namespace deletion — lets the release
//! be uninstalled and the copy removed before the kubeconfig disappears.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};

use super::index::{RefIndex, RefKey, namespace_of};
use super::secret_sync::{ADOPT_ANNOTATION, REASON_TARGET_NOT_OWNED};
use super::{
    Context, Error, Scope, api_resource, drive, dyn_ref, finalizer, indexed_controller_for,
    instrumented, status,
};
use crate::api::common::{DeletionPolicy, condition_types as ct, reasons};
use crate::api::duration::GoDuration;
use crate::api::kubeconfig_export::{ExportFormat, OmniKubeconfigExportStatus};
use crate::api::{
    OmniCluster, OmniConnection, OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync,
};
use crate::delete_guard::{Deleted, delete_observed};
use crate::export_format;
use crate::metrics::RpcOutcome;

/// Re-check while a dependency is missing.
pub const RETRY: Duration = Duration::from_secs(60);
/// Bound of the usability probe against the workload API server.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "omni-cluster-operator");
const UID_LABEL: &str = "omni.texashpc.com/kubeconfig-export-uid";
const CLUSTER_LABEL: &str = "omni.texashpc.com/cluster";
const NAME_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-name";
const NAMESPACE_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-namespace";
const SPEC_HASH_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-spec-hash";
const HASH_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-hash";
const EXPIRATION_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-expiration-time";
const LAST_ROTATION_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-last-rotation-time";
/// The shape last written (`spec.format`), absent for `Kubeconfig`: a format change removes the
/// keys (and the Argo CD label) of the old shape.
const FORMAT_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-format";

/// Finalizer the export keeps on the Secret it writes. A Secret being deleted (by hand, by a
/// namespace deletion) stays while an OmniHelmRelease or OmniSecretSync still needs it as its
/// kubeconfig — for its own deletion above all: uninstalling the release and removing the copy
/// need the workload cluster's credentials. Like `kubernetes.io/pvc-protection` for volumes.
pub const IN_USE_FINALIZER: &str = "omni.texashpc.com/kubeconfig-in-use";

/// Whether the export's hold is on `secret`.
pub fn holds(secret: &Secret) -> bool {
    secret.finalizers().iter().any(|f| f == IN_USE_FINALIZER)
}

/// Whether `consumer` (an OmniHelmRelease or OmniSecretSync, decoded loosely so one bad object
/// cannot hide the others) uses the Secret `secret` of its namespace as its kubeconfig and may
/// still need it: a live one to work, a deleting one until the operator has finished its
/// cleanup (its finalizer is gone).
pub fn needs_kubeconfig(consumer: &DynamicObject, secret: &str) -> bool {
    consumer
        .data
        .pointer("/spec/kubeconfigSecretRef/name")
        .and_then(serde_json::Value::as_str)
        == Some(secret)
        && (consumer.metadata.deletion_timestamp.is_none()
            || finalizer::has_finalizer(consumer, false))
}

/// The OmniHelmReleases and OmniSecretSyncs in `ns` that still need Secret `secret`, named for
/// a status message (`OmniHelmRelease "app"`).
async fn consumers(ctx: &Context, ns: &str, secret: &str) -> Result<Vec<String>, Error> {
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

/// Puts the hold on `secret` (a Secret this export owns that is not being deleted: a deleting
/// object takes no new finalizers).
fn with_hold(secret: &mut Secret) {
    if !holds(secret) {
        secret
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(IN_USE_FINALIZER.to_string());
    }
}

/// Changes the finalizers of `secret` to `finalizers`, conditional on the resourceVersion it
/// was read at (a concurrent change fails the patch instead of dropping someone's finalizer).
pub(crate) async fn set_secret_finalizers(
    api: &Api<Secret>,
    secret: &Secret,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": secret.metadata.resource_version,
        }
    });
    match api
        .patch(
            &secret.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Lifts the hold from `secret`; a Secret already being deleted then goes.
async fn release_hold(api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    if !holds(secret) {
        return Ok(());
    }
    let rest = secret
        .finalizers()
        .iter()
        .filter(|f| *f != IN_USE_FINALIZER)
        .cloned()
        .collect();
    set_secret_finalizers(api, secret, rest).await
}

fn signed(d: GoDuration) -> jiff::SignedDuration {
    jiff::SignedDuration::from_nanos(d.as_nanos())
}

/// `now` cut to whole seconds: annotation times are second-precision.
pub fn whole_seconds(now: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}

/// Expiration and next rotation for a kubeconfig written at `now` (parity §6.6).
pub fn rotation_times(
    now: jiff::Timestamp,
    ttl: GoDuration,
    renew_before: Option<GoDuration>,
) -> (jiff::Timestamp, jiff::Timestamp) {
    let expiration = now.saturating_add(signed(ttl)).unwrap_or(now);
    let next = match renew_before {
        Some(rb) if rb.is_positive() => expiration.saturating_sub(signed(rb)).unwrap_or(expiration),
        _ => expiration,
    };
    (expiration, next)
}

/// Event reason published when an existing target Secret receives a freshly minted kubeconfig.
pub const ROTATED_REASON: &str = "KubeconfigRotated";

/// Whether rotation is due (boundary inclusive).
pub fn rotation_due(now: jiff::Timestamp, next: jiff::Timestamp) -> bool {
    now >= next
}

/// Requeue delay until `next`; `None` when already due.
pub fn requeue_after(now: jiff::Timestamp, next: jiff::Timestamp) -> Option<Duration> {
    let d = next.duration_since(now);
    (d.is_positive())
        .then(|| Duration::try_from(d).ok())
        .flatten()
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Ownership rule of parity §6.5.
pub fn is_owned(secret: &Secret, export: &OmniKubeconfigExport) -> bool {
    match export.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => {
            secret.labels().get(UID_LABEL).map(String::as_str) == Some(uid)
        }
        _ => secret.annotations().get(NAME_ANNOTATION) == export.metadata.name.as_ref(),
    }
}

/// What the stored Secret says about the current kubeconfig, if it can be reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Hash of the stored kubeconfig.
    pub hash: String,
    /// Its expiration.
    pub expiration: jiff::Timestamp,
    /// When it was written, if recorded.
    pub last_rotation: Option<jiff::Timestamp>,
    /// When it should be rotated.
    pub next_rotation: jiff::Timestamp,
}

/// Pure part of reuse (parity §6.7 step 9, before the probe): the stored data of the shape
/// `format` (`key` is the kubeconfig key of the `Kubeconfig` shape).
pub fn reusable(
    secret: &Secret,
    format: ExportFormat,
    key: &str,
    spec_hash: &str,
    renew_before: Option<GoDuration>,
    now: jiff::Timestamp,
) -> Option<Stored> {
    let data: BTreeMap<String, &[u8]> = secret
        .data
        .as_ref()?
        .iter()
        .map(|(k, v)| (k.clone(), v.0.as_slice()))
        .collect();
    let a = secret.annotations();
    if a.get(SPEC_HASH_ANNOTATION).map(String::as_str) != Some(spec_hash) {
        return None;
    }
    let hash = export_format::data_hash(format, key, &data)?;
    if a.get(HASH_ANNOTATION) != Some(&hash) {
        return None;
    }
    let expiration: jiff::Timestamp = a.get(EXPIRATION_ANNOTATION)?.parse().ok()?;
    let last_rotation = match a.get(LAST_ROTATION_ANNOTATION) {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    let next_rotation = match renew_before {
        Some(rb) if rb.is_positive() => expiration.saturating_sub(signed(rb)).unwrap_or(expiration),
        _ => expiration,
    };
    if rotation_due(now, next_rotation) {
        return None;
    }
    Some(Stored {
        hash,
        expiration,
        last_rotation,
        next_rotation,
    })
}

/// Sets the current context's namespace in `kubeconfig` (YAML).
pub fn with_context_namespace(kubeconfig: &[u8], namespace: &str) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(kubeconfig)
        .map_err(|_| "generated kubeconfig is invalid: not UTF-8".to_string())?;
    let mut kc = crate::kubeconfig::load_without_checks(text, "generated kubeconfig")?;
    let current = kc.current_context.clone().unwrap_or_default();
    let Some(ctx) = kc
        .contexts
        .iter_mut()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_mut())
    else {
        return Err(format!(
            "generated kubeconfig current context {current:?} was not found"
        ));
    };
    ctx.namespace = Some(namespace.to_string());
    serde_saphyr::to_string(&kc)
        .map(String::into_bytes)
        .map_err(|e| format!("write kubeconfig with context namespace: {e}"))
}

/// Builds the Secret to write: the existing one (or a new Opaque one) with operator labels,
/// annotations and `data` (the shape `format`, see `export_format`) set. Third-party metadata
/// and other keys are kept; the keys of a shape this export wrote before are removed.
#[allow(clippy::too_many_arguments)]
pub fn build_target(
    export: &OmniKubeconfigExport,
    existing: Option<&Secret>,
    cluster_name: &str,
    spec_hash: &str,
    format: ExportFormat,
    data: &BTreeMap<String, Vec<u8>>,
    expiration: jiff::Timestamp,
    now: jiff::Timestamp,
) -> Secret {
    let key = export.effective_target_key();
    let owned = existing.is_some_and(|s| is_owned(s, export));
    // What this export wrote last time (only an owned Secret's record is believed).
    let old_format = match existing.filter(|_| owned) {
        Some(s) => match s.annotations().get(FORMAT_ANNOTATION) {
            Some(f) => ExportFormat::parse(f),
            None => Some(ExportFormat::Kubeconfig),
        },
        None => None,
    };
    let mut secret = existing.cloned().unwrap_or_else(|| Secret {
        metadata: ObjectMeta {
            name: Some(export.spec.target_secret_ref.name.clone()),
            namespace: Some(export.effective_target_namespace()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        ..Secret::default()
    });
    let labels = secret.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    labels.insert(
        UID_LABEL.into(),
        export.metadata.uid.clone().unwrap_or_default(),
    );
    labels.insert(CLUSTER_LABEL.into(), cluster_name.into());
    if format == ExportFormat::ArgoCdCluster {
        labels.insert(
            export_format::ARGOCD_SECRET_TYPE.0.into(),
            export_format::ARGOCD_SECRET_TYPE.1.into(),
        );
    } else if old_format == Some(ExportFormat::ArgoCdCluster) {
        // Argo CD must no longer take it for a cluster.
        labels.remove(export_format::ARGOCD_SECRET_TYPE.0);
    }
    let a = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    a.remove(ADOPT_ANNOTATION);
    a.insert(NAME_ANNOTATION.into(), export.name_any());
    a.insert(
        NAMESPACE_ANNOTATION.into(),
        export.namespace().unwrap_or_default(),
    );
    a.insert(SPEC_HASH_ANNOTATION.into(), spec_hash.into());
    a.insert(
        HASH_ANNOTATION.into(),
        export_format::data_hash(format, &key, data).unwrap_or_default(),
    );
    if format == ExportFormat::Kubeconfig {
        a.remove(FORMAT_ANNOTATION);
    } else {
        a.insert(FORMAT_ANNOTATION.into(), format.as_str().into());
    }
    a.insert(
        EXPIRATION_ANNOTATION.into(),
        whole_seconds(expiration).to_string(),
    );
    a.insert(
        LAST_ROTATION_ANNOTATION.into(),
        whole_seconds(now).to_string(),
    );
    let st = export.status.clone().unwrap_or_default();
    let stored = secret.data.get_or_insert_with(BTreeMap::new);
    // A changed key or format moves the credential rather than leaving a stale copy behind.
    if let Some(old_format) = old_format {
        let old_keys: Vec<String> = match old_format {
            // The key of the last export is in status; with another format now, `key` is the
            // Kubeconfig shape's key too (admission allows only the default there), which
            // covers a status rewritten by a failed attempt in between.
            ExportFormat::Kubeconfig => st
                .target_secret_key
                .filter(|_| {
                    st.target_secret_ref.as_deref()
                        == Some(export.spec.target_secret_ref.name.as_str())
                })
                .into_iter()
                .chain((format != ExportFormat::Kubeconfig).then(|| key.clone()))
                .collect(),
            other => export_format::shape_keys(other, &key),
        };
        for old_key in old_keys {
            if !data.contains_key(&old_key) {
                stored.remove(&old_key);
            }
        }
    }
    for (k, v) in data {
        stored.insert(k.clone(), ByteString(v.clone()));
    }
    if secret.metadata.deletion_timestamp.is_none() {
        with_hold(&mut secret);
    }
    secret
}

type Draft = status::Draft<OmniKubeconfigExportStatus>;

/// A status draft of `e`, keeping the stored hash and times, with the spec's references.
fn draft(e: &OmniKubeconfigExport, now: jiff::Timestamp) -> Draft {
    let mut s = e.status.clone().unwrap_or_default();
    s.observed_generation = e.metadata.generation;
    s.cluster_ref = Some(e.spec.cluster_ref.name.clone());
    s.target_secret_ref = Some(e.spec.target_secret_ref.name.clone());
    s.target_secret_namespace = Some(e.effective_target_namespace());
    s.target_secret_key = Some(e.credential_key());
    s.service_account_user = Some(e.spec.service_account.user.clone());
    s.service_account_groups = e.spec.service_account.groups.clone();
    Draft::new(s, e.metadata.generation, now, ct::EXPORTED)
}

async fn write(ctx: &Context, e: &OmniKubeconfigExport, d: Draft) -> Result<(), Error> {
    status::report(ctx, e, &d.s).await?;
    if let Some(exp) = d.s.expiration_time {
        let left = exp.duration_since(ctx.clock.now()).as_secs_f64();
        ctx.metrics
            .set_kubeconfig_expiry(&e.namespace().unwrap_or_default(), &e.name_any(), left);
    }
    Ok(())
}

/// The target's namespace/name: status first when both are recorded, else spec.
fn target_location(e: &OmniKubeconfigExport) -> (String, String) {
    let st = e.status.clone().unwrap_or_default();
    match (st.target_secret_namespace, st.target_secret_ref) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => (ns, name),
        _ => (
            e.effective_target_namespace(),
            e.spec.target_secret_ref.name.clone(),
        ),
    }
}

async fn delete_owned(
    ctx: &Context,
    e: &OmniKubeconfigExport,
    ns: &str,
    name: &str,
) -> Result<(), Error> {
    let api = ctx.api::<Secret>(ns);
    // Conditional on the checked object (uid and resourceVersion): a Secret replaced in between
    // by one this export does not own survives. A changed one is read and judged again.
    for _ in 0..4 {
        let Some(observed) = api.get_opt(name).await?.filter(|s| is_owned(s, e)) else {
            return Ok(());
        };
        if holds(&observed) {
            // The hold comes off first, so the delete removes the Secret rather than marking it.
            release_hold(&api, &observed).await?;
            continue;
        }
        if observed.metadata.deletion_timestamp.is_some() {
            // Already being deleted; what is left is someone else's finalizer.
            return Ok(());
        }
        match delete_observed(&api, &observed).await? {
            Deleted::Deleted | Deleted::Gone => return Ok(()),
            Deleted::Changed => continue,
        }
    }
    Err(Error::Remote(format!(
        "Secret \"{ns}/{name}\" keeps changing while it is being deleted; retrying"
    )))
}

/// Why the export may not write into its target namespace: in cluster-wide mode a target
/// outside the export's own namespace needs `--allow-cross-namespace-export` (otherwise anyone
/// who may create an export could plant or overwrite kubeconfigs in every namespace).
fn cross_namespace_refusal(ctx: &Context, e: &OmniKubeconfigExport) -> Option<String> {
    let own = e.namespace().unwrap_or_default();
    let target = e.effective_target_namespace();
    (ctx.scope == Scope::All && !ctx.secret_policy.allow_cross_namespace_export && target != own)
        .then(|| {
            format!(
                "spec.targetSecretRef.namespace {target:?} is not the export's own namespace {own:?}; the operator allows that only with --allow-cross-namespace-export"
            )
        })
}

/// Whether the stored kubeconfig is rejected outright by the workload API server. The stored
/// Secret may have been adopted or edited by anyone who can write Secrets, so its kubeconfig is
/// checked like any other ([`crate::kubeconfig`]): one that asks for a command or a file is
/// never used, only replaced.
async fn probe_rejects(kubeconfig: &[u8]) -> bool {
    let client = match crate::workload::client_from_kubeconfig(kubeconfig).await {
        Ok(c) => c,
        Err(err) => {
            tracing::info!(error = %err, "stored kubeconfig is unusable; exporting a new one");
            return true;
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Err(kube::Error::Api(s))) if s.code == 401 || s.code == 403 => true,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "kubeconfig probe inconclusive; keeping the stored kubeconfig");
            false
        }
        Err(_) => {
            tracing::debug!("kubeconfig probe timed out; keeping the stored kubeconfig");
            false
        }
        Ok(Ok(_)) => false,
    }
}

/// Requeue at the next rotation, but never sooner than `floor`: a ttl barely longer than
/// renewBefore (stored without admission) must not mint kubeconfigs in a loop.
fn requeue(now: jiff::Timestamp, next: jiff::Timestamp, floor: Duration) -> Action {
    Action::requeue(
        requeue_after(now, next)
            .unwrap_or(Duration::ZERO)
            .max(floor),
    )
}

/// The deleting export's part in its Secret's end: under `Delete` (or when the Secret is being
/// deleted anyway) it waits while consumers still need the Secret, then removes it (`Delete`)
/// or just lifts its hold (`Orphan`). `Some(action)`: still waiting, with the status saying for
/// whom.
async fn delete_target(
    ctx: &Context,
    e: &OmniKubeconfigExport,
    ns: &str,
    name: &str,
) -> Result<Option<Action>, Error> {
    let api = ctx.api::<Secret>(ns);
    let Some(secret) = api.get_opt(name).await?.filter(|s| is_owned(s, e)) else {
        return Ok(None);
    };
    let delete = e.deletion_policy() == Some(DeletionPolicy::Delete);
    if delete || secret.metadata.deletion_timestamp.is_some() {
        let users = consumers(ctx, ns, name).await?;
        if !users.is_empty() {
            let m = if delete {
                format!(
                    "Secret \"{ns}/{name}\" is still used by {}; it is deleted once they are gone (or set spec.deletionPolicy to Orphan to keep it and finish now)",
                    users.join(", ")
                )
            } else {
                format!(
                    "Secret \"{ns}/{name}\" is being deleted and is still used by {}; it is kept until they are gone",
                    users.join(", ")
                )
            };
            let mut d = draft(e, whole_seconds(ctx.clock.now()));
            d.outcome(false, reasons::DELETING, &m);
            write(ctx, e, d).await?;
            // Consumers finishing their deletion trigger this export; the requeue is a fallback.
            return Ok(Some(Action::requeue(RETRY)));
        }
    }
    if delete {
        delete_owned(ctx, e, ns, name).await?;
    } else {
        release_hold(&api, &secret).await?;
    }
    Ok(None)
}

async fn reconcile(e: Arc<OmniKubeconfigExport>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented(e.as_ref(), &ctx, async {
        let namespace = e.namespace().unwrap_or_default();
        let api = ctx.api::<OmniKubeconfigExport>(&namespace);
        if e.metadata.deletion_timestamp.is_some() {
            if !finalizer::has_finalizer(e.as_ref(), false) {
                return Ok(Action::await_change());
            }
            if !e.spec.target_secret_ref.name.is_empty() {
                let (ns, name) = target_location(&e);
                if let Some(action) = delete_target(&ctx, &e, &ns, &name).await? {
                    return Ok(action);
                }
            }
            finalizer::remove(&api, e.as_ref(), false).await?;
            ctx.metrics.forget_resource("OmniKubeconfigExport", &namespace, &e.name_any());
            return Ok(Action::await_change());
        }
        if !finalizer::ensure(&api, e.as_ref(), false).await? {
            return Ok(Action::await_change());
        }
        let now = whole_seconds(ctx.clock.now());
        let mut d = draft(&e, now);
        let (ttl, renew_before) = match (e.spec_problem(), e.ttl(), e.renew_before()) {
            (None, Ok(ttl), Ok(rb)) => (ttl, rb),
            (problem, ttl, rb) => {
                let m = problem
                    .or_else(|| ttl.err().map(|x| x.to_string()))
                    .or_else(|| rb.err().map(|x| x.to_string()))
                    .unwrap_or_else(|| "invalid spec".into());
                d.outcome(false, reasons::VALIDATION_FAILED, &m);
                write(&ctx, &e, d).await?;
                return Ok(Action::await_change());
            }
        };
        if let Some(m) = cross_namespace_refusal(&ctx, &e) {
            d.outcome(false, reasons::VALIDATION_FAILED, &m);
            write(&ctx, &e, d).await?;
            return Ok(Action::await_change());
        }
        let cluster_ref = &e.spec.cluster_ref.name;
        let Some(cluster) = ctx.api::<OmniCluster>(&namespace).get_opt(cluster_ref).await? else {
            let m = format!("OmniCluster {cluster_ref:?} does not exist");
            d.set(ct::ACCEPTED, false, reasons::MISSING_CLUSTER, &m);
            d.outcome(false, reasons::MISSING_CLUSTER, &m);
            write(&ctx, &e, d).await?;
            return Ok(Action::requeue(RETRY));
        };
        let cluster_name = cluster.effective_cluster_name();
        d.set(ct::ACCEPTED, true, reasons::ACCEPTED, &format!("attached to OmniCluster {cluster_ref:?}"));
        d.s.cluster_name = Some(cluster_name.clone());
        let conn_name = &cluster.spec.connection_ref.name;
        let conn = match ctx.api::<OmniConnection>(&namespace).get_opt(conn_name).await {
            Ok(Some(c)) => c,
            other => {
                let detail = match other {
                    Err(err) => err.to_string(),
                    _ => format!("omniconnections.omni.texashpc.com {conn_name:?} not found"),
                };
                d.outcome(false, reasons::MISSING_CONNECTION, &format!("failed to get OmniConnection {conn_name:?}: {detail}"));
                write(&ctx, &e, d).await?;
                return Ok(Action::requeue(RETRY));
            }
        };
        d.s.connection_ref = Some(conn_name.clone());
        d.s.endpoint = Some(conn.spec.endpoint.clone());
        let spec_hash = e
            .spec_hash(&cluster_name)
            .map_err(|err| Error::Remote(err.to_string()))?;
        let key = e.effective_target_key();
        // spec_problem() refused an unknown format above.
        let format = e.format().unwrap_or(ExportFormat::Kubeconfig);
        let exported = format!(
            "exported kubeconfig to Secret \"{}/{}\" {}",
            e.effective_target_namespace(),
            e.spec.target_secret_ref.name,
            match format {
                ExportFormat::Kubeconfig => format!("key {key:?}"),
                ExportFormat::FluxValue => "key \"value\" (format FluxValue)".to_string(),
                ExportFormat::ArgoCdCluster => "as an Argo CD cluster (format ArgoCDCluster)".to_string(),
            }
        );

        // Previous target under Delete (renamed or moved): remove it if ours.
        let st = e.status.clone().unwrap_or_default();
        if e.deletion_policy() == Some(DeletionPolicy::Delete)
            && let Some(old_name) = st.target_secret_ref.as_deref().filter(|n| !n.is_empty())
        {
            let old_ns = st.target_secret_namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| namespace.clone());
            if old_name != e.spec.target_secret_ref.name || old_ns != e.effective_target_namespace() {
                delete_owned(&ctx, &e, &old_ns, old_name).await?;
            }
        }
        let (target_ns, target_name) = (e.effective_target_namespace(), e.spec.target_secret_ref.name.clone());
        let secrets = ctx.api::<Secret>(&target_ns);
        let existing = secrets.get_opt(&target_name).await?;
        if let Some(s) = existing.as_ref().filter(|s| is_owned(s, &e)) {
            if s.metadata.deletion_timestamp.is_some() {
                // Deleted by someone while this export lives: it goes once nothing needs it
                // (its deletion event then re-exports); until then it keeps serving.
                if consumers(&ctx, &target_ns, &target_name).await?.is_empty() {
                    release_hold(&secrets, s).await?;
                    return Ok(Action::requeue(RETRY));
                }
            } else if !holds(s) {
                // Written before exports held their Secrets.
                let mut list = s.finalizers().to_vec();
                list.push(IN_USE_FINALIZER.to_string());
                set_secret_finalizers(&secrets, s, list).await?;
                return Ok(Action::requeue(Duration::ZERO));
            }
        }
        if let Some(s) = &existing {
            if !is_owned(s, &e) && s.annotations().get(ADOPT_ANNOTATION).map(String::as_str) != Some("true") {
                let m = format!(
                    "Secret \"{target_ns}/{target_name}\" exists and is not owned by this OmniKubeconfigExport; it was left unchanged (annotate it {ADOPT_ANNOTATION}=\"true\" to let the export take it over)"
                );
                d.outcome(false, REASON_TARGET_NOT_OWNED, &m);
                write(&ctx, &e, d).await?;
                // The unowned Secret lacks our annotations, so its edits do not map back here:
                // poll so an adoption annotation is noticed.
                return Ok(Action::requeue(RETRY));
            }
            if let Some(stored) = reusable(s, format, &key, &spec_hash, renew_before, now) {
                let data: BTreeMap<String, Vec<u8>> = s.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect();
                let bytes = export_format::stored_kubeconfig(format, &key, &data).unwrap_or_default();
                if !probe_rejects(&bytes).await {
                    d.s.kubeconfig_hash = Some(stored.hash);
                    d.s.expiration_time = Some(stored.expiration);
                    d.s.last_rotation_time = stored.last_rotation;
                    d.s.next_rotation_time = Some(stored.next_rotation);
                    d.outcome(true, reasons::EXPORTED, &exported);
                    write(&ctx, &e, d).await?;
                    return Ok(requeue(now, stored.next_rotation, ctx.min_interval));
                }
            }
        }

        // Mint a new kubeconfig.
        let failed = |d: &mut Draft, m: String| {
            d.outcome(false, reasons::EXPORT_FAILED, &m);
            m
        };
        let client = match ctx.omni.get(&conn).await {
            Ok(c) => c,
            Err(err) => {
                let m = failed(&mut d, format!("failed to export kubeconfig: {err}"));
                write(&ctx, &e, d).await?;
                return Err(Error::Remote(m));
            }
        };
        let ttl_std = ttl.to_std().unwrap_or(Duration::ZERO);
        let sa = &e.spec.service_account;
        let minted = match client.kubeconfig(&cluster_name, ttl_std, &sa.user, &sa.groups).await {
            Ok(k) => {
                ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Changed);
                k
            }
            Err(err) => {
                ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Error);
                let m = failed(&mut d, format!("failed to export kubeconfig: {err}"));
                write(&ctx, &e, d).await?;
                return Err(Error::Remote(m));
            }
        };
        let checked = std::str::from_utf8(&minted)
            .map_err(|_| "generated kubeconfig is invalid: not UTF-8".to_string())
            .and_then(|t| crate::kubeconfig::load_without_checks(t, "generated kubeconfig").map(|_| ()))
            .and_then(|_| match e.spec.context_namespace.as_deref().filter(|n| !n.is_empty()) {
                Some(ns) => with_context_namespace(&minted, ns),
                None => Ok(minted.clone()),
            });
        let kubeconfig = match checked {
            Ok(k) => k,
            Err(m) => {
                let m = failed(&mut d, m);
                write(&ctx, &e, d).await?;
                return Err(Error::Remote(m));
            }
        };
        let (expiration, next) = rotation_times(now, ttl, renew_before);
        let data = match export_format::secret_data(format, &key, &cluster_name, &kubeconfig) {
            Ok(data) => data,
            Err(err) => {
                let m = failed(&mut d, err.to_string());
                write(&ctx, &e, d).await?;
                return Err(Error::Remote(m));
            }
        };
        let secret = build_target(&e, existing.as_ref(), &cluster_name, &spec_hash, format, &data, expiration, now);
        let pp = PostParams::default();
        let written = match &existing {
            Some(_) => secrets.replace(&target_name, &pp, &secret).await,
            None => secrets.create(&pp, &secret).await,
        };
        if let Err(err) = written {
            let m = failed(&mut d, format!("write Secret \"{target_ns}/{target_name}\": {err}"));
            write(&ctx, &e, d).await?;
            return Err(Error::Remote(m));
        }
        d.s.kubeconfig_hash = export_format::data_hash(format, &key, &data);
        d.s.expiration_time = Some(expiration);
        d.s.last_rotation_time = Some(now);
        d.s.next_rotation_time = Some(next);
        d.outcome(true, reasons::EXPORTED, &exported);
        write(&ctx, &e, d).await?;
        if existing.is_some() {
            // Conditions stay Exported=True across a rotation, so no condition Event marks it;
            // consumers of the Secret want to see when its credential was replaced.
            ctx.event(
                e.as_ref(),
                EventType::Normal,
                ROTATED_REASON,
                format!("rotated the kubeconfig in Secret \"{target_ns}/{target_name}\"; it expires at {expiration}"),
            )
            .await;
        }
        Ok(requeue(now, next, ctx.min_interval))
    })
    .await
}

/// The exports whose Secret `consumer` uses, when it is being deleted (only then can its change
/// matter to them: live consumers hold a Secret without needing the export to act).
fn deleting_consumer(
    exports: &RefIndex<OmniKubeconfigExport>,
    consumer: &DynamicObject,
) -> Vec<kube::runtime::reflector::ObjectRef<DynamicObject>> {
    if consumer.metadata.deletion_timestamp.is_none() {
        return Vec::new();
    }
    let ns = consumer.namespace().unwrap_or_default();
    let Some(secret) = consumer
        .data
        .pointer("/spec/kubeconfigSecretRef/name")
        .and_then(serde_json::Value::as_str)
    else {
        return Vec::new();
    };
    exports.get(&RefKey::new("target", &ns, secret))
}

/// Runs the OmniKubeconfigExport controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (controller, index) = indexed_controller_for::<OmniKubeconfigExport>(&ctx, |x| {
        vec![
            RefKey::new("cluster", &namespace_of(x), &x.spec.cluster_ref.name),
            RefKey::new(
                "target",
                &x.effective_target_namespace(),
                &x.spec.target_secret_ref.name,
            ),
        ]
    });
    let (by_cluster, by_conn, by_release, by_sync) =
        (index.clone(), index.clone(), index.clone(), index);
    // One watch of the clusters both wakes exports and caches the clusters for mapping a
    // connection to them. It was a second watch on a bare spawned task, which had no backoff
    // and outlived the controller (a runtime shutting down spun on its failing requests).
    let (cluster_store, writer) = kube::runtime::reflector::store::<OmniCluster>();
    let clusters = {
        use kube::runtime::WatchStreamExt as _;
        watcher(ctx.watch_api::<OmniCluster>(), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
    };
    let controller = controller
        .watches_stream(
            super::cluster_changes_from(clusters),
            move |c: OmniCluster| {
                by_cluster.get(&RefKey::new("cluster", &namespace_of(&c), &c.name_any()))
            },
        )
        .watches(
            ctx.watch_api::<OmniConnection>(),
            watcher::Config::default(),
            move |conn: OmniConnection| {
                let (name, ns) = (conn.name_any(), conn.namespace());
                let clusters: Vec<RefKey> = cluster_store
                    .state()
                    .into_iter()
                    .filter(|c| c.spec.connection_ref.name == name && c.namespace() == ns)
                    .map(|c| RefKey::new("cluster", &namespace_of(c.as_ref()), &c.name_any()))
                    .collect();
                by_conn.get_any(&clusters)
            },
        )
        // A consumer finishing (or starting) its deletion may let a held Secret go.
        .watches_with(
            ctx.dynamic_watch_api::<OmniHelmRelease>(),
            api_resource::<OmniHelmRelease>(),
            watcher::Config::default(),
            move |r: DynamicObject| deleting_consumer(&by_release, &r),
        )
        .watches_with(
            ctx.dynamic_watch_api::<OmniSecretSync>(),
            api_resource::<OmniSecretSync>(),
            watcher::Config::default(),
            move |s: DynamicObject| deleting_consumer(&by_sync, &s),
        )
        // Editing or deleting the target re-exports it.
        .watches(
            ctx.watch_api::<Secret>(),
            watcher::Config::default(),
            |s: Secret| {
                let a = s.annotations();
                let name = a.get(NAME_ANNOTATION)?.clone();
                let ns = a
                    .get(NAMESPACE_ANNOTATION)
                    .cloned()
                    .or_else(|| s.namespace())
                    .unwrap_or_default();
                Some(dyn_ref::<OmniKubeconfigExport>(&name, Some(&ns)))
            },
        );
    drive::<OmniKubeconfigExport, _, _>(controller, ctx, shutdown, reconcile).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::config::Kubeconfig;

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(s)
    }

    #[test]
    fn rotation_maths() {
        let h = 3600;
        let (exp, next) = rotation_times(
            at(0),
            GoDuration::from_secs(24 * h),
            Some(GoDuration::from_secs(4 * h)),
        );
        assert_eq!(exp, at(24 * h));
        assert_eq!(next, at(20 * h));
        assert_eq!(
            requeue_after(at(0), next),
            Some(Duration::from_secs(20 * 3600))
        );
        let (_, no_renew) = rotation_times(at(0), GoDuration::from_secs(h), None);
        assert_eq!(no_renew, at(h));
        assert!(rotation_due(at(20 * h), next));
        assert!(!rotation_due(at(20 * h - 1), next));
        assert_eq!(requeue_after(at(20 * h), next), None);
    }

    #[test]
    fn stored_kubeconfig_reuse_rules() {
        let kc = b"apiVersion: v1\nkind: Config\n".to_vec();
        let mut s = Secret {
            data: Some(BTreeMap::from([(
                "kubeconfig".to_string(),
                ByteString(kc.clone()),
            )])),
            ..Secret::default()
        };
        s.metadata.annotations = Some(BTreeMap::from([
            (SPEC_HASH_ANNOTATION.to_string(), "spec".to_string()),
            (HASH_ANNOTATION.to_string(), sha256_hex(&kc)),
            (EXPIRATION_ANNOTATION.to_string(), at(100).to_string()),
        ]));
        let rb = Some(GoDuration::from_secs(20));
        let stored = reusable(
            &s,
            ExportFormat::Kubeconfig,
            "kubeconfig",
            "spec",
            rb,
            at(10),
        );
        assert_eq!(stored.map(|x| x.next_rotation), Some(at(80)));
        assert_eq!(
            reusable(
                &s,
                ExportFormat::Kubeconfig,
                "kubeconfig",
                "spec",
                rb,
                at(80)
            ),
            None,
            "due at the boundary"
        );
        assert_eq!(
            reusable(
                &s,
                ExportFormat::Kubeconfig,
                "kubeconfig",
                "other",
                rb,
                at(10)
            ),
            None,
            "spec changed"
        );
        assert_eq!(
            reusable(&s, ExportFormat::Kubeconfig, "other", "spec", rb, at(10)),
            None,
            "key missing"
        );
    }

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
        let ours = crate::api::FINALIZER;
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

    #[test]
    fn the_written_secret_carries_the_hold_once() {
        let export: OmniKubeconfigExport = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniKubeconfigExport",
            "metadata": {"name": "e", "namespace": "ns", "uid": "u1"},
            "spec": {
                "clusterRef": {"name": "c"}, "targetSecretRef": {"name": "kc"},
                "serviceAccount": {"user": "u", "groups": ["g"]}, "ttl": "1h", "deletionPolicy": "Delete",
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let data = BTreeMap::from([("kubeconfig".to_string(), b"k".to_vec())]);
        let kc = ExportFormat::Kubeconfig;
        let first = build_target(&export, None, "c", "h", kc, &data, at(10), at(0));
        assert!(holds(&first));
        let again = build_target(&export, Some(&first), "c", "h", kc, &data, at(10), at(0));
        assert_eq!(again.finalizers(), [IN_USE_FINALIZER.to_string()]);
    }

    #[test]
    fn context_namespace_is_set_on_the_current_context() {
        let kc = "apiVersion: v1\nkind: Config\ncurrent-context: a\ncontexts:\n- name: a\n  context:\n    cluster: c\n    user: u\nclusters: []\nusers: []\n";
        let out = with_context_namespace(kc.as_bytes(), "team").unwrap_or_else(|e| panic!("{e}"));
        let parsed =
            Kubeconfig::from_yaml(&String::from_utf8_lossy(&out)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            parsed.contexts[0]
                .context
                .as_ref()
                .and_then(|c| c.namespace.clone()),
            Some("team".to_string())
        );
        let missing = "apiVersion: v1\nkind: Config\ncurrent-context: zz\ncontexts: []\n";
        assert_eq!(
            with_context_namespace(missing.as_bytes(), "team"),
            Err(r#"generated kubeconfig current context "zz" was not found"#.to_string())
        );
    }

    fn export_in(format: &str) -> OmniKubeconfigExport {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniKubeconfigExport",
            "metadata": {"name": "e", "namespace": "ns", "uid": "u1"},
            "spec": {
                "clusterRef": {"name": "c"}, "targetSecretRef": {"name": "kc"},
                "serviceAccount": {"user": "u", "groups": ["g"]}, "ttl": "1h",
                "deletionPolicy": "Delete", "format": format,
            },
            "status": {"targetSecretRef": "kc", "targetSecretKey": "kubeconfig"},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn keys(s: &Secret) -> Vec<String> {
        s.data.iter().flatten().map(|(k, _)| k.clone()).collect()
    }

    #[test]
    fn a_format_change_replaces_the_old_shape_and_keeps_other_keys() {
        let kc = b"apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: c\n  cluster:\n    server: https://w.example\ncontexts:\n- name: w\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: t}\n";
        let shape = |format| {
            export_format::secret_data(format, "kubeconfig", "c", kc)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let write = |format: ExportFormat, existing: Option<&Secret>| {
            let mut s = build_target(
                &export_in(format.as_str()),
                existing,
                "c",
                "h",
                format,
                &shape(format),
                at(10),
                at(0),
            );
            s.data
                .get_or_insert_with(BTreeMap::new)
                .insert("notes".into(), ByteString(b"mine".to_vec()));
            s
        };
        let plain = write(ExportFormat::Kubeconfig, None);
        assert_eq!(keys(&plain), ["kubeconfig", "notes"]);
        assert!(!plain.annotations().contains_key(FORMAT_ANNOTATION));

        let argo = write(ExportFormat::ArgoCdCluster, Some(&plain));
        assert_eq!(keys(&argo), ["config", "name", "notes", "server"]);
        assert_eq!(
            argo.labels()
                .get("argocd.argoproj.io/secret-type")
                .map(String::as_str),
            Some("cluster")
        );
        assert_eq!(
            argo.annotations().get(HASH_ANNOTATION),
            export_format::data_hash(
                ExportFormat::ArgoCdCluster,
                "kubeconfig",
                &shape(ExportFormat::ArgoCdCluster)
            )
            .as_ref()
        );

        let flux = write(ExportFormat::FluxValue, Some(&argo));
        assert_eq!(keys(&flux), ["notes", "value"]);
        assert!(!flux.labels().contains_key("argocd.argoproj.io/secret-type"));
        assert_eq!(
            flux.annotations()
                .get(FORMAT_ANNOTATION)
                .map(String::as_str),
            Some("FluxValue")
        );

        let back = write(ExportFormat::Kubeconfig, Some(&flux));
        assert_eq!(keys(&back), ["kubeconfig", "notes"]);
        assert!(!back.annotations().contains_key(FORMAT_ANNOTATION));
    }

    #[test]
    fn a_secret_the_export_does_not_own_loses_no_key_to_a_format_change() {
        let mut theirs = Secret::default();
        theirs.metadata.annotations = Some(BTreeMap::from([(
            FORMAT_ANNOTATION.to_string(),
            "ArgoCDCluster".to_string(),
        )]));
        theirs.data = Some(BTreeMap::from([(
            "name".to_string(),
            ByteString(b"theirs".to_vec()),
        )]));
        let data = BTreeMap::from([("value".to_string(), b"k".to_vec())]);
        let adopted = build_target(
            &export_in("FluxValue"),
            Some(&theirs),
            "c",
            "h",
            ExportFormat::FluxValue,
            &data,
            at(10),
            at(0),
        );
        assert_eq!(keys(&adopted), ["name", "value"]);
    }
}
