//! The rule → flow compiler: turns the whole set of resolved rules ([`CompiledRuleInput`]) into
//! Antrea's NetworkPolicy flows in one pass (pipeline reference §8.4-8.7, §9, §11), and owns the
//! state that must survive between compilations so flows stay put: the OpenFlow priority
//! assigners ([`TablePriorities`]) and the conjunction ids.
//!
//! Two layers:
//! * [`build_flows`] is the conjunction engine, a pure function of rules that already have a
//!   conjunction id, a table and an OpenFlow priority ([`ResolvedRule`]): clause match flows
//!   (shared between rules with the same table, priority and match, carrying one
//!   `conjunction(...)` action per rule), one action flow per rule (per IP family for Allow) and
//!   the metric flows.
//! * [`Compiler`] assigns tables, priorities and conjunction ids, then calls `build_flows`.
//!   [`compile`] is a fresh `Compiler` (what the Go agent does at start-up).
//!
//! **Conjunction ids** start at 2 (1 is the DNS interception conjunction) and are kept per
//! [`RuleId`] for as long as the rule exists, so a rule's flows do not change when other rules
//! come and go. A fresh compiler hands them out in `RuleId` order, so the same rule set always
//! gets the same ids (and the same flows, which then replace the previous round's flows in place
//! after a restart). New rules take the lowest free id. The id of a removed rule is held back
//! (its metadata stays queryable for late packet-ins and statistics, as upstream's 5 s "async
//! rule cache") until [`Compiler::reclaim_released_ids`], or, at the latest, until more than
//! [`MAX_HELD_IDS`] ids are held; a rule that comes back before then gets its old id again.
//! Upstream allocates ids in event order and does not persist them, so ids are not comparable
//! with a Go agent's.
//!
//! **Cookies** are upstream's: `round << 48 | NetworkPolicy << 40` with object id 0 for every
//! flow (G19). Stats collection filters on that exact cookie, so no per-rule object id is used.
//!
//! **Priorities** follow upstream's assigner ([`crate::priority`]): the first
//! compilation registers every rule's priority in one batch per table (`BatchReconcile`); later
//! ones register a new policy's whole zone (rule priorities `0..=max_rule_priority`) at once, one
//! rule at a time in `RuleId` order, moving existing priorities only when a gap is too small.
//! A priority is released when the rules using it are gone.
//!
//! Departures from upstream (all documented where they happen):
//! * IPv6 is policed: every IP-family-specific flow has an IPv6 twin (`ipv6`, `tcp6`, `icmp6`,
//!   zone 65510), as upstream's generic code produces when IPv6 is enabled (§11).
//!   [`CompileOptions::upstream`] turns this off.
//! * Peers of a disabled family are skipped (upstream skips only ipBlocks; member IPs of a
//!   disabled family produce inert flows there).
//! * A `Pass` rule in a baseline table continues to the metric table: upstream's
//!   `goto_table:<K8s rule table>` would point backwards, which OVS refuses (Antrea's
//!   validation does not allow Pass in the baseline tier).
//! * Port ranges starting at 0 are matched (upstream's bit-range helper refuses them and the
//!   service matches nothing); a source-port range yields one flow per range with only that
//!   range (upstream's slice aliasing gives the same flows under different cache keys, §8.7).
//! * Priorities no longer used by any rule of their policy zone are released even if no flow
//!   ever used them (upstream leaks priorities registered for rules not applied to the Node).
//! * K8s NetworkPolicy rules are not compiled (they never reach a VM); they are reported in
//!   [`CompileOutput::skipped`].
//! * A rule whose priority does not fit its table is skipped alone (reported in `skipped`);
//!   upstream fails the whole batch at start-up.
//!
//! Performance: 10,000 rules (152k flows, dual-stack, port ranges) compile in about 0.5 s in a
//! release build on the 2-core lab VM; most of it is building the `BTreeMap` flow set. The flow
//! installer does not do that on a change: [`Compiler::update`] compares the new rule view with
//! the held rules (by `Arc` pointer first), keeps the priority bookkeeping per rule (users per
//! priority, rules per zone), and rebuilds only the flow groups (table, OpenFlow priority) the
//! change touches, before and after, returning their diff as flow_mods (about 1 ms for one rule
//! with 10,000 present, `benches/policy_compile.rs`). No flows are held between changes.

mod engine;
mod placement;
mod plan;
mod publisher;
mod view_diff;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::flowset::FlowSet;
use crate::merge_join::{merge_join, Joined};
use crate::ordered;
use crate::pipeline::{self, Family};
use crate::priority::{Priority, PriorityError, TablePriorities};
use crate::rule::{CompiledRuleInput, Direction, PolicyRef, RuleAction, RuleId};
use ovs_openflow::{Flow, FlowMod, FlowModCommand, Match};

use engine::build_sorted;
pub use engine::{build_flows, port_bit_ranges};
#[cfg(test)]
use engine::{service_matches, Targets};
use plan::Group;
pub use plan::{CountChanges, DeltaChunks, FlowDelta, FlowPlan, PlacedRule, PlanChunks, CHUNK_RULES};
pub use publisher::ConjunctionPublisher;

/// The first conjunction id rules get (1 is DNS interception).
pub const FIRST_CONJ_ID: u32 = 2;
/// At most this many ids of removed rules are held back; beyond, the oldest are reclaimed.
pub const MAX_HELD_IDS: usize = 4096;
/// OpenFlow priority of the metric flows.
pub const METRIC_PRIORITY: u16 = pipeline::priority::NORMAL;

/// What the compiler produces flows for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    pub ipv4: bool,
    /// Police IPv6 (this agent's default; upstream VMs are IPv4-only).
    pub ipv6: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            ipv4: true,
            ipv6: true,
        }
    }
}

impl CompileOptions {
    /// Upstream's VM configuration: IPv4 only.
    pub fn upstream() -> Self {
        CompileOptions {
            ipv4: true,
            ipv6: false,
        }
    }

    fn families(&self) -> Vec<Family> {
        let mut v = Vec::with_capacity(2);
        if self.ipv4 {
            v.push(Family::V4);
        }
        if self.ipv6 {
            v.push(Family::V6);
        }
        v
    }
}

/// A rule with its conjunction id, table and OpenFlow priority: the input of [`build_flows`].
#[derive(Clone, Copy, Debug)]
pub struct ResolvedRule<'a> {
    pub rule: &'a CompiledRuleInput,
    pub conj_id: u32,
    pub table: u8,
    pub priority: u16,
}

/// A placed rule with FQDN peers: the conjunction its address clause (2 of `n_clauses`) belongs
/// to, in `table` at `priority`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FqdnPlacement {
    pub conj_id: u32,
    pub table: u8,
    pub priority: u16,
    pub n_clauses: u8,
    pub selectors: Vec<String>,
}

/// What the agent needs to map a conjunction id (from `reg3`/`reg5`/`reg6` of a packet-in or
/// from a metric flow) back to its rule.
#[derive(Clone, Debug, PartialEq)]
pub struct ConjunctionInfo {
    pub conj_id: u32,
    pub rule_id: RuleId,
    pub policy: PolicyRef,
    pub rule_name: String,
    pub direction: Direction,
    pub action: RuleAction,
    /// The policy's tier priority (Emergency 50 ... Application 250, Baseline 253) and its own
    /// `priority`: what `trace` reports of the rule that decides a packet.
    pub tier_priority: i32,
    pub policy_priority: f64,
    pub table: u8,
    pub priority: u16,
    pub enable_logging: bool,
    pub log_label: String,
}

/// Why a rule was left out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("another rule with the same id came first")]
    DuplicateRule,
    #[error("K8s NetworkPolicy rules are not supported on an external Node")]
    NotAntreaNative,
    #[error("no OpenFlow priority: {0}")]
    Priority(#[from] PriorityError),
}

/// A rule that produced no flows, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedRule {
    pub id: RuleId,
    pub reason: CompileError,
}

/// The result of one compilation.
#[derive(Clone, Debug, Default)]
pub struct CompileOutput {
    /// Every NetworkPolicy rule flow (cookie category NetworkPolicy), keyed by identity.
    pub flows: FlowSet,
    /// The compiled rules by conjunction id.
    pub conjunctions: ConjunctionMap,
    /// Per table, OpenFlow priorities of earlier rules that moved (old → new) to make room.
    pub priority_updates: BTreeMap<u8, BTreeMap<u16, u16>>,
    pub skipped: Vec<SkippedRule>,
    /// Rules removed but whose ids are still held (not reused yet): late packet-ins and
    /// statistics may still name them.
    pub released: ConjunctionMap,
}

/// Compiles `rules` with a fresh compiler: the result depends only on the rule set.
pub fn compile(rules: &[CompiledRuleInput], round: u16, opts: CompileOptions) -> CompileOutput {
    Compiler::new(opts).compile(rules, round)
}

/// The compiler with the state that keeps flows stable across compilations, and that makes a
/// change cost what it touches: it holds every rule it placed (shared with the caller through
/// `Arc`), so a new rule set is compared with the previous one rule by rule, and only the flows
/// of the rules that changed are rebuilt ([`Compiler::update`]).
#[derive(Clone, Debug)]
pub struct Compiler {
    opts: CompileOptions,
    priorities: TablePriorities,
    initialized: bool,
    free_ids: BTreeSet<u32>,
    next_id: u32,
    /// Shared with the published [`ConjunctionMap`]s, so each rule's metadata is held once.
    live: BTreeMap<u32, Arc<ConjunctionInfo>>,
    /// Ids of removed rules held back, with the compilation that released them.
    released: BTreeMap<u32, (Arc<ConjunctionInfo>, u64)>,
    released_by_rule: BTreeMap<RuleId, u32>,
    generation: u64,
    /// Every accepted rule of the current set (placed or not), by id.
    held: BTreeMap<RuleId, Held>,
    /// The held rules without a priority (waiting for room), and those with FQDN peers: a
    /// change visits these, not every held rule.
    unplaced: BTreeSet<RuleId>,
    with_fqdn: BTreeSet<RuleId>,
    /// The rules of the current view refused before placement (duplicate ids, K8s
    /// NetworkPolicy rules), by id (see [`view_diff`]).
    refused: BTreeMap<RuleId, Vec<SkippedRule>>,
    /// The rules using each (table, priority): a priority is released when its last user goes,
    /// and the rules of a priority that moved are found here.
    users: PriorityUsers,
    /// Number of accepted rules per (table, policy zone): a zone's spare priorities are released
    /// with its last rule.
    zones: BTreeMap<(u8, Priority), usize>,
    /// Placed rules (by conjunction id) per (table, OpenFlow priority). Shared match flows only
    /// merge rules of one such group, so the flows of a set of whole groups do not depend on any
    /// other rule: a change rebuilds the groups it touches, before and after, and diffs them.
    groups: BTreeMap<(u8, u16), BTreeSet<u32>>,
    /// Conjunction id → rule, for the placed rules (the same `Arc` as the held rule's): a
    /// group's rules are found without a lookup by rule id.
    placed: BTreeMap<u32, Arc<CompiledRuleInput>>,
    /// Conjunction ids whose [`Compiler::conjunction`] changed since the last
    /// [`Compiler::take_conjunction_changes`]; `None`: assume every one did.
    conj_changes: Option<BTreeSet<u32>>,
    /// NetworkPolicy flows per table, as of the last [`Compiler::update`] or
    /// [`Compiler::flows`].
    flow_counts: BTreeMap<u8, usize>,
}

/// The rules using each (table, priority), in one ordered set: nearly every priority has a
/// single user, and a set per priority would cost a whole B-tree node for it.
#[derive(Clone, Debug, Default)]
struct PriorityUsers(BTreeSet<((u8, Priority), RuleId)>);

impl PriorityUsers {
    #[cfg(test)]
    fn insert(&mut self, key: (u8, Priority), id: RuleId) {
        self.0.insert((key, id));
    }

    /// Adds uses; into an empty set, built at once (sorted, then bulk-loaded) instead of one
    /// insertion each.
    fn extend(&mut self, uses: impl Iterator<Item = ((u8, Priority), RuleId)>) {
        if self.0.is_empty() {
            // Callers give the uses in rule id order: a stable sort by (table, priority) alone
            // then leaves them in the set's order, and building the set checks that in one walk
            // instead of sorting by rule ids (string comparisons, for the many rules that share
            // a priority). Any other order still builds the same set.
            let mut all: Vec<((u8, Priority), RuleId)> = uses.collect();
            all.sort_by_key(|use_| use_.0);
            ordered::extend_set(&mut self.0, all);
        } else {
            ordered::extend_set(&mut self.0, uses);
        }
    }

    /// Removes one use; whether it was the priority's last one.
    fn remove_last(&mut self, key: (u8, Priority), id: &RuleId) -> bool {
        self.0.remove(&(key, id.clone())) && !self.is_used(key)
    }

    fn is_used(&self, key: (u8, Priority)) -> bool {
        self.of(key).next().is_some()
    }

    /// The rules using `key`, in id order.
    fn of(&self, key: (u8, Priority)) -> impl Iterator<Item = &RuleId> {
        let smallest = RuleId {
            policy_uid: crate::rule::no_policy_uid(),
            direction: Direction::In,
            index: i32::MIN,
            services_key: String::new(),
        };
        self.0
            .range((key, smallest)..)
            .take_while(move |(k, _)| *k == key)
            .map(|(_, id)| id)
    }
}

/// A rule the compiler holds.
#[derive(Clone, Debug)]
struct Held {
    rule: Arc<CompiledRuleInput>,
    table: u8,
    prio: Priority,
    /// Conjunction id and OpenFlow priority, once the rule has a priority.
    placed: Option<(u32, u16)>,
    /// Why it has none. Such a rule is tried again when its table releases priorities.
    error: Option<PriorityError>,
}

/// What one incremental compilation changed ([`Compiler::update`]).
#[derive(Clone, Debug, Default)]
pub struct Update {
    /// The flow_mods that turn the previous rule set's flows into this one's: ADD for new and
    /// changed flows, DELETE_STRICT for flows no longer wanted. Empty if `full`.
    pub mods: Vec<FlowMod>,
    /// The compiler had to start from scratch ([`Compiler::update_or_rebuild`]): no delta is
    /// known, every NetworkPolicy flow must be resynced from [`Compiler::flows`].
    pub full: bool,
    pub skipped: Vec<SkippedRule>,
    /// Per table, OpenFlow priorities of earlier rules that moved (old → new) to make room.
    pub priority_updates: BTreeMap<u8, BTreeMap<u16, u16>>,
    /// Whether rules went away in this pass (their ids are held until reclaimed).
    pub released_any: bool,
    /// Rules that tried to get a priority in this pass and found none (a fresh compiler may
    /// place them, see [`Compiler::update_or_rebuild`]).
    pub failed_now: usize,
}

/// The result of [`Compiler::apply`].
#[derive(Default)]
struct Pass {
    skipped: Vec<SkippedRule>,
    priority_updates: BTreeMap<u8, BTreeMap<u16, u16>>,
    released_any: bool,
    failed_now: usize,
    /// The placed rules of the touched groups before and after (if asked for).
    before: Vec<Group>,
    after: Vec<Group>,
}

/// (tier, policy priority) of a priority: the rules of one policy.
fn zone(p: &Priority) -> Priority {
    Priority::new(p.tier, p.policy, 0)
}

fn priority_of(rule: &CompiledRuleInput) -> Priority {
    Priority::new(rule.tier_priority, rule.policy_priority, rule.rule_priority)
}

fn is_priority_skip(s: &SkippedRule) -> bool {
    matches!(s.reason, CompileError::Priority(_))
}

impl Compiler {
    pub fn new(opts: CompileOptions) -> Self {
        Compiler {
            opts,
            priorities: TablePriorities::new(),
            initialized: false,
            free_ids: BTreeSet::new(),
            next_id: FIRST_CONJ_ID,
            live: BTreeMap::new(),
            released: BTreeMap::new(),
            released_by_rule: BTreeMap::new(),
            generation: 0,
            held: BTreeMap::new(),
            unplaced: BTreeSet::new(),
            with_fqdn: BTreeSet::new(),
            refused: BTreeMap::new(),
            users: PriorityUsers::default(),
            zones: BTreeMap::new(),
            groups: BTreeMap::new(),
            placed: BTreeMap::new(),
            conj_changes: None,
            flow_counts: BTreeMap::new(),
        }
    }

    pub fn options(&self) -> CompileOptions {
        self.opts
    }

    /// The priority assigners (for inspection).
    pub fn priorities(&self) -> &TablePriorities {
        &self.priorities
    }

    /// A conjunction of the current rule set, or of a rule removed since the last
    /// [`Compiler::reclaim_released_ids`].
    pub fn conjunction(&self, conj_id: u32) -> Option<&Arc<ConjunctionInfo>> {
        self.live
            .get(&conj_id)
            .or_else(|| self.released.get(&conj_id).map(|(info, _)| info))
    }

    /// Every conjunction [`Compiler::conjunction`] knows (current and held back).
    pub fn known_conjunctions(&self) -> ConjunctionMap {
        // Both in id order: one merged walk builds the map at once (a live id wins, as an
        // insertion after the released ones would).
        let released = self.released.iter().map(|(&c, (info, _))| (c, info));
        let live = self.live.iter().map(|(&c, info)| (c, info));
        merge_join(released, live, |a, b| a.0.cmp(&b.0))
            .map(|step| match step {
                Joined::Old((c, info)) | Joined::New((c, info)) | Joined::Both(_, (c, info)) => {
                    (c, Arc::clone(info))
                }
            })
            .collect()
    }

    /// The conjunction ids whose [`Compiler::conjunction`] changed since the previous call
    /// (`None`: all of them may have).
    pub fn take_conjunction_changes(&mut self) -> Option<BTreeSet<u32>> {
        self.conj_changes.replace(BTreeSet::new())
    }

    fn conj_changed(&mut self, c: u32) {
        if let Some(set) = &mut self.conj_changes {
            set.insert(c);
        }
    }

    /// Where each placed rule with FQDN peers sits (what the FQDN controller adds its
    /// address clause flows to), by conjunction id.
    pub fn fqdn_placements(&self) -> Vec<FqdnPlacement> {
        let mut out: Vec<FqdnPlacement> = self
            .with_fqdn
            .iter()
            .filter_map(|id| self.held.get(id))
            .filter_map(|h| {
                let fqdn = h.rule.fqdn.as_ref()?;
                let (conj_id, priority) = h.placed?;
                Some(FqdnPlacement {
                    conj_id,
                    table: h.table,
                    priority,
                    n_clauses: 2 + u8::from(h.rule.services.is_some()),
                    selectors: fqdn.selectors.clone(),
                })
            })
            .collect();
        out.sort();
        out
    }

    /// Number of placed rules.
    pub fn rule_count(&self) -> usize {
        self.live.len()
    }

    /// NetworkPolicy flows per table, as of the last [`Compiler::update`] or
    /// [`Compiler::flows`].
    pub fn flow_counts(&self) -> &BTreeMap<u8, usize> {
        &self.flow_counts
    }

    /// Makes the ids of removed rules available again. Call it once their flows have been
    /// gone long enough that no packet-in or statistic can still name them (upstream: 5 s).
    pub fn reclaim_released_ids(&mut self) {
        let released = std::mem::take(&mut self.released);
        self.released_by_rule.clear();
        for c in released.into_keys() {
            self.conj_changed(c);
            self.free_ids.insert(c);
        }
    }

    /// Reclaims the oldest held ids beyond [`MAX_HELD_IDS`].
    fn bound_released(&mut self) {
        if self.released.len() <= MAX_HELD_IDS {
            return;
        }
        let mut by_age: Vec<(u64, u32)> = self.released.iter().map(|(&c, (_, g))| (*g, c)).collect();
        by_age.sort_unstable();
        let excess = self.released.len() - MAX_HELD_IDS;
        for (_, c) in by_age.into_iter().take(excess) {
            if let Some((info, _)) = self.released.remove(&c) {
                self.released_by_rule.remove(&info.rule_id);
            }
            self.conj_changed(c);
            self.free_ids.insert(c);
        }
    }

    fn allocate_id(&mut self, id: &RuleId) -> u32 {
        if let Some(c) = self.released_by_rule.remove(id) {
            self.released.remove(&c);
            return c;
        }
        if let Some(c) = self.free_ids.pop_first() {
            return c;
        }
        let c = self.next_id;
        self.next_id = self.next_id.saturating_add(1);
        c
    }

    /// [`Compiler::compile`], but when one-rule-at-a-time priority registration cannot place a
    /// rule (many policies arriving after the first compilation can exhaust a table's priority
    /// space where registering them all at once would not), the state is dropped and everything
    /// is compiled from scratch: every rule installed beats a minimal diff.
    pub fn compile_or_rebuild(&mut self, rules: &[CompiledRuleInput], round: u16) -> CompileOutput {
        let out = self.compile(rules, round);
        if !out.skipped.iter().any(is_priority_skip) {
            return out;
        }
        tracing::warn!(
            skipped = out.skipped.len(),
            "rule priorities ran out of room incrementally; compiling every rule from scratch"
        );
        *self = Compiler::new(self.opts);
        self.compile(rules, round)
    }

    /// Compiles the complete current rule set. Rules that cannot be compiled are reported in
    /// [`CompileOutput::skipped`]; the others are unaffected.
    pub fn compile(&mut self, rules: &[CompiledRuleInput], round: u16) -> CompileOutput {
        let rules: Vec<Arc<CompiledRuleInput>> = rules.iter().cloned().map(Arc::new).collect();
        let pass = self.apply(&rules, None, false);
        CompileOutput {
            flows: self.flows(round),
            conjunctions: self.live.clone(),
            priority_updates: pass.priority_updates,
            skipped: pass.skipped,
            released: self
                .released
                .iter()
                .map(|(&c, (info, _))| (c, Arc::clone(info)))
                .collect(),
        }
    }

    /// Moves to the complete rule set `rules` (best sorted by [`RuleId`], as the policy cache
    /// sends them) and returns the flow_mods from the previous set's flows to this one's. Rules
    /// are compared by pointer first, so unchanged rules shared with the caller cost next to
    /// nothing; only the flows of changed rules (and of rules whose OpenFlow priority moved)
    /// are rebuilt.
    pub fn update(&mut self, rules: &[Arc<CompiledRuleInput>], round: u16) -> Update {
        let (mut up, delta) = self.update_delta(rules, None, round, true);
        up.mods = self.materialize(delta);
        up
    }

    /// [`Compiler::update`] without building any flow: the change as a [`FlowDelta`] (empty
    /// unless `want_delta`) whose flow_mods are built chunk by chunk when sent; apply its
    /// [`plan::DeltaChunks::count_changes`] afterwards. A caller that resyncs every flow anyway
    /// (a take-over) passes `want_delta = false` and builds [`Compiler::plan`] instead.
    ///
    /// `hint`, when known: the only rule ids whose rules may differ from those of the view the
    /// compiler last moved to (every other rule of `rules` is that view's, and `rules` is sorted
    /// by [`RuleId`], as the policy cache sends them). The change then costs what it touches,
    /// not the size of the view. `None` compares the whole view.
    pub fn update_delta(
        &mut self,
        rules: &[Arc<CompiledRuleInput>],
        hint: Option<&BTreeSet<RuleId>>,
        round: u16,
        want_delta: bool,
    ) -> (Update, FlowDelta) {
        let pass = self.apply(rules, hint, want_delta);
        let delta = FlowDelta::new(pass.before, pass.after, round, self.opts);
        let up = Update {
            mods: Vec::new(),
            full: false,
            skipped: pass.skipped,
            priority_updates: pass.priority_updates,
            released_any: pass.released_any,
            failed_now: pass.failed_now,
        };
        (up, delta)
    }

    /// [`Compiler::update`], but if some rule finds no priority, a fresh compiler (one batch
    /// registration, as at start-up) is tried; if it places more rules it replaces this one and
    /// the result is [`Update::full`]. See [`Compiler::compile_or_rebuild`].
    pub fn update_or_rebuild(&mut self, rules: &[Arc<CompiledRuleInput>], round: u16) -> Update {
        self.update_or_rebuild_hinted(rules, None, round)
    }

    /// [`Compiler::update_or_rebuild`] with a change hint (see [`Compiler::update_delta`]).
    pub fn update_or_rebuild_hinted(
        &mut self,
        rules: &[Arc<CompiledRuleInput>],
        hint: Option<&BTreeSet<RuleId>>,
        round: u16,
    ) -> Update {
        let (mut up, delta) = self.update_delta_or_rebuild(rules, hint, round, true);
        if !up.full {
            up.mods = self.materialize(delta);
        }
        up
    }

    /// All flow_mods of `delta` (adds first), with the flow counts applied.
    fn materialize(&mut self, delta: FlowDelta) -> Vec<FlowMod> {
        let mut chunks = delta.into_chunks(CHUNK_RULES);
        let mut mods: Vec<FlowMod> = chunks.by_ref().flatten().collect();
        self.adjust_flow_counts(chunks.count_changes());
        // Adds first, then deletes: nothing else is needed inside an atomic bundle.
        mods.sort_by_key(|m| m.command != FlowModCommand::Add);
        mods
    }

    /// [`Compiler::update_or_rebuild`] as [`Compiler::update_delta`]: the delta is empty when
    /// the result is [`Update::full`].
    pub fn update_delta_or_rebuild(
        &mut self,
        rules: &[Arc<CompiledRuleInput>],
        hint: Option<&BTreeSet<RuleId>>,
        round: u16,
        want_delta: bool,
    ) -> (Update, FlowDelta) {
        let (up, delta) = self.update_delta(rules, hint, round, want_delta);
        if up.failed_now == 0 {
            // Rules still waiting for room since an earlier pass were compared with a fresh
            // compiler then; nothing new to try.
            return (up, delta);
        }
        let unplaced = up.skipped.iter().filter(|s| is_priority_skip(s)).count();
        let mut fresh = Compiler::new(self.opts);
        let pass = fresh.apply(rules, None, false);
        let fresh_unplaced = pass.skipped.iter().filter(|s| is_priority_skip(s)).count();
        if fresh_unplaced >= unplaced {
            return (up, delta);
        }
        tracing::warn!(
            unplaced,
            fresh_unplaced,
            "rule priorities ran out of room incrementally; compiling every rule from scratch"
        );
        *self = fresh;
        let up = Update {
            mods: Vec::new(),
            full: true,
            skipped: pass.skipped,
            priority_updates: pass.priority_updates,
            released_any: false,
            failed_now: 0,
        };
        (up, FlowDelta::default())
    }

    /// Every NetworkPolicy flow of the current rule set, keyed by identity.
    pub fn flows(&mut self, round: u16) -> FlowSet {
        let resolved: Vec<ResolvedRule<'_>> = self
            .held
            .values()
            .filter_map(|h| {
                h.placed.map(|(conj_id, priority)| ResolvedRule {
                    rule: &h.rule,
                    conj_id,
                    table: h.table,
                    priority,
                })
            })
            .collect();
        let flows = build_sorted(&resolved, round, &self.opts);
        let mut counts = BTreeMap::new();
        for f in &flows {
            *counts.entry(f.table).or_insert(0) += 1;
        }
        self.flow_counts = counts;
        // Sorted input makes the map's bulk build linear.
        flows.into_iter().map(|f| (f.key(), f)).collect()
    }
}

/// A flow's identity, borrowed.
fn identity(f: &Flow) -> (u8, u16, &Match) {
    (f.table, f.priority, &f.matches)
}

fn conjunction_info(r: &CompiledRuleInput, conj_id: u32, table: u8, priority: u16) -> ConjunctionInfo {
    ConjunctionInfo {
        conj_id,
        rule_id: r.id.clone(),
        policy: r.policy.clone(),
        rule_name: r.rule_name.clone(),
        direction: r.direction,
        action: r.action,
        tier_priority: r.tier_priority,
        policy_priority: r.policy_priority,
        table,
        priority,
        enable_logging: r.enable_logging,
        log_label: r.log_label.clone(),
    }
}

/// Whether two rule views hold the same rules: by pointer first (the policy cache shares
/// unchanged rules from one view to the next), by value otherwise.
pub fn same_rules(a: &[Arc<CompiledRuleInput>], b: &[Arc<CompiledRuleInput>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y) || x == y)
}

/// Conjunction ids and their rules' metadata (shared with the compiler).
pub type ConjunctionMap = BTreeMap<u32, Arc<ConjunctionInfo>>;

/// The conjunctions as the packet-in responder reads them.
pub type SharedConjunctions = Arc<ConjunctionMap>;

#[cfg(test)]
mod tests;
