//! Omni resource type names, label keys and roles (docs/omni-wire.md#resource-types,
//! docs/omni-wire.md#who-may-read-and-write-what).

use std::fmt;
use std::str::FromStr;

/// The namespace every template resource lives in.
pub const DEFAULT_NS: &str = "default";
/// The namespace of Omni's runtime-only resources (SysVersions).
pub const EPHEMERAL_NS: &str = "ephemeral";
/// ID of the single SysVersions resource.
pub const SYS_VERSION_ID: &str = "current";

/// COSI type strings.
#[allow(missing_docs)]
pub mod ty {
    pub const CLUSTER: &str = "Clusters.omni.sidero.dev";
    pub const CONFIG_PATCH: &str = "ConfigPatches.omni.sidero.dev";
    pub const MACHINE_SET: &str = "MachineSets.omni.sidero.dev";
    pub const MACHINE_SET_NODE: &str = "MachineSetNodes.omni.sidero.dev";
    pub const KERNEL_ARGS: &str = "KernelArgs.omni.sidero.dev";
    pub const EXTENSIONS_CONFIGURATION: &str = "ExtensionsConfigurations.omni.sidero.dev";
    pub const MANIFEST_GROUP: &str = "KubernetesManifestGroups.omni.sidero.dev";
    pub const HEALTH_CHECK: &str = "KubernetesHealthChecks.omni.sidero.dev";
    pub const HEALTH_CHECK_STATUS: &str = "KubernetesHealthCheckStatuses.omni.sidero.dev";
    pub const MACHINE_CLASS: &str = "MachineClasses.omni.sidero.dev";
    pub const LINK: &str = "Links.omni.sidero.dev";
    pub const MACHINE_STATUS: &str = "MachineStatuses.omni.sidero.dev";
    pub const CLUSTER_STATUS: &str = "ClusterStatuses.omni.sidero.dev";
    pub const MANIFESTS_STATUS: &str = "ClusterKubernetesManifestsStatuses.omni.sidero.dev";
    pub const MACHINE_SET_STATUS: &str = "MachineSetStatuses.omni.sidero.dev";
    pub const CONTROL_PLANE_STATUS: &str = "ControlPlaneStatuses.omni.sidero.dev";
    pub const LOAD_BALANCER_STATUS: &str = "LoadBalancerStatuses.omni.sidero.dev";
    pub const KUBERNETES_UPGRADE_STATUS: &str = "KubernetesUpgradeStatuses.omni.sidero.dev";
    pub const TALOS_UPGRADE_STATUS: &str = "TalosUpgradeStatuses.omni.sidero.dev";
    pub const CLUSTER_MACHINE_STATUS: &str = "ClusterMachineStatuses.omni.sidero.dev";
    pub const CLUSTER_UUID: &str = "ClusterUUIDs.omni.sidero.dev";
    pub const CLUSTER_CONFIG_VERSION: &str = "ClusterConfigVersions.omni.sidero.dev";
    pub const TALOS_VERSION: &str = "TalosVersions.omni.sidero.dev";
    pub const KUBERNETES_VERSION: &str = "KubernetesVersions.omni.sidero.dev";
    pub const NAMESPACE: &str = "Namespaces.meta.cosi.dev";
    pub const RESOURCE_DEFINITION: &str = "ResourceDefinitions.meta.cosi.dev";
    pub const PUBLIC_KEY: &str = "PublicKeys.omni.sidero.dev";
    pub const USER: &str = "Users.omni.sidero.dev";
    pub const IDENTITY: &str = "Identities.omni.sidero.dev";
    pub const SYS_VERSION: &str = "SysVersions.system.sidero.dev";
    /// Namespace `ephemeral`; omni-sim publishes none, but omnictl lists them before every
    /// command on servers from 1.6 on.
    pub const NOTIFICATION: &str = "Notifications.omni.sidero.dev";
    pub const MACHINE_INSTALL_DISK_CONFIG: &str = "MachineInstallDiskConfigs.omni.sidero.dev";
}

/// Label and annotation keys.
#[allow(missing_docs)]
pub mod label {
    pub const CLUSTER: &str = "omni.sidero.dev/cluster";
    pub const ROLE_CONTROLPLANE: &str = "omni.sidero.dev/role-controlplane";
    pub const ROLE_WORKER: &str = "omni.sidero.dev/role-worker";
    pub const MACHINE_SET: &str = "omni.sidero.dev/machine-set";
    pub const CLUSTER_MACHINE: &str = "omni.sidero.dev/cluster-machine";
    pub const MACHINE: &str = "omni.sidero.dev/machine";
    pub const SYSTEM_MANIFEST: &str = "omni.sidero.dev/system-manifest";
    pub const MANAGED_BY_MSN_CONTROLLER: &str =
        "omni.sidero.dev/managed-by-machine-set-node-controller";
    pub const DISCONNECTED: &str = "omni.sidero.dev/disconnected";
    pub const LOCKED: &str = "omni.sidero.dev/locked";
    pub const CLUSTER_LOCKED: &str = "omni.sidero.dev/cluster-locked";
    pub const USER_ID: &str = "user-id";
    pub const MANAGED_BY_TEMPLATES: &str = "omni.sidero.dev/managed-by-cluster-templates";
}

/// Access levels, ordered from least to most privileged (docs/omni-wire.md#what-the-server-checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// No access besides public and version resources.
    None,
    /// Infrastructure providers.
    InfraProvider,
    /// Read-only access.
    Reader,
    /// Read and write access to cluster resources.
    Operator,
    /// Everything, including account management.
    Admin,
}

impl Role {
    /// The name Omni uses in messages and in `PublicKeySpec.role`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::None => "None",
            Role::InfraProvider => "InfraProvider",
            Role::Reader => "Reader",
            Role::Operator => "Operator",
            Role::Admin => "Admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown role name.
#[derive(Debug, thiserror::Error)]
#[error("unknown role {0:?}")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "None" | "" => Ok(Role::None),
            "InfraProvider" => Ok(Role::InfraProvider),
            "Reader" => Ok(Role::Reader),
            "Operator" => Ok(Role::Operator),
            "Admin" => Ok(Role::Admin),
            other => Err(UnknownRole(other.to_string())),
        }
    }
}
