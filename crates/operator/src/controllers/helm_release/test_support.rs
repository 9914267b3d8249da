//! Objects shared by the unit tests of this module's files.

use crate::api::OmniHelmRelease;
use crate::domain::helm::{HelmStatus, ReleaseInfo};

pub(crate) fn release(values: serde_json::Value) -> OmniHelmRelease {
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

pub(crate) fn info(status: &str, revision: i64) -> ReleaseInfo {
    ReleaseInfo {
        name: "app".into(),
        namespace: "default".into(),
        revision,
        status: HelmStatus::parse(status),
        chart: "app".into(),
        chart_version: "1.0.0".into(),
        description: String::new(),
        last_deployed: None,
    }
}

/// A release in `status` at `revision`, started at `deployed`.
pub(crate) fn at(status: &str, revision: i64, deployed: Option<&str>) -> ReleaseInfo {
    ReleaseInfo {
        last_deployed: deployed.map(String::from),
        ..info(status, revision)
    }
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
