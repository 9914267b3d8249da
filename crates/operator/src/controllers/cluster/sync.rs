//! One pass over a valid OmniCluster: dereference its connection and children, render the
//! template (pure), plan against Omni (reads only), judge the plan (`plan.rs`: mode, approval,
//! adoption) and apply it only when Omni differs and nothing holds it, then read Omni's view
//! of the cluster back. Every end of the pass is an [`Outcome`].

use std::collections::BTreeMap;

use kube::ResourceExt;
use omni_client::template::{Document, SyncOptions, apply, keys, plan_sync_for, status_cluster};

use super::children::children_of;
use super::failure::{ClusterFailure, ConnectionLookup};
use super::omni_state::trim_output;
use super::outcome::{Outcome, Rendition, Synced};
use super::ownership::{OMNI_OWNER_ANNOTATION, adopt_requested, existing_ownership, owner_stamp};
use super::plan::{Gate, gate};
use super::{GITOPS_TOOL, OMNI_DEADLINE};
use crate::api::{OmniCluster, OmniConnection};
use crate::controllers::{Context, Error};
use crate::metrics::RpcOutcome;
use crate::render;

/// The OmniConnection `cluster` names, or why it cannot be had.
pub(super) async fn connection_of(
    ctx: &Context,
    cluster: &OmniCluster,
) -> Result<OmniConnection, ConnectionLookup> {
    let name = &cluster.spec.connection_ref.name;
    match ctx
        .api::<OmniConnection>(&cluster.namespace().unwrap_or_default())
        .get_opt(name)
        .await
    {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(ConnectionLookup::NotFound(name.clone())),
        Err(e) => Err(ConnectionLookup::Unreadable(Box::new(e))),
    }
}

/// Syncs `cluster` (valid, with its finalizer) to Omni. `Err` only for a failed read of the
/// management cluster, which the status does not report.
pub(super) async fn apply_cluster(ctx: &Context, cluster: &OmniCluster) -> Result<Outcome, Error> {
    if cluster.spec.suspend {
        return Ok(Outcome::Suspended);
    }
    let name = cluster.effective_cluster_name();

    // dereference
    let conn_name = &cluster.spec.connection_ref.name;
    let missing = |cause| {
        Outcome::failed(ClusterFailure::MissingConnection {
            name: conn_name.clone(),
            cause,
        })
    };
    let conn = match connection_of(ctx, cluster).await {
        Ok(c) => c,
        Err(cause) => return Ok(missing(cause)),
    };
    let children = match children_of(ctx, cluster).await? {
        Ok(children) => children,
        Err(failure) => return Ok(Outcome::failed(failure)),
    };

    // build (pure)
    let mut rendered = match render::render(
        cluster,
        &children.control_planes,
        &children.workers,
        &children.machines,
    ) {
        Ok(r) => r,
        Err(e) => return Ok(Outcome::failed(e)),
    };
    let rendition = Rendition {
        connection: conn.metadata.name.clone().unwrap_or_default(),
        endpoint: conn.spec.endpoint.clone(),
        template_hash: rendered.hash.clone(),
        control_plane_ref: rendered.control_plane_ref.clone(),
        workers_refs: rendered.workers_refs.clone(),
        machine_refs: rendered.machine_refs.clone(),
    };
    let failed = |failure| {
        Ok(Outcome::Failed {
            failure,
            rendered: Some(Box::new(rendition.clone())),
        })
    };
    // The owner stamp is added after hashing: it identifies the writer, not the template.
    for doc in &mut rendered.template.documents {
        if let Document::Cluster(c) = doc {
            c.annotations
                .insert(OMNI_OWNER_ANNOTATION.to_string(), owner_stamp(cluster));
        }
    }
    let files = render::file_resolver(cluster, ctx.template_root.as_deref());
    if let Err(e) = rendered.template.validate(&files) {
        return failed(ClusterFailure::InvalidTemplate(e));
    }

    // apply: plan (reads only), write only when Omni differs.
    let client = match ctx.omni.get(&conn).await {
        Ok(c) => c,
        Err(e) => return failed(ClusterFailure::OmniClient(e)),
    };
    let deadline = tokio::time::Instant::now() + OMNI_DEADLINE;
    let state = client.template_state(deadline);
    // Never sync into an existing Omni cluster this object did not create, unless adopted;
    // an adoption plans first (see `plan.rs`).
    let adopting = match existing_ownership(&state, cluster, &name).await {
        Ok(Some(owner)) if !owner.is_ours() => {
            if !adopt_requested(cluster) {
                return failed(ClusterFailure::NotOwned { name, owner });
            }
            true
        }
        Ok(_) => false,
        Err(source) => return failed(ClusterFailure::OwnershipUnreadable { name, source }),
    };
    // The install disk is translated for the backend API version Omni speaks.
    let api = match ctx.omni.backend_api(&conn, &client).await {
        Ok(api) => api,
        Err(e) => return failed(ClusterFailure::BackendApi(e)),
    };
    let options = SyncOptions {
        api,
        annotations: BTreeMap::from([(
            keys::MANAGED_BY_GITOPS_TOOLS.to_string(),
            GITOPS_TOOL.to_string(),
        )]),
    };
    let mut output = Vec::new();
    // plan (reads only) → gate (pure: mode, approval, adoption) → apply.
    let mut approved = None;
    let applied = match plan_sync_for(&state, &rendered.template, &files, &options).await {
        Ok(plan) => match gate(ctx, cluster, &conn, &plan, adopting) {
            Gate::InSync => Ok(false),
            Gate::Hold(held) => {
                return Ok(Outcome::Held {
                    held,
                    rendered: Some(Box::new(rendition)),
                });
            }
            Gate::Apply { approved: hash } => {
                approved = hash;
                apply(&state, &plan, deadline, &mut output)
                    .await
                    .map(|()| true)
            }
        },
        Err(e) => Err(e),
    };
    let output = trim_output(&output.join("\n"));
    let changed = match applied {
        Ok(changed) => changed,
        Err(source) => {
            ctx.metrics.omni_rpc("sync", RpcOutcome::Error);
            return failed(ClusterFailure::Sync {
                source: Box::new(source),
                output,
            });
        }
    };
    let synced = if changed {
        RpcOutcome::Changed
    } else {
        RpcOutcome::Unchanged
    };
    ctx.metrics.omni_rpc("sync", synced);

    // status from Omni: from the connection's status watch while it is live (no call, and a
    // change of it wakes this cluster), else read.
    let watch = ctx.omni.status_watch(&conn);
    let (health, watched) = match watch.as_ref().and_then(|w| w.read(&name)) {
        Some(health) => (health, true),
        None => {
            let deadline = tokio::time::Instant::now() + OMNI_DEADLINE;
            let health = status_cluster(&client.template_state(deadline), &name, deadline).await;
            match &health {
                Ok(_) => ctx.metrics.omni_rpc("status", RpcOutcome::Unchanged),
                Err(e) => {
                    ctx.metrics.omni_rpc("status", RpcOutcome::Error);
                    tracing::warn!(cluster = %name, error = %e, "could not read Omni cluster status");
                }
            }
            if let Some(watch) = &watch {
                watch.note_read(&name, &health);
            }
            (health, false)
        }
    };
    Ok(Outcome::Synced(Box::new(Synced {
        rendered: rendition,
        changed,
        output,
        health,
        watched,
        approved,
    })))
}
