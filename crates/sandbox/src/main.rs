//! `omni-sandbox`: the whole system in one command. See `docs/sandbox.md`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use omni_sandbox::{Options, Sandbox, find_helm, repo_root, status};

/// Runs a management cluster, Omni, the operator and workload clusters in one process, applies
/// the samples and shows them becoming Ready.
#[derive(Debug, Parser)]
#[command(name = "omni-sandbox", version)]
struct Args {
    /// Management Kubernetes API address (falls back to a free port when busy).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Working directory: kubeconfig, certificates, helm state.
    #[arg(long, default_value = "sandbox")]
    dir: PathBuf,
    /// Start empty: do not apply config/samples.
    #[arg(long)]
    empty: bool,
    /// Exit 0 once every sample is Ready (non-zero after --timeout, listing what is not).
    #[arg(long)]
    exit_when_ready: bool,
    /// How long --exit-when-ready waits.
    #[arg(long, default_value = "120s", value_parser = parse_seconds)]
    timeout: Duration,
    /// Helm executable (default: .cache/test-tools/bin/helm, then PATH). The same flag and
    /// variable as `omni-operator run`.
    #[arg(long, env = "HELM_BINARY")]
    helm_binary: Option<PathBuf>,
    /// Run the operator as the Helm chart deploys it (a pod with a read-only root, the chart's
    /// RBAC, volumes and security context) instead of in this process. Needs root and
    /// `unshare` for the isolation; falls back loudly without them.
    #[arg(long)]
    as_deployed: bool,
    /// With --as-deployed: the omni-operator binary (default: beside this one).
    #[arg(long)]
    operator_binary: Option<PathBuf>,
    /// With --as-deployed: extra `--set` values for the operator chart (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    values: Vec<String>,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let n = s.strip_suffix('s').unwrap_or(s);
    n.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("{s:?} is not a number of seconds such as 120s"))
}

/// Finds helm, installing the test tools when there is none.
async fn helm(explicit: Option<&std::path::Path>) -> anyhow::Result<PathBuf> {
    if let Some(h) = find_helm(explicit) {
        return Ok(h);
    }
    println!("==> helm not found: running scripts/install-test-tools");
    // Only helm and kubectl: the real control plane the script also builds is for the tests.
    let status = tokio::process::Command::new(repo_root().join("scripts/install-test-tools"))
        .env("SKIP_CONTROL_PLANE", "1")
        .status()
        .await
        .context("running scripts/install-test-tools")?;
    anyhow::ensure!(status.success(), "scripts/install-test-tools failed");
    find_helm(None).context("helm is still missing after scripts/install-test-tools")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let helm = helm(args.helm_binary.as_deref()).await?;
    let opts = Options {
        listen: args.listen,
        dir: args.dir.clone(),
        helm,
        empty: args.empty,
        as_deployed: match args.as_deployed {
            false => None,
            true => Some(omni_sandbox::AsDeployed {
                operator_binary: match args.operator_binary {
                    Some(p) => p,
                    None => std::env::current_exe()?
                        .parent()
                        .context("the sandbox binary has no directory")?
                        .join("omni-operator"),
                },
                values: args.values,
            }),
        },
    };
    let started = tokio::time::Instant::now();
    let sandbox = Sandbox::start(&opts, |step| println!("==> {step}")).await?;
    let kubeconfig = sandbox.kubeconfig.display().to_string();
    println!("==> management API at {}", sandbox.management.base_url);
    println!("==> kubeconfig written to {kubeconfig}");
    println!("==> Omni (omni-sim) at {}", sandbox.omni.endpoint());

    let expected: BTreeSet<(String, String)> = sandbox.applied.iter().cloned().collect();
    let deadline = started + args.timeout;
    let mut last = String::new();
    let outcome = loop {
        if expected.is_empty() {
            break Ok(());
        }
        let rows = status::rows(&sandbox.client).await.unwrap_or_default();
        let table = status::render(&rows);
        if table != last {
            println!("\n{table}");
            last = table;
        }
        let ready: BTreeSet<(String, String)> = rows
            .iter()
            .filter(|r| r.is_ready())
            .map(|r| (r.kind.clone(), r.name.clone()))
            .collect();
        if expected.is_subset(&ready) {
            println!(
                "==> all samples Ready after {}s",
                started.elapsed().as_secs()
            );
            break Ok(());
        }
        if args.exit_when_ready && tokio::time::Instant::now() > deadline {
            let failing: Vec<String> = rows
                .iter()
                .filter(|r| expected.contains(&(r.kind.clone(), r.name.clone())) && !r.is_ready())
                .map(|r| {
                    format!(
                        "{}/{}: {} {}: {}",
                        r.kind, r.name, r.ready, r.reason, r.message
                    )
                })
                .collect();
            break Err(failing);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = tokio::signal::ctrl_c() => {
                println!("==> interrupted");
                sandbox.shutdown().await;
                return Ok(());
            }
        }
    };
    match outcome {
        Err(failing) => {
            eprintln!(
                "==> not every sample became Ready within {}s:",
                args.timeout.as_secs()
            );
            for f in failing {
                eprintln!("    {f}");
            }
            sandbox.shutdown().await;
            std::process::exit(1);
        }
        Ok(()) if args.exit_when_ready => {
            sandbox.shutdown().await;
            Ok(())
        }
        Ok(()) => {
            println!(
                "==> serving until Ctrl-C. Try:\n    kubectl --kubeconfig {kubeconfig} get omni\n    kubectl --kubeconfig {kubeconfig} apply -f your-manifests.yaml"
            );
            let _ = tokio::signal::ctrl_c().await;
            println!("==> shutting down");
            sandbox.shutdown().await;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Args;

    #[test]
    fn helm_binary_reads_the_same_variable_as_the_operator() {
        let command = Args::command();
        let helm = command
            .get_arguments()
            .find(|a| a.get_id() == "helm_binary")
            .unwrap_or_else(|| panic!("--helm-binary exists"));
        assert_eq!(helm.get_long(), Some("helm-binary"));
        assert_eq!(
            helm.get_env().map(|e| e.to_string_lossy().into_owned()),
            Some("HELM_BINARY".to_string())
        );
    }
}
