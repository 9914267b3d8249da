//! Events as the operator publishes them, against kube-sim: a new happening creates an Event;
//! the same happening again within six minutes is counted on that Event's `series`, as kube's
//! `Recorder` did, while the operator remembers only a fingerprint of each (not the whole
//! Event).

use std::sync::Arc;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::events::EventType;

use crate::api::{OmniConnection, Reason};
use crate::controllers::shared::context::{Context, Scope, SystemClock};
use crate::controllers::shared::test_env::{
    connection_doc, create_json, install_operator_api, kube_sim,
};
use crate::process::metrics::Metrics;

const NS: &str = "events";

async fn events(client: &kube::Client) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list events: {e}"))
        .items
}

#[tokio::test]
async fn a_repeated_happening_is_counted_on_the_first_event_and_another_gets_its_own() {
    let (_sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_json(
        &client,
        connection_doc(NS, "omni", "https://omni.example.com", "k"),
    )
    .await;
    let connection = Api::<OmniConnection>::namespaced(client.clone(), NS)
        .get("omni")
        .await
        .unwrap_or_else(|e| panic!("get: {e}"));
    let ctx = Context::new(
        client.clone(),
        Scope::Namespace(NS.into()),
        Arc::new(SystemClock),
        Arc::new(Metrics::new()),
        Some("replica-1".into()),
    );

    let warn = |note: &str| {
        ctx.event(
            &connection,
            EventType::Warning,
            Reason::ConnectionFailed,
            note.to_string(),
        )
    };
    warn("first").await;
    warn("again").await;
    warn("and again").await;
    let published = events(&client).await;
    assert_eq!(published.len(), 1, "{published:?}");
    let first = &published[0];
    assert_eq!(first.note.as_deref(), Some("first"));
    assert_eq!(first.reason.as_deref(), Some("ConnectionFailed"));
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert_eq!(first.reporting_instance.as_deref(), Some("replica-1"));
    assert_eq!(
        first.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("omni")
    );
    assert_eq!(first.series.as_ref().map(|s| s.count), Some(3));

    ctx.event(
        &connection,
        EventType::Normal,
        Reason::ConnectionReady,
        "connected".into(),
    )
    .await;
    let mut reasons: Vec<String> = events(&client)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["ConnectionFailed", "ConnectionReady"]);
}
