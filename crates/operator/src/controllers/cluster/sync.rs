//! One pass over a valid OmniCluster: dereference its connection and children, render the
//! template (pure), plan against Omni (reads only), judge the plan (`plan.rs`: mode, approval,
//! adoption) and apply it only when Omni differs and nothing holds it, then read Omni's view
//! of the cluster back. Every end of the pass is an [`Outcome`].

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use omni_client::template::{Document, SyncOptions, apply, keys, plan_sync_for, status_cluster};

use super::children::children_of;
use super::failure::{ClusterFailure, ConnectionLookup};
use super::omni_state::trim_output;
use super::outcome::{Done, Outcome, Rendition, Synced};
use super::ownership::{existing_ownership, owner_stamp};
use super::plan::{Gate, gate};
use super::state::{Applied, ClusterState};
use crate::api::keys::{GITOPS_TOOL, OMNI_OWNER_ANNOTATION, adopt_requested};
use crate::api::plan::PlanCount;
use crate::api::{OmniCluster, OmniConnection};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::Error;
use crate::domain::{plan, render};
use crate::process::metrics::RpcOutcome;

/// How long the Omni work of one pass may take: the ownership check, plan and apply of a sync;
/// the status read; one delete step. Each call is bounded by the client's request timeout
/// ([`omni_client::transport::DEFAULT_REQUEST_TIMEOUT`], 30 s) as well, so a hung Omni fails
/// the pass (and the object retries with backoff) instead of wedging the object.
pub const OMNI_DEADLINE: Duration = Duration::from_secs(60);

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

/// Syncs `cluster` (valid, with its finalizer) to Omni: dereference, render, sync the
/// template, read Omni's view. `Err` only for a failed read of the management cluster, which
/// the status does not report.
pub(super) async fn apply_cluster(
    ctx: &Context,
    state: &ClusterState,
    cluster: &OmniCluster,
) -> Result<Outcome, Error> {
    if cluster.spec.suspend {
        return Ok(Outcome::done(Done::Suspended));
    }
    // dereference
    let conn = match connection_of(ctx, cluster).await {
        Ok(c) => c,
        Err(cause) => {
            return Ok(Outcome::failed(ClusterFailure::MissingConnection {
                name: cluster.spec.connection_ref.name.clone(),
                cause,
            }));
        }
    };
    let children = match children_of(ctx, &state.children, cluster).await? {
        Ok(children) => children,
        Err(failure) => return Ok(Outcome::failed(failure)),
    };
    // build (pure)
    let rendered = match render::render(
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
        machine_sets: rendered.machine_sets.clone(),
    };
    let result = sync(ctx, state, cluster, &conn, rendered).await;
    Ok(Outcome::new(Some(Box::new(rendition)), result))
}

/// Brings Omni in line with the rendered template of `cluster` (plan with reads only; write
/// only when Omni differs and nothing holds the plan), then reads Omni's view of the cluster.
async fn sync(
    ctx: &Context,
    state: &ClusterState,
    cluster: &OmniCluster,
    conn: &OmniConnection,
    mut rendered: render::Rendered,
) -> Result<Done, ClusterFailure> {
    let name = cluster.effective_cluster_name();
    // The owner stamp is added after hashing: it identifies the writer, not the template.
    for doc in &mut rendered.template.documents {
        if let Document::Cluster(c) = doc {
            c.annotations
                .insert(OMNI_OWNER_ANNOTATION.to_string(), owner_stamp(cluster));
        }
    }
    let files = render::file_resolver(cluster, state.template_root.as_deref());
    rendered
        .template
        .validate(&files)
        .map_err(ClusterFailure::InvalidTemplate)?;
    let client = state
        .omni
        .get(conn)
        .await
        .map_err(ClusterFailure::OmniClient)?;
    let deadline = tokio::time::Instant::now() + OMNI_DEADLINE;
    let omni = client.template_state(deadline);
    // Never sync into an existing Omni cluster this object did not create, unless adopted;
    // an adoption plans first (see `plan.rs`).
    let adopting = match existing_ownership(&omni, cluster, &name).await {
        Ok(Some(owner)) if !owner.is_ours() => {
            if !adopt_requested(&cluster.metadata) {
                return Err(ClusterFailure::NotOwned { name, owner });
            }
            true
        }
        Ok(_) => false,
        Err(source) => return Err(ClusterFailure::OwnershipUnreadable { name, source }),
    };
    // The install disk is translated for the backend API version Omni speaks.
    let api = state
        .omni
        .backend_api(conn, &client)
        .await
        .map_err(ClusterFailure::BackendApi)?;
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
    let mut written = Vec::new();
    let applied = match plan_sync_for(&omni, &rendered.template, &files, &options).await {
        Ok(plan) => match gate(state, cluster, conn, &plan, adopting) {
            Gate::InSync => Ok(false),
            Gate::Hold(held) => return Ok(Done::Held(held)),
            Gate::Apply { approved: hash } => {
                approved = hash;
                written = plan::written(&plan);
                apply(&omni, &plan, deadline, &mut output)
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
            return Err(ClusterFailure::Sync {
                source: Box::new(source),
                output,
            });
        }
    };
    let uid = cluster.uid().unwrap_or_default();
    let applied = if changed {
        ctx.metrics.omni_rpc("sync", RpcOutcome::Changed);
        let applied = traced(ctx, cluster, &rendered.hash, &written, output, approved);
        state.unrecorded.remember(&uid, applied.clone());
        Some(applied)
    } else {
        ctx.metrics.omni_rpc("sync", RpcOutcome::Unchanged);
        state.unrecorded.pending(&uid, cluster.status.as_ref())
    };
    // A force request reads Omni's view fresh, past the status watch.
    let fresh = crate::api::keys::force_requested(cluster).is_some();
    let (health, watched) = omni_view(ctx, state, conn, &client, &name, fresh).await;
    Ok(Done::Synced(Box::new(Synced {
        applied,
        health,
        watched,
    })))
}

/// The record of a change set just written to Omni for `cluster` (template `template_hash`):
/// counted per resource type in the metrics and logged at info, now; its status fields and
/// its Event follow from the returned value once the status is written.
fn traced(
    ctx: &Context,
    cluster: &OmniCluster,
    template_hash: &str,
    written: &[PlanCount],
    output: String,
    approved: Option<String>,
) -> Applied {
    for count in written {
        ctx.metrics
            .omni_writes(&count.type_, count.create, count.update, count.delete);
    }
    let summary = plan::counts_text(written);
    // Omni answers State calls without a request ID; the template hash ties the line to the
    // status and the plan.
    tracing::info!(
        object = %format!("OmniCluster/{}/{}", cluster.namespace().unwrap_or_default(), cluster.name_any()),
        omni_cluster = %cluster.effective_cluster_name(),
        template_hash = %template_hash,
        changes = %summary,
        approved_plan = approved.as_deref().unwrap_or(""),
        "applied changes to Omni"
    );
    Applied {
        at: jiff::Timestamp::from_second(ctx.clock.now().as_second())
            .unwrap_or_else(|_| ctx.clock.now()),
        output,
        summary,
        approved,
    }
}

/// Omni's view of the cluster `name`: from the connection's status watch while it is live (no
/// call, and a change of it wakes this cluster; `true`), else (or when `fresh`) read (`false`).
async fn omni_view(
    ctx: &Context,
    state: &ClusterState,
    conn: &OmniConnection,
    client: &omni_client::Client,
    name: &str,
    fresh: bool,
) -> (
    Result<omni_client::template::ClusterHealth, omni_client::template::StatusError>,
    bool,
) {
    let watch = state.omni.status_watch(conn);
    if let Some(health) = watch.as_ref().filter(|_| !fresh).and_then(|w| w.read(name)) {
        return (health, true);
    }
    let deadline = tokio::time::Instant::now() + OMNI_DEADLINE;
    let health = status_cluster(&client.template_state(deadline), name, deadline).await;
    match &health {
        Ok(_) => ctx.metrics.omni_rpc("status", RpcOutcome::Unchanged),
        Err(e) => {
            ctx.metrics.omni_rpc("status", RpcOutcome::Error);
            tracing::warn!(cluster = %name, error = %e, "could not read Omni cluster status");
        }
    }
    if let Some(watch) = &watch {
        watch.note_read(name, &health);
    }
    (health, false)
}
