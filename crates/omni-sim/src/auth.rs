//! Service-account keys and `siderov1` request verification, implemented independently of the
//! client's signer (docs/omni-wire.md#request-signing) so that a client bug cannot hide behind a
//! shared mistake.
//!
//! Keys are registered as `PublicKeys.omni.sidero.dev` resources in the store (ID = fingerprint,
//! label `user-id`), as Omni does; users and their roles live beside the store.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use jiff::{SignedDuration, Timestamp};
use omni_client::proto::specs::{PublicKeySpec, public_key_spec};
use pgp::composed::{
    ArmorOptions, Deserializable, DetachedSignature, KeyType, SecretKeyParamsBuilder,
    SignedPublicKey, SignedSecretKey, SubkeyParamsBuilder,
};
use pgp::crypto::ecc_curve::ECCCurve;
use pgp::crypto::hash::HashAlgorithm;
use pgp::types::KeyDetails as _;
use serde_json::Value;
use tonic::metadata::MetadataMap;

use crate::clock::{Clock, from_proto, to_proto};
use crate::store::{Store, decode_spec, resource};
use crate::types::{DEFAULT_NS, Role, label, ty};

/// The ten header names covered by the signed payload, in Go's sorted order
/// (docs/omni-wire.md#signed-payload).
pub(crate) const SIGNED_HEADERS: [&str; 10] = [
    "authorization",
    "cluster",
    "context",
    "fieldSelectors",
    "namespace",
    "nodes",
    "runtime",
    "selectors",
    "uid",
    "x-sidero-timestamp",
];

/// Allowed distance between the request timestamp and the server clock.
pub(crate) const MAX_SKEW: SignedDuration = SignedDuration::from_secs(300);

/// Longest lifetime Omni accepts for a service-account key (365 days + 1 minute).
pub(crate) const MAX_KEY_LIFETIME: SignedDuration = SignedDuration::from_secs(365 * 24 * 3600 + 60);

/// Owner used for the resources the simulated account service creates.
const ACCOUNT_OWNER: &str = "ServiceAccountController";

/// Why a request was not authenticated. Only ever logged at debug level: the client always sees
/// `invalid signature`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthFailure {
    /// No `x-sidero-signature` header.
    #[error("signature header missing")]
    MissingSignature,
    /// Header did not have 4 space-separated fields or the wrong version tag.
    #[error("malformed signature header")]
    MalformedHeader,
    /// No PublicKey with that fingerprint.
    #[error("unknown key fingerprint")]
    UnknownKey,
    /// Key is past its expiration.
    #[error("key expired")]
    Expired,
    /// Key not confirmed.
    #[error("key not confirmed")]
    Unconfirmed,
    /// Key has no user or the user is gone.
    #[error("key has no user")]
    NoUser,
    /// Timestamp header missing, not an integer or skewed.
    #[error("timestamp missing or outside the allowed skew")]
    Timestamp,
    /// Payload missing or not JSON.
    #[error("payload missing or invalid")]
    Payload,
    /// Payload names a different method.
    #[error("payload method {payload:?} does not match called method {called:?}")]
    MethodMismatch {
        /// Method in the payload.
        payload: String,
        /// Method called.
        called: String,
    },
    /// A signed header differs from the sent metadata.
    #[error("signed header {0:?} does not match the request metadata")]
    HeaderMismatch(String),
    /// Signature bytes unparsable or cryptographically invalid.
    #[error("signature verification failed: {0}")]
    Signature(String),
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Full identity (e-mail form).
    pub(crate) email: String,
    /// Name from the signature header (informational).
    pub(crate) name: String,
    /// Effective role: the lower of the user's and the key's role.
    pub(crate) role: Role,
}

/// Errors of key registration.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The armored key could not be parsed.
    #[error("failed to parse public key: {0}")]
    Parse(String),
    /// The key contains private material.
    #[error("public key contains private key material")]
    Private,
    /// The key's lifetime is missing or too long.
    #[error("{0}")]
    Lifetime(String),
    /// The key's user ID is not an e-mail address.
    #[error("{0}")]
    Identity(String),
    /// A key or account name is already registered.
    #[error("{0}")]
    AlreadyExists(String),
    /// Key generation failed.
    #[error("failed to generate key: {0}")]
    Generate(String),
}

/// Full identity e-mail for a service-account name (docs/omni-wire.md#service-account-keys).
pub(crate) fn service_account_email(name: &str) -> String {
    match name.strip_prefix("infra-provider:") {
        Some(rest) => format!("{rest}@infra-provider.serviceaccount.omni.sidero.dev"),
        None => format!("{name}@serviceaccount.omni.sidero.dev"),
    }
}

/// Lowercase hex v4 fingerprint of a key's primary key.
pub(crate) fn fingerprint(key: &SignedPublicKey) -> String {
    hex::encode(key.fingerprint().as_bytes())
}

/// Parses an ASCII-armored public key.
pub(crate) fn parse_public_key(armored: &str) -> Result<SignedPublicKey, KeyError> {
    if armored.contains("PRIVATE KEY BLOCK") {
        return Err(KeyError::Private);
    }
    SignedPublicKey::from_armor_single(Cursor::new(armored.as_bytes()))
        .map(|(k, _)| k)
        .map_err(|e| KeyError::Parse(e.to_string()))
}

/// Expiration time recorded in the key's self-signatures, if any.
pub(crate) fn key_expiration(key: &SignedPublicKey) -> Option<Timestamp> {
    let created = i64::from(key.created_at().as_secs());
    key.details
        .users
        .iter()
        .flat_map(|u| u.signatures.iter())
        .chain(key.details.direct_signatures.iter())
        .filter_map(|s| s.key_expiration_time())
        .map(|d| d.as_secs())
        .filter(|secs| *secs > 0)
        .min()
        .and_then(|secs| Timestamp::from_second(created + i64::from(secs)).ok())
}

/// A freshly generated service-account key and its `OMNI_SERVICE_ACCOUNT_KEY` encoding.
pub struct GeneratedKey {
    /// Account name.
    pub name: String,
    /// Armored public key.
    pub public_armored: String,
    /// base64(JSON{name, pgp_key}) — a secret; never log it.
    pub encoded: String,
    /// Fingerprint.
    pub fingerprint: String,
}

impl std::fmt::Debug for GeneratedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedKey")
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// Generates an Ed25519 (legacy EdDSA) v4 key with an ECDH Curve25519 subkey, the shape omnictl
/// produces (docs/omni-wire.md#service-account-keys), and encodes it as a service-account key.
pub fn generate_key(name: &str) -> Result<GeneratedKey, KeyError> {
    let gen_err = |e: &dyn std::fmt::Display| KeyError::Generate(e.to_string());
    let email = service_account_email(name);
    let base = name.strip_prefix("infra-provider:").unwrap_or(name);
    let mut params = SecretKeyParamsBuilder::default();
    params
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .primary_user_id(format!("{base} (omni-sim) <{email}>"))
        .preferred_hash_algorithms([HashAlgorithm::Sha256].into_iter().collect())
        .subkey(
            SubkeyParamsBuilder::default()
                .key_type(KeyType::ECDH(ECCCurve::Curve25519Legacy))
                .can_encrypt(pgp::composed::EncryptionCaps::All)
                .build()
                .map_err(|e| gen_err(&e))?,
        );
    let secret: SignedSecretKey = params
        .build()
        .map_err(|e| gen_err(&e))?
        .generate(rand::thread_rng())
        .map_err(|e| gen_err(&e))?;
    let armored = secret
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| gen_err(&e))?;
    let public = secret.to_public_key();
    let public_armored = public
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| gen_err(&e))?;
    let json = serde_json::json!({ "name": name, "pgp_key": armored });
    let encoded = base64::engine::general_purpose::STANDARD.encode(json.to_string());
    Ok(GeneratedKey {
        name: name.to_string(),
        public_armored,
        encoded,
        fingerprint: fingerprint(&public),
    })
}

#[derive(Debug, Clone)]
struct User {
    email: String,
    role: Role,
}

/// Registered users and key checks. Keys themselves are PublicKey resources in the store.
pub(crate) struct Authenticator {
    store: Arc<Store>,
    clock: Arc<dyn Clock>,
    users: Mutex<HashMap<String, User>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator over `store`.
    pub(crate) fn new(store: Arc<Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Registers an armored public key for account `name` with `role`. The expiration is
    /// `expiration` if given, else the key's own, else one year from now. With `strict`, Omni's
    /// CreateServiceAccount checks apply (lifetime set and ≤ 365 days, e-mail user ID).
    pub(crate) fn register(
        &self,
        name: &str,
        armored: &str,
        role: Role,
        expiration: Option<Timestamp>,
        strict: bool,
    ) -> Result<String, KeyError> {
        let key = parse_public_key(armored)?;
        let now = self.clock.now();
        let own_expiry = key_expiration(&key);
        if strict {
            let Some(exp) = own_expiry else {
                return Err(KeyError::Lifetime(
                    "key does not have an expiration time".into(),
                ));
            };
            if exp < now - MAX_SKEW {
                return Err(KeyError::Lifetime("key is expired".into()));
            }
            if exp > now + MAX_KEY_LIFETIME {
                return Err(KeyError::Lifetime("key lifetime is too long".into()));
            }
            let has_email = key.details.users.iter().any(|u| {
                let id = String::from_utf8_lossy(u.id.id());
                id.contains('<') && id.contains('@') && id.trim_end().ends_with('>')
            });
            if !has_email {
                return Err(KeyError::Identity(
                    "key user ID does not contain an e-mail address".into(),
                ));
            }
        }
        let expiration = expiration
            .or(own_expiry)
            .unwrap_or_else(|| now + SignedDuration::from_hours(24 * 365));
        let fp = fingerprint(&key);
        if self
            .store
            .try_get(DEFAULT_NS, ty::PUBLIC_KEY, &fp)
            .is_some()
        {
            return Err(KeyError::AlreadyExists(format!(
                "public key {fp} already exists"
            )));
        }
        let email = service_account_email(name);
        {
            let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
            if strict && users.contains_key(&email) {
                return Err(KeyError::AlreadyExists(format!(
                    "service account {name:?} already exists"
                )));
            }
            users.insert(
                email.clone(),
                User {
                    email: email.clone(),
                    role,
                },
            );
        }
        let spec = PublicKeySpec {
            public_key: armored.as_bytes().to_vec(),
            scopes: Vec::new(),
            expiration: Some(to_proto(expiration)),
            confirmed: true,
            identity: Some(public_key_spec::Identity {
                email: email.clone(),
            }),
            role: role.as_str().to_string(),
            r#type: public_key_spec::Type::Pgp as i32,
        };
        self.store.put(resource(
            ty::PUBLIC_KEY,
            &fp,
            ACCOUNT_OWNER,
            [(label::USER_ID.to_string(), email)],
            &spec,
        ));
        Ok(fp)
    }

    /// Verifies a request's signature per docs/omni-wire.md#what-the-server-checks, in the
    /// server's order.
    pub(crate) fn authenticate(
        &self,
        method: &str,
        md: &MetadataMap,
    ) -> Result<Identity, AuthFailure> {
        // 2. signature header
        let header = md
            .get("x-sidero-signature")
            .and_then(|v| v.to_str().ok())
            .ok_or(AuthFailure::MissingSignature)?;
        let parts: Vec<&str> = header.split(' ').collect();
        if parts.len() < 4 || parts[0] != "siderov1" {
            return Err(AuthFailure::MalformedHeader);
        }
        let (name, fp, sig_b64) = (parts[1], parts[2], parts[3]);

        // 3. key resource
        let key_res = self
            .store
            .try_get(DEFAULT_NS, ty::PUBLIC_KEY, fp)
            .ok_or(AuthFailure::UnknownKey)?;
        let spec: PublicKeySpec = decode_spec(&key_res).map_err(|_| AuthFailure::UnknownKey)?;
        let now = self.clock.now();
        let expiration = spec
            .expiration
            .as_ref()
            .map(from_proto)
            .ok_or(AuthFailure::Expired)?;
        if expiration <= now {
            return Err(AuthFailure::Expired);
        }
        if !spec.confirmed {
            return Err(AuthFailure::Unconfirmed);
        }
        let user_id = crate::store::label(&key_res, label::USER_ID).ok_or(AuthFailure::NoUser)?;

        // 4. user and effective role
        let user = self
            .users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(user_id)
            .cloned()
            .ok_or(AuthFailure::NoUser)?;
        let key_role = spec.role.parse::<Role>().unwrap_or(Role::None);
        let role = user.role.min(key_role);

        // 5. timestamp
        let ts = md
            .get("x-sidero-timestamp")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|s| Timestamp::from_second(s).ok())
            .ok_or(AuthFailure::Timestamp)?;
        if now.duration_since(ts).abs() > MAX_SKEW {
            return Err(AuthFailure::Timestamp);
        }

        // 6. payload
        let payload = md
            .get("x-sidero-payload")
            .map(|v| v.as_bytes().to_vec())
            .ok_or(AuthFailure::Payload)?;
        check_payload(method, md, &payload)?;

        // 7. OpenPGP signature over the exact payload bytes
        let public = parse_public_key(&String::from_utf8_lossy(&spec.public_key))
            .map_err(|e| AuthFailure::Signature(e.to_string()))?;
        let sig_bytes = base64::engine::general_purpose::STANDARD
            .decode(sig_b64)
            .map_err(|e| AuthFailure::Signature(e.to_string()))?;
        let sig = DetachedSignature::from_bytes(Cursor::new(sig_bytes))
            .map_err(|e| AuthFailure::Signature(e.to_string()))?;
        if matches!(
            sig.signature.hash_alg(),
            Some(HashAlgorithm::Md5 | HashAlgorithm::Sha1 | HashAlgorithm::Ripemd160)
                | Some(HashAlgorithm::None)
                | None
        ) {
            return Err(AuthFailure::Signature(
                "weak or missing hash algorithm".into(),
            ));
        }
        verify_time(&public, &sig, now)?;
        sig.verify(&public, &payload)
            .map_err(|e| AuthFailure::Signature(e.to_string()))?;
        Ok(Identity {
            email: user.email,
            name: name.to_string(),
            role,
        })
    }
}

/// Checks signature creation against "now", allowing the server's retry window of
/// min(5 min, key lifetime / 2) for client clocks that run ahead, and the key's own expiry.
fn verify_time(
    key: &SignedPublicKey,
    sig: &DetachedSignature,
    now: Timestamp,
) -> Result<(), AuthFailure> {
    let created = Timestamp::from_second(i64::from(key.created_at().as_secs()))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let expiry = key_expiration(key);
    if let Some(exp) = expiry
        && exp <= now
    {
        return Err(AuthFailure::Expired);
    }
    let window = match expiry {
        Some(exp) => (exp.duration_since(created) / 2).min(MAX_SKEW),
        None => MAX_SKEW,
    };
    if let Some(sig_created) = sig.signature.created() {
        let sig_at = Timestamp::from_second(i64::from(sig_created.as_secs()))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        if sig_at > now + window {
            return Err(AuthFailure::Signature(
                "signature made in the future".into(),
            ));
        }
    }
    Ok(())
}

/// Validates the payload JSON against the called method and the actual metadata.
pub(crate) fn check_payload(
    method: &str,
    md: &MetadataMap,
    payload: &[u8],
) -> Result<(), AuthFailure> {
    let value: Value = serde_json::from_slice(payload).map_err(|_| AuthFailure::Payload)?;
    let obj = value.as_object().ok_or(AuthFailure::Payload)?;
    let payload_method = obj
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if payload_method != method {
        return Err(AuthFailure::MethodMismatch {
            payload: payload_method.to_string(),
            called: method.to_string(),
        });
    }
    let headers = match obj.get("headers") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(AuthFailure::Payload),
    };
    for name in SIGNED_HEADERS {
        let signed: Option<Vec<String>> = match headers.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| AuthFailure::HeaderMismatch(name.to_string()))?,
            ),
            Some(_) => return Err(AuthFailure::HeaderMismatch(name.to_string())),
        };
        let actual = actual_header(md, name);
        if signed != actual {
            return Err(AuthFailure::HeaderMismatch(name.to_string()));
        }
    }
    Ok(())
}

/// The values of a metadata key as Omni's server sees them: absent = `None`. The server looks
/// `fieldSelectors` up without lower-casing, and gRPC keys are lowercase, so it is never found.
fn actual_header(md: &MetadataMap, name: &str) -> Option<Vec<String>> {
    if name != name.to_ascii_lowercase() {
        return None;
    }
    let values: Vec<String> = md
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_encoded_bytes()).into_owned())
        .collect();
    if values.is_empty() {
        None
    } else {
        Some(values)
    }
}
