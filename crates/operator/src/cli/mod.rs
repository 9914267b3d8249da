//! Subcommands of the `omni-operator` binary. Each module owns one subcommand's arguments
//! (`Args`, a `clap::Args`) and its `run` function.

pub mod crds;
pub(crate) mod manifests;
pub mod omni;
pub mod omni_export;
pub mod omni_template;
pub mod plan;
pub mod render;
pub mod run;
pub mod status;
pub mod validate;
