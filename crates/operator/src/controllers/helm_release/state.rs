//! What the OmniHelmRelease controller keeps and is configured with.

use std::time::Duration;

use crate::controllers::shared::context::Context;
use crate::controllers::shared::setup::Setup;
use crate::domain::helm::Helm;
use crate::domain::secret_policy::SecretPolicy;

/// The release controller's own state and configuration.
pub(crate) struct HelmState {
    /// The helm driver; `None` when no usable helm binary was found (each object then reports
    /// that instead of failing the whole operator).
    pub(super) helm: Option<Helm>,
    /// Which Secrets a release may read.
    pub(super) secret_policy: SecretPolicy,
    /// Floor for a `driftCheckInterval` stored without admission.
    pub(super) min_interval: Duration,
    /// The baseline model's `helm-upgrade-every-trigger` (benchmarks only).
    pub(super) upgrade_every_trigger: bool,
}

impl HelmState {
    /// The state of a controller started with `setup` in `ctx`.
    pub(super) fn new(ctx: &Context, setup: &Setup<'_>) -> Self {
        Self {
            helm: setup.helm.clone(),
            secret_policy: setup.config.secret_policy,
            min_interval: setup.config.min_interval,
            upgrade_every_trigger: ctx.baseline.upgrades_every_trigger(),
        }
    }
}
