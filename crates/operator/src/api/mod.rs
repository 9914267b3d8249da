//! Custom resource types of `omni.texashpc.com/v1alpha1` and their validation.
//!
//! One module per kind holds its types (spec, status, CRD metadata through `kube::CustomResource`)
//! and a pure `validate(new, old)` implementing the admission rules; the webhook, the controllers
//! and `omni-operator validate` all call those. This module ties them together: constants,
//! dynamic validation by kind name, and CRD generation.

pub mod cluster;
pub mod common;
pub mod connection;
pub mod control_plane;
pub mod duration;
pub mod export_registration;
pub mod fleet;
pub mod helm_policies;
pub mod helm_release;
pub mod helm_release_set;
pub mod keys;
pub mod kubeconfig_export;
pub mod kubeconfig_export_set;
pub mod label_selector;
pub mod machine;
pub mod plan;
pub mod reason;
pub mod schema_check;
pub mod secret_sync;
pub mod secret_sync_set;
pub mod validation;
pub mod workers;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;
use serde::de::DeserializeOwned;

pub use cluster::OmniCluster;
pub use connection::OmniConnection;
pub use control_plane::OmniControlPlane;
pub use helm_release::OmniHelmRelease;
pub use helm_release_set::OmniHelmReleaseSet;
pub use kubeconfig_export::OmniKubeconfigExport;
pub use kubeconfig_export_set::OmniKubeconfigExportSet;
pub use machine::OmniMachine;
pub use secret_sync::OmniSecretSync;
pub use secret_sync_set::OmniSecretSyncSet;
pub use workers::OmniWorkers;

pub use reason::Reason;
pub use validation::{FieldErrorKind, Validation};

/// API group of every kind.
pub const GROUP: &str = "omni.texashpc.com";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";
/// The eleven kinds, in dependency order (connection first, consumers last, the fleet sets that
/// generate consumers after them).
pub const KINDS: [&str; 11] = [
    "OmniConnection",
    "OmniCluster",
    "OmniControlPlane",
    "OmniWorkers",
    "OmniMachine",
    "OmniKubeconfigExport",
    "OmniHelmRelease",
    "OmniSecretSync",
    "OmniKubeconfigExportSet",
    "OmniHelmReleaseSet",
    "OmniSecretSyncSet",
];

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

/// Decodes `value` as `T`; the error names the field it is about (`spec.deletionPolicy: unknown
/// variant ...`), which serde's own message does not. The path is worked out only for a value
/// that fails, so a decode that succeeds costs what it always did.
pub(crate) fn decode<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, String> {
    T::deserialize(value).map_err(
        |plain| match serde_path_to_error::deserialize::<_, T>(value) {
            Err(e) if e.path().iter().next().is_some() => format!("{}: {}", e.path(), e.inner()),
            _ => plain.to_string(),
        },
    )
}

/// Decodes `new` (and `old` on update), both full objects as JSON, as `kind` and runs that
/// kind's validation.
pub fn validate_dynamic(
    kind: &str,
    new: &serde_json::Value,
    old: Option<&serde_json::Value>,
) -> Result<Validation, ValidateError> {
    fn run<T: DeserializeOwned>(
        kind: &str,
        new: &serde_json::Value,
        old: Option<&serde_json::Value>,
        validate: fn(&T, Option<&T>) -> Validation,
    ) -> Result<Validation, ValidateError> {
        let decode = |value: &serde_json::Value| {
            decode::<T>(value).map_err(|message| ValidateError::Decode {
                kind: kind.to_string(),
                message,
            })
        };
        let new = decode(new)?;
        let old = old.map(decode).transpose()?;
        Ok(validate(&new, old.as_ref()))
    }
    match kind {
        "OmniConnection" => run(kind, new, old, connection::validate),
        "OmniCluster" => run(kind, new, old, cluster::validate),
        "OmniControlPlane" => run(kind, new, old, control_plane::validate),
        "OmniWorkers" => run(kind, new, old, workers::validate),
        "OmniMachine" => run(kind, new, old, machine::validate),
        "OmniKubeconfigExport" => run(kind, new, old, kubeconfig_export::validate),
        "OmniHelmRelease" => run(kind, new, old, helm_release::validate),
        "OmniSecretSync" => run(kind, new, old, secret_sync::validate),
        "OmniKubeconfigExportSet" => run(kind, new, old, kubeconfig_export_set::validate),
        "OmniHelmReleaseSet" => run(kind, new, old, helm_release_set::validate),
        "OmniSecretSyncSet" => run(kind, new, old, secret_sync_set::validate),
        other => Err(ValidateError::UnknownKind(other.to_string())),
    }
}

/// Every CustomResourceDefinition, in [`KINDS`] order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        OmniConnection::crd(),
        OmniCluster::crd(),
        OmniControlPlane::crd(),
        OmniWorkers::crd(),
        OmniMachine::crd(),
        OmniKubeconfigExport::crd(),
        OmniHelmRelease::crd(),
        OmniSecretSync::crd(),
        OmniKubeconfigExportSet::crd(),
        OmniHelmReleaseSet::crd(),
        OmniSecretSyncSet::crd(),
    ];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                // The root title is only the Rust type name; it adds nothing to `kubectl explain`.
                schema.title = None;
                tidy_schema(schema);
            }
        }
    }
    crds
}

/// Normalises a derived schema the way controller-gen output looks: no `nullable` (optional
/// fields are simply omitted, and nullable would make the API server keep explicit nulls),
/// and doc-comment line wrapping undone so descriptions read as paragraphs.
fn tidy_schema(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    if let Some(description) = schema.description.as_mut() {
        *description = unwrap_paragraphs(description);
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        tidy_schema(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => tidy_schema(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(tidy_schema),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        tidy_schema(extra);
    }
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of]
        .into_iter()
        .flatten()
    {
        list.iter_mut().for_each(tidy_schema);
    }
}

/// Joins lines within a paragraph with spaces, keeping blank-line paragraph breaks.
fn unwrap_paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(|para| para.lines().map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Why CRD YAML could not be produced.
#[derive(Debug, thiserror::Error)]
#[error("serialize CustomResourceDefinition {name} as YAML: {message}")]
pub struct CrdYamlError {
    /// CRD name.
    pub name: String,
    /// Serializer message.
    pub message: String,
}

/// One CRD as a YAML document (what each chart file contains).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdYamlError> {
    serde_saphyr::to_string(crd).map_err(|e| CrdYamlError {
        name: crd.metadata.name.clone().unwrap_or_default(),
        message: e.to_string(),
    })
}

/// The exact text `omni-operator crds` prints: YAML documents separated by `---\n`.
///
/// Serialising plain data structures cannot fail in practice; should it ever, the error text
/// is emitted as a YAML comment so the output is visibly broken rather than silently short.
pub fn crds_yaml() -> String {
    try_crds_yaml().unwrap_or_else(|e| format!("# {e}\n"))
}

/// [`crds_yaml`] with the serialisation error surfaced.
pub(crate) fn try_crds_yaml() -> Result<String, CrdYamlError> {
    let docs = crds().iter().map(crd_yaml).collect::<Result<Vec<_>, _>>()?;
    Ok(docs.join("---\n"))
}

/// File name of a CRD in `charts/.../crds/`: `omni.texashpc.com_<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{GROUP}_{}.yaml", crd.spec.names.plural)
}
