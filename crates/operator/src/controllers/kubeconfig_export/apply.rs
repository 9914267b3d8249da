//! One export of a valid OmniKubeconfigExport: find its cluster and connection, reuse the stored
//! kubeconfig while it is current and accepted, else mint one in Omni and write it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::PostParams;
use kube::runtime::events::EventType;

use super::holds::{add_hold, consumers, delete_owned, holds, release_hold};
use super::outcome::{Done, ExportFailure, Exported, Outcome};
use super::probe::{ACCEPTED, keep_stored};
use super::rotation::{reusable, rotation_times, whole_seconds};
use super::target::{build_target, is_owned, prepared_kubeconfig};
use super::{RETRY, ROTATED_REASON};
use crate::api::common::DeletionPolicy;
use crate::api::{OmniCluster, OmniConnection, OmniKubeconfigExport};
use crate::controllers::pipeline::not_deleted_meanwhile;
use crate::controllers::secret_sync::adoptable;
use crate::controllers::{Context, Error};
use crate::export_format;
use crate::metrics::RpcOutcome;

/// How an export attempt ended, when the management API let it end.
type Attempt = Result<Done, ExportFailure>;

/// A target outside the export's own namespace needs `--allow-cross-namespace-export`, in
/// cluster-wide and namespaced mode alike: the operator decides, not only whatever RBAC the
/// chart happens to grant it.
fn cross_namespace_refusal(ctx: &Context, e: &OmniKubeconfigExport) -> Option<ExportFailure> {
    let own = e.namespace().unwrap_or_default();
    let target = e.effective_target_namespace();
    (!ctx.secret_policy.allow_cross_namespace_export && target != own)
        .then_some(ExportFailure::CrossNamespace { target, own })
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

/// `?` for [`about_target`]: returns the failure from the enclosing `Result<Attempt, Error>`.
macro_rules! target_step {
    ($result:expr, $verb:literal, $ns:expr, $name:expr) => {
        match about_target($result, $verb, $ns, $name)? {
            Ok(value) => value,
            Err(failure) => return Ok(Err(failure)),
        }
    };
}

/// What the deployment's identity policy refuses of the export, before anything is minted.
fn identity_refusal(ctx: &Context, e: &OmniKubeconfigExport) -> Option<ExportFailure> {
    let refusals = ctx.tenancy.identity.refusals(&e.mint_request());
    (!refusals.is_empty()).then(|| {
        let messages: Vec<String> = refusals.iter().map(ToString::to_string).collect();
        ExportFailure::IdentityRefused(messages.join("; "))
    })
}

/// Observe → plan → apply for an export whose spec is valid and which carries the finalizer.
/// `Err` only for management API failures the status does not report.
pub(super) async fn apply(ctx: &Context, e: &OmniKubeconfigExport) -> Result<Outcome, Error> {
    if let Some(f) = cross_namespace_refusal(ctx, e) {
        return Ok(Outcome::early(Err(f)));
    }
    if let Some(f) = identity_refusal(ctx, e) {
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
    let connection = cluster.spec.connection_ref.name.clone();
    let found = |connection: Option<(String, String)>, result: Attempt| Outcome {
        cluster_name: Some(cluster_name.clone()),
        connection,
        result,
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
    let result = export(ctx, e, &cluster_name, &conn).await?;
    Ok(found(
        Some((connection, conn.spec.endpoint.clone())),
        result,
    ))
}

/// The export proper, once the cluster and its connection are known.
async fn export(
    ctx: &Context,
    e: &OmniKubeconfigExport,
    cluster_name: &str,
    conn: &OmniConnection,
) -> Result<Attempt, Error> {
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
    let format = e.format();
    let key = e.effective_target_key();
    let now = whole_seconds(ctx.clock.now());

    // Previous target under Delete (renamed or moved): remove it if ours.
    let st = e.status.clone().unwrap_or_default();
    let (target_ns, target_name) = (
        e.effective_target_namespace(),
        e.spec.target_secret_ref.name.clone(),
    );
    if e.spec.deletion_policy == DeletionPolicy::Delete
        && let Some(old_name) = st.target_secret_ref.as_deref().filter(|n| !n.is_empty())
    {
        let old_ns = st
            .target_secret_namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| e.namespace().unwrap_or_default());
        if (old_name != target_name || old_ns != target_ns)
            && let Err(f) = target_step!(
                delete_owned(ctx, e, &old_ns, old_name).await,
                "delete",
                &old_ns,
                old_name
            )
        {
            return Ok(Err(f));
        }
    }

    let secrets = ctx.api::<Secret>(&target_ns);
    let existing = target_step!(
        secrets.get_opt(&target_name).await.map_err(Error::from),
        "read",
        &target_ns,
        &target_name
    );
    if let Some(s) = existing.as_ref().filter(|s| is_owned(s, e)) {
        if s.metadata.deletion_timestamp.is_some() {
            // Deleted by someone while this export lives: it goes once nothing needs it
            // (its deletion event then re-exports); until then it keeps serving.
            if consumers(ctx, &target_ns, &target_name).await?.is_empty() {
                target_step!(
                    release_hold(&secrets, s).await,
                    "release the hold on",
                    &target_ns,
                    &target_name
                );
                return Ok(Ok(Done::HoldChanged(RETRY)));
            }
        } else if !holds(s) {
            // Written before exports held their Secrets.
            target_step!(
                add_hold(&secrets, s).await,
                "hold",
                &target_ns,
                &target_name
            );
            return Ok(Ok(Done::HoldChanged(Duration::ZERO)));
        }
    }
    if let Some(s) = &existing {
        if !is_owned(s, e) && !adoptable(s) {
            return Ok(Err(ExportFailure::TargetNotOwned {
                namespace: target_ns,
                name: target_name,
            }));
        }
        if let Some(stored) = reusable(s, format, &key, &spec_hash, renew_before, now) {
            let data: BTreeMap<String, Vec<u8>> = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect();
            let bytes = export_format::stored_kubeconfig(format, &key, &data).unwrap_or_default();
            if keep_stored(&ACCEPTED, &stored.hash, &bytes, now).await {
                return Ok(Ok(Done::Exported(Exported {
                    hash: Some(stored.hash),
                    expiration: stored.expiration,
                    last_rotation: stored.last_rotation,
                    next_rotation: stored.next_rotation,
                })));
            }
        }
    }

    // Mint a new kubeconfig, unless the export is being deleted and the watch has not told
    // yet: a prune that removed the Secret with its export must not find it written again.
    not_deleted_meanwhile(ctx, e).await?;
    let client = match ctx.omni.get(conn).await {
        Ok(c) => c,
        Err(err) => return Ok(Err(ExportFailure::OmniClient(err))),
    };
    let ttl_std = ttl.to_std().unwrap_or(Duration::ZERO);
    let sa = &e.spec.service_account;
    let minted = match client
        .kubeconfig(cluster_name, ttl_std, &sa.user, &sa.groups)
        .await
    {
        Ok(k) => {
            ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Changed);
            k
        }
        Err(err) => {
            ctx.metrics.omni_rpc("kubeconfig", RpcOutcome::Error);
            return Ok(Err(ExportFailure::Mint(err)));
        }
    };
    let context_namespace = e.spec.context_namespace.as_deref();
    let data = match prepared_kubeconfig(&minted, context_namespace).and_then(|kubeconfig| {
        export_format::secret_data(format, &key, cluster_name, &kubeconfig)
            .map_err(|err| err.to_string())
    }) {
        Ok(data) => data,
        Err(m) => return Ok(Err(ExportFailure::UnusableKubeconfig(m))),
    };
    let (expiration, next_rotation) = rotation_times(now, ttl, renew_before);
    let secret = build_target(
        e,
        existing.as_ref(),
        cluster_name,
        &spec_hash,
        format,
        &data,
        expiration,
        now,
    );
    let pp = PostParams::default();
    let written = match &existing {
        Some(_) => secrets.replace(&target_name, &pp, &secret).await,
        None => secrets.create(&pp, &secret).await,
    };
    if let Err(error) = written {
        return Ok(Err(ExportFailure::TargetRequest {
            verb: "write",
            namespace: target_ns,
            name: target_name,
            error: Box::new(error),
        }));
    }
    if existing.is_some() {
        // Conditions stay Exported=True across a rotation, so no condition Event marks it;
        // consumers of the Secret want to see when its credential was replaced.
        ctx.event(
            e,
            EventType::Normal,
            ROTATED_REASON,
            format!(
                "rotated the kubeconfig in Secret \"{target_ns}/{target_name}\"; it expires at {expiration}"
            ),
        )
        .await;
    }
    let hash = export_format::data_hash(format, &key, &data);
    if let Some(hash) = &hash {
        // Omni minted it moments ago: the reconcile our write causes need not probe it.
        ACCEPTED.remember(hash.clone(), now);
    }
    Ok(Ok(Done::Exported(Exported {
        hash,
        expiration,
        last_rotation: Some(now),
        next_rotation,
    })))
}
