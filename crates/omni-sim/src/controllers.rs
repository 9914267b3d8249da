//! Emulation of the Omni controllers a template client observes
//! (docs/omni-wire.md#what-omni-sims-controllers-do):
//! status resources, finalizers, machine allocation, teardown cascades and status progression.
//!
//! Structural work (creating statuses, finalizers, cascades) happens as soon as the store
//! changes; status *progression* (ScalingUp → Running, Upgrading → Done, Booting → Running)
//! advances one step per tick, so clients see realistic intermediate states. Every write goes
//! through [`Store::put`], which skips no-op writes: an idle simulator writes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omni_client::proto::cosi::resource::Resource;
use omni_client::proto::specs::cluster_kubernetes_manifests_status_spec::{
    GroupStatus, ManifestStatus, group_status, manifest_status,
};
use omni_client::proto::specs::kubernetes_manifest_group_spec::Mode;
use omni_client::proto::specs::{
    ClusterConfigVersionSpec, ClusterKubernetesManifestsStatusSpec, ClusterMachineStatusSpec,
    ClusterSpec, ClusterStatusSpec, ClusterUuid, ControlPlaneStatusSpec, KubernetesHealthCheckSpec,
    KubernetesHealthCheckStatusSpec, KubernetesUpgradeStatusSpec, LoadBalancerStatusSpec,
    MachineClassSpec, MachineSetNodeSpec, MachineSetPhase, MachineSetSpec, MachineSetStatusSpec,
    MachineStatusSpec, Machines, TalosUpgradeStatusSpec, cluster_machine_status_spec,
    cluster_status_spec, control_plane_status_spec, kubernetes_health_check_status_spec,
    kubernetes_upgrade_status_spec, machine_set_spec, talos_upgrade_status_spec,
};
use tokio::sync::watch;

use crate::store::{Store, decode_spec, id, label, meta, resource, tearing_down};
use crate::types::{DEFAULT_NS, EPHEMERAL_NS, label as l, ty};

/// Finalizer the simulated cluster controller puts on Clusters.
pub(crate) const CLUSTER_FINALIZER: &str = "ClusterController";
/// Finalizer the simulated machine-set controller puts on MachineSets.
pub(crate) const MACHINE_SET_FINALIZER: &str = "MachineSetController";

const STATUS_OWNER: &str = "ClusterStatusController";
const MANIFESTS_OWNER: &str = "ClusterKubernetesManifestsStatusController";
const UUID_OWNER: &str = "ClusterUUIDController";
const CONFIG_VERSION_OWNER: &str = "ClusterConfigVersionController";
const MS_STATUS_OWNER: &str = "MachineSetStatusController";
const CP_STATUS_OWNER: &str = "ControlPlaneStatusController";
const LB_OWNER: &str = "LoadBalancerController";
const K8S_UPGRADE_OWNER: &str = "KubernetesUpgradeStatusController";
const TALOS_UPGRADE_OWNER: &str = "TalosUpgradeStatusController";
const CMS_OWNER: &str = "ClusterMachineStatusController";
const MSN_OWNER: &str = "MachineSetNodeController";
const MACHINE_OWNER: &str = "MachineStatusController";

/// Omni's re-check interval of a failing health check that sets none.
pub(crate) const DEFAULT_HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// Omni names a health check's runner Job `omni-healthcheck-<health check ID>`.
pub(crate) const HEALTH_CHECK_JOB_PREFIX: &str = "omni-healthcheck-";
/// Omni keeps at most this many characters of a failure in `error` (one line).
const HEALTH_CHECK_ERROR_LIMIT: usize = 256;

/// One health check's part of a gate step.
struct CheckStep {
    /// Its entry in the upgrade's step text; `None` when it passed.
    failure: Option<String>,
    /// Whether a run started or finished now (rather than waiting for the check's interval).
    ran: bool,
}

/// What the runner Job of a health check does in the (simulated) workload cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HealthCheckOutcome {
    /// The Job succeeds (the default for every check).
    #[default]
    Pass,
    /// The Job fails: `error` is the reason, `output` the container's last output.
    Fail {
        /// Why the Job failed.
        error: String,
        /// The failing container's output.
        output: String,
    },
}

/// A machine in the simulated pool.
#[derive(Debug, Clone, Default)]
pub struct PoolMachine {
    /// Machine UUID (MachineStatus, Link and node ID).
    pub id: String,
    /// Labels used for machine-class matching (e.g. `arch=amd64`).
    pub labels: BTreeMap<String, String>,
    /// Whether the machine is disconnected (label `omni.sidero.dev/disconnected`).
    pub disconnected: bool,
}

/// Controller knobs.
#[derive(Debug, Clone)]
pub(crate) struct ControllerConfig {
    /// Interval of status progression steps.
    pub(crate) step: Duration,
    /// Test convenience (default off): add unknown machines named by manual MachineSetNodes to
    /// the pool, as if they had connected, so manual sets become ready without seeding the pool.
    /// Off, a node naming a machine Omni has never seen stays not ready, as in Omni.
    pub(crate) auto_register_machines: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            step: Duration::from_millis(200),
            auto_register_machines: false,
        }
    }
}

/// The emulated controllers.
pub(crate) struct Controllers {
    store: Arc<Store>,
    cfg: ControllerConfig,
    pinned: Mutex<HashSet<(String, String)>>,
    /// Machines removed through their Link; never auto-registered again.
    removed: Mutex<HashSet<String>>,
    /// Which clusters a pass may skip; also serialises passes.
    dirty: Mutex<Dirty>,
    /// Outcome of each health check's runner Job, by health-check ID (default: passes).
    health_outcomes: Mutex<HashMap<String, HealthCheckOutcome>>,
    /// When each health check last finished a run, to honour its re-check interval.
    health_runs: Mutex<HashMap<String, std::time::Instant>>,
    /// The Talos upgrade target each health check last passed for: a later upgrade runs it again.
    health_passed_for: Mutex<HashMap<String, String>>,
    /// Test hook (default none): the error applying a cluster's manifests fails with, by cluster.
    manifest_errors: Mutex<HashMap<String, String>>,
    /// Writes the manifests into the workload cluster, when an embedder plugged one in.
    pub(crate) manifest_sync: crate::manifest_sync::ManifestSync,
}

/// One Kubernetes object of a manifest group, as Omni names it in its sync status.
struct ManifestDocument {
    kind: String,
    name: String,
    namespace: String,
    group: String,
}

/// The objects of a manifest group's YAML (documents without a kind are skipped).
fn manifest_documents(data: &str) -> Vec<ManifestDocument> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(data).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    docs.iter()
        .filter(|d| d.get("kind").is_some())
        .map(|d| ManifestDocument {
            kind: text(&d["kind"]),
            name: text(&d["metadata"]["name"]),
            namespace: text(&d["metadata"]["namespace"]),
            group: text(&d["apiVersion"])
                .rsplit_once('/')
                .map(|(g, _)| g.to_string())
                .unwrap_or_default(),
        })
        .collect()
}

/// A cluster's manifest groups after one step of Omni's manifest controller, from the groups
/// it reported before and the groups now `declared` (ID → mode and objects).
///
/// An applied object stays `APPLIED` while the API is up, a new one is `PENDING` until an apply
/// succeeds, and an object no longer declared (in a `FULL` group, or of a group no longer
/// declared) is `DELETING` until a prune succeeds; one-time groups are never pruned.
fn next_manifest_groups(
    previous: BTreeMap<String, GroupStatus>,
    declared: BTreeMap<String, (i32, Vec<ManifestDocument>)>,
    api_ready: bool,
    apply_succeeds: bool,
) -> BTreeMap<String, GroupStatus> {
    let key = |doc: &ManifestDocument| format!("{}/{}/{}", doc.kind, doc.namespace, doc.name);
    let entry = |doc: ManifestDocument, phase: manifest_status::Phase| ManifestStatus {
        phase: phase as i32,
        kind: doc.kind,
        name: doc.name,
        namespace: doc.namespace,
        group: doc.group,
    };
    let applied = manifest_status::Phase::Applied as i32;
    let mut groups = BTreeMap::new();
    for (group_id, (mode, docs)) in declared {
        let before = previous.get(&group_id);
        let mut manifests = BTreeMap::new();
        for doc in docs {
            let k = key(&doc);
            let was_applied = before
                .and_then(|g| g.manifests.get(&k))
                .is_some_and(|m| m.phase == applied);
            let phase = if apply_succeeds || (api_ready && was_applied) {
                manifest_status::Phase::Applied
            } else {
                manifest_status::Phase::Pending
            };
            manifests.insert(k, entry(doc, phase));
        }
        // Dropped from a declared full group: deleting until pruned.
        if let Some(before) = before
            && mode != Mode::OneTime as i32
            && !apply_succeeds
            && api_ready
        {
            for (k, m) in &before.manifests {
                if !manifests.contains_key(k) {
                    let mut m = m.clone();
                    m.phase = manifest_status::Phase::Deleting as i32;
                    manifests.insert(k.clone(), m);
                }
            }
        }
        let phase = if !api_ready {
            group_status::Phase::Pending
        } else if manifests.values().all(|m| m.phase == applied) {
            group_status::Phase::Applied
        } else {
            group_status::Phase::Progressing
        };
        groups.insert(
            group_id,
            GroupStatus {
                phase: phase as i32,
                mode,
                manifests,
            },
        );
    }
    // Groups no longer declared: their objects stay (DELETING) until a prune succeeds;
    // one-time groups are forgotten at once.
    if api_ready && !apply_succeeds {
        for (group_id, mut group) in previous {
            if groups.contains_key(&group_id)
                || group.mode == Mode::OneTime as i32
                || group.manifests.is_empty()
            {
                continue;
            }
            group.phase = group_status::Phase::Deleting as i32;
            for m in group.manifests.values_mut() {
                m.phase = manifest_status::Phase::Deleting as i32;
            }
            groups.insert(group_id, group);
        }
    }
    groups
}

/// Dirty tracking: a cluster whose last progressing pass changed nothing is *settled* and
/// skipped until a change touches it, so an idle fleet costs nothing per tick instead of a walk
/// over every cluster. Changes are read from the store's own feed, so every writer counts.
struct Dirty {
    feed: tokio::sync::broadcast::Receiver<Arc<crate::store::StoreEvent>>,
    settled: HashSet<String>,
    /// Whether the last pass left every cluster settled (and nothing else to do).
    all_settled: bool,
    /// Clusters a change touched since the last pass. A pass that only reacts to changes
    /// (structural work, no progression) visits just these: at a thousand clusters in flight,
    /// walking every unsettled cluster on each burst of changes made the simulator quadratic.
    touched: BTreeSet<String>,
    /// The kinds written since the last pass: the walks over a whole kind (links, orphans) run
    /// only after a write to a kind they look at.
    touched_kinds: HashSet<String>,
    /// A change touched what every cluster shares (or the feed lagged): the next pass visits all.
    touched_all: bool,
}

/// What changed since the last pass.
struct Scope {
    /// The clusters touched; `None`: every cluster.
    clusters: Option<BTreeSet<String>>,
    /// The kinds written; `None`: every kind.
    kinds: Option<HashSet<String>>,
}

impl Scope {
    fn wrote(&self, kind: &str) -> bool {
        self.kinds.as_ref().is_none_or(|k| k.contains(kind))
    }
}

impl Dirty {
    /// Reads the changes since the last pass; returns whether there were any.
    fn absorb(&mut self) -> bool {
        use tokio::sync::broadcast::error::TryRecvError;
        let mut changed = false;
        loop {
            match self.feed.try_recv() {
                Ok(ev) => {
                    changed = true;
                    self.touched_kinds
                        .insert(meta(ev.resource()).r#type.clone());
                    match touched_cluster(&ev) {
                        Touched::Clusters(names) => {
                            for name in names {
                                self.settled.remove(name);
                                self.touched.insert(name.to_string());
                            }
                        }
                        Touched::Shared => self.touch_all(),
                    }
                }
                Err(TryRecvError::Lagged(_)) => {
                    changed = true;
                    self.touch_all();
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => return changed,
            }
        }
    }

    fn touch_all(&mut self) {
        self.settled.clear();
        self.touched_all = true;
    }

    /// What changed since the last call, forgetting it.
    fn take_scope(&mut self) -> Scope {
        let all = std::mem::take(&mut self.touched_all);
        let clusters = std::mem::take(&mut self.touched);
        let kinds = std::mem::take(&mut self.touched_kinds);
        Scope {
            clusters: (!all).then_some(clusters),
            kinds: (!all).then_some(kinds),
        }
    }
}

/// What a change may affect.
enum Touched<'a> {
    /// Only the named clusters.
    Clusters(Vec<&'a str>),
    /// Anything: the machine pool, classes, links and unlabelled resources are shared.
    Shared,
}

fn touched_cluster(ev: &crate::store::StoreEvent) -> Touched<'_> {
    use crate::store::StoreEvent;
    if let StoreEvent::Updated { old, new } = ev
        && meta(new).r#type == ty::MACHINE_STATUS
        && let Some(taken_by) = taken_by(old, new)
    {
        // A machine joining a cluster frees nothing another cluster could use: only its old
        // and new clusters are concerned.
        return Touched::Clusters(
            [Some(taken_by), label(old, l::CLUSTER)]
                .into_iter()
                .flatten()
                .collect(),
        );
    }
    let sides: Vec<&Resource> = match ev {
        StoreEvent::Created(r) | StoreEvent::Destroyed(r) => vec![r],
        StoreEvent::Updated { old, new } => vec![old, new],
    };
    let mut names = Vec::new();
    for r in sides {
        let ty = meta(r).r#type.as_str();
        if ty == ty::CLUSTER {
            names.push(id(r));
            continue;
        }
        if matches!(ty, ty::MACHINE_STATUS | ty::MACHINE_CLASS | ty::LINK) {
            return Touched::Shared;
        }
        match label(r, l::CLUSTER) {
            Some(name) => names.push(name),
            None => return Touched::Shared,
        }
    }
    Touched::Clusters(names)
}

/// The cluster a machine's status now names, when joining it is the update's only change.
fn taken_by<'a>(old: &Resource, new: &'a Resource) -> Option<&'a str> {
    let cluster = label(new, l::CLUSTER)?;
    let without_cluster = |r: &Resource| {
        let mut labels = meta(r).labels.clone();
        labels.remove(l::CLUSTER);
        labels
    };
    let (before, after) = (meta(old), meta(new));
    let same_spec =
        old.spec.as_ref().map(|s| &s.proto_spec) == new.spec.as_ref().map(|s| &s.proto_spec);
    (same_spec
        && before.finalizers == after.finalizers
        && before.phase == after.phase
        && without_cluster(old) == without_cluster(new))
    .then_some(cluster)
}

impl std::fmt::Debug for Controllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controllers")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn labels<const N: usize>(pairs: [(&str, &str); N]) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn spec_of<M: prost::Message + Default>(r: &Resource) -> M {
    decode_spec(r).unwrap_or_default()
}

impl Controllers {
    /// Controllers over `store`.
    pub(crate) fn new(store: Arc<Store>, cfg: ControllerConfig) -> Self {
        Self {
            cfg,
            pinned: Mutex::new(HashSet::new()),
            removed: Mutex::new(HashSet::new()),
            dirty: Mutex::new(Dirty {
                feed: store.subscribe(),
                settled: HashSet::new(),
                all_settled: false,
                touched: BTreeSet::new(),
                touched_kinds: HashSet::new(),
                touched_all: true,
            }),
            health_outcomes: Mutex::new(HashMap::new()),
            health_runs: Mutex::new(HashMap::new()),
            health_passed_for: Mutex::new(HashMap::new()),
            manifest_errors: Mutex::new(HashMap::new()),
            manifest_sync: Default::default(),
            store,
        }
    }

    /// Sets what the runner Job of health check `id` does from its next run on.
    pub(crate) fn set_health_check_outcome(&self, id: &str, outcome: HealthCheckOutcome) {
        self.health_outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), outcome);
        self.unsettle();
    }

    /// Test hook: applying `cluster`'s manifests fails with `error` (`None`: succeeds again).
    pub(crate) fn set_manifests_error(&self, cluster: &str, error: Option<String>) {
        let mut errors = self
            .manifest_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match error {
            Some(e) => errors.insert(cluster.to_string(), e),
            None => errors.remove(cluster),
        };
        drop(errors);
        self.unsettle();
    }

    /// Stops status progression for one resource, so a test's manual phase flip sticks.
    pub(crate) fn pin(&self, ty: &str, id: &str) {
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((ty.to_string(), id.to_string()));
        self.unsettle();
    }

    /// Resumes status progression for a pinned resource.
    pub(crate) fn unpin(&self, ty: &str, id: &str) {
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(ty.to_string(), id.to_string()));
        self.unsettle();
    }

    /// Forgets which clusters are settled (after a change outside the store).
    fn unsettle(&self) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        dirty.touch_all();
        dirty.all_settled = false;
    }

    fn is_pinned(&self, ty: &str, id: &str) -> bool {
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(ty.to_string(), id.to_string()))
    }

    /// Adds (or refreshes) a machine in the pool: a MachineStatus and a SideroLink Link.
    pub(crate) fn add_machine(&self, m: &PoolMachine) {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&m.id);
        let existing = self.store.try_get(DEFAULT_NS, ty::MACHINE_STATUS, &m.id);
        let mut lbls: Vec<(String, String)> = m
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if m.disconnected {
            lbls.push((l::DISCONNECTED.into(), String::new()));
        }
        if let Some(c) = existing.as_ref().and_then(|r| label(r, l::CLUSTER)) {
            lbls.push((l::CLUSTER.into(), c.to_string()));
        }
        self.store.put(resource(
            ty::MACHINE_STATUS,
            &m.id,
            MACHINE_OWNER,
            lbls,
            &MachineStatusSpec::default(),
        ));
        if self.store.try_get(DEFAULT_NS, ty::LINK, &m.id).is_none() {
            self.store.put(resource(
                ty::LINK,
                &m.id,
                "",
                Vec::new(),
                &MachineSetNodeSpec::default(),
            ));
        }
    }

    /// Runs until `shutdown` flips: reacts to store changes at once and progresses statuses on
    /// every tick.
    pub(crate) async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut rx = self.store.subscribe();
        let mut tick = tokio::time::interval(self.cfg.step);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let progress = tokio::select! {
                _ = shutdown.changed() => return,
                ev = rx.recv() => {
                    if let Err(tokio::sync::broadcast::error::RecvError::Closed) = ev {
                        return;
                    }
                    // Coalesce bursts of events into one pass.
                    while rx.try_recv().is_ok() {}
                    false
                }
                _ = tick.tick() => true,
            };
            if *shutdown.borrow() {
                return;
            }
            self.reconcile(progress);
        }
    }

    /// One reconciliation pass; with `progress`, statuses advance one step.
    pub(crate) fn reconcile(&self, progress: bool) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        let changed = dirty.absorb();
        if !changed && dirty.all_settled {
            // Nothing changed since a pass that changed nothing: this one would change nothing.
            return;
        }
        let scope = dirty.take_scope();
        let start = self.store.revision();
        if scope.wrote(ty::LINK) {
            self.links();
        }
        let mut all_settled = progress;
        // Progression concerns every unsettled cluster; structural work only what changed.
        let visits: Vec<String> = match scope.clusters.as_ref().filter(|_| !progress) {
            Some(touched) => touched.iter().cloned().collect(),
            None => self.store.read(|v| {
                v.all(DEFAULT_NS, ty::CLUSTER)
                    .filter(|c| tearing_down(c) || !dirty.settled.contains(id(c)))
                    .map(|c| id(c).to_string())
                    .collect()
            }),
        };
        for name in visits {
            let Some(cluster) = self.store.try_get(DEFAULT_NS, ty::CLUSTER, &name) else {
                continue;
            };
            if tearing_down(&cluster) {
                self.cluster_teardown(&cluster);
                all_settled = false;
                continue;
            }
            let before = self.store.revision();
            let waiting = self.cluster_running(&cluster, progress);
            if progress && !waiting && self.store.revision() == before {
                dirty.settled.insert(name);
            } else {
                all_settled = false;
            }
        }
        let sources = [
            ty::MACHINE_SET,
            ty::MACHINE_SET_STATUS,
            ty::MACHINE_SET_NODE,
            ty::CLUSTER_MACHINE_STATUS,
        ];
        if self.store.revision() != start || sources.into_iter().any(|k| scope.wrote(k)) {
            self.orphans();
        }
        dirty.all_settled = all_settled && self.store.revision() == start;
    }

    fn ensure<M: prost::Message>(
        &self,
        ty: &str,
        id: &str,
        owner: &str,
        lbls: Vec<(String, String)>,
        spec: &M,
    ) {
        if self.store.try_get(DEFAULT_NS, ty, id).is_none() {
            self.store.put(resource(ty, id, owner, lbls, spec));
        }
    }

    fn set_spec<M: prost::Message + Default>(&self, ty: &str, id: &str, f: impl FnOnce(&mut M)) {
        if self.is_pinned(ty, id) {
            return;
        }
        self.store.modify(DEFAULT_NS, ty, id, |r| {
            let mut spec: M = spec_of(r);
            f(&mut spec);
            if let Some(s) = r.spec.as_mut() {
                s.proto_spec = spec.encode_to_vec();
            }
        });
    }

    fn add_finalizer(&self, ty: &str, id: &str, fin: &str) {
        if let Some(r) = self.store.try_get(DEFAULT_NS, ty, id)
            && !meta(&r).finalizers.iter().any(|f| f == fin)
        {
            self.store.modify(DEFAULT_NS, ty, id, |r| {
                if let Some(m) = r.metadata.as_mut() {
                    m.finalizers.push(fin.to_string());
                }
            });
        }
    }

    fn drop_finalizer(&self, ty: &str, id: &str, fin: &str) {
        if let Some(r) = self.store.try_get(DEFAULT_NS, ty, id)
            && meta(&r).finalizers.iter().any(|f| f == fin)
        {
            self.store.modify(DEFAULT_NS, ty, id, |r| {
                if let Some(m) = r.metadata.as_mut() {
                    m.finalizers.retain(|f| f != fin);
                }
            });
        }
    }

    fn set_machine_cluster(&self, machine: &str, cluster: Option<&str>) {
        if let Some(r) = self.store.try_get(DEFAULT_NS, ty::MACHINE_STATUS, machine)
            && label(&r, l::CLUSTER) != cluster
        {
            self.store
                .modify(DEFAULT_NS, ty::MACHINE_STATUS, machine, |r| {
                    if let Some(m) = r.metadata.as_mut() {
                        match cluster {
                            Some(c) => {
                                m.labels.insert(l::CLUSTER.into(), c.to_string());
                            }
                            None => {
                                m.labels.remove(l::CLUSTER);
                            }
                        }
                    }
                });
        }
    }

    /// Returns whether the cluster waits for time to pass (a failing health check's interval),
    /// so it must not be skipped as settled.
    fn cluster_running(&self, cluster: &Resource, progress: bool) -> bool {
        let name = id(cluster).to_string();
        let spec: ClusterSpec = spec_of(cluster);
        self.add_finalizer(ty::CLUSTER, &name, CLUSTER_FINALIZER);
        self.ensure_cluster_statuses(&name, &spec);
        self.start_upgrades(&name, &spec);
        let sets = self.store.list_labeled(ty::MACHINE_SET, l::CLUSTER, &name);
        for set in &sets {
            if tearing_down(set) {
                self.machine_set_teardown(set, false);
            } else {
                self.machine_set_running(&name, set, progress);
            }
        }
        self.health_check_statuses(&name);
        if progress {
            return self.progress_cluster(&name, &spec, &sets);
        }
        false
    }

    /// The resources Omni's cluster controllers create for a cluster, in their first state.
    fn ensure_cluster_statuses(&self, name: &str, spec: &ClusterSpec) {
        let cl = || labels([(l::CLUSTER, name)]);
        self.ensure(
            ty::CLUSTER_UUID,
            name,
            UUID_OWNER,
            cl(),
            &ClusterUuid {
                uuid: uuid::Uuid::new_v4().to_string(),
            },
        );
        // The Talos version the cluster was created with; kept for its life.
        self.ensure(
            ty::CLUSTER_CONFIG_VERSION,
            name,
            CONFIG_VERSION_OWNER,
            cl(),
            &ClusterConfigVersionSpec {
                version: spec.talos_version.clone(),
            },
        );
        self.ensure(
            ty::CLUSTER_STATUS,
            name,
            STATUS_OWNER,
            cl(),
            &ClusterStatusSpec {
                phase: cluster_status_spec::Phase::ScalingUp as i32,
                talos_version: spec.talos_version.clone(),
                kubernetes_version: spec.kubernetes_version.clone(),
                ..Default::default()
            },
        );
        self.ensure(
            ty::MANIFESTS_STATUS,
            name,
            MANIFESTS_OWNER,
            cl(),
            &ClusterKubernetesManifestsStatusSpec::default(),
        );
        self.ensure(
            ty::LOAD_BALANCER_STATUS,
            name,
            LB_OWNER,
            cl(),
            &LoadBalancerStatusSpec::default(),
        );
        self.ensure(
            ty::KUBERNETES_UPGRADE_STATUS,
            name,
            K8S_UPGRADE_OWNER,
            cl(),
            &KubernetesUpgradeStatusSpec {
                phase: kubernetes_upgrade_status_spec::Phase::Upgrading as i32,
                current_upgrade_version: spec.kubernetes_version.clone(),
                ..Default::default()
            },
        );
        self.ensure(
            ty::TALOS_UPGRADE_STATUS,
            name,
            TALOS_UPGRADE_OWNER,
            cl(),
            &TalosUpgradeStatusSpec {
                phase: talos_upgrade_status_spec::Phase::Upgrading as i32,
                current_upgrade_version: spec.talos_version.clone(),
                ..Default::default()
            },
        );
    }

    /// A version change in the Cluster spec starts an upgrade at once; it completes on a tick.
    fn start_upgrades(&self, name: &str, spec: &ClusterSpec) {
        self.set_spec::<KubernetesUpgradeStatusSpec>(ty::KUBERNETES_UPGRADE_STATUS, name, |s| {
            if s.phase == kubernetes_upgrade_status_spec::Phase::Done as i32
                && s.last_upgrade_version != spec.kubernetes_version
            {
                s.phase = kubernetes_upgrade_status_spec::Phase::Upgrading as i32;
                s.current_upgrade_version = spec.kubernetes_version.clone();
            }
        });
        self.set_spec::<TalosUpgradeStatusSpec>(ty::TALOS_UPGRADE_STATUS, name, |s| {
            if s.phase == talos_upgrade_status_spec::Phase::Done as i32
                && s.last_upgrade_version != spec.talos_version
            {
                s.phase = talos_upgrade_status_spec::Phase::Upgrading as i32;
                s.current_upgrade_version = spec.talos_version.clone();
            }
        });
    }

    /// Omni keeps one `KubernetesHealthCheckStatus` per health check (namespace `ephemeral`,
    /// same ID, the cluster label): statuses of removed checks go, and outside a gated upgrade
    /// a check left `RUNNING` becomes `UNKNOWN` without its Job (nobody polls it any more),
    /// keeping the last failure readable.
    fn health_check_statuses(&self, cluster: &str) {
        let checks: HashSet<String> = self
            .store
            .list_labeled(ty::HEALTH_CHECK, l::CLUSTER, cluster)
            .iter()
            .filter(|r| !tearing_down(r))
            .map(|r| id(r).to_string())
            .collect();
        let gated = self.talos_upgrade_gated(cluster);
        for status in self.health_check_status_list(cluster) {
            let check = id(&status).to_string();
            if !checks.contains(&check) {
                self.store
                    .remove(EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, &check);
                self.health_runs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&check);
                continue;
            }
            let spec: KubernetesHealthCheckStatusSpec = spec_of(&status);
            if !gated && spec.state == kubernetes_health_check_status_spec::State::Running as i32 {
                self.put_health_check_status(cluster, &check, |s| {
                    s.state = kubernetes_health_check_status_spec::State::Unknown as i32;
                    s.job_namespace = String::new();
                    s.job_name = String::new();
                });
            }
        }
    }

    fn health_check_status_list(&self, cluster: &str) -> Vec<Resource> {
        self.store
            .list_labeled_in(EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, l::CLUSTER, cluster)
    }

    /// Whether Omni gates the cluster's Talos upgrade on its health checks: only a real
    /// upgrade (from a version reached before) in progress; the first install is not one.
    fn talos_upgrade_gated(&self, cluster: &str) -> bool {
        self.store
            .try_get(DEFAULT_NS, ty::TALOS_UPGRADE_STATUS, cluster)
            .is_some_and(|r| {
                let s: TalosUpgradeStatusSpec = spec_of(&r);
                s.phase == talos_upgrade_status_spec::Phase::Upgrading as i32
                    && !s.last_upgrade_version.is_empty()
            })
    }

    fn put_health_check_status(
        &self,
        cluster: &str,
        check: &str,
        f: impl FnOnce(&mut KubernetesHealthCheckStatusSpec),
    ) {
        let existing = self
            .store
            .try_get(EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, check);
        let mut spec: KubernetesHealthCheckStatusSpec =
            existing.as_ref().map(spec_of).unwrap_or_default();
        let before = spec.clone();
        f(&mut spec);
        if existing.is_some() && spec == before {
            return;
        }
        let mut r = resource(
            ty::HEALTH_CHECK_STATUS,
            check,
            TALOS_UPGRADE_OWNER,
            labels([(l::CLUSTER, cluster)]),
            &spec,
        );
        if let Some(m) = r.metadata.as_mut() {
            m.namespace = EPHEMERAL_NS.into();
        }
        self.store.put(r);
    }

    /// One step of Omni's health-check gate: every check runs (its Job is created: `RUNNING`),
    /// finishes on the next step (`PASSED`, or `FAILED` with the error and output), and a
    /// failed check runs again once its interval (default 30s) has passed. Returns `None`
    /// when every check passed, else the upgrade's step text (Omni's wording) and whether the
    /// gate waits only for time to pass.
    fn run_health_checks(&self, cluster: &str) -> Option<(String, bool)> {
        let checks = self
            .store
            .list_labeled(ty::HEALTH_CHECK, l::CLUSTER, cluster);
        let target = self
            .store
            .try_get(DEFAULT_NS, ty::TALOS_UPGRADE_STATUS, cluster)
            .map(|r| spec_of::<TalosUpgradeStatusSpec>(&r).current_upgrade_version)
            .unwrap_or_default();
        let mut failures = Vec::new();
        let mut only_waiting = true;
        for check in checks.iter().filter(|r| !tearing_down(r)) {
            let step = self.health_check_step(cluster, check, &target);
            only_waiting &= !step.ran;
            failures.extend(step.failure);
        }
        if failures.is_empty() {
            None
        } else {
            Some((
                format!("waiting for healthchecks to pass: {}", failures.join("; ")),
                only_waiting,
            ))
        }
    }

    /// One check's part of a [`Self::run_health_checks`] step.
    fn health_check_step(&self, cluster: &str, check: &Resource, target: &str) -> CheckStep {
        use kubernetes_health_check_status_spec::State;
        let check_id = id(check).to_string();
        let spec: KubernetesHealthCheckSpec = spec_of(check);
        let status: KubernetesHealthCheckStatusSpec = self
            .store
            .try_get(EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, &check_id)
            .as_ref()
            .map(spec_of)
            .unwrap_or_default();
        let state = status.state;
        let passed_now = self
            .health_passed_for
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&check_id)
            .map(String::as_str)
            == Some(target);
        if state == State::Passed as i32 && passed_now {
            return CheckStep {
                failure: None,
                ran: false,
            };
        }
        if state == State::Running as i32 {
            return CheckStep {
                failure: self.finish_health_check_run(cluster, &check_id, target),
                ran: true,
            };
        }
        let interval = spec
            .interval
            .as_ref()
            .map(|d| {
                Duration::from_secs(u64::try_from(d.seconds).unwrap_or(0))
                    + Duration::from_nanos(u64::try_from(d.nanos).unwrap_or(0))
            })
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_HEALTH_CHECK_INTERVAL);
        let last_run = self
            .health_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&check_id)
            .copied();
        let due =
            state != State::Failed as i32 || last_run.is_none_or(|at| at.elapsed() >= interval);
        if !due {
            return CheckStep {
                failure: Some(format!("{check_id:?}: {}", status.error)),
                ran: false,
            };
        }
        // A new attempt: the Job is created fresh; the last failure stays readable.
        let job_namespace = job_namespace(&spec.job);
        self.put_health_check_status(cluster, &check_id, |s| {
            s.state = State::Running as i32;
            s.job_namespace = job_namespace;
            s.job_name = format!("{HEALTH_CHECK_JOB_PREFIX}{check_id}");
        });
        CheckStep {
            failure: Some(format!("{check_id:?}: waiting to complete")),
            ran: true,
        }
    }

    /// A running check's Job finishes with the outcome the test chose; returns the failure
    /// line, if it failed.
    fn finish_health_check_run(
        &self,
        cluster: &str,
        check_id: &str,
        target: &str,
    ) -> Option<String> {
        use kubernetes_health_check_status_spec::State;
        let outcome = self
            .health_outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(check_id)
            .cloned()
            .unwrap_or_default();
        self.health_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(check_id.to_string(), std::time::Instant::now());
        match outcome {
            HealthCheckOutcome::Pass => {
                self.health_passed_for
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(check_id.to_string(), target.to_string());
                self.put_health_check_status(cluster, check_id, |s| {
                    s.state = State::Passed as i32;
                    s.error = String::new();
                    s.output = String::new();
                });
                None
            }
            HealthCheckOutcome::Fail { error, output } => {
                let line: String = error
                    .replace('\n', " ")
                    .chars()
                    .take(HEALTH_CHECK_ERROR_LIMIT)
                    .collect();
                let failure = format!("{check_id:?}: {line}");
                self.put_health_check_status(cluster, check_id, |s| {
                    s.state = State::Failed as i32;
                    s.error = line;
                    s.output = output;
                });
                Some(failure)
            }
        }
    }

    fn machine_set_running(&self, cluster: &str, set: &Resource, progress: bool) {
        let set_id = id(set).to_string();
        let set_spec: MachineSetSpec = spec_of(set);
        let is_cp = meta(set).labels.contains_key(l::ROLE_CONTROLPLANE);
        self.add_finalizer(ty::MACHINE_SET, &set_id, MACHINE_SET_FINALIZER);
        self.ensure(
            ty::MACHINE_SET_STATUS,
            &set_id,
            MS_STATUS_OWNER,
            meta(set).labels.clone().into_iter().collect(),
            &MachineSetStatusSpec {
                phase: MachineSetPhase::ScalingUp as i32,
                machine_allocation: set_spec.machine_allocation.clone(),
                ..Default::default()
            },
        );
        // Labels follow the set (user labels may change).
        if let Some(st) = self
            .store
            .try_get(DEFAULT_NS, ty::MACHINE_SET_STATUS, &set_id)
            && meta(&st).labels != meta(set).labels
        {
            let lbls = meta(set).labels.clone();
            self.store
                .modify(DEFAULT_NS, ty::MACHINE_SET_STATUS, &set_id, |r| {
                    if let Some(m) = r.metadata.as_mut() {
                        m.labels = lbls;
                    }
                });
        }
        if is_cp {
            self.ensure(
                ty::CONTROL_PLANE_STATUS,
                &set_id,
                CP_STATUS_OWNER,
                labels([(l::CLUSTER, cluster)]),
                &ControlPlaneStatusSpec::default(),
            );
        }
        if progress && let Some(alloc) = &set_spec.machine_allocation {
            self.allocate(cluster, set, alloc);
        }
        let role = if is_cp {
            l::ROLE_CONTROLPLANE
        } else {
            l::ROLE_WORKER
        };
        for node in self
            .store
            .list_labeled(ty::MACHINE_SET_NODE, l::MACHINE_SET, &set_id)
        {
            self.node_running(cluster, &set_id, role, &node, progress);
        }
        if progress {
            self.progress_machine_set(set, &set_spec);
        }
    }

    /// A node's machine joins the cluster and gets its `ClusterMachineStatus`, which follows
    /// the machine's health on progress ticks.
    fn node_running(
        &self,
        cluster: &str,
        set_id: &str,
        role: &str,
        node: &Resource,
        progress: bool,
    ) {
        let machine = id(node).to_string();
        let removed = self
            .removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&machine);
        if self.cfg.auto_register_machines
            && !removed
            && self
                .store
                .try_get(DEFAULT_NS, ty::MACHINE_STATUS, &machine)
                .is_none()
        {
            self.add_machine(&PoolMachine {
                id: machine.clone(),
                ..Default::default()
            });
        }
        self.set_machine_cluster(&machine, Some(cluster));
        self.ensure(
            ty::CLUSTER_MACHINE_STATUS,
            &machine,
            CMS_OWNER,
            labels([(l::CLUSTER, cluster), (l::MACHINE_SET, set_id), (role, "")]),
            &ClusterMachineStatusSpec {
                stage: cluster_machine_status_spec::Stage::Booting as i32,
                ..Default::default()
            },
        );
        if progress {
            let healthy = self.machine_healthy(&machine);
            self.set_spec::<ClusterMachineStatusSpec>(ty::CLUSTER_MACHINE_STATUS, &machine, |s| {
                s.ready = healthy;
                s.stage = if healthy {
                    cluster_machine_status_spec::Stage::Running as i32
                } else {
                    cluster_machine_status_spec::Stage::Booting as i32
                };
                s.config_up_to_date = healthy;
                if healthy {
                    s.config_apply_status =
                        omni_client::proto::specs::ConfigApplyStatus::Applied as i32;
                }
            });
        }
    }

    fn machine_healthy(&self, machine: &str) -> bool {
        self.store
            .try_get(DEFAULT_NS, ty::MACHINE_STATUS, machine)
            .is_some_and(|m| !meta(&m).labels.contains_key(l::DISCONNECTED))
    }

    fn allocate(&self, cluster: &str, set: &Resource, alloc: &machine_set_spec::MachineAllocation) {
        let set_id = id(set);
        let Some(class) = self
            .store
            .try_get(DEFAULT_NS, ty::MACHINE_CLASS, &alloc.name)
        else {
            return;
        };
        let class: MachineClassSpec = spec_of(&class);
        let unlimited =
            alloc.allocation_type == machine_set_spec::machine_allocation::Type::Unlimited as i32;
        let mut nodes = self
            .store
            .list_labeled(ty::MACHINE_SET_NODE, l::MACHINE_SET, set_id);
        let want = if unlimited {
            usize::MAX
        } else {
            alloc.machine_count as usize
        };
        let role = if meta(set).labels.contains_key(l::ROLE_CONTROLPLANE) {
            l::ROLE_CONTROLPLANE
        } else {
            l::ROLE_WORKER
        };
        if nodes.len() < want {
            let free: Vec<String> = self.store.read(|v| {
                v.all(DEFAULT_NS, ty::MACHINE_STATUS)
                    .filter(|m| {
                        let md = meta(m);
                        !md.labels.contains_key(l::CLUSTER)
                            && !md.labels.contains_key(l::DISCONNECTED)
                            && v.get(DEFAULT_NS, ty::MACHINE_SET_NODE, id(m)).is_none()
                            && class_matches(&class.match_labels, &md.labels)
                    })
                    .take(want.saturating_sub(nodes.len()))
                    .map(|m| id(m).to_string())
                    .collect()
            });
            for mid in free {
                self.store.put(resource(
                    ty::MACHINE_SET_NODE,
                    &mid,
                    MSN_OWNER,
                    labels([
                        (l::CLUSTER, cluster),
                        (l::MACHINE_SET, set_id),
                        (role, ""),
                        (l::MANAGED_BY_MSN_CONTROLLER, ""),
                    ]),
                    &MachineSetNodeSpec::default(),
                ));
                self.set_machine_cluster(&mid, Some(cluster));
            }
        } else if !unlimited && nodes.len() > want {
            nodes.sort_by(|a, b| id(b).cmp(id(a)));
            for node in nodes.iter().take(nodes.len() - want) {
                if meta(node).owner == MSN_OWNER {
                    self.release_node(id(node));
                }
            }
        }
    }

    /// Removes a node and its status and returns the machine to the pool.
    fn release_node(&self, machine: &str) {
        self.store.remove(DEFAULT_NS, ty::MACHINE_SET_NODE, machine);
        self.store
            .remove(DEFAULT_NS, ty::CLUSTER_MACHINE_STATUS, machine);
        self.set_machine_cluster(machine, None);
    }

    fn progress_machine_set(&self, set: &Resource, set_spec: &MachineSetSpec) {
        let set_id = id(set);
        let nodes = self
            .store
            .list_labeled(ty::MACHINE_SET_NODE, l::MACHINE_SET, set_id);
        let healthy = nodes.iter().filter(|n| self.machine_healthy(id(n))).count() as u32;
        let total = nodes.len() as u32;
        let requested = match &set_spec.machine_allocation {
            Some(a)
                if a.allocation_type
                    == machine_set_spec::machine_allocation::Type::Static as i32 =>
            {
                a.machine_count
            }
            _ => total,
        };
        let phase = if total < requested {
            MachineSetPhase::ScalingUp
        } else if total > requested {
            MachineSetPhase::ScalingDown
        } else if healthy < total {
            MachineSetPhase::ScalingUp
        } else {
            MachineSetPhase::Running
        };
        let alloc = set_spec.machine_allocation.clone();
        self.set_spec::<MachineSetStatusSpec>(ty::MACHINE_SET_STATUS, set_id, |s| {
            s.phase = phase as i32;
            s.ready = phase == MachineSetPhase::Running;
            s.machines = Some(Machines {
                total,
                healthy,
                connected: healthy,
                requested,
            });
            s.machine_allocation = alloc;
        });
        if meta(set).labels.contains_key(l::ROLE_CONTROLPLANE) {
            let ready = healthy > 0 && phase == MachineSetPhase::Running;
            self.set_spec::<ControlPlaneStatusSpec>(ty::CONTROL_PLANE_STATUS, set_id, |s| {
                use control_plane_status_spec::condition::{Severity, Status, Type};
                s.conditions = vec![control_plane_status_spec::Condition {
                    r#type: Type::Etcd as i32,
                    reason: if ready {
                        String::new()
                    } else {
                        "etcd is not healthy".into()
                    },
                    status: if ready {
                        Status::Ready
                    } else {
                        Status::NotReady
                    } as i32,
                    severity: if ready {
                        Severity::Info
                    } else {
                        Severity::Error
                    } as i32,
                }];
            });
        }
    }

    /// Returns whether the cluster waits only for time to pass (a failed health check's
    /// re-check interval).
    fn progress_cluster(&self, name: &str, spec: &ClusterSpec, sets: &[Resource]) -> bool {
        let hold = if self.talos_upgrade_gated(name) {
            self.run_health_checks(name)
        } else {
            None
        };
        self.set_spec::<KubernetesUpgradeStatusSpec>(ty::KUBERNETES_UPGRADE_STATUS, name, |s| {
            if s.phase == kubernetes_upgrade_status_spec::Phase::Upgrading as i32 {
                s.phase = kubernetes_upgrade_status_spec::Phase::Done as i32;
                s.last_upgrade_version = spec.kubernetes_version.clone();
                s.current_upgrade_version = String::new();
            }
        });
        self.set_spec::<TalosUpgradeStatusSpec>(ty::TALOS_UPGRADE_STATUS, name, |s| {
            if s.phase != talos_upgrade_status_spec::Phase::Upgrading as i32 {
                return;
            }
            // A failing health check holds the upgrade, its reason in `step`.
            if let Some((reason, _)) = &hold {
                s.step = reason.clone();
                return;
            }
            s.phase = talos_upgrade_status_spec::Phase::Done as i32;
            s.last_upgrade_version = spec.talos_version.clone();
            s.current_upgrade_version = String::new();
            s.step = String::new();
        });
        let status = |t: &str, i: &str| self.store.try_get(DEFAULT_NS, t, i);
        let sets_ready = sets.iter().all(|s| {
            status(ty::MACHINE_SET_STATUS, id(s)).is_some_and(|st| {
                let st: MachineSetStatusSpec = spec_of(&st);
                st.ready && st.phase == MachineSetPhase::Running as i32
            })
        });
        let mut machines = Machines::default();
        let mut cp_healthy = 0;
        for node in self
            .store
            .list_labeled(ty::MACHINE_SET_NODE, l::CLUSTER, name)
        {
            machines.total += 1;
            machines.requested += 1;
            if self.machine_healthy(id(&node)) {
                machines.healthy += 1;
                machines.connected += 1;
                if meta(&node).labels.contains_key(l::ROLE_CONTROLPLANE) {
                    cp_healthy += 1;
                }
            }
        }
        let upgrades_done = status(ty::KUBERNETES_UPGRADE_STATUS, name).is_some_and(|r| {
            spec_of::<KubernetesUpgradeStatusSpec>(&r).phase
                == kubernetes_upgrade_status_spec::Phase::Done as i32
        }) && status(ty::TALOS_UPGRADE_STATUS, name).is_some_and(|r| {
            spec_of::<TalosUpgradeStatusSpec>(&r).phase
                == talos_upgrade_status_spec::Phase::Done as i32
        });
        let cp_ready = cp_healthy > 0;
        let ready = sets_ready && cp_ready && upgrades_done;
        self.set_spec::<LoadBalancerStatusSpec>(ty::LOAD_BALANCER_STATUS, name, |s| {
            s.healthy = cp_ready;
        });
        let embedded = spec
            .features
            .as_ref()
            .is_some_and(|f| f.use_embedded_discovery_service);
        self.set_spec::<ClusterStatusSpec>(ty::CLUSTER_STATUS, name, |s| {
            s.available = cp_ready;
            s.machines = Some(machines);
            s.phase = if ready {
                cluster_status_spec::Phase::Running
            } else {
                cluster_status_spec::Phase::ScalingUp
            } as i32;
            s.ready = ready;
            s.kubernetes_api_ready = cp_ready;
            s.controlplane_ready = cp_ready;
            s.has_connected_control_planes = cp_ready;
            s.use_embedded_discovery_service = embedded;
            s.talos_version = spec.talos_version.clone();
            s.kubernetes_version = spec.kubernetes_version.clone();
        });
        self.progress_manifests(name, cp_ready);
        hold.is_some_and(|(_, only_waiting)| only_waiting)
    }

    /// Omni applies a cluster's manifest groups once its Kubernetes API answers: until then
    /// every manifest is PENDING and counted out of sync (Omni itself writes nothing yet; the
    /// simulator shows what is waiting).
    ///
    /// Once it answers, the status follows Omni's ClusterManifestsStatus controller
    /// (`internal/backend/runtime/omni/controllers/omni/kubernetes/cluster_manifest_status.go`
    /// and `UpdateGroups`): a manifest is APPLIED once applied and stays so while it exists,
    /// even when a later apply fails; a new one is PENDING until an apply succeeds; one no
    /// longer declared (its group removed, or dropped from its group) is DELETING until the
    /// prune that removes it succeeds, except in one-time groups, which are never pruned. A
    /// group is APPLIED when all its manifests are, PROGRESSING otherwise, and DELETING once
    /// it is no longer declared. Totals count every manifest listed.
    fn progress_manifests(&self, cluster: &str, api_ready: bool) {
        use omni_client::proto::specs::KubernetesManifestGroupSpec;

        let mut error = self
            .manifest_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .cloned();
        let declared: BTreeMap<String, (i32, Vec<ManifestDocument>)> = self
            .store
            .list_labeled(ty::MANIFEST_GROUP, l::CLUSTER, cluster)
            .iter()
            .map(|group| {
                let spec: KubernetesManifestGroupSpec = spec_of(group);
                (
                    id(group).to_string(),
                    (spec.mode, manifest_documents(&spec.data)),
                )
            })
            .collect();
        let applied = manifest_status::Phase::Applied as i32;
        // Omni writes into the workload cluster once its API answers; a failed write is the
        // apply's error.
        if api_ready && error.is_none() {
            let groups: Vec<(bool, String)> = self
                .store
                .list_labeled(ty::MANIFEST_GROUP, l::CLUSTER, cluster)
                .iter()
                .map(|group| {
                    let spec: KubernetesManifestGroupSpec = spec_of(group);
                    (spec.mode == Mode::OneTime as i32, spec.data)
                })
                .collect();
            if let Err(e) = self.manifest_sync.sync(cluster, &groups) {
                error = Some(e);
            }
        }
        // An apply succeeds (and prunes) only with the API up and no error.
        let apply_succeeds = api_ready && error.is_none();
        self.set_spec::<ClusterKubernetesManifestsStatusSpec>(ty::MANIFESTS_STATUS, cluster, |s| {
            let previous = std::mem::take(&mut s.groups);
            let groups = next_manifest_groups(previous, declared, api_ready, apply_succeeds);
            let manifests = || groups.values().flat_map(|g| g.manifests.values());
            s.total = i32::try_from(manifests().count()).unwrap_or(i32::MAX);
            s.out_of_sync = i32::try_from(manifests().filter(|m| m.phase != applied).count())
                .unwrap_or(i32::MAX);
            s.groups = groups;
            s.last_error = error.clone().unwrap_or_default();
        });
    }

    /// A set being torn down: remove its nodes and statuses, then release the finalizer. When
    /// `destroy` (cluster cascade), the controller also destroys the set itself.
    fn machine_set_teardown(&self, set: &Resource, destroy: bool) {
        let set_id = id(set).to_string();
        self.set_spec::<MachineSetStatusSpec>(ty::MACHINE_SET_STATUS, &set_id, |s| {
            s.phase = MachineSetPhase::Destroying as i32;
            s.ready = false;
        });
        for node in self
            .store
            .list_labeled(ty::MACHINE_SET_NODE, l::MACHINE_SET, &set_id)
        {
            self.release_node(id(&node));
        }
        for cms in self
            .store
            .list_labeled(ty::CLUSTER_MACHINE_STATUS, l::MACHINE_SET, &set_id)
        {
            self.store
                .remove(DEFAULT_NS, ty::CLUSTER_MACHINE_STATUS, id(&cms));
        }
        self.store
            .remove(DEFAULT_NS, ty::MACHINE_SET_STATUS, &set_id);
        self.store
            .remove(DEFAULT_NS, ty::CONTROL_PLANE_STATUS, &set_id);
        self.drop_finalizer(ty::MACHINE_SET, &set_id, MACHINE_SET_FINALIZER);
        if destroy
            && let Some(s) = self.store.try_get(DEFAULT_NS, ty::MACHINE_SET, &set_id)
            && meta(&s).finalizers.is_empty()
        {
            self.store.remove(DEFAULT_NS, ty::MACHINE_SET, &set_id);
        }
    }

    fn teardown_as_controller(&self, r: &Resource) {
        if !tearing_down(r) {
            let (t, i) = (meta(r).r#type.clone(), id(r).to_string());
            self.store.modify(DEFAULT_NS, &t, &i, |r| {
                if let Some(m) = r.metadata.as_mut() {
                    m.phase = crate::store::PHASE_TEARING_DOWN.into();
                }
            });
        }
    }

    fn cluster_teardown(&self, cluster: &Resource) {
        let name = id(cluster).to_string();
        self.set_spec::<ClusterStatusSpec>(ty::CLUSTER_STATUS, &name, |s| {
            s.phase = cluster_status_spec::Phase::Destroying as i32;
            s.ready = false;
        });
        let sets = self.store.list_labeled(ty::MACHINE_SET, l::CLUSTER, &name);
        let (cps, workers): (Vec<_>, Vec<_>) = sets
            .into_iter()
            .partition(|s| meta(s).labels.contains_key(l::ROLE_CONTROLPLANE));
        // Workers first; the control plane only once every worker set is gone.
        let stage = if workers.is_empty() { cps } else { workers };
        for set in &stage {
            self.teardown_as_controller(set);
            if let Some(set) = self.store.try_get(DEFAULT_NS, ty::MACHINE_SET, id(set)) {
                self.machine_set_teardown(&set, true);
            }
        }
        for t in [
            ty::CONFIG_PATCH,
            ty::MANIFEST_GROUP,
            ty::EXTENSIONS_CONFIGURATION,
            ty::HEALTH_CHECK,
        ] {
            for r in self.store.list_labeled(t, l::CLUSTER, &name) {
                self.store.remove(DEFAULT_NS, t, id(&r));
            }
        }
        if !self
            .store
            .list_labeled(ty::MACHINE_SET, l::CLUSTER, &name)
            .is_empty()
        {
            return;
        }
        for node in self
            .store
            .list_labeled(ty::MACHINE_SET_NODE, l::CLUSTER, &name)
        {
            self.release_node(id(&node));
        }
        for cms in self
            .store
            .list_labeled(ty::CLUSTER_MACHINE_STATUS, l::CLUSTER, &name)
        {
            self.store
                .remove(DEFAULT_NS, ty::CLUSTER_MACHINE_STATUS, id(&cms));
        }
        for m in self
            .store
            .list_labeled(ty::MACHINE_STATUS, l::CLUSTER, &name)
        {
            self.set_machine_cluster(id(&m), None);
        }
        for status in self.health_check_status_list(&name) {
            self.store
                .remove(EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, id(&status));
        }
        for t in [
            ty::CLUSTER_STATUS,
            ty::MANIFESTS_STATUS,
            ty::CLUSTER_UUID,
            ty::CLUSTER_CONFIG_VERSION,
            ty::LOAD_BALANCER_STATUS,
            ty::KUBERNETES_UPGRADE_STATUS,
            ty::TALOS_UPGRADE_STATUS,
        ] {
            self.store.remove(DEFAULT_NS, t, &name);
        }
        self.drop_finalizer(ty::CLUSTER, &name, CLUSTER_FINALIZER);
    }

    /// Tearing down a SideroLink Link removes the machine from Omni.
    fn links(&self) {
        let leaving: Vec<String> = self.store.read(|v| {
            v.all(DEFAULT_NS, ty::LINK)
                .filter(|link| tearing_down(link))
                .map(|link| id(link).to_string())
                .collect()
        });
        for machine in leaving {
            self.removed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(machine.clone());
            self.store.remove(DEFAULT_NS, ty::MACHINE_STATUS, &machine);
            self.store
                .remove(DEFAULT_NS, ty::CLUSTER_MACHINE_STATUS, &machine);
            if let Some(node) = self
                .store
                .try_get(DEFAULT_NS, ty::MACHINE_SET_NODE, &machine)
                && meta(&node).owner == MSN_OWNER
            {
                self.store
                    .remove(DEFAULT_NS, ty::MACHINE_SET_NODE, &machine);
            }
        }
    }

    /// Statuses whose source is gone (e.g. a set destroyed by the client) are removed.
    fn orphans(&self) {
        // The kinds are walked by reference, only the orphans' IDs copied.
        let orphaned = |of: &str, source: &str| -> Vec<String> {
            self.store.read(|v| {
                v.all(DEFAULT_NS, of)
                    .filter(|st| v.get(DEFAULT_NS, source, id(st)).is_none())
                    .map(|st| id(st).to_string())
                    .collect()
            })
        };
        for set in orphaned(ty::MACHINE_SET_STATUS, ty::MACHINE_SET) {
            self.store.remove(DEFAULT_NS, ty::MACHINE_SET_STATUS, &set);
            self.store
                .remove(DEFAULT_NS, ty::CONTROL_PLANE_STATUS, &set);
        }
        for machine in orphaned(ty::CLUSTER_MACHINE_STATUS, ty::MACHINE_SET_NODE) {
            self.store
                .remove(DEFAULT_NS, ty::CLUSTER_MACHINE_STATUS, &machine);
            // Back to the pool, if the machine is still known.
            self.set_machine_cluster(&machine, None);
        }
    }
}

/// The namespace a health check's Job runs in: the manifest's own, else `default` (Omni's).
fn job_namespace(job: &str) -> String {
    serde_saphyr::from_str::<serde_json::Value>(job)
        .ok()
        .and_then(|v| {
            v.pointer("/metadata/namespace")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        })
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// Whether machine labels satisfy a MachineClass: any entry of `match_labels` may match; an
/// entry is a comma-separated list of terms (`key`, `!key`, `key=value`, `key==value`,
/// `key!=value`, `key in (a, b)`, `key notin (a, b)`) that must all hold.
pub(crate) fn class_matches(
    match_labels: &[String],
    labels: &std::collections::HashMap<String, String>,
) -> bool {
    match_labels.iter().any(|sel| {
        split_terms(sel)
            .iter()
            .all(|term| term_matches(term.trim(), labels))
    })
}

fn split_terms(sel: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in sel.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter().filter(|t| !t.trim().is_empty()).collect()
}

fn term_matches(term: &str, labels: &std::collections::HashMap<String, String>) -> bool {
    let set = |rest: &str| -> Vec<String> {
        rest.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(|s| s.trim().to_string())
            .collect()
    };
    if let Some(key) = term.strip_prefix('!') {
        return !labels.contains_key(key.trim());
    }
    if let Some((k, v)) = term.split_once("!=") {
        return labels.get(k.trim()).is_none_or(|x| x != v.trim());
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return labels.get(k.trim()).is_some_and(|x| x == v.trim());
    }
    if let Some((k, rest)) = term.split_once(" notin ") {
        return labels.get(k.trim()).is_none_or(|x| !set(rest).contains(x));
    }
    if let Some((k, rest)) = term.split_once(" in ") {
        return labels.get(k.trim()).is_some_and(|x| set(rest).contains(x));
    }
    labels.contains_key(term)
}

#[cfg(test)]
mod tests {
    use super::class_matches;

    fn labels(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn machine_class_selectors() {
        let l = labels(&[("arch", "amd64"), ("gpu", "")]);
        let m = |sel: &[&str]| {
            class_matches(&sel.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &l)
        };
        assert!(m(&["arch = amd64"]));
        assert!(m(&["arch==amd64, gpu"]));
        assert!(!m(&["arch = arm64"]));
        assert!(m(&["arch = arm64", "gpu"]), "entries are OR-ed");
        assert!(!m(&["arch = amd64, !gpu"]), "terms are AND-ed");
        assert!(m(&["arch in (arm64, amd64)"]));
        assert!(!m(&["arch notin (amd64)"]));
        assert!(m(&["zone != eu"]));
        assert!(!m(&[]));
    }
}

#[cfg(test)]
mod dirty_tracking {
    use std::sync::Arc;

    use omni_client::proto::specs::{
        ClusterSpec, KubernetesUpgradeStatusSpec, MachineSetNodeSpec, MachineSetSpec,
        kubernetes_upgrade_status_spec,
    };

    use super::{ControllerConfig, Controllers};
    use crate::store::{Store, decode_spec, resource};
    use crate::types::{DEFAULT_NS, label as l, ty};

    fn cluster_spec(kubernetes: &str) -> ClusterSpec {
        ClusterSpec {
            talos_version: "1.9.0".into(),
            kubernetes_version: kubernetes.into(),
            ..Default::default()
        }
    }

    /// Progress passes until one changes nothing (bounded: the fleet has one short chain).
    fn settle(controllers: &Controllers, store: &Store) {
        for _ in 0..50 {
            let before = store.revision();
            controllers.reconcile(true);
            if store.revision() == before {
                return;
            }
        }
        panic!("the simulator never settled");
    }

    fn upgrade(store: &Store) -> KubernetesUpgradeStatusSpec {
        decode_spec(
            &store
                .try_get(DEFAULT_NS, ty::KUBERNETES_UPGRADE_STATUS, "c1")
                .expect("upgrade status"),
        )
        .expect("spec")
    }

    #[test]
    fn a_settled_cluster_still_follows_a_later_change() {
        let store = Arc::new(Store::new(Arc::new(crate::clock::SystemClock)));
        let controllers = Controllers::new(
            store.clone(),
            ControllerConfig {
                auto_register_machines: true,
                ..ControllerConfig::default()
            },
        );
        store.put(resource(
            ty::CLUSTER,
            "c1",
            "",
            Vec::new(),
            &cluster_spec("1.31.0"),
        ));
        let cluster_label = vec![(l::CLUSTER.to_string(), "c1".to_string())];
        let mut set_labels = cluster_label.clone();
        set_labels.push((l::ROLE_CONTROLPLANE.to_string(), String::new()));
        store.put(resource(
            ty::MACHINE_SET,
            "c1-control-planes",
            "",
            set_labels.clone(),
            &MachineSetSpec::default(),
        ));
        set_labels.push((l::MACHINE_SET.to_string(), "c1-control-planes".to_string()));
        store.put(resource(
            ty::MACHINE_SET_NODE,
            "m1",
            "",
            set_labels,
            &MachineSetNodeSpec::default(),
        ));
        settle(&controllers, &store);
        assert_eq!(
            upgrade(&store).phase,
            kubernetes_upgrade_status_spec::Phase::Done as i32
        );
        // Settled: further ticks change nothing ...
        let idle = store.revision();
        controllers.reconcile(true);
        assert_eq!(store.revision(), idle);
        // ... until the cluster changes: the upgrade runs through to the new version.
        store.put(resource(
            ty::CLUSTER,
            "c1",
            "",
            Vec::new(),
            &cluster_spec("1.32.0"),
        ));
        settle(&controllers, &store);
        let done = upgrade(&store);
        assert_eq!(
            done.phase,
            kubernetes_upgrade_status_spec::Phase::Done as i32
        );
        assert_eq!(done.last_upgrade_version, "1.32.0");
    }

    #[test]
    fn a_machine_joining_a_cluster_concerns_that_cluster_and_leaving_concerns_all() {
        use super::{Touched, touched_cluster};
        use crate::store::StoreEvent;

        let machine = |cluster: Option<&str>, disconnected: bool| {
            let mut lbls = vec![("role".to_string(), "worker".to_string())];
            lbls.extend(cluster.map(|c| (l::CLUSTER.to_string(), c.to_string())));
            if disconnected {
                lbls.push((l::DISCONNECTED.to_string(), String::new()));
            }
            resource(
                ty::MACHINE_STATUS,
                "m1",
                "",
                lbls,
                &omni_client::proto::specs::MachineStatusSpec::default(),
            )
        };
        let touched = |old, new| match touched_cluster(&StoreEvent::Updated { old, new }) {
            Touched::Clusters(names) => Some(names.iter().map(|n| n.to_string()).collect()),
            Touched::Shared => None::<Vec<String>>,
        };
        assert_eq!(
            touched(machine(None, false), machine(Some("c1"), false)),
            Some(vec!["c1".to_string()])
        );
        assert_eq!(
            touched(machine(Some("c1"), false), machine(Some("c2"), false)),
            Some(vec!["c2".to_string(), "c1".to_string()])
        );
        // A machine back in the pool, or one whose other labels change, may serve any cluster.
        assert_eq!(
            touched(machine(Some("c1"), false), machine(None, false)),
            None
        );
        assert_eq!(
            touched(machine(Some("c1"), false), machine(Some("c1"), true)),
            None
        );
    }

    #[test]
    fn a_change_pass_does_the_structural_work_of_the_cluster_it_touched() {
        let store = Arc::new(Store::new(Arc::new(crate::clock::SystemClock)));
        let controllers = Controllers::new(store.clone(), ControllerConfig::default());
        for name in ["c1", "c2"] {
            store.put(resource(
                ty::CLUSTER,
                name,
                "",
                Vec::new(),
                &cluster_spec("1.31.0"),
            ));
        }
        settle(&controllers, &store);
        store.put(resource(
            ty::MACHINE_SET,
            "c2-workers",
            "",
            vec![(l::CLUSTER.to_string(), "c2".to_string())],
            &MachineSetSpec::default(),
        ));
        // A pass on the change alone (no progression) creates the new set's status.
        controllers.reconcile(false);
        assert!(
            store
                .try_get(DEFAULT_NS, ty::MACHINE_SET_STATUS, "c2-workers")
                .is_some()
        );
        // Its removal leaves the status an orphan, which the next change pass removes.
        store.remove(DEFAULT_NS, ty::MACHINE_SET, "c2-workers");
        controllers.reconcile(false);
        assert!(
            store
                .try_get(DEFAULT_NS, ty::MACHINE_SET_STATUS, "c2-workers")
                .is_none()
        );
    }

    #[test]
    fn a_failing_health_check_holds_a_talos_upgrade_until_it_passes() {
        use omni_client::proto::specs::{
            KubernetesHealthCheckSpec, KubernetesHealthCheckStatusSpec, TalosUpgradeStatusSpec,
            kubernetes_health_check_status_spec::State, talos_upgrade_status_spec,
        };

        use super::HealthCheckOutcome;
        use crate::types::EPHEMERAL_NS;

        let store = Arc::new(Store::new(Arc::new(crate::clock::SystemClock)));
        let controllers = Controllers::new(
            store.clone(),
            ControllerConfig {
                auto_register_machines: true,
                ..ControllerConfig::default()
            },
        );
        let cluster_label = vec![(l::CLUSTER.to_string(), "c1".to_string())];
        store.put(resource(
            ty::CLUSTER,
            "c1",
            "",
            Vec::new(),
            &cluster_spec("1.31.0"),
        ));
        store.put(resource(
            ty::HEALTH_CHECK,
            "cluster-c1-dns",
            "",
            cluster_label,
            &KubernetesHealthCheckSpec {
                job: "apiVersion: batch/v1\nkind: Job\n".into(),
                // Shorter than Omni allows, so the test need not wait 5s for the re-run.
                interval: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 200_000_000,
                }),
            },
        ));
        settle(&controllers, &store);
        let status = || -> Option<KubernetesHealthCheckStatusSpec> {
            store
                .try_get(EPHEMERAL_NS, ty::HEALTH_CHECK_STATUS, "cluster-c1-dns")
                .map(|r| decode_spec(&r).expect("spec"))
        };
        let talos = || -> TalosUpgradeStatusSpec {
            decode_spec(
                &store
                    .try_get(DEFAULT_NS, ty::TALOS_UPGRADE_STATUS, "c1")
                    .expect("talos upgrade status"),
            )
            .expect("spec")
        };
        // Installing the cluster is no upgrade: no check ran.
        assert_eq!(status(), None);
        assert_eq!(talos().phase, talos_upgrade_status_spec::Phase::Done as i32);

        controllers.set_health_check_outcome(
            "cluster-c1-dns",
            HealthCheckOutcome::Fail {
                error: "job failed".into(),
                output: "no answer".into(),
            },
        );
        let mut upgraded = cluster_spec("1.31.0");
        upgraded.talos_version = "1.9.1".into();
        store.put(resource(ty::CLUSTER, "c1", "", Vec::new(), &upgraded));
        settle(&controllers, &store);
        let failed = status().expect("status");
        assert_eq!(failed.state, State::Failed as i32);
        assert_eq!(
            (failed.error.as_str(), failed.output.as_str()),
            ("job failed", "no answer")
        );
        assert_eq!(
            (failed.job_namespace.as_str(), failed.job_name.as_str()),
            ("default", "omni-healthcheck-cluster-c1-dns")
        );
        let held = talos();
        assert_eq!(
            held.phase,
            talos_upgrade_status_spec::Phase::Upgrading as i32
        );
        assert_eq!(
            held.step,
            "waiting for healthchecks to pass: \"cluster-c1-dns\": job failed"
        );

        controllers.set_health_check_outcome("cluster-c1-dns", HealthCheckOutcome::Pass);
        std::thread::sleep(std::time::Duration::from_millis(250));
        settle(&controllers, &store);
        let passed = status().expect("status");
        assert_eq!(passed.state, State::Passed as i32);
        assert_eq!(passed.error, "");
        let done = talos();
        assert_eq!(
            (done.phase, done.last_upgrade_version.as_str()),
            (talos_upgrade_status_spec::Phase::Done as i32, "1.9.1")
        );

        // Removing the check removes its status.
        store.remove(DEFAULT_NS, ty::HEALTH_CHECK, "cluster-c1-dns");
        settle(&controllers, &store);
        assert_eq!(status(), None);
    }
}
