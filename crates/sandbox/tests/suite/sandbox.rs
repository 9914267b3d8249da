//! The sandbox end to end: headless with `--exit-when-ready`, and in-process with the real
//! kubectl (needs `scripts/install-test-tools`): samples Ready, admission through the
//! operator's webhook, the template's manifests in the workload cluster, `/metrics`, and
//! deleting the sample OmniCluster removing it from omni-sim.

use std::path::{Path, PathBuf};
use std::time::Duration;

use omni_sandbox::{Options, Sandbox, find_helm, repo_root, status};

const WAIT: Duration = Duration::from_secs(120);

fn tool(name: &str) -> PathBuf {
    let path = repo_root().join(".cache/test-tools/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install-test-tools",
        path.display()
    );
    path
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(tool("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_binary_exits_zero_once_every_sample_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omni-sandbox"))
        .current_dir(dir.path())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--exit-when-ready",
            "--timeout",
            "120s",
        ])
        .arg("--helm-binary")
        .arg(tool("helm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all samples Ready"), "{stdout}");
    for step in [
        "management cluster",
        "omni-sim",
        "admission webhook",
        "applying config/samples",
        "operator metrics at http://127.0.0.1:",
    ] {
        assert!(
            stdout.contains(step),
            "progress step {step:?} missing:\n{stdout}"
        );
    }
    assert!(dir.path().join("sandbox/kubeconfig").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_works_against_it_and_deleting_a_cluster_reaches_omni() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        dir: dir.path().join("sandbox"),
        helm: find_helm(Some(&tool("helm"))).unwrap(),
        empty: false,
        as_deployed: None,
    };
    let sandbox = Sandbox::start(&opts, |_| {}).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = status::rows(&sandbox.client).await.unwrap();
        if rows.len() == sandbox.applied.len() && rows.iter().all(status::Row::is_ready) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            status::render(&rows)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let kubeconfig = sandbox.kubeconfig.clone();
    let out = kubectl(&kubeconfig, &["get", "omniclusters", "-A", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cluster = &list["items"][0];
    assert_eq!(cluster["metadata"]["name"], "edge-sample");
    let ready = cluster["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True");

    // kube-sim calls the operator's webhook: a rule only the webhook enforces (a patch with both
    // a file and inline content; the CRD schema cannot express it) rejects the object.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniCluster\nmetadata:\n  name: bad\n  namespace: omni-cluster-operator-system\nspec:\n  connectionRef:\n    name: omni-sample\n  kubernetes:\n    version: v1.35.0\n  talos:\n    version: v1.13.2\n  patches:\n    - name: both\n      file: patches/a.yaml\n      inline:\n        machine: {}\n",
    )
    .unwrap();
    let out = kubectl(&kubeconfig, &["apply", "-f", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("denied the request")
            && stderr.contains("patch must not set both file and inline"),
        "{stderr}"
    );

    // Workload clusters evaluate RBAC: the automation group is bound to cluster-admin, the
    // GitOps group (no RoleBinding) may do nothing.
    let exported = |secret: &str, key: &str| {
        let out = kubectl(
            &kubeconfig,
            &[
                "get",
                "secret",
                secret,
                "-n",
                "omni-cluster-operator-system",
                "-o",
                &format!("go-template={{{{index .data \"{key}\" | base64decode}}}}"),
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = dir.path().join(format!("{secret}.kubeconfig"));
        std::fs::write(&path, &out.stdout).unwrap();
        path
    };
    let automation = exported("edge-sample-automation-kubeconfig", "kubeconfig");
    let gitops = exported("edge-sample-gitops-kubeconfig", "workload.kubeconfig");
    let can_i = |kubeconfig: &Path| {
        let out = kubectl(
            kubeconfig,
            &["auth", "can-i", "create", "secrets", "-n", "default"],
        );
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            answer == "yes" || answer == "no",
            "{answer}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        answer
    };
    assert_eq!(can_i(&automation), "yes");
    assert_eq!(can_i(&gitops), "no");

    // The sample cluster's manifest (a Namespace) is in its workload cluster, written there
    // as Omni's manifest sync writes it.
    let out = kubectl(&automation, &["get", "namespace", "apps", "-o", "name"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/apps"
    );

    // The operator serves /metrics in-process, on loopback.
    assert!(sandbox.metrics.ip().is_loopback());
    let mut stream = tokio::net::TcpStream::connect(sandbox.metrics)
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200") && response.contains("omni_operator_reconciles_total"),
        "{response}"
    );
    let denied = kubectl(&gitops, &["get", "secrets", "-n", "default"]);
    assert!(!denied.status.success());
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains("Forbidden") && stderr.contains("edge-sample-gitops"),
        "{stderr}"
    );

    assert_eq!(sandbox.omni.list(omni_sim::types::ty::CLUSTER).len(), 1);
    let out = kubectl(
        &kubeconfig,
        &[
            "delete",
            "omnicluster",
            "edge-sample",
            "-n",
            "omni-cluster-operator-system",
            "--timeout=120s",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while !sandbox.omni.list(omni_sim::types::ty::CLUSTER).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Omni cluster was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sandbox.shutdown().await;
}
