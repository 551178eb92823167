//! Running independent pieces of one large pass on the machine's spare cores: a list of items,
//! one function applied to each, the results handed back in the order given. Used where a pass
//! over thousands of independent items (policy files read and parsed, policies resolved) would
//! otherwise leave a core idle while the agent has nothing else to do. While a pass runs, its
//! threads are kept on different CPUs ([`SpreadPass`]): a kernel that packs threads onto few
//! vCPUs would otherwise run them one after the other.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Mutex;

use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use tracing::warn;

/// How long a thread of [`for_each_ordered`] watches for the change it waits for before it
/// sleeps ([`Pipeline::wait`]).
const SPIN_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_micros(50);

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

/// `work` applied to every item on up to `threads` threads (the calling thread one of them; 1
/// or 0: on the calling thread alone); the results in the order of `items`. Each thread takes
/// the next item as it finishes one, so one large item does not leave the others idle behind a
/// fixed share. A thread that cannot be created (a pids limit) is done without: the calling
/// thread does its share. A panic in `work` reaches the caller, as it would serially.
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
    let next_item = || {
        queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .next()
    };
    let drain = || {
        let mut done = Vec::new();
        while let Some((at, item)) = next_item() {
            done.push((at, work(item)));
        }
        done
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(count).collect();
    let spread = SpreadPass::begin();
    std::thread::scope(|scope| {
        let helpers = start_helpers(scope, threads - 1, spread.as_ref(), &drain);
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
/// threads work on the next ones, instead of every thread waiting for the slowest of a batch and
/// the others idling while the caller consumes. Besides the result being consumed, at most
/// `window` items are being worked on or waiting to be consumed at once (memory for `window` + 1
/// results, however many items), and the threads are started once. With one thread (or one
/// item), each item is worked and consumed in turn on the calling thread; a thread that cannot be
/// created (a pids limit) is done without. A panic in `work` or `consume` reaches the caller, as
/// it would serially, once the other threads have stopped.
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
    let window = window.max(1);
    let spread = SpreadPass::begin();
    let shared = Pipeline {
        state: Mutex::new(PipelineState {
            items: items.into_iter().enumerate(),
            claimed: 0,
            consumed: 0,
            done: std::collections::BTreeMap::new(),
            stopped: false,
            waiting: 0,
        }),
        changed: std::sync::Condvar::new(),
        changes: AtomicU64::new(0),
        // Only where the threads run on different CPUs: spinning on a shared CPU (or within a
        // cgroup's CPU quota) would take the time the awaited thread needs.
        spin: if spread.is_some() {
            SPIN_BEFORE_SLEEP
        } else {
            std::time::Duration::ZERO
        },
    };
    let help = || {
        // A helper that runs out of items leaves the others to finish theirs.
        let _stop = StopOnDrop {
            pipeline: &shared,
            only_when_panicking: true,
        };
        while let Some((at, item)) = shared.claim(window) {
            let result = work(item);
            shared.finish(at, result);
        }
    };
    std::thread::scope(|scope| {
        // Whatever way the calling thread leaves (a panic in `work` or `consume` included), the
        // helpers stop: none waits for room in the window forever.
        let _stop = StopOnDrop {
            pipeline: &shared,
            only_when_panicking: false,
        };
        let helpers = start_helpers(scope, threads - 1, spread.as_ref(), &help);
        let mut consumed = 0;
        while consumed < total {
            match shared.next_step(consumed, window) {
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
        // Every item consumed: a helper waiting for room was woken by the last consume and
        // finds none left (the guard stops them all whichever way this thread leaves).
        for helper in helpers {
            if let Err(panic) = helper.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// Starts up to `count` helper threads in `scope` running `body` (a thread that cannot be
/// created is done without), each first moved off the calling thread's CPU, and then holds the
/// calling thread on its own ([`SpreadPass`]) once a helper runs.
fn start_helpers<'scope, 'env, R: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    count: usize,
    spread: Option<&'env SpreadPass>,
    body: &'env (impl Fn() -> R + Sync),
) -> Vec<std::thread::ScopedJoinHandle<'scope, R>> {
    let helpers: Vec<_> = (0..count)
        .filter_map(|_| {
            std::thread::Builder::new()
                .spawn_scoped(scope, move || {
                    if let Some(spread) = spread {
                        spread.place_helper();
                    }
                    body()
                })
                .ok()
        })
        .collect();
    if let (Some(spread), false) = (spread, helpers.is_empty()) {
        spread.hold_caller();
    }
    helpers
}

/// One pass's threads kept on different CPUs while it runs: the calling thread stays on the CPU
/// it runs on, its helpers run on any other it may use. Why: some hypervisors' guest kernels
/// pack threads onto as few vCPUs as they can, to keep the others halted. On the 2-vCPU lab
/// machine, the scheduler's traces showed a new helper placed on its caller's vCPU and left
/// there, and a caller moved onto its helper's, each time for the whole of a 10 to 30 ms pass
/// while the other vCPU idled: the pass took as long as on one thread. A kernel that spreads
/// threads anyway places them the same way. Within the CPUs the thread may use (a `taskset`,
/// a cpuset); the calling thread gets its CPUs back when the pass ends, however it ends: every
/// CPU (as if it had never been held) when it could use every CPU online, so a CPU added later
/// or a cpuset widened later still reaches it; else the set it had. Without two CPUs to use, or
/// if the kernel refuses to hold it (a seccomp filter, a cpuset changed meanwhile), the threads
/// run wherever the kernel puts them, as before. A thread the calling thread starts during the
/// pass would inherit its one CPU: `work` and `consume` start none.
struct SpreadPass {
    /// The CPU the calling thread keeps.
    caller_cpu: usize,
    /// The CPUs the calling thread could use before the pass.
    allowed: CpuSet,
    /// Whether the calling thread is held on its CPU: only then is anything given back.
    held: AtomicBool,
}

impl SpreadPass {
    /// For the calling thread, before it starts its helpers.
    fn begin() -> Option<Self> {
        let caller_cpu = sched_getcpu().ok()?;
        let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
        let usable = |c: usize| allowed.is_set(c).unwrap_or(false);
        let elsewhere = (0..CpuSet::count()).any(|c| c != caller_cpu && usable(c));
        (usable(caller_cpu) && elsewhere).then_some(Self {
            caller_cpu,
            allowed,
            held: AtomicBool::new(false),
        })
    }

    /// In a helper, first thing: off the calling thread's CPU.
    fn place_helper(&self) {
        let mut others = self.allowed;
        if others.unset(self.caller_cpu).is_ok() {
            let _ = sched_setaffinity(Pid::from_raw(0), &others);
        }
    }

    /// In the calling thread once its helpers are started: it stays on its CPU, and gives that
    /// CPU up once so a helper the kernel queued there runs and moves off at once, instead of
    /// waiting behind the caller for its time slice (4 to 5 ms in the lab's traces).
    fn hold_caller(&self) {
        let mut only = CpuSet::new();
        if only.set(self.caller_cpu).is_ok() && sched_setaffinity(Pid::from_raw(0), &only).is_ok() {
            self.held.store(true, AtomicOrdering::Relaxed);
        }
        std::thread::yield_now();
    }

    /// What the calling thread gets back: every CPU if it could use every CPU online (the
    /// kernel keeps it within its cpuset and the CPUs online), else its own set.
    fn to_restore(&self) -> CpuSet {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|list| cpu_list(&list));
        let unrestricted =
            online.is_some_and(|online| online.iter().all(|&c| self.allowed.is_set(c).unwrap_or(false)));
        if !unrestricted {
            return self.allowed;
        }
        let mut every = CpuSet::new();
        for c in 0..CpuSet::count() {
            let _ = every.set(c);
        }
        every
    }
}

impl Drop for SpreadPass {
    /// The calling thread's CPUs back.
    fn drop(&mut self) {
        if !self.held.load(AtomicOrdering::Relaxed) {
            return;
        }
        if let Err(e) = sched_setaffinity(Pid::from_raw(0), &self.to_restore()) {
            warn!(
                cpu = self.caller_cpu,
                "a thread that ran a parallel pass could not be given its CPUs back ({e}); it \
                 stays on one CPU"
            );
        }
    }
}

/// The CPUs of a kernel CPU list (`0-3,8,10-11`, as in `/sys/devices/system/cpu/online`);
/// `None` if it does not read as one.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (first, last): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let c = part.parse().ok()?;
                (c, c)
            }
        };
        if first > last || last >= CpuSet::count() {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

/// The state [`for_each_ordered`]'s threads share.
struct Pipeline<I, R> {
    state: Mutex<PipelineState<I, R>>,
    /// Notified when a result is done, the window moves or the pipeline stops.
    changed: std::sync::Condvar,
    /// Counts those changes (each made under the lock), so a thread about to wait can watch
    /// for one without the lock first ([`Pipeline::wait`]).
    changes: AtomicU64,
    /// How long a thread watches `changes` before it sleeps: [`SPIN_BEFORE_SLEEP`] while the
    /// pass's threads are held on different CPUs ([`SpreadPass`]), else none.
    spin: std::time::Duration,
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
    done: std::collections::BTreeMap<usize, R>,
    /// The calling thread is finished (or a thread panicked): claim nothing more.
    stopped: bool,
    /// Threads waiting on the condition variable: waking them costs a system call, paid only
    /// when one waits (not twice for every item).
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
    /// The shared state (a panic elsewhere left it consistent: every change is one step).
    fn lock(&self) -> std::sync::MutexGuard<'_, PipelineState<I, R>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// No more items are claimed; every waiting thread is woken to see it.
    fn stop(&self) {
        let mut state = self.lock();
        state.stopped = true;
        self.changes.fetch_add(1, AtomicOrdering::Release);
        drop(state);
        self.changed.notify_all();
    }

    /// Waits for a change (to return with the lock held again, for the caller to look again):
    /// first for up to `spin` ([`SPIN_BEFORE_SLEEP`]) without the lock and without sleeping, then on the
    /// condition variable, counted in `waiting` meanwhile. Why spin: what a thread waits for
    /// here (the next result, room in the window) usually comes within microseconds, while a
    /// sleep costs a system call on each side and, on a VM, the time for a halted vCPU to run
    /// the woken thread; the lab's traces showed a pass's two threads taking turns sleeping
    /// for 10 ms of a resolution that took 9 ms when they did not.
    fn wait<'a>(
        &'a self,
        state: std::sync::MutexGuard<'a, PipelineState<I, R>>,
    ) -> std::sync::MutexGuard<'a, PipelineState<I, R>> {
        // Read under the lock: every change is counted under it.
        let seen = self.changes.load(AtomicOrdering::Acquire);
        drop(state);
        let spinning = std::time::Instant::now();
        'spin: while !self.spin.is_zero() && spinning.elapsed() < self.spin {
            // The clock read once in a while: it may be a system call on some VMs.
            for _ in 0..64 {
                if self.changes.load(AtomicOrdering::Acquire) != seen {
                    break 'spin;
                }
                std::hint::spin_loop();
            }
        }
        let mut state = self.lock();
        if self.changes.load(AtomicOrdering::Acquire) != seen {
            return state;
        }
        // Nothing changed since `seen` (a change needs the lock this thread holds): whoever
        // changes something next sees this thread waiting and wakes it.
        state.waiting += 1;
        let mut state = self
            .changed
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.waiting -= 1;
        state
    }

    /// Wakes the waiting threads, if any (`waiting` read under the lock that made the change).
    fn wake_if_waiting(&self, state: std::sync::MutexGuard<'_, PipelineState<I, R>>) {
        let anyone = state.waiting > 0;
        drop(state);
        if anyone {
            self.changed.notify_all();
        }
    }
}

impl<T, R, I: Iterator<Item = (usize, T)>> Pipeline<I, R> {
    /// The next item to work on, once the window has room for it; `None` when none is left or
    /// the pipeline stopped.
    fn claim(&self, window: usize) -> Option<(usize, T)> {
        let mut state = self.lock();
        loop {
            if state.stopped {
                return None;
            }
            if state.claimed < state.consumed + window {
                let next = state.items.next()?;
                state.claimed += 1;
                return Some(next);
            }
            state = self.wait(state);
        }
    }

    /// The result of the item at `at`, for the calling thread to take in turn.
    fn finish(&self, at: usize, result: R) {
        let mut state = self.lock();
        state.done.insert(at, result);
        self.changes.fetch_add(1, AtomicOrdering::Release);
        self.wake_if_waiting(state);
    }

    /// For the calling thread, which has taken `consumed` results: the next result if it is
    /// done, else an item to work on meanwhile (if the window has room), else it waits.
    fn next_step(&self, consumed: usize, window: usize) -> Step<T, R> {
        let mut state = self.lock();
        loop {
            if let Some(result) = state.done.remove(&consumed) {
                state.consumed = consumed + 1;
                self.changes.fetch_add(1, AtomicOrdering::Release);
                // The window moved: a helper waiting for room may go on.
                self.wake_if_waiting(state);
                return Step::Consume(result);
            }
            if state.stopped {
                return Step::Stopped;
            }
            if state.claimed < state.consumed + window {
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

    /// The CPUs the current thread may use.
    fn own_cpus() -> Vec<usize> {
        let set = sched_getaffinity(Pid::from_raw(0)).expect("read the thread's affinity");
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect()
    }

    /// Where item `i` ran: on the calling thread or not, and the CPUs its thread could use.
    fn placement(caller: std::thread::ThreadId, i: usize) -> (bool, Vec<usize>) {
        // Long enough for the helper to start and take items.
        std::thread::sleep(std::time::Duration::from_micros(if i == 0 {
            50_000
        } else {
            300
        }));
        (std::thread::current().id() == caller, own_cpus())
    }

    /// Where the kernel lets a pass hold its threads apart (two CPUs or more, and the calls
    /// allowed): the calling thread ran on one CPU only, the helpers on every other one it could
    /// use and never on that one; elsewhere, nobody's CPUs changed.
    fn assert_spread(before: &[usize], placements: &[(bool, Vec<usize>)]) {
        let helpers: Vec<&Vec<usize>> = placements
            .iter()
            .filter(|(own, _)| !own)
            .map(|(_, c)| c)
            .collect();
        assert!(!helpers.is_empty(), "no item ran on a helper");
        // Whether this kernel lets a thread be held on its CPU (a seccomp filter may refuse).
        let can_hold = SpreadPass::begin().is_some_and(|probe| {
            probe.hold_caller();
            probe.held.load(AtomicOrdering::Relaxed)
        });
        if !can_hold {
            assert!(
                placements.iter().all(|(_, cpus)| cpus == before),
                "{placements:?}"
            );
            return;
        }
        let caller_sets: Vec<&Vec<usize>> = placements
            .iter()
            .filter(|(own, _)| *own)
            .map(|(_, c)| c)
            .collect();
        let held = caller_sets
            .first()
            .copied()
            .expect("the calling thread took items too");
        assert_eq!(held.len(), 1, "the calling thread held one CPU: {held:?}");
        assert!(caller_sets.iter().all(|c| *c == held), "{caller_sets:?}");
        let others: Vec<usize> = before.iter().copied().filter(|c| !held.contains(c)).collect();
        assert!(
            helpers.iter().all(|c| **c == others),
            "helpers {helpers:?}, expected {others:?}"
        );
    }

    #[test]
    fn a_pass_keeps_its_threads_on_different_cpus_and_gives_the_callers_back() {
        let before = own_cpus();
        let caller = std::thread::current().id();
        let placements = map_on_threads((0..100).collect(), 2, |i: usize| placement(caller, i));
        assert_spread(&before, &placements);
        assert_eq!(
            own_cpus(),
            before,
            "the calling thread's CPUs after map_on_threads"
        );

        let mut placements = Vec::new();
        for_each_ordered(
            (0..100).collect::<Vec<usize>>(),
            2,
            8,
            |i| placement(caller, i),
            |_, p| placements.push(p),
        );
        assert_spread(&before, &placements);
        assert_eq!(
            own_cpus(),
            before,
            "the calling thread's CPUs after for_each_ordered"
        );

        // However the pass ends.
        let failed = std::panic::catch_unwind(|| {
            map_on_threads((0..100).collect(), 2, |i: usize| {
                assert!(i != 60, "work {i} failed");
                placement(caller, i)
            })
        });
        assert!(failed.is_err());
        assert_eq!(
            own_cpus(),
            before,
            "the calling thread's CPUs after a panic in map_on_threads"
        );
        for failing_consume in [false, true] {
            let failed = std::panic::catch_unwind(|| {
                for_each_ordered(
                    (0..100).collect::<Vec<usize>>(),
                    2,
                    8,
                    |i| {
                        assert!(failing_consume || i != 60, "work {i} failed");
                        placement(caller, i)
                    },
                    |at, _| assert!(!failing_consume || at != 60, "consume {at} failed"),
                );
            });
            assert!(failed.is_err());
            assert_eq!(
                own_cpus(),
                before,
                "the calling thread's CPUs after a panic in for_each_ordered (in consume: {failing_consume})"
            );
        }
    }

    #[test]
    fn kernel_cpu_lists_read_as_written() {
        assert_eq!(cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0"), Some(vec![0]));
        assert_eq!(cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("a"), None);
        assert_eq!(cpu_list(""), None);
        assert_eq!(cpu_list("0-100000"), None);
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
