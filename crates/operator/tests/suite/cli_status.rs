//! `omni-operator status` against kube-sim holding the operator's CRDs and objects whose
//! status the operator would have written: the fleet summary as a table and as JSON, for one
//! namespace and for all.

use std::process::Command;
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::support;

fn resource(kind: &str) -> ApiResource {
    let crd = omni_operator::api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("omni.texashpc.com", "v1alpha1", kind),
        &crd.spec.names.plural,
    )
}

/// Creates an object, then writes its status in a second request, as the operator does (an
/// API server drops status sent with a create).
async fn put(client: &kube::Client, kind: &str, namespace: &str, object: Value, status: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource(kind));
    let mut object = object;
    object["apiVersion"] = json!("omni.texashpc.com/v1alpha1");
    object["kind"] = json!(kind);
    object["metadata"]["namespace"] = json!(namespace);
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let created: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &created)
        .await
        .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {kind} {name}: {e}"));
}

fn ready(status: &str, reason: &str, message: &str) -> Value {
    json!([{"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}])
}

fn spec_cluster(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"connectionRef": {"name": "omni"},
        "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}})
}

fn export(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"clusterRef": {"name": "edge"},
        "targetSecretRef": {"name": format!("{name}-kc")},
        "serviceAccount": {"user": "ci", "groups": ["ci"]}, "ttl": "24h", "deletionPolicy": "Delete"}})
}

fn rfc3339(in_from_now: Duration) -> String {
    (jiff::Timestamp::now() + in_from_now).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summarises_the_fleet_as_a_table_and_as_json() {
    let (sim, client) = support::kube_sim().await;
    support::install_operator_api(&client, "omni").await;
    let other: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    put(
        &client,
        "OmniCluster",
        "omni",
        spec_cluster("edge"),
        json!({"conditions": ready("True", "Synced", "synced"), "omniPhase": "RUNNING",
               "readyMachines": "2/2", "machineSets": [{"id": "edge-control-planes", "phase": "Running",
               "ready": true, "readyMachines": 1, "totalMachines": 1}]}),
    )
    .await;
    put(
        &client,
        "OmniCluster",
        "omni",
        spec_cluster("starved"),
        json!({"conditions": ready("True", "Synced", "synced"), "omniPhase": "SCALING_UP",
               "readyMachines": "0/0", "machineSets": [{"id": "starved-control-planes", "phase": "ScalingUp",
               "ready": false, "readyMachines": 0, "totalMachines": 0}]}),
    )
    .await;
    put(
        &client,
        "OmniKubeconfigExport",
        "omni",
        export("soon"),
        json!({"conditions": ready("True", "Exported", "exported"), "targetSecretRef": "soon-kc",
               "expirationTime": rfc3339(Duration::from_secs(1800)),
               "nextRotationTime": rfc3339(Duration::from_secs(600))}),
    )
    .await;
    put(
        &client,
        "OmniKubeconfigExport",
        "omni",
        export("fresh"),
        json!({"conditions": ready("True", "Exported", "exported"), "targetSecretRef": "fresh-kc",
               "expirationTime": rfc3339(Duration::from_secs(30 * 24 * 3600))}),
    )
    .await;
    put(
        &client,
        "OmniKubeconfigExport",
        "other",
        export("broken"),
        json!({"conditions": ready("False", "MissingCluster", "OmniCluster other/edge not found")}),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::write_kubeconfig(&sim, dir.path(), Some("omni"));
    let status = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_omni-operator"))
            .arg("status")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };

    // The context's namespace by default.
    let table = status(&[]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "4 object(s) in namespace omni: 2 cluster(s), 1 not running; 0 object(s) not Ready; 1 kubeconfig(s) expiring within 1h",
        "{table}"
    );
    assert!(
        table.contains("CLUSTERS NOT RUNNING\nNAMESPACE   NAME      PHASE        MACHINES   SETS NOT READY\nomni        starved   SCALING_UP   0/0        starved-control-planes\n"),
        "{table}"
    );
    assert!(
        table.contains("KUBECONFIGS EXPIRING SOON\n")
            && table.contains("omni        soon   soon-kc"),
        "{table}"
    );
    assert!(!table.contains("fresh"), "{table}");
    assert!(!table.contains("\nNOT READY\n"), "{table}");

    // Every namespace, as JSON.
    let all: Value = serde_json::from_str(&status(&["-A", "-o", "json"])).unwrap();
    assert!(all.get("namespace").is_none(), "{all:#}");
    assert_eq!(all["notReady"].as_array().unwrap().len(), 1, "{all:#}");
    assert_eq!(all["notReady"][0]["namespace"], "other");
    assert_eq!(all["notReady"][0]["kind"], "OmniKubeconfigExport");
    assert_eq!(all["notReady"][0]["reason"], "MissingCluster");
    assert_eq!(
        all["notReady"][0]["message"],
        "OmniCluster other/edge not found"
    );
    assert_eq!(all["clustersNotRunning"][0]["name"], "starved");
    let exports = all["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "OmniKubeconfigExport")
        .unwrap();
    assert_eq!(
        (exports["total"].as_u64(), exports["ready"].as_u64()),
        (Some(3), Some(2))
    );

    // A narrower window leaves the soon-expiring kubeconfig out; -n picks a namespace.
    let other: Value = serde_json::from_str(&status(&[
        "-n",
        "other",
        "-o",
        "json",
        "--expiring-within",
        "10m",
    ]))
    .unwrap();
    assert_eq!(other["namespace"], "other");
    assert_eq!(other["expiringKubeconfigs"], json!([]));
    assert_eq!(other["notReady"][0]["name"], "broken");
}
