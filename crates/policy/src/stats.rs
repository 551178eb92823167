//! The metric-flow decoding: per-rule counters from a dump of the metric tables, following
//! Antrea's `NetworkPolicyMetrics` (pipeline reference §8.6, §8.10; agent runtime §4.12): only the
//! priority-200 flows of `EgressMetric` and `IngressMetric` count.
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
//! Cost: the dump is two table-filtered dumps ([`metric_filter`]: the two metric tables only,
//! restricted to the NetworkPolicy cookie category), so a scrape reads the metric flows and
//! nothing else (about 15,000 flows for 10,000 rules); the mapping aggregates per conjunction id
//! without allocating, then builds one entry per rule. Upstream filters on the exact cookie of the
//! current round; this agent keeps unchanged flows (and their counters) across rounds, so the
//! filter is on the category and flows with round 0 (not the agent's) are skipped instead.
//!
//! Pure: the flow installer dumps the tables through its switch and hands the flows here.

use std::borrow::Borrow;
use std::collections::HashMap;

use ovs_openflow::{ct_state, FlowFilter, FlowStats};

use crate::compiler::{ConjunctionInfo, ConjunctionMap, METRIC_PRIORITY};
use crate::pipeline::fields::{cookie, ct_label, reg, reg0, CookieCategory, CATEGORY_MASK, ROUND_MASK};
use crate::pipeline::table;
use crate::report::{RuleStats, RuleStatsSnapshot};
use crate::rule::{CompiledRuleInput, Direction};

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
            None => tracing::debug!(conj_id, "metric flow of an unknown conjunction; not reported"),
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
/// view): what the flow installer's `GetRuleStats` computes from a dump. A tier priority is a policy's, so it is
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
pub fn metric_filter(table: u8) -> FlowFilter {
    FlowFilter::table(table).cookie(cookie(0, CookieCategory::NetworkPolicy), CATEGORY_MASK)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::compiler::{compile, CompileOptions};
    use crate::rule::{
        CompiledRuleInput, Peer, PolicyRef, PolicyType, Protocol, RuleAction, RuleId, Service,
    };
    use ovs_openflow::Flow;

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
}
