//! `kubectl get -w` through kube-sim's Table watch: every row keeps every column (the real
//! server sends each event's object as a one-row Table, column definitions in the first only).
//! Needs `scripts/install-test-tools` (or `KUBECTL_BIN`).

use crate::tools;

use std::time::Duration;

use kube_sim::server::KubeSim;
use tokio::io::AsyncReadExt as _;

const NS: &str = "default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_keeps_every_column_after_the_first_row() {
    let sim = KubeSim::builder().start().await.unwrap();
    let (dir, kubeconfig) = tools::admin_kubeconfig(&sim);
    let home = dir.path().to_path_buf();
    let kubectl = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (kubeconfig, home) = (kubeconfig.clone(), home.clone());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tools::run("kubectl", &kubeconfig, &home, &args).await
        }
    };
    let crd = tools::repo_root()
        .join("charts/omni-cluster-operator-crds/crds/omni.texashpc.com_omniconnections.yaml");
    kubectl(&["apply", "-f", crd.to_str().unwrap()]).await.ok();
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/omniconnections.omni.texashpc.com",
    ])
    .await
    .ok();
    let manifest = dir.path().join("connection.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniConnection\nmetadata:\n  name: omni\n  \
         namespace: default\nspec:\n  endpoint: https://omni.example.com\n  auth:\n    \
         serviceAccountSecretRef:\n      name: key\n",
    )
    .unwrap();
    kubectl(&["apply", "-f", manifest.to_str().unwrap()])
        .await
        .ok();
    kubectl(&[
        "patch", "omniconnection", "omni", "-n", NS, "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Connected","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
    ])
    .await
    .ok();

    let mut watch = tokio::process::Command::new(tools::tool("kubectl"))
        .args(["get", "omniconnections", "-n", NS, "-w"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("KUBECONFIG", &kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = watch.stdout.take().unwrap();
    let read = tokio::spawn(async move {
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        // Three whole lines: a header and two rows (a read may end mid-line).
        while text.matches('\n').count() < 3 && tokio::time::Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(1), stdout.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => {}
            }
        }
        text
    });
    // A change once the watch stands: a second row for the same object.
    tokio::time::sleep(Duration::from_secs(2)).await;
    kubectl(&["label", "omniconnection", "omni", "-n", NS, "team=platform"])
        .await
        .ok();
    let text = read.await.unwrap();
    let _ = watch.kill().await;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3, "header and two rows expected:\n{text}");
    let fields = |line: &str| line.split_whitespace().count();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "ENDPOINT", "READY", "REASON", "AGE"],
        "{text}"
    );
    for row in &lines[1..3] {
        assert_eq!(fields(row), 5, "a row lost columns:\n{text}");
        assert!(
            row.contains("https://omni.example.com") && row.contains("Connected"),
            "{text}"
        );
    }
}
