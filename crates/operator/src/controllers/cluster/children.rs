//! The cluster's children: the caches of OmniControlPlanes, OmniWorkers and OmniMachines the
//! controller reads them from, and which clusters a changed child re-renders.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::failure::ClusterFailure;
use crate::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};
use crate::controllers::children::Child;
use crate::controllers::index::{RefIndex, RefKey, namespace_of};
use crate::controllers::{Cached, Context, Error, cached_ref};

/// Which child list of a cluster's status a child kind appears in.
#[derive(Clone, Copy)]
pub(super) enum ChildKind {
    ControlPlane,
    Workers,
    Machine,
}

impl ChildKind {
    /// The index key of a child of this kind named `name` in `namespace`, under which the
    /// clusters that rendered it are found.
    fn key(self, namespace: &str, name: &str) -> RefKey {
        let what = match self {
            ChildKind::ControlPlane => "rendered-control-plane",
            ChildKind::Workers => "rendered-workers",
            ChildKind::Machine => "rendered-machine",
        };
        RefKey::new(what, namespace, name)
    }
}

/// What a cluster refers to: its connection, and the children its last render used (listed in
/// its status), so a child moved to another cluster finds the cluster it left.
pub(super) fn cluster_keys(cluster: &OmniCluster) -> Vec<RefKey> {
    let ns = namespace_of(cluster);
    let mut keys = vec![RefKey::new(
        "connection",
        &ns,
        &cluster.spec.connection_ref.name,
    )];
    if let Some(s) = &cluster.status {
        keys.extend(
            s.control_plane_ref
                .iter()
                .map(|n| ChildKind::ControlPlane.key(&ns, n)),
        );
        keys.extend(
            s.workers_refs
                .iter()
                .map(|n| ChildKind::Workers.key(&ns, n)),
        );
        keys.extend(
            s.machine_refs
                .iter()
                .map(|n| ChildKind::Machine.key(&ns, n)),
        );
    }
    keys
}

/// Clusters to re-render after a change to a child: the one it references now and any that
/// rendered it before. Watches only see the new object, so a child moved to another cluster
/// would otherwise linger in its old cluster's template until the next resync.
pub(super) fn child_targets(
    clusters: &RefIndex<OmniCluster>,
    namespace: Option<String>,
    cluster_ref: &str,
    child: &str,
    kind: ChildKind,
) -> Vec<ObjectRef<Cached<OmniCluster>>> {
    let ns = namespace.unwrap_or_default();
    let current = (!cluster_ref.is_empty()).then(|| {
        cached_ref::<OmniCluster>(cluster_ref, Some(ns.as_str()).filter(|n| !n.is_empty()))
    });
    let rendered = clusters
        .get(&kind.key(&ns, child))
        .into_iter()
        .filter(|r| r.name != cluster_ref);
    current.into_iter().chain(rendered).collect()
}

/// The mapper of a watch of child kind `K`: a changed child re-renders [`child_targets`].
pub(super) fn child_mapper<K: Child>(
    clusters: Arc<RefIndex<OmniCluster>>,
    kind: ChildKind,
) -> impl Fn(K) -> Vec<ObjectRef<Cached<OmniCluster>>> + Send + Sync + 'static {
    move |child: K| {
        let name = child.name_any();
        child_targets(
            &clusters,
            child.namespace(),
            child.cluster_ref(),
            &name,
            kind,
        )
    }
}

/// How long a reconcile waits for the child caches' first list. A watch that cannot list its
/// kind (a role without `list` or `watch` on it) never fills its cache: waiting without bound
/// hung every cluster's reconcile with nothing in its status.
pub(crate) const CHILD_CACHE_WAIT: Duration = Duration::from_secs(5);

/// The cluster controller's caches of OmniControlPlanes, OmniWorkers and OmniMachines, filled
/// by the same watches that wake it when a child changes. Each reconcile used to list all
/// three kinds of its namespace: with every cluster reconciling at once in a cold start, that
/// held clusters × children objects in memory (20 GiB at 1,000 clusters, omni-bench).
#[derive(Clone)]
pub(crate) struct ChildCaches {
    pub(super) control_planes: Store<OmniControlPlane>,
    pub(super) workers: Store<OmniWorkers>,
    pub(super) machines: Store<OmniMachine>,
}

/// The children of one cluster, as [`crate::render::render`] takes them.
pub(super) struct Children {
    pub(super) control_planes: Vec<OmniControlPlane>,
    pub(super) workers: Vec<OmniWorkers>,
    pub(super) machines: Vec<OmniMachine>,
}

/// The children of `cluster` (what `render::render` selects), from the controller's caches
/// once they are filled, or listed when the controller's watches are not running. A cache not
/// filled within [`CHILD_CACHE_WAIT`] fails the reconcile naming its kind
/// ([`ClusterFailure::ChildCacheNotReady`]); `Err` is a failed list.
pub(super) async fn children_of(
    ctx: &Context,
    cluster: &OmniCluster,
) -> Result<Result<Children, ClusterFailure>, Error> {
    // The selection render::render makes: same namespace, clusterRef naming this cluster.
    fn mine<K: Child>(cluster: &OmniCluster, all: Vec<Arc<K>>) -> Vec<K> {
        all.into_iter()
            .filter(|c| {
                c.meta().namespace == cluster.metadata.namespace
                    && Some(c.cluster_ref()) == cluster.metadata.name.as_deref()
            })
            .map(|c| c.as_ref().clone())
            .collect()
    }
    let caches = ctx.cluster_children.read().ok().and_then(|c| c.clone());
    if let Some(c) = caches {
        // A cache still listing would render the cluster without children it has.
        match c.readiness(CHILD_CACHE_WAIT).await {
            Readiness::Ready => {
                return Ok(Ok(Children {
                    control_planes: mine(cluster, c.control_planes.state()),
                    workers: mine(cluster, c.workers.state()),
                    machines: mine(cluster, c.machines.state()),
                }));
            }
            Readiness::NotFilled(kinds) => {
                return Ok(Err(ClusterFailure::ChildCacheNotReady {
                    kinds,
                    waited: CHILD_CACHE_WAIT,
                }));
            }
            // The controller is stopping: its watches no longer fill the caches.
            Readiness::Stopped => {}
        }
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let lp = ListParams::default();
    Ok(Ok(Children {
        control_planes: ctx
            .api::<OmniControlPlane>(&namespace)
            .list(&lp)
            .await?
            .items,
        workers: ctx.api::<OmniWorkers>(&namespace).list(&lp).await?.items,
        machines: ctx.api::<OmniMachine>(&namespace).list(&lp).await?.items,
    }))
}

/// Whether the child caches have completed their first list.
#[derive(Debug, PartialEq, Eq)]
enum Readiness {
    Ready,
    /// These kinds (plural) were not listed within [`CHILD_CACHE_WAIT`].
    NotFilled(Vec<&'static str>),
    /// A cache's watch is gone.
    Stopped,
}

impl ChildCaches {
    /// Waits, at most `wait` in all, for every cache's first list.
    async fn readiness(&self, wait: Duration) -> Readiness {
        let deadline = tokio::time::Instant::now() + wait;
        let waits = [
            (
                "OmniControlPlanes",
                self.control_planes.wait_until_ready().boxed(),
            ),
            ("OmniWorkers", self.workers.wait_until_ready().boxed()),
            ("OmniMachines", self.machines.wait_until_ready().boxed()),
        ];
        let mut not_filled = Vec::new();
        for (kind, wait) in waits {
            match tokio::time::timeout_at(deadline, wait).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Readiness::Stopped,
                Err(_) => not_filled.push(kind),
            }
        }
        if not_filled.is_empty() {
            Readiness::Ready
        } else {
            Readiness::NotFilled(not_filled)
        }
    }
}

/// A watch of child kind `K` that fills `writer` as it goes.
pub(super) fn cached_children<K: Child>(
    ctx: &Context,
    writer: kube::runtime::reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    use kube::runtime::WatchStreamExt as _;
    watcher(ctx.watch_api::<K>(), watcher::Config::default())
        .default_backoff()
        .modify(crate::controllers::strip_for_cache)
        .reflect(writer)
        .touched_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cluster::OmniClusterStatus;

    fn cluster_object(name: &str, status: OmniClusterStatus) -> Cached<OmniCluster> {
        let mut obj: OmniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"connectionRef": {"name": "omni"},
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        obj.status = Some(status);
        Cached::new(obj)
    }

    #[test]
    fn a_moved_child_re_renders_its_new_and_its_previous_cluster() {
        let index = RefIndex::new(cluster_keys);
        let old = OmniClusterStatus {
            control_plane_ref: Some("cp".into()),
            workers_refs: vec!["w1".into(), "w2".into()],
            machine_refs: vec!["m".into()],
            ..OmniClusterStatus::default()
        };
        index.apply(&kube::runtime::watcher::Event::Apply(cluster_object(
            "old", old,
        )));
        index.apply(&kube::runtime::watcher::Event::Apply(cluster_object(
            "new",
            OmniClusterStatus::default(),
        )));
        let targets = |child: &str, kind: ChildKind| -> Vec<String> {
            let mut names: Vec<String> =
                child_targets(&index, Some("ns".into()), "new", child, kind)
                    .into_iter()
                    .map(|r| r.name)
                    .collect();
            names.sort();
            names
        };
        assert_eq!(targets("cp", ChildKind::ControlPlane), ["new", "old"]);
        assert_eq!(targets("w2", ChildKind::Workers), ["new", "old"]);
        assert_eq!(targets("m", ChildKind::Machine), ["new", "old"]);
        assert_eq!(
            targets("cp", ChildKind::Workers),
            ["new"],
            "a control plane name is no workers name"
        );
        assert_eq!(targets("w1", ChildKind::Machine), ["new"]);
    }

    /// A cache whose first list never completes is named after the bounded wait, instead of
    /// holding the reconcile forever.
    #[tokio::test]
    async fn the_wait_for_the_child_caches_is_bounded_and_names_the_unfilled_kinds() {
        use kube::runtime::reflector::store;
        let (control_planes, mut cp_writer) = store::<OmniControlPlane>();
        let (workers, mut workers_writer) = store::<OmniWorkers>();
        let (machines, mut machines_writer) = store::<OmniMachine>();
        let caches = ChildCaches {
            control_planes,
            workers,
            machines,
        };
        let short = Duration::from_millis(20);
        cp_writer.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(
            caches.readiness(short).await,
            Readiness::NotFilled(vec!["OmniWorkers", "OmniMachines"])
        );
        workers_writer.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(
            caches.readiness(short).await,
            Readiness::NotFilled(vec!["OmniMachines"])
        );
        machines_writer.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(caches.readiness(short).await, Readiness::Ready);
    }
}
