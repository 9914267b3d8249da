//! OmniConnection's Omni side against omni-sim: the key rules, pinging with the Secret's key,
//! and rebuilding the cached client when the Secret changes.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

use super::outcome::{Checked, Outcome, desired_status};
use crate::api::OmniConnection;
use crate::api::common::{ConditionStatus, find_condition};
use crate::controllers::shared::omni::{ConnectionError, OmniClients};
use crate::controllers::shared::test_env::{omni_sim_with_account, unreachable_client};

fn connection(endpoint: &str) -> OmniConnection {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniConnection",
        "metadata": {"name": "omni", "namespace": "ops", "generation": 1},
        "spec": {
            "endpoint": endpoint,
            "auth": {"serviceAccountSecretRef": {"name": "omni-key", "key": "serviceAccountKey"}}
        }
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn secret(value: &str, resource_version: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("omni-key".into()),
            namespace: Some("ops".into()),
            resource_version: Some(resource_version.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "serviceAccountKey".to_string(),
            ByteString(value.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

#[tokio::test]
async fn ping_with_the_secret_key_and_rebuild_when_the_secret_changes() {
    let (sim, good) = omni_sim_with_account("operator").await;
    // A well-formed key Omni does not know: what a revoked or foreign key looks like.
    let (other, unknown) = omni_sim_with_account("stranger").await;

    let conn = connection(sim.endpoint());
    let clients = OmniClients::new(unreachable_client());

    // Surrounding whitespace (a trailing newline from `kubectl create secret --from-file`) is fine.
    let client = clients
        .client_for_secret(&conn, &secret(&format!("{good}\n"), "1"))
        .unwrap_or_else(|e| panic!("{e}"));
    let endpoint = client.ping().await.unwrap_or_else(|e| panic!("ping: {e}"));
    let status = desired_status(
        &conn,
        &Outcome::done(Checked::Reachable { endpoint }),
        jiff::Timestamp::now(),
    );
    let ready = find_condition(&status.conditions, "Ready").unwrap_or_else(|| panic!("Ready"));
    assert_eq!(ready.status, ConditionStatus::True);
    assert!(
        ready.message.starts_with("connected to "),
        "{}",
        ready.message
    );

    // The Secret now holds another key: a new resourceVersion must rebuild the client, so the
    // ping fails instead of silently using the old credentials.
    let client = clients
        .client_for_secret(&conn, &secret(&unknown, "2"))
        .unwrap_or_else(|e| panic!("{e}"));
    let err = client
        .ping()
        .await
        .expect_err("a key Omni does not know must be rejected");
    assert!(
        !err.to_string().contains(&unknown),
        "the key leaked into {err}"
    );

    // Back to the good key (resourceVersion 3): reachable again.
    let client = clients
        .client_for_secret(&conn, &secret(&good, "3"))
        .unwrap_or_else(|e| panic!("{e}"));
    client.ping().await.unwrap_or_else(|e| panic!("ping: {e}"));

    sim.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn env_file_in_the_secret_is_refused_before_contacting_omni() {
    let conn = connection("https://omni.invalid");
    let clients = OmniClients::new(unreachable_client());
    let env = "export OMNI_ENDPOINT=https://omni.invalid\nexport OMNI_SERVICE_ACCOUNT_KEY=c2VjcmV0";
    let err = clients
        .client_for_secret(&conn, &secret(env, "1"))
        .expect_err("an env file is not a key");
    assert!(
        matches!(err, ConnectionError::EnvAssignments { .. }),
        "{err:?}"
    );
    assert_eq!(err.reason().as_str(), "MissingSecret");
    assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
}

/// Reconciles of several kinds ask for a connection's client at once at a cold start: the first
/// build is single-flight, so they share one client and Omni sees one connection. The check and
/// the insert were two critical sections, so concurrent first asks each built a client (the
/// benchmark counted two Omni connections for one OmniConnection in some cold starts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_uses_of_a_connection_share_one_client_and_one_omni_connection() {
    const ASKS: usize = 8;
    let (sim, key) = omni_sim_with_account("operator").await;
    let conn = connection(sim.endpoint());
    let clients = std::sync::Arc::new(OmniClients::new(unreachable_client()));
    let before = sim.connections_accepted();

    let start = std::sync::Arc::new(std::sync::Barrier::new(ASKS));
    let asks: Vec<_> = (0..ASKS)
        .map(|_| {
            let (clients, conn, start) = (clients.clone(), conn.clone(), start.clone());
            let secret = secret(&key, "1");
            let runtime = tokio::runtime::Handle::current();
            std::thread::spawn(move || {
                let _runtime = runtime.enter();
                start.wait();
                clients.client_for_secret(&conn, &secret)
            })
        })
        .collect();
    for ask in asks {
        let client = ask
            .join()
            .unwrap_or_else(|_| panic!("an ask panicked"))
            .unwrap_or_else(|e| panic!("{e}"));
        client.ping().await.unwrap_or_else(|e| panic!("ping: {e}"));
    }

    assert_eq!(sim.connections_accepted() - before, 1);
    sim.shutdown().await;
}
