//! `Spec.yaml_spec` as Omni fills it on reads (docs/omni-wire.md#specs): COSI's gRPC server
//! marshals the typed spec with Go's YAML encoder, so a spec message comes out as its Go struct
//! does: every field (zero values included), keyed by its Go field name in lower case
//! (`talos_version` → `talosversion`), absent messages as `null`, enums as numbers, bytes as a
//! sequence of numbers, four-space indentation. omni-sim renders the same from the protobuf
//! bytes it stores, using the descriptors of the spec messages this project declares
//! (crates/omni-client/proto, compiled by build.rs); a field Omni has and those declarations
//! lack is left out (Omni's decoder reads it as its zero value).

use std::collections::HashMap;
use std::sync::OnceLock;

use omni_client::proto::cosi::resource::Resource;
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

use crate::store::VERSION_UNDEFINED;
use crate::types::ty;

/// The descriptor set build.rs compiles.
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/specs.descriptors"));

/// The spec message of each resource type omni-sim stores specs of.
fn spec_message(resource_type: &str) -> Option<&'static str> {
    Some(match resource_type {
        ty::CLUSTER => ".specs.ClusterSpec",
        ty::CONFIG_PATCH => ".specs.ConfigPatchSpec",
        ty::MACHINE_SET => ".specs.MachineSetSpec",
        ty::MACHINE_SET_NODE => ".specs.MachineSetNodeSpec",
        ty::KERNEL_ARGS => ".specs.KernelArgsSpec",
        ty::EXTENSIONS_CONFIGURATION => ".specs.ExtensionsConfigurationSpec",
        ty::MANIFEST_GROUP => ".specs.KubernetesManifestGroupSpec",
        ty::HEALTH_CHECK => ".specs.KubernetesHealthCheckSpec",
        ty::HEALTH_CHECK_STATUS => ".specs.KubernetesHealthCheckStatusSpec",
        ty::MACHINE_CLASS => ".specs.MachineClassSpec",
        ty::MACHINE_STATUS => ".specs.MachineStatusSpec",
        ty::CLUSTER_STATUS => ".specs.ClusterStatusSpec",
        ty::MANIFESTS_STATUS => ".specs.ClusterKubernetesManifestsStatusSpec",
        ty::MACHINE_SET_STATUS => ".specs.MachineSetStatusSpec",
        ty::CONTROL_PLANE_STATUS => ".specs.ControlPlaneStatusSpec",
        ty::LOAD_BALANCER_STATUS => ".specs.LoadBalancerStatusSpec",
        ty::KUBERNETES_UPGRADE_STATUS => ".specs.KubernetesUpgradeStatusSpec",
        ty::TALOS_UPGRADE_STATUS => ".specs.TalosUpgradeStatusSpec",
        ty::CLUSTER_MACHINE_STATUS => ".specs.ClusterMachineStatusSpec",
        ty::CLUSTER_UUID => ".specs.ClusterUUID",
        ty::CLUSTER_CONFIG_VERSION => ".specs.ClusterConfigVersionSpec",
        ty::TALOS_VERSION => ".specs.TalosVersionSpec",
        ty::KUBERNETES_VERSION => ".specs.KubernetesVersionSpec",
        ty::PUBLIC_KEY => ".specs.PublicKeySpec",
        ty::SYS_VERSION => ".specs.SysVersionSpec",
        ty::MACHINE_INSTALL_DISK_CONFIG => ".specs.MachineInstallDiskConfigSpec",
        _ => return None,
    })
}

/// What a field holds.
#[derive(Debug, Clone)]
enum Kind {
    Scalar(Type),
    Message(String),
    Map { key: Type, value: Box<Kind> },
}

#[derive(Debug, Clone)]
struct Field {
    /// The key Go's YAML encoder gives the field: its Go name in lower case.
    key: String,
    number: u32,
    repeated: bool,
    kind: Kind,
}

/// Fields of every message, by full name (`.specs.ClusterSpec`), in declaration order.
type Schema = HashMap<String, Vec<Field>>;

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let set = FileDescriptorSet::decode(DESCRIPTORS).expect("build.rs wrote a descriptor set");
        let mut messages = HashMap::new();
        for file in &set.file {
            let prefix = format!(".{}", file.package());
            for m in &file.message_type {
                collect(&prefix, m, &mut messages);
            }
        }
        let maps: HashMap<String, (Type, Kind)> = messages
            .iter()
            .filter(|(_, m)| m.options.as_ref().and_then(|o| o.map_entry) == Some(true))
            .filter_map(|(name, m)| {
                let key = m.field.iter().find(|f| f.number() == 1)?;
                let value = m.field.iter().find(|f| f.number() == 2)?;
                Some((name.clone(), (key.r#type(), plain_kind(value))))
            })
            .collect();
        messages
            .iter()
            .map(|(name, m)| {
                let fields = m
                    .field
                    .iter()
                    .map(|f| {
                        let kind = match maps.get(f.type_name()) {
                            Some((key, value)) if f.r#type() == Type::Message => Kind::Map {
                                key: *key,
                                value: Box::new(value.clone()),
                            },
                            _ => plain_kind(f),
                        };
                        Field {
                            key: f.name().replace('_', "").to_lowercase(),
                            number: f.number() as u32,
                            repeated: f.label() == Label::Repeated
                                && !matches!(kind, Kind::Map { .. }),
                            kind,
                        }
                    })
                    .collect();
                (name.clone(), fields)
            })
            .collect()
    })
}

fn plain_kind(f: &prost_types::FieldDescriptorProto) -> Kind {
    match f.r#type() {
        Type::Message | Type::Group => Kind::Message(f.type_name().to_string()),
        other => Kind::Scalar(other),
    }
}

fn collect<'a>(
    prefix: &str,
    m: &'a DescriptorProto,
    out: &mut HashMap<String, &'a DescriptorProto>,
) {
    let name = format!("{prefix}.{}", m.name());
    for nested in &m.nested_type {
        collect(&name, nested, out);
    }
    out.insert(name, m);
}

/// A YAML value, rendered the way Go's encoder lays it out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A scalar written as is (numbers, booleans, `null`).
    Raw(String),
    /// A string, quoted when it would otherwise read as something else.
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

/// One value on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The fields of an encoded message, in wire order; `None` when it does not parse.
fn parse(mut buf: &[u8]) -> Option<Vec<(u32, Wire<'_>)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        let number = u32::try_from(tag >> 3).ok()?;
        let value = match tag & 7 {
            0 => Wire::Varint(varint(&mut buf)?),
            1 => {
                let (b, rest) = buf.split_first_chunk::<8>()?;
                buf = rest;
                Wire::Fixed64(u64::from_le_bytes(*b))
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let (b, rest) = (buf.get(..len)?, buf.get(len..)?);
                buf = rest;
                Wire::Bytes(b)
            }
            5 => {
                let (b, rest) = buf.split_first_chunk::<4>()?;
                buf = rest;
                Wire::Fixed32(u32::from_le_bytes(*b))
            }
            _ => return None,
        };
        out.push((number, value));
    }
    Some(out)
}

fn zero(t: Type) -> Node {
    match t {
        Type::Bool => Node::Raw("false".into()),
        Type::String => Node::Str(String::new()),
        Type::Bytes => Node::Seq(Vec::new()),
        _ => Node::Raw("0".into()),
    }
}

fn float(f: f64) -> String {
    if f.is_nan() {
        ".nan".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        }
    } else {
        format!("{f}")
    }
}

/// A scalar value; `None` when the wire type does not fit the field.
fn scalar(t: Type, w: Wire<'_>) -> Option<Node> {
    Some(match (t, w) {
        (Type::Bool, Wire::Varint(v)) => Node::Raw((v != 0).to_string()),
        (Type::Int32 | Type::Enum, Wire::Varint(v)) => Node::Raw((v as i32).to_string()),
        (Type::Int64, Wire::Varint(v)) => Node::Raw((v as i64).to_string()),
        (Type::Uint32, Wire::Varint(v)) => Node::Raw((v as u32).to_string()),
        (Type::Uint64, Wire::Varint(v)) => Node::Raw(v.to_string()),
        (Type::Sint32, Wire::Varint(v)) => {
            Node::Raw((((v >> 1) as i32) ^ -((v & 1) as i32)).to_string())
        }
        (Type::Sint64, Wire::Varint(v)) => {
            Node::Raw((((v >> 1) as i64) ^ -((v & 1) as i64)).to_string())
        }
        (Type::Fixed64, Wire::Fixed64(v)) => Node::Raw(v.to_string()),
        (Type::Sfixed64, Wire::Fixed64(v)) => Node::Raw((v as i64).to_string()),
        (Type::Double, Wire::Fixed64(v)) => Node::Raw(float(f64::from_bits(v))),
        (Type::Fixed32, Wire::Fixed32(v)) => Node::Raw(v.to_string()),
        (Type::Sfixed32, Wire::Fixed32(v)) => Node::Raw((v as i32).to_string()),
        (Type::Float, Wire::Fixed32(v)) => Node::Raw(float(f64::from(f32::from_bits(v)))),
        (Type::String, Wire::Bytes(b)) => Node::Str(String::from_utf8_lossy(b).into_owned()),
        (Type::Bytes, Wire::Bytes(b)) => {
            Node::Seq(b.iter().map(|x| Node::Raw(x.to_string())).collect())
        }
        _ => return None,
    })
}

/// The elements of a repeated scalar field, packed or not.
fn repeated_scalars(t: Type, values: &[Wire<'_>]) -> Option<Vec<Node>> {
    let mut out = Vec::new();
    for &w in values {
        match (t, w) {
            (Type::String | Type::Bytes, _)
            | (_, Wire::Varint(_) | Wire::Fixed32(_) | Wire::Fixed64(_)) => out.push(scalar(t, w)?),
            (_, Wire::Bytes(mut packed)) => {
                while !packed.is_empty() {
                    let w = match t {
                        Type::Double | Type::Fixed64 | Type::Sfixed64 => {
                            let (b, rest) = packed.split_first_chunk::<8>()?;
                            packed = rest;
                            Wire::Fixed64(u64::from_le_bytes(*b))
                        }
                        Type::Float | Type::Fixed32 | Type::Sfixed32 => {
                            let (b, rest) = packed.split_first_chunk::<4>()?;
                            packed = rest;
                            Wire::Fixed32(u32::from_le_bytes(*b))
                        }
                        _ => Wire::Varint(varint(&mut packed)?),
                    };
                    out.push(scalar(t, w)?);
                }
            }
        }
    }
    Some(out)
}

fn value(kind: &Kind, w: Wire<'_>) -> Option<Node> {
    match (kind, w) {
        (Kind::Scalar(t), w) => scalar(*t, w),
        (Kind::Message(name), Wire::Bytes(b)) => message(name, b),
        _ => None,
    }
}

/// A message as Go's encoder lays out its struct; `None` when the bytes do not parse as it.
fn message(name: &str, bytes: &[u8]) -> Option<Node> {
    let fields = schema().get(name)?;
    let wire = parse(bytes)?;
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let values: Vec<Wire<'_>> = wire
            .iter()
            .filter(|(n, _)| *n == f.number)
            .map(|(_, w)| *w)
            .collect();
        let node = match &f.kind {
            Kind::Map { key, value: v } => {
                let mut entries: Vec<(String, Node)> = Vec::new();
                for w in &values {
                    let Wire::Bytes(entry) = w else { return None };
                    let entry = parse(entry)?;
                    let k = entry
                        .iter()
                        .rfind(|(n, _)| *n == 1)
                        .map(|(_, w)| scalar(*key, *w))
                        .unwrap_or_else(|| Some(zero(*key)))?;
                    let k = match k {
                        Node::Raw(s) | Node::Str(s) => s,
                        _ => return None,
                    };
                    let val = match entry.iter().rfind(|(n, _)| *n == 2) {
                        Some((_, w)) => value(v, *w)?,
                        None => match &**v {
                            Kind::Scalar(t) => zero(*t),
                            Kind::Message(m) => message(m, &[])?,
                            Kind::Map { .. } => return None,
                        },
                    };
                    entries.retain(|(existing, _)| *existing != k);
                    entries.push((k, val));
                }
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Node::Map(entries)
            }
            Kind::Scalar(t) if f.repeated => Node::Seq(repeated_scalars(*t, &values)?),
            Kind::Message(_) if f.repeated => Node::Seq(
                values
                    .iter()
                    .map(|w| value(&f.kind, *w))
                    .collect::<Option<Vec<_>>>()?,
            ),
            Kind::Scalar(t) => match values.last() {
                Some(w) => scalar(*t, *w)?,
                None => zero(*t),
            },
            Kind::Message(_) => match values.last() {
                Some(w) => value(&f.kind, *w)?,
                None => Node::Raw("null".into()),
            },
        };
        out.push((f.key.clone(), node));
    }
    Some(Node::Map(out))
}

/// The `yaml_spec` Omni gives a spec of `resource_type` encoded as `proto_spec`; `None` for a
/// type whose spec message omni-sim does not know (or bytes that do not parse as it).
pub(crate) fn render(resource_type: &str, proto_spec: &[u8]) -> Option<String> {
    if resource_type == ty::RESOURCE_DEFINITION {
        return crate::definitions::yaml(proto_spec);
    }
    let Some(name) = spec_message(resource_type) else {
        // Types omni-sim stores only with an empty spec: every field is its zero value, which
        // an empty mapping says as well as Omni's list of them does.
        let empty = matches!(
            resource_type,
            ty::LINK | ty::IDENTITY | ty::USER | ty::NOTIFICATION
        );
        return (empty && proto_spec.is_empty()).then(|| "{}\n".to_string());
    };
    Some(to_yaml(&message(name, proto_spec)?))
}

/// Fills the resource's `yaml_spec` (when empty) for a read. Tombstones (version `undefined`)
/// carry no spec and stay as they are.
pub(crate) fn with_yaml(mut r: Resource) -> Resource {
    let Some(md) = r.metadata.as_ref() else {
        return r;
    };
    if md.version == VERSION_UNDEFINED {
        return r;
    }
    let t = md.r#type.clone();
    if let Some(spec) = r.spec.as_mut()
        && spec.yaml_spec.is_empty()
        && let Some(yaml) = render(&t, &spec.proto_spec)
    {
        spec.yaml_spec = yaml;
    }
    r
}

/// Renders a document: a mapping at the top level, as Go's encoder writes it.
pub(crate) fn to_yaml(node: &Node) -> String {
    let mut out = String::new();
    match node {
        Node::Map(entries) if !entries.is_empty() => map(&mut out, entries, 0),
        Node::Seq(items) if !items.is_empty() => seq(&mut out, items, 0),
        other => {
            out.push_str(&inline(other).unwrap_or_default());
            out.push('\n');
        }
    }
    out
}

/// A node that fits on its key's line: scalars, empty collections, one-line strings.
fn inline(node: &Node) -> Option<String> {
    match node {
        Node::Raw(s) => Some(s.clone()),
        Node::Str(s) => Some(quote(s)),
        Node::Seq(items) if items.is_empty() => Some("[]".into()),
        Node::Map(entries) if entries.is_empty() => Some("{}".into()),
        _ => None,
    }
}

fn map(out: &mut String, entries: &[(String, Node)], indent: usize) {
    for (k, v) in entries {
        out.push_str(&" ".repeat(indent));
        out.push_str(&quote(k));
        out.push(':');
        match v {
            Node::Str(s) if literal(s) => {
                out.push_str(if s.ends_with('\n') { " |\n" } else { " |-\n" });
                for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
                    if !line.is_empty() {
                        out.push_str(&" ".repeat(indent + 4));
                        out.push_str(line);
                    }
                    out.push('\n');
                }
            }
            Node::Map(e) if !e.is_empty() => {
                out.push('\n');
                map(out, e, indent + 4);
            }
            Node::Seq(items) if !items.is_empty() => {
                out.push('\n');
                seq(out, items, indent + 4);
            }
            other => {
                out.push(' ');
                out.push_str(&inline(other).unwrap_or_default());
                out.push('\n');
            }
        }
    }
}

fn seq(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        let mut nested = String::new();
        match item {
            Node::Map(e) if !e.is_empty() => map(&mut nested, e, indent + 2),
            Node::Seq(i) if !i.is_empty() => seq(&mut nested, i, indent + 2),
            other => {
                out.push_str(&" ".repeat(indent));
                out.push_str("- ");
                out.push_str(&inline(other).unwrap_or_default());
                out.push('\n');
                continue;
            }
        }
        // The first line of a nested collection goes on the dash's line.
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        out.push_str(&nested[indent + 2..]);
    }
}

/// Whether a string is written as a literal block (`|`): several lines, each free of trailing
/// blanks and control characters, not starting with a blank, ending in at most one newline.
fn literal(s: &str) -> bool {
    let body = s.strip_suffix('\n').unwrap_or(s);
    body.contains('\n')
        && !body.starts_with([' ', '\n'])
        && !body.ends_with('\n')
        && body
            .split('\n')
            .all(|l| !l.ends_with([' ', '\t']) && !l.chars().any(|c| c.is_control()))
}

/// A scalar string: plain when YAML reads it back as that string, double-quoted otherwise.
fn quote(s: &str) -> String {
    if plain(s) {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

fn plain(s: &str) -> bool {
    const SPECIAL_START: &[char] = &[
        '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@',
        '`', '.', '+', '~', '=', '<',
    ];
    const WORDS: &[&str] = &[
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~",
    ];
    let Some(first) = s.chars().next() else {
        return false;
    };
    let lower = s.to_lowercase();
    !first.is_whitespace()
        && !s.ends_with(char::is_whitespace)
        && !SPECIAL_START.contains(&first)
        && !s.chars().any(|c| c.is_control())
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.ends_with(':')
        && !WORDS.contains(&lower.as_str())
        && !looks_numeric(&lower)
}

/// Numbers in any notation YAML 1.1 or 1.2 knows, and dates, which a decoder may take for
/// something other than a string.
fn looks_numeric(s: &str) -> bool {
    let digits = s.trim_start_matches(['-', '+']);
    digits.replace('_', "").parse::<f64>().is_ok()
        || digits.starts_with("0x")
        || digits.starts_with("0o")
        || digits.starts_with("0b")
        || (digits.starts_with(|c: char| c.is_ascii_digit())
            && digits
                .chars()
                .all(|c| c.is_ascii_digit() || c == ':' || c == '_'))
        || is_date(digits)
}

/// `YYYY-MM-DD…`, which YAML 1.1 reads as a timestamp.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use omni_client::proto::cosi::resource::{Metadata, Spec};
    use omni_client::proto::specs::{
        ClusterSpec, ConfigPatchSpec, EtcdBackupConf, MachineSetNodeSpec, MachineSetSpec,
        TalosVersionSpec, cluster_spec::Features, machine_set_spec,
    };

    use super::*;

    fn yaml_of<M: prost::Message>(t: &str, spec: &M) -> String {
        render(t, &spec.encode_to_vec()).expect("a known type")
    }

    // The expected texts are what Omni's Go code (COSI's protobuf adapter over Omni's spec
    // types, go.yaml.in/yaml/v4) makes of the same specs.

    #[test]
    fn a_cluster_spec_is_laid_out_as_go_encodes_it() {
        let spec = ClusterSpec {
            kubernetes_version: "1.32.3".into(),
            talos_version: "1.10.6".into(),
            features: Some(Features {
                enable_workload_proxy: true,
                ..Default::default()
            }),
            backup_configuration: Some(EtcdBackupConf {
                interval: Some(prost_types::Duration {
                    seconds: 3600,
                    nanos: 0,
                }),
                enabled: true,
            }),
        };
        // `disablepublicdiscoveryservice` is Omni v1.10's; v1.9.3 has no such field.
        assert_eq!(
            yaml_of(ty::CLUSTER, &spec),
            "kubernetesversion: 1.32.3
talosversion: 1.10.6
features:
    enableworkloadproxy: true
    diskencryption: false
    useembeddeddiscoveryservice: false
    enablenodeauditskip: false
    disablepublicdiscoveryservice: false
backupconfiguration:
    interval:
        seconds: 3600
        nanos: 0
    enabled: true
"
        );
        assert_eq!(
            yaml_of(ty::CLUSTER, &ClusterSpec::default()),
            "kubernetesversion: \"\"\ntalosversion: \"\"\nfeatures: null\nbackupconfiguration: null\n"
        );
    }

    #[test]
    fn every_field_is_written_enums_as_numbers_absent_messages_as_null() {
        let spec = MachineSetSpec {
            update_strategy: machine_set_spec::UpdateStrategy::Rolling as i32,
            machine_allocation: Some(machine_set_spec::MachineAllocation {
                name: "c".into(),
                machine_count: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            yaml_of(ty::MACHINE_SET, &spec),
            "updatestrategy: 1
machineclass: null
bootstrapspec: null
deletestrategy: 0
updatestrategyconfig: null
deletestrategyconfig: null
machineallocation:
    name: c
    machinecount: 2
    allocationtype: 0
upgradestrategy: 0
upgradestrategyconfig: null
"
        );
        assert_eq!(
            yaml_of(ty::MACHINE_SET_NODE, &MachineSetNodeSpec::default()),
            "{}\n"
        );
    }

    #[test]
    fn lists_and_multi_line_strings_are_block_style_and_bytes_are_numbers() {
        let spec = TalosVersionSpec {
            version: "1.10.6".into(),
            compatible_kubernetes_versions: vec!["1.32.3".into()],
            ..Default::default()
        };
        assert_eq!(
            yaml_of(ty::TALOS_VERSION, &spec),
            "version: 1.10.6
compatiblekubernetesversions:
    - 1.32.3
deprecated: false
upgradabletalosversions: []
unsupported: false
"
        );
        let patch = ConfigPatchSpec {
            data: "machine:\n  a: 1\n".into(),
            compressed_data: Vec::new(),
        };
        assert_eq!(
            yaml_of(ty::CONFIG_PATCH, &patch),
            "data: |\n    machine:\n      a: 1\ncompresseddata: []\n"
        );
        // Omni shows a compressed payload decompressed; omni-sim has no dictionary to do that.
        let compressed = ConfigPatchSpec {
            data: String::new(),
            compressed_data: vec![40, 181],
        };
        assert_eq!(
            yaml_of(ty::CONFIG_PATCH, &compressed),
            "data: \"\"\ncompresseddata:\n    - 40\n    - 181\n"
        );
    }

    #[test]
    fn strings_yaml_would_read_as_something_else_are_quoted() {
        for (s, want) in [
            ("1.10.6", "1.10.6"),
            ("a=b", "a=b"),
            ("1.32", "\"1.32\""),
            ("123", "\"123\""),
            ("true", "\"true\""),
            ("n", "\"n\""),
            ("null", "\"null\""),
            ("", "\"\""),
            ("{.uuid}", "\"{.uuid}\""),
            ("a: b", "\"a: b\""),
            ("2024-01-02", "\"2024-01-02\""),
            (" lead", "\" lead\""),
            ("tab\there", "\"tab\\there\""),
        ] {
            assert_eq!(quote(s), want, "{s:?}");
        }
        // A multi-line string that a literal block cannot hold exactly is quoted too.
        let node = Node::Map(vec![("k".into(), Node::Str("a \nb\n".into()))]);
        assert_eq!(to_yaml(&node), "k: \"a \\nb\\n\"\n");
        let node = Node::Map(vec![("k".into(), Node::Str("a\nb".into()))]);
        assert_eq!(to_yaml(&node), "k: |-\n    a\n    b\n");
    }

    fn stored(t: &str, version: &str, proto_spec: Vec<u8>) -> Resource {
        Resource {
            metadata: Some(Metadata {
                namespace: "default".into(),
                r#type: t.into(),
                id: "x".into(),
                version: version.into(),
                ..Default::default()
            }),
            spec: Some(Spec {
                proto_spec,
                yaml_spec: String::new(),
            }),
        }
    }

    #[test]
    fn reads_carry_yaml_but_tombstones_and_unknown_types_do_not() {
        let spec = TalosVersionSpec {
            version: "1.10.6".into(),
            ..Default::default()
        };
        let r = with_yaml(stored(ty::TALOS_VERSION, "3", spec.encode_to_vec()));
        assert!(
            r.spec.unwrap().yaml_spec.starts_with("version: 1.10.6\n"),
            "filled"
        );
        let tombstone = with_yaml(stored(ty::TALOS_VERSION, VERSION_UNDEFINED, Vec::new()));
        assert_eq!(tombstone.spec.unwrap().yaml_spec, "");
        let unknown = with_yaml(stored("Things.example.dev", "1", Vec::new()));
        assert_eq!(unknown.spec.unwrap().yaml_spec, "");
        let link = with_yaml(stored(ty::LINK, "1", Vec::new()));
        assert_eq!(link.spec.unwrap().yaml_spec, "{}\n");
        let link = with_yaml(stored(ty::LINK, "1", vec![8, 1]));
        assert_eq!(
            link.spec.unwrap().yaml_spec,
            "",
            "no message to render it with"
        );
        // Bytes that are not the type's message leave it empty rather than wrong.
        let garbage = with_yaml(stored(ty::TALOS_VERSION, "1", vec![0xff]));
        assert_eq!(garbage.spec.unwrap().yaml_spec, "");
    }

    #[test]
    fn every_type_with_a_spec_message_has_its_descriptor() {
        for d in crate::definitions::types() {
            if let Some(name) = spec_message(d) {
                assert!(schema().contains_key(name), "{d}: {name}");
            }
        }
        assert!(schema().contains_key(".google.protobuf.Duration"));
    }
}
