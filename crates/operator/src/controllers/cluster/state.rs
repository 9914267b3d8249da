//! What the OmniCluster controller keeps and is configured with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::children::ChildCaches;
use crate::api::OmniCluster;
use crate::api::plan::DestructivePolicy;
use crate::controllers::shared::omni::OmniClients;
use crate::controllers::shared::setup::Setup;

/// The cluster controller's own state and configuration.
pub(crate) struct ClusterState {
    /// The Omni clients, one per OmniConnection.
    pub(super) omni: Arc<OmniClients>,
    /// Directory `file:` patches and manifests are confined to (`--template-root`); `None`
    /// refuses every `file:` entry.
    pub(super) template_root: Option<PathBuf>,
    /// Floor for a `syncInterval` stored without admission.
    pub(super) min_interval: Duration,
    /// The child kinds' shared caches the render reads from.
    pub(super) children: ChildCaches,
    /// How clusters without `spec.changePolicy.destructive` treat destructive plans
    /// (`--default-destructive-policy`).
    pub(super) default_destructive: DestructivePolicy,
}

impl ClusterState {
    /// The state of a controller started with `setup`, rendering from `children`.
    pub(super) fn new(setup: &Setup<'_>, children: ChildCaches) -> Self {
        Self {
            omni: setup.omni.clone(),
            template_root: setup.config.template_root.clone(),
            min_interval: setup.config.min_interval,
            children,
            default_destructive: setup.config.default_destructive,
        }
    }
}

/// How often `cluster` is re-checked: its `syncInterval`, clamped to the floor for intervals
/// stored without admission (so a tiny one cannot hot-loop).
pub(super) fn sync_interval(cluster: &OmniCluster, state: &ClusterState) -> Duration {
    crate::api::duration::clamp_interval(
        cluster
            .sync_interval()
            .to_std()
            .unwrap_or(Duration::from_secs(300)),
        state.min_interval,
    )
}
