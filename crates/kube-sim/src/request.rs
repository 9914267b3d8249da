//! Seams between the request pipeline and pluggable authentication,
//! authorization and admission.

/// Who is calling, after authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// User name, e.g. `system:admin`.
    pub name: String,
    /// Group memberships, e.g. `system:masters`.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The identity used when no authenticator is configured: a cluster admin.
    pub fn admin() -> Self {
        UserInfo {
            name: "system:admin".to_string(),
            groups: vec![
                "system:masters".to_string(),
                "system:authenticated".to_string(),
            ],
        }
    }
}

/// What is being requested, as the authorizer and admission see it.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// One of get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// API group; empty for the core group.
    pub api_group: String,
    /// API version, e.g. `v1`.
    pub api_version: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource such as `status`.
    pub subresource: Option<String>,
    /// Namespace of the request, if namespaced.
    pub namespace: Option<String>,
    /// Object name, if the request addresses one object.
    pub name: Option<String>,
    /// Kind of the resource.
    pub kind: String,
    /// Request path.
    pub path: String,
    /// False for non-resource URLs such as `/version`.
    pub is_resource_request: bool,
}

/// Maps request credentials to a user.
pub trait Authenticator: Send + Sync + 'static {
    /// Returns None when the credentials are missing or invalid (the server answers 401).
    fn authenticate(
        &self,
        headers: &http::HeaderMap,
        peer_cert_der: Option<&[u8]>,
    ) -> Option<UserInfo>;
}

/// Decides whether a user may perform a request.
pub trait Authorizer: Send + Sync + 'static {
    /// Err carries the reason; the server answers 403 Forbidden.
    fn authorize(
        &self,
        user: &UserInfo,
        req: &RequestInfo,
        store: &crate::store::Store,
    ) -> Result<(), String>;
}

/// Admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Object creation.
    Create,
    /// Update or patch.
    Update,
    /// Deletion.
    Delete,
    /// Connect (exec, proxy); unused by kube-sim's own verbs.
    Connect,
}

/// Admission runs after defaulting/mutation, before persisting. Err = the request fails with that Status.
pub trait Admission: Send + Sync + 'static {
    /// Returns warnings to attach as `Warning` headers.
    #[allow(clippy::too_many_arguments)]
    fn admit<'a>(
        &'a self,
        op: Operation,
        user: &'a UserInfo,
        req: &'a RequestInfo,
        object: Option<&'a serde_json::Value>,
        old: Option<&'a serde_json::Value>,
        store: &'a crate::store::Store,
    ) -> futures::future::BoxFuture<'a, Result<Vec<String>, crate::error::ApiError>>;
}

/// The request an access review asks about (SubjectAccessReview and SelfSubjectAccessReview
/// `spec.resourceAttributes` / `nonResourceAttributes`), for the authorizer.
impl From<crate::rbac::Attributes> for RequestInfo {
    fn from(attrs: crate::rbac::Attributes) -> Self {
        let optional = |s: String| Some(s).filter(|s| !s.is_empty());
        RequestInfo {
            verb: attrs.verb,
            api_group: attrs.api_group,
            api_version: String::new(),
            resource: attrs.resource,
            subresource: optional(attrs.subresource),
            namespace: optional(attrs.namespace),
            name: optional(attrs.name),
            kind: String::new(),
            path: attrs.path,
            is_resource_request: attrs.resource_request,
        }
    }
}
