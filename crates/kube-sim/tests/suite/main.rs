//! The integration tests of `kube-sim`, in one test binary (one link, one process).

mod admission;
mod admission_server;
mod api_apply_ownership;
mod api_apply_strategic;
mod api_crd_schema;
mod api_dry_run;
mod api_field_validation;
mod api_gc;
mod api_http;
mod api_https;
mod api_resources;
mod api_reviews;
mod api_scale_semantics;
mod api_selectors_patch;
mod api_store;
mod api_watch_fidelity;
mod api_watch_stream;
#[path = "../fixtures/auth_probe.rs"]
mod auth_probe;
mod binary;
mod differential;
mod events;
mod helm;
#[path = "../fixtures/kube_client.rs"]
mod kube_client;
mod kube_rs;
mod kubectl;
mod kubectl_e2e;
mod kubectl_validation;
mod kubectl_watch;
#[path = "../fixtures/tools.rs"]
mod tools;
#[path = "../fixtures/webhook_server.rs"]
mod webhook_server;
