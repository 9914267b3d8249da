//! What one check found, and the status it leads to (pure).

use crate::api::OmniConnection;
use crate::api::Reason;
use crate::api::common::{Condition, ConditionStatus, condition_types, set_condition};
use crate::api::connection::OmniConnectionStatus;
use crate::controllers::shared::error::{Disposition, Failure, RetryPolicy};
use crate::controllers::shared::omni::{ApiVersionError, ConnectionError};
use crate::controllers::shared::pipeline;
use crate::controllers::shared::status::{Standing, set_standing};

/// Re-check interval of a reachable connection, and of a key Secret not there yet.
pub(crate) const RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// Re-check interval of a key Secret the connection's ServiceAccount may not read: RBAC is
/// not watched, so a grant is noticed by looking again.
pub(crate) const ACCESS_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

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

    /// An invalid spec, or a key Secret whose content is wrong, waits for a change (the
    /// Secret is watched); a Secret not there yet is looked at again at the connection's
    /// re-check as well, one the ServiceAccount may not read every [`ACCESS_RECHECK`]; the
    /// rest backs off.
    fn retry(&self) -> RetryPolicy {
        if let Self::Client(ConnectionError::AccessDenied { .. }) = self {
            return RetryPolicy::Poll(ACCESS_RECHECK);
        }
        match self.disposition() {
            Disposition::Stalled => RetryPolicy::AwaitChange,
            Disposition::Waiting => RetryPolicy::Poll(RECHECK),
            Disposition::Retrying => RetryPolicy::Backoff,
        }
    }

    fn disposition(&self) -> Disposition {
        match self {
            Self::InvalidSpec(_) => Disposition::Stalled,
            Self::Client(e) => e.disposition(),
            Self::BackendApi(_) | Self::Ping(_) => Disposition::Retrying,
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

/// Pure: what `outcome` says of `Reachable` (`None`: left as it was) and where the connection
/// stands, with the reason and message of `Ready`.
fn conditions_of(
    outcome: &Outcome,
) -> (
    Option<(ConditionStatus, Reason, String)>,
    Standing,
    Reason,
    String,
) {
    use ConditionStatus::{False, True};
    match &outcome.result {
        Ok(Checked::Reachable { endpoint }) => {
            let m = format!("connected to {endpoint}");
            (
                Some((True, Reason::ConnectionReady, m.clone())),
                Standing::Ready,
                Reason::ConnectionReady,
                m,
            )
        }
        Err(failure) => {
            let (reason, m) = (failure.reason(), failure.to_string());
            (
                Some((False, reason, m.clone())),
                failure.disposition().into(),
                reason,
                m,
            )
        }
        // Nothing this operator does will fix it: only an Omni or operator upgrade will.
        Ok(Checked::UnsupportedApi { endpoint, version }) => (
            Some((
                True,
                Reason::ConnectionReady,
                format!("connected to {endpoint}"),
            )),
            Standing::Stalled,
            Reason::UnsupportedOmniApi,
            format!(
                "connected to {endpoint}, but {}",
                omni_client::template::unsupported_message(*version)
            ),
        ),
        Ok(Checked::Deleting { clusters }) => (
            None,
            Standing::Reconciling,
            Reason::Deleting,
            format!(
                "waiting for OmniCluster references to be deleted: {}",
                clusters.join(", ")
            ),
        ),
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
    let (reachable, standing, reason, message) = conditions_of(outcome);
    if let Some((status, reason, message)) = reachable {
        set_condition(
            &mut s.conditions,
            Condition::new(
                condition_types::REACHABLE,
                status,
                reason,
                message,
                generation,
                now,
            ),
        );
    }
    set_standing(
        &mut s.conditions,
        standing,
        reason,
        &message,
        generation,
        now,
    );
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

    /// A failure is `Reachable` and `Ready` under its own reason and message. An unreachable
    /// Omni is retried with backoff (not stalled); a missing key Secret is waited for
    /// (`Reconciling`, no backoff); an invalid spec or a malformed key is stalled.
    #[test]
    fn a_failure_sets_its_reason_and_kstatus_standing() {
        let unreachable = ConnectionFailure::Client(ConnectionError::Client("no route".into()));
        assert_eq!(unreachable.reason().as_str(), "ConnectionFailed");
        assert_eq!(unreachable.retry(), RetryPolicy::Backoff);
        let invalid = ConnectionFailure::InvalidSpec("spec.endpoint: required".into());
        assert_eq!(invalid.retry(), RetryPolicy::AwaitChange);
        assert_eq!(invalid.disposition(), Disposition::Stalled);
        let missing =
            ConnectionFailure::Client(ConnectionError::MissingSecret { name: "key".into() });
        assert_eq!(missing.disposition(), Disposition::Waiting);
        assert_eq!(missing.retry(), RetryPolicy::Poll(RECHECK));
        // A key Secret the connection's ServiceAccount may not read stalls (RBAC or the spec
        // must change) yet is looked at again: RBAC is not watched.
        let denied = ConnectionFailure::Client(ConnectionError::AccessDenied {
            reader: "ServiceAccount \"ns/tenant\"".into(),
            namespace: "ns".into(),
            name: "key".into(),
        });
        assert_eq!(denied.reason().as_str(), "AccessDenied");
        assert_eq!(denied.disposition(), Disposition::Stalled);
        assert_eq!(denied.retry(), RetryPolicy::Poll(ACCESS_RECHECK));
        let s = desired_status(
            &conn(),
            &Outcome::failed(unreachable),
            jiff::Timestamp::UNIX_EPOCH,
        );
        for type_ in ["Reachable", "Ready"] {
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
        assert!(find_condition(&s.conditions, "Stalled").is_none());
        assert!(find_condition(&s.conditions, "Reconciling").is_none());
        let waiting = desired_status(
            &conn(),
            &Outcome::failed(missing),
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            find_condition(&waiting.conditions, "Reconciling").map(|c| c.reason.as_str()),
            Some("MissingSecret")
        );
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
        assert!(find_condition(&s.conditions, "Stalled").is_none());
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
        assert!(find_condition(&s.conditions, "Stalled").is_none());
        assert_eq!(
            find_condition(&s.conditions, "Reconciling").map(|c| c.status),
            Some(ConditionStatus::True),
            "a deletion waiting for its clusters is converging, not stalled"
        );
    }
}
