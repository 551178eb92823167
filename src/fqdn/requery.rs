//! When each cached name is asked again (upstream's re-query workers): a name some rule selects
//! is re-resolved before its first record expires, so a VM that keeps using a name with a short
//! TTL never sees its flows go and come back. Pure but for the retry's jitter: times are
//! milliseconds since the Unix epoch, as in the cache.
//!
//! A name is due at `expiry - lead`, where `lead` is half of the time left (at most
//! [`MAX_LEAD_MS`]): a 2 s TTL is asked again after 1 s, a 60 s TTL after 55 s. Never sooner
//! than [`MIN_INTERVAL_MS`] after the previous schedule, so a TTL of 0 cannot spin. A failed
//! query is retried with a jittered doubling delay ([`RetryPolicy::DNS_REQUERY`]: 1 s up to 30 s,
//! each delay up to twice that); a name that leaves the cache leaves the schedule.

use std::collections::{BTreeMap, BTreeSet};

use crate::retry::RetryPolicy;

/// The most a re-query runs ahead of the expiry.
pub const MAX_LEAD_MS: u64 = 5_000;
/// The least time between two schedules of one name.
pub const MIN_INTERVAL_MS: u64 = 1_000;

/// When a name whose earliest record expires at `expiry_ms` is asked again, seen at `now_ms`.
pub fn due_at(now_ms: u64, expiry_ms: u64) -> u64 {
    let left = expiry_ms.saturating_sub(now_ms);
    let lead = (left / 2).min(MAX_LEAD_MS);
    now_ms + (left - lead).max(MIN_INTERVAL_MS)
}

/// The retry delay after `failures` failures in a row (at least one), in milliseconds.
pub fn retry_delay(failures: u32) -> u64 {
    let delay = RetryPolicy::DNS_REQUERY.delay_after(failures);
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Clone, Debug, Default)]
pub struct Schedule {
    due: BTreeMap<String, u64>,
    in_flight: BTreeSet<String>,
    failures: BTreeMap<String, u32>,
}

impl Schedule {
    pub fn new() -> Self {
        Self::default()
    }

    /// (Re)schedules `name` from the expiry of its earliest record. A name whose query is in
    /// flight keeps waiting for it ([`Schedule::done`] schedules it again).
    pub fn expires(&mut self, name: &str, now_ms: u64, expiry_ms: u64) {
        if self.in_flight.contains(name) {
            return;
        }
        self.due.insert(name.to_owned(), due_at(now_ms, expiry_ms));
    }

    /// Forgets `name` (it left the cache).
    pub fn remove(&mut self, name: &str) {
        self.due.remove(name);
        self.failures.remove(name);
        // An in-flight query's answer is still recorded if the name is selected again by then;
        // [`Schedule::done`] decides nothing for a name no longer scheduled.
        self.in_flight.remove(name);
    }

    /// Keeps only the names for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.due.retain(|n, _| keep(n));
        self.failures.retain(|n, _| keep(n));
        self.in_flight.retain(|n| keep(n));
    }

    /// Whether `name` is scheduled or asked right now.
    pub fn contains(&self, name: &str) -> bool {
        self.due.contains_key(name) || self.in_flight.contains(name)
    }

    /// The names due at `now_ms`, now in flight.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<String> {
        let names: Vec<String> = self
            .due
            .iter()
            .filter(|(_, &t)| t <= now_ms)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &names {
            self.due.remove(n);
            self.in_flight.insert(n.clone());
        }
        names
    }

    /// A query for `name` ended. On success the name is scheduled again from `expiry_ms` (its
    /// earliest record after the answer; `None` if it left the cache); on failure it is retried
    /// after [`retry_delay`] (while it has records).
    pub fn done(&mut self, name: &str, ok: bool, now_ms: u64, expiry_ms: Option<u64>) {
        if !self.in_flight.remove(name) {
            return;
        }
        let Some(expiry) = expiry_ms else {
            self.failures.remove(name);
            return;
        };
        if ok {
            self.failures.remove(name);
            self.due.insert(name.to_owned(), due_at(now_ms, expiry));
        } else {
            let n = self.failures.entry(name.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            self.due.insert(name.to_owned(), now_ms + retry_delay(*n));
        }
    }

    /// The earliest time a name is due.
    pub fn next_due(&self) -> Option<u64> {
        self.due.values().copied().min()
    }

    /// Names scheduled or in flight.
    pub fn len(&self) -> usize {
        self.due.len() + self.in_flight.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_due_before_they_expire() {
        // 2 s TTL: asked again after 1 s.
        assert_eq!(due_at(10_000, 12_000), 11_000);
        // 60 s TTL: 5 s ahead.
        assert_eq!(due_at(0, 60_000), 55_000);
        // Nothing left (TTL 0, or already expired): not sooner than the minimum interval.
        assert_eq!(due_at(10_000, 10_000), 11_000);
        assert_eq!(due_at(10_000, 9_000), 11_000);
    }

    #[test]
    fn in_flight_names_wait_for_their_answer_and_failures_back_off() {
        let mut s = Schedule::new();
        s.expires("a.test", 0, 2_000);
        s.expires("b.test", 0, 60_000);
        assert_eq!(s.next_due(), Some(1_000));
        assert!(s.take_due(999).is_empty());
        assert_eq!(s.take_due(1_000), vec!["a.test".to_string()]);
        // A VM's answer for a name in flight does not schedule a second query.
        s.expires("a.test", 1_100, 3_100);
        assert!(s.take_due(50_000).is_empty());
        // First failure: 1 s, jittered up to 2 s.
        s.done("a.test", false, 1_500, Some(2_000));
        assert_eq!(s.take_due(2_499), Vec::<String>::new());
        let due = s.next_due().expect("due");
        assert!((2_500..=3_500).contains(&due), "{due}");
        assert_eq!(s.take_due(due), vec!["a.test".to_string()]);
        s.done("a.test", false, due, Some(2_000));
        // Second failure: 2 s, jittered up to 4 s.
        let next = s.next_due().expect("due");
        assert!((due + 2_000..=due + 4_000).contains(&next), "{due} {next}");
        assert_eq!(s.take_due(next), vec!["a.test".to_string()]);
        s.done("a.test", true, 4_600, Some(6_600));
        assert_eq!(s.next_due(), Some(5_600));
        // Left the cache: gone.
        s.remove("a.test");
        s.retain(|n| n != "b.test");
        assert!(s.is_empty());
        // Jittered by up to 100 % (crate::retry): bounds, not values.
        assert!((1_000..=2_000).contains(&retry_delay(1)), "{}", retry_delay(1));
        assert!(
            (30_000..=60_000).contains(&retry_delay(20)),
            "{}",
            retry_delay(20)
        );
    }

    #[test]
    fn an_answer_for_a_name_that_left_the_cache_schedules_nothing() {
        let mut s = Schedule::new();
        s.expires("a.test", 0, 2_000);
        s.take_due(1_000);
        s.done("a.test", true, 1_100, None);
        assert!(s.is_empty());
        // A stale completion for an unscheduled name does nothing.
        s.done("x.test", true, 0, Some(10_000));
        assert!(s.is_empty());
    }
}
