//! What each kind's controller is built from: the operator's configuration and the clients
//! several kinds share. Each kind takes what it needs into its own state when it starts.

use std::sync::Arc;

use super::omni::OmniClients;
use crate::domain::helm::Helm;
use crate::domain::workload::WorkloadClients;
use crate::process::runtime::OperatorConfig;

/// The configuration and shared clients the controllers start with.
pub(crate) struct Setup<'a> {
    /// The operator's configuration (intervals, the template root, the Secret policy).
    pub(crate) config: &'a OperatorConfig,
    /// One Omni client per OmniConnection (OmniConnection, OmniCluster and
    /// OmniKubeconfigExport talk to Omni).
    pub(crate) omni: Arc<OmniClients>,
    /// One client per workload cluster kubeconfig Secret (OmniSecretSync).
    pub(crate) workload: Arc<WorkloadClients>,
    /// The helm driver; `None` when no usable helm binary was found (OmniHelmRelease then
    /// reports that on each object instead of failing the whole operator).
    pub(crate) helm: Option<Helm>,
}
