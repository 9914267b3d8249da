//! What one check found, and the status it leads to (pure).

use crate::api::OmniConnection;
use crate::api::Reason;
use crate::api::common::{Condition, ConditionStatus, condition_types, set_condition};
use crate::api::connection::OmniConnectionStatus;
use crate::controllers::shared::error::{Failure, RetryPolicy};
use crate::controllers::shared::omni::{ApiVersionError, ConnectionError};
use crate::controllers::shared::pipeline;

/// Why an OmniConnection is not ready; the message is its condition's and Event's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConnectionFailure {
    /// The spec is invalid (it bypassed admission): the webhook's summary.
    #[error("{0}")]
    InvalidSpec(String),
    /// The Omni client could not be built (its Secret, key or endpoint).
    #[error("failed to connect to Omni: {0}")]
    Client(#[source] ConnectionError),
    /// Omni's backend API version could not be read.
    #[error("failed to connect to Omni: {0}")]
    BackendApi(#[source] ApiVersionError),
    /// Omni did not answer the ping (a list of its clusters).
    #[error("failed to connect to Omni: list Omni clusters: {0}")]
    Ping(#[source] omni_client::state::StateError),
}

impl Failure for ConnectionFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::InvalidSpec(_) => Reason::ValidationFailed,
            Self::Client(e) => e.reason(),
            Self::BackendApi(_) | Self::Ping(_) => Reason::ConnectionFailed,
        }
    }

    /// An invalid spec waits for a change, the rest backs off.
    fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) => RetryPolicy::AwaitChange,
            Self::Client(_) | Self::BackendApi(_) | Self::Ping(_) => RetryPolicy::Backoff,
        }
    }
}

/// What one pass came to, before it becomes conditions.
pub(crate) type Outcome = pipeline::Outcome<OmniConnection>;

/// What a check that did not fail found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Omni answered.
    Reachable {
        /// Endpoint as the Omni client reports it.
        endpoint: String,
    },
    /// Omni answered but speaks a backend API version this operator cannot translate for.
    UnsupportedApi {
        /// Endpoint as the Omni client reports it.
        endpoint: String,
        /// The version Omni reported (0 = none).
        version: u32,
    },
    /// Deletion waits for these clusters (sorted).
    Deleting {
        /// Names of the referencing OmniClusters.
        clusters: Vec<String>,
    },
}

/// One condition a check sets: its status, reason and message.
type Set = (ConditionStatus, Reason, String);

/// Pure: what `outcome` says of `Reachable`, `Ready` and `Stalled` (`None`: left as it was).
fn conditions_of(outcome: &Outcome) -> [Option<Set>; 3] {
    use ConditionStatus::{False, True};
    match &outcome.result {
        Ok(Checked::Reachable { endpoint }) => {
            let m = format!("connected to {endpoint}");
            [
                Some((True, Reason::ConnectionReady, m.clone())),
                Some((True, Reason::ConnectionReady, m.clone())),
                Some((False, Reason::ConnectionReady, m)),
            ]
        }
        Err(failure) => {
            let (reason, m) = (failure.reason(), failure.to_string());
            [
                Some((False, reason, m.clone())),
                Some((False, reason, m.clone())),
                Some((True, reason, m)),
            ]
        }
        Ok(Checked::UnsupportedApi { endpoint, version }) => {
            let m = format!(
                "connected to {endpoint}, but {}",
                omni_client::template::unsupported_message(*version)
            );
            [
                Some((
                    True,
                    Reason::ConnectionReady,
                    format!("connected to {endpoint}"),
                )),
                Some((False, Reason::UnsupportedOmniApi, m.clone())),
                // Nothing this operator does will fix it: only an Omni or operator upgrade will.
                Some((True, Reason::UnsupportedOmniApi, m)),
            ]
        }
        Ok(Checked::Deleting { clusters }) => {
            let m = format!(
                "waiting for OmniCluster references to be deleted: {}",
                clusters.join(", ")
            );
            [
                None,
                Some((False, Reason::Deleting, m.clone())),
                Some((True, Reason::Deleting, m)),
            ]
        }
    }
}

/// Pure: the status a connection should have after `outcome`. `lastCheckTime` moves only when
/// something else in the status changed, so idle re-checks write nothing.
pub(crate) fn desired_status(
    conn: &OmniConnection,
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> OmniConnectionStatus {
    let old = conn.status.clone().unwrap_or_default();
    let generation = conn.metadata.generation;
    let mut s = old.clone();
    s.observed_generation = generation;
    s.connection_ref = conn.metadata.name.clone();
    s.endpoint = Some(conn.spec.endpoint.clone());
    let types = [
        condition_types::REACHABLE,
        condition_types::READY,
        condition_types::STALLED,
    ];
    for (type_, set) in types.into_iter().zip(conditions_of(outcome)) {
        if let Some((status, reason, message)) = set {
            set_condition(
                &mut s.conditions,
                Condition::new(type_, status, reason, message, generation, now),
            );
        }
    }
    if s != old || s.last_check_time.is_none() {
        s.last_check_time = Some(now);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::find_condition;
    use crate::controllers::connection::fixtures::conn;

    /// A failure is `Reachable`, `Ready` and `Stalled` under its own reason and message; an
    /// invalid spec waits for a change, an unreachable Omni backs off.
    #[test]
    fn a_failure_sets_its_reason_on_every_condition() {
        let missing = ConnectionFailure::Client(ConnectionError::Client("no route".into()));
        assert_eq!(missing.reason().as_str(), "ConnectionFailed");
        assert_eq!(missing.retry(), RetryPolicy::Backoff);
        let invalid = ConnectionFailure::InvalidSpec("spec.endpoint: required".into());
        assert_eq!(invalid.retry(), RetryPolicy::AwaitChange);
        let s = desired_status(
            &conn(),
            &Outcome::failed(missing),
            jiff::Timestamp::UNIX_EPOCH,
        );
        for type_ in ["Reachable", "Ready", "Stalled"] {
            let c = find_condition(&s.conditions, type_);
            assert_eq!(
                c.map(|c| (c.reason.as_str(), c.message.as_str())),
                Some((
                    "ConnectionFailed",
                    "failed to connect to Omni: create Omni client: no route"
                )),
                "{type_}"
            );
        }
    }

    #[test]
    fn reachable_sets_three_conditions_and_idle_recheck_changes_nothing() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let mut c = conn();
        let out = Outcome::done(Checked::Reachable {
            endpoint: "https://omni.example:443".into(),
        });
        let s = desired_status(&c, &out, t0);
        for t in ["Reachable", "Ready"] {
            let cond = find_condition(&s.conditions, t).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(cond.status, ConditionStatus::True);
            assert_eq!(cond.reason, "ConnectionReady");
            assert_eq!(cond.message, "connected to https://omni.example:443");
            assert_eq!(cond.observed_generation, Some(3));
        }
        assert_eq!(
            find_condition(&s.conditions, "Stalled").map(|c| c.status),
            Some(ConditionStatus::False)
        );
        assert_eq!(s.last_check_time, Some(t0));
        c.status = Some(s.clone());
        let later = desired_status(&c, &out, t0 + jiff::SignedDuration::from_secs(300));
        assert_eq!(
            later, s,
            "an unchanged result must not produce a status write"
        );
    }

    #[test]
    fn deleting_lists_clusters() {
        let s = desired_status(
            &conn(),
            &Outcome::done(Checked::Deleting {
                clusters: vec!["a".into(), "b".into()],
            }),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let ready = find_condition(&s.conditions, "Ready").unwrap_or_else(|| panic!("Ready"));
        assert_eq!(ready.reason, "Deleting");
        assert_eq!(
            ready.message,
            "waiting for OmniCluster references to be deleted: a, b"
        );
        assert_eq!(
            find_condition(&s.conditions, "Stalled").map(|c| c.status),
            Some(ConditionStatus::True)
        );
    }
}
