//! The ExternalNode OpenFlow pipeline: table layout and ids, priorities, and the flows that do not
//! come from NetworkPolicies (default/miss flows, conntrack, output, packet-in, per-interface
//! cross-connect flows, `policyBypassRules`). Pure: every function maps inputs to flows.
//!
//! The layout follows Antrea's production ExternalNode pipeline (tables 0..=16, see the pipeline
//! reference §2.2) with one deliberate deviation: IPv6 is classified as IP and goes through
//! conntrack and the policy tables (upstream sends it through `NonIP`, unfiltered — defect D13).
//! IPv6 neighbour discovery and MLD are link-layer control, like ARP, so they keep taking the
//! `NonIP` cross-connect.
//!
//! The registers, marks and cookie fields the flows use are defined in [`fields`].

pub mod fields;

use std::net::IpAddr;

use ipnet::IpNet;

use crate::bypass::{BypassProtocol, BypassRule, Direction};
/// Also named here by the compiler's golden tests, which stay as they are.
pub use fields::ROUND_MASK;
use fields::{category, cookie, reg, reg0, CookieCategory};
use ovs_openflow::{
    ct_state, eth_type, ip_proto, Action, ControllerAction, CtAction, CtStateMatch, CtZone, Flow, Group,
    Match, Meter, RegRange, SetField,
};

/// A pipeline table: its OpenFlow id, Antrea's name, and what a miss does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub id: u8,
    pub name: &'static str,
    /// `Some(next)` = miss goes to `next`; `None` = miss drops.
    pub miss_next: Option<u8>,
}

/// Table ids of the production ExternalNode pipeline (AntreaPolicy on, L7 off).
pub mod table {
    pub const PIPELINE_ROOT_CLASSIFIER: u8 = 0;
    pub const CONNTRACK_ZONE: u8 = 1;
    pub const CONNTRACK_STATE: u8 = 2;
    pub const EGRESS_SECURITY_CLASSIFIER: u8 = 3;
    pub const ANTREA_POLICY_EGRESS_RULE: u8 = 4;
    pub const EGRESS_RULE: u8 = 5;
    pub const EGRESS_DEFAULT_RULE: u8 = 6;
    pub const EGRESS_METRIC: u8 = 7;
    pub const L2_FORWARDING_CALC: u8 = 8;
    pub const INGRESS_SECURITY_CLASSIFIER: u8 = 9;
    pub const ANTREA_POLICY_INGRESS_RULE: u8 = 10;
    pub const INGRESS_RULE: u8 = 11;
    pub const INGRESS_DEFAULT_RULE: u8 = 12;
    pub const INGRESS_METRIC: u8 = 13;
    pub const CONNTRACK_COMMIT: u8 = 14;
    pub const OUTPUT: u8 = 15;
    pub const NON_IP: u8 = 16;
}

/// Every table of the pipeline in id order. The IP pipeline is a chain (each table's miss goes to
/// the next); the root classifier, `Output` and `NonIP` drop on a miss.
pub fn tables() -> Vec<Table> {
    use table::*;
    let chain: [(u8, &'static str); 15] = [
        (CONNTRACK_ZONE, "ConntrackZone"),
        (CONNTRACK_STATE, "ConntrackState"),
        (EGRESS_SECURITY_CLASSIFIER, "EgressSecurityClassifier"),
        (ANTREA_POLICY_EGRESS_RULE, "AntreaPolicyEgressRule"),
        (EGRESS_RULE, "EgressRule"),
        (EGRESS_DEFAULT_RULE, "EgressDefaultRule"),
        (EGRESS_METRIC, "EgressMetric"),
        (L2_FORWARDING_CALC, "L2ForwardingCalc"),
        (INGRESS_SECURITY_CLASSIFIER, "IngressSecurityClassifier"),
        (ANTREA_POLICY_INGRESS_RULE, "AntreaPolicyIngressRule"),
        (INGRESS_RULE, "IngressRule"),
        (INGRESS_DEFAULT_RULE, "IngressDefaultRule"),
        (INGRESS_METRIC, "IngressMetric"),
        (CONNTRACK_COMMIT, "ConntrackCommit"),
        (OUTPUT, "Output"),
    ];
    let mut out = vec![Table {
        id: PIPELINE_ROOT_CLASSIFIER,
        name: "PipelineRootClassifier",
        miss_next: None,
    }];
    for (i, &(id, name)) in chain.iter().enumerate() {
        let miss_next = chain.get(i + 1).map(|&(next, _)| next);
        out.push(Table { id, name, miss_next });
    }
    out.push(Table {
        id: NON_IP,
        name: "NonIP",
        miss_next: None,
    });
    out
}

/// `(id, name)` pairs for OVSDB `Flow_Table` rows and for rendering.
pub fn table_names() -> Vec<(u8, String)> {
    tables().into_iter().map(|t| (t.id, t.name.to_string())).collect()
}

/// Fixed priorities (pipeline reference §3.5).
pub mod priority {
    pub const HIGH: u16 = 210;
    pub const NORMAL: u16 = 200;
    pub const LOW: u16 = 190;
    pub const MISS: u16 = 0;
    pub const TOP_ANTREA_POLICY: u16 = 64990;
}

/// Conntrack zones.
pub const CT_ZONE_V4: u16 = 0xfff0;
pub const CT_ZONE_V6: u16 = 0xffe6;

/// Packet-in rate-limiting meters (NetworkPolicy, Traceflow, DNS).
pub const METER_NP: u32 = 256;
pub const METER_TF: u32 = 257;
pub const METER_DNS: u32 = 258;

/// The controller id the agent announces and embeds in `controller(...)` actions. Fixed (upstream
/// picks a random one per process) so flows are identical across restarts and replace in place.
pub const CONTROLLER_ID: u16 = 32776;
/// The controller id of the FQDN controller's own connection, named by the DNS interception's
/// `controller(...)` action. OVS sends a packet-in to every connection announcing the action's
/// id: with one id for both connections each would get every packet-in (the flow installer the
/// paused DNS responses, the FQDN controller the Reject and audit ones), twice the traffic on
/// the management socket and DNS packet-ins counted by the installer's responder.
pub const FQDN_CONTROLLER_ID: u16 = 32777;
/// The controller id of the flow installer's connection when the packet-in responder has a
/// connection of its own (announcing [`CONTROLLER_ID`]): no flow names it, so the installer's
/// connection gets no packet-ins, and a Reject reply's packet-out never queues behind a bundle's
/// thousands of messages on the installer's connection (OVS reads each connection in order).
pub const INSTALLER_CONTROLLER_ID: u16 = 32778;

/// IP families the pipeline handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const BOTH: [Family; 2] = [Family::V4, Family::V6];

    fn eth_type(self) -> u16 {
        match self {
            Family::V4 => eth_type::IPV4,
            Family::V6 => eth_type::IPV6,
        }
    }
    fn zone(self) -> u16 {
        match self {
            Family::V4 => CT_ZONE_V4,
            Family::V6 => CT_ZONE_V6,
        }
    }
    fn ip(self) -> Match {
        Match::new().eth_type(self.eth_type())
    }
}

/// ICMPv6 types that are link-layer control (MLD 130-132 and 143, router/neighbour discovery and
/// redirect 133-137): they bypass conntrack and policy like ARP does.
pub const ICMPV6_LINK_CONTROL_TYPES: [u8; 9] = [130, 131, 132, 133, 134, 135, 136, 137, 143];

/// Options that change the init flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineOptions {
    pub round: u16,
    /// Whether OVS meters are available (packet-in flows are prefixed with `meter:256`).
    pub meters: bool,
}

/// Default flows: one miss flow per table and the root classification flows.
pub fn default_flows(round: u16) -> Vec<Flow> {
    let c = cookie(round, CookieCategory::Default);
    let mut flows = Vec::new();
    for fam in Family::BOTH {
        flows.push(
            Flow::new(table::PIPELINE_ROOT_CLASSIFIER, priority::NORMAL, fam.ip())
                .cookie(c)
                .goto(table::CONNTRACK_ZONE),
        );
    }
    for icmp_type in ICMPV6_LINK_CONTROL_TYPES {
        let mut m = Family::V6.ip().ip_proto(ip_proto::ICMPV6);
        m.icmp_type = Some(icmp_type);
        flows.push(
            Flow::new(table::PIPELINE_ROOT_CLASSIFIER, priority::HIGH, m)
                .cookie(c)
                .goto(table::NON_IP),
        );
    }
    flows.push(
        Flow::new(table::PIPELINE_ROOT_CLASSIFIER, priority::LOW, Match::new())
            .cookie(c)
            .goto(table::NON_IP),
    );
    for t in tables() {
        let miss = Flow::new(t.id, priority::MISS, Match::new()).cookie(c);
        flows.push(match t.miss_next {
            Some(next) => miss.goto(next),
            None => miss,
        });
    }
    flows
}

/// ExternalNodeConnectivity init flows: conntrack in, invalid drop, commit, output to reg1.
pub fn connectivity_init_flows(round: u16) -> Vec<Flow> {
    let c = cookie(round, CookieCategory::ExternalNodeConnectivity);
    let mut flows = Vec::new();
    for fam in Family::BOTH {
        flows.push(
            Flow::new(table::CONNTRACK_ZONE, priority::NORMAL, fam.ip())
                .cookie(c)
                .action(Action::Ct(CtAction {
                    commit: false,
                    table: Some(table::CONNTRACK_STATE),
                    zone: CtZone::Immediate(fam.zone()),
                    exec: vec![],
                })),
        );
        flows.push(
            Flow::new(
                table::CONNTRACK_STATE,
                priority::HIGH,
                fam.ip()
                    .ct_state(CtStateMatch::of(&[(ct_state::INV, true), (ct_state::TRK, true)])),
            )
            .cookie(c),
        );
        flows.push(
            Flow::new(
                table::CONNTRACK_COMMIT,
                priority::NORMAL,
                fam.ip()
                    .ct_state(CtStateMatch::of(&[(ct_state::NEW, true), (ct_state::TRK, true)])),
            )
            .cookie(c)
            .action(Action::Ct(CtAction {
                commit: true,
                table: Some(table::OUTPUT),
                zone: CtZone::Immediate(fam.zone()),
                exec: vec![],
            })),
        );
    }
    let (v, m) = reg0::OUTPUT_TO_PORT;
    flows.push(
        Flow::new(
            table::OUTPUT,
            priority::NORMAL,
            Match::new().reg(reg::MARKS, v, Some(m)),
        )
        .cookie(c)
        .action(Action::OutputReg(RegRange::whole(reg::TARGET_PORT))),
    );
    flows
}

/// NetworkPolicy init flows: the packet-in flows in `Output` (one per operation 1..=7) and the
/// flows that let established/related packets skip the rule tables.
pub fn network_policy_init_flows(opts: PipelineOptions) -> Vec<Flow> {
    let c = cookie(opts.round, CookieCategory::NetworkPolicy);
    let mut flows = Vec::new();
    let (to_ctrl, to_ctrl_mask) = reg0::OUTPUT_TO_CONTROLLER;
    for op in 1u32..=7 {
        let value = to_ctrl | (op << reg0::PACKET_IN_OPERATION_SHIFT);
        let mask = to_ctrl_mask | reg0::PACKET_IN_OPERATION_MASK;
        let mut flow = Flow::new(
            table::OUTPUT,
            priority::NORMAL,
            Match::new().reg(reg::MARKS, value, Some(mask)),
        )
        .cookie(c);
        if opts.meters {
            flow = flow.action(Action::Meter(METER_NP));
        }
        flows.push(flow.action(Action::Controller(ControllerAction {
            max_len: 0xffff,
            controller_id: CONTROLLER_ID,
            reason: 0,
            userdata: vec![category::NETWORK_POLICY, op as u8],
            pause: false,
            meter_id: None,
        })));
    }
    for fam in Family::BOTH {
        for (rule_table, metric_table) in [
            (table::ANTREA_POLICY_EGRESS_RULE, table::EGRESS_METRIC),
            (table::ANTREA_POLICY_INGRESS_RULE, table::INGRESS_METRIC),
        ] {
            for other in [ct_state::EST, ct_state::REL] {
                let state = CtStateMatch::of(&[(ct_state::NEW, false), (other, true)]);
                flows.push(
                    Flow::new(rule_table, priority::TOP_ANTREA_POLICY, fam.ip().ct_state(state))
                        .cookie(c)
                        .goto(metric_table),
                );
            }
        }
    }
    flows
}

/// NetworkPolicy logging groups: for each target table, bucket 0 resubmits there and bucket 1
/// marks the packet for the controller and resubmits it to `Output`.
pub fn network_policy_groups() -> Vec<Group> {
    let (v, m) = reg0::OUTPUT_TO_CONTROLLER;
    [
        table::EGRESS_RULE,
        table::EGRESS_METRIC,
        table::INGRESS_RULE,
        table::INGRESS_METRIC,
    ]
    .iter()
    .enumerate()
    .map(|(i, &target)| Group {
        group_id: i as u32 + 1,
        buckets: vec![
            vec![Action::Resubmit {
                in_port: None,
                table: Some(target),
            }],
            vec![
                Action::SetField(SetField::Reg {
                    idx: reg::MARKS,
                    value: v,
                    mask: Some(m),
                }),
                Action::Resubmit {
                    in_port: None,
                    table: Some(table::OUTPUT),
                },
            ],
        ],
    })
    .collect()
}

/// Packet-in meters 256/257/258: rate `packet_in_rate` pps, burst twice that.
pub fn packet_in_meters(packet_in_rate: u32) -> Vec<Meter> {
    [METER_NP, METER_TF, METER_DNS]
        .iter()
        .map(|&meter_id| Meter {
            meter_id,
            rate_pps: packet_in_rate,
            burst: packet_in_rate.saturating_mul(2),
        })
        .collect()
}

/// All flows installed at initialization, before any interface or policy.
pub fn init_flows(opts: PipelineOptions) -> Vec<Flow> {
    let mut flows = default_flows(opts.round);
    flows.extend(connectivity_init_flows(opts.round));
    flows.extend(network_policy_init_flows(opts));
    flows.extend(dns_intercept_flows(opts));
    flows
}

/// Conjunction id of the DNS interception (rules start at 2).
pub const DNS_INTERCEPT_CONJ_ID: u32 = 1;
/// Priority of the DNS interception flows in `AntreaPolicyIngressRule` (`priorityDNSIntercept`).
pub const DNS_INTERCEPT_PRIORITY: u16 = 64991;

/// Antrea's DNS interception (pipeline reference §8.9), installed with the NetworkPolicy init
/// flows: conjunction 1 in `AntreaPolicyIngressRule` at priority 64991. Clause 1/2 matches DNS
/// responses (`ct_state=+rpl+trk`, UDP and TCP source port 53, both families: IPv6 is policed
/// here); clause 2/2 ([`dns_intercept_port_flows`]) the ports of the interfaces an egress FQDN
/// rule applies to. The conjunction pauses the packet in the switch (`controller(pause)`, meter
/// 258 when meters exist) until the agent resumes it, then goes on to `IngressMetric`.
pub fn dns_intercept_flows(opts: PipelineOptions) -> Vec<Flow> {
    let c = cookie(opts.round, CookieCategory::NetworkPolicy);
    let mut action = Flow::new(
        table::ANTREA_POLICY_INGRESS_RULE,
        DNS_INTERCEPT_PRIORITY,
        Match::new().conj_id(DNS_INTERCEPT_CONJ_ID),
    )
    .cookie(c);
    if opts.meters {
        action = action.action(Action::Meter(METER_DNS));
    }
    let mut flows = vec![action
        .action(Action::Controller(ControllerAction {
            max_len: 0xffff,
            controller_id: FQDN_CONTROLLER_ID,
            reason: 0,
            userdata: vec![category::DNS],
            pause: true,
            meter_id: None,
        }))
        .goto(table::INGRESS_METRIC)];
    let reply = CtStateMatch::of(&[(ct_state::RPL, true), (ct_state::TRK, true)]);
    for fam in Family::BOTH {
        for proto in [ip_proto::UDP, ip_proto::TCP] {
            flows.push(
                Flow::new(
                    table::ANTREA_POLICY_INGRESS_RULE,
                    DNS_INTERCEPT_PRIORITY,
                    fam.ip().ct_state(reply).ip_proto(proto).tp_src(53),
                )
                .cookie(c)
                .action(Action::Conjunction {
                    id: DNS_INTERCEPT_CONJ_ID,
                    clause: 1,
                    n_clauses: 2,
                }),
            );
        }
    }
    flows
}

/// Clause 2/2 of the DNS interception: one flow per OpenFlow port (the host internal port of an
/// interface an egress FQDN rule applies to; DNS responses to it carry `reg1=<port>`).
pub fn dns_intercept_port_flows(round: u16, ports: impl IntoIterator<Item = u32>) -> Vec<Flow> {
    let c = cookie(round, CookieCategory::NetworkPolicy);
    ports
        .into_iter()
        .map(|p| {
            Flow::new(
                table::ANTREA_POLICY_INGRESS_RULE,
                DNS_INTERCEPT_PRIORITY,
                Match::new().reg(reg::TARGET_PORT, p, None),
            )
            .cookie(c)
            .action(Action::Conjunction {
                id: DNS_INTERCEPT_CONJ_ID,
                clause: 2,
                n_clauses: 2,
            })
        })
        .collect()
}

/// The cross-connect flows of one attached interface: IP packets get the peer port in reg1 and
/// continue to the ingress tables; non-IP frames are forwarded straight to the peer.
pub fn uplink_pair_flows(round: u16, host_port: u32, uplink_port: u32) -> Vec<Flow> {
    let c = cookie(round, CookieCategory::ExternalNodeConnectivity);
    let (out_v, out_m) = reg0::OUTPUT_TO_PORT;
    let mut flows = Vec::new();
    for (in_port, peer) in [(host_port, uplink_port), (uplink_port, host_port)] {
        for fam in Family::BOTH {
            flows.push(
                Flow::new(
                    table::L2_FORWARDING_CALC,
                    priority::NORMAL,
                    fam.ip().in_port(in_port),
                )
                .cookie(c)
                .action(Action::SetField(SetField::Reg {
                    idx: reg::MARKS,
                    value: out_v,
                    mask: Some(out_m),
                }))
                .action(Action::SetField(SetField::Reg {
                    idx: reg::TARGET_PORT,
                    value: peer,
                    mask: None,
                }))
                .goto(table::INGRESS_SECURITY_CLASSIFIER),
            );
        }
        flows.push(
            Flow::new(table::NON_IP, priority::NORMAL, Match::new().in_port(in_port))
                .cookie(c)
                .action(Action::Output(peer)),
        );
    }
    flows
}

/// The flow of one `policyBypassRules` entry: new connections to (egress) or from (ingress) the
/// CIDR, with the protocol and destination port, skip the rule tables to the metric table.
pub fn bypass_flow(round: u16, rule: &BypassRule) -> Flow {
    let c = cookie(round, CookieCategory::ExternalNodeConnectivity);
    let v6 = matches!(rule.cidr, IpNet::V6(_));
    let mut m = Match::new()
        .eth_type(if v6 { eth_type::IPV6 } else { eth_type::IPV4 })
        .ct_state(CtStateMatch::of(&[(ct_state::NEW, true), (ct_state::TRK, true)]));
    m.ip_proto = match rule.protocol {
        BypassProtocol::Tcp => Some(ip_proto::TCP),
        BypassProtocol::Udp => Some(ip_proto::UDP),
        BypassProtocol::Icmp => Some(if v6 { ip_proto::ICMPV6 } else { ip_proto::ICMP }),
        BypassProtocol::Ip => None,
    };
    let (ingress, table_id, goto) = match rule.direction {
        Direction::Ingress => (true, table::INGRESS_SECURITY_CLASSIFIER, table::INGRESS_METRIC),
        Direction::Egress => (false, table::EGRESS_SECURITY_CLASSIFIER, table::EGRESS_METRIC),
    };
    match (rule.cidr, ingress) {
        (IpNet::V4(n), true) => m.ipv4_src = Some(n.trunc()),
        (IpNet::V4(n), false) => m.ipv4_dst = Some(n.trunc()),
        (IpNet::V6(n), true) => m.ipv6_src = Some(n.trunc()),
        (IpNet::V6(n), false) => m.ipv6_dst = Some(n.trunc()),
    }
    if rule.port != 0 && matches!(rule.protocol, BypassProtocol::Tcp | BypassProtocol::Udp) {
        m = m.tp_dst(rule.port);
    }
    Flow::new(table_id, priority::NORMAL, m).cookie(c).goto(goto)
}

/// Flows of every bypass rule (duplicates collapse: two identical rules make one flow).
pub fn bypass_flows(round: u16, rules: &[BypassRule]) -> Vec<Flow> {
    let mut flows: Vec<Flow> = rules.iter().map(|r| bypass_flow(round, r)).collect();
    flows.sort();
    flows.dedup_by(|a, b| a.key() == b.key());
    flows
}

/// Whether an address belongs to the IP family of `fam`.
pub fn family_of(ip: &IpAddr) -> Family {
    match ip {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

#[cfg(test)]
mod tests {
    use super::fields::round_cookie;
    use super::*;

    #[test]
    fn tables_are_the_production_layout() {
        let t = tables();
        assert_eq!(t.len(), 17);
        for (i, table) in t.iter().enumerate() {
            assert_eq!(table.id as usize, i);
        }
        assert_eq!(t[0].miss_next, None);
        assert_eq!(t[7].name, "EgressMetric");
        assert_eq!(t[7].miss_next, Some(8));
        assert_eq!(t[15].name, "Output");
        assert_eq!(t[15].miss_next, None);
        assert_eq!(t[16].name, "NonIP");
        assert_eq!(t[16].miss_next, None);
    }

    #[test]
    fn cookies_follow_antreas_layout() {
        assert_eq!(cookie(1, CookieCategory::Default), 0x1000000000000);
        assert_eq!(cookie(1, CookieCategory::NetworkPolicy), 0x1020000000000);
        assert_eq!(
            cookie(1, CookieCategory::ExternalNodeConnectivity),
            0x1080000000000
        );
        assert_eq!(cookie(2, CookieCategory::NetworkPolicy), 0x2020000000000);
        assert_eq!(round_cookie(3) & ROUND_MASK, 0x3_0000_0000_0000);
    }

    #[test]
    fn default_flows_have_a_miss_flow_per_table() {
        let flows = default_flows(1);
        for t in tables() {
            let miss: Vec<_> = flows
                .iter()
                .filter(|f| f.table == t.id && f.priority == 0)
                .collect();
            assert_eq!(miss.len(), 1, "table {}", t.name);
            assert_eq!(miss[0].goto_table, t.miss_next);
            assert!(miss[0].actions.is_empty());
        }
        // ip, ipv6, nine ICMPv6 control types, the catch-all, 17 miss flows.
        assert_eq!(flows.len(), 2 + 9 + 1 + 17);
    }

    #[test]
    fn packet_in_flows_match_operation_and_controller_mark() {
        let flows = network_policy_init_flows(PipelineOptions {
            round: 1,
            meters: true,
        });
        let output: Vec<_> = flows.iter().filter(|f| f.table == table::OUTPUT).collect();
        assert_eq!(output.len(), 7);
        let first = output[0].matches.regs.get(&0).copied().map(|m| (m.value, m.mask));
        assert_eq!(first, Some((0x2400000, Some(0xfe600000))));
        let last = output[6].matches.regs.get(&0).copied().map(|m| (m.value, m.mask));
        assert_eq!(last, Some((0xe400000, Some(0xfe600000))));
        assert_eq!(output[0].actions[0], Action::Meter(METER_NP));
        let no_meter = network_policy_init_flows(PipelineOptions {
            round: 1,
            meters: false,
        });
        assert!(matches!(no_meter[0].actions[0], Action::Controller(_)));
    }

    #[test]
    fn pair_flows_cross_connect_both_ways_for_both_families() {
        let flows = uplink_pair_flows(1, 20, 21);
        assert_eq!(flows.len(), 6);
        let l2: Vec<_> = flows
            .iter()
            .filter(|f| f.table == table::L2_FORWARDING_CALC)
            .collect();
        assert_eq!(l2.len(), 4);
        let from_host = l2
            .iter()
            .find(|f| f.matches.in_port == Some(20) && f.matches.eth_type == Some(0x0800));
        let from_host = from_host.map(|f| f.actions.clone());
        assert_eq!(
            from_host,
            Some(vec![
                Action::SetField(SetField::Reg {
                    idx: 0,
                    value: 0x200000,
                    mask: Some(0x600000)
                }),
                Action::SetField(SetField::Reg {
                    idx: 1,
                    value: 21,
                    mask: None
                }),
            ])
        );
        assert!(flows.contains(
            &Flow::new(table::NON_IP, 200, Match::new().in_port(21))
                .cookie(0x1080000000000)
                .action(Action::Output(20))
        ));
    }

    fn rule(direction: Direction, protocol: BypassProtocol, cidr: &str, port: u16) -> BypassRule {
        BypassRule {
            direction,
            protocol,
            cidr: cidr.parse().expect("test cidr"),
            port,
        }
    }

    #[test]
    fn bypass_flows_match_the_peer_on_the_right_side() {
        let ingress = bypass_flow(
            1,
            &rule(Direction::Ingress, BypassProtocol::Tcp, "10.10.10.0/30", 30000),
        );
        assert_eq!(ingress.table, table::INGRESS_SECURITY_CLASSIFIER);
        assert_eq!(ingress.matches.ipv4_src, "10.10.10.0/30".parse().ok());
        assert_eq!(ingress.matches.tp_dst.map(|p| p.value), Some(30000));
        assert_eq!(ingress.goto_table, Some(table::INGRESS_METRIC));
        let egress = bypass_flow(1, &rule(Direction::Egress, BypassProtocol::Ip, "8.8.8.0/24", 0));
        assert_eq!(egress.table, table::EGRESS_SECURITY_CLASSIFIER);
        assert_eq!(egress.matches.ipv4_dst, "8.8.8.0/24".parse().ok());
        assert_eq!(egress.matches.ip_proto, None);
        assert_eq!(egress.matches.tp_dst, None);
        let v6 = bypass_flow(1, &rule(Direction::Ingress, BypassProtocol::Icmp, "fd00::/64", 0));
        assert_eq!(v6.matches.eth_type, Some(eth_type::IPV6));
        assert_eq!(v6.matches.ip_proto, Some(ip_proto::ICMPV6));
    }

    #[test]
    fn duplicate_bypass_rules_make_one_flow() {
        let r = rule(Direction::Ingress, BypassProtocol::Udp, "10.0.0.0/8", 53);
        assert_eq!(bypass_flows(1, &[r.clone(), r]).len(), 1);
    }
}
