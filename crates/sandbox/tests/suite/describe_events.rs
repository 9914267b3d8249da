//! What docs/sandbox.md promises a new user: once the samples are Ready, `kubectl describe`
//! of each of them ends with the Events the operator recorded (it writes them through
//! events.k8s.io/v1; kubectl reads core v1 Events), and `kubectl get` shows each printer column
//! meaningfully. Needs `scripts/install-test-tools`.

use std::path::PathBuf;
use std::time::Duration;

use omni_sandbox::{NAMESPACE, Options, Sandbox, find_helm, repo_root, status};

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

async fn ready_sandbox(dir: &tempfile::TempDir) -> Sandbox {
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
    sandbox
}

fn kubectl(sandbox: &Sandbox, args: &[&str]) -> String {
    let out = std::process::Command::new(tool("kubectl"))
        .arg("--kubeconfig")
        .arg(&sandbox.kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_shows_the_operators_events_for_every_sample() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = ready_sandbox(&dir).await;

    let kinds: std::collections::BTreeSet<&str> =
        sandbox.applied.iter().map(|(k, _)| k.as_str()).collect();
    assert!(kinds.len() >= 5, "{kinds:?}");
    for (kind, name) in &sandbox.applied {
        let text = kubectl(&sandbox, &["describe", kind, name, "-n", NAMESPACE]);
        let events = text
            .split("\nEvents:")
            .nth(1)
            .unwrap_or_else(|| panic!("no Events section for {kind}/{name}:\n{text}"));
        assert!(
            !events.trim_start().starts_with("<none>"),
            "{kind}/{name} shows no Events:\n{text}"
        );
        // A table with the Type, Reason and From the operator reported.
        assert!(
            events.contains("Type") && events.contains("Reason") && events.contains("From"),
            "{text}"
        );
        assert!(
            events
                .lines()
                .skip(2)
                .any(|row| (row.contains("Normal") || row.contains("Warning"))
                    && row.contains("omni")),
            "{kind}/{name}:\n{text}"
        );
    }
    sandbox.shutdown().await;
}

/// An exported kubeconfig expires in the future; `kubectl get` must say when (it showed `0s`,
/// an age column clamped at zero, before the column became the expiry timestamp).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_shows_when_an_exported_kubeconfig_expires() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = ready_sandbox(&dir).await;
    let expiry = kubectl(
        &sandbox,
        &[
            "get",
            "omnikubeconfigexport",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.items[0].status.expirationTime}",
        ],
    );
    assert!(expiry.parse::<jiff::Timestamp>().is_ok(), "{expiry:?}");
    let table = kubectl(&sandbox, &["get", "omnikubeconfigexport", "-n", NAMESPACE]);
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.contains("EXPIRES"), "{table}");
    let row = lines.next().unwrap_or_default();
    assert!(
        row.contains(&expiry),
        "EXPIRES must show {expiry}:\n{table}"
    );
    sandbox.shutdown().await;
}
