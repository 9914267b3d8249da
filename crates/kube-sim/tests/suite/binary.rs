//! The `kube-sim` binary: serves HTTPS with client-certificate authentication and RBAC, writes
//! an admin kubeconfig (mode 0600) that the real kubectl uses, and stops on SIGTERM.

use crate::tools;

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

#[tokio::test]
async fn the_binary_serves_kubectl_with_the_kubeconfig_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !kubeconfig.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no kubeconfig written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Written in one go after the server is listening; give the write a moment to finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("https://127.0.0.1:"), "{text}");

    let out = tools::run(
        "kubectl",
        &kubeconfig,
        dir.path(),
        &["get", "namespaces", "-o", "name"],
    )
    .await;
    assert!(out.ok().contains("namespace/default"), "{}", out.stdout);
    let out = tools::run(
        "kubectl",
        &kubeconfig,
        dir.path(),
        &["auth", "whoami", "-o", "json"],
    )
    .await;
    let who: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "kube-sim-admin");

    let pid = child.id().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("kube-sim stops on SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}
