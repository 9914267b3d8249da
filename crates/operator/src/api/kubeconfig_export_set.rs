//! OmniKubeconfigExportSet: An OmniKubeconfigExport for every OmniCluster of this namespace whose labels match, generated from one template: registers each cluster where fleet tools look.

use super::fleet::{TemplateSpec, set_kind, validate_set};
use super::kubeconfig_export::{OmniKubeconfigExport, OmniKubeconfigExportSpec};
use super::validation::FieldError;
use super::validation::Validation;
use crate::domain::fleet_template::is_template;

set_kind!(OmniKubeconfigExportSetSpec: kind "OmniKubeconfigExportSet", plural "omnikubeconfigexportsets", singular "omnikubeconfigexportset", short "okxs",
    doc "An OmniKubeconfigExport for every OmniCluster of this namespace whose labels match, generated from one template: registers each cluster where fleet tools look.", template OmniKubeconfigExportSpec);

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
    let member = |spec| {
        super::kubeconfig_export::validate(&OmniKubeconfigExport::new("placeholder", spec), None)
    };
    let mut v = validate_set(&s.cluster_selector, None, &s.rollout, &s.template, member);
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
    v
}
