//! OmniKubeconfigExport: mint a service-account kubeconfig in Omni and keep it, rotated, in a
//! Secret.
//!
//! Fixes over the original: a target Secret this export does not own is never written or
//! deleted (unless annotated `omni.texashpc.com/adopt: "true"`), and failures keep the last
//! known hash and rotation times in status instead of clearing them.
//!
//! The export holds its Secret while OmniHelmReleases or OmniSecretSyncs use it as their
//! kubeconfig (`IN_USE_FINALIZER` on the Secret, and a wait in the export's own deletion), so
//! that deleting everything at once — a GitOps prune, a namespace deletion — lets the release
//! be uninstalled and the copy removed before the kubeconfig disappears.
//!
//! A reconcile is the controllers' one pipeline: the webhook's own `validate`, then `apply`
//! (find the cluster and connection, reuse the stored kubeconfig or mint one) ending in an
//! `Outcome`, from which pure functions derive the status (one write) and the next reconcile.
//! Failures are an `ExportFailure`, which knows its condition reason and retry policy.

mod apply;
mod holds;
mod outcome;
mod probe;
mod rotation;
mod target;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use self::outcome::{Done, Outcome};
use super::index::{RefIndex, RefKey, namespace_of};
use super::pipeline::{self, Cleanup, Pipeline};
use super::{
    Cached, Context, Error, Shutdown, Watches, cached_ref, cluster_changes_of, drive,
    indexed_controller_for, touched,
};
use crate::api::{
    OmniCluster, OmniConnection, OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync,
};

pub use self::holds::holds;
pub(crate) use self::holds::set_secret_finalizers;
pub(crate) use self::outcome::ExportFailure;
pub use self::rotation::{Stored, reusable, sha256_hex};

/// Re-check while a dependency is missing.
pub(crate) const RETRY: Duration = Duration::from_secs(60);
/// Bound of the usability probe against the workload API server.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Event reason published when an existing target Secret receives a freshly minted kubeconfig.
pub(crate) const ROTATED_REASON: &str = "KubeconfigRotated";

pub(crate) const MANAGED_BY: (&str, &str) =
    ("app.kubernetes.io/managed-by", "omni-cluster-operator");
pub(crate) const UID_LABEL: &str = "omni.texashpc.com/kubeconfig-export-uid";
const CLUSTER_LABEL: &str = "omni.texashpc.com/cluster";
pub(crate) const NAME_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-name";
const NAMESPACE_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-namespace";
const SPEC_HASH_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-spec-hash";
const HASH_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-hash";
const EXPIRATION_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-expiration-time";
const LAST_ROTATION_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-last-rotation-time";
/// The shape last written (`spec.format`), absent for `Kubeconfig`: a format change removes the
/// keys (and the Argo CD label) of the old shape.
const FORMAT_ANNOTATION: &str = "omni.texashpc.com/kubeconfig-export-format";

/// The pipeline's steps for OmniKubeconfigExport.
impl Pipeline for OmniKubeconfigExport {
    type Outcome = Outcome;
    const LEGACY_FINALIZER: bool = false;

    /// The OmniCluster: its Omni and its workload API server.
    fn target(&self) -> Option<String> {
        let ns = self.namespace().unwrap_or_default();
        Some(format!("cluster:{ns}/{}", self.spec.cluster_ref.name))
    }

    /// The webhook's own rules, in case admission was bypassed.
    fn validate(&self) -> crate::api::validation::Validation {
        crate::api::kubeconfig_export::validate_stored(self)
    }

    /// The outcome of an export whose spec is invalid.
    fn invalid(summary: String) -> Outcome {
        Outcome::early(Err(ExportFailure::InvalidSpec(summary)))
    }

    /// Observe → plan → apply on a valid export carrying the finalizer.
    async fn apply(self: Arc<Self>, ctx: Arc<Context>) -> Result<Outcome, Error> {
        apply::apply(&ctx, &self).await
    }

    /// Pure: the status reporting `outcome`.
    fn desired_status(
        &self,
        outcome: &Outcome,
        now: jiff::Timestamp,
    ) -> crate::api::kubeconfig_export::OmniKubeconfigExportStatus {
        outcome::desired_status(self, outcome, now)
    }

    /// After the status write: the expiry metric, and the next reconcile.
    fn next(&self, outcome: Outcome, ctx: &Context) -> Result<Action, Error> {
        let now = ctx.clock.now();
        if let Some(exp) = outcome::expiration(self, &outcome) {
            let left = exp.duration_since(now).as_secs_f64();
            ctx.metrics.set_kubeconfig_expiry(
                &self.namespace().unwrap_or_default(),
                &self.name_any(),
                left,
            );
        }
        Ok(outcome::next_action(outcome, now, ctx.min_interval)?)
    }

    /// The deleting export's part in its Secret's end.
    async fn cleanup(self: Arc<Self>, ctx: Arc<Context>) -> Result<Cleanup<Outcome>, Error> {
        let (ns, name) = holds::target_location(&self);
        let end =
            apply::about_target(holds::end_target(&ctx, &self).await, "clean up", &ns, &name)?;
        Ok(match end {
            Ok(holds::TargetEnd::Done) => Cleanup::Done,
            Ok(holds::TargetEnd::Waiting(w)) => {
                Cleanup::Waiting(Outcome::early(Ok(Done::Waiting(w))))
            }
            Ok(holds::TargetEnd::Failed(f)) | Err(f) => Cleanup::Waiting(Outcome::early(Err(f))),
        })
    }
}

/// A kind that reads a kubeconfig Secret an export may write: a consumer the export's hold on
/// the Secret waits for.
trait KubeconfigConsumer: super::OwnKind {
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

/// The OmniKubeconfigExport controller, subscribed to `watches`: runs until `shutdown`
/// completes.
pub fn start<S: Shutdown>(
    ctx: Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniKubeconfigExport>(&ctx, watches, |x| {
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
            cluster_changes_of(watches, super::ClusterTrigger::ChangesAndConditions),
            move |c: Cached<OmniCluster>| by_cluster.referring_to("cluster", &c),
        )
        .watches_stream(
            touched::<OmniConnection>(watches),
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
            touched::<OmniHelmRelease>(watches),
            move |r: Cached<OmniHelmRelease>| deleting_consumer(&by_release, &r),
        )
        .watches_stream(
            touched::<OmniSecretSync>(watches),
            move |s: Cached<OmniSecretSync>| deleting_consumer(&by_sync, &s),
        )
        // Editing or deleting the target re-exports it.
        .watches_stream(touched::<Secret>(watches), |s: Cached<Secret>| {
            let a = s.annotations();
            let name = a.get(NAME_ANNOTATION)?.clone();
            let ns = a
                .get(NAMESPACE_ANNOTATION)
                .cloned()
                .or_else(|| s.namespace())
                .unwrap_or_default();
            Some(cached_ref::<OmniKubeconfigExport>(&name, Some(&ns)))
        });
    drive::<OmniKubeconfigExport, _, _>(controller, ctx, shutdown, pipeline::reconcile)
}
