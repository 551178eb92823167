//! What a switch tells its controller without being asked, and what the controller sends into
//! the datapath: packet-ins ([`PacketIn`], from NXT_PACKET_IN2), port status changes
//! ([`PortStatus`]), port descriptions ([`PortDesc`]), packet-outs ([`PacketOut`]) and the
//! asynchronous-message configuration ([`AsyncConfig`]).
//!
//! Notifications reach subscribers through a [`Hub`]: every [`Subscription`] has its own
//! bounded queue, so a slow subscriber never stalls the connection or the other subscribers.
//! Nothing is lost silently: an event that finds a subscriber's queue full is counted in that
//! subscription's [`Subscription::dropped`], and an event that finds no subscriber at all is
//! counted too; [`Hub::dropped`] is the connection's total, and both are logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::flow::{Action, Match};
use super::oxm::OtherField;

/// `ofp_packet_in_reason` values.
pub mod reason {
    pub const NO_MATCH: u8 = 0;
    pub const ACTION: u8 = 1;
    pub const INVALID_TTL: u8 = 2;
    pub const ACTION_SET: u8 = 3;
    pub const GROUP: u8 = 4;
    pub const PACKET_OUT: u8 = 5;
}

/// A packet sent to the controller (NXT_PACKET_IN2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PacketIn {
    /// The packet (possibly truncated to the controller action's `max_len`).
    pub packet: Vec<u8>,
    /// The packet's length before truncation.
    pub total_len: u32,
    /// Where the switch buffered the packet, if it did.
    pub buffer_id: Option<u32>,
    /// Table of the flow that sent the packet.
    pub table_id: u8,
    /// Cookie of that flow (`u64::MAX` when the switch does not say: a table miss, and OVS
    /// 3.1 leaves it out of a paused packet-in).
    pub cookie: u64,
    /// An OFPR_* value (see [`reason`]); `controller(reason=no_match)` gives NO_MATCH.
    pub reason: u8,
    /// The pipeline fields at the time of the packet-in: `in_port`, registers, `metadata`,
    /// `pkt_mark`, `ct_state`, `ct_zone`, `ct_mark`, `ct_label`, ...
    pub metadata: Match,
    /// Metadata fields the codec does not model (e.g. `ct_nw_src`), as bytes.
    pub other_metadata: Vec<OtherField>,
    /// The controller action's `userdata`.
    pub userdata: Vec<u8>,
    /// For a paused pipeline (`controller(pause)`): the switch's opaque continuation, sent
    /// back by [`super::Switch::resume`].
    pub continuation: Option<Vec<u8>>,
    /// The metadata property exactly as the switch sent it (sent back on resume).
    pub metadata_raw: Vec<u8>,
}

/// Why a port status message was sent (OFPPR_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortReason {
    Add,
    Delete,
    Modify,
    Other(u8),
}

impl PortReason {
    pub fn from_u8(r: u8) -> Self {
        match r {
            0 => PortReason::Add,
            1 => PortReason::Delete,
            2 => PortReason::Modify,
            n => PortReason::Other(n),
        }
    }
}

/// `ofp_port_config` bit: the port is administratively down.
pub const OFPPC_PORT_DOWN: u32 = 1;
/// `ofp_port_state` bit: no physical link.
pub const OFPPS_LINK_DOWN: u32 = 1;

/// A port as OpenFlow 1.5 describes it (`ofp_port` with its Ethernet property).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortDesc {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    pub name: String,
    /// OFPPC_* bits.
    pub config: u32,
    /// OFPPS_* bits.
    pub state: u32,
    /// OFPPF_* feature bits of the Ethernet property (0 when absent).
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
    /// Speeds in kbps (0 when absent).
    pub curr_speed: u32,
    pub max_speed: u32,
}

impl PortDesc {
    /// Administratively up with a link.
    pub fn is_up(&self) -> bool {
        self.config & OFPPC_PORT_DOWN == 0 && self.state & OFPPS_LINK_DOWN == 0
    }
}

/// A port was added, deleted or changed (OFPT_PORT_STATUS).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortStatus {
    pub reason: PortReason,
    pub port: PortDesc,
}

/// A notification from the switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    PacketIn(Box<PacketIn>),
    PortStatus(PortStatus),
}

/// A packet to send into the datapath (OFPT_PACKET_OUT).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PacketOut {
    /// The port the packet pretends to come from (`port::CONTROLLER` for none).
    pub in_port: u32,
    /// Other pipeline fields to start with (e.g. registers); `in_port` is set from the field
    /// above.
    pub metadata: Match,
    /// What to do with the packet, e.g. `[Output(port::TABLE)]` to run it through the tables.
    pub actions: Vec<Action>,
    pub packet: Vec<u8>,
}

/// Which asynchronous messages the switch sends, as bit masks of reasons, for a connection in
/// the master/equal role and in the slave role (OpenFlow 1.4+ async configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AsyncConfig {
    pub master: AsyncMasks,
    pub slave: AsyncMasks,
}

/// One role's masks: bit N set = send messages with reason N.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AsyncMasks {
    pub packet_in: u32,
    pub port_status: u32,
    pub flow_removed: u32,
    pub role_status: u32,
    pub table_status: u32,
    pub requestforward: u32,
}

impl AsyncConfig {
    /// What the agent asks for: every packet-in reason and every port status change, in either
    /// role, and the group and meter changes other controllers make (OFPT_REQUESTFORWARD, so
    /// that drift detection sees them); no flow-removed, role or table messages.
    pub fn agent() -> Self {
        let m = AsyncMasks {
            packet_in: 0x3f,
            port_status: 0x7,
            requestforward: 0x3,
            ..AsyncMasks::default()
        };
        AsyncConfig { master: m, slave: m }
    }
}

struct Sub {
    tx: mpsc::Sender<Event>,
    dropped: Arc<AtomicU64>,
}

/// Fans notifications out to subscribers (see the module documentation).
pub struct Hub {
    subs: Mutex<Vec<Sub>>,
    capacity: usize,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("capacity", &self.capacity)
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub whose subscriptions each queue up to `capacity` events.
    pub fn new(capacity: usize) -> Self {
        Hub {
            subs: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// A new subscription; it sees every event published from now on.
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = mpsc::channel(self.capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        if let Ok(mut subs) = self.subs.lock() {
            subs.push(Sub {
                tx,
                dropped: dropped.clone(),
            });
        }
        Subscription { rx, dropped }
    }

    /// Hands `ev` to every subscriber, counting (and logging) every copy that cannot be
    /// delivered.
    pub fn publish(&self, ev: Event) {
        let Ok(mut subs) = self.subs.lock() else {
            return;
        };
        subs.retain(|s| !s.tx.is_closed());
        if subs.is_empty() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            debug!(
                total_dropped = n,
                kind = kind(&ev),
                "OpenFlow notification with no subscriber dropped"
            );
            return;
        }
        for s in subs.iter() {
            match s.tx.try_send(ev.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    let mine = s.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    if mine.is_power_of_two() {
                        warn!(
                            dropped = mine,
                            total_dropped = total,
                            kind = kind(&ev),
                            "OpenFlow notification dropped: a subscriber's queue is full"
                        );
                    }
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }

    /// Every notification not delivered to some subscriber so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Ends every subscription: their `recv` returns `None` once drained.
    pub fn close(&self) {
        if let Ok(mut subs) = self.subs.lock() {
            subs.clear();
        }
    }
}

fn kind(ev: &Event) -> &'static str {
    match ev {
        Event::PacketIn(_) => "packet-in",
        Event::PortStatus(_) => "port-status",
    }
}

/// A subscriber's queue of notifications. Ends (returns `None`) when the connection closes.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Event>,
    dropped: Arc<AtomicU64>,
}

impl Subscription {
    /// The next notification; `None` once the connection is gone and the queue is drained.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The next notification if one is queued.
    pub fn try_recv(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }

    /// How many notifications this subscription lost because its queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port_event(n: u32) -> Event {
        Event::PortStatus(PortStatus {
            reason: PortReason::Add,
            port: PortDesc {
                port_no: n,
                ..PortDesc::default()
            },
        })
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_event_and_drops_are_counted() {
        let hub = Hub::new(2);
        hub.publish(port_event(0));
        assert_eq!(hub.dropped(), 1, "no subscriber: counted");
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        for n in 1..=3 {
            hub.publish(port_event(n));
            // `a` keeps up, `b` does not read.
            assert_eq!(a.recv().await, Some(port_event(n)));
        }
        assert_eq!(a.dropped(), 0);
        assert_eq!(b.dropped(), 1);
        assert_eq!(hub.dropped(), 2);
        assert_eq!(b.try_recv(), Some(port_event(1)));
        assert_eq!(b.try_recv(), Some(port_event(2)));
        assert_eq!(b.try_recv(), None);
        drop(b);
        hub.publish(port_event(4));
        assert_eq!(
            hub.dropped(),
            2,
            "a closed subscription is forgotten, not counted"
        );
        hub.close();
        assert_eq!(a.recv().await, Some(port_event(4)));
        assert_eq!(a.recv().await, None);
    }

    #[test]
    fn port_helpers() {
        assert_eq!(PortReason::from_u8(2), PortReason::Modify);
        assert_eq!(PortReason::from_u8(9), PortReason::Other(9));
        let mut p = PortDesc::default();
        assert!(p.is_up());
        p.state = OFPPS_LINK_DOWN;
        assert!(!p.is_up());
        assert_eq!(AsyncConfig::agent().master.port_status, 7);
    }
}
