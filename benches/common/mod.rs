//! Shared by the benches (included with `mod common;`): the 10,000-rule fleet generator that
//! `policy_compile` and `rule_stats` measure, and the small timing, memory and environment
//! helpers of the benches.

// Every bench includes this module and uses a different part of it.
#![allow(dead_code)]

pub mod agent;
pub mod fleet_files;
pub mod lab_fleet;
pub mod native;
pub mod replay;

use std::net::IpAddr;
use std::time::Duration;

use antrea_vm_agent::policy::rule::{
    CompiledRuleInput, Direction, Peer, PolicyRef, PolicyType, Protocol, RuleAction, RuleId, Service,
};

/// The VM's IPv4 address in the generated rules; the same as the lab VM's (`tests/support`).
pub const VM_IP4: &str = "10.99.0.2";

/// An environment variable parsed as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` rules shaped like a fleet's (10,000 = 2,000 policies of 5 rules): ingress and egress,
/// every action, a /24 peer and a /16 (or an IPv6 /8), TCP 22 plus a port range, a third with
/// logging. The VM's own address is [`VM_IP4`] (the lab VM's) and its ofport 3.
pub fn fleet_rules(n: usize) -> Vec<CompiledRuleInput> {
    let net = |s: &str| Peer::Cidr(s.parse().expect("bench cidr"));
    (0..n)
        .map(|i| {
            let direction = if i % 2 == 0 { Direction::In } else { Direction::Out };
            let peer = net(&format!("10.{}.{}.0/24", (i / 256) % 256, i % 256));
            let local: IpAddr = VM_IP4.parse().expect("bench ip");
            let (from, to) = match direction {
                Direction::In => (vec![peer, net("192.168.0.0/16")], vec![Peer::OfPort(3)]),
                Direction::Out => (vec![Peer::host(local)], vec![peer, net("fd00::/8")]),
            };
            let uid = format!("uid-{}", i / 5);
            CompiledRuleInput {
                id: RuleId {
                    policy_uid: uid.as_str().into(),
                    direction,
                    index: (i % 5) as i32,
                    services_key: String::new(),
                },
                policy: PolicyRef {
                    policy_type: PolicyType::AntreaClusterNetworkPolicy,
                    namespace: String::new(),
                    name: format!("p{}", i / 5),
                    uid,
                },
                rule_name: format!("r{i}"),
                direction,
                action: [
                    RuleAction::Allow,
                    RuleAction::Drop,
                    RuleAction::Reject,
                    RuleAction::Pass,
                ][i % 4],
                tier_priority: 250,
                policy_priority: (i / 5) as f64,
                rule_priority: (i % 5) as i32,
                max_rule_priority: 4,
                from,
                to,
                services: Some(vec![
                    Service::port(Protocol::Tcp, 22),
                    Service::range(Protocol::Tcp, 8000, 8080 + (i % 7) as u16),
                ]),
                enable_logging: i % 3 == 0,
                log_label: String::new(),
                fqdn: None,
            }
        })
        .collect()
}

/// A `/proc/self/status` field in KiB (`VmRSS:`, `VmHWM:`), 0 when unreadable.
pub fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `q` quantile (nearest rank) of `v`.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}
