//! What the OmniHelmRelease controller keeps and is configured with.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{OmniHelmRelease, OmniKubeconfigExport};
use crate::controllers::shared::context::Context;
use crate::controllers::shared::decoded::{Cached, cached_ref};
use crate::controllers::shared::index::{RefIndex, RefKey};
use crate::controllers::shared::setup::Setup;
use crate::domain::helm::Helm;
use crate::domain::helm::source::{ChartSourcePolicy, Limits, SystemRoots};
use crate::domain::secret_policy::SecretPolicy;
use crate::domain::workload::WorkloadClients;

/// The index key kind of a release named in another's `spec.dependsOn`.
pub(super) const DEPENDENCY: &str = "release";

/// The index key kind of the cluster of a release with a health gate (`spec.clusterHealth`).
pub(super) const HEALTH_GATED_CLUSTER: &str = "cluster-health";

/// The release controller's own state and configuration.
pub(crate) struct HelmState {
    /// The helm driver; `None` when no usable helm binary was found (each object then reports
    /// that instead of failing the whole operator).
    pub(super) helm: Option<Helm>,
    /// Which Secrets a release may read.
    pub(super) secret_policy: SecretPolicy,
    /// Whose identity reads the Secrets of a release without `spec.serviceAccountName`
    /// (`--default-service-account`); unset, the operator's.
    pub(super) default_service_account: Option<String>,
    /// Where charts may come from (`--chart-source-allowed-hosts`,
    /// `--chart-source-deny-private-networks`, `--allow-insecure-chart-sources`).
    pub(super) chart_sources: ChartSourcePolicy,
    /// Time bounds of each request to a chart source.
    pub(super) limits: Limits,
    /// The system's trusted roots for chart sources, read on the first fetch.
    pub(super) roots: SystemRoots,
    /// Clients of the workload clusters, by kubeconfig Secret: a workload API server is asked
    /// for its version, within the time bounds, before any helm process is started for it; the
    /// drift check reads and patches live objects through them.
    pub(super) workload: Arc<WorkloadClients>,
    /// Floor for a `driftCheckInterval` stored without admission.
    pub(super) min_interval: Duration,
    /// The baseline model's `helm-upgrade-every-trigger` (benchmarks only).
    pub(super) upgrade_every_trigger: bool,
    /// The releases as the shared watch caches them: a release's dependencies and dependants
    /// are read here, not from the API server on every pass.
    pub(super) releases: Store<Cached<OmniHelmRelease>>,
    /// The releases by what they name (their cluster, Secrets and dependencies).
    pub(super) index: Arc<RefIndex<OmniHelmRelease>>,
    /// The exports, to tell a kubeconfig Secret that an export is about to write from one
    /// nobody makes.
    pub(super) exports: Store<Cached<OmniKubeconfigExport>>,
}

impl HelmState {
    /// The state of a controller started with `setup` in `ctx`.
    pub(super) fn new(
        ctx: &Context,
        setup: &Setup<'_>,
        releases: Store<Cached<OmniHelmRelease>>,
        index: Arc<RefIndex<OmniHelmRelease>>,
        exports: Store<Cached<OmniKubeconfigExport>>,
    ) -> Self {
        Self {
            helm: setup.helm.clone(),
            secret_policy: setup.config.secret_policy,
            default_service_account: setup.config.tenancy.default_service_account.clone(),
            chart_sources: setup.config.tenancy.chart_sources.clone(),
            limits: setup.config.tenancy.timeouts.outbound(),
            roots: SystemRoots::default(),
            workload: setup.workload.clone(),
            min_interval: setup.config.min_interval,
            upgrade_every_trigger: ctx.baseline.upgrades_every_trigger(),
            releases,
            index,
            exports,
        }
    }

    /// The release `name` of `namespace` as the cache holds it.
    pub(super) fn release(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Cached<OmniHelmRelease>>> {
        let key: ObjectRef<Cached<OmniHelmRelease>> = cached_ref(name, Some(namespace));
        self.releases.get(&key)
    }

    /// The releases of `namespace` that name `name` in `spec.dependsOn` and still exist
    /// (also while they are being deleted), sorted.
    pub(super) fn dependants(&self, namespace: &str, name: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .index
            .get(&RefKey::new(DEPENDENCY, namespace, name))
            .into_iter()
            .map(|r| r.name)
            .collect();
        names.sort();
        names
    }
}
