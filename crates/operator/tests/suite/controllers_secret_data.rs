//! OmniSecretSync(Set) data mapping and `namespaceSelector` against the emulators: three
//! OmniClusters (`a`, `b`, `c`), each with a workload kube-sim of its own reached through a
//! kubeconfig Secret `<cluster>-kubeconfig`, of which `a` and `b` carry `pull: yes`. One
//! OmniSecretSyncSet puts a pull secret, built from two source Secrets (one key as is, one
//! rendered by a template), into every labelled namespace of every matching cluster; the copy
//! follows the sources, reaches a namespace created later, leaves a namespace that stops
//! matching, never touches a Secret it did not create, and an idle pass writes nothing to either
//! side. A data template that fails names its field and line and no value.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::RunningKubeSim;
use omni_operator::cli::run::OperatorConfig;
use omni_operator::controllers::Scope;
use serde_json::{Value, json};

use crate::support::leaks::assert_no_secret_leaks;
use crate::support::stack::{Operator, ours, resource};
use crate::support::{condition, create_json, install_operator_api, kube_sim, wait_for};

const NS: &str = "pull-fleet";
const PASSWORD: &str = "registry-password-9f3e-do-not-leak";
const ROTATED: &str = "registry-password-rotated-77ab";
const DOCKERCONFIG: &str = r#"{"auths":{"registry.example.com":{}}}"#;
/// How often the operator re-checks a synced copy (and lists the namespaces) here.
const RESYNC: Duration = Duration::from_secs(2);
/// The least time between two count-only status writes of a set.
const SET_PACE: Duration = Duration::from_secs(5);
/// The pull secret's name in the workload clusters.
const COPY: &str = "registry-pull";

struct Pull {
    mgmt: RunningKubeSim,
    client: kube::Client,
    workloads: BTreeMap<String, (RunningKubeSim, kube::Client)>,
    operator: Option<Operator>,
}

impl Pull {
    /// The management kube-sim with the operator's API, three workload clusters with the
    /// namespaces `team-a` and `team-b` (labelled `pull-secret: "yes"`) and `other`, their
    /// kubeconfig Secrets, the two source Secrets, the OmniClusters, and the operator.
    async fn start() -> Pull {
        crate::support::operator_logs();
        let (mgmt, client) = kube_sim().await;
        install_operator_api(&client, NS).await;
        let mut workloads = BTreeMap::new();
        for name in ["a", "b", "c"] {
            let (sim, workload) = kube_sim().await;
            for (ns, label) in [("team-a", true), ("team-b", true), ("other", false)] {
                namespace(&workload, ns, label).await;
            }
            let kubeconfig = Kubeconfig::new(
                sim.base_url.clone(),
                "admin",
                Credential::Token("workload-token".into()),
            )
            .to_yaml()
            .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
            secret(
                &client,
                &format!("{name}-kubeconfig"),
                json!({"stringData": {"kubeconfig": kubeconfig}}),
            )
            .await;
            workloads.insert(name.to_string(), (sim, workload));
        }
        secret(
            &client,
            "registry-pull",
            json!({"type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": DOCKERCONFIG}}),
        )
        .await;
        secret(
            &client,
            "registry-login",
            json!({"stringData": {"username": "robot", "password": PASSWORD}}),
        )
        .await;
        for name in ["a", "b", "c"] {
            let labels = if name == "c" {
                json!({})
            } else {
                json!({"pull": "yes"})
            };
            let mut cluster = ours(
                "OmniCluster",
                NS,
                name,
                json!({
                    "connectionRef": {"name": "omni"},
                    "kubernetes": {"version": "v1.35.0"},
                    "talos": {"version": "v1.13.2"},
                }),
            );
            cluster["metadata"]["labels"] = labels;
            create_json(&client, cluster).await;
        }
        let mut config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
        config.secret_sync_resync = RESYNC;
        let operator = Some(Operator::spawn(config, client.clone()));
        Pull {
            mgmt,
            client,
            workloads,
            operator,
        }
    }

    fn api(&self, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, &resource(kind))
    }

    fn secrets(&self, cluster: &str, ns: &str) -> Api<Secret> {
        Api::namespaced(self.workloads[cluster].1.clone(), ns)
    }

    async fn copy(&self, cluster: &str, ns: &str) -> Option<Secret> {
        self.secrets(cluster, ns)
            .get_opt(COPY)
            .await
            .unwrap_or_else(|e| panic!("get {cluster}/{ns}/{COPY}: {e}"))
    }

    /// Waits until `what` holds.
    async fn eventually(&self, what: &str, check: impl AsyncFn() -> bool) {
        let until = tokio::time::Instant::now() + crate::support::WAIT;
        while !check().await {
            assert!(tokio::time::Instant::now() < until, "never: {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Writes to the workload clusters since their counters were last reset.
    fn workload_writes(&self) -> u64 {
        self.workloads
            .values()
            .map(|(sim, _)| sim.hooks().writes_total())
            .sum()
    }

    async fn shutdown(mut self) {
        if let Some(operator) = self.operator.take() {
            operator.stop().await;
        }
        drop(self.mgmt);
    }
}

async fn namespace(client: &kube::Client, name: &str, selected: bool) {
    let labels = if selected {
        json!({"pull-secret": "yes"})
    } else {
        json!({})
    };
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
            .unwrap_or_else(|e| panic!("{e}"));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

async fn secret(client: &kube::Client, name: &str, body: Value) {
    let mut s =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}});
    if let (Some(s), Some(b)) = (s.as_object_mut(), body.as_object()) {
        s.extend(b.clone());
    }
    create_json(client, s).await;
}

fn value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// What the template renders for `cluster` with the login `password`.
fn expected_auth(cluster: &str, password: &str) -> String {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("robot:{password}"));
    format!("{cluster}:{token}")
}

/// The pull secret set: `.dockerconfigjson` as is from `registry-pull`, `registry-auth`
/// rendered from `registry-login` (and the cluster's name) by the generated sync.
fn pull_set() -> Value {
    json!({
        "clusterSelector": {"matchLabels": {"pull": "yes"}},
        "template": {
            "startWhen": "ClusterExists",
            "sources": [
                {"name": "registry-pull", "alias": "pull"},
                {"name": "registry-login", "alias": "login"}
            ],
            "data": [
                {"key": ".dockerconfigjson", "fromSecret": "pull"},
                {"key": "registry-auth", "template": "{{ cluster.name }}:{{ (sources.login.username ~ ':' ~ sources.login.password) | b64encode }}"}
            ],
            "type": "kubernetes.io/dockerconfigjson",
            "targetSecretRef": {
                "name": COPY,
                "namespaceSelector": {"matchLabels": {"pull-secret": "yes"}}
            },
            "deletionPolicy": "Delete"
        },
        "credentials": {"kubeconfigSecretRef": {"name": "{{ cluster.name }}-kubeconfig"}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_secret_reaches_every_selected_namespace_of_every_matching_cluster() {
    let pull = Pull::start().await;
    // A Secret of the copy's name that the operator did not create, in a selected namespace.
    let foreign: Secret = serde_json::from_value(json!({
        "metadata": {"name": COPY, "namespace": "team-b"},
        "stringData": {"owner": "someone else"},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let foreign = pull
        .secrets("a", "team-b")
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap_or_else(|e| panic!("foreign Secret: {e}"));
    create_json(
        &pull.client,
        ours("OmniSecretSyncSet", NS, "pull", pull_set()),
    )
    .await;

    // Every selected namespace of a and b gets the copy, with the rendered key.
    for (cluster, ns) in [("a", "team-a"), ("b", "team-a"), ("b", "team-b")] {
        let s = wait_for(&pull.secrets(cluster, ns), COPY, "copied", |s| {
            value(s, "registry-auth").is_some()
        })
        .await;
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
        assert_eq!(
            value(&s, ".dockerconfigjson").as_deref(),
            Some(DOCKERCONFIG)
        );
        assert_eq!(
            value(&s, "registry-auth"),
            Some(expected_auth(cluster, PASSWORD)),
            "{cluster}/{ns}"
        );
    }
    // The generated sync of `a` reports the Secret in its way, naming it, and leaves it.
    let a = wait_for(
        &pull.api("OmniSecretSync"),
        "pull-a",
        "TargetNotOwned",
        |o| condition(o, "Ready").is_some_and(|(_, r, _)| r == "TargetNotOwned"),
    )
    .await;
    let (_, _, message) = condition(&a, "Ready").unwrap_or_default();
    assert!(
        message.contains(r#"workload Secret "team-b/registry-pull" exists and is not owned"#)
            && message.starts_with("the copy is in 1 of 2 namespaces"),
        "{message}"
    );
    assert_eq!(
        a.data["status"]["namespaceFailures"][0]["namespace"],
        "team-b"
    );
    assert_eq!(a.data["status"]["syncedNamespaces"], json!(["team-a"]));
    let b = wait_for(&pull.api("OmniSecretSync"), "pull-b", "Synced", |o| {
        condition(o, "Ready").is_some_and(|(s, r, _)| s == "True" && r == "Synced")
    })
    .await;
    assert_eq!(b.data["status"]["syncedNamespaceCount"], 2);
    assert_eq!(
        b.data["status"]["syncedNamespaces"],
        json!(["team-a", "team-b"])
    );
    // Nothing in the unselected namespace, nothing in the unmatched cluster.
    for cluster in ["a", "b"] {
        assert!(pull.copy(cluster, "other").await.is_none());
    }
    for ns in ["team-a", "team-b", "other"] {
        assert!(pull.copy("c", ns).await.is_none(), "c/{ns}");
    }
    assert!(
        pull.api("OmniSecretSync")
            .get_opt("pull-c")
            .await
            .ok()
            .flatten()
            .is_none()
    );

    // Idle: re-checks (every RESYNC) read both sides and write to neither. The set writes
    // its last counts up to SET_PACE after its members' last change (docs/fleet.md).
    tokio::time::sleep(RESYNC * 2 + SET_PACE).await;
    pull.mgmt.hooks().reset();
    for (sim, _) in pull.workloads.values() {
        sim.hooks().reset();
    }
    tokio::time::sleep(RESYNC * 4).await;
    let mgmt_writes: u64 = ["omnisecretsyncs", "omnisecretsyncsets", "secrets", "events"]
        .iter()
        .map(|r| pull.mgmt.hooks().writes_to(r))
        .sum();
    assert_eq!(
        mgmt_writes, 0,
        "an idle pass wrote to the management cluster"
    );
    assert_eq!(
        pull.workload_writes(),
        0,
        "an idle pass wrote to a workload cluster"
    );
    let reads: u64 = pull
        .workloads
        .values()
        .map(|(s, _)| s.hooks().reads_total())
        .sum();
    assert!(reads > 0, "the re-check never looked");

    // A source change reaches every copy.
    Api::<Secret>::namespaced(pull.client.clone(), NS)
        .patch(
            "registry-login",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": ROTATED}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for (cluster, ns) in [("a", "team-a"), ("b", "team-a"), ("b", "team-b")] {
        wait_for(&pull.secrets(cluster, ns), COPY, "rotated", |s| {
            value(s, "registry-auth") == Some(expected_auth(cluster, ROTATED))
        })
        .await;
    }

    // A namespace created later gets the copy; one that stops matching loses it.
    namespace(&pull.workloads["b"].1, "late", true).await;
    wait_for(&pull.secrets("b", "late"), COPY, "copied late", |_| true).await;
    Api::<Namespace>::all(pull.workloads["b"].1.clone())
        .patch(
            "team-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pull-secret": null}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pull.eventually("b/team-a loses the copy", async || {
        pull.copy("b", "team-a").await.is_none()
    })
    .await;
    wait_for(
        &pull.api("OmniSecretSync"),
        "pull-b",
        "two namespaces",
        |o| o.data["status"]["syncedNamespaces"] == json!(["late", "team-b"]),
    )
    .await;

    // The foreign Secret was never written.
    let after = pull
        .copy("a", "team-b")
        .await
        .unwrap_or_else(|| panic!("the foreign Secret is gone"));
    assert_eq!(after.resource_version(), foreign.resource_version());
    assert_eq!(value(&after, "owner").as_deref(), Some("someone else"));

    // No value in any status, Event or log line, the set's included.
    let set = pull
        .api("OmniSecretSyncSet")
        .get("pull")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let set_status = serde_json::to_string(&set.data["status"]).unwrap_or_default();
    assert_no_secret_leaks(&pull.client, &[set_status], &[PASSWORD, ROTATED]).await;
    pull.shutdown().await;
}

/// A data template that fails while rendering is `Ready=False` reason `TemplateFailed`
/// naming the field and the line, writes nothing, and quotes no value (the failing lookup is
/// keyed by the password).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_error_names_field_and_line_and_leaks_no_value() {
    let pull = Pull::start().await;
    create_json(
        &pull.client,
        ours(
            "OmniSecretSync",
            NS,
            "leaky",
            json!({
                "clusterRef": {"name": "a"},
                "startWhen": "ClusterExists",
                "kubeconfigSecretRef": {"name": "a-kubeconfig", "key": "kubeconfig"},
                "sources": [{"name": "registry-login", "alias": "login"}],
                "data": [{"key": "k", "template": "user {{ sources.login.username }}\n{{ sources.login[sources.login.password] | int }}"}],
                "targetSecretRef": {"name": COPY, "namespace": "team-a"},
                "deletionPolicy": "Delete"
            }),
        ),
    )
    .await;
    let failed = wait_for(
        &pull.api("OmniSecretSync"),
        "leaky",
        "TemplateFailed",
        |o| condition(o, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "TemplateFailed"),
    )
    .await;
    let (_, _, message) = condition(&failed, "Ready").unwrap_or_default();
    assert!(
        message.starts_with("spec.data[0].template: line 2: "),
        "{message}"
    );
    assert!(condition(&failed, "Stalled").is_some_and(|(s, _, _)| s == "True"));
    assert!(
        pull.copy("a", "team-a").await.is_none(),
        "a failed render wrote"
    );
    assert_no_secret_leaks(&pull.client, &[], &[PASSWORD]).await;
    pull.shutdown().await;
}

/// `omni-operator validate` checks a data template offline, naming the field and the line,
/// also inside a set's template (which leaves it to the generated sync).
#[test]
fn validate_reports_a_data_template_error_with_its_field_and_line() {
    let (passed, text) = crate::support::validate_manifest(
        r#"apiVersion: omni.texashpc.com/v1alpha1
kind: OmniSecretSyncSet
metadata: {name: pull, namespace: fleet}
spec:
  credentials: {kubeconfigSecretRef: {name: "{{ cluster.name }}-kubeconfig"}}
  clusterSelector: {matchLabels: {pull: "yes"}}
  template:
    sources: [{name: registry-login, alias: login}]
    data:
      - key: auth
        template: "{{ sources.login.username }}\n{{ sources.login.password | b64encode "
    targetSecretRef:
      name: registry-pull
      namespace: apps
      namespaceSelector: {matchLabels: {pull-secret: "yes"}}
    deletionPolicy: Delete
"#,
    );
    assert!(!passed, "{text}");
    assert!(
        text.contains("spec.template.data[0].template") && text.contains("line 2"),
        "{text}"
    );
    assert!(
        text.contains("spec.template.targetSecretRef.namespaceSelector")
            && text.contains("not both"),
        "{text}"
    );
}
