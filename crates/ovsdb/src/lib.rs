//! An Open vSwitch database client (RFC 7047, JSON-RPC over a unix socket) and the bridge and
//! port operations an OpenFlow controller needs from it, behind the [`Ovsdb`] trait.
//!
//! | module | what it owns |
//! |---|---|
//! | [`jsonrpc`] | the JSON-RPC 1.0 connection: framing, request ids, notifications, echo |
//! | [`proto`] | pure helpers over `serde_json::Value`: operations, conditions, sets and maps, result checks |
//! | [`client`] | [`OvsdbClient`]: the [`Ovsdb`] trait against ovsdb-server, and the pure transaction builders it uses |
//!
//! The client reconnects on the first call after its connection closed, and bounds every request
//! by a timeout, so a dead or hung server gives an error, never a hang.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

pub mod client;
pub mod jsonrpc;
pub mod proto;

pub use client::OvsdbClient;

/// Desired bridge settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeSpec {
    pub name: String,
    /// `system` or `netdev`.
    pub datapath_type: String,
    /// Table id → name, written into `Flow_Table` rows so `ovs-ofctl --names` shows them.
    pub table_names: Vec<(u8, String)>,
}

/// One port to create on the bridge (Port + Interface of the same name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    /// Interface type: `""` (system) or `"internal"`.
    pub iface_type: String,
    /// Interface `mac` column (internal ports only), `aa:bb:cc:dd:ee:ff`.
    pub mac: Option<String>,
    /// Port `external_ids`.
    pub external_ids: BTreeMap<String, String>,
}

/// A port as read back from OVSDB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRecord {
    pub uuid: String,
    pub name: String,
    pub external_ids: BTreeMap<String, String>,
    pub iface_name: String,
    pub iface_type: String,
    /// `None` while OVS has not assigned one; `Some(-1)` on error.
    pub ofport: Option<i64>,
    pub mac: Option<String>,
    /// Interface `error` column.
    pub error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum OvsdbError {
    #[error("cannot connect to OVSDB at {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("OVSDB I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("OVSDB connection closed")]
    Closed,
    #[error("OVSDB protocol error: {0}")]
    Protocol(String),
    #[error("OVSDB transaction failed: {0}")]
    Transaction(String),
    #[error("bridge {0} not found in OVSDB")]
    NoBridge(String),
    #[error("port {0} not found in OVSDB")]
    NoPort(String),
    #[error("interface {iface} has no valid ofport: {why}")]
    Ofport { iface: String, why: String },
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("not supported: {0}")]
    Unsupported(String),
}

/// The OVSDB operations the agent needs. All are idempotent where that makes sense.
#[async_trait]
pub trait Ovsdb: Send + Sync {
    /// Creates the bridge if missing; sets datapath type, `protocols=[OpenFlow10,OpenFlow15]`,
    /// `fail_mode=secure`, a persistent `other_config:datapath-id` (generated once, kept forever),
    /// and the Flow_Table names. Waits for the bridge's datapath_id to appear.
    async fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<(), OvsdbError>;
    /// Reads one `external_ids` key of a bridge.
    async fn bridge_external_id(&self, bridge: &str, key: &str) -> Result<Option<String>, OvsdbError>;
    /// Sets one `external_ids` key of a bridge (other keys untouched).
    async fn set_bridge_external_id(&self, bridge: &str, key: &str, value: &str) -> Result<(), OvsdbError>;
    /// Creates a port; returns the Port UUID. Fails if a port of that name exists.
    async fn create_port(&self, bridge: &str, spec: &PortSpec) -> Result<String, OvsdbError>;
    /// Waits until the interface has an ofport > 0 and returns it.
    async fn wait_ofport(&self, iface: &str, timeout: Duration) -> Result<u32, OvsdbError>;
    /// Deletes a port (and its interface) by name; deleting a missing port is Ok.
    async fn delete_port(&self, bridge: &str, name: &str) -> Result<(), OvsdbError>;
    /// Every port on the bridge with its interface.
    async fn list_ports(&self, bridge: &str) -> Result<Vec<PortRecord>, OvsdbError>;
    /// The `ovs_version` of the Open_vSwitch row (what `ovs-vsctl --version` reports), `None` if
    /// unset.
    async fn ovs_version(&self) -> Result<Option<String>, OvsdbError>;
    /// Replaces a port's external_ids.
    async fn set_port_external_ids(
        &self,
        name: &str,
        external_ids: &BTreeMap<String, String>,
    ) -> Result<(), OvsdbError>;
    /// Watches the bridges, ports and interfaces (RFC 7047 `monitor` on a connection of its
    /// own): the receiver gets one `()` when the monitor starts and one per change of their
    /// names, ports, interfaces, ofports or `external_ids`, and ends when the connection does
    /// (ovsdb-server restarted: watch again). Unsupported by default (fakes).
    async fn watch_changes(&self) -> Result<tokio::sync::mpsc::UnboundedReceiver<()>, OvsdbError> {
        Err(OvsdbError::Unsupported("watching OVSDB".into()))
    }
}
