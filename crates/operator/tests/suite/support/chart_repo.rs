//! A Helm chart repository served by the test (`index.yaml` plus a `.tgz` made by `helm package`)
//! behind basic auth, optionally over HTTPS: the charts OmniHelmRelease tests install.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;

use super::helm_bin;

/// A chart whose ConfigMap carries `greeting`; `brokenNamespace` adds a ConfigMap in a namespace
/// that does not exist, so an upgrade with it fails while applying (after Helm recorded the
/// revision), which is what `atomic` rolls back. `web.replicas` adds a Deployment with that
/// many replicas (labelled `app: web`); `test.outcome` adds a test hook Pod annotated with the
/// phase the test's kubelet gives it (`Succeeded` or `Failed`).
pub fn write_chart(dir: &Path, version: &str) {
    let chart = dir.join("demo");
    std::fs::create_dir_all(chart.join("templates")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: demo\nversion: {version}\nappVersion: \"1\"\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        chart.join("templates/configmap.yaml"),
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: {{ .Values.greeting | quote }}
{{- if .Values.brokenNamespace }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-broken
  namespace: {{ .Values.brokenNamespace }}
data: {}
{{- end }}
{{- if .Values.web }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
  labels:
    app: web
spec:
  replicas: {{ .Values.web.replicas }}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: registry.example/web:1
{{- end }}
{{- if .Values.test }}
---
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations:
    helm.sh/hook: test
    demo.example/outcome: {{ .Values.test.outcome | quote }}
spec:
  restartPolicy: Never
  containers:
    - name: test
      image: registry.example/test:1
{{- end }}
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Runs the test tools' helm with its state under `home`; panics when it fails, else returns
/// what it printed.
pub fn run_helm(args: &[&str], home: &Path) -> Vec<u8> {
    let out = std::process::Command::new(helm_bin())
        .args(args)
        .env("HOME", home)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| panic!("run helm: {e}"));
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A running repository; it stops with the test's runtime.
pub struct Repo {
    pub url: String,
    _dir: tempfile::TempDir,
}

/// Starts a chart repository of chart `demo` 0.1.0 that serves only `user`:`password`; with
/// `tls`, over HTTPS with that server configuration.
pub async fn start_repo(
    user: &str,
    password: &str,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Repo {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr: SocketAddr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{addr}");
    let src = dir.path().join("src");
    let public = dir.path().join("public");
    std::fs::create_dir_all(&public).unwrap_or_else(|e| panic!("{e}"));
    write_chart(&src, "0.1.0");
    let (chart, out, home) = (
        src.join("demo"),
        public.display().to_string(),
        dir.path().join("home"),
    );
    run_helm(
        &["package", &chart.display().to_string(), "-d", &out],
        &home,
    );
    run_helm(&["repo", "index", &out, "--url", &url], &home);

    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    );
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (public, expected) = (public.clone(), expected.clone());
        async move {
            let authorized = req
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                == Some(expected.as_str());
            if !authorized {
                return (http::StatusCode::UNAUTHORIZED, Vec::new());
            }
            let name = req.uri().path().trim_start_matches('/').to_string();
            if name.contains('/') || name.contains("..") {
                return (http::StatusCode::NOT_FOUND, Vec::new());
            }
            match std::fs::read(public.join(name)) {
                Ok(bytes) => (http::StatusCode::OK, bytes),
                Err(_) => (http::StatusCode::NOT_FOUND, Vec::new()),
            }
        }
    });
    match tls {
        None => {
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
        }
        Some(config) => {
            tokio::spawn(serve_tls(listener, app, config));
        }
    }
    Repo { url, _dir: dir }
}

async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    config: Arc<rustls::ServerConfig>,
) {
    serve_tls_counting(listener, app, config, Arc::default()).await;
}

/// Serves `app` over TLS with `config` on `listener` until the listener fails, counting in
/// `accepted` every connection accepted (before its handshake, so a client that gives up on
/// the certificate counts too).
pub async fn serve_tls_counting(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    config: Arc<rustls::ServerConfig>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    while let Ok((stream, _)) = listener.accept().await {
        accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (acceptor, service) = (
            acceptor.clone(),
            hyper_util::service::TowerToHyperService::new(app.clone()),
        );
        tokio::spawn(async move {
            // A client that rejects our certificate ends its handshake: nothing to serve.
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
        });
    }
}
