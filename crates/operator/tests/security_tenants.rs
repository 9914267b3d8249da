//! Hostile-tenant tests, round two (issue 30): a tenant who may create the operator's custom
//! resources and Secrets in its namespace, but may not read other people's Secrets, must not be
//! able to borrow the operator's other powers: its minted kubeconfigs, its place on the network,
//! helm's shared cache, its own identity, or more than its share of the reconcile slots.
//!
//! Each test failed before the change that made it pass (named in that commit's message).

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use omni_operator::api::{OmniCluster, OmniKubeconfigExport, OmniSecretSync};
use omni_operator::identity_policy::IdentityPolicy;
use omni_operator::secret_policy::{SecretPolicy, USABLE_BY_LABEL};
use omni_operator::tenancy::Tenancy;
use serde_json::{Value, json};
use support::WAIT;
use support::conditions::{Cond, is_false, is_true};
use support::env::{Env, EnvBuilder, Namespaced, SAMPLE_CLUSTER, eventually_within};

const READY: Cond = is_true("Ready");
const REFUSED: Cond = is_false("Ready").because("ValidationFailed");
/// How long a condition that should follow at once may take on a busy machine; shorter than
/// [`WAIT`] where a regression would otherwise wait that long in silence.
const SHORT_WAIT: Duration = Duration::from_secs(60);

/// The environment with the sample cluster Ready in omni-sim, so an export that is not refused
/// is minted at once.
async fn with_sample_cluster(builder: EnvBuilder) -> Env {
    let env = builder.without_connection().start().await;
    env.apply_samples(SAMPLE_CLUSTER, |_| {}).await;
    env.wait::<OmniCluster>("edge-sample", "Ready", |c| READY.holds(c))
        .await;
    env
}

/// Waits until `name` holds `cond` and returns its message; fails at once when `violated`
/// reports that the operator did what it must not (so a regression fails on the breach itself).
async fn refused_without<K: Namespaced>(
    env: &Env,
    name: &str,
    cond: Cond,
    violated: impl AsyncFn() -> Option<String>,
) -> String {
    let api = env.api::<K>();
    eventually_within(&format!("{name}: {cond}"), WAIT, async || {
        if let Some(breach) = violated().await {
            panic!("{name}: {breach}");
        }
        let obj = api.get_opt(name).await.ok().flatten()?;
        cond.holds(&obj).then(|| cond.message(&obj))
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Finding 6: minted identities have a deployment-level policy.

/// Export `name` of the sample cluster for `service_account`, valid for `ttl`, into Secret
/// `<name>-kubeconfig`.
async fn export(env: &Env, name: &str, service_account: Value, ttl: &str) {
    let _: OmniKubeconfigExport = env
        .create_spec(
            name,
            json!({
                "clusterRef": {"name": "edge-sample"},
                "targetSecretRef": {"name": format!("{name}-kubeconfig")},
                "serviceAccount": service_account,
                "ttl": ttl,
                "deletionPolicy": "Delete",
            }),
        )
        .await;
}

/// Waits until export `name` is refused with `ValidationFailed` and returns the message; fails
/// at once if its kubeconfig is written meanwhile.
async fn export_refused(env: &Env, name: &str) -> String {
    let secrets = env.api::<Secret>();
    let target = format!("{name}-kubeconfig");
    let minted = async || {
        let found = secrets.get_opt(&target).await.ok().flatten();
        found.map(|_| "a kubeconfig was minted and written".to_string())
    };
    refused_without::<OmniKubeconfigExport>(env, name, REFUSED, minted).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_admin_equivalents_are_refused_like_system_masters() {
    let env = with_sample_cluster(Env::builder()).await;
    let cases = [
        (
            "controller-manager",
            json!({"user": "system:kube-controller-manager", "groups": ["automation"]}),
            "spec.serviceAccount.user",
        ),
        (
            "node",
            json!({"user": "system:node:x", "groups": ["system:nodes"]}),
            "spec.serviceAccount.user",
        ),
        (
            "kubeadm",
            json!({"user": "automation", "groups": ["kubeadm:cluster-admins"]}),
            "spec.serviceAccount.groups[0]",
        ),
        (
            "masters",
            json!({"user": "automation", "groups": ["automation", "system:masters"]}),
            "spec.serviceAccount.groups[1]",
        ),
    ];
    for (name, sa, _) in &cases {
        export(&env, name, sa.clone(), "1h").await;
    }
    for (name, _, field) in &cases {
        let message = export_refused(&env, name).await;
        assert!(
            message.contains(field) && message.contains("allowClusterAdmin: true"),
            "{name}: {message}"
        );
    }
    // A lifetime beyond the default maximum (one year) is refused too, naming the flag.
    export(
        &env,
        "ten-years",
        json!({"user": "automation", "groups": ["automation"]}),
        "87600h",
    )
    .await;
    let message = export_refused(&env, "ten-years").await;
    assert!(
        message.contains("spec.ttl") && message.contains("--max-export-ttl"),
        "{message}"
    );
    // With the consent the documented default honours, the same identity is minted.
    export(
        &env,
        "consented",
        json!({"user": "automation", "groups": ["kubeadm:cluster-admins"],
               "allowClusterAdmin": true}),
        "1h",
    )
    .await;
    env.wait_cond::<OmniKubeconfigExport>("consented", READY)
        .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployment_has_the_last_word_on_cluster_admin_and_lifetime() {
    let lockdown = Tenancy {
        identity: IdentityPolicy {
            honour_allow_cluster_admin: false,
            privileged: vec!["platform:admins".into()],
            max_ttl: Duration::from_secs(24 * 3600),
            ..IdentityPolicy::default()
        },
    };
    let env = with_sample_cluster(Env::builder().tenancy(lockdown)).await;
    export(
        &env,
        "consented",
        json!({"user": "breakglass", "groups": ["system:masters"], "allowClusterAdmin": true}),
        "1h",
    )
    .await;
    export(
        &env,
        "added",
        json!({"user": "automation", "groups": ["platform:admins"]}),
        "1h",
    )
    .await;
    export(
        &env,
        "long",
        json!({"user": "automation", "groups": ["automation"]}),
        "48h",
    )
    .await;
    let consented = export_refused(&env, "consented").await;
    assert!(
        consented.contains("spec.serviceAccount.allowClusterAdmin")
            && consented.contains("--allow-cluster-admin-exports=false"),
        "{consented}"
    );
    let added = export_refused(&env, "added").await;
    assert!(
        added.contains("spec.serviceAccount.groups[0]") && added.contains("--privileged-identity"),
        "{added}"
    );
    let long = export_refused(&env, "long").await;
    assert!(
        long.contains("spec.ttl") && long.contains("--max-export-ttl"),
        "{long}"
    );
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Finding 5: the operator's own credentials are never sources.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_kubeconfig_is_never_a_sync_source_even_when_opted_in() {
    let strict = SecretPolicy {
        require_opt_in: true,
        ..SecretPolicy::default()
    };
    let env = with_sample_cluster(Env::builder().with_workload().secret_policy(strict)).await;
    export(
        &env,
        "edge",
        json!({"user": "automation", "groups": ["automation"]}),
        "1h",
    )
    .await;
    env.wait_cond::<OmniKubeconfigExport>("edge", READY).await;
    // Whoever may label Secrets opts both in: the export's own Secret must stay refused.
    let opt_in = json!({"metadata": {"labels": {USABLE_BY_LABEL: "OmniSecretSync"}}});
    let _: Secret = env.patch("edge-kubeconfig", opt_in.clone()).await;
    env.create_secret(
        "workload-kubeconfig",
        json!({"kubeconfig": env.workload_kubeconfig("workload-token")}),
    )
    .await;
    let _: Secret = env.patch("workload-kubeconfig", opt_in).await;
    let _: OmniSecretSync = env
        .create_spec(
            "steal",
            json!({
                "clusterRef": {"name": "edge-sample"},
                "kubeconfigSecretRef": {"name": "workload-kubeconfig"},
                "sourceSecretRef": {"name": "edge-kubeconfig"},
                "targetSecretRef": {"name": "stolen", "namespace": "apps"},
                "createNamespace": true,
                "deletionPolicy": "Delete",
            }),
        )
        .await;
    let copies: Api<Secret> = Api::namespaced(env.workload().client.clone(), "apps");
    let copied = async || {
        let found = copies.get_opt("stolen").await.ok().flatten();
        found.map(|_| "the minted kubeconfig was copied into the workload cluster".to_string())
    };
    let message = refused_without::<OmniSecretSync>(&env, "steal", REFUSED, copied).await;
    assert!(message.contains("written by the operator"), "{message}");
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Finding 7: cross-namespace export targets are the operator's decision, and a target it cannot
// write leaves a condition.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_operator_refuses_a_cross_namespace_export() {
    let env = with_sample_cluster(Env::builder().other_namespace("elsewhere")).await;
    let _: OmniKubeconfigExport = env
        .create_spec(
            "away",
            json!({
                "clusterRef": {"name": "edge-sample"},
                "targetSecretRef": {"name": "planted", "namespace": "elsewhere"},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "1h",
                "deletionPolicy": "Delete",
            }),
        )
        .await;
    let elsewhere: Api<Secret> = Api::namespaced(env.client.clone(), "elsewhere");
    let planted = async || {
        let found = elsewhere.get_opt("planted").await.ok().flatten();
        found.map(|_| "a kubeconfig was written into namespace elsewhere".to_string())
    };
    let message = refused_without::<OmniKubeconfigExport>(&env, "away", REFUSED, planted).await;
    assert!(
        message.contains("--allow-cross-namespace-export"),
        "{message}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_the_operator_may_not_reach_leaves_a_condition() {
    let allowed = SecretPolicy {
        allow_cross_namespace_export: true,
        ..SecretPolicy::default()
    };
    let builder = Env::builder()
        .other_namespace("elsewhere")
        .secret_policy(allowed);
    let env = with_sample_cluster(builder).await;
    // What a namespaced install's RBAC answers for a namespace it does not cover.
    for verb in ["get", "create"] {
        env.kube
            .hooks()
            .fail_next(verb, "secrets", Some("elsewhere"), None, 403, 100_000);
    }
    let _: OmniKubeconfigExport = env
        .create_spec(
            "away",
            json!({
                "clusterRef": {"name": "edge-sample"},
                "targetSecretRef": {"name": "planted", "namespace": "elsewhere"},
                "serviceAccount": {"user": "automation", "groups": ["automation"]},
                "ttl": "1h",
                "deletionPolicy": "Delete",
            }),
        )
        .await;
    let failed = is_false("Ready").because("ExportFailed");
    let exports = env.api::<OmniKubeconfigExport>();
    let message = eventually_within("a condition on the export", SHORT_WAIT, async || {
        let obj = exports.get_opt("away").await.ok().flatten()?;
        failed.holds(&obj).then(|| failed.message(&obj))
    })
    .await;
    assert!(
        message.contains("Secret \"elsewhere/planted\""),
        "{message}"
    );
    env.shutdown().await;
}
