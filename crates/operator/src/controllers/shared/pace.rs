//! Paced status writes: a status that only counts progress (a fleet set's `ready 37 of 100`)
//! would otherwise be written once per member turning Ready. A write that moves only such
//! counters waits until `pace` has passed since the object's last status write; the pass then
//! comes back at that moment and writes the latest counts. Conditions, generations, failures
//! and everything else are written at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most objects remembered before entries older than the pace are dropped (a remembered time
/// only matters within the pace; objects deleted meanwhile must not pile up).
const PRUNE_ABOVE: usize = 1024;

/// When each object's status was last written, for one kind.
#[derive(Debug)]
pub(crate) struct StatusPacer {
    pace: Duration,
    last_write: Mutex<HashMap<String, Instant>>,
}

impl StatusPacer {
    pub(crate) fn new(pace: Duration) -> Self {
        Self {
            pace,
            last_write: Mutex::new(HashMap::new()),
        }
    }

    /// How long a progress-only write of object `key` waits at `now`; `None`: write now.
    pub(crate) fn hold(&self, key: &str, now: Instant) -> Option<Duration> {
        let last = *self.lock().get(key)?;
        let due = last + self.pace;
        (due > now).then(|| due - now)
    }

    /// Records that object `key`'s status was written at `now`.
    pub(crate) fn wrote(&self, key: &str, now: Instant) {
        let mut last_write = self.lock();
        if last_write.len() >= PRUNE_ABOVE {
            last_write.retain(|_, at| now.saturating_duration_since(*at) < self.pace);
        }
        last_write.insert(key.to_owned(), now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last_write.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_write_waits_out_the_pace_since_the_last_write() {
        let pacer = StatusPacer::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(pacer.hold("ns/a", t0), None, "never written: at once");
        pacer.wrote("ns/a", t0);
        assert_eq!(
            pacer.hold("ns/a", t0 + Duration::from_secs(2)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(pacer.hold("ns/b", t0), None, "per object");
        assert_eq!(pacer.hold("ns/a", t0 + Duration::from_secs(5)), None);
    }

    #[test]
    fn old_entries_are_dropped_once_many_objects_were_written() {
        let pacer = StatusPacer::new(Duration::from_secs(5));
        let t0 = Instant::now();
        for i in 0..PRUNE_ABOVE {
            pacer.wrote(&format!("ns/{i}"), t0);
        }
        pacer.wrote("ns/new", t0 + Duration::from_secs(6));
        assert_eq!(pacer.lock().len(), 1);
    }
}
