//! Why a reconcile failed, what it does next, and the delays it waits.
//!
//! Each kind's failures are its own enum; what the shell needs of them is the [`Failure`]
//! trait: the condition reason they are reported under and the [`RetryPolicy`] that says what
//! happens next (the shape of Stackable's `ReconcilerError::category()`). A failure that backs
//! off travels as [`Error::Failed`], so this module names no kind.

use std::time::Duration;

use kube::runtime::controller::Action;
use rand::Rng;

use crate::api::Reason;

/// A periodic re-check's delay spread by ±10 %, so objects created together (a cold start, a
/// GitOps apply of a fleet) do not come due together for ever after, in waves that hit Omni,
/// helm and the workload clusters at once.
pub(crate) fn periodic(period: Duration) -> Duration {
    period.mul_f64(periodic_spread())
}

/// The factor [`periodic`] scales a period by: uniform in [0.9, 1.1).
pub(crate) fn periodic_spread() -> f64 {
    rand::thread_rng().gen_range(0.9..1.1)
}

/// The per-object retry delay after `failures` failures in a row: 5s·2^(failures-1), capped at
/// 300s, scaled by `jitter` (the operator draws it from [0.8, 1.2)).
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(10);
    let base = (5u64 << exp).min(300) as f64;
    Duration::from_secs_f64(base * jitter)
}

/// What a failure means in kstatus terms (the conditions Flux, Argo CD and `kubectl wait`
/// read), and so how loudly it is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// The object waits for something to appear or become ready (a sibling, a Secret, its
    /// cluster, Omni creating something): `Reconciling=True`, a Normal Event, and never the
    /// error backoff (its [`RetryPolicy`] is not [`RetryPolicy::Backoff`]).
    Waiting,
    /// A failure a retry may fix (Omni or a workload cluster down, a write refused for now):
    /// `Ready=False` alone, a Warning Event.
    Retrying,
    /// A failure only a change of the spec, or of what it names, can fix (an invalid spec, a
    /// version Omni refuses, a target owned by someone else): `Stalled=True`, a Warning Event.
    Stalled,
}

/// Why an object is not where its spec wants it: one variant of a kind's failure enum. The
/// message (`Display`) is the condition's and the Event's, so it never carries a secret.
pub(crate) trait Failure: std::error::Error + Send + Sync + 'static {
    /// The condition reason it is reported under.
    fn reason(&self) -> Reason;
    /// What the reconcile does next.
    fn retry(&self) -> RetryPolicy;
    /// What it means in kstatus terms: waiting, retried, or stalled.
    fn disposition(&self) -> Disposition;
}

/// Why a reconcile failed. The object's status already explains a kind's failures; this error
/// drives logging and the per-object backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A request to the management cluster failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A status could not be serialised.
    #[error("could not serialise status: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A kind's failure whose [`RetryPolicy`] is [`RetryPolicy::Backoff`]; also in the
    /// object's conditions.
    #[error("{0}")]
    Failed(Box<dyn Failure>),
    /// The stored object kept changing under the pass, which went on from a newer copy as
    /// many times as it may (see `decoded::STALE_CACHE_RERUNS`).
    #[error("the stored object kept changing while it was reconciled")]
    StaleCache,
}

impl Error {
    /// `failure`, handed to the per-object backoff.
    pub(crate) fn failed(failure: impl Failure) -> Self {
        Self::Failed(Box::new(failure))
    }
}

/// Why one pass over an object of kind `K` stopped before its end.
#[derive(Debug)]
pub(crate) enum PassError<K> {
    /// The cached copy the pass started from is older than the stored object, which it
    /// carries: nothing was written, and the pass runs again on the stored copy (see
    /// `status::write`, `finalizer::ensure`).
    Stale(Box<K>),
    /// It failed.
    Failed(Error),
}

impl<K> PassError<K> {
    /// The stored copy `stored`, newer than the one the pass started from.
    pub(crate) fn stale(stored: K) -> Self {
        Self::Stale(Box::new(stored))
    }
}

impl<K> From<Error> for PassError<K> {
    fn from(error: Error) -> Self {
        Self::Failed(error)
    }
}

impl<K> From<kube::Error> for PassError<K> {
    fn from(error: kube::Error) -> Self {
        Self::Failed(error.into())
    }
}

impl<K> From<serde_json::Error> for PassError<K> {
    fn from(error: serde_json::Error) -> Self {
        Self::Failed(error.into())
    }
}

/// What a reconcile that ended in a failure (reported in the object's conditions) does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryPolicy {
    /// Nothing until the object changes: retrying cannot help (a spec or policy problem).
    AwaitChange,
    /// Look again after this delay: what is missing is not watched, or not by this controller.
    Poll(Duration),
    /// Fail the reconcile, so the per-object exponential backoff retries it.
    Backoff,
}

impl RetryPolicy {
    /// The next reconcile, or `None` under [`RetryPolicy::Backoff`] (the reconcile fails).
    pub(crate) fn action(self) -> Option<Action> {
        match self {
            Self::AwaitChange => Some(Action::await_change()),
            Self::Poll(after) => Some(Action::requeue(after)),
            Self::Backoff => None,
        }
    }

    /// The next reconcile after `failure`, or `Err` handing it to the backoff.
    pub(crate) fn after(self, failure: impl Failure) -> Result<Action, Error> {
        self.action().ok_or_else(|| Error::failed(failure))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Periodic re-checks of objects created together drift apart: each delay lands within
    /// ±10 % of the period, and they are not all the same.
    #[test]
    fn periodic_rechecks_are_spread_by_ten_percent() {
        let period = Duration::from_secs(300);
        let delays: Vec<Duration> = (0..200).map(|_| periodic(period)).collect();
        let (low, high) = (Duration::from_secs(270), Duration::from_secs(330));
        assert!(delays.iter().all(|d| (low..high).contains(d)), "{delays:?}");
        assert!(delays.iter().any(|d| *d != delays[0]), "no spread");
    }

    #[test]
    fn backoff_grows_exponentially_and_caps() {
        assert_eq!(backoff_delay(1, 1.0), Duration::from_secs(5));
        assert_eq!(backoff_delay(2, 1.0), Duration::from_secs(10));
        assert_eq!(backoff_delay(4, 1.0), Duration::from_secs(40));
        assert_eq!(backoff_delay(7, 1.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(40, 1.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(1, 1.2), Duration::from_secs(6));
    }
}
