//! Checks across the objects of one `validate` run: what the admission webhook cannot see
//! because it looks at one object at a time, but the operator trips over once they are all
//! applied — the same name twice, a child whose cluster is not there, a cluster without
//! exactly one control plane, and everything else rendering the cluster's template refuses.

use std::collections::BTreeMap;

use serde_json::Value;

use super::output::{Finding, Severity, Subject};
use crate::api::helm_policies::{cycle_text, dependency_cycle};
use crate::api::validation::{FieldError, FieldErrorKind};
use crate::cli::manifests::{Manifest, Position};
use crate::cli::render::Objects;
use crate::domain::render::{RenderError, render};

/// Kinds whose `spec.clusterRef` names an OmniCluster of their namespace: every kind after
/// the connection and the cluster, in `api::KINDS`' dependency order, up to the fleet sets
/// (which select clusters by label instead).
pub(super) fn child_kinds() -> &'static [&'static str] {
    &crate::api::KINDS[2..8]
}

/// One object of our API group that was validated.
pub(super) struct Checked<'a> {
    /// The input it came from.
    pub(super) file: &'a str,
    /// The object and its positions.
    pub(super) manifest: &'a Manifest,
    /// Kind and name, for output.
    pub(super) subject: Subject,
    /// Whether it had no problem of its own: only those take part in rendering.
    pub(super) clean: bool,
}

impl Checked<'_> {
    /// The namespace `kubectl apply` would put it in without `-n`: its own, else `default`.
    fn namespace(&self) -> &str {
        self.subject.namespace.as_deref().unwrap_or("default")
    }

    fn cluster_ref(&self) -> Option<&str> {
        self.manifest.value["spec"]["clusterRef"]["name"].as_str()
    }

    fn error(&self, at: Position, error: &FieldError) -> Finding {
        Finding::new(
            Severity::Error,
            self.file,
            at,
            Some(&self.subject),
            Some(error.path.clone()),
            error.body(),
        )
    }

    /// A problem of the whole object, found at its start.
    fn finding(&self, message: String) -> Finding {
        Finding::new(
            Severity::Error,
            self.file,
            self.manifest.positions.root(),
            Some(&self.subject),
            None,
            message,
        )
    }

    fn location(&self) -> String {
        let at = self.manifest.positions.of("metadata.name");
        format!("{}:{}", self.file, at)
    }
}

/// Every cross-object problem of `objects`. With `partial`, the input is not every object
/// there is: a reference to a cluster (or a control plane) that is not in it is not a problem.
pub(super) fn check(objects: &[Checked<'_>], partial: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    duplicates(objects, &mut out);
    if !partial {
        missing_clusters(objects, &mut out);
    }
    templates(objects, partial, &mut out);
    dependency_cycles(objects, &mut out);
    out
}

fn duplicates(objects: &[Checked<'_>], out: &mut Vec<Finding>) {
    let mut seen: BTreeMap<(&str, &str, &str), &Checked<'_>> = BTreeMap::new();
    for object in objects {
        let key = (
            object.subject.kind.as_str(),
            object.namespace(),
            object.subject.name.as_str(),
        );
        if object.manifest.value["metadata"]["name"].as_str().is_none() {
            continue;
        }
        match seen.get(&key) {
            Some(first) => {
                let error = FieldError {
                    path: "metadata.name".into(),
                    kind: FieldErrorKind::Duplicate {
                        value: object.subject.name.clone(),
                    },
                    detail: format!(
                        "{} {}/{} is already defined at {}; the later one would replace it",
                        key.0,
                        key.1,
                        key.2,
                        first.location()
                    ),
                };
                out.push(object.error(object.manifest.positions.of("metadata.name"), &error));
            }
            None => {
                seen.insert(key, object);
            }
        }
    }
}

/// `spec.dependsOn` of each OmniHelmRelease: a cycle among the given releases is reported on
/// each release on it, naming the cycle from there (the operator would leave them all waiting).
fn dependency_cycles(objects: &[Checked<'_>], out: &mut Vec<Finding>) {
    let releases: Vec<&Checked<'_>> = objects
        .iter()
        .filter(|o| o.subject.kind == "OmniHelmRelease")
        .collect();
    let depends_on = |namespace: &str, name: &str| -> Vec<String> {
        releases
            .iter()
            .filter(|r| r.namespace() == namespace && r.subject.name == name)
            .flat_map(|r| {
                r.manifest.value["spec"]["dependsOn"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d["name"].as_str().map(str::to_string))
            })
            .collect()
    };
    for release in &releases {
        let namespace = release.namespace();
        let Some(cycle) = dependency_cycle(&release.subject.name, |n| depends_on(namespace, n))
        else {
            continue;
        };
        // The first step of the cycle is the entry to fix here.
        let next = cycle.get(1).cloned().unwrap_or_default();
        let index = depends_on(namespace, &release.subject.name)
            .iter()
            .position(|d| *d == next)
            .unwrap_or_default();
        let path = format!("spec.dependsOn[{index}].name");
        let error = FieldError::invalid(
            path.clone(),
            next,
            format!("dependency cycle {}", cycle_text(&cycle)),
        );
        out.push(release.error(release.manifest.positions.of(&path), &error));
    }
}

fn missing_clusters(objects: &[Checked<'_>], out: &mut Vec<Finding>) {
    let clusters: Vec<(&str, &str)> = objects
        .iter()
        .filter(|o| o.subject.kind == "OmniCluster")
        .map(|o| (o.namespace(), o.subject.name.as_str()))
        .collect();
    for object in objects {
        if !child_kinds().contains(&object.subject.kind.as_str()) {
            continue;
        }
        let Some(cluster) = object.cluster_ref().filter(|c| !c.is_empty()) else {
            continue;
        };
        if clusters.contains(&(object.namespace(), cluster)) {
            continue;
        }
        let error = FieldError::invalid(
            "spec.clusterRef.name",
            cluster,
            format!(
                "no OmniCluster {cluster:?} in namespace {} among the given manifests (pass --partial if it is defined elsewhere)",
                object.namespace()
            ),
        );
        out.push(object.error(object.manifest.positions.of("spec.clusterRef.name"), &error));
    }
}

/// Checks that every cluster has exactly one control plane, then renders every cluster
/// whose objects are all clean, as the operator would, and reports what rendering refuses.
fn templates(objects: &[Checked<'_>], partial: bool, out: &mut Vec<Finding>) {
    let template_kinds = ["OmniControlPlane", "OmniWorkers", "OmniMachine"];
    let mut seen = Vec::new();
    for cluster in objects.iter().filter(|o| o.subject.kind == "OmniCluster") {
        // A duplicate is reported as such; its template is the first one's.
        let key = (cluster.namespace(), cluster.subject.name.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let children: Vec<&Checked<'_>> = objects
            .iter()
            .filter(|o| {
                template_kinds.contains(&o.subject.kind.as_str())
                    && o.namespace() == cluster.namespace()
                    && o.cluster_ref() == Some(cluster.subject.name.as_str())
            })
            .collect();
        // By name: a duplicate is reported as such, and applying it replaces the first.
        let mut control_planes: Vec<&str> = children
            .iter()
            .filter(|c| c.subject.kind == "OmniControlPlane")
            .map(|c| c.subject.name.as_str())
            .collect();
        control_planes.sort_unstable();
        control_planes.dedup();
        let control_planes = control_planes.len();
        if control_planes != 1 {
            if control_planes == 0 && partial {
                continue;
            }
            let error = RenderError::ControlPlaneCount {
                namespace: cluster.namespace().to_string(),
                name: cluster.subject.name.clone(),
                found: control_planes,
            };
            let message = if control_planes == 0 {
                format!(
                    "{error}: add an OmniControlPlane with spec.clusterRef.name: {} (pass --partial if it is defined elsewhere)",
                    cluster.subject.name
                )
            } else {
                error.to_string()
            };
            out.push(cluster.finding(message));
            continue;
        }
        // An object with problems of its own is reported already; rendering without it would
        // only add a confusing second message.
        if !cluster.clean || children.iter().any(|c| !c.clean) {
            continue;
        }
        // Applied in order, a later object of the same kind and name replaces the earlier.
        let mut latest: BTreeMap<(&str, &str), &Checked<'_>> = BTreeMap::new();
        for child in &children {
            latest.insert((&child.subject.kind, &child.subject.name), child);
        }
        let mut set = Objects::default();
        let mut decoded = true;
        for object in std::iter::once(cluster).chain(latest.into_values()) {
            let mut value: Value = object.manifest.value.clone();
            if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("namespace")
                    .or_insert_with(|| Value::String(object.namespace().to_string()));
            }
            decoded &= set.add(value).is_ok();
        }
        let ([typed], true) = (set.clusters.as_slice(), decoded) else {
            continue;
        };
        if let Err(error) = render(typed, &set.control_planes, &set.workers, &set.machines) {
            out.push(cluster.finding(error.to_string()));
        }
    }
}
