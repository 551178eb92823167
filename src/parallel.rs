//! Running independent pieces of one large pass on the machine's spare cores: a list of items,
//! one function applied to each, the results handed back in the order given. Used where a pass
//! over thousands of independent items (policy files read and parsed, policies resolved) would
//! otherwise leave a core idle while the agent has nothing else to do.

use std::sync::Mutex;

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
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, drain).ok())
            .collect();
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
}
