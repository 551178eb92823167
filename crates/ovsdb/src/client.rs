//! [`OvsdbClient`]: the [`Ovsdb`] trait against a real ovsdb-server (`<ovsRunDir>/db.sock`).
//!
//! Connects lazily on first use and again on the first call after the connection closed, so an
//! ovsdb-server restart heals without recreating the client. Every request is bounded by a
//! timeout (5 s by default, plus the server-side wait for the waiting operations), so a dead or
//! hung server yields an error, never a hang. Each trait method is a fixed sequence of at most
//! two transactions: a read, then one atomic write built by the pure `*_ops` functions below.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{
    jsonrpc::JsonRpcConnection,
    proto::{self, named_uuid, set, string_map, uuid, where_name, where_uuid},
    BridgeSpec, Ovsdb, OvsdbError, PortRecord, PortSpec,
};

/// Default bound on one request (connect + send + answer).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `ensure_bridge` waits for ovs-vswitchd to fill `Bridge.datapath_id`.
pub const DATAPATH_ID_WAIT: Duration = Duration::from_secs(5);
/// `Flow_Table.external_ids` key marking the rows this agent created.
pub const FLOW_TABLE_OWNER_KEY: &str = "antrea-vm-agent";
/// OpenFlow versions the bridge speaks (1.0 for ovs-ofctl defaults, 1.5 for the agent).
pub const PROTOCOLS: [&str; 2] = ["OpenFlow10", "OpenFlow15"];

/// OVSDB client over a unix socket.
#[derive(Debug)]
pub struct OvsdbClient {
    path: PathBuf,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<Arc<JsonRpcConnection>>>,
}

// === impl OvsdbClient ===

impl OvsdbClient {
    /// A client for the socket at `socket_path`; nothing connects until the first call.
    pub fn new(socket_path: impl Into<PathBuf>) -> Self {
        Self {
            path: socket_path.into(),
            timeout: DEFAULT_TIMEOUT,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Changes the per-request timeout (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket this client talks to.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The live connection, (re)connecting if there is none or the last one closed. The flag is
    /// true when the connection was made by this call.
    async fn connection(&self) -> Result<(Arc<JsonRpcConnection>, bool), OvsdbError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            if !c.is_closed() {
                return Ok((c.clone(), false));
            }
            tracing::info!(path = %self.path.display(), "OVSDB connection was closed; reconnecting");
        }
        *guard = None;
        let c = Arc::new(JsonRpcConnection::connect(&self.path).await?);
        tracing::debug!(path = %self.path.display(), "connected to OVSDB");
        *guard = Some(c.clone());
        Ok((c, true))
    }

    /// Forgets `conn` if it is still the cached one, so the next call reconnects.
    async fn discard(&self, conn: &Arc<JsonRpcConnection>) {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *guard = None;
        }
    }

    /// Runs one JSON-RPC request within `timeout` (connecting included).
    ///
    /// With `retry`, a request that fails because a cached connection turns out to be closed
    /// (the server went away since the last call and the reader had not noticed yet) is sent
    /// once more on a new connection. Only requests that are safe to repeat (reads, waits,
    /// idempotent writes) set it: the first attempt may or may not have reached the server.
    async fn call_within(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        retry: bool,
    ) -> Result<Value, OvsdbError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let timed_out = || {
            OvsdbError::Timeout(format!(
                "OVSDB at {} did not answer {method} within {timeout:?}",
                self.path.display()
            ))
        };
        let mut retried = false;
        loop {
            let (conn, fresh) = tokio::time::timeout_at(deadline, self.connection())
                .await
                .map_err(|_| timed_out())??;
            match tokio::time::timeout_at(deadline, conn.call(method, params.clone())).await {
                Ok(Err(OvsdbError::Closed)) if retry && !fresh && !retried => {
                    tracing::debug!(method, "stale OVSDB connection; retrying on a new one");
                    retried = true;
                }
                Ok(r) => return r,
                Err(_) => {
                    // The server did not answer in time: drop the connection so the next call
                    // starts afresh (a hung session must not poison the client forever).
                    self.discard(&conn).await;
                    return Err(timed_out());
                }
            }
        }
    }

    /// Runs one transaction; every operation result is checked for `error`. Not retried: a
    /// transaction cut off by a connection loss may or may not have been committed.
    pub async fn transact(&self, ops: Vec<Value>) -> Result<Vec<Value>, OvsdbError> {
        self.transact_within(ops, self.timeout, false).await
    }

    /// [`Self::transact`] for transactions that are safe to repeat (reads, waits, idempotent
    /// writes): retried once on a stale connection.
    async fn transact_idempotent(&self, ops: Vec<Value>) -> Result<Vec<Value>, OvsdbError> {
        self.transact_within(ops, self.timeout, true).await
    }

    async fn transact_within(
        &self,
        ops: Vec<Value>,
        timeout: Duration,
        retry: bool,
    ) -> Result<Vec<Value>, OvsdbError> {
        let n = ops.len();
        let result = self
            .call_within("transact", proto::transact_params(ops), timeout, retry)
            .await?;
        proto::check_transact_result(result, n)
    }

    /// The ovsdb-server's database names (`list_dbs`); a cheap liveness probe.
    pub async fn list_dbs(&self) -> Result<Vec<String>, OvsdbError> {
        let v = self
            .call_within("list_dbs", json!([]), self.timeout, true)
            .await?;
        let dbs = v
            .as_array()
            .ok_or_else(|| OvsdbError::Protocol(format!("list_dbs returned {v}")))?;
        Ok(dbs
            .iter()
            .filter_map(|d| d.as_str().map(str::to_string))
            .collect())
    }
}

#[async_trait]
impl Ovsdb for OvsdbClient {
    async fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<(), OvsdbError> {
        let read = self
            .transact_idempotent(vec![
                proto::select("Open_vSwitch", json!([]), &["_uuid"]),
                proto::select("Bridge", where_name(&spec.name), &["_uuid", "flow_tables"]),
                proto::select("Flow_Table", json!([]), &["_uuid", "name", "external_ids"]),
            ])
            .await?;
        let root = proto::rows(&read[0])?
            .first()
            .and_then(|r| r.get("_uuid"))
            .and_then(proto::as_uuid);
        let bridge = proto::rows(&read[1])?.first().cloned();
        let flow_table_rows = proto::rows(&read[2])?;
        let existing = match &bridge {
            Some(b) => ExistingBridge {
                uuid: b.get("_uuid").and_then(proto::as_uuid),
                flow_tables: flow_table_map(b.get("flow_tables"), flow_table_rows),
            },
            None => ExistingBridge {
                uuid: None,
                flow_tables: Vec::new(),
            },
        };
        let ops = ensure_bridge_ops(spec, root.as_deref(), &existing, &random_datapath_id());
        let n_ops = ops.len();
        let results = self.transact(ops).await?;
        // The last op adds the bridge to Open_vSwitch (new) or updates it (existing): it must hit.
        if let Some(last) = results.get(n_ops - 1) {
            if last.get("count").is_some() && proto::count(last)? != 1 {
                return Err(OvsdbError::Transaction(format!(
                    "bridge {}: the Open_vSwitch/Bridge row vanished during the update",
                    spec.name
                )));
            }
        }
        self.wait_datapath_id(&spec.name).await
    }

    async fn bridge_external_id(&self, bridge: &str, key: &str) -> Result<Option<String>, OvsdbError> {
        let r = self
            .transact_idempotent(vec![proto::select(
                "Bridge",
                where_name(bridge),
                &["external_ids"],
            )])
            .await?;
        let row = proto::rows(&r[0])?
            .first()
            .ok_or_else(|| OvsdbError::NoBridge(bridge.to_string()))?;
        Ok(proto::map_strings(row.get("external_ids")).remove(key))
    }

    async fn ovs_version(&self) -> Result<Option<String>, OvsdbError> {
        let r = self
            .transact_idempotent(vec![proto::select(
                "Open_vSwitch",
                serde_json::json!([]),
                &["ovs_version"],
            )])
            .await?;
        // `ovs_version` is an optional string: a plain string when set, `["set", []]` when not.
        Ok(proto::rows(&r[0])?
            .first()
            .and_then(|row| row.get("ovs_version"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string))
    }

    async fn set_bridge_external_id(&self, bridge: &str, key: &str, value: &str) -> Result<(), OvsdbError> {
        let r = self
            .transact_idempotent(vec![set_bridge_external_id_op(bridge, key, value)])
            .await?;
        if proto::count(&r[0])? == 0 {
            return Err(OvsdbError::NoBridge(bridge.to_string()));
        }
        Ok(())
    }

    async fn create_port(&self, bridge: &str, spec: &PortSpec) -> Result<String, OvsdbError> {
        let read = self
            .transact_idempotent(vec![
                proto::select("Bridge", where_name(bridge), &["_uuid"]),
                proto::select("Port", where_name(&spec.name), &["_uuid"]),
                proto::select("Interface", where_name(&spec.name), &["_uuid"]),
            ])
            .await?;
        let bridge_uuid = proto::rows(&read[0])?
            .first()
            .and_then(|r| r.get("_uuid"))
            .and_then(proto::as_uuid)
            .ok_or_else(|| OvsdbError::NoBridge(bridge.to_string()))?;
        if !proto::rows(&read[1])?.is_empty() || !proto::rows(&read[2])?.is_empty() {
            return Err(OvsdbError::Transaction(format!(
                "port {} already exists",
                spec.name
            )));
        }
        let results = self.transact(create_port_ops(&bridge_uuid, spec)).await?;
        if proto::count(&results[2])? != 1 {
            return Err(OvsdbError::NoBridge(bridge.to_string()));
        }
        proto::inserted_uuid(&results[1])
    }

    async fn wait_ofport(&self, iface: &str, timeout: Duration) -> Result<u32, OvsdbError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let ops = vec![
            proto::wait(
                "Interface",
                where_name(iface),
                &["ofport"],
                "!=",
                vec![json!({"ofport": proto::empty_set()})],
                timeout_ms,
            ),
            proto::select("Interface", where_name(iface), &["ofport", "error"]),
        ];
        let results = match self
            .transact_within(ops, timeout.saturating_add(self.timeout), true)
            .await
        {
            Ok(r) => r,
            Err(OvsdbError::Timeout(_)) => {
                return Err(OvsdbError::Timeout(format!(
                    "interface {iface} got no ofport within {timeout:?}"
                )))
            }
            Err(e) => return Err(e),
        };
        let row = proto::rows(&results[1])?
            .first()
            .ok_or_else(|| OvsdbError::NoPort(iface.to_string()))?;
        let ofport = proto::opt_i64(row.get("ofport"));
        let error = proto::opt_string(row.get("error"));
        match ofport {
            Some(n) if n > 0 => u32::try_from(n).map_err(|_| OvsdbError::Ofport {
                iface: iface.to_string(),
                why: format!("ofport {n} out of range"),
            }),
            Some(n) => Err(OvsdbError::Ofport {
                iface: iface.to_string(),
                why: error.unwrap_or_else(|| format!("ofport is {n}")),
            }),
            None => Err(OvsdbError::Ofport {
                iface: iface.to_string(),
                why: "ofport is unset".to_string(),
            }),
        }
    }

    async fn delete_port(&self, bridge: &str, name: &str) -> Result<(), OvsdbError> {
        let read = self
            .transact_idempotent(vec![
                proto::select("Bridge", where_name(bridge), &["_uuid", "ports"]),
                proto::select("Port", where_name(name), &["_uuid"]),
            ])
            .await?;
        let Some(port_uuid) = proto::rows(&read[1])?
            .first()
            .and_then(|r| r.get("_uuid"))
            .and_then(proto::as_uuid)
        else {
            return Ok(());
        };
        let Some(b) = proto::rows(&read[0])?.first() else {
            return Err(OvsdbError::NoBridge(bridge.to_string()));
        };
        let bridge_uuid = b.get("_uuid").and_then(proto::as_uuid).unwrap_or_default();
        let ports = b.get("ports").map(proto::uuid_set).unwrap_or_default();
        if !ports.contains(&port_uuid) {
            return Err(OvsdbError::Transaction(format!(
                "port {name} is not on bridge {bridge}"
            )));
        }
        self.transact(delete_port_ops(&bridge_uuid, &port_uuid)).await?;
        Ok(())
    }

    async fn list_ports(&self, bridge: &str) -> Result<Vec<PortRecord>, OvsdbError> {
        let r = self
            .transact_idempotent(vec![
                proto::select("Bridge", where_name(bridge), &["ports"]),
                proto::select(
                    "Port",
                    json!([]),
                    &["_uuid", "name", "external_ids", "interfaces"],
                ),
                proto::select(
                    "Interface",
                    json!([]),
                    &["_uuid", "name", "type", "ofport", "mac", "mac_in_use", "error"],
                ),
            ])
            .await?;
        let b = proto::rows(&r[0])?
            .first()
            .ok_or_else(|| OvsdbError::NoBridge(bridge.to_string()))?;
        let ports = b.get("ports").map(proto::uuid_set).unwrap_or_default();
        join_ports(&ports, proto::rows(&r[1])?, proto::rows(&r[2])?)
    }

    async fn watch_changes(&self) -> Result<tokio::sync::mpsc::UnboundedReceiver<()>, OvsdbError> {
        let (conn, mut notifications) = tokio::time::timeout(
            self.timeout,
            JsonRpcConnection::connect_with_notifications(&self.path),
        )
        .await
        .map_err(|_| OvsdbError::Timeout(format!("connecting to {}", self.path.display())))??;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::time::timeout(self.timeout, conn.call("monitor", monitor_params()))
            .await
            .map_err(|_| OvsdbError::Timeout("the OVSDB monitor request".into()))??;
        let _ = tx.send(());
        tokio::spawn(async move {
            // The connection lives as long as this task; updates are only a wake-up.
            let _conn = conn;
            while let Some(n) = notifications.recv().await {
                if n.method == "update" && tx.send(()).is_err() {
                    break;
                }
            }
        });
        Ok(rx)
    }

    async fn set_port_external_ids(
        &self,
        name: &str,
        external_ids: &BTreeMap<String, String>,
    ) -> Result<(), OvsdbError> {
        let mut row = Map::new();
        row.insert("external_ids".into(), string_map(external_ids));
        let r = self
            .transact_idempotent(vec![proto::update("Port", where_name(name), row)])
            .await?;
        if proto::count(&r[0])? == 0 {
            return Err(OvsdbError::NoPort(name.to_string()));
        }
        Ok(())
    }
}

/// The `monitor` request of [`Ovsdb::watch_changes`]: the columns whose changes matter to the
/// attached interfaces (not statistics or status, which change all the time).
fn monitor_params() -> Value {
    json!([
        "Open_vSwitch",
        "antrea-vm-agent-watch",
        {
            "Open_vSwitch": {"columns": ["bridges"], "select": {"initial": false}},
            "Bridge": {"columns": ["name", "ports", "external_ids"], "select": {"initial": false}},
            "Port": {"columns": ["name", "interfaces", "external_ids"], "select": {"initial": false}},
            "Interface": {"columns": ["name", "type", "ofport"], "select": {"initial": false}},
        }
    ])
}

impl OvsdbClient {
    /// Waits (server side, via an OVSDB `wait` op) until ovs-vswitchd has set the datapath_id.
    async fn wait_datapath_id(&self, bridge: &str) -> Result<(), OvsdbError> {
        let timeout_ms = u64::try_from(DATAPATH_ID_WAIT.as_millis()).unwrap_or(u64::MAX);
        let op = proto::wait(
            "Bridge",
            where_name(bridge),
            &["datapath_id"],
            "!=",
            vec![json!({"datapath_id": proto::empty_set()})],
            timeout_ms,
        );
        match self
            .transact_within(vec![op], DATAPATH_ID_WAIT.saturating_add(self.timeout), true)
            .await
        {
            Ok(_) => Ok(()),
            Err(OvsdbError::Timeout(_)) => Err(OvsdbError::Timeout(format!(
                "bridge {bridge} has no datapath_id after {DATAPATH_ID_WAIT:?} (is ovs-vswitchd running?)"
            ))),
            Err(e) => Err(e),
        }
    }
}

// === pure transaction builders ===

/// What `ensure_bridge` read about an existing bridge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExistingBridge {
    /// `None` when the bridge does not exist.
    pub uuid: Option<String>,
    /// `flow_tables` entries: (table id, Flow_Table row).
    pub flow_tables: Vec<ExistingFlowTable>,
}

/// One `Bridge.flow_tables` entry with the row's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingFlowTable {
    pub table_id: u8,
    pub uuid: String,
    pub name: Option<String>,
    /// The row carries our [`FLOW_TABLE_OWNER_KEY`].
    pub ours: bool,
}

/// Joins `Bridge.flow_tables` with the Flow_Table rows.
fn flow_table_map(flow_tables: Option<&Value>, rows: &[Value]) -> Vec<ExistingFlowTable> {
    proto::map_entries(flow_tables)
        .into_iter()
        .filter_map(|(k, v)| {
            let table_id = u8::try_from(k.as_u64()?).ok()?;
            let uuid = proto::as_uuid(v)?;
            let row = rows
                .iter()
                .find(|r| r.get("_uuid").and_then(proto::as_uuid).as_deref() == Some(&uuid));
            let name = row.and_then(|r| proto::opt_string(r.get("name")));
            let ours = row.is_some_and(|r| {
                proto::map_strings(r.get("external_ids")).contains_key(FLOW_TABLE_OWNER_KEY)
            });
            Some(ExistingFlowTable {
                table_id,
                uuid,
                name,
                ours,
            })
        })
        .collect()
}

/// `"0000"` + a random locally administered unicast MAC as 12 hex digits.
pub fn random_datapath_id() -> String {
    let mut mac: [u8; 6] = rand::random();
    mac[0] = (mac[0] & 0xfe) | 0x02;
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("0000{hex}")
}

/// The write transaction of `ensure_bridge`.
///
/// * New bridge: insert the Flow_Table rows, the Bridge row (named `new_bridge`) with every
///   setting and `other_config:datapath-id`, and add it to `Open_vSwitch.bridges` (inserting the
///   root row when the database was never initialised).
/// * Existing bridge: update the Flow_Table rows named in the spec in place (new rows for new
///   ids, drop rows we created for ids no longer named, keep anybody else's), update the
///   settings, and `mutate insert` the datapath-id: a map insert never overwrites an existing
///   key, so a datapath-id, once written, is kept forever, atomically.
///
/// The last op is the one whose `count` must be 1.
pub fn ensure_bridge_ops(
    spec: &BridgeSpec,
    root_uuid: Option<&str>,
    existing: &ExistingBridge,
    new_datapath_id: &str,
) -> Vec<Value> {
    let mut ops = Vec::new();
    // One name per table id (the last one given wins).
    let wanted: BTreeMap<u8, &String> = spec.table_names.iter().map(|(id, name)| (*id, name)).collect();
    let owner = string_map([(&FLOW_TABLE_OWNER_KEY.to_string(), &"true".to_string())]);
    let mut map: BTreeMap<u8, Value> = BTreeMap::new();
    for ft in &existing.flow_tables {
        if wanted.contains_key(&ft.table_id) || !ft.ours {
            map.insert(ft.table_id, uuid(&ft.uuid));
        }
    }
    for (id, name) in wanted {
        let mut row = Map::new();
        row.insert("name".into(), json!(name));
        row.insert("external_ids".into(), owner.clone());
        match existing.flow_tables.iter().find(|ft| ft.table_id == id) {
            Some(ft) if ft.ours && ft.name.as_ref() == Some(name) => {}
            Some(ft) => ops.push(proto::update("Flow_Table", where_uuid(&ft.uuid), row)),
            None => {
                let tag = format!("flow_table_{id}");
                ops.push(proto::insert("Flow_Table", row, Some(&tag)));
                map.insert(id, named_uuid(&tag));
            }
        }
    }
    let flow_tables = json!([
        "map",
        map.into_iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ]);
    let protocols = set(PROTOCOLS.iter().map(|p| json!(p)).collect());

    let mut row = Map::new();
    row.insert("datapath_type".into(), json!(spec.datapath_type));
    row.insert("protocols".into(), protocols);
    row.insert("fail_mode".into(), json!("secure"));
    row.insert("flow_tables".into(), flow_tables);
    match &existing.uuid {
        None => {
            row.insert("name".into(), json!(spec.name));
            row.insert(
                "other_config".into(),
                json!(["map", [["datapath-id", new_datapath_id]]]),
            );
            ops.push(proto::insert("Bridge", row, Some("new_bridge")));
            let bridges = set(vec![named_uuid("new_bridge")]);
            match root_uuid {
                Some(root) => ops.push(proto::mutate(
                    "Open_vSwitch",
                    where_uuid(root),
                    vec![json!(["bridges", "insert", bridges])],
                )),
                None => {
                    let mut root_row = Map::new();
                    root_row.insert("bridges".into(), bridges);
                    ops.push(proto::insert("Open_vSwitch", root_row, None));
                }
            }
        }
        Some(b) => {
            ops.push(proto::update("Bridge", where_uuid(b), row));
            ops.push(proto::mutate(
                "Bridge",
                where_uuid(b),
                vec![json!([
                    "other_config",
                    "insert",
                    ["map", [["datapath-id", new_datapath_id]]]
                ])],
            ));
        }
    }
    ops
}

/// The write transaction of `create_port`: Interface, Port, and the Bridge's `ports` mutation.
/// Result 1 holds the Port UUID; result 2's count must be 1.
pub fn create_port_ops(bridge_uuid: &str, spec: &PortSpec) -> Vec<Value> {
    let mut iface = Map::new();
    iface.insert("name".into(), json!(spec.name));
    iface.insert("type".into(), json!(spec.iface_type));
    if let Some(mac) = &spec.mac {
        iface.insert("mac".into(), json!(mac));
    }
    let mut port = Map::new();
    port.insert("name".into(), json!(spec.name));
    port.insert("interfaces".into(), set(vec![named_uuid("new_iface")]));
    port.insert("external_ids".into(), string_map(&spec.external_ids));
    vec![
        proto::insert("Interface", iface, Some("new_iface")),
        proto::insert("Port", port, Some("new_port")),
        proto::mutate(
            "Bridge",
            where_uuid(bridge_uuid),
            vec![json!(["ports", "insert", set(vec![named_uuid("new_port")])])],
        ),
    ]
}

/// The write transaction of `delete_port`: unlink from the bridge, delete the Port (its
/// Interface rows are garbage-collected by ovsdb-server).
pub fn delete_port_ops(bridge_uuid: &str, port_uuid: &str) -> Vec<Value> {
    vec![
        proto::mutate(
            "Bridge",
            where_uuid(bridge_uuid),
            vec![json!(["ports", "delete", set(vec![uuid(port_uuid)])])],
        ),
        proto::delete("Port", where_uuid(port_uuid)),
    ]
}

/// Sets one `Bridge.external_ids` key, leaving the others alone: delete the key, then insert it
/// (a map `insert` alone would not overwrite an existing value).
pub fn set_bridge_external_id_op(bridge: &str, key: &str, value: &str) -> Value {
    proto::mutate(
        "Bridge",
        where_name(bridge),
        vec![
            json!(["external_ids", "delete", set(vec![json!(key)])]),
            json!(["external_ids", "insert", ["map", [[key, value]]]]),
        ],
    )
}

/// Builds [`PortRecord`]s for the bridge's ports (sorted by name) from full Port and Interface
/// selects. The interface is the Port's first one (ours always have exactly one). `mac` is the
/// configured `mac`, or else `mac_in_use` (what a system interface really has).
pub fn join_ports(
    bridge_ports: &[String],
    port_rows: &[Value],
    iface_rows: &[Value],
) -> Result<Vec<PortRecord>, OvsdbError> {
    let mut out = Vec::new();
    for p in port_rows {
        let Some(puuid) = p.get("_uuid").and_then(proto::as_uuid) else {
            return Err(OvsdbError::Protocol(format!("Port row without _uuid: {p}")));
        };
        if !bridge_ports.contains(&puuid) {
            continue;
        }
        let iface_uuids = p.get("interfaces").map(proto::uuid_set).unwrap_or_default();
        let iface = iface_uuids.first().and_then(|iu| {
            iface_rows
                .iter()
                .find(|i| i.get("_uuid").and_then(proto::as_uuid).as_deref() == Some(iu))
        });
        let get = |col: &str| iface.and_then(|i| i.get(col));
        out.push(PortRecord {
            uuid: puuid,
            name: proto::string(p.get("name")),
            external_ids: proto::map_strings(p.get("external_ids")),
            iface_name: proto::string(get("name")),
            iface_type: proto::string(get("type")),
            ofport: proto::opt_i64(get("ofport")),
            mac: proto::opt_string(get("mac")).or_else(|| proto::opt_string(get("mac_in_use"))),
            error: proto::opt_string(get("error")),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn bridge_spec(tables: &[(u8, &str)]) -> BridgeSpec {
        BridgeSpec {
            name: "br-int".into(),
            datapath_type: "netdev".into(),
            table_names: tables.iter().map(|(i, n)| (*i, n.to_string())).collect(),
        }
    }

    // === JSON we send ===

    #[test]
    fn create_port_transaction() {
        let spec = PortSpec {
            name: "eth0".into(),
            iface_type: "internal".into(),
            mac: Some("02:00:00:aa:bb:cc".into()),
            external_ids: ids(&[("antrea-type", "host"), ("ip-address", "10.0.0.2")]),
        };
        let ops = create_port_ops("b-uuid", &spec);
        assert_eq!(
            Value::Array(ops),
            json!([
                {"op": "insert", "table": "Interface", "uuid-name": "new_iface",
                 "row": {"name": "eth0", "type": "internal", "mac": "02:00:00:aa:bb:cc"}},
                {"op": "insert", "table": "Port", "uuid-name": "new_port",
                 "row": {"name": "eth0", "interfaces": ["set", [["named-uuid", "new_iface"]]],
                         "external_ids": ["map", [["antrea-type", "host"], ["ip-address", "10.0.0.2"]]]}},
                {"op": "mutate", "table": "Bridge", "where": [["_uuid", "==", ["uuid", "b-uuid"]]],
                 "mutations": [["ports", "insert", ["set", [["named-uuid", "new_port"]]]]]},
            ])
        );
        // A system port has no mac column; empty external_ids is an empty map.
        let uplink = PortSpec {
            name: "eth0~".into(),
            iface_type: String::new(),
            mac: None,
            external_ids: ids(&[]),
        };
        let ops = create_port_ops("b", &uplink);
        assert_eq!(ops[0]["row"], json!({"name": "eth0~", "type": ""}));
        assert_eq!(ops[1]["row"]["external_ids"], json!(["map", []]));
    }

    #[test]
    fn new_bridge_transaction() {
        let spec = bridge_spec(&[(0, "Classification"), (1, "SpoofGuard")]);
        let ops = ensure_bridge_ops(
            &spec,
            Some("root"),
            &ExistingBridge::default(),
            "0000020000000001",
        );
        let owner = json!(["map", [[FLOW_TABLE_OWNER_KEY, "true"]]]);
        assert_eq!(
            Value::Array(ops),
            json!([
                {"op": "insert", "table": "Flow_Table", "uuid-name": "flow_table_0",
                 "row": {"name": "Classification", "external_ids": owner}},
                {"op": "insert", "table": "Flow_Table", "uuid-name": "flow_table_1",
                 "row": {"name": "SpoofGuard", "external_ids": owner}},
                {"op": "insert", "table": "Bridge", "uuid-name": "new_bridge",
                 "row": {"name": "br-int", "datapath_type": "netdev",
                         "protocols": ["set", ["OpenFlow10", "OpenFlow15"]], "fail_mode": "secure",
                         "flow_tables": ["map", [[0, ["named-uuid", "flow_table_0"]],
                                                 [1, ["named-uuid", "flow_table_1"]]]],
                         "other_config": ["map", [["datapath-id", "0000020000000001"]]]}},
                {"op": "mutate", "table": "Open_vSwitch", "where": [["_uuid", "==", ["uuid", "root"]]],
                 "mutations": [["bridges", "insert", ["set", [["named-uuid", "new_bridge"]]]]]},
            ])
        );
        // A table id named twice: the last name wins, one row.
        let dup = bridge_spec(&[(0, "A"), (0, "B")]);
        let ops = ensure_bridge_ops(&dup, Some("root"), &ExistingBridge::default(), "x");
        assert_eq!(ops.iter().filter(|op| op["table"] == "Flow_Table").count(), 1);
        assert_eq!(ops[0]["row"]["name"], "B");
        // An uninitialised database gets its root row.
        let ops = ensure_bridge_ops(&spec, None, &ExistingBridge::default(), "x");
        assert_eq!(
            ops.last(),
            Some(&json!({"op": "insert", "table": "Open_vSwitch",
                         "row": {"bridges": ["set", [["named-uuid", "new_bridge"]]]}}))
        );
    }

    #[test]
    fn existing_bridge_transaction_keeps_datapath_id_and_foreign_tables() {
        let ft = |table_id, uuid: &str, name: &str, ours| ExistingFlowTable {
            table_id,
            uuid: uuid.into(),
            name: Some(name.into()),
            ours,
        };
        let existing = ExistingBridge {
            uuid: Some("b".into()),
            flow_tables: vec![
                ft(0, "t0", "Classification", true), // unchanged: untouched
                ft(1, "t1", "Old", true),            // renamed in place
                ft(2, "t2", "Admin", false),         // named by us now: taken over
                ft(5, "t5", "Gone", true),           // ours, no longer named: dropped
                ft(9, "t9", "Foreign", false),       // somebody else's: kept
            ],
        };
        let spec = bridge_spec(&[(0, "Classification"), (1, "SpoofGuard"), (2, "ARP"), (3, "New")]);
        let ops = ensure_bridge_ops(&spec, Some("root"), &existing, "0000020000000002");
        let owner = json!(["map", [[FLOW_TABLE_OWNER_KEY, "true"]]]);
        assert_eq!(
            Value::Array(ops),
            json!([
                {"op": "update", "table": "Flow_Table", "where": [["_uuid", "==", ["uuid", "t1"]]],
                 "row": {"name": "SpoofGuard", "external_ids": owner}},
                {"op": "update", "table": "Flow_Table", "where": [["_uuid", "==", ["uuid", "t2"]]],
                 "row": {"name": "ARP", "external_ids": owner}},
                {"op": "insert", "table": "Flow_Table", "uuid-name": "flow_table_3",
                 "row": {"name": "New", "external_ids": owner}},
                {"op": "update", "table": "Bridge", "where": [["_uuid", "==", ["uuid", "b"]]],
                 "row": {"datapath_type": "netdev", "protocols": ["set", ["OpenFlow10", "OpenFlow15"]],
                         "fail_mode": "secure",
                         "flow_tables": ["map", [[0, ["uuid", "t0"]], [1, ["uuid", "t1"]], [2, ["uuid", "t2"]],
                                                 [3, ["named-uuid", "flow_table_3"]], [9, ["uuid", "t9"]]]]}},
                {"op": "mutate", "table": "Bridge", "where": [["_uuid", "==", ["uuid", "b"]]],
                 "mutations": [["other_config", "insert", ["map", [["datapath-id", "0000020000000002"]]]]]},
            ])
        );
    }

    #[test]
    fn small_transactions() {
        assert_eq!(
            set_bridge_external_id_op("br-int", "roundNum", "7"),
            json!({"op": "mutate", "table": "Bridge", "where": [["name", "==", "br-int"]],
                   "mutations": [["external_ids", "delete", ["set", ["roundNum"]]],
                                 ["external_ids", "insert", ["map", [["roundNum", "7"]]]]]})
        );
        assert_eq!(
            Value::Array(delete_port_ops("b", "p")),
            json!([
                {"op": "mutate", "table": "Bridge", "where": [["_uuid", "==", ["uuid", "b"]]],
                 "mutations": [["ports", "delete", ["set", [["uuid", "p"]]]]]},
                {"op": "delete", "table": "Port", "where": [["_uuid", "==", ["uuid", "p"]]]},
            ])
        );
    }

    #[test]
    fn datapath_id_is_a_local_unicast_mac() {
        for _ in 0..100 {
            let id = random_datapath_id();
            assert_eq!(id.len(), 16);
            assert!(id.starts_with("0000"));
            assert!(id
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
            let b0 = u8::from_str_radix(&id[4..6], 16).expect("hex");
            assert_eq!(b0 & 0x01, 0, "unicast");
            assert_eq!(b0 & 0x02, 0x02, "locally administered");
        }
    }

    #[test]
    fn ports_are_joined_with_their_interfaces() {
        let ports = vec![
            json!({"_uuid": ["uuid", "p1"], "name": "eth0", "interfaces": ["uuid", "i1"],
                   "external_ids": ["map", [["antrea-type", "host"]]]}),
            json!({"_uuid": ["uuid", "p2"], "name": "eth0~", "interfaces": ["uuid", "i2"],
                   "external_ids": ["map", []]}),
            json!({"_uuid": ["uuid", "p3"], "name": "other-bridge", "interfaces": ["uuid", "i3"],
                   "external_ids": ["map", []]}),
        ];
        let ifaces = vec![
            json!({"_uuid": ["uuid", "i1"], "name": "eth0", "type": "internal", "ofport": 2,
                   "mac": "02:00:00:00:00:01", "mac_in_use": "02:00:00:00:00:01", "error": ["set", []]}),
            json!({"_uuid": ["uuid", "i2"], "name": "eth0~", "type": "", "ofport": ["set", []],
                   "mac": ["set", []], "mac_in_use": "02:00:00:00:00:09", "error": "no such device"}),
        ];
        let got = join_ports(&["p2".to_string(), "p1".to_string()], &ports, &ifaces).expect("join");
        assert_eq!(
            got,
            vec![
                PortRecord {
                    uuid: "p1".into(),
                    name: "eth0".into(),
                    external_ids: ids(&[("antrea-type", "host")]),
                    iface_name: "eth0".into(),
                    iface_type: "internal".into(),
                    ofport: Some(2),
                    mac: Some("02:00:00:00:00:01".into()),
                    error: None,
                },
                PortRecord {
                    uuid: "p2".into(),
                    name: "eth0~".into(),
                    external_ids: ids(&[]),
                    iface_name: "eth0~".into(),
                    iface_type: String::new(),
                    ofport: None,
                    mac: Some("02:00:00:00:00:09".into()),
                    error: Some("no such device".into()),
                },
            ]
        );
    }

    #[tokio::test]
    async fn dead_socket_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = OvsdbClient::new(dir.path().join("db.sock"));
        let e = c.list_ports("br-int").await;
        assert!(matches!(e, Err(OvsdbError::Connect { .. })), "{e:?}");
    }
}
