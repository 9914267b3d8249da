//! The three set kinds as instances of the engine: what each reads of its own spec, and what
//! the engine reads of each member kind.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{Member, SetKind};
use crate::api::fleet::{
    ClusterSelector, MemberTemplate, Rollout, SetCredentials, StopMatchingBehavior,
};
use crate::api::helm_release::OmniHelmReleaseSpec;
use crate::api::kubeconfig_export::OmniKubeconfigExportSpec;
use crate::api::secret_sync::OmniSecretSyncSpec;
use crate::api::validation::Validation;
use crate::api::{
    OmniHelmRelease, OmniHelmReleaseSet, OmniKubeconfigExport, OmniKubeconfigExportSet,
    OmniSecretSync, OmniSecretSyncSet,
};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::runner::Shutdown;
use crate::controllers::shared::watches::Watches;

/// What the engine reads of a member kind, the same for the three but for the kubeconfig
/// Secret and the admission rules.
macro_rules! member {
    ($kind:ty, $spec:ty, $validate:path, |$m:ident| $kubeconfig:expr) => {
        impl Member for $kind {
            type Spec = $spec;
            fn build(name: &str, spec: Self::Spec) -> Self {
                Self::new(name, spec)
            }
            fn spec(&self) -> &Self::Spec {
                &self.spec
            }
            fn observed_generation(&self) -> Option<i64> {
                self.status.as_ref().and_then(|s| s.observed_generation)
            }
            fn kubeconfig_secret(&self) -> Option<&str> {
                let $m = self;
                $kubeconfig
            }
            fn admission(&self) -> Validation {
                $validate(self, None)
            }
        }
    };
}

member!(
    OmniHelmRelease,
    OmniHelmReleaseSpec,
    crate::api::helm_release::validate,
    |m| Some(&m.spec.kubeconfig_secret_ref.name)
);
member!(
    OmniSecretSync,
    OmniSecretSyncSpec,
    crate::api::secret_sync::validate,
    |m| Some(&m.spec.kubeconfig_secret_ref.name)
);
member!(
    OmniKubeconfigExport,
    OmniKubeconfigExportSpec,
    crate::api::kubeconfig_export::validate,
    |_m| None
);

/// The accessors of a set kind's spec, the same for the three.
macro_rules! set_spec {
    () => {
        fn selector(&self) -> &ClusterSelector {
            &self.spec.cluster_selector
        }
        fn template(&self) -> &MemberTemplate<<Self::Member as Member>::Spec> {
            &self.spec.template
        }
        fn stop_matching(&self) -> StopMatchingBehavior {
            self.spec.stop_matching_behavior
        }
        fn rollout(&self) -> &Rollout {
            &self.spec.rollout
        }
    };
}

impl SetKind for OmniHelmReleaseSet {
    type Member = OmniHelmRelease;
    const MINT_SUFFIX: &'static str = "ohrs";
    set_spec!();
    fn credentials(&self) -> Option<&SetCredentials> {
        Some(&self.spec.credentials)
    }
    fn admission(&self) -> Validation {
        crate::api::helm_release_set::validate(self, None)
    }
    /// Every cluster's release is named after the set (each lives in its own workload
    /// cluster), unless the template names it.
    fn complete(&self, spec: &mut serde_json::Value) {
        let name = kube::ResourceExt::name_any(self);
        if spec.get("releaseName").is_none() && name.len() <= 53 {
            spec["releaseName"] = serde_json::Value::String(name);
        }
    }
}

impl SetKind for OmniSecretSyncSet {
    type Member = OmniSecretSync;
    const MINT_SUFFIX: &'static str = "osss";
    set_spec!();
    fn credentials(&self) -> Option<&SetCredentials> {
        Some(&self.spec.credentials)
    }
    fn admission(&self) -> Validation {
        crate::api::secret_sync_set::validate(self, None)
    }
}

impl SetKind for OmniKubeconfigExportSet {
    type Member = OmniKubeconfigExport;
    const MINT_SUFFIX: &'static str = "okxs";
    set_spec!();
    fn credentials(&self) -> Option<&SetCredentials> {
        None
    }
    fn admission(&self) -> Validation {
        crate::api::kubeconfig_export_set::validate(self, None)
    }
}

/// What the three set kinds' `Pipeline` impls share; `instantiated below per kind.
macro_rules! fleet_set {
    ($set:ty) => {
        impl $crate::controllers::shared::status::Reported for $set {
            type Status = $crate::api::fleet::FleetSetStatus;
            fn stored_status(&self) -> Option<&$crate::api::fleet::FleetSetStatus> {
                self.status.as_ref()
            }
        }

        impl $crate::controllers::shared::pipeline::Pipeline for $set {
            type State = $crate::controllers::fleet::SetState<$set>;
            type Found = ();
            type Done = $crate::controllers::fleet::plan::Report;
            type Failure = $crate::controllers::fleet::outcome::SetFailure;
            const FINALIZER: $crate::controllers::shared::finalizer::Finalizer =
                $crate::controllers::shared::finalizer::Finalizer::None;

            fn validate(&self) -> Result<(), Self::Failure> {
                $crate::controllers::shared::pipeline::webhook_rules(
                    $crate::controllers::fleet::SetKind::admission(self),
                    $crate::controllers::fleet::outcome::SetFailure::InvalidSpec,
                )
            }

            async fn apply(
                &self,
                ctx: &$crate::controllers::shared::context::Context,
                state: &Self::State,
            ) -> Result<
                $crate::controllers::shared::pipeline::Outcome<Self>,
                $crate::controllers::shared::error::PassError<Self>,
            > {
                $crate::controllers::fleet::act::pass(self, ctx, state).await
            }

            fn desired_status(
                &self,
                outcome: &$crate::controllers::shared::pipeline::Outcome<Self>,
                now: jiff::Timestamp,
            ) -> $crate::api::fleet::FleetSetStatus {
                $crate::controllers::fleet::outcome::desired_status(self, outcome, now)
            }

            fn status_pacer(
                state: &Self::State,
            ) -> Option<&$crate::controllers::shared::pace::StatusPacer> {
                Some(&state.pacer)
            }

            fn progress_only(
                old: &$crate::api::fleet::FleetSetStatus,
                new: &$crate::api::fleet::FleetSetStatus,
            ) -> bool {
                $crate::controllers::fleet::outcome::progress_only(old, new)
            }

            fn recheck(
                &self,
                report: &Self::Done,
                _ctx: &$crate::controllers::shared::context::Context,
                _state: &Self::State,
            ) -> kube::runtime::controller::Action {
                $crate::controllers::fleet::outcome::recheck(report)
            }
        }
    };
}

fleet_set!(OmniHelmReleaseSet);
fleet_set!(OmniSecretSyncSet);
fleet_set!(OmniKubeconfigExportSet);

/// The three set controllers, subscribed to `watches`, each running until `shutdown` completes.
pub(crate) fn start_all<S: Shutdown + Clone>(
    ctx: &Arc<Context>,
    watches: &mut Watches,
    shutdown: S,
) -> Vec<BoxFuture<'static, ()>> {
    vec![
        super::start::<OmniHelmReleaseSet, _>(ctx, watches, shutdown.clone()).boxed(),
        super::start::<OmniSecretSyncSet, _>(ctx, watches, shutdown.clone()).boxed(),
        super::start::<OmniKubeconfigExportSet, _>(ctx, watches, shutdown).boxed(),
    ]
}
