//! Plan, guard and adopt (pure): what an OmniCluster's change set means, and whether it may be
//! written to Omni.
//!
//! The cluster controller plans every pass anyway (reads only, see
//! [`omni_client::template::plan_sync_for`]); this module turns that plan into the change set a
//! user judges ([`ChangeSet`]: the operator's own bookkeeping annotations left out), says what
//! in it would destroy something ([`destruction`]), gives it a stable keyed hash, and decides
//! from `spec.changePolicy`, the approval annotation and adoption whether it is applied or held
//! ([`decide`]). Nothing here does I/O, so every rule is a table test.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use omni_client::proto::specs::machine_set_spec::MachineAllocation;
use omni_client::proto::specs::machine_set_spec::machine_allocation::Type as AllocationType;
use omni_client::template::{
    ChangeAction, FieldChange, Plan, ResourceChange, ResourceRef, Spec, keys, types,
};
use sha2::Sha256;

use crate::api::Reason;
use crate::api::keys::{APPROVE_PLAN_ANNOTATION, OMNI_OWNER_ANNOTATION};
use crate::api::plan::{
    ChangeMode, DestructivePolicy, PlanCount, PlanStatus, PlannedChange, PlannedField,
};

/// Annotations the operator writes on Omni resources for itself (its owner stamp, Omni's
/// `managed-by-gitops-tools`): not a change a user judges, nor the cluster's configuration.
pub(crate) const OPERATOR_BOOKKEEPING: [&str; 2] =
    [OMNI_OWNER_ANNOTATION, keys::MANAGED_BY_GITOPS_TOOLS];

/// At most this many changes are listed in `status.plan.changes`.
const MAX_CHANGES_LISTED: usize = 100;
/// At most this many fields per listed change.
const MAX_FIELDS_LISTED: usize = 20;
/// Longer field values are cut to this many bytes (on a character boundary).
const MAX_VALUE_BYTES: usize = 256;
/// At most this many destructive changes in `status.plan.destructiveChanges`.
const MAX_DESTROYS_LISTED: usize = 20;
/// At most this many destructive changes named in a condition message.
const MAX_DESTROYS_IN_MESSAGE: usize = 3;

/// One change a user judges: the resource and the fields it sets or changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// What happens to the resource.
    pub(crate) action: ChangeAction,
    /// Which resource.
    pub(crate) resource: ResourceRef,
    /// The fields it sets (create) or changes (update); none for a delete.
    pub(crate) fields: Vec<FieldChange>,
}

/// The change set of a plan as a user judges it: the operator's own bookkeeping (its owner
/// stamp, Omni's `managed-by-gitops-tools` annotation) is left out, so a plan that only adds
/// those is empty, and what it would destroy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChangeSet {
    /// Creates, updates, deletes, in apply order.
    pub(crate) changes: Vec<Planned>,
    /// What applying it would destroy, one line each.
    pub(crate) destroys: Vec<String>,
}

impl ChangeSet {
    /// The change set of `plan`, leaving out changes of the annotations `bookkeeping` (an
    /// update that changes nothing else is left out whole).
    pub(crate) fn from_plan(plan: &Plan, bookkeeping: &[&str]) -> Self {
        let is_bookkeeping = |f: &FieldChange| {
            f.path
                .strip_prefix("annotations.")
                .is_some_and(|k| bookkeeping.contains(&k))
        };
        let mut changes = Vec::new();
        let mut destroys = Vec::new();
        for change in &plan.changes {
            let fields: Vec<FieldChange> = match change.action {
                ChangeAction::Delete => Vec::new(),
                _ => change
                    .fields()
                    .into_iter()
                    .filter(|f| !is_bookkeeping(f))
                    .collect(),
            };
            if change.action == ChangeAction::Update && fields.is_empty() {
                continue;
            }
            destroys.extend(destruction(change, &plan.allocated));
            changes.push(Planned {
                action: change.action,
                resource: change.resource.clone(),
                fields,
            });
        }
        Self { changes, destroys }
    }

    /// Deleting Omni cluster `cluster` (the OmniCluster is being deleted and owns it).
    pub(crate) fn deletion(cluster: &str, destroy_machines: bool) -> Self {
        let mut destroy = format!(
            "deletes Omni cluster {cluster:?} with its machine sets, config patches and manifests"
        );
        let mut fields = Vec::new();
        if destroy_machines {
            destroy.push_str(", and removes its disconnected machines from Omni");
            fields.push(FieldChange {
                path: "deletePolicy.destroyMachines".into(),
                before: None,
                after: Some(omni_client::template::FieldValue::Text("true".into())),
            });
        }
        Self {
            changes: vec![Planned {
                action: ChangeAction::Delete,
                resource: ResourceRef::new(types::CLUSTER, cluster),
                fields,
            }],
            destroys: vec![destroy],
        }
    }

    /// Whether it changes nothing a user would see.
    pub(crate) fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Whether applying it destroys something.
    pub(crate) fn is_destructive(&self) -> bool {
        !self.destroys.is_empty()
    }

    /// The plan's hash: HMAC-SHA-256 under `key` of a canonical form of every change (every
    /// field, content by its digest) and of what it destroys, as 64 hex digits. The same plan
    /// always has the same hash; any change of it, a content change included, another. It is
    /// keyed (by the connection's key, which readers of the status do not have) because it
    /// covers content digests, and a digest of short secret content can be guessed.
    pub(crate) fn hash(&self, key: &[u8]) -> String {
        type Field = (String, Option<String>, Option<String>);
        let mut canonical: Vec<(&str, &str, &str, Vec<Field>)> = self
            .changes
            .iter()
            .map(|c| {
                (
                    c.resource.resource_type.as_str(),
                    c.resource.id.as_str(),
                    c.action.verb(),
                    c.fields
                        .iter()
                        .map(|f| {
                            (
                                f.path.clone(),
                                f.before.as_ref().map(|v| v.canonical()),
                                f.after.as_ref().map(|v| v.canonical()),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        canonical.sort();
        let bytes = serde_json::to_vec(&(canonical, &self.destroys)).unwrap_or_default();
        // HMAC takes a key of any length.
        let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
            Ok(mac) => mac,
            Err(_) => return String::new(),
        };
        mac.update(b"omni-operator plan v1\0");
        mac.update(&bytes);
        hex::encode(mac.finalize().into_bytes())
    }

    /// Counts per Omni resource type, sorted by type.
    fn counts(&self) -> Vec<PlanCount> {
        counts_of(self.changes.iter().map(|c| (c.action, &c.resource)))
    }

    /// One line: `1 to create, 2 to update, 1 to delete (destructive)`, or `no changes`.
    pub(crate) fn summary(&self) -> String {
        let count = |action| self.changes.iter().filter(|c| c.action == action).count();
        let parts: Vec<String> = [
            (ChangeAction::Create, "to create"),
            (ChangeAction::Update, "to update"),
            (ChangeAction::Delete, "to delete"),
        ]
        .into_iter()
        .filter_map(|(action, words)| {
            let n = count(action);
            (n > 0).then(|| format!("{n} {words}"))
        })
        .collect();
        if parts.is_empty() {
            return "no changes".into();
        }
        let mut line = parts.join(", ");
        if self.is_destructive() {
            line.push_str(" (destructive)");
        }
        line
    }

    /// `status.plan` for this change set, bounded in size: at most 100 changes of at most 20
    /// fields each, values cut at 256 bytes, 20 destructive changes.
    pub(crate) fn status(
        &self,
        hash: &str,
        generation: i64,
        ignored_approval: Option<&str>,
    ) -> PlanStatus {
        let listed: Vec<PlannedChange> = self
            .changes
            .iter()
            .take(MAX_CHANGES_LISTED)
            .map(|c| PlannedChange {
                action: c.action.verb().into(),
                type_: short_type(&c.resource.resource_type).into(),
                id: c.resource.id.clone(),
                fields: c
                    .fields
                    .iter()
                    .take(MAX_FIELDS_LISTED)
                    .map(|f| PlannedField {
                        path: f.path.clone(),
                        from: f.before.as_ref().map(|v| cut(v.to_string())),
                        to: f.after.as_ref().map(|v| cut(v.to_string())),
                    })
                    .collect(),
                omitted_fields: count_u32(c.fields.len().saturating_sub(MAX_FIELDS_LISTED)),
            })
            .collect();
        PlanStatus {
            hash: hash.to_string(),
            generation,
            summary: self.summary(),
            counts: self.counts(),
            destructive: self.is_destructive(),
            destructive_changes: self
                .destroys
                .iter()
                .take(MAX_DESTROYS_LISTED)
                .cloned()
                .collect(),
            ignored_approval: ignored_approval.map(str::to_string),
            changes: listed,
            omitted_changes: count_u32(self.changes.len().saturating_sub(MAX_CHANGES_LISTED)),
        }
    }

    /// The destructive changes for a message: the first few, and how many more.
    fn destroys_in_brief(&self) -> String {
        let mut text = self
            .destroys
            .iter()
            .take(MAX_DESTROYS_IN_MESSAGE)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if self.destroys.len() > MAX_DESTROYS_IN_MESSAGE {
            text.push_str(&format!(
                "; and {} more (status.plan.destructiveChanges)",
                self.destroys.len() - MAX_DESTROYS_IN_MESSAGE
            ));
        }
        text
    }
}

/// Counts per Omni resource type (short, e.g. `ConfigPatches`) of `changes`, sorted by type.
fn counts_of<'a>(changes: impl Iterator<Item = (ChangeAction, &'a ResourceRef)>) -> Vec<PlanCount> {
    let mut by_type: BTreeMap<String, PlanCount> = BTreeMap::new();
    for (action, resource) in changes {
        let short = short_type(&resource.resource_type);
        let entry = by_type
            .entry(short.to_string())
            .or_insert_with(|| PlanCount {
                type_: short.to_string(),
                ..PlanCount::default()
            });
        match action {
            ChangeAction::Create => entry.create += 1,
            ChangeAction::Update => entry.update += 1,
            ChangeAction::Delete => entry.delete += 1,
        }
    }
    by_type.into_values().collect()
}

/// What applying `plan` writes to Omni, per resource type: every create, update and delete,
/// the operator's own bookkeeping included (it is written too), sorted by type.
pub(crate) fn written(plan: &Plan) -> Vec<PlanCount> {
    counts_of(plan.changes.iter().map(|c| (c.action, &c.resource)))
}

/// One line for `counts`: `Clusters: 1 updated; ConfigPatches: 2 created, 1 deleted`.
pub(crate) fn counts_text(counts: &[PlanCount]) -> String {
    let line: Vec<String> = counts
        .iter()
        .map(|c| {
            let parts: Vec<String> = [
                (c.create, "created"),
                (c.update, "updated"),
                (c.delete, "deleted"),
            ]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, verb)| format!("{n} {verb}"))
            .collect();
            format!("{}: {}", c.type_, parts.join(", "))
        })
        .collect();
    if line.is_empty() {
        "nothing".to_string()
    } else {
        line.join("; ")
    }
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `value`, cut to [`MAX_VALUE_BYTES`] on a character boundary (with `…`).
fn cut(mut value: String) -> String {
    if value.len() > MAX_VALUE_BYTES {
        let mut end = MAX_VALUE_BYTES;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
        value.push('…');
    }
    value
}

/// `ConfigPatches` for `ConfigPatches.omni.sidero.dev`.
pub(crate) fn short_type(resource_type: &str) -> &str {
    resource_type
        .strip_suffix(".omni.sidero.dev")
        .unwrap_or(resource_type)
}

/// What `change` destroys, if anything (one line), given the machines Omni allocated to each
/// machine set (`allocated`, by set ID). Destructive: deleting a machine set, a static machine,
/// a config patch, a manifest group or the cluster; shrinking a machine set (control plane
/// included); changing, or dropping, the machine class of a set with machines allocated.
pub(crate) fn destruction(
    change: &ResourceChange,
    allocated: &BTreeMap<String, u32>,
) -> Option<String> {
    let id = &change.resource.id;
    match (change.action, change.resource.resource_type.as_str()) {
        (ChangeAction::Delete, types::CLUSTER) => Some(format!("deletes Omni cluster {id:?}")),
        (ChangeAction::Delete, types::MACHINE_SET) => {
            Some(match allocated.get(id).copied().unwrap_or(0) {
                0 => format!("deletes machine set {id}"),
                n => format!("deletes machine set {id} and its {n} allocated machines"),
            })
        }
        (ChangeAction::Delete, types::MACHINE_SET_NODE) => {
            let set = change
                .labels_before()
                .get(keys::MACHINE_SET)
                .cloned()
                .unwrap_or_default();
            Some(format!("removes machine {id} from machine set {set}"))
        }
        (ChangeAction::Delete, types::CONFIG_PATCH) => Some(format!("deletes config patch {id}")),
        (ChangeAction::Delete, types::KUBERNETES_MANIFEST_GROUP) => {
            Some(format!("deletes manifest group {id}"))
        }
        (ChangeAction::Update, types::MACHINE_SET) => {
            let (Some(Spec::MachineSet(before)), Some(Spec::MachineSet(after))) =
                (change.spec_before(), change.spec_after())
            else {
                return None;
            };
            let old = before.machine_allocation?;
            let in_use = allocated.get(id).copied().unwrap_or(0);
            let unlimited =
                |a: &MachineAllocation| a.allocation_type == AllocationType::Unlimited as i32;
            match after.machine_allocation {
                None if in_use > 0 => Some(format!(
                    "stops allocating machine set {id} from machine class {}, releasing its {in_use} machines",
                    old.name
                )),
                None => None,
                Some(new) if new.name != old.name && in_use > 0 => Some(format!(
                    "changes the machine class of machine set {id} from {} to {} with {in_use} machines allocated",
                    old.name, new.name
                )),
                Some(new) if unlimited(&old) && !unlimited(&new) => Some(format!(
                    "shrinks machine set {id} from unlimited to {} machines",
                    new.machine_count
                )),
                Some(new) if !unlimited(&new) && new.machine_count < old.machine_count => {
                    Some(format!(
                        "shrinks machine set {id} from {} to {} machines",
                        old.machine_count, new.machine_count
                    ))
                }
                Some(_) => None,
            }
        }
        _ => None,
    }
}

/// Why a plan is not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// `spec.changePolicy.mode: Plan`.
    PlanOnly,
    /// Destructive, `destructive: RequireApproval`, not approved.
    ApprovalRequired,
    /// Taking over an Omni cluster that differs from the manifests, not approved.
    AdoptionDiff,
}

impl Hold {
    /// The condition reason it is reported under (one that waits for a person:
    /// [`Reason::awaits_a_person`]).
    pub(crate) fn reason(self) -> Reason {
        match self {
            Hold::PlanOnly => Reason::PlanOnly,
            Hold::ApprovalRequired => Reason::ApprovalRequired,
            Hold::AdoptionDiff => Reason::AdoptionDiff,
        }
    }
}

/// What a pass does with its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing to write (or nothing a user would see, in mode `Plan`).
    InSync,
    /// Write the plan; `approved` when it was held and the approval annotation let it go.
    Apply {
        /// Approved by its hash.
        approved: bool,
    },
    /// Write nothing.
    Hold(Hold),
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Situation<'a> {
    /// `spec.changePolicy.mode`.
    pub(crate) mode: ChangeMode,
    /// `spec.changePolicy.destructive`, or the operator's default.
    pub(crate) destructive_policy: DestructivePolicy,
    /// The Omni cluster exists without this object's stamp and the adopt annotation asks to
    /// take it over.
    pub(crate) adopting: bool,
    /// The plan writes nothing at all (bookkeeping included).
    pub(crate) nothing_to_write: bool,
    /// The change set a user judges.
    pub(crate) changes: &'a ChangeSet,
    /// Its hash.
    pub(crate) hash: &'a str,
    /// The approval annotation's value, if any.
    pub(crate) approval: Option<&'a str>,
}

/// Pure: whether the plan is applied or held.
///
/// - Nothing to write: in sync.
/// - Mode `Plan`: held when a user would see a change, else in sync (the bookkeeping is not
///   written either: mode `Plan` never writes).
/// - Adopting: applied when the change set is empty (that write only stamps ownership) or
///   approved, else held (`AdoptionDiff`).
/// - Destructive under `RequireApproval`: applied when approved, else held
///   (`ApprovalRequired`), all of it, its harmless changes included.
/// - Otherwise applied.
pub(crate) fn decide(s: &Situation<'_>) -> Decision {
    if s.nothing_to_write {
        return Decision::InSync;
    }
    let approved = s.approval == Some(s.hash);
    if s.mode == ChangeMode::Plan {
        return if s.changes.is_empty() {
            Decision::InSync
        } else {
            Decision::Hold(Hold::PlanOnly)
        };
    }
    if s.adopting && !s.changes.is_empty() {
        return if approved {
            Decision::Apply { approved: true }
        } else {
            Decision::Hold(Hold::AdoptionDiff)
        };
    }
    if s.changes.is_destructive() && s.destructive_policy == DestructivePolicy::RequireApproval {
        return if approved {
            Decision::Apply { approved: true }
        } else {
            Decision::Hold(Hold::ApprovalRequired)
        };
    }
    Decision::Apply { approved: false }
}

/// Pure: the message of a held plan (the condition's, and its Event's).
pub(crate) fn hold_message(
    hold: Hold,
    changes: &ChangeSet,
    hash: &str,
    ignored_approval: Option<&str>,
    omni_cluster: &str,
) -> String {
    let approve = format!("{APPROVE_PLAN_ANNOTATION}={hash}");
    let mut message = match hold {
        Hold::PlanOnly => format!(
            "spec.changePolicy.mode is Plan: {} planned for Omni cluster {omni_cluster:?} and not applied (status.plan; omni-operator plan)",
            changes.summary()
        ),
        Hold::ApprovalRequired => format!(
            "the plan for Omni cluster {omni_cluster:?} ({}) is destructive: {}. Nothing of it is applied, its other changes neither, until the annotation {approve} approves it",
            changes.summary(),
            changes.destroys_in_brief()
        ),
        Hold::AdoptionDiff => {
            let mut m = format!(
                "Omni cluster {omni_cluster:?} is being adopted and differs from the manifests: {} (status.plan; omni-operator plan). Nothing is written to Omni until the manifests match it or the annotation {approve} approves the plan",
                changes.summary()
            );
            if changes.is_destructive() {
                m.push_str(&format!(
                    "; what it destroys: {}",
                    changes.destroys_in_brief()
                ));
            }
            m
        }
    };
    if let Some(stale) = ignored_approval {
        message.push_str(&format!(
            "; the annotation's value {stale:?} approves another plan and was ignored"
        ));
    }
    message
}

/// The approval found on the object when it does not match `hash` (to report it ignored).
pub(crate) fn ignored<'a>(approval: Option<&'a str>, hash: &str) -> Option<&'a str> {
    approval.filter(|a| *a != hash)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
