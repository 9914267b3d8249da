//! The objects fault scenarios create on a [`Stack`], one call each, so a scenario names what
//! it creates and not how the JSON looks: a cluster, an export, a release of the stack's chart,
//! a Secret sync, and the exported kubeconfig's token (a secret the leak scan must know).

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::stack::{CLUSTER, CONNECTION, Stack, ours};

impl Stack {
    /// OmniCluster `name` on [`CONNECTION`] (re-checked every 5 minutes) and its control plane
    /// `<name>-cp` with the one machine `machine`.
    pub async fn create_cluster(&self, name: &str, machine: &str) {
        self.create(ours(
            "OmniCluster",
            &self.ns,
            name,
            json!({
                "connectionRef": {"name": CONNECTION},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
                "syncInterval": "5m",
            }),
        ))
        .await;
        self.create(ours(
            "OmniControlPlane",
            &self.ns,
            &format!("{name}-cp"),
            json!({"clusterRef": {"name": name}, "machines": [machine]}),
        ))
        .await;
    }

    /// OmniKubeconfigExport `name` of [`CLUSTER`] for user `automation` into the Secret `name`
    /// (24h TTL, renewed 4h before expiry, deleted with the export).
    pub async fn create_export(&self, name: &str) {
        self.create(ours(
            "OmniKubeconfigExport",
            &self.ns,
            name,
            json!({
                "clusterRef": {"name": CLUSTER},
                "targetSecretRef": {"name": name},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "24h",
                "renewBefore": "4h",
                "deletionPolicy": "Delete",
            }),
        ))
        .await;
    }

    /// The spec of a release of the stack's chart `demo` 0.1.0 (values `greeting`) into
    /// `default` of [`CLUSTER`], through the kubeconfig in Secret `kubeconfig` and the
    /// repository credentials.
    pub fn release_spec(&self, kubeconfig: &str, greeting: &str) -> Value {
        json!({
            "clusterRef": {"name": CLUSTER},
            "kubeconfigSecretRef": {"name": kubeconfig},
            "namespace": "default",
            "chart": {
                "repository": self.repo.url,
                "chart": "demo",
                "version": "0.1.0",
                "values": {"greeting": greeting},
                "credentialsSecretRef": {"name": "repo-credentials"},
                // The stack's repository is plain HTTP.
                "insecure": true,
            },
        })
    }

    /// OmniHelmRelease `name` with [`Stack::release_spec`].
    pub async fn create_release(&self, name: &str, kubeconfig: &str, greeting: &str) {
        self.create(ours(
            "OmniHelmRelease",
            &self.ns,
            name,
            self.release_spec(kubeconfig, greeting),
        ))
        .await;
    }

    /// OmniSecretSync `name` copying the Secret `registry-credentials` into `apps` (created if
    /// missing) of [`CLUSTER`] through the kubeconfig in Secret `kubeconfig`.
    pub async fn create_sync(&self, name: &str, kubeconfig: &str) {
        self.create(ours(
            "OmniSecretSync",
            &self.ns,
            name,
            json!({
                "clusterRef": {"name": CLUSTER},
                "kubeconfigSecretRef": {"name": kubeconfig, "key": "kubeconfig"},
                "sourceSecretRef": {"name": "registry-credentials"},
                "targetSecretRef": {"name": "registry-credentials", "namespace": "apps"},
                "createNamespace": true,
                "deletionPolicy": "Delete",
            }),
        ))
        .await;
    }

    /// Merge-patches object `name` of one of the operator's kinds with `body`.
    pub async fn patch(&self, kind: &str, name: &str, body: Value) {
        self.api(kind)
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patch {kind} {name}: {e}"));
    }

    /// Asks to delete object `name` of one of the operator's kinds.
    pub async fn delete(&self, kind: &str, name: &str) {
        self.api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {kind} {name}: {e}"));
    }

    /// The bearer token of the kubeconfig in the exported Secret `export`, if it has one.
    pub async fn exported_token(&self, export: &str) -> Option<String> {
        let exported = Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .get(export)
            .await
            .unwrap_or_else(|e| panic!("exported Secret {export}: {e}"));
        super::kubeconfig_token(&exported)
    }
}
