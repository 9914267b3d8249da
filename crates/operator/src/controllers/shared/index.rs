//! Reverse indexes over the objects of one kind: for each thing an object names (its cluster,
//! its Secrets, its connection), the objects naming it. A mapped watch event (a Secret or an
//! OmniCluster changed) then costs one lookup, where scanning the kind's cache decoded every
//! object of the kind per event: quadratic at cold start, when every Secret and every cluster
//! arrives once and thousands of objects refer to them.
//!
//! An index is kept from the same watch as the kind's cache (`runner::indexed_controller_for`):
//! each object of the kind is decoded once per event of its own, and a re-list rebuilds the
//! index the way it rebuilds the cache.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::decoded::{Cached, cached_ref};

/// What an object refers to: a kind of reference and the referenced object's namespace and
/// name, e.g. `RefKey::new("secret", "apps", "registry")`.
///
/// Cloning one shares its text: the index holds each key once however many objects use it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RefKey(Arc<str>);

impl RefKey {
    /// The key of a `what` reference to `name` in `namespace`.
    pub(crate) fn new(what: &str, namespace: &str, name: &str) -> Self {
        // NUL cannot occur in a Kubernetes name, so the parts cannot run into each other.
        Self(Arc::from(format!("{what}\0{namespace}\0{name}")))
    }
}

/// One object's reference, shared by every entry of the object (its keys' sets and its own).
type Shared<K> = Arc<ObjectRef<Cached<K>>>;
type Refs<K> = HashSet<Shared<K>>;

/// The entries of the index. Each object's reference and each key's text are held once and
/// shared: with owned copies per entry (three keys and a reverse entry per secret sync), the
/// index of 10,000 syncs took 18 MB in the heap profile of an idle 1,000-cluster fleet.
struct Entries<K: Resource<DynamicType = ()> + Clone> {
    by_key: HashMap<RefKey, Refs<K>>,
    keys_of: HashMap<Shared<K>, Box<[RefKey]>>,
}

impl<K: Resource<DynamicType = ()> + Clone> Default for Entries<K> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            keys_of: HashMap::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Entries<K> {
    fn insert(&mut self, obj: ObjectRef<Cached<K>>, keys: Vec<RefKey>) {
        self.remove(&obj);
        let obj: Shared<K> = Arc::new(obj);
        let keys: Box<[RefKey]> = keys
            .into_iter()
            .map(|key| {
                // An occupied entry's key is the copy the index already holds: its text is
                // shared rather than held again.
                let entry = self.by_key.entry(key);
                let held = entry.key().clone();
                entry.or_default().insert(obj.clone());
                held
            })
            .collect();
        self.keys_of.insert(obj, keys);
    }

    fn remove(&mut self, obj: &ObjectRef<Cached<K>>) {
        for key in self.keys_of.remove(obj).unwrap_or_default() {
            if let Some(refs) = self.by_key.get_mut(&key) {
                refs.remove(obj);
                if refs.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }
}

struct State<K: Resource<DynamicType = ()> + Clone> {
    live: Entries<K>,
    /// Entries being listed after a watch (re)start, swapped in when the list is complete.
    relisting: Option<Entries<K>>,
}

/// The objects of kind `K` by what they refer to, kept from `K`'s watch events.
pub(crate) struct RefIndex<K: Resource<DynamicType = ()> + Clone> {
    keys: fn(&K) -> Vec<RefKey>,
    state: RwLock<State<K>>,
}

impl<K> RefIndex<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    /// An empty index whose entries for an object are `keys(object)`.
    pub(crate) fn new(keys: fn(&K) -> Vec<RefKey>) -> Self {
        Self {
            keys,
            state: RwLock::new(State {
                live: Entries::default(),
                relisting: None,
            }),
        }
    }

    /// Objects of `K` that refer to `key`.
    pub(crate) fn get(&self, key: &RefKey) -> Vec<ObjectRef<Cached<K>>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state
            .live
            .by_key
            .get(key)
            .map(|refs| refs.iter().map(|r| ObjectRef::clone(r)).collect())
            .unwrap_or_default()
    }

    /// Objects of `K` with a `what` reference to `obj` (by its namespace and name): what a
    /// mapped watch of `obj`'s kind wakes.
    pub(crate) fn referring_to(
        &self,
        what: &str,
        obj: &impl ResourceExt,
    ) -> Vec<ObjectRef<Cached<K>>> {
        self.get(&RefKey::new(what, &namespace_of(obj), &obj.name_any()))
    }

    /// Objects of `K` that refer to any of `keys`, each once.
    pub(crate) fn get_any(&self, keys: &[RefKey]) -> Vec<ObjectRef<Cached<K>>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let mut out: Refs<K> = HashSet::new();
        for key in keys {
            if let Some(refs) = state.live.by_key.get(key) {
                out.extend(refs.iter().cloned());
            }
        }
        out.into_iter().map(|r| ObjectRef::clone(&r)).collect()
    }

    fn entry(&self, obj: &Cached<K>) -> (ObjectRef<Cached<K>>, Vec<RefKey>) {
        // An object that does not decode refers to nothing we can read; it is reported on
        // by its own reconcile (`InvalidObject`).
        let keys = match obj {
            Cached::Decoded(k) => (self.keys)(k),
            Cached::Undecodable(_) => Vec::new(),
        };
        (bare_ref(obj), keys)
    }

    /// Applies one event of `K`'s watch.
    pub(crate) fn apply(&self, event: &watcher::Event<Cached<K>>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(obj) => {
                let (r, keys) = self.entry(obj);
                state.live.insert(r, keys);
            }
            watcher::Event::Delete(obj) => {
                state.live.remove(&bare_ref(obj));
            }
            watcher::Event::Init => state.relisting = Some(Entries::default()),
            watcher::Event::InitApply(obj) => {
                let (r, keys) = self.entry(obj);
                state
                    .relisting
                    .get_or_insert_with(Entries::default)
                    .insert(r, keys);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = state.relisting.take() {
                    state.live = listed;
                }
            }
        }
    }
}

/// A reference to `obj` by namespace and name only: the version and uid `ObjectRef::from_obj`
/// adds are not compared, and the index holds up to four references per object.
fn bare_ref<K: Resource<DynamicType = ()> + Clone>(obj: &Cached<K>) -> ObjectRef<Cached<K>> {
    cached_ref(&obj.name_any(), obj.namespace().as_deref())
}

/// The namespace of `obj` (empty for cluster-scoped objects), for building [`RefKey`]s.
pub(crate) fn namespace_of(obj: &impl ResourceExt) -> String {
    obj.namespace().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::OmniSecretSync;

    fn sync(name: &str, cluster: &str, source: &str, rv: &str) -> Cached<OmniSecretSync> {
        decode(sync_json(name, cluster, source, rv))
    }

    fn decode(json: serde_json::Value) -> Cached<OmniSecretSync> {
        use serde::Deserialize as _;
        Cached::deserialize(json).unwrap_or_else(|e| panic!("{e}"))
    }

    fn sync_json(name: &str, cluster: &str, source: &str, rv: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniSecretSync",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
            "spec": {
                "clusterRef": {"name": cluster},
                "kubeconfigSecretRef": {"name": "kc", "key": "kubeconfig"},
                "sourceSecretRef": {"name": source},
                "targetSecretRef": {"name": "dst", "namespace": "apps"},
                "deletionPolicy": "Delete"
            }
        })
    }

    fn index() -> RefIndex<OmniSecretSync> {
        RefIndex::new(|s| {
            let ns = namespace_of(s);
            vec![
                RefKey::new("cluster", &ns, &s.spec.cluster_ref.name),
                RefKey::new(
                    "secret",
                    &ns,
                    s.spec.source_secret_ref.as_ref().map_or("", |r| &r.name),
                ),
            ]
        })
    }

    fn names(refs: Vec<ObjectRef<Cached<OmniSecretSync>>>) -> Vec<String> {
        let mut names: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    fn cluster(name: &str) -> RefKey {
        RefKey::new("cluster", "ns", name)
    }

    #[test]
    fn objects_are_found_by_what_they_refer_to() {
        let index = index();
        index.apply(&watcher::Event::Apply(sync("a", "prod", "src-a", "1")));
        index.apply(&watcher::Event::Apply(sync("b", "prod", "src-b", "2")));
        index.apply(&watcher::Event::Apply(sync("c", "dev", "src-a", "3")));
        assert_eq!(names(index.get(&cluster("prod"))), ["a", "b"]);
        assert_eq!(
            names(index.get(&RefKey::new("secret", "ns", "src-a"))),
            ["a", "c"]
        );
        assert_eq!(
            names(index.get(&RefKey::new("secret", "other", "src-a"))),
            Vec::<String>::new(),
            "references are namespaced"
        );
        assert_eq!(
            names(index.get_any(&[cluster("prod"), cluster("dev")])),
            ["a", "b", "c"]
        );
        let mut source = k8s_openapi::api::core::v1::Secret::default();
        source.metadata.name = Some("src-a".into());
        source.metadata.namespace = Some("ns".into());
        assert_eq!(
            names(index.referring_to("secret", &source)),
            ["a", "c"],
            "a watched object finds what refers to it by its own namespace and name"
        );
    }

    #[test]
    fn a_changed_reference_moves_the_object_and_a_deletion_removes_it() {
        let index = index();
        index.apply(&watcher::Event::Apply(sync("a", "prod", "src-a", "1")));
        index.apply(&watcher::Event::Apply(sync("a", "dev", "src-a", "2")));
        assert!(index.get(&cluster("prod")).is_empty());
        assert_eq!(names(index.get(&cluster("dev"))), ["a"]);
        index.apply(&watcher::Event::Delete(sync("a", "dev", "src-a", "3")));
        assert!(index.get(&cluster("dev")).is_empty());
        assert!(index.get(&RefKey::new("secret", "ns", "src-a")).is_empty());
    }

    #[test]
    fn a_relist_replaces_the_entries_when_it_is_complete() {
        let index = index();
        index.apply(&watcher::Event::Apply(sync("gone", "prod", "src", "1")));
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(sync("new", "prod", "src", "5")));
        assert_eq!(
            names(index.get(&cluster("prod"))),
            ["gone"],
            "until the list is complete the previous entries answer"
        );
        index.apply(&watcher::Event::InitDone);
        assert_eq!(names(index.get(&cluster("prod"))), ["new"]);
    }

    #[test]
    fn objects_naming_the_same_thing_share_its_key_and_each_its_reference() {
        let index = index();
        index.apply(&watcher::Event::Apply(sync("a", "prod", "src-a", "1")));
        index.apply(&watcher::Event::Apply(sync("b", "prod", "src-b", "2")));
        let state = index.state.read().unwrap_or_else(PoisonError::into_inner);
        let keys_of = |name: &str| {
            let (r, keys) = state
                .live
                .keys_of
                .iter()
                .find(|(r, _)| r.name == name)
                .unwrap_or_else(|| panic!("{name} is indexed"));
            (r.clone(), keys.clone())
        };
        let ((a, a_keys), (_, b_keys)) = (keys_of("a"), keys_of("b"));
        assert!(
            Arc::ptr_eq(&a_keys[0].0, &b_keys[0].0),
            "one copy of the cluster key's text"
        );
        let in_set = state.live.by_key[&cluster("prod")]
            .get(a.as_ref())
            .unwrap_or_else(|| panic!("a is under its cluster"));
        assert!(Arc::ptr_eq(in_set, &a), "one copy of a's reference");
    }

    #[test]
    fn an_undecodable_object_refers_to_nothing() {
        let index = index();
        let mut bad = sync_json("bad", "prod", "src", "1");
        bad["spec"]["clusterRef"] = serde_json::json!(7);
        index.apply(&watcher::Event::Apply(decode(bad)));
        assert!(index.get(&cluster("prod")).is_empty());
    }
}
