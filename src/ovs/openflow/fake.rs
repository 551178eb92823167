//! An in-process [`Switch`] for actor tests: [`FakeSwitch`] keeps flows, groups and meters
//! the way OVS does (bundles are atomic; ADD replaces the flow with the same table, priority
//! and match; DELETE_STRICT removes one key; DELETE filters by table, cookie/cookie_mask,
//! match, out_port and out_group), and [`FakeConnector`] hands out a new handle on the same
//! state for each connect, so a test can watch an actor reconnect and replay.
//!
//! Like OVS, the fake refuses flows its codec cannot encode, a `goto_table` that does not go
//! forward (`OFPBIC_BAD_TABLE_ID`), a `group:N` that does not exist
//! (`OFPBAC_BAD_OUT_GROUP`) and a `meter:N` that does not exist (`OFPMMFC_INVALID_METER`);
//! deleting a group or meter deletes the flows that use it.
//!
//! Flow stats come from the installed flows, normalized like OVS reports them, with counters
//! a test sets ([`FakeSwitch::set_counters`]). Notifications are injected by the test
//! ([`FakeSwitch::inject`]); packet-outs and resumes are recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::watch;

use super::events::{Event, Hub, PacketIn, PacketOut, PortDesc, Subscription};
use super::flow::{
    normalize_flow, port, Action, AggregateStats, Flow, FlowFilter, FlowKey, FlowMod, FlowModCommand,
    FlowStats, Match, TABLE_ALL,
};
use super::messages;
use super::render::{render_flow, NameMap};
use super::{Group, Meter, OfError, Switch, SwitchConnector};

/// OFPFF_RESET_COUNTS.
const RESET_COUNTS: u16 = 1 << 2;

#[derive(Debug, Default)]
struct State {
    flows: BTreeMap<FlowKey, Flow>,
    /// (packets, bytes, installed at, flags) per flow.
    stats: BTreeMap<FlowKey, (u64, u64, Option<Instant>, u16)>,
    groups: BTreeMap<u32, Group>,
    meters: BTreeMap<u32, Meter>,
    ports: Vec<PortDesc>,
    packet_outs: Vec<PacketOut>,
    resumed: Vec<PacketIn>,
    fail_next_bundle: Option<String>,
    bundles_committed: usize,
}

/// One connection to the fake switch. Clones share the connection.
#[derive(Debug, Clone)]
pub struct FakeSwitch {
    state: Arc<Mutex<State>>,
    closed: Arc<watch::Sender<bool>>,
    hub: Arc<Hub>,
}

impl Default for FakeSwitch {
    fn default() -> Self {
        Self::new()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn reject(request: String, kind: &str, flow: &Flow) -> OfError {
    OfError::Rejected {
        request,
        kind: kind.to_string(),
        flow: Some(render_flow(flow, &NameMap::new())),
    }
}

/// Whether every field `general` sets is set to the same value in `specific`.
fn covers(general: &Match, specific: &Match) -> bool {
    fn f<T: PartialEq>(g: &Option<T>, s: &Option<T>) -> bool {
        g.is_none() || g == s
    }
    f(&general.pkt_mark, &specific.pkt_mark)
        && f(&general.conj_id, &specific.conj_id)
        && f(&general.ct_state, &specific.ct_state)
        && f(&general.ct_zone, &specific.ct_zone)
        && f(&general.ct_mark, &specific.ct_mark)
        && f(&general.ct_label, &specific.ct_label)
        && f(&general.eth_type, &specific.eth_type)
        && f(&general.ip_proto, &specific.ip_proto)
        && general.regs.iter().all(|(k, v)| specific.regs.get(k) == Some(v))
        && f(&general.metadata, &specific.metadata)
        && f(&general.in_port, &specific.in_port)
        && f(&general.vlan_tci, &specific.vlan_tci)
        && f(&general.eth_src, &specific.eth_src)
        && f(&general.eth_dst, &specific.eth_dst)
        && f(&general.ipv4_src, &specific.ipv4_src)
        && f(&general.ipv4_dst, &specific.ipv4_dst)
        && f(&general.ipv6_src, &specific.ipv6_src)
        && f(&general.ipv6_dst, &specific.ipv6_dst)
        && f(&general.arp_spa, &specific.arp_spa)
        && f(&general.arp_tpa, &specific.arp_tpa)
        && f(&general.arp_op, &specific.arp_op)
        && f(&general.arp_sha, &specific.arp_sha)
        && f(&general.arp_tha, &specific.arp_tha)
        && f(&general.icmp_type, &specific.icmp_type)
        && f(&general.icmp_code, &specific.icmp_code)
        && f(&general.nd_target, &specific.nd_target)
        && f(&general.nd_sll, &specific.nd_sll)
        && f(&general.nd_tll, &specific.nd_tll)
        && f(&general.tp_src, &specific.tp_src)
        && f(&general.tp_dst, &specific.tp_dst)
        && f(&general.tcp_flags, &specific.tcp_flags)
}

/// The (non-strict) delete that selects what `filter` selects.
fn filter_mod(filter: &FlowFilter) -> FlowMod {
    let mut flow = Flow::new(filter.table, 0, filter.matches.clone());
    flow.cookie = filter.cookie;
    FlowMod {
        command: FlowModCommand::Delete,
        flow,
        cookie_mask: filter.cookie_mask,
        out_port: filter.out_port,
        out_group: filter.out_group,
        flags: 0,
    }
}

fn uses_group(f: &Flow, g: u32) -> bool {
    f.actions.iter().any(|a| matches!(a, Action::Group(x) if *x == g))
}

fn uses_meter(f: &Flow, m: u32) -> bool {
    f.actions.iter().any(|a| matches!(a, Action::Meter(x) if *x == m))
}

fn uses_port(f: &Flow, p: u32) -> bool {
    f.actions
        .iter()
        .any(|a| matches!(a, Action::Output(x) if *x == p))
}

/// Whether a (non-strict) delete/modify selects `f`.
fn selects(fm: &FlowMod, f: &Flow, strict: bool) -> bool {
    let table_ok = fm.flow.table == TABLE_ALL || fm.flow.table == f.table;
    let cookie_ok = (f.cookie ^ fm.flow.cookie) & fm.cookie_mask == 0;
    let match_ok = if strict {
        fm.flow.priority == f.priority && fm.flow.matches == f.matches
    } else {
        covers(&fm.flow.matches, &f.matches)
    };
    let port_ok = fm.out_port == port::ANY || uses_port(f, fm.out_port);
    let group_ok = fm.out_group == port::ANY || uses_group(f, fm.out_group);
    table_ok && cookie_ok && match_ok && port_ok && group_ok
}

impl State {
    fn check_flow(&self, i: usize, n: usize, fm: &FlowMod) -> Result<(), OfError> {
        let request = || format!("bundle message {} of {} (flow_mod)", i + 1, n);
        if let Err(e) = messages::flow_mod(0, fm) {
            return Err(OfError::Encode {
                what: format!("flow_mod ({})", render_flow(&fm.flow, &NameMap::new())),
                why: e.to_string(),
            });
        }
        if matches!(fm.command, FlowModCommand::Delete | FlowModCommand::DeleteStrict) {
            return Ok(());
        }
        let f = &fm.flow;
        if f.table == TABLE_ALL {
            return Err(reject(request(), "OFPFMFC_BAD_TABLE_ID (type 5, code 2)", f));
        }
        if matches!(f.goto_table, Some(t) if t <= f.table) {
            return Err(reject(request(), "OFPBIC_BAD_TABLE_ID (type 3, code 2)", f));
        }
        for a in &f.actions {
            match a {
                Action::Group(g) if !self.groups.contains_key(g) => {
                    return Err(reject(request(), "OFPBAC_BAD_OUT_GROUP (type 2, code 9)", f));
                }
                Action::Meter(m) if !self.meters.contains_key(m) => {
                    return Err(reject(request(), "OFPMMFC_INVALID_METER (type 12, code 2)", f));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn apply(flows: &mut BTreeMap<FlowKey, Flow>, fm: &FlowMod) {
        match fm.command {
            FlowModCommand::Add => {
                flows.insert(fm.flow.key(), fm.flow.clone());
            }
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => {
                let strict = fm.command == FlowModCommand::ModifyStrict;
                for f in flows.values_mut().filter(|f| selects(fm, f, strict)) {
                    f.actions = fm.flow.actions.clone();
                    // Like OVS with OpenFlow 1.5: the cookie stays.
                    f.goto_table = fm.flow.goto_table;
                }
            }
            FlowModCommand::Delete | FlowModCommand::DeleteStrict => {
                let strict = fm.command == FlowModCommand::DeleteStrict;
                flows.retain(|_, f| !selects(fm, f, strict));
            }
        }
    }
}

impl FakeSwitch {
    /// A fresh, empty switch with one connection.
    pub fn new() -> Self {
        FakeSwitch {
            state: Arc::new(Mutex::new(State::default())),
            closed: Arc::new(watch::channel(false).0),
            hub: Arc::new(Hub::new(1024)),
        }
    }

    /// A new connection to the same switch state (what a reconnect yields).
    pub fn reconnect(&self) -> FakeSwitch {
        FakeSwitch {
            state: self.state.clone(),
            closed: Arc::new(watch::channel(false).0),
            hub: Arc::new(Hub::new(1024)),
        }
    }

    /// Sets the packet and byte counters of the installed flow with `key` (no-op if absent).
    pub fn set_counters(&self, key: &FlowKey, packets: u64, bytes: u64) {
        let mut st = lock(&self.state);
        let key = key.clone();
        if st.flows.contains_key(&key) {
            let e = st.stats.entry(key).or_insert((0, 0, Some(Instant::now()), 0));
            e.0 = packets;
            e.1 = bytes;
        }
    }

    /// Sends `ev` to this connection's subscribers, as the switch would.
    pub fn inject(&self, ev: Event) {
        self.hub.publish(ev);
    }

    /// Sets the ports [`Switch::port_descs`] reports.
    pub fn set_ports(&self, ports: Vec<PortDesc>) {
        lock(&self.state).ports = ports;
    }

    /// Every packet-out sent so far (over all connections).
    pub fn packet_outs(&self) -> Vec<PacketOut> {
        lock(&self.state).packet_outs.clone()
    }

    /// Every packet-in resumed so far (over all connections).
    pub fn resumed(&self) -> Vec<PacketIn> {
        lock(&self.state).resumed.clone()
    }

    /// Every installed flow, sorted by key.
    pub fn flows(&self) -> Vec<Flow> {
        lock(&self.state).flows.values().cloned().collect()
    }

    /// Every installed flow rendered like `ovs-ofctl dump-flows`, sorted.
    pub fn dump_flows_text(&self, names: &NameMap) -> Vec<String> {
        let mut v = super::render::render_flows(lock(&self.state).flows.values(), names);
        v.sort();
        v
    }

    pub fn groups(&self) -> Vec<Group> {
        lock(&self.state).groups.values().cloned().collect()
    }

    pub fn meters(&self) -> Vec<Meter> {
        lock(&self.state).meters.values().cloned().collect()
    }

    /// How many bundles were committed so far (over all connections).
    pub fn bundles_committed(&self) -> usize {
        lock(&self.state).bundles_committed
    }

    /// Makes the next bundle fail with `OfError::Rejected` (kind = `msg`), changing nothing.
    pub fn fail_next_bundle(&self, msg: impl Into<String>) {
        lock(&self.state).fail_next_bundle = Some(msg.into());
    }

    /// Drops this connection: `closed()` resolves and later calls fail with `Closed`. The
    /// switch keeps its flows, like OVS does.
    pub fn disconnect(&self) {
        self.closed.send_replace(true);
        self.hub.close();
    }

    /// Forgets every flow, group and meter (what an OVS restart does).
    pub fn clear(&self) {
        let mut st = lock(&self.state);
        st.flows.clear();
        st.groups.clear();
        st.meters.clear();
    }

    /// Whether this connection was disconnected.
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    fn live(&self) -> Result<MutexGuard<'_, State>, OfError> {
        if self.is_closed() {
            return Err(OfError::Closed);
        }
        Ok(lock(&self.state))
    }
}

#[async_trait]
impl Switch for FakeSwitch {
    async fn bundle(&self, mods: Vec<FlowMod>) -> Result<(), OfError> {
        let mut st = self.live()?;
        if let Some(msg) = st.fail_next_bundle.take() {
            return Err(OfError::Rejected {
                request: "bundle commit (injected failure)".into(),
                kind: msg,
                flow: None,
            });
        }
        let mut flows = st.flows.clone();
        for (i, fm) in mods.iter().enumerate() {
            st.check_flow(i, mods.len(), fm)?;
            State::apply(&mut flows, fm);
        }
        // Counters: kept for flows an ADD replaced (unless reset_counts), new for new flows,
        // gone with deleted flows.
        let now = Instant::now();
        let mut stats = BTreeMap::new();
        for key in flows.keys() {
            let old = st.stats.get(key).copied();
            let add = mods
                .iter()
                .rev()
                .find(|fm| fm.command == FlowModCommand::Add && fm.flow.key() == *key);
            let e = match (old, add) {
                (Some(o), Some(fm)) if fm.flags & RESET_COUNTS == 0 => (o.0, o.1, o.2, fm.flags),
                (_, Some(fm)) => (0, 0, Some(now), fm.flags),
                (Some(o), None) => o,
                (None, None) => (0, 0, Some(now), 0),
            };
            stats.insert(key.clone(), e);
        }
        st.flows = flows;
        st.stats = stats;
        st.bundles_committed += 1;
        Ok(())
    }

    async fn replace_groups(&self, groups: Vec<Group>) -> Result<(), OfError> {
        let mut st = self.live()?;
        let wanted: BTreeMap<u32, Group> = groups.into_iter().map(|g| (g.group_id, g)).collect();
        let gone: Vec<u32> = st
            .groups
            .keys()
            .filter(|g| !wanted.contains_key(g))
            .copied()
            .collect();
        st.flows.retain(|_, f| !gone.iter().any(|g| uses_group(f, *g)));
        st.groups = wanted;
        Ok(())
    }

    async fn replace_meters(&self, meters: Vec<Meter>) -> Result<(), OfError> {
        let mut st = self.live()?;
        let wanted: BTreeMap<u32, Meter> = meters.into_iter().map(|m| (m.meter_id, m)).collect();
        let gone: Vec<u32> = st
            .meters
            .keys()
            .filter(|m| !wanted.contains_key(m))
            .copied()
            .collect();
        st.flows.retain(|_, f| !gone.iter().any(|m| uses_meter(f, *m)));
        st.meters = wanted;
        Ok(())
    }

    async fn barrier(&self) -> Result<(), OfError> {
        self.live().map(|_| ())
    }

    async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    async fn dump_flows(&self, filter: FlowFilter) -> Result<Vec<FlowStats>, OfError> {
        let st = self.live()?;
        let sel = filter_mod(&filter);
        let now = Instant::now();
        Ok(st
            .flows
            .iter()
            .filter(|(_, f)| selects(&sel, f, false))
            .map(|(k, f)| {
                let (packets, bytes, since, flags) = st.stats.get(k).copied().unwrap_or_default();
                FlowStats {
                    flow: normalize_flow(f),
                    packet_count: packets,
                    byte_count: bytes,
                    duration: since.map(|t| now.duration_since(t)).unwrap_or_default(),
                    idle_age: None,
                    flags,
                    importance: 0,
                }
            })
            .collect())
    }

    async fn aggregate_stats(&self, filter: FlowFilter) -> Result<AggregateStats, OfError> {
        let flows = self.dump_flows(filter).await?;
        Ok(AggregateStats {
            packet_count: flows.iter().map(|f| f.packet_count).sum(),
            byte_count: flows.iter().map(|f| f.byte_count).sum(),
            flow_count: u32::try_from(flows.len()).unwrap_or(u32::MAX),
        })
    }

    async fn port_descs(&self) -> Result<Vec<PortDesc>, OfError> {
        Ok(self.live()?.ports.clone())
    }

    async fn packet_out(&self, po: PacketOut) -> Result<(), OfError> {
        if let Err(e) = messages::packet_out(0, &po) {
            return Err(OfError::Encode {
                what: "packet-out".into(),
                why: e.to_string(),
            });
        }
        self.live()?.packet_outs.push(po);
        Ok(())
    }

    async fn resume(&self, pi: PacketIn) -> Result<(), OfError> {
        if let Err(e) = messages::resume(0, &pi) {
            return Err(OfError::Encode {
                what: "resume".into(),
                why: e.to_string(),
            });
        }
        self.live()?.resumed.push(pi);
        Ok(())
    }

    fn subscribe(&self) -> Subscription {
        let sub = self.hub.subscribe();
        if self.is_closed() {
            self.hub.close();
        }
        sub
    }

    fn dropped_events(&self) -> u64 {
        self.hub.dropped()
    }
}

#[derive(Debug, Default)]
struct ConnectorState {
    fail_connects: usize,
    fail_always: bool,
    connects: usize,
    current: Option<FakeSwitch>,
}

/// Hands out a new [`FakeSwitch`] connection (same switch state) on every connect.
#[derive(Debug, Clone)]
pub struct FakeConnector {
    switch: FakeSwitch,
    state: Arc<Mutex<ConnectorState>>,
}

impl Default for FakeConnector {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeConnector {
    pub fn new() -> Self {
        FakeConnector {
            switch: FakeSwitch::new(),
            state: Arc::new(Mutex::new(ConnectorState::default())),
        }
    }

    /// A handle on the switch state for inspection (`flows()`, `groups()`, ...). It is not
    /// one of the connections handed out.
    pub fn switch(&self) -> FakeSwitch {
        self.switch.clone()
    }

    /// The connection handed out last, e.g. to `disconnect()` it.
    pub fn current(&self) -> Option<FakeSwitch> {
        self.state.lock().ok().and_then(|s| s.current.clone())
    }

    /// How many connects succeeded so far.
    pub fn connect_count(&self) -> usize {
        self.state.lock().map(|s| s.connects).unwrap_or(0)
    }

    /// Every flow on the switch (see [`FakeSwitch::flows`]).
    pub fn flows(&self) -> Vec<Flow> {
        self.switch.flows()
    }

    /// Disconnects the current connection, if any (the switch keeps its state).
    pub fn disconnect(&self) {
        if let Some(c) = self.current() {
            c.disconnect();
        }
    }

    /// Simulates an OVS restart: the current connection drops and the switch forgets every
    /// flow, group and meter.
    pub fn disconnect_and_clear(&self) {
        self.switch.clear();
        self.disconnect();
    }

    /// Makes the next `n` connects fail.
    pub fn fail_next_connects(&self, n: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.fail_connects = n;
        }
    }

    /// Makes every connect fail (`true`) until told otherwise (`false`).
    pub fn set_fail_connects(&self, fail: bool) {
        if let Ok(mut s) = self.state.lock() {
            s.fail_always = fail;
        }
    }
}

#[async_trait]
impl SwitchConnector for FakeConnector {
    async fn connect(&self) -> Result<Arc<dyn Switch>, OfError> {
        let mut s = self.state.lock().map_err(|_| OfError::Closed)?;
        if s.fail_always || s.fail_connects > 0 {
            s.fail_connects = s.fail_connects.saturating_sub(1);
            return Err(OfError::Connect {
                path: "fake".into(),
                source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "fake connect failure"),
            });
        }
        s.connects += 1;
        let conn = self.switch.reconnect();
        if let Some(old) = s.current.replace(conn.clone()) {
            old.disconnect();
        }
        Ok(Arc::new(conn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovs::openflow::flow::{Masked, TABLE_ALL};
    use std::time::Duration;

    fn flow(table: u8, prio: u16, reg: u32, cookie: u64) -> Flow {
        Flow::new(table, prio, Match::new().reg(1, reg, None))
            .cookie(cookie)
            .goto(table + 1)
    }

    #[tokio::test]
    async fn add_replaces_same_key_and_deletes_filter() {
        let sw = FakeSwitch::new();
        sw.bundle(vec![
            FlowMod::add(flow(1, 10, 1, 0x1_0000)),
            FlowMod::add(flow(1, 10, 2, 0x1_0000)),
        ])
        .await
        .unwrap();
        sw.bundle(vec![
            FlowMod::add(flow(1, 10, 1, 0x2_0000)),
            FlowMod::add(flow(2, 10, 1, 0x2_0000)),
        ])
        .await
        .unwrap();
        let f = sw.flows();
        assert_eq!(f.len(), 3);
        assert_eq!(f.iter().filter(|f| f.cookie == 0x2_0000).count(), 2);
        // Delete by cookie mask (round 1) across all tables.
        sw.bundle(vec![FlowMod::delete_by_cookie(0x1_0000, 0xffff_0000)])
            .await
            .unwrap();
        assert_eq!(sw.flows().len(), 2);
        // Delete strict by key.
        sw.bundle(vec![FlowMod::delete_strict(flow(2, 10, 1, 0))])
            .await
            .unwrap();
        assert_eq!(sw.flows(), vec![flow(1, 10, 1, 0x2_0000)]);
        // Non-strict delete of a table.
        let mut del = FlowMod::delete_strict(Flow::new(1, 0, Match::new()));
        del.command = FlowModCommand::Delete;
        sw.bundle(vec![del]).await.unwrap();
        assert!(sw.flows().is_empty());
        assert_eq!(sw.bundles_committed(), 5);
    }

    #[tokio::test]
    async fn bundles_are_atomic() {
        let sw = FakeSwitch::new();
        sw.bundle(vec![FlowMod::add(flow(1, 10, 1, 1))]).await.unwrap();
        let bad = Flow::new(3, 1, Match::new()).goto(2);
        let e = sw
            .bundle(vec![FlowMod::add(flow(1, 10, 2, 1)), FlowMod::add(bad)])
            .await
            .unwrap_err();
        match e {
            OfError::Rejected { kind, flow, request } => {
                assert!(kind.starts_with("OFPBIC_BAD_TABLE_ID"));
                assert_eq!(flow.as_deref(), Some("table=3, priority=1 actions=goto_table:2"));
                assert_eq!(request, "bundle message 2 of 2 (flow_mod)");
            }
            e => panic!("{e}"),
        }
        assert_eq!(sw.flows().len(), 1);
        sw.fail_next_bundle("boom");
        assert!(sw.bundle(vec![FlowMod::add(flow(1, 10, 3, 1))]).await.is_err());
        assert_eq!(sw.flows().len(), 1);
        sw.bundle(vec![FlowMod::add(flow(1, 10, 3, 1))]).await.unwrap();
        assert_eq!(sw.flows().len(), 2);
    }

    #[tokio::test]
    async fn groups_and_meters_guard_flows() {
        let sw = FakeSwitch::new();
        let f = Flow::new(1, 1, Match::new())
            .action(Action::Meter(256))
            .action(Action::Group(2));
        assert!(sw.bundle(vec![FlowMod::add(f.clone())]).await.is_err());
        sw.replace_groups(vec![Group {
            group_id: 2,
            buckets: vec![],
        }])
        .await
        .unwrap();
        sw.replace_meters(vec![Meter {
            meter_id: 256,
            rate_pps: 1,
            burst: 2,
        }])
        .await
        .unwrap();
        sw.bundle(vec![FlowMod::add(f)]).await.unwrap();
        // Re-asserting the same groups keeps flows; dropping a group deletes its users.
        sw.replace_groups(vec![Group {
            group_id: 2,
            buckets: vec![],
        }])
        .await
        .unwrap();
        assert_eq!(sw.flows().len(), 1);
        sw.replace_groups(vec![]).await.unwrap();
        assert!(sw.flows().is_empty());
    }

    #[tokio::test]
    async fn stats_notifications_and_packet_io() {
        use crate::ovs::openflow::events::{PortReason, PortStatus};
        let sw = FakeSwitch::new();
        let a = flow(1, 10, 1, 0x1_0000);
        let b = flow(2, 10, 2, 0x2_0000);
        sw.bundle(vec![FlowMod::add(a.clone()), FlowMod::add(b.clone())])
            .await
            .unwrap();
        sw.set_counters(&a.key(), 3, 300);
        let all = sw.dump_flows(FlowFilter::all()).await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].flow.clone(), all[0].packet_count, all[0].byte_count),
            (a.clone(), 3, 300)
        );
        let t2 = sw.dump_flows(FlowFilter::table(2)).await.unwrap();
        assert_eq!(t2.len(), 1);
        assert_eq!(t2[0].flow, b);
        let by_cookie = sw
            .aggregate_stats(FlowFilter::all().cookie(0x1_0000, 0xffff_0000))
            .await
            .unwrap();
        assert_eq!(
            by_cookie,
            AggregateStats {
                packet_count: 3,
                byte_count: 300,
                flow_count: 1
            }
        );
        // An ADD that replaces a flow keeps its counters, unless reset_counts.
        sw.bundle(vec![FlowMod::add(a.clone().goto(5))]).await.unwrap();
        assert_eq!(
            sw.aggregate_stats(FlowFilter::table(1))
                .await
                .unwrap()
                .packet_count,
            3
        );
        let mut reset = FlowMod::add(a.clone());
        reset.flags = RESET_COUNTS;
        sw.bundle(vec![reset]).await.unwrap();
        assert_eq!(
            sw.aggregate_stats(FlowFilter::table(1))
                .await
                .unwrap()
                .packet_count,
            0
        );

        let mut sub = sw.subscribe();
        let ev = Event::PortStatus(PortStatus {
            reason: PortReason::Add,
            port: PortDesc::default(),
        });
        sw.inject(ev.clone());
        assert_eq!(sub.recv().await, Some(ev));
        sw.set_ports(vec![PortDesc::default()]);
        assert_eq!(sw.port_descs().await.unwrap().len(), 1);

        let po = PacketOut {
            in_port: 20,
            metadata: Match::new(),
            actions: vec![Action::Output(21)],
            packet: vec![1, 2, 3],
        };
        sw.packet_out(po.clone()).await.unwrap();
        assert_eq!(sw.packet_outs(), vec![po]);
        let pi = PacketIn {
            packet: vec![1],
            total_len: 1,
            buffer_id: None,
            table_id: 0,
            cookie: 0,
            reason: 0,
            metadata: Match::new(),
            other_metadata: vec![],
            userdata: vec![],
            continuation: None,
            metadata_raw: vec![],
        };
        assert!(sw.resume(pi.clone()).await.is_err(), "nothing to resume");
        let pi = PacketIn {
            continuation: Some(vec![9]),
            ..pi
        };
        sw.resume(pi.clone()).await.unwrap();
        assert_eq!(sw.resumed(), vec![pi]);
        sw.disconnect();
        assert_eq!(sub.recv().await, None);
        assert!(matches!(
            sw.dump_flows(FlowFilter::all()).await,
            Err(OfError::Closed)
        ));
    }

    #[tokio::test]
    async fn disconnect_and_reconnect_share_state() {
        let c = FakeConnector::new();
        let s1 = c.connect().await.unwrap();
        s1.bundle(vec![FlowMod::add(flow(1, 10, 1, 1))]).await.unwrap();
        let h1 = c.current().unwrap();
        h1.disconnect();
        tokio::time::timeout(Duration::from_secs(5), s1.closed())
            .await
            .unwrap();
        assert!(matches!(s1.barrier().await, Err(OfError::Closed)));
        c.fail_next_connects(1);
        assert!(c.connect().await.is_err());
        let s2 = c.connect().await.unwrap();
        s2.barrier().await.unwrap();
        assert_eq!(c.connect_count(), 2);
        c.disconnect_and_clear();
        tokio::time::timeout(Duration::from_secs(5), s2.closed())
            .await
            .unwrap();
        assert!(c.flows().is_empty());
        let s3 = c.connect().await.unwrap();
        s3.bundle(vec![FlowMod::add(flow(1, 10, 1, 1))]).await.unwrap();
        assert_eq!(c.switch().flows().len(), 1);
        let mut m = Match::new();
        m.pkt_mark = Some(Masked::new(1, 1));
        let mut del = FlowMod::delete_strict(Flow::new(TABLE_ALL, 0, m));
        del.command = FlowModCommand::Delete;
        s3.bundle(vec![del]).await.unwrap();
        assert_eq!(
            c.switch().flows().len(),
            1,
            "a match filter that selects nothing deletes nothing"
        );
    }
}
