//! The agent's OpenFlow edge: the connection to a switch's management socket and the [`Switch`]
//! trait the actors use (real connection: [`conn::OfConnection`]; in-process fake:
//! [`fake::FakeSwitch`]). The OpenFlow 1.5 + Nicira codec (flow model, wire format, rendering)
//! is the `ovs-openflow` crate (`crates/openflow`), re-exported here under its module names, so
//! `crate::ovs::openflow::{flow, wire, oxm, actions, messages, monitor, render, events}` and the
//! flow model at this level keep meaning what they did. Nothing outside `ovs` knows OpenFlow
//! bytes: a caller that holds flows by their encoded identity (the flow installer's take-over)
//! gets an opaque key from `packed`.
//!
//! | file | what it owns |
//! |---|---|
//! | `events.rs` | the notification hub: subscriptions to packet-ins and port status (the event types are the codec's) |
//! | `conn.rs` | the connection: xid dispatch, bundles, stats, notifications, keepalive |
//! | `fake.rs` | the in-process switch for actor tests |
//! | `lab_tests.rs` | tests: the codec's reference flows and every message against a real ovs-vswitchd |
//!
//! The benchmark against `ovs-ofctl` is `benches/openflow_install.rs`
//! (`cargo bench --bench openflow_install`, as root).
//!
//! What the codec does not model (see its README) makes [`Switch::dump_flows`] fail with
//! [`OfError::Unsupported`]; the connection stays up.

pub use ovs_openflow::{actions, flow, messages, monitor, oxm, packed, render, wire, Group, Meter};

pub mod conn;
pub mod events;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
#[cfg(test)]
#[cfg(feature = "lab")]
use ovs_openflow::golden;
#[cfg(test)]
#[cfg(feature = "lab")]
mod lab_tests;

pub use events::{AsyncConfig, Event, PacketIn, PacketOut, PortDesc, PortReason, PortStatus, Subscription};
pub use flow::*;

use async_trait::async_trait;

use crate::error_kind::ErrorKind;

/// Errors talking to a switch.
#[derive(Debug, thiserror::Error)]
pub enum OfError {
    #[error("cannot connect to OpenFlow socket {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("OpenFlow connection I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("OpenFlow connection closed")]
    Closed,
    #[error("OpenFlow version negotiation failed: {0}")]
    Negotiation(String),
    #[error("switch rejected {request}: {kind}{}", flow.as_ref().map(|f| format!(" (flow: {f})")).unwrap_or_default())]
    Rejected {
        /// What was sent (e.g. "bundle add #3 flow_mod", "group_mod").
        request: String,
        /// The decoded error type and code.
        kind: String,
        /// The flow the error refers to, rendered, when the error answers a flow_mod.
        flow: Option<String>,
    },
    #[error("malformed OpenFlow message from switch: {0}")]
    Malformed(String),
    #[error("the switch sent something this codec does not model: {0}")]
    Unsupported(String),
    #[error("cannot encode {what}: {why}")]
    Encode { what: String, why: String },
    #[error("timed out waiting for {0}")]
    Timeout(String),
}

impl OfError {
    /// The switch refusing (or the agent being unable to encode) what was sent is `ovs_flows`;
    /// everything else is the session itself.
    pub fn kind(&self) -> ErrorKind {
        match self {
            OfError::Rejected { .. } | OfError::Encode { .. } => ErrorKind::OvsFlows,
            _ => ErrorKind::OvsConnection,
        }
    }
}

/// Flow_mods produced chunk by chunk (see [`Switch::bundle_chunks`]).
pub type FlowModChunks<'a> = dyn Iterator<Item = Vec<FlowMod>> + Send + 'a;

/// A connected OpenFlow 1.5 switch. Every method is safe to call concurrently.
#[async_trait]
pub trait Switch: Send + Sync {
    /// Applies all flow_mods atomically and in order in one bundle (open, add*, commit).
    /// On any error nothing has changed and the error names the offending flow.
    async fn bundle(&self, mods: Vec<FlowMod>) -> Result<(), OfError>;
    /// [`Switch::bundle`] for flow_mods produced chunk by chunk: all of them are applied
    /// atomically and in order in one bundle, but only a bounded number of chunks (and their
    /// encoding) exist at once. Returns how many flow_mods were committed (none is no bundle).
    /// A refused flow_mod is named by its position, command, table and priority (the flow
    /// itself is gone by then). This default collects the chunks and calls `bundle`.
    async fn bundle_chunks(&self, chunks: &mut FlowModChunks<'_>) -> Result<usize, OfError> {
        let mods: Vec<FlowMod> = chunks.flatten().collect();
        let n = mods.len();
        if n > 0 {
            self.bundle(mods).await?;
        }
        Ok(n)
    }
    /// Replaces all groups with `groups` (delete all, then add each).
    async fn replace_groups(&self, groups: Vec<Group>) -> Result<(), OfError>;
    /// Replaces all meters with `meters` (delete all, then add each).
    async fn replace_meters(&self, meters: Vec<Meter>) -> Result<(), OfError>;
    /// Round trip with a barrier.
    async fn barrier(&self) -> Result<(), OfError>;
    /// Resolves when the connection is gone (EOF, I/O error, echo timeout, a malformed message
    /// from the switch).
    async fn closed(&self);
    /// Every flow `filter` selects, decoded, with its counters and age (one multipart
    /// round trip, however many reply parts).
    async fn dump_flows(&self, filter: FlowFilter) -> Result<Vec<FlowStats>, OfError>;
    /// The same flows handed to `each` one by one as the reply parts arrive, so no copy of the
    /// whole dump needs to exist (a restart's take-over of 150,000 flows). The default collects
    /// [`Switch::dump_flows`] first.
    async fn dump_flows_each(
        &self,
        filter: FlowFilter,
        each: &mut (dyn FnMut(FlowStats) + Send),
    ) -> Result<(), OfError> {
        for s in self.dump_flows(filter).await? {
            each(s);
        }
        Ok(())
    }
    /// Packet, byte and flow counts summed over the flows `filter` selects.
    async fn aggregate_stats(&self, filter: FlowFilter) -> Result<AggregateStats, OfError>;
    /// Every port of the bridge.
    async fn port_descs(&self) -> Result<Vec<PortDesc>, OfError>;
    /// Sends a packet into the datapath; fails if the switch refuses it.
    async fn packet_out(&self, po: PacketOut) -> Result<(), OfError>;
    /// Resumes the pipeline a `controller(pause)` action stopped, with `pi.packet` (which the
    /// caller may have changed).
    async fn resume(&self, pi: PacketIn) -> Result<(), OfError>;
    /// A new subscription to the switch's notifications (packet-ins, port status) from now on.
    /// It ends when the connection closes.
    fn subscribe(&self) -> Subscription;
    /// How many notifications could not be delivered to some subscriber (queue full, or no
    /// subscriber at all) on this connection.
    fn dropped_events(&self) -> u64;
    /// Asks the switch to report every flow change on this connection from now on (OpenFlow
    /// 1.4+ flow monitoring, all tables); each reply's updates arrive on the returned receiver,
    /// which ends with the connection. A switch that cannot monitor flows answers
    /// [`OfError::Unsupported`] or [`OfError::Rejected`].
    async fn monitor_flows(
        &self,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<Vec<monitor::FlowUpdate>>, OfError> {
        Err(OfError::Unsupported("flow monitoring".into()))
    }
}

/// Opens connections to a switch (real: the bridge's `.mgmt` unix socket).
#[async_trait]
pub trait SwitchConnector: Send + Sync {
    async fn connect(&self) -> Result<std::sync::Arc<dyn Switch>, OfError>;
}
