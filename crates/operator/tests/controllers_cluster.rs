//! OmniCluster and its children end to end: the operator embedded in-process against kube-sim
//! (management cluster, plus a second one as the workload cluster) and omni-sim (Omni). Covers the
//! shipped samples becoming Ready in the documented order, idle reconciles writing nothing
//! anywhere, each condition reason of the cluster and child kinds, drift repair, the three
//! deletion policies, retries after API failures, metrics, and that no credential leaks into
//! logs, Events or status.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use omni_operator::api::{
    OmniCluster, OmniConnection, OmniControlPlane, OmniKubeconfigExport, OmniMachine,
    OmniSecretSync, OmniWorkers,
};
use omni_operator::cli::run::{OperatorConfig, run_operator};
use omni_operator::controllers::Scope;
use omni_operator::metrics::Metrics;
use omni_sim::types::{label, ty};
use omni_sim::{OmniSim, PoolMachine, Role, RunningOmniSim};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::{condition, ready, sample, wait_for, wait_gone};
use tokio::time::Instant;

/// Namespace of the shipped samples.
const NS: &str = "omni-cluster-operator-system";
const CP: &str = "11111111-1111-4111-8111-111111111111";
/// Generous: the machine is shared and loaded.
const WAIT: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------------------------
// Log capture: every test's logs go to one buffer that is checked for key material.

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.lock() {
            Ok(mut v) => v.extend_from_slice(buf),
            Err(p) => p.into_inner().extend_from_slice(buf),
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "info,omni_operator=debug,omni_client=debug",
            ))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        captured
    })
}

fn captured_text() -> String {
    let v = match logs().0.lock() {
        Ok(v) => v.clone(),
        Err(p) => p.into_inner().clone(),
    };
    String::from_utf8_lossy(&v).to_string()
}

// ---------------------------------------------------------------------------------------------
// Environment: kube-sim + omni-sim + the operator.

struct Env {
    kube: kube_sim::server::RunningKubeSim,
    client: kube::Client,
    sim: RunningOmniSim,
    key: String,
    metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    operator: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

async fn start_kube() -> (kube_sim::server::RunningKubeSim, kube::Client) {
    let kube = kube_sim::server::KubeSim::builder()
        .start()
        .await
        .unwrap_or_else(|e| panic!("start kube-sim: {e}"));
    let uri: http::Uri = kube.base_url.parse().unwrap_or_else(|e| panic!("uri: {e}"));
    let client =
        kube::Client::try_from(kube::Config::new(uri)).unwrap_or_else(|e| panic!("client: {e}"));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in omni_operator::api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("create CRD: {e}"));
    }
    (kube, client)
}

fn kube_writes(kube: &kube_sim::server::RunningKubeSim) -> u64 {
    kube.writes_total()
}

impl Env {
    async fn start() -> Env {
        logs();
        let (kube, client) = start_kube().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(NS.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace: {e}"));
        // The CRDs are served once a list succeeds.
        let clusters: Api<OmniCluster> = Api::namespaced(client.clone(), NS);
        let until = Instant::now() + WAIT;
        while clusters.list(&ListParams::default()).await.is_err() {
            assert!(Instant::now() < until, "CRDs never became servable");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let sim = OmniSim::builder()
            // Static machine IDs in these tests are not seeded: let them connect.
            .auto_register_machines(true)
            .status_step(Duration::from_millis(20))
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        let key = sim
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "omni-service-account", "namespace": NS},
            "stringData": {"serviceAccountKey": key},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("create Secret: {e}"));

        let metrics = Arc::new(Metrics::new());
        let mut config = OperatorConfig::embedded(Scope::Namespace(NS.into()));
        config.metrics = metrics.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let operator = tokio::spawn(run_operator(config, client.clone(), async move {
            let _ = rx.await;
        }));
        Env {
            kube,
            client,
            sim,
            key,
            metrics,
            stop: Some(tx),
            operator: Some(operator),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create<K>(&self, obj: Value) -> K
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let typed: K = serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
        self.api::<K>()
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", typed.name_any()))
    }

    async fn connection(&self, name: &str) -> OmniConnection {
        self.create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "endpoint": self.sim.endpoint(),
                "auth": {"serviceAccountSecretRef": {"name": "omni-service-account", "key": "serviceAccountKey"}},
            },
        }))
        .await
    }

    /// A cluster with one control-plane machine, `extra` merged into its spec.
    async fn cluster(&self, name: &str, machine: &str, extra: Value) -> OmniCluster {
        let mut spec = json!({
            "connectionRef": {"name": "omni"},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "syncInterval": "1s",
        });
        merge(&mut spec, extra);
        let cluster = self
            .create(json!({
                "apiVersion": "omni.texashpc.com/v1alpha1",
                "kind": "OmniCluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": spec,
            }))
            .await;
        if !machine.is_empty() {
            let _: OmniControlPlane = self
                .create(json!({
                    "apiVersion": "omni.texashpc.com/v1alpha1",
                    "kind": "OmniControlPlane",
                    "metadata": {"name": format!("{name}-cp"), "namespace": NS},
                    "spec": {"clusterRef": {"name": name}, "machines": [machine]},
                }))
                .await;
        }
        cluster
    }

    async fn shutdown(mut self) {
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

    /// Asserts that the key appears in no log line, Event or status of our kinds.
    async fn assert_key_never_leaked(&self) {
        let key = self.key.as_str();
        assert!(
            !captured_text().contains(key),
            "the key appears in the logs"
        );
        let events = Api::<K8sEvent>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list Events: {e}"));
        let text = serde_json::to_string(&events.items).unwrap_or_default();
        assert!(!text.contains(key), "the key appears in an Event");
        let mut all = Vec::new();
        for v in [
            list_json::<OmniConnection>(self).await,
            list_json::<OmniCluster>(self).await,
            list_json::<OmniControlPlane>(self).await,
            list_json::<OmniWorkers>(self).await,
            list_json::<OmniMachine>(self).await,
        ] {
            all.push(v);
        }
        let text = serde_json::to_string(&all).unwrap_or_default();
        assert!(!text.contains(key), "the key appears in an object");
    }

    fn reconciles(&self, kind: &str) -> u64 {
        let text = self.metrics.encode().unwrap_or_default();
        let prefix = format!("omni_operator_reconciles_total{{kind=\"{kind}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// Metrics text once `ready` holds for it (gauges are set just after status writes, so they may
/// trail what the test has observed by a moment), or the last text after 30 s.
async fn metrics_when(env: &Env, ready: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = env.metrics.encode().unwrap_or_default();
        if ready(&text) || std::time::Instant::now() >= deadline {
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn list_json<K>(env: &Env) -> Value
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let list = env
        .api::<K>()
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list: {e}"));
    serde_json::to_value(&list.items).unwrap_or_default()
}

fn merge(base: &mut Value, extra: Value) {
    if let (Value::Object(b), Value::Object(e)) = (base, extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}

fn has(obj: &impl serde::Serialize, type_: &str, status: &str, reason: &str) -> bool {
    condition(obj, type_).is_some_and(|(s, r, _)| s == status && r == reason)
}

async fn wait_until(what: &str, mut pred: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while !pred() {
        assert!(Instant::now() < until, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_become_ready_and_idle_reconciles_write_nothing() {
    let env = Env::start().await;

    // Applied in the documented order: connection, cluster, control plane, workers, machines.
    for mut doc in sample("01-omniconnection.yaml") {
        doc["spec"]["endpoint"] = json!(env.sim.endpoint());
        let _: OmniConnection = env.create(doc).await;
    }
    for mut doc in sample("02-omnicluster.yaml") {
        // Frequent re-checks so the idle phase below sees many reconciles.
        doc["spec"]["syncInterval"] = json!("1s");
        let _: OmniCluster = env.create(doc).await;
    }
    for doc in sample("03-omnicontrolplane.yaml") {
        let _: OmniControlPlane = env.create(doc).await;
    }
    for doc in sample("04-omniworkers.yaml") {
        let _: OmniWorkers = env.create(doc).await;
    }
    for doc in sample("05-omnimachine.yaml") {
        let _: OmniMachine = env.create(doc).await;
    }

    let conn = wait_for(&env.api::<OmniConnection>(), "omni-sample", "Ready", ready).await;
    assert!(has(&conn, "Reachable", "True", "ConnectionReady"));
    assert!(has(&conn, "Stalled", "False", "ConnectionReady"));
    let (_, _, message) = condition(&conn, "Ready").unwrap_or_default();
    assert!(message.starts_with("connected to "), "{message}");

    // Children may arrive after a first render: wait until all of them are in the template.
    let cluster = wait_for(
        &env.api::<OmniCluster>(),
        "edge-sample",
        "Ready with every child",
        |c| {
            has(c, "Ready", "True", "Synced")
                && c.status
                    .as_ref()
                    .is_some_and(|s| s.machine_refs.len() == 2 && s.workers_refs.len() == 1)
        },
    )
    .await;
    assert_eq!(
        condition(&cluster, "Ready").map(|c| c.2).as_deref(),
        Some("cluster template is synced and status was read from Omni")
    );
    assert!(has(&cluster, "Synced", "True", "Synced"));
    assert!(has(&cluster, "Validated", "True", "Validated"));
    let status = cluster.status.clone().unwrap_or_default();
    assert_eq!(status.cluster_name.as_deref(), Some("edge-sample"));
    assert_eq!(status.connection_ref.as_deref(), Some("omni-sample"));
    assert_eq!(
        status.control_plane_ref.as_deref(),
        Some("edge-sample-control-plane")
    );
    assert_eq!(status.workers_refs, vec!["edge-sample-workers".to_string()]);
    assert_eq!(
        status.machine_refs.len(),
        2,
        "machines: {:?}",
        status.machine_refs
    );
    let hash = status.template_hash.clone().unwrap_or_default();
    assert!(
        hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{hash}"
    );
    assert!(env.sim.get(ty::CLUSTER, "edge-sample").is_some());

    for name in ["edge-sample-control-plane"] {
        let cp = wait_for(&env.api::<OmniControlPlane>(), name, "Accepted", ready).await;
        assert!(has(&cp, "Accepted", "True", "Accepted"));
    }
    let w = wait_for(
        &env.api::<OmniWorkers>(),
        "edge-sample-workers",
        "Accepted",
        ready,
    )
    .await;
    assert!(has(&w, "Accepted", "True", "Accepted"));
    for name in ["edge-sample-control-plane-0", "edge-sample-worker-0"] {
        let m = wait_for(&env.api::<OmniMachine>(), name, "Accepted", ready).await;
        assert!(has(&m, "Accepted", "True", "Accepted"));
    }

    // Idle: once Omni's own status has settled, three more reconciles of every cluster change
    // nothing in either API server. Omni status converges over a few ticks, so the window is
    // retried until it is quiet (a controller that writes on every pass never gets there).
    let until = Instant::now() + WAIT;
    loop {
        let kube_before = kube_writes(&env.kube);
        let omni_before = env.sim.writes_total();
        let start = env.reconciles("OmniCluster");
        wait_until("three more OmniCluster reconciles", || {
            env.reconciles("OmniCluster") >= start + 3
        })
        .await;
        let kube_delta = kube_writes(&env.kube) - kube_before;
        let omni_delta = env.sim.writes_total() - omni_before;
        if kube_delta == 0 && omni_delta == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "reconciles keep writing: {kube_delta} Kubernetes writes, {omni_delta} Omni writes"
        );
    }

    // Metrics: one info series per object with its readiness, and Omni calls by outcome.
    let count = |text: &str, method: &str, outcome: &str| -> u64 {
        let prefix =
            format!(r#"omni_operator_omni_rpcs_total{{method="{method}",outcome="{outcome}"}} "#);
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    // Counters are bumped by reconciles still running when the idle window closed, so wait
    // for them rather than read them once.
    let text = metrics_when(&env, |t| {
        t.contains(r#"name="edge-sample",ready="True",reason="Synced""#)
            && t.contains(r#"name="omni-sample",ready="True",reason="ConnectionReady""#)
            && count(t, "sync", "unchanged") >= 3
    })
    .await;
    for series in [
        format!(
            r#"omni_operator_resource_info{{kind="OmniCluster",namespace="{NS}",name="edge-sample",ready="True",reason="Synced",suspended="false"}} 1"#
        ),
        format!(
            r#"omni_operator_resource_info{{kind="OmniConnection",namespace="{NS}",name="omni-sample",ready="True",reason="ConnectionReady",suspended="false"}} 1"#
        ),
    ] {
        assert!(text.contains(&series), "missing {series} in\n{text}");
    }
    let count = |method: &str, outcome: &str| count(&text, method, outcome);
    assert!(count("sync", "changed") >= 1, "{text}");
    assert!(count("sync", "unchanged") >= 3, "{text}");
    assert!(count("ping", "unchanged") >= 1, "{text}");

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn condition_reasons_of_clusters_and_children() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();

    // MissingConnection: the connection does not exist.
    env.cluster(
        "lonely",
        CP,
        json!({"connectionRef": {"name": "nope"}, "syncInterval": "5m"}),
    )
    .await;
    let c = wait_for(&clusters, "lonely", "MissingConnection", |c| {
        has(c, "Synced", "False", "MissingConnection")
    })
    .await;
    assert_eq!(
        condition(&c, "Ready"),
        Some((
            "False".into(),
            "MissingConnection".into(),
            r#"failed to get OmniConnection "nope": omniconnections.omni.texashpc.com "nope" not found"#
                .into()
        ))
    );
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_name.clone()),
        Some("lonely".into())
    );

    // MissingTemplate: no OmniControlPlane.
    env.cluster("headless", "", json!({"syncInterval": "5m"}))
        .await;
    let c = wait_for(&clusters, "headless", "MissingTemplate", |c| {
        has(c, "Validated", "False", "MissingTemplate")
    })
    .await;
    assert_eq!(
        condition(&c, "Ready").map(|c| c.2),
        Some(format!(
            "expected exactly one OmniControlPlane referencing {NS}/headless, found 0"
        ))
    );

    // ValidationFailed: a spec the webhook would reject (admission bypassed here).
    env.cluster("negative", CP, json!({"syncInterval": "-1m"}))
        .await;
    let c = wait_for(&clusters, "negative", "ValidationFailed", |c| {
        has(c, "Validated", "False", "ValidationFailed")
    })
    .await;
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(message.contains("syncInterval"), "{message}");
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_name.as_deref()),
        Some("negative"),
        "a cluster failing validation still reports its effective name"
    );

    // SyncFailed: Omni refuses a Talos version it does not know.
    env.cluster(
        "unknown-talos",
        "33333333-3333-4333-8333-333333333333",
        json!({"talos": {"version": "v1.99.0"}, "syncInterval": "5m"}),
    )
    .await;
    let c = wait_for(&clusters, "unknown-talos", "SyncFailed", |c| {
        has(c, "Synced", "False", "SyncFailed")
    })
    .await;
    assert!(has(&c, "Ready", "False", "SyncFailed"));
    assert!(has(&c, "Validated", "True", "Validated"));
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(message.starts_with("sync failed: "), "{message}");
    assert!(
        c.status
            .as_ref()
            .and_then(|s| s.last_attempt_time)
            .is_some()
    );

    // Suspended: nothing is sent to Omni.
    env.cluster(
        "paused",
        "44444444-4444-4444-8444-444444444444",
        json!({"suspend": true}),
    )
    .await;
    let c = wait_for(&clusters, "paused", "Suspended", |c| {
        has(c, "Ready", "False", "Suspended")
    })
    .await;
    assert_eq!(
        condition(&c, "Ready").map(|c| c.2).as_deref(),
        Some("remote Omni sync is suspended")
    );
    assert!(env.sim.get(ty::CLUSTER, "paused").is_none());
    let expected = format!(
        r#"omni_operator_resource_info{{kind="OmniCluster",namespace="{NS}",name="paused",ready="False",reason="Suspended",suspended="true"}} 1"#
    );
    let text = metrics_when(&env, |t| t.contains(&expected)).await;
    assert!(text.contains(&expected), "{text}");
    // Resuming syncs it.
    clusters
        .patch(
            "paused",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap_or_else(|e| panic!("resume: {e}"));
    wait_for(&clusters, "paused", "Ready after resume", |c| {
        has(c, "Ready", "True", "Synced")
    })
    .await;
    assert!(env.sim.get(ty::CLUSTER, "paused").is_some());

    // clusterName override: the Omni cluster carries the override.
    env.cluster(
        "renamed",
        "55555555-5555-4555-8555-555555555555",
        json!({"clusterName": "prod_east-1"}),
    )
    .await;
    let c = wait_for(&clusters, "renamed", "Ready", ready).await;
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_name.clone()),
        Some("prod_east-1".into())
    );
    assert!(env.sim.get(ty::CLUSTER, "prod_east-1").is_some());
    assert!(env.sim.get(ty::CLUSTER, "renamed").is_none());

    // Children: MissingCluster until the parent exists, then Accepted.
    let _: OmniWorkers = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniWorkers",
            "metadata": {"name": "early-workers", "namespace": NS},
            "spec": {"clusterRef": {"name": "late"}, "machines": ["66666666-6666-4666-8666-666666666666"]},
        }))
        .await;
    let workers = env.api::<OmniWorkers>();
    let w = wait_for(&workers, "early-workers", "MissingCluster", |w| {
        has(w, "Accepted", "False", "MissingCluster")
    })
    .await;
    assert!(has(&w, "Ready", "False", "MissingCluster"));
    assert_eq!(
        condition(&w, "Accepted").map(|c| c.2).as_deref(),
        Some(r#"OmniCluster "late" does not exist"#)
    );
    env.cluster("late", "77777777-7777-4777-8777-777777777777", json!({}))
        .await;
    let w = wait_for(&workers, "early-workers", "Accepted", |w| {
        has(w, "Accepted", "True", "Accepted")
    })
    .await;
    assert!(has(&w, "Ready", "True", "Accepted"));
    // The new workers reached Omni through the parent.
    let late = wait_for(&clusters, "late", "Ready with workers", |c| {
        ready(c)
            && c.status
                .as_ref()
                .is_some_and(|s| s.workers_refs == vec!["early-workers".to_string()])
    })
    .await;
    assert!(ready(&late));

    // Events record transitions with the condition reasons.
    let events = Api::<K8sEvent>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"));
    let reasons: Vec<(String, String, String)> = events
        .items
        .iter()
        .map(|e| {
            (
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (name, reason, type_) in [
        ("lonely", "MissingConnection", "Warning"),
        ("headless", "MissingTemplate", "Warning"),
        ("unknown-talos", "SyncFailed", "Warning"),
        ("paused", "Suspended", "Warning"),
        ("paused", "Synced", "Normal"),
        ("early-workers", "MissingCluster", "Warning"),
        ("early-workers", "Accepted", "Normal"),
    ] {
        assert!(
            reasons.contains(&(name.into(), reason.into(), type_.into())),
            "no {type_} Event {reason} for {name}: {reasons:?}"
        );
    }

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

async fn machine_joined(env: &Env, machine: &str, cluster: &str) {
    wait_until("machine joined its cluster", || {
        env.sim
            .machine_labels(machine)
            .and_then(|l| l.get(label::CLUSTER).cloned())
            .as_deref()
            == Some(cluster)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_policies_reach_omni_and_connections_wait_for_clusters() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();
    let connections = env.api::<OmniConnection>();
    wait_for(&connections, "omni", "Ready", ready).await;

    let keep = "aaaaaaaa-0000-4000-8000-000000000001";
    let wipe = "aaaaaaaa-0000-4000-8000-000000000002";
    let orphan = "aaaaaaaa-0000-4000-8000-000000000003";
    for id in [keep, wipe, orphan] {
        env.sim.add_machine(PoolMachine {
            id: id.into(),
            labels: Default::default(),
            disconnected: false,
        });
    }
    env.cluster("keep", keep, json!({})).await;
    env.cluster(
        "wipe",
        wipe,
        json!({"deletePolicy": {"destroyMachines": true}}),
    )
    .await;
    env.cluster("orphan", orphan, json!({"deletePolicy": {"orphan": true}}))
        .await;
    for name in ["keep", "wipe", "orphan"] {
        wait_for(&clusters, name, "Ready", ready).await;
    }
    machine_joined(&env, keep, "keep").await;
    machine_joined(&env, wipe, "wipe").await;
    // Disconnected machines are what destroyMachines removes from Omni.
    assert!(env.sim.set_machine_disconnected(keep, true));
    assert!(env.sim.set_machine_disconnected(wipe, true));

    // The connection's deletion waits for every cluster that uses it.
    connections
        .delete("omni", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete connection: {e}"));
    let conn = wait_for(&connections, "omni", "Deleting", |c| {
        has(c, "Ready", "False", "Deleting")
    })
    .await;
    assert_eq!(
        condition(&conn, "Ready").map(|c| c.2).as_deref(),
        Some("waiting for OmniCluster references to be deleted: keep, orphan, wipe")
    );
    assert!(has(&conn, "Stalled", "True", "Deleting"));

    // Default policy: the Omni cluster is deleted, machines stay registered.
    clusters
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete keep: {e}"));
    wait_gone(&clusters, "keep").await;
    assert!(env.sim.get(ty::CLUSTER, "keep").is_none());
    assert!(
        env.sim.get(ty::LINK, keep).is_some(),
        "without destroyMachines the machine stays registered"
    );

    // destroyMachines: the disconnected machine is removed from Omni too.
    clusters
        .delete("wipe", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete wipe: {e}"));
    wait_gone(&clusters, "wipe").await;
    assert!(env.sim.get(ty::CLUSTER, "wipe").is_none());
    assert!(env.sim.get(ty::LINK, wipe).is_none());

    // Orphan: the Omni cluster survives.
    let writes = env.sim.writes_total();
    clusters
        .delete("orphan", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete orphan: {e}"));
    wait_gone(&clusters, "orphan").await;
    assert!(env.sim.get(ty::CLUSTER, "orphan").is_some());
    assert_eq!(
        env.sim.writes_total(),
        writes,
        "orphan deletion wrote to Omni"
    );

    // With no cluster left, the connection goes.
    wait_gone(&connections, "omni").await;

    // Omni's teardown took more than one pass: the waiting was reported while it lasted.
    let events = Api::<K8sEvent>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"));
    for name in ["keep", "wipe"] {
        assert!(
            events.items.iter().any(|e| {
                e.reason.as_deref() == Some("Deleting")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("waiting for Omni to delete"))
            }),
            "no Deleting Event for {name}"
        );
    }

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_without_a_connection_fails_until_orphaned() {
    let env = Env::start().await;
    let clusters = env.api::<OmniCluster>();
    env.cluster(
        "stranded",
        CP,
        json!({"connectionRef": {"name": "gone"}, "syncInterval": "5m"}),
    )
    .await;
    wait_for(&clusters, "stranded", "MissingConnection", |c| {
        has(c, "Ready", "False", "MissingConnection")
    })
    .await;
    clusters
        .delete("stranded", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    let c = wait_for(&clusters, "stranded", "DeleteFailed", |c| {
        has(c, "Ready", "False", "DeleteFailed")
    })
    .await;
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.starts_with(r#"cannot delete remote Omni cluster without OmniConnection "gone": "#),
        "{message}"
    );
    // The documented way out: orphan it.
    clusters
        .patch(
            "stranded",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletePolicy": {"orphan": true}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("orphan: {e}"));
    wait_gone(&clusters, "stranded").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_changes_and_omni_drift_are_synced_and_legacy_finalizers_are_honoured() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();
    let patch = json!({"patches": [{"name": "kubespan", "inline": {"machine": {"network": {"kubespan": {"enabled": true}}}}}]});
    env.cluster("drift", "bbbbbbbb-0000-4000-8000-000000000001", patch)
        .await;
    let before = wait_for(&clusters, "drift", "Ready", ready).await;
    let hash = before
        .status
        .as_ref()
        .and_then(|s| s.template_hash.clone())
        .unwrap_or_default();

    // Out-of-band removal of a template resource in Omni is repaired at the next re-check.
    let patches = env
        .sim
        .store()
        .list_labeled(ty::CONFIG_PATCH, label::CLUSTER, "drift");
    let removed = patches
        .iter()
        .map(|r| omni_sim::store::id(r).to_string())
        .find(|id| id.contains("kubespan"))
        .unwrap_or_else(|| panic!("no kubespan ConfigPatch in Omni"));
    assert!(
        env.sim
            .store()
            .remove(omni_sim::types::DEFAULT_NS, ty::CONFIG_PATCH, &removed)
            .is_some()
    );
    let writes = env.sim.writes_total();
    wait_until("the removed ConfigPatch is restored", || {
        env.sim.get(ty::CONFIG_PATCH, &removed).is_some()
    })
    .await;
    assert!(env.sim.writes_total() > writes);
    let after_drift = wait_for(&clusters, "drift", "Ready", ready).await;
    assert_eq!(
        after_drift
            .status
            .as_ref()
            .and_then(|s| s.template_hash.clone()),
        Some(hash.clone()),
        "the template did not change, only Omni did"
    );

    // A spec change re-renders (new hash) and reaches Omni.
    let writes = env.sim.writes_total();
    clusters
        .patch(
            "drift",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"kubernetes": {"version": "v1.35.1"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch: {e}"));
    let changed = wait_for(&clusters, "drift", "re-synced with a new hash", |c| {
        ready(c)
            && c.status.as_ref().is_some_and(|s| {
                s.template_hash.as_deref() != Some(hash.as_str())
                    && s.observed_generation == c.metadata.generation
            })
    })
    .await;
    assert!(env.sim.writes_total() > writes);
    assert!(has(&changed, "Synced", "True", "Synced"));

    // StatusFailed: Omni's ClusterStatus cannot be decoded (pinned so Omni's controllers leave
    // it alone, then corrupted). The template is still synced.
    env.cluster(
        "unreadable",
        "bbbbbbbb-0000-4000-8000-000000000003",
        json!({}),
    )
    .await;
    wait_for(&clusters, "unreadable", "Ready", ready).await;
    env.sim
        .set_cluster_status(
            "unreadable",
            omni_client::proto::specs::cluster_status_spec::Phase::Running,
            true,
        )
        .unwrap_or_else(|e| panic!("pin status: {e}"));
    env.sim.store().modify(
        omni_sim::types::DEFAULT_NS,
        ty::CLUSTER_STATUS,
        "unreadable",
        |r| {
            if let Some(spec) = r.spec.as_mut() {
                spec.proto_spec = vec![0xff; 3];
            }
        },
    );
    let c = wait_for(&clusters, "unreadable", "StatusFailed", |c| {
        has(c, "Ready", "False", "StatusFailed")
    })
    .await;
    assert!(has(&c, "Synced", "True", "Synced"));
    assert!(has(&c, "Validated", "True", "Validated"));

    // An object from before the group rename keeps only its legacy finalizer, and deleting it
    // removes that finalizer once Omni is clean.
    let legacy = "omni.texas-hpc.org/finalizer";
    let _: OmniCluster = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "old", "namespace": NS, "finalizers": [legacy]},
            "spec": {
                "connectionRef": {"name": "omni"},
                "kubernetes": {"version": "v1.35.0"},
                "talos": {"version": "v1.13.2"},
                "syncInterval": "1s",
            },
        }))
        .await;
    let _: OmniControlPlane = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniControlPlane",
            "metadata": {"name": "old-cp", "namespace": NS},
            "spec": {"clusterRef": {"name": "old"}, "machines": ["bbbbbbbb-0000-4000-8000-000000000002"]},
        }))
        .await;
    let old = wait_for(&clusters, "old", "Ready", ready).await;
    assert_eq!(old.metadata.finalizers, Some(vec![legacy.to_string()]));
    assert!(env.sim.get(ty::CLUSTER, "old").is_some());
    clusters
        .delete("old", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&clusters, "old").await;
    assert!(env.sim.get(ty::CLUSTER, "old").is_none());

    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_moved_to_another_cluster_re_renders_both() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();
    env.cluster(
        "left",
        "cccccccc-0000-4000-8000-000000000001",
        json!({"syncInterval": "1h"}),
    )
    .await;
    env.cluster(
        "right",
        "cccccccc-0000-4000-8000-000000000002",
        json!({"syncInterval": "1h"}),
    )
    .await;
    let _: OmniWorkers = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniWorkers",
            "metadata": {"name": "mover", "namespace": NS},
            "spec": {"clusterRef": {"name": "left"}, "machines": ["cccccccc-0000-4000-8000-000000000003"]},
        }))
        .await;
    let workers_of = |c: &OmniCluster| {
        c.status
            .as_ref()
            .map(|s| s.workers_refs.clone())
            .unwrap_or_default()
    };
    wait_for(&clusters, "left", "Ready with the workers", |c| {
        ready(c) && workers_of(c) == vec!["mover".to_string()]
    })
    .await;
    wait_for(&clusters, "right", "Ready", ready).await;

    env.api::<OmniWorkers>()
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterRef": {"name": "right"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("move: {e}"));
    wait_for(&clusters, "right", "Ready with the workers", |c| {
        ready(c) && workers_of(c) == vec!["mover".to_string()]
    })
    .await;
    // The cluster it left re-renders too. Re-checks are an hour apart here, so only the move
    // itself can have triggered that.
    wait_for(&clusters, "left", "Ready without the workers", |c| {
        ready(c) && workers_of(c).is_empty()
    })
    .await;
    let w = wait_for(
        &env.api::<OmniWorkers>(),
        "mover",
        "Accepted by right",
        |w| {
            has(w, "Accepted", "True", "Accepted")
                && w.status.as_ref().and_then(|s| s.cluster_ref.as_deref()) == Some("right")
        },
    )
    .await;
    assert!(ready(&w));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_kubernetes_writes_are_retried_with_backoff() {
    let env = Env::start().await;
    env.connection("omni").await;
    // The first two writes to this cluster (adding the finalizer) fail with a server error.
    env.kube
        .hooks()
        .fail_next("patch", "omniclusters", Some(NS), Some("flaky"), 500, 2);
    env.cluster("flaky", "dddddddd-0000-4000-8000-000000000001", json!({}))
        .await;
    let c = wait_for(&env.api::<OmniCluster>(), "flaky", "Ready", ready).await;
    assert!(
        c.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "omni.texashpc.com/finalizer")
    );
    let text = env.metrics.encode().unwrap_or_default();
    let errors: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"omni_operator_reconcile_errors_total{kind="OmniCluster"} "#)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(errors >= 2, "{text}");
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

/// Points every minted kubeconfig at one workload API server.
struct Workload(String);

impl omni_sim::WorkloadProvider for Workload {
    fn endpoint(&self, _cluster: &str) -> omni_sim::WorkloadEndpoint {
        omni_sim::WorkloadEndpoint {
            server: self.0.clone(),
            ca_data: None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_samples_in_order_become_ready_and_then_stay_quiet() {
    let env = Env::start().await;
    // The workload cluster Omni hands out kubeconfigs for.
    let workload = kube_sim::server::KubeSim::builder()
        .start()
        .await
        .unwrap_or_else(|e| panic!("start workload kube-sim: {e}"));
    env.sim
        .set_workload_provider(Arc::new(Workload(workload.base_url.clone())));
    let registry_token = "ghcr-pat-5c1b9d7e0a";
    let source: Secret = serde_json::from_value(json!({
        "metadata": {"name": "edge-sample-ghcr", "namespace": NS},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{registry_token}"}}}}}}"#)},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    env.api::<Secret>()
        .create(&PostParams::default(), &source)
        .await
        .unwrap_or_else(|e| panic!("create source Secret: {e}"));

    // The documented order: connection, cluster and children, exports, secret sync
    // (07, OmniHelmRelease, needs a chart repository and has its own tests).
    for mut doc in sample("01-omniconnection.yaml") {
        doc["spec"]["endpoint"] = json!(env.sim.endpoint());
        let _: OmniConnection = env.create(doc).await;
    }
    for doc in sample("02-omnicluster.yaml") {
        let _: OmniCluster = env.create(doc).await;
    }
    for doc in sample("03-omnicontrolplane.yaml") {
        let _: OmniControlPlane = env.create(doc).await;
    }
    for doc in sample("04-omniworkers.yaml") {
        let _: OmniWorkers = env.create(doc).await;
    }
    for doc in sample("05-omnimachine.yaml") {
        let _: OmniMachine = env.create(doc).await;
    }
    for doc in sample("06-omnikubeconfigexport.yaml") {
        let _: OmniKubeconfigExport = env.create(doc).await;
    }
    for doc in sample("08-omnisecretsync.yaml") {
        let _: OmniSecretSync = env.create(doc).await;
    }

    wait_for(&env.api::<OmniCluster>(), "edge-sample", "Ready", ready).await;
    let exports = env.api::<OmniKubeconfigExport>();
    for name in [
        "edge-sample-automation-kubeconfig",
        "edge-sample-gitops-kubeconfig",
    ] {
        wait_for(&exports, name, "Ready", ready).await;
    }
    // Seconds until each exported kubeconfig expires: within the sample's 12h TTL.
    let prefix = format!(
        r#"omni_operator_kubeconfig_expiry_seconds{{namespace="{NS}",name="edge-sample-gitops-kubeconfig"}} "#
    );
    let text = metrics_when(&env, |t| t.contains(&prefix)).await;
    let expiry: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no expiry series in\n{text}"));
    assert!(expiry > 0.0 && expiry <= 12.0 * 3600.0, "{expiry}");
    let secrets = env.api::<Secret>();
    let exported = secrets
        .get("edge-sample-gitops-kubeconfig")
        .await
        .unwrap_or_else(|e| panic!("exported Secret: {e}"));
    assert!(
        exported
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("workload.kubeconfig")),
        "the configured key holds the kubeconfig"
    );
    let sync = wait_for(
        &env.api::<OmniSecretSync>(),
        "edge-sample-ghcr",
        "Ready",
        ready,
    )
    .await;
    assert!(has(&sync, "Synced", "True", "Synced"), "{:?}", sync.status);
    // The copy exists in the workload cluster, in the namespace the sync created.
    let workload_client = kube::Client::try_from(kube::Config::new(
        workload
            .base_url
            .parse()
            .unwrap_or_else(|e| panic!("uri: {e}")),
    ))
    .unwrap_or_else(|e| panic!("client: {e}"));
    let copy = Api::<Secret>::namespaced(workload_client, "flux-system")
        .get("edge-sample-ghcr")
        .await
        .unwrap_or_else(|e| panic!("synced Secret: {e}"));
    assert_eq!(
        copy.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    let copied = copy
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
        .unwrap_or_default();
    assert!(copied.contains(registry_token));

    // Everything Ready: re-checks of every kind now write nothing in either API server.
    let until = Instant::now() + WAIT;
    loop {
        let kube_before = kube_writes(&env.kube);
        let workload_before = workload.writes_total();
        let omni_before = env.sim.writes_total();
        let start = env.reconciles("OmniCluster");
        // The sample's syncInterval is 5m: edits of the sample-free dependencies trigger
        // reconciles instead, through the watches. Touching an unrelated annotation on the
        // connection re-runs the connection and every cluster using it.
        env.api::<OmniConnection>()
            .patch(
                "omni-sample",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"poke": start.to_string()}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("poke: {e}"));
        wait_until("another OmniCluster reconcile", || {
            env.reconciles("OmniCluster") > start
        })
        .await;
        // One write is ours (the poke).
        let kube_delta = kube_writes(&env.kube) - kube_before - 1;
        let workload_delta = workload.writes_total() - workload_before;
        let omni_delta = env.sim.writes_total() - omni_before;
        if kube_delta == 0 && workload_delta == 0 && omni_delta == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "reconciles keep writing: {kube_delta} management, {workload_delta} workload, {omni_delta} Omni"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Neither the registry credential nor the Omni key shows up in logs, Events or status.
    assert!(!captured_text().contains(registry_token));
    let events = Api::<K8sEvent>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"));
    assert!(
        !serde_json::to_string(&events.items)
            .unwrap_or_default()
            .contains(registry_token)
    );
    assert!(
        !serde_json::to_string(&sync)
            .unwrap_or_default()
            .contains(registry_token)
    );
    env.assert_key_never_leaked().await;
    env.shutdown().await;
    workload.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_reasons_and_a_fixed_secret_is_picked_up() {
    let env = Env::start().await;
    let connections = env.api::<OmniConnection>();
    let _: OmniConnection = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": "pending", "namespace": NS},
            "spec": {
                "endpoint": env.sim.endpoint(),
                "auth": {"serviceAccountSecretRef": {"name": "later", "key": "serviceAccountKey"}},
            },
        }))
        .await;
    let c = wait_for(&connections, "pending", "MissingSecret", |c| {
        has(c, "Ready", "False", "MissingSecret")
    })
    .await;
    assert!(has(&c, "Reachable", "False", "MissingSecret"));
    assert!(has(&c, "Stalled", "True", "MissingSecret"));
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.starts_with(r#"failed to connect to Omni: MissingSecret "later": "#),
        "{message}"
    );

    // The env file Omni prints instead of the bare key: refused, and the key stays hidden.
    let secrets = env.api::<Secret>();
    let env_file: Secret = serde_json::from_value(json!({
        "metadata": {"name": "later", "namespace": NS},
        "stringData": {"serviceAccountKey": format!("export OMNI_ENDPOINT={}\nexport OMNI_SERVICE_ACCOUNT_KEY={}\n", env.sim.endpoint(), env.key)},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    secrets
        .create(&PostParams::default(), &env_file)
        .await
        .unwrap_or_else(|e| panic!("create Secret: {e}"));
    let c = wait_for(&connections, "pending", "reports the env file", |c| {
        condition(c, "Ready").is_some_and(|(_, _, m)| m.contains("environment assignments"))
    })
    .await;
    assert!(has(&c, "Ready", "False", "MissingSecret"));

    // Fixing the Secret makes the connection Ready.
    secrets
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"serviceAccountKey": env.key}})),
        )
        .await
        .unwrap_or_else(|e| panic!("fix Secret: {e}"));
    let c = wait_for(&connections, "pending", "Ready", ready).await;
    assert!(has(&c, "Stalled", "False", "ConnectionReady"));
    assert_eq!(
        c.status.as_ref().and_then(|s| s.connection_ref.clone()),
        Some("pending".into())
    );
    assert!(c.status.as_ref().and_then(|s| s.last_check_time).is_some());

    // ConnectionFailed: nothing answers at the endpoint.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
    };
    let _: OmniConnection = env
        .create(json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniConnection",
            "metadata": {"name": "nowhere", "namespace": NS},
            "spec": {
                "endpoint": format!("http://127.0.0.1:{closed}"),
                "auth": {"serviceAccountSecretRef": {"name": "omni-service-account", "key": "serviceAccountKey"}},
            },
        }))
        .await;
    let c = wait_for(&connections, "nowhere", "ConnectionFailed", |c| {
        has(c, "Ready", "False", "ConnectionFailed")
    })
    .await;
    assert!(has(&c, "Reachable", "False", "ConnectionFailed"));
    let (_, _, message) = condition(&c, "Ready").unwrap_or_default();
    assert!(
        message.starts_with("failed to connect to Omni: list Omni clusters: "),
        "{message}"
    );

    let events = Api::<K8sEvent>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"));
    let seen = |name: &str, reason: &str, type_: &str| {
        events.items.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some(type_)
        })
    };
    assert!(seen("pending", "MissingSecret", "Warning"));
    assert!(seen("pending", "ConnectionReady", "Normal"));
    assert!(seen("nowhere", "ConnectionFailed", "Warning"));
    env.assert_key_never_leaked().await;
    env.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Ownership: the operator never changes or deletes Omni resources it did not create.

/// An Omni cluster made by someone else (the UI, omnictl, another tool): no owner stamp.
fn foreign_cluster(name: &str) -> omni_client::proto::cosi::resource::Resource {
    omni_sim::store::resource(
        ty::CLUSTER,
        name,
        "",
        Vec::new(),
        &omni_client::proto::specs::ClusterSpec {
            kubernetes_version: "1.34.0".into(),
            talos_version: "1.12.0".into(),
            ..Default::default()
        },
    )
}

/// What a user-visible change would alter: phase, spec, labels and annotations as text (Omni's
/// own controllers add a finalizer and bump the version by themselves).
fn user_view(r: Option<omni_client::proto::cosi::resource::Resource>) -> Option<String> {
    let r = r?;
    let m = r.metadata?;
    let labels: std::collections::BTreeMap<_, _> = m.labels.into_iter().collect();
    let annotations: std::collections::BTreeMap<_, _> = m.annotations.into_iter().collect();
    Some(format!(
        "{} {:?} {labels:?} {annotations:?}",
        m.phase,
        r.spec.map(|s| s.proto_spec).unwrap_or_default()
    ))
}

async fn events_of(env: &Env, name: &str) -> Vec<(String, String)> {
    Api::<K8sEvent>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list Events: {e}"))
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_omni_cluster_the_operator_did_not_create_survives_until_adopted() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();
    wait_for(&env.api::<OmniConnection>(), "omni", "Ready", ready).await;
    env.sim.put(foreign_cluster("prod"));
    let untouched = user_view(env.sim.get(ty::CLUSTER, "prod"));

    // Created suspended and deleted: the existing Omni cluster is not deleted.
    env.cluster(
        "prod-suspended",
        "",
        json!({"clusterName": "prod", "suspend": true}),
    )
    .await;
    wait_for(&clusters, "prod-suspended", "Suspended", |c| {
        has(c, "Ready", "False", "Suspended")
    })
    .await;
    clusters
        .delete("prod-suspended", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    wait_gone(&clusters, "prod-suspended").await;
    assert_eq!(user_view(env.sim.get(ty::CLUSTER, "prod")), untouched);
    assert!(
        events_of(&env, "prod-suspended")
            .await
            .iter()
            .any(|(reason, note)| reason == "DeleteSkipped"
                && note.contains("was not created by this OmniCluster")),
    );

    // Active: SyncFailed, nothing written to the existing cluster.
    env.sim.add_machine(PoolMachine {
        id: CP.into(),
        labels: Default::default(),
        disconnected: false,
    });
    env.cluster("prod", CP, json!({})).await;
    let c = wait_for(&clusters, "prod", "SyncFailed", |c| {
        has(c, "Synced", "False", "SyncFailed")
    })
    .await;
    let message = condition(&c, "Synced").map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains(
            "Omni cluster \"prod\" already exists and was not created by this OmniCluster"
        ),
        "{message}"
    );
    assert!(message.contains("omni.texashpc.com/adopt"), "{message}");
    assert_eq!(user_view(env.sim.get(ty::CLUSTER, "prod")), untouched);
    assert!(
        env.sim
            .get(ty::MACHINE_SET, "prod-control-planes")
            .is_none()
    );

    // Adopted: synced, and stamped with the owner.
    clusters
        .patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"omni.texashpc.com/adopt": "true"}}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate: {e}"));
    wait_for(&clusters, "prod", "Synced", |c| {
        has(c, "Synced", "True", "Synced")
    })
    .await;
    let stamped = env
        .sim
        .get(ty::CLUSTER, "prod")
        .and_then(|r| r.metadata)
        .map(|m| m.annotations)
        .unwrap_or_default();
    let uid = c.metadata.uid.clone().unwrap_or_default();
    assert_eq!(
        stamped.get("omni.texashpc.com/owner").map(String::as_str),
        Some(format!("{NS}/prod/{uid}").as_str()),
        "{stamped:?}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_patch_with_a_colliding_id_is_not_overwritten() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();
    wait_for(&env.api::<OmniConnection>(), "omni", "Ready", ready).await;
    env.sim.add_machine(PoolMachine {
        id: CP.into(),
        labels: Default::default(),
        disconnected: false,
    });
    // Someone else's patch, with no cluster label (applies to no cluster of ours).
    env.sim.put(omni_sim::store::resource(
        ty::CONFIG_PATCH,
        "400-shared-patch",
        "",
        Vec::new(),
        &omni_client::proto::specs::ConfigPatchSpec {
            data: "machine:\n  network:\n    hostname: theirs\n".into(),
            ..Default::default()
        },
    ));
    let theirs = env.sim.get(ty::CONFIG_PATCH, "400-shared-patch");
    env.cluster(
        "edge",
        CP,
        json!({"patches": [{"name": "mine", "idOverride": "400-shared-patch",
                            "inline": {"machine": {"network": {"hostname": "mine"}}}}]}),
    )
    .await;
    let c = wait_for(&clusters, "edge", "SyncFailed", |c| {
        has(c, "Synced", "False", "SyncFailed")
    })
    .await;
    let message = condition(&c, "Synced").map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains("ConfigPatches.omni.sidero.dev(default/400-shared-patch) already exists"),
        "{message}"
    );
    assert_eq!(env.sim.get(ty::CONFIG_PATCH, "400-shared-patch"), theirs);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_cluster_is_not_deleted_under_either_name() {
    let env = Env::start().await;
    env.connection("omni").await;
    let clusters = env.api::<OmniCluster>();
    env.sim.add_machine(PoolMachine {
        id: CP.into(),
        labels: Default::default(),
        disconnected: false,
    });
    env.cluster("edge", CP, json!({})).await;
    wait_for(&clusters, "edge", "Synced", |c| {
        has(c, "Synced", "True", "Synced")
    })
    .await;
    // The webhook would refuse this; here it is bypassed (no webhook in this environment).
    clusters
        .patch(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"clusterName": "elsewhere", "suspend": true}})),
        )
        .await
        .unwrap_or_else(|e| panic!("rename: {e}"));
    clusters
        .delete("edge", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    let c = wait_for(&clusters, "edge", "DeleteFailed", |c| {
        has(c, "Ready", "False", "DeleteFailed")
    })
    .await;
    let message = condition(&c, "Ready").map(|c| c.2).unwrap_or_default();
    assert!(
        message.contains("spec.clusterName was changed from \"edge\" to \"elsewhere\""),
        "{message}"
    );
    assert!(env.sim.get(ty::CLUSTER, "edge").is_some());
    // Restoring the name lets the deletion finish (the cluster is ours).
    clusters
        .patch(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"clusterName": "edge"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("restore: {e}"));
    wait_gone(&clusters, "edge").await;
    assert!(env.sim.get(ty::CLUSTER, "edge").is_none());
    env.shutdown().await;
}
