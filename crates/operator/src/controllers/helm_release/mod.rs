//! OmniHelmRelease: a Helm release in a workload cluster, driven through the helm CLI
//! ([`crate::domain::helm`]) with the kubeconfig from an explicitly named Secret.
//!
//! Differences from the original (see `docs/helm.md`): Helm runs only when the input digest
//! (target, chart, version, values) changed or the release drifted (missing, failed, or changed
//! out of band), so a kubeconfig rotation alone creates no revision; a periodic drift check
//! repairs out-of-band changes; a failed upgrade that Helm rolled back (`atomic`) raises a
//! Warning Event; a release stuck in `pending-*` longer than its timeout is reported, and
//! recovered when `spec.recoverStuckRelease` allows it; repository credentials and a CA bundle
//! come from a Secret; a deletion whose kubeconfig Secret is gone reports why and how to finish
//! it instead of waiting silently.
//!
//! Shape (docs/architecture.md): a pass (`converge.rs`) gathers its inputs (`inputs.rs`, which
//! also resolves the release request every Helm call of the pass takes), looks at the release
//! (`release::Observation`), determines its state (`release::determine`, pure), picks the next
//! action (`decide::next_action`, pure) and carries it out (`install.rs`, `upgrade.rs`,
//! `recover.rs`; a deletion in `uninstall.rs`). Every pass ends in one `outcome::Outcome`,
//! from which the status (`outcome::desired_status`, pure) is written once. `state.rs` is what
//! the controller keeps (the helm driver, the Secret policy, the drift-check floor).

mod apply;
mod budget;
mod converge;
mod decide;
mod drift;
mod gates;
mod history;
mod inputs;
mod install;
mod outcome;
mod ownership;
mod recover;
mod release;
mod remediate;
mod report;
mod state;
mod test_hooks;
mod triggers;
mod uninstall;
mod upgrade;
mod values_from;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use self::outcome::{Done, HelmFailure, Outcome, desired_status, recheck, retry_policy};
use self::state::{DEPENDENCY, HEALTH_GATED_CLUSTER, HelmState};
use self::values_from::VALUES_CONFIG_MAP;
use super::cluster::triggers::{ClusterTrigger, cluster_triggers};
use super::shared::context::Context;
use super::shared::decoded::Cached;
use super::shared::error::{PassError, RetryPolicy, periodic_spread};
use super::shared::finalizer::Finalizer;
use super::shared::index::{RefKey, namespace_of};
use super::shared::pipeline::{Cleanup, Pipeline, webhook_rules};
use super::shared::runner::{Shutdown, drive, indexed_controller_for};
use super::shared::setup::Setup;
use super::shared::status::reported;
use super::shared::triggers::{SecretMeta, touched};
use super::shared::watches::Watches;
use crate::api::common::{condition_types as ct, find_condition};
use crate::api::helm_policies::ClusterHealthRequirement;
use crate::api::helm_release::{OmniHelmReleaseStatus, ValuesSourceKind};
use crate::api::{OmniCluster, OmniHelmRelease, OmniKubeconfigExport};

reported!(OmniHelmRelease => OmniHelmReleaseStatus, suspended: |r| r.spec.suspend);

/// The pipeline's steps for OmniHelmRelease. A pass reads the object fresh (`READ_FRESH`): the
/// watch cache can lag behind this controller's own last status write, and planning from a
/// stale digest or revision would create a needless revision.
impl Pipeline for OmniHelmRelease {
    type State = HelmState;
    /// Whether the cluster it names exists, and the inputs it applies.
    type Found = outcome::Found;
    type Done = Done;
    type Failure = HelmFailure;
    const FINALIZER: Finalizer = Finalizer::Current;
    const READ_FRESH: bool = true;

    /// The kubeconfig Secret: the workload API server helm talks to.
    fn target(&self) -> Option<String> {
        let ns = kube::ResourceExt::namespace(self).unwrap_or_default();
        Some(format!(
            "kubeconfig:{ns}/{}",
            self.spec.kubeconfig_secret_ref.name
        ))
    }

    fn validate(&self) -> Result<(), HelmFailure> {
        webhook_rules(
            crate::api::helm_release::validate_stored(self),
            HelmFailure::InvalidSpec,
        )
    }

    async fn apply(&self, ctx: &Context, state: &HelmState) -> Result<Outcome, PassError<Self>> {
        converge::attached(ctx, state, self).await
    }

    async fn cleanup(
        &self,
        ctx: &Context,
        state: &HelmState,
    ) -> Result<Cleanup<Outcome>, PassError<Self>> {
        Ok(uninstall::delete(ctx, state, self).await?)
    }

    fn desired_status(&self, outcome: &Outcome, now: jiff::Timestamp) -> OmniHelmReleaseStatus {
        desired_status(self, outcome, now)
    }

    fn recheck(&self, done: &Done, _ctx: &Context, state: &HelmState) -> Action {
        match done {
            // Resuming is a spec change, which wakes it.
            Done::Suspended => Action::await_change(),
            _ => recheck(self, state.min_interval, periodic_spread()),
        }
    }

    fn retry(&self, failure: &HelmFailure, state: &HelmState) -> RetryPolicy {
        retry_policy(self, failure, state.min_interval, periodic_spread())
    }

    /// Condition Events fire on reason changes only; each Helm action that deployed a revision
    /// is worth one too.
    async fn announce(
        &self,
        ctx: &Context,
        outcome: &Outcome,
        old: Option<&OmniHelmReleaseStatus>,
        _new: &OmniHelmReleaseStatus,
    ) {
        let Some((reason, message)) = outcome.deployed(self) else {
            return;
        };
        let was_ready = old.and_then(|s| find_condition(&s.conditions, ct::READY));
        if was_ready.is_some_and(|c| c.reason == reason) {
            ctx.event(self, EventType::Normal, reason, message).await;
        }
    }
}

/// The OmniHelmRelease controller, subscribed to `watches`: runs until `shutdown` completes.
pub(crate) fn start<S: Shutdown>(
    ctx: &Arc<Context>,
    setup: &Setup<'_>,
    watches: &mut Watches,
    shutdown: S,
) -> impl Future<Output = ()> + Send + use<S> {
    let (controller, index) = indexed_controller_for::<OmniHelmRelease>(ctx, watches, |x| {
        let ns = namespace_of(x);
        let mut keys = vec![
            RefKey::new("cluster", &ns, &x.spec.cluster_ref.name),
            RefKey::new("secret", &ns, &x.spec.kubeconfig_secret_ref.name),
        ];
        if let Some(c) = &x.spec.chart.credentials_secret_ref {
            keys.push(RefKey::new("secret", &ns, &c.name));
        }
        keys.extend(x.spec.chart.values_from.iter().map(|v| match v.kind {
            ValuesSourceKind::Secret => RefKey::new("secret", &ns, &v.name),
            ValuesSourceKind::ConfigMap => RefKey::new(VALUES_CONFIG_MAP, &ns, &v.name),
        }));
        let gated = x
            .spec
            .cluster_health
            .as_ref()
            .is_some_and(|g| g.require != ClusterHealthRequirement::None);
        if gated {
            keys.push(RefKey::new(
                HEALTH_GATED_CLUSTER,
                &ns,
                &x.spec.cluster_ref.name,
            ));
        }
        keys.extend(
            x.spec
                .depends_on
                .iter()
                .map(|d| RefKey::new(DEPENDENCY, &ns, &d.name)),
        );
        keys
    });
    let (by_secret, by_health) = (index.clone(), index.clone());
    let (by_dependency, for_state) = (index.clone(), index.clone());
    let by_config_map = index.clone();
    let controller = controller
        .watches_stream(
            cluster_triggers(
                watches.of::<OmniCluster>().subscribe(),
                ClusterTrigger::ChangesAndConditions,
            ),
            move |c: Cached<OmniCluster>| index.referring_to("cluster", &c),
        )
        // Releases that wait for their cluster's health are woken by what Omni reports of it.
        .watches_stream(
            cluster_triggers(
                watches.of::<OmniCluster>().subscribe(),
                ClusterTrigger::Health,
            ),
            move |c: Cached<OmniCluster>| by_health.referring_to(HEALTH_GATED_CLUSTER, &c),
        )
        // A kubeconfig, credentials or values Secret's change re-checks the release (a
        // kubeconfig rotation alone does not upgrade it: the digest excludes the kubeconfig;
        // a values change does).
        .watches_stream(
            touched(watches.of::<SecretMeta>().subscribe()),
            move |s: Cached<SecretMeta>| by_secret.referring_to("secret", &s),
        )
        // A values ConfigMap's change (or appearance) re-checks the release. Its metadata is
        // watched, not its data: the pass reads the content it needs.
        .watches_stream(
            touched(watches.of::<PartialObjectMeta<ConfigMap>>().subscribe()),
            move |c: Cached<PartialObjectMeta<ConfigMap>>| {
                by_config_map.referring_to(VALUES_CONFIG_MAP, &c)
            },
        )
        // A release turning Ready (or not) wakes its dependants; one going wakes the releases
        // it depended on (their deletion may wait for it).
        .watches_stream(
            triggers::dependency_changes(watches.of::<OmniHelmRelease>().subscribe()),
            move |r: Cached<OmniHelmRelease>| triggers::related(&by_dependency, &r),
        );
    let releases = watches.of::<OmniHelmRelease>().store();
    let exports = watches.of::<OmniKubeconfigExport>().store();
    let state = HelmState::new(ctx, setup, releases, for_state, exports);
    drive::<OmniHelmRelease>(controller, ctx.clone(), state, shutdown)
}

#[cfg(test)]
mod test_support;
