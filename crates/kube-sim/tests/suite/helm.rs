//! The real helm 4.1 against kube-sim: install, upgrade, rollback and uninstall of a chart with a
//! ConfigMap, a Secret and a Deployment; `status`/`history` report the right revisions, and the
//! objects in kube-sim follow each revision. Needs `scripts/install-test-tools` (or `HELM_BIN`).

use crate::tools;

use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::KubeSim;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_rolls_back_and_uninstalls() {
    let sim = KubeSim::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    Kubeconfig::new(&sim.base_url, "admin", Credential::Token("admin".into()))
        .write(&kubeconfig)
        .unwrap();
    let chart = tools::repo_root().join("crates/kube-sim/tests/fixtures/chart");
    let chart = chart.to_str().unwrap();
    let helm = |args: Vec<&str>| {
        let kubeconfig = kubeconfig.clone();
        let home = dir.path().to_path_buf();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tools::run("helm", &kubeconfig, &home, &args).await
        }
    };
    let store = sim.store();
    let greeting = |store: &kube_sim::store::Store| {
        store
            .get("", "configmaps", Some("default"), "demo-config")
            .ok()
            .and_then(|c| {
                c.pointer("/data/greeting")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
    };

    helm(vec!["install", "demo", chart, "--namespace", "default"])
        .await
        .ok();
    assert_eq!(greeting(store).as_deref(), Some("hello"));
    assert!(
        store
            .get("", "secrets", Some("default"), "demo-secret")
            .is_ok()
    );
    assert!(
        store
            .get("apps", "deployments", Some("default"), "demo-app")
            .is_ok()
    );

    helm(vec![
        "upgrade",
        "demo",
        chart,
        "--namespace",
        "default",
        "--set",
        "greeting=bonjour",
    ])
    .await
    .ok();
    assert_eq!(greeting(store).as_deref(), Some("bonjour"));

    helm(vec!["rollback", "demo", "1", "--namespace", "default"])
        .await
        .ok();
    assert_eq!(greeting(store).as_deref(), Some("hello"));

    let status: Value = serde_json::from_str(
        helm(vec![
            "status",
            "demo",
            "--namespace",
            "default",
            "-o",
            "json",
        ])
        .await
        .ok(),
    )
    .unwrap();
    assert_eq!(status["version"], 3, "{status}");
    assert_eq!(status["info"]["status"], "deployed");

    let history: Value = serde_json::from_str(
        helm(vec![
            "history",
            "demo",
            "--namespace",
            "default",
            "-o",
            "json",
        ])
        .await
        .ok(),
    )
    .unwrap();
    let rows: Vec<(i64, String)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (1, "superseded".to_owned()),
            (2, "superseded".to_owned()),
            (3, "deployed".to_owned())
        ]
    );

    helm(vec![
        "uninstall",
        "demo",
        "--namespace",
        "default",
        "--wait",
    ])
    .await
    .ok();
    assert_eq!(greeting(store), None);
    assert!(
        store
            .get("", "secrets", Some("default"), "demo-secret")
            .is_err()
    );
    assert!(
        store
            .get("apps", "deployments", Some("default"), "demo-app")
            .is_err()
    );
    let releases = store.list_objects("", "secrets", Some("default"));
    assert!(
        releases
            .iter()
            .all(|s| s.pointer("/metadata/labels/owner").and_then(Value::as_str) != Some("helm")),
        "helm's release Secrets remain after uninstall"
    );
    let out = helm(vec!["status", "demo", "--namespace", "default"]).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("not found"), "{}", out.stderr);
}

/// The CRD chart installs with helm over CRDs that were created through the API first (as the
/// sandbox creates them, `minimum: 0.0` and all): the same schema, no server-side-apply
/// conflict on `0` vs `0.0`, as on the real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crd_chart_installs_over_crds_created_through_the_api() {
    let sim = KubeSim::builder().start().await.unwrap();
    let (dir, kubeconfig) = tools::admin_kubeconfig(&sim);
    let client = kube::Client::try_from(kube::Config::new(sim.base_url.parse().unwrap())).unwrap();
    let crds: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        client,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    let chart = tools::repo_root().join("charts/omni-cluster-operator-crds");
    let mut created = 0;
    for entry in std::fs::read_dir(chart.join("crds")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let crd: Value = serde_saphyr::from_str(&text).unwrap();
        assert!(
            text.contains("minimum: 0.0") || !text.contains("minimum:"),
            "the premise: the chart writes whole bounds as floats"
        );
        let post = kube::api::PostParams {
            field_manager: Some("omni-sandbox".into()),
            ..Default::default()
        };
        crds.create(&post, &serde_json::from_value(crd).unwrap())
            .await
            .unwrap();
        created += 1;
    }
    assert_eq!(created, 11, "the chart holds the eleven kinds");
    let out = tools::run(
        "helm",
        &kubeconfig,
        dir.path(),
        &[
            "install",
            "omni-cluster-operator-crds",
            chart.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        !out.stderr.to_lowercase().contains("conflict"),
        "{}",
        out.stderr
    );
}
