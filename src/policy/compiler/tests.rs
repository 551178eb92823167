//! Tests of the rule compiler: the golden cases of the pipeline reference (§13) rendered with the
//! `ovs-ofctl` renderer, their IPv6 twins, port-range masking, and the stability of ids and
//! priorities across compilations.
//!
//! Golden strings are Antrea's rendering converted to `ovs-ofctl` text by [`ovs_text`] (a zero
//! masked value prints as `0/0x..` there). Conjunction action lists are compared sorted: their
//! order is not significant (upstream's tests sort them too).

use std::collections::BTreeSet;
use std::time::Instant;

use super::*;
use crate::ovs::openflow::oxm::normalize_match;
use crate::ovs::openflow::render::{render_flows, render_group, NameMap};
use crate::policy::flowset::flow_set;
use crate::policy::rule::{ip_block_cidrs, PolicyType, BASELINE_TIER_PRIORITY, DEFAULT_TIER_PRIORITY};

fn names() -> NameMap {
    let mut n = NameMap::new();
    n.tables = pipeline::table_names().into_iter().collect();
    n
}

/// Antrea's text → `ovs-ofctl` text, with conjunction lists sorted.
fn canon(line: &str) -> String {
    let line = line.replace("set_field:0x0/", "set_field:0/");
    let Some((head, actions)) = line.split_once(" actions=") else {
        return line;
    };
    if !actions.starts_with("conjunction(") {
        return line.to_string();
    }
    let mut items: Vec<String> = actions
        .trim_start_matches("conjunction(")
        .split(",conjunction(")
        .map(|s| format!("conjunction({s}"))
        .collect();
    items.sort();
    format!("{head} actions={}", items.join(","))
}

fn ovs_text(lines: &[&str]) -> BTreeSet<String> {
    lines.iter().map(|l| canon(l)).collect()
}

fn rendered(flows: &[Flow]) -> BTreeSet<String> {
    render_flows(flows, &names()).iter().map(|l| canon(l)).collect()
}

fn rendered_set(flows: &FlowSet) -> BTreeSet<String> {
    let v: Vec<Flow> = flows.values().cloned().collect();
    rendered(&v)
}

pub(super) fn ip(s: &str) -> Peer {
    Peer::Cidr(s.parse().expect("test cidr"))
}

pub(super) fn anp(name: &str) -> PolicyRef {
    PolicyRef {
        policy_type: PolicyType::AntreaNetworkPolicy,
        namespace: "vm-ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

#[allow(clippy::too_many_arguments)]
fn rule(
    policy: &str,
    direction: Direction,
    index: i32,
    action: RuleAction,
    tier: i32,
    policy_priority: f64,
    from: Vec<Peer>,
    to: Vec<Peer>,
    services: Option<Vec<Service>>,
) -> CompiledRuleInput {
    CompiledRuleInput {
        id: RuleId {
            policy_uid: format!("uid-{policy}"),
            direction,
            index,
            services_key: String::new(),
        },
        policy: anp(policy),
        rule_name: format!("rule{index}"),
        direction,
        action,
        tier_priority: tier,
        policy_priority,
        rule_priority: index,
        max_rule_priority: index,
        from,
        to,
        services,
        enable_logging: false,
        log_label: String::new(),
        fqdn: None,
    }
}

fn resolved(rule: &CompiledRuleInput, conj_id: u32, table: u8, priority: u16) -> ResolvedRule<'_> {
    ResolvedRule {
        rule,
        conj_id,
        table,
        priority,
    }
}

fn src_port(port: u16) -> Service {
    Service {
        src_port: Some(port),
        ..Service::default()
    }
}

// === port ranges ===

#[test]
fn port_bit_ranges_examples() {
    assert_eq!(port_bit_ranges(1000, 1007), vec![(0x3e8, 0xfff8)]);
    assert_eq!(
        port_bit_ranges(80, 90),
        vec![(0x50, 0xfff8), (0x58, 0xfffe), (90, 0xffff)]
    );
    assert_eq!(
        port_bit_ranges(8000, 8080),
        vec![(0x1f40, 0xffc0), (0x1f80, 0xfff0), (8080, 0xffff)]
    );
    assert_eq!(port_bit_ranges(22, 22), vec![(22, 0xffff)]);
    assert_eq!(port_bit_ranges(0, 65535), vec![(0, 0)]);
    assert_eq!(port_bit_ranges(32768, 65535), vec![(32768, 0x8000)]);
    assert!(port_bit_ranges(10, 9).is_empty());
    // 1..=65535: 1, 2/fffe, 4/fffc, ..., 32768/8000.
    let all = port_bit_ranges(1, 65535);
    assert_eq!(all.len(), 16);
    assert_eq!(all[0], (1, 0xffff));
    assert_eq!(all[15], (32768, 0x8000));
}

#[test]
fn port_bit_ranges_cover_exactly() {
    let mut seed: u64 = 7;
    let mut next = |m: u32| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as u32) % m
    };
    let mut cases: Vec<(u16, u16)> = vec![(0, 0), (0, 1), (1, 2), (65534, 65535), (65535, 65535), (0, 65535)];
    for _ in 0..300 {
        let a = next(65536) as u16;
        let len = next(3000) as u16;
        cases.push((a, a.saturating_add(len)));
    }
    for (start, end) in cases {
        let ranges = port_bit_ranges(start, end);
        let mut covered = vec![0u8; 65536];
        for &(v, m) in &ranges {
            assert_eq!(v & m, v, "{start}-{end}: value has bits outside its mask");
            let size = u32::from(!m) + 1;
            for p in u32::from(v)..u32::from(v) + size {
                covered[p as usize] += 1;
            }
        }
        for p in 0..=65535u32 {
            let want = u8::from(p >= u32::from(start) && p <= u32::from(end));
            assert_eq!(covered[p as usize], want, "{start}-{end}: port {p}");
        }
        // Ascending and disjoint.
        assert!(ranges.windows(2).all(|w| w[0].0 < w[1].0), "{start}-{end}");
    }
}

#[test]
fn service_matches_cover_protocols_and_families() {
    let fams = [Family::V4, Family::V6];
    let render = |s: Service| -> Vec<String> {
        service_matches(&s, &fams)
            .into_iter()
            .map(|m| {
                let f = Flow::new(table::ANTREA_POLICY_INGRESS_RULE, 1, m);
                crate::ovs::openflow::render::render_match(&f.matches, 1, &names())
            })
            .collect()
    };
    assert_eq!(
        render(Service::port(Protocol::Udp, 53)),
        vec!["priority=1,udp,tp_dst=53", "priority=1,udp6,tp_dst=53"]
    );
    assert_eq!(
        render(Service::port(Protocol::Sctp, 0)),
        vec!["priority=1,sctp", "priority=1,sctp6"]
    );
    assert_eq!(
        render(Service::default()),
        vec!["priority=1,tcp", "priority=1,tcp6"]
    );
    assert_eq!(
        render(Service::icmp(Some(8), None)),
        vec!["priority=1,icmp,icmp_type=8", "priority=1,icmp6,icmp_type=8"]
    );
    assert_eq!(
        render(Service::icmp(None, None)),
        vec!["priority=1,icmp", "priority=1,icmp6"]
    );
    let both = Service {
        src_port: Some(1024),
        src_end_port: Some(1025),
        ..Service::port(Protocol::Tcp, 80)
    };
    assert_eq!(
        render(both),
        vec![
            "priority=1,tcp,tp_src=0x400/0xfffe,tp_dst=80",
            "priority=1,tcp6,tp_src=0x400/0xfffe,tp_dst=80"
        ]
    );
    // An end port not above the port is a single port.
    assert_eq!(
        render(Service::range(Protocol::Tcp, 443, 443)),
        vec!["priority=1,tcp,tp_dst=443", "priority=1,tcp6,tp_dst=443"]
    );
}

// === golden cases ===

const G8: &[&str] = &[
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
];

/// G8's rules 10, 11, 12 and 14 with their FlowIDs and OpenFlow priorities. Rule 13 (label
/// identities, multi-cluster only) cannot exist on a VM and is left out, with its
/// `tun_id` match and drop flows.
fn g8_rules() -> Vec<(CompiledRuleInput, u32, u16)> {
    use Direction::In;
    use RuleAction::{Allow, Drop};
    let tcp8080 = Service::port(Protocol::Tcp, 8080);
    vec![
        (
            rule(
                "p10",
                In,
                0,
                Allow,
                250,
                1.0,
                vec![ip("192.168.1.40/32"), ip("192.168.1.50/32")],
                vec![Peer::OfPort(1), Peer::OfPort(2)],
                None,
            ),
            10,
            100,
        ),
        (
            rule(
                "p11",
                In,
                0,
                Drop,
                250,
                1.0,
                vec![ip("192.168.1.40/32"), ip("192.168.1.51/32")],
                vec![Peer::OfPort(1), Peer::OfPort(3)],
                Some(vec![tcp8080]),
            ),
            11,
            100,
        ),
        (
            rule(
                "p12",
                In,
                0,
                Drop,
                250,
                1.0,
                vec![ip("192.168.1.40/32")],
                vec![Peer::OfPort(1)],
                Some(vec![tcp8080, Service::icmp(Some(8), Some(0))]),
            ),
            12,
            200,
        ),
        (
            rule(
                "p14",
                In,
                0,
                Drop,
                250,
                1.0,
                vec![ip("192.168.1.51/32")],
                vec![Peer::OfPort(2)],
                Some(vec![src_port(32800)]),
            ),
            14,
            100,
        ),
    ]
}

#[test]
fn g8_conjunction_engine_ingress() {
    let rules = g8_rules();
    let resolved_rules: Vec<ResolvedRule<'_>> = rules
        .iter()
        .map(|(r, id, prio)| resolved(r, *id, table::ANTREA_POLICY_INGRESS_RULE, *prio))
        .collect();
    let flows = build_flows(&resolved_rules, 1, &CompileOptions::upstream());
    assert_eq!(rendered(&flows), ovs_text(G8));
    assert_eq!(flows.len(), G8.len());
    // The same through a flow set (normalized matches): nothing merges or disappears.
    assert_eq!(rendered_set(&flow_set(flows)), ovs_text(G8));
}

#[test]
fn g8_ipv6_twins() {
    let rules = g8_rules();
    let resolved_rules: Vec<ResolvedRule<'_>> = rules
        .iter()
        .map(|(r, id, prio)| resolved(r, *id, table::ANTREA_POLICY_INGRESS_RULE, *prio))
        .collect();
    let got = rendered(&build_flows(&resolved_rules, 1, &CompileOptions::default()));
    let mut want = ovs_text(G8);
    want.extend(ovs_text(&[
        // The Allow rule's action and metric flows, per family (§11).
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,conj_id=10,ipv6 actions=set_field:0xa->reg6,ct(commit,table=IngressMetric,zone=65510,exec(set_field:0xa/0xffffffff->ct_label))",
        "cookie=0x1020000000000, table=IngressMetric, priority=200,ct_state=+new,ct_label=0xa/0xffffffff,ipv6 actions=goto_table:ConntrackCommit",
        "cookie=0x1020000000000, table=IngressMetric, priority=200,ct_state=-new,ct_label=0xa/0xffffffff,ipv6 actions=goto_table:ConntrackCommit",
        // Every service per family.
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,tcp6,tp_dst=8080 actions=conjunction(11,3/3)",
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,tcp6,tp_dst=8080 actions=conjunction(12,3/3)",
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=200,icmp6,icmp_type=8,icmp_code=0 actions=conjunction(12,3/3)",
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=100,tcp6,tp_src=32800 actions=conjunction(14,3/3)",
    ]));
    assert_eq!(got, want);
}

#[test]
fn g10_logging_groups_are_the_ones_action_flows_use() {
    let groups: Vec<String> = pipeline::network_policy_groups()
        .iter()
        .map(|g| render_group(g, &names()))
        .collect();
    assert_eq!(
        groups,
        vec![
            "group_id=1,type=all,bucket=bucket_id:0,actions=resubmit(,EgressRule),bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit(,Output)",
            "group_id=2,type=all,bucket=bucket_id:0,actions=resubmit(,EgressMetric),bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit(,Output)",
            "group_id=3,type=all,bucket=bucket_id:0,actions=resubmit(,IngressRule),bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit(,Output)",
            "group_id=4,type=all,bucket=bucket_id:0,actions=resubmit(,IngressMetric),bucket=bucket_id:1,actions=set_field:0x400000/0x600000->reg0,resubmit(,Output)",
        ]
    );
    let t = Targets::new();
    assert_eq!(t.groups.get(&table::EGRESS_RULE), Some(&1));
    assert_eq!(t.groups.get(&table::EGRESS_METRIC), Some(&2));
    assert_eq!(t.groups.get(&table::INGRESS_RULE), Some(&3));
    assert_eq!(t.groups.get(&table::INGRESS_METRIC), Some(&4));
    assert_eq!(
        t.metric_next.get(&table::EGRESS_METRIC),
        Some(&table::L2_FORWARDING_CALC)
    );
    assert_eq!(
        t.metric_next.get(&table::INGRESS_METRIC),
        Some(&table::CONNTRACK_COMMIT)
    );
}

#[test]
fn g11_drop_with_logging() {
    // Adaptation: production table ids (IngressRule 11 → reg2=0xb instead of the test
    // fixture's 27). The K8s default-drop flow of G11 (IngressDefaultRule) is not produced:
    // Antrea-native rules have none and K8s NetworkPolicy never reaches a VM.
    let mut r = rule(
        "p15",
        Direction::In,
        0,
        RuleAction::Drop,
        250,
        1.0,
        vec![],
        vec![Peer::OfPort(100)],
        None,
    );
    r.enable_logging = true;
    let flows = build_flows(
        &[resolved(&r, 15, table::INGRESS_RULE, 200)],
        1,
        &CompileOptions::upstream(),
    );
    assert_eq!(
        rendered(&flows),
        ovs_text(&[
            "cookie=0x1020000000000, table=IngressRule, priority=200,conj_id=15 actions=set_field:0xf->reg3,set_field:0x400/0x400->reg0,set_field:0x800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0xb/0xff->reg2,group:4",
            "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0xf actions=drop",
            "cookie=0x1020000000000, table=IngressRule, priority=200,reg1=0x64 actions=conjunction(15,2/2)",
        ])
    );
}

#[test]
fn g15_ip_block_except_in_the_from_clause() {
    let mut from = vec![ip("10.10.0.0/16")];
    from.extend(
        ip_block_cidrs(
            "10.20.0.0/16".parse().expect("cidr"),
            &[
                "10.20.1.0/24".parse().expect("cidr"),
                "10.20.2.0/28".parse().expect("cidr"),
            ],
        )
        .into_iter()
        .map(Peer::Cidr),
    );
    let r = rule(
        "p",
        Direction::In,
        0,
        RuleAction::Allow,
        250,
        1.0,
        from,
        vec![Peer::OfPort(20)],
        None,
    );
    let flows = build_flows(
        &[resolved(&r, 2, table::ANTREA_POLICY_INGRESS_RULE, 14900)],
        1,
        &CompileOptions::upstream(),
    );
    let got: BTreeSet<String> = rendered(&flows)
        .into_iter()
        .filter(|l| l.ends_with("actions=conjunction(2,1/2)"))
        .collect();
    let want: BTreeSet<String> = [
        "10.10.0.0/16",
        "10.20.128.0/17",
        "10.20.64.0/18",
        "10.20.32.0/19",
        "10.20.16.0/20",
        "10.20.8.0/21",
        "10.20.4.0/22",
        "10.20.0.0/24",
        "10.20.3.0/24",
        "10.20.2.128/25",
        "10.20.2.64/26",
        "10.20.2.32/27",
        "10.20.2.16/28",
    ]
    .iter()
    .map(|c| {
        format!("cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=14900,ip,nw_src={c} actions=conjunction(2,1/2)")
    })
    .collect();
    assert_eq!(got, want);
}

#[test]
fn g16_priorities_through_the_compiler() {
    let rules: Vec<CompiledRuleInput> = (0..4)
        .map(|i| {
            let mut r = rule(
                "p",
                Direction::In,
                i,
                RuleAction::Allow,
                1,
                1.3,
                vec![],
                vec![],
                None,
            );
            r.max_rule_priority = 3;
            r
        })
        .collect();
    let out = compile(&rules, 1, CompileOptions::default());
    let prio: BTreeMap<i32, u16> = out
        .conjunctions
        .values()
        .map(|c| (c.rule_id.index, c.priority))
        .collect();
    assert_eq!(
        prio,
        [(3, 64771), (2, 64772), (1, 64773), (0, 64774)]
            .into_iter()
            .collect()
    );
    // Ids in RuleId order from 2.
    let ids: Vec<(i32, u32)> = out
        .conjunctions
        .values()
        .map(|c| (c.rule_id.index, c.conj_id))
        .collect();
    assert_eq!(ids, vec![(0, 2), (1, 3), (2, 4), (3, 5)]);
}

/// G17: the docs' ANNP (priority 9000 in the Application tier) rejecting TCP 22 from an
/// ExternalEntity IP and an ipBlock to the VM (host port 20).
fn g17_rule() -> CompiledRuleInput {
    rule(
        "annp-reject",
        Direction::In,
        0,
        RuleAction::Reject,
        DEFAULT_TIER_PRIORITY,
        9000.0,
        vec![ip("10.0.0.8/32"), ip("172.16.100.5/32")],
        vec![Peer::OfPort(20)],
        Some(vec![Service::port(Protocol::Tcp, 22)]),
    )
}

const G17: &[&str] = &[
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,conj_id=2 actions=set_field:0x2->reg3,set_field:0x400/0x400->reg0,set_field:0x4000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,ip,nw_src=10.0.0.8 actions=conjunction(2,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,ip,nw_src=172.16.100.5 actions=conjunction(2,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,reg1=0x14 actions=conjunction(2,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,tcp,tp_dst=22 actions=conjunction(2,3/3)",
    "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0x2 actions=drop",
];

#[test]
fn g17_ingress_reject_full_compile() {
    let out = compile(&[g17_rule()], 1, CompileOptions::upstream());
    assert!(out.skipped.is_empty());
    assert_eq!(rendered_set(&out.flows), ovs_text(G17));
    let info = out.conjunctions.get(&2).expect("conjunction 2");
    assert_eq!(
        (info.table, info.priority, info.action),
        (table::ANTREA_POLICY_INGRESS_RULE, 106, RuleAction::Reject)
    );

    // IPv6 policed: the service gets a tcp6 twin; the Reject action flow and the deny metric
    // flow are protocol-less and shared by both families.
    let out = compile(&[g17_rule()], 1, CompileOptions::default());
    let mut want = ovs_text(G17);
    want.insert(canon(
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,tcp6,tp_dst=22 actions=conjunction(2,3/3)",
    ));
    assert_eq!(rendered_set(&out.flows), want);

    // With logging: disposition Reject, operations log+reject (3).
    let mut logged = g17_rule();
    logged.enable_logging = true;
    let out = compile(&[logged], 1, CompileOptions::upstream());
    assert!(rendered_set(&out.flows).contains(&canon(
        "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=106,conj_id=2 actions=set_field:0x2->reg3,set_field:0x400/0x400->reg0,set_field:0x1000/0x1800->reg0,set_field:0x6000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4"
    )));
}

/// G18: ANNP priority 5 (Application tier) applied to 10.0.0.5, egress Allow TCP 80-90 to
/// 192.168.10.0/24.
fn g18_rule(v6_peer: bool) -> CompiledRuleInput {
    let mut to = vec![ip("192.168.10.0/24")];
    if v6_peer {
        to.push(ip("fd00:10::/64"));
    }
    rule(
        "annp-egress",
        Direction::Out,
        0,
        RuleAction::Allow,
        DEFAULT_TIER_PRIORITY,
        5.0,
        vec![ip("10.0.0.5/32")],
        to,
        Some(vec![Service::range(Protocol::Tcp, 80, 90)]),
    )
}

const G18: &[&str] = &[
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ip actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65520,exec(set_field:0x300000000/0xffffffff00000000->ct_label))",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,ip,nw_src=10.0.0.5 actions=conjunction(3,1/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,ip,nw_dst=192.168.10.0/24 actions=conjunction(3,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp,tp_dst=0x50/0xfff8 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp,tp_dst=0x58/0xfffe actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp,tp_dst=90 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=+new,ct_label=0x300000000/0xffffffff00000000,ip actions=goto_table:L2ForwardingCalc",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=-new,ct_label=0x300000000/0xffffffff00000000,ip actions=goto_table:L2ForwardingCalc",
];

const G18_LOGGING: &str = "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ip actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65520,exec(set_field:0x300000000/0xffffffff00000000->ct_label)),set_field:0x0/0x1800->reg0,set_field:0x400000/0x600000->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0x4/0xff->reg2,goto_table:Output";

/// This agent's IPv6 twins of G18 (derived from §11) with an IPv6 peer fd00:10::/64.
const G18_V6: &[&str] = &[
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ipv6 actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65510,exec(set_field:0x300000000/0xffffffff00000000->ct_label))",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,ipv6,ipv6_dst=fd00:10::/64 actions=conjunction(3,2/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp6,tp_dst=0x50/0xfff8 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp6,tp_dst=0x58/0xfffe actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,tcp6,tp_dst=90 actions=conjunction(3,3/3)",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=+new,ct_label=0x300000000/0xffffffff00000000,ipv6 actions=goto_table:L2ForwardingCalc",
    "cookie=0x1020000000000, table=EgressMetric, priority=200,ct_state=-new,ct_label=0x300000000/0xffffffff00000000,ipv6 actions=goto_table:L2ForwardingCalc",
];

const G18_LOGGING_V6: &str = "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14500,conj_id=3,ipv6 actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65510,exec(set_field:0x300000000/0xffffffff00000000->ct_label)),set_field:0x0/0x1800->reg0,set_field:0x400000/0x600000->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0x4/0xff->reg2,goto_table:Output";

#[test]
fn g18_egress_allow_port_range() {
    // The priority comes from the compiler (14500 on an empty table); FlowID 3 as in the
    // reference (the compiler would hand out 2 to the first rule), so use the engine directly.
    let r = g18_rule(false);
    let out = compile(std::slice::from_ref(&r), 1, CompileOptions::upstream());
    let info = out.conjunctions.values().next().expect("one conjunction");
    assert_eq!(
        (info.table, info.priority),
        (table::ANTREA_POLICY_EGRESS_RULE, 14500)
    );
    let flows = build_flows(
        &[resolved(&r, 3, info.table, info.priority)],
        1,
        &CompileOptions::upstream(),
    );
    assert_eq!(rendered(&flows), ovs_text(G18));

    // Logging: the IPv4 action flow changes.
    let mut logged = r.clone();
    logged.enable_logging = true;
    let flows = build_flows(
        &[resolved(&logged, 3, info.table, info.priority)],
        1,
        &CompileOptions::upstream(),
    );
    let mut want = ovs_text(G18);
    want.remove(&canon(G18[0]));
    want.insert(canon(G18_LOGGING));
    assert_eq!(rendered(&flows), want);

    // IPv6 twins, with an IPv6 peer, with and without logging.
    let r6 = g18_rule(true);
    let flows = build_flows(
        &[resolved(&r6, 3, info.table, info.priority)],
        1,
        &CompileOptions::default(),
    );
    let mut want = ovs_text(G18);
    want.extend(ovs_text(G18_V6));
    assert_eq!(rendered(&flows), want);
    let mut logged6 = r6.clone();
    logged6.enable_logging = true;
    let flows = build_flows(
        &[resolved(&logged6, 3, info.table, info.priority)],
        1,
        &CompileOptions::default(),
    );
    want.remove(&canon(G18[0]));
    want.remove(&canon(G18_V6[0]));
    want.insert(canon(G18_LOGGING));
    want.insert(canon(G18_LOGGING_V6));
    assert_eq!(rendered(&flows), want);
}

#[test]
fn g19_cookies_follow_the_round() {
    let r = g17_rule();
    for (round, c) in [
        (0u16, 0x20000000000u64),
        (1, 0x1020000000000),
        (2, 0x2020000000000),
    ] {
        let out = compile(std::slice::from_ref(&r), round, CompileOptions::default());
        assert!(!out.flows.is_empty());
        assert!(out.flows.values().all(|f| f.cookie == c), "round {round}");
        assert_eq!(c & !pipeline::ROUND_MASK, 0x20000000000);
    }
}

#[test]
fn action_flow_templates() {
    // §8.5 templates with concrete ids (the DERIVED lines of the codec's golden data).
    use Direction::{In, Out};
    let mut reject_egress = rule("a", Out, 0, RuleAction::Reject, 250, 1.0, vec![], vec![], None);
    let mut reject_logged = rule("b", In, 0, RuleAction::Reject, 250, 1.0, vec![], vec![], None);
    reject_logged.enable_logging = true;
    let mut drop_logged = rule("c", In, 0, RuleAction::Drop, 250, 1.0, vec![], vec![], None);
    drop_logged.enable_logging = true;
    let pass_egress = rule("d", Out, 0, RuleAction::Pass, 250, 1.0, vec![], vec![], None);
    let mut pass_logged = rule("e", In, 0, RuleAction::Pass, 250, 1.0, vec![], vec![], None);
    pass_logged.enable_logging = true;
    reject_egress.log_label = "x".into();
    let rules = [
        resolved(&reject_egress, 5, table::ANTREA_POLICY_EGRESS_RULE, 13000),
        resolved(&reject_logged, 5, table::ANTREA_POLICY_INGRESS_RULE, 13000),
        resolved(&drop_logged, 6, table::ANTREA_POLICY_INGRESS_RULE, 13001),
        resolved(&pass_egress, 7, table::ANTREA_POLICY_EGRESS_RULE, 13002),
        resolved(&pass_logged, 8, table::ANTREA_POLICY_INGRESS_RULE, 13003),
    ];
    let got = rendered(&build_flows(&rules, 1, &CompileOptions::default()));
    assert_eq!(
        got,
        ovs_text(&[
            "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=13000,conj_id=5 actions=set_field:0x5->reg3,set_field:0x400/0x400->reg0,set_field:0x4000000/0xfe000000->reg0,set_field:0x4/0xff->reg2,group:2",
            "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=13000,conj_id=5 actions=set_field:0x5->reg3,set_field:0x400/0x400->reg0,set_field:0x1000/0x1800->reg0,set_field:0x6000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4",
            "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=13001,conj_id=6 actions=set_field:0x6->reg3,set_field:0x400/0x400->reg0,set_field:0x800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:4",
            "cookie=0x1020000000000, table=EgressMetric, priority=200,reg0=0x400/0x400,reg3=0x5 actions=drop",
            "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0x5 actions=drop",
            "cookie=0x1020000000000, table=IngressMetric, priority=200,reg0=0x400/0x400,reg3=0x6 actions=drop",
            "cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=13002,conj_id=7 actions=set_field:0x7->reg5,goto_table:EgressRule",
            "cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=13003,conj_id=8 actions=set_field:0x8->reg6,set_field:0x1800/0x1800->reg0,set_field:0x2000000/0xfe000000->reg0,set_field:0xa/0xff->reg2,group:3",
        ])
    );
}

#[test]
fn baseline_rules_use_the_default_tables() {
    use Direction::{In, Out};
    let allow = rule(
        "base",
        Out,
        0,
        RuleAction::Allow,
        BASELINE_TIER_PRIORITY,
        5.0,
        vec![ip("10.0.0.5/32")],
        vec![ip("0.0.0.0/0")],
        None,
    );
    let pass = rule(
        "base",
        In,
        1,
        RuleAction::Pass,
        BASELINE_TIER_PRIORITY,
        5.0,
        vec![ip("0.0.0.0/0")],
        vec![Peer::OfPort(20)],
        None,
    );
    let out = compile(&[allow, pass], 1, CompileOptions::upstream());
    let lines = rendered_set(&out.flows);
    // Baseline range 10..=180: policy 5 → 180 - 50 - rule.
    assert!(lines.contains("cookie=0x1020000000000, table=EgressDefaultRule, priority=130,conj_id=3,ip actions=set_field:0x3->reg5,ct(commit,table=EgressMetric,zone=65520,exec(set_field:0x300000000/0xffffffff00000000->ct_label))"), "{lines:#?}");
    // The any-peer 0.0.0.0/0 is stored by OVS as a plain `ip` match.
    assert!(
        lines.contains(
            "cookie=0x1020000000000, table=EgressDefaultRule, priority=130,ip actions=conjunction(3,2/2)"
        ),
        "{lines:#?}"
    );
    // Pass from a baseline table continues to the metric table (divergence, see module docs).
    assert!(lines.contains("cookie=0x1020000000000, table=IngressDefaultRule, priority=129,conj_id=2 actions=set_field:0x2->reg6,goto_table:IngressMetric"), "{lines:#?}");
}

// === clauses ===

#[test]
fn clauses_without_services_and_with_an_empty_service_list() {
    use Direction::In;
    let all_ports = rule(
        "a",
        In,
        0,
        RuleAction::Allow,
        250,
        1.0,
        vec![ip("10.0.0.1/32")],
        vec![Peer::OfPort(1)],
        None,
    );
    let no_port = rule(
        "b",
        In,
        0,
        RuleAction::Allow,
        250,
        2.0,
        vec![ip("10.0.0.1/32")],
        vec![Peer::OfPort(1)],
        Some(vec![]),
    );
    let out = compile(&[all_ports, no_port], 1, CompileOptions::upstream());
    let lines = rendered_set(&out.flows);
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=14900,ip,nw_src=10.0.0.1 actions=conjunction(2,1/2)"), "{lines:#?}");
    // The empty service clause makes 3 clauses with no service flow: the rule never matches.
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=14800,ip,nw_src=10.0.0.1 actions=conjunction(3,1/3)"), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("conjunction(3,3/3)")));
    // Empty peer lists: the action and metric flows exist, no match flow.
    let inert = rule(
        "c",
        In,
        0,
        RuleAction::Drop,
        250,
        1.0,
        vec![],
        vec![Peer::OfPort(1)],
        None,
    );
    let out = compile(&[inert], 1, CompileOptions::upstream());
    assert_eq!(out.flows.len(), 3);
}

#[test]
fn shared_match_flows_and_duplicates() {
    use Direction::In;
    // Two rules at the same priority (same policy zone is not needed: same OF priority is).
    let a = rule(
        "a",
        In,
        0,
        RuleAction::Allow,
        250,
        1.0,
        vec![ip("10.0.0.1/32"), ip("10.0.0.1/32"), ip("10.0.0.0/24")],
        vec![Peer::OfPort(1)],
        None,
    );
    let b = rule(
        "b",
        In,
        0,
        RuleAction::Drop,
        250,
        1.0,
        vec![Peer::host("10.0.0.1".parse().expect("ip")), ip("10.0.0.9/24")],
        vec![Peer::OfPort(1)],
        None,
    );
    let rules = [resolved(&a, 2, 10, 500), resolved(&b, 3, 10, 500)];
    let got = rendered(&build_flows(&rules, 1, &CompileOptions::upstream()));
    // An address and the same /32 are one match; a CIDR with host bits is its network.
    assert!(got.contains("cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=500,ip,nw_src=10.0.0.1 actions=conjunction(2,1/2),conjunction(3,1/2)"));
    assert!(got.contains("cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=500,ip,nw_src=10.0.0.0/24 actions=conjunction(2,1/2),conjunction(3,1/2)"));
    assert!(got.contains("cookie=0x1020000000000, table=AntreaPolicyIngressRule, priority=500,reg1=0x1 actions=conjunction(2,2/2),conjunction(3,2/2)"));
    // Identity check: no two flows share (table, priority, match).
    let flows = build_flows(&rules, 1, &CompileOptions::upstream());
    assert_eq!(flow_set(flows.clone()).len(), flows.len());
}

#[test]
fn ipv6_peers_and_disabled_families() {
    use Direction::Out;
    let r = rule(
        "a",
        Out,
        0,
        RuleAction::Allow,
        250,
        1.0,
        vec![ip("10.0.0.5/32"), ip("fd00::5/128")],
        vec![ip("fd00:1::/64"), ip("::/0")],
        None,
    );
    let lines = rendered_set(&compile(std::slice::from_ref(&r), 1, CompileOptions::default()).flows);
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,ipv6,ipv6_src=fd00::5 actions=conjunction(2,1/2)"), "{lines:#?}");
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,ipv6,ipv6_dst=fd00:1::/64 actions=conjunction(2,2/2)"), "{lines:#?}");
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,ipv6 actions=conjunction(2,2/2)"), "{lines:#?}");
    let v4 = rendered_set(&compile(std::slice::from_ref(&r), 1, CompileOptions::upstream()).flows);
    assert!(!v4.iter().any(|l| l.contains("ipv6")), "{v4:#?}");
}

// === stability ===

pub(super) fn many_rules(n: usize) -> Vec<CompiledRuleInput> {
    (0..n)
        .map(|i| {
            let dir = if i % 2 == 0 { Direction::In } else { Direction::Out };
            let action = [
                RuleAction::Allow,
                RuleAction::Drop,
                RuleAction::Reject,
                RuleAction::Pass,
            ][i % 4];
            let peer = ip(&format!("10.{}.{}.0/24", (i / 256) % 256, i % 256));
            let local_ip = ip("10.99.0.2/32");
            let (from, to) = match dir {
                Direction::In => (vec![peer, ip("192.168.0.0/16")], vec![Peer::OfPort(3)]),
                Direction::Out => (vec![local_ip], vec![peer, ip("fd00::/8")]),
            };
            let services = Some(vec![
                Service::port(Protocol::Tcp, 22),
                Service::range(Protocol::Tcp, 8000, 8080 + (i % 7) as u16),
            ]);
            let mut r = rule(
                &format!("p{}", i / 5),
                dir,
                (i % 5) as i32,
                action,
                250,
                (i / 5) as f64,
                from,
                to,
                services,
            );
            r.max_rule_priority = 4;
            r.enable_logging = i % 3 == 0;
            r
        })
        .collect()
}

#[test]
fn matches_are_built_normalized() {
    // The compiler builds matches the way OVS stores them, so a flow's identity here is its
    // identity in the switch (no separate normalization pass).
    let mut rules = many_rules(200);
    rules.push(rule(
        "any",
        Direction::Out,
        0,
        RuleAction::Allow,
        250,
        1.0,
        vec![ip("10.0.0.5/32")],
        vec![ip("0.0.0.0/0"), ip("::/0"), ip("10.1.2.3/8")],
        Some(vec![Service::range(Protocol::Udp, 0, 65535)]),
    ));
    let out = compile(&rules, 1, CompileOptions::default());
    for (key, f) in &out.flows {
        assert_eq!(normalize_match(&f.matches), f.matches, "{f:?}");
        assert_eq!(key, &f.key());
    }
    // build_flows returns flows sorted by identity, each identity once.
    let resolved_rules: Vec<ResolvedRule<'_>> = rules
        .iter()
        .filter_map(|r| {
            let info = out.conjunctions.values().find(|i| i.rule_id == r.id)?;
            Some(resolved(r, info.conj_id, info.table, info.priority))
        })
        .collect();
    let flows = build_flows(&resolved_rules, 1, &CompileOptions::default());
    assert!(flows.windows(2).all(|w| w[0].key() < w[1].key()));
    assert_eq!(flows, out.flows.values().cloned().collect::<Vec<_>>());
    let lines = rendered_set(&out.flows);
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,udp actions=conjunction(2,3/3)"), "{lines:#?}");
    assert!(lines.contains("cookie=0x1020000000000, table=AntreaPolicyEgressRule, priority=14900,ip,nw_dst=10.0.0.0/8 actions=conjunction(2,2/3)"), "{lines:#?}");
}

#[test]
fn same_rule_set_same_output_in_any_order() {
    let rules = many_rules(60);
    let a = compile(&rules, 3, CompileOptions::default());
    let mut reversed = rules.clone();
    reversed.reverse();
    let b = compile(&reversed, 3, CompileOptions::default());
    assert_eq!(a.flows, b.flows);
    assert_eq!(a.conjunctions, b.conjunctions);
    assert!(a.skipped.is_empty());
    assert!(a.priority_updates.is_empty());
    // Recompiling the same set with the same compiler changes nothing.
    let mut c = Compiler::new(CompileOptions::default());
    let first = c.compile(&rules, 3);
    let second = c.compile(&reversed, 3);
    assert_eq!(first.flows, second.flows);
    assert_eq!(first.flows, a.flows);
}

#[test]
fn adding_and_removing_rules_leaves_the_others_alone() {
    let rules = many_rules(40);
    let mut c = Compiler::new(CompileOptions::default());
    let before = c.compile(&rules, 1);

    // A new policy (5 rules) in the middle of the precedence order.
    let mut more = rules.clone();
    for i in 0..5 {
        let mut r = rule(
            "new",
            Direction::In,
            i,
            RuleAction::Drop,
            250,
            3.5,
            vec![ip("1.2.3.4/32")],
            vec![Peer::OfPort(3)],
            None,
        );
        r.max_rule_priority = 4;
        more.push(r);
    }
    let after = c.compile(&more, 1);
    assert!(after.skipped.is_empty());
    assert!(after.priority_updates.is_empty());
    // Every earlier flow is still there, unchanged, except shared match flows that gained the
    // new rules' conjunction actions.
    let new_ids: BTreeSet<u32> = after
        .conjunctions
        .values()
        .filter(|c| c.policy.name == "new")
        .map(|c| c.conj_id)
        .collect();
    assert_eq!(new_ids.len(), 5);
    for (key, flow) in &before.flows {
        let now = after.flows.get(key).expect("earlier flow kept");
        if now != flow {
            let mut stripped = now.clone();
            stripped
                .actions
                .retain(|a| !matches!(a, Action::Conjunction { id, .. } if new_ids.contains(id)));
            assert_eq!(&stripped, flow);
        }
    }
    for (id, info) in &before.conjunctions {
        assert_eq!(after.conjunctions.get(id), Some(info));
    }
    // The new policy sits between policy priorities 3 and 4, in precedence order.
    let prio = |name: &str, idx: i32| {
        after
            .conjunctions
            .values()
            .find(|c| c.policy.name == name && c.rule_id.index == idx)
            .map(|c| c.priority)
            .expect("rule")
    };
    assert!(prio("p3", 3) > prio("new", 0));
    assert!(prio("new", 0) > prio("new", 4));
    assert!(prio("new", 4) > prio("p4", 0));

    // Removing it again gives back exactly the first flows; its ids are held, then reclaimed.
    let back = c.compile(&rules, 1);
    assert_eq!(back.flows, before.flows);
    for id in &new_ids {
        assert!(
            c.conjunction(*id).is_some(),
            "released conjunction {id} still known"
        );
    }
    assert_eq!(back.released.keys().copied().collect::<BTreeSet<u32>>(), new_ids);
    // A removed rule that comes back before reclaim gets its id back.
    let again = c.compile(&more, 1);
    assert_eq!(again.flows, after.flows);
    let back = c.compile(&rules, 1);
    assert_eq!(back.flows, before.flows);
    c.reclaim_released_ids();
    for id in &new_ids {
        assert!(c.conjunction(*id).is_none());
    }
    let mut other = rules.clone();
    other.push(rule(
        "other",
        Direction::In,
        0,
        RuleAction::Allow,
        250,
        9.0,
        vec![],
        vec![],
        None,
    ));
    let out = c.compile(&other, 1);
    let other_id = out
        .conjunctions
        .values()
        .find(|c| c.policy.name == "other")
        .map(|c| c.conj_id);
    assert_eq!(other_id, new_ids.iter().next().copied(), "lowest free id reused");
}

#[test]
fn held_ids_are_bounded() {
    let mut c = Compiler::new(CompileOptions::default());
    let mk = |name: String| {
        rule(
            &name,
            Direction::In,
            0,
            RuleAction::Allow,
            250,
            1.0,
            vec![],
            vec![],
            None,
        )
    };
    // Replace the whole rule set again and again without reclaiming: removed ids are held up
    // to the bound, then the oldest are reused.
    let batch = MAX_HELD_IDS / 2 + 10;
    let first_gen = FIRST_CONJ_ID..FIRST_CONJ_ID + batch as u32;
    let mut last = CompileOutput::default();
    for gen in 0..4 {
        let rules: Vec<CompiledRuleInput> = (0..batch).map(|i| mk(format!("g{gen}-{i}"))).collect();
        last = c.compile(&rules, 1);
        assert!(last.released.len() <= MAX_HELD_IDS, "generation {gen}");
    }
    assert_eq!(last.released.len(), MAX_HELD_IDS);
    // Generation 3 took the first generation's ids that were reclaimed at the bound.
    assert!(last.conjunctions.keys().any(|id| first_gen.contains(id)));
    assert!(last.released.keys().all(|id| !first_gen.contains(id)));
}

#[test]
fn squeezed_priorities_move_and_are_reported() {
    // Baseline table: 171 slots. Fill the policy-priority gap between two policies so a new
    // policy between them forces neighbours to move.
    let mk = |name: &str, pp: f64, n: i32| -> Vec<CompiledRuleInput> {
        (0..n)
            .map(|i| {
                let mut r = rule(
                    name,
                    Direction::In,
                    i,
                    RuleAction::Allow,
                    BASELINE_TIER_PRIORITY,
                    pp,
                    vec![],
                    vec![],
                    None,
                );
                r.max_rule_priority = n - 1;
                r
            })
            .collect()
    };
    let mut rules = mk("a", 1.0, 3);
    rules.extend(mk("b", 1.2, 3));
    let mut c = Compiler::new(CompileOptions::default());
    let first = c.compile(&rules, 1);
    // Baseline guesses 180 - 10*pp - rule: b (166..=168) is placed first, then a, whose guesses
    // collide with b, goes in the middle of the free space above (173..=175).
    let first_prios: BTreeMap<(String, i32), u16> = first
        .conjunctions
        .values()
        .map(|i| ((i.policy.name.clone(), i.rule_id.index), i.priority))
        .collect();
    let want: BTreeMap<(String, i32), u16> = [
        ("a", 0, 175),
        ("a", 1, 174),
        ("a", 2, 173),
        ("b", 0, 168),
        ("b", 1, 167),
        ("b", 2, 166),
    ]
    .into_iter()
    .map(|(n, i, o)| ((n.to_string(), i), o))
    .collect();
    assert_eq!(first_prios, want);
    // Six rules between them do not fit the four free slots: b moves down.
    rules.extend(mk("mid", 1.1, 6));
    let second = c.compile(&rules, 1);
    assert!(second.skipped.is_empty());
    let order: Vec<(String, i32, u16)> = second
        .conjunctions
        .values()
        .map(|i| (i.policy.name.clone(), i.rule_id.index, i.priority))
        .collect();
    let p = |n: &str, i: i32| {
        order
            .iter()
            .find(|o| o.0 == n && o.1 == i)
            .map(|o| o.2)
            .expect("rule")
    };
    assert!(p("a", 2) > p("mid", 0));
    assert!(p("mid", 5) > p("b", 0));
    let all: BTreeSet<u16> = order.iter().map(|o| o.2).collect();
    assert_eq!(all.len(), 12, "distinct priorities");
    // Upstream's minimum-cost window: b shifts down by two, a stays.
    let moves = second
        .priority_updates
        .get(&table::INGRESS_DEFAULT_RULE)
        .cloned()
        .unwrap_or_default();
    assert_eq!(moves, [(166, 164), (167, 165), (168, 166)].into_iter().collect());
    assert_eq!(
        (p("b", 2), p("b", 0), p("mid", 5), p("mid", 0), p("a", 2)),
        (164, 166, 167, 172, 173)
    );
}

#[test]
fn duplicates_and_k8s_rules_are_skipped() {
    let r = g17_rule();
    let mut k8s = g18_rule(false);
    k8s.policy.policy_type = PolicyType::K8sNetworkPolicy;
    let out = compile(
        &[r.clone(), r.clone(), k8s.clone()],
        1,
        CompileOptions::upstream(),
    );
    assert_eq!(out.conjunctions.len(), 1);
    let reasons: Vec<(&RuleId, &CompileError)> = out.skipped.iter().map(|s| (&s.id, &s.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            (&k8s.id, &CompileError::NotAntreaNative),
            (&r.id, &CompileError::DuplicateRule)
        ]
    );
    assert_eq!(rendered_set(&out.flows), ovs_text(G17));
}

#[test]
fn priority_overflow_skips_only_the_rules_that_do_not_fit() {
    // 171 baseline slots; a 200-rule policy does not fit, a 3-rule one does.
    let mut rules: Vec<CompiledRuleInput> = (0..200)
        .map(|i| {
            rule(
                "big",
                Direction::In,
                i,
                RuleAction::Allow,
                BASELINE_TIER_PRIORITY,
                1.0,
                vec![],
                vec![],
                None,
            )
        })
        .collect();
    rules.extend((0..3).map(|i| {
        rule(
            "small",
            Direction::In,
            i,
            RuleAction::Allow,
            BASELINE_TIER_PRIORITY,
            2.0,
            vec![],
            vec![],
            None,
        )
    }));
    let out = compile(&rules, 1, CompileOptions::default());
    assert_eq!(out.conjunctions.len(), 3);
    assert_eq!(out.skipped.len(), 200);
    assert!(out
        .skipped
        .iter()
        .all(|s| matches!(s.reason, CompileError::Priority(PriorityError::Overflow { .. }))));
}

/// Prints how long 10,000 rules take to compile (no assertion on time).
#[test]
fn ten_thousand_rules_compile_time() {
    let rules = many_rules(10_000);
    let start = Instant::now();
    let out = compile(&rules, 1, CompileOptions::default());
    let elapsed = start.elapsed();
    println!(
        "compiled {} rules into {} flows in {:?} ({} skipped)",
        rules.len(),
        out.flows.len(),
        elapsed,
        out.skipped.len()
    );
    assert!(out.skipped.is_empty());
    assert_eq!(out.conjunctions.len(), 10_000);
}

/// Many policies with distinct priorities in one tier, arriving one policy at a time after a
/// first compile with one rule (so the tables are not empty and no batch placement applies),
/// exhaust what upstream's registration can place (found by the end-to-end bench); the compact
/// fallback places them all incrementally, and `compile_or_rebuild` needs no rebuild.
#[test]
fn rules_that_upstream_cannot_place_incrementally_are_placed_compactly() {
    let rules: Vec<CompiledRuleInput> = many_rules(N_LATE)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.policy_priority = (i / 5 + 1) as f64;
            r
        })
        .collect();
    // One-at-a-time registration (upstream's) runs out of room for this set; the compact
    // fallback places every rule without starting over.
    let mut plain = Compiler::new(CompileOptions::default());
    assert!(plain.compile(&rules[..1], 1).skipped.is_empty());
    let late = plain.compile(&rules, 1);
    assert!(
        late.skipped.is_empty(),
        "every rule placed: {:?}",
        late.skipped.first()
    );
    assert_eq!(late.conjunctions.len(), N_LATE);
    let mut rebuilding = Compiler::new(CompileOptions::default());
    assert!(rebuilding.compile_or_rebuild(&rules[..1], 1).skipped.is_empty());
    let out = rebuilding.compile_or_rebuild(&rules, 1);
    assert!(out.skipped.is_empty());
    assert_eq!(out.flows, late.flows, "no rebuild was needed");
}

/// Large enough that one-at-a-time registration runs out of room in one tier.
const N_LATE: usize = 10_000;

/// Applies flow_mods to a flow set the way the switch does (ADD replaces by identity).
fn apply_mods(installed: &mut FlowSet, mods: Vec<FlowMod>) {
    for m in mods {
        match m.command {
            FlowModCommand::Add => {
                installed.insert(m.flow.key(), m.flow);
            }
            FlowModCommand::DeleteStrict => {
                assert!(
                    installed.remove(&m.flow.key()).is_some(),
                    "delete of a flow that is not installed: {:?}",
                    m.flow
                );
            }
            other => panic!("unexpected flow_mod {other:?}"),
        }
    }
}

/// One incremental step: the delta applied to what was installed gives exactly the complete
/// flow set of the new rule set, and the per-table counts follow. Returns the number of mods.
///
/// The mods are applied in the order they are streamed into the bundle (chunk by chunk, with
/// a chunk size that varies from step to step, down to one rule per chunk), so the order
/// across chunks is checked as the switch executes it.
fn step(c: &mut Compiler, installed: &mut FlowSet, rules: &[Arc<CompiledRuleInput>]) -> usize {
    static STEPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let size = [1, 2, 3, 7, CHUNK_RULES][STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 5];
    let (up, delta) = c.update_delta(rules, None, 1, true);
    assert!(!up.full);
    let mut chunks = delta.into_chunks(size);
    let mods: Vec<FlowMod> = chunks.by_ref().flatten().collect();
    c.adjust_flow_counts(chunks.count_changes());
    let n = mods.len();
    apply_mods(installed, mods);
    let counts = c.flow_counts().clone();
    let want = c.flows(1);
    assert_eq!(installed.len(), want.len());
    assert!(
        *installed == want,
        "the delta does not lead to the complete flow set"
    );
    let mut have: BTreeMap<u8, usize> = BTreeMap::new();
    for k in installed.keys() {
        *have.entry(k.table).or_insert(0) += 1;
    }
    counts.iter().filter(|(_, &n)| n == 0).for_each(|(t, _)| {
        have.entry(*t).or_insert(0);
    });
    assert_eq!(counts, have, "flow counts per table");
    n
}

fn arcs(rules: &[CompiledRuleInput]) -> Vec<Arc<CompiledRuleInput>> {
    let mut v: Vec<Arc<CompiledRuleInput>> = rules.iter().cloned().map(Arc::new).collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

#[test]
fn incremental_updates_equal_full_compilation() {
    let mut c = Compiler::new(CompileOptions::default());
    let mut installed = FlowSet::new();
    // As the flow installer: an empty first view, then every rule at once.
    assert_eq!(step(&mut c, &mut installed, &[]), 0);
    let mut rules = arcs(&many_rules(60));
    let n = step(&mut c, &mut installed, &rules);
    assert_eq!(n, installed.len(), "all adds");
    // The same view again, and the same rules in new allocations: nothing to do.
    assert_eq!(step(&mut c, &mut installed, &rules), 0);
    assert_eq!(step(&mut c, &mut installed, &arcs(&many_rules(60))), 0);
    // Keep the compiler's allocations from here on: pointer comparison is the fast path.
    rules = arcs(&many_rules(60));
    step(&mut c, &mut installed, &rules);

    // A twin of policy p3 (same tier and policy priority, so same OpenFlow priorities): its
    // rules share match flows with p3's, which gain and then lose conjunction actions.
    let twin: Vec<CompiledRuleInput> = many_rules(60)
        .into_iter()
        .filter(|r| r.policy.name == "p3")
        .map(|mut r| {
            r.id.policy_uid = "uid-twin".into();
            r.policy = anp("twin");
            r
        })
        .collect();
    let mut with_twin = rules.clone();
    with_twin.extend(arcs(&twin));
    with_twin.sort_by(|a, b| a.id.cmp(&b.id));
    let n = step(&mut c, &mut installed, &with_twin);
    assert!(
        n > 0 && n < 150,
        "{n} mods for 5 rules sharing flows, of {}",
        installed.len()
    );
    assert!(installed.values().any(|f| f
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Conjunction { .. }))
        .count()
        == 2));
    let n = step(&mut c, &mut installed, &rules);
    assert!(n > 0 && n < 150, "{n} mods");

    // One rule's peers change: only its flows.
    let mut changed = rules.clone();
    let mut r = (*changed[7]).clone();
    r.from.push(ip("172.16.0.0/12"));
    changed[7] = Arc::new(r);
    let n = step(&mut c, &mut installed, &changed);
    assert!((1..=4).contains(&n), "{n} mods for one new peer");

    // Policy priorities change (the rules move), some rules go, some come: a pseudo-random walk.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut current: Vec<CompiledRuleInput> = changed.iter().map(|r| (**r).clone()).collect();
    for round in 0..40 {
        match next(4) {
            0 if !current.is_empty() => {
                let i = next(current.len() as u64) as usize;
                current.remove(i);
            }
            1 => {
                let i = next(current.len().max(1) as u64) as usize;
                if let Some(r) = current.get_mut(i) {
                    r.policy_priority = next(12) as f64 / 2.0;
                }
            }
            2 => {
                let i = next(current.len().max(1) as u64) as usize;
                if let Some(r) = current.get_mut(i) {
                    r.to.push(ip(&format!("10.200.{}.0/24", next(4))));
                    r.action = RuleAction::Drop;
                }
            }
            _ => {
                let k = next(100) as usize;
                let mut r = many_rules(60)[k % 60].clone();
                r.id.policy_uid = format!("uid-walk-{k}");
                r.policy = anp(&format!("walk-{k}"));
                r.policy_priority = next(12) as f64 / 2.0;
                current.push(r);
            }
        }
        let view = arcs(&current);
        step(&mut c, &mut installed, &view);
        if round % 10 == 9 {
            c.reclaim_released_ids();
        }
    }
    // Back to the start: the same flows as a fresh compiler would have, apart from ids and
    // priorities, which a fresh compiler hands out differently; so compare the counts.
    step(&mut c, &mut installed, &rules);
    assert_eq!(
        installed.len(),
        compile(&many_rules(60), 1, CompileOptions::default()).flows.len()
    );
}

#[test]
fn incremental_updates_follow_squeezed_priorities() {
    // The squeeze of `squeezed_priorities_move_and_are_reported`, through `update`: the rules
    // whose priorities move get their flows rewritten, and nothing else is touched.
    let mk = |name: &str, pp: f64, n: i32| -> Vec<CompiledRuleInput> {
        (0..n)
            .map(|i| {
                let mut r = rule(
                    name,
                    Direction::In,
                    i,
                    RuleAction::Drop,
                    BASELINE_TIER_PRIORITY,
                    pp,
                    vec![ip(&format!("10.0.{i}.0/24"))],
                    vec![Peer::OfPort(3)],
                    None,
                );
                r.max_rule_priority = n - 1;
                r
            })
            .collect()
    };
    let mut rules = mk("a", 1.0, 3);
    rules.extend(mk("b", 1.2, 3));
    let mut c = Compiler::new(CompileOptions::default());
    let mut installed = FlowSet::new();
    step(&mut c, &mut installed, &arcs(&rules));
    rules.extend(mk("mid", 1.1, 6));
    let up = c.clone().update(&arcs(&rules), 1);
    assert_eq!(
        up.priority_updates
            .get(&table::INGRESS_DEFAULT_RULE)
            .map(BTreeMap::len),
        Some(3)
    );
    step(&mut c, &mut installed, &arcs(&rules));
    rules.truncate(6);
    step(&mut c, &mut installed, &arcs(&rules));
}

#[test]
fn published_conjunctions_follow_the_compiler() {
    let mut c = Compiler::new(CompileOptions::default());
    let mut publisher = ConjunctionPublisher::new();
    let rules = arcs(&many_rules(20));
    c.update(&rules, 1);
    assert_eq!(*publisher.publish(&mut c), c.known_conjunctions());
    let mut held = None;
    for n in [15, 18, 10, 20, 20, 3] {
        c.update(&rules[..n], 1);
        let published = publisher.publish(&mut c);
        assert_eq!(*published, c.known_conjunctions(), "{n} rules");
        // A reader that keeps a map forces a copy, and still sees its own version.
        if n == 18 {
            held = Some((published, c.known_conjunctions()));
        }
    }
    c.reclaim_released_ids();
    assert_eq!(*publisher.publish(&mut c), c.known_conjunctions());
    let (kept, then) = held.expect("published at 18");
    assert_eq!(*kept, then);
}

#[test]
fn priority_users_track_the_last_use_of_each_priority() {
    let id = |uid: &str, index: i32| RuleId {
        policy_uid: uid.into(),
        direction: Direction::Out,
        index,
        services_key: String::new(),
    };
    let p1 = (7u8, Priority::new(250, 1.0, 0));
    let p2 = (7u8, Priority::new(250, 2.0, 0));
    let mut users = PriorityUsers::default();
    users.insert(p1, id("b", 0));
    users.insert(p1, id("a", 3));
    users.insert(p2, id("a", 0));
    assert_eq!(users.of(p1).collect::<Vec<_>>(), [&id("a", 3), &id("b", 0)]);
    assert!(!users.remove_last(p1, &id("a", 3)), "b still uses p1");
    assert!(
        !users.remove_last(p1, &id("zz", 0)),
        "not a user: not the last use either"
    );
    assert!(users.remove_last(p1, &id("b", 0)));
    assert!(!users.is_used(p1));
    assert!(users.is_used(p2), "another priority is untouched");
    assert_eq!(users.of(p2).count(), 1);
}
