//! What every kind's controller shares: the [`pipeline`] every kind implements and its driver,
//! the context every reconcile gets, and the watch, status, finalizer and Event machinery
//! around them. Nothing here names a kind.
//!
//! - `context.rs`: [`Context`](context::Context): the management client and scope, clock,
//!   metrics, Events and per-object backoff;
//! - `fairness.rs`: each target's share of the reconcile slots, so objects pointing at one
//!   server that never answers cannot hold every slot;
//! - `error.rs`: [`Failure`](error::Failure), the trait every kind's failure enum implements
//!   (its reason and [`RetryPolicy`](error::RetryPolicy)), the controllers' `Error`, and
//!   [`PassError`](error::PassError) (a newer stored copy to go on from, typed);
//! - `pipeline.rs`: the [`Pipeline`](pipeline::Pipeline) trait and its driver;
//! - `runner.rs`: building and driving a controller;
//! - `watches.rs`, `triggers.rs`, `index.rs`, `decoded.rs`: one watch and cache per kind, what
//!   of an event wakes whom, reverse indexes for mapped watches, objects decoded once;
//! - `status.rs`, `finalizer.rs`, `events.rs`: the one status write, finalizers, Events;
//! - `pace.rs`: the pace of status writes that only count progress (the fleet sets);
//! - `omni/`: the Omni clients (one per OmniConnection) and their status watches, used by the
//!   kinds that talk to Omni.

pub(crate) mod context;
pub(crate) mod decoded;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod fairness;
pub(crate) mod finalizer;
pub(crate) mod index;
pub(crate) mod omni;
pub(crate) mod pace;
pub(crate) mod pipeline;
pub(crate) mod runner;
pub(crate) mod setup;
pub(crate) mod status;
#[cfg(test)]
pub(crate) mod test_env;
pub(crate) mod triggers;
pub(crate) mod watches;
