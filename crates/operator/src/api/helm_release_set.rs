//! OmniHelmReleaseSet: An OmniHelmRelease for every OmniCluster of this namespace whose labels match, generated from one template.

use super::fleet::{TemplateSpec, set_kind, validate_set};
use super::helm_release::{OmniHelmRelease, OmniHelmReleaseSpec};
use super::validation::Validation;

set_kind!(OmniHelmReleaseSetSpec: kind "OmniHelmReleaseSet", plural "omnihelmreleasesets", singular "omnihelmreleaseset", short "ohrs",
    doc "An OmniHelmRelease for every OmniCluster of this namespace whose labels match, generated from one template.", template OmniHelmReleaseSpec, credentials credentials);

impl TemplateSpec for OmniHelmReleaseSpec {
    const SET_BY_THE_SET: &'static [&'static str] = &["clusterRef", "kubeconfigSecretRef"];
}

/// Admission rules for OmniHelmReleaseSet: the rules every set shares, and the OmniHelmRelease
/// rules on what of the template is not templated.
pub fn validate(new: &OmniHelmReleaseSet, _old: Option<&OmniHelmReleaseSet>) -> Validation {
    let s = &new.spec;
    let member =
        |spec| super::helm_release::validate(&OmniHelmRelease::new("placeholder", spec), None);
    validate_set(
        &s.cluster_selector,
        Some(&s.credentials),
        &s.rollout,
        &s.template,
        member,
    )
}
