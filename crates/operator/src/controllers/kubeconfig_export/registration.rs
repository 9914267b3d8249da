//! What the export writes into its Secret besides the credential (pure): the labels and
//! annotations of `spec.target`, the Argo CD `project`/`namespaces`/`clusterResources` keys,
//! and the Cluster API label and type. None of it is part of the minted credential: a change
//! of it rewrites the Secret and never mints.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Serialize};

use crate::api::OmniKubeconfigExport;
use crate::api::export_registration::reserved_key;
use crate::api::keys;
use crate::api::kubeconfig_export::ExportFormat;

/// The keys `spec.target` put on a Secret, as recorded there.
#[derive(Serialize, Deserialize, Default)]
struct TargetKeys {
    #[serde(default)]
    labels: BTreeSet<String>,
    #[serde(default)]
    annotations: BTreeSet<String>,
}

/// Sets `desired` in `map`, removing the keys of `before` it no longer has; the operator's own
/// keys are never touched. Returns the keys set.
fn merge(
    map: &mut Option<BTreeMap<String, String>>,
    desired: &BTreeMap<String, String>,
    before: &BTreeSet<String>,
) -> BTreeSet<String> {
    let map = map.get_or_insert_with(BTreeMap::new);
    for key in before
        .iter()
        .filter(|k| !desired.contains_key(*k) && !reserved_key(k))
    {
        map.remove(key);
    }
    let mut set = BTreeSet::new();
    for (k, v) in desired.iter().filter(|(k, _)| !reserved_key(k)) {
        map.insert(k.clone(), v.clone());
        set.insert(k.clone());
    }
    set
}

/// `secret` with what `export` registers besides the credential; whether that changed it.
pub(crate) fn register(secret: &mut Secret, export: &OmniKubeconfigExport) -> bool {
    let before = secret.clone();
    let meta = &mut secret.metadata;
    let recorded: TargetKeys = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::EXPORT_TARGET_KEYS_ANNOTATION))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    let target = export.spec.target.clone().unwrap_or_default();
    let now = TargetKeys {
        labels: merge(&mut meta.labels, &target.labels, &recorded.labels),
        annotations: merge(
            &mut meta.annotations,
            &target.annotations,
            &recorded.annotations,
        ),
    };
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    if now.labels.is_empty() && now.annotations.is_empty() {
        annotations.remove(keys::EXPORT_TARGET_KEYS_ANNOTATION);
    } else {
        annotations.insert(
            keys::EXPORT_TARGET_KEYS_ANNOTATION.to_string(),
            serde_json::to_string(&now).unwrap_or_default(),
        );
    }
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    if export.format() == ExportFormat::ClusterApi {
        let name = &export.spec.target_secret_ref.name;
        let cluster = name.strip_suffix("-kubeconfig").unwrap_or(name);
        labels.insert(
            keys::CAPI_CLUSTER_NAME_LABEL.to_string(),
            cluster.to_string(),
        );
        if meta.resource_version.is_none() {
            secret.type_ = Some(keys::CAPI_SECRET_TYPE.to_string());
        }
    } else {
        labels.remove(keys::CAPI_CLUSTER_NAME_LABEL);
    }
    if export.format() == ExportFormat::ArgoCdCluster {
        argo_cd_keys(secret, export);
    }
    *secret != before
}

/// The Argo CD cluster Secret's scoping keys, as `spec.argoCD` says.
fn argo_cd_keys(secret: &mut Secret, export: &OmniKubeconfigExport) {
    let argo = export.spec.argo_cd.clone().unwrap_or_default();
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    let mut put = |key: &str, value: Option<String>| match value {
        Some(v) => {
            data.insert(key.to_string(), ByteString(v.into_bytes()));
        }
        None => {
            data.remove(key);
        }
    };
    put("project", argo.project.filter(|p| !p.is_empty()));
    let namespaces = (!argo.namespaces.is_empty()).then(|| argo.namespaces.join(","));
    let scoped = namespaces.is_some();
    put("namespaces", namespaces);
    put(
        "clusterResources",
        (scoped && argo.cluster_resources).then(|| "true".to_string()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(spec_extra: serde_json::Value) -> OmniKubeconfigExport {
        let mut spec = serde_json::json!({
            "clusterRef": {"name": "edge"},
            "targetSecretRef": {"name": "edge-kubeconfig"},
            "serviceAccount": {"user": "argocd", "groups": ["argocd"]},
            "ttl": "24h",
        });
        if let (Some(s), serde_json::Value::Object(e)) = (spec.as_object_mut(), spec_extra) {
            s.extend(e);
        }
        OmniKubeconfigExport::new(
            "e",
            serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn labels(secret: &Secret) -> BTreeMap<String, String> {
        secret.metadata.labels.clone().unwrap_or_default()
    }

    #[test]
    fn target_labels_follow_the_spec_and_leave_other_keys_alone() {
        let mut secret = Secret::default();
        secret.metadata.labels = Some(BTreeMap::from([("team".into(), "ops".into())]));
        let first =
            export(serde_json::json!({"target": {"labels": {"env": "prod", "region": "eu"}}}));
        assert!(register(&mut secret, &first));
        assert!(
            !register(&mut secret, &first),
            "a second pass changes nothing"
        );
        let second = export(serde_json::json!({"target": {"labels": {"env": "stage"}}}));
        assert!(register(&mut secret, &second));
        assert_eq!(
            labels(&secret),
            BTreeMap::from([
                ("env".into(), "stage".into()),
                ("team".into(), "ops".into())
            ])
        );
    }

    #[test]
    fn argo_cd_scoping_and_the_cluster_api_label() {
        let mut secret = Secret::default();
        let argo = export(serde_json::json!({
            "format": "ArgoCDCluster",
            "argoCD": {"project": "edge", "namespaces": ["apps", "infra"], "clusterResources": true}
        }));
        register(&mut secret, &argo);
        let data = secret.data.clone().unwrap_or_default();
        assert_eq!(
            data.get("project").map(|b| b.0.clone()),
            Some(b"edge".to_vec())
        );
        assert_eq!(
            data.get("namespaces").map(|b| b.0.clone()),
            Some(b"apps,infra".to_vec())
        );
        assert_eq!(
            data.get("clusterResources").map(|b| b.0.clone()),
            Some(b"true".to_vec())
        );
        let mut capi = Secret::default();
        register(
            &mut capi,
            &export(serde_json::json!({"format": "ClusterAPI"})),
        );
        assert_eq!(
            labels(&capi)
                .get(keys::CAPI_CLUSTER_NAME_LABEL)
                .map(String::as_str),
            Some("edge")
        );
        assert_eq!(capi.type_.as_deref(), Some(keys::CAPI_SECRET_TYPE));
    }
}
