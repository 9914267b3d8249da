//! The engine's decisions, without an API server: creation, put-back, the rollout's waves and
//! the stall, and stopping to match.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::api::common::Condition;
use crate::api::helm_release::OmniHelmReleaseStatus;
use crate::api::{OmniHelmRelease, OmniHelmReleaseSet};

fn set(greeting: &str, extra: Value) -> OmniHelmReleaseSet {
    let mut spec = json!({
        "clusterSelector": {"matchLabels": {"fleet": "edge"}},
        "template": {"chart": {"repository": "https://charts.example.com", "chart": "demo",
            "version": "1.0.0", "values": {"greeting": greeting}}},
        "credentials": {"kubeconfigSecretRef": {"name": "{{ cluster.name }}-kc"}},
    });
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        s.extend(e);
    }
    serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniHelmReleaseSet",
        "metadata": {"name": "s", "namespace": "ns", "uid": "set-uid", "generation": 1},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn cluster(name: &str, fleet: Option<&str>) -> Arc<OmniCluster> {
    let labels: serde_json::Map<String, Value> = fleet
        .map(|f| ("fleet".to_string(), json!(f)))
        .into_iter()
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"connectionRef": {"name": "omni"}, "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"}},
        }))
        .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// What the API server and the member's controller make of a created or replaced object:
/// generation `generation`, and a `Ready` of `ready` at it (`None`: not looked at yet).
fn stored(mut m: OmniHelmRelease, generation: i64, ready: Option<bool>) -> Arc<OmniHelmRelease> {
    m.metadata.uid = Some(format!(
        "{}-uid",
        m.metadata.name.clone().unwrap_or_default()
    ));
    m.metadata.generation = Some(generation);
    let observed = if ready.is_some() {
        generation
    } else {
        generation - 1
    };
    let ready = ready.unwrap_or(true);
    m.status = Some(OmniHelmReleaseStatus {
        observed_generation: Some(observed),
        conditions: vec![Condition::new(
            "Ready",
            ready.into(),
            if ready {
                Reason::HelmInstalled
            } else {
                Reason::ReconcileFailed
            },
            if ready { "installed" } else { "helm failed" },
            Some(observed),
            jiff::Timestamp::UNIX_EPOCH,
        )],
        ..OmniHelmReleaseStatus::default()
    });
    Arc::new(m)
}

fn run(
    set: &OmniHelmReleaseSet,
    clusters: &[Arc<OmniCluster>],
    members: &[Arc<OmniHelmRelease>],
) -> Plan<OmniHelmReleaseSet> {
    plan(&Inputs {
        set,
        clusters,
        members,
        exports: &[],
    })
}

fn written(plan: &Plan<OmniHelmReleaseSet>) -> Vec<(&'static str, String)> {
    plan.members
        .iter()
        .map(|s| match s {
            Step::Create(m) => ("create", m.name_any()),
            Step::Replace(m) => ("replace", m.name_any()),
            Step::Leave(m) => ("leave", m.name_any()),
            Step::Delete { name, .. } => ("delete", name.clone()),
        })
        .collect()
}

fn created(plan: Plan<OmniHelmReleaseSet>, generation: i64) -> Vec<Arc<OmniHelmRelease>> {
    plan.members
        .into_iter()
        .filter_map(|s| match s {
            Step::Create(m) | Step::Replace(m) => Some(stored(m, generation, Some(true))),
            _ => None,
        })
        .collect()
}

#[test]
fn matching_clusters_get_an_object_each_rendered_for_them() {
    let clusters = [
        cluster("a", Some("edge")),
        cluster("b", Some("edge")),
        cluster("c", None),
    ];
    let first = run(&set("hi {{ cluster.name }}", json!({})), &clusters, &[]);
    assert_eq!(
        written(&first),
        [("create", "s-a".into()), ("create", "s-b".into())]
    );
    let Step::Create(a) = &first.members[0] else {
        panic!("a create")
    };
    assert_eq!(a.spec.chart.values["greeting"], "hi a");
    assert_eq!(a.spec.kubeconfig_secret_ref.name, "a-kc");
    assert_eq!(
        a.spec.release_name.as_deref(),
        Some("s"),
        "named after the set"
    );
    assert_eq!(a.metadata.owner_references.as_ref().map(Vec::len), Some(1));
    let members = created(first, 1);
    let idle = run(
        &set("hi {{ cluster.name }}", json!({})),
        &clusters,
        &members,
    );
    assert!(idle.members.is_empty(), "nothing to do: no write");
    assert_eq!((idle.report.ready, idle.report.matched), (2, 2));
}

#[test]
fn a_template_change_rolls_out_one_wave_at_a_time_and_stalls_on_a_failure() {
    let clusters = [
        cluster("a", Some("edge")),
        cluster("b", Some("edge")),
        cluster("c", Some("edge")),
    ];
    let rollout = json!({"rollout": {"maxUnavailable": 1}});
    let v1 = set("v1", rollout.clone());
    let mut members = created(run(&v1, &clusters, &[]), 1);
    let v2 = set("v2", rollout);
    let wave = run(&v2, &clusters, &members);
    assert_eq!(written(&wave), [("replace", "s-a".into())], "one at a time");
    // a is updated and not Ready yet: nothing else moves.
    let Step::Replace(a) = wave.members[0].clone() else {
        panic!()
    };
    members[0] = stored(a.clone(), 2, None);
    assert!(run(&v2, &clusters, &members).members.is_empty());
    // a is Ready at its new generation: b's turn.
    members[0] = stored(a, 2, Some(true));
    let wave = run(&v2, &clusters, &members);
    assert_eq!(written(&wave), [("replace", "s-b".into())]);
    // b fails at its new generation: the rollout stalls, c is not touched.
    let Step::Replace(b) = wave.members[0].clone() else {
        panic!()
    };
    members[1] = stored(b, 2, Some(false));
    let stalled = run(&v2, &clusters, &members);
    assert!(stalled.members.is_empty(), "{:?}", written(&stalled));
    assert!(stalled.report.stalled);
    assert_eq!(stalled.report.failing[0].cluster, "b");
    // A hand edit of a, which is at the current template, is put back at once, stall or not.
    let mut edited = (*members[0]).clone();
    edited.spec.chart.values["greeting"] = json!("by hand");
    members[0] = Arc::new(edited);
    let put_back = run(&v2, &clusters, &members);
    assert_eq!(written(&put_back), [("replace", "s-a".into())]);
    let Step::Replace(a) = &put_back.members[0] else {
        panic!()
    };
    assert_eq!(a.spec.chart.values["greeting"], "v2");
    assert!(put_back.report.stalled, "c still waits");
}

#[test]
fn an_object_that_waits_is_pending_not_failing_and_does_not_hold_the_rollout() {
    let clusters = [cluster("a", Some("edge")), cluster("b", Some("edge"))];
    let first = set("hello", json!({}));
    let members = created(run(&first, &clusters, &[]), 1);
    // b's release waits for its cluster: Ready=False with Reconciling=True at its generation.
    let waiting = |m: &Arc<OmniHelmRelease>| {
        let mut m = (**m).clone();
        let status = m.status.get_or_insert_with(Default::default);
        status.conditions = [condition_types::READY, condition_types::RECONCILING]
            .into_iter()
            .map(|type_| {
                Condition::new(
                    type_,
                    (type_ != condition_types::READY).into(),
                    Reason::ClusterNotReady,
                    "waiting for OmniCluster b to be Ready",
                    Some(1),
                    jiff::Timestamp::UNIX_EPOCH,
                )
            })
            .collect();
        Arc::new(m)
    };
    let members = [members[0].clone(), waiting(&members[1])];
    let plan = run(&first, &clusters, &members);
    assert!(plan.report.failing.is_empty(), "{:?}", plan.report.failing);
    assert_eq!((plan.report.ready, plan.report.pending), (1, 1));
    // A template change still updates the Ready object: the waiting one stalls nothing.
    let second = set("bye", json!({"rollout": {"maxUnavailable": 1}}));
    let plan = run(&second, &clusters, &members);
    assert!(!plan.report.stalled);
    assert!(written(&plan).contains(&("replace", members[0].name_any())));
}

#[test]
fn a_cluster_that_stops_matching_is_withdrawn_or_left_and_foreign_objects_are_reported() {
    let both = [cluster("a", Some("edge")), cluster("b", Some("edge"))];
    let members = created(run(&set("x", json!({})), &both, &[]), 1);
    let only_a = [cluster("a", Some("edge")), cluster("b", None)];
    let withdraw = run(&set("x", json!({})), &only_a, &members);
    assert_eq!(written(&withdraw), [("delete", "s-b".into())]);
    let leave = run(
        &set("x", json!({"stopMatchingBehavior": "Leave"})),
        &only_a,
        &members,
    );
    assert_eq!(written(&leave), [("leave", "s-b".into())]);
    let Step::Leave(left) = &leave.members[0] else {
        panic!()
    };
    assert!(
        left.metadata
            .owner_references
            .iter()
            .flatten()
            .next()
            .is_none()
    );
    // Matching again, the set takes back what it left.
    let again = run(
        &set("x", json!({})),
        &both,
        &[members[0].clone(), Arc::new(left.clone())],
    );
    assert_eq!(written(&again), [("replace", "s-b".into())]);
    // An object of the same name it did not generate is reported, never written.
    let mut foreign = (*members[1]).clone();
    foreign.metadata.owner_references = None;
    let collision = run(
        &set("x", json!({})),
        &both,
        &[members[0].clone(), Arc::new(foreign)],
    );
    assert!(collision.members.is_empty());
    assert_eq!(collision.report.failing[0].reason, "NameCollision");
}

#[test]
fn generated_names_fit_a_label() {
    assert_eq!(generated_name(&["set", "edge-01"]), "set-edge-01");
    let long = generated_name(&[&"s".repeat(40), &"c".repeat(40)]);
    assert!(long.len() <= 63, "{long}");
    assert_ne!(long, generated_name(&[&"s".repeat(40), &"c".repeat(41)]));
}

#[test]
fn what_a_set_generates_lands_on_the_sets_shard() {
    use crate::api::keys::SHARD_LABEL;
    let clusters = [cluster("a", Some("edge"))];
    let mut sharded = set("hi", json!({}));
    sharded
        .labels_mut()
        .insert(SHARD_LABEL.into(), "shard1".into());
    let first = run(&sharded, &clusters, &[]);
    let Step::Create(a) = &first.members[0] else {
        panic!("a create")
    };
    assert_eq!(
        a.labels().get(SHARD_LABEL).map(String::as_str),
        Some("shard1")
    );
    // Stored on shard1, nothing to do; the set moved to the default shard takes its object
    // along (a replace that drops the label), and a stray label is put right.
    let members = created(first, 1);
    assert!(run(&sharded, &clusters, &members).members.is_empty());
    let unsharded = set("hi", json!({}));
    let moved = run(&unsharded, &clusters, &members);
    let Some(Step::Replace(a)) = moved.members.first() else {
        panic!("a replace: {:?}", written(&moved))
    };
    assert_eq!(a.labels().get(SHARD_LABEL), None);
}
