//! Server-side apply field ownership between managers: conflicts (409 naming each field),
//! `force` taking ownership, shared ownership of equal values, and removal of fields a manager
//! stops applying when nobody else owns them; fields set by create/update/patch belong to
//! their `Update` manager.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::server::KubeSim;
use serde_json::{Value, json};

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data})
}

fn owners(cm: &ConfigMap, field: &str) -> Vec<String> {
    cm.metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(&format!("/f:data/f:{field}")).is_some())
        })
        .filter_map(|e| e.manager)
        .collect()
}

#[tokio::test]
async fn managers_conflict_force_share_and_drop_fields() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let apply = |m: &str| PatchParams::apply(m);

    api.patch(
        "shared",
        &apply("alpha"),
        &Patch::Apply(cm(json!({"a": "1", "b": "2"}))),
    )
    .await
    .unwrap();

    // beta changing alpha's field: 409 naming the field and the owner; nothing changes.
    let err = api
        .patch(
            "shared",
            &apply("beta"),
            &Patch::Apply(cm(json!({"a": "9"}))),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a Status")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "alpha": .data.a"#
    );
    let now = api.get("shared").await.unwrap();
    assert_eq!(now.data.as_ref().unwrap()["a"], "1");

    // Applying the same value is no conflict: both own it.
    api.patch(
        "shared",
        &apply("beta"),
        &Patch::Apply(cm(json!({"a": "1"}))),
    )
    .await
    .unwrap();
    let now = api.get("shared").await.unwrap();
    let mut a_owners = owners(&now, "a");
    a_owners.sort();
    assert_eq!(a_owners, vec!["alpha", "beta"]);

    // force takes the field over.
    api.patch(
        "shared",
        &apply("beta").force(),
        &Patch::Apply(cm(json!({"a": "9"}))),
    )
    .await
    .unwrap();
    let now = api.get("shared").await.unwrap();
    assert_eq!(now.data.as_ref().unwrap()["a"], "9");
    assert_eq!(owners(&now, "a"), vec!["beta"]);

    // alpha stops applying b, which only it owned: b is removed; a (beta's) stays.
    api.patch("shared", &apply("alpha"), &Patch::Apply(cm(json!({}))))
        .await
        .unwrap();
    let now = api.get("shared").await.unwrap();
    let data = now.data.unwrap_or_default();
    assert!(!data.contains_key("b"), "{data:?}");
    assert_eq!(data["a"], "9");
}

#[tokio::test]
async fn deletecollection_honours_label_selectors() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for (name, team) in [("a", "red"), ("b", "blue"), ("c", "red")] {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"team": team}}});
        api.patch(name, &PatchParams::apply("test"), &Patch::Apply(obj))
            .await
            .unwrap();
    }
    api.delete_collection(
        &kube::api::DeleteParams::default(),
        &kube::api::ListParams::default().labels("team=red"),
    )
    .await
    .unwrap();
    let left: Vec<String> = api
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap_or_default())
        .collect();
    assert_eq!(left, vec!["b"]);
}

#[tokio::test]
async fn fields_written_by_update_are_owned_and_conflict_with_apply() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created: ConfigMap = serde_json::from_value(cm(json!({"a": "1"}))).unwrap();
    let post = kube::api::PostParams {
        field_manager: Some("creator".into()),
        ..Default::default()
    };
    api.create(&post, &created).await.unwrap();
    // A merge patch by another client takes over the field it changes, without conflict.
    let editor = PatchParams {
        field_manager: Some("editor".into()),
        ..Default::default()
    };
    let edited = api
        .patch(
            "shared",
            &editor,
            &Patch::Merge(json!({"data": {"a": "2", "b": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(owners(&edited, "a"), ["editor"]);
    let entry = edited.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        entry
            .iter()
            .all(|e| e.operation.as_deref() == Some("Update")),
        "{entry:?}"
    );
    // The creator keeps only the map it created (`.`), as on the real server, and no field.
    assert!(
        entry
            .iter()
            .filter(|e| e.manager.as_deref() == Some("creator"))
            .all(|e| e.fields_v1.as_ref().map(|f| &f.0) == Some(&json!({"f:data": {".": {}}}))),
        "creator owns no field any more: {entry:?}"
    );

    // Applying a different value of an updater's field is a conflict naming it and its
    // apiVersion, as on the real server; force takes the field over.
    let err = api
        .patch(
            "shared",
            &PatchParams::apply("gitops"),
            &Patch::Apply(cm(json!({"a": "3"}))),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a Status")
    };
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "editor" using v1: .data.a"#
    );
    let forced = api
        .patch(
            "shared",
            &PatchParams::apply("gitops").force(),
            &Patch::Apply(cm(json!({"a": "3"}))),
        )
        .await
        .unwrap();
    assert_eq!(owners(&forced, "a"), ["gitops"]);
    assert_eq!(owners(&forced, "b"), ["editor"]);

    // A write that changes nothing records nothing (no new resourceVersion either).
    let again = api
        .patch(
            "shared",
            &editor,
            &Patch::Merge(json!({"data": {"b": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        forced.metadata.resource_version
    );
    assert_eq!(
        again.metadata.managed_fields,
        forced.metadata.managed_fields
    );
}
