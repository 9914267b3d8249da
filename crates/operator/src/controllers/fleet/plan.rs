//! What one pass of a set does, decided from the caches (pure): for each matched cluster the
//! object it should have (rendered from the template) against the one there is; the rollout's
//! waves; what of the clusters that stopped matching is withdrawn or left; and the report the
//! status is made from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use sha2::Digest as _;

use super::{Member, SetKind, ready_at_generation};
use crate::api::common::{ConditionStatus, condition_types, find_condition};
use crate::api::fleet::{FailingCluster, StopMatchingBehavior, TemplateSpec, minted_export_spec};
use crate::api::keys::{
    LEFT_BY_SET_LABEL, SET_CLUSTER_LABEL, SET_KIND_LABEL, SET_NAME_LABEL, SET_SPEC_HASH_ANNOTATION,
    SHARD_LABEL,
};
use crate::api::{OmniCluster, OmniKubeconfigExport, Reason};
use crate::domain::fleet_template::{self, ClusterFacts};

/// The longest generated name and label value: a DNS label, and a label value.
const MAX_NAME: usize = 63;

/// One write a pass makes to a generated object of kind `K`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step<K> {
    /// Create it.
    Create(K),
    /// Replace the stored object with this one (a put-back, an update, a label fixed).
    Replace(K),
    /// Delete the object of this name and UID (withdrawn).
    Delete { name: String, uid: String },
    /// Replace the stored object with this one, which the set no longer owns (left).
    Leave(K),
}

/// What a pass came to, for the status.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Report {
    /// Clusters the selector matches.
    pub(crate) matched: u32,
    /// Generated objects Ready at their generation and the current template.
    pub(crate) ready: u32,
    /// Generated objects at the current template.
    pub(crate) updated: u32,
    /// Clusters whose object is failing, cannot be rendered or is in the way, by cluster.
    pub(crate) failing: Vec<FailingCluster>,
    /// Objects being created, updated, put back or waited for.
    pub(crate) pending: u32,
    /// Objects of clusters that stopped matching, being withdrawn.
    pub(crate) withdrawing: u32,
    /// A rollout wave failed: the next waves wait.
    pub(crate) stalled: bool,
    /// A write met a newer object or one that appeared meanwhile: look again shortly.
    pub(crate) retry_soon: bool,
}

/// The writes of one pass and its report.
pub(crate) struct Plan<S: SetKind> {
    pub(crate) members: Vec<Step<S::Member>>,
    pub(crate) exports: Vec<Step<OmniKubeconfigExport>>,
    pub(crate) report: Report,
}

/// What a pass reads: the set and, from the caches, its namespace's clusters, objects of its
/// member kind and exports.
pub(crate) struct Inputs<'a, S: SetKind> {
    pub(crate) set: &'a S,
    pub(crate) clusters: &'a [Arc<OmniCluster>],
    pub(crate) members: &'a [Arc<S::Member>],
    pub(crate) exports: &'a [Arc<OmniKubeconfigExport>],
}

/// `parts` joined by `-`, shortened with a hash when longer than [`MAX_NAME`].
pub(crate) fn generated_name(parts: &[&str]) -> String {
    let full = parts.join("-");
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = hex::encode(sha2::Sha256::digest(full.as_bytes()));
    let head = full[..MAX_NAME - 11].trim_end_matches(['-', '.']);
    format!("{head}-{}", &hash[..10])
}

/// The hash of a generated spec, recorded on the object.
fn spec_hash(spec: &impl serde::Serialize) -> String {
    let text = serde_json::to_string(spec).unwrap_or_default();
    hex::encode(sha2::Sha256::digest(text.as_bytes()))[..16].to_string()
}

/// Whether the set with UID `uid` owns `obj`: its controller reference, or the label of a
/// left object (taken back when its cluster matches again).
fn owned_by(obj: &impl Resource, uid: &str) -> bool {
    let meta = obj.meta();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
        || meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LEFT_BY_SET_LABEL))
            .map(String::as_str)
            == Some(uid)
}

/// The metadata a set gives what it generates for `cluster`.
struct Stamp {
    namespace: String,
    labels: BTreeMap<String, String>,
    hash: String,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
}

impl Stamp {
    fn new<S: SetKind>(set: &S, cluster: &str, hash: String) -> Option<Self> {
        let mut labels: BTreeMap<String, String> = [
            (SET_KIND_LABEL, S::kind(&()).to_string()),
            (SET_NAME_LABEL, generated_name(&[&set.name_any()])),
            (SET_CLUSTER_LABEL, generated_name(&[cluster])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        // What a set generates lands on the set's shard (an unlabelled set's objects stay
        // unlabelled, on the default shard: `apply` removes a stray label).
        if let Some(shard) = set.labels().get(SHARD_LABEL) {
            labels.insert(SHARD_LABEL.to_string(), shard.clone());
        }
        Some(Self {
            namespace: set.namespace().unwrap_or_default(),
            labels,
            hash,
            owner: set.controller_owner_ref(&())?,
        })
    }

    fn apply(&self, meta: &mut ObjectMeta) {
        meta.namespace = Some(self.namespace.clone());
        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
        labels.remove(LEFT_BY_SET_LABEL);
        labels.remove(SHARD_LABEL);
        labels.extend(self.labels.clone());
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(SET_SPEC_HASH_ANNOTATION.to_string(), self.hash.clone());
        let owners = meta.owner_references.get_or_insert_with(Vec::new);
        owners.retain(|o| o.uid != self.owner.uid);
        owners.push(self.owner.clone());
    }

    /// Whether `meta` carries this stamp.
    fn carried_by(&self, meta: &ObjectMeta) -> bool {
        let labels = meta.labels.clone().unwrap_or_default();
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && !labels.contains_key(LEFT_BY_SET_LABEL)
            && labels.get(SHARD_LABEL) == self.labels.get(SHARD_LABEL)
            && meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(SET_SPEC_HASH_ANNOTATION))
                == Some(&self.hash)
            && meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == self.owner.uid && o.controller == Some(true))
    }
}

/// `desired` as the replacement of `existing`: its identity, finalizers and the labels,
/// annotations and owners others gave it kept, ours set.
fn replacement<K: Resource + Clone>(existing: &K, desired: &K, stamp: &Stamp) -> K {
    let mut out = desired.clone();
    let old = existing.meta();
    let meta = out.meta_mut();
    meta.resource_version = old.resource_version.clone();
    meta.uid = old.uid.clone();
    meta.finalizers = old.finalizers.clone();
    meta.labels = old.labels.clone();
    meta.annotations = old.annotations.clone();
    meta.owner_references = old.owner_references.clone();
    stamp.apply(meta);
    out
}

/// `existing` left in place: no longer owned by the set, labelled as left by it.
fn left<K: Resource + Clone>(existing: &K, set_uid: &str) -> K {
    let mut out = existing.clone();
    let meta = out.meta_mut();
    meta.owner_references
        .get_or_insert_with(Vec::new)
        .retain(|o| o.uid != set_uid);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(LEFT_BY_SET_LABEL.to_string(), set_uid.to_string());
    meta.managed_fields = None;
    out
}

/// Where one generated object stands against what the set wants of it.
enum Standing<K> {
    /// None there: create it.
    Missing(K),
    /// Ours, being deleted: wait for it to go, then create it again.
    Deleting,
    /// Someone else's: leave it and report it.
    Collision,
    /// Ours, at the current template but changed by hand (or its stamp is): put it back.
    PutBack(K),
    /// Ours, at an earlier template: update it in the rollout's wave.
    Outdated(K),
    /// Ours, as it should be.
    InSync,
}

fn standing<K: Resource + Clone>(
    existing: Option<&K>,
    desired: K,
    stamp: &Stamp,
    same_spec: impl Fn(&K, &K) -> bool,
) -> Standing<K> {
    let Some(existing) = existing else {
        let mut desired = desired;
        stamp.apply(desired.meta_mut());
        return Standing::Missing(desired);
    };
    let meta = existing.meta();
    if !owned_by(existing, &stamp.owner.uid) {
        return Standing::Collision;
    }
    if meta.deletion_timestamp.is_some() {
        return Standing::Deleting;
    }
    let hash = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(SET_SPEC_HASH_ANNOTATION));
    if hash != Some(&stamp.hash) && same_spec(existing, &desired) && !stamp.carried_by(meta) {
        // Same spec under another hash (a label of ours lost, or the hash's recipe moved).
        return Standing::PutBack(replacement(existing, &desired, stamp));
    }
    if hash != Some(&stamp.hash) {
        return Standing::Outdated(replacement(existing, &desired, stamp));
    }
    if !same_spec(existing, &desired) || !stamp.carried_by(meta) {
        return Standing::PutBack(replacement(existing, &desired, stamp));
    }
    Standing::InSync
}

/// What a cluster's generated objects should be.
struct Wanted<S: SetKind> {
    cluster: String,
    name: String,
    member: S::Member,
    stamp: Stamp,
    export: Option<(OmniKubeconfigExport, Stamp)>,
}

fn failing(cluster: &str, name: &str, reason: Reason, message: String) -> FailingCluster {
    FailingCluster {
        cluster: cluster.to_string(),
        name: name.to_string(),
        reason: reason.as_str().to_string(),
        message,
    }
}

/// The objects the set wants for `facts`, or why it cannot have them.
fn wanted<S: SetKind>(set: &S, facts: &ClusterFacts) -> Result<Wanted<S>, FailingCluster> {
    let set_name = set.name_any();
    let name = generated_name(&[&set_name, &facts.name]);
    let template_failed =
        |message: String| failing(&facts.name, &name, Reason::TemplateFailed, message);
    let member_renders = <<S::Member as Member>::Spec as TemplateSpec>::MEMBER_RENDERS;
    let mut spec =
        fleet_template::render("spec.template", &set.template().raw, facts, member_renders)
            .map_err(|e| template_failed(e.to_string()))?;
    spec["clusterRef"] = serde_json::json!({"name": facts.name});
    let mut export = None;
    if let Some(credentials) = set.credentials() {
        let kubeconfig = match (&credentials.kubeconfig_secret_ref, &credentials.mint) {
            (Some(pattern), _) => {
                let field = "spec.credentials.kubeconfigSecretRef.name";
                let secret = fleet_template::render_str(field, &pattern.name, facts)
                    .map_err(|e| template_failed(e.to_string()))?;
                serde_json::json!({"name": secret, "key": pattern.key})
            }
            (None, Some(mint)) => {
                let export_name = generated_name(&[&set_name, &facts.name, S::MINT_SUFFIX]);
                let export_spec = minted_export_spec(mint, &facts.name, &export_name);
                let export_spec = crate::api::decode(&export_spec)
                    .map_err(|e| template_failed(format!("spec.credentials.mint: {e}")))?;
                let minted = OmniKubeconfigExport::new(&export_name, export_spec);
                let hash = spec_hash(&minted.spec);
                let stamp = Stamp::new(set, &facts.name, hash)
                    .ok_or_else(|| template_failed("the set has no UID yet".into()))?;
                export = Some((minted, stamp));
                serde_json::json!({"name": export_name, "key": "kubeconfig"})
            }
            (None, None) => serde_json::Value::Null,
        };
        spec["kubeconfigSecretRef"] = kubeconfig;
    }
    set.complete(&mut spec);
    let spec =
        crate::api::decode(&spec).map_err(|e| template_failed(format!("spec.template: {e}")))?;
    let member = S::Member::build(&name, spec);
    let admission = member.admission();
    if !admission.is_valid() {
        let summary = admission
            .error_summary()
            .replacen("spec.", "spec.template.", 1);
        return Err(template_failed(summary));
    }
    let stamp = Stamp::new(set, &facts.name, spec_hash(member.spec()))
        .ok_or_else(|| template_failed("the set has no UID yet".into()))?;
    Ok(Wanted {
        cluster: facts.name.clone(),
        name,
        member,
        stamp,
        export,
    })
}

/// Whether `member` failed at its current generation: its controller looked at it and it is
/// not Ready.
fn failed_at_generation<M: Member>(member: &M) -> Option<(String, String)> {
    let conditions = member.stored_conditions();
    let ready = find_condition(conditions, condition_types::READY)?;
    // `Reconciling=True`: the object waits or converges (its cluster, its kubeconfig), which
    // is no failure; a failure is `Ready=False` without it (retrying, or `Stalled`).
    let converging = find_condition(conditions, condition_types::RECONCILING)
        .is_some_and(|c| c.status == ConditionStatus::True);
    (member.observed_generation() == member.meta().generation
        && ready.status == ConditionStatus::False
        && !converging)
        .then(|| (ready.reason.clone(), ready.message.clone()))
}

/// The pass over `inputs`.
pub(crate) fn plan<S: SetKind>(inputs: &Inputs<'_, S>) -> Plan<S> {
    let set = inputs.set;
    let uid = set.meta().uid.clone().unwrap_or_default();
    let mut plan = Plan::<S> {
        members: Vec::new(),
        exports: Vec::new(),
        report: Report::default(),
    };
    let mut matched: Vec<ClusterFacts> = inputs
        .clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| set.selector().matches(&c.labels().clone()))
        .map(|c| ClusterFacts::of(c))
        .collect();
    matched.sort_by(|a, b| a.name.cmp(&b.name));
    plan.report.matched = u32::try_from(matched.len()).unwrap_or(u32::MAX);
    let members: BTreeMap<String, &Arc<S::Member>> =
        inputs.members.iter().map(|m| (m.name_any(), m)).collect();
    let exports: BTreeMap<String, &Arc<OmniKubeconfigExport>> =
        inputs.exports.iter().map(|e| (e.name_any(), e)).collect();
    let mut kept_members = BTreeSet::new();
    let mut kept_exports = BTreeSet::new();
    let mut wave = Wave::default();
    for facts in &matched {
        let wanted = match wanted(set, facts) {
            Ok(w) => w,
            Err(f) => {
                // What is there stays as it is.
                kept_members.insert(f.name.clone());
                kept_exports.insert(generated_name(&[
                    &set.name_any(),
                    &facts.name,
                    S::MINT_SUFFIX,
                ]));
                plan.report.failing.push(f);
                continue;
            }
        };
        if let Some((export, stamp)) = wanted.export {
            let name = export.name_any();
            kept_exports.insert(name.clone());
            let existing = exports.get(&name).map(|e| e.as_ref());
            match standing(existing, export, &stamp, |a, b| a.spec == b.spec) {
                Standing::Missing(e) => plan.exports.push(Step::Create(e)),
                Standing::PutBack(e) | Standing::Outdated(e) => plan.exports.push(Step::Replace(e)),
                Standing::Collision => plan.report.failing.push(collision(
                    &wanted.cluster,
                    "OmniKubeconfigExport",
                    &name,
                )),
                Standing::Deleting | Standing::InSync => {}
            }
        }
        kept_members.insert(wanted.name.clone());
        let existing = members.get(&wanted.name).map(|m| m.as_ref());
        let place = Place {
            cluster: &wanted.cluster,
            name: &wanted.name,
            existing,
        };
        let standing = standing(existing, wanted.member, &wanted.stamp, |a, b| {
            a.spec() == b.spec()
        });
        place_member(&mut plan, &mut wave, &place, standing);
    }
    roll_out(set, &mut plan, wave);
    stop_matching(inputs, &uid, &kept_members, &kept_exports, &mut plan);
    plan.report
        .failing
        .sort_by(|a, b| a.cluster.cmp(&b.cluster).then(a.name.cmp(&b.name)));
    plan
}

/// The rollout's view of the objects so far: the outdated ones (whether each is Ready, and its
/// update), how many updated ones are not Ready, and whether one of those failed.
struct Wave<M> {
    outdated: Vec<(bool, M)>,
    unavailable: usize,
    failed: bool,
}

impl<M> Default for Wave<M> {
    fn default() -> Self {
        Self {
            outdated: Vec::new(),
            unavailable: 0,
            failed: false,
        }
    }
}

/// A matched cluster's generated object: the cluster, the object's name, and the object there
/// is.
struct Place<'a, M> {
    cluster: &'a str,
    name: &'a str,
    existing: Option<&'a M>,
}

impl<M: Member> Place<'_, M> {
    /// The existing object's own failure at its generation, as the set lists it.
    fn failing(&self) -> Option<FailingCluster> {
        let (reason, message) = failed_at_generation(self.existing?)?;
        Some(FailingCluster {
            cluster: self.cluster.to_string(),
            name: self.name.to_string(),
            reason,
            message,
        })
    }
}

/// What `standing` of the object at `place` adds to the plan and the wave.
fn place_member<S: SetKind>(
    plan: &mut Plan<S>,
    wave: &mut Wave<S::Member>,
    place: &Place<'_, S::Member>,
    standing: Standing<S::Member>,
) {
    match standing {
        Standing::Missing(m) => {
            plan.report.pending += 1;
            plan.members.push(Step::Create(m));
        }
        Standing::PutBack(m) => {
            plan.report.pending += 1;
            plan.members.push(Step::Replace(m));
        }
        Standing::Deleting => plan.report.pending += 1,
        Standing::Collision => {
            plan.report
                .failing
                .push(collision(place.cluster, &S::Member::kind(&()), place.name))
        }
        Standing::Outdated(m) => {
            plan.report.failing.extend(place.failing());
            wave.outdated
                .push((place.existing.is_some_and(ready_at_generation), m));
        }
        Standing::InSync => {
            plan.report.updated += 1;
            if place.existing.is_some_and(ready_at_generation) {
                plan.report.ready += 1;
                return;
            }
            wave.unavailable += 1;
            plan.report.pending += 1;
            if let Some(failing) = place.failing() {
                wave.failed = true;
                plan.report.failing.push(failing);
            }
        }
    }
}

fn collision(cluster: &str, kind: &str, name: &str) -> FailingCluster {
    failing(
        cluster,
        name,
        Reason::NameCollision,
        format!("{kind} {name:?} exists and was not generated by this set; it is left unchanged"),
    )
}

/// The updates of the outdated objects the rollout lets through now: an object not Ready
/// anyway is updated at once; a Ready one only while fewer than `maxUnavailable` updated
/// objects are not Ready, and none once an updated one failed (the rollout stalls).
fn roll_out<S: SetKind>(set: &S, plan: &mut Plan<S>, wave: Wave<S::Member>) {
    let budget = set
        .rollout()
        .budget(plan.report.matched as usize)
        .unwrap_or(1);
    let mut slots = if wave.failed {
        0
    } else {
        budget.saturating_sub(wave.unavailable)
    };
    for (ready, member) in wave.outdated {
        plan.report.pending += 1;
        if !ready {
            plan.members.push(Step::Replace(member));
        } else if slots > 0 {
            slots -= 1;
            plan.members.push(Step::Replace(member));
        } else if wave.failed {
            plan.report.stalled = true;
        }
    }
}

/// What becomes of the objects of clusters that no longer match: withdrawn (deleted; an
/// export only once no object of the set uses its Secret) or left.
fn stop_matching<S: SetKind>(
    inputs: &Inputs<'_, S>,
    uid: &str,
    kept_members: &BTreeSet<String>,
    kept_exports: &BTreeSet<String>,
    plan: &mut Plan<S>,
) {
    let behaviour = inputs.set.stop_matching();
    let ours = |meta: &ObjectMeta| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.controller == Some(true))
    };
    let mut in_use = BTreeSet::new();
    for member in inputs.members {
        if !ours(member.meta()) {
            continue;
        }
        if kept_members.contains(&member.name_any()) {
            in_use.extend(member.kubeconfig_secret().map(str::to_string));
            continue;
        }
        match behaviour {
            StopMatchingBehavior::Leave => {
                plan.members.push(Step::Leave(left(member.as_ref(), uid)))
            }
            StopMatchingBehavior::Withdraw => {
                plan.report.withdrawing += 1;
                in_use.extend(member.kubeconfig_secret().map(str::to_string));
                if member.meta().deletion_timestamp.is_none() {
                    plan.members.push(Step::Delete {
                        name: member.name_any(),
                        uid: member.meta().uid.clone().unwrap_or_default(),
                    });
                }
            }
        }
    }
    // An export set's objects are exports themselves, handled above; it mints none.
    let mints = S::Member::kind(&()) != OmniKubeconfigExport::kind(&());
    for export in inputs.exports.iter().filter(|_| mints) {
        let name = export.name_any();
        if kept_exports.contains(&name) || !ours(export.meta()) {
            continue;
        }
        if behaviour == StopMatchingBehavior::Leave {
            plan.exports.push(Step::Leave(left(export.as_ref(), uid)));
        } else if in_use.contains(&export.spec.target_secret_ref.name) {
            plan.report.withdrawing += 1;
        } else if export.meta().deletion_timestamp.is_none() {
            plan.report.withdrawing += 1;
            plan.exports.push(Step::Delete {
                name,
                uid: export.meta().uid.clone().unwrap_or_default(),
            });
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
