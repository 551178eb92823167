//! Running independent pieces of one large pass on a few threads: a list of items, one function
//! applied to each, the results handed back in the order given. Used where a pass over thousands
//! of independent items (policy files read and parsed, policies resolved) would otherwise leave a
//! core idle while the agent has nothing else to do.
//!
//! Plain scoped threads (`std::thread::scope`), started for the pass and joined at its end, taking
//! items from one shared queue until it is empty. No thread is pinned to a CPU and none spins:
//! the agent runs beside its users' workloads, often in a CPU cgroup, and leaves placement to the
//! kernel. The policy core's resolution reaches these threads only through its `RunJobs` trait
//! (`parallel_jobs`). (rayon's workers yield in a loop before they
//! sleep and live for the whole process; a pass here is rare and large, so starting its threads
//! costs nothing that matters.)

use std::sync::{Mutex, MutexGuard};

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

    /// The message of a panic payload.
    fn message(panic: &(dyn std::any::Any + Send)) -> String {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
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
}
