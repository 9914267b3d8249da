//! The real kubectl 1.35 against kube-sim: `apply -f` of our CRDs and samples, `get` (table and
//! `-o yaml`), `apply --dry-run=server`, `patch` (merge, json and strategic), `wait
//! --for=condition`, and `delete`.
//! Needs `scripts/install-test-tools` (or `KUBECTL_BIN`).

use crate::tools;

use std::time::Duration;

use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::KubeSim;
use serde_json::{Value, json};

const NS: &str = "omni-cluster-operator-system";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_gets_patches_waits_and_deletes() {
    let sim = KubeSim::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    Kubeconfig::new(&sim.base_url, "admin", Credential::Token("admin".into()))
        .write(&kubeconfig)
        .unwrap();
    let home = dir.path().to_path_buf();
    let kubectl = move |args: Vec<String>| {
        let kubeconfig = kubeconfig.clone();
        let home = home.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tools::run("kubectl", &kubeconfig, &home, &args).await
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let root = tools::repo_root();
    let path = |p: &str| root.join(p).to_str().unwrap().to_owned();

    // CRDs, then (once established) the samples, the way a user installs them.
    let out = kubectl(args(&[
        "apply",
        "-f",
        &path("charts/omni-cluster-operator-crds/crds"),
    ]))
    .await;
    assert!(
        out.ok().contains("omniclusters.omni.texashpc.com created"),
        "{}",
        out.stdout
    );
    kubectl(args(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/omniclusters.omni.texashpc.com",
    ]))
    .await
    .ok();
    kubectl(args(&["create", "namespace", NS])).await.ok();
    // A server-side dry run (what `kubectl diff` and CI pipelines use) checks and stores nothing.
    let dry = kubectl(args(&[
        "apply",
        "--dry-run=server",
        "-f",
        &path("config/samples"),
    ]))
    .await;
    assert!(dry.ok().contains("(server dry run)"), "{}", dry.stdout);
    let nothing = get_json(&kubectl(args(&["get", "omni", "-n", NS, "-o", "json"])).await);
    assert_eq!(nothing["items"], json!([]), "{nothing}");
    let out = kubectl(args(&["apply", "-f", &path("config/samples")])).await;
    let applied = out.ok();
    for kind in [
        "omniconnection",
        "omnicluster",
        "omnicontrolplane",
        "omnihelmrelease",
        "omnisecretsync",
    ] {
        assert!(
            applied.contains(&format!("{kind}.omni.texashpc.com/")),
            "{applied}"
        );
    }
    // Applying again changes nothing.
    let again = kubectl(args(&["apply", "-f", &path("config/samples")])).await;
    assert!(!again.ok().contains("configured"), "{}", again.stdout);

    // `kubectl explain` reads the CRD's descriptions from the OpenAPI v3 documents.
    let explained = kubectl(args(&["explain", "omnicluster.spec.deletePolicy"])).await;
    let text = explained.ok();
    assert!(text.contains("OmniCluster"), "{text}");
    assert!(text.contains("destroyMachines"), "{text}");
    assert!(text.contains("DESCRIPTION"), "{text}");

    // Printer columns and short names come from the CRD.
    let table = kubectl(args(&["get", "ocl", "-n", NS])).await;
    let header = table.ok().lines().next().unwrap_or_default().to_owned();
    for column in ["NAME", "READY", "REASON", "AGE"] {
        assert!(header.contains(column), "{header}");
    }
    assert!(table.stdout.contains("edge-sample"), "{}", table.stdout);

    let yaml = kubectl(args(&[
        "get",
        "omnicluster",
        "edge-sample",
        "-n",
        NS,
        "-o",
        "yaml",
    ]))
    .await;
    assert!(yaml.ok().contains("kind: OmniCluster"));
    assert!(yaml.stdout.contains("resourceVersion:"));

    // Patches: merge on a custom resource, json and strategic on a built-in.
    kubectl(args(&[
        "patch",
        "omnicluster",
        "edge-sample",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]))
    .await
    .ok();
    let cluster = get_json(
        &kubectl(args(&[
            "get",
            "omnicluster",
            "edge-sample",
            "-n",
            NS,
            "-o",
            "json",
        ]))
        .await,
    );
    assert_eq!(cluster["spec"]["suspend"], true);
    assert_eq!(cluster["metadata"]["generation"], 2);

    kubectl(args(&[
        "create",
        "configmap",
        "settings",
        "-n",
        NS,
        "--from-literal=a=1",
    ]))
    .await
    .ok();
    kubectl(args(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        NS,
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/data/b","value":"2"}]"#,
    ]))
    .await
    .ok();
    kubectl(args(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        NS,
        "-p",
        r#"{"data":{"c":"3"}}"#,
    ]))
    .await
    .ok();
    let cm = get_json(
        &kubectl(args(&[
            "get",
            "configmap",
            "settings",
            "-n",
            NS,
            "-o",
            "json",
        ]))
        .await,
    );
    assert_eq!(cm["data"], json!({"a": "1", "b": "2", "c": "3"}));

    // `wait --for=condition=Ready` returns once a controller (here: the test) reports Ready.
    let wait = {
        let kubectl = kubectl.clone();
        let a = args(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=60s",
            "-n",
            NS,
            "omnicluster/edge-sample",
        ]);
        tokio::spawn(async move { kubectl(a).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut obj = sim
        .store()
        .get("omni.texashpc.com", "omniclusters", Some(NS), "edge-sample")
        .unwrap();
    obj["status"] = json!({
        "observedGeneration": 2,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": "in sync",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2}],
    });
    sim.store()
        .update(
            "omni.texashpc.com",
            "omniclusters",
            Some(NS),
            "edge-sample",
            obj,
        )
        .unwrap();
    let waited = wait.await.unwrap();
    assert!(waited.ok().contains("condition met"), "{}", waited.stdout);

    // Delete one object and then everything the samples created.
    kubectl(args(&["delete", "configmap", "settings", "-n", NS]))
        .await
        .ok();
    let gone = kubectl(args(&["get", "configmap", "settings", "-n", NS])).await;
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr.contains("NotFound") || gone.stderr.contains("not found"),
        "{}",
        gone.stderr
    );
    kubectl(args(&[
        "delete",
        "-f",
        &path("config/samples"),
        "--wait=false",
    ]))
    .await
    .ok();
    let left = get_json(&kubectl(args(&["get", "omni", "-n", NS, "-o", "json"])).await);
    assert_eq!(left["items"].as_array().map(Vec::len), Some(0), "{left}");
}

fn get_json(run: &tools::Run) -> Value {
    serde_json::from_str(run.ok()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}
