//! Which host links may become an ExternalNode's uplink: a pure decision over the kernel's view of
//! a link ([`LinkNature`]) and of its address. Attaching moves a link's addresses and routes to an
//! OVS internal port and puts the link into OVS, so taking the wrong one (the loopback, a bridge,
//! an OVS port, a bond slave, a tunnel) cuts the host off or opens it; those are refused before
//! anything on the host changes.
//!
//! A link is a candidate when it looks like a physical NIC: Ethernet hardware type, not loopback,
//! not a port of a bond, bridge or OVS datapath (no master), and either no driver kind (a real
//! NIC, virtio, ENA…) or one of the Ethernet-like kinds that stand in for a NIC: `veth` (labs,
//! containers), `bond` and `team` (the aggregate itself), `vlan`, `macvlan`, `ipvlan`. Tunnels,
//! bridges, OVS's own devices, dummies, TUN/TAP and every other kind are refused.

use std::net::IpAddr;

use super::{Address, Link};

/// Driver kinds (IFLA_INFO_KIND) that stand in for a physical NIC.
pub const UPLINK_KINDS: &[&str] = &["veth", "bond", "team", "vlan", "macvlan", "ipvlan"];

/// RT_SCOPE_HOST and RT_SCOPE_NOWHERE: addresses that never leave the host.
const SCOPE_HOST: u8 = 254;
const SCOPE_NOWHERE: u8 = 255;

/// Why a link cannot be an uplink.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ineligible {
    #[error("{name} is the loopback interface")]
    Loopback { name: String },
    #[error("{name} is an uplink the agent already renamed and moved into OVS")]
    AgentUplink { name: String },
    #[error("{name} is a port of {master} (a bond slave, bridge port or OVS port)")]
    Port { name: String, master: String },
    #[error("{name} is an Open vSwitch device (an OVS internal port or datapath)")]
    OvsDevice { name: String },
    #[error("{name} is a Linux bridge")]
    Bridge { name: String },
    #[error("{name} is a {kind} device, not a physical-like interface (allowed kinds: none, {})", UPLINK_KINDS.join(", "))]
    Kind { name: String, kind: String },
    #[error("{name} is not an Ethernet interface (hardware type {hw_type})")]
    NotEthernet { name: String, hw_type: String },
    #[error("{ip} is a host-scope address on {name}: it never leaves the host")]
    HostScopeAddress { name: String, ip: IpAddr },
}

impl Ineligible {
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        crate::error_kind::ErrorKind::InterfaceAttach
    }
}

/// Whether `link` may be attached as an uplink; `links` names its master.
pub fn check_uplink(link: &Link, links: &[Link]) -> Result<(), Ineligible> {
    let name = link.name.clone();
    let nature = &link.nature;
    if nature.loopback || nature.hw_type.as_deref() == Some("LOOPBACK") {
        return Err(Ineligible::Loopback { name });
    }
    if link.name.ends_with('~') {
        return Err(Ineligible::AgentUplink { name });
    }
    match nature.kind.as_deref() {
        Some("openvswitch") => return Err(Ineligible::OvsDevice { name }),
        Some("bridge") => return Err(Ineligible::Bridge { name }),
        Some(kind) if !UPLINK_KINDS.contains(&kind) => {
            return Err(Ineligible::Kind {
                name,
                kind: kind.to_string(),
            })
        }
        _ => {}
    }
    if let Some(master) = nature.master {
        let master = links
            .iter()
            .find(|l| l.index == master)
            .map_or_else(|| format!("link {master}"), |l| l.name.clone());
        return Err(Ineligible::Port { name, master });
    }
    if let Some(hw_type) = &nature.hw_type {
        return Err(Ineligible::NotEthernet {
            name,
            hw_type: hw_type.clone(),
        });
    }
    Ok(())
}

/// Whether the ExternalNode's IPs found on `link` are usable: none may be a host-scope address.
pub fn check_addresses(link: &Link, addrs: &[Address], ips: &[IpAddr]) -> Result<(), Ineligible> {
    for ip in ips {
        let want = ip.to_canonical();
        let host_scope = addrs
            .iter()
            .filter(|a| a.ip().to_canonical() == want)
            .any(|a| a.scope == SCOPE_HOST || a.scope == SCOPE_NOWHERE);
        if host_scope {
            return Err(Ineligible::HostScopeAddress {
                name: link.name.clone(),
                ip: *ip,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::kernel::LIFETIME_FOREVER;
    use crate::host::LinkNature;

    fn link(index: u32, name: &str, nature: LinkNature) -> Link {
        Link {
            index,
            name: name.into(),
            mac: Some("02:00:00:00:00:01".into()),
            mtu: 1500,
            up: true,
            promisc: false,
            nature,
        }
    }

    fn kind(k: &str) -> LinkNature {
        LinkNature {
            kind: Some(k.into()),
            ..LinkNature::default()
        }
    }

    fn reason(l: &Link, all: &[Link]) -> String {
        check_uplink(l, all).expect_err("refused").to_string()
    }

    #[test]
    fn physical_like_links_are_accepted() {
        for nature in [
            LinkNature::default(),
            kind("veth"),
            kind("bond"),
            kind("vlan"),
            kind("macvlan"),
        ] {
            let l = link(2, "eth0", nature);
            assert_eq!(check_uplink(&l, std::slice::from_ref(&l)), Ok(()), "{l:?}");
        }
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        let lo = link(
            1,
            "lo",
            LinkNature {
                loopback: true,
                hw_type: Some("LOOPBACK".into()),
                ..LinkNature::default()
            },
        );
        let ovs = link(3, "ovs-system", kind("openvswitch"));
        let bond = link(4, "bond0", kind("bond"));
        let all = vec![lo.clone(), ovs.clone(), bond.clone()];
        assert_eq!(reason(&lo, &all), "lo is the loopback interface");
        assert_eq!(
            reason(&ovs, &all),
            "ovs-system is an Open vSwitch device (an OVS internal port or datapath)"
        );
        assert_eq!(
            reason(&link(5, "br0", kind("bridge")), &all),
            "br0 is a Linux bridge"
        );
        assert_eq!(
            reason(&link(6, "eth0~", LinkNature::default()), &all),
            "eth0~ is an uplink the agent already renamed and moved into OVS"
        );
        let slave = link(
            7,
            "eth1",
            LinkNature {
                master: Some(4),
                ..LinkNature::default()
            },
        );
        assert_eq!(
            reason(&slave, &all),
            "eth1 is a port of bond0 (a bond slave, bridge port or OVS port)"
        );
        assert!(reason(&link(8, "vx0", kind("vxlan")), &all)
            .starts_with("vx0 is a vxlan device, not a physical-like interface"));
        assert!(reason(&link(9, "tap0", kind("tun")), &all).starts_with("tap0 is a tun device"));
        let gre = link(
            10,
            "gre0",
            LinkNature {
                hw_type: Some("IPGRE".into()),
                ..LinkNature::default()
            },
        );
        assert_eq!(
            reason(&gre, &all),
            "gre0 is not an Ethernet interface (hardware type IPGRE)"
        );
    }

    #[test]
    fn host_scope_addresses_are_refused() {
        let eth0 = link(2, "eth0", LinkNature::default());
        let addr = |s: &str, scope: u8| Address {
            addr: s.parse().expect("test address"),
            flags: 0,
            scope,
            valid_lft: LIFETIME_FOREVER,
            preferred_lft: LIFETIME_FOREVER,
            label: None,
            broadcast: None,
            rt_priority: None,
        };
        let addrs = [addr("10.0.0.2/24", 0), addr("10.0.0.3/32", 254)];
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(check_addresses(&eth0, &addrs, &[ip("10.0.0.2")]), Ok(()));
        assert_eq!(
            check_addresses(&eth0, &addrs, &[ip("10.0.0.2"), ip("10.0.0.3")])
                .expect_err("host scope")
                .to_string(),
            "10.0.0.3 is a host-scope address on eth0: it never leaves the host"
        );
    }
}
