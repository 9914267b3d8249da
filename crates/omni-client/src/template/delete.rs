//! Deleting a cluster created from a template, one non-blocking step at a time.
//!
//! Omni's own client blocks until the Cluster is gone. A controller cannot hold a worker that
//! long, so [`delete_cluster`] advances as far as it can without waiting and reports what it is
//! still waiting for; calling it again continues where the previous call stopped.

use super::api::BackendApi;
use super::state::{LabelCondition, StateError, TemplateState};
use super::sync::{SyncError, collect_owned, delete_phases_for, release_kernel_args};
use super::translate::{ResourceRef, keys, types};
use crate::proto::cosi::resource::Resource;

/// Where a deletion stands after one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteProgress {
    /// Everything is gone (or never existed).
    Done,
    /// Teardown was requested; these resources still exist (finalizers pending).
    InProgress {
        /// Resources of the current phase that still exist.
        waiting_for: Vec<ResourceRef>,
    },
}

fn refs(resources: &[Resource]) -> Vec<ResourceRef> {
    resources
        .iter()
        .filter_map(|r| r.metadata.as_ref())
        .map(|m| ResourceRef::new(m.r#type.clone(), m.id.clone()))
        .collect()
}

fn state_err(operation: &'static str, r: &ResourceRef, source: StateError) -> SyncError {
    SyncError::State {
        operation,
        resource: r.clone(),
        source,
    }
}

/// The extra phases of `destroyMachines`: the cluster's extension configurations, the
/// SideroLinks of its disconnected machines, then those machines' machine-scoped patches.
async fn destroy_machine_phases<S: TemplateState>(
    state: &S,
    cluster: &str,
) -> Result<Vec<Vec<ResourceRef>>, SyncError> {
    let by_cluster = [LabelCondition::equal(keys::CLUSTER, cluster)];
    let list = |t: &'static str, q: Vec<LabelCondition>| async move {
        state
            .list(t, &q)
            .await
            .map_err(|e| state_err("list", &ResourceRef::new(t, ""), e))
    };
    let extensions = refs(&list(types::EXTENSIONS_CONFIGURATION, by_cluster.to_vec()).await?);
    let disconnected = list(
        types::MACHINE_STATUS,
        vec![
            LabelCondition::exists(keys::DISCONNECTED),
            LabelCondition::equal(keys::CLUSTER, cluster),
        ],
    )
    .await?;
    let machines: Vec<String> = refs(&disconnected).into_iter().map(|r| r.id).collect();
    let links = machines
        .iter()
        .map(|id| ResourceRef::new(types::LINK, id.clone()))
        .collect();
    let mut patches = Vec::new();
    for id in &machines {
        patches.extend(refs(
            &list(
                types::CONFIG_PATCH,
                vec![LabelCondition::equal(keys::MACHINE, id)],
            )
            .await?,
        ));
    }
    Ok([extensions, links, patches]
        .into_iter()
        .filter(|p: &Vec<ResourceRef>| !p.is_empty())
        .collect())
}

/// Advances the deletion of `cluster`: releases the KernelArgs the template manages, then tears
/// down and destroys phase by phase. Returns [`DeleteProgress::Done`] once nothing is left;
/// `output` gets Omni-style lines for what this step did.
pub async fn delete_cluster<S: TemplateState>(
    state: &S,
    cluster: &str,
    destroy_machines: bool,
    output: &mut Vec<String>,
) -> Result<DeleteProgress, SyncError> {
    delete_cluster_for(state, cluster, destroy_machines, BackendApi::V2, output).await
}

/// [`delete_cluster`] against a backend speaking API version `api` (on API 3 the machines'
/// install-disk configs written by templates are released like their KernelArgs).
pub async fn delete_cluster_for<S: TemplateState>(
    state: &S,
    cluster: &str,
    destroy_machines: bool,
    api: BackendApi,
    output: &mut Vec<String>,
) -> Result<DeleteProgress, SyncError> {
    let mut phases = if destroy_machines {
        destroy_machine_phases(state, cluster).await?
    } else {
        Vec::new()
    };
    let owned = collect_owned(state, cluster, api).await?;
    let mut deletes = Vec::new();
    for (r, resource) in &owned {
        if r.resource_type == types::KERNEL_ARGS
            || r.resource_type == types::MACHINE_INSTALL_DISK_CONFIG
        {
            if let Some(released) = release_kernel_args(resource) {
                output.push(format!("* updating {r}"));
                state
                    .update(released)
                    .await
                    .map_err(|e| state_err("update", r, e))?;
            }
            continue;
        }
        deletes.push(resource.clone());
    }
    phases.extend(delete_phases_for(cluster, deletes)?);

    for phase in phases {
        let mut waiting = Vec::new();
        for r in phase {
            match state.teardown(&r.resource_type, &r.id).await {
                Err(StateError::NotFound(_)) => {}
                Ok(true) => {
                    output.push(format!("* tearing down {r}"));
                    match state.destroy(&r.resource_type, &r.id).await {
                        Ok(()) | Err(StateError::NotFound(_)) => {
                            output.push(format!("* destroyed {r}"));
                        }
                        // A finalizer was added between teardown and destroy: try again later.
                        Err(StateError::Conflict(_)) => waiting.push(r),
                        Err(e) => return Err(state_err("destroy", &r, e)),
                    }
                }
                Ok(false) => {
                    output.push(format!("* tearing down {r}"));
                    waiting.push(r);
                }
                Err(e) => return Err(state_err("teardown", &r, e)),
            }
        }
        if !waiting.is_empty() {
            return Ok(DeleteProgress::InProgress {
                waiting_for: waiting,
            });
        }
    }
    Ok(DeleteProgress::Done)
}
