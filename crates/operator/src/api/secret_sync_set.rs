//! OmniSecretSyncSet: An OmniSecretSync for every OmniCluster of this namespace whose labels match, generated from one template.

use super::fleet::{TemplateSpec, set_kind, validate_set};
use super::secret_sync::{OmniSecretSync, OmniSecretSyncSpec};
use super::validation::Validation;

set_kind!(OmniSecretSyncSetSpec: kind "OmniSecretSyncSet", plural "omnisecretsyncsets", singular "omnisecretsyncset", short "osss",
    doc "An OmniSecretSync for every OmniCluster of this namespace whose labels match, generated from one template.", template OmniSecretSyncSpec, credentials credentials);

impl TemplateSpec for OmniSecretSyncSpec {
    const SET_BY_THE_SET: &'static [&'static str] = &["clusterRef", "kubeconfigSecretRef"];
    /// A data template reads the sources' values, which only the generated sync reads; it
    /// sees the same `cluster` facts there (docs/fleet.md).
    const MEMBER_RENDERS: &'static [&'static str] = &["data[*].template"];
}

/// Admission rules for OmniSecretSyncSet: the rules every set shares, and the OmniSecretSync
/// rules on what of the template is not templated.
pub fn validate(new: &OmniSecretSyncSet, _old: Option<&OmniSecretSyncSet>) -> Validation {
    let s = &new.spec;
    let member =
        |spec| super::secret_sync::validate(&OmniSecretSync::new("placeholder", spec), None);
    validate_set(
        &s.cluster_selector,
        Some(&s.credentials),
        &s.rollout,
        &s.template,
        member,
    )
}
