//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one replica reconciles.
//!
//! The holder renews `renewTime` every [`LeaderConfig::retry_period`]; another replica takes
//! over once `renewTime + leaseDurationSeconds` has passed. Updates carry the Lease's
//! resourceVersion, so two replicas racing for an expired Lease cannot both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

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
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Defaults: 15s lease, 2s retry, identity from `POD_NAME` or the host name.
    pub fn new(namespace: impl Into<String>) -> Self {
        let base = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "omni-operator".to_string());
        Self {
            namespace: namespace.into(),
            name: LEASE_NAME.to_string(),
            identity: format!("{base}_{}", uuid::Uuid::new_v4()),
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        }
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
}

/// What to do with a Lease observed at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: renew.
    Renew,
    /// It is free or expired: take it over.
    Acquire,
    /// Someone else holds a valid Lease.
    Wait,
}

/// Pure: decide from the Lease spec.
pub fn decide(spec: &LeaseSpec, identity: &str, now: jiff::Timestamp) -> Decision {
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Acquire;
    }
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    match &spec.renew_time {
        Some(MicroTime(renewed)) if *renewed + jiff::SignedDuration::from_secs(duration) > now => {
            Decision::Wait
        }
        _ => Decision::Acquire,
    }
}

/// One replica's view of the Lease.
#[derive(Debug, Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
}

impl LeaderElector {
    /// An elector for `config`.
    pub fn new(client: Client, config: LeaderConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
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

    /// Acquires or renews the Lease. `Ok(true)` while we lead; a lost race is `Ok(false)`.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaderError> {
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
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.err(e)),
            };
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        match decide(&spec, &self.config.identity, now) {
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
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Gives the Lease up (if we hold it) so a successor need not wait for expiry.
    pub async fn release(&self) -> Result<(), LeaderError> {
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
        let at = |s: i64| jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(s);
        assert_eq!(decide(&spec("me", 0, 15), "me", at(100)), Decision::Renew);
        assert_eq!(decide(&spec("other", 0, 15), "me", at(10)), Decision::Wait);
        assert_eq!(
            decide(&spec("other", 0, 15), "me", at(16)),
            Decision::Acquire
        );
        assert_eq!(decide(&spec("", 0, 15), "me", at(1)), Decision::Acquire);
        assert_eq!(
            decide(&LeaseSpec::default(), "me", at(1)),
            Decision::Acquire
        );
    }
}
