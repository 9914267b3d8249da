//! Kubeconfigs read from Secrets are data, never code.
//!
//! Whoever may create a Secret and point an OmniSecretSync or OmniHelmRelease at it is not
//! trusted with the operator's powers. A kubeconfig may therefore name a server and carry
//! inline credentials, nothing else: `exec` and `auth-provider` would run commands in the
//! operator's pod, and `tokenFile`, `client-certificate`, `client-key` and
//! `certificate-authority` would read the pod's files (its service-account token, for one)
//! and send them to a server of the author's choosing.
//!
//! [`parse`] checks every entry against an allowlist, so a field a future client learns to
//! honour is refused rather than silently obeyed, and returns a [`WorkloadKubeconfig`] holding
//! only the allowed values of the current context. Both consumers use what the operator
//! builds from it, never the user's bytes: kube-rs gets [`WorkloadKubeconfig::client`], helm
//! gets [`WorkloadKubeconfig::to_bytes`].
//!
//! Error messages name fields and YAML positions, never values (see
//! [`omni_client::template::yaml_syntax_error`]).

use base64::Engine;
use serde_json::{Map, Value};

/// Why a kubeconfig is refused. Messages name the field, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// The bytes are not UTF-8.
    #[error("kubeconfig is not UTF-8 text")]
    NotUtf8,
    /// The YAML does not parse; the message carries the position only.
    #[error("{0}")]
    Syntax(String),
    /// A field that would run code or read a file, or one outside the allowlist.
    #[error("{field} is not allowed: {why}")]
    Forbidden {
        /// Path of the field, e.g. `users[0].user.exec`.
        field: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// A field has the wrong type or an unusable value.
    #[error("{field} {problem}")]
    Invalid {
        /// Path of the field.
        field: String,
        /// What is wrong with it (never the value).
        problem: &'static str,
    },
    /// A required field is missing.
    #[error("{0} is required")]
    Missing(String),
    /// `current-context` (or the context's cluster or user) names no entry.
    #[error("{field} names {name:?}, which is not in {list}")]
    Dangling {
        /// The referring field.
        field: String,
        /// The name it refers to (entry names are identifiers, not credentials).
        name: String,
        /// The list searched.
        list: &'static str,
    },
}

/// Why an entry is refused, for fields a client would honour.
fn forbidden_reason(key: &str) -> Option<&'static str> {
    Some(match key {
        "exec" => {
            "it runs a command in the operator's pod; put a token or client certificate inline"
        }
        "auth-provider" => {
            "authentication plugins run code in the operator's pod; put a token inline"
        }
        "tokenFile" => "it reads a file of the operator's pod; put the token inline (token)",
        "client-certificate" => {
            "it reads a file of the operator's pod; use client-certificate-data"
        }
        "client-key" => "it reads a file of the operator's pod; use client-key-data",
        "certificate-authority" => {
            "it reads a file of the operator's pod; use certificate-authority-data"
        }
        "proxy-url" => {
            "the operator reaches workload clusters directly or through its own HTTPS_PROXY"
        }
        "as" | "as-uid" | "as-groups" | "as-user-extra" => "impersonation is not supported",
        _ => return None,
    })
}

/// A kubeconfig reduced to the current context's server and inline credentials.
#[derive(Clone, PartialEq, Eq, Default)]
// The fields are crate-visible for the export's other Secret shapes (`crate::domain::export_format`);
// base64 fields hold the compact base64 text, checked to decode.
pub struct WorkloadKubeconfig {
    pub(crate) server: String,
    pub(crate) certificate_authority_data: Option<String>,
    pub(crate) insecure_skip_tls_verify: bool,
    pub(crate) tls_server_name: Option<String>,
    pub(crate) disable_compression: bool,
    pub(crate) namespace: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) client_certificate_data: Option<String>,
    pub(crate) client_key_data: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl std::fmt::Debug for WorkloadKubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadKubeconfig")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl WorkloadKubeconfig {
    /// The API server URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The credential values, so they can be scrubbed from helm's error output.
    pub fn secrets(&self) -> Vec<String> {
        [&self.token, &self.password, &self.client_key_data]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect()
    }

    /// The kubeconfig the operator hands to helm: one cluster, one user, one context, built
    /// from the validated fields. It is JSON, which every YAML reader accepts.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut cluster = Map::new();
        cluster.insert("server".into(), self.server.clone().into());
        let put = |map: &mut Map<String, Value>, key: &str, value: &Option<String>| {
            if let Some(v) = value {
                map.insert(key.into(), v.clone().into());
            }
        };
        put(
            &mut cluster,
            "certificate-authority-data",
            &self.certificate_authority_data,
        );
        put(&mut cluster, "tls-server-name", &self.tls_server_name);
        if self.insecure_skip_tls_verify {
            cluster.insert("insecure-skip-tls-verify".into(), true.into());
        }
        if self.disable_compression {
            cluster.insert("disable-compression".into(), true.into());
        }
        let mut user = Map::new();
        put(&mut user, "token", &self.token);
        put(
            &mut user,
            "client-certificate-data",
            &self.client_certificate_data,
        );
        put(&mut user, "client-key-data", &self.client_key_data);
        put(&mut user, "username", &self.username);
        put(&mut user, "password", &self.password);
        let mut context = Map::new();
        context.insert("cluster".into(), "workload".into());
        context.insert("user".into(), "workload".into());
        put(&mut context, "namespace", &self.namespace);
        let doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "workload",
            "clusters": [{"name": "workload", "cluster": cluster}],
            "users": [{"name": "workload", "user": user}],
            "contexts": [{"name": "workload", "context": context}],
        });
        doc.to_string().into_bytes()
    }

    /// A client of the workload cluster, built from [`WorkloadKubeconfig::to_bytes`], whose
    /// requests are bounded by `limits`: connecting (TCP and TLS), each wait for the server,
    /// and each whole request. A server that accepts and never answers holds a caller no longer.
    pub async fn client(
        &self,
        limits: crate::domain::helm::source::Limits,
    ) -> Result<kube::Client, String> {
        let text = String::from_utf8(self.to_bytes()).map_err(|e| e.to_string())?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
            .map_err(|_| "the operator could not read back its own kubeconfig".to_string())?;
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        config.connect_timeout = Some(limits.connect);
        config.read_timeout = Some(limits.read);
        config.write_timeout = Some(limits.read);
        crate::process::api_client::multiplexed_client(
            config,
            crate::process::api_client::WORKLOAD_MAX_IN_FLIGHT,
            Some(limits.request),
        )
        .map_err(|e| e.to_string())
    }
}

/// Loads a kubeconfig the operator only stores and passes on (the one Omni mints for an export)
/// without the allowlist check. Errors are as careful as [`parse`]'s: `what` and a YAML position,
/// never the text, which holds a credential.
pub fn load_without_checks(text: &str, what: &str) -> Result<kube::config::Kubeconfig, String> {
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| omni_client::template::yaml_syntax_error(what, &e))?;
    kube::config::Kubeconfig::from_yaml(text)
        .map_err(|_| format!("{what} does not have the structure of a kubeconfig"))
}

/// Checks a kubeconfig from a Secret and reduces it to its current context (see the module
/// documentation for what is allowed).
pub fn parse(bytes: &[u8]) -> Result<WorkloadKubeconfig, KubeconfigError> {
    let text = std::str::from_utf8(bytes).map_err(|_| KubeconfigError::NotUtf8)?;
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| {
        KubeconfigError::Syntax(omni_client::template::yaml_syntax_error("kubeconfig", &e))
    })?;
    let top = mapping(&doc, "kubeconfig")?;
    allow_only(
        top,
        "",
        &[
            "apiVersion",
            "kind",
            "clusters",
            "contexts",
            "users",
            "current-context",
            "preferences",
            "extensions",
        ],
    )?;
    let clusters = entries(top, "clusters", "cluster")?;
    let users = entries(top, "users", "user")?;
    let contexts = entries(top, "contexts", "context")?;
    allow_only_checked_fields(&clusters, &users, &contexts)?;
    let current = string(top, "", "current-context")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| KubeconfigError::Missing("current-context".into()))?;
    let ci = find(&contexts, &current).ok_or_else(|| KubeconfigError::Dangling {
        field: "current-context".into(),
        name: current.clone(),
        list: "contexts",
    })?;
    let context = contexts[ci].1;
    let cprefix = format!("contexts[{ci}].context.");
    let cluster_name = string(context, &cprefix, "cluster")?
        .ok_or_else(|| KubeconfigError::Missing(format!("{cprefix}cluster")))?;
    let ki = find(&clusters, &cluster_name).ok_or_else(|| KubeconfigError::Dangling {
        field: format!("{cprefix}cluster"),
        name: cluster_name.clone(),
        list: "clusters",
    })?;
    let mut out = cluster_of(clusters[ki].1, &format!("clusters[{ki}].cluster."))?;
    out.namespace = string(context, &cprefix, "namespace")?.filter(|s| !s.is_empty());
    // A context without a user talks to the server anonymously, as kubectl would.
    if let Some(user_name) = string(context, &cprefix, "user")?.filter(|s| !s.is_empty()) {
        let ui = find(&users, &user_name).ok_or_else(|| KubeconfigError::Dangling {
            field: format!("{cprefix}user"),
            name: user_name.clone(),
            list: "users",
        })?;
        with_user(&mut out, users[ui].1, &format!("users[{ui}].user."))?;
    }
    Ok(out)
}

/// The position of the entry `name` in `list`.
fn find(list: &[Entry<'_>], name: &str) -> Option<usize> {
    list.iter().position(|(n, _)| n == name)
}

/// Every entry is checked, not only the current context's: a kubeconfig that asks for code or
/// files anywhere is refused as a whole, so its author learns it at once.
fn allow_only_checked_fields(
    clusters: &[Entry<'_>],
    users: &[Entry<'_>],
    contexts: &[Entry<'_>],
) -> Result<(), KubeconfigError> {
    for (i, (_, c)) in clusters.iter().enumerate() {
        allow_only(
            c,
            &format!("clusters[{i}].cluster."),
            &[
                "server",
                "certificate-authority-data",
                "insecure-skip-tls-verify",
                "tls-server-name",
                "disable-compression",
                "extensions",
            ],
        )?;
    }
    for (i, (_, u)) in users.iter().enumerate() {
        allow_only(
            u,
            &format!("users[{i}].user."),
            &[
                "token",
                "client-certificate-data",
                "client-key-data",
                "username",
                "password",
                "extensions",
            ],
        )?;
    }
    for (i, (_, c)) in contexts.iter().enumerate() {
        allow_only(
            c,
            &format!("contexts[{i}].context."),
            &["cluster", "user", "namespace", "extensions"],
        )?;
    }
    Ok(())
}

/// The connection fields of the cluster entry `cluster` (at `prefix`), its server checked.
fn cluster_of(
    cluster: &Map<String, Value>,
    prefix: &str,
) -> Result<WorkloadKubeconfig, KubeconfigError> {
    let server = string(cluster, prefix, "server")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| KubeconfigError::Missing(format!("{prefix}server")))?;
    if !(server.starts_with("https://") || server.starts_with("http://"))
        || server.parse::<http::Uri>().is_err()
    {
        return Err(KubeconfigError::Invalid {
            field: format!("{prefix}server"),
            problem: "must be an http:// or https:// URL",
        });
    }
    Ok(WorkloadKubeconfig {
        server,
        certificate_authority_data: base64_field(cluster, prefix, "certificate-authority-data")?,
        insecure_skip_tls_verify: boolean(cluster, prefix, "insecure-skip-tls-verify")?,
        tls_server_name: string(cluster, prefix, "tls-server-name")?,
        disable_compression: boolean(cluster, prefix, "disable-compression")?,
        ..WorkloadKubeconfig::default()
    })
}

/// The credentials of the user entry `user` (at `prefix`) into `out`: a client certificate
/// only with its key.
fn with_user(
    out: &mut WorkloadKubeconfig,
    user: &Map<String, Value>,
    prefix: &str,
) -> Result<(), KubeconfigError> {
    out.token = string(user, prefix, "token")?.filter(|s| !s.is_empty());
    out.client_certificate_data = base64_field(user, prefix, "client-certificate-data")?;
    out.client_key_data = base64_field(user, prefix, "client-key-data")?;
    out.username = string(user, prefix, "username")?;
    out.password = string(user, prefix, "password")?;
    match (&out.client_certificate_data, &out.client_key_data) {
        (Some(_), None) => Err(KubeconfigError::Missing(format!(
            "{prefix}client-key-data (with client-certificate-data)"
        ))),
        (None, Some(_)) => Err(KubeconfigError::Missing(format!(
            "{prefix}client-certificate-data (with client-key-data)"
        ))),
        _ => Ok(()),
    }
}

fn mapping<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, KubeconfigError> {
    v.as_object().ok_or_else(|| KubeconfigError::Invalid {
        field: field.to_string(),
        problem: "must be a mapping",
    })
}

/// Refuses every non-null key of `map` outside `allowed`, naming it as `prefix` + key.
fn allow_only(
    map: &Map<String, Value>,
    prefix: &str,
    allowed: &[&str],
) -> Result<(), KubeconfigError> {
    for (key, value) in map {
        if value.is_null() || allowed.contains(&key.as_str()) {
            continue;
        }
        return Err(KubeconfigError::Forbidden {
            field: format!("{prefix}{key}"),
            why: forbidden_reason(key).unwrap_or(
                "only server, certificate-authority-data, insecure-skip-tls-verify, tls-server-name, disable-compression, token, client-certificate-data, client-key-data, username, password, namespace and extensions are read",
            ),
        });
    }
    Ok(())
}

/// One entry of a named list: its `name` and its body (`user`, `cluster` or `context`).
type Entry<'a> = (String, &'a Map<String, Value>);

/// The `(name, body)` pairs of a named list such as `users`.
fn entries<'a>(
    top: &'a Map<String, Value>,
    list: &'static str,
    body: &'static str,
) -> Result<Vec<Entry<'a>>, KubeconfigError> {
    let items = match top.get(list) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(KubeconfigError::Invalid {
                field: list.to_string(),
                problem: "must be a list",
            });
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("{list}[{i}]");
        let entry = mapping(item, &prefix)?;
        allow_only(entry, &format!("{prefix}."), &["name", body])?;
        let name = string(entry, &format!("{prefix}."), "name")?.unwrap_or_default();
        let body = match entry.get(body) {
            None | Some(Value::Null) => {
                return Err(KubeconfigError::Missing(format!("{prefix}.{body}")));
            }
            Some(v) => mapping(v, &format!("{prefix}.{body}"))?,
        };
        out.push((name, body));
    }
    Ok(out)
}

fn string(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
) -> Result<Option<String>, KubeconfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(KubeconfigError::Invalid {
            field: format!("{prefix}{key}"),
            problem: "must be a string",
        }),
    }
}

fn boolean(map: &Map<String, Value>, prefix: &str, key: &str) -> Result<bool, KubeconfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(KubeconfigError::Invalid {
            field: format!("{prefix}{key}"),
            problem: "must be true or false",
        }),
    }
}

fn base64_field(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
) -> Result<Option<String>, KubeconfigError> {
    let Some(text) = string(map, prefix, key)?.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let compact: String = text.split_whitespace().collect();
    match base64::engine::general_purpose::STANDARD.decode(&compact) {
        Ok(_) => Ok(Some(compact)),
        Err(_) => Err(KubeconfigError::Invalid {
            field: format!("{prefix}{key}"),
            problem: "is not base64",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str, cluster: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: c\n  cluster:\n    server: https://workload.example:6443\n{cluster}contexts:\n- name: w\n  context:\n    cluster: c\n    user: u\n    namespace: apps\nusers:\n- name: u\n  user:\n{user}"
        )
    }

    fn refused(user: &str, cluster: &str) -> KubeconfigError {
        match parse(kubeconfig(user, cluster).as_bytes()) {
            Ok(_) => panic!("accepted:\n{}", kubeconfig(user, cluster)),
            Err(e) => e,
        }
    }

    #[test]
    fn inline_token_is_reduced_to_the_current_context() {
        let parsed =
            parse(kubeconfig("    token: t0k\n", "").as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.server(), "https://workload.example:6443");
        assert_eq!(parsed.secrets(), vec!["t0k".to_string()]);
        let written: Value =
            serde_json::from_slice(&parsed.to_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            written["users"][0]["user"],
            serde_json::json!({"token": "t0k"})
        );
        assert_eq!(written["contexts"][0]["context"]["namespace"], "apps");
        assert_eq!(
            parse(&parsed.to_bytes()),
            Ok(parsed),
            "its own output is valid"
        );
    }

    #[test]
    fn fields_that_run_code_or_read_files_are_refused_by_name() {
        for (user, cluster, field) in [
            (
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: touch\n",
                "",
                "users[0].user.exec",
            ),
            (
                "    auth-provider:\n      name: oidc\n",
                "",
                "users[0].user.auth-provider",
            ),
            (
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
                "",
                "users[0].user.tokenFile",
            ),
            (
                "    client-certificate: /etc/c.pem\n    client-key: /etc/k.pem\n",
                "",
                "users[0].user.client-certificate",
            ),
            (
                "    token: t\n",
                "    certificate-authority: /etc/ca.pem\n",
                "clusters[0].cluster.certificate-authority",
            ),
            (
                "    token: t\n",
                "    proxy-url: http://proxy:3128\n",
                "clusters[0].cluster.proxy-url",
            ),
            ("    token: t\n    as: admin\n", "", "users[0].user.as"),
            (
                "    token: t\n    surprise: 1\n",
                "",
                "users[0].user.surprise",
            ),
        ] {
            let err = refused(user, cluster);
            assert!(
                matches!(&err, KubeconfigError::Forbidden { field: f, .. } if f == field),
                "{field}: {err}"
            );
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }

    #[test]
    fn unused_entries_are_checked_too() {
        let text = format!(
            "{}- name: other\n  user:\n    exec:\n      command: sh\n",
            kubeconfig("    token: t\n", "")
        );
        assert!(matches!(
            parse(text.as_bytes()),
            Err(KubeconfigError::Forbidden { field, .. }) if field == "users[1].user.exec"
        ));
    }

    #[test]
    fn tls_options_are_kept_and_checked() {
        let parsed = parse(
            kubeconfig(
                "    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n",
                "    certificate-authority-data: Y2E=\n    tls-server-name: api.internal\n    insecure-skip-tls-verify: false\n    disable-compression: true\n    extensions:\n    - name: x\n      extension: {}\n",
            )
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let written: Value =
            serde_json::from_slice(&parsed.to_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let cluster = &written["clusters"][0]["cluster"];
        assert_eq!(cluster["certificate-authority-data"], "Y2E=");
        assert_eq!(cluster["tls-server-name"], "api.internal");
        assert_eq!(cluster["disable-compression"], true);
        assert!(
            cluster.get("extensions").is_none(),
            "extensions are dropped"
        );
        assert_eq!(
            refused("    client-certificate-data: Y2VydA==\n", ""),
            KubeconfigError::Missing(
                "users[0].user.client-key-data (with client-certificate-data)".into()
            )
        );
        assert!(matches!(
            refused("    token: t\n", "    certificate-authority-data: '%%%'\n"),
            KubeconfigError::Invalid { field, .. } if field == "clusters[0].cluster.certificate-authority-data"
        ));
    }

    #[test]
    fn syntax_errors_carry_the_position_and_never_the_text() {
        let text = "apiVersion: v1\nusers:\n- name: u\n  user:\n    token: SECRET-XYZ\n    : [\n";
        let err = parse(text.as_bytes()).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("broken YAML was accepted"));
        assert!(!err.contains("SECRET-XYZ"), "{err}");
        assert!(err.starts_with("kubeconfig is not valid YAML"), "{err}");
        assert!(err.contains("line "), "{err}");
    }

    #[test]
    fn unchecked_loading_reports_no_text_either() {
        for broken in [
            "users:\n- name: u\n  user:\n    token: SECRET-XYZ\n    : [\n",
            "users:\n- name: u\n  user: SECRET-XYZ\n",
        ] {
            let err = load_without_checks(broken, "generated kubeconfig")
                .err()
                .unwrap_or_else(|| panic!("accepted {broken}"));
            assert!(!err.contains("SECRET-XYZ"), "{err}");
            assert!(err.starts_with("generated kubeconfig "), "{err}");
        }
    }

    #[test]
    fn dangling_names_and_wrong_types_are_reported() {
        assert_eq!(
            parse(b"current-context: nope\ncontexts: []\n"),
            Err(KubeconfigError::Dangling {
                field: "current-context".into(),
                name: "nope".into(),
                list: "contexts"
            })
        );
        assert!(matches!(
            parse(b"- a\n- b\n"),
            Err(KubeconfigError::Invalid { field, .. }) if field == "kubeconfig"
        ));
        assert!(matches!(
            refused("    token: [SECRET]\n", ""),
            KubeconfigError::Invalid { field, .. } if field == "users[0].user.token"
        ));
    }
}
