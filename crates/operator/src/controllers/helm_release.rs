//! OmniHelmRelease: a Helm release in a workload cluster, driven through the helm CLI
//! ([`crate::helm`]) with the kubeconfig from an explicitly named Secret.
//!
//! Differences from the original (see `docs/helm.md`): Helm runs only when the input digest
//! (target, chart, version, values) changed or the release drifted (missing, failed, or changed
//! out of band), so a kubeconfig rotation alone creates no revision; a periodic drift check
//! repairs out-of-band changes; a failed upgrade that Helm rolled back (`atomic`) raises a
//! Warning Event; a release stuck in `pending-*` longer than its timeout is reported, and
//! recovered when `spec.recoverStuckRelease` allows it; repository credentials and a CA bundle
//! come from a Secret; a deletion whose kubeconfig Secret is gone reports why and how to finish
//! it instead of waiting silently.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};

use super::connection::status_str;
use super::index::{RefKey, namespace_of};
use super::secret_sync::{ADOPT_ANNOTATION, REASON_TARGET_NOT_OWNED};
use super::{Context, Error, drive, finalizer, indexed_controller_for, instrumented, status};
use crate::api::common::{
    Condition, condition_types as ct, find_condition, reasons, set_condition,
};
use crate::api::helm_release::{HelmDeletionPolicy, OmniHelmReleaseStatus};
use crate::api::{OmniCluster, OmniHelmRelease};
use crate::helm::args::InstallVerb;
use crate::helm::{
    ChartSource, HelmError, HistoryEntry, ReleaseInfo, ReleaseRequest, ReleaseSession,
    RepositoryAuth,
};
use crate::metrics::ResourceInfo;
use crate::secret_policy::{self, SecretUse};

const KIND: &str = "OmniHelmRelease";

/// Re-check while a dependency (cluster, Secret, helm) is missing.
pub const RETRY: Duration = Duration::from_secs(60);
/// Fallback for a drift check interval that does not parse (the spec check rejects it first).
const DEFAULT_DRIFT_CHECK: Duration = Duration::from_secs(300);
/// Fallback for a timeout that does not parse (the spec check rejects it first).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Reason while a `pending-*` release is younger than its timeout (another Helm run may own it).
pub const REASON_RELEASE_PENDING: &str = "ReleasePending";
/// Reason when a release has been `pending-*` for longer than its timeout.
pub const REASON_RELEASE_STUCK: &str = "ReleaseStuck";
/// Event reason when a stuck release was recovered (`spec.recoverStuckRelease`).
pub const REASON_STUCK_RECOVERED: &str = "StuckReleaseRecovered";
/// Reason when the operator has no usable helm binary.
pub const REASON_HELM_UNAVAILABLE: &str = "HelmUnavailable";
/// Event reason when Helm rolled a failed upgrade back (`atomic`).
pub const REASON_ROLLED_BACK: &str = "RolledBack";
/// Event reason when a deletion left a release alone because this object does not own it.
pub const REASON_UNINSTALL_SKIPPED: &str = "UninstallSkipped";
/// Event reason when an existing release was taken over on the user's request.
pub const REASON_ADOPTED: &str = "Adopted";
/// Event reason when a healthy-looking release drifted and is repaired.
pub const REASON_DRIFT: &str = "DriftDetected";

/// Release label (helm `--labels`, kept on helm's storage Secret) holding the UID of the
/// OmniHelmRelease that owns the release. UIDs are random per object and per management
/// cluster, so this names both the object and the management cluster it lives in.
pub const OWNER_UID_LABEL: &str = "omni.texashpc.com/owner-uid";
/// Release label with the owning OmniHelmRelease's namespace (for people; the UID decides).
pub const OWNER_NAMESPACE_LABEL: &str = "omni.texashpc.com/owner-namespace";
/// Release label with the owning OmniHelmRelease's name, when it fits a label value (63 chars).
pub const OWNER_NAME_LABEL: &str = "omni.texashpc.com/owner-name";

/// Release label naming the operator process that started the revision: its helm driver's
/// run id ([`crate::helm::Helm::run_id`]), random per process.
pub const STARTED_BY_RUN_LABEL: &str = "omni.texashpc.com/started-by-run";
/// Release label with the revision number that process started. Helm merges release labels
/// into later revisions, so a revision someone else starts on top of ours (a `helm upgrade` by
/// hand, a rollback) inherits our run label but not a matching revision number.
pub const STARTED_REVISION_LABEL: &str = "omni.texashpc.com/started-revision";

/// The labels marking the revision `revision` as started by the operator process `run_id`.
pub fn run_labels(run_id: &str, revision: i64) -> Vec<(String, String)> {
    vec![
        (STARTED_BY_RUN_LABEL.to_string(), run_id.to_string()),
        (STARTED_REVISION_LABEL.to_string(), revision.to_string()),
    ]
}

/// Who started the newest revision of a release, as its labels tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Starter {
    /// This operator process.
    ThisRun,
    /// An earlier operator process. Leader election fences every earlier leader before a new
    /// one starts, and its helm processes die with it, so nothing still works on the revision.
    EarlierRun,
    /// Unmarked or inherited marks: someone else (a person, another tool, a rollback), or an
    /// operator version that did not mark revisions.
    Unknown,
}

/// Pure decision of [`Starter`] from the newest revision's labels and Helm's view of it.
pub fn starter(
    labels: &std::collections::BTreeMap<String, String>,
    info: &ReleaseInfo,
    run_id: &str,
) -> Starter {
    match (
        labels.get(STARTED_BY_RUN_LABEL),
        labels.get(STARTED_REVISION_LABEL),
    ) {
        (Some(run), Some(revision)) if *revision == info.revision.to_string() => {
            if run == run_id {
                Starter::ThisRun
            } else {
                Starter::EarlierRun
            }
        }
        _ => Starter::Unknown,
    }
}

/// The ownership labels this object puts on every revision it installs or upgrades.
pub fn owner_labels(r: &OmniHelmRelease) -> Vec<(String, String)> {
    let Some(uid) = r.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
        return Vec::new();
    };
    let mut labels = vec![(OWNER_UID_LABEL.to_string(), uid.to_string())];
    if let Some(ns) = r.metadata.namespace.as_deref() {
        labels.push((OWNER_NAMESPACE_LABEL.to_string(), ns.to_string()));
    }
    let name = r.name_any();
    // Object names may be 253 characters long, label values only 63.
    if name.len() <= 63 {
        labels.push((OWNER_NAME_LABEL.to_string(), name));
    }
    labels
}

/// Whose an existing release is, as far as this OmniHelmRelease is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Labelled with this object's UID.
    Owned,
    /// Unlabelled, but installed by this object before releases were labelled: its stored
    /// status records a successful Helm run for this very target at the current revision.
    InstalledBeforeLabels,
    /// Labelled as another OmniHelmRelease's (described for the message).
    OwnedByOther(String),
    /// Not installed by any OmniHelmRelease we know of (e.g. `helm install` by hand).
    Unowned,
}

impl Ownership {
    /// Whether this object may upgrade, roll back or uninstall the release unasked.
    pub fn is_ours(&self) -> bool {
        matches!(self, Ownership::Owned | Ownership::InstalledBeforeLabels)
    }
}

/// Pure ownership decision from the release labels (`helm get metadata`), Helm's view of the
/// release and this object's stored status.
pub fn ownership(
    r: &OmniHelmRelease,
    labels: &std::collections::BTreeMap<String, String>,
    info: &ReleaseInfo,
) -> Ownership {
    let own_uid = r.metadata.uid.as_deref().filter(|u| !u.is_empty());
    match labels.get(OWNER_UID_LABEL) {
        Some(uid) if Some(uid.as_str()) == own_uid => Ownership::Owned,
        Some(uid) => Ownership::OwnedByOther(
            match (
                labels.get(OWNER_NAMESPACE_LABEL),
                labels.get(OWNER_NAME_LABEL),
            ) {
                (Some(ns), Some(name)) => format!("OmniHelmRelease {ns}/{name} (uid {uid})"),
                _ => format!("another OmniHelmRelease (uid {uid})"),
            },
        ),
        None if installed_before_labels(r, info) => Ownership::InstalledBeforeLabels,
        None => Ownership::Unowned,
    }
}

/// Recognises a release this object installed with an operator version that did not label
/// releases yet: the stored status must name the same target (release, namespace, kubeconfig
/// Secret and key) and Helm's current revision, and record a successful apply (the digest).
/// The status is only written by the operator (status subresource), and any refusal clears the
/// digest, so an object pointed at someone else's release never matches.
fn installed_before_labels(r: &OmniHelmRelease, info: &ReleaseInfo) -> bool {
    let Some(s) = &r.status else {
        return false;
    };
    s.last_applied_digest.is_some()
        && s.release_name.as_deref() == Some(r.effective_release_name().as_str())
        && s.namespace.as_deref() == Some(r.spec.namespace.as_str())
        && s.kubeconfig_secret_ref.as_deref() == Some(r.spec.kubeconfig_secret_ref.name.as_str())
        && s.kubeconfig_secret_key.as_deref() == Some(r.spec.kubeconfig_secret_ref.key.as_str())
        && s.release_revision == Some(info.revision)
}

/// Whether the user allowed this object to take over a release it does not own.
fn adopt_requested(r: &OmniHelmRelease) -> bool {
    r.annotations().get(ADOPT_ANNOTATION).map(String::as_str) == Some("true")
}

/// What to do with the release, decided from Helm's view and the stored status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// No release exists: install it.
    Install,
    /// The release exists but its inputs changed or it drifted: upgrade it.
    Upgrade,
    /// The deployed release is the one last applied with the current inputs.
    UpToDate,
}

/// Digest of the inputs that define the release. Deliberately excludes the kubeconfig bytes
/// (a rotation must not upgrade) and operation knobs like `wait` or `timeout`.
pub fn input_digest(r: &OmniHelmRelease) -> String {
    let spec = &r.spec;
    let source = match ChartSource::from_spec(&spec.chart.repository, &spec.chart.chart) {
        ChartSource::Repository { url, chart } => {
            serde_json::json!({"repository": url, "chart": chart})
        }
        ChartSource::Oci { reference } => serde_json::json!({"oci": reference}),
    };
    // serde_json maps are sorted, so the encoding (and digest) is stable.
    let inputs = serde_json::json!({
        "clusterRef": spec.cluster_ref.name,
        "kubeconfigSecret": spec.kubeconfig_secret_ref.name,
        "kubeconfigKey": spec.kubeconfig_secret_ref.key,
        "releaseName": r.effective_release_name(),
        "namespace": spec.namespace,
        "source": source,
        "version": spec.chart.version.trim(),
        "values": spec.chart.values,
        "skipCRDs": spec.skip_crds,
    });
    hex::encode(Sha256::digest(inputs.to_string().as_bytes()))
}

/// Pure decision: install when missing, upgrade unless the deployed revision is the one this
/// object last applied with the same digest.
pub fn plan(current: Option<&ReleaseInfo>, stored: &OmniHelmReleaseStatus, digest: &str) -> Plan {
    let Some(info) = current else {
        return Plan::Install;
    };
    if info.status == "uninstalled" {
        return Plan::Install;
    }
    let same_inputs = stored.last_applied_digest.as_deref() == Some(digest);
    let same_revision = stored.release_revision == Some(info.revision);
    if info.status == "deployed" && same_inputs && same_revision {
        Plan::UpToDate
    } else {
        Plan::Upgrade
    }
}

/// What to do about a release Helm reports in a `pending-*` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Younger than its timeout: another Helm run may still own it; look again after this long.
    Wait(Duration),
    /// Older than its timeout, and recovery is not allowed: report it.
    Stuck,
    /// Older than its timeout, and `spec.recoverStuckRelease` allows recovering it.
    Recover,
    /// Started by an earlier operator process, which is gone: recovered at once.
    Abandoned,
}

/// Pure decision for a release in `pending-*` (`None` when it is not pending). A revision an
/// earlier operator process started (and this object owns, see [`starter`]) was abandoned when
/// that process ended. Otherwise the age counts from the pending revision's `last_deployed`,
/// which Helm stamps when the operation starts; a record without it is treated as old, since no
/// running operation writes such a record.
pub fn pending(
    info: &ReleaseInfo,
    now: jiff::Timestamp,
    timeout: Duration,
    recover_allowed: bool,
    started_by: Starter,
) -> Option<Pending> {
    if !info.is_pending() {
        return None;
    }
    if started_by == Starter::EarlierRun {
        return Some(Pending::Abandoned);
    }
    let started = info
        .last_deployed
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let age = started.map(|t| now.duration_since(t).try_into().unwrap_or(Duration::ZERO));
    Some(match age {
        Some(age) if age <= timeout => Pending::Wait(timeout - age + Duration::from_secs(5)),
        _ if recover_allowed => Pending::Recover,
        _ => Pending::Stuck,
    })
}

/// How a stuck release is recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Roll back to this earlier revision (pending upgrade or rollback).
    Rollback(i64),
    /// Remove the half-installed release (pending install); it is installed again afterwards.
    Uninstall,
    /// No earlier revision to return to; a person has to decide.
    Impossible,
}

/// Pure choice of the recovery for a stuck release: a pending install is uninstalled; a pending
/// upgrade or rollback goes back to the newest earlier revision that was deployed (or, failing
/// that, the newest earlier one that is not itself pending).
pub fn recovery(info: &ReleaseInfo, history: &[HistoryEntry]) -> Recovery {
    if info.status == "pending-install" {
        return Recovery::Uninstall;
    }
    let earlier = || {
        history
            .iter()
            .filter(|h| h.revision < info.revision && !h.status.starts_with("pending-"))
    };
    earlier()
        .filter(|h| h.status == "deployed" || h.status == "superseded")
        .map(|h| h.revision)
        .max()
        .or_else(|| earlier().map(|h| h.revision).max())
        .map_or(Recovery::Impossible, Recovery::Rollback)
}

/// Status builder starting from the stored status, so failures keep the last good release data.
struct Draft {
    s: OmniHelmReleaseStatus,
    generation: Option<i64>,
    now: jiff::Timestamp,
}

impl Draft {
    fn new(r: &OmniHelmRelease, now: jiff::Timestamp) -> Self {
        let mut s = r.status.clone().unwrap_or_default();
        s.observed_generation = r.metadata.generation;
        s.cluster_ref = Some(r.spec.cluster_ref.name.clone());
        s.kubeconfig_secret_ref = Some(r.spec.kubeconfig_secret_ref.name.clone());
        s.kubeconfig_secret_key = Some(r.spec.kubeconfig_secret_ref.key.clone());
        s.release_name = Some(r.effective_release_name());
        s.namespace = Some(r.spec.namespace.clone());
        if s.chart.is_none() {
            s.chart = Some(r.spec.chart.chart.clone());
        }
        if s.chart_version.is_none() {
            s.chart_version = Some(r.spec.chart.version.clone());
        }
        Self {
            s,
            generation: r.metadata.generation,
            now,
        }
    }

    fn set(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        set_condition(
            &mut self.s.conditions,
            Condition::new(type_, ok.into(), reason, message, self.generation, self.now),
        );
    }

    /// `Released` and `Ready` together.
    fn outcome(&mut self, ok: bool, reason: &str, message: &str) {
        self.set(ct::RELEASED, ok, reason, message);
        self.set(ct::READY, ok, reason, message);
    }

    /// A failure: conditions, `lastError` and `lastAttemptTime`.
    fn failed(&mut self, reason: &str, message: &str) {
        self.outcome(false, reason, message);
        self.s.last_error = Some(message.to_string());
        self.s.last_attempt_time = Some(self.now);
    }

    fn record(&mut self, info: &ReleaseInfo) {
        self.s.release_revision = Some(info.revision);
        self.s.release_status = Some(info.status.clone());
        if !info.chart.is_empty() {
            self.s.chart = Some(info.chart.clone());
        }
        if !info.chart_version.is_empty() {
            self.s.chart_version = Some(info.chart_version.clone());
        }
    }
}

/// Reason and message of a healthy release after `action` (parity §7.3 wording).
///
/// The original reports `ReconcileFailed` on a *healthy* release whose last action is neither
/// Install nor Upgrade; a `Ready=True` condition must not say "failed" (docs/decisions.md), so
/// such a release is described by its revision instead: revision 1 was an install, later ones
/// upgrades.
fn success_condition(action: Option<&str>, name: &str, revision: i64) -> (&'static str, String) {
    match action {
        Some("Install") => (
            reasons::HELM_INSTALLED,
            format!("installed Helm release {name:?} revision {revision}"),
        ),
        Some("Upgrade") => (
            reasons::HELM_UPGRADED,
            format!("upgraded Helm release {name:?} to revision {revision}"),
        ),
        _ if revision <= 1 => (
            reasons::HELM_INSTALLED,
            format!("Helm release {name:?} is deployed at revision {revision}"),
        ),
        _ => (
            reasons::HELM_UPGRADED,
            format!("Helm release {name:?} is deployed at revision {revision}"),
        ),
    }
}

async fn write(ctx: &Context, r: &OmniHelmRelease, d: &Draft) -> Result<bool, Error> {
    let namespace = r.namespace().unwrap_or_default();
    let old = r.status.clone().unwrap_or_default().conditions;
    let written = status::write(&ctx.api::<OmniHelmRelease>(&namespace), r, &d.s).await?;
    if written {
        ctx.condition_events(r, &old, &d.s.conditions).await;
    }
    let ready = find_condition(&d.s.conditions, ct::READY);
    ctx.metrics.set_resource_info(&ResourceInfo {
        kind: "OmniHelmRelease",
        namespace: &namespace,
        name: &r.name_any(),
        ready: ready.map_or("Unknown", |c| status_str(c.status)),
        reason: ready.map_or("", |c| c.reason.as_str()),
        suspended: false,
    });
    Ok(written)
}

/// Why the kubeconfig could not be obtained: reason and message.
type Problem = (&'static str, String);

/// Reads and checks the kubeconfig (parity §7.3 step 5 messages).
async fn kubeconfig(ctx: &Context, r: &OmniHelmRelease) -> Result<Result<Vec<u8>, Problem>, Error> {
    let ns = r.namespace().unwrap_or_default();
    let (name, key) = (
        &r.spec.kubeconfig_secret_ref.name,
        &r.spec.kubeconfig_secret_ref.key,
    );
    let Some(secret) = ctx.api::<Secret>(&ns).get_opt(name).await? else {
        return Ok(Err((
            reasons::MISSING_SECRET,
            format!("kubeconfig Secret \"{ns}/{name}\" does not exist"),
        )));
    };
    let Some(bytes) = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .filter(|b| !b.0.is_empty())
        .map(|b| b.0.clone())
    else {
        return Ok(Err((
            reasons::MISSING_SECRET,
            format!("kubeconfig Secret \"{ns}/{name}\" does not contain key {key:?}"),
        )));
    };
    if let Some(reason) = secret_policy::refusal(
        &ctx.secret_policy,
        &secret,
        KIND,
        SecretUse::Kubeconfig,
        &[],
    ) {
        return Ok(Err((reasons::VALIDATION_FAILED, reason)));
    }
    // Helm gets the kubeconfig the operator writes from the checked fields, never these bytes:
    // no exec, auth provider or file path reaches it. Errors name fields and positions only.
    Ok(match crate::kubeconfig::parse(&bytes) {
        Ok(checked) => Ok(checked.to_bytes()),
        Err(e) => Err((
            reasons::VALIDATION_FAILED,
            format!("kubeconfig Secret \"{ns}/{name}\" key {key:?} is invalid: {e}"),
        )),
    })
}

/// Repository credentials and CA bundle from `spec.chart.credentialsSecretRef`.
async fn repository_auth(
    ctx: &Context,
    r: &OmniHelmRelease,
) -> Result<Result<RepositoryAuth, Problem>, Error> {
    let Some(cref) = &r.spec.chart.credentials_secret_ref else {
        return Ok(Ok(RepositoryAuth::default()));
    };
    let ns = r.namespace().unwrap_or_default();
    let Some(secret) = ctx.api::<Secret>(&ns).get_opt(&cref.name).await? else {
        return Ok(Err((
            reasons::MISSING_SECRET,
            format!(
                "chart credentials Secret \"{ns}/{}\" does not exist",
                cref.name
            ),
        )));
    };
    // Before anything is sent to the repository: the Omni key and service-account tokens never
    // serve as credentials.
    if let Some(reason) = secret_policy::check(
        &ctx.client,
        &ctx.secret_policy,
        &secret,
        KIND,
        SecretUse::RepositoryCredentials,
    )
    .await?
    {
        return Ok(Err((reasons::VALIDATION_FAILED, reason)));
    }
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| -> Result<Option<String>, Problem> {
        match data.get(key).filter(|b| !b.0.is_empty()) {
            None => Ok(None),
            Some(b) => String::from_utf8(b.0.clone()).map(Some).map_err(|_| {
                (
                    reasons::VALIDATION_FAILED,
                    format!(
                        "chart credentials Secret \"{ns}/{}\" key {key:?} is not UTF-8",
                        cref.name
                    ),
                )
            }),
        }
    };
    let auth = (|| {
        Ok(RepositoryAuth {
            username: text(&cref.username_key)?,
            password: text(&cref.password_key)?,
            ca_bundle: data
                .get(&cref.ca_key)
                .filter(|b| !b.0.is_empty())
                .map(|b| b.0.clone()),
        })
    })();
    Ok(auth)
}

fn request(r: &OmniHelmRelease, timeout: Duration) -> ReleaseRequest {
    let spec = &r.spec;
    ReleaseRequest {
        release_name: r.effective_release_name(),
        namespace: spec.namespace.clone(),
        chart: ChartSource::from_spec(&spec.chart.repository, &spec.chart.chart),
        chart_version: spec.chart.version.trim().to_string(),
        values: spec.chart.values.clone(),
        create_namespace: spec.create_namespace,
        wait: spec.wait,
        wait_for_jobs: spec.wait_for_jobs,
        timeout,
        atomic: spec.atomic,
        disable_hooks: spec.disable_hooks,
        skip_crds: spec.skip_crds,
        max_history: spec
            .max_history
            .and_then(|h| u32::try_from(h).ok())
            .unwrap_or(0),
        replace: false,
        owner_labels: owner_labels(r),
    }
}

fn helm_failure(action: &str, name: &str, err: &HelmError) -> String {
    format!(
        "Helm {} failed for release {name:?}: {}",
        action.to_lowercase(),
        err.detail()
    )
}

/// What a blocked deletion can do instead of waiting.
const WAY_OUT: &str = "set spec.deletionPolicy to Orphan to finish deleting without uninstalling";

/// The helm lock key. It names the release in its workload cluster rather than this object, so
/// two objects pointing at the same release never run helm on it at the same time.
fn release_key(r: &OmniHelmRelease) -> String {
    format!(
        "{}/{}/{}/{}",
        r.namespace().unwrap_or_default(),
        r.spec.kubeconfig_secret_ref.name,
        r.spec.namespace,
        r.effective_release_name()
    )
}

/// `spec.timeout`, at most 1h even when a longer one was stored without admission.
fn timeout_of(r: &OmniHelmRelease) -> Duration {
    let most = crate::api::duration::MAX_TIMEOUT
        .to_std()
        .unwrap_or(DEFAULT_TIMEOUT);
    r.timeout()
        .ok()
        .and_then(|t| t.to_std())
        .unwrap_or(DEFAULT_TIMEOUT)
        .min(most)
}

/// When to look at a healthy release again (`spec.driftCheckInterval`; `0` = only on change).
/// An interval below `floor` (stored without admission) is raised to it.
fn drift_check(r: &OmniHelmRelease, floor: Duration) -> Action {
    match r.drift_check_interval() {
        Ok(Some(interval)) => {
            Action::requeue(crate::api::duration::clamp_interval(interval, floor))
        }
        Ok(None) => Action::await_change(),
        Err(_) => Action::requeue(DEFAULT_DRIFT_CHECK),
    }
}

async fn finish_deletion(
    ctx: &Context,
    r: &OmniHelmRelease,
    api: &Api<OmniHelmRelease>,
) -> Result<Action, Error> {
    finalizer::remove(api, r, false).await?;
    ctx.metrics.forget_resource(
        "OmniHelmRelease",
        &r.namespace().unwrap_or_default(),
        &r.name_any(),
    );
    Ok(Action::await_change())
}

async fn delete(
    ctx: &Context,
    r: &OmniHelmRelease,
    api: &Api<OmniHelmRelease>,
) -> Result<Action, Error> {
    if !finalizer::has_finalizer(r, false) {
        return Ok(Action::await_change());
    }
    if r.deletion_policy() == Some(HelmDeletionPolicy::Orphan) {
        return finish_deletion(ctx, r, api).await;
    }
    let name = r.effective_release_name();
    let mut d = Draft::new(r, ctx.clock.now());
    // Without a kubeconfig or helm the uninstall cannot run; say so and how to get out, rather
    // than blocking silently (the original waits forever).
    let kubeconfig = match kubeconfig(ctx, r).await? {
        Ok(k) => k,
        Err((reason, m)) => {
            d.failed(
                reason,
                &format!("cannot uninstall Helm release {name:?}: {m}; restore it, or {WAY_OUT}"),
            );
            write(ctx, r, &d).await?;
            return Ok(Action::requeue(RETRY));
        }
    };
    let Some(helm) = &ctx.helm else {
        d.failed(
            REASON_HELM_UNAVAILABLE,
            &format!(
                "cannot uninstall Helm release {name:?}: no usable helm binary; fix --helm-binary, or {WAY_OUT}"
            ),
        );
        write(ctx, r, &d).await?;
        return Ok(Action::requeue(RETRY));
    };
    let result = match helm.session(&release_key(r), &kubeconfig).await {
        Ok(session) => uninstall_if_owned(r, &session).await,
        Err(e) => Err(e),
    };
    match result {
        Err(err) => {
            let m = format!(
                "{}; retrying, or {WAY_OUT}",
                helm_failure("Uninstall", &name, &err)
            );
            d.s.last_action = Some("Uninstall".into());
            d.failed(reasons::RECONCILE_FAILED, &m);
            write(ctx, r, &d).await?;
            return Err(Error::Remote(m));
        }
        Ok(Removal::NotOwned(o)) => {
            ctx.event(
                r,
                EventType::Warning,
                REASON_UNINSTALL_SKIPPED,
                format!(
                    "left Helm release {name:?} in namespace {:?} in place: it {}",
                    r.spec.namespace,
                    whose(&o)
                ),
            )
            .await;
        }
        Ok(Removal::Missing) => {}
        Ok(Removal::Uninstalled) => {
            ctx.event(
                r,
                EventType::Normal,
                reasons::HELM_UNINSTALLED,
                format!("uninstalled Helm release {name:?}"),
            )
            .await;
        }
    }
    finish_deletion(ctx, r, api).await
}

/// What the deletion did with the release.
enum Removal {
    Uninstalled,
    /// There was no release.
    Missing,
    /// The release is not this object's; it was left alone.
    NotOwned(Ownership),
}

/// Uninstalls the release only when this object owns it (an adopt annotation alone is not
/// enough: a release is ours once an install or upgrade by this object labelled it).
async fn uninstall_if_owned(
    r: &OmniHelmRelease,
    session: &ReleaseSession,
) -> Result<Removal, HelmError> {
    let (name, ns) = (r.effective_release_name(), &r.spec.namespace);
    let Some(info) = session.status(&name, ns).await? else {
        return Ok(Removal::Missing);
    };
    let labels = session.labels(&name, ns).await?.unwrap_or_default();
    let o = ownership(r, &labels, &info);
    if !o.is_ours() {
        return Ok(Removal::NotOwned(o));
    }
    session
        .uninstall(&name, ns, timeout_of(r), r.spec.disable_hooks, r.spec.wait)
        .await?;
    Ok(Removal::Uninstalled)
}

/// "belongs to …" / "was not installed by this OmniHelmRelease".
fn whose(o: &Ownership) -> String {
    match o {
        Ownership::OwnedByOther(who) => format!("belongs to {who}"),
        _ => "was not installed by this OmniHelmRelease".to_string(),
    }
}

/// Checks that this object may change the existing release. `Ok(Ok(adopting))`: go on
/// (`adopting` when it is taken over on the user's request); `Ok(Err(action))`: refused, the
/// status says why and nothing was changed.
async fn claim(
    ctx: &Context,
    r: &OmniHelmRelease,
    d: &mut Draft,
    session: &ReleaseSession,
    info: &ReleaseInfo,
) -> Result<Result<(bool, std::collections::BTreeMap<String, String>), Action>, Error> {
    let name = r.effective_release_name();
    let labels = match session.labels(&name, &r.spec.namespace).await {
        Ok(labels) => labels.unwrap_or_default(),
        Err(err) => {
            let m = format!("read labels of Helm release {name:?}: {err}");
            d.failed(reasons::RECONCILE_FAILED, &m);
            write(ctx, r, d).await?;
            return Err(Error::Remote(m));
        }
    };
    let o = ownership(r, &labels, info);
    if o.is_ours() {
        return Ok(Ok((false, labels)));
    }
    if adopt_requested(r) {
        return Ok(Ok((true, labels)));
    }
    // Nothing in the status may describe someone else's release as ours: without a digest
    // and revision the stored status can never pass for "installed before labels" later.
    d.s.last_applied_digest = None;
    d.s.release_revision = None;
    d.s.release_status = None;
    d.failed(
        REASON_TARGET_NOT_OWNED,
        &format!(
            "Helm release {name:?} in namespace {:?} {}; it was left unchanged (annotate this OmniHelmRelease {ADOPT_ANNOTATION}=\"true\" to take it over)",
            r.spec.namespace,
            whose(&o)
        ),
    );
    write(ctx, r, d).await?;
    Ok(Err(drift_check(r, ctx.min_interval)))
}

/// The release object as stored now, when it has been deleted since `r` was read. A namespace
/// deletion or prune deletes it together with the Secrets and cluster it uses; a pass that
/// read it a moment before then finds them gone, and must do the deletion rather than report
/// the object stranded with `MissingSecret` or `MissingCluster`.
async fn deleted_meanwhile(
    api: &Api<OmniHelmRelease>,
    r: &OmniHelmRelease,
) -> Result<Option<OmniHelmRelease>, Error> {
    Ok(api
        .get_opt(&r.name_any())
        .await?
        .filter(|fresh| fresh.metadata.deletion_timestamp.is_some()))
}

async fn reconcile(obj: Arc<OmniHelmRelease>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented(obj.as_ref(), &ctx, async {
        let namespace = obj.namespace().unwrap_or_default();
        let api = ctx.api::<OmniHelmRelease>(&namespace);
        // The watch cache can lag behind this controller's own last status write; planning
        // from a stale digest or revision would create a needless revision. Read it fresh.
        let Some(r) = api.get_opt(&obj.name_any()).await? else {
            return Ok(Action::await_change());
        };
        if r.metadata.deletion_timestamp.is_some() {
            return delete(&ctx, &r, &api).await;
        }
        if !finalizer::ensure(&api, &r, false).await? {
            return Ok(Action::await_change());
        }
        let mut d = Draft::new(&r, ctx.clock.now());
        if let Some(problem) = r.spec_problem() {
            d.failed(reasons::VALIDATION_FAILED, &problem);
            write(&ctx, &r, &d).await?;
            return Ok(Action::await_change());
        }
        let cluster_ref = &r.spec.cluster_ref.name;
        if ctx
            .api::<OmniCluster>(&namespace)
            .get_opt(cluster_ref)
            .await?
            .is_none()
        {
            if let Some(fresh) = deleted_meanwhile(&api, &r).await? {
                return delete(&ctx, &fresh, &api).await;
            }
            let m = format!("OmniCluster {cluster_ref:?} does not exist");
            d.set(ct::ACCEPTED, false, reasons::MISSING_CLUSTER, &m);
            d.failed(reasons::MISSING_CLUSTER, &m);
            write(&ctx, &r, &d).await?;
            return Ok(Action::requeue(RETRY));
        }
        d.set(
            ct::ACCEPTED,
            true,
            reasons::ACCEPTED,
            &format!("attached to OmniCluster {cluster_ref:?}"),
        );
        let kubeconfig = match kubeconfig(&ctx, &r).await? {
            Ok(k) => k,
            Err((reason, m)) => {
                if let Some(fresh) = deleted_meanwhile(&api, &r).await? {
                    return delete(&ctx, &fresh, &api).await;
                }
                d.failed(reason, &m);
                write(&ctx, &r, &d).await?;
                return Ok(Action::requeue(RETRY));
            }
        };
        let auth = match repository_auth(&ctx, &r).await? {
            Ok(a) => a,
            Err((reason, m)) => {
                if let Some(fresh) = deleted_meanwhile(&api, &r).await? {
                    return delete(&ctx, &fresh, &api).await;
                }
                d.failed(reason, &m);
                write(&ctx, &r, &d).await?;
                return Ok(Action::requeue(RETRY));
            }
        };
        let Some(helm) = &ctx.helm else {
            d.failed(
                REASON_HELM_UNAVAILABLE,
                "no usable helm binary; set --helm-binary (or HELM_BINARY) to helm 3.13 or newer",
            );
            write(&ctx, &r, &d).await?;
            return Ok(Action::requeue(RETRY));
        };
        let session = match helm.session(&release_key(&r), &kubeconfig).await {
            Ok(s) => s,
            Err(err) => {
                let m = format!(
                    "cannot start Helm for release {:?}: {err}",
                    r.effective_release_name()
                );
                d.failed(reasons::RECONCILE_FAILED, &m);
                write(&ctx, &r, &d).await?;
                return Err(Error::Remote(m));
            }
        };
        apply(&ctx, &r, d, &session, &auth).await
    })
    .await
}

/// Helm's view of the release; a failure is written to status and returned.
async fn observe(
    ctx: &Context,
    r: &OmniHelmRelease,
    d: &mut Draft,
    session: &ReleaseSession,
) -> Result<Option<ReleaseInfo>, Error> {
    let name = r.effective_release_name();
    match session.status(&name, &r.spec.namespace).await {
        Ok(c) => Ok(c),
        Err(err) => {
            let m = format!("read Helm release {name:?}: {err}");
            d.failed(reasons::RECONCILE_FAILED, &m);
            write(ctx, r, d).await?;
            Err(Error::Remote(m))
        }
    }
}

/// Deals with a release in `pending-*`. `Ok(None)`: carry on (nothing pending, or recovered);
/// `Ok(Some(action))`: the reconcile ends here with the status written.
async fn handle_pending(
    ctx: &Context,
    r: &OmniHelmRelease,
    d: &mut Draft,
    session: &ReleaseSession,
    info: &ReleaseInfo,
    started_by: Starter,
) -> Result<Option<Action>, Error> {
    let timeout = timeout_of(r);
    let Some(verdict) = pending(
        info,
        d.now,
        timeout,
        r.spec.recover_stuck_release,
        started_by,
    ) else {
        return Ok(None);
    };
    let name = r.effective_release_name();
    let since = info.last_deployed.as_deref().unwrap_or("an unknown time");
    let what = format!(
        "Helm release {name:?} is {} at revision {} since {since}",
        info.status, info.revision
    );
    let stuck = |d: &mut Draft, detail: &str| {
        d.record(info);
        d.failed(
            REASON_RELEASE_STUCK,
            &format!(
                "{what}, longer than its timeout {}; {detail}",
                r.spec.timeout
            ),
        );
    };
    match verdict {
        Pending::Wait(after) => {
            d.record(info);
            d.failed(
                REASON_RELEASE_PENDING,
                &format!(
                    "{what}; another Helm operation may still own it, so it is left alone until its timeout {} has passed",
                    r.spec.timeout
                ),
            );
            write(ctx, r, d).await?;
            Ok(Some(Action::requeue(after)))
        }
        Pending::Stuck => {
            stuck(
                d,
                "set spec.recoverStuckRelease to true to let the operator recover it, or recover it by hand (helm rollback)",
            );
            write(ctx, r, d).await?;
            Ok(Some(Action::requeue(RETRY)))
        }
        Pending::Recover | Pending::Abandoned => {
            let why = if verdict == Pending::Abandoned {
                "left by an earlier operator process that ended while Helm ran".to_string()
            } else {
                format!("longer than its timeout {}", r.spec.timeout)
            };
            let history = match session.history(&name, &r.spec.namespace).await {
                Ok(h) => h,
                Err(err) => {
                    let m = format!("read Helm release history of {name:?}: {err}");
                    d.failed(reasons::RECONCILE_FAILED, &m);
                    write(ctx, r, d).await?;
                    return Err(Error::Remote(m));
                }
            };
            let (result, done) = match recovery(info, &history) {
                Recovery::Impossible => {
                    stuck(
                        d,
                        "there is no earlier revision to roll back to, so it must be recovered by hand",
                    );
                    write(ctx, r, d).await?;
                    return Ok(Some(Action::requeue(RETRY)));
                }
                Recovery::Rollback(revision) => (
                    session
                        .rollback(&name, &r.spec.namespace, revision, timeout, r.spec.wait)
                        .await,
                    format!("rolled it back to revision {revision}"),
                ),
                Recovery::Uninstall => (
                    session
                        .uninstall(
                            &name,
                            &r.spec.namespace,
                            timeout,
                            r.spec.disable_hooks,
                            r.spec.wait,
                        )
                        .await
                        .map(|_| ()),
                    "uninstalled the unfinished install".to_string(),
                ),
            };
            if let Err(err) = result {
                let m = format!("recover stuck Helm release {name:?}: {err}");
                d.failed(reasons::RECONCILE_FAILED, &m);
                write(ctx, r, d).await?;
                return Err(Error::Remote(m));
            }
            ctx.event(
                r,
                EventType::Warning,
                REASON_STUCK_RECOVERED,
                format!("{what}, {why}; {done}"),
            )
            .await;
            Ok(None)
        }
    }
}

/// Decides and runs the Helm action for a release whose dependencies are all present.
async fn apply(
    ctx: &Context,
    r: &OmniHelmRelease,
    mut d: Draft,
    session: &ReleaseSession,
    auth: &RepositoryAuth,
) -> Result<Action, Error> {
    let name = r.effective_release_name();
    let mut current = observe(ctx, r, &mut d, session).await?;
    let mut recovered = false;
    let mut adopting = false;
    if let Some(info) = &current {
        // Before anything may change the release (recovery, upgrade): is it ours?
        let labels = match claim(ctx, r, &mut d, session, info).await? {
            Ok((adopt, labels)) => {
                adopting = adopt;
                labels
            }
            Err(action) => return Ok(action),
        };
        // Only a release this object owns may be recovered at once; one being adopted is
        // someone else's until our upgrade has labelled it.
        let started_by = if adopting {
            Starter::Unknown
        } else {
            starter(&labels, info, session.run_id())
        };
        if let Some(action) = handle_pending(ctx, r, &mut d, session, info, started_by).await? {
            return Ok(action);
        }
        if info.is_pending() {
            recovered = true;
            current = observe(ctx, r, &mut d, session).await?;
        }
    }
    let stored = r.status.clone().unwrap_or_default();
    let digest = input_digest(r);
    let mut planned =
        crate::baseline::upgrade_every_trigger(plan(current.as_ref(), &stored, &digest));
    if adopting && planned == Plan::UpToDate {
        // The upgrade is what stamps our ownership labels on the adopted release.
        planned = Plan::Upgrade;
    }
    let verb = match planned {
        Plan::UpToDate => {
            if let Some(info) = &current {
                d.record(info);
            }
            let revision = stored.release_revision.unwrap_or_default();
            let (reason, m) = success_condition(stored.last_action.as_deref(), &name, revision);
            d.outcome(true, reason, &m);
            d.s.last_error = None;
            write(ctx, r, &d).await?;
            return Ok(drift_check(r, ctx.min_interval));
        }
        Plan::Install => InstallVerb::Install,
        Plan::Upgrade => InstallVerb::Upgrade,
    };
    // Same inputs as last applied, yet Helm must run: the release changed out of band.
    if !recovered && stored.last_applied_digest.as_deref() == Some(digest.as_str()) {
        let seen = current.as_ref().map_or_else(
            || "missing".to_string(),
            |c| format!("{} at revision {}", c.status, c.revision),
        );
        ctx.event(
            r,
            EventType::Warning,
            REASON_DRIFT,
            format!("Helm release {name:?} drifted ({seen}); re-applying"),
        )
        .await;
    }
    let action = match verb {
        InstallVerb::Install => "Install",
        InstallVerb::Upgrade => "Upgrade",
    };
    d.s.last_action = Some(action.to_string());
    d.s.last_attempt_time = Some(d.now);
    let mut req = request(r, timeout_of(r));
    // A release uninstalled with its history kept can only be installed again over it.
    req.replace = current.as_ref().is_some_and(|c| c.status == "uninstalled");
    // Mark the revision Helm is about to create (the next after the newest) as this process's,
    // so that a `pending-*` revision left by a kill is recognised and recovered at once.
    let next_revision = current.as_ref().map_or(1, |c| c.revision + 1);
    req.owner_labels
        .extend(run_labels(session.run_id(), next_revision));
    match session.install_or_upgrade(verb, &req, auth).await {
        Ok(info) => {
            if adopting {
                ctx.event(
                    r,
                    EventType::Normal,
                    REASON_ADOPTED,
                    format!(
                        "adopted Helm release {name:?} in namespace {:?} ({ADOPT_ANNOTATION})",
                        r.spec.namespace
                    ),
                )
                .await;
            }
            d.record(&info);
            d.s.last_success_time = Some(d.now);
            d.s.last_error = None;
            d.s.chart = Some(r.spec.chart.chart.clone());
            if info.status == "deployed" {
                d.s.last_applied_digest = Some(digest);
                let (reason, m) = success_condition(Some(action), &name, info.revision);
                d.outcome(true, reason, &m);
                let old_reason =
                    find_condition(&stored.conditions, ct::READY).map(|c| c.reason.clone());
                write(ctx, r, &d).await?;
                // Condition Events fire on reason changes only; each Helm action is worth one.
                if old_reason.as_deref() == Some(reason) {
                    ctx.event(r, EventType::Normal, reason, m).await;
                }
                Ok(drift_check(r, ctx.min_interval))
            } else {
                let m = format!(
                    "Helm {} of release {name:?} ended in status {}",
                    action.to_lowercase(),
                    info.status
                );
                d.failed(reasons::RECONCILE_FAILED, &m);
                write(ctx, r, &d).await?;
                Err(Error::Remote(m))
            }
        }
        Err(err) => {
            let m = helm_failure(action, &name, &err);
            d.failed(reasons::RECONCILE_FAILED, &m);
            let after = session.status(&name, &r.spec.namespace).await;
            // With `atomic` Helm undoes a failure itself; say where the release landed.
            let undone = match (&after, verb) {
                (Ok(Some(a)), InstallVerb::Upgrade) if r.spec.atomic && a.status == "deployed" => {
                    Some(format!(
                        "rolled back to a working release (now revision {})",
                        a.revision
                    ))
                }
                (Ok(None), InstallVerb::Install) if r.spec.atomic => {
                    Some("Helm removed the failed install".to_string())
                }
                _ => None,
            };
            if let Some(undone) = undone {
                ctx.event(
                    r,
                    EventType::Warning,
                    REASON_ROLLED_BACK,
                    format!("{m}; {undone}"),
                )
                .await;
            }
            match after {
                Ok(Some(a)) => d.record(&a),
                Ok(None) => {
                    d.s.release_revision = None;
                    d.s.release_status = None;
                }
                Err(_) => {}
            }
            write(ctx, r, &d).await?;
            Err(Error::Remote(m))
        }
    }
}

/// Runs the OmniHelmRelease controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (controller, index) = indexed_controller_for::<OmniHelmRelease>(&ctx, |x| {
        let ns = namespace_of(x);
        let mut keys = vec![
            RefKey::new("cluster", &ns, &x.spec.cluster_ref.name),
            RefKey::new("secret", &ns, &x.spec.kubeconfig_secret_ref.name),
        ];
        if let Some(c) = &x.spec.chart.credentials_secret_ref {
            keys.push(RefKey::new("secret", &ns, &c.name));
        }
        keys
    });
    let by_secret = index.clone();
    let controller = controller
        .watches_stream(
            super::cluster_changes(ctx.watch_api::<OmniCluster>()),
            move |c: OmniCluster| {
                index.get(&RefKey::new("cluster", &namespace_of(&c), &c.name_any()))
            },
        )
        // A kubeconfig or credentials change re-checks the release (a rotation alone does
        // not upgrade it: the digest excludes the kubeconfig).
        .watches(
            ctx.watch_api::<Secret>(),
            watcher::Config::default(),
            move |s: Secret| {
                by_secret.get(&RefKey::new("secret", &namespace_of(&s), &s.name_any()))
            },
        );
    drive::<OmniHelmRelease, _, _>(controller, ctx, shutdown, reconcile).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(values: serde_json::Value) -> OmniHelmRelease {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1",
            "kind": "OmniHelmRelease",
            "metadata": {"name": "app", "namespace": "ns"},
            "spec": {
                "clusterRef": {"name": "c"},
                "kubeconfigSecretRef": {"name": "kc"},
                "chart": {"repository": "https://charts.example.com", "chart": "app", "version": "1.0.0", "values": values}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn info(status: &str, revision: i64) -> ReleaseInfo {
        ReleaseInfo {
            name: "app".into(),
            namespace: "default".into(),
            revision,
            status: status.into(),
            chart: "app".into(),
            chart_version: "1.0.0".into(),
            description: String::new(),
            last_deployed: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_release_is_ours_by_uid_label_or_by_a_status_from_before_labels() {
        let mut r = release(serde_json::json!({}));
        r.metadata.uid = Some("uid-a".into());
        let deployed = info("deployed", 2);
        let stamped = labels(&[(OWNER_UID_LABEL, "uid-a"), ("owner", "helm")]);
        assert_eq!(ownership(&r, &stamped, &deployed), Ownership::Owned);
        let other = labels(&[
            (OWNER_UID_LABEL, "uid-b"),
            (OWNER_NAMESPACE_LABEL, "ns"),
            (OWNER_NAME_LABEL, "second"),
        ]);
        assert_eq!(
            ownership(&r, &other, &deployed),
            Ownership::OwnedByOther("OmniHelmRelease ns/second (uid uid-b)".into())
        );
        // `helm install` by hand: no label, no status.
        assert_eq!(ownership(&r, &labels(&[]), &deployed), Ownership::Unowned);
        // Installed by this object before releases were labelled.
        r.status = Some(OmniHelmReleaseStatus {
            last_applied_digest: Some(input_digest(&r)),
            release_revision: Some(2),
            release_name: Some("app".into()),
            namespace: Some("default".into()),
            kubeconfig_secret_ref: Some("kc".into()),
            kubeconfig_secret_key: Some(r.spec.kubeconfig_secret_ref.key.clone()),
            ..OmniHelmReleaseStatus::default()
        });
        assert_eq!(
            ownership(&r, &labels(&[]), &deployed),
            Ownership::InstalledBeforeLabels
        );
        // ...but not once Helm is at a revision the status never saw,
        assert_eq!(
            ownership(&r, &labels(&[]), &info("deployed", 3)),
            Ownership::Unowned
        );
        // nor when the object now points at another release, nor for another owner's label.
        let mut moved = r.clone();
        moved.spec.release_name = Some("other".into());
        assert_eq!(
            ownership(&moved, &labels(&[]), &deployed),
            Ownership::Unowned
        );
        assert!(!ownership(&r, &other, &deployed).is_ours());
    }

    #[test]
    fn owner_labels_name_the_object_and_fit_label_values() {
        let mut r = release(serde_json::json!({}));
        assert!(owner_labels(&r).is_empty(), "no UID, nothing to claim with");
        r.metadata.uid = Some("uid-a".into());
        assert_eq!(
            owner_labels(&r),
            vec![
                (OWNER_UID_LABEL.to_string(), "uid-a".to_string()),
                (OWNER_NAMESPACE_LABEL.to_string(), "ns".to_string()),
                (OWNER_NAME_LABEL.to_string(), "app".to_string()),
            ]
        );
        r.metadata.name = Some("n".repeat(64));
        assert!(owner_labels(&r).iter().all(|(k, _)| k != OWNER_NAME_LABEL));
    }

    #[test]
    fn digest_tracks_inputs_but_not_operation_knobs() {
        let a = release(serde_json::json!({"replicas": 1}));
        let mut b = a.clone();
        b.spec.wait = true;
        b.spec.timeout = "10m".into();
        b.spec.atomic = true;
        assert_eq!(input_digest(&a), input_digest(&b));
        let mut c = a.clone();
        c.spec.chart.values = serde_json::json!({"replicas": 2});
        assert_ne!(input_digest(&a), input_digest(&c));
        let mut v = a.clone();
        v.spec.chart.version = "1.0.1".into();
        assert_ne!(input_digest(&a), input_digest(&v));
        let mut t = a.clone();
        t.spec.namespace = "other".into();
        assert_ne!(input_digest(&a), input_digest(&t));
    }

    #[test]
    fn a_healthy_release_never_reports_a_failure_reason() {
        let (reason, message) = success_condition(Some("Install"), "app", 1);
        assert_eq!(reason, reasons::HELM_INSTALLED);
        assert_eq!(message, r#"installed Helm release "app" revision 1"#);
        let (reason, message) = success_condition(Some("Upgrade"), "app", 4);
        assert_eq!(reason, reasons::HELM_UPGRADED);
        assert_eq!(message, r#"upgraded Helm release "app" to revision 4"#);
        // Status restored from a backup, or written by another tool: no recorded action.
        for (action, revision, expected) in [
            (None, 1, reasons::HELM_INSTALLED),
            (None, 3, reasons::HELM_UPGRADED),
            (Some("Uninstall"), 2, reasons::HELM_UPGRADED),
        ] {
            let (reason, message) = success_condition(action, "app", revision);
            assert_eq!(reason, expected, "{action:?} revision {revision}");
            assert!(
                message.contains(&format!("revision {revision}")),
                "{message}"
            );
        }
    }

    fn at(status: &str, revision: i64, deployed: Option<&str>) -> ReleaseInfo {
        ReleaseInfo {
            last_deployed: deployed.map(String::from),
            ..info(status, revision)
        }
    }

    fn entry(revision: i64, status: &str) -> HistoryEntry {
        HistoryEntry {
            revision,
            status: status.into(),
            chart: "app-1.0.0".into(),
            description: String::new(),
        }
    }

    #[test]
    fn pending_release_waits_for_its_timeout_then_is_stuck_or_recovered() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let five_min = Duration::from_secs(300);
        let young = at("pending-upgrade", 3, Some("2026-11-23T01:58:00.5+00:00"));
        assert_eq!(
            pending(&young, now, five_min, true, Starter::Unknown),
            Some(Pending::Wait(Duration::from_millis(180_500 + 5_000)))
        );
        let old = at("pending-upgrade", 3, Some("2026-11-23T01:54:59Z"));
        assert_eq!(
            pending(&old, now, five_min, false, Starter::Unknown),
            Some(Pending::Stuck)
        );
        assert_eq!(
            pending(&old, now, five_min, true, Starter::Unknown),
            Some(Pending::Recover)
        );
        let unknown = at("pending-install", 1, None);
        assert_eq!(
            pending(&unknown, now, five_min, false, Starter::Unknown),
            Some(Pending::Stuck)
        );
        let deployed = at("deployed", 3, Some("2020-01-01T00:00:00Z"));
        assert_eq!(
            pending(&deployed, now, five_min, true, Starter::EarlierRun),
            None
        );
    }

    #[test]
    fn a_pending_revision_of_an_earlier_operator_process_is_recovered_at_once() {
        let now: jiff::Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let five_min = Duration::from_secs(300);
        // Started a second ago by a process that is gone: no wait, with or without the opt-in.
        let fresh = at("pending-install", 1, Some("2026-11-23T01:59:59Z"));
        for allowed in [false, true] {
            assert_eq!(
                pending(&fresh, now, five_min, allowed, Starter::EarlierRun),
                Some(Pending::Abandoned)
            );
        }
        // This process's own pending revision, or an unmarked one, waits as before.
        for started_by in [Starter::ThisRun, Starter::Unknown] {
            assert!(matches!(
                pending(&fresh, now, five_min, true, started_by),
                Some(Pending::Wait(_))
            ));
        }
    }

    #[test]
    fn the_starter_of_a_revision_is_told_by_its_run_and_revision_labels() {
        let pending_rev = info("pending-upgrade", 4);
        let marked = |run: &str, revision: &str| {
            labels(&[
                (OWNER_UID_LABEL, "uid-a"),
                (STARTED_BY_RUN_LABEL, run),
                (STARTED_REVISION_LABEL, revision),
            ])
        };
        assert_eq!(
            starter(&marked("run-b", "4"), &pending_rev, "run-b"),
            Starter::ThisRun
        );
        assert_eq!(
            starter(&marked("run-a", "4"), &pending_rev, "run-b"),
            Starter::EarlierRun
        );
        // Helm carried revision 3's labels into revision 4 (someone else's upgrade, a rollback).
        assert_eq!(
            starter(&marked("run-a", "3"), &pending_rev, "run-b"),
            Starter::Unknown
        );
        assert_eq!(
            starter(
                &labels(&[(OWNER_UID_LABEL, "uid-a")]),
                &pending_rev,
                "run-b"
            ),
            Starter::Unknown
        );
        assert_eq!(
            run_labels("run-b", 5),
            [
                (STARTED_BY_RUN_LABEL.to_string(), "run-b".to_string()),
                (STARTED_REVISION_LABEL.to_string(), "5".to_string()),
            ]
        );
    }

    #[test]
    fn recovery_rolls_back_to_the_last_good_revision_or_uninstalls_an_install() {
        let history = [
            entry(1, "superseded"),
            entry(2, "deployed"),
            entry(3, "failed"),
            entry(4, "pending-upgrade"),
        ];
        assert_eq!(
            recovery(&info("pending-upgrade", 4), &history),
            Recovery::Rollback(2)
        );
        assert_eq!(
            recovery(&info("pending-rollback", 4), &history[..]),
            Recovery::Rollback(2)
        );
        let only_failed = [entry(1, "failed"), entry(2, "pending-upgrade")];
        assert_eq!(
            recovery(&info("pending-upgrade", 2), &only_failed),
            Recovery::Rollback(1)
        );
        assert_eq!(
            recovery(&info("pending-upgrade", 1), &[entry(1, "pending-upgrade")]),
            Recovery::Impossible
        );
        assert_eq!(
            recovery(&info("pending-install", 1), &[entry(1, "pending-install")]),
            Recovery::Uninstall
        );
    }

    #[test]
    fn release_key_names_the_release_in_its_cluster() {
        let a = release(serde_json::json!({}));
        let mut b = a.clone();
        b.metadata.name = Some("other-object".into());
        b.spec.release_name = Some("app".into());
        assert_eq!(release_key(&a), release_key(&b));
        let mut c = a.clone();
        c.spec.kubeconfig_secret_ref.name = "other-cluster".into();
        assert_ne!(release_key(&a), release_key(&c));
    }

    #[test]
    fn drift_check_interval_drives_the_requeue() {
        let floor = Duration::from_secs(10);
        let mut r = release(serde_json::json!({}));
        assert_eq!(
            drift_check(&r, floor),
            Action::requeue(Duration::from_secs(300))
        );
        r.spec.drift_check_interval = "30s".into();
        assert_eq!(
            drift_check(&r, floor),
            Action::requeue(Duration::from_secs(30))
        );
        r.spec.drift_check_interval = "0".into();
        assert_eq!(drift_check(&r, floor), Action::await_change());
    }

    #[test]
    fn stored_intervals_and_timeouts_that_bypassed_admission_are_clamped() {
        let floor = Duration::from_secs(10);
        let mut r = release(serde_json::json!({}));
        r.spec.drift_check_interval = "1ms".into();
        assert_eq!(drift_check(&r, floor), Action::requeue(floor));
        r.spec.timeout = "100h".into();
        assert_eq!(timeout_of(&r), Duration::from_secs(3600));
        r.spec.timeout = "90s".into();
        assert_eq!(timeout_of(&r), Duration::from_secs(90));
    }

    #[test]
    fn plan_upgrades_only_on_change_or_drift() {
        let r = release(serde_json::json!({}));
        let digest = input_digest(&r);
        let applied = OmniHelmReleaseStatus {
            last_applied_digest: Some(digest.clone()),
            release_revision: Some(2),
            ..OmniHelmReleaseStatus::default()
        };
        assert_eq!(plan(None, &applied, &digest), Plan::Install);
        assert_eq!(
            plan(Some(&info("deployed", 2)), &applied, &digest),
            Plan::UpToDate
        );
        assert_eq!(
            plan(Some(&info("deployed", 2)), &applied, "other"),
            Plan::Upgrade,
            "inputs changed"
        );
        assert_eq!(
            plan(Some(&info("deployed", 3)), &applied, &digest),
            Plan::Upgrade,
            "upgraded out of band"
        );
        assert_eq!(
            plan(Some(&info("failed", 2)), &applied, &digest),
            Plan::Upgrade,
            "failed release is repaired"
        );
        assert_eq!(
            plan(Some(&info("uninstalled", 2)), &applied, &digest),
            Plan::Install
        );
        assert_eq!(
            plan(
                Some(&info("deployed", 1)),
                &OmniHelmReleaseStatus::default(),
                &digest
            ),
            Plan::Upgrade,
            "an adopted release without a recorded digest gets our inputs applied"
        );
    }
}
