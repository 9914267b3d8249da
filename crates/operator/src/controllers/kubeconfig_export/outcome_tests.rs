use super::*;
use crate::api::common::{Condition, ConditionStatus, find_condition};
use crate::controllers::shared::error::Failure;

/// The OmniCluster and OmniConnection every pass of these scenarios found.
fn found() -> Found {
    Found {
        cluster_name: Some("edge-omni".into()),
        connection: Some(("omni".into(), "https://omni.example".into())),
    }
}

/// The next reconcile after `outcome` at `now`; `Err` hands a failure to the backoff.
fn next_action(
    outcome: Outcome,
    now: jiff::Timestamp,
    floor: Duration,
) -> Result<Action, ExportFailure> {
    match outcome.result {
        Ok(done) => Ok(recheck(&done, now, floor)),
        Err(f) => f.retry().action().ok_or(f),
    }
}

fn at(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(s)
}

fn export() -> OmniKubeconfigExport {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniKubeconfigExport",
        "metadata": {"name": "e", "namespace": "ns", "uid": "u1", "generation": 2},
        "spec": {
            "clusterRef": {"name": "edge"}, "targetSecretRef": {"name": "kc"},
            "serviceAccount": {"user": "u", "groups": ["g"]}, "ttl": "1h",
            "renewBefore": "10m", "deletionPolicy": "Delete",
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// An export whose status records a kubeconfig exported at 0 s, expiring at 3600 s.
fn exported_before() -> OmniKubeconfigExport {
    let mut e = export();
    e.status = Some(desired_status(&e, &exported(), at(0)));
    e
}

fn exported() -> Outcome {
    Outcome::new(
        found(),
        Ok(Done::Exported(Exported {
            hash: Some("h1".into()),
            expiration: at(3600),
            last_rotation: Some(at(0)),
            next_rotation: at(3000),
        })),
    )
}

fn failed(f: ExportFailure) -> Outcome {
    Outcome::new(found(), Err(f))
}

fn waiting(deletes: bool) -> Waiting {
    Waiting {
        namespace: "ns".into(),
        name: "kc".into(),
        users: vec![r#"OmniHelmRelease "app""#.into()],
        deletes,
    }
}

/// `(status, reason, message)` of condition `type_`.
fn cond(s: &OmniKubeconfigExportStatus, type_: &str) -> Option<(ConditionStatus, String, String)> {
    find_condition(&s.conditions, type_)
        .map(|c: &Condition| (c.status, c.reason.clone(), c.message.clone()))
}

fn kube_error() -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure("etcdserver: request timed out", "InternalError")
            .with_code(500)
            .boxed(),
    )
}

/// Each failure knows its condition reason and what happens next; the messages are the ones
/// users saw before the pipeline (the docs and system tests pin them).
#[test]
fn failures_carry_their_reason_retry_and_message() {
    use RetryPolicy::{AwaitChange, Backoff, Poll};
    let (ns, name) = ("ns".to_string(), "kc".to_string());
    let cases = [
        (
            ExportFailure::InvalidSpec("spec.ttl: Invalid value".into()),
            "ValidationFailed",
            AwaitChange,
            "spec.ttl: Invalid value".to_string(),
        ),
        (
            ExportFailure::CrossNamespace {
                target: "apps".into(),
                own: "ns".into(),
            },
            "ValidationFailed",
            AwaitChange,
            r#"spec.targetSecretRef.namespace "apps" is not the export's own namespace "ns"; the operator allows that only with --allow-cross-namespace-export"#.to_string(),
        ),
        (
            ExportFailure::MissingCluster {
                cluster: "nope".into(),
            },
            "MissingCluster",
            Poll(RETRY),
            r#"OmniCluster "nope" does not exist"#.to_string(),
        ),
        (
            ExportFailure::MissingConnection {
                connection: "omni".into(),
            },
            "MissingConnection",
            Poll(RETRY),
            r#"failed to get OmniConnection "omni": omniconnections.omni.texashpc.com "omni" not found"#.to_string(),
        ),
        (
            ExportFailure::ConnectionUnreadable {
                connection: "omni".into(),
                error: kube_error(),
            },
            "MissingConnection",
            Backoff,
            format!(r#"failed to get OmniConnection "omni": {}"#, kube_error()),
        ),
        (
            ExportFailure::TargetNotOwned {
                namespace: ns.clone(),
                name: name.clone(),
            },
            "TargetNotOwned",
            Poll(RETRY),
            r#"Secret "ns/kc" exists and is not owned by this OmniKubeconfigExport; it was left unchanged (annotate it omni.texashpc.com/adopt="true" to let the export take it over)"#.to_string(),
        ),
        (
            ExportFailure::Mint(omni_client::ManagementError::EmptyKubeconfig),
            "ExportFailed",
            Backoff,
            "failed to export kubeconfig: response was empty".to_string(),
        ),
        (
            ExportFailure::UnusableKubeconfig("generated kubeconfig is invalid: not UTF-8".into()),
            "ExportFailed",
            Backoff,
            "generated kubeconfig is invalid: not UTF-8".to_string(),
        ),
        (
            ExportFailure::TargetRequest {
                verb: "write",
                namespace: ns.clone(),
                name: name.clone(),
                error: Box::new(kube_error()),
            },
            "ExportFailed",
            Backoff,
            format!(r#"write Secret "ns/kc": {}"#, kube_error()),
        ),
        (
            ExportFailure::TargetKeepsChanging {
                namespace: ns,
                name,
            },
            "DeleteFailed",
            Backoff,
            r#"Secret "ns/kc" keeps changing while it is being deleted; retrying"#.to_string(),
        ),
    ];
    for (failure, reason, retry, message) in cases {
        assert_eq!(failure.reason().as_str(), reason, "{failure:?}");
        assert_eq!(failure.retry(), retry, "{failure:?}");
        assert_eq!(failure.to_string(), message);
    }
}

/// The status each outcome reports: `(case, outcome, Ready, Exported, Accepted)`.
#[test]
fn each_outcome_reports_its_conditions() {
    use ConditionStatus::{False, True};
    type Row = Option<(ConditionStatus, &'static str)>;
    let cases: Vec<(&str, Outcome, Row, Row, Row)> = vec![
        (
            "exported",
            exported(),
            Some((True, "Exported")),
            Some((True, "Exported")),
            Some((True, "Accepted")),
        ),
        (
            "invalid spec: nothing looked at",
            Outcome::early(Err(ExportFailure::InvalidSpec("bad".into()))),
            Some((False, "ValidationFailed")),
            Some((False, "ValidationFailed")),
            None,
        ),
        (
            "missing cluster: not accepted",
            Outcome::early(Err(ExportFailure::MissingCluster {
                cluster: "edge".into(),
            })),
            Some((False, "MissingCluster")),
            Some((False, "MissingCluster")),
            Some((False, "MissingCluster")),
        ),
        (
            "missing connection: the cluster is accepted",
            Outcome::new(
                Found {
                    cluster_name: Some("edge-omni".into()),
                    connection: None,
                },
                Err(ExportFailure::MissingConnection {
                    connection: "omni".into(),
                }),
            ),
            Some((False, "MissingConnection")),
            Some((False, "MissingConnection")),
            Some((True, "Accepted")),
        ),
        (
            "deletion waits for consumers",
            Outcome::early(Ok(Done::Waiting(waiting(true)))),
            Some((False, "Deleting")),
            Some((False, "Deleting")),
            None,
        ),
        (
            "a hold changed: no verdict yet",
            Outcome::early(Ok(Done::HoldChanged(Duration::ZERO))),
            None,
            None,
            None,
        ),
    ];
    for (case, outcome, ready, exported, accepted) in cases {
        let s = desired_status(&export(), &outcome, at(5));
        let pick = |type_| cond(&s, type_).map(|(st, r, _)| (st, r));
        let own = |row: Row| row.map(|(st, r)| (st, r.to_string()));
        assert_eq!(pick("Ready"), own(ready), "{case}: Ready");
        assert_eq!(pick("Exported"), own(exported), "{case}: Exported");
        assert_eq!(pick("Accepted"), own(accepted), "{case}: Accepted");
        assert_eq!(s.observed_generation, Some(2), "{case}");
        assert_eq!(s.target_secret_ref.as_deref(), Some("kc"), "{case}");
        assert_eq!(s.target_secret_namespace.as_deref(), Some("ns"), "{case}");
        assert_eq!(s.target_secret_key.as_deref(), Some("kubeconfig"), "{case}");
    }
}

#[test]
fn an_export_records_the_kubeconfig_and_where_it_went() {
    let s = desired_status(&export(), &exported(), at(5));
    assert_eq!(s.kubeconfig_hash.as_deref(), Some("h1"));
    assert_eq!(s.expiration_time, Some(at(3600)));
    assert_eq!(s.last_rotation_time, Some(at(0)));
    assert_eq!(s.next_rotation_time, Some(at(3000)));
    assert_eq!(s.cluster_name.as_deref(), Some("edge-omni"));
    assert_eq!(s.connection_ref.as_deref(), Some("omni"));
    assert_eq!(s.endpoint.as_deref(), Some("https://omni.example"));
    assert_eq!(
        cond(&s, "Ready").map(|(_, _, m)| m).as_deref(),
        Some(r#"exported kubeconfig to Secret "ns/kc" key "kubeconfig""#)
    );
}

/// Unlike the original, a failure keeps what the Secret still holds.
#[test]
fn a_failure_keeps_the_stored_hash_and_rotation_times() {
    let before = exported_before();
    let s = desired_status(
        &before,
        &failed(ExportFailure::Mint(
            omni_client::ManagementError::EmptyKubeconfig,
        )),
        at(3000),
    );
    assert_eq!(s.kubeconfig_hash.as_deref(), Some("h1"));
    assert_eq!(s.expiration_time, Some(at(3600)));
    assert_eq!(s.next_rotation_time, Some(at(3000)));
    assert_eq!(
        cond(&s, "Ready"),
        Some((
            ConditionStatus::False,
            "ExportFailed".into(),
            "failed to export kubeconfig: response was empty".into()
        ))
    );
}

/// A reconcile that finds everything as it was computes the stored status: no write.
#[test]
fn an_unchanged_export_reports_the_stored_status() {
    let before = exported_before();
    let again = desired_status(&before, &exported(), at(600));
    assert_eq!(Some(again), before.status);
}

#[test]
fn conditions_are_stamped_in_whole_seconds() {
    let now = at(7) + jiff::SignedDuration::from_millis(250);
    let s = desired_status(&export(), &exported(), now);
    let ready = find_condition(&s.conditions, "Ready").map(|c| c.last_transition_time);
    assert_eq!(ready, Some(at(7)));
}

#[test]
fn a_waiting_deletion_names_the_users_and_the_way_out() {
    assert_eq!(
        waiting(true).to_string(),
        r#"Secret "ns/kc" is still used by OmniHelmRelease "app"; it is deleted once they are gone (or set spec.deletionPolicy to Orphan to keep it and finish now)"#
    );
    assert_eq!(
        waiting(false).to_string(),
        r#"Secret "ns/kc" is being deleted and is still used by OmniHelmRelease "app"; it is kept until they are gone"#
    );
}

/// The next reconcile after each outcome.
#[test]
fn each_outcome_decides_the_next_reconcile() {
    let floor = Duration::from_secs(10);
    let next = |o: Outcome| next_action(o, at(1000), floor).map_err(|f| f.reason().as_str());
    assert_eq!(
        next(exported()),
        Ok(Action::requeue(Duration::from_secs(2000))),
        "at the next rotation"
    );
    assert_eq!(
        next(Outcome::early(Ok(Done::HoldChanged(Duration::ZERO)))),
        Ok(Action::requeue(Duration::ZERO))
    );
    assert_eq!(
        next(Outcome::early(Ok(Done::Waiting(waiting(true))))),
        Ok(Action::requeue(RETRY))
    );
    assert_eq!(
        next(failed(ExportFailure::InvalidSpec("bad".into()))),
        Ok(Action::await_change())
    );
    assert_eq!(
        next(failed(ExportFailure::MissingCluster {
            cluster: "edge".into()
        })),
        Ok(Action::requeue(RETRY))
    );
    assert_eq!(
        next(failed(ExportFailure::Mint(
            omni_client::ManagementError::EmptyKubeconfig
        ))),
        Err("ExportFailed"),
        "handed to the backoff"
    );
}

/// The expiry metric is set from the status' `expirationTime` after the write: the kubeconfig
/// the Secret holds, which a failure leaves in place.
#[test]
fn the_expiry_metric_follows_the_kubeconfig_the_secret_holds() {
    let before = exported_before();
    let expiration =
        |e: &OmniKubeconfigExport, o: &Outcome| desired_status(e, o, at(3700)).expiration_time;
    let later = Outcome::new(
        found(),
        Ok(Done::Exported(Exported {
            hash: Some("h2".into()),
            expiration: at(7200),
            last_rotation: Some(at(3600)),
            next_rotation: at(6600),
        })),
    );
    assert_eq!(expiration(&before, &later), Some(at(7200)));
    let refused = failed(ExportFailure::MissingConnection {
        connection: "omni".into(),
    });
    assert_eq!(expiration(&before, &refused), Some(at(3600)));
    assert_eq!(expiration(&export(), &refused), None);
}
