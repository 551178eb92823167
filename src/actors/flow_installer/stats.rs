//! The flow installer's observability: per-rule counters read from the metric tables
//! ([`GetRuleStats`]), the realization notices sent to the reporter ([`PoliciesRealized`]), and
//! the flow-operation and realization-latency metrics recorded around each bundle.
//!
//! **Rule counters** follow Antrea's `NetworkPolicyMetrics` (pipeline reference §8.6, §8.10;
//! agent runtime §4.12): only the priority-200 flows of `EgressMetric` and `IngressMetric` count.
//! * Allow rules have a `ct_state=+new` and a `ct_state=-new` flow per IP family, matching the
//!   rule's conjunction id in the connection's `ct_label` (egress: bits 32..63, ingress: bits
//!   0..31). Packets and bytes add up over all of them; sessions are the packets of the `+new`
//!   flows (one per connection, as conntrack sees it).
//! * Drop and Reject rules have one protocol-less flow matching `reg0=0x400/0x400,reg3=<id>`:
//!   every packet it counts is dropped, so sessions = packets.
//! * Pass rules have no metric flow and no counters.
//!
//! The counters of every conjunction of one rule (policy uid, rule name, direction) are summed:
//! named ports can split a rule into several conjunctions (one per `services_key`).
//!
//! Cost: two table-filtered dumps (the two metric tables only, restricted to the NetworkPolicy
//! cookie category), sent back to back on the connection, so a scrape reads the metric flows and
//! nothing else (about 15,000 flows for 10,000 rules); the mapping aggregates per conjunction id
//! without allocating, then builds one entry per rule. Upstream filters on the exact cookie of the
//! current round; this agent keeps unchanged flows (and their counters) across rounds, so the
//! filter is on the category and flows with round 0 (not the agent's) are skipped instead.
//!
//! **Flow-operation metrics** count flow_mods, not bundles (upstream counts one operation per
//! bundle and kind): `ovs_flow_ops{operation}` grows by the number of ADD, MODIFY(_STRICT) and
//! DELETE(_STRICT) flow_mods of each committed bundle, `ovs_flow_ops_errors{operation}` by those
//! of a bundle that failed (a bundle is atomic: none of them was applied). The bundle's latency
//! (open to commit reply, in milliseconds) is observed once per operation kind present in it,
//! like upstream.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::time::Instant;

use actix::{ActorFutureExt, Handler, ResponseActFuture, WrapFuture};
use tracing::debug;

use super::FlowInstaller;
use crate::messages::{
    GetRuleStats, PoliciesRealized, PolicyGeneration, RuleStats, RuleStatsError, RuleStatsSnapshot,
};
use crate::ovs::openflow::{
    ct_state, FlowFilter, FlowMod, FlowModChunks, FlowModCommand, FlowStats, OfError, Switch,
};
use crate::policy::compiler::{ConjunctionInfo, ConjunctionMap, METRIC_PRIORITY};
use crate::policy::pipeline::fields::{
    cookie, ct_label, reg, reg0, CookieCategory, CATEGORY_MASK, ROUND_MASK,
};
use crate::policy::pipeline::table;
use crate::policy::rule::{CompiledRuleInput, Direction};
use crate::telemetry::AgentMetrics;

/// What one metric flow counted, attributed to a conjunction id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricSample {
    pub conj_id: u32,
    pub packets: u64,
    pub bytes: u64,
    pub sessions: u64,
}

/// The conjunction id and counters of one NetworkPolicy metric flow; `None` for any other flow
/// (the tables' miss flows, flows of another category or of round 0, malformed matches).
pub fn metric_sample(fs: &FlowStats) -> Option<MetricSample> {
    let f = &fs.flow;
    let egress = match f.table {
        table::EGRESS_METRIC => true,
        table::INGRESS_METRIC => false,
        _ => return None,
    };
    if f.priority != METRIC_PRIORITY
        || f.cookie & CATEGORY_MASK != cookie(0, CookieCategory::NetworkPolicy)
        || f.cookie & ROUND_MASK == 0
    {
        return None;
    }
    let m = &f.matches;
    if let Some(label) = m.ct_label {
        // Allow: the id is the label's word of the rule's direction.
        let (want_mask, shift) = if egress {
            (ct_label::EGRESS_MASK, ct_label::EGRESS_SHIFT)
        } else {
            (ct_label::INGRESS_MASK, ct_label::INGRESS_SHIFT)
        };
        if label.mask != Some(want_mask) {
            return None;
        }
        let conj_id = u32::try_from((label.value & want_mask) >> shift).ok()?;
        let new = m
            .ct_state
            .is_some_and(|s| s.mask & ct_state::NEW != 0 && s.value & ct_state::NEW != 0);
        return Some(MetricSample {
            conj_id,
            packets: fs.packet_count,
            bytes: fs.byte_count,
            sessions: if new { fs.packet_count } else { 0 },
        });
    }
    // Drop/Reject: reg0's deny mark and the id in reg3.
    let deny = m
        .regs
        .get(&reg::MARKS)
        .is_some_and(|r| r.value & reg0::AP_DENY.0 != 0 && r.mask.unwrap_or(u32::MAX) & reg0::AP_DENY.1 != 0);
    let id = m.regs.get(&reg::DENY_CONJ)?;
    if !deny || id.mask.is_some_and(|mask| mask != u32::MAX) || id.value == 0 {
        return None;
    }
    Some(MetricSample {
        conj_id: id.value,
        packets: fs.packet_count,
        bytes: fs.byte_count,
        sessions: fs.packet_count,
    })
}

/// Per-rule counters from a dump of the metric tables: each metric flow is attributed to its
/// conjunction (`conjunctions`: the compiler's view, current rules and recently removed ones),
/// and the conjunctions of one rule (policy uid, rule name, direction) are summed. `tier_of`
/// gives the tier priority of a conjunction's rule, and is asked in policy uid order; a rule
/// it does not know (its policy left the view since the dump was taken) is left out, as are
/// flows naming no known conjunction. Sorted by policy uid, rule name, direction.
pub fn rule_stats_from_flows<'a>(
    flows: &[FlowStats],
    conjunctions: &'a ConjunctionMap,
    mut tier_of: impl FnMut(&'a ConjunctionInfo) -> Option<i32>,
) -> RuleStatsSnapshot {
    // Sorting flat vectors (no tree or hash map per entry) keeps a 10,000-rule scrape cheap.
    let mut samples: Vec<MetricSample> = flows.iter().filter_map(metric_sample).collect();
    samples.sort_unstable_by_key(|s| s.conj_id);
    let mut per_conj: Vec<(&ConjunctionInfo, MetricSample)> = Vec::with_capacity(samples.len() / 2 + 1);
    for group in samples.chunk_by(|a, b| a.conj_id == b.conj_id) {
        let conj_id = group[0].conj_id;
        match conjunctions.get(&conj_id) {
            Some(info) => per_conj.push((info, sum(group))),
            None => debug!(conj_id, "metric flow of an unknown conjunction; not reported"),
        }
    }
    fn key(info: &ConjunctionInfo) -> (&str, &str, Direction) {
        (info.policy.uid.as_str(), info.rule_name.as_str(), info.direction)
    }
    per_conj.sort_unstable_by(|a, b| key(a.0).cmp(&key(b.0)).then(a.0.conj_id.cmp(&b.0.conj_id)));
    let mut rules: Vec<RuleStats> = Vec::with_capacity(per_conj.len());
    for group in per_conj.chunk_by(|a, b| key(a.0) == key(b.0)) {
        let info = group[0].0;
        let Some(tier_priority) = tier_of(info) else {
            continue;
        };
        let total = sum(group.iter().map(|(_, s)| s));
        rules.push(RuleStats {
            policy: info.policy.clone(),
            rule_name: info.rule_name.clone(),
            direction: info.direction,
            action: info.action,
            tier_priority,
            packets: total.packets,
            bytes: total.bytes,
            sessions: total.sessions,
        });
    }
    RuleStatsSnapshot { rules }
}

/// The counters of `samples` added up (saturating: a counter never wraps into a small number).
fn sum<'a>(samples: impl IntoIterator<Item = &'a MetricSample>) -> MetricSample {
    samples
        .into_iter()
        .fold(MetricSample::default(), |acc, s| MetricSample {
            conj_id: s.conj_id,
            packets: acc.packets.saturating_add(s.packets),
            bytes: acc.bytes.saturating_add(s.bytes),
            sessions: acc.sessions.saturating_add(s.sessions),
        })
}

/// [`rule_stats_from_flows`] with the tier priorities of `rules` (the flow installer's rule
/// view): what [`GetRuleStats`] computes from a dump. A tier priority is a policy's, so it is
/// looked up once per policy: by binary search in the view, which `RulesChanged` sends sorted by
/// rule id (so by policy uid first), or, for an unsorted view, in a hash index.
pub fn rule_stats_for<R: Borrow<CompiledRuleInput>>(
    flows: &[FlowStats],
    conjunctions: &ConjunctionMap,
    rules: &[R],
) -> RuleStatsSnapshot {
    fn uid<R: Borrow<CompiledRuleInput>>(r: &R) -> &str {
        r.borrow().id.policy_uid.as_ref()
    }
    let index: Option<HashMap<&str, i32>> = if rules.is_sorted_by(|a, b| uid(a) <= uid(b)) {
        None
    } else {
        Some(rules.iter().map(|r| (uid(r), r.borrow().tier_priority)).collect())
    };
    let lookup = |want: &str| -> Option<i32> {
        match &index {
            Some(index) => index.get(want).copied(),
            None => {
                let i = rules.partition_point(|r| uid(r) < want);
                rules
                    .get(i)
                    .filter(|r| uid(*r) == want)
                    .map(|r| r.borrow().tier_priority)
            }
        }
    };
    // Asked in policy uid order: remember the last policy's answer.
    let mut last: Option<(&str, Option<i32>)> = None;
    rule_stats_from_flows(flows, conjunctions, |info| {
        let want = info.rule_id.policy_uid.as_ref();
        match last {
            Some((u, tier)) if u == want => tier,
            _ => {
                let tier = lookup(want);
                last = Some((want, tier));
                tier
            }
        }
    })
}

/// The filter selecting the NetworkPolicy flows of one metric table.
fn metric_filter(table: u8) -> FlowFilter {
    FlowFilter::table(table).cookie(cookie(0, CookieCategory::NetworkPolicy), CATEGORY_MASK)
}

/// Every NetworkPolicy flow of `EgressMetric` and `IngressMetric`, with its counters: two
/// table-filtered dumps, in flight together.
pub async fn dump_metric_flows(switch: &dyn Switch) -> Result<Vec<FlowStats>, OfError> {
    let (mut egress, ingress) = futures::try_join!(
        switch.dump_flows(metric_filter(table::EGRESS_METRIC)),
        switch.dump_flows(metric_filter(table::INGRESS_METRIC)),
    )?;
    egress.extend(ingress);
    Ok(egress)
}

impl Handler<GetRuleStats> for FlowInstaller {
    type Result = ResponseActFuture<Self, Result<RuleStatsSnapshot, RuleStatsError>>;

    /// Dumps the metric tables without holding the actor (other messages, including syncs, are
    /// handled meanwhile), then maps the flows to rules with the rule view current at that point.
    fn handle(&mut self, _: GetRuleStats, _: &mut Self::Context) -> Self::Result {
        let switch = match &self.session {
            None => return Box::pin(actix::fut::ready(Err(RuleStatsError::NotConnected))),
            Some(s) if !s.synced => {
                // Before the first sync the switch may hold a previous run's flows, whose
                // conjunction ids this compiler has not assigned.
                return Box::pin(actix::fut::ready(Err(RuleStatsError::NotSynced)));
            }
            Some(s) => s.switch.clone(),
        };
        let dump = async move { dump_metric_flows(switch.as_ref()).await };
        Box::pin(dump.into_actor(self).map(|res, act, _| {
            let flows = res.map_err(RuleStatsError::Switch)?;
            let conjunctions = act.conjunctions_tx.borrow().clone();
            let rules = act.view.rules().map(|r| &**r).unwrap_or_default();
            Ok(rule_stats_for(&flows, &conjunctions, rules))
        }))
    }
}

/// The last notice sent, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, actix::Message)]
#[rtype(result = "Option<PoliciesRealized>")]
pub struct GetLastRealized;

impl Handler<GetLastRealized> for FlowInstaller {
    type Result = Option<PoliciesRealized>;
    fn handle(&mut self, _: GetLastRealized, _: &mut Self::Context) -> Self::Result {
        self.realization.last_sent.clone()
    }
}

/// Which policies the rule view names, and which notice went out last.
#[derive(Debug, Default)]
pub(super) struct Realization {
    /// The policies and sync epoch of the latest `RulesChanged`.
    view: Option<PoliciesRealized>,
    last_sent: Option<PoliciesRealized>,
}

impl Realization {
    /// Records the policies of a new rule view (whether or not its rules changed: a generation
    /// bump alone must be reported too).
    pub(super) fn set_view(&mut self, policies: Vec<PolicyGeneration>, sync_epoch: u64) {
        let same = self
            .view
            .as_ref()
            .is_some_and(|v| v.sync_epoch == sync_epoch && *v.policies == *policies);
        if !same {
            self.view = Some(PoliciesRealized {
                policies: policies.into(),
                sync_epoch,
            });
        }
    }

    /// The view a sync is about to realize (captured when the sync computes its flows, so the
    /// notice names that view even if a newer one arrives before the commit).
    pub(super) fn current(&self) -> Option<PoliciesRealized> {
        self.view.clone()
    }
}

impl FlowInstaller {
    /// The flows of `view` are in the switch: tell the reporter.
    pub(super) fn notify_realized(&mut self, view: Option<PoliciesRealized>) {
        let Some(view) = view else {
            return;
        };
        let view = self.with_not_installed(view);
        if let Some(reporter) = &self.outputs.realized {
            reporter.do_send(view.clone());
        }
        self.realization.last_sent = Some(view);
    }

    /// The notice with the rules the compiler could not place added to their policies'
    /// `not_enforced` message (NetworkPolicyStatus `realizationFailure`).
    fn with_not_installed(&self, view: PoliciesRealized) -> PoliciesRealized {
        if self.not_installed.is_empty() {
            return view;
        }
        let mut by_policy: HashMap<&str, Vec<String>> = HashMap::new();
        for (id, why) in &self.not_installed {
            by_policy.entry(id.policy_uid.as_ref()).or_default().push(format!(
                "rules[{}] ({:?}): not installed ({why}): it has no flows, so it allows nothing and drops nothing",
                id.index, id.direction
            ));
        }
        let mut policies = view.policies.to_vec();
        for p in &mut policies {
            if let Some(lines) = by_policy.get(p.uid.as_str()) {
                let mut message = p.not_enforced.take().unwrap_or_default();
                for line in lines {
                    if !message.is_empty() {
                        message.push_str("; ");
                    }
                    message.push_str(line);
                }
                p.not_enforced = Some(message);
            }
        }
        PoliciesRealized {
            policies: policies.into(),
            sync_epoch: view.sync_epoch,
        }
    }

    /// Sends the last notice again (after the reporter restarted).
    pub(super) fn resend_realized(&mut self) {
        let last = self.realization.last_sent.clone();
        self.notify_realized(last);
    }
}

/// The flow_mods of one bundle by operation kind (Antrea's label values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub add: u64,
    pub modify: u64,
    pub delete: u64,
}

impl OpCounts {
    #[cfg(test)]
    pub fn of(mods: &[FlowMod]) -> Self {
        let mut c = OpCounts::default();
        c.add_all(mods);
        c
    }

    fn add_all(&mut self, mods: &[FlowMod]) {
        for m in mods {
            match m.command {
                FlowModCommand::Add => self.add += 1,
                FlowModCommand::Modify | FlowModCommand::ModifyStrict => self.modify += 1,
                FlowModCommand::Delete | FlowModCommand::DeleteStrict => self.delete += 1,
            }
        }
    }

    fn kinds(&self) -> [(&'static str, u64); 3] {
        [
            ("add", self.add),
            ("modify", self.modify),
            ("delete", self.delete),
        ]
    }

    /// Records one bundle's outcome and latency.
    pub fn record(&self, metrics: &AgentMetrics, ok: bool, latency_ms: f64) {
        let counter = if ok {
            &metrics.ovs_flow_ops
        } else {
            &metrics.ovs_flow_ops_errors
        };
        for (op, n) in self.kinds().into_iter().filter(|(_, n)| *n > 0) {
            counter.with_label_values(&[op]).inc_by(n);
            metrics
                .ovs_flow_ops_latency
                .with_label_values(&[op])
                .observe(latency_ms);
        }
    }
}

/// Sends the flow_mods of `chunks` in one bundle, chunk by chunk
/// ([`Switch::bundle_chunks`]), and records the flow-operation metrics; how many were sent.
pub(super) async fn timed_bundle_chunks(
    switch: &dyn Switch,
    chunks: &mut FlowModChunks<'_>,
    metrics: &AgentMetrics,
) -> Result<usize, OfError> {
    let mut counting = Counting {
        inner: chunks,
        counts: OpCounts::default(),
    };
    let started = Instant::now();
    let res = switch.bundle_chunks(&mut counting).await;
    let counts = counting.counts;
    if counts.add + counts.modify + counts.delete > 0 {
        counts.record(metrics, res.is_ok(), started.elapsed().as_secs_f64() * 1000.0);
    }
    res
}

/// Counts the flow_mods of the chunks passing through.
struct Counting<'a, 'b> {
    inner: &'a mut FlowModChunks<'b>,
    counts: OpCounts,
}

impl Iterator for Counting<'_, '_> {
    type Item = Vec<FlowMod>;

    fn next(&mut self) -> Option<Vec<FlowMod>> {
        let chunk = self.inner.next()?;
        self.counts.add_all(&chunk);
        Some(chunk)
    }
}

/// Observes a realization latency given in milliseconds (the histogram is in seconds).
pub(super) fn observe_realization(metrics: &AgentMetrics, realization_ms: f64) {
    metrics
        .realization_latency
        .with_label_values::<&str>(&[])
        .observe(realization_ms / 1000.0);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ovs::openflow::Flow;
    use crate::policy::compiler::{compile, CompileOptions};
    use crate::policy::rule::{
        CompiledRuleInput, Peer, PolicyRef, PolicyType, Protocol, RuleAction, RuleId, Service,
    };

    fn rule(
        uid: &str,
        name: &str,
        index: i32,
        direction: Direction,
        action: RuleAction,
        key: &str,
    ) -> CompiledRuleInput {
        let ext = Peer::Cidr("10.1.0.0/16".parse().expect("cidr"));
        let ext6 = Peer::Cidr("fd00:1::/64".parse().expect("cidr"));
        let (from, to) = match direction {
            Direction::In => (vec![ext, ext6], vec![Peer::OfPort(3)]),
            Direction::Out => (vec![Peer::OfPort(3)], vec![ext, ext6]),
        };
        CompiledRuleInput {
            id: RuleId {
                policy_uid: uid.into(),
                direction,
                index,
                services_key: key.into(),
            },
            policy: PolicyRef {
                policy_type: PolicyType::AntreaNetworkPolicy,
                namespace: "ns".into(),
                name: format!("name-{uid}"),
                uid: uid.into(),
            },
            rule_name: name.into(),
            direction,
            action,
            tier_priority: 250,
            policy_priority: 1.0,
            rule_priority: index,
            max_rule_priority: 3,
            from,
            to,
            services: Some(vec![Service::port(Protocol::Tcp, 80 + index as u16)]),
            enable_logging: false,
            log_label: String::new(),
            fqdn: None,
        }
    }

    /// The rules of the tests: an Allow ingress rule split in two by named ports, an egress
    /// Allow, a Drop, a Reject and a Pass.
    fn rules() -> Vec<CompiledRuleInput> {
        vec![
            rule("p1", "allow-in", 0, Direction::In, RuleAction::Allow, "a"),
            rule("p1", "allow-in", 0, Direction::In, RuleAction::Allow, "b"),
            rule("p1", "drop-in", 1, Direction::In, RuleAction::Drop, ""),
            rule("p1", "allow-out", 0, Direction::Out, RuleAction::Allow, ""),
            rule("p2", "reject-out", 0, Direction::Out, RuleAction::Reject, ""),
            rule("p2", "pass-in", 0, Direction::In, RuleAction::Pass, ""),
        ]
    }

    fn stats_of(flow: &Flow, packets: u64, bytes: u64) -> FlowStats {
        FlowStats {
            flow: flow.clone(),
            packet_count: packets,
            byte_count: bytes,
            duration: std::time::Duration::ZERO,
            idle_age: None,
            flags: 0,
            importance: 0,
        }
    }

    #[test]
    fn each_metric_flow_is_attributed_and_rules_are_summed() {
        let rules = rules();
        let out = compile(&rules, 3, CompileOptions::default());
        let metric: Vec<&Flow> = out
            .flows
            .values()
            .filter(|f| f.table == table::EGRESS_METRIC || f.table == table::INGRESS_METRIC)
            .collect();
        // Allow: 2 per family (3 Allow conjunctions, dual-stack); Drop and Reject: 1; Pass: 0.
        assert_eq!(metric.len(), 3 * 4 + 2);
        // Counters: each flow gets packets = 1 + its index, bytes = 100 x packets; the +new ones
        // are recognisable by their ct_state.
        let dump: Vec<FlowStats> = metric
            .iter()
            .enumerate()
            .map(|(i, f)| stats_of(f, i as u64 + 1, (i as u64 + 1) * 100))
            .collect();
        // Expected sums, computed from the flows themselves.
        let mut want: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        for s in &dump {
            let sample = metric_sample(s).expect("every metric flow of a rule is recognised");
            let info = &out.conjunctions[&sample.conj_id];
            let e = want.entry(info.rule_name.as_str()).or_default();
            e.0 += s.packet_count;
            e.1 += s.byte_count;
            let new = s
                .flow
                .matches
                .ct_state
                .is_some_and(|c| c.value & ct_state::NEW != 0);
            let deny = s.flow.matches.ct_label.is_none();
            if new || deny {
                e.2 += s.packet_count;
            }
        }
        let tiers: HashMap<&RuleId, i32> = rules.iter().map(|r| (&r.id, r.tier_priority)).collect();
        let snap = rule_stats_from_flows(&dump, &out.conjunctions, |info| tiers.get(&info.rule_id).copied());
        let got: Vec<(&str, &str, Direction, RuleAction)> = snap
            .rules
            .iter()
            .map(|r| (r.policy.uid.as_str(), r.rule_name.as_str(), r.direction, r.action))
            .collect();
        assert_eq!(
            got,
            vec![
                ("p1", "allow-in", Direction::In, RuleAction::Allow),
                ("p1", "allow-out", Direction::Out, RuleAction::Allow),
                ("p1", "drop-in", Direction::In, RuleAction::Drop),
                ("p2", "reject-out", Direction::Out, RuleAction::Reject),
            ],
            "one entry per rule, the two conjunctions of allow-in merged, no Pass rule"
        );
        for r in &snap.rules {
            assert_eq!(
                (r.packets, r.bytes, r.sessions),
                want[r.rule_name.as_str()],
                "{}",
                r.rule_name
            );
            assert_eq!(r.tier_priority, 250);
        }
        // allow-in is 2 conjunctions x 2 families x (+new, -new).
        let allow_in = &snap.rules[0];
        assert!(allow_in.sessions > 0 && allow_in.sessions < allow_in.packets);
        // Deny rules: sessions = packets.
        assert_eq!(snap.rules[2].sessions, snap.rules[2].packets);
    }

    #[test]
    fn the_tier_comes_from_the_rule_view_sorted_or_not() {
        let mut rules = rules();
        // Policy p2 (reject-out, pass-in) is in another tier.
        for r in rules.iter_mut().filter(|r| r.policy.uid == "p2") {
            r.tier_priority = 50;
        }
        let out = compile(&rules, 1, CompileOptions::default());
        let dump: Vec<FlowStats> = out.flows.values().map(|f| stats_of(f, 2, 20)).collect();
        let tiers = |snap: &RuleStatsSnapshot| -> Vec<(String, i32)> {
            snap.rules
                .iter()
                .map(|r| (r.rule_name.clone(), r.tier_priority))
                .collect()
        };
        let mut sorted = rules.clone();
        sorted.sort_by(|a, b| a.id.cmp(&b.id));
        let mut reversed = sorted.clone();
        reversed.reverse();
        let a = rule_stats_for(&dump, &out.conjunctions, &sorted);
        let b = rule_stats_for(&dump, &out.conjunctions, &reversed);
        let arcs: Vec<std::sync::Arc<CompiledRuleInput>> =
            sorted.iter().cloned().map(std::sync::Arc::new).collect();
        let c = rule_stats_for(&dump, &out.conjunctions, &arcs);
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(
            tiers(&a),
            vec![
                ("allow-in".to_string(), 250),
                ("allow-out".to_string(), 250),
                ("drop-in".to_string(), 250),
                ("reject-out".to_string(), 50),
            ]
        );
        // The rules of a policy no longer in the view are not reported.
        for view in [&mut sorted, &mut reversed] {
            view.retain(|r| r.policy.uid != "p2");
            let names: Vec<String> = rule_stats_for(&dump, &out.conjunctions, view)
                .rules
                .into_iter()
                .map(|r| r.rule_name)
                .collect();
            assert_eq!(names, ["allow-in", "allow-out", "drop-in"]);
        }
    }

    #[test]
    fn sessions_count_only_new_connections_and_deny_packets() {
        let rules = rules();
        let out = compile(&rules, 1, CompileOptions::upstream());
        let conj = |name: &str| {
            out.conjunctions
                .values()
                .find(|c| c.rule_name == name)
                .map(|c| c.conj_id)
                .expect("rule compiled")
        };
        let allow_out = conj("allow-out");
        let mut samples: Vec<MetricSample> = out
            .flows
            .values()
            .map(|f| stats_of(f, 7, 70))
            .filter_map(|s| metric_sample(&s))
            .collect();
        samples.sort_by_key(|s| (s.conj_id, s.sessions));
        let of_allow_out: Vec<&MetricSample> = samples.iter().filter(|s| s.conj_id == allow_out).collect();
        assert_eq!(of_allow_out.len(), 2, "IPv4 only: one +new and one -new flow");
        assert_eq!((of_allow_out[0].sessions, of_allow_out[1].sessions), (0, 7));
        let drop = samples
            .iter()
            .find(|s| s.conj_id == conj("drop-in"))
            .expect("drop metric flow");
        assert_eq!((drop.packets, drop.bytes, drop.sessions), (7, 70, 7));
    }

    #[test]
    fn foreign_and_unknown_flows_are_ignored() {
        let rules = rules();
        let out = compile(&rules, 2, CompileOptions::default());
        let some_metric = out
            .flows
            .values()
            .find(|f| f.table == table::INGRESS_METRIC)
            .expect("a metric flow")
            .clone();
        // Round 0 (not the agent's), another category, another priority, another table.
        let mut foreign = Vec::new();
        let mut f = some_metric.clone();
        f.cookie &= !ROUND_MASK;
        foreign.push(f);
        let mut f = some_metric.clone();
        f.cookie = cookie(2, CookieCategory::Default);
        foreign.push(f);
        let mut f = some_metric.clone();
        f.priority = 0;
        foreign.push(f);
        let mut f = some_metric.clone();
        f.table = table::ANTREA_POLICY_INGRESS_RULE;
        foreign.push(f);
        for f in &foreign {
            assert_eq!(metric_sample(&stats_of(f, 5, 5)), None, "{f:?}");
        }
        // A known flow whose conjunction is unknown, or whose rule has left the view.
        let dump = vec![stats_of(&some_metric, 5, 500)];
        let empty = BTreeMap::new();
        assert!(rule_stats_from_flows(&dump, &empty, |_| Some(1)).rules.is_empty());
        assert!(rule_stats_from_flows(&dump, &out.conjunctions, |_| None)
            .rules
            .is_empty());
        assert_eq!(
            rule_stats_from_flows(&dump, &out.conjunctions, |_| Some(1))
                .rules
                .len(),
            1
        );
    }

    #[test]
    fn flow_mods_are_counted_per_operation() {
        let f = Flow::new(1, 10, crate::ovs::openflow::Match::new());
        let mut modify = FlowMod::add(f.clone());
        modify.command = FlowModCommand::ModifyStrict;
        let mods = vec![
            FlowMod::add(f.clone()),
            FlowMod::add(f.clone()),
            modify,
            FlowMod::delete_strict(f.clone()),
            FlowMod::delete_by_cookie(1 << 48, ROUND_MASK),
        ];
        let c = OpCounts::of(&mods);
        assert_eq!(
            c,
            OpCounts {
                add: 2,
                modify: 1,
                delete: 2
            }
        );
        let metrics = AgentMetrics::new();
        c.record(&metrics, true, 4.0);
        OpCounts {
            add: 3,
            modify: 0,
            delete: 0,
        }
        .record(&metrics, false, 2.0);
        assert_eq!(metrics.ovs_flow_ops.with_label_values(&["add"]).get(), 2);
        assert_eq!(metrics.ovs_flow_ops.with_label_values(&["modify"]).get(), 1);
        assert_eq!(metrics.ovs_flow_ops.with_label_values(&["delete"]).get(), 2);
        assert_eq!(metrics.ovs_flow_ops_errors.with_label_values(&["add"]).get(), 3);
        assert_eq!(
            metrics.ovs_flow_ops_errors.with_label_values(&["delete"]).get(),
            0
        );
        let latency = |op: &str| {
            metrics
                .ovs_flow_ops_latency
                .with_label_values(&[op])
                .get_sample_count()
        };
        assert_eq!((latency("add"), latency("modify"), latency("delete")), (2, 1, 1));
        observe_realization(&metrics, 250.0);
        let h = metrics.realization_latency.with_label_values::<&str>(&[]);
        assert_eq!(h.get_sample_count(), 1);
        assert!((h.get_sample_sum() - 0.25).abs() < 1e-9);
    }
}
