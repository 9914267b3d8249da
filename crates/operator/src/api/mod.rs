//! Custom resource types of `omni.texashpc.com/v1alpha1` and their validation.
//!
//! The shared interface the webhook, the controllers, the chart drift test and the CLI use.
//! (Kinds are being added; `validate_dynamic` and `crds` cover every kind once they land.)

pub mod duration;
pub mod validation;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use validation::{FieldError, FieldErrorKind, Validation};

/// API group of every kind.
pub const GROUP: &str = "omni.texashpc.com";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";
/// The eight kinds, in dependency order (connection first, consumers last).
pub const KINDS: [&str; 8] = [
    "OmniConnection",
    "OmniCluster",
    "OmniControlPlane",
    "OmniWorkers",
    "OmniMachine",
    "OmniKubeconfigExport",
    "OmniHelmRelease",
    "OmniSecretSync",
];
/// Finalizer the operator puts on kinds that own remote or external state.
pub const FINALIZER: &str = "omni.texashpc.com/finalizer";
/// Finalizer from before the API group rename; still honoured on OmniConnection and OmniCluster.
pub const LEGACY_FINALIZER: &str = "omni.texas-hpc.org/finalizer";

/// Why an object could not be validated at all.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// The kind is not one of [`KINDS`].
    #[error("unknown kind {0:?} in group {GROUP}")]
    UnknownKind(String),
    /// The object does not decode as its kind (wrong types, missing required fields).
    #[error("cannot decode {kind}: {message}")]
    Decode {
        /// The kind it was decoded as.
        kind: String,
        /// The decoder's explanation.
        message: String,
    },
}

/// Decodes `new` (and `old` on update), both full objects as JSON, as `kind` and runs that
/// kind's validation.
pub fn validate_dynamic(
    kind: &str,
    _new: &serde_json::Value,
    _old: Option<&serde_json::Value>,
) -> Result<Validation, ValidateError> {
    Err(ValidateError::UnknownKind(kind.to_string()))
}

/// Every CustomResourceDefinition, in [`KINDS`] order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    Vec::new()
}

/// The exact text `omni-operator crds` prints: YAML documents separated by `---\n`.
pub fn crds_yaml() -> String {
    String::new()
}

/// File name of a CRD in `charts/.../crds/`: `omni.texashpc.com_<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{GROUP}_{}.yaml", crd.spec.names.plural)
}
