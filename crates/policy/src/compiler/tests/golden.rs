//! The golden cases of the pipeline reference (§13) rendered with the `ovs-ofctl` renderer,
//! their IPv6 twins, the action flow templates, and how clauses are built and shared.

use super::*;

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
pub(super) fn g17_rule() -> CompiledRuleInput {
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

pub(super) const G17: &[&str] = &[
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
pub(super) fn g18_rule(v6_peer: bool) -> CompiledRuleInput {
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
