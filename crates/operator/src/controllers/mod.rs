//! The controllers and the machinery they share.
//!
//! Every kind's reconcile is the same pipeline (see `docs/operations.md`): dereference →
//! validate → build (pure) → apply (write only differences) → status (write only when changed,
//! Events on condition transitions). This module holds what all kinds need: the [`Context`],
//! the error type and its backoff policy, the status writer and the Event publisher. A new kind
//! plugs in as one submodule exposing `async fn run(ctx, shutdown)`.
//!
//! Objects are watched as their typed kinds. An object that does not decode (possible only when
//! stored data bypassed the CRD schema) makes kube-rs' watcher report an error and back off; it is
//! logged and never hot-loops. See `docs/decisions.md`.

pub mod children;
pub mod cluster;
pub mod connection;
pub mod finalizer;
pub mod kubeconfig_export;
pub mod omni;
pub mod secret_sync;
pub mod status;

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use rand::Rng;

use crate::api::common::{Condition, ConditionStatus};
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
pub const REPORTER: &str = "omni-operator";

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
    recorder: Recorder,
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
        let recorder = Recorder::new(
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
            recorder,
            failures: Mutex::default(),
        }
    }

    /// Sets the helm driver (builder style, so `new` stays stable for embedders).
    pub fn with_helm(mut self, helm: Option<crate::helm::Helm>) -> Self {
        self.helm = helm;
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
    pub fn watch_api<K>(&self) -> Api<K>
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
        let reference: ObjectReference = obj.object_ref(&());
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
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "could not publish Event");
        }
    }

    /// Publishes one Event per condition whose status or reason changed between `old` and `new`.
    pub async fn condition_events<K>(&self, obj: &K, old: &[Condition], new: &[Condition])
    where
        K: Resource<DynamicType = ()>,
    {
        for c in status::transitions(old, new) {
            let healthy = match c.type_.as_str() {
                // Stalled is the one polarity-inverted condition.
                "Stalled" => c.status != ConditionStatus::True,
                _ => c.status == ConditionStatus::True,
            };
            let type_ = if healthy {
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
    pub fn reset_backoff(&self, key: &str) {
        let mut map = match self.failures.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.remove(key);
    }
}

/// The un-jittered delay is 5s·2^(failures-1), capped at 300s; `jitter` scales it.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(10);
    let base = (5u64 << exp).min(300) as f64;
    Duration::from_secs_f64(base * jitter)
}

/// Why a reconcile failed. The object's status already explains user-facing failures; this
/// error drives logging and backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the management cluster failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A status could not be serialised.
    #[error("could not serialise status: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A remote operation failed; the message is also in the object's conditions.
    #[error("{0}")]
    Remote(String),
}

/// The key an object's backoff is tracked under.
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// The error policy of every controller: retry with per-object exponential backoff.
pub fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    let key = object_key(obj.as_ref());
    let delay = ctx.backoff(&key);
    tracing::warn!(object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs one reconcile with metrics and backoff bookkeeping.
pub async fn instrumented<K, F>(obj: &K, ctx: &Context, fut: F) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: Future<Output = Result<Action, Error>>,
{
    let kind = K::kind(&());
    let started = Instant::now();
    let result = fut.await;
    ctx.metrics
        .reconciled(&kind, started.elapsed().as_secs_f64(), result.is_err());
    if result.is_ok() {
        ctx.reset_backoff(&object_key(obj));
    }
    result
}

/// Logs each reconcile outcome of a controller stream; used by every `run`.
pub fn log_outcome<T: Debug, E: std::fmt::Display>(kind: &'static str, result: Result<T, E>) {
    match result {
        Ok(obj) => tracing::debug!(kind, object = ?obj, "reconciled"),
        Err(e) => tracing::debug!(kind, error = %e, "reconcile did not complete"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_and_caps() {
        assert_eq!(backoff_delay(1, 1.0), Duration::from_secs(5));
        assert_eq!(backoff_delay(2, 1.0), Duration::from_secs(10));
        assert_eq!(backoff_delay(4, 1.0), Duration::from_secs(40));
        assert_eq!(backoff_delay(7, 1.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(40, 1.0), Duration::from_secs(300));
        assert_eq!(backoff_delay(1, 1.2), Duration::from_secs(6));
    }
}
