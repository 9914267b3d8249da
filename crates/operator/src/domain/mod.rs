//! What the controllers decide with and act through: pure rules (the render, the change plan,
//! kubeconfig checks, export formats, a secret sync's data mapping, the Secret policy, the identity policy of minted
//! kubeconfigs, the deployment's multi-tenancy settings, the comparison of a release's objects
//! with live ones) and the drivers of what lies outside the management cluster (workload
//! clusters, reads as a tenant's ServiceAccount, the helm binary and the chart sources it
//! installs from).

pub(crate) mod delete_guard;
pub(crate) mod drift;
pub(crate) mod export_format;
pub mod fleet_template;
pub mod helm;
pub mod identity_policy;
pub(crate) mod impersonation;
pub mod kubeconfig;
pub(crate) mod plan;
pub mod render;
pub(crate) mod secret_data;
pub mod secret_policy;
pub mod tenancy;
#[cfg(test)]
pub(crate) mod test_servers;
pub mod workload;
