//! kube-sim: an in-memory Kubernetes API server emulator for tests and the sandbox.

#![warn(missing_docs, unreachable_pub)]
pub mod admission;
mod apply;
pub mod auth;
mod cel;
mod crd;
mod discovery;
pub mod error;
mod events;
mod field_validation;
mod gc;
pub mod hooks;
mod impersonation;
pub mod kubeconfig;
mod numbers;
mod object_meta;
mod openapi;
mod openapi_v2;
mod partial;
mod patch;
mod patterns;
mod protobuf;
pub mod rbac;
pub mod request;
mod reviews;
mod schema;
mod selectors;
pub mod server;
pub mod store;
mod table;
pub mod tls;
mod watch;
pub mod wiring;
