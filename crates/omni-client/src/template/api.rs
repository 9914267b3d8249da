//! Omni's backend API version: which one a server speaks and what changes with it.
//!
//! Omni publishes the version in `SysVersions.system.sidero.dev/current` (namespace
//! `ephemeral`, field `backend_api_version`). Up to v1.10 it is 2; Omni's main branch moved to
//! 3, where config patches may no longer set `machine.install.disk` and the install disk is a
//! `MachineInstallDiskConfig` resource instead. Omni's own CLI refuses to talk across a
//! mismatch; templates can be translated for either version, so we support both.

use prost::Message as _;

use crate::Client;
use crate::proto::specs::SysVersionSpec;
use crate::state::StateError;

/// Namespace of the SysVersions resource.
pub const EPHEMERAL_NAMESPACE: &str = "ephemeral";
/// COSI type of Omni's version resource.
pub const SYS_VERSION_TYPE: &str = "SysVersions.system.sidero.dev";
/// ID of the single SysVersions resource.
pub const SYS_VERSION_ID: &str = "current";
/// The backend API versions templates can be translated for.
pub const SUPPORTED_BACKEND_API_VERSIONS: [u32; 2] = [2, 3];

/// A backend API version this client can translate templates for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendApi {
    /// Omni up to v1.10: the install disk is a config patch.
    #[default]
    V2,
    /// Omni's main branch: the install disk is a `MachineInstallDiskConfig` resource.
    V3,
}

impl BackendApi {
    /// The API for a reported version; `None` for versions we cannot speak (0 = the backend
    /// predates API versions).
    pub fn from_version(version: u32) -> Option<Self> {
        match version {
            2 => Some(BackendApi::V2),
            3 => Some(BackendApi::V3),
            _ => None,
        }
    }

    /// The version number.
    pub fn version(self) -> u32 {
        match self {
            BackendApi::V2 => 2,
            BackendApi::V3 => 3,
        }
    }

    /// Whether the install disk is a resource of its own (and refused in config patches).
    pub(crate) fn install_disk_is_resource(self) -> bool {
        self == BackendApi::V3
    }
}

/// Why the backend API version could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ApiVersionError {
    /// The read failed.
    #[error("read {SYS_VERSION_TYPE}({EPHEMERAL_NAMESPACE}/{SYS_VERSION_ID}): {0}")]
    Read(#[from] StateError),
    /// The stored spec is not a SysVersionSpec.
    #[error("decode {SYS_VERSION_TYPE} spec: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// Reads the version the backend reports; 0 when it reports none (the resource or the field
/// is missing, as on backends older than API versions).
pub async fn read_backend_api_version(client: &Client) -> Result<u32, ApiVersionError> {
    let found = client
        .state()
        .get_optional(EPHEMERAL_NAMESPACE, SYS_VERSION_TYPE, SYS_VERSION_ID)
        .await?;
    let Some(resource) = found else { return Ok(0) };
    let bytes = resource.spec.map(|s| s.proto_spec).unwrap_or_default();
    Ok(SysVersionSpec::decode(bytes.as_slice())?.backend_api_version)
}

/// The message for a version outside [`SUPPORTED_BACKEND_API_VERSIONS`].
pub fn unsupported_message(version: u32) -> String {
    let supported = SUPPORTED_BACKEND_API_VERSIONS
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" and ");
    if version == 0 {
        format!(
            "Omni does not report a backend API version (it predates API versions); supported backend API versions: {supported}"
        )
    } else {
        format!(
            "Omni backend API version {version} is not supported; supported backend API versions: {supported}"
        )
    }
}
