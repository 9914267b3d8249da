//! Each target's share of the reconcile slots.
//!
//! A controller runs at most `--max-concurrent-reconciles` reconciles at once. Objects that
//! point at one server which accepts connections and never answers (a tarpit) each hold a slot
//! until their requests time out; hundreds of them held every slot, and every other tenant's
//! objects waited. So the objects of one kind and one target (a kubeconfig Secret, an
//! OmniCluster, an OmniConnection: what a pass talks to) may hold only so many of that kind's
//! slots at once: the target's window. A pass that finds its target's window full does nothing
//! (no read, no write) and holds no slot: it queues behind the target, and the slot given back
//! next wakes the first object in the queue. A waiting object also comes back by itself a few
//! seconds later, in case its place in the queue went with a target nobody works on any more.
//!
//! The window starts at `--max-reconciles-per-target` (the share) and follows how the target's
//! passes end, the way a TCP sender follows its acknowledgements: every pass that ends within
//! [`SLOW_PASS`] widens it by one, up to [`CEILING_FACTOR`] times the share; every slower pass
//! halves it, never below the share. A tarpit's passes never end quickly, so its objects hold
//! the share and no more, and move as slowly as its own passes while nobody else waits for them.
//! A target that answers quickly (a fleet of 1,000 clusters on one OmniConnection) soon gets
//! as many slots as its work can use: a fixed share of 32 made such a fleet's cold start wait
//! for its own bound. Should a quick target turn into a tarpit, it holds at most its ceiling
//! until its passes time out, and the first of them to end slowly halves its window.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::Rng;

/// Default of `--max-reconciles-per-target`: an eighth of the default reconcile slots.
pub const DEFAULT_PER_TARGET: u16 = 32;

/// How far a target whose passes end quickly may widen its window, in shares: with the default
/// share, half of a controller's default slots.
const CEILING_FACTOR: usize = 4;

/// A pass that takes longer than this narrows its target's window; a quicker one widens it.
/// Well above a pass against a busy but answering server, well below any request timeout.
pub(crate) const SLOW_PASS: Duration = Duration::from_secs(5);

/// Bounds of the wait before a pass whose target's window was full tries again by itself.
const BUSY_RETRY: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(8));

/// How a waiting object is reconciled again: it sends the object to its controller.
pub(crate) type Wake = Box<dyn FnOnce() + Send>;

/// Every target's slots in use, and the objects queued behind each.
#[derive(Debug)]
pub(crate) struct TargetSlots {
    share: usize,
    held: Mutex<HashMap<String, Arc<Target>>>,
}

/// One target: its window, the passes it runs, and the objects waiting for a slot (each once,
/// first come first woken).
#[derive(Debug)]
struct Target {
    share: usize,
    state: Mutex<TargetState>,
}

#[derive(Default)]
struct TargetState {
    window: usize,
    running: usize,
    queue: VecDeque<(String, Wake)>,
    /// Objects woken for a slot that have not asked again yet. One that finds the slot taken
    /// meanwhile (by an object whose own retry came first) goes back to the head of the
    /// queue, not to its end: it keeps its turn.
    woken: HashSet<String>,
}

impl std::fmt::Debug for TargetState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetState")
            .field("window", &self.window)
            .field("running", &self.running)
            .field(
                "queue",
                &self.queue.iter().map(|(key, _)| key).collect::<Vec<_>>(),
            )
            .field("woken", &self.woken)
            .finish()
    }
}

impl Target {
    fn state(&self) -> MutexGuard<'_, TargetState> {
        lock(&self.state)
    }

    fn is_idle(&self) -> bool {
        let state = self.state();
        state.running == 0 && state.queue.is_empty()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A slot of a target's window. Dropping it gives the slot back, moves the window by how long
/// the pass took, and wakes as many objects queued behind the target as the window now has
/// room for.
#[derive(Debug)]
pub(crate) struct TargetSlot {
    target: Arc<Target>,
    taken: Instant,
}

impl Drop for TargetSlot {
    fn drop(&mut self) {
        let share = self.target.share;
        let woken: Vec<Wake> = {
            let mut guard = self.target.state();
            let state = &mut *guard;
            state.running = state.running.saturating_sub(1);
            state.window = if self.taken.elapsed() <= SLOW_PASS {
                (state.window + 1).min(share * CEILING_FACTOR)
            } else {
                (state.window / 2).max(share)
            };
            let room = state.window.saturating_sub(state.running);
            let n = room.min(state.queue.len());
            state
                .queue
                .drain(..n)
                .map(|(key, wake)| {
                    state.woken.insert(key);
                    wake
                })
                .collect()
        };
        // Outside the lock: a wake sends to the controller, which may take a slot at once.
        for wake in woken {
            wake();
        }
    }
}

impl TargetSlots {
    /// Slots of which one target may hold `share` at once, more while its passes end quickly.
    pub(crate) fn new(share: u16) -> Self {
        Self {
            share: usize::from(share.max(1)),
            held: Mutex::default(),
        }
    }

    /// A slot for `target`, or `None` while the target's window is full: then the object
    /// (`key()`) is queued behind the target (once, however often it asks) and `wake()` is
    /// called when a slot of the target is given back. `key` and `wake` are only built when
    /// needed: most passes find a free slot and an empty queue.
    pub(crate) fn try_take(
        &self,
        target: &str,
        key: impl FnOnce() -> String,
        wake: impl FnOnce() -> Wake,
    ) -> Option<TargetSlot> {
        let target = {
            let mut held = lock(&self.held);
            // Targets nobody works on or waits for are forgotten, so the table stays as small
            // as the work.
            if held.len() > 64 {
                held.retain(|_, t| Arc::strong_count(t) > 1 || !t.is_idle());
            }
            match held.get(target) {
                Some(t) => t.clone(),
                None => {
                    let t = Arc::new(Target {
                        share: self.share,
                        state: Mutex::new(TargetState {
                            window: self.share,
                            ..TargetState::default()
                        }),
                    });
                    held.insert(target.to_owned(), t.clone());
                    t
                }
            }
        };
        let mut state = target.state();
        if state.running < state.window {
            state.running += 1;
            if !state.queue.is_empty() || !state.woken.is_empty() {
                let key = key();
                state.queue.retain(|(waiting, _)| *waiting != key);
                state.woken.remove(&key);
            }
            drop(state);
            Some(TargetSlot {
                target,
                taken: Instant::now(),
            })
        } else {
            let key = key();
            if state.woken.remove(&key) {
                state.queue.push_front((key, wake()));
            } else if !state.queue.iter().any(|(waiting, _)| *waiting == key) {
                state.queue.push_back((key, wake()));
            }
            None
        }
    }
}

/// How long a pass whose target's window was full waits before it tries again by itself (it
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

    fn take(slots: &TargetSlots, target: &str, key: &str) -> Option<TargetSlot> {
        slots.try_take(target, || key.to_owned(), no_wake)
    }

    impl TargetSlot {
        /// As if the pass had run for `by` already.
        fn backdate(mut self, by: Duration) -> Self {
            self.taken -= by;
            self
        }
    }

    fn window(slots: &TargetSlots, target: &str) -> usize {
        lock(&slots.held)[target].state().window
    }

    /// Asks for a slot of target `omni` as `key`, whose wake records `key` in `woken`.
    fn ask(
        slots: &TargetSlots,
        woken: &Arc<Mutex<Vec<&'static str>>>,
        key: &'static str,
    ) -> Option<TargetSlot> {
        let woken = woken.clone();
        slots.try_take(
            "omni",
            || key.to_owned(),
            move || -> Wake { Box::new(move || lock(&woken).push(key)) },
        )
    }

    /// Gives `slot` back after a slow pass, so that the window does not widen.
    fn give_back_slowly(slot: Option<TargetSlot>) {
        drop(slot.map(|s| s.backdate(SLOW_PASS * 2)));
    }

    #[test]
    fn a_target_holds_at_most_its_share_and_others_are_unaffected() {
        let slots = TargetSlots::new(2);
        let a1 = take(&slots, "kubeconfig:ns/tarpit", "a1");
        let a2 = take(&slots, "kubeconfig:ns/tarpit", "a2");
        assert!(a1.is_some() && a2.is_some());
        assert!(
            take(&slots, "kubeconfig:ns/tarpit", "a3").is_none(),
            "share taken"
        );
        assert!(
            take(&slots, "kubeconfig:ns/other", "b1").is_some(),
            "another target"
        );
        give_back_slowly(a1);
        assert!(
            take(&slots, "kubeconfig:ns/tarpit", "a3").is_some(),
            "given back"
        );
        let retry = busy_retry();
        assert!((BUSY_RETRY.0..BUSY_RETRY.1).contains(&retry), "{retry:?}");
    }

    /// Quick passes widen a target's window one slot each, up to its ceiling; a slow pass
    /// halves it, never below the share; a target whose passes all hang keeps its share.
    #[test]
    fn quick_passes_widen_a_window_and_slow_ones_narrow_it() {
        let slots = TargetSlots::new(2);
        for i in 0..20 {
            drop(take(&slots, "omni", &format!("c{i}")));
        }
        assert_eq!(window(&slots, "omni"), 2 * CEILING_FACTOR, "ceiling");
        let held: Vec<_> = (0..2 * CEILING_FACTOR)
            .map(|i| take(&slots, "omni", &format!("h{i}")))
            .collect();
        assert!(
            held.iter().all(Option::is_some),
            "the widened window is usable"
        );
        assert!(take(&slots, "omni", "over").is_none(), "and bounded");
        let mut held = held.into_iter().flatten();
        give_back_slowly(held.next());
        assert_eq!(window(&slots, "omni"), CEILING_FACTOR, "halved");
        for slow in held {
            drop(slow.backdate(SLOW_PASS * 2));
        }
        assert_eq!(window(&slots, "omni"), 2, "never below the share");

        // A tarpit: its first passes hang, so nothing widens its window.
        let hanging: Vec<_> = (0..2)
            .map(|i| take(&slots, "tarpit", &format!("t{i}")))
            .collect();
        for i in 2..50 {
            assert!(take(&slots, "tarpit", &format!("t{i}")).is_none());
        }
        assert_eq!(window(&slots, "tarpit"), 2);
        drop(hanging);
    }

    /// A slot given back wakes the first object queued behind its target, each queued object
    /// once however often it asked, in the order they asked; the woken one takes the slot.
    #[test]
    fn a_slot_given_back_wakes_the_first_object_waiting_for_it() {
        let slots = TargetSlots::new(1);
        let woken = Arc::new(Mutex::new(Vec::new()));
        // Slow passes throughout, so that the window stays at one slot.
        let ask = |key| ask(&slots, &woken, key);
        let slow = give_back_slowly;
        let held = ask("c0");
        assert!(held.is_some());
        for key in ["c1", "c2", "c1"] {
            assert!(ask(key).is_none());
        }
        assert!(
            lock(&woken).is_empty(),
            "nobody is woken while the slot is held"
        );
        slow(held);
        assert_eq!(*lock(&woken), ["c1"]);
        let c1 = ask("c1");
        assert!(c1.is_some(), "the woken object takes the slot");
        slow(c1);
        assert_eq!(*lock(&woken), ["c1", "c2"], "c1 was queued once");
        let c2 = ask("c2");
        slow(c2);
        assert_eq!(*lock(&woken), ["c1", "c2"], "the queue is empty");
    }

    /// A woken object that finds its slot taken by another object's own retry keeps its turn:
    /// it is the next one woken. Before, it queued again behind everybody.
    #[test]
    fn a_woken_object_beaten_to_the_slot_keeps_its_turn() {
        let slots = TargetSlots::new(1);
        let woken = Arc::new(Mutex::new(Vec::new()));
        let ask = |key| ask(&slots, &woken, key);
        let slow = give_back_slowly;
        let held = ask("first");
        for key in ["a", "b"] {
            assert!(ask(key).is_none());
        }
        slow(held);
        assert_eq!(*lock(&woken), ["a"]);
        // Before `a` is back, `c` (queued nowhere, its own retry due) takes the slot.
        let c = ask("c");
        assert!(c.is_some());
        assert!(ask("a").is_none(), "the slot is taken");
        slow(c);
        assert_eq!(*lock(&woken), ["a", "a"], "a is woken again before b");
        slow(ask("a"));
        assert_eq!(*lock(&woken), ["a", "a", "b"]);
    }

    /// A window widened by a quick pass wakes as many waiting objects as it has room for.
    #[test]
    fn a_widened_window_wakes_as_many_as_it_has_room_for() {
        let slots = TargetSlots::new(1);
        let woken = Arc::new(AtomicUsize::new(0));
        let held = take(&slots, "omni", "a");
        for key in ["b", "c", "d"] {
            let counter = woken.clone();
            let asked = slots.try_take(
                "omni",
                || key.to_owned(),
                move || -> Wake {
                    Box::new(move || {
                        counter.fetch_add(1, Ordering::SeqCst);
                    })
                },
            );
            assert!(asked.is_none());
        }
        drop(held);
        assert_eq!(window(&slots, "omni"), 2);
        assert_eq!(woken.load(Ordering::SeqCst), 2, "two free slots, two woken");
    }

    /// Targets nobody works on are forgotten, but not while objects wait behind them.
    #[test]
    fn a_target_with_waiting_objects_is_kept() {
        let slots = TargetSlots::new(1);
        let woken = Arc::new(AtomicUsize::new(0));
        let counting = |key: &'static str| {
            let counter = woken.clone();
            slots.try_take(
                "busy",
                || key.to_owned(),
                move || -> Wake {
                    Box::new(move || {
                        counter.fetch_add(1, Ordering::SeqCst);
                    })
                },
            )
        };
        let held = take(&slots, "busy", "a");
        assert!(counting("b").is_none());
        assert!(counting("c").is_none());
        give_back_slowly(held);
        assert_eq!(woken.load(Ordering::SeqCst), 1, "b is woken");
        // No slot of "busy" is held now, but c still waits behind it.
        for i in 0..100 {
            drop(take(&slots, &format!("idle-{i}"), "x"));
        }
        give_back_slowly(take(&slots, "busy", "b"));
        assert_eq!(woken.load(Ordering::SeqCst), 2, "c is woken");
    }
}
