//! What one pass of the OmniCluster controller came to ([`Outcome`]), and the pure decisions
//! taken from it: the status to write ([`desired_status`]) and the next reconcile
//! ([`recheck`] after a pass that did not fail, [`retry_policy`] after one that did).

use std::time::Duration;

use kube::runtime::controller::Action;
use omni_client::template::{ClusterHealth, StatusError};

use super::failure::{ClusterFailure, Stage};
use super::omni_state::omni_state;
use super::plan::HeldPlan;
use super::readiness::readiness;
use super::state::Applied;
use crate::api::OmniCluster;
use crate::api::Reason;
use crate::api::cluster::OmniClusterStatus;
use crate::api::common::{ConditionStatus, condition_types as ct, find_condition};
use crate::api::keys::force_requested;
use crate::controllers::shared::error::{Failure, RetryPolicy};
use crate::controllers::shared::pipeline;
use crate::controllers::shared::status::{Draft, Standing};
use crate::domain::render::RenderedSet;

/// Re-check while deletion waits for Omni to tear the cluster down.
pub(crate) const DELETE_POLL: Duration = Duration::from_secs(5);

/// First re-read of a synced cluster whose Omni status could not be read from Omni directly
/// (its connection's status watch not live). Omni creates a cluster's status after the cluster
/// itself, so a first pass often finds none; it is looked at again soon rather than after a
/// whole sync interval (nothing else triggers it without the watch). While it stays unreadable
/// the wait grows with how long it has been (see [`status_failing_for`]), so a status Omni
/// never serves in a readable form costs a re-read per sync interval, not one every few
/// seconds.
pub(crate) const STATUS_RECHECK: Duration = Duration::from_secs(10);

/// Re-read of a synced cluster Omni reports still converging (scaling, upgrading), while its
/// connection's status watch is not live to announce the end (with the watch, a change of
/// Omni's view wakes the cluster at once).
pub(crate) const CONVERGING_RECHECK: Duration = Duration::from_secs(30);

/// How long `cluster`'s stored status has reported its Omni status unreadable or not there yet
/// (`Ready=False`, `StatusFailed` or `WaitingForOmni`) as of `now`; zero when it does not.
/// Timed from `Ready`'s last transition, which an earlier failure (`Ready` already `False` for
/// another reason) may have set sooner: such a cluster waits longer, at most its sync
/// interval, as before.
pub(crate) fn status_failing_for(cluster: &OmniCluster, now: jiff::Timestamp) -> Duration {
    cluster
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, ct::READY))
        .filter(|c| {
            c.status == ConditionStatus::False
                && (c.reason == Reason::StatusFailed || c.reason == Reason::WaitingForOmni)
        })
        .and_then(|c| Duration::try_from(now.duration_since(c.last_transition_time)).ok())
        .unwrap_or_default()
}

/// What a render recorded about the cluster, kept in its status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rendition {
    /// The OmniConnection's name.
    pub(crate) connection: String,
    /// The OmniConnection's endpoint.
    pub(crate) endpoint: String,
    /// Hash of the rendered template.
    pub(crate) template_hash: String,
    /// The OmniControlPlane rendered.
    pub(crate) control_plane_ref: String,
    /// The OmniWorkers rendered, in order.
    pub(crate) workers_refs: Vec<String>,
    /// The OmniMachines rendered, in order.
    pub(crate) machine_refs: Vec<String>,
    /// The Omni machine sets rendered, with the objects they come from.
    pub(crate) machine_sets: Vec<RenderedSet>,
}

impl Rendition {
    fn record(&self, s: &mut OmniClusterStatus, cluster_name: &str) {
        s.connection_ref = Some(self.connection.clone());
        s.endpoint = Some(self.endpoint.clone());
        s.cluster_name = Some(cluster_name.to_string());
        s.template_hash = Some(self.template_hash.clone());
        s.control_plane_ref = Some(self.control_plane_ref.clone());
        s.workers_refs = self.workers_refs.clone();
        s.machine_refs = self.machine_refs.clone();
    }
}

/// A sync that reached Omni.
#[derive(Debug)]
pub(crate) struct Synced {
    /// The change set written to Omni that the stored status does not record yet: this pass's,
    /// or that of an earlier pass whose status write did not land (a newer stored copy, such
    /// as a label edit right after a spec edit, ran the pass again, which found Omni in sync).
    /// `None` when Omni already matched and everything written is recorded.
    pub(crate) applied: Option<Applied>,
    /// Omni's view of the cluster after the sync.
    pub(crate) health: Result<ClusterHealth, StatusError>,
    /// Whether `health` came from a live status watch, which wakes the cluster when it changes.
    pub(crate) watched: bool,
}

impl Synced {
    /// The change set applied that `status` (the stored one) does not record yet.
    pub(crate) fn unrecorded(&self, status: Option<&OmniClusterStatus>) -> Option<&Applied> {
        self.applied.as_ref().filter(|a| !a.recorded_in(status))
    }
}

/// What one pass came to: the rendition when it got as far as rendering, and its end.
pub(crate) type Outcome = pipeline::Outcome<OmniCluster>;

/// What a pass that did not fail came to.
#[derive(Debug)]
pub(crate) enum Done {
    /// `spec.suspend`: nothing was done.
    Suspended,
    /// Omni holds the template.
    Synced(Box<Synced>),
    /// A plan was computed and not applied (mode `Plan`, held for approval, an adoption that
    /// differs). A sync's hold comes with the rendition (`Outcome::found`); a held deletion
    /// rendered nothing.
    Held(Box<HeldPlan>),
    /// Deletion waits for Omni to tear these resources down; `output` is what was done.
    Deleting {
        /// The resources still there.
        waiting_for: Vec<String>,
        /// The step's output (trimmed).
        output: String,
        /// The hash of the deletion plan, when the approval annotation released it.
        approved: Option<String>,
    },
}

/// Pure: the status `cluster` should have after `outcome`, conditions stamped `now`. A
/// failure keeps what the last success recorded; sync times move only when Omni changed, on
/// the first sync, or when the cluster recovers, so an idle re-check writes nothing.
pub(crate) fn desired_status(
    cluster: &OmniCluster,
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> OmniClusterStatus {
    let generation = cluster.metadata.generation;
    let mut stored = cluster.status.clone().unwrap_or_default();
    stored.observed_generation = generation;
    let mut d = Draft::new(stored, generation, now, ct::SYNCED);
    let name = cluster.effective_cluster_name();
    if let Some(rendered) = &outcome.found {
        rendered.record(&mut d.s, &name);
    }
    match &outcome.result {
        Ok(Done::Suspended) => d.suspend(SUSPENDED),
        Err(failure) => {
            d.resume();
            let (reason, message) = (failure.reason(), failure.to_string());
            match failure.stage() {
                Stage::Validate => {
                    d.s.cluster_name = Some(name);
                    d.set(ct::VALIDATED, false, reason, &message);
                }
                Stage::Dereference => {
                    d.s.cluster_name = Some(name);
                    d.set(ct::SYNCED, false, reason, &message);
                }
                Stage::Sync => {
                    d.s.cluster_name = Some(name);
                    d.s.last_attempt_time = Some(now);
                    d.s.last_sync_output = Some(failure.output().to_string());
                    template_valid(&mut d);
                    d.set(ct::SYNCED, false, reason, &message);
                }
                Stage::Delete => {
                    if !failure.output().is_empty() {
                        d.s.last_sync_output = Some(failure.output().to_string());
                    }
                }
            }
            d.stand(failure.disposition().into(), reason, &message);
        }
        Ok(Done::Held(held)) => {
            d.resume();
            let reason = held.hold.reason();
            if outcome.found.is_some() {
                template_valid(&mut d);
                d.set(ct::SYNCED, false, reason, &held.message);
            }
            d.s.plan = Some(held.plan.clone());
            // Waiting for a person: neither converging nor stalled.
            d.stand(Standing::NotReady, reason, &held.message);
        }
        Ok(Done::Synced(synced)) => {
            d.resume();
            // Nothing is pending: what was planned is applied, or there was nothing.
            d.s.plan = None;
            // A forced sync (a fresh read of Omni) counts as an attempt, recorded once.
            let forced = force_requested(cluster);
            if let Some(token) = forced {
                d.s.last_handled_force_at = Some(token.to_string());
                d.s.last_attempt_time = Some(now);
            }
            let first = d.s.last_sync_time.is_none();
            let synced_before = find_condition(&d.s.conditions, ct::SYNCED)
                .is_some_and(|c| c.status == ConditionStatus::True);
            if let Some(applied) = &synced.applied {
                d.s.last_attempt_time = Some(applied.at);
                d.s.last_sync_time = Some(applied.at);
                d.s.last_sync_output = Some(applied.output.clone());
            } else if first || !synced_before {
                d.s.last_attempt_time = Some(now);
                d.s.last_sync_time = Some(now);
                d.s.last_sync_output = Some(String::new());
            }
            template_valid(&mut d);
            d.set(ct::SYNCED, true, Reason::Synced, "template synced to Omni");
            let sets = outcome
                .found
                .as_ref()
                .map_or(&[][..], |r| r.machine_sets.as_slice());
            match &synced.health {
                Ok(health) => {
                    omni_state(&mut d.s, health);
                    match readiness(health, sets) {
                        Ok(m) => d.stand(Standing::Ready, Reason::Running, &m),
                        Err(c) => d.stand(Standing::Reconciling, c.reason, &c.message),
                    }
                }
                // Omni creates a cluster's status after the cluster: wait for it.
                Err(StatusError::NotFound(cluster)) => d.stand(
                    Standing::Reconciling,
                    Reason::WaitingForOmni,
                    &format!("waiting for Omni to report the status of cluster {cluster:?}"),
                ),
                Err(e) => d.stand(Standing::NotReady, Reason::StatusFailed, &e.to_string()),
            }
        }
        Ok(Done::Deleting {
            waiting_for,
            output,
            ..
        }) => {
            d.resume();
            d.s.plan = None;
            if !output.is_empty() {
                d.s.last_sync_output = Some(output.clone());
            }
            let m = format!("waiting for Omni to delete {}", waiting_for.join(", "));
            d.stand(Standing::Reconciling, Reason::Deleting, &m);
        }
    }
    d.s
}

/// The message of `Suspended=True` on a cluster.
pub(crate) const SUSPENDED: &str =
    "spec.suspend is set: nothing is written to Omni and Ready keeps its last state";

fn template_valid(d: &mut Draft<OmniClusterStatus>) {
    d.set(
        ct::VALIDATED,
        true,
        Reason::Validated,
        "rendered Omni cluster template is valid",
    );
}

/// Pure: the next reconcile after a pass that came to `done`, for a cluster re-checked every
/// `sync_interval` whose Omni status has been unreadable for `status_failing` (zero if it was
/// read last time).
pub(crate) fn recheck(done: &Done, sync_interval: Duration, status_failing: Duration) -> Action {
    match done {
        // A watched status that cannot be read (none yet) wakes the cluster when it changes.
        Done::Synced(synced) if synced.health.is_err() && !synced.watched => {
            Action::requeue(status_failing.max(STATUS_RECHECK).min(sync_interval))
        }
        // Converging without a live status watch to say when it is done: look again soon.
        Done::Synced(synced)
            if !synced.watched
                && synced
                    .health
                    .as_ref()
                    .is_ok_and(|h| !(h.healthy && h.kubernetes_api_ready)) =>
        {
            Action::requeue(CONVERGING_RECHECK.min(sync_interval))
        }
        // A held plan is looked at again when the object changes (an approval, a spec edit),
        // when its children do, and at the sync interval (Omni may change meanwhile).
        Done::Suspended | Done::Synced(_) | Done::Held(_) => Action::requeue(sync_interval),
        Done::Deleting { .. } => Action::requeue(DELETE_POLL),
    }
}

/// Pure: what follows `failure` for a cluster re-checked every `sync_interval`: its own
/// policy, a poll never later than the next periodic pass.
pub(crate) fn retry_policy(failure: &ClusterFailure, sync_interval: Duration) -> RetryPolicy {
    match failure.retry() {
        RetryPolicy::Poll(after) => RetryPolicy::Poll(after.min(sync_interval)),
        other => other,
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
