//! Typed Omni resources: a [`TypedResource`] wrapper that encodes/decodes `Spec.proto_spec` with
//! prost. The COSI type strings and label keys are in [`template::types`](crate::template::types)
//! and [`template::keys`](crate::template::keys).

use std::collections::HashMap;

use prost::Message;

use crate::proto::cosi::resource::{Metadata, Resource, Spec};
use crate::proto::specs;
use crate::state::{PHASE_RUNNING, VERSION_UNDEFINED};
use crate::template::types;

/// Namespace of every Omni resource this project touches.
pub const NAMESPACE: &str = "default";

/// `ClusterUUIDs.omni.sidero.dev` (ID = cluster name); the same as [`types::CLUSTER_UUID`].
pub const CLUSTER_UUID_TYPE: &str = types::CLUSTER_UUID;

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
    specs::ClusterSpec => types::CLUSTER,
    specs::ConfigPatchSpec => types::CONFIG_PATCH,
    specs::MachineSetSpec => types::MACHINE_SET,
    specs::MachineSetNodeSpec => types::MACHINE_SET_NODE,
    specs::KernelArgsSpec => types::KERNEL_ARGS,
    specs::ExtensionsConfigurationSpec => types::EXTENSIONS_CONFIGURATION,
    specs::KubernetesManifestGroupSpec => types::KUBERNETES_MANIFEST_GROUP,
    specs::KubernetesHealthCheckSpec => types::KUBERNETES_HEALTH_CHECK,
    specs::MachineClassSpec => types::MACHINE_CLASS,
    specs::MachineStatusSpec => types::MACHINE_STATUS,
    specs::ClusterStatusSpec => types::CLUSTER_STATUS,
    specs::MachineSetStatusSpec => types::MACHINE_SET_STATUS,
    specs::ControlPlaneStatusSpec => types::CONTROL_PLANE_STATUS,
    specs::LoadBalancerStatusSpec => types::LOAD_BALANCER_STATUS,
    specs::KubernetesUpgradeStatusSpec => types::KUBERNETES_UPGRADE_STATUS,
    specs::TalosUpgradeStatusSpec => types::TALOS_UPGRADE_STATUS,
    specs::ClusterMachineStatusSpec => types::CLUSTER_MACHINE_STATUS,
    specs::ClusterUuid => types::CLUSTER_UUID,
    specs::TalosVersionSpec => types::TALOS_VERSION,
    specs::PublicKeySpec => types::PUBLIC_KEY,
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
pub(crate) fn encode_spec<S: Message>(spec: &S) -> Spec {
    Spec {
        proto_spec: spec.encode_to_vec(),
        yaml_spec: String::new(),
    }
}

/// Decodes `proto_spec`; an absent spec decodes as the default message.
pub(crate) fn decode_spec<S: Message + Default>(
    spec: Option<&Spec>,
) -> Result<S, prost::DecodeError> {
    match spec {
        Some(spec) => S::decode(spec.proto_spec.as_slice()),
        None => Ok(S::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::keys;

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
            .with_annotation(keys::MANAGED_BY_TEMPLATES, "");
        let wire = typed.clone().into_resource();
        let meta = wire.metadata.as_ref().unwrap();
        assert_eq!(meta.r#type, types::CLUSTER);
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
}
