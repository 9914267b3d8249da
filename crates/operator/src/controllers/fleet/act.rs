//! One pass of a set (IO): read the caches, plan, and make the plan's writes. A write that meets
//! a newer object asks for another look; one the API server refuses (the member kind's own
//! admission rules) is reported against its cluster, never worked around.

use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams, Preconditions};
use serde::Serialize;

use super::outcome::SetFailure;
use super::plan::{self, Inputs, Report, Step};
use super::{CACHE_WAIT, SetKind, SetState, cached_in};
use crate::api::Reason;
use crate::api::fleet::FailingCluster;
use crate::api::keys::SET_CLUSTER_LABEL;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::error::PassError;
use crate::controllers::shared::pipeline::{Outcome, Pipeline};
use crate::controllers::shared::watches::OwnKind;

/// Whether the caches a pass reads have been listed, waiting at most [`CACHE_WAIT`] in all.
async fn caches_ready<S: SetKind>(state: &SetState<S>) -> bool {
    let deadline = tokio::time::Instant::now() + CACHE_WAIT;
    let waits = [
        tokio::time::timeout_at(deadline, state.clusters.wait_until_ready()).await,
        tokio::time::timeout_at(deadline, state.members.wait_until_ready()).await,
        tokio::time::timeout_at(deadline, state.exports.wait_until_ready()).await,
    ];
    waits.iter().all(|w| matches!(w, Ok(Ok(()))))
}

/// One pass over `set`.
pub(crate) async fn pass<S>(
    set: &S,
    ctx: &Context,
    state: &SetState<S>,
) -> Result<Outcome<S>, PassError<S>>
where
    S: SetKind + Pipeline<Done = Report, Failure = SetFailure>,
{
    if !caches_ready(state).await {
        return Ok(Outcome::failed(SetFailure::CachesNotReady));
    }
    let namespace = set.namespace().unwrap_or_default();
    let clusters = cached_in(&state.clusters, &namespace);
    let members = cached_in(&state.members, &namespace);
    let exports = cached_in(&state.exports, &namespace);
    let plan::Plan {
        members: member_steps,
        exports: export_steps,
        mut report,
    } = plan::plan(&Inputs {
        set,
        clusters: &clusters,
        members: &members,
        exports: &exports,
    });
    write(ctx, &namespace, export_steps, &mut report).await?;
    write(ctx, &namespace, member_steps, &mut report).await?;
    Ok(Outcome::done(report))
}

/// Makes `steps` in `namespace`.
async fn write<K, S>(
    ctx: &Context,
    namespace: &str,
    steps: Vec<Step<K>>,
    report: &mut Report,
) -> Result<(), PassError<S>>
where
    K: OwnKind + Serialize,
{
    let api = ctx.api::<K>(namespace);
    let params = PostParams::default();
    for step in steps {
        let (obj, result) = match step {
            Step::Create(obj) => {
                let result = api.create(&params, &obj).await.map(drop);
                (Some(obj), result)
            }
            Step::Replace(obj) | Step::Leave(obj) => {
                let result = api.replace(&obj.name_any(), &params, &obj).await.map(drop);
                (Some(obj), result)
            }
            Step::Delete { name, uid } => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                (None, api.delete(&name, &params).await.map(drop))
            }
        };
        match result {
            Ok(()) => {}
            // Created, changed or deleted meanwhile: its watch event wakes the set again.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => report.retry_soon = true,
            // The member kind's admission refused what the set rendered: reported, not forced.
            Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                if let Some(obj) = obj {
                    report.failing.push(refused(&obj, &e.message));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn refused<K: kube::Resource>(obj: &K, message: &str) -> FailingCluster {
    let labels = obj.meta().labels.clone().unwrap_or_default();
    FailingCluster {
        cluster: labels.get(SET_CLUSTER_LABEL).cloned().unwrap_or_default(),
        name: obj.meta().name.clone().unwrap_or_default(),
        reason: Reason::ValidationFailed.as_str().to_string(),
        message: message.to_string(),
    }
}
