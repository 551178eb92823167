//! Policy bypass rules (`externalNode.policyBypassRules` of the agent's configuration): traffic
//! the pipeline lets through before any NetworkPolicy. Plain data; the agent's configuration
//! parses and checks them, the pipeline (`pipeline`) turns them into flows.

use ipnet::IpNet;

/// Direction of a policy bypass rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Ingress,
    Egress,
}

/// Protocol of a policy bypass rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BypassProtocol {
    Tcp,
    Udp,
    Icmp,
    /// Any IP protocol.
    Ip,
}

/// One `externalNode.policyBypassRules` entry: traffic that skips NetworkPolicy enforcement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BypassRule {
    pub direction: Direction,
    pub protocol: BypassProtocol,
    /// The remote peer, normalised to its network address (as Go's `net.ParseCIDR` returns it).
    /// IPv4 or IPv6.
    pub cidr: IpNet,
    /// Destination port; meaningful for TCP and UDP only (never 0 for those), 0 otherwise unless set.
    pub port: u16,
}
