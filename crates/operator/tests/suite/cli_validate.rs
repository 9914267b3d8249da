//! `omni-operator validate` as users and CI scripts run it: exit status, line format, stdin,
//! skipped foreign documents and graceful decode failures.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_omni-operator"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn validate(files: &[&Path]) -> Output {
    let mut cmd = bin();
    cmd.arg("validate");
    for f in files {
        cmd.arg("-f").arg(f);
    }
    cmd.output().unwrap()
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(String::from)
        .collect()
}

const GOOD: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: omni-service-account
stringData:
  serviceAccountKey: not-checked
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniConnection
metadata:
  name: omni
spec:
  endpoint: https://omni.example.com
  auth:
    serviceAccountSecretRef:
      name: omni-service-account
";

const BAD: &str = "\
# a comment-only document does not count
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniKubeconfigExport
metadata:
  name: edge-kc
spec:
  clusterRef: {name: edge}
  targetSecretRef: {name: edge-kc}
  contextNamespace: Apps
  serviceAccount:
    user: automation
    groups: [system:masters]
  ttl: 1d
  deletionPolicy: Delete
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniWorkers
metadata:
  name: edge-workers
spec:
  clusterRef: {name: edge}
  machines: not-a-list
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniGadget
metadata:
  name: g
spec: {}
";

#[test]
fn good_files_exit_zero_with_only_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.yaml", GOOD);
    let out = validate(&[&good]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "nothing on stdout on success");
    let err = lines(&out.stderr);
    assert_eq!(err.len(), 1, "{err:?}");
    assert!(
        err[0].starts_with(
            "validated 1 object(s) in 1 file(s), skipped 1 other document(s): 0 problem(s)"
        ),
        "{err:?}"
    );
}

#[test]
fn problems_are_reported_one_per_line_and_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.yaml", BAD);
    let out = validate(&[&bad]);
    assert_eq!(out.status.code(), Some(1));
    let f = bad.display().to_string();
    let problems = lines(&out.stdout);
    let namespace = r#"spec.contextNamespace: Invalid value: "Apps": spec.contextNamespace in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#;
    let masters = "spec.serviceAccount.groups[0]: Forbidden: system:masters requires serviceAccount.allowClusterAdmin: true";
    let ttl = r#"spec.ttl: Invalid value: "1d": ttl must be a duration such as 24h, 1h30m or 90s"#;
    let machines = r#"spec.machines: Invalid value: "not-a-list": spec.machines in body must be of type array: "string""#;
    assert_eq!(
        problems[..4],
        [
            // Schema (API server) findings come first, then the webhook's.
            format!("{f}:1 OmniKubeconfigExport/edge-kc: {namespace}"),
            format!("{f}:1 OmniKubeconfigExport/edge-kc: {masters}"),
            format!("{f}:1 OmniKubeconfigExport/edge-kc: {ttl}"),
            format!("{f}:2 OmniWorkers/edge-workers: {machines}"),
        ]
    );
    assert_eq!(problems.len(), 5, "{problems:?}");
    let unknown = format!("{f}:3 OmniGadget/g: kind: unknown kind \"OmniGadget\"");
    assert!(problems[4].starts_with(&unknown), "{}", problems[4]);
    let stderr = lines(&out.stderr);
    assert!(
        stderr.last().unwrap().contains("5 problem(s)"),
        "{stderr:?}"
    );
}

/// A policy or format outside its enum is refused by the schema, naming the field, as the API
/// server refuses it, with the object's other schema errors. The admission rules are not
/// reached (the API server would not call the webhook, and the typed fields do not decode),
/// so BAD's system:masters and ttl problems are not reported yet.
#[test]
fn a_value_outside_a_schema_enum_is_refused_by_the_schema_alone() {
    let dir = tempfile::tempdir().unwrap();
    let export = BAD.split("---\n").nth(1).unwrap().replace(
        "deletionPolicy: Delete",
        "deletionPolicy: Keep\n  format: argocd",
    );
    let file = write(dir.path(), "enums.yaml", &export);
    let out = validate(&[&file]);
    assert_eq!(out.status.code(), Some(1));
    let subject = format!("{}:1 OmniKubeconfigExport/edge-kc", file.display());
    assert_eq!(
        lines(&out.stdout),
        [
            format!(
                r#"{subject}: spec.contextNamespace: Invalid value: "Apps": spec.contextNamespace in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#
            ),
            format!(
                r#"{subject}: spec.deletionPolicy: Unsupported value: "Keep": supported values: "Delete", "Orphan""#
            ),
            format!(
                r#"{subject}: spec.format: Unsupported value: "argocd": supported values: "Kubeconfig", "ArgoCDCluster", "FluxValue""#
            ),
        ]
    );
}

#[test]
fn warnings_go_to_stderr_and_do_not_fail() {
    let dir = tempfile::tempdir().unwrap();
    let text = GOOD.replace("  endpoint:", "  insecureSkipTLSVerify: true\n  endpoint:");
    let file = write(dir.path(), "warn.yaml", &text);
    let out = validate(&[&file]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let err = lines(&out.stderr);
    assert_eq!(
        err[0],
        format!(
            "{}:2 OmniConnection/omni: warning: insecureSkipTLSVerify disables Omni endpoint TLS certificate verification",
            file.display()
        )
    );
    assert!(err[1].contains("1 warning(s)"));
}

#[test]
fn several_files_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.yaml", GOOD);
    let mut child = bin()
        .args(["validate", "-f"])
        .arg(&good)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(BAD.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let problems = lines(&out.stdout);
    assert_eq!(problems.len(), 5);
    assert!(problems.iter().all(|p| p.starts_with("-:")), "{problems:?}");
    assert!(lines(&out.stderr).last().unwrap().contains("in 2 file(s)"));
}

#[test]
fn yaml_syntax_errors_name_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{GOOD}---\napiVersion: omni.texashpc.com/v1alpha1\nkind: OmniCluster\nspec: [unclosed\n"
    );
    let file = write(dir.path(), "broken.yaml", &text);
    let out = validate(&[&file]);
    assert_eq!(out.status.code(), Some(1));
    let problems = lines(&out.stdout);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("{}:3: invalid YAML: ", file.display())),
        "{problems:?}"
    );
}

#[test]
fn missing_file_is_an_error() {
    let out = validate(&[Path::new("/nonexistent/omni.yaml")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/omni.yaml"));
}

#[test]
fn directories_are_expanded_and_shipped_samples_validate() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/samples");
    let out = validate(&[&dir]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = lines(&out.stderr).last().cloned().unwrap();
    assert!(
        summary.starts_with("validated 10 object(s) in 8 file(s)"),
        "{summary}"
    );

    // A bad file in a directory is reported under its own path; other files are ignored.
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "a.yaml", GOOD);
    let bad = write(tmp.path(), "b.yml", BAD);
    write(tmp.path(), "README.md", "not yaml: [");
    let out = validate(&[tmp.path()]);
    assert_eq!(out.status.code(), Some(1));
    let problems = lines(&out.stdout);
    assert_eq!(problems.len(), 5, "{problems:?}");
    let prefix = bad.display().to_string();
    assert!(
        problems.iter().all(|p| p.starts_with(&prefix)),
        "{problems:?}"
    );
}

#[test]
fn crds_command_prints_and_writes_files() {
    let out = bin().arg("crds").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        omni_operator::api::crds_yaml()
    );
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("crds");
    let out = bin()
        .arg("crds")
        .arg("--output-dir")
        .arg(&target)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut names: Vec<String> = std::fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = omni_operator::api::crds()
        .iter()
        .map(omni_operator::api::crd_file_name)
        .collect();
    want.sort();
    assert_eq!(names, want);
    for crd in omni_operator::api::crds() {
        let text =
            std::fs::read_to_string(target.join(omni_operator::api::crd_file_name(&crd))).unwrap();
        assert_eq!(text, omni_operator::api::crd_yaml(&crd).unwrap());
    }
}

#[test]
fn file_escapes_and_out_of_bound_durations_are_problems_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "bounds.yaml",
        "\
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: edge
spec:
  connectionRef: {name: omni}
  kubernetes: {version: v1.35.0}
  talos: {version: v1.13.2}
  syncInterval: 1s
  patches:
    - file: ../../etc/shadow
    - file: /templates/cni.yaml
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniHelmRelease
metadata:
  name: app
spec:
  clusterRef: {name: edge}
  kubeconfigSecretRef: {name: edge-kc}
  chart: {repository: https://charts.example.com/, chart: app, version: 1.0.0}
  timeout: 2h
",
    );
    let out = validate(&[&path]);
    assert_eq!(out.status.code(), Some(1));
    let label = path.display();
    assert_eq!(
        lines(&out.stdout),
        vec![
            format!(
                r#"{label}:1 OmniCluster/edge: spec.patches[0].file: Invalid value: "../../etc/shadow": must not contain ".." segments: files are read only inside the operator's template root"#
            ),
            format!(
                r#"{label}:1 OmniCluster/edge: spec.syncInterval: Invalid value: "1s": syncInterval must be 0 (the default, 5m) or at least 10s"#
            ),
            format!(
                r#"{label}:2 OmniHelmRelease/app: spec.timeout: Invalid value: "2h": timeout must be at most 1h"#
            ),
        ]
    );
    let stderr = lines(&out.stderr);
    assert!(
        stderr.iter().any(|l| l.starts_with(&format!(
            r#"{label}:1 OmniCluster/edge: warning: spec.patches[1].file: "/templates/cni.yaml" is an absolute path"#
        ))),
        "{stderr:?}"
    );
}
