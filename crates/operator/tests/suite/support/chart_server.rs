//! Servers a tenant could point the operator's chart fetches at, for the hostile-tenant tests:
//! a chart repository or OCI registry whose files the test writes (forged indexes included),
//! redirects, a service that does not speak HTTP, and a tarpit. Each records what reached it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use sha2::Digest;

use super::chart_repo::run_helm;

/// One request a server received: its path and `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
}

/// What a path answers.
#[derive(Clone)]
enum Answer {
    File {
        bytes: Vec<u8>,
        content_type: String,
    },
    Redirect(String),
}

/// How a [`ChartServer`] serves.
#[derive(Default)]
pub struct Serve {
    /// Only requests with this basic auth are served (others: 401).
    pub basic_auth: Option<(String, String)>,
    /// An OCI registry's token dance: without `Authorization: Bearer <token>` a request is
    /// answered 401 with a Bearer challenge naming `/token` on this server, which hands out the
    /// token for these basic credentials.
    pub registry_login: Option<(String, String, String)>,
    /// Over HTTPS with this configuration.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// A file and redirect server that records every request.
pub struct ChartServer {
    /// `http://127.0.0.1:PORT` or `https://…`.
    pub url: String,
    pub addr: SocketAddr,
    answers: Arc<Mutex<HashMap<String, Answer>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
}

impl ChartServer {
    pub async fn start(serve: Serve) -> ChartServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let scheme = if serve.tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let answers: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let basic = serve.basic_auth.as_ref().map(|(u, p)| basic_header(u, p));
        let login = serve
            .registry_login
            .clone()
            .map(|(u, p, token)| (basic_header(&u, &p), token));
        let (files, recorded, base) = (answers.clone(), seen.clone(), url.clone());
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (files, recorded, basic, login, base) = (
                files.clone(),
                recorded.clone(),
                basic.clone(),
                login.clone(),
                base.clone(),
            );
            async move {
                use axum::response::IntoResponse;
                let path = req.uri().path().to_string();
                let auth = req
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(String::from);
                if let Ok(mut r) = recorded.lock() {
                    r.push(Seen {
                        path: path.clone(),
                        authorization: auth.clone(),
                    });
                }
                if let Some((basic, token)) = &login {
                    if path == "/token" {
                        return if auth.as_deref() == Some(basic.as_str()) {
                            axum::Json(serde_json::json!({"token": token})).into_response()
                        } else {
                            http::StatusCode::UNAUTHORIZED.into_response()
                        };
                    }
                    if auth.as_deref() != Some(format!("Bearer {token}").as_str()) {
                        let name = path
                            .trim_start_matches("/v2/")
                            .rsplitn(3, '/')
                            .nth(2)
                            .unwrap_or_default()
                            .to_string();
                        let challenge = format!(
                            "Bearer realm=\"{base}/token\",service=\"chart-server\",scope=\"repository:{name}:pull\""
                        );
                        return (
                            http::StatusCode::UNAUTHORIZED,
                            [(http::header::WWW_AUTHENTICATE, challenge)],
                        )
                            .into_response();
                    }
                } else if let Some(expected) = &basic
                    && auth.as_deref() != Some(expected.as_str())
                {
                    return http::StatusCode::UNAUTHORIZED.into_response();
                }
                let answer = files.lock().ok().and_then(|f| f.get(&path).cloned());
                match answer {
                    Some(Answer::File {
                        bytes,
                        content_type,
                    }) => {
                        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
                        (
                            [
                                (http::header::CONTENT_TYPE, content_type),
                                (
                                    http::HeaderName::from_static("docker-content-digest"),
                                    digest,
                                ),
                            ],
                            bytes,
                        )
                            .into_response()
                    }
                    Some(Answer::Redirect(location)) => (
                        http::StatusCode::FOUND,
                        [(http::header::LOCATION, location)],
                    )
                        .into_response(),
                    None => http::StatusCode::NOT_FOUND.into_response(),
                }
            }
        });
        match serve.tls {
            None => {
                let counted = connections.clone();
                tokio::spawn(async move {
                    let listener = CountingListener(listener, counted);
                    let _ = axum::serve(listener, app).await;
                });
            }
            Some(config) => {
                tokio::spawn(super::chart_repo::serve_tls_counting(
                    listener,
                    app,
                    config,
                    connections.clone(),
                ));
            }
        }
        ChartServer {
            url,
            addr,
            answers,
            seen,
            connections,
        }
    }

    /// Serves `bytes` at `path`.
    pub fn put(&self, path: &str, bytes: impl Into<Vec<u8>>, content_type: &str) {
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                path.to_string(),
                Answer::File {
                    bytes: bytes.into(),
                    content_type: content_type.to_string(),
                },
            );
    }

    /// Answers `path` with a 302 to `location`.
    pub fn redirect(&self, path: &str, location: &str) {
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_string(), Answer::Redirect(location.to_string()));
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Connections accepted so far (TLS: before the handshake).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The requests that carried an `Authorization` header.
    pub fn authorized(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.authorization.is_some())
            .collect()
    }
}

/// A listener for `axum::serve` that counts the connections it accepts.
struct CountingListener(tokio::net::TcpListener, Arc<AtomicUsize>);

impl axum::serve::Listener for CountingListener {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let accepted = axum::serve::Listener::accept(&mut self.0).await;
        self.1.fetch_add(1, Ordering::SeqCst);
        accepted
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// The `Authorization` value of HTTP basic auth.
pub fn basic_header(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// Chart `name` `version` packaged by helm, its ConfigMap's `greeting` defaulting to
/// `greeting`: the archive's bytes.
pub fn package(name: &str, version: &str, greeting: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let chart = dir.path().join(name);
    std::fs::create_dir_all(chart.join("templates")).unwrap_or_else(|e| panic!("{e}"));
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    };
    write(
        &chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\nappVersion: \"1\"\n"),
    );
    write(
        &chart.join("values.yaml"),
        format!("greeting: {greeting}\n"),
    );
    write(
        &chart.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\ndata:\n  greeting: {{ .Values.greeting | quote }}\n".to_string(),
    );
    let out = dir.path().join("out");
    run_helm(
        &[
            "package",
            &chart.display().to_string(),
            "-d",
            &out.display().to_string(),
        ],
        &dir.path().join("home"),
    );
    std::fs::read(out.join(format!("{name}-{version}.tgz"))).unwrap_or_else(|e| panic!("{e}"))
}

/// The SHA-256 digest of `bytes` in hex, as chart indexes list it.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// One entry of a repository index: chart name, version, digest and download URL.
pub struct Entry<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub digest: &'a str,
    pub url: &'a str,
}

/// A repository `index.yaml` listing `entries` as written (a forged digest or URL included).
pub fn index(entries: &[Entry<'_>]) -> String {
    let mut by_name: std::collections::BTreeMap<&str, Vec<serde_json::Value>> =
        std::collections::BTreeMap::new();
    for e in entries {
        by_name.entry(e.name).or_default().push(serde_json::json!({
            "apiVersion": "v2",
            "name": e.name,
            "version": e.version,
            "appVersion": "1",
            "created": "2025-01-01T00:00:00Z",
            "digest": e.digest,
            "urls": [e.url],
        }));
    }
    // JSON is YAML, and helm reads either.
    serde_json::json!({
        "apiVersion": "v1",
        "entries": by_name,
        "generated": "2025-01-01T00:00:00Z",
    })
    .to_string()
}

/// A loopback TCP server that answers every connection with `banner` and closes it, like a
/// service that does not speak HTTP (a Redis, an SMTP server). Returns its address and the
/// number of connections it accepted.
pub async fn banner_server(banner: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    counting_server(Some(banner)).await
}

/// A loopback TCP server that accepts every connection and never answers nor closes it: a
/// tarpit. Returns its address and the number of connections it holds.
pub async fn tarpit() -> (SocketAddr, Arc<AtomicUsize>) {
    counting_server(None).await
}

/// A loopback server counting its connections: each is answered with `banner` and closed, or
/// (without one) held open in silence.
async fn counting_server(banner: Option<&'static str>) -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            match banner {
                None => held.push(stream),
                Some(text) => {
                    tokio::spawn(async move {
                        let _ = stream.write_all(text.as_bytes()).await;
                        let _ = stream.shutdown().await;
                    });
                }
            }
        }
    });
    (addr, count)
}
