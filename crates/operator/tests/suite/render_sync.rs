//! Rendered templates synced to omni-sim, and the `omni template` commands end to end.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use omni_client::template::{BackendApi, FileResolver, apply, plan_sync, types};
use omni_client::transport::{Client, ClientConfig};
use omni_operator::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};
use omni_operator::cli::omni_template::{
    Args, ClusterArgs, Command, Connection, DeleteArgs, OmniApi, TemplateArgs, run_with_output,
};
use omni_operator::domain::render::render;
use omni_sim::{OmniSim, Role, RunningOmniSim};
use tokio::time::Instant;

const CP: &str = "11111111-1111-4111-8111-111111111111";
const W: &str = "22222222-2222-4222-8222-222222222222";

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_saphyr::from_str(yaml).expect("fixture parses")
}

async fn start() -> (RunningOmniSim, String) {
    start_at(omni_sim::sysversion::DEFAULT_BACKEND_API_VERSION).await
}

/// omni-sim speaking backend API `api_version` (0: reporting none), and an operator key.
async fn start_at(api_version: u32) -> (RunningOmniSim, String) {
    let sim = OmniSim::builder()
        // Static machine IDs in these tests are not seeded: let them connect.
        .auto_register_machines(true)
        .status_step(Duration::from_millis(20))
        .backend_api_version(api_version)
        .start()
        .await
        .expect("start omni-sim");
    let key = sim
        .register_service_account("operator-tests", Role::Operator)
        .expect("register");
    (sim, key)
}

#[tokio::test]
async fn a_rendered_cluster_syncs_and_resyncs_without_writes() {
    let (sim, key) = start().await;
    let cluster: OmniCluster = parse(
        r#"
apiVersion: omni.texashpc.com/v1alpha1
kind: OmniCluster
metadata: {name: edge, namespace: omni}
spec:
  connectionRef: {name: omni}
  kubernetes:
    version: v1.32.3
    manifests:
      - name: apps
        inline:
          - {apiVersion: v1, kind: Namespace, metadata: {name: apps}}
  talos: {version: v1.9.5}
  features: {enableWorkloadProxy: true}
  systemExtensions: [siderolabs/iscsi-tools]
"#,
    );
    let cp: OmniControlPlane = parse(&format!(
        "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniControlPlane\nmetadata: {{name: edge-cp, namespace: omni}}\nspec:\n  clusterRef: {{name: edge}}\n  machines: [{CP}]\n"
    ));
    let workers: OmniWorkers = parse(&format!(
        "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniWorkers\nmetadata: {{name: edge-workers, namespace: omni}}\nspec:\n  clusterRef: {{name: edge}}\n  machines: [{W}]\n  updateStrategy: {{type: Rolling, rolling: {{maxParallelism: 1}}}}\n"
    ));
    let machine: OmniMachine = parse(&format!(
        "apiVersion: omni.texashpc.com/v1alpha1\nkind: OmniMachine\nmetadata: {{name: {W}, namespace: omni}}\nspec:\n  clusterRef: {{name: edge}}\n  install: {{disk: /dev/nvme0n1}}\n"
    ));
    let rendered = render(&cluster, &[cp], &[workers], &[machine]).expect("render");
    let files = FileResolver::default();
    rendered.template.validate(&files).expect("valid");

    let client = Client::new(ClientConfig::from_encoded_key(sim.endpoint(), &key).expect("key"))
        .expect("client");
    let state = client.raw_state();
    let deadline = Instant::now() + Duration::from_secs(120);
    let plan = plan_sync(&state, &rendered.template, &files)
        .await
        .expect("plan");
    let mut out = Vec::new();
    apply(&state, &plan, deadline, &mut out)
        .await
        .expect("apply");
    assert!(sim.get(types::CLUSTER, "edge").is_some());
    assert!(sim.get(types::MACHINE_SET, "edge-edge-workers").is_some());
    assert!(
        sim.get(types::KUBERNETES_MANIFEST_GROUP, "200-cluster-edge-apps")
            .is_some()
    );
    assert!(
        sim.get(types::EXTENSIONS_CONFIGURATION, "schematic-edge")
            .is_some()
    );

    // Rendering is deterministic, so the next reconcile finds nothing to do.
    let writes = sim.writes_total();
    let plan = plan_sync(&state, &rendered.template, &files)
        .await
        .expect("plan");
    assert!(plan.is_empty(), "{:?}", plan.lines(true));
    assert_eq!(sim.writes_total(), writes);
    sim.shutdown().await;
}

fn connection(sim: &RunningOmniSim, key_file: PathBuf) -> Connection {
    Connection {
        endpoint: sim.endpoint().to_string(),
        key_file: Some(key_file),
        insecure_skip_tls_verify: false,
        timeout: "2m".into(),
    }
}

async fn cli(command: Command) -> (ExitCode, String) {
    let mut out = Vec::new();
    let code = run_with_output(Args { command }, &mut out)
        .await
        .expect("command runs");
    (code, String::from_utf8(out).expect("utf-8"))
}

#[tokio::test]
async fn omni_template_commands_diff_sync_status_delete() {
    let (sim, key) = start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, &key).expect("write key");
    std::fs::create_dir(dir.path().join("patches")).expect("mkdir");
    std::fs::write(
        dir.path().join("patches/cp.yaml"),
        "machine:\n  network: {}\n",
    )
    .expect("write");
    let template = dir.path().join("cluster.yaml");
    std::fs::write(
        &template,
        format!(
            "kind: Cluster\nname: cli\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\n---\nkind: ControlPlane\nmachines: [{CP}]\npatches:\n  - file: patches/cp.yaml\n"
        ),
    )
    .expect("write template");
    let args = || TemplateArgs {
        file: template.clone(),
        omni_api: OmniApi::Auto,
        connection: connection(&sim, key_file.clone()),
    };

    let (code, out) = cli(Command::Diff(args())).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.contains("* creating (dry run) Clusters.omni.sidero.dev(cli)\n"),
        "{out}"
    );
    assert!(
        out.contains("* creating (dry run) ConfigPatches.omni.sidero.dev(400-cli-control-planes-patches/cp.yaml)\n"),
        "file patches resolve next to the template: {out}"
    );
    assert_eq!(sim.writes_total(), 0, "diff writes nothing");

    let (code, out) = cli(Command::Sync(args())).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.starts_with("* creating Clusters.omni.sidero.dev(cli)\n"),
        "{out}"
    );
    let (_, out) = cli(Command::Diff(args())).await;
    assert_eq!(out, "no changes\n");

    let status = || ClusterArgs {
        file: None,
        cluster: Some("cli".into()),
        connection: connection(&sim, key_file.clone()),
    };
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let (code, out) = cli(Command::Status(status())).await;
        if code == ExitCode::SUCCESS {
            assert!(out.starts_with("cluster cli is healthy"), "{out}");
            break;
        }
        assert!(out.starts_with("cluster cli is not healthy"), "{out}");
        assert!(Instant::now() < until, "never healthy: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (code, out) = cli(Command::Delete(DeleteArgs {
        target: ClusterArgs {
            file: Some(template.clone()),
            cluster: None,
            connection: connection(&sim, key_file.clone()),
        },
        destroy_machines: false,
        omni_api: OmniApi::Auto,
    }))
    .await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.contains("* destroyed Clusters.omni.sidero.dev(cli)\n"),
        "{out}"
    );
    assert!(sim.get(types::CLUSTER, "cli").is_none());
    let (code, out) = cli(Command::Status(status())).await;
    assert_eq!(code, ExitCode::FAILURE);
    assert_eq!(out, "cluster cli does not exist in Omni\n");
    sim.shutdown().await;
}

/// A template whose control-plane machine has an install disk, and the key, in a fresh
/// directory.
fn install_disk_template(key: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, key).expect("write key");
    let template = dir.path().join("cluster.yaml");
    std::fs::write(
        &template,
        format!(
            "kind: Cluster\nname: disk\nkubernetes:\n  version: v1.32.3\ntalos:\n  version: v1.9.5\n---\nkind: ControlPlane\nmachines: [{CP}]\n---\nkind: Machine\nname: {CP}\ninstall:\n  disk: /dev/vda\n"
        ),
    )
    .expect("write template");
    (dir, template, key_file)
}

/// Runs a command that must fail; returns its error.
async fn cli_error(command: Command) -> String {
    let mut out = Vec::new();
    match run_with_output(Args { command }, &mut out).await {
        Ok(code) => panic!(
            "command succeeded ({code:?}): {}",
            String::from_utf8_lossy(&out)
        ),
        Err(e) => format!("{e:#}"),
    }
}

fn install_disk_patch() -> String {
    format!("000-cm-{CP}-install-disk")
}

#[tokio::test]
async fn omni_template_writes_the_install_disk_as_a_config_patch_on_api_2() {
    let (sim, key) = start_at(2).await;
    let (_dir, template, key_file) = install_disk_template(&key);
    let (code, out) = cli(Command::Sync(TemplateArgs {
        file: template,
        omni_api: OmniApi::Auto,
        connection: connection(&sim, key_file),
    }))
    .await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.contains(&format!(
            "* creating ConfigPatches.omni.sidero.dev({})\n",
            install_disk_patch()
        )),
        "{out}"
    );
    assert!(
        sim.get(types::CONFIG_PATCH, &install_disk_patch())
            .is_some()
    );
    assert!(sim.list(types::MACHINE_INSTALL_DISK_CONFIG).is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn omni_template_writes_the_install_disk_as_its_own_resource_on_api_3() {
    let (sim, key) = start_at(3).await;
    let (_dir, template, key_file) = install_disk_template(&key);
    let args = |omni_api| TemplateArgs {
        file: template.clone(),
        omni_api,
        connection: connection(&sim, key_file.clone()),
    };

    // Naming another version than Omni speaks is refused before anything is written.
    let error = cli_error(Command::Sync(args(OmniApi::Version(BackendApi::V2)))).await;
    assert!(
        error.contains("--omni-api 2 does not match the backend API version 3 Omni reports"),
        "{error}"
    );
    assert_eq!(sim.writes_total(), 0);

    // What the operator sends at API 3: a MachineInstallDiskConfig, no install-disk patch
    // (which this Omni refuses).
    let (code, out) = cli(Command::Diff(args(OmniApi::Auto))).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.contains(&format!(
            "* creating (dry run) MachineInstallDiskConfigs.omni.sidero.dev({CP})\n"
        )),
        "{out}"
    );
    assert!(!out.contains("install-disk"), "{out}");
    let (code, _) = cli(Command::Sync(args(OmniApi::Version(BackendApi::V3)))).await;
    assert_eq!(code, ExitCode::SUCCESS);
    let config = sim
        .get(types::MACHINE_INSTALL_DISK_CONFIG, CP)
        .expect("a MachineInstallDiskConfig");
    let spec: omni_client::proto::specs::MachineInstallDiskConfigSpec =
        omni_sim::store::decode_spec(&config).expect("spec");
    assert_eq!(spec.disk, "/dev/vda");
    assert!(
        sim.get(types::CONFIG_PATCH, &install_disk_patch())
            .is_none()
    );
    let (_, out) = cli(Command::Diff(args(OmniApi::Auto))).await;
    assert_eq!(out, "no changes\n");
    sim.shutdown().await;
}

#[tokio::test]
async fn omni_template_asks_for_the_version_when_omni_reports_none() {
    let (sim, key) = start_at(0).await;
    let (_dir, template, key_file) = install_disk_template(&key);
    let args = |omni_api| TemplateArgs {
        file: template.clone(),
        omni_api,
        connection: connection(&sim, key_file.clone()),
    };
    let error = cli_error(Command::Diff(args(OmniApi::Auto))).await;
    assert!(
        error.contains("does not report a backend API version")
            && error.contains("--omni-api 2 or --omni-api 3"),
        "{error}"
    );
    let (code, out) = cli(Command::Diff(args(OmniApi::Version(BackendApi::V2)))).await;
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains(&install_disk_patch()), "{out}");
    sim.shutdown().await;
}
