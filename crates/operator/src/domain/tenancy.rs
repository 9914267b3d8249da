//! The deployment's multi-tenancy settings (operator flags, chart values): what a tenant's
//! objects may make the operator do beyond what their own fields say. Every part is decided by
//! whoever installs the operator, never by a field a tenant controls (docs/security.md).

use std::time::Duration;

use crate::domain::helm::source::{ChartSourcePolicy, Limits};
use crate::domain::identity_policy::IdentityPolicy;

/// The multi-tenancy settings of one operator deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    /// Which identities minted kubeconfigs may carry, and for how long
    /// (`--allow-cluster-admin-exports`, `--privileged-identity`, `--max-export-ttl`).
    pub identity: IdentityPolicy,
    /// Where charts may come from (`--chart-source-allowed-hosts`,
    /// `--chart-source-deny-private-networks`, `--allow-insecure-chart-sources`).
    pub chart_sources: ChartSourcePolicy,
    /// Time bounds of requests to servers the objects name.
    pub timeouts: Timeouts,
    /// Most reconciles of one controller the objects of one target (kubeconfig Secret,
    /// OmniCluster, OmniConnection) hold at once (`--max-reconciles-per-target`).
    pub per_target_reconciles: u16,
    /// The ServiceAccount (in each object's own namespace) whose identity reads the Secrets an
    /// object without `spec.serviceAccountName` references (`--default-service-account`); unset,
    /// such reads use the operator's identity.
    pub default_service_account: Option<String>,
}

impl Default for Tenancy {
    fn default() -> Self {
        Self {
            identity: IdentityPolicy::default(),
            chart_sources: ChartSourcePolicy::default(),
            timeouts: Timeouts::default(),
            per_target_reconciles: crate::controllers::DEFAULT_PER_TARGET,
            default_service_account: None,
        }
    }
}

/// Time bounds of every request to a server an object names: workload API servers, chart
/// repositories and registries, Omni. A server that accepts connections and never answers then
/// holds a reconcile for at most these, and its objects report `Ready=False` reason `Timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing a connection to a workload API server or chart source, TLS included
    /// (`--connect-timeout`).
    pub connect: Duration,
    /// Silence tolerated while waiting for an answer or the next part of it
    /// (`--read-timeout`).
    pub read: Duration,
    /// One whole request (`--request-timeout`).
    pub request: Duration,
    /// Establishing a connection to Omni (`--omni-connect-timeout`).
    pub omni_connect: Duration,
    /// One whole unary Omni call (`--omni-request-timeout`).
    pub omni_request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(30),
            request: Duration::from_secs(60),
            omni_connect: Duration::from_secs(10),
            omni_request: Duration::from_secs(30),
        }
    }
}

impl Timeouts {
    /// The bounds of one outbound HTTP request (workload and chart sources).
    pub fn outbound(&self) -> Limits {
        Limits {
            connect: self.connect,
            read: self.read,
            request: self.request,
        }
    }
}
