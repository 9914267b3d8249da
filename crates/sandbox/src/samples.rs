//! The shipped samples (`config/samples/`, compiled in), rewritten in memory to point at the
//! sandbox: the OmniConnection endpoint at omni-sim, the OmniHelmRelease repository at the
//! local chart repository. Applied with server-side apply, so re-running is harmless.

use anyhow::Context as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;

use crate::NAMESPACE;

/// File name and text of every sample, in the order a user applies them.
const SAMPLES: [(&str, &str); 11] = [
    (
        "01-omniconnection.yaml",
        include_str!("../../../config/samples/01-omniconnection.yaml"),
    ),
    (
        "02-omnicluster.yaml",
        include_str!("../../../config/samples/02-omnicluster.yaml"),
    ),
    (
        "03-omnicontrolplane.yaml",
        include_str!("../../../config/samples/03-omnicontrolplane.yaml"),
    ),
    (
        "04-omniworkers.yaml",
        include_str!("../../../config/samples/04-omniworkers.yaml"),
    ),
    (
        "05-omnimachine.yaml",
        include_str!("../../../config/samples/05-omnimachine.yaml"),
    ),
    (
        "06-omnikubeconfigexport.yaml",
        include_str!("../../../config/samples/06-omnikubeconfigexport.yaml"),
    ),
    (
        "07-omnihelmrelease.yaml",
        include_str!("../../../config/samples/07-omnihelmrelease.yaml"),
    ),
    (
        "08-omnisecretsync.yaml",
        include_str!("../../../config/samples/08-omnisecretsync.yaml"),
    ),
    (
        "09-omnikubeconfigexportset.yaml",
        include_str!("../../../config/samples/09-omnikubeconfigexportset.yaml"),
    ),
    (
        "10-omnihelmreleaseset.yaml",
        include_str!("../../../config/samples/10-omnihelmreleaseset.yaml"),
    ),
    (
        "11-omnisecretsyncset.yaml",
        include_str!("../../../config/samples/11-omnisecretsyncset.yaml"),
    ),
];

/// Every sample document, parsed.
pub fn load() -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    for (file, text) in SAMPLES {
        for doc in omni_operator::cli::validate::split_documents(text) {
            let value: Value =
                serde_saphyr::from_str(doc).with_context(|| format!("parsing {file}"))?;
            if value.is_object() {
                docs.push(value);
            }
        }
    }
    Ok(docs)
}

/// Chart name and version of the sample OmniHelmRelease, if there is one.
pub fn helm_chart(docs: &[Value]) -> Option<(String, String)> {
    let release = docs.iter().find(|d| d["kind"] == "OmniHelmRelease")?;
    Some((
        release["spec"]["chart"]["chart"].as_str()?.to_owned(),
        release["spec"]["chart"]["version"].as_str()?.to_owned(),
    ))
}

/// Points the samples at the sandbox's Omni and chart repository.
pub fn rewrite(mut docs: Vec<Value>, omni_endpoint: &str, chart_repo: Option<&str>) -> Vec<Value> {
    for doc in &mut docs {
        match doc["kind"].as_str() {
            Some("OmniConnection") => doc["spec"]["endpoint"] = Value::from(omni_endpoint),
            Some("OmniHelmRelease") => {
                if let Some(url) = chart_repo {
                    doc["spec"]["chart"]["repository"] = Value::from(url);
                }
            }
            Some("OmniHelmReleaseSet") => {
                if let Some(url) = chart_repo {
                    doc["spec"]["template"]["chart"]["repository"] = Value::from(url);
                }
            }
            _ => {}
        }
    }
    docs
}

/// Applies `docs` in order; returns `(kind, name)` of each.
pub async fn apply(client: &kube::Client, docs: &[Value]) -> anyhow::Result<Vec<(String, String)>> {
    let mut applied = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let api = api_for(client, &kind);
        let obj: DynamicObject = serde_json::from_value(doc.clone())?;
        api.patch(
            &name,
            &PatchParams::apply("omni-sandbox").force(),
            &Patch::Apply(&obj),
        )
        .await
        .with_context(|| format!("applying {kind}/{name}"))?;
        applied.push((kind, name));
    }
    Ok(applied)
}

/// A namespaced API for one of our kinds.
pub fn api_for(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let plural = omni_operator::api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .map_or_else(
            || format!("{}s", kind.to_lowercase()),
            |c| c.spec.names.plural,
        );
    Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("omni.texashpc.com", "v1alpha1", kind),
            &plural,
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_loads_and_is_rewritten_to_the_sandbox() {
        let docs = load().unwrap();
        assert_eq!(docs.len(), 13, "one document per object in config/samples");
        let (chart, version) = helm_chart(&docs).unwrap();
        assert!(!chart.is_empty() && !version.is_empty());
        let docs = rewrite(docs, "http://127.0.0.1:1", Some("http://127.0.0.1:2/"));
        let conn = docs.iter().find(|d| d["kind"] == "OmniConnection").unwrap();
        assert_eq!(conn["spec"]["endpoint"], "http://127.0.0.1:1");
        let release = docs
            .iter()
            .find(|d| d["kind"] == "OmniHelmRelease")
            .unwrap();
        assert_eq!(
            release["spec"]["chart"]["repository"],
            "http://127.0.0.1:2/"
        );
        assert!(docs.iter().all(|d| d["metadata"]["namespace"] == NAMESPACE));
    }
}
