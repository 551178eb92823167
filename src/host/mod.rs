//! Host network interfaces: the model of links, addresses and routes the agent moves between a NIC
//! and its OVS internal port, and the [`HostNet`] trait that reads and changes them and checks
//! the host's network managers before an attach (real: rtnetlink and the managers' files under
//! `/`; in-process fake for actor tests). Beside it, the files the agent publishes on the host
//! ([`files::StateFiles`]).

use std::net::{IpAddr, Ipv4Addr};

use async_trait::async_trait;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub mod eligibility;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod files;
pub mod find;
pub mod kernel;
pub mod managers;
pub mod netlink;
#[cfg(test)]
#[cfg(feature = "lab")]
pub(crate) mod testns;

/// A network link as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `aa:bb:cc:dd:ee:ff`, lower case; `None` for links without one.
    pub mac: Option<String>,
    pub mtu: u32,
    pub up: bool,
    /// IFF_PROMISC as set by a user of the link (OVS sets it on ports it attaches).
    #[serde(default)]
    pub promisc: bool,
    /// What the kernel says the link is; decides whether it may become an uplink
    /// ([`eligibility`]). The default is a plain Ethernet NIC.
    #[serde(default)]
    pub nature: LinkNature,
}

/// The kernel's description of a link's nature: its driver kind, hardware type and master.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkNature {
    /// IFLA_INFO_KIND (`veth`, `bridge`, `openvswitch`, `vxlan`…); `None` for hardware NICs.
    #[serde(default)]
    pub kind: Option<String>,
    /// The ARPHRD hardware type when it is not Ethernet (`LOOPBACK`, `NONE`, `IPGRE`…).
    #[serde(default)]
    pub hw_type: Option<String>,
    /// IFF_LOOPBACK.
    #[serde(default)]
    pub loopback: bool,
    /// IFLA_MASTER: the index of the bond, bridge or OVS datapath this link is a port of.
    #[serde(default)]
    pub master: Option<u32>,
    /// IFLA_CARRIER: whether the link has carrier. A TUN/TAP device has carrier only while a
    /// process holds it open, so a persistent tap without carrier is one nobody uses.
    #[serde(default)]
    pub carrier: Option<bool>,
    /// What a TUN/TAP device (kind `tun`) says of itself; `None` for every other kind.
    #[serde(default)]
    pub tun: Option<TunNature>,
}

/// A TUN/TAP device's own description (IFLA_INFO_DATA of kind `tun`). The userspace datapath's
/// internal ports are persistent taps: they outlive ovs-vswitchd.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunNature {
    /// IFLA_TUN_TYPE is IFF_TAP (Ethernet frames), not IFF_TUN.
    pub tap: bool,
    /// IFLA_TUN_PERSIST: the device stays when its last holder closes it.
    pub persist: bool,
}

/// An interface address with the attributes needed to put it back exactly.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Address {
    /// Address with its prefix length.
    pub addr: IpNet,
    /// IFA_F_* flags (e.g. noprefixroute, nodad, permanent).
    pub flags: u32,
    /// RT_SCOPE_* (0 universe, 253 link, 254 host).
    pub scope: u8,
    /// Seconds; `u32::MAX` means forever.
    pub valid_lft: u32,
    pub preferred_lft: u32,
    /// IPv4 label (IFA_LABEL), usually the link name.
    pub label: Option<String>,
    /// IPv4 broadcast address (IFA_BROADCAST), when the address has one.
    #[serde(default)]
    pub broadcast: Option<Ipv4Addr>,
    /// Metric of the kernel prefix route (IFA_RT_PRIORITY, `ip addr add … metric N`; set by
    /// systemd-networkd for DHCP addresses). `None` = kernel default.
    #[serde(default)]
    pub rt_priority: Option<u32>,
}

impl Address {
    pub fn ip(&self) -> IpAddr {
        self.addr.addr()
    }
    /// IPv4 169.254.0.0/16 or IPv6 fe80::/10.
    pub fn is_link_local(&self) -> bool {
        match self.addr.addr() {
            IpAddr::V4(a) => a.is_link_local(),
            IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
        }
    }
}

/// A route through a link, with every attribute needed to re-create it on another link.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Route {
    /// Destination prefix (`0.0.0.0/0` / `::/0` for default).
    pub dst: IpNet,
    pub gateway: Option<IpAddr>,
    pub prefsrc: Option<IpAddr>,
    /// RTPROT_* (2 kernel, 3 boot, 4 static, 16 dhcp, 186 bgp…).
    pub protocol: u8,
    /// RT_SCOPE_*.
    pub scope: u8,
    /// RTN_* (1 unicast, 2 local, 3 broadcast…).
    pub kind: u8,
    /// Routing table id (254 main).
    pub table: u32,
    /// RTA_PRIORITY (the "metric").
    pub metric: Option<u32>,
    /// Output link index; rewritten when the route moves.
    pub oif: u32,
    /// RTNH_F_ONLINK: the gateway is on-link even without a covering prefix (`onlink`).
    #[serde(default)]
    pub onlink: bool,
}

impl Route {
    pub fn is_default(&self) -> bool {
        self.dst.prefix_len() == 0
    }
}

/// Opens the host's own network (rtnetlink, [`netlink::NetlinkHost`]) behind [`HostNet`]. The
/// agent and `detach-all` open it here, so no netlink client lives outside this module. Needs a
/// current tokio runtime, kept alive while the host is used.
pub fn open_system() -> Result<std::sync::Arc<dyn HostNet>, HostError> {
    Ok(std::sync::Arc::new(netlink::NetlinkHost::new()?))
}

/// Errors from the host network layer, naming the link or object involved.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("netlink error on {what}: {message}")]
    Netlink { what: String, message: String },
    #[error("link {0} not found")]
    NoLink(String),
    #[error("link {0} already exists")]
    LinkExists(String),
    #[error("object already exists: {0}")]
    Exists(String),
    #[error("interface name {name:?} is invalid: {why}")]
    BadName { name: String, why: kernel::IfnameError },
    #[error("host network I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl HostError {
    /// The host network is what attaching an interface changes.
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        crate::error_kind::ErrorKind::InterfaceAttach
    }
}

/// Reads and changes host links, addresses and routes.
#[async_trait]
pub trait HostNet: Send + Sync {
    async fn links(&self) -> Result<Vec<Link>, HostError>;
    async fn link_by_name(&self, name: &str) -> Result<Option<Link>, HostError>;
    /// Addresses of one link (all families, including link-local).
    async fn addresses(&self, index: u32) -> Result<Vec<Address>, HostError>;
    /// Routes whose output interface is `index`, from every table except `local`
    /// (kernel-generated local/broadcast routes are left to the kernel).
    async fn routes(&self, index: u32) -> Result<Vec<Route>, HostError>;
    /// Renames a link: down, rename, up; also removes an altname equal to the old name if the
    /// kernel added one.
    async fn rename(&self, index: u32, new_name: &str) -> Result<(), HostError>;
    async fn set_mtu(&self, index: u32, mtu: u32) -> Result<(), HostError>;
    async fn set_up(&self, index: u32, up: bool) -> Result<(), HostError>;
    /// Sets or clears IFF_PROMISC.
    async fn set_promisc(&self, index: u32, on: bool) -> Result<(), HostError>;
    /// Adds an address; `Err(HostError::Exists)` if it is already there.
    async fn add_address(&self, index: u32, addr: &Address) -> Result<(), HostError>;
    async fn del_address(&self, index: u32, addr: &Address) -> Result<(), HostError>;
    /// Adds a route on link `index` (the route's own `oif` is ignored); `Err(HostError::Exists)`
    /// if it is already there.
    async fn add_route(&self, index: u32, route: &Route) -> Result<(), HostError>;
    async fn del_route(&self, route: &Route) -> Result<(), HostError>;
    /// Deletes a link (RTM_DELLINK); its addresses and routes go with it, and so do routes on
    /// other links whose preferred source was one of its addresses. `Err(HostError::NoLink)`
    /// if there is no such link. Only for devices proven to be leftovers (see
    /// `uplink::stale`): never the uplink or a user's device.
    async fn delete_link(&self, index: u32) -> Result<(), HostError>;
    /// The warnings to log just before attaching `uplink` (the NIC's own name, e.g. `eth0`): a
    /// running network manager that would fight the agent over the renamed NIC, naming the
    /// drop-in that prevents it, and every hazard found ([`managers::check_before_attach`] on
    /// the host's root). A check that cannot read something finds nothing there, so this never
    /// fails.
    async fn manager_warnings(&self, uplink: &str) -> Vec<String>;
}
