//! An in-memory [`HostNet`] with kernel-like behaviour, for actor tests: addresses bring their
//! prefix routes, deleting an address takes its routes along, gateways must be on-link,
//! routes need an up link, a down link loses its routes and IPv6 addresses, names are unique.
//! Test hooks: links can be added and removed, the next call of a method can be made to fail,
//! every mutating call is logged, and the largest number of default routes that ever existed
//! at once is tracked (to catch "two default routes at the same time"). Its network-manager
//! check finds nothing unless a test sets the warnings it gives.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::kernel::{
    validate_ifname, IFA_F_DEPRECATED, IFA_F_NODAD, IFA_F_NOPREFIXROUTE, IFA_F_PERMANENT, IFA_F_SECONDARY,
    IFA_SETTABLE_FLAGS, IP6_RT_PRIO_ADDRCONF, IP6_RT_PRIO_USER, LIFETIME_FOREVER, RTN_UNICAST, RTPROT_KERNEL,
    RT_SCOPE_HOST, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN,
};
use super::netlink::{describe_route, rewrite_label};
use super::{Address, HostError, HostNet, Link, LinkNature, Route};

/// An address family, for [`FakeHost::max_default_routes_seen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    fn of(ip: &IpAddr) -> Self {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }
}

/// One link as the fake holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeLinkState {
    pub link: Link,
    pub altnames: Vec<String>,
    /// In insertion order (the kernel orders differently; callers must not rely on order).
    pub addresses: Vec<Address>,
    /// Routes whose `oif` is this link, in insertion order.
    pub routes: Vec<Route>,
}

/// Everything the fake holds, by link index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeSnapshot {
    pub links: Vec<FakeLinkState>,
}

impl FakeSnapshot {
    pub fn link(&self, name: &str) -> Option<&FakeLinkState> {
        self.links.iter().find(|l| l.link.name == name)
    }
}

#[derive(Debug, Default)]
struct State {
    next_index: u32,
    links: BTreeMap<u32, FakeLinkState>,
    fail_next: HashMap<String, String>,
    calls: Vec<String>,
    max_defaults: HashMap<IpFamily, usize>,
    /// What [`HostNet::manager_warnings`] answers, for every uplink.
    manager_warnings: Vec<String>,
}

/// The in-memory host. All methods are synchronous underneath; the async trait methods never
/// wait.
#[derive(Debug)]
pub struct FakeHost {
    state: Mutex<State>,
}

impl Default for FakeHost {
    fn default() -> Self {
        Self::new()
    }
}

/// The kernel's errno texts, so errors read like the real adapter's.
fn nl_err(what: impl Into<String>, errno: i32) -> HostError {
    HostError::Netlink {
        what: what.into(),
        message: std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

fn normalized_metric(route: &Route) -> Option<u32> {
    match (route.dst.addr(), route.metric) {
        (IpAddr::V4(_), Some(0)) => None,
        (IpAddr::V4(_), m) => m,
        (IpAddr::V6(_), None) => Some(IP6_RT_PRIO_USER),
        (IpAddr::V6(_), m) => m,
    }
}

/// The kernel's identity of a route in a table: with NLM_F_EXCL a second route with the same
/// key is EEXIST, whatever its gateway or device.
fn same_key(a: &Route, b: &Route) -> bool {
    a.table == b.table && a.dst == b.dst && normalized_metric(a) == normalized_metric(b)
}

fn ipv6_scope(ip: &IpAddr, given: u8) -> u8 {
    match ip {
        IpAddr::V6(v6) if v6.is_loopback() => RT_SCOPE_HOST,
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => RT_SCOPE_LINK,
        IpAddr::V6(_) => RT_SCOPE_UNIVERSE,
        IpAddr::V4(_) => given,
    }
}

impl State {
    fn link_mut(&mut self, index: u32) -> Result<&mut FakeLinkState, HostError> {
        self.links
            .get_mut(&index)
            .ok_or_else(|| HostError::NoLink(format!("#{index}")))
    }

    fn name_taken(&self, name: &str, except: Option<u32>) -> bool {
        self.links.values().any(|l| {
            Some(l.link.index) != except && (l.link.name == name || l.altnames.iter().any(|a| a == name))
        })
    }

    fn all_routes(&self) -> impl Iterator<Item = &Route> {
        self.links.values().flat_map(|l| l.routes.iter())
    }

    fn record_defaults(&mut self) {
        for family in [IpFamily::V4, IpFamily::V6] {
            let mut per_table: HashMap<u32, usize> = HashMap::new();
            for r in self.all_routes() {
                if r.is_default() && IpFamily::of(&r.dst.addr()) == family {
                    *per_table.entry(r.table).or_default() += 1;
                }
            }
            let now = per_table.values().copied().max().unwrap_or(0);
            let seen = self.max_defaults.entry(family).or_default();
            *seen = (*seen).max(now);
        }
    }

    fn take_failure(&mut self, method: &str) -> Result<(), HostError> {
        match self.fail_next.remove(method) {
            Some(message) => Err(HostError::Netlink {
                what: format!("{method} (injected)"),
                message,
            }),
            None => Ok(()),
        }
    }

    fn is_local_ip(&self, ip: &IpAddr) -> bool {
        self.links
            .values()
            .any(|l| l.addresses.iter().any(|a| a.ip() == *ip))
    }

    /// Is `gw` reachable on link `index` for a route in `table` (the kernel looks in the
    /// route's table, then in main, for a directly connected route through the same link).
    fn gateway_on_link(&self, index: u32, table: u32, gw: &IpAddr) -> bool {
        if let IpAddr::V6(v6) = gw {
            if (v6.segments()[0] & 0xffc0) == 0xfe80 {
                return true;
            }
        }
        self.all_routes().any(|r| {
            r.oif == index
                && r.gateway.is_none()
                && (r.table == table || r.table == RT_TABLE_MAIN)
                && r.kind == RTN_UNICAST
                && r.dst.contains(gw)
        })
    }

    /// The prefix route the kernel adds for an address, if any.
    fn prefix_route(index: u32, addr: &Address) -> Option<Route> {
        if addr.flags & IFA_F_NOPREFIXROUTE != 0 {
            return None;
        }
        let ip = addr.ip();
        let full = if ip.is_ipv4() { 32 } else { 128 };
        if addr.addr.prefix_len() == full {
            return None;
        }
        let (prefsrc, scope, metric) = match ip {
            IpAddr::V4(_) => (Some(ip), RT_SCOPE_LINK, addr.rt_priority.filter(|p| *p != 0)),
            IpAddr::V6(_) => (
                None,
                RT_SCOPE_UNIVERSE,
                Some(addr.rt_priority.unwrap_or(IP6_RT_PRIO_ADDRCONF)),
            ),
        };
        Some(Route {
            dst: addr.addr.trunc(),
            gateway: None,
            prefsrc,
            protocol: RTPROT_KERNEL,
            scope,
            kind: RTN_UNICAST,
            table: RT_TABLE_MAIN,
            metric,
            oif: index,
            onlink: false,
        })
    }

    fn insert_prefix_route(&mut self, index: u32, addr: &Address) {
        let Some(route) = Self::prefix_route(index, addr) else {
            return;
        };
        // The kernel appends its prefix routes: the same prefix on two links gives two routes.
        if let Some(link) = self.links.get_mut(&index) {
            if !link.routes.iter().any(|r| same_key(r, &route)) {
                link.routes.push(route);
            }
        }
    }

    /// What `NetlinkHost::add_address` leaves: the address with exactly its settable flags
    /// (the real one adds IPv6 addresses with `nodad`, then puts the saved flags back). On
    /// "exists", an address that still has a `nodad` the wanted one lacks (an add interrupted
    /// between those two steps) loses that flag, and nothing else changes.
    fn add_address(&mut self, index: u32, addr: &Address) -> Result<(), HostError> {
        let link = self.link_mut(index)?;
        let ip = addr.ip();
        if let Some(existing) = link
            .addresses
            .iter_mut()
            .find(|a| a.ip() == ip && a.addr.prefix_len() == addr.addr.prefix_len())
        {
            if ip.is_ipv6() && addr.flags & IFA_F_NODAD == 0 {
                existing.flags &= !IFA_F_NODAD;
            }
            return Err(HostError::Exists(format!(
                "address {} on link #{index}",
                addr.addr
            )));
        }
        let mut stored = addr.clone();
        stored.flags = addr.flags & IFA_SETTABLE_FLAGS;
        if ip.is_ipv6() {
            stored.label = None;
            stored.broadcast = None;
        } else {
            let name = link.link.name.clone();
            stored.label = Some(match &addr.label {
                Some(l) => rewrite_label(l, &name),
                None => name,
            });
            let net = addr.addr.trunc();
            if link
                .addresses
                .iter()
                .any(|a| a.addr.trunc() == net && a.flags & IFA_F_SECONDARY == 0)
            {
                stored.flags |= IFA_F_SECONDARY;
            }
        }
        if stored.valid_lft == LIFETIME_FOREVER {
            stored.flags |= IFA_F_PERMANENT;
        }
        if stored.preferred_lft == 0 {
            stored.flags |= IFA_F_DEPRECATED;
        }
        stored.scope = ipv6_scope(&ip, addr.scope);
        let up = link.link.up;
        let secondary = stored.flags & IFA_F_SECONDARY != 0;
        link.addresses.push(stored.clone());
        if up && !secondary {
            self.insert_prefix_route(index, &stored);
        }
        Ok(())
    }

    fn del_address(&mut self, index: u32, addr: &Address) -> Result<(), HostError> {
        let link = self.link_mut(index)?;
        let ip = addr.ip();
        let Some(pos) = link
            .addresses
            .iter()
            .position(|a| a.ip() == ip && a.addr.prefix_len() == addr.addr.prefix_len())
        else {
            return Ok(()); // EADDRNOTAVAIL: already gone
        };
        let removed = link.addresses.remove(pos);
        let mut gone = vec![removed.clone()];
        if ip.is_ipv4() && removed.flags & IFA_F_SECONDARY == 0 {
            // Without promote_secondaries the kernel deletes the secondaries with their primary.
            let net = removed.addr.trunc();
            let (secondaries, keep): (Vec<_>, Vec<_>) = link
                .addresses
                .drain(..)
                .partition(|a| a.ip().is_ipv4() && a.addr.trunc() == net);
            link.addresses = keep;
            gone.extend(secondaries);
        }
        for a in &gone {
            if let Some(prefix) = Self::prefix_route(index, a) {
                link.routes
                    .retain(|r| !(same_key(r, &prefix) && r.protocol == RTPROT_KERNEL));
            }
        }
        // When the last IPv4 address goes, the kernel flushes every IPv4 route of the link.
        if gone.iter().any(|a| a.ip().is_ipv4()) && !link.addresses.iter().any(|a| a.ip().is_ipv4()) {
            link.routes.retain(|r| r.dst.addr().is_ipv6());
        }
        // IPv4 routes whose preferred source was a deleted address go with it.
        let gone_v4: Vec<IpAddr> = gone.iter().map(Address::ip).filter(IpAddr::is_ipv4).collect();
        for l in self.links.values_mut() {
            l.routes
                .retain(|r| !r.prefsrc.is_some_and(|src| gone_v4.contains(&src)));
        }
        Ok(())
    }

    fn add_route(&mut self, index: u32, route: &Route) -> Result<(), HostError> {
        let what = format!("add route {}", describe_route(route, index));
        let link = self
            .links
            .get(&index)
            .ok_or_else(|| HostError::NoLink(format!("#{index}")))?;
        if !link.link.up {
            return Err(nl_err(what, libc::ENETDOWN));
        }
        let mut stored = route.clone();
        stored.oif = index;
        stored.metric = normalized_metric(route);
        if self.all_routes().any(|r| same_key(r, &stored)) {
            return Err(HostError::Exists(format!(
                "route {}",
                describe_route(route, index)
            )));
        }
        if let Some(gw) = route.gateway {
            if !route.onlink && !self.gateway_on_link(index, route.table, &gw) {
                return Err(nl_err(what, libc::ENETUNREACH));
            }
        }
        if let Some(src) = route.prefsrc {
            if !self.is_local_ip(&src) {
                return Err(nl_err(what, libc::EINVAL));
            }
        }
        self.link_mut(index)?.routes.push(stored);
        self.record_defaults();
        Ok(())
    }

    /// Deletes one route, matched like the kernel does: dst and table always; metric,
    /// gateway, protocol and prefsrc when given (no metric: the lowest-metric match).
    fn del_route(&mut self, route: &Route) -> Result<(), HostError> {
        let Some(link) = self.links.get_mut(&route.oif) else {
            return Ok(()); // ENODEV: gone with its link
        };
        let victim = link
            .routes
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.table == route.table
                    && r.dst == route.dst
                    && (route.metric.is_none() || r.metric == normalized_metric(route))
                    && (route.gateway.is_none() || r.gateway == route.gateway)
                    && (route.protocol == 0 || r.protocol == route.protocol)
                    && (route.prefsrc.is_none() || r.prefsrc == route.prefsrc)
            })
            .min_by_key(|(_, r)| r.metric.unwrap_or(0))
            .map(|(pos, _)| pos);
        if let Some(pos) = victim {
            link.routes.remove(pos);
        }
        Ok(()) // ESRCH: already gone
    }

    fn set_up(&mut self, index: u32, up: bool) -> Result<(), HostError> {
        let link = self.link_mut(index)?;
        if link.link.up == up {
            return Ok(());
        }
        link.link.up = up;
        if up {
            let addrs: Vec<Address> = link
                .addresses
                .iter()
                .filter(|a| a.flags & IFA_F_SECONDARY == 0)
                .cloned()
                .collect();
            for a in addrs {
                self.insert_prefix_route(index, &a);
            }
        } else {
            // The kernel flushes every route through a down link, and (keep_addr_on_down=0)
            // its IPv6 addresses.
            link.routes.clear();
            link.addresses.retain(|a| a.ip().is_ipv4());
        }
        Ok(())
    }

    /// Like RTM_DELLINK: the link goes with its addresses and routes, and routes elsewhere that
    /// used one of its addresses as preferred source go too.
    fn delete_link(&mut self, index: u32) -> Result<(), HostError> {
        let gone = self
            .links
            .remove(&index)
            .ok_or_else(|| HostError::NoLink(format!("#{index}")))?;
        let ips: Vec<IpAddr> = gone.addresses.iter().map(Address::ip).collect();
        for l in self.links.values_mut() {
            l.routes.retain(|r| !r.prefsrc.is_some_and(|s| ips.contains(&s)));
        }
        Ok(())
    }

    fn rename(&mut self, index: u32, new_name: &str) -> Result<(), HostError> {
        validate_ifname(new_name).map_err(|why| HostError::BadName {
            name: new_name.to_string(),
            why,
        })?;
        let old = self.link_mut(index)?.link.name.clone();
        if old == new_name {
            return Ok(());
        }
        if self.name_taken(new_name, Some(index)) {
            return Err(HostError::LinkExists(new_name.to_string()));
        }
        // Like NetlinkHost::rename: an own altname equal to the new name is dropped first.
        self.link_mut(index)?.altnames.retain(|a| a != new_name);
        // Like NetlinkHost::rename: down, rename, up (the down flushes routes and IPv6).
        self.set_up(index, false)?;
        let link = self.link_mut(index)?;
        link.link.name = new_name.to_string();
        // Like the kernel's inetdev_changename: the first label is the new name, the others
        // keep their ':' suffix or get ":<n>".
        for (n, a) in link.addresses.iter_mut().filter(|a| a.ip().is_ipv4()).enumerate() {
            let suffix = match a
                .label
                .as_deref()
                .and_then(|l| l.find(':').map(|c| l[c..].to_string()))
            {
                _ if n == 0 => String::new(),
                Some(s) => s,
                None => format!(":{}", n + 1),
            };
            a.label = Some(format!("{new_name}{suffix}"));
        }
        link.altnames.retain(|a| *a != old);
        self.set_up(index, true)
    }
}

impl FakeHost {
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                next_index: 2, // 1 is lo on a real host
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in another test thread must not hide this test's own result.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add_link_with_state(&self, name: &str, mac: &str, mtu: u32, up: bool) -> u32 {
        let mut st = self.lock();
        assert!(
            !st.name_taken(name, None),
            "FakeHost::add_link: {name} already exists"
        );
        let index = st.next_index;
        st.next_index += 1;
        st.links.insert(
            index,
            FakeLinkState {
                link: Link {
                    index,
                    name: name.to_string(),
                    mac: Some(mac.to_lowercase()),
                    mtu,
                    up,
                    promisc: false,
                    nature: LinkNature::default(),
                },
                altnames: Vec::new(),
                addresses: Vec::new(),
                routes: Vec::new(),
            },
        );
        index
    }

    /// Test hook: a link that is up (like a configured NIC). Returns its index. Not logged.
    pub fn add_link(&self, name: &str, mac: &str, mtu: u32) -> u32 {
        self.add_link_with_state(name, mac, mtu, true)
    }

    /// Test hook: a link that is down (like a just-created OVS internal port). Not logged.
    pub fn add_link_down(&self, name: &str, mac: &str, mtu: u32) -> u32 {
        self.add_link_with_state(name, mac, mtu, false)
    }

    /// Test hook: sets what the kernel would say a link is (loopback, driver kind, master), to
    /// model links that must never become uplinks. Not logged.
    pub fn set_nature(&self, name: &str, nature: LinkNature) {
        let mut st = self.lock();
        if let Some(l) = st.links.values_mut().find(|l| l.link.name == name) {
            l.link.nature = nature;
        }
    }

    /// Test hook: the warnings [`HostNet::manager_warnings`] gives before every attach (none
    /// unless set: the fake host has no network manager).
    pub fn set_manager_warnings(&self, warnings: Vec<String>) {
        self.lock().manager_warnings = warnings;
    }

    /// Test hook: removes a link with its addresses and routes (like OVS deleting an internal
    /// port). Returns whether it existed. Not logged.
    pub fn remove_link(&self, name: &str) -> bool {
        let mut st = self.lock();
        let Some(index) = st
            .links
            .values()
            .find(|l| l.link.name == name)
            .map(|l| l.link.index)
        else {
            return false;
        };
        st.delete_link(index).is_ok()
    }

    /// Test hook: adds an altname to a link (like udev's alternative-names policy). Not logged.
    pub fn add_altname(&self, name: &str, altname: &str) -> Result<(), HostError> {
        let mut st = self.lock();
        if st.name_taken(altname, None) {
            return Err(HostError::LinkExists(altname.to_string()));
        }
        let link = st
            .links
            .values_mut()
            .find(|l| l.link.name == name)
            .ok_or_else(|| HostError::NoLink(name.to_string()))?;
        link.altnames.push(altname.to_string());
        Ok(())
    }

    /// Test hook: configures an address with kernel semantics, without logging the call.
    pub fn seed_address(&self, name: &str, addr: &Address) -> Result<(), HostError> {
        let mut st = self.lock();
        let index = Self::index_of(&st, name)?;
        st.add_address(index, addr)
    }

    /// Test hook: adds a route with kernel semantics, without logging the call.
    pub fn seed_route(&self, name: &str, route: &Route) -> Result<(), HostError> {
        let mut st = self.lock();
        let index = Self::index_of(&st, name)?;
        st.add_route(index, route)
    }

    fn index_of(st: &State, name: &str) -> Result<u32, HostError> {
        st.links
            .values()
            .find(|l| l.link.name == name)
            .map(|l| l.link.index)
            .ok_or_else(|| HostError::NoLink(name.to_string()))
    }

    /// Test hook: the next call of `method` (a `HostNet` method name, e.g. `"add_route"`)
    /// fails with `HostError::Netlink { message }` and changes nothing.
    pub fn fail_next(&self, method: &str, message: &str) {
        self.lock()
            .fail_next
            .insert(method.to_string(), message.to_string());
    }

    /// Every link with its addresses and routes, by index.
    pub fn snapshot(&self) -> FakeSnapshot {
        FakeSnapshot {
            links: self.lock().links.values().cloned().collect(),
        }
    }

    /// Every mutating call made through `HostNet` (successful or not), oldest first, as
    /// `"<method> <args> -> ok|<error>"`.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The number of mutating `HostNet` calls made so far.
    pub fn mutation_count(&self) -> usize {
        self.lock().calls.len()
    }

    /// Forgets the call log.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The largest number of default routes of `family` that existed at the same time in one
    /// routing table, since the start or the last [`reset_default_route_watermark`].
    ///
    /// [`reset_default_route_watermark`]: Self::reset_default_route_watermark
    pub fn max_default_routes_seen(&self, family: IpFamily) -> usize {
        let mut st = self.lock();
        st.record_defaults();
        st.max_defaults.get(&family).copied().unwrap_or(0)
    }

    /// Restarts the default-route watermark from the current state.
    pub fn reset_default_route_watermark(&self) {
        let mut st = self.lock();
        st.max_defaults.clear();
        st.record_defaults();
    }

    /// Runs one mutating call: injected failure, the change, the log entry.
    fn mutate(
        &self,
        method: &str,
        args: String,
        f: impl FnOnce(&mut State) -> Result<(), HostError>,
    ) -> Result<(), HostError> {
        let mut st = self.lock();
        let result = st.take_failure(method).and_then(|()| f(&mut st));
        st.record_defaults();
        let outcome = match &result {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        st.calls.push(format!("{method} {args} -> {outcome}"));
        result
    }

    fn read<T>(&self, method: &str, f: impl FnOnce(&State) -> Result<T, HostError>) -> Result<T, HostError> {
        let mut st = self.lock();
        st.take_failure(method)?;
        f(&st)
    }
}

#[async_trait]
impl HostNet for FakeHost {
    async fn links(&self) -> Result<Vec<Link>, HostError> {
        self.read("links", |st| {
            Ok(st.links.values().map(|l| l.link.clone()).collect())
        })
    }

    async fn link_by_name(&self, name: &str) -> Result<Option<Link>, HostError> {
        self.read("link_by_name", |st| {
            Ok(st
                .links
                .values()
                .find(|l| l.link.name == name)
                .map(|l| l.link.clone()))
        })
    }

    async fn addresses(&self, index: u32) -> Result<Vec<Address>, HostError> {
        self.read("addresses", |st| {
            Ok(st
                .links
                .get(&index)
                .map(|l| l.addresses.clone())
                .unwrap_or_default())
        })
    }

    async fn routes(&self, index: u32) -> Result<Vec<Route>, HostError> {
        self.read("routes", |st| {
            Ok(st.links.get(&index).map(|l| l.routes.clone()).unwrap_or_default())
        })
    }

    async fn rename(&self, index: u32, new_name: &str) -> Result<(), HostError> {
        self.mutate("rename", format!("#{index} {new_name}"), |st| {
            st.rename(index, new_name)
        })
    }

    async fn set_mtu(&self, index: u32, mtu: u32) -> Result<(), HostError> {
        self.mutate("set_mtu", format!("#{index} {mtu}"), |st| {
            st.link_mut(index)?.link.mtu = mtu;
            Ok(())
        })
    }

    async fn set_up(&self, index: u32, up: bool) -> Result<(), HostError> {
        self.mutate("set_up", format!("#{index} {up}"), |st| st.set_up(index, up))
    }

    async fn set_promisc(&self, index: u32, on: bool) -> Result<(), HostError> {
        self.mutate("set_promisc", format!("#{index} {on}"), |st| {
            st.link_mut(index)?.link.promisc = on;
            Ok(())
        })
    }

    async fn add_address(&self, index: u32, addr: &Address) -> Result<(), HostError> {
        self.mutate("add_address", format!("#{index} {}", addr.addr), |st| {
            st.add_address(index, addr)
        })
    }

    async fn del_address(&self, index: u32, addr: &Address) -> Result<(), HostError> {
        self.mutate("del_address", format!("#{index} {}", addr.addr), |st| {
            st.del_address(index, addr)
        })
    }

    async fn add_route(&self, index: u32, route: &Route) -> Result<(), HostError> {
        self.mutate("add_route", describe_route(route, index), |st| {
            st.add_route(index, route)
        })
    }

    async fn del_route(&self, route: &Route) -> Result<(), HostError> {
        self.mutate("del_route", describe_route(route, route.oif), |st| {
            st.del_route(route)
        })
    }

    async fn delete_link(&self, index: u32) -> Result<(), HostError> {
        self.mutate("delete_link", format!("#{index}"), |st| st.delete_link(index))
    }

    async fn manager_warnings(&self, _uplink: &str) -> Vec<String> {
        self.lock().manager_warnings.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::kernel::RTPROT_BOOT;

    const MAC: &str = "02:00:00:00:01:01";

    fn addr(s: &str) -> Address {
        Address {
            addr: s.parse().expect("test address"),
            flags: 0,
            scope: RT_SCOPE_UNIVERSE,
            valid_lft: LIFETIME_FOREVER,
            preferred_lft: LIFETIME_FOREVER,
            label: None,
            broadcast: None,
            rt_priority: None,
        }
    }

    fn route(dst: &str) -> Route {
        Route {
            dst: dst.parse().expect("test prefix"),
            gateway: None,
            prefsrc: None,
            protocol: RTPROT_BOOT,
            scope: RT_SCOPE_UNIVERSE,
            kind: RTN_UNICAST,
            table: RT_TABLE_MAIN,
            metric: None,
            oif: 0,
            onlink: false,
        }
    }

    fn via(dst: &str, gw: &str) -> Route {
        Route {
            gateway: Some(gw.parse().expect("gw")),
            ..route(dst)
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn routes_of(host: &FakeHost, name: &str) -> Vec<String> {
        let snap = host.snapshot();
        let mut v: Vec<String> = snap
            .link(name)
            .expect("link")
            .routes
            .iter()
            .map(|r| describe_route(r, r.oif))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_manager_check_finds_only_what_the_test_set() {
        let host = FakeHost::new();
        block_on(async {
            assert!(host.manager_warnings("eth0").await.is_empty());
            host.set_manager_warnings(vec!["NetworkManager would configure eth0~".into()]);
            assert_eq!(
                host.manager_warnings("eth0").await,
                vec!["NetworkManager would configure eth0~".to_string()]
            );
        });
        assert!(host.calls().is_empty(), "not a change of the host");
    }

    #[test]
    fn addresses_bring_and_take_their_prefix_routes() {
        let host = FakeHost::new();
        let i = host.add_link("eth0", MAC, 1500);
        block_on(async {
            host.add_address(i, &addr("10.1.2.3/24")).await.expect("add");
            host.add_address(i, &addr("10.1.2.4/24"))
                .await
                .expect("secondary");
            host.add_address(i, &addr("10.5.5.5/32")).await.expect("/32");
            let mut npr = addr("10.6.0.1/24");
            npr.flags = IFA_F_NOPREFIXROUTE;
            host.add_address(i, &npr).await.expect("noprefixroute");
            let mut metric = addr("10.7.0.1/24");
            metric.rt_priority = Some(50);
            host.add_address(i, &metric).await.expect("metric");
            host.add_address(i, &addr("fd00::3/64")).await.expect("v6");
            let err = host.add_address(i, &addr("10.1.2.3/24")).await.expect_err("dup");
            assert!(matches!(err, HostError::Exists(_)));

            let routes = host.routes(i).await.expect("routes");
            let kernel: Vec<String> = routes.iter().map(|r| describe_route(r, i)).collect();
            assert_eq!(
                kernel,
                vec![
                    format!("10.1.2.0/24 dev #{i} table 254 proto 2 scope 253 type 1 src 10.1.2.3"),
                    format!("10.7.0.0/24 dev #{i} table 254 proto 2 scope 253 type 1 src 10.7.0.1 metric 50"),
                    format!("fd00::/64 dev #{i} table 254 proto 2 scope 0 type 1 metric 256"),
                ]
            );
            let addrs = host.addresses(i).await.expect("addresses");
            let sec = addrs
                .iter()
                .find(|a| a.ip() == ip("10.1.2.4"))
                .expect("secondary");
            assert_eq!(sec.flags, IFA_F_SECONDARY | IFA_F_PERMANENT);
            assert_eq!(sec.label.as_deref(), Some("eth0"));
            let v6 = addrs.iter().find(|a| a.ip().is_ipv6()).expect("v6");
            assert_eq!(v6.flags, IFA_F_PERMANENT, "exactly as given: no nodad added");
            // A saved nodad stays; an add replayed after a crash that left the nodad it was
            // added with is "exists" and clears that flag, and only it.
            let mut keeps = addr("fd00:4::3/64");
            keeps.flags = IFA_F_NODAD;
            host.add_address(i, &keeps).await.expect("nodad");
            let mut interrupted = addr("fd00:5::3/64");
            interrupted.flags = IFA_F_NODAD | IFA_F_NOPREFIXROUTE;
            interrupted.valid_lft = 900;
            host.add_address(i, &interrupted)
                .await
                .expect("as left by a crash");
            let mut replayed = addr("fd00:5::3/64");
            replayed.valid_lft = 7200;
            for _ in 0..2 {
                let err = host.add_address(i, &replayed).await.expect_err("exists");
                assert!(matches!(err, HostError::Exists(_)));
            }
            let err = host.add_address(i, &keeps).await.expect_err("exists");
            assert!(matches!(err, HostError::Exists(_)));
            let addrs = host.addresses(i).await.expect("addresses");
            let flags_of = |net: &str| {
                addrs
                    .iter()
                    .find(|a| a.addr.to_string() == net)
                    .map(|a| (a.flags, a.valid_lft))
            };
            assert_eq!(
                flags_of("fd00:4::3/64"),
                Some((IFA_F_NODAD | IFA_F_PERMANENT, LIFETIME_FOREVER))
            );
            assert_eq!(flags_of("fd00:5::3/64"), Some((IFA_F_NOPREFIXROUTE, 900)));
            for a in [&keeps, &replayed] {
                host.del_address(i, a).await.expect("del");
            }

            // A route using the primary as source goes away with it, and so do the secondary
            // and the prefix route.
            let mut dflt = via("0.0.0.0/0", "10.1.2.1");
            dflt.prefsrc = Some(ip("10.1.2.3"));
            host.add_route(i, &dflt).await.expect("default");
            host.del_address(i, &addr("10.1.2.3/24")).await.expect("del");
            host.del_address(i, &addr("10.1.2.3/24"))
                .await
                .expect("del again is fine");
            let left: Vec<String> = host
                .addresses(i)
                .await
                .expect("a")
                .iter()
                .map(|a| a.addr.to_string())
                .collect();
            assert_eq!(
                left,
                vec!["10.5.5.5/32", "10.6.0.1/24", "10.7.0.1/24", "fd00::3/64"]
            );
            assert_eq!(host.routes(i).await.expect("r").len(), 2);
            // The last IPv4 address takes every IPv4 route of the link along.
            host.add_route(i, &via("10.50.0.0/16", "10.7.0.254"))
                .await
                .expect("route");
            for a in ["10.5.5.5/32", "10.6.0.1/24", "10.7.0.1/24"] {
                host.del_address(i, &addr(a)).await.expect("del");
            }
            assert!(host
                .routes(i)
                .await
                .expect("r")
                .iter()
                .all(|r| r.dst.addr().is_ipv6()));
        });
    }

    #[test]
    fn gateways_must_be_on_link_and_links_up() {
        let host = FakeHost::new();
        let i = host.add_link("eth0", MAC, 1500);
        let down = host.add_link_down("eth1", "02:00:00:00:01:02", 1500);
        block_on(async {
            host.add_address(i, &addr("10.1.2.3/24")).await.expect("add");
            let err = host
                .add_route(i, &via("10.30.0.0/16", "192.0.2.1"))
                .await
                .expect_err("unreachable");
            match err {
                HostError::Netlink { what, message } => {
                    assert!(what.contains("10.30.0.0/16 via 192.0.2.1"), "{what}");
                    assert!(message.contains("unreachable"), "{message}");
                }
                other => panic!("{other:?}"),
            }
            let mut onlink = via("172.16.0.0/16", "10.200.0.1");
            onlink.onlink = true;
            host.add_route(i, &onlink).await.expect("onlink");
            host.add_route(i, &via("fd00:99::/64", "fe80::1"))
                .await
                .expect("v6 link-local gw");
            // GCP style: a /32 address, the gateway reachable through a scope-link host route.
            let mut gw_host = route("10.128.0.1/32");
            gw_host.scope = RT_SCOPE_LINK;
            host.add_route(i, &gw_host).await.expect("host route");
            host.add_route(i, &via("0.0.0.0/0", "10.128.0.1"))
                .await
                .expect("default via it");
            let err = host
                .add_route(i, &via("0.0.0.0/0", "10.1.2.1"))
                .await
                .expect_err("same key");
            assert!(matches!(err, HostError::Exists(_)), "{err}");
            let mut other_metric = via("0.0.0.0/0", "10.1.2.1");
            other_metric.metric = Some(200);
            host.add_route(i, &other_metric)
                .await
                .expect("other metric is another route");
            let mut bad_src = route("10.40.0.0/16");
            bad_src.prefsrc = Some(ip("10.9.9.9"));
            assert!(matches!(
                host.add_route(i, &bad_src).await,
                Err(HostError::Netlink { .. })
            ));
            let err = host
                .add_route(down, &route("10.41.0.0/16"))
                .await
                .expect_err("down link");
            assert!(err.to_string().contains("down"), "{err}");
            let err = host
                .add_route(99, &route("10.41.0.0/16"))
                .await
                .expect_err("no link");
            assert!(matches!(err, HostError::NoLink(_)));
            // Deleting: exact route, then again (already gone is fine).
            let r = Route {
                oif: i,
                ..via("0.0.0.0/0", "10.128.0.1")
            };
            host.del_route(&r).await.expect("del");
            host.del_route(&r).await.expect("del again");
            assert_eq!(host.max_default_routes_seen(IpFamily::V4), 2);
            assert_eq!(host.max_default_routes_seen(IpFamily::V6), 0);
        });
    }

    #[test]
    fn down_flushes_routes_and_ipv6_and_rename_behaves_like_the_kernel() {
        let host = FakeHost::new();
        let i = host.add_link("eth0", MAC, 1500);
        host.add_link("eth1", "02:00:00:00:01:02", 1500);
        block_on(async {
            host.add_address(i, &addr("10.1.2.3/24")).await.expect("add");
            let mut sec = addr("10.1.2.4/24");
            sec.label = Some("eth0:sec".into());
            host.add_address(i, &sec).await.expect("add");
            host.add_address(i, &addr("10.1.3.3/24")).await.expect("add");
            host.add_address(i, &addr("fd00::3/64")).await.expect("add");
            host.add_route(i, &via("0.0.0.0/0", "10.1.2.1"))
                .await
                .expect("default");

            for bad in ["", "a/b", "a b", "0123456789abcdef"] {
                assert!(matches!(
                    host.rename(i, bad).await,
                    Err(HostError::BadName { .. })
                ));
            }
            assert!(matches!(
                host.rename(i, "eth1").await,
                Err(HostError::LinkExists(_))
            ));
            assert!(matches!(host.rename(77, "x").await, Err(HostError::NoLink(_))));
            host.add_altname("eth1", "enp0s4").expect("altname");
            assert!(matches!(
                host.rename(i, "enp0s4").await,
                Err(HostError::LinkExists(_))
            ));
            host.add_altname("eth0", "enp0s3").expect("altname");

            host.rename(i, "eth0~").await.expect("rename");
            let snap = host.snapshot();
            let l = snap.link("eth0~").expect("renamed");
            assert!(l.link.up);
            assert_eq!(l.altnames, vec!["enp0s3".to_string()]);
            let labels: Vec<_> = l.addresses.iter().map(|a| a.label.clone()).collect();
            assert_eq!(
                labels,
                vec![
                    Some("eth0~".into()),
                    Some("eth0~:sec".into()),
                    Some("eth0~:3".into())
                ]
            );
            // Down/up: the default route and IPv6 are gone; IPv4 prefix routes are back.
            assert_eq!(
                routes_of(&host, "eth0~"),
                vec![
                    format!("10.1.2.0/24 dev #{i} table 254 proto 2 scope 253 type 1 src 10.1.2.3"),
                    format!("10.1.3.0/24 dev #{i} table 254 proto 2 scope 253 type 1 src 10.1.3.3"),
                ]
            );
            assert!(host.link_by_name("eth0").await.expect("l").is_none());

            // Renaming back drops an altname equal to the old name (what udev may add).
            host.add_altname("eth0~", "eth0").expect("altname");
            host.rename(i, "eth0").await.expect("rename");
            host.rename(i, "eth0~").await.expect("rename");
            let snap = host.snapshot();
            assert_eq!(
                snap.link("eth0~").expect("l").altnames,
                vec!["enp0s3".to_string()]
            );
        });
    }

    #[test]
    fn hooks_fail_log_and_watermark() {
        let host = FakeHost::new();
        let nic = host.add_link("eth0", MAC, 1400);
        host.seed_address("eth0", &addr("10.1.2.3/24")).expect("seed");
        host.seed_route("eth0", &via("0.0.0.0/0", "10.1.2.1"))
            .expect("seed");
        assert_eq!(host.mutation_count(), 0, "seeding is not logged");
        let port = host.add_link_down("eth0-int", MAC, 1500);
        block_on(async {
            host.fail_next("add_address", "boom");
            let err = host
                .add_address(port, &addr("10.1.2.3/24"))
                .await
                .expect_err("injected");
            assert!(matches!(err, HostError::Netlink { ref message, .. } if message == "boom"));
            assert!(
                host.addresses(port).await.expect("a").is_empty(),
                "a failure changes nothing"
            );
            host.fail_next("routes", "read failed");
            assert!(host.routes(nic).await.is_err());
            assert!(host.routes(nic).await.is_ok(), "only the next call fails");

            // Wrong order: the default route is added on the port before it is removed from the
            // NIC; the watermark sees two.
            host.reset_default_route_watermark();
            host.set_up(port, true).await.expect("up");
            host.add_address(port, &addr("10.1.2.3/24"))
                .await
                .expect("dup ip on another link");
            host.add_route(port, &via("0.0.0.0/0", "10.1.2.1"))
                .await
                .expect_err("same key");
            let mut m = via("0.0.0.0/0", "10.1.2.1");
            m.metric = Some(5);
            host.add_route(port, &m).await.expect("other metric");
            assert_eq!(host.max_default_routes_seen(IpFamily::V4), 2);

            let calls = host.calls();
            assert_eq!(calls.len(), host.mutation_count());
            assert_eq!(
                calls[0],
                format!("add_address #{port} 10.1.2.3/24 -> netlink error on add_address (injected): boom")
            );
            assert!(calls
                .iter()
                .any(|c| c.starts_with(&format!("set_up #{port} true -> ok"))));
            host.clear_calls();
            assert_eq!(host.mutation_count(), 0);
            assert!(host.remove_link("eth0-int"));
            assert!(!host.remove_link("eth0-int"));
            assert!(host.snapshot().link("eth0-int").is_none());
            assert_eq!(host.mutation_count(), 0, "test hooks are not logged");
        });
    }

    // ---- the fake against the real kernel, in a fresh namespace (root: the `lab` feature) ----

    #[cfg(feature = "lab")]
    mod lab {
        use std::net::Ipv4Addr;
        use std::time::Duration;

        use super::*;
        use crate::host::kernel::{RTPROT_DHCP, RTPROT_STATIC};
        use crate::host::netlink::NetlinkHost;
        use crate::host::testns::NetNs;

        /// The same sequence of `HostNet` calls on the fake and on the real kernel (a fresh
        /// namespace) must leave the same addresses and routes: the fake's kernel-likeness is
        /// checked, not assumed. Kernel-generated IPv6 link-local addresses/routes (which the fake
        /// does not generate) and finite-lifetime countdowns are left out of the comparison.
        async fn scenario(host: &dyn HostNet, i: u32, out: &mut Vec<(String, Vec<String>, Vec<String>)>) {
            async fn state(
                host: &dyn HostNet,
                i: u32,
                step: &str,
                out: &mut Vec<(String, Vec<String>, Vec<String>)>,
            ) {
                let mut a: Vec<String> = host
                    .addresses(i)
                    .await
                    .expect("addresses")
                    .into_iter()
                    .filter(|a| !a.is_link_local())
                    .map(|a| format!("{a:?}"))
                    .collect();
                a.sort();
                let mut r: Vec<String> = host
                    .routes(i)
                    .await
                    .expect("routes")
                    .into_iter()
                    .filter(|r| r.dst.to_string() != "fe80::/64")
                    .map(|r| describe_route(&r, r.oif))
                    .collect();
                r.sort();
                out.push((step.to_string(), a, r));
            }
            let mut a1 = addr("10.1.2.3/24");
            a1.broadcast = Some(Ipv4Addr::new(10, 1, 2, 255));
            a1.label = Some("eth0".into());
            let mut a2 = addr("10.1.2.4/24");
            a2.label = Some("eth0:sec".into());
            let mut a3 = addr("10.8.0.3/24");
            a3.rt_priority = Some(50);
            let a4 = addr("10.9.0.3/32");
            let a5 = addr("fd00:1::3/64");
            let mut a6 = addr("fd00:2::3/64");
            a6.flags = IFA_F_NOPREFIXROUTE;
            for a in [&a1, &a2, &a3, &a4, &a5, &a6] {
                host.add_address(i, a).await.expect("add address");
            }
            assert!(matches!(
                host.add_address(i, &a1).await,
                Err(HostError::Exists(_))
            ));
            // IPv6 flags exactly as given: a saved nodad stays, none is added; an add replayed
            // after a crash that left the nodad it was added with clears that flag only.
            let mut a7 = addr("fd00:3::3/64");
            a7.flags = IFA_F_NODAD;
            let mut a8 = addr("fd00:4::3/64");
            a8.flags = IFA_F_NODAD | IFA_F_NOPREFIXROUTE;
            for a in [&a7, &a8] {
                host.add_address(i, a).await.expect("add address");
            }
            for a in [&a7, &addr("fd00:4::3/64")] {
                assert!(matches!(host.add_address(i, a).await, Err(HostError::Exists(_))));
            }
            state(host, i, "addresses", out).await;

            let mut dflt = via("0.0.0.0/0", "10.1.2.1");
            dflt.protocol = RTPROT_DHCP;
            dflt.metric = Some(100);
            dflt.prefsrc = Some(ip("10.1.2.3"));
            let mut t100 = via("192.168.50.0/24", "10.1.2.254");
            t100.table = 100;
            let mut host_rt = route("10.99.99.99/32");
            host_rt.scope = RT_SCOPE_LINK;
            host_rt.protocol = RTPROT_STATIC;
            let mut onlink = via("172.16.0.0/16", "10.200.0.1");
            onlink.onlink = true;
            let behind_host_rt = via("10.77.0.0/16", "10.99.99.99");
            let v6_dflt = via("::/0", "fd00:1::1");
            let v6_ll = via("fd00:99::/64", "fe80::1");
            for r in [&dflt, &t100, &host_rt, &onlink, &behind_host_rt, &v6_dflt, &v6_ll] {
                host.add_route(i, r)
                    .await
                    .unwrap_or_else(|e| panic!("add route {r:?}: {e}"));
            }
            assert!(matches!(
                host.add_route(i, &dflt).await,
                Err(HostError::Exists(_))
            ));
            assert!(matches!(
                host.add_route(i, &v6_dflt).await,
                Err(HostError::Exists(_))
            ));
            let unreachable = via("10.30.0.0/16", "192.0.2.1");
            assert!(matches!(
                host.add_route(i, &unreachable).await,
                Err(HostError::Netlink { .. })
            ));
            let unreachable6 = via("fd00:30::/64", "fd00:77::1");
            assert!(matches!(
                host.add_route(i, &unreachable6).await,
                Err(HostError::Netlink { .. })
            ));
            state(host, i, "routes", out).await;

            // Two metrics of one prefix; a delete without a metric takes the lowest.
            for m in [7, 5] {
                let mut r = via("10.6.0.0/16", "10.1.2.1");
                r.metric = Some(m);
                host.add_route(i, &r).await.expect("add metric route");
            }
            let no_metric = Route {
                oif: i,
                ..via("10.6.0.0/16", "10.1.2.1")
            };
            host.del_route(&no_metric).await.expect("del without metric");
            state(host, i, "delete without metric", out).await;

            host.del_address(i, &a1).await.expect("del primary");
            state(host, i, "primary deleted", out).await;
            host.set_up(i, false).await.expect("down");
            state(host, i, "down", out).await;
            host.set_up(i, true).await.expect("up");
            state(host, i, "up", out).await;
            host.rename(i, "eth0~").await.expect("rename");
            state(host, i, "renamed", out).await;
            host.add_address(i, &a1).await.expect("add");
            host.add_address(i, &a2).await.expect("add");
            state(host, i, "labels after rename", out).await;
            for a in [&a1, &a3, &a4] {
                host.del_address(i, a).await.expect("del");
            }
            state(host, i, "all IPv4 deleted", out).await;
        }

        #[test]
        fn lab_fake_matches_the_kernel() {
            let fake = FakeHost::new();
            let i = fake.add_link("eth0", MAC, 1400);
            let mut fake_states = Vec::new();
            block_on(scenario(&fake, i, &mut fake_states));

            let ns = NetNs::new();
            ns.cmd().ip_script(&format!(
                "
                link add eth0 address {MAC} mtu 1400 type veth peer name peer0
                link set peer0 up
                link set eth0 up
                "
            ));
            let real_states = ns.run(Duration::from_secs(60), || async {
                let host = NetlinkHost::new().expect("netlink");
                let eth0 = host.link_by_name("eth0").await.expect("links").expect("eth0");
                let mut states = Vec::new();
                scenario(&host, eth0.index, &mut states).await;
                (eth0.index, states)
            });
            let (real_index, real_states) = real_states;
            assert_eq!(real_states.len(), fake_states.len());
            for (f, r) in fake_states.iter().zip(&real_states) {
                let fix = |v: &Vec<String>| -> Vec<String> {
                    v.iter()
                        .map(|s| s.replace(&format!("#{real_index} "), &format!("#{i} ")))
                        .collect()
                };
                assert_eq!(f.0, r.0);
                assert_eq!(f.1, fix(&r.1), "addresses differ after step {:?}", f.0);
                assert_eq!(f.2, fix(&r.2), "routes differ after step {:?}", f.0);
            }
        }
        /// A link's deletion, on the fake and in a namespace: the link goes with its addresses and
        /// routes, a route on another link that used one of its addresses as preferred source goes
        /// too, the other link keeps the rest, and a second delete is `NoLink`. The kernel side also
        /// shows what the stale-device decision relies on: a persistent tap nobody holds reports
        /// kind `tun`, type tap, persist, and no carrier.
        #[test]
        fn lab_delete_link_matches_the_kernel() {
            type Seen = (Vec<String>, Vec<String>, Vec<String>, bool);
            async fn scenario(host: &dyn HostNet, tap: u32, other: u32) -> Seen {
                host.set_up(tap, true).await.expect("tap up");
                host.add_address(tap, &addr("10.1.2.3/24"))
                    .await
                    .expect("tap address");
                host.add_address(tap, &addr("fd00:1::3/64"))
                    .await
                    .expect("tap v6 address");
                host.add_address(other, &addr("10.5.0.2/24"))
                    .await
                    .expect("other address");
                let mut via_src = route("10.70.0.0/16");
                via_src.prefsrc = Some(ip("10.1.2.3"));
                host.add_route(other, &via_src)
                    .await
                    .expect("route with the tap's prefsrc");
                host.add_route(other, &route("10.80.0.0/16"))
                    .await
                    .expect("plain route");
                host.delete_link(tap).await.expect("delete");
                let again = matches!(host.delete_link(tap).await, Err(HostError::NoLink(_)));
                let mut names: Vec<String> = host
                    .links()
                    .await
                    .expect("links")
                    .into_iter()
                    .map(|l| l.name)
                    .filter(|n| n != "lo" && n != "peer1")
                    .collect();
                names.sort();
                let mut a: Vec<String> = host
                    .addresses(other)
                    .await
                    .expect("addresses")
                    .into_iter()
                    .filter(|a| !a.is_link_local())
                    .map(|a| a.addr.to_string())
                    .collect();
                a.sort();
                let mut r: Vec<String> = host
                    .routes(other)
                    .await
                    .expect("routes")
                    .into_iter()
                    .filter(|r| r.dst.to_string() != "fe80::/64")
                    .map(|r| format!("{} {:?}", r.dst, r.prefsrc))
                    .collect();
                r.sort();
                (names, a, r, again)
            }
            let fake = FakeHost::new();
            let tap = fake.add_link_down("tap0", MAC, 1500);
            let other = fake.add_link("eth1", "02:00:00:00:01:02", 1500);
            let fake_seen = block_on(scenario(&fake, tap, other));

            let ns = NetNs::new();
            ns.cmd().ip_script(&format!(
                "
                tuntap add dev tap0 mode tap
                link set tap0 address {MAC}
                link add eth1 address 02:00:00:00:01:02 type veth peer name peer1
                link set peer1 up
                link set eth1 up
                "
            ));
            let (nature, real_seen) = ns.run(Duration::from_secs(60), || async {
                let host = NetlinkHost::new().expect("netlink");
                let tap = host.link_by_name("tap0").await.expect("links").expect("tap0");
                let other = host.link_by_name("eth1").await.expect("links").expect("eth1");
                (tap.nature.clone(), scenario(&host, tap.index, other.index).await)
            });
            assert_eq!(nature.kind.as_deref(), Some("tun"));
            assert_eq!(
                nature.tun,
                Some(crate::host::TunNature {
                    tap: true,
                    persist: true
                }),
                "a persistent tap says so"
            );
            assert_eq!(nature.carrier, Some(false), "nobody holds the tap: no carrier");
            assert_eq!(real_seen.0, vec!["eth1".to_string()], "only eth1 is left");
            assert!(real_seen.3, "a second delete is NoLink");
            assert_eq!(fake_seen, real_seen);
        }
    }
}
