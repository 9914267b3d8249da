//! The integration tests of `omni-client`, in one test binary (one link, one process).

mod client_wire;
#[path = "support/fuzz.rs"]
mod fuzz_support;
mod fuzz_template;
mod gpg_interop;
mod sim_integration;
mod template_model;
mod template_plan;
#[path = "support/template_sim.rs"]
mod template_sim;
mod template_status_watch;
mod template_sync;
mod template_translate;
#[path = "support/trace_capture.rs"]
mod trace_capture;
