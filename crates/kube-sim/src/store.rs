//! The in-memory object store: resource registry, objects keyed by
//! (group, resource, namespace, name), a cluster-wide resourceVersion and a
//! bounded event history for watches.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::{ApiError, Cause};

/// Whether a write is stored or only checked (`?dryRun=All`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Store the object, bump the resourceVersion and notify watchers.
    Persist,
    /// Run every check and return what would be stored; change nothing.
    DryRun,
}

impl Write {
    /// `DryRun` when the request's `dryRun` parameter is `All`.
    pub fn from_dry_run(dry_run: bool) -> Self {
        if dry_run { Self::DryRun } else { Self::Persist }
    }
}

/// A served resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for core.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: Vec<String>,
    /// Categories (`kubectl get CATEGORY` lists every type in it).
    pub categories: Vec<String>,
    /// Whether a `/status` subresource exists.
    pub status_subresource: bool,
}

impl ResourceType {
    /// A resource type with the conventional singular name (lowercased kind).
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// `apiVersion` of objects of this type.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The built-in resource types served at start.
pub fn builtin_types() -> Vec<ResourceType> {
    vec![
        ResourceType::new("", "v1", "namespaces", "Namespace", false)
            .short(&["ns"])
            .with_status(),
        ResourceType::new("", "v1", "secrets", "Secret", true),
        // Create-only and never stored: the server answers it from the caller's identity.
        ResourceType::new(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
        ),
        ResourceType::new(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        ResourceType::new(
            "authentication.k8s.io",
            "v1",
            "tokenreviews",
            "TokenReview",
            false,
        ),
        ResourceType::new(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
        ResourceType::new("", "v1", "configmaps", "ConfigMap", true).short(&["cm"]),
        ResourceType::new("", "v1", "serviceaccounts", "ServiceAccount", true).short(&["sa"]),
        ResourceType::new("", "v1", "services", "Service", true)
            .short(&["svc"])
            .with_status(),
        ResourceType::new("", "v1", "endpoints", "Endpoints", true).short(&["ep"]),
        ResourceType::new("", "v1", "pods", "Pod", true)
            .short(&["po"])
            .with_status(),
        ResourceType::new("", "v1", "events", "Event", true).short(&["ev"]),
        ResourceType::new("events.k8s.io", "v1", "events", "Event", true).short(&["ev"]),
        ResourceType::new("coordination.k8s.io", "v1", "leases", "Lease", true),
        ResourceType::new("apps", "v1", "deployments", "Deployment", true)
            .short(&["deploy"])
            .with_status(),
        ResourceType::new("apps", "v1", "statefulsets", "StatefulSet", true)
            .short(&["sts"])
            .with_status(),
        ResourceType::new("apps", "v1", "daemonsets", "DaemonSet", true)
            .short(&["ds"])
            .with_status(),
        ResourceType::new("apps", "v1", "replicasets", "ReplicaSet", true)
            .short(&["rs"])
            .with_status(),
        ResourceType::new("batch", "v1", "jobs", "Job", true).with_status(),
        ResourceType::new("batch", "v1", "cronjobs", "CronJob", true)
            .short(&["cj"])
            .with_status(),
        ResourceType::new("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        ),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        ResourceType::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        )
        .short(&["crd", "crds"])
        .with_status(),
        ResourceType::new(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
        ),
        ResourceType::new(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
        ),
    ]
}

/// A change to an object, as a watch sees it. Shared (`Arc`) between the history and every
/// watcher; its JSON line is serialised once, on first use, for all of them.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    /// Group of the object.
    pub group: String,
    /// Plural resource of the object.
    pub resource: String,
    /// The object after the change (for DELETED: its last state, with the deletion RV).
    pub object: Arc<Value>,
    /// For MODIFIED by an update: the object before it, so a watch with a selector can tell
    /// an object entering (ADDED) or leaving (DELETED) its selection.
    pub previous: Option<Arc<Value>>,
    /// resourceVersion of the change.
    pub rv: u64,
    /// `{"type":..,"object":..}\n` in the stored form, built by the first watcher that needs it.
    line: OnceLock<Bytes>,
}

impl WatchEvent {
    fn new(
        kind: &'static str,
        group: String,
        resource: String,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
        rv: u64,
    ) -> Self {
        WatchEvent {
            kind,
            group,
            resource,
            object,
            previous,
            rv,
            line: OnceLock::new(),
        }
    }

    /// The watch line of this event as stored: one serialisation shared by every watcher
    /// that reports the event unchanged.
    pub(crate) fn line(&self) -> Bytes {
        self.line
            .get_or_init(|| {
                let mut out = Vec::with_capacity(256);
                out.extend_from_slice(b"{\"type\":\"");
                out.extend_from_slice(self.kind.as_bytes());
                out.extend_from_slice(b"\",\"object\":");
                // Serialising a Value into memory cannot fail.
                let _ = serde_json::to_writer(&mut out, &*self.object);
                out.extend_from_slice(b"}\n");
                Bytes::from(out)
            })
            .clone()
    }
}

/// Events after a resourceVersion and a receiver of the later ones.
pub type Resumed = (Vec<Arc<WatchEvent>>, broadcast::Receiver<Arc<WatchEvent>>);

/// Full key of a stored object: storage group, resource, namespace (empty when cluster-scoped)
/// and name.
type Key = (String, String, String, String);
/// Storage group and resource.
type TypeKey = (String, String);
/// Namespace and name, the order of a list.
type ObjectKey = (String, String);

const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_RESOURCE: &str = "customresourcedefinitions";

/// How long watch history is kept for resumption. Like the real API server's watch cache, each
/// resource type keeps at least `min` events and everything younger than `fresh` (up to `max`),
/// so a briefly slow watcher resumes where it was instead of re-listing; older versions get
/// 410 Gone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HistoryLimit {
    pub(crate) min: usize,
    pub(crate) max: usize,
    pub(crate) fresh: Duration,
}

impl HistoryLimit {
    /// Exactly `n` events per type, whatever their age.
    pub(crate) fn fixed(n: usize) -> Self {
        let n = n.max(1);
        HistoryLimit {
            min: n,
            max: n,
            fresh: Duration::ZERO,
        }
    }
}

/// The watch side of one resource type: its own channel (watchers of other types never see
/// its events) and its history.
struct TypeFeed {
    tx: broadcast::Sender<Arc<WatchEvent>>,
    history: VecDeque<(Instant, Arc<WatchEvent>)>,
    /// resourceVersion of the newest event dropped from `history` (0: none yet): a watch from
    /// an older version cannot be served.
    compacted: u64,
}

impl TypeFeed {
    fn new() -> Self {
        TypeFeed {
            tx: broadcast::channel(WATCH_CHANNEL).0,
            history: VecDeque::new(),
            compacted: 0,
        }
    }
}

/// Events buffered per watcher before it counts as lagging (it then resumes from history).
const WATCH_CHANNEL: usize = 4096;

/// The compiled view of one served CRD version, cached until a CRD or type changes.
#[derive(Clone)]
pub(crate) struct CrdVersion {
    /// The `spec.versions` entry.
    pub(crate) version: Arc<Value>,
    /// Its `schema.openAPIV3Schema`.
    pub(crate) schema: Option<Arc<Value>>,
}

struct Inner {
    types: Vec<ResourceType>,
    /// Objects per stored type, in list order; objects are shared with watch events.
    objects: HashMap<TypeKey, BTreeMap<ObjectKey, Arc<Value>>>,
    /// Where each uid is stored.
    by_uid: HashMap<String, Key>,
    /// Objects naming a uid in `ownerReferences`, for the garbage collector.
    dependents: HashMap<String, BTreeSet<Key>>,
    rv: u64,
    /// Every type's events, for [`Store::history_since`].
    history: VecDeque<Arc<WatchEvent>>,
    history_size: usize,
    feeds: HashMap<TypeKey, TypeFeed>,
    limit: HistoryLimit,
    crd_versions: HashMap<(String, String, String), Option<CrdVersion>>,
}

fn uid_of(obj: &Value) -> Option<&str> {
    meta_str(obj, "uid")
}

fn owner_uids(obj: &Value) -> impl Iterator<Item = &str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

impl Inner {
    /// The type serving `group`/`resource` and the key of `name` in it: namespaced kinds
    /// default to the `default` namespace, cluster-scoped ones ignore `namespace`.
    fn locate(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(ResourceType, Key), ApiError> {
        let t = self
            .types
            .iter()
            .find(|t| t.group == group && t.plural == resource)
            .cloned()
            .ok_or_else(|| ApiError::not_found(group, resource, name))?;
        let ns = if t.namespaced {
            namespace.unwrap_or("default").to_string()
        } else {
            String::new()
        };
        let (sg, sr) = storage(group, resource);
        let key = (sg.to_string(), sr.to_string(), ns, name.to_string());
        Ok((t, key))
    }

    fn get(&self, key: &Key) -> Option<&Arc<Value>> {
        self.objects
            .get(&(key.0.clone(), key.1.clone()))?
            .get(&(key.2.clone(), key.3.clone()))
    }

    fn unindex(&mut self, key: &Key, obj: &Value) {
        if let Some(uid) = uid_of(obj)
            && self.by_uid.get(uid) == Some(key)
        {
            self.by_uid.remove(uid);
        }
        for owner in owner_uids(obj) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    fn schema_changed(&mut self, key: &Key) {
        if key.0 == CRD_GROUP && key.1 == CRD_RESOURCE {
            self.crd_versions.clear();
        }
    }

    /// Stores `obj` under `key`, keeping the uid and owner indexes current.
    fn insert(&mut self, key: Key, obj: Arc<Value>) {
        if let Some(old) = self.get(&key).cloned() {
            self.unindex(&key, &old);
        }
        if let Some(uid) = uid_of(&obj) {
            self.by_uid.insert(uid.to_string(), key.clone());
        }
        for owner in owner_uids(&obj) {
            self.dependents
                .entry(owner.to_string())
                .or_default()
                .insert(key.clone());
        }
        self.schema_changed(&key);
        self.objects
            .entry((key.0.clone(), key.1.clone()))
            .or_default()
            .insert((key.2.clone(), key.3.clone()), obj);
    }

    fn remove(&mut self, key: &Key) -> Option<Arc<Value>> {
        let objects = self.objects.get_mut(&(key.0.clone(), key.1.clone()))?;
        let old = objects.remove(&(key.2.clone(), key.3.clone()))?;
        self.unindex(key, &old);
        self.schema_changed(key);
        Some(old)
    }

    /// Whether any namespaced object lives in `ns`.
    fn namespace_in_use(&self, ns: &str) -> bool {
        self.objects.values().any(|objects| {
            objects
                .range((ns.to_string(), String::new())..)
                .next()
                .is_some_and(|((n, _), _)| n == ns)
        })
    }

    fn feed(&mut self, group: &str, resource: &str) -> &mut TypeFeed {
        self.feeds
            .entry((group.to_string(), resource.to_string()))
            .or_insert_with(TypeFeed::new)
    }

    /// The served version `version` of the CRD for `group`/`plural`, found once per CRD change.
    fn crd_version(&mut self, group: &str, plural: &str, version: &str) -> Option<CrdVersion> {
        let cache_key = (group.to_string(), plural.to_string(), version.to_string());
        if let Some(hit) = self.crd_versions.get(&cache_key) {
            return hit.clone();
        }
        let found = self
            .objects
            .get(&(CRD_GROUP.to_string(), CRD_RESOURCE.to_string()))
            .into_iter()
            .flat_map(BTreeMap::values)
            .find(|c| {
                c.pointer("/spec/group").and_then(Value::as_str) == Some(group)
                    && c.pointer("/spec/names/plural").and_then(Value::as_str) == Some(plural)
            })
            .and_then(|crd| {
                crd.pointer("/spec/versions")?
                    .as_array()?
                    .iter()
                    .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
                    .cloned()
            })
            .map(|v| CrdVersion {
                schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
                version: Arc::new(v),
            });
        self.crd_versions.insert(cache_key, found.clone());
        found
    }
}

/// The shared object store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<RwLock<Inner>>,
    events: broadcast::Sender<Arc<WatchEvent>>,
    lists: Arc<std::sync::Mutex<ListSnapshots>>,
}

/// Optimistic-concurrency check requested by the caller.
#[derive(Clone, Debug, Default)]
pub struct Preconditions {
    /// Required uid.
    pub uid: Option<String>,
    /// Required resourceVersion.
    pub resource_version: Option<String>,
}

impl Preconditions {
    /// 409 Conflict when `obj` is not the object the caller meant to delete.
    pub fn check(
        &self,
        obj: &Value,
        group: &str,
        resource: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if let Some(uid) = &self.uid
            && Some(uid.as_str()) != meta_str(obj, "uid")
        {
            return Err(ApiError::conflict(
                group,
                resource,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(obj, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &self.resource_version
            && Some(rv.as_str()) != meta_str(obj, "resourceVersion")
        {
            return Err(ApiError::conflict(
                group,
                resource,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(obj, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        Ok(())
    }
}

/// Where objects of `group`/`resource` are stored: Events of both APIs share one key space.
fn storage<'a>(group: &'a str, resource: &'a str) -> (&'a str, &'a str) {
    crate::events::storage_of(group, resource).unwrap_or((group, resource))
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

/// Whether two objects differ in spec-like content: everything except metadata, status,
/// apiVersion and kind (a change there bumps the generation). Compared in place, no copies.
fn spec_differs(a: &Value, b: &Value) -> bool {
    const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let spec_len = |m: &serde_json::Map<String, Value>| {
                m.keys().filter(|k| !NOT_SPEC.contains(&k.as_str())).count()
            };
            spec_len(a) != spec_len(b)
                || a.iter()
                    .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
                    .any(|(k, v)| b.get(k) != Some(v))
        }
        _ => a != b,
    }
}

/// A page of a list, in stored form, and where the next one starts.
pub(crate) struct Page {
    /// The objects of the page.
    pub(crate) items: Vec<Arc<Value>>,
    /// The resourceVersion the whole list is as of: its first page's.
    pub(crate) resource_version: u64,
    /// The snapshot the next page comes from, when more objects follow.
    pub(crate) next: Option<u64>,
    /// Objects after the page.
    pub(crate) remaining: usize,
}

/// How many paged lists may be in progress at once; the oldest is forgotten first.
const LIST_SNAPSHOTS: usize = 256;

/// How long a paged list may take between two pages before its snapshot is forgotten (a
/// real server keeps its snapshot until etcd compacts it, every 5 minutes by default).
const LIST_SNAPSHOT_TTL: Duration = Duration::from_secs(300);

/// The rest of each paged list in progress, as of its first page. A real API server serves
/// every page of a list from the revision of its first page and gives that revision as the
/// list's resourceVersion, so a watch from it sees every change made while the client paged.
/// Walking on from the last key with the current state instead lost the creations made meanwhile
/// behind the cursor: they were in no page, and before the watch's starting point.
#[derive(Default)]
struct ListSnapshots {
    next_id: u64,
    by_id: BTreeMap<u64, ListSnapshot>,
}

struct ListSnapshot {
    resource_version: u64,
    rest: VecDeque<Arc<Value>>,
    last_served: Instant,
}

impl Store {
    /// A store with the built-in types, the four standard namespaces and the
    /// given watch-history size (per resource type).
    pub fn new(history_size: usize) -> Self {
        Self::with_history(HistoryLimit::fixed(history_size))
    }

    /// A store keeping watch history as `limit` says.
    pub(crate) fn with_history(limit: HistoryLimit) -> Self {
        let (events, _) = broadcast::channel(WATCH_CHANNEL);
        let store = Store {
            inner: Arc::new(RwLock::new(Inner {
                types: builtin_types(),
                objects: HashMap::new(),
                by_uid: HashMap::new(),
                dependents: HashMap::new(),
                rv: 1,
                history: VecDeque::new(),
                history_size: limit.min.max(1),
                feeds: HashMap::new(),
                limit,
                crd_versions: HashMap::new(),
            })),
            events,
            lists: Arc::default(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            // Cannot fail: the store is empty and the namespace type is built in.
            let _ = store.create("", "namespaces", None, obj);
        }
        store
    }

    fn lock(&self) -> RwLockWriteGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every
        // mutation is applied at once), so a poisoned lock is still usable.
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The paged lists in progress; usable after a panic like [`Store::lock`].
    fn lists(&self) -> std::sync::MutexGuard<'_, ListSnapshots> {
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers (or replaces) a resource type.
    pub fn register(&self, t: ResourceType) {
        let mut inner = self.lock();
        inner
            .types
            .retain(|x| !(x.group == t.group && x.plural == t.plural));
        inner.types.push(t);
        inner.crd_versions.clear();
    }

    /// Removes a resource type and all its objects.
    pub fn unregister(&self, group: &str, plural: &str) {
        let mut inner = self.lock();
        inner
            .types
            .retain(|x| !(x.group == group && x.plural == plural));
        let keys: Vec<Key> = inner
            .objects
            .get(&(group.to_string(), plural.to_string()))
            .into_iter()
            .flat_map(BTreeMap::keys)
            .map(|(ns, name)| {
                (
                    group.to_string(),
                    plural.to_string(),
                    ns.clone(),
                    name.clone(),
                )
            })
            .collect();
        for key in keys {
            inner.remove(&key);
        }
        inner
            .objects
            .remove(&(group.to_string(), plural.to_string()));
        inner.crd_versions.clear();
    }

    /// All registered types.
    pub fn types(&self) -> Vec<ResourceType> {
        self.read().types.clone()
    }

    /// The registered types that own their objects, leaving out another API's view of them
    /// (events.k8s.io Events): walking these visits every stored object once.
    pub(crate) fn storage_types(&self) -> Vec<ResourceType> {
        let mut types = self.types();
        types.retain(|t| crate::events::storage_of(&t.group, &t.plural).is_none());
        types
    }

    /// Looks up a type by group and plural (or short name / singular).
    pub fn resource_type(&self, group: &str, resource: &str) -> Option<ResourceType> {
        self.read()
            .types
            .iter()
            .find(|t| t.group == group && t.plural == resource)
            .cloned()
    }

    /// The served CRD version behind `t` (with its schema), when `t` is a custom resource;
    /// looked up once per CRD change.
    pub(crate) fn crd_version(&self, t: &ResourceType) -> Option<CrdVersion> {
        let key = (t.group.clone(), t.plural.clone(), t.version.clone());
        if let Some(hit) = self.read().crd_versions.get(&key) {
            return hit.clone();
        }
        self.lock().crd_version(&t.group, &t.plural, &t.version)
    }

    /// The current cluster-wide resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.read().rv
    }

    /// Subscribes to changes of every type; pair with [`Store::history_since`] to resume.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    /// Events after `rv` from the bounded history, or Gone when `rv` is older
    /// than the oldest retained event. Also returns a receiver subscribed
    /// under the same lock, so no event is missed or duplicated.
    pub fn history_since(&self, rv: u64) -> Result<Resumed, ApiError> {
        let inner = self.lock();
        let rx = self.events.subscribe();
        let oldest = inner.history.front().map(|e| e.rv).unwrap_or(inner.rv);
        if rv + 1 < oldest && rv < inner.rv {
            return Err(ApiError::gone(&format!(
                "too old resource version: {rv} ({})",
                oldest.saturating_sub(1)
            )));
        }
        let events = inner
            .history
            .iter()
            .filter(|e| e.rv > rv)
            .cloned()
            .collect();
        Ok((events, rx))
    }

    /// [`Store::history_since`] for one resource type: its events after `rv` and a receiver
    /// of its later events only, or Gone when its history no longer reaches back to `rv`.
    pub(crate) fn type_history_since(
        &self,
        group: &str,
        resource: &str,
        rv: u64,
    ) -> Result<Resumed, ApiError> {
        let (sg, sr) = storage(group, resource);
        let mut inner = self.lock();
        let feed = inner.feed(sg, sr);
        let rx = feed.tx.subscribe();
        if rv < feed.compacted {
            return Err(ApiError::gone(&format!(
                "too old resource version: {rv} ({})",
                feed.compacted
            )));
        }
        let start = feed.history.partition_point(|(_, e)| e.rv <= rv);
        let events = feed
            .history
            .range(start..)
            .map(|(_, e)| e.clone())
            .collect();
        Ok((events, rx))
    }

    fn emit(&self, inner: &mut Inner, ev: WatchEvent) {
        let ev = Arc::new(ev);
        inner.history.push_back(ev.clone());
        while inner.history.len() > inner.history_size {
            inner.history.pop_front();
        }
        let limit = inner.limit;
        let now = Instant::now();
        let feed = inner.feed(&ev.group, &ev.resource);
        feed.history.push_back((now, ev.clone()));
        while let Some((at, oldest)) = feed.history.front() {
            let len = feed.history.len();
            let too_many = len > limit.max;
            let stale = len > limit.min && now.duration_since(*at) > limit.fresh;
            if !(too_many || stale) {
                break;
            }
            feed.compacted = oldest.rv;
            feed.history.pop_front();
        }
        // No receivers is fine: nobody is watching.
        let _ = feed.tx.send(ev.clone());
        let _ = self.events.send(ev);
    }

    /// Objects of a resource, optionally within one namespace.
    pub fn list_objects(
        &self,
        api_group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Vec<Value> {
        self.list_shared(api_group, resource, namespace)
            .into_iter()
            .map(|v| crate::events::to_view(api_group, resource, Value::clone(&v)))
            .collect()
    }

    /// [`Store::list_objects`] in stored form, sharing the stored objects (no copies).
    pub(crate) fn list_shared(
        &self,
        api_group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Vec<Arc<Value>> {
        self.page(api_group, resource, namespace, 0, |_| true).items
    }

    /// The first page of a list: up to `limit` (0: all) objects of a resource passing `keep`,
    /// in list order, as of one resourceVersion. When more follow, the rest is kept as of that
    /// version for [`Store::next_page`].
    pub(crate) fn page(
        &self,
        api_group: &str,
        resource: &str,
        namespace: Option<&str>,
        limit: usize,
        mut keep: impl FnMut(&Value) -> bool,
    ) -> Page {
        use std::ops::Bound;
        let (sg, sr) = storage(api_group, resource);
        let inner = self.read();
        let resource_version = inner.rv;
        let mut items = Vec::new();
        if let Some(objects) = inner.objects.get(&(sg.to_string(), sr.to_string())) {
            let lower = match namespace {
                Some(ns) => Bound::Included((ns.to_string(), String::new())),
                None => Bound::Unbounded,
            };
            items.extend(
                objects
                    .range((lower, Bound::Unbounded))
                    .take_while(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
                    .map(|(_, obj)| obj)
                    .filter(|obj| keep(obj))
                    .cloned(),
            );
        }
        drop(inner);
        if limit == 0 || items.len() <= limit {
            return Page {
                items,
                resource_version,
                next: None,
                remaining: 0,
            };
        }
        let rest: VecDeque<Arc<Value>> = items.split_off(limit).into();
        let remaining = rest.len();
        let mut lists = self.lists();
        let now = Instant::now();
        lists
            .by_id
            .retain(|_, l| now.duration_since(l.last_served) < LIST_SNAPSHOT_TTL);
        while lists.by_id.len() >= LIST_SNAPSHOTS {
            lists.by_id.pop_first();
        }
        lists.next_id += 1;
        let id = lists.next_id;
        lists.by_id.insert(
            id,
            ListSnapshot {
                resource_version,
                rest,
                last_served: now,
            },
        );
        Page {
            items,
            resource_version,
            next: Some(id),
            remaining,
        }
    }

    /// The next page of the paged list `id`, as of its first page; `None` once that list is
    /// forgotten (finished, too old, or pushed out by newer ones).
    pub(crate) fn next_page(&self, id: u64, limit: usize) -> Option<Page> {
        let mut lists = self.lists();
        let list = lists.by_id.get_mut(&id)?;
        let take = if limit == 0 {
            list.rest.len()
        } else {
            limit.min(list.rest.len())
        };
        let items: Vec<Arc<Value>> = list.rest.drain(..take).collect();
        list.last_served = Instant::now();
        let (resource_version, remaining) = (list.resource_version, list.rest.len());
        if remaining == 0 {
            lists.by_id.remove(&id);
        }
        Some(Page {
            items,
            resource_version,
            next: (remaining > 0).then_some(id),
            remaining,
        })
    }

    /// Objects naming `owner_uid` in their `ownerReferences`, as (group, resource, stored
    /// object), in store order.
    pub(crate) fn dependents_of(&self, owner_uid: &str) -> Vec<(String, String, Arc<Value>)> {
        let inner = self.read();
        inner
            .dependents
            .get(owner_uid)
            .into_iter()
            .flatten()
            .filter_map(|key| {
                let obj = inner.get(key)?.clone();
                Some((key.0.clone(), key.1.clone(), obj))
            })
            .collect()
    }

    /// The stored object with `uid`, as (group, resource, stored object).
    pub(crate) fn by_uid(&self, uid: &str) -> Option<(String, String, Arc<Value>)> {
        let inner = self.read();
        let key = inner.by_uid.get(uid)?;
        let obj = inner.get(key)?.clone();
        Some((key.0.clone(), key.1.clone(), obj))
    }

    /// One object.
    pub fn get_object(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let (sg, sr) = storage(group, resource);
        let key = (
            sg.to_string(),
            sr.to_string(),
            namespace.unwrap_or("").to_string(),
            name.to_string(),
        );
        let stored = self.read().get(&key).cloned();
        stored.map(|o| crate::events::to_view(group, resource, Value::clone(&o)))
    }

    /// Gets an object or NotFound.
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.get_object(group, resource, namespace, name)
            .ok_or_else(|| ApiError::not_found(group, resource, name))
    }

    /// Creates an object: fills uid, creationTimestamp, resourceVersion,
    /// generation, apiVersion/kind; resolves `generateName`; refuses a
    /// missing name, an existing object, a missing or terminating namespace.
    pub fn create(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        self.create_as(group, resource, namespace, obj, Write::Persist)
    }

    /// [`Store::create`], or with [`Write::DryRun`] every check and the object the server
    /// would store (uid, timestamps, generated name) without storing it: no resourceVersion,
    /// no watch event (`?dryRun=All`).
    pub fn create_as(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        mut obj: Value,
        write: Write,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let t = inner
            .types
            .iter()
            .find(|t| t.group == group && t.plural == resource)
            .cloned()
            .ok_or_else(|| ApiError::not_found(group, resource, ""))?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        }
        let ns = if t.namespaced {
            namespace.unwrap_or("default").to_string()
        } else {
            String::new()
        };
        if t.namespaced {
            let key = (
                String::new(),
                "namespaces".to_string(),
                String::new(),
                ns.clone(),
            );
            match inner.get(&key) {
                None => return Err(ApiError::not_found("", "namespaces", &ns)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    let mut e = ApiError::forbidden(
                        group,
                        resource,
                        meta_str(&obj, "name").unwrap_or(""),
                        format!(
                            "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                            qualified(&t),
                            meta_str(&obj, "name").unwrap_or("")
                        ),
                    );
                    if let Some(d) = e.details.as_mut() {
                        d.causes = vec![Cause {
                            reason: "NamespaceTerminating".into(),
                            message: format!("namespace {ns} is being terminated"),
                            field: "metadata.namespace".into(),
                        }];
                    }
                    return Err(e);
                }
                Some(_) => {}
            }
        }
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            let Some(prefix) = meta_str(&obj, "generateName") else {
                return Err(ApiError::invalid(
                    group,
                    &t.kind,
                    "",
                    vec![Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value: name or generateName is required".into(),
                        field: "metadata.name".into(),
                    }],
                ));
            };
            let suffix: String = uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .chars()
                .take(5)
                .collect();
            name = format!("{prefix}{suffix}");
        }
        let (sg, sr) = storage(group, resource);
        let key = (sg.to_string(), sr.to_string(), ns.clone(), name.clone());
        if inner.get(&key).is_some() {
            return Err(ApiError::already_exists(group, resource, &name));
        }
        let rv = inner.rv + 1;
        let m = obj
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("not an object"))?;
        if group.is_empty() && resource == "namespaces" {
            // The namespace strategy's own fields (not recorded as anybody's managed fields).
            m.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            m.insert("status".into(), json!({"phase": "Active"}));
        }
        m.insert("apiVersion".into(), json!(t.api_version()));
        m.insert("kind".into(), json!(t.kind));
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        meta["name"] = json!(name);
        if t.namespaced {
            meta["namespace"] = json!(ns);
        } else if let Some(mm) = meta.as_object_mut() {
            mm.remove("namespace");
        }
        meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
        meta["creationTimestamp"] = json!(now());
        if has_generation(group, resource) {
            meta["generation"] = json!(1);
        } else if let Some(mm) = meta.as_object_mut() {
            mm.remove("generation");
        }
        if let Some(mm) = meta.as_object_mut() {
            mm.remove("deletionTimestamp");
            mm.remove("deletionGracePeriodSeconds");
            mm.remove("resourceVersion");
        }
        let mut stored = crate::events::to_storage(group, resource, obj);
        if write == Write::DryRun {
            return Ok(crate::events::to_view(group, resource, stored));
        }
        inner.rv = rv;
        stored["metadata"]["resourceVersion"] = json!(rv.to_string());
        let shared = Arc::new(stored);
        inner.insert(key, shared.clone());
        self.emit(
            &mut inner,
            WatchEvent::new("ADDED", sg.into(), sr.into(), shared.clone(), None, rv),
        );
        drop(inner);
        Ok(crate::events::to_view(
            group,
            resource,
            Arc::unwrap_or_clone(shared),
        ))
    }

    /// Replaces an object. A resourceVersion in `obj` must match (409
    /// Conflict otherwise); without one the update is unconditional. System
    /// metadata is kept; generation bumps when anything but metadata/status
    /// changes; removing the last finalizer of a deleting object deletes it.
    pub fn update(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        obj: Value,
    ) -> Result<Value, ApiError> {
        self.update_as(group, resource, namespace, name, obj, Write::Persist)
    }

    /// [`Store::update`], or with [`Write::DryRun`] every check and the object the server
    /// would store, keeping the current resourceVersion and storing nothing (`?dryRun=All`).
    pub fn update_as(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        mut obj: Value,
        write: Write,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let (t, key) = inner.locate(group, resource, namespace, name)?;
        let stored_old = inner
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(group, resource, name))?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        }
        // Compare in the request's view, normalized the way it would be stored.
        let old = crate::events::to_view(group, resource, Value::clone(&stored_old));
        obj = crate::events::to_view(
            group,
            resource,
            crate::events::to_storage(group, resource, obj),
        );
        if let Some(body_name) = meta_str(&obj, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(&format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta_str(&obj, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::modified(group, resource, name));
        }
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        if deleting {
            let old_f: Vec<&Value> = old
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let new_f: Vec<Value> = obj
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if new_f.iter().any(|f| !old_f.contains(&f)) {
                return Err(ApiError::invalid(group, &t.kind, name, vec![Cause {
                    reason: "FieldValueForbidden".into(),
                    message: "Forbidden: no new finalizers can be added if the object is being deleted".into(),
                    field: "metadata.finalizers".into(),
                }]));
            }
        }
        let m = obj
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("not an object"))?;
        m.insert("apiVersion".into(), json!(t.api_version()));
        m.insert("kind".into(), json!(t.kind));
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        for f in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old.get("metadata").and_then(|om| om.get(f)) {
                Some(v) => meta[f] = v.clone(),
                None => {
                    if let Some(mm) = meta.as_object_mut() {
                        mm.remove(f);
                    }
                }
            }
        }
        if spec_differs(&obj, &old)
            && let Some(g) = old.pointer("/metadata/generation").and_then(Value::as_i64)
        {
            obj["metadata"]["generation"] = json!(g + 1);
        }
        let mut probe = obj.clone();
        probe["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if probe == old {
            // A no-op write keeps the resourceVersion and emits no event, like the real server.
            return Ok(old);
        }
        if write == Write::DryRun {
            return Ok(probe);
        }
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let (sg, sr) = (key.0.clone(), key.1.clone());
        let stored = crate::events::to_storage(group, resource, obj.clone());
        let finalizers_empty = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty());
        if deleting && finalizers_empty {
            inner.remove(&key);
            // The API server deletes the object as it was stored (the update that released
            // the last finalizer is never persisted): watchers see that last stored state,
            // finalizers included, at the deletion's resourceVersion.
            let mut last = Value::clone(&stored_old);
            last["metadata"]["resourceVersion"] = json!(rv.to_string());
            self.emit(
                &mut inner,
                WatchEvent::new("DELETED", sg, sr, Arc::new(last), None, rv),
            );
            drop(inner);
            // The object is really gone now: the garbage collector removes its
            // dependents and a terminating namespace may now be empty.
            if let Some(uid) = meta_str(&obj, "uid") {
                crate::gc::collect_dependents(self, uid, false);
            }
            crate::gc::release_foreground_owners(self, &obj);
            if let Some(ns) = meta_str(&obj, "namespace").filter(|n| !n.is_empty()) {
                self.finish_namespace(ns);
            }
            return Ok(obj);
        } else {
            let shared = Arc::new(stored);
            inner.insert(key, shared.clone());
            self.emit(
                &mut inner,
                WatchEvent::new("MODIFIED", sg, sr, shared, Some(stored_old), rv),
            );
        }
        Ok(obj)
    }

    /// Deletes an object. With finalizers it only gets a deletionTimestamp
    /// (and `deletionGracePeriodSeconds: 0`, and its generation is bumped); returns the object
    /// and whether it is gone now.
    pub fn delete(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<(Value, bool), ApiError> {
        let mut inner = self.lock();
        let (_, key) = inner.locate(group, resource, namespace, name)?;
        let (sg, sr) = (key.0.clone(), key.1.clone());
        let mut obj = inner
            .get(&key)
            .map(|o| Value::clone(o))
            .ok_or_else(|| ApiError::not_found(group, resource, name))?;
        pre.check(&obj, group, resource, name)?;
        let view = |o: Value| crate::events::to_view(group, resource, o);
        let has_finalizers = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
            || (group.is_empty() && resource == "namespaces");
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if has_finalizers {
            if obj.pointer("/metadata/deletionTimestamp").is_none() {
                obj["metadata"]["deletionTimestamp"] = json!(now());
                if group.is_empty() && resource == "namespaces" {
                    obj["status"]["phase"] = json!("Terminating");
                } else {
                    obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                }
                if !(group.is_empty() && resource == "namespaces")
                    && let Some(generation) = obj
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                        .filter(|g| *g > 0)
                {
                    // Marking an object as deleting is a change its controllers must see:
                    // the real registry bumps the generation with the deletionTimestamp
                    // (generation-based watch predicates rely on it). Namespaces have their
                    // own deletion path, which does not.
                    obj["metadata"]["generation"] = json!(generation + 1);
                }
                let shared = Arc::new(obj.clone());
                inner.insert(key, shared.clone());
                self.emit(
                    &mut inner,
                    WatchEvent::new("MODIFIED", sg, sr, shared, None, rv),
                );
            } else {
                // Already deleting: nothing changes, give back the stored RV.
                inner.rv -= 1;
                let current = inner.get(&key).map(|o| Value::clone(o)).unwrap_or(obj);
                return Ok((view(current), false));
            }
            Ok((view(obj), false))
        } else {
            inner.remove(&key);
            self.emit(
                &mut inner,
                WatchEvent::new("DELETED", sg, sr, Arc::new(obj.clone()), None, rv),
            );
            Ok((view(obj), true))
        }
    }

    /// Removes a terminating namespace once it holds no objects; returns
    /// whether it was removed.
    pub fn finish_namespace(&self, name: &str) -> bool {
        let mut inner = self.lock();
        if !name.is_empty() && inner.namespace_in_use(name) {
            return false;
        }
        let key = (
            String::new(),
            "namespaces".to_string(),
            String::new(),
            name.to_string(),
        );
        let Some(mut obj) = inner.get(&key).map(|o| Value::clone(o)) else {
            return false;
        };
        if obj.pointer("/metadata/deletionTimestamp").is_none() {
            return false;
        }
        inner.remove(&key);
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.emit(
            &mut inner,
            WatchEvent::new(
                "DELETED",
                String::new(),
                "namespaces".into(),
                Arc::new(obj),
                None,
                rv,
            ),
        );
        true
    }
}

fn qualified(t: &ResourceType) -> String {
    if t.group.is_empty() {
        t.plural.clone()
    } else {
        format!("{}.{}", t.plural, t.group)
    }
}

/// Whether objects of this resource carry `metadata.generation`, as their registry strategy
/// decides: custom resources and the kinds with a spec that controllers observe do; Secrets,
/// ConfigMaps, Namespaces, Services, ServiceAccounts, Events, Leases and RBAC objects do not.
fn has_generation(group: &str, resource: &str) -> bool {
    match group {
        "" => resource == "pods",
        "coordination.k8s.io" | "events.k8s.io" | "rbac.authorization.k8s.io" => false,
        _ => true,
    }
}
