//! What the controllers decide with and act through: pure rules (the render, the change plan,
//! kubeconfig checks, export formats, the Secret policy) and the drivers of what lies outside
//! the management cluster (workload clusters, the helm binary).

pub(crate) mod delete_guard;
pub(crate) mod export_format;
pub mod fleet_template;
pub mod helm;
pub mod kubeconfig;
pub(crate) mod plan;
pub mod render;
pub mod secret_policy;
pub mod workload;
