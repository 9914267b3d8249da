//! Reading a cluster's health from Omni's status resources.
//!
//! Omni's client watches seven streams until a consistent snapshot arrives and never returns
//! for a cluster that does not exist. Here one Get and three label-filtered Lists give the same
//! snapshot, a missing cluster is [`StatusError::NotFound`], and the caller's deadline bounds
//! the whole read.

use tokio::time::Instant;

use super::api::EPHEMERAL_NAMESPACE;
use super::state::{LabelCondition, StateError, TemplateState};
use super::translate::{NAMESPACE, keys, types};
use crate::proto::cosi::resource::Resource;
use crate::proto::specs;

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Omni has no status for this cluster (it does not exist, or not yet).
    #[error("cluster {0:?} has no status in Omni")]
    NotFound(String),
    /// The deadline passed before the status was read.
    #[error("timed out reading the status of cluster {0:?}")]
    Timeout(String),
    /// A State call failed.
    #[error("reading the status of cluster {cluster:?}: {source}")]
    State {
        /// Cluster name.
        cluster: String,
        /// The server's answer.
        source: StateError,
    },
    /// A status spec did not decode.
    #[error("cannot decode {resource_type} of cluster {cluster:?}: {source}")]
    Decode {
        /// Cluster name.
        cluster: String,
        /// Type that failed.
        resource_type: String,
        /// Decoder error.
        source: prost::DecodeError,
    },
}

/// Machine counters as Omni reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MachineCounts {
    /// Machines in the cluster or set.
    pub total: u32,
    /// Healthy machines.
    pub healthy: u32,
    /// Connected machines.
    pub connected: u32,
    /// Requested machines.
    pub requested: u32,
}

impl From<Option<specs::Machines>> for MachineCounts {
    fn from(m: Option<specs::Machines>) -> Self {
        let m = m.unwrap_or_default();
        MachineCounts {
            total: m.total,
            healthy: m.healthy,
            connected: m.connected,
            requested: m.requested,
        }
    }
}

/// One machine set's status.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MachineSetHealth {
    /// Machine-set ID.
    pub id: String,
    /// Omni phase name (`Running`, `ScalingUp`, ...).
    pub phase: String,
    /// Whether Omni reports it ready.
    pub ready: bool,
    /// Omni's error text, if any.
    pub error: String,
    /// Machine counters.
    pub machines: MachineCounts,
}

/// Kubernetes and Talos upgrade state; `None` when Omni has no such status resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Upgrades {
    /// Kubernetes upgrade phase (`Done`, `Upgrading`, ...).
    pub kubernetes_phase: Option<String>,
    /// Kubernetes upgrade error text.
    pub kubernetes_error: String,
    /// Talos upgrade phase.
    pub talos_phase: Option<String>,
    /// Talos upgrade error text.
    pub talos_error: String,
}

/// The last run of one Kubernetes health check (Omni's `KubernetesHealthCheckStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HealthCheckResult {
    /// Health-check ID (`cluster-<cluster>-<name>` or its `idOverride`).
    pub id: String,
    /// `UNKNOWN`, `RUNNING`, `FAILED` or `PASSED`.
    pub state: String,
    /// One line: why the last run failed.
    pub error: String,
    /// Tail of the failing container's output.
    pub output: String,
    /// Namespace of the runner Job in the workload cluster.
    pub job_namespace: String,
    /// Name of the runner Job.
    pub job_name: String,
}

/// The sync state of a cluster's Kubernetes manifests (Omni's `ClusterKubernetesManifestsStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ManifestsSync {
    /// Manifest groups, sorted by ID.
    pub groups: Vec<ManifestGroupSync>,
    /// Manifests in all groups.
    pub total: u32,
    /// Manifests not yet applied as declared.
    pub out_of_sync: u32,
    /// Omni's last error applying them.
    pub last_error: String,
}

/// One manifest group in Omni's `ClusterKubernetesManifestsStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ManifestGroupSync {
    /// Manifest-group ID.
    pub id: String,
    /// `PENDING`, `PROGRESSING`, `APPLIED` or `DELETING`.
    pub phase: String,
    /// How Omni applies the group: `FULL` or `ONE_TIME`.
    pub mode: String,
    /// Manifests Omni lists for the group.
    pub total: u32,
    /// The group's manifests that are not applied as declared, sorted by kind, namespace and
    /// name.
    pub out_of_sync: Vec<ManifestSync>,
}

/// One manifest of a group, as Omni lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ManifestSync {
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// API group (empty for the core group).
    pub group: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `PENDING`, `APPLIED` or `DELETING`.
    pub phase: String,
}

/// A cluster's health as Omni reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusterHealth {
    /// Cluster name.
    pub cluster: String,
    /// Cluster phase (`RUNNING`, `SCALING_UP`, ...).
    pub phase: String,
    /// Omni's cluster ready flag.
    pub ready: bool,
    /// Whether the Kubernetes API is reachable.
    pub kubernetes_api_ready: bool,
    /// Talos version Omni reports for the cluster (empty when it reports none).
    pub talos_version: String,
    /// Kubernetes version Omni reports for the cluster (empty when it reports none).
    pub kubernetes_version: String,
    /// Manifest sync state; `None` when Omni has no such status for the cluster.
    pub manifests: Option<ManifestsSync>,
    /// Omni's rule: cluster RUNNING and ready, every machine set Running and ready, every
    /// upgrade status Done.
    pub healthy: bool,
    /// Machine sets, sorted by ID.
    pub machine_sets: Vec<MachineSetHealth>,
    /// Cluster-wide machine counters.
    pub machines: MachineCounts,
    /// Upgrade state.
    pub upgrades: Upgrades,
    /// Health-check results, sorted by ID (Omni runs the checks while it upgrades Talos).
    pub health_checks: Vec<HealthCheckResult>,
    /// One line for humans and status fields.
    pub summary: String,
}

fn decode<M: prost::Message + Default>(
    cluster: &str,
    resource_type: &str,
    r: &Resource,
) -> Result<M, StatusError> {
    let bytes = r
        .spec
        .as_ref()
        .map(|s| s.proto_spec.as_slice())
        .unwrap_or_default();
    M::decode(bytes).map_err(|source| StatusError::Decode {
        cluster: cluster.into(),
        resource_type: resource_type.into(),
        source,
    })
}

fn id(r: &Resource) -> String {
    r.metadata
        .as_ref()
        .map(|m| m.id.clone())
        .unwrap_or_default()
}

/// The status resources Omni keeps for one cluster: everything its health is assembled from.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StatusResources {
    /// `ClusterStatus` (ID = the cluster); `None` when Omni has none (yet).
    pub(crate) cluster_status: Option<Resource>,
    /// `MachineSetStatus`es labelled with the cluster.
    pub(crate) machine_sets: Vec<Resource>,
    /// `KubernetesUpgradeStatus`es labelled with the cluster.
    pub(crate) kubernetes_upgrades: Vec<Resource>,
    /// `TalosUpgradeStatus`es labelled with the cluster.
    pub(crate) talos_upgrades: Vec<Resource>,
    /// `ClusterKubernetesManifestsStatus` (ID = the cluster).
    pub(crate) manifests: Option<Resource>,
    /// `KubernetesHealthCheckStatus`es (namespace `ephemeral`) labelled with the cluster.
    pub(crate) health_checks: Vec<Resource>,
}

/// Where each of a cluster's status resources is found: read by ID (the cluster's name) or
/// listed by the `omni.sidero.dev/cluster` label, in which namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keyed {
    /// ID = the cluster name (namespace `default`).
    ById,
    /// Labelled with the cluster, in this namespace.
    ByLabel(&'static str),
}

/// The status types a cluster's health is assembled from, and how each is keyed.
pub(crate) const STATUS_TYPES: [(&str, Keyed); 6] = [
    (types::CLUSTER_STATUS, Keyed::ById),
    (types::MACHINE_SET_STATUS, Keyed::ByLabel(NAMESPACE)),
    (types::KUBERNETES_UPGRADE_STATUS, Keyed::ByLabel(NAMESPACE)),
    (types::TALOS_UPGRADE_STATUS, Keyed::ByLabel(NAMESPACE)),
    (types::CLUSTER_KUBERNETES_MANIFESTS_STATUS, Keyed::ById),
    (
        types::KUBERNETES_HEALTH_CHECK_STATUS,
        Keyed::ByLabel(EPHEMERAL_NAMESPACE),
    ),
];

async fn read<S: TemplateState>(state: &S, cluster: &str) -> Result<ClusterHealth, StatusError> {
    let err = |source| StatusError::State {
        cluster: cluster.into(),
        source,
    };
    let by_cluster = [LabelCondition::equal(keys::CLUSTER, cluster)];
    // Independent reads, issued together: one round trip to Omni instead of six.
    let (
        cluster_status,
        machine_sets,
        kubernetes_upgrades,
        talos_upgrades,
        manifests,
        health_checks,
    ) = futures::try_join!(
        state.get(types::CLUSTER_STATUS, cluster),
        state.list(types::MACHINE_SET_STATUS, &by_cluster),
        state.list(types::KUBERNETES_UPGRADE_STATUS, &by_cluster),
        state.list(types::TALOS_UPGRADE_STATUS, &by_cluster),
        state.get(types::CLUSTER_KUBERNETES_MANIFESTS_STATUS, cluster),
        state.list_ephemeral(types::KUBERNETES_HEALTH_CHECK_STATUS, &by_cluster),
    )
    .map_err(err)?;
    health_of(
        cluster,
        &StatusResources {
            cluster_status,
            machine_sets,
            kubernetes_upgrades,
            talos_upgrades,
            manifests,
            health_checks,
        },
    )
}

/// Pure: the health of `cluster` as Omni's status resources `r` describe it.
pub(crate) fn health_of(cluster: &str, r: &StatusResources) -> Result<ClusterHealth, StatusError> {
    let status = r
        .cluster_status
        .as_ref()
        .ok_or_else(|| StatusError::NotFound(cluster.into()))?;
    let cs: specs::ClusterStatusSpec = decode(cluster, types::CLUSTER_STATUS, status)?;
    let phase = cs.phase();
    let machine_sets = machine_sets_of(cluster, &r.machine_sets)?;
    let (upgrades, upgrades_done) =
        upgrades_of(cluster, &r.kubernetes_upgrades, &r.talos_upgrades)?;
    let health_checks = health_checks_of(cluster, &r.health_checks)?;
    let manifests = r
        .manifests
        .as_ref()
        .map(|m| manifests_of(cluster, m))
        .transpose()?;
    let healthy = phase == specs::cluster_status_spec::Phase::Running
        && cs.ready
        && machine_sets
            .iter()
            .all(|s| s.ready && s.phase == specs::MachineSetPhase::Running.as_str_name())
        && upgrades_done;
    let machines = MachineCounts::from(cs.machines);
    let mut health = ClusterHealth {
        cluster: cluster.into(),
        phase: phase.as_str_name().to_string(),
        ready: cs.ready,
        kubernetes_api_ready: cs.kubernetes_api_ready,
        talos_version: cs.talos_version.clone(),
        kubernetes_version: cs.kubernetes_version.clone(),
        manifests,
        healthy,
        machine_sets,
        machines,
        upgrades,
        health_checks,
        summary: String::new(),
    };
    health.summary = summary(&health);
    Ok(health)
}

/// The machine sets' status, by ID.
fn machine_sets_of(cluster: &str, sets: &[Resource]) -> Result<Vec<MachineSetHealth>, StatusError> {
    let mut machine_sets = Vec::new();
    for r in sets {
        let s: specs::MachineSetStatusSpec = decode(cluster, types::MACHINE_SET_STATUS, r)?;
        machine_sets.push(MachineSetHealth {
            id: id(r),
            phase: s.phase().as_str_name().to_string(),
            ready: s.ready,
            error: s.error.clone(),
            machines: s.machines.into(),
        });
    }
    machine_sets.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(machine_sets)
}

/// The upgrade phases, and whether every upgrade is `Done`.
fn upgrades_of(
    cluster: &str,
    kubernetes: &[Resource],
    talos: &[Resource],
) -> Result<(Upgrades, bool), StatusError> {
    let mut upgrades = Upgrades::default();
    let mut upgrades_done = true;
    for r in kubernetes {
        let s: specs::KubernetesUpgradeStatusSpec =
            decode(cluster, types::KUBERNETES_UPGRADE_STATUS, r)?;
        upgrades_done &= s.phase() == specs::kubernetes_upgrade_status_spec::Phase::Done;
        upgrades.kubernetes_phase = Some(s.phase().as_str_name().to_string());
        upgrades.kubernetes_error = s.error.clone();
    }
    for r in talos {
        let s: specs::TalosUpgradeStatusSpec = decode(cluster, types::TALOS_UPGRADE_STATUS, r)?;
        upgrades_done &= s.phase() == specs::talos_upgrade_status_spec::Phase::Done;
        upgrades.talos_phase = Some(s.phase().as_str_name().to_string());
        upgrades.talos_error = s.error.clone();
    }
    Ok((upgrades, upgrades_done))
}

/// The health checks' last results, by ID.
fn health_checks_of(
    cluster: &str,
    checks: &[Resource],
) -> Result<Vec<HealthCheckResult>, StatusError> {
    let mut health_checks = Vec::new();
    for r in checks {
        let s: specs::KubernetesHealthCheckStatusSpec =
            decode(cluster, types::KUBERNETES_HEALTH_CHECK_STATUS, r)?;
        health_checks.push(HealthCheckResult {
            id: id(r),
            state: s.state().as_str_name().to_string(),
            error: s.error.clone(),
            output: s.output.clone(),
            job_namespace: s.job_namespace.clone(),
            job_name: s.job_name.clone(),
        });
    }
    health_checks.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(health_checks)
}

/// The manifest groups' sync state, with the objects of each that are not applied.
fn manifests_of(cluster: &str, r: &Resource) -> Result<ManifestsSync, StatusError> {
    use specs::cluster_kubernetes_manifests_status_spec::manifest_status::Phase as ManifestPhase;
    let s: specs::ClusterKubernetesManifestsStatusSpec =
        decode(cluster, types::CLUSTER_KUBERNETES_MANIFESTS_STATUS, r)?;
    let groups = s
        .groups
        .iter()
        .map(|(id, g)| {
            let mut out_of_sync: Vec<ManifestSync> = g
                .manifests
                .values()
                .filter(|m| m.phase() != ManifestPhase::Applied)
                .map(|m| ManifestSync {
                    kind: m.kind.clone(),
                    group: m.group.clone(),
                    namespace: m.namespace.clone(),
                    name: m.name.clone(),
                    phase: m.phase().as_str_name().to_string(),
                })
                .collect();
            out_of_sync.sort_by(|a, b| {
                (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name))
            });
            ManifestGroupSync {
                id: id.clone(),
                phase: g.phase().as_str_name().to_string(),
                mode: g.mode().as_str_name().to_string(),
                total: u32::try_from(g.manifests.len()).unwrap_or(u32::MAX),
                out_of_sync,
            }
        })
        .collect();
    Ok(ManifestsSync {
        groups,
        total: u32::try_from(s.total).unwrap_or_default(),
        out_of_sync: u32::try_from(s.out_of_sync).unwrap_or_default(),
        last_error: s.last_error.clone(),
    })
}

fn summary(h: &ClusterHealth) -> String {
    let ready = |b: bool| if b { "ready" } else { "not ready" };
    let mut s = format!(
        "cluster {} is {}: phase {}, {}, Kubernetes API {}; machines {}/{} healthy, {} connected, {} requested",
        h.cluster,
        if h.healthy { "healthy" } else { "not healthy" },
        h.phase,
        ready(h.ready),
        ready(h.kubernetes_api_ready),
        h.machines.healthy,
        h.machines.total,
        h.machines.connected,
        h.machines.requested
    );
    for set in &h.machine_sets {
        s.push_str(&format!("; {} {} {}", set.id, set.phase, ready(set.ready)));
        if !set.error.is_empty() {
            s.push_str(&format!(" ({})", set.error.replace('\n', " ")));
        }
    }
    if let Some(p) = &h.upgrades.kubernetes_phase {
        s.push_str(&format!("; Kubernetes upgrade {p}"));
    }
    if let Some(p) = &h.upgrades.talos_phase {
        s.push_str(&format!("; Talos upgrade {p}"));
    }
    for check in &h.health_checks {
        s.push_str(&format!("; health check {} {}", check.id, check.state));
        if !check.error.is_empty() {
            s.push_str(&format!(" ({})", check.error.replace('\n', " ")));
        }
    }
    s
}

/// Reads the health of `cluster`, giving up at `deadline`.
pub async fn status_cluster<S: TemplateState>(
    state: &S,
    cluster: &str,
    deadline: Instant,
) -> Result<ClusterHealth, StatusError> {
    tokio::time::timeout_at(deadline, read(state, cluster))
        .await
        .map_err(|_| StatusError::Timeout(cluster.into()))?
}
