//! Omni 2026 behaviour on both backend API versions the operator speaks (omni-sim configured
//! for 2 and for 3): health checks reach Omni and their results come back, an explicit `[]`
//! clears extensions and kernel arguments, patches Omni forbids are refused at admission with
//! Omni's own reasons, an Omni upgrade from API 2 to 3 moves the install disk, a backend
//! without an API version stalls the connection, and each manifest group shows what Omni has
//! not applied yet.

use crate::support;

use omni_client::proto::specs::{
    ConfigPatchSpec, ExtensionsConfigurationSpec, KernelArgsSpec, KubernetesHealthCheckSpec,
    MachineInstallDiskConfigSpec, TalosUpgradeStatusSpec, talos_upgrade_status_spec,
};
use omni_client::transport::{Client, ClientConfig};
use omni_operator::api::{OmniCluster, OmniConnection, OmniMachine};
use omni_sim::HealthCheckOutcome;
use omni_sim::store::decode_spec;
use omni_sim::types::ty;
use serde_json::json;
use support::conditions::{is_false, is_true};
use support::env::{CONNECTION, Env, GITOPS_ANNOTATION, NS, annotation, eventually};

/// The OmniCluster (also its name in Omni) of every scenario.
const CLUSTER: &str = "demo";
/// Its one static control-plane machine.
const MACHINE: &str = "22222222-2222-4222-8222-222222222222";

/// The environment with omni-sim speaking backend API `api_version`.
async fn start(api_version: u32) -> Env {
    Env::builder().omni_api(api_version).start().await
}

/// OmniCluster [`CLUSTER`] with `extra` merged into its spec, on the one machine [`MACHINE`].
async fn static_cluster(env: &Env, extra: serde_json::Value) {
    env.cluster(CLUSTER, MACHINE, extra).await;
}

async fn synced(env: &Env) -> OmniCluster {
    env.wait_cond(CLUSTER, is_true("Synced")).await
}

async fn patch_cluster_spec(env: &Env, spec: serde_json::Value) {
    env.patch_spec::<OmniCluster>(CLUSTER, spec).await;
}

// ---------------------------------------------------------------------------------------------
// Health checks

fn health_checks(c: &OmniCluster) -> Vec<omni_operator::api::cluster::HealthCheckStatus> {
    c.status
        .as_ref()
        .map(|s| s.health_checks.clone())
        .unwrap_or_default()
}

/// A health check becomes Omni's `KubernetesHealthCheck`; during a Talos upgrade a failing run
/// is reported in `status.healthChecks` (and holds the upgrade) until a run passes.
async fn health_checks_render_and_report(api_version: u32) {
    const CHECK: &str = "cluster-demo-ready";
    let env = start(api_version).await;
    static_cluster(
        &env,
        json!({"kubernetes": {"version": "v1.35.0", "healthChecks": [{
            "name": "ready",
            "interval": "5s",
            "job": {"apiVersion": "batch/v1", "kind": "Job",
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "probe", "image": "busybox", "command": ["true"]}]}}}},
        }]}}),
    )
    .await;
    synced(&env).await;
    let check = env
        .omni
        .get(ty::HEALTH_CHECK, CHECK)
        .unwrap_or_else(|| panic!("no KubernetesHealthCheck in Omni at API {api_version}"));
    let spec: KubernetesHealthCheckSpec = decode_spec(&check).unwrap_or_else(|e| panic!("{e}"));
    assert!(spec.job.contains("kind: Job"), "{}", spec.job);
    assert_eq!(spec.interval.map(|d| d.seconds), Some(5));
    assert_eq!(
        annotation(&check, GITOPS_ANNOTATION).as_deref(),
        Some("omni-operator")
    );

    env.omni.set_health_check_outcome(
        CHECK,
        HealthCheckOutcome::Fail {
            error: "job failed: DeadlineExceeded".into(),
            output: "probe timed out".into(),
        },
    );
    patch_cluster_spec(&env, json!({"talos": {"version": "v1.13.3"}})).await;
    let failed = env
        .wait::<OmniCluster>(CLUSTER, "a FAILED health check", |c| {
            health_checks(c).iter().any(|h| h.state == "FAILED")
        })
        .await;
    let reported = health_checks(&failed);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(
        (reported[0].id.as_str(), reported[0].error.as_deref()),
        (CHECK, Some("job failed: DeadlineExceeded"))
    );
    assert_eq!(reported[0].output.as_deref(), Some("probe timed out"));
    // Omni's default Job namespace, and the runner name it derives from the check's ID.
    assert_eq!(reported[0].job_namespace.as_deref(), Some("default"));
    assert_eq!(
        reported[0].job_name.as_deref(),
        Some("omni-healthcheck-cluster-demo-ready")
    );
    // The failure holds the Talos upgrade, and Omni says so.
    let held = env
        .omni
        .get(ty::TALOS_UPGRADE_STATUS, CLUSTER)
        .and_then(|r| decode_spec::<TalosUpgradeStatusSpec>(&r).ok())
        .unwrap_or_default();
    assert_eq!(
        held.phase,
        talos_upgrade_status_spec::Phase::Upgrading as i32
    );
    assert!(
        held.step
            .starts_with("waiting for healthchecks to pass: \"cluster-demo-ready\""),
        "{}",
        held.step
    );

    env.omni
        .set_health_check_outcome(CHECK, HealthCheckOutcome::Pass);
    let passed = env
        .wait::<OmniCluster>(CLUSTER, "a PASSED health check", |c| {
            health_checks(c).iter().any(|h| h.state == "PASSED")
        })
        .await;
    assert_eq!(health_checks(&passed)[0].error, None);
    eventually("the held upgrade to finish", || {
        env.omni
            .get(ty::TALOS_UPGRADE_STATUS, CLUSTER)
            .and_then(|r| decode_spec::<TalosUpgradeStatusSpec>(&r).ok())
            .is_some_and(|u| {
                u.phase == talos_upgrade_status_spec::Phase::Done as i32
                    && u.last_upgrade_version == "1.13.3"
            })
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_render_and_report_on_api_2() {
    health_checks_render_and_report(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_render_and_report_on_api_3() {
    health_checks_render_and_report(3).await;
}

// ---------------------------------------------------------------------------------------------
// Clearing extensions and kernel arguments

fn extensions_of(env: &Env, id: &str) -> Option<Vec<String>> {
    env.omni
        .get(ty::EXTENSIONS_CONFIGURATION, id)
        .and_then(|r| decode_spec::<ExtensionsConfigurationSpec>(&r).ok())
        .map(|s| s.extensions)
}

fn kernel_args_of(env: &Env, machine: &str) -> Option<Vec<String>> {
    env.omni
        .get(ty::KERNEL_ARGS, machine)
        .and_then(|r| decode_spec::<KernelArgsSpec>(&r).ok())
        .map(|s| s.args)
}

/// Removing every extension with an explicit `[]` reaches Omni as an empty list (the original
/// implementation left them installed).
async fn an_explicit_empty_list_clears_extensions(api_version: u32) {
    let env = start(api_version).await;
    static_cluster(
        &env,
        json!({
            "systemExtensions": ["siderolabs/iscsi-tools", "siderolabs/qemu-guest-agent"],
            "kernelArgs": ["console=ttyS0"],
        }),
    )
    .await;
    synced(&env).await;
    assert_eq!(
        extensions_of(&env, "schematic-demo").map(|e| e.len()),
        Some(2)
    );
    assert_eq!(
        kernel_args_of(&env, MACHINE),
        Some(vec!["console=ttyS0".to_string()])
    );

    patch_cluster_spec(&env, json!({"systemExtensions": [], "kernelArgs": []})).await;
    eventually("the extensions and kernel arguments to be cleared", || {
        extensions_of(&env, "schematic-demo") == Some(Vec::new())
            && kernel_args_of(&env, MACHINE) == Some(Vec::new())
    })
    .await;
    // The operator reports the edit itself as synced, not only an earlier generation.
    env.wait::<OmniCluster>(CLUSTER, "the cleared lists synced", |c| {
        c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
            && is_true("Synced").holds(c)
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_empty_list_clears_extensions_on_api_2() {
    an_explicit_empty_list_clears_extensions(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_empty_list_clears_extensions_on_api_3() {
    an_explicit_empty_list_clears_extensions(3).await;
}

// ---------------------------------------------------------------------------------------------
// Patches Omni forbids

/// Each patch Omni v1.10 refuses, with the reason Omni gives.
fn forbidden_patches() -> Vec<(serde_json::Value, &'static str)> {
    let key = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t";
    vec![
        (
            json!({"cluster": {"ca": {"crt": "Y2VydA==", "key": key}}}),
            r#"overriding "cluster.ca" is not allowed in the config patch"#,
        ),
        (
            json!({"cluster": {"serviceAccount": {"key": key}}}),
            r#"overriding "cluster.serviceAccount" is not allowed in the config patch"#,
        ),
        (
            json!("apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n"),
            r#"the "KubeAPIServerCAConfig" document is not allowed in the config patch"#,
        ),
        (
            json!([{"machine": {}}, {"apiVersion": "v1alpha1", "kind": "KubeAggregatorCAConfig"}]),
            r#"the "KubeAggregatorCAConfig" document is not allowed in the config patch"#,
        ),
        (
            json!({"apiVersion": "v1alpha1", "kind": "KubeServiceAccountConfig", "issuer": {"privateKey": key}}),
            r#"overriding "issuer.privateKey" is not allowed in the config patch"#,
        ),
    ]
}

/// A patch's inline value as the YAML text Omni stores (a string is taken as is).
fn patch_text(inline: &serde_json::Value) -> String {
    match inline {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Array(docs) => docs
            .iter()
            .map(|d| serde_saphyr::to_string(d).unwrap_or_else(|e| panic!("{e}")))
            .collect::<Vec<_>>()
            .join("---\n"),
        doc => serde_saphyr::to_string(doc).unwrap_or_else(|e| panic!("{e}")),
    }
}

fn cluster_with_patch(inline: &serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "omni.texashpc.com/v1alpha1",
        "kind": "OmniCluster",
        "metadata": {"name": CLUSTER, "namespace": NS, "uid": "0b5e7a9c-0000-4000-8000-000000000017"},
        "spec": {
            "connectionRef": {"name": CONNECTION},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "patches": [{"name": "p", "inline": inline}],
        },
    })
}

/// What the admission webhook answers for creating `object`.
fn admit(object: serde_json::Value) -> serde_json::Value {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7c1f0d2e-1717-4717-8717-171717171717",
            "kind": {"group": "omni.texashpc.com", "version": "v1alpha1", "kind": "OmniCluster"},
            "resource": {"group": "omni.texashpc.com", "version": "v1alpha1", "resource": "omniclusters"},
            "name": CLUSTER,
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": object,
            "dryRun": false
        }
    });
    let review = serde_json::from_value(review).unwrap_or_else(|e| panic!("review: {e}"));
    let answer = omni_operator::process::webhook::review("omnicluster", review);
    serde_json::to_value(answer).unwrap_or_else(|e| panic!("{e}"))["response"].clone()
}

/// Every patch Omni forbids is refused by the admission webhook with exactly the reason Omni
/// gives for it (Omni, here omni-sim at `api_version`, is asked too); with admission bypassed
/// the operator refuses the object itself and nothing reaches Omni.
async fn forbidden_patches_are_refused_at_admission_with_omnis_reasons(api_version: u32) {
    let env = start(api_version).await;
    let omni = Client::new(
        ClientConfig::from_encoded_key(env.omni.endpoint().to_string(), &env.key)
            .unwrap_or_else(|e| panic!("key: {e}")),
    )
    .unwrap_or_else(|e| panic!("client: {e}"));
    for (i, (inline, reason)) in forbidden_patches().into_iter().enumerate() {
        let answer = admit(cluster_with_patch(&inline));
        assert_eq!(answer["allowed"], false, "{answer}");
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            message,
            format!(
                "OmniCluster.omni.texashpc.com \"demo\" is invalid: spec.patches[0].inline: Forbidden: {reason}"
            ),
            "admission"
        );
        // The key material in the patch is never echoed.
        assert!(!message.contains("LS0t"), "{message}");

        // Omni itself gives the same reason for the same patch.
        let patch = omni_sim::store::resource(
            ty::CONFIG_PATCH,
            &format!("400-forbidden-{i}"),
            "",
            Vec::new(),
            &ConfigPatchSpec {
                data: patch_text(&inline),
                ..Default::default()
            },
        );
        let refused = omni
            .state()
            .create(patch, "")
            .await
            .expect_err("Omni accepted a forbidden patch");
        assert!(
            refused.to_string().contains(reason),
            "Omni at API {api_version}: {refused}"
        );
    }

    // kube-sim runs no webhook here, as when the webhook is disabled: the operator applies the
    // same rules before anything is written to Omni.
    let (inline, reason) = forbidden_patches().swap_remove(0);
    let mut object = cluster_with_patch(&inline);
    object["metadata"].as_object_mut().map(|m| m.remove("uid"));
    env.create::<OmniCluster>(object).await;
    let refused: OmniCluster = env.wait_cond(CLUSTER, is_false("Validated")).await;
    let message = is_false("Validated")
        .because("ValidationFailed")
        .message(&refused);
    assert_eq!(
        message,
        format!("spec.patches[0].inline: Forbidden: {reason}")
    );
    assert!(env.omni.get(ty::CLUSTER, CLUSTER).is_none());
    assert!(env.omni.list(ty::CONFIG_PATCH).is_empty());
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_patches_are_refused_at_admission_with_omnis_reasons_on_api_2() {
    forbidden_patches_are_refused_at_admission_with_omnis_reasons(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_patches_are_refused_at_admission_with_omnis_reasons_on_api_3() {
    forbidden_patches_are_refused_at_admission_with_omnis_reasons(3).await;
}

// ---------------------------------------------------------------------------------------------
// Install disk across an Omni upgrade

fn install_disk_patch_id() -> String {
    format!("000-cm-{MACHINE}-install-disk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_omni_upgrade_from_api_2_to_3_moves_the_install_disk_from_a_patch_to_its_resource() {
    let env = start(2).await;
    static_cluster(&env, json!({})).await;
    env.create_spec::<OmniMachine>(
        MACHINE,
        json!({"clusterRef": {"name": CLUSTER}, "install": {"disk": "/dev/vda"}}),
    )
    .await;
    synced(&env).await;
    assert!(
        env.omni
            .get(ty::CONFIG_PATCH, &install_disk_patch_id())
            .is_some()
    );

    // Omni is upgraded to a backend speaking API 3; the connection notices at its next check.
    env.omni.set_backend_api_version(3);
    env.touch_key_secret("upgraded").await;
    eventually(
        "the install disk to move to a MachineInstallDiskConfig",
        || {
            let config = env
                .omni
                .get(ty::MACHINE_INSTALL_DISK_CONFIG, MACHINE)
                .and_then(|r| decode_spec::<MachineInstallDiskConfigSpec>(&r).ok());
            config.is_some_and(|c| c.disk == "/dev/vda")
                && env
                    .omni
                    .get(ty::CONFIG_PATCH, &install_disk_patch_id())
                    .is_none()
        },
    )
    .await;
    synced(&env).await;
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// A backend without an API version

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_omni_that_reports_no_backend_api_version_stalls_the_connection() {
    let env = start(0).await;
    let stalled = is_true("Stalled").because("UnsupportedOmniAPI");
    let conn: OmniConnection = env.wait_cond(CONNECTION, stalled).await;
    let message = stalled.message(&conn);
    assert!(
        message.contains("does not report a backend API version")
            && message.contains("supported backend API versions: 2 and 3"),
        "{message}"
    );
    // A cluster on it is not synced: nothing is translated for a version we cannot speak.
    static_cluster(&env, json!({})).await;
    let failed: OmniCluster = env.wait_cond(CLUSTER, is_false("Synced")).await;
    let message = is_false("Synced").message(&failed);
    assert!(
        message.contains("supported backend API versions: 2 and 3"),
        "{message}"
    );
    assert!(env.omni.get(ty::CLUSTER, CLUSTER).is_none());
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Per-group manifest sync

fn manifests(c: &OmniCluster) -> omni_operator::api::cluster::ManifestsState {
    c.status
        .as_ref()
        .and_then(|s| s.manifests.clone())
        .unwrap_or_default()
}

/// A core (`v1`) object in namespace `apps`.
fn namespaced(kind: &str, name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "apps"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_manifest_group_shows_what_omni_has_not_applied_or_pruned_yet() {
    use omni_operator::api::cluster::{ManifestGroupSyncState, OutOfSyncManifest};
    const NAMESPACES: &str = "200-cluster-demo-namespaces";
    let namespaces = json!({"name": "namespaces", "inline": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}]});
    let env = start(3).await;
    static_cluster(&env, json!({"kubernetes": {"version": "v1.35.0", "manifests": [
        namespaces,
        {"name": "config", "inline": [namespaced("ConfigMap", "settings"), namespaced("ConfigMap", "flags")]},
    ]}}))
    .await;
    let applied = env
        .wait::<OmniCluster>(CLUSTER, "every manifest applied", |c| {
            manifests(c).applied && manifests(c).total == 3
        })
        .await;
    assert!(manifests(&applied).out_of_sync_groups.is_empty());

    // Omni cannot apply for now; meanwhile the config group is replaced by a one-time quota.
    env.omni.set_manifests_error(
        CLUSTER,
        Some("retryable error occurred while applying manifests".into()),
    );
    patch_cluster_spec(&env, json!({"kubernetes": {"version": "v1.35.0", "manifests": [
        namespaces,
        {"name": "quota", "mode": "one-time", "inline": [namespaced("ResourceQuota", "compute")]},
    ]}}))
    .await;
    let stuck = env
        .wait::<OmniCluster>(
            CLUSTER,
            "the removed group deleting and the new one pending",
            |c| manifests(c).out_of_sync_groups.len() == 2,
        )
        .await;
    let state = manifests(&stuck);
    assert_eq!(
        state.last_error,
        "retryable error occurred while applying manifests"
    );
    assert_eq!((state.total, state.out_of_sync), (4, 3));
    let manifest = |kind: &str, name: &str, phase: &str| OutOfSyncManifest {
        kind: kind.into(),
        namespace: Some("apps".into()),
        name: name.into(),
        phase: phase.into(),
    };
    assert_eq!(
        state.out_of_sync_groups,
        vec![
            // Still in the workload cluster: Omni prunes it once an apply succeeds.
            ManifestGroupSyncState {
                id: "201-cluster-demo-config".into(),
                phase: "DELETING".into(),
                mode: "full".into(),
                total: 2,
                out_of_sync: 2,
                manifests: vec![
                    manifest("ConfigMap", "flags", "DELETING"),
                    manifest("ConfigMap", "settings", "DELETING"),
                ],
            },
            ManifestGroupSyncState {
                id: "201-cluster-demo-quota".into(),
                phase: "PROGRESSING".into(),
                mode: "one-time".into(),
                total: 1,
                out_of_sync: 1,
                manifests: vec![manifest("ResourceQuota", "compute", "PENDING")],
            },
        ]
    );
    // The namespace applied before the failure stays applied.
    assert!(
        state
            .groups
            .iter()
            .any(|g| g.id == NAMESPACES && g.phase == "APPLIED"),
        "{:?}",
        state.groups
    );

    env.omni.set_manifests_error(CLUSTER, None);
    let synced = env
        .wait::<OmniCluster>(CLUSTER, "the quota applied and the config pruned", |c| {
            manifests(c).applied && manifests(c).total == 2
        })
        .await;
    let state = manifests(&synced);
    assert!(state.out_of_sync_groups.is_empty(), "{state:?}");
    assert_eq!(state.last_error, "");
    let phases: Vec<(&str, &str)> = state
        .groups
        .iter()
        .map(|g| (g.id.as_str(), g.phase.as_str()))
        .collect();
    assert_eq!(
        phases,
        vec![
            (NAMESPACES, "APPLIED"),
            ("201-cluster-demo-quota", "APPLIED")
        ]
    );
    env.shutdown().await;
}
