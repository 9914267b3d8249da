//! The real kubectl 1.35 meets kube-sim where it validates: `apply -f` of a `kind: List` (what
//! `kubectl get -o yaml` writes; kubectl validates List items client-side against
//! `/openapi/v2`, fetched as protobuf), and server-side field validation (`--validate=strict`,
//! kubectl's default, `warn` and `false`). Needs `scripts/install-test-tools` (or
//! `KUBECTL_BIN`).

use crate::tools;

use std::path::{Path, PathBuf};

use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::{KubeSim, RunningKubeSim};
use serde_json::Value;

const NS: &str = "omni-cluster-operator-system";

struct Cluster {
    sim: RunningKubeSim,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// A kube-sim with our CRDs established and the samples' namespace.
    async fn with_crds() -> Self {
        let sim = KubeSim::builder().start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        Kubeconfig::new(&sim.base_url, "admin", Credential::Token("admin".into()))
            .write(&kubeconfig)
            .unwrap();
        let cluster = Cluster {
            sim,
            kubeconfig,
            dir,
        };
        let crds = repo_path("charts/omni-cluster-operator-crds/crds");
        cluster.kubectl(&["apply", "-f", &crds]).await.ok();
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/omniclusters.omni.texashpc.com",
                "crd/omnihelmreleases.omni.texashpc.com",
            ])
            .await
            .ok();
        cluster.kubectl(&["create", "namespace", NS]).await.ok();
        cluster
    }

    async fn kubectl(&self, args: &[&str]) -> tools::Run {
        tools::run("kubectl", &self.kubeconfig, self.dir.path(), args).await
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn stored(&self, plural: &str, name: &str) -> Option<Value> {
        self.sim
            .store()
            .get_object("omni.texashpc.com", plural, Some(NS), name)
    }
}

fn repo_path(p: &str) -> String {
    tools::repo_root().join(p).to_str().unwrap().to_owned()
}

/// The sample OmniHelmRelease with `values` one level too high (`spec.values` instead of
/// `spec.chart.values`), the mistake the issue reports.
fn misplaced_values() -> String {
    let sample = std::fs::read_to_string(Path::new(&repo_path(
        "config/samples/07-omnihelmrelease.yaml",
    )))
    .unwrap();
    format!("{}\n  values:\n    replicas: 3\n", sample.trim_end())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_replace_and_diff_take_the_list_that_get_o_yaml_writes() {
    let cluster = Cluster::with_crds().await;
    cluster
        .kubectl(&["apply", "-f", &repo_path("config/samples")])
        .await
        .ok();
    // Each step takes a fresh export: a file with stale resourceVersions conflicts, as on a
    // real server.
    let export = |name: &'static str| {
        let cluster = &cluster;
        async move {
            let exported = cluster
                .kubectl(&["get", "omni", "-n", NS, "-o", "yaml"])
                .await;
            assert!(
                exported.ok().starts_with("apiVersion: v1\nitems:"),
                "{}",
                exported.stdout
            );
            assert!(exported.stdout.contains("kind: List"));
            cluster.write(name, &exported.stdout)
        }
    };

    let applied = cluster
        .kubectl(&["apply", "-f", &export("apply.yaml").await])
        .await;
    let text = applied.ok();
    assert!(
        text.contains("omnicluster.omni.texashpc.com/edge-sample configured"),
        "{text}"
    );
    let replaced = cluster
        .kubectl(&["replace", "-f", &export("replace.yaml").await])
        .await;
    assert!(replaced.ok().contains("replaced"), "{}", replaced.stdout);
    // diff exits 1 when it finds differences (the last-applied annotation would change) and
    // above 1 on errors.
    let diff = cluster
        .kubectl(&["diff", "-f", &export("diff.yaml").await])
        .await;
    assert!(diff.code <= 1 && diff.stderr.is_empty(), "{diff:?}");
    assert!(cluster.stored("omniclusters", "edge-sample").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_validates_list_items_against_openapi_v2() {
    let cluster = Cluster::with_crds().await;
    let item = misplaced_values()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    let item = item.replacen("  apiVersion", "- apiVersion", 1);
    let list = cluster.write(
        "list.yaml",
        &format!("apiVersion: v1\nkind: List\nitems:\n{item}\n"),
    );
    let refused = cluster.kubectl(&["apply", "-f", &list]).await;
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stderr.contains("unknown field \"values\""),
        "{}",
        refused.stderr
    );
    assert!(
        cluster
            .stored("omnihelmreleases", "edge-sample-metrics-server")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_strict_validation_refuses_an_unknown_field_warn_warns_and_false_prunes() {
    let cluster = Cluster::with_crds().await;
    let file = cluster.write("release.yaml", &misplaced_values());

    let strict = cluster.kubectl(&["apply", "-f", &file]).await;
    assert_ne!(strict.code, 0);
    assert!(
        strict.stderr.contains(
            "OmniHelmRelease in version \"v1alpha1\" cannot be handled as a OmniHelmRelease: \
             strict decoding error: unknown field \"spec.values\""
        ),
        "{}",
        strict.stderr
    );
    assert!(
        cluster
            .stored("omnihelmreleases", "edge-sample-metrics-server")
            .is_none()
    );

    let warned = cluster
        .kubectl(&["apply", "--validate=warn", "-f", &file])
        .await;
    warned.ok();
    assert!(
        warned
            .stderr
            .contains("Warning: unknown field \"spec.values\""),
        "{}",
        warned.stderr
    );
    let stored = cluster
        .stored("omnihelmreleases", "edge-sample-metrics-server")
        .unwrap();
    assert!(stored["spec"].get("values").is_none(), "{stored}");
    assert_eq!(stored["spec"]["chart"]["values"]["replicas"], 2);

    // An existing object is patched: the unknown field is refused there too.
    let patch = cluster.kubectl(&["apply", "-f", &file]).await;
    assert_ne!(patch.code, 0);
    assert!(
        patch
            .stderr
            .contains("strict decoding error: unknown field \"spec.values\""),
        "{}",
        patch.stderr
    );
    let ignored = cluster
        .kubectl(&["replace", "--validate=false", "-f", &file])
        .await;
    ignored.ok();
    assert!(!ignored.stderr.contains("Warning"), "{}", ignored.stderr);
}
