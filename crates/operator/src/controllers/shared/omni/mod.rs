//! Omni clients per OmniConnection, the status watch on each client's connection, and the
//! service-account key rules of the connection Secret.
//!
//! A client is reused while the key, the endpoint and the TLS flag stay the same; any change
//! rebuilds it (and its status watch). The key itself is never logged or put in a message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Secret;
use omni_client::template::{BackendApi, StatusWatch};
use omni_client::{Client as OmniClient, ClientConfig};

use crate::api::OmniConnection;

mod key;

pub(crate) use self::key::ConnectionError;
pub(crate) use self::key::key_from_secret;

/// What an Omni client is built from. Not the Secret's resourceVersion: a change of its
/// metadata alone (the connection controller's own `omni-key-in-use` finalizer, a label)
/// would open a new connection to Omni for the same key.
#[derive(Clone, PartialEq, Eq)]
struct Fingerprint {
    key_digest: [u8; 32],
    key: String,
    endpoint: String,
    insecure: bool,
}

/// A cached client: what it was built from, and the status watch on its connection once a
/// cluster's pass asked for it.
struct Entry {
    fingerprint: Fingerprint,
    client: OmniClient,
    status: Option<Arc<StatusWatch>>,
}

/// A cluster whose health in a connection's Omni changed since the operator last read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusChange {
    /// The OmniConnection's namespace.
    pub(crate) namespace: String,
    /// The OmniConnection's name.
    pub(crate) connection: String,
    /// The cluster's name in Omni.
    pub(crate) cluster: String,
}

type StatusSink = Arc<Mutex<Option<mpsc::UnboundedSender<StatusChange>>>>;

/// Cache of Omni clients keyed by `namespace/connection`, with the backend API version each
/// connection's Omni reported.
pub(crate) struct OmniClients {
    client: kube::Client,
    /// Connect and unary-call bounds of every client built (`--omni-connect-timeout`,
    /// `--omni-request-timeout`).
    timeouts: (std::time::Duration, std::time::Duration),
    /// `--default-service-account`: whose identity reads a connection's key Secret when the
    /// connection names none.
    default_service_account: Option<String>,
    cache: Mutex<HashMap<String, Entry>>,
    api_versions: Mutex<HashMap<String, u32>>,
    /// Where the status watches tell of changed clusters: the OmniCluster controller.
    status_changes: StatusSink,
    /// Whether a client is kept for later passes. Only the baseline model of the original
    /// (`connection-per-call`, benchmarks) builds a new one for every call, and then watches
    /// nothing.
    reuse: bool,
}

/// Why templates cannot be synced to a connection's Omni because of its API version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiVersionError {
    /// The version could not be read.
    #[error("read Omni backend API version: {0}")]
    Read(String),
    /// Omni speaks a version this operator cannot translate templates for.
    #[error("{}", omni_client::template::unsupported_message(*.0))]
    Unsupported(u32),
}

impl std::fmt::Debug for OmniClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OmniClients").finish_non_exhaustive()
    }
}

impl OmniClients {
    /// An empty cache reading Secrets through `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            client,
            timeouts: {
                let t = crate::domain::tenancy::Timeouts::default();
                (t.omni_connect, t.omni_request)
            },
            default_service_account: None,
            cache: Mutex::default(),
            api_versions: Mutex::default(),
            status_changes: StatusSink::default(),
            reuse: true,
        }
    }

    /// The same cache, building clients that give up connecting after `connect` and a unary
    /// call after `request`: an Omni endpoint that never answers holds a reconcile no longer.
    pub(crate) fn with_timeouts(
        mut self,
        connect: std::time::Duration,
        request: std::time::Duration,
    ) -> Self {
        self.timeouts = (connect, request);
        self
    }

    /// The same cache, reading key Secrets as `--default-service-account` says.
    pub(crate) fn with_default_service_account(mut self, name: Option<String>) -> Self {
        self.default_service_account = name;
        self
    }

    /// A cache that builds a new client for every call, as the original did (the baseline
    /// model's `connection-per-call`, benchmarks only).
    pub(crate) fn without_reuse(mut self) -> Self {
        self.reuse = false;
        self
    }

    /// The client for `conn`, reading its Secret (uncached) and rebuilding the client when
    /// the Secret, endpoint or TLS flag changed.
    pub(crate) async fn get(&self, conn: &OmniConnection) -> Result<OmniClient, ConnectionError> {
        let namespace = conn.metadata.namespace.clone().unwrap_or_default();
        let r = &conn.spec.auth.service_account_secret_ref;
        // As the connection's ServiceAccount, when it (or the deployment) names one.
        let reader = crate::domain::impersonation::Reader::of(
            &namespace,
            conn.spec.service_account_name.as_deref(),
            self.default_service_account.as_deref(),
        );
        let read =
            crate::domain::impersonation::get::<Secret>(&self.client, &reader, &namespace, &r.name);
        let secret = match read.await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(ConnectionError::MissingSecret {
                    name: r.name.clone(),
                });
            }
            Err(crate::domain::impersonation::ReadError::Denied { .. }) => {
                return Err(ConnectionError::AccessDenied {
                    reader: reader.to_string(),
                    namespace,
                    name: r.name.clone(),
                });
            }
            Err(crate::domain::impersonation::ReadError::Api(e)) => {
                return Err(ConnectionError::Read {
                    namespace,
                    name: r.name.clone(),
                    detail: e.to_string(),
                });
            }
        };
        self.client_for_secret(conn, &secret)
    }

    /// The client for `conn` given its (already read) Secret: reused while the key, the key
    /// name, the endpoint and the TLS flag are unchanged.
    pub(crate) fn client_for_secret(
        &self,
        conn: &OmniConnection,
        secret: &Secret,
    ) -> Result<OmniClient, ConnectionError> {
        let namespace = conn.metadata.namespace.clone().unwrap_or_default();
        let conn_name = conn.metadata.name.clone().unwrap_or_default();
        let r = &conn.spec.auth.service_account_secret_ref;
        let key = key_from_secret(&namespace, &r.name, &r.key, secret)?;
        let fingerprint = Fingerprint {
            key_digest: {
                use sha2::Digest as _;
                sha2::Sha256::digest(key.as_bytes()).into()
            },
            key: r.key.clone(),
            endpoint: conn.spec.endpoint.clone(),
            insecure: conn.spec.insecure_skip_tls_verify,
        };
        let cache_key = format!("{namespace}/{conn_name}");
        // One critical section from the look-up to the insert: concurrent first asks (every
        // kind's reconciles at a cold start) must share one client, hence one Omni connection.
        // Building a client opens nothing yet, so the lock is held only briefly.
        let mut cache = self.lock();
        if let Some(entry) = cache.get(&cache_key)
            && entry.fingerprint == fingerprint
            && self.reuse
        {
            return Ok(entry.client.clone());
        }
        let mut config = ClientConfig::from_encoded_key(conn.spec.endpoint.clone(), &key)
            .map_err(|e| ConnectionError::Client(e.to_string()))?;
        config.insecure_skip_tls_verify = conn.spec.insecure_skip_tls_verify;
        (config.connect_timeout, config.request_timeout) = self.timeouts;
        let client = OmniClient::new(config).map_err(|e| ConnectionError::Client(e.to_string()))?;
        // Another endpoint may speak another API version.
        lock(&self.api_versions).remove(&cache_key);
        // A replaced entry's status watch ends with it (it watched on the old connection).
        cache.insert(
            cache_key,
            Entry {
                fingerprint,
                client: client.clone(),
                status: None,
            },
        );
        Ok(client)
    }

    /// The status watch on the connection of `conn`'s cached client ([`get`](Self::get) it
    /// first), started at the first ask; `None` without a cached client, or when the baseline
    /// model of the original (a client per call, no watches) is on.
    pub(crate) fn status_watch(&self, conn: &OmniConnection) -> Option<Arc<StatusWatch>> {
        if !self.reuse {
            return None;
        }
        let (namespace, connection) = (
            conn.metadata.namespace.clone().unwrap_or_default(),
            conn.metadata.name.clone().unwrap_or_default(),
        );
        let mut cache = self.lock();
        let entry = cache.get_mut(&format!("{namespace}/{connection}"))?;
        let sink = self.status_changes.clone();
        let watch = entry.status.get_or_insert_with(|| {
            Arc::new(StatusWatch::start(
                &entry.client,
                Box::new(move |cluster| {
                    if let Some(tx) = lock(&sink).as_ref() {
                        // A closed channel means the cluster controller stopped: nobody to wake.
                        let _ = tx.unbounded_send(StatusChange {
                            namespace: namespace.clone(),
                            connection: connection.clone(),
                            cluster: cluster.to_owned(),
                        });
                    }
                }),
            ))
        });
        Some(watch.clone())
    }

    /// The changes the status watches announce from now on (to the last caller only).
    pub(crate) fn status_changes(&self) -> mpsc::UnboundedReceiver<StatusChange> {
        let (tx, rx) = mpsc::unbounded();
        *lock(&self.status_changes) = Some(tx);
        rx
    }

    /// Stops announcing changes of the Omni cluster `cluster` seen through `namespace/connection`:
    /// the OmniCluster reading it is gone.
    pub(crate) fn forget_status_of(&self, namespace: &str, connection: &str, cluster: &str) {
        let watch = self
            .lock()
            .get(&format!("{namespace}/{connection}"))
            .and_then(|e| e.status.clone());
        if let Some(watch) = watch {
            watch.forget(cluster);
        }
    }

    /// Reads the backend API version of `conn`'s Omni (the connection controller does this on
    /// every check, so an Omni upgrade is noticed) and remembers it.
    pub(crate) async fn refresh_backend_api(
        &self,
        conn: &OmniConnection,
        client: &OmniClient,
    ) -> Result<u32, ApiVersionError> {
        let version = omni_client::template::read_backend_api_version(client)
            .await
            .map_err(|e| ApiVersionError::Read(e.to_string()))?;
        lock(&self.api_versions).insert(cache_key(conn), version);
        Ok(version)
    }

    /// The backend API to translate templates for: the remembered version, read first when
    /// none is known yet.
    pub(crate) async fn backend_api(
        &self,
        conn: &OmniConnection,
        client: &OmniClient,
    ) -> Result<BackendApi, ApiVersionError> {
        let known = lock(&self.api_versions).get(&cache_key(conn)).copied();
        let version = match known {
            Some(v) => v,
            None => self.refresh_backend_api(conn, client).await?,
        };
        BackendApi::from_version(version).ok_or(ApiVersionError::Unsupported(version))
    }

    /// The key of `conn`'s plan hashes ([`crate::domain::plan::ChangeSet::hash`]): derived from its
    /// service-account key, which readers of a cluster's status do not have, so the hash
    /// reveals nothing about content it covers; stable while the key is. Empty without a
    /// cached client ([`get`](Self::get) it first).
    pub(crate) fn plan_key(&self, conn: &OmniConnection) -> Vec<u8> {
        use sha2::Digest as _;
        let cache = self.lock();
        let Some(entry) = cache.get(&cache_key(conn)) else {
            return Vec::new();
        };
        let mut key = sha2::Sha256::new();
        key.update(b"omni-operator plan key\0");
        key.update(entry.fingerprint.key_digest);
        key.finalize().to_vec()
    }

    /// Drops the cached client of a deleted connection.
    pub(crate) fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&format!("{namespace}/{name}"));
        lock(&self.api_versions).remove(&format!("{namespace}/{name}"));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        match self.cache.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

fn cache_key(conn: &OmniConnection) -> String {
    format!(
        "{}/{}",
        conn.metadata.namespace.as_deref().unwrap_or_default(),
        conn.metadata.name.as_deref().unwrap_or_default()
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
