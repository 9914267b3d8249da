//! omni-operator: a Kubernetes operator that reconciles Sidero Omni clusters declaratively.
//!
//! Module map (see `docs/architecture.md`):
//! - [`api`]: the eight custom resource types and their validation (shared by the webhook,
//!   the controllers and `omni-operator validate`).
//! - [`webhook`]: the validating admission server.
//! - [`render`]: OmniCluster and its children → Omni cluster template (pure).
//! - `plan`: an OmniCluster's change set judged: destructive or not, its hash, applied or held (pure).
//! - [`cli`]: the subcommands of the `omni-operator` binary.

#![warn(missing_docs, unreachable_pub)]

pub mod api;
pub mod api_client;
pub mod baseline;
pub mod cli;
pub mod controllers;
pub(crate) mod delete_guard;
pub(crate) mod export_format;
pub mod helm;
pub mod identity_policy;
pub(crate) mod impersonation;
pub mod kubeconfig;
pub mod leader;
pub mod metrics;
pub(crate) mod plan;
pub mod render;
pub mod runtime;
pub mod secret_policy;
pub mod secure_metrics;
pub mod telemetry;
pub mod tenancy;
#[cfg(test)]
pub(crate) mod test_servers;
pub mod tls;
pub mod webhook;
pub mod workload;
