//! Each target's share of the reconcile slots.
//!
//! A controller runs at most `--max-concurrent-reconciles` reconciles at once. Objects that
//! point at one server which accepts connections and never answers (a tarpit) each hold a slot
//! until their requests time out; hundreds of them held every slot, and every other tenant's
//! objects waited. So the objects of one kind and one target (a kubeconfig Secret, an
//! OmniCluster, an OmniConnection: what a pass talks to) may hold at most
//! `--max-reconciles-per-target` of that kind's slots at once. A pass that finds its target's
//! share taken does nothing (no read, no write) and holds no slot: it queues behind the
//! target, and the slot given back next wakes the first object in the queue. A target whose
//! passes are quick so loses no time to the bound (a fleet of 1,000 clusters on one
//! OmniConnection); one whose passes hang moves as slowly as its own passes, and nobody else
//! waits for it. A waiting object also comes back by itself a few seconds later, in case its
//! place in the queue went with a target nobody works on any more.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default of `--max-reconciles-per-target`: an eighth of the default reconcile slots.
pub const DEFAULT_PER_TARGET: u16 = 32;

/// Bounds of the wait before a pass whose target's share was taken tries again by itself.
const BUSY_RETRY: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(8));

/// How a waiting object is reconciled again: it sends the object to its controller.
pub(crate) type Wake = Box<dyn FnOnce() + Send>;

/// Every target's slots in use, and the objects queued behind each.
#[derive(Debug)]
pub(crate) struct TargetSlots {
    share: usize,
    held: Mutex<HashMap<String, Arc<Target>>>,
}

/// One target: its share of slots, and the objects waiting for one (each once, first come
/// first woken).
#[derive(Debug)]
struct Target {
    slots: Arc<Semaphore>,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue(VecDeque<(String, Wake)>);

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(key, _)| key))
            .finish()
    }
}

impl Target {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A slot of a target's share. Dropping it gives the slot back and wakes the first object
/// queued behind the target.
#[derive(Debug)]
pub(crate) struct TargetSlot {
    permit: Option<OwnedSemaphorePermit>,
    target: Arc<Target>,
}

impl Drop for TargetSlot {
    fn drop(&mut self) {
        // The slot goes back before the queue is looked at, under the queue's lock in
        // `try_take`'s order: a pass that found the share taken and queued itself is either
        // woken here or took the slot itself — never left waiting beside a free slot.
        drop(self.permit.take());
        let next = self.target.queue().0.pop_front();
        if let Some((_, wake)) = next {
            wake();
        }
    }
}

impl TargetSlots {
    /// Slots of which one target may hold `share` at once.
    pub(crate) fn new(share: u16) -> Self {
        Self {
            share: usize::from(share.max(1)),
            held: Mutex::default(),
        }
    }

    /// A slot for `target`, or `None` while the target holds its whole share: then the object
    /// `key` is queued behind the target (once, however often it asks) and `wake` is called
    /// when a slot of the target is given back.
    pub(crate) fn try_take(&self, target: &str, key: &str, wake: Wake) -> Option<TargetSlot> {
        let target = {
            let mut held = lock(&self.held);
            // Targets nobody works on or waits for are forgotten, so the table stays as small
            // as the work.
            if held.len() > 64 {
                held.retain(|_, t| Arc::strong_count(t) > 1 || !t.queue().0.is_empty());
            }
            held.entry(target.to_string())
                .or_insert_with(|| {
                    Arc::new(Target {
                        slots: Arc::new(Semaphore::new(self.share)),
                        queue: Mutex::default(),
                    })
                })
                .clone()
        };
        let mut queue = target.queue();
        match target.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                queue.0.retain(|(waiting, _)| waiting != key);
                drop(queue);
                Some(TargetSlot {
                    permit: Some(permit),
                    target,
                })
            }
            Err(_) => {
                if !queue.0.iter().any(|(waiting, _)| waiting == key) {
                    queue.0.push_back((key.to_string(), wake));
                }
                None
            }
        }
    }
}

/// How long a pass whose target's share was taken waits before it tries again by itself (it
/// is woken earlier when a slot comes free): a few seconds, jittered so that the waiting
/// objects of one target do not all come back at once.
pub(crate) fn busy_retry() -> Duration {
    let (low, high) = BUSY_RETRY;
    rand::thread_rng().gen_range(low..high)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};

    fn no_wake() -> Wake {
        Box::new(|| {})
    }

    #[test]
    fn a_target_holds_at_most_its_share_and_others_are_unaffected() {
        let slots = TargetSlots::new(2);
        let a1 = slots.try_take("kubeconfig:ns/tarpit", "a1", no_wake());
        let a2 = slots.try_take("kubeconfig:ns/tarpit", "a2", no_wake());
        assert!(a1.is_some() && a2.is_some());
        assert!(
            slots
                .try_take("kubeconfig:ns/tarpit", "a3", no_wake())
                .is_none(),
            "share taken"
        );
        assert!(
            slots
                .try_take("kubeconfig:ns/other", "b1", no_wake())
                .is_some(),
            "another target"
        );
        drop(a1);
        assert!(
            slots
                .try_take("kubeconfig:ns/tarpit", "a3", no_wake())
                .is_some(),
            "given back"
        );
        let retry = busy_retry();
        assert!((BUSY_RETRY.0..BUSY_RETRY.1).contains(&retry), "{retry:?}");
    }

    /// A slot given back wakes the first object queued behind its target, each queued object
    /// once however often it asked, in the order they asked; the woken one takes the slot.
    #[test]
    fn a_slot_given_back_wakes_the_first_object_waiting_for_it() {
        let slots = TargetSlots::new(1);
        let woken = Arc::new(Mutex::new(Vec::new()));
        let wake = |key: &'static str| -> Wake {
            let woken = woken.clone();
            Box::new(move || lock(&woken).push(key))
        };
        let held = slots.try_take("omni", "c0", wake("c0"));
        assert!(held.is_some());
        for key in ["c1", "c2", "c1"] {
            assert!(slots.try_take("omni", key, wake(key)).is_none());
        }
        assert!(
            lock(&woken).is_empty(),
            "nobody is woken while the slot is held"
        );
        drop(held);
        assert_eq!(*lock(&woken), ["c1"]);
        let c1 = slots.try_take("omni", "c1", wake("c1"));
        assert!(c1.is_some(), "the woken object takes the slot");
        drop(c1);
        assert_eq!(*lock(&woken), ["c1", "c2"], "c1 was queued once");
        let c2 = slots.try_take("omni", "c2", wake("c2"));
        drop(c2);
        assert_eq!(*lock(&woken), ["c1", "c2"], "the queue is empty");
    }

    /// Targets nobody works on are forgotten, but not while objects wait behind them.
    #[test]
    fn a_target_with_waiting_objects_is_kept() {
        let slots = TargetSlots::new(1);
        let woken = Arc::new(AtomicUsize::new(0));
        let counting = || -> Wake {
            let counter = woken.clone();
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            })
        };
        let held = slots.try_take("busy", "a", no_wake());
        assert!(slots.try_take("busy", "b", counting()).is_none());
        assert!(slots.try_take("busy", "c", counting()).is_none());
        drop(held);
        assert_eq!(woken.load(Ordering::SeqCst), 1, "b is woken");
        // No slot of "busy" is held now, but c still waits behind it.
        for i in 0..100 {
            drop(slots.try_take(&format!("idle-{i}"), "x", no_wake()));
        }
        drop(slots.try_take("busy", "b", no_wake()));
        assert_eq!(woken.load(Ordering::SeqCst), 2, "c is woken");
    }
}
