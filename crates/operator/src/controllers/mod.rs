//! The controllers and the machinery they share.
//!
//! Every kind with a finalizer runs the same pipeline (`pipeline::reconcile`, see
//! `docs/architecture.md`): validate → apply (observe, plan, act; returns an outcome) → status
//! (pure, written once, Events on condition transitions) → next action. Each kind is one
//! submodule exposing `start(ctx, watches, shutdown)`, which subscribes to the kinds it reads
//! and returns the controller's future; what all kinds share lives here:
//!
//! - [`Context`] (`context.rs`): clients, clock, metrics, Events and per-object backoff;
//! - [`Error`] and `RetryPolicy` (`error.rs`): why a reconcile failed and what it does next;
//! - `decoded.rs`: each kind's objects are cached decoded once, as [`Cached`] values, and handed
//!   to their reconcile by [`reconcile_decoded`]: one object with bad stored data (it bypassed
//!   the CRD schema) is cached as such, gets a `Ready=False` reason `InvalidObject` condition and
//!   an Event, is not retried until it changes, and cannot stall the watch of every other object
//!   of its kind (`docs/decisions.md`);
//! - `events.rs`: publishing Events, counting a repeat on the first Event's series;
//! - [`Watches`] (`watches.rs`): one watch and one cache per kind, shared by every controller;
//! - `runner.rs`: building and driving a controller (its triggers and error policy);
//! - [`status`], [`finalizer`], [`index`], [`children`] and [`omni`].

pub mod children;
pub mod cluster;
pub mod connection;
mod context;
mod decoded;
mod error;
mod events;
mod fairness;
pub mod finalizer;
pub mod helm_release;
pub mod index;
pub mod kubeconfig_export;
pub mod omni;
pub(crate) mod pipeline;
mod runner;
pub mod secret_sync;
pub mod status;
mod watches;

pub use self::context::{Clock, Context, Scope, SystemClock};
pub use self::decoded::{Cached, Undecodable, api_resource, reconcile_decoded};
pub(crate) use self::decoded::{cached_ref, error_policy};
pub(crate) use self::error::RetryPolicy;
pub use self::error::{Error, backoff_delay};
pub(crate) use self::error::{periodic, periodic_spread};
pub use self::fairness::DEFAULT_PER_TARGET;
pub use self::runner::{ClusterTrigger, Shutdown, cluster_changes, secret_changes};
pub(crate) use self::runner::{
    OwnKind, cluster_changes_of, drive, indexed_controller_for, instrumented, secret_changes_of,
    strip_for_cache, touched,
};
pub use self::watches::Watches;
