//! Sharding across replica sets: two embedded operators over one kube-sim, the default shard
//! (`!sharding.omni.texashpc.com/key`, today's Lease) and shard `shard1`
//! (`sharding.omni.texashpc.com/key=shard1`, Lease `omni-operator-shard-shard1`). Each client
//! carries its own User-Agent, which kube-sim records as the field manager of every write, so an
//! object's `managedFields` tell which shard wrote it.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use omni_operator::api::keys::SHARD_LABEL;
use omni_operator::process::leader::{LEASE_NAME, LeaderConfig};
use omni_operator::process::shard::Shard;
use serde_json::{Value, json};
use support::stack::{CLUSTER, CONNECTION, Stack, ours};
use support::wait_for;

const NS: &str = "sharding";
const DEFAULT_MANAGER: &str = "test-shard-default";
const SHARD1_MANAGER: &str = "test-shard-one";
const SHARD1_LEASE: &str = "omni-operator-shard-shard1";

/// A client of its own, as each shard's pod has, whose writes kube-sim records under `manager`.
fn client_as(stack: &Stack, manager: &str) -> kube::Client {
    let uri: http::Uri = stack
        .mgmt
        .base_url
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = kube::Config::new(uri);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&format!("{manager}/0")).unwrap_or_else(|e| panic!("{e}")),
    ));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
}

/// One shard's operator: its selector, its Lease (derived as `omni-operator run` derives it)
/// and its client.
fn start_shard(stack: &Stack, selector: &str, manager: &str) -> support::stack::Operator {
    let shard = Shard::parse(selector).unwrap_or_else(|e| panic!("{e}"));
    let mut config = stack.operator_config();
    let mut leader = LeaderConfig::new(NS);
    leader.name = shard.default_lease_name().unwrap_or_else(|e| panic!("{e}"));
    leader.identity = format!("{manager}-pod");
    leader.lease_duration = Duration::from_secs(4);
    leader.renew_deadline = Duration::from_secs(2);
    leader.retry_period = Duration::from_millis(250);
    config.leader = Some(leader);
    config.shard = shard;
    config.helm_work_dir = stack.helm_work_dir().join(manager);
    support::stack::Operator::spawn(config, client_as(stack, manager))
}

/// The field managers recorded on an object, from kube-sim's store.
fn writers(stack: &Stack, plural: &str, name: &str) -> BTreeSet<String> {
    let obj = stack
        .mgmt
        .store()
        .get("omni.texashpc.com", plural, Some(NS), name)
        .unwrap_or_else(|e| panic!("{plural}/{name}: {e:?}"));
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f["manager"].as_str())
        .filter(|m| m.starts_with("test-shard-"))
        .map(str::to_owned)
        .collect()
}

/// When one manager last wrote an object's status (its `managedFields` entry's time; a
/// later writer takes over the fields it wrote, never the time), if it ever did.
fn status_written(stack: &Stack, plural: &str, name: &str, manager: &str) -> Option<String> {
    let obj = stack
        .mgmt
        .store()
        .get("omni.texashpc.com", plural, Some(NS), name)
        .ok()?;
    obj.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|f| f["manager"] == manager && f["subresource"] == "status")
        .and_then(|f| f["time"].as_str())
        .map(str::to_owned)
}

fn lease_holder(stack: &Stack, name: &str) -> Option<String> {
    stack
        .mgmt
        .store()
        .get("coordination.k8s.io", "leases", Some(NS), name)
        .ok()?
        .pointer("/spec/holderIdentity")?
        .as_str()
        .map(str::to_owned)
}

/// `Ready` at the object's current generation.
fn ready_now(obj: &DynamicObject) -> bool {
    support::ready(obj)
        && obj.data["status"]["observedGeneration"].as_i64() == obj.metadata.generation
}

fn labelled(mut obj: Value, shard: &str) -> Value {
    obj["metadata"]["labels"] = json!({SHARD_LABEL: shard});
    obj
}

async fn set_shard(api: &Api<DynamicObject>, name: &str, shard: Option<&str>) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {SHARD_LABEL: shard}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("relabel {name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_reconciles_only_its_objects_and_a_relabel_hands_one_over() {
    let stack = Stack::start(NS).await;
    let clusters = stack.api("OmniCluster");
    let exports = stack.api("OmniKubeconfigExport");
    let cluster = |name: &str| {
        ours(
            "OmniCluster",
            NS,
            name,
            json!({"connectionRef": {"name": CONNECTION}, "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"}, "syncInterval": "5m"}),
        )
    };
    let control_plane = |cluster: &str, machine: &str| {
        ours(
            "OmniControlPlane",
            NS,
            &format!("{cluster}-cp"),
            json!({"clusterRef": {"name": cluster}, "machines": [machine]}),
        )
    };
    // An export of `cluster`'s kubeconfig into Secret `{cluster}-kc`.
    let export = |cluster: &str| {
        ours(
            "OmniKubeconfigExport",
            NS,
            &format!("{cluster}-kc"),
            json!({"clusterRef": {"name": cluster}, "targetSecretRef": {"name": format!("{cluster}-kc")},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "24h", "renewBefore": "4h", "deletionPolicy": "Delete"}),
        )
    };
    // Shard 1's cluster, using the default shard's connection; a cluster of a shard nobody
    // runs; an export on the default shard of shard 1's cluster.
    stack.create(labelled(cluster("blue"), "shard1")).await;
    stack
        .create(labelled(
            control_plane("blue", "aaaaaaaa-0000-4000-8000-0000000000b1"),
            "shard1",
        ))
        .await;
    stack.create(labelled(cluster("green"), "shard2")).await;
    stack.create(export("blue")).await;
    let default = start_shard(&stack, &format!("!{SHARD_LABEL}"), DEFAULT_MANAGER);
    let shard1 = start_shard(&stack, &format!("{SHARD_LABEL}=shard1"), SHARD1_MANAGER);

    wait_for(&clusters, CLUSTER, "Ready", ready_now).await;
    wait_for(&clusters, "blue", "Ready", ready_now).await;
    // A reference across shards works: the export reads shard 1's cluster, and shard 1's
    // cluster the default shard's connection.
    wait_for(&exports, "blue-kc", "Ready", ready_now).await;

    // One Lease per shard, the default shard's under today's name.
    assert_eq!(
        lease_holder(&stack, LEASE_NAME).as_deref(),
        Some("test-shard-default-pod")
    );
    assert_eq!(
        lease_holder(&stack, SHARD1_LEASE).as_deref(),
        Some("test-shard-one-pod")
    );
    let only = |m: &str| BTreeSet::from([m.to_owned()]);
    for (plural, name, writer) in [
        ("omniconnections", CONNECTION, DEFAULT_MANAGER),
        ("omniclusters", CLUSTER, DEFAULT_MANAGER),
        ("omnikubeconfigexports", "blue-kc", DEFAULT_MANAGER),
        ("omniclusters", "blue", SHARD1_MANAGER),
        ("omnicontrolplanes", "blue-cp", SHARD1_MANAGER),
    ] {
        assert_eq!(
            writers(&stack, plural, name),
            only(writer),
            "{plural}/{name}"
        );
    }
    assert_eq!(
        writers(&stack, "omniclusters", "green"),
        BTreeSet::new(),
        "no shard runs shard2: nobody touches its cluster"
    );

    // Relabelled to the default shard, the cluster and its control plane hand over: a spec
    // change is reconciled there, and shard 1 writes no more.
    let before = status_written(&stack, "omniclusters", "blue", SHARD1_MANAGER);
    assert!(before.is_some(), "shard 1 wrote blue's status");
    // managedFields times have a resolution of a second: a later write by shard 1 would show.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    set_shard(&stack.api("OmniControlPlane"), "blue-cp", None).await;
    set_shard(&clusters, "blue", None).await;
    clusters
        .patch(
            "blue",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "6m"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("edit blue: {e}"));
    wait_for(&clusters, "blue", "Ready at the new generation", |c| {
        ready_now(c) && status_written(&stack, "omniclusters", "blue", DEFAULT_MANAGER).is_some()
    })
    .await;
    assert_eq!(
        status_written(&stack, "omniclusters", "blue", SHARD1_MANAGER),
        before,
        "shard 1 wrote blue after it left the shard"
    );
    // And back: shard 1 takes it again.
    set_shard(&clusters, "blue", Some("shard1")).await;
    clusters
        .patch(
            "blue",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncInterval": "7m"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("edit blue: {e}"));
    wait_for(&clusters, "blue", "Ready at the newest generation", |c| {
        ready_now(c) && status_written(&stack, "omniclusters", "blue", SHARD1_MANAGER) != before
    })
    .await;

    // A kind each shard watches filtered by its selector hands over too: the export leaves
    // the default shard's watch and enters shard 1's.
    set_shard(&exports, "blue-kc", Some("shard1")).await;
    exports
        .patch(
            "blue-kc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewBefore": "5h"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("edit blue-kc: {e}"));
    wait_for(&exports, "blue-kc", "Ready on shard 1", |e| {
        ready_now(e)
            && status_written(&stack, "omnikubeconfigexports", "blue-kc", SHARD1_MANAGER).is_some()
    })
    .await;

    // A secret sync on shard 1 whose kubeconfig an export on the default shard is still to
    // write (its cluster, on a shard nobody runs, never becomes Ready) waits for it: shard 1
    // sees the other shard's export and says `KubeconfigPending`, not `MissingSecret`.
    stack.create(export("green")).await;
    stack
        .create_secret("registry", json!({"password": "not-a-real-one"}))
        .await;
    stack
        .create(labelled(
            ours(
                "OmniSecretSync",
                NS,
                "blue-sync",
                json!({"clusterRef": {"name": "blue"},
                    "kubeconfigSecretRef": {"name": "green-kc", "key": "kubeconfig"},
                    "sourceSecretRef": {"name": "registry"},
                    "targetSecretRef": {"name": "registry", "namespace": "apps"},
                    "deletionPolicy": "Delete"}),
            ),
            "shard1",
        ))
        .await;
    wait_for(
        &stack.api("OmniSecretSync"),
        "blue-sync",
        "KubeconfigPending, from the other shard's export",
        |s| {
            s.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["reason"] == "KubeconfigPending")
        },
    )
    .await;

    shard1.stop().await;
    default.stop().await;
    stack.shutdown().await;
}
