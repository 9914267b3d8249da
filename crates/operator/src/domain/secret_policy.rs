//! Which Secrets an object may make the operator read, and where an export may write.
//!
//! Whoever may edit the operator's custom resources can name any Secret in their namespace,
//! including ones they may not read themselves. Three kinds of Secret are never handed out,
//! whatever the object says: the Omni service-account key of an OmniConnection,
//! `kubernetes.io/service-account-token` Secrets, and the Secrets the operator itself writes
//! (an OmniKubeconfigExport's minted kubeconfig; anything carrying the operator's ownership
//! labels). None may serve as Helm repository credentials (they would be sent to a repository
//! server of the author's choosing), as an OmniSecretSync source (they would be copied into
//! a workload cluster) nor as a source of chart values (a chart would put them there). The
//! opt-in label cannot override this: it is checked after.
//!
//! With `--require-secret-opt-in`, every Secret an OmniHelmRelease or OmniSecretSync reads (its
//! kubeconfig, repository credentials or sync source) must also carry the label
//! [`USABLE_BY_LABEL`] naming that kind: only someone allowed to label Secrets can make one
//! usable.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::OmniConnection;

use crate::api::keys::USABLE_BY_LABEL;

/// Type of the Secrets the API server fills with a service-account token.
pub(crate) const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// Deployment-wide settings (flags `--require-secret-opt-in` and
/// `--allow-cross-namespace-export`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SecretPolicy {
    /// Every Secret an OmniHelmRelease or OmniSecretSync reads needs [`USABLE_BY_LABEL`].
    pub require_opt_in: bool,
    /// In cluster-wide mode, an OmniKubeconfigExport may write into other namespaces than its
    /// own.
    pub allow_cross_namespace_export: bool,
}

/// What a Secret is about to be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretUse {
    /// A kubeconfig of a workload cluster (checked further by [`crate::domain::kubeconfig`]).
    Kubeconfig,
    /// Helm repository credentials, sent to the chart repository.
    RepositoryCredentials,
    /// The source of an OmniSecretSync, copied into a workload cluster.
    SyncSource,
    /// A source of an OmniHelmRelease's chart values (`spec.chart.valuesFrom`), handed to
    /// the chart in a workload cluster.
    ChartValues,
}

impl SecretUse {
    fn describe(self) -> &'static str {
        match self {
            SecretUse::Kubeconfig => "a kubeconfig",
            SecretUse::RepositoryCredentials => "chart repository credentials",
            SecretUse::SyncSource => "an OmniSecretSync source",
            SecretUse::ChartValues => "a source of chart values",
        }
    }

    /// Whether the Secret's content leaves the management cluster.
    fn sends_content(self) -> bool {
        !matches!(self, SecretUse::Kubeconfig)
    }
}

/// The mark by which `secret` is one the operator wrote, if it carries one: an export's
/// ownership label or name annotation, a sync's ownership label, or the operator's
/// `app.kubernetes.io/managed-by` value.
fn operator_mark(secret: &Secret) -> Option<&'static str> {
    use crate::api::keys::{
        EXPORT_NAME_ANNOTATION, EXPORT_UID_LABEL, MANAGED_BY, SECRET_SYNC_UID_LABEL,
    };
    let labels = secret.labels();
    if labels.contains_key(EXPORT_UID_LABEL) {
        Some(EXPORT_UID_LABEL)
    } else if secret.annotations().contains_key(EXPORT_NAME_ANNOTATION) {
        Some(EXPORT_NAME_ANNOTATION)
    } else if labels.contains_key(SECRET_SYNC_UID_LABEL) {
        Some(SECRET_SYNC_UID_LABEL)
    } else if labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1) {
        Some(MANAGED_BY.0)
    } else {
        None
    }
}

/// Whether `secret` carries the opt-in label naming `kind`.
pub(crate) fn opted_in(secret: &Secret, kind: &str) -> bool {
    secret
        .labels()
        .get(USABLE_BY_LABEL)
        .is_some_and(|v| v.split('.').any(|k| k == kind))
}

/// The reason `secret` may not be used by an object of `kind` as `use_`, if any.
/// `connections` are the OmniConnections of the Secret's namespace. Messages name the Secret
/// and the rule, never its content.
pub fn refusal(
    policy: &SecretPolicy,
    secret: &Secret,
    kind: &str,
    use_: SecretUse,
    connections: &[OmniConnection],
) -> Option<String> {
    let ns = secret.namespace().unwrap_or_default();
    let name = secret.name_any();
    let what = use_.describe();
    if use_.sends_content() {
        if secret.type_.as_deref() == Some(SERVICE_ACCOUNT_TOKEN_TYPE) {
            return Some(format!(
                "Secret \"{ns}/{name}\" is a {SERVICE_ACCOUNT_TOKEN_TYPE} Secret and can never serve as {what}"
            ));
        }
        if let Some(mark) = operator_mark(secret) {
            return Some(format!(
                "Secret \"{ns}/{name}\" was written by the operator (it carries {mark}) and can never serve as {what}: it holds a credential the operator minted"
            ));
        }
        if let Some(conn) = connections.iter().find(|c| {
            c.namespace().as_deref() == Some(ns.as_str())
                && c.spec.auth.service_account_secret_ref.name == name
        }) {
            return Some(format!(
                "Secret \"{ns}/{name}\" holds the Omni service-account key of OmniConnection {:?} and can never serve as {what}",
                conn.name_any()
            ));
        }
    }
    if policy.require_opt_in && !opted_in(secret, kind) {
        return Some(format!(
            "Secret \"{ns}/{name}\" cannot serve as {what}: the operator requires Secrets to opt in (--require-secret-opt-in) and it lacks the label {USABLE_BY_LABEL} naming {kind}"
        ));
    }
    None
}

/// [`refusal`] with the OmniConnections of the Secret's namespace read through `client`
/// (only for uses that send the content somewhere).
pub async fn check(
    client: &kube::Client,
    policy: &SecretPolicy,
    secret: &Secret,
    kind: &str,
    use_: SecretUse,
) -> Result<Option<String>, kube::Error> {
    let connections = if use_.sends_content() {
        let ns = secret.namespace().unwrap_or_default();
        kube::Api::<OmniConnection>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await?
            .items
    } else {
        Vec::new()
    };
    Ok(refusal(policy, secret, kind, use_, &connections))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn secret(type_: &str, label: Option<&str>) -> Secret {
        let mut s = Secret {
            type_: Some(type_.into()),
            ..Secret::default()
        };
        s.metadata.name = Some("s".into());
        s.metadata.namespace = Some("ns".into());
        s.metadata.labels =
            label.map(|v| BTreeMap::from([(USABLE_BY_LABEL.to_string(), v.to_string())]));
        s
    }

    fn connection(secret: &str) -> OmniConnection {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniConnection",
            "metadata": {"name": "omni", "namespace": "ns"},
            "spec": {"endpoint": "https://omni.example", "auth": {"serviceAccountSecretRef": {"name": secret}}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn token_and_omni_key_secrets_are_never_sent_anywhere() {
        let open = SecretPolicy::default();
        let token = secret(SERVICE_ACCOUNT_TOKEN_TYPE, Some("OmniHelmRelease"));
        let m = refusal(
            &open,
            &token,
            "OmniHelmRelease",
            SecretUse::RepositoryCredentials,
            &[],
        );
        assert!(m.is_some_and(|m| m.contains(SERVICE_ACCOUNT_TOKEN_TYPE)));
        let key = secret("Opaque", Some("OmniSecretSync"));
        let m = refusal(
            &open,
            &key,
            "OmniSecretSync",
            SecretUse::SyncSource,
            &[connection("s")],
        );
        assert!(m.is_some_and(|m| m.contains("OmniConnection \"omni\"")));
        assert_eq!(
            refusal(
                &open,
                &key,
                "OmniSecretSync",
                SecretUse::SyncSource,
                &[connection("other")]
            ),
            None
        );
    }

    #[test]
    fn the_operators_own_secrets_are_never_sent_anywhere_even_when_opted_in() {
        let strict = SecretPolicy {
            require_opt_in: true,
            ..SecretPolicy::default()
        };
        let marks: [(&str, &str, bool); 4] = [
            ("omni.texashpc.com/kubeconfig-export-uid", "u", true),
            ("omni.texashpc.com/kubeconfig-export-name", "e", false),
            ("omni.texashpc.com/secret-sync-uid", "u", true),
            (
                "app.kubernetes.io/managed-by",
                "omni-cluster-operator",
                true,
            ),
        ];
        for (key, value, is_label) in marks {
            let mut s = secret("Opaque", Some("OmniSecretSync.OmniHelmRelease"));
            let map = BTreeMap::from([(key.to_string(), value.to_string())]);
            if is_label {
                s.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .extend(map);
            } else {
                s.metadata.annotations = Some(map);
            }
            for (kind, use_) in [
                ("OmniSecretSync", SecretUse::SyncSource),
                ("OmniHelmRelease", SecretUse::RepositoryCredentials),
            ] {
                let m = refusal(&strict, &s, kind, use_, &[]);
                assert!(
                    m.as_deref().is_some_and(|m| m.contains(key)),
                    "{key}: {m:?}"
                );
            }
            // As a kubeconfig, an export's Secret is what it is for.
            assert_eq!(
                refusal(&strict, &s, "OmniSecretSync", SecretUse::Kubeconfig, &[]),
                None
            );
        }
    }

    #[test]
    fn opt_in_label_must_name_the_kind_when_required() {
        let strict = SecretPolicy {
            require_opt_in: true,
            ..SecretPolicy::default()
        };
        let unlabelled = secret("Opaque", None);
        assert_eq!(
            refusal(
                &SecretPolicy::default(),
                &unlabelled,
                "OmniHelmRelease",
                SecretUse::Kubeconfig,
                &[]
            ),
            None
        );
        let m = refusal(
            &strict,
            &unlabelled,
            "OmniHelmRelease",
            SecretUse::Kubeconfig,
            &[],
        );
        assert!(m.is_some_and(|m| m.contains(USABLE_BY_LABEL)));
        let both = secret("Opaque", Some("OmniHelmRelease.OmniSecretSync"));
        assert_eq!(
            refusal(&strict, &both, "OmniSecretSync", SecretUse::SyncSource, &[]),
            None
        );
        let other = secret("Opaque", Some("OmniHelmRelease"));
        assert!(
            refusal(
                &strict,
                &other,
                "OmniSecretSync",
                SecretUse::SyncSource,
                &[]
            )
            .is_some()
        );
    }
}
