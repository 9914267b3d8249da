//! One watch per kind: the operator lists and watches each kind it reads once, however many of
//! its controllers read it, and each of them still hears of every change. Before, every
//! controller opened its own watch of every kind it read: eight of OmniClusters and four of
//! Secrets, 26 in all (this test counted them so before the watches were shared).

use crate::support;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::{Api, Resource};
use omni_operator::api::{OmniCluster, OmniControlPlane, OmniWorkers};
use serde_json::json;
use support::conditions::{is_false, is_true};
use support::env::Env;
use support::ready;

/// Every kind the operator reads (plural), each of which it must watch exactly once.
const KINDS: [&str; 13] = [
    "configmaps",
    "omniclusters",
    "omniconnections",
    "omnicontrolplanes",
    "omnihelmreleases",
    "omnihelmreleasesets",
    "omnikubeconfigexports",
    "omnikubeconfigexportsets",
    "omnimachines",
    "omnisecretsyncs",
    "omnisecretsyncsets",
    "omniworkers",
    "secrets",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_watched_once_by_the_whole_operator() {
    let env = Env::builder().start().await;
    // The cluster turning Ready and its control plane Accepted shows the controllers that share
    // the watches of clusters, children and connections each hear what they need.
    env.cluster("one", "dddddddd-0000-4000-8000-000000000001", json!({}))
        .await;
    env.wait::<OmniCluster>("one", "Ready", ready).await;
    env.wait_cond::<OmniControlPlane>("one-cp", is_true("Accepted"))
        .await;

    let mut watches: BTreeMap<String, u64> = BTreeMap::new();
    for (key, n) in env.kube.hooks().counts() {
        if key.verb == "watch" {
            *watches.entry(key.resource).or_default() += n;
        }
    }
    let once: BTreeMap<String, u64> = KINDS.iter().map(|k| (k.to_string(), 1)).collect();
    assert_eq!(watches, once, "watch requests per resource");
    env.shutdown().await;
}

/// Lets OmniWorkers store any spec, as an object written around the CRD's schema (an older CRD,
/// a direct etcd write) would have.
async fn loosen_the_workers_schema(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "omniworkers.omni.texashpc.com";
    let crd = crds
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get CRD: {e}"));
    let mut crd = serde_json::to_value(crd).unwrap_or_else(|e| panic!("{e}"));
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let crd: CustomResourceDefinition =
        serde_json::from_value(crd).unwrap_or_else(|e| panic!("{e}"));
    crds.replace(name, &PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("replace CRD: {e}"));
}

/// A child is cached once, decoded, for its own controller and the cluster controller alike. One
/// that does not decode has no readable `clusterRef`, so the clusters of its namespace hold their
/// sync and name it (rendering one without it could drop its machines from Omni), while the
/// child itself reports `InvalidObject`; once it is gone they sync again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_does_not_decode_holds_the_clusters_of_its_namespace_and_is_named() {
    let env = Env::builder().start().await;
    env.cluster("held", "dddddddd-0000-4000-8000-000000000002", json!({}))
        .await;
    env.wait::<OmniCluster>("held", "Ready", ready).await;

    loosen_the_workers_schema(&env.client).await;
    let workers: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &ApiResource::erase::<OmniWorkers>(&()),
    );
    let broken: DynamicObject = serde_json::from_value(json!({
        "apiVersion": OmniWorkers::api_version(&()),
        "kind": "OmniWorkers",
        "metadata": {"name": "broken", "namespace": env.ns},
        "spec": {"clusterRef": {"name": 7}, "machineClass": {"name": "c", "size": 1}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    workers
        .create(&PostParams::default(), &broken)
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));

    let held = is_false("Ready").because("ReconcileFailed");
    let cluster = env.wait_cond::<OmniCluster>("held", held).await;
    let message = held.message(&cluster);
    assert!(
        message.starts_with(r#"OmniWorkers "broken" in this namespace cannot be read"#),
        "{message}"
    );
    support::wait_for(&workers, "broken", "InvalidObject", |w| {
        is_false("Ready").because("InvalidObject").holds(w)
    })
    .await;

    workers
        .delete("broken", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    env.wait::<OmniCluster>("held", "Ready again", ready).await;
    env.shutdown().await;
}
