//! Why an OmniCluster pass failed: [`ClusterFailure`], whose variants know their condition
//! reason, the stage they stopped at (which conditions they turn) and their retry policy.

use std::time::Duration;

use omni_client::template::{StateError, SyncError, ValidationErrors};

use super::ownership::OmniOwnership;
use crate::api::Reason;
use crate::api::keys::ADOPT_ANNOTATION;
use crate::controllers::shared::error::{Disposition, Failure, RetryPolicy};
use crate::controllers::shared::omni::{ApiVersionError, ConnectionError};
use crate::domain::render::RenderError;

/// The longest wait before a failure that no watch reports the end of (Omni, template files)
/// is looked at again: the default `syncInterval`; a shorter one of the cluster wins.
pub(crate) const FAILURE_RECHECK: Duration = Duration::from_secs(300);

/// Why the OmniConnection of a cluster gave no Omni client.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionLookup {
    /// The OmniConnection does not exist.
    #[error("omniconnections.omni.texashpc.com {0:?} not found")]
    NotFound(String),
    /// The management cluster did not answer the read.
    #[error(transparent)]
    Unreadable(Box<kube::Error>),
    /// The OmniConnection does not make a client (its Secret, key or endpoint).
    #[error(transparent)]
    Client(Box<ConnectionError>),
}

/// Why an OmniCluster is not synced, or not deleted; the message is its condition's and Event's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClusterFailure {
    /// The spec breaks the webhook's rules (it bypassed admission): the webhook's summary.
    #[error("{0}")]
    InvalidSpec(String),
    /// The referenced OmniConnection is missing or could not be read.
    #[error("failed to get OmniConnection {name:?}: {cause}")]
    MissingConnection {
        /// `spec.connectionRef.name`.
        name: String,
        /// What the lookup found.
        #[source]
        cause: ConnectionLookup,
    },
    /// The watches of these child kinds (plural) have not completed their first list, so the
    /// cluster cannot be rendered with all its children.
    #[error(
        "the operator's watch of {} has not completed its first list after {}s (is listing or watching them denied to the operator?); retrying",
        kinds.join(", "),
        waited.as_secs()
    )]
    ChildCacheNotReady {
        /// The kinds whose cache is not filled.
        kinds: Vec<&'static str>,
        /// How long the reconcile waited.
        waited: Duration,
    },
    /// A child of the cluster's namespace does not decode as its kind (its stored data
    /// bypassed the CRD schema), so which cluster it belongs to is unknown. Rendering without
    /// it could drop its machines from Omni, so no cluster of the namespace syncs until it is
    /// fixed (its own condition says what is wrong with it; fixing it wakes its cluster).
    #[error(
        "{kind} {name:?} in this namespace cannot be read, so the cluster is not synced until it is fixed (it may be one of this cluster's): {error}"
    )]
    UnreadableChild {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// Why it does not decode.
        error: String,
    },
    /// The cluster and its children do not render.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The rendered template breaks the template rules, or a `file:` entry cannot be read.
    #[error(transparent)]
    InvalidTemplate(ValidationErrors),
    /// The connection gave no Omni client.
    #[error("sync failed: {0}")]
    OmniClient(#[source] ConnectionError),
    /// The Omni cluster of this name could not be read.
    #[error("sync failed: get Omni cluster {name:?}: {source}")]
    OwnershipUnreadable {
        /// The Omni cluster name.
        name: String,
        /// Omni's answer.
        source: StateError,
    },
    /// The Omni cluster exists and is not this object's.
    #[error(
        "sync failed: Omni cluster {name:?} already exists and {}; it was left unchanged (annotate this OmniCluster {ADOPT_ANNOTATION}=\"true\" to take it over)",
        owner.describe()
    )]
    NotOwned {
        /// The Omni cluster name.
        name: String,
        /// Whose it is.
        owner: OmniOwnership,
    },
    /// Omni's backend API version could not be read.
    #[error("sync failed: {0}")]
    BackendApi(#[source] ApiVersionError),
    /// Planning or applying the template failed; `output` is what was done before (trimmed).
    #[error("sync failed: {source}{}", on_next_line(output))]
    Sync {
        /// Omni's answer.
        source: Box<SyncError>,
        /// The sync's output so far.
        output: String,
    },
    /// Deletion needs an Omni client, and the connection gives none.
    #[error("cannot delete remote Omni cluster without OmniConnection {name:?}: {cause}")]
    DeleteWithoutConnection {
        /// `spec.connectionRef.name`.
        name: String,
        /// Why there is no client.
        #[source]
        cause: ConnectionLookup,
    },
    /// `spec.clusterName` changed since the last sync: neither cluster is surely this object's.
    #[error(
        "spec.clusterName was changed from {recorded:?} to {name:?}; refusing to delete either Omni cluster. Restore spec.clusterName, or set spec.deletePolicy.orphan to finish without deleting"
    )]
    RenamedBeforeDelete {
        /// The name the status records.
        recorded: String,
        /// The name the spec asks for now.
        name: String,
    },
    /// The Omni cluster to delete could not be read.
    #[error("get Omni cluster {name:?}: {source}")]
    DeleteOwnershipUnreadable {
        /// The Omni cluster name.
        name: String,
        /// Omni's answer.
        source: StateError,
    },
    /// A deletion step failed; `output` is what was done before (trimmed).
    #[error("{source}")]
    Delete {
        /// Omni's answer.
        source: Box<SyncError>,
        /// The deletion's output so far.
        output: String,
    },
}

/// `"\n" + text`, or nothing for empty `text`.
fn on_next_line(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!("\n{text}")
    }
}

/// How far a pass got before it failed, which decides the conditions it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The spec or the rendered template is invalid: `Validated=False`.
    Validate,
    /// What the cluster refers to is not there: `Synced=False`.
    Dereference,
    /// The valid template did not reach Omni: `Validated=True`, `Synced=False`, an attempt.
    Sync,
    /// Deletion: `Ready=False` only.
    Delete,
}

impl Failure for ClusterFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::InvalidSpec(_) | Self::InvalidTemplate(_) => Reason::ValidationFailed,
            Self::Render(e) => e.reason(),
            Self::MissingConnection { .. } => Reason::MissingConnection,
            Self::ChildCacheNotReady { .. } | Self::UnreadableChild { .. } => {
                Reason::ReconcileFailed
            }
            Self::Sync { source, .. } if omni_rejected(source) => Reason::OmniRejected,
            Self::OmniClient(_)
            | Self::OwnershipUnreadable { .. }
            | Self::NotOwned { .. }
            | Self::BackendApi(_)
            | Self::Sync { .. } => Reason::SyncFailed,
            Self::DeleteWithoutConnection { .. }
            | Self::RenamedBeforeDelete { .. }
            | Self::DeleteOwnershipUnreadable { .. }
            | Self::Delete { .. } => Reason::DeleteFailed,
        }
    }

    /// Waiting for a change suits what a watch reports (the spec); a failure outside the
    /// watches (Omni, template files) is looked at again after [`FAILURE_RECHECK`] (or the
    /// shorter sync interval), and so is what the cluster waits for; the rest backs off.
    fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) | Self::RenamedBeforeDelete { .. } => RetryPolicy::AwaitChange,
            Self::MissingConnection {
                cause: ConnectionLookup::NotFound(_),
                ..
            }
            | Self::Render(_)
            | Self::InvalidTemplate(_)
            | Self::NotOwned { .. }
            | Self::UnreadableChild { .. } => RetryPolicy::Poll(FAILURE_RECHECK),
            // Omni's catalogue may change (a version it refused may become available); a
            // connection's key Secret that is not there yet wakes its connection, not us.
            Self::Sync { source, .. } if omni_rejected(source) => {
                RetryPolicy::Poll(FAILURE_RECHECK)
            }
            Self::OmniClient(e) if e.disposition() != Disposition::Retrying => {
                RetryPolicy::Poll(FAILURE_RECHECK)
            }
            Self::MissingConnection { .. }
            | Self::ChildCacheNotReady { .. }
            | Self::OmniClient(_)
            | Self::OwnershipUnreadable { .. }
            | Self::BackendApi(_)
            | Self::Sync { .. }
            | Self::DeleteWithoutConnection { .. }
            | Self::DeleteOwnershipUnreadable { .. }
            | Self::Delete { .. } => RetryPolicy::Backoff,
        }
    }

    /// A sibling or a connection not there yet is waited for; what only a spec change fixes
    /// (the spec, the template, a child that does not decode, a foreign Omni cluster, a
    /// rename before deletion, a template Omni refuses as invalid) stalls; the rest is
    /// retried.
    fn disposition(&self) -> Disposition {
        match self {
            Self::MissingConnection {
                cause: ConnectionLookup::NotFound(_),
                ..
            }
            | Self::Render(RenderError::ControlPlaneCount { found: 0, .. }) => Disposition::Waiting,
            Self::OmniClient(e) => e.disposition(),
            Self::InvalidSpec(_)
            | Self::Render(_)
            | Self::InvalidTemplate(_)
            | Self::UnreadableChild { .. }
            | Self::NotOwned { .. }
            | Self::RenamedBeforeDelete { .. } => Disposition::Stalled,
            Self::Sync { source, .. } if omni_rejected(source) => Disposition::Stalled,
            Self::MissingConnection { .. }
            | Self::ChildCacheNotReady { .. }
            | Self::OwnershipUnreadable { .. }
            | Self::BackendApi(_)
            | Self::Sync { .. }
            | Self::DeleteWithoutConnection { .. }
            | Self::DeleteOwnershipUnreadable { .. }
            | Self::Delete { .. } => Disposition::Retrying,
        }
    }
}

/// Pure: whether Omni refused the sync for a reason no retry can fix, only a spec change: the
/// template breaks a rule Omni checks before writing (client-side validation, translation), or
/// Omni's own validation refused a write (`INVALID_ARGUMENT`, `failed to validate: …`: an
/// unsupported or incompatible version, an upgrade path, a forbidden patch field). Refusals
/// that end by themselves are not: a locked cluster (an Omni administrator unlocks it), a
/// cluster or machine set being torn down, a resource that does not exist yet, a write in the
/// wrong phase.
pub(crate) fn omni_rejected(error: &SyncError) -> bool {
    match error {
        SyncError::Invalid(_) | SyncError::Translate(_) => true,
        SyncError::State {
            operation,
            source: StateError::Invalid(message),
            ..
        } => {
            const PASSING: [&str; 4] = [
                "is locked",
                "is being torn down",
                "does not exist",
                "is not in phase",
            ];
            matches!(*operation, "create" | "update")
                && message.starts_with("failed to validate:")
                && !PASSING.iter().any(|p| message.contains(p))
        }
        _ => false,
    }
}

impl ClusterFailure {
    /// How far the pass got.
    pub(crate) fn stage(&self) -> Stage {
        match self {
            Self::InvalidSpec(_) | Self::Render(_) | Self::InvalidTemplate(_) => Stage::Validate,
            Self::MissingConnection { .. }
            | Self::ChildCacheNotReady { .. }
            | Self::UnreadableChild { .. } => Stage::Dereference,
            Self::OmniClient(_)
            | Self::OwnershipUnreadable { .. }
            | Self::NotOwned { .. }
            | Self::BackendApi(_)
            | Self::Sync { .. } => Stage::Sync,
            Self::DeleteWithoutConnection { .. }
            | Self::RenamedBeforeDelete { .. }
            | Self::DeleteOwnershipUnreadable { .. }
            | Self::Delete { .. } => Stage::Delete,
        }
    }

    /// What Omni was told before the failure (empty when nothing).
    pub(crate) fn output(&self) -> &str {
        match self {
            Self::Sync { output, .. } | Self::Delete { output, .. } => output,
            _ => "",
        }
    }
}
