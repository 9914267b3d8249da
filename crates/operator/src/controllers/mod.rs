//! The controllers: one module per kind, holding only that kind's decisions, and `shared`,
//! the machinery every kind runs on (see `docs/architecture.md`).
//!
//! Every kind runs the same pipeline (`shared::pipeline`): validate → apply (observe, plan,
//! act; returns an outcome) → status (pure, written once, Events on condition transitions) →
//! next reconcile. Each kind's module exposes `start(ctx, setup, watches, shutdown)`, which
//! subscribes to the kinds it reads and returns the controller's future; `start_all` is the
//! one list of them.

pub(crate) mod children;
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod fleet;
pub(crate) mod helm_release;
pub(crate) mod kubeconfig_export;
pub(crate) mod secret_sync;
pub(crate) mod shared;

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;

pub use self::cluster::OMNI_DEADLINE;
pub use self::cluster::triggers::{ClusterTrigger, cluster_changes};
use self::shared::context::Context;
pub use self::shared::context::{Clock, Scope, SystemClock};
pub use self::shared::error::backoff_delay;
pub use self::shared::fairness::DEFAULT_PER_TARGET;
use self::shared::runner::Shutdown;
use self::shared::setup::Setup;
pub use self::shared::triggers::secret_changes;
use self::shared::watches::Watches;
use crate::api::{
    OmniCluster, OmniConnection, OmniControlPlane, OmniHelmRelease, OmniKubeconfigExport,
    OmniMachine, OmniWorkers,
};

/// Every kind's controller, subscribed to `watches`, each running until `shutdown` completes.
/// A new kind is registered here, and nowhere else outside its own module.
pub(crate) fn start_all<S: Shutdown + Clone>(
    ctx: &Arc<Context>,
    setup: &Setup<'_>,
    watches: &mut Watches,
    shutdown: S,
) -> Vec<BoxFuture<'static, ()>> {
    let stop = || shutdown.clone();
    // The kinds other objects refer to by name are read across shards: each shard watches and
    // caches them whole and reconciles only its own (docs/decisions.md, "Sharding").
    watches.of::<OmniConnection>().whole();
    watches.of::<OmniCluster>().whole();
    watches.of::<OmniControlPlane>().whole();
    watches.of::<OmniWorkers>().whole();
    watches.of::<OmniMachine>().whole();
    watches.of::<OmniHelmRelease>().whole(); // `dependsOn` names other releases
    // A sync or a release waiting for a kubeconfig Secret asks whether an export writes it.
    watches.of::<OmniKubeconfigExport>().whole();
    let mut all = vec![
        connection::start(ctx, setup, watches, stop()).boxed(),
        cluster::start(ctx, setup, watches, stop()).boxed(),
        children::start::<OmniControlPlane, _>(ctx, watches, stop()).boxed(),
        children::start::<OmniWorkers, _>(ctx, watches, stop()).boxed(),
        children::start::<OmniMachine, _>(ctx, watches, stop()).boxed(),
        secret_sync::start(ctx, setup, watches, stop()).boxed(),
        kubeconfig_export::start(ctx, setup, watches, stop()).boxed(),
        helm_release::start(ctx, setup, watches, stop()).boxed(),
    ];
    all.extend(fleet::kinds::start_all(ctx, watches, stop()));
    all
}
