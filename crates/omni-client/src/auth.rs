//! Omni service-account keys and `siderov1` request signing.
//!
//! A service-account key (what `OMNI_SERVICE_ACCOUNT_KEY` holds) is standard base64 of a JSON
//! object `{"name": ..., "pgp_key": <armored unencrypted OpenPGP secret key>}`. Every gRPC call is
//! signed: a compact JSON payload naming the method and a fixed set of metadata headers is signed
//! with a detached binary OpenPGP signature, and the result travels in `x-sidero-*` headers.
//!
//! Nothing in this module ever formats key material: errors carry positions and reasons only, and
//! [`ServiceAccountKey`]'s `Debug` shows the name and fingerprint.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use pgp::composed::{
    ArmorOptions, Deserializable, DetachedSignature, KeyType, SecretKeyParamsBuilder,
    SignedPublicKey, SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{
    KeyFlags, PacketTrait as _, Signature, SignatureConfig, SignatureType, Subpacket,
    SubpacketData, UserId,
};
use pgp::ser::Serialize as _;
use pgp::types::{KeyDetails as _, KeyVersion, Password, SignedUser, Timestamp};

/// Header carrying the Unix time (seconds) the request was signed at.
pub const TIMESTAMP_HEADER: &str = "x-sidero-timestamp";
/// Header carrying the exact signed JSON payload.
pub const PAYLOAD_HEADER: &str = "x-sidero-payload";
/// Header carrying `siderov1 <name> <fingerprint> <base64 signature>`.
pub const SIGNATURE_HEADER: &str = "x-sidero-signature";
/// Version tag of the signature header.
pub const SIGNATURE_VERSION: &str = "siderov1";

/// The metadata keys covered by the signed payload, in the byte-wise sorted order Go emits them.
///
/// `fieldSelectors` keeps its capital letter: the server looks it up verbatim, and gRPC metadata
/// keys are lowercase, so it is always `null`.
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
    TIMESTAMP_HEADER,
];

/// Hash preferences advertised by generated keys (Omni's generator prefers SHA-256).
const PREFERRED_HASHES: [HashAlgorithm; 2] = [HashAlgorithm::Sha256, HashAlgorithm::Sha512];

/// Environment variable names whose assignments must not be pasted into a key value.
const ENV_ASSIGNMENTS: [&str; 3] = [
    "OMNI_ENDPOINT=",
    "OMNI_SERVICE_ACCOUNT_KEY=",
    "SIDERO_SERVICE_ACCOUNT_KEY=",
];

/// Why a service-account key could not be loaded. Messages never contain key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The value is empty after trimming whitespace.
    #[error("service account key is empty")]
    Empty,
    /// The value is a pasted environment block (`OMNI_ENDPOINT=...` lines), not the key alone.
    #[error(
        "service account key contains Omni environment assignments; store only the OMNI_SERVICE_ACCOUNT_KEY value"
    )]
    EnvironmentBlock,
    /// The value is not standard base64 with padding.
    #[error("service account key is not valid base64: {0}")]
    NotBase64(String),
    /// The decoded value is not a JSON object.
    #[error("service account key is not valid JSON: {0}")]
    NotJson(String),
    /// A required JSON field is absent, empty or not a string.
    #[error("service account key is missing the {0:?} field")]
    MissingField(&'static str),
    /// The `pgp_key` field is not a usable OpenPGP secret key.
    #[error("service account key has an unusable OpenPGP key: {0}")]
    BadPgpKey(String),
    /// The key's lifetime ended.
    #[error("service account key expired at {at}")]
    Expired {
        /// When the key expired.
        at: jiff::Timestamp,
    },
    /// Neither the primary key nor any subkey may sign.
    #[error("service account key has no signing-capable key")]
    NoSigningKey,
    /// Key generation failed (only [`generate_key`]).
    #[error("could not generate a service account key: {0}")]
    Generation(String),
}

/// Why a request could not be signed or a signature could not be verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The OpenPGP signing operation failed.
    #[error("could not sign the request payload")]
    Sign,
    /// The armored public key does not parse.
    #[error("public key is not a valid armored OpenPGP public key")]
    BadPublicKey,
    /// The signature bytes do not parse as one OpenPGP signature packet.
    #[error("signature is not a valid OpenPGP signature packet")]
    BadSignature,
    /// The signature is not a binary-document signature (type 0x00).
    #[error("signature is not a binary-document signature")]
    WrongSignatureType,
    /// The signature uses a hash Omni's verifier refuses (MD5, SHA-1, RIPEMD-160).
    #[error("signature uses a weak hash algorithm")]
    WeakHash,
    /// No key of the certificate verifies the signature over the payload.
    #[error("signature does not verify")]
    Mismatch,
}

/// A loaded service-account key, ready to sign requests.
#[derive(Clone)]
pub struct ServiceAccountKey {
    name: String,
    identity: String,
    fingerprint: String,
    expiration: Option<jiff::Timestamp>,
    secret: SignedSecretKey,
    signer: SignerChoice,
}

/// Which key packet produces signatures: gopenpgp prefers a signing subkey when one exists.
#[derive(Clone, Copy, Debug)]
enum SignerChoice {
    Primary,
    Subkey(usize),
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("fingerprint", &self.fingerprint)
            .field("expiration", &self.expiration)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Two keys are equal when they are the same account name and the same OpenPGP key.
impl PartialEq for ServiceAccountKey {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.fingerprint == other.fingerprint
    }
}

impl Eq for ServiceAccountKey {}

impl ServiceAccountKey {
    /// Parses the encoded key (`OMNI_SERVICE_ACCOUNT_KEY` value) and checks it is usable now.
    pub fn parse(encoded: &str) -> Result<Self, KeyError> {
        Self::parse_at(encoded, jiff::Timestamp::now())
    }

    /// Like [`ServiceAccountKey::parse`] but judges expiry at `now` (for deterministic tests).
    pub(crate) fn parse_at(encoded: &str, now: jiff::Timestamp) -> Result<Self, KeyError> {
        let trimmed = encoded.trim();
        if trimmed.is_empty() {
            return Err(KeyError::Empty);
        }
        if contains_environment_block(trimmed) {
            return Err(KeyError::EnvironmentBlock);
        }
        let decoded = STANDARD
            .decode(trimmed)
            .map_err(|e| KeyError::NotBase64(describe_base64_error(&e)))?;
        // Parse into a generic value first: typed deserialisation errors may quote field
        // contents (the armored key), syntax errors only report a position.
        let value: serde_json::Value = serde_json::from_slice(&decoded)
            .map_err(|e| KeyError::NotJson(format!("line {} column {}", e.line(), e.column())))?;
        let object = value
            .as_object()
            .ok_or_else(|| KeyError::NotJson("expected a JSON object".to_owned()))?;
        let name = string_field(object, "name")?;
        let armored = string_field(object, "pgp_key")?;
        Self::from_armored_at(name, armored, now)
    }

    /// Builds a key from a service-account name and an armored OpenPGP secret key.
    pub(crate) fn from_armored(name: &str, armored_secret_key: &str) -> Result<Self, KeyError> {
        Self::from_armored_at(name, armored_secret_key, jiff::Timestamp::now())
    }

    fn from_armored_at(
        name: &str,
        armored_secret_key: &str,
        now: jiff::Timestamp,
    ) -> Result<Self, KeyError> {
        let (secret, _headers) = SignedSecretKey::from_string(armored_secret_key)
            .map_err(|_| bad_key("not an armored OpenPGP secret key"))?;
        if secret.primary_key.version() != KeyVersion::V4 {
            return Err(bad_key("only version 4 OpenPGP keys are supported"));
        }
        if secret.primary_key.secret_params().is_encrypted() {
            return Err(bad_key("the secret key is passphrase-protected"));
        }
        if !secret.details.revocation_signatures.is_empty() {
            return Err(bad_key("the key is revoked"));
        }
        secret
            .verify_bindings()
            .map_err(|_| bad_key("a self-signature does not verify"))?;
        let created = secret.primary_key.created_at().as_secs();
        let self_sig = primary_self_signature(&secret.details.users)
            .ok_or_else(|| bad_key("the key has no user ID self-signature"))?;
        let expiration = match self_sig.key_expiration_time() {
            Some(lifetime) if lifetime.as_secs() > 0 => Some(
                jiff::Timestamp::from_second(i64::from(created) + i64::from(lifetime.as_secs()))
                    .map_err(|_| bad_key("the key expiration time is out of range"))?,
            ),
            _ => None,
        };
        if let Some(at) = expiration
            && at <= now
        {
            return Err(KeyError::Expired { at });
        }
        let signer = if self_sig.key_flags().sign() {
            SignerChoice::Primary
        } else {
            secret
                .secret_subkeys
                .iter()
                .position(|sub| {
                    !sub.key.secret_params().is_encrypted()
                        && sub
                            .signatures
                            .iter()
                            .any(|sig| sig.key_flags().sign() && !subkey_expired(sig, sub, now))
                })
                .map(SignerChoice::Subkey)
                .ok_or(KeyError::NoSigningKey)?
        };
        let fingerprint = hex::encode(secret.primary_key.fingerprint().as_bytes());
        Ok(Self {
            identity: identity_for(name),
            name: name.to_owned(),
            fingerprint,
            expiration,
            secret,
            signer,
        })
    }

    /// The service-account name as given at creation (informational in the signature header).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The account's e-mail identity, e.g. `ci@serviceaccount.omni.sidero.dev`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The v4 primary-key fingerprint: 40 lowercase hex characters. Omni authenticates by it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// When the key stops being valid, if it has a lifetime.
    pub fn expiration(&self) -> Option<jiff::Timestamp> {
        self.expiration
    }

    /// The armored public key (what Omni stores when the account is registered).
    pub fn armored_public_key(&self) -> Result<String, KeyError> {
        self.secret
            .to_public_key()
            .to_armored_string(ArmorOptions::default())
            .map_err(|_| KeyError::Generation("could not armor the public key".to_owned()))
    }

    /// Produces a detached binary-document OpenPGP signature over `payload` (binary packet bytes).
    pub fn sign_payload(&self, payload: &[u8]) -> Result<Vec<u8>, SignatureError> {
        let rng = rand::thread_rng();
        let password = Password::empty();
        let signature = match self.signer {
            SignerChoice::Primary => DetachedSignature::sign_binary_data(
                rng,
                &self.secret.primary_key,
                &password,
                HashAlgorithm::Sha512,
                payload,
            ),
            SignerChoice::Subkey(index) => {
                let sub = self
                    .secret
                    .secret_subkeys
                    .get(index)
                    .ok_or(SignatureError::Sign)?;
                DetachedSignature::sign_binary_data(
                    rng,
                    &sub.key,
                    &password,
                    HashAlgorithm::Sha512,
                    payload,
                )
            }
        }
        .map_err(|_| SignatureError::Sign)?;
        signature.to_bytes().map_err(|_| SignatureError::Sign)
    }

    /// The `x-sidero-signature` value for `payload`: `siderov1 <name> <fingerprint> <base64>`.
    pub fn signature_header(&self, payload: &[u8]) -> Result<String, SignatureError> {
        let signature = self.sign_payload(payload)?;
        Ok(format!(
            "{SIGNATURE_VERSION} {} {} {}",
            self.name,
            self.fingerprint,
            STANDARD.encode(signature)
        ))
    }

    /// Signs an outgoing gRPC request in place: sets the timestamp, payload and signature headers
    /// for the method at `path` (e.g. `/cosi.resource.State/List`). Any previous signing headers
    /// are replaced, so re-sending a request re-signs it with a fresh timestamp.
    pub fn sign_headers(
        &self,
        path: &str,
        headers: &mut HeaderMap,
        unix_seconds: u64,
    ) -> Result<(), SignatureError> {
        headers.remove(PAYLOAD_HEADER);
        headers.remove(SIGNATURE_HEADER);
        headers.insert(TIMESTAMP_HEADER, http::HeaderValue::from(unix_seconds));
        let payload = signed_payload(path, headers);
        let signature = self.signature_header(payload.as_bytes())?;
        let payload_value =
            http::HeaderValue::from_str(&payload).map_err(|_| SignatureError::Sign)?;
        let signature_value =
            http::HeaderValue::from_str(&signature).map_err(|_| SignatureError::Sign)?;
        headers.insert(PAYLOAD_HEADER, payload_value);
        headers.insert(SIGNATURE_HEADER, signature_value);
        Ok(())
    }
}

/// The service-account identity (e-mail) for a name, per Omni's rules: `infra-provider:<x>`
/// accounts live under `infra-provider.serviceaccount.omni.sidero.dev`.
pub(crate) fn identity_for(name: &str) -> String {
    match name.strip_prefix("infra-provider:") {
        Some(provider) => format!("{provider}@infra-provider.serviceaccount.omni.sidero.dev"),
        None => format!("{name}@serviceaccount.omni.sidero.dev"),
    }
}

/// Builds the exact JSON payload that is signed for a call to `method` carrying `headers`.
///
/// The shape is fixed by the server's verifier: `{"headers":{...10 sorted keys...},"method":...}`,
/// compact, each value the list of that header's values or `null` when absent (never `[]`), with
/// Go's HTML-safe escaping so test vectors are byte-identical.
pub fn signed_payload(method: &str, headers: &HeaderMap) -> String {
    let mut out = String::with_capacity(320);
    out.push_str("{\"headers\":{");
    for (index, key) in SIGNED_HEADERS.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        push_json_string(&mut out, key);
        out.push(':');
        // HeaderMap lookups are case-insensitive, but the server reads `fieldSelectors`
        // verbatim from lowercase metadata, so it can never be present.
        let values: Vec<&str> = if key.bytes().any(|b| b.is_ascii_uppercase()) {
            Vec::new()
        } else {
            headers
                .get_all(*key)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect()
        };
        if values.is_empty() {
            out.push_str("null");
        } else {
            out.push('[');
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(&mut out, value);
            }
            out.push(']');
        }
    }
    out.push_str("},\"method\":");
    push_json_string(&mut out, method);
    out.push('}');
    out
}

/// Verifies a detached binary signature over `payload` with any key of an armored certificate.
///
/// Only cryptographic validity is checked; freshness of the signed timestamp and the payload's
/// contents are the caller's business.
pub fn verify_signature(
    armored_public_key: &str,
    payload: &[u8],
    signature: &[u8],
) -> Result<(), SignatureError> {
    let (public, _) = SignedPublicKey::from_string(armored_public_key)
        .map_err(|_| SignatureError::BadPublicKey)?;
    let detached =
        DetachedSignature::from_bytes(signature).map_err(|_| SignatureError::BadSignature)?;
    if detached.signature.typ() != Some(SignatureType::Binary) {
        return Err(SignatureError::WrongSignatureType);
    }
    if !matches!(
        detached.signature.hash_alg(),
        Some(
            HashAlgorithm::Sha256
                | HashAlgorithm::Sha384
                | HashAlgorithm::Sha512
                | HashAlgorithm::Sha224
                | HashAlgorithm::Sha3_256
                | HashAlgorithm::Sha3_512
        )
    ) {
        return Err(SignatureError::WeakHash);
    }
    if detached.verify(&public.primary_key, payload).is_ok() {
        return Ok(());
    }
    if public
        .public_subkeys
        .iter()
        .any(|sub| detached.verify(&sub.key, payload).is_ok())
    {
        return Ok(());
    }
    Err(SignatureError::Mismatch)
}

/// A freshly generated key in every form a test or the simulator needs.
pub(crate) type GeneratedKey = (ServiceAccountKey, String, String);

/// Generates a service-account key the way Omni does: a v4 Ed25519 (EdDSA legacy) primary key
/// with certify+sign capability, user ID `<name> (omni-client) <<identity>>`, expiring after
/// `lifetime`. Returns the loaded key, its armored public key and the encoded key string
/// (`OMNI_SERVICE_ACCOUNT_KEY` form).
pub fn generate_key(name: &str, lifetime: Duration) -> Result<GeneratedKey, KeyError> {
    let fail = |what: &str| KeyError::Generation(what.to_owned());
    let base_name = name.strip_prefix("infra-provider:").unwrap_or(name);
    let user_id = format!("{base_name} (omni-client) <{}>", identity_for(name));
    let lifetime_secs =
        u32::try_from(lifetime.as_secs()).map_err(|_| fail("lifetime is too long"))?;
    if lifetime_secs == 0 {
        return Err(fail("lifetime must be at least one second"));
    }
    let mut rng = rand::thread_rng();
    let params = SecretKeyParamsBuilder::default()
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .primary_user_id(user_id.clone())
        .preferred_hash_algorithms(PREFERRED_HASHES.iter().copied().collect())
        .build()
        .map_err(|_| fail("invalid key parameters"))?;
    let mut secret = params
        .generate(&mut rng)
        .map_err(|_| fail("key generation failed"))?;
    // The builder cannot set a lifetime, so the user ID self-signature is remade with the
    // key- and signature-expiration subpackets Omni requires.
    let uid = UserId::from_str(Default::default(), &user_id).map_err(|_| fail("bad user ID"))?;
    let created = Timestamp::now();
    let mut flags = KeyFlags::default();
    flags.set_certify(true);
    flags.set_sign(true);
    let mut config =
        SignatureConfig::from_key(&mut rng, &secret.primary_key, SignatureType::CertPositive)
            .map_err(|_| fail("signature setup failed"))?;
    let subpackets = [
        SubpacketData::SignatureCreationTime(created),
        SubpacketData::IssuerFingerprint(secret.primary_key.fingerprint()),
        SubpacketData::KeyFlags(flags),
        SubpacketData::KeyExpirationTime(pgp::types::Duration::from_secs(
            lifetime_secs
                .saturating_add(created.as_secs() - secret.primary_key.created_at().as_secs()),
        )),
        SubpacketData::SignatureExpirationTime(pgp::types::Duration::from_secs(lifetime_secs)),
        SubpacketData::PreferredHashAlgorithms(PREFERRED_HASHES.iter().copied().collect()),
        SubpacketData::IsPrimary(true),
    ];
    config.hashed_subpackets = subpackets
        .into_iter()
        .map(Subpacket::regular)
        .collect::<Result<_, _>>()
        .map_err(|_| fail("signature setup failed"))?;
    config.unhashed_subpackets = vec![
        Subpacket::regular(SubpacketData::IssuerKeyId(
            secret.primary_key.legacy_key_id(),
        ))
        .map_err(|_| fail("signature setup failed"))?,
    ];
    let signature = config
        .sign_certification(
            &secret.primary_key,
            secret.primary_key.public_key(),
            &Password::empty(),
            uid.tag(),
            &uid,
        )
        .map_err(|_| fail("self-signature failed"))?;
    secret.details.users = vec![SignedUser::new(uid, vec![signature])];
    let armored_secret = secret
        .to_armored_string(ArmorOptions::default())
        .map_err(|_| fail("could not armor the secret key"))?;
    let armored_public = secret
        .to_public_key()
        .to_armored_string(ArmorOptions::default())
        .map_err(|_| fail("could not armor the public key"))?;
    let encoded = encode_key(name, &armored_secret);
    let key = ServiceAccountKey::from_armored(name, &armored_secret)?;
    Ok((key, armored_public, encoded))
}

/// Encodes a name and armored secret key as an `OMNI_SERVICE_ACCOUNT_KEY` value.
pub fn encode_key(name: &str, armored_secret_key: &str) -> String {
    let json = serde_json::json!({ "name": name, "pgp_key": armored_secret_key });
    STANDARD.encode(json.to_string())
}

/// Current Unix time in seconds (the signing timestamp).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn contains_environment_block(value: &str) -> bool {
    value.split(['\n', '\r']).any(|line| {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim();
        ENV_ASSIGNMENTS
            .iter()
            .any(|prefix| line.starts_with(prefix))
    })
}

fn describe_base64_error(error: &base64::DecodeError) -> String {
    // Offsets only: the offending byte itself belongs to the secret value.
    match error {
        base64::DecodeError::InvalidByte(offset, _)
        | base64::DecodeError::InvalidLastSymbol { offset, .. } => {
            format!("illegal base64 data at input byte {offset}")
        }
        base64::DecodeError::InvalidLength(len) => format!("invalid input length {len}"),
        base64::DecodeError::InvalidPadding => "invalid padding".to_owned(),
    }
}

fn string_field<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    field: &'static str,
) -> Result<&'a str, KeyError> {
    object
        .get(field)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or(KeyError::MissingField(field))
}

fn bad_key(reason: &str) -> KeyError {
    KeyError::BadPgpKey(reason.to_owned())
}

/// The self-signature that governs the key: the newest primary-user-ID certification, or the
/// newest one of the first user ID.
fn primary_self_signature(users: &[SignedUser]) -> Option<&Signature> {
    let newest = |sigs: &'_ [Signature]| -> Option<usize> {
        sigs.iter()
            .enumerate()
            .max_by_key(|(_, s)| s.created().map(Timestamp::as_secs).unwrap_or(0))
            .map(|(i, _)| i)
    };
    users
        .iter()
        .filter_map(|u| newest(&u.signatures).map(|i| &u.signatures[i]))
        .find(|s| s.is_primary())
        .or_else(|| {
            users
                .first()
                .and_then(|u| newest(&u.signatures).map(|i| &u.signatures[i]))
        })
}

fn subkey_expired(
    binding: &Signature,
    sub: &pgp::composed::SignedSecretSubKey,
    now: jiff::Timestamp,
) -> bool {
    match binding.key_expiration_time() {
        Some(lifetime) if lifetime.as_secs() > 0 => {
            let end = i64::from(sub.key.created_at().as_secs()) + i64::from(lifetime.as_secs());
            end <= now.as_second()
        }
        _ => false,
    }
}

/// Appends `s` as a JSON string literal with Go's `encoding/json` escaping.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "1767225600";

    fn headers_with(context: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(TIMESTAMP_HEADER, http::HeaderValue::from_static(T0));
        if let Some(c) = context {
            headers.insert("context", http::HeaderValue::from_str(c).unwrap());
        }
        headers
    }

    #[test]
    fn payload_matches_the_documented_kubeconfig_vector() {
        let payload = signed_payload(
            "/management.ManagementService/Kubeconfig",
            &headers_with(Some("prod")),
        );
        assert_eq!(
            payload,
            r#"{"headers":{"authorization":null,"cluster":null,"context":["prod"],"fieldSelectors":null,"namespace":null,"nodes":null,"runtime":null,"selectors":null,"uid":null,"x-sidero-timestamp":["1767225600"]},"method":"/management.ManagementService/Kubeconfig"}"#
        );
    }

    #[test]
    fn payload_for_cosi_calls_has_null_context_and_ignores_unsigned_headers() {
        let mut headers = headers_with(None);
        headers.insert("fieldselectors", http::HeaderValue::from_static("x"));
        headers.insert("user-agent", http::HeaderValue::from_static("t"));
        let payload = signed_payload("/cosi.resource.State/Create", &headers);
        assert!(payload.contains(r#""context":null"#), "{payload}");
        assert!(payload.contains(r#""fieldSelectors":null"#), "{payload}");
        assert!(!payload.contains("user-agent"), "{payload}");
        assert!(payload.ends_with(r#""method":"/cosi.resource.State/Create"}"#));
    }

    #[test]
    fn payload_escapes_like_go() {
        let payload = signed_payload("/a<b>&\"c", &headers_with(None));
        assert!(
            payload.ends_with(r#""method":"/a\u003cb\u003e\u0026\"c"}"#),
            "{payload}"
        );
    }

    #[test]
    fn identity_follows_omni_naming() {
        assert_eq!(
            identity_for("ci-bot"),
            "ci-bot@serviceaccount.omni.sidero.dev"
        );
        assert_eq!(
            identity_for("infra-provider:aws-1"),
            "aws-1@infra-provider.serviceaccount.omni.sidero.dev"
        );
    }

    #[test]
    fn generated_key_round_trips_through_its_encoding() {
        let (key, public, encoded) = generate_key("ci-bot", Duration::from_secs(3600)).unwrap();
        assert_eq!(key.name(), "ci-bot");
        assert_eq!(key.identity(), "ci-bot@serviceaccount.omni.sidero.dev");
        assert_eq!(key.fingerprint().len(), 40);
        assert!(
            key.fingerprint()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        let expiry = key.expiration().unwrap();
        let remaining = expiry.as_second() - jiff::Timestamp::now().as_second();
        assert!((3000..=3700).contains(&remaining), "remaining {remaining}");
        let reloaded = ServiceAccountKey::parse(&format!("\n  {encoded}\n")).unwrap();
        assert_eq!(reloaded.fingerprint(), key.fingerprint());
        assert!(public.contains("BEGIN PGP PUBLIC KEY BLOCK"));
        assert!(!public.contains("PRIVATE"));
    }

    #[test]
    fn our_signature_verifies_and_tampering_is_detected() {
        let (key, public, _) = generate_key("t", Duration::from_secs(3600)).unwrap();
        let payload = signed_payload("/cosi.resource.State/List", &headers_with(None));
        let sig = key.sign_payload(payload.as_bytes()).unwrap();
        verify_signature(&public, payload.as_bytes(), &sig).unwrap();
        let mut tampered = payload.clone().into_bytes();
        tampered[10] ^= 1;
        assert_eq!(
            verify_signature(&public, &tampered, &sig),
            Err(SignatureError::Mismatch)
        );
        let (_, other_public, _) = generate_key("u", Duration::from_secs(3600)).unwrap();
        assert_eq!(
            verify_signature(&other_public, payload.as_bytes(), &sig),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn signature_header_has_exactly_four_fields() {
        let (key, _, _) = generate_key("t", Duration::from_secs(3600)).unwrap();
        let header = key.signature_header(b"payload").unwrap();
        let fields: Vec<&str> = header.split(' ').collect();
        assert_eq!(fields.len(), 4);
        assert_eq!(fields[0], "siderov1");
        assert_eq!(fields[1], "t");
        assert_eq!(fields[2], key.fingerprint());
        assert!(STANDARD.decode(fields[3]).is_ok());
    }

    #[test]
    fn sign_headers_sets_all_three_headers_and_replaces_stale_ones() {
        let (key, public, _) = generate_key("t", Duration::from_secs(3600)).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("context", http::HeaderValue::from_static("prod"));
        headers.insert(PAYLOAD_HEADER, http::HeaderValue::from_static("stale"));
        key.sign_headers(
            "/management.ManagementService/Kubeconfig",
            &mut headers,
            1767225600,
        )
        .unwrap();
        assert_eq!(headers[TIMESTAMP_HEADER], "1767225600");
        let payload = headers[PAYLOAD_HEADER].to_str().unwrap();
        assert!(payload.contains(r#""context":["prod"]"#));
        assert!(payload.contains(r#""x-sidero-timestamp":["1767225600"]"#));
        let sig_b64 = headers[SIGNATURE_HEADER]
            .to_str()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap();
        let sig = STANDARD.decode(sig_b64).unwrap();
        verify_signature(&public, payload.as_bytes(), &sig).unwrap();
    }

    #[test]
    fn key_errors_are_precise() {
        assert_eq!(ServiceAccountKey::parse("  \n"), Err(KeyError::Empty));
        assert_eq!(
            ServiceAccountKey::parse(
                "OMNI_ENDPOINT=https://x\nexport OMNI_SERVICE_ACCOUNT_KEY=abc"
            ),
            Err(KeyError::EnvironmentBlock)
        );
        assert_eq!(
            ServiceAccountKey::parse("  export SIDERO_SERVICE_ACCOUNT_KEY=abc"),
            Err(KeyError::EnvironmentBlock)
        );
        assert!(matches!(
            ServiceAccountKey::parse("not*base64"),
            Err(KeyError::NotBase64(_))
        ));
        // Unpadded base64 is rejected: Go's StdEncoding requires padding.
        assert!(matches!(
            ServiceAccountKey::parse("YWJjZA"),
            Err(KeyError::NotBase64(_))
        ));
        let enc = |s: &str| STANDARD.encode(s);
        assert!(matches!(
            ServiceAccountKey::parse(&enc("{nope")),
            Err(KeyError::NotJson(_))
        ));
        assert!(matches!(
            ServiceAccountKey::parse(&enc("[1]")),
            Err(KeyError::NotJson(_))
        ));
        assert_eq!(
            ServiceAccountKey::parse(&enc(r#"{"pgp_key":"x"}"#)),
            Err(KeyError::MissingField("name"))
        );
        assert_eq!(
            ServiceAccountKey::parse(&enc(r#"{"name":"a"}"#)),
            Err(KeyError::MissingField("pgp_key"))
        );
        assert!(matches!(
            ServiceAccountKey::parse(&enc(r#"{"name":"a","pgp_key":"garbage"}"#)),
            Err(KeyError::BadPgpKey(_))
        ));
    }

    #[test]
    fn expired_keys_are_rejected_with_their_expiry() {
        let (key, _, encoded) = generate_key("t", Duration::from_secs(60)).unwrap();
        let expiry = key.expiration().unwrap();
        let later = expiry
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap();
        assert_eq!(
            ServiceAccountKey::parse_at(&encoded, later),
            Err(KeyError::Expired { at: expiry })
        );
    }

    #[test]
    fn public_key_is_not_accepted_as_a_secret_key() {
        let (_, public, _) = generate_key("t", Duration::from_secs(60)).unwrap();
        assert!(matches!(
            ServiceAccountKey::parse(&encode_key("t", &public)),
            Err(KeyError::BadPgpKey(_))
        ));
    }

    #[test]
    fn debug_and_errors_never_show_key_material() {
        let (key, _, encoded) = generate_key("t", Duration::from_secs(60)).unwrap();
        let debug = format!("{key:?}");
        assert!(debug.contains(key.fingerprint()));
        assert!(!debug.contains("BEGIN PGP"), "{debug}");
        // Corrupt the JSON after the key so a parse error happens deep inside the key text.
        let json = String::from_utf8(STANDARD.decode(&encoded).unwrap()).unwrap();
        let broken = STANDARD.encode(format!("{}x", json));
        let err = ServiceAccountKey::parse(&broken).unwrap_err().to_string();
        assert!(
            !err.contains("BEGIN") && !err.contains(&json[20..40]),
            "{err}"
        );
    }
}
