//! Adapters plugging the edges modules (authentication) into the server's seams.

use crate::auth::{Authentication, Identity, StaticAuthenticator};
use crate::request::{Authenticator, UserInfo};
use crate::tls::PeerCertificate;

impl Authenticator for StaticAuthenticator {
    fn authenticate(
        &self,
        headers: &http::HeaderMap,
        peer_cert_der: Option<&[u8]>,
    ) -> Option<UserInfo> {
        let authorization = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let peer = peer_cert_der.map(|d| PeerCertificate(std::sync::Arc::new(d.to_vec())));
        // `None` makes the server answer 401, as for rejected credentials.
        let id = match StaticAuthenticator::authenticate(self, authorization, peer.as_ref()) {
            Authentication::User(id) => id,
            Authentication::Anonymous => Identity::anonymous(),
            Authentication::Rejected => return None,
        };
        Some(UserInfo {
            name: id.name,
            groups: id.groups,
        })
    }
}

/// RBAC authorization against the Roles/ClusterRoles and bindings in the store, plus the
/// bootstrap policy the real API server creates at start-up (e.g. `system:masters`
/// is cluster-admin).
#[derive(Debug, Clone, Copy, Default)]
pub struct RbacAuthorizer;

impl crate::request::Authorizer for RbacAuthorizer {
    fn authorize(
        &self,
        user: &UserInfo,
        req: &crate::request::RequestInfo,
        store: &crate::store::Store,
    ) -> Result<(), String> {
        // The same decision `evaluate` makes first, without reading every RBAC object.
        if user.groups.iter().any(|g| g == crate::rbac::SYSTEM_MASTERS) {
            return Ok(());
        }
        const G: &str = "rbac.authorization.k8s.io";
        let objects = crate::rbac::RbacObjects {
            roles: store.list_objects(G, "roles", None),
            cluster_roles: store.list_objects(G, "clusterroles", None),
            role_bindings: store.list_objects(G, "rolebindings", None),
            cluster_role_bindings: store.list_objects(G, "clusterrolebindings", None),
        }
        .with_bootstrap_policy();
        let subject = crate::rbac::Subject {
            name: user.name.clone(),
            groups: user.groups.clone(),
        };
        let attrs = crate::rbac::Attributes {
            verb: req.verb.clone(),
            resource_request: req.is_resource_request,
            api_group: req.api_group.clone(),
            resource: req.resource.clone(),
            subresource: req.subresource.clone().unwrap_or_default(),
            name: req.name.clone().unwrap_or_default(),
            namespace: req.namespace.clone().unwrap_or_default(),
            path: req.path.clone(),
        };
        if crate::rbac::evaluate(&objects, &subject, &attrs).allowed() {
            return Ok(());
        }
        let status = crate::rbac::forbidden_status(&subject, &attrs);
        Err(status
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("forbidden")
            .to_string())
    }
}
