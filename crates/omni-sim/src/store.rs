//! The in-memory COSI state store with the semantics of COSI's in-memory backend as Omni serves
//! it (docs/omni-wire.md#metadata-rules, docs/omni-wire.md#errors): versions, phases, owners,
//! finalizers, label queries and a change feed for watches.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use omni_client::proto::cosi::resource::{
    LabelQuery, LabelTerm, Metadata, Resource, Spec, label_term::Operation,
};
use tokio::sync::broadcast;

use crate::clock::{Clock, to_proto};

/// Phase of a live resource.
pub(crate) const PHASE_RUNNING: &str = "running";
/// Phase of a resource being torn down.
pub(crate) const PHASE_TEARING_DOWN: &str = "tearingDown";
/// The version string of a resource that has not been stored yet.
pub(crate) const VERSION_UNDEFINED: &str = "undefined";

/// Capacity of the change feed; a watcher that falls further behind gets an ERRORED event, like
/// a real server whose watch buffer overruns.
const FEED_CAPACITY: usize = 8192;

/// One change to the store, in commit order. Events are shared behind `Arc`, so the variant
/// size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum StoreEvent {
    /// A resource was created.
    Created(Resource),
    /// A resource was replaced.
    Updated {
        /// The stored resource before the change.
        old: Resource,
        /// The stored resource after the change.
        new: Resource,
    },
    /// A resource was removed; carries its last stored form.
    Destroyed(Resource),
}

impl StoreEvent {
    /// The resource after the event (the last form for destroys).
    pub fn resource(&self) -> &Resource {
        match self {
            StoreEvent::Created(r) | StoreEvent::Destroyed(r) => r,
            StoreEvent::Updated { new, .. } => new,
        }
    }

    /// Namespace and type of the affected resource.
    pub fn kind(&self) -> (&str, &str) {
        let md = meta(self.resource());
        (md.namespace.as_str(), md.r#type.as_str())
    }
}

/// Store failures, each mapped to the gRPC code Omni answers with.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// The resource does not exist.
    #[error("resource {0} doesn't exist")]
    NotFound(String),
    /// Create of an existing resource.
    #[error("resource {0} already exists")]
    AlreadyExists(String),
    /// The stored owner differs from the caller's.
    #[error("resource {resource} is owned by {owner:?}")]
    OwnerConflict {
        /// Resource reference.
        resource: String,
        /// Stored owner.
        owner: String,
    },
    /// Metadata owner differs from the options owner.
    #[error(
        "resource {resource} owner mismatch: metadata owner {metadata:?}, requested {requested:?}"
    )]
    OwnerMismatch {
        /// Resource reference.
        resource: String,
        /// Owner in the sent metadata.
        metadata: String,
        /// Owner in the request options.
        requested: String,
    },
    /// The stored phase is not the expected one.
    #[error("resource {resource} is not in phase {expected}")]
    PhaseConflict {
        /// Resource reference.
        resource: String,
        /// Phase the caller expected.
        expected: String,
    },
    /// Optimistic concurrency failure.
    #[error(
        "resource {resource} update conflict: expected version {expected:?}, actual version {actual:?}"
    )]
    VersionConflict {
        /// Resource reference.
        resource: String,
        /// Version the caller sent.
        expected: String,
        /// Version stored.
        actual: String,
    },
    /// Destroy while finalizers remain.
    #[error("resource {resource} has pending finalizers [{}]", finalizers.join(" "))]
    PendingFinalizers {
        /// Resource reference.
        resource: String,
        /// Remaining finalizers.
        finalizers: Vec<String>,
    },
    /// Unparsable metadata (empty version or phase, missing metadata/spec).
    #[error("{0}")]
    InvalidMetadata(String),
}

impl StoreError {
    /// The gRPC status code for this error (docs/omni-wire.md#errors).
    pub fn code(&self) -> tonic::Code {
        match self {
            StoreError::NotFound(_) => tonic::Code::NotFound,
            StoreError::AlreadyExists(_) => tonic::Code::AlreadyExists,
            StoreError::OwnerConflict { .. } | StoreError::OwnerMismatch { .. } => {
                tonic::Code::PermissionDenied
            }
            StoreError::PhaseConflict { .. } | StoreError::InvalidMetadata(_) => {
                tonic::Code::InvalidArgument
            }
            StoreError::VersionConflict { .. } | StoreError::PendingFinalizers { .. } => {
                tonic::Code::FailedPrecondition
            }
        }
    }
}

impl From<StoreError> for tonic::Status {
    fn from(e: StoreError) -> Self {
        tonic::Status::new(e.code(), e.to_string())
    }
}

/// `Type(ns/id@version)` as COSI prints resource pointers.
pub(crate) fn reference(ns: &str, ty: &str, id: &str, version: &str) -> String {
    format!("{ty}({ns}/{id}@{version})")
}

/// Metadata of a resource, or an empty default when absent.
pub fn meta(r: &Resource) -> &Metadata {
    static EMPTY: std::sync::OnceLock<Metadata> = std::sync::OnceLock::new();
    r.metadata
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(Metadata::default))
}

fn meta_mut(r: &mut Resource) -> &mut Metadata {
    r.metadata.get_or_insert_with(Metadata::default)
}

/// Parses a COSI version string: decimal or `undefined`; empty is an error.
pub(crate) fn parse_version(v: &str) -> Result<Option<u64>, StoreError> {
    if v == VERSION_UNDEFINED {
        return Ok(None);
    }
    v.parse::<u64>()
        .map(Some)
        .map_err(|_| StoreError::InvalidMetadata(format!("error parsing version {v:?}")))
}

fn check_phase(p: &str) -> Result<(), StoreError> {
    if p == PHASE_RUNNING || p == PHASE_TEARING_DOWN {
        Ok(())
    } else {
        Err(StoreError::InvalidMetadata(format!("unknown phase {p:?}")))
    }
}

/// Whether a resource's labels satisfy every query (queries and their terms are AND-ed).
pub(crate) fn matches_queries(r: &Resource, queries: &[LabelQuery]) -> bool {
    queries
        .iter()
        .all(|q| q.terms.iter().all(|t| matches_term(&meta(r).labels, t)))
}

fn matches_term(labels: &std::collections::HashMap<String, String>, t: &LabelTerm) -> bool {
    let value = labels.get(&t.key);
    let first = t.value.first().map(String::as_str);
    let numeric =
        |a: &str, b: &str| -> Option<(i64, i64)> { Some((a.parse().ok()?, b.parse().ok()?)) };
    let result = match Operation::try_from(t.op).unwrap_or(Operation::Exists) {
        Operation::Exists => value.is_some(),
        Operation::NotExists => value.is_none(),
        Operation::Equal => matches!((value, first), (Some(v), Some(f)) if v == f),
        Operation::In => value.is_some_and(|v| t.value.iter().any(|x| x == v)),
        Operation::Lt => matches!((value, first), (Some(v), Some(f)) if v.as_str() < f),
        Operation::Lte => matches!((value, first), (Some(v), Some(f)) if v.as_str() <= f),
        Operation::LtNumeric => {
            matches!((value, first), (Some(v), Some(f)) if numeric(v, f).is_some_and(|(a, b)| a < b))
        }
        Operation::LteNumeric => {
            matches!((value, first), (Some(v), Some(f)) if numeric(v, f).is_some_and(|(a, b)| a <= b))
        }
    };
    result != t.invert
}

type Kind = (String, String);

#[derive(Default)]
struct Inner {
    kinds: BTreeMap<Kind, KindMap>,
}

impl Inner {
    /// The resources of one kind, if any was ever stored.
    fn kind(&self, ns: &str, ty: &str) -> Option<&KindMap> {
        self.kinds.get(&(ns.to_string(), ty.to_string()))
    }
}

/// One kind's resources by ID, with the IDs carrying each label value: a list selecting on a
/// label (every list Omni's clients make of a cluster's resources) visits only those, not the
/// whole kind. Labels change only through [`KindMap::insert`] and [`KindMap::remove`].
#[derive(Default)]
struct KindMap {
    items: BTreeMap<String, Resource>,
    by_label: HashMap<(String, String), BTreeSet<String>>,
}

impl KindMap {
    fn get(&self, id: &str) -> Option<&Resource> {
        self.items.get(id)
    }

    fn contains_key(&self, id: &str) -> bool {
        self.items.contains_key(id)
    }

    fn values(&self) -> impl Iterator<Item = &Resource> {
        self.items.values()
    }

    /// Stores `r` under `id`, returning what it replaced.
    fn insert(&mut self, id: String, r: Resource) -> Option<Resource> {
        for (k, v) in &meta(&r).labels {
            self.by_label
                .entry((k.clone(), v.clone()))
                .or_default()
                .insert(id.clone());
        }
        let old = self.items.insert(id.clone(), r)?;
        let new_labels = &meta(&self.items[&id]).labels;
        let stale: Vec<(String, String)> = meta(&old)
            .labels
            .iter()
            .filter(|(k, v)| new_labels.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for label in stale {
            self.unindex(label, &id);
        }
        Some(old)
    }

    fn remove(&mut self, id: &str) -> Option<Resource> {
        let old = self.items.remove(id)?;
        for (k, v) in &meta(&old).labels {
            self.unindex((k.clone(), v.clone()), id);
        }
        Some(old)
    }

    fn unindex(&mut self, label: (String, String), id: &str) {
        if let Some(ids) = self.by_label.get_mut(&label) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_label.remove(&label);
            }
        }
    }

    /// The resources matching every query, sorted by ID.
    fn matching(&self, queries: &[LabelQuery]) -> Vec<Resource> {
        let selective = queries
            .iter()
            .flat_map(|q| &q.terms)
            .find(|t| !t.invert && t.op == Operation::Equal as i32 && !t.value.is_empty());
        match selective {
            Some(t) => self
                .by_label
                .get(&(t.key.clone(), t.value[0].clone()))
                .into_iter()
                .flatten()
                .filter_map(|id| self.items.get(id))
                .filter(|r| matches_queries(r, queries))
                .cloned()
                .collect(),
            None => self
                .values()
                .filter(|r| matches_queries(r, queries))
                .cloned()
                .collect(),
        }
    }
}

/// A borrowed, read-only view of the store (see [`Store::read`]).
pub(crate) struct StoreView<'a> {
    inner: &'a Inner,
}

impl StoreView<'_> {
    /// One resource, if it exists.
    pub(crate) fn get(&self, ns: &str, ty: &str, id: &str) -> Option<&Resource> {
        self.inner.kind(ns, ty).and_then(|m| m.get(id))
    }

    /// Every resource of a kind, sorted by ID.
    pub(crate) fn all(&self, ns: &str, ty: &str) -> impl Iterator<Item = &Resource> {
        self.inner
            .kind(ns, ty)
            .into_iter()
            .flat_map(KindMap::values)
    }
}

/// The shared resource store.
pub struct Store {
    inner: Mutex<Inner>,
    feed: broadcast::Sender<Arc<StoreEvent>>,
    clock: Arc<dyn Clock>,
    /// Number of changes so far: equal before and after some work means it changed nothing.
    revision: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let (feed, _) = broadcast::channel(FEED_CAPACITY);
        Self {
            inner: Mutex::new(Inner::default()),
            feed,
            clock,
            revision: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, ev: StoreEvent) {
        self.revision
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // No receivers is normal (nobody watching).
        let _ = self.feed.send(Arc::new(ev));
    }

    /// How many changes the store has seen (every create, update and destroy counts one).
    pub fn revision(&self) -> u64 {
        self.revision.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Subscribes to the change feed without a snapshot.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoreEvent>> {
        self.feed.subscribe()
    }

    /// Atomically takes the current resources of a kind (sorted by ID) and subscribes to changes
    /// after that snapshot, so a watcher never misses or duplicates an event.
    pub(crate) fn snapshot_and_subscribe(
        &self,
        ns: &str,
        ty: &str,
    ) -> (Vec<Resource>, broadcast::Receiver<Arc<StoreEvent>>) {
        let inner = self.lock();
        let rx = self.feed.subscribe();
        let items = inner
            .kind(ns, ty)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        (items, rx)
    }

    /// Reads one resource.
    pub fn get(&self, ns: &str, ty: &str, id: &str) -> Result<Resource, StoreError> {
        self.try_get(ns, ty, id)
            .ok_or_else(|| StoreError::NotFound(reference(ns, ty, id, VERSION_UNDEFINED)))
    }

    /// Reads one resource if it exists.
    pub fn try_get(&self, ns: &str, ty: &str, id: &str) -> Option<Resource> {
        self.read(|v| v.get(ns, ty, id).cloned())
    }

    /// Runs `read` over the store under its lock, lending resources instead of cloning them:
    /// for passes that visit a whole kind to find the few resources they act on. `read` must
    /// not call back into the store (its lock is held).
    pub(crate) fn read<R>(&self, read: impl FnOnce(&StoreView<'_>) -> R) -> R {
        let inner = self.lock();
        read(&StoreView { inner: &inner })
    }

    /// Lists a kind sorted by ID, filtered by label queries (AND-ed).
    pub fn list(&self, ns: &str, ty: &str, queries: &[LabelQuery]) -> Vec<Resource> {
        self.lock()
            .kind(ns, ty)
            .map(|m| m.matching(queries))
            .unwrap_or_default()
    }

    /// Lists a kind in the default namespace whose `label` equals `value`.
    pub fn list_labeled(&self, ty: &str, label: &str, value: &str) -> Vec<Resource> {
        self.list_labeled_in(crate::types::DEFAULT_NS, ty, label, value)
    }

    /// Lists a kind in namespace `ns` whose `label` equals `value`.
    pub(crate) fn list_labeled_in(
        &self,
        ns: &str,
        ty: &str,
        label: &str,
        value: &str,
    ) -> Vec<Resource> {
        self.list(
            ns,
            ty,
            &[LabelQuery {
                terms: vec![LabelTerm {
                    key: label.to_string(),
                    op: Operation::Equal as i32,
                    value: vec![value.to_string()],
                    invert: false,
                }],
            }],
        )
    }

    fn check_common(r: &Resource) -> Result<(), StoreError> {
        let md = r
            .metadata
            .as_ref()
            .ok_or_else(|| StoreError::InvalidMetadata("metadata is missing".into()))?;
        if r.spec.is_none() {
            return Err(StoreError::InvalidMetadata("spec is missing".into()));
        }
        parse_version(&md.version)?;
        check_phase(&md.phase)?;
        Ok(())
    }

    /// COSI Create: stores version 1 with the server's `created` time and the given owner.
    pub fn create(&self, mut r: Resource, owner: &str) -> Result<Resource, StoreError> {
        Self::check_common(&r)?;
        let now = to_proto(self.clock.now());
        let md = meta_mut(&mut r);
        let key = (md.namespace.clone(), md.r#type.clone());
        let pointer = reference(&md.namespace, &md.r#type, &md.id, &md.version);
        if !md.owner.is_empty() && md.owner != owner {
            return Err(StoreError::OwnerMismatch {
                resource: pointer,
                metadata: md.owner.clone(),
                requested: owner.to_string(),
            });
        }
        md.owner = owner.to_string();
        md.version = "1".into();
        md.created = Some(now);
        if md.updated.is_none() {
            md.updated = Some(prost_types::Timestamp::default());
        }
        let mut inner = self.lock();
        let kind = inner.kinds.entry(key).or_default();
        if kind.contains_key(&md.id) {
            return Err(StoreError::AlreadyExists(pointer));
        }
        kind.insert(md.id.clone(), r.clone());
        drop(inner);
        self.emit(StoreEvent::Created(r.clone()));
        Ok(r)
    }

    /// COSI Update: owner, version and expected-phase checks, then full replacement of metadata
    /// and spec; `created` is kept, `updated` set to now, version incremented.
    pub fn update(
        &self,
        mut r: Resource,
        owner: &str,
        expected_phase: Option<&str>,
    ) -> Result<Resource, StoreError> {
        Self::check_common(&r)?;
        let now = to_proto(self.clock.now());
        let md = meta_mut(&mut r);
        let pointer = reference(&md.namespace, &md.r#type, &md.id, &md.version);
        let mut inner = self.lock();
        let Some(kind) = inner
            .kinds
            .get_mut(&(md.namespace.clone(), md.r#type.clone()))
        else {
            return Err(StoreError::NotFound(pointer));
        };
        let Some(current) = kind.get(&md.id) else {
            return Err(StoreError::NotFound(pointer));
        };
        let cur = meta(current).clone();
        if cur.owner != owner {
            return Err(StoreError::OwnerConflict {
                resource: pointer,
                owner: cur.owner,
            });
        }
        if !md.owner.is_empty() && md.owner != owner {
            return Err(StoreError::OwnerMismatch {
                resource: pointer,
                metadata: md.owner.clone(),
                requested: owner.to_string(),
            });
        }
        if md.version != cur.version {
            return Err(StoreError::VersionConflict {
                resource: pointer,
                expected: md.version.clone(),
                actual: cur.version,
            });
        }
        if let Some(phase) = expected_phase
            && cur.phase != phase
        {
            return Err(StoreError::PhaseConflict {
                resource: pointer,
                expected: phase.to_string(),
            });
        }
        let next = cur.version.parse::<u64>().unwrap_or(0) + 1;
        md.version = next.to_string();
        md.owner = owner.to_string();
        md.created = cur.created;
        md.updated = Some(now);
        let id = md.id.clone();
        let Some(old) = kind.insert(id, r.clone()) else {
            return Err(StoreError::NotFound(pointer));
        };
        drop(inner);
        self.emit(StoreEvent::Updated {
            old,
            new: r.clone(),
        });
        Ok(r)
    }

    /// COSI Destroy: only finalizers block (the phase may still be running).
    pub fn destroy(&self, ns: &str, ty: &str, id: &str, owner: &str) -> Result<(), StoreError> {
        let pointer = reference(ns, ty, id, VERSION_UNDEFINED);
        let mut inner = self.lock();
        let Some(kind) = inner.kinds.get_mut(&(ns.to_string(), ty.to_string())) else {
            return Err(StoreError::NotFound(pointer));
        };
        let Some(current) = kind.get(id) else {
            return Err(StoreError::NotFound(pointer));
        };
        let md = meta(current);
        if md.owner != owner {
            return Err(StoreError::OwnerConflict {
                resource: pointer,
                owner: md.owner.clone(),
            });
        }
        if !md.finalizers.is_empty() {
            return Err(StoreError::PendingFinalizers {
                resource: pointer,
                finalizers: md.finalizers.clone(),
            });
        }
        let removed = kind.remove(id);
        drop(inner);
        if let Some(r) = removed {
            self.emit(StoreEvent::Destroyed(r));
        }
        Ok(())
    }

    /// COSI Teardown: moves the resource to `tearingDown` (no write when already there) and
    /// reports whether it can be destroyed now.
    pub fn teardown(&self, ns: &str, ty: &str, id: &str, owner: &str) -> Result<bool, StoreError> {
        let pointer = reference(ns, ty, id, VERSION_UNDEFINED);
        let now = to_proto(self.clock.now());
        let mut inner = self.lock();
        let Some(kind) = inner.kinds.get_mut(&(ns.to_string(), ty.to_string())) else {
            return Err(StoreError::NotFound(pointer));
        };
        let Some(current) = kind.get(id) else {
            return Err(StoreError::NotFound(pointer));
        };
        let md = meta(current).clone();
        if md.owner != owner {
            return Err(StoreError::OwnerConflict {
                resource: pointer,
                owner: md.owner,
            });
        }
        let ready = md.finalizers.is_empty();
        if md.phase == PHASE_TEARING_DOWN {
            return Ok(ready);
        }
        let mut new = current.clone();
        let m = meta_mut(&mut new);
        m.phase = PHASE_TEARING_DOWN.into();
        m.version = (m.version.parse::<u64>().unwrap_or(0) + 1).to_string();
        m.updated = Some(now);
        let Some(old) = kind.insert(id.to_string(), new.clone()) else {
            return Err(StoreError::NotFound(pointer));
        };
        drop(inner);
        self.emit(StoreEvent::Updated { old, new });
        Ok(ready)
    }

    // ---- controller-side helpers: no owner or version checks, like a controller runtime
    // writing its own outputs.

    /// Creates or replaces a resource as a controller; returns the stored form. Writes nothing
    /// when labels, annotations, finalizers, phase, owner and spec are unchanged, so an idle
    /// simulator stays idle.
    pub fn put(&self, mut r: Resource) -> Resource {
        let now = to_proto(self.clock.now());
        let md = meta_mut(&mut r);
        if md.phase.is_empty() {
            md.phase = PHASE_RUNNING.into();
        }
        let key = (md.namespace.clone(), md.r#type.clone());
        let id = md.id.clone();
        let mut inner = self.lock();
        let kind = inner.kinds.entry(key).or_default();
        match kind.get(&id) {
            Some(current) => {
                let cur = meta(current).clone();
                let md = meta(&r);
                let same = cur.labels == md.labels
                    && cur.annotations == md.annotations
                    && cur.finalizers == md.finalizers
                    && cur.phase == md.phase
                    && cur.owner == md.owner
                    && current.spec.as_ref().map(|s| &s.proto_spec)
                        == r.spec.as_ref().map(|s| &s.proto_spec);
                if same {
                    return current.clone();
                }
                let m = meta_mut(&mut r);
                m.version = (cur.version.parse::<u64>().unwrap_or(0) + 1).to_string();
                m.created = cur.created;
                m.updated = Some(now);
                if r.spec.is_none() {
                    r.spec = Some(Spec::default());
                }
                let old = kind.insert(id, r.clone()).unwrap_or_default();
                drop(inner);
                self.emit(StoreEvent::Updated {
                    old,
                    new: r.clone(),
                });
                r
            }
            None => {
                let m = meta_mut(&mut r);
                m.version = "1".into();
                m.created = Some(now);
                m.updated = Some(now);
                if r.spec.is_none() {
                    r.spec = Some(Spec::default());
                }
                kind.insert(id, r.clone());
                drop(inner);
                self.emit(StoreEvent::Created(r.clone()));
                r
            }
        }
    }

    /// Applies `f` to a stored resource as a controller and stores the result via [`Store::put`].
    /// Returns `None` when the resource does not exist.
    pub fn modify(
        &self,
        ns: &str,
        ty: &str,
        id: &str,
        f: impl FnOnce(&mut Resource),
    ) -> Option<Resource> {
        let mut r = self.try_get(ns, ty, id)?;
        f(&mut r);
        Some(self.put(r))
    }

    /// Removes a resource regardless of owner and finalizers (controller cleanup).
    pub fn remove(&self, ns: &str, ty: &str, id: &str) -> Option<Resource> {
        let removed = self
            .lock()
            .kinds
            .get_mut(&(ns.to_string(), ty.to_string()))
            .and_then(|k| k.remove(id));
        if let Some(r) = &removed {
            self.emit(StoreEvent::Destroyed(r.clone()));
        }
        removed
    }
}

/// Builds a resource envelope with an encoded spec.
pub fn resource<M: prost::Message>(
    ty: &str,
    id: &str,
    owner: &str,
    labels: impl IntoIterator<Item = (String, String)>,
    spec: &M,
) -> Resource {
    Resource {
        metadata: Some(Metadata {
            namespace: crate::types::DEFAULT_NS.into(),
            r#type: ty.into(),
            id: id.into(),
            version: VERSION_UNDEFINED.into(),
            owner: owner.into(),
            phase: PHASE_RUNNING.into(),
            labels: labels.into_iter().collect(),
            ..Default::default()
        }),
        spec: Some(Spec {
            proto_spec: spec.encode_to_vec(),
            yaml_spec: String::new(),
        }),
    }
}

/// Decodes a resource's protobuf spec as `M` (empty spec decodes to the default).
pub fn decode_spec<M: prost::Message + Default>(r: &Resource) -> Result<M, prost::DecodeError> {
    M::decode(
        r.spec
            .as_ref()
            .map(|s| s.proto_spec.as_slice())
            .unwrap_or_default(),
    )
}

/// Whether the resource is being torn down.
pub(crate) fn tearing_down(r: &Resource) -> bool {
    meta(r).phase == PHASE_TEARING_DOWN
}

/// Value of a label, if present.
pub fn label<'a>(r: &'a Resource, key: &str) -> Option<&'a str> {
    meta(r).labels.get(key).map(String::as_str)
}

/// The ID of a resource.
pub fn id(r: &Resource) -> &str {
    meta(r).id.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::new(Arc::new(crate::clock::SystemClock))
    }

    fn labelled(id: &str, cluster: &str) -> Resource {
        let labels = [("cluster".to_string(), cluster.to_string())];
        resource("Things.test", id, "sim", labels, &Metadata::default())
    }

    fn ids(rs: Vec<Resource>) -> Vec<String> {
        rs.iter().map(|r| meta(r).id.clone()).collect()
    }

    fn cluster_is(value: &str, invert: bool) -> LabelQuery {
        LabelQuery {
            terms: vec![LabelTerm {
                key: "cluster".into(),
                op: Operation::Equal as i32,
                value: vec![value.into()],
                invert,
            }],
        }
    }

    /// A label selection finds exactly what a scan of the kind would, in ID order, while
    /// resources are created, relabelled by update and by controller, torn down and removed.
    #[test]
    fn a_label_selection_follows_every_change_of_labels() {
        let s = store();
        let ns = crate::types::DEFAULT_NS;
        let list = |value: &str| ids(s.list(ns, "Things.test", &[cluster_is(value, false)]));
        for (id, cluster) in [("c", "a"), ("a", "a"), ("b", "b")] {
            s.create(labelled(id, cluster), "sim")
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(list("a"), vec!["a", "c"]);
        assert_eq!(list("b"), vec!["b"]);

        let mut moved = s
            .get(ns, "Things.test", "c")
            .unwrap_or_else(|e| panic!("{e}"));
        meta_mut(&mut moved)
            .labels
            .insert("cluster".into(), "b".into());
        s.update(moved, "sim", None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(list("a"), vec!["a"]);
        assert_eq!(list("b"), vec!["b", "c"]);

        s.modify(ns, "Things.test", "a", |r| {
            meta_mut(r).labels.clear();
        });
        assert_eq!(list("a"), Vec::<String>::new());
        let not_b = ids(s.list(ns, "Things.test", &[cluster_is("b", true)]));
        assert_eq!(not_b, vec!["a"], "an inverted term still scans the kind");

        s.teardown(ns, "Things.test", "b", "sim")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(list("b"), vec!["b", "c"], "teardown keeps labels");
        s.destroy(ns, "Things.test", "b", "sim")
            .unwrap_or_else(|e| panic!("{e}"));
        s.remove(ns, "Things.test", "c");
        assert_eq!(list("b"), Vec::<String>::new());
    }
}
