//! Garbage collection: ownerReference dependents and namespace purging.

use serde_json::Value;

use crate::store::{Preconditions, Store};

/// Deletes a terminating namespace's contents, then the namespace.
pub(crate) fn purge_namespace(store: &Store, ns: &str) {
    for rt in store.types().into_iter().filter(|t| t.namespaced) {
        for o in store.list_objects(&rt.group, &rt.plural, Some(ns)) {
            if let Some(n) = o.pointer("/metadata/name").and_then(Value::as_str) {
                // Objects with finalizers stay until their controllers release them.
                let _ = store.delete(
                    &rt.group,
                    &rt.plural,
                    Some(ns),
                    n,
                    &Preconditions::default(),
                );
            }
        }
    }
    store.finish_namespace(ns);
}

/// Garbage collection once an owner is gone: dependents naming its uid in
/// `ownerReferences` are deleted (recursively), or with `Orphan` lose that
/// reference.
pub(crate) fn collect_dependents(store: &Store, owner_uid: &str, orphan: bool) {
    for rt in store.types() {
        for o in store.list_objects(&rt.group, &rt.plural, None) {
            let refs = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if !refs
                .iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
            {
                continue;
            }
            let Some(name) = o.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let ns = o.pointer("/metadata/namespace").and_then(Value::as_str);
            if orphan {
                let mut kept = o.clone();
                let rest: Vec<Value> = refs
                    .into_iter()
                    .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
                    .collect();
                kept["metadata"]["ownerReferences"] = Value::Array(rest);
                // A dependent changed concurrently keeps its reference; the real GC would retry.
                let _ = store.update(&rt.group, &rt.plural, ns, name, kept);
            } else if let Ok((dep, true)) =
                store.delete(&rt.group, &rt.plural, ns, name, &Preconditions::default())
                && let Some(uid) = dep.pointer("/metadata/uid").and_then(Value::as_str)
            {
                collect_dependents(store, uid, false);
            }
        }
    }
}
