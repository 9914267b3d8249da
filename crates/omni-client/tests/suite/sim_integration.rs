//! The client against the Omni simulator (`omni-sim`) over real gRPC on loopback: every State
//! and Management operation, each error class the server produces, authentication failures
//! (unknown, expired and tampered signatures), role checks, injected unavailability and deadlines.

use std::time::Duration;

use futures::StreamExt;
use omni_client::auth::{ServiceAccountKey, generate_key};
use omni_client::proto::cosi::resource::state_client::StateClient;
use omni_client::proto::cosi::resource::{ListOptions, ListRequest};
use omni_client::proto::specs;
use omni_client::resources::{NAMESPACE, TypedResource};
use omni_client::state::{WatchEvent, WatchTarget, is_tombstone, label_equal};
use omni_client::template::{keys, types};
use omni_client::{Client, ClientConfig, ManagementError, StateError};
use omni_sim::{ManualClock, OmniSim, Role, RunningOmniSim, methods};

/// Generous: the machine is shared and slow; only used as an upper bound for waits.
const WAIT: Duration = Duration::from_secs(60);

fn client(sim: &RunningOmniSim, key: &str) -> Client {
    Client::new(ClientConfig::from_encoded_key(sim.endpoint(), key).unwrap()).unwrap()
}

async fn sim() -> RunningOmniSim {
    OmniSim::builder()
        .auto_register_machines(true)
        .start()
        .await
        .unwrap()
}

fn cluster(name: &str) -> TypedResource<specs::ClusterSpec> {
    TypedResource::new(
        name,
        specs::ClusterSpec {
            kubernetes_version: "1.32.3".into(),
            talos_version: "1.9.5".into(),
            features: Some(specs::cluster_spec::Features::default()),
            backup_configuration: None,
        },
    )
    .with_annotation(keys::MANAGED_BY_TEMPLATES, "")
}

#[tokio::test]
async fn ping_lists_clusters_and_reports_the_go_endpoint_form() {
    let sim = sim().await;
    let key = sim
        .register_service_account("reader", Role::Reader)
        .unwrap();
    let client = client(&sim, &key);
    let port = sim.local_addr().port();
    assert_eq!(
        client.ping().await.unwrap(),
        format!("grpc://127.0.0.1:{port}")
    );
    assert_eq!(sim.call_count(methods::LIST, omni_sim::Outcome::Ok), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn create_get_list_update_with_versions_and_conflicts() {
    let sim = sim().await;
    let key = sim.register_service_account("op", Role::Operator).unwrap();
    let state = client(&sim, &key).state();

    let created = state
        .create(cluster("demo").into_resource(), "")
        .await
        .unwrap();
    let created = TypedResource::<specs::ClusterSpec>::from_resource(created).unwrap();
    assert_eq!(created.metadata.version, "1");
    assert_eq!(created.spec.talos_version, "1.9.5");

    let again = state
        .create(cluster("demo").into_resource(), "")
        .await
        .unwrap_err();
    assert!(matches!(again, StateError::AlreadyExists(_)), "{again:?}");

    let got = state.get(NAMESPACE, types::CLUSTER, "demo").await.unwrap();
    let mut typed = TypedResource::<specs::ClusterSpec>::from_resource(got).unwrap();
    let listed = state.list(NAMESPACE, types::CLUSTER, &[]).await.unwrap();
    assert_eq!(listed.len(), 1);

    // Optimistic concurrency: the version read must be sent back.
    typed.spec.kubernetes_version = "1.31.7".into();
    let read_version = typed.metadata.version.clone();
    let updated = state
        .update(typed.clone().into_resource(), "", Some("running"))
        .await
        .unwrap();
    let updated_version: u64 = updated.metadata.as_ref().unwrap().version.parse().unwrap();
    assert!(updated_version > read_version.parse::<u64>().unwrap());
    let stale = state
        .update(typed.into_resource(), "", Some("running"))
        .await
        .unwrap_err();
    assert!(matches!(stale, StateError::Conflict(_)), "{stale:?}");
    assert!(stale.is_retryable());

    // Server-side validation: an unknown Talos version.
    let mut bad = cluster("bad");
    bad.spec.talos_version = "9.9.9".into();
    let invalid = state.create(bad.into_resource(), "").await.unwrap_err();
    assert!(matches!(invalid, StateError::Validation(_)), "{invalid:?}");
    assert!(!invalid.is_retryable());

    let missing = state
        .get(NAMESPACE, types::CLUSTER, "nope")
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn label_queries_filter_lists() {
    let sim = sim().await;
    let key = sim.register_service_account("op", Role::Operator).unwrap();
    let state = client(&sim, &key).state();
    state
        .create(cluster("one").into_resource(), "")
        .await
        .unwrap();
    // The simulator's controllers create cluster-labelled status resources for each cluster.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let statuses = state
            .list(
                NAMESPACE,
                types::KUBERNETES_UPGRADE_STATUS,
                &[label_equal(keys::CLUSTER, "one")],
            )
            .await
            .unwrap();
        if statuses.len() == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never appeared"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = state
        .list(
            NAMESPACE,
            types::KUBERNETES_UPGRADE_STATUS,
            &[label_equal(keys::CLUSTER, "other")],
        )
        .await
        .unwrap();
    assert!(other.is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn owner_and_phase_conflicts_are_distinguished() {
    let sim = sim().await;
    let key = sim.register_service_account("op", Role::Operator).unwrap();
    let state = client(&sim, &key).state();

    let mut owned = TypedResource::new("m-owned", specs::KernelArgsSpec { args: vec![] });
    owned.metadata.owner = "SomeController".into();
    let stored = sim.put(owned.into_resource());
    let mut mine = stored.clone();
    mine.metadata.as_mut().unwrap().owner = String::new();
    let err = state.update(mine, "", Some("running")).await.unwrap_err();
    assert!(matches!(err, StateError::OwnerConflict(_)), "{err:?}");

    state
        .create(
            TypedResource::new(
                "m-1",
                specs::KernelArgsSpec {
                    args: vec!["a".into()],
                },
            )
            .into_resource(),
            "",
        )
        .await
        .unwrap();
    let ready = state
        .teardown(NAMESPACE, types::KERNEL_ARGS, "m-1", "")
        .await
        .unwrap();
    assert!(ready, "no finalizers");
    let current = state
        .get(NAMESPACE, types::KERNEL_ARGS, "m-1")
        .await
        .unwrap();
    assert_eq!(current.metadata.as_ref().unwrap().phase, "tearingDown");
    let mut running = current.clone();
    running.metadata.as_mut().unwrap().phase = "running".into();
    let err = state
        .update(running, "", Some("running"))
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::PhaseConflict(_)), "{err:?}");

    state
        .destroy(NAMESPACE, types::KERNEL_ARGS, "m-1", "")
        .await
        .unwrap();
    let gone = state
        .destroy(NAMESPACE, types::KERNEL_ARGS, "m-1", "")
        .await
        .unwrap_err();
    assert!(gone.is_not_found());
    let gone = state
        .teardown(NAMESPACE, types::KERNEL_ARGS, "m-1", "")
        .await
        .unwrap_err();
    assert!(gone.is_not_found());
    sim.shutdown().await;
}

#[tokio::test]
async fn teardown_watch_destroy_lifecycle_with_controller_finalizers() {
    let sim = sim().await;
    let key = sim.register_service_account("op", Role::Operator).unwrap();
    let state = client(&sim, &key).state();
    state
        .create(cluster("life").into_resource(), "")
        .await
        .unwrap();

    let mut events = state
        .watch(&WatchTarget::kind(NAMESPACE, types::CLUSTER, vec![]))
        .await
        .unwrap();
    // Bootstrap: the existing cluster, then the marker.
    let first = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(&first, WatchEvent::Created(r) if r.metadata.as_ref().unwrap().id == "life"),
        "{first:?}"
    );
    let mut bootstrapped = false;
    let mut destroy_ready = state
        .teardown(NAMESPACE, types::CLUSTER, "life", "")
        .await
        .unwrap();
    let mut destroyed = false;
    let outcome = tokio::time::timeout(WAIT, async {
        while let Some(event) = events.next().await {
            match event.unwrap() {
                WatchEvent::Bootstrapped => bootstrapped = true,
                WatchEvent::Created(r) | WatchEvent::Updated { resource: r, .. } => {
                    let m = r.metadata.as_ref().unwrap();
                    if m.id == "life" && m.phase == "tearingDown" && m.finalizers.is_empty() {
                        destroy_ready = true;
                    }
                }
                WatchEvent::Destroyed(r) => {
                    if r.metadata.as_ref().unwrap().id == "life" {
                        destroyed = true;
                        return;
                    }
                }
            }
            if destroy_ready {
                match state.destroy(NAMESPACE, types::CLUSTER, "life", "").await {
                    Ok(()) | Err(StateError::NotFound(_)) => {}
                    Err(e) => panic!("destroy: {e:?}"),
                }
            }
        }
    })
    .await;
    assert!(outcome.is_ok(), "cluster was not destroyed in time");
    assert!(bootstrapped && destroyed);
    assert!(
        state
            .get_optional(NAMESPACE, types::CLUSTER, "life")
            .await
            .unwrap()
            .is_none()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn single_watch_of_a_missing_resource_starts_with_a_tombstone() {
    let sim = sim().await;
    let key = sim
        .register_service_account("reader", Role::Reader)
        .unwrap();
    let state = client(&sim, &key).state();
    let mut events = state
        .watch(&WatchTarget::single(
            NAMESPACE,
            types::CLUSTER_STATUS,
            "absent",
        ))
        .await
        .unwrap();
    let first = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first {
        WatchEvent::Destroyed(r) => assert!(is_tombstone(&r), "{r:?}"),
        other => panic!("{other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn readers_cannot_write_and_controller_types_are_read_only() {
    let sim = sim().await;
    let reader = sim
        .register_service_account("reader", Role::Reader)
        .unwrap();
    let operator = sim.register_service_account("op", Role::Operator).unwrap();
    let err = client(&sim, &reader)
        .state()
        .create(cluster("x").into_resource(), "")
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::PermissionDenied(_)), "{err:?}");
    assert!(!err.is_retryable());
    let status = TypedResource::new("x", specs::ClusterStatusSpec::default());
    let err = client(&sim, &operator)
        .state()
        .create(status.into_resource(), "")
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::PermissionDenied(_)), "{err:?}");
    let err = client(&sim, &reader)
        .kubeconfig("x", Duration::from_secs(60), "u", &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ManagementError::Rpc(StateError::PermissionDenied(_))),
        "{err:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn unknown_keys_are_unauthenticated() {
    let sim = sim().await;
    let (_, _, encoded) = generate_key("stranger", Duration::from_secs(3600)).unwrap();
    let err = client(&sim, &encoded).ping().await.unwrap_err();
    assert!(matches!(err, StateError::Unauthenticated(_)), "{err:?}");
    assert!(!err.is_retryable());
    sim.shutdown().await;
}

#[tokio::test]
async fn keys_expired_on_the_server_are_unauthenticated() {
    let clock = std::sync::Arc::new(ManualClock::new(jiff::Timestamp::now()));
    let sim = OmniSim::builder()
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let (key, public, encoded) = generate_key("short", Duration::from_secs(120)).unwrap();
    sim.register_public_key("short", &public, Role::Reader, None)
        .unwrap();
    let client = client(&sim, &encoded);
    client.ping().await.unwrap();
    // Past the key's lifetime but within the 5-minute timestamp window.
    clock.advance(jiff::SignedDuration::from_secs(180));
    assert!(key.expiration().is_some());
    let err = client.ping().await.unwrap_err();
    assert!(matches!(err, StateError::Unauthenticated(_)), "{err:?}");
    sim.shutdown().await;
}

/// Signs with a valid, registered key but lets the test alter the request afterwards.
async fn raw_list_with(
    sim: &RunningOmniSim,
    key: &ServiceAccountKey,
    signed_method: &'static str,
    extra_header: Option<(&'static str, &'static str)>,
) -> tonic::Status {
    let channel = tonic::transport::Endpoint::from_shared(sim.endpoint().to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = key.clone();
    let mut raw = StateClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
        let mut headers = http::HeaderMap::new();
        key.sign_headers(signed_method, &mut headers, omni_client::auth::unix_now())
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        for (name, value) in &headers {
            let value = tonic::metadata::MetadataValue::try_from(value.to_str().unwrap()).unwrap();
            req.metadata_mut().insert(
                tonic::metadata::MetadataKey::from_bytes(name.as_str().as_bytes()).unwrap(),
                value,
            );
        }
        if let Some((k, v)) = extra_header {
            req.metadata_mut().insert(k, v.parse().unwrap());
        }
        Ok(req)
    });
    raw.list(ListRequest {
        namespace: NAMESPACE.into(),
        r#type: types::CLUSTER.into(),
        options: Some(ListOptions::default()),
    })
    .await
    .map(|_| ())
    .expect_err("tampered request accepted")
}

#[tokio::test]
async fn tampered_signatures_are_unauthenticated() {
    let sim = sim().await;
    let encoded = sim
        .register_service_account("reader", Role::Reader)
        .unwrap();
    let key = ServiceAccountKey::parse(&encoded).unwrap();
    // Signed for another method.
    let status = raw_list_with(&sim, &key, "/cosi.resource.State/Get", None).await;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    // A signed header added after signing.
    let status = raw_list_with(
        &sim,
        &key,
        "/cosi.resource.State/List",
        Some(("context", "prod")),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    // The untampered request is accepted, so the two failures above are the tampering's.
    client(&sim, &encoded).ping().await.unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn injected_unavailability_is_retryable_and_transient() {
    let sim = sim().await;
    let key = sim
        .register_service_account("reader", Role::Reader)
        .unwrap();
    let client = client(&sim, &key);
    sim.inject_failure(methods::LIST, tonic::Code::Unavailable, 1);
    let err = client.ping().await.unwrap_err();
    assert!(matches!(err, StateError::Unavailable(_)), "{err:?}");
    assert!(err.is_retryable());
    client.ping().await.unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn slow_calls_hit_the_client_deadline() {
    let sim = sim().await;
    let key = sim
        .register_service_account("reader", Role::Reader)
        .unwrap();
    let mut config = ClientConfig::from_encoded_key(sim.endpoint(), &key).unwrap();
    config.request_timeout = Duration::from_secs(1);
    let client = Client::new(config).unwrap();
    // Far longer than the deadline, so the outcome does not depend on machine speed.
    sim.set_latency(methods::GET, Duration::from_secs(3600));
    let err = client
        .state()
        .get(NAMESPACE, types::CLUSTER, "any")
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::DeadlineExceeded(_)), "{err:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn kubeconfig_for_an_existing_cluster_and_errors_otherwise() {
    let sim = sim().await;
    let key = sim.register_service_account("op", Role::Operator).unwrap();
    let client = client(&sim, &key);
    client
        .state()
        .create(cluster("kc").into_resource(), "")
        .await
        .unwrap();
    // The ClusterUUID is created by the simulator's cluster controller.
    let deadline = tokio::time::Instant::now() + WAIT;
    while client
        .state()
        .get_optional(NAMESPACE, types::CLUSTER_UUID, "kc")
        .await
        .unwrap()
        .is_none()
    {
        assert!(tokio::time::Instant::now() < deadline, "no ClusterUUID");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let yaml = client
        .kubeconfig(
            "kc",
            Duration::from_secs(3600),
            "ci",
            &["system:masters".into()],
        )
        .await
        .unwrap();
    let text = String::from_utf8(yaml).unwrap();
    assert!(text.contains("kind: Config"), "{text}");
    assert!(text.contains("kc"), "{text}");

    let err = client
        .kubeconfig("missing", Duration::from_secs(3600), "ci", &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ManagementError::Rpc(StateError::Other { .. })),
        "{err:?}"
    );
    let err = client
        .kubeconfig("kc", Duration::from_secs(87_601 * 3600), "ci", &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ManagementError::Rpc(StateError::Validation(_))),
        "{err:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn admins_register_service_accounts_that_can_then_sign_in() {
    let sim = sim().await;
    let admin = sim.register_service_account("admin", Role::Admin).unwrap();
    let (new_key, public, encoded) = generate_key("newbie", Duration::from_secs(3600)).unwrap();
    let id = client(&sim, &admin)
        .create_service_account("newbie", &public, Some("Reader"))
        .await
        .unwrap();
    assert_eq!(id, new_key.fingerprint());
    client(&sim, &encoded).ping().await.unwrap();
    let err = client(&sim, &encoded)
        .state()
        .create(cluster("nope").into_resource(), "")
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::PermissionDenied(_)), "{err:?}");
    sim.shutdown().await;
}

/// One `Client` is one HTTP/2 channel: clones, unary calls, concurrent calls and streams all
/// share it (the original opened a connection per call).
#[tokio::test]
async fn a_client_and_its_clones_share_one_connection() {
    let sim = sim().await;
    let key = sim.register_service_account("op", Role::Operator).unwrap();
    let client = client(&sim, &key);
    let state = client.state();
    state
        .create(cluster("shared").into_resource(), "")
        .await
        .unwrap();
    let clones: Vec<Client> = (0..4).map(|_| client.clone()).collect();
    let calls = clones.iter().map(|c| async move {
        c.ping().await.unwrap();
        c.state()
            .get(NAMESPACE, types::CLUSTER, "shared")
            .await
            .unwrap();
    });
    futures::future::join_all(calls).await;
    let mut events = state
        .watch(&WatchTarget::single(NAMESPACE, types::CLUSTER, "shared"))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(sim.connections_accepted(), 1);

    // A second client is a second channel: the counter does count connections.
    let other = self::client(&sim, &key);
    other.ping().await.unwrap();
    assert_eq!(sim.connections_accepted(), 2);
    sim.shutdown().await;
}
