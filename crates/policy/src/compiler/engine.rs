//! The conjunction engine: a pure function from placed rules ([`ResolvedRule`]) to flows. One
//! clause match flow per (table, priority, match), shared by the rules of that group with one
//! `conjunction(...)` action each; the action flows per rule (per IP family for Allow); the
//! metric flows; and the port-range masking of services.

use std::collections::{BTreeMap, HashMap};

use ipnet::IpNet;

use crate::pipeline::fields::{cookie, ct_label, operation, reg, reg0, reg2, CookieCategory};
use crate::pipeline::{self, table, Family, CT_ZONE_V4, CT_ZONE_V6};
use crate::rule::{is_egress_table, Peer, Protocol, RuleAction, Service};
use ovs_openflow::{
    ct_state, eth_type, ip_proto, Action, CtAction, CtStateMatch, CtZone, Flow, Masked, Match, SetField,
};

use super::{identity, CompileOptions, ResolvedRule, METRIC_PRIORITY};

fn family_eth_type(f: Family) -> u16 {
    match f {
        Family::V4 => eth_type::IPV4,
        Family::V6 => eth_type::IPV6,
    }
}

fn family_zone(f: Family) -> u16 {
    match f {
        Family::V4 => CT_ZONE_V4,
        Family::V6 => CT_ZONE_V6,
    }
}

fn set_reg(idx: u8, value: u32, mask: Option<u32>) -> Action {
    Action::SetField(SetField::Reg { idx, value, mask })
}

/// The tables and groups the action flows jump to.
pub(super) struct Targets {
    /// Metric table → the table after it.
    pub(super) metric_next: BTreeMap<u8, u8>,
    /// Target table → logging group (bucket 0 resubmits there).
    pub(super) groups: BTreeMap<u8, u32>,
}

impl Targets {
    pub(super) fn new() -> Self {
        let metric_next = pipeline::tables()
            .into_iter()
            .filter_map(|t| t.miss_next.map(|n| (t.id, n)))
            .collect();
        let groups = pipeline::network_policy_groups()
            .into_iter()
            .filter_map(|g| match g.buckets.first().map(Vec::as_slice) {
                Some(
                    [Action::Resubmit {
                        in_port: None,
                        table: Some(t),
                    }],
                ) => Some((*t, g.group_id)),
                _ => None,
            })
            .collect();
        Targets { metric_next, groups }
    }
}

/// The destination-port matches of a service: `None` = no port match.
fn port_matches(port: Option<u16>, end: Option<u16>) -> Vec<Option<Masked<u16>>> {
    match (port, end) {
        (None, _) | (Some(0), None) => vec![None],
        (Some(p), Some(e)) if e > p => port_bit_ranges(p, e)
            .into_iter()
            .map(|(v, m)| match m {
                // All ports: no match at all (as OVS stores it).
                0 => None,
                0xffff => Some(Masked::exact(v)),
                _ => Some(Masked::new(v, m)),
            })
            .collect(),
        (Some(0), Some(_)) => vec![None],
        (Some(p), _) => vec![Some(Masked::exact(p))],
    }
}

/// Antrea's `PortRange.BitwiseMatch` (from go-openvswitch): `start..=end` as `(value, mask)`
/// pairs, `mask == 0xffff` for a single port, in ascending order. Empty if `start > end`.
/// Unlike upstream, a range may start at 0.
pub fn port_bit_ranges(start: u16, end: u16) -> Vec<(u16, u16)> {
    fn rec(start: u32, end: u32, out: &mut Vec<(u16, u16)>) {
        if start == end {
            out.push((start as u16, 0xffff));
            return;
        }
        let window = end - start + 1;
        let mut bits = 31 - window.leading_zeros();
        let (range_start, range_end, len) = loop {
            let len = (1u32 << bits) - 1;
            let rs = end & !len;
            let re = rs + len;
            if re <= end || bits == 0 {
                break (rs, re, len);
            }
            bits -= 1;
        };
        if start != range_start {
            rec(start, range_start - 1, out);
        }
        out.push((range_start as u16, (0xffff ^ len) as u16));
        if end != range_end {
            rec(range_end + 1, end, out);
        }
    }
    let mut out = Vec::new();
    if start <= end {
        rec(u32::from(start), u32::from(end), &mut out);
    }
    out
}

/// One element of a clause, in a compact form that identifies its match: the key of the shared
/// match-flow map (hashing and comparing whole [`Match`]es is what made compiling slow).
/// Distinct elements have distinct matches: a /0 of either side is [`Elem::AnyIp`], prefixes
/// are truncated and port masks are in OVS's stored form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Elem {
    AnyIp {
        v6: bool,
    },
    Src(IpNet),
    Dst(IpNet),
    InPort(u32),
    TargetPort(u32),
    Service {
        v6: bool,
        proto: u8,
        dst: Option<Masked<u16>>,
        src: Option<Masked<u16>>,
        icmp_type: Option<u8>,
        icmp_code: Option<u8>,
    },
}

impl Elem {
    fn to_match(self) -> Match {
        let ip = |v6: bool| {
            if v6 {
                Match::new().ipv6()
            } else {
                Match::new().ipv4()
            }
        };
        match self {
            Elem::AnyIp { v6 } => ip(v6),
            Elem::Src(IpNet::V4(n)) => Match::new().ipv4().ipv4_src(n),
            Elem::Src(IpNet::V6(n)) => Match::new().ipv6().ipv6_src(n),
            Elem::Dst(IpNet::V4(n)) => Match::new().ipv4().ipv4_dst(n),
            Elem::Dst(IpNet::V6(n)) => Match::new().ipv6().ipv6_dst(n),
            Elem::InPort(p) => Match::new().in_port(p),
            Elem::TargetPort(p) => Match::new().reg(reg::TARGET_PORT, p, None),
            Elem::Service {
                v6,
                proto,
                dst,
                src,
                icmp_type,
                icmp_code,
            } => {
                let mut m = ip(v6).ip_proto(proto);
                m.tp_dst = dst;
                m.tp_src = src;
                m.icmp_type = icmp_type;
                m.icmp_code = icmp_code;
                m
            }
        }
    }
}

/// The elements of one service for the given families (one per family and port bit-range).
fn service_elems(s: &Service, families: &[Family], out: &mut Vec<Elem>) {
    for &fam in families {
        let v6 = fam == Family::V6;
        let l4 = match s.protocol {
            Protocol::Tcp => ip_proto::TCP,
            Protocol::Udp => ip_proto::UDP,
            Protocol::Sctp => ip_proto::SCTP,
            Protocol::Icmp => {
                out.push(Elem::Service {
                    v6,
                    proto: if v6 { ip_proto::ICMPV6 } else { ip_proto::ICMP },
                    dst: None,
                    src: None,
                    icmp_type: s.icmp_type,
                    icmp_code: s.icmp_code,
                });
                continue;
            }
        };
        let src: Vec<Option<Masked<u16>>> = match s.src_port {
            Some(sp) if sp != 0 => port_matches(Some(sp), s.src_end_port),
            _ => vec![None],
        };
        for dst in port_matches(s.port, s.end_port) {
            for sp in &src {
                out.push(Elem::Service {
                    v6,
                    proto: l4,
                    dst,
                    src: *sp,
                    icmp_type: None,
                    icmp_code: None,
                });
            }
        }
    }
}

/// The matches of one service for the given families.
#[cfg(test)]
pub(super) fn service_matches(s: &Service, families: &[Family]) -> Vec<Match> {
    let mut elems = Vec::new();
    service_elems(s, families, &mut elems);
    elems.into_iter().map(Elem::to_match).collect()
}

/// The element of one address-clause peer; `None` if its family is disabled.
fn peer_elem(peer: &Peer, source: bool, opts: &CompileOptions) -> Option<Elem> {
    Some(match *peer {
        Peer::OfPort(p) if source => Elem::InPort(p),
        Peer::OfPort(p) => Elem::TargetPort(p),
        Peer::Cidr(net) => {
            let v6 = matches!(net, IpNet::V6(_));
            if (v6 && !opts.ipv6) || (!v6 && !opts.ipv4) {
                return None;
            }
            // A /0 is no address match at all, as OVS stores it.
            match (net.prefix_len(), source) {
                (0, _) => Elem::AnyIp { v6 },
                (_, true) => Elem::Src(net.trunc()),
                (_, false) => Elem::Dst(net.trunc()),
            }
        }
    })
}

/// A fast non-cryptographic hasher (FxHash's multiply-rotate) for the shared match-flow map.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = std::hash::BuildHasherDefault<FxHasher>;

/// Shared match flows under construction: (table, priority, element) → conjunction actions.
type SharedMatches = HashMap<(u8, u16, Elem), Vec<(u32, u8, u8)>, FxBuild>;

/// The flows of `rules` (action, metric and shared conjunctive match flows), sorted by identity.
/// Rules must have distinct conjunction ids. Matches are built in the form OVS stores them
/// (see [`ovs_openflow::oxm::normalize_match`]). Pure.
pub fn build_flows(rules: &[ResolvedRule<'_>], round: u16, opts: &CompileOptions) -> Vec<Flow> {
    build_sorted(rules, round, opts)
}

/// Sorts flows by identity: first by table and priority, then each run of one table and
/// priority by match. Comparing whole matches is what costs, and the runs are short (one rule's
/// flows), so this is much cheaper than one sort by [`ovs_openflow::FlowKey`]. An index is sorted and then
/// applied in place, cycle by cycle, so the large flows move once.
fn sort_by_identity(flows: &mut [Flow]) {
    let mut order: Vec<usize> = (0..flows.len()).collect();
    order.sort_unstable_by_key(|&i| (flows[i].table, flows[i].priority));
    for run in order
        .chunk_by_mut(|&a, &b| (flows[a].table, flows[a].priority) == (flows[b].table, flows[b].priority))
    {
        run.sort_unstable_by(|&a, &b| flows[a].matches.cmp(&flows[b].matches));
    }
    // Position k receives the flow at order[k].
    for i in 0..order.len() {
        let mut cur = i;
        loop {
            let next = order[cur];
            order[cur] = cur;
            if next == i || next == cur {
                break;
            }
            flows.swap(cur, next);
            cur = next;
        }
    }
}

/// The flows, sorted by identity, duplicates merged.
pub(super) fn build_sorted(rules: &[ResolvedRule<'_>], round: u16, opts: &CompileOptions) -> Vec<Flow> {
    let c = cookie(round, CookieCategory::NetworkPolicy);
    let families = opts.families();
    let targets = Targets::new();
    let mut shared = SharedMatches::default();
    let mut flows = Vec::with_capacity(5 * rules.len());
    let mut elems = Vec::new();
    for r in rules {
        let n_clauses = 2 + u8::from(r.rule.services.is_some());
        let mut add = |e: Elem, clause: u8| {
            shared
                .entry((r.table, r.priority, e))
                .or_default()
                .push((r.conj_id, clause, n_clauses));
        };
        for peer in &r.rule.from {
            if let Some(e) = peer_elem(peer, true, opts) {
                add(e, 1);
            }
        }
        for peer in &r.rule.to {
            if let Some(e) = peer_elem(peer, false, opts) {
                add(e, 2);
            }
        }
        if let Some(services) = &r.rule.services {
            elems.clear();
            for s in services {
                service_elems(s, &families, &mut elems);
            }
            for e in elems.drain(..) {
                add(e, 3);
            }
        }
        rule_flows(r, c, &families, &targets, &mut flows);
    }
    flows.reserve_exact(shared.len());
    flows.extend(shared.into_iter().map(|((table, priority, e), mut acts)| {
        acts.sort_unstable();
        acts.dedup();
        let mut f = Flow::new(table, priority, e.to_match()).cookie(c);
        f.actions = acts
            .into_iter()
            .map(|(id, clause, n_clauses)| Action::Conjunction {
                id,
                clause,
                n_clauses,
            })
            .collect();
        f
    }));
    sort_by_identity(&mut flows);
    // Distinct elements have distinct matches, and action and metric flows match on their own
    // conjunction id, so identities are unique; should two flows still collide, keep one flow
    // with the conjunction actions of both rather than lose one.
    flows.dedup_by(|later, kept| {
        if identity(later) != identity(kept) {
            return false;
        }
        let extra: Vec<Action> = later
            .actions
            .drain(..)
            .filter(|a| matches!(a, Action::Conjunction { .. }))
            .collect();
        kept.actions.extend(extra);
        kept.actions.sort();
        kept.actions.dedup();
        true
    });
    flows
}

/// The action flow(s) of one rule and its metric flows.
fn rule_flows(r: &ResolvedRule<'_>, c: u64, families: &[Family], targets: &Targets, flows: &mut Vec<Flow>) {
    let id = r.conj_id;
    let egress = is_egress_table(r.table);
    let metric = if egress {
        table::EGRESS_METRIC
    } else {
        table::INGRESS_METRIC
    };
    let conj_reg = if egress {
        reg::EGRESS_CONJ
    } else {
        reg::INGRESS_CONJ
    };
    let logging = r.rule.enable_logging;
    let table_mark = set_reg(
        reg::PACKET_IN_TABLE,
        u32::from(r.table),
        Some(reg2::PACKET_IN_TABLE_MASK),
    );
    let op = |ops: u32| {
        set_reg(
            reg::MARKS,
            ops << reg0::PACKET_IN_OPERATION_SHIFT,
            Some(reg0::PACKET_IN_OPERATION_MASK),
        )
    };
    let disposition = |d: u32| {
        set_reg(
            reg::MARKS,
            d << reg0::DISPOSITION_SHIFT,
            Some(reg0::DISPOSITION_MASK),
        )
    };
    let action_flow = || Flow::new(r.table, r.priority, Match::new().conj_id(id)).cookie(c);
    match r.rule.action {
        RuleAction::Allow => {
            let (label, label_mask) = if egress {
                (u128::from(id) << ct_label::EGRESS_SHIFT, ct_label::EGRESS_MASK)
            } else {
                (u128::from(id) << ct_label::INGRESS_SHIFT, ct_label::INGRESS_MASK)
            };
            for &fam in families {
                let mut f = Flow::new(
                    r.table,
                    r.priority,
                    Match::new().conj_id(id).eth_type(family_eth_type(fam)),
                )
                .cookie(c)
                .action(set_reg(conj_reg, id, None))
                .action(Action::Ct(CtAction {
                    commit: true,
                    table: Some(metric),
                    zone: CtZone::Immediate(family_zone(fam)),
                    exec: vec![Action::SetField(SetField::CtLabel {
                        value: label,
                        mask: Some(label_mask),
                    })],
                }));
                if logging {
                    let (to_ctrl, to_ctrl_mask) = reg0::OUTPUT_TO_CONTROLLER;
                    f = f
                        .action(disposition(reg0::DISPOSITION_ALLOW))
                        .action(set_reg(reg::MARKS, to_ctrl, Some(to_ctrl_mask)))
                        .action(op(u32::from(operation::LOGGING)))
                        .action(table_mark.clone())
                        .goto(table::OUTPUT);
                }
                flows.push(f);
                let next = targets.metric_next.get(&metric).copied();
                for new in [true, false] {
                    let mut m = Match::new()
                        .ct_state(CtStateMatch::of(&[(ct_state::NEW, new)]))
                        .eth_type(family_eth_type(fam));
                    m.ct_label = Some(Masked::new(label, label_mask));
                    let mf = Flow::new(metric, METRIC_PRIORITY, m).cookie(c);
                    flows.push(match next {
                        Some(n) => mf.goto(n),
                        None => mf,
                    });
                }
            }
        }
        RuleAction::Drop | RuleAction::Reject => {
            let reject = r.rule.action == RuleAction::Reject;
            let mut f = action_flow()
                .action(set_reg(reg::DENY_CONJ, id, None))
                .action(set_reg(reg::MARKS, reg0::AP_DENY.0, Some(reg0::AP_DENY.1)));
            if logging {
                f = f.action(disposition(if reject {
                    reg0::DISPOSITION_REJECT
                } else {
                    reg0::DISPOSITION_DROP
                }));
            }
            let group = targets.groups.get(&metric).copied();
            f = match group {
                Some(g) if logging || reject => {
                    let ops = if logging { u32::from(operation::LOGGING) } else { 0 }
                        + if reject { u32::from(operation::REJECT) } else { 0 };
                    f.action(op(ops)).action(table_mark).action(Action::Group(g))
                }
                _ => f.goto(metric),
            };
            flows.push(f);
            let m = Match::new()
                .reg(reg::MARKS, reg0::AP_DENY.0, Some(reg0::AP_DENY.1))
                .reg(reg::DENY_CONJ, id, None);
            flows.push(Flow::new(metric, METRIC_PRIORITY, m).cookie(c));
        }
        RuleAction::Pass => {
            // Continue with the K8s NetworkPolicy table of the direction; from a baseline
            // table (after that one) there is nothing left but the metric table.
            let next = match (egress, r.table) {
                (_, table::EGRESS_DEFAULT_RULE | table::INGRESS_DEFAULT_RULE) => metric,
                (true, _) => table::EGRESS_RULE,
                (false, _) => table::INGRESS_RULE,
            };
            let f = action_flow().action(set_reg(conj_reg, id, None));
            let group = targets.groups.get(&next).copied();
            flows.push(match group {
                Some(g) if logging => f
                    .action(disposition(reg0::DISPOSITION_PASS))
                    .action(op(u32::from(operation::LOGGING)))
                    .action(table_mark)
                    .action(Action::Group(g)),
                _ => f.goto(next),
            });
        }
    }
}
