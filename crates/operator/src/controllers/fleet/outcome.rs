//! Why a set's pass failed, and the status its report leads to (pure).

use std::time::Duration;

use kube::runtime::controller::Action;

use super::SetKind;
use super::plan::Report;
use crate::api::Reason;
use crate::api::fleet::{FailingCluster, FleetSetStatus, MAX_FAILING_LISTED};
use crate::controllers::shared::error::{Disposition, Failure, RetryPolicy};
use crate::controllers::shared::pipeline::{Outcome, Pipeline};
use crate::controllers::shared::status::{Standing, set_standing};

/// How soon a pass whose write met a newer object looks again (its watch event usually wakes
/// it first).
const RETRY_SOON: Duration = Duration::from_secs(2);

/// Why a set's pass could not plan.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetFailure {
    /// The spec breaks the set's admission rules (admission was bypassed).
    #[error("{0}")]
    InvalidSpec(String),
    /// The clusters', generated objects' or exports' cache was not listed in time.
    #[error("the caches of OmniClusters and generated objects are not filled yet")]
    CachesNotReady,
}

impl Failure for SetFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::InvalidSpec(_) => Reason::ValidationFailed,
            Self::CachesNotReady => Reason::ReconcileFailed,
        }
    }

    fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) => RetryPolicy::AwaitChange,
            Self::CachesNotReady => RetryPolicy::Backoff,
        }
    }

    /// A spec that breaks the rules stalls; caches not filled yet are retried.
    fn disposition(&self) -> Disposition {
        match self {
            Self::InvalidSpec(_) => Disposition::Stalled,
            Self::CachesNotReady => Disposition::Retrying,
        }
    }
}

/// Pure: whether `new` differs from `old` only in the set's counts (and the condition
/// messages that quote them): such a write may wait for [`super::STATUS_PACE`]. A change of
/// generation, of a condition's status or reason, of the failures or of the handled request
/// is written at once.
pub(crate) fn progress_only(old: &FleetSetStatus, new: &FleetSetStatus) -> bool {
    let counts_aside = |s: &FleetSetStatus| FleetSetStatus {
        matched_clusters: 0,
        desired: 0,
        ready: 0,
        updated: 0,
        conditions: s
            .conditions
            .iter()
            .map(|c| crate::api::common::Condition {
                message: String::new(),
                ..c.clone()
            })
            .collect(),
        ..s.clone()
    };
    old != new && counts_aside(old) == counts_aside(new)
}

/// Pure: when a set whose pass came to `report` is looked at again: on a change of it, its
/// clusters or its objects, or shortly when a write met a newer object.
pub(crate) fn recheck(report: &Report) -> Action {
    if report.retry_soon {
        Action::requeue(RETRY_SOON)
    } else {
        Action::await_change()
    }
}

/// `failing`'s clusters, named for a message: the first three and how many more.
fn named(failing: &[&FailingCluster]) -> String {
    let mut names: Vec<String> = failing
        .iter()
        .take(3)
        .map(|f| format!("{} ({}: {})", f.cluster, f.reason, f.message))
        .collect();
    if failing.len() > 3 {
        names.push(format!("and {} more", failing.len() - 3));
    }
    names.join("; ")
}

/// The `Ready` condition's verdict on `report`: whether it is True, its reason and message.
fn verdict(report: &Report) -> (bool, Reason, String) {
    let with = |reason: Reason| -> Vec<&FailingCluster> {
        report
            .failing
            .iter()
            .filter(|f| f.reason == reason.as_str())
            .collect()
    };
    let (templates, collisions) = (with(Reason::TemplateFailed), with(Reason::NameCollision));
    let refused = with(Reason::ValidationFailed);
    let all: Vec<&FailingCluster> = report.failing.iter().collect();
    let counts = format!(
        "{} of {} objects Ready at the current template",
        report.ready, report.matched
    );
    if !templates.is_empty() {
        return (false, Reason::TemplateFailed, named(&templates));
    }
    if !collisions.is_empty() {
        return (false, Reason::NameCollision, named(&collisions));
    }
    if !refused.is_empty() {
        return (false, Reason::ValidationFailed, named(&refused));
    }
    if report.stalled {
        return (
            false,
            Reason::RolloutStalled,
            format!("{counts}; the rollout waits for {}", named(&all)),
        );
    }
    if report.ready == report.matched && report.withdrawing == 0 && report.pending == 0 {
        return (true, Reason::SetReady, counts);
    }
    let mut message = counts;
    if report.withdrawing > 0 {
        message.push_str(&format!("; withdrawing {}", report.withdrawing));
    }
    if !all.is_empty() {
        message.push_str(&format!("; not Ready: {}", named(&all)));
    }
    (false, Reason::SetProgressing, message)
}

/// Pure: where a set whose verdict is `ready` with `reason` stands: what only a spec change
/// helps (a template that does not render, a name taken, a refused object, a stalled rollout)
/// stalls; the rest converges or waits for its objects (`Reconciling`, a Normal Event).
fn standing_of(ready: bool, reason: Reason) -> Standing {
    match reason {
        _ if ready => Standing::Ready,
        Reason::TemplateFailed
        | Reason::NameCollision
        | Reason::RolloutStalled
        | Reason::ValidationFailed => Standing::Stalled,
        _ => Standing::Reconciling,
    }
}

/// Pure: the status of `set` after a pass that came to `outcome`.
pub(crate) fn desired_status<S>(
    set: &S,
    outcome: &Outcome<S>,
    now: jiff::Timestamp,
) -> FleetSetStatus
where
    S: SetKind + Pipeline<Done = Report, Failure = SetFailure>,
{
    let old = set.stored_status().cloned().unwrap_or_default();
    let generation = set.meta().generation;
    let mut s = old.clone();
    s.observed_generation = generation;
    let (standing, reason, message) = match &outcome.result {
        Ok(report) => {
            let mut failing = report.failing.clone();
            failing.sort_by(|a, b| a.cluster.cmp(&b.cluster).then(a.name.cmp(&b.name)));
            s.matched_clusters = report.matched;
            s.desired = report.matched;
            s.ready = report.ready;
            s.updated = report.updated;
            s.failed = u32::try_from(failing.len()).unwrap_or(u32::MAX);
            failing.truncate(MAX_FAILING_LISTED);
            s.failing = failing;
            let (ready, reason, message) = verdict(report);
            (standing_of(ready, reason), reason, message)
        }
        Err(failure) => (
            failure.disposition().into(),
            failure.reason(),
            failure.to_string(),
        ),
    };
    set_standing(
        &mut s.conditions,
        standing,
        reason,
        &message,
        generation,
        now,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::progress_only;
    use crate::api::common::{Condition, ConditionStatus};
    use crate::api::fleet::{FailingCluster, FleetSetStatus};

    fn status(ready: u32, of: u32, ready_status: ConditionStatus, reason: &str) -> FleetSetStatus {
        FleetSetStatus {
            observed_generation: Some(1),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready_status,
                observed_generation: Some(1),
                last_transition_time: jiff::Timestamp::UNIX_EPOCH,
                reason: reason.into(),
                message: format!("{ready} of {of} objects Ready"),
            }],
            matched_clusters: of,
            desired: of,
            ready,
            updated: ready,
            ..Default::default()
        }
    }

    #[test]
    fn only_moving_counts_may_wait_for_the_pace() {
        use ConditionStatus::{False, True};
        let before = status(37, 100, False, "Progressing");
        assert!(progress_only(
            &before,
            &status(38, 100, False, "Progressing")
        ));
        assert!(progress_only(
            &before,
            &status(37, 101, False, "Progressing")
        ));
        assert!(!progress_only(&before, &before), "nothing to write");
        // A transition, a new reason, a new generation or a failure is written at once.
        assert!(!progress_only(&before, &status(100, 100, True, "Ready")));
        assert!(!progress_only(
            &before,
            &status(38, 100, False, "RolloutStalled")
        ));
        let mut next = status(38, 100, False, "Progressing");
        next.observed_generation = Some(2);
        assert!(!progress_only(&before, &next));
        let mut failing = status(38, 100, False, "Progressing");
        failing.failed = 1;
        failing.failing.push(FailingCluster {
            cluster: "c1".into(),
            name: "web-c1".into(),
            reason: "InstallFailed".into(),
            message: "boom".into(),
        });
        assert!(!progress_only(&before, &failing));
    }
}
