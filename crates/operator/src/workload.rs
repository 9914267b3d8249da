//! Kubernetes clients of workload clusters, built from kubeconfig Secrets in memory.
//!
//! A client is cached per Secret and rebuilt when the Secret's resourceVersion changes (a
//! rotated kubeconfig). No temporary files are written.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Why no workload client could be built.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The kubeconfig Secret does not exist.
    #[error("kubeconfig Secret {namespace}/{name} not found")]
    MissingSecret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The Secret lacks the key or it is empty.
    #[error("kubeconfig Secret {namespace}/{name} has no data under key {key:?}")]
    MissingKey {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Key.
        key: String,
    },
    /// The kubeconfig does not parse or cannot be turned into a client. The detail comes from
    /// kube-rs' loader and names fields, not credential values.
    #[error("kubeconfig in Secret {namespace}/{name} is unusable: {detail}")]
    Invalid {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Loader error.
        detail: String,
    },
    /// Reading the Secret failed.
    #[error("read kubeconfig Secret {namespace}/{name}: {detail}")]
    Read {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// API error.
        detail: String,
    },
}

/// Builds a client from kubeconfig YAML bytes (current context).
pub async fn client_from_kubeconfig(bytes: &[u8]) -> Result<Client, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "kubeconfig is not UTF-8".to_string())?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

/// Cache of workload clients keyed by `namespace/secret/key`.
pub struct WorkloadClients {
    client: Client,
    cache: Mutex<HashMap<String, (String, Client)>>,
}

impl std::fmt::Debug for WorkloadClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadClients").finish_non_exhaustive()
    }
}

impl WorkloadClients {
    /// An empty cache reading Secrets through `client` (the management cluster).
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::default(),
        }
    }

    /// The client for the kubeconfig stored in `namespace/name` under `key`.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Client, WorkloadError> {
        let ids = || (namespace.to_string(), name.to_string());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = match secrets.get_opt(name).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                let (namespace, name) = ids();
                return Err(WorkloadError::MissingSecret { namespace, name });
            }
            Err(e) => {
                let (namespace, name) = ids();
                return Err(WorkloadError::Read {
                    namespace,
                    name,
                    detail: e.to_string(),
                });
            }
        };
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let cache_key = format!("{namespace}/{name}/{key}");
        if let Some((v, c)) = self.lock().get(&cache_key)
            && *v == version
        {
            return Ok(c.clone());
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .filter(|b| !b.is_empty());
        let Some(bytes) = bytes else {
            let (namespace, name) = ids();
            return Err(WorkloadError::MissingKey {
                namespace,
                name,
                key: key.to_string(),
            });
        };
        let client = client_from_kubeconfig(&bytes).await.map_err(|detail| {
            let (namespace, name) = ids();
            WorkloadError::Invalid {
                namespace,
                name,
                detail,
            }
        })?;
        self.lock().insert(cache_key, (version, client.clone()));
        Ok(client)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Client)>> {
        match self.cache.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use axum::Router;
    use axum::http::HeaderMap;
    use axum::routing::get;

    #[tokio::test]
    async fn kubeconfig_bytes_become_a_client_that_sends_its_token() {
        let seen: Arc<Mutex<Option<String>>> = Arc::default();
        let recorder = seen.clone();
        let router = Router::new().route(
            "/version",
            get(move |headers: HeaderMap| {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                if let Ok(mut slot) = recorder.lock() {
                    *slot = auth;
                }
                async {
                    axum::Json(serde_json::json!({
                        "major": "1", "minor": "35", "gitVersion": "v1.35.0", "gitCommit": "",
                        "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "",
                        "platform": "linux/amd64"
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: w\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user:\n    token: workload-token\n"
        );
        let client = client_from_kubeconfig(kubeconfig.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let version = client
            .apiserver_version()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(version.git_version, "v1.35.0");
        let auth = seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(auth.as_deref(), Some("Bearer workload-token"));
    }

    #[tokio::test]
    async fn unusable_kubeconfig_is_an_error_without_its_content() {
        let err = client_from_kubeconfig(
            b"users: [{name: u, user: {token: s3cr3t}}]\ncurrent-context: missing\n",
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("a kubeconfig without its context must not load"));
        assert!(!err.contains("s3cr3t"), "{err}");
    }
}
