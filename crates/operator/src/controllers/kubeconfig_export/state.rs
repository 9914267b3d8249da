//! What the OmniKubeconfigExport controller keeps and is configured with.

use std::sync::Arc;
use std::time::Duration;

use super::probe::Accepted;
use crate::controllers::shared::omni::OmniClients;
use crate::controllers::shared::setup::Setup;
use crate::domain::identity_policy::IdentityPolicy;
use crate::domain::secret_policy::SecretPolicy;

/// The export controller's own state and configuration.
pub(crate) struct ExportState {
    /// The Omni clients, one per OmniConnection.
    pub(super) omni: Arc<OmniClients>,
    /// Where exports may write (`--allow-cross-namespace-export`).
    pub(super) secret_policy: SecretPolicy,
    /// Which identities minted kubeconfigs may carry, and for how long
    /// (`--allow-cluster-admin-exports`, `--privileged-identity`, `--max-export-ttl`).
    pub(super) identity: IdentityPolicy,
    /// Floor for the time between rotations of a kubeconfig stored without admission.
    pub(super) min_interval: Duration,
    /// Kubeconfigs known to be accepted by their workload API server (see `probe.rs`).
    pub(super) accepted: Accepted,
}

impl ExportState {
    /// The state of a controller started with `setup`.
    pub(super) fn new(setup: &Setup<'_>) -> Self {
        Self {
            omni: setup.omni.clone(),
            secret_policy: setup.config.secret_policy,
            identity: setup.config.tenancy.identity.clone(),
            min_interval: setup.config.min_interval,
            accepted: Accepted::default(),
        }
    }
}
