//! The `omni-sandbox` command line (a library module, so the docs tests can compare
//! docs/sandbox.md with it).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Runs a management cluster, Omni, the operator and workload clusters in one process, applies
/// the samples and shows them becoming Ready.
#[derive(Debug, clap::Parser)]
#[command(name = "omni-sandbox", version)]
pub struct Args {
    /// Management Kubernetes API address (falls back to a free port when busy).
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Working directory: kubeconfig, certificates, helm state.
    #[arg(long, default_value = "sandbox")]
    pub dir: PathBuf,
    /// Start empty: do not apply config/samples.
    #[arg(long)]
    pub empty: bool,
    /// Exit 0 once every sample is Ready (non-zero after --timeout, listing what is not).
    #[arg(long)]
    pub exit_when_ready: bool,
    /// How long --exit-when-ready waits.
    #[arg(long, default_value = "120s", value_parser = parse_seconds)]
    pub timeout: Duration,
    /// Helm executable (default: .cache/test-tools/bin/helm, then PATH). The same flag and
    /// variable as `omni-operator run`.
    #[arg(long, env = "HELM_BINARY")]
    pub helm_binary: Option<PathBuf>,
    /// Run the operator as the Helm chart deploys it (a pod with a read-only root, the chart's
    /// RBAC, volumes and security context) instead of in this process. Needs root and
    /// `unshare` for the isolation; falls back loudly without them.
    #[arg(long)]
    pub as_deployed: bool,
    /// With --as-deployed: the omni-operator binary (default: beside this one).
    #[arg(long)]
    pub operator_binary: Option<PathBuf>,
    /// With --as-deployed: extra `--set` values for the operator chart (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub values: Vec<String>,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let n = s.strip_suffix('s').unwrap_or(s);
    n.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("{s:?} is not a number of seconds such as 120s"))
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
