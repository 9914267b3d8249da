//! A simulator of Sidero Omni's gRPC API, faithful to the behaviour documented in
//! `docs/omni-wire.md`: `siderov1` signature checks, roles, COSI state semantics (versions, phases,
//! owners, finalizers, watches), Omni's write validations, the controllers a template client
//! observes, and service-account kubeconfig minting. It is a test fixture and a sandbox part.
//!
//! ```no_run
//! # async fn demo() -> Result<(), omni_sim::SimError> {
//! let sim = omni_sim::OmniSim::builder().start().await?;
//! let key = sim.register_service_account("ci", omni_sim::Role::Operator)?;
//! // point a client at sim.endpoint() with `key`
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub)]

pub mod auth;
mod clock;
mod controllers;
mod definitions;
pub mod manifest_sync;
mod server;
pub mod store;
pub mod sysversion;
pub mod token;
mod transport;
pub mod types;
mod validate;
mod yaml_spec;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use omni_client::proto::cosi::resource::Resource;
use omni_client::proto::cosi::resource::state_server::StateServer;
use omni_client::proto::management::management_service_server::ManagementServiceServer;
use omni_client::proto::specs::{
    ClusterStatusSpec, KubernetesUpgradeStatusSpec, MachineClassSpec, MachineSetStatusSpec,
    TalosUpgradeStatusSpec, TalosVersionSpec,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::codec::CompressionEncoding;

pub use clock::{Clock, ManualClock, SystemClock};
pub use controllers::{HealthCheckOutcome, PoolMachine};
pub use manifest_sync::ManifestSink;
pub use server::{AppliedWrites, CallCounts, Outage, Outcome, methods};
pub use store::{Store, StoreError};
pub use types::Role;

use crate::auth::Authenticator;
use crate::controllers::{ControllerConfig, Controllers};
use crate::server::{Hooks, ManagementSvc, Shared, StateService};
use crate::store::{decode_spec, resource};
use crate::types::{DEFAULT_NS, ty};

/// Omni's receive limit, kept so large templates behave the same.
const MAX_MESSAGE: usize = 32 * 1024 * 1024;

/// Where a cluster's workload Kubernetes API lives, for minted kubeconfigs.
#[derive(Clone, PartialEq, Eq)]
pub struct WorkloadEndpoint {
    /// API server URL.
    pub server: String,
    /// PEM CA bundle the kubeconfig should trust, if any.
    pub ca_data: Option<Vec<u8>>,
}

impl std::fmt::Debug for WorkloadEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadEndpoint")
            .field("server", &self.server)
            .field("ca_data", &self.ca_data.as_ref().map(Vec::len))
            .finish()
    }
}

/// Supplies the workload API server of a cluster when a kubeconfig is minted (the sandbox plugs
/// its workload kube-sim in here).
pub trait WorkloadProvider: Send + Sync {
    /// The endpoint for `cluster`.
    fn endpoint(&self, cluster: &str) -> WorkloadEndpoint;
}

/// The default provider: a fixed URL that resolves nowhere, like an Omni Kubernetes proxy
/// address in a test without a workload cluster.
#[derive(Debug, Clone)]
pub struct FixedWorkloadProvider(pub String);

impl Default for FixedWorkloadProvider {
    fn default() -> Self {
        Self("https://omni-sim.kubernetes.invalid:8100".into())
    }
}

impl WorkloadProvider for FixedWorkloadProvider {
    fn endpoint(&self, _cluster: &str) -> WorkloadEndpoint {
        WorkloadEndpoint {
            server: self.0.clone(),
            ca_data: None,
        }
    }
}

/// A Talos version the simulator knows (a `TalosVersions` resource).
#[derive(Debug, Clone)]
pub struct TalosVersionSeed {
    /// Version without `v`.
    pub version: String,
    /// Kubernetes versions compatible with it.
    pub kubernetes: Vec<String>,
    /// Deprecated versions are refused for new clusters. Versions below
    /// [`MIN_TALOS_VERSION`] are deprecated whatever this says, as in Omni.
    pub deprecated: bool,
}

/// Omni v1.10's `MinTalosVersion`: older releases are deprecated in the catalogue, so new
/// clusters cannot use them (`client/pkg/constants/constants.go`).
pub const MIN_TALOS_VERSION: (u64, u64, u64) = (1, 9, 0);
/// Omni v1.10's `LatestSupportedTalosVersion`: newer minors are `unsupported` upgrade targets.
pub const LATEST_SUPPORTED_TALOS: (u64, u64) = (1, 13);

impl TalosVersionSeed {
    fn new(version: &str, kubernetes: &[&str]) -> Self {
        Self {
            version: version.into(),
            kubernetes: kubernetes.iter().map(|s| s.to_string()).collect(),
            deprecated: false,
        }
    }
}

/// The default version catalogue.
pub fn default_talos_versions() -> Vec<TalosVersionSeed> {
    vec![
        // Below Omni v1.10's minimum: deprecated, refused for new clusters.
        TalosVersionSeed::new("1.8.3", &["1.29.3", "1.30.11", "1.31.7"]),
        TalosVersionSeed::new("1.9.5", &["1.29.3", "1.30.11", "1.31.7", "1.32.3"]),
        TalosVersionSeed::new("1.10.0", &["1.30.11", "1.31.7", "1.32.3", "1.33.0"]),
        TalosVersionSeed::new("1.10.6", &["1.30.11", "1.31.7", "1.32.3", "1.33.3"]),
        TalosVersionSeed::new("1.13.2", &["1.33.5", "1.34.3", "1.35.0", "1.35.1"]),
        TalosVersionSeed::new("1.13.3", &["1.33.5", "1.34.3", "1.35.0", "1.35.1"]),
        // Beyond Omni v1.10's newest supported minor: listed, but `unsupported`.
        TalosVersionSeed::new("1.14.0", &["1.34.3", "1.35.0", "1.35.1"]),
    ]
}

/// Server TLS material (PEM).
#[derive(Clone)]
pub struct TlsIdentity {
    /// Certificate chain.
    pub cert_pem: Vec<u8>,
    /// Private key — secret.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity").finish_non_exhaustive()
    }
}

/// Simulator failures.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The listen socket could not be opened.
    #[error("failed to listen on {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The TLS configuration was rejected.
    #[error("invalid TLS configuration: {0}")]
    Tls(String),
    /// A key could not be generated or registered.
    #[error(transparent)]
    Key(#[from] auth::KeyError),
    /// A resource operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Entry point: `OmniSim::builder()`.
#[derive(Debug)]
pub struct OmniSim;

impl OmniSim {
    /// A builder with defaults: `127.0.0.1:0`, h2c, system clock, 200 ms status steps, default
    /// version catalogue, empty machine pool.
    pub fn builder() -> OmniSimBuilder {
        OmniSimBuilder {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: None,
            clock: Arc::new(SystemClock),
            controllers: ControllerConfig::default(),
            machines: Vec::new(),
            machine_classes: Vec::new(),
            talos_versions: default_talos_versions(),
            latest_supported_talos: LATEST_SUPPORTED_TALOS,
            workload: Arc::new(FixedWorkloadProvider::default()),
            backend_api_version: sysversion::DEFAULT_BACKEND_API_VERSION,
        }
    }
}

/// Configures and starts a simulator.
pub struct OmniSimBuilder {
    listen: SocketAddr,
    tls: Option<TlsIdentity>,
    clock: Arc<dyn Clock>,
    controllers: ControllerConfig,
    machines: Vec<PoolMachine>,
    machine_classes: Vec<(String, Vec<String>)>,
    talos_versions: Vec<TalosVersionSeed>,
    latest_supported_talos: (u64, u64),
    workload: Arc<dyn WorkloadProvider>,
    backend_api_version: u32,
}

impl std::fmt::Debug for OmniSimBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OmniSimBuilder")
            .field("listen", &self.listen)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl OmniSimBuilder {
    /// Listen address (default `127.0.0.1:0`, an ephemeral port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Serve TLS with this certificate instead of h2c.
    pub fn tls(mut self, identity: TlsIdentity) -> Self {
        self.tls = Some(identity);
        self
    }

    /// Use this clock for signatures, timestamps and token expiry.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Interval between status progression steps (default 200 ms).
    pub fn status_step(mut self, step: Duration) -> Self {
        self.controllers.step = step;
        self
    }

    /// Test convenience: whether machines named by manual MachineSetNodes join the pool as if
    /// they had connected (default false). Omni accepts a node naming a machine it has never
    /// seen but never gets it ready, so by default only seeded machines become healthy.
    pub fn auto_register_machines(mut self, on: bool) -> Self {
        self.controllers.auto_register_machines = on;
        self
    }

    /// Adds a machine to the initial pool.
    pub fn machine(mut self, m: PoolMachine) -> Self {
        self.machines.push(m);
        self
    }

    /// Adds a MachineClass with these label selectors.
    pub fn machine_class(mut self, name: &str, match_labels: &[&str]) -> Self {
        self.machine_classes.push((
            name.to_string(),
            match_labels.iter().map(|s| s.to_string()).collect(),
        ));
        self
    }

    /// Replaces the Talos/Kubernetes version catalogue.
    pub fn talos_versions(mut self, versions: Vec<TalosVersionSeed>) -> Self {
        self.talos_versions = versions;
        self
    }

    /// The newest Talos minor this "Omni release" supports (default
    /// [`LATEST_SUPPORTED_TALOS`], Omni v1.10's); newer catalogue entries are `unsupported`.
    pub fn latest_supported_talos(mut self, major: u64, minor: u64) -> Self {
        self.latest_supported_talos = (major, minor);
        self
    }

    /// Sets the workload provider used for kubeconfigs.
    pub fn workload_provider(mut self, p: Arc<dyn WorkloadProvider>) -> Self {
        self.workload = p;
        self
    }

    /// The backend API version published in `SysVersions` (default 2, Omni v1.10's; 3 is
    /// Omni's main branch: `machine.install.disk` refused in patches, `MachineInstallDiskConfig`).
    pub fn backend_api_version(mut self, version: u32) -> Self {
        self.backend_api_version = version;
        self
    }

    /// Binds, seeds the store and starts serving.
    pub async fn start(self) -> Result<RunningOmniSim, SimError> {
        let store = Arc::new(Store::new(self.clock.clone()));
        sysversion::publish(&store, self.backend_api_version);
        definitions::publish(&store);
        seed_versions(&store, &self.talos_versions, self.latest_supported_talos);
        let controllers = Arc::new(Controllers::new(store.clone(), self.controllers.clone()));
        for m in &self.machines {
            controllers.add_machine(m);
        }
        for (name, labels) in &self.machine_classes {
            store.put(resource(
                ty::MACHINE_CLASS,
                name,
                "",
                Vec::new(),
                &MachineClassSpec {
                    match_labels: labels.clone(),
                    auto_provision: None,
                },
            ));
        }
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            store: store.clone(),
            auth: Arc::new(Authenticator::new(store.clone(), self.clock.clone())),
            hooks: Arc::new(Hooks::default()),
            clock: self.clock.clone(),
            workload: Mutex::new(self.workload),
            shutdown: shutdown_rx.clone(),
        });

        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .map_err(|source| SimError::Bind {
                addr: self.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: self.listen,
            source,
        })?;
        let tls = match &self.tls {
            Some(t) => {
                Some(transport::tls_acceptor(&t.cert_pem, &t.key_pem).map_err(SimError::Tls)?)
            }
            None => None,
        };
        let state = StateServer::new(StateService(shared.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(MAX_MESSAGE);
        let management = ManagementServiceServer::new(ManagementSvc(shared.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(MAX_MESSAGE);
        let routes = tonic::service::Routes::new(state)
            .add_service(management)
            .prepare();
        let connections = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let connect_latency = transport::ConnectLatency::default();
        let server_task = tokio::spawn(transport::serve(
            listener,
            routes,
            tls,
            connections.clone(),
            connect_latency.clone(),
            shutdown_rx.clone(),
        ));
        let controller_task = tokio::spawn(controllers.clone().run(shutdown_rx));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        Ok(RunningOmniSim {
            endpoint: format!("{scheme}://{addr}"),
            addr,
            shared,
            controllers,
            shutdown: shutdown_tx,
            connections,
            connect_latency,
            tasks: Mutex::new(vec![server_task, controller_task]),
        })
    }
}

/// Seeds `TalosVersions` with Omni's flags: below [`MIN_TALOS_VERSION`] deprecated, above
/// `latest_supported` unsupported (Omni's versions controller).
fn seed_versions(store: &Store, versions: &[TalosVersionSeed], latest_supported: (u64, u64)) {
    let mut kube = std::collections::BTreeSet::new();
    for v in versions {
        let parsed = validate::parse_semver(&v.version);
        let below_minimum = parsed.is_some_and(|s| (s.major, s.minor, s.patch) < MIN_TALOS_VERSION);
        let beyond_cap = parsed.is_some_and(|s| (s.major, s.minor) > latest_supported);
        let spec = TalosVersionSpec {
            version: v.version.clone(),
            compatible_kubernetes_versions: v.kubernetes.clone(),
            deprecated: v.deprecated || below_minimum,
            upgradable_talos_versions: versions.iter().map(|o| o.version.clone()).collect(),
            unsupported: beyond_cap,
        };
        store.put(resource(
            ty::TALOS_VERSION,
            &v.version,
            "",
            Vec::new(),
            &spec,
        ));
        kube.extend(v.kubernetes.iter().cloned());
    }
    for k in kube {
        // KubernetesVersionSpec is `{ string version = 1; }`, wire-identical to this message
        // with only its first field set.
        let spec = TalosVersionSpec {
            version: k.clone(),
            ..Default::default()
        };
        store.put(resource(ty::KUBERNETES_VERSION, &k, "", Vec::new(), &spec));
    }
}

/// A running simulator. Dropping it without [`RunningOmniSim::shutdown`] leaves the server
/// running until the runtime ends.
pub struct RunningOmniSim {
    endpoint: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
    controllers: Arc<Controllers>,
    shutdown: watch::Sender<bool>,
    connections: Arc<std::sync::atomic::AtomicU64>,
    connect_latency: transport::ConnectLatency,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for RunningOmniSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningOmniSim")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn set_status_spec<M: prost::Message + Default>(
    store: &Store,
    t: &str,
    id: &str,
    f: impl FnOnce(&mut M),
) -> Result<Resource, StoreError> {
    let mut r = store.get(DEFAULT_NS, t, id)?;
    let mut spec: M = decode_spec(&r).unwrap_or_default();
    f(&mut spec);
    if let Some(s) = r.spec.as_mut() {
        s.proto_spec = spec.encode_to_vec();
    }
    Ok(store.put(r))
}

impl RunningOmniSim {
    /// `http://127.0.0.1:PORT` (or `https://` with TLS).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Generates a key for a new service account with `role` and returns it in the
    /// `OMNI_SERVICE_ACCOUNT_KEY` encoding (a secret).
    pub fn register_service_account(&self, name: &str, role: Role) -> Result<String, SimError> {
        let key = auth::generate_key(name)?;
        self.shared
            .auth
            .register(name, &key.public_armored, role, None, false)?;
        Ok(key.encoded)
    }

    /// Registers an externally generated armored public key (e.g. exported from GnuPG) for
    /// account `name`. `expiration` overrides the key's own expiry (default: the key's, else one
    /// year). Returns the fingerprint.
    pub fn register_public_key(
        &self,
        name: &str,
        armored: &str,
        role: Role,
        expiration: Option<Timestamp>,
    ) -> Result<String, SimError> {
        Ok(self
            .shared
            .auth
            .register(name, armored, role, expiration, false)?)
    }

    /// Replaces the workload provider.
    pub fn set_workload_provider(&self, p: Arc<dyn WorkloadProvider>) {
        *self
            .shared
            .workload
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// Makes the next `count` authenticated calls of `method` (see [`methods`]) fail with `code`.
    pub fn inject_failure(&self, method: &str, code: tonic::Code, count: u32) {
        self.shared.hooks.inject_failure(method, code, count);
    }

    /// Delays every call of `method`.
    pub fn set_latency(&self, method: &str, delay: Duration) {
        self.shared.hooks.set_latency(method, delay);
    }

    /// Starts (`Some`) or ends (`None`) an outage of every method: see [`Outage`]. Off by
    /// default; a test-only fault.
    pub fn set_outage(&self, outage: Option<Outage>) {
        self.shared.hooks.set_outage(outage);
    }

    /// Calls that met an outage so far (the faults injected by [`RunningOmniSim::set_outage`]).
    pub fn outage_calls(&self) -> u64 {
        self.shared.hooks.outage_calls()
    }

    /// Client writes the store applied, per (verb, type, ID), for "one write per change"
    /// assertions: failed calls and repeated teardowns are not counted.
    pub fn applied_writes(&self) -> AppliedWrites {
        self.shared.hooks.applied_writes()
    }

    /// Calls per (method, outcome).
    pub fn call_counts(&self) -> CallCounts {
        self.shared.hooks.call_counts()
    }

    /// Calls of `method` with `outcome`.
    pub fn call_count(&self, method: &str, outcome: Outcome) -> u64 {
        self.call_counts()
            .get(&(method.to_string(), outcome))
            .copied()
            .unwrap_or(0)
    }

    /// Write RPCs received so far (for "no writes when idle" assertions).
    pub fn writes_total(&self) -> u64 {
        self.shared.hooks.writes_total()
    }

    /// Delays every connection accepted from now on by `delay` before serving it (zero
    /// removes the delay); with [`RunningOmniSim::set_latency`] this models the network
    /// distance to a real Omni.
    pub fn set_connect_latency(&self, delay: Duration) {
        self.connect_latency.set(delay);
    }

    /// TCP connections accepted so far (a client that reuses its channel opens one).
    pub fn connections_accepted(&self) -> u64 {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Direct access to the store (bypasses authentication, roles and validation).
    pub fn store(&self) -> &Arc<Store> {
        &self.shared.store
    }

    /// Reads a resource in namespace `default`.
    pub fn get(&self, t: &str, id: &str) -> Option<Resource> {
        self.shared.store.try_get(DEFAULT_NS, t, id)
    }

    /// Lists a kind in namespace `default`.
    pub fn list(&self, t: &str) -> Vec<Resource> {
        self.shared.store.list(DEFAULT_NS, t, &[])
    }

    /// Stores a resource as a controller would (no checks).
    pub fn put(&self, r: Resource) -> Resource {
        self.shared.store.put(r)
    }

    /// What the runner Job of health check `id` does from its next run on (default: it
    /// passes). A failing check holds the cluster's Talos upgrade, as in Omni.
    pub fn set_health_check_outcome(&self, id: &str, outcome: HealthCheckOutcome) {
        self.controllers.set_health_check_outcome(id, outcome);
    }

    /// Test hook (default off): applying `cluster`'s manifests fails with `error`, as Omni
    /// reports it in `ClusterKubernetesManifestsStatus.last_error` (a fatal apply error's text,
    /// or `retryable error occurred while applying manifests`); `None` lets them apply again.
    /// While it fails, manifests already applied stay APPLIED, new ones stay PENDING and
    /// removed ones stay DELETING (nothing is pruned), as in Omni.
    pub fn set_manifests_error(&self, cluster: &str, error: Option<String>) {
        self.controllers.set_manifests_error(cluster, error);
    }

    /// Where clusters' Kubernetes manifests are written once their API answers (see
    /// [`manifest_sync`]); `None` (the default) writes them nowhere.
    pub fn set_manifest_sink(&self, sink: Option<Arc<dyn ManifestSink>>) {
        self.controllers.manifest_sync.set_sink(sink);
    }

    /// The `KubernetesHealthCheckStatus` of health check `id` (namespace `ephemeral`).
    pub fn health_check_status(
        &self,
        id: &str,
    ) -> Option<omni_client::proto::specs::KubernetesHealthCheckStatusSpec> {
        self.shared
            .store
            .try_get(types::EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, id)
            .and_then(|r| store::decode_spec(&r).ok())
    }

    /// Publishes another backend API version, as an Omni upgrade would.
    pub fn set_backend_api_version(&self, version: u32) {
        sysversion::publish(&self.shared.store, version);
    }

    /// Adds or refreshes a pool machine (MachineStatus + Link).
    pub fn add_machine(&self, m: PoolMachine) {
        self.controllers.add_machine(&m);
    }

    /// Marks a pool machine (dis)connected via the `omni.sidero.dev/disconnected` label.
    pub fn set_machine_disconnected(&self, id: &str, disconnected: bool) -> bool {
        self.shared
            .store
            .modify(DEFAULT_NS, ty::MACHINE_STATUS, id, |r| {
                if let Some(m) = r.metadata.as_mut() {
                    if disconnected {
                        m.labels
                            .insert(types::label::DISCONNECTED.into(), String::new());
                    } else {
                        m.labels.remove(types::label::DISCONNECTED);
                    }
                }
            })
            .is_some()
    }

    /// Adds a MachineClass.
    pub fn add_machine_class(&self, name: &str, match_labels: &[&str]) {
        self.shared.store.put(resource(
            ty::MACHINE_CLASS,
            name,
            "",
            Vec::new(),
            &MachineClassSpec {
                match_labels: match_labels.iter().map(|s| s.to_string()).collect(),
                auto_provision: None,
            },
        ));
    }

    /// Sets a ClusterStatus phase/readiness and stops the controllers from changing it.
    pub fn set_cluster_status(
        &self,
        cluster: &str,
        phase: omni_client::proto::specs::cluster_status_spec::Phase,
        ready: bool,
    ) -> Result<Resource, SimError> {
        self.controllers.pin(ty::CLUSTER_STATUS, cluster);
        Ok(set_status_spec::<ClusterStatusSpec>(
            &self.shared.store,
            ty::CLUSTER_STATUS,
            cluster,
            |s| {
                s.phase = phase as i32;
                s.ready = ready;
            },
        )?)
    }

    /// Sets a MachineSetStatus phase/readiness and stops the controllers from changing it.
    pub fn set_machine_set_status(
        &self,
        set: &str,
        phase: omni_client::proto::specs::MachineSetPhase,
        ready: bool,
    ) -> Result<Resource, SimError> {
        self.controllers.pin(ty::MACHINE_SET_STATUS, set);
        Ok(set_status_spec::<MachineSetStatusSpec>(
            &self.shared.store,
            ty::MACHINE_SET_STATUS,
            set,
            |s| {
                s.phase = phase as i32;
                s.ready = ready;
            },
        )?)
    }

    /// Sets the Kubernetes and Talos upgrade phases of a cluster and pins them.
    pub fn set_upgrade_phases(
        &self,
        cluster: &str,
        kubernetes: omni_client::proto::specs::kubernetes_upgrade_status_spec::Phase,
        talos: omni_client::proto::specs::talos_upgrade_status_spec::Phase,
    ) -> Result<(), SimError> {
        self.controllers.pin(ty::KUBERNETES_UPGRADE_STATUS, cluster);
        self.controllers.pin(ty::TALOS_UPGRADE_STATUS, cluster);
        set_status_spec::<KubernetesUpgradeStatusSpec>(
            &self.shared.store,
            ty::KUBERNETES_UPGRADE_STATUS,
            cluster,
            |s| s.phase = kubernetes as i32,
        )?;
        set_status_spec::<TalosUpgradeStatusSpec>(
            &self.shared.store,
            ty::TALOS_UPGRADE_STATUS,
            cluster,
            |s| s.phase = talos as i32,
        )?;
        Ok(())
    }

    /// Lets the controllers manage a status resource pinned by a `set_*` call again.
    pub fn unpin_status(&self, t: &str, id: &str) {
        self.controllers.unpin(t, id);
    }

    /// Labels of a pool machine as a map (test convenience).
    pub fn machine_labels(&self, id: &str) -> Option<BTreeMap<String, String>> {
        self.get(ty::MACHINE_STATUS, id)
            .map(|r| store::meta(&r).labels.clone().into_iter().collect())
    }

    /// Stops serving, ends open watches and the controllers, and waits for them.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
    }
}
