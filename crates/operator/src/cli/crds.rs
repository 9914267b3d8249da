//! `omni-operator crds`: prints every CustomResourceDefinition, or writes one file per CRD.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::api;

/// Arguments of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD (`omni.texashpc.com_<plural>.yaml`) into this directory instead
    /// of printing a multi-document stream. The directory is created if missing.
    #[arg(long, value_name = "DIR")]
    pub(crate) output_dir: Option<PathBuf>,
}

/// Runs the subcommand.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.output_dir {
        None => {
            print!("{}", api::try_crds_yaml()?);
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("create directory {}", dir.display()))?;
            for crd in api::crds() {
                let path = dir.join(api::crd_file_name(&crd));
                let yaml = api::crd_yaml(&crd)?;
                std::fs::write(&path, yaml).with_context(|| format!("write {}", path.display()))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
