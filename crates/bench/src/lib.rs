//! omni-bench: the operator at scale, measured honestly. See `docs/performance.md`.
//!
//! One *run* starts fresh emulators (kube-sim as the management cluster, omni-sim, a kube-sim per
//! workload cluster), applies a deterministic fleet as the bench's own user, starts the
//! `omni-operator` binary as a child process and measures its phases: cold start, idle window,
//! change latency. A *sweep* repeats runs over fleet sizes and fits the growth exponent; a
//! *baseline comparison* repeats runs with the operator's hidden `--baseline-quirks` flag, which
//! models the original implementation's documented behaviour, and with the original
//! implementation itself where its binary is at hand ([`ORIGINAL`]), and reports ratios.

#![warn(missing_docs)]

pub mod emulators;
pub mod fleet;
pub mod floor;
pub mod null_operator;
pub mod operator;
pub mod phases;
pub mod report;
pub mod sets;
pub mod shards;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::emulators::{Emulators, OmniLatency};
use crate::fleet::FleetSpec;
use crate::operator::OperatorProcess;
use crate::phases::{ColdStart, EndState, Idle, Latency};

/// The variant of a baseline comparison that runs the original implementation's own binary
/// ([`RunConfig::original_binary`]) in place of the operator.
pub const ORIGINAL: &str = "original";

/// Everything one run needs besides the fleet.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The `omni-operator` binary.
    pub operator_binary: PathBuf,
    /// The original implementation's binary, for the [`ORIGINAL`] variant.
    pub original_binary: Option<PathBuf>,
    /// Helm (only needed with Helm releases).
    pub helm: Option<PathBuf>,
    /// Omni latency, equal for every variant.
    pub omni_latency: OmniLatency,
    /// Length of the idle window.
    pub idle: Duration,
    /// Edits in the change-latency phase (0 skips it).
    pub edits: usize,
    /// Pause between two edits.
    pub edit_spacing: Duration,
    /// Longest the cold start may take before the run reports it unconverged.
    pub cold_start_limit: Duration,
}

/// The results of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    /// Fleet size.
    pub fleet: FleetSpec,
    /// The operator's `--baseline-quirks` value (`none`: the operator as it is).
    pub variant: String,
    /// Seconds the bench took to create the fleet (before the operator started).
    pub apply_secs: f64,
    /// Cold start.
    pub cold_start: ColdStart,
    /// Seconds from convergence until the operator made no write for [`phases::QUIET`]
    /// (Omni's status settling after the cold start).
    pub settle_secs: f64,
    /// Idle window.
    pub idle: Idle,
    /// Change latency, when measured.
    pub latency: Option<Latency>,
    /// What Omni and the workload clusters hold at the end.
    pub end_state: EndState,
    /// The set phases, with `--sets` (after a converged cold start).
    pub sets: Option<sets::SetPhases>,
}

/// Runs the phases once against fresh emulators; `variant` is the operator's
/// `--baseline-quirks` value, `none`, or [`ORIGINAL`].
pub async fn run_once(
    config: &RunConfig,
    spec: &FleetSpec,
    variant: &str,
) -> anyhow::Result<RunResult> {
    spec.validate()?;
    let original = match (variant == ORIGINAL, &config.original_binary) {
        (false, _) => None,
        (true, Some(binary)) => Some(binary),
        (true, None) => anyhow::bail!("the variant `{ORIGINAL}` needs --original-binary"),
    };
    let dir = tempfile::Builder::new().prefix("omni-bench-").tempdir()?;
    let emu = Emulators::start(
        spec,
        config.omni_latency,
        dir.path(),
        config.helm.as_deref(),
    )
    .await?;
    let apply_secs = phases::apply(&emu, spec).await?.as_secs_f64();
    if spec.sets {
        sets::prepare_workloads(&emu, spec)?;
    }
    let quirks = (variant != "none").then_some(variant);
    let mut operator = match original {
        Some(binary) => {
            OperatorProcess::start_original(binary, &emu.operator_kubeconfig, dir.path())?
        }
        None => OperatorProcess::start(
            &config.operator_binary,
            &emu.operator_kubeconfig,
            dir.path(),
            config.helm.as_deref(),
            quirks,
        )?,
    };
    let result = async {
        let started = Instant::now();
        let cold_start =
            phases::cold_start(&emu, spec, &mut operator, started, config.cold_start_limit).await?;
        let settle_secs =
            phases::settle(&emu, Duration::from_secs(120), || operator.check_alive()).await?;
        let idle = phases::idle(&emu, &mut operator, config.idle).await?;
        if spec.sets && cold_start.converged {
            sets::ensure_quiet(&idle)?;
        }
        let latency = if config.edits > 0 && cold_start.converged {
            Some(
                phases::change_latency(
                    &emu,
                    spec,
                    config.edits,
                    config.edit_spacing,
                    Duration::from_secs(60),
                )
                .await?,
            )
        } else {
            None
        };
        let sets = if spec.sets && cold_start.converged {
            Some(sets::run(&emu, spec, &mut operator, config.cold_start_limit).await?)
        } else {
            None
        };
        operator.check_alive()?;
        Ok::<_, anyhow::Error>(RunResult {
            fleet: *spec,
            variant: variant.to_owned(),
            apply_secs,
            cold_start,
            settle_secs,
            idle,
            latency,
            end_state: phases::end_state(&emu, spec),
            sets,
        })
    }
    .await;
    operator.stop().await;
    emu.shutdown().await;
    result
}
