//! The rules of an OmniConnection's service-account key Secret, and why no Omni client could be
//! built. The key itself is never logged or put in a message.

use crate::api::Reason;
use crate::controllers::shared::error::Disposition;
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;

/// Why no Omni client could be built for a connection. Messages are the user-facing texts of
/// the original operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConnectionError {
    /// The Secret does not exist.
    #[error("MissingSecret {name:?}: secrets {name:?} not found")]
    MissingSecret {
        /// Secret name.
        name: String,
    },
    /// The Secret lacks the key.
    #[error("secret {namespace}/{name} missing key {key:?}")]
    MissingKey {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Key.
        key: String,
    },
    /// The value is blank.
    #[error("secret {namespace}/{name} key {key:?} is empty")]
    EmptyKey {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Key.
        key: String,
    },
    /// The value is an env file rather than the bare key.
    #[error(
        "secret {namespace}/{name} key {key:?} contains Omni environment assignments; store only the OMNI_SERVICE_ACCOUNT_KEY value"
    )]
    EnvAssignments {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Key.
        key: String,
    },
    /// The value is not standard base64.
    #[error(
        "secret {namespace}/{name} key {key:?} must contain the base64-encoded Omni service account key: {detail}"
    )]
    NotBase64 {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Key.
        key: String,
        /// Decoder error (positions only, never content).
        detail: String,
    },
    /// The Secret could not be read.
    #[error("read secret {namespace}/{name}: {detail}")]
    Read {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// API error.
        detail: String,
    },
    /// The connection's ServiceAccount may not read the Secret (the read is never retried
    /// with the operator's identity).
    #[error(
        "{reader} may not read Secret \"{namespace}/{name}\" (spec.auth.serviceAccountSecretRef)"
    )]
    AccessDenied {
        /// Who read.
        reader: String,
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
    },
    /// The client could not be built from the key and endpoint.
    #[error("create Omni client: {0}")]
    Client(String),
}

impl ConnectionError {
    /// Condition reason: `MissingSecret` for Secret problems, else `ConnectionFailed`.
    pub(crate) fn reason(&self) -> Reason {
        match self {
            ConnectionError::MissingSecret { .. }
            | ConnectionError::MissingKey { .. }
            | ConnectionError::EmptyKey { .. }
            | ConnectionError::EnvAssignments { .. }
            | ConnectionError::NotBase64 { .. }
            | ConnectionError::Read { .. } => Reason::MissingSecret,
            ConnectionError::AccessDenied { .. } => Reason::AccessDenied,
            ConnectionError::Client(_) => Reason::ConnectionFailed,
        }
    }

    /// What it means in kstatus terms: a Secret or key not there yet is waited for, one whose
    /// content is wrong, or which the connection's ServiceAccount may not read, needs it (or
    /// RBAC, or the spec) changed; the rest is retried.
    pub(crate) fn disposition(&self) -> Disposition {
        match self {
            ConnectionError::MissingSecret { .. }
            | ConnectionError::MissingKey { .. }
            | ConnectionError::EmptyKey { .. } => Disposition::Waiting,
            ConnectionError::EnvAssignments { .. }
            | ConnectionError::NotBase64 { .. }
            | ConnectionError::AccessDenied { .. } => Disposition::Stalled,
            ConnectionError::Read { .. } | ConnectionError::Client(_) => Disposition::Retrying,
        }
    }
}

const ENV_PREFIXES: [&str; 3] = [
    "OMNI_ENDPOINT=",
    "OMNI_SERVICE_ACCOUNT_KEY=",
    "SIDERO_SERVICE_ACCOUNT_KEY=",
];

/// Applies the key checks (docs/parity.md#the-omni-key-secret, steps 2–6) to the Secret's data
/// and returns the trimmed key.
pub(crate) fn key_from_secret(
    namespace: &str,
    name: &str,
    key: &str,
    secret: &Secret,
) -> Result<String, ConnectionError> {
    let ids = || (namespace.to_string(), name.to_string(), key.to_string());
    let Some(raw) = secret.data.as_ref().and_then(|d| d.get(key)) else {
        let (namespace, name, key) = ids();
        return Err(ConnectionError::MissingKey {
            namespace,
            name,
            key,
        });
    };
    let text = String::from_utf8_lossy(&raw.0);
    let value = text.trim();
    if value.is_empty() {
        let (namespace, name, key) = ids();
        return Err(ConnectionError::EmptyKey {
            namespace,
            name,
            key,
        });
    }
    let has_env = value.split(['\n', '\r']).any(|line| {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim();
        ENV_PREFIXES.iter().any(|p| line.starts_with(p))
    });
    if has_env {
        let (namespace, name, key) = ids();
        return Err(ConnectionError::EnvAssignments {
            namespace,
            name,
            key,
        });
    }
    if let Err(e) = base64::engine::general_purpose::STANDARD.decode(value) {
        let (namespace, name, key) = ids();
        return Err(ConnectionError::NotBase64 {
            namespace,
            name,
            key,
            detail: base64_detail(&e),
        });
    }
    Ok(value.to_string())
}

/// The decoder's complaint without the offending byte, which is part of the secret.
fn base64_detail(e: &base64::DecodeError) -> String {
    match e {
        base64::DecodeError::InvalidByte(offset, _) => format!("invalid symbol at offset {offset}"),
        base64::DecodeError::InvalidLastSymbol { offset, .. } => {
            format!("invalid last symbol at offset {offset}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(value: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(
                "serviceAccountKey".to_string(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    fn check(value: &str) -> Result<String, String> {
        key_from_secret("ns", "omni", "serviceAccountKey", &secret(value))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn key_rules_in_order_with_exact_messages() {
        assert_eq!(
            key_from_secret("ns", "omni", "other", &secret("abcd")).map_err(|e| e.to_string()),
            Err(r#"secret ns/omni missing key "other""#.to_string())
        );
        assert_eq!(
            check("  \n"),
            Err(r#"secret ns/omni key "serviceAccountKey" is empty"#.into())
        );
        assert_eq!(
            check("export OMNI_ENDPOINT=https://x\nOMNI_SERVICE_ACCOUNT_KEY=abcd"),
            Err(r#"secret ns/omni key "serviceAccountKey" contains Omni environment assignments; store only the OMNI_SERVICE_ACCOUNT_KEY value"#.into())
        );
        let not_b64 = check("abc").unwrap_err();
        assert!(
            not_b64.starts_with(r#"secret ns/omni key "serviceAccountKey" must contain the base64-encoded Omni service account key: "#),
            "{not_b64}"
        );
        assert_eq!(check(" YWJjZA== \n"), Ok("YWJjZA==".into()));
    }

    #[test]
    fn missing_secret_message_starts_with_reason() {
        let e = ConnectionError::MissingSecret {
            name: "omni".into(),
        };
        assert_eq!(
            e.to_string(),
            r#"MissingSecret "omni": secrets "omni" not found"#
        );
        assert_eq!(e.reason().as_str(), "MissingSecret");
    }

    #[test]
    fn secret_value_never_appears_in_errors() {
        let e = check("c2VjcmV0 c2VjcmV0").unwrap_err();
        assert!(!e.contains("c2VjcmV0"), "{e}");
    }
}
