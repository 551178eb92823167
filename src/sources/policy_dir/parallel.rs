//! Reading and parsing the changed files of one pass on several cores at once.
//!
//! Loading a fleet of policy files is mostly YAML parsing and validation, one file at a time and
//! each independent of the others (a file's load reads only its own text and what it gave last
//! time); reading thousands of files is thousands of independent stats and opens. On a machine
//! with a spare core, half of that time is waiting for no reason: this runs the loads (or the
//! reads) on up to [`crate::parallel::MAX_THREADS`] threads (the calling thread one of them),
//! each taking the next file as it finishes one, and hands the results back in the order given
//! ([`crate::parallel::map_on_threads`]). A pass with little to do stays on the calling thread:
//! a thread costs more than a small file's parse.

/// Below this much text in one pass, the loads run on the calling thread only.
pub(super) const PARALLEL_FROM_BYTES: usize = 128 << 10;

/// Below this many files to read in one pass, the reads run on the calling thread only (a file's
/// read costs some 8 µs; a thread, tens).
pub(super) const PARALLEL_READS_FROM: usize = 256;

/// `load` applied to every item, on as many threads as the machine's parallelism allows (at most
/// [`crate::parallel::MAX_THREADS`]) when the items' `bytes` add up to [`PARALLEL_FROM_BYTES`] or more; the
/// results in the order of `items`. A panic in `load` reaches the caller, as it would serially.
pub(super) fn map_loads<T, R>(
    items: Vec<T>,
    bytes: impl Fn(&T) -> usize,
    load: impl Fn(T) -> R + Sync,
) -> Vec<R>
where
    T: Send,
    R: Send,
{
    let total: usize = items.iter().map(&bytes).sum();
    map_on_threads(items, total >= PARALLEL_FROM_BYTES, load)
}

/// `load` applied to every item, on the machine's spare cores too when `worth_threads` (asked
/// only then: it reads the cgroup's CPU limit, which a small pass need not pay); the results in
/// the order of `items`.
pub(super) fn map_on_threads<T, R>(items: Vec<T>, worth_threads: bool, load: impl Fn(T) -> R + Sync) -> Vec<R>
where
    T: Send,
    R: Send,
{
    let threads = if worth_threads {
        crate::parallel::available_threads()
    } else {
        1
    };
    crate::parallel::map_on_threads(items, threads, load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_passes_stay_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let threads = map_loads(vec![1usize, 2, 3], |_| 10, |_| std::thread::current().id());
        assert!(threads.iter().all(|t| *t == caller));
    }

    #[test]
    fn large_passes_keep_the_order_given() {
        let items: Vec<usize> = (0..500).collect();
        let out = map_loads(
            items,
            |_| PARALLEL_FROM_BYTES / 100,
            |i| {
                // Uneven work, so the threads finish out of order.
                if i % 7 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                i * 2
            },
        );
        assert_eq!(out, (0..500).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn large_passes_use_more_than_one_thread_where_there_are_cores() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let items: Vec<usize> = (0..64).collect();
        // The first item waits (up to 10 s, however loaded the machine) until another item has
        // started: with a second thread there, that one takes it, so the outcome is no race.
        let started = std::sync::atomic::AtomicUsize::new(0);
        let threads = map_loads(
            items,
            |_| PARALLEL_FROM_BYTES,
            |i| {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i == 0 && cores > 1 {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while started.load(std::sync::atomic::Ordering::SeqCst) < 2
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                std::thread::current().id()
            },
        );
        let distinct: std::collections::BTreeSet<String> = threads.iter().map(|t| format!("{t:?}")).collect();
        assert_eq!(distinct.len() > 1, cores > 1, "{distinct:?} on {cores} cores");
    }

    #[test]
    fn a_panicking_load_reaches_the_caller() {
        let result = std::panic::catch_unwind(|| {
            map_loads(
                (0..100).collect::<Vec<usize>>(),
                |_| PARALLEL_FROM_BYTES,
                |i| {
                    assert!(i != 57, "load {i} failed");
                    i
                },
            )
        });
        assert!(result.is_err());
    }
}
