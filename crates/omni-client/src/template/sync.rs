//! Sync: compare a template's resources with what Omni holds, plan the difference, apply it.
//!
//! [`plan_sync`] only reads, so it doubles as a dry run / diff; [`apply`] writes the plan in
//! Omni's order (creates, updates, then deletes in two phases with teardown → watch → destroy).

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use futures::StreamExt;
use futures::stream::SelectAll;
use tokio::time::Instant;

use super::api::BackendApi;
use super::diff::ResourceChange;
use super::files::FileResolver;
use super::model::Template;
use super::state::{LabelCondition, StateError, TemplateState, event_type};
use super::translate::{
    DesiredResource, NAMESPACE, ResourceRef, Spec, TranslateError, keys, translate_for, type_rank,
    types,
};
use super::validate::ValidationErrors;
use crate::proto::cosi::resource::{EventType, Metadata, Resource, Spec as WireSpec};

/// Phase value of live resources.
const PHASE_RUNNING: &str = "running";
/// Phase value of resources being torn down.
const PHASE_TEARING_DOWN: &str = "tearingDown";

/// Why a sync, delete or status operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The template breaks client-side rules.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// The template cannot be translated.
    #[error(transparent)]
    Translate(#[from] TranslateError),
    /// A State call failed.
    #[error("{operation} {resource}: {source}")]
    State {
        /// What was being done (`create`, `update`, `get`, ...).
        operation: &'static str,
        /// The resource concerned.
        resource: ResourceRef,
        /// The server's answer.
        source: StateError,
    },
    /// A resource to delete belongs to another cluster.
    #[error(
        "resource {resource_type}({NAMESPACE}/{id}) belongs to cluster {actual:?}, but template is for cluster {expected:?}"
    )]
    ForeignResource {
        /// Type.
        resource_type: String,
        /// ID.
        id: String,
        /// Its cluster label.
        actual: String,
        /// The template's cluster.
        expected: String,
    },
    /// A resource to create already exists outside this template's ownership.
    #[error(
        "resource {resource_type}({NAMESPACE}/{id}) already exists for cluster {other:?}, cannot create a conflicting resource for a different cluster"
    )]
    Conflicting {
        /// Type.
        resource_type: String,
        /// ID.
        id: String,
        /// The cluster label of the existing resource.
        other: String,
    },
    /// The caller's deadline passed before the operation finished.
    #[error("deadline exceeded while waiting for {waiting_for}")]
    Deadline {
        /// What was still pending.
        waiting_for: String,
    },
}

fn state_err(operation: &'static str, r: &ResourceRef) -> impl FnOnce(StateError) -> SyncError {
    let resource = r.clone();
    move |source| SyncError::State {
        operation,
        resource,
        source,
    }
}

fn now() -> prost_types::Timestamp {
    prost_types::Timestamp::from(SystemTime::now())
}

fn meta(r: &Resource) -> Metadata {
    r.metadata.clone().unwrap_or_default()
}

fn reference_of(r: &Resource) -> ResourceRef {
    let m = meta(r);
    ResourceRef::new(m.r#type, m.id)
}

fn cluster_label(r: &Resource) -> String {
    r.metadata
        .as_ref()
        .and_then(|m| m.labels.get(keys::CLUSTER).cloned())
        .unwrap_or_default()
}

/// The wire form of a desired resource, as sent on create.
pub(crate) fn to_wire(d: &DesiredResource) -> Resource {
    let stamp = now();
    Resource {
        metadata: Some(Metadata {
            namespace: NAMESPACE.into(),
            r#type: d.resource_type().into(),
            id: d.id.clone(),
            version: "undefined".into(),
            owner: String::new(),
            phase: PHASE_RUNNING.into(),
            created: Some(stamp),
            updated: Some(stamp),
            finalizers: Vec::new(),
            labels: d.labels.clone().into_iter().collect(),
            annotations: d.annotations.clone().into_iter().collect(),
        }),
        spec: Some(WireSpec {
            proto_spec: d.spec.encode(),
            yaml_spec: String::new(),
        }),
    }
}

/// Whether a stored resource already equals what the template wants (metadata that matters
/// plus protobuf spec equality; compressed stored data always counts as different).
fn equal(actual: &Resource, expected: &Resource) -> bool {
    let (a, e) = (meta(actual), meta(expected));
    let finalizers = |m: &Metadata| m.finalizers.iter().cloned().collect::<BTreeSet<_>>();
    let same_meta = a.namespace == e.namespace
        && a.r#type == e.r#type
        && a.id == e.id
        && a.phase == e.phase
        && a.owner == e.owner
        && a.version == e.version
        && a.labels == e.labels
        && a.annotations == e.annotations
        && finalizers(&a) == finalizers(&e);
    if !same_meta {
        return false;
    }
    let bytes = |r: &Resource| {
        r.spec
            .as_ref()
            .map(|s| s.proto_spec.clone())
            .unwrap_or_default()
    };
    match (
        Spec::decode(&a.r#type, &bytes(actual)),
        Spec::decode(&e.r#type, &bytes(expected)),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// A change set, computed without writing anything.
#[derive(Clone, Default)]
pub struct Plan {
    /// The template's cluster.
    pub cluster: String,
    /// Resources to create, in apply order.
    pub creates: Vec<ResourceRef>,
    /// Resources to update, in apply order.
    pub updates: Vec<ResourceRef>,
    /// Resources to delete, all phases in order.
    pub deletes: Vec<ResourceRef>,
    /// The delete phases: torn down together, each finished before the next starts.
    pub delete_phases: Vec<Vec<ResourceRef>>,
    /// Every create, update and delete with the resource before and after, in apply order
    /// (see [`ResourceChange::fields`] for what changes in each).
    pub changes: Vec<ResourceChange>,
    /// Machines allocated to each machine set of the cluster by Omni's machine-set-node
    /// controller (machine-class sets), by machine-set ID. Counted from the nodes the plan
    /// reads anyway; a set without allocated machines is absent.
    pub allocated: BTreeMap<String, u32>,
    create_resources: Vec<Resource>,
    update_resources: Vec<Resource>,
}

// Written by hand so that patch contents (which may hold registry credentials) never reach
// logs through `{:?}`; the references say what will change.
impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("cluster", &self.cluster)
            .field("creates", &self.creates)
            .field("updates", &self.updates)
            .field("delete_phases", &self.delete_phases)
            .finish()
    }
}

impl Plan {
    /// Whether applying would write nothing.
    pub fn is_empty(&self) -> bool {
        self.creates.is_empty() && self.updates.is_empty() && self.deletes.is_empty()
    }

    /// Omni-style lines describing the plan (` (dry run)` after the verb when `dry_run`).
    pub fn lines(&self, dry_run: bool) -> Vec<String> {
        let dry = if dry_run { " (dry run)" } else { "" };
        let mut out = Vec::new();
        out.extend(self.creates.iter().map(|r| format!("* creating{dry} {r}")));
        out.extend(self.updates.iter().map(|r| format!("* updating{dry} {r}")));
        out.extend(
            self.deletes
                .iter()
                .map(|r| format!("* tearing down{dry} {r}")),
        );
        out
    }

    /// [`Plan::lines`] with the fields each update changes indented under it
    /// (`    spec.machineAllocation.machineCount: 3 → 2`; content by its size only).
    pub fn lines_with_fields(&self, dry_run: bool) -> Vec<String> {
        let dry = if dry_run { " (dry run)" } else { "" };
        let mut out = Vec::new();
        for change in &self.changes {
            let verb = match change.action {
                super::diff::ChangeAction::Create => "creating",
                super::diff::ChangeAction::Update => "updating",
                super::diff::ChangeAction::Delete => "tearing down",
            };
            out.push(format!("* {verb}{dry} {}", change.resource));
            if change.action == super::diff::ChangeAction::Update {
                out.extend(change.fields().iter().map(|f| format!("    {f}")));
            }
        }
        out
    }
}

/// What the template owns in Omni right now (docs/omni-wire.md#sync-the-change-set: owner `""` resources
/// carrying the cluster label, not node-controller-made nodes, plus its nodes' KernelArgs).
pub(crate) async fn collect_owned<S: TemplateState>(
    state: &S,
    cluster: &str,
    api: BackendApi,
) -> Result<BTreeMap<ResourceRef, Resource>, SyncError> {
    collect_owned_counting(state, cluster, api, &mut BTreeMap::new()).await
}

/// [`collect_owned`], also counting into `allocated` the nodes Omni's machine-set-node
/// controller made for each machine set (which the template does not own).
async fn collect_owned_counting<S: TemplateState>(
    state: &S,
    cluster: &str,
    api: BackendApi,
    allocated: &mut BTreeMap<String, u32>,
) -> Result<BTreeMap<ResourceRef, Resource>, SyncError> {
    const OWNED_TYPES: [&str; 6] = [
        types::MACHINE_SET,
        types::MACHINE_SET_NODE,
        types::CONFIG_PATCH,
        types::EXTENSIONS_CONFIGURATION,
        types::KUBERNETES_MANIFEST_GROUP,
        types::KUBERNETES_HEALTH_CHECK,
    ];
    let mut actual = BTreeMap::new();
    let cluster_ref = ResourceRef::new(types::CLUSTER, cluster);
    let by_cluster = [LabelCondition::equal(keys::CLUSTER, cluster)];
    // The reads are independent: issued together, a plan costs one round trip to Omni for
    // them instead of seven (and one more for the nodes' machine-scoped resources).
    let lists = OWNED_TYPES.map(|t| {
        let by_cluster = &by_cluster;
        async move {
            let listed = state
                .list(t, by_cluster)
                .await
                .map_err(state_err("list", &ResourceRef::new(t, "")))?;
            Ok::<_, SyncError>((t, listed))
        }
    });
    let (found, listed) = futures::try_join!(
        async {
            state
                .get(types::CLUSTER, cluster)
                .await
                .map_err(state_err("get", &cluster_ref))
        },
        futures::future::try_join_all(lists),
    )?;
    if let Some(r) = found {
        actual.insert(cluster_ref, r);
    }
    let mut nodes = Vec::new();
    for (t, resources) in listed {
        for r in resources {
            let m = meta(&r);
            if !m.owner.is_empty()
                || m.labels
                    .contains_key(keys::MANAGED_BY_MACHINE_SET_NODE_CONTROLLER)
            {
                if t == types::MACHINE_SET_NODE
                    && let Some(set) = m.labels.get(keys::MACHINE_SET)
                {
                    *allocated.entry(set.clone()).or_default() += 1;
                }
                continue;
            }
            if t == types::MACHINE_SET_NODE {
                nodes.push(m.id.clone());
            }
            actual.insert(ResourceRef::new(t, m.id), r);
        }
    }
    // Machine-scoped resources carry no cluster label: found by the node's ID. The install
    // disk is a resource only on backend API 3 (older backends do not know the type).
    let machine_scoped: &[&str] = if api.install_disk_is_resource() {
        &[types::KERNEL_ARGS, types::MACHINE_INSTALL_DISK_CONFIG]
    } else {
        &[types::KERNEL_ARGS]
    };
    let gets = nodes.iter().flat_map(|node| {
        machine_scoped.iter().map(move |t| async move {
            let r = ResourceRef::new(*t, node.clone());
            let found = state.get(t, node).await.map_err(state_err("get", &r))?;
            Ok::<_, SyncError>(found.map(|found| (r, found)))
        })
    });
    actual.extend(
        futures::future::try_join_all(gets)
            .await?
            .into_iter()
            .flatten(),
    );
    Ok(actual)
}

/// Checks that every resource to delete belongs to `cluster`, then splits the deletions into
/// Omni's two phases after dropping what the server cascades itself.
pub(crate) fn delete_phases_for(
    cluster: &str,
    deletes: Vec<Resource>,
) -> Result<Vec<Vec<ResourceRef>>, SyncError> {
    for res in &deletes {
        let r = reference_of(res);
        let label = cluster_label(res);
        if r.resource_type != types::CLUSTER
            && !machine_scoped(&r.resource_type)
            && label != cluster
        {
            return Err(SyncError::ForeignResource {
                resource_type: r.resource_type,
                id: r.id,
                actual: label,
                expected: cluster.to_string(),
            });
        }
    }
    Ok(delete_phases(deletes))
}

/// Splits deletions into Omni's two phases after dropping what the server cascades itself.
fn delete_phases(deletes: Vec<Resource>) -> Vec<Vec<ResourceRef>> {
    let refs: Vec<ResourceRef> = deletes.iter().map(reference_of).collect();
    let deleted_sets: BTreeSet<String> = refs
        .iter()
        .filter(|r| r.resource_type == types::MACHINE_SET)
        .map(|r| r.id.clone())
        .collect();
    let deleted_clusters: BTreeSet<String> = refs
        .iter()
        .filter(|r| r.resource_type == types::CLUSTER)
        .map(|r| r.id.clone())
        .collect();
    let mut phase_a = Vec::new();
    let mut phase_b = Vec::new();
    for (r, res) in refs.into_iter().zip(deletes.iter()) {
        let m = meta(res);
        if r.resource_type == types::MACHINE_SET_NODE
            && m.labels
                .get(keys::MACHINE_SET)
                .is_some_and(|s| deleted_sets.contains(s))
        {
            continue;
        }
        if r.resource_type != types::CLUSTER
            && m.labels
                .get(keys::CLUSTER)
                .is_some_and(|c| deleted_clusters.contains(c))
        {
            continue;
        }
        if r.resource_type == types::MACHINE_SET || r.resource_type == types::MACHINE_SET_NODE {
            phase_a.push(r);
        } else {
            phase_b.push(r);
        }
    }
    let mut phases = Vec::new();
    for mut phase in [phase_a, phase_b] {
        sort_refs(&mut phase);
        if !phase.is_empty() {
            phases.push(phase);
        }
    }
    phases
}

fn sort_refs(refs: &mut [ResourceRef]) {
    refs.sort_by(|a, b| {
        type_rank(&a.resource_type)
            .cmp(&type_rank(&b.resource_type))
            .then_with(|| a.id.cmp(&b.id))
    });
}

/// Types scoped to a machine rather than a cluster: they carry no cluster label.
fn machine_scoped(resource_type: &str) -> bool {
    resource_type == types::KERNEL_ARGS || resource_type == types::MACHINE_INSTALL_DISK_CONFIG
}

/// Removes the managed-by-templates annotation (KernelArgs and install-disk configs are released,
/// never deleted, when a machine leaves a template); `None` when it is not there.
pub(crate) fn release_kernel_args(r: &Resource) -> Option<Resource> {
    let mut released = r.clone();
    let m = released.metadata.as_mut()?;
    m.annotations.remove(keys::MANAGED_BY_TEMPLATES)?;
    Some(released)
}

/// Validates and translates `template`, reads Omni's state and computes the change set.
/// Nothing is written. Translates for backend API 2; see [`plan_sync_for`]. How long it may
/// take is bounded by `state`: over
/// [`Client::template_state`](crate::transport::Client::template_state) (a
/// [`DeadlineState`](super::DeadlineState)) every read has a deadline, so a hung Omni ends the
/// plan with [`StateError::DeadlineExceeded`] instead of blocking its caller forever.
pub async fn plan_sync<S: TemplateState>(
    state: &S,
    template: &Template,
    files: &FileResolver,
) -> Result<Plan, SyncError> {
    plan_sync_for(state, template, files, &SyncOptions::default()).await
}

/// How a sync translates and stamps what it writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOptions {
    /// The backend API version to translate for.
    pub api: BackendApi,
    /// Annotations added to every resource written, e.g. Omni's
    /// [`keys::MANAGED_BY_GITOPS_TOOLS`]. Unlike template descriptors they may use Omni's
    /// reserved prefix: they describe the writer, not the template.
    pub annotations: BTreeMap<String, String>,
}

/// [`plan_sync`] with options (backend API version, writer annotations).
pub async fn plan_sync_for<S: TemplateState>(
    state: &S,
    template: &Template,
    files: &FileResolver,
    options: &SyncOptions,
) -> Result<Plan, SyncError> {
    template.validate(files)?;
    let api = options.api;
    let mut desired = translate_for(template, files, api)?;
    for d in &mut desired {
        d.annotations.extend(options.annotations.clone());
    }
    let cluster = template
        .cluster()
        .map(|c| c.name.clone())
        .ok_or(TranslateError::NoCluster)?;

    let mut allocated = BTreeMap::new();
    let mut actual = collect_owned_counting(state, &cluster, api, &mut allocated).await?;
    take_over_by_id(state, &cluster, &desired, &mut actual).await?;
    let (mut creates, mut updates) = creates_and_updates(state, &desired, &actual).await?;
    let desired_refs: BTreeSet<ResourceRef> = desired.iter().map(|d| d.reference()).collect();
    let (releases, deletes) = leftovers(&actual, &desired_refs);
    updates.extend(releases);
    let deleted: BTreeMap<ResourceRef, Resource> = deletes
        .iter()
        .map(|r| (reference_of(r), r.clone()))
        .collect();
    let delete_phases = delete_phases_for(&cluster, deletes)?;

    let order = |a: &Resource, b: &Resource| {
        let (x, y) = (reference_of(a), reference_of(b));
        type_rank(&x.resource_type)
            .cmp(&type_rank(&y.resource_type))
            .then_with(|| x.id.cmp(&y.id))
    };
    creates.sort_by(order);
    updates.sort_by(order);
    let deletes: Vec<ResourceRef> = delete_phases.iter().flatten().cloned().collect();
    let changes = changes_of(&creates, &updates, &deletes, &actual, &deleted);
    Ok(Plan {
        cluster,
        creates: creates.iter().map(reference_of).collect(),
        updates: updates.iter().map(reference_of).collect(),
        deletes,
        delete_phases,
        changes,
        allocated,
        create_resources: creates,
        update_resources: updates,
    })
}

/// Every change of a plan with the resource before (as Omni holds it, from `actual`, or from
/// `deleted` for a deletion) and after, in apply order.
fn changes_of(
    creates: &[Resource],
    updates: &[Resource],
    deletes: &[ResourceRef],
    actual: &BTreeMap<ResourceRef, Resource>,
    deleted: &BTreeMap<ResourceRef, Resource>,
) -> Vec<ResourceChange> {
    let updated = updates.iter().filter_map(|new| {
        actual
            .get(&reference_of(new))
            .map(|old| ResourceChange::update(old, new))
    });
    creates
        .iter()
        .map(ResourceChange::create)
        .chain(updated)
        .chain(
            deletes
                .iter()
                .filter_map(|r| deleted.get(r))
                .map(ResourceChange::delete),
        )
        .collect()
}

/// Adds to `actual` the desired resources that exist in Omni without having been collected as
/// the template's, when they may be taken over.
///
/// Unlike Omni's own client, a resource found by ID is taken over only when it already belongs
/// to this cluster (KernelArgs carry no cluster label): an ID collision with another cluster's,
/// or an unlabelled, resource is a conflict in [`creates_and_updates`], never an overwrite.
async fn take_over_by_id<S: TemplateState>(
    state: &S,
    cluster: &str,
    desired: &[DesiredResource],
    actual: &mut BTreeMap<ResourceRef, Resource>,
) -> Result<(), SyncError> {
    for d in desired {
        let r = d.reference();
        if actual.contains_key(&r) {
            continue;
        }
        if let Some(found) = state
            .get(&r.resource_type, &r.id)
            .await
            .map_err(state_err("get", &r))?
            && meta(&found).owner.is_empty()
            && (machine_scoped(&r.resource_type) || cluster_label(&found) == cluster)
        {
            actual.insert(r, found);
        }
    }
    Ok(())
}

/// What to create and what to update so that every desired resource exists as desired. A
/// desired resource that exists in Omni without being the template's is a conflict.
async fn creates_and_updates<S: TemplateState>(
    state: &S,
    desired: &[DesiredResource],
    actual: &BTreeMap<ResourceRef, Resource>,
) -> Result<(Vec<Resource>, Vec<Resource>), SyncError> {
    let mut creates = Vec::new();
    let mut updates = Vec::new();
    for d in desired {
        let r = d.reference();
        let mut expected = to_wire(d);
        match actual.get(&r) {
            Some(current) => {
                let cur = meta(current);
                if let Some(m) = expected.metadata.as_mut() {
                    m.version = cur.version.clone();
                    m.created = cur.created;
                    m.updated = cur.updated;
                    m.finalizers = cur.finalizers.clone();
                }
                if !equal(current, &expected) {
                    updates.push(expected);
                }
            }
            None => {
                if !machine_scoped(&r.resource_type)
                    && let Some(existing) = state
                        .get(&r.resource_type, &r.id)
                        .await
                        .map_err(state_err("get", &r))?
                {
                    return Err(SyncError::Conflicting {
                        resource_type: r.resource_type,
                        id: r.id,
                        other: cluster_label(&existing),
                    });
                }
                creates.push(expected);
            }
        }
    }
    Ok((creates, updates))
}

/// What becomes of the template's resources that it no longer describes: machine-scoped ones
/// are released (an update), the rest deleted. Returns `(updates, deletes)`.
fn leftovers(
    actual: &BTreeMap<ResourceRef, Resource>,
    desired_refs: &BTreeSet<ResourceRef>,
) -> (Vec<Resource>, Vec<Resource>) {
    let mut updates = Vec::new();
    let mut deletes = Vec::new();
    for (r, current) in actual {
        if desired_refs.contains(r) {
            continue;
        }
        if r.resource_type == types::KERNEL_ARGS {
            if let Some(released) = release_kernel_args(current) {
                updates.push(released);
            }
            continue;
        }
        if r.resource_type == types::MACHINE_INSTALL_DISK_CONFIG {
            // Only what templates wrote is touched. A machine still in the template went back
            // to automatic disk selection, which only deleting expresses; a machine that left
            // keeps its selection (a machine property) and is merely released, as Omni does.
            if meta(current)
                .annotations
                .contains_key(keys::MANAGED_BY_TEMPLATES)
            {
                let node = ResourceRef::new(types::MACHINE_SET_NODE, r.id.clone());
                if desired_refs.contains(&node) {
                    deletes.push(current.clone());
                } else if let Some(released) = release_kernel_args(current) {
                    updates.push(released);
                }
            }
            continue;
        }
        deletes.push(current.clone());
    }
    (updates, deletes)
}

/// Applies a plan: creates, updates, then each delete phase. Progress lines are appended to
/// `output` as they happen, so a failure still leaves the partial log. `deadline` bounds the
/// wait for torn-down resources to disappear.
pub async fn apply<S: TemplateState>(
    state: &S,
    plan: &Plan,
    deadline: Instant,
    output: &mut Vec<String>,
) -> Result<(), SyncError> {
    for r in &plan.create_resources {
        let rr = reference_of(r);
        output.push(format!("* creating {rr}"));
        state
            .create(r.clone())
            .await
            .map_err(state_err("create", &rr))?;
    }
    for r in &plan.update_resources {
        let rr = reference_of(r);
        output.push(format!("* updating {rr}"));
        state
            .update(r.clone())
            .await
            .map_err(state_err("update", &rr))?;
    }
    for phase in &plan.delete_phases {
        delete_phase(state, phase, deadline, output).await?;
    }
    Ok(())
}

/// Tears down every resource of a phase and destroys each once its finalizers are gone.
pub(crate) async fn delete_phase<S: TemplateState>(
    state: &S,
    phase: &[ResourceRef],
    deadline: Instant,
    output: &mut Vec<String>,
) -> Result<(), SyncError> {
    let kinds: BTreeSet<&str> = phase.iter().map(|r| r.resource_type.as_str()).collect();
    let mut events = SelectAll::new();
    for kind in kinds {
        let stream = state
            .watch_kind(kind)
            .await
            .map_err(state_err("watch", &ResourceRef::new(kind, "")))?;
        events.push(stream);
    }
    let mut pending: BTreeSet<ResourceRef> = BTreeSet::new();
    for r in phase {
        output.push(format!("* tearing down {r}"));
        match state.teardown(&r.resource_type, &r.id).await {
            Ok(_) => {
                pending.insert(r.clone());
            }
            // Already gone: nothing to wait for (Go would wait forever here).
            Err(StateError::NotFound(_)) => output.push(format!("* destroyed {r}")),
            Err(e) => return Err(state_err("teardown", r)(e)),
        }
    }
    while !pending.is_empty() {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        // Watch failures are reported against the first resource still awaited.
        let watch_failed = |source: StateError| match pending.first() {
            Some(resource) => SyncError::State {
                operation: "watch",
                resource: resource.clone(),
                source,
            },
            None => SyncError::Deadline {
                waiting_for: String::new(),
            },
        };
        let event = match next {
            Err(_) => {
                return Err(SyncError::Deadline {
                    waiting_for: pending
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            Ok(None) => return Err(watch_failed(StateError::Watch("stream ended".into()))),
            Ok(Some(Err(e))) => return Err(watch_failed(e)),
            Ok(Some(Ok(event))) => event,
        };
        let kind = event_type(&event);
        if kind == EventType::Errored {
            return Err(watch_failed(StateError::Watch(
                event.error.unwrap_or_default(),
            )));
        }
        let Some(resource) = event.resource.as_ref() else {
            continue;
        };
        let r = reference_of(resource);
        if !pending.contains(&r) {
            continue;
        }
        match kind {
            EventType::Created | EventType::Updated => {
                let m = meta(resource);
                if m.phase == PHASE_TEARING_DOWN && m.finalizers.is_empty() {
                    match state.destroy(&r.resource_type, &r.id).await {
                        Ok(()) | Err(StateError::NotFound(_)) => {}
                        Err(e) => return Err(state_err("destroy", &r)(e)),
                    }
                }
            }
            EventType::Destroyed => {
                pending.remove(&r);
                output.push(format!("* destroyed {r}"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Plans and applies in one go; returns the plan that was applied.
pub async fn sync<S: TemplateState>(
    state: &S,
    template: &Template,
    files: &FileResolver,
    deadline: Instant,
    output: &mut Vec<String>,
) -> Result<Plan, SyncError> {
    let plan = plan_sync(state, template, files).await?;
    apply(state, &plan, deadline, output).await?;
    Ok(plan)
}
