//! The cluster's children: the caches of OmniControlPlanes, OmniWorkers and OmniMachines the
//! controller reads them from, and which clusters a changed child re-renders.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use kube::api::ListParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource as _, ResourceExt};

use super::failure::ClusterFailure;
use crate::api::{OmniCluster, OmniControlPlane, OmniMachine, OmniWorkers};
use crate::controllers::children::Child;
use crate::controllers::shared::context::Context;
use crate::controllers::shared::decoded::{Cached, cached_ref};
use crate::controllers::shared::error::Error;
use crate::controllers::shared::index::{RefIndex, RefKey, namespace_of};

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

/// The index key of the OmniClusters that read the status of Omni cluster `omni_name` through
/// the OmniConnection `connection` of `namespace`.
pub(super) fn omni_status_key(namespace: &str, connection: &str, omni_name: &str) -> RefKey {
    // Omni cluster names hold only letters, digits, `-` and `_`; connection names no `/`.
    RefKey::new(
        "omni-status",
        namespace,
        &format!("{connection}/{omni_name}"),
    )
}

/// What a cluster refers to: its connection, its cluster in that connection's Omni (whose status
/// changes wake it), and the children its last render used (listed in its status), so a child
/// moved to another cluster finds the cluster it left.
pub(super) fn cluster_keys(cluster: &OmniCluster) -> Vec<RefKey> {
    let ns = namespace_of(cluster);
    let connection = &cluster.spec.connection_ref.name;
    let mut keys = vec![
        RefKey::new("connection", &ns, connection),
        omni_status_key(&ns, connection, &cluster.effective_cluster_name()),
    ];
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

/// The mapper of a watch of child kind `K`: a changed child re-renders [`child_targets`] (an
/// undecodable one, whose cluster is unknown, the clusters that rendered it).
pub(super) fn child_mapper<K: Child>(
    clusters: Arc<RefIndex<OmniCluster>>,
    kind: ChildKind,
) -> impl Fn(Cached<K>) -> Vec<ObjectRef<Cached<OmniCluster>>> + Send + Sync + 'static {
    move |child: Cached<K>| {
        let name = child.name_any();
        child_targets(
            &clusters,
            child.namespace(),
            child.decoded().map_or("", Child::cluster_ref),
            &name,
            kind,
        )
    }
}

/// How long a reconcile waits for the child caches' first list. A watch that cannot list its
/// kind (a role without `list` or `watch` on it) never fills its cache: waiting without bound
/// hung every cluster's reconcile with nothing in its status.
pub(crate) const CHILD_CACHE_WAIT: Duration = Duration::from_secs(5);

/// The caches of OmniControlPlanes, OmniWorkers and OmniMachines the cluster controller reads:
/// each kind's one shared cache, which its own controller reads too. Each reconcile used to
/// list all three kinds of its namespace: with every cluster reconciling at once in a cold
/// start, that held clusters × children objects in memory (20 GiB at 1,000 clusters,
/// omni-bench).
pub(crate) struct ChildCaches {
    pub(super) control_planes: Store<Cached<OmniControlPlane>>,
    pub(super) workers: Store<Cached<OmniWorkers>>,
    pub(super) machines: Store<Cached<OmniMachine>>,
}

/// The children of one cluster, as [`crate::domain::render::render`] takes them.
pub(super) struct Children {
    pub(super) control_planes: Vec<OmniControlPlane>,
    pub(super) workers: Vec<OmniWorkers>,
    pub(super) machines: Vec<OmniMachine>,
}

/// The children of `cluster` (what `render::render` selects), from the shared caches `c` once
/// they are filled, or listed when their watches stopped (the controller is stopping). A cache
/// not filled within [`CHILD_CACHE_WAIT`] fails the reconcile naming its kind
/// ([`ClusterFailure::ChildCacheNotReady`]), and so does a child of the namespace that does not
/// decode ([`ClusterFailure::UnreadableChild`]); `Err` is a failed list.
pub(super) async fn children_of(
    ctx: &Context,
    c: &ChildCaches,
    cluster: &OmniCluster,
) -> Result<Result<Children, ClusterFailure>, Error> {
    // A cache still listing would render the cluster without children it has.
    match c.readiness(CHILD_CACHE_WAIT).await {
        Readiness::Ready => {
            return Ok((|| {
                Ok(Children {
                    control_planes: cached_of(cluster, c.control_planes.state())?,
                    workers: cached_of(cluster, c.workers.state())?,
                    machines: cached_of(cluster, c.machines.state())?,
                })
            })());
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

/// The children of kind `K` among `cached` that `cluster` renders: the same namespace and a
/// `clusterRef` naming it. One of its namespace that does not decode fails the render.
fn cached_of<K: Child>(
    cluster: &OmniCluster,
    cached: Vec<Arc<Cached<K>>>,
) -> Result<Vec<K>, ClusterFailure> {
    let mut mine = Vec::new();
    for child in cached {
        if child.meta().namespace != cluster.metadata.namespace {
            continue;
        }
        match child.as_ref() {
            Cached::Decoded(c) if Some(c.cluster_ref()) == cluster.metadata.name.as_deref() => {
                mine.push(c.as_ref().clone());
            }
            Cached::Decoded(_) => {}
            Cached::Undecodable(bad) => {
                return Err(ClusterFailure::UnreadableChild {
                    kind: K::kind(&()).into_owned(),
                    name: child.name_any(),
                    error: bad.error().to_owned(),
                });
            }
        }
    }
    Ok(mine)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cluster::OmniClusterStatus;
    use kube::runtime::watcher;
    use serde::Deserialize as _;

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
        let (control_planes, mut cp_writer) = store::<Cached<OmniControlPlane>>();
        let (workers, mut workers_writer) = store::<Cached<OmniWorkers>>();
        let (machines, mut machines_writer) = store::<Cached<OmniMachine>>();
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

    fn workers(
        name: &str,
        namespace: &str,
        cluster: serde_json::Value,
    ) -> Arc<Cached<OmniWorkers>> {
        let cached = Cached::<OmniWorkers>::deserialize(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniWorkers",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterRef": {"name": cluster}, "machineClass": {"name": "c", "size": 1}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Arc::new(cached)
    }

    #[test]
    fn a_cluster_renders_the_decoded_children_naming_it_in_its_namespace() {
        let cluster = cluster_object("prod", OmniClusterStatus::default());
        let Some(cluster) = cluster.decoded() else {
            panic!("the fixture decodes");
        };
        let cached = vec![
            workers("mine", "ns", "prod".into()),
            workers("theirs", "ns", "staging".into()),
            workers("elsewhere", "other", "prod".into()),
        ];
        let mine = cached_of(cluster, cached).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = mine.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["mine"]);
    }

    /// Rendering without a child that does not decode could drop its machines from Omni: its
    /// cluster is unknown, so every cluster of its namespace waits, naming it.
    #[test]
    fn an_undecodable_child_of_the_namespace_holds_the_render_and_is_named() {
        let cluster = cluster_object("prod", OmniClusterStatus::default());
        let Some(cluster) = cluster.decoded() else {
            panic!("the fixture decodes");
        };
        let bad = workers("broken", "ns", serde_json::json!(7));
        assert!(bad.decoded().is_none(), "a number is no cluster name");
        let failure = cached_of(cluster, vec![workers("mine", "ns", "prod".into()), bad])
            .err()
            .unwrap_or_else(|| panic!("rendered without an undecodable child"));
        let message = failure.to_string();
        assert!(
            message.starts_with(r#"OmniWorkers "broken" in this namespace cannot be read"#),
            "{message}"
        );
        assert!(
            cached_of(
                cluster,
                vec![workers("broken", "other", serde_json::json!(7))]
            )
            .is_ok(),
            "another namespace's children are not this cluster's"
        );
    }
}
