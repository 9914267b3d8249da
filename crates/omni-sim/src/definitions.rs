//! The ResourceDefinitions Omni publishes (docs/omni-wire.md#resource-definitions): one per
//! resource type, namespace `meta`, type `ResourceDefinitions.meta.cosi.dev`, ID the type in
//! lower case, owner `meta`. omnictl resolves every type name it is given (`get clusters`,
//! `delete cluster x`) against their IDs and aliases, takes the default namespace from them and
//! prints their columns. Each definition here is the one Omni v1.9.3 registers for the type:
//! COSI derives the display name and the aliases from the type name, which is done here the
//! same way.

use omni_client::proto::cosi::resource::{Metadata, Resource, Spec};
use prost::Message as _;

use crate::store::{PHASE_RUNNING, Store, VERSION_UNDEFINED};
use crate::types::{DEFAULT_NS, EPHEMERAL_NS, ty};
use crate::yaml_spec::{Node, to_yaml};

/// The namespace of COSI's own resources.
pub(crate) const META_NS: &str = "meta";
/// The owner COSI's registry writes definitions with.
const META_OWNER: &str = "meta";

/// COSI's `ResourceDefinitionSpec` on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceDefinitionSpec {
    #[prost(string, tag = "1")]
    pub(crate) resource_type: String,
    #[prost(string, tag = "2")]
    pub(crate) display_type: String,
    #[prost(string, tag = "3")]
    pub(crate) default_namespace: String,
    #[prost(string, repeated, tag = "4")]
    pub(crate) aliases: Vec<String>,
    #[prost(string, repeated, tag = "5")]
    pub(crate) all_aliases: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    pub(crate) print_columns: Vec<PrintColumn>,
    /// 0 non-sensitive, 1 sensitive.
    #[prost(int32, tag = "7")]
    pub(crate) sensitivity: i32,
}

/// An extra table column: a name and a JSONPath into the spec's YAML.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PrintColumn {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) json_path: String,
}

/// What a type declares; the rest is derived.
struct Definition {
    resource_type: &'static str,
    /// The type name in the singular (COSI derives it by de-pluralising).
    display_type: &'static str,
    default_namespace: &'static str,
    /// Aliases the type declares itself, before the automatic ones.
    aliases: &'static [&'static str],
    print_columns: &'static [(&'static str, &'static str)],
    sensitive: bool,
}

const fn def(resource_type: &'static str, display_type: &'static str) -> Definition {
    Definition {
        resource_type,
        display_type,
        default_namespace: DEFAULT_NS,
        aliases: &[],
        print_columns: &[],
        sensitive: false,
    }
}

/// Every type omni-sim serves through the State API (PublicKeys are never served), with
/// Omni's namespaces, columns and sensitivity. MachineInstallDiskConfigs and
/// KubernetesHealthCheckStatuses are newer than Omni v1.9.3; theirs follow the same rules.
const DEFINITIONS: &[Definition] = &[
    Definition {
        aliases: &["api-resources"],
        default_namespace: META_NS,
        print_columns: &[("Aliases", "{.aliases[:]}")],
        ..def(ty::RESOURCE_DEFINITION, "ResourceDefinition")
    },
    Definition {
        print_columns: &[
            ("Talos Version", "{.talosversion}"),
            ("Kubernetes Version", "{.kubernetesversion}"),
        ],
        ..def(ty::CLUSTER, "Cluster")
    },
    Definition {
        sensitive: true,
        ..def(ty::CONFIG_PATCH, "ConfigPatch")
    },
    def(ty::MACHINE_SET, "MachineSet"),
    def(ty::MACHINE_SET_NODE, "MachineSetNode"),
    Definition {
        print_columns: &[("Args", "{.args}")],
        ..def(ty::KERNEL_ARGS, "KernelArg")
    },
    def(ty::EXTENSIONS_CONFIGURATION, "ExtensionsConfiguration"),
    def(ty::MANIFEST_GROUP, "KubernetesManifestGroup"),
    def(ty::HEALTH_CHECK, "KubernetesHealthCheck"),
    Definition {
        default_namespace: EPHEMERAL_NS,
        ..def(ty::HEALTH_CHECK_STATUS, "KubernetesHealthCheckStatus")
    },
    def(ty::MACHINE_CLASS, "MachineClass"),
    def(ty::MACHINE_INSTALL_DISK_CONFIG, "MachineInstallDiskConfig"),
    Definition {
        print_columns: &[
            ("Connected", "{.connected}"),
            ("LastEndpoint", "{.lastendpoint}"),
        ],
        ..def(ty::LINK, "Link")
    },
    def(ty::MACHINE_STATUS, "MachineStatus"),
    Definition {
        print_columns: &[
            ("Available", "{.available}"),
            ("Phase", "{.phase}"),
            ("Machines", "{.machines.total}"),
            ("Healthy", "{.machines.healthy}"),
        ],
        ..def(ty::CLUSTER_STATUS, "ClusterStatus")
    },
    Definition {
        print_columns: &[
            ("Out Of Sync", "{.outofsync}"),
            ("Total Manifests", "{.total}"),
        ],
        ..def(ty::MANIFESTS_STATUS, "ClusterKubernetesManifestsStatus")
    },
    def(ty::MACHINE_SET_STATUS, "MachineSetStatus"),
    def(ty::CONTROL_PLANE_STATUS, "ControlPlaneStatus"),
    Definition {
        print_columns: &[("Healthy", "{.healthy}")],
        ..def(ty::LOAD_BALANCER_STATUS, "LoadBalancerStatus")
    },
    def(ty::KUBERNETES_UPGRADE_STATUS, "KubernetesUpgradeStatus"),
    def(ty::TALOS_UPGRADE_STATUS, "TalosUpgradeStatus"),
    Definition {
        print_columns: &[("Ready", "{.ready}"), ("Stage", "{.stage}")],
        ..def(ty::CLUSTER_MACHINE_STATUS, "ClusterMachineStatus")
    },
    Definition {
        print_columns: &[("UUID", "{.uuid}")],
        ..def(ty::CLUSTER_UUID, "ClusterUUID")
    },
    def(ty::CLUSTER_CONFIG_VERSION, "ClusterConfigVersion"),
    Definition {
        print_columns: &[("Kubernetes Versions", "{.compatiblekubernetesversions}")],
        ..def(ty::TALOS_VERSION, "TalosVersion")
    },
    def(ty::KUBERNETES_VERSION, "KubernetesVersion"),
    Definition {
        default_namespace: EPHEMERAL_NS,
        ..def(ty::SYS_VERSION, "SysVersion")
    },
    Definition {
        default_namespace: EPHEMERAL_NS,
        ..def(ty::NOTIFICATION, "Notification")
    },
    def(ty::IDENTITY, "Identity"),
    def(ty::USER, "User"),
];

impl Definition {
    /// The spec as COSI fills it in: the type's own aliases, then the display name in lower
    /// case and, for a name of several capitals, their initials (plus a plural `s` unless they
    /// end in `S`); all aliases add the plural name alone and with each prefix of the suffix.
    fn spec(&self) -> ResourceDefinitionSpec {
        let (name, suffix) = self
            .resource_type
            .split_once('.')
            .expect("a type has a suffix");
        let mut aliases: Vec<String> = self.aliases.iter().map(|a| a.to_string()).collect();
        aliases.push(self.display_type.to_lowercase());
        let initials: String = name.chars().filter(char::is_ascii_uppercase).collect();
        if initials.len() > 1 {
            aliases.push(initials.to_lowercase());
            if !initials.ends_with('S') {
                aliases.push(format!("{}s", initials.to_lowercase()));
            }
        }
        let plural = name.to_lowercase();
        let parts: Vec<&str> = suffix.split('.').collect();
        let mut all_aliases = vec![plural.clone()];
        for i in 1..parts.len() {
            all_aliases.push(format!("{plural}.{}", parts[..i].join(".")));
        }
        all_aliases.extend(aliases.iter().cloned());
        ResourceDefinitionSpec {
            resource_type: self.resource_type.to_string(),
            display_type: self.display_type.to_string(),
            default_namespace: self.default_namespace.to_string(),
            aliases,
            all_aliases,
            print_columns: self
                .print_columns
                .iter()
                .map(|(name, path)| PrintColumn {
                    name: name.to_string(),
                    json_path: path.to_string(),
                })
                .collect(),
            sensitivity: i32::from(self.sensitive),
        }
    }
}

/// The definition resources, as stored.
pub(crate) fn resources() -> Vec<Resource> {
    DEFINITIONS
        .iter()
        .map(|d| Resource {
            metadata: Some(Metadata {
                namespace: META_NS.into(),
                r#type: ty::RESOURCE_DEFINITION.into(),
                id: d.resource_type.to_lowercase(),
                version: VERSION_UNDEFINED.into(),
                owner: META_OWNER.into(),
                phase: PHASE_RUNNING.into(),
                ..Default::default()
            }),
            spec: Some(Spec {
                proto_spec: d.spec().encode_to_vec(),
                yaml_spec: String::new(),
            }),
        })
        .collect()
}

/// Publishes the definitions, as Omni's runtime registers them when it starts.
pub(crate) fn publish(store: &Store) {
    for r in resources() {
        store.put(r);
    }
}

/// The YAML of a definition's spec: COSI's Go struct has YAML names of its own (`displayType`,
/// `allAliases`, …); the skip flag (never set) and a non-sensitive sensitivity are left out.
pub(crate) fn yaml(proto_spec: &[u8]) -> Option<String> {
    let spec = ResourceDefinitionSpec::decode(proto_spec).ok()?;
    let strings = |v: &[String]| Node::Seq(v.iter().map(|s| Node::Str(s.clone())).collect());
    let mut entries = vec![
        ("type".to_string(), Node::Str(spec.resource_type)),
        ("displayType".to_string(), Node::Str(spec.display_type)),
        (
            "defaultNamespace".to_string(),
            Node::Str(spec.default_namespace),
        ),
        ("aliases".to_string(), strings(&spec.aliases)),
        ("allAliases".to_string(), strings(&spec.all_aliases)),
        (
            "printColumns".to_string(),
            Node::Seq(
                spec.print_columns
                    .into_iter()
                    .map(|c| {
                        Node::Map(vec![
                            ("name".to_string(), Node::Str(c.name)),
                            ("jsonPath".to_string(), Node::Str(c.json_path)),
                        ])
                    })
                    .collect(),
            ),
        ),
    ];
    if spec.sensitivity == 1 {
        entries.push(("sensitivity".to_string(), Node::Str("sensitive".into())));
    }
    Some(to_yaml(&Node::Map(entries)))
}

/// The types definitions are published for.
#[cfg(test)]
pub(crate) fn types() -> impl Iterator<Item = &'static str> {
    DEFINITIONS.iter().map(|d| d.resource_type)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::store::decode_spec;

    fn published() -> BTreeMap<String, ResourceDefinitionSpec> {
        let store = Store::new(Arc::new(crate::clock::SystemClock));
        publish(&store);
        store
            .list(META_NS, ty::RESOURCE_DEFINITION, &[])
            .iter()
            .map(|r| {
                let md = crate::store::meta(r);
                assert_eq!(md.owner, META_OWNER);
                assert_eq!(md.version, "1");
                (md.id.clone(), decode_spec(r).unwrap())
            })
            .collect()
    }

    fn owned(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    // Expected values: what COSI's registry makes of Omni v1.9.3's definitions.

    #[test]
    fn a_definition_per_served_type_in_namespace_meta_by_lower_case_type() {
        let rds = published();
        assert_eq!(rds.len(), DEFINITIONS.len());
        for (id, rd) in &rds {
            assert_eq!(*id, rd.resource_type.to_lowercase());
        }
        assert!(!rds.contains_key(&ty::PUBLIC_KEY.to_lowercase()));
        let cluster = &rds["clusters.omni.sidero.dev"];
        assert_eq!(cluster.display_type, "Cluster");
        assert_eq!(cluster.default_namespace, "default");
        assert_eq!(cluster.aliases, owned(&["cluster"]));
        assert_eq!(
            cluster.all_aliases,
            owned(&[
                "clusters",
                "clusters.omni",
                "clusters.omni.sidero",
                "cluster"
            ])
        );
        assert_eq!(cluster.print_columns.len(), 2);
        assert_eq!(cluster.print_columns[0].json_path, "{.talosversion}");
        assert_eq!(rds["configpatches.omni.sidero.dev"].sensitivity, 1);
        assert_eq!(cluster.sensitivity, 0);
        assert_eq!(
            rds["sysversions.system.sidero.dev"].default_namespace,
            "ephemeral"
        );
    }

    #[test]
    fn aliases_follow_cosis_rules() {
        let rds = published();
        let aliases = |id: &str| rds[id].aliases.clone();
        assert_eq!(
            aliases("clusterstatuses.omni.sidero.dev"),
            owned(&["clusterstatus", "cs"])
        );
        assert_eq!(
            aliases("clusteruuids.omni.sidero.dev"),
            owned(&["clusteruuid", "cuuid", "cuuids"])
        );
        assert_eq!(
            aliases("kernelargs.omni.sidero.dev"),
            owned(&["kernelarg", "ka", "kas"])
        );
        let rd = &rds["resourcedefinitions.meta.cosi.dev"];
        assert_eq!(
            rd.aliases,
            owned(&["api-resources", "resourcedefinition", "rd", "rds"])
        );
        assert_eq!(
            rd.all_aliases,
            owned(&[
                "resourcedefinitions",
                "resourcedefinitions.meta",
                "resourcedefinitions.meta.cosi",
                "api-resources",
                "resourcedefinition",
                "rd",
                "rds"
            ])
        );
        assert_eq!(
            rds["sysversions.system.sidero.dev"].all_aliases,
            owned(&[
                "sysversions",
                "sysversions.system",
                "sysversions.system.sidero",
                "sysversion",
                "sv",
                "svs"
            ])
        );
    }

    #[test]
    fn a_definitions_yaml_uses_cosis_names() {
        let cluster = DEFINITIONS
            .iter()
            .find(|d| d.resource_type == ty::CLUSTER)
            .unwrap();
        assert_eq!(
            yaml(&cluster.spec().encode_to_vec()).unwrap(),
            "type: Clusters.omni.sidero.dev
displayType: Cluster
defaultNamespace: default
aliases:
    - cluster
allAliases:
    - clusters
    - clusters.omni
    - clusters.omni.sidero
    - cluster
printColumns:
    - name: Talos Version
      jsonPath: \"{.talosversion}\"
    - name: Kubernetes Version
      jsonPath: \"{.kubernetesversion}\"
"
        );
        let patch = DEFINITIONS
            .iter()
            .find(|d| d.resource_type == ty::CONFIG_PATCH)
            .unwrap();
        let text = yaml(&patch.spec().encode_to_vec()).unwrap();
        assert!(
            text.ends_with("printColumns: []\nsensitivity: sensitive\n"),
            "{text}"
        );
    }
}
