//! Test data: the flows of the ExternalNode pipeline reference
//! (`/work/shared/reference/antrea-pipeline.md`) built with the flow model, next to the text the
//! reference gives for them, plus flows that exercise every other field and action the codec
//! models, with the text OVS 3.1 prints for them. Used by the renderer's unit tests (here) and
//! by the lab tests against a real ovs-vswitchd (the agent's `src/ovs/openflow/lab_tests.rs`,
//! through the `golden` feature).
//!
//! Test support only: compiled for this crate's tests or with the `golden` feature, which only
//! dev-dependencies enable. Its literal addresses are parsed with `expect`, as in a test.
//!
//! The reference text is Antrea's rendering, which is `ovs-ofctl dump-flows --names` text
//! except in three places that [`ovs_text`] converts (documented there).
#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use super::flow::*;
use super::render::NameMap;
use super::{Group, Meter};

/// Production table ids and names (antrea-pipeline.md §2.2).
pub const TABLES: [&str; 17] = [
    "PipelineRootClassifier",
    "ConntrackZone",
    "ConntrackState",
    "EgressSecurityClassifier",
    "AntreaPolicyEgressRule",
    "EgressRule",
    "EgressDefaultRule",
    "EgressMetric",
    "L2ForwardingCalc",
    "IngressSecurityClassifier",
    "AntreaPolicyIngressRule",
    "IngressRule",
    "IngressDefaultRule",
    "IngressMetric",
    "ConntrackCommit",
    "Output",
    "NonIP",
];

pub const T_ROOT: u8 = 0;
pub const T_CT_ZONE: u8 = 1;
pub const T_CT_STATE: u8 = 2;
pub const T_EGRESS_CLASSIFIER: u8 = 3;
pub const T_AP_EGRESS: u8 = 4;
pub const T_EGRESS_RULE: u8 = 5;
pub const T_EGRESS_METRIC: u8 = 7;
pub const T_L2_CALC: u8 = 8;
pub const T_INGRESS_CLASSIFIER: u8 = 9;
pub const T_AP_INGRESS: u8 = 10;
pub const T_INGRESS_RULE: u8 = 11;
pub const T_INGRESS_DEFAULT: u8 = 12;
pub const T_INGRESS_METRIC: u8 = 13;
pub const T_CT_COMMIT: u8 = 14;
pub const T_OUTPUT: u8 = 15;
pub const T_NON_IP: u8 = 16;

pub const COOKIE_DEFAULT: u64 = 0x1000000000000;
pub const COOKIE_NP: u64 = 0x1020000000000;
pub const COOKIE_ENC: u64 = 0x1080000000000;
pub const CTRL_ID: u16 = 32776;
/// The FQDN controller's connection (its own id, so DNS packet-ins reach it only).
pub const FQDN_CTRL_ID: u16 = 32777;
/// The G4 pair (no such ports on the test bridge, so they print as numbers).
pub const HOST_PORT: u32 = 20;
pub const UPLINK_PORT: u32 = 21;
/// Ports the golden test bridge has, to check name rendering and quoting.
pub const NAMED_PORTS: [(u32, &str); 2] = [(22, "p.1"), (23, "eth0~")];

// === the reference flows (antrea-pipeline.md §6, §7, §8) ===

fn sf_reg(idx: u8, value: u32, mask: Option<u32>) -> Action {
    Action::SetField(SetField::Reg { idx, value, mask })
}

fn ct(commit: bool, table: u8, zone: u16, exec: Vec<Action>) -> Action {
    Action::Ct(CtAction {
        commit,
        table: Some(table),
        zone: CtZone::Immediate(zone),
        exec,
    })
}

fn controller(userdata: Vec<u8>, pause: bool) -> Action {
    controller_to(CTRL_ID, userdata, pause)
}

fn controller_to(controller_id: u16, userdata: Vec<u8>, pause: bool) -> Action {
    Action::Controller(ControllerAction {
        max_len: 65535,
        controller_id,
        reason: 0,
        userdata,
        pause,
        meter_id: None,
    })
}

fn conj(id: u32, clause: u8, n_clauses: u8) -> Action {
    Action::Conjunction {
        id,
        clause,
        n_clauses,
    }
}

fn st(flags: &[(u32, bool)]) -> CtStateMatch {
    CtStateMatch::of(flags)
}

fn ip_of(v6: bool) -> Match {
    if v6 {
        Match::new().ipv6()
    } else {
        Match::new().ipv4()
    }
}

fn net4(s: &str) -> ipnet::Ipv4Net {
    s.parse().expect("ipv4 net")
}

fn ct_label(value: u128, mask: u128) -> Action {
    Action::SetField(SetField::CtLabel {
        value,
        mask: Some(mask),
    })
}

/// §6.1 default flows (+ the IPv6 root flow).
pub fn default_flows() -> Vec<Flow> {
    let c = COOKIE_DEFAULT;
    let mut v = vec![
        Flow::new(T_ROOT, 200, Match::new().ipv4())
            .cookie(c)
            .goto(T_CT_ZONE),
        Flow::new(T_ROOT, 200, Match::new().ipv6())
            .cookie(c)
            .goto(T_CT_ZONE),
        Flow::new(T_ROOT, 190, Match::new()).cookie(c).goto(T_NON_IP),
        Flow::new(T_ROOT, 0, Match::new()).cookie(c),
    ];
    for t in T_CT_ZONE..=T_CT_COMMIT {
        v.push(Flow::new(t, 0, Match::new()).cookie(c).goto(t + 1));
    }
    v.push(Flow::new(T_OUTPUT, 0, Match::new()).cookie(c));
    v.push(Flow::new(T_NON_IP, 0, Match::new()).cookie(c));
    v
}

/// §6.2 ExternalNodeConnectivity init flows, IPv4 and IPv6.
pub fn enc_flows() -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_ENC;
    let mut v = Vec::new();
    for (v6, zone) in [(false, 65520), (true, 65510)] {
        v.push(
            Flow::new(T_CT_ZONE, 200, ip_of(v6))
                .cookie(c)
                .action(ct(false, T_CT_STATE, zone, vec![])),
        );
        v.push(
            Flow::new(
                T_CT_STATE,
                210,
                ip_of(v6).ct_state(st(&[(INV, true), (TRK, true)])),
            )
            .cookie(c),
        );
        v.push(
            Flow::new(
                T_CT_COMMIT,
                200,
                ip_of(v6).ct_state(st(&[(NEW, true), (TRK, true)])),
            )
            .cookie(c)
            .action(ct(true, T_OUTPUT, zone, vec![])),
        );
    }
    v.push(
        Flow::new(T_OUTPUT, 200, Match::new().reg(0, 0x200000, Some(0x600000)))
            .cookie(c)
            .action(Action::OutputReg(RegRange::whole(1))),
    );
    v
}

/// §6.3 NetworkPolicy init flows (with or without `meter:256`), IPv4 and IPv6 skip flows.
pub fn np_init_flows(meters: bool) -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_NP;
    let mut v = Vec::new();
    for op in 1u32..=7 {
        let mut f = Flow::new(
            T_OUTPUT,
            200,
            Match::new().reg(0, (op << 25) | 0x400000, Some(0xfe600000)),
        )
        .cookie(c);
        if meters {
            f = f.action(Action::Meter(256));
        }
        v.push(f.action(controller(vec![1, op as u8], false)));
    }
    for v6 in [false, true] {
        for flag in [EST, REL] {
            let m = ip_of(v6).ct_state(st(&[(NEW, false), (flag, true)]));
            v.push(
                Flow::new(T_AP_EGRESS, 64990, m.clone())
                    .cookie(c)
                    .goto(T_EGRESS_METRIC),
            );
            v.push(Flow::new(T_AP_INGRESS, 64990, m).cookie(c).goto(T_INGRESS_METRIC));
        }
    }
    v
}

/// §6.4 groups.
pub fn np_groups() -> Vec<Group> {
    [T_EGRESS_RULE, T_EGRESS_METRIC, T_INGRESS_RULE, T_INGRESS_METRIC]
        .iter()
        .enumerate()
        .map(|(i, t)| Group {
            group_id: i as u32 + 1,
            buckets: vec![
                vec![Action::Resubmit {
                    in_port: None,
                    table: Some(*t),
                }],
                vec![
                    sf_reg(0, 0x400000, Some(0x600000)),
                    Action::Resubmit {
                        in_port: None,
                        table: Some(T_OUTPUT),
                    },
                ],
            ],
        })
        .collect()
}

/// §7.1 per-pair flows (with IPv6 twins of the L2ForwardingCalc flows).
pub fn pair_flows(host: u32, uplink: u32) -> Vec<Flow> {
    let c = COOKIE_ENC;
    let mut v = Vec::new();
    for v6 in [false, true] {
        for (from, to) in [(host, uplink), (uplink, host)] {
            v.push(
                Flow::new(T_L2_CALC, 200, ip_of(v6).in_port(from))
                    .cookie(c)
                    .action(sf_reg(0, 0x200000, Some(0x600000)))
                    .action(sf_reg(1, to, None))
                    .goto(T_INGRESS_CLASSIFIER),
            );
        }
    }
    v.push(
        Flow::new(T_NON_IP, 200, Match::new().in_port(host))
            .cookie(c)
            .action(Action::Output(uplink)),
    );
    v.push(
        Flow::new(T_NON_IP, 200, Match::new().in_port(uplink))
            .cookie(c)
            .action(Action::Output(host)),
    );
    v
}

/// §7.2 policy-bypass flows.
pub fn bypass_flows() -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_ENC;
    let newtrk = st(&[(NEW, true), (TRK, true)]);
    let tcp = || {
        Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .ct_state(newtrk)
            .tp_dst(30000)
    };
    let mut a = tcp();
    a.ipv4_src = Some(net4("10.10.10.0/30"));
    let mut b = tcp();
    b.ipv4_dst = Some(net4("10.10.10.0/30"));
    let mut ipm = Match::new().ipv4().ct_state(newtrk);
    ipm.ipv4_src = Some(net4("1.1.1.1/32"));
    let mut icmp = Match::new().ipv4().ip_proto(ip_proto::ICMP).ct_state(newtrk);
    icmp.ipv4_dst = Some(net4("8.8.8.0/24"));
    vec![
        Flow::new(T_INGRESS_CLASSIFIER, 200, a)
            .cookie(c)
            .goto(T_INGRESS_METRIC),
        Flow::new(T_EGRESS_CLASSIFIER, 200, b)
            .cookie(c)
            .goto(T_EGRESS_METRIC),
        Flow::new(T_INGRESS_CLASSIFIER, 200, ipm)
            .cookie(c)
            .goto(T_INGRESS_METRIC),
        Flow::new(T_EGRESS_CLASSIFIER, 200, icmp)
            .cookie(c)
            .goto(T_EGRESS_METRIC),
    ]
}

/// Policy flows from §8.9 (DNS, IPv4+IPv6), G8, G11, G17, G18 (with or without logging) and the
/// §8.5 action-flow templates, with production table ids.
pub fn policy_flows(logging: bool) -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_NP;
    let mut v = Vec::new();
    // §8.9 / G7: DNS interception.
    v.push(
        Flow::new(T_AP_INGRESS, 64991, Match::new().conj_id(1))
            .cookie(c)
            .action(Action::Meter(258))
            .action(controller_to(FQDN_CTRL_ID, vec![2], true))
            .goto(T_INGRESS_METRIC),
    );
    for v6 in [false, true] {
        for proto in [ip_proto::UDP, ip_proto::TCP] {
            let mut m = ip_of(v6)
                .ip_proto(proto)
                .ct_state(st(&[(RPL, true), (TRK, true)]));
            m.tp_src = Some(Masked::exact(53));
            v.push(Flow::new(T_AP_INGRESS, 64991, m).cookie(c).action(conj(1, 1, 2)));
        }
    }
    v.push(
        Flow::new(T_AP_INGRESS, 64991, Match::new().reg(1, 0x14, None))
            .cookie(c)
            .action(conj(1, 2, 2)),
    );

    // G8: conjunction engine, ingress.
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().conj_id(10).ipv4())
            .cookie(c)
            .action(sf_reg(6, 0xa, None))
            .action(ct(
                true,
                T_INGRESS_METRIC,
                65520,
                vec![ct_label(0xa, 0xffff_ffff)],
            )),
    );
    for (id, prio) in [(11u32, 100u16), (12, 200), (14, 100)] {
        v.push(
            Flow::new(T_AP_INGRESS, prio, Match::new().conj_id(id))
                .cookie(c)
                .action(sf_reg(3, id, None))
                .action(sf_reg(0, 0x400, Some(0x400)))
                .goto(T_INGRESS_METRIC),
        );
        v.push(
            Flow::new(
                T_INGRESS_METRIC,
                200,
                Match::new().reg(0, 0x400, Some(0x400)).reg(3, id, None),
            )
            .cookie(c),
        );
    }
    let src = |s: &str| {
        let mut m = Match::new().ipv4();
        m.ipv4_src = Some(net4(s));
        m
    };
    v.push(
        Flow::new(T_AP_INGRESS, 100, src("192.168.1.40/32"))
            .cookie(c)
            .action(conj(10, 1, 2))
            .action(conj(11, 1, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, src("192.168.1.50/32"))
            .cookie(c)
            .action(conj(10, 1, 2)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, src("192.168.1.51/32"))
            .cookie(c)
            .action(conj(11, 1, 3))
            .action(conj(14, 1, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().reg(1, 1, None))
            .cookie(c)
            .action(conj(11, 2, 3))
            .action(conj(10, 2, 2)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().reg(1, 2, None))
            .cookie(c)
            .action(conj(10, 2, 2))
            .action(conj(14, 2, 3)),
    );
    v.push(
        Flow::new(
            T_AP_INGRESS,
            100,
            Match::new().ipv4().ip_proto(ip_proto::TCP).tp_dst(8080),
        )
        .cookie(c)
        .action(conj(11, 3, 3)),
    );
    let mut icmp = Match::new().ipv4().ip_proto(ip_proto::ICMP);
    icmp.icmp_type = Some(8);
    icmp.icmp_code = Some(0);
    v.push(
        Flow::new(T_AP_INGRESS, 200, icmp)
            .cookie(c)
            .action(conj(12, 3, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().reg(1, 3, None))
            .cookie(c)
            .action(conj(11, 2, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 200, src("192.168.1.40/32"))
            .cookie(c)
            .action(conj(12, 1, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 200, Match::new().reg(1, 1, None))
            .cookie(c)
            .action(conj(12, 2, 3)),
    );
    v.push(
        Flow::new(
            T_AP_INGRESS,
            200,
            Match::new().ipv4().ip_proto(ip_proto::TCP).tp_dst(8080),
        )
        .cookie(c)
        .action(conj(12, 3, 3)),
    );
    let mut sp = Match::new().ipv4().ip_proto(ip_proto::TCP);
    sp.tp_src = Some(Masked::exact(32800));
    v.push(Flow::new(T_AP_INGRESS, 100, sp).cookie(c).action(conj(14, 3, 3)));
    for new in [true, false] {
        let mut m = Match::new().ipv4().ct_state(st(&[(NEW, new)]));
        m.ct_label = Some(Masked::new(0xa, 0xffff_ffff));
        v.push(Flow::new(T_INGRESS_METRIC, 200, m).cookie(c).goto(T_CT_COMMIT));
    }

    // G11 (production ids): drop + logging, and a logging default-drop flow.
    v.push(
        Flow::new(T_INGRESS_RULE, 200, Match::new().conj_id(15))
            .cookie(c)
            .action(sf_reg(3, 0xf, None))
            .action(sf_reg(0, 0x400, Some(0x400)))
            .action(sf_reg(0, 0x800, Some(0x1800)))
            .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
            .action(sf_reg(2, 0xb, Some(0xff)))
            .action(Action::Group(4)),
    );
    v.push(
        Flow::new(T_INGRESS_RULE, 200, Match::new().reg(1, 0x64, None))
            .cookie(c)
            .action(conj(15, 2, 2)),
    );
    v.push(
        Flow::new(
            T_INGRESS_METRIC,
            200,
            Match::new().reg(0, 0x400, Some(0x400)).reg(3, 0xf, None),
        )
        .cookie(c),
    );
    v.push(
        Flow::new(T_INGRESS_DEFAULT, 200, Match::new().reg(1, 0x64, None))
            .cookie(c)
            .action(sf_reg(0, 0x800, Some(0x1800)))
            .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
            .action(sf_reg(0, 0x400000, Some(0x600000)))
            .action(sf_reg(2, 0xc, Some(0xff)))
            .goto(T_OUTPUT),
    );

    // G17: ingress Reject.
    v.push(
        Flow::new(T_AP_INGRESS, 106, Match::new().conj_id(2))
            .cookie(c)
            .action(sf_reg(3, 2, None))
            .action(sf_reg(0, 0x400, Some(0x400)))
            .action(sf_reg(0, 0x4000000, Some(0xfe000000)))
            .action(sf_reg(2, 0xa, Some(0xff)))
            .action(Action::Group(4)),
    );
    for peer in ["10.0.0.8/32", "172.16.100.5/32"] {
        v.push(
            Flow::new(T_AP_INGRESS, 106, src(peer))
                .cookie(c)
                .action(conj(2, 1, 3)),
        );
    }
    v.push(
        Flow::new(T_AP_INGRESS, 106, Match::new().reg(1, 0x14, None))
            .cookie(c)
            .action(conj(2, 2, 3)),
    );
    v.push(
        Flow::new(
            T_AP_INGRESS,
            106,
            Match::new().ipv4().ip_proto(ip_proto::TCP).tp_dst(22),
        )
        .cookie(c)
        .action(conj(2, 3, 3)),
    );
    v.push(
        Flow::new(
            T_INGRESS_METRIC,
            200,
            Match::new().reg(0, 0x400, Some(0x400)).reg(3, 2, None),
        )
        .cookie(c),
    );

    // G18: egress Allow with a port range and logging, IPv4 and IPv6.
    for (v6, zone) in [(false, 65520u16), (true, 65510)] {
        let mut f = Flow::new(T_AP_EGRESS, 14500, ip_of(v6).conj_id(3))
            .cookie(c)
            .action(sf_reg(5, 3, None))
            .action(ct(
                true,
                T_EGRESS_METRIC,
                zone,
                vec![ct_label(0x3 << 32, 0xffff_ffff << 32)],
            ));
        if logging {
            f = f
                .action(sf_reg(0, 0, Some(0x1800)))
                .action(sf_reg(0, 0x400000, Some(0x600000)))
                .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
                .action(sf_reg(2, 0x4, Some(0xff)))
                .goto(T_OUTPUT);
        }
        v.push(f);
        for new in [true, false] {
            let mut m = ip_of(v6).ct_state(st(&[(NEW, new)]));
            m.ct_label = Some(Masked::new(0x3 << 32, 0xffff_ffff << 32));
            v.push(Flow::new(T_EGRESS_METRIC, 200, m).cookie(c).goto(T_L2_CALC));
        }
    }
    let mut dst = Match::new().ipv4();
    dst.ipv4_dst = Some(net4("192.168.10.0/24"));
    v.push(Flow::new(T_AP_EGRESS, 14500, dst).cookie(c).action(conj(3, 2, 3)));
    let mut dst6 = Match::new().ipv6();
    dst6.ipv6_dst = Some("fd00:10::/64".parse().expect("v6 net"));
    v.push(
        Flow::new(T_AP_EGRESS, 14500, dst6)
            .cookie(c)
            .action(conj(3, 2, 3)),
    );
    v.push(
        Flow::new(T_AP_EGRESS, 14500, src("10.0.0.5/32"))
            .cookie(c)
            .action(conj(3, 1, 3)),
    );
    for (value, mask) in [(0x50, 0xfff8), (0x58, 0xfffe), (90, 0xffff)] {
        let m = Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .tp_dst_masked(value, mask);
        v.push(Flow::new(T_AP_EGRESS, 14500, m).cookie(c).action(conj(3, 3, 3)));
        let m = Match::new()
            .ipv6()
            .ip_proto(ip_proto::TCP)
            .tp_dst_masked(value, mask);
        v.push(Flow::new(T_AP_EGRESS, 14500, m).cookie(c).action(conj(3, 3, 3)));
    }
    // §8.5 templates (derived): Reject egress, Reject + logging ingress, Drop + logging
    // ingress, Pass egress, Pass + logging ingress; with the deny metric flows (§8.6).
    let deny = |table: u8, prio: u16, id: u32, disposition: Option<u32>, ops: u32, group: u32| {
        let mut f = Flow::new(table, prio, Match::new().conj_id(id))
            .cookie(c)
            .action(sf_reg(3, id, None))
            .action(sf_reg(0, 0x400, Some(0x400)));
        if let Some(d) = disposition {
            f = f.action(sf_reg(0, d, Some(0x1800)));
        }
        f.action(sf_reg(0, ops << 25, Some(0xfe000000)))
            .action(sf_reg(2, u32::from(table), Some(0xff)))
            .action(Action::Group(group))
    };
    v.push(deny(T_AP_EGRESS, 13000, 5, None, 2, 2));
    v.push(deny(T_AP_INGRESS, 13000, 5, Some(0x1000), 3, 4));
    v.push(deny(T_AP_INGRESS, 13001, 6, Some(0x800), 1, 4));
    for (table, id) in [
        (T_EGRESS_METRIC, 5u32),
        (T_INGRESS_METRIC, 5),
        (T_INGRESS_METRIC, 6),
    ] {
        v.push(
            Flow::new(
                table,
                200,
                Match::new().reg(0, 0x400, Some(0x400)).reg(3, id, None),
            )
            .cookie(c),
        );
    }
    v.push(
        Flow::new(T_AP_EGRESS, 13002, Match::new().conj_id(7))
            .cookie(c)
            .action(sf_reg(5, 7, None))
            .goto(T_EGRESS_RULE),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 13003, Match::new().conj_id(8))
            .cookie(c)
            .action(sf_reg(6, 8, None))
            .action(sf_reg(0, 0x1800, Some(0x1800)))
            .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
            .action(sf_reg(2, u32::from(T_AP_INGRESS), Some(0xff)))
            .action(Action::Group(3)),
    );
    v
}

/// Flows exercising every other field, action and rendering rule the codec supports.
pub fn coverage_flows() -> Vec<Flow> {
    let c = 0xabc;
    let mut v = Vec::new();
    let mut m = Match::new().ipv4().ip_proto(ip_proto::UDP);
    m.pkt_mark = Some(Masked::new(5, 0xff));
    m.ct_zone = Some(3);
    m.ct_mark = Some(Masked::new(4, 0xf));
    m.ct_label = Some(Masked::exact(0xffff_ffff_ffff_ffff_ffff_ffff_ffff_ffff));
    m.eth_src = Some(Masked::exact([0, 0x11, 0x22, 0x33, 0x44, 0x55]));
    m.eth_dst = Some(Masked::new([1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]));
    m.tp_src = Some(Masked::new(0, 0xff00));
    m.tp_dst = Some(Masked::exact(53));
    m.ipv4_dst = Some(net4("10.1.2.3/16"));
    v.push(
        Flow::new(20, 5, m)
            .cookie(c)
            .action(Action::SetField(SetField::PktMark {
                value: 3,
                mask: Some(0xf),
            }))
            .action(Action::SetField(SetField::EthSrc([
                0, 0x11, 0x22, 0x33, 0x44, 0x55,
            ])))
            .action(Action::SetField(SetField::EthDst([
                0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
            ])))
            .action(Action::CtClear)
            .action(Action::Note(vec![1, 2, 3]))
            .action(Action::Move {
                src: RegRange {
                    reg: 0,
                    ofs: 0,
                    n_bits: 4,
                },
                dst: RegRange {
                    reg: 1,
                    ofs: 4,
                    n_bits: 4,
                },
            })
            .action(Action::Resubmit {
                in_port: None,
                table: Some(21),
            })
            .action(Action::Resubmit {
                in_port: Some(HOST_PORT),
                table: Some(22),
            })
            .action(Action::Resubmit {
                in_port: Some(UPLINK_PORT),
                table: None,
            })
            .action(Action::Output(port::LOCAL))
            .action(Action::Output(port::IN_PORT))
            .action(Action::Output(port::CONTROLLER))
            .action(Action::Output(22))
            .action(Action::Group(1)),
    );
    let mut f = Flow::new(
        20,
        6,
        Match::new()
            .ipv4()
            .reg(0, 0x3, Some(0x1))
            .reg(1, 5, Some(u32::MAX)),
    )
    .cookie(c)
    .action(Action::Ct(CtAction {
        commit: true,
        table: None,
        zone: CtZone::Field(RegRange {
            reg: 0,
            ofs: 0,
            n_bits: 16,
        }),
        exec: vec![
            Action::SetField(SetField::CtMark { value: 5, mask: None }),
            Action::SetField(SetField::CtLabel {
                value: 0,
                mask: Some(1),
            }),
        ],
    }))
    .action(Action::Ct(CtAction {
        commit: false,
        table: None,
        zone: CtZone::Immediate(0),
        exec: vec![],
    }))
    .action(Action::OutputReg(RegRange {
        reg: 7,
        ofs: 31,
        n_bits: 1,
    }))
    .action(sf_reg(4, 0, None));
    f.idle_timeout = 100;
    f.hard_timeout = 200;
    v.push(f);
    v.push(
        Flow::new(
            20,
            7,
            Match::new()
                .ct_state(CtStateMatch {
                    value: 0x21,
                    mask: 0xff,
                })
                .in_port(22),
        )
        .action(Action::Controller(ControllerAction {
            max_len: 100,
            controller_id: 7,
            reason: 1,
            userdata: vec![0xff],
            pause: true,
            meter_id: Some(258),
        })),
    );
    v.push(
        Flow::new(
            20,
            8,
            Match::new().ct_state(CtStateMatch { value: 0, mask: 0xff }),
        )
        .action(Action::Controller(ControllerAction {
            max_len: 65535,
            controller_id: 0,
            reason: 1,
            userdata: vec![],
            pause: false,
            meter_id: None,
        })),
    );
    v.push(Flow::new(20, 9, Match::new().eth_type(0x88cc)));
    v.push(Flow::new(20, 10, Match::new().ipv4().ip_proto(ip_proto::IGMP)));
    v.push(Flow::new(20, 11, Match::new().ipv6().ip_proto(99)));
    let mut m = Match::new().ipv6().ip_proto(ip_proto::ICMPV6);
    m.icmp_type = Some(135);
    m.icmp_code = Some(0);
    m.ipv6_src = Some("::1.2.3.4/128".parse().expect("v6"));
    v.push(Flow::new(20, 12, m));
    let mut m = Match::new().ipv4().ip_proto(ip_proto::SCTP);
    m.tp_src = Some(Masked::exact(5));
    m.ipv4_src = Some(net4("0.0.0.0/0"));
    v.push(Flow::new(20, 13, m));
    v.push(Flow::new(20, 32768, Match::new().reg(5, 7, None)));
    v.push(Flow::new(21, 32768, Match::new()));
    v.push(Flow::new(0, 32768, Match::new().eth_type(eth_type::ARP)).action(Action::Output(port::NORMAL)));
    v
}

// === the reference text ===

/// Verbatim flow lines of antrea-pipeline.md that a VM agent installs (§6.1, §6.2, §6.3
/// without meters, G4 = §7.1, G5/G6 and the derived examples of §7.2, G7 = §8.9 with meters,
/// G8 without the multi-cluster rule 13, G11 with the production table ids the reference
/// gives, G17, G18 without logging).
pub const REFERENCE: &[&str] = &[
    // §6.1
    "cookie=0x1000000000000, table=PipelineRootClassifier, priority=200,ip actions=goto_table:ConntrackZone",
    "cookie=0x1000000000000, table=PipelineRootClassifier, priority=190 actions=goto_table:NonIP",
    "cookie=0x1000000000000, table=PipelineRootClassifier, priority=0 actions=drop",
    "cookie=0x1000000000000, table=ConntrackZone, priority=0 actions=goto_table:ConntrackState",
    "cookie=0x1000000000000, table=ConntrackState, priority=0 actions=goto_table:EgressSecurityClassifier",
    "cookie=0x1000000000000, table=EgressSecurityClassifier, priority=0 actions=goto_table:AntreaPolicyEgressRule",
    "cookie=0x1000000000000, table=AntreaPolicyEgressRule, priority=0 actions=goto_table:EgressRule",
    "cookie=0x1000000000000, table=EgressRule, priority=0 actions=goto_table:EgressDefaultRule",
    "cookie=0x1000000000000, table=EgressDefaultRule, priority=0 actions=goto_table:EgressMetric",
    "cookie=0x1000000000000, table=EgressMetric, priority=0 actions=goto_table:L2ForwardingCalc",
    "cookie=0x1000000000000, table=L2ForwardingCalc, priority=0 actions=goto_table:IngressSecurityClassifier",
    "cookie=0x1000000000000, table=IngressSecurityClassifier, priority=0 actions=goto_table:AntreaPolicyIngressRule",
    "cookie=0x1000000000000, table=AntreaPolicyIngressRule, priority=0 actions=goto_table:IngressRule",
    "cookie=0x1000000000000, table=IngressRule, priority=0 actions=goto_table:IngressDefaultRule",
    "cookie=0x1000000000000, table=IngressDefaultRule, priority=0 actions=goto_table:IngressMetric",
    "cookie=0x1000000000000, table=IngressMetric, priority=0 actions=goto_table:ConntrackCommit",
    "cookie=0x1000000000000, table=ConntrackCommit, priority=0 actions=goto_table:Output",
    "cookie=0x1000000000000, table=Output, priority=0 actions=drop",
    "cookie=0x1000000000000, table=NonIP, priority=0 actions=drop",
    // §6.2
    "cookie=0x1080000000000, table=ConntrackZone, priority=200,ip actions=ct(table=ConntrackState,zone=65520)",
    "cookie=0x1080000000000, table=ConntrackState, priority=210,ct_state=+inv+trk,ip actions=drop",
    "cookie=0x1080000000000, table=ConntrackCommit, priority=200,ct_state=+new+trk,ip actions=ct(commit,table=Output,zone=65520)",
    "cookie=0x1080000000000, table=Output, priority=200,reg0=0x200000/0x600000 actions=output:NXM_NX_REG1[]",
    // §6.3 (no meters)
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0x2400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.01,max_len=65535)",
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0x4400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.02,max_len=65535)",
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0x6400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.03,max_len=65535)",
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0x8400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.04,max_len=65535)",
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0xa400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.05,max_len=65535)",
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0xc400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.06,max_len=65535)",
    "cookie=0x1020000000000, table=Output, priority=200,reg0=0xe400000/0xfe600000 actions=controller(id=32776,reason=no_match,userdata=01.07,max_len=65535)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=64990,ct_state=-new+est,ip actions=goto_table:EgressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=64990,ct_state=-new+rel,ip actions=goto_table:EgressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64990,ct_state=-new+est,ip actions=goto_table:IngressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64990,ct_state=-new+rel,ip actions=goto_table:IngressMetric",
    // G4 (§7.1)
    "cookie=0x1080000000000, table=L2ForwardingCalc, priority=200,ip,in_port=20 actions=set_field:0x200000/0x600000->reg0,set_field:0x15->reg1,goto_table:IngressSecurityClassifier",
    "cookie=0x1080000000000, table=L2ForwardingCalc, priority=200,ip,in_port=21 actions=set_field:0x200000/0x600000->reg0,set_field:0x14->reg1,goto_table:IngressSecurityClassifier",
    "cookie=0x1080000000000, table=NonIP, priority=200,in_port=20 actions=output:21",
    "cookie=0x1080000000000, table=NonIP, priority=200,in_port=21 actions=output:20",
    // G5, G6, §7.2 derived examples
    "cookie=0x1080000000000, table=IngressSecurityClassifier, priority=200,ct_state=+new+trk,tcp,nw_src=10.10.10.0/30,tp_dst=30000 actions=goto_table:IngressMetric",
    "cookie=0x1080000000000, table=EgressSecurityClassifier, priority=200,ct_state=+new+trk,tcp,nw_dst=10.10.10.0/30,tp_dst=30000 actions=goto_table:EgressMetric",
    "cookie=0x1080000000000, table=IngressSecurityClassifier, priority=200,ct_state=+new+trk,ip,nw_src=1.1.1.1 actions=goto_table:IngressMetric",
    "cookie=0x1080000000000, table=EgressSecurityClassifier, priority=200,ct_state=+new+trk,icmp,nw_dst=8.8.8.0/24 actions=goto_table:EgressMetric",
    // G7 (meters on) and the derived FQDN destination flow
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64991,conj_id=1 actions=meter:258,controller(id=32777,reason=no_match,userdata=02,max_len=65535),goto_table:IngressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64991,ct_state=+rpl+trk,udp,tp_src=53 actions=conjunction(1,1/2)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64991,ct_state=+rpl+trk,tcp,tp_src=53 actions=conjunction(1,1/2)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64991,reg1=0x14 actions=conjunction(1,2/2)",
    // G8 without rule 13
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,conj_id=10,ip actions=set_field:0xa->reg6,ct(commit,table=IngressMetric,zone=65520,exec(set_field:0xa/0xffffffff->ct_label))",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,conj_id=11 actions=set_field:0xb->reg3,set_field:0x400/0x400->reg0,goto_table:IngressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,conj_id=12 actions=set_field:0xc->reg3,set_field:0x400/0x400->reg0,goto_table:IngressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,conj_id=14 actions=set_field:0xe->reg3,set_field:0x400/0x400->reg0,goto_table:IngressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,ip,nw_src=192.168.1.40 actions=conjunction(10,1/2),conjunction(11,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,ip,nw_src=192.168.1.50 actions=conjunction(10,1/2)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,ip,nw_src=192.168.1.51 actions=conjunction(11,1/3),conjunction(14,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,reg1=0x1 actions=conjunction(11,2/3),conjunction(10,2/2)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,tcp,tp_dst=8080 actions=conjunction(11,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,reg1=0x1 actions=conjunction(12,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,reg1=0x2 actions=conjunction(10,2/2),conjunction(14,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,tcp,tp_dst=8080 actions=conjunction(12,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,icmp,icmp_type=8,icmp_code=0 actions=conjunction(12,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,reg1=0x3 actions=conjunction(11,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,ip,nw_src=192.168.1.40 actions=conjunction(12,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,tcp,tp_src=32800 actions=conjunction(14,3/3)",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,ct_state=+new,ct_label=0xa/0xffffffff,ip actions=goto_table:ConntrackCommit",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,ct_state=-new,ct_label=0xa/0xffffffff,ip actions=goto_table:ConntrackCommit",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0xb actions=drop",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0xc actions=drop",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0xe actions=drop",
    // G11 with the production table ids (IngressRule 11, IngressDefaultRule 12)
    "cookie=0x1020000000000, table=IngressRule, priority=200,conj_id=15 actions=set_field:0xf->reg3,set_field:0x400/0x400->reg0,set_field:0x800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0xb/0xff->reg2,group:4",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0xf actions=drop",
    "cookie=0x1020000000000, table=IngressRule, priority=200,reg1=0x64 actions=conjunction(15,2/2)",
    "cookie=0x1020000000000, table=IngressDefaultRule, priority=200,reg1=0x64 actions=set_field:0x800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0x400000/0x600000->reg0,set_field:0xc/0xff->reg2,goto_table:Output",
    // G17
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,conj_id=2 actions=set_field:0x2->reg3,set_field:0x400/0x400->reg0,set_field:0x4000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,ip,nw_src=10.0.0.8 actions=conjunction(2,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,ip,nw_src=172.16.100.5 actions=conjunction(2,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,reg1=0x14 actions=conjunction(2,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,tcp,tp_dst=22 actions=conjunction(2,3/3)",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0x2 actions=drop",
    // G18
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ip actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65520,exec(set_field:0x300000000/0xffffffff00000000->ct_label))",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,ip,nw_src=10.0.0.5 actions=conjunction(3,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,ip,nw_dst=192.168.10.0/24 actions=conjunction(3,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp,tp_dst=0x50/0xfff8 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp,tp_dst=0x58/0xfffe actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp,tp_dst=90 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=+new,ct_label=0x300000000/0xffffffff00000000,ip actions=goto_table:L2ForwardingCalc",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=-new,ct_label=0x300000000/0xffffffff00000000,ip actions=goto_table:L2ForwardingCalc",
];

/// G18's action flow with `enableLogging: true` (replaces the IPv4 action flow of REFERENCE).
pub const REFERENCE_G18_LOGGING: &str = "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ip actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65520,exec(set_field:0x300000000/0xffffffff00000000->ct_label)),set_field:0x0/0x1800->reg0,set_field:0x400000/0x600000->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0x4/0xff->reg2,goto_table:Output";

/// The IPv6 twin of [`REFERENCE_G18_LOGGING`] (derived, §11).
pub const DERIVED_G18_LOGGING_V6: &str = "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ipv6 actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65510,exec(set_field:0x300000000/0xffffffff00000000->ct_label)),set_field:0x0/0x1800->reg0,set_field:0x400000/0x600000->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0x4/0xff->reg2,goto_table:Output";

/// The groups of §6.4 / G10.
pub const REFERENCE_GROUPS: &[&str] = &[
    "group_id=1,type=all,bucket=bucket_id:0,actions=resubmit:EgressRule,bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit:Output",
    "group_id=2,type=all,bucket=bucket_id:0,actions=resubmit:EgressMetric,bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit:Output",
    "group_id=3,type=all,bucket=bucket_id:0,actions=resubmit:IngressRule,bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit:Output",
    "group_id=4,type=all,bucket=bucket_id:0,actions=resubmit:IngressMetric,bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit:Output",
];

/// Flows derived from the reference's rules rather than copied (in `ovs-ofctl` text): this
/// agent's IPv6 twins (§11, "what the generic code produces"), and the §8.5 action-flow
/// templates instantiated with concrete priorities and ids, with their §8.6 deny metric flows.
pub const DERIVED: &[&str] = &[
    "cookie=0x1000000000000, table=PipelineRootClassifier, priority=200,ipv6 actions=goto_table:ConntrackZone",
    "cookie=0x1080000000000, table=ConntrackZone, priority=200,ipv6 actions=ct(table=ConntrackState,zone=65510)",
    "cookie=0x1080000000000, table=ConntrackState, priority=210,ct_state=+inv+trk,ipv6 actions=drop",
    "cookie=0x1080000000000, table=ConntrackCommit, priority=200,ct_state=+new+trk,ipv6 actions=ct(commit,table=Output,zone=65510)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=64990,ct_state=-new+est,ipv6 actions=goto_table:EgressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=64990,ct_state=-new+rel,ipv6 actions=goto_table:EgressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64990,ct_state=-new+est,ipv6 actions=goto_table:IngressMetric",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64990,ct_state=-new+rel,ipv6 actions=goto_table:IngressMetric",
    "cookie=0x1080000000000, table=L2ForwardingCalc, priority=200,ipv6,in_port=20 actions=set_field:0x200000/0x600000->reg0,set_field:0x15->reg1,goto_table:IngressSecurityClassifier",
    "cookie=0x1080000000000, table=L2ForwardingCalc, priority=200,ipv6,in_port=21 actions=set_field:0x200000/0x600000->reg0,set_field:0x14->reg1,goto_table:IngressSecurityClassifier",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64991,ct_state=+rpl+trk,udp6,tp_src=53 actions=conjunction(1,1/2)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=64991,ct_state=+rpl+trk,tcp6,tp_src=53 actions=conjunction(1,1/2)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ipv6 actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65510,exec(set_field:0x300000000/0xffffffff00000000->ct_label))",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,ipv6,ipv6_dst=fd00:10::/64 actions=conjunction(3,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp6,tp_dst=0x50/0xfff8 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp6,tp_dst=0x58/0xfffe actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp6,tp_dst=90 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=+new,ct_label=0x300000000/0xffffffff00000000,ipv6 actions=goto_table:L2ForwardingCalc",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=-new,ct_label=0x300000000/0xffffffff00000000,ipv6 actions=goto_table:L2ForwardingCalc",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=13000,conj_id=5 actions=set_field:0x5->reg3,set_field:0x400/0x400->reg0,set_field:0x4000000/0xfe000000->reg0,set_field:0x4/0xff->reg2,group:2",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=13000,conj_id=5 actions=set_field:0x5->reg3,set_field:0x400/0x400->reg0,set_field:0x1000/0x1800->reg0,set_field:0x6000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=13001,conj_id=6 actions=set_field:0x6->reg3,set_field:0x400/0x400->reg0,set_field:0x800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,reg0=0x400/0x400,reg3=0x5 actions=drop",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0x5 actions=drop",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0x6 actions=drop",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=13002,conj_id=7 actions=set_field:0x7->reg5,goto_table:EgressRule",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=13003,conj_id=8 actions=set_field:0x8->reg6,set_field:0x1800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:3",
];

/// Converts a line of the reference (Antrea's rendering) to what `ovs-ofctl -O OpenFlow15
/// dump-flows --names` prints. They differ in three ways, all documented by the reference:
/// 1. Antrea prints `controller(id=C,reason=R,userdata=U,max_len=65535)`; OVS prints the
///    properties in the order reason, max_len, id, userdata, pause, meter_id and leaves out
///    defaults (reason=action, max_len=65535). The DNS flow's controller action also carries
///    `pause`, which Antrea does not print (G7).
/// 2. Antrea prints a zero masked value as `0x0/0x1800`; OVS prints `0/0x1800`.
/// 3. Antrea's group buckets say `resubmit:T`; OVS prints `resubmit(,T)` for a table resubmit.
pub fn ovs_text(line: &str) -> String {
    let mut s = line.replace("set_field:0x0/", "set_field:0/");
    while let Some(start) = s.find("controller(id=") {
        let Some(len) = s[start..].find(')') else { break };
        let inner = &s[start + "controller(".len()..start + len];
        let kv: BTreeMap<&str, &str> = inner.split(',').filter_map(|p| p.split_once('=')).collect();
        let mut parts = Vec::new();
        if let Some(r) = kv.get("reason").filter(|r| **r != "action") {
            parts.push(format!("reason={r}"));
        }
        if let Some(m) = kv.get("max_len").filter(|m| **m != "65535") {
            parts.push(format!("max_len={m}"));
        }
        if let Some(id) = kv.get("id") {
            parts.push(format!("id={id}"));
        }
        if let Some(u) = kv.get("userdata") {
            parts.push(format!("userdata={u}"));
            if *u == "02" {
                parts.push("pause".to_string());
            }
        }
        let replacement = format!("ctl({})", parts.join(","));
        s.replace_range(start..start + len + 1, &replacement);
    }
    let s = s.replace("ctl(", "controller(");
    if s.starts_with("group_id=") {
        let mut out = String::new();
        for (i, part) in s.split("resubmit:").enumerate() {
            if i == 0 {
                out.push_str(part);
                continue;
            }
            let end = part.find(',').unwrap_or(part.len());
            out.push_str(&format!("resubmit(,{})", &part[..end]));
            out.push_str(&part[end..]);
        }
        return out;
    }
    s
}

/// With meters, every Output packet-in flow's actions start with `meter:256,` (§6.3, G3).
fn with_meter(line: &str) -> String {
    if line.contains("table=Output, priority=200,reg0=") && line.contains("actions=controller(") {
        line.replacen("actions=controller(", "actions=meter:256,controller(", 1)
    } else {
        line.to_string()
    }
}

/// The `ovs-ofctl dump-flows --names` text of [`reference_flows`]`(meters, logging)`.
pub fn reference_text(meters: bool, logging: bool) -> BTreeSet<String> {
    let g18 = REFERENCE
        .iter()
        .position(|l| l.contains("priority=14500,conj_id=3,ip "));
    REFERENCE
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if logging && Some(i) == g18 {
                REFERENCE_G18_LOGGING
            } else {
                l
            }
        })
        .chain(DERIVED.iter().map(|l| {
            if logging && l.contains("priority=14500,conj_id=3,ipv6 ") {
                DERIVED_G18_LOGGING_V6
            } else {
                l
            }
        }))
        .map(|l| {
            let t = ovs_text(l);
            if meters {
                with_meter(&t)
            } else {
                t
            }
        })
        .collect()
}

/// The groups' `ovs-ofctl dump-groups --names` text.
pub fn reference_groups_text() -> BTreeSet<String> {
    REFERENCE_GROUPS.iter().map(|l| ovs_text(l)).collect()
}

/// Every reference flow, built with the model.
pub fn reference_flows(meters: bool, logging: bool) -> Vec<Flow> {
    let mut v = default_flows();
    v.extend(enc_flows());
    v.extend(np_init_flows(meters));
    v.extend(pair_flows(HOST_PORT, UPLINK_PORT));
    v.extend(bypass_flows());
    v.extend(policy_flows(logging));
    dedup(v)
}

/// The meters of §6: 256, 257, 258.
pub fn meters() -> Vec<Meter> {
    [256, 257, 258]
        .iter()
        .map(|id| Meter {
            meter_id: *id,
            rate_pps: 5000,
            burst: 10000,
        })
        .collect()
}

/// Table names as the switch has them, and the test bridge's named ports.
pub fn name_map() -> NameMap {
    let mut n = NameMap::new();
    for (i, t) in TABLES.iter().enumerate() {
        n.tables.insert(i as u8, t.to_string());
    }
    for (p, name) in NAMED_PORTS {
        n.ports.insert(p, name.to_string());
    }
    n
}

pub fn dedup(flows: Vec<Flow>) -> Vec<Flow> {
    let mut m: BTreeMap<FlowKey, Flow> = BTreeMap::new();
    for f in flows {
        assert!(
            m.insert(f.key(), f.clone()).is_none(),
            "duplicate flow key in test data: {f:?}"
        );
    }
    m.into_values().collect()
}

/// Flows for the fields and actions beyond the reference pipeline, each with the text OVS 3.1
/// prints for it (observed with `ovs-ofctl add-flow` / `dump-flows` of the same flows).
pub fn model_coverage() -> Vec<(Flow, &'static str)> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let t = 30;
    let tcp = || Match::new().ipv4().ip_proto(ip_proto::TCP);
    let mac = [0, 0x11, 0x22, 0x33, 0x44, 0x55];
    let mut arp = Match::new().eth_type(eth_type::ARP);
    arp.arp_spa = Some(net4("10.0.0.1/32"));
    arp.arp_tpa = Some(net4("10.0.0.0/8"));
    arp.arp_op = Some(1);
    arp.arp_sha = Some(Masked::exact(mac));
    arp.arp_tha = Some(Masked::new([0; 6], [1, 0, 0, 0, 0, 0]));
    let nd = |ty: u8| {
        let mut m = Match::new().ipv6().ip_proto(ip_proto::ICMPV6);
        m.icmp_type = Some(ty);
        m
    };
    let mut ns = nd(135);
    ns.nd_target = Some("fe80::1/128".parse().expect("v6"));
    ns.nd_sll = Some(Masked::exact(mac));
    let mut na = nd(136);
    na.nd_target = Some("fe80::/64".parse().expect("v6"));
    na.nd_tll = Some(Masked::exact(mac));
    let v4 = |s: &str| IpAddr::V4(s.parse::<Ipv4Addr>().expect("v4"));
    let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().expect("v6"));
    let nat = |kind, addrs, ports, persistent, hash, random| {
        Action::Nat(NatAction {
            kind,
            addrs,
            ports,
            persistent,
            hash,
            random,
        })
    };
    let ct_exec = |commit: bool, exec: Vec<Action>| {
        Action::Ct(CtAction {
            commit,
            table: None,
            zone: CtZone::Immediate(0),
            exec,
        })
    };
    let trk = |flags: &[(u32, bool)]| Match::new().ipv4().ct_state(st(flags));
    vec![
        (
            Flow::new(t, 1, tcp().tcp_flags(0x002, Some(0x012))),
            "table=30, priority=1,tcp,tcp_flags=+syn-ack actions=drop",
        ),
        (
            Flow::new(t, 2, tcp().tcp_flags(0x012, None)),
            "table=30, priority=2,tcp,tcp_flags=syn|ack actions=drop",
        ),
        (
            Flow::new(t, 3, Match::new().ipv6().ip_proto(ip_proto::TCP).tcp_flags(0x012, Some(0x0ff))),
            "table=30, priority=3,tcp6,tcp_flags=-fin+syn-rst-psh+ack-urg-ece-cwr actions=drop",
        ),
        (
            Flow::new(t, 4, Match::new().vlan_vid(10)),
            "table=30, priority=4,dl_vlan=10 actions=drop",
        ),
        (
            Flow::new(t, 5, Match::new().no_vlan()),
            "table=30, priority=5,vlan_tci=0x0000/0x1fff actions=drop",
        ),
        (
            Flow::new(t, 6, {
                let mut m = Match::new();
                m.vlan_tci = Some(Masked::new(0x1000, 0x1000));
                m
            }),
            "table=30, priority=6,vlan_tci=0x1000/0x1000 actions=drop",
        ),
        (
            Flow::new(t, 7, Match::new().vlan_vid(10).vlan_pcp(3)),
            "table=30, priority=7,dl_vlan=10,dl_vlan_pcp=3 actions=drop",
        ),
        (
            Flow::new(t, 8, Match::new().vlan_pcp(3)),
            "table=30, priority=8,dl_vlan_pcp=3 actions=drop",
        ),
        (
            Flow::new(t, 9, arp),
            "table=30, priority=9,arp,arp_spa=10.0.0.1,arp_tpa=10.0.0.0/8,arp_op=1,arp_sha=00:11:22:33:44:55,arp_tha=00:00:00:00:00:00/01:00:00:00:00:00 actions=drop",
        ),
        (
            Flow::new(t, 10, ns),
            "table=30, priority=10,icmp6,icmp_type=135,nd_target=fe80::1,nd_sll=00:11:22:33:44:55 actions=drop",
        ),
        (
            Flow::new(t, 11, na),
            "table=30, priority=11,icmp6,icmp_type=136,nd_target=fe80::/64,nd_tll=00:11:22:33:44:55 actions=drop",
        ),
        (
            Flow::new(t, 12, Match::new().metadata(0x1234, Some(0xffff))),
            "table=30, priority=12,metadata=0x1234/0xffff actions=drop",
        ),
        (
            Flow::new(t, 13, Match::new().xreg(0, 0x1_0000_0002, None)),
            "table=30, priority=13,reg0=0x1,reg1=0x2 actions=drop",
        ),
        (
            Flow::new(t, 14, Match::new().xxreg(1, 1, Some(1))),
            "table=30, priority=14,reg7=0x1/0x1 actions=drop",
        ),
        (
            Flow::new(t, 15, trk(&[(ct_state::TRK, true)])).action(ct_exec(
                true,
                vec![
                    nat(
                        Some(NatKind::Src),
                        Some((v4("10.0.0.1"), v4("10.0.0.5"))),
                        Some((1000, 2000)),
                        true,
                        false,
                        true,
                    ),
                    Action::SetField(SetField::CtMark { value: 1, mask: None }),
                ],
            )),
            "table=30, priority=15,ct_state=+trk,ip actions=ct(commit,nat(src=10.0.0.1-10.0.0.5:1000-2000,persistent,random),exec(set_field:0x1->ct_mark))",
        ),
        (
            Flow::new(t, 16, trk(&[(ct_state::INV, false), (ct_state::TRK, true)]))
                .action(ct_exec(false, vec![Action::Nat(NatAction::reverse())]))
                .action(Action::ResubmitCt {
                    in_port: None,
                    table: Some(31),
                })
                .action(Action::ResubmitCt {
                    in_port: Some(5),
                    table: Some(31),
                }),
            "table=30, priority=16,ct_state=-inv+trk,ip actions=ct(nat),resubmit(,31,ct),resubmit(5,31,ct)",
        ),
        (
            Flow::new(t, 17, Match::new().ipv6())
                .action(ct_exec(
                    true,
                    vec![nat(
                        Some(NatKind::Dst),
                        Some((v6("fd00::1"), v6("fd00::5"))),
                        None,
                        false,
                        false,
                        false,
                    )],
                ))
                .action(Action::CtClear),
            "table=30, priority=17,ipv6 actions=ct(commit,nat(dst=fd00::1-fd00::5)),ct_clear",
        ),
        (
            Flow::new(t, 18, Match::new().ipv6()).action(ct_exec(
                true,
                vec![nat(
                    Some(NatKind::Dst),
                    Some((v6("fd00::1"), v6("fd00::1"))),
                    Some((80, 90)),
                    false,
                    true,
                    false,
                )],
            )),
            "table=30, priority=18,ipv6 actions=ct(commit,nat(dst=[fd00::1]:80-90,hash))",
        ),
        (
            Flow::new(t, 19, Match::new().ipv4())
                .action(ct_exec(
                    true,
                    vec![nat(Some(NatKind::Src), None, None, false, false, false)],
                ))
                .action(sf_reg(0, 0x8, Some(0x8))),
            "table=30, priority=19,ip actions=ct(commit,nat(src)),set_field:0x8/0x8->reg0",
        ),
        (
            Flow::new(t, 20, tcp())
                .action(Action::SetField(SetField::TcpDst(80)))
                .action(Action::SetField(SetField::Ipv4Src("10.0.0.1".parse().expect("v4"))))
                .action(Action::SetField(SetField::Metadata {
                    value: 5,
                    mask: Some(0xff),
                }))
                .action(Action::SetField(SetField::Ipv4Dst("1.2.3.4".parse().expect("v4"))))
                .action(Action::SetField(SetField::TcpSrc(1000))),
            "table=30, priority=20,tcp actions=set_field:80->tcp_dst,set_field:10.0.0.1->ip_src,set_field:0x5/0xff->metadata,set_field:1.2.3.4->ip_dst,set_field:1000->tcp_src",
        ),
        (
            Flow::new(t, 21, Match::new().ipv6())
                .action(Action::SetField(SetField::Ipv6Dst("fd00::1".parse().expect("v6"))))
                .action(Action::SetField(SetField::EthSrc(mac)))
                .action(Action::Output(port::CONTROLLER))
                .action(Action::Controller(ControllerAction {
                    max_len: 100,
                    controller_id: 0,
                    reason: 1,
                    userdata: vec![],
                    pause: false,
                    meter_id: None,
                }))
                .action(Action::Output(port::IN_PORT))
                .action(Action::Output(port::LOCAL))
                .action(Action::Output(3)),
            "table=30, priority=21,ipv6 actions=set_field:fd00::1->ipv6_dst,set_field:00:11:22:33:44:55->eth_src,CONTROLLER:65535,CONTROLLER:100,IN_PORT,LOCAL,output:3",
        ),
        (
            Flow::new(t, 22, Match::new().ipv6().ip_proto(ip_proto::UDP))
                .action(Action::SetField(SetField::UdpSrc(53)))
                .action(Action::SetField(SetField::UdpDst(5353)))
                .action(Action::SetField(SetField::Ipv6Src("fd00::2".parse().expect("v6"))))
                .action(Action::SetField(SetField::Metadata { value: 1, mask: None })),
            "table=30, priority=22,udp6 actions=set_field:53->udp_src,set_field:5353->udp_dst,set_field:fd00::2->ipv6_src,set_field:0x1->metadata",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{render_flow, render_flows, render_group};

    fn missing_and_extra(want: &BTreeSet<String>, got: &BTreeSet<String>) -> String {
        format!(
            "expected but not rendered:\n  {}\nrendered but not expected:\n  {}",
            want.difference(got).cloned().collect::<Vec<_>>().join("\n  "),
            got.difference(want).cloned().collect::<Vec<_>>().join("\n  ")
        )
    }

    #[test]
    fn reference_flows_render_as_the_reference_text() {
        for (meters, logging) in [(false, false), (true, true)] {
            let want = reference_text(meters, logging);
            let got: BTreeSet<String> = render_flows(&reference_flows(meters, logging), &name_map())
                .into_iter()
                .collect();
            assert!(
                want == got,
                "meters={meters} logging={logging}: {}",
                missing_and_extra(&want, &got)
            );
        }
        let groups: BTreeSet<String> = np_groups().iter().map(|g| render_group(g, &name_map())).collect();
        assert_eq!(groups, reference_groups_text());
    }

    #[test]
    fn model_coverage_renders_as_ovs_prints_it() {
        for (f, want) in model_coverage() {
            assert_eq!(render_flow(&f, &name_map()), want);
        }
    }

    #[test]
    fn ovs_text_conversion() {
        assert_eq!(
            ovs_text("x actions=meter:258,controller(id=32776,reason=no_match,userdata=02,max_len=65535),goto_table:T"),
            "x actions=meter:258,controller(reason=no_match,id=32776,userdata=02,pause),goto_table:T"
        );
        assert_eq!(ovs_text("set_field:0x0/0x1800->reg0"), "set_field:0/0x1800->reg0");
        assert_eq!(
            ovs_text(REFERENCE_GROUPS[0]),
            "group_id=1,type=all,bucket=bucket_id:0,actions=resubmit(,EgressRule),bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit(,Output)"
        );
    }
}
