//! The one reconcile every kind runs.
//!
//! A kind implements [`Pipeline`]: `validate` (the webhook's own rules) → `apply` (observe,
//! plan and act; IO, returns an [`Outcome`]) → `desired_status` (pure) → the next reconcile
//! (`recheck` for what was done, the failure's [`RetryPolicy`] for what failed). The driver,
//! [`reconcile`], owns what is the same for every kind: the finalizer, the deletion path, the
//! single status write with its Event, and the next action. So a reader of a kind's module
//! finds only that kind's decisions, and each decision is a function a unit test can call.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::context::Context;
use super::error::{Failure, PassError, RetryPolicy};
use super::fairness::{TargetSlot, Wake, busy_retry};
use super::finalizer::{self, Finalizer};
use super::pace::StatusPacer;
use super::status::{self, Reported};
use crate::api::validation::Validation;

/// How far a deletion got.
#[derive(Debug)]
pub(crate) enum Cleanup<O> {
    /// Nothing of ours is left: the finalizer comes off.
    Done,
    /// The deletion cannot finish yet: this outcome is reported and its next reconcile followed.
    Waiting(O),
}

/// What one pass over an object of kind `P` came to: what it found on the way (reported
/// whatever the end, such as the cluster it looked up or the template it rendered) and how it
/// ended.
pub(crate) struct Outcome<P: Pipeline> {
    /// What the pass found before it ended.
    pub(crate) found: P::Found,
    /// What it did, or why it failed.
    pub(crate) result: Result<P::Done, P::Failure>,
}

impl<P: Pipeline> Outcome<P> {
    /// A pass that found `found` and ended with `result`.
    pub(crate) fn new(found: P::Found, result: Result<P::Done, P::Failure>) -> Self {
        Self { found, result }
    }

    /// A pass that did `done` having found nothing worth reporting.
    pub(crate) fn done(done: P::Done) -> Self {
        Self::new(P::Found::default(), Ok(done))
    }

    /// A pass that failed before it found anything worth reporting.
    pub(crate) fn failed(failure: impl Into<P::Failure>) -> Self {
        Self::new(P::Found::default(), Err(failure.into()))
    }
}

impl<P: Pipeline> std::fmt::Debug for Outcome<P>
where
    P::Found: std::fmt::Debug,
    P::Done: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outcome")
            .field("found", &self.found)
            .field("result", &self.result)
            .finish()
    }
}

/// The webhook's verdict `validation` as a kind's failure: `invalid` of its summary.
pub(crate) fn webhook_rules<F>(
    validation: Validation,
    invalid: impl FnOnce(String) -> F,
) -> Result<(), F> {
    if validation.is_valid() {
        Ok(())
    } else {
        Err(invalid(validation.error_summary()))
    }
}

/// One kind's steps in the reconcile pipeline, run by [`reconcile`].
pub(crate) trait Pipeline:
    Reported<Scope = k8s_openapi::NamespaceResourceScope> + Send + Sync + 'static
{
    /// What the kind's controller keeps and is configured with (its clients, intervals,
    /// caches and memories), built once when the controller starts.
    type State: Send + Sync + 'static;
    /// What a pass found on the way that the status reports whatever the end.
    type Found: Default + Send + Sync;
    /// What a pass that did not fail came to.
    type Done: Send + Sync;
    /// Why a pass failed.
    type Failure: Failure;

    /// Which of the operator's finalizers the kind carries.
    const FINALIZER: Finalizer;

    /// Whether a pass starts from the stored object rather than the watch cache: for a kind
    /// whose actions cannot be undone by a later status write (a Helm revision planned from a
    /// stale digest is a needless revision). A newer stored copy reruns the pass on it.
    const READ_FRESH: bool = false;

    /// The webhook's own rules, applied again in case admission was bypassed (see
    /// [`webhook_rules`]).
    fn validate(&self) -> Result<(), Self::Failure>;

    /// Observe, plan and act on a valid object that carries the finalizer. `Err` only for
    /// what status does not report: management API errors and [`PassError::Stale`] (also the
    /// way to hand over an object found deleted meanwhile: its deletion runs at once).
    fn apply(
        &self,
        ctx: &Context,
        state: &Self::State,
    ) -> impl Future<Output = Result<Outcome<Self>, PassError<Self>>> + Send;

    /// The deletion of an object that still carries the finalizer (never called for a kind
    /// without one).
    fn cleanup(
        &self,
        ctx: &Context,
        state: &Self::State,
    ) -> impl Future<Output = Result<Cleanup<Outcome<Self>>, PassError<Self>>> + Send {
        let _ = (ctx, state);
        std::future::ready(Ok(Cleanup::Done))
    }

    /// Pure: the status that reports `outcome`, conditions stamped `now`.
    fn desired_status(&self, outcome: &Outcome<Self>, now: jiff::Timestamp) -> Self::Status;

    /// Pure: when an object whose pass came to `done` is looked at again. By default only when
    /// it changes, or what it depends on does.
    fn recheck(&self, done: &Self::Done, ctx: &Context, state: &Self::State) -> Action {
        let _ = (done, ctx, state);
        Action::await_change()
    }

    /// Pure: what follows `failure`; by default the failure's own [`Failure::retry`].
    fn retry(&self, failure: &Self::Failure, state: &Self::State) -> RetryPolicy {
        let _ = state;
        failure.retry()
    }

    /// What a pass talks to (a kubeconfig Secret, an OmniCluster, an OmniConnection), whose
    /// objects together hold at most their share of the reconcile slots (`fairness.rs`).
    fn target(&self) -> Option<String> {
        None
    }

    /// For a kind whose status counts progress (the fleet sets): the pacer that holds a
    /// status write moving only those counts (see [`Pipeline::progress_only`]).
    fn status_pacer(state: &Self::State) -> Option<&StatusPacer> {
        let _ = state;
        None
    }

    /// Pure: whether `new` differs from `old` only in counts of progress, which may wait for
    /// the kind's pace.
    fn progress_only(old: &Self::Status, new: &Self::Status) -> bool {
        let _ = (old, new);
        false
    }

    /// Drops what the operator keeps for this object once its finalizer is off.
    fn forget(&self, state: &Self::State) {
        let _ = state;
    }

    /// After the status write: anything worth announcing that the condition Event does not
    /// say (`old` is the status before this pass).
    fn announce(
        &self,
        ctx: &Context,
        outcome: &Outcome<Self>,
        old: Option<&Self::Status>,
        new: &Self::Status,
    ) -> impl Future<Output = ()> + Send {
        let _ = (ctx, outcome, old, new);
        std::future::ready(())
    }
}

/// `outcome`, unless the object is being deleted on the server although `obj` (from the watch
/// cache) is not: then [`PassError::Stale`] with the stored copy, so its deletion runs at
/// once. A namespace deletion or prune deletes an object together with the Secrets and
/// cluster it uses; a pass that read it a moment before then finds them gone, and must do the
/// deletion rather than report the object stranded with `MissingSecret` or `MissingCluster`.
pub(crate) async fn unless_deleted_meanwhile<P: Pipeline>(
    ctx: &Context,
    obj: &P,
    outcome: Outcome<P>,
) -> Result<Outcome<P>, PassError<P>> {
    not_deleted_meanwhile(ctx, obj).await?;
    Ok(outcome)
}

/// [`PassError::Stale`] with the stored copy when the object is being deleted on the server
/// although `obj` (from the watch cache) is not. Asked before an action that would outlive a
/// deletion the cache has not seen yet (an export minting a credential and writing it into a
/// Secret its prune just removed).
pub(crate) async fn not_deleted_meanwhile<P: Pipeline>(
    ctx: &Context,
    obj: &P,
) -> Result<(), PassError<P>> {
    let api = ctx.api::<P>(&obj.namespace().unwrap_or_default());
    match api.get_opt(&obj.name_any()).await? {
        Some(stored) if stored.meta().deletion_timestamp.is_some() => Err(PassError::stale(stored)),
        _ => Ok(()),
    }
}

/// A slot of `obj`'s target's share of its kind's reconcile slots (`fairness.rs`); `Ok(None)`
/// for an object without a target, `Err` with when to come back while the target's window is
/// full — the wake `wake` builds brings it back earlier, as soon as a slot of the target is
/// given back.
/// Each controller has its own slots, so each kind has its own share of a target.
pub(crate) fn target_slot<P: Pipeline>(
    obj: &P,
    ctx: &Context,
    wake: impl FnOnce() -> Wake,
) -> Result<Option<TargetSlot>, Action> {
    let Some(target) = obj.target() else {
        return Ok(None);
    };
    let key = || format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    ctx.target_slots
        .try_take(&format!("{}/{target}", P::kind(&())), key, wake)
        .map(Some)
        .ok_or_else(|| Action::requeue(busy_retry()))
}

/// The reconcile of every [`Pipeline`] kind.
pub(crate) async fn reconcile<P: Pipeline>(
    obj: Arc<P>,
    ctx: Arc<Context>,
    state: Arc<P::State>,
) -> Result<Action, PassError<P>> {
    let namespace = obj.namespace().unwrap_or_default();
    let api = ctx.api::<P>(&namespace);
    if P::READ_FRESH {
        match api.get_opt(&obj.name_any()).await? {
            None => return Ok(Action::await_change()),
            Some(stored) if stored.meta().resource_version != obj.meta().resource_version => {
                return Err(PassError::stale(stored));
            }
            Some(_) => {}
        }
    }
    let deleting = obj.meta().deletion_timestamp.is_some();
    let outcome = if deleting && P::FINALIZER != Finalizer::None {
        if !finalizer::has_finalizer(obj.as_ref(), P::FINALIZER) {
            return Ok(Action::await_change());
        }
        match obj.cleanup(&ctx, &state).await? {
            Cleanup::Done => {
                finalizer::remove(&api, obj.as_ref(), P::FINALIZER).await?;
                ctx.metrics
                    .forget_resource(&P::kind(&()), &namespace, &obj.name_any());
                obj.forget(&state);
                return Ok(Action::await_change());
            }
            Cleanup::Waiting(outcome) => outcome,
        }
    } else {
        if !finalizer::ensure(&api, obj.as_ref(), P::FINALIZER).await? {
            return Ok(Action::await_change());
        }
        match obj.validate() {
            Ok(()) => obj.apply(&ctx, &state).await?,
            Err(invalid) => Outcome::failed(invalid),
        }
    };
    let mut status = obj.desired_status(&outcome, ctx.clock.now());
    status::record_reconcile_request(&mut status, obj.meta());
    let paced = P::status_pacer(&state).map(|p| (p, format!("{namespace}/{}", obj.name_any())));
    if let Some((pacer, key)) = &paced
        && outcome.result.is_ok()
        && obj
            .stored_status()
            .is_some_and(|old| P::progress_only(old, &status))
        && let Some(wait) = pacer.hold(key, Instant::now())
    {
        // Back when the pace allows, with the counts of then.
        return Ok(Action::requeue(wait));
    }
    if status::report(&ctx, obj.as_ref(), &status).await?
        && let Some((pacer, key)) = &paced
    {
        pacer.wrote(key, Instant::now());
    }
    obj.announce(&ctx, &outcome, obj.stored_status(), &status)
        .await;
    Ok(match outcome.result {
        Ok(done) => obj.recheck(&done, &ctx, &state),
        Err(failure) => obj.retry(&failure, &state).after(failure)?,
    })
}
