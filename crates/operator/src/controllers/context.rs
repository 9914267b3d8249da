//! The state every reconcile shares: clients, clock, metrics, Events and per-object backoff.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource};
use rand::Rng;

use super::events::{Events, Reporter};
use super::{backoff_delay, cluster, omni, secret_sync, status};
use crate::api::common::Condition;
use crate::metrics::Metrics;

/// Where the operator looks for objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only this namespace (the default deployment; a namespaced Role suffices).
    Namespace(String),
    /// Every namespace (needs a ClusterRole).
    All,
}

/// Source of the current time, injectable so tests can move time (rotation deadlines).
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> jiff::Timestamp;
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// Name under which the operator reports Events.
pub(crate) const REPORTER: &str = "omni-operator";

/// Shared state handed to every reconcile.
pub struct Context {
    /// Client of the management cluster.
    pub client: Client,
    /// Namespace scope.
    pub scope: Scope,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// Omni clients per OmniConnection.
    pub omni: omni::OmniClients,
    /// Kubernetes clients of workload clusters per kubeconfig Secret.
    pub workload: crate::workload::WorkloadClients,
    /// The helm driver; `None` when no usable helm binary was found (OmniHelmRelease then
    /// reports that on each object instead of failing the whole operator).
    pub helm: Option<crate::helm::Helm>,
    /// How often a synced OmniSecretSync re-checks its copy for drift in the workload cluster,
    /// which the operator does not watch.
    pub secret_sync_resync: Duration,
    /// Most reconciles each controller runs at once (`--max-concurrent-reconciles`); zero is
    /// unbounded.
    pub max_concurrent_reconciles: u16,
    /// Directory `file:` patches and manifests of OmniClusters are confined to
    /// (`--template-root`); `None` refuses every `file:` entry.
    pub template_root: Option<std::path::PathBuf>,
    /// Floor for periodic intervals read from stored objects (`syncInterval`,
    /// `driftCheckInterval`, time between kubeconfig rotations) that bypassed admission.
    pub min_interval: Duration,
    /// Which Secrets objects may use, and where exports may write.
    pub secret_policy: crate::secret_policy::SecretPolicy,
    /// The deployment's multi-tenancy settings (identity policy, chart sources, timeouts).
    pub tenancy: crate::tenancy::Tenancy,
    /// Each target's share of the reconcile slots in use.
    pub(crate) target_slots: super::fairness::TargetSlots,
    /// How OmniClusters without `spec.changePolicy.destructive` treat destructive plans
    /// (`--default-destructive-policy`).
    pub default_destructive: crate::api::plan::DestructivePolicy,
    /// The OmniCluster controller's caches of its children, while it runs.
    pub(crate) cluster_children: std::sync::RwLock<Option<cluster::ChildCaches>>,
    /// The connection controller's record of its last key-hold sweep per namespace.
    pub(crate) swept_keys: super::connection::SweptKeys,
    events: Events,
    failures: Mutex<HashMap<String, u32>>,
}

impl Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Builds a context; `instance` identifies this replica in Events (usually the pod name).
    pub fn new(
        client: Client,
        scope: Scope,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        instance: Option<String>,
    ) -> Self {
        let events = Events::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_string(),
                instance,
            },
        );
        Self {
            omni: omni::OmniClients::new(client.clone()),
            workload: crate::workload::WorkloadClients::new(client.clone()),
            client,
            scope,
            clock,
            metrics,
            helm: None,
            secret_sync_resync: secret_sync::RESYNC,
            max_concurrent_reconciles: crate::runtime::DEFAULT_MAX_CONCURRENT_RECONCILES,
            template_root: None,
            min_interval: crate::api::duration::MIN_INTERVAL
                .to_std()
                .unwrap_or(Duration::from_secs(10)),
            secret_policy: crate::secret_policy::SecretPolicy::default(),
            tenancy: crate::tenancy::Tenancy::default(),
            target_slots: super::fairness::TargetSlots::new(super::DEFAULT_PER_TARGET),
            default_destructive: crate::api::plan::DestructivePolicy::Allow,
            cluster_children: std::sync::RwLock::new(None),
            swept_keys: super::connection::SweptKeys::default(),
            events,
            failures: Mutex::default(),
        }
    }

    /// Sets the helm driver (builder style, so `new` stays stable for embedders).
    pub(crate) fn with_helm(mut self, helm: Option<crate::helm::Helm>) -> Self {
        self.helm = helm;
        self
    }

    /// Replaces the OmniSecretSync drift re-check interval (tests use a short one); zero turns
    /// the periodic re-check off.
    pub fn with_secret_sync_resync(mut self, every: Duration) -> Self {
        self.secret_sync_resync = every;
        self
    }

    /// Bounds each controller's reconciles in flight; zero is unbounded.
    pub fn with_max_concurrent_reconciles(mut self, most: u16) -> Self {
        self.max_concurrent_reconciles = most;
        self
    }

    /// Sets the directory `file:` entries are confined to (builder style).
    pub(crate) fn with_template_root(mut self, root: Option<std::path::PathBuf>) -> Self {
        self.template_root = root;
        self
    }

    /// Replaces the floor for periodic intervals of stored objects (tests use a short one).
    pub(crate) fn with_min_interval(mut self, floor: Duration) -> Self {
        self.min_interval = floor;
        self
    }

    /// Sets the Secret policy (`--require-secret-opt-in`, `--allow-cross-namespace-export`).
    pub(crate) fn with_secret_policy(mut self, policy: crate::secret_policy::SecretPolicy) -> Self {
        self.secret_policy = policy;
        self
    }

    /// Sets the multi-tenancy settings (builder style).
    pub(crate) fn with_tenancy(mut self, tenancy: crate::tenancy::Tenancy) -> Self {
        let t = tenancy.timeouts;
        self.omni = self
            .omni
            .with_timeouts(t.omni_connect, t.omni_request)
            .with_default_service_account(tenancy.default_service_account.clone());
        self.workload = self.workload.with_limits(t.outbound());
        self.target_slots = super::fairness::TargetSlots::new(tenancy.per_target_reconciles);
        self.tenancy = tenancy;
        self
    }

    /// Whose identity reads what an object of `namespace` references: its own
    /// `spec.serviceAccountName` `own`, else the deployment's default, else the operator.
    pub(crate) fn reader(
        &self,
        namespace: &str,
        own: Option<&str>,
    ) -> crate::impersonation::Reader {
        crate::impersonation::Reader::of(
            namespace,
            own,
            self.tenancy.default_service_account.as_deref(),
        )
    }

    /// Sets the destructive-change policy of clusters that do not choose one.
    pub(crate) fn with_default_destructive(
        mut self,
        policy: crate::api::plan::DestructivePolicy,
    ) -> Self {
        self.default_destructive = policy;
        self
    }

    /// An API handle for `K` in `namespace`.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// An API handle covering the operator's scope, for watches.
    pub(crate) fn watch_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.scope {
            Scope::Namespace(ns) => Api::namespaced(self.client.clone(), ns),
            Scope::All => Api::all(self.client.clone()),
        }
    }

    /// Publishes an Event about `obj`. Failures are logged, never fatal: Events are advisory.
    pub async fn event<K>(&self, obj: &K, type_: EventType, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.event_for(obj.object_ref(&()), type_, reason, note)
            .await;
    }

    /// Publishes an Event about the object `reference`.
    pub(crate) async fn event_for(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let mut note = note;
        // The Events API caps notes at 1 KiB; cut on a character boundary.
        if note.len() > 1000 {
            let mut end = 1000;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(e) = self.events.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "could not publish Event");
        }
    }

    /// Publishes at most one Event for a status write, for the condition transition that says
    /// the most (see [`status::event_worthy`]).
    pub(crate) async fn condition_events<K>(&self, obj: &K, old: &[Condition], new: &[Condition])
    where
        K: Resource<DynamicType = ()>,
    {
        if let Some(c) = status::event_worthy(old, new) {
            // A plan held for a person to approve is waiting, not failing.
            let type_ = if status::condition_healthy(c) || crate::plan::is_hold_reason(&c.reason) {
                EventType::Normal
            } else {
                EventType::Warning
            };
            let note = format!("{}={:?}: {}", c.type_, c.status, c.message);
            self.event(obj, type_, &c.reason, note).await;
        }
    }

    /// Next retry delay after one more failure of the object `key`: exponential from 5s,
    /// capped at 5m, with ±20% jitter so many failing objects do not retry in lockstep.
    pub fn backoff(&self, key: &str) -> Duration {
        let failures = {
            let mut map = match self.failures.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            let n = map.entry(key.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        backoff_delay(failures, rand::thread_rng().gen_range(0.8..1.2))
    }

    /// Forgets the failure count of `key` after a successful reconcile.
    pub(crate) fn reset_backoff(&self, key: &str) {
        let mut map = match self.failures.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.remove(key);
    }
}
