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

/// The filter used when `RUST_LOG` is unset: `info`, except kube-client's per-request failure
/// log. That layer reports every failed request at ERROR, including the ones the operator
/// handles as transient (a workload API that is briefly down while a kubeconfig is probed, a
/// conflict it retries); the operator logs each failure itself at the level that matches what
/// it does about it, so the duplicate only misleads. `RUST_LOG` brings it back when wanted.
pub(crate) const DEFAULT_FILTER: &str = "info,kube_client::client::builder=off";

/// Installs the global tracing subscriber. `RUST_LOG` overrides the default filter: `info`,
/// without kube-client's duplicate per-request error log.
/// Logs go to stderr so that commands printing YAML on stdout stay machine-readable.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut b) = self.0.lock() {
                b.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_default_filter_drops_kube_clients_duplicate_request_errors_only() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new(DEFAULT_FILTER))
            .with(fmt::layer().with_writer(move || writer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "kube_client::client::builder", "failed with error connection refused");
            tracing::warn!(target: "omni_operator::controllers", "reconcile failed; retrying");
            tracing::debug!(target: "omni_operator::controllers", "probe inconclusive");
        });
        let text = String::from_utf8_lossy(&out.0.lock().map(|b| b.clone()).unwrap_or_default())
            .into_owned();
        assert!(!text.contains("connection refused"), "{text}");
        assert!(text.contains("reconcile failed; retrying"), "{text}");
        assert!(!text.contains("probe inconclusive"), "{text}");
    }
}
