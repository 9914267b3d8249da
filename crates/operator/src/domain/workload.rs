//! Kubernetes clients of workload clusters, built from kubeconfig Secrets in memory.
//!
//! A client is cached per Secret key and rebuilt when the kubeconfig in it changes (a rotated
//! kubeconfig). A client nobody asked for in 15 minutes, or whose Secret or key is gone,
//! leaves the cache, and with it its connection pool. No temporary files are written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;

use crate::domain::helm::source::Limits;
use crate::domain::impersonation::{ReadError, Reader};
use crate::domain::secret_policy::{SecretPolicy, SecretUse, refusal};

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
    /// The kubeconfig does not parse, uses a field the operator refuses (see
    /// [`crate::domain::kubeconfig`]) or cannot be turned into a client. The detail names fields and
    /// positions, never credential values.
    #[error("kubeconfig in Secret {namespace}/{name} is unusable: {detail}")]
    Invalid {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Loader error.
        detail: String,
    },
    /// The object's ServiceAccount may not read the Secret (the operator impersonates it).
    #[error("{0}")]
    Denied(String),
    /// The Secret may not be used by this object (see [`crate::domain::secret_policy`]).
    #[error("{reason}")]
    Refused {
        /// Why, naming the Secret and the rule.
        reason: String,
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

/// Builds a client from kubeconfig YAML bytes (current context) whose requests are bounded by
/// `limits`. The kubeconfig is checked by [`crate::domain::kubeconfig::parse`] first: one that asks for
/// a command, a plugin or a file is refused before any client exists.
pub async fn client_from_kubeconfig(bytes: &[u8], limits: Limits) -> Result<Client, String> {
    let kubeconfig = crate::domain::kubeconfig::parse(bytes).map_err(|e| e.to_string())?;
    kubeconfig.client(limits).await
}

/// The cached client of one kubeconfig Secret key, with the SHA-256 digest of the kubeconfig it
/// was built from. Its async lock makes the cache single-flight: concurrent users of one
/// kubeconfig (hundreds of OmniSecretSyncs of one workload cluster at cold start) wait for one
/// client to be built instead of each building its own (TLS configuration, connection pool).
///
/// The digest, not the Secret's resourceVersion, decides whether the client is current: a
/// finalizer or annotation written on the Secret (an export's hold on its kubeconfig Secret)
/// changes the version but not the kubeconfig, and rebuilt the client with a new pool.
type Slot = Arc<tokio::sync::Mutex<Option<([u8; 32], Client)>>>;

/// How long a workload client stays cached without being asked for. Every object using one
/// re-checks at least every few minutes (secret syncs' resync, helm's drift check, exports'
/// probes), so only clients of workload clusters nothing uses any more go: a deleted cluster's
/// client, with its pooled connections, no longer stays for the life of the process.
pub(crate) const IDLE_EVICTION: Duration = Duration::from_secs(15 * 60);

/// A cached client and when it was last asked for.
struct Entry {
    slot: Slot,
    used: Instant,
}

/// The cache's entries, and when idle ones were last looked for.
struct Cache {
    entries: HashMap<String, Entry>,
    swept: Instant,
}

/// Cache of workload clients keyed by `namespace/secret/key`.
pub struct WorkloadClients {
    client: Client,
    /// Time bounds of every request of the clients built (`--connect-timeout`,
    /// `--read-timeout`, `--request-timeout`).
    limits: Limits,
    cache: Mutex<Cache>,
    /// Clients unused this long are dropped ([`IDLE_EVICTION`]).
    idle_eviction: Duration,
    /// Clients built so far (each a TLS configuration and a connection pool).
    built: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for WorkloadClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadClients").finish_non_exhaustive()
    }
}

impl WorkloadClients {
    /// An empty cache reading Secrets through `client` (the management cluster).
    pub fn new(client: Client) -> Self {
        Self::evicting_after(client, IDLE_EVICTION)
    }

    fn evicting_after(client: Client, idle_eviction: Duration) -> Self {
        Self {
            client,
            limits: crate::domain::tenancy::Timeouts::default().outbound(),
            cache: Mutex::new(Cache {
                entries: HashMap::new(),
                swept: Instant::now(),
            }),
            idle_eviction,
            built: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The same cache, building clients whose requests are bounded by `limits`.
    pub(crate) fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The client for the kubeconfig stored in `namespace/name` under `key`, used by an object
    /// of `kind` under `policy`, the Secret read as `reader`.
    pub(crate) async fn get(
        &self,
        reader: &Reader,
        namespace: &str,
        name: &str,
        key: &str,
        policy: &SecretPolicy,
        kind: &str,
    ) -> Result<Client, WorkloadError> {
        let ids = || (namespace.to_string(), name.to_string());
        let cache_key = format!("{namespace}/{name}/{key}");
        let read =
            crate::domain::impersonation::get::<Secret>(&self.client, reader, namespace, name);
        let secret = match read.await {
            Ok(Some(s)) => s,
            Ok(None) => {
                self.evict(&cache_key);
                let (namespace, name) = ids();
                return Err(WorkloadError::MissingSecret { namespace, name });
            }
            Err(e @ ReadError::Denied { .. }) => return Err(WorkloadError::Denied(e.to_string())),
            Err(ReadError::Api(e)) => {
                let (namespace, name) = ids();
                return Err(WorkloadError::Read {
                    namespace,
                    name,
                    detail: e.to_string(),
                });
            }
        };
        if let Some(reason) = refusal(policy, &secret, kind, SecretUse::Kubeconfig, &[]) {
            return Err(WorkloadError::Refused { reason });
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty());
        let Some(bytes) = bytes else {
            self.evict(&cache_key);
            let (namespace, name) = ids();
            return Err(WorkloadError::MissingKey {
                namespace,
                name,
                key: key.to_string(),
            });
        };
        self.client_for(cache_key, bytes).await.map_err(|detail| {
            let (namespace, name) = ids();
            WorkloadError::Invalid {
                namespace,
                name,
                detail,
            }
        })
    }

    /// The cached client of the kubeconfig `bytes` read from the Secret key `cache_key`
    /// (`namespace/name/key`), built when there is none for these bytes. The error names fields
    /// and positions only.
    pub(crate) async fn client_for(
        &self,
        cache_key: String,
        bytes: &[u8],
    ) -> Result<Client, String> {
        let digest: [u8; 32] = {
            use sha2::Digest as _;
            sha2::Sha256::digest(bytes).into()
        };
        let slot = self.slot(cache_key);
        let mut slot = slot.lock().await;
        if let Some((built_from, c)) = slot.as_ref()
            && *built_from == digest
        {
            return Ok(c.clone());
        }
        let client = client_from_kubeconfig(bytes, self.limits).await?;
        self.built
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some((digest, client.clone()));
        Ok(client)
    }

    /// The slot of `cache_key`, marked used now; first drops the entries idle for longer than
    /// the eviction time (looked for at most once per eviction time, and never one a caller
    /// holds).
    fn slot(&self, cache_key: String) -> Slot {
        let now = Instant::now();
        let mut cache = self.lock();
        if now.duration_since(cache.swept) >= self.idle_eviction {
            cache.swept = now;
            let idle = self.idle_eviction;
            cache
                .entries
                .retain(|_, e| now.duration_since(e.used) < idle || Arc::strong_count(&e.slot) > 1);
        }
        let entry = cache.entries.entry(cache_key).or_insert_with(|| Entry {
            slot: Slot::default(),
            used: now,
        });
        entry.used = now;
        entry.slot.clone()
    }

    /// Drops the client of `cache_key`: its Secret or key is gone.
    fn evict(&self, cache_key: &str) {
        self.lock().entries.remove(cache_key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
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
    use kube::Api;

    fn test_limits() -> Limits {
        crate::domain::tenancy::Timeouts::default().outbound()
    }

    /// A workload API server that accepts connections and never answers (a tarpit) holds a
    /// request only as long as the read timeout: before clients had one, kube's default kept
    /// it for almost five minutes, with a reconcile slot.
    #[tokio::test]
    async fn a_tarpit_workload_server_times_out_as_a_timeout() {
        let addr = crate::domain::test_servers::tarpit().await;
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: w\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user:\n    token: t\n"
        );
        for limits in [
            Limits {
                connect: Duration::from_secs(5),
                read: Duration::from_millis(300),
                request: Duration::from_secs(30),
            },
            Limits {
                connect: Duration::from_secs(5),
                read: Duration::from_secs(30),
                request: Duration::from_millis(300),
            },
        ] {
            let client = client_from_kubeconfig(kubeconfig.as_bytes(), limits)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let started = std::time::Instant::now();
            let err = client
                .apiserver_version()
                .await
                .err()
                .unwrap_or_else(|| panic!("the tarpit answered"));
            assert!(crate::process::api_client::is_timeout(&err), "{err:?}");
            assert!(started.elapsed() < Duration::from_secs(10), "{limits:?}");
        }
    }

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
        let client = client_from_kubeconfig(kubeconfig.as_bytes(), test_limits())
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

    /// A kubeconfig of an unreachable workload cluster, authenticating with `token`.
    fn token_kubeconfig(token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: w\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user:\n    token: {token}\n"
        )
    }

    /// A management API server holding Secret `default/prod-kubeconfig` with `kubeconfig` under
    /// `kubeconfig`, and a client of it.
    async fn management_with_kubeconfig(
        kubeconfig: &str,
    ) -> (kube_sim::server::RunningKubeSim, Client) {
        let sim = kube_sim::server::KubeSim::builder()
            .start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let uri: http::Uri = sim.base_url.parse().unwrap_or_else(|e| panic!("{e}"));
        let management = Client::try_from(kube::Config::new(uri)).unwrap_or_else(|e| panic!("{e}"));
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "prod-kubeconfig", "namespace": "default"},
            "stringData": {"kubeconfig": kubeconfig}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<Secret>::namespaced(management.clone(), "default")
            .create(&Default::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (sim, management)
    }

    /// The client of `default/prod-kubeconfig` (see [`management_with_kubeconfig`]), for an
    /// OmniSecretSync.
    async fn prod_client(
        clients: &WorkloadClients,
        policy: &SecretPolicy,
    ) -> Result<Client, WorkloadError> {
        clients
            .get(
                &Reader::Operator,
                "default",
                "prod-kubeconfig",
                "kubeconfig",
                policy,
                "OmniSecretSync",
            )
            .await
    }

    /// Hundreds of OmniSecretSyncs of one workload cluster reconcile at once at cold start: they
    /// share one client, built once. Before the cache was single-flight each concurrent caller
    /// built its own (this test counted 50 builds), which at 3,000 syncs cost gigabytes.
    #[tokio::test]
    async fn concurrent_users_of_one_kubeconfig_share_one_client() {
        let (_sim, management) =
            management_with_kubeconfig(&token_kubeconfig("workload-token")).await;
        let clients = WorkloadClients::new(management);
        let policy = SecretPolicy::default();
        let users = (0..50).map(|_| prod_client(&clients, &policy));
        for result in futures::future::join_all(users).await {
            assert!(result.is_ok(), "{:?}", result.err());
        }
        assert_eq!(clients.built.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// An export holds its kubeconfig Secret with a finalizer, and annotations come and go: the
    /// Secret's resourceVersion moves, the kubeconfig does not, and the client (its TLS
    /// configuration and connection pool) is kept. A new kubeconfig builds a new one. Before,
    /// the cache compared resourceVersions and built a second client here.
    #[tokio::test]
    async fn a_client_is_rebuilt_for_a_new_kubeconfig_not_for_new_metadata() {
        let (_sim, management) = management_with_kubeconfig(&token_kubeconfig("one")).await;
        let secrets = Api::<Secret>::namespaced(management.clone(), "default");
        let clients = WorkloadClients::new(management);
        let policy = SecretPolicy::default();
        let get = || prod_client(&clients, &policy);
        let built = || clients.built.load(std::sync::atomic::Ordering::Relaxed);
        let patch = |body: serde_json::Value| {
            let secrets = secrets.clone();
            async move {
                secrets
                    .patch(
                        "prod-kubeconfig",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&body),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        };
        get().await.unwrap_or_else(|e| panic!("{e}"));
        patch(serde_json::json!({"metadata": {
            "finalizers": ["omni.texashpc.com/kubeconfig-in-use"],
            "annotations": {"touched": "yes"}
        }}))
        .await;
        get().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(built(), 1, "new metadata, same kubeconfig: the same client");
        patch(serde_json::json!({"stringData": {"kubeconfig": token_kubeconfig("two")}})).await;
        get().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(built(), 2, "a new kubeconfig: a new client");
    }

    /// A client nobody asks for leaves the cache after the eviction time, and one whose Secret
    /// is deleted at once: before, every workload client stayed for the life of the process.
    #[tokio::test]
    async fn idle_clients_and_clients_of_deleted_secrets_leave_the_cache() {
        let (_sim, management) = management_with_kubeconfig(&token_kubeconfig("one")).await;
        let secrets = Api::<Secret>::namespaced(management.clone(), "default");
        let clients = WorkloadClients::evicting_after(management, Duration::from_millis(200));
        let policy = SecretPolicy::default();
        let cached = || clients.lock().entries.len();
        let built = || clients.built.load(std::sync::atomic::Ordering::Relaxed);

        prod_client(&clients, &policy)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        prod_client(&clients, &policy)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((cached(), built()), (1, 1), "in use: kept");
        tokio::time::sleep(Duration::from_millis(300)).await;
        prod_client(&clients, &policy)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            built(),
            2,
            "idle past the eviction time: dropped, then built anew"
        );

        secrets
            .delete("prod-kubeconfig", &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let gone = prod_client(&clients, &policy).await;
        assert!(
            matches!(gone, Err(WorkloadError::MissingSecret { .. })),
            "{:?}",
            gone.err()
        );
        assert_eq!(cached(), 0, "the Secret is gone: so is its client");
    }

    /// The export's probe of a stored (possibly adopted) kubeconfig goes through here too.
    #[tokio::test]
    async fn exec_kubeconfig_is_refused_before_any_client_exists() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let marker = dir.path().join("ran");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: w\n  context:\n    cluster: w\n    user: u\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\n",
            marker.display()
        );
        let result = client_from_kubeconfig(kubeconfig.as_bytes(), test_limits()).await;
        if let Ok(client) = &result {
            let _ = client.apiserver_version().await;
        }
        assert!(!marker.exists(), "the exec plugin ran");
        let err = result
            .err()
            .unwrap_or_else(|| panic!("an exec kubeconfig became a client"));
        assert!(err.contains("users[0].user.exec"), "{err}");
    }

    #[tokio::test]
    async fn unusable_kubeconfig_is_an_error_without_its_content() {
        let err = client_from_kubeconfig(
            b"users: [{name: u, user: {token: s3cr3t}}]\ncurrent-context: missing\n",
            test_limits(),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("a kubeconfig without its context must not load"));
        assert!(!err.contains("s3cr3t"), "{err}");
    }
}
