//! `file:` patches and manifests read only inside the template root the operator's deployment
//! chose (`--template-root`): without one every `file:` entry is refused; `spec.templateRoot`
//! can only narrow it; `..`, absolute paths outside it, symlinks leaving it, devices, FIFOs and
//! files over 1 MiB are refused. The last test runs the whole operator against omni-sim and
//! checks that a patch pointing outside the root never reaches Omni.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use omni_client::template::{FileError, FileResolver, MAX_FILE_BYTES};
use omni_operator::api::OmniCluster;
use omni_operator::domain::render::{NO_TEMPLATE_ROOT, file_resolver};
use serde_json::json;

const PATCH: &[u8] = b"machine:\n  network: {}\n";

/// A temporary directory with `root/` (the deployment's template root, holding
/// `patches/p.yaml`) and `outside/secret.yaml` next to it.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("root/patches")).expect("mkdir root");
        std::fs::create_dir_all(dir.path().join("outside")).expect("mkdir outside");
        std::fs::write(dir.path().join("root/patches/p.yaml"), PATCH).expect("write patch");
        std::fs::write(dir.path().join("outside/secret.yaml"), b"secret: true\n")
            .expect("write secret");
        Tree { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }
}

fn cluster(template_root: Option<&str>) -> OmniCluster {
    let mut spec = json!({
        "connectionRef": {"name": "omni"},
        "kubernetes": {"version": "v1.35.0"},
        "talos": {"version": "v1.13.2"},
    });
    if let Some(root) = template_root {
        spec["templateRoot"] = json!(root);
    }
    serde_json::from_value(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": "demo", "namespace": "omni"},
        "spec": spec,
    }))
    .expect("cluster fixture")
}

fn read(files: &FileResolver, path: &str) -> Result<Vec<u8>, FileError> {
    files.read(path)
}

fn outside_root(path: &str) -> Result<Vec<u8>, FileError> {
    Err(FileError::OutsideRoot(path.to_string()))
}

#[test]
fn without_a_template_root_every_file_entry_is_refused() {
    let tree = Tree::new();
    let files = file_resolver(&cluster(None), None);
    let absolute = tree.root().join("patches/p.yaml");
    for path in [
        "patches/p.yaml",
        absolute.to_str().expect("utf-8"),
        "/etc/hostname",
    ] {
        let err = read(&files, path).expect_err("no root configured");
        assert_eq!(
            err,
            FileError::Disabled {
                path: path.to_string(),
                reason: NO_TEMPLATE_ROOT.to_string()
            }
        );
        assert!(err.to_string().contains("--template-root"), "{err}");
    }
    // spec.templateRoot alone does not enable files: the deployment decides.
    let files = file_resolver(&cluster(Some(tree.root().to_str().expect("utf-8"))), None);
    assert!(matches!(
        read(&files, "patches/p.yaml"),
        Err(FileError::Disabled { .. })
    ));
}

#[test]
fn relative_and_absolute_paths_inside_the_root_are_read() {
    let tree = Tree::new();
    let files = file_resolver(&cluster(None), Some(&tree.root()));
    assert_eq!(read(&files, "patches/p.yaml"), Ok(PATCH.to_vec()));
    let absolute = tree.root().join("patches/p.yaml");
    assert_eq!(
        read(&files, absolute.to_str().expect("utf-8")),
        Ok(PATCH.to_vec())
    );
    assert_eq!(
        read(&files, "patches/missing.yaml"),
        Err(FileError::NotFound("patches/missing.yaml".into()))
    );
}

#[test]
fn parent_segments_are_refused_even_when_they_stay_inside() {
    let tree = Tree::new();
    let files = file_resolver(&cluster(None), Some(&tree.root()));
    for path in [
        "../outside/secret.yaml",
        "patches/../../outside/secret.yaml",
        "patches/../patches/p.yaml",
    ] {
        assert_eq!(read(&files, path), outside_root(path), "{path}");
    }
}

#[test]
fn absolute_paths_outside_the_root_are_refused() {
    let tree = Tree::new();
    let files = file_resolver(&cluster(None), Some(&tree.root()));
    let secret = tree.outside().join("secret.yaml");
    let secret = secret.to_str().expect("utf-8");
    assert_eq!(read(&files, secret), outside_root(secret));
    assert_eq!(read(&files, "/etc/passwd"), outside_root("/etc/passwd"));
}

#[test]
fn symlinks_leaving_the_root_are_refused() {
    let tree = Tree::new();
    let root = tree.root();
    std::os::unix::fs::symlink(tree.outside().join("secret.yaml"), root.join("link.yaml"))
        .expect("file symlink");
    std::os::unix::fs::symlink(tree.outside(), root.join("linked-dir")).expect("dir symlink");
    std::os::unix::fs::symlink("patches/p.yaml", root.join("inside.yaml")).expect("symlink");
    let files = file_resolver(&cluster(None), Some(&root));
    assert_eq!(read(&files, "link.yaml"), outside_root("link.yaml"));
    assert_eq!(
        read(&files, "linked-dir/secret.yaml"),
        outside_root("linked-dir/secret.yaml")
    );
    // A link that stays inside the root is fine.
    assert_eq!(read(&files, "inside.yaml"), Ok(PATCH.to_vec()));
}

#[test]
fn devices_are_refused() {
    // A root that holds a device: `/dev` itself.
    let files = file_resolver(&cluster(None), Some(Path::new("/dev")));
    assert_eq!(
        read(&files, "zero"),
        Err(FileError::NotRegular("zero".into()))
    );
    assert_eq!(
        read(&files, "/dev/zero"),
        Err(FileError::NotRegular("/dev/zero".into()))
    );
    // A symlink in the root pointing at a device leaves the root.
    let tree = Tree::new();
    std::os::unix::fs::symlink("/dev/zero", tree.root().join("zero.yaml")).expect("symlink");
    let files = file_resolver(&cluster(None), Some(&tree.root()));
    assert_eq!(read(&files, "zero.yaml"), outside_root("zero.yaml"));
}

/// Runs `read` on another thread so that a read which blocks fails the test instead of
/// hanging it.
fn read_within(files: FileResolver, path: &str, limit: Duration) -> Result<Vec<u8>, FileError> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_string();
    std::thread::spawn(move || {
        let _ = tx.send(files.read(&path));
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("reading blocked for {limit:?}"))
}

#[test]
fn fifos_are_refused_without_blocking() {
    let tree = Tree::new();
    let fifo = tree.root().join("patches/fifo.yaml");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    let files = file_resolver(&cluster(None), Some(&tree.root()));
    assert_eq!(
        read_within(files, "patches/fifo.yaml", Duration::from_secs(10)),
        Err(FileError::NotRegular("patches/fifo.yaml".into()))
    );
}

#[test]
fn reads_are_capped_at_one_mebibyte() {
    assert_eq!(MAX_FILE_BYTES, 1024 * 1024);
    let tree = Tree::new();
    let cap = usize::try_from(MAX_FILE_BYTES).expect("cap fits usize");
    std::fs::write(tree.root().join("exact.yaml"), vec![b'#'; cap]).expect("write");
    std::fs::write(tree.root().join("big.yaml"), vec![b'#'; cap + 1]).expect("write");
    let files = file_resolver(&cluster(None), Some(&tree.root()));
    assert_eq!(read(&files, "exact.yaml").map(|b| b.len()), Ok(cap));
    assert_eq!(
        read(&files, "big.yaml"),
        Err(FileError::TooLarge {
            path: "big.yaml".into(),
            limit: MAX_FILE_BYTES
        })
    );
}

#[test]
fn spec_template_root_narrows_the_root_but_never_widens_it() {
    let tree = Tree::new();
    let root = tree.root();
    // Relative: a subdirectory of the deployment's root.
    let files = file_resolver(&cluster(Some("patches")), Some(&root));
    assert_eq!(read(&files, "p.yaml"), Ok(PATCH.to_vec()));
    // Absolute inside the root: the compatible form.
    let inside = root.join("patches");
    let files = file_resolver(&cluster(Some(inside.to_str().expect("utf-8"))), Some(&root));
    assert_eq!(read(&files, "p.yaml"), Ok(PATCH.to_vec()));
    // Narrowed: the rest of the root is now out of reach.
    let secret_in_root = root.join("other.yaml");
    std::fs::write(&secret_in_root, b"other: true\n").expect("write");
    assert_eq!(read(&files, "../other.yaml"), outside_root("../other.yaml"));

    std::os::unix::fs::symlink(tree.outside(), root.join("escape")).expect("symlink");
    let outside = tree.outside();
    for widening in [
        "/",
        "..",
        "patches/../..",
        "escape",
        outside.to_str().expect("utf-8"),
    ] {
        let files = file_resolver(&cluster(Some(widening)), Some(&root));
        let err = read(&files, "secret.yaml").expect_err("widening is refused");
        let FileError::Disabled { reason, .. } = &err else {
            panic!("{widening}: expected Disabled, got {err:?}");
        };
        assert!(
            reason.starts_with("spec.templateRoot "),
            "{widening}: {reason}"
        );
    }
    let files = file_resolver(&cluster(Some("/")), Some(&root));
    let message = read(&files, "etc/passwd").expect_err("refused").to_string();
    assert!(
        message.contains("is outside the operator's template root"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// System test: the operator against kube-sim and omni-sim.

mod system {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Api;
    use kube::api::{ListParams, PostParams};
    use omni_operator::api::{OmniConnection, OmniControlPlane};
    use omni_operator::cli::run::{OperatorConfig, run_operator};
    use omni_operator::controllers::Scope;
    use omni_sim::types::ty;
    use omni_sim::{OmniSim, Role};
    use serde::de::DeserializeOwned;
    use support::{condition, wait_for};

    const NS: &str = "files";
    const CP: &str = "11111111-1111-4111-8111-111111111111";

    async fn create<K>(client: &kube::Client, obj: serde_json::Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let typed: K = serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
        Api::<K>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("create: {e}"))
    }

    async fn cluster_with_patch(client: &kube::Client, name: &str, spec_extra: serde_json::Value) {
        let mut spec = json!({
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "syncInterval": "5m",
        });
        for (k, v) in spec_extra.as_object().expect("object") {
            spec[k] = v.clone();
        }
        let _: OmniCluster = create(
            client,
            json!({
                "apiVersion": "omni.texashpc.com/v1alpha1",
                "kind": "OmniCluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": spec,
            }),
        )
        .await;
        let _: OmniControlPlane = create(
            client,
            json!({
                "apiVersion": "omni.texashpc.com/v1alpha1",
                "kind": "OmniControlPlane",
                "metadata": {"name": format!("{name}-cp"), "namespace": NS},
                "spec": {"clusterRef": {"name": name}, "machines": [CP]},
            }),
        )
        .await;
    }

    /// The data of every ConfigPatch omni-sim holds, as text.
    fn config_patches(sim: &omni_sim::RunningOmniSim) -> String {
        sim.list(ty::CONFIG_PATCH)
            .iter()
            .filter_map(|r| r.spec.as_ref())
            .map(|spec| {
                format!(
                    "{}{}\n",
                    String::from_utf8_lossy(&spec.proto_spec),
                    spec.yaml_spec
                )
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_patch_outside_the_root_never_reaches_omni() {
        let tree = Tree::new();
        std::fs::write(
            tree.root().join("patches/inside.yaml"),
            b"machine:\n  network:\n    hostname: inside-marker\n",
        )
        .expect("write inside patch");
        let secret = tree.outside().join("secret.yaml");
        std::fs::write(
            &secret,
            b"machine:\n  network:\n    hostname: outside-marker\n",
        )
        .expect("write outside patch");

        let kube = kube_sim::server::KubeSim::builder()
            .start()
            .await
            .unwrap_or_else(|e| panic!("start kube-sim: {e}"));
        let uri: http::Uri = kube.base_url.parse().unwrap_or_else(|e| panic!("uri: {e}"));
        let client = kube::Client::try_from(kube::Config::new(uri))
            .unwrap_or_else(|e| panic!("client: {e}"));
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in omni_operator::api::crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("create CRD: {e}"));
        }
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("create namespace: {e}"));
        let clusters: Api<OmniCluster> = Api::namespaced(client.clone(), NS);
        let until = tokio::time::Instant::now() + support::WAIT;
        while clusters.list(&ListParams::default()).await.is_err() {
            assert!(
                tokio::time::Instant::now() < until,
                "CRDs never became servable"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let sim = OmniSim::builder()
            // Static machine IDs in these tests are not seeded: let them connect.
            .auto_register_machines(true)
            .status_step(Duration::from_millis(20))
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        let key = sim
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        let _: Secret = create(
            &client,
            json!({
                "metadata": {"name": "omni-service-account", "namespace": NS},
                "stringData": {"serviceAccountKey": key},
            }),
        )
        .await;
        let _: OmniConnection = create(
            &client,
            support::connection_doc(NS, "omni", sim.endpoint(), "omni-service-account"),
        )
        .await;

        let mut config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
        config.template_root = Some(tree.root());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let operator = tokio::spawn(run_operator(config, client.clone(), async move {
            let _ = stopped.await;
        }));

        // Control: a patch inside the root does reach Omni, so the check below can see one.
        cluster_with_patch(
            &client,
            "inside",
            json!({"patches": [{"name": "inside", "file": "patches/inside.yaml"}]}),
        )
        .await;
        wait_for(&clusters, "inside", "synced", |c| {
            condition(c, "Synced").is_some_and(|(s, _, _)| s == "True")
        })
        .await;
        let patches = config_patches(&sim);
        assert!(patches.contains("inside-marker"), "{patches}");

        // An absolute path outside the root, and a spec.templateRoot that tries to widen it.
        let secret_path = secret.to_str().expect("utf-8").to_string();
        cluster_with_patch(
            &client,
            "absolute",
            json!({"patches": [{"name": "escape", "file": secret_path}]}),
        )
        .await;
        cluster_with_patch(
            &client,
            "widened",
            json!({
                "templateRoot": "/",
                "patches": [{"name": "escape", "file": secret_path.trim_start_matches('/')}],
            }),
        )
        .await;
        for (name, why) in [
            ("absolute", "is outside the template root"),
            ("widened", "is outside the operator's template root"),
        ] {
            // The cluster is created before its control plane, so a pass may first report the
            // missing control plane (`MissingTemplate`); the refusal comes once both exist.
            let refused = wait_for(&clusters, name, "refused", |c| {
                condition(c, "Validated")
                    .is_some_and(|(s, reason, _)| s == "False" && reason != "MissingTemplate")
            })
            .await;
            let (_, reason, message) = condition(&refused, "Validated").expect("condition");
            assert_eq!(reason, "ValidationFailed", "{name}");
            assert!(message.contains(why), "{name}: {message}");
            assert!(!message.contains("outside-marker"), "{name}: {message}");
        }
        assert!(!config_patches(&sim).contains("outside-marker"));
        assert!(sim.get(ty::CLUSTER, "absolute").is_none());
        assert!(sim.get(ty::CLUSTER, "widened").is_none());

        let _ = stop.send(());
        let joined = tokio::time::timeout(support::WAIT, operator)
            .await
            .unwrap_or_else(|_| panic!("operator did not stop"));
        assert!(matches!(joined, Ok(Ok(()))), "operator: {joined:?}");
        sim.shutdown().await;
        kube.shutdown();
    }
}
