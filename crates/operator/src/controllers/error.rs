//! Why a reconcile failed, what it does next, and the delays it waits.

use std::time::Duration;

use kube::runtime::controller::Action;
use rand::Rng;

use super::{cluster, connection, helm_release, kubeconfig_export, secret_sync};

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

/// The un-jittered delay is 5s·2^(failures-1), capped at 300s; `jitter` scales it.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(10);
    let base = (5u64 << exp).min(300) as f64;
    Duration::from_secs_f64(base * jitter)
}

/// Why a reconcile failed. The object's status already explains user-facing failures; this
/// error drives logging and backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the management cluster failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A status could not be serialised.
    #[error("could not serialise status: {0}")]
    Serialize(#[from] serde_json::Error),
    /// An OmniConnection failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    Connection(#[from] connection::ConnectionFailure),
    /// An OmniSecretSync failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    SecretSync(#[from] secret_sync::SecretSyncFailure),
    /// An OmniHelmRelease failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    HelmRelease(#[from] helm_release::HelmFailure),
    /// An OmniKubeconfigExport failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    Export(#[from] kubeconfig_export::ExportFailure),
    /// An OmniCluster failure retried with backoff; also in the object's conditions.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterFailure),
    /// The cached copy a status was computed from is older than the stored object, which it
    /// carries; nothing was written (see `status::write`).
    #[error("the cached copy of the object is older than the stored one")]
    StaleCache(Box<serde_json::Value>),
}

impl Error {
    /// [`Error::StaleCache`] carrying `stored`, the object as the server holds it now.
    pub(crate) fn stale_cache<K: serde::Serialize>(stored: &K) -> Result<Self, Error> {
        Ok(Self::StaleCache(Box::new(serde_json::to_value(stored)?)))
    }
}

/// What a reconcile that ended in a failure (reported in the object's conditions) does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryPolicy {
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
