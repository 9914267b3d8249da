//! The operator against Omni backend API versions 2 and 3 (omni-sim configured for each): the
//! install disk is a config patch on API 2 and a `MachineInstallDiskConfig` on API 3, a disk
//! selector needs API 3, an unknown version stalls the OmniConnection, and everything written
//! carries Omni's managed-by-gitops-tools annotation.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use omni_client::proto::specs::{
    ClusterSpec, ConfigPatchSpec, ExtensionsConfigurationSpec, KernelArgsSpec,
    KubernetesHealthCheckSpec, KubernetesManifestGroupSpec, MachineInstallDiskConfigSpec,
    MachineSetSpec, TalosUpgradeStatusSpec, machine_set_spec, talos_upgrade_status_spec,
};
use omni_operator::api::{OmniCluster, OmniConnection, OmniControlPlane, OmniMachine};
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_sim::store::decode_spec;
use omni_sim::types::ty;
use omni_sim::{HealthCheckOutcome, OmniSim, PoolMachine, Role, RunningOmniSim};
use serde_json::json;
use support::{condition, wait_for};
use tokio::time::Instant;

const NS: &str = "omni-api";
const MACHINE: &str = "22222222-2222-4222-8222-222222222222";
const GITOPS_ANNOTATION: &str = "omni.sidero.dev/managed-by-gitops-tools";
const WAIT: Duration = Duration::from_secs(240);

/// kube-sim with our CRDs, omni-sim at `api_version`, the key Secret, an OmniConnection and
/// the embedded operator.
struct Env {
    kube: kube_sim::server::RunningKubeSim,
    client: kube::Client,
    sim: RunningOmniSim,
    key: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    operator: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Env {
    async fn start(api_version: u32) -> Env {
        // Static machine IDs in these tests are not seeded: let them connect.
        Env::start_with(api_version, true).await
    }

    /// `auto_register`: whether machines named by static IDs connect without being seeded.
    async fn start_with(api_version: u32, auto_register: bool) -> Env {
        support::operator_logs();
        let (kube, client) = support::kube_sim().await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in omni_operator::api::crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("create CRD: {e}"));
        }
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace: {e}"));
        let clusters: Api<OmniCluster> = Api::namespaced(client.clone(), NS);
        let until = Instant::now() + WAIT;
        while clusters.list(&ListParams::default()).await.is_err() {
            assert!(Instant::now() < until, "CRDs never became servable");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sim = OmniSim::builder()
            .auto_register_machines(auto_register)
            .status_step(Duration::from_millis(20))
            .backend_api_version(api_version)
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        let key = sim
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "omni-key", "namespace": NS},
            "stringData": {"serviceAccountKey": key},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("create Secret: {e}"));
        let config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let operator = tokio::spawn(run_operator(config, client.clone(), async move {
            let _ = rx.await;
        }));
        let env = Env {
            kube,
            client,
            sim,
            key,
            stop: Some(tx),
            operator: Some(operator),
        };
        env.create::<OmniConnection>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": "omni", "namespace": NS},
            "spec": {
                "endpoint": env.sim.endpoint(),
                "auth": {"serviceAccountSecretRef": {"name": "omni-key", "key": "serviceAccountKey"}},
            },
        }))
        .await;
        env
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create<K>(&self, obj: serde_json::Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let typed: K = serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
        self.api::<K>()
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", typed.name_any()))
    }

    /// Cluster `demo` with one control-plane machine and its OmniMachine with `install`.
    async fn cluster_with_install(&self, install: serde_json::Value) {
        self.create::<OmniCluster>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "demo", "namespace": NS},
            "spec": {
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
                "syncInterval": "1s",
            },
        }))
        .await;
        self.create::<OmniControlPlane>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniControlPlane",
            "metadata": {"name": "demo-cp", "namespace": NS},
            "spec": {"clusterRef": {"name": "demo"}, "machines": [MACHINE]},
        }))
        .await;
        self.create::<OmniMachine>(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniMachine",
            "metadata": {"name": MACHINE, "namespace": NS},
            "spec": {"clusterRef": {"name": "demo"}, "install": install},
        }))
        .await;
    }

    async fn set_install(&self, install: serde_json::Value) {
        self.api::<OmniMachine>()
            .patch(
                MACHINE,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"install": install}})),
            )
            .await
            .unwrap_or_else(|e| panic!("patch OmniMachine: {e}"));
    }

    async fn synced(&self, status: &str) -> OmniCluster {
        wait_for(&self.api::<OmniCluster>(), "demo", "Synced", |c| {
            condition(c, "Synced").is_some_and(|(s, _, _)| s == status)
        })
        .await
    }

    async fn shutdown(mut self) {
        let logs = support::operator_logs();
        assert!(!logs.contains(&self.key), "the key appears in the logs");
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.operator.take() {
            let joined = tokio::time::timeout(WAIT, task)
                .await
                .unwrap_or_else(|_| panic!("operator did not stop"));
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("operator failed: {e:#}"),
                Err(e) => panic!("operator task: {e}"),
            }
        }
        self.sim.shutdown().await;
        self.kube.shutdown();
    }
}

async fn eventually(what: &str, mut pred: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while !pred() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn install_disk_patch_id() -> String {
    format!("000-cm-{MACHINE}-install-disk")
}

fn annotation(r: &omni_client::proto::cosi::resource::Resource, key: &str) -> Option<String> {
    r.metadata.as_ref()?.annotations.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_api_2_the_install_disk_is_a_config_patch_and_a_selector_is_refused() {
    let env = Env::start(2).await;
    env.cluster_with_install(json!({"disk": "/dev/vda"})).await;
    env.synced("True").await;

    let patch = env
        .sim
        .get(ty::CONFIG_PATCH, &install_disk_patch_id())
        .unwrap_or_else(|| panic!("no install-disk ConfigPatch on API 2"));
    let spec: ConfigPatchSpec = decode_spec(&patch).unwrap_or_else(|e| panic!("{e}"));
    assert!(spec.data.contains("disk: /dev/vda"), "{}", spec.data);
    assert!(env.sim.list(ty::MACHINE_INSTALL_DISK_CONFIG).is_empty());
    // Everything the operator wrote names it as the managing tool, for Omni's UI.
    for t in [
        ty::CLUSTER,
        ty::MACHINE_SET,
        ty::MACHINE_SET_NODE,
        ty::CONFIG_PATCH,
    ] {
        for r in env.sim.list(t) {
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
    env.set_install(json!({"disk": null, "diskSelector": "disk.transport == \"nvme\""}))
        .await;
    let failed = env.synced("False").await;
    let (_, reason, message) = condition(&failed, "Synced").unwrap_or_default();
    assert_eq!(reason, "SyncFailed");
    assert!(
        message.contains("install.diskSelector")
            && message.contains("needs Omni backend API version 3"),
        "{message}"
    );
    assert!(
        env.sim
            .get(ty::CONFIG_PATCH, &install_disk_patch_id())
            .is_some()
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_api_3_the_install_disk_is_a_machine_install_disk_config() {
    let env = Env::start(3).await;
    env.cluster_with_install(json!({"disk": "/dev/vda"})).await;
    env.synced("True").await;

    let config = env
        .sim
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
        env.sim
            .get(ty::CONFIG_PATCH, &install_disk_patch_id())
            .is_none()
    );

    // Switching to a selector updates the same resource (exclusive with `disk`).
    env.set_install(json!({"disk": null, "diskSelector": "disk.transport == \"nvme\""}))
        .await;
    eventually("the selector reaches Omni", || {
        env.sim
            .get(ty::MACHINE_INSTALL_DISK_CONFIG, MACHINE)
            .and_then(|r| decode_spec::<MachineInstallDiskConfigSpec>(&r).ok())
            .is_some_and(|s| s.disk.is_empty() && s.disk_selector == "disk.transport == \"nvme\"")
    })
    .await;

    // Dropping `install` returns the machine to automatic selection: the resource goes.
    env.api::<OmniMachine>()
        .patch(
            MACHINE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"install": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch OmniMachine: {e}"));
    eventually("the install-disk config is deleted", || {
        env.sim
            .get(ty::MACHINE_INSTALL_DISK_CONFIG, MACHINE)
            .is_none()
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_disk_patch_is_refused_by_omni_on_api_3() {
    let env = Env::start(3).await;
    // Written by hand through a cluster-wide patch instead of `install.disk`.
    env.create::<OmniCluster>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": "demo", "namespace": NS},
        "spec": {
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "syncInterval": "1s",
            "patches": [{"name": "disk", "inline": {"machine": {"install": {"disk": "/dev/sdb"}}}}],
        },
    }))
    .await;
    env.create::<OmniControlPlane>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniControlPlane",
        "metadata": {"name": "demo-cp", "namespace": NS},
        "spec": {"clusterRef": {"name": "demo"}, "machines": [MACHINE]},
    }))
    .await;
    let failed = env.synced("False").await;
    let (_, _, message) = condition(&failed, "Synced").unwrap_or_default();
    assert!(
        message.contains(r#"overriding "machine.install.disk" is not allowed in the config patch"#),
        "{message}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_backend_api_version_stalls_the_connection() {
    let env = Env::start(4).await;
    let conn = wait_for(&env.api::<OmniConnection>(), "omni", "Stalled", |c| {
        condition(c, "Stalled").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let (_, reason, message) = condition(&conn, "Stalled").unwrap_or_default();
    assert_eq!(reason, "UnsupportedOmniAPI");
    assert!(
        message.contains("Omni backend API version 4 is not supported")
            && message.contains("supported backend API versions: 2 and 3"),
        "{message}"
    );
    // Omni answered: reachable, just not usable.
    assert_eq!(
        condition(&conn, "Reachable").map(|(s, _, _)| s).as_deref(),
        Some("True")
    );
    assert_eq!(
        condition(&conn, "Ready").map(|(s, r, _)| (s, r)),
        Some(("False".to_string(), "UnsupportedOmniAPI".to_string()))
    );

    // An Omni upgrade to a supported version is picked up at the next check (a Secret touch
    // triggers one at once).
    env.sim.set_backend_api_version(3);
    env.api::<Secret>()
        .patch(
            "omni-key",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("touch Secret: {e}"));
    wait_for(&env.api::<OmniConnection>(), "omni", "Ready", |c| {
        condition(c, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    env.shutdown().await;
}

/// Cluster `demo` with one static control-plane machine and `extra` merged into its spec.
async fn static_cluster(env: &Env, extra: serde_json::Value) {
    let mut spec = json!({
        "connectionRef": {"name": "omni"},
        "kubernetes": {"version": "v1.35.0"},
        "talos": {"version": "v1.13.2"},
        "syncInterval": "1s",
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    env.create::<OmniCluster>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": "demo", "namespace": NS},
        "spec": spec,
    }))
    .await;
    env.create::<OmniControlPlane>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniControlPlane",
        "metadata": {"name": "demo-cp", "namespace": NS},
        "spec": {"clusterRef": {"name": "demo"}, "machines": [MACHINE]},
    }))
    .await;
}

async fn patch_cluster_spec(env: &Env, spec: serde_json::Value) {
    env.api::<OmniCluster>()
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap_or_else(|e| panic!("patch OmniCluster: {e}"));
}

fn extensions_of(env: &Env, id: &str) -> Option<Vec<String>> {
    env.sim
        .get(ty::EXTENSIONS_CONFIGURATION, id)
        .and_then(|r| decode_spec::<ExtensionsConfigurationSpec>(&r).ok())
        .map(|s| s.extensions)
}

fn kernel_args_of(env: &Env, machine: &str) -> Option<(Vec<String>, bool)> {
    let r = env.sim.get(ty::KERNEL_ARGS, machine)?;
    let managed = annotation(&r, "omni.sidero.dev/managed-by-cluster-templates").is_some();
    decode_spec::<KernelArgsSpec>(&r)
        .ok()
        .map(|s| (s.args, managed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_empty_list_clears_extensions_and_kernel_args_and_an_omitted_one_keeps_them() {
    let env = Env::start(2).await;
    static_cluster(
        &env,
        json!({"systemExtensions": ["siderolabs/iscsi-tools"], "kernelArgs": ["console=ttyS0"]}),
    )
    .await;
    env.synced("True").await;
    assert_eq!(
        extensions_of(&env, "schematic-demo"),
        Some(vec!["siderolabs/iscsi-tools".to_string()])
    );
    assert_eq!(
        kernel_args_of(&env, MACHINE),
        Some((vec!["console=ttyS0".to_string()], true))
    );

    // `[]` is "defined and empty": Omni is told to install no extension and no argument.
    patch_cluster_spec(&env, json!({"systemExtensions": [], "kernelArgs": []})).await;
    eventually("the empty lists reach Omni", || {
        extensions_of(&env, "schematic-demo") == Some(Vec::new())
            && kernel_args_of(&env, MACHINE) == Some((Vec::new(), true))
    })
    .await;

    // Leaving the fields out (the original operator's only form) makes the template stop
    // managing them: the extensions configuration goes and the kernel arguments are released,
    // so Omni keeps what the machines have.
    patch_cluster_spec(&env, json!({"systemExtensions": null, "kernelArgs": null})).await;
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
    let env = Env::start(2).await;
    static_cluster(
        &env,
        json!({"kubernetes": {"version": "v1.35.0", "healthChecks": [{
            "name": "dns",
            "interval": "5s",
            "job": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "checks"},
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "dig", "image": "busybox", "command": ["nslookup", "kubernetes"]}]}}}},
        }]}}),
    )
    .await;
    env.synced("True").await;
    let check = env
        .sim
        .get(ty::HEALTH_CHECK, CHECK)
        .unwrap_or_else(|| panic!("no KubernetesHealthCheck in Omni"));
    let spec: KubernetesHealthCheckSpec = decode_spec(&check).unwrap_or_else(|e| panic!("{e}"));
    assert!(spec.job.contains("kind: Job"), "{}", spec.job);
    assert_eq!(spec.interval.map(|d| d.seconds), Some(5));
    // Omni runs checks only while it upgrades Talos: creating the cluster runs none.
    assert!(env.sim.health_check_status(CHECK).is_none());

    env.sim.set_health_check_outcome(
        CHECK,
        HealthCheckOutcome::Fail {
            error: "job failed: BackoffLimitExceeded".into(),
            output: ";; connection timed out; no servers could be reached".into(),
        },
    );
    patch_cluster_spec(&env, json!({"talos": {"version": "v1.13.3"}})).await;
    let failed = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "a FAILED health check",
        |c| health_checks(c).iter().any(|h| h.state == "FAILED"),
    )
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
        .sim
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
    env.sim
        .set_health_check_outcome(CHECK, HealthCheckOutcome::Pass);
    let passed = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "a PASSED health check",
        |c| {
            health_checks(c).iter().any(|h| h.state == "PASSED")
                && c.status
                    .as_ref()
                    .and_then(|s| s.last_status_output.as_deref())
                    .is_some_and(|o| o.contains("is healthy"))
        },
    )
    .await;
    let reported = health_checks(&passed);
    assert_eq!(reported[0].error, None, "a pass clears the failure");
    let upgrade = env
        .sim
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
    let env = Env::start(2).await;
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: jobs\n";
    env.create::<OmniCluster>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": "demo", "namespace": NS},
        "spec": {
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0", "manifests": [{
                "name": "namespaces", "inline": text,
                "labels": {"team": "apps"}, "annotations": {"owner": "platform"},
            }]},
            "talos": {"version": "v1.13.2"},
            "features": {"enableNodeAuditSkip": true},
            "syncInterval": "1s",
        },
    }))
    .await;
    env.create::<OmniControlPlane>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniControlPlane",
        "metadata": {"name": "demo-cp", "namespace": NS},
        "spec": {"clusterRef": {"name": "demo"}, "machines": [MACHINE],
                 "upgradeStrategy": {"type": "Rolling", "rolling": {"maxParallelism": 1}}},
    }))
    .await;
    env.synced("True").await;

    let group = env
        .sim
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
        .sim
        .get(ty::CLUSTER, "demo")
        .unwrap_or_else(|| panic!("no cluster"));
    let spec: ClusterSpec = decode_spec(&cluster).unwrap_or_else(|e| panic!("{e}"));
    let features = spec.features.unwrap_or_default();
    assert!(features.enable_node_audit_skip);
    assert!(!features.disable_public_discovery_service);

    let set = env
        .sim
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
    let env = Env::start(2).await;
    static_cluster(&env, json!({})).await;
    env.synced("True").await;
    // 1.14.0 is in Omni's catalogue, but beyond the newest minor this Omni release supports;
    // nothing offline can know that, so Omni's refusal is what the user sees.
    patch_cluster_spec(&env, json!({"talos": {"version": "v1.14.0"}})).await;
    let failed = env.synced("False").await;
    let (_, reason, message) = condition(&failed, "Synced").unwrap_or_default();
    assert_eq!(reason, "SyncFailed");
    assert!(
        message.contains(r#"talos version "1.14.0" is not supported by this Omni release"#),
        "{message}"
    );
    let cluster = env
        .sim
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
    let env = Env::start_with(2, false).await;
    static_cluster(&env, json!({})).await;
    env.synced("True").await;
    let unknown = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "Omni's status of a cluster whose machine does not exist",
        |c| status_output(c).contains("machines 0/1 healthy"),
    )
    .await;
    let output = status_output(&unknown);
    assert!(output.contains("is not healthy"), "{output}");
    assert!(output.contains("SCALING_UP"), "{output}");

    // The machine connects: the same cluster becomes healthy.
    env.sim.add_machine(PoolMachine {
        id: MACHINE.into(),
        ..Default::default()
    });
    let healthy = wait_for(
        &env.api::<OmniCluster>(),
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
    let env = Env::start_with(2, false).await;
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: jobs\n";
    static_cluster(
        &env,
        json!({"kubernetes": {"version": "v1.35.0", "manifests": [{"name": "namespaces", "inline": text}]}}),
    )
    .await;
    let waiting = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "a scaling-up cluster with pending manifests",
        |c| {
            typed(c).ready_machines.as_deref() == Some("0/1")
                && typed(c).manifests.is_some_and(|m| m.total == 2)
        },
    )
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
    env.sim.add_machine(PoolMachine {
        id: MACHINE.into(),
        ..Default::default()
    });
    let running = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "a running cluster with applied manifests",
        |c| {
            typed(c).omni_phase.as_deref() == Some("RUNNING")
                && typed(c).manifests.is_some_and(|m| m.applied)
        },
    )
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
        env.sim
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
    let env = Env::start(2).await;
    let renamed = renamed_key(&env.key, "someone-else");
    assert_ne!(renamed, env.key);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "renamed-key", "namespace": NS},
        "stringData": {"serviceAccountKey": renamed},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("create Secret: {e}"));
    env.create::<OmniConnection>(json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniConnection",
        "metadata": {"name": "renamed", "namespace": NS},
        "spec": {
            "endpoint": env.sim.endpoint(),
            "auth": {"serviceAccountSecretRef": {"name": "renamed-key", "key": "serviceAccountKey"}},
        },
    }))
    .await;
    let conn = wait_for(&env.api::<OmniConnection>(), "renamed", "Ready", |c| {
        condition(c, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!(
        condition(&conn, "Reachable").map(|(s, _, _)| s).as_deref(),
        Some("True")
    );
    let logs = support::operator_logs();
    assert!(
        !logs.contains(&renamed),
        "the renamed key appears in the logs"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_apply_error_is_reported_until_omni_applies_them() {
    let env = Env::start(2).await;
    env.sim.set_manifests_error(
        "demo",
        Some("retryable error occurred while applying manifests".into()),
    );
    static_cluster(
        &env,
        json!({"kubernetes": {"version": "v1.35.0", "manifests": [{"name": "ns",
            "inline": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n"}]}}),
    )
    .await;
    let failing = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "Omni's manifest apply error",
        |c| typed(c).manifests.is_some_and(|m| !m.last_error.is_empty()),
    )
    .await;
    let manifests = typed(&failing).manifests.unwrap_or_default();
    assert_eq!(
        manifests.last_error,
        "retryable error occurred while applying manifests"
    );
    assert!(!manifests.applied);
    assert_eq!((manifests.total, manifests.out_of_sync), (1, 1));

    env.sim.set_manifests_error("demo", None);
    let applied = wait_for(
        &env.api::<OmniCluster>(),
        "demo",
        "applied manifests without an error",
        |c| typed(c).manifests.is_some_and(|m| m.applied),
    )
    .await;
    // The error is gone from the stored status, not only from what the operator computed.
    assert_eq!(
        typed(&applied).manifests.map(|m| m.last_error).as_deref(),
        Some("")
    );
    env.shutdown().await;
}
