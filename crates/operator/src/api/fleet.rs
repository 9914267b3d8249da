//! What the three set kinds share (OmniHelmReleaseSet, OmniSecretSyncSet,
//! OmniKubeconfigExportSet): the cluster selector, the credentials, the stop-matching
//! behaviour, the rollout, the template wrapper and the status, and the admission rules they
//! have in common. A set generates one ordinary object of its member kind per matched
//! OmniCluster (docs/fleet.md).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::common::{Condition, conditions_schema, is_blank};
use super::duration::DurationField;
use super::validation::{FieldError, Validation};
use crate::domain::fleet_template;

/// How many failing clusters a set's status lists.
pub const MAX_FAILING_LISTED: usize = 10;

/// Which OmniClusters of the set's namespace it serves, by their labels. An empty selector is
/// refused: it would match nothing (as a Kubernetes selector it would match everything, which
/// is never what a fleet-wide object should do by accident).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelector {
    /// Labels an OmniCluster must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on an OmniCluster's labels, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One requirement of a [`ClusterSelector`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1))]
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn` (at least one); empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operator of a [`SelectorRequirement`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl ClusterSelector {
    /// Whether the selector names nothing (and so matches nothing).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` satisfy the selector; an empty selector matches nothing.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.is_empty()
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    SelectorOperator::In => value.is_some_and(|v| r.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }

    fn validate(&self, v: &mut Validation) {
        self.validate_at("spec.clusterSelector", "cluster", v);
    }

    /// The selector's rules, reported at `at`; `selects` names what it selects in the
    /// message about an empty one (an OmniSecretSync's namespace selector shares them).
    pub(crate) fn validate_at(&self, at: &str, selects: &str, v: &mut Validation) {
        if self.is_empty() {
            v.push(FieldError::required(
                at,
                format!("an empty selector matches no {selects}: name at least one label in matchLabels or matchExpressions"),
            ));
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let path = format!("{at}.matchExpressions[{i}]");
            if is_blank(&r.key) {
                v.push(FieldError::required(
                    format!("{path}.key"),
                    "key is required",
                ));
            }
            let needs_values = matches!(r.operator, SelectorOperator::In | SelectorOperator::NotIn);
            if needs_values && r.values.is_empty() {
                v.push(FieldError::required(
                    format!("{path}.values"),
                    "In and NotIn need at least one value",
                ));
            }
            if !needs_values && !r.values.is_empty() {
                v.push(FieldError::forbidden(
                    format!("{path}.values"),
                    "Exists and DoesNotExist take no values",
                ));
            }
        }
    }
}

/// What a set does with the object it generated for a cluster that no longer matches (or is
/// being deleted).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StopMatchingBehavior {
    /// Delete it: its own deletion policy then uninstalls the release or removes the copy.
    #[default]
    Withdraw,
    /// Orphan it: the owner reference comes off and the label
    /// `omni.texashpc.com/left-by-set` names the set; it keeps running as an object of its own.
    Leave,
}

/// How a change of the set's template reaches the generated objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// How many generated objects may be updated and not Ready at once: a count (`1`) or a
    /// percentage of the matched clusters (`10%`, rounded down, at least one). The next wave
    /// starts when the previous one is Ready at its new generation; an object that fails at
    /// it stops the rollout (`RolloutStalled`). Unset: all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent_schema")]
    pub max_unavailable: Option<Value>,
}

fn int_or_percent_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-int-or-string": true })
}

impl Rollout {
    /// How many objects of `clusters` may be updating at once, or the problem with the field.
    pub fn budget(&self, clusters: usize) -> Result<usize, String> {
        let Some(max) = &self.max_unavailable else {
            return Ok(clusters.max(1));
        };
        match max {
            Value::Number(n) => match n.as_u64() {
                Some(n) if n >= 1 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => Err("must be a whole number of at least 1, or a percentage".into()),
            },
            Value::String(s) => match s.strip_suffix('%').map(str::parse::<usize>) {
                Some(Ok(p)) if (1..=100).contains(&p) => Ok((clusters * p / 100).max(1)),
                _ => Err("must be a percentage from 1% to 100%, or a whole number".into()),
            },
            _ => Err("must be a whole number or a percentage".into()),
        }
    }
}

/// The workload-cluster credentials of the objects a Helm or Secret set generates: exactly one
/// of a Secret per cluster named by a pattern, or kubeconfigs the set mints through one
/// OmniKubeconfigExport per cluster, which it creates and owns.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetCredentials {
    /// A kubeconfig Secret per cluster; `name` is a template (`{{ cluster.name }}-kubeconfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretPattern>,
    /// Mint a kubeconfig per cluster: the set creates an OmniKubeconfigExport for each, every
    /// rule for minted identities applying to it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mint: Option<Mint>,
}

/// A kubeconfig Secret named by a template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct SecretPattern {
    /// Template of the Secret's name (same namespace), rendered per cluster.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Data key of the kubeconfig.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    "kubeconfig".to_string()
}

/// The identity and lifetime of the kubeconfigs a set mints (the generated
/// OmniKubeconfigExport's `serviceAccount`, `ttl` and `renewBefore`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mint {
    /// User name presented to the workload API server.
    #[schemars(length(min = 1))]
    pub user: String,
    /// Groups presented to the workload API server; bind RBAC to them in the workload
    /// cluster (docs/fleet.md shows how, through the OmniCluster's manifests).
    pub groups: Vec<String>,
    /// As on OmniKubeconfigExport: needed for the `system:masters` group, and subject to the
    /// deployment's policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_cluster_admin: bool,
    /// Lifetime of each kubeconfig (Go duration).
    pub ttl: DurationField,
    /// Rotate this long before expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<DurationField>,
}

impl SetCredentials {
    fn validate(&self, v: &mut Validation) {
        match (&self.kubeconfig_secret_ref, &self.mint) {
            (Some(_), Some(_)) => v.push(FieldError::forbidden(
                "spec.credentials",
                "set either kubeconfigSecretRef or mint, not both",
            )),
            (None, None) => v.push(FieldError::required(
                "spec.credentials",
                "set kubeconfigSecretRef or mint",
            )),
            (Some(pattern), None) => {
                for e in fleet_template::check_syntax(
                    "spec.credentials.kubeconfigSecretRef.name",
                    &Value::String(pattern.name.clone()),
                    &[],
                ) {
                    v.push(template_error(e));
                }
            }
            (None, Some(mint)) => v.extend(validate_mint(mint)),
        }
    }
}

/// The spec (as JSON) of the OmniKubeconfigExport a set mints for `cluster` with `mint`,
/// writing the Secret `secret`: an ordinary export, which its own rules and the deployment's
/// policy for minted identities judge like any other.
pub(crate) fn minted_export_spec(mint: &Mint, cluster: &str, secret: &str) -> Value {
    let mint = serde_json::to_value(mint).unwrap_or_default();
    let mut spec = serde_json::json!({
        "clusterRef": {"name": cluster},
        "targetSecretRef": {"name": secret, "key": "kubeconfig"},
        "serviceAccount": {"user": mint["user"], "groups": mint["groups"]},
        "ttl": mint["ttl"],
        "deletionPolicy": "Delete",
    });
    if mint["allowClusterAdmin"] == Value::Bool(true) {
        spec["serviceAccount"]["allowClusterAdmin"] = Value::Bool(true);
    }
    if !mint["renewBefore"].is_null() {
        spec["renewBefore"] = mint["renewBefore"].clone();
    }
    spec
}

/// The OmniKubeconfigExport rules on what `mint` would generate, reported at
/// `spec.credentials.mint`: a set is refused what a single export is refused.
pub(crate) fn validate_mint(mint: &Mint) -> Validation {
    let mut v = Validation::new();
    let spec = minted_export_spec(mint, "placeholder", "placeholder");
    let export = match super::decode::<super::kubeconfig_export::OmniKubeconfigExportSpec>(&spec) {
        Ok(spec) => super::OmniKubeconfigExport::new("placeholder", spec),
        Err(message) => {
            v.push(FieldError::invalid("spec.credentials.mint", "", message));
            return v;
        }
    };
    let checked = super::kubeconfig_export::validate(&export, None);
    for mut error in checked.errors {
        error.path = match error.path.strip_prefix("spec.serviceAccount.") {
            Some(rest) => format!("spec.credentials.mint.{rest}"),
            None => error.path.replacen("spec.", "spec.credentials.mint.", 1),
        };
        v.push(error);
    }
    checked.warnings.into_iter().for_each(|w| v.warn(w));
    v
}

/// A template error as an admission error of its field.
pub(crate) fn template_error(e: fleet_template::TemplateError) -> FieldError {
    FieldError::invalid(
        e.field.clone(),
        "",
        format!("template error at line {}: {}", e.line, e.message),
    )
}

/// The template of a generated object: the member kind's own spec, as written. The fields the
/// set fills in per cluster (`clusterRef`, and `kubeconfigSecretRef` where the set's
/// credentials decide it) may be left out; the text is kept as written, so its strings are
/// rendered per cluster before the spec is decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberTemplate<S> {
    /// The template as written.
    pub raw: Value,
    _spec: PhantomData<S>,
}

/// A member kind's spec as a set's template: which of its fields the set fills in.
pub trait TemplateSpec: Serialize + DeserializeOwned + JsonSchema {
    /// The fields the set fills in per cluster (left out of the template's required list).
    const SET_BY_THE_SET: &'static [&'static str];
    /// The strings of the template the set leaves as written, for the generated object to
    /// render itself with what only it reads (paths relative to the template, each index
    /// written `[*]`): an OmniSecretSync's `data[*].template`, which reads Secret values.
    const MEMBER_RENDERS: &'static [&'static str] = &[];
}

impl<S> MemberTemplate<S> {
    /// The template `raw`.
    pub fn new(raw: Value) -> Self {
        Self {
            raw,
            _spec: PhantomData,
        }
    }
}

impl<S: TemplateSpec> MemberTemplate<S> {
    /// The template as written, with the fields the set fills in given placeholders, decoded
    /// as the member's spec (for admission's checks of what is not templated).
    pub fn with_placeholders(&self) -> Result<S, String> {
        let mut raw = self.raw.clone();
        fill_placeholders::<S>(&mut raw);
        super::decode(&raw)
    }
}

/// Puts a placeholder into each field the set fills in that `raw` leaves out.
fn fill_placeholders<S: TemplateSpec>(raw: &mut Value) {
    if let Value::Object(fields) = raw {
        for field in S::SET_BY_THE_SET {
            fields
                .entry(*field)
                .or_insert_with(|| serde_json::json!({"name": "placeholder", "key": "kubeconfig"}));
        }
    }
}

impl<S> Serialize for MemberTemplate<S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de, S: TemplateSpec> Deserialize<'de> for MemberTemplate<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(deserializer)?;
        let template = Self::new(raw);
        // A template that is not the member's spec does not decode: the schema check of the
        // API server refuses it first.
        template
            .with_placeholders()
            .map_err(serde::de::Error::custom)?;
        Ok(template)
    }
}

impl<S: TemplateSpec> JsonSchema for MemberTemplate<S> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        S::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = generator.subschema_for::<S>();
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|f| !S::SET_BY_THE_SET.iter().any(|s| f == s));
        }
        schema
    }
}

/// The admission rules of a set: the selector, the credentials (where the kind takes them,
/// the minted identity judged by the export's rules), the rollout, the template's syntax and
/// the fields the set fills in, and `member`'s rules (the generated kind's) on what of the
/// template is not templated.
pub(crate) fn validate_set<S: TemplateSpec>(
    selector: &ClusterSelector,
    credentials: Option<&SetCredentials>,
    rollout: &Rollout,
    template: &MemberTemplate<S>,
    member: impl FnOnce(S) -> Validation,
) -> Validation {
    let mut v = Validation::new();
    selector.validate(&mut v);
    if let Some(credentials) = credentials {
        credentials.validate(&mut v);
    }
    if let Err(problem) = rollout.budget(1) {
        v.push(FieldError::invalid(
            "spec.rollout.maxUnavailable",
            rollout
                .max_unavailable
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            problem,
        ));
    }
    for field in S::SET_BY_THE_SET {
        if template.raw.get(field).is_some() {
            v.push(FieldError::forbidden(
                format!("spec.template.{field}"),
                "the set fills this in for each cluster; leave it out of the template",
            ));
        }
    }
    for e in fleet_template::check_syntax("spec.template", &template.raw, S::MEMBER_RENDERS) {
        v.push(template_error(e));
    }
    v.extend(validate_as_member(template, member));
    v
}

/// The member kind's own admission rules on the template, with placeholders where the set
/// fills in and leaving out the errors of templated fields (those are checked per cluster once
/// rendered): a set's template is refused for what its generated objects would be refused for.
fn validate_as_member<S: TemplateSpec>(
    template: &MemberTemplate<S>,
    member: impl FnOnce(S) -> Validation,
) -> Validation {
    let mut v = Validation::new();
    let spec = match template.with_placeholders() {
        Ok(spec) => spec,
        Err(message) => {
            v.push(FieldError::invalid("spec.template", "", message));
            return v;
        }
    };
    let templated = fleet_template::templated_fields("spec", &template.raw, S::MEMBER_RENDERS);
    for mut error in member(spec).errors {
        let field = error.path.clone();
        if templated
            .iter()
            .any(|t| t.starts_with(&field) || field.starts_with(t.as_str()))
        {
            continue;
        }
        error.path = field.replacen("spec", "spec.template", 1);
        v.push(error);
    }
    v
}

/// Declares a set kind: its CRD (group, version, category, status and printer columns are the
/// same for the three) and its spec, the fields every set has plus, where the kind takes them,
/// `credentials`. Each set's module invokes it once.
macro_rules! set_kind {
    (
        $spec:ident: kind $kind:tt, plural $plural:tt, singular $singular:tt, short $short:tt,
        doc $doc:tt, template $member_spec:ty $(, credentials $credentials:ident)?
    ) => {
        #[doc = concat!("Desired state of an ", $kind, ".")]
        // Every `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
        #[allow(clippy::duplicated_attributes)]
        #[derive(
            kube::CustomResource,
            serde::Serialize,
            serde::Deserialize,
            Clone,
            Debug,
            PartialEq,
            schemars::JsonSchema,
        )]
        #[kube(
            group = "omni.texashpc.com",
            version = "v1alpha1",
            kind = $kind,
            plural = $plural,
            singular = $singular,
            namespaced,
            status = "crate::api::fleet::FleetSetStatus",
            shortname = $short,
            category = "omni",
            doc = $doc,
            printcolumn(name = "Matched", type_ = "integer", json_path = ".status.matchedClusters"),
            printcolumn(name = "Ready Objects", type_ = "integer", json_path = ".status.ready"),
            printcolumn(name = "Updated", type_ = "integer", json_path = ".status.updated"),
            printcolumn(name = "Failed", type_ = "integer", json_path = ".status.failed"),
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
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            /// The OmniClusters of this namespace to serve, by label; an empty selector is
            /// refused.
            pub cluster_selector: $crate::api::fleet::ClusterSelector,
            /// The spec of every generated object, its strings rendered per cluster
            /// (`{{ cluster.name }}`, `{{ cluster.labels.env }}`; docs/fleet.md). Leave out
            /// `clusterRef` (and `kubeconfigSecretRef` where `credentials` decides it): the set
            /// fills them in.
            pub template: $crate::api::fleet::MemberTemplate<$member_spec>,
            $(
                /// The workload-cluster kubeconfig of each generated object: a Secret per
                /// cluster by a name pattern, or one the set mints.
                pub $credentials: $crate::api::fleet::SetCredentials,
            )?
            /// What happens to the object of a cluster that stops matching: `Withdraw` (the
            /// default) deletes it, `Leave` orphans it.
            #[serde(default)]
            pub stop_matching_behavior: $crate::api::fleet::StopMatchingBehavior,
            /// How a template change reaches the generated objects (default: all at once).
            #[serde(default)]
            pub rollout: $crate::api::fleet::Rollout,
        }
    };
}
pub(crate) use set_kind;

/// One generated object that is not Ready, or one cluster the set cannot serve.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailingCluster {
    /// The OmniCluster.
    pub cluster: String,
    /// The object's name (generated, or found in the way).
    pub name: String,
    /// Its `Ready` reason, or the set's reason for this cluster (`TemplateFailed`,
    /// `NameCollision`).
    pub reason: String,
    /// Its `Ready` message, or the set's explanation.
    pub message: String,
}

/// Observed state of a set (the same for the three kinds).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetSetStatus {
    /// `metadata.generation` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling` and `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// OmniClusters the selector matches.
    #[serde(default)]
    pub matched_clusters: u32,
    /// Objects the set should have (one per matched cluster).
    #[serde(default)]
    pub desired: u32,
    /// Generated objects Ready at their current generation and the set's current template.
    #[serde(default)]
    pub ready: u32,
    /// Generated objects at the set's current template.
    #[serde(default)]
    pub updated: u32,
    /// Clusters whose object failed, could not be rendered, or is in the way.
    #[serde(default)]
    pub failed: u32,
    /// Up to ten of those clusters, by name, with their reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<FailingCluster>,
    /// The value of the `omni.texashpc.com/reconcile-requested-at` annotation last handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_selector_matches_by_labels_and_expressions_and_an_empty_one_matches_nothing() {
        let selector: ClusterSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"fleet": "edge"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "stage"]},
                {"key": "frozen", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(selector.matches(&labels(&[("fleet", "edge"), ("env", "prod")])));
        assert!(!selector.matches(&labels(&[("fleet", "edge"), ("env", "dev")])));
        assert!(!selector.matches(&labels(&[
            ("fleet", "edge"),
            ("env", "prod"),
            ("frozen", "")
        ])));
        assert!(!selector.matches(&labels(&[("env", "prod")])));
        assert!(!ClusterSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn the_rollout_budget_is_a_count_or_a_percentage() {
        let rollout = |v: Value| Rollout {
            max_unavailable: Some(v),
        };
        assert_eq!(Rollout::default().budget(7), Ok(7));
        assert_eq!(rollout(serde_json::json!(1)).budget(7), Ok(1));
        assert_eq!(rollout(serde_json::json!("10%")).budget(100), Ok(10));
        assert_eq!(rollout(serde_json::json!("10%")).budget(3), Ok(1));
        assert!(rollout(serde_json::json!(0)).budget(3).is_err());
        assert!(rollout(serde_json::json!("0%")).budget(3).is_err());
        assert!(rollout(serde_json::json!("ten")).budget(3).is_err());
    }
}
