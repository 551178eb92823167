//! The FQDN cache: which addresses DNS gave for each name an FQDN rule selects, and until when.
//! Pure: the caller passes the time (milliseconds since the Unix epoch, so the cache can be
//! saved and loaded across restarts).
//!
//! A record (name, IP) expires at `answer time + max(fqdnCacheMinTTL, TTL)`; a new answer for
//! the same pair moves its expiry (never earlier). A name leaves when its last record expired.
//! Only names some rule selects are kept. Limits (upstream's): at most [`MAX_NAMES`] names in
//! all and [`MAX_NAMES_PER_SELECTOR`] names per selector; past a limit the least recently
//! answered name goes. Evictions are counted by reason.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::dns::Answer;
use crate::policy::fqdn_selector::matches;

/// Names held in all.
pub const MAX_NAMES: usize = 10_000;
/// Names held per selector.
pub const MAX_NAMES_PER_SELECTOR: usize = 1_024;

/// Why a name or record left the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictionReason {
    /// Its TTL ran out.
    Expired,
    /// The cache held [`MAX_NAMES`] names.
    CacheFull,
    /// One of its selectors held [`MAX_NAMES_PER_SELECTOR`] names.
    SelectorFull,
    /// No rule selects it any more.
    Unselected,
}

impl EvictionReason {
    pub const ALL: [EvictionReason; 4] = [
        EvictionReason::Expired,
        EvictionReason::CacheFull,
        EvictionReason::SelectorFull,
        EvictionReason::Unselected,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionReason::Expired => "expired",
            EvictionReason::CacheFull => "cache_full",
            EvictionReason::SelectorFull => "selector_full",
            EvictionReason::Unselected => "unselected",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NameEntry {
    /// IP → expiry (ms since the epoch).
    ips: BTreeMap<IpAddr, u64>,
    /// Recency stamp (higher = answered more recently).
    used: u64,
}

/// One record, as `get fqdncache` shows it and as the cache is saved.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheRecord {
    pub name: String,
    pub ip: IpAddr,
    /// Milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
}

/// What an answer or a sweep changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// (name, IP) pairs that were not in the cache before.
    pub added: Vec<(String, IpAddr)>,
    /// (name, IP) pairs that left the cache.
    pub removed: Vec<(String, IpAddr)>,
    /// Names evicted, by reason.
    pub evicted: Vec<(String, EvictionReason)>,
    /// Answers for names no selector wants (not cached).
    pub unwanted: usize,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

/// Where answers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A DNS response to the VM (intercepted).
    Vm,
    /// An answer to the agent's own re-query.
    Requery,
    /// An answer to the agent's own query for a name a rule names exactly, asked as soon as the
    /// rule arrives (as upstream): recorded like the VM's, so the first connection after a rule
    /// add finds its address flows in place.
    RuleName,
}

#[derive(Clone, Debug, Default)]
pub struct FqdnCache {
    names: BTreeMap<String, NameEntry>,
    /// IP → names holding it (to find which rules an IP belongs to without a scan).
    by_ip: BTreeMap<IpAddr, BTreeSet<String>>,
    min_ttl_secs: u32,
    clock: u64,
    max_names: usize,
    max_per_selector: usize,
}

impl FqdnCache {
    pub fn new(min_ttl_secs: u32) -> Self {
        Self::with_limits(min_ttl_secs, MAX_NAMES, MAX_NAMES_PER_SELECTOR)
    }

    pub fn with_limits(min_ttl_secs: u32, max_names: usize, max_per_selector: usize) -> Self {
        FqdnCache {
            min_ttl_secs,
            max_names: max_names.max(1),
            max_per_selector: max_per_selector.max(1),
            ..Default::default()
        }
    }

    /// Names held.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every record, by name then IP.
    pub fn records(&self) -> Vec<CacheRecord> {
        self.names
            .iter()
            .flat_map(|(name, e)| {
                e.ips.iter().map(move |(ip, exp)| CacheRecord {
                    name: name.clone(),
                    ip: *ip,
                    expires_at_ms: *exp,
                })
            })
            .collect()
    }

    /// The names holding `ip`.
    pub fn names_with_ip(&self, ip: &IpAddr) -> impl Iterator<Item = &str> {
        self.by_ip.get(ip).into_iter().flatten().map(String::as_str)
    }

    /// The IPs of every name `selector` matches.
    pub fn ips_for(&self, selector: &str) -> BTreeSet<IpAddr> {
        if !selector.contains('*') {
            return self
                .names
                .get(selector)
                .map(|e| e.ips.keys().copied().collect())
                .unwrap_or_default();
        }
        self.names
            .iter()
            .filter(|(n, _)| matches(selector, n))
            .flat_map(|(_, e)| e.ips.keys().copied())
            .collect()
    }

    /// The IPs a name holds.
    pub fn ips_of(&self, name: &str) -> Vec<IpAddr> {
        self.names
            .get(name)
            .map(|e| e.ips.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The earliest expiry, if any.
    pub fn next_expiry(&self) -> Option<u64> {
        self.names.values().flat_map(|e| e.ips.values().copied()).min()
    }

    /// The expiry of `name`'s earliest record, if it is cached.
    pub fn earliest_expiry(&self, name: &str) -> Option<u64> {
        self.names.get(name).and_then(|e| e.ips.values().copied().min())
    }

    /// Whether `name` is cached.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Every cached name with the expiry of its earliest record.
    pub fn earliest_expiries(&self) -> impl Iterator<Item = (&str, u64)> {
        self.names
            .iter()
            .filter_map(|(n, e)| e.ips.values().copied().min().map(|x| (n.as_str(), x)))
    }

    /// Names whose earliest record expires before `before_ms` (candidates for a re-query).
    pub fn expiring(&self, before_ms: u64) -> Vec<String> {
        self.names
            .iter()
            .filter(|(_, e)| e.ips.values().any(|&x| x < before_ms))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Records a response's answers at `now_ms`. `selectors` are every FQDN selector of the
    /// installed rules (normalized); answers for names none of them matches are not kept.
    pub fn record(&mut self, answers: &[Answer], now_ms: u64, selectors: &[String]) -> Change {
        self.record_as(answers, now_ms, selectors, Source::Vm)
    }

    /// Like [`FqdnCache::record`], for answers of the given origin. The agent's own re-queries
    /// only refresh names still cached (a name evicted while its query was in flight stays out,
    /// as upstream) and do not make them recently used (else the least recently used order would
    /// become the order of TTLs, and names the VM no longer asks for would never leave first).
    pub fn record_as(
        &mut self,
        answers: &[Answer],
        now_ms: u64,
        selectors: &[String],
        source: Source,
    ) -> Change {
        let mut change = Change::default();
        for a in answers {
            if source == Source::Requery && !self.names.contains_key(&a.name) {
                continue;
            }
            let wanted: Vec<&String> = selectors.iter().filter(|s| matches(s, &a.name)).collect();
            if wanted.is_empty() {
                change.unwanted += 1;
                continue;
            }
            let ttl = u64::from(a.ttl.max(self.min_ttl_secs));
            let expiry = now_ms.saturating_add(ttl.saturating_mul(1000));
            if !self.names.contains_key(&a.name) {
                self.make_room(&a.name, &wanted, &mut change);
            }
            let entry = match source {
                Source::Vm | Source::RuleName => {
                    self.clock += 1;
                    let clock = self.clock;
                    let entry = self.names.entry(a.name.clone()).or_default();
                    entry.used = clock;
                    entry
                }
                Source::Requery => self.names.entry(a.name.clone()).or_default(),
            };
            match entry.ips.get_mut(&a.ip) {
                Some(exp) => *exp = (*exp).max(expiry),
                None => {
                    entry.ips.insert(a.ip, expiry);
                    self.by_ip.entry(a.ip).or_default().insert(a.name.clone());
                    change.added.push((a.name.clone(), a.ip));
                }
            }
        }
        change
    }

    /// Frees a place for a new name `name` selected by `wanted`.
    fn make_room(&mut self, name: &str, wanted: &[&String], change: &mut Change) {
        for selector in wanted {
            let held: Vec<(&String, u64)> = self
                .names
                .iter()
                .filter(|(n, _)| matches(selector, n))
                .map(|(n, e)| (n, e.used))
                .collect();
            if held.len() >= self.max_per_selector {
                if let Some(victim) = held.iter().min_by_key(|(_, u)| *u).map(|(n, _)| (*n).clone()) {
                    self.evict(&victim, EvictionReason::SelectorFull, change);
                }
            }
        }
        if self.names.len() >= self.max_names {
            let victim = self
                .names
                .iter()
                .filter(|(n, _)| n.as_str() != name)
                .min_by_key(|(_, e)| e.used)
                .map(|(n, _)| n.clone());
            if let Some(victim) = victim {
                self.evict(&victim, EvictionReason::CacheFull, change);
            }
        }
    }

    fn evict(&mut self, name: &str, reason: EvictionReason, change: &mut Change) {
        if let Some(e) = self.names.remove(name) {
            for ip in e.ips.keys() {
                self.unindex(ip, name);
                change.removed.push((name.to_owned(), *ip));
            }
            change.evicted.push((name.to_owned(), reason));
        }
    }

    fn unindex(&mut self, ip: &IpAddr, name: &str) {
        if let Some(set) = self.by_ip.get_mut(ip) {
            set.remove(name);
            if set.is_empty() {
                self.by_ip.remove(ip);
            }
        }
    }

    /// Removes the records expired at `now_ms`.
    pub fn expire(&mut self, now_ms: u64) -> Change {
        let mut change = Change::default();
        let mut emptied = Vec::new();
        let mut gone = Vec::new();
        for (name, e) in &mut self.names {
            e.ips.retain(|ip, exp| {
                let keep = *exp > now_ms;
                if !keep {
                    gone.push((name.clone(), *ip));
                }
                keep
            });
            if e.ips.is_empty() {
                emptied.push(name.clone());
            }
        }
        for (name, ip) in gone {
            self.unindex(&ip, &name);
            change.removed.push((name, ip));
        }
        for name in emptied {
            self.names.remove(&name);
            change.evicted.push((name, EvictionReason::Expired));
        }
        change
    }

    /// Drops the names no selector in `selectors` matches any more.
    pub fn retain_selected(&mut self, selectors: &[String]) -> Change {
        let mut change = Change::default();
        let unselected: Vec<String> = self
            .names
            .keys()
            .filter(|n| !selectors.iter().any(|s| matches(s, n)))
            .cloned()
            .collect();
        for name in unselected {
            self.evict(&name, EvictionReason::Unselected, &mut change);
        }
        change
    }

    /// Loads saved records, dropping those expired at `now_ms` (and names past the limits).
    pub fn load(&mut self, records: Vec<CacheRecord>, now_ms: u64) -> usize {
        let mut loaded = 0;
        for r in records {
            if r.expires_at_ms <= now_ms
                || (self.names.len() >= self.max_names && !self.names.contains_key(&r.name))
            {
                continue;
            }
            self.clock += 1;
            let clock = self.clock;
            let entry = self.names.entry(r.name.clone()).or_default();
            entry.used = clock;
            let exp = entry.ips.entry(r.ip).or_insert(r.expires_at_ms);
            *exp = (*exp).max(r.expires_at_ms);
            self.by_ip.entry(r.ip).or_default().insert(r.name);
            loaded += 1;
        }
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: &str, ttl: u32) -> Answer {
        Answer {
            name: name.into(),
            ip: ip.parse().unwrap(),
            ttl,
        }
    }

    fn sel(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn expiry_uses_the_larger_of_ttl_and_min_ttl() {
        let mut c = FqdnCache::new(30);
        let ch = c.record(
            &[a("a.x.test", "10.0.0.1", 5), a("b.x.test", "10.0.0.2", 60)],
            1_000,
            &sel(&["*.x.test"]),
        );
        assert_eq!(ch.added.len(), 2);
        let r = c.records();
        assert_eq!(r[0].expires_at_ms, 31_000);
        assert_eq!(r[1].expires_at_ms, 61_000);
        assert_eq!(c.ips_for("*.x.test").len(), 2);
        // Same pair again: nothing new, expiry moved forward only.
        let ch = c.record(&[a("a.x.test", "10.0.0.1", 5)], 2_000, &sel(&["*.x.test"]));
        assert!(ch.added.is_empty());
        assert_eq!(c.records()[0].expires_at_ms, 32_000);
        let ch = c.expire(40_000);
        assert_eq!(
            ch.removed,
            vec![("a.x.test".to_string(), "10.0.0.1".parse().unwrap())]
        );
        assert_eq!(
            ch.evicted,
            vec![("a.x.test".to_string(), EvictionReason::Expired)]
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c.next_expiry(), Some(61_000));
    }

    #[test]
    fn answers_to_a_rule_name_query_enter_the_cache_like_the_vms() {
        let mut c = FqdnCache::with_limits(0, 10, 10);
        let s = sel(&["exact.x.test", "*.y.test"]);
        let ch = c.record_as(
            &[
                a("exact.x.test", "10.0.0.1", 30),
                a("other.z.test", "10.0.0.2", 30),
            ],
            0,
            &s,
            Source::RuleName,
        );
        assert_eq!(
            ch.added,
            vec![("exact.x.test".to_string(), "10.0.0.1".parse().unwrap())]
        );
        assert_eq!(ch.unwanted, 1, "a name no rule selects stays out");
        assert_eq!(c.earliest_expiry("exact.x.test"), Some(30_000));
    }

    #[test]
    fn requery_answers_refresh_cached_names_only_and_keep_their_recency() {
        let mut c = FqdnCache::with_limits(0, 2, 10);
        let s = sel(&["*.x.test"]);
        c.record(&[a("old.x.test", "10.0.0.1", 10)], 0, &s);
        c.record(&[a("new.x.test", "10.0.0.2", 10)], 1, &s);
        // The re-query of old.x.test gives a new address and a later expiry...
        let ch = c.record_as(
            &[a("old.x.test", "10.0.0.3", 10), a("gone.x.test", "10.0.0.4", 10)],
            5_000,
            &s,
            Source::Requery,
        );
        assert_eq!(
            ch.added,
            vec![("old.x.test".to_string(), "10.0.0.3".parse().unwrap())]
        );
        assert!(
            !c.contains("gone.x.test"),
            "not cached before: not added by a re-query"
        );
        assert_eq!(c.earliest_expiry("old.x.test"), Some(10_000));
        assert_eq!(c.earliest_expiries().count(), 2);
        // ...but it is still the least recently used name.
        let ch = c.record(&[a("third.x.test", "10.0.0.5", 10)], 6_000, &s);
        assert_eq!(
            ch.evicted,
            vec![("old.x.test".to_string(), EvictionReason::CacheFull)]
        );
    }

    #[test]
    fn unwanted_names_are_not_kept() {
        let mut c = FqdnCache::new(0);
        let ch = c.record(&[a("blocked.test", "10.0.0.9", 60)], 0, &sel(&["*.allowed.test"]));
        assert_eq!(ch.unwanted, 1);
        assert!(c.is_empty());
    }

    #[test]
    fn limits_evict_the_least_recently_answered() {
        let mut c = FqdnCache::with_limits(0, 5, 3);
        let s = sel(&["*.a.test", "*.b.test"]);
        for i in 0..3 {
            c.record(&[a(&format!("n{i}.a.test"), &format!("10.0.0.{i}"), 60)], i, &s);
        }
        // A 4th name under *.a.test pushes out n0 (the oldest).
        let ch = c.record(&[a("n3.a.test", "10.0.0.3", 60)], 10, &s);
        assert_eq!(
            ch.evicted,
            vec![("n0.a.test".to_string(), EvictionReason::SelectorFull)]
        );
        for i in 0..2 {
            c.record(
                &[a(&format!("m{i}.b.test"), &format!("10.0.1.{i}"), 60)],
                20 + i,
                &s,
            );
        }
        assert_eq!(c.len(), 5);
        let ch = c.record(&[a("m2.b.test", "10.0.1.2", 60)], 30, &s);
        assert_eq!(
            ch.evicted,
            vec![("n1.a.test".to_string(), EvictionReason::CacheFull)]
        );
        assert_eq!(c.len(), 5);
        assert!(c.names_with_ip(&"10.0.0.1".parse().unwrap()).next().is_none());
    }

    #[test]
    fn a_flood_of_names_stays_bounded() {
        let mut c = FqdnCache::new(0);
        let s = sel(&["*"]);
        for i in 0..3_000u32 {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            c.record(
                &[a(&format!("n{i}.flood.test"), &ip.to_string(), 60)],
                u64::from(i),
                &s,
            );
        }
        assert_eq!(c.len(), MAX_NAMES_PER_SELECTOR);
    }

    #[test]
    fn save_and_load_drop_expired_records() {
        let mut c = FqdnCache::new(0);
        c.record(
            &[a("a.x.test", "10.0.0.1", 10), a("b.x.test", "10.0.0.2", 100)],
            0,
            &sel(&["*.x.test"]),
        );
        let saved = c.records();
        let mut d = FqdnCache::new(0);
        assert_eq!(d.load(saved, 50_000), 1);
        assert_eq!(d.ips_of("b.x.test"), vec!["10.0.0.2".parse::<IpAddr>().unwrap()]);
        let ch = d.retain_selected(&sel(&["other.test"]));
        assert_eq!(
            ch.evicted,
            vec![("b.x.test".to_string(), EvictionReason::Unselected)]
        );
    }
}
