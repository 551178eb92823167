//! The agent's one retry policy: a jittered exponential backoff, built on `backon` (the crate
//! kube-runtime's watcher backoff is made of), and the numbers every reconnect and retry of the
//! agent uses. A caller states `(initial, max)`; the delays are
//! `base_n = min(initial * 2^n, max)` plus a random jitter of up to 100 % of `base_n`, so
//! each delay lies in `[base_n, 2 * base_n)`.
//!
//! Why jitter: a fleet of agents that lose their server at the same instant (a controller or
//! kube-apiserver restart) would otherwise retry in step, every agent at the same moments.
//!
//! The cap applies to the base, before the jitter, as in client-go's `wait.Backoff` (`Cap`,
//! `Jitter`): a backoff capped at 30 s waits between 30 s and 60 s once it reached the cap.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// The jitter backon adds: up to this fraction of the base delay (fixed by the crate; the same
/// as client-go's reflector, `jitter 1.0`).
pub const JITTER: f64 = 1.0;

/// After this many steps the base is taken to have reached its cap (64 doublings of 1 ns are
/// centuries); bounds the work of [`RetryPolicy::delay_after`].
const MAX_STEPS: u32 = 64;

/// The growth of the base per failure, the same for every policy (client-go's `Factor: 2`).
const FACTOR: f32 = 2.0;

/// How one caller retries: the first base delay and the cap of the base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    pub initial: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    /// Watching the agent's ExternalNode on kube-apiserver. The Go agent follows it with a
    /// client-go informer, whose reflector backs off from 800 ms, doubling, capped at 30 s, with
    /// jitter 1.0 (`tools/cache/reflector.go`, `NewExponentialBackoffManager`).
    pub const EXTERNAL_NODE_WATCH: RetryPolicy =
        RetryPolicy::new(Duration::from_millis(800), Duration::from_secs(30));
    /// Asking kube-apiserver for the agent's ExternalNode at start-up until it answers: the Go
    /// agent's fixed 10 s, jittered.
    pub const EXTERNAL_NODE_GET: RetryPolicy = RetryPolicy::constant(Duration::from_secs(10));
    /// Reopening a controlplane watch on antrea-controller: the Go agent's fixed 5 s between
    /// attempts (`wait.NonSlidingUntil`), jittered. Not growing: the agent sees a healed
    /// controller within one period, as the Go agent does.
    pub const CONTROLPLANE_WATCH: RetryPolicy = RetryPolicy::constant(Duration::from_secs(5));
    /// Restarting an actor that died: quick for a one-off panic, slow for one that keeps dying.
    pub const ACTOR_RESTART: RetryPolicy =
        RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(30));
    /// Reconnecting the flow installer to the local Open vSwitch after it went away.
    pub const OVS_RECONNECT: RetryPolicy =
        RetryPolicy::new(Duration::from_millis(500), Duration::from_secs(8));
    /// Reconnecting the FQDN controller's own OpenFlow session: a DNS answer paused while no
    /// session is up is lost, so this local socket is retried quickly.
    pub const FQDN_RECONNECT: RetryPolicy =
        RetryPolicy::new(Duration::from_millis(50), Duration::from_secs(1));
    /// Re-posting a failed NetworkPolicyStatus (Antrea's status queue: 5 s to 300 s).
    pub const STATUS_POST: RetryPolicy = RetryPolicy::new(Duration::from_secs(5), Duration::from_secs(300));
    /// Asking a DNS name again after its re-query failed.
    pub const DNS_REQUERY: RetryPolicy = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(30));

    /// Doubling from `initial` up to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        RetryPolicy { initial, max }
    }

    /// Every delay's base is `period`: jitter without growth, for the callers that keep the Go
    /// agent's fixed retry periods.
    pub const fn constant(period: Duration) -> Self {
        RetryPolicy::new(period, period)
    }

    fn builder(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            // backon starts at the minimum whatever the cap: a policy whose cap is below its
            // initial delay (tests shrink the caps) starts at the cap.
            .with_min_delay(self.initial.min(self.max))
            .with_max_delay(self.max)
            .with_factor(FACTOR)
            .with_jitter()
            .without_max_times()
    }

    /// A fresh backoff of this policy, with its own random jitter.
    pub fn backoff(&self) -> Backoff {
        Backoff::from_builder(self.builder(), self.max)
    }

    /// The delay before the next attempt after `failures` consecutive failures (0 and 1 both
    /// give the first delay), for callers that count failures rather than keep a [`Backoff`].
    pub fn delay_after(&self, failures: u32) -> Duration {
        let steps = failures.saturating_sub(1).min(MAX_STEPS);
        let mut backoff = self.backoff();
        for _ in 0..steps {
            backoff.next_delay();
        }
        backoff.next_delay()
    }
}

/// A running backoff: each [`Backoff::next_delay`] is the next delay of its policy;
/// [`Backoff::reset`] after a success starts it over.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    inner: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    fn from_builder(builder: ExponentialBuilder, max: Duration) -> Self {
        Backoff {
            builder,
            inner: builder.build(),
            max,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        // Never `None`: the builder sets no limit on the number of attempts.
        self.inner.next().unwrap_or(self.max)
    }

    /// Starts over from the first delay (after a success).
    pub fn reset(&mut self) {
        self.inner = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bases of `policy`'s first `n` delays, computed here independently of the crate.
    fn bases(policy: RetryPolicy, n: usize) -> Vec<Duration> {
        let mut base = policy.initial.min(policy.max);
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(base);
            base = base.mul_f64(f64::from(FACTOR)).min(policy.max);
        }
        out
    }

    /// `delay` within `[base, base * (1 + JITTER)]`, give or take the crate's f32 arithmetic.
    fn within(delay: Duration, base: Duration) -> bool {
        let slack = Duration::from_micros(10);
        delay + slack >= base && delay <= base.mul_f64(1.0 + JITTER) + slack
    }

    fn seeded(policy: RetryPolicy, seed: u64) -> Backoff {
        Backoff::from_builder(policy.builder().with_jitter_seed(seed), policy.max)
    }

    #[test]
    fn every_delay_stays_within_its_jittered_base() {
        for policy in [
            RetryPolicy::EXTERNAL_NODE_WATCH,
            RetryPolicy::ACTOR_RESTART,
            RetryPolicy::STATUS_POST,
            RetryPolicy::new(Duration::from_millis(10), Duration::from_secs(1)),
        ] {
            for seed in 0..50 {
                let mut b = seeded(policy, seed);
                for (i, base) in bases(policy, 20).into_iter().enumerate() {
                    let d = b.next_delay();
                    assert!(
                        within(d, base),
                        "{policy:?} seed {seed} step {i}: {d:?} vs base {base:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn two_backoffs_wait_differently() {
        let policy = RetryPolicy::EXTERNAL_NODE_WATCH;
        let a: Vec<Duration> = (0..10)
            .map({
                let mut b = seeded(policy, 1);
                move |_| b.next_delay()
            })
            .collect();
        let b: Vec<Duration> = (0..10)
            .map({
                let mut b = seeded(policy, 2);
                move |_| b.next_delay()
            })
            .collect();
        assert_ne!(a, b);
        // Not a property of two seeds only: unseeded backoffs (what the agent builds) differ at
        // every step but by chance, and are spread over the jitter's range.
        let firsts: Vec<Duration> = (0..200).map(|_| policy.backoff().next_delay()).collect();
        let distinct: std::collections::BTreeSet<_> = firsts.iter().collect();
        assert!(
            distinct.len() > 150,
            "{} distinct first delays of 200",
            distinct.len()
        );
        let (lo, hi) = (policy.initial, policy.initial.mul_f64(1.0 + JITTER));
        let low_half = firsts.iter().filter(|d| **d < (lo + hi) / 2).count();
        assert!(
            (40..=160).contains(&low_half),
            "{low_half} of 200 in the lower half"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let policy = RetryPolicy::OVS_RECONNECT;
        let (mut a, mut b) = (seeded(policy, 7), seeded(policy, 7));
        for _ in 0..10 {
            assert_eq!(a.next_delay(), b.next_delay());
        }
    }

    #[test]
    fn reset_starts_over_from_the_first_delay() {
        let policy = RetryPolicy::EXTERNAL_NODE_WATCH;
        let mut b = policy.backoff();
        for _ in 0..10 {
            b.next_delay();
        }
        assert!(within(b.next_delay(), policy.max));
        b.reset();
        assert!(within(b.next_delay(), policy.initial));
    }

    #[test]
    fn delay_after_counts_failures_from_one() {
        let policy = RetryPolicy::STATUS_POST;
        let expected = bases(policy, 10);
        assert!(within(policy.delay_after(0), expected[0]));
        for failures in 1..=10u32 {
            let d = policy.delay_after(failures);
            assert!(within(d, expected[failures as usize - 1]), "{failures}: {d:?}");
        }
        assert!(within(policy.delay_after(u32::MAX), policy.max));
    }

    #[test]
    fn a_cap_below_the_initial_delay_wins() {
        let policy = RetryPolicy::new(Duration::from_millis(100), Duration::from_millis(20));
        let mut b = policy.backoff();
        for _ in 0..5 {
            assert!(within(b.next_delay(), Duration::from_millis(20)));
        }
    }
}
