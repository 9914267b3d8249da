//! The integration tests of `sandbox`, in one test binary (one link, one process).

mod describe_events;
mod docs;
mod sandbox;
