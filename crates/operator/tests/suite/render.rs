//! The rendered Omni template: exact format, determinism and render-time errors.

use omni_operator::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};
use omni_operator::domain::render::{RenderError, file_resolver, render};
use sha2::{Digest, Sha256};

const A: &str = "11111111-1111-1111-1111-111111111111";
const B: &str = "22222222-2222-2222-2222-222222222222";
const C: &str = "33333333-3333-3333-3333-333333333333";

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_saphyr::from_str(yaml).expect("fixture parses")
}

fn cluster() -> OmniCluster {
    parse(
        r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: demo
  namespace: omni
spec:
  connectionRef:
    name: omni
  clusterName: prod-demo
  labels:
    env: prod
    "n": "1"
  annotations:
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
      - name: empty
      - name: crds
        file: manifests/crds.yaml
  talos:
    version: v1.9.5
  features:
    enableWorkloadProxy: true
    backupConfiguration:
      interval: 1h
  patches:
    - name: sysctl
      labels:
        k: v
      inline:
        machine:
          sysctls:
            vm.max_map_count: "262144"
    - file: patches/cni.yaml
      idOverride: 100-cni
  systemExtensions:
    - siderolabs/iscsi-tools
  kernelArgs: []
  templateRoot: /templates
"#,
    )
}

fn control_plane(name: &str, cluster: &str) -> OmniControlPlane {
    parse(&format!(
        r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniControlPlane
metadata:
  name: {name}
  namespace: omni
spec:
  clusterRef:
    name: {cluster}
  labels:
    tier: cp
  machines:
    - {A}
  bootstrapSpec:
    clusterUUID: 0b7c9f2e-5a61-4c43-9a77-3c1f5b1d2e90
    snapshot: snap.db
  patches:
    - name: cp
      inline:
        cluster:
          allowSchedulingOnControlPlanes: true
"#
    ))
}

fn workers() -> Vec<OmniWorkers> {
    vec![
        parse(
            r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniWorkers
metadata:
  name: zz-gpu
  namespace: omni
spec:
  clusterRef:
    name: demo
  workerSetName: gpu
  machineClass:
    name: gpu-class
    size: unlimited
  updateStrategy:
    type: Rolling
    rolling:
      maxParallelism: 2
  upgradeStrategy:
    rolling: {}
  deleteStrategy:
    type: Unset
  systemExtensions:
    - nvidia/driver
"#,
        ),
        parse(&format!(
            r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniWorkers
metadata:
  name: batch
  namespace: omni
spec:
  clusterRef:
    name: demo
  annotations:
    purpose: batch
  machines:
    - {C}
    - {B}
  kernelArgs:
    - console=ttyS0
"#
        )),
        parse(
            r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniWorkers
metadata:
  name: elastic
  namespace: omni
spec:
  clusterRef:
    name: demo
  machineClass:
    name: cloud
    size: 3
"#,
        ),
    ]
}

fn machines() -> Vec<OmniMachine> {
    vec![
        parse(&format!(
            r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniMachine
metadata:
  name: node-c
  namespace: omni
spec:
  clusterRef:
    name: demo
  machineID: {C}
  locked: true
  install:
    disk: /dev/nvme0n1
  labels:
    rack: r1
  kernelArgs:
    - quiet
"#
        )),
        parse(&format!(
            r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniMachine
metadata:
  name: {B}
  namespace: omni
spec:
  clusterRef:
    name: demo
  patches:
    - name: hostname
      inline:
        machine:
          network:
            hostname: worker-b
"#
        )),
    ]
}

const EXPECTED: &str = r#"kind: Cluster
name: prod-demo
labels:
  env: prod
  'n': "1"
annotations:
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
    - name: empty
      mode: full
      inline: []
    - name: crds
      mode: full
      file: manifests/crds.yaml
talos:
  version: v1.9.5
features:
  enableWorkloadProxy: true
  backupConfiguration:
    interval: 1h
patches:
  - name: sysctl
    labels:
      k: v
    inline:
      machine:
        sysctls:
          vm.max_map_count: "262144"
  - file: patches/cni.yaml
    idOverride: 100-cni
systemExtensions:
  - siderolabs/iscsi-tools
---
kind: ControlPlane
labels:
  tier: cp
machines:
  - 11111111-1111-1111-1111-111111111111
bootstrapSpec:
  clusterUUID: 0b7c9f2e-5a61-4c43-9a77-3c1f5b1d2e90
  snapshot: snap.db
patches:
  - name: cp
    inline:
      cluster:
        allowSchedulingOnControlPlanes: true
---
kind: Workers
name: batch
annotations:
  purpose: batch
machines:
  - 33333333-3333-3333-3333-333333333333
  - 22222222-2222-2222-2222-222222222222
kernelArgs:
  - console=ttyS0
---
kind: Workers
name: elastic
machineClass:
  name: cloud
  size: 3
---
kind: Workers
name: gpu
machineClass:
  name: gpu-class
  size: unlimited
updateStrategy:
  type: Rolling
  rolling:
    maxParallelism: 2
upgradeStrategy:
  rolling: {}
deleteStrategy:
  type: Unset
systemExtensions:
  - nvidia/driver
---
kind: Machine
name: 22222222-2222-2222-2222-222222222222
patches:
  - name: hostname
    inline:
      machine:
        network:
          hostname: worker-b
---
kind: Machine
name: 33333333-3333-3333-3333-333333333333
labels:
  rack: r1
locked: true
install:
  disk: /dev/nvme0n1
kernelArgs:
  - quiet
"#;

#[test]
fn renders_every_document_kind_in_the_documented_format() {
    let rendered = render(
        &cluster(),
        &[control_plane("cp", "demo")],
        &workers(),
        &machines(),
    )
    .expect("render");
    assert_eq!(rendered.yaml, EXPECTED);
    assert_eq!(
        rendered.hash,
        hex::encode(Sha256::digest(EXPECTED.as_bytes()))
    );
    assert_eq!(rendered.hash.len(), 64);
    assert_eq!(rendered.control_plane_ref, "cp");
    assert_eq!(rendered.workers_refs, ["batch", "elastic", "zz-gpu"]);
    assert_eq!(rendered.machine_refs, [B, "node-c"]);
}

#[test]
fn rendered_template_parses_back_and_passes_omni_validation_shape() {
    let rendered = render(
        &cluster(),
        &[control_plane("cp", "demo")],
        &workers(),
        &machines(),
    )
    .expect("render");
    let reparsed = omni_client::template::Template::parse(&rendered.yaml).expect("reparse");
    assert_eq!(reparsed.to_yaml(), rendered.yaml);
}

#[test]
fn output_does_not_depend_on_input_order() {
    let expected = render(
        &cluster(),
        &[control_plane("cp", "demo")],
        &workers(),
        &machines(),
    )
    .expect("render");
    let mut ws = workers();
    let mut ms = machines();
    for rotation in 0..ws.len() {
        ws.rotate_left(1);
        ms.reverse();
        let got = render(&cluster(), &[control_plane("cp", "demo")], &ws, &ms).expect("render");
        assert_eq!(got, expected, "rotation {rotation}");
    }
}

#[test]
fn children_of_other_clusters_and_namespaces_are_ignored() {
    let mut foreign_ns = control_plane("cp2", "demo");
    foreign_ns.metadata.namespace = Some("elsewhere".into());
    let other_cluster = control_plane("cp3", "other");
    let mut ws = workers();
    ws[0].metadata.namespace = Some("elsewhere".into());
    let rendered = render(
        &cluster(),
        &[foreign_ns, control_plane("cp", "demo"), other_cluster],
        &ws,
        &[],
    )
    .expect("render");
    assert_eq!(rendered.control_plane_ref, "cp");
    assert_eq!(rendered.workers_refs, ["batch", "elastic"]);
    assert!(rendered.machine_refs.is_empty());
}

#[test]
fn control_plane_count_errors() {
    let err = render(&cluster(), &[], &[], &[]).expect_err("no control plane");
    assert_eq!(
        err.to_string(),
        "expected exactly one OmniControlPlane referencing omni/demo, found 0"
    );
    assert_eq!(err.reason().as_str(), "MissingTemplate");
    let err = render(
        &cluster(),
        &[control_plane("a", "demo"), control_plane("b", "demo")],
        &[],
        &[],
    )
    .expect_err("two control planes");
    assert_eq!(
        err.to_string(),
        "expected exactly one OmniControlPlane referencing omni/demo, found 2"
    );
}

#[test]
fn duplicate_manifest_names_fail_to_render() {
    let mut c = cluster();
    if let Some(m) = c.spec.kubernetes.manifests.as_mut() {
        m[1].name = "ns".into();
    }
    let err = render(&c, &[control_plane("cp", "demo")], &[], &[]).expect_err("duplicate");
    assert_eq!(
        err.to_string(),
        "duplicate Kubernetes manifest name \"ns\" for OmniCluster.spec.kubernetes.manifests[] conflicts with OmniCluster.spec.kubernetes.manifests[]"
    );
    assert_eq!(err.reason().as_str(), "ValidationFailed");
}

#[test]
fn reserved_worker_set_name_fails_to_render() {
    let mut ws = workers();
    ws[2].metadata.name = Some("control-planes".into());
    let err = render(&cluster(), &[control_plane("cp", "demo")], &ws, &[]).expect_err("reserved");
    assert_eq!(
        err,
        RenderError::ReservedWorkerSetName("control-planes".into())
    );
    assert_eq!(
        err.to_string(),
        "workers \"control-planes\" uses reserved workerSetName \"control-planes\""
    );
}

#[test]
fn minimal_cluster_and_empty_features() {
    let mut c: OmniCluster = parse(
        r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata:
  name: tiny
  namespace: omni
spec:
  connectionRef:
    name: omni
  kubernetes:
    version: v1.32.0
  talos:
    version: v1.9.0
"#,
    );
    let cp = control_plane("cp", "tiny");
    let plain = render(&c, std::slice::from_ref(&cp), &[], &[]).expect("render");
    assert!(plain.yaml.starts_with(
        "kind: Cluster\nname: tiny\nkubernetes:\n  version: v1.32.0\ntalos:\n  version: v1.9.0\n---\n"
    ), "{}", plain.yaml);
    c.spec.patches = Some(vec![
        parse("name: empty\ninline: {}\n"),
        parse("name: text\ninline: \"machine:\\n  network: {}\\n\"\n"),
    ]);
    let patched = render(&c, std::slice::from_ref(&cp), &[], &[]).expect("render");
    assert!(
        patched.yaml.contains(
            "patches:\n  - name: empty\n    inline: {}\n  - name: text\n    inline: |\n      machine:\n        network: {}\n---\n"
        ),
        "{}",
        patched.yaml
    );
    c.spec.patches = None;
    c.spec.features = Some(Default::default());
    let with_features = render(&c, &[cp], &[], &[]).expect("render");
    assert!(
        with_features
            .yaml
            .contains("talos:\n  version: v1.9.0\nfeatures: {}\n---\n"),
        "{}",
        with_features.yaml
    );
    assert_ne!(plain.hash, with_features.hash);
}

#[test]
fn template_root_confines_file_references() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("patches")).expect("mkdir");
    std::fs::write(
        dir.path().join("patches/cni.yaml"),
        "cluster:\n  network: {}\n",
    )
    .expect("write");
    let mut c = cluster();
    c.spec.template_root = Some(dir.path().join("patches").display().to_string());
    let rendered = render(&c, &[control_plane("cp", "demo")], &[], &[]).expect("render");
    // The cluster patch `patches/cni.yaml` resolves under the root, which is `patches/` itself,
    // so it is missing; the manifest `manifests/crds.yaml` too.
    let errs = rendered
        .template
        .validate(&file_resolver(&c, Some(dir.path())))
        .expect_err("files are outside the root");
    let text = errs.to_string();
    assert!(
        text.contains("patches[1].file: file \"patches/cni.yaml\" not found"),
        "{text}"
    );
    c.spec.template_root = Some(dir.path().display().to_string());
    let errs = rendered
        .template
        .validate(&file_resolver(&c, Some(dir.path())))
        .expect_err("manifest file missing");
    let text = errs.to_string();
    assert!(!text.contains("patches/cni.yaml"), "{text}");
    assert!(text.contains("manifests/crds.yaml"), "{text}");
}

/// A cluster of static sets only, each level spelling `systemExtensions: []` and `kernelArgs: []`.
fn static_cluster_with_empty_lists() -> (OmniCluster, OmniControlPlane, OmniWorkers, OmniMachine) {
    let mut c = cluster();
    c.spec.system_extensions = Some(Vec::new());
    c.spec.kernel_args = Some(Vec::new());
    let mut cp = control_plane("cp", "demo");
    cp.spec.machine_set.system_extensions = Some(Vec::new());
    cp.spec.machine_set.kernel_args = Some(Vec::new());
    let mut w = workers().remove(1);
    w.spec.machine_set.kernel_args = Some(Vec::new());
    w.spec.machine_set.system_extensions = Some(Vec::new());
    let mut m = machines().remove(0);
    m.spec.kernel_args = Some(Vec::new());
    m.spec.system_extensions = Some(Vec::new());
    (c, cp, w, m)
}

#[test]
fn explicit_empty_extension_and_kernel_arg_lists_are_rendered_so_omni_clears_them() {
    let (c, cp, w, m) = static_cluster_with_empty_lists();
    let rendered = render(&c, &[cp], &[w], &[m]).expect("render");
    let docs: Vec<&str> = rendered.yaml.split("---\n").collect();
    assert_eq!(docs.len(), 4, "{}", rendered.yaml);
    for doc in docs {
        assert!(
            doc.ends_with("systemExtensions: []\nkernelArgs: []\n"),
            "every level keeps its explicit empty lists:\n{doc}"
        );
    }
    let reparsed = omni_client::template::Template::parse(&rendered.yaml).expect("reparse");
    let cluster = reparsed.cluster().expect("cluster document");
    assert_eq!(cluster.system_extensions, Some(Vec::new()));
    assert_eq!(cluster.kernel_args, Some(Vec::new()));
}

#[test]
fn omitted_extension_and_kernel_arg_lists_are_not_rendered_so_omni_keeps_them() {
    let (mut c, mut cp, mut w, mut m) = static_cluster_with_empty_lists();
    c.spec.system_extensions = None;
    c.spec.kernel_args = None;
    cp.spec.machine_set.system_extensions = None;
    cp.spec.machine_set.kernel_args = None;
    w.spec.machine_set.system_extensions = None;
    w.spec.machine_set.kernel_args = None;
    m.spec.system_extensions = None;
    m.spec.kernel_args = None;
    let rendered = render(&c, &[cp], &[w], &[m]).expect("render");
    assert!(
        !rendered.yaml.contains("systemExtensions") && !rendered.yaml.contains("kernelArgs"),
        "{}",
        rendered.yaml
    );
}

#[test]
fn empty_kernel_args_where_omni_allows_none_are_dropped_as_the_original_did() {
    // The golden cluster spells `kernelArgs: []` at cluster level and has machine-class sets:
    // Omni refuses cluster-level kernelArgs there, so the empty list stays unrendered.
    let mut ws = workers();
    ws[0].spec.machine_set.kernel_args = Some(Vec::new());
    let rendered = render(&cluster(), &[control_plane("cp", "demo")], &ws, &[]).expect("render");
    let gpu = rendered
        .yaml
        .split("---\n")
        .find(|d| d.contains("name: gpu\n"))
        .expect("gpu document");
    assert!(!gpu.contains("kernelArgs"), "{gpu}");
    let cluster_doc = rendered.yaml.split("---\n").next().unwrap_or_default();
    assert!(!cluster_doc.contains("kernelArgs"), "{cluster_doc}");
    // Extensions are allowed everywhere, so their `[]` is kept even on a machine-class set.
    ws[0].spec.machine_set.system_extensions = Some(Vec::new());
    let rendered = render(&cluster(), &[control_plane("cp", "demo")], &ws, &[]).expect("render");
    assert!(
        rendered
            .yaml
            .contains("deleteStrategy:\n  type: Unset\nsystemExtensions: []\n"),
        "{}",
        rendered.yaml
    );
}

#[test]
fn install_disk_selector_is_part_of_the_rendered_template_and_its_hash() {
    let mut ms = machines();
    let plain = render(&cluster(), &[control_plane("cp", "demo")], &[], &ms).expect("render");
    let install = ms[0].spec.install.as_mut().expect("install");
    install.disk = None;
    install.disk_selector = Some("disk.transport == \"nvme\"".into());
    let rendered = render(&cluster(), &[control_plane("cp", "demo")], &[], &ms).expect("render");
    assert!(
        rendered
            .yaml
            .contains("install:\n  diskSelector: disk.transport == \"nvme\"\n"),
        "{}",
        rendered.yaml
    );
    assert_ne!(plain.hash, rendered.hash);
    let reparsed = omni_client::template::Template::parse(&rendered.yaml).expect("reparse");
    assert_eq!(reparsed.to_yaml(), rendered.yaml);
}

#[test]
fn health_checks_are_rendered_as_omni_healthchecks() {
    let mut c = cluster();
    c.spec.kubernetes.health_checks = Some(vec![
        parse(
            r#"
name: dns
interval: 1m
labels:
  team: net
job:
  apiVersion: batch/v1
  kind: Job
  metadata:
    namespace: checks
"#,
        ),
        parse("idOverride: etcd-check\nfile: checks/etcd.yaml\n"),
    ]);
    let rendered = render(&c, &[control_plane("cp", "demo")], &[], &[]).expect("render");
    assert!(
        rendered.yaml.contains(
            "      file: manifests/crds.yaml\n  healthchecks:\n    - name: dns\n      job:\n        apiVersion: batch/v1\n        kind: Job\n        metadata:\n          namespace: checks\n      interval: 1m\n      labels:\n        team: net\n    - idOverride: etcd-check\n      file: checks/etcd.yaml\ntalos:\n"
        ),
        "{}",
        rendered.yaml
    );
    let reparsed = omni_client::template::Template::parse(&rendered.yaml).expect("reparse");
    assert_eq!(reparsed.to_yaml(), rendered.yaml);
    let without = render(&cluster(), &[control_plane("cp", "demo")], &[], &[]).expect("render");
    assert!(!without.yaml.contains("healthchecks"), "{}", without.yaml);
}

#[test]
fn omni_2026_fields_are_rendered() {
    let mut c = cluster();
    c.spec.kubernetes.manifests = Some(vec![parse(
        r#"
name: apps
labels:
  team: apps
annotations:
  owner: platform
inline: |
  apiVersion: v1
  kind: Namespace
  metadata:
    name: apps
  ---
  apiVersion: v1
  kind: Namespace
  metadata:
    name: jobs
"#,
    )]);
    c.spec.features = Some(parse(
        "enableNodeAuditSkip: true\nuseEmbeddedDiscoveryService: true\ndisablePublicDiscoveryService: false\n",
    ));
    let mut cp = control_plane("cp", "demo");
    cp.spec.upgrade_strategy = Some(parse("type: Rolling\nrolling:\n  maxParallelism: 1\n"));
    let rendered = render(&c, &[cp], &[], &[]).expect("render");
    for expected in [
        "  manifests:\n    - name: apps\n      mode: full\n      inline: |\n        apiVersion: v1\n        kind: Namespace\n        metadata:\n          name: apps\n        ---\n        apiVersion: v1\n        kind: Namespace\n        metadata:\n          name: jobs\n      labels:\n        team: apps\n      annotations:\n        owner: platform\n",
        "features:\n  useEmbeddedDiscoveryService: true\n  enableNodeAuditSkip: true\n  disablePublicDiscoveryService: false\n",
        "bootstrapSpec:\n  clusterUUID: 0b7c9f2e-5a61-4c43-9a77-3c1f5b1d2e90\n  snapshot: snap.db\nupgradeStrategy:\n  type: Rolling\n  rolling:\n    maxParallelism: 1\n",
    ] {
        assert!(
            rendered.yaml.contains(expected),
            "{expected}\n--- in ---\n{}",
            rendered.yaml
        );
    }
    let reparsed = omni_client::template::Template::parse(&rendered.yaml).expect("reparse");
    assert_eq!(reparsed.to_yaml(), rendered.yaml);
}
