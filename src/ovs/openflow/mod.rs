//! OpenFlow 1.5 + Nicira extensions: the flow model, the wire codec, `ovs-ofctl`-style rendering,
//! and the connection to a switch's management socket.
//!
//! Callers use the [`Switch`] trait (real connection: [`conn::OfConnection`]; in-process fake:
//! [`fake::FakeSwitch`]). Nothing outside this module knows OpenFlow bytes.
//!
//! | file | what it owns |
//! |---|---|
//! | `flow.rs` | the flow model: [`Match`], [`Action`], [`Flow`], [`FlowMod`], stats types |
//! | `wire.rs` | bounds-checked reader/writer, header, message type constants |
//! | `oxm.rs` | match fields (OXM/NXM) and their normalization |
//! | `actions.rs` | actions and instructions (standard and Nicira) |
//! | `messages.rs` | every message: encoders, decoders, error names |
//! | `events.rs` | packet-in, port status, packet-out, async config, subscriptions |
//! | `monitor.rs` | flow monitoring (OFPMP_FLOW_MONITOR): the request and the updates |
//! | `render.rs` | `ovs-ofctl dump-flows` text |
//! | `conn.rs` | the connection: xid dispatch, bundles, stats, notifications, keepalive |
//! | `fake.rs` | the in-process switch for actor tests |
//! | `golden.rs`, `lab_tests.rs`, `props.rs` | tests: the reference flows and their text, the lab tests against ovs-vswitchd, property tests |
//!
//! The benchmark against `ovs-ofctl` is `benches/openflow_install.rs`
//! (`cargo bench --bench openflow_install`, as root).
//!
//! Not modelled (the ExternalNode pipeline does not use them): `learn`, tunnels, MPLS, IP
//! TOS/TTL/fragment matches, `ct_nw_*`/`ct_tp_*` matches (kept as bytes in packet-in metadata),
//! `move` between non-register fields, masked `ct_zone` (OVS 3.1 refuses it), table features
//! (table names are set through OVSDB). A flow-stats entry using any of these makes
//! [`Switch::dump_flows`] fail with [`OfError::Unsupported`]; the connection stays up.

pub mod actions;
pub mod conn;
pub mod events;
pub mod fake;
pub mod flow;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod lab_tests;
pub mod messages;
pub mod monitor;
pub mod oxm;
#[cfg(test)]
mod props;
pub mod render;
pub mod wire;

pub use events::{AsyncConfig, Event, PacketIn, PacketOut, PortDesc, PortReason, PortStatus, Subscription};
pub use flow::*;

use async_trait::async_trait;

/// An OpenFlow group (only what the pipeline needs: type ALL with resubmit/set_field buckets).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    pub group_id: u32,
    pub buckets: Vec<Vec<Action>>,
}

/// A packet-in rate-limiting meter: one drop band, `pktps|burst`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Meter {
    pub meter_id: u32,
    pub rate_pps: u32,
    pub burst: u32,
}

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
