//! Deletion semantics through the HTTP API: background and orphan propagation
//! over ownerReferences, namespace termination, CRD deletion removing its
//! objects, and the ban on new finalizers once deletion has started.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube_sim::server::{KubeSim, RunningKubeSim};

async fn start() -> (RunningKubeSim, kube::Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    (sim, client)
}

fn cm(name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: owner.map(|o| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: o.metadata.name.clone().unwrap(),
                    uid: o.metadata.uid.clone().unwrap(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn background_deletion_removes_dependents_recursively() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    let owner = api.create(&pp, &cm("owner", None)).await.unwrap();
    let child = api.create(&pp, &cm("child", Some(&owner))).await.unwrap();
    api.create(&pp, &cm("grandchild", Some(&child)))
        .await
        .unwrap();
    api.create(&pp, &cm("unrelated", None)).await.unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    for gone in ["owner", "child", "grandchild"] {
        assert!(
            api.get_opt(gone).await.unwrap().is_none(),
            "{gone} survived"
        );
    }
    assert!(api.get_opt("unrelated").await.unwrap().is_some());
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_drops_only_that_owner_reference() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    let owner = api.create(&pp, &cm("owner", None)).await.unwrap();
    let other = api.create(&pp, &cm("other", None)).await.unwrap();
    let mut child = cm("child", Some(&owner));
    let second = cm("x", Some(&other)).metadata.owner_references.unwrap();
    child
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .extend(second);
    api.create(&pp, &child).await.unwrap();
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert!(api.get_opt("owner").await.unwrap().is_none());
    let kept = api.get("child").await.unwrap();
    let refs = kept.metadata.owner_references.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, other.metadata.uid.unwrap());
}

#[tokio::test]
async fn namespace_terminates_until_finalized_contents_are_released() {
    let (_sim, client) = start().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let pp = PostParams::default();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("team".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    nss.create(&pp, &ns).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "team");
    api.create(&pp, &cm("plain", None)).await.unwrap();
    let mut held = cm("held", None);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&pp, &held).await.unwrap();

    nss.delete("team", &DeleteParams::default()).await.unwrap();
    let terminating = nss.get("team").await.unwrap();
    assert_eq!(
        terminating.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    assert!(api.get_opt("plain").await.unwrap().is_none());
    let held = api.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    // New objects are refused in a terminating namespace.
    let err = api.create(&pp, &cm("late", None)).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 || s.code == 409),
        "{err:?}"
    );
    // The controller releases its finalizer.
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("held").await.unwrap().is_none());
    // The now-empty namespace finishes terminating.
    assert!(nss.get_opt("team").await.unwrap().is_none());
}

#[tokio::test]
async fn no_new_finalizers_once_deleting() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut held = cm("held", None);
    held.metadata.finalizers = Some(vec!["example.com/a".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let err = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}),
            ),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert_eq!(s.reason, "Invalid");
            assert!(s.message.contains("no new finalizers"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn deleting_a_crd_removes_its_objects_and_its_endpoint() {
    let (sim, client) = start().await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let ar = kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ar);
    let w = kube::api::DynamicObject::new("w", &ar);
    widgets.create(&PostParams::default(), &w).await.unwrap();
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        sim.store()
            .get_object("example.com", "widgets", Some("default"), "w")
            .is_none()
    );
    let err = widgets.get("w").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn releasing_an_owners_last_finalizer_collects_its_dependents() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    let mut owner = cm("owner", None);
    owner.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let owner = api.create(&pp, &owner).await.unwrap();
    api.create(&pp, &cm("child", Some(&owner))).await.unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    // The owner still exists (finalizer), so its dependent stays.
    assert!(api.get_opt("child").await.unwrap().is_some());
    api.patch(
        "owner",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("owner").await.unwrap().is_none());
    assert!(api.get_opt("child").await.unwrap().is_none());
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    let owner = api.create(&pp, &cm("owner", None)).await.unwrap();
    api.create(&pp, &cm("plain", Some(&owner))).await.unwrap();
    let mut held = cm("held", Some(&owner));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    held.metadata.owner_references.as_mut().unwrap()[0].block_owner_deletion = Some(true);
    api.create(&pp, &held).await.unwrap();

    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    // Dependents go first; the owner waits for the blocking one.
    assert!(api.get_opt("plain").await.unwrap().is_none());
    let waiting = api.get("owner").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        waiting.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert!(
        api.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("held").await.unwrap().is_none());
    assert!(api.get_opt("owner").await.unwrap().is_none());
}

#[tokio::test]
async fn foreground_deletion_without_blockers_removes_the_owner_at_once() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    let owner = api.create(&pp, &cm("owner", None)).await.unwrap();
    api.create(&pp, &cm("plain", Some(&owner))).await.unwrap();
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    assert!(api.get_opt("owner").await.unwrap().is_none());
    assert!(api.get_opt("plain").await.unwrap().is_none());
}
