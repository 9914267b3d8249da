//! The next action on a release, a pure function of its [`State`]. Each action is carried out
//! by its own file (`install.rs`, `upgrade.rs`, `recover.rs`) or needs no Helm at all.

use std::time::Duration;

use super::ownership::Ownership;
use super::release::{Pending, ReleaseState, State};
use crate::domain::helm::ReleaseInfo;

/// What the reconcile does next with the release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NextAction {
    /// `helm install` (over the kept history of an uninstalled release, if any).
    Install { adopting: bool, drift: bool },
    /// `helm upgrade`: to apply changed inputs, repair drift, or label an adopted release.
    Upgrade { adopting: bool, drift: bool },
    /// End the `pending-*` operation on `release`: roll back, or uninstall an unfinished
    /// install. `abandoned` when an earlier operator process left it (recovered at once,
    /// without the opt-in).
    Recover {
        release: ReleaseInfo,
        abandoned: bool,
    },
    /// Leave a young `pending-*` release alone; look again after `after`.
    Wait {
        release: ReleaseInfo,
        after: Duration,
    },
    /// Report a `pending-*` release that outlived its timeout and may not be recovered.
    ReportStuck(ReleaseInfo),
    /// Leave someone else's release alone and say why.
    Refuse(Ownership),
    /// The release is as last applied.
    Nothing,
}

/// Pure choice of the next action. `drift` marks a Helm run with inputs already applied, which
/// is worth a Warning Event, except right after a recovery (which had its own Event).
pub(crate) fn next_action(state: &State) -> NextAction {
    let drift = state.inputs_applied && !state.recovered;
    let adopting = state.adopting;
    match &state.release {
        ReleaseState::Absent => NextAction::Install { adopting, drift },
        ReleaseState::NotOurs(o) => NextAction::Refuse(o.clone()),
        ReleaseState::Pending(verdict, release) => {
            let release = release.clone();
            match *verdict {
                Pending::Wait(after) => NextAction::Wait { release, after },
                Pending::Stuck => NextAction::ReportStuck(release),
                Pending::Recover => NextAction::Recover {
                    release,
                    abandoned: false,
                },
                Pending::Abandoned => NextAction::Recover {
                    release,
                    abandoned: true,
                },
            }
        }
        // The upgrade is what stamps our ownership labels on an adopted release.
        ReleaseState::InSync if adopting => NextAction::Upgrade { adopting, drift },
        // Asked for: no drift, nothing changed.
        ReleaseState::InSync if state.forced => NextAction::Upgrade {
            adopting,
            drift: false,
        },
        ReleaseState::InSync => NextAction::Nothing,
        ReleaseState::OutOfSync => NextAction::Upgrade { adopting, drift },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::helm_release::test_support::info;

    fn state(release: ReleaseState, adopting: bool, inputs_applied: bool) -> State {
        State {
            release,
            adopting,
            inputs_applied,
            recovered: false,
            forced: false,
        }
    }

    #[test]
    fn a_force_request_upgrades_a_release_in_sync_once_without_calling_it_drift() {
        let forced = State {
            forced: true,
            ..state(ReleaseState::InSync, false, true)
        };
        assert_eq!(
            next_action(&forced),
            NextAction::Upgrade {
                adopting: false,
                drift: false
            }
        );
        let out_of_sync = State {
            forced: true,
            ..state(ReleaseState::OutOfSync, false, true)
        };
        assert_eq!(
            next_action(&out_of_sync),
            NextAction::Upgrade {
                adopting: false,
                drift: true
            },
            "a release changed out of band is drift, forced or not"
        );
    }

    #[test]
    fn every_state_has_its_action() {
        use NextAction as A;
        use ReleaseState as S;
        let wait = Duration::from_secs(65);
        let pending = info("pending-upgrade", 3);
        let cases = [
            (
                "never installed",
                state(S::Absent, false, false),
                A::Install {
                    adopting: false,
                    drift: false,
                },
            ),
            (
                "deleted behind our back",
                state(S::Absent, false, true),
                A::Install {
                    adopting: false,
                    drift: true,
                },
            ),
            (
                "someone else's uninstalled release, adopted",
                state(S::Absent, true, false),
                A::Install {
                    adopting: true,
                    drift: false,
                },
            ),
            (
                "someone else's",
                state(S::NotOurs(Ownership::Unowned), false, false),
                A::Refuse(Ownership::Unowned),
            ),
            (
                "pending, young",
                state(
                    S::Pending(Pending::Wait(wait), pending.clone()),
                    false,
                    true,
                ),
                A::Wait {
                    release: pending.clone(),
                    after: wait,
                },
            ),
            (
                "pending, stuck",
                state(S::Pending(Pending::Stuck, pending.clone()), false, true),
                A::ReportStuck(pending.clone()),
            ),
            (
                "pending, recovery allowed",
                state(S::Pending(Pending::Recover, pending.clone()), false, true),
                A::Recover {
                    release: pending.clone(),
                    abandoned: false,
                },
            ),
            (
                "pending, abandoned by an earlier process",
                state(S::Pending(Pending::Abandoned, pending.clone()), false, true),
                A::Recover {
                    release: pending,
                    abandoned: true,
                },
            ),
            ("as last applied", state(S::InSync, false, true), A::Nothing),
            (
                "as last applied, but someone else's and adopted",
                state(S::InSync, true, true),
                A::Upgrade {
                    adopting: true,
                    drift: true,
                },
            ),
            (
                "inputs changed",
                state(S::OutOfSync, false, false),
                A::Upgrade {
                    adopting: false,
                    drift: false,
                },
            ),
            (
                "changed out of band",
                state(S::OutOfSync, false, true),
                A::Upgrade {
                    adopting: false,
                    drift: true,
                },
            ),
            (
                "adopted with other inputs",
                state(S::OutOfSync, true, false),
                A::Upgrade {
                    adopting: true,
                    drift: false,
                },
            ),
        ];
        for (scenario, state, expected) in cases {
            assert_eq!(next_action(&state), expected, "{scenario}");
        }
    }

    #[test]
    fn a_helm_run_right_after_a_recovery_is_not_reported_as_drift() {
        for release in [ReleaseState::Absent, ReleaseState::OutOfSync] {
            let recovered = State {
                recovered: true,
                ..state(release.clone(), false, true)
            };
            let action = next_action(&recovered);
            assert!(
                matches!(
                    action,
                    NextAction::Install { drift: false, .. }
                        | NextAction::Upgrade { drift: false, .. }
                ),
                "{release:?}: {action:?}"
            );
        }
    }
}
