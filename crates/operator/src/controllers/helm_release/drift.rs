//! The drift check of a release's live objects (`spec.driftDetection`), run on every pass that
//! finds the release as last applied (the periodic drift check, a reconcile request, a change):
//! the release's manifest (`helm get manifest`), each object's live copy, and the API server's
//! dry-run apply of the object under Helm's field manager, compared by
//! [`crate::domain::drift`]. In `Enabled` mode the drifted objects are put back without a new
//! Helm revision: a merge patch of the drifted fields only (at the live `resourceVersion`), or
//! a server-side apply that recreates a deleted object. Nothing is written for a release that
//! did not drift: the dry runs persist nothing.

use std::collections::HashMap;

use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{ApiResource, Scope};
use kube::{Client, ResourceExt};

use super::inputs::{self, Kubeconfig};
use super::outcome::{DriftFound, HelmFailure};
use super::state::HelmState;
use crate::api::OmniHelmRelease;
use crate::api::helm_policies::{DriftMode, DriftedObject};
use crate::api::label_selector::LabelSelector;
use crate::controllers::shared::context::Context;
use crate::domain::drift::{
    FIELD_MANAGER, FIELDS_LISTED, ManifestObject, Target, apply_body, correction, differences,
    labels_of, parse_manifest,
};
use crate::domain::helm::{ReleaseRequest, ReleaseSession};

/// The drift mode of `r` when it compares live objects (`Warn` or `Enabled`).
pub(crate) fn mode(r: &OmniHelmRelease) -> Option<DriftMode> {
    r.spec
        .drift_detection
        .as_ref()
        .map(|d| d.mode)
        .filter(|m| *m != DriftMode::Disabled)
}

/// One object of the release, located in the workload cluster.
struct Located<'a> {
    object: &'a ManifestObject,
    api: Api<DynamicObject>,
    namespace: Option<String>,
}

/// Compares the live objects of `req`'s release with its manifest, and in `Enabled` mode puts
/// the drifted ones back.
pub(crate) async fn check(
    ctx: &Context,
    state: &HelmState,
    r: &OmniHelmRelease,
    req: &ReleaseRequest,
    session: &ReleaseSession,
    kubeconfig: &Kubeconfig,
    mode: DriftMode,
) -> Result<DriftFound, HelmFailure> {
    let failed = |what: String| {
        HelmFailure::DriftCheck(format!(
            "drift check of Helm release {:?}: {what}",
            req.release_name
        ))
    };
    let manifest = session
        .manifest(req)
        .await
        .map_err(|e| failed(format!("read its manifest: {e}")))?;
    let objects = parse_manifest(&manifest).map_err(failed)?;
    // The kubeconfig this pass read as the release's identity and checked, never a second read.
    let client = inputs::workload_client(state, r, kubeconfig)
        .await
        .map_err(failed)?;
    let rules = ignore_rules(r);
    let mut resources = HashMap::new();
    let mut drifted = Vec::new();
    for object in &objects {
        let at = locate(&client, &mut resources, object, &req.namespace)
            .await
            .map_err(|e| failed(format!("{}: {e}", object.describe(""))))?;
        let body = apply_body(
            object,
            at.namespace.as_deref(),
            &req.release_name,
            &req.namespace,
        );
        let found = compare(&at, &body, &rules)
            .await
            .map_err(|e| failed(format!("{}: {e}", object.describe(ns(&at)))))?;
        if let Some(found) = found {
            if mode == DriftMode::Enabled {
                put_back(&at, &body, &found)
                    .await
                    .map_err(|e| failed(format!("put back {}: {e}", object.describe(ns(&at)))))?;
            }
            drifted.push(found.report);
        }
    }
    let corrected = mode == DriftMode::Enabled && !drifted.is_empty();
    if corrected {
        ctx.metrics.helm_drift_corrected(
            &r.namespace().unwrap_or_default(),
            &r.name_any(),
            drifted.len() as u64,
        );
    }
    Ok(DriftFound {
        mode,
        objects: drifted,
        corrected,
    })
}

fn ns<'a>(at: &'a Located<'_>) -> &'a str {
    at.namespace.as_deref().unwrap_or_default()
}

/// The API of `object`'s kind (discovered once per kind and check) and its namespace: the
/// chart's, else the release's for a namespaced kind.
async fn locate<'a>(
    client: &Client,
    resources: &mut HashMap<(String, String), (ApiResource, bool)>,
    object: &'a ManifestObject,
    release_namespace: &str,
) -> Result<Located<'a>, kube::Error> {
    let key = (object.api_version.clone(), object.kind.clone());
    if !resources.contains_key(&key) {
        let (group, version) = object
            .api_version
            .split_once('/')
            .unwrap_or(("", object.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &object.kind);
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
        resources.insert(key.clone(), (resource, caps.scope == Scope::Namespaced));
    }
    let (resource, namespaced) = resources[&key].clone();
    let namespace = namespaced.then(|| {
        object
            .namespace
            .clone()
            .unwrap_or_else(|| release_namespace.to_string())
    });
    let api = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    Ok(Located {
        object,
        api,
        namespace,
    })
}

/// How one object drifted.
struct Drift {
    /// What the status says of it (at most [`FIELDS_LISTED`] fields).
    report: DriftedObject,
    /// Every differing field.
    fields: Vec<String>,
    /// The API server's dry-run answer: the object as the release wants it.
    desired: serde_json::Value,
    /// The live object; `None` when it was deleted.
    live: Option<serde_json::Value>,
}

/// The drift of one object, `None` when it is as the manifest says.
async fn compare(
    at: &Located<'_>,
    body: &serde_json::Value,
    rules: &[(Target, Vec<String>)],
) -> Result<Option<Drift>, kube::Error> {
    let object = at.object;
    let report = |deleted, fields| DriftedObject {
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
        namespace: at.namespace.clone().unwrap_or_default(),
        name: object.name.clone(),
        deleted,
        fields,
    };
    let Some(live) = at.api.get_opt(&object.name).await? else {
        return Ok(Some(Drift {
            report: report(true, Vec::new()),
            fields: Vec::new(),
            desired: body.clone(),
            live: None,
        }));
    };
    let dry_run = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let desired = at
        .api
        .patch(&object.name, &dry_run, &Patch::Apply(body))
        .await?;
    let (desired, live) = (to_value(&desired)?, to_value(&live)?);
    let labels = labels_of(&live);
    let ignore: Vec<String> = rules
        .iter()
        .filter(|(target, _)| target.selects(&object.kind, ns(at), &object.name, &labels))
        .flat_map(|(_, paths)| paths.iter().cloned())
        .collect();
    let fields = differences(&desired, &live, &ignore);
    if fields.is_empty() {
        return Ok(None);
    }
    Ok(Some(Drift {
        report: report(false, fields.iter().take(FIELDS_LISTED).cloned().collect()),
        fields,
        desired,
        live: Some(live),
    }))
}

fn to_value(o: &DynamicObject) -> Result<serde_json::Value, kube::Error> {
    serde_json::to_value(o).map_err(kube::Error::SerdeError)
}

/// Puts one drifted object back: recreates a deleted one (a server-side apply by Helm's field
/// manager), or patches only its drifted fields.
async fn put_back(
    at: &Located<'_>,
    body: &serde_json::Value,
    drift: &Drift,
) -> Result<(), kube::Error> {
    let name = &at.object.name;
    match &drift.live {
        None => {
            let apply = PatchParams::apply(FIELD_MANAGER).force();
            at.api.patch(name, &apply, &Patch::Apply(body)).await?;
        }
        Some(live) => {
            let patch = correction(&drift.desired, live, &drift.fields);
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            at.api.patch(name, &params, &Patch::Merge(&patch)).await?;
        }
    }
    Ok(())
}

/// The ignore rules of `r`, each its target and paths (a selector that does not parse, stored
/// without admission, selects nothing).
fn ignore_rules(r: &OmniHelmRelease) -> Vec<(Target, Vec<String>)> {
    let Some(drift) = &r.spec.drift_detection else {
        return Vec::new();
    };
    drift
        .ignore
        .iter()
        .filter_map(|rule| {
            let t = rule.target.clone().unwrap_or_default();
            let selector = match t.label_selector.as_deref() {
                Some(text) => Some(LabelSelector::parse(text).ok()?),
                None => None,
            };
            Some((
                Target {
                    kind: t.kind,
                    name: t.name,
                    namespace: t.namespace,
                    selector,
                },
                rule.paths.clone(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drifted_object_is_described_by_what_differs() {
        let mut o = DriftedObject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "apps".into(),
            name: "cfg".into(),
            deleted: true,
            fields: Vec::new(),
        };
        assert_eq!(DriftFound::describe(&o), "ConfigMap apps/cfg (deleted)");
        o.deleted = false;
        o.fields = vec!["/data/a".into(), "/data/b".into()];
        o.namespace.clear();
        assert_eq!(DriftFound::describe(&o), "ConfigMap cfg (/data/a, /data/b)");
    }

    #[test]
    fn a_rule_with_a_broken_selector_ignores_nothing() {
        let mut r = crate::controllers::helm_release::test_support::release(serde_json::json!({}));
        r.spec.drift_detection = serde_json::from_value(serde_json::json!({
            "mode": "Warn",
            "ignore": [
                {"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}},
                {"paths": ["/data"], "target": {"labelSelector": "a in b"}},
            ]
        }))
        .ok();
        let rules = ignore_rules(&r);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].1, ["/spec/replicas"]);
    }
}
