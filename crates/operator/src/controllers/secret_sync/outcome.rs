//! What one pass did, and the status it leads to (pure).

use super::failure::SecretSyncFailure;
use super::write::Synced;
use crate::api::common::condition_types as ct;
use crate::api::secret_sync::{NamespaceFailure, OmniSecretSyncStatus};
use crate::api::{OmniSecretSync, Reason};
use crate::controllers::shared::error::Failure as _;
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
    s.source_secret_ref = sync.spec.source_secret_ref.as_ref().map(|r| r.name.clone());
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
            let sources = sources_phrase(sync);
            let m = match &done.namespaces {
                None => format!(
                    "synced {sources} to workload Secret \"{}/{}\"",
                    t.namespace, t.name
                ),
                Some(namespaces) => format!(
                    "synced {sources} to workload Secret {:?} in the {} namespaces matching spec.targetSecretRef.namespaceSelector",
                    t.name,
                    namespaces.len()
                ),
            };
            d.outcome(Standing::Ready, Reason::Synced, &m);
            d.s.target_secret_ref = Some(t.name.clone());
            d.s.target_namespace = done.namespaces.is_none().then(|| t.namespace.clone());
            spread_status(&mut d.s, done.namespaces.as_deref(), &[]);
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
            if let SecretSyncFailure::Namespaces(spread) = f {
                d.s.target_secret_ref = Some(sync.spec.target_secret_ref.name.clone());
                d.s.target_namespace = None;
                spread_status(&mut d.s, Some(spread.synced.as_slice()), &spread.failed);
                changed_copy = spread.changed;
            }
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

/// How many namespaces `status.syncedNamespaces` lists.
const MAX_NAMESPACES_LISTED: usize = 20;
/// How many failing namespaces `status.namespaceFailures` lists.
const MAX_NAMESPACE_FAILURES: usize = 10;

/// `Secret "a"` or `Secrets "a", "b"`: the sources of the copy.
fn sources_phrase(sync: &OmniSecretSync) -> String {
    let names: Vec<String> = sync
        .spec
        .source_refs()
        .into_iter()
        .map(|(_, name, _)| format!("{name:?}"))
        .collect();
    match names.as_slice() {
        [one] => format!("Secret {one}"),
        many => format!("Secrets {}", many.join(", ")),
    }
}

/// The namespace fields of the status: bounded lists and the count (`synced` is `None`
/// without a namespace selector).
fn spread_status(
    s: &mut OmniSecretSyncStatus,
    synced: Option<&[String]>,
    failed: &[(String, SecretSyncFailure)],
) {
    s.synced_namespace_count = synced.map(|n| u32::try_from(n.len()).unwrap_or(u32::MAX));
    s.synced_namespaces = synced
        .unwrap_or_default()
        .iter()
        .take(MAX_NAMESPACES_LISTED)
        .cloned()
        .collect();
    s.namespace_failures = failed
        .iter()
        .take(MAX_NAMESPACE_FAILURES)
        .map(|(namespace, f)| NamespaceFailure {
            namespace: namespace.clone(),
            reason: f.reason().as_str().to_string(),
            message: f.to_string(),
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::find_condition;
    use crate::controllers::secret_sync::failure::Spread;
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

    /// With a namespace selector the status lists the namespaces (bounded) and counts them; a
    /// namespace in the way is reported under its reason, naming it, beside the ones synced.
    #[test]
    fn a_spread_reports_its_namespaces_bounded_and_the_one_in_the_way() {
        let mut s = sync();
        s.spec.target_secret_ref.namespace = String::new();
        s.spec.target_secret_ref.namespace_selector = Some(
            serde_json::from_value(serde_json::json!({"matchLabels": {"pull": "yes"}}))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let synced: Vec<String> = (0..25).map(|i| format!("ns-{i:02}")).collect();
        let spread = Spread {
            synced: synced.clone(),
            failed: vec![(
                "team-x".into(),
                SecretSyncFailure::TargetNotOwned {
                    namespace: "team-x".into(),
                    name: "dst".into(),
                },
            )],
            changed: false,
        };
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let outcome = SyncOutcome::new(Some(true), Err(SecretSyncFailure::Namespaces(spread)));
        let status = desired_status(&s, &outcome, t0);
        let ready = find_condition(&status.conditions, "Ready");
        assert_eq!(ready.map(|c| c.reason.as_str()), Some("TargetNotOwned"));
        assert!(
            ready.is_some_and(|c| c.message.starts_with(
                "the copy is in 25 of 26 namespaces matching spec.targetSecretRef.namespaceSelector; workload Secret \"team-x/dst\" exists and is not owned"
            )),
            "{ready:?}"
        );
        assert_eq!(status.synced_namespaces.len(), 20);
        assert_eq!(status.synced_namespace_count, Some(25));
        assert_eq!(status.namespace_failures.len(), 1);
        assert_eq!(status.namespace_failures[0].namespace, "team-x");
        assert_eq!(status.namespace_failures[0].reason, "TargetNotOwned");
        assert_eq!(status.target_namespace, None);
        assert_eq!(
            outcome.result.err().map(|f| f.retry()),
            Some(RetryPolicy::Poll(
                crate::controllers::secret_sync::failure::RETRY
            ))
        );
        let ok = SyncOutcome::new(
            Some(true),
            Ok(SyncDone::Copied(Synced {
                hash: "h".into(),
                type_: "Opaque".into(),
                changed: false,
                namespaces: Some(synced),
            })),
        );
        let status = desired_status(&s, &ok, t0);
        let ready = find_condition(&status.conditions, "Ready").map(|c| c.message.clone());
        assert_eq!(
            ready.as_deref(),
            Some(
                r#"synced Secret "src" to workload Secret "dst" in the 25 namespaces matching spec.targetSecretRef.namespaceSelector"#
            )
        );
        assert!(status.namespace_failures.is_empty());
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
                    namespaces: None,
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
