//! Authentication like the real API server's union authenticator: a verified client
//! certificate (`CN` → user, each `O` → group) or a static bearer token; no credentials at all
//! means the anonymous user; a bearer token nobody knows is a 401.
//!
//! Every authenticated user gets `system:authenticated`; users named
//! `system:serviceaccount:<ns>:<name>` also get `system:serviceaccounts` and
//! `system:serviceaccounts:<ns>`, like tokens minted for service accounts.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use crate::tls::PeerCertificate;

/// The group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The anonymous user's name.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The anonymous user's group.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// A user as authentication establishes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// User name.
    pub name: String,
    /// UID (empty unless configured).
    pub uid: String,
    /// Groups, with the implicit ones added.
    pub groups: Vec<String>,
}

impl Identity {
    /// A user with explicit groups (the implicit groups are added on authentication).
    pub fn new(name: impl Into<String>, groups: &[&str]) -> Self {
        Self {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    /// The anonymous user.
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP])
    }

    /// Adds the groups the real server adds to authenticated users.
    fn with_implicit_groups(mut self) -> Self {
        let mut add = |g: String| {
            if !self.groups.contains(&g) {
                self.groups.push(g);
            }
        };
        if let Some(rest) = self.name.strip_prefix("system:serviceaccount:")
            && let Some((ns, _)) = rest.split_once(':')
        {
            add("system:serviceaccounts".to_owned());
            add(format!("system:serviceaccounts:{ns}"));
        }
        add(AUTHENTICATED_GROUP.to_owned());
        self
    }
}

/// The outcome of authenticating one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// Credentials were presented and accepted.
    User(Identity),
    /// No credentials: the anonymous user.
    Anonymous,
    /// Credentials were presented and rejected: answer 401 Unauthorized.
    Rejected,
}

/// Static bearer tokens plus client-certificate authentication.
///
/// Cloning shares the token table, so tokens can be added while the server runs.
#[derive(Clone, Default)]
pub struct StaticAuthenticator {
    tokens: Arc<RwLock<HashMap<String, Identity>>>,
    anonymous: bool,
}

impl fmt::Debug for StaticAuthenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Token values are credentials; show only how many there are.
        let count = self.tokens.read().map(|t| t.len()).unwrap_or(0);
        f.debug_struct("StaticAuthenticator")
            .field("tokens", &count)
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

impl StaticAuthenticator {
    /// An authenticator with no tokens; anonymous requests allowed (the API server default).
    pub fn new() -> Self {
        Self {
            tokens: Arc::default(),
            anonymous: true,
        }
    }

    /// Disables anonymous access: requests without credentials get 401.
    pub fn without_anonymous(mut self) -> Self {
        self.anonymous = false;
        self
    }

    /// Accepts `token` as `user`.
    pub fn add_token(&self, token: impl Into<String>, user: Identity) {
        if let Ok(mut tokens) = self.tokens.write() {
            tokens.insert(token.into(), user);
        }
    }

    /// Stops accepting `token`.
    pub fn remove_token(&self, token: &str) {
        if let Ok(mut tokens) = self.tokens.write() {
            tokens.remove(token);
        }
    }

    /// Authenticates from the `Authorization` header value (if any) and the verified peer
    /// certificate (if any). A certificate wins over a token, as in the real union
    /// authenticator, which tries x509 first.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: Option<&PeerCertificate>,
    ) -> Authentication {
        if let Some(id) = peer.and_then(|p| p.identity().ok())
            && !id.common_name.is_empty()
        {
            let groups: Vec<&str> = id.organizations.iter().map(String::as_str).collect();
            return Authentication::User(
                Identity::new(id.common_name.clone(), &groups).with_implicit_groups(),
            );
        }
        match authorization.map(str::trim) {
            Some(value) => {
                let Some(token) = bearer_token(value) else {
                    return Authentication::Rejected;
                };
                let known = self
                    .tokens
                    .read()
                    .ok()
                    .and_then(|tokens| tokens.get(token).cloned());
                match known {
                    Some(user) => Authentication::User(user.with_implicit_groups()),
                    None => Authentication::Rejected,
                }
            }
            None if self.anonymous => Authentication::Anonymous,
            None => Authentication::Rejected,
        }
    }
}

/// The token of a `Bearer <token>` header (scheme case-insensitive, like Go's server).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The body of the real server's 401 answer.
pub fn unauthorized_status() -> serde_json::Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::CertificateAuthority;

    fn auth() -> StaticAuthenticator {
        let a = StaticAuthenticator::new();
        a.add_token("tok-alice", Identity::new("alice", &["devs"]));
        a.add_token(
            "tok-sa",
            Identity::new("system:serviceaccount:ops:operator", &[]),
        );
        a
    }

    #[test]
    fn known_token_yields_user_with_system_authenticated() {
        let got = auth().authenticate(Some("Bearer tok-alice"), None);
        assert_eq!(
            got,
            Authentication::User(Identity::new("alice", &["devs", AUTHENTICATED_GROUP]))
        );
        assert!(matches!(
            auth().authenticate(Some("bearer  tok-alice "), None),
            Authentication::User(_)
        ));
    }

    #[test]
    fn service_account_users_get_service_account_groups() {
        let Authentication::User(u) = auth().authenticate(Some("Bearer tok-sa"), None) else {
            panic!("token should authenticate");
        };
        assert_eq!(
            u.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ops",
                AUTHENTICATED_GROUP
            ]
        );
    }

    #[test]
    fn unknown_or_malformed_credentials_are_rejected() {
        assert_eq!(
            auth().authenticate(Some("Bearer nope"), None),
            Authentication::Rejected
        );
        assert_eq!(
            auth().authenticate(Some("Basic YTpi"), None),
            Authentication::Rejected
        );
        assert_eq!(
            auth().authenticate(Some("Bearer "), None),
            Authentication::Rejected
        );
    }

    #[test]
    fn removed_token_no_longer_works() {
        let a = auth();
        a.remove_token("tok-alice");
        assert_eq!(
            a.authenticate(Some("Bearer tok-alice"), None),
            Authentication::Rejected
        );
    }

    #[test]
    fn no_credentials_is_anonymous_unless_disabled() {
        assert_eq!(auth().authenticate(None, None), Authentication::Anonymous);
        assert_eq!(
            auth().without_anonymous().authenticate(None, None),
            Authentication::Rejected
        );
    }

    #[test]
    fn client_certificate_maps_cn_and_o_and_wins_over_a_token() {
        let ca = CertificateAuthority::generate("ca").unwrap();
        let cert = ca
            .issue_client("kube-sim-admin", &["system:masters"])
            .unwrap();
        let peer = PeerCertificate(Arc::new(cert.cert_der.clone()));
        let got = auth().authenticate(Some("Bearer nope"), Some(&peer));
        assert_eq!(
            got,
            Authentication::User(Identity::new(
                "kube-sim-admin",
                &["system:masters", AUTHENTICATED_GROUP]
            ))
        );
    }

    #[test]
    fn debug_does_not_print_tokens() {
        assert!(!format!("{:?}", auth()).contains("tok-alice"));
    }
}
