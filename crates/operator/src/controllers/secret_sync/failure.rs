//! Why an OmniSecretSync is not synced: each failure knows its reason and what happens next.

use kube::ResourceExt;

use std::time::Duration;

use crate::api::OmniSecretSync;
use crate::api::Reason;
use crate::api::common::missing_cluster;
use crate::api::keys::ADOPT_ANNOTATION;
use crate::controllers::shared::error::{Disposition, Failure, RetryPolicy};
use crate::domain::fleet_template::TemplateError;
use crate::domain::workload::WorkloadError;

/// Re-check while a dependency is missing.
pub(crate) const RETRY: Duration = Duration::from_secs(60);

/// Why an OmniSecretSync is not synced; the message is its condition's and Event's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretSyncFailure {
    /// The spec is invalid (it bypassed admission).
    #[error("{0}")]
    InvalidSpec(String),
    /// The Secret policy refuses a Secret the sync would read.
    #[error("{0}")]
    Refused(String),
    /// The sync's ServiceAccount may not read a Secret it references; the message names the
    /// reference.
    #[error("{0}")]
    AccessDenied(String),
    /// The referenced OmniCluster does not exist.
    #[error("{}", missing_cluster(cluster))]
    MissingCluster {
        /// `spec.clusterRef.name`.
        cluster: String,
    },
    /// The OmniCluster exists, the sync has not copied yet and waits for it
    /// (`spec.startWhen`): why.
    #[error("{0}")]
    ClusterNotReady(String),
    /// The source Secret does not exist.
    #[error("source Secret \"{namespace}/{name}\" does not exist")]
    MissingSource {
        /// The sync's namespace.
        namespace: String,
        /// `spec.sourceSecretRef.name`.
        name: String,
    },
    /// The kubeconfig Secret does not exist.
    #[error("kubeconfig Secret \"{namespace}/{name}\" does not exist")]
    MissingKubeconfig {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
    },
    /// The kubeconfig Secret does not exist yet, and an OmniKubeconfigExport writes it.
    #[error(
        "kubeconfig Secret \"{namespace}/{name}\" is not written yet; OmniKubeconfigExport {export:?} writes it"
    )]
    KubeconfigPending {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
        /// The export that writes it.
        export: String,
    },
    /// The kubeconfig Secret lacks the key.
    #[error("kubeconfig Secret \"{namespace}/{name}\" does not contain key {key:?}")]
    MissingKubeconfigKey {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
        /// `spec.kubeconfigSecretRef.key`.
        key: String,
    },
    /// The kubeconfig does not make a usable client.
    #[error("kubeconfig Secret \"{namespace}/{name}\" key {key:?} is invalid: {detail}")]
    InvalidKubeconfig {
        /// The sync's namespace.
        namespace: String,
        /// `spec.kubeconfigSecretRef.name`.
        name: String,
        /// `spec.kubeconfigSecretRef.key`.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The kubeconfig Secret could not be read.
    #[error("load workload kubeconfig: {0}")]
    KubeconfigUnreadable(WorkloadError),
    /// A request to the workload cluster failed during `step`.
    #[error("{step}: {error}")]
    Workload {
        /// What was being done, naming the object.
        step: String,
        /// The workload cluster's answer.
        #[source]
        error: kube::Error,
    },
    /// The target changed while its type was being replaced.
    #[error(
        "workload Secret \"{namespace}/{name}\" changed while its type was being replaced; it was left alone and is checked again"
    )]
    TargetChanged {
        /// The target's namespace.
        namespace: String,
        /// The target's name.
        name: String,
    },
    /// The target exists and belongs to someone else.
    #[error(
        "workload Secret \"{namespace}/{name}\" exists and is not owned by this OmniSecretSync; it was left unchanged (annotate it {ADOPT_ANNOTATION}=\"true\" to let the sync take it over)"
    )]
    TargetNotOwned {
        /// The target's namespace.
        namespace: String,
        /// The target's name.
        name: String,
    },
    /// Deleting a copy the sync owns failed (the workload cluster's message).
    #[error("{0}")]
    DeleteFailed(String),
    /// A `data` entry names a key its source Secret does not have.
    #[error("source Secret \"{namespace}/{name}\" has no key {key:?} ({field})")]
    MissingSourceKey {
        /// The sync's namespace.
        namespace: String,
        /// The source Secret.
        name: String,
        /// The key.
        key: String,
        /// The `data` entry (`spec.data[0]`).
        field: String,
    },
    /// A `data` template failed; the message names the field and the line, never a value.
    #[error("{0}")]
    TemplateFailed(TemplateError),
    /// Some namespaces matching `namespaceSelector` did not get the copy.
    #[error("{}", .0.message())]
    Namespaces(Spread),
}

/// What a pass with `namespaceSelector` did across the matching namespaces.
#[derive(Debug, Default)]
pub(crate) struct Spread {
    /// The namespaces holding the copy, by name.
    pub(crate) synced: Vec<String>,
    /// The namespaces that should and do not, with why (by name).
    pub(crate) failed: Vec<(String, SecretSyncFailure)>,
    /// Whether the pass wrote to the workload cluster.
    pub(crate) changed: bool,
}

impl Spread {
    /// The failure the whole is reported under: the first that is retried, else the first.
    fn worst(&self) -> Option<&(String, SecretSyncFailure)> {
        self.failed
            .iter()
            .find(|(_, f)| f.retry() == RetryPolicy::Backoff)
            .or_else(|| self.failed.first())
    }

    fn message(&self) -> String {
        let total = self.synced.len() + self.failed.len();
        let mut m = format!(
            "the copy is in {} of {total} namespaces matching spec.targetSecretRef.namespaceSelector",
            self.synced.len()
        );
        if let Some((_, f)) = self.worst() {
            m.push_str(&format!("; {f}"));
        }
        if self.failed.len() > 1 {
            m.push_str(&format!(
                " (and {} more: status.namespaceFailures)",
                self.failed.len() - 1
            ));
        }
        m
    }
}

impl Failure for SecretSyncFailure {
    fn reason(&self) -> Reason {
        match self {
            Self::InvalidSpec(_) | Self::Refused(_) | Self::InvalidKubeconfig { .. } => {
                Reason::ValidationFailed
            }
            Self::MissingCluster { .. } => Reason::MissingCluster,
            Self::ClusterNotReady(_) => Reason::ClusterNotReady,
            Self::KubeconfigPending { .. } => Reason::KubeconfigPending,
            Self::AccessDenied(_) => Reason::AccessDenied,
            Self::MissingSource { .. }
            | Self::MissingKubeconfig { .. }
            | Self::MissingKubeconfigKey { .. } => Reason::MissingSecret,
            // A workload API server that does not answer in time is told apart: it degrades only
            // the objects that point at it, and the operator's time bounds say how long it had.
            Self::Workload { error, .. } if crate::process::api_client::is_timeout(error) => {
                Reason::Timeout
            }
            Self::KubeconfigUnreadable(_) | Self::Workload { .. } | Self::TargetChanged { .. } => {
                Reason::SyncFailed
            }
            Self::TargetNotOwned { .. } => Reason::TargetNotOwned,
            Self::DeleteFailed(_) => Reason::DeleteFailed,
            Self::MissingSourceKey { .. } => Reason::MissingSecret,
            Self::TemplateFailed(_) => Reason::TemplateFailed,
            Self::Namespaces(spread) => spread
                .worst()
                .map_or(Reason::SyncFailed, |(_, f)| f.reason()),
        }
    }

    fn retry(&self) -> RetryPolicy {
        match self {
            Self::InvalidSpec(_) | Self::Refused(_) => RetryPolicy::AwaitChange,
            // An unowned target lives in the workload cluster, which is not watched: poll so
            // an adoption annotation is noticed. Missing references are polled likewise.
            // RBAC is not watched: look again, as for a missing reference.
            Self::TargetNotOwned { .. }
            | Self::AccessDenied(_)
            | Self::MissingCluster { .. }
            | Self::ClusterNotReady(_)
            | Self::MissingSource { .. }
            | Self::MissingKubeconfig { .. }
            | Self::KubeconfigPending { .. }
            | Self::MissingKubeconfigKey { .. }
            | Self::InvalidKubeconfig { .. } => RetryPolicy::Poll(RETRY),
            Self::KubeconfigUnreadable(_)
            | Self::Workload { .. }
            | Self::TargetChanged { .. }
            | Self::DeleteFailed(_) => RetryPolicy::Backoff,
            // A source that gains the key, and a template fixed or a source changed, are
            // watched: nothing to poll.
            Self::MissingSourceKey { .. } | Self::TemplateFailed(_) => RetryPolicy::AwaitChange,
            Self::Namespaces(spread) => spread
                .worst()
                .map_or(RetryPolicy::Backoff, |(_, f)| f.retry()),
        }
    }

    /// The cluster, its readiness and the Secrets not there yet are waited for; a spec, a
    /// refused Secret, a Secret the sync's ServiceAccount may not read (RBAC or the spec must
    /// change), a kubeconfig that does not work and a target owned by someone else stall; the
    /// rest (a timeout included) is retried.
    fn disposition(&self) -> Disposition {
        match self {
            Self::MissingCluster { .. }
            | Self::ClusterNotReady(_)
            | Self::MissingSource { .. }
            | Self::MissingKubeconfig { .. }
            | Self::KubeconfigPending { .. }
            | Self::MissingKubeconfigKey { .. } => Disposition::Waiting,
            Self::InvalidSpec(_)
            | Self::Refused(_)
            | Self::AccessDenied(_)
            | Self::InvalidKubeconfig { .. }
            | Self::TargetNotOwned { .. } => Disposition::Stalled,
            Self::KubeconfigUnreadable(_)
            | Self::Workload { .. }
            | Self::TargetChanged { .. }
            | Self::DeleteFailed(_) => Disposition::Retrying,
            Self::MissingSourceKey { .. } => Disposition::Waiting,
            Self::TemplateFailed(_) => Disposition::Stalled,
            Self::Namespaces(spread) => spread
                .worst()
                .map_or(Disposition::Retrying, |(_, f)| f.disposition()),
        }
    }
}

/// [`SecretSyncFailure::Workload`] for a failed `step`.
pub(super) fn workload_failed(step: String) -> impl FnOnce(kube::Error) -> SecretSyncFailure {
    move |error| SecretSyncFailure::Workload { step, error }
}

/// The failure a kubeconfig problem is reported as, naming the sync's reference.
pub(super) fn kubeconfig_failure(sync: &OmniSecretSync, e: WorkloadError) -> SecretSyncFailure {
    let namespace = sync.namespace().unwrap_or_default();
    let name = sync.spec.kubeconfig_secret_ref.name.clone();
    let key = sync.spec.kubeconfig_secret_ref.key.clone();
    match e {
        WorkloadError::MissingSecret { .. } => {
            SecretSyncFailure::MissingKubeconfig { namespace, name }
        }
        WorkloadError::MissingKey { .. } => SecretSyncFailure::MissingKubeconfigKey {
            namespace,
            name,
            key,
        },
        WorkloadError::Invalid { detail, .. } => SecretSyncFailure::InvalidKubeconfig {
            namespace,
            name,
            key,
            detail,
        },
        WorkloadError::Refused { reason } => SecretSyncFailure::Refused(reason),
        WorkloadError::Denied(m) => {
            SecretSyncFailure::AccessDenied(format!("{m} (spec.kubeconfigSecretRef)"))
        }
        e @ WorkloadError::Read { .. } => SecretSyncFailure::KubeconfigUnreadable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Secret the sync's ServiceAccount may not read needs RBAC or the spec changed: it
    /// stalls, and is looked at again (RBAC is not watched).
    #[test]
    fn a_denied_read_stalls_and_is_looked_at_again() {
        let denied = SecretSyncFailure::AccessDenied("may not read".into());
        assert_eq!(denied.reason(), Reason::AccessDenied);
        assert_eq!(denied.disposition(), Disposition::Stalled);
        assert_eq!(denied.retry(), RetryPolicy::Poll(RETRY));
    }

    /// Each failure knows its condition reason and what happens next; the messages are the
    /// ones the docs and system tests pin.
    #[test]
    fn failures_carry_their_reason_retry_and_message() {
        let (ns, name) = ("apps".to_string(), "dst".to_string());
        let cases = [
            (
                SecretSyncFailure::MissingCluster {
                    cluster: "prod".into(),
                },
                "MissingCluster",
                RetryPolicy::Poll(RETRY),
                r#"OmniCluster "prod" does not exist"#.to_string(),
            ),
            (
                SecretSyncFailure::MissingKubeconfigKey {
                    namespace: ns.clone(),
                    name: "kc".into(),
                    key: "value".into(),
                },
                "MissingSecret",
                RetryPolicy::Poll(RETRY),
                r#"kubeconfig Secret "apps/kc" does not contain key "value""#.to_string(),
            ),
            (
                SecretSyncFailure::InvalidSpec("spec.targetSecretRef.name: required".into()),
                "ValidationFailed",
                RetryPolicy::AwaitChange,
                "spec.targetSecretRef.name: required".to_string(),
            ),
            (
                SecretSyncFailure::TargetChanged {
                    namespace: ns.clone(),
                    name: name.clone(),
                },
                "SyncFailed",
                RetryPolicy::Backoff,
                r#"workload Secret "apps/dst" changed while its type was being replaced; it was left alone and is checked again"#.to_string(),
            ),
            (
                SecretSyncFailure::TargetNotOwned {
                    namespace: ns,
                    name,
                },
                "TargetNotOwned",
                RetryPolicy::Poll(RETRY),
                format!(
                    r#"workload Secret "apps/dst" exists and is not owned by this OmniSecretSync; it was left unchanged (annotate it {ADOPT_ANNOTATION}="true" to let the sync take it over)"#
                ),
            ),
            (
                SecretSyncFailure::DeleteFailed("delete workload Secret \"apps/dst\": x".into()),
                "DeleteFailed",
                RetryPolicy::Backoff,
                "delete workload Secret \"apps/dst\": x".to_string(),
            ),
        ];
        for (failure, reason, retry, message) in cases {
            assert_eq!(failure.reason().as_str(), reason, "{failure:?}");
            assert_eq!(failure.retry(), retry, "{failure:?}");
            assert_eq!(failure.to_string(), message);
        }
    }
}
