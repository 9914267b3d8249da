//! A model of the original Go implementation's documented costs, for side-by-side benchmarks
//! only (`omni-bench --baseline`, docs/performance.md). The hidden flag
//! `omni-operator run --baseline-quirks=<quirk>[,<quirk>…]|all` turns each quirk on; without it
//! (and in every embedded operator) all are off and the hooks below change nothing.
//!
//! Each quirk is one behaviour of the original listed in its known-quirks section, modelled at
//! the point where this operator deliberately differs:
//! - `status-every-reconcile`: OmniConnection and OmniCluster write their status on every
//!   reconcile, with a fresh check/sync timestamp (the original always changes a timestamp
//!   there, so every reconcile of those two kinds writes).
//! - `connection-per-call`: no Omni client is reused; every reconcile builds a new one, so it
//!   opens a new connection (and TLS handshake) to Omni.
//! - `helm-upgrade-every-trigger`: an OmniHelmRelease whose deployed release is up to date is
//!   upgraded anyway, creating a new revision on every trigger.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use kube::api::ObjectMeta;

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

/// The set of quirks turned on.
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

static ACTIVE: OnceLock<Quirks> = OnceLock::new();

/// Turns the quirks on for this process (once, from the command line).
pub fn install(quirks: Quirks) {
    if quirks != Quirks::default() {
        tracing::warn!(
            ?quirks,
            "baseline quirks are on: this process models the original implementation for benchmarks"
        );
    }
    let _ = ACTIVE.set(quirks);
}

/// Whether `q` is on in this process.
pub fn on(q: Quirk) -> bool {
    ACTIVE.get().is_some_and(|s| s.has(q))
}

/// Hook of the status write: with `status-every-reconcile`, stamps the timestamp the original
/// moves on every reconcile of OmniConnection (`lastCheckTime`) and OmniCluster
/// (`lastAttemptTime`, `lastSyncTime`), so the status always differs and is written.
pub(crate) fn stamp_status(kind: &str, status: serde_json::Value) -> serde_json::Value {
    stamp_status_with(on(Quirk::StatusEveryReconcile), kind, status)
}

fn stamp_status_with(
    enabled: bool,
    kind: &str,
    mut status: serde_json::Value,
) -> serde_json::Value {
    let fields: &[&str] = match kind {
        "OmniConnection" => &["lastCheckTime"],
        "OmniCluster" => &["lastAttemptTime", "lastSyncTime"],
        _ => &[],
    };
    if !enabled || fields.is_empty() {
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

/// Which objects each mapped watch has seen, at which generation and deletion state.
type Seen = HashMap<(String, String), (Option<i64>, bool)>;
static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

/// Hook of the watches that map one kind's events onto another's reconciles: with
/// `status-every-reconcile`, only events that pass the original's predicate ("spec or deletion
/// changed": the first sighting, a new `metadata.generation`, or deletion starting) map. The
/// original needs that predicate to keep its always-written statuses from re-triggering each
/// other (a connection's status write would otherwise reconcile every cluster, whose status
/// writes reconcile the connection again, without end); this operator does without it because
/// its status writes are quiet. `watch` names the mapping, so each keeps its own memory.
pub(crate) fn mapped_event_passes(watch: &str, meta: &ObjectMeta) -> bool {
    !on(Quirk::StatusEveryReconcile) || passes_original_predicate(watch, meta)
}

fn passes_original_predicate(watch: &str, meta: &ObjectMeta) -> bool {
    let key = (watch.to_owned(), meta.uid.clone().unwrap_or_default());
    let state = (meta.generation, meta.deletion_timestamp.is_some());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    seen.get_or_insert_with(HashMap::new).insert(key, state) != Some(state)
}

/// Hook of the Helm plan: with `helm-upgrade-every-trigger`, an up-to-date release is upgraded
/// anyway, as the original does on every reconcile that reaches Helm.
pub(crate) fn upgrade_every_trigger(
    plan: crate::controllers::helm_release::Plan,
) -> crate::controllers::helm_release::Plan {
    use crate::controllers::helm_release::Plan;
    match plan {
        Plan::UpToDate if on(Quirk::HelmUpgradeEveryTrigger) => Plan::Upgrade,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn the_original_predicate_passes_first_sightings_spec_changes_and_deletions_only() {
        let meta = |generation: i64, deleting: bool| ObjectMeta {
            uid: Some("u-1".into()),
            generation: Some(generation),
            deletion_timestamp: deleting.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            ),
            ..ObjectMeta::default()
        };
        let watch = "test: predicate";
        assert!(
            passes_original_predicate(watch, &meta(1, false)),
            "first sighting"
        );
        assert!(
            !passes_original_predicate(watch, &meta(1, false)),
            "status-only update"
        );
        assert!(
            passes_original_predicate(watch, &meta(2, false)),
            "spec change"
        );
        assert!(
            passes_original_predicate(watch, &meta(2, true)),
            "deletion started"
        );
        // Another mapping remembers on its own.
        assert!(passes_original_predicate("test: other", &meta(2, true)));
    }

    #[test]
    fn stamping_touches_only_connection_and_cluster_timestamps_when_on() {
        let status = json!({"observedGeneration": 1});
        let cluster = stamp_status_with(true, "OmniCluster", status.clone());
        assert!(cluster["lastSyncTime"].is_string() && cluster["lastAttemptTime"].is_string());
        let conn = stamp_status_with(true, "OmniConnection", status.clone());
        assert!(conn["lastCheckTime"].is_string());
        assert_eq!(
            stamp_status_with(true, "OmniSecretSync", status.clone()),
            status
        );
        assert_eq!(
            stamp_status_with(false, "OmniCluster", status.clone()),
            status
        );
    }
}
