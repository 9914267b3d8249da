//! Rust SDK for Sidero Omni's gRPC API: service-account authentication (`siderov1` request
//! signing), the COSI `State` resource API, typed Omni resources and the management API.
//!
//! It has no Kubernetes dependency; the operator and the simulator both build on it.

#![warn(missing_docs, unreachable_pub)]

pub mod auth;
pub mod duration;
pub mod management;
pub mod proto;
pub mod resources;
pub mod state;
pub mod template;
pub mod transport;

pub use auth::{KeyError, ServiceAccountKey};
pub use management::ManagementError;
pub use state::{State, StateError, WatchEvent, WatchTarget};
pub use transport::{Client, ClientConfig, ClientError, OmniEndpoint};
