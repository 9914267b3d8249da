//! How a controller is built and driven: its own objects' watch and reverse index, the loop
//! around each reconcile (decoded objects, newer stored copies, metrics, backoff), and its
//! error policy.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt as _;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt as _};

use super::context::{Context, object_key};
use super::decoded::{Cached, report_undecodable};
use super::error::{Error, PassError};
use super::fairness::Wake;
use super::index::{RefIndex, RefKey};
use super::pipeline::{self, Pipeline};
use super::triggers::{Deletions, changes_from, own_change};
use super::watches::{OwnKind, Watches};

/// How many times in a row one reconcile goes on from a newer stored copy
/// ([`PassError::Stale`]) before leaving the object to the error backoff: adding the finalizer
/// takes one, a status write racing another writer one more.
const STALE_CACHE_RERUNS: usize = 3;

/// What stops a controller: a future that completes when the operator shuts down (or loses its
/// leadership).
pub(crate) trait Shutdown: Future<Output = ()> + Send + Sync + 'static {}

impl<S: Future<Output = ()> + Send + Sync + 'static> Shutdown for S {}

/// A controller of kind `K`, reading its objects from the kind's shared watch and cache
/// ([`Watches`]) as [`Cached`] values, so one undecodable object cannot stall the whole watch.
///
/// Its own objects trigger a reconcile only when [`own_change`] differs: a status write (ours
/// included) is not a reason to reconcile again. Without this filter every status write of a
/// failing or waiting object re-ran its reconcile at once, bypassing both the backoff and the
/// computed requeue (a hot loop of hundreds of writes per second). Watches of other kinds,
/// whose status a controller may depend on, are unaffected.
///
/// It keeps a [`RefIndex`] of its objects by what they refer to (`keys`) from the same watch,
/// for the controller's mapped watches.
pub(crate) fn indexed_controller_for<K: OwnKind>(
    ctx: &Context,
    watches: &mut Watches,
    keys: fn(&K) -> Vec<RefKey>,
) -> (kube::runtime::Controller<Cached<K>>, Arc<RefIndex<K>>) {
    let index = Arc::new(RefIndex::new(keys));
    let kept = index.clone();
    let watch = watches.of::<K>();
    let reader = watch.store();
    let metrics = ctx.metrics.clone();
    let events = watch.subscribe().inspect(move |event| {
        kept.apply(event);
        // Gone from the watch: deleted, or moved to another shard, whose series it now is.
        if let kube::runtime::watcher::Event::Delete(obj) = event {
            let ns = obj.namespace().unwrap_or_default();
            metrics.forget_resource(&K::kind(&()), &ns, &obj.name_any());
        }
    });
    let triggers = changes_from(events, own_change, Deletions::Skip).map(Ok);
    let controller = kube::runtime::Controller::for_stream(triggers, reader).with_config(
        kube::runtime::controller::Config::default().concurrency(ctx.max_concurrent_reconciles),
    );
    (controller, index)
}

/// Runs `controller` of kind `P`, whose own state is `state`, until `shutdown` completes: each
/// object goes through the kind's [`Pipeline`]; failures back off per object.
pub(crate) async fn drive<P: Pipeline + std::fmt::Debug>(
    controller: kube::runtime::Controller<Cached<P>>,
    ctx: Arc<Context>,
    state: P::State,
    shutdown: impl Shutdown,
) {
    let kind = P::kind(&()).into_owned();
    let state = Arc::new(state);
    // Objects queued behind a busy target come back through here when a slot of it is free.
    let (woken, wakes) = futures::channel::mpsc::unbounded::<ObjectRef<Cached<P>>>();
    controller
        .reconcile_on(wakes)
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx: Arc<Context>| {
                let state = state.clone();
                let woken = woken.clone();
                async move {
                    // Another shard's object (a kind read across shards is watched whole, and
                    // a relabelled object hands over): left to its shard.
                    if !ctx.shard.owns(obj.labels()) {
                        // Its series, from before a move, is the new shard's to report.
                        let ns = obj.namespace().unwrap_or_default();
                        ctx.metrics
                            .forget_resource(&P::kind(&()), &ns, &obj.name_any());
                        return Ok(Action::await_change());
                    }
                    // Before anything else, and outside the pass's metrics and backoff: while
                    // its target holds its whole share, an object waits doing nothing, so
                    // objects pointing at one server that never answers cannot take every slot.
                    let wake = || -> Wake {
                        let me = ObjectRef::from_obj(obj.as_ref());
                        Box::new(move || {
                            // The controller is gone when this fails: nothing is left to wake.
                            let _ = woken.unbounded_send(me);
                        })
                    };
                    let slot = obj.decoded().map(|k| pipeline::target_slot(k, &ctx, wake));
                    let _slot = match slot {
                        Some(Err(later)) => return Ok(later),
                        Some(Ok(slot)) => slot,
                        None => None,
                    };
                    let pass_ctx = ctx.clone();
                    run_pass(obj, ctx, move |k| {
                        pipeline::reconcile(k, pass_ctx.clone(), state.clone())
                    })
                    .await
                }
            },
            error_policy,
            ctx,
        )
        .for_each(|result| {
            match result {
                Ok(obj) => tracing::debug!(kind, object = ?obj, "reconciled"),
                Err(e) => tracing::debug!(kind, error = %e, "reconcile did not complete"),
            }
            std::future::ready(())
        })
        .await;
}

/// One reconcile of `obj`: `pass` (the kind's pipeline) on the decoded object, again on the
/// stored copy when the cached one was stale, with metrics and backoff bookkeeping around each
/// attempt. An undecodable object gets a condition and an Event instead and is left alone until
/// it changes.
async fn run_pass<K, F, Fut>(
    obj: Arc<Cached<K>>,
    ctx: Arc<Context>,
    pass: F,
) -> Result<Action, Error>
where
    K: OwnKind,
    F: Fn(Arc<K>) -> Fut,
    Fut: Future<Output = Result<Action, PassError<K>>>,
{
    let mut obj = obj;
    let mut reruns = 0;
    let bad = loop {
        let k = match obj.as_ref() {
            Cached::Decoded(k) => k.clone(),
            Cached::Undecodable(bad) => break bad.clone(),
        };
        let started = Instant::now();
        let result = pass(k.clone()).await;
        // A stale cache is no failure: the pass runs again at once on the stored object.
        let failed = matches!(result, Err(PassError::Failed(_)));
        ctx.metrics
            .reconciled(&K::kind(&()), started.elapsed().as_secs_f64(), failed);
        match result {
            Ok(action) => {
                ctx.reset_backoff(k.as_ref());
                return Ok(action);
            }
            // The watch cache lagged behind the server (or has not seen our own write yet):
            // go on from the server's copy, rather than waiting for the cache (its watcher may
            // be backing off) or a backoff.
            Err(PassError::Stale(stored)) if reruns < STALE_CACHE_RERUNS => {
                reruns += 1;
                obj = Arc::new(Cached::new(*stored));
            }
            Err(PassError::Stale(_)) => return Err(Error::StaleCache),
            Err(PassError::Failed(error)) => return Err(error),
        }
    };
    report_undecodable(&obj, &bad, &ctx).await
}

/// The error policy of every controller: retry with per-object exponential backoff.
fn error_policy<K>(obj: Arc<Cached<K>>, err: &Error, ctx: Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()> + Clone,
{
    let delay = ctx.backoff(obj.as_ref());
    let key = object_key(obj.as_ref());
    tracing::warn!(object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

#[cfg(test)]
#[path = "stale_tests.rs"]
mod stale_tests;
