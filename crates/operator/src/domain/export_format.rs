//! The shapes an OmniKubeconfigExport writes its credential in (`spec.format`), as pure
//! functions from the minted kubeconfig to Secret data and back.
//!
//! - `Kubeconfig`: the kubeconfig under `targetSecretRef.key`.
//! - `FluxValue`: the kubeconfig under `value`, the key Flux's `spec.kubeConfig.secretRef`
//!   reads when it names no key.
//! - `ArgoCDCluster`: an Argo CD declarative cluster Secret: `name` (the display name), `server`
//!   (the API server URL, Argo CD's identity of a cluster) and `config`, the JSON of Argo CD's
//!   `ClusterConfig` filled from the kubeconfig's inline credentials, and the label
//!   `argocd.argoproj.io/secret-type: cluster` (set by the controller).
//!
//! The Argo CD shape is built from [`crate::domain::kubeconfig::parse`], so a kubeconfig that asks for
//! a command or a file can never be turned into one; reading it back for the usability probe is
//! as strict (unknown `config` fields, `execProviderConfig` among them, make it unusable).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::kubeconfig_export::ExportFormat;
use crate::domain::kubeconfig::{KubeconfigError, WorkloadKubeconfig};

/// The key Flux reads a kubeconfig from by default.
pub(crate) const FLUX_KEY: &str = "value";
/// The keys of an Argo CD cluster Secret the export writes, in hash order.
pub(crate) const ARGOCD_KEYS: [&str; 3] = ["name", "server", "config"];

/// Why a minted kubeconfig cannot be written in the requested shape. Messages name fields,
/// never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ShapeError {
    /// The kubeconfig is not one of inline credentials.
    #[error("generated kubeconfig cannot be written as an Argo CD cluster Secret: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    /// The current context has neither a token, a client certificate nor a password.
    #[error(
        "generated kubeconfig cannot be written as an Argo CD cluster Secret: its user has no inline credentials"
    )]
    NoCredentials,
}

/// Argo CD's `ClusterConfig`, the fields a kubeconfig with inline credentials fills (Argo CD's
/// JSON names; `[]byte` fields are base64 of the PEM, as Go encodes them).
#[derive(Serialize, Deserialize, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClusterConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bearer_token: Option<String>,
    #[serde(default)]
    tls_client_config: TlsClientConfig,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    disable_compression: bool,
}

/// Argo CD's `TLSClientConfig`.
#[derive(Serialize, Deserialize, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TlsClientConfig {
    #[serde(default)]
    insecure: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cert_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_data: Option<String>,
}

/// The data keys `format` writes (`key` is `targetSecretRef.key`).
pub(crate) fn shape_keys(format: ExportFormat, key: &str) -> Vec<String> {
    match format {
        ExportFormat::Kubeconfig => vec![key.to_string()],
        ExportFormat::FluxValue => vec![FLUX_KEY.to_string()],
        ExportFormat::ArgoCdCluster => ARGOCD_KEYS.iter().map(|k| k.to_string()).collect(),
    }
}

/// The Secret data for `kubeconfig` (as minted, context namespace applied) in `format`.
/// `cluster_name` is the Argo CD cluster's `name`.
pub(crate) fn secret_data(
    format: ExportFormat,
    key: &str,
    cluster_name: &str,
    kubeconfig: &[u8],
) -> Result<BTreeMap<String, Vec<u8>>, ShapeError> {
    let single = |k: &str| BTreeMap::from([(k.to_string(), kubeconfig.to_vec())]);
    Ok(match format {
        ExportFormat::Kubeconfig => single(key),
        ExportFormat::FluxValue => single(FLUX_KEY),
        ExportFormat::ArgoCdCluster => {
            let kc = crate::domain::kubeconfig::parse(kubeconfig)?;
            if kc.token.is_none() && kc.client_key_data.is_none() && kc.password.is_none() {
                return Err(ShapeError::NoCredentials);
            }
            let config = ClusterConfig {
                username: kc.username,
                password: kc.password,
                bearer_token: kc.token,
                tls_client_config: TlsClientConfig {
                    insecure: kc.insecure_skip_tls_verify,
                    server_name: kc.tls_server_name,
                    ca_data: kc.certificate_authority_data,
                    cert_data: kc.client_certificate_data,
                    key_data: kc.client_key_data,
                },
                disable_compression: kc.disable_compression,
            };
            // Serialising plain strings and booleans cannot fail.
            let json = serde_json::to_vec(&config).unwrap_or_default();
            BTreeMap::from([
                ("name".to_string(), cluster_name.as_bytes().to_vec()),
                ("server".to_string(), kc.server.into_bytes()),
                ("config".to_string(), json),
            ])
        }
    })
}

/// Lowercase hex SHA-256 of the shape's data in `data`: of the kubeconfig itself for the
/// single-key shapes (as before `spec.format` existed), of `name`, `server` and `config`
/// (each length-prefixed, so no two contents collide) for Argo CD. `None` when a key is
/// missing or the kubeconfig is empty.
pub(crate) fn data_hash<V: AsRef<[u8]>>(
    format: ExportFormat,
    key: &str,
    data: &BTreeMap<String, V>,
) -> Option<String> {
    match format {
        ExportFormat::Kubeconfig | ExportFormat::FluxValue => {
            let key = if format == ExportFormat::FluxValue {
                FLUX_KEY
            } else {
                key
            };
            let bytes = data.get(key)?.as_ref();
            (!bytes.is_empty()).then(|| hex::encode(Sha256::digest(bytes)))
        }
        ExportFormat::ArgoCdCluster => {
            let mut hasher = Sha256::new();
            for k in ARGOCD_KEYS {
                let value = data.get(k)?.as_ref();
                hasher.update(k.as_bytes());
                hasher.update((value.len() as u64).to_be_bytes());
                hasher.update(value);
            }
            Some(hex::encode(hasher.finalize()))
        }
    }
}

/// The kubeconfig stored in `data` in `format`, for the usability probe: the stored bytes for
/// the single-key shapes, one rebuilt from `server` and `config` for Argo CD (`None` when they
/// do not read as an Argo CD cluster of inline credentials).
pub(crate) fn stored_kubeconfig<V: AsRef<[u8]>>(
    format: ExportFormat,
    key: &str,
    data: &BTreeMap<String, V>,
) -> Option<Vec<u8>> {
    match format {
        ExportFormat::Kubeconfig => Some(data.get(key)?.as_ref().to_vec()),
        ExportFormat::FluxValue => Some(data.get(FLUX_KEY)?.as_ref().to_vec()),
        ExportFormat::ArgoCdCluster => {
            let server = std::str::from_utf8(data.get("server")?.as_ref()).ok()?;
            let config: ClusterConfig =
                serde_json::from_slice(data.get("config")?.as_ref()).ok()?;
            let tls = config.tls_client_config;
            let kc = WorkloadKubeconfig {
                server: server.to_string(),
                certificate_authority_data: tls.ca_data,
                insecure_skip_tls_verify: tls.insecure,
                tls_server_name: tls.server_name,
                disable_compression: config.disable_compression,
                namespace: None,
                token: config.bearer_token,
                client_certificate_data: tls.cert_data,
                client_key_data: tls.key_data,
                username: config.username,
                password: config.password,
            };
            Some(kc.to_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";

    fn kubeconfig(user: &str) -> Vec<u8> {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: c\n  cluster:\n    server: https://omni.example:8100/\n    certificate-authority-data: {CA}\n    tls-server-name: omni.example\ncontexts:\n- name: w\n  context:\n    cluster: c\n    user: u\n    namespace: apps\nusers:\n- name: u\n  user:\n{user}"
        )
        .into_bytes()
    }

    fn config_json(data: &BTreeMap<String, Vec<u8>>) -> Value {
        serde_json::from_slice(&data["config"]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_single_key_shapes_store_the_kubeconfig_as_minted() {
        let kc = kubeconfig("    token: t0k\n");
        let plain = secret_data(ExportFormat::Kubeconfig, "workload.kubeconfig", "edge", &kc);
        assert_eq!(
            plain,
            Ok(BTreeMap::from([("workload.kubeconfig".into(), kc.clone())]))
        );
        let flux = secret_data(ExportFormat::FluxValue, "kubeconfig", "edge", &kc);
        assert_eq!(flux, Ok(BTreeMap::from([("value".into(), kc.clone())])));
        // The hash of a single-key shape is the kubeconfig's own, as it always was.
        let want = hex::encode(Sha256::digest(&kc));
        assert_eq!(
            data_hash(
                ExportFormat::FluxValue,
                "kubeconfig",
                &flux.unwrap_or_default()
            ),
            Some(want)
        );
    }

    #[test]
    fn a_token_kubeconfig_becomes_an_argocd_cluster_with_a_bearer_token() {
        let kc = kubeconfig("    token: t0k\n");
        let data = secret_data(ExportFormat::ArgoCdCluster, "kubeconfig", "edge", &kc)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            data.keys().map(String::as_str).collect::<Vec<_>>(),
            ["config", "name", "server"]
        );
        assert_eq!(data["name"], b"edge");
        assert_eq!(data["server"], b"https://omni.example:8100/");
        assert_eq!(
            config_json(&data),
            json!({
                "bearerToken": "t0k",
                "tlsClientConfig": {"insecure": false, "serverName": "omni.example", "caData": CA},
            })
        );
    }

    #[test]
    fn a_client_certificate_kubeconfig_becomes_tls_client_config() {
        let kc = kubeconfig("    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n");
        let data = secret_data(ExportFormat::ArgoCdCluster, "kubeconfig", "edge", &kc)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config_json(&data)["tlsClientConfig"],
            json!({"insecure": false, "serverName": "omni.example", "caData": CA,
                   "certData": "Y2VydA==", "keyData": "a2V5"})
        );
        assert!(config_json(&data).get("bearerToken").is_none());
    }

    #[test]
    fn code_files_and_missing_credentials_are_refused_naming_the_field() {
        let exec = kubeconfig("    exec:\n      command: /bin/sh\n");
        assert_eq!(
            secret_data(ExportFormat::ArgoCdCluster, "kubeconfig", "edge", &exec)
                .map_err(|e| e.to_string().contains("users[0].user.exec is not allowed")),
            Err(true)
        );
        let nothing = kubeconfig("    username: admin\n");
        assert_eq!(
            secret_data(ExportFormat::ArgoCdCluster, "kubeconfig", "edge", &nothing),
            Err(ShapeError::NoCredentials)
        );
    }

    #[test]
    fn an_argocd_cluster_reads_back_as_the_same_credentials() {
        let kc = kubeconfig("    token: t0k\n");
        let data = secret_data(ExportFormat::ArgoCdCluster, "kubeconfig", "edge", &kc)
            .unwrap_or_else(|e| panic!("{e}"));
        let back = stored_kubeconfig(ExportFormat::ArgoCdCluster, "kubeconfig", &data)
            .unwrap_or_else(|| panic!("not readable"));
        let parsed = crate::domain::kubeconfig::parse(&back).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.server(), "https://omni.example:8100/");
        assert_eq!(parsed.token.as_deref(), Some("t0k"));
        assert_eq!(parsed.certificate_authority_data.as_deref(), Some(CA));
        // A planted exec provider makes the stored cluster unusable rather than obeyed.
        let mut planted = data.clone();
        planted.insert(
            "config".into(),
            br#"{"execProviderConfig":{"command":"/bin/sh"},"tlsClientConfig":{"insecure":false}}"#
                .to_vec(),
        );
        assert_eq!(
            stored_kubeconfig(ExportFormat::ArgoCdCluster, "kubeconfig", &planted),
            None
        );
    }

    #[test]
    fn the_argocd_hash_covers_every_key() {
        let kc = kubeconfig("    token: t0k\n");
        let data = secret_data(ExportFormat::ArgoCdCluster, "kubeconfig", "edge", &kc)
            .unwrap_or_else(|e| panic!("{e}"));
        let hash = data_hash(ExportFormat::ArgoCdCluster, "kubeconfig", &data);
        assert_eq!(hash.as_ref().map(String::len), Some(64));
        for key in ARGOCD_KEYS {
            let mut edited = data.clone();
            edited.insert(key.into(), b"other".to_vec());
            assert_ne!(
                data_hash(ExportFormat::ArgoCdCluster, "kubeconfig", &edited),
                hash,
                "{key}"
            );
            edited.remove(key);
            assert_eq!(
                data_hash(ExportFormat::ArgoCdCluster, "kubeconfig", &edited),
                None
            );
        }
    }
}
