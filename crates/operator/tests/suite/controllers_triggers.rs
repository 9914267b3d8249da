//! What wakes the objects that refer to an OmniCluster (its secret syncs, releases, exports and
//! children): a change of the cluster itself or one of its conditions turning, never the rest of
//! its status moving with Omni. Before, every status write of a cluster re-ran all of them; at
//! 300 clusters with 10 syncs each, an edit took seconds to reach Omni behind that fan-out
//! (`omni-bench`, change latency). Waking on nothing from the status went too far: an export
//! waiting for its cluster to reach Omni then waited out its error backoff (up to 20 s in the
//! bench's cold start) after the cluster's `Synced` turned `True`. Secret syncs, which read only
//! the cluster's name in Omni, are woken by nothing else of it.

use crate::support;

use std::fmt::Debug;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use omni_operator::api::OmniCluster;
use omni_operator::controllers::{ClusterTrigger, cluster_changes, secret_changes};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::{create_json, install_operator_api, kube_sim};

const NS: &str = "triggers";

/// How long a change has to come through the filtered stream.
const WAIT: Duration = Duration::from_secs(3);

/// One object `name` of kind `K` and a filtered stream of its watch events: the scenario
/// changes the object and says which changes come through.
struct Watched<K> {
    api: Api<K>,
    name: &'static str,
    events: Pin<Box<dyn Stream<Item = K> + Send>>,
}

impl<K> Watched<K>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    fn new(
        api: Api<K>,
        name: &'static str,
        events: impl Stream<Item = K> + Send + 'static,
    ) -> Self {
        Self {
            api,
            name,
            events: Box::pin(events),
        }
    }

    /// The next event within [`WAIT`], if any.
    async fn next(&mut self) -> Option<K> {
        match tokio::time::timeout(WAIT, self.events.next()).await {
            Ok(Some(o)) => Some(o),
            Ok(None) => panic!("the watch ended"),
            Err(_) => None,
        }
    }

    /// Asserts that the last change came through (`what` says which), and returns it.
    async fn wakes(&mut self, what: &str) -> K {
        self.next()
            .await
            .unwrap_or_else(|| panic!("{what}: nothing came through"))
    }

    /// Asserts that the last change did not come through (`what` says which).
    async fn wakes_nobody(&mut self, what: &str) {
        if let Some(o) = self.next().await {
            panic!("{what}: came through as {o:?}");
        }
    }

    /// Merge-patches the object with `body`.
    async fn patch(&self, body: Value) {
        self.api
            .patch(self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patch {body}: {e}"));
    }

    /// Merge-patches the object's status with `body`.
    async fn patch_status(&self, body: Value) {
        self.api
            .patch_status(self.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patch status {body}: {e}"));
    }

    /// Deletes the object, which a finalizer holds: the deletion mark comes through, then,
    /// once the finalizer is lifted, the deletion itself.
    async fn delete_past_its_finalizer(&mut self) {
        self.api
            .delete(self.name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete: {e}"));
        let marked = self.wakes("the deletion mark").await;
        assert!(
            marked.meta().deletion_timestamp.is_some(),
            "the deletion mark: {marked:?}"
        );
        self.patch(json!({"metadata": {"finalizers": null}})).await;
        self.wakes("the deletion itself").await;
    }
}

/// Creates OmniCluster `prod` (held by a finalizer) and watches it through `trigger`.
async fn watched_cluster(client: &kube::Client, trigger: ClusterTrigger) -> Watched<OmniCluster> {
    create_json(
        client,
        json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "prod", "namespace": NS, "finalizers": ["test/hold"]},
            "spec": {"connectionRef": {"name": "omni"},
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}
        }),
    )
    .await;
    let api: Api<OmniCluster> = Api::namespaced(client.clone(), NS);
    Watched::new(api, "prod", cluster_changes(client.clone(), NS, trigger))
}

/// Condition `Synced` with `status` and `message`, as a status patch.
fn synced(status: &str, message: &str) -> Value {
    json!({"status": {"conditions": [{
        "type": "Synced", "status": status, "reason": "Synced", "message": message,
        "lastTransitionTime": "2026-11-25T00:00:00Z", "observedGeneration": 1
    }]}})
}

#[tokio::test]
async fn a_clusters_dependants_are_woken_by_its_changes_conditions_and_deletion_not_by_the_rest_of_its_status()
 {
    let (_sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    let mut cluster = watched_cluster(&client, ClusterTrigger::ChangesAndConditions).await;

    let first = cluster.wakes("first sighting").await;
    assert_eq!(first.name_any(), "prod", "first sighting");

    cluster
        .patch_status(
            json!({"status": {"clusterName": "prod", "lastStatusOutput": "phase RUNNING"}}),
        )
        .await;
    cluster
        .wakes_nobody("a status write wakes no dependant")
        .await;

    cluster.patch_status(synced("False", "waiting")).await;
    cluster.wakes("a new condition wakes the dependants").await;
    cluster.patch_status(synced("False", "still waiting")).await;
    cluster
        .wakes_nobody("a condition's message alone wakes no dependant")
        .await;
    cluster.patch_status(synced("True", "synced")).await;
    cluster
        .wakes("a condition turning wakes the dependants")
        .await;

    cluster
        .patch(json!({"spec": {"features": {"enableWorkloadProxy": true}}}))
        .await;
    let changed = cluster.wakes("a spec change").await;
    assert_eq!(changed.metadata.generation, Some(2), "a spec change");

    cluster.delete_past_its_finalizer().await;
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
    let mut cluster = watched_cluster(&client, ClusterTrigger::Identity).await;
    cluster.wakes("first sighting").await;

    cluster.patch_status(synced("True", "synced")).await;
    cluster
        .wakes_nobody("a condition turning wakes no secret sync")
        .await;

    cluster
        .patch(json!({"spec": {"features": {"enableWorkloadProxy": true},
                                "kubernetes": {"version": "v1.35.1"}}}))
        .await;
    cluster
        .wakes_nobody("a spec change that leaves its name wakes no secret sync")
        .await;

    cluster
        .patch(json!({"spec": {"clusterName": "prod-omni"}}))
        .await;
    let renamed = cluster.wakes("its name in Omni").await;
    assert_eq!(renamed.effective_cluster_name(), "prod-omni");

    cluster.delete_past_its_finalizer().await;
}

/// The connection reads only which connection a cluster names (for its key's hold and a waiting
/// deletion): neither the cluster's status nor the rest of its spec wakes it. Before, every
/// status write of every cluster re-ran the connection's pass, which listed every cluster and
/// every Secret of the namespace and pinged Omni: at 1,000 clusters, the largest allocation
/// of a cold start.
#[tokio::test]
async fn a_clusters_connection_is_woken_by_the_connection_it_names_and_its_deletion_only() {
    let (_sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    let mut cluster = watched_cluster(&client, ClusterTrigger::Connection).await;
    cluster.wakes("first sighting").await;

    cluster.patch_status(synced("True", "synced")).await;
    cluster
        .patch_status(json!({"status": {"lastStatusOutput": "phase RUNNING"}}))
        .await;
    cluster.wakes_nobody("its status wakes no connection").await;

    cluster
        .patch(json!({"spec": {"kubernetes": {"version": "v1.35.1"}}}))
        .await;
    cluster
        .wakes_nobody("a spec change that keeps its connection wakes no connection")
        .await;

    cluster
        .patch(json!({"spec": {"connectionRef": {"name": "other"}}}))
        .await;
    let moved = cluster.wakes("the connection it names").await;
    assert_eq!(moved.spec.connection_ref.name, "other");

    cluster.delete_past_its_finalizer().await;
}

/// A Secret wakes the objects that read it (secret syncs) when its content can matter to them:
/// its data, labels or annotations, its deletion. The operator's own hold added or lifted (an
/// export's on the kubeconfig Secret it wrote) wakes nobody: before, each such write re-ran
/// every secret sync using that kubeconfig. The watch is of metadata only, so a change of data
/// shows as a write that left the metadata alone; someone else's finalizer still wakes.
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
    // The watch hands over metadata; the test's handle patches the Secret itself.
    let metadata_only = secret_changes(client.clone(), NS).map(|m| Secret {
        metadata: m.metadata,
        ..Secret::default()
    });
    let mut secret = Watched::new(api, "kubeconfig", metadata_only);
    let first = secret.wakes("first sighting").await;
    assert!(first.data.is_none());

    secret
        .patch(json!({"metadata": {"finalizers": ["omni.texashpc.com/kubeconfig-in-use"]}}))
        .await;
    secret
        .wakes_nobody("the operator's hold wakes no reader")
        .await;

    secret.patch(json!({"stringData": {"value": "two"}})).await;
    secret.wakes("new data").await;

    secret
        .patch(json!({"metadata": {"finalizers": ["example.com/keep"]}}))
        .await;
    secret
        .wakes("a finalizer not the operator's (the write may have changed more)")
        .await;

    secret
        .patch(json!({"metadata": {"finalizers": ["example.com/keep", "omni.texashpc.com/kubeconfig-in-use"]}}))
        .await;
    secret.wakes_nobody("the hold put back").await;

    secret
        .patch(json!({"stringData": {"value": "three"}}))
        .await;
    secret.wakes("new data beside the hold").await;

    secret
        .patch(json!({"metadata": {"finalizers": ["example.com/keep"]}}))
        .await;
    secret.wakes_nobody("the hold lifted").await;

    secret
        .patch(json!({"metadata": {"labels": {"omni.texashpc.com/sync": "true"}}}))
        .await;
    secret
        .wakes("a label (the Secret policy reads labels and annotations)")
        .await;

    secret.delete_past_its_finalizer().await;
}
