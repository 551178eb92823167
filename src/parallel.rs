//! Running independent pieces of one large pass on a few threads: a list of items, one function
//! applied to each, the results handed back in the order given. Used where a pass over thousands
//! of independent items (policy files read and parsed, policies resolved) would otherwise leave a
//! core idle while the agent has nothing else to do.
//!
//! Plain scoped threads (`std::thread::scope`), started for the pass and joined at its end, taking
//! items from one shared queue; a thread with nothing to do sleeps on a condition variable. No
//! thread is pinned to a CPU and none spins: the agent runs beside its users' workloads, often in
//! a CPU cgroup, and leaves placement to the kernel. (rayon's workers yield in a loop before they
//! sleep and live for the whole process; a pass here is rare and large, so starting its threads
//! costs nothing that matters.)

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

/// At most this many threads work at once (the calling thread included).
pub const MAX_THREADS: usize = 4;

/// How many threads a large pass may use here: the machine's parallelism (on Linux, within the
/// cgroup's CPU limit, which this reads), at most [`MAX_THREADS`]. Asked by the edges (sources,
/// actors), which hand the answer to pure code.
pub fn available_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_THREADS)
}

/// The value under `mutex`, even if a thread panicked while holding it: every change made under
/// these locks is one step, so the value is consistent, and the panic itself reaches the caller.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts up to `count` threads in `scope`, each running `body`. A thread that cannot be created
/// (a pids limit) is done without: the threads started, the calling thread among them, take its
/// share from the queue.
fn start_helpers<'scope, 'env, R: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    count: usize,
    body: &'env (impl Fn() -> R + Sync),
) -> Vec<std::thread::ScopedJoinHandle<'scope, R>> {
    (0..count)
        .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, body).ok())
        .collect()
}

/// `work` applied to every item on up to `threads` threads (the calling thread one of them; 1
/// or 0: on the calling thread alone); the results in the order of `items`. Each thread takes
/// the next item as it finishes one, so one large item does not leave the others idle behind a
/// fixed share. A panic in `work` reaches the caller, as it would serially.
pub fn map_on_threads<T, R>(items: Vec<T>, threads: usize, work: impl Fn(T) -> R + Sync) -> Vec<R>
where
    T: Send,
    R: Send,
{
    let threads = threads.min(MAX_THREADS).min(items.len());
    if threads <= 1 {
        return items.into_iter().map(work).collect();
    }
    let count = items.len();
    let queue = Mutex::new(items.into_iter().enumerate());
    let drain = || {
        let mut done = Vec::new();
        loop {
            // The lock is released before the work (a `while let` would hold it throughout).
            let next = lock(&queue).next();
            let Some((at, item)) = next else { break };
            done.push((at, work(item)));
        }
        done
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(count).collect();
    std::thread::scope(|scope| {
        let helpers = start_helpers(scope, threads - 1, &drain);
        let mut all = drain();
        for helper in helpers {
            match helper.join() {
                Ok(done) => all.extend(done),
                // The same panic a serial pass would have raised.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        for (at, result) in all {
            slots[at] = Some(result);
        }
    });
    debug_assert!(slots.iter().all(Option::is_some), "every item done once");
    slots.into_iter().flatten().collect()
}

/// `work` applied to every item on up to `threads` threads (the calling thread one of them),
/// each result handed to `consume` on the calling thread, in the order of `items`, as soon as it
/// and every result before it are done: the calling thread consumes one result while the other
/// threads work on the next ones. Besides the result being consumed, at most `window` items are
/// being worked on or waiting to be consumed at once (memory for `window` + 1 results, however
/// many items). While the next result is not done, the calling thread works on an item too (if
/// the window has room), else it sleeps until a result or room comes. With one thread (or one
/// item), each item is worked and consumed in turn on the calling thread. A panic in `work` or
/// `consume` reaches the caller, as it would serially, once the other threads have stopped.
pub fn for_each_ordered<T, R>(
    items: Vec<T>,
    threads: usize,
    window: usize,
    work: impl Fn(T) -> R + Sync,
    mut consume: impl FnMut(usize, R),
) where
    T: Send,
    R: Send,
{
    let threads = threads.min(MAX_THREADS).min(items.len());
    if threads <= 1 {
        for (at, item) in items.into_iter().enumerate() {
            consume(at, work(item));
        }
        return;
    }
    let total = items.len();
    let shared = Pipeline {
        state: Mutex::new(PipelineState {
            items: items.into_iter().enumerate(),
            claimed: 0,
            consumed: 0,
            done: BTreeMap::new(),
            stopped: false,
            waiting: 0,
        }),
        changed: Condvar::new(),
        window: window.max(1),
    };
    let help = || {
        // A helper that panics stops the others (the calling thread then raises its panic).
        let _stop = StopOnDrop {
            pipeline: &shared,
            only_when_panicking: true,
        };
        while let Some((at, item)) = shared.claim() {
            let result = work(item);
            shared.finish(at, result);
        }
    };
    std::thread::scope(|scope| {
        // Whichever way the calling thread leaves (a panic in `work` or `consume` included), the
        // helpers stop: none waits for room in the window forever.
        let _stop = StopOnDrop {
            pipeline: &shared,
            only_when_panicking: false,
        };
        let helpers = start_helpers(scope, threads - 1, &help);
        let mut consumed = 0;
        while consumed < total {
            match shared.next_step(consumed) {
                Step::Consume(result) => {
                    consume(consumed, result);
                    consumed += 1;
                }
                Step::Work(at, item) => {
                    let result = work(item);
                    shared.finish(at, result);
                }
                // A helper panicked: its panic is raised below.
                Step::Stopped => break,
            }
        }
        for helper in helpers {
            if let Err(panic) = helper.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// The state [`for_each_ordered`]'s threads share.
struct Pipeline<I, R> {
    state: Mutex<PipelineState<I, R>>,
    /// Notified when a result is done, the window moves or the pipeline stops.
    changed: Condvar,
    /// At most this many items claimed and not consumed.
    window: usize,
}

/// What the threads of [`for_each_ordered`] share under the lock.
struct PipelineState<I, R> {
    /// The items not claimed yet, with their positions.
    items: I,
    /// How many items were claimed (by any thread).
    claimed: usize,
    /// How many results the calling thread has taken.
    consumed: usize,
    /// Results done and not taken yet, by position.
    done: BTreeMap<usize, R>,
    /// The calling thread is finished (or a thread panicked): claim nothing more.
    stopped: bool,
    /// Threads asleep on the condition variable: a wake-up is a system call, paid only when
    /// someone sleeps.
    waiting: usize,
}

/// What the calling thread of [`for_each_ordered`] does next.
enum Step<T, R> {
    /// Hand the next result, in order, to the consumer.
    Consume(R),
    /// Work on this item (at this position) while the next result is not done.
    Work(usize, T),
    /// A helper panicked: stop.
    Stopped,
}

impl<I, R> Pipeline<I, R> {
    /// No more items are claimed; every sleeping thread is woken to see it.
    fn stop(&self) {
        lock(&self.state).stopped = true;
        self.changed.notify_all();
    }

    /// Sleeps until another thread changes the state, and returns with the lock held again.
    fn wait<'a>(
        &'a self,
        mut state: MutexGuard<'a, PipelineState<I, R>>,
    ) -> MutexGuard<'a, PipelineState<I, R>> {
        state.waiting += 1;
        let mut state = self
            .changed
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.waiting -= 1;
        state
    }

    /// Wakes the sleeping threads, if any, after a change made under `state`.
    fn wake(&self, state: MutexGuard<'_, PipelineState<I, R>>) {
        let anyone = state.waiting > 0;
        drop(state);
        if anyone {
            self.changed.notify_all();
        }
    }
}

impl<T, R, I: Iterator<Item = (usize, T)>> Pipeline<I, R> {
    /// For a helper: the next item to work on, once the window has room for it; `None` when
    /// none is left or the pipeline stopped.
    fn claim(&self) -> Option<(usize, T)> {
        let mut state = lock(&self.state);
        loop {
            if state.stopped {
                return None;
            }
            if state.claimed < state.consumed + self.window {
                let next = state.items.next()?;
                state.claimed += 1;
                return Some(next);
            }
            state = self.wait(state);
        }
    }

    /// The result of the item at `at`, for the calling thread to take in turn.
    fn finish(&self, at: usize, result: R) {
        let mut state = lock(&self.state);
        state.done.insert(at, result);
        self.wake(state);
    }

    /// For the calling thread, which has taken `consumed` results: the next result if it is
    /// done, else an item to work on meanwhile (if the window has room), else it sleeps.
    fn next_step(&self, consumed: usize) -> Step<T, R> {
        let mut state = lock(&self.state);
        loop {
            if let Some(result) = state.done.remove(&consumed) {
                state.consumed = consumed + 1;
                // The window moved: a helper waiting for room may go on.
                self.wake(state);
                return Step::Consume(result);
            }
            if state.stopped {
                return Step::Stopped;
            }
            if state.claimed < state.consumed + self.window {
                if let Some((at, item)) = state.items.next() {
                    state.claimed += 1;
                    return Step::Work(at, item);
                }
            }
            state = self.wait(state);
        }
    }
}

/// Stops the pipeline when dropped (only when its thread unwinds from a panic, if
/// `only_when_panicking`), so that no thread waits for a result or for room that never comes.
struct StopOnDrop<'a, I, R> {
    pipeline: &'a Pipeline<I, R>,
    only_when_panicking: bool,
}

impl<I, R> Drop for StopOnDrop<'_, I, R> {
    fn drop(&mut self) {
        if !self.only_when_panicking || std::thread::panicking() {
            self.pipeline.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_is_the_calling_thread() {
        let caller = std::thread::current().id();
        for threads in [0, 1] {
            let used = map_on_threads(vec![1usize, 2, 3], threads, |_| std::thread::current().id());
            assert!(used.iter().all(|t| *t == caller));
        }
    }

    #[test]
    fn results_keep_the_order_given() {
        let out = map_on_threads((0..500).collect(), 4, |i: usize| {
            // Uneven work, so the threads finish out of order.
            if i.is_multiple_of(7) {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            i * 2
        });
        assert_eq!(out, (0..500).map(|i| i * 2).collect::<Vec<_>>());
    }

    /// Uneven work, so the threads finish out of order.
    fn uneven(i: usize) -> usize {
        if i.is_multiple_of(7) {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        i * 2
    }

    #[test]
    fn ordered_results_are_consumed_in_order_on_the_calling_thread() {
        let caller = std::thread::current().id();
        for threads in [0, 1, 2, 4] {
            for window in [1, 3, 64, 1000] {
                let mut seen = Vec::new();
                for_each_ordered((0..500).collect(), threads, window, uneven, |at, r| {
                    assert_eq!(std::thread::current().id(), caller);
                    seen.push((at, r));
                });
                let want: Vec<(usize, usize)> = (0..500).map(|i| (i, i * 2)).collect();
                assert_eq!(seen, want, "{threads} threads, window {window}");
            }
        }
    }

    #[test]
    fn no_more_than_the_window_is_in_flight() {
        let window = 8;
        let started = std::sync::atomic::AtomicUsize::new(0);
        let mut most_ahead = 0;
        let mut consumed = 0;
        for_each_ordered(
            (0..400).collect::<Vec<usize>>(),
            4,
            window,
            |i| {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                uneven(i)
            },
            |_, _| {
                // Started and not consumed before this one.
                let ahead = started.load(std::sync::atomic::Ordering::SeqCst) - consumed - 1;
                most_ahead = most_ahead.max(ahead);
                consumed += 1;
            },
        );
        assert!(
            most_ahead <= window,
            "{most_ahead} items in flight, window {window}"
        );
    }

    #[test]
    fn ordered_work_uses_the_other_thread() {
        let caller = std::thread::current().id();
        let mut others = 0;
        for_each_ordered(
            (0..64).collect::<Vec<usize>>(),
            2,
            16,
            |i| {
                // Long enough for a second thread to start and take some.
                std::thread::sleep(std::time::Duration::from_millis(if i == 0 { 50 } else { 1 }));
                std::thread::current().id()
            },
            |_, id| others += usize::from(id != caller),
        );
        // A second thread was started (on one core too): while one item sleeps, it takes others.
        assert!(others > 0, "no item on the other thread");
    }

    /// The message of a panic payload.
    fn message(panic: &(dyn std::any::Any + Send)) -> String {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    #[test]
    fn a_helpers_panic_reaches_the_caller_as_it_was() {
        let caller = std::thread::current().id();
        let panic = std::panic::catch_unwind(|| {
            for_each_ordered(
                (0..200).collect::<Vec<usize>>(),
                2,
                4,
                |i| {
                    // The calling thread is slow, so the helper surely takes an item.
                    if std::thread::current().id() == caller {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        i
                    } else {
                        panic!("helper failed on {i}")
                    }
                },
                |_, _| {},
            );
        })
        .expect_err("the helper's panic");
        assert!(
            message(&*panic).starts_with("helper failed on"),
            "{:?}",
            message(&*panic)
        );
    }

    #[test]
    fn a_panic_in_mapped_work_reaches_the_caller_as_it_was() {
        let caller = std::thread::current().id();
        let panic = std::panic::catch_unwind(|| {
            map_on_threads((0..200).collect(), 2, |i: usize| {
                // The calling thread is slow, so the helper surely takes an item.
                if std::thread::current().id() == caller {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    i
                } else {
                    panic!("helper failed on {i}")
                }
            })
        })
        .expect_err("the helper's panic");
        assert!(
            message(&*panic).starts_with("helper failed on"),
            "{:?}",
            message(&*panic)
        );
    }

    #[test]
    fn a_panic_in_ordered_work_or_consume_reaches_the_caller() {
        for threads in [1, 2, 4] {
            let in_work = std::panic::catch_unwind(|| {
                for_each_ordered(
                    (0..200).collect::<Vec<usize>>(),
                    threads,
                    4,
                    |i| {
                        assert!(i != 57, "work {i} failed");
                        i
                    },
                    |_, _| {},
                );
            });
            assert!(in_work.is_err(), "{threads} threads");
            let in_consume = std::panic::catch_unwind(|| {
                for_each_ordered((0..200).collect::<Vec<usize>>(), threads, 4, uneven, |at, _| {
                    assert!(at != 33, "consume {at} failed")
                });
            });
            assert!(in_consume.is_err(), "{threads} threads");
        }
    }
}
