//! The deterministic fleet: every object the bench applies, and what Omni and the workload
//! clusters must hold once the operator has converged. The same [`FleetSpec`] always yields
//! the same objects, so runs (and variants of one run) are comparable.

use serde_json::{Value, json};

/// Namespace the fleet lives in and the operator watches.
pub const NAMESPACE: &str = "omni-bench";
/// Name of the one OmniConnection every cluster uses.
pub const CONNECTION: &str = "bench-omni";
/// Secret holding the Omni service-account key.
pub const OMNI_KEY_SECRET: &str = "bench-omni-key";
/// Namespace the synced Secrets land in on the workload clusters.
pub const TARGET_NAMESPACE: &str = "bench";
/// Group the exported kubeconfigs carry; each workload cluster binds it to cluster-admin.
pub const AUTOMATION_GROUP: &str = omni_sandbox::workload::AUTOMATION_GROUP;

/// How big the fleet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FleetSpec {
    /// OmniClusters, each with an OmniControlPlane, OmniWorkers and an OmniMachine.
    pub clusters: usize,
    /// OmniSecretSyncs, spread round-robin over the workload clusters.
    pub syncs: usize,
    /// Clusters (the first ones) that get an OmniKubeconfigExport and receive synced Secrets.
    pub workload_clusters: usize,
    /// OmniHelmReleases, spread round-robin over the workload clusters.
    pub helm_releases: usize,
    /// The fleet-set scenario ([`crate::sets`]): one OmniHelmReleaseSet and one
    /// OmniSecretSyncSet with minted credentials over every cluster.
    pub sets: bool,
}

impl FleetSpec {
    /// Checks the sizes fit together.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.clusters > 0, "--clusters must be at least 1");
        anyhow::ensure!(
            self.workload_clusters <= self.clusters,
            "--workload-clusters ({}) cannot exceed --clusters ({})",
            self.workload_clusters,
            self.clusters
        );
        anyhow::ensure!(
            self.workload_clusters > 0 || (self.syncs == 0 && self.helm_releases == 0),
            "--syncs and --helm-releases need at least one --workload-clusters"
        );
        Ok(())
    }

    /// Number of custom resources the operator reconciles (with the sets, the objects they
    /// generate too).
    pub fn objects(&self) -> usize {
        1 + self.clusters * 4
            + self.workload_clusters
            + self.syncs
            + self.helm_releases
            + crate::sets::objects_with(self, self.clusters)
    }

    /// Whether the fleet needs helm and a chart repository.
    pub fn needs_helm(&self) -> bool {
        self.helm_releases > 0 || self.sets
    }
}

/// Name of cluster `i`.
pub fn cluster_name(i: usize) -> String {
    format!("c-{i:05}")
}

/// Name of sync `j` (also its source Secret's and its target Secret's name).
pub fn sync_name(j: usize) -> String {
    format!("s-{j:06}")
}

/// Name of helm release `k`.
pub fn helm_name(k: usize) -> String {
    format!("h-{k:05}")
}

/// The exported kubeconfig Secret of workload cluster `i`.
pub fn kubeconfig_secret(i: usize) -> String {
    format!("{}-kubeconfig", cluster_name(i))
}

/// The workload cluster (index) sync `j` writes to.
pub fn sync_cluster(spec: &FleetSpec, j: usize) -> usize {
    j % spec.workload_clusters
}

/// The machine ID of cluster `i`'s control-plane (`role` 0) or worker (`role` 1) machine.
pub fn machine_id(i: usize, role: u8) -> String {
    format!("{:08x}-0000-4000-8{:03x}-{:012x}", i, role, i)
}

/// The data of source Secret `j` at edit `revision` (0 when applied).
pub fn source_value(j: usize, revision: u64) -> String {
    format!("bench-value-{j}-r{revision}")
}

/// One object to create: its kind and its JSON.
#[derive(Debug, Clone)]
pub struct Object {
    /// Kind (`Secret` or one of the operator's kinds).
    pub kind: &'static str,
    /// The manifest.
    pub manifest: Value,
}

fn meta(name: &str) -> Value {
    json!({"name": name, "namespace": NAMESPACE})
}

fn custom_labelled(kind: &'static str, name: &str, labels: Option<Value>, spec: Value) -> Object {
    let mut object = custom(kind, name, spec);
    if let Some(labels) = labels {
        object.manifest["metadata"]["labels"] = labels;
    }
    object
}

/// A custom resource of the operator's group in the fleet's namespace.
pub(crate) fn custom(kind: &'static str, name: &str, spec: Value) -> Object {
    Object {
        kind,
        manifest: json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": kind,
            "metadata": meta(name),
            "spec": spec,
        }),
    }
}

/// The source Secret of sync `j`.
pub fn source_secret(j: usize, revision: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(&sync_name(j)),
        "type": "Opaque",
        "stringData": {"value": source_value(j, revision)},
    })
}

/// Every object of the fleet in creation order (what is referenced comes first), except the
/// Omni key Secret, which needs the key omni-sim mints.
pub fn objects(spec: &FleetSpec, omni_endpoint: &str, chart_repo: Option<&str>) -> Vec<Object> {
    let mut out = Vec::with_capacity(spec.objects() + spec.syncs);
    out.push(custom(
        "OmniConnection",
        CONNECTION,
        json!({
            "endpoint": omni_endpoint,
            "auth": {"serviceAccountSecretRef": {"name": OMNI_KEY_SECRET, "key": "serviceAccountKey"}},
        }),
    ));
    for i in 0..spec.clusters {
        let name = cluster_name(i);
        out.push(custom_labelled(
            "OmniCluster",
            &name,
            crate::sets::cluster_labels(spec),
            json!({
                "connectionRef": {"name": CONNECTION},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
                "features": {"enableWorkloadProxy": false},
            }),
        ));
        out.push(custom(
            "OmniControlPlane",
            &format!("{name}-cp"),
            json!({"clusterRef": {"name": name}, "machines": [machine_id(i, 0)]}),
        ));
        out.push(custom(
            "OmniWorkers",
            &format!("{name}-workers"),
            json!({"clusterRef": {"name": name}, "workerSetName": "workers", "machines": [machine_id(i, 1)]}),
        ));
        out.push(custom(
            "OmniMachine",
            &format!("{name}-cp-0"),
            json!({"clusterRef": {"name": name}, "machineID": machine_id(i, 0), "install": {"disk": "/dev/vda"}}),
        ));
    }
    for i in 0..spec.workload_clusters {
        out.push(custom(
            "OmniKubeconfigExport",
            &kubeconfig_secret(i),
            json!({
                "clusterRef": {"name": cluster_name(i)},
                "targetSecretRef": {"name": kubeconfig_secret(i)},
                "serviceAccount": {"user": "bench-automation", "groups": [AUTOMATION_GROUP]},
                "ttl": "24h",
                "renewBefore": "4h",
                "deletionPolicy": "Delete",
            }),
        ));
    }
    for j in 0..spec.syncs {
        out.push(Object {
            kind: "Secret",
            manifest: source_secret(j, 0),
        });
        let i = sync_cluster(spec, j);
        out.push(custom(
            "OmniSecretSync",
            &sync_name(j),
            json!({
                "clusterRef": {"name": cluster_name(i)},
                "kubeconfigSecretRef": {"name": kubeconfig_secret(i), "key": "kubeconfig"},
                "sourceSecretRef": {"name": sync_name(j)},
                "targetSecretRef": {"name": sync_name(j), "namespace": TARGET_NAMESPACE},
                "createNamespace": true,
                "deletionPolicy": "Delete",
            }),
        ));
    }
    if let Some(repo) = chart_repo {
        for k in 0..spec.helm_releases {
            let i = k % spec.workload_clusters;
            out.push(custom(
                "OmniHelmRelease",
                &helm_name(k),
                json!({
                    "clusterRef": {"name": cluster_name(i)},
                    "kubeconfigSecretRef": {"name": kubeconfig_secret(i), "key": "kubeconfig"},
                    "releaseName": helm_name(k),
                    "namespace": TARGET_NAMESPACE,
                    "chart": {"repository": repo, "chart": crate::emulators::CHART, "version": crate::emulators::CHART_VERSION},
                    "createNamespace": true,
                    "deletionPolicy": "Uninstall",
                }),
            ));
        }
    }
    if spec.sets {
        out.extend(crate::sets::objects(chart_repo.unwrap_or_default()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_spec_yields_the_same_objects() {
        let spec = FleetSpec {
            clusters: 3,
            syncs: 5,
            workload_clusters: 2,
            helm_releases: 0,
            sets: false,
        };
        let a: Vec<Value> = objects(&spec, "http://omni", None)
            .into_iter()
            .map(|o| o.manifest)
            .collect();
        let b: Vec<Value> = objects(&spec, "http://omni", None)
            .into_iter()
            .map(|o| o.manifest)
            .collect();
        assert_eq!(a, b);
        // One connection, four objects per cluster, one export per workload cluster, and a
        // source Secret beside every sync.
        assert_eq!(a.len(), 1 + 3 * 4 + 2 + 5 * 2);
        assert_eq!(spec.objects(), 1 + 3 * 4 + 2 + 5);
    }

    #[test]
    fn syncs_are_spread_over_the_workload_clusters() {
        let spec = FleetSpec {
            clusters: 10,
            syncs: 7,
            workload_clusters: 3,
            helm_releases: 0,
            sets: false,
        };
        let per: Vec<usize> = (0..3)
            .map(|i| (0..7).filter(|&j| sync_cluster(&spec, j) == i).count())
            .collect();
        assert_eq!(per, vec![3, 2, 2]);
    }

    #[test]
    fn machine_ids_are_distinct_uuids() {
        let ids: std::collections::BTreeSet<String> = (0..100)
            .flat_map(|i| [machine_id(i, 0), machine_id(i, 1)])
            .collect();
        assert_eq!(ids.len(), 200);
        assert!(ids.iter().all(|id| id.len() == 36));
    }

    #[test]
    fn more_workload_clusters_than_clusters_is_refused() {
        let spec = FleetSpec {
            clusters: 2,
            syncs: 1,
            workload_clusters: 3,
            helm_releases: 0,
            sets: false,
        };
        let err = spec.validate().unwrap_err().to_string();
        assert!(err.contains("--workload-clusters"), "{err}");
    }
}
