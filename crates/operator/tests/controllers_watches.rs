//! One watch per kind: the operator lists and watches each kind it reads once, however many of
//! its controllers read it, and each of them still hears of every change. Before, every
//! controller opened its own watch of every kind it read: eight of OmniClusters and four of
//! Secrets, 26 in all (this test counted them so before the watches were shared).

mod support;

use std::collections::BTreeMap;

use omni_operator::api::{OmniCluster, OmniControlPlane};
use serde_json::json;
use support::conditions::is_true;
use support::env::Env;
use support::ready;

/// Every kind the operator reads (plural), each of which it must watch exactly once.
const KINDS: [&str; 9] = [
    "omniclusters",
    "omniconnections",
    "omnicontrolplanes",
    "omnihelmreleases",
    "omnikubeconfigexports",
    "omnimachines",
    "omnisecretsyncs",
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
