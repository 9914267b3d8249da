//! COSI State semantics (docs/omni-wire.md#the-cosi-state-api) over real gRPC.

use crate::common;

use common::{Signer, create_req, res};
use omni_client::proto::cosi::resource::{
    DestroyOptions, DestroyRequest, EventType, GetRequest, LabelQuery, LabelTerm, ListOptions,
    ListRequest, Resource, TeardownOptions, TeardownRequest, UpdateOptions, UpdateRequest,
    WatchOptions, WatchRequest, WatchResponse, label_term::Operation, state_client::StateClient,
};
use omni_client::proto::specs::KernelArgsSpec;
use omni_sim::{OmniSim, Role, RunningOmniSim};
use tonic::Code;

const KA: &str = "KernelArgs.omni.sidero.dev";

async fn setup() -> (RunningOmniSim, StateClient<common::Svc>) {
    let sim = OmniSim::builder().start().await.unwrap();
    let signer = Signer::from_encoded(&sim.register_service_account("ci", Role::Operator).unwrap());
    let client = common::state(sim.endpoint(), signer.proper()).await;
    (sim, client)
}

fn ka(id: &str, labels: &[(&str, &str)], args: &[&str]) -> Resource {
    res(
        KA,
        id,
        labels,
        &KernelArgsSpec {
            args: args.iter().map(|s| s.to_string()).collect(),
        },
    )
}

fn update(r: Resource, expected_phase: Option<&str>) -> UpdateRequest {
    UpdateRequest {
        new_resource: Some(r),
        options: Some(UpdateOptions {
            owner: String::new(),
            expected_phase: expected_phase.map(str::to_string),
        }),
    }
}

fn get(id: &str) -> GetRequest {
    GetRequest {
        namespace: "default".into(),
        r#type: KA.into(),
        id: id.into(),
        options: None,
    }
}

fn teardown(id: &str) -> TeardownRequest {
    TeardownRequest {
        namespace: "default".into(),
        r#type: KA.into(),
        id: id.into(),
        options: Some(TeardownOptions::default()),
    }
}

fn destroy(id: &str) -> DestroyRequest {
    DestroyRequest {
        namespace: "default".into(),
        r#type: KA.into(),
        id: id.into(),
        options: Some(DestroyOptions::default()),
    }
}

fn md(r: &Resource) -> &omni_client::proto::cosi::resource::Metadata {
    r.metadata.as_ref().unwrap()
}

#[tokio::test]
async fn create_update_versions_and_conflicts() {
    let (sim, mut c) = setup().await;
    let mut sent = ka("m1", &[("a", "1")], &["x"]);
    sent.metadata.as_mut().unwrap().updated = Some(prost_types::Timestamp {
        seconds: 1000,
        nanos: 0,
    });
    let created = c
        .create(create_req(sent))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    assert_eq!(md(&created).version, "1");
    assert_eq!(md(&created).owner, "");
    // created is the server clock; updated is stored as sent.
    assert!(md(&created).created.unwrap().seconds > 1_700_000_000);
    assert_eq!(md(&created).updated.unwrap().seconds, 1000);

    let e = c.create(create_req(ka("m1", &[], &[]))).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists);

    // Empty version and phase are parse errors.
    let mut bad = ka("m2", &[], &[]);
    bad.metadata.as_mut().unwrap().version = String::new();
    assert_eq!(
        c.create(create_req(bad)).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let mut bad = ka("m2", &[], &[]);
    bad.metadata.as_mut().unwrap().phase = String::new();
    assert_eq!(
        c.create(create_req(bad)).await.unwrap_err().code(),
        Code::InvalidArgument
    );

    // Update with the read version: version+1, full metadata replacement, created kept.
    let mut next = created.clone();
    next.metadata.as_mut().unwrap().labels = [("b".to_string(), "2".to_string())].into();
    let updated = c
        .update(update(next.clone(), Some("running")))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    assert_eq!(md(&updated).version, "2");
    assert_eq!(md(&updated).labels.len(), 1);
    assert_eq!(md(&updated).labels["b"], "2");
    assert_eq!(md(&updated).created, md(&created).created);

    // Stale version → FAILED_PRECONDITION with the exact message shape.
    let e = c.update(update(next, Some("running"))).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.message(),
        "resource KernelArgs.omni.sidero.dev(default/m1@1) update conflict: expected version \"1\", actual version \"2\""
    );

    // Missing resource → NOT_FOUND.
    let e = c.get(get("nope")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(
        e.message(),
        "resource KernelArgs.omni.sidero.dev(default/nope@undefined) doesn't exist"
    );

    // Owned resources cannot be changed with owner "".
    let mut owned = ka("owned", &[], &[]);
    owned.metadata.as_mut().unwrap().owner = "SomeController".into();
    sim.put(owned);
    let current = c
        .get(get("owned"))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let mut attempt = current.clone();
    attempt.metadata.as_mut().unwrap().owner = String::new();
    let e = c.update(update(attempt, None)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("is owned by \"SomeController\""),
        "{e:?}"
    );
    assert_eq!(
        c.destroy(destroy("owned")).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn teardown_finalizers_and_phase() {
    let (sim, mut c) = setup().await;
    let mut r = ka("m1", &[], &[]);
    r.metadata.as_mut().unwrap().finalizers = vec!["f1".into(), "f2".into()];
    let created = c
        .create(create_req(r))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();

    // Destroy blocked by finalizers even while running.
    let e = c.destroy(destroy("m1")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message().ends_with("has pending finalizers [f1 f2]"),
        "{e:?}"
    );

    // Teardown: not ready, idempotent (second call does not bump the version).
    assert!(
        !c.teardown(teardown("m1"))
            .await
            .unwrap()
            .into_inner()
            .destroy_ready
    );
    let v1 = md(&c
        .get(get("m1"))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap())
    .version
    .clone();
    assert!(
        !c.teardown(teardown("m1"))
            .await
            .unwrap()
            .into_inner()
            .destroy_ready
    );
    let torn = c
        .get(get("m1"))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    assert_eq!(md(&torn).version, v1);
    assert_eq!(md(&torn).phase, "tearingDown");

    // expected_phase running no longer matches.
    let e = c
        .update(update(torn.clone(), Some("running")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().ends_with("is not in phase running"), "{e:?}");

    // Without expected_phase, an update removing the finalizers is fine; then destroy works.
    let mut cleared = torn;
    cleared.metadata.as_mut().unwrap().finalizers.clear();
    c.update(update(cleared, None)).await.unwrap();
    assert!(
        c.teardown(teardown("m1"))
            .await
            .unwrap()
            .into_inner()
            .destroy_ready
    );
    c.destroy(destroy("m1")).await.unwrap();
    assert_eq!(c.get(get("m1")).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        c.teardown(teardown("m1")).await.unwrap_err().code(),
        Code::NotFound
    );
    let _ = created;

    // Destroy of a running resource without finalizers works directly.
    c.create(create_req(ka("m2", &[], &[]))).await.unwrap();
    c.destroy(destroy("m2")).await.unwrap();
    sim.shutdown().await;
}

fn term(key: &str, op: Operation, values: &[&str], invert: bool) -> LabelTerm {
    LabelTerm {
        key: key.into(),
        op: op as i32,
        value: values.iter().map(|s| s.to_string()).collect(),
        invert,
    }
}

async fn list_ids(c: &mut StateClient<common::Svc>, terms: Vec<LabelTerm>) -> Vec<String> {
    let mut s = c
        .list(ListRequest {
            namespace: "default".into(),
            r#type: KA.into(),
            options: Some(ListOptions {
                label_query: if terms.is_empty() {
                    vec![]
                } else {
                    vec![LabelQuery { terms }]
                },
                id_query: None,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    while let Some(m) = s.message().await.unwrap() {
        ids.push(md(m.resource.as_ref().unwrap()).id.clone());
    }
    ids
}

#[tokio::test]
async fn list_sorted_with_label_queries() {
    let (sim, mut c) = setup().await;
    for (id, labels) in [
        ("c", vec![("env", "prod"), ("flag", "")]),
        ("a", vec![("env", "dev")]),
        ("b", vec![("env", "prod")]),
        ("d", vec![]),
    ] {
        c.create(create_req(ka(id, &labels, &[]))).await.unwrap();
    }
    assert_eq!(list_ids(&mut c, vec![]).await, ["a", "b", "c", "d"]);
    assert_eq!(
        list_ids(
            &mut c,
            vec![term("env", Operation::Equal, &["prod"], false)]
        )
        .await,
        ["b", "c"]
    );
    assert_eq!(
        list_ids(&mut c, vec![term("flag", Operation::Exists, &[], false)]).await,
        ["c"]
    );
    assert_eq!(
        list_ids(&mut c, vec![term("env", Operation::NotExists, &[], false)]).await,
        ["d"]
    );
    assert_eq!(
        list_ids(
            &mut c,
            vec![term("env", Operation::In, &["dev", "prod"], false)]
        )
        .await,
        ["a", "b", "c"]
    );
    assert_eq!(
        list_ids(&mut c, vec![term("env", Operation::Equal, &["prod"], true)]).await,
        ["a", "d"]
    );
    // Terms are AND-ed.
    assert_eq!(
        list_ids(
            &mut c,
            vec![
                term("env", Operation::Equal, &["prod"], false),
                term("flag", Operation::Exists, &[], false)
            ]
        )
        .await,
        ["c"]
    );
    sim.shutdown().await;
}

async fn next(s: &mut tonic::Streaming<WatchResponse>) -> WatchResponse {
    tokio::time::timeout(std::time::Duration::from_secs(30), s.message())
        .await
        .expect("watch event within 30s")
        .unwrap()
        .unwrap()
}

fn ev(r: &WatchResponse) -> (EventType, String, String) {
    assert_eq!(r.event.len(), 1, "one event per response");
    let e = &r.event[0];
    let m = md(e.resource.as_ref().unwrap());
    (
        EventType::try_from(e.event_type).unwrap(),
        m.id.clone(),
        m.version.clone(),
    )
}

fn watch_req(
    id: Option<&str>,
    bootstrap: bool,
    terms: Vec<LabelTerm>,
    api_version: i32,
) -> WatchRequest {
    WatchRequest {
        namespace: "default".into(),
        r#type: KA.into(),
        id: id.map(str::to_string),
        options: Some(WatchOptions {
            bootstrap_contents: bootstrap,
            label_query: if terms.is_empty() {
                vec![]
            } else {
                vec![LabelQuery { terms }]
            },
            ..Default::default()
        }),
        api_version,
    }
}

#[tokio::test]
async fn watch_protocol() {
    let (sim, mut c) = setup().await;
    c.create(create_req(ka("b", &[("env", "prod")], &[])))
        .await
        .unwrap();
    c.create(create_req(ka("a", &[("env", "prod")], &[])))
        .await
        .unwrap();
    c.create(create_req(ka("z", &[("env", "dev")], &[])))
        .await
        .unwrap();

    // Single-resource watch of a missing resource: empty response, then a tombstone.
    let mut single = c
        .watch(watch_req(Some("m"), false, vec![], 1))
        .await
        .unwrap()
        .into_inner();
    assert!(next(&mut single).await.event.is_empty());
    assert_eq!(
        ev(&next(&mut single).await),
        (EventType::Destroyed, "m".into(), "undefined".into())
    );

    // Kind watch with bootstrap and a label filter.
    let prod = vec![term("env", Operation::Equal, &["prod"], false)];
    let mut kind = c
        .watch(watch_req(None, true, prod.clone(), 1))
        .await
        .unwrap()
        .into_inner();
    assert!(next(&mut kind).await.event.is_empty());
    assert_eq!(ev(&next(&mut kind).await).0, EventType::Created);
    assert_eq!(ev(&next(&mut kind).await).1, "b");
    let boot = next(&mut kind).await;
    assert_eq!(
        ev(&boot),
        (EventType::Bootstrapped, String::new(), "undefined".into())
    );

    // api_version 0: no BOOTSTRAPPED event.
    let mut old = c
        .watch(watch_req(None, true, prod.clone(), 0))
        .await
        .unwrap()
        .into_inner();
    assert!(next(&mut old).await.event.is_empty());
    assert_eq!(ev(&next(&mut old).await).1, "a");
    assert_eq!(ev(&next(&mut old).await).1, "b");

    // Single-resource watch with a label query is not supported.
    let e = c
        .watch(watch_req(Some("a"), false, prod, 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);

    // Create m: single watch sees CREATED; the prod kind watch does not (m is unlabelled).
    c.create(create_req(ka("m", &[], &[]))).await.unwrap();
    assert_eq!(
        ev(&next(&mut single).await),
        (EventType::Created, "m".into(), "1".into())
    );

    // z starts matching → CREATED; then stops → DESTROYED; a matching update → UPDATED with old.
    let z = c
        .get(get("z"))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    let mut zp = z.clone();
    zp.metadata
        .as_mut()
        .unwrap()
        .labels
        .insert("env".into(), "prod".into());
    let zp = c
        .update(update(zp, None))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    assert_eq!(
        ev(&next(&mut kind).await),
        (EventType::Created, "z".into(), "2".into())
    );
    let mut zd = zp.clone();
    zd.metadata
        .as_mut()
        .unwrap()
        .labels
        .insert("env".into(), "dev".into());
    c.update(update(zd, None)).await.unwrap();
    assert_eq!(ev(&next(&mut kind).await).0, EventType::Destroyed);

    let a = c
        .get(get("a"))
        .await
        .unwrap()
        .into_inner()
        .resource
        .unwrap();
    c.update(update(a, None)).await.unwrap();
    let u = next(&mut kind).await;
    assert_eq!(ev(&u), (EventType::Updated, "a".into(), "2".into()));
    assert_eq!(md(u.event[0].old.as_ref().unwrap()).version, "1");

    // DESTROYED carries the last stored version.
    c.teardown(teardown("a")).await.unwrap();
    assert_eq!(
        ev(&next(&mut kind).await),
        (EventType::Updated, "a".into(), "3".into())
    );
    c.destroy(destroy("a")).await.unwrap();
    assert_eq!(
        ev(&next(&mut kind).await),
        (EventType::Destroyed, "a".into(), "3".into())
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn teardown_and_destroy_waits_for_finalizers() {
    let (sim, mut c) = setup().await;
    let mut r = ka("m1", &[], &[]);
    r.metadata.as_mut().unwrap().finalizers = vec!["ctrl".into()];
    c.create(create_req(r)).await.unwrap();
    let mut c2 = c.clone();
    let call = tokio::spawn(async move {
        c2.teardown_and_destroy(
            omni_client::proto::cosi::resource::TeardownAndDestroyRequest {
                namespace: "default".into(),
                r#type: KA.into(),
                id: "m1".into(),
                options: None,
            },
        )
        .await
    });
    // The call tears the resource down and then waits for the finalizer.
    common::eventually(|| {
        sim.get(KA, "m1")
            .filter(|r| md(r).phase == "tearingDown")
            .map(|_| ())
    })
    .await;
    assert!(!call.is_finished());
    sim.store().modify("default", KA, "m1", |r| {
        r.metadata.as_mut().unwrap().finalizers.clear();
    });
    call.await.unwrap().unwrap();
    assert!(sim.get(KA, "m1").is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn aggregated_watch_batches_bootstrap() {
    let (sim, mut c) = setup().await;
    c.create(create_req(ka("a", &[], &[]))).await.unwrap();
    c.create(create_req(ka("b", &[], &[]))).await.unwrap();
    let mut req = watch_req(None, true, vec![], 1);
    req.options.as_mut().unwrap().aggregated = true;
    let mut s = c.watch(req).await.unwrap().into_inner();
    assert!(next(&mut s).await.event.is_empty());
    let batch = next(&mut s).await;
    let kinds: Vec<EventType> = batch
        .event
        .iter()
        .map(|e| EventType::try_from(e.event_type).unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            EventType::Created,
            EventType::Created,
            EventType::Bootstrapped
        ]
    );
    sim.shutdown().await;
}
