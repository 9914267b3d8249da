//! `kube-sim`: serve the Kubernetes API emulator until interrupted.
//!
//! It serves HTTPS with a freshly generated CA, writes an admin kubeconfig (client certificate
//! in `system:masters`, file mode 0600) for kubectl and helm, authenticates client
//! certificates and evaluates RBAC like a real cluster. `--http` serves plain HTTP with every
//! caller treated as an administrator instead.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use kube_sim::auth::StaticAuthenticator;
use kube_sim::kubeconfig::{Credential, Kubeconfig};
use kube_sim::server::KubeSim;
use kube_sim::tls::CertificateAuthority;
use kube_sim::wiring::RbacAuthorizer;

/// An in-memory Kubernetes API server for local development and tests.
#[derive(Debug, Parser)]
#[command(name = "kube-sim", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "kube-sim.kubeconfig")]
    kubeconfig: PathBuf,
    /// Serve plain HTTP without authentication or authorization.
    #[arg(long)]
    http: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kube_sim=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let builder = KubeSim::builder().listen(args.listen);
    let (running, kubeconfig) = if args.http {
        let running = builder.start().await.context("starting kube-sim")?;
        let config = Kubeconfig::new(
            running.base_url.clone(),
            "admin",
            Credential::Token("kube-sim-admin".into()),
        );
        (running, config)
    } else {
        let ca = CertificateAuthority::generate("kube-sim-ca").context("generating the CA")?;
        let host = args.listen.ip().to_string();
        let serving = ca
            .issue_server(&["localhost", "127.0.0.1", host.as_str()])
            .context("issuing the serving certificate")?;
        let admin = ca
            .issue_client("kube-sim-admin", &["system:masters"])
            .context("issuing the admin client certificate")?;
        let running = builder
            .tls(ca.server_config(&serving).context("TLS configuration")?)
            .authenticator(Arc::new(StaticAuthenticator::new()))
            .authorizer(Arc::new(RbacAuthorizer))
            .start()
            .await
            .context("starting kube-sim")?;
        let config = Kubeconfig::new(
            running.base_url.clone(),
            "kube-sim-admin",
            Credential::ClientCertificate {
                cert_pem: admin.cert_pem.clone(),
                key_pem: admin.key_pem.clone(),
            },
        )
        .with_ca_pem(ca.cert_pem());
        (running, config)
    };
    kubeconfig
        .write(&args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;
    println!(
        "kube-sim serving at {}; kubeconfig: {}",
        running.base_url,
        args.kubeconfig.display()
    );
    shutdown_signal().await;
    running.shutdown();
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
