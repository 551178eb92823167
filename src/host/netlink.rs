//! The real [`HostNet`]: links, addresses and routes read and changed over rtnetlink
//! (`NETLINK_ROUTE`), with every attribute needed to move a NIC's configuration to an OVS
//! internal port and to put it back exactly; and the network-manager check before an attach,
//! over the real root `/` (`host::managers`).
//!
//! One netlink socket per [`NetlinkHost`]; its connection task is spawned on the tokio runtime
//! current at [`NetlinkHost::new`] (inside an actix `System` that is the System's
//! current-thread runtime; the task runs whenever the runtime is driven). That runtime must
//! stay alive, and have its time driver enabled (actix's has), while the host is used. The
//! socket belongs to the network namespace of the thread that created it.
//!
//! Kernel behaviour a caller moving a configuration must know (all verified in the tests
//! below, and modelled by `FakeHost`):
//! - `rename` takes the link down and up: that flushes every route of the link and (with the
//!   default `keep_addr_on_down=0`) its IPv6 addresses. Read the configuration before renaming.
//! - A route with the same (table, dst, metric) as an existing one is EEXIST even on another
//!   link; delete it from the source before adding it to the destination, or the "exists" on
//!   the destination hides a route that is then lost.
//! - Deleting an IPv4 primary deletes its secondaries; deleting an address deletes the routes
//!   using it as prefsrc; deleting a link's last IPv4 address flushes its IPv4 routes.
//! - Routes need their link up (ENETDOWN) and a reachable gateway (ENETUNREACH): add the
//!   addresses first, then routes without a gateway, then routes through gateways.
//! - An IPv6 address added without `nodad` is tentative while duplicate address detection
//!   runs (about a second): unusable, and a route naming it as prefsrc is refused. So
//!   `add_address` adds IPv6 addresses with `nodad`, then, when the saved flags lack it, clears
//!   it with an RTM_NEWADDR NLM_F_REPLACE (the kernel's `inet6_addr_modify` sets the modifiable
//!   flags and does not start detection): usable at once, and the flags come back exactly.
//! - Not carried by the model (skipped with a warning, or dropped): multipath and
//!   nexthop-object routes, source-specific/TOS routes, RTA_METRICS (mtu, hoplimit…),
//!   RTA_PREF, route expiry (RA routes), IFA_PROTO, and the peer of a point-to-point address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use ipnet::IpNet;
use rtnetlink::packet_core::{
    NetlinkMessage, NetlinkPayload, Nla, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL,
    NLM_F_REPLACE, NLM_F_REQUEST,
};
use rtnetlink::packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope, CacheInfo,
};
use rtnetlink::packet_route::link::{
    InfoData, InfoTun, LinkAttribute, LinkFlags, LinkInfo, LinkLayerType, LinkMessage, Prop,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use super::kernel::{
    validate_ifname, IFA_F_NODAD, IFA_SETTABLE_FLAGS, LIFETIME_FOREVER, MAX_IFNAME_LEN, RTN_BROADCAST,
    RTN_LOCAL, RTN_UNICAST, RT_TABLE_LOCAL,
};
use super::{Address, HostError, HostNet, Link, LinkNature, Route, TunNature};

/// How long `rename` keeps retrying on EBUSY-like errors, and how long it waits between tries.
const RENAME_RETRY_FOR: Duration = Duration::from_secs(1);
const RENAME_RETRY_EVERY: Duration = Duration::from_millis(100);
/// A dump interrupted by a concurrent change (NLM_F_DUMP_INTR) is retried this many times.
const DUMP_ATTEMPTS: usize = 5;

/// A netlink request that failed: the kernel's errno (positive), or a transport problem.
#[derive(Debug)]
enum NlError {
    Errno(i32),
    Transport(String),
}

impl NlError {
    fn errno(&self) -> Option<i32> {
        match self {
            NlError::Errno(e) => Some(*e),
            NlError::Transport(_) => None,
        }
    }

    fn message(&self) -> String {
        match self {
            NlError::Errno(e) => std::io::Error::from_raw_os_error(*e).to_string(),
            NlError::Transport(m) => m.clone(),
        }
    }

    /// The generic mapping: ENODEV names the link, everything else is a netlink error on `what`.
    fn into_host(self, what: impl Into<String>, link: u32) -> HostError {
        if self.errno() == Some(libc::ENODEV) {
            return HostError::NoLink(format!("#{link}"));
        }
        HostError::Netlink {
            what: what.into(),
            message: self.message(),
        }
    }
}

/// [`HostNet`] over rtnetlink. Cheap to share behind an `Arc`; requests may run concurrently.
#[derive(Debug, Clone)]
pub struct NetlinkHost {
    handle: rtnetlink::Handle,
}

impl NetlinkHost {
    /// Opens a `NETLINK_ROUTE` socket in the calling thread's network namespace and spawns its
    /// connection task on the current tokio runtime (fails if there is none).
    pub fn new() -> Result<Self, HostError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            HostError::Io(std::io::Error::other(format!(
                "NetlinkHost::new needs a tokio runtime: {e}"
            )))
        })?;
        let (mut connection, handle, _messages) = rtnetlink::new_connection()?;
        // Let ACKs and DONEs through, so that a request is only "done" when the kernel says so
        // (a stream that just ends means the connection died).
        connection.set_forward_ack(true);
        connection.set_forward_done(true);
        runtime.spawn(connection);
        Ok(Self { handle })
    }

    /// Sends a request and waits for its acknowledgement.
    async fn ack(&self, msg: RouteNetlinkMessage, flags: u16) -> Result<(), NlError> {
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        let mut handle = self.handle.clone();
        let mut responses = handle
            .request(req)
            .map_err(|e| NlError::Transport(e.to_string()))?;
        while let Some(resp) = responses.next().await {
            if let NetlinkPayload::Error(err) = resp.payload {
                return match err.code {
                    Some(code) => Err(NlError::Errno(code.get().abs())),
                    None => Ok(()), // the ACK
                };
            }
        }
        // The stream ended without an ACK: the connection task is gone (runtime shut down?).
        Err(NlError::Transport(
            "netlink connection closed before the kernel acknowledged the request".into(),
        ))
    }

    /// Runs a dump request, retrying when the kernel flags it as interrupted.
    async fn dump(&self, msg: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>, NlError> {
        for _ in 0..DUMP_ATTEMPTS {
            let mut req = NetlinkMessage::from(msg.clone());
            req.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
            let mut handle = self.handle.clone();
            let mut responses = handle
                .request(req)
                .map_err(|e| NlError::Transport(e.to_string()))?;
            let mut out = Vec::new();
            let mut interrupted = false;
            let mut done = false;
            while let Some(resp) = responses.next().await {
                if resp.header.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match resp.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Error(err) => {
                        if let Some(code) = err.code {
                            return Err(NlError::Errno(code.get().abs()));
                        }
                    }
                    NetlinkPayload::Done(d) => {
                        if d.code != 0 {
                            return Err(NlError::Errno(d.code.abs()));
                        }
                        done = true;
                        break;
                    }
                    _ => {}
                }
            }
            if !done {
                return Err(NlError::Transport(
                    "netlink connection closed before the dump was complete".into(),
                ));
            }
            if !interrupted {
                return Ok(out);
            }
        }
        Err(NlError::Transport(format!(
            "dump interrupted by concurrent changes {DUMP_ATTEMPTS} times"
        )))
    }

    async fn link_messages(&self) -> Result<Vec<LinkMessage>, HostError> {
        let msgs = self
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            .await
            .map_err(|e| e.into_host("links", 0))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .collect())
    }

    /// The link with this index, if it exists.
    pub async fn link_by_index(&self, index: u32) -> Result<Option<Link>, HostError> {
        Ok(self
            .link_messages()
            .await?
            .iter()
            .filter(|m| m.header.index == index)
            .find_map(parse_link))
    }

    /// The alternative names (`ip link property … altname`) of a link.
    pub async fn altnames(&self, index: u32) -> Result<Vec<String>, HostError> {
        let msgs = self.link_messages().await?;
        let Some(msg) = msgs.iter().find(|m| m.header.index == index) else {
            return Err(HostError::NoLink(format!("#{index}")));
        };
        Ok(altnames_of(msg))
    }

    /// Removes the altname `name` from link `index` if it has it; returns whether it did.
    pub async fn remove_altname(&self, index: u32, name: &str) -> Result<bool, HostError> {
        if !self.altnames(index).await?.iter().any(|a| a == name) {
            return Ok(false);
        }
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.attributes
            .push(LinkAttribute::PropList(vec![Prop::AltIfName(name.to_string())]));
        self.ack(RouteNetlinkMessage::DelLinkProp(msg), 0)
            .await
            .map_err(|e| {
                e.into_host(
                    format!("failed to remove AltName {name} on interface #{index}"),
                    index,
                )
            })?;
        Ok(true)
    }

    async fn set_link(&self, index: u32, edit: impl FnOnce(&mut LinkMessage)) -> Result<(), NlError> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        edit(&mut msg);
        self.ack(RouteNetlinkMessage::SetLink(msg), 0).await
    }

    async fn set_flag_up(&self, index: u32, up: bool) -> Result<(), NlError> {
        self.set_link(index, |m| {
            m.header.change_mask = LinkFlags::Up;
            m.header.flags = if up { LinkFlags::Up } else { LinkFlags::empty() };
        })
        .await
    }

    /// One try of down → rename → up. If the rename fails the link is brought back up when it
    /// was up before, so a failed rename does not leave the host without its NIC.
    async fn rename_once(&self, index: u32, new_name: &str, was_up: bool) -> Result<(), NlError> {
        self.set_flag_up(index, false).await?;
        let renamed = self
            .set_link(index, |m| {
                m.attributes.push(LinkAttribute::IfName(new_name.to_string()))
            })
            .await;
        if let Err(e) = renamed {
            if was_up {
                if let Err(up_err) = self.set_flag_up(index, true).await {
                    tracing::warn!(index, error = %up_err.message(),
                        "could not bring the link back up after a failed rename");
                }
            }
            return Err(e);
        }
        self.set_flag_up(index, true).await
    }

    /// Gives the address just added with `nodad` its saved flags (without `nodad`). The
    /// kernel changes them in place: no detection starts, the address stays usable, and the
    /// routes using it stay. A failure leaves a working address with one flag too many, which
    /// is not worth failing a move or a restore for: it is logged.
    async fn replace_flags(&self, index: u32, addr: &Address) {
        let msg = address_message(index, addr, None, AddrMsg::Replace);
        if let Err(e) = self
            .ack(RouteNetlinkMessage::NewAddress(msg), NLM_F_REPLACE)
            .await
        {
            tracing::warn!(address = %addr.addr, link = index, error = %e.message(),
                "the address keeps the nodad flag it was added with");
        }
    }

    /// The address `addr` exists already on link `index`. If it has the `nodad` it was added
    /// with but `addr` lacks (an add replayed from the journal after a crash between the add
    /// and [`replace_flags`](Self::replace_flags)), clears that flag and only that: the other
    /// flags, the lifetimes and the metric are the ones the address has now. Anything else
    /// found there (no `nodad`, another prefix length) is left alone.
    async fn finish_interrupted_add(&self, index: u32, addr: &Address) {
        let current = match self.addresses(index).await {
            Ok(current) => current,
            Err(e) => {
                tracing::warn!(address = %addr.addr, link = index, error = %e,
                    "cannot read the addresses to check the nodad flag");
                return;
            }
        };
        let Some(existing) = current
            .into_iter()
            .find(|a| a.addr == addr.addr && a.flags & IFA_F_NODAD != 0)
        else {
            return;
        };
        let wanted = Address {
            flags: existing.flags & !IFA_F_NODAD,
            ..existing
        };
        self.replace_flags(index, &wanted).await;
    }
}

/// Whether `addr`, added with `nodad` so that it is usable at once, must lose that flag
/// afterwards to be as saved.
fn drops_nodad(addr: &Address) -> bool {
    addr.ip().is_ipv6() && addr.flags & IFA_F_NODAD == 0
}

/// Formats a hardware address as lower-case colon-separated hex.
fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn altnames_of(msg: &LinkMessage) -> Vec<String> {
    msg.attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::PropList(props) => Some(props),
            _ => None,
        })
        .flatten()
        .filter_map(|p| match p {
            Prop::AltIfName(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

/// IFLA_TUN_TYPE and IFLA_TUN_PERSIST (linux/if_link.h); the crate leaves tun data undecoded.
const IFLA_TUN_TYPE: u16 = 3;
const IFLA_TUN_PERSIST: u16 = 6;
/// IFF_TAP (linux/if_tun.h).
const IFF_TAP: u8 = 0x0002;

fn parse_tun(attrs: &[InfoTun]) -> TunNature {
    let mut tun = TunNature::default();
    for attr in attrs {
        let InfoTun::Other(nla) = attr else { continue };
        let mut value = vec![0u8; nla.value_len()];
        nla.emit_value(&mut value);
        let first = value.first().copied().unwrap_or(0);
        match nla.kind() {
            IFLA_TUN_TYPE => tun.tap = first == IFF_TAP,
            IFLA_TUN_PERSIST => tun.persist = first != 0,
            _ => {}
        }
    }
    tun
}

fn parse_link(msg: &LinkMessage) -> Option<Link> {
    let mut name = None;
    let mut mac = None;
    let mut mtu = 0;
    let mut nature = LinkNature {
        loopback: msg.header.flags.contains(LinkFlags::Loopback),
        hw_type: (msg.header.link_layer_type != LinkLayerType::Ether)
            .then(|| msg.header.link_layer_type.to_string()),
        ..LinkNature::default()
    };
    for attr in &msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::Address(a) if !a.is_empty() => mac = Some(format_mac(a)),
            LinkAttribute::Mtu(m) => mtu = *m,
            LinkAttribute::Controller(index) => nature.master = Some(*index),
            LinkAttribute::Carrier(c) => nature.carrier = Some(*c != 0),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    match info {
                        LinkInfo::Kind(kind) => nature.kind = Some(kind.to_string()),
                        LinkInfo::Data(InfoData::Tun(attrs)) => nature.tun = Some(parse_tun(attrs)),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(Link {
        index: msg.header.index,
        name: name?,
        mac,
        mtu,
        up: msg.header.flags.contains(LinkFlags::Up),
        promisc: msg.header.flags.contains(LinkFlags::Promisc),
        nature,
    })
}

fn family_of(ip: &IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn parse_address(msg: &AddressMessage) -> Option<Address> {
    let mut local = None;
    let mut address = None;
    let mut label = None;
    let mut flags32 = None;
    let mut cache = None;
    let mut broadcast = None;
    let mut rt_priority = None;
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Label(l) => label = Some(l.clone()),
            AddressAttribute::Flags(f) => flags32 = Some(f.bits()),
            AddressAttribute::CacheInfo(c) => cache = Some(*c),
            AddressAttribute::Broadcast(b) => broadcast = Some(*b),
            AddressAttribute::RoutePriority(p) => rt_priority = Some(*p),
            _ => {}
        }
    }
    // IFA_LOCAL is the local address when there is a peer (IFA_ADDRESS is then the peer).
    let ip = local.or(address)?;
    let addr = IpNet::new(ip, msg.header.prefix_len).ok()?;
    let (valid_lft, preferred_lft) = cache
        .map(|c| (c.ifa_valid, c.ifa_preferred))
        .unwrap_or((LIFETIME_FOREVER, LIFETIME_FOREVER));
    Some(Address {
        addr,
        flags: flags32.unwrap_or(u32::from(msg.header.flags.bits())),
        scope: u8::from(msg.header.scope),
        valid_lft,
        preferred_lft,
        label,
        broadcast,
        rt_priority,
    })
}

/// Rewrites an IPv4 label for link `link_name` the way the kernel does on a rename: the part
/// from the first ':' (an alias suffix, e.g. `eth0~:1` → `eth0:1`) is kept, anything else
/// becomes the link name. Interface names cannot contain ':', so the split is unambiguous.
pub fn rewrite_label(label: &str, link_name: &str) -> String {
    match label.find(':') {
        Some(colon) if link_name.len() + label.len() - colon <= MAX_IFNAME_LEN => {
            format!("{link_name}{}", &label[colon..])
        }
        _ => link_name.to_string(),
    }
}

/// What an address message is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AddrMsg {
    /// RTM_DELADDR: the address alone.
    Delete,
    /// RTM_NEWADDR creating the address: IPv6 ones also get `nodad`, so that they are usable
    /// at once.
    Add,
    /// RTM_NEWADDR with NLM_F_REPLACE on an existing address: the flags exactly as saved.
    Replace,
}

/// The RTM_NEWADDR / RTM_DELADDR message for `addr` on link `index`. For an add or replace,
/// only the flags a user may set are sent (the kernel recomputes permanent/secondary/
/// tentative…), with the lifetimes: a replace without them would make the address permanent.
fn address_message(index: u32, addr: &Address, link_name: Option<&str>, kind: AddrMsg) -> AddressMessage {
    let ip = addr.ip();
    let mut msg = AddressMessage::default();
    msg.header.family = family_of(&ip);
    msg.header.prefix_len = addr.addr.prefix_len();
    msg.header.index = index;
    msg.attributes.push(AddressAttribute::Local(ip));
    msg.attributes.push(AddressAttribute::Address(ip));
    if kind == AddrMsg::Delete {
        return msg;
    }
    msg.header.scope = AddressScope::from(addr.scope);
    let mut flags = addr.flags & IFA_SETTABLE_FLAGS;
    if ip.is_ipv6() && kind == AddrMsg::Add {
        flags |= IFA_F_NODAD;
    }
    // The header carries the low 8 bits; IFA_FLAGS the full 32.
    msg.header.flags = AddressHeaderFlags::from_bits_retain((flags & 0xff) as u8);
    msg.attributes
        .push(AddressAttribute::Flags(AddressFlags::from_bits_retain(flags)));
    if ip.is_ipv4() {
        if let Some(brd) = addr.broadcast {
            msg.attributes.push(AddressAttribute::Broadcast(brd));
        }
        if let Some(label) = &addr.label {
            let label = match link_name {
                Some(name) => rewrite_label(label, name),
                None => label.clone(),
            };
            msg.attributes.push(AddressAttribute::Label(label));
        }
    }
    if addr.valid_lft != LIFETIME_FOREVER || addr.preferred_lft != LIFETIME_FOREVER {
        let mut ci = CacheInfo::default();
        ci.ifa_valid = addr.valid_lft;
        ci.ifa_preferred = addr.preferred_lft.min(addr.valid_lft);
        msg.attributes.push(AddressAttribute::CacheInfo(ci));
    }
    if let Some(prio) = addr.rt_priority {
        msg.attributes.push(AddressAttribute::RoutePriority(prio));
    }
    msg
}

fn route_ip(addr: &RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// Why a route of the link is not part of the model.
#[derive(Debug, PartialEq, Eq)]
enum RouteSkip {
    /// Not through this link, or kernel-owned (table local, cloned/cache entries).
    NotOurs,
    /// Through this link, but with something the model cannot carry (logged).
    Unsupported(&'static str),
}

/// Turns a dumped route into the model if it goes out through link `index`.
fn parse_route(msg: &RouteMessage, index: u32) -> Result<Route, RouteSkip> {
    let h = &msg.header;
    let mut table = u32::from(h.table);
    let mut dst = None;
    let mut gateway = None;
    let mut prefsrc = None;
    let mut metric = None;
    let mut oif = None;
    let mut multipath_here = false;
    let mut nexthop_object = false;
    let mut via = false;
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(a) => dst = route_ip(a),
            RouteAttribute::Gateway(a) => gateway = route_ip(a),
            RouteAttribute::PrefSource(a) => prefsrc = route_ip(a),
            RouteAttribute::Priority(p) => metric = Some(*p),
            RouteAttribute::Oif(o) => oif = Some(*o),
            RouteAttribute::MultiPath(hops) => {
                multipath_here = hops.iter().any(|nh| nh.interface_index == index)
            }
            RouteAttribute::NhId(_) => nexthop_object = true,
            RouteAttribute::Via(_) => via = true,
            _ => {}
        }
    }
    if table == RT_TABLE_LOCAL || h.flags.contains(RouteFlags::Cloned) {
        return Err(RouteSkip::NotOurs);
    }
    if multipath_here {
        return Err(RouteSkip::Unsupported("multipath route"));
    }
    if oif != Some(index) {
        return Err(RouteSkip::NotOurs);
    }
    if nexthop_object {
        return Err(RouteSkip::Unsupported("route using a nexthop object"));
    }
    if via {
        return Err(RouteSkip::Unsupported("route via another address family"));
    }
    let kind = u8::from(h.kind);
    if ![RTN_UNICAST, RTN_LOCAL, RTN_BROADCAST].contains(&kind) {
        return Err(RouteSkip::Unsupported(
            "route type other than unicast/local/broadcast",
        ));
    }
    if h.source_prefix_length != 0 || h.tos != 0 {
        return Err(RouteSkip::Unsupported("source-specific or TOS route"));
    }
    let unspecified = match h.address_family {
        AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => return Err(RouteSkip::NotOurs),
    };
    let dst = IpNet::new(dst.unwrap_or(unspecified), h.destination_prefix_length)
        .map_err(|_| RouteSkip::Unsupported("bad destination prefix"))?;
    Ok(Route {
        dst,
        gateway,
        prefsrc,
        protocol: u8::from(h.protocol),
        scope: u8::from(h.scope),
        kind,
        table,
        metric,
        oif: index,
        onlink: h.flags.contains(RouteFlags::Onlink),
    })
}

/// The RTM_NEWROUTE / RTM_DELROUTE message for `route` through link `oif`.
fn route_message(route: &Route, oif: u32) -> RouteMessage {
    let mut msg = RouteMessage::default();
    let ip = route.dst.addr();
    msg.header.address_family = family_of(&ip);
    msg.header.destination_prefix_length = route.dst.prefix_len();
    msg.header.table = u8::try_from(route.table).unwrap_or(0);
    msg.header.protocol = RouteProtocol::from(route.protocol);
    msg.header.scope = RouteScope::from(route.scope);
    msg.header.kind = RouteType::from(route.kind);
    if route.onlink {
        msg.header.flags = RouteFlags::Onlink;
    }
    if route.dst.prefix_len() > 0 {
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(
                route.dst.network(),
            )));
    }
    if let Some(gw) = route.gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    if let Some(src) = route.prefsrc {
        msg.attributes
            .push(RouteAttribute::PrefSource(RouteAddress::from(src)));
    }
    if let Some(metric) = route.metric {
        msg.attributes.push(RouteAttribute::Priority(metric));
    }
    msg.attributes.push(RouteAttribute::Oif(oif));
    msg.attributes.push(RouteAttribute::Table(route.table));
    msg
}

/// `ip route`-like text naming a route in errors and logs.
pub fn describe_route(route: &Route, oif: u32) -> String {
    let mut s = if route.is_default() {
        "default".to_string()
    } else {
        route.dst.to_string()
    };
    if let Some(gw) = route.gateway {
        s.push_str(&format!(" via {gw}"));
    }
    s.push_str(&format!(
        " dev #{oif} table {} proto {} scope {} type {}",
        route.table, route.protocol, route.scope, route.kind
    ));
    if let Some(src) = route.prefsrc {
        s.push_str(&format!(" src {src}"));
    }
    if let Some(m) = route.metric {
        s.push_str(&format!(" metric {m}"));
    }
    if route.onlink {
        s.push_str(" onlink");
    }
    s
}

fn describe_address(addr: &Address, index: u32) -> String {
    format!("address {} on link #{index}", addr.addr)
}

#[async_trait]
impl HostNet for NetlinkHost {
    async fn links(&self) -> Result<Vec<Link>, HostError> {
        Ok(self
            .link_messages()
            .await?
            .iter()
            .filter_map(parse_link)
            .collect())
    }

    async fn link_by_name(&self, name: &str) -> Result<Option<Link>, HostError> {
        // A dump, not RTM_GETLINK by IFLA_IFNAME: the kernel also resolves altnames there, and
        // `eth0~` may carry the altname `eth0`.
        Ok(self
            .link_messages()
            .await?
            .iter()
            .filter_map(parse_link)
            .find(|l| l.name == name))
    }

    async fn addresses(&self, index: u32) -> Result<Vec<Address>, HostError> {
        let mut req = AddressMessage::default();
        req.header.index = index;
        let msgs = self
            .dump(RouteNetlinkMessage::GetAddress(req))
            .await
            .map_err(|e| e.into_host(format!("addresses of link #{index}"), index))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => parse_address(a),
                _ => None,
            })
            .collect())
    }

    async fn routes(&self, index: u32) -> Result<Vec<Route>, HostError> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut req = RouteMessage::default();
            req.header.address_family = family;
            let msgs = self
                .dump(RouteNetlinkMessage::GetRoute(req))
                .await
                .map_err(|e| e.into_host(format!("routes of link #{index}"), index))?;
            for m in &msgs {
                let RouteNetlinkMessage::NewRoute(r) = m else {
                    continue;
                };
                match parse_route(r, index) {
                    Ok(route) => out.push(route),
                    Err(RouteSkip::NotOurs) => {}
                    Err(RouteSkip::Unsupported(why)) => {
                        tracing::warn!(link = index, reason = why, route = ?r.header,
                            "skipping a route of the link that cannot be moved");
                    }
                }
            }
        }
        Ok(out)
    }

    async fn rename(&self, index: u32, new_name: &str) -> Result<(), HostError> {
        validate_ifname(new_name).map_err(|why| HostError::BadName {
            name: new_name.to_string(),
            why,
        })?;
        let msgs = self.link_messages().await?;
        let links: Vec<Link> = msgs.iter().filter_map(parse_link).collect();
        let Some(link) = links.iter().find(|l| l.index == index) else {
            return Err(HostError::NoLink(format!("#{index}")));
        };
        let old_name = link.name.clone();
        if old_name != new_name {
            if links.iter().any(|l| l.name == new_name) {
                return Err(HostError::LinkExists(new_name.to_string()));
            }
            // The kernel refuses a name that is one of the link's own altnames (EEXIST). When
            // renaming `eth0~` back to `eth0`, an altname `eth0` added behind our back (udev)
            // is exactly that; drop it so the link can take the name.
            let own_alt = msgs
                .iter()
                .find(|m| m.header.index == index)
                .is_some_and(|m| altnames_of(m).iter().any(|a| a == new_name));
            if own_alt && self.remove_altname(index, new_name).await? {
                tracing::info!(index, altname = %new_name, "removed the altname the link is renamed to");
            }
            let deadline = Instant::now() + RENAME_RETRY_FOR;
            loop {
                match self.rename_once(index, new_name, link.up).await {
                    Ok(()) => break,
                    Err(e) => {
                        let retryable = matches!(e.errno(), Some(libc::EBUSY) | Some(libc::EAGAIN));
                        if retryable && Instant::now() < deadline {
                            tokio::time::sleep(RENAME_RETRY_EVERY).await;
                            continue;
                        }
                        return Err(match e.errno() {
                            Some(libc::EEXIST) => HostError::LinkExists(new_name.to_string()),
                            Some(libc::ENODEV) => HostError::NoLink(old_name),
                            _ => HostError::Netlink {
                                what: format!(
                                    "failed to rename host interface name {old_name} to {new_name}"
                                ),
                                message: e.message(),
                            },
                        });
                    }
                }
            }
        }
        // Some systems (udev's alternative-names policy) give the renamed link its old name as
        // an altname; that would make the old name resolve to the renamed link. Absent is fine.
        if self.remove_altname(index, &old_name).await? {
            tracing::info!(index, altname = %old_name, "removed the old name's altname");
        }
        Ok(())
    }

    async fn set_mtu(&self, index: u32, mtu: u32) -> Result<(), HostError> {
        self.set_link(index, |m| m.attributes.push(LinkAttribute::Mtu(mtu)))
            .await
            .map_err(|e| e.into_host(format!("set MTU {mtu} on link #{index}"), index))
    }

    async fn set_up(&self, index: u32, up: bool) -> Result<(), HostError> {
        let state = if up { "up" } else { "down" };
        self.set_flag_up(index, up)
            .await
            .map_err(|e| e.into_host(format!("set link #{index} {state}"), index))
    }

    async fn set_promisc(&self, index: u32, on: bool) -> Result<(), HostError> {
        let state = if on { "on" } else { "off" };
        self.set_link(index, |m| {
            m.header.change_mask = LinkFlags::Promisc;
            m.header.flags = if on {
                LinkFlags::Promisc
            } else {
                LinkFlags::empty()
            };
        })
        .await
        .map_err(|e| e.into_host(format!("set promisc {state} on link #{index}"), index))
    }

    async fn add_address(&self, index: u32, addr: &Address) -> Result<(), HostError> {
        let link_name = if addr.ip().is_ipv4() && addr.label.is_some() {
            match self.link_by_index(index).await? {
                Some(l) => Some(l.name),
                None => return Err(HostError::NoLink(format!("#{index}"))),
            }
        } else {
            None
        };
        let msg = address_message(index, addr, link_name.as_deref(), AddrMsg::Add);
        match self
            .ack(RouteNetlinkMessage::NewAddress(msg), NLM_F_CREATE | NLM_F_EXCL)
            .await
        {
            Ok(()) => {
                if drops_nodad(addr) {
                    self.replace_flags(index, addr).await;
                }
                Ok(())
            }
            Err(e) if e.errno() == Some(libc::EEXIST) => {
                if drops_nodad(addr) {
                    self.finish_interrupted_add(index, addr).await;
                }
                Err(HostError::Exists(describe_address(addr, index)))
            }
            Err(e) => Err(e.into_host(format!("add {}", describe_address(addr, index)), index)),
        }
    }

    async fn del_address(&self, index: u32, addr: &Address) -> Result<(), HostError> {
        let msg = address_message(index, addr, None, AddrMsg::Delete);
        match self.ack(RouteNetlinkMessage::DelAddress(msg), 0).await {
            Ok(()) => Ok(()),
            // Already gone (e.g. a secondary deleted together with its primary).
            Err(e) if e.errno() == Some(libc::EADDRNOTAVAIL) => Ok(()),
            Err(e) => Err(e.into_host(format!("delete {}", describe_address(addr, index)), index)),
        }
    }

    async fn add_route(&self, index: u32, route: &Route) -> Result<(), HostError> {
        let msg = route_message(route, index);
        match self
            .ack(RouteNetlinkMessage::NewRoute(msg), NLM_F_CREATE | NLM_F_EXCL)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.errno() == Some(libc::EEXIST) => Err(HostError::Exists(format!(
                "route {}",
                describe_route(route, index)
            ))),
            Err(e) => Err(e.into_host(format!("add route {}", describe_route(route, index)), index)),
        }
    }

    async fn delete_link(&self, index: u32) -> Result<(), HostError> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.ack(RouteNetlinkMessage::DelLink(msg), 0)
            .await
            .map_err(|e| e.into_host(format!("delete link #{index}"), index))
    }

    async fn del_route(&self, route: &Route) -> Result<(), HostError> {
        let msg = route_message(route, route.oif);
        match self.ack(RouteNetlinkMessage::DelRoute(msg), 0).await {
            Ok(()) => Ok(()),
            // Already gone, or its link is.
            Err(e) if matches!(e.errno(), Some(libc::ESRCH) | Some(libc::ENODEV)) => Ok(()),
            Err(e) => Err(HostError::Netlink {
                what: format!("delete route {}", describe_route(route, route.oif)),
                message: e.message(),
            }),
        }
    }

    async fn manager_warnings(&self, uplink: &str) -> Vec<String> {
        // The check reads files under /etc, /run and /proc: on the blocking pool, not on the
        // caller's thread (the interface manager's, which also answers health and status).
        let uplink = uplink.to_string();
        tokio::task::spawn_blocking(move || super::managers::check_before_attach(Path::new("/"), &uplink))
            .await
            .unwrap_or_else(|e| vec![format!("cannot check the host's network managers: {e}")])
    }
}

#[cfg(test)]
mod tests;
