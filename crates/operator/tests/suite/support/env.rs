//! One environment for the controller system tests, in the style of kube-rs controller-rs
//! fixtures: a builder whose defaults fit most scenarios, one call per difference.
//!
//! `Env::builder().start().await` brings up a management kube-sim with the operator's CRDs and
//! the namespace [`NS`], omni-sim (machines named by static IDs connect without being seeded;
//! status steps every 20 ms), the Omni key Secret [`KEY_SECRET`], the embedded operator, and
//! the OmniConnection [`CONNECTION`] to omni-sim. The log capture is installed first, so a
//! scenario can check that the key never reaches the logs; [`Env::shutdown`] checks it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use kube_sim::server::RunningKubeSim;
use omni_operator::cli::run::OperatorConfig;
use omni_operator::controllers::Scope;
use omni_operator::domain::secret_policy::SecretPolicy;
use omni_operator::domain::tenancy::Tenancy;
use omni_operator::process::metrics::Metrics;
use omni_sim::{OmniSim, Role, RunningOmniSim};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::conditions::Cond;
use super::stack::Operator;

/// The namespace of the shipped samples, so they apply as they are.
pub const NS: &str = "omni-cluster-operator-system";
/// The Secret holding the Omni service-account key (the samples' name), and its key.
pub const KEY_SECRET: &str = "omni-service-account";
pub const KEY_FIELD: &str = "serviceAccountKey";
/// The OmniConnection the environment creates, which [`Env::cluster`] refers to.
pub const CONNECTION: &str = "omni";
/// The sample files of the sample cluster `edge-sample` and its children, in the documented
/// order (for [`Env::apply_samples`]).
pub const SAMPLE_CLUSTER: &[&str] = &[
    "01-omniconnection.yaml",
    "02-omnicluster.yaml",
    "03-omnicontrolplane.yaml",
    "04-omniworkers.yaml",
    "05-omnimachine.yaml",
];
/// Omni's annotation naming the tool that manages a resource.
pub const GITOPS_ANNOTATION: &str = "omni.sidero.dev/managed-by-gitops-tools";
/// What the log capture records: the operator in full, the Omni client's debug lines, and
/// everything else at info.
const LOG_FILTER: &str = "info,omni_operator=trace,omni_client=debug";

/// The common shape of a resource the tests read and write through a typed [`Api`].
pub trait Namespaced:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
{
}

/// What a scenario changes from the defaults.
#[derive(Debug)]
pub struct EnvBuilder {
    omni_api: Option<u32>,
    auto_register_machines: bool,
    connection: bool,
    workload: bool,
    /// When set, the workload cluster accepts only the tokens omni-sim mints for this cluster.
    workload_tokens_of: Option<String>,
    /// When set, the workload cluster accepts only this bearer token, as `automation`.
    workload_token: Option<String>,
    test_clock: bool,
    /// When set, OmniSecretSyncs re-check their copies at this interval.
    secret_sync_resync: Option<Duration>,
    /// The helm binary and work directory the operator uses, when not the defaults.
    helm: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Resources whose lists the management cluster refuses from the start.
    refused_lists: Vec<&'static str>,
    /// The operator watches every namespace, not only [`NS`].
    all_namespaces: bool,
    /// What the operator enforces on the Secrets the custom resources name.
    secret_policy: SecretPolicy,
    /// Namespaces created besides [`NS`].
    other_namespaces: Vec<&'static str>,
    /// Every kubeconfig omni-sim mints points at a closed loopback port.
    kubeconfigs_at_closed_port: bool,
    /// The operator runs the real helm with a work directory of the environment's own.
    real_helm: bool,
    /// The deployment's multi-tenancy settings.
    tenancy: Tenancy,
    /// The management cluster authorises with RBAC (its clients stay cluster admins).
    rbac: bool,
    /// The operator's `--default-destructive-policy`.
    default_destructive: omni_operator::api::plan::DestructivePolicy,
}

/// A workload cluster behind Omni: every kubeconfig omni-sim mints points at it.
pub struct Workload {
    pub sim: RunningKubeSim,
    pub client: kube::Client,
}

/// The running environment.
pub struct Env {
    pub ns: String,
    pub kube: RunningKubeSim,
    pub client: kube::Client,
    pub omni: RunningOmniSim,
    /// The Omni service-account key (a secret).
    pub key: String,
    pub metrics: Arc<Metrics>,
    pub workload: Option<Workload>,
    /// The operator's clock, when the scenario moves time by hand ([`EnvBuilder::test_clock`]).
    pub clock: Option<Arc<super::TestClock>>,
    operator: Option<Operator>,
    /// The helm work directory of [`EnvBuilder::real_helm`], removed with the environment.
    _helm_dir: Option<tempfile::TempDir>,
}

impl EnvBuilder {
    /// The backend API version omni-sim publishes (omni-sim's default, 2, otherwise).
    pub fn omni_api(mut self, version: u32) -> Self {
        self.omni_api = Some(version);
        self
    }

    /// Only machines added to omni-sim's pool connect; a static ID Omni has never seen stays
    /// away, as in real Omni.
    pub fn unknown_machines_stay_away(mut self) -> Self {
        self.auto_register_machines = false;
        self
    }

    /// No OmniConnection: the scenario creates its own.
    pub fn without_connection(mut self) -> Self {
        self.connection = false;
        self
    }

    /// A workload kube-sim that omni-sim's kubeconfigs point at ([`Env::workload`]).
    pub fn with_workload(mut self) -> Self {
        self.workload = true;
        self
    }

    /// Like [`EnvBuilder::with_workload`], with a workload cluster that, like the one behind
    /// Omni, accepts only the unexpired tokens omni-sim mints for `cluster` (its
    /// [`Workload::client`] is anonymous, so it is refused).
    pub fn with_workload_accepting_tokens_of(mut self, cluster: &str) -> Self {
        self.workload = true;
        self.workload_tokens_of = Some(cluster.to_string());
        self
    }

    /// Like [`EnvBuilder::with_workload`], with a workload cluster that accepts only the bearer
    /// `token` (user `automation`, group `automation`) and no anonymous request; its
    /// [`Workload::client`] sends that token.
    pub fn with_workload_token(mut self, token: &str) -> Self {
        self.workload = true;
        self.workload_token = Some(token.to_string());
        self
    }

    /// OmniSecretSyncs re-check their copies every `resync`, so a scenario that changes nothing
    /// the syncs watch sees what the periodic re-check alone does.
    pub fn secret_sync_resync(mut self, resync: Duration) -> Self {
        self.secret_sync_resync = Some(resync);
        self
    }

    /// The operator runs helm as `binary` (e.g. a wrapper that records its calls) with its work
    /// directory at `work_dir`.
    pub fn helm(mut self, binary: std::path::PathBuf, work_dir: std::path::PathBuf) -> Self {
        self.helm = Some((binary, work_dir));
        self
    }

    /// The management cluster refuses every list of `resource` (e.g. `omnimachines`) with 403
    /// Forbidden from the start, as a role without `list` on it does, until the scenario
    /// clears the faults (`env.kube.hooks().clear_random_faults()`).
    pub fn refuse_lists_of(mut self, resource: &'static str) -> Self {
        self.refused_lists.push(resource);
        self
    }

    /// The operator reads the time from a [`super::TestClock`] that the scenario moves
    /// ([`Env::clock`]); it starts at the current whole second.
    pub fn test_clock(mut self) -> Self {
        self.test_clock = true;
        self
    }

    /// The operator watches every namespace (`Scope::All`), as a cluster-wide install does.
    pub fn watch_all_namespaces(mut self) -> Self {
        self.all_namespaces = true;
        self
    }

    /// The operator applies `policy` to the Secrets the custom resources name.
    pub fn secret_policy(mut self, policy: SecretPolicy) -> Self {
        self.secret_policy = policy;
        self
    }

    /// The management cluster authorises every request with RBAC, as a real one does; the
    /// operator and the test still send no credentials, so they act as `system:admin`
    /// (`system:masters`), and what they impersonate is held to its own RBAC.
    pub fn rbac(mut self) -> Self {
        self.rbac = true;
        self
    }

    /// The operator runs with these multi-tenancy settings (its flags' defaults otherwise).
    pub fn tenancy(mut self, tenancy: Tenancy) -> Self {
        self.tenancy = tenancy;
        self
    }

    /// The management cluster has namespace `name` too (empty).
    pub fn other_namespace(mut self, name: &'static str) -> Self {
        self.other_namespaces.push(name);
        self
    }

    /// Every kubeconfig omni-sim mints points at a closed loopback port: the operator's
    /// usability probe of an exported kubeconfig is then inconclusive and keeps it, as with a
    /// workload cluster that is down.
    pub fn kubeconfigs_point_at_a_closed_port(mut self) -> Self {
        self.kubeconfigs_at_closed_port = true;
        self
    }

    /// The operator runs the real helm ([`super::helm_bin`]) with a work directory of its own
    /// that lives as long as the environment.
    pub fn real_helm(mut self) -> Self {
        self.real_helm = true;
        self
    }

    /// The operator holds destructive plans of clusters that choose no policy
    /// (`--default-destructive-policy RequireApproval`).
    pub fn require_approval_by_default(mut self) -> Self {
        self.default_destructive = omni_operator::api::plan::DestructivePolicy::RequireApproval;
        self
    }

    pub async fn start(self) -> Env {
        super::logs_with(LOG_FILTER);
        let (kube, client) = match self.rbac {
            false => super::kube_sim().await,
            true => {
                let sim = kube_sim::server::KubeSim::builder()
                    .authorizer(Arc::new(kube_sim::wiring::RbacAuthorizer))
                    .start()
                    .await
                    .unwrap_or_else(|e| panic!("start kube-sim: {e}"));
                let client = super::client_of(&sim);
                (sim, client)
            }
        };
        super::install_operator_api(&client, NS).await;
        for name in &self.other_namespaces {
            super::stack::create_namespace(&client, name).await;
        }
        for resource in &self.refused_lists {
            kube.hooks()
                .fail_randomly(&["list"], Some(resource), 403, 1.0);
        }
        let workload = match self.workload {
            true => {
                let mut sim = kube_sim::server::KubeSim::builder();
                if let Some(cluster) = &self.workload_tokens_of {
                    sim = sim.authenticator(Arc::new(super::OmniTokens(cluster.clone())));
                }
                if let Some(token) = &self.workload_token {
                    let auth = kube_sim::auth::StaticAuthenticator::new().without_anonymous();
                    auth.add_token(
                        token,
                        kube_sim::auth::Identity::new("automation", &["automation"]),
                    );
                    sim = sim.authenticator(Arc::new(auth));
                }
                let sim = sim
                    .start()
                    .await
                    .unwrap_or_else(|e| panic!("start the workload kube-sim: {e}"));
                let client = match &self.workload_token {
                    Some(token) => {
                        super::client_from_kubeconfig(&workload_kubeconfig(&sim, token)).await
                    }
                    None => super::client_of(&sim),
                };
                Some(Workload { sim, client })
            }
            false => None,
        };
        let mut omni = OmniSim::builder()
            .auto_register_machines(self.auto_register_machines)
            .status_step(Duration::from_millis(20));
        if let Some(version) = self.omni_api {
            omni = omni.backend_api_version(version);
        }
        if let Some(workload) = &workload {
            omni =
                omni.workload_provider(Arc::new(super::WorkloadAt(workload.sim.base_url.clone())));
        }
        if self.kubeconfigs_at_closed_port {
            omni = omni.workload_provider(Arc::new(omni_sim::FixedWorkloadProvider(format!(
                "https://127.0.0.1:{}",
                super::free_addr().port()
            ))));
        }
        let omni = omni
            .start()
            .await
            .unwrap_or_else(|e| panic!("start omni-sim: {e}"));
        let key = omni
            .register_service_account("operator", Role::Operator)
            .unwrap_or_else(|e| panic!("register: {e}"));
        let metrics = Arc::new(Metrics::new());
        let scope = match self.all_namespaces {
            true => Scope::All,
            false => Scope::Namespace(NS.into()),
        };
        let mut config = OperatorConfig::embedded(scope);
        config.metrics = metrics.clone();
        config.secret_policy = self.secret_policy;
        config.tenancy = self.tenancy.clone();
        config.default_destructive = self.default_destructive;
        let clock = self.test_clock.then(|| {
            let now = jiff::Timestamp::now().as_second();
            let start = jiff::Timestamp::from_second(now).unwrap_or_else(|e| panic!("{e}"));
            Arc::new(super::TestClock::new(start))
        });
        if let Some(clock) = &clock {
            config.clock = clock.clone();
        }
        if let Some((binary, work_dir)) = self.helm.clone() {
            config.helm_binary = binary;
            config.helm_work_dir = work_dir;
        }
        let helm_dir = self.real_helm.then(|| {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("helm work dir: {e}"));
            config.helm_binary = super::helm_bin();
            config.helm_work_dir = dir.path().to_path_buf();
            dir
        });
        let mut env = Env {
            ns: NS.to_string(),
            kube,
            client,
            omni,
            key,
            metrics,
            workload,
            clock,
            operator: None,
            _helm_dir: helm_dir,
        };
        env.create_secret(KEY_SECRET, json!({ KEY_FIELD: env.key }))
            .await;
        if let Some(every) = self.secret_sync_resync {
            config.secret_sync_resync = every;
        }
        env.operator = Some(Operator::spawn(config, env.client.clone()));
        if self.connection {
            env.connection(CONNECTION, KEY_SECRET).await;
        }
        env
    }
}

impl Env {
    /// The defaults: API version 2, machines connect when named, an OmniConnection, no workload
    /// cluster; the operator watches only [`NS`], with the default Secret policy.
    pub fn builder() -> EnvBuilder {
        EnvBuilder {
            omni_api: None,
            auto_register_machines: true,
            connection: true,
            workload: false,
            workload_tokens_of: None,
            workload_token: None,
            test_clock: false,
            secret_sync_resync: None,
            helm: None,
            refused_lists: Vec::new(),
            all_namespaces: false,
            secret_policy: SecretPolicy::default(),
            other_namespaces: Vec::new(),
            kubeconfigs_at_closed_port: false,
            real_helm: false,
            tenancy: Tenancy::default(),
            rbac: false,
            default_destructive: omni_operator::api::plan::DestructivePolicy::Allow,
        }
    }

    /// The workload cluster; panics when the environment was built without one.
    pub fn workload(&self) -> &Workload {
        self.workload
            .as_ref()
            .unwrap_or_else(|| panic!("the environment has no workload cluster"))
    }

    /// A kubeconfig of the workload cluster with the bearer `token`.
    pub fn workload_kubeconfig(&self, token: &str) -> String {
        workload_kubeconfig(&self.workload().sim, token)
    }

    /// The operator's test clock; panics when the environment was built without one.
    pub fn clock(&self) -> &super::TestClock {
        self.clock
            .as_deref()
            .unwrap_or_else(|| panic!("the environment has no test clock"))
    }

    /// Applies the shipped samples in `files` (`config/samples/`, in the order given), each
    /// document passed through `edit` first; OmniConnections point at omni-sim.
    pub async fn apply_samples(&self, files: &[&str], edit: impl Fn(&mut Value)) {
        for file in files {
            for mut doc in super::sample(file) {
                if doc["kind"] == "OmniConnection" {
                    doc["spec"]["endpoint"] = json!(self.omni.endpoint());
                }
                edit(&mut doc);
                self.create_any_of_ours(doc).await;
            }
        }
    }

    /// Creates an object of one of the operator's kinds from its JSON, typed by its `kind`.
    pub async fn create_any_of_ours(&self, doc: Value) {
        use omni_operator::api::{
            OmniCluster, OmniConnection, OmniControlPlane, OmniHelmRelease, OmniKubeconfigExport,
            OmniMachine, OmniSecretSync, OmniWorkers,
        };
        match doc["kind"].as_str().unwrap_or_default() {
            "OmniConnection" => {
                let _: OmniConnection = self.create(doc).await;
            }
            "OmniCluster" => {
                let _: OmniCluster = self.create(doc).await;
            }
            "OmniControlPlane" => {
                let _: OmniControlPlane = self.create(doc).await;
            }
            "OmniWorkers" => {
                let _: OmniWorkers = self.create(doc).await;
            }
            "OmniMachine" => {
                let _: OmniMachine = self.create(doc).await;
            }
            "OmniKubeconfigExport" => {
                let _: OmniKubeconfigExport = self.create(doc).await;
            }
            "OmniSecretSync" => {
                let _: OmniSecretSync = self.create(doc).await;
            }
            "OmniHelmRelease" => {
                let _: OmniHelmRelease = self.create(doc).await;
            }
            other => panic!("not one of the operator's kinds: {other:?}"),
        }
    }

    /// Objects of kind `K` in the environment's namespace.
    pub fn api<K: Namespaced>(&self) -> Api<K> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates an object from its whole JSON.
    pub async fn create<K: Namespaced>(&self, obj: Value) -> K {
        let typed: K = serde_json::from_value(obj).unwrap_or_else(|e| panic!("fixture: {e}"));
        self.api::<K>()
            .create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("create {} {}: {e}", K::kind(&()), typed.name_any()))
    }

    /// Creates an object of kind `K` named `name` with `spec`.
    pub async fn create_spec<K: Namespaced>(&self, name: &str, spec: Value) -> K {
        self.create(json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name, "namespace": self.ns},
            "spec": spec,
        }))
        .await
    }

    /// Creates a Secret from `stringData`.
    pub async fn create_secret(&self, name: &str, string_data: Value) -> Secret {
        self.create(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "stringData": string_data,
        }))
        .await
    }

    /// An OmniConnection to omni-sim authenticating with the key in Secret `secret`.
    pub async fn connection(&self, name: &str, secret: &str) -> omni_operator::api::OmniConnection {
        let endpoint = self.omni.endpoint().to_string();
        self.connection_at(name, &endpoint, secret).await
    }

    /// An OmniConnection to `endpoint` authenticating with the key in Secret `secret`.
    pub async fn connection_at(
        &self,
        name: &str,
        endpoint: &str,
        secret: &str,
    ) -> omni_operator::api::OmniConnection {
        self.create_spec(
            name,
            json!({
                "endpoint": endpoint,
                "auth": {"serviceAccountSecretRef": {"name": secret, "key": KEY_FIELD}},
            }),
        )
        .await
    }

    /// OmniCluster `name` on [`CONNECTION`] (Kubernetes v1.35.0, Talos v1.13.2, re-checked every
    /// second) with `extra` merged into its spec, and, unless `machine` is empty, its
    /// OmniControlPlane `<name>-cp` with that one machine.
    pub async fn cluster(
        &self,
        name: &str,
        machine: &str,
        extra: Value,
    ) -> omni_operator::api::OmniCluster {
        let mut spec = json!({
            "connectionRef": {"name": CONNECTION},
            "kubernetes": {"version": "v1.35.0"},
            "talos": {"version": "v1.13.2"},
            "syncInterval": "1s",
        });
        if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        let cluster = self.create_spec(name, spec).await;
        if !machine.is_empty() {
            let _: omni_operator::api::OmniControlPlane = self
                .create_spec(
                    &format!("{name}-cp"),
                    json!({"clusterRef": {"name": name}, "machines": [machine]}),
                )
                .await;
        }
        cluster
    }

    /// The bearer token of the kubeconfig an export wrote into Secret `secret` (see
    /// [`super::kubeconfig_token`]).
    pub async fn exported_token(&self, secret: &str) -> Option<String> {
        let exported = self
            .api::<Secret>()
            .get(secret)
            .await
            .unwrap_or_else(|e| panic!("exported Secret {secret}: {e}"));
        super::kubeconfig_token(&exported)
    }

    /// Annotates the key Secret with `touched: value`, which makes the connection controller
    /// check Omni again at once (instead of at its 5-minute re-check), e.g. after an upgrade.
    pub async fn touch_key_secret(&self, value: &str) {
        let _: Secret = self
            .patch(
                KEY_SECRET,
                json!({"metadata": {"annotations": {"touched": value}}}),
            )
            .await;
    }

    /// Machine `id` connects to Omni: it joins omni-sim's pool, with no labels.
    pub fn connect_machine(&self, id: &str) {
        self.omni.add_machine(omni_sim::PoolMachine {
            id: id.into(),
            ..Default::default()
        });
    }

    /// Merge-patches object `name` of kind `K` with `body`.
    pub async fn patch<K: Namespaced>(&self, name: &str, body: Value) -> K {
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patch {} {name}: {e}", K::kind(&())))
    }

    /// Merge-patches the spec of object `name` of kind `K` with `spec`.
    pub async fn patch_spec<K: Namespaced>(&self, name: &str, spec: Value) -> K {
        self.patch(name, json!({ "spec": spec })).await
    }

    /// Asks to delete object `name` of kind `K` (finalizers may keep it a while).
    pub async fn delete<K: Namespaced>(&self, name: &str) {
        self.api::<K>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {} {name}: {e}", K::kind(&())));
    }

    /// Polls object `name` until `pred` holds (see [`super::wait_for`]).
    pub async fn wait<K: Namespaced>(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&K) -> bool,
    ) -> K {
        super::wait_for(&self.api::<K>(), name, what, pred).await
    }

    /// Polls object `name` until it carries `cond`.
    pub async fn wait_cond<K: Namespaced>(&self, name: &str, cond: Cond) -> K {
        super::wait_for(&self.api::<K>(), name, &cond.to_string(), |o| cond.holds(o)).await
    }

    /// Polls until object `name` is gone.
    pub async fn wait_gone<K: Namespaced>(&self, name: &str) {
        super::wait_gone(&self.api::<K>(), name).await
    }

    /// The Events in the environment's namespace.
    pub async fn events(&self) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list Events: {e}"))
            .items
    }

    /// `(reason, note)` of each Event about object `name`.
    pub async fn events_of(&self, name: &str) -> Vec<(String, String)> {
        self.events()
            .await
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }

    /// Reconciles of `kind` the operator counted so far.
    pub fn reconciles(&self, kind: &str) -> u64 {
        let text = self.metrics.encode().unwrap_or_default();
        let prefix = format!("omni_operator_reconciles_total{{kind=\"{kind}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Metrics text once `ready` holds for it (gauges are set just after status writes, so they
    /// may trail what the test has observed by a moment), or the last text after 30 s.
    pub async fn metrics_when(&self, ready: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.metrics.encode().unwrap_or_default();
            if ready(&text) || tokio::time::Instant::now() >= deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asserts that the key appears in no log line, no Event, and no object of the operator's
    /// kinds (spec, metadata or status).
    pub async fn assert_key_never_leaked(&self) {
        let key = self.key.as_str();
        super::leaks::assert_no_secret_leaks(&self.client, &[], &[key]).await;
        for (kind, plural) in super::leaks::KINDS {
            let objects = self
                .api_of(kind, plural)
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| panic!("list {kind}: {e}"));
            let text = serde_json::to_string(&objects.items).unwrap_or_default();
            assert!(!text.contains(key), "the key appears in an {kind}");
        }
    }

    /// Objects of one of the operator's kinds, untyped.
    fn api_of(&self, kind: &str, plural: &str) -> Api<kube::api::DynamicObject> {
        let resource = kube::discovery::ApiResource {
            plural: plural.into(),
            ..super::stack::resource(kind)
        };
        Api::namespaced_with(self.client.clone(), &self.ns, &resource)
    }

    /// Stops the operator (panics if it failed or does not stop), checks that the key never
    /// reached the logs, and stops the emulators.
    pub async fn shutdown(mut self) {
        if let Some(operator) = self.operator.take() {
            tokio::time::timeout(super::WAIT, operator.stop())
                .await
                .unwrap_or_else(|_| panic!("the operator did not stop"));
        }
        assert!(
            !super::operator_logs().contains(&self.key),
            "the key appears in the logs"
        );
        self.omni.shutdown().await;
        self.kube.shutdown();
        if let Some(workload) = self.workload {
            workload.sim.shutdown();
        }
    }
}

/// Polls `pred` until it holds; panics naming `what` after [`super::WAIT`].
pub async fn eventually(what: &str, mut pred: impl FnMut() -> bool) {
    let until = tokio::time::Instant::now() + super::WAIT;
    while !pred() {
        assert!(tokio::time::Instant::now() < until, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `probe` until it yields a value and returns it; panics naming `what` after `limit`
/// (for a scenario whose point is how soon something happens).
pub async fn eventually_within<T>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let until = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An annotation of an Omni resource.
pub fn annotation(r: &omni_client::proto::cosi::resource::Resource, key: &str) -> Option<String> {
    r.metadata.as_ref()?.annotations.get(key).cloned()
}

/// A kubeconfig of `sim` with the bearer `token`, as a user would hand it to the operator.
fn workload_kubeconfig(sim: &RunningKubeSim, token: &str) -> String {
    kube_sim::kubeconfig::Kubeconfig::new(
        sim.base_url.clone(),
        "automation",
        kube_sim::kubeconfig::Credential::Token(token.into()),
    )
    .to_yaml()
    .unwrap_or_else(|e| panic!("kubeconfig: {e}"))
}
