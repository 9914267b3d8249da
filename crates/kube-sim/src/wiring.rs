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
