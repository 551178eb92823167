//! OpenFlow 1.5 + Nicira extensions: the flow model, the wire codec, `ovs-ofctl`-style rendering,
//! and the connection to a switch's management socket.
//!
//! Callers use the [`Switch`] trait (real connection: [`conn::OfConnection`]; in-process fake:
//! [`fake::FakeSwitch`]). Nothing outside this module knows OpenFlow bytes.

pub mod actions;
pub mod conn;
pub mod fake;
pub mod flow;
#[cfg(test)]
mod lab_tests;
pub mod messages;
pub mod oxm;
pub mod render;
pub mod wire;

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
    #[error("cannot encode {what}: {why}")]
    Encode { what: String, why: String },
    #[error("timed out waiting for {0}")]
    Timeout(String),
}

/// A connected OpenFlow 1.5 switch. Every method is safe to call concurrently.
#[async_trait]
pub trait Switch: Send + Sync {
    /// Applies all flow_mods atomically and in order in one bundle (open, add*, commit).
    /// On any error nothing has changed and the error names the offending flow.
    async fn bundle(&self, mods: Vec<FlowMod>) -> Result<(), OfError>;
    /// Replaces all groups with `groups` (delete all, then add each).
    async fn replace_groups(&self, groups: Vec<Group>) -> Result<(), OfError>;
    /// Replaces all meters with `meters` (delete all, then add each).
    async fn replace_meters(&self, meters: Vec<Meter>) -> Result<(), OfError>;
    /// Round trip with a barrier.
    async fn barrier(&self) -> Result<(), OfError>;
    /// Resolves when the connection is gone (EOF, I/O error, echo timeout).
    async fn closed(&self);
}

/// Opens connections to a switch (real: the bridge's `.mgmt` unix socket).
#[async_trait]
pub trait SwitchConnector: Send + Sync {
    async fn connect(&self) -> Result<std::sync::Arc<dyn Switch>, OfError>;
}
