//! Writing kubeconfig files that point real clients (kubectl, helm, kube-rs, the operator) at a
//! running kube-sim.
//!
//! One file holds one cluster, one user and one context, which is what tests, the binary and
//! the sandbox hand out. Credentials are either a bearer token or an inline client certificate.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

/// Errors from rendering or writing a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// YAML serialisation failed.
    #[error("rendering kubeconfig YAML: {0}")]
    Render(String),
    /// The file could not be written (the path is named, the contents never are).
    #[error("writing kubeconfig {path}: {source}")]
    Write {
        /// Target path.
        path: String,
        /// Underlying IO error.
        #[source]
        source: std::io::Error,
    },
}

/// How the kubeconfig's user authenticates.
#[derive(Clone, Default)]
pub enum Credential {
    /// `token:` (bearer token).
    Token(String),
    /// `client-certificate-data` / `client-key-data` (PEM, base64-encoded into the file).
    ClientCertificate {
        /// Certificate PEM.
        cert_pem: String,
        /// Private key PEM.
        key_pem: String,
    },
    /// No credentials: anonymous requests.
    #[default]
    None,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret material itself.
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::ClientCertificate { .. } => f.write_str("ClientCertificate(<redacted>)"),
            Self::None => f.write_str("None"),
        }
    }
}

/// Everything one single-context kubeconfig file holds.
#[derive(Debug, Clone)]
pub struct Kubeconfig {
    /// API server URL, such as `https://127.0.0.1:6443`.
    pub server: String,
    /// CA certificate PEM trusted for the server; `None` for plain HTTP.
    pub ca_pem: Option<String>,
    /// Cluster entry name (also used for the context name).
    pub cluster_name: String,
    /// User entry name.
    pub user_name: String,
    /// The user's credential.
    pub credential: Credential,
    /// Default namespace of the context, if any.
    pub namespace: Option<String>,
}

impl Kubeconfig {
    /// A kubeconfig for `server` with cluster `kube-sim` and user `user_name` using `credential`.
    pub fn new(
        server: impl Into<String>,
        user_name: impl Into<String>,
        credential: Credential,
    ) -> Self {
        Self {
            server: server.into(),
            ca_pem: None,
            cluster_name: "kube-sim".to_owned(),
            user_name: user_name.into(),
            credential,
            namespace: None,
        }
    }

    /// Trusts this CA (PEM) for the server certificate.
    pub fn with_ca_pem(mut self, ca_pem: impl Into<String>) -> Self {
        self.ca_pem = Some(ca_pem.into());
        self
    }

    /// Sets the context's default namespace.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Renames the cluster (and context) entry.
    pub fn with_cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = name.into();
        self
    }

    /// The context name: `<user>@<cluster>`, as kubeadm-style configs name it.
    pub fn context_name(&self) -> String {
        format!("{}@{}", self.user_name, self.cluster_name)
    }

    /// Renders the kubeconfig as YAML.
    pub fn to_yaml(&self) -> Result<String, KubeconfigError> {
        let context = self.context_name();
        let (token, cert, key) = match &self.credential {
            Credential::Token(t) => (Some(t.clone()), None, None),
            Credential::ClientCertificate { cert_pem, key_pem } => (
                None,
                Some(STANDARD.encode(cert_pem)),
                Some(STANDARD.encode(key_pem)),
            ),
            Credential::None => (None, None, None),
        };
        let file = File {
            api_version: "v1",
            kind: "Config",
            clusters: vec![Named {
                name: self.cluster_name.clone(),
                cluster: Some(ClusterEntry {
                    server: self.server.clone(),
                    certificate_authority_data: self.ca_pem.as_ref().map(|p| STANDARD.encode(p)),
                }),
                user: None,
                context: None,
            }],
            users: vec![Named {
                name: self.user_name.clone(),
                cluster: None,
                user: Some(UserEntry {
                    token,
                    client_certificate_data: cert,
                    client_key_data: key,
                }),
                context: None,
            }],
            contexts: vec![Named {
                name: context.clone(),
                cluster: None,
                user: None,
                context: Some(ContextEntry {
                    cluster: self.cluster_name.clone(),
                    user: self.user_name.clone(),
                    namespace: self.namespace.clone(),
                }),
            }],
            current_context: context,
        };
        serde_saphyr::to_string(&file).map_err(|e| KubeconfigError::Render(e.to_string()))
    }

    /// Writes the kubeconfig to `path` with owner-only permissions (it holds credentials).
    pub fn write(&self, path: &Path) -> Result<(), KubeconfigError> {
        let yaml = self.to_yaml()?;
        let err = |source| KubeconfigError::Write {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        write_private(path, yaml.as_bytes()).map_err(err)
    }
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An existing file keeps its old mode on open; tighten it explicitly.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(contents)
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, contents)
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    clusters: Vec<Named>,
    users: Vec<Named>,
    contexts: Vec<Named>,
    current_context: String,
}

#[derive(Serialize)]
struct Named {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<UserEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<ContextEntry>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    server: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate_authority_data: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_certificate_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_key_data: Option<String>,
}

#[derive(Serialize)]
struct ContextEntry {
    cluster: String,
    user: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(k: &Kubeconfig) -> serde_json::Value {
        let yaml = k.to_yaml().unwrap();
        serde_saphyr::from_str(&yaml).unwrap()
    }

    #[test]
    fn token_kubeconfig_has_the_fields_clients_read() {
        let k = Kubeconfig::new(
            "https://127.0.0.1:6443",
            "alice",
            Credential::Token("t0k".into()),
        )
        .with_ca_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
        .with_namespace("team-a");
        let v = parsed(&k);
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Config");
        assert_eq!(v["current-context"], "alice@kube-sim");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        let ca = v["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap();
        assert!(
            String::from_utf8(STANDARD.decode(ca).unwrap())
                .unwrap()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert_eq!(v["users"][0]["name"], "alice");
        assert_eq!(v["users"][0]["user"]["token"], "t0k");
        assert_eq!(v["contexts"][0]["context"]["cluster"], "kube-sim");
        assert_eq!(v["contexts"][0]["context"]["user"], "alice");
        assert_eq!(v["contexts"][0]["context"]["namespace"], "team-a");
    }

    #[test]
    fn certificate_kubeconfig_inlines_base64_pem_and_no_token() {
        let k = Kubeconfig::new(
            "https://localhost:1",
            "admin",
            Credential::ClientCertificate {
                cert_pem: "CERT".into(),
                key_pem: "KEY".into(),
            },
        );
        let v = parsed(&k);
        let user = &v["users"][0]["user"];
        assert_eq!(user["client-certificate-data"], STANDARD.encode("CERT"));
        assert_eq!(user["client-key-data"], STANDARD.encode("KEY"));
        assert!(user.get("token").is_none());
        assert!(
            v["clusters"][0]["cluster"]
                .get("certificate-authority-data")
                .is_none()
        );
    }

    #[test]
    fn debug_redacts_credentials() {
        let k = Kubeconfig::new("http://x", "u", Credential::Token("super-secret".into()));
        assert!(!format!("{k:?}").contains("super-secret"));
    }

    #[cfg(unix)]
    #[test]
    fn written_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/kubeconfig");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Kubeconfig::new("http://x", "u", Credential::None)
            .write(&path)
            .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("server: http://x")
        );
    }
}
