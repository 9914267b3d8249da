//! Omni's write validations that template workflows can trip (docs/omni-wire.md#metadata-rules,
//! docs/omni-wire.md#write-validations). Every failure becomes
//! `INVALID_ARGUMENT failed to validate: <reason>`.

use omni_client::proto::cosi::resource::Resource;
use omni_client::proto::specs::{
    ClusterConfigVersionSpec, ClusterSpec, ConfigPatchSpec, ExtensionsConfigurationSpec,
    KernelArgsSpec, KubernetesHealthCheckSpec, KubernetesManifestGroupSpec, MachineClassSpec,
    MachineInstallDiskConfigSpec, MachineSetSpec, TalosVersionSpec, kubernetes_manifest_group_spec,
    machine_set_spec,
};
use serde_json::Value;

use crate::store::{Store, decode_spec, id, label, meta, tearing_down};
use crate::types::{DEFAULT_NS, label as l, ty};

/// Config-patch paths users may not set in the legacy (kind-less) document: Omni v1.10's list
/// (`client/pkg/omni/resources/omni/config_patch.go`), which added `cluster.ca` and
/// `cluster.serviceAccount` to v1.9's list (docs/omni-wire.md#write-validations).
pub(crate) const FORBIDDEN_PATCH_FIELDS: [&str; 15] = [
    "cluster.clusterName",
    "cluster.id",
    "cluster.controlPlane.endpoint",
    "cluster.token",
    "cluster.secret",
    "cluster.aescbcEncryptionSecret",
    "cluster.secretboxEncryptionSecret",
    "cluster.ca",
    "cluster.acceptedCAs",
    "cluster.serviceAccount",
    "machine.token",
    "machine.ca",
    "machine.type",
    "machine.install.extensions",
    "machine.acceptedCAs",
];

/// Multi-document config kinds a patch may not contain (Omni v1.10: they carry CA keys).
pub(crate) const FORBIDDEN_PATCH_DOCUMENTS: [&str; 2] =
    ["KubeAPIServerCAConfig", "KubeAggregatorCAConfig"];

/// Fields refused inside documents of a kind (Omni v1.10).
pub(crate) const FORBIDDEN_DOCUMENT_FIELDS: [(&str, &str); 1] =
    [("KubeServiceAccountConfig", "issuer.privateKey")];

/// Refused in patches from backend API 3 on: the install disk is a resource of its own there.
pub(crate) const API3_FORBIDDEN_PATCH_FIELD: &str = "machine.install.disk";

/// A write being validated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op<'a> {
    /// Create of `new`.
    Create(&'a Resource),
    /// Update from `old` (stored) to `new`.
    Update {
        /// Stored resource.
        old: &'a Resource,
        /// Requested resource.
        new: &'a Resource,
    },
    /// Destroy or teardown of a stored resource.
    Destroy(&'a Resource),
}

type V = Result<(), String>;

/// Runs the metadata limits and the type's validations.
pub(crate) fn validate(store: &Store, op: Op<'_>) -> V {
    match op {
        Op::Create(r) | Op::Update { new: r, .. } => check_metadata(r)?,
        Op::Destroy(_) => {}
    }
    let target = match op {
        Op::Create(r) | Op::Destroy(r) | Op::Update { new: r, .. } => r,
    };
    match meta(target).r#type.as_str() {
        ty::CLUSTER => cluster(store, op),
        ty::CONFIG_PATCH => config_patch(store, op),
        ty::MACHINE_SET => machine_set(store, op),
        ty::MACHINE_SET_NODE => machine_set_node(store, op),
        ty::KERNEL_ARGS => kernel_args(op),
        ty::EXTENSIONS_CONFIGURATION => extensions(store, op),
        ty::MANIFEST_GROUP => manifest_group(op),
        ty::HEALTH_CHECK => health_check(op),
        ty::MACHINE_INSTALL_DISK_CONFIG => install_disk_config(store, op),
        _ => Ok(()),
    }
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// ID and label/annotation limits of Omni's metadata validation.
fn check_metadata(r: &Resource) -> V {
    let md = meta(r);
    if md.id.is_empty() {
        return Err("id must not be empty".into());
    }
    if md.id.len() > 1024 {
        return Err("id is too long".into());
    }
    if has_control(&md.id) {
        return Err("id contains control characters".into());
    }
    for (what, map) in [("labels", &md.labels), ("annotations", &md.annotations)] {
        if map.len() > 256 {
            return Err(format!("too many {what}"));
        }
        for (k, v) in map {
            if k.is_empty() || k.len() > 1024 {
                return Err(format!("{what} key {k:?} has invalid length"));
            }
            if v.len() > 16 * 1024 {
                return Err(format!("{what} value for key {k:?} is too long"));
            }
            if has_control(k) || has_control(v) {
                return Err(format!("{what} contain control characters"));
            }
        }
    }
    Ok(())
}

fn decode<M: prost::Message + Default>(r: &Resource) -> Result<M, String> {
    decode_spec(r).map_err(|e| format!("failed to decode spec: {e}"))
}

/// A parsed semantic version (pre-release and build tags are accepted and ignored for ordering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Semver {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

/// Parses `MAJOR.MINOR.PATCH[-pre][+build]` strictly (no leading `v`: Omni stores bare versions).
pub(crate) fn parse_semver(s: &str) -> Option<Semver> {
    let core = s.split(['+', '-']).next()?;
    let mut it = core.split('.');
    let mut num = || -> Option<u64> {
        let p = it.next()?;
        if p.is_empty()
            || !p.bytes().all(|b| b.is_ascii_digit())
            || (p.len() > 1 && p.starts_with('0'))
        {
            return None;
        }
        p.parse().ok()
    };
    let v = Semver {
        major: num()?,
        minor: num()?,
        patch: num()?,
    };
    if it.next().is_some() {
        return None;
    }
    Some(v)
}

fn locked(r: &Resource) -> bool {
    meta(r).annotations.contains_key(l::CLUSTER_LOCKED)
}

fn cluster(store: &Store, op: Op<'_>) -> V {
    let (new, old) = match op {
        Op::Destroy(old) => {
            if locked(old) {
                return Err(format!("cluster {:?} is locked", id(old)));
            }
            return Ok(());
        }
        Op::Create(new) => (new, None),
        Op::Update { old, new } => {
            if locked(old) {
                return Err(format!("cluster {:?} is locked", id(old)));
            }
            (new, Some(old))
        }
    };
    let name = id(new);
    if !name
        .chars()
        .all(|c| c.is_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "cluster name {name:?} is invalid: only letters, digits, '-' and '_' are allowed"
        ));
    }
    let spec: ClusterSpec = decode(new)?;
    let talos = parse_semver(&spec.talos_version)
        .ok_or_else(|| format!("invalid talos version {:?}", spec.talos_version))?;
    let kube = parse_semver(&spec.kubernetes_version)
        .ok_or_else(|| format!("invalid kubernetes version {:?}", spec.kubernetes_version))?;
    let old_spec: Option<ClusterSpec> = old.map(decode).transpose()?;
    talos_catalogue(store, &spec, old_spec.as_ref())?;
    discovery_service(&spec, old_spec.as_ref(), talos)?;
    disk_encryption(&spec, old_spec.as_ref(), talos)?;
    if let Some(old_spec) = &old_spec {
        upgrade_path(store, name, &spec, old_spec, talos, kube)?;
    }
    Ok(())
}

/// The Talos version against Omni's catalogue (`TalosVersions`), and the Kubernetes version
/// against the Talos version's compatible ones.
///
/// Omni v1.10 (`validations/cluster.go`, `version.go`): versions are checked when either
/// changes (always on create); a deprecated target (below Omni's minimum) only from a
/// deprecated current version (patch upgrades within it), never for a new cluster; an
/// `unsupported` one (beyond the newest Talos this Omni supports) never.
fn talos_catalogue(store: &Store, spec: &ClusterSpec, old_spec: Option<&ClusterSpec>) -> V {
    let versions_changed = old_spec.is_none_or(|o| {
        o.talos_version != spec.talos_version || o.kubernetes_version != spec.kubernetes_version
    });
    let tv = store
        .try_get(DEFAULT_NS, ty::TALOS_VERSION, &spec.talos_version)
        .ok_or_else(|| {
            format!(
                "invalid talos version {:?}: version is not supported",
                spec.talos_version
            )
        })?;
    let tv: TalosVersionSpec = decode(&tv)?;
    let current_deprecated = old_spec
        .and_then(|o| store.try_get(DEFAULT_NS, ty::TALOS_VERSION, &o.talos_version))
        .and_then(|r| decode::<TalosVersionSpec>(&r).ok())
        .is_some_and(|v| v.deprecated);
    if versions_changed && tv.deprecated && !current_deprecated {
        return Err(format!(
            "talos version {:?} is no longer supported",
            spec.talos_version
        ));
    }
    if versions_changed && tv.unsupported {
        return Err(format!(
            "talos version {:?} is not supported by this Omni release",
            spec.talos_version
        ));
    }
    if !tv
        .compatible_kubernetes_versions
        .iter()
        .any(|k| k == &spec.kubernetes_version)
    {
        return Err(format!(
            "invalid kubernetes version {:?}: is not compatible with Talos version {:?}",
            spec.kubernetes_version, spec.talos_version
        ));
    }
    Ok(())
}

/// Omni v1.10 (`validations/cluster.go`): the public discovery service can be turned off only
/// for clusters created with Talos 1.14+ (here: the version before this update, which minor
/// downgrades keep at or below the creation version), and only with the embedded one.
fn discovery_service(spec: &ClusterSpec, old_spec: Option<&ClusterSpec>, talos: Semver) -> V {
    if !spec
        .features
        .as_ref()
        .is_some_and(|f| f.disable_public_discovery_service)
    {
        return Ok(());
    }
    let created = old_spec
        .and_then(|o| parse_semver(&o.talos_version))
        .unwrap_or(talos);
    if (created.major, created.minor) < (1, 14) {
        return Err("the public discovery service can only be configured for clusters created with Talos 1.14 or newer".into());
    }
    if !spec
        .features
        .as_ref()
        .is_some_and(|f| f.use_embedded_discovery_service)
    {
        return Err("the discovery service cannot be disabled entirely: keep the public discovery service enabled or enable the embedded discovery service".into());
    }
    Ok(())
}

/// Disk encryption needs Talos 1.5 and cannot change after the cluster is created.
fn disk_encryption(spec: &ClusterSpec, old_spec: Option<&ClusterSpec>, talos: Semver) -> V {
    let encryption = spec.features.as_ref().is_some_and(|f| f.disk_encryption);
    if encryption
        && talos
            < (Semver {
                major: 1,
                minor: 5,
                patch: 0,
            })
    {
        return Err("disk encryption is supported only for Talos version >= 1.5.0".into());
    }
    if let Some(old_spec) = old_spec {
        let old_encryption = old_spec
            .features
            .as_ref()
            .is_some_and(|f| f.disk_encryption);
        if old_encryption != encryption {
            return Err("disk encryption cannot be changed after the cluster is created".into());
        }
    }
    Ok(())
}

/// An update may raise Kubernetes by at most one minor and may not take Talos a minor below
/// the version the cluster was created with.
fn upgrade_path(
    store: &Store,
    name: &str,
    spec: &ClusterSpec,
    old_spec: &ClusterSpec,
    talos: Semver,
    kube: Semver,
) -> V {
    if let Some(old_kube) = parse_semver(&old_spec.kubernetes_version)
        && kube.major == old_kube.major
        && kube.minor > old_kube.minor + 1
    {
        return Err(format!(
            "unsupported Kubernetes version upgrade path {} -> {}",
            old_spec.kubernetes_version, spec.kubernetes_version
        ));
    }
    if let Some(initial) = store
        .try_get(DEFAULT_NS, ty::CLUSTER_CONFIG_VERSION, name)
        .and_then(|r| decode::<ClusterConfigVersionSpec>(&r).ok())
        && let Some(initial_version) = parse_semver(&initial.version)
        && (talos.major, talos.minor) < (initial_version.major, initial_version.minor)
    {
        return Err(format!(
            "downgrading from version {:?} to {:?} is not supported",
            initial.version, spec.talos_version
        ));
    }
    Ok(())
}

fn get_cluster(store: &Store, name: &str) -> Option<Resource> {
    store.try_get(DEFAULT_NS, ty::CLUSTER, name)
}

/// Checks a Talos config patch for a backend speaking `api_version`: YAML documents that are
/// mappings, no forbidden document, none setting a forbidden field. Messages are Omni's.
pub(crate) fn check_config_patch_for(data: &str, api_version: u32) -> V {
    let docs: Vec<Value> = serde_saphyr::from_multiple(data)
        .map_err(|e| format!("config patch is not valid YAML: {e}"))?;
    for doc in &docs {
        match doc {
            Value::Null => continue,
            Value::Object(_) => {}
            _ => return Err("config patch document must be a mapping".into()),
        }
        let kind = doc.get("kind").and_then(Value::as_str);
        if let Some(kind) = kind
            && FORBIDDEN_PATCH_DOCUMENTS.contains(&kind)
        {
            return Err(format!(
                "the {kind:?} document is not allowed in the config patch"
            ));
        }
        let paths: Vec<&str> = match kind {
            None => FORBIDDEN_PATCH_FIELDS
                .into_iter()
                .chain((api_version >= 3).then_some(API3_FORBIDDEN_PATCH_FIELD))
                .collect(),
            Some(kind) => FORBIDDEN_DOCUMENT_FIELDS
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, path)| *path)
                .collect(),
        };
        for path in paths {
            let mut cur = doc;
            let mut found = true;
            for part in path.split('.') {
                match cur.get(part) {
                    Some(v) => cur = v,
                    None => {
                        found = false;
                        break;
                    }
                }
            }
            if found && !cur.is_null() {
                return Err(format!(
                    "overriding {path:?} is not allowed in the config patch"
                ));
            }
        }
        let roles = doc
            .pointer("/machine/features/kubernetesTalosAPIAccess/allowedRoles")
            .and_then(Value::as_array);
        if roles.is_some_and(|r| r.iter().any(|v| v.as_str() == Some("os:admin"))) {
            return Err(
                "role \"os:admin\" is not allowed in kubernetesTalosAPIAccess.allowedRoles".into(),
            );
        }
    }
    Ok(())
}

fn config_patch(store: &Store, op: Op<'_>) -> V {
    let (new, old) = match op {
        Op::Destroy(_) => return Ok(()),
        Op::Create(new) => {
            if let Some(c) = label(new, l::CLUSTER).and_then(|c| get_cluster(store, c))
                && tearing_down(&c)
            {
                return Err(format!("cluster {:?} is being torn down", id(&c)));
            }
            if let Some(ms) = label(new, l::MACHINE_SET)
                .and_then(|s| store.try_get(DEFAULT_NS, ty::MACHINE_SET, s))
                && tearing_down(&ms)
            {
                return Err(format!("machine set {:?} is being torn down", id(&ms)));
            }
            (new, None)
        }
        Op::Update { old, new } => (new, Some(old)),
    };
    let spec: ConfigPatchSpec = decode(new)?;
    if let Some(old) = old {
        let old_spec: ConfigPatchSpec = decode(old)?;
        if old_spec == spec {
            return Ok(());
        }
    }
    // Compressed payloads need Omni's zstd dictionary; the simulator stores them unchecked.
    if !spec.compressed_data.is_empty() {
        return Ok(());
    }
    check_config_patch_for(&spec.data, crate::sysversion::backend_api_version(store))
}

/// MachineInstallDiskConfig (backend API 3 only): exactly one of `disk` and `diskSelector`.
/// The CEL selector is evaluated against real disks by Omni; here only its presence counts.
fn install_disk_config(store: &Store, op: Op<'_>) -> V {
    let (Op::Create(new) | Op::Update { new, .. }) = op else {
        return Ok(());
    };
    let api = crate::sysversion::backend_api_version(store);
    if api < 3 {
        return Err(format!(
            "resource type {:?} is not supported by backend API version {api}",
            ty::MACHINE_INSTALL_DISK_CONFIG
        ));
    }
    let spec: MachineInstallDiskConfigSpec = decode(new)?;
    match (spec.disk.is_empty(), spec.disk_selector.is_empty()) {
        (true, true) => Err("either disk or disk selector must be set".into()),
        (false, false) => Err("disk and disk selector are mutually exclusive".into()),
        _ => Ok(()),
    }
}

fn role_labels(r: &Resource) -> (bool, bool) {
    let md = meta(r);
    (
        md.labels.contains_key(l::ROLE_CONTROLPLANE),
        md.labels.contains_key(l::ROLE_WORKER),
    )
}

fn immutable_label(key: &str, old: Option<&Resource>, new: &Resource) -> V {
    let value = label(new, key).unwrap_or_default();
    if value.is_empty() {
        return Err(format!("label {key:?} is required"));
    }
    if let Some(old) = old
        && label(old, key) != Some(value)
    {
        return Err(format!("label {key:?} is immutable"));
    }
    Ok(())
}

fn machine_set(store: &Store, op: Op<'_>) -> V {
    let (new, old) = match op {
        Op::Destroy(_) => return Ok(()),
        Op::Create(new) => (new, None),
        Op::Update { old, new } => (new, Some(old)),
    };
    immutable_label(l::CLUSTER, old, new)?;
    let cluster_name = label(new, l::CLUSTER).unwrap_or_default();
    let cluster = get_cluster(store, cluster_name)
        .ok_or_else(|| format!("cluster {cluster_name:?} does not exist"))?;
    if old.is_none() && tearing_down(&cluster) {
        return Err(format!("cluster {cluster_name:?} is being torn down"));
    }
    if locked(&cluster) {
        return Err(format!("cluster {cluster_name:?} is locked"));
    }
    let (cp, worker) = role_labels(new);
    if cp == worker {
        return Err(format!(
            "machine set must have exactly one of the labels {:?} or {:?}",
            l::ROLE_CONTROLPLANE,
            l::ROLE_WORKER
        ));
    }
    let set_id = id(new);
    let cp_id = format!("{cluster_name}-control-planes");
    if old.is_none() {
        if !set_id.starts_with(&format!("{cluster_name}-")) {
            return Err(format!(
                "machine set ID {set_id:?} must start with the cluster name prefix {:?}",
                format!("{cluster_name}-")
            ));
        }
        if cp && set_id != cp_id {
            return Err(format!("control plane machine set must have ID {cp_id:?}"));
        }
        if worker && set_id == cp_id {
            return Err(format!("worker machine set must not use ID {cp_id:?}"));
        }
    }
    let spec: MachineSetSpec = decode(new)?;
    let old_spec: Option<MachineSetSpec> = old.map(decode).transpose()?;
    if let Some(alloc) = &spec.machine_allocation {
        if alloc.name.is_empty() {
            return Err("machine class name is required".into());
        }
        let unlimited =
            alloc.allocation_type == machine_set_spec::machine_allocation::Type::Unlimited as i32;
        if unlimited && alloc.machine_count != 0 {
            return Err("machine count can only be set for the Static allocation type".into());
        }
        let name_changed = old_spec
            .as_ref()
            .and_then(|o| o.machine_allocation.as_ref())
            .is_none_or(|o| o.name != alloc.name);
        if name_changed {
            let class = store
                .try_get(DEFAULT_NS, ty::MACHINE_CLASS, &alloc.name)
                .ok_or_else(|| format!("machine class {:?} does not exist", alloc.name))?;
            let class: MachineClassSpec = decode(&class)?;
            if unlimited && class.auto_provision.is_some() {
                return Err(
                    "unlimited allocation is not allowed for auto-provisioning machine classes"
                        .into(),
                );
            }
        }
    }
    if let Some(old_spec) = &old_spec
        && old_spec.machine_allocation.is_some() != spec.machine_allocation.is_some()
    {
        let nodes = store.list_labeled(ty::MACHINE_SET_NODE, l::MACHINE_SET, set_id);
        if !nodes.is_empty() {
            return Err(
                "switching between manual and machine class allocation is not allowed while the machine set has nodes"
                    .into(),
            );
        }
    }
    Ok(())
}

fn machine_set_node(store: &Store, op: Op<'_>) -> V {
    let (new, old) = match op {
        Op::Destroy(old) => {
            if meta(old).annotations.contains_key(l::LOCKED) {
                return Err(format!("machine {:?} is locked", id(old)));
            }
            if let Some(c) = label(old, l::CLUSTER).and_then(|c| get_cluster(store, c))
                && locked(&c)
            {
                return Err(format!("cluster {:?} is locked", id(&c)));
            }
            return Ok(());
        }
        Op::Create(new) => (new, None),
        Op::Update { old, new } => (new, Some(old)),
    };
    immutable_label(l::CLUSTER, old, new)?;
    immutable_label(l::MACHINE_SET, old, new)?;
    let set_id = label(new, l::MACHINE_SET).unwrap_or_default();
    let set = store
        .try_get(DEFAULT_NS, ty::MACHINE_SET, set_id)
        .ok_or_else(|| format!("machine set {set_id:?} does not exist"))?;
    if tearing_down(&set) {
        return Err(format!("machine set {set_id:?} is being torn down"));
    }
    let set_spec: MachineSetSpec = decode(&set)?;
    if set_spec.machine_allocation.is_some() {
        return Err(format!(
            "machine set {set_id:?} is managed by a machine class, nodes cannot be added manually"
        ));
    }
    let cluster_name = label(new, l::CLUSTER).unwrap_or_default();
    let cluster = get_cluster(store, cluster_name)
        .ok_or_else(|| format!("cluster {cluster_name:?} does not exist"))?;
    if locked(&cluster) {
        return Err(format!("cluster {cluster_name:?} is locked"));
    }
    if tearing_down(&cluster) {
        return Err(format!("cluster {cluster_name:?} is being torn down"));
    }
    if meta(new).annotations.contains_key(l::LOCKED) && role_labels(&set).0 {
        return Err("locking machines in the control plane is not allowed".into());
    }
    Ok(())
}

fn kernel_args(op: Op<'_>) -> V {
    let (Op::Create(new) | Op::Update { new, .. }) = op else {
        return Ok(());
    };
    let spec: KernelArgsSpec = decode(new)?;
    if spec.args.len() > 64 {
        return Err(format!(
            "too many kernel args: {} (max 64)",
            spec.args.len()
        ));
    }
    for arg in &spec.args {
        if arg.len() > 256 {
            return Err(format!(
                "kernel arg is too long: {} bytes (max 256)",
                arg.len()
            ));
        }
        if has_control(arg) {
            return Err("kernel arg contains control characters".into());
        }
    }
    Ok(())
}

fn extensions(store: &Store, op: Op<'_>) -> V {
    let (Op::Create(new) | Op::Update { new, .. }) = op else {
        return Ok(());
    };
    let spec: ExtensionsConfigurationSpec = decode(new)?;
    if spec.extensions.is_empty() {
        return Ok(());
    }
    let cluster = label(new, l::CLUSTER)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| format!("label {:?} is required", l::CLUSTER))?;
    if get_cluster(store, cluster).is_none() {
        return Err(format!("cluster {cluster:?} does not exist"));
    }
    Ok(())
}

fn manifest_group(op: Op<'_>) -> V {
    let (Op::Create(new) | Op::Update { new, .. }) = op else {
        return Ok(());
    };
    let spec: KubernetesManifestGroupSpec = decode(new)?;
    if spec.mode == kubernetes_manifest_group_spec::Mode::Unknown as i32 {
        return Err("manifest group mode must be set".into());
    }
    if label(new, l::CLUSTER).is_none_or(str::is_empty) {
        return Err(format!("label {:?} is required", l::CLUSTER));
    }
    if meta(new).labels.contains_key(l::SYSTEM_MANIFEST) {
        return Err(format!("label {:?} is not allowed", l::SYSTEM_MANIFEST));
    }
    if spec.compressed_data.is_empty() {
        check_manifests(&spec.data)?;
    }
    Ok(())
}

/// Each non-empty document must be a Kubernetes object with `apiVersion` and `kind`.
fn check_manifests(data: &str) -> V {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(data).map_err(|e| format!("failed to parse manifests: {e}"))?;
    for doc in docs {
        match doc {
            Value::Null => {}
            Value::Object(m) if m.contains_key("apiVersion") && m.contains_key("kind") => {}
            _ => {
                return Err("manifest must be a Kubernetes object with apiVersion and kind".into());
            }
        }
    }
    Ok(())
}

fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn health_check(op: Op<'_>) -> V {
    let (Op::Create(new) | Op::Update { new, .. }) = op else {
        return Ok(());
    };
    // Omni's wording (`internal/backend/runtime/omni/validations/kubernetes_healthchecks.go`).
    let spec: KubernetesHealthCheckSpec = decode(new)?;
    if spec.job.trim().is_empty() {
        return Err("healthcheck job manifest must be set".into());
    }
    let name = format!("omni-healthcheck-{}", id(new));
    if !is_dns1123_subdomain(&name) {
        return Err(format!(
            "healthcheck ID {:?} cannot be used to build the runner name {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            id(new)
        ));
    }
    let doc: Value = serde_saphyr::from_str(&spec.job)
        .map_err(|e| format!("healthcheck job manifest is invalid: {e}"))?;
    if doc.get("kind").and_then(Value::as_str) != Some("Job") {
        return Err("healthcheck job manifest is invalid: kind must be Job".into());
    }
    if let Some(interval) = &spec.interval
        && (interval.seconds > 0 || interval.nanos > 0)
        && interval.seconds < 5
    {
        return Err("healthcheck interval must be at least 5s".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`check_config_patch_for`] at backend API 2.
    fn check_config_patch(data: &str) -> V {
        check_config_patch_for(data, 2)
    }

    #[test]
    fn semver_is_strict() {
        assert_eq!(
            parse_semver("1.35.1"),
            Some(Semver {
                major: 1,
                minor: 35,
                patch: 1
            })
        );
        assert!(parse_semver("1.10.0-beta.1").is_some());
        for bad in ["v1.9.5", "1.9", "1.9.5.1", "01.9.5", "", "1.x.5"] {
            assert_eq!(parse_semver(bad), None, "{bad}");
        }
    }

    #[test]
    fn config_patch_rules() {
        assert!(check_config_patch("machine:\n  install:\n    disk: /dev/sda\n").is_ok());
        assert!(check_config_patch("").is_ok());
        assert!(check_config_patch("- a\n").is_err());
        assert!(
            check_config_patch("cluster:\n  controlPlane:\n    endpoint: https://x\n").is_err()
        );
        // Neighbouring, allowed fields do not trip the check.
        assert!(
            check_config_patch("cluster:\n  controlPlane:\n    localAPIServerPort: 1\n").is_ok()
        );
        assert!(check_config_patch("a: 1\n---\nmachine:\n  ca: {}\n").is_err());
    }

    #[test]
    fn omni_1_10_refuses_cluster_keys_in_patches() {
        for (patch, message) in [
            (
                "cluster:\n  ca:\n    crt: x\n",
                r#"overriding "cluster.ca" is not allowed in the config patch"#,
            ),
            (
                "cluster:\n  serviceAccount:\n    key: x\n",
                r#"overriding "cluster.serviceAccount" is not allowed in the config patch"#,
            ),
            (
                "apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n",
                r#"the "KubeAPIServerCAConfig" document is not allowed in the config patch"#,
            ),
            (
                "machine: {}\n---\napiVersion: v1alpha1\nkind: KubeAggregatorCAConfig\n",
                r#"the "KubeAggregatorCAConfig" document is not allowed in the config patch"#,
            ),
            (
                "apiVersion: v1alpha1\nkind: KubeServiceAccountConfig\nissuer:\n  privateKey: x\n",
                r#"overriding "issuer.privateKey" is not allowed in the config patch"#,
            ),
        ] {
            assert_eq!(
                check_config_patch(patch),
                Err(message.to_string()),
                "{patch}"
            );
        }
        // The same document without the key, and `cluster.ca` outside the v1alpha1 document.
        assert!(
            check_config_patch(
                "apiVersion: v1alpha1\nkind: KubeServiceAccountConfig\nissuer:\n  url: https://x\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn install_disk_in_a_patch_is_refused_from_api_3_on() {
        let patch = "machine:\n  install:\n    disk: /dev/sda\n";
        assert!(check_config_patch_for(patch, 2).is_ok());
        assert_eq!(
            check_config_patch_for(patch, 3),
            Err(r#"overriding "machine.install.disk" is not allowed in the config patch"#.into())
        );
    }
}
