//! kube-sim: an in-memory Kubernetes API server emulator for tests and the sandbox.
pub mod admission;
pub mod auth;
mod discovery;
pub mod error;
pub mod hooks;
pub mod kubeconfig;
mod patch;
pub mod rbac;
pub mod request;
pub mod server;
pub mod store;
pub mod tls;
pub mod wiring;
