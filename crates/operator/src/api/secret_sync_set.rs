//! OmniSecretSyncSet: An OmniSecretSync for every OmniCluster of this namespace whose labels match, generated from one template.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fleet::{
    ClusterSelector, FleetSetStatus, MemberTemplate, Rollout, StopMatchingBehavior, TemplateSpec,
    validate_as_member, validate_common,
};
use super::fleet::{SetCredentials, validate_mint};
use super::secret_sync::{OmniSecretSync, OmniSecretSyncSpec};
use super::validation::Validation;

/// Desired state of an OmniSecretSyncSet.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniSecretSyncSet",
    plural = "omnisecretsyncsets",
    singular = "omnisecretsyncset",
    namespaced,
    status = "FleetSetStatus",
    shortname = "osss",
    category = "omni",
    doc = "An OmniSecretSync for every OmniCluster of this namespace whose labels match, generated from one template.",
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
pub struct OmniSecretSyncSetSpec {
    /// The OmniClusters of this namespace to serve, by label; an empty selector is refused.
    pub cluster_selector: ClusterSelector,
    /// The spec of every generated OmniSecretSync, its strings rendered per cluster
    /// (`{{ cluster.name }}`, `{{ cluster.labels.env }}`; docs/fleet.md). Leave out
    /// `clusterRef`, `kubeconfigSecretRef`: the set fills them in.
    pub template: MemberTemplate<OmniSecretSyncSpec>,
    /// The workload-cluster kubeconfig of each generated object: a Secret per cluster by a
    /// name pattern, or one the set mints.
    pub credentials: SetCredentials,
    /// What happens to the object of a cluster that stops matching: `Withdraw` (the default)
    /// deletes it, `Leave` orphans it.
    #[serde(default)]
    pub stop_matching_behavior: StopMatchingBehavior,
    /// How a template change reaches the generated objects (default: all at once).
    #[serde(default)]
    pub rollout: Rollout,
}

impl TemplateSpec for OmniSecretSyncSpec {
    const SET_BY_THE_SET: &'static [&'static str] = &["clusterRef", "kubeconfigSecretRef"];
}

/// Admission rules for OmniSecretSyncSet: the rules every set shares, and the OmniSecretSync
/// rules on what of the template is not templated.
pub fn validate(new: &OmniSecretSyncSet, _old: Option<&OmniSecretSyncSet>) -> Validation {
    let s = &new.spec;
    let mut v = validate_common(
        &s.cluster_selector,
        Some(&s.credentials),
        &s.rollout,
        &s.template,
    );
    if let Some(mint) = &s.credentials.mint {
        v.extend(validate_mint(mint));
    }
    v.extend(validate_as_member(&s.template, |spec| {
        super::secret_sync::validate(&OmniSecretSync::new("placeholder", spec), None)
    }));
    v
}
