//! What of a child (OmniControlPlane, OmniWorkers, OmniMachine) wakes its OmniCluster, counted
//! from outside through the operator's `reconciles_total` metric: a spec edit re-renders the
//! cluster once, and a change of the child's status alone (its own controller's write, or
//! anyone's) not at all. The cluster reads only the children's specs and metadata; before the
//! child watches were filtered, one spec edit reconciled the cluster three times and a
//! status-only change once.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use omni_operator::api::{OmniCluster, OmniWorkers};
use serde_json::json;
use tokio::time::Instant;

use crate::support::env::Env;
use crate::support::{self, ready};

/// How long the count must stay the same to call the operator settled: far longer than a
/// reconcile takes here, far shorter than the cluster's one-hour re-check.
const QUIET: Duration = Duration::from_secs(3);

/// The OmniCluster reconcile count once it has not moved for [`QUIET`].
async fn settled_cluster_reconciles(env: &Env) -> u64 {
    let deadline = Instant::now() + support::WAIT;
    let mut last = env.reconciles("OmniCluster");
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = env.reconciles("OmniCluster");
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= QUIET {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "OmniCluster reconciles never settled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_spec_edit_wakes_its_cluster_once_and_a_child_status_change_not_at_all() {
    let env = Env::builder().start().await;
    env.cluster(
        "woken",
        "eeeeeeee-0000-4000-8000-000000000001",
        json!({"syncInterval": "1h"}),
    )
    .await;
    env.create_spec::<OmniWorkers>(
        "woken-workers",
        json!({"clusterRef": {"name": "woken"}, "machines": ["eeeeeeee-0000-4000-8000-000000000002"]}),
    )
    .await;
    let template_hash = |c: &OmniCluster| c.status.as_ref().and_then(|s| s.template_hash.clone());
    let cluster = env
        .wait::<OmniCluster>("woken", "Ready with the workers", |c| {
            ready(c) && c.status.as_ref().is_some_and(|s| s.workers_refs.len() == 1)
        })
        .await;
    env.wait::<OmniWorkers>("woken-workers", "Ready", ready)
        .await;
    let before = settled_cluster_reconciles(&env).await;

    // A spec edit of the workers: one reconcile of the cluster renders it.
    env.patch::<OmniWorkers>(
        "woken-workers",
        json!({"spec": {"labels": {"tier": "edited"}}}),
    )
    .await;
    let old_hash = template_hash(&cluster);
    env.wait::<OmniCluster>("woken", "re-rendered with the edit", |c| {
        ready(c) && template_hash(c) != old_hash
    })
    .await;
    env.wait::<OmniWorkers>("woken-workers", "Ready at the new generation", |w| {
        ready(w) && w.status.as_ref().and_then(|s| s.observed_generation) == w.metadata.generation
    })
    .await;
    let after_edit = settled_cluster_reconciles(&env).await;
    assert_eq!(
        after_edit - before,
        1,
        "reconciles of the cluster for one spec edit of its workers"
    );

    // A change of the workers' status alone: nothing the cluster reads.
    env.api::<OmniWorkers>()
        .patch_status(
            "woken-workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"workerSetName": "moved-by-hand"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch the workers' status: {e}"));
    let after_status = settled_cluster_reconciles(&env).await;
    assert_eq!(
        after_status - after_edit,
        0,
        "reconciles of the cluster for a status-only change of its workers"
    );
    env.shutdown().await;
}
