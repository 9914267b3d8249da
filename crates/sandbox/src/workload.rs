//! Workload clusters: one kube-sim per Omni cluster, started when Omni first mints a kubeconfig
//! for it, authenticating the service-account tokens omni-sim mints and authorizing them with
//! RBAC, as a real Talos cluster does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube_sim::request::{Authenticator, UserInfo};
use kube_sim::server::{KubeSim, RunningKubeSim};
use kube_sim::tls::CertificateAuthority;
use kube_sim::wiring::RbacAuthorizer;
use omni_sim::{WorkloadEndpoint, WorkloadProvider};

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

impl WorkloadProvider for Workloads {
    fn endpoint(&self, cluster: &str) -> WorkloadEndpoint {
        let existing = self.get(cluster);
        let sim = match existing {
            Some(sim) => Some(sim),
            None => {
                // Omni asks synchronously while serving a gRPC call; starting a server is
                // async, so run it to completion on this worker thread.
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
        };
        WorkloadEndpoint {
            server: sim.map_or_else(
                || "https://workload-unavailable.invalid".to_owned(),
                |s| s.base_url.clone(),
            ),
            ca_data: Some(self.ca.cert_pem().as_bytes().to_vec()),
        }
    }
}
