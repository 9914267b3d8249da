//! Garbage collection: ownerReference dependents and namespace purging.

use serde_json::Value;

use crate::store::{Preconditions, Store};

/// Deletes a terminating namespace's contents, then the namespace.
pub(crate) fn purge_namespace(store: &Store, ns: &str) {
    for rt in store.storage_types().into_iter().filter(|t| t.namespaced) {
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
    let dependents = store.dependents_of(owner_uid);
    if dependents.is_empty() {
        return;
    }
    // In the order of the type registry, as a walk over every type would find them.
    for rt in store.storage_types() {
        let of_type = dependents
            .iter()
            .filter(|(g, r, _)| *g == rt.group && *r == rt.plural);
        for (_, _, o) in of_type {
            let o = crate::events::to_view(&rt.group, &rt.plural, Value::clone(o));
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

/// Finalizer that keeps an owner deleted with `propagationPolicy: Foreground`
/// until its blocking dependents are gone.
pub(crate) const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Called by the delete verb before the owner is deleted: with
/// `propagationPolicy: Foreground` in the DeleteOptions `body`, the owner's
/// dependents are deleted first; dependents that stay (held by their own
/// finalizers) with `blockOwnerDeletion: true` make the owner wait with the
/// `foregroundDeletion` finalizer, released by [`release_foreground_owners`].
pub(crate) fn prepare_foreground(
    store: &Store,
    body: &[u8],
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) {
    let foreground = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|o| {
            o.get("propagationPolicy")
                .and_then(Value::as_str)
                .map(|p| p == "Foreground")
        })
        .unwrap_or(false);
    if !foreground {
        return;
    }
    let Ok(owner) = store.get(group, resource, namespace, name) else {
        return;
    };
    let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else {
        return;
    };
    collect_dependents(store, uid, false);
    if blocking_dependents(store, uid) && owner.pointer("/metadata/deletionTimestamp").is_none() {
        let mut held = owner.clone();
        let mut fins = held
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        fins.push(Value::from(FOREGROUND_FINALIZER));
        held["metadata"]["finalizers"] = Value::Array(fins);
        // A concurrent change wins; the owner is then deleted in the background.
        let _ = store.update(group, resource, namespace, name, held);
    }
}

/// Whether any live object names `owner_uid` with `blockOwnerDeletion: true`.
fn blocking_dependents(store: &Store, owner_uid: &str) -> bool {
    store.dependents_of(owner_uid).iter().any(|(_, _, o)| {
        o.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                        && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                })
            })
    })
}

/// After `removed` is really gone: owners it named that wait in foreground
/// deletion lose the `foregroundDeletion` finalizer once nothing blocks them.
pub(crate) fn release_foreground_owners(store: &Store, removed: &Value) {
    let owner_uids: Vec<String> = removed
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for uid in owner_uids {
        if blocking_dependents(store, &uid) {
            continue;
        }
        // The owner itself, wherever it is stored.
        if let Some((group, resource, o)) = store.by_uid(&uid) {
            let rt = Owner {
                group,
                plural: resource,
            };
            let o = crate::events::to_view(&rt.group, &rt.plural, Value::clone(&o));
            {
                if o.pointer("/metadata/deletionTimestamp").is_none() {
                    continue;
                }
                let Some(fins) = o.pointer("/metadata/finalizers").and_then(Value::as_array) else {
                    continue;
                };
                if !fins.iter().any(|f| f == FOREGROUND_FINALIZER) {
                    continue;
                }
                let rest: Vec<Value> = fins
                    .iter()
                    .filter(|f| *f != FOREGROUND_FINALIZER)
                    .cloned()
                    .collect();
                let mut released = o.clone();
                released["metadata"]["finalizers"] = Value::Array(rest);
                let (Some(name), ns) = (
                    o.pointer("/metadata/name").and_then(Value::as_str),
                    o.pointer("/metadata/namespace").and_then(Value::as_str),
                ) else {
                    continue;
                };
                // Removing the last finalizer deletes the owner (and, recursively,
                // releases its own foreground owners).
                let _ = store.update(&rt.group, &rt.plural, ns, name, released);
            }
        }
    }
}

/// Where an owner found by uid is stored.
struct Owner {
    group: String,
    plural: String,
}
