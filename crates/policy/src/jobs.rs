//! Parallel work, injected: the pure core never starts threads or asks the machine how many CPUs
//! it has. A caller that wants a large pass spread over several threads hands it a [`RunJobs`]
//! (the agent's is in its `parallel` module); [`Sequential`] runs everything on the calling thread.

/// One unit of work for a [`RunJobs`]; it may borrow from the caller's stack.
pub type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// Runs a batch of jobs, possibly at the same time on several threads, and returns once every
/// one of them is done. A job that panics makes `run` panic (once the others are done), as it
/// would on the calling thread. Object-safe, so a view can keep an `Arc<dyn RunJobs>`.
pub trait RunJobs: Send + Sync {
    /// How many jobs may run at once: callers split their work in about this many jobs (1: no
    /// point in splitting).
    fn parallelism(&self) -> usize;

    /// Runs every job once, in any order, and returns when all are done.
    fn run<'a>(&self, jobs: Vec<Job<'a>>);
}

/// Every job on the calling thread, one after the other.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequential;

impl RunJobs for Sequential {
    fn parallelism(&self) -> usize {
        1
    }

    fn run<'a>(&self, jobs: Vec<Job<'a>>) {
        for job in jobs {
            job();
        }
    }
}

impl std::fmt::Debug for dyn RunJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunJobs(parallelism {})", self.parallelism())
    }
}

/// `work` applied to every item, each result handed to `consume` on the calling thread in the
/// order of `items`. Items go to `jobs` a window of `window` at a time (so at most `window`
/// results exist at once), each window split in [`RunJobs::parallelism`] jobs of consecutive
/// items; with a parallelism of 1, each item is worked and consumed in turn.
pub fn for_each_ordered<T, R>(
    jobs: &dyn RunJobs,
    items: &[T],
    window: usize,
    work: impl Fn(&T) -> R + Sync,
    mut consume: impl FnMut(usize, R),
) where
    T: Sync,
    R: Send,
{
    let parallelism = jobs.parallelism().max(1);
    if parallelism == 1 || items.len() <= 1 {
        for (at, item) in items.iter().enumerate() {
            consume(at, work(item));
        }
        return;
    }
    let window = window.max(parallelism);
    let work = &work;
    for (chunk_at, chunk) in items.chunks(window).enumerate() {
        let mut results: Vec<Option<R>> = Vec::with_capacity(chunk.len());
        results.resize_with(chunk.len(), || None);
        let share = chunk.len().div_ceil(parallelism);
        let batch: Vec<Job<'_>> = chunk
            .chunks(share)
            .zip(results.chunks_mut(share))
            .map(|(part, slots)| {
                Box::new(move || {
                    for (item, slot) in part.iter().zip(slots.iter_mut()) {
                        *slot = Some(work(item));
                    }
                }) as Job<'_>
            })
            .collect();
        jobs.run(batch);
        debug_assert!(results.iter().all(Option::is_some), "every job run once");
        for (i, (item, result)) in chunk.iter().zip(results).enumerate() {
            // A `RunJobs` that dropped a job breaks its contract; the item is worked here rather
            // than lost, so a policy is never left with a stale resolution.
            let result = result.unwrap_or_else(|| work(item));
            consume(chunk_at * window + i, result);
        }
    }
}

/// For the tests: each batch's jobs on scoped threads, started last first (any order must do).
#[cfg(test)]
pub(crate) struct Scoped;

#[cfg(test)]
impl RunJobs for Scoped {
    fn parallelism(&self) -> usize {
        3
    }

    fn run<'a>(&self, jobs: Vec<Job<'a>>) {
        std::thread::scope(|s| {
            for job in jobs.into_iter().rev() {
                s.spawn(job);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_whatever_runs_them() {
        let items: Vec<u32> = (0..1000).collect();
        for (jobs, window) in [
            (&Sequential as &dyn RunJobs, 7),
            (&Scoped, 7),
            (&Scoped, 256),
            (&Scoped, 1),
        ] {
            let mut seen = Vec::new();
            for_each_ordered(jobs, &items, window, |i| i * 2, |at, r| seen.push((at, r)));
            let expected: Vec<(usize, u32)> = items.iter().map(|&i| (i as usize, i * 2)).collect();
            assert_eq!(seen, expected);
        }
    }

    #[test]
    fn no_items_no_calls() {
        let mut calls = 0;
        for_each_ordered(&Scoped, &[] as &[u32], 4, |i| *i, |_, _| calls += 1);
        assert_eq!(calls, 0);
    }
}
