//! Interface manager → flow installer and policy cache.

use actix::Message;

pub use crate::attachment::{AttachedInterface, EntityRef};

/// Every interface attached right now (full view, sorted by name). Sent after the interface
/// manager has recovered its state and after every change; never sent while its view is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct InterfacesChanged {
    pub interfaces: Vec<AttachedInterface>,
}

impl InterfacesChanged {
    /// (internal port, uplink port) of every interface, sorted: what ties a rule view to the
    /// interface view it was resolved against.
    pub fn ofports(&self) -> Vec<(u32, u32)> {
        ofports(&self.interfaces)
    }
}

/// See [`InterfacesChanged::ofports`].
pub fn ofports(interfaces: &[AttachedInterface]) -> Vec<(u32, u32)> {
    let mut ports: Vec<(u32, u32)> = interfaces.iter().map(|i| (i.ofport, i.uplink_ofport)).collect();
    ports.sort_unstable();
    ports
}
