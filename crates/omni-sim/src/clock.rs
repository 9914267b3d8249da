//! Injectable time source: signature freshness, key expiry, resource timestamps and token
//! expiry all read the simulator's clock, so tests can move time instead of sleeping.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

/// A source of "now" for the simulator.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that starts at a given instant and only moves when told to.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A manual clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Sets the current instant.
    pub fn set(&self, at: Timestamp) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    /// Moves the clock forward (or backward, for negative durations).
    pub fn advance(&self, by: SignedDuration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(next) = now.checked_add(by) {
            *now = next;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Converts a jiff timestamp to the protobuf well-known type.
pub(crate) fn to_proto(ts: Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ts.as_second(),
        nanos: ts.subsec_nanosecond(),
    }
}

/// Converts a protobuf timestamp to jiff; out-of-range values clamp to the Unix epoch, as Go's
/// decoder does for missing timestamps.
pub(crate) fn from_proto(ts: &prost_types::Timestamp) -> Timestamp {
    Timestamp::new(ts.seconds, ts.nanos).unwrap_or(Timestamp::UNIX_EPOCH)
}
