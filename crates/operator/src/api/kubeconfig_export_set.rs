//! OmniKubeconfigExportSet: An OmniKubeconfigExport for every OmniCluster of this namespace whose labels match, generated from one template: registers each cluster where fleet tools look.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fleet::{
    ClusterSelector, FleetSetStatus, MemberTemplate, Rollout, StopMatchingBehavior, TemplateSpec,
    validate_as_member, validate_common,
};
use super::kubeconfig_export::{OmniKubeconfigExport, OmniKubeconfigExportSpec};
use super::validation::FieldError;
use super::validation::Validation;
use crate::domain::fleet_template::is_template;

/// Desired state of an OmniKubeconfigExportSet.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniKubeconfigExportSet",
    plural = "omnikubeconfigexportsets",
    singular = "omnikubeconfigexportset",
    namespaced,
    status = "FleetSetStatus",
    shortname = "okxs",
    category = "omni",
    doc = "An OmniKubeconfigExport for every OmniCluster of this namespace whose labels match, generated from one template: registers each cluster where fleet tools look.",
    printcolumn(
        name = "Matched",
        type_ = "integer",
        json_path = ".status.matchedClusters"
    ),
    printcolumn(name = "Ready Objects", type_ = "integer", json_path = ".status.ready"),
    printcolumn(name = "Updated", type_ = "integer", json_path = ".status.updated"),
    printcolumn(name = "Failed", type_ = "integer", json_path = ".status.failed"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OmniKubeconfigExportSetSpec {
    /// The OmniClusters of this namespace to serve, by label; an empty selector is refused.
    pub cluster_selector: ClusterSelector,
    /// The spec of every generated OmniKubeconfigExport, its strings rendered per cluster
    /// (`{{ cluster.name }}`, `{{ cluster.labels.env }}`; docs/fleet.md). Leave out
    /// `clusterRef`: the set fills it in.
    pub template: MemberTemplate<OmniKubeconfigExportSpec>,
    /// What happens to the object of a cluster that stops matching: `Withdraw` (the default)
    /// deletes it, `Leave` orphans it.
    #[serde(default)]
    pub stop_matching_behavior: StopMatchingBehavior,
    /// How a template change reaches the generated objects (default: all at once).
    #[serde(default)]
    pub rollout: Rollout,
}

impl TemplateSpec for OmniKubeconfigExportSpec {
    const SET_BY_THE_SET: &'static [&'static str] = &["clusterRef"];
}

/// Admission rules for OmniKubeconfigExportSet: the rules every set shares, and the OmniKubeconfigExport
/// rules on what of the template is not templated.
pub fn validate(
    new: &OmniKubeconfigExportSet,
    _old: Option<&OmniKubeconfigExportSet>,
) -> Validation {
    let s = &new.spec;
    let mut v = validate_common(&s.cluster_selector, None, &s.rollout, &s.template);
    let target = &s.template.raw["targetSecretRef"]["name"];
    if let Some(name) = target.as_str()
        && !is_template(name)
    {
        v.push(FieldError::invalid(
            "spec.template.targetSecretRef.name",
            name,
            "must name a different Secret per cluster: use a template such as `{{ cluster.name }}-kubeconfig`",
        ));
    }
    v.extend(validate_as_member(&s.template, |spec| {
        super::kubeconfig_export::validate(&OmniKubeconfigExport::new("placeholder", spec), None)
    }));
    v
}
