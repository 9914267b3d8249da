//! Workload clusters: one kube-sim per Omni cluster, started when Omni first mints a kubeconfig
//! for it or syncs its manifests, authenticating the service-account tokens omni-sim mints and
//! authorizing them with RBAC, as a real Talos cluster does. The cluster template's manifests
//! are written into it as Omni's manifest sync writes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube_sim::request::{Authenticator, UserInfo};
use kube_sim::server::{KubeSim, RunningKubeSim};
use kube_sim::store::{Preconditions, ResourceType, Store};
use kube_sim::tls::CertificateAuthority;
use kube_sim::wiring::RbacAuthorizer;
use omni_sim::{ManifestSink, WorkloadEndpoint, WorkloadProvider};
use serde_json::Value;

/// Accepts bearer tokens minted by omni-sim for one cluster, until they expire.
#[derive(Debug, Clone)]
struct OmniTokenAuthenticator {
    cluster: String,
}

impl Authenticator for OmniTokenAuthenticator {
    fn authenticate(
        &self,
        headers: &http::HeaderMap,
        _peer_cert_der: Option<&[u8]>,
    ) -> Option<UserInfo> {
        let token = headers
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?;
        let claims = omni_sim::token::decode(token)?;
        if claims.cluster != self.cluster || claims.is_expired(jiff::Timestamp::now()) {
            return None;
        }
        let mut groups = claims.groups;
        groups.push("system:authenticated".to_owned());
        Some(UserInfo {
            name: claims.user,
            groups,
        })
    }
}

/// The group the sample OmniKubeconfigExport gives its automation user (the kubeconfig the
/// sample OmniHelmRelease and OmniSecretSync use). Each workload cluster binds it to
/// `cluster-admin` at start, the binding a platform team creates when bootstrapping a cluster;
/// every other exported group has only what RBAC objects created later grant.
pub const AUTOMATION_GROUP: &str = "cluster-automation";

/// The ClusterRoleBinding each workload cluster starts with.
fn automation_binding() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "sandbox-cluster-automation"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": AUTOMATION_GROUP}],
    })
}

/// Starts and remembers the workload kube-sims.
pub struct Workloads {
    ca: CertificateAuthority,
    clusters: Mutex<HashMap<String, Arc<RunningKubeSim>>>,
}

impl Workloads {
    /// A provider whose clusters' certificates come from `ca`.
    pub fn new(ca: CertificateAuthority) -> Self {
        Self {
            ca,
            clusters: Mutex::new(HashMap::new()),
        }
    }

    /// The running workload clusters, by Omni cluster name.
    pub fn clusters(&self) -> Vec<(String, String)> {
        let map = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(String, String)> = map
            .iter()
            .map(|(k, v)| (k.clone(), v.base_url.clone()))
            .collect();
        out.sort();
        out
    }

    /// The workload kube-sim of `cluster`, if started.
    pub fn get(&self, cluster: &str) -> Option<Arc<RunningKubeSim>> {
        self.clusters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .cloned()
    }

    async fn start(&self, cluster: &str) -> anyhow::Result<Arc<RunningKubeSim>> {
        let serving = self.ca.issue_server(&["localhost", "127.0.0.1"])?;
        let sim = KubeSim::builder()
            .tls(self.ca.server_config(&serving)?)
            .authenticator(Arc::new(OmniTokenAuthenticator {
                cluster: cluster.to_owned(),
            }))
            .authorizer(Arc::new(RbacAuthorizer))
            .start()
            .await?;
        sim.store().create(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
            automation_binding(),
        )?;
        tracing::info!(cluster, url = %sim.base_url, "started a workload cluster");
        Ok(Arc::new(sim))
    }
}

impl Workloads {
    /// The workload kube-sim of `cluster`, started now if it is not running yet.
    fn get_or_start(&self, cluster: &str) -> Option<Arc<RunningKubeSim>> {
        if let Some(sim) = self.get(cluster) {
            return Some(sim);
        }
        // Omni asks synchronously (while serving a gRPC call, or in a controller pass);
        // starting a server is async, so run it to completion on this worker thread.
        let started = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.start(cluster))
        });
        match started {
            Ok(sim) => {
                let mut map = self.clusters.lock().unwrap_or_else(|p| p.into_inner());
                Some(map.entry(cluster.to_owned()).or_insert(sim).clone())
            }
            Err(e) => {
                tracing::error!(cluster, error = %e, "cannot start a workload cluster");
                None
            }
        }
    }
}

impl WorkloadProvider for Workloads {
    fn endpoint(&self, cluster: &str) -> WorkloadEndpoint {
        WorkloadEndpoint {
            server: self.get_or_start(cluster).map_or_else(
                || "https://workload-unavailable.invalid".to_owned(),
                |s| s.base_url.clone(),
            ),
            ca_data: Some(self.ca.cert_pem().as_bytes().to_vec()),
        }
    }
}

/// Omni's manifest sync writes the cluster template's manifests into the workload cluster.
/// It acts with full rights inside the cluster (Omni's own identity), so the objects are
/// written to the workload kube-sim's store directly, as its admin would.
impl ManifestSink for Workloads {
    fn sync(&self, cluster: &str, apply: &[Value], prune: &[Value]) -> Result<(), String> {
        let sim = self
            .get_or_start(cluster)
            .ok_or_else(|| format!("the Kubernetes API of cluster {cluster} is unavailable"))?;
        let store = sim.store();
        for object in apply {
            let (ty, namespace, name) = locate(store, object)?;
            let namespace = namespace.as_deref();
            let result = match store.get_object(&ty.group, &ty.plural, namespace, &name) {
                None => store.create(&ty.group, &ty.plural, namespace, object.clone()),
                Some(_) => store.update(&ty.group, &ty.plural, namespace, &name, object.clone()),
            };
            result.map_err(|e| format!("applying {} {name}: {e}", ty.kind))?;
        }
        for object in prune {
            let (ty, namespace, name) = locate(store, object)?;
            let gone = store.delete(
                &ty.group,
                &ty.plural,
                namespace.as_deref(),
                &name,
                &Preconditions::default(),
            );
            if let Err(e) = gone
                && e.code != 404
            {
                return Err(format!("deleting {} {name}: {e}", ty.kind));
            }
        }
        tracing::info!(
            cluster,
            applied = apply.len(),
            pruned = prune.len(),
            "synced the cluster's manifests into its workload cluster"
        );
        Ok(())
    }
}

/// The resource type, namespace and name of `object` in `store`. Namespaced objects without
/// a namespace go to `default`, as Omni's manifest sync places them.
fn locate(store: &Store, object: &Value) -> Result<(ResourceType, Option<String>, String), String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ty = store
        .types()
        .into_iter()
        .find(|t| t.group == group && t.version == version && t.kind == kind)
        .ok_or_else(|| format!("no matches for kind \"{kind}\" in version \"{api_version}\""))?;
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let namespace = ty.namespaced.then(|| {
        object["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_string()
    });
    Ok((ty, namespace, name))
}
