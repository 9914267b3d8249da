//! The cluster-template document model: parsing from multi-document YAML and emitting back.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::yaml::{self, Node};
use crate::duration::DurationField;

/// String map of user labels or annotations ("descriptors").
pub type Descriptors = BTreeMap<String, String>;

/// A parsed cluster template: its documents in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    /// Documents in the order they appeared.
    pub documents: Vec<Document>,
}

/// One template document, dispatched on its `kind`.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    /// `kind: Cluster`.
    Cluster(Cluster),
    /// `kind: ControlPlane`.
    ControlPlane(MachineSet),
    /// `kind: Workers`.
    Workers(MachineSet),
    /// `kind: Machine`.
    Machine(Machine),
}

impl Document {
    /// The `kind` string of this document.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Document::Cluster(_) => "Cluster",
            Document::ControlPlane(_) => "ControlPlane",
            Document::Workers(_) => "Workers",
            Document::Machine(_) => "Machine",
        }
    }

    /// The document's `name` field as written (may be empty).
    pub(crate) fn name(&self) -> &str {
        match self {
            Document::Cluster(c) => &c.name,
            Document::ControlPlane(m) | Document::Workers(m) => &m.name,
            Document::Machine(m) => &m.name,
        }
    }
}

/// Treats an explicit `null` like an absent key for collections that have no "unset" meaning.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The `Cluster` document.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cluster {
    /// Cluster ID in Omni.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Labels for the Omni `Cluster` resource.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Descriptors,
    /// Annotations for the Omni `Cluster` resource.
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Descriptors,
    /// Kubernetes version, manifests and health checks.
    #[serde(default, deserialize_with = "nullable")]
    pub kubernetes: KubernetesCluster,
    /// Talos version.
    #[serde(default, deserialize_with = "nullable")]
    pub talos: TalosCluster,
    /// Cluster features; `None` when the key is absent.
    #[serde(default)]
    pub features: Option<Features>,
    /// Cluster-wide config patches.
    #[serde(default, deserialize_with = "nullable")]
    pub patches: Vec<Patch>,
    /// Cluster-level kernel arguments; `None` = unset, `Some([])` = explicitly empty.
    #[serde(default)]
    pub kernel_args: Option<Vec<String>>,
    /// Cluster-level system extensions; `None` = unset, `Some([])` = explicitly empty.
    #[serde(default)]
    pub system_extensions: Option<Vec<String>>,
}

/// `Cluster.kubernetes`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesCluster {
    /// Kubernetes version (leading `v` optional).
    #[serde(default, deserialize_with = "nullable")]
    pub version: String,
    /// Kubernetes manifests applied by Omni.
    #[serde(default, deserialize_with = "nullable")]
    pub manifests: Vec<Manifest>,
    /// Kubernetes health-check jobs.
    #[serde(default, deserialize_with = "nullable")]
    pub healthchecks: Vec<HealthCheck>,
}

/// `Cluster.talos`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TalosCluster {
    /// Talos version, with a leading `v`.
    #[serde(default, deserialize_with = "nullable")]
    pub version: String,
}

/// `Cluster.features`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Features {
    /// Omni's workload-service proxy.
    #[serde(default, deserialize_with = "nullable")]
    pub enable_workload_proxy: bool,
    /// Use Omni's embedded discovery service.
    #[serde(default, deserialize_with = "nullable")]
    pub use_embedded_discovery_service: bool,
    /// Disk encryption (Talos ≥ 1.5.0).
    #[serde(default, deserialize_with = "nullable")]
    pub disk_encryption: bool,
    /// Nodes annotated `omni.sidero.dev/node-audit-skip` skip the node audit (Omni v1.10).
    #[serde(default, deserialize_with = "nullable")]
    pub enable_node_audit_skip: bool,
    /// Turns the public discovery service off (Omni v1.10): a pointer bool, so an explicit
    /// `false` is kept.
    #[serde(default)]
    pub disable_public_discovery_service: Option<bool>,
    /// Etcd backups.
    #[serde(default)]
    pub backup_configuration: Option<BackupConfiguration>,
}

/// `Cluster.features.backupConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BackupConfiguration {
    /// Go duration; a value > 0 enables backups.
    #[serde(default, deserialize_with = "nullable")]
    pub interval: DurationField,
}

/// A `ControlPlane` or `Workers` document (same fields; validation restricts each kind).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MachineSet {
    /// Worker-set name (Workers only; empty = `workers`).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Labels for the MachineSet.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Descriptors,
    /// Annotations for the MachineSet.
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Descriptors,
    /// Machine UUIDs (manual membership).
    #[serde(default, deserialize_with = "nullable")]
    pub machines: Vec<String>,
    /// Machine-class allocation.
    #[serde(default)]
    pub machine_class: Option<MachineClass>,
    /// Restore from an etcd backup (ControlPlane only).
    #[serde(default)]
    pub bootstrap_spec: Option<BootstrapSpec>,
    /// Update strategy (Workers only).
    #[serde(default)]
    pub update_strategy: Option<UpdateStrategy>,
    /// Upgrade strategy.
    #[serde(default)]
    pub upgrade_strategy: Option<UpdateStrategy>,
    /// Delete strategy (Workers only).
    #[serde(default)]
    pub delete_strategy: Option<UpdateStrategy>,
    /// Machine-set config patches.
    #[serde(default, deserialize_with = "nullable")]
    pub patches: Vec<Patch>,
    /// Set-level kernel arguments; `None` = unset.
    #[serde(default)]
    pub kernel_args: Option<Vec<String>>,
    /// Set-level system extensions; `None` = unset.
    #[serde(default)]
    pub system_extensions: Option<Vec<String>>,
}

/// `machineClass`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MachineClass {
    /// MachineClass ID.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Integer count or a keyword (`unlimited`, `Static`, ...).
    #[serde(default)]
    pub size: Size,
}

/// `machineClass.size`: YAML integers and strings are kept apart so they re-emit as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// An integer count.
    Count(i64),
    /// A keyword such as `unlimited` or `∞`.
    Keyword(String),
}

impl Default for Size {
    fn default() -> Self {
        Size::Count(0)
    }
}

/// `bootstrapSpec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// UUID of the cluster whose backup is restored.
    #[serde(default, rename = "clusterUUID", deserialize_with = "nullable")]
    pub cluster_uuid: String,
    /// Snapshot name.
    #[serde(default, deserialize_with = "nullable")]
    pub snapshot: String,
}

/// `updateStrategy` / `upgradeStrategy` / `deleteStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// `Rolling` or `Unset` (empty = not given).
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    /// Rolling parameters; `Some` with no fields renders `rolling: {}`.
    #[serde(default)]
    pub rolling: Option<RollingStrategy>,
}

/// `rolling`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RollingStrategy {
    /// Maximum machines changed at once.
    #[serde(default)]
    pub max_parallelism: Option<u32>,
}

/// The `Machine` document.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Machine {
    /// Machine UUID.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Labels for the MachineSetNode.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Descriptors,
    /// Annotations for the MachineSetNode.
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Descriptors,
    /// Locks the machine against updates (workers only).
    #[serde(default, deserialize_with = "nullable")]
    pub locked: bool,
    /// Install settings.
    #[serde(default)]
    pub install: Option<Install>,
    /// Machine config patches.
    #[serde(default, deserialize_with = "nullable")]
    pub patches: Vec<Patch>,
    /// Machine kernel arguments; `None` = inherit.
    #[serde(default)]
    pub kernel_args: Option<Vec<String>>,
    /// Machine system extensions; `None` = inherit.
    #[serde(default)]
    pub system_extensions: Option<Vec<String>>,
}

/// `install`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Install {
    /// Install disk path, e.g. `/dev/sda`.
    #[serde(default, deserialize_with = "nullable")]
    pub disk: String,
    /// CEL expression choosing the install disk (Omni backend API 3); exclusive with `disk`.
    #[serde(default, deserialize_with = "nullable")]
    pub disk_selector: String,
}

/// A config patch.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Patch {
    /// File holding the patch.
    #[serde(default, deserialize_with = "nullable")]
    pub file: String,
    /// Patch name (part of the ConfigPatch ID).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Replaces the generated ConfigPatch ID.
    #[serde(default, deserialize_with = "nullable")]
    pub id_override: String,
    /// Labels for the ConfigPatch.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Descriptors,
    /// Annotations for the ConfigPatch.
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Descriptors,
    /// Inline content: a mapping, a list of mappings, or a string used verbatim.
    #[serde(default)]
    pub inline: Option<serde_json::Value>,
}

/// A Kubernetes manifest group.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// Manifest name.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `full` or `one-time`.
    #[serde(default, deserialize_with = "nullable")]
    pub mode: String,
    /// Inline content (same forms as a patch).
    #[serde(default)]
    pub inline: Option<serde_json::Value>,
    /// File holding the manifests.
    #[serde(default, deserialize_with = "nullable")]
    pub file: String,
    /// Labels for the manifest group.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Descriptors,
    /// Annotations for the manifest group.
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Descriptors,
}

/// A Kubernetes health check.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Health-check name.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Replaces the generated resource ID.
    #[serde(default, deserialize_with = "nullable")]
    pub id_override: String,
    /// Inline Job manifest.
    #[serde(default)]
    pub job: Option<serde_json::Value>,
    /// File holding the Job manifest.
    #[serde(default, deserialize_with = "nullable")]
    pub file: String,
    /// Go duration between runs (empty or 0 = Omni's default).
    #[serde(default, deserialize_with = "nullable")]
    pub interval: DurationField,
    /// Labels for the resource.
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Descriptors,
    /// Annotations for the resource.
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Descriptors,
}

/// Why a template could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The text is not YAML.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// A document has no scalar `kind`.
    #[error("document {index}: kind field not found")]
    MissingKind {
        /// Zero-based document index.
        index: usize,
    },
    /// A document has a kind we do not know.
    #[error("document {index}: unknown model kind {kind:?}")]
    UnknownKind {
        /// Zero-based document index.
        index: usize,
        /// The kind found.
        kind: String,
    },
    /// A document does not match its kind's schema (unknown field, wrong type).
    #[error("document {index} ({kind}): {message}")]
    Document {
        /// Zero-based document index.
        index: usize,
        /// The document's kind.
        kind: String,
        /// What is wrong.
        message: String,
    },
}

impl Template {
    /// Parses a multi-document template. Empty documents are skipped; unknown fields are errors.
    pub fn parse(text: &str) -> Result<Template, ParseError> {
        let values: Vec<serde_json::Value> =
            serde_saphyr::from_multiple_with_options(text, yaml_1_2_options())
                .map_err(|e| ParseError::Yaml(e.to_string()))?;
        let mut documents = Vec::new();
        for value in values.into_iter().filter(|v| !v.is_null()) {
            let index = documents.len();
            documents.push(parse_document(index, value)?);
        }
        Ok(Template { documents })
    }

    /// The template as YAML in the operator's rendering format (2-space indentation).
    pub fn to_yaml(&self) -> String {
        let nodes: Vec<Node> = self.documents.iter().map(document_node).collect();
        yaml::emit_documents(&nodes, 2)
    }

    /// The `Cluster` document, if there is exactly one.
    pub fn cluster(&self) -> Option<&Cluster> {
        let mut clusters = self.documents.iter().filter_map(|d| match d {
            Document::Cluster(c) => Some(c),
            _ => None,
        });
        let first = clusters.next();
        if clusters.next().is_some() {
            None
        } else {
            first
        }
    }
}

/// Decoder options matching Go's YAML reader: only `true`/`false` are booleans, so label
/// values such as `y` or `on` stay strings.
pub(crate) fn yaml_1_2_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options
}

fn parse_document(index: usize, mut value: serde_json::Value) -> Result<Document, ParseError> {
    let Some(map) = value.as_object_mut() else {
        return Err(ParseError::MissingKind { index });
    };
    let kind = match map.remove("kind") {
        Some(serde_json::Value::String(k)) => k,
        _ => return Err(ParseError::MissingKind { index }),
    };
    let err = |e: serde_json::Error| ParseError::Document {
        index,
        kind: kind.clone(),
        message: e.to_string(),
    };
    Ok(match kind.as_str() {
        "Cluster" => Document::Cluster(serde_json::from_value(value).map_err(err)?),
        "ControlPlane" => Document::ControlPlane(serde_json::from_value(value).map_err(err)?),
        "Workers" => Document::Workers(serde_json::from_value(value).map_err(err)?),
        "Machine" => Document::Machine(serde_json::from_value(value).map_err(err)?),
        _ => return Err(ParseError::UnknownKind { index, kind }),
    })
}

/// Collects `key: value` entries, leaving out the ones a Go `omitempty` would drop.
struct MapBuilder(Vec<(String, Node)>);

impl MapBuilder {
    fn new(kind: &str) -> Self {
        MapBuilder(vec![("kind".into(), Node::Str(kind.into()))])
    }
    fn empty() -> Self {
        MapBuilder(Vec::new())
    }
    fn put(&mut self, key: &str, node: Node) {
        self.0.push((key.into(), node));
    }
    fn str(&mut self, key: &str, value: &str) {
        if !value.is_empty() {
            self.put(key, Node::Str(value.into()));
        }
    }
    fn descriptors(&mut self, key: &str, map: &Descriptors) {
        if !map.is_empty() {
            self.put(key, Node::string_map(map));
        }
    }
    fn strings(&mut self, key: &str, items: &[String]) {
        if !items.is_empty() {
            self.put(key, Node::string_seq(items));
        }
    }
    /// Optional lists keep an explicit `[]` because it means "defined and empty".
    fn optional_strings(&mut self, key: &str, items: &Option<Vec<String>>) {
        if let Some(items) = items {
            self.put(key, Node::string_seq(items));
        }
    }
    fn bool(&mut self, key: &str, value: bool) {
        if value {
            self.put(key, Node::Bool(true));
        }
    }
    fn patches(&mut self, patches: &[Patch]) {
        if !patches.is_empty() {
            self.put(
                "patches",
                Node::Seq(patches.iter().map(patch_node).collect()),
            );
        }
    }
    fn build(self) -> Node {
        Node::Map(self.0)
    }
}

fn document_node(doc: &Document) -> Node {
    match doc {
        Document::Cluster(c) => cluster_node(c),
        Document::ControlPlane(m) => machine_set_node("ControlPlane", m),
        Document::Workers(m) => machine_set_node("Workers", m),
        Document::Machine(m) => machine_node(m),
    }
}

fn cluster_node(c: &Cluster) -> Node {
    let mut b = MapBuilder::new("Cluster");
    b.put("name", Node::Str(c.name.clone()));
    b.descriptors("labels", &c.labels);
    b.descriptors("annotations", &c.annotations);
    let mut k = MapBuilder::empty();
    k.put("version", Node::Str(c.kubernetes.version.clone()));
    if !c.kubernetes.manifests.is_empty() {
        k.put(
            "manifests",
            Node::Seq(c.kubernetes.manifests.iter().map(manifest_node).collect()),
        );
    }
    if !c.kubernetes.healthchecks.is_empty() {
        k.put(
            "healthchecks",
            Node::Seq(
                c.kubernetes
                    .healthchecks
                    .iter()
                    .map(healthcheck_node)
                    .collect(),
            ),
        );
    }
    b.put("kubernetes", k.build());
    let mut t = MapBuilder::empty();
    t.put("version", Node::Str(c.talos.version.clone()));
    b.put("talos", t.build());
    if let Some(f) = &c.features {
        let mut fb = MapBuilder::empty();
        fb.bool("enableWorkloadProxy", f.enable_workload_proxy);
        fb.bool(
            "useEmbeddedDiscoveryService",
            f.use_embedded_discovery_service,
        );
        fb.bool("diskEncryption", f.disk_encryption);
        fb.bool("enableNodeAuditSkip", f.enable_node_audit_skip);
        if let Some(disabled) = f.disable_public_discovery_service {
            fb.put("disablePublicDiscoveryService", Node::Bool(disabled));
        }
        if let Some(backup) = &f.backup_configuration {
            let mut bb = MapBuilder::empty();
            bb.str("interval", backup.interval.as_str());
            fb.put("backupConfiguration", bb.build());
        }
        b.put("features", fb.build());
    }
    b.patches(&c.patches);
    b.optional_strings("systemExtensions", &c.system_extensions);
    b.optional_strings("kernelArgs", &c.kernel_args);
    b.build()
}

fn machine_set_node(kind: &str, m: &MachineSet) -> Node {
    let mut b = MapBuilder::new(kind);
    b.str("name", &m.name);
    b.descriptors("labels", &m.labels);
    b.descriptors("annotations", &m.annotations);
    b.strings("machines", &m.machines);
    if let Some(mc) = &m.machine_class {
        let mut cb = MapBuilder::empty();
        cb.str("name", &mc.name);
        cb.put(
            "size",
            match &mc.size {
                Size::Count(n) => Node::Int(*n),
                Size::Keyword(s) => Node::Str(s.clone()),
            },
        );
        b.put("machineClass", cb.build());
    }
    if let Some(bs) = &m.bootstrap_spec {
        let mut bb = MapBuilder::empty();
        bb.str("clusterUUID", &bs.cluster_uuid);
        bb.str("snapshot", &bs.snapshot);
        b.put("bootstrapSpec", bb.build());
    }
    for (key, strategy) in [
        ("updateStrategy", &m.update_strategy),
        ("upgradeStrategy", &m.upgrade_strategy),
        ("deleteStrategy", &m.delete_strategy),
    ] {
        if let Some(s) = strategy {
            b.put(key, strategy_node(s));
        }
    }
    b.patches(&m.patches);
    b.optional_strings("systemExtensions", &m.system_extensions);
    b.optional_strings("kernelArgs", &m.kernel_args);
    b.build()
}

fn strategy_node(s: &UpdateStrategy) -> Node {
    let mut b = MapBuilder::empty();
    b.str("type", &s.kind);
    if let Some(r) = &s.rolling {
        let mut rb = MapBuilder::empty();
        if let Some(p) = r.max_parallelism {
            rb.put("maxParallelism", Node::UInt(u64::from(p)));
        }
        b.put("rolling", rb.build());
    }
    b.build()
}

fn machine_node(m: &Machine) -> Node {
    let mut b = MapBuilder::new("Machine");
    b.put("name", Node::Str(m.name.clone()));
    b.descriptors("labels", &m.labels);
    b.descriptors("annotations", &m.annotations);
    b.bool("locked", m.locked);
    if let Some(install) = &m.install {
        let mut ib = MapBuilder::empty();
        ib.str("disk", &install.disk);
        ib.str("diskSelector", &install.disk_selector);
        b.put("install", ib.build());
    }
    b.patches(&m.patches);
    b.optional_strings("systemExtensions", &m.system_extensions);
    b.optional_strings("kernelArgs", &m.kernel_args);
    b.build()
}

fn patch_node(p: &Patch) -> Node {
    let mut b = MapBuilder::empty();
    b.str("file", &p.file);
    b.str("name", &p.name);
    b.str("idOverride", &p.id_override);
    b.descriptors("labels", &p.labels);
    b.descriptors("annotations", &p.annotations);
    if let Some(inline) = &p.inline {
        b.put("inline", Node::from_json(inline));
    }
    b.build()
}

fn manifest_node(m: &Manifest) -> Node {
    let mut b = MapBuilder::empty();
    b.str("name", &m.name);
    b.str("mode", &m.mode);
    if let Some(inline) = &m.inline {
        b.put("inline", Node::from_json(inline));
    }
    b.str("file", &m.file);
    b.descriptors("labels", &m.labels);
    b.descriptors("annotations", &m.annotations);
    b.build()
}

fn healthcheck_node(h: &HealthCheck) -> Node {
    let mut b = MapBuilder::empty();
    b.str("name", &h.name);
    b.str("idOverride", &h.id_override);
    if let Some(job) = &h.job {
        b.put("job", Node::from_json(job));
    }
    b.str("file", &h.file);
    b.str("interval", h.interval.as_str());
    b.descriptors("labels", &h.labels);
    b.descriptors("annotations", &h.annotations);
    b.build()
}
