//! Role-based access control with the Kubernetes RBAC semantics.
//!
//! The core is the pure [`evaluate`]: given the Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings (plus the bootstrap policy every real API server installs) it decides one
//! request. It follows the real authorizer rule for rule:
//!
//! * members of `system:masters` are always allowed (the privileged-group short circuit);
//! * a ClusterRoleBinding grants its ClusterRole everywhere, including non-resource URLs;
//! * a RoleBinding grants its Role or ClusterRole only inside the binding's namespace and never
//!   grants non-resource URLs;
//! * subjects are `User` (by name), `Group` (by membership) or `ServiceAccount` (user name
//!   `system:serviceaccount:<ns>:<name>`, the namespace defaulting to the RoleBinding's);
//! * `*` matches any verb, API group, resource or URL; `resource/subresource` and `*/subresource`
//!   match subresources; `resourceNames` restricts to named objects (so never matches `list` or
//!   `create` requests, which carry no name); a URL rule ending in `*` is a prefix match.
//!
//! Aggregated ClusterRoles are not evaluated (their `rules` are used as stored).

use serde::Deserialize;
use serde_json::Value;

/// Who is asking: the authenticated user's name and groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subject {
    /// User name (`system:anonymous` for anonymous requests).
    pub name: String,
    /// Groups, including `system:authenticated` / `system:unauthenticated`.
    pub groups: Vec<String>,
}

/// What is being asked: the authorization attributes of one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection, …
    pub verb: String,
    /// `true` for API resource requests, `false` for non-resource URLs such as `/version`.
    pub resource_request: bool,
    /// API group (`""` for the core group).
    pub api_group: String,
    /// Resource (plural), such as `pods`.
    pub resource: String,
    /// Subresource, such as `status`; empty if none.
    pub subresource: String,
    /// Object name; empty for list, watch-all and create-without-name requests.
    pub name: String,
    /// Namespace; empty for cluster-scoped and all-namespace requests.
    pub namespace: String,
    /// Request path, used for non-resource requests.
    pub path: String,
}

/// The outcome of evaluating one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; the reason names the binding and role, like the real RBAC authorizer.
    Allow(String),
    /// No rule allows the request (RBAC never denies explicitly).
    NoOpinion,
}

impl Decision {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        matches!(self, Self::Allow(_))
    }
}

/// The RBAC objects one decision is made against, as stored (JSON).
#[derive(Debug, Clone, Default)]
pub struct RbacObjects {
    /// `rbac.authorization.k8s.io/v1` Roles.
    pub roles: Vec<Value>,
    /// ClusterRoles.
    pub cluster_roles: Vec<Value>,
    /// RoleBindings.
    pub role_bindings: Vec<Value>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<Value>,
}

impl RbacObjects {
    /// Adds the bootstrap ClusterRoles and ClusterRoleBindings the real API server creates at
    /// start-up, unless an object of the same name is already present (stored objects win, as
    /// after a user edits them).
    pub fn with_bootstrap_policy(mut self) -> Self {
        let (roles, bindings) = bootstrap_policy();
        for role in roles {
            if find_named(&self.cluster_roles, name_of(&role), None).is_none() {
                self.cluster_roles.push(role);
            }
        }
        for binding in bindings {
            if find_named(&self.cluster_role_bindings, name_of(&binding), None).is_none() {
                self.cluster_role_bindings.push(binding);
            }
        }
        self
    }
}

/// The privileged group whose members bypass authorization.
pub const SYSTEM_MASTERS: &str = "system:masters";

/// Decides `attrs` for `subject` against `objects`.
pub fn evaluate(objects: &RbacObjects, subject: &Subject, attrs: &Attributes) -> Decision {
    if subject.groups.iter().any(|g| g == SYSTEM_MASTERS) {
        return Decision::Allow(format!("member of the {SYSTEM_MASTERS} group"));
    }

    for raw in &objects.cluster_role_bindings {
        let Some(binding) = parse::<Binding>(raw) else {
            continue;
        };
        if binding.role_ref.kind != "ClusterRole" || !binding.applies_to(subject, "") {
            continue;
        }
        let Some(role) = find_named(&objects.cluster_roles, &binding.role_ref.name, None) else {
            continue;
        };
        if role_allows(role, attrs) {
            return Decision::Allow(format!(
                "RBAC: allowed by ClusterRoleBinding \"{}\" of ClusterRole \"{}\" to {}",
                binding.metadata.name,
                binding.role_ref.name,
                binding.matched_subject(subject, "")
            ));
        }
    }

    // RoleBindings only ever grant inside their own namespace.
    if !attrs.resource_request || attrs.namespace.is_empty() {
        return Decision::NoOpinion;
    }
    for raw in &objects.role_bindings {
        let Some(binding) = parse::<Binding>(raw) else {
            continue;
        };
        let ns = binding.metadata.namespace.as_str();
        if ns != attrs.namespace || !binding.applies_to(subject, ns) {
            continue;
        }
        let role = match binding.role_ref.kind.as_str() {
            "Role" => find_named(&objects.roles, &binding.role_ref.name, Some(ns)),
            "ClusterRole" => find_named(&objects.cluster_roles, &binding.role_ref.name, None),
            _ => None,
        };
        if role.is_some_and(|r| role_allows(r, attrs)) {
            return Decision::Allow(format!(
                "RBAC: allowed by RoleBinding \"{}/{}\" of {} \"{}\" to {}",
                binding.metadata.name,
                ns,
                binding.role_ref.kind,
                binding.role_ref.name,
                binding.matched_subject(subject, ns)
            ));
        }
    }
    Decision::NoOpinion
}

/// The real server's 403 `Status` for a request RBAC did not allow.
///
/// Message shapes: `pods "p" is forbidden: User "u" cannot get resource "pods" in API group ""
/// in the namespace "ns"`, `… at the cluster scope` without a namespace, and
/// `forbidden: User "u" cannot get path "/metrics"` for non-resource URLs.
pub fn forbidden_status(subject: &Subject, attrs: &Attributes) -> Value {
    let user = &subject.name;
    let verb = &attrs.verb;
    if !attrs.resource_request {
        return status_403(
            format!(
                "forbidden: User {user:?} cannot {verb} path {:?}",
                attrs.path
            ),
            serde_json::json!({}),
        );
    }
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let why = if attrs.namespace.is_empty() {
        format!(
            "User {user:?} cannot {verb} resource {resource:?} in API group {:?} at the cluster scope",
            attrs.api_group
        )
    } else {
        format!(
            "User {user:?} cannot {verb} resource {resource:?} in API group {:?} in the namespace {:?}",
            attrs.api_group, attrs.namespace
        )
    };
    let qualified = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    let message = if attrs.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", attrs.name)
    };
    let mut details = serde_json::json!({"kind": attrs.resource});
    if !attrs.api_group.is_empty() {
        details["group"] = Value::from(attrs.api_group.clone());
    }
    if !attrs.name.is_empty() {
        details["name"] = Value::from(attrs.name.clone());
    }
    status_403(message, details)
}

fn status_403(message: String, details: Value) -> Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403
    })
}

/// Errors answering a SelfSubjectAccessReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not a usable SelfSubjectAccessReview (answer 400 / 422).
    #[error("invalid SelfSubjectAccessReview: {0}")]
    Invalid(String),
}

/// Answers an `authorization.k8s.io/v1` SelfSubjectAccessReview for `subject`: the spec is
/// echoed back with `status.allowed` (and the allowing reason) filled in, as the real server
/// does for `kubectl auth can-i`.
pub fn self_subject_access_review(
    objects: &RbacObjects,
    subject: &Subject,
    review: &Value,
) -> Result<Value, ReviewError> {
    let attrs = review_attributes(review)?;
    Ok(match evaluate(objects, subject, &attrs) {
        Decision::Allow(reason) => review_response(review, Ok(reason)),
        Decision::NoOpinion => review_response(review, Err(String::new())),
    })
}

/// The request a SelfSubjectAccessReview asks about.
pub fn review_attributes(review: &Value) -> Result<Attributes, ReviewError> {
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    match (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    ) {
        (Some(r), None) => Ok(Attributes {
            verb: text(r, "verb"),
            resource_request: true,
            api_group: text(r, "group"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            name: text(r, "name"),
            namespace: text(r, "namespace"),
            path: String::new(),
        }),
        (None, Some(n)) => Ok(Attributes {
            verb: text(n, "verb"),
            path: text(n, "path"),
            ..Attributes::default()
        }),
        _ => Err(ReviewError::Invalid(
            "exactly one of spec.resourceAttributes, spec.nonResourceAttributes must be set"
                .to_owned(),
        )),
    }
}

/// The answered review: `review`'s spec with `status.allowed` and the reason (`Ok`: why it
/// is allowed, `Err`: why not; empty reasons are left out).
pub fn review_response(review: &Value, decision: Result<String, String>) -> Value {
    let mut status = serde_json::json!({"allowed": decision.is_ok()});
    let reason = match decision {
        Ok(r) | Err(r) => r,
    };
    if !reason.is_empty() {
        status["reason"] = Value::String(reason);
    }
    let mut metadata = review
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if let Some(m) = metadata.as_object_mut() {
        m.insert("creationTimestamp".to_owned(), Value::Null);
    }
    serde_json::json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": metadata,
        "spec": review.get("spec").cloned().unwrap_or(Value::Null),
        "status": status
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta {
    name: String,
    namespace: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct BindingSubject {
    kind: String,
    name: String,
    namespace: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Binding {
    metadata: Meta,
    subjects: Vec<BindingSubject>,
    role_ref: RoleRef,
}

impl Binding {
    fn applies_to(&self, subject: &Subject, binding_namespace: &str) -> bool {
        self.subjects
            .iter()
            .any(|s| subject_matches(s, subject, binding_namespace))
    }

    fn matched_subject(&self, subject: &Subject, binding_namespace: &str) -> String {
        self.subjects
            .iter()
            .find(|s| subject_matches(s, subject, binding_namespace))
            .map(|s| format!("{} \"{}\"", s.kind, s.name))
            .unwrap_or_default()
    }
}

fn subject_matches(s: &BindingSubject, subject: &Subject, binding_namespace: &str) -> bool {
    match s.kind.as_str() {
        "User" => s.name == subject.name,
        "Group" => subject.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = if s.namespace.is_empty() {
                binding_namespace
            } else {
                s.namespace.as_str()
            };
            !ns.is_empty() && subject.name == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Rule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Role {
    rules: Vec<Rule>,
}

fn role_allows(role: &Value, attrs: &Attributes) -> bool {
    parse::<Role>(role).is_some_and(|r| r.rules.iter().any(|rule| rule_allows(rule, attrs)))
}

fn rule_allows(rule: &Rule, attrs: &Attributes) -> bool {
    if !has_or_star(&rule.verbs, &attrs.verb) {
        return false;
    }
    if !attrs.resource_request {
        return rule.non_resource_urls.iter().any(|url| {
            url == "*"
                || *url == attrs.path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    }
    has_or_star(&rule.api_groups, &attrs.api_group)
        && resource_matches(&rule.resources, &attrs.resource, &attrs.subresource)
        && (rule.resource_names.is_empty() || rule.resource_names.contains(&attrs.name))
}

fn has_or_star(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == "*" || v == wanted)
}

fn resource_matches(rule_resources: &[String], resource: &str, subresource: &str) -> bool {
    let combined = if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    };
    rule_resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

fn parse<T: for<'de> Deserialize<'de>>(v: &Value) -> Option<T> {
    serde_json::from_value(v.clone()).ok()
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn find_named<'a>(list: &'a [Value], name: &str, namespace: Option<&str>) -> Option<&'a Value> {
    list.iter().find(|v| {
        name_of(v) == name
            && namespace.is_none_or(|ns| {
                v.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
            })
    })
}

/// The bootstrap ClusterRoles and ClusterRoleBindings of a real API server that matter to
/// clients: discovery and version endpoints for everyone, self access reviews for authenticated
/// users, and `cluster-admin` bound to `system:masters`.
pub fn bootstrap_policy() -> (Vec<Value>, Vec<Value>) {
    use serde_json::json;
    let cluster_role = |name: &str, rules: Value| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}
            },
            "rules": rules
        })
    };
    let binding = |name: &str, role: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}
            },
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects
        })
    };
    let roles = vec![
        cluster_role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}
            ]),
        ),
        cluster_role(
            "system:discovery",
            json!([{
                "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                    "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
                "verbs": ["get"]
            }]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!([{
                "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                "verbs": ["get"]
            }]),
        ),
        cluster_role(
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"],
                 "resources": ["selfsubjectreviews"],
                 "verbs": ["create"]}
            ]),
        ),
        // Unbound by default: servers that delegate authentication and authorization to the
        // API server (such as a secured metrics endpoint) are bound to it.
        cluster_role(
            "system:auth-delegator",
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
                 "verbs": ["create"]}
            ]),
        ),
    ];
    let bindings = vec![
        binding("cluster-admin", "cluster-admin", &[SYSTEM_MASTERS]),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
    ];
    (roles, bindings)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn user(name: &str, groups: &[&str]) -> Subject {
        Subject {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn res(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    fn url(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Attributes::default()
        }
    }

    fn role(ns: &str, name: &str, rules: Value) -> Value {
        json!({"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules})
    }

    fn cluster_role(name: &str, rules: Value) -> Value {
        json!({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
    }

    fn role_binding(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
        json!({"kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
               "subjects": subjects})
    }

    fn crb(name: &str, role: &str, subjects: Value) -> Value {
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": subjects})
    }

    fn alice_reads_configmaps_in_a() -> RbacObjects {
        RbacObjects {
            roles: vec![role(
                "a",
                "cm-reader",
                json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "alice-cm",
                "Role",
                "cm-reader",
                json!([{"kind": "User", "name": "alice"}]),
            )],
            ..RbacObjects::default()
        }
    }

    #[test]
    fn nothing_is_allowed_without_a_binding() {
        let d = evaluate(
            &RbacObjects::default(),
            &user("alice", &["system:authenticated"]),
            &res("get", "", "pods", "a", "p"),
        );
        assert_eq!(d, Decision::NoOpinion);
    }

    #[test]
    fn system_masters_is_always_allowed() {
        let d = evaluate(
            &RbacObjects::default(),
            &user("root", &[SYSTEM_MASTERS]),
            &res("delete", "apps", "deployments", "x", "d"),
        );
        assert!(d.allowed());
    }

    #[test]
    fn role_binding_grants_listed_verbs_in_its_namespace_only() {
        let o = alice_reads_configmaps_in_a();
        let alice = user("alice", &[]);
        assert!(evaluate(&o, &alice, &res("get", "", "configmaps", "a", "c")).allowed());
        assert!(evaluate(&o, &alice, &res("list", "", "configmaps", "a", "")).allowed());
        assert!(!evaluate(&o, &alice, &res("delete", "", "configmaps", "a", "c")).allowed());
        assert!(!evaluate(&o, &alice, &res("get", "", "configmaps", "b", "c")).allowed());
        assert!(!evaluate(&o, &alice, &res("get", "", "configmaps", "", "")).allowed());
        assert!(!evaluate(&o, &alice, &res("get", "", "secrets", "a", "s")).allowed());
        assert!(!evaluate(&o, &alice, &res("get", "apps", "configmaps", "a", "c")).allowed());
        assert!(
            !evaluate(
                &o,
                &user("bob", &[]),
                &res("get", "", "configmaps", "a", "c")
            )
            .allowed()
        );
    }

    #[test]
    fn allow_reason_names_binding_role_and_subject() {
        let o = alice_reads_configmaps_in_a();
        let d = evaluate(
            &o,
            &user("alice", &[]),
            &res("get", "", "configmaps", "a", "c"),
        );
        assert_eq!(
            d,
            Decision::Allow(
                "RBAC: allowed by RoleBinding \"alice-cm/a\" of Role \"cm-reader\" to User \"alice\""
                    .into()
            )
        );
    }

    #[test]
    fn role_binding_to_a_role_in_another_namespace_grants_nothing() {
        let o = RbacObjects {
            roles: vec![role(
                "b",
                "r",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "rb",
                "Role",
                "r",
                json!([{"kind": "User", "name": "u"}]),
            )],
            ..RbacObjects::default()
        };
        assert!(!evaluate(&o, &user("u", &[]), &res("get", "", "pods", "a", "p")).allowed());
    }

    #[test]
    fn role_binding_to_cluster_role_is_scoped_to_the_binding_namespace() {
        let o = RbacObjects {
            cluster_roles: vec![cluster_role(
                "edit",
                json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"]}]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "rb",
                "ClusterRole",
                "edit",
                json!([{"kind": "Group", "name": "devs"}]),
            )],
            ..RbacObjects::default()
        };
        let dev = user("d", &["devs"]);
        assert!(evaluate(&o, &dev, &res("patch", "apps", "deployments", "a", "x")).allowed());
        assert!(!evaluate(&o, &dev, &res("patch", "apps", "deployments", "b", "x")).allowed());
        assert!(!evaluate(&o, &dev, &res("list", "apps", "deployments", "", "")).allowed());
    }

    #[test]
    fn cluster_role_binding_grants_everywhere_and_cluster_scope() {
        let o = RbacObjects {
            cluster_roles: vec![cluster_role(
                "reader",
                json!([{"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["get", "list", "watch"]}]),
            )],
            cluster_role_bindings: vec![crb("r", "reader", json!([{"kind": "User", "name": "u"}]))],
            ..RbacObjects::default()
        };
        let u = user("u", &[]);
        assert!(evaluate(&o, &u, &res("list", "", "pods", "", "")).allowed());
        assert!(evaluate(&o, &u, &res("watch", "", "pods", "z", "")).allowed());
        assert!(evaluate(&o, &u, &res("get", "", "namespaces", "", "z")).allowed());
        assert!(!evaluate(&o, &u, &res("create", "", "namespaces", "", "")).allowed());
    }

    #[test]
    fn cluster_role_binding_must_reference_a_cluster_role() {
        let o = RbacObjects {
            roles: vec![role(
                "a",
                "r",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
            )],
            cluster_role_bindings: vec![json!({"metadata": {"name": "x"},
                "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}]})],
            ..RbacObjects::default()
        };
        assert!(!evaluate(&o, &user("u", &[]), &res("get", "", "pods", "a", "p")).allowed());
    }

    #[test]
    fn wildcards_match_any_verb_group_and_resource() {
        let o = RbacObjects {
            roles: vec![role(
                "a",
                "all",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "rb",
                "Role",
                "all",
                json!([{"kind": "User", "name": "u"}]),
            )],
            ..RbacObjects::default()
        };
        let u = user("u", &[]);
        assert!(
            evaluate(
                &o,
                &u,
                &res(
                    "deletecollection",
                    "omni.texashpc.com",
                    "omniclusters",
                    "a",
                    ""
                )
            )
            .allowed()
        );
        let mut status = res("update", "omni.texashpc.com", "omniclusters", "a", "c");
        status.subresource = "status".into();
        assert!(
            evaluate(&o, &u, &status).allowed(),
            "`*` covers subresources too"
        );
    }

    #[test]
    fn subresources_need_resource_slash_subresource() {
        let o = RbacObjects {
            roles: vec![role(
                "a",
                "r",
                json!([
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                    {"apiGroups": ["x.io"], "resources": ["widgets/status"], "verbs": ["update"]},
                    {"apiGroups": ["y.io"], "resources": ["*/scale"], "verbs": ["get"]}
                ]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "rb",
                "Role",
                "r",
                json!([{"kind": "User", "name": "u"}]),
            )],
            ..RbacObjects::default()
        };
        let u = user("u", &[]);
        let with_sub = |verb: &str, group: &str, resource: &str, sub: &str| {
            let mut a = res(verb, group, resource, "a", "n");
            a.subresource = sub.into();
            a
        };
        assert!(!evaluate(&o, &u, &with_sub("get", "", "pods", "log")).allowed());
        assert!(evaluate(&o, &u, &with_sub("update", "x.io", "widgets", "status")).allowed());
        assert!(!evaluate(&o, &u, &res("update", "x.io", "widgets", "a", "n")).allowed());
        assert!(evaluate(&o, &u, &with_sub("get", "y.io", "things", "scale")).allowed());
        assert!(!evaluate(&o, &u, &res("get", "y.io", "things", "a", "n")).allowed());
    }

    #[test]
    fn resource_names_restrict_to_named_requests() {
        let o = RbacObjects {
            roles: vec![role(
                "a",
                "r",
                json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["one"], "verbs": ["get", "list"]}]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "rb",
                "Role",
                "r",
                json!([{"kind": "User", "name": "u"}]),
            )],
            ..RbacObjects::default()
        };
        let u = user("u", &[]);
        assert!(evaluate(&o, &u, &res("get", "", "secrets", "a", "one")).allowed());
        assert!(!evaluate(&o, &u, &res("get", "", "secrets", "a", "two")).allowed());
        assert!(!evaluate(&o, &u, &res("list", "", "secrets", "a", "")).allowed());
    }

    #[test]
    fn service_account_subjects_and_namespace_defaulting() {
        let o = RbacObjects {
            roles: vec![role(
                "a",
                "r",
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
            )],
            role_bindings: vec![
                role_binding(
                    "a",
                    "explicit",
                    "Role",
                    "r",
                    json!([{"kind": "ServiceAccount", "name": "op", "namespace": "sys"}]),
                ),
                role_binding(
                    "a",
                    "defaulted",
                    "Role",
                    "r",
                    json!([{"kind": "ServiceAccount", "name": "local"}]),
                ),
            ],
            ..RbacObjects::default()
        };
        let get = res("get", "", "pods", "a", "p");
        assert!(evaluate(&o, &user("system:serviceaccount:sys:op", &[]), &get).allowed());
        assert!(evaluate(&o, &user("system:serviceaccount:a:local", &[]), &get).allowed());
        assert!(!evaluate(&o, &user("system:serviceaccount:b:local", &[]), &get).allowed());
        assert!(!evaluate(&o, &user("op", &[]), &get).allowed());
    }

    #[test]
    fn service_account_without_namespace_in_cluster_binding_matches_nobody() {
        let o = RbacObjects {
            cluster_roles: vec![cluster_role(
                "r",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
            )],
            cluster_role_bindings: vec![crb(
                "b",
                "r",
                json!([{"kind": "ServiceAccount", "name": "op"}]),
            )],
            ..RbacObjects::default()
        };
        assert!(
            !evaluate(
                &o,
                &user("system:serviceaccount::op", &[]),
                &res("get", "", "pods", "a", "p")
            )
            .allowed()
        );
    }

    #[test]
    fn service_account_groups_bind_like_any_group() {
        let o = RbacObjects {
            roles: vec![role(
                "a",
                "r",
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
            )],
            role_bindings: vec![role_binding(
                "a",
                "rb",
                "Role",
                "r",
                json!([{"kind": "Group", "name": "system:serviceaccounts:a"}]),
            )],
            ..RbacObjects::default()
        };
        let sa = user(
            "system:serviceaccount:a:x",
            &["system:serviceaccounts", "system:serviceaccounts:a"],
        );
        assert!(evaluate(&o, &sa, &res("list", "", "pods", "a", "")).allowed());
        let other = user(
            "system:serviceaccount:b:x",
            &["system:serviceaccounts", "system:serviceaccounts:b"],
        );
        assert!(!evaluate(&o, &other, &res("list", "", "pods", "a", "")).allowed());
    }

    #[test]
    fn non_resource_urls_exact_prefix_and_only_via_cluster_bindings() {
        let rules = json!([{"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}]);
        let mut o = RbacObjects {
            cluster_roles: vec![cluster_role("m", rules)],
            cluster_role_bindings: vec![crb("m", "m", json!([{"kind": "User", "name": "u"}]))],
            ..RbacObjects::default()
        };
        let u = user("u", &[]);
        assert!(evaluate(&o, &u, &url("get", "/metrics")).allowed());
        assert!(evaluate(&o, &u, &url("get", "/logs/a/b")).allowed());
        assert!(!evaluate(&o, &u, &url("post", "/metrics")).allowed());
        assert!(!evaluate(&o, &u, &url("get", "/metricsx")).allowed());
        assert!(!evaluate(&o, &u, &url("get", "/healthz")).allowed());

        o.cluster_role_bindings.clear();
        o.role_bindings = vec![role_binding(
            "a",
            "m",
            "ClusterRole",
            "m",
            json!([{"kind": "User", "name": "u"}]),
        )];
        assert!(!evaluate(&o, &u, &url("get", "/metrics")).allowed());
    }

    #[test]
    fn bootstrap_policy_allows_discovery_and_self_reviews_for_authenticated_users() {
        let o = RbacObjects::default().with_bootstrap_policy();
        let authed = user("alice", &["system:authenticated"]);
        let anon = user("system:anonymous", &["system:unauthenticated"]);
        assert!(evaluate(&o, &authed, &url("get", "/apis/apps/v1")).allowed());
        assert!(evaluate(&o, &authed, &url("get", "/version")).allowed());
        assert!(evaluate(&o, &anon, &url("get", "/version")).allowed());
        assert!(!evaluate(&o, &anon, &url("get", "/apis")).allowed());
        let ssar = res(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "",
            "",
        );
        assert!(evaluate(&o, &authed, &ssar).allowed());
        assert!(!evaluate(&o, &authed, &res("list", "", "pods", "", "")).allowed());
    }

    #[test]
    fn stored_objects_shadow_bootstrap_objects_of_the_same_name() {
        let o = RbacObjects {
            cluster_roles: vec![cluster_role("system:discovery", json!([]))],
            ..RbacObjects::default()
        }
        .with_bootstrap_policy();
        let authed = user("alice", &["system:authenticated"]);
        assert!(!evaluate(&o, &authed, &url("get", "/apis")).allowed());
        assert!(evaluate(&o, &authed, &url("get", "/version")).allowed());
    }

    #[test]
    fn forbidden_messages_match_the_api_server() {
        let u = user("alice", &[]);
        let v = forbidden_status(&u, &res("get", "", "configmaps", "a", "c"));
        assert_eq!(v["code"], 403);
        assert_eq!(v["reason"], "Forbidden");
        assert_eq!(
            v["message"],
            "configmaps \"c\" is forbidden: User \"alice\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"a\""
        );
        assert_eq!(v["details"], json!({"kind": "configmaps", "name": "c"}));
        let v = forbidden_status(&u, &res("list", "apps", "deployments", "", ""));
        assert_eq!(
            v["message"],
            "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
        );
        let mut sub = res("update", "x.io", "widgets", "n", "w");
        sub.subresource = "status".into();
        assert!(
            forbidden_status(&u, &sub)["message"]
                .as_str()
                .unwrap()
                .contains("cannot update resource \"widgets/status\" in API group \"x.io\"")
        );
        assert_eq!(
            forbidden_status(&u, &url("get", "/metrics"))["message"],
            "forbidden: User \"alice\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn self_subject_access_review_answers_with_the_decision() {
        let o = alice_reads_configmaps_in_a();
        let review = |verb: &str, ns: &str| {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "spec": {"resourceAttributes": {"verb": verb, "resource": "configmaps", "namespace": ns}}})
        };
        let alice = user("alice", &[]);
        let yes = self_subject_access_review(&o, &alice, &review("list", "a")).unwrap();
        assert_eq!(yes["status"]["allowed"], true);
        assert_eq!(yes["spec"]["resourceAttributes"]["verb"], "list");
        assert!(
            yes["status"]["reason"]
                .as_str()
                .unwrap()
                .contains("alice-cm/a")
        );
        let no = self_subject_access_review(&o, &alice, &review("delete", "a")).unwrap();
        assert_eq!(no["status"]["allowed"], false);
        let url_review =
            json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/version"}}});
        let boot = RbacObjects::default().with_bootstrap_policy();
        let authed = user("alice", &["system:authenticated"]);
        assert_eq!(
            self_subject_access_review(&boot, &authed, &url_review).unwrap()["status"]["allowed"],
            true
        );
        assert!(self_subject_access_review(&o, &alice, &json!({"spec": {}})).is_err());
    }
}
