//! Writing `status` through the status subresource, only when it changed.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use kube::runtime::events::EventType;

use super::context::Context;
use super::error::{Disposition, Failure, PassError};
use crate::api::Reason;
use crate::api::common::{
    Condition, ConditionStatus, condition_types, find_condition, remove_condition, set_condition,
};
use crate::process::metrics::ResourceInfo;

/// Conditions of `new` whose status or reason differs from `old` (or that are new).
pub(crate) fn transitions<'a>(old: &[Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|c| {
            old.iter()
                .find(|o| o.type_ == c.type_)
                .is_none_or(|o| o.status != c.status || o.reason != c.reason)
        })
        .collect()
}

/// Whether condition `c` reads as good news (`Stalled` and `Drifted` are the inverted ones).
pub(crate) fn condition_healthy(c: &Condition) -> bool {
    match c.type_.as_str() {
        "Stalled" | "Drifted" => c.status != ConditionStatus::True,
        _ => c.status == ConditionStatus::True,
    }
}

/// The one transition between `old` and `new` worth an Event: `Ready`'s when it turned (it
/// sums the object up, and carries the reason of what changed), else `Suspended` appearing,
/// else the first condition that turned bad (a `Stalled=True`, or a second failure while
/// `Ready` stays `False`). The other conditions turning along with `Ready` (a fresh object's
/// `Accepted`, `Synced` and `Ready` together) are in the status; an Event each tripled the
/// writes of a cold start.
///
/// Progress is not a transition ([`Reason::marks_progress`]): neither a fresh object (no
/// `Ready` yet) whose first status says it converges or waits for its cluster or the export
/// of its kubeconfig, nor `Ready=False` moving from one such step to the next
/// (`WaitingForOmni` to `WaitingForMachines`, say). The status shows both; the Event that
/// matters follows when the object turns `Ready`, fails or stalls, and a cluster's template
/// going to Omni has its own (`ChangesApplied`). An Event per fresh dependant doubled the
/// Events of a cold start, and an Event per step made three per cluster. A fresh object
/// waiting for something nobody has made yet (a missing connection, template, cluster or
/// Secret) keeps its Normal Event: a person may have to act.
pub(crate) fn event_worthy<'a>(old: &[Condition], new: &'a [Condition]) -> Option<&'a Condition> {
    let old_ready = find_condition(old, condition_types::READY);
    let new_ready = find_condition(new, condition_types::READY);
    let step = |c: &Condition| Reason::of(&c.reason).is_some_and(Reason::marks_progress);
    let converging =
        |c: Option<&Condition>| c.is_some_and(|c| c.status == ConditionStatus::False && step(c));
    if old_ready.is_none() && converging(new_ready) {
        return None;
    }
    // A step of convergence shows in `Ready` and in every condition that mirrors it (a sync's
    // `Synced` says `KubeconfigPending` beside `Ready`): none of them is news while `Ready`
    // only progresses.
    let progress = converging(old_ready) && converging(new_ready);
    let turned: Vec<&Condition> = transitions(old, new)
        .into_iter()
        .filter(|c| !(progress && step(c)))
        .collect();
    turned
        .iter()
        .find(|c| c.type_ == condition_types::READY)
        .or_else(|| {
            turned
                .iter()
                .find(|c| c.type_ == condition_types::SUSPENDED)
        })
        .or_else(|| turned.iter().find(|c| !condition_healthy(c)))
        .copied()
}

/// The type of the Event for condition `c` turning, among the object's `conditions`: `Normal`
/// when the condition is healthy, when the object waits or converges (`Reconciling=True`:
/// waiting is not a failure), is suspended (a user's choice; a fresh suspended object's `Ready`
/// is `Unknown`) or waits for a person (a held plan); `Warning` otherwise.
pub(crate) fn event_type(c: &Condition, conditions: &[Condition]) -> EventType {
    let holds = |type_: &str| {
        find_condition(conditions, type_).is_some_and(|r| r.status == ConditionStatus::True)
    };
    let waiting = holds(condition_types::RECONCILING) || holds(condition_types::SUSPENDED);
    let for_a_person = Reason::of(&c.reason).is_some_and(Reason::awaits_a_person);
    if condition_healthy(c) || (waiting && c.type_ != condition_types::STALLED) || for_a_person {
        EventType::Normal
    } else {
        EventType::Warning
    }
}

/// Status fields that record *when* something was tried rather than *what* happened. A change
/// of these alone is not worth a write: a failing object retried with backoff would otherwise
/// rewrite its status on every attempt. They are written along with any real change.
pub(crate) const TIMESTAMP_ONLY_FIELDS: &[&str] = &["lastAttemptTime"];

/// Whether `old` and `new` differ in more than the [`TIMESTAMP_ONLY_FIELDS`].
fn differs_beyond_timestamps(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !TIMESTAMP_ONLY_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    };
    strip(old) != strip(new)
}

/// The JSON merge patch turning status `old` into `new`: changed and new fields are set,
/// fields absent from `new` are nulled (merge-patch deletion) at every depth, since a merge
/// patch merges nested objects rather than replacing them. `None` when they are equal or
/// differ only in [`TIMESTAMP_ONLY_FIELDS`].
pub(crate) fn status_patch(old: &Value, new: &Value) -> Option<Value> {
    if !differs_beyond_timestamps(old, new) {
        return None;
    }
    let empty = Value::Object(Map::new());
    let new = if new.is_object() { new } else { &empty };
    Some(serde_json::json!({ "status": merge_patch(old, new) }))
}

/// The merge patch from `old` to `new` (RFC 7386): objects are diffed key by key, recursively,
/// with removed keys nulled; anything else is replaced whole.
fn merge_patch(old: &Value, new: &Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return new.clone();
    };
    let mut patch = Map::new();
    for (key, value) in new {
        match old.get(key) {
            Some(before) if before == value => {}
            Some(before) if before.is_object() && value.is_object() => {
                patch.insert(key.clone(), merge_patch(before, value));
            }
            _ => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    Value::Object(patch)
}

/// Writes `new_status` if it differs from the status stored in `obj`. Returns whether a
/// write happened.
///
/// `obj` comes from the watch cache, which can lag behind the server (a watcher backing off
/// after cut streams or `410 Gone` can stay seconds behind). A status computed from a stale
/// copy would rewrite what a previous reconcile already wrote, with fresh transition times.
/// So a needed write is first checked against the server's copy: when that is newer,
/// nothing is written and [`PassError::Stale`] hands it to the caller to reconcile again on.
/// The write itself carries the checked `resourceVersion`, so a change landing in between is
/// refused with `409 Conflict` rather than overwritten, and handled like a stale cache.
pub(crate) async fn write<K>(api: &Api<K>, obj: &K, desired: Value) -> Result<bool, PassError<K>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let object = serde_json::to_value(obj)?;
    let current = object
        .get("status")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let Some(mut patch) = status_patch(&current, &desired) else {
        return Ok(false);
    };
    let name = obj.meta().name.clone().unwrap_or_default();
    let cached = obj.meta().resource_version.clone();
    let stored = api.get(&name).await?;
    if stored.meta().resource_version != cached {
        return Err(PassError::stale(stored));
    }
    if let Some(rv) = cached {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        // Another writer landed between the check and the write: the same as a stale cache.
        Err(kube::Error::Api(s)) if s.code == 409 => Err(PassError::stale(api.get(&name).await?)),
        Err(e) => Err(e.into()),
    }
}

/// A status type of ours: every one keeps its conditions in `conditions` (each kind's module
/// implements it for its status).
pub(crate) trait Conditioned {
    /// The conditions of this status.
    fn conditions(&self) -> &[Condition];
    /// The conditions of this status, to change.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// The reconcile request (`omni.texashpc.com/reconcile-requested-at`) last handled, to
    /// record a newer one.
    fn handled_reconcile_mut(&mut self) -> &mut Option<String>;
}

/// Records on `status` the reconcile request `meta` carries, as handled by the pass that wrote
/// it: every pass that reaches its status write handles the request it was woken for.
pub(crate) fn record_reconcile_request(
    status: &mut impl Conditioned,
    meta: &kube::api::ObjectMeta,
) {
    if let Some(token) =
        crate::api::keys::annotation(meta, crate::api::keys::RECONCILE_REQUESTED_AT_ANNOTATION)
    {
        *status.handled_reconcile_mut() = Some(token.to_string());
    }
}

/// A kind of ours whose status [`report`] writes (each kind's module implements it).
pub(crate) trait Reported:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug
{
    /// Its status type.
    type Status: Conditioned + Serialize + Send + Sync;
    /// The stored status (none yet on a new object).
    fn stored_status(&self) -> Option<&Self::Status>;
    /// The conditions of the stored status (none when there is no status yet).
    fn stored_conditions(&self) -> &[Condition] {
        self.stored_status().map_or(&[], |s| s.conditions())
    }
    /// Whether the object is suspended (the `suspended` label of its info metric).
    fn suspended(&self) -> bool {
        false
    }
}

/// Implements [`Conditioned`] for a status type and [`Reported`] for the kind whose `status`
/// field it is: `reported!(Kind => KindStatus)`, with `suspended` read by a function of the
/// object where the kind can be suspended. Each kind's module invokes it for itself.
macro_rules! reported {
    ($kind:ty => $status:ty $(, suspended: $suspended:expr)?) => {
        impl $crate::controllers::shared::status::Conditioned for $status {
            fn conditions(&self) -> &[$crate::api::common::Condition] {
                &self.conditions
            }
            fn conditions_mut(&mut self) -> &mut Vec<$crate::api::common::Condition> {
                &mut self.conditions
            }
            fn handled_reconcile_mut(&mut self) -> &mut Option<String> {
                &mut self.last_handled_reconcile_at
            }
        }

        impl $crate::controllers::shared::status::Reported for $kind {
            type Status = $status;
            fn stored_status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            $(
                fn suspended(&self) -> bool {
                    let suspended: fn(&$kind) -> bool = $suspended;
                    suspended(self)
                }
            )?
        }
    };
}
pub(crate) use reported;

/// The end of every reconcile: writes `new` if it changed ([`write`]), publishes the Event of
/// the condition transition it makes (only when written) and sets the object's info metric from
/// its `Ready` condition. Returns whether a write happened.
pub(crate) async fn report<K>(ctx: &Context, obj: &K, new: &K::Status) -> Result<bool, PassError<K>>
where
    K: Reported<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let namespace = obj.meta().namespace.clone().unwrap_or_default();
    let desired = ctx
        .baseline
        .stamp_status(&K::kind(&()), serde_json::to_value(new)?);
    let written = write(&ctx.api::<K>(&namespace), obj, desired).await?;
    if written {
        condition_events(ctx, obj, obj.stored_conditions(), new.conditions()).await;
    }
    let ready = find_condition(new.conditions(), condition_types::READY);
    ctx.metrics.set_resource_info(&ResourceInfo {
        kind: &K::kind(&()),
        namespace: &namespace,
        name: obj.meta().name.as_deref().unwrap_or_default(),
        ready: ready.map_or("Unknown", |c| c.status.as_str()),
        reason: ready.map_or("", |c| c.reason.as_str()),
        suspended: obj.suspended(),
    });
    Ok(written)
}

/// Publishes at most one Event for a status write, for the condition transition that says the
/// most (see [`event_worthy`]), typed by [`event_type`].
async fn condition_events<K>(ctx: &Context, obj: &K, old: &[Condition], new: &[Condition])
where
    K: Resource<DynamicType = ()>,
{
    if let Some(c) = event_worthy(old, new) {
        let note = format!("{}={:?}: {}", c.type_, c.status, c.message);
        ctx.event_for(obj.object_ref(&()), event_type(c, new), &c.reason, note)
            .await;
    }
}

/// Where an object stands in kstatus terms after a pass; each sets `Ready`, and
/// `Reconciling` or `Stalled` (both present only while `True`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its purpose is achieved: `Ready=True`.
    Ready,
    /// It converges, or waits for something: `Ready=False`, `Reconciling=True`.
    Reconciling,
    /// It failed and is retried, or waits for a person (a held plan): `Ready=False` alone.
    NotReady,
    /// Only a spec change can help: `Ready=False`, `Stalled=True`.
    Stalled,
}

impl From<Disposition> for Standing {
    fn from(d: Disposition) -> Self {
        match d {
            Disposition::Waiting => Standing::Reconciling,
            Disposition::Retrying => Standing::NotReady,
            Disposition::Stalled => Standing::Stalled,
        }
    }
}

/// Pure: sets `Ready`, `Reconciling` and `Stalled` on `conditions` for `standing`, the first
/// with `reason` and `message`, the other two (when `True`) with the same; a kstatus
/// condition that does not hold is removed. Returns whether anything changed.
pub(crate) fn set_standing(
    conditions: &mut Vec<Condition>,
    standing: Standing,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> bool {
    let condition =
        |type_: &str, ok: bool| Condition::new(type_, ok.into(), reason, message, generation, now);
    let mut changed = set_condition(
        conditions,
        condition(condition_types::READY, standing == Standing::Ready),
    );
    for (type_, holds) in [
        (
            condition_types::RECONCILING,
            standing == Standing::Reconciling,
        ),
        (condition_types::STALLED, standing == Standing::Stalled),
    ] {
        changed |= if holds {
            set_condition(conditions, condition(type_, true))
        } else {
            remove_condition(conditions, type_)
        };
    }
    changed
}

/// Pure: marks `conditions` suspended (`spec.suspend`): `Suspended=True` with `message`,
/// `Ready` as it was (`Unknown`, reason `Suspended`, when the object never reported one),
/// `Reconciling` removed (nothing converges while the operator leaves the target alone).
pub(crate) fn set_suspended(
    conditions: &mut Vec<Condition>,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let condition = |type_: &str, status| {
        Condition::new(type_, status, Reason::Suspended, message, generation, now)
    };
    if find_condition(conditions, condition_types::READY).is_none() {
        set_condition(
            conditions,
            condition(condition_types::READY, ConditionStatus::Unknown),
        );
    }
    remove_condition(conditions, condition_types::RECONCILING);
    set_condition(
        conditions,
        condition(condition_types::SUSPENDED, ConditionStatus::True),
    );
}

/// Status builder starting from the stored status `s`, so a failure keeps what the last
/// success recorded: conditions set on it carry the object's generation and one time.
pub(crate) struct Draft<S> {
    /// The status being built.
    pub(crate) s: S,
    generation: Option<i64>,
    now: jiff::Timestamp,
    /// The condition that reports the outcome along with `Ready` (`Exported`, `Released`).
    outcome_type: &'static str,
}

impl<S: Conditioned> Draft<S> {
    /// A draft of `s` for an object at `generation`, stamped `now`, whose outcome condition is
    /// `outcome_type`.
    pub(crate) fn new(
        s: S,
        generation: Option<i64>,
        now: jiff::Timestamp,
        outcome_type: &'static str,
    ) -> Self {
        Self {
            s,
            generation,
            now,
            outcome_type,
        }
    }

    /// Sets condition `type_` to `ok` with `reason` and `message`.
    pub(crate) fn set(&mut self, type_: &str, ok: bool, reason: Reason, message: &str) {
        set_condition(
            self.s.conditions_mut(),
            Condition::new(type_, ok.into(), reason, message, self.generation, self.now),
        );
    }

    /// `Accepted`: whether the OmniCluster `cluster` the object names exists.
    pub(crate) fn accepted(&mut self, cluster: &str, exists: bool) {
        set_condition(
            self.s.conditions_mut(),
            Condition::accepted(cluster, exists, self.generation, self.now),
        );
    }

    /// The time the draft's conditions are stamped with.
    pub(crate) fn now(&self) -> jiff::Timestamp {
        self.now
    }

    /// The outcome condition and `Ready` together, with one reason and message, and the
    /// kstatus conditions of `standing` (see [`set_standing`]).
    pub(crate) fn outcome(&mut self, standing: Standing, reason: Reason, message: &str) {
        self.set(
            self.outcome_type,
            standing == Standing::Ready,
            reason,
            message,
        );
        self.stand(standing, reason, message);
    }

    /// [`Draft::outcome`] of `failure`: its reason, message and disposition.
    pub(crate) fn failed_with(&mut self, failure: &impl Failure) {
        let message = failure.to_string();
        self.outcome(failure.disposition().into(), failure.reason(), &message);
    }

    /// `Ready` and the kstatus conditions of `standing` (see [`set_standing`]).
    pub(crate) fn stand(&mut self, standing: Standing, reason: Reason, message: &str) {
        set_standing(
            self.s.conditions_mut(),
            standing,
            reason,
            message,
            self.generation,
            self.now,
        );
    }

    /// `spec.suspend`: see [`set_suspended`].
    pub(crate) fn suspend(&mut self, message: &str) {
        set_suspended(self.s.conditions_mut(), message, self.generation, self.now);
    }

    /// Not suspended (any more): `Suspended` removed.
    pub(crate) fn resume(&mut self) {
        remove_condition(self.s.conditions_mut(), condition_types::SUSPENDED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::secret_sync::OmniSecretSyncStatus;
    use serde_json::json;

    /// Conditions of an object Ready at generation 1 since `t`.
    fn ready_now(t: jiff::Timestamp) -> Vec<Condition> {
        let mut ready = Vec::new();
        set_standing(
            &mut ready,
            Standing::Ready,
            Reason::Running,
            "up",
            Some(1),
            t,
        );
        ready
    }

    fn cond(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
        Condition {
            reason: reason.to_string(),
            ..Condition::new(
                type_,
                status,
                Reason::Accepted,
                "m",
                Some(1),
                jiff::Timestamp::UNIX_EPOCH,
            )
        }
    }

    #[test]
    fn one_event_per_write_for_the_transition_that_says_the_most() {
        use ConditionStatus::{False, True};
        let worthy = |old: &[Condition], new: &[Condition]| {
            event_worthy(old, new).map(|c| (c.type_.clone(), c.status, c.reason.clone()))
        };
        let fresh = [
            cond("Accepted", True, "Accepted"),
            cond("Synced", True, "Synced"),
            cond("Ready", True, "Synced"),
        ];
        assert_eq!(
            worthy(&[], &fresh),
            Some(("Ready".into(), True, "Synced".into())),
            "a fresh object's three conditions: one Event, Ready's"
        );
        let failing = [
            cond("Accepted", True, "Accepted"),
            cond("Synced", False, "SyncFailed"),
            cond("Ready", False, "SyncFailed"),
        ];
        assert_eq!(
            worthy(&fresh, &failing),
            Some(("Ready".into(), False, "SyncFailed".into()))
        );
        let stalled = [
            failing.to_vec(),
            vec![cond("Stalled", True, "UnsupportedOmniAPI")],
        ]
        .concat();
        assert_eq!(
            worthy(&failing, &stalled),
            Some(("Stalled".into(), True, "UnsupportedOmniAPI".into())),
            "a condition turning bad while Ready stays False"
        );
        let mut recovered_secondary = failing.to_vec();
        recovered_secondary[1] = cond("Synced", True, "Synced");
        assert_eq!(
            worthy(&failing, &recovered_secondary),
            None,
            "a secondary condition turning good while Ready stays False"
        );
        assert_eq!(worthy(&fresh, &fresh), None);
    }

    #[test]
    fn a_draft_sets_the_outcome_condition_and_ready_together() {
        let mut d = Draft::new(
            OmniSecretSyncStatus::default(),
            Some(3),
            jiff::Timestamp::UNIX_EPOCH,
            condition_types::SYNCED,
        );
        d.outcome(Standing::NotReady, Reason::SyncFailed, "boom");
        let got: Vec<(&str, ConditionStatus, &str, Option<i64>)> =
            d.s.conditions()
                .iter()
                .map(|c| {
                    (
                        c.type_.as_str(),
                        c.status,
                        c.reason.as_str(),
                        c.observed_generation,
                    )
                })
                .collect();
        assert_eq!(
            got,
            vec![
                ("Synced", ConditionStatus::False, "SyncFailed", Some(3)),
                ("Ready", ConditionStatus::False, "SyncFailed", Some(3)),
            ]
        );
    }

    fn kinds(conditions: &[Condition]) -> Vec<(&str, ConditionStatus, &str)> {
        conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
            .collect()
    }

    /// Each standing sets `Ready`, and `Reconciling` or `Stalled` only while they hold: the
    /// kstatus conditions are present only when `True`.
    #[test]
    fn a_standing_sets_ready_and_only_the_kstatus_condition_that_holds() {
        use ConditionStatus::{False, True};
        let t = jiff::Timestamp::UNIX_EPOCH;
        let mut c = Vec::new();
        let set = |c: &mut Vec<Condition>, standing, reason| {
            set_standing(c, standing, reason, "m", Some(1), t)
        };
        assert!(set(
            &mut c,
            Standing::Reconciling,
            Reason::WaitingForMachines
        ));
        assert_eq!(
            kinds(&c),
            [
                ("Ready", False, "WaitingForMachines"),
                ("Reconciling", True, "WaitingForMachines")
            ]
        );
        assert!(!set(
            &mut c,
            Standing::Reconciling,
            Reason::WaitingForMachines
        ));
        assert!(set(&mut c, Standing::Stalled, Reason::OmniRejected));
        assert_eq!(
            kinds(&c),
            [
                ("Ready", False, "OmniRejected"),
                ("Stalled", True, "OmniRejected")
            ]
        );
        assert!(set(&mut c, Standing::NotReady, Reason::SyncFailed));
        assert_eq!(kinds(&c), [("Ready", False, "SyncFailed")]);
        assert!(set(&mut c, Standing::Ready, Reason::Running));
        assert_eq!(kinds(&c), [("Ready", True, "Running")]);
    }

    /// Suspending keeps `Ready` as it was (or `Unknown` on an object that never had one),
    /// drops `Reconciling` and adds `Suspended=True`.
    #[test]
    fn suspending_keeps_ready_and_adds_suspended() {
        use ConditionStatus::{True, Unknown};
        let t = jiff::Timestamp::UNIX_EPOCH;
        let mut fresh = Vec::new();
        set_suspended(&mut fresh, "suspended", Some(1), t);
        assert_eq!(
            kinds(&fresh),
            [
                ("Ready", Unknown, "Suspended"),
                ("Suspended", True, "Suspended")
            ]
        );
        let mut ready = ready_now(t);
        set_suspended(&mut ready, "suspended", Some(2), t);
        assert_eq!(
            kinds(&ready),
            [("Ready", True, "Running"), ("Suspended", True, "Suspended")]
        );
        let mut converging = Vec::new();
        set_standing(
            &mut converging,
            Standing::Reconciling,
            Reason::Upgrading,
            "m",
            Some(1),
            t,
        );
        set_suspended(&mut converging, "suspended", Some(1), t);
        assert_eq!(
            kinds(&converging),
            [
                ("Ready", ConditionStatus::False, "Upgrading"),
                ("Suspended", True, "Suspended")
            ]
        );
    }

    /// Waiting and converging are Normal; a failure and a stall are Warnings; suspending is
    /// worth a (Normal) Event although `Ready` stays.
    #[test]
    fn waiting_is_normal_and_failing_is_a_warning() {
        let t = jiff::Timestamp::UNIX_EPOCH;
        let typed = |standing, reason| {
            let mut c = Vec::new();
            set_standing(&mut c, standing, reason, "m", Some(1), t);
            let worthy = event_worthy(&[], &c).cloned();
            worthy.map(|w| (w.type_.clone(), event_type(&w, &c)))
        };
        // A fresh object that starts out waiting: no Event until it turns.
        assert_eq!(typed(Standing::Reconciling, Reason::ClusterNotReady), None);
        assert_eq!(
            typed(Standing::Reconciling, Reason::KubeconfigPending),
            None
        );
        // A converging cluster: its first step is an Event, the next steps are progress, a
        // failure on the way is an Event again.
        let step = |conditions: &[Condition], reason| {
            let mut c = conditions.to_vec();
            set_standing(&mut c, Standing::Reconciling, reason, "m", Some(1), t);
            c
        };
        let omni = step(&[], Reason::WaitingForOmni);
        assert_eq!(event_worthy(&[], &omni), None, "the first step");
        let machines = step(&omni, Reason::WaitingForMachines);
        assert_eq!(event_worthy(&omni, &machines), None, "progress");
        let kubernetes = step(&machines, Reason::KubernetesNotReady);
        assert_eq!(event_worthy(&machines, &kubernetes), None, "progress");
        let cluster_ready = step(&[], Reason::ClusterNotReady);
        let mut export_pending = step(&cluster_ready, Reason::KubeconfigPending);
        // A sync's `Synced` condition mirrors the step.
        set_condition(
            &mut export_pending,
            Condition::new(
                condition_types::SYNCED,
                ConditionStatus::False,
                Reason::KubeconfigPending,
                "m",
                Some(1),
                t,
            ),
        );
        assert_eq!(
            event_worthy(&cluster_ready, &export_pending),
            None,
            "a dependant whose cluster is Ready waits for the export of its kubeconfig"
        );
        let missing = step(&cluster_ready, Reason::MissingSecret);
        assert!(
            event_worthy(&cluster_ready, &missing).is_some(),
            "a Secret nobody makes: a person may have to act"
        );
        let checks = step(&kubernetes, Reason::HealthCheckFailed);
        assert!(
            event_worthy(&kubernetes, &checks).is_some(),
            "a failed health check is news"
        );
        let mut failed = machines.clone();
        set_standing(
            &mut failed,
            Standing::NotReady,
            Reason::StatusFailed,
            "m",
            Some(1),
            t,
        );
        assert!(event_worthy(&machines, &failed).is_some(), "a failure");
        let ready = ready_now(t);
        assert!(event_worthy(&kubernetes, &ready).is_some(), "Ready");
        let mut waiting_again = ready.clone();
        set_standing(
            &mut waiting_again,
            Standing::Reconciling,
            Reason::ClusterNotReady,
            "m",
            Some(2),
            t,
        );
        let worthy = event_worthy(&ready, &waiting_again).cloned();
        assert_eq!(
            worthy.map(|w| (w.type_.clone(), event_type(&w, &waiting_again))),
            Some(("Ready".into(), EventType::Normal)),
            "a Ready object that turns to waiting: a Normal Event"
        );
        assert_eq!(
            typed(Standing::NotReady, Reason::SyncFailed),
            Some(("Ready".into(), EventType::Warning))
        );
        assert_eq!(
            typed(Standing::Stalled, Reason::OmniRejected),
            Some(("Ready".into(), EventType::Warning))
        );
        assert_eq!(
            typed(Standing::Ready, Reason::Running),
            Some(("Ready".into(), EventType::Normal))
        );
        let mut held = Vec::new();
        set_standing(
            &mut held,
            Standing::NotReady,
            Reason::ApprovalRequired,
            "m",
            Some(1),
            t,
        );
        assert_eq!(event_type(&held[0], &held), EventType::Normal);
        let mut suspended = ready.clone();
        set_suspended(&mut suspended, "suspended", Some(2), t);
        let worthy = event_worthy(&ready, &suspended).cloned();
        assert_eq!(
            worthy.map(|w| (w.type_.clone(), event_type(&w, &suspended))),
            Some(("Suspended".into(), EventType::Normal))
        );
        assert!(event_worthy(&suspended, &suspended).is_none());
        // A fresh object created suspended: its `Ready` appears `Unknown`, a Normal Event.
        let mut fresh = Vec::new();
        set_suspended(&mut fresh, "suspended", Some(1), t);
        let worthy = event_worthy(&[], &fresh).cloned();
        assert_eq!(
            worthy.map(|w| (w.type_.clone(), event_type(&w, &fresh))),
            Some(("Ready".into(), EventType::Normal))
        );
    }

    #[test]
    fn equal_status_needs_no_write() {
        let s = json!({"observedGeneration": 1, "conditions": []});
        assert_eq!(status_patch(&s, &s.clone()), None);
    }

    #[test]
    fn a_new_attempt_time_alone_needs_no_write() {
        let old = json!({"observedGeneration": 1, "lastAttemptTime": "2026-01-01T00:00:00Z"});
        let retried = json!({"observedGeneration": 1, "lastAttemptTime": "2026-01-01T00:05:00Z"});
        assert_eq!(status_patch(&old, &retried), None);
        let first = json!({"observedGeneration": 1});
        assert_eq!(
            status_patch(&first, &retried),
            None,
            "recording the first attempt time alone is no change either"
        );
    }

    #[test]
    fn an_attempt_time_is_written_with_a_real_change() {
        let old = json!({"observedGeneration": 1, "lastAttemptTime": "2026-01-01T00:00:00Z"});
        let new = json!({"observedGeneration": 2, "lastAttemptTime": "2026-01-01T00:05:00Z"});
        assert_eq!(
            status_patch(&old, &new),
            Some(
                json!({"status": {"observedGeneration": 2, "lastAttemptTime": "2026-01-01T00:05:00Z"}})
            )
        );
    }

    /// A merge patch merges nested objects: a field removed inside one must be nulled there.
    /// Before, only top-level fields were, so `manifests.lastError` outlived the error.
    #[test]
    fn fields_removed_inside_nested_objects_are_nulled() {
        let old = json!({"manifests": {"applied": 1, "lastError": "boom"}, "phase": "RUNNING"});
        let new = json!({"manifests": {"applied": 2}, "phase": "RUNNING"});
        assert_eq!(
            status_patch(&old, &new),
            Some(json!({"status": {"manifests": {"applied": 2, "lastError": null}}}))
        );
    }

    #[test]
    fn removed_fields_are_nulled() {
        let old = json!({"observedGeneration": 1, "endpoint": "x"});
        let new = json!({"observedGeneration": 2});
        assert_eq!(
            status_patch(&old, &new),
            Some(json!({"status": {"observedGeneration": 2, "endpoint": null}}))
        );
    }

    #[test]
    fn transitions_report_status_and_reason_changes_only() {
        let old = vec![
            cond("Ready", ConditionStatus::False, "SyncFailed"),
            cond("Synced", ConditionStatus::True, "Synced"),
        ];
        let mut new = old.clone();
        new[0] = cond("Ready", ConditionStatus::True, "Synced");
        new[1].message = "other".into();
        new.push(cond("Validated", ConditionStatus::True, "Validated"));
        let t: Vec<&str> = transitions(&old, &new)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(t, vec!["Ready", "Validated"]);
    }
}
