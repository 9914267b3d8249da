//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one replica reconciles.
//!
//! The holder renews `renewTime` every [`LeaderConfig::retry_period`]. Expiry is judged with the
//! local clock only, never by comparing the remote `renewTime` with it (the two clocks may
//! disagree by any amount): a standby takes over once it has seen the same Lease record,
//! unchanged, for `leaseDurationSeconds` of its own time. Updates carry the Lease's
//! resourceVersion, so two replicas racing for an expired Lease cannot both win.
//!
//! The leader's side of the bargain (see `LeaderConfig::stop_leading_at` and
//! `LeaderConfig::write_fence`): every renewal attempt is bounded by the time left until
//! `renew_deadline` after the start of its last successful renewal, when it stops leading, and
//! whatever is still running at the write fence is aborted. Any renewal a standby saw was
//! written after that start, so the standby's takeover comes later than the fence.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// Name of the Lease: the original Go operator's (controller-runtime's `LeaderElectionID`), so
/// that an instance of each in one namespace, during a migration or by accident, never
/// reconcile at the same time: both honour the one Lease.
pub const LEASE_NAME: &str = "5dc6398d.texashpc.com";

/// Leader-election settings.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity (pod name plus a random suffix).
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal (counted from the start
    /// of the last one); shorter than `lease_duration`, which leaves the rest for stopping.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Defaults: 15s lease, 10s renew deadline, 2s retry, identity from `POD_NAME` or the host
    /// name.
    pub fn new(namespace: impl Into<String>) -> Self {
        let base = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "omni-operator".to_string());
        Self {
            namespace: namespace.into(),
            name: LEASE_NAME.to_string(),
            identity: format!("{base}_{}", uuid::Uuid::new_v4()),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// When a leader whose last successful renewal started at `renewed_at` stops leading: no
    /// renewal attempt runs past it, and the controllers are told to stop.
    pub(crate) fn stop_leading_at(&self, renewed_at: Instant) -> Instant {
        renewed_at + self.renew_deadline.min(self.lease_duration)
    }

    /// When everything that writes on the leader's behalf must be gone: halfway between
    /// [`LeaderConfig::stop_leading_at`] and the earliest takeover (`renewed_at +
    /// lease_duration`), which leaves half of that gap as a margin for scheduling delays.
    pub(crate) fn write_fence(&self, renewed_at: Instant) -> Instant {
        let stop = self.stop_leading_at(renewed_at);
        let takeover = renewed_at + self.lease_duration;
        stop + (takeover - stop) / 2
    }
}

/// Why the Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// An API request failed for a reason other than a lost race.
    #[error("leader election Lease {namespace}/{name}: {source}")]
    Api {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer within the time the attempt had.
    #[error("leader election Lease {namespace}/{name}: no answer within {seconds:.1}s")]
    Timeout {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// How long the attempt waited.
        seconds: f64,
    },
}

/// What to do with a Lease observed at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// We hold it: renew.
    Renew,
    /// It is free or expired: take it over.
    Acquire,
    /// Someone else holds a valid Lease.
    Wait,
}

/// Pure: decide from the Lease spec and how long this process has seen that very record
/// unchanged (`unchanged_for`, by its own clock). The remote `renewTime` is never compared with
/// the local clock: a holder whose clock lags would otherwise look expired while it renews.
pub(crate) fn decide(spec: &LeaseSpec, identity: &str, unchanged_for: Duration) -> Decision {
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Acquire;
    }
    let duration = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    if unchanged_for >= Duration::from_secs(duration) {
        Decision::Acquire
    } else {
        Decision::Wait
    }
}

/// The Lease record as last seen, and when (by the local clock) it was first seen like that.
#[derive(Debug, Clone)]
struct Observed {
    spec: LeaseSpec,
    since: Instant,
}

/// One replica's view of the Lease.
#[derive(Debug, Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
    observed: Arc<Mutex<Option<Observed>>>,
}

impl LeaderElector {
    /// An elector for `config`.
    pub fn new(client: Client, config: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: Arc::default(),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &LeaderConfig {
        &self.config
    }

    fn err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// Records the Lease record seen now; how long it has been unchanged.
    fn observe(&self, spec: &LeaseSpec) -> Duration {
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match observed.as_ref() {
            Some(o) if o.spec == *spec => now - o.since,
            _ => {
                *observed = Some(Observed {
                    spec: spec.clone(),
                    since: now,
                });
                Duration::ZERO
            }
        }
    }

    /// Acquires or renews the Lease, giving up after `timeout` (a hung API server must not
    /// keep a leader from stepping down). `Ok(true)` while we lead; a lost race is `Ok(false)`.
    pub async fn try_acquire_or_renew(&self, timeout: Duration) -> Result<bool, LeaderError> {
        match tokio::time::timeout(timeout, self.acquire_or_renew()).await {
            Ok(result) => result,
            Err(_) => Err(LeaderError::Timeout {
                namespace: self.config.namespace.clone(),
                name: self.config.name.clone(),
                seconds: timeout.as_secs_f64(),
            }),
        }
    }

    async fn acquire_or_renew(&self) -> Result<bool, LeaderError> {
        let now = jiff::Timestamp::now();
        let seconds = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let existing = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.err(e))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created.spec.unwrap_or_default());
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.err(e)),
            };
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        let unchanged_for = self.observe(&spec);
        match decide(&spec, &self.config.identity, unchanged_for) {
            Decision::Wait => return Ok(false),
            Decision::Renew => {}
            Decision::Acquire => {
                spec.holder_identity = Some(self.config.identity.clone());
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions =
                    Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            }
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(seconds);
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written.spec.unwrap_or_default());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Gives the Lease up (if we hold it) so a successor need not wait for expiry; gives up
    /// after `timeout`.
    pub async fn release(&self, timeout: Duration) -> Result<(), LeaderError> {
        match tokio::time::timeout(timeout, self.release_now()).await {
            Ok(result) => result,
            Err(_) => Err(LeaderError::Timeout {
                namespace: self.config.namespace.clone(),
                name: self.config.name.clone(),
                seconds: timeout.as_secs_f64(),
            }),
        }
    }

    async fn release_now(&self) -> Result<(), LeaderError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            Err(e) => Err(self.err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed_secs: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(
                jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(renewed_secs),
            )),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decisions() {
        let secs = Duration::from_secs;
        assert_eq!(decide(&spec("me", 0, 15), "me", secs(100)), Decision::Renew);
        assert_eq!(
            decide(&spec("other", 0, 15), "me", secs(10)),
            Decision::Wait
        );
        assert_eq!(
            decide(&spec("other", 0, 15), "me", secs(15)),
            Decision::Acquire
        );
        assert_eq!(decide(&spec("", 0, 15), "me", secs(0)), Decision::Acquire);
        assert_eq!(
            decide(&LeaseSpec::default(), "me", secs(0)),
            Decision::Acquire
        );
    }

    #[test]
    fn a_renew_time_far_in_the_past_is_not_expiry() {
        // The holder's clock lags an hour behind ours: only how long we have seen the record
        // unchanged counts.
        let lagging = spec("other", -3600, 15);
        assert_eq!(
            decide(&lagging, "me", Duration::from_secs(1)),
            Decision::Wait
        );
    }

    #[test]
    fn the_fence_lies_between_stopping_and_the_earliest_takeover() {
        let config = LeaderConfig::new("ns");
        let renewed = Instant::now();
        assert_eq!(
            config.stop_leading_at(renewed),
            renewed + Duration::from_secs(10)
        );
        assert_eq!(
            config.write_fence(renewed),
            renewed + Duration::from_millis(12_500)
        );
        assert!(config.write_fence(renewed) < renewed + config.lease_duration);
    }
}
