//! The running operator: the runtime that starts the controllers behind leader election, the
//! admission webhook, metrics and probes, TLS for the servers, telemetry, and the client of the
//! management cluster.

pub mod api_client;
pub mod leader;
pub mod metrics;
pub mod runtime;
pub mod secure_metrics;
pub mod shard;
pub mod telemetry;
pub mod tls;
pub mod webhook;
