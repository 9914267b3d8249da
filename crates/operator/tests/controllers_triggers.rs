//! What wakes the objects that refer to an OmniCluster (its secret syncs, releases, exports and
//! children): a change of the cluster itself or one of its conditions turning, never the rest of
//! its status moving with Omni. Before, every status write of a cluster re-ran all of them; at
//! 300 clusters with 10 syncs each, an edit took seconds to reach Omni behind that fan-out
//! (`omni-bench`, change latency). Waking on nothing from the status went too far: an export
//! waiting for its cluster to reach Omni then waited out its error backoff (up to 20 s in the
//! bench's cold start) after the cluster's `Synced` turned `True`. Secret syncs, which read only
//! the cluster's existence and spec, are not woken by its conditions either.

mod support;

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use omni_operator::api::OmniCluster;
use omni_operator::controllers::{ClusterTrigger, cluster_changes, secret_changes};
use serde_json::json;
use support::{create_json, install_operator_api, kube_sim};

const NS: &str = "triggers";

/// The next event within `wait`, if any.
async fn next_within<K>(
    events: &mut (impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Unpin),
    wait: Duration,
) -> Option<K> {
    match tokio::time::timeout(wait, events.next()).await {
        Ok(Some(Ok(o))) => Some(o),
        Ok(Some(Err(e))) => panic!("watch: {e}"),
        Ok(None) => panic!("the watch ended"),
        Err(_) => None,
    }
}

/// Creates OmniCluster `prod` with `finalizers`.
async fn create_cluster(client: &kube::Client, finalizers: &[&str]) {
    create_json(
        client,
        json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "prod", "namespace": NS, "finalizers": finalizers},
            "spec": {"connectionRef": {"name": "omni"},
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}
        }),
    )
    .await;
}

#[tokio::test]
async fn a_clusters_dependants_are_woken_by_its_changes_conditions_and_deletion_not_by_the_rest_of_its_status()
 {
    let (_sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_cluster(&client, &["test/hold"]).await;
    let api: Api<OmniCluster> = Api::namespaced(client.clone(), NS);
    let mut events = Box::pin(cluster_changes(
        api.clone(),
        ClusterTrigger::ChangesAndConditions,
    ));
    let wait = Duration::from_secs(3);

    let first = next_within(&mut events, wait).await;
    assert_eq!(
        first.map(|c| c.name_any()),
        Some("prod".into()),
        "first sighting"
    );

    let status = json!({"status": {"clusterName": "prod", "lastStatusOutput": "phase RUNNING"}});
    api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_none(),
        "a status write wakes no dependant"
    );

    let condition = |status: &str, message: &str| {
        json!({"status": {"conditions": [{
            "type": "Synced", "status": status, "reason": "Synced", "message": message,
            "lastTransitionTime": "2026-11-25T00:00:00Z", "observedGeneration": 1
        }]}})
    };
    api.patch_status(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(&condition("False", "waiting")),
    )
    .await
    .unwrap_or_else(|e| panic!("status: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "a new condition wakes the dependants"
    );
    api.patch_status(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(&condition("False", "still waiting")),
    )
    .await
    .unwrap_or_else(|e| panic!("status: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_none(),
        "a condition's message alone wakes no dependant"
    );
    api.patch_status(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(&condition("True", "synced")),
    )
    .await
    .unwrap_or_else(|e| panic!("status: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "a condition turning wakes the dependants"
    );

    let spec = json!({"spec": {"features": {"enableWorkloadProxy": true}}});
    api.patch("prod", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap_or_else(|e| panic!("spec: {e}"));
    let changed = next_within(&mut events, wait).await;
    assert_eq!(
        changed.and_then(|c| c.metadata.generation),
        Some(2),
        "a spec change"
    );

    api.delete("prod", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    let marked = next_within(&mut events, wait).await;
    assert!(
        marked.is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
        "the deletion mark"
    );
    let release = json!({"metadata": {"finalizers": null}});
    api.patch("prod", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap_or_else(|e| panic!("finalizer: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "the deletion itself"
    );
}

/// Secret syncs read only what names a cluster (its existence and its name in Omni): neither its
/// conditions turning nor the rest of its spec wakes them. Before, every condition turn of every
/// cluster re-ran its ten syncs, a no-op pass each; and a spec edit re-ran them too (the
/// benchmark's 100 cluster edits made 10,000 sync passes, and a Secret edit made meanwhile
/// waited behind them: 5-12 s to reach its workload cluster).
#[tokio::test]
async fn a_clusters_secret_syncs_are_woken_by_its_name_and_deletion_not_by_its_spec_or_conditions()
{
    let (_sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_cluster(&client, &["test/hold"]).await;
    let api: Api<OmniCluster> = Api::namespaced(client.clone(), NS);
    let mut events = Box::pin(cluster_changes(api.clone(), ClusterTrigger::Identity));
    let wait = Duration::from_secs(3);
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "first sighting"
    );

    let synced = json!({"status": {"conditions": [{
        "type": "Synced", "status": "True", "reason": "Synced", "message": "synced",
        "lastTransitionTime": "2026-11-25T00:00:00Z", "observedGeneration": 1
    }]}});
    api.patch_status("prod", &PatchParams::default(), &Patch::Merge(&synced))
        .await
        .unwrap_or_else(|e| panic!("status: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_none(),
        "a condition turning wakes no secret sync"
    );

    let spec = json!({"spec": {"features": {"enableWorkloadProxy": true},
                               "kubernetes": {"version": "v1.35.1"}}});
    api.patch("prod", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap_or_else(|e| panic!("spec: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_none(),
        "a spec change that leaves its name wakes no secret sync"
    );

    let renamed = json!({"spec": {"clusterName": "prod-omni"}});
    api.patch("prod", &PatchParams::default(), &Patch::Merge(&renamed))
        .await
        .unwrap_or_else(|e| panic!("rename: {e}"));
    assert_eq!(
        next_within(&mut events, wait)
            .await
            .map(|c| c.effective_cluster_name()),
        Some("prod-omni".into()),
        "its name in Omni"
    );

    api.delete("prod", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "the deletion mark"
    );
    let release = json!({"metadata": {"finalizers": null}});
    api.patch("prod", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap_or_else(|e| panic!("finalizer: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "the deletion"
    );
}

/// A Secret wakes the objects that read it (secret syncs) when its content can matter to them:
/// its data, type, labels or annotations, its deletion. A finalizer added or lifted (an export's
/// hold on the kubeconfig Secret it wrote) wakes nobody: before, each such write re-ran every
/// secret sync using that kubeconfig.
#[tokio::test]
async fn a_secrets_readers_are_woken_by_its_content_and_deletion_not_by_its_finalizers() {
    let (_sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_json(
        &client,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "kubeconfig", "namespace": NS},
            "stringData": {"value": "one"}
        }),
    )
    .await;
    let api: Api<Secret> = Api::namespaced(client.clone(), NS);
    let mut events = Box::pin(secret_changes(api.clone()));
    let wait = Duration::from_secs(3);
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "first sighting"
    );

    let hold = json!({"metadata": {"finalizers": ["omni.texashpc.com/kubeconfig-in-use"]}});
    api.patch("kubeconfig", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap_or_else(|e| panic!("hold: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_none(),
        "a finalizer wakes no reader"
    );

    let data = json!({"stringData": {"value": "two"}});
    api.patch("kubeconfig", &PatchParams::default(), &Patch::Merge(&data))
        .await
        .unwrap_or_else(|e| panic!("data: {e}"));
    assert!(next_within(&mut events, wait).await.is_some(), "new data");

    let opt_in = json!({"metadata": {"labels": {"omni.texashpc.com/sync": "true"}}});
    api.patch(
        "kubeconfig",
        &PatchParams::default(),
        &Patch::Merge(&opt_in),
    )
    .await
    .unwrap_or_else(|e| panic!("label: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "a label (the Secret policy reads labels and annotations)"
    );

    api.delete("kubeconfig", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "the deletion mark"
    );
    let release = json!({"metadata": {"finalizers": null}});
    api.patch(
        "kubeconfig",
        &PatchParams::default(),
        &Patch::Merge(&release),
    )
    .await
    .unwrap_or_else(|e| panic!("release: {e}"));
    assert!(
        next_within(&mut events, wait).await.is_some(),
        "the deletion itself"
    );
}
