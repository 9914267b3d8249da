//! Omni's manifest sync as the workload cluster sees it: once a cluster's Kubernetes API
//! answers, Omni applies the objects of its manifest groups there — the objects of `full`
//! groups whenever they change, those of `one-time` groups once — and prunes the objects of
//! `full` groups that are no longer declared. The simulator has no workload cluster of its
//! own; an embedder that runs one (the sandbox) plugs it in as a [`ManifestSink`], and the
//! simulator then calls it where Omni would write. Without a sink, nothing is written
//! anywhere and the sync status alone moves, as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// A workload cluster Omni's manifest sync writes into.
pub trait ManifestSink: Send + Sync {
    /// Applies `apply` (whole objects, namespaces and CRDs first) to `cluster`'s workload
    /// cluster and deletes `prune`; an error is what Omni reports as the apply's `last_error`,
    /// and the same change is tried again on the next pass.
    fn sync(&self, cluster: &str, apply: &[Value], prune: &[Value]) -> Result<(), String>;
}

/// One declared object and whether its group is `one-time`.
#[derive(Clone, PartialEq)]
struct Declared {
    object: Value,
    one_time: bool,
}

/// What the simulator last wrote to each cluster, so it writes only changes (Omni's sync is
/// quiet when nothing changed).
#[derive(Default)]
pub(crate) struct ManifestSync {
    sink: Mutex<Option<Arc<dyn ManifestSink>>>,
    applied: Mutex<HashMap<String, BTreeMap<String, Declared>>>,
}

/// `group/kind/namespace/name` of an object, the identity Omni tracks a manifest by.
fn key(object: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let group = text(&object["apiVersion"])
        .rsplit_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    format!(
        "{group}/{}/{}/{}",
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"])
    )
}

/// Namespaces and CRDs go first: the objects that other objects live in or are made of.
fn order(object: &Value) -> u8 {
    match object["kind"].as_str() {
        Some("Namespace") => 0,
        Some("CustomResourceDefinition") => 1,
        _ => 2,
    }
}

impl ManifestSync {
    /// Plugs in (or removes) the workload side.
    pub(crate) fn set_sink(&self, sink: Option<Arc<dyn ManifestSink>>) {
        *self.sink.lock().unwrap_or_else(|p| p.into_inner()) = sink;
    }

    /// Brings `cluster`'s workload cluster to `groups` (each group's `one-time` flag and YAML
    /// data). `Ok` when there is nothing to do or no sink.
    pub(crate) fn sync(&self, cluster: &str, groups: &[(bool, String)]) -> Result<(), String> {
        let Some(sink) = self.sink.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
            return Ok(());
        };
        let mut desired = BTreeMap::new();
        for (one_time, data) in groups {
            let docs: Vec<Value> = serde_saphyr::from_multiple(data).unwrap_or_default();
            for object in docs.into_iter().filter(|d| d.get("kind").is_some()) {
                desired.insert(
                    key(&object),
                    Declared {
                        object,
                        one_time: *one_time,
                    },
                );
            }
        }
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        let before = applied.get(cluster).cloned().unwrap_or_default();
        let mut apply: Vec<Value> = desired
            .iter()
            .filter(|(k, d)| match before.get(*k) {
                None => true,
                Some(_) if d.one_time => false,
                Some(previous) => previous.object != d.object,
            })
            .map(|(_, d)| d.object.clone())
            .collect();
        apply.sort_by_key(order);
        let prune: Vec<Value> = before
            .iter()
            .filter(|(k, d)| !d.one_time && !desired.contains_key(*k))
            .map(|(_, d)| d.object.clone())
            .collect();
        if apply.is_empty() && prune.is_empty() {
            return Ok(());
        }
        sink.sync(cluster, &apply, &prune)?;
        applied.insert(cluster.to_string(), desired);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(Vec<String>, Vec<String>)>>);

    impl ManifestSink for Recorder {
        fn sync(&self, _cluster: &str, apply: &[Value], prune: &[Value]) -> Result<(), String> {
            let names = |objects: &[Value]| objects.iter().map(key).collect();
            self.0.lock().unwrap().push((names(apply), names(prune)));
            Ok(())
        }
    }

    const NS: &str = "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n";
    const CM: &str =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: apps}\ndata: {a: '1'}\n";

    #[test]
    fn writes_changes_only_and_prunes_full_groups() {
        let sync = ManifestSync::default();
        let recorder = Arc::new(Recorder::default());
        // No sink: nothing to do.
        sync.sync("c", &[(false, NS.into())]).unwrap();
        sync.set_sink(Some(recorder.clone()));
        let both = format!("{CM}---\n{NS}");
        sync.sync("c", &[(false, both.clone())]).unwrap();
        sync.sync("c", &[(false, both)]).unwrap();
        sync.sync("c", &[(false, NS.into())]).unwrap();
        let calls = recorder.0.lock().unwrap().clone();
        assert_eq!(
            calls,
            vec![
                (
                    vec![
                        "/Namespace//apps".to_string(),
                        "/ConfigMap/apps/c".to_string()
                    ],
                    vec![]
                ),
                (vec![], vec!["/ConfigMap/apps/c".to_string()]),
            ]
        );
    }

    #[test]
    fn one_time_objects_are_applied_once_and_never_pruned() {
        let sync = ManifestSync::default();
        let recorder = Arc::new(Recorder::default());
        sync.set_sink(Some(recorder.clone()));
        sync.sync("c", &[(true, CM.into())]).unwrap();
        sync.sync("c", &[(true, CM.replace("'1'", "'2'"))]).unwrap();
        sync.sync("c", &[]).unwrap();
        assert_eq!(recorder.0.lock().unwrap().len(), 1);
    }

    struct Failing;

    impl ManifestSink for Failing {
        fn sync(&self, _: &str, _: &[Value], _: &[Value]) -> Result<(), String> {
            Err("no matches for kind".into())
        }
    }

    #[test]
    fn a_failed_write_is_tried_again() {
        let sync = ManifestSync::default();
        sync.set_sink(Some(Arc::new(Failing)));
        assert!(sync.sync("c", &[(false, NS.into())]).is_err());
        let recorder = Arc::new(Recorder::default());
        sync.set_sink(Some(recorder.clone()));
        sync.sync("c", &[(false, NS.into())]).unwrap();
        assert_eq!(recorder.0.lock().unwrap().len(), 1);
    }
}
