//! The `omni-operator` binary: a thin dispatcher over [`omni_operator::cli`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use omni_operator::cli;
use omni_operator::process::telemetry;

#[derive(Debug, Parser)]
#[command(
    name = "omni-operator",
    version,
    about = "Kubernetes operator for Sidero Omni clusters"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "LOG_FORMAT", value_enum, default_value_t)]
    log_format: telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator: controllers, admission webhook, metrics and probes.
    // Boxed: its many flags make it far larger than the other subcommands.
    Run(Box<cli::run::Args>),
    /// Print every CustomResourceDefinition as multi-document YAML.
    Crds(cli::crds::Args),
    /// Validate manifests offline, as the admission webhook would.
    Validate(cli::validate::Args),
    /// Print the Omni cluster template that manifests would sync.
    Render(cli::render::Args),
    /// Print the change set the operator recorded for an OmniCluster (no Omni credentials
    /// needed): what it would change in Omni, why it holds it, how to approve it.
    Plan(cli::plan::Args),
    /// Summarise the fleet: clusters not running, objects not Ready, kubeconfigs expiring.
    Status(cli::status::Args),
    /// Talk to Omni directly (debugging).
    Omni(cli::omni::Args),
    /// Print the version.
    Version,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let result = match cli.command {
        Command::Run(args) => cli::run::run(*args).await,
        Command::Crds(args) => cli::crds::run(args).await,
        Command::Validate(args) => cli::validate::run(args).await,
        Command::Render(args) => cli::render::run(args).await,
        Command::Plan(args) => cli::plan::run(args).await,
        Command::Status(args) => cli::status::run(args).await,
        Command::Omni(args) => cli::omni::run(args).await,
        Command::Version => {
            println!("omni-operator {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
