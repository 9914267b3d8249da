//! The target Secret: whose it is, and what this export writes into it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::rotation::whole_seconds;
use crate::api::OmniKubeconfigExport;
use crate::api::keys;
use crate::api::kubeconfig_export::ExportFormat;
use crate::domain::export_format;

/// Ownership rule of docs/parity.md#ownership-of-target-secrets.
pub(crate) fn is_owned(secret: &Secret, export: &OmniKubeconfigExport) -> bool {
    match export.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => {
            secret
                .labels()
                .get(keys::EXPORT_UID_LABEL)
                .map(String::as_str)
                == Some(uid)
        }
        _ => {
            secret.annotations().get(keys::EXPORT_NAME_ANNOTATION) == export.metadata.name.as_ref()
        }
    }
}

/// Sets the current context's namespace in `kubeconfig` (YAML).
pub(crate) fn with_context_namespace(
    kubeconfig: &[u8],
    namespace: &str,
) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(kubeconfig)
        .map_err(|_| "generated kubeconfig is invalid: not UTF-8".to_string())?;
    let mut kc = crate::domain::kubeconfig::load_without_checks(text, "generated kubeconfig")?;
    let current = kc.current_context.clone().unwrap_or_default();
    let Some(ctx) = kc
        .contexts
        .iter_mut()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_mut())
    else {
        return Err(format!(
            "generated kubeconfig current context {current:?} was not found"
        ));
    };
    ctx.namespace = Some(namespace.to_string());
    serde_saphyr::to_string(&kc)
        .map(String::into_bytes)
        .map_err(|e| format!("write kubeconfig with context namespace: {e}"))
}

/// The minted kubeconfig as it is stored: checked to be one, with `context_namespace` (if any)
/// set on its current context. Errors name what is wrong, never a value.
pub(super) fn prepared_kubeconfig(
    minted: &[u8],
    context_namespace: Option<&str>,
) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(minted)
        .map_err(|_| "generated kubeconfig is invalid: not UTF-8".to_string())?;
    crate::domain::kubeconfig::load_without_checks(text, "generated kubeconfig")?;
    match context_namespace.filter(|n| !n.is_empty()) {
        Some(ns) => with_context_namespace(minted, ns),
        None => Ok(minted.to_vec()),
    }
}

/// Builds the Secret to write: the existing one (or a new Opaque one) with operator labels,
/// annotations and `data` (the shape `format`, see `export_format`) set. Third-party metadata
/// and other keys are kept; the keys of a shape this export wrote before are removed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_target(
    export: &OmniKubeconfigExport,
    existing: Option<&Secret>,
    cluster_name: &str,
    spec_hash: &str,
    format: ExportFormat,
    data: &BTreeMap<String, Vec<u8>>,
    expiration: jiff::Timestamp,
    now: jiff::Timestamp,
) -> Secret {
    let key = export.effective_target_key();
    let owned = existing.is_some_and(|s| is_owned(s, export));
    // What this export wrote last time (only an owned Secret's record is believed).
    let old_format = match existing.filter(|_| owned) {
        Some(s) => match s.annotations().get(keys::EXPORT_FORMAT_ANNOTATION) {
            Some(f) => ExportFormat::parse(f),
            None => Some(ExportFormat::Kubeconfig),
        },
        None => None,
    };
    let mut secret = existing.cloned().unwrap_or_else(|| Secret {
        metadata: ObjectMeta {
            name: Some(export.spec.target_secret_ref.name.clone()),
            namespace: Some(export.effective_target_namespace()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        ..Secret::default()
    });
    label(&mut secret, export, cluster_name, format, old_format);
    let a = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    a.remove(keys::ADOPT_ANNOTATION);
    a.insert(keys::EXPORT_NAME_ANNOTATION.into(), export.name_any());
    a.insert(
        keys::EXPORT_NAMESPACE_ANNOTATION.into(),
        export.namespace().unwrap_or_default(),
    );
    a.insert(keys::EXPORT_SPEC_HASH_ANNOTATION.into(), spec_hash.into());
    a.insert(
        keys::KUBECONFIG_HASH_ANNOTATION.into(),
        export_format::data_hash(format, &key, data).unwrap_or_default(),
    );
    if format == ExportFormat::Kubeconfig {
        a.remove(keys::EXPORT_FORMAT_ANNOTATION);
    } else {
        a.insert(
            keys::EXPORT_FORMAT_ANNOTATION.into(),
            format.as_str().into(),
        );
    }
    a.insert(
        keys::KUBECONFIG_EXPIRATION_ANNOTATION.into(),
        whole_seconds(expiration).to_string(),
    );
    a.insert(
        keys::KUBECONFIG_LAST_ROTATION_ANNOTATION.into(),
        whole_seconds(now).to_string(),
    );
    put_data(&mut secret, export, format, old_format, &key, data);
    if secret.metadata.deletion_timestamp.is_none() {
        with_hold(&mut secret);
    }
    secret
}

/// The operator's labels on the target: managed-by, owner, cluster, and Argo CD's cluster label
/// for the `ArgoCDCluster` shape (removed when the shape written before was that one).
fn label(
    secret: &mut Secret,
    export: &OmniKubeconfigExport,
    cluster_name: &str,
    format: ExportFormat,
    old_format: Option<ExportFormat>,
) {
    let labels = secret.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(keys::MANAGED_BY.0.into(), keys::MANAGED_BY.1.into());
    labels.insert(
        keys::EXPORT_UID_LABEL.into(),
        export.metadata.uid.clone().unwrap_or_default(),
    );
    labels.insert(keys::CLUSTER_LABEL.into(), cluster_name.into());
    if format == ExportFormat::ArgoCdCluster {
        labels.insert(
            keys::ARGOCD_SECRET_TYPE.0.into(),
            keys::ARGOCD_SECRET_TYPE.1.into(),
        );
    } else if old_format == Some(ExportFormat::ArgoCdCluster) {
        // Argo CD must no longer take it for a cluster.
        labels.remove(keys::ARGOCD_SECRET_TYPE.0);
    }
}

/// `data` into the target: a changed key or format moves the credential rather than leaving a
/// stale copy behind (the keys of the shape `old_format` this export wrote before go); other
/// keys stay.
fn put_data(
    secret: &mut Secret,
    export: &OmniKubeconfigExport,
    format: ExportFormat,
    old_format: Option<ExportFormat>,
    key: &str,
    data: &BTreeMap<String, Vec<u8>>,
) {
    let st = export.status.clone().unwrap_or_default();
    let stored = secret.data.get_or_insert_with(BTreeMap::new);
    if let Some(old_format) = old_format {
        let old_keys: Vec<String> = match old_format {
            // The key of the last export is in status; with another format now, `key` is the
            // Kubeconfig shape's key too (admission allows only the default there), which
            // covers a status rewritten by a failed attempt in between.
            ExportFormat::Kubeconfig => st
                .target_secret_key
                .filter(|_| {
                    st.target_secret_ref.as_deref()
                        == Some(export.spec.target_secret_ref.name.as_str())
                })
                .into_iter()
                .chain((format != ExportFormat::Kubeconfig).then(|| key.to_string()))
                .collect(),
            other => export_format::shape_keys(other, key),
        };
        for old_key in old_keys {
            if !data.contains_key(&old_key) {
                stored.remove(&old_key);
            }
        }
    }
    for (k, v) in data {
        stored.insert(k.clone(), ByteString(v.clone()));
    }
}

/// Whether the export's hold is on `secret`.
pub(crate) fn holds(secret: &Secret) -> bool {
    secret
        .finalizers()
        .iter()
        .any(|f| f == keys::KUBECONFIG_IN_USE_FINALIZER)
}

/// Puts the hold on `secret` (a Secret this export owns that is not being deleted: a deleting
/// object takes no new finalizers).
pub(super) fn with_hold(secret: &mut Secret) {
    if !holds(secret) {
        secret
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(keys::KUBECONFIG_IN_USE_FINALIZER.to_string());
    }
}

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;
