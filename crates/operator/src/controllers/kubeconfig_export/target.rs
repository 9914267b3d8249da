//! The target Secret: whose it is, and what this export writes into it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::holds::with_hold;
use super::rotation::whole_seconds;
use super::{
    CLUSTER_LABEL, EXPIRATION_ANNOTATION, FORMAT_ANNOTATION, HASH_ANNOTATION,
    LAST_ROTATION_ANNOTATION, MANAGED_BY, NAME_ANNOTATION, NAMESPACE_ANNOTATION,
    SPEC_HASH_ANNOTATION, UID_LABEL,
};
use crate::api::OmniKubeconfigExport;
use crate::api::kubeconfig_export::ExportFormat;
use crate::controllers::secret_sync::ADOPT_ANNOTATION;
use crate::export_format;

/// Ownership rule of docs/parity.md#ownership-of-target-secrets.
pub(crate) fn is_owned(secret: &Secret, export: &OmniKubeconfigExport) -> bool {
    match export.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => {
            secret.labels().get(UID_LABEL).map(String::as_str) == Some(uid)
        }
        _ => secret.annotations().get(NAME_ANNOTATION) == export.metadata.name.as_ref(),
    }
}

/// Sets the current context's namespace in `kubeconfig` (YAML).
pub(crate) fn with_context_namespace(
    kubeconfig: &[u8],
    namespace: &str,
) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(kubeconfig)
        .map_err(|_| "generated kubeconfig is invalid: not UTF-8".to_string())?;
    let mut kc = crate::kubeconfig::load_without_checks(text, "generated kubeconfig")?;
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
    crate::kubeconfig::load_without_checks(text, "generated kubeconfig")?;
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
        Some(s) => match s.annotations().get(FORMAT_ANNOTATION) {
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
    let labels = secret.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    labels.insert(
        UID_LABEL.into(),
        export.metadata.uid.clone().unwrap_or_default(),
    );
    labels.insert(CLUSTER_LABEL.into(), cluster_name.into());
    if format == ExportFormat::ArgoCdCluster {
        labels.insert(
            export_format::ARGOCD_SECRET_TYPE.0.into(),
            export_format::ARGOCD_SECRET_TYPE.1.into(),
        );
    } else if old_format == Some(ExportFormat::ArgoCdCluster) {
        // Argo CD must no longer take it for a cluster.
        labels.remove(export_format::ARGOCD_SECRET_TYPE.0);
    }
    let a = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    a.remove(ADOPT_ANNOTATION);
    a.insert(NAME_ANNOTATION.into(), export.name_any());
    a.insert(
        NAMESPACE_ANNOTATION.into(),
        export.namespace().unwrap_or_default(),
    );
    a.insert(SPEC_HASH_ANNOTATION.into(), spec_hash.into());
    a.insert(
        HASH_ANNOTATION.into(),
        export_format::data_hash(format, &key, data).unwrap_or_default(),
    );
    if format == ExportFormat::Kubeconfig {
        a.remove(FORMAT_ANNOTATION);
    } else {
        a.insert(FORMAT_ANNOTATION.into(), format.as_str().into());
    }
    a.insert(
        EXPIRATION_ANNOTATION.into(),
        whole_seconds(expiration).to_string(),
    );
    a.insert(
        LAST_ROTATION_ANNOTATION.into(),
        whole_seconds(now).to_string(),
    );
    let st = export.status.clone().unwrap_or_default();
    let stored = secret.data.get_or_insert_with(BTreeMap::new);
    // A changed key or format moves the credential rather than leaving a stale copy behind.
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
                .chain((format != ExportFormat::Kubeconfig).then(|| key.clone()))
                .collect(),
            other => export_format::shape_keys(other, &key),
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
    if secret.metadata.deletion_timestamp.is_none() {
        with_hold(&mut secret);
    }
    secret
}

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;
