//! The integration tests of `omni-sim`, in one test binary (one link, one process).

mod auth;
mod cluster;
mod common;
mod official_client;
mod outage;
mod state;
mod transport;
