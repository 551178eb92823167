//! Moving the compiler's state to a new rule set ([`Compiler::apply`]): which rules came,
//! went or changed, their tables, OpenFlow priorities and conjunction ids, the rules held
//! back while waiting for a priority, and the (table, priority) groups whose flows a change
//! touches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::merge_join::{merge_join, Joined};
use crate::ordered;
use crate::priority::{Priority, PriorityAssigner, PriorityError};
use crate::rule::{rule_table, CompiledRuleInput, RuleId};

use super::plan::Group;
use super::{
    conjunction_info, priority_of, view_diff, zone, CompileError, Compiler, ConjunctionInfo, CountChanges,
    FlowPlan, Held, Pass, PlacedRule, SkippedRule,
};

impl Compiler {
    /// Moves the compiler's state to the rule set `rules`; with `delta`, also returns the flows
    /// of every touched group before and after.
    /// `hint`: the only rule ids whose rules may differ from the view last applied (see
    /// [`view_diff`]); `None` compares the whole view.
    pub(super) fn apply(
        &mut self,
        rules: &[Arc<CompiledRuleInput>],
        hint: Option<&BTreeSet<RuleId>>,
        delta: bool,
    ) -> Pass {
        let mut pass = Pass::default();

        // 1-2. Refused rules, and what changed against the held rules.
        let view_diff::ViewDiff { removed, changed } = match hint.filter(|_| self.initialized) {
            Some(ids) => self.diff_hinted(rules, ids),
            None => self.diff_full(rules),
        };
        debug_assert!(
            changed.windows(2).all(|w| w[0].id < w[1].id) && removed.windows(2).all(|w| w[0] < w[1]),
            "changed and removed rules come in id order, one per id"
        );
        // A removed rule still waiting for a priority stays held (and unplaced) until step 8:
        // it must not be tried again before then, or it would come back.
        let is_removed = |id: &RuleId| removed.binary_search(id).is_ok();
        pass.skipped.extend(self.refusals().cloned());
        if removed.is_empty() && changed.is_empty() && self.initialized {
            // Nothing released priorities: rules that found none before still do not fit.
            pass.skipped.extend(self.waiting(&self.unplaced));
            return pass;
        }

        // 3. The touched groups, before: removed and changed rules where they are now.
        let mut dirty: BTreeSet<(u8, u16)> = BTreeSet::new();
        for id in removed.iter().chain(changed.iter().map(|r| &r.id)) {
            if let Some((t, (_, of))) = self.held.get(id).and_then(|h| h.placed.map(|p| (h.table, p))) {
                dirty.insert((t, of));
            }
        }

        // 4. Priority users: drop the old uses, add the new ones, release what nobody uses.
        let mut stale: BTreeSet<(u8, Priority)> = BTreeSet::new();
        let mut gone_zones: BTreeSet<(u8, Priority)> = BTreeSet::new();
        for id in removed.iter().chain(changed.iter().map(|r| &r.id)) {
            let Some(h) = self.held.get(id) else { continue };
            let (t, p) = (h.table, h.prio);
            if self.users.remove_last((t, p), id) {
                stale.insert((t, p));
            }
            if let Some(n) = self.zones.get_mut(&(t, zone(&p))) {
                *n -= 1;
                if *n == 0 {
                    self.zones.remove(&(t, zone(&p)));
                    gone_zones.insert((t, zone(&p)));
                }
            }
        }
        self.users.extend(
            changed
                .iter()
                .map(|r| ((rule_table(r), priority_of(r)), r.id.clone())),
        );
        for r in &changed {
            *self
                .zones
                .entry((rule_table(r), zone(&priority_of(r))))
                .or_insert(0) += 1;
        }
        for (t, z) in gone_zones {
            if self.zones.contains_key(&(t, z)) {
                continue;
            }
            if let Some(pa) = self.priorities.table(t) {
                stale.extend(pa.registered_in_zone(&z).map(|(p, _)| (t, *p)));
            }
        }
        // Tables with room freed: rules waiting for a priority there are tried again.
        let mut freed: BTreeSet<u8> = BTreeSet::new();
        for (t, p) in stale {
            if self.users.is_used((t, p)) {
                continue;
            }
            if let Some(pa) = self.priorities.table_mut(t) {
                if pa.get(&p).is_some() {
                    pa.release_priority(&p);
                    freed.insert(t);
                }
            }
        }

        // 5. Register the priorities of new rules (and of rules that found none before).
        let mut failed: BTreeMap<(u8, Priority), PriorityError> = BTreeMap::new();
        let mut moved: BTreeMap<(u8, Priority), u16> = BTreeMap::new();
        // With no priority registered anywhere (start-up, or every rule gone since), the rules
        // are placed as one batch, as at start-up: the same placement as a fresh compile (what
        // `compile` prints), and one pass instead of one registration per policy.
        let batch = !self.initialized
            || self
                .priorities
                .tables()
                .all(|t| self.priorities.table(t).is_none_or(PriorityAssigner::is_empty));
        let mut record = |t: u8, pa: &PriorityAssigner, moves: BTreeMap<u16, u16>| {
            for (original, updated) in moves {
                if let Some(p) = pa.priority_at(updated) {
                    moved.entry((t, *p)).or_insert(original);
                }
            }
        };
        if batch {
            // Start-up: every rule's own priority in one batch per table (BatchReconcile); if
            // a table overflows, zone by zone so one policy cannot block the others.
            // Every rule of the view: the held ones that stay and the changed ones (a changed
            // rule replaces the held rule of its id), walked together in id order (a batch is
            // rare, so this walk over the held rules is too).
            let mut per_table: BTreeMap<u8, Vec<Priority>> = BTreeMap::new();
            for step in merge_join(self.held.iter(), changed.iter(), |(id, _), r| (*id).cmp(&r.id)) {
                let r: &CompiledRuleInput = match step {
                    Joined::Old((id, _)) if is_removed(id) => continue,
                    Joined::Old((_, h)) => &h.rule,
                    Joined::New(r) | Joined::Both(_, r) => r,
                };
                per_table.entry(rule_table(r)).or_default().push(priority_of(r));
            }
            for (t, all) in per_table {
                let Some(pa) = self.priorities.table_mut(t) else {
                    continue;
                };
                match pa.register(&all) {
                    Ok(moves) => record(t, pa, moves),
                    Err(_) => {
                        let mut by_zone: BTreeMap<Priority, Vec<Priority>> = BTreeMap::new();
                        for p in all {
                            by_zone.entry(zone(&p)).or_default().push(p);
                        }
                        for (_, ps) in by_zone.into_iter().rev() {
                            match pa.register(&ps) {
                                Ok(moves) => record(t, pa, moves),
                                Err(e) => {
                                    for p in ps {
                                        failed.insert((t, p), e.clone());
                                    }
                                }
                            }
                        }
                    }
                }
            }
        } else {
            // Later: a new policy registers its whole zone at once (getOFPriority), one rule
            // at a time in RuleId order.
            let mut todo: Vec<Arc<CompiledRuleInput>> = changed.clone();
            let retry: Vec<Arc<CompiledRuleInput>> = self
                .unplaced_rules()
                .filter(|h| freed.contains(&h.table) && !is_removed(&h.rule.id))
                .map(|h| Arc::clone(&h.rule))
                .collect();
            todo.extend(retry);
            todo.sort_by(|a, b| a.id.cmp(&b.id));
            todo.dedup_by(|a, b| a.id == b.id);
            for r in &todo {
                let (t, p) = (rule_table(r), priority_of(r));
                let Some(pa) = self.priorities.table_mut(t) else {
                    continue;
                };
                if pa.get(&p).is_some() || failed.contains_key(&(t, p)) {
                    continue;
                }
                let max = r.max_rule_priority.max(r.rule_priority).max(0);
                let mut zone_ps: Vec<Priority> =
                    (0..=max).map(|i| Priority::new(p.tier, p.policy, i)).collect();
                if p.rule < 0 {
                    zone_ps.push(p);
                }
                match pa.register(&zone_ps).or_else(|_| pa.register(&[p])) {
                    Ok(moves) => record(t, pa, moves),
                    Err(e) => {
                        failed.insert((t, p), e);
                    }
                }
            }
        }
        for (&(t, p), &original) in &moved {
            if let Some(now) = self.priorities.table(t).and_then(|pa| pa.get(&p)) {
                if now != original {
                    pass.priority_updates.entry(t).or_default().insert(original, now);
                }
            }
        }

        // 6. The rules to (re)place, in id order, one per id: changed ones, unplaced ones, and
        // those whose priority moved (a changed rule comes first among those of its id, and
        // the stable sort keeps it first, so it is the one kept).
        let mut replace: Vec<Arc<CompiledRuleInput>> = changed;
        let before_extra = replace.len();
        replace.extend(
            self.unplaced_rules()
                .filter(|h| (freed.contains(&h.table) || batch) && !is_removed(&h.rule.id))
                .map(|h| Arc::clone(&h.rule)),
        );
        for key in moved.keys() {
            replace.extend(
                self.users
                    .of(*key)
                    .filter_map(|id| self.held.get(id))
                    .map(|h| Arc::clone(&h.rule)),
            );
        }
        if replace.len() > before_extra {
            replace.sort_by(|a, b| a.id.cmp(&b.id));
            replace.dedup_by(|later, kept| later.id == kept.id);
        }
        if !self.held.is_empty() {
            for r in &replace {
                if let Some((t, (_, of))) = self.held.get(&r.id).and_then(|h| h.placed.map(|p| (h.table, p)))
                {
                    dirty.insert((t, of));
                }
            }
        }
        let placements: Vec<(Arc<CompiledRuleInput>, u8, Priority, Option<u16>)> = replace
            .into_iter()
            .map(|r| {
                let (t, p) = (rule_table(&r), priority_of(&r));
                let of = self.priorities.table(t).and_then(|pa| pa.get(&p));
                (r, t, p, of)
            })
            .collect();
        for (_, t, _, of) in &placements {
            if let Some(of) = of {
                dirty.insert((*t, *of));
            }
        }

        // 7. The touched groups' flows before the change.
        if delta {
            pass.before = self.group_rules(&dirty);
        }

        // 8. Apply: removed rules release their ids, the others take their new places.
        for id in &removed {
            if let Some(h) = self.unhold(id) {
                self.unplace(id, &h);
                pass.released_any |= h.placed.is_some();
            }
        }
        // The rules that wait for a priority and are not tried in this pass (still waiting
        // after it): `placements` is in id order.
        let not_attempted: Vec<RuleId> = self
            .unplaced
            .iter()
            .filter(|id| placements.binary_search_by(|(r, ..)| r.id.cmp(id)).is_err())
            .cloned()
            .collect();
        // Into a compiler that holds no rule (a start-up, or every rule removed before), the held
        // rules are built in one go from the id-ordered placements instead of one insertion
        // each.
        let mut bulk: Option<Vec<(RuleId, Held)>> =
            self.held.is_empty().then(|| Vec::with_capacity(placements.len()));
        // The same for the placed rules' conjunction maps (inserting 10,000 rules one by one
        // into four maps was a quarter of a start-up's plan).
        let mut bulk_placed: Option<BulkPlaced> = bulk.as_ref().map(|_| BulkPlaced::default());
        for (r, t, p, of) in placements {
            let mut error = None;
            let id = r.id.clone();
            let previous = if bulk.is_some() { None } else { self.unhold(&id) };
            let old_conj = previous.as_ref().and_then(|h| h.placed.map(|(c, _)| c));
            if let (Some(h), Some(_)) = (&previous, old_conj) {
                self.ungroup(h);
            }
            let placed = match of {
                Some(of) => {
                    let c = match old_conj {
                        Some(c) => c,
                        None => self.allocate_id(&id),
                    };
                    let info = Arc::new(conjunction_info(&r, c, t, of));
                    match &mut bulk_placed {
                        Some(all) => all.push((t, of), c, Arc::clone(&r), info),
                        None => {
                            self.groups.entry((t, of)).or_default().insert(c);
                            self.placed.insert(c, Arc::clone(&r));
                            self.live.insert(c, info);
                            self.conj_changed(c);
                        }
                    }
                    Some((c, of))
                }
                None => {
                    if let Some(h) = &previous {
                        if h.placed.is_some() {
                            self.unplace(&id, h);
                            pass.released_any = true;
                        }
                    }
                    let reason = failed.get(&(t, p)).cloned().unwrap_or(PriorityError::NoRoom);
                    pass.skipped.push(SkippedRule {
                        id: id.clone(),
                        reason: CompileError::Priority(reason.clone()),
                    });
                    pass.failed_now += 1;
                    error = Some(reason);
                    None
                }
            };
            let held = Held {
                rule: r,
                table: t,
                prio: p,
                placed,
                error,
            };
            match &mut bulk {
                Some(all) => all.push((id, held)),
                None => self.hold(id, held),
            }
        }
        if let Some(all) = bulk {
            self.hold_all(all);
        }
        if let Some(all) = bulk_placed {
            self.place_all(all);
        }
        pass.skipped.extend(self.waiting(&not_attempted));
        self.bound_released();
        self.initialized = true;
        self.generation += 1;

        // 9. The touched groups' flows after the change.
        if delta {
            pass.after = self.group_rules(&dirty);
        }
        pass
    }

    /// The rules of `ids` (held rules waiting for a priority) as skipped rules, with why.
    pub(super) fn waiting<'i>(&self, ids: impl IntoIterator<Item = &'i RuleId>) -> Vec<SkippedRule> {
        ids.into_iter()
            .filter_map(|id| self.held.get(id))
            .map(|h| SkippedRule {
                id: h.rule.id.clone(),
                reason: CompileError::Priority(h.error.clone().unwrap_or(PriorityError::NoRoom)),
            })
            .collect()
    }

    /// The held rules without a priority, in id order.
    pub(super) fn unplaced_rules(&self) -> impl Iterator<Item = &Held> {
        self.unplaced.iter().filter_map(|id| self.held.get(id))
    }

    /// Holds `h` as the rule of `id` (replacing what was held), keeping the indexes.
    pub(super) fn hold(&mut self, id: RuleId, h: Held) {
        self.index(&id, &h);
        self.held.insert(id, h);
    }

    /// Holds `all` (in id order, one per id) in a compiler that holds no rule: the map is built
    /// from the sorted entries at once.
    fn hold_all(&mut self, all: Vec<(RuleId, Held)>) {
        debug_assert!(self.held.is_empty(), "hold_all into a compiler that holds rules");
        for (id, h) in &all {
            self.index(id, h);
        }
        self.held = all.into_iter().collect();
    }

    /// Enters the placements of `all` into the conjunction maps, each map built or extended at
    /// once: the same maps as one insertion per rule.
    fn place_all(&mut self, all: BulkPlaced) {
        let BulkPlaced {
            mut groups,
            placed,
            live,
        } = all;
        if let Some(set) = &mut self.conj_changes {
            set.extend(placed.iter().map(|(c, _)| *c));
        }
        ordered::extend_map(&mut self.placed, placed);
        ordered::extend_map(&mut self.live, live);
        groups.sort_unstable();
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let ids = run.iter().map(|(_, c)| *c);
            match self.groups.get_mut(&run[0].0) {
                Some(set) => set.extend(ids),
                None => {
                    self.groups.insert(run[0].0, ids.collect());
                }
            }
        }
    }

    /// Keeps the indexes of the held rules (waiting for a priority, with FQDN peers) for `h`,
    /// about to be held as the rule of `id`.
    fn index(&mut self, id: &RuleId, h: &Held) {
        if h.placed.is_none() {
            self.unplaced.insert(id.clone());
        } else {
            self.unplaced.remove(id);
        }
        if h.rule.fqdn.is_some() {
            self.with_fqdn.insert(id.clone());
        } else {
            self.with_fqdn.remove(id);
        }
    }

    /// Stops holding the rule of `id`, keeping the indexes.
    pub(super) fn unhold(&mut self, id: &RuleId) -> Option<Held> {
        self.unplaced.remove(id);
        self.with_fqdn.remove(id);
        self.held.remove(id)
    }

    /// Takes a placed rule out of its group and releases its conjunction id (held back).
    pub(super) fn unplace(&mut self, id: &RuleId, h: &Held) {
        let Some((c, _)) = h.placed else { return };
        self.ungroup(h);
        self.placed.remove(&c);
        if let Some(info) = self.live.remove(&c) {
            self.released_by_rule.insert(id.clone(), c);
            self.released.insert(c, (info, self.generation));
        } else {
            self.free_ids.insert(c);
        }
        self.conj_changed(c);
    }

    /// Takes a placed rule out of its group (its id stays allocated).
    pub(super) fn ungroup(&mut self, h: &Held) {
        let Some((c, of)) = h.placed else { return };
        if let Some(g) = self.groups.get_mut(&(h.table, of)) {
            g.remove(&c);
            if g.is_empty() {
                self.groups.remove(&(h.table, of));
            }
        }
    }

    /// The placed rules of each of `groups` (an entry for every key, maybe without rules).
    pub(super) fn group_rules<'k>(&self, groups: impl IntoIterator<Item = &'k (u8, u16)>) -> Vec<Group> {
        groups
            .into_iter()
            .map(|key| {
                let rules = self
                    .groups
                    .get(key)
                    .into_iter()
                    .flatten()
                    .filter_map(|&conj_id| {
                        self.placed.get(&conj_id).map(|rule| PlacedRule {
                            rule: Arc::clone(rule),
                            conj_id,
                            table: key.0,
                            priority: key.1,
                        })
                    })
                    .collect();
                (*key, rules)
            })
            .collect()
    }

    /// Where every placed rule is, to build all NetworkPolicy flows chunk by chunk (a
    /// take-over); [`Compiler::set_flow_counts`] with the counts once built.
    pub fn plan(&self, round: u16) -> FlowPlan {
        FlowPlan::new(self.group_rules(self.groups.keys()), round, self.opts)
    }

    /// The flow counts per table, after all flows of [`Compiler::plan`] were built.
    pub fn set_flow_counts(&mut self, counts: BTreeMap<u8, usize>) {
        self.flow_counts = counts;
    }

    /// Applies the flow count changes of a streamed [`FlowDelta`](super::FlowDelta).
    pub fn adjust_flow_counts(&mut self, changes: &CountChanges) {
        for (&t, &by) in changes {
            let n = self.flow_counts.entry(t).or_insert(0);
            *n = n.saturating_add_signed(by);
        }
    }
}

/// Placements gathered in one pass into a compiler that holds no rule, entered at once
/// ([`Compiler::place_all`]).
#[derive(Default)]
struct BulkPlaced {
    groups: Vec<((u8, u16), u32)>,
    placed: Vec<(u32, Arc<CompiledRuleInput>)>,
    live: Vec<(u32, Arc<ConjunctionInfo>)>,
}

impl BulkPlaced {
    fn push(&mut self, group: (u8, u16), c: u32, rule: Arc<CompiledRuleInput>, info: Arc<ConjunctionInfo>) {
        self.groups.push((group, c));
        self.placed.push((c, rule));
        self.live.push((c, info));
    }
}
