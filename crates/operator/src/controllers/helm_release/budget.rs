//! The retry budget of `spec.install.remediation` and `spec.upgrade.remediation` (Flux's
//! semantics): each failed attempt of the current inputs is counted in the status; while
//! retries remain, the failure is remediated (uninstalled, or rolled back) and tried again
//! after the backoff; once they are spent the release stops at `RetriesExhausted` and runs no
//! Helm until the spec (a new generation), the inputs (a new digest) or the reset annotation
//! changes. Pure functions of the object and its stored status.

use crate::api::OmniHelmRelease;
use crate::api::helm_policies::{RemediationStrategy, remediates_last_failure};
use crate::api::keys::{RESET_AT_ANNOTATION, new_request};
use crate::domain::helm::args::InstallVerb;

/// One verb's remediation policy as the spec sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Retries after the first failure; negative: without limit.
    pub(crate) retries: i64,
    /// Whether the failure that spends the last retry is remediated too.
    pub(crate) remediate_last_failure: bool,
    /// How a failure is remediated (installs are always uninstalled).
    pub(crate) strategy: RemediationStrategy,
}

/// The remediation policy of `verb` on `r`, when the spec sets one (without it a failure is
/// retried with backoff, uncounted, as releases always were).
pub(crate) fn policy(r: &OmniHelmRelease, verb: InstallVerb) -> Option<Policy> {
    match verb {
        InstallVerb::Install => {
            let p = r.spec.install.as_ref()?.remediation.as_ref()?;
            Some(Policy {
                retries: p.retries,
                remediate_last_failure: remediates_last_failure(
                    p.remediate_last_failure,
                    p.retries,
                ),
                strategy: RemediationStrategy::Uninstall,
            })
        }
        InstallVerb::Upgrade => {
            let p = r.spec.upgrade.as_ref()?.remediation.as_ref()?;
            Some(Policy {
                retries: p.retries,
                remediate_last_failure: remediates_last_failure(
                    p.remediate_last_failure,
                    p.retries,
                ),
                strategy: p.strategy,
            })
        }
    }
}

/// The failures of one verb counted so far, against its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spent {
    /// Install or upgrade.
    pub(crate) verb: InstallVerb,
    /// Failed attempts of the current inputs, the latest included.
    pub(crate) failures: i64,
    /// The policy counted against.
    pub(crate) policy: Policy,
}

impl Spent {
    /// Whether no retry remains.
    pub(crate) fn exhausted(&self) -> bool {
        self.policy.retries >= 0 && self.failures > self.policy.retries
    }

    /// Whether the latest failure is to be remediated: while retries remain, and for the last
    /// one when the policy says so.
    pub(crate) fn remediates(&self) -> bool {
        !self.exhausted() || self.policy.remediate_last_failure
    }

    /// "upgrade failed 2 times (retries: 1)".
    pub(crate) fn text(&self) -> String {
        let times = if self.failures == 1 { "time" } else { "times" };
        format!(
            "{} failed {} {times} (retries: {})",
            self.verb.as_str(),
            self.failures,
            self.policy.retries
        )
    }
}

/// Whether the stored counts are of an earlier attempt: the inputs (`digest`) or the spec
/// (generation) changed since the last attempt, or a reset was asked for since.
pub(crate) fn fresh(r: &OmniHelmRelease, digest: &str) -> bool {
    let Some(s) = &r.status else {
        return true;
    };
    s.last_attempted_digest.as_deref() != Some(digest)
        || s.last_attempted_generation != r.metadata.generation
        || reset_requested(r).is_some()
}

/// The reset annotation's value when it was not handled yet.
pub(crate) fn reset_requested(r: &OmniHelmRelease) -> Option<&str> {
    let handled = r
        .status
        .as_ref()
        .and_then(|s| s.last_handled_reset_at.as_deref());
    new_request(&r.metadata, RESET_AT_ANNOTATION, handled)
}

/// The failures of `verb` counted for the current inputs (zero when [`fresh`]).
fn counted(r: &OmniHelmRelease, digest: &str, verb: InstallVerb) -> i64 {
    if fresh(r, digest) {
        return 0;
    }
    let s = r.status.as_ref();
    match verb {
        InstallVerb::Install => s.and_then(|s| s.install_failures),
        InstallVerb::Upgrade => s.and_then(|s| s.upgrade_failures),
    }
    .unwrap_or_default()
}

/// Pure: the spent budget that stops `r` before any Helm call, if one is.
pub(crate) fn exhausted(r: &OmniHelmRelease, digest: &str) -> Option<Spent> {
    [InstallVerb::Install, InstallVerb::Upgrade]
        .into_iter()
        .filter_map(|verb| {
            Some(Spent {
                verb,
                failures: counted(r, digest, verb),
                policy: policy(r, verb)?,
            })
        })
        .find(Spent::exhausted)
}

/// Pure: the budget after one more failed `verb` of the inputs `digest`, when a policy counts it.
pub(crate) fn spend(r: &OmniHelmRelease, digest: &str, verb: InstallVerb) -> Option<Spent> {
    Some(Spent {
        verb,
        failures: counted(r, digest, verb) + 1,
        policy: policy(r, verb)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::helm_release::OmniHelmReleaseStatus;
    use crate::controllers::helm_release::test_support::release;

    fn with_policy(upgrade: serde_json::Value) -> OmniHelmRelease {
        let mut r = release(serde_json::json!({}));
        r.metadata.generation = Some(3);
        r.spec.upgrade = serde_json::from_value(serde_json::json!({"remediation": upgrade}))
            .unwrap_or_else(|e| panic!("{e}"));
        r
    }

    fn after_failures(mut r: OmniHelmRelease, upgrades: i64) -> OmniHelmRelease {
        r.status = Some(OmniHelmReleaseStatus {
            last_attempted_digest: Some("d1".into()),
            last_attempted_generation: Some(3),
            upgrade_failures: Some(upgrades),
            ..OmniHelmReleaseStatus::default()
        });
        r
    }

    #[test]
    fn retries_one_allows_two_attempts_and_remediates_the_first() {
        let r = with_policy(serde_json::json!({"retries": 1, "remediateLastFailure": false}));
        let first = spend(&r, "d1", InstallVerb::Upgrade).unwrap_or_else(|| panic!("counted"));
        assert_eq!(first.failures, 1);
        assert!(!first.exhausted() && first.remediates());
        let r = after_failures(r, 1);
        assert_eq!(exhausted(&r, "d1"), None);
        let second = spend(&r, "d1", InstallVerb::Upgrade).unwrap_or_else(|| panic!("counted"));
        assert_eq!(second.failures, 2);
        assert!(second.exhausted() && !second.remediates());
        assert_eq!(second.text(), "upgrade failed 2 times (retries: 1)");
        let r = after_failures(r, 2);
        assert_eq!(exhausted(&r, "d1"), Some(second));
    }

    #[test]
    fn new_inputs_a_new_generation_or_a_reset_start_the_count_again() {
        let r = after_failures(with_policy(serde_json::json!({"retries": 0})), 1);
        assert!(exhausted(&r, "d1").is_some());
        assert_eq!(exhausted(&r, "d2"), None, "new inputs");
        let mut edited = r.clone();
        edited.metadata.generation = Some(4);
        assert_eq!(exhausted(&edited, "d1"), None, "a spec edit");
        let mut reset = r.clone();
        reset.metadata.annotations =
            Some([(RESET_AT_ANNOTATION.to_string(), "now".to_string())].into());
        assert_eq!(exhausted(&reset, "d1"), None, "a reset request");
        if let Some(s) = reset.status.as_mut() {
            s.last_handled_reset_at = Some("now".into());
        }
        assert!(exhausted(&reset, "d1").is_some(), "a reset handled already");
    }

    #[test]
    fn without_a_policy_or_with_negative_retries_nothing_is_ever_exhausted() {
        let plain = after_failures(release(serde_json::json!({})), 50);
        assert_eq!(spend(&plain, "d1", InstallVerb::Upgrade), None);
        assert_eq!(exhausted(&plain, "d1"), None);
        let unlimited = after_failures(with_policy(serde_json::json!({"retries": -1})), 50);
        assert_eq!(exhausted(&unlimited, "d1"), None);
        let spent =
            spend(&unlimited, "d1", InstallVerb::Upgrade).unwrap_or_else(|| panic!("counted"));
        assert!(spent.remediates());
    }
}
