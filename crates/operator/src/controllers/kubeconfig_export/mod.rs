//! OmniKubeconfigExport: mint a service-account kubeconfig in Omni and keep it, rotated, in a
//! Secret.
//!
//! Fixes over the original: a target Secret this export does not own is never written or
//! deleted (unless annotated `omni.texashpc.com/adopt: "true"`), and failures keep the last
//! known hash and rotation times in status instead of clearing them.
//!
//! The export holds its Secret while OmniHelmReleases or OmniSecretSyncs use it as their
//! kubeconfig (`omni.texashpc.com/kubeconfig-in-use` on the Secret, and a wait in the export's
//! own deletion), so that deleting everything at once — a GitOps prune, a namespace deletion —
//! lets the release be uninstalled and the copy removed before the kubeconfig disappears.
//!
//! A reconcile is the controllers' one pipeline: the webhook's own `validate`, then `apply`
//! (find the cluster and connection, reuse the stored kubeconfig or mint one) ending in an
//! `Outcome`, from which pure functions derive the status (one write) and the next reconcile.
//! Failures are an `ExportFailure`, which knows its condition reason and retry policy.

mod apply;
mod holds;
mod outcome;
mod probe;
mod registration;
mod rotation;
mod state;
mod target;

use std::future::Future;
use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource as _, ResourceExt};

use self::outcome::{Done, ExportFailure, Outcome, recheck};
use self::state::ExportState;
use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::{Cached, cached_ref};
use super::shared::error::PassError;
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefIndex, RefKey, namespace_of};
use super::shared::pipeline::{Cleanup, Pipeline, webhook_rules};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::setup::Setup;
use super::shared::status::reported;
use super::shared::triggers::{SecretMeta, touched};
use super::shared::watches::{OwnKind, Watches};
use crate::api::keys;
use crate::api::kubeconfig_export::OmniKubeconfigExportStatus;
use crate::api::{
    OmniCluster, OmniConnection, OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync,
};

reported!(OmniKubeconfigExport => OmniKubeconfigExportStatus, suspended: |e| e.spec.suspend);

/// The pipeline's steps for OmniKubeconfigExport.
impl Pipeline for OmniKubeconfigExport {
    type State = ExportState;
    type Found = outcome::Found;
    type Done = Done;
    type Failure = ExportFailure;
    const FINALIZER: Finalizer = Finalizer::Current;

    /// The OmniCluster: its Omni and its workload API server.
    fn target(&self) -> Option<String> {
        let ns = self.namespace().unwrap_or_default();
        Some(format!("cluster:{ns}/{}", self.spec.cluster_ref.name))
    }

    /// The webhook's own rules, in case admission was bypassed.
    fn validate(&self) -> Result<(), ExportFailure> {
        webhook_rules(
            crate::api::kubeconfig_export::validate_stored(self),
            ExportFailure::InvalidSpec,
        )
    }

    /// Observe → plan → apply on a valid export carrying the finalizer.
    async fn apply(&self, ctx: &Context, state: &ExportState) -> Result<Outcome, PassError<Self>> {
        apply::apply(ctx, state, self).await
    }

    /// The deleting export's part in its Secret's end.
    async fn cleanup(
        &self,
        ctx: &Context,
        _state: &ExportState,
    ) -> Result<Cleanup<Outcome>, PassError<Self>> {
        // A request about the Secret that fails (the operator's RBAC does not reach its
        // namespace, an outage) is reported on the export, never a silent retry.
        let (ns, name) = holds::target_location(self);
        let end = apply::about_target(holds::end_target(ctx, self).await, "clean up", &ns, &name)?;
        Ok(match end {
            Ok(holds::TargetEnd::Done) => Cleanup::Done,
            Ok(holds::TargetEnd::Waiting(w)) => {
                Cleanup::Waiting(Outcome::early(Ok(Done::Waiting(w))))
            }
            Ok(holds::TargetEnd::Failed(f)) | Err(f) => Cleanup::Waiting(Outcome::early(Err(f))),
        })
    }

    /// Pure: the status reporting `outcome`.
    fn desired_status(
        &self,
        outcome: &Outcome,
        now: jiff::Timestamp,
    ) -> OmniKubeconfigExportStatus {
        outcome::desired_status(self, outcome, now)
    }

    fn recheck(&self, done: &Done, ctx: &Context, state: &ExportState) -> Action {
        recheck(done, ctx.clock.now(), state.min_interval)
    }

    /// After the status write: the expiry metric follows the kubeconfig the Secret holds.
    async fn announce(
        &self,
        ctx: &Context,
        _outcome: &Outcome,
        _old: Option<&OmniKubeconfigExportStatus>,
        new: &OmniKubeconfigExportStatus,
    ) {
        if let Some(expiration) = new.expiration_time {
            let left = expiration.duration_since(ctx.clock.now()).as_secs_f64();
            ctx.metrics.set_kubeconfig_expiry(
                &self.namespace().unwrap_or_default(),
                &self.name_any(),
                left,
            );
        }
    }
}

/// A kind that reads a kubeconfig Secret an export may write: a consumer the export's hold on
/// the Secret waits for.
trait KubeconfigConsumer: OwnKind {
    /// `spec.kubeconfigSecretRef.name`.
    fn kubeconfig_secret(&self) -> &str;
}

impl KubeconfigConsumer for OmniHelmRelease {
    fn kubeconfig_secret(&self) -> &str {
        &self.spec.kubeconfig_secret_ref.name
    }
}

impl KubeconfigConsumer for OmniSecretSync {
    fn kubeconfig_secret(&self) -> &str {
        &self.spec.kubeconfig_secret_ref.name
    }
}

/// The exports whose Secret `consumer` uses, when it is being deleted (only then can its change
/// matter to them: live consumers hold a Secret without needing the export to act). An
/// undecodable consumer names no Secret; the export sees it go at its next re-check.
fn deleting_consumer<K: KubeconfigConsumer>(
    exports: &RefIndex<OmniKubeconfigExport>,
    consumer: &Cached<K>,
) -> Vec<kube::runtime::reflector::ObjectRef<Cached<OmniKubeconfigExport>>> {
    let Some(secret) = consumer
        .decoded()
        .filter(|c| c.meta().deletion_timestamp.is_some())
        .map(K::kubeconfig_secret)
    else {
        return Vec::new();
    };
    exports.get(&RefKey::new("target", &namespace_of(consumer), secret))
}

/// The export (not being deleted) that writes Secret `name` of `namespace`, if one does.
pub(crate) fn writing_export(
    exports: &Store<Cached<OmniKubeconfigExport>>,
    namespace: &str,
    name: &str,
) -> Option<String> {
    exports.state().iter().find_map(|cached| {
        let export = cached.decoded()?;
        (export.meta().deletion_timestamp.is_none()
            && export.spec.target_secret_ref.name == name
            && export.effective_target_namespace() == namespace)
            .then(|| export.name_any())
    })
}

/// The OmniKubeconfigExport controller, subscribed to `watches`: runs until `shutdown`
/// completes.
pub(crate) fn start<S: Shutdown>(
    ctx: &Arc<Context>,
    setup: &Setup<'_>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniKubeconfigExport>(ctx, watches, |x| {
        vec![
            RefKey::new("cluster", &namespace_of(x), &x.spec.cluster_ref.name),
            RefKey::new(
                "target",
                &x.effective_target_namespace(),
                &x.spec.target_secret_ref.name,
            ),
        ]
    });
    let (by_cluster, by_conn, by_release, by_sync) =
        (index.clone(), index.clone(), index.clone(), index);
    // The clusters' one shared cache maps a connection to its clusters.
    let cluster_store = watches.of::<OmniCluster>().store();
    let controller = controller
        .watches_stream(
            cluster_triggers(
                watches.of::<OmniCluster>().subscribe(),
                ClusterTrigger::ChangesAndConditions,
            ),
            move |c: Cached<OmniCluster>| by_cluster.referring_to("cluster", &c),
        )
        .watches_stream(
            touched(watches.of::<OmniConnection>().subscribe()),
            move |conn: Cached<OmniConnection>| {
                let (name, ns) = (conn.name_any(), conn.namespace());
                let clusters: Vec<RefKey> = cluster_store
                    .state()
                    .into_iter()
                    .filter(|c| {
                        c.decoded()
                            .is_some_and(|c| c.spec.connection_ref.name == name)
                            && c.namespace() == ns
                    })
                    .map(|c| RefKey::new("cluster", &namespace_of(c.as_ref()), &c.name_any()))
                    .collect();
                by_conn.get_any(&clusters)
            },
        )
        // A consumer finishing (or starting) its deletion may let a held Secret go.
        .watches_stream(
            touched(watches.of::<OmniHelmRelease>().subscribe()),
            move |r: Cached<OmniHelmRelease>| deleting_consumer(&by_release, &r),
        )
        .watches_stream(
            touched(watches.of::<OmniSecretSync>().subscribe()),
            move |s: Cached<OmniSecretSync>| deleting_consumer(&by_sync, &s),
        )
        // Editing or deleting the target re-exports it.
        .watches_stream(
            touched(watches.of::<SecretMeta>().subscribe()),
            |s: Cached<SecretMeta>| {
                let a = s.annotations();
                let name = a.get(keys::EXPORT_NAME_ANNOTATION)?.clone();
                let ns = a
                    .get(keys::EXPORT_NAMESPACE_ANNOTATION)
                    .cloned()
                    .or_else(|| s.namespace())
                    .unwrap_or_default();
                Some(cached_ref::<OmniKubeconfigExport>(&name, Some(&ns)))
            },
        );
    let state = ExportState::new(setup);
    drive::<OmniKubeconfigExport>(controller, ctx.clone(), state, shutdown)
}
