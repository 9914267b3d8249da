//! `omni-sim`: serve the Omni simulator on a fixed address with one registered service account
//! whose key is written to a file (mode 0600), until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use omni_sim::{OmniSim, Role};

#[derive(Debug, Parser)]
#[command(name = "omni-sim", about = "Simulator of Sidero Omni's gRPC API")]
struct Args {
    /// Address to listen on (plaintext HTTP/2).
    #[arg(long, default_value = "127.0.0.1:8099")]
    listen: SocketAddr,
    /// File to write the service-account key to (created with mode 0600).
    #[arg(long)]
    key_out: PathBuf,
    /// Role of the service account.
    #[arg(long, default_value = "Operator")]
    role: String,
    /// Name of the service account.
    #[arg(long, default_value = "omni-sim")]
    name: String,
}

fn write_secret(path: &PathBuf, data: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    // An existing file keeps its old mode through open(); tighten it explicitly.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(data.as_bytes())?;
    f.write_all(b"\n")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr so stdout carries only the "listening on" line scripts read.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let role: Role = args.role.parse().context("invalid --role")?;
    let sim = OmniSim::builder().listen(args.listen).start().await?;
    let key = sim.register_service_account(&args.name, role)?;
    write_secret(&args.key_out, &key)
        .with_context(|| format!("failed to write key to {}", args.key_out.display()))?;
    tracing::info!(
        endpoint = sim.endpoint(),
        key_file = %args.key_out.display(),
        account = %args.name,
        %role,
        "omni-sim serving"
    );
    println!("omni-sim listening on {}", sim.endpoint());
    tokio::signal::ctrl_c()
        .await
        .context("failed to wait for Ctrl-C")?;
    sim.shutdown().await;
    Ok(())
}
