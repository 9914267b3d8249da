//! A local Helm chart repository for the sample OmniHelmRelease: a small chart with the name
//! and version the sample asks for, packaged with `helm package`, indexed with
//! `helm repo index` and served over HTTP on loopback.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

/// A running chart repository.
pub struct ChartRepo {
    /// Base URL (`http://127.0.0.1:PORT/`).
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChartRepo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `helm args…` with helm's directories under `home`.
async fn helm(helm: &Path, home: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .await
        .with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn write_chart(dir: &Path, name: &str, version: &str) -> anyhow::Result<()> {
    let templates = dir.join("templates");
    std::fs::create_dir_all(&templates)?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: {name}\nversion: {version}\nappVersion: \"{version}\"\n\
             description: omni-sandbox stand-in for the {name} chart (a ServiceAccount and a ConfigMap)\n"
        ),
    )?;
    std::fs::write(dir.join("values.yaml"), "replicas: 1\n")?;
    // Only kinds that are ready as soon as they exist: kube-sim runs no workload
    // controllers, and the sample installs with `wait: true`.
    std::fs::write(
        templates.join("serviceaccount.yaml"),
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ .Release.Name }}\n",
    )?;
    std::fs::write(
        templates.join("configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n\
         data:\n  replicas: {{ .Values.replicas | quote }}\n",
    )?;
    Ok(())
}

impl ChartRepo {
    /// Packages a chart `name`-`version` under `work` and serves the repository.
    pub async fn start(
        helm_bin: &Path,
        work: &Path,
        name: &str,
        version: &str,
    ) -> anyhow::Result<Self> {
        let source = work.join("chart-src").join(name);
        let served = work.join("chart-repo");
        std::fs::create_dir_all(&served)?;
        write_chart(&source, name, version)?;
        let helm_home = work.join("helm");
        let served_str = served.to_string_lossy().into_owned();
        helm(
            helm_bin,
            &helm_home,
            &[
                "package",
                &source.to_string_lossy(),
                "--destination",
                &served_str,
            ],
        )
        .await?;
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("http://{}/", listener.local_addr()?);
        helm(
            helm_bin,
            &helm_home,
            &["repo", "index", &served_str, "--url", &url],
        )
        .await?;
        let app = axum::Router::new()
            .route("/{file}", axum::routing::get(serve_file))
            .with_state(served);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "chart repository stopped");
            }
        });
        Ok(Self { url, task })
    }
}

async fn serve_file(
    State(dir): State<PathBuf>,
    UrlPath(file): UrlPath<String>,
) -> impl IntoResponse {
    if file.contains('/') || file.starts_with('.') {
        return (StatusCode::NOT_FOUND, Vec::new());
    }
    match tokio::fs::read(dir.join(&file)).await {
        Ok(bytes) => (StatusCode::OK, bytes),
        Err(_) => (StatusCode::NOT_FOUND, Vec::new()),
    }
}
