//! Hostile-tenant tests, round two (issue 30): a tenant who may create the operator's custom
//! resources and Secrets in its namespace, but may not read other people's Secrets, must not be
//! able to borrow the operator's other powers: its minted kubeconfigs, its place on the network,
//! helm's shared cache, its own identity, or more than its share of the reconcile slots.
//!
//! Each test failed before the change that made it pass (named in that commit's message).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, ResourceExt as _};
use omni_operator::api::keys::USABLE_BY_LABEL;
use omni_operator::api::{
    OmniCluster, OmniConnection, OmniHelmRelease, OmniKubeconfigExport, OmniSecretSync,
};
use omni_operator::domain::helm::source::{ChartSourcePolicy, HostPattern};
use omni_operator::domain::identity_policy::IdentityPolicy;
use omni_operator::domain::secret_policy::SecretPolicy;
use omni_operator::domain::tenancy::{Tenancy, Timeouts};
use serde_json::{Value, json};
use support::WAIT;
use support::chart_server::{ChartServer, Entry, Serve, banner_server, digest, index, package};
use support::conditions::{Cond, is_false, is_true};
use support::env::{
    Env, EnvBuilder, KEY_FIELD, KEY_SECRET, Namespaced, SAMPLE_CLUSTER, eventually_within,
};

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

/// A breach (the message `breach`) when Secret `name` exists in `secrets`: for
/// [`refused_without`], when the refusal's whole point is that the Secret is never written.
async fn written(secrets: &Api<Secret>, name: &str, breach: &str) -> Option<String> {
    let found = secrets.get_opt(name).await.ok().flatten();
    found.map(|_| breach.to_string())
}

/// The spec of an OmniSecretSync of cluster `cluster` copying Secret `source` into
/// `apps/<target>` of the workload cluster reached with the kubeconfig in Secret `kubeconfig`.
/// It acts once the cluster exists: most of these clusters are stand-ins Omni never runs.
fn sync_spec(cluster: &str, kubeconfig: &str, source: &str, target: &str) -> Value {
    json!({
        "clusterRef": {"name": cluster},
        "startWhen": "ClusterExists",
        "kubeconfigSecretRef": {"name": kubeconfig},
        "sourceSecretRef": {"name": source},
        "targetSecretRef": {"name": target, "namespace": "apps"},
        "createNamespace": true,
        "deletionPolicy": "Orphan",
    })
}

// ---------------------------------------------------------------------------------------------
// Finding 6: minted identities have a deployment-level policy.

/// Export `name` of the sample cluster for `service_account`, valid for `ttl`, into Secret
/// `<name>-kubeconfig`.
async fn export(env: &Env, name: &str, service_account: Value, ttl: &str) {
    export_to(
        env,
        name,
        json!({"name": format!("{name}-kubeconfig")}),
        service_account,
        ttl,
    )
    .await;
}

/// [`export`] into `target` (a `targetSecretRef`).
async fn export_to(env: &Env, name: &str, target: Value, service_account: Value, ttl: &str) {
    let _: OmniKubeconfigExport = env
        .create_spec(
            name,
            json!({
                "clusterRef": {"name": "edge-sample"},
                "targetSecretRef": target,
                "serviceAccount": service_account,
                "ttl": ttl,
                "deletionPolicy": "Delete",
            }),
        )
        .await;
}

/// The identity most tests export: nothing privileged.
fn automation() -> Value {
    json!({"user": "automation", "groups": ["automation"]})
}

/// Waits until export `name` is refused with `ValidationFailed` and returns the message; fails
/// at once if its kubeconfig is written meanwhile.
async fn export_refused(env: &Env, name: &str) -> String {
    let secrets = env.api::<Secret>();
    let target = format!("{name}-kubeconfig");
    let minted = async || written(&secrets, &target, "a kubeconfig was minted and written").await;
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
        ..Tenancy::default()
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
    export(&env, "edge", automation(), "1h").await;
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
    let spec = sync_spec(
        "edge-sample",
        "workload-kubeconfig",
        "edge-kubeconfig",
        "stolen",
    );
    let _: OmniSecretSync = env.create_spec("steal", spec).await;
    let copies: Api<Secret> = Api::namespaced(env.workload().client.clone(), "apps");
    let breach = "the minted kubeconfig was copied into the workload cluster";
    let copied = async || written(&copies, "stolen", breach).await;
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
    let elsewhere = json!({"name": "planted", "namespace": "elsewhere"});
    export_to(&env, "away", elsewhere, automation(), "1h").await;
    let elsewhere: Api<Secret> = Api::namespaced(env.client.clone(), "elsewhere");
    let breach = "a kubeconfig was written into namespace elsewhere";
    let planted = async || written(&elsewhere, "planted", breach).await;
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
    let elsewhere = json!({"name": "planted", "namespace": "elsewhere"});
    export_to(&env, "away", elsewhere, automation(), "1h").await;
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

// ---------------------------------------------------------------------------------------------
// Findings 1 to 4: Helm sources.

const VICTIM_USER: &str = "victim";
const VICTIM_PASSWORD: &str = "victim-repo-password-4f1e";

/// The environment of the release tests: a workload cluster, the real helm, OmniCluster
/// `workload` and Secret `workload-kubeconfig` (anonymous: helm sends no credentials over plain
/// HTTP to the workload kube-sim).
async fn helm_env(builder: EnvBuilder) -> Env {
    let env = builder.without_connection().with_workload().start().await;
    let _: OmniCluster = env
        .create_spec(
            "workload",
            json!({"connectionRef": {"name": "omni"}, "talos": {"version": "v1.11.5"},
                   "kubernetes": {"version": "v1.34.2"}}),
        )
        .await;
    let kubeconfig = kube_sim::kubeconfig::Kubeconfig::new(
        env.workload().sim.base_url.clone(),
        "admin",
        kube_sim::kubeconfig::Credential::None,
    )
    .to_yaml()
    .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    env.create_secret("workload-kubeconfig", json!({"kubeconfig": kubeconfig}))
        .await;
    env
}

/// OmniHelmRelease `name` installing `chart` (merged over chart `demo` 0.1.0 of `repository`),
/// at once on the stand-in cluster `workload`, which Omni never runs.
async fn release(env: &Env, name: &str, repository: &str, chart: Value) {
    let mut spec = json!({
        "clusterRef": {"name": "workload"},
        "startWhen": "ClusterExists",
        "kubeconfigSecretRef": {"name": "workload-kubeconfig"},
        "namespace": "default",
        "chart": {"repository": repository, "chart": "demo", "version": "0.1.0"},
        "timeout": "60s",
        "deletionPolicy": "Orphan",
    });
    if let (Some(target), Some(extra)) = (spec["chart"].as_object_mut(), chart.as_object()) {
        for (k, v) in extra {
            target.insert(k.clone(), v.clone());
        }
    }
    let _: OmniHelmRelease = env.create_spec(name, spec).await;
}

/// The `greeting` of release `release`'s ConfigMap in the workload cluster, once installed.
async fn greeting(env: &Env, release: &str) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(env.workload().client.clone(), "default");
    let map = maps
        .get_opt(&format!("{release}-config"))
        .await
        .ok()
        .flatten()?;
    map.data?.get("greeting").cloned()
}

/// A private CA and a TLS server configuration for 127.0.0.1 issued by it.
fn private_tls() -> (String, Arc<rustls::ServerConfig>) {
    let ca = kube_sim::tls::CertificateAuthority::generate("tenant repository CA")
        .unwrap_or_else(|e| panic!("{e}"));
    let serving = ca
        .issue_server(&["127.0.0.1", "localhost"])
        .unwrap_or_else(|e| panic!("{e}"));
    let config = ca.server_config(&serving).unwrap_or_else(|e| panic!("{e}"));
    (ca.cert_pem().to_string(), config)
}

/// A victim's repository behind basic auth (over HTTPS with `tls`), serving `demo` 0.1.0 and
/// 0.2.0 with greetings `victim-v1` and `victim-v2`, and the credentials Secret
/// `victim-credentials` for it (with its CA). Returns the server and the archives' digests.
async fn victim_repository(env: &Env, tls: bool) -> (ChartServer, [String; 2]) {
    let (ca, config) = private_tls();
    let repo = ChartServer::start(Serve {
        basic_auth: Some((VICTIM_USER.into(), VICTIM_PASSWORD.into())),
        tls: tls.then_some(config),
        ..Serve::default()
    })
    .await;
    let v1 = package("demo", "0.1.0", "victim-v1");
    let v2 = package("demo", "0.2.0", "victim-v2");
    let digests = [digest(&v1), digest(&v2)];
    repo.put(
        "/index.yaml",
        index(&[
            Entry {
                name: "demo",
                version: "0.1.0",
                digest: &digests[0],
                url: "demo-0.1.0.tgz",
            },
            Entry {
                name: "demo",
                version: "0.2.0",
                digest: &digests[1],
                url: "demo-0.2.0.tgz",
            },
        ]),
        "application/yaml",
    );
    repo.put("/demo-0.1.0.tgz", v1, "application/gzip");
    repo.put("/demo-0.2.0.tgz", v2, "application/gzip");
    let mut credentials = json!({"username": VICTIM_USER, "password": VICTIM_PASSWORD});
    if tls {
        credentials["ca.crt"] = ca.into();
    }
    env.create_secret("victim-credentials", credentials).await;
    (repo, digests)
}

/// An attacker's repository over plain HTTP whose index claims the victim's digests for
/// `demo` 0.1.0 and 0.2.0, and serves the attacker's own archives (greetings `attacker-v1` and
/// `attacker-v2`) at the URLs it lists; and the attacker's credentials Secret
/// `attacker-credentials` for it (any credentials made helm look charts up through a named
/// repository, by the digest its index lists).
async fn forging_repository(env: &Env, victim_digests: &[String; 2]) -> ChartServer {
    env.create_secret(
        "attacker-credentials",
        json!({"username": "attacker", "password": "attacker-password"}),
    )
    .await;
    let repo = ChartServer::start(Serve::default()).await;
    repo.put(
        "/index.yaml",
        index(&[
            Entry {
                name: "demo",
                version: "0.1.0",
                digest: &victim_digests[0],
                url: "demo-0.1.0.tgz",
            },
            Entry {
                name: "demo",
                version: "0.2.0",
                digest: &victim_digests[1],
                url: "demo-0.2.0.tgz",
            },
        ]),
        "application/yaml",
    );
    repo.put(
        "/demo-0.1.0.tgz",
        package("demo", "0.1.0", "attacker-v1"),
        "application/gzip",
    );
    repo.put(
        "/demo-0.2.0.tgz",
        package("demo", "0.2.0", "attacker-v2"),
        "application/gzip",
    );
    repo
}

/// Waits until release `name` holds `Ready` either way, and returns whether it is True.
async fn settled(env: &Env, name: &str) -> bool {
    let releases = env.api::<OmniHelmRelease>();
    eventually_within(&format!("{name} settled"), WAIT, async || {
        let obj = releases.get_opt(name).await.ok().flatten()?;
        if READY.holds(&obj) {
            Some(true)
        } else {
            is_false("Ready").holds(&obj).then_some(false)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_never_installs_another_tenants_chart_from_a_cache() {
    let env = helm_env(Env::builder().real_helm()).await;
    let (victim, digests) = victim_repository(&env, true).await;
    let attacker = forging_repository(&env, &digests).await;
    release(
        &env,
        "victim",
        &victim.url,
        json!({"credentialsSecretRef": {"name": "victim-credentials"}}),
    )
    .await;
    env.wait_cond::<OmniHelmRelease>("victim", READY).await;
    assert_eq!(greeting(&env, "victim").await.as_deref(), Some("victim-v1"));
    // The attacker's index names the victim's digest: the victim's private chart must not be
    // what the attacker's release gets.
    release(
        &env,
        "attacker",
        &attacker.url,
        json!({"credentialsSecretRef": {"name": "attacker-credentials"}, "insecure": true}),
    )
    .await;
    let stolen = async || {
        (greeting(&env, "attacker").await.as_deref() == Some("victim-v1"))
            .then(|| "the victim's private chart was installed for the attacker".to_string())
    };
    let refusal = is_false("Ready");
    refused_without::<OmniHelmRelease>(&env, "attacker", refusal, stolen).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_never_poisons_another_tenants_chart() {
    let env = helm_env(Env::builder().real_helm()).await;
    let (victim, digests) = victim_repository(&env, false).await;
    let attacker = forging_repository(&env, &digests).await;
    // First the attacker, claiming the victim's digest for its own archive of 0.2.0 …
    release(
        &env,
        "attacker",
        &attacker.url,
        json!({"version": "0.2.0", "credentialsSecretRef": {"name": "attacker-credentials"},
               "insecure": true}),
    )
    .await;
    settled(&env, "attacker").await;
    // … then the victim installs 0.2.0 from its own repository with its own credentials.
    release(
        &env,
        "victim",
        &victim.url,
        json!({"version": "0.2.0", "credentialsSecretRef": {"name": "victim-credentials"},
               "insecure": true}),
    )
    .await;
    env.wait_cond::<OmniHelmRelease>("victim", READY).await;
    assert_eq!(greeting(&env, "victim").await.as_deref(), Some("victim-v2"));
    env.shutdown().await;
}

/// A helm that records its arguments in `log` and then runs the real helm, claiming to be
/// `version` when asked.
fn recording_helm(dir: &std::path::Path, version: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let script = dir.join(format!("helm-{version}"));
    let log = dir.join(format!("calls-{version}"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{log}'\nif [ \"$1\" = version ]; then echo {version}; exit 0; fi\nexec '{helm}' \"$@\"\n",
            log = log.display(),
            helm = support::helm_bin().display(),
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_are_never_chart_names_whatever_the_helm_version() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for version in ["v3.15.4", "v4.1.4"] {
        let helm = recording_helm(dir.path(), version);
        let work = dir.path().join(format!("work-{version}"));
        let env = helm_env(Env::builder().helm(helm, work)).await;
        let log = dir.path().join(format!("calls-{version}"));
        let installed = async || {
            let calls = std::fs::read_to_string(&log).unwrap_or_default();
            calls
                .lines()
                .find(|l| l.starts_with("install") || l.starts_with("upgrade"))
                .map(|l| format!("helm {version} was asked to install a path: {l}"))
        };
        let mut messages = Vec::new();
        for (name, chart) in [
            ("absolute", "/etc"),
            ("missing", "/nonexistent-chart-dir"),
            ("parent", "../x"),
        ] {
            release(&env, name, "http://127.0.0.1:1", json!({"chart": chart})).await;
            let message = refused_without::<OmniHelmRelease>(&env, name, REFUSED, installed).await;
            assert!(message.contains("spec.chart.chart"), "{message}");
            messages.push(message.replace(chart, "CHART"));
        }
        // Nothing tells an existing directory from a missing path.
        assert!(messages.windows(2).all(|w| w[0] == w[1]), "{messages:#?}");
        env.shutdown().await;
    }
}

/// `demo` 0.1.0 (greeting `hello`) and an index listing it at `url`.
fn hello_chart(url: &str) -> (Vec<u8>, String) {
    let chart = package("demo", "0.1.0", "hello");
    let listed = index(&[Entry {
        name: "demo",
        version: "0.1.0",
        digest: &digest(&chart),
        url,
    }]);
    (chart, listed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_credentials_never_travel_over_plain_http() {
    let env = helm_env(Env::builder().real_helm()).await;
    let clear = ChartServer::start(Serve {
        basic_auth: Some((VICTIM_USER.into(), VICTIM_PASSWORD.into())),
        ..Serve::default()
    })
    .await;
    let (chart, listed) = hello_chart("demo-0.1.0.tgz");
    clear.put("/index.yaml", listed, "application/yaml");
    clear.put("/demo-0.1.0.tgz", chart, "application/gzip");
    env.create_secret(
        "clear-credentials",
        json!({"username": VICTIM_USER, "password": VICTIM_PASSWORD}),
    )
    .await;
    // Without `insecure: true`: refused before any request.
    release(
        &env,
        "clear",
        &clear.url,
        json!({"credentialsSecretRef": {"name": "clear-credentials"}}),
    )
    .await;
    let sent = async || {
        let sent = clear.authorized();
        (!sent.is_empty()).then(|| format!("credentials went over plain HTTP: {sent:?}"))
    };
    let message = refused_without::<OmniHelmRelease>(&env, "clear", REFUSED, sent).await;
    assert!(message.contains("spec.chart.insecure"), "{message}");
    assert_eq!(clear.connections(), 0, "{:?}", clear.seen());
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_credentials_never_follow_a_redirect_to_another_port() {
    let env = helm_env(Env::builder().real_helm()).await;
    let (ca, tls) = private_tls();
    let elsewhere = ChartServer::start(Serve {
        tls: Some(tls.clone()),
        ..Serve::default()
    })
    .await;
    let repo = ChartServer::start(Serve {
        basic_auth: Some((VICTIM_USER.into(), VICTIM_PASSWORD.into())),
        tls: Some(tls),
        ..Serve::default()
    })
    .await;
    let (chart, listed) = hello_chart(&format!("{}/demo-0.1.0.tgz", repo.url));
    // The repository's index moved to another port of the same host.
    elsewhere.put("/index.yaml", listed, "application/yaml");
    repo.redirect("/index.yaml", &format!("{}/index.yaml", elsewhere.url));
    repo.put("/demo-0.1.0.tgz", chart, "application/gzip");
    env.create_secret(
        "redirected-credentials",
        json!({"username": VICTIM_USER, "password": VICTIM_PASSWORD, "ca.crt": ca}),
    )
    .await;
    release(
        &env,
        "redirected",
        &repo.url,
        json!({"credentialsSecretRef": {"name": "redirected-credentials"}}),
    )
    .await;
    let followed = async || {
        let sent = elsewhere.authorized();
        (!sent.is_empty()).then(|| format!("credentials followed the redirect: {sent:?}"))
    };
    refused_without::<OmniHelmRelease>(&env, "redirected", READY, followed).await;
    assert!(elsewhere.authorized().is_empty());
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_error_never_quotes_what_the_server_sent() {
    let env = helm_env(Env::builder().real_helm()).await;
    let (banner, reached) = banner_server("-ERR internal-redis unknown command\r\n").await;
    let repo = ChartServer::start(Serve::default()).await;
    repo.put(
        "/index.yaml",
        index(&[Entry {
            name: "demo",
            version: "0.1.0",
            digest: &"0".repeat(64),
            url: &format!("http://{banner}/demo-0.1.0.tgz"),
        }]),
        "application/yaml",
    );
    release(&env, "oracle", &repo.url, json!({})).await;
    let failed = is_false("Ready");
    let message = eventually_within("oracle failed", WAIT, async || {
        let obj = env
            .api::<OmniHelmRelease>()
            .get_opt("oracle")
            .await
            .ok()
            .flatten()?;
        (failed.holds(&obj) && reached.load(std::sync::atomic::Ordering::SeqCst) > 0)
            .then(|| failed.message(&obj))
    })
    .await;
    let said = format!(
        "{message}\n{}\n{}",
        serde_json::to_string(&env.api::<OmniHelmRelease>().get("oracle").await.ok())
            .unwrap_or_default(),
        serde_json::to_string(&env.events().await).unwrap_or_default()
    );
    assert!(!said.contains("internal-redis"), "{said}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_sources_outside_the_allow_list_or_on_denied_networks_are_never_contacted() {
    // Three servers on loopback: the tenant's repository, and two it should not make the
    // operator reach (its index lists a chart URL on one; a metadata-like path on the other).
    let repo = ChartServer::start(Serve::default()).await;
    let internal = ChartServer::start(Serve::default()).await;
    let (chart, _) = hello_chart("unused");
    let listed = index(&[Entry {
        name: "demo",
        version: "0.1.0",
        digest: &digest(&chart),
        url: &format!(
            "{}/latest/meta-data/iam/security-credentials/",
            internal.url
        ),
    }]);
    repo.put("/index.yaml", listed, "application/yaml");
    let allowed = |pattern: &str| Tenancy {
        chart_sources: ChartSourcePolicy {
            allowed_hosts: vec![HostPattern::parse(pattern).unwrap_or_else(|e| panic!("{e}"))],
            ..ChartSourcePolicy::default()
        },
        ..Tenancy::default()
    };

    // 1. A repository outside the allow-list: refused before any request.
    let env = helm_env(
        Env::builder()
            .real_helm()
            .tenancy(allowed("charts.example.com")),
    )
    .await;
    release(&env, "outside", &repo.url, json!({})).await;
    let reached = async || {
        (repo.connections() > 0).then(|| format!("the repository was contacted: {:?}", repo.seen()))
    };
    let message = refused_without::<OmniHelmRelease>(&env, "outside", REFUSED, reached).await;
    assert!(
        message.contains("--chart-source-allowed-hosts"),
        "{message}"
    );
    env.shutdown().await;

    // 2. The repository allowed, the chart URL its index lists not: the index is read, the
    // other server never contacted.
    let only_repo = allowed(&repo.addr.to_string());
    let env = helm_env(Env::builder().real_helm().tenancy(only_repo)).await;
    release(&env, "elsewhere", &repo.url, json!({})).await;
    let ssrf = async || {
        (internal.connections() > 0).then(|| {
            format!(
                "the index sent the operator elsewhere: {:?}",
                internal.seen()
            )
        })
    };
    let message = refused_without::<OmniHelmRelease>(&env, "elsewhere", REFUSED, ssrf).await;
    assert!(
        message.contains("--chart-source-allowed-hosts"),
        "{message}"
    );
    assert!(!message.contains(&internal.url), "{message}");
    env.shutdown().await;

    // 3. Private networks denied: a loopback repository (and registry) is never contacted.
    let denied = Tenancy {
        chart_sources: ChartSourcePolicy {
            deny_private_networks: true,
            ..ChartSourcePolicy::default()
        },
        ..Tenancy::default()
    };
    let env = helm_env(Env::builder().real_helm().tenancy(denied)).await;
    release(&env, "private", &repo.url, json!({})).await;
    release(
        &env,
        "private-oci",
        "https://unused.example",
        json!({"chart": format!("oci://{}/charts/demo", internal.addr), "insecure": true}),
    )
    .await;
    let before = repo.connections();
    let contacted = async || {
        (repo.connections() > before || internal.connections() > 0)
            .then(|| "a private address was contacted".to_string())
    };
    for name in ["private", "private-oci"] {
        let message = refused_without::<OmniHelmRelease>(&env, name, REFUSED, contacted).await;
        assert!(
            message.contains("--chart-source-deny-private-networks"),
            "{message}"
        );
    }
    env.shutdown().await;
}

/// A registry serving chart `demo` 0.1.0 (greeting `from-oci`) as `charts/demo:0.1.0` behind a
/// token service that wants `user`/`password`: the manifest, the chart layer and helm's config.
async fn oci_registry(user: &str, password: &str) -> ChartServer {
    let registry = ChartServer::start(Serve {
        registry_login: Some((user.into(), password.into(), "registry-token-1b7e".into())),
        ..Serve::default()
    })
    .await;
    let chart = package("demo", "0.1.0", "from-oci");
    let config = br#"{"name":"demo","version":"0.1.0","apiVersion":"v2","appVersion":"1"}"#;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json",
                   "digest": format!("sha256:{}", digest(config)), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                    "digest": format!("sha256:{}", digest(&chart)), "size": chart.len()}],
    })
    .to_string();
    registry.put(
        "/v2/charts/demo/manifests/0.1.0",
        manifest,
        "application/vnd.oci.image.manifest.v1+json",
    );
    registry.put(
        &format!("/v2/charts/demo/blobs/sha256:{}", digest(config)),
        config.to_vec(),
        "application/vnd.cncf.helm.config.v1+json",
    );
    registry.put(
        &format!("/v2/charts/demo/blobs/sha256:{}", digest(&chart)),
        chart,
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
    );
    registry.put(
        "/v2/charts/demo/tags/list",
        json!({"name": "charts/demo", "tags": ["0.1.0"]}).to_string(),
        "application/json",
    );
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_chart_is_pulled_and_verified_by_the_operator() {
    let registry = oci_registry("puller", "pull-password-5c2d").await;
    // The registry speaks the protocol helm speaks: helm itself pulls from it.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    support::chart_repo::run_helm(
        &[
            "pull",
            &format!("oci://{}/charts/demo", registry.addr),
            "--version",
            "0.1.0",
            "--plain-http",
            "--username",
            "puller",
            "--password",
            "pull-password-5c2d",
            "-d",
            &dir.path().display().to_string(),
        ],
        &dir.path().join("home"),
    );
    let env = helm_env(Env::builder().real_helm()).await;
    env.create_secret(
        "registry-credentials",
        json!({"username": "puller", "password": "pull-password-5c2d"}),
    )
    .await;
    release(
        &env,
        "from-oci",
        "https://unused.example",
        json!({"chart": format!("oci://{}/charts/demo", registry.addr), "version": "^0.1",
               "insecure": true, "credentialsSecretRef": {"name": "registry-credentials"}}),
    )
    .await;
    env.wait_cond::<OmniHelmRelease>("from-oci", READY).await;
    assert_eq!(
        greeting(&env, "from-oci").await.as_deref(),
        Some("from-oci")
    );
    // The password went to the token service only; the registry saw the token.
    for seen in registry.authorized() {
        let sent = seen.authorization.unwrap_or_default();
        assert_eq!(
            seen.path == "/token",
            sent.starts_with("Basic "),
            "{} got {sent}",
            seen.path
        );
    }
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Finding 8: one tenant cannot starve the others.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tarpit_workload_server_delays_only_its_own_objects() {
    // Time bounds long enough that, were fairness left to them, the neighbour below would wait
    // for them: its bound is well under the tarpit's read timeout.
    let patient = Tenancy {
        timeouts: Timeouts {
            read: Duration::from_secs(20),
            request: Duration::from_secs(40),
            ..Timeouts::default()
        },
        ..Tenancy::default()
    };
    let env = helm_env(Env::builder().real_helm().tenancy(patient)).await;
    let (tarpit, held) = support::chart_server::tarpit().await;
    let kubeconfig = kube_sim::kubeconfig::Kubeconfig::new(
        format!("http://{tarpit}"),
        "admin",
        kube_sim::kubeconfig::Credential::Token("tarpit-token".into()),
    )
    .to_yaml()
    .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    env.create_secret("tarpit-kubeconfig", json!({"kubeconfig": kubeconfig}))
        .await;
    env.create_secret("registry", json!({"password": "registry-password"}))
        .await;
    let sync = |name: &str, kubeconfig: &str| {
        sync_spec("workload", kubeconfig, "registry", &format!("{name}-copy"))
    };
    for i in 0..300 {
        let name = format!("tarpit-{i}");
        let _: OmniSecretSync = env
            .create_spec(&name, sync(&name, "tarpit-kubeconfig"))
            .await;
    }
    let repo = ChartServer::start(Serve::default()).await;
    let (chart, listed) = hello_chart("demo-0.1.0.tgz");
    repo.put("/index.yaml", listed, "application/yaml");
    repo.put("/demo-0.1.0.tgz", chart, "application/gzip");
    for i in 0..3 {
        let _: OmniHelmRelease = env
            .create_spec(
                &format!("tarpit-release-{i}"),
                json!({
                    "clusterRef": {"name": "workload"},
                    "startWhen": "ClusterExists",
                    "kubeconfigSecretRef": {"name": "tarpit-kubeconfig"},
                    "namespace": "default",
                    "chart": {"repository": repo.url, "chart": "demo", "version": "0.1.0"},
                    "timeout": "60s",
                    "deletionPolicy": "Orphan",
                }),
            )
            .await;
    }
    // The tarpit is busy holding the operator's requests.
    eventually_within("the tarpit holds connections", WAIT, async || {
        (held.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(())
    })
    .await;

    // Another tenant's new sync and release, to a workload cluster that answers.
    let within_seconds = Duration::from_secs(8);
    let _: OmniSecretSync = env
        .create_spec("neighbour", sync("neighbour", "workload-kubeconfig"))
        .await;
    release(&env, "neighbour", &repo.url, json!({})).await;
    for kind in ["sync", "release"] {
        let ready = async || {
            let obj = match kind {
                "sync" => serde_json::to_value(
                    env.api::<OmniSecretSync>()
                        .get_opt("neighbour")
                        .await
                        .ok()??,
                )
                .ok()?,
                _ => serde_json::to_value(
                    env.api::<OmniHelmRelease>()
                        .get_opt("neighbour")
                        .await
                        .ok()??,
                )
                .ok()?,
            };
            READY.holds(&obj).then_some(())
        };
        eventually_within(
            &format!("the neighbour's {kind} Ready"),
            within_seconds,
            ready,
        )
        .await;
    }
    assert_eq!(greeting(&env, "neighbour").await.as_deref(), Some("hello"));

    // The tarpit's own objects say why they wait. Which of the 300 syncs gets the tarpit's
    // share of slots first is the controller's order, not their names': the others queue
    // behind the target for rounds of timeouts, so any of them may be first to report.
    let timed_out = is_false("Ready").because("Timeout");
    let message = eventually_within("a tarpit sync reports the timeout", WAIT, async || {
        let syncs = env
            .api::<OmniSecretSync>()
            .list(&Default::default())
            .await
            .ok()?;
        syncs
            .items
            .iter()
            .find(|s| s.name_any().starts_with("tarpit-") && timed_out.holds(*s))
            .map(|s| timed_out.message(s))
    })
    .await;
    assert!(!message.contains("tarpit-token"), "{message}");
    eventually_within("a tarpit release reports the timeout", WAIT, async || {
        let releases = env
            .api::<OmniHelmRelease>()
            .list(&Default::default())
            .await
            .ok()?;
        releases
            .items
            .iter()
            .any(|r| r.name_any().starts_with("tarpit-release-") && timed_out.holds(r))
            .then_some(())
    })
    .await;
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Deliverable 1: act as the tenant.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_reads_only_what_it_may_and_the_operator_lends_it_nothing() {
    // The deployment's default ServiceAccount reads for objects that name none.
    let lockdown = Tenancy {
        default_service_account: Some("tenant".into()),
        ..Tenancy::default()
    };
    let env = helm_env(Env::builder().real_helm().rbac().tenancy(lockdown)).await;
    for name in ["allowed-source", "forbidden-source"] {
        env.create_secret(name, json!({"password": format!("{name}-value")}))
            .await;
    }
    // The tenant's ServiceAccount may read its kubeconfig and one source, nothing else.
    let _: k8s_openapi::api::rbac::v1::Role = env
        .create(json!({
            "metadata": {"name": "tenant-reader", "namespace": env.ns},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                       "resourceNames": ["workload-kubeconfig", "allowed-source"]}],
        }))
        .await;
    let _: k8s_openapi::api::rbac::v1::RoleBinding = env
        .create(json!({
            "metadata": {"name": "tenant-reader", "namespace": env.ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "tenant-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": env.ns}],
        }))
        .await;
    env.kube.hooks().reset();
    let sync = |source: &str| {
        sync_spec(
            "workload",
            "workload-kubeconfig",
            source,
            &format!("{source}-copy"),
        )
    };
    let _: OmniSecretSync = env.create_spec("allowed", sync("allowed-source")).await;
    let _: OmniSecretSync = env.create_spec("forbidden", sync("forbidden-source")).await;
    release(
        &env,
        "forbidden",
        "https://charts.example.com",
        json!({"credentialsSecretRef": {"name": "forbidden-source"}}),
    )
    .await;
    let _: OmniHelmRelease = env
        .patch_spec("forbidden", json!({"serviceAccountName": "tenant"}))
        .await;

    env.wait_cond::<OmniSecretSync>("allowed", READY).await;
    let copies: Api<Secret> = Api::namespaced(env.workload().client.clone(), "apps");
    let breach = "a Secret the ServiceAccount may not read was copied";
    let copied = async || written(&copies, "forbidden-source-copy", breach).await;
    let denied = is_false("Ready").because("AccessDenied");
    let message = refused_without::<OmniSecretSync>(&env, "forbidden", denied, copied).await;
    assert!(
        message.contains("spec.sourceSecretRef")
            && message.contains("forbidden-source")
            && message.contains("ServiceAccount"),
        "{message}"
    );
    let message =
        refused_without::<OmniHelmRelease>(&env, "forbidden", denied, async || None).await;
    assert!(
        message.contains("spec.chart.credentialsSecretRef") && message.contains("forbidden-source"),
        "{message}"
    );
    // Every read of a referenced Secret was the ServiceAccount's: the operator's own identity
    // (kube-sim's admin, as the operator sends no credentials) read none.
    let by_operator: u64 = env
        .kube
        .hooks()
        .counts()
        .iter()
        .filter(|(k, _)| k.verb == "get" && k.resource == "secrets" && k.user == "system:admin")
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(
        by_operator, 0,
        "the operator read a Secret with its own identity"
    );
    // An OmniConnection's Omni key is read the same way: the tenant may not read it here.
    let _: OmniConnection = env
        .create_spec(
            "guarded",
            json!({"endpoint": env.omni.endpoint(),
                   "auth": {"serviceAccountSecretRef": {"name": KEY_SECRET, "key": KEY_FIELD}}}),
        )
        .await;
    let message = refused_without::<OmniConnection>(&env, "guarded", denied, async || None).await;
    assert!(
        message.contains(KEY_SECRET) && message.contains("serviceAccountSecretRef"),
        "{message}"
    );
    env.shutdown().await;
}

/// The same against the real kube-apiserver, with the chart's RBAC (its `impersonate` grant
/// included) and the lockdown's default ServiceAccount: the real server, not kube-sim, decides
/// what the tenant's ServiceAccount may read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_server_decides_what_a_tenants_service_account_may_read() {
    use support::real::{self, Deployed, NS as REAL_NS, RealCluster};
    support::operator_logs();
    let cluster = RealCluster::start().await;
    real::assert_no_warnings("the CRD chart", &cluster.install_crd_chart());
    cluster.wait_established().await;
    let deployed = Deployed::start(
        &cluster,
        &[
            "impersonation.defaultServiceAccount=tenant",
            "impersonation.serviceAccountNames={tenant}",
        ],
        "replica-a",
    )
    .await;
    let admin = cluster.admin.clone();
    let (workload, workload_client) = support::kube_sim().await;
    let kubeconfig = kube_sim::kubeconfig::Kubeconfig::new(
        workload.base_url.clone(),
        "admin",
        kube_sim::kubeconfig::Credential::None,
    )
    .to_yaml()
    .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    let mut docs = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "tenant", "namespace": REAL_NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "tenant-reader", "namespace": REAL_NS},
               "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                          "resourceNames": ["workload-kubeconfig", "allowed-source"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "tenant-reader", "namespace": REAL_NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "tenant-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": REAL_NS}]}),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "workload-kubeconfig", "namespace": REAL_NS},
               "stringData": {"kubeconfig": kubeconfig}}),
        json!({"apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniCluster",
               "metadata": {"name": "workload", "namespace": REAL_NS},
               "spec": {"connectionRef": {"name": "omni"}, "talos": {"version": "v1.11.5"},
                        "kubernetes": {"version": "v1.34.2"}}}),
    ];
    for name in ["allowed-source", "forbidden-source"] {
        docs.push(json!({"apiVersion": "v1", "kind": "Secret",
                         "metadata": {"name": name, "namespace": REAL_NS},
                         "stringData": {"password": format!("{name}-value")}}));
        docs.push(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniSecretSync",
            "metadata": {"name": name, "namespace": REAL_NS},
            "spec": sync_spec("workload", "workload-kubeconfig", name, name),
        }));
    }
    for doc in docs {
        real::create(&admin, doc.clone())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", doc["metadata"]["name"]));
    }
    let syncs: Api<OmniSecretSync> = Api::namespaced(admin.clone(), REAL_NS);
    support::wait_for(&syncs, "allowed-source", "Ready", |s| READY.holds(s)).await;
    let denied = is_false("Ready").because("AccessDenied");
    let copies: Api<Secret> = Api::namespaced(workload_client, "apps");
    let refused = support::wait_for(&syncs, "forbidden-source", "AccessDenied", |s| {
        denied.holds(s)
    })
    .await;
    let message = denied.message(&refused);
    assert!(
        message.contains("spec.sourceSecretRef") && message.contains("/tenant\""),
        "{message}"
    );
    assert!(
        copies
            .get_opt("forbidden-source")
            .await
            .ok()
            .flatten()
            .is_none(),
        "a Secret the ServiceAccount may not read was copied"
    );
    deployed.stop().await;
}
