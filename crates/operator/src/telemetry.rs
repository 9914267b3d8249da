//! Logging setup shared by every subcommand.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (default for interactive use).
    #[default]
    Text,
    /// One JSON object per line (recommended in clusters).
    Json,
}

/// Installs the global tracing subscriber. `RUST_LOG` overrides the default `info` filter.
/// Logs go to stderr so that commands printing YAML on stdout stay machine-readable.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    };
    // A second init (tests, embedded use by the sandbox) keeps the first subscriber.
    let _ = result;
}
