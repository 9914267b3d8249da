//! `omni-operator omni template ...`: the omnictl template equivalents.

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand.
pub async fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not built yet")
}
