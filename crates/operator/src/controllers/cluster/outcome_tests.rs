//! Status and requeue decisions of `outcome.rs`, one scenario per test.

use omni_client::template::{MachineCounts, Upgrades, ValidationError};

use super::*;
use crate::api::common::Condition;
use crate::controllers::cluster::failure::{ConnectionLookup, FAILURE_RECHECK};
use crate::controllers::cluster::ownership::OmniOwnership;
use crate::controllers::shared::error::Failure;
use crate::controllers::shared::omni::{ApiVersionError, ConnectionError};
use crate::controllers::shared::status::status_patch;
use crate::domain::render::RenderError;
use omni_client::template::{StateError, SyncError, ValidationErrors};

fn t(minute: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + minute * 60).unwrap_or_else(|e| panic!("{e}"))
}

/// OmniCluster `ops/edge` at generation 2, Omni cluster `prod`, never reconciled.
fn cluster() -> OmniCluster {
    let mut c: OmniCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": "edge", "namespace": "ops", "uid": "u-1", "generation": 2},
        "spec": {"connectionRef": {"name": "omni"}, "clusterName": "prod",
                 "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    c.status = None;
    c
}

/// `cluster` after `outcome` was reported at `now`.
fn after(mut cluster: OmniCluster, outcome: &Outcome, now: jiff::Timestamp) -> OmniCluster {
    cluster.status = Some(desired_status(&cluster, outcome, now));
    cluster
}

fn rendition() -> Rendition {
    Rendition {
        connection: "omni".into(),
        endpoint: "https://omni.example:443".into(),
        template_hash: "ab12".into(),
        control_plane_ref: "edge-cp".into(),
        workers_refs: vec!["edge-workers".into()],
        machine_refs: vec!["m0".into(), "m1".into()],
        machine_sets: Vec::new(),
    }
}

fn health(phase: &str) -> ClusterHealth {
    ClusterHealth {
        cluster: "prod".into(),
        phase: phase.into(),
        ready: true,
        kubernetes_api_ready: true,
        talos_version: "1.13.2".into(),
        kubernetes_version: "1.35.0".into(),
        manifests: None,
        healthy: true,
        machine_sets: Vec::new(),
        machines: MachineCounts {
            total: 2,
            healthy: 2,
            connected: 2,
            requested: 2,
        },
        upgrades: Upgrades::default(),
        health_checks: Vec::new(),
        summary: format!("  cluster prod is {phase}\n"),
    }
}

/// A change set written to Omni at `at` with `output`.
fn applied(at: jiff::Timestamp, output: &str) -> Option<Applied> {
    Some(Applied {
        at,
        output: output.into(),
        summary: "Clusters: 1 created".into(),
        approved: None,
    })
}

/// A sync that wrote `applied` (`None`: Omni matched) and read `health`.
fn synced(applied: Option<Applied>, health: Result<ClusterHealth, StatusError>) -> Outcome {
    Outcome::new(
        Some(Box::new(rendition())),
        Ok(Done::Synced(Box::new(Synced {
            applied,
            health,
            watched: false,
        }))),
    )
}

/// A sync whose status came from the connection's live status watch.
fn synced_watched(health: Result<ClusterHealth, StatusError>) -> Outcome {
    Outcome::new(
        Some(Box::new(rendition())),
        Ok(Done::Synced(Box::new(Synced {
            applied: None,
            health,
            watched: true,
        }))),
    )
}

/// The next reconcile after `outcome` for a cluster re-checked every `interval` whose status
/// has been unreadable for `failing`; `Err` is a failure handed to the backoff.
fn next_action(
    outcome: Outcome,
    interval: Duration,
    failing: Duration,
) -> Result<Action, ClusterFailure> {
    match outcome.result {
        Ok(done) => Ok(recheck(&done, interval, failing)),
        Err(failure) => retry_policy(&failure, interval).action().ok_or(failure),
    }
}

fn sync_error() -> SyncError {
    SyncError::Invalid(ValidationErrors(vec![ValidationError {
        index: Some(0),
        kind: "Cluster".into(),
        name: "prod".into(),
        field: "name".into(),
        message: "rejected".into(),
    }]))
}

fn conditions(s: &OmniClusterStatus) -> Vec<(String, ConditionStatus, String)> {
    s.conditions
        .iter()
        .map(|c: &Condition| (c.type_.clone(), c.status, c.reason.clone()))
        .collect()
}

fn message(s: &OmniClusterStatus, type_: &str) -> String {
    find_condition(&s.conditions, type_)
        .map(|c| c.message.clone())
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

/// A failure, the conditions it sets, the `Ready` message and its retry policy.
type Case = (
    ClusterFailure,
    Vec<(String, ConditionStatus, String)>,
    &'static str,
    RetryPolicy,
);

fn cond(type_: &str, ok: bool, reason: &str) -> (String, ConditionStatus, String) {
    (type_.into(), ok.into(), reason.into())
}

/// Every failure: the conditions it sets (in order), the message users read and what happens
/// next. Validation failures turn `Validated`, missing references `Synced`, a sync attempt
/// also records the template as valid, a deletion turns `Ready` alone; then `Reconciling=True`
/// when the cluster waits for something to appear, `Stalled=True` when only a spec change
/// helps, neither when a retry may.
#[test]
fn each_failure_reports_its_reason_on_its_conditions_and_retries_by_its_policy() {
    let poll = RetryPolicy::Poll(FAILURE_RECHECK);
    let backoff = RetryPolicy::Backoff;
    let await_change = RetryPolicy::AwaitChange;
    // The kstatus condition after `Ready`: `Reconciling` (waiting), `Stalled`, or none.
    let then = |mut conditions: Vec<(String, ConditionStatus, String)>, kstatus: Option<&str>| {
        if let Some(type_) = kstatus {
            let reason = conditions[conditions.len() - 1].2.clone();
            conditions.push((type_.into(), ConditionStatus::True, reason));
        }
        conditions
    };
    let validated = |reason: &str| {
        vec![
            cond("Validated", false, reason),
            cond("Ready", false, reason),
        ]
    };
    let dereference =
        |reason: &str| vec![cond("Synced", false, reason), cond("Ready", false, reason)];
    let sync = vec![
        cond("Validated", true, "Validated"),
        cond("Synced", false, "SyncFailed"),
        cond("Ready", false, "SyncFailed"),
    ];
    let deletion = vec![cond("Ready", false, "DeleteFailed")];
    let not_found = || ConnectionLookup::NotFound("omni".into());
    let table: Vec<Case> = vec![
        (
            ClusterFailure::InvalidSpec("spec.syncInterval: must be at least 10s".into()),
            then(validated("ValidationFailed"), Some("Stalled")),
            "spec.syncInterval: must be at least 10s",
            await_change,
        ),
        (
            ClusterFailure::MissingConnection {
                name: "omni".into(),
                cause: not_found(),
            },
            then(dereference("MissingConnection"), Some("Reconciling")),
            r#"failed to get OmniConnection "omni": omniconnections.omni.texashpc.com "omni" not found"#,
            poll,
        ),
        (
            ClusterFailure::ChildCacheNotReady {
                kinds: vec!["OmniMachines"],
                waited: Duration::from_secs(5),
            },
            then(dereference("ReconcileFailed"), None),
            "the operator's watch of OmniMachines has not completed its first list after 5s (is listing or watching them denied to the operator?); retrying",
            backoff,
        ),
        (
            ClusterFailure::Render(RenderError::ControlPlaneCount {
                namespace: "ops".into(),
                name: "edge".into(),
                found: 0,
            }),
            then(validated("MissingTemplate"), Some("Reconciling")),
            "expected exactly one OmniControlPlane referencing ops/edge, found 0",
            poll,
        ),
        (
            ClusterFailure::OmniClient(ConnectionError::MissingSecret { name: "key".into() }),
            then(sync.clone(), Some("Reconciling")),
            r#"sync failed: MissingSecret "key": secrets "key" not found"#,
            poll,
        ),
        (
            ClusterFailure::OwnershipUnreadable {
                name: "prod".into(),
                source: StateError::PermissionDenied("role".into()),
            },
            then(sync.clone(), None),
            r#"sync failed: get Omni cluster "prod": permission denied: role"#,
            backoff,
        ),
        (
            ClusterFailure::NotOwned {
                name: "prod".into(),
                owner: OmniOwnership::Unowned,
            },
            then(sync.clone(), Some("Stalled")),
            r#"sync failed: Omni cluster "prod" already exists and was not created by this OmniCluster; it was left unchanged (annotate this OmniCluster omni.texashpc.com/adopt="true" to take it over)"#,
            poll,
        ),
        (
            ClusterFailure::BackendApi(ApiVersionError::Read("unavailable".into())),
            then(sync.clone(), None),
            "sync failed: read Omni backend API version: unavailable",
            backoff,
        ),
        (
            ClusterFailure::DeleteWithoutConnection {
                name: "omni".into(),
                cause: not_found(),
            },
            then(deletion.clone(), None),
            r#"cannot delete remote Omni cluster without OmniConnection "omni": omniconnections.omni.texashpc.com "omni" not found"#,
            backoff,
        ),
        (
            ClusterFailure::RenamedBeforeDelete {
                recorded: "prod".into(),
                name: "next".into(),
            },
            then(deletion.clone(), Some("Stalled")),
            r#"spec.clusterName was changed from "prod" to "next"; refusing to delete either Omni cluster. Restore spec.clusterName, or set spec.deletePolicy.orphan to finish without deleting"#,
            await_change,
        ),
        (
            ClusterFailure::DeleteOwnershipUnreadable {
                name: "prod".into(),
                source: StateError::DeadlineExceeded("get".into()),
            },
            then(deletion, None),
            r#"get Omni cluster "prod": deadline exceeded: get"#,
            backoff,
        ),
    ];
    for (failure, expected, text, retry) in table {
        let label = format!("{failure:?}");
        assert_eq!(failure.retry(), retry, "{label}");
        let s = desired_status(&cluster(), &Outcome::failed(failure), t(0));
        assert_eq!(conditions(&s), expected, "{label}");
        assert_eq!(message(&s, "Ready"), text, "{label}");
        assert_eq!(s.observed_generation, Some(2), "{label}");
        assert_eq!(s.last_sync_time, None, "{label}");
        assert!(s.conditions.iter().all(|c| c.last_transition_time == t(0)));
    }
}

#[test]
fn a_failed_sync_shows_what_was_done_before_it_and_keeps_the_last_success() {
    let ok = after(
        cluster(),
        &synced(applied(t(0), "* creating a"), Ok(health("RUNNING"))),
        t(0),
    );
    let failure = ClusterFailure::Sync {
        source: Box::new(sync_error()),
        output: "* updating b".into(),
    };
    let s = desired_status(
        &ok,
        &Outcome::new(Some(Box::new(rendition())), Err(failure)),
        t(5),
    );
    assert_eq!(
        message(&s, "Synced"),
        format!("sync failed: {}\n* updating b", sync_error())
    );
    assert_eq!(s.last_sync_output.as_deref(), Some("* updating b"));
    assert_eq!(s.last_attempt_time, Some(t(5)));
    assert_eq!(
        s.last_sync_time,
        Some(t(0)),
        "the last success stays recorded"
    );
    assert_eq!(s.omni_phase.as_deref(), Some("RUNNING"));
    assert_eq!(s.template_hash.as_deref(), Some("ab12"));
}

#[test]
fn a_first_sync_records_the_render_the_times_and_omnis_view() {
    let s = desired_status(
        &cluster(),
        &synced(applied(t(0), "* creating a"), Ok(health("RUNNING"))),
        t(0),
    );
    assert_eq!(
        conditions(&s),
        vec![
            cond("Validated", true, "Validated"),
            cond("Synced", true, "Synced"),
            cond("Ready", true, "Running"),
        ]
    );
    assert_eq!(
        message(&s, "Ready"),
        r#"Omni reports cluster "prod" running: 2/2 machines healthy, Kubernetes API ready"#
    );
    assert_eq!(s.cluster_name.as_deref(), Some("prod"));
    assert_eq!(s.connection_ref.as_deref(), Some("omni"));
    assert_eq!(s.endpoint.as_deref(), Some("https://omni.example:443"));
    assert_eq!(s.control_plane_ref.as_deref(), Some("edge-cp"));
    assert_eq!(s.machine_refs, vec!["m0".to_string(), "m1".to_string()]);
    assert_eq!(s.last_sync_time, Some(t(0)));
    assert_eq!(s.last_attempt_time, Some(t(0)));
    assert_eq!(s.last_sync_output.as_deref(), Some("* creating a"));
    assert_eq!(
        s.last_status_output.as_deref(),
        Some("cluster prod is RUNNING")
    );
    assert_eq!(s.ready_machines.as_deref(), Some("2/2"));
}

/// Quiet: a re-check that finds Omni matching and its view unchanged needs no write.
#[test]
fn an_idle_resync_changes_nothing() {
    let synced_once = after(
        cluster(),
        &synced(applied(t(0), "* creating a"), Ok(health("RUNNING"))),
        t(0),
    );
    let again = desired_status(&synced_once, &synced(None, Ok(health("RUNNING"))), t(5));
    let old = serde_json::to_value(&synced_once.status).unwrap_or_default();
    let new = serde_json::to_value(&again).unwrap_or_default();
    assert_eq!(status_patch(&old, &new), None);
}

/// A cluster recovering from a failure records a sync even when Omni needed no change.
#[test]
fn a_recovery_without_changes_records_a_sync() {
    let failure = ClusterFailure::BackendApi(ApiVersionError::Read("unavailable".into()));
    let failing = after(cluster(), &Outcome::failed(failure), t(0));
    let s = desired_status(&failing, &synced(None, Ok(health("RUNNING"))), t(5));
    assert_eq!(s.last_sync_time, Some(t(5)));
    assert_eq!(s.last_sync_output.as_deref(), Some(""));
}

/// Omni creates a new cluster's status a moment after the cluster: waiting for it is
/// `Reconciling`, not a failure; a status that cannot be read is a failure (retried).
#[test]
fn a_status_omni_has_not_created_yet_is_waited_for() {
    let unread = Err(StatusError::NotFound("prod".into()));
    let s = desired_status(&cluster(), &synced(applied(t(0), ""), unread), t(0));
    assert_eq!(
        conditions(&s),
        vec![
            cond("Validated", true, "Validated"),
            cond("Synced", true, "Synced"),
            cond("Ready", false, "WaitingForOmni"),
            (
                "Reconciling".into(),
                ConditionStatus::True,
                "WaitingForOmni".into()
            ),
        ]
    );
    assert_eq!(
        message(&s, "Ready"),
        r#"waiting for Omni to report the status of cluster "prod""#
    );
    assert_eq!(s.omni_phase, None);
    let broken = Err(StatusError::Timeout("prod".into()));
    let s = desired_status(&cluster(), &synced(None, broken), t(0));
    assert_eq!(conditions(&s)[2..], [cond("Ready", false, "StatusFailed")]);
}

/// The issue's starved cluster: synced, but Omni reports its machine sets short of machines
/// and its API not ready. `Ready=False`, `Reconciling=True`, the reason naming the objects
/// whose sets wait; it turns Ready when the machines arrive.
#[test]
fn a_cluster_starved_of_machines_is_reconciling_until_they_arrive() {
    use crate::domain::render::RenderedSet;
    use omni_client::template::MachineSetHealth;
    let mut rendered = rendition();
    rendered.machine_sets = vec![
        RenderedSet {
            id: "prod-control-planes".into(),
            kind: "OmniControlPlane",
            name: "edge-cp".into(),
            machine_class: Some("cp".into()),
        },
        RenderedSet {
            id: "prod-workers".into(),
            kind: "OmniWorkers",
            name: "edge-workers".into(),
            machine_class: None,
        },
    ];
    let set = |id: &str, total, requested| MachineSetHealth {
        id: id.into(),
        phase: if total == requested {
            "Running"
        } else {
            "ScalingUp"
        }
        .into(),
        ready: total == requested,
        error: String::new(),
        machines: MachineCounts {
            total,
            healthy: total,
            connected: total,
            requested,
        },
    };
    let pass = |machines: u32| {
        let mut h = health(if machines == 0 {
            "SCALING_UP"
        } else {
            "RUNNING"
        });
        h.healthy = machines > 0;
        h.kubernetes_api_ready = machines > 0;
        h.machine_sets = vec![
            set("prod-control-planes", machines, 1),
            set("prod-workers", machines * 2, 2),
        ];
        Outcome::new(
            Some(Box::new(rendered.clone())),
            Ok(Done::Synced(Box::new(Synced {
                applied: None,
                health: Ok(h),
                watched: true,
            }))),
        )
    };
    let starved = after(cluster(), &pass(0), t(0));
    let s = starved.status.clone().unwrap_or_default();
    assert_eq!(
        conditions(&s)[2..],
        [
            cond("Ready", false, "WaitingForMachines"),
            (
                "Reconciling".into(),
                ConditionStatus::True,
                "WaitingForMachines".into()
            ),
        ]
    );
    assert_eq!(
        message(&s, "Ready"),
        r#"waiting for machines: OmniControlPlane "edge-cp" has 0 of 1 machines from machine class "cp"; OmniWorkers "edge-workers" has 0 of 2 machines"#
    );
    assert_eq!(
        desired_status(&starved, &pass(0), t(60)),
        s,
        "forever, and quiet: the same pass writes nothing new"
    );
    let up = desired_status(&starved, &pass(1), t(2));
    assert_eq!(conditions(&up)[2..], [cond("Ready", true, "Running")]);
}

/// Omni refusing the template as invalid (here an incompatible version) stalls the cluster
/// at once: no retry fixes it, only a spec change.
#[test]
fn an_incompatible_version_stalls_at_once() {
    let refused = ClusterFailure::Sync {
        source: Box::new(SyncError::State {
            operation: "update",
            resource: omni_client::template::ResourceRef::new("Clusters.omni.sidero.dev", "prod"),
            source: StateError::Invalid(
                r#"failed to validate: invalid kubernetes version "1.36.0": is not compatible with Talos version "1.13.2""#.into(),
            ),
        }),
        output: String::new(),
    };
    assert_eq!(refused.reason(), Reason::OmniRejected);
    assert_eq!(refused.retry(), RetryPolicy::Poll(FAILURE_RECHECK));
    let s = desired_status(
        &cluster(),
        &Outcome::new(Some(Box::new(rendition())), Err(refused)),
        t(0),
    );
    assert_eq!(
        conditions(&s),
        vec![
            cond("Validated", true, "Validated"),
            cond("Synced", false, "OmniRejected"),
            cond("Ready", false, "OmniRejected"),
            (
                "Stalled".into(),
                ConditionStatus::True,
                "OmniRejected".into()
            ),
        ]
    );
    assert!(message(&s, "Stalled").contains("is not compatible with Talos version"));
    // A refusal that ends by itself (a locked cluster) is retried, not stalled.
    let locked = ClusterFailure::Sync {
        source: Box::new(SyncError::State {
            operation: "update",
            resource: omni_client::template::ResourceRef::new("Clusters.omni.sidero.dev", "prod"),
            source: StateError::Invalid("failed to validate: cluster \"prod\" is locked".into()),
        }),
        output: String::new(),
    };
    assert_eq!(locked.reason(), Reason::SyncFailed);
    assert_eq!(
        locked.disposition(),
        crate::controllers::shared::error::Disposition::Retrying
    );
}

/// Suspending keeps `Ready` as it was and adds `Suspended=True`; resuming removes it.
#[test]
fn a_suspended_cluster_keeps_ready_and_says_suspended() {
    let ok = after(
        cluster(),
        &synced(applied(t(0), ""), Ok(health("RUNNING"))),
        t(0),
    );
    let suspended = after(ok.clone(), &Outcome::done(Done::Suspended), t(5));
    let s = suspended.status.clone().unwrap_or_default();
    assert_eq!(
        conditions(&s),
        vec![
            cond("Validated", true, "Validated"),
            cond("Synced", true, "Synced"),
            cond("Ready", true, "Running"),
            (
                "Suspended".into(),
                ConditionStatus::True,
                "Suspended".into()
            ),
        ]
    );
    assert_eq!(message(&s, "Suspended"), SUSPENDED);
    assert_eq!(s.last_sync_time, Some(t(0)));
    let resumed = desired_status(&suspended, &synced(None, Ok(health("RUNNING"))), t(9));
    assert_eq!(resumed.conditions, ok.status.unwrap_or_default().conditions);
}

#[test]
fn a_deletion_in_progress_names_what_omni_still_holds() {
    let deleting = Outcome::done(Done::Deleting {
        waiting_for: vec!["Clusters.omni.sidero.dev(default/prod)".into()],
        output: "* tearing down prod".into(),
        approved: None,
    });
    let s = desired_status(&cluster(), &deleting, t(0));
    assert_eq!(
        conditions(&s),
        vec![
            cond("Ready", false, "Deleting"),
            (
                "Reconciling".into(),
                ConditionStatus::True,
                "Deleting".into()
            ),
        ]
    );
    assert_eq!(
        message(&s, "Ready"),
        "waiting for Omni to delete Clusters.omni.sidero.dev(default/prod)"
    );
    assert_eq!(s.last_sync_output.as_deref(), Some("* tearing down prod"));
    let failed = Outcome::failed(ClusterFailure::Delete {
        source: Box::new(sync_error()),
        output: "* destroying m0".into(),
    });
    let s = desired_status(&cluster(), &failed, t(0));
    assert_eq!(s.last_sync_output.as_deref(), Some("* destroying m0"));
    assert_eq!(message(&s, "Ready"), sync_error().to_string());
}

#[test]
fn the_next_reconcile_follows_the_outcome_and_the_sync_interval() {
    let minute = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    let next = |o: Outcome, interval| next_action(o, interval, Duration::ZERO).ok();
    assert_eq!(
        next(synced(None, Ok(health("RUNNING"))), minute),
        Some(Action::requeue(minute))
    );
    assert_eq!(
        next(Outcome::done(Done::Suspended), hour),
        Some(Action::requeue(hour))
    );
    let unread = || synced(applied(t(0), ""), Err(StatusError::NotFound("prod".into())));
    assert_eq!(
        next(unread(), hour),
        Some(Action::requeue(STATUS_RECHECK)),
        "Omni's status for a new cluster comes later: read it again soon"
    );
    assert_eq!(
        next(unread(), Duration::from_secs(5)),
        Some(Action::requeue(Duration::from_secs(5)))
    );
    let after = |failing| next_action(unread(), hour, failing).ok();
    assert_eq!(
        after(Duration::from_secs(40)),
        Some(Action::requeue(Duration::from_secs(40))),
        "the wait grows with how long the status has been unreadable"
    );
    assert_eq!(
        after(Duration::from_secs(7200)),
        Some(Action::requeue(hour)),
        "and never beyond the sync interval"
    );
    assert_eq!(
        next(
            synced_watched(Err(StatusError::NotFound("prod".into()))),
            hour
        ),
        Some(Action::requeue(hour)),
        "a watched status is not polled: its watch wakes the cluster when it appears"
    );
    let deleting = Outcome::done(Done::Deleting {
        waiting_for: Vec::new(),
        output: String::new(),
        approved: None,
    });
    assert_eq!(next(deleting, hour), Some(Action::requeue(DELETE_POLL)));
    let not_owned = || {
        Outcome::failed(ClusterFailure::NotOwned {
            name: "prod".into(),
            owner: OmniOwnership::Unowned,
        })
    };
    assert_eq!(next(not_owned(), minute), Some(Action::requeue(minute)));
    assert_eq!(
        next(not_owned(), hour),
        Some(Action::requeue(FAILURE_RECHECK)),
        "a failure is looked at again sooner than a long sync interval"
    );
    let invalid = Outcome::failed(ClusterFailure::InvalidSpec("bad".into()));
    assert_eq!(next(invalid, minute), Some(Action::await_change()));
    let backoff = Outcome::failed(ClusterFailure::BackendApi(ApiVersionError::Read(
        "unavailable".into(),
    )));
    assert!(
        matches!(
            next_action(backoff, minute, Duration::ZERO),
            Err(ClusterFailure::BackendApi(_))
        ),
        "handed to the error backoff"
    );
}

#[test]
fn an_unreadable_omni_status_is_timed_from_when_ready_turned_status_failed() {
    let unread = || synced(None, Err(StatusError::NotFound("prod".into())));
    let failing = after(cluster(), &unread(), t(1));
    assert_eq!(status_failing_for(&failing, t(2)), Duration::from_secs(60));
    let still = after(failing, &unread(), t(2));
    assert_eq!(
        status_failing_for(&still, t(4)),
        Duration::from_secs(180),
        "a pass that finds it unreadable again keeps the time it turned"
    );
    let ok = after(cluster(), &synced(None, Ok(health("RUNNING"))), t(1));
    assert_eq!(status_failing_for(&ok, t(2)), Duration::ZERO);
}

/// A held plan: `Ready=False` and `Synced=False` with the hold's reason and message, the plan
/// in status, Omni's last view kept; applying it (a sync) clears the plan.
#[test]
fn a_held_plan_is_reported_and_a_sync_clears_it() {
    use crate::api::plan::PlanStatus;
    use crate::controllers::cluster::plan::HeldPlan;
    use crate::domain::plan::Hold;
    let plan = PlanStatus {
        hash: "h".into(),
        generation: 1,
        summary: "1 to delete (destructive)".into(),
        ..PlanStatus::default()
    };
    let held = Outcome::new(
        Some(Box::new(rendition())),
        Ok(Done::Held(Box::new(HeldPlan {
            hold: Hold::ApprovalRequired,
            plan: plan.clone(),
            message: "held".into(),
        }))),
    );
    let stored = desired_status(
        &cluster(),
        &synced(applied(t(0), "* creating"), Ok(health("RUNNING"))),
        t(0),
    );
    let mut c = cluster();
    c.status = Some(stored.clone());
    let s = desired_status(&c, &held, t(10));
    assert_eq!(s.plan.as_ref(), Some(&plan));
    for type_ in ["Ready", "Synced"] {
        let cond = find_condition(&s.conditions, type_)
            .cloned()
            .unwrap_or_else(|| panic!("{type_}"));
        assert_eq!(
            (cond.status, cond.reason.as_str(), cond.message.as_str()),
            (ConditionStatus::False, "ApprovalRequired", "held")
        );
    }
    assert_eq!(s.last_sync_time, stored.last_sync_time, "a hold is no sync");
    assert_eq!(s.omni_phase, stored.omni_phase, "Omni's last view is kept");
    c.status = Some(s);
    let after = desired_status(
        &c,
        &synced(applied(t(20), "* tearing down"), Ok(health("RUNNING"))),
        t(20),
    );
    assert_eq!(after.plan, None);
    assert_eq!(
        next_action(held, Duration::from_secs(300), Duration::ZERO).ok(),
        Some(Action::requeue(Duration::from_secs(300)))
    );
    // A held deletion rendered nothing: `Ready` alone reports it, with the plan.
    let held_deletion = Outcome::done(Done::Held(Box::new(HeldPlan {
        hold: Hold::PlanOnly,
        plan: plan.clone(),
        message: "deletion held".into(),
    })));
    let s = desired_status(&cluster(), &held_deletion, t(0));
    assert_eq!(conditions(&s), vec![cond("Ready", false, "PlanOnly")]);
    assert_eq!(s.plan.as_ref(), Some(&plan));
}
