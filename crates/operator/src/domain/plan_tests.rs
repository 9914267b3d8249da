use std::collections::BTreeMap;

use omni_client::proto::cosi::resource::{Metadata, Resource, Spec as WireSpec};
use omni_client::proto::specs;
use omni_client::template::{DesiredResource, Plan, ResourceChange, Spec, keys, types};

use super::*;

const KEY: &[u8] = b"test key";

/// `d` as Omni holds it (running, no owner).
fn to_wire(d: &DesiredResource) -> Resource {
    Resource {
        metadata: Some(Metadata {
            namespace: "default".into(),
            r#type: d.resource_type().into(),
            id: d.id.clone(),
            phase: "running".into(),
            labels: d.labels.clone().into_iter().collect(),
            annotations: d.annotations.clone().into_iter().collect(),
            ..Metadata::default()
        }),
        spec: Some(WireSpec {
            proto_spec: d.spec.encode(),
            yaml_spec: String::new(),
        }),
    }
}

fn set(count: u32, class: &str, unlimited: bool) -> DesiredResource {
    DesiredResource {
        id: "c-w".into(),
        labels: [(keys::CLUSTER.to_string(), "c".to_string())].into(),
        annotations: BTreeMap::new(),
        spec: Spec::MachineSet(specs::MachineSetSpec {
            update_strategy: 1,
            machine_allocation: (!class.is_empty()).then(|| {
                specs::machine_set_spec::MachineAllocation {
                    name: class.into(),
                    machine_count: count,
                    allocation_type: i32::from(unlimited),
                }
            }),
            ..Default::default()
        }),
    }
}

fn plain(t: &str, id: &str) -> DesiredResource {
    let spec = match t {
        types::CONFIG_PATCH => Spec::ConfigPatch(specs::ConfigPatchSpec {
            data: "a: 1\n".into(),
            ..Default::default()
        }),
        types::KUBERNETES_MANIFEST_GROUP => {
            Spec::KubernetesManifestGroup(specs::KubernetesManifestGroupSpec::default())
        }
        types::KUBERNETES_HEALTH_CHECK => {
            Spec::KubernetesHealthCheck(specs::KubernetesHealthCheckSpec::default())
        }
        types::EXTENSIONS_CONFIGURATION => {
            Spec::ExtensionsConfiguration(specs::ExtensionsConfigurationSpec::default())
        }
        types::MACHINE_SET_NODE => Spec::MachineSetNode(specs::MachineSetNodeSpec {}),
        types::KERNEL_ARGS => Spec::KernelArgs(specs::KernelArgsSpec::default()),
        _ => Spec::Cluster(specs::ClusterSpec::default()),
    };
    DesiredResource {
        id: id.into(),
        labels: [(keys::MACHINE_SET.to_string(), "c-w".to_string())].into(),
        annotations: BTreeMap::new(),
        spec,
    }
}

fn update(before: &DesiredResource, after: &DesiredResource) -> ResourceChange {
    ResourceChange::update(&to_wire(before), &to_wire(after))
}

fn delete(r: &DesiredResource) -> ResourceChange {
    ResourceChange::delete(&to_wire(r))
}

/// Destructive: deleting a machine set, a static machine, a config patch, a manifest group or
/// the cluster; shrinking a set; a machine class changed or dropped under allocated machines.
#[test]
fn what_is_destructive() {
    let none = BTreeMap::new();
    let two = BTreeMap::from([("c-w".to_string(), 2)]);
    type Case<'a> = (
        &'a str,
        ResourceChange,
        &'a BTreeMap<String, u32>,
        Option<&'a str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "delete a static set",
            delete(&set(0, "", false)),
            &none,
            Some("deletes machine set c-w"),
        ),
        (
            "delete a set with allocated machines",
            delete(&set(2, "gpu", false)),
            &two,
            Some("deletes machine set c-w and its 2 allocated machines"),
        ),
        (
            "delete a static machine",
            delete(&plain(types::MACHINE_SET_NODE, "m-1")),
            &none,
            Some("removes machine m-1 from machine set c-w"),
        ),
        (
            "delete a config patch",
            delete(&plain(types::CONFIG_PATCH, "400-c-w-x")),
            &none,
            Some("deletes config patch 400-c-w-x"),
        ),
        (
            "delete a manifest group",
            delete(&plain(types::KUBERNETES_MANIFEST_GROUP, "200-cluster-c-m")),
            &none,
            Some("deletes manifest group 200-cluster-c-m"),
        ),
        (
            "delete the cluster",
            delete(&plain(types::CLUSTER, "c")),
            &none,
            Some("deletes Omni cluster \"c\""),
        ),
        (
            "delete a health check",
            delete(&plain(types::KUBERNETES_HEALTH_CHECK, "h")),
            &none,
            None,
        ),
        (
            "delete extensions",
            delete(&plain(types::EXTENSIONS_CONFIGURATION, "schematic-c")),
            &none,
            None,
        ),
        (
            "create a config patch",
            ResourceChange::create(&to_wire(&plain(types::CONFIG_PATCH, "p"))),
            &none,
            None,
        ),
        (
            "shrink a set",
            update(&set(3, "gpu", false), &set(2, "gpu", false)),
            &none,
            Some("shrinks machine set c-w from 3 to 2 machines"),
        ),
        (
            "grow a set",
            update(&set(2, "gpu", false), &set(3, "gpu", false)),
            &two,
            None,
        ),
        (
            "unlimited to a count",
            update(&set(0, "gpu", true), &set(5, "gpu", false)),
            &two,
            Some("shrinks machine set c-w from unlimited to 5 machines"),
        ),
        (
            "a count to unlimited",
            update(&set(5, "gpu", false), &set(0, "gpu", true)),
            &two,
            None,
        ),
        (
            "another class with machines allocated",
            update(&set(2, "gpu", false), &set(2, "cpu", false)),
            &two,
            Some(
                "changes the machine class of machine set c-w from gpu to cpu with 2 machines allocated",
            ),
        ),
        (
            "another class, none allocated",
            update(&set(2, "gpu", false), &set(2, "cpu", false)),
            &none,
            None,
        ),
        (
            "class dropped with machines allocated",
            update(&set(2, "gpu", false), &set(0, "", false)),
            &two,
            Some(
                "stops allocating machine set c-w from machine class gpu, releasing its 2 machines",
            ),
        ),
        (
            "class dropped, none allocated",
            update(&set(2, "gpu", false), &set(0, "", false)),
            &none,
            None,
        ),
        (
            "a static set gets a class",
            update(&set(0, "", false), &set(2, "gpu", false)),
            &none,
            None,
        ),
    ];
    for (name, change, allocated, want) in cases {
        assert_eq!(destruction(&change, allocated).as_deref(), want, "{name}");
    }
}

fn plan_of(changes: Vec<ResourceChange>) -> Plan {
    let mut plan = Plan::default();
    plan.changes = changes;
    plan
}

#[test]
fn the_operators_own_annotations_are_not_a_change() {
    let mut stamped = plain(types::CLUSTER, "c");
    stamped
        .annotations
        .insert("omni.texashpc.com/owner".into(), "ns/c/uid".into());
    stamped
        .annotations
        .insert(keys::MANAGED_BY_GITOPS_TOOLS.into(), "omni-operator".into());
    let bookkeeping = ["omni.texashpc.com/owner", keys::MANAGED_BY_GITOPS_TOOLS];
    let only_stamps = plan_of(vec![update(&plain(types::CLUSTER, "c"), &stamped)]);
    assert!(ChangeSet::from_plan(&only_stamps, &bookkeeping).is_empty());
    let mut more = stamped.clone();
    more.annotations.insert("team".into(), "a".into());
    let set = ChangeSet::from_plan(
        &plan_of(vec![update(&plain(types::CLUSTER, "c"), &more)]),
        &bookkeeping,
    );
    let paths: Vec<&str> = set.changes[0]
        .fields
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(paths, ["annotations.team"]);
    // A create keeps its other fields and loses the bookkeeping ones.
    let created = ChangeSet::from_plan(
        &plan_of(vec![ResourceChange::create(&to_wire(&stamped))]),
        &bookkeeping,
    );
    assert!(
        created.changes[0]
            .fields
            .iter()
            .all(|f| !f.path.contains("omni.texashpc.com") && !f.path.contains("gitops"))
    );
}

#[test]
fn the_hash_is_stable_keyed_and_covers_content() {
    let patch = |data: &str| {
        let mut p = plain(types::CONFIG_PATCH, "200-cluster-c-p");
        p.spec = Spec::ConfigPatch(specs::ConfigPatchSpec {
            data: data.into(),
            ..Default::default()
        });
        p
    };
    let set_of = |changes: Vec<ResourceChange>| ChangeSet::from_plan(&plan_of(changes), &[]);
    let a = set_of(vec![
        update(&patch("a: 1\n"), &patch("a: 2\n")),
        delete(&plain(types::KUBERNETES_MANIFEST_GROUP, "m")),
    ]);
    let again = set_of(vec![
        delete(&plain(types::KUBERNETES_MANIFEST_GROUP, "m")),
        update(&patch("a: 1\n"), &patch("a: 2\n")),
    ]);
    assert_eq!(a.hash(KEY).len(), 64);
    assert_eq!(a.hash(KEY), a.hash(KEY), "same plan, same hash");
    assert_eq!(a.hash(KEY), again.hash(KEY), "order does not matter");
    let other_content = set_of(vec![
        update(&patch("a: 1\n"), &patch("a: 3\n")),
        delete(&plain(types::KUBERNETES_MANIFEST_GROUP, "m")),
    ]);
    assert_ne!(
        a.hash(KEY),
        other_content.hash(KEY),
        "same size, other content"
    );
    assert_ne!(a.hash(KEY), a.hash(b"another key"));
    assert_ne!(
        ChangeSet::deletion("c", false).hash(KEY),
        ChangeSet::deletion("c", true).hash(KEY)
    );
}

#[test]
fn the_status_is_bounded_and_summed_up() {
    let mut changes = Vec::new();
    for i in 0..150 {
        changes.push(ResourceChange::create(&to_wire(&plain(
            types::CONFIG_PATCH,
            &format!("p{i:03}"),
        ))));
    }
    changes.push(update(&set(3, "gpu", false), &set(2, "gpu", false)));
    let set = ChangeSet::from_plan(&plan_of(changes), &[]);
    assert_eq!(set.summary(), "150 to create, 1 to update (destructive)");
    let status = set.status("h", 7, Some("old"));
    assert_eq!(status.changes.len(), 100);
    assert_eq!(status.omitted_changes, 51);
    assert_eq!(status.generation, 7);
    assert_eq!(status.ignored_approval.as_deref(), Some("old"));
    assert_eq!(
        status.counts,
        vec![
            PlanCount {
                type_: "ConfigPatches".into(),
                create: 150,
                update: 0,
                delete: 0
            },
            PlanCount {
                type_: "MachineSets".into(),
                create: 0,
                update: 1,
                delete: 0
            },
        ]
    );
    assert_eq!(
        status.destructive_changes,
        ["shrinks machine set c-w from 3 to 2 machines"]
    );
    let data = status.changes[0]
        .fields
        .iter()
        .find(|f| f.path == "spec.data");
    assert_eq!(data.and_then(|f| f.to.as_deref()), Some("<5 bytes>"));
    assert_eq!(ChangeSet::default().summary(), "no changes");
    assert_eq!(cut("é".repeat(200)).len(), 256 + '…'.len_utf8());
}

#[test]
fn apply_or_hold() {
    let destructive = ChangeSet::from_plan(
        &plan_of(vec![delete(&plain(types::CONFIG_PATCH, "p"))]),
        &[],
    );
    let harmless = ChangeSet::from_plan(
        &plan_of(vec![ResourceChange::create(&to_wire(&plain(
            types::CONFIG_PATCH,
            "p",
        )))]),
        &[],
    );
    let empty = ChangeSet::default();
    use ChangeMode::{Apply, Plan as PlanMode};
    use DestructivePolicy::{Allow, RequireApproval};
    let apply = Decision::Apply { approved: false };
    let approved = Decision::Apply { approved: true };
    // (name, mode, policy, adopting, nothing to write, change set, approval, decision)
    type Case<'a> = (
        &'a str,
        ChangeMode,
        DestructivePolicy,
        bool,
        bool,
        &'a ChangeSet,
        Option<&'a str>,
        Decision,
    );
    #[rustfmt::skip]
    let cases: Vec<Case<'_>> = vec![
        ("nothing to write", Apply, RequireApproval, false, true, &empty, None, Decision::InSync),
        ("today's behaviour", Apply, Allow, false, false, &destructive, None, apply),
        ("harmless under RequireApproval", Apply, RequireApproval, false, false, &harmless, None, apply),
        ("destructive held", Apply, RequireApproval, false, false, &destructive, None, Decision::Hold(Hold::ApprovalRequired)),
        ("stale approval", Apply, RequireApproval, false, false, &destructive, Some("old"), Decision::Hold(Hold::ApprovalRequired)),
        ("approved", Apply, RequireApproval, false, false, &destructive, Some("H"), approved),
        ("plan mode", PlanMode, Allow, false, false, &harmless, Some("H"), Decision::Hold(Hold::PlanOnly)),
        ("plan mode, only bookkeeping", PlanMode, Allow, false, false, &empty, None, Decision::InSync),
        ("adopting, matching: stamp", Apply, RequireApproval, true, false, &empty, None, apply),
        ("adopting, differing", Apply, Allow, true, false, &harmless, None, Decision::Hold(Hold::AdoptionDiff)),
        ("adopting, approved", Apply, Allow, true, false, &destructive, Some("H"), approved),
        ("adopting in plan mode", PlanMode, Allow, true, false, &harmless, None, Decision::Hold(Hold::PlanOnly)),
    ];
    for (name, mode, destructive_policy, adopting, nothing_to_write, changes, approval, want) in
        cases
    {
        let got = decide(&Situation {
            mode,
            destructive_policy,
            adopting,
            nothing_to_write,
            changes,
            hash: "H",
            approval,
        });
        assert_eq!(got, want, "{name}");
    }
}

/// The gate skips judging the change set for mode `Apply`, `Allow`, no adoption: `decide`
/// applies every plan there, destructive or not, approved or not.
#[test]
fn without_a_guard_every_plan_is_applied() {
    let destructive = ChangeSet::from_plan(
        &plan_of(vec![delete(&plain(types::CONFIG_PATCH, "p"))]),
        &[],
    );
    for changes in [&destructive, &ChangeSet::default()] {
        for approval in [None, Some("H"), Some("old")] {
            let got = decide(&Situation {
                mode: ChangeMode::Apply,
                destructive_policy: DestructivePolicy::Allow,
                adopting: false,
                nothing_to_write: false,
                changes,
                hash: "H",
                approval,
            });
            assert_eq!(got, Decision::Apply { approved: false });
        }
    }
}

#[test]
fn held_messages_say_why_and_how_to_approve() {
    let set = ChangeSet::from_plan(
        &plan_of(vec![
            delete(&plain(types::CONFIG_PATCH, "p1")),
            delete(&plain(types::CONFIG_PATCH, "p2")),
            delete(&plain(types::CONFIG_PATCH, "p3")),
            delete(&plain(types::CONFIG_PATCH, "p4")),
        ]),
        &[],
    );
    assert_eq!(
        hold_message(Hold::ApprovalRequired, &set, "abc", Some("old"), "prod"),
        "the plan for Omni cluster \"prod\" (4 to delete (destructive)) is destructive: deletes config patch p1; deletes config patch p2; deletes config patch p3; and 1 more (status.plan.destructiveChanges). Nothing of it is applied, its other changes neither, until the annotation omni.texashpc.com/approve-plan=abc approves it; the annotation's value \"old\" approves another plan and was ignored"
    );
    assert!(
        hold_message(Hold::PlanOnly, &set, "abc", None, "prod")
            .starts_with("spec.changePolicy.mode is Plan: 4 to delete (destructive) planned")
    );
    assert!(hold_message(Hold::AdoptionDiff, &set, "abc", None, "prod").contains("until the manifests match it or the annotation omni.texashpc.com/approve-plan=abc approves the plan; what it destroys: deletes"));
    assert_eq!(ignored(Some("x"), "y"), Some("x"));
    assert_eq!(ignored(Some("y"), "y"), None);
    for hold in [Hold::PlanOnly, Hold::ApprovalRequired, Hold::AdoptionDiff] {
        assert!(hold.reason().awaits_a_person(), "{hold:?}");
    }
    assert!(!Reason::SyncFailed.awaits_a_person());
}

/// The trace of an applied change set counts every write per resource type, the operator's own
/// bookkeeping included (it is written too).
#[test]
fn what_was_written_is_counted_per_type() {
    let cluster = plain(types::CLUSTER, "c");
    let mut stamped = cluster.clone();
    stamped
        .annotations
        .insert("omni.texashpc.com/owner".into(), "ns/c/uid".into());
    let patch = |id: &str| plain(types::CONFIG_PATCH, id);
    let plan = plan_of(vec![
        update(&cluster, &stamped),
        ResourceChange::create(&to_wire(&patch("p1"))),
        ResourceChange::create(&to_wire(&patch("p2"))),
        delete(&patch("p0")),
    ]);
    let counts = written(&plan);
    assert_eq!(
        counts_text(&counts),
        "Clusters: 1 updated; ConfigPatches: 2 created, 1 deleted"
    );
    assert_eq!(counts_text(&written(&Plan::default())), "nothing");
}
