//! Client-side template validation (everything checkable before any RPC). Errors are
//! collected, not short-circuited, so a user sees every problem at once.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::files::FileResolver;
use super::model::{Cluster, Descriptors, Document, Machine, MachineSet, Patch, Size, Template};
use super::yaml::{self, Node};
use crate::duration::DurationField;

/// Prefix reserved for Omni's own labels and annotations.
pub const RESERVED_PREFIX: &str = "omni.sidero.dev/";

/// One validation failure, naming the document and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Zero-based document index; `None` for template-wide rules.
    pub index: Option<usize>,
    /// Document kind (`Cluster`, `Workers`, ...); empty for template-wide rules.
    pub kind: String,
    /// Document name as written.
    pub name: String,
    /// Field path inside the document, e.g. `patches[0].inline`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => {
                write!(f, "{} {:?} (document {i})", self.kind, self.name)?;
                if !self.field.is_empty() {
                    write!(f, ": {}", self.field)?;
                }
                write!(f, ": {}", self.message)
            }
            None => write!(f, "template: {}", self.message),
        }
    }
}

/// Every validation failure of a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template is invalid ({} errors):", self.0.len())?;
        for e in &self.0 {
            write!(f, "\n  * {e}")?;
        }
        Ok(())
    }
}

/// Turns inline content into the bytes Omni stores: a string verbatim, a mapping as one YAML
/// document, a sequence of mappings as a multi-document stream (4-space indentation, sorted
/// keys, as Omni's Go client re-encodes it).
pub fn inline_content(value: &serde_json::Value) -> Result<String, String> {
    match value {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Object(_) => Ok(yaml::emit_document(&Node::from_json(value), 4)),
        serde_json::Value::Array(items) => {
            if let Some(bad) = items.iter().find(|i| !i.is_object()) {
                return Err(format!(
                    "inline list items must be mappings, found {}",
                    json_type(bad)
                ));
            }
            let nodes: Vec<Node> = items.iter().map(Node::from_json).collect();
            Ok(yaml::emit_documents(&nodes, 4))
        }
        other => Err(format!(
            "inline must be a mapping, a list of mappings or a string, found {}",
            json_type(other)
        )),
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a mapping",
    }
}

/// Talos machine-config fields Omni owns (Omni v1.10's list); a patch setting them is refused
/// by the server. `machine.install.disk` joins them on backend API 3 (see [`super::api`]).
const FORBIDDEN_PATCH_FIELDS: [&[&str]; 15] = [
    &["cluster", "clusterName"],
    &["cluster", "id"],
    &["cluster", "controlPlane", "endpoint"],
    &["cluster", "token"],
    &["cluster", "secret"],
    &["cluster", "aescbcEncryptionSecret"],
    &["cluster", "secretboxEncryptionSecret"],
    &["cluster", "ca"],
    &["cluster", "acceptedCAs"],
    &["cluster", "serviceAccount"],
    &["machine", "token"],
    &["machine", "ca"],
    &["machine", "type"],
    &["machine", "install", "extensions"],
    &["machine", "acceptedCAs"],
];

/// Multi-document config kinds Omni v1.10 refuses in a patch: they carry the cluster's CAs
/// with their private keys.
const FORBIDDEN_PATCH_DOCUMENTS: [&str; 2] = ["KubeAPIServerCAConfig", "KubeAggregatorCAConfig"];

/// Fields refused inside a document of a given kind (Omni v1.10).
const FORBIDDEN_DOCUMENT_FIELDS: [(&str, &[&str]); 1] =
    [("KubeServiceAccountConfig", &["issuer", "privateKey"])];

/// The message for YAML that does not parse: `what` and the position only. The parser's own
/// text quotes up to 64 characters around the fault (and type errors quote the value), and
/// the input may be a Secret's content, so none of it is passed on.
pub fn yaml_syntax_error(what: &str, e: &serde_saphyr::Error) -> String {
    match e.location() {
        Some(at) => format!(
            "{what} is not valid YAML (error at line {}, column {})",
            at.line(),
            at.column()
        ),
        None => format!("{what} is not valid YAML"),
    }
}

/// Approximates Omni's config-patch check: YAML documents that are mappings and do not set
/// fields Omni manages. The server re-checks with Talos' real loader.
pub fn check_config_patch(content: &str) -> Result<(), String> {
    check_config_patch_for(content, false)
}

/// `machine.install.disk`: refused in patches by Omni backend API 3.
const INSTALL_DISK: &[&str] = &["machine", "install", "disk"];

/// [`check_config_patch`], also refusing `machine.install.disk` when `forbid_install_disk`
/// (the rule of Omni backend API 3, where the install disk is a resource of its own).
pub fn check_config_patch_for(content: &str, forbid_install_disk: bool) -> Result<(), String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options(content, super::model::yaml_1_2_options())
            .map_err(|e| yaml_syntax_error("patch", &e))?;
    for doc in docs.iter().filter(|d| !d.is_null()) {
        if !doc.is_object() {
            return Err(format!(
                "patch document must be a mapping, found {}",
                json_type(doc)
            ));
        }
        // Omni checks the legacy v1alpha1 document (no `kind`) against the field list, and
        // each multi-document config by its kind. Messages are Omni's own.
        let fields: Vec<&[&str]> = match doc.get("kind").and_then(|k| k.as_str()) {
            None => {
                let mut fields = FORBIDDEN_PATCH_FIELDS.to_vec();
                if forbid_install_disk {
                    fields.push(INSTALL_DISK);
                }
                fields
            }
            Some(kind) if FORBIDDEN_PATCH_DOCUMENTS.contains(&kind) => {
                return Err(format!(
                    "the {kind:?} document is not allowed in the config patch"
                ));
            }
            Some(kind) => FORBIDDEN_DOCUMENT_FIELDS
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, path)| *path)
                .collect(),
        };
        for path in fields {
            let mut cur = Some(doc);
            for key in path {
                cur = cur.and_then(|v| v.get(key));
            }
            if cur.is_some() {
                return Err(format!(
                    "overriding {:?} is not allowed in the config patch",
                    path.join(".")
                ));
            }
        }
        let roles = doc
            .pointer("/machine/features/kubernetesTalosAPIAccess/allowedRoles")
            .and_then(|r| r.as_array());
        if roles.is_some_and(|r| r.iter().any(|x| x.as_str() == Some("os:admin"))) {
            return Err(
                "patch must not grant os:admin in machine.features.kubernetesTalosAPIAccess.allowedRoles"
                    .into(),
            );
        }
    }
    Ok(())
}

/// A loose semantic version: `MAJOR.MINOR.PATCH` with optional pre-release/build suffix.
pub(crate) fn parse_semver(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((major, minor, patch))
}

/// Whether `s` parses as a UUID the way Go's `uuid.Parse` accepts it: canonical 36-character
/// form, `urn:uuid:` prefix, braces, or 32 bare hex digits.
pub fn is_uuid(s: &str) -> bool {
    let canonical = |s: &str| -> bool {
        let b = s.as_bytes();
        b.len() == 36
            && b.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    match s.len() {
        36 => canonical(s),
        45 => {
            s.get(..9)
                .is_some_and(|p| p.eq_ignore_ascii_case("urn:uuid:"))
                && s.get(9..).is_some_and(canonical)
        }
        38 => s.starts_with('{') && s.ends_with('}') && s.get(1..37).is_some_and(canonical),
        32 => s.bytes().all(|c| c.is_ascii_hexdigit()),
        _ => false,
    }
}

struct Ctx<'a> {
    errors: Vec<ValidationError>,
    files: &'a FileResolver,
}

/// How the documents refer to each other, gathered while each is checked on its own.
#[derive(Default)]
struct Membership {
    clusters: usize,
    control_planes: usize,
    /// Workers name → how many documents use it.
    worker_names: BTreeMap<String, usize>,
    /// Machines the ControlPlane lists.
    cp_machines: BTreeSet<String>,
    /// Machine ID → the Workers that list it.
    worker_machines: BTreeMap<String, Vec<String>>,
}

impl Membership {
    fn add(&mut self, document: &Document) {
        match document {
            Document::Cluster(_) => self.clusters += 1,
            Document::ControlPlane(m) => {
                self.control_planes += 1;
                self.cp_machines.extend(m.machines.iter().cloned());
            }
            Document::Workers(m) => {
                let name = workers_name(m).to_string();
                *self.worker_names.entry(name.clone()).or_default() += 1;
                for id in &m.machines {
                    self.worker_machines
                        .entry(id.clone())
                        .or_default()
                        .push(name.clone());
                }
            }
            Document::Machine(_) => {}
        }
    }

    /// One Cluster, one ControlPlane, unique Workers names, each machine in at most one set.
    fn check_counts(&self, ctx: &mut Ctx<'_>) {
        let (clusters, control_planes) = (self.clusters, self.control_planes);
        if clusters != 1 {
            ctx.global(format!(
                "exactly one Cluster document is required, found {clusters}"
            ));
        }
        if control_planes != 1 {
            ctx.global(format!(
                "exactly one ControlPlane document is required, found {control_planes}"
            ));
        }
        for (name, count) in &self.worker_names {
            if *count > 1 {
                ctx.global(format!(
                    "Workers name {name:?} is used by {count} documents"
                ));
            }
        }
        for (id, sets) in &self.worker_machines {
            if sets.len() > 1 {
                ctx.global(format!(
                    "machine {id:?} is listed in more than one Workers: {}",
                    sets.join(", ")
                ));
            }
            if self.cp_machines.contains(id) {
                ctx.global(format!(
                    "machine {id:?} is listed in both ControlPlane and Workers"
                ));
            }
        }
    }

    /// Every Machine document is listed by a set, and none of the control plane's is locked.
    fn check_machines(&self, ctx: &mut Ctx<'_>, documents: &[Document]) {
        for (index, document) in documents.iter().enumerate() {
            if let Document::Machine(m) = document {
                let in_cp = self.cp_machines.contains(&m.name);
                if !in_cp && !self.worker_machines.contains_key(&m.name) {
                    ctx.errors.push(ValidationError {
                        index: Some(index),
                        kind: "Machine".into(),
                        name: m.name.clone(),
                        field: String::new(),
                        message: "machine is not listed in ControlPlane or any Workers".into(),
                    });
                }
                if in_cp && m.locked {
                    ctx.errors.push(ValidationError {
                        index: Some(index),
                        kind: "Machine".into(),
                        name: m.name.clone(),
                        field: "locked".into(),
                        message: "control-plane machines cannot be locked".into(),
                    });
                }
            }
        }
    }
}

struct DocCtx {
    index: usize,
    kind: &'static str,
    name: String,
}

impl Ctx<'_> {
    fn push(&mut self, doc: &DocCtx, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ValidationError {
            index: Some(doc.index),
            kind: doc.kind.to_string(),
            name: doc.name.clone(),
            field: field.into(),
            message: message.into(),
        });
    }

    fn global(&mut self, message: impl Into<String>) {
        self.errors.push(ValidationError {
            index: None,
            kind: String::new(),
            name: String::new(),
            field: String::new(),
            message: message.into(),
        });
    }

    fn descriptors(
        &mut self,
        doc: &DocCtx,
        field: &str,
        labels: &Descriptors,
        annotations: &Descriptors,
    ) {
        for (what, map) in [("labels", labels), ("annotations", annotations)] {
            for key in map.keys() {
                if key.starts_with(RESERVED_PREFIX) {
                    self.push(
                        doc,
                        format!("{field}{what}"),
                        format!("key {key:?} uses the reserved prefix {RESERVED_PREFIX:?}"),
                    );
                }
            }
        }
    }

    fn duration(&mut self, doc: &DocCtx, field: &str, value: &DurationField) -> Option<i128> {
        match value.duration() {
            Ok(d) => Some(i128::from(d.as_nanos())),
            Err(e) => {
                self.push(doc, field, e.to_string());
                None
            }
        }
    }

    fn patches(&mut self, doc: &DocCtx, patches: &[Patch]) {
        for (i, p) in patches.iter().enumerate() {
            let field = format!("patches[{i}]");
            self.descriptors(doc, &format!("{field}."), &p.labels, &p.annotations);
            let content = match (&p.file.is_empty(), &p.inline) {
                (true, None) => {
                    self.push(doc, &field, "patch requires exactly one of file or inline");
                    continue;
                }
                (false, Some(_)) => {
                    self.push(doc, &field, "patch must not set both file and inline");
                    continue;
                }
                (false, None) => match self.files.read(&p.file) {
                    Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Err(e) => {
                        self.push(doc, format!("{field}.file"), e.to_string());
                        continue;
                    }
                },
                (true, Some(inline)) => {
                    if p.name.is_empty() && p.id_override.is_empty() {
                        self.push(
                            doc,
                            format!("{field}.name"),
                            "inline patch requires name or idOverride",
                        );
                    }
                    match inline_content(inline) {
                        Ok(c) => c,
                        Err(e) => {
                            self.push(doc, format!("{field}.inline"), e);
                            continue;
                        }
                    }
                }
            };
            if let Err(e) = check_config_patch(&content) {
                self.push(doc, &field, e);
            }
        }
    }

    fn cluster(&mut self, doc: &DocCtx, c: &Cluster) {
        self.cluster_name(doc, c);
        self.descriptors(doc, "", &c.labels, &c.annotations);
        let talos = self.cluster_versions(doc, c);
        if let Some(f) = &c.features {
            if f.disk_encryption && talos.is_some_and(|v| v < (1, 5, 0)) {
                self.push(
                    doc,
                    "features.diskEncryption",
                    "disk encryption requires Talos v1.5.0 or later",
                );
            }
            if let Some(b) = &f.backup_configuration {
                self.duration(doc, "features.backupConfiguration.interval", &b.interval);
            }
        }
        self.patches(doc, &c.patches);
        self.manifests(doc, c);
        self.health_checks(doc, c);
    }

    fn cluster_name(&mut self, doc: &DocCtx, c: &Cluster) {
        if c.name.is_empty() {
            self.push(doc, "name", "cluster name is required");
        } else if !c
            .name
            .chars()
            .all(|ch| ch.is_alphanumeric() || ch == '-' || ch == '_')
        {
            self.push(
                doc,
                "name",
                "cluster name may contain only letters, digits, '-' and '_'",
            );
        }
    }

    /// Checks both versions; returns the Talos version when it parses.
    fn cluster_versions(&mut self, doc: &DocCtx, c: &Cluster) -> Option<(u64, u64, u64)> {
        if c.kubernetes.version.is_empty() {
            self.push(doc, "kubernetes.version", "Kubernetes version is required");
        } else if parse_semver(c.kubernetes.version.trim_start_matches('v')).is_none() {
            self.push(
                doc,
                "kubernetes.version",
                format!("invalid Kubernetes version {:?}", c.kubernetes.version),
            );
        }
        if c.talos.version.is_empty() {
            self.push(doc, "talos.version", "Talos version is required");
            None
        } else {
            let parsed = c.talos.version.strip_prefix('v').and_then(parse_semver);
            if parsed.is_none() {
                self.push(
                    doc,
                    "talos.version",
                    format!(
                        "invalid Talos version {:?} (expected vMAJOR.MINOR.PATCH)",
                        c.talos.version
                    ),
                );
            }
            parsed
        }
    }

    fn manifests(&mut self, doc: &DocCtx, c: &Cluster) {
        let mut names = BTreeSet::new();
        for (i, m) in c.kubernetes.manifests.iter().enumerate() {
            let field = format!("kubernetes.manifests[{i}]");
            self.descriptors(doc, &format!("{field}."), &m.labels, &m.annotations);
            let name = if m.name.is_empty() { &m.file } else { &m.name };
            if name.is_empty() {
                self.push(
                    doc,
                    format!("{field}.name"),
                    "manifest requires name or file",
                );
            } else if !names.insert(name.clone()) {
                self.push(
                    doc,
                    format!("{field}.name"),
                    format!("duplicate manifest name {name:?}"),
                );
            }
            if m.mode.is_empty() {
                self.push(doc, format!("{field}.mode"), "manifest mode is required");
            } else if !matches!(m.mode.as_str(), "full" | "one-time") {
                self.push(
                    doc,
                    format!("{field}.mode"),
                    format!(
                        "unknown manifest mode {:?} (expected full or one-time)",
                        m.mode
                    ),
                );
            }
            match (m.file.is_empty(), &m.inline) {
                (true, None) => self.push(
                    doc,
                    &field,
                    "manifest requires exactly one of file or inline",
                ),
                (false, Some(_)) => {
                    self.push(doc, &field, "manifest must not set both file and inline")
                }
                (false, None) => {
                    if let Err(e) = self.files.read(&m.file) {
                        self.push(doc, format!("{field}.file"), e.to_string());
                    }
                }
                (true, Some(inline)) => {
                    if let Err(e) = inline_content(inline) {
                        self.push(doc, format!("{field}.inline"), e);
                    }
                }
            }
        }
    }

    fn health_checks(&mut self, doc: &DocCtx, c: &Cluster) {
        let mut ids = BTreeSet::new();
        for (i, h) in c.kubernetes.healthchecks.iter().enumerate() {
            let field = format!("kubernetes.healthchecks[{i}]");
            self.descriptors(doc, &format!("{field}."), &h.labels, &h.annotations);
            if h.name.is_empty() && h.id_override.is_empty() {
                self.push(
                    doc,
                    format!("{field}.name"),
                    "health check requires name or idOverride",
                );
            } else {
                let id = healthcheck_id(&c.name, &h.name, &h.id_override);
                if !ids.insert(id.clone()) {
                    self.push(doc, &field, format!("duplicate health check ID {id:?}"));
                }
            }
            match (h.file.is_empty(), &h.job) {
                (true, None) => self.push(
                    doc,
                    &field,
                    "health check requires exactly one of job or file",
                ),
                (false, Some(_)) => {
                    self.push(doc, &field, "health check must not set both job and file")
                }
                (false, None) => {
                    if let Err(e) = self.files.read(&h.file) {
                        self.push(doc, format!("{field}.file"), e.to_string());
                    }
                }
                (true, Some(job)) => {
                    if let Err(e) = inline_content(job) {
                        self.push(doc, format!("{field}.job"), e);
                    }
                }
            }
            if !h.interval.is_empty()
                && let Some(d) = self.duration(doc, &format!("{field}.interval"), &h.interval)
                && d < 0
            {
                self.push(
                    doc,
                    format!("{field}.interval"),
                    "interval must not be negative",
                );
            }
        }
    }

    fn machine_set(&mut self, doc: &DocCtx, m: &MachineSet, control_plane: bool) {
        self.descriptors(doc, "", &m.labels, &m.annotations);
        if control_plane {
            if !m.name.is_empty() {
                self.push(doc, "name", "control plane must not have a name");
            }
            if m.update_strategy.is_some() {
                self.push(
                    doc,
                    "updateStrategy",
                    "control plane does not support updateStrategy",
                );
            }
            if m.delete_strategy.is_some() {
                self.push(
                    doc,
                    "deleteStrategy",
                    "control plane does not support deleteStrategy",
                );
            }
            if let Some(b) = &m.bootstrap_spec {
                if b.cluster_uuid.is_empty() {
                    self.push(doc, "bootstrapSpec.clusterUUID", "clusterUUID is required");
                }
                if b.snapshot.is_empty() {
                    self.push(doc, "bootstrapSpec.snapshot", "snapshot is required");
                }
            }
        } else {
            if m.name == CONTROL_PLANES {
                self.push(doc, "name", "workers name \"control-planes\" is reserved");
            }
            if m.bootstrap_spec.is_some() {
                self.push(
                    doc,
                    "bootstrapSpec",
                    "bootstrapSpec is allowed only on the control plane",
                );
            }
        }
        if !m.machines.is_empty() && m.machine_class.is_some() {
            self.push(
                doc,
                "machineClass",
                "machines and machineClass are mutually exclusive",
            );
        }
        if let Some(mc) = &m.machine_class {
            if mc.name.is_empty() {
                self.push(doc, "machineClass.name", "machine class name is required");
            }
            if let Err(e) = allocation(&mc.size) {
                self.push(doc, "machineClass.size", e);
            }
            if m.kernel_args.is_some() {
                self.push(
                    doc,
                    "kernelArgs",
                    "kernelArgs are not supported with machineClass",
                );
            }
        }
        for (i, id) in m.machines.iter().enumerate() {
            if !is_uuid(id) {
                self.push(
                    doc,
                    format!("machines[{i}]"),
                    format!("machine ID {id:?} is not a UUID"),
                );
            }
        }
        for (field, s) in [
            ("updateStrategy", &m.update_strategy),
            ("upgradeStrategy", &m.upgrade_strategy),
            ("deleteStrategy", &m.delete_strategy),
        ] {
            if let Some(s) = s
                && !matches!(s.kind.as_str(), "" | "Rolling" | "Unset")
            {
                self.push(
                    doc,
                    format!("{field}.type"),
                    format!(
                        "unknown strategy type {:?} (expected Rolling or Unset)",
                        s.kind
                    ),
                );
            }
        }
        self.patches(doc, &m.patches);
    }

    fn machine(&mut self, doc: &DocCtx, m: &Machine) {
        if m.name.is_empty() {
            self.push(doc, "name", "machine name is required");
        } else if !is_uuid(&m.name) {
            self.push(
                doc,
                "name",
                format!("machine name {:?} is not a UUID", m.name),
            );
        }
        self.descriptors(doc, "", &m.labels, &m.annotations);
        if let Some(i) = &m.install {
            match (i.disk.is_empty(), i.disk_selector.is_empty()) {
                (true, true) => {
                    self.push(doc, "install.disk", "install disk must not be empty");
                }
                (false, false) => self.push(
                    doc,
                    "install.diskSelector",
                    "install.disk and install.diskSelector are mutually exclusive",
                ),
                _ => {}
            }
        }
        self.patches(doc, &m.patches);
    }
}

/// The reserved machine-set name suffix of the control plane.
pub(crate) const CONTROL_PLANES: &str = "control-planes";

/// `(type, count)` of a machine-class allocation: `Static` = 0, `Unlimited` = 1 (Omni's enum).
pub(crate) fn allocation(size: &Size) -> Result<(i32, u32), String> {
    match size {
        Size::Count(n) => u32::try_from(*n)
            .map(|n| (0, n))
            .map_err(|_| format!("machine class size {n} is out of range")),
        Size::Keyword(k) => match k.as_str() {
            "Unlimited" | "unlimited" | "infinity" | "∞" => Ok((1, 0)),
            "Static" => Ok((0, 0)),
            other => Err(format!(
                "unknown machine class size {other:?} (expected a count, unlimited, infinity or ∞)"
            )),
        },
    }
}

/// The KubernetesHealthCheck ID for a health check.
pub(crate) fn healthcheck_id(cluster: &str, name: &str, id_override: &str) -> String {
    if id_override.is_empty() {
        format!("cluster-{cluster}-{name}")
    } else {
        id_override.to_string()
    }
}

/// The effective Workers name (`workers` when unnamed).
pub(crate) fn workers_name(m: &MachineSet) -> &str {
    if m.name.is_empty() {
        "workers"
    } else {
        &m.name
    }
}

impl Template {
    /// Checks every client-side rule; file references are read through `files`.
    pub fn validate(&self, files: &FileResolver) -> Result<(), ValidationErrors> {
        let mut ctx = Ctx {
            errors: Vec::new(),
            files,
        };
        let mut membership = Membership::default();
        for (index, document) in self.documents.iter().enumerate() {
            let doc = DocCtx {
                index,
                kind: document.kind(),
                name: document.name().to_string(),
            };
            membership.add(document);
            match document {
                Document::Cluster(c) => ctx.cluster(&doc, c),
                Document::ControlPlane(m) => ctx.machine_set(&doc, m, true),
                Document::Workers(m) => ctx.machine_set(&doc, m, false),
                Document::Machine(m) => ctx.machine(&doc, m),
            }
        }
        membership.check_counts(&mut ctx);
        membership.check_machines(&mut ctx, &self.documents);
        if ctx.errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(ctx.errors))
        }
    }
}
