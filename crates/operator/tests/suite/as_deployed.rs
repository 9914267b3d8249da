//! The operator run exactly as the Helm chart deploys it (the pod runner in
//! `omni_sandbox::pod`): `helm template` of the operator chart, the Deployment's args and env, a
//! read-only root filesystem, the chart's emptyDir and Secret volumes, its securityContext user,
//! a service-account token, and kube-sim evaluating the chart's own RBAC. Every sample,
//! including the OmniHelmRelease driven by the real helm, must become Ready, and the webhook
//! must reject a bad object. Needs `scripts/install-test-tools`; isolation needs root and
//! `unshare` (util-linux), and the test says loudly when it ran without them.

use std::path::PathBuf;
use std::time::Duration;

use omni_sandbox::{AsDeployed, Options, Sandbox, find_helm, repo_root, status};

const WAIT: Duration = Duration::from_secs(180);

fn tool(name: &str) -> PathBuf {
    let path = repo_root().join(".cache/test-tools/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install-test-tools",
        path.display()
    );
    path
}

/// `path` spelled relative to this process's working directory, without passing through `/`.
fn relative_to_cwd(path: &std::path::Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let common = cwd
        .components()
        .zip(path.components())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        common > 1,
        "{} and {} share no directory",
        cwd.display(),
        path.display()
    );
    let up: PathBuf = cwd.components().skip(common).map(|_| "..").collect();
    up.join(path.components().skip(common).collect::<PathBuf>())
}

async fn start(values: &[&str]) -> (tempfile::TempDir, Sandbox) {
    // Under the build's own scratch directory, so that a relative path to it does not start at
    // `/` (a path that walks up to the root would still resolve after the pod's `cd /`).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let opts = Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        // Relative, as the default `--dir sandbox` is (the pod's script changes its root and
        // directory: the sandbox must resolve the path itself).
        dir: relative_to_cwd(&dir.path().join("sandbox")),
        helm: find_helm(Some(&tool("helm"))).unwrap(),
        empty: false,
        as_deployed: Some(AsDeployed {
            operator_binary: PathBuf::from(env!("CARGO_BIN_EXE_omni-operator")),
            values: values.iter().map(|v| (*v).to_string()).collect(),
        }),
    };
    let sandbox = match Sandbox::start(&opts, |_| {}).await {
        Ok(s) => s,
        Err(e) => panic!("the chart's pod did not start: {e:#}"),
    };
    let pod = sandbox.pod.as_ref().unwrap();
    if omni_sandbox::pod::can_isolate() {
        // Where the machine allows it, the chart's read-only root is enforced: nothing the
        // operator does can write outside the emptyDir and Secret volumes it mounts.
        assert!(
            pod.read_only_root(),
            "the chart's pod ran with a writable root"
        );
    } else {
        eprintln!("WARNING: the operator ran WITHOUT a read-only root (no mount namespaces here)");
    }
    (dir, sandbox)
}

async fn every_sample_becomes_ready(sandbox: &Sandbox) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = status::rows(&sandbox.client).await.unwrap();
        // Every applied sample is listed, and every row Ready: the sets' generated objects
        // are rows of their own.
        let listed = |(kind, name): &(String, String)| {
            rows.iter().any(|r| &r.kind == kind && &r.name == name)
        };
        if sandbox.applied.iter().all(listed) && rows.iter().all(status::Row::is_ready) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let log = sandbox
                .pod
                .as_ref()
                .map(omni_sandbox::pod::Pod::output)
                .unwrap_or_default();
            let tail: String = log
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!("{}\noperator log tail:\n{tail}", status::render(&rows));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_default_values_every_sample_becomes_ready_and_the_webhook_rejects_bad_objects() {
    let (_dir, sandbox) = start(&[]).await;
    every_sample_becomes_ready(&sandbox).await;

    // A rule only the webhook enforces (a patch with both file and inline content).
    let clusters: kube::Api<omni_operator::api::OmniCluster> =
        kube::Api::namespaced(sandbox.client.clone(), omni_sandbox::NAMESPACE);
    let bad: omni_operator::api::OmniCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": "bad", "namespace": omni_sandbox::NAMESPACE},
        "spec": {
            "connectionRef": {"name": "omni-sample"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "patches": [{"name": "both", "file": "patches/a.yaml", "inline": {"machine": {}}}],
        },
    }))
    .unwrap();
    let err = clusters
        .create(&kube::api::PostParams::default(), &bad)
        .await
        .err()
        .unwrap_or_else(|| panic!("the webhook let a bad OmniCluster through"));
    assert!(
        err.to_string()
            .contains("patch must not set both file and inline"),
        "{err}"
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_every_sample_becomes_ready() {
    // The chart's ClusterRole and ClusterRoleBinding are what authorise the operator here.
    let (_dir, sandbox) = start(&["watch.clusterWide=true"]).await;
    every_sample_becomes_ready(&sandbox).await;
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_webhook_every_sample_becomes_ready() {
    let (_dir, sandbox) = start(&["webhook.enabled=false"]).await;
    every_sample_becomes_ready(&sandbox).await;
    sandbox.shutdown().await;
}

/// The Lease holder's identity (`<pod name>_<random>`), if any.
async fn lease_holder(sandbox: &Sandbox) -> String {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(sandbox.client.clone(), omni_sandbox::NAMESPACE);
    leases
        .get_opt(omni_operator::process::leader::LEASE_NAME)
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

/// A rolling restart: a second pod becomes Ready as a standby while the first leads (the
/// Deployment's rollout waits for that), the first gets SIGTERM and exits within its grace
/// period, and only then does the second take the Lease; the samples stay Ready and the Helm
/// release is left deployed, not `pending-*`. Before standby replicas were Ready, the second
/// pod never became Ready and the rollout could not proceed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_hands_the_lease_over_without_two_leaders() {
    let (_dir, mut sandbox) = start(&[]).await;
    every_sample_becomes_ready(&sandbox).await;
    let first_holder = lease_holder(&sandbox).await;
    assert!(
        first_holder.starts_with("omni-cluster-operator-controller-manager-0_"),
        "{first_holder}"
    );

    let mut second = match sandbox.start_another_pod().await {
        Ok(p) => p,
        Err(e) => panic!("the second pod never became Ready beside the leader: {e:#}"),
    };
    assert_eq!(
        lease_holder(&sandbox).await,
        first_holder,
        "the standby took the Lease from a live leader"
    );

    let mut first = sandbox.pod.take().unwrap();
    let terminated_at = jiff::Timestamp::now();
    assert!(
        first.terminate().await.unwrap(),
        "the first pod outlived its grace period:\n{}",
        first.output()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !lease_holder(&sandbox)
        .await
        .starts_with("omni-cluster-operator-controller-manager-1_")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second pod never took the Lease:\n{}",
            second.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The second pod led only after the first was told to stop. It logs the acquisition
    // after its Lease write returns, so the line may follow the Lease by a moment.
    let acquisition = |output: &str| {
        output
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["fields"]["message"] == "acquired leadership")
            .and_then(|v| v["timestamp"].as_str()?.parse::<jiff::Timestamp>().ok())
    };
    let logged_by = tokio::time::Instant::now() + Duration::from_secs(10);
    let acquired = loop {
        if let Some(at) = acquisition(&second.output()) {
            break at;
        }
        assert!(
            tokio::time::Instant::now() < logged_by,
            "no acquisition logged:\n{}",
            second.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        acquired >= terminated_at,
        "the second pod led at {acquired}, before the first was stopped at {terminated_at}"
    );

    every_sample_becomes_ready(&sandbox).await;
    let releases: kube::Api<omni_operator::api::OmniHelmRelease> =
        kube::Api::namespaced(sandbox.client.clone(), omni_sandbox::NAMESPACE);
    for release in releases.list(&Default::default()).await.unwrap() {
        let status = release.status.and_then(|s| s.release_status);
        assert_eq!(status.as_deref(), Some("deployed"));
    }
    assert!(second.terminate().await.unwrap());
    sandbox.shutdown().await;
}
