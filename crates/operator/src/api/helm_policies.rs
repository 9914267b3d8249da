//! What an OmniHelmRelease adds to install-and-keep-it at the depth Flux users expect of a
//! HelmRelease: ordering between releases (`dependsOn`), a gate on the OmniCluster's health in
//! Omni (`clusterHealth`), remediation of failed installs and upgrades with a retry budget
//! (`install`, `upgrade`), live-object drift detection (`driftDetection`) and `helm test`
//! (`test`), and the status they report (history, test hooks, drifted objects).
//!
//! Every field is optional and plain data: an object without them behaves as before, and the
//! spec stays a serialisable value a set of releases can use as its template.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::common::{LocalObjectReference, date_time_schema, is_blank};
use super::duration::DurationField;
use super::validation::{FieldError, Validation};

/// What state of the OmniCluster installs and upgrades wait for (`spec.clusterHealth`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterHealthGate {
    /// `Ready` (the default): Omni reports the cluster running, no Talos or Kubernetes upgrade
    /// in flight, every machine set ready with all its machines healthy, no failed health
    /// check, and the OmniCluster is `Ready`. `Running`: Omni reports the cluster running and no
    /// upgrade in flight. `None`: no gate.
    #[serde(default)]
    #[schemars(schema_with = "health_requirement_schema")]
    pub require: ClusterHealthRequirement,
}

fn health_requirement_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Ready", "Running", "None"] })
}

/// The level of [`ClusterHealthGate::require`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClusterHealthRequirement {
    /// Running, machines ready, health checks not failing, OmniCluster `Ready`.
    #[default]
    Ready,
    /// Running and not being upgraded.
    Running,
    /// No gate.
    None,
}

/// How a failed install is handled (`spec.install`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct InstallPolicy {
    /// Retries of a failed install, each after uninstalling the failed one. Without it a
    /// failed install is retried with backoff, without limit and without remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<InstallRemediation>,
}

/// The retry budget of installs (Flux's `install.remediation`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallRemediation {
    /// Retries after the first failed install; a negative number retries without limit.
    /// Once they are spent the release stops at `RetriesExhausted`.
    #[serde(default)]
    pub retries: i64,
    /// Also uninstall the failed install that spent the last retry. Defaults to `true` when
    /// `retries` is above 0, else `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,
}

/// How a failed upgrade is handled (`spec.upgrade`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct UpgradePolicy {
    /// Retries of a failed upgrade, each after rolling it back (or uninstalling the release).
    /// Without it a failed upgrade is retried with backoff, without limit and without
    /// remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<UpgradeRemediation>,
}

/// The retry budget of upgrades (Flux's `upgrade.remediation`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRemediation {
    /// Retries after the first failed upgrade; a negative number retries without limit. Once
    /// they are spent the release stops at `RetriesExhausted`.
    #[serde(default)]
    pub retries: i64,
    /// Also remediate the failed upgrade that spent the last retry. Defaults to `true` when
    /// `retries` is above 0, else `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,
    /// `Rollback` (the default) returns to the last deployed revision; `Uninstall` removes the
    /// release, so the next attempt installs it afresh.
    #[serde(default)]
    #[schemars(schema_with = "strategy_schema")]
    pub strategy: RemediationStrategy,
}

fn strategy_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Rollback", "Uninstall"] })
}

/// What remediates a failed upgrade.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemediationStrategy {
    /// `helm rollback` to the last deployed revision.
    #[default]
    Rollback,
    /// `helm uninstall`.
    Uninstall,
}

/// Whether an unset `remediateLastFailure` remediates: Flux's default, yes when retries are
/// configured.
pub(crate) fn remediates_last_failure(explicit: Option<bool>, retries: i64) -> bool {
    explicit.unwrap_or(retries > 0)
}

/// Live-object drift detection (`spec.driftDetection`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DriftDetection {
    /// `Disabled` (the default): only Helm's own records are compared. `Warn`: the objects of
    /// the release are compared with the live ones at each drift check and differences are
    /// reported (`Drifted=True`, an Event). `Enabled`: differences are also put back.
    #[serde(default)]
    #[schemars(schema_with = "drift_mode_schema")]
    pub mode: DriftMode,
    /// Fields left out of the comparison (and so never corrected).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<DriftIgnoreRule>,
}

fn drift_mode_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Disabled", "Warn", "Enabled"] })
}

/// The mode of [`DriftDetection`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriftMode {
    /// No comparison of live objects.
    #[default]
    Disabled,
    /// Report drift, change nothing.
    Warn,
    /// Report and correct drift.
    Enabled,
}

/// Fields the drift detection ignores, on all of the release's objects or on those `target`
/// selects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DriftIgnoreRule {
    /// JSON pointers (RFC 6901) of the ignored fields, e.g. `/spec/replicas`.
    #[schemars(length(min = 1))]
    pub paths: Vec<String>,
    /// The objects the rule applies to; every object of the release when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DriftTarget>,
}

/// Which objects of the release an ignore rule applies to; every given field must match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftTarget {
    /// Kind, e.g. `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Label selector in `kubectl` syntax (`app=web,tier!=db,env in (a,b),!legacy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// `helm test` after each install or upgrade (`spec.test`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmTest {
    /// Run the chart's test hooks after each install or upgrade.
    #[serde(default)]
    pub enable: bool,
    /// Time limit of `helm test`, in Go duration syntax; `spec.timeout` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationField>,
    /// A failing test is reported (`TestSuccess=False`) but does not count as a failed install
    /// or upgrade.
    #[serde(default)]
    pub ignore_failures: bool,
}

/// One Helm revision this object made, newest first in `status.history`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseHistoryEntry {
    /// Helm's revision number.
    pub revision: i64,
    /// Chart version of the revision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_version: String,
    /// Helm's status of the revision as last seen (`deployed`, `superseded`, `failed`, …).
    pub status: String,
    /// Digest of the inputs it applied (`status.lastAppliedDigest` when it succeeded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// When Helm deployed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub deployed: Option<jiff::Timestamp>,
    /// Result of `helm test` on it (`Succeeded` or `Failed`), when tests ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_result: Option<String>,
}

/// One test hook of the last `helm test` run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TestHookStatus {
    /// The hook's name (its Pod or Job).
    pub name: String,
    /// Helm's phase of its last run (`Succeeded`, `Failed`, `Running`, `Unknown`).
    pub phase: String,
}

/// A live object of the release that differs from the release's manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftedObject {
    /// API version, e.g. `apps/v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The object no longer exists.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// JSON pointers of the differing fields (at most ten; never their values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// Admission rules of the fields in this module, on the spec of `release` (its own name).
pub(crate) fn rules(
    release: &str,
    spec: &super::helm_release::OmniHelmReleaseSpec,
    v: &mut Validation,
) {
    dependency_rules(release, &spec.depends_on, v);
    if let Some(drift) = &spec.drift_detection {
        drift_rules(drift, v);
    }
    if let Some(test) = &spec.test
        && let Some(timeout) = &test.timeout
    {
        match timeout.duration() {
            Ok(t) if !t.is_positive() => v.push(FieldError::invalid(
                "spec.test.timeout",
                timeout.as_str(),
                "test.timeout must be greater than zero",
            )),
            Ok(_) => {}
            Err(_) => v.push(super::cluster::duration_error(
                "spec.test.timeout",
                "test.timeout",
                timeout,
            )),
        }
    }
}

/// Names are required, distinct and not the release's own.
fn dependency_rules(release: &str, depends_on: &[LocalObjectReference], v: &mut Validation) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, dependency) in depends_on.iter().enumerate() {
        let path = format!("spec.dependsOn[{i}].name");
        if is_blank(&dependency.name) {
            v.push(FieldError::required(path, "dependsOn[].name is required"));
        } else if dependency.name == release {
            v.push(FieldError::invalid(
                path,
                &dependency.name,
                "a release cannot depend on itself",
            ));
        } else if !seen.insert(dependency.name.as_str()) {
            v.push(FieldError::duplicate(path, &dependency.name));
        }
    }
}

/// Ignore rules name fields by JSON pointer and objects by a selector that parses.
fn drift_rules(drift: &DriftDetection, v: &mut Validation) {
    for (i, rule) in drift.ignore.iter().enumerate() {
        if rule.paths.is_empty() {
            v.push(FieldError::required(
                format!("spec.driftDetection.ignore[{i}].paths"),
                "an ignore rule needs at least one path",
            ));
        }
        for (j, path) in rule.paths.iter().enumerate() {
            if !is_json_pointer(path) {
                v.push(FieldError::invalid(
                    format!("spec.driftDetection.ignore[{i}].paths[{j}]"),
                    path,
                    "must be a JSON pointer: empty, or starting with \"/\" (e.g. /spec/replicas)",
                ));
            }
        }
        let selector = rule.target.as_ref().and_then(|t| t.label_selector.as_ref());
        if let Some(selector) = selector
            && let Err(e) = super::label_selector::LabelSelector::parse(selector)
        {
            v.push(FieldError::invalid(
                format!("spec.driftDetection.ignore[{i}].target.labelSelector"),
                selector,
                e,
            ));
        }
    }
}

/// The dependency cycle through `start`, following `depends_on` (the names a release of the
/// namespace depends on; empty for one that does not exist): the names along it, ending where
/// it began (`["a", "b", "a"]`), or `None`. Cycles that do not pass through `start` are the
/// business of the releases on them.
pub(crate) fn dependency_cycle(
    start: &str,
    depends_on: impl Fn(&str) -> Vec<String>,
) -> Option<Vec<String>> {
    let mut path = vec![start.to_string()];
    let mut visited = std::collections::BTreeSet::new();
    fn walk(
        path: &mut Vec<String>,
        visited: &mut std::collections::BTreeSet<String>,
        depends_on: &dyn Fn(&str) -> Vec<String>,
    ) -> bool {
        let current = path.last().cloned().unwrap_or_default();
        for next in depends_on(&current) {
            path.push(next.clone());
            if next == path[0] {
                return true;
            }
            if visited.insert(next) && walk(path, visited, depends_on) {
                return true;
            }
            path.pop();
        }
        false
    }
    walk(&mut path, &mut visited, &depends_on).then_some(path)
}

/// `a → b → a`: a cycle as messages name it.
pub(crate) fn cycle_text(cycle: &[String]) -> String {
    cycle.join(" → ")
}

/// Whether `path` is a JSON pointer (RFC 6901): empty, or `/`-separated tokens whose `~` is
/// always followed by `0` or `1`.
pub(crate) fn is_json_pointer(path: &str) -> bool {
    if path.is_empty() {
        return true;
    }
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    rest.split('/').all(|token| {
        let mut chars = token.chars();
        while let Some(c) = chars.next() {
            if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                return false;
            }
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_pointers() {
        for good in [
            "",
            "/",
            "/spec/replicas",
            "/metadata/labels/a~1b",
            "/data/x~0y",
        ] {
            assert!(is_json_pointer(good), "{good}");
        }
        for bad in ["spec/replicas", ".spec.replicas", "/a~2", "/a~"] {
            assert!(!is_json_pointer(bad), "{bad}");
        }
    }

    #[test]
    fn an_ignore_rule_selector_no_object_could_match_is_refused_naming_its_field() {
        let rule = |selector: &str| DriftIgnoreRule {
            paths: vec!["/spec/replicas".into()],
            target: Some(DriftTarget {
                label_selector: Some(selector.into()),
                ..Default::default()
            }),
        };
        let drift = DriftDetection {
            mode: DriftMode::Warn,
            ignore: vec![
                rule("app.kubernetes.io/name=web"),
                rule("tier=front,-app=web"),
            ],
        };
        let mut v = Validation::new();
        drift_rules(&drift, &mut v);
        let summary = v.error_summary();
        assert_eq!(v.errors.len(), 1, "{summary}");
        assert!(
            summary.contains("spec.driftDetection.ignore[1].target.labelSelector")
                && summary.contains("\"-app=web\""),
            "{summary}"
        );
    }

    #[test]
    fn a_cycle_through_the_release_is_found_and_named() {
        let graph = |edges: &'static [(&'static str, &'static [&'static str])]| {
            move |name: &str| -> Vec<String> {
                edges
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, d)| d.iter().map(|s| s.to_string()).collect())
                    .unwrap_or_default()
            }
        };
        let cycle = graph(&[("a", &["x", "b"]), ("b", &["c"]), ("c", &["a"]), ("x", &[])]);
        assert_eq!(
            dependency_cycle("a", cycle).map(|c| cycle_text(&c)),
            Some("a → b → c → a".to_string())
        );
        let chain = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &[])]);
        assert_eq!(dependency_cycle("a", chain), None);
        // b and c loop, but not through a: that is theirs to report.
        let elsewhere = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]);
        assert_eq!(dependency_cycle("a", elsewhere), None);
        let missing = graph(&[("a", &["ghost"])]);
        assert_eq!(dependency_cycle("a", missing), None);
    }

    #[test]
    fn the_last_failure_is_remediated_by_default_only_with_retries() {
        assert!(!remediates_last_failure(None, 0));
        assert!(remediates_last_failure(None, 1));
        assert!(!remediates_last_failure(None, -1));
        assert!(!remediates_last_failure(Some(false), 3));
        assert!(remediates_last_failure(Some(true), 0));
    }
}
