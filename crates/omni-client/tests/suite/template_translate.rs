//! Translation of templates into Omni resources, checked against golden files.
//!
//! Set `UPDATE_GOLDEN=1` to rewrite the `resources.txt` files after an intended change; review the
//! diff before committing.

use std::fmt::Write as _;
use std::path::PathBuf;

use omni_client::template::{
    BackendApi, DesiredResource, FileResolver, Spec, Template, TranslateError, keys,
    sort_for_apply, translate, types,
};

const A: &str = "11111111-1111-1111-1111-111111111111";
const B: &str = "22222222-2222-2222-2222-222222222222";

fn golden_dir(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(case)
}

fn load(case: &str) -> (Template, FileResolver) {
    let dir = golden_dir(case);
    let text = std::fs::read_to_string(dir.join("template.yaml")).expect("read template");
    let template = Template::parse(&text).expect("parse template");
    let files = FileResolver::new(&dir);
    template.validate(&files).expect("golden template is valid");
    (template, files)
}

fn describe(resources: &[DesiredResource]) -> String {
    let mut out = String::new();
    for r in resources {
        let _ = writeln!(out, "{}", r.reference());
        let _ = writeln!(out, "  labels: {:?}", r.labels);
        let _ = writeln!(out, "  annotations: {:?}", r.annotations);
        match &r.spec {
            Spec::ConfigPatch(p) => {
                let _ = writeln!(out, "  data: |");
                for line in p.data.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
            Spec::KubernetesManifestGroup(m) => {
                let _ = writeln!(out, "  mode: {:?}", m.mode());
                let _ = writeln!(out, "  data: |");
                for line in m.data.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
            other => {
                let _ = writeln!(out, "  spec: {other:?}");
            }
        }
    }
    out
}

fn check_golden(case: &str) -> Vec<DesiredResource> {
    let (template, files) = load(case);
    let mut resources = translate(&template, &files).expect("translate");
    sort_for_apply(&mut resources);
    let actual = describe(&resources);
    let path = golden_dir(case).join("resources.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).expect("write golden");
    }
    let expected = std::fs::read_to_string(&path).expect("read golden (run with UPDATE_GOLDEN=1)");
    assert_eq!(actual, expected, "golden mismatch for {case}");
    resources
}

#[test]
fn worked_example_matches_the_documented_table() {
    let resources = check_golden("worked-example");
    let order: Vec<String> = resources
        .iter()
        .map(|r| r.reference().to_string())
        .collect();
    let expected = [
        "Clusters.omni.sidero.dev(demo)".to_string(),
        "ExtensionsConfigurations.omni.sidero.dev(schematic-demo)".to_string(),
        format!("ConfigPatches.omni.sidero.dev(000-cm-{B}-install-disk)"),
        "ConfigPatches.omni.sidero.dev(200-cluster-demo-cni)".to_string(),
        "ConfigPatches.omni.sidero.dev(400-demo-workers-patches/w.yaml)".to_string(),
        "MachineSets.omni.sidero.dev(demo-control-planes)".to_string(),
        "MachineSets.omni.sidero.dev(demo-gpu)".to_string(),
        "MachineSets.omni.sidero.dev(demo-workers)".to_string(),
        format!("MachineSetNodes.omni.sidero.dev({A})"),
        format!("MachineSetNodes.omni.sidero.dev({B})"),
        format!("KernelArgs.omni.sidero.dev({B})"),
    ];
    assert_eq!(order, expected);

    let Spec::Cluster(cluster) = &resources[0].spec else {
        panic!("first is not the cluster")
    };
    assert_eq!(cluster.talos_version, "1.9.5");
    assert_eq!(cluster.kubernetes_version, "1.32.3");
    assert!(cluster.features.is_some(), "features are always present");
    assert!(cluster.backup_configuration.is_none());
    assert_eq!(
        resources[0].annotations.get(keys::MANAGED_BY_TEMPLATES),
        Some(&String::new())
    );

    let Spec::ConfigPatch(disk) = &resources[2].spec else {
        panic!("install-disk patch")
    };
    assert_eq!(
        disk.data,
        "machine:\n    install:\n        disk: /dev/sda\n"
    );
    assert!(disk.compressed_data.is_empty());
    assert_eq!(
        resources[2].labels.get(keys::SYSTEM_PATCH),
        Some(&String::new())
    );
    assert_eq!(
        resources[2].annotations.get(keys::NAME).map(String::as_str),
        Some("install-disk")
    );

    let Spec::ConfigPatch(file_patch) = &resources[4].spec else {
        panic!("file patch")
    };
    assert_eq!(
        file_patch.data, "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n",
        "file bytes are stored verbatim"
    );
    assert_eq!(
        resources[4]
            .labels
            .get(keys::MACHINE_SET)
            .map(String::as_str),
        Some("demo-workers")
    );

    let Spec::MachineSet(gpu) = &resources[6].spec else {
        panic!("gpu set")
    };
    let alloc = gpu.machine_allocation.as_ref().expect("allocation");
    assert_eq!(
        (
            alloc.name.as_str(),
            alloc.machine_count,
            alloc.allocation_type
        ),
        ("gpu-class", 2, 0)
    );
    assert_eq!(gpu.update_strategy, 1, "Rolling by default");
    assert!(resources[6].labels.contains_key(keys::ROLE_WORKER));

    assert_eq!(
        resources[8]
            .labels
            .get(keys::MACHINE_SET)
            .map(String::as_str),
        Some("demo-control-planes")
    );
    let Spec::KernelArgs(args) = &resources[10].spec else {
        panic!("kernel args")
    };
    assert_eq!(args.args, vec!["console=ttyS0".to_string()]);
    assert!(
        resources[10].labels.is_empty(),
        "KernelArgs carry no labels"
    );
}

#[test]
fn every_field_translates_as_golden() {
    let resources = check_golden("all-fields");
    let find = |t: &str, id: &str| {
        resources
            .iter()
            .find(|r| r.resource_type() == t && r.id == id)
            .unwrap_or_else(|| panic!("missing {t}({id})"))
    };
    // A user annotation `name` wins over the generated one.
    let p = find(types::CONFIG_PATCH, "my-own-id");
    assert_eq!(
        p.annotations.get("name").map(String::as_str),
        Some("overridden")
    );
    // Cluster kernel args reach a machine without its own document; the set's win over them;
    // an explicit empty list on the Machine document yields empty args.
    let args = |id: &str| match &find(types::KERNEL_ARGS, id).spec {
        Spec::KernelArgs(k) => k.args.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(args(A), vec!["quiet".to_string()]);
    assert_eq!(
        args("33333333-3333-3333-3333-333333333333"),
        vec!["console=tty0".to_string()]
    );
    assert!(args("44444444-4444-4444-4444-444444444444").is_empty());
    // Explicitly empty cluster extensions still create the configuration (it clears).
    match &find(types::EXTENSIONS_CONFIGURATION, "schematic-lab").spec {
        Spec::ExtensionsConfiguration(e) => assert!(e.extensions.is_empty()),
        other => panic!("{other:?}"),
    }
    let node = find(
        types::MACHINE_SET_NODE,
        "44444444-4444-4444-4444-444444444444",
    );
    assert_eq!(node.annotations.get(keys::LOCKED), Some(&String::new()));
    assert_eq!(node.labels.get("rack").map(String::as_str), Some("r1"));
    match &find(types::CLUSTER, "lab").spec {
        Spec::Cluster(c) => {
            let backup = c.backup_configuration.as_ref().expect("backup");
            assert!(backup.enabled);
            assert_eq!(backup.interval.as_ref().map(|d| d.seconds), Some(5400));
        }
        other => panic!("{other:?}"),
    }
    match &find(types::KUBERNETES_HEALTH_CHECK, "cluster-lab-dns").spec {
        Spec::KubernetesHealthCheck(h) => {
            assert_eq!(h.interval.as_ref().map(|d| d.seconds), Some(90));
        }
        other => panic!("{other:?}"),
    }
    match &find(types::KUBERNETES_HEALTH_CHECK, "custom-check").spec {
        Spec::KubernetesHealthCheck(h) => assert!(h.interval.is_none()),
        other => panic!("{other:?}"),
    }
    // Manifests named by their file keep the path in the ID.
    find(
        types::KUBERNETES_MANIFEST_GROUP,
        "201-cluster-lab-files/crds.yaml",
    );
}

#[test]
fn specs_round_trip_through_protobuf() {
    let (template, files) = load("all-fields");
    for r in translate(&template, &files).expect("translate") {
        let decoded = Spec::decode(r.resource_type(), &r.spec.encode()).expect("decode");
        assert_eq!(decoded, r.spec, "{}", r.reference());
    }
}

#[test]
fn cluster_kernel_args_conflict_with_machine_classes() {
    let text = format!(
        "kind: Cluster\nname: c\nkubernetes:\n  version: v1.32.0\ntalos:\n  version: v1.9.0\nkernelArgs: [quiet]\n---\nkind: ControlPlane\nmachines: [{A}]\n---\nkind: Workers\nmachineClass:\n  name: x\n  size: unlimited\n"
    );
    let template = Template::parse(&text).expect("parse");
    let err = translate(&template, &FileResolver::default()).expect_err("conflict");
    assert_eq!(
        err,
        TranslateError::ClusterKernelArgsWithMachineClass {
            machine_set: "c-workers".into()
        }
    );
    assert!(err.to_string().contains(
        "kernelArgs cannot be defined at cluster level for this machine set since it uses a machine class"
    ));
}

#[test]
fn unlimited_machine_class_and_duplicate_ids() {
    let text = format!(
        "kind: Cluster\nname: c\nkubernetes:\n  version: v1.32.0\ntalos:\n  version: v1.9.0\npatches:\n  - idOverride: same\n    inline: {{}}\n  - idOverride: same\n    inline: {{}}\n---\nkind: ControlPlane\nmachines: [{A}]\n"
    );
    let template = Template::parse(&text).expect("parse");
    let err = translate(&template, &FileResolver::default()).expect_err("duplicate");
    assert!(
        matches!(err, TranslateError::DuplicateId(ref r) if r.id == "same"),
        "{err}"
    );

    let text = "kind: Cluster\nname: c\nkubernetes:\n  version: v1.32.0\ntalos:\n  version: v1.9.0\n---\nkind: ControlPlane\nmachineClass:\n  name: x\n  size: ∞\n";
    let template = Template::parse(text).expect("parse");
    let resources = translate(&template, &FileResolver::default()).expect("translate");
    let Spec::MachineSet(ms) = &resources[1].spec else {
        panic!("set")
    };
    let alloc = ms.machine_allocation.as_ref().expect("allocation");
    assert_eq!((alloc.machine_count, alloc.allocation_type), (0, 1));
}

#[test]
fn on_backend_api_3_the_install_disk_is_its_own_resource() {
    let (template, files) = load("worked-example");
    let mut resources =
        omni_client::template::translate_for(&template, &files, BackendApi::V3).expect("translate");
    sort_for_apply(&mut resources);
    let refs: Vec<String> = resources
        .iter()
        .map(|r| r.reference().to_string())
        .collect();
    assert!(
        !refs.iter().any(|r| r.contains("install-disk")),
        "no install-disk patch on API 3: {refs:?}"
    );
    // Right after the config patches, before the node that makes the machine installable.
    let disk = refs
        .iter()
        .position(|r| *r == format!("MachineInstallDiskConfigs.omni.sidero.dev({B})"))
        .expect("install-disk config");
    let last_patch = refs
        .iter()
        .rposition(|r| r.starts_with("ConfigPatches"))
        .expect("patches");
    let first_manifest_or_set = refs
        .iter()
        .position(|r| r.starts_with("MachineSets"))
        .expect("sets");
    assert!(
        last_patch < disk && disk < first_manifest_or_set,
        "{refs:?}"
    );
    let Spec::MachineInstallDiskConfig(spec) = &resources[disk].spec else {
        panic!("install-disk config spec")
    };
    assert_eq!(
        (spec.disk.as_str(), spec.disk_selector.as_str()),
        ("/dev/sda", "")
    );
    assert!(
        resources[disk].labels.is_empty(),
        "machine-scoped: no cluster label"
    );
    assert_eq!(
        resources[disk].annotations.get(keys::MANAGED_BY_TEMPLATES),
        Some(&String::new())
    );
}

#[test]
fn a_disk_selector_needs_backend_api_3() {
    let text = format!(
        "kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\n---\nkind: ControlPlane\nmachines: [{A}]\n---\nkind: Machine\nname: {A}\ninstall:\n  diskSelector: disk.transport == \"nvme\"\n"
    );
    let template = Template::parse(&text).expect("parse");
    let files = FileResolver::default();
    template.validate(&files).expect("valid");
    let err = translate(&template, &files).expect_err("API 2 cannot express a selector");
    assert_eq!(
        err.to_string(),
        "install.diskSelector: needs Omni backend API version 3; the connected Omni speaks version 2"
    );
    let resources =
        omni_client::template::translate_for(&template, &files, BackendApi::V3).expect("API 3");
    assert!(resources.iter().any(|r| matches!(
        &r.spec,
        Spec::MachineInstallDiskConfig(s) if s.disk_selector == "disk.transport == \"nvme\"" && s.disk.is_empty()
    )));

    let both = text.replace("install:\n", "install:\n  disk: /dev/sda\n");
    let err = Template::parse(&both)
        .expect("parse")
        .validate(&files)
        .expect_err("disk and selector together");
    assert!(
        err.to_string().contains(
            "install.diskSelector: install.disk and install.diskSelector are mutually exclusive"
        ),
        "{err}"
    );
}

#[test]
fn omni_1_10_patch_rules_apply_before_anything_is_sent() {
    use omni_client::template::{check_config_patch, check_config_patch_for};
    assert_eq!(
        check_config_patch("cluster:\n  ca:\n    crt: x\n"),
        Err(r#"overriding "cluster.ca" is not allowed in the config patch"#.to_string())
    );
    assert_eq!(
        check_config_patch("apiVersion: v1alpha1\nkind: KubeAggregatorCAConfig\n"),
        Err(
            r#"the "KubeAggregatorCAConfig" document is not allowed in the config patch"#
                .to_string()
        )
    );
    assert_eq!(
        check_config_patch(
            "apiVersion: v1alpha1\nkind: KubeServiceAccountConfig\nissuer:\n  privateKey: x\n"
        ),
        Err(r#"overriding "issuer.privateKey" is not allowed in the config patch"#.to_string())
    );
    let disk = "machine:\n  install:\n    disk: /dev/sda\n";
    assert!(check_config_patch(disk).is_ok(), "allowed on API 2");
    assert_eq!(
        check_config_patch_for(disk, true),
        Err(r#"overriding "machine.install.disk" is not allowed in the config patch"#.to_string())
    );
}
