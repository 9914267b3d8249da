//! OmniCluster: render the cluster and its children into an Omni cluster template, keep Omni
//! in line with it, report Omni's view, and delete the Omni cluster on deletion.
//!
//! Unlike the original, a reconcile that finds Omni already matching the template writes
//! nothing: the change set is computed (reads only) and applied only when non-empty, and
//! status timestamps move only when something was applied.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use omni_client::template::TemplateState;
use omni_client::template::types::CLUSTER as CLUSTER_TYPE;
use omni_client::template::{
    BackendApi, DeleteProgress, Document, SyncOptions, apply, delete_cluster_for, keys,
    plan_sync_for, status_cluster,
};

use super::children::Child;
use super::index::{RefIndex, RefKey, namespace_of};
use super::secret_sync::ADOPT_ANNOTATION;
use super::{
    Context, Error, drive, dyn_ref, finalizer, indexed_controller_for, instrumented, status,
};
use crate::api::cluster::{
    ManifestGroupSyncState, OUT_OF_SYNC_MANIFESTS_LISTED, OmniClusterStatus, OutOfSyncManifest,
};
use crate::api::common::{
    Condition, ConditionStatus, condition_types as ct, find_condition, reasons, set_condition,
};
use crate::api::{OmniCluster, OmniConnection, OmniControlPlane, OmniMachine, OmniWorkers};
use crate::metrics::RpcOutcome;
use crate::render::{self, Rendered};
use kube::api::DynamicObject;

/// Longest Omni output kept in status.
pub const MAX_OUTPUT: usize = 4096;
/// How long the Omni work of one pass may take: the ownership check, plan and apply of a sync;
/// the status read; one delete step. Each call is bounded by the client's request timeout
/// ([`omni_client::transport::DEFAULT_REQUEST_TIMEOUT`], 30 s) as well, so a hung Omni fails
/// the pass (and the object retries with backoff) instead of wedging the object.
pub const OMNI_DEADLINE: Duration = Duration::from_secs(60);
/// Re-check interval while Omni tears a cluster down.
pub const DELETE_POLL: Duration = Duration::from_secs(5);

/// Annotation the operator puts on the Omni `Cluster` resource it creates or adopts:
/// `<namespace>/<name>/<uid>` of the OmniCluster. The UID is random per object, so it also
/// tells management clusters (and re-created objects) apart.
pub const OMNI_OWNER_ANNOTATION: &str = "omni.texashpc.com/owner";

/// Value of Omni's `omni.sidero.dev/managed-by-gitops-tools` annotation on everything this
/// operator writes: Omni's UI then tells people who manages the resource.
pub const GITOPS_TOOL: &str = "omni-operator";
/// Event reason when a deletion left an Omni cluster alone because this object does not own it.
pub const REASON_DELETE_SKIPPED: &str = "DeleteSkipped";

/// The owner stamp of `cluster`.
pub fn owner_stamp(cluster: &OmniCluster) -> String {
    format!(
        "{}/{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any(),
        cluster.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// Whose an existing Omni cluster is, as far as this OmniCluster is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OmniOwnership {
    /// Stamped with this object's owner annotation.
    Owned,
    /// Unstamped, but synced by this object before clusters were stamped: its status records a
    /// successful sync of this very cluster name.
    SyncedBeforeStamps,
    /// Stamped by someone else (the stamp).
    OwnedByOther(String),
    /// No stamp: created by hand, by another tool or by another template.
    Unowned,
}

impl OmniOwnership {
    /// Whether this object may change or delete the Omni cluster unasked.
    pub fn is_ours(&self) -> bool {
        matches!(
            self,
            OmniOwnership::Owned | OmniOwnership::SyncedBeforeStamps
        )
    }

    fn describe(&self) -> String {
        match self {
            OmniOwnership::OwnedByOther(stamp) => {
                format!("belongs to {stamp} ({OMNI_OWNER_ANNOTATION})")
            }
            _ => "was not created by this OmniCluster".to_string(),
        }
    }
}

/// Pure ownership decision from the Omni Cluster's annotations and this object's status.
pub fn omni_ownership(
    cluster: &OmniCluster,
    annotations: &std::collections::HashMap<String, String>,
) -> OmniOwnership {
    match annotations.get(OMNI_OWNER_ANNOTATION) {
        Some(stamp) if *stamp == owner_stamp(cluster) => OmniOwnership::Owned,
        Some(stamp) => OmniOwnership::OwnedByOther(stamp.clone()),
        None => {
            let status = cluster.status.as_ref();
            let synced = status.is_some_and(|s| {
                s.last_sync_time.is_some()
                    && s.cluster_name.as_deref() == Some(cluster.effective_cluster_name().as_str())
            });
            if synced {
                OmniOwnership::SyncedBeforeStamps
            } else {
                OmniOwnership::Unowned
            }
        }
    }
}

/// Reads the Omni Cluster `name`: `None` when it does not exist, else its ownership.
async fn existing_ownership<S: TemplateState>(
    state: &S,
    cluster: &OmniCluster,
    name: &str,
) -> Result<Option<OmniOwnership>, String> {
    let found = state
        .get(CLUSTER_TYPE, name)
        .await
        .map_err(|e| format!("get Omni cluster {name:?}: {e}"))?;
    Ok(found.map(|r| {
        let annotations = r.metadata.map(|m| m.annotations).unwrap_or_default();
        omni_ownership(cluster, &annotations)
    }))
}

fn adopt_requested(cluster: &OmniCluster) -> bool {
    cluster
        .annotations()
        .get(ADOPT_ANNOTATION)
        .map(String::as_str)
        == Some("true")
}

/// Trims whitespace and cuts to at most [`MAX_OUTPUT`] bytes on a character boundary (the
/// original could split a UTF-8 character).
pub fn trim_output(text: &str) -> String {
    let t = text.trim();
    let mut end = t.len().min(MAX_OUTPUT);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_string()
}

/// Omni's health-check results as status entries (empty strings left out).
fn health_check_statuses(
    results: &[omni_client::template::HealthCheckResult],
) -> Vec<crate::api::cluster::HealthCheckStatus> {
    let text = |s: &str| (!s.is_empty()).then(|| trim_output(s));
    results
        .iter()
        .map(|r| crate::api::cluster::HealthCheckStatus {
            id: r.id.clone(),
            state: r.state.clone(),
            error: text(&r.error),
            output: text(&r.output),
            job_namespace: text(&r.job_namespace),
            job_name: text(&r.job_name),
        })
        .collect()
}

/// Copies Omni's phase, machine counts, versions and manifest sync state into the typed
/// status. Only Omni's values go in (no timestamps), so a status read that finds nothing new
/// leaves the status as it was.
fn omni_state(status: &mut OmniClusterStatus, health: &omni_client::template::ClusterHealth) {
    use crate::api::cluster::{MachineSetState, ManifestGroupState, ManifestsState};
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    status.omni_phase = Some(health.phase.clone());
    status.ready_machines = Some(format!(
        "{}/{}",
        health.machines.healthy, health.machines.total
    ));
    status.talos_version = text(&health.talos_version);
    status.kubernetes_version = text(&health.kubernetes_version);
    status.machine_sets = health
        .machine_sets
        .iter()
        .map(|s| MachineSetState {
            id: s.id.clone(),
            phase: s.phase.clone(),
            ready: s.ready,
            ready_machines: s.machines.healthy,
            total_machines: s.machines.total,
        })
        .collect();
    status.manifests = health.manifests.as_ref().map(|m| ManifestsState {
        applied: m.out_of_sync == 0,
        total: m.total,
        out_of_sync: m.out_of_sync,
        last_error: trim_output(&m.last_error),
        groups: m
            .groups
            .iter()
            .map(|g| ManifestGroupState {
                id: g.id.clone(),
                phase: g.phase.clone(),
            })
            .collect(),
        out_of_sync_groups: m
            .groups
            .iter()
            .filter(|g| g.phase != "APPLIED" || !g.out_of_sync.is_empty())
            .map(out_of_sync_group)
            .collect(),
    });
}

/// A manifest group Omni has not applied as declared, with the first of its manifests that
/// are not applied (bounded, so a large group cannot grow the status without limit).
fn out_of_sync_group(g: &omni_client::template::ManifestGroupSync) -> ManifestGroupSyncState {
    let mode = match g.mode.as_str() {
        "ONE_TIME" => "one-time",
        _ => "full",
    };
    ManifestGroupSyncState {
        id: g.id.clone(),
        phase: g.phase.clone(),
        mode: mode.to_string(),
        total: g.total,
        out_of_sync: u32::try_from(g.out_of_sync.len()).unwrap_or(u32::MAX),
        manifests: g
            .out_of_sync
            .iter()
            .take(OUT_OF_SYNC_MANIFESTS_LISTED)
            .map(|m| OutOfSyncManifest {
                kind: m.kind.clone(),
                namespace: (!m.namespace.is_empty()).then(|| m.namespace.clone()),
                name: m.name.clone(),
                phase: m.phase.clone(),
            })
            .collect(),
    }
}

/// Status builder: a copy of the stored status with the generation stamped.
struct StatusDraft {
    status: OmniClusterStatus,
    generation: Option<i64>,
    now: jiff::Timestamp,
}

impl StatusDraft {
    fn new(cluster: &OmniCluster, now: jiff::Timestamp) -> Self {
        let mut status = cluster.status.clone().unwrap_or_default();
        status.observed_generation = cluster.metadata.generation;
        Self {
            status,
            generation: cluster.metadata.generation,
            now,
        }
    }

    fn set(&mut self, type_: &str, status: ConditionStatus, reason: &str, message: &str) {
        set_condition(
            &mut self.status.conditions,
            Condition::new(type_, status, reason, message, self.generation, self.now),
        );
    }

    /// "Mark failed": the given condition and `Ready` False with one reason and message.
    fn failed(&mut self, type_: &str, reason: &str, message: &str) {
        self.set(type_, ConditionStatus::False, reason, message);
        self.set(ct::READY, ConditionStatus::False, reason, message);
    }

    fn rendered(&mut self, conn: &OmniConnection, name: &str, r: &Rendered) {
        let s = &mut self.status;
        s.connection_ref = conn.metadata.name.clone();
        s.endpoint = Some(conn.spec.endpoint.clone());
        s.cluster_name = Some(name.to_string());
        s.template_hash = Some(r.hash.clone());
        s.control_plane_ref = Some(r.control_plane_ref.clone());
        s.workers_refs = r.workers_refs.clone();
        s.machine_refs = r.machine_refs.clone();
    }
}

async fn write(ctx: &Context, cluster: &OmniCluster, draft: StatusDraft) -> Result<(), Error> {
    status::report(ctx, cluster, &draft.status).await.map(drop)
}

fn not_found(kind: &str, name: &str) -> String {
    format!("{kind} {name:?} not found")
}

async fn delete(ctx: &Context, cluster: &OmniCluster) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let api = ctx.api::<OmniCluster>(&namespace);
    if !finalizer::has_finalizer(cluster, true) {
        return Ok(Action::await_change());
    }
    if !cluster.orphan_on_delete() {
        let name = cluster.effective_cluster_name();
        let conn_name = &cluster.spec.connection_ref.name;
        let mut draft = StatusDraft::new(cluster, ctx.clock.now());
        let conn = match ctx
            .api::<OmniConnection>(&namespace)
            .get_opt(conn_name)
            .await
        {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(not_found("omniconnections.omni.texashpc.com", conn_name)),
            Err(e) => Err(e.to_string()),
        };
        let client = match &conn {
            Ok(c) => ctx.omni.get(c).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                let m = format!(
                    "cannot delete remote Omni cluster without OmniConnection {conn_name:?}: {e}"
                );
                draft.failed(ct::READY, reasons::DELETE_FAILED, &m);
                write(ctx, cluster, draft).await?;
                return Err(Error::Remote(m));
            }
        };
        let state = client.template_state(tokio::time::Instant::now() + OMNI_DEADLINE);
        // Delete only what this object created: never a renamed target, never someone else's.
        let recorded = cluster.status.as_ref().and_then(|s| s.cluster_name.clone());
        if let Some(recorded) = recorded.filter(|n| !n.is_empty() && *n != name) {
            let m = format!(
                "spec.clusterName was changed from {recorded:?} to {name:?}; refusing to delete either Omni cluster. Restore spec.clusterName, or set spec.deletePolicy.orphan to finish without deleting"
            );
            draft.failed(ct::READY, reasons::DELETE_FAILED, &m);
            write(ctx, cluster, draft).await?;
            return Ok(Action::await_change());
        }
        match existing_ownership(&state, cluster, &name).await {
            Err(m) => {
                draft.failed(ct::READY, reasons::DELETE_FAILED, &m);
                write(ctx, cluster, draft).await?;
                return Err(Error::Remote(m));
            }
            Ok(Some(o)) if !o.is_ours() => {
                ctx.event(
                    cluster,
                    kube::runtime::events::EventType::Warning,
                    REASON_DELETE_SKIPPED,
                    format!("left Omni cluster {name:?} in place: it {}", o.describe()),
                )
                .await;
                finalizer::remove(&api, cluster, true).await?;
                ctx.metrics
                    .forget_resource("OmniCluster", &namespace, &cluster.name_any());
                return Ok(Action::await_change());
            }
            Ok(_) => {}
        }
        // On API 3 the machines' install-disk configs are released too; a version that cannot
        // be read or is unknown still lets the cluster go (API 2 touches only what every
        // version has).
        let api = match &conn {
            Ok(c) => ctx.omni.backend_api(c, &client).await.unwrap_or_default(),
            Err(_) => BackendApi::default(),
        };
        let mut output = Vec::new();
        let progress = delete_cluster_for(
            &state,
            &name,
            cluster.destroy_machines_on_delete(),
            api,
            &mut output,
        )
        .await;
        if !output.is_empty() {
            draft.status.last_sync_output = Some(trim_output(&output.join("\n")));
        }
        match progress {
            Ok(DeleteProgress::Done) => {
                ctx.metrics.omni_rpc(
                    "delete",
                    if output.is_empty() {
                        RpcOutcome::Unchanged
                    } else {
                        RpcOutcome::Changed
                    },
                );
            }
            Ok(DeleteProgress::InProgress { waiting_for }) => {
                ctx.metrics.omni_rpc("delete", RpcOutcome::Changed);
                let names: Vec<String> = waiting_for.iter().map(ToString::to_string).collect();
                let m = format!("waiting for Omni to delete {}", names.join(", "));
                draft.set(ct::READY, ConditionStatus::False, reasons::DELETING, &m);
                write(ctx, cluster, draft).await?;
                return Ok(Action::requeue(DELETE_POLL));
            }
            Err(e) => {
                ctx.metrics.omni_rpc("delete", RpcOutcome::Error);
                let m = e.to_string();
                draft.set(
                    ct::READY,
                    ConditionStatus::False,
                    reasons::DELETE_FAILED,
                    &m,
                );
                write(ctx, cluster, draft).await?;
                return Err(Error::Remote(m));
            }
        }
    }
    finalizer::remove(&api, cluster, true).await?;
    ctx.metrics
        .forget_resource("OmniCluster", &namespace, &cluster.name_any());
    Ok(Action::await_change())
}

async fn reconcile(cluster: Arc<OmniCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented(cluster.as_ref(), &ctx, async {
        if cluster.metadata.deletion_timestamp.is_some() {
            return delete(&ctx, &cluster).await;
        }
        let namespace = cluster.namespace().unwrap_or_default();
        if !finalizer::ensure(&ctx.api::<OmniCluster>(&namespace), cluster.as_ref(), true).await? {
            return Ok(Action::await_change());
        }
        // A syncInterval below the floor was stored without admission: clamp, don't hot-loop.
        let interval = crate::api::duration::clamp_interval(
            cluster
                .sync_interval()
                .to_std()
                .unwrap_or(Duration::from_secs(300)),
            ctx.min_interval,
        );
        let requeue = Action::requeue(interval);
        let mut draft = StatusDraft::new(&cluster, ctx.clock.now());
        let name = cluster.effective_cluster_name();

        // validate (admission rules, in case the webhook was bypassed)
        let validation = crate::api::cluster::validate_stored(&cluster);
        if !validation.is_valid() {
            // "Mark failed" always names the cluster, so users see which Omni cluster is affected.
            draft.status.cluster_name = Some(name.clone());
            draft.failed(
                ct::VALIDATED,
                reasons::VALIDATION_FAILED,
                &validation.error_summary(),
            );
            write(&ctx, &cluster, draft).await?;
            return Ok(Action::await_change());
        }
        if cluster.spec.suspend {
            draft.set(
                ct::READY,
                ConditionStatus::False,
                reasons::SUSPENDED,
                "remote Omni sync is suspended",
            );
            write(&ctx, &cluster, draft).await?;
            return Ok(requeue);
        }

        // dereference
        draft.status.cluster_name = Some(name.clone());
        let conn_name = &cluster.spec.connection_ref.name;
        let conn = match ctx
            .api::<OmniConnection>(&namespace)
            .get_opt(conn_name)
            .await
        {
            Ok(Some(c)) => c,
            other => {
                let detail = match other {
                    Err(e) => e.to_string(),
                    _ => not_found("omniconnections.omni.texashpc.com", conn_name),
                };
                let m = format!("failed to get OmniConnection {conn_name:?}: {detail}");
                draft.failed(ct::SYNCED, reasons::MISSING_CONNECTION, &m);
                write(&ctx, &cluster, draft).await?;
                return Ok(requeue);
            }
        };
        let (cps, workers, machines) = children_of(&ctx, &cluster).await?;

        // build (pure)
        let rendered = match render::render(&cluster, &cps, &workers, &machines) {
            Ok(r) => r,
            Err(e) => {
                draft.failed(ct::VALIDATED, e.reason(), &e.to_string());
                write(&ctx, &cluster, draft).await?;
                return Ok(requeue);
            }
        };
        draft.rendered(&conn, &name, &rendered);
        let mut rendered = rendered;
        // The owner stamp is added after hashing: it identifies the writer, not the template.
        for doc in &mut rendered.template.documents {
            if let Document::Cluster(c) = doc {
                c.annotations
                    .insert(OMNI_OWNER_ANNOTATION.to_string(), owner_stamp(&cluster));
            }
        }
        let files = render::file_resolver(&cluster, ctx.template_root.as_deref());

        if let Err(e) = rendered.template.validate(&files) {
            draft.failed(ct::VALIDATED, reasons::VALIDATION_FAILED, &e.to_string());
            write(&ctx, &cluster, draft).await?;
            return Ok(requeue);
        }

        // apply: plan (reads only), write only when Omni differs.
        let sync_failed = |draft: &mut StatusDraft, e: String, output: &[String]| {
            let out = trim_output(&output.join("\n"));
            draft.status.last_attempt_time = Some(draft.now);
            draft.status.last_sync_output = Some(out.clone());
            draft.set(
                ct::VALIDATED,
                ConditionStatus::True,
                reasons::VALIDATED,
                "rendered Omni cluster template is valid",
            );
            let mut m = format!("sync failed: {e}");
            if !out.is_empty() {
                m.push('\n');
                m.push_str(&out);
            }
            draft.failed(ct::SYNCED, reasons::SYNC_FAILED, &m);
            m
        };
        let client = match ctx.omni.get(&conn).await {
            Ok(c) => c,
            Err(e) => {
                let m = sync_failed(&mut draft, e.to_string(), &[]);
                write(&ctx, &cluster, draft).await?;
                return Err(Error::Remote(m));
            }
        };
        let deadline = tokio::time::Instant::now() + OMNI_DEADLINE;
        let state = client.template_state(deadline);
        let mut output = Vec::new();
        // Never sync into an existing Omni cluster this object did not create, unless adopted.
        match existing_ownership(&state, &cluster, &name).await {
            Ok(Some(o)) if !o.is_ours() && !adopt_requested(&cluster) => {
                let e = format!(
                    "Omni cluster {name:?} already exists and {}; it was left unchanged (annotate this OmniCluster {ADOPT_ANNOTATION}=\"true\" to take it over)",
                    o.describe()
                );
                sync_failed(&mut draft, e, &[]);
                write(&ctx, &cluster, draft).await?;
                return Ok(requeue);
            }
            Ok(_) => {}
            Err(e) => {
                let m = sync_failed(&mut draft, e, &[]);
                write(&ctx, &cluster, draft).await?;
                return Err(Error::Remote(m));
            }
        }
        // The install disk is translated for the backend API version Omni speaks.
        let api = match ctx.omni.backend_api(&conn, &client).await {
            Ok(api) => api,
            Err(e) => {
                let m = sync_failed(&mut draft, e.to_string(), &[]);
                write(&ctx, &cluster, draft).await?;
                return Err(Error::Remote(m));
            }
        };
        let options = SyncOptions {
            api,
            annotations: BTreeMap::from([(
                keys::MANAGED_BY_GITOPS_TOOLS.to_string(),
                GITOPS_TOOL.to_string(),
            )]),
        };
        let applied = match plan_sync_for(&state, &rendered.template, &files, &options).await {
            Ok(plan) if plan.is_empty() => Ok(false),
            Ok(plan) => {
                apply(&state, &plan, deadline, &mut output)
                    .await
                    .map(|()| true)
            }
            Err(e) => Err(e),
        };
        match applied {
            Err(e) => {
                ctx.metrics.omni_rpc("sync", RpcOutcome::Error);
                let m = sync_failed(&mut draft, e.to_string(), &output);
                write(&ctx, &cluster, draft).await?;
                return Err(Error::Remote(m));
            }
            Ok(changed) => {
                ctx.metrics.omni_rpc(
                    "sync",
                    if changed {
                        RpcOutcome::Changed
                    } else {
                        RpcOutcome::Unchanged
                    },
                );
                let first = draft.status.last_sync_time.is_none();
                let synced_before = find_condition(&draft.status.conditions, ct::SYNCED)
                    .is_some_and(|c| c.status == ConditionStatus::True);
                if changed || first || !synced_before {
                    draft.status.last_attempt_time = Some(draft.now);
                    draft.status.last_sync_time = Some(draft.now);
                    draft.status.last_sync_output = Some(trim_output(&output.join("\n")));
                }
            }
        }
        draft.set(
            ct::VALIDATED,
            ConditionStatus::True,
            reasons::VALIDATED,
            "rendered Omni cluster template is valid",
        );
        draft.set(
            ct::SYNCED,
            ConditionStatus::True,
            reasons::SYNCED,
            "template synced to Omni",
        );

        // status from Omni
        let deadline = tokio::time::Instant::now() + OMNI_DEADLINE;
        match status_cluster(&client.template_state(deadline), &name, deadline).await {
            Ok(health) => {
                ctx.metrics.omni_rpc("status", RpcOutcome::Unchanged);
                draft.status.last_status_output = Some(trim_output(&health.summary));
                draft.status.health_checks = health_check_statuses(&health.health_checks);
                omni_state(&mut draft.status, &health);
                draft.set(
                    ct::READY,
                    ConditionStatus::True,
                    reasons::SYNCED,
                    "cluster template is synced and status was read from Omni",
                );
            }
            Err(e) => {
                ctx.metrics.omni_rpc("status", RpcOutcome::Error);
                tracing::warn!(cluster = %name, error = %e, "could not read Omni cluster status");
                draft.set(
                    ct::READY,
                    ConditionStatus::False,
                    reasons::STATUS_FAILED,
                    &e.to_string(),
                );
            }
        }
        write(&ctx, &cluster, draft).await?;
        Ok(requeue)
    })
    .await
}

/// Which child list of a cluster's status a child kind appears in.
#[derive(Clone, Copy)]
enum ChildKind {
    ControlPlane,
    Workers,
    Machine,
}

impl ChildKind {
    /// The index key of a child of this kind named `name` in `namespace`, under which the
    /// clusters that rendered it are found.
    fn key(self, namespace: &str, name: &str) -> RefKey {
        let what = match self {
            ChildKind::ControlPlane => "rendered-control-plane",
            ChildKind::Workers => "rendered-workers",
            ChildKind::Machine => "rendered-machine",
        };
        RefKey::new(what, namespace, name)
    }
}

/// What a cluster refers to: its connection, and the children its last render used (listed in
/// its status), so a child moved to another cluster finds the cluster it left.
fn cluster_keys(cluster: &OmniCluster) -> Vec<RefKey> {
    let ns = namespace_of(cluster);
    let mut keys = vec![RefKey::new(
        "connection",
        &ns,
        &cluster.spec.connection_ref.name,
    )];
    if let Some(s) = &cluster.status {
        keys.extend(
            s.control_plane_ref
                .iter()
                .map(|n| ChildKind::ControlPlane.key(&ns, n)),
        );
        keys.extend(
            s.workers_refs
                .iter()
                .map(|n| ChildKind::Workers.key(&ns, n)),
        );
        keys.extend(
            s.machine_refs
                .iter()
                .map(|n| ChildKind::Machine.key(&ns, n)),
        );
    }
    keys
}

/// Clusters to re-render after a change to a child: the one it references now and any that
/// rendered it before. Watches only see the new object, so a child moved to another cluster
/// would otherwise linger in its old cluster's template until the next resync.
fn child_targets(
    clusters: &RefIndex<OmniCluster>,
    namespace: Option<String>,
    cluster_ref: &str,
    child: &str,
    kind: ChildKind,
) -> Vec<ObjectRef<DynamicObject>> {
    let ns = namespace.unwrap_or_default();
    let current = (!cluster_ref.is_empty())
        .then(|| dyn_ref::<OmniCluster>(cluster_ref, Some(ns.as_str()).filter(|n| !n.is_empty())));
    let rendered = clusters
        .get(&kind.key(&ns, child))
        .into_iter()
        .filter(|r| r.name != cluster_ref);
    current.into_iter().chain(rendered).collect()
}

/// The cluster controller's caches of OmniControlPlanes, OmniWorkers and OmniMachines, filled
/// by the same watches that wake it when a child changes. Each reconcile used to list all
/// three kinds of its namespace: with every cluster reconciling at once in a cold start, that
/// held clusters × children objects in memory (20 GiB at 1,000 clusters, omni-bench).
#[derive(Clone)]
pub(crate) struct ChildCaches {
    control_planes: Store<OmniControlPlane>,
    workers: Store<OmniWorkers>,
    machines: Store<OmniMachine>,
}

/// The children of `cluster` (what [`render::render`] selects), from the controller's caches
/// once they are filled, or listed when the controller's watches are not running.
async fn children_of(
    ctx: &Context,
    cluster: &OmniCluster,
) -> Result<(Vec<OmniControlPlane>, Vec<OmniWorkers>, Vec<OmniMachine>), Error> {
    // The selection render::render makes: same namespace, clusterRef naming this cluster.
    fn mine<K: Child>(cluster: &OmniCluster, all: Vec<Arc<K>>) -> Vec<K> {
        all.into_iter()
            .filter(|c| {
                c.meta().namespace == cluster.metadata.namespace
                    && Some(c.cluster_ref()) == cluster.metadata.name.as_deref()
            })
            .map(|c| c.as_ref().clone())
            .collect()
    }
    let caches = ctx.cluster_children.read().ok().and_then(|c| c.clone());
    if let Some(c) = caches {
        // A cache still listing would render the cluster without children it has.
        let ready = c.control_planes.wait_until_ready().await.is_ok()
            && c.workers.wait_until_ready().await.is_ok()
            && c.machines.wait_until_ready().await.is_ok();
        if ready {
            return Ok((
                mine(cluster, c.control_planes.state()),
                mine(cluster, c.workers.state()),
                mine(cluster, c.machines.state()),
            ));
        }
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let lp = ListParams::default();
    Ok((
        ctx.api::<OmniControlPlane>(&namespace)
            .list(&lp)
            .await?
            .items,
        ctx.api::<OmniWorkers>(&namespace).list(&lp).await?.items,
        ctx.api::<OmniMachine>(&namespace).list(&lp).await?.items,
    ))
}

/// A watch of child kind `K` that fills `writer` as it goes.
fn cached_children<K: Child>(
    ctx: &Context,
    writer: kube::runtime::reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    use kube::runtime::WatchStreamExt as _;
    watcher(ctx.watch_api::<K>(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .touched_objects()
}

/// Runs the OmniCluster controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (controller, index) = indexed_controller_for::<OmniCluster>(&ctx, cluster_keys);
    let (by_cp, by_workers, by_machine) = (index.clone(), index.clone(), index.clone());
    let wc = watcher::Config::default;
    let (cp_store, cp_writer) = kube::runtime::reflector::store::<OmniControlPlane>();
    let (workers_store, workers_writer) = kube::runtime::reflector::store::<OmniWorkers>();
    let (machines_store, machines_writer) = kube::runtime::reflector::store::<OmniMachine>();
    if let Ok(mut slot) = ctx.cluster_children.write() {
        *slot = Some(ChildCaches {
            control_planes: cp_store,
            workers: workers_store,
            machines: machines_store,
        });
    }
    let controller = controller
        .watches(
            ctx.watch_api::<OmniConnection>(),
            wc(),
            move |conn: OmniConnection| {
                if !crate::baseline::mapped_event_passes("connection→cluster", &conn.metadata) {
                    return Vec::new();
                }
                index.get(&RefKey::new(
                    "connection",
                    &namespace_of(&conn),
                    &conn.name_any(),
                ))
            },
        )
        .watches_stream(
            cached_children(&ctx, cp_writer),
            move |c: OmniControlPlane| {
                let (name, cluster) = (c.name_any(), c.spec.cluster_ref.name.clone());
                child_targets(
                    &by_cp,
                    c.namespace(),
                    &cluster,
                    &name,
                    ChildKind::ControlPlane,
                )
            },
        )
        .watches_stream(
            cached_children(&ctx, workers_writer),
            move |c: OmniWorkers| {
                let (name, cluster) = (c.name_any(), c.spec.cluster_ref.name.clone());
                child_targets(
                    &by_workers,
                    c.namespace(),
                    &cluster,
                    &name,
                    ChildKind::Workers,
                )
            },
        )
        .watches_stream(
            cached_children(&ctx, machines_writer),
            move |c: OmniMachine| {
                let (name, cluster) = (c.name_any(), c.spec.cluster_ref.name.clone());
                child_targets(
                    &by_machine,
                    c.namespace(),
                    &cluster,
                    &name,
                    ChildKind::Machine,
                )
            },
        );
    drive::<OmniCluster, _, _>(controller, ctx.clone(), shutdown, reconcile).await;
    if let Ok(mut slot) = ctx.cluster_children.write() {
        *slot = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster_object(name: &str, status: OmniClusterStatus) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"connectionRef": {"name": "omni"},
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        obj.data["status"] = serde_json::to_value(status).unwrap_or_default();
        obj
    }

    #[test]
    fn a_moved_child_re_renders_its_new_and_its_previous_cluster() {
        let index = RefIndex::new(cluster_keys);
        let old = OmniClusterStatus {
            control_plane_ref: Some("cp".into()),
            workers_refs: vec!["w1".into(), "w2".into()],
            machine_refs: vec!["m".into()],
            ..OmniClusterStatus::default()
        };
        index.apply(&kube::runtime::watcher::Event::Apply(cluster_object(
            "old", old,
        )));
        index.apply(&kube::runtime::watcher::Event::Apply(cluster_object(
            "new",
            OmniClusterStatus::default(),
        )));
        let targets = |child: &str, kind: ChildKind| -> Vec<String> {
            let mut names: Vec<String> =
                child_targets(&index, Some("ns".into()), "new", child, kind)
                    .into_iter()
                    .map(|r| r.name)
                    .collect();
            names.sort();
            names
        };
        assert_eq!(targets("cp", ChildKind::ControlPlane), ["new", "old"]);
        assert_eq!(targets("w2", ChildKind::Workers), ["new", "old"]);
        assert_eq!(targets("m", ChildKind::Machine), ["new", "old"]);
        assert_eq!(
            targets("cp", ChildKind::Workers),
            ["new"],
            "a control plane name is no workers name"
        );
        assert_eq!(targets("w1", ChildKind::Machine), ["new"]);
    }

    #[test]
    fn an_omni_cluster_is_ours_by_stamp_or_by_a_sync_recorded_before_stamps() {
        let mut c: OmniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniCluster",
            "metadata": {"name": "edge", "namespace": "ops", "uid": "u-1"},
            "spec": {"connectionRef": {"name": "omni"}, "clusterName": "prod",
                     "kubernetes": {"version": "v1.35.0"}, "talos": {"version": "v1.13.2"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(owner_stamp(&c), "ops/edge/u-1");
        let stamp = |v: &str| {
            std::collections::HashMap::from([(OMNI_OWNER_ANNOTATION.to_string(), v.to_string())])
        };
        let none = std::collections::HashMap::new();
        assert_eq!(
            omni_ownership(&c, &stamp("ops/edge/u-1")),
            OmniOwnership::Owned
        );
        assert_eq!(
            omni_ownership(&c, &stamp("ops/edge/u-0")),
            OmniOwnership::OwnedByOther("ops/edge/u-0".into()),
            "a re-created object of the same name is someone else"
        );
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::Unowned);
        // A status that only names the cluster (set before any sync) proves nothing...
        c.status = Some(OmniClusterStatus {
            cluster_name: Some("prod".into()),
            ..OmniClusterStatus::default()
        });
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::Unowned);
        // ...a recorded successful sync of that name does (clusters synced before stamps).
        if let Some(s) = c.status.as_mut() {
            s.last_sync_time = Some(
                "2026-01-01T00:00:00Z"
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::SyncedBeforeStamps);
        c.spec.cluster_name = Some("other".into());
        assert_eq!(omni_ownership(&c, &none), OmniOwnership::Unowned);
    }

    #[test]
    fn output_is_trimmed_and_cut_on_a_character_boundary() {
        assert_eq!(trim_output("  ok \n"), "ok");
        let long = "é".repeat(3000); // 6000 bytes
        let cut = trim_output(&long);
        assert!(cut.len() <= MAX_OUTPUT);
        assert_eq!(cut.len(), 4096);
        let odd = format!("a{}", "é".repeat(3000));
        let cut = trim_output(&odd);
        assert_eq!(cut.len(), 4095);
    }
}
