//! Plan, guard and adopt, end to end against omni-sim: a destructive plan held until its hash
//! is approved (a stale approval ignored and reported), observe-only clusters that never write
//! to Omni, what counts as destructive, adoption that plans before it writes, `omni export`
//! round trips (the shipped samples and a cluster made by a template sync of a hand-written
//! template), `omni template diff`/`sync` on a cluster the operator manages, and what a pass
//! costs in Omni calls and writes with and without a held plan.

use crate::support;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kube::Resource as _;
use omni_client::template::{
    BackendApi, FileResolver, Spec, SyncOptions, Template, apply, plan_sync_for,
};
use omni_client::{Client, ClientConfig};
use omni_operator::api::plan::PlanStatus;
use omni_operator::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};
use omni_operator::cli::{omni_export, omni_template};
use omni_sim::types::ty;
use omni_sim::{AppliedWrites, Role};
use serde_json::{Value, json};
use support::conditions::{is_false, is_true};
use support::env::{Env, NS, SAMPLE_CLUSTER, eventually};

const CP: &str = "11111111-1111-4111-8111-111111111111";
const W1: &str = "22222222-2222-4222-8222-222222222222";
const W2: &str = "33333333-3333-4333-8333-333333333333";
const APPROVE: &str = "omni.texashpc.com/approve-plan";
const OWNER: &str = "omni.texashpc.com/owner";
const GITOPS: &str = "omni.sidero.dev/managed-by-gitops-tools";

/// The plan `c` records, or a panic naming what it reports instead.
#[track_caller]
fn plan(c: &OmniCluster) -> PlanStatus {
    c.status
        .as_ref()
        .and_then(|s| s.plan.clone())
        .unwrap_or_else(|| panic!("no status.plan: {:?}", c.status))
}

fn ready_message(c: &OmniCluster) -> String {
    support::condition(c, "Ready")
        .map(|c| c.2)
        .unwrap_or_default()
}

/// A config patch's stored content.
fn patch_data(env: &Env, id: &str) -> Option<String> {
    let r = env.omni.get(ty::CONFIG_PATCH, id)?;
    match Spec::decode(ty::CONFIG_PATCH, &r.spec?.proto_spec) {
        Ok(Spec::ConfigPatch(p)) => Some(p.data),
        _ => None,
    }
}

/// Writes by (verb, type, ID) made since `before`.
fn writes_since(env: &Env, before: &AppliedWrites) -> Vec<(String, String, String)> {
    env.omni
        .applied_writes()
        .into_iter()
        .filter(|(k, n)| before.get(k).is_none_or(|b| b < n))
        .map(|(k, _)| k)
        .collect()
}

/// Waits until `name` has been reconciled `passes` more times and asserts that neither its
/// status nor Omni was written meanwhile.
async fn assert_quiet(env: &Env, name: &str, passes: u64) {
    let kube = env
        .kube
        .hooks()
        .writes_to_object("omniclusters", Some(NS), name);
    let omni = env.omni.writes_total();
    let start = env.reconciles("OmniCluster");
    eventually("more OmniCluster reconciles", || {
        env.reconciles("OmniCluster") >= start + passes
    })
    .await;
    assert_eq!(
        env.kube
            .hooks()
            .writes_to_object("omniclusters", Some(NS), name)
            - kube,
        0,
        "{name} rewrote its status"
    );
    assert_eq!(env.omni.writes_total() - omni, 0, "Omni was written");
}

/// A service-account key file for the CLI commands, and the connection flags using it.
fn cli_connection(env: &Env, dir: &tempfile::TempDir) -> omni_template::Connection {
    let path = dir.path().join("key");
    std::fs::write(&path, &env.key).unwrap_or_else(|e| panic!("{e}"));
    omni_template::Connection {
        endpoint: env.omni.endpoint().to_string(),
        key_file: Some(path),
        insecure_skip_tls_verify: false,
        timeout: "1m".into(),
    }
}

/// `omni-operator omni export --cluster NAME -n NS --connection CONN`'s output.
async fn export(env: &Env, cluster: &str, connection: &str) -> String {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    let code = omni_export::run_with_output(
        omni_export::Args {
            cluster: cluster.into(),
            namespace: NS.into(),
            connection: connection.into(),
            name: None,
            omni_api: omni_template::OmniApi::Auto,
            omni: cli_connection(env, &dir),
        },
        &mut out,
    )
    .await
    .unwrap_or_else(|e| panic!("omni export: {e:#}"));
    assert_eq!(code, ExitCode::SUCCESS);
    String::from_utf8(out).unwrap_or_default()
}

/// The documents of a multi-document YAML stream.
fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("{e}\n{yaml}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Syncs a hand-written template into omni-sim the way Omni's own template sync does (no
/// operator, no stamp), translated for `api`.
async fn template_sync(env: &Env, yaml: &str, api: BackendApi) {
    let key = env
        .omni
        .register_service_account("gitops-admin", Role::Operator)
        .unwrap_or_else(|e| panic!("{e}"));
    let config =
        ClientConfig::from_encoded_key(env.omni.endpoint(), &key).unwrap_or_else(|e| panic!("{e}"));
    let client = Client::new(config).unwrap_or_else(|e| panic!("{e}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let state = client.template_state(deadline);
    let template = Template::parse(yaml).unwrap_or_else(|e| panic!("{e}"));
    let options = SyncOptions {
        api,
        ..SyncOptions::default()
    };
    let files = FileResolver::disabled("no files");
    let plan = plan_sync_for(&state, &template, &files, &options)
        .await
        .unwrap_or_else(|e| panic!("plan: {e}"));
    apply(&state, &plan, deadline, &mut Vec::new())
        .await
        .unwrap_or_else(|e| panic!("sync: {e}"));
}

/// Every Omni resource of cluster `name` as a user sees it (labels, annotations without the
/// operator's bookkeeping, phase, spec), by type and ID.
fn user_view(env: &Env, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in [
        ty::CLUSTER,
        ty::MACHINE_SET,
        ty::MACHINE_SET_NODE,
        ty::CONFIG_PATCH,
        ty::EXTENSIONS_CONFIGURATION,
        "KubernetesManifestGroups.omni.sidero.dev",
        "KubernetesHealthChecks.omni.sidero.dev",
        "KernelArgs.omni.sidero.dev",
        "MachineInstallDiskConfigs.omni.sidero.dev",
    ] {
        for r in env.omni.list(t) {
            let m = r.metadata.clone().unwrap_or_default();
            let ours = m.id == name
                || m.labels.get("omni.sidero.dev/cluster").map(String::as_str) == Some(name)
                || [CP, W1, W2].contains(&m.id.as_str());
            if !ours || !m.owner.is_empty() {
                continue;
            }
            let labels: std::collections::BTreeMap<_, _> = m.labels.into_iter().collect();
            let annotations: std::collections::BTreeMap<_, _> = m
                .annotations
                .into_iter()
                .filter(|(k, _)| k != OWNER && k != GITOPS)
                .collect();
            out.push(format!(
                "{t}({}) {} {labels:?} {annotations:?} {:?}",
                m.id,
                m.phase,
                r.spec.map(|s| s.proto_spec).unwrap_or_default()
            ));
        }
    }
    out.sort();
    out
}

/// Waits until OmniCluster `name` has adopted its Omni cluster (`Ready`, no plan pending) and
/// asserts that Omni saw only the operator's bookkeeping since `written`: updates, and every
/// resource as a user sees it as `before`.
async fn assert_adopted_unchanged(
    env: &Env,
    name: &str,
    before: &[String],
    written: &AppliedWrites,
) {
    let c = env
        .wait_cond::<OmniCluster>(name, is_true("Synced").because("Synced"))
        .await;
    assert_eq!(c.status.and_then(|s| s.plan), None);
    assert_eq!(user_view(env, name), before, "adoption changed the cluster");
    let writes = writes_since(env, written);
    assert!(
        !writes.is_empty() && writes.iter().all(|(verb, _, _)| verb == "update"),
        "only the operator's bookkeeping is written: {writes:?}"
    );
}

/// Removing a config patch under `RequireApproval` is held, all of it, until the annotation
/// carries the current plan's hash; a hash of an earlier plan is ignored and says so; one Event
/// when held, one when the approved plan is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_plan_is_held_until_its_hash_is_approved() {
    let env = Env::builder().start().await;
    env.connect_machine(CP);
    let hostname = |h: &str| json!({"machine": {"network": {"hostname": h}}});
    env.cluster(
        "guarded",
        CP,
        json!({
            "changePolicy": {"destructive": "RequireApproval"},
            "patches": [
                {"name": "keep", "inline": hostname("a")},
                {"name": "drop", "inline": {"machine": {"sysctls": {"a": "1"}}}},
            ],
        }),
    )
    .await;
    env.wait_cond::<OmniCluster>("guarded", is_true("Synced").because("Synced"))
        .await;
    let (keep, drop) = ("200-cluster-guarded-keep", "201-cluster-guarded-drop");
    let kept = patch_data(&env, keep);
    assert!(patch_data(&env, drop).is_some());
    let omni_writes = env.omni.writes_total();

    // Removing one patch and changing the other: held, the harmless change included.
    env.patch_spec::<OmniCluster>(
        "guarded",
        json!({"patches": [{"name": "keep", "inline": hostname("b")}]}),
    )
    .await;
    let held = env
        .wait_cond::<OmniCluster>("guarded", is_false("Ready").because("ApprovalRequired"))
        .await;
    support::conditions::assert_cond(&held, is_false("Synced").because("ApprovalRequired"));
    let first = plan(&held);
    assert_eq!(first.summary, "1 to update, 1 to delete (destructive)");
    assert!(first.destructive);
    assert_eq!(
        first.destructive_changes,
        [format!("deletes config patch {drop}")]
    );
    assert_eq!(
        first.generation,
        held.metadata.generation.unwrap_or_default()
    );
    assert_eq!(first.hash.len(), 64);
    let message = ready_message(&held);
    assert!(
        message.contains("Nothing of it is applied, its other changes neither")
            && message.contains(&format!("{APPROVE}={}", first.hash)),
        "{message}"
    );
    let fields: Vec<String> = first
        .changes
        .iter()
        .flat_map(|c| c.fields.iter().map(|f| f.path.clone()))
        .collect();
    assert_eq!(
        fields,
        ["spec.data"],
        "the update shows its field, content by size: {first:?}"
    );
    assert_quiet(&env, "guarded", 3).await;
    assert_eq!(
        patch_data(&env, keep),
        kept,
        "the harmless change is held too"
    );
    assert!(patch_data(&env, drop).is_some());

    // Another edit: another plan, and an approval of the first one is stale.
    env.patch_spec::<OmniCluster>(
        "guarded",
        json!({"patches": [{"name": "keep", "inline": hostname("c")}]}),
    )
    .await;
    let replanned = env
        .wait::<OmniCluster>("guarded", "a new plan", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.plan.as_ref())
                .is_some_and(|p| p.hash != first.hash)
        })
        .await;
    let second = plan(&replanned);
    env.patch::<OmniCluster>(
        "guarded",
        json!({"metadata": {"annotations": {APPROVE: first.hash}}}),
    )
    .await;
    let stale = env
        .wait::<OmniCluster>("guarded", "the stale approval reported", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.plan.as_ref())
                .is_some_and(|p| p.ignored_approval.as_deref() == Some(first.hash.as_str()))
        })
        .await;
    support::conditions::assert_cond(&stale, is_false("Ready").because("ApprovalRequired"));
    assert!(
        ready_message(&stale).contains("approves another plan and was ignored"),
        "{}",
        ready_message(&stale)
    );
    assert_eq!(plan(&stale).hash, second.hash);
    assert_quiet(&env, "guarded", 2).await;
    assert_eq!(
        env.omni.writes_total(),
        omni_writes,
        "nothing reached Omni while held"
    );
    assert!(patch_data(&env, drop).is_some());

    // The current hash: all of it is applied.
    env.patch::<OmniCluster>(
        "guarded",
        json!({"metadata": {"annotations": {APPROVE: second.hash}}}),
    )
    .await;
    let applied = env
        .wait_cond::<OmniCluster>("guarded", is_true("Synced").because("Synced"))
        .await;
    assert_eq!(applied.status.as_ref().and_then(|s| s.plan.clone()), None);
    assert!(
        patch_data(&env, drop).is_none(),
        "the approved deletion ran"
    );
    assert!(
        patch_data(&env, keep).is_some_and(|d| d.contains("hostname: c")),
        "{:?}",
        patch_data(&env, keep)
    );
    // The Event follows the status write.
    support::env::eventually_within("the PlanApplied Event", support::WAIT, async || {
        env.events_of("guarded")
            .await
            .iter()
            .any(|(reason, _)| reason == "PlanApplied")
            .then_some(())
    })
    .await;
    let events = env.events().await;
    let about = |reason: &str| {
        events
            .iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("guarded")
                    && e.reason.as_deref() == Some(reason)
            })
            .collect::<Vec<_>>()
    };
    let holds = about("ApprovalRequired");
    assert_eq!(holds.len(), 1, "one Event when held: {holds:?}");
    assert_eq!(
        holds[0].type_.as_deref(),
        Some("Normal"),
        "waiting is not a warning"
    );
    let applied_events = about("PlanApplied");
    assert_eq!(applied_events.len(), 1, "{applied_events:?}");
    assert!(
        applied_events[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(&second.hash),
        "{applied_events:?}"
    );

    // Deleting the OmniCluster would delete the Omni cluster: held too, until approved.
    env.delete::<OmniCluster>("guarded").await;
    let c = env
        .wait_cond::<OmniCluster>("guarded", is_false("Ready").because("ApprovalRequired"))
        .await;
    let deletion = plan(&c);
    assert_eq!(deletion.summary, "1 to delete (destructive)");
    assert_eq!(
        deletion.destructive_changes,
        ["deletes Omni cluster \"guarded\" with its machine sets, config patches and manifests"]
    );
    assert_eq!(
        deletion.ignored_approval.as_deref(),
        Some(second.hash.as_str())
    );
    assert_quiet(&env, "guarded", 2).await;
    assert!(env.omni.get(ty::CLUSTER, "guarded").is_some());
    env.patch::<OmniCluster>(
        "guarded",
        json!({"metadata": {"annotations": {APPROVE: deletion.hash}}}),
    )
    .await;
    env.wait_gone::<OmniCluster>("guarded").await;
    assert!(
        env.omni.get(ty::CLUSTER, "guarded").is_none(),
        "the approved deletion ran"
    );
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

/// `mode: Plan` computes and shows the plan, follows spec edits, and never writes to Omni;
/// switching to `Apply` applies it; a deletion in mode `Plan` is held too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_shows_the_plan_and_never_writes_to_omni() {
    let env = Env::builder().start().await;
    env.connect_machine(CP);
    let omni_writes = env.omni.writes_total();
    env.cluster("observer", CP, json!({"changePolicy": {"mode": "Plan"}}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("observer", is_false("Ready").because("PlanOnly"))
        .await;
    let first = plan(&c);
    let count = |p: &PlanStatus, t: &str| {
        p.counts
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.create, c.update, c.delete))
    };
    assert_eq!(count(&first, "Clusters"), Some((1, 0, 0)), "{first:?}");
    assert_eq!(count(&first, "MachineSets"), Some((1, 0, 0)));
    assert_eq!(count(&first, "MachineSetNodes"), Some((1, 0, 0)));
    assert!(!first.destructive);
    assert!(
        ready_message(&c).starts_with("spec.changePolicy.mode is Plan:"),
        "{}",
        ready_message(&c)
    );
    assert!(env.omni.get(ty::CLUSTER, "observer").is_none());

    // A spec edit: the plan follows it.
    let edited = env
        .patch_spec::<OmniCluster>(
            "observer",
            json!({"patches": [{"name": "p", "inline": {"machine": {}}}]}),
        )
        .await;
    let generation = edited.metadata.generation.unwrap_or_default();
    let c = env
        .wait::<OmniCluster>("observer", "the plan of the edit", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.plan.as_ref())
                .is_some_and(|p| p.generation == generation)
        })
        .await;
    assert_eq!(count(&plan(&c), "ConfigPatches"), Some((1, 0, 0)));
    assert_ne!(plan(&c).hash, first.hash);
    assert_quiet(&env, "observer", 3).await;
    assert_eq!(
        env.omni.writes_total(),
        omni_writes,
        "mode Plan wrote to Omni"
    );

    // Apply: the plan is applied and cleared.
    env.patch_spec::<OmniCluster>("observer", json!({"changePolicy": {"mode": "Apply"}}))
        .await;
    let c = env
        .wait_cond::<OmniCluster>("observer", is_true("Synced").because("Synced"))
        .await;
    assert_eq!(c.status.and_then(|s| s.plan), None);
    assert!(env.omni.get(ty::CLUSTER, "observer").is_some());

    // An observe-only cluster that Omni never had goes at once: there is nothing to delete.
    env.cluster(
        "never-applied",
        W1,
        json!({"changePolicy": {"mode": "Plan"}}),
    )
    .await;
    env.wait_cond::<OmniCluster>("never-applied", is_false("Ready").because("PlanOnly"))
        .await;
    env.delete::<OmniCluster>("never-applied").await;
    env.wait_gone::<OmniCluster>("never-applied").await;

    // Back to Plan, then deleted: the Omni cluster stays until the mode or the policy changes.
    env.patch_spec::<OmniCluster>("observer", json!({"changePolicy": {"mode": "Plan"}}))
        .await;
    let omni_writes = env.omni.writes_total();
    env.delete::<OmniCluster>("observer").await;
    let c = env
        .wait_cond::<OmniCluster>("observer", is_false("Ready").because("PlanOnly"))
        .await;
    assert_eq!(plan(&c).summary, "1 to delete (destructive)");
    assert_quiet(&env, "observer", 2).await;
    assert_eq!(env.omni.writes_total(), omni_writes);
    assert!(env.omni.get(ty::CLUSTER, "observer").is_some());
    env.patch_spec::<OmniCluster>("observer", json!({"deletePolicy": {"orphan": true}}))
        .await;
    env.wait_gone::<OmniCluster>("observer").await;
    assert!(env.omni.get(ty::CLUSTER, "observer").is_some(), "orphaned");
    env.shutdown().await;
}

/// Shrinking a machine set is destructive, growing it is not (here under the operator's
/// `--default-destructive-policy RequireApproval`, the cluster choosing none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrinking_a_machine_set_is_destructive_and_growing_is_not() {
    let env = Env::builder().require_approval_by_default().start().await;
    env.omni.add_machine_class("gpu", &["pool=gpu"]);
    env.connect_machine(CP);
    env.cluster("scaled", CP, json!({})).await;
    let _: OmniWorkers = env
        .create_spec(
            "scaled-gpu",
            json!({"clusterRef": {"name": "scaled"}, "machineClass": {"name": "gpu", "size": 2}}),
        )
        .await;
    let count = |env: &Env| {
        env.omni
            .get(ty::MACHINE_SET, "scaled-scaled-gpu")
            .and_then(|r| Spec::decode(ty::MACHINE_SET, &r.spec?.proto_spec).ok())
            .and_then(|s| match s {
                Spec::MachineSet(s) => s.machine_allocation.map(|a| a.machine_count),
                _ => None,
            })
    };
    eventually("the set in Omni", || count(&env) == Some(2)).await;
    env.wait_cond::<OmniCluster>("scaled", is_true("Synced").because("Synced"))
        .await;

    // Growing: applied at once.
    env.patch_spec::<OmniWorkers>(
        "scaled-gpu",
        json!({"machineClass": {"name": "gpu", "size": 3}}),
    )
    .await;
    eventually("the set grown in Omni", || count(&env) == Some(3)).await;
    let c = env
        .wait_cond::<OmniCluster>("scaled", is_true("Synced").because("Synced"))
        .await;
    assert_eq!(c.status.and_then(|s| s.plan), None);
    assert!(
        !env.events_of("scaled")
            .await
            .iter()
            .any(|(r, _)| r == "ApprovalRequired"),
        "growing was held"
    );

    // Shrinking: held.
    env.patch_spec::<OmniWorkers>(
        "scaled-gpu",
        json!({"machineClass": {"name": "gpu", "size": 1}}),
    )
    .await;
    let c = env
        .wait_cond::<OmniCluster>("scaled", is_false("Ready").because("ApprovalRequired"))
        .await;
    assert_eq!(
        plan(&c).destructive_changes,
        ["shrinks machine set scaled-scaled-gpu from 3 to 1 machines"]
    );
    let change = &plan(&c).changes[0];
    assert_eq!(
        (change.action.as_str(), change.type_.as_str()),
        ("update", "MachineSets")
    );
    assert!(
        change
            .fields
            .iter()
            .any(|f| f.path == "spec.machineAllocation.machineCount"
                && f.from.as_deref() == Some("3")
                && f.to.as_deref() == Some("1")),
        "{change:?}"
    );
    assert_quiet(&env, "scaled", 2).await;
    assert_eq!(count(&env), Some(3));
    env.shutdown().await;
}

/// Adopting an Omni cluster that differs from the manifests plans first and holds with
/// `AdoptionDiff`, writing nothing; fixing the manifests lets it proceed (stamping only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopting_a_differing_cluster_holds_until_the_manifests_match() {
    let env = Env::builder().start().await;
    env.connect_machine(CP);
    template_sync(
        &env,
        &format!(
            "kind: Cluster\nname: adoptee\nkubernetes: {{version: v1.35.0}}\ntalos: {{version: v1.13.2}}\npatches:\n  - name: p\n    inline: {{machine: {{sysctls: {{a: \"1\"}}}}}}\n---\nkind: ControlPlane\nmachines: [{CP}]\n"
        ),
        BackendApi::V2,
    )
    .await;
    let before = user_view(&env, "adoptee");
    let omni_writes = env.omni.writes_total();
    let _: OmniCluster = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "adoptee", "namespace": NS,
                         "annotations": {"omni.texashpc.com/adopt": "true"}},
            "spec": {"connectionRef": {"name": "omni"}, "kubernetes": {"version": "v1.35.0"},
                     "talos": {"version": "v1.13.2"}, "syncInterval": "1s"},
        }))
        .await;
    let _: OmniControlPlane = env
        .create_spec(
            "adoptee-cp",
            json!({"clusterRef": {"name": "adoptee"}, "machines": [CP]}),
        )
        .await;
    let c = env
        .wait_cond::<OmniCluster>("adoptee", is_false("Ready").because("AdoptionDiff"))
        .await;
    assert_eq!(plan(&c).summary, "1 to delete (destructive)");
    assert_eq!(
        plan(&c).destructive_changes,
        ["deletes config patch 200-cluster-adoptee-p"]
    );
    assert!(
        ready_message(&c).contains("Nothing is written to Omni until the manifests match it"),
        "{}",
        ready_message(&c)
    );
    assert_quiet(&env, "adoptee", 2).await;
    assert_eq!(
        env.omni.writes_total(),
        omni_writes,
        "an adoption wrote before it matched"
    );
    assert_eq!(user_view(&env, "adoptee"), before);

    // The manifests now say what Omni holds: adopted, only the operator's bookkeeping written.
    let written = env.omni.applied_writes();
    env.patch_spec::<OmniCluster>(
        "adoptee",
        json!({"patches": [{"name": "p", "inline": {"machine": {"sysctls": {"a": "1"}}}}]}),
    )
    .await;
    assert_adopted_unchanged(&env, "adoptee", &before, &written).await;
    let stamp = env
        .omni
        .get(ty::CLUSTER, "adoptee")
        .and_then(|r| r.metadata)
        .and_then(|m| m.annotations.get(OWNER).cloned());
    assert!(stamp.is_some_and(|s| s.starts_with(&format!("{NS}/adoptee/"))));
    env.shutdown().await;
}

/// Each shipped sample cluster, made by the operator and orphaned, exports to manifests that
/// adopt it with an empty plan: the only write is the new owner stamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_of_each_sample_cluster_round_trips_to_an_empty_plan() {
    let env = Env::builder().without_connection().start().await;
    env.apply_samples(SAMPLE_CLUSTER, |doc| {
        if doc["kind"] == "OmniCluster" {
            doc["spec"]["deletePolicy"] = json!({"orphan": true});
        }
    })
    .await;
    let mut clusters = Vec::new();
    for file in SAMPLE_CLUSTER {
        for doc in support::sample(file) {
            if doc["kind"] == "OmniCluster" {
                clusters.push((
                    doc["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    doc["spec"]["connectionRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ));
            }
        }
    }
    assert!(!clusters.is_empty());
    for (name, connection) in &clusters {
        let c = env
            .wait::<OmniCluster>(name, "Ready with every child", |c| {
                is_true("Synced").because("Synced").holds(c)
                    && c.status.as_ref().is_some_and(|s| s.machine_refs.len() == 2)
            })
            .await;
        let before = user_view(&env, name);
        // Gone from the management cluster, kept in Omni.
        let children: Vec<String> = c
            .status
            .iter()
            .flat_map(|s| {
                s.control_plane_ref
                    .iter()
                    .cloned()
                    .chain(s.workers_refs.clone())
                    .chain(s.machine_refs.clone())
            })
            .collect();
        env.delete::<OmniCluster>(name).await;
        env.wait_gone::<OmniCluster>(name).await;
        for child in &children {
            let s = c.status.as_ref();
            if s.and_then(|s| s.control_plane_ref.as_ref()) == Some(child) {
                env.delete::<OmniControlPlane>(child).await;
            } else if s.is_some_and(|s| s.workers_refs.contains(child)) {
                env.delete::<OmniWorkers>(child).await;
            } else {
                env.delete::<OmniMachine>(child).await;
            }
        }
        assert_eq!(user_view(&env, name), before, "orphaned");

        let yaml = export(&env, name, connection).await;
        assert!(
            yaml.contains("# Everything the cluster's template owns in Omni is expressed."),
            "{yaml}"
        );
        let written = env.omni.applied_writes();
        for doc in documents(&yaml) {
            env.create_any_of_ours(doc).await;
        }
        let adopted = env
            .wait_cond::<OmniCluster>(name, is_true("Synced").because("Synced"))
            .await;
        assert_eq!(adopted.status.as_ref().and_then(|s| s.plan.clone()), None);
        // (A first pass may run before every child is in the operator's cache and hold with
        // AdoptionDiff meanwhile: it writes nothing, which the next assertion covers.)
        assert_eq!(
            writes_since(&env, &written),
            [("update".to_string(), ty::CLUSTER.to_string(), name.clone())],
            "only the new owner stamp is written"
        );
        assert_eq!(user_view(&env, name), before);
        let uid = adopted.meta().uid.clone().unwrap_or_default();
        let stamp = env
            .omni
            .get(ty::CLUSTER, name)
            .and_then(|r| r.metadata)
            .and_then(|m| m.annotations.get(OWNER).cloned());
        assert_eq!(stamp, Some(format!("{NS}/{name}/{uid}")));
    }
    env.shutdown().await;
}

/// A hand-written template, synced by Omni's own template sync (backend API 3: the install
/// disk is a resource), exports to manifests that adopt it with an empty plan; what export
/// cannot express is listed, and the adoption holds on it instead of deleting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_of_a_cluster_made_from_a_hand_written_template_round_trips() {
    let env = Env::builder().omni_api(3).start().await;
    for machine in [CP, W1, W2] {
        env.connect_machine(machine);
    }
    let template = format!(
        r#"kind: Cluster
name: handmade
labels: {{team: platform}}
annotations: {{contact: ops}}
kubernetes:
  version: v1.35.0
  manifests:
    - name: apps
      mode: full
      inline:
        - apiVersion: v1
          kind: Namespace
          metadata: {{name: apps}}
talos:
  version: v1.13.2
features:
  enableWorkloadProxy: true
patches:
  - name: cni
    inline: {{cluster: {{network: {{cni: {{name: none}}}}}}}}
  - name: custom
    idOverride: 300-handmade-custom
    inline: "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"
systemExtensions: [siderolabs/iscsi-tools]
---
kind: ControlPlane
machines: [{CP}]
patches:
  - name: cp
    inline: {{machine: {{kubelet: {{extraArgs: {{v: "2"}}}}}}}}
---
kind: Workers
name: edge
machines: [{W1}, {W2}]
kernelArgs: [console=ttyS0]
updateStrategy: {{type: Rolling, rolling: {{maxParallelism: 1}}}}
---
kind: Machine
name: {W1}
labels: {{rack: r1}}
install: {{disk: /dev/sda}}
patches:
  - name: w1
    inline: "machine:\n  sysctls:\n    a: '1'\n"
"#
    );
    template_sync(&env, &template, BackendApi::V3).await;
    env.wait::<omni_operator::api::OmniConnection>("omni", "Ready", support::ready)
        .await;
    let before = user_view(&env, "handmade");

    let yaml = export(&env, "handmade", "omni").await;
    assert!(
        yaml.contains("# Everything the cluster's template owns in Omni is expressed."),
        "{yaml}"
    );
    // The generated patch IDs are recognised; only the patch that had an override keeps it.
    assert_eq!(yaml.matches("idOverride").count(), 1, "{yaml}");

    // A patch made by hand in Omni for a machine no template set lists: listed, and the
    // adoption holds on it rather than deleting it.
    env.omni.put(omni_sim::store::resource(
        ty::CONFIG_PATCH,
        "500-made-in-the-ui",
        "",
        [
            ("omni.sidero.dev/cluster", "handmade"),
            (
                "omni.sidero.dev/cluster-machine",
                "44444444-4444-4444-8444-444444444444",
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
        &omni_client::proto::specs::ConfigPatchSpec {
            data: "machine: {}\n".into(),
            ..Default::default()
        },
    ));
    let yaml = export(&env, "handmade", "omni").await;
    assert!(
        yaml.contains("#   - ConfigPatches.omni.sidero.dev(500-made-in-the-ui): is a config patch of machine 44444444-4444-4444-8444-444444444444")
            && yaml.contains("label omni.sidero.dev/machine=44444444-4444-4444-8444-444444444444"),
        "{yaml}"
    );
    let written = env.omni.applied_writes();
    for doc in documents(&yaml) {
        env.create_any_of_ours(doc).await;
    }
    // The first passes may run before every child is in the operator's cache: their plans
    // differ more, and are held too. Once all are there, only the unexpressed patch differs.
    let c = env
        .wait::<OmniCluster>("handmade", "held on the unexpressed patch alone", |c| {
            is_false("Ready").because("AdoptionDiff").holds(c)
                && c.status
                    .as_ref()
                    .and_then(|s| s.plan.as_ref())
                    .is_some_and(|p| {
                        p.destructive_changes == ["deletes config patch 500-made-in-the-ui"]
                    })
        })
        .await;
    assert_eq!(plan(&c).summary, "1 to delete (destructive)");
    assert_eq!(
        writes_since(&env, &written),
        Vec::<(String, String, String)>::new()
    );

    // Moved out of the template's reach (here: removed), the rest matches: adopted.
    env.omni
        .store()
        .remove("default", ty::CONFIG_PATCH, "500-made-in-the-ui");
    env.patch::<OmniCluster>(
        "handmade",
        json!({"metadata": {"annotations": {"touched": "1"}}}),
    )
    .await;
    assert_adopted_unchanged(&env, "handmade", &before, &written).await;
    env.shutdown().await;
}

/// `omni template diff` of the template the operator renders for a cluster it manages says
/// there are no changes, `sync` keeps the ownership stamp, and a real change is shown field by
/// field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omni_template_diff_and_sync_agree_with_the_operator() {
    let env = Env::builder().start().await;
    env.connect_machine(CP);
    env.cluster(
        "managed",
        CP,
        json!({"patches": [{"name": "p", "inline": {"machine": {"sysctls": {"a": "1"}}}}]}),
    )
    .await;
    let cluster = env
        .wait_cond::<OmniCluster>("managed", is_true("Synced").because("Synced"))
        .await;
    let cp: OmniControlPlane = env
        .api::<OmniControlPlane>()
        .get("managed-cp")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rendered = omni_operator::domain::render::render(&cluster, &[cp], &[], &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file: PathBuf = dir.path().join("managed.yaml");
    std::fs::write(&file, &rendered.yaml).unwrap_or_else(|e| panic!("{e}"));
    let run = |command: fn(omni_template::TemplateArgs) -> omni_template::Command,
               file: PathBuf| {
        let connection = cli_connection(&env, &dir);
        async move {
            let mut out = Vec::new();
            omni_template::run_with_output(
                omni_template::Args {
                    command: command(omni_template::TemplateArgs {
                        file,
                        omni_api: omni_template::OmniApi::Auto,
                        connection,
                    }),
                },
                &mut out,
            )
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
            String::from_utf8(out).unwrap_or_default()
        }
    };
    assert_eq!(
        run(omni_template::Command::Diff, file.clone()).await,
        "no changes\n"
    );
    let omni_writes = env.omni.writes_total();
    assert_eq!(run(omni_template::Command::Sync, file.clone()).await, "");
    assert_eq!(
        env.omni.writes_total(),
        omni_writes,
        "sync of an unchanged template wrote"
    );
    let stamp = || {
        env.omni
            .get(ty::CLUSTER, "managed")
            .and_then(|r| r.metadata)
            .and_then(|m| m.annotations.get(OWNER).cloned())
    };
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    assert_eq!(stamp(), Some(format!("{NS}/managed/{uid}")));

    // A real change: listed with its fields; a sync of it keeps the stamp.
    std::fs::write(
        &file,
        rendered
            .yaml
            .replace("a: \"1\"", "a: \"2\"")
            .replace("version: v1.13.2", "version: v1.13.3"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let diff = run(omni_template::Command::Diff, file.clone()).await;
    assert!(
        diff.contains("* updating (dry run) Clusters.omni.sidero.dev(managed)\n    spec.talosVersion: 1.13.2 → 1.13.3\n")
            && diff.contains("* updating (dry run) ConfigPatches.omni.sidero.dev(200-cluster-managed-p)\n    spec.data: <"),
        "{diff}"
    );
    assert!(
        !diff.contains("annotations."),
        "the operator's bookkeeping shows as a change: {diff}"
    );
    run(omni_template::Command::Sync, file.clone()).await;
    assert_eq!(
        stamp(),
        Some(format!("{NS}/managed/{uid}")),
        "sync stripped the stamp"
    );
    env.shutdown().await;
}

/// The plan is the pass's own: an idle pass, a pass holding a plan for approval and a pass of
/// an observe-only cluster each make the same Omni reads (the ownership Get, the plan's Get and
/// six Lists, the node's KernelArgs Get) and no write anywhere. Passes are started one at a
/// time by touching an annotation, so each is counted whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_costs_the_same_omni_calls_and_no_writes_with_or_without_a_held_plan() {
    let env = Env::builder().start().await;
    env.connect_machine(CP);
    let patch = json!([{"name": "p", "inline": {"machine": {}}}]);
    env.cluster(
        "counted",
        CP,
        json!({"syncInterval": "1h", "changePolicy": {"destructive": "RequireApproval"}, "patches": patch}),
    )
    .await;
    env.wait_cond::<OmniCluster>("counted", is_true("Synced").because("Synced"))
        .await;
    // Omni's own status settles within seconds; from then on a pass writes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Every outcome: a Get of what does not exist (the node's KernelArgs) is a NotFound.
    let calls = |env: &Env, method: &str| -> u64 {
        env.omni
            .call_counts()
            .iter()
            .filter(|((m, _), _)| m == method)
            .map(|(_, n)| n)
            .sum()
    };
    let mut touches = 0;
    let mut pass = async |env: &Env| {
        touches += 1;
        let kube = env
            .kube
            .hooks()
            .writes_to_object("omniclusters", Some(NS), "counted");
        let (gets, lists, writes) = (
            calls(env, omni_sim::methods::GET),
            calls(env, omni_sim::methods::LIST),
            env.omni.writes_total(),
        );
        let start = env.reconciles("OmniCluster");
        let _: OmniCluster = env
            .patch(
                "counted",
                json!({"metadata": {"annotations": {"touched": touches.to_string()}}}),
            )
            .await;
        eventually("the pass", || env.reconciles("OmniCluster") > start).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        (
            calls(env, omni_sim::methods::GET) - gets,
            calls(env, omni_sim::methods::LIST) - lists,
            env.omni.writes_total() - writes,
            // Less the test's own annotation patch.
            env.kube
                .hooks()
                .writes_to_object("omniclusters", Some(NS), "counted")
                - kube
                - 1,
        )
    };
    // Two idle passes (the first may still catch Omni's status settling).
    pass(&env).await;
    let idle = pass(&env).await;
    assert_eq!(
        idle,
        (3, 6, 0, 0),
        "(Gets, Lists, Omni writes, status writes) of an idle pass"
    );

    // Held for approval: the first pass writes the hold; the next ones cost what an idle one does.
    let _: OmniCluster = env.patch_spec("counted", json!({"patches": []})).await;
    env.wait_cond::<OmniCluster>("counted", is_false("Ready").because("ApprovalRequired"))
        .await;
    let held = pass(&env).await;
    assert_eq!(held, idle, "a held pass costs more than an idle one");

    // Observe only: the same.
    let _: OmniCluster = env
        .patch_spec("counted", json!({"changePolicy": {"mode": "Plan"}}))
        .await;
    env.wait_cond::<OmniCluster>("counted", is_false("Ready").because("PlanOnly"))
        .await;
    let observing = pass(&env).await;
    assert_eq!(
        observing, idle,
        "an observe-only pass costs more than an idle one"
    );
    env.shutdown().await;
}
