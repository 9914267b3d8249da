//! Each target's share of the reconcile slots.
//!
//! A controller runs at most `--max-concurrent-reconciles` reconciles at once. Objects that
//! point at one server which accepts connections and never answers (a tarpit) each hold a slot
//! until their requests time out; hundreds of them held every slot, and every other tenant's
//! objects waited. So the objects of one kind and one target (a kubeconfig Secret, an
//! OmniCluster, an OmniConnection: what a pass talks to) may hold at most
//! `--max-reconciles-per-target` of that kind's slots at once. A pass that finds its target's
//! share taken does nothing (no read, no write) and comes back a few seconds later; the slot it
//! would have held stays free for other targets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default of `--max-reconciles-per-target`: an eighth of the default reconcile slots.
pub const DEFAULT_PER_TARGET: u16 = 32;

/// Bounds of the wait before a pass whose target's share was taken tries again.
const BUSY_RETRY: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(8));

/// Every target's slots in use.
#[derive(Debug)]
pub(crate) struct TargetSlots {
    share: usize,
    held: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A slot of a target's share, given back when dropped.
#[derive(Debug)]
pub(crate) struct TargetSlot {
    _permit: OwnedSemaphorePermit,
}

impl TargetSlots {
    /// Slots of which one target may hold `share` at once.
    pub(crate) fn new(share: u16) -> Self {
        Self {
            share: usize::from(share.max(1)),
            held: Mutex::default(),
        }
    }

    /// A slot for `target`, or `None` while the target holds its whole share.
    pub(crate) fn try_take(&self, target: &str) -> Option<TargetSlot> {
        let semaphore = {
            let mut held = match self.held.lock() {
                Ok(h) => h,
                Err(poisoned) => poisoned.into_inner(),
            };
            // Targets nobody works on are forgotten, so the table stays as small as the work.
            if held.len() > 64 {
                held.retain(|_, s| Arc::strong_count(s) > 1);
            }
            held.entry(target.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
                .clone()
        };
        semaphore
            .try_acquire_owned()
            .ok()
            .map(|permit| TargetSlot { _permit: permit })
    }
}

/// How long a pass whose target's share was taken waits before it tries again: a few seconds,
/// jittered so that the waiting objects of one target do not all come back at once.
pub(crate) fn busy_retry() -> Duration {
    let (low, high) = BUSY_RETRY;
    rand::thread_rng().gen_range(low..high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_holds_at_most_its_share_and_others_are_unaffected() {
        let slots = TargetSlots::new(2);
        let a1 = slots.try_take("kubeconfig:ns/tarpit");
        let a2 = slots.try_take("kubeconfig:ns/tarpit");
        assert!(a1.is_some() && a2.is_some());
        assert!(
            slots.try_take("kubeconfig:ns/tarpit").is_none(),
            "share taken"
        );
        assert!(
            slots.try_take("kubeconfig:ns/other").is_some(),
            "another target"
        );
        drop(a1);
        assert!(
            slots.try_take("kubeconfig:ns/tarpit").is_some(),
            "given back"
        );
        let retry = busy_retry();
        assert!((BUSY_RETRY.0..BUSY_RETRY.1).contains(&retry), "{retry:?}");
    }
}
