//! Deleting an OmniCluster: tear down the Omni cluster it created (unless orphaned), never one
//! it did not create, and never under a name it did not sync.

use kube::runtime::events::EventType;
use omni_client::template::{BackendApi, DeleteProgress, SyncError, delete_cluster_for};

use super::failure::{ClusterFailure, ConnectionLookup};
use super::omni_state::trim_output;
use super::outcome::{Done, Outcome};
use super::ownership::existing_ownership;
use super::plan::deletion_gate;
use super::state::ClusterState;
use super::sync::{OMNI_DEADLINE, connection_of};
use crate::api::{OmniCluster, Reason};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::Error;
use crate::controllers::shared::pipeline::Cleanup;
use crate::process::metrics::RpcOutcome;

/// A deletion still waiting on `failure`.
fn waiting(failure: ClusterFailure) -> Cleanup<Outcome> {
    Cleanup::Waiting(Outcome::failed(failure))
}

/// One deletion step for `cluster` (being deleted, with our finalizer). `Err` only for a
/// failed read of the management cluster, which the status does not report.
pub(super) async fn cleanup(
    ctx: &Context,
    state: &ClusterState,
    cluster: &OmniCluster,
) -> Result<Cleanup<Outcome>, Error> {
    if cluster.orphan_on_delete() {
        return Ok(Cleanup::Done);
    }
    let name = cluster.effective_cluster_name();
    let conn_name = &cluster.spec.connection_ref.name;
    let without = |cause| {
        waiting(ClusterFailure::DeleteWithoutConnection {
            name: conn_name.clone(),
            cause,
        })
    };
    let conn = match connection_of(ctx, cluster).await {
        Ok(c) => c,
        Err(cause) => return Ok(without(cause)),
    };
    let client = match state.omni.get(&conn).await {
        Ok(c) => c,
        Err(e) => return Ok(without(ConnectionLookup::Client(Box::new(e)))),
    };
    let omni = client.template_state(tokio::time::Instant::now() + OMNI_DEADLINE);
    // Delete only what this object created: never a renamed target, never someone else's.
    let recorded = cluster.status.as_ref().and_then(|s| s.cluster_name.clone());
    if let Some(recorded) = recorded.filter(|n| !n.is_empty() && *n != name) {
        return Ok(waiting(ClusterFailure::RenamedBeforeDelete {
            recorded,
            name,
        }));
    }
    let exists = match existing_ownership(&omni, cluster, &name).await {
        Err(source) => {
            return Ok(waiting(ClusterFailure::DeleteOwnershipUnreadable {
                name,
                source,
            }));
        }
        Ok(Some(owner)) if !owner.is_ours() => {
            ctx.event(
                cluster,
                EventType::Warning,
                Reason::DeleteSkipped,
                format!(
                    "left Omni cluster {name:?} in place: it {}",
                    owner.describe()
                ),
            )
            .await;
            return Ok(Cleanup::Done);
        }
        Ok(found) => found.is_some(),
    };
    // Deleting the Omni cluster is destructive: mode `Plan` and `RequireApproval` hold it
    // (a cluster Omni does not have is no deletion to hold).
    let approved = match exists.then(|| deletion_gate(state, cluster, &conn, &name)) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(hash))) => Some(hash),
        Some(Err(held)) => return Ok(Cleanup::Waiting(Outcome::done(Done::Held(held)))),
    };
    // On API 3 the machines' install-disk configs are released too; a version that cannot
    // be read or is unknown still lets the cluster go (API 2 touches only what every
    // version has).
    let api: BackendApi = state
        .omni
        .backend_api(&conn, &client)
        .await
        .unwrap_or_default();
    let mut output = Vec::new();
    let progress = delete_cluster_for(
        &omni,
        &name,
        cluster.destroy_machines_on_delete(),
        api,
        &mut output,
    )
    .await;
    Ok(step_done(ctx, progress, &output, approved))
}

/// What one deletion step that wrote `output` came to, counted in the Omni call metrics;
/// `approved` is the hash of the deletion plan when the approval annotation released it.
fn step_done(
    ctx: &Context,
    progress: Result<DeleteProgress, SyncError>,
    output: &[String],
    approved: Option<String>,
) -> Cleanup<Outcome> {
    let did_something = !output.is_empty();
    let output = trim_output(&output.join("\n"));
    match progress {
        Ok(DeleteProgress::Done) => {
            let rpc = if did_something {
                RpcOutcome::Changed
            } else {
                RpcOutcome::Unchanged
            };
            ctx.metrics.omni_rpc("delete", rpc);
            Cleanup::Done
        }
        Ok(DeleteProgress::InProgress { waiting_for }) => {
            ctx.metrics.omni_rpc("delete", RpcOutcome::Changed);
            Cleanup::Waiting(Outcome::done(Done::Deleting {
                waiting_for: waiting_for.iter().map(ToString::to_string).collect(),
                output,
                approved,
            }))
        }
        Err(source) => {
            ctx.metrics.omni_rpc("delete", RpcOutcome::Error);
            waiting(ClusterFailure::Delete {
                source: Box::new(source),
                output,
            })
        }
    }
}
