//! `omni-operator validate` as users and CI scripts run it: exit status, `FILE:LINE:COL` lines,
//! every problem in one run, Lists, checks across objects, the json and github formats, stdin,
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
    run_validate(&[], files)
}

/// `validate` with extra flags (`--partial`, `--format json`, ...).
fn run_validate(flags: &[&str], files: &[&Path]) -> Output {
    let mut cmd = bin();
    cmd.arg("validate").args(flags);
    for f in files {
        cmd.arg("-f").arg(f);
    }
    cmd.output().unwrap()
}

/// `validate ARGS` with `stdin` on its standard input.
fn validate_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = bin()
        .arg("validate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
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
fn problems_are_reported_one_per_line_with_their_positions_and_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.yaml", BAD);
    // BAD's children name an OmniCluster that is not in it: --partial.
    let out = run_validate(&["--partial"], &[&bad]);
    assert_eq!(out.status.code(), Some(1));
    let f = bad.display().to_string();
    let problems = lines(&out.stdout);
    let namespace = r#"spec.contextNamespace: Invalid value: "Apps": spec.contextNamespace in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#;
    let masters = "spec.serviceAccount.groups[0]: Forbidden: system:masters requires serviceAccount.allowClusterAdmin: true";
    let ttl = r#"spec.ttl: Invalid value: "1d": ttl must be a duration such as 24h, 1h30m or 90s"#;
    let machines = r#"spec.machines: Invalid value: "not-a-list": spec.machines in body must be of type array: "string""#;
    let unknown = r#"kind: Unsupported value: "OmniGadget": supported values: "OmniConnection", "OmniCluster""#;
    assert_eq!(problems.len(), 5, "{problems:?}");
    // Line and column of the field each problem is about, top to bottom.
    assert_eq!(
        problems[..4],
        [
            format!("{f}:10:3: OmniKubeconfigExport/edge-kc: {namespace}"),
            format!("{f}:13:14: OmniKubeconfigExport/edge-kc: {masters}"),
            format!("{f}:14:3: OmniKubeconfigExport/edge-kc: {ttl}"),
            format!("{f}:23:3: OmniWorkers/edge-workers: {machines}"),
        ]
    );
    assert!(
        problems[4].starts_with(&format!("{f}:26:1: OmniGadget/g: {unknown}")),
        "{}",
        problems[4]
    );
    let stderr = lines(&out.stderr);
    assert!(
        stderr.last().unwrap().contains("5 problem(s)"),
        "{stderr:?}"
    );
}

/// The "done when" of the issue: three problems in two documents — one the schema refuses,
/// which used to hide the admission rules' findings until it was fixed — come out in one run,
/// each with the line it is on.
#[test]
fn three_problems_in_two_documents_come_out_in_one_run_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniKubeconfigExport
metadata:
  name: edge-kc
spec:
  clusterRef: {name: edge}
  targetSecretRef: {name: edge-kc}
  serviceAccount: {user: ci, groups: [ci]}
  ttl: 1d
  deletionPolicy: Keep
---
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: Edge
spec:
  connectionRef: {name: omni}
  kubernetes: {version: v1.35.0}
  talos: {version: v1.13.2}
";
    let file = write(dir.path(), "three.yaml", text);
    let out = run_validate(&["--partial"], &[&file]);
    assert_eq!(out.status.code(), Some(1));
    let f = file.display();
    let problems = lines(&out.stdout);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with(&format!(
        "{f}:9:3: OmniKubeconfigExport/edge-kc: spec.ttl: "
    )));
    assert!(problems[1].starts_with(&format!(
        "{f}:10:3: OmniKubeconfigExport/edge-kc: spec.deletionPolicy: Unsupported value: \"Keep\""
    )));
    assert!(problems[2].starts_with(&format!(
        "{f}:15:3: OmniCluster/Edge: metadata.name: Invalid value: \"Edge\": a lowercase RFC 1123 subdomain"
    )));
}

/// One rule, one line: the CRD's CEL rule and the admission rule both forbid `orphan` with
/// `destroyMachines`; the problem is reported once, in the API server's words.
#[test]
fn a_rule_the_schema_and_admission_share_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{CLUSTER}  deletePolicy:\n    orphan: true\n    destroyMachines: true\n---\n{CONTROL_PLANE}"
    );
    let file = write(dir.path(), "policy.yaml", &text);
    let out = validate(&[&file]);
    assert_eq!(
        lines(&out.stdout),
        [format!(
            r#"{}:9:3: OmniCluster/edge: spec.deletePolicy: Invalid value: "object": orphan and destroyMachines cannot both be true"#,
            file.display()
        )]
    );
}

const CLUSTER: &str = "\
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: edge
spec:
  connectionRef: {name: omni}
  kubernetes: {version: v1.35.0}
  talos: {version: v1.13.2}
";

const CONTROL_PLANE: &str = "\
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniControlPlane
metadata:
  name: edge-cp
spec:
  clusterRef: {name: edge}
  machines: [11111111-1111-1111-1111-111111111111]
";

#[test]
fn a_list_is_expanded_and_its_items_validated() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: unrelated}
  - apiVersion: omni.texashpc.com/v1alpha1
    kind: OmniWorkers
    metadata: {name: w}
    spec:
      clusterRef: {name: edge}
      machines: not-a-list
";
    let file = write(dir.path(), "list.yaml", text);
    let out = run_validate(&["--partial"], &[&file]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        lines(&out.stdout),
        [format!(
            r#"{}:12:7: OmniWorkers/w: spec.machines: Invalid value: "not-a-list": spec.machines in body must be of type array: "string""#,
            file.display()
        )]
    );
    assert!(
        lines(&out.stderr)
            .last()
            .unwrap()
            .starts_with("validated 1 object(s) in 1 file(s), skipped 1 other document(s)"),
        "{:?}",
        lines(&out.stderr)
    );
}

#[test]
fn objects_are_checked_together() {
    let dir = tempfile::tempdir().unwrap();
    let export = GOOD_EXPORT.replace("{name: edge}", "{name: core}");
    let text = format!("{CLUSTER}---\n{export}---\n{CLUSTER}");
    let file = write(dir.path(), "together.yaml", &text);
    let out = validate(&[&file]);
    assert_eq!(out.status.code(), Some(1));
    let f = file.display();
    let no_cp = "expected exactly one OmniControlPlane referencing default/edge, found 0: add an OmniControlPlane with spec.clusterRef.name: edge (pass --partial if it is defined elsewhere)";
    assert_eq!(
        lines(&out.stdout),
        [
            format!("{f}:1:1: OmniCluster/edge: {no_cp}"),
            format!(
                r#"{f}:15:16: OmniKubeconfigExport/edge-kc: spec.clusterRef.name: Invalid value: "core": no OmniCluster "core" in namespace default among the given manifests (pass --partial if it is defined elsewhere)"#
            ),
            format!(
                r#"{f}:24:3: OmniCluster/edge: metadata.name: Duplicate value: "edge": OmniCluster default/edge is already defined at {f}:4:3; the later one would replace it"#
            ),
        ]
    );
    // With --partial, references out of the input are someone else's; duplicates are not.
    let out = run_validate(&["--partial"], &[&file]);
    let problems = lines(&out.stdout);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("Duplicate value"), "{problems:?}");
    // A complete cluster passes.
    let complete = write(
        dir.path(),
        "complete.yaml",
        &format!("{CLUSTER}---\n{CONTROL_PLANE}---\n{GOOD_EXPORT}"),
    );
    let out = validate(&[&complete]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

const GOOD_EXPORT: &str = "\
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniKubeconfigExport
metadata:
  name: edge-kc
spec:
  clusterRef: {name: edge}
  targetSecretRef: {name: edge-kc}
  serviceAccount: {user: ci, groups: [ci]}
  ttl: 24h
  deletionPolicy: Delete
";

#[test]
fn json_and_github_formats_for_ci() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.yaml", BAD);
    let out = run_validate(&["--partial", "--format", "json"], &[&bad]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["summary"]["errors"], 5);
    assert_eq!(report["summary"]["objects"], 3);
    let first = &report["findings"][0];
    assert_eq!(first["severity"], "error");
    assert_eq!(first["file"], bad.display().to_string());
    assert_eq!(
        (first["line"].as_u64(), first["column"].as_u64()),
        (Some(10), Some(3))
    );
    assert_eq!(first["kind"], "OmniKubeconfigExport");
    assert_eq!(first["name"], "edge-kc");
    assert_eq!(first["field"], "spec.contextNamespace");
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid value: \"Apps\""),
        "{first}"
    );

    let out = run_validate(&["--partial", "--format", "github"], &[&bad]);
    assert_eq!(out.status.code(), Some(1));
    let annotations = lines(&out.stdout);
    assert_eq!(annotations.len(), 5, "{annotations:?}");
    assert_eq!(
        annotations[2],
        format!(
            r#"::error file={},line=14,col=3,title=OmniKubeconfigExport/edge-kc::spec.ttl: Invalid value: "1d": ttl must be a duration such as 24h, 1h30m or 90s"#,
            bad.display()
        )
    );
}

/// The Flux recipe in docs/gitops.md: `kustomize build | envsubst | omni-operator validate
/// -f -`, whose positions are lines of the built stream.
#[test]
fn substituted_manifests_validate_from_stdin() {
    let built = format!("{CLUSTER}---\n{CONTROL_PLANE}").replace(
        "kubernetes: {version: v1.35.0}",
        "kubernetes:\n    version: ${KUBERNETES_VERSION}",
    );
    let substituted = built.replace("${KUBERNETES_VERSION}", "v1.35.0");
    let out = validate_stdin(&["-f", "-"], &substituted);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Unsubstituted, the variable is refused where it stands.
    let out = validate_stdin(&["-f", "-"], &built);
    assert_eq!(out.status.code(), Some(1));
    let problems = lines(&out.stdout);
    assert!(
        problems[0].starts_with("-:8:5: OmniCluster/edge: spec.kubernetes.version: Invalid value: \"${KUBERNETES_VERSION}\""),
        "{problems:?}"
    );
}

#[test]
fn yaml_errors_say_what_is_wrong_without_library_advice() {
    let dir = tempfile::tempdir().unwrap();
    let text = CLUSTER.replace("spec:\n", "spec:\n  talos: {version: v1.13.2}\n");
    let file = write(dir.path(), "dup.yaml", &text);
    let out = validate(&[&file]);
    assert_eq!(out.status.code(), Some(1));
    let problems = lines(&out.stdout);
    assert_eq!(
        problems,
        [format!(
            "{}:9:3: invalid YAML: duplicate mapping key `talos` is not allowed here",
            file.display()
        )]
    );
}

#[test]
fn a_value_outside_a_schema_enum_does_not_hide_the_admission_problems() {
    let dir = tempfile::tempdir().unwrap();
    let export = BAD.split("---\n").nth(1).unwrap().replace(
        "deletionPolicy: Delete",
        "deletionPolicy: Keep\n  format: argocd",
    );
    let file = write(dir.path(), "enums.yaml", &export);
    let out = run_validate(&["--partial"], &[&file]);
    assert_eq!(out.status.code(), Some(1));
    let subject = format!("{}", file.display());
    assert_eq!(
        lines(&out.stdout),
        [
            format!(
                r#"{subject}:8:3: OmniKubeconfigExport/edge-kc: spec.contextNamespace: Invalid value: "Apps": spec.contextNamespace in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#
            ),
            format!(
                "{subject}:11:14: OmniKubeconfigExport/edge-kc: spec.serviceAccount.groups[0]: Forbidden: system:masters requires serviceAccount.allowClusterAdmin: true"
            ),
            format!(
                r#"{subject}:12:3: OmniKubeconfigExport/edge-kc: spec.ttl: Invalid value: "1d": ttl must be a duration such as 24h, 1h30m or 90s"#
            ),
            format!(
                r#"{subject}:13:3: OmniKubeconfigExport/edge-kc: spec.deletionPolicy: Unsupported value: "Keep": supported values: "Delete", "Orphan""#
            ),
            format!(
                r#"{subject}:14:3: OmniKubeconfigExport/edge-kc: spec.format: Unsupported value: "argocd": supported values: "Kubeconfig", "ArgoCDCluster", "FluxValue", "ClusterAPI""#
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
            "{}:8:1: OmniConnection/omni: warning: insecureSkipTLSVerify disables Omni endpoint TLS certificate verification",
            file.display()
        )
    );
    assert!(err[1].contains("1 warning(s)"));
}

#[test]
fn several_files_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.yaml", GOOD);
    let good = good.to_str().unwrap();
    let out = validate_stdin(&["-f", good, "-f", "-"], BAD);
    assert_eq!(out.status.code(), Some(1));
    let problems = lines(&out.stdout);
    // BAD's children name an OmniCluster edge that is in neither input.
    assert_eq!(problems.len(), 7, "{problems:?}");
    assert!(problems.iter().all(|p| p.starts_with("-:")), "{problems:?}");
    assert!(lines(&out.stderr).last().unwrap().contains("in 2 file(s)"));
}

#[test]
fn yaml_syntax_errors_name_file_and_line() {
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
        problems[0].starts_with(&format!("{}:20:7: invalid YAML: ", file.display())),
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
        summary.starts_with("validated 13 object(s) in 11 file(s)"),
        "{summary}"
    );

    // A bad file in a directory is reported under its own path; other files are ignored.
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "a.yaml", GOOD);
    let bad = write(tmp.path(), "b.yml", BAD);
    write(tmp.path(), "README.md", "not yaml: [");
    let out = run_validate(&["--partial"], &[tmp.path()]);
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
    let out = run_validate(&["--partial"], &[&path]);
    assert_eq!(out.status.code(), Some(1));
    let label = path.display();
    assert_eq!(
        lines(&out.stdout),
        vec![
            format!(
                r#"{label}:9:3: OmniCluster/edge: spec.syncInterval: Invalid value: "1s": syncInterval must be 0 (the default, 5m) or at least 10s"#
            ),
            format!(
                r#"{label}:11:7: OmniCluster/edge: spec.patches[0].file: Invalid value: "../../etc/shadow": must not contain ".." segments: files are read only inside the operator's template root"#
            ),
            format!(
                r#"{label}:22:3: OmniHelmRelease/app: spec.timeout: Invalid value: "2h": timeout must be at most 1h"#
            ),
        ]
    );
    let stderr = lines(&out.stderr);
    assert!(
        stderr.iter().any(|l| l.starts_with(&format!(
            r#"{label}:12:7: OmniCluster/edge: warning: spec.patches[1].file: "/templates/cni.yaml" is an absolute path"#
        ))),
        "{stderr:?}"
    );
}

/// `spec.deletionPolicy` of an export defaults to `Delete` (the original required it).
#[test]
fn an_export_without_a_deletion_policy_is_valid_and_deletes_its_secret() {
    let dir = tempfile::tempdir().unwrap();
    let export = GOOD_EXPORT.replace("  deletionPolicy: Delete\n", "");
    let file = write(dir.path(), "export.yaml", &export);
    let out = run_validate(&["--partial"], &[&file]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let value: serde_json::Value = serde_saphyr::from_str(&export).unwrap();
    let typed: omni_operator::api::OmniKubeconfigExport = serde_json::from_value(value).unwrap();
    assert_eq!(
        typed.spec.deletion_policy,
        omni_operator::api::common::DeletionPolicy::Delete
    );
}

/// A `dependsOn` cycle spans releases: each release on it is reported at its entry that
/// closes the cycle, naming the cycle; with the cycle broken the releases pass.
#[test]
fn a_dependency_cycle_among_releases_is_named_on_each_release() {
    let dir = tempfile::tempdir().unwrap();
    let release = |name: &str, depends_on: &str| {
        format!(
            "apiVersion: omni.texashpc.com/v1alpha1
kind: OmniHelmRelease
metadata:
  name: {name}
spec:
  clusterRef: {{name: edge}}
  kubeconfigSecretRef: {{name: edge-kubeconfig}}
  namespace: apps
  chart: {{repository: https://charts.example.com, chart: demo, version: 1.0.0}}
  dependsOn: [{depends_on}]
"
        )
    };
    let text = format!(
        "{}---\n{}",
        release("a", "{name: b}"),
        release("b", "{name: a}")
    );
    let file = write(dir.path(), "cycle.yaml", &text);
    let out = run_validate(&["--partial"], &[&file]);
    assert_eq!(out.status.code(), Some(1));
    let f = file.display();
    assert_eq!(
        lines(&out.stdout),
        [
            format!(
                r#"{f}:10:16: OmniHelmRelease/a: spec.dependsOn[0].name: Invalid value: "b": dependency cycle a → b → a"#
            ),
            format!(
                r#"{f}:21:16: OmniHelmRelease/b: spec.dependsOn[0].name: Invalid value: "a": dependency cycle b → a → b"#
            ),
        ]
    );
    let chain = write(
        dir.path(),
        "chain.yaml",
        &format!("{}---\n{}", release("a", "{name: b}"), release("b", "")),
    );
    let out = run_validate(&["--partial"], &[&chain]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `spec.chart.valuesFrom` is checked offline: an unknown kind (the CRD schema's enum), a blank
/// name and an unusable target path, each at its entry.
#[test]
fn values_from_entries_are_checked_offline_at_their_index() {
    let dir = tempfile::tempdir().unwrap();
    let sources = [
        "{kind: Namespace, name: defaults}",
        "{kind: ConfigMap, name: ' '}",
        "{kind: Secret, name: tokens, valuesKey: token, targetPath: 'a..b'}",
    ];
    let text = format!(
        "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniHelmRelease\nmetadata: {{name: valued}}\n\
         spec:\n  clusterRef: {{name: edge}}\n  kubeconfigSecretRef: {{name: edge-kc}}\n  chart: \
         {{repository: https://charts.example.com/, chart: app, version: 1.0.0, valuesFrom: [{}]}}\n",
        sources.join(", ")
    );
    let out = run_validate(&["--partial"], &[&write(dir.path(), "valued.yaml", &text)]);
    let found = lines(&out.stdout);
    for expected in [
        r#"OmniHelmRelease/valued: spec.chart.valuesFrom[0].kind: Unsupported value: "Namespace""#,
        "OmniHelmRelease/valued: spec.chart.valuesFrom[1].name: Required value",
        r#"OmniHelmRelease/valued: spec.chart.valuesFrom[2].targetPath: Invalid value: "a..b""#,
    ] {
        assert!(
            found.iter().any(|l| l.contains(expected)),
            "{expected} not in {found:#?}"
        );
    }
    assert_eq!(out.status.code(), Some(1));
}
