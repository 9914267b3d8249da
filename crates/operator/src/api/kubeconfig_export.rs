//! OmniKubeconfigExport: a scoped, rotating workload-cluster kubeconfig exported from Omni into
//! a Secret of the management cluster.

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::cluster::duration_error;
use super::common::{
    Condition, DeletionPolicy, LocalObjectReference, conditions_schema, date_time_schema,
    default_kubeconfig_key, delete_orphan_schema, is_blank, string_set_schema,
};
use super::duration::{Bounds, DurationError, DurationField, GoDuration, MIN_INTERVAL};
use super::validation::{FieldError, Validation};

/// Desired state of an OmniKubeconfigExport: which cluster, which identity, how long the
/// credential lives and where it is written.
// Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "omni.texashpc.com",
    version = "v1alpha1",
    kind = "OmniKubeconfigExport",
    plural = "omnikubeconfigexports",
    singular = "omnikubeconfigexport",
    namespaced,
    status = "OmniKubeconfigExportStatus",
    shortname = "okx",
    category = "omni",
    doc = "Exports a service-account kubeconfig for an Omni cluster into a Secret and rotates it before it expires.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(
        name = "Secret",
        type_ = "string",
        json_path = ".status.targetSecretRef"
    ),
    // A `date` column prints the time since, which for a future expiry is `<invalid>`; the
    // timestamp itself is what a reader needs.
    printcolumn(
        name = "Expires",
        type_ = "string",
        json_path = ".status.expirationTime"
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
pub struct OmniKubeconfigExportSpec {
    /// The OmniCluster (same namespace) to export a kubeconfig for.
    pub cluster_ref: LocalObjectReference,
    /// Secret the kubeconfig is written to.
    pub target_secret_ref: TargetSecretRef,
    /// Identity embedded in the kubeconfig.
    pub service_account: ExportServiceAccount,
    /// Namespace set on the kubeconfig's current context; Omni's choice is kept when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub context_namespace: Option<String>,
    /// Lifetime of each exported kubeconfig, in Go duration syntax (`24h`).
    pub ttl: DurationField,
    /// Rotate this long before expiry (`4h`); must be shorter than `ttl`. Without it the
    /// kubeconfig is rotated when it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<DurationField>,
    /// `Delete` (the default) removes the Secret (if this export owns it) when the export is
    /// deleted; `Orphan` keeps it.
    #[serde(default = "default_deletion_policy")]
    #[schemars(schema_with = "delete_orphan_schema")]
    pub deletion_policy: DeletionPolicy,
    /// Shape of the target Secret: `Kubeconfig` (the default) writes the kubeconfig under
    /// `targetSecretRef.key`; `ArgoCDCluster` writes an Argo CD cluster Secret (`name`, `server`,
    /// `config`, labelled `argocd.argoproj.io/secret-type: cluster`); `FluxValue` writes the
    /// kubeconfig under `value`, the key Flux's `spec.kubeConfig.secretRef` reads by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "export_format_schema")]
    pub format: Option<ExportFormat>,
    /// Stop acting on the target (no mint, rotation or Secret write) while keeping the object, its status and its
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
}

pub(crate) fn export_format_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ExportFormat::VALUES })
}

/// The shape of the Secret an export writes (`spec.format`). Only these spellings pass the
/// CRD schema, which the API server checks before any webhook runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// The kubeconfig under `targetSecretRef.key` (the default, and the only shape before
    /// `spec.format` existed).
    Kubeconfig,
    /// An Argo CD declarative cluster Secret.
    #[serde(rename = "ArgoCDCluster")]
    ArgoCdCluster,
    /// The kubeconfig under `value`, as Flux reads a remote cluster's kubeconfig.
    FluxValue,
}

impl ExportFormat {
    /// Accepted spellings of `spec.format` (also its serde names).
    pub(crate) const VALUES: [&'static str; 3] = ["Kubeconfig", "ArgoCDCluster", "FluxValue"];

    /// Parses the exact spelling (of `spec.format`, or of the annotation recording the shape
    /// last written); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Kubeconfig" => Some(Self::Kubeconfig),
            "ArgoCDCluster" => Some(Self::ArgoCdCluster),
            "FluxValue" => Some(Self::FluxValue),
            _ => None,
        }
    }

    /// The spelling in `spec.format`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kubeconfig => "Kubeconfig",
            Self::ArgoCdCluster => "ArgoCDCluster",
            Self::FluxValue => "FluxValue",
        }
    }
}

impl std::fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the exported kubeconfig is stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TargetSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Namespace of the Secret; defaults to the export's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,
    /// Data key holding the kubeconfig.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

/// The Omni service account the kubeconfig authenticates as.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportServiceAccount {
    /// User name presented to the workload API server.
    #[schemars(length(min = 1))]
    pub user: String,
    /// Groups presented to the workload API server (at least one, no duplicates). Bind RBAC
    /// to them in the workload cluster; the operator creates none.
    #[schemars(schema_with = "string_set_schema")]
    pub groups: Vec<String>,
    /// Must be true to export a kubeconfig for a cluster-admin-equivalent identity: the
    /// `system:masters` group, any other `system:` user or group but `system:authenticated`,
    /// `kubeadm:cluster-admins`, or one the deployment adds. The operator may be run so that it
    /// is never honoured (`--allow-cluster-admin-exports=false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_cluster_admin: bool,
}

/// Without `spec.deletionPolicy` the Secret goes with its export: a credential should not
/// outlive the object that declared it (the original made the field required; manifests
/// written for it always set it).
fn default_deletion_policy() -> DeletionPolicy {
    DeletionPolicy::Delete
}

/// Observed state of an OmniKubeconfigExport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OmniKubeconfigExportStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Exported` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// OmniConnection used to reach Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_ref: Option<String>,
    /// Omni endpoint used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Name of the referenced OmniCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<String>,
    /// Name of the cluster in Omni.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// Name of the Secret holding the kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_secret_ref: Option<String>,
    /// Namespace of that Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_secret_namespace: Option<String>,
    /// Data key of the kubeconfig in that Secret (`value` for format `FluxValue`, `config` for
    /// `ArgoCDCluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_secret_key: Option<String>,
    /// User embedded in the kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_user: Option<String>,
    /// Groups embedded in the kubeconfig.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_account_groups: Vec<String>,
    /// Lowercase hex SHA-256 of the kubeconfig stored in the Secret (for format
    /// `ArgoCDCluster`, of its `name`, `server` and `config` together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_hash: Option<String>,
    /// When the exported kubeconfig expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub expiration_time: Option<jiff::Timestamp>,
    /// When the next rotation is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub next_rotation_time: Option<jiff::Timestamp>,
    /// When the kubeconfig was last exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_rotation_time: Option<jiff::Timestamp>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of the `omni.texashpc.com/force-at` annotation last handled (a kubeconfig minted once per value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
}

impl OmniKubeconfigExport {
    /// The identities, consent and lifetime this export asks Omni for, with their field paths
    /// (for [`crate::domain::identity_policy`]). An unparseable ttl counts as zero: its own
    /// rule reports it.
    pub(crate) fn mint_request(&self) -> crate::domain::identity_policy::MintRequest<'_> {
        use crate::domain::identity_policy::{MintRequest, Named};
        let sa = &self.spec.service_account;
        let mut identities = vec![Named {
            field: "spec.serviceAccount.user".into(),
            name: &sa.user,
        }];
        identities.extend(sa.groups.iter().enumerate().map(|(i, g)| Named {
            field: format!("spec.serviceAccount.groups[{i}]").into(),
            name: g,
        }));
        MintRequest {
            identities,
            consent_field: "spec.serviceAccount.allowClusterAdmin",
            consent_hint: "serviceAccount.allowClusterAdmin: true",
            allow_cluster_admin: sa.allow_cluster_admin,
            ttl_field: "spec.ttl",
            ttl: self
                .spec
                .ttl
                .duration()
                .ok()
                .and_then(|d| d.to_std())
                .unwrap_or_default(),
        }
    }

    /// Namespace of the target Secret: `spec.targetSecretRef.namespace`, else the export's own.
    pub fn effective_target_namespace(&self) -> String {
        match self.spec.target_secret_ref.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ => self.metadata.namespace.clone().unwrap_or_default(),
        }
    }

    /// Data key of the target Secret (`kubeconfig` when blank).
    pub fn effective_target_key(&self) -> String {
        let key = self.spec.target_secret_ref.key.trim();
        if key.is_empty() {
            default_kubeconfig_key()
        } else {
            key.to_string()
        }
    }

    /// `spec.format`, `Kubeconfig` when absent.
    pub fn format(&self) -> ExportFormat {
        self.spec.format.unwrap_or(ExportFormat::Kubeconfig)
    }

    /// Data key holding the credential in the target Secret: the kubeconfig key for
    /// `Kubeconfig`, `value` for `FluxValue`, `config` for `ArgoCDCluster`.
    pub(crate) fn credential_key(&self) -> String {
        match self.format() {
            ExportFormat::FluxValue => "value".to_string(),
            ExportFormat::ArgoCdCluster => "config".to_string(),
            ExportFormat::Kubeconfig => self.effective_target_key(),
        }
    }

    /// Parsed `spec.renewBefore`; `Ok(None)` when unset or empty.
    pub fn renew_before(&self) -> Result<Option<GoDuration>, &DurationError> {
        match &self.spec.renew_before {
            Some(renew_before) if !renew_before.is_empty() => renew_before.duration().map(Some),
            _ => Ok(None),
        }
    }
}

impl OmniKubeconfigExport {
    /// `targetSecretRef.key` names the kubeconfig's key in the `Kubeconfig` shape only; the
    /// other shapes have the keys their consumer reads, so a key set with them is a mistake.
    fn key_format_problem(&self) -> Option<String> {
        let format = self.format();
        (format != ExportFormat::Kubeconfig
            && self.spec.target_secret_ref.key.trim() != default_kubeconfig_key())
        .then(|| {
            format!(
                "targetSecretRef.key applies only to format Kubeconfig; format {format} writes the keys its consumer reads"
            )
        })
    }
}

/// What the spec hash covers (docs/parity.md#the-spec-hash); field order is part of the hash.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SpecHashPayload<'a> {
    version: &'static str,
    cluster_name: &'a str,
    target_secret_key: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    context_namespace: &'a str,
    service_account_user: &'a str,
    service_account_groups: &'a [String],
    ttl: String,
    /// Absent for `Kubeconfig`, so the hashes of exports written before `spec.format` existed
    /// (and the original operator's) stay as they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'static str>,
}

impl OmniKubeconfigExport {
    /// Lowercase hex SHA-256 of everything that shapes the exported kubeconfig: the remote
    /// cluster name (`cluster_name`, the OmniCluster's effective name), effective target key,
    /// context namespace, user, groups (in spec order), ttl (in Go's `24h0m0s` form) and the
    /// format unless it is `Kubeconfig`. A change
    /// of this hash forces a new export; Secret name/namespace, `renewBefore`,
    /// `deletionPolicy` and `allowClusterAdmin` are deliberately not covered.
    pub fn spec_hash(&self, cluster_name: &str) -> Result<String, &DurationError> {
        let format = self.format();
        let payload = SpecHashPayload {
            version: "v1",
            cluster_name,
            target_secret_key: &self.effective_target_key(),
            context_namespace: self.spec.context_namespace.as_deref().unwrap_or_default(),
            service_account_user: &self.spec.service_account.user,
            service_account_groups: &self.spec.service_account.groups,
            ttl: self.spec.ttl.duration()?.to_string(),
            format: (format != ExportFormat::Kubeconfig).then_some(format.as_str()),
        };
        // Serialising borrowed strings into JSON cannot fail.
        let json = serde_json::to_string(&payload).unwrap_or_default();
        Ok(hex::encode(sha2::Sha256::digest(
            go_json_escape(&json).as_bytes(),
        )))
    }
}

/// Applies the escapes Go's `encoding/json` adds and serde_json does not (HTML-sensitive
/// characters and the JavaScript line separators), so hashes match the original operator's.
/// These characters can only occur inside JSON strings, where the escapes are equivalent.
fn go_json_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Admission rules for OmniKubeconfigExport (create and update alike): `validate_stored` plus the floors
/// and ceilings of its durations.
pub fn validate(new: &OmniKubeconfigExport, _old: Option<&OmniKubeconfigExport>) -> Validation {
    rules(new, Bounds::Enforce)
}

/// The rules the controller re-checks on stored objects (the webhook may have been bypassed).
/// The bounds of durations are not among them: the controller clamps those instead, so a value
/// stored without admission still works, within the bounds.
pub(crate) fn validate_stored(new: &OmniKubeconfigExport) -> Validation {
    rules(new, Bounds::Clamped)
}

fn rules(new: &OmniKubeconfigExport, bounds: Bounds) -> Validation {
    let mut v = Validation::new();
    let spec = &new.spec;
    reference_rules(spec, &mut v);
    let cluster_admin_requested = service_account_rules(new, &mut v);
    duration_rules(spec, bounds, &mut v);
    let sa = &spec.service_account;
    if let Some(problem) = new.key_format_problem() {
        v.push(FieldError::invalid(
            "spec.targetSecretRef.key",
            &spec.target_secret_ref.key,
            problem,
        ));
    }
    if sa.allow_cluster_admin
        && let Some(name) = cluster_admin_requested
    {
        v.warn(format!(
            "{name} exports a cluster-admin kubeconfig into the management cluster"
        ));
    }
    v
}

/// The cluster, the target Secret and the context namespace the export names.
fn reference_rules(spec: &OmniKubeconfigExportSpec, v: &mut Validation) {
    if is_blank(&spec.cluster_ref.name) {
        v.push(FieldError::required(
            "spec.clusterRef.name",
            "clusterRef.name is required",
        ));
    }
    if is_blank(&spec.target_secret_ref.name) {
        v.push(FieldError::required(
            "spec.targetSecretRef.name",
            "target Secret name is required",
        ));
    }
    if spec
        .target_secret_ref
        .namespace
        .as_deref()
        .is_some_and(is_blank)
    {
        v.push(FieldError::required(
            "spec.targetSecretRef.namespace",
            "target Secret namespace must not be blank",
        ));
    }
    if spec.context_namespace.as_deref().is_some_and(is_blank) {
        v.push(FieldError::required(
            "spec.contextNamespace",
            "context namespace must not be blank",
        ));
    }
    if is_blank(&spec.target_secret_ref.key) {
        v.push(FieldError::required(
            "spec.targetSecretRef.key",
            "target Secret key must not be blank",
        ));
    }
}

/// The identity the kubeconfig is minted for; the cluster-admin-equivalent identity it asks
/// for, if any.
fn service_account_rules<'a>(new: &'a OmniKubeconfigExport, v: &mut Validation) -> Option<&'a str> {
    let sa = &new.spec.service_account;
    if is_blank(&sa.user) {
        v.push(FieldError::required(
            "spec.serviceAccount.user",
            "service account user is required",
        ));
    }
    if sa.groups.is_empty() {
        v.push(FieldError::required(
            "spec.serviceAccount.groups",
            "at least one service account group is required",
        ));
    }
    for (i, group) in sa.groups.iter().enumerate() {
        let path = format!("spec.serviceAccount.groups[{i}]");
        let trimmed = group.trim();
        if trimmed.is_empty() {
            v.push(FieldError::required(
                path,
                "service account group must not be blank",
            ));
            continue;
        }
        if sa
            .groups
            .iter()
            .filter(|other| other.trim() == trimmed)
            .count()
            > 1
        {
            v.push(FieldError::duplicate(&path, trimmed));
        }
    }
    // Every cluster-admin-equivalent identity, user or group, needs the same consent as
    // system:masters (crate::domain::identity_policy); the deployment's own rules are the
    // controller's.
    let request = new.mint_request();
    for refusal in crate::domain::identity_policy::builtin_refusals(&request) {
        v.push(FieldError::forbidden(refusal.field, refusal.detail));
    }
    request
        .identities
        .iter()
        .find(|id| crate::domain::identity_policy::is_builtin_privileged(id.name))
        .map(|id| id.name.trim())
}

/// The kubeconfig's lifetime and when it is renewed.
fn duration_rules(spec: &OmniKubeconfigExportSpec, bounds: Bounds, v: &mut Validation) {
    let ttl = match spec.ttl.duration() {
        Ok(ttl) if !ttl.is_positive() => {
            v.push(FieldError::invalid(
                "spec.ttl",
                spec.ttl.as_str(),
                "ttl must be greater than zero",
            ));
            None
        }
        Ok(ttl) if bounds == Bounds::Enforce && ttl < MIN_INTERVAL => {
            v.push(FieldError::invalid(
                "spec.ttl",
                spec.ttl.as_str(),
                format!("ttl must be at least {MIN_INTERVAL}"),
            ));
            None
        }
        Ok(ttl) => Some(ttl),
        Err(_) => {
            v.push(duration_error("spec.ttl", "ttl", &spec.ttl));
            None
        }
    };
    if let Some(renew_before) = &spec.renew_before {
        let raw = renew_before.as_str();
        match renew_before.duration() {
            Ok(rb) if !rb.is_positive() => v.push(FieldError::invalid(
                "spec.renewBefore",
                raw,
                "renewBefore must be greater than zero",
            )),
            Ok(rb) if ttl.is_some_and(|ttl| rb >= ttl) => v.push(FieldError::invalid(
                "spec.renewBefore",
                raw,
                "renewBefore must be less than ttl",
            )),
            Ok(rb)
                if bounds == Bounds::Enforce
                    && ttl.is_some_and(|ttl| {
                    GoDuration::from_nanos(ttl.as_nanos() - rb.as_nanos()) < MIN_INTERVAL
                }) =>
            {
                v.push(FieldError::invalid(
                    "spec.renewBefore",
                    raw,
                    format!(
                        "renewBefore must leave at least {MIN_INTERVAL} between rotations (ttl minus renewBefore)"
                    ),
                ))
            }
            Ok(_) => {}
            Err(_) => v.push(duration_error(
                "spec.renewBefore",
                "renewBefore",
                renew_before,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(spec: serde_json::Value) -> Result<OmniKubeconfigExport, serde_json::Error> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "omni.texashpc.com/v1alpha1", "kind": "OmniKubeconfigExport",
            "metadata": {"name": "e", "namespace": "ns"}, "spec": spec,
        }))
    }

    fn export(spec: serde_json::Value) -> OmniKubeconfigExport {
        decode(spec).unwrap()
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "clusterRef": {"name": "edge"}, "targetSecretRef": {"name": "edge-kc"},
            "serviceAccount": {"user": "edge-automation", "groups": ["cluster-automation"]},
            "ttl": "24h", "renewBefore": "4h", "deletionPolicy": "Delete",
        })
    }

    /// Every cluster-admin-equivalent identity needs the consent system:masters needs, in
    /// admission as in the controller (which re-runs these rules); with it, admission warns.
    #[test]
    fn cluster_admin_equivalent_identities_need_consent() {
        for (user, group, path) in [
            (
                "system:kube-scheduler",
                "automation",
                "spec.serviceAccount.user",
            ),
            (
                "system:node:worker-1",
                "automation",
                "spec.serviceAccount.user",
            ),
            (
                "automation",
                "kubeadm:cluster-admins",
                "spec.serviceAccount.groups[0]",
            ),
            (
                "automation",
                "system:nodes",
                "spec.serviceAccount.groups[0]",
            ),
        ] {
            let mut spec = base();
            spec["serviceAccount"] = serde_json::json!({"user": user, "groups": [group]});
            let refused = validate(&export(spec.clone()), None);
            let paths: Vec<&str> = refused.errors.iter().map(|e| e.path.as_str()).collect();
            assert_eq!(paths, [path], "{user} {group}");
            spec["serviceAccount"]["allowClusterAdmin"] = true.into();
            let consented = validate(&export(spec), None);
            assert!(consented.is_valid(), "{consented:?}");
            assert_eq!(consented.warnings.len(), 1, "{consented:?}");
        }
        let mut spec = base();
        spec["serviceAccount"]["groups"] = serde_json::json!(["system:authenticated"]);
        assert!(validate(&export(spec), None).is_valid());
    }

    /// Admission refuses a ttl or rotation spacing under 10 s; a stored object keeps it, and the
    /// controller rotates it at most every 10 s instead of refusing it.
    #[test]
    fn duration_floors_are_admission_rules_the_controller_clamps_instead() {
        let mut spec = base();
        spec["ttl"] = "5s".into();
        spec["renewBefore"] = "1s".into();
        let short = export(spec);
        assert!(
            validate_stored(&short).is_valid(),
            "{:?}",
            validate_stored(&short)
        );
        let paths: Vec<String> = validate(&short, None)
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, ["spec.ttl"]);
        let mut spec = base();
        spec["renewBefore"] = "23h59m55s".into();
        let close = export(spec);
        assert!(validate_stored(&close).is_valid());
        let paths: Vec<String> = validate(&close, None)
            .errors
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, ["spec.renewBefore"]);
    }

    #[test]
    fn spec_hash_matches_the_documented_payload() {
        let payload = r#"{"version":"v1","clusterName":"edge","targetSecretKey":"kubeconfig","serviceAccountUser":"edge-automation","serviceAccountGroups":["cluster-automation"],"ttl":"24h0m0s"}"#;
        let want = hex::encode(sha2::Sha256::digest(payload.as_bytes()));
        assert_eq!(export(base()).spec_hash("edge").unwrap(), want);
    }

    #[test]
    fn spec_hash_covers_only_kubeconfig_shaping_fields() {
        let h = |spec: serde_json::Value, cluster: &str| export(spec).spec_hash(cluster).unwrap();
        let original = h(base(), "edge");
        let mut changed = base();
        changed["renewBefore"] = "2h".into();
        changed["deletionPolicy"] = "Orphan".into();
        changed["targetSecretRef"]["name"] = "other".into();
        changed["serviceAccount"]["allowClusterAdmin"] = true.into();
        assert_eq!(h(changed, "edge"), original);
        assert_eq!(h(base(), "edge").len(), 64);
        assert_ne!(h(base(), "remote"), original);
        for (path, value) in [
            ("ttl", serde_json::json!("1440m0s1ns")),
            ("contextNamespace", serde_json::json!("apps")),
        ] {
            let mut spec = base();
            spec[path] = value;
            assert_ne!(h(spec, "edge"), original, "{path}");
        }
        let mut spec = base();
        spec["ttl"] = "1440m".into();
        assert_eq!(h(spec, "edge"), original, "ttl is hashed in canonical form");
        let mut spec = base();
        spec["serviceAccount"]["groups"] = serde_json::json!(["cluster-automation", "b"]);
        assert_ne!(h(spec, "edge"), original);
        let mut spec = base();
        spec["targetSecretRef"]["key"] = "workload.kubeconfig".into();
        assert_ne!(h(spec, "edge"), original);
    }

    #[test]
    fn spec_hash_covers_the_format_but_not_the_default_spelled_out() {
        let h = |format: Option<&str>| {
            let mut spec = base();
            if let Some(f) = format {
                spec["format"] = f.into();
            }
            export(spec).spec_hash("edge").unwrap()
        };
        let absent = h(None);
        assert_eq!(
            h(Some("Kubeconfig")),
            absent,
            "existing exports keep their hash"
        );
        let (flux, argo) = (h(Some("FluxValue")), h(Some("ArgoCDCluster")));
        assert_ne!(flux, absent);
        assert_ne!(argo, absent);
        assert_ne!(flux, argo);
    }

    /// Every rule of the controller's former `spec_problem` check is one of the webhook's,
    /// reported at its field: the controller now runs `validate` on stored objects (admission
    /// bypassed) and reports `error_summary()`. An unknown `format` or `deletionPolicy` is the
    /// exception: the CRD schema refuses it, and stored past the schema it does not decode
    /// (`InvalidObject`).
    #[test]
    fn validate_covers_every_rule_the_controller_checked() {
        let set = |path: &str, value: serde_json::Value| {
            let mut spec = base();
            let mut cur = &mut spec;
            let parts: Vec<&str> = path.split('.').collect();
            for part in &parts[..parts.len() - 1] {
                cur = &mut cur[*part];
            }
            cur[parts[parts.len() - 1]] = value;
            export(spec)
        };
        let cases = [
            (
                set("clusterRef.name", "".into()),
                "spec.clusterRef.name: Required value: clusterRef.name is required",
            ),
            (
                set("targetSecretRef.name", " ".into()),
                "spec.targetSecretRef.name: Required value: target Secret name is required",
            ),
            (
                set("targetSecretRef.namespace", " ".into()),
                "spec.targetSecretRef.namespace: Required value: target Secret namespace must not be blank",
            ),
            (
                set("targetSecretRef.key", " ".into()),
                "spec.targetSecretRef.key: Required value: target Secret key must not be blank",
            ),
            (
                set("serviceAccount.user", "".into()),
                "spec.serviceAccount.user: Required value: service account user is required",
            ),
            (
                set("serviceAccount.groups", serde_json::json!([])),
                "spec.serviceAccount.groups: Required value: at least one service account group is required",
            ),
            (
                set("serviceAccount.groups", serde_json::json!(["a", " "])),
                "spec.serviceAccount.groups[1]: Required value: service account group must not be blank",
            ),
            (
                set(
                    "serviceAccount.groups",
                    serde_json::json!([" system:masters"]),
                ),
                "spec.serviceAccount.groups[0]: Forbidden: system:masters requires serviceAccount.allowClusterAdmin: true",
            ),
            (
                {
                    let mut spec = base();
                    spec["format"] = "FluxValue".into();
                    spec["targetSecretRef"]["key"] = "workload.kubeconfig".into();
                    export(spec)
                },
                r#"spec.targetSecretRef.key: Invalid value: "workload.kubeconfig": targetSecretRef.key applies only to format Kubeconfig; format FluxValue writes the keys its consumer reads"#,
            ),
            (
                set("ttl", "0s".into()),
                r#"spec.ttl: Invalid value: "0s": ttl must be greater than zero"#,
            ),
            (
                set("renewBefore", "-1h".into()),
                r#"spec.renewBefore: Invalid value: "-1h": renewBefore must be greater than zero"#,
            ),
            (
                set("renewBefore", "24h".into()),
                r#"spec.renewBefore: Invalid value: "24h": renewBefore must be less than ttl"#,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(validate(&e, None).error_summary(), want);
        }
        for (field, value, want) in [
            (
                "format",
                "argocd",
                "unknown variant `argocd`, expected one of `Kubeconfig`, `ArgoCDCluster`, `FluxValue`",
            ),
            (
                "deletionPolicy",
                "Keep",
                "unknown variant `Keep`, expected `Delete` or `Orphan`",
            ),
            (
                "deletionPolicy",
                "",
                "unknown variant ``, expected `Delete` or `Orphan`",
            ),
        ] {
            let mut spec = base();
            spec[field] = value.into();
            let err = decode(spec).map(|_| ()).map_err(|e| e.to_string());
            assert_eq!(err, Err(want.to_string()), "{field}: {value:?}");
        }
        let ttl = validate(&set("ttl", "a day".into()), None).error_summary();
        assert!(
            ttl.starts_with(r#"spec.ttl: Invalid value: "a day": "#),
            "{ttl}"
        );
        assert!(validate(&export(base()), None).is_valid());
    }

    /// Several problems are reported together, as the API server joins an aggregate.
    #[test]
    fn several_problems_are_summarised_together() {
        let mut spec = base();
        spec["clusterRef"]["name"] = "".into();
        spec["ttl"] = "0s".into();
        assert_eq!(
            validate(&export(spec), None).error_summary(),
            r#"[spec.clusterRef.name: Required value: clusterRef.name is required, spec.ttl: Invalid value: "0s": ttl must be greater than zero]"#
        );
    }

    #[test]
    fn go_escapes() {
        assert_eq!(
            go_json_escape(r#"{"a":"<b>&\u2028"}"#),
            r#"{"a":"\u003cb\u003e\u0026\u2028"}"#
        );
        assert_eq!(go_json_escape("x\u{2028}y"), "x\\u2028y");
    }
}
