//! OmniSecretSync: copies a management-cluster Secret into a workload cluster.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Condition, DeletionPolicy, KubeconfigSecretRef, LocalObjectReference, conditions_schema,
    date_time_schema, delete_orphan_schema, is_blank,
};
use super::validation::{FieldError, Validation};

/// Desired state of an OmniSecretSync: which Secret to copy, into which workload cluster
/// (through which kubeconfig Secret) and under which name.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniSecretSync",
    plural = "omnisecretsyncs",
    singular = "omnisecretsync",
    namespaced,
    status = "OmniSecretSyncStatus",
    shortname = "oss",
    category = "omni",
    doc = "Copies the data of a Secret in this namespace into a Secret of a workload cluster.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(
        name = "Target Namespace",
        type_ = "string",
        json_path = ".spec.targetSecretRef.namespace"
    ),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.targetSecretRef.name"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OmniSecretSyncSpec {
    /// The OmniCluster (same namespace) the target belongs to; the sync waits until it exists.
    pub cluster_ref: LocalObjectReference,
    /// Secret (same namespace) with the workload-cluster kubeconfig. Cannot be changed after
    /// creation, so Secret data cannot be redirected to another cluster.
    pub kubeconfig_secret_ref: KubeconfigSecretRef,
    /// Stop acting on the target (no copy, no drift repair) while keeping the object, its status and its
    /// finalizer; `Ready` keeps its last state and `Suspended=True` says so. Deletion still
    /// applies the deletion policy. Resuming acts once on what changed meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// When the object first acts: `ClusterReady` (the default) waits for the OmniCluster's
    /// `Ready`; `KubernetesAPIReady` only for Omni to report the cluster's Kubernetes API
    /// ready (for what the cluster needs to become Ready, such as its CNI); `ClusterExists` as
    /// soon as the OmniCluster exists (the original operator's behaviour). Once it has acted,
    /// the cluster's later state does not hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::start_when_schema")]
    pub start_when: Option<super::common::StartWhen>,
    /// Secret in this namespace whose whole `data` is copied; `data` entries add keys to it
    /// or replace some. Required unless `sources` and `data` say what the copy holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_secret_ref: Option<LocalObjectReference>,
    /// Further Secrets of this namespace that `data` reads, each by its `alias` (else its
    /// name); `sourceSecretRef`, when set, is read by its name too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub sources: Vec<SecretSource>,
    /// The keys of the copy, each taken from a source's key as is or rendered by a template
    /// over the sources' values (docs/workload-access.md#data-mapping).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub data: Vec<DataItem>,
    /// Where the copy is written in the workload cluster.
    pub target_secret_ref: WorkloadSecretRef,
    /// Secret type of the copy; defaults to the type of `sourceSecretRef`, else `Opaque`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Labels added to the copy (operator labels take precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to the copy (operator annotations take precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Create the target namespace when it is missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_namespace: bool,
    /// `Delete` removes the copy (if this sync owns it) when the sync is deleted; `Orphan` keeps it.
    #[schemars(schema_with = "delete_orphan_schema")]
    pub deletion_policy: DeletionPolicy,
    /// ServiceAccount (same namespace) whose identity reads the Secrets this object references:
    /// the operator impersonates it, so the object can use only what the ServiceAccount may
    /// read. Unset: the operator's `--default-service-account`, else the operator's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
}

/// Where the copy goes in the workload cluster: one namespace, or every namespace whose labels
/// match a selector.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSecretRef {
    /// Secret name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Namespace in the workload cluster; exactly one of `namespace` and `namespaceSelector`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The workload cluster's Namespaces to copy into, by their labels (`matchLabels`,
    /// `matchExpressions`; an empty selector is refused): a namespace that starts matching
    /// (or is created) gets the copy, one that stops matching loses the sync's copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "namespace_selector_schema")]
    pub namespace_selector: Option<NamespaceSelector>,
}

/// The schema of a set's `clusterSelector`, its words about OmniClusters made words about
/// Namespaces.
fn namespace_selector_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<NamespaceSelector>();
    let words = [
        (
            "matchLabels",
            "Labels a Namespace must carry with exactly these values.",
        ),
        (
            "matchExpressions",
            "Requirements on a Namespace's labels, all of which must hold.",
        ),
    ];
    if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
        for (field, description) in words {
            if let Some(serde_json::Value::Object(p)) = properties.get_mut(field) {
                p.insert("description".into(), description.into());
                if let Some(serde_json::Value::Object(items)) = p.get_mut("items") {
                    items.insert(
                        "description".into(),
                        "One requirement of the selector.".into(),
                    );
                }
            }
        }
    }
    schema
}

/// A label selector over the workload cluster's Namespaces (the shape of a set's
/// `clusterSelector`).
pub type NamespaceSelector = super::fleet::ClusterSelector;

/// A Secret of the sync's namespace that `data` reads.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SecretSource {
    /// The Secret's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The name `data` uses for it (`fromSecret`, `sources.<alias>` in templates): letters,
    /// digits and `_`, not starting with a digit. Defaults to the Secret's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

impl SecretSource {
    /// The name `data` refers to it by.
    pub fn handle(&self) -> &str {
        self.alias.as_deref().unwrap_or(&self.name)
    }
}

/// One key of the copy: a source's key as is (`fromSecret`, `fromKey`), or a template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataItem {
    /// The key in the copy.
    #[schemars(length(min = 1))]
    pub key: String,
    /// The source (alias, else Secret name) whose key is copied byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_secret: Option<String>,
    /// The key of that source; defaults to `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_key: Option<String>,
    /// A minijinja template whose output (text) is the value: `sources.<alias>.<key>` holds
    /// each source's values, `cluster` the OmniCluster's facts; filters `b64encode`,
    /// `b64decode` and `tojson`. Sandboxed like a set's templates; in an OmniSecretSyncSet it
    /// is rendered by the generated sync, not by the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

impl OmniSecretSyncSpec {
    /// Every Secret the sync reads data from: (its handle, its name, the field naming it),
    /// `sourceSecretRef` first.
    pub fn source_refs(&self) -> Vec<(&str, &str, String)> {
        let first = self.source_secret_ref.iter().map(|r| {
            (
                r.name.as_str(),
                r.name.as_str(),
                "spec.sourceSecretRef".to_string(),
            )
        });
        let rest = self
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| (s.handle(), s.name.as_str(), format!("spec.sources[{i}]")));
        first.chain(rest).collect()
    }
}

/// Observed state of an OmniSecretSync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniSecretSyncStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Synced` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Name of the referenced OmniCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<String>,
    /// Name of the kubeconfig Secret used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<String>,
    /// Key of the kubeconfig in that Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_key: Option<String>,
    /// Name of the source Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_secret_ref: Option<String>,
    /// With `namespaceSelector`: up to twenty of the namespaces holding the copy, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synced_namespaces: Vec<String>,
    /// With `namespaceSelector`: how many namespaces hold the copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_namespace_count: Option<u32>,
    /// With `namespaceSelector`: up to ten matching namespaces the copy could not be written
    /// to, with their reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_failures: Vec<NamespaceFailure>,
    /// Name of the workload Secret last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_secret_ref: Option<String>,
    /// Workload namespace of that Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    /// Secret type written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_type: Option<String>,
    /// Lowercase hex SHA-256 of the synced type and data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_hash: Option<String>,
    /// When a sync was last attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_attempt_time: Option<jiff::Timestamp>,
    /// When a sync last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_sync_time: Option<jiff::Timestamp>,
    /// Error of the last attempt; empty after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of the `omni.texashpc.com/force-at` annotation last handled (the copy written once per value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
}

/// A matching namespace of the workload cluster the copy could not be written to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct NamespaceFailure {
    /// The workload namespace.
    pub namespace: String,
    /// Why, as a condition reason (`TargetNotOwned`, `SyncFailed`, `Timeout`).
    pub reason: String,
    /// What happened, naming the Secret.
    pub message: String,
}

/// Admission rules for OmniSecretSync. On update the kubeconfig Secret reference is immutable.
pub fn validate(new: &OmniSecretSync, old: Option<&OmniSecretSync>) -> Validation {
    let mut v = Validation::new();
    if let Some(e) =
        super::common::service_account_name_error(new.spec.service_account_name.as_deref())
    {
        v.push(e);
    }
    let spec = &new.spec;
    if is_blank(&spec.cluster_ref.name) {
        v.push(FieldError::required(
            "spec.clusterRef.name",
            "clusterRef.name is required",
        ));
    }
    if is_blank(&spec.kubeconfig_secret_ref.name) {
        v.push(FieldError::required(
            "spec.kubeconfigSecretRef.name",
            "kubeconfig Secret name is required",
        ));
    }
    if is_blank(&spec.kubeconfig_secret_ref.key) {
        v.push(FieldError::required(
            "spec.kubeconfigSecretRef.key",
            "kubeconfig Secret key must not be blank",
        ));
    }
    validate_sources(spec, &mut v);
    validate_data(spec, &mut v);
    validate_target(spec, &mut v);
    if let Some(t) = spec.type_.as_deref()
        && is_blank(t)
    {
        v.push(FieldError::invalid(
            "spec.type",
            t,
            "type must not be blank",
        ));
    }
    if let Some(old) = old {
        if old.spec.kubeconfig_secret_ref.name != spec.kubeconfig_secret_ref.name {
            v.push(FieldError::forbidden(
                "spec.kubeconfigSecretRef.name",
                "kubeconfigSecretRef.name is immutable",
            ));
        }
        if old.spec.kubeconfig_secret_ref.key != spec.kubeconfig_secret_ref.key {
            v.push(FieldError::forbidden(
                "spec.kubeconfigSecretRef.key",
                "kubeconfigSecretRef.key is immutable",
            ));
        }
    }
    // No warning on every apply (the original's): see OmniHelmRelease's rules.
    v
}

/// `sourceSecretRef` and `sources`: at least one Secret, names given, handles unique and
/// usable in a template.
fn validate_sources(spec: &OmniSecretSyncSpec, v: &mut Validation) {
    match &spec.source_secret_ref {
        Some(r) if is_blank(&r.name) => v.push(FieldError::required(
            "spec.sourceSecretRef.name",
            "source Secret name is required",
        )),
        Some(_) => {}
        None if spec.data.is_empty() => v.push(FieldError::required(
            "spec.sourceSecretRef",
            "set sourceSecretRef (copy a Secret), or data (the keys of the copy) with its sources",
        )),
        None => {}
    }
    if spec.sources.len() > MAX_SOURCES {
        v.push(FieldError::invalid(
            "spec.sources",
            spec.sources.len().to_string(),
            format!("at most {MAX_SOURCES} sources"),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (handle, name, field) in spec.source_refs() {
        if is_blank(name) {
            if field != "spec.sourceSecretRef" {
                v.push(FieldError::required(
                    format!("{field}.name"),
                    "source Secret name is required",
                ));
            }
            continue;
        }
        if !seen.insert(handle) {
            let at = if handle == name { "name" } else { "alias" };
            v.push(FieldError::duplicate(format!("{field}.{at}"), handle));
        }
    }
    for (i, s) in spec.sources.iter().enumerate() {
        if let Some(alias) = &s.alias
            && !is_identifier(alias)
        {
            v.push(FieldError::invalid(
                format!("spec.sources[{i}].alias"),
                alias,
                "an alias is letters, digits and _, not starting with a digit",
            ));
        }
    }
}

/// Most Secrets one sync reads.
pub const MAX_SOURCES: usize = 16;
/// Most keys `data` names.
pub const MAX_DATA_ITEMS: usize = 64;

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A Secret data key: letters, digits, `-`, `_` and `.`, at most 253 characters.
fn is_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && key != "."
        && key != ".."
}

/// `data`: valid unique keys, each from exactly one of a source's key and a template, the
/// source known, the template compiling.
fn validate_data(spec: &OmniSecretSyncSpec, v: &mut Validation) {
    if spec.data.len() > MAX_DATA_ITEMS {
        v.push(FieldError::invalid(
            "spec.data",
            spec.data.len().to_string(),
            format!("at most {MAX_DATA_ITEMS} keys"),
        ));
    }
    let handles: Vec<&str> = spec.source_refs().into_iter().map(|(h, _, _)| h).collect();
    let mut keys = std::collections::BTreeSet::new();
    for (i, item) in spec.data.iter().enumerate() {
        let at = format!("spec.data[{i}]");
        if !is_secret_key(&item.key) {
            v.push(FieldError::invalid(
                format!("{at}.key"),
                &item.key,
                "a Secret key is letters, digits, '-', '_' and '.' (at most 253)",
            ));
        } else if !keys.insert(item.key.as_str()) {
            v.push(FieldError::duplicate(format!("{at}.key"), &item.key));
        }
        match (&item.from_secret, &item.template) {
            (Some(_), Some(_)) => v.push(FieldError::forbidden(
                at.clone(),
                "set either fromSecret or template, not both",
            )),
            (None, None) => v.push(FieldError::required(
                at.clone(),
                "set fromSecret (a source's key as is) or template",
            )),
            (Some(from), None) if !handles.contains(&from.as_str()) => {
                v.push(FieldError::invalid(
                    format!("{at}.fromSecret"),
                    from,
                    "not a source: name sourceSecretRef, or a source of spec.sources by its alias (else its name)",
                ));
            }
            (Some(_), None) => {}
            (None, Some(template)) => {
                if let Some(e) =
                    crate::domain::secret_data::check_syntax(&format!("{at}.template"), template)
                {
                    v.push(super::fleet::template_error(e));
                }
            }
        }
        match (&item.from_key, &item.from_secret) {
            (Some(_), None) => v.push(FieldError::forbidden(
                format!("{at}.fromKey"),
                "fromKey goes with fromSecret",
            )),
            (Some(k), Some(_)) if !is_secret_key(k) => v.push(FieldError::invalid(
                format!("{at}.fromKey"),
                k,
                "a Secret key is letters, digits, '-', '_' and '.' (at most 253)",
            )),
            _ => {}
        }
    }
}

/// `targetSecretRef`: a name, and exactly one of a namespace and a valid namespace selector.
fn validate_target(spec: &OmniSecretSyncSpec, v: &mut Validation) {
    let t = &spec.target_secret_ref;
    if is_blank(&t.name) {
        v.push(FieldError::required(
            "spec.targetSecretRef.name",
            "target Secret name is required",
        ));
    }
    match &t.namespace_selector {
        None if is_blank(&t.namespace) => v.push(FieldError::required(
            "spec.targetSecretRef.namespace",
            "target Secret namespace is required",
        )),
        None => {}
        Some(_) if !t.namespace.is_empty() => v.push(FieldError::forbidden(
            "spec.targetSecretRef.namespaceSelector",
            "set either namespace or namespaceSelector, not both",
        )),
        Some(selector) => {
            selector.validate_at("spec.targetSecretRef.namespaceSelector", "namespace", v);
            if spec.create_namespace {
                v.push(FieldError::forbidden(
                    "spec.createNamespace",
                    "a namespaceSelector copies into namespaces that exist; createNamespace goes with namespace",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync(spec: serde_json::Value) -> OmniSecretSync {
        let mut base = serde_json::json!({
            "clusterRef": {"name": "prod"},
            "kubeconfigSecretRef": {"name": "kc", "key": "kubeconfig"},
            "targetSecretRef": {"name": "dst", "namespace": "apps"},
            "deletionPolicy": "Delete"
        });
        if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                b.insert(k.clone(), v.clone());
            }
        }
        let spec = serde_json::from_value(base).unwrap_or_else(|e| panic!("{e}"));
        OmniSecretSync::new("s", spec)
    }

    fn errors(spec: serde_json::Value) -> Vec<String> {
        validate(&sync(spec), None)
            .errors
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn a_sync_of_one_source_is_valid_as_before() {
        assert!(errors(serde_json::json!({"sourceSecretRef": {"name": "src"}})).is_empty());
        assert_eq!(
            errors(serde_json::json!({})),
            [
                "spec.sourceSecretRef: Required value: set sourceSecretRef (copy a Secret), or data (the keys of the copy) with its sources"
            ]
        );
    }

    #[test]
    fn data_names_known_sources_once_each_and_its_templates_compile() {
        let ok = serde_json::json!({
            "sourceSecretRef": {"name": "pull"},
            "sources": [{"name": "registry-login", "alias": "login"}],
            "data": [
                {"key": ".dockerconfigjson", "fromSecret": "pull"},
                {"key": "user", "fromSecret": "login", "fromKey": "username"},
                {"key": "auth", "template": "{{ sources.login.username | b64encode }}"}
            ]
        });
        assert!(errors(ok).is_empty());
        let bad = errors(serde_json::json!({
            "sources": [{"name": "a", "alias": "1x"}, {"name": "a"}, {"name": "b", "alias": "a"}],
            "data": [
                {"key": "k", "fromSecret": "nope"},
                {"key": "k", "template": "x"},
                {"key": "bad key", "fromSecret": "a", "template": "x"},
                {"key": "t", "template": "line one\n{{ broken "},
                {"key": "u"},
                {"key": "v", "fromKey": "w", "template": "x"}
            ]
        }));
        let expected = [
            r#"spec.sources[0].alias: Invalid value: "1x""#,
            r#"spec.sources[2].alias: Duplicate value: "a""#,
            r#"spec.data[0].fromSecret: Invalid value: "nope""#,
            r#"spec.data[1].key: Duplicate value: "k""#,
            r#"spec.data[2].key: Invalid value: "bad key""#,
            "spec.data[2]: Forbidden: set either fromSecret or template, not both",
            r#"spec.data[3].template: Invalid value: "": template error at line 2: syntax error"#,
            "spec.data[4]: Required value: set fromSecret (a source's key as is) or template",
            "spec.data[5].fromKey: Forbidden: fromKey goes with fromSecret",
        ];
        for e in expected {
            assert!(bad.iter().any(|b| b.starts_with(e)), "{e} not in {bad:#?}");
        }
        assert_eq!(bad.len(), expected.len(), "{bad:#?}");
    }

    #[test]
    fn a_namespace_selector_replaces_the_namespace() {
        let selector = serde_json::json!({"matchLabels": {"pull-secret": "yes"}});
        let target = |extra: serde_json::Value| {
            let mut t = serde_json::json!({"name": "dst"});
            if let (Some(t), Some(e)) = (t.as_object_mut(), extra.as_object()) {
                t.extend(e.clone());
            }
            serde_json::json!({"sourceSecretRef": {"name": "src"}, "targetSecretRef": t})
        };
        assert!(errors(target(serde_json::json!({"namespaceSelector": selector}))).is_empty());
        assert_eq!(
            errors(target(
                serde_json::json!({"namespace": "apps", "namespaceSelector": selector})
            )),
            [
                "spec.targetSecretRef.namespaceSelector: Forbidden: set either namespace or namespaceSelector, not both"
            ]
        );
        assert_eq!(
            errors(target(serde_json::json!({}))),
            ["spec.targetSecretRef.namespace: Required value: target Secret namespace is required"]
        );
        let empty = errors(target(serde_json::json!({"namespaceSelector": {}})));
        assert_eq!(empty.len(), 1, "{empty:?}");
        assert!(empty[0].starts_with("spec.targetSecretRef.namespaceSelector: Required value: an empty selector matches no namespace"));
        let mut with_create = target(serde_json::json!({"namespaceSelector": {
            "matchExpressions": [{"key": "team", "operator": "In"}]
        }}));
        with_create["createNamespace"] = true.into();
        let found = errors(with_create);
        assert!(
            found.iter().any(|e| e.starts_with(
                "spec.targetSecretRef.namespaceSelector.matchExpressions[0].values: Required value"
            )),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|e| e.starts_with("spec.createNamespace: Forbidden")),
            "{found:?}"
        );
    }
}
