//! `spec.chart.valuesFrom` end to end, with the real helm binary against a workload kube-sim
//! (the environment of `controllers_helm_release`): values from a ConfigMap and a Secret reach
//! the installed release, merged in order with `targetPath` and with `spec.chart.values` last;
//! a changed Secret upgrades the release exactly once, and a pass with nothing changed writes
//! nothing; a missing source waits quietly and installs once created, an optional one is
//! skipped; an operator-written Secret is refused as a source; a YAML error names the object,
//! key and line. No value read from a Secret shows up in status, Events or logs.

use crate::controllers_helm_release::{Helm, poke, ready_at};
use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use omni_operator::api::OmniHelmRelease;
use serde_json::{Value, json};
use support::chart_repo::run_helm;
use support::env::NS;
use support::{condition, operator_logs, wait_for};

/// A value only ever stored in a values Secret: it must reach the chart and nothing else.
const SECRET_VALUE: &str = "values-secret-7f3a91";
/// The same Secret after an edit.
const SECRET_VALUE_TWO: &str = "values-secret-2c8e55";

/// The chart of `env`'s repository at 0.1.0 with `values` and `values_from`.
fn chart(env: &Helm, values: Value, values_from: Value) -> Value {
    json!({
        "repository": env.repo.url,
        "chart": "demo",
        "version": "0.1.0",
        "values": values,
        "valuesFrom": values_from,
        "credentialsSecretRef": {"name": "repo-credentials"},
        // The test repository is plain HTTP: credentials go there only on request.
        "insecure": true,
    })
}

/// Waits until release `name` is `Ready=False` for `why`: the release, and the message.
async fn held_because(env: &Helm, name: &str, why: &str) -> (OmniHelmRelease, String) {
    let r = wait_for(&env.releases(), name, why, |r| {
        condition(r, "Ready").is_some_and(|(s, reason, _)| s == "False" && reason == why)
    })
    .await;
    let message = condition(&r, "Ready").unwrap_or_default().2;
    (r, message)
}

/// Writes the management API server has served for release `name`.
fn writes_to(env: &Helm, name: &str) -> u64 {
    env.env
        .kube
        .hooks()
        .writes_to_object("omnihelmreleases", Some(NS), name)
}

async fn config_map(env: &Helm, name: &str, data: Value) {
    let _: ConfigMap = env
        .env
        .create(json!({"metadata": {"name": name, "namespace": NS}, "data": data}))
        .await;
}

/// The values the release was installed with (`helm get values -o json`).
async fn helm_values(env: &Helm, release: &str) -> Value {
    let kubeconfig = env.env.workload_kubeconfig("values-from-reader");
    let release = release.to_string();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, kubeconfig).unwrap_or_else(|e| panic!("{e}"));
        let path = path.display().to_string();
        let args = ["get", "values", release.as_str(), "--output", "json"];
        let out = run_helm(
            &[
                &args[..],
                &["--namespace", "default", "--kubeconfig", &path],
            ]
            .concat(),
            dir.path(),
        );
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("helm's JSON: {e}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Checks status, Events and logs for the values only the Secrets hold.
async fn assert_values_never_shown(env: &Helm) {
    let releases = env
        .releases()
        .list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let statuses = serde_json::to_string(&releases.items).unwrap_or_default();
    let events = serde_json::to_string(&env.env.events().await).unwrap_or_default();
    let logs = operator_logs();
    for value in [SECRET_VALUE, SECRET_VALUE_TWO, "leaked-greeting"] {
        for (what, text) in [
            ("releases", &statuses),
            ("Events", &events),
            ("logs", &logs),
        ] {
            assert!(!text.contains(value), "{what} show a values Secret's value");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_from_a_config_map_and_a_secret_are_merged_in_order_and_follow_the_secret() {
    let env = Helm::start().await;
    let api = env.releases();
    config_map(
        &env,
        "defaults",
        json!({"values.yaml": "greeting: from-config-map\nnested:\n  a: 1\n  b: 1\n"}),
    )
    .await;
    env.env
        .create_secret(
            "overrides",
            json!({"custom.yaml": "nested:\n  b: 2\n  c: 2\n", "token": SECRET_VALUE}),
        )
        .await;
    env.create_release(
        "merged",
        json!({"chart": chart(
            &env,
            json!({"nested": {"c": 3}}),
            json!([
                {"kind": "ConfigMap", "name": "defaults"},
                {"kind": "Secret", "name": "overrides", "valuesKey": "custom.yaml"},
                {"kind": "Secret", "name": "overrides", "valuesKey": "token", "targetPath": "auth.token"},
                {"kind": "ConfigMap", "name": "not-there", "optional": true},
                {"kind": "Secret", "name": "overrides", "valuesKey": "no-such-key", "optional": true},
            ]),
        )}),
    )
    .await;
    wait_for(&api, "merged", "Ready at revision 1", |r| ready_at(r, 1)).await;
    assert_eq!(
        helm_values(&env, "merged").await,
        json!({
            "greeting": "from-config-map",
            "nested": {"a": 1, "b": 2, "c": 3},
            "auth": {"token": SECRET_VALUE},
        })
    );
    assert_eq!(
        env.greeting("merged").await.as_deref(),
        Some("from-config-map")
    );

    // The Secret changes: one upgrade with the new value.
    let secrets: kube::Api<Secret> = env.env.api();
    secrets
        .patch(
            "overrides",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": SECRET_VALUE_TWO}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(&api, "merged", "Ready at revision 2", |r| ready_at(r, 2)).await;
    assert_eq!(
        helm_values(&env, "merged").await["auth"]["token"],
        SECRET_VALUE_TWO
    );

    // A pass with nothing changed: no new revision, no status write.
    let writes = writes_to(&env, "merged");
    poke(&env, "merged").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(env.helm_revisions("merged").await, vec![1, 2]);
    assert_eq!(
        writes_to(&env, "merged"),
        writes + 1,
        "only the test's own annotation was written"
    );
    assert_values_never_shown(&env).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_source_waits_quietly_and_the_release_installs_once_it_exists() {
    let env = Helm::start().await;
    let api = env.releases();
    env.create_release(
        "patient",
        json!({"chart": chart(
            &env,
            json!({}),
            json!([{"kind": "ConfigMap", "name": "late-values"}]),
        )}),
    )
    .await;
    let (r, message) = held_because(&env, "patient", "ValuesSourceMissing").await;
    assert!(
        message.contains(&format!(
            "ConfigMap \"{NS}/late-values\" does not exist (spec.chart.valuesFrom[0])"
        )),
        "{message}"
    );
    assert_eq!(
        condition(&r, "Reconciling").map(|c| c.0).as_deref(),
        Some("True"),
        "waiting, not stalled"
    );
    // Waiting writes nothing and runs no Helm.
    let writes = writes_to(&env, "patient");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(writes_to(&env, "patient"), writes);
    assert!(env.helm_revisions("patient").await.is_empty());

    config_map(
        &env,
        "late-values",
        json!({"values.yaml": "greeting: at-last\n"}),
    )
    .await;
    wait_for(&api, "patient", "Ready at revision 1", |r| ready_at(r, 1)).await;
    assert_eq!(env.greeting("patient").await.as_deref(), Some("at-last"));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_secret_is_refused_and_a_yaml_error_names_its_source_and_line() {
    let env = Helm::start().await;
    // A Secret the operator wrote (an export's minted kubeconfig carries this label).
    let _: Secret = env
        .env
        .create(json!({
            "metadata": {"name": "minted", "namespace": NS,
                         "labels": {"app.kubernetes.io/managed-by": "omni-cluster-operator"}},
            "stringData": {"values.yaml": "greeting: leaked-greeting\n"},
        }))
        .await;
    config_map(
        &env,
        "broken",
        json!({"values.yaml": "greeting: fine\nnested: [unclosed\n"}),
    )
    .await;
    for (name, source) in [("borrower", "minted"), ("misparsed", "broken")] {
        let kind = if source == "minted" {
            "Secret"
        } else {
            "ConfigMap"
        };
        env.create_release(
            name,
            json!({"chart": chart(&env, json!({}), json!([{"kind": kind, "name": source}]))}),
        )
        .await;
    }
    let (_, message) = held_because(&env, "borrower", "ValidationFailed").await;
    assert!(
        message.contains(&format!("\"{NS}/minted\" was written by the operator")),
        "{message}"
    );
    assert!(message.contains("spec.chart.valuesFrom[0]"), "{message}");
    let (_, message) = held_because(&env, "misparsed", "ValidationFailed").await;
    assert!(
        message.starts_with(&format!(
            "ConfigMap \"{NS}/broken\" key \"values.yaml\" is not valid YAML (error at line "
        )),
        "{message}"
    );
    assert!(env.helm_revisions("borrower").await.is_empty());
    assert!(env.helm_revisions("misparsed").await.is_empty());
    assert_values_never_shown(&env).await;
    env.shutdown().await;
}

/// The sources are read as the release's ServiceAccount: a ConfigMap it may read feeds the
/// chart, one it may not is `AccessDenied` naming the entry, and the operator's own identity
/// reads no ConfigMap's content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_are_read_as_the_releases_service_account() {
    let env = Helm::start_with(support::env::Env::builder().without_connection().rbac()).await;
    config_map(
        &env,
        "shared-values",
        json!({"values.yaml": "greeting: shared\n"}),
    )
    .await;
    config_map(
        &env,
        "private-values",
        json!({"values.yaml": "greeting: private\n"}),
    )
    .await;
    let _: k8s_openapi::api::rbac::v1::Role = env
        .env
        .create(json!({
            "metadata": {"name": "values-reader", "namespace": NS},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                 "resourceNames": ["workload-kubeconfig", "repo-credentials"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                 "resourceNames": ["shared-values"]},
            ],
        }))
        .await;
    let _: k8s_openapi::api::rbac::v1::RoleBinding = env
        .env
        .create(json!({
            "metadata": {"name": "values-reader", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "values-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "values-reader", "namespace": NS}],
        }))
        .await;
    env.env.kube.hooks().reset();
    for (name, source) in [("tenant-app", "shared-values"), ("nosy", "private-values")] {
        env.create_release(
            name,
            json!({
                "serviceAccountName": "values-reader",
                "chart": chart(&env, json!({}), json!([{"kind": "ConfigMap", "name": source}])),
            }),
        )
        .await;
    }
    wait_for(&env.releases(), "tenant-app", "Ready at revision 1", |r| {
        ready_at(r, 1)
    })
    .await;
    assert_eq!(env.greeting("tenant-app").await.as_deref(), Some("shared"));
    let (_, message) = held_because(&env, "nosy", "AccessDenied").await;
    assert!(
        message.contains("private-values") && message.contains("spec.chart.valuesFrom[0]"),
        "{message}"
    );
    assert!(env.helm_revisions("nosy").await.is_empty());
    let by_operator: u64 = env
        .env
        .kube
        .hooks()
        .counts()
        .iter()
        .filter(|(k, _)| k.verb == "get" && k.resource == "configmaps" && k.user == "system:admin")
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(by_operator, 0, "the operator read a ConfigMap as itself");
    env.shutdown().await;
}
