//! The in-memory object store: resource registry, objects keyed by
//! (group, resource, namespace, name), a cluster-wide resourceVersion and a
//! bounded event history for watches.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

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

/// A change to an object, as a watch sees it.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    /// Group of the object.
    pub group: String,
    /// Plural resource of the object.
    pub resource: String,
    /// The object after the change (for DELETED: its last state, with the deletion RV).
    pub object: Value,
    /// For MODIFIED by an update: the object before it, so a watch with a selector can tell
    /// an object entering (ADDED) or leaving (DELETED) its selection.
    pub previous: Option<Value>,
    /// resourceVersion of the change.
    pub rv: u64,
}

type Key = (String, String, String, String);

struct Inner {
    types: Vec<ResourceType>,
    objects: BTreeMap<Key, Value>,
    rv: u64,
    history: VecDeque<WatchEvent>,
    history_size: usize,
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
}

/// The shared object store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<WatchEvent>,
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

/// Spec-like content: everything except metadata and status, used for generation bumps.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

impl Store {
    /// A store with the built-in types, the four standard namespaces and the
    /// given watch-history size.
    pub fn new(history_size: usize) -> Self {
        let (events, _) = broadcast::channel(4096);
        let store = Store {
            inner: Arc::new(Mutex::new(Inner {
                types: builtin_types(),
                objects: BTreeMap::new(),
                rv: 1,
                history: VecDeque::new(),
                history_size: history_size.max(1),
            })),
            events,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            // Cannot fail: the store is empty and the namespace type is built in.
            let _ = store.create("", "namespaces", None, obj);
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every
        // mutation is applied at once), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers (or replaces) a resource type.
    pub fn register(&self, t: ResourceType) {
        let mut inner = self.lock();
        inner
            .types
            .retain(|x| !(x.group == t.group && x.plural == t.plural));
        inner.types.push(t);
    }

    /// Removes a resource type and all its objects.
    pub fn unregister(&self, group: &str, plural: &str) {
        let mut inner = self.lock();
        inner
            .types
            .retain(|x| !(x.group == group && x.plural == plural));
        inner
            .objects
            .retain(|k, _| !(k.0 == group && k.1 == plural));
    }

    /// All registered types.
    pub fn types(&self) -> Vec<ResourceType> {
        self.lock().types.clone()
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
        self.lock()
            .types
            .iter()
            .find(|t| t.group == group && t.plural == resource)
            .cloned()
    }

    /// The current cluster-wide resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribes to changes; pair with [`Store::history_since`] to resume.
    pub fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.events.subscribe()
    }

    /// Events after `rv` from the bounded history, or Gone when `rv` is older
    /// than the oldest retained event. Also returns a receiver subscribed
    /// under the same lock, so no event is missed or duplicated.
    pub fn history_since(
        &self,
        rv: u64,
    ) -> Result<(Vec<WatchEvent>, broadcast::Receiver<WatchEvent>), ApiError> {
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

    fn emit(&self, inner: &mut Inner, ev: WatchEvent) {
        inner.history.push_back(ev.clone());
        while inner.history.len() > inner.history_size {
            inner.history.pop_front();
        }
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(ev);
    }

    /// Objects of a resource, optionally within one namespace.
    pub fn list_objects(
        &self,
        api_group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Vec<Value> {
        let (sg, sr) = storage(api_group, resource);
        self.lock()
            .objects
            .iter()
            .filter(|(k, _)| k.0 == sg && k.1 == sr && namespace.is_none_or(|n| k.2 == n))
            .map(|(_, v)| crate::events::to_view(api_group, resource, v.clone()))
            .collect()
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
        let stored = self.lock().objects.get(&key).cloned();
        stored.map(|o| crate::events::to_view(group, resource, o))
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
            match inner.objects.get(&key) {
                None => return Err(ApiError::not_found("", "namespaces", &ns)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::forbidden(
                        group,
                        resource,
                        meta_str(&obj, "name").unwrap_or(""),
                        format!(
                            "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                            qualified(&t),
                            meta_str(&obj, "name").unwrap_or("")
                        ),
                    ));
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
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(group, resource, &name));
        }
        let rv = inner.rv + 1;
        let m = obj
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("not an object"))?;
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
        meta["generation"] = json!(1);
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
        inner.objects.insert(key, stored.clone());
        self.emit(
            &mut inner,
            WatchEvent {
                kind: "ADDED",
                group: sg.into(),
                resource: sr.into(),
                object: stored.clone(),
                previous: None,
                rv,
            },
        );
        Ok(crate::events::to_view(group, resource, stored))
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
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(group, resource, name))?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        }
        // Compare in the request's view, normalized the way it would be stored.
        let old = crate::events::to_view(group, resource, stored_old.clone());
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
        if spec_part(&obj) != spec_part(&old) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
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
            inner.objects.remove(&key);
            self.emit(
                &mut inner,
                WatchEvent {
                    kind: "DELETED",
                    group: sg,
                    resource: sr,
                    object: stored,
                    previous: None,
                    rv,
                },
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
            inner.objects.insert(key, stored.clone());
            self.emit(
                &mut inner,
                WatchEvent {
                    kind: "MODIFIED",
                    group: sg,
                    resource: sr,
                    object: stored,
                    previous: Some(stored_old),
                    rv,
                },
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
            .objects
            .get(&key)
            .cloned()
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
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                if group.is_empty() && resource == "namespaces" {
                    obj["status"]["phase"] = json!("Terminating");
                } else if let Some(generation) = obj
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
                inner.objects.insert(key, obj.clone());
                self.emit(
                    &mut inner,
                    WatchEvent {
                        kind: "MODIFIED",
                        group: sg,
                        resource: sr,
                        object: obj.clone(),
                        previous: None,
                        rv,
                    },
                );
            } else {
                // Already deleting: nothing changes, give back the stored RV.
                inner.rv -= 1;
                return Ok((view(inner.objects.get(&key).cloned().unwrap_or(obj)), false));
            }
            Ok((view(obj), false))
        } else {
            inner.objects.remove(&key);
            self.emit(
                &mut inner,
                WatchEvent {
                    kind: "DELETED",
                    group: sg,
                    resource: sr,
                    object: obj.clone(),
                    previous: None,
                    rv,
                },
            );
            Ok((view(obj), true))
        }
    }

    /// Removes a terminating namespace once it holds no objects; returns
    /// whether it was removed.
    pub fn finish_namespace(&self, name: &str) -> bool {
        let mut inner = self.lock();
        if inner.objects.keys().any(|k| k.2 == name && !k.2.is_empty()) {
            return false;
        }
        let key = (
            String::new(),
            "namespaces".to_string(),
            String::new(),
            name.to_string(),
        );
        let Some(mut obj) = inner.objects.get(&key).cloned() else {
            return false;
        };
        if obj.pointer("/metadata/deletionTimestamp").is_none() {
            return false;
        }
        inner.objects.remove(&key);
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.emit(
            &mut inner,
            WatchEvent {
                kind: "DELETED",
                group: String::new(),
                resource: "namespaces".into(),
                object: obj,
                previous: None,
                rv,
            },
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
