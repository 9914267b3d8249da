//! Omni's status resources of every cluster, kept current by watches instead of read on every
//! look: one kind watch per status type ([`STATUS_TYPES`]) on one client's connection, so a
//! cluster's health costs no call to Omni and a change of it is known when it happens.
//!
//! A [`StatusWatch`] remembers what its reader last read of each cluster (its fingerprint) and
//! tells it, through the callback given at [`StatusWatch::start`], about every cluster whose
//! health no longer matches: after each change while the watches are live, and after every
//! (re)start of the watches for what changed while they were down. Clusters nobody read are
//! kept but never announced. A read and the comparison of a change happen under one lock, so a
//! change is either seen by the read or announced after it.
//!
//! When a watch fails (Omni unreachable, an `ERRORED` event after a buffer overrun, a role that
//! may not watch every cluster) the cache stops answering ([`StatusWatch::read`] gives `None`,
//! so callers read from Omni directly) and the watches are opened again after a backoff.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::time::Instant;

use super::status::{ClusterHealth, Keyed, STATUS_TYPES, StatusError, StatusResources, health_of};
use super::translate::{NAMESPACE, keys};
use crate::proto::cosi::resource::Resource;
use crate::state::{State, StateError, WatchEvent, WatchTarget};

/// First wait before the watches are opened again after a failure; doubled per failure.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between attempts.
const MAX_RETRY: Duration = Duration::from_secs(60);
/// Watches that stayed up this long start the next failure's backoff from the beginning.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// What is told about a cluster whose health changed: its name in Omni.
pub type OnChange = Box<dyn Fn(&str) + Send + Sync>;

/// The status resources of every cluster in one Omni, kept by watches on a client's connection.
/// Watches for as long as it exists; dropping it ends the watches.
pub struct StatusWatch {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

impl std::fmt::Debug for StatusWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWatch")
            .field("live", &self.is_live())
            .finish_non_exhaustive()
    }
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    cache: Mutex<Cache>,
    on_change: OnChange,
}

impl StatusWatch {
    /// Starts watching on `client`'s connection (on the current Tokio runtime); `on_change` is
    /// called with the name of each cluster whose health differs from what was last read of it.
    pub fn start(client: &crate::Client, on_change: OnChange) -> Self {
        let shared = Arc::new(Shared {
            cache: Mutex::new(Cache::default()),
            on_change,
        });
        let task = tokio::spawn(run(shared.clone(), client.state())).abort_handle();
        Self { shared, task }
    }

    /// Whether every status type has been listed and is being watched, so reads answer.
    pub fn is_live(&self) -> bool {
        self.shared.lock().live
    }

    /// The health of `cluster` from the watched resources, remembered as read; `None` while the
    /// watches are not live (read from Omni then, and [`note_read`](Self::note_read) it).
    pub fn read(&self, cluster: &str) -> Option<Result<ClusterHealth, StatusError>> {
        let mut cache = self.shared.lock();
        if !cache.live {
            return None;
        }
        let health = health_of(cluster, &cache.resources.of(cluster));
        cache.remember(cluster, fingerprint(&health));
        Some(health)
    }

    /// Remembers `health`, read from Omni directly, as what was last read of `cluster`: once the
    /// watches are live, a difference is announced.
    pub fn note_read(&self, cluster: &str, health: &Result<ClusterHealth, StatusError>) {
        self.shared.lock().remember(cluster, fingerprint(health));
    }

    /// Stops announcing changes of `cluster` (its reader is gone).
    pub fn forget(&self, cluster: &str) {
        self.shared.lock().read.remove(cluster);
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn announce(&self, clusters: Vec<String>) {
        for cluster in clusters {
            (self.on_change)(&cluster);
        }
    }
}

/// What was read of a cluster, and the last change announced for it since.
#[derive(Debug, Clone, Copy)]
struct Seen {
    read: u64,
    announced: Option<u64>,
}

#[derive(Default)]
struct Cache {
    live: bool,
    resources: Resources,
    read: HashMap<String, Seen>,
}

impl Cache {
    fn remember(&mut self, cluster: &str, read: u64) {
        self.read.insert(
            cluster.to_owned(),
            Seen {
                read,
                announced: None,
            },
        );
    }

    /// The clusters among `clusters` whose health differs from what was read of them and was
    /// not announced yet; marks them announced.
    fn changed<'a>(&mut self, clusters: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut out = Vec::new();
        for cluster in clusters {
            let Some(seen) = self.read.get(cluster).copied() else {
                continue;
            };
            let now = fingerprint(&health_of(cluster, &self.resources.of(cluster)));
            if now != seen.read && seen.announced != Some(now) {
                self.read.insert(
                    cluster.to_owned(),
                    Seen {
                        announced: Some(now),
                        ..seen
                    },
                );
                out.push(cluster.to_owned());
            }
        }
        out
    }
}

/// A fingerprint of a health read: equal for equal health, and for equal failures.
fn fingerprint(health: &Result<ClusterHealth, StatusError>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match health {
        Ok(health) => health.hash(&mut h),
        Err(e) => e.to_string().hash(&mut h),
    }
    h.finish()
}

/// One status type's resources by ID, and by cluster for the types listed by label.
#[derive(Default)]
struct Kind {
    by_id: BTreeMap<String, Resource>,
    by_cluster: HashMap<String, BTreeSet<String>>,
}

/// The resources of every status type, in [`STATUS_TYPES`] order.
#[derive(Default)]
struct Resources([Kind; STATUS_TYPES.len()]);

fn id_of(r: &Resource) -> &str {
    r.metadata
        .as_ref()
        .map(|m| m.id.as_str())
        .unwrap_or_default()
}

fn cluster_label(r: &Resource) -> Option<&str> {
    r.metadata
        .as_ref()
        .and_then(|m| m.labels.get(keys::CLUSTER))
        .map(String::as_str)
}

impl Resources {
    /// The cluster a resource of type `index` belongs to.
    fn cluster_of(index: usize, r: &Resource) -> Option<&str> {
        match STATUS_TYPES[index].1 {
            Keyed::ById => Some(id_of(r)),
            Keyed::ByLabel(_) => cluster_label(r),
        }
    }

    /// Stores `r` (created or updated); the clusters whose resources changed.
    fn put(&mut self, index: usize, r: Resource) -> Vec<String> {
        let mut touched = self.remove(index, id_of(&r));
        let kind = &mut self.0[index];
        if let (Keyed::ByLabel(_), Some(cluster)) =
            (STATUS_TYPES[index].1, Self::cluster_of(index, &r))
        {
            kind.by_cluster
                .entry(cluster.to_owned())
                .or_default()
                .insert(id_of(&r).to_owned());
        }
        if let Some(cluster) = Self::cluster_of(index, &r) {
            touched.push(cluster.to_owned());
        }
        kind.by_id.insert(id_of(&r).to_owned(), r);
        touched
    }

    /// Drops the resource `id` of type `index`; the cluster it belonged to.
    fn remove(&mut self, index: usize, id: &str) -> Vec<String> {
        let kind = &mut self.0[index];
        let Some(old) = kind.by_id.remove(id) else {
            return Vec::new();
        };
        let Some(cluster) = Self::cluster_of(index, &old) else {
            return Vec::new();
        };
        if let Some(ids) = kind.by_cluster.get_mut(cluster) {
            ids.remove(id);
            if ids.is_empty() {
                kind.by_cluster.remove(cluster);
            }
        }
        vec![cluster.to_owned()]
    }

    /// Applies one event of type `index`; the clusters it concerns.
    fn apply(&mut self, index: usize, event: WatchEvent) -> Vec<String> {
        match event {
            WatchEvent::Created(r) | WatchEvent::Updated { resource: r, .. } => self.put(index, r),
            WatchEvent::Destroyed(r) => self.remove(index, id_of(&r)),
            WatchEvent::Bootstrapped => Vec::new(),
        }
    }

    fn by_id(&self, index: usize, cluster: &str) -> Option<Resource> {
        self.0[index].by_id.get(cluster).cloned()
    }

    fn labelled(&self, index: usize, cluster: &str) -> Vec<Resource> {
        let kind = &self.0[index];
        kind.by_cluster
            .get(cluster)
            .into_iter()
            .flatten()
            .filter_map(|id| kind.by_id.get(id).cloned())
            .collect()
    }

    /// `cluster`'s status resources, as a read from Omni would return them (lists by ID).
    fn of(&self, cluster: &str) -> StatusResources {
        StatusResources {
            cluster_status: self.by_id(0, cluster),
            machine_sets: self.labelled(1, cluster),
            kubernetes_upgrades: self.labelled(2, cluster),
            talos_upgrades: self.labelled(3, cluster),
            manifests: self.by_id(4, cluster),
            health_checks: self.labelled(5, cluster),
        }
    }
}

/// Watches until aborted: opens the watches, serves from them while they last, and opens them
/// again after a backoff when they fail.
async fn run(shared: Arc<Shared>, state: State) {
    let mut retry = FIRST_RETRY;
    // A watch that cannot start is said once at warning level, then at debug level.
    let mut said_unstarted = false;
    loop {
        let started = Instant::now();
        let error = watch_once(&shared, &state).await;
        let was_live = std::mem::replace(&mut shared.lock().live, false);
        if started.elapsed() >= HEALTHY_RUN {
            retry = FIRST_RETRY;
        }
        if was_live {
            tracing::warn!(%error, retry_in = ?retry, "Omni status watch failed; reading statuses from Omni until it is back");
        } else if !said_unstarted {
            said_unstarted = true;
            tracing::warn!(%error, retry_in = ?retry, "Omni status watch could not start; reading statuses from Omni meanwhile");
        } else {
            tracing::debug!(%error, retry_in = ?retry, "Omni status watch could not start");
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

/// One life of the watches: bootstrap every type into a fresh set of resources, swap it in and
/// go live, then apply changes until a watch fails. Returns why it ended.
async fn watch_once(shared: &Shared, state: &State) -> StateError {
    let mut streams = Vec::with_capacity(STATUS_TYPES.len());
    for (index, (resource_type, keyed)) in STATUS_TYPES.iter().enumerate() {
        let namespace = match keyed {
            Keyed::ById => NAMESPACE,
            Keyed::ByLabel(namespace) => namespace,
        };
        match state
            .watch(&WatchTarget::kind(namespace, resource_type, Vec::new()))
            .await
        {
            Ok(stream) => streams.push(stream.map(move |event| (index, event))),
            Err(error) => return error,
        }
    }
    let mut events = futures::stream::select_all(streams);
    let mut bootstrapping = Some((Resources::default(), [false; STATUS_TYPES.len()]));
    while let Some((index, event)) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => return error,
        };
        match bootstrapping.as_mut() {
            Some((resources, bootstrapped)) => {
                if event == WatchEvent::Bootstrapped {
                    bootstrapped[index] = true;
                }
                resources.apply(index, event);
                if bootstrapped.iter().all(|done| *done) {
                    let (resources, _) = bootstrapping.take().unwrap_or_default();
                    let changed = go_live(shared, resources);
                    tracing::debug!("Omni status watch is live");
                    shared.announce(changed);
                }
            }
            None => {
                let changed = {
                    let mut cache = shared.lock();
                    let touched = cache.resources.apply(index, event);
                    cache.changed(touched.iter().map(String::as_str))
                };
                shared.announce(changed);
            }
        }
    }
    StateError::WatchFailed("a status watch ended".into())
}

/// Swaps in freshly listed `resources`; the clusters read before whose health differs now
/// (changed while the watches were down, or read from Omni directly meanwhile).
fn go_live(shared: &Shared, resources: Resources) -> Vec<String> {
    let mut cache = shared.lock();
    cache.resources = resources;
    cache.live = true;
    let read: Vec<String> = cache.read.keys().cloned().collect();
    cache.changed(read.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::cosi::resource::{Metadata, Spec};
    use crate::proto::specs;

    fn resource(id: &str, cluster: Option<&str>, spec: impl prost::Message) -> Resource {
        Resource {
            metadata: Some(Metadata {
                id: id.into(),
                labels: cluster
                    .map(|c| [(keys::CLUSTER.to_string(), c.to_string())].into())
                    .unwrap_or_default(),
                ..Default::default()
            }),
            spec: Some(Spec {
                proto_spec: spec.encode_to_vec(),
                ..Default::default()
            }),
        }
    }

    fn cluster_status(id: &str, running: bool) -> Resource {
        let phase = if running {
            specs::cluster_status_spec::Phase::Running
        } else {
            specs::cluster_status_spec::Phase::ScalingUp
        };
        resource(
            id,
            None,
            specs::ClusterStatusSpec {
                phase: phase as i32,
                ready: running,
                ..Default::default()
            },
        )
    }

    fn machine_set(id: &str, cluster: &str, ready: bool) -> Resource {
        resource(
            id,
            Some(cluster),
            specs::MachineSetStatusSpec {
                phase: specs::MachineSetPhase::Running as i32,
                ready,
                ..Default::default()
            },
        )
    }

    #[test]
    fn resources_are_found_by_id_or_by_their_cluster_label() {
        let mut r = Resources::default();
        assert_eq!(r.put(0, cluster_status("a", true)), vec!["a".to_string()]);
        assert_eq!(r.put(1, machine_set("a-workers", "a", true)), vec!["a"]);
        r.put(1, machine_set("a-control-planes", "a", true));
        r.put(1, machine_set("b-workers", "b", true));
        let of_a = r.of("a");
        assert!(of_a.cluster_status.is_some());
        let ids: Vec<&str> = of_a.machine_sets.iter().map(id_of).collect();
        assert_eq!(
            ids,
            ["a-control-planes", "a-workers"],
            "sorted by ID, as a list"
        );
        assert!(r.of("b").cluster_status.is_none());
        assert_eq!(r.remove(1, "a-workers"), vec!["a"]);
        assert_eq!(r.of("a").machine_sets.len(), 1);
    }

    #[test]
    fn a_change_is_announced_once_and_only_for_clusters_read() {
        let mut cache = Cache::default();
        cache.resources.put(0, cluster_status("a", false));
        cache.resources.put(0, cluster_status("b", false));
        let read = health_of("a", &cache.resources.of("a"));
        cache.remember("a", fingerprint(&read));
        assert!(cache.changed(["a", "b"]).is_empty(), "nothing changed yet");

        cache.resources.put(0, cluster_status("a", true));
        cache.resources.put(0, cluster_status("b", true));
        assert_eq!(cache.changed(["a", "b"]), vec!["a"], "b was never read");
        assert!(cache.changed(["a"]).is_empty(), "the same change twice");

        cache.resources.put(0, cluster_status("a", false));
        assert!(
            cache.changed(["a"]).is_empty(),
            "back to what was read: nothing to announce"
        );
        cache.resources.put(0, cluster_status("a", true));
        assert!(
            cache.changed(["a"]).is_empty(),
            "announced already, and not read since"
        );
        cache.remember("a", fingerprint(&health_of("a", &cache.resources.of("a"))));
        cache.resources.remove(0, "a");
        assert_eq!(cache.changed(["a"]), vec!["a"], "the status went away");
    }

    #[test]
    fn equal_failures_share_a_fingerprint() {
        let missing = || Err(StatusError::NotFound("a".into()));
        assert_eq!(fingerprint(&missing()), fingerprint(&missing()));
        assert_ne!(
            fingerprint(&missing()),
            fingerprint(&Err(StatusError::Timeout("a".into())))
        );
    }
}
