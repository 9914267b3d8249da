//! What the OmniCluster controller keeps and is configured with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::children::ChildCaches;
use crate::api::OmniCluster;
use crate::api::cluster::OmniClusterStatus;
use crate::api::plan::DestructivePolicy;
use crate::controllers::shared::omni::OmniClients;
use crate::controllers::shared::setup::Setup;

/// The cluster controller's own state and configuration.
pub(crate) struct ClusterState {
    /// The Omni clients, one per OmniConnection.
    pub(super) omni: Arc<OmniClients>,
    /// Directory `file:` patches and manifests are confined to (`--template-root`); `None`
    /// refuses every `file:` entry.
    pub(super) template_root: Option<PathBuf>,
    /// Floor for a `syncInterval` stored without admission.
    pub(super) min_interval: Duration,
    /// The child kinds' shared caches the render reads from.
    pub(super) children: ChildCaches,
    /// How clusters without `spec.changePolicy.destructive` treat destructive plans
    /// (`--default-destructive-policy`).
    pub(super) default_destructive: DestructivePolicy,
    /// Change sets written to Omni whose record (status times and output, the Event) has not
    /// reached the object yet, by the object's UID (see [`UnrecordedSyncs`]).
    pub(super) unrecorded: UnrecordedSyncs,
}

/// Change sets written to Omni that the object's status does not record yet, by UID: at most
/// one per object, dropped once a pass sees the stored status record it (or the object goes).
///
/// A status write can be refused after the write to Omni (the stored object changed
/// meanwhile, e.g. labelled right after a spec edit); the pass then runs again on the newer
/// copy, finds Omni in sync and would report nothing changed, losing the record of the sync.
/// Keeping it here carries "changed" across that rerun.
#[derive(Debug, Default)]
pub(super) struct UnrecordedSyncs(Mutex<HashMap<String, Applied>>);

impl UnrecordedSyncs {
    /// Remembers `applied` for the object `uid` until its status records it.
    pub(super) fn remember(&self, uid: &str, applied: Applied) {
        self.lock().insert(uid.to_string(), applied);
    }

    /// The change set written for `uid` that `status` (the stored one) does not record yet;
    /// forgotten once it does.
    pub(super) fn pending(&self, uid: &str, status: Option<&OmniClusterStatus>) -> Option<Applied> {
        let mut map = self.lock();
        match map.get(uid) {
            Some(a) if a.recorded_in(status) => {
                map.remove(uid);
                None
            }
            other => other.cloned(),
        }
    }

    /// Drops what is kept for `uid` (the object is gone).
    pub(super) fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Applied>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A change set written to Omni, as its status, Event and log line record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    /// When it was written (`status.lastSyncTime`).
    pub(crate) at: jiff::Timestamp,
    /// What was done (trimmed; `status.lastSyncOutput`).
    pub(crate) output: String,
    /// The writes per resource type, one line (`Clusters: 1 updated; …`).
    pub(crate) summary: String,
    /// The hash of the plan applied, when the approval annotation released it.
    pub(crate) approved: Option<String>,
}

impl Applied {
    /// Whether `status` records this change set (its time and output).
    pub(crate) fn recorded_in(&self, status: Option<&OmniClusterStatus>) -> bool {
        status.is_some_and(|s| {
            s.last_sync_time == Some(self.at)
                && s.last_sync_output.as_deref() == Some(self.output.as_str())
        })
    }
}

impl ClusterState {
    /// The state of a controller started with `setup`, rendering from `children`.
    pub(super) fn new(setup: &Setup<'_>, children: ChildCaches) -> Self {
        Self {
            omni: setup.omni.clone(),
            template_root: setup.config.template_root.clone(),
            min_interval: setup.config.min_interval,
            children,
            default_destructive: setup.config.default_destructive,
            unrecorded: UnrecordedSyncs::default(),
        }
    }
}

/// How often `cluster` is re-checked: its `syncInterval`, clamped to the floor for intervals
/// stored without admission (so a tiny one cannot hot-loop).
pub(super) fn sync_interval(cluster: &OmniCluster, state: &ClusterState) -> Duration {
    crate::api::duration::clamp_interval(
        cluster
            .sync_interval()
            .to_std()
            .unwrap_or(Duration::from_secs(300)),
        state.min_interval,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change set is carried until a status records its time, then forgotten.
    #[test]
    fn an_unrecorded_sync_is_kept_until_the_status_records_it() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let t1 = t0 + jiff::SignedDuration::from_secs(60);
        let kept = UnrecordedSyncs::default();
        let status = |at: jiff::Timestamp, output: &str| OmniClusterStatus {
            last_sync_time: Some(at),
            last_sync_output: Some(output.into()),
            ..OmniClusterStatus::default()
        };
        let before = status(t0, "");
        assert_eq!(kept.pending("u", None), None);
        let applied = Applied {
            at: t1,
            output: "* updating Clusters.omni.sidero.dev(default/c)".into(),
            summary: "Clusters: 1 updated".into(),
            approved: None,
        };
        kept.remember("u", applied.clone());
        assert_eq!(kept.pending("u", Some(&before)), Some(applied.clone()));
        assert_eq!(
            kept.pending("u", Some(&before)),
            Some(applied.clone()),
            "still not recorded"
        );
        assert_eq!(
            kept.pending("u", Some(&status(t1, "other"))),
            Some(applied.clone()),
            "another sync in the same second is not this one"
        );
        assert_eq!(kept.pending("other", Some(&before)), None);
        let recorded = status(t1, &applied.output);
        assert_eq!(
            kept.pending("u", Some(&recorded)),
            None,
            "recorded: forgotten"
        );
        assert_eq!(kept.pending("u", Some(&before)), None);
        kept.remember("u", applied);
        kept.forget("u");
        assert_eq!(kept.pending("u", None), None);
    }
}
