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

use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use omni_client::template::BackendApi;

use self::key_hold::{SweptKeys, sync_key_holds};
use self::outcome::{Checked, ConnectionFailure, Outcome, desired_status};
use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::{Cached, cached_ref};
use super::shared::error::{Error, PassError, periodic};
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefKey, namespace_of};
use super::shared::omni::OmniClients;
use super::shared::pipeline::{Cleanup, Pipeline, webhook_rules};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::setup::Setup;
use super::shared::status::reported;
use super::shared::triggers::{SecretMeta, touched};
use super::shared::watches::Watches;
use crate::api::connection::OmniConnectionStatus;
use crate::api::{OmniCluster, OmniConnection};
use crate::process::metrics::RpcOutcome;

pub(crate) use self::outcome::RECHECK;
/// Re-check interval while deletion waits for clusters.
pub(crate) const DELETE_WAIT: Duration = Duration::from_secs(60);

/// What the OmniConnection controller keeps.
pub(crate) struct ConnectionState {
    /// The Omni clients, one per OmniConnection.
    omni: Arc<OmniClients>,
    /// The needed key Secrets as of each namespace's last sweep of key holds.
    swept: SweptKeys,
}

reported!(OmniConnection => OmniConnectionStatus);

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
async fn check(
    ctx: &Context,
    state: &ConnectionState,
    conn: &OmniConnection,
) -> Result<Outcome, Error> {
    let namespace = conn.namespace().unwrap_or_default();
    sync_key_holds(ctx, &state.swept, &namespace).await?;
    let client = match state.omni.get(conn).await {
        Ok(client) => client,
        Err(e) => return Ok(Outcome::failed(ConnectionFailure::Client(e))),
    };
    let endpoint = match client.ping().await {
        Ok(endpoint) => endpoint,
        Err(e) => {
            ctx.metrics.omni_rpc("ping", RpcOutcome::Error);
            return Ok(Outcome::failed(ConnectionFailure::Ping(e)));
        }
    };
    ctx.metrics.omni_rpc("ping", RpcOutcome::Unchanged);
    Ok(match state.omni.refresh_backend_api(conn, &client).await {
        Ok(version) if BackendApi::from_version(version).is_some() => {
            Outcome::done(Checked::Reachable { endpoint })
        }
        Ok(version) => Outcome::done(Checked::UnsupportedApi { endpoint, version }),
        Err(e) => Outcome::failed(ConnectionFailure::BackendApi(e)),
    })
}

/// The deletion waits while clusters still use the connection. The key Secret's hold comes
/// off before the finalizer: once this object is gone, nothing would reconcile it any more.
async fn delete(
    ctx: &Context,
    state: &ConnectionState,
    conn: &OmniConnection,
) -> Result<Cleanup<Outcome>, Error> {
    let clusters = referencing_clusters(ctx, conn).await?;
    sync_key_holds(ctx, &state.swept, &conn.namespace().unwrap_or_default()).await?;
    Ok(if clusters.is_empty() {
        Cleanup::Done
    } else {
        Cleanup::Waiting(Outcome::done(Checked::Deleting { clusters }))
    })
}

/// Pure: after a check that came to `checked`, the next one: a waiting deletion after
/// [`DELETE_WAIT`], anything else after `recheck` ([`RECHECK`], spread).
fn next_check(checked: &Checked, recheck: Duration) -> Action {
    match checked {
        Checked::Deleting { .. } => Action::requeue(DELETE_WAIT),
        Checked::Reachable { .. } | Checked::UnsupportedApi { .. } => Action::requeue(recheck),
    }
}

impl Pipeline for OmniConnection {
    type State = ConnectionState;
    type Found = ();
    type Done = Checked;
    type Failure = ConnectionFailure;
    const FINALIZER: Finalizer = Finalizer::CurrentOrLegacy;

    fn validate(&self) -> Result<(), ConnectionFailure> {
        webhook_rules(
            crate::api::connection::validate(self, None),
            ConnectionFailure::InvalidSpec,
        )
    }

    async fn apply(
        &self,
        ctx: &Context,
        state: &ConnectionState,
    ) -> Result<Outcome, PassError<Self>> {
        Ok(check(ctx, state, self).await?)
    }

    async fn cleanup(
        &self,
        ctx: &Context,
        state: &ConnectionState,
    ) -> Result<Cleanup<Outcome>, PassError<Self>> {
        Ok(delete(ctx, state, self).await?)
    }

    fn desired_status(&self, outcome: &Outcome, now: jiff::Timestamp) -> OmniConnectionStatus {
        desired_status(self, outcome, now)
    }

    fn recheck(&self, checked: &Checked, _ctx: &Context, _state: &ConnectionState) -> Action {
        next_check(checked, periodic(RECHECK))
    }

    fn forget(&self, state: &ConnectionState) {
        state
            .omni
            .forget(&self.namespace().unwrap_or_default(), &self.name_any());
    }
}

/// The OmniConnection controller, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<S: Shutdown>(
    ctx: &Arc<Context>,
    setup: &Setup<'_>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, by_secret) = indexed_controller_for::<OmniConnection>(ctx, watches, |c| {
        vec![RefKey::new(
            "secret",
            &namespace_of(c),
            &c.spec.auth.service_account_secret_ref.name,
        )]
    });
    let clusters = ctx
        .baseline
        .mapped_events(watches.of::<OmniCluster>().subscribe());
    let controller = controller
        // A cluster appearing, going or naming another connection re-triggers the connection:
        // this puts on or lifts the key's hold and releases a waiting deletion. Nothing else
        // of a cluster matters to it; every status write of every cluster used to re-run it.
        .watches_stream(
            cluster_triggers(clusters, ClusterTrigger::Connection),
            |cluster: Cached<OmniCluster>| {
                let name = &cluster.decoded()?.spec.connection_ref.name;
                let namespace = cluster.namespace();
                (!name.is_empty()).then(|| cached_ref::<OmniConnection>(name, namespace.as_deref()))
            },
        )
        // A fixed or rotated key is picked up at once rather than at the next re-check.
        .watches_stream(
            touched(watches.of::<SecretMeta>().subscribe()),
            move |secret: Cached<SecretMeta>| by_secret.referring_to("secret", &secret),
        );
    let state = ConnectionState {
        omni: setup.omni.clone(),
        swept: SweptKeys::default(),
    };
    drive::<OmniConnection>(controller, ctx.clone(), state, shutdown)
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod omni_tests;
