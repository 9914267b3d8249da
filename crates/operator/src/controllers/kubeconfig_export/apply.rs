//! One export of a valid OmniKubeconfigExport: find its cluster and connection, reuse the stored
//! kubeconfig while it is current and accepted, else mint one in Omni and write it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::PostParams;
use kube::runtime::events::EventType;

use super::holds::{add_hold, consumers, delete_owned, release_hold};
use super::outcome::{Done, ExportFailure, Exported, Found, Outcome, RETRY};
use super::probe::keep_stored;
use super::rotation::{reusable, rotation_times, whole_seconds};
use super::state::ExportState;
use super::target::{build_target, holds, is_owned, prepared_kubeconfig};
use crate::api::common::DeletionPolicy;
use crate::api::duration::GoDuration;
use crate::api::keys;
use crate::api::keys::force_requested;
use crate::api::kubeconfig_export::ExportFormat;
use crate::api::{OmniCluster, OmniConnection, OmniKubeconfigExport, Reason};
use crate::controllers::cluster::dependants::start_gate;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::{Error, PassError};
use crate::controllers::shared::pipeline::not_deleted_meanwhile;
use crate::domain::export_format;
use crate::process::metrics::RpcOutcome;
use omni_client::ManagementError;
use omni_client::state::StateError;

/// How an export attempt ended, when the management API let it end.
type Attempt = Result<Done, ExportFailure>;

/// A target outside the export's own namespace needs `--allow-cross-namespace-export`, in
/// cluster-wide and namespaced mode alike: the operator decides, not only whatever RBAC the
/// chart happens to grant it.
fn cross_namespace_refusal(state: &ExportState, e: &OmniKubeconfigExport) -> Option<ExportFailure> {
    let own = e.namespace().unwrap_or_default();
    let target = e.effective_target_namespace();
    (!state.secret_policy.allow_cross_namespace_export && target != own)
        .then_some(ExportFailure::CrossNamespace { target, own })
}

/// What the deployment's identity policy refuses of the export, before anything is minted.
fn identity_refusal(state: &ExportState, e: &OmniKubeconfigExport) -> Option<ExportFailure> {
    let refusals = state.identity.refusals(&e.mint_request());
    (!refusals.is_empty()).then(|| {
        let messages: Vec<String> = refusals.iter().map(ToString::to_string).collect();
        ExportFailure::IdentityRefused(messages.join("; "))
    })
}

/// The outcome of a request about a target Secret: a failure of the management API (a 403
/// where the operator's RBAC does not reach, a conflict, an outage) becomes a failure the
/// export reports in its conditions, never a silent retry; any other error is passed on.
pub(super) fn about_target<T>(
    result: Result<T, Error>,
    verb: &'static str,
    namespace: &str,
    name: &str,
) -> Result<Result<T, ExportFailure>, Error> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(Error::Kube(error)) => Ok(Err(ExportFailure::TargetRequest {
            verb,
            namespace: namespace.to_string(),
            name: name.to_string(),
            error: Box::new(error),
        })),
        Err(other) => Err(other),
    }
}

/// `?` for [`about_target`]: returns the failure as `Ok(Err(failure))` from the enclosing
/// function.
macro_rules! target_step {
    ($result:expr, $verb:literal, $ns:expr, $name:expr) => {
        match about_target($result, $verb, $ns, $name)? {
            Ok(value) => value,
            Err(failure) => return Ok(Err(failure)),
        }
    };
}

/// Observe → plan → apply for an export whose spec is valid and which carries the finalizer.
/// `Err` only for management API failures the status does not report.
pub(super) async fn apply(
    ctx: &Context,
    state: &ExportState,
    e: &OmniKubeconfigExport,
) -> Result<Outcome, PassError<OmniKubeconfigExport>> {
    if let Some(f) = cross_namespace_refusal(state, e) {
        return Ok(Outcome::early(Err(f)));
    }
    if let Some(f) = identity_refusal(state, e) {
        return Ok(Outcome::early(Err(f)));
    }
    let namespace = e.namespace().unwrap_or_default();
    let cluster_ref = &e.spec.cluster_ref.name;
    let Some(cluster) = ctx
        .api::<OmniCluster>(&namespace)
        .get_opt(cluster_ref)
        .await?
    else {
        return Ok(Outcome::early(Err(ExportFailure::MissingCluster {
            cluster: cluster_ref.clone(),
        })));
    };
    let cluster_name = cluster.effective_cluster_name();
    if e.spec.suspend {
        return Ok(Outcome::new(
            Found {
                cluster_name: Some(cluster_name),
                connection: None,
            },
            Ok(Done::Suspended),
        ));
    }
    // Before its first kubeconfig, an export waits for its cluster (`spec.startWhen`).
    let exported = e
        .status
        .as_ref()
        .is_some_and(|s| s.expiration_time.is_some());
    if let Some(why) = start_gate(&cluster, e.spec.start_when, exported) {
        let found = Found {
            cluster_name: Some(cluster_name),
            connection: None,
        };
        return Ok(Outcome::new(
            found,
            Err(ExportFailure::ClusterNotReady(why)),
        ));
    }
    let connection = cluster.spec.connection_ref.name.clone();
    let found = |connection: Option<(String, String)>, result: Attempt| {
        let found = Found {
            cluster_name: Some(cluster_name.clone()),
            connection,
        };
        Outcome::new(found, result)
    };
    let conn = match ctx
        .api::<OmniConnection>(&namespace)
        .get_opt(&connection)
        .await
    {
        Ok(Some(conn)) => conn,
        Ok(None) => {
            let f = ExportFailure::MissingConnection { connection };
            return Ok(found(None, Err(f)));
        }
        Err(error) => {
            let f = ExportFailure::ConnectionUnreadable { connection, error };
            return Ok(found(None, Err(f)));
        }
    };
    let result = export(ctx, state, e, &cluster_name, &conn).await?;
    Ok(found(
        Some((connection, conn.spec.endpoint.clone())),
        result,
    ))
}

/// What one export works with, resolved from the spec once.
struct Target {
    ttl: GoDuration,
    renew_before: Option<GoDuration>,
    spec_hash: String,
    format: ExportFormat,
    /// The key of the kubeconfig (format `Kubeconfig`).
    key: String,
    /// The Secret's namespace and name.
    namespace: String,
    name: String,
    /// Whole seconds, as the Secret's annotations record times.
    now: jiff::Timestamp,
}

/// The export proper, once the cluster and its connection are known: remove a previous target,
/// keep the hold on the Secret, reuse the stored kubeconfig while it is current and accepted,
/// else mint one and write it.
async fn export(
    ctx: &Context,
    state: &ExportState,
    e: &OmniKubeconfigExport,
    cluster_name: &str,
    conn: &OmniConnection,
) -> Result<Attempt, PassError<OmniKubeconfigExport>> {
    // Validated before; a failure here would be a validation gap, reported as such.
    let (ttl, renew_before, spec_hash) = match (
        e.spec.ttl.duration(),
        e.renew_before(),
        e.spec_hash(cluster_name),
    ) {
        (Ok(ttl), Ok(rb), Ok(hash)) => (ttl, rb, hash),
        (Err(err), ..) | (_, Err(err), _) | (.., Err(err)) => {
            return Ok(Err(ExportFailure::InvalidSpec(err.to_string())));
        }
    };
    let target = Target {
        ttl,
        renew_before,
        spec_hash,
        format: e.format(),
        key: e.effective_target_key(),
        namespace: e.effective_target_namespace(),
        name: e.spec.target_secret_ref.name.clone(),
        now: whole_seconds(ctx.clock.now()),
    };
    if let Err(f) = remove_previous(ctx, e, &target).await? {
        return Ok(Err(f));
    }
    let secrets = ctx.api::<Secret>(&target.namespace);
    let existing = target_step!(
        secrets.get_opt(&target.name).await.map_err(Error::from),
        "read",
        &target.namespace,
        &target.name
    );
    if let Some(s) = existing.as_ref().filter(|s| is_owned(s, e))
        && let Some(ended) = keep_hold(ctx, &secrets, s, &target).await?.transpose()
    {
        return Ok(ended);
    }
    if let Some(s) = &existing {
        if !is_owned(s, e) && !keys::adopt_requested(&s.metadata) {
            return Ok(Err(ExportFailure::TargetNotOwned {
                namespace: target.namespace,
                name: target.name,
            }));
        }
        // A force request (`omni.texashpc.com/force-at`) mints a new kubeconfig once.
        if force_requested(e).is_none()
            && let Some(stored) = reuse(state, s, &target).await
        {
            // What the export registers besides the credential moved (a label a set renders
            // from its cluster): rewritten without a new mint.
            let mut registered = s.clone();
            if super::registration::register(&mut registered, e) {
                target_step!(
                    secrets
                        .replace(&target.name, &PostParams::default(), &registered)
                        .await
                        .map_err(Error::from),
                    "write",
                    &target.namespace,
                    &target.name
                );
            }
            return Ok(Ok(Done::Exported(stored)));
        }
    }
    // Mint a new kubeconfig, unless the export is being deleted and the watch has not told
    // yet: a prune that removed the Secret with its export must not find it written again.
    not_deleted_meanwhile(ctx, e).await?;
    Ok(mint(
        ctx,
        state,
        e,
        cluster_name,
        conn,
        existing.as_ref(),
        &target,
    )
    .await)
}

/// Under `Delete`, the previous target (renamed or moved) is removed if it is ours.
async fn remove_previous(
    ctx: &Context,
    e: &OmniKubeconfigExport,
    target: &Target,
) -> Result<Result<(), ExportFailure>, PassError<OmniKubeconfigExport>> {
    let st = e.status.clone().unwrap_or_default();
    if e.spec.deletion_policy == DeletionPolicy::Delete
        && let Some(old_name) = st.target_secret_ref.as_deref().filter(|n| !n.is_empty())
    {
        let old_ns = st
            .target_secret_namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| e.namespace().unwrap_or_default());
        if old_name != target.name || old_ns != target.namespace {
            return Ok(target_step!(
                delete_owned(ctx, e, &old_ns, old_name).await,
                "delete",
                &old_ns,
                old_name
            ));
        }
    }
    Ok(Ok(()))
}

/// The hold on `secret`, an owned target: lifted once nothing needs a Secret someone deletes,
/// put on one written before exports held their Secrets. `Ok(Some(..))` when it changed (the
/// pass ends there and looks again); `Err` when the request about the Secret failed.
async fn keep_hold(
    ctx: &Context,
    secrets: &kube::Api<Secret>,
    secret: &Secret,
    target: &Target,
) -> Result<Result<Option<Done>, ExportFailure>, PassError<OmniKubeconfigExport>> {
    let (ns, name) = (&target.namespace, &target.name);
    if secret.metadata.deletion_timestamp.is_some() {
        // Deleted by someone while this export lives: it goes once nothing needs it (its
        // deletion event then re-exports); until then it keeps serving.
        if consumers(ctx, ns, name).await?.is_empty() {
            target_step!(
                release_hold(secrets, secret).await,
                "release the hold on",
                ns,
                name
            );
            return Ok(Ok(Some(Done::HoldChanged(RETRY))));
        }
    } else if !holds(secret) {
        // Written before exports held their Secrets.
        target_step!(add_hold(secrets, secret).await, "hold", ns, name);
        return Ok(Ok(Some(Done::HoldChanged(Duration::ZERO))));
    }
    Ok(Ok(None))
}

/// The kubeconfig stored in `secret`, when it is current for the spec and not rejected by its
/// workload API server.
async fn reuse(state: &ExportState, secret: &Secret, target: &Target) -> Option<Exported> {
    let stored = reusable(
        secret,
        target.format,
        &target.key,
        &target.spec_hash,
        target.renew_before,
        target.now,
    )?;
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    let bytes =
        export_format::stored_kubeconfig(target.format, &target.key, &data).unwrap_or_default();
    keep_stored(&state.accepted, &stored.hash, &bytes, target.now)
        .await
        .then_some(Exported {
            hash: Some(stored.hash),
            expiration: stored.expiration,
            last_rotation: stored.last_rotation,
            next_rotation: stored.next_rotation,
        })
}

/// Mints a kubeconfig in Omni and writes it into the target (`existing`, if there is one).
async fn mint(
    ctx: &Context,
    state: &ExportState,
    e: &OmniKubeconfigExport,
    cluster_name: &str,
    conn: &OmniConnection,
    existing: Option<&Secret>,
    target: &Target,
) -> Attempt {
    let client = state
        .omni
        .get(conn)
        .await
        .map_err(ExportFailure::OmniClient)?;
    let ttl = target.ttl.to_std().unwrap_or(Duration::ZERO);
    let sa = &e.spec.service_account;
    let minted = match client
        .kubeconfig(cluster_name, ttl, &sa.user, &sa.groups)
        .await
    {
        Ok(k) => {
            ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Changed);
            k
        }
        // Omni creates a cluster's identity (its ClusterUUID) a moment after the cluster:
        // until then a mint is refused as `NotFound`, which is waiting, not a failure.
        Err(ManagementError::Rpc(StateError::NotFound(_))) => {
            ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Unchanged);
            return Err(ExportFailure::NotInOmniYet {
                cluster: cluster_name.to_string(),
            });
        }
        Err(err) => {
            ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Error);
            return Err(ExportFailure::Mint(err));
        }
    };
    let context_namespace = e.spec.context_namespace.as_deref();
    let data = prepared_kubeconfig(&minted, context_namespace)
        .and_then(|kubeconfig| {
            export_format::secret_data(target.format, &target.key, cluster_name, &kubeconfig)
                .map_err(|err| err.to_string())
        })
        .map_err(ExportFailure::UnusableKubeconfig)?;
    let now = target.now;
    let (expiration, next_rotation) = rotation_times(now, target.ttl, target.renew_before);
    let secret = build_target(
        e,
        existing,
        cluster_name,
        &target.spec_hash,
        target.format,
        &data,
        expiration,
        now,
    );
    let (ns, name) = (&target.namespace, &target.name);
    let secrets = ctx.api::<Secret>(ns);
    let pp = PostParams::default();
    let written = match existing {
        Some(_) => secrets.replace(name, &pp, &secret).await,
        None => secrets.create(&pp, &secret).await,
    };
    if let Err(error) = written {
        return Err(ExportFailure::TargetRequest {
            verb: "write",
            namespace: ns.clone(),
            name: name.clone(),
            error: Box::new(error),
        });
    }
    if existing.is_some() {
        // Conditions stay Exported=True across a rotation, so no condition Event marks it;
        // consumers of the Secret want to see when its credential was replaced.
        ctx.event(
            e,
            EventType::Normal,
            Reason::KubeconfigRotated,
            format!("rotated the kubeconfig in Secret \"{ns}/{name}\"; it expires at {expiration}"),
        )
        .await;
    }
    let hash = export_format::data_hash(target.format, &target.key, &data);
    if let Some(hash) = &hash {
        // Omni minted it moments ago: the reconcile our write causes need not probe it.
        state.accepted.remember(hash.clone(), now);
    }
    Ok(Done::Exported(Exported {
        hash,
        expiration,
        last_rotation: Some(now),
        next_rotation,
    }))
}
