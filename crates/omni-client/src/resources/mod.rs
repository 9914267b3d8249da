//! Typed Omni resources: COSI type strings, label and annotation keys, ID schemes, and a
//! [`TypedResource`] wrapper that encodes/decodes `Spec.proto_spec` with prost.

use std::collections::HashMap;

use prost::Message;

use crate::proto::cosi::resource::{Metadata, Resource, Spec};
use crate::proto::specs;
use crate::state::{PHASE_RUNNING, VERSION_UNDEFINED};

/// Namespace of every Omni resource this project touches.
pub const NAMESPACE: &str = "default";

/// `Clusters.omni.sidero.dev` (ID = cluster name).
pub const CLUSTER_TYPE: &str = "Clusters.omni.sidero.dev";
/// `ConfigPatches.omni.sidero.dev`.
pub const CONFIG_PATCH_TYPE: &str = "ConfigPatches.omni.sidero.dev";
/// `MachineSets.omni.sidero.dev`.
pub const MACHINE_SET_TYPE: &str = "MachineSets.omni.sidero.dev";
/// `MachineSetNodes.omni.sidero.dev` (ID = machine UUID).
pub const MACHINE_SET_NODE_TYPE: &str = "MachineSetNodes.omni.sidero.dev";
/// `KernelArgs.omni.sidero.dev` (ID = machine UUID).
pub const KERNEL_ARGS_TYPE: &str = "KernelArgs.omni.sidero.dev";
/// `ExtensionsConfigurations.omni.sidero.dev`.
pub const EXTENSIONS_CONFIGURATION_TYPE: &str = "ExtensionsConfigurations.omni.sidero.dev";
/// `KubernetesManifestGroups.omni.sidero.dev`.
pub const KUBERNETES_MANIFEST_GROUP_TYPE: &str = "KubernetesManifestGroups.omni.sidero.dev";
/// `KubernetesHealthChecks.omni.sidero.dev`.
pub const KUBERNETES_HEALTH_CHECK_TYPE: &str = "KubernetesHealthChecks.omni.sidero.dev";
/// `MachineClasses.omni.sidero.dev`.
pub const MACHINE_CLASS_TYPE: &str = "MachineClasses.omni.sidero.dev";
/// `Links.omni.sidero.dev` (SideroLink; ID = machine UUID).
pub const LINK_TYPE: &str = "Links.omni.sidero.dev";
/// `MachineStatuses.omni.sidero.dev`.
pub const MACHINE_STATUS_TYPE: &str = "MachineStatuses.omni.sidero.dev";
/// `ClusterStatuses.omni.sidero.dev` (ID = cluster name).
pub const CLUSTER_STATUS_TYPE: &str = "ClusterStatuses.omni.sidero.dev";
/// `MachineSetStatuses.omni.sidero.dev` (ID = machine set ID).
pub const MACHINE_SET_STATUS_TYPE: &str = "MachineSetStatuses.omni.sidero.dev";
/// `ControlPlaneStatuses.omni.sidero.dev`.
pub const CONTROL_PLANE_STATUS_TYPE: &str = "ControlPlaneStatuses.omni.sidero.dev";
/// `LoadBalancerStatuses.omni.sidero.dev`.
pub const LOAD_BALANCER_STATUS_TYPE: &str = "LoadBalancerStatuses.omni.sidero.dev";
/// `KubernetesUpgradeStatuses.omni.sidero.dev`.
pub const KUBERNETES_UPGRADE_STATUS_TYPE: &str = "KubernetesUpgradeStatuses.omni.sidero.dev";
/// `TalosUpgradeStatuses.omni.sidero.dev`.
pub const TALOS_UPGRADE_STATUS_TYPE: &str = "TalosUpgradeStatuses.omni.sidero.dev";
/// `ClusterMachineStatuses.omni.sidero.dev`.
pub const CLUSTER_MACHINE_STATUS_TYPE: &str = "ClusterMachineStatuses.omni.sidero.dev";
/// `ClusterUUIDs.omni.sidero.dev` (ID = cluster name).
pub const CLUSTER_UUID_TYPE: &str = "ClusterUUIDs.omni.sidero.dev";
/// `TalosVersions.omni.sidero.dev` (ID = version without `v`).
pub const TALOS_VERSION_TYPE: &str = "TalosVersions.omni.sidero.dev";
/// `PublicKeys.omni.sidero.dev` (ID = key fingerprint; server-side only).
pub const PUBLIC_KEY_TYPE: &str = "PublicKeys.omni.sidero.dev";

/// Label: the cluster a resource belongs to.
pub const LABEL_CLUSTER: &str = "omni.sidero.dev/cluster";
/// Label (key only): control-plane role.
pub const LABEL_ROLE_CONTROL_PLANE: &str = "omni.sidero.dev/role-controlplane";
/// Label (key only): worker role.
pub const LABEL_ROLE_WORKER: &str = "omni.sidero.dev/role-worker";
/// Label: the machine set a node belongs to.
pub const LABEL_MACHINE_SET: &str = "omni.sidero.dev/machine-set";
/// Label: the cluster machine a patch targets.
pub const LABEL_CLUSTER_MACHINE: &str = "omni.sidero.dev/cluster-machine";
/// Label: the machine a machine-scoped patch targets.
pub const LABEL_MACHINE: &str = "omni.sidero.dev/machine";
/// Label: system-generated patch.
pub const LABEL_SYSTEM_PATCH: &str = "omni.sidero.dev/system-patch";
/// Label: system manifest (forbidden for users).
pub const LABEL_SYSTEM_MANIFEST: &str = "omni.sidero.dev/system-manifest";
/// Label: created by the machine-set-node controller (not owned by templates).
pub const LABEL_MANAGED_BY_MACHINE_SET_NODE_CONTROLLER: &str =
    "omni.sidero.dev/managed-by-machine-set-node-controller";
/// Label on MachineStatus: the machine is disconnected.
pub const LABEL_DISCONNECTED: &str = "omni.sidero.dev/disconnected";
/// Annotation: managed by cluster templates.
pub const ANNOTATION_MANAGED_BY_TEMPLATES: &str = "omni.sidero.dev/managed-by-cluster-templates";
/// Annotation: machine locked.
pub const ANNOTATION_LOCKED: &str = "omni.sidero.dev/locked";
/// Annotation: cluster locked (refuses updates and deletes).
pub const ANNOTATION_CLUSTER_LOCKED: &str = "omni.sidero.dev/cluster-locked";
/// Annotation: user-facing patch / manifest name.
pub const ANNOTATION_NAME: &str = "name";
/// Prefix reserved for Omni's own labels and annotations.
pub const RESERVED_PREFIX: &str = "omni.sidero.dev/";

/// ID of a cluster's control-plane machine set.
pub fn control_plane_machine_set_id(cluster: &str) -> String {
    format!("{cluster}-control-planes")
}

/// ID of a cluster's workers machine set named `name`.
pub fn workers_machine_set_id(cluster: &str, name: &str) -> String {
    format!("{cluster}-{name}")
}

/// ID of a config patch: three-digit weight, scope prefix and name (`400-cluster-foo`).
pub fn config_patch_id(weight: u32, prefix: &str, name: &str) -> String {
    format!("{weight:03}-{prefix}-{name}")
}

/// ID of a cluster-level Kubernetes manifest group.
pub fn kubernetes_manifest_group_id(weight: u32, cluster: &str, name: &str) -> String {
    format!("{weight:03}-cluster-{cluster}-{name}")
}

/// ID of a cluster-level Kubernetes health check.
pub fn kubernetes_health_check_id(cluster: &str, name: &str) -> String {
    format!("cluster-{cluster}-{name}")
}

/// ID of an extensions configuration for a cluster, machine set or machine (`schematic-<x>`).
pub fn extensions_configuration_id(scope_id: &str) -> String {
    format!("schematic-{scope_id}")
}

/// A spec message stored in a resource of one COSI type.
pub trait ResourceSpec: Message + Default + Clone + PartialEq {
    /// The COSI type string.
    const TYPE: &'static str;
}

macro_rules! resource_spec {
    ($($spec:ty => $ty:expr),* $(,)?) => {
        $(impl ResourceSpec for $spec {
            const TYPE: &'static str = $ty;
        })*
    };
}

resource_spec! {
    specs::ClusterSpec => CLUSTER_TYPE,
    specs::ConfigPatchSpec => CONFIG_PATCH_TYPE,
    specs::MachineSetSpec => MACHINE_SET_TYPE,
    specs::MachineSetNodeSpec => MACHINE_SET_NODE_TYPE,
    specs::KernelArgsSpec => KERNEL_ARGS_TYPE,
    specs::ExtensionsConfigurationSpec => EXTENSIONS_CONFIGURATION_TYPE,
    specs::KubernetesManifestGroupSpec => KUBERNETES_MANIFEST_GROUP_TYPE,
    specs::KubernetesHealthCheckSpec => KUBERNETES_HEALTH_CHECK_TYPE,
    specs::MachineClassSpec => MACHINE_CLASS_TYPE,
    specs::MachineStatusSpec => MACHINE_STATUS_TYPE,
    specs::ClusterStatusSpec => CLUSTER_STATUS_TYPE,
    specs::MachineSetStatusSpec => MACHINE_SET_STATUS_TYPE,
    specs::ControlPlaneStatusSpec => CONTROL_PLANE_STATUS_TYPE,
    specs::LoadBalancerStatusSpec => LOAD_BALANCER_STATUS_TYPE,
    specs::KubernetesUpgradeStatusSpec => KUBERNETES_UPGRADE_STATUS_TYPE,
    specs::TalosUpgradeStatusSpec => TALOS_UPGRADE_STATUS_TYPE,
    specs::ClusterMachineStatusSpec => CLUSTER_MACHINE_STATUS_TYPE,
    specs::ClusterUuid => CLUSTER_UUID_TYPE,
    specs::TalosVersionSpec => TALOS_VERSION_TYPE,
    specs::PublicKeySpec => PUBLIC_KEY_TYPE,
}

/// Why a [`Resource`] could not be turned into a [`TypedResource`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// The resource has no metadata.
    #[error("resource has no metadata")]
    MissingMetadata,
    /// The resource's type is not the one expected.
    #[error("resource type {actual:?} is not {expected:?}")]
    WrongType {
        /// Expected COSI type.
        expected: &'static str,
        /// Actual COSI type.
        actual: String,
    },
    /// `proto_spec` does not decode as the spec message.
    #[error("spec of {resource_type}({id}) does not decode: {reason}")]
    BadSpec {
        /// COSI type.
        resource_type: String,
        /// Resource ID.
        id: String,
        /// Decoder message.
        reason: String,
    },
}

/// A resource with its spec decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedResource<S: ResourceSpec> {
    /// COSI metadata (version, phase, owner, labels, ...).
    pub metadata: Metadata,
    /// The decoded spec.
    pub spec: S,
}

impl<S: ResourceSpec> TypedResource<S> {
    /// A new resource to create: namespace `default`, version `undefined`, phase `running`.
    pub fn new(id: &str, spec: S) -> Self {
        Self {
            metadata: Metadata {
                namespace: NAMESPACE.to_owned(),
                r#type: S::TYPE.to_owned(),
                id: id.to_owned(),
                version: VERSION_UNDEFINED.to_owned(),
                phase: PHASE_RUNNING.to_owned(),
                ..Default::default()
            },
            spec,
        }
    }

    /// Adds a label (builder style).
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.metadata
            .labels
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Adds an annotation (builder style).
    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.metadata
            .annotations
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Resource ID.
    pub fn id(&self) -> &str {
        &self.metadata.id
    }

    /// Labels.
    pub fn labels(&self) -> &HashMap<String, String> {
        &self.metadata.labels
    }

    /// Decodes a wire resource, checking its type.
    pub fn from_resource(resource: Resource) -> Result<Self, ResourceError> {
        let metadata = resource.metadata.ok_or(ResourceError::MissingMetadata)?;
        if metadata.r#type != S::TYPE {
            return Err(ResourceError::WrongType {
                expected: S::TYPE,
                actual: metadata.r#type,
            });
        }
        let spec =
            decode_spec::<S>(resource.spec.as_ref()).map_err(|e| ResourceError::BadSpec {
                resource_type: metadata.r#type.clone(),
                id: metadata.id.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self { metadata, spec })
    }

    /// Encodes into a wire resource (spec always present, `yaml_spec` empty).
    pub fn into_resource(self) -> Resource {
        Resource {
            metadata: Some(self.metadata),
            spec: Some(encode_spec(&self.spec)),
        }
    }
}

/// Encodes a spec message into a COSI `Spec` (the server ignores `yaml_spec` on writes).
pub fn encode_spec<S: Message>(spec: &S) -> Spec {
    Spec {
        proto_spec: spec.encode_to_vec(),
        yaml_spec: String::new(),
    }
}

/// Decodes `proto_spec`; an absent spec decodes as the default message.
pub fn decode_spec<S: Message + Default>(spec: Option<&Spec>) -> Result<S, prost::DecodeError> {
    match spec {
        Some(spec) => S::decode(spec.proto_spec.as_slice()),
        None => Ok(S::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_resources_round_trip_through_the_wire_form() {
        let spec = specs::ClusterSpec {
            kubernetes_version: "1.32.3".into(),
            talos_version: "1.9.5".into(),
            features: Some(specs::cluster_spec::Features {
                disk_encryption: true,
                ..Default::default()
            }),
            backup_configuration: None,
        };
        let typed = TypedResource::new("demo", spec.clone())
            .with_annotation(ANNOTATION_MANAGED_BY_TEMPLATES, "");
        let wire = typed.clone().into_resource();
        let meta = wire.metadata.as_ref().unwrap();
        assert_eq!(meta.r#type, CLUSTER_TYPE);
        assert_eq!(meta.version, "undefined");
        assert_eq!(meta.phase, "running");
        assert_eq!(meta.namespace, "default");
        let back = TypedResource::<specs::ClusterSpec>::from_resource(wire).unwrap();
        assert_eq!(back, typed);
        assert_eq!(back.spec, spec);
    }

    #[test]
    fn wrong_type_and_bad_spec_are_reported() {
        let wire = TypedResource::new(
            "a",
            specs::KernelArgsSpec {
                args: vec!["x".into()],
            },
        )
        .into_resource();
        assert!(matches!(
            TypedResource::<specs::ClusterSpec>::from_resource(wire),
            Err(ResourceError::WrongType { .. })
        ));
        let mut bad = TypedResource::new("a", specs::ClusterSpec::default()).into_resource();
        bad.spec = Some(Spec {
            proto_spec: vec![0x12, 0xff],
            yaml_spec: String::new(),
        });
        assert!(matches!(
            TypedResource::<specs::ClusterSpec>::from_resource(bad),
            Err(ResourceError::BadSpec { .. })
        ));
    }

    #[test]
    fn spec_field_numbers_match_the_wire_facts() {
        // ClusterSpec.talos_version is field 3 (tag 0x1a), kubernetes_version field 2 (0x12).
        let bytes = specs::ClusterSpec {
            talos_version: "1".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(bytes, vec![0x1a, 0x01, b'1']);
        // KubernetesManifestGroupSpec.mode is field 4 (tag 0x20).
        let bytes = specs::KubernetesManifestGroupSpec {
            mode: specs::kubernetes_manifest_group_spec::Mode::OneTime as i32,
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(bytes, vec![0x20, 0x02]);
    }

    #[test]
    fn id_schemes() {
        assert_eq!(control_plane_machine_set_id("demo"), "demo-control-planes");
        assert_eq!(workers_machine_set_id("demo", "gpu"), "demo-gpu");
        assert_eq!(config_patch_id(400, "cluster", "x"), "400-cluster-x");
        assert_eq!(
            kubernetes_manifest_group_id(1, "demo", "m"),
            "001-cluster-demo-m"
        );
        assert_eq!(kubernetes_health_check_id("demo", "h"), "cluster-demo-h");
        assert_eq!(extensions_configuration_id("demo"), "schematic-demo");
    }
}
