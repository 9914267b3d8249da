//! What every reconcile of every kind shares: the management client and scope, the clock,
//! metrics, Events, the per-object backoff and each target's share of the reconcile slots. What only some kinds use (Omni and workload
//! clients, helm, intervals, the Secret policy) is in those kinds' own state.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use rand::Rng;

use super::error::backoff_delay;
use super::events::{Events, Reporter};
use super::fairness::{DEFAULT_PER_TARGET, TargetSlots};
use crate::api::Reason;
use crate::benchmark::Quirks;
use crate::process::metrics::Metrics;
use crate::process::shard::Shard;

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

/// The key an object's backoff is tracked under.
pub(crate) fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Shared state handed to every reconcile.
pub(crate) struct Context {
    /// Client of the management cluster.
    pub(crate) client: Client,
    /// Namespace scope.
    pub(crate) scope: Scope,
    /// Time source.
    pub(crate) clock: Arc<dyn Clock>,
    /// Metrics registry.
    pub(crate) metrics: Arc<Metrics>,
    /// Most reconciles each controller runs at once (`--max-concurrent-reconciles`); zero is
    /// unbounded.
    pub(crate) max_concurrent_reconciles: u16,
    /// Each target's share of the reconcile slots in use (`--max-reconciles-per-target`).
    pub(crate) target_slots: TargetSlots,
    /// The behaviours of the original implementation modelled for `omni-bench --baseline`;
    /// none outside the benchmark.
    pub(crate) baseline: Quirks,
    /// The objects of this replica set (`--watch-label-selector`): only they are reconciled.
    pub(crate) shard: Shard,
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
    /// A context for unit tests: scoped to `namespace`, on the system clock, with fresh metrics.
    #[cfg(test)]
    pub(crate) fn for_tests(client: Client, namespace: &str) -> Self {
        Self::new(
            client,
            Scope::Namespace(namespace.into()),
            Arc::new(SystemClock),
            Arc::new(Metrics::new()),
            None,
        )
    }

    /// A context; `instance` identifies this replica in Events (usually the pod name).
    pub(crate) fn new(
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
            client,
            scope,
            clock,
            metrics,
            max_concurrent_reconciles: crate::process::runtime::DEFAULT_MAX_CONCURRENT_RECONCILES,
            target_slots: TargetSlots::new(DEFAULT_PER_TARGET),
            baseline: Quirks::default(),
            shard: Shard::all(),
            events,
            failures: Mutex::default(),
        }
    }

    /// Bounds each controller's reconciles in flight; zero is unbounded.
    pub(crate) fn with_max_concurrent_reconciles(mut self, most: u16) -> Self {
        self.max_concurrent_reconciles = most;
        self
    }

    /// Bounds the reconciles of one controller that the objects of one target hold at once.
    pub(crate) fn with_per_target_reconciles(mut self, share: u16) -> Self {
        self.target_slots = TargetSlots::new(share);
        self
    }

    /// Turns on the modelled behaviours of the original (`--baseline-quirks`, benchmarks only).
    pub(crate) fn with_baseline(mut self, quirks: Quirks) -> Self {
        self.baseline = quirks;
        self
    }

    /// Reconciles only the objects `shard` selects (sharding across replica sets).
    pub(crate) fn with_shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// An API handle for `K` in `namespace`.
    pub(crate) fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Publishes an Event about `obj`. Failures are logged, never fatal: Events are advisory.
    pub(crate) async fn event<K>(&self, obj: &K, type_: EventType, reason: Reason, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.event_for(obj.object_ref(&()), type_, reason.as_str(), note)
            .await;
    }

    /// Publishes an Event about the object `reference`, with the reason a condition carries.
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

    /// Next retry delay after one more failure of `obj`: exponential from 5s, capped at 5m,
    /// with ±20% jitter so many failing objects do not retry in lockstep.
    pub(crate) fn backoff<K: Resource<DynamicType = ()>>(&self, obj: &K) -> Duration {
        let failures = {
            let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            let n = map.entry(object_key(obj)).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        backoff_delay(failures, rand::thread_rng().gen_range(0.8..1.2))
    }

    /// Forgets the failure count of `obj` after a successful reconcile.
    pub(crate) fn reset_backoff<K: Resource<DynamicType = ()>>(&self, obj: &K) {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&object_key(obj));
    }
}
