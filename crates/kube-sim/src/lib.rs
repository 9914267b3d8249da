//! Placeholder crate root; filled in by its issue.
pub mod tls;
pub mod kubeconfig;
pub mod rbac;
pub mod admission;
pub mod auth;
