//! The one reconcile every kind runs.
//!
//! A kind implements [`Pipeline`]: `validate` (the webhook's own rules) → `apply` (observe,
//! plan and act; IO, returns an outcome) → `desired_status` (pure) → `next` (pure). The driver,
//! [`reconcile`], owns what is the same for every kind: metrics and backoff bookkeeping, the
//! finalizer, the deletion path, the single status write with its Event, and the next action.
//! So a reader of a kind's module finds only that kind's decisions, and each decision is a
//! function a unit test can call.

use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::status::{self, Reported};
use super::{Context, Error, finalizer, instrumented};
use crate::api::validation::Validation;

/// How far a deletion got.
#[derive(Debug)]
pub(crate) enum Cleanup<O> {
    /// Nothing of ours is left: the finalizer comes off.
    Done,
    /// The deletion cannot finish yet: this outcome is reported and its `next` followed.
    Waiting(O),
}

/// One kind's steps in the reconcile pipeline, run by [`reconcile`].
pub(crate) trait Pipeline:
    Reported<Scope = k8s_openapi::NamespaceResourceScope> + Send + Sync + 'static
{
    /// What one pass found and did; [`Pipeline::desired_status`] reports it.
    type Outcome: Send;

    /// Whether the kind carries the original operator's finalizer name (see [`finalizer`]).
    const LEGACY_FINALIZER: bool;

    /// Whether a pass starts from the stored object rather than the watch cache: for a kind
    /// whose actions cannot be undone by a later status write (a Helm revision planned from a
    /// stale digest is a needless revision). A newer stored copy reruns the pass on it.
    const READ_FRESH: bool = false;

    /// The webhook's own rules, applied again in case admission was bypassed.
    fn validate(&self) -> Validation;

    /// The outcome of an object that failed [`Pipeline::validate`]; `summary` is
    /// [`Validation::error_summary`].
    fn invalid(summary: String) -> Self::Outcome;

    /// Observe, plan and act on a valid object that carries the finalizer. `Err` only for
    /// what status does not report: management API errors and [`Error::StaleCache`] (also
    /// the way to hand over an object found deleted meanwhile: its deletion runs at once).
    fn apply(
        self: Arc<Self>,
        ctx: Arc<Context>,
    ) -> impl Future<Output = Result<Self::Outcome, Error>> + Send;

    /// Pure: the status that reports `outcome`, conditions stamped `now`.
    fn desired_status(&self, outcome: &Self::Outcome, now: jiff::Timestamp) -> Self::Status;

    /// Pure: the next reconcile once `outcome` is reported; `Err` hands the object to the
    /// per-object error backoff.
    fn next(&self, outcome: Self::Outcome, ctx: &Context) -> Result<Action, Error>;

    /// The deletion of an object that still carries the finalizer.
    fn cleanup(
        self: Arc<Self>,
        ctx: Arc<Context>,
    ) -> impl Future<Output = Result<Cleanup<Self::Outcome>, Error>> + Send;

    /// Drops what the operator keeps for this object once its finalizer is off.
    fn forget(&self, _ctx: &Context) {}

    /// What a pass talks to (a kubeconfig Secret, an OmniCluster, an OmniConnection), whose
    /// objects together hold at most their share of the reconcile slots (`fairness.rs`).
    fn target(&self) -> Option<String> {
        None
    }

    /// After the status write: anything worth announcing that the condition Event does not
    /// say (`old` is the status before this pass).
    fn announce(
        &self,
        _ctx: &Context,
        _outcome: &Self::Outcome,
        _old: Option<&Self::Status>,
        _new: &Self::Status,
    ) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// `outcome`, unless the object is being deleted on the server although `obj` (from the watch
/// cache) is not: then `Err(StaleCache)` with the stored copy, so its deletion runs at once. A
/// namespace deletion or prune deletes an object together with the Secrets and cluster it
/// uses; a pass that read it a moment before then finds them gone, and must do the deletion
/// rather than report the object stranded with `MissingSecret` or `MissingCluster`.
pub(crate) async fn unless_deleted_meanwhile<P: Pipeline>(
    ctx: &Context,
    obj: &P,
    outcome: P::Outcome,
) -> Result<P::Outcome, Error> {
    not_deleted_meanwhile(ctx, obj).await?;
    Ok(outcome)
}

/// `Err(StaleCache)` with the stored copy when the object is being deleted on the server
/// although `obj` (from the watch cache) is not. Asked before an action that would outlive a
/// deletion the cache has not seen yet (an export minting a credential and writing it into a
/// Secret its prune just removed).
pub(crate) async fn not_deleted_meanwhile<P: Pipeline>(
    ctx: &Context,
    obj: &P,
) -> Result<(), Error> {
    let api = ctx.api::<P>(&obj.namespace().unwrap_or_default());
    match api.get_opt(&obj.name_any()).await? {
        Some(stored) if stored.meta().deletion_timestamp.is_some() => {
            Err(Error::stale_cache(&stored)?)
        }
        _ => Ok(()),
    }
}

/// The reconcile of every [`Pipeline`] kind.
pub(crate) async fn reconcile<P: Pipeline>(
    obj: Arc<P>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    // Before anything else: a target holding its share waits, doing nothing, so one server
    // that never answers cannot take every slot.
    // Each controller has its own slots, so each kind has its own share of a target's.
    let _slot = match obj.target() {
        Some(target) => match ctx
            .target_slots
            .try_take(&format!("{}/{target}", P::kind(&())))
        {
            Some(slot) => Some(slot),
            None => return Ok(Action::requeue(super::fairness::busy_retry())),
        },
        None => None,
    };
    instrumented(obj.as_ref(), &ctx, async {
        let namespace = obj.namespace().unwrap_or_default();
        let api = ctx.api::<P>(&namespace);
        if P::READ_FRESH {
            match api.get_opt(&obj.name_any()).await? {
                None => return Ok(Action::await_change()),
                Some(stored) if stored.meta().resource_version != obj.meta().resource_version => {
                    return Err(Error::stale_cache(&stored)?);
                }
                Some(_) => {}
            }
        }
        let outcome = if obj.meta().deletion_timestamp.is_some() {
            if !finalizer::has_finalizer(obj.as_ref(), P::LEGACY_FINALIZER) {
                return Ok(Action::await_change());
            }
            match obj.clone().cleanup(ctx.clone()).await? {
                Cleanup::Done => {
                    finalizer::remove(&api, obj.as_ref(), P::LEGACY_FINALIZER).await?;
                    ctx.metrics
                        .forget_resource(&P::kind(&()), &namespace, &obj.name_any());
                    obj.forget(&ctx);
                    return Ok(Action::await_change());
                }
                Cleanup::Waiting(outcome) => outcome,
            }
        } else {
            if !finalizer::ensure(&api, obj.as_ref(), P::LEGACY_FINALIZER).await? {
                return Ok(Action::await_change());
            }
            let validation = obj.validate();
            if validation.is_valid() {
                obj.clone().apply(ctx.clone()).await?
            } else {
                P::invalid(validation.error_summary())
            }
        };
        let status = obj.desired_status(&outcome, ctx.clock.now());
        status::report(&ctx, obj.as_ref(), &status).await?;
        obj.announce(&ctx, &outcome, obj.stored_status(), &status)
            .await;
        obj.next(outcome, &ctx)
    })
    .await
}
