//! The operator process shell: probes, metrics, readiness of a standby replica, clean shutdown.

use crate::support;

use std::time::Duration;

use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::process::leader::LeaderConfig;
use support::{free_addr, unreachable_client, wait_for_status};

#[tokio::test]
async fn probes_and_metrics_are_served_and_shutdown_is_clean() {
    let health = free_addr();
    let metrics = free_addr();
    let mut config = OperatorConfig::embedded(Scope::Namespace("omni".into()));
    config.health_bind = Some(health);
    config.metrics_bind = Some(metrics);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(run_operator(config, unreachable_client(), async move {
        let _ = rx.await;
    }));
    wait_for_status(health, "/healthz", 200).await;
    // Without leader election the controllers start at once, so the process is ready.
    wait_for_status(health, "/readyz", 200).await;
    let text = wait_for_status(metrics, "/metrics", 200).await;
    assert!(text.contains("omni_operator_reconciles"), "{text}");
    let _ = tx.send(());
    let result = tokio::time::timeout(Duration::from_secs(120), operator)
        .await
        .unwrap_or_else(|_| panic!("operator did not stop after shutdown"))
        .unwrap_or_else(|e| panic!("operator task: {e}"));
    assert!(result.is_ok(), "{result:?}");
}

/// A standby (waiting for the Lease) is Ready: leadership is not readiness, or a rolling update
/// of a one-replica Deployment (maxUnavailable 0) would never finish. Before this was fixed the
/// standby answered 503 here.
#[tokio::test]
async fn a_standby_replica_is_ready_while_it_waits_for_leadership() {
    let health = free_addr();
    let mut config = OperatorConfig::embedded(Scope::Namespace("omni".into()));
    config.health_bind = Some(health);
    // The API server is unreachable, so the Lease can never be acquired.
    config.leader = Some(LeaderConfig::new("omni"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(run_operator(config, unreachable_client(), async move {
        let _ = rx.await;
    }));
    wait_for_status(health, "/healthz", 200).await;
    let body = wait_for_status(health, "/readyz", 200).await;
    assert_eq!(body, "ok");
    let _ = tx.send(());
    let result = tokio::time::timeout(Duration::from_secs(120), operator)
        .await
        .unwrap_or_else(|_| panic!("operator did not stop while waiting for leadership"))
        .unwrap_or_else(|e| panic!("operator task: {e}"));
    assert!(result.is_ok(), "{result:?}");
}
