//! The integration tests of `operator`, in one test binary (one link, one process).

#[path = "../../../omni-client/tests/suite/support/fuzz.rs"]
mod fuzz_support;
mod support;

mod api_bounds;
mod api_client;
mod api_crds;
mod api_samples;
mod api_schema_check;
mod api_validation;
mod architecture;
mod as_deployed;
mod bench_smoke;
mod chart_rollout;
mod chart_runtime;
mod charts;
mod cli_status;
mod cli_validate;
mod controllers_child_wakes;
mod controllers_cluster;
mod controllers_export;
mod controllers_helm_release;
mod controllers_omni_api;
mod controllers_omni_api3;
mod controllers_plan;
mod controllers_quiet_failures;
mod controllers_runtime;
mod controllers_secret_sync;
mod controllers_triggers;
mod controllers_watches;
mod docs_coverage;
mod faults_dependents;
mod faults_kube_api;
mod faults_leader;
mod faults_omni_outage;
mod faults_operator_killed;
mod fuzz_input;
mod metrics_secure;
mod real_apiserver;
mod render;
mod render_cli;
mod render_sync;
mod security_workload_access;
mod template_files;
mod webhook;
mod webhook_chart;
