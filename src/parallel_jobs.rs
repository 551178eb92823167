//! The agent's threads behind the pure policy core's [`RunJobs`]: the policy cache hands a
//! [`Threads`] to the resolution (`ResolvedView::with_jobs`), which stays free of threads of its
//! own. A thin adapter on [`crate::parallel`].

use antrea_policy::jobs::{Job, RunJobs};

use crate::parallel::{available_threads, map_on_threads};

/// Runs a batch of jobs on up to this many threads (the calling thread one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threads(pub usize);

impl Threads {
    /// As many threads as a large pass may use here ([`available_threads`]).
    pub fn available() -> Self {
        Threads(available_threads())
    }
}

impl RunJobs for Threads {
    fn parallelism(&self) -> usize {
        self.0.max(1)
    }

    fn run<'a>(&self, jobs: Vec<Job<'a>>) {
        map_on_threads(jobs, self.0, |job| job());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once() {
        let counts: Vec<std::sync::atomic::AtomicUsize> = (0..9).map(|_| Default::default()).collect();
        let jobs: Vec<Job<'_>> = counts
            .iter()
            .map(|c| {
                Box::new(move || {
                    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }) as Job<'_>
            })
            .collect();
        Threads(3).run(jobs);
        assert!(counts
            .iter()
            .all(|c| c.load(std::sync::atomic::Ordering::Relaxed) == 1));
    }
}
