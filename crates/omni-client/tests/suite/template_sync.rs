//! Template sync, delete and status against omni-sim over real gRPC (signed requests, Omni's
//! COSI rules and controllers).

use crate::template_sim;

use std::time::Duration;

use omni_client::proto::cosi::resource::Resource;
use omni_client::proto::specs;
use omni_client::template::{
    DeleteProgress, FileResolver, Plan, ResourceRef, StateError, StatusError, SyncError, Template,
    apply, delete_cluster, keys, plan_sync, status_cluster, types,
};
use omni_client::transport::{Client, ClientConfig};
use omni_sim::{PoolMachine, Role, RunningOmniSim};
use tokio::time::Instant;

const A: &str = "11111111-1111-1111-1111-111111111111";
const B: &str = "22222222-2222-2222-2222-222222222222";

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

async fn start() -> (RunningOmniSim, Client) {
    template_sim::start("template-tests").await
}

fn template(workers: bool, disk: &str) -> Template {
    let mut text = format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\npatches:\n  - name: cni\n    inline:\n      cluster:\n        network:\n          cni:\n            name: none\n---\nkind: ControlPlane\nmachines: [{A}]\n"
    );
    if workers {
        text.push_str(&format!(
            "---\nkind: Workers\nmachines: [{B}]\n---\nkind: Machine\nname: {B}\ninstall:\n  disk: {disk}\nkernelArgs: [console=ttyS0]\n"
        ));
    }
    Template::parse(&text).expect("parse")
}

async fn plan(client: &Client, t: &Template) -> Plan {
    plan_sync(&client.raw_state(), t, &FileResolver::default())
        .await
        .expect("plan")
}

async fn sync(client: &Client, t: &Template) -> Vec<String> {
    let p = plan(client, t).await;
    let mut out = Vec::new();
    apply(&client.raw_state(), &p, deadline(), &mut out)
        .await
        .unwrap_or_else(|e| panic!("apply: {e}\n{}", out.join("\n")));
    out
}

fn md(r: &Resource) -> &omni_client::proto::cosi::resource::Metadata {
    r.metadata.as_ref().expect("metadata")
}

#[tokio::test]
async fn first_sync_creates_and_second_sync_writes_nothing() {
    let (sim, client) = start().await;
    let out = sync(&client, &template(true, "/dev/sda")).await;
    assert_eq!(out[0], "* creating Clusters.omni.sidero.dev(demo)");
    assert!(out.contains(&format!("* creating KernelArgs.omni.sidero.dev({B})")));
    let cluster = sim.get(types::CLUSTER, "demo").expect("cluster created");
    assert!(
        md(&cluster)
            .annotations
            .contains_key(keys::MANAGED_BY_TEMPLATES)
    );
    assert!(sim.get(types::MACHINE_SET, "demo-workers").is_some());
    assert!(sim.get(types::MACHINE_SET_NODE, B).is_some());

    let writes = sim.writes_total();
    let again = plan(&client, &template(true, "/dev/sda")).await;
    assert!(again.is_empty(), "{:?}", again.lines(true));
    let mut out = Vec::new();
    apply(&client.raw_state(), &again, deadline(), &mut out)
        .await
        .expect("apply");
    assert_eq!(
        sim.writes_total(),
        writes,
        "an unchanged template writes nothing"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_changed_field_updates_only_its_resource() {
    let (sim, client) = start().await;
    sync(&client, &template(true, "/dev/sda")).await;
    let writes = sim.writes_total();
    let out = sync(&client, &template(true, "/dev/nvme0n1")).await;
    assert_eq!(
        out,
        [format!(
            "* updating ConfigPatches.omni.sidero.dev(000-cm-{B}-install-disk)"
        )]
    );
    assert_eq!(sim.writes_total(), writes + 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_removed_worker_set_is_torn_down() {
    let (sim, client) = start().await;
    sync(&client, &template(true, "/dev/sda")).await;
    let out = sync(&client, &template(false, "/dev/sda")).await;
    assert!(
        out.contains(&"* tearing down MachineSets.omni.sidero.dev(demo-workers)".to_string()),
        "{out:?}"
    );
    assert!(out.contains(&"* destroyed MachineSets.omni.sidero.dev(demo-workers)".to_string()));
    assert!(sim.get(types::MACHINE_SET, "demo-workers").is_none());
    assert!(sim.get(types::MACHINE_SET_NODE, B).is_none());
    assert!(sim.get(types::MACHINE_SET, "demo-control-planes").is_some());
    let released = sim
        .get(types::KERNEL_ARGS, B)
        .expect("kernel args are released, not deleted");
    assert!(
        !md(&released)
            .annotations
            .contains_key(keys::MANAGED_BY_TEMPLATES)
    );
    sim.shutdown().await;
}

fn patch(id: &str, owner: &str) -> Resource {
    omni_sim::store::resource(
        types::CONFIG_PATCH,
        id,
        owner,
        [(keys::CLUSTER.to_string(), "demo".to_string())],
        &specs::ConfigPatchSpec {
            data: "machine:\n  network: {}\n".into(),
            ..Default::default()
        },
    )
}

#[tokio::test]
async fn ownership_decides_what_sync_deletes() {
    let (sim, client) = start().await;
    sync(&client, &template(true, "/dev/sda")).await;
    // Made in the UI: user-owned, carries the cluster label → the template owns it.
    sim.put(patch("500-from-the-ui", ""));
    // Made by a controller → never touched.
    sim.put(patch("600-controller-made", "SomeController"));
    let p = plan(&client, &template(true, "/dev/sda")).await;
    assert_eq!(
        p.deletes,
        [ResourceRef::new(types::CONFIG_PATCH, "500-from-the-ui")]
    );
    sync(&client, &template(true, "/dev/sda")).await;
    assert!(sim.get(types::CONFIG_PATCH, "500-from-the-ui").is_none());
    assert!(
        sim.get(types::CONFIG_PATCH, "600-controller-made")
            .is_some()
    );
    sim.shutdown().await;
}

async fn delete_until_done(client: &Client, destroy_machines: bool) -> Vec<String> {
    let mut all = Vec::new();
    let until = deadline();
    loop {
        let mut out = Vec::new();
        let progress = delete_cluster(&client.raw_state(), "demo", destroy_machines, &mut out)
            .await
            .expect("delete step");
        all.extend(out);
        match progress {
            DeleteProgress::Done => return all,
            DeleteProgress::InProgress { waiting_for } => {
                assert!(Instant::now() < until, "still waiting for {waiting_for:?}");
                assert!(!waiting_for.is_empty());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn delete_without_destroy_machines_keeps_disconnected_machines() {
    let (sim, client) = start().await;
    sim.add_machine(PoolMachine {
        id: A.into(),
        labels: Default::default(),
        disconnected: false,
    });
    sync(&client, &template(false, "/dev/sda")).await;
    assert!(sim.set_machine_disconnected(A, true));
    let out = delete_until_done(&client, false).await;
    assert!(
        out.contains(&"* destroyed Clusters.omni.sidero.dev(demo)".to_string()),
        "{out:?}"
    );
    assert!(sim.get(types::CLUSTER, "demo").is_none());
    assert!(sim.get(types::MACHINE_SET, "demo-control-planes").is_none());
    assert!(
        sim.get(types::LINK, A).is_some(),
        "the machine stays registered"
    );
    // Deleting again is a no-op.
    let writes = sim.writes_total();
    assert!(delete_until_done(&client, false).await.is_empty());
    assert_eq!(sim.writes_total(), writes);
    sim.shutdown().await;
}

#[tokio::test]
async fn destroy_machines_removes_disconnected_machines() {
    let (sim, client) = start().await;
    sim.add_machine(PoolMachine {
        id: A.into(),
        labels: Default::default(),
        disconnected: false,
    });
    sync(&client, &template(false, "/dev/sda")).await;
    // The machine must be part of the cluster before it disconnects.
    let until = deadline();
    while sim
        .machine_labels(A)
        .and_then(|l| l.get(keys::CLUSTER).cloned())
        .as_deref()
        != Some("demo")
    {
        assert!(Instant::now() < until, "machine never joined the cluster");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(sim.set_machine_disconnected(A, true));
    let out = delete_until_done(&client, true).await;
    let link = out
        .iter()
        .position(|l| l == &format!("* destroyed Links.omni.sidero.dev({A})"))
        .unwrap_or_else(|| panic!("link not destroyed: {out:?}"));
    let cluster = out
        .iter()
        .position(|l| l == "* destroyed Clusters.omni.sidero.dev(demo)")
        .unwrap_or_else(|| panic!("cluster not destroyed: {out:?}"));
    assert!(link < cluster, "machines go before the cluster: {out:?}");
    assert!(sim.get(types::LINK, A).is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn status_follows_omni() {
    let (sim, client) = start().await;
    let err = status_cluster(&client.raw_state(), "demo", deadline())
        .await
        .expect_err("no cluster yet");
    assert!(matches!(err, StatusError::NotFound(_)), "{err}");

    sync(&client, &template(true, "/dev/sda")).await;
    let until = deadline();
    let health = loop {
        let h = status_cluster(&client.raw_state(), "demo", deadline())
            .await
            .expect("status");
        if h.healthy {
            break h;
        }
        assert!(Instant::now() < until, "never healthy: {}", h.summary);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(health.phase, "RUNNING");
    assert_eq!(health.machine_sets.len(), 2);
    assert!(
        health.summary.starts_with("cluster demo is healthy"),
        "{}",
        health.summary
    );

    sim.set_machine_set_status("demo-workers", specs::MachineSetPhase::ScalingUp, false)
        .expect("pin set status");
    let health = status_cluster(&client.raw_state(), "demo", deadline())
        .await
        .expect("status");
    assert!(!health.healthy);
    assert!(
        health.summary.contains("demo-workers ScalingUp not ready"),
        "{}",
        health.summary
    );
    sim.shutdown().await;
}

fn patch_labelled(id: &str, cluster: Option<&str>) -> Resource {
    omni_sim::store::resource(
        types::CONFIG_PATCH,
        id,
        "",
        cluster.map(|c| (keys::CLUSTER.to_string(), c.to_string())),
        &specs::ConfigPatchSpec {
            data: "machine:\n  network:\n    hostname: theirs\n".into(),
            ..Default::default()
        },
    )
}

fn template_with_patch_id(id: &str) -> Template {
    Template::parse(&format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\npatches:\n  - name: mine\n    idOverride: {id}\n    inline:\n      machine:\n        network:\n          hostname: mine\n---\nkind: ControlPlane\nmachines: [{A}]\n"
    ))
    .expect("parse")
}

#[tokio::test]
async fn a_resource_found_by_id_is_taken_over_only_when_it_belongs_to_the_cluster() {
    let (sim, client) = start().await;
    // Unlike Omni's own client, a user-owned patch of another cluster, or of none, is a
    // conflict rather than something to overwrite.
    for (id, cluster, holder) in [
        ("300-other-cluster", Some("other"), "\"other\""),
        ("301-no-cluster", None, "\"\""),
    ] {
        sim.put(patch_labelled(id, cluster));
        let before = sim.get(types::CONFIG_PATCH, id);
        let err = plan_sync(
            &client.raw_state(),
            &template_with_patch_id(id),
            &FileResolver::default(),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("{id}: planned a takeover"));
        assert_eq!(
            err.to_string(),
            format!(
                "resource ConfigPatches.omni.sidero.dev(default/{id}) already exists for cluster {holder}, cannot create a conflicting resource for a different cluster"
            )
        );
        assert_eq!(sim.get(types::CONFIG_PATCH, id), before);
    }
    // One already labelled for this cluster (made in the UI for it) is the template's.
    sim.put(patch_labelled("302-this-cluster", Some("demo")));
    let p = plan(&client, &template_with_patch_id("302-this-cluster")).await;
    assert!(
        p.updates
            .contains(&ResourceRef::new(types::CONFIG_PATCH, "302-this-cluster")),
        "{p:?}"
    );
    sim.shutdown().await;
}

/// A State error of a failed sync or delete step, if that is what failed.
fn state_source(err: &SyncError) -> Option<&StateError> {
    match err {
        SyncError::State { source, .. } => Some(source),
        _ => None,
    }
}

#[tokio::test]
async fn a_hung_omni_ends_plan_delete_and_status_at_their_deadlines() {
    let (sim, _) = start().await;
    let key = sim
        .register_service_account("impatient", Role::Operator)
        .expect("register");
    let mut config = ClientConfig::from_encoded_key(sim.endpoint(), &key).expect("key");
    config.request_timeout = Duration::from_millis(300);
    let client = Client::new(config).expect("client");
    let t = template(false, "/dev/sda");
    sim.set_outage(Some(omni_sim::Outage::Hang));

    let state = client.template_state(deadline());
    let planned = plan_sync(&state, &t, &FileResolver::default()).await;
    let err = planned.expect_err("a plan against a hung Omni succeeded");
    assert!(
        matches!(state_source(&err), Some(StateError::DeadlineExceeded(_))),
        "{err}"
    );
    let deleted = delete_cluster(&state, "demo", false, &mut Vec::new()).await;
    let err = deleted.expect_err("a delete step against a hung Omni succeeded");
    assert!(
        matches!(state_source(&err), Some(StateError::DeadlineExceeded(_))),
        "{err}"
    );
    let status = status_cluster(&state, "demo", deadline()).await;
    assert!(
        matches!(
            status,
            Err(StatusError::State {
                source: StateError::DeadlineExceeded(_),
                ..
            })
        ),
        "{status:?}"
    );
    assert!(sim.outage_calls() >= 3);

    // Once Omni answers again, the same client syncs and nothing from the hung calls was applied.
    sim.set_outage(None);
    let state = client.template_state(deadline());
    let plan = plan_sync(&state, &t, &FileResolver::default())
        .await
        .expect("plan after the outage");
    assert!(sim.applied_writes().is_empty());
    apply(&state, &plan, deadline(), &mut Vec::new())
        .await
        .expect("apply after the outage");
    assert!(sim.get(types::CLUSTER, "demo").is_some());
    sim.shutdown().await;
}
