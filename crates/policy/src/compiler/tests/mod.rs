//! Tests of the rule compiler: the golden cases of the pipeline reference (§13) rendered with the
//! `ovs-ofctl` renderer, their IPv6 twins, port-range masking, and the stability of ids and
//! priorities across compilations.
//!
//! Golden strings are Antrea's rendering converted to `ovs-ofctl` text by [`ovs_text`] (a zero
//! masked value prints as `0/0x..` there). Conjunction action lists are compared sorted: their
//! order is not significant (upstream's tests sort them too).
//!
//! The helpers (rule builders, the renderer's name map) and the port-range tests are here; the
//! golden cases are in `golden`, the stability of ids, priorities and incremental updates in
//! `stability`.

mod golden;
mod stability;

use std::collections::BTreeSet;
use std::time::Instant;

use super::*;
use crate::flowset::flow_set;
use crate::pipeline::table;
use crate::rule::{ip_block_cidrs, PolicyType, BASELINE_TIER_PRIORITY, DEFAULT_TIER_PRIORITY};
use crate::rule::{Peer, Protocol, Service};
use ovs_openflow::oxm::normalize_match;
use ovs_openflow::render::{render_flows, render_group, NameMap};
use ovs_openflow::Action;

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
            policy_uid: format!("uid-{policy}").into(),
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
                ovs_openflow::render::render_match(&f.matches, 1, &names())
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
