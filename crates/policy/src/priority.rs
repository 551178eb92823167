//! OpenFlow priorities of Antrea-native rules: the per-table priority assigner that maps a
//! rule's `(tier priority, policy priority, rule priority)` to an OpenFlow priority, keeps rules
//! in precedence order, and moves already-assigned priorities only when there is no room
//! (pipeline reference §8.3, agent runtime §4.6; upstream `priority.go`).
//!
//! The algorithm is upstream's, step for step, so the same sequence of registrations yields the
//! same OpenFlow priorities as the Go agent: the initial guess from the tier/policy/rule
//! offsets (with Go's float-to-integer truncation), insertion of runs of consecutive rule
//! priorities between the registered neighbours, the `zoneOffset` spacing, and the minimum-cost
//! reassignment of neighbours when a gap is too small. Differences, all in cases where upstream
//! misbehaves:
//! * a priority listed twice in one registration is registered once (upstream registers it
//!   twice and leaks the first OpenFlow priority);
//! * when upstream's reassignment search finds no candidate window although the table has room
//!   (its cost bookkeeping rejects some mixed windows), the search is repeated with exact costs
//!   instead of failing;
//! * the gap between two bounds is computed without unsigned wrap-around (as upstream's newest
//!   `findGap` does).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::pipeline::table;
use crate::rule::DEFAULT_TIER_PRIORITY;

/// Range of the multi-tier tables (`AntreaPolicyEgressRule`, `AntreaPolicyIngressRule`).
pub const POLICY_BOTTOM_PRIORITY: u16 = 100;
pub const POLICY_TOP_PRIORITY: u16 = 65000;
/// Range of the baseline tables (`EgressDefaultRule`, `IngressDefaultRule`).
pub const BASELINE_BOTTOM_PRIORITY: u16 = 10;
pub const BASELINE_TOP_PRIORITY: u16 = 180;
/// Spacing kept between a new run of priorities and a neighbour when the gap is large.
pub const ZONE_OFFSET: u16 = 5;

const TIER_OFFSET_MULTI_TIER: u32 = 200;
const TIER_OFFSET_BASELINE: u32 = 0;
const PRIORITY_OFFSET_MULTI_TIER: f64 = 20.0;
const PRIORITY_OFFSET_DEFAULT_TIER: f64 = 100.0;
const PRIORITY_OFFSET_BASELINE: f64 = 10.0;

/// A rule's precedence key (Antrea's `types.Priority`). Smaller numbers take precedence: tier
/// first, then policy priority, then the rule's index.
///
/// `Ord` sorts by *ascending precedence* (Antrea's `ByPriority`): `a < b` means `a` is
/// evaluated after `b`, i.e. gets a lower OpenFlow priority. `-0.0` equals `0.0`.
#[derive(Clone, Copy, Debug)]
pub struct Priority {
    pub tier: i32,
    pub policy: f64,
    pub rule: i32,
}

impl Priority {
    pub fn new(tier: i32, policy: f64, rule: i32) -> Self {
        Priority { tier, policy, rule }
    }

    fn policy_key(&self) -> f64 {
        // Fold -0.0 into 0.0 so Eq/Hash/Ord agree with Go's `==`.
        if self.policy == 0.0 {
            0.0
        } else {
            self.policy
        }
    }

    /// Same tier and policy priority (Antrea's `InSamePriorityZone`).
    pub fn same_zone(&self, other: &Priority) -> bool {
        self.tier == other.tier && self.policy_key().total_cmp(&other.policy_key()).is_eq()
    }

    /// Same zone and rule indexes one apart (Antrea's `IsConsecutive`).
    pub fn is_consecutive(&self, other: &Priority) -> bool {
        self.same_zone(other) && (i64::from(self.rule) - i64::from(other.rule)).abs() == 1
    }
}

impl PartialEq for Priority {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Priority {}

impl std::hash::Hash for Priority {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.tier.hash(state);
        self.policy_key().to_bits().hash(state);
        self.rule.hash(state);
    }
}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Priority {
    fn cmp(&self, other: &Self) -> Ordering {
        // Larger numbers = less precedence = "smaller".
        other
            .tier
            .cmp(&self.tier)
            .then_with(|| other.policy_key().total_cmp(&self.policy_key()))
            .then_with(|| other.rule.cmp(&self.rule))
    }
}

/// Why priorities could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriorityError {
    #[error("{wanted} priorities do not fit in the {available} OpenFlow priorities of the table")]
    Overflow { wanted: usize, available: usize },
    #[error("no room to move existing priorities around the new ones")]
    NoRoom,
}

/// The priority assigner of one rule table.
#[derive(Clone, Debug)]
pub struct PriorityAssigner {
    baseline: bool,
    bottom: u16,
    top: u16,
    /// Registered priorities in ascending precedence (Antrea's `sortedPriorities` +
    /// `priorityMap`).
    by_priority: BTreeMap<Priority, u16>,
    /// OpenFlow priority → registered priority (Antrea's `ofPriorityMap`).
    by_of: BTreeMap<u16, Priority>,
    /// Upstream's placement gave up in this table once: later registrations go straight to the
    /// compact placement (retrying upstream's search first costs a copy of both maps and a
    /// failing search per registration, quadratic over thousands of policies). Cleared when
    /// the table empties.
    compact: bool,
}

/// The OpenFlow priorities that changed (original → updated).
fn moved(updates: &BTreeMap<Priority, PriorityUpdate>) -> BTreeMap<u16, u16> {
    updates
        .values()
        .filter(|u| u.original != u.updated)
        .map(|u| (u.original, u.updated))
        .collect()
}

/// Original and new OpenFlow priority of a registered priority that had to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityUpdate {
    pub original: u16,
    pub updated: u16,
}

impl PriorityAssigner {
    /// An empty assigner for a multi-tier table (`baseline == false`, range 100..=65000) or a
    /// baseline table (range 10..=180).
    pub fn new(baseline: bool) -> Self {
        let (bottom, top) = if baseline {
            (BASELINE_BOTTOM_PRIORITY, BASELINE_TOP_PRIORITY)
        } else {
            (POLICY_BOTTOM_PRIORITY, POLICY_TOP_PRIORITY)
        };
        PriorityAssigner {
            baseline,
            bottom,
            top,
            by_priority: BTreeMap::new(),
            by_of: BTreeMap::new(),
            compact: false,
        }
    }

    /// The heuristic first guess (`initialOFPriority`): `top - offset`, where
    /// `offset = tierBase*tier + trunc(policy*policyBase) + rule`, or `bottom` if the offset
    /// does not fit. Float truncation follows Go's conversion (toward zero; negative and NaN
    /// saturate to 0 here, where Go's result is unspecified).
    pub fn initial_of_priority(&self, p: &Priority) -> u16 {
        let (tier_base, mut policy_base) = (TIER_OFFSET_MULTI_TIER, PRIORITY_OFFSET_MULTI_TIER);
        if p.tier == DEFAULT_TIER_PRIORITY {
            policy_base = PRIORITY_OFFSET_DEFAULT_TIER;
        }
        let (tier_base, policy_base) = if self.baseline {
            (TIER_OFFSET_BASELINE, PRIORITY_OFFSET_BASELINE)
        } else {
            (tier_base, policy_base)
        };
        let tier = u64::from(tier_base) * u64::from(p.tier.max(0).unsigned_abs());
        // `as` saturates and maps NaN to 0.
        let policy = (p.policy * policy_base) as u64;
        let rule = u64::from(p.rule.max(0).unsigned_abs());
        let offset = tier.saturating_add(policy).saturating_add(rule);
        let range = u64::from(self.top - self.bottom);
        if offset > range {
            self.bottom
        } else {
            // offset <= top - bottom, so this cannot underflow.
            self.top - offset as u16
        }
    }

    /// The OpenFlow priority of a registered priority.
    pub fn get(&self, p: &Priority) -> Option<u16> {
        self.by_priority.get(p).copied()
    }

    /// Number of registered priorities.
    pub fn len(&self) -> usize {
        self.by_priority.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_priority.is_empty()
    }

    /// Every registered priority with its OpenFlow priority, in ascending precedence.
    pub fn registered(&self) -> impl Iterator<Item = (&Priority, u16)> {
        self.by_priority.iter().map(|(p, &of)| (p, of))
    }

    /// The registered priorities of one policy zone (same tier and policy priority as `p`), in
    /// ascending precedence: a range of the ordered map, so releasing a zone costs its size only.
    pub fn registered_in_zone(&self, p: &Priority) -> impl Iterator<Item = (&Priority, u16)> {
        // `Ord` puts larger rule numbers first, and a zone's priorities are contiguous.
        let low = Priority::new(p.tier, p.policy, i32::MAX);
        let high = Priority::new(p.tier, p.policy, i32::MIN);
        self.by_priority.range(low..=high).map(|(p, &of)| (p, of))
    }

    /// The registered priority that holds OpenFlow priority `of`.
    pub fn priority_at(&self, of: u16) -> Option<&Priority> {
        self.by_of.get(&of)
    }

    /// Registers `priorities` (already registered ones are skipped). Returns the OpenFlow
    /// priorities of previously registered priorities that had to move (original → updated).
    /// On error nothing changes (upstream's revert function).
    pub fn register(&mut self, priorities: &[Priority]) -> Result<BTreeMap<u16, u16>, PriorityError> {
        // Sorted and deduplicated first: rules share priorities (whole-number policy priorities),
        // so far fewer lookups follow.
        let mut new: Vec<Priority> = priorities.to_vec();
        new.sort();
        new.dedup();
        new.retain(|p| !self.by_priority.contains_key(p));
        if new.is_empty() {
            return Ok(BTreeMap::new());
        }
        let available = usize::from(self.top - self.bottom) + 1;
        if new.len() + self.by_priority.len() > available {
            return Err(PriorityError::Overflow {
                wanted: new.len() + self.by_priority.len(),
                available,
            });
        }
        let mut updates: BTreeMap<Priority, PriorityUpdate> = BTreeMap::new();
        if self.compact {
            self.insert_compact(&new, &mut updates);
            return Ok(moved(&updates));
        }
        let snapshot = (self.by_priority.clone(), self.by_of.clone());
        let mut start = 0;
        for end in 1..=new.len() {
            if end == new.len() || !new[end].is_consecutive(&new[end - 1]) {
                if self.insert_consecutive(&new[start..end], &mut updates).is_err() {
                    // Upstream's placement gave up although the table has room (checked
                    // above): start over from the snapshot with the compact placement.
                    self.by_priority = snapshot.0;
                    self.by_of = snapshot.1;
                    updates.clear();
                    self.compact = true;
                    self.insert_compact(&new, &mut updates);
                    break;
                }
                start = end;
            }
        }
        Ok(moved(&updates))
    }

    /// Forgets the priority that holds OpenFlow priority `of` (no-op if none does).
    pub fn release(&mut self, of: u16) {
        if let Some(p) = self.by_of.remove(&of) {
            self.by_priority.remove(&p);
        }
        self.compact &= !self.by_priority.is_empty();
    }

    /// Forgets a priority (no-op if it is not registered).
    pub fn release_priority(&mut self, p: &Priority) {
        if let Some(of) = self.by_priority.remove(p) {
            self.by_of.remove(&of);
        }
        self.compact &= !self.by_priority.is_empty();
    }

    /// The fallback where upstream's placement runs out (this agent's addition): its first
    /// guesses can crowd one end of the range (a tier's guesses sit 200 apart, so thousands of
    /// policies in one tier all guess the bottom) and its reassignment search then finds no
    /// window, although the table has room. `new` is sorted, unregistered, and fits with the
    /// registered ones (the caller checked).
    ///
    /// New priorities are placed run by run, a run being the new priorities that fall between
    /// the same two registered neighbours: spread evenly over the gap between them when it is
    /// wide enough (nothing moves), otherwise the smallest aligned window of OpenFlow
    /// priorities around the gap that is sparse enough is re-spread evenly with the run merged
    /// in (a packed-memory-array rebalance). Precedence order stays OpenFlow order, only the
    /// window moves, and the density allowed shrinks as windows grow (from full for a window of
    /// one slot to the table's own density for the whole table), so each rebalance leaves
    /// room for the next insertions nearby: a one-policy change moves tens of priorities, not
    /// the table, and the table fills up to its last slot.
    fn insert_compact(&mut self, new: &[Priority], updates: &mut BTreeMap<Priority, PriorityUpdate>) {
        use std::ops::Bound::{Excluded, Unbounded};
        let mut rest = new;
        while let Some(first) = rest.first() {
            let upper = self
                .by_priority
                .range((Excluded(*first), Unbounded))
                .next()
                .map(|(p, &of)| (*p, of));
            let len = match upper {
                Some((next, _)) => rest.iter().take_while(|p| **p < next).count(),
                None => rest.len(),
            };
            let (run, tail) = rest.split_at(len.max(1));
            let lower = self.by_priority.range(..*first).next_back().map(|(_, &of)| of);
            self.insert_run(run, lower, upper.map(|(_, of)| of), new, updates);
            rest = tail;
        }
    }

    /// Places `run` (sorted, all between the registered neighbours at OpenFlow priorities
    /// `lower` and `upper`, `None` = table bound); see [`Self::insert_compact`]. `new` is the
    /// whole registration: an earlier run of it that a rebalance moves is not a move of a
    /// previously registered priority.
    fn insert_run(
        &mut self,
        run: &[Priority],
        lower: Option<u16>,
        upper: Option<u16>,
        new: &[Priority],
        updates: &mut BTreeMap<Priority, PriorityUpdate>,
    ) {
        let (bottom, top) = (i64::from(self.bottom), i64::from(self.top));
        let k = run.len() as i64;
        let lo = lower.map_or(bottom - 1, i64::from);
        let hi = upper.map_or(top + 1, i64::from);
        if hi - lo > k {
            // Room in the gap: spread the run evenly, nothing moves.
            let gap = hi - lo - 1;
            for (i, p) in run.iter().enumerate() {
                let of = lo + (i as i64 + 1) * (gap + 1) / (k + 1);
                self.assign(of as u16, *p);
            }
            return;
        }
        // The smallest aligned window around the lower neighbour whose density, with the run,
        // is within its level's threshold. The whole table always qualifies (the caller
        // checked that everything fits).
        let slots = top - bottom + 1;
        let anchor = lo.max(bottom);
        let levels = 64 - (slots as u64).leading_zeros() as i64; // 2^levels >= slots
        let density = (self.by_of.len() as f64 + k as f64) / slots as f64;
        let (mut a, mut b) = (bottom, top);
        for level in 1..=levels {
            let size = 1i64 << level;
            let start = bottom + ((anchor - bottom) / size) * size;
            let end = (start + size - 1).min(top);
            let start = (end - size + 1).max(bottom);
            let span = end - start + 1;
            let count = self.by_of.range(start as u16..=end as u16).count() as i64 + k;
            let threshold = density + (1.0 - density) * (1.0 - level as f64 / levels as f64);
            if count <= span && count as f64 <= threshold * span as f64 {
                (a, b) = (start, end);
                break;
            }
        }
        // Merge the window's priorities (OpenFlow order is precedence order) with the run.
        let window: Vec<(u16, Priority)> = self
            .by_of
            .range(a as u16..=b as u16)
            .map(|(&of, p)| (of, *p))
            .collect();
        let mut merged: Vec<(Priority, Option<u16>)> = Vec::with_capacity(window.len() + run.len());
        let mut old = window.iter().peekable();
        let mut add = run.iter().peekable();
        loop {
            let take_old = match (old.peek(), add.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((_, o)), Some(n)) => o < *n,
            };
            if take_old {
                if let Some((of, p)) = old.next() {
                    merged.push((*p, Some(*of)));
                }
            } else if let Some(p) = add.next() {
                merged.push((*p, None));
            }
        }
        let span = b - a + 1;
        let count = merged.len() as i64;
        let slot = |j: i64| a + (2 * j + 1) * span / (2 * count);
        // Moved priorities leave their slots first, so no slot is taken twice meanwhile.
        for (j, (p, current)) in merged.iter().enumerate() {
            if let Some(old) = *current {
                if i64::from(old) != slot(j as i64) {
                    self.by_of.remove(&old);
                    if new.binary_search(p).is_err() {
                        updates.entry(*p).or_insert(PriorityUpdate {
                            original: old,
                            updated: old,
                        });
                    }
                }
            }
        }
        for (j, (p, current)) in merged.into_iter().enumerate() {
            let of = slot(j as i64) as u16;
            if current == Some(of) {
                continue;
            }
            self.by_priority.insert(p, of);
            self.by_of.insert(of, p);
            if let Some(u) = updates.get_mut(&p) {
                u.updated = of;
            }
        }
    }

    /// `updatePriorityAssignment`: maps `p` to `of`, dropping `p`'s previous slot.
    fn assign(&mut self, of: u16, p: Priority) {
        if let Some(old) = self.by_priority.insert(p, of) {
            if old != of && self.by_of.get(&old) == Some(&p) {
                self.by_of.remove(&old);
            }
        }
        self.by_of.insert(of, p);
    }

    /// OpenFlow priorities of the registered neighbours of `p` (the one just below and the one
    /// just above in precedence), or the table bounds.
    fn bounds(&self, p: &Priority) -> (u16, u16) {
        use std::ops::Bound::{Excluded, Unbounded};
        let lower = self
            .by_priority
            .range(..*p)
            .next_back()
            .map_or(self.bottom, |(_, &of)| of);
        let upper = self
            .by_priority
            .range((Excluded(*p), Unbounded))
            .next()
            .map_or(self.top, |(_, &of)| of);
        (lower, upper)
    }

    /// `insertConsecutivePriorities`: `run` is sorted by ascending precedence.
    fn insert_consecutive(
        &mut self,
        run: &[Priority],
        updates: &mut BTreeMap<Priority, PriorityUpdate>,
    ) -> Result<(), PriorityError> {
        let n = run.len();
        let (Some(&p_low), Some(&p_high)) = (run.first(), run.last()) else {
            return Ok(());
        };
        let mut start = self.initial_of_priority(&p_low);
        let guess_high = self.initial_of_priority(&p_high);
        let (lower, upper) = self.bounds(&p_low);
        let gap = if upper > lower {
            usize::from(upper - lower - 1)
        } else {
            0
        };
        if gap < n {
            return self.reassign_boundaries(lower, upper, run, updates);
        }
        let n16 = n as u16; // n <= gap < 65536
        if start > lower && guess_high < upper {
            // The guesses fit between the neighbours.
        } else if gap >= n + 2 * usize::from(ZONE_OFFSET) {
            start = if start <= lower {
                lower + ZONE_OFFSET + 1
            } else {
                upper - ZONE_OFFSET - n16
            };
        } else {
            start = lower + (upper - lower - n16) / 2 + 1;
        }
        for (i, p) in run.iter().enumerate() {
            self.assign(start + i as u16, *p);
        }
        Ok(())
    }

    /// `findReassignBoundaries`: the window `[low, high]` around `[lower, upper]` that frees
    /// enough slots while moving the fewest registered priorities. `exact` = compute the cost of
    /// mixed windows exactly (upstream uses the total cost of the downward scan, which makes its
    /// consistency check reject some of them).
    fn find_reassign_boundaries(
        &self,
        lower: u16,
        upper: u16,
        n: usize,
        gap: usize,
        exact: bool,
    ) -> Option<(u16, u16)> {
        struct Cost {
            low: i64,
            high: i64,
            cost: i64,
            sift_down: i64,
        }
        let target = n.saturating_sub(gap) as i64;
        let mut costs: BTreeMap<i64, Cost> = BTreeMap::new();
        let (mut b_low, mut b_high) = (i64::from(lower), i64::from(upper));
        let (mut sift_down, mut sift_up, mut emptied_low, mut emptied_high) = (0i64, 0i64, 0i64, 0i64);
        while b_low >= i64::from(self.bottom) && emptied_low < target {
            if self.by_of.contains_key(&(b_low as u16)) {
                sift_down += 1;
            } else {
                emptied_low += 1;
                costs.insert(
                    emptied_low,
                    Cost {
                        low: b_low,
                        high: i64::from(upper) - 1,
                        cost: sift_down,
                        sift_down,
                    },
                );
            }
            b_low -= 1;
        }
        while b_high <= i64::from(self.top) && emptied_high < target {
            if self.by_of.contains_key(&(b_high as u16)) {
                sift_up += 1;
            } else {
                emptied_high += 1;
                let idx = target - emptied_high;
                if let Some(c) = costs.get_mut(&idx) {
                    c.cost = if exact { c.sift_down } else { sift_down } + sift_up;
                    c.high = b_high;
                } else if idx == 0 {
                    costs.insert(
                        0,
                        Cost {
                            low: i64::from(lower) + 1,
                            high: b_high,
                            cost: sift_up,
                            sift_down: 0,
                        },
                    );
                }
            }
            b_high += 1;
        }
        let mut best: Option<(i64, i64)> = None;
        let mut min_cost = i64::MAX;
        for i in (0..=target).rev() {
            if let Some(c) = costs.get(&i) {
                if c.cost < min_cost && c.high - c.low + 1 == n as i64 + c.cost {
                    min_cost = c.cost;
                    best = Some((c.low, c.high));
                }
            }
        }
        let (low, high) = best?;
        Some((u16::try_from(low).ok()?, u16::try_from(high).ok()?))
    }

    /// `reassignBoundaryPriorities`: moves the registered neighbours inside the chosen window
    /// and places `run` between them.
    fn reassign_boundaries(
        &mut self,
        lower: u16,
        upper: u16,
        run: &[Priority],
        updates: &mut BTreeMap<Priority, PriorityUpdate>,
    ) -> Result<(), PriorityError> {
        let gap = if upper > lower {
            usize::from(upper - lower - 1)
        } else {
            0
        };
        let (low, high) = self
            .find_reassign_boundaries(lower, upper, run.len(), gap, false)
            .or_else(|| self.find_reassign_boundaries(lower, upper, run.len(), gap, true))
            .ok_or(PriorityError::NoRoom)?;
        let in_range = |from: u16, to: u16| -> Vec<Priority> {
            if from > to {
                Vec::new()
            } else {
                self.by_of.range(from..=to).map(|(_, p)| *p).collect()
            }
        };
        let sifted_low = in_range(low, lower);
        let sifted_high = in_range(upper, high);
        for p in sifted_low.iter().chain(&sifted_high) {
            if let Some(&of) = self.by_priority.get(p) {
                updates.entry(*p).or_insert(PriorityUpdate {
                    original: of,
                    updated: of,
                });
            }
        }
        let all: Vec<Priority> = sifted_low
            .iter()
            .chain(run)
            .chain(&sifted_high)
            .copied()
            .collect();
        if usize::from(high - low) + 1 < all.len() {
            return Err(PriorityError::NoRoom);
        }
        for p in &all {
            self.release_priority(p);
        }
        for (i, p) in all.iter().enumerate() {
            self.assign(low + i as u16, *p);
        }
        for p in sifted_low.iter().chain(&sifted_high) {
            if let (Some(u), Some(&of)) = (updates.get_mut(p), self.by_priority.get(p)) {
                u.updated = of;
            }
        }
        Ok(())
    }
}

/// The four assigners of the ExternalNode pipeline, keyed by rule table.
#[derive(Clone, Debug)]
pub struct TablePriorities {
    assigners: BTreeMap<u8, PriorityAssigner>,
}

impl Default for TablePriorities {
    fn default() -> Self {
        Self::new()
    }
}

impl TablePriorities {
    pub fn new() -> Self {
        let assigners = [
            (table::ANTREA_POLICY_EGRESS_RULE, false),
            (table::ANTREA_POLICY_INGRESS_RULE, false),
            (table::EGRESS_DEFAULT_RULE, true),
            (table::INGRESS_DEFAULT_RULE, true),
        ]
        .into_iter()
        .map(|(t, baseline)| (t, PriorityAssigner::new(baseline)))
        .collect();
        TablePriorities { assigners }
    }

    /// The assigner of a rule table (`None` for tables without one: K8s NetworkPolicy tables).
    pub fn table(&self, t: u8) -> Option<&PriorityAssigner> {
        self.assigners.get(&t)
    }

    pub fn table_mut(&mut self, t: u8) -> Option<&mut PriorityAssigner> {
        self.assigners.get_mut(&t)
    }

    /// Table ids that have an assigner.
    pub fn tables(&self) -> impl Iterator<Item = u8> + '_ {
        self.assigners.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(tier: i32, policy: f64, rule: i32) -> Priority {
        Priority::new(tier, policy, rule)
    }

    // The priorities of upstream's priority_test.go.
    fn p110() -> Priority {
        p(1, 1.0, 0)
    }
    fn p1120() -> Priority {
        p(1, 1.2, 0)
    }
    fn p1121() -> Priority {
        p(1, 1.2, 1)
    }
    fn p1130() -> Priority {
        p(1, 1.3, 0)
    }
    fn p1131() -> Priority {
        p(1, 1.3, 1)
    }
    fn p1132() -> Priority {
        p(1, 1.3, 2)
    }
    fn p1133() -> Priority {
        p(1, 1.3, 3)
    }
    fn p1140() -> Priority {
        p(1, 1.4, 0)
    }
    fn p1141() -> Priority {
        p(1, 1.4, 1)
    }
    fn p1142() -> Priority {
        p(1, 1.4, 2)
    }
    fn p190() -> Priority {
        p(1, 9.0, 0)
    }
    fn p191() -> Priority {
        p(1, 9.0, 1)
    }
    fn p192() -> Priority {
        p(1, 9.0, 2)
    }
    fn p193() -> Priority {
        p(1, 9.0, 3)
    }

    fn with(pairs: &[(Priority, u16)]) -> PriorityAssigner {
        let mut pa = PriorityAssigner::new(false);
        for &(p, of) in pairs {
            pa.assign(of, p);
        }
        pa
    }

    fn of_map(pa: &PriorityAssigner) -> BTreeMap<u16, Priority> {
        pa.by_of.clone()
    }

    fn to_register() -> Vec<Priority> {
        vec![p1133(), p1132(), p1131(), p1130()]
    }

    #[test]
    fn ordering_is_ascending_precedence() {
        let mut v = vec![p110(), p1121(), p1120()];
        v.sort();
        assert_eq!(v, vec![p1121(), p1120(), p110()]);
        assert!(p(2, 0.0, 0) < p(1, 9.0, 9));
        assert_eq!(p(1, -0.0, 0), p(1, 0.0, 0));
        assert!(p1130().is_consecutive(&p1131()));
        assert!(!p1130().is_consecutive(&p1132()));
        assert!(!p1130().is_consecutive(&p1141()));
    }

    #[test]
    fn initial_guesses() {
        let pa = PriorityAssigner::new(false);
        // G16 / TestInsertConsecutivePriorities: tier 1, policy 1.3 (1.3*20 truncates to 26).
        assert_eq!(pa.initial_of_priority(&p1133()), 64771);
        assert_eq!(pa.initial_of_priority(&p1130()), 64774);
        // Application tier (250): policy base 100.
        assert_eq!(pa.initial_of_priority(&p(250, 5.0, 0)), 14500);
        assert_eq!(pa.initial_of_priority(&p(250, 1.0, 3)), 14897);
        assert_eq!(pa.initial_of_priority(&p(50, 1.0, 0)), 54980);
        // Offsets beyond the range give the bottom.
        assert_eq!(pa.initial_of_priority(&p(250, 9000.0, 0)), 100);
        let base = PriorityAssigner::new(true);
        assert_eq!(base.initial_of_priority(&p(253, 5.0, 0)), 130);
        assert_eq!(base.initial_of_priority(&p(253, 17.0, 1)), 10);
    }

    #[test]
    fn g16_empty_map() {
        let mut pa = PriorityAssigner::new(false);
        let updates = pa
            .register(&[p1130(), p1131(), p1132(), p1133()])
            .expect("register");
        assert!(updates.is_empty());
        assert_eq!(pa.get(&p1133()), Some(64771));
        assert_eq!(pa.get(&p1132()), Some(64772));
        assert_eq!(pa.get(&p1131()), Some(64773));
        assert_eq!(pa.get(&p1130()), Some(64774));
    }

    type InsertCase = (&'static str, Vec<(Priority, u16)>, Vec<(u16, Priority)>);
    type ReassignCase = (
        &'static str,
        u16,
        u16,
        Vec<(Priority, u16)>,
        Vec<(Priority, u16)>,
        Vec<(u16, u16)>,
    );

    #[test]
    fn insert_consecutive_cases() {
        let pa0 = PriorityAssigner::new(false);
        let low = pa0.initial_of_priority(&p1133());
        let high = pa0.initial_of_priority(&p1130());
        let z = ZONE_OFFSET;
        let cases: Vec<InsertCase> = vec![
            (
                "irrelevant-high-priority",
                vec![(p110(), low + 100)],
                vec![(low + 100, p110())],
            ),
            (
                "irrelevant-low-priority",
                vec![(p1140(), low - 100)],
                vec![(low - 100, p1140())],
            ),
            (
                "irrelevant-surrounding-priorities",
                vec![
                    (p1141(), low - 100),
                    (p1140(), low - 99),
                    (p1121(), low + 99),
                    (p1120(), low + 100),
                ],
                vec![
                    (low - 100, p1141()),
                    (low - 99, p1140()),
                    (low + 99, p1121()),
                    (low + 100, p1120()),
                ],
            ),
            (
                "overlapping-low-priorities",
                vec![(p1141(), low + 1), (p1140(), low + 2)],
                vec![
                    (low + 1, p1141()),
                    (low + 2, p1140()),
                    (low + 3 + z, p1133()),
                    (low + 4 + z, p1132()),
                    (low + 5 + z, p1131()),
                    (low + 6 + z, p1130()),
                ],
            ),
            (
                "overlapping-high-priorities",
                vec![(p1121(), low + 1), (p1120(), low + 2)],
                vec![
                    (low - z - 3, p1133()),
                    (low - z - 2, p1132()),
                    (low - z - 1, p1131()),
                    (low - z, p1130()),
                    (low + 1, p1121()),
                    (low + 2, p1120()),
                ],
            ),
            (
                "priorities-with-small-gap",
                vec![
                    (p1141(), low + 1),
                    (p1140(), low + 2),
                    (p1121(), low + 9),
                    (p1120(), low + 10),
                ],
                vec![
                    (low + 1, p1141()),
                    (low + 2, p1140()),
                    (low + 4, p1133()),
                    (low + 5, p1132()),
                    (low + 6, p1131()),
                    (low + 7, p1130()),
                    (low + 9, p1121()),
                    (low + 10, p1120()),
                ],
            ),
            (
                "gap-just-enough-for-insertion",
                vec![
                    (p1141(), low - 1),
                    (p1140(), low),
                    (p1121(), low + 5),
                    (p1120(), low + 6),
                ],
                vec![
                    (low - 1, p1141()),
                    (low, p1140()),
                    (low + 1, p1133()),
                    (low + 2, p1132()),
                    (low + 3, p1131()),
                    (low + 4, p1130()),
                    (low + 5, p1121()),
                    (low + 6, p1120()),
                ],
            ),
        ];
        for (name, existing, extra) in cases {
            let mut pa = with(&existing);
            let mut updates = BTreeMap::new();
            let mut run = to_register();
            run.sort();
            pa.insert_consecutive(&run, &mut updates).expect(name);
            let mut want: BTreeMap<u16, Priority> = extra.into_iter().collect();
            if !want.values().any(|p| *p == p1133()) {
                want.insert(low, p1133());
                want.insert(low + 1, p1132());
                want.insert(low + 2, p1131());
                want.insert(high, p1130());
            }
            assert_eq!(of_map(&pa), want, "{name}");
        }
    }

    #[test]
    fn reassign_boundary_cases() {
        let cases: Vec<ReassignCase> = vec![
            (
                "push-down-single",
                10000,
                10001,
                vec![(p1140(), 10000), (p1121(), 10001), (p1120(), 10002)],
                vec![
                    (p1140(), 9996),
                    (p1133(), 9997),
                    (p1132(), 9998),
                    (p1131(), 9999),
                    (p1130(), 10000),
                    (p1121(), 10001),
                    (p1120(), 10002),
                ],
                vec![(10000, 9996)],
            ),
            (
                "push-down-multiple",
                10000,
                10001,
                vec![
                    (p190(), 9998),
                    (p1140(), 10000),
                    (p1121(), 10001),
                    (p1120(), 10002),
                ],
                vec![
                    (p190(), 9995),
                    (p1140(), 9996),
                    (p1133(), 9997),
                    (p1132(), 9998),
                    (p1131(), 9999),
                    (p1130(), 10000),
                    (p1121(), 10001),
                    (p1120(), 10002),
                ],
                vec![(9998, 9995), (10000, 9996)],
            ),
            (
                "push-up-single",
                10000,
                10002,
                vec![
                    (p1142(), 9998),
                    (p1141(), 9999),
                    (p1140(), 10000),
                    (p1121(), 10002),
                ],
                vec![
                    (p1142(), 9998),
                    (p1141(), 9999),
                    (p1140(), 10000),
                    (p1133(), 10001),
                    (p1132(), 10002),
                    (p1131(), 10003),
                    (p1130(), 10004),
                    (p1121(), 10005),
                ],
                vec![(10002, 10005)],
            ),
            (
                "push-up-multiple",
                10000,
                10002,
                vec![
                    (p1142(), 9998),
                    (p1141(), 9999),
                    (p1140(), 10000),
                    (p1121(), 10002),
                    (p1120(), 10003),
                ],
                vec![
                    (p1142(), 9998),
                    (p1141(), 9999),
                    (p1140(), 10000),
                    (p1133(), 10001),
                    (p1132(), 10002),
                    (p1131(), 10003),
                    (p1130(), 10004),
                    (p1121(), 10005),
                    (p1120(), 10006),
                ],
                vec![(10002, 10005), (10003, 10006)],
            ),
            (
                "reassign-minimum-possible",
                10000,
                10002,
                vec![
                    (p193(), 9994),
                    (p192(), 9995),
                    (p191(), 9996),
                    (p190(), 9997),
                    (p1140(), 10000),
                    (p1121(), 10002),
                    (p1120(), 10003),
                ],
                vec![
                    (p193(), 9994),
                    (p192(), 9995),
                    (p191(), 9996),
                    (p190(), 9997),
                    (p1140(), 10000),
                    (p1133(), 10001),
                    (p1132(), 10002),
                    (p1131(), 10003),
                    (p1130(), 10004),
                    (p1121(), 10005),
                    (p1120(), 10006),
                ],
                vec![(10002, 10005), (10003, 10006)],
            ),
        ];
        for (name, lower, upper, existing, want, want_updates) in cases {
            let mut pa = with(&existing);
            let mut updates = BTreeMap::new();
            let mut run = to_register();
            run.sort();
            pa.reassign_boundaries(lower, upper, &run, &mut updates)
                .expect(name);
            let got: BTreeMap<Priority, u16> = pa.by_priority.clone();
            assert_eq!(got, want.into_iter().collect::<BTreeMap<_, _>>(), "{name}");
            let got_updates: BTreeMap<u16, u16> = updates
                .values()
                .filter(|u| u.original != u.updated)
                .map(|u| (u.original, u.updated))
                .collect();
            assert_eq!(
                got_updates,
                want_updates.into_iter().collect::<BTreeMap<_, _>>(),
                "{name}"
            );
            // The two maps stay inverse of each other.
            assert_eq!(pa.by_of.len(), pa.by_priority.len(), "{name}");
        }
    }

    #[test]
    fn register_splits_runs_and_reverts_on_error() {
        let pa0 = PriorityAssigner::new(false);
        let at1132 = pa0.initial_of_priority(&p1132());
        let at191 = pa0.initial_of_priority(&p191());
        let mut pa = with(&[
            (p1140(), at1132 - 1),
            (p1121(), at1132 + 2),
            (p1120(), at1132 + 3),
        ]);
        let before = of_map(&pa);
        pa.register(&[p1132(), p1131(), p1130(), p190(), p191()])
            .expect("register");
        let want: BTreeMap<u16, Priority> = [
            (at1132 - 2, p1140()),
            (at1132 - 1, p1132()),
            (at1132, p1131()),
            (at1132 + 1, p1130()),
            (at1132 + 2, p1121()),
            (at1132 + 3, p1120()),
            (at191, p191()),
            (at191 + 1, p190()),
        ]
        .into_iter()
        .collect();
        assert_eq!(of_map(&pa), want);
        // A failing registration changes nothing.
        let mut full = PriorityAssigner::new(true);
        let all: Vec<Priority> = (0..=170).map(|r| p(253, 5.0, r)).collect();
        full.register(&all).expect("171 priorities fit 10..=180");
        let snapshot = of_map(&full);
        assert!(matches!(
            full.register(&[p(253, 5.0, 171)]),
            Err(PriorityError::Overflow { .. })
        ));
        assert_eq!(of_map(&full), snapshot);
        assert_ne!(of_map(&pa), before);
    }

    #[test]
    fn register_all_of_priorities() {
        let mut pa = PriorityAssigner::new(false);
        let first: Vec<Priority> = (100..=10000).map(|i| p(5, 5.0, i - 100)).collect();
        pa.register(&first).expect("first half");
        let second: Vec<Priority> = (10001..=65000).map(|i| p(10, 5.0, i - 10001)).collect();
        pa.register(&second).expect("second half");
        assert_eq!(pa.len(), 64901);
        assert!(pa.register(&[p(253, 5.0, 171)]).is_err());
        // Precedence order is OpenFlow order.
        let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
        assert!(ofs.windows(2).all(|w| w[0] < w[1]));
    }

    /// 3,000 policies of 5 rules in one tier, whole-number priorities: upstream's guesses all
    /// sit at the bottom and its placement runs out (at about 11,000 rules with 10,000 such
    /// policies); the compact placement gives every rule a slot in precedence order, a later
    /// policy moves few others, and the table fills up to its last slot.
    #[test]
    fn rules_in_one_tier_all_placed_until_the_table_is_full() {
        let zone = |i: i32| (0..5).map(move |r| p(250, f64::from(1 + i), r));
        let all: Vec<Priority> = (0..3_000).flat_map(zone).collect();
        let mut pa = PriorityAssigner::new(false);
        pa.register(&all).expect("15,000 priorities fit 100..=65000");
        assert_eq!(pa.len(), 15_000);
        let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
        assert!(ofs.windows(2).all(|w| w[0] < w[1]));
        // A new policy in the middle, one rule at a time as later changes register.
        let extra: Vec<Priority> = (0..5).map(|r| p(250, 1500.5, r)).collect();
        let moves = pa.register(&extra).expect("room left");
        assert!(moves.len() < 50, "{} priorities moved", moves.len());
        let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
        assert!(ofs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(pa.by_of.len(), pa.by_priority.len());
        // Filling the table up to the last slot, then one too many.
        let rest = usize::from(POLICY_TOP_PRIORITY - POLICY_BOTTOM_PRIORITY) + 1 - pa.len();
        let filler: Vec<Priority> = (0..rest as i32).map(|r| p(251, 1.0, r)).collect();
        pa.register(&filler).expect("exactly fills the table");
        let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
        assert!(ofs.windows(2).all(|w| w[0] < w[1]));
        assert!(matches!(
            pa.register(&[p(252, 1.0, 0)]),
            Err(PriorityError::Overflow { .. })
        ));
    }

    #[test]
    fn duplicates_and_release() {
        let mut pa = PriorityAssigner::new(false);
        pa.register(&[p1130(), p1130(), p1131()]).expect("register");
        assert_eq!(pa.len(), 2);
        assert_eq!(pa.by_of.len(), 2);
        let of = pa.get(&p1130()).expect("registered");
        pa.release(of);
        assert_eq!(pa.get(&p1130()), None);
        assert_eq!(pa.len(), 1);
        pa.release(of);
        assert_eq!(pa.len(), 1);
        // Registering again is stable: same guess, same slot.
        pa.register(&[p1130()]).expect("register");
        assert_eq!(pa.get(&p1130()), Some(of));
    }

    #[test]
    fn random_registrations_keep_order_and_bijection() {
        // A small deterministic LCG: many registrations and releases in a tight baseline table
        // force reassignments; OpenFlow order must always follow precedence order.
        let mut seed: u64 = 42;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let mut pa = PriorityAssigner::new(true);
        for round in 0..2000 {
            if next(4) == 0 && !pa.is_empty() {
                let ofs: Vec<u16> = pa.by_of.keys().copied().collect();
                let of = ofs[next(ofs.len() as u64) as usize];
                pa.release(of);
            } else {
                let zone = p(253, next(30) as f64 / 2.0, 0);
                let n = next(4) as i32 + 1;
                let ps: Vec<Priority> = (0..n).map(|r| p(zone.tier, zone.policy, r)).collect();
                let _ = pa.register(&ps);
            }
            let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
            assert!(ofs.windows(2).all(|w| w[0] < w[1]), "round {round}: {ofs:?}");
            assert_eq!(pa.by_of.len(), pa.by_priority.len(), "round {round}");
            assert!(ofs.iter().all(|&o| (10..=180).contains(&o)), "round {round}");
        }
    }

    /// The compact placement under random registrations and releases in both tables: order,
    /// bijection and range always hold, registrations succeed while they fit, and the moves
    /// reported are exactly the priorities whose OpenFlow priority changed.
    #[test]
    fn compact_placement_keeps_order_and_reports_every_move() {
        let mut seed: u64 = 7;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for baseline in [true, false] {
            let mut pa = PriorityAssigner::new(baseline);
            let (bottom, top) = (pa.bottom, pa.top);
            for round in 0..3000 {
                if next(5) == 0 && !pa.is_empty() {
                    let ofs: Vec<u16> = pa.by_of.keys().copied().collect();
                    pa.release(ofs[next(ofs.len() as u64) as usize]);
                } else {
                    pa.compact = true;
                    let zone = next(if baseline { 60 } else { 4000 }) as f64 / 2.0;
                    let ps: Vec<Priority> = (0..next(6) as i32 + 1).map(|r| p(250, zone, r)).collect();
                    let before: BTreeMap<Priority, u16> = pa.by_priority.clone();
                    let fits = pa.len() + ps.iter().filter(|q| pa.get(q).is_none()).count()
                        <= usize::from(top - bottom) + 1;
                    match pa.register(&ps) {
                        Ok(moves) => {
                            let changed: BTreeMap<u16, u16> = before
                                .iter()
                                .filter_map(|(q, &of)| {
                                    let now = pa.get(q).expect("still registered");
                                    (now != of).then_some((of, now))
                                })
                                .collect();
                            assert_eq!(moves, changed, "round {round}");
                        }
                        Err(e) => assert!(!fits, "round {round}: {e}"),
                    }
                }
                let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
                assert!(ofs.windows(2).all(|w| w[0] < w[1]), "round {round}");
                assert_eq!(pa.by_of.len(), pa.by_priority.len(), "round {round}");
                assert!(ofs.iter().all(|o| (bottom..=top).contains(o)), "round {round}");
            }
        }
    }

    /// 20,000 single rules appended in precedence order and then, in a fresh table, prepended
    /// (the worst case for gap halving: every insertion lands at the same end): every one is
    /// placed, and the moves stay amortised-small, because a rebalance leaves room for the
    /// next insertions nearby instead of re-spreading the table each time.
    #[test]
    fn compact_placement_amortises_moves_over_sequential_inserts() {
        for ascending in [true, false] {
            let mut pa = PriorityAssigner::new(false);
            pa.compact = true;
            let mut moves: Vec<usize> = Vec::new();
            for i in 0..20_000 {
                let policy = if ascending { 20_000 - i } else { i + 1 };
                moves.push(pa.register(&[p(250, f64::from(policy), 0)]).expect("fits").len());
            }
            assert_eq!(pa.len(), 20_000);
            let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
            assert!(ofs.windows(2).all(|w| w[0] < w[1]));
            let total: usize = moves.iter().sum();
            moves.sort_unstable();
            eprintln!(
                "ascending {ascending}: {total} moves, p50 {} p99 {} max {}",
                moves[10_000], moves[19_800], moves[19_999]
            );
            // Measured: about 35 moves per insertion on average (p50 8, p99 410; 79 for 50,000):
            // the packed-memory-array bound is O(log² n) amortised.
            assert!(total < 20_000 * 100, "{total} moves for 20,000 inserts");
        }
    }

    /// The steady state the scale issue measures: 50,000 rules of 10,000 policies in one tier
    /// loaded at once, then policies added and removed at random: each change moves few
    /// priorities.
    #[test]
    fn compact_placement_moves_few_priorities_per_policy_change() {
        let mut seed: u64 = 11;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let zone = |policy: f64| (0..5).map(move |r| p(250, policy, r)).collect::<Vec<_>>();
        let mut pa = PriorityAssigner::new(false);
        pa.compact = true;
        let all: Vec<Priority> = (1..=10_000).flat_map(|i| zone(f64::from(i))).collect();
        assert!(pa.register(&all).expect("fits").is_empty());
        let mut moves: Vec<usize> = Vec::new();
        for _ in 0..2_000 {
            let policy = next(10_000) as f64 + 0.5;
            moves.push(pa.register(&zone(policy)).expect("fits").len());
            let gone = f64::from(next(10_000) as u32 + 1);
            for q in zone(gone) {
                pa.release_priority(&q);
            }
        }
        let ofs: Vec<u16> = pa.registered().map(|(_, of)| of).collect();
        assert!(ofs.windows(2).all(|w| w[0] < w[1]));
        moves.sort_unstable();
        eprintln!("p50 {} p99 {} max {}", moves[1_000], moves[1_980], moves[1_999]);
        // Measured: p50 30, p99 203, max 822 moves for a 5-rule policy at 77 % occupancy (at
        // least ~17 must move: the nearest 5 free slots lie that far apart on average).
        assert!(moves[1_980] < 400, "p99 {} moves", moves[1_980]);
    }
}
