//! kube-sim: an in-memory Kubernetes API server emulator for tests and the sandbox.
pub mod admission;
pub mod auth;
mod crd;
mod discovery;
pub mod error;
mod gc;
pub mod hooks;
pub mod kubeconfig;
mod patch;
pub mod rbac;
pub mod request;
mod selectors;
pub mod server;
pub mod store;
pub mod tls;
mod watch;
pub mod wiring;
