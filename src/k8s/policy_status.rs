//! NetworkPolicyStatus write-back to antrea-controller: the POST body (node key `NS/NAME`), and
//! [`StatusPoster`], the pure bookkeeping of which Antrea-native policies still need their
//! realization posted in the current sync epoch, which posts are in flight, and when a failed post
//! may be retried (jittered exponential back-off from `retry_min`, the base capped at 300 s,
//! [`crate::retry`]). The reporter actor
//! does the I/O and feeds the results back.
//!
//! A policy never has two posts out at once. The controller keeps the last status it receives
//! per (policy, node), and two concurrent posts may arrive in either order: an older generation
//! posted just before a newer one could land last and stay, while the agent believes the newer
//! one reported. So a newer generation waits for the older post to be answered or given up (a
//! transport error, the client's 60 s request timeout), as Antrea's agent does with its
//! per-policy work queue. The order is certain only for answered posts: a request given up may
//! still reach the controller later, in Antrea as here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::policy::report::PolicyGeneration;
use crate::retry::RetryPolicy;

/// Back-off ceiling of a failing status post (Antrea's status queue), before the jitter.
pub const RETRY_MAX: Duration = RetryPolicy::STATUS_POST.max;
/// At most this many posts in flight at once (Antrea runs four status workers).
pub const MAX_IN_FLIGHT: usize = 4;

/// `POST` path of one policy's status; `name` is the controlplane object's name (its UID for
/// Antrea-native policies), which never contains `/`.
pub fn status_path(name: &str) -> String {
    format!("/apis/controlplane.antrea.io/v1beta2/networkpolicies/{name}/status")
}

/// The node key the controller counts realizations by: `NS/NAME`.
pub fn node_key(namespace: &str, node_name: &str) -> String {
    format!("{namespace}/{node_name}")
}

/// The body: this node realized the policy at `generation`. `realizationFailure` is always
/// present: true, with `not_enforced` as the `message`, when some rule is installed fail-closed
/// instead of as written (enforce or refuse: "realized" means enforced as written).
pub fn status_body(name: &str, node_key: &str, generation: i64, not_enforced: Option<&str>) -> Value {
    let mut node = json!({"nodeName": node_key, "generation": generation, "realizationFailure": false});
    if let Some(message) = not_enforced {
        node["realizationFailure"] = Value::Bool(true);
        node["message"] = Value::String(message.to_owned());
    }
    json!({
        "kind": "NetworkPolicyStatus",
        "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": name},
        "nodes": [node],
    })
}

/// One post to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Post {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// The rules not enforced as written (the status `message`), if any.
    pub not_enforced: Option<String>,
    pub epoch: u64,
}

#[derive(Clone, Debug)]
struct Pending {
    policy: PolicyGeneration,
    epoch: u64,
    failures: u32,
    not_before: Instant,
}

/// Counters for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PosterSummary {
    pub epoch: Option<u64>,
    /// Policies whose current generation is posted in this epoch.
    pub posted: usize,
    /// Policies still to post (waiting, backing off or in flight).
    pub pending: usize,
    pub in_flight: usize,
    pub posts_ok: u64,
    pub posts_failed: u64,
}

/// Which statuses need posting. Fed with the full set of realized policies after every commit
/// (what the flow installer's `PoliciesRealized` carries) and with the result of every post.
#[derive(Clone, Debug)]
pub struct StatusPoster {
    retry_min: Duration,
    epoch: Option<u64>,
    /// uid → generation (and failure message) posted successfully in the current epoch.
    posted: HashMap<String, (i64, Option<String>)>,
    /// uid → what still has to be posted.
    pending: BTreeMap<String, Pending>,
    /// The uids with a post out (at most one each, and at most [`MAX_IN_FLIGHT`] in all). A
    /// pending entry whose uid is here is either that post or a newer one waiting for it.
    posting: HashSet<String>,
    posts_ok: u64,
    posts_failed: u64,
}

impl StatusPoster {
    pub fn new(retry_min: Duration) -> Self {
        StatusPoster {
            retry_min,
            epoch: None,
            posted: HashMap::new(),
            pending: BTreeMap::new(),
            posting: HashSet::new(),
            posts_ok: 0,
            posts_failed: 0,
        }
    }

    /// Delay before the next attempt after `failures` consecutive failures (1 → `retry_min`,
    /// jittered).
    pub fn backoff(&self, failures: u32) -> Duration {
        RetryPolicy::new(self.retry_min, RETRY_MAX).delay_after(failures)
    }

    /// Takes in the policies now realized. A new `sync_epoch` forgets everything posted (the
    /// controller may have restarted and lost the statuses). Policies no longer realized are
    /// dropped; Antrea-native policies whose (uid, generation) is not yet posted in this epoch
    /// become due now (a policy already waiting at the same generation keeps its back-off).
    pub fn realized(&mut self, policies: &[PolicyGeneration], sync_epoch: u64, now: Instant) {
        if self.epoch != Some(sync_epoch) {
            self.epoch = Some(sync_epoch);
            self.posted.clear();
        }
        let native: BTreeMap<&str, &PolicyGeneration> = policies
            .iter()
            .filter(|p| p.antrea_native)
            .map(|p| (p.uid.as_str(), p))
            .collect();
        self.posted.retain(|uid, _| native.contains_key(uid.as_str()));
        self.pending.retain(|uid, _| native.contains_key(uid.as_str()));
        for (uid, p) in native {
            if self
                .posted
                .get(uid)
                .is_some_and(|(g, m)| *g == p.generation && *m == p.not_enforced)
            {
                continue;
            }
            let keep = self
                .pending
                .get(uid)
                .is_some_and(|q| q.policy == *p && q.epoch == sync_epoch);
            if !keep {
                self.pending.insert(
                    uid.to_string(),
                    Pending {
                        policy: p.clone(),
                        epoch: sync_epoch,
                        failures: 0,
                        not_before: now,
                    },
                );
            }
        }
    }

    /// The posts to start now (due, no post of the same policy out, within [`MAX_IN_FLIGHT`]);
    /// they are marked in flight.
    pub fn due(&mut self, now: Instant) -> Vec<Post> {
        let mut out = Vec::new();
        for (uid, p) in &self.pending {
            if self.posting.len() >= MAX_IN_FLIGHT {
                break;
            }
            if p.not_before > now || self.posting.contains(uid) {
                continue;
            }
            self.posting.insert(uid.clone());
            out.push(Post {
                name: p.policy.name.clone(),
                uid: p.policy.uid.clone(),
                generation: p.generation(),
                not_enforced: p.policy.not_enforced.clone(),
                epoch: p.epoch,
            });
        }
        out
    }

    /// Records the result of a post started by [`Self::due`]. Returns the back-off delay after a
    /// failure (when the same post is still wanted), so the caller can wake up for the retry.
    pub fn finished(&mut self, post: &Post, ok: bool, now: Instant) -> Option<Duration> {
        self.posting.remove(&post.uid);
        if ok {
            self.posts_ok += 1;
        } else {
            self.posts_failed += 1;
        }
        // The pending entry may have been replaced meanwhile (new generation or epoch: it stays
        // and goes out on its own) or dropped (the policy is gone: nothing to remember).
        let same = self.pending.get(&post.uid).is_some_and(|q| {
            q.epoch == post.epoch
                && q.policy.generation == post.generation
                && q.policy.not_enforced == post.not_enforced
        });
        if !same {
            return None;
        }
        if ok {
            self.pending.remove(&post.uid);
            self.posted
                .insert(post.uid.clone(), (post.generation, post.not_enforced.clone()));
            return None;
        }
        let backoff = {
            let q = self.pending.get(&post.uid).map_or(1, |q| q.failures + 1);
            self.backoff(q)
        };
        if let Some(q) = self.pending.get_mut(&post.uid) {
            q.failures += 1;
            q.not_before = now + backoff;
        }
        Some(backoff)
    }

    /// The earliest moment a waiting post becomes due (one waiting for its policy's post to
    /// finish becomes due when that post finishes, or at its own time if later).
    pub fn next_due(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter(|(uid, _)| !self.posting.contains(*uid))
            .map(|(_, p)| p.not_before)
            .min()
    }

    pub fn summary(&self) -> PosterSummary {
        PosterSummary {
            epoch: self.epoch,
            posted: self.posted.len(),
            pending: self.pending.len(),
            in_flight: self.posting.len(),
            posts_ok: self.posts_ok,
            posts_failed: self.posts_failed,
        }
    }
}

impl Pending {
    fn generation(&self) -> i64 {
        self.policy.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(uid: &str, generation: i64, native: bool) -> PolicyGeneration {
        PolicyGeneration {
            name: uid.into(),
            uid: uid.into(),
            generation,
            antrea_native: native,
            not_enforced: None,
        }
    }

    fn uids(posts: &[Post]) -> Vec<(&str, i64)> {
        posts.iter().map(|p| (p.uid.as_str(), p.generation)).collect()
    }

    #[test]
    fn body_and_path_match_the_reference() {
        assert_eq!(
            status_path("5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10"),
            "/apis/controlplane.antrea.io/v1beta2/networkpolicies/5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10/status"
        );
        let reference: Value = serde_json::from_str(
            r#"{
              "kind": "NetworkPolicyStatus",
              "apiVersion": "controlplane.antrea.io/v1beta2",
              "metadata": {"name": "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10"},
              "nodes": [
                {"nodeName": "vm-ns/vm1", "generation": 1, "realizationFailure": false}
              ]
            }"#,
        )
        .expect("reference json");
        assert_eq!(
            status_body(
                "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10",
                &node_key("vm-ns", "vm1"),
                1,
                None
            ),
            reference
        );
        assert_eq!(
            status_body("uid-1", "vm-ns/vm1", 2, Some("rules[0]: l7Protocols ...")),
            json!({
              "kind": "NetworkPolicyStatus",
              "apiVersion": "controlplane.antrea.io/v1beta2",
              "metadata": {"name": "uid-1"},
              "nodes": [{"nodeName": "vm-ns/vm1", "generation": 2, "realizationFailure": true,
                         "message": "rules[0]: l7Protocols ..."}]
            })
        );
    }

    #[test]
    fn a_change_of_what_is_not_enforced_is_posted_again() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true)], 1, now);
        let posts = s.due(now);
        s.finished(&posts[0], true, now);
        let mut refused = policy("a", 1, true);
        refused.not_enforced = Some("rules[0]: fqdns ...".into());
        s.realized(&[refused.clone()], 1, now);
        let posts = s.due(now);
        assert_eq!(posts.len(), 1);
        assert_eq!(posts[0].not_enforced.as_deref(), Some("rules[0]: fqdns ..."));
        s.finished(&posts[0], true, now);
        s.realized(&[refused], 1, now);
        assert!(s.due(now).is_empty(), "posted once");
    }

    #[test]
    fn only_antrea_native_policies_not_yet_posted_are_due() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true), policy("k8s", 3, false)], 1, now);
        let posts = s.due(now);
        assert_eq!(uids(&posts), vec![("a", 1)]);
        assert!(s.due(now).is_empty(), "in flight is not due again");
        assert_eq!(s.finished(&posts[0], true, now), None);
        // Same generation again: nothing to do. New generation: post it.
        s.realized(&[policy("a", 1, true)], 1, now);
        assert!(s.due(now).is_empty());
        s.realized(&[policy("a", 2, true)], 1, now);
        assert_eq!(uids(&s.due(now)), vec![("a", 2)]);
    }

    #[test]
    fn a_newer_generation_waits_for_the_older_post_so_the_last_to_arrive_is_the_newest() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true), policy("b", 1, true)], 1, now);
        let first = s.due(now);
        assert_eq!(uids(&first), vec![("a", 1), ("b", 1)]);
        // A new epoch and a new generation of `a` while both posts are out (as after a
        // reconnect that may hide a controller restart).
        s.realized(&[policy("a", 2, true), policy("b", 1, true)], 2, now);
        assert!(
            s.due(now).is_empty(),
            "no second post of a policy while one is out"
        );
        assert_eq!(s.next_due(), None, "nothing can start before a post finishes");
        assert_eq!(s.summary().in_flight, 2);
        // The older post of `a` succeeds: it counts for nothing, and generation 2 goes out.
        assert_eq!(s.finished(&first[0], true, now), None);
        assert_eq!(s.summary().posted, 0);
        let second = s.due(now);
        assert_eq!(uids(&second), vec![("a", 2)]);
        // The older post of `b` fails: the new epoch's post of the same generation goes out now,
        // with no back-off (the failure was the old epoch's).
        assert_eq!(s.finished(&first[1], false, now), None);
        assert_eq!(uids(&s.due(now)), vec![("b", 1)]);
        assert_eq!(s.finished(&second[0], true, now), None);
        assert_eq!(s.summary().posted, 1);
        assert_eq!(s.summary().in_flight, 1);
    }

    #[test]
    fn a_post_waiting_for_its_policy_takes_no_slot() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true)], 1, now);
        let first = s.due(now);
        assert_eq!(uids(&first), vec![("a", 1)]);
        let mut next = vec![policy("a", 2, true)];
        next.extend((0..MAX_IN_FLIGHT).map(|i| policy(&format!("p{i}"), 1, true)));
        s.realized(&next, 1, now);
        // `a` waits for its post; the slots left go to the others.
        let posts = s.due(now);
        assert_eq!(posts.len(), MAX_IN_FLIGHT - 1);
        assert!(posts.iter().all(|p| p.uid != "a"));
        assert_eq!(s.summary().in_flight, MAX_IN_FLIGHT);
        s.finished(&first[0], true, now);
        assert_eq!(uids(&s.due(now)), vec![("a", 2)]);
    }

    #[test]
    fn a_new_epoch_reposts_everything() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true), policy("b", 1, true)], 1, now);
        for p in s.due(now) {
            s.finished(&p, true, now);
        }
        assert_eq!(s.summary().posted, 2);
        s.realized(&[policy("a", 1, true), policy("b", 1, true)], 2, now);
        assert_eq!(uids(&s.due(now)), vec![("a", 1), ("b", 1)]);
    }

    #[test]
    fn a_success_of_the_old_epoch_does_not_count_for_the_new_one() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true)], 1, now);
        let old = s.due(now);
        s.realized(&[policy("a", 1, true)], 2, now);
        s.finished(&old[0], true, now);
        assert_eq!(s.summary().posted, 0);
        assert_eq!(uids(&s.due(now)), vec![("a", 1)]);
    }

    #[test]
    fn failures_back_off_exponentially_up_to_300_s() {
        let t0 = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        s.realized(&[policy("a", 1, true)], 1, t0);
        let mut now = t0;
        let mut delays = Vec::new();
        for _ in 0..8 {
            let posts = s.due(now);
            assert_eq!(posts.len(), 1);
            let d = s.finished(&posts[0], false, now).expect("retry wanted");
            assert!(s.due(now + d - Duration::from_millis(1)).is_empty());
            delays.push(d);
            now += d;
        }
        // Each delay in [base, 2 * base): the bases double from 5 s up to the 300 s cap, and
        // the jitter (crate::retry) adds up to as much again.
        let bases = [5, 10, 20, 40, 80, 160, 300, 300];
        for (d, base) in delays.iter().zip(bases) {
            let base = Duration::from_secs(base);
            assert!(*d >= base && *d <= base * 2, "{delays:?}");
        }
        let posts = s.due(now);
        assert_eq!(s.finished(&posts[0], true, now), None);
        assert_eq!(s.summary().pending, 0);
        assert_eq!(s.summary().posts_failed, 8);
    }

    #[test]
    fn policies_no_longer_realized_are_forgotten_and_in_flight_is_bounded() {
        let now = Instant::now();
        let mut s = StatusPoster::new(Duration::from_secs(5));
        let many: Vec<_> = (0..10).map(|i| policy(&format!("p{i}"), 1, true)).collect();
        s.realized(&many, 1, now);
        let first = s.due(now);
        assert_eq!(first.len(), MAX_IN_FLIGHT);
        s.realized(&[policy("p0", 1, true)], 1, now);
        assert_eq!(s.summary().pending, 1);
        for p in &first {
            s.finished(p, true, now);
        }
        assert_eq!(s.summary().posted, 1);
        assert_eq!(s.summary().in_flight, 0);
    }
}
