//! omni-operator: a Kubernetes operator that reconciles Sidero Omni clusters declaratively.
//!
//! The map (see `docs/architecture.md`):
//! - [`api`]: the custom resource types, their validation, and the vocabulary every kind
//!   shares (reasons, keys, conditions);
//! - [`controllers`]: one module per kind, on the machinery of `controllers/shared`;
//! - [`domain`]: what the controllers decide with and act through: the template render, the
//!   change plan judged (destructive or not, its hash, applied or held), the checked
//!   kubeconfig, export formats, the Secret policy, the deployment's multi-tenancy policy
//!   (minted identities, chart sources, time bounds, impersonated reads), workload clients,
//!   the helm driver and its chart fetcher;
//! - [`process`]: the running operator: its runtime (controllers behind leader election),
//!   webhook, metrics, probes, TLS, telemetry and API client;
//! - [`cli`]: the subcommands of the `omni-operator` binary;
//! - [`benchmark`]: the baseline model of the original, for `omni-bench` only.

#![warn(missing_docs, unreachable_pub)]

pub mod api;
pub mod benchmark;
pub mod cli;
pub mod controllers;
pub mod domain;
pub mod process;

#[cfg(test)]
#[path = "../../omni-client/tests/suite/support/trace_capture.rs"]
mod trace_capture;

// Test helpers shared with the integration suite (`controllers/shared/test_env.rs`, included
// there by path) name this crate as the suite does.
#[cfg(test)]
extern crate self as omni_operator;
