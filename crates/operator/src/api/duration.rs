//! Go-syntax durations (`300ms`, `90s`, `1h30m`, `1.5h`, `-5m`, `0`).
//!
//! Spec fields are [`DurationField`]s: the text as written and its [`GoDuration::parse`], made
//! once when the object is decoded. Any string decodes, so a value the parser rejects is still
//! reported by the webhook and the controllers at its field path, with the text as written.
//! Formatting follows Go's `Duration.String()` exactly because the kubeconfig export spec hash
//! embeds it.

pub use omni_client::duration::GoDuration;
pub(crate) use omni_client::duration::{DurationError, DurationField};

/// Shortest periodic interval accepted for `syncInterval`, `driftCheckInterval`, the time
/// between kubeconfig rotations and `--secret-sync-resync-interval` (`0` keeps its own meaning:
/// the default or off). Shorter ones would hammer Omni, helm or the workload cluster.
pub(crate) const MIN_INTERVAL: GoDuration = GoDuration::from_secs(10);

/// Longest accepted OmniHelmRelease `timeout`: helm holds a process and the release's lock for
/// that long.
pub(crate) const MAX_TIMEOUT: GoDuration = GoDuration::from_secs(3600);

/// The admission error for a periodic interval field holding a positive value below
/// [`MIN_INTERVAL`]; `zero_means` says what `0` does instead. Unparseable or negative values
/// are reported by the field's other rules.
pub(crate) fn short_interval_error(
    path: &str,
    field: &str,
    value: &DurationField,
    zero_means: &str,
) -> Option<super::validation::FieldError> {
    let d = value.duration().ok()?;
    (d.is_positive() && d < MIN_INTERVAL).then(|| {
        super::validation::FieldError::invalid(
            path,
            value.as_str(),
            format!("{field} must be 0 ({zero_means}) or at least {MIN_INTERVAL}"),
        )
    })
}

/// Whether duration bounds are refused (admission) or left to the controller, which clamps
/// them (the rules re-checked on stored objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// Refuse a value outside its bounds.
    Enforce,
    /// Accept it: the controller clamps it.
    Clamped,
}

/// What a controller does with an interval stored without admission (webhook bypassed or
/// switched off): zero stays zero (each caller's default or off), anything else is raised to
/// `floor`.
pub(crate) fn clamp_interval(
    interval: std::time::Duration,
    floor: std::time::Duration,
) -> std::time::Duration {
    if interval.is_zero() {
        interval
    } else {
        interval.max(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_intervals_are_clamped_but_zero_keeps_its_meaning() {
        let floor = std::time::Duration::from_secs(10);
        let clamp = |d| clamp_interval(d, floor);
        assert_eq!(clamp(std::time::Duration::ZERO), std::time::Duration::ZERO);
        assert_eq!(clamp(std::time::Duration::from_nanos(1)), floor);
        assert_eq!(clamp(std::time::Duration::from_secs(9)), floor);
        assert_eq!(
            clamp(std::time::Duration::from_secs(300)),
            std::time::Duration::from_secs(300)
        );
    }
}
