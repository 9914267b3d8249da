//! OmniConnection: check that Omni is reachable with the configured key, and hold deletion
//! while OmniClusters still use the connection.
//!
//! The connection also holds its service-account key Secret while OmniClusters use it
//! (`omni.texashpc.com/omni-key-in-use` on the Secret): deleting an OmniCluster needs Omni, so
//! a namespace deletion, which deletes the Secret together with everything else, must leave
//! the key in place until the clusters are gone from Omni.

mod key_hold;
mod outcome;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt};

pub(crate) use self::key_hold::SweptKeys;
use self::key_hold::sync_key_holds;
pub(crate) use self::outcome::ConnectionFailure;
pub use self::outcome::{Outcome, desired_status, status_str};
use super::index::{RefKey, namespace_of};
use super::pipeline::{self, Cleanup, Pipeline};
use super::{
    Cached, Context, Error, Shutdown, Watches, cached_ref, cluster_changes_of, drive,
    indexed_controller_for, touched,
};
use crate::api::connection::OmniConnectionStatus;
use crate::api::validation::Validation;
use crate::api::{OmniCluster, OmniConnection};
use crate::metrics::RpcOutcome;
use omni_client::template::BackendApi;

/// Re-check interval of a reachable connection.
pub(crate) const RECHECK: Duration = Duration::from_secs(300);
/// Re-check interval while deletion waits for clusters.
pub(crate) const DELETE_WAIT: Duration = Duration::from_secs(60);

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

/// The OmniConnection controller, subscribed to `watches`: runs until `shutdown` completes.
pub fn start<S: Shutdown>(
    ctx: Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, by_secret) = indexed_controller_for::<OmniConnection>(&ctx, watches, |c| {
        vec![RefKey::new(
            "secret",
            &namespace_of(c),
            &c.spec.auth.service_account_secret_ref.name,
        )]
    });
    let controller = controller
        // A cluster appearing, going or naming another connection re-triggers the connection:
        // this puts on or lifts the key's hold and releases a waiting deletion. Nothing else
        // of a cluster matters to it; every status write of every cluster used to re-run it.
        .watches_stream(
            cluster_changes_of(watches, super::ClusterTrigger::Connection),
            |cluster: Cached<OmniCluster>| {
                crate::baseline::mapped_event_passes("cluster→connection", cluster.meta())
                    .then_some(())?;
                let name = &cluster.decoded()?.spec.connection_ref.name;
                let namespace = cluster.namespace();
                (!name.is_empty()).then(|| cached_ref::<OmniConnection>(name, namespace.as_deref()))
            },
        )
        // A fixed or rotated key is picked up at once rather than at the next re-check.
        .watches_stream(touched::<Secret>(watches), move |secret: Cached<Secret>| {
            by_secret.referring_to("secret", &secret)
        });
    drive::<OmniConnection, _, _>(controller, ctx, shutdown, pipeline::reconcile)
}

#[cfg(test)]
mod fixtures;
