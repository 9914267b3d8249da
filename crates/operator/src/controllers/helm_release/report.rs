//! The parts of the status that report requests, the retry budget, tests, drift and history:
//! pure steps of `outcome::desired_status` on its draft.

use super::budget::{Spent, reset_requested};
use super::history;
use super::outcome::DriftFound;
use super::outcome::{Done, Inputs, Outcome};
use crate::api::common::condition_types as ct;
use crate::api::helm_policies::{DriftedObject, TestHookStatus};
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::api::keys::{FORCE_AT_ANNOTATION, annotation};
use crate::api::{OmniHelmRelease, Reason};
use crate::controllers::shared::status;
use crate::domain::helm::args::InstallVerb;
use crate::domain::helm::{ReleaseInfo, TestRun};

/// At most this many drifted objects are listed in the status.
pub(crate) const OBJECTS_LISTED: usize = 10;

type Draft = status::Draft<OmniHelmReleaseStatus>;

impl Draft {
    /// Records the force and reset requests this pass handled: a force request once an
    /// install or upgrade ran, a reset request (whose counts start again) at once.
    pub(super) fn requests(&mut self, r: &OmniHelmRelease, outcome: &Outcome) {
        let ran = match &outcome.result {
            Ok(Done::Deployed { .. }) => true,
            Ok(_) => false,
            Err(failure) => failure.ran_helm(),
        };
        if ran && let Some(token) = annotation(&r.metadata, FORCE_AT_ANNOTATION) {
            self.s.last_handled_force_at = Some(token.to_string());
        }
        if let Some(token) = reset_requested(r) {
            self.s.last_handled_reset_at = Some(token.to_string());
            self.clear_failures();
        }
    }

    /// An install or upgrade of `inputs` was attempted at the object's generation.
    pub(super) fn attempted(&mut self, r: &OmniHelmRelease, inputs: &Inputs) {
        self.s.last_attempted_digest = Some(inputs.digest.clone());
        self.s.last_attempted_chart_version = Some(inputs.chart_version.clone());
        self.s.last_attempted_generation = r.metadata.generation;
    }

    /// The failure counts start again.
    pub(super) fn clear_failures(&mut self) {
        self.s.install_failures = None;
        self.s.upgrade_failures = None;
    }

    /// The budget after a counted failure.
    pub(super) fn spent(&mut self, spent: &Spent) {
        let count = Some(spent.failures);
        match spent.verb {
            InstallVerb::Install => self.s.install_failures = count,
            InstallVerb::Upgrade => self.s.upgrade_failures = count,
        }
    }

    /// `TestSuccess` and the test hooks after `helm test` ran; nothing when it did not.
    pub(super) fn tested(&mut self, tests: Option<&TestRun>) {
        let Some(tests) = tests else {
            return;
        };
        self.s.test_hooks = tests
            .hooks
            .iter()
            .map(|h| TestHookStatus {
                name: h.name.clone(),
                phase: h.phase.clone(),
            })
            .collect();
        match &tests.failure {
            None => {
                let count = tests.hooks.len();
                let m = format!(
                    "{count} test hook{} passed",
                    if count == 1 { "" } else { "s" }
                );
                self.set(ct::TEST_SUCCESS, true, Reason::TestSucceeded, &m);
            }
            Some(failure) => self.set(ct::TEST_SUCCESS, false, Reason::TestFailed, failure),
        }
    }

    /// Revision `info`, applying `digest`, in `status.history`.
    pub(super) fn history(
        &mut self,
        r: &OmniHelmRelease,
        info: &ReleaseInfo,
        digest: &str,
        tests: Option<&TestRun>,
    ) {
        let result = tests.map(|t| {
            if t.failure.is_none() {
                "Succeeded"
            } else {
                "Failed"
            }
        });
        history::record(
            &mut self.s.history,
            info,
            digest,
            result,
            history::limit(r.spec.max_history),
        );
    }

    /// `Drifted` and the drifted objects after a comparison of the live objects.
    pub(super) fn drift(&mut self, drift: &DriftFound) {
        let listed = |objects: &[DriftedObject]| -> String {
            let mut parts: Vec<String> = objects.iter().take(3).map(DriftFound::describe).collect();
            if objects.len() > 3 {
                parts.push(format!("and {} more", objects.len() - 3));
            }
            parts.join(", ")
        };
        if drift.objects.is_empty() {
            self.s.drifted_objects.clear();
            self.set(
                ct::DRIFTED,
                false,
                Reason::Synced,
                "the live objects match the release",
            );
        } else if drift.corrected {
            self.s.drifted_objects.clear();
            let m = format!("put back: {}", listed(&drift.objects));
            self.set(ct::DRIFTED, false, Reason::DriftCorrected, &m);
        } else {
            self.s.drifted_objects = drift.objects.iter().take(OBJECTS_LISTED).cloned().collect();
            let count = drift.objects.len();
            let m = format!(
                "{count} live object{} differ{} from the release: {}",
                if count == 1 { "" } else { "s" },
                if count == 1 { "s" } else { "" },
                listed(&drift.objects)
            );
            self.set(ct::DRIFTED, true, Reason::DriftDetected, &m);
        }
    }

    /// Drift detection off: nothing about live objects is reported.
    pub(super) fn no_drift_detection(&mut self) {
        self.s.drifted_objects.clear();
        self.s.conditions.retain(|c| c.type_ != ct::DRIFTED);
    }
}

/// Whether the stored status reports the release drifted (for tests of the report).
#[cfg(test)]
pub(crate) fn drifted(s: &OmniHelmReleaseStatus) -> Option<bool> {
    use crate::api::common::{ConditionStatus, find_condition};
    find_condition(&s.conditions, ct::DRIFTED).map(|c| c.status == ConditionStatus::True)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::{ConditionStatus, find_condition};
    use crate::api::helm_policies::DriftMode;
    use crate::controllers::helm_release::outcome::Found;
    use crate::controllers::helm_release::outcome::desired_status;
    use crate::controllers::helm_release::test_support::{info, release};
    use crate::domain::helm::TestHook;

    fn now() -> jiff::Timestamp {
        "2026-11-23T02:00:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn drift_is_reported_in_warn_mode_and_cleared_once_corrected() {
        let mut r = release(serde_json::json!({}));
        r.spec.drift_detection = serde_json::from_value(serde_json::json!({"mode": "Warn"})).ok();
        let object = DriftedObject {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "default".into(),
            name: "web".into(),
            deleted: false,
            fields: vec!["/spec/replicas".into()],
        };
        let checked = |objects: Vec<DriftedObject>, corrected| {
            Outcome::new(
                Found::cluster(true),
                Ok(Done::Checked {
                    release: info("deployed", 1),
                    drift: DriftFound {
                        mode: DriftMode::Warn,
                        objects,
                        corrected,
                    },
                }),
            )
        };
        let s = desired_status(&r, &checked(vec![object.clone()], false), now());
        assert_eq!(drifted(&s), Some(true));
        assert_eq!(s.drifted_objects, vec![object.clone()]);
        let c = find_condition(&s.conditions, ct::DRIFTED).unwrap_or_else(|| panic!("Drifted"));
        assert_eq!(c.reason, Reason::DriftDetected);
        assert_eq!(
            c.message,
            "1 live object differs from the release: Deployment default/web (/spec/replicas)"
        );
        assert_eq!(
            find_condition(&s.conditions, ct::READY).map(|c| c.status),
            Some(ConditionStatus::True)
        );
        r.status = Some(s);
        let s = desired_status(&r, &checked(vec![object], true), now());
        assert_eq!(drifted(&s), Some(false));
        assert!(s.drifted_objects.is_empty());
        r.spec.drift_detection = None;
        r.status = Some(s);
        let s = desired_status(
            &r,
            &Outcome::new(Found::cluster(true), Ok(Done::InSync(None))),
            now(),
        );
        assert_eq!(
            drifted(&s),
            None,
            "no condition once drift detection is off"
        );
    }

    #[test]
    fn a_test_run_is_reported_in_its_condition_hooks_and_history() {
        let r = release(serde_json::json!({}));
        let tests = TestRun {
            failure: None,
            hooks: vec![TestHook {
                name: "app-test".into(),
                phase: "Succeeded".into(),
            }],
        };
        let outcome = Outcome::new(
            Found::cluster(true),
            Ok(Done::Deployed {
                verb: InstallVerb::Install,
                info: info("deployed", 1),
                digest: "d".into(),
                tests: Some(tests),
            }),
        );
        let s = desired_status(&r, &outcome, now());
        let c = find_condition(&s.conditions, ct::TEST_SUCCESS)
            .unwrap_or_else(|| panic!("TestSuccess"));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::True, "TestSucceeded")
        );
        assert_eq!(s.test_hooks[0].phase, "Succeeded");
        assert_eq!(s.history[0].test_result.as_deref(), Some("Succeeded"));
        assert_eq!(s.history[0].digest, "d");
    }
}
