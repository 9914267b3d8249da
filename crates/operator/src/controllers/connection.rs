//! OmniConnection: check that Omni is reachable with the configured key, and hold deletion
//! while OmniClusters still use the connection.
//!
//! The connection also holds its service-account key Secret while OmniClusters use it
//! ([`KEY_IN_USE_FINALIZER`] on the Secret): deleting an OmniCluster needs Omni, so a namespace
//! deletion, which deletes the Secret together with everything else, must leave the key in
//! place until the clusters are gone from Omni.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::watcher;

use super::RetryPolicy;
use super::index::{RefKey, namespace_of};
use super::omni::{ApiVersionError, ConnectionError};
use super::pipeline::{self, Cleanup, Pipeline};
use super::{Context, Error, drive, dyn_ref, indexed_controller_for};
use crate::api::common::{Condition, ConditionStatus, condition_types, reasons, set_condition};
use crate::api::connection::OmniConnectionStatus;
use crate::api::validation::Validation;
use crate::api::{OmniCluster, OmniConnection};
use crate::metrics::RpcOutcome;
use omni_client::template::BackendApi;

/// Re-check interval of a reachable connection.
pub const RECHECK: Duration = Duration::from_secs(300);
/// Re-check interval while deletion waits for clusters.
pub const DELETE_WAIT: Duration = Duration::from_secs(60);

/// Finalizer on an OmniConnection's service-account key Secret while OmniClusters use the
/// connection: a deletion of the Secret (by hand, by a namespace deletion) then waits until
/// the clusters no longer need Omni. Only Secrets a connection references get it, and it is
/// lifted as soon as no connection with clusters references the Secret.
pub const KEY_IN_USE_FINALIZER: &str = "omni.texashpc.com/omni-key-in-use";

/// Whether a connection's hold is on `secret`.
pub fn holds_key(secret: &Secret) -> bool {
    secret
        .finalizers()
        .iter()
        .any(|f| f == KEY_IN_USE_FINALIZER)
}

/// Pure: the key Secrets of `connections` that clusters need (those of connections that at
/// least one of `clusters` references).
pub fn needed_keys(connections: &[OmniConnection], clusters: &[OmniCluster]) -> BTreeSet<String> {
    connections
        .iter()
        .filter(|conn| {
            clusters.iter().any(|c| {
                c.spec.connection_ref.name == conn.name_any() && c.namespace() == conn.namespace()
            })
        })
        .map(|conn| conn.spec.auth.service_account_secret_ref.name.clone())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Puts the hold on the key Secrets of `ns` that its clusters need and lifts it from those no
/// longer needed (the last cluster went, a connection now names another Secret, the connection
/// is gone). A Secret being deleted takes no new finalizer; one held goes once it is released.
async fn sync_key_holds(ctx: &Context, ns: &str) -> Result<(), Error> {
    let lp = ListParams::default();
    let connections = ctx.api::<OmniConnection>(ns).list(&lp).await?.items;
    let clusters = ctx.api::<OmniCluster>(ns).list(&lp).await?.items;
    let needed = needed_keys(&connections, &clusters);
    let secrets = ctx.api::<Secret>(ns);
    for name in &needed {
        if let Some(secret) = secrets.get_opt(name).await?
            && secret.metadata.deletion_timestamp.is_none()
            && !holds_key(&secret)
        {
            let mut list = secret.finalizers().to_vec();
            list.push(KEY_IN_USE_FINALIZER.to_string());
            super::kubeconfig_export::set_secret_finalizers(&secrets, &secret, list).await?;
        }
    }
    for secret in secrets.list(&lp).await? {
        if holds_key(&secret) && !needed.contains(&secret.name_any()) {
            let rest = secret
                .finalizers()
                .iter()
                .filter(|f| *f != KEY_IN_USE_FINALIZER)
                .cloned()
                .collect();
            super::kubeconfig_export::set_secret_finalizers(&secrets, &secret, rest).await?;
        }
    }
    Ok(())
}

/// Why an OmniConnection is not ready; the message is its condition's and Event's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionFailure {
    /// The spec is invalid (it bypassed admission): the webhook's summary.
    #[error("{0}")]
    InvalidSpec(String),
    /// The Omni client could not be built (its Secret, key or endpoint).
    #[error("failed to connect to Omni: {0}")]
    Client(#[source] ConnectionError),
    /// Omni's backend API version could not be read.
    #[error("failed to connect to Omni: {0}")]
    BackendApi(#[source] ApiVersionError),
    /// Omni did not answer the ping (a list of its clusters).
    #[error("failed to connect to Omni: list Omni clusters: {0}")]
    Ping(#[source] omni_client::state::StateError),
}

impl ConnectionFailure {
    /// The condition reason this failure is reported under.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => reasons::VALIDATION_FAILED,
            Self::Client(e) => e.reason(),
            Self::BackendApi(_) | Self::Ping(_) => reasons::CONNECTION_FAILED,
        }
    }

    /// What the reconcile does next: an invalid spec waits for a change, the rest backs off.
    pub fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) => RetryPolicy::AwaitChange,
            Self::Client(_) | Self::BackendApi(_) | Self::Ping(_) => RetryPolicy::Backoff,
        }
    }
}

/// The outcome of one check, before it becomes conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Omni answered.
    Reachable {
        /// Endpoint as the Omni client reports it.
        endpoint: String,
    },
    /// The spec is invalid, or building the client or pinging failed.
    Failed(ConnectionFailure),
    /// Omni answered but speaks a backend API version this operator cannot translate for.
    UnsupportedApi {
        /// Endpoint as the Omni client reports it.
        endpoint: String,
        /// The version Omni reported (0 = none).
        version: u32,
    },
    /// Deletion waits for these clusters (sorted).
    Deleting {
        /// Names of the referencing OmniClusters.
        clusters: Vec<String>,
    },
}

/// Pure: the status a connection should have after `outcome`. `lastCheckTime` moves only when
/// something else in the status changed, so idle re-checks write nothing.
pub fn desired_status(
    conn: &OmniConnection,
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> OmniConnectionStatus {
    let old = conn.status.clone().unwrap_or_default();
    let generation = conn.metadata.generation;
    let mut s = old.clone();
    s.observed_generation = generation;
    s.connection_ref = conn.metadata.name.clone();
    s.endpoint = Some(conn.spec.endpoint.clone());
    let mut set = |type_: &str, status: ConditionStatus, reason: &str, message: &str| {
        set_condition(
            &mut s.conditions,
            Condition::new(type_, status, reason, message, generation, now),
        );
    };
    match outcome {
        Outcome::Reachable { endpoint } => {
            let m = format!("connected to {endpoint}");
            set(
                condition_types::REACHABLE,
                ConditionStatus::True,
                reasons::CONNECTION_READY,
                &m,
            );
            set(
                condition_types::READY,
                ConditionStatus::True,
                reasons::CONNECTION_READY,
                &m,
            );
            set(
                condition_types::STALLED,
                ConditionStatus::False,
                reasons::CONNECTION_READY,
                &m,
            );
        }
        Outcome::Failed(failure) => {
            let (reason, message) = (failure.reason(), failure.to_string());
            let message = &message;
            set(
                condition_types::REACHABLE,
                ConditionStatus::False,
                reason,
                message,
            );
            set(
                condition_types::READY,
                ConditionStatus::False,
                reason,
                message,
            );
            set(
                condition_types::STALLED,
                ConditionStatus::True,
                reason,
                message,
            );
        }
        Outcome::UnsupportedApi { endpoint, version } => {
            let m = format!(
                "connected to {endpoint}, but {}",
                omni_client::template::unsupported_message(*version)
            );
            set(
                condition_types::REACHABLE,
                ConditionStatus::True,
                reasons::CONNECTION_READY,
                &format!("connected to {endpoint}"),
            );
            set(
                condition_types::READY,
                ConditionStatus::False,
                reasons::UNSUPPORTED_OMNI_API,
                &m,
            );
            // Nothing this operator does will fix it: only an Omni or operator upgrade will.
            set(
                condition_types::STALLED,
                ConditionStatus::True,
                reasons::UNSUPPORTED_OMNI_API,
                &m,
            );
        }
        Outcome::Deleting { clusters } => {
            let m = format!(
                "waiting for OmniCluster references to be deleted: {}",
                clusters.join(", ")
            );
            set(
                condition_types::READY,
                ConditionStatus::False,
                reasons::DELETING,
                &m,
            );
            set(
                condition_types::STALLED,
                ConditionStatus::True,
                reasons::DELETING,
                &m,
            );
        }
    }
    if s != old || s.last_check_time.is_none() {
        s.last_check_time = Some(now);
    }
    s
}

/// Names (sorted) of OmniClusters in the namespace that reference `conn`, including those
/// being deleted.
async fn referencing_clusters(ctx: &Context, conn: &OmniConnection) -> Result<Vec<String>, Error> {
    let namespace = conn.namespace().unwrap_or_default();
    let name = conn.name_any();
    let clusters = ctx
        .api::<OmniCluster>(&namespace)
        .list(&ListParams::default())
        .await?;
    let mut names: Vec<String> = clusters
        .items
        .iter()
        .filter(|c| c.spec.connection_ref.name == name)
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    Ok(names)
}

/// `True`, `False` or `Unknown`.
pub fn status_str(s: ConditionStatus) -> &'static str {
    match s {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

/// Pings Omni and reads the backend API version it speaks.
async fn check(ctx: &Context, conn: &OmniConnection) -> Result<Outcome, Error> {
    sync_key_holds(ctx, &conn.namespace().unwrap_or_default()).await?;
    let client = match ctx.omni.get(conn).await {
        Ok(client) => client,
        Err(e) => return Ok(Outcome::Failed(ConnectionFailure::Client(e))),
    };
    let endpoint = match client.ping().await {
        Ok(endpoint) => endpoint,
        Err(e) => {
            ctx.metrics.omni_rpc("ping", RpcOutcome::Error);
            return Ok(Outcome::Failed(ConnectionFailure::Ping(e)));
        }
    };
    ctx.metrics.omni_rpc("ping", RpcOutcome::Unchanged);
    Ok(match ctx.omni.refresh_backend_api(conn, &client).await {
        Ok(version) if BackendApi::from_version(version).is_some() => {
            Outcome::Reachable { endpoint }
        }
        Ok(version) => Outcome::UnsupportedApi { endpoint, version },
        Err(e) => Outcome::Failed(ConnectionFailure::BackendApi(e)),
    })
}

/// The deletion waits while clusters still use the connection. The key Secret's hold comes
/// off before the finalizer: once this object is gone, nothing would reconcile it any more.
async fn delete(ctx: &Context, conn: &OmniConnection) -> Result<Cleanup<Outcome>, Error> {
    let clusters = referencing_clusters(ctx, conn).await?;
    sync_key_holds(ctx, &conn.namespace().unwrap_or_default()).await?;
    Ok(if clusters.is_empty() {
        Cleanup::Done
    } else {
        Cleanup::Waiting(Outcome::Deleting { clusters })
    })
}

/// Pure: after a check, the next one: a failure by its [`RetryPolicy`], a waiting deletion
/// after [`DELETE_WAIT`], anything else after `recheck` ([`RECHECK`], spread).
fn next_check(outcome: Outcome, recheck: Duration) -> Result<Action, Error> {
    match outcome {
        Outcome::Failed(f) => f.retry().action().ok_or(f.into()),
        Outcome::Deleting { .. } => Ok(Action::requeue(DELETE_WAIT)),
        Outcome::Reachable { .. } | Outcome::UnsupportedApi { .. } => Ok(Action::requeue(recheck)),
    }
}

impl Pipeline for OmniConnection {
    type Outcome = Outcome;
    const LEGACY_FINALIZER: bool = true;

    fn validate(&self) -> Validation {
        crate::api::connection::validate(self, None)
    }

    fn invalid(summary: String) -> Outcome {
        Outcome::Failed(ConnectionFailure::InvalidSpec(summary))
    }

    async fn apply(self: Arc<Self>, ctx: Arc<Context>) -> Result<Outcome, Error> {
        check(&ctx, &self).await
    }

    fn desired_status(&self, outcome: &Outcome, now: jiff::Timestamp) -> OmniConnectionStatus {
        desired_status(self, outcome, now)
    }

    fn next(&self, outcome: Outcome, _ctx: &Context) -> Result<Action, Error> {
        next_check(outcome, super::periodic(RECHECK))
    }

    async fn cleanup(self: Arc<Self>, ctx: Arc<Context>) -> Result<Cleanup<Outcome>, Error> {
        delete(&ctx, &self).await
    }

    fn forget(&self, ctx: &Context) {
        ctx.omni
            .forget(&self.namespace().unwrap_or_default(), &self.name_any());
    }
}

/// Runs the OmniConnection controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (controller, by_secret) = indexed_controller_for::<OmniConnection>(&ctx, |c| {
        vec![RefKey::new(
            "secret",
            &namespace_of(c),
            &c.spec.auth.service_account_secret_ref.name,
        )]
    });
    let controller = controller
        // Cluster create/delete re-triggers the connection: this releases a waiting deletion.
        .watches(
            ctx.watch_api::<OmniCluster>(),
            watcher::Config::default(),
            |cluster: OmniCluster| {
                crate::baseline::mapped_event_passes("cluster→connection", &cluster.metadata)
                    .then_some(())?;
                let name = cluster.spec.connection_ref.name.clone();
                let namespace = cluster.namespace();
                (!name.is_empty()).then(|| dyn_ref::<OmniConnection>(&name, namespace.as_deref()))
            },
        )
        // A fixed or rotated key is picked up at once rather than at the next re-check.
        .watches(
            ctx.watch_api::<Secret>(),
            watcher::Config::default(),
            move |secret: Secret| {
                by_secret.get(&RefKey::new(
                    "secret",
                    &namespace_of(&secret),
                    &secret.name_any(),
                ))
            },
        );
    drive::<OmniConnection, _, _>(controller, ctx, shutdown, pipeline::reconcile).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::find_condition;

    /// A failure is `Reachable`, `Ready` and `Stalled` under its own reason and message; an
    /// invalid spec waits for a change, an unreachable Omni backs off.
    #[test]
    fn a_failure_sets_its_reason_on_every_condition() {
        let missing = ConnectionFailure::Client(ConnectionError::Client("no route".into()));
        assert_eq!(missing.reason(), "ConnectionFailed");
        assert_eq!(missing.retry(), RetryPolicy::Backoff);
        let invalid = ConnectionFailure::InvalidSpec("spec.endpoint: required".into());
        assert_eq!(invalid.retry(), RetryPolicy::AwaitChange);
        let s = desired_status(
            &conn(),
            &Outcome::Failed(missing),
            jiff::Timestamp::UNIX_EPOCH,
        );
        for type_ in ["Reachable", "Ready", "Stalled"] {
            let c = find_condition(&s.conditions, type_);
            assert_eq!(
                c.map(|c| (c.reason.as_str(), c.message.as_str())),
                Some((
                    "ConnectionFailed",
                    "failed to connect to Omni: create Omni client: no route"
                )),
                "{type_}"
            );
        }
    }

    fn conn() -> OmniConnection {
        let mut c: OmniConnection = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": "omni", "namespace": "ns", "generation": 3},
            "spec": {"endpoint": "https://omni.example", "auth": {"serviceAccountSecretRef": {"name": "k", "key": "serviceAccountKey"}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        c.status = None;
        c
    }

    #[test]
    fn reachable_sets_three_conditions_and_idle_recheck_changes_nothing() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let mut c = conn();
        let out = Outcome::Reachable {
            endpoint: "https://omni.example:443".into(),
        };
        let s = desired_status(&c, &out, t0);
        for t in ["Reachable", "Ready"] {
            let cond = find_condition(&s.conditions, t).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(cond.status, ConditionStatus::True);
            assert_eq!(cond.reason, "ConnectionReady");
            assert_eq!(cond.message, "connected to https://omni.example:443");
            assert_eq!(cond.observed_generation, Some(3));
        }
        assert_eq!(
            find_condition(&s.conditions, "Stalled").map(|c| c.status),
            Some(ConditionStatus::False)
        );
        assert_eq!(s.last_check_time, Some(t0));
        c.status = Some(s.clone());
        let later = desired_status(&c, &out, t0 + jiff::SignedDuration::from_secs(300));
        assert_eq!(
            later, s,
            "an unchanged result must not produce a status write"
        );
    }

    fn cluster(name: &str, connection: &str) -> OmniCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"connectionRef": {"name": connection}, "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_key_secrets_of_connections_that_clusters_use_are_needed() {
        let used = conn();
        let mut idle = conn();
        idle.metadata.name = Some("idle".into());
        idle.spec.auth.service_account_secret_ref.name = "idle-key".into();
        let clusters = [cluster("a", "omni"), cluster("b", "omni")];
        assert_eq!(
            needed_keys(&[used.clone(), idle.clone()], &clusters),
            BTreeSet::from(["k".to_string()])
        );
        // The last cluster gone: nothing needs a key any more.
        assert!(needed_keys(&[used.clone(), idle], &[]).is_empty());
        // A cluster of another namespace does not count.
        let mut elsewhere = cluster("c", "omni");
        elsewhere.metadata.namespace = Some("other".into());
        assert!(needed_keys(&[used], &[elsewhere]).is_empty());
    }

    #[test]
    fn deleting_lists_clusters() {
        let s = desired_status(
            &conn(),
            &Outcome::Deleting {
                clusters: vec!["a".into(), "b".into()],
            },
            jiff::Timestamp::UNIX_EPOCH,
        );
        let ready = find_condition(&s.conditions, "Ready").unwrap_or_else(|| panic!("Ready"));
        assert_eq!(ready.reason, "Deleting");
        assert_eq!(
            ready.message,
            "waiting for OmniCluster references to be deleted: a, b"
        );
        assert_eq!(
            find_condition(&s.conditions, "Stalled").map(|c| c.status),
            Some(ConditionStatus::True)
        );
    }
}
