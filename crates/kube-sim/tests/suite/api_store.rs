//! Conformance of the store's metadata semantics and Status shapes.

use kube_sim::error::ApiError;
use kube_sim::store::{Preconditions, Store};
use serde_json::json;

fn cm(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "data": {"a": "1"}})
}

#[test]
fn standard_namespaces_exist_at_start() {
    let s = Store::new(100);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(s.get_object("", "namespaces", None, ns).is_some(), "{ns}");
    }
}

#[test]
fn create_fills_metadata_and_refuses_duplicates_and_missing_namespace() {
    let s = Store::new(100);
    let o = s
        .create("", "configmaps", Some("default"), cm("x"))
        .unwrap();
    assert_eq!(o["kind"], "ConfigMap");
    // ConfigMaps have no generation on the real server; kinds with a spec do.
    assert!(o["metadata"].get("generation").is_none(), "{o}");
    let d = s
        .create("apps", "deployments", Some("default"), cm("d"))
        .unwrap();
    assert_eq!(d["metadata"]["generation"], 1);
    assert!(o["metadata"]["uid"].as_str().unwrap().len() == 36);
    let err = s
        .create("", "configmaps", Some("default"), cm("x"))
        .unwrap_err();
    assert_eq!(err.to_status()["reason"], "AlreadyExists");
    assert_eq!(err.code, 409);
    let err = s
        .create("", "configmaps", Some("nope"), cm("x"))
        .unwrap_err();
    assert_eq!(err, ApiError::not_found("", "namespaces", "nope"));
    let g = s
        .create(
            "",
            "configmaps",
            Some("default"),
            json!({"metadata": {"generateName": "gen-"}}),
        )
        .unwrap();
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("gen-"));
}

#[test]
fn stale_update_conflicts_with_the_real_message_and_generation_tracks_spec() {
    let s = Store::new(100);
    let o = s
        .create(
            "apps",
            "deployments",
            Some("default"),
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}}),
        )
        .unwrap();
    let mut newer = o.clone();
    newer["spec"]["replicas"] = json!(2);
    let newer = s
        .update("apps", "deployments", Some("default"), "d", newer)
        .unwrap();
    assert_eq!(newer["metadata"]["generation"], 2);
    let err = s
        .update("apps", "deployments", Some("default"), "d", o)
        .unwrap_err();
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on deployments.apps \"d\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let mut labelled = newer.clone();
    labelled["metadata"]["labels"] = json!({"a": "b"});
    let labelled = s
        .update("apps", "deployments", Some("default"), "d", labelled)
        .unwrap();
    assert_eq!(labelled["metadata"]["generation"], 2);
}

#[test]
fn finalizers_hold_deletion_and_cannot_be_added_while_deleting() {
    let s = Store::new(100);
    s.create(
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "f", "finalizers": ["a"]}}),
    )
    .unwrap();
    let (o, gone) = s
        .delete(
            "",
            "configmaps",
            Some("default"),
            "f",
            &Preconditions::default(),
        )
        .unwrap();
    assert!(!gone);
    assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 0);
    let mut more = o.clone();
    more["metadata"]["finalizers"] = json!(["a", "b"]);
    let err = s
        .update("", "configmaps", Some("default"), "f", more)
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert_eq!(
        err.to_status()["details"]["causes"][0]["message"],
        "Forbidden: no new finalizers can be added if the object is being deleted"
    );
    let mut none = o;
    none["metadata"]["finalizers"] = json!([]);
    s.update("", "configmaps", Some("default"), "f", none)
        .unwrap();
    assert!(
        s.get_object("", "configmaps", Some("default"), "f")
            .is_none()
    );
}

#[test]
fn marking_an_object_as_deleting_bumps_its_generation_once() {
    let s = Store::new(100);
    s.create(
        "apps",
        "deployments",
        Some("default"),
        json!({"metadata": {"name": "held", "finalizers": ["example.com/cleanup"]}}),
    )
    .unwrap();
    let delete = || {
        s.delete(
            "apps",
            "deployments",
            Some("default"),
            "held",
            &Preconditions::default(),
        )
        .unwrap()
    };
    let (deleting, gone) = delete();
    assert!(!gone);
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(deleting["metadata"]["generation"], 2);
    let stored = s
        .get_object("apps", "deployments", Some("default"), "held")
        .unwrap();
    assert_eq!(stored["metadata"]["generation"], 2);
    // Deleting again changes nothing: same generation, same resourceVersion.
    let (again, _) = delete();
    assert_eq!(again["metadata"]["generation"], 2);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        deleting["metadata"]["resourceVersion"]
    );
}

#[test]
fn watch_history_resumes_after_a_version_and_expires_when_too_old() {
    let s = Store::new(3);
    let start = s.resource_version();
    for i in 0..5 {
        s.create("", "configmaps", Some("default"), cm(&format!("c{i}")))
            .unwrap();
    }
    let err = s.history_since(start).err().unwrap();
    assert_eq!(err.code, 410);
    assert_eq!(err.to_status()["reason"], "Expired");
    let (events, _rx) = s.history_since(s.resource_version() - 2).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].object["metadata"]["name"], "c4");
}

#[test]
fn delete_preconditions_and_terminating_namespace() {
    let s = Store::new(100);
    s.create("", "namespaces", None, json!({"metadata": {"name": "t"}}))
        .unwrap();
    s.create("", "configmaps", Some("t"), cm("c")).unwrap();
    let pre = Preconditions {
        uid: Some("wrong".into()),
        resource_version: None,
    };
    assert_eq!(
        s.delete("", "configmaps", Some("t"), "c", &pre)
            .unwrap_err()
            .code,
        409
    );
    let (ns, gone) = s
        .delete("", "namespaces", None, "t", &Preconditions::default())
        .unwrap();
    assert!(!gone);
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(
        s.create("", "configmaps", Some("t"), cm("d"))
            .unwrap_err()
            .code,
        403
    );
    assert!(!s.finish_namespace("t"));
    s.delete("", "configmaps", Some("t"), "c", &Preconditions::default())
        .unwrap();
    assert!(s.finish_namespace("t"));
}
