//! The operator chart as deployed: helm's work directory lands on the emptyDir (the root
//! filesystem is read-only), stale helm sessions do not survive a restart, the pod's grace
//! period outlasts the operator's shutdown drain, and the optional NetworkPolicy admits only
//! the operator's ports.
//!
//! Rendering uses the real helm binary: `$HELM_BIN`, else `<repo>/.cache/test-tools/bin/helm`
//! (installed by `scripts/install-test-tools`).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use omni_operator::cli::run::SHUTDOWN_MAX;
use omni_operator::domain::helm::{Helm, HelmConfig};
use serde_json::Value;
use support::of_kind;

const NAMESPACE: &str = "omni-cluster-operator-system";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// `helm template` of the operator chart with `--set` arguments, as parsed documents.
fn render(sets: &[&str]) -> Vec<Value> {
    support::render_operator_chart(NAMESPACE, sets)
}

fn pod_spec(docs: &[Value]) -> &Value {
    let deployments = of_kind(docs, "Deployment");
    assert_eq!(deployments.len(), 1, "one Deployment");
    &deployments[0]["spec"]["template"]["spec"]
}

fn manager(docs: &[Value]) -> &Value {
    pod_spec(docs)["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("manager container")
}

/// The operator configuration the chart's arguments produce.
fn operator_config(docs: &[Value]) -> omni_operator::cli::run::OperatorConfig {
    support::chart_operator_config(docs, NAMESPACE)
}

/// Mount paths of the manager's emptyDir volumes.
fn empty_dir_mounts(docs: &[Value]) -> Vec<PathBuf> {
    let volumes = pod_spec(docs)["volumes"].as_array().expect("volumes");
    manager(docs)["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .filter(|m| {
            volumes
                .iter()
                .any(|v| v["name"] == m["name"] && v.get("emptyDir").is_some())
        })
        .map(|m| PathBuf::from(m["mountPath"].as_str().expect("mountPath")))
        .collect()
}

#[test]
fn helm_work_dir_lies_inside_a_mounted_empty_dir() {
    for sets in [&[][..], &["helmWorkDir=/tmp/omni-cluster-operator/h"][..]] {
        let docs = render(sets);
        assert_eq!(
            manager(&docs)["securityContext"]["readOnlyRootFilesystem"],
            true,
            "the premise: only mounted volumes are writable"
        );
        let work_dir = operator_config(&docs).helm_work_dir;
        let mounts = empty_dir_mounts(&docs);
        assert!(
            mounts
                .iter()
                .any(|m| work_dir.starts_with(m) && work_dir != *m),
            "helm's work directory {} is not inside an emptyDir mount {mounts:?} ({sets:?})",
            work_dir.display()
        );
    }
}

#[test]
fn the_chart_does_not_set_helm_home_variables_the_operator_ignores() {
    let docs = render(&[]);
    let names: Vec<&str> = manager(&docs)["env"]
        .as_array()
        .map(|env| env.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    for ignored in ["HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"] {
        assert!(!names.contains(&ignored), "{ignored} in {names:?}");
    }
}

#[test]
fn template_root_value_reaches_the_operator() {
    assert_eq!(operator_config(&render(&[])).template_root, None);
    let docs = render(&["templateRoot=/srv/templates"]);
    assert_eq!(
        operator_config(&docs).template_root,
        Some(PathBuf::from("/srv/templates"))
    );
}

#[test]
fn grace_period_outlasts_the_shutdown_drain() {
    let docs = render(&[]);
    let grace = pod_spec(&docs)["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        grace > SHUTDOWN_MAX.as_secs(),
        "the kubelet kills the pod after {grace}s, before the operator's {}s shutdown (drain, \
         Lease release, servers' drain)",
        SHUTDOWN_MAX.as_secs()
    );
    // The schema refuses a grace period the drain cannot fit in.
    let output = Command::new(support::helm_bin())
        .arg("template")
        .arg("omni-cluster-operator")
        .arg(repo().join("charts/omni-cluster-operator"))
        .args(["--namespace", NAMESPACE])
        .args([
            "--set",
            &format!("terminationGracePeriodSeconds={}", SHUTDOWN_MAX.as_secs()),
        ])
        .output()
        .expect("run helm");
    assert!(
        !output.status.success(),
        "a grace period no longer than the shutdown was accepted"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("terminationGracePeriodSeconds"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn policy_ports(policy: &Value) -> Vec<(u64, Option<Value>)> {
    policy["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .map(|rule| {
            let ports = rule["ports"].as_array().expect("ports");
            assert_eq!(ports.len(), 1, "one port per rule");
            (
                ports[0]["port"].as_u64().expect("numeric port"),
                rule.get("from").cloned(),
            )
        })
        .collect()
}

#[test]
fn network_policy_is_off_by_default() {
    assert!(of_kind(&render(&[]), "NetworkPolicy").is_empty());
}

#[test]
fn network_policy_admits_only_the_webhook_metrics_and_probe_ports() {
    let docs = render(&["networkPolicy.enabled=true"]);
    let policies = of_kind(&docs, "NetworkPolicy");
    assert_eq!(policies.len(), 1);
    let policy = policies[0];
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        of_kind(&docs, "Deployment")[0]["spec"]["selector"]["matchLabels"],
        "selects the operator pod"
    );
    assert_eq!(
        policy_ports(policy),
        vec![(9443, None), (8080, None), (8081, None)]
    );

    // Peers restrict the metrics port; switched-off listeners get no rule.
    let docs = render(&[
        "networkPolicy.enabled=true",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
        "webhook.enabled=false",
    ]);
    let policy = of_kind(&docs, "NetworkPolicy")[0];
    assert_eq!(
        policy_ports(policy),
        vec![
            (
                8080,
                Some(
                    serde_json::json!([{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}])
                )
            ),
            (8081, None)
        ]
    );
    let docs = render(&["networkPolicy.enabled=true", "metrics.enabled=false"]);
    let ports: Vec<u64> = policy_ports(of_kind(&docs, "NetworkPolicy")[0])
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(ports, vec![9443, 8081]);
}

/// Files a killed session leaves behind (a workload kubeconfig, a chart) are gone once the
/// driver starts again; the driver's directory is private and holds no shared helm cache.
#[tokio::test]
async fn helm_driver_removes_stale_sessions_at_start_up() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let work_dir = dir.path().join("helm");
    let stale = work_dir.join("sessions/release-killed");
    std::fs::create_dir_all(&stale).expect("mkdir");
    std::fs::write(stale.join("kubeconfig"), b"token: secret").expect("write");
    std::fs::write(stale.join("repositories.yaml"), b"password: secret").expect("write");
    let outside = dir.path().join("keep.txt");
    std::fs::write(&outside, b"not helm's").expect("write");
    // A symlink planted in sessions/ must not lead the clean-up elsewhere.
    std::os::unix::fs::symlink(dir.path(), work_dir.join("sessions/link")).expect("symlink");

    let driver = Helm::new(HelmConfig {
        binary: support::helm_bin(),
        work_dir: work_dir.clone(),
        max_concurrent: 1,
    })
    .await;
    assert!(driver.is_ok(), "helm driver: {:?}", driver.err());
    assert!(!stale.exists(), "a stale session survived the restart");
    let left: Vec<_> = std::fs::read_dir(work_dir.join("sessions"))
        .expect("sessions dir")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(outside.exists(), "the clean-up followed a symlink");
    let mode = std::fs::metadata(work_dir.join("sessions"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "sessions");
    // helm's cache, config and data live in each session, never shared between objects.
    for shared in ["cache", "config", "data"] {
        assert!(!work_dir.join(shared).exists(), "{shared}");
    }
}
