//! Rust SDK for Sidero Omni's gRPC API: service-account authentication (`siderov1` request
//! signing), the COSI `State` resource API, typed Omni resources and the management API.
//!
//! It has no Kubernetes dependency; the operator and the simulator both build on it.

#![warn(missing_docs)]

pub mod auth;
pub mod proto;
pub mod resources;
pub mod state;
pub mod transport;
pub mod template;
