//! NetworkPolicy flows built on demand, a few (table, OpenFlow priority) groups at a time, so
//! that realizing 10,000 rules never holds all their flows (or flow_mods) at once.
//!
//! A [`FlowPlan`] is a snapshot of where rules are placed (the rule behind an `Arc`, its
//! conjunction id, table and priority: a few words per rule); [`FlowPlan::into_chunks`] builds
//! its flows group run by group run. A [`FlowDelta`] holds, for the groups a change touched, the
//! placements before and after it; [`FlowDelta::into_chunks`] yields the flow_mods between the
//! two, chunk by chunk, for one atomic bundle (the agent's `Switch::bundle_chunks`).
//!
//! Why chunks of whole groups are enough: shared conjunctive match flows only merge rules of one
//! group, so a group's flows at its own (table, priority) depend on its rules alone. The other
//! flows of a rule (its metric flows) have identities of their own that do not name the
//! priority: a rule that moved to a group of another chunk produces the same identity there.
//! Deleting such a flow is therefore deferred to the end of the bundle and skipped when another
//! chunk (re)added that identity; within an atomic bundle only the order of operations on one
//! identity matters.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::flowset;
use crate::merge_join::{merge_join, Joined};
use crate::rule::CompiledRuleInput;
use ovs_openflow::{Flow, FlowKey, FlowMod};

use super::{build_sorted, identity, CompileOptions, ResolvedRule};

/// About how many rules' flows one chunk holds (a rule has 10 to 20 flows in the benches).
pub const CHUNK_RULES: usize = 256;

/// A rule at its place.
#[derive(Clone, Debug)]
pub struct PlacedRule {
    pub rule: Arc<CompiledRuleInput>,
    pub conj_id: u32,
    pub table: u8,
    pub priority: u16,
}

impl PlacedRule {
    fn resolved(&self) -> ResolvedRule<'_> {
        ResolvedRule {
            rule: &self.rule,
            conj_id: self.conj_id,
            table: self.table,
            priority: self.priority,
        }
    }
}

/// One (table, OpenFlow priority) group's rules.
pub type Group = ((u8, u16), Vec<PlacedRule>);

/// Builds the flows of `rules`, sorted by identity.
fn build(rules: &[&PlacedRule], round: u16, opts: &CompileOptions) -> Vec<Flow> {
    let resolved: Vec<ResolvedRule<'_>> = rules.iter().map(|p| p.resolved()).collect();
    build_sorted(&resolved, round, opts)
}

/// Per table, how many flows were added (positive) or removed.
pub type CountChanges = BTreeMap<u8, isize>;

/// Where every rule of some groups is placed (sorted by group), to build their flows later.
#[derive(Clone, Debug, Default)]
pub struct FlowPlan {
    groups: Vec<Group>,
    round: u16,
    opts: CompileOptions,
}

impl FlowPlan {
    pub(super) fn new(groups: Vec<Group>, round: u16, opts: CompileOptions) -> Self {
        FlowPlan { groups, round, opts }
    }

    /// Number of rules.
    pub fn rule_count(&self) -> usize {
        self.groups.iter().map(|(_, rs)| rs.len()).sum()
    }

    /// Keeps only the groups holding a rule of `conj_ids` (with all their rules: a group's
    /// shared flows name every rule of the group), so a query about a few rules builds their
    /// groups' flows and not all of them.
    pub fn retain_groups_with(&mut self, conj_ids: &BTreeSet<u32>) {
        self.groups
            .retain(|(_, rules)| rules.iter().any(|r| conj_ids.contains(&r.conj_id)));
    }

    /// The flows, in runs of whole groups of about `max_rules` rules each (each run sorted by
    /// identity; runs in group order).
    pub fn into_chunks(self, max_rules: usize) -> PlanChunks {
        PlanChunks {
            groups: self.groups.into_iter(),
            round: self.round,
            opts: self.opts,
            max_rules: max_rules.max(1),
            counts: BTreeMap::new(),
        }
    }
}

/// The flows of a [`FlowPlan`], chunk by chunk; counts them per table as it goes.
pub struct PlanChunks {
    groups: std::vec::IntoIter<Group>,
    round: u16,
    opts: CompileOptions,
    max_rules: usize,
    counts: BTreeMap<u8, usize>,
}

impl PlanChunks {
    /// Flows per table of the chunks produced so far.
    pub fn counts(&self) -> &BTreeMap<u8, usize> {
        &self.counts
    }
}

impl Iterator for PlanChunks {
    type Item = Vec<Flow>;

    fn next(&mut self) -> Option<Vec<Flow>> {
        let mut take: Vec<Group> = Vec::new();
        let mut n = 0;
        while n < self.max_rules {
            let Some(g) = self.groups.next() else { break };
            n += g.1.len();
            take.push(g);
        }
        if take.is_empty() {
            return None;
        }
        let rules: Vec<&PlacedRule> = take.iter().flat_map(|(_, rs)| rs.iter()).collect();
        let flows = build(&rules, self.round, &self.opts);
        for f in &flows {
            *self.counts.entry(f.table).or_insert(0) += 1;
        }
        Some(flows)
    }
}

/// One touched group, before and after a change.
#[derive(Clone, Debug)]
pub struct DeltaGroup {
    pub key: (u8, u16),
    pub before: Vec<PlacedRule>,
    pub after: Vec<PlacedRule>,
}

/// The groups a change touched, before and after it (see the module header).
#[derive(Clone, Debug, Default)]
pub struct FlowDelta {
    groups: Vec<DeltaGroup>,
    round: u16,
    opts: CompileOptions,
}

impl FlowDelta {
    /// `before` and `after` must list the same group keys, in order.
    pub(super) fn new(before: Vec<Group>, after: Vec<Group>, round: u16, opts: CompileOptions) -> Self {
        let groups = before
            .into_iter()
            .zip(after)
            .map(|((key, before), (_, after))| DeltaGroup { key, before, after })
            .collect();
        FlowDelta { groups, round, opts }
    }

    /// Whether no group was touched (then there is nothing to change).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The flow_mods from before to after, in chunks of about `max_rules` rules (ADDs, then
    /// this chunk's DELETE_STRICTs); deferred deletes come last.
    pub fn into_chunks(self, max_rules: usize) -> DeltaChunks {
        // Only a flow of some group's `before` can be deferred: with none (rules only added, a
        // fleet's first load), the identities wanted outside their group need no record.
        let may_defer = self.groups.iter().any(|g| !g.before.is_empty());
        DeltaChunks {
            may_defer,
            groups: self.groups.into_iter(),
            round: self.round,
            opts: self.opts,
            max_rules: max_rules.max(1),
            deferred: Vec::new(),
            outside_after: BTreeSet::new(),
            counts: BTreeMap::new(),
            finished: false,
        }
    }
}

/// The flow_mods of a [`FlowDelta`], chunk by chunk.
pub struct DeltaChunks {
    groups: std::vec::IntoIter<DeltaGroup>,
    round: u16,
    opts: CompileOptions,
    max_rules: usize,
    /// Flows outside their group's (table, priority) no longer wanted by their chunk.
    deferred: Vec<Flow>,
    /// Identities outside their group's (table, priority) that some chunk wants (recorded only
    /// when `may_defer`).
    outside_after: BTreeSet<FlowKey>,
    /// Whether any group had flows before the change, so that a delete may be deferred.
    may_defer: bool,
    counts: CountChanges,
    finished: bool,
}

impl DeltaChunks {
    /// Flows added (positive) or removed per table by the chunks produced so far.
    pub fn count_changes(&self) -> &CountChanges {
        &self.counts
    }

    fn count(&mut self, table: u8, by: isize) {
        *self.counts.entry(table).or_insert(0) += by;
    }

    /// The flow_mods of one run of groups.
    fn chunk(&mut self, run: &[DeltaGroup]) -> Vec<FlowMod> {
        let keys: BTreeSet<(u8, u16)> = run.iter().map(|g| g.key).collect();
        let own = |f: &Flow| keys.contains(&(f.table, f.priority));
        let before: Vec<&PlacedRule> = run.iter().flat_map(|g| g.before.iter()).collect();
        let after: Vec<&PlacedRule> = run.iter().flat_map(|g| g.after.iter()).collect();
        let before = build(&before, self.round, &self.opts);
        let after = build(&after, self.round, &self.opts);
        let mut adds = Vec::new();
        let mut deletes = Vec::new();
        for step in merge_join(before, after, |o, n| identity(o).cmp(&identity(n))) {
            match step {
                Joined::Old(o) => {
                    self.count(o.table, -1);
                    if own(&o) {
                        deletes.push(FlowMod::delete_strict(o));
                    } else {
                        debug_assert!(self.may_defer, "a deferred delete with no group before");
                        self.deferred.push(o);
                    }
                }
                Joined::New(n) => {
                    self.count(n.table, 1);
                    if self.may_defer && !own(&n) {
                        self.outside_after.insert(n.key());
                    }
                    adds.push(FlowMod::add(n));
                }
                Joined::Both(o, n) => {
                    if self.may_defer && !own(&n) {
                        self.outside_after.insert(n.key());
                    }
                    if !flowset::same_but_round(&o, &n) {
                        adds.push(FlowMod::add(n));
                    }
                }
            }
        }
        adds.append(&mut deletes);
        adds
    }
}

impl Iterator for DeltaChunks {
    type Item = Vec<FlowMod>;

    fn next(&mut self) -> Option<Vec<FlowMod>> {
        loop {
            let mut run: Vec<DeltaGroup> = Vec::new();
            let mut n = 0;
            while n < self.max_rules {
                let Some(g) = self.groups.next() else { break };
                n += g.before.len() + g.after.len();
                run.push(g);
            }
            if run.is_empty() {
                if self.finished {
                    return None;
                }
                self.finished = true;
                let outside = std::mem::take(&mut self.outside_after);
                let deletes: Vec<FlowMod> = std::mem::take(&mut self.deferred)
                    .into_iter()
                    .filter(|f| !outside.contains(&f.key()))
                    .map(FlowMod::delete_strict)
                    .collect();
                return (!deletes.is_empty()).then_some(deletes);
            }
            let mods = self.chunk(&run);
            if !mods.is_empty() {
                return Some(mods);
            }
        }
    }
}
