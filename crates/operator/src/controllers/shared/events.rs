//! Publishing Events (`events.k8s.io/v1`): one Event per new happening, and a repeat of the same
//! happening (same object version, type, action and reason) within [`SERIES_WINDOW`] counted on
//! the first Event's `series` instead of a new Event, as kube's `Recorder` does.
//!
//! kube's `Recorder` keeps every Event it published, whole, for that window, and sweeps all of
//! them on every publish. A cold start of 1,000 clusters publishes about 14,500 Events, so it
//! held some 20 MB for six minutes and swept 14,500 entries per Event. This publisher keeps a
//! fingerprint, the Event's name and its count per happening, and sweeps at most once a minute.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};

/// How long a happening counts as a repeat of an earlier one (kube's `Recorder` uses the same).
pub(crate) const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// How often at most the happenings older than the window are forgotten.
const SWEEP_EVERY: SignedDuration = SignedDuration::from_mins(1);

/// Who publishes: the controller's name and this replica.
#[derive(Clone, Debug)]
pub(crate) struct Reporter {
    pub(crate) controller: String,
    pub(crate) instance: Option<String>,
}

/// An Event published within the window, to count repeats on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Published {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

/// What publishing a happening takes.
#[derive(Debug, PartialEq, Eq)]
enum Publish {
    /// A new Event.
    Create,
    /// A repeat: the `series` of the Event `name` in `namespace` becomes `count` at once.
    Repeat {
        namespace: String,
        name: String,
        count: i32,
    },
}

/// What was published within the window, by a fingerprint of the happening.
#[derive(Debug, Default)]
struct Recent {
    by_happening: HashMap<u64, Published>,
    swept: Option<Timestamp>,
}

impl Recent {
    /// Pure bookkeeping: what publishing happening `key` at `now` takes.
    fn plan(&mut self, key: u64, now: Timestamp) -> Publish {
        if self
            .swept
            .is_none_or(|t| now.duration_since(t) >= SWEEP_EVERY)
        {
            self.by_happening
                .retain(|_, p| now.duration_since(p.last) < SERIES_WINDOW);
            self.swept = Some(now);
        }
        match self.by_happening.get_mut(&key) {
            Some(p) if now.duration_since(p.last) < SERIES_WINDOW => {
                p.count += 1;
                p.last = now;
                Publish::Repeat {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    count: p.count,
                }
            }
            _ => Publish::Create,
        }
    }

    /// Records a created Event (a failed create records nothing, so it is tried afresh).
    fn created(&mut self, key: u64, namespace: String, name: String, now: Timestamp) {
        self.by_happening.insert(
            key,
            Published {
                namespace,
                name,
                count: 1,
                last: now,
            },
        );
    }
}

/// Publishes Events on behalf of one controller replica.
pub(crate) struct Events {
    client: Client,
    reporter: Reporter,
    recent: Mutex<Recent>,
}

impl Events {
    pub(crate) fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            recent: Mutex::default(),
        }
    }

    /// Publishes `event` about `regarding`: a new Event, or a repeat counted on the earlier one.
    pub(crate) async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = happening(event, regarding);
        let plan = self
            .recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .plan(key, now);
        match plan {
            Publish::Repeat {
                namespace,
                name,
                count,
            } => {
                let series = EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                };
                let patch = serde_json::json!({ "series": series });
                Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            Publish::Create => {
                let created = self.event(event, regarding, now);
                let namespace = created.metadata.namespace.clone().unwrap_or_default();
                let name = created.metadata.name.clone().unwrap_or_default();
                Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
                    .create(&PostParams::default(), &created)
                    .await?;
                self.recent
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .created(key, namespace, name, now);
            }
        }
        Ok(())
    }

    /// The Event object for a new happening. Objects without a namespace publish in `default`.
    fn event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let subject = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!("{subject}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            type_: Some(type_name(event.type_).to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..K8sEvent::default()
        }
    }
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// A fingerprint of a happening: the Event's type, action, reason and object (with its version).
fn happening(event: &Event, regarding: &ObjectReference) -> u64 {
    let objects: Vec<_> = std::iter::once(regarding)
        .chain(event.secondary.as_ref())
        .map(|r| {
            (
                &r.api_version,
                &r.kind,
                &r.namespace,
                &r.name,
                &r.uid,
                &r.resource_version,
                &r.field_path,
            )
        })
        .collect();
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        type_name(event.type_),
        &event.action,
        &event.reason,
        objects,
    )
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(secs)
    }

    fn created(recent: &mut Recent, key: u64, secs: i64) {
        assert_eq!(recent.plan(key, at(secs)), Publish::Create);
        recent.created(key, "ns".into(), format!("e{key}"), at(secs));
    }

    #[test]
    fn a_repeat_within_the_window_is_counted_on_the_first_event() {
        let mut recent = Recent::default();
        created(&mut recent, 1, 0);
        let repeat = |count| Publish::Repeat {
            namespace: "ns".into(),
            name: "e1".into(),
            count,
        };
        assert_eq!(recent.plan(1, at(60)), repeat(2));
        assert_eq!(
            recent.plan(1, at(400)),
            repeat(3),
            "the window runs from the last repeat"
        );
        assert_eq!(
            recent.plan(2, at(401)),
            Publish::Create,
            "another happening"
        );
    }

    #[test]
    fn a_happening_after_the_window_is_a_new_event_and_old_ones_are_forgotten() {
        let mut recent = Recent::default();
        created(&mut recent, 1, 0);
        created(&mut recent, 2, 300);
        assert_eq!(recent.plan(1, at(360)), Publish::Create);
        assert_eq!(
            recent.by_happening.keys().collect::<Vec<_>>(),
            [&2],
            "the sweep forgot the first happening"
        );
    }

    #[test]
    fn a_failed_create_is_tried_afresh() {
        let mut recent = Recent::default();
        assert_eq!(recent.plan(1, at(0)), Publish::Create);
        assert_eq!(recent.plan(1, at(1)), Publish::Create);
    }

    #[test]
    fn the_fingerprint_tells_objects_versions_and_reasons_apart() {
        let event = |reason: &str| Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some("n".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let object = |rv: &str| ObjectReference {
            name: Some("a".into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            ..ObjectReference::default()
        };
        let first = happening(&event("Ready"), &object("1"));
        assert_eq!(first, happening(&event("Ready"), &object("1")));
        assert_ne!(first, happening(&event("Failed"), &object("1")));
        assert_ne!(first, happening(&event("Ready"), &object("2")));
        let mut other_note = event("Ready");
        other_note.note = Some("other".into());
        assert_eq!(
            first,
            happening(&other_note, &object("1")),
            "the note is not part of the happening (as with kube's Recorder)"
        );
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod published;
