//! What one reconcile of an export found and did ([`Outcome`]), and the pure functions that
//! turn it into the status ([`desired_status`]) and the next reconcile ([`recheck`]).

use std::time::Duration;

use kube::runtime::controller::Action;

use super::rotation::{rotation_delay, whole_seconds};
use crate::api::OmniKubeconfigExport;
use crate::api::Reason;
use crate::api::common::{condition_types as ct, missing_cluster};
use crate::api::keys::{ADOPT_ANNOTATION, force_requested};
use crate::api::kubeconfig_export::{ExportFormat, OmniKubeconfigExportStatus};
use crate::controllers::shared::error::{Disposition, Failure, RetryPolicy};
use crate::controllers::shared::omni::ConnectionError;
use crate::controllers::shared::pipeline;
use crate::controllers::shared::status::{Draft, Standing};

/// Re-check while a dependency is missing.
pub(crate) const RETRY: Duration = Duration::from_secs(60);

/// Why an OmniKubeconfigExport has no current kubeconfig in its Secret; the message is its
/// condition's and Event's. Messages never carry a credential.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportFailure {
    /// The spec is invalid (it bypassed admission): the webhook's summary.
    #[error("{0}")]
    InvalidSpec(String),
    /// The target is outside the export's namespace, which needs
    /// `--allow-cross-namespace-export` (otherwise anyone who may create an export could plant or
    /// overwrite kubeconfigs in every namespace the operator's RBAC reaches).
    #[error(
        "spec.targetSecretRef.namespace {target:?} is not the export's own namespace {own:?}; the operator allows that only with --allow-cross-namespace-export"
    )]
    CrossNamespace {
        /// The target's namespace.
        target: String,
        /// The export's namespace.
        own: String,
    },
    /// The deployment's identity policy refuses what the export asks Omni for
    /// ([`crate::domain::identity_policy`]); the message names the field and the flag.
    #[error("{0}")]
    IdentityRefused(String),
    /// The referenced OmniCluster does not exist.
    #[error("{}", missing_cluster(cluster))]
    MissingCluster {
        /// `spec.clusterRef.name`.
        cluster: String,
    },
    /// The OmniCluster exists but the export has not exported yet and waits for it
    /// (`spec.startWhen`): why.
    #[error("{0}")]
    ClusterNotReady(String),
    /// Omni does not know the cluster yet (its identity is created a moment after it): a
    /// kubeconfig cannot be minted until it does.
    #[error(
        "waiting for Omni to create cluster {cluster:?} before a kubeconfig can be minted for it"
    )]
    NotInOmniYet {
        /// The cluster's name in Omni.
        cluster: String,
    },
    /// The cluster's OmniConnection does not exist.
    #[error(
        "failed to get OmniConnection {connection:?}: omniconnections.omni.texashpc.com {connection:?} not found"
    )]
    MissingConnection {
        /// The cluster's `spec.connectionRef.name`.
        connection: String,
    },
    /// The cluster's OmniConnection could not be read.
    #[error("failed to get OmniConnection {connection:?}: {error}")]
    ConnectionUnreadable {
        /// The cluster's `spec.connectionRef.name`.
        connection: String,
        /// The management cluster's answer.
        #[source]
        error: kube::Error,
    },
    /// The target Secret exists and belongs to someone else.
    #[error(
        "Secret \"{namespace}/{name}\" exists and is not owned by this OmniKubeconfigExport; it was left unchanged (annotate it {ADOPT_ANNOTATION}=\"true\" to let the export take it over)"
    )]
    TargetNotOwned {
        /// The target's namespace.
        namespace: String,
        /// The target's name.
        name: String,
    },
    /// No Omni client could be built for the cluster's connection.
    #[error("failed to export kubeconfig: {0}")]
    OmniClient(#[source] ConnectionError),
    /// Omni did not mint the kubeconfig.
    #[error("failed to export kubeconfig: {0}")]
    Mint(#[source] omni_client::ManagementError),
    /// The minted kubeconfig cannot be used or written in the requested shape (the message
    /// names fields, never values).
    #[error("{0}")]
    UnusableKubeconfig(String),
    /// A request about the target Secret (read, write, hold, delete) failed.
    #[error("{verb} Secret \"{namespace}/{name}\": {error}")]
    TargetRequest {
        /// What was being done to it.
        verb: &'static str,
        /// The target's namespace.
        namespace: String,
        /// The target's name.
        name: String,
        /// The management cluster's answer.
        #[source]
        error: Box<kube::Error>,
    },
    /// A Secret to delete kept changing while it was judged.
    #[error("Secret \"{namespace}/{name}\" keeps changing while it is being deleted; retrying")]
    TargetKeepsChanging {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

impl Failure for ExportFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::InvalidSpec(_) | Self::CrossNamespace { .. } | Self::IdentityRefused(_) => {
                Reason::ValidationFailed
            }
            Self::MissingCluster { .. } => Reason::MissingCluster,
            Self::ClusterNotReady(_) => Reason::ClusterNotReady,
            Self::NotInOmniYet { .. } => Reason::WaitingForOmni,
            Self::MissingConnection { .. } | Self::ConnectionUnreadable { .. } => {
                Reason::MissingConnection
            }
            Self::TargetNotOwned { .. } => Reason::TargetNotOwned,
            Self::OmniClient(_)
            | Self::Mint(_)
            | Self::UnusableKubeconfig(_)
            | Self::TargetRequest { .. } => Reason::ExportFailed,
            Self::TargetKeepsChanging { .. } => Reason::DeleteFailed,
        }
    }

    fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) | Self::CrossNamespace { .. } | Self::IdentityRefused(_) => {
                RetryPolicy::AwaitChange
            }
            // Watched, but polled too, as the original does. An unowned target lacks our
            // annotations, so its edits do not map back here: poll so an adoption annotation is
            // noticed.
            Self::MissingCluster { .. }
            | Self::ClusterNotReady(_)
            | Self::NotInOmniYet { .. }
            | Self::MissingConnection { .. }
            | Self::TargetNotOwned { .. } => RetryPolicy::Poll(RETRY),
            Self::ConnectionUnreadable { .. }
            | Self::OmniClient(_)
            | Self::Mint(_)
            | Self::UnusableKubeconfig(_)
            | Self::TargetRequest { .. }
            | Self::TargetKeepsChanging { .. } => RetryPolicy::Backoff,
        }
    }

    /// What is not there yet (the cluster, its readiness, its connection, its identity in
    /// Omni) is waited for; a spec or a target only a person can change stalls; the rest is
    /// retried.
    fn disposition(&self) -> Disposition {
        match self {
            Self::MissingCluster { .. }
            | Self::ClusterNotReady(_)
            | Self::NotInOmniYet { .. }
            | Self::MissingConnection { .. } => Disposition::Waiting,
            Self::InvalidSpec(_)
            | Self::CrossNamespace { .. }
            | Self::IdentityRefused(_)
            | Self::TargetNotOwned { .. } => Disposition::Stalled,
            Self::ConnectionUnreadable { .. }
            | Self::OmniClient(_)
            | Self::Mint(_)
            | Self::UnusableKubeconfig(_)
            | Self::TargetRequest { .. }
            | Self::TargetKeepsChanging { .. } => Disposition::Retrying,
        }
    }
}

/// A kubeconfig in the target Secret, current for the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exported {
    /// Hash of the credential data (`status.kubeconfigHash`).
    pub(crate) hash: Option<String>,
    /// When it expires.
    pub(crate) expiration: jiff::Timestamp,
    /// When it was written, if recorded.
    pub(crate) last_rotation: Option<jiff::Timestamp>,
    /// When it is rotated.
    pub(crate) next_rotation: jiff::Timestamp,
}

/// A deletion (of the export, or of its Secret by someone else) waiting for the OmniHelmReleases
/// and OmniSecretSyncs that use the Secret as their kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// The Secret's namespace.
    pub(crate) namespace: String,
    /// The Secret's name.
    pub(crate) name: String,
    /// Its users, named (`OmniHelmRelease "app"`).
    pub(crate) users: Vec<String>,
    /// Whether the export deletes the Secret (`Delete`) rather than only release it (the
    /// Secret itself being deleted).
    pub(crate) deletes: bool,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ns, name, users) = (&self.namespace, &self.name, self.users.join(", "));
        if self.deletes {
            write!(
                f,
                "Secret \"{ns}/{name}\" is still used by {users}; it is deleted once they are gone (or set spec.deletionPolicy to Orphan to keep it and finish now)"
            )
        } else {
            write!(
                f,
                "Secret \"{ns}/{name}\" is being deleted and is still used by {users}; it is kept until they are gone"
            )
        }
    }
}

/// What a reconcile came to when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Done {
    /// The Secret holds a usable kubeconfig (reused or freshly minted).
    Exported(Exported),
    /// Only the hold on the target changed; the export goes on after this delay (a fresh read
    /// of the Secret), its conditions untouched.
    HoldChanged(Duration),
    /// Deletion waits for the Secret's users.
    Waiting(Waiting),
    /// `spec.suspend`: nothing was minted or written.
    Suspended,
}

/// What a reconcile found on the way: the cluster and its connection, once found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The OmniCluster's name in Omni, once the cluster was found.
    pub(crate) cluster_name: Option<String>,
    /// The OmniConnection's name and endpoint, once it was found.
    pub(crate) connection: Option<(String, String)>,
}

/// What one reconcile found and did, before it becomes status.
pub(crate) type Outcome = pipeline::Outcome<OmniKubeconfigExport>;

impl Outcome {
    /// An outcome that got no further than the spec.
    pub(crate) fn early(result: Result<Done, ExportFailure>) -> Self {
        Self::new(Found::default(), result)
    }
}

/// The `Ready` message of an exported kubeconfig.
fn exported_message(e: &OmniKubeconfigExport) -> String {
    let key = e.effective_target_key();
    format!(
        "exported kubeconfig to Secret \"{}/{}\" {}",
        e.effective_target_namespace(),
        e.spec.target_secret_ref.name,
        match e.format() {
            ExportFormat::Kubeconfig => format!("key {key:?}"),
            ExportFormat::FluxValue => "key \"value\" (format FluxValue)".to_string(),
            ExportFormat::ClusterApi => "key \"value\" (format ClusterAPI)".to_string(),
            ExportFormat::ArgoCdCluster =>
                "as an Argo CD cluster (format ArgoCDCluster)".to_string(),
        }
    )
}

/// Pure: the status of `e` after `outcome`, conditions stamped `now` (whole seconds). The spec's
/// references are always recorded; a failure keeps the stored hash and rotation times (the
/// Secret still holds that kubeconfig).
pub(crate) fn desired_status(
    e: &OmniKubeconfigExport,
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> OmniKubeconfigExportStatus {
    let mut s = e.status.clone().unwrap_or_default();
    s.observed_generation = e.metadata.generation;
    s.cluster_ref = Some(e.spec.cluster_ref.name.clone());
    s.target_secret_ref = Some(e.spec.target_secret_ref.name.clone());
    s.target_secret_namespace = Some(e.effective_target_namespace());
    s.target_secret_key = Some(e.credential_key());
    s.service_account_user = Some(e.spec.service_account.user.clone());
    s.service_account_groups = e.spec.service_account.groups.clone();
    let mut d = Draft::new(s, e.metadata.generation, whole_seconds(now), ct::EXPORTED);
    let cluster = &e.spec.cluster_ref.name;
    if let Some(name) = &outcome.found.cluster_name {
        d.accepted(cluster, true);
        d.s.cluster_name = Some(name.clone());
    }
    if let Some((name, endpoint)) = &outcome.found.connection {
        d.s.connection_ref = Some(name.clone());
        d.s.endpoint = Some(endpoint.clone());
    }
    if !matches!(outcome.result, Ok(Done::Suspended)) {
        d.resume();
    }
    match &outcome.result {
        Ok(Done::Exported(x)) => {
            // A pass that exported with a force request pending minted (it never reuses then).
            if let Some(token) = force_requested(e) {
                d.s.last_handled_force_at = Some(token.to_string());
            }
            d.s.kubeconfig_hash = x.hash.clone();
            d.s.expiration_time = Some(x.expiration);
            d.s.last_rotation_time = x.last_rotation;
            d.s.next_rotation_time = Some(x.next_rotation);
            d.outcome(Standing::Ready, Reason::Exported, &exported_message(e));
        }
        Ok(Done::HoldChanged(_)) => {}
        Ok(Done::Suspended) => d.suspend(SUSPENDED),
        Ok(Done::Waiting(w)) => d.outcome(Standing::Reconciling, Reason::Deleting, &w.to_string()),
        Err(f) => {
            if let ExportFailure::MissingCluster { .. } = f {
                d.accepted(cluster, false);
            }
            d.failed_with(f);
        }
    }
    d.s
}

/// The message of `Suspended=True` on an export.
pub(crate) const SUSPENDED: &str = "spec.suspend is set: no kubeconfig is minted, rotated or written, and Ready keeps its last state (the kubeconfig in the Secret expires at status.expirationTime)";

/// Pure: the next reconcile after a pass that came to `done` at `now`. An exported kubeconfig
/// is looked at again at its rotation, never sooner than `floor`.
pub(crate) fn recheck(done: &Done, now: jiff::Timestamp, floor: Duration) -> Action {
    match done {
        Done::Exported(x) => Action::requeue(rotation_delay(now, x.next_rotation, floor)),
        Done::HoldChanged(after) => Action::requeue(*after),
        // Consumers finishing their deletion trigger the export; the requeue is a fallback.
        Done::Waiting(_) => Action::requeue(RETRY),
        // Resuming is a spec change, which wakes it.
        Done::Suspended => Action::await_change(),
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
