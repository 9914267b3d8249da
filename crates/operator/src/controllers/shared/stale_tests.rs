//! A status is never written from a stale cached copy. The watch cache a reconcile reads from
//! can lag behind the server (its watcher backs off after cut streams and `410 Gone`); a status
//! computed from such a copy rewrote what an earlier reconcile had already written, with fresh
//! transition times, and a second Event. The fault suite's quiet hold found it
//! (`faults_kube_api`: "1 writes for 0 changes", intermittently); these scenarios pin it down.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::run_pass;
use crate::api::OmniConnection;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::decoded::Cached;
use crate::controllers::shared::error::PassError;
use crate::controllers::shared::status;
use crate::controllers::shared::test_env::{
    connection_doc, create_json, install_operator_api, kube_sim,
};

const NS: &str = "stale";
const NAME: &str = "omni";

fn connection() -> Value {
    connection_doc(NS, NAME, "https://omni.example.com", "omni-key")
}

/// A Ready status whose condition changed state at `at`.
fn ready_since(at: &str) -> Value {
    json!({
        "observedGeneration": 1,
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Connected",
            "message": "connected to Omni", "observedGeneration": 1,
            "lastTransitionTime": at
        }]
    })
}

const FIRST: &str = "2026-11-24T10:00:00Z";
const LATER: &str = "2026-11-24T10:05:00Z";

async fn stored_status(api: &Api<OmniConnection>) -> Value {
    let stored = api.get(NAME).await.unwrap_or_else(|e| panic!("get: {e}"));
    serde_json::to_value(&stored).unwrap_or_default()["status"].clone()
}

/// Test `status::write` with a copy taken before the last status write: before this change the
/// stale copy's (empty) status made the write look needed, and the stored transition time was
/// overwritten.
#[tokio::test]
async fn a_status_computed_from_a_stale_cached_copy_is_not_written() {
    let (sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_json(&client, connection()).await;
    let api: Api<OmniConnection> = Api::namespaced(client.clone(), NS);
    let cached = api.get(NAME).await.unwrap_or_else(|e| panic!("get: {e}"));

    let wrote = status::write(&api, &cached, ready_since(FIRST)).await;
    assert!(matches!(wrote, Ok(true)), "first status: {wrote:?}");
    let writes = sim
        .hooks()
        .writes_to_object("omniconnections", Some(NS), NAME);

    // The same cached copy, now behind the server: the status it yields is not written.
    let wrote = status::write(&api, &cached, ready_since(LATER)).await;
    assert!(matches!(wrote, Err(PassError::Stale(_))), "{wrote:?}");
    assert_eq!(
        sim.hooks()
            .writes_to_object("omniconnections", Some(NS), NAME),
        writes,
        "no write request from a stale copy"
    );
    assert_eq!(
        stored_status(&api).await["conditions"][0]["lastTransitionTime"],
        FIRST,
        "the stored transition time is kept"
    );

    // The stored copy agrees with what the first write stored: nothing to do.
    let fresh = api.get(NAME).await.unwrap_or_else(|e| panic!("get: {e}"));
    let wrote = status::write(&api, &fresh, ready_since(FIRST)).await;
    assert!(matches!(wrote, Ok(false)), "{wrote:?}");
}

/// A pass that writes the first status, counting itself in `passes`.
async fn write_first_status(
    obj: Arc<OmniConnection>,
    client: kube::Client,
    passes: Arc<AtomicUsize>,
) -> Result<Action, PassError<OmniConnection>> {
    passes.fetch_add(1, Ordering::SeqCst);
    let api: Api<OmniConnection> = Api::namespaced(client, NS);
    status::write(&api, obj.as_ref(), ready_since(FIRST)).await?;
    Ok(Action::await_change())
}

/// The controllers' runner: a pass handed a stale copy runs once more on the stored object, which already has the status, so nothing is written. Before this change the stale
/// reconcile wrote the status again.
#[tokio::test]
async fn a_reconcile_of_a_stale_cached_copy_runs_again_on_the_stored_object() {
    let (sim, client) = kube_sim().await;
    install_operator_api(&client, NS).await;
    create_json(&client, connection()).await;
    let typed: Api<OmniConnection> = Api::namespaced(client.clone(), NS);
    let stale = typed.get(NAME).await.unwrap_or_else(|e| panic!("get: {e}"));
    typed
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": ready_since(FIRST)})),
        )
        .await
        .unwrap_or_else(|e| panic!("status: {e}"));
    let writes = sim
        .hooks()
        .writes_to_object("omniconnections", Some(NS), NAME);
    let ctx = Context::for_tests(client.clone(), NS);

    let passes = Arc::new(AtomicUsize::new(0));
    let result = run_pass(Arc::new(Cached::new(stale.clone())), Arc::new(ctx), |obj| {
        write_first_status(obj, client.clone(), passes.clone())
    })
    .await;

    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        passes.load(Ordering::SeqCst),
        2,
        "once on the cached copy, once on the stored one"
    );
    assert_eq!(
        sim.hooks()
            .writes_to_object("omniconnections", Some(NS), NAME),
        writes,
        "the stored status needed no write (cached copy {:?})",
        stale.resource_version()
    );
}
