//! The rule compiler's input: one resolved NetworkPolicy rule as the flow compiler sees it
//! ([`CompiledRuleInput`]), decoupled from the controlplane wire model, plus the pure helpers
//! that produce its peer lists (ipBlock minus except, applied-to ports and IPs) and pick its
//! OpenFlow table.
//!
//! A rule is what Antrea's agent calls a `types.PolicyRule` before it gets a conjunction id and
//! an OpenFlow priority (pipeline reference §8.1): its peers are already resolved into IP
//! addresses/CIDRs and OpenFlow ports, and its named ports into numbers. One controlplane rule
//! whose named ports resolve differently for different target members becomes several inputs,
//! told apart by [`RuleId::services_key`].

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::pipeline::table;

/// Tier priority of the `baseline` tier (rules go to the `*DefaultRule` tables).
pub const BASELINE_TIER_PRIORITY: i32 = 253;
/// Tier priority Antrea gives BaselineAdminNetworkPolicy (also the `*DefaultRule` tables).
pub const BANP_TIER_PRIORITY: i32 = 254;
/// Tier priority of the default `application` tier.
pub const DEFAULT_TIER_PRIORITY: i32 = 250;

/// Traffic direction of a rule, as in the controlplane API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Direction {
    /// Ingress: `from` peers to the applied-to interfaces.
    In,
    /// Egress: the applied-to interfaces to `to` peers.
    Out,
}

/// What a rule does with the traffic it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum RuleAction {
    Allow,
    Drop,
    Reject,
    Pass,
}

/// The kind of policy a rule comes from (controlplane `NetworkPolicyType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum PolicyType {
    K8sNetworkPolicy,
    AntreaClusterNetworkPolicy,
    AntreaNetworkPolicy,
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
}

impl PolicyType {
    /// The name Antrea uses in audit logs and the API (`AntreaNetworkPolicy`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyType::K8sNetworkPolicy => "K8sNetworkPolicy",
            PolicyType::AntreaClusterNetworkPolicy => "AntreaClusterNetworkPolicy",
            PolicyType::AntreaNetworkPolicy => "AntreaNetworkPolicy",
            PolicyType::AdminNetworkPolicy => "AdminNetworkPolicy",
            PolicyType::BaselineAdminNetworkPolicy => "BaselineAdminNetworkPolicy",
        }
    }
}

/// The policy a rule belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    pub policy_type: PolicyType,
    /// Empty for cluster-scoped policies.
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The empty policy uid, below every other: where a search starts (shared, so starting one
/// allocates nothing).
pub fn no_policy_uid() -> Arc<str> {
    static EMPTY: OnceLock<Arc<str>> = OnceLock::new();
    Arc::clone(EMPTY.get_or_init(|| Arc::from("")))
}

/// A rule's identity. The conjunction id allocator keys on it, so a rule keeps its conjunction
/// id (and therefore its flows) while it exists, whatever else about it changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId {
    /// Shared by the rules of a policy: a rule id is cloned wherever rules are keyed (the
    /// resolved view, the priority users, the conjunction ids), without a copy of the uid.
    pub policy_uid: Arc<str>,
    /// Ingress and egress rules are numbered separately inside a policy.
    pub direction: Direction,
    /// The rule's index in the policy's ingress or egress list.
    pub index: i32,
    /// Empty, unless named ports split the rule into several inputs: then one distinct key per
    /// group of target members whose named ports resolve to the same numbers.
    pub services_key: String,
}

/// One element of a rule's `from` or `to` clause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// An IP address (as a /32 or /128) or a CIDR: `nw_src`/`nw_dst` (`ipv6_src`/`ipv6_dst`).
    Cidr(IpNet),
    /// A local OpenFlow port: `reg1=<port>` in `to` (the port L2ForwardingCalc chose as the
    /// output), `in_port=<port>` in `from`.
    OfPort(u32),
}

impl Peer {
    /// A single address.
    pub fn host(ip: IpAddr) -> Peer {
        Peer::Cidr(IpNet::from(ip))
    }
}

/// L4 protocol of a service. Antrea's controlplane has one `ICMP` protocol for both families:
/// the IPv6 twin of an ICMP service matches ICMPv6.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// Also what an unset protocol means.
    #[default]
    Tcp,
    Udp,
    Sctp,
    Icmp,
}

/// One entry of a rule's service clause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Service {
    pub protocol: Protocol,
    /// Destination port; `None` (or 0) = every port.
    pub port: Option<u16>,
    /// With `port`, a range `port..=end_port` (ignored unless greater than `port`).
    pub end_port: Option<u16>,
    /// Source port (and range), TCP/UDP/SCTP only.
    pub src_port: Option<u16>,
    pub src_end_port: Option<u16>,
    /// ICMP/ICMPv6 type and code; `None` = any.
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
}

impl Service {
    /// A TCP/UDP/SCTP service on one destination port.
    pub fn port(protocol: Protocol, port: u16) -> Service {
        Service {
            protocol,
            port: Some(port),
            ..Service::default()
        }
    }
    /// A TCP/UDP/SCTP service on the destination port range `start..=end`.
    pub fn range(protocol: Protocol, start: u16, end: u16) -> Service {
        Service {
            protocol,
            port: Some(start),
            end_port: Some(end),
            ..Service::default()
        }
    }
    /// An ICMP (and ICMPv6) service.
    pub fn icmp(icmp_type: Option<u8>, icmp_code: Option<u8>) -> Service {
        Service {
            protocol: Protocol::Icmp,
            icmp_type,
            icmp_code,
            ..Service::default()
        }
    }
}

/// A resolved rule: everything the flow compiler needs to produce its flows.
///
/// On a VM every rule is Antrea-native, and `from` and `to` are always clauses (an empty list
/// is a clause that matches nothing, so the rule is inert until its peers resolve), so a rule
/// has 2 or 3 clauses:
/// * ingress: `from` = peer addresses/CIDRs ([`ip_block_cidrs`] for ipBlocks), `to` = the
///   applied-to interfaces' ports ([`applied_to_ports`]);
/// * egress: `from` = the applied-to interfaces' IPs ([`applied_to_ips`]), `to` = peers.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledRuleInput {
    pub id: RuleId,
    pub policy: PolicyRef,
    pub rule_name: String,
    pub direction: Direction,
    pub action: RuleAction,
    /// Tier priority (Emergency 50 ... Application 250, Baseline 253).
    pub tier_priority: i32,
    /// The policy's `priority` (a float in the API).
    pub policy_priority: f64,
    /// The rule's index inside the policy (`rule_priority` of Antrea's `types.Priority`).
    pub rule_priority: i32,
    /// The highest rule index of the policy (Antrea's `MaxPriority`): when a policy first
    /// appears after the initial sync, all its rule priorities are registered at once.
    pub max_rule_priority: i32,
    pub from: Vec<Peer>,
    pub to: Vec<Peer>,
    /// `None` = all protocols and ports (no service clause). `Some(vec![])` = a service clause
    /// with nothing in it: the rule never matches (named ports that resolved to nothing).
    pub services: Option<Vec<Service>>,
    pub enable_logging: bool,
    pub log_label: String,
    /// An egress rule with FQDN peers: its selectors and the ports of its applied-to
    /// interfaces. The addresses those names resolve to are not in `to`: the FQDN controller
    /// adds them as clause flows of their own (the `fqdn` module).
    pub fqdn: Option<FqdnPeers>,
}

/// The FQDN peers of an egress rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FqdnPeers {
    /// Normalized selectors (lower case, no trailing dot), sorted, distinct.
    pub selectors: Vec<String>,
    /// OpenFlow ports of the host internal ports of the applied-to interfaces (the DNS
    /// interception's clause 2 matches responses going to them).
    pub ports: Vec<u32>,
}

impl CompiledRuleInput {
    /// Antrea's `IsAntreaNetworkPolicyRule`: every type but K8s NetworkPolicy.
    pub fn is_antrea_native(&self) -> bool {
        self.policy.policy_type != PolicyType::K8sNetworkPolicy
    }
}

/// A local interface a rule applies to: the OVS internal (host) port and its IPs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalInterface {
    pub ofport: u32,
    pub ips: Vec<IpAddr>,
}

/// The ingress `to` clause of rules applied to `interfaces`: their ports, sorted, deduplicated.
pub fn applied_to_ports(interfaces: &[LocalInterface]) -> Vec<Peer> {
    let mut ports: Vec<u32> = interfaces.iter().map(|i| i.ofport).collect();
    ports.sort_unstable();
    ports.dedup();
    ports.into_iter().map(Peer::OfPort).collect()
}

/// The egress `from` clause of rules applied to `interfaces`: their IPs (matched as source
/// addresses, as Antrea does for ExternalEntity interfaces), sorted, deduplicated.
pub fn applied_to_ips(interfaces: &[LocalInterface]) -> Vec<Peer> {
    let mut ips: Vec<IpAddr> = interfaces.iter().flat_map(|i| i.ips.iter().copied()).collect();
    ips.sort_unstable();
    ips.dedup();
    ips.into_iter().map(Peer::host).collect()
}

/// The OpenFlow table of an Antrea-native rule (§8.2): the baseline tier (and BANP) go to the
/// `*DefaultRule` tables, every other tier to `AntreaPolicy*Rule`. K8s NetworkPolicy rules
/// would use `IngressRule`/`EgressRule`.
pub fn rule_table(rule: &CompiledRuleInput) -> u8 {
    let baseline = matches!(rule.tier_priority, BASELINE_TIER_PRIORITY | BANP_TIER_PRIORITY);
    match (rule.direction, rule.is_antrea_native(), baseline) {
        (Direction::In, false, _) => table::INGRESS_RULE,
        (Direction::Out, false, _) => table::EGRESS_RULE,
        (Direction::In, true, true) => table::INGRESS_DEFAULT_RULE,
        (Direction::Out, true, true) => table::EGRESS_DEFAULT_RULE,
        (Direction::In, true, false) => table::ANTREA_POLICY_INGRESS_RULE,
        (Direction::Out, true, false) => table::ANTREA_POLICY_EGRESS_RULE,
    }
}

/// Whether a rule table is on the egress side (`reg5`, `EgressMetric`, `ct_label[32..63]`).
pub fn is_egress_table(t: u8) -> bool {
    matches!(
        t,
        table::EGRESS_RULE | table::EGRESS_DEFAULT_RULE | table::ANTREA_POLICY_EGRESS_RULE
    )
}

/// The addresses of an ipBlock: `cidr` minus every `except`, as the minimal list of CIDRs (the
/// canonical decomposition into aligned blocks), in address order. Excepts of the other
/// family or outside `cidr` change nothing; an except that covers `cidr` leaves nothing.
/// Host bits of the inputs are ignored. (Upstream's `DiffFromCIDRs` yields the same set, in
/// its own order; G15.)
pub fn ip_block_cidrs(cidr: IpNet, except: &[IpNet]) -> Vec<IpNet> {
    match cidr {
        IpNet::V4(n) => {
            let ex: Vec<(u128, u8)> = except
                .iter()
                .filter_map(|e| match e {
                    IpNet::V4(e) => Some((u128::from(u32::from(e.network())), e.prefix_len())),
                    IpNet::V6(_) => None,
                })
                .collect();
            let mut out = Vec::new();
            diff_blocks(
                u128::from(u32::from(n.network())),
                n.prefix_len(),
                32,
                &ex,
                &mut out,
            );
            out.into_iter()
                .filter_map(|(a, p)| {
                    let a = u32::try_from(a).ok()?;
                    Ipv4Net::new(a.into(), p).ok().map(IpNet::V4)
                })
                .collect()
        }
        IpNet::V6(n) => {
            let ex: Vec<(u128, u8)> = except
                .iter()
                .filter_map(|e| match e {
                    IpNet::V6(e) => Some((u128::from(e.network()), e.prefix_len())),
                    IpNet::V4(_) => None,
                })
                .collect();
            let mut out = Vec::new();
            diff_blocks(u128::from(n.network()), n.prefix_len(), 128, &ex, &mut out);
            out.into_iter()
                .filter_map(|(a, p)| Ipv6Net::new(a.into(), p).ok().map(IpNet::V6))
                .collect()
        }
    }
}

/// Mask of the top `prefix` bits of a `bits`-wide address held in a u128.
fn prefix_mask(prefix: u8, bits: u8) -> u128 {
    let width_mask = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    if prefix == 0 {
        0
    } else {
        (width_mask << (bits - prefix)) & width_mask
    }
}

/// Appends to `out` the blocks of `addr/prefix` not covered by any of `excepts`, recursing into
/// the two halves of a block that an except only partly covers.
fn diff_blocks(addr: u128, prefix: u8, bits: u8, excepts: &[(u128, u8)], out: &mut Vec<(u128, u8)>) {
    let addr = addr & prefix_mask(prefix, bits);
    let mut partial = false;
    for &(e, ep) in excepts {
        if ep <= prefix {
            // The except is as large or larger: it covers this block or is disjoint from it.
            if (addr & prefix_mask(ep, bits)) == (e & prefix_mask(ep, bits)) {
                return;
            }
        } else if (e & prefix_mask(prefix, bits)) == addr {
            partial = true;
        }
    }
    if !partial {
        out.push((addr, prefix));
        return;
    }
    let half = 1u128 << (bits - prefix - 1);
    diff_blocks(addr, prefix + 1, bits, excepts, out);
    diff_blocks(addr | half, prefix + 1, bits, excepts, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().expect("test cidr")).collect()
    }

    fn sorted(mut v: Vec<IpNet>) -> Vec<IpNet> {
        v.sort();
        v
    }

    #[test]
    fn g15_ip_block_with_two_excepts() {
        let got = ip_block_cidrs(
            "10.20.0.0/16".parse().expect("cidr"),
            &nets(&["10.20.1.0/24", "10.20.2.0/28"]),
        );
        let want = nets(&[
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
        ]);
        assert_eq!(sorted(got.clone()), sorted(want));
        // Address order.
        assert_eq!(got[0], "10.20.0.0/24".parse::<IpNet>().expect("cidr"));
        assert_eq!(
            ip_block_cidrs("10.10.0.0/16".parse().expect("cidr"), &[]),
            nets(&["10.10.0.0/16"])
        );
    }

    #[test]
    fn g15_single_except() {
        let got = ip_block_cidrs("10.20.0.0/16".parse().expect("cidr"), &nets(&["10.20.1.0/24"]));
        let want = nets(&[
            "10.20.128.0/17",
            "10.20.64.0/18",
            "10.20.32.0/19",
            "10.20.16.0/20",
            "10.20.8.0/21",
            "10.20.4.0/22",
            "10.20.2.0/23",
            "10.20.0.0/24",
        ]);
        assert_eq!(sorted(got), sorted(want));
    }

    #[test]
    fn except_edge_cases() {
        let all: IpNet = "10.0.0.0/8".parse().expect("cidr");
        // Covering except, equal except.
        assert!(ip_block_cidrs(all, &nets(&["0.0.0.0/0"])).is_empty());
        assert!(ip_block_cidrs(all, &nets(&["10.0.0.0/8"])).is_empty());
        // Disjoint and other-family excepts change nothing.
        assert_eq!(ip_block_cidrs(all, &nets(&["11.0.0.0/8", "fd00::/8"])), vec![all]);
        // Nested excepts: the larger one wins.
        let got = ip_block_cidrs(all, &nets(&["10.1.0.0/16", "10.1.2.0/24"]));
        assert_eq!(got.len(), 8);
        assert!(!got
            .iter()
            .any(|n| n.contains(&"10.1.2.3".parse::<IpAddr>().expect("ip"))));
        // Host bits are ignored; an address except splits down to /32.
        let got = ip_block_cidrs("10.0.0.7/30".parse().expect("cidr"), &nets(&["10.0.0.5/32"]));
        assert_eq!(sorted(got), sorted(nets(&["10.0.0.4/32", "10.0.0.6/31"])));
        // The whole space minus one address: 32 blocks; IPv6 minus a /64: 64 blocks.
        assert_eq!(
            ip_block_cidrs("0.0.0.0/0".parse().expect("cidr"), &nets(&["1.2.3.4/32"])).len(),
            32
        );
        let v6 = ip_block_cidrs("::/0".parse().expect("cidr"), &nets(&["fd00:1::/64"]));
        assert_eq!(v6.len(), 64);
        assert!(v6.contains(&"fd00:1:0:1::/64".parse().expect("cidr")));
        assert!(v6.contains(&"::/1".parse().expect("cidr")));
    }

    #[test]
    fn except_result_is_exact_cover() {
        // Brute force on a /24: every address is in the result iff it is in no except.
        let base: IpNet = "192.168.7.0/24".parse().expect("cidr");
        let ex = nets(&[
            "192.168.7.16/28",
            "192.168.7.200/29",
            "192.168.7.77/32",
            "192.168.6.0/23",
        ]);
        let partial = nets(&["192.168.7.16/28", "192.168.7.200/29", "192.168.7.77/32"]);
        assert!(ip_block_cidrs(base, &ex).is_empty());
        let got = ip_block_cidrs(base, &partial);
        for last in 0u8..=255 {
            let ip: IpAddr = std::net::Ipv4Addr::new(192, 168, 7, last).into();
            let excluded = partial.iter().any(|e| e.contains(&ip));
            let covered = got.iter().filter(|n| n.contains(&ip)).count();
            assert_eq!(covered, usize::from(!excluded), "{ip}");
        }
    }

    #[test]
    fn applied_to_helpers_dedup_and_sort() {
        let ifaces = vec![
            LocalInterface {
                ofport: 5,
                ips: vec!["10.0.0.5".parse().expect("ip"), "fd00::5".parse().expect("ip")],
            },
            LocalInterface {
                ofport: 3,
                ips: vec!["10.0.0.5".parse().expect("ip")],
            },
        ];
        assert_eq!(applied_to_ports(&ifaces), vec![Peer::OfPort(3), Peer::OfPort(5)]);
        assert_eq!(
            applied_to_ips(&ifaces),
            vec![
                Peer::Cidr("10.0.0.5/32".parse().expect("cidr")),
                Peer::Cidr("fd00::5/128".parse().expect("cidr")),
            ]
        );
    }
}
