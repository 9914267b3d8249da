//! The operator against Omni backend API versions 2 and 3 (omni-sim configured for each): the
//! install disk is a config patch on API 2 and a `MachineInstallDiskConfig` on API 3, a disk
//! selector needs API 3, an unknown version stalls the OmniConnection, and everything written
//! carries Omni's managed-by-gitops-tools annotation.

use crate::support;

use omni_client::proto::specs::{
    ClusterSpec, ConfigPatchSpec, ExtensionsConfigurationSpec, KernelArgsSpec,
    KubernetesHealthCheckSpec, KubernetesManifestGroupSpec, MachineInstallDiskConfigSpec,
    MachineSetSpec, TalosUpgradeStatusSpec, machine_set_spec, talos_upgrade_status_spec,
};
use omni_operator::api::{OmniCluster, OmniConnection, OmniControlPlane, OmniMachine};
use omni_sim::HealthCheckOutcome;
use omni_sim::store::decode_spec;
use omni_sim::types::ty;
use serde_json::json;
use support::condition;
use support::conditions::{assert_cond, is_false, is_true};
use support::env::{CONNECTION, Env, GITOPS_ANNOTATION, KEY_FIELD, annotation, eventually};

const MACHINE: &str = "22222222-2222-4222-8222-222222222222";

/// Cluster `demo` with one control-plane machine and its OmniMachine with `install`.
async fn cluster_with_install(env: &Env, install: serde_json::Value) {
    env.cluster("demo", MACHINE, json!({})).await;
    env.create_spec::<OmniMachine>(
        MACHINE,
        json!({"clusterRef": {"name": "demo"}, "install": install}),
    )
    .await;
}

async fn set_install(env: &Env, install: serde_json::Value) {
    env.patch_spec::<OmniMachine>(MACHINE, json!({ "install": install }))
        .await;
}

fn install_disk_patch_id() -> String {
    format!("000-cm-{MACHINE}-install-disk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_api_2_the_install_disk_is_a_config_patch_and_a_selector_is_refused() {
    let env = Env::builder().omni_api(2).start().await;
    cluster_with_install(&env, json!({"disk": "/dev/vda"})).await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;

    let patch = env
        .omni
        .get(ty::CONFIG_PATCH, &install_disk_patch_id())
        .unwrap_or_else(|| panic!("no install-disk ConfigPatch on API 2"));
    let spec: ConfigPatchSpec = decode_spec(&patch).unwrap_or_else(|e| panic!("{e}"));
    assert!(spec.data.contains("disk: /dev/vda"), "{}", spec.data);
    assert!(env.omni.list(ty::MACHINE_INSTALL_DISK_CONFIG).is_empty());
    // Everything the operator wrote names it as the managing tool, for Omni's UI.
    for t in [
        ty::CLUSTER,
        ty::MACHINE_SET,
        ty::MACHINE_SET_NODE,
        ty::CONFIG_PATCH,
    ] {
        for r in env.omni.list(t) {
            assert_eq!(
                annotation(&r, GITOPS_ANNOTATION).as_deref(),
                Some("omni-operator"),
                "{t} {:?}",
                r.metadata.as_ref().map(|m| &m.id)
            );
        }
    }

    // A CEL selector cannot be expressed on API 2: the sync fails naming the field, and the
    // install disk Omni has stays as it was.
    set_install(
        &env,
        json!({"disk": null, "diskSelector": "disk.transport == \"nvme\""}),
    )
    .await;
    let failed = env
        .wait_cond::<OmniCluster>("demo", is_false("Synced"))
        .await;
    // Only a spec change helps: stalled at once.
    let message = is_false("Synced").because("OmniRejected").message(&failed);
    assert_cond(&failed, is_true("Stalled").because("OmniRejected"));
    assert!(
        message.contains("install.diskSelector")
            && message.contains("needs Omni backend API version 3"),
        "{message}"
    );
    assert!(
        env.omni
            .get(ty::CONFIG_PATCH, &install_disk_patch_id())
            .is_some()
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_api_3_the_install_disk_is_a_machine_install_disk_config() {
    let env = Env::builder().omni_api(3).start().await;
    cluster_with_install(&env, json!({"disk": "/dev/vda"})).await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;

    let config = env
        .omni
        .get(ty::MACHINE_INSTALL_DISK_CONFIG, MACHINE)
        .unwrap_or_else(|| panic!("no MachineInstallDiskConfig on API 3"));
    let spec: MachineInstallDiskConfigSpec = decode_spec(&config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (spec.disk.as_str(), spec.disk_selector.as_str()),
        ("/dev/vda", "")
    );
    assert!(
        annotation(&config, "omni.sidero.dev/managed-by-cluster-templates").is_some(),
        "templates own it"
    );
    assert_eq!(
        annotation(&config, GITOPS_ANNOTATION).as_deref(),
        Some("omni-operator")
    );
    // API 3 refuses `machine.install.disk` in patches: none was written.
    assert!(
        env.omni
            .get(ty::CONFIG_PATCH, &install_disk_patch_id())
            .is_none()
    );

    // Switching to a selector updates the same resource (exclusive with `disk`).
    set_install(
        &env,
        json!({"disk": null, "diskSelector": "disk.transport == \"nvme\""}),
    )
    .await;
    eventually("the selector reaches Omni", || {
        env.omni
            .get(ty::MACHINE_INSTALL_DISK_CONFIG, MACHINE)
            .and_then(|r| decode_spec::<MachineInstallDiskConfigSpec>(&r).ok())
            .is_some_and(|s| s.disk.is_empty() && s.disk_selector == "disk.transport == \"nvme\"")
    })
    .await;

    // Dropping `install` returns the machine to automatic selection: the resource goes.
    set_install(&env, json!(null)).await;
    eventually("the install-disk config is deleted", || {
        env.omni
            .get(ty::MACHINE_INSTALL_DISK_CONFIG, MACHINE)
            .is_none()
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_disk_patch_is_refused_by_omni_on_api_3() {
    let env = Env::builder().omni_api(3).start().await;
    // Written by hand through a cluster-wide patch instead of `install.disk`.
    env.cluster(
        "demo",
        MACHINE,
        json!({"patches": [{"name": "disk", "inline": {"machine": {"install": {"disk": "/dev/sdb"}}}}]}),
    )
    .await;
    let failed = env
        .wait_cond::<OmniCluster>("demo", is_false("Synced"))
        .await;
    let (_, _, message) = condition(&failed, "Synced").unwrap_or_default();
    assert!(
        message.contains(r#"overriding "machine.install.disk" is not allowed in the config patch"#),
        "{message}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_backend_api_version_stalls_the_connection() {
    let env = Env::builder().omni_api(4).start().await;
    let conn = env
        .wait_cond::<OmniConnection>(CONNECTION, is_true("Stalled"))
        .await;
    let message = is_true("Stalled")
        .because("UnsupportedOmniAPI")
        .message(&conn);
    assert!(
        message.contains("Omni backend API version 4 is not supported")
            && message.contains("supported backend API versions: 2 and 3"),
        "{message}"
    );
    // Omni answered: reachable, just not usable.
    assert_cond(&conn, is_true("Reachable"));
    assert_cond(&conn, is_false("Ready").because("UnsupportedOmniAPI"));

    // An Omni upgrade to a supported version is picked up at the next check (a Secret touch
    // triggers one at once).
    env.omni.set_backend_api_version(3);
    env.touch_key_secret("1").await;
    env.wait_cond::<OmniConnection>(CONNECTION, is_true("Ready"))
        .await;
    env.shutdown().await;
}

fn extensions_of(env: &Env, id: &str) -> Option<Vec<String>> {
    env.omni
        .get(ty::EXTENSIONS_CONFIGURATION, id)
        .and_then(|r| decode_spec::<ExtensionsConfigurationSpec>(&r).ok())
        .map(|s| s.extensions)
}

fn kernel_args_of(env: &Env, machine: &str) -> Option<(Vec<String>, bool)> {
    let r = env.omni.get(ty::KERNEL_ARGS, machine)?;
    let managed = annotation(&r, "omni.sidero.dev/managed-by-cluster-templates").is_some();
    decode_spec::<KernelArgsSpec>(&r)
        .ok()
        .map(|s| (s.args, managed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_empty_list_clears_extensions_and_kernel_args_and_an_omitted_one_keeps_them() {
    let env = Env::builder().omni_api(2).start().await;
    env.cluster(
        "demo",
        MACHINE,
        json!({"systemExtensions": ["siderolabs/iscsi-tools"], "kernelArgs": ["console=ttyS0"]}),
    )
    .await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;
    assert_eq!(
        extensions_of(&env, "schematic-demo"),
        Some(vec!["siderolabs/iscsi-tools".to_string()])
    );
    assert_eq!(
        kernel_args_of(&env, MACHINE),
        Some((vec!["console=ttyS0".to_string()], true))
    );

    // `[]` is "defined and empty": Omni is told to install no extension and no argument.
    env.patch_spec::<OmniCluster>("demo", json!({"systemExtensions": [], "kernelArgs": []}))
        .await;
    eventually("the empty lists reach Omni", || {
        extensions_of(&env, "schematic-demo") == Some(Vec::new())
            && kernel_args_of(&env, MACHINE) == Some((Vec::new(), true))
    })
    .await;

    // Leaving the fields out (the original operator's only form) makes the template stop
    // managing them: the extensions configuration goes and the kernel arguments are released,
    // so Omni keeps what the machines have.
    env.patch_spec::<OmniCluster>(
        "demo",
        json!({"systemExtensions": null, "kernelArgs": null}),
    )
    .await;
    eventually("the lists are released", || {
        extensions_of(&env, "schematic-demo").is_none()
            && kernel_args_of(&env, MACHINE) == Some((Vec::new(), false))
    })
    .await;
    env.shutdown().await;
}

fn health_checks(c: &OmniCluster) -> Vec<omni_operator::api::cluster::HealthCheckStatus> {
    c.status
        .as_ref()
        .map(|s| s.health_checks.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_health_check_holds_the_talos_upgrade_and_is_reported_until_it_passes() {
    const CHECK: &str = "cluster-demo-dns";
    let env = Env::builder().omni_api(2).start().await;
    env.cluster("demo", MACHINE, json!({"kubernetes": {"version": "v1.35.0", "healthChecks": [{
            "name": "dns",
            "interval": "5s",
            "job": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "checks"},
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "dig", "image": "busybox", "command": ["nslookup", "kubernetes"]}]}}}},
        }]}}),
    )
    .await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;
    let check = env
        .omni
        .get(ty::HEALTH_CHECK, CHECK)
        .unwrap_or_else(|| panic!("no KubernetesHealthCheck in Omni"));
    let spec: KubernetesHealthCheckSpec = decode_spec(&check).unwrap_or_else(|e| panic!("{e}"));
    assert!(spec.job.contains("kind: Job"), "{}", spec.job);
    assert_eq!(spec.interval.map(|d| d.seconds), Some(5));
    // Omni runs checks only while it upgrades Talos: creating the cluster runs none.
    assert!(env.omni.health_check_status(CHECK).is_none());

    env.omni.set_health_check_outcome(
        CHECK,
        HealthCheckOutcome::Fail {
            error: "job failed: BackoffLimitExceeded".into(),
            output: ";; connection timed out; no servers could be reached".into(),
        },
    );
    env.patch_spec::<OmniCluster>("demo", json!({"talos": {"version": "v1.13.3"}}))
        .await;
    let failed = env
        .wait::<OmniCluster>("demo", "a FAILED health check", |c| {
            health_checks(c).iter().any(|h| h.state == "FAILED")
        })
        .await;
    let reported = health_checks(&failed);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].id, CHECK);
    assert_eq!(
        reported[0].error.as_deref(),
        Some("job failed: BackoffLimitExceeded")
    );
    assert_eq!(
        reported[0].output.as_deref(),
        Some(";; connection timed out; no servers could be reached")
    );
    assert_eq!(reported[0].job_namespace.as_deref(), Some("checks"));
    assert_eq!(
        reported[0].job_name.as_deref(),
        Some("omni-healthcheck-cluster-demo-dns")
    );
    // The failing check holds the upgrade; Omni says why in the upgrade's step.
    let upgrade = env
        .omni
        .get(ty::TALOS_UPGRADE_STATUS, "demo")
        .and_then(|r| decode_spec::<TalosUpgradeStatusSpec>(&r).ok())
        .unwrap_or_default();
    assert_eq!(
        upgrade.phase,
        talos_upgrade_status_spec::Phase::Upgrading as i32
    );
    assert!(
        upgrade
            .step
            .starts_with("waiting for healthchecks to pass: \"cluster-demo-dns\""),
        "{}",
        upgrade.step
    );
    let summary = failed
        .status
        .as_ref()
        .and_then(|s| s.last_status_output.clone())
        .unwrap_or_default();
    assert!(
        summary.contains("not healthy") && summary.contains("health check cluster-demo-dns"),
        "{summary}"
    );

    // Once the check passes (re-run after its 5s interval) the upgrade completes.
    env.omni
        .set_health_check_outcome(CHECK, HealthCheckOutcome::Pass);
    let passed = env
        .wait::<OmniCluster>("demo", "a PASSED health check", |c| {
            health_checks(c).iter().any(|h| h.state == "PASSED")
                && c.status
                    .as_ref()
                    .and_then(|s| s.last_status_output.as_deref())
                    .is_some_and(|o| o.contains("is healthy"))
        })
        .await;
    let reported = health_checks(&passed);
    assert_eq!(reported[0].error, None, "a pass clears the failure");
    let upgrade = env
        .omni
        .get(ty::TALOS_UPGRADE_STATUS, "demo")
        .and_then(|r| decode_spec::<TalosUpgradeStatusSpec>(&r).ok())
        .unwrap_or_default();
    assert_eq!(
        (upgrade.phase, upgrade.last_upgrade_version.as_str()),
        (talos_upgrade_status_spec::Phase::Done as i32, "1.13.3")
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_descriptors_string_manifests_new_features_and_a_control_plane_upgrade_strategy_reach_omni()
 {
    let env = Env::builder().omni_api(2).start().await;
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: jobs\n";
    env.cluster(
        "demo",
        "",
        json!({
            "kubernetes": {"version": "v1.35.0", "manifests": [{
                "name": "namespaces", "inline": text,
                "labels": {"team": "apps"}, "annotations": {"owner": "platform"},
            }]},
            "features": {"enableNodeAuditSkip": true},
        }),
    )
    .await;
    env.create_spec::<OmniControlPlane>(
        "demo-cp",
        json!({"clusterRef": {"name": "demo"}, "machines": [MACHINE],
               "upgradeStrategy": {"type": "Rolling", "rolling": {"maxParallelism": 1}}}),
    )
    .await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;

    let group = env
        .omni
        .get(ty::MANIFEST_GROUP, "200-cluster-demo-namespaces")
        .unwrap_or_else(|| panic!("no manifest group"));
    let meta = group.metadata.clone().unwrap_or_default();
    assert_eq!(meta.labels.get("team").map(String::as_str), Some("apps"));
    assert_eq!(
        meta.annotations.get("owner").map(String::as_str),
        Some("platform")
    );
    let spec: KubernetesManifestGroupSpec = decode_spec(&group).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec.data, text, "a string manifest is stored byte for byte");

    let cluster = env
        .omni
        .get(ty::CLUSTER, "demo")
        .unwrap_or_else(|| panic!("no cluster"));
    let spec: ClusterSpec = decode_spec(&cluster).unwrap_or_else(|e| panic!("{e}"));
    let features = spec.features.unwrap_or_default();
    assert!(features.enable_node_audit_skip);
    assert!(!features.disable_public_discovery_service);

    let set = env
        .omni
        .get(ty::MACHINE_SET, "demo-control-planes")
        .unwrap_or_else(|| panic!("no control plane"));
    let spec: MachineSetSpec = decode_spec(&set).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec.upgrade_strategy,
        machine_set_spec::UpdateStrategy::Rolling as i32
    );
    assert_eq!(
        spec.upgrade_strategy_config
            .and_then(|c| c.rolling)
            .map(|r| r.max_parallelism),
        Some(1)
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_talos_target_beyond_what_omni_supports_fails_the_sync_with_omnis_reason() {
    let env = Env::builder().omni_api(2).start().await;
    env.cluster("demo", MACHINE, json!({})).await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;
    // 1.14.0 is in Omni's catalogue, but beyond the newest minor this Omni release supports;
    // nothing offline can know that, so Omni's refusal is what the user sees.
    env.patch_spec::<OmniCluster>("demo", json!({"talos": {"version": "v1.14.0"}}))
        .await;
    let failed = env
        .wait_cond::<OmniCluster>("demo", is_false("Synced"))
        .await;
    // Only a spec change helps: stalled at once.
    let message = is_false("Synced").because("OmniRejected").message(&failed);
    assert_cond(&failed, is_true("Stalled").because("OmniRejected"));
    assert!(
        message.contains(r#"talos version "1.14.0" is not supported by this Omni release"#),
        "{message}"
    );
    let cluster = env
        .omni
        .get(ty::CLUSTER, "demo")
        .unwrap_or_else(|| panic!("no cluster"));
    let spec: ClusterSpec = decode_spec(&cluster).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec.talos_version, "1.13.2",
        "Omni kept the cluster as it was"
    );
    env.shutdown().await;
}

fn status_output(c: &OmniCluster) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.last_status_output.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_machine_omni_has_never_seen_keeps_the_cluster_unhealthy_until_it_connects() {
    // Omni accepts a MachineSetNode naming an unknown machine, but the machine never runs, so
    // neither its machine set nor the cluster counts it ready.
    let env = Env::builder()
        .omni_api(2)
        .unknown_machines_stay_away()
        .start()
        .await;
    env.cluster("demo", MACHINE, json!({})).await;
    env.wait_cond::<OmniCluster>("demo", is_true("Synced"))
        .await;
    let unknown = env
        .wait::<OmniCluster>(
            "demo",
            "Omni's status of a cluster whose machine does not exist",
            |c| status_output(c).contains("machines 0/1 healthy"),
        )
        .await;
    let output = status_output(&unknown);
    assert!(output.contains("is not healthy"), "{output}");
    assert!(output.contains("SCALING_UP"), "{output}");

    // The machine connects: the same cluster becomes healthy.
    env.connect_machine(MACHINE);
    let healthy = env
        .wait::<OmniCluster>(
            "demo",
            "a healthy cluster once the machine connected",
            |c| status_output(c).contains("machines 1/1 healthy"),
        )
        .await;
    assert!(
        status_output(&healthy).contains("is healthy"),
        "{}",
        status_output(&healthy)
    );
    env.shutdown().await;
}

fn typed(c: &OmniCluster) -> omni_operator::api::cluster::OmniClusterStatus {
    c.status.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_carries_omnis_phase_machine_counts_versions_and_manifest_sync_and_stays_quiet()
{
    use omni_operator::api::cluster::{MachineSetState, ManifestGroupState};

    // The machine is not known to Omni at first: the cluster scales up and its manifests wait.
    let env = Env::builder()
        .omni_api(2)
        .unknown_machines_stay_away()
        .start()
        .await;
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: jobs\n";
    env.cluster("demo", MACHINE, json!({"kubernetes": {"version": "v1.35.0", "manifests": [{"name": "namespaces", "inline": text}]}}),
    )
    .await;
    let waiting = env
        .wait::<OmniCluster>("demo", "a scaling-up cluster with pending manifests", |c| {
            typed(c).ready_machines.as_deref() == Some("0/1")
                && typed(c).manifests.is_some_and(|m| m.total == 2)
        })
        .await;
    let status = typed(&waiting);
    assert_eq!(status.omni_phase.as_deref(), Some("SCALING_UP"));
    assert_eq!(
        status.machine_sets,
        vec![MachineSetState {
            id: "demo-control-planes".into(),
            phase: "ScalingUp".into(),
            ready: false,
            ready_machines: 0,
            total_machines: 1,
        }]
    );
    let manifests = status.manifests.unwrap_or_default();
    assert!(!manifests.applied);
    assert_eq!(manifests.out_of_sync, 2);
    assert_eq!(
        manifests.groups,
        vec![ManifestGroupState {
            id: "200-cluster-demo-namespaces".into(),
            phase: "PENDING".into(),
        }]
    );

    // The machine connects: Omni runs the cluster and applies the manifests.
    env.connect_machine(MACHINE);
    let running = env
        .wait::<OmniCluster>("demo", "a running cluster with applied manifests", |c| {
            typed(c).omni_phase.as_deref() == Some("RUNNING")
                && typed(c).manifests.is_some_and(|m| m.applied)
        })
        .await;
    let status = typed(&running);
    assert_eq!(status.ready_machines.as_deref(), Some("1/1"));
    assert_eq!(status.talos_version.as_deref(), Some("1.13.2"));
    assert_eq!(status.kubernetes_version.as_deref(), Some("1.35.0"));
    assert_eq!(status.machine_sets[0].phase, "Running");
    assert!(status.machine_sets[0].ready);
    let manifests = status.manifests.unwrap_or_default();
    assert_eq!((manifests.total, manifests.out_of_sync), (2, 0));
    assert_eq!(manifests.groups[0].phase, "APPLIED");
    assert_eq!(manifests.last_error, "");

    // Quiet: more status reads that find nothing new write nothing.
    let writes = support::writes_to(&env.kube, &["omniclusters"]);
    let reads = || {
        env.omni
            .call_count(omni_sim::methods::GET, omni_sim::Outcome::Ok)
    };
    let before = reads();
    eventually("three more status reads", || reads() >= before + 3).await;
    assert_eq!(
        support::writes_to(&env.kube, &["omniclusters"]),
        writes,
        "an unchanged Omni status wrote the OmniCluster"
    );
    env.shutdown().await;
}

/// `key` with its `name` replaced: the same OpenPGP key claiming another account.
fn renamed_key(key: &str, name: &str) -> String {
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine
        .decode(key.trim())
        .unwrap_or_else(|e| panic!("key is not base64: {e}"));
    let mut json: serde_json::Value =
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("key is not JSON: {e}"));
    json["name"] = json!(name);
    engine.encode(json.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_claiming_another_account_name_connects_as_the_account_it_is_registered_to() {
    // Omni authenticates by the key's fingerprint; the name the key carries is sent in the
    // signature header but never checked. The connection works, with the registered account.
    let env = Env::builder().omni_api(2).start().await;
    let renamed = renamed_key(&env.key, "someone-else");
    assert_ne!(renamed, env.key);
    env.create_secret("renamed-key", json!({ KEY_FIELD: renamed }))
        .await;
    env.connection("renamed", "renamed-key").await;
    let conn = env
        .wait_cond::<OmniConnection>("renamed", is_true("Ready"))
        .await;
    assert_cond(&conn, is_true("Reachable"));
    let logs = support::operator_logs();
    assert!(
        !logs.contains(&renamed),
        "the renamed key appears in the logs"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_apply_error_is_reported_until_omni_applies_them() {
    let env = Env::builder().omni_api(2).start().await;
    env.omni.set_manifests_error(
        "demo",
        Some("retryable error occurred while applying manifests".into()),
    );
    env.cluster(
        "demo",
        MACHINE,
        json!({"kubernetes": {"version": "v1.35.0", "manifests": [{"name": "ns",
            "inline": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n"}]}}),
    )
    .await;
    let failing = env
        .wait::<OmniCluster>("demo", "Omni's manifest apply error", |c| {
            typed(c).manifests.is_some_and(|m| !m.last_error.is_empty())
        })
        .await;
    let manifests = typed(&failing).manifests.unwrap_or_default();
    assert_eq!(
        manifests.last_error,
        "retryable error occurred while applying manifests"
    );
    assert!(!manifests.applied);
    assert_eq!((manifests.total, manifests.out_of_sync), (1, 1));

    env.omni.set_manifests_error("demo", None);
    let applied = env
        .wait::<OmniCluster>("demo", "applied manifests without an error", |c| {
            typed(c).manifests.is_some_and(|m| m.applied)
        })
        .await;
    // The error is gone from the stored status, not only from what the operator computed.
    assert_eq!(
        typed(&applied).manifests.map(|m| m.last_error).as_deref(),
        Some("")
    );
    env.shutdown().await;
}
