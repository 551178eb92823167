//! The attachment model: an interface attached to the bridge (its internal port and its uplink)
//! and the ExternalEntity it stands for. Plain data at the bottom of the layering: the agent
//! re-exports it as `crate::attachment`, so its other pure cores (`packetin`), the procedures
//! (`uplink`) and the actors' messages share it without importing each other.

use std::net::IpAddr;

use serde::Serialize;

/// The ExternalEntity an attached interface stands for in policies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct EntityRef {
    pub namespace: String,
    pub name: String,
}

/// One interface that is attached to the bridge: the internal port that carries the host's
/// configuration and the uplink (the renamed NIC).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct AttachedInterface {
    /// The internal port's name (the NIC's original name).
    pub name: String,
    pub ofport: u32,
    pub uplink_name: String,
    pub uplink_ofport: u32,
    pub ips: Vec<IpAddr>,
    pub entity: EntityRef,
}
