//! A model of the original Go implementation's documented costs, for side-by-side benchmarks
//! only (`omni-bench --baseline`, docs/performance.md). The hidden flag
//! `omni-operator run --baseline-quirks=<quirk>[,<quirk>…]|all` turns each quirk on; it
//! becomes a [`Quirks`] value in the controllers' context, read where a quirk applies.
//! Without the flag (and in every embedded operator) the set is empty and nothing here
//! changes what the operator does. There is no process-wide state: two operators in one
//! process (tests) can model different things.
//!
//! Each quirk is one behaviour of the original listed in its known-quirks section, modelled at
//! the point where this operator deliberately differs:
//! - `status-every-reconcile`: OmniConnection and OmniCluster write their status on every
//!   reconcile, with a fresh check/sync timestamp (the original always changes a timestamp
//!   there, so every reconcile of those two kinds writes); its mapped watches then pass only
//!   the events the original's predicate passes (`Quirks::mapped_events`).
//! - `connection-per-call`: no Omni client is reused; every reconcile builds a new one, so it
//!   opens a new connection (and TLS handshake) to Omni.
//! - `helm-upgrade-every-trigger`: an OmniHelmRelease whose deployed release is up to date is
//!   upgraded anyway, creating a new revision on every trigger.

use std::collections::{HashMap, HashSet};

use futures::{Stream, StreamExt as _};
use kube::Resource;
use kube::runtime::watcher;

/// One modelled behaviour of the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quirk {
    /// Connection and Cluster status written on every reconcile.
    StatusEveryReconcile,
    /// A new Omni connection per reconcile.
    ConnectionPerCall,
    /// A Helm upgrade on every trigger.
    HelmUpgradeEveryTrigger,
}

impl Quirk {
    const ALL: [Quirk; 3] = [
        Quirk::StatusEveryReconcile,
        Quirk::ConnectionPerCall,
        Quirk::HelmUpgradeEveryTrigger,
    ];

    fn name(self) -> &'static str {
        match self {
            Quirk::StatusEveryReconcile => "status-every-reconcile",
            Quirk::ConnectionPerCall => "connection-per-call",
            Quirk::HelmUpgradeEveryTrigger => "helm-upgrade-every-trigger",
        }
    }
}

/// The set of quirks turned on (none by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quirks(u8);

impl Quirks {
    fn bit(q: Quirk) -> u8 {
        1 << (q as u8)
    }

    /// Whether `q` is on.
    pub fn has(self, q: Quirk) -> bool {
        self.0 & Self::bit(q) != 0
    }

    /// With `status-every-reconcile`, stamps the timestamp the original moves on every
    /// reconcile of OmniConnection (`lastCheckTime`) and OmniCluster (`lastAttemptTime`,
    /// `lastSyncTime`) into the status about to be written for an object of `kind`, so it
    /// always differs and is written.
    pub(crate) fn stamp_status(
        self,
        kind: &str,
        mut status: serde_json::Value,
    ) -> serde_json::Value {
        let fields: &[&str] = match kind {
            "OmniConnection" => &["lastCheckTime"],
            "OmniCluster" => &["lastAttemptTime", "lastSyncTime"],
            _ => &[],
        };
        if !self.has(Quirk::StatusEveryReconcile) || fields.is_empty() {
            return status;
        }
        // Sub-second precision, so two reconciles in one second still differ (the original's
        // metav1.Time has seconds; its writes differ by resourceVersion-bumping content anyway).
        let now = jiff::Timestamp::now().to_string();
        if let Some(m) = status.as_object_mut() {
            for f in fields {
                m.insert((*f).to_string(), serde_json::Value::String(now.clone()));
            }
        }
        status
    }

    /// The events of a watch that maps one kind's changes onto another's reconciles: all of
    /// them, or with `status-every-reconcile` only those passing the original's predicate
    /// ("spec or deletion changed": the first sighting, a new `metadata.generation`, deletion
    /// starting). The original needs that predicate to keep its always-written statuses from
    /// re-triggering each other (a connection's status write would otherwise reconcile every
    /// cluster, whose status writes reconcile the connection again, without end); this
    /// operator does without it because its status writes are quiet.
    pub(crate) fn mapped_events<K>(
        self,
        events: impl Stream<Item = watcher::Event<K>> + Send + 'static,
    ) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
    where
        K: Resource + Send + 'static,
    {
        if self.has(Quirk::StatusEveryReconcile) {
            original_predicate(events).left_stream()
        } else {
            events.right_stream()
        }
    }

    /// With `helm-upgrade-every-trigger`: an OmniHelmRelease as last applied is upgraded
    /// anyway, as the original does on every reconcile that reaches Helm.
    pub(crate) fn upgrades_every_trigger(self) -> bool {
        self.has(Quirk::HelmUpgradeEveryTrigger)
    }

    /// With `connection-per-call`: no Omni client is kept between calls.
    pub(crate) fn connects_per_call(self) -> bool {
        self.has(Quirk::ConnectionPerCall)
    }
}

/// Parses the flag's value: `all`, or quirk names separated by commas.
pub fn parse(value: &str) -> Result<Quirks, String> {
    let mut set = Quirks::default();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part == "all" {
            for q in Quirk::ALL {
                set.0 |= Quirks::bit(q);
            }
            continue;
        }
        let q = Quirk::ALL
            .into_iter()
            .find(|q| q.name() == part)
            .ok_or_else(|| {
                let names: Vec<&str> = Quirk::ALL.iter().map(|q| q.name()).collect();
                format!("unknown quirk {part:?}; known: {}, all", names.join(", "))
            })?;
        set.0 |= Quirks::bit(q);
    }
    Ok(set)
}

/// `events` with an applied object passed on only when its generation or deletion state
/// changed since it last passed (or on first sighting). The memory holds one entry per live
/// object: a deletion forgets it, and a re-list forgets what it no longer lists.
fn original_predicate<K>(
    events: impl Stream<Item = watcher::Event<K>> + Send + 'static,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
where
    K: Resource + Send + 'static,
{
    let mut seen: HashMap<String, (Option<i64>, bool)> = HashMap::new();
    let mut relisted: Option<HashSet<String>> = None;
    events.filter_map(move |event| {
        let uid = |o: &K| o.meta().uid.clone().unwrap_or_default();
        let state = |o: &K| (o.meta().generation, o.meta().deletion_timestamp.is_some());
        let passes = match &event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let id = uid(o);
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(id.clone());
                }
                let now = state(o);
                seen.insert(id, now) != Some(now)
            }
            watcher::Event::Delete(o) => {
                seen.remove(&uid(o));
                true
            }
            watcher::Event::Init => {
                relisted = Some(HashSet::new());
                true
            }
            watcher::Event::InitDone => {
                if let Some(listed) = relisted.take() {
                    seen.retain(|id, _| listed.contains(id));
                }
                true
            }
        };
        std::future::ready(passes.then_some(event))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use serde_json::json;

    #[test]
    fn parses_single_quirks_lists_and_all() {
        let one = parse("connection-per-call").unwrap();
        assert!(one.has(Quirk::ConnectionPerCall));
        assert!(!one.has(Quirk::StatusEveryReconcile));
        let two = parse("status-every-reconcile, helm-upgrade-every-trigger").unwrap();
        assert!(two.has(Quirk::StatusEveryReconcile) && two.has(Quirk::HelmUpgradeEveryTrigger));
        assert!(!two.has(Quirk::ConnectionPerCall));
        let all = parse("all").unwrap();
        assert!(Quirk::ALL.iter().all(|q| all.has(*q)));
    }

    #[test]
    fn an_unknown_quirk_is_named_in_the_error() {
        let err = parse("status-every-reconcile,fast-mode").unwrap_err();
        assert!(err.contains("\"fast-mode\""), "{err}");
        assert!(err.contains("connection-per-call"), "{err}");
    }

    fn object(uid: &str, generation: i64, deleting: bool) -> kube::api::DynamicObject {
        kube::api::DynamicObject {
            types: None,
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                generation: Some(generation),
                deletion_timestamp: deleting.then_some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ),
                ),
                ..ObjectMeta::default()
            },
            data: json!({}),
        }
    }

    /// The events `quirks` passes of `events`, as (uid, generation) of each applied object.
    fn passed(
        quirks: Quirks,
        events: Vec<watcher::Event<kube::api::DynamicObject>>,
    ) -> Vec<String> {
        let stream = quirks.mapped_events(futures::stream::iter(events));
        futures::executor::block_on(stream.collect::<Vec<_>>())
            .into_iter()
            .filter_map(|e| match e {
                watcher::Event::Apply(o) => Some(format!(
                    "{}@{}{}",
                    o.metadata.uid.unwrap_or_default(),
                    o.metadata.generation.unwrap_or_default(),
                    if o.metadata.deletion_timestamp.is_some() {
                        " deleting"
                    } else {
                        ""
                    }
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_original_predicate_passes_first_sightings_spec_changes_and_deletions_only() {
        let events = vec![
            watcher::Event::Apply(object("a", 1, false)),
            watcher::Event::Apply(object("a", 1, false)),
            watcher::Event::Apply(object("a", 2, false)),
            watcher::Event::Apply(object("a", 2, true)),
            watcher::Event::Apply(object("b", 2, true)),
        ];
        assert_eq!(
            passed(parse("status-every-reconcile").unwrap(), events.clone()),
            ["a@1", "a@2", "a@2 deleting", "b@2 deleting"],
            "a status-only update does not pass; another object remembers on its own"
        );
        assert_eq!(passed(Quirks::default(), events).len(), 5, "off: all pass");
    }

    #[test]
    fn the_predicate_forgets_deleted_objects_and_those_a_relist_no_longer_lists() {
        let quirks = parse("status-every-reconcile").unwrap();
        let events = vec![
            watcher::Event::Apply(object("a", 1, false)),
            watcher::Event::Apply(object("b", 1, false)),
            watcher::Event::Delete(object("a", 1, false)),
            watcher::Event::Init,
            watcher::Event::InitApply(object("c", 1, false)),
            watcher::Event::InitDone,
            // Both forgotten: a first sighting again.
            watcher::Event::Apply(object("a", 1, false)),
            watcher::Event::Apply(object("b", 1, false)),
        ];
        assert_eq!(passed(quirks, events), ["a@1", "b@1", "a@1", "b@1"]);
    }

    #[test]
    fn stamping_touches_only_connection_and_cluster_timestamps_when_on() {
        let on = parse("status-every-reconcile").unwrap();
        let status = json!({"observedGeneration": 1});
        let cluster = on.stamp_status("OmniCluster", status.clone());
        assert!(cluster["lastSyncTime"].is_string() && cluster["lastAttemptTime"].is_string());
        let conn = on.stamp_status("OmniConnection", status.clone());
        assert!(conn["lastCheckTime"].is_string());
        assert_eq!(on.stamp_status("OmniSecretSync", status.clone()), status);
        assert_eq!(
            Quirks::default().stamp_status("OmniCluster", status.clone()),
            status
        );
    }
}
