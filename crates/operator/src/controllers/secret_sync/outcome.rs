//! What one pass did, and the status it leads to (pure).

use super::write::Synced;
use crate::api::common::condition_types as ct;
use crate::api::secret_sync::OmniSecretSyncStatus;
use crate::api::{OmniSecretSync, Reason};
use crate::controllers::shared::pipeline;
use crate::controllers::shared::status::{Draft, Standing};

/// What one pass did, and whether the cluster it names exists (`found`; `None` when the pass
/// did not look).
pub(crate) type SyncOutcome = pipeline::Outcome<OmniSecretSync>;

/// The message of `Suspended=True` on a secret sync.
pub(crate) const SUSPENDED: &str = "spec.suspend is set: the Secret is not copied and drift in the workload cluster is not repaired; Ready keeps its last state";

/// What a pass that did not fail came to.
pub(crate) enum SyncDone {
    /// The copy matches the source.
    Copied(Synced),
    /// `spec.suspend`: nothing was read or written in the workload cluster.
    Suspended,
}

/// Pure: the status after an attempt. Times move only when the outcome or the copy changed.
pub(super) fn desired_status(
    sync: &OmniSecretSync,
    outcome: &SyncOutcome,
    now: jiff::Timestamp,
) -> OmniSecretSyncStatus {
    let pipeline::Outcome {
        found: accepted,
        result,
    } = outcome;
    let old = sync.status.clone().unwrap_or_default();
    let generation = sync.metadata.generation;
    let mut s = old.clone();
    s.observed_generation = generation;
    s.cluster_ref = Some(sync.spec.cluster_ref.name.clone());
    s.kubeconfig_secret_ref = Some(sync.spec.kubeconfig_secret_ref.name.clone());
    s.kubeconfig_secret_key = Some(sync.spec.kubeconfig_secret_ref.key.clone());
    s.source_secret_ref = Some(sync.spec.source_secret_ref.name.clone());
    let mut d = Draft::new(s, generation, now, ct::SYNCED);
    if let Some(exists) = *accepted {
        d.accepted(&sync.spec.cluster_ref.name, exists);
    }
    let mut changed_copy = false;
    match result {
        Ok(SyncDone::Suspended) => d.suspend(SUSPENDED),
        Ok(SyncDone::Copied(done)) => {
            d.resume();
            let t = &sync.spec.target_secret_ref;
            let m = format!(
                "synced Secret {:?} to workload Secret \"{}/{}\"",
                sync.spec.source_secret_ref.name, t.namespace, t.name
            );
            d.outcome(Standing::Ready, Reason::Synced, &m);
            d.s.target_secret_ref = Some(t.name.clone());
            d.s.target_namespace = Some(t.namespace.clone());
            d.s.secret_type = Some(done.type_.clone());
            d.s.secret_hash = Some(done.hash.clone());
            d.s.last_error = Some(String::new());
            // A copy written with a force request pending handled it: a forced pass copies as
            // any pass does (only what differs from the source is written).
            if let Some(token) = crate::api::keys::force_requested(sync) {
                d.s.last_handled_force_at = Some(token.to_string());
            }
            changed_copy = done.changed;
        }
        Err(f) => {
            d.resume();
            d.failed_with(f);
            d.s.last_error = Some(f.to_string());
        }
    }
    let mut s = d.s;
    if s != old || changed_copy {
        s.last_attempt_time = Some(now);
        if matches!(result, Ok(SyncDone::Copied(_))) {
            s.last_sync_time = Some(now);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::find_condition;
    use crate::controllers::secret_sync::failure::SecretSyncFailure;
    use crate::controllers::secret_sync::fixtures::sync;
    use crate::controllers::shared::error::{Failure, RetryPolicy};
    use crate::controllers::shared::pipeline::Pipeline;

    #[test]
    fn a_failure_is_the_status_reason_and_last_error() {
        let s = sync();
        let missing = SecretSyncFailure::MissingSource {
            namespace: "ns".into(),
            name: "src".into(),
        };
        let failed = desired_status(
            &s,
            &SyncOutcome::new(Some(true), Err(missing)),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let ready = find_condition(&failed.conditions, "Ready");
        assert_eq!(ready.map(|c| c.reason.as_str()), Some("MissingSecret"));
        assert_eq!(
            failed.last_error.as_deref(),
            Some(r#"source Secret "ns/src" does not exist"#)
        );
    }

    /// A spec that bypassed admission is refused by the webhook's own rules, naming the field,
    /// and waits for a change.
    #[test]
    fn an_invalid_spec_is_reported_with_the_webhooks_field_path() {
        let mut s = sync();
        s.spec.type_ = Some(" ".into());
        let invalid = Pipeline::validate(&s)
            .err()
            .unwrap_or_else(|| panic!("a blank type is invalid"));
        let outcome = SyncOutcome::failed(invalid);
        let status = desired_status(&s, &outcome, jiff::Timestamp::UNIX_EPOCH);
        let ready = find_condition(&status.conditions, "Ready");
        assert_eq!(
            ready.map(|c| (c.reason.as_str(), c.message.as_str())),
            Some((
                "ValidationFailed",
                r#"spec.type: Invalid value: " ": type must not be blank"#
            ))
        );
        assert_eq!(
            outcome.result.err().map(|f| f.retry()),
            Some(RetryPolicy::AwaitChange)
        );
    }

    #[test]
    fn idle_status_is_stable() {
        let mut s = sync();
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let ok = || {
            SyncOutcome::new(
                Some(true),
                Ok(SyncDone::Copied(Synced {
                    hash: "h".into(),
                    type_: "Opaque".into(),
                    changed: false,
                })),
            )
        };
        let first = desired_status(&s, &ok(), t0);
        assert_eq!(first.last_sync_time, Some(t0));
        let ready = find_condition(&first.conditions, "Ready").map(|c| c.message.clone());
        assert_eq!(
            ready.as_deref(),
            Some(r#"synced Secret "src" to workload Secret "apps/dst""#)
        );
        s.status = Some(first.clone());
        let again = desired_status(&s, &ok(), t0 + jiff::SignedDuration::from_secs(300));
        assert_eq!(again, first);
    }
}
