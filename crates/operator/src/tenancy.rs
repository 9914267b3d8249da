//! The deployment's multi-tenancy settings (operator flags, chart values): what a tenant's
//! objects may make the operator do beyond what their own fields say. Every part is decided by
//! whoever installs the operator, never by a field a tenant controls (docs/security.md).

use crate::identity_policy::IdentityPolicy;

/// The multi-tenancy settings of one operator deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenancy {
    /// Which identities minted kubeconfigs may carry, and for how long
    /// (`--allow-cluster-admin-exports`, `--privileged-identity`, `--max-export-ttl`).
    pub identity: IdentityPolicy,
}
