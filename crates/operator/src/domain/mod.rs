//! What the controllers decide with and act through: pure rules (the render, the change plan,
//! kubeconfig checks, export formats, the Secret policy, the comparison of a release's objects
//! with live ones) and the drivers of what lies outside the management cluster (workload
//! clusters, the helm binary).

pub(crate) mod delete_guard;
pub(crate) mod drift;
pub(crate) mod export_format;
pub mod helm;
pub mod kubeconfig;
pub(crate) mod plan;
pub mod render;
pub mod secret_policy;
pub mod workload;
