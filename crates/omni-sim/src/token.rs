//! The simulator's stand-in for Omni's service-account JWTs
//! (docs/omni-wire.md#service-account-kubeconfigs, step 4).
//!
//! Tokens are JWT-shaped (`header.claims.signature`, base64url without padding) and carry the
//! same claims as Omni's. The signature is a SHA-256 digest keyed with a constant simulator
//! secret: enough for a workload API simulator to reject tampered tokens, not real security.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Key id placed in the token header.
pub(crate) const KEY_ID: &str = "omni-sim";
const SECRET: &[u8] = b"omni-sim token signing secret (not a real secret)";

/// What a minted token says about its bearer.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenClaims {
    /// Kubernetes user name (`sub`).
    pub user: String,
    /// Kubernetes groups.
    pub groups: Vec<String>,
    /// Cluster the token is for.
    pub cluster: String,
    /// UUID of that cluster.
    pub cluster_uuid: String,
    /// Issuer: `omni-<account name>-service-account-issuer`.
    pub issuer: String,
    /// Issue time.
    pub issued_at: Timestamp,
    /// Expiry time.
    pub expires_at: Timestamp,
}

impl std::fmt::Debug for TokenClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenClaims")
            .field("user", &self.user)
            .field("groups", &self.groups)
            .field("cluster", &self.cluster)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl TokenClaims {
    /// Whether the token has expired at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at <= now
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    iat: i64,
    exp: i64,
    iss: String,
    sub: String,
    groups: Vec<String>,
    cluster: String,
    cluster_uuid: String,
}

fn signature(signing_input: &str) -> String {
    let mut h = Sha256::new();
    h.update(SECRET);
    h.update(b".");
    h.update(signing_input.as_bytes());
    URL_SAFE_NO_PAD.encode(h.finalize())
}

/// Mints a token for `claims`. Deterministic: the same claims give the same token.
pub(crate) fn mint(claims: &TokenClaims) -> String {
    let header = serde_json::json!({ "alg": "HS256", "kid": KEY_ID, "typ": "JWT" });
    let wire = Wire {
        iat: claims.issued_at.as_second(),
        exp: claims.expires_at.as_second(),
        iss: claims.issuer.clone(),
        sub: claims.user.clone(),
        groups: claims.groups.clone(),
        cluster: claims.cluster.clone(),
        cluster_uuid: claims.cluster_uuid.clone(),
    };
    let body = serde_json::to_vec(&wire).unwrap_or_default();
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(body)
    );
    let sig = signature(&input);
    format!("{input}.{sig}")
}

/// Decodes a token the simulator minted; `None` when malformed or tampered with. Expiry is not
/// checked here (see [`TokenClaims::is_expired`]) so callers can apply their own clock.
pub fn decode(token: &str) -> Option<TokenClaims> {
    let (input, sig) = token.rsplit_once('.')?;
    let (_, body) = input.split_once('.')?;
    if signature(input) != sig {
        return None;
    }
    let wire: Wire = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
    Some(TokenClaims {
        user: wire.sub,
        groups: wire.groups,
        cluster: wire.cluster,
        cluster_uuid: wire.cluster_uuid,
        issuer: wire.iss,
        issued_at: Timestamp::from_second(wire.iat).ok()?,
        expires_at: Timestamp::from_second(wire.exp).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TokenClaims {
        TokenClaims {
            user: "ops".into(),
            groups: vec!["system:masters".into()],
            cluster: "demo".into(),
            cluster_uuid: "u".into(),
            issuer: "omni-bot-service-account-issuer".into(),
            issued_at: Timestamp::from_second(1_767_225_600).unwrap(),
            expires_at: Timestamp::from_second(1_767_229_200).unwrap(),
        }
    }

    #[test]
    fn round_trips_and_is_deterministic() {
        let t = mint(&claims());
        assert_eq!(t, mint(&claims()));
        assert_eq!(t.split('.').count(), 3);
        assert_eq!(decode(&t), Some(claims()));
    }

    #[test]
    fn tampered_tokens_are_rejected() {
        let t = mint(&claims());
        let mut other = claims();
        other.groups = vec!["nobody".into()];
        let forged_body = mint(&other).split('.').nth(1).unwrap().to_string();
        let parts: Vec<&str> = t.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], forged_body, parts[2]);
        assert_eq!(decode(&forged), None);
        assert_eq!(decode("not-a-token"), None);
    }

    #[test]
    fn expiry_is_reported() {
        let c = claims();
        assert!(!c.is_expired(Timestamp::from_second(1_767_225_601).unwrap()));
        assert!(c.is_expired(Timestamp::from_second(1_767_229_200).unwrap()));
    }
}
