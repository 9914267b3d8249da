//! `omni-operator render`: the binary end to end.

use std::process::Command;

use sha2::{Digest, Sha256};

const MANIFESTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: ignored
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: demo
  namespace: omni
spec:
  connectionRef:
    name: omni
  kubernetes:
    version: v1.32.3
  talos:
    version: v1.9.5
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniControlPlane
metadata:
  name: demo-cp
  namespace: omni
spec:
  clusterRef:
    name: demo
  machines:
    - 11111111-1111-1111-1111-111111111111
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: broken
  namespace: omni
spec:
  connectionRef:
    name: omni
  kubernetes:
    version: v1.32.3
  talos:
    version: v1.9.5
"#;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_omni-operator"))
        .args(args)
        .output()
        .expect("run omni-operator");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prints_each_template_with_its_hash_and_fails_on_render_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, MANIFESTS).expect("write");
    let (code, stdout, stderr) = run(&["render", "-f", path.to_str().expect("utf-8 path")]);
    assert_eq!(
        code, 1,
        "a cluster without control plane fails the run\n{stderr}"
    );
    assert!(
        stderr.contains(
            "OmniCluster omni/broken: expected exactly one OmniControlPlane referencing omni/broken, found 0"
        ),
        "{stderr}"
    );
    let (header, yaml) = stdout.split_once('\n').expect("header line");
    let hash = hex::encode(Sha256::digest(yaml.as_bytes()));
    assert_eq!(header, format!("# OmniCluster omni/demo (hash {hash})"));
    assert_eq!(
        yaml,
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\n---\nkind: ControlPlane\nmachines:\n  - 11111111-1111-1111-1111-111111111111\n"
    );
}

#[test]
fn no_cluster_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("empty.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
    )
    .expect("write");
    let (code, _, stderr) = run(&["render", "-f", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no OmniCluster"), "{stderr}");
}

#[test]
fn validate_resolves_files_under_the_template_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("patches")).expect("mkdir");
    std::fs::write(
        dir.path().join("patches/ok.yaml"),
        "machine:\n  network: {}\n",
    )
    .expect("write");
    let manifests = MANIFESTS
        .split("---\napiVersion: omni.texashpc.com/v1alpha1\nkind: OmniCluster\nmetadata:\n  name: broken")
        .next()
        .expect("first part")
        .replace(
            "  talos:\n    version: v1.9.5\n",
            "  talos:\n    version: v1.9.5\n  patches:\n    - file: patches/ok.yaml\n    - file: patches/missing.yaml\n",
        );
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, manifests).expect("write");
    let root = dir.path().to_str().expect("utf-8 path");
    let (code, stdout, stderr) = run(&[
        "render",
        "--validate",
        "--template-root",
        root,
        "-f",
        path.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("patches[1].file: file \"patches/missing.yaml\" not found"),
        "{stderr}"
    );
    assert!(!stderr.contains("patches/ok.yaml"), "{stderr}");
}

#[test]
fn validate_confines_files_to_the_current_directory_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("patches")).expect("mkdir");
    std::fs::write(
        checkout.join("patches/ok.yaml"),
        "machine:\n  network: {}\n",
    )
    .expect("write");
    let secret = dir.path().join("secret.yaml");
    std::fs::write(&secret, "machine:\n  network: {}\n").expect("write");
    let manifests = MANIFESTS
        .split("---\napiVersion: omni.texashpc.com/v1alpha1\nkind: OmniCluster\nmetadata:\n  name: broken")
        .next()
        .expect("first part")
        .replace(
            "  talos:\n    version: v1.9.5\n",
            &format!(
                "  talos:\n    version: v1.9.5\n  patches:\n    - file: patches/ok.yaml\n    - file: {}\n",
                secret.display()
            ),
        );
    let path = checkout.join("cluster.yaml");
    std::fs::write(&path, manifests).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_omni-operator"))
        .args(["render", "--validate", "-f", "cluster.yaml"])
        .current_dir(&checkout)
        .output()
        .expect("run omni-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "patches[1].file: file \"{}\" is outside the template root",
            secret.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("patches/ok.yaml"), "{stderr}");
}

/// `render` reads what `validate` reads: a directory's manifest files and `kind: List`.
#[test]
fn directories_and_lists_are_read_like_validate_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut parts = MANIFESTS.split("---\n");
    let _ignored = parts.next();
    let cluster = parts.next().expect("cluster");
    let control_plane = parts.next().expect("control plane");
    std::fs::write(dir.path().join("a-cluster.yaml"), cluster).expect("write");
    let indent = |doc: &str| {
        doc.trim()
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{}{l}\n", if i == 0 { "  - " } else { "    " }))
            .collect::<String>()
    };
    std::fs::write(
        dir.path().join("b-children.yml"),
        format!(
            "apiVersion: v1\nkind: List\nitems:\n{}",
            indent(control_plane)
        ),
    )
    .expect("write");
    std::fs::write(dir.path().join("notes.txt"), "not: [yaml").expect("write");
    let (code, stdout, stderr) = run(&["render", "-f", dir.path().to_str().expect("utf-8 path")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("# OmniCluster omni/demo (hash "),
        "{stdout}"
    );
    assert!(stdout.contains("kind: ControlPlane\n"), "{stdout}");
}

#[test]
fn yaml_errors_name_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, "a: 1\n---\nkind: OmniCluster\nkind: again\n").expect("write");
    let (code, _, stderr) = run(&["render", "-f", path.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!(
            "{}:4:1: invalid YAML: duplicate mapping key `kind` is not allowed here",
            path.display()
        )),
        "{stderr}"
    );
}
