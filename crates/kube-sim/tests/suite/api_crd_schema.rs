//! CRD structural schemas: pruning, defaulting and validation on create, update and patch,
//! with our own CRDs (loaded from the CRD chart) and a small hand-written one.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::{Value, json};

async fn start() -> (RunningKubeSim, kube::Client) {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    (sim, client)
}

async fn install_crd(client: &kube::Client, crd: Value) {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let obj: DynamicObject = serde_json::from_value(crd).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn chart_crd(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/omni-cluster-operator-crds/crds")
        .join(file);
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    )
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn causes(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("expected a Status, got {other:?}"),
    }
}

#[tokio::test]
async fn our_crds_default_prune_and_validate() {
    let (_sim, client) = start().await;
    install_crd(&client, chart_crd("omni.texashpc.com_omniclusters.yaml")).await;
    install_crd(
        &client,
        chart_crd("omni.texashpc.com_omnikubeconfigexports.yaml"),
    )
    .await;
    let clusters = api(
        &client,
        "omni.texashpc.com",
        "v1alpha1",
        "OmniCluster",
        "omniclusters",
    );

    let created = clusters
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster",
                "metadata": {"name": "c1"},
                "spec": {
                    "connectionRef": {"name": "omni"},
                    "kubernetes": {"version": "v1.35.0",
                                   "manifests": [{"name": "ns", "inline": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}]}]},
                    "talos": {"version": "v1.13.2"},
                    "notAField": true,
                },
                "status": {"surprise": 1},
            })),
        )
        .await
        .unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["syncInterval"], "5m", "top-level default: {spec}");
    assert_eq!(
        spec["kubernetes"]["manifests"][0]["mode"], "full",
        "default inside array items"
    );
    assert!(
        spec.get("notAField").is_none(),
        "unknown field kept: {spec}"
    );
    // Embedded manifests preserve unknown fields.
    assert_eq!(
        spec["kubernetes"]["manifests"][0]["inline"][0]["metadata"]["name"],
        "x"
    );

    let exports = api(
        &client,
        "omni.texashpc.com",
        "v1alpha1",
        "OmniKubeconfigExport",
        "omnikubeconfigexports",
    );
    let err = exports
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniKubeconfigExport",
                "metadata": {"name": "e1"},
                "spec": {"clusterRef": {"name": "c1"}, "targetSecretRef": {"name": "s"},
                         "serviceAccount": {"user": "u", "groups": ["g"]},
                         "deletionPolicy": "Shred"},
            })),
        )
        .await
        .unwrap_err();
    let (code, message) = causes(err);
    assert_eq!(code, 422);
    assert!(
        message.contains(r#"OmniKubeconfigExport.omni.texashpc.com "e1" is invalid"#)
            && message.contains(r#"spec.deletionPolicy: Unsupported value: "Shred": supported values: "Delete", "Orphan""#),
        "{message}"
    );

    // CEL rules (`x-kubernetes-validations`) run before any admission webhook.
    let err = clusters
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster",
                "metadata": {"name": "c2"},
                "spec": {
                    "connectionRef": {"name": "omni"},
                    "kubernetes": {"version": "v1.35.0"},
                    "talos": {"version": "v1.13.2"},
                    "deletePolicy": {"orphan": true, "destroyMachines": true},
                },
            })),
        )
        .await
        .unwrap_err();
    let (code, message) = causes(err);
    assert_eq!(code, 422);
    assert!(
        // The real server omits the value of a CEL failure (checked in tests/differential.rs).
        message.contains(
            r#"spec.deletePolicy: Invalid value: orphan and destroyMachines cannot both be true"#
        ),
        "{message}"
    );

    // `x-kubernetes-list-type: set` (the export's groups): a repeated item is a Duplicate.
    let err = exports
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniKubeconfigExport",
                "metadata": {"name": "e2"},
                "spec": {"clusterRef": {"name": "c1"}, "targetSecretRef": {"name": "s"},
                         "serviceAccount": {"user": "u", "groups": ["ops", "dev", "ops"]}},
            })),
        )
        .await
        .unwrap_err();
    let (code, message) = causes(err);
    assert_eq!(code, 422);
    assert!(
        message.contains(r#"spec.serviceAccount.groups[2]: Duplicate value: "ops""#),
        "{message}"
    );
    // `x-kubernetes-list-type: map` (conditions, keyed by type) through the status endpoint.
    let mut with_status = clusters.get("c1").await.unwrap();
    let condition = |status: &str| {
        json!({"type": "Ready", "status": status, "reason": "R", "message": "",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    with_status.data["status"] = json!({"conditions": [condition("True"), condition("False")]});
    let err = clusters
        .replace_status("c1", &PostParams::default(), &with_status)
        .await
        .unwrap_err();
    let (code, message) = causes(err);
    assert_eq!(code, 422);
    assert!(
        message.contains(
            r#"status.conditions[1]: Duplicate value: map[string]interface {}{"type":"Ready"}"#
        ),
        "{message}"
    );
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                        "color": {"type": "string", "default": "blue"},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    }},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                }}}}],
        },
    })
}

#[tokio::test]
async fn types_bounds_patterns_and_counts_are_enforced_on_every_write() {
    let (sim, client) = start().await;
    install_crd(&client, widget_crd()).await;
    let widgets = api(&client, "example.com", "v1", "Widget", "widgets");
    let widget = |spec: Value| {
        object(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}),
        )
    };

    let (code, message) = causes(
        widgets
            .create(&PostParams::default(), &widget(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(message.ends_with("spec.size: Required value"), "{message}");

    let (_, message) = causes(
        widgets
            .create(
                &PostParams::default(),
                &widget(json!({"size": 11, "name": "Bad-Name!", "tags": ["a", "b", "c"]})),
            )
            .await
            .unwrap_err(),
    );
    for expected in [
        "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
        "spec.name: Too long: may not be more than 8 bytes",
        "spec.name: Invalid value: \"Bad-Name!\": spec.name in body should match '^[a-z]+$'",
        "spec.tags: Too many: 3: must have at most 2 items",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    let (_, message) = causes(
        widgets
            .create(&PostParams::default(), &widget(json!({"size": "big"})))
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("spec.size in body must be of type integer"),
        "{message}"
    );

    let created = widgets
        .create(
            &PostParams::default(),
            &widget(json!({"size": 3, "labels": {"a": "b"}, "free": {"any": {"thing": 1}}, "color": null})),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["color"], "blue",
        "a null is dropped, then defaulted"
    );
    assert_eq!(created.data["spec"]["free"]["any"]["thing"], 1);

    // A merge patch is validated too, and a failed one changes nothing.
    let err = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 0}})),
        )
        .await
        .unwrap_err();
    assert_eq!(causes(err).0, 422);
    let stored = sim
        .store()
        .get("example.com", "widgets", Some("default"), "w")
        .unwrap();
    assert_eq!(stored["spec"]["size"], 3);

    // Status writes are pruned by the status schema.
    let status = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready", "bogus": true}})),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"], json!({"phase": "Ready"}));
}
