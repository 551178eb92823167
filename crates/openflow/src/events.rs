//! What a switch tells its controller without being asked, and what the controller sends into
//! the datapath: packet-ins ([`PacketIn`], from NXT_PACKET_IN2), port status changes
//! ([`PortStatus`]), port descriptions ([`PortDesc`]), packet-outs ([`PacketOut`]) and the
//! asynchronous-message configuration ([`AsyncConfig`]). Plain data; [`crate::messages`]
//! encodes and decodes them.

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
    /// back when the controller resumes the pipeline (NXT_RESUME).
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

#[cfg(test)]
mod tests {
    use super::*;

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
