//! Parsing, emitting and validating cluster templates.

use omni_client::template::{Document, FileResolver, ParseError, Size, Template};

const A: &str = "11111111-1111-1111-1111-111111111111";
const B: &str = "22222222-2222-2222-2222-222222222222";

fn full_template() -> String {
    format!(
        r#"kind: Cluster
name: demo
labels:
  team: infra
kubernetes:
  version: v1.32.3
  manifests:
    - name: ns
      mode: one-time
      inline:
        - apiVersion: v1
          kind: Namespace
          metadata:
            name: gpu
  healthchecks:
    - name: smoke
      job: "apiVersion: batch/v1\nkind: Job\n"
      interval: 1m
talos:
  version: v1.9.5
features:
  enableWorkloadProxy: true
  backupConfiguration:
    interval: 1h
patches:
  - name: cni
    inline:
      cluster:
        network:
          cni:
            name: none
systemExtensions: []
---
kind: ControlPlane
machines:
  - {A}
bootstrapSpec:
  clusterUUID: abc
  snapshot: snap
---
kind: Workers
name: gpu
machineClass:
  name: gpu-class
  size: unlimited
updateStrategy:
  type: Rolling
  rolling: {{}}
---
kind: Workers
machines:
  - {B}
kernelArgs:
  - console=ttyS0
---
kind: Machine
name: {B}
locked: true
install:
  disk: /dev/sda
"#
    )
}

#[test]
fn parses_every_kind_and_keeps_optional_list_presence() {
    let t = Template::parse(&full_template()).expect("parse");
    assert_eq!(t.documents.len(), 5);
    let Document::Cluster(c) = &t.documents[0] else {
        panic!("first document is not the cluster");
    };
    assert_eq!(c.name, "demo");
    assert_eq!(c.system_extensions, Some(vec![]));
    assert_eq!(c.kernel_args, None);
    assert_eq!(c.kubernetes.manifests[0].mode, "one-time");
    let Document::Workers(gpu) = &t.documents[2] else {
        panic!("third document is not workers");
    };
    assert_eq!(
        gpu.machine_class.as_ref().map(|m| m.size.clone()),
        Some(Size::Keyword("unlimited".into()))
    );
    assert!(
        gpu.update_strategy
            .as_ref()
            .is_some_and(|s| s.rolling.is_some())
    );
}

#[test]
fn emitting_and_reparsing_round_trips() {
    let t = Template::parse(&full_template()).expect("parse");
    let yaml = t.to_yaml();
    let again = Template::parse(&yaml).expect("reparse emitted yaml");
    assert_eq!(t, again);
    assert_eq!(again.to_yaml(), yaml, "emission is stable");
    assert!(
        yaml.contains("systemExtensions: []\n"),
        "explicit empty list kept:\n{yaml}"
    );
    assert!(
        yaml.contains("  rolling: {}\n"),
        "empty rolling kept:\n{yaml}"
    );
}

#[test]
fn unknown_fields_and_kinds_are_errors() {
    let err = Template::parse("kind: Cluster\nname: x\nbogus: 1\n").expect_err("unknown field");
    assert!(
        matches!(&err, ParseError::Document { index: 0, kind, message } if kind == "Cluster" && message.contains("bogus")),
        "{err}"
    );
    let err = Template::parse("kind: Cluster\nname: x\n---\nkind: Nodes\n").expect_err("kind");
    assert!(matches!(err, ParseError::UnknownKind { index: 1, ref kind } if kind == "Nodes"));
    let err = Template::parse("name: x\n").expect_err("no kind");
    assert!(matches!(err, ParseError::MissingKind { index: 0 }));
    let err = Template::parse(
        "kind: Cluster\nname: x\nfeatures:\n  backupConfiguration:\n    interval: 30\n",
    )
    .expect_err("integer duration");
    assert!(matches!(err, ParseError::Document { .. }), "{err}");
}

/// A duration is kept as written (`1.5m` is not re-emitted as `1m30s`), and one Go rejects
/// still parses, so validation reports it at its field in Go's words.
#[test]
fn durations_keep_their_text_and_bad_ones_are_validation_errors() {
    let text = format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\n  healthchecks:\n    - name: smoke\n      job: \"apiVersion: batch/v1\\nkind: Job\\n\"\n      interval: 1.5m\ntalos:\n  version: v1.9.5\nfeatures:\n  backupConfiguration:\n    interval: 1d\n---\nkind: ControlPlane\nmachines: [{A}]\n"
    );
    let t = Template::parse(&text).expect("a bad duration is not a parse error");
    let yaml = t.to_yaml();
    assert!(yaml.contains("      interval: 1.5m\n"), "{yaml}");
    assert!(yaml.contains("    interval: 1d\n"), "{yaml}");
    assert_eq!(
        messages(&text, &FileResolver::default()),
        [
            r#"Cluster "demo" (document 0): features.backupConfiguration.interval: time: unknown unit "d" in duration "1d""#
        ]
    );
}

#[test]
fn machine_class_size_keeps_int_versus_string() {
    let t = Template::parse("kind: Workers\nmachineClass:\n  name: c\n  size: 3\n").expect("parse");
    assert!(t.to_yaml().contains("  size: 3\n"));
    let t =
        Template::parse("kind: Workers\nmachineClass:\n  name: c\n  size: \"∞\"\n").expect("parse");
    assert!(t.to_yaml().contains("  size: ∞\n"), "{}", t.to_yaml());
}

#[test]
fn valid_template_passes() {
    let t = Template::parse(&full_template()).expect("parse");
    let errs = t.validate(&FileResolver::default());
    // The locked machine B is a worker, which is allowed.
    assert_eq!(errs, Ok(()));
}

fn messages(text: &str, files: &FileResolver) -> Vec<String> {
    let t = Template::parse(text).expect("parse");
    match t.validate(files) {
        Ok(()) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn validation_errors_are_aggregated_and_name_the_document() {
    let text = format!(
        r#"kind: Cluster
name: "bad name"
labels:
  omni.sidero.dev/x: y
kubernetes:
  version: nope
talos:
  version: 1.9.5
features:
  diskEncryption: true
patches:
  - inline:
      cluster:
        clusterName: other
---
kind: ControlPlane
name: cp
machines: [{A}]
machineClass:
  name: c
  size: 2
---
kind: Workers
machines: [{A}, not-a-uuid]
---
kind: Workers
name: workers
---
kind: Machine
name: {A}
locked: true
---
kind: Machine
name: {B}
"#
    );
    let msgs = messages(&text, &FileResolver::default());
    let expect = [
        "Cluster \"bad name\" (document 0): name: cluster name may contain only letters",
        "Cluster \"bad name\" (document 0): labels: key \"omni.sidero.dev/x\" uses the reserved prefix",
        "Cluster \"bad name\" (document 0): kubernetes.version: invalid Kubernetes version \"nope\"",
        "Cluster \"bad name\" (document 0): talos.version: invalid Talos version \"1.9.5\"",
        "Cluster \"bad name\" (document 0): patches[0].name: inline patch requires name or idOverride",
        "Cluster \"bad name\" (document 0): patches[0]: overriding \"cluster.clusterName\" is not allowed in the config patch",
        "ControlPlane \"cp\" (document 1): name: control plane must not have a name",
        "ControlPlane \"cp\" (document 1): machineClass: machines and machineClass are mutually exclusive",
        "Workers \"\" (document 2): machines[1]: machine ID \"not-a-uuid\" is not a UUID",
        "template: Workers name \"workers\" is used by 2 documents",
        &format!("template: machine \"{A}\" is listed in both ControlPlane and Workers"),
        &format!("Machine \"{A}\" (document 4): locked: control-plane machines cannot be locked"),
        &format!(
            "Machine \"{B}\" (document 5): machine is not listed in ControlPlane or any Workers"
        ),
    ];
    for e in expect {
        assert!(
            msgs.iter().any(|m| m.starts_with(e)),
            "missing {e:?} in:\n{}",
            msgs.join("\n")
        );
    }
    assert_eq!(msgs.len(), expect.len(), "{}", msgs.join("\n"));
}

#[test]
fn cardinality_rules() {
    let msgs = messages("kind: Workers\n", &FileResolver::default());
    assert!(
        msgs.contains(&"template: exactly one Cluster document is required, found 0".to_string())
    );
    assert!(
        msgs.contains(
            &"template: exactly one ControlPlane document is required, found 0".to_string()
        )
    );
}

#[test]
fn files_are_resolved_under_the_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("patches")).expect("mkdir");
    std::fs::write(
        dir.path().join("patches/ok.yaml"),
        "machine:\n  network: {}\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("patches/bad.yaml"),
        "machine:\n  token: x\n",
    )
    .expect("write");
    let base = format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\n---\nkind: ControlPlane\nmachines: [{A}]\npatches:\n"
    );
    let files = FileResolver::with_root(dir.path());
    assert!(messages(&format!("{base}  - file: patches/ok.yaml\n"), &files).is_empty());
    let msgs = messages(&format!("{base}  - file: patches/bad.yaml\n"), &files);
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].contains("machine.token"), "{msgs:?}");
    let msgs = messages(&format!("{base}  - file: ../escape.yaml\n"), &files);
    assert!(msgs[0].contains("outside the template root"), "{msgs:?}");
    let msgs = messages(&format!("{base}  - file: patches/none.yaml\n"), &files);
    assert!(msgs[0].contains("not found"), "{msgs:?}");
}
