//! [`FakeOvsdb`]: an in-memory [`Ovsdb`] for in-process actor tests.
//!
//! Models what the agent relies on: bridges with `external_ids` and a datapath-id that is
//! generated once and kept, ports with their records, ofports assigned from 1 per bridge. Test
//! hooks inject failures (`fail_next`), react to port creation/deletion (to grow or remove a fake
//! host's netdev), change ofports and interface errors, and snapshot the state. Thread-safe; the
//! lock is never held across an await or while calling a hook.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;

use super::{client::random_datapath_id, BridgeSpec, Ovsdb, OvsdbError, PortRecord, PortSpec};

/// A port callback (`on_port_created` / `on_port_deleted`).
pub type PortHook = Box<dyn Fn(&PortSpec) + Send + Sync>;
type SharedHook = Arc<dyn Fn(&PortSpec) + Send + Sync>;

/// How often `wait_ofport` re-checks an unset ofport.
const POLL: Duration = Duration::from_millis(5);

/// The in-memory OVSDB.
/// The version the fake reports.
pub const FAKE_OVS_VERSION: &str = "3.1.0-fake";

#[derive(Default)]
pub struct FakeOvsdb {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    bridges: BTreeMap<String, FakeBridge>,
    /// Trait method name → errors to return from its next calls.
    failures: HashMap<String, VecDeque<OvsdbError>>,
    calls: HashMap<String, usize>,
    created_hooks: Vec<SharedHook>,
    deleted_hooks: Vec<SharedHook>,
    next_uuid: u64,
}

struct FakeBridge {
    spec: BridgeSpec,
    external_ids: BTreeMap<String, String>,
    datapath_id: String,
    ports: BTreeMap<String, FakePort>,
    next_ofport: i64,
}

struct FakePort {
    uuid: String,
    spec: PortSpec,
    /// 0 = not assigned yet.
    ofport: i64,
    error: Option<String>,
}

impl FakePort {
    fn record(&self) -> PortRecord {
        PortRecord {
            uuid: self.uuid.clone(),
            name: self.spec.name.clone(),
            external_ids: self.spec.external_ids.clone(),
            iface_name: self.spec.name.clone(),
            iface_type: self.spec.iface_type.clone(),
            ofport: (self.ofport != 0).then_some(self.ofport),
            mac: self.spec.mac.clone(),
            error: self.error.clone(),
        }
    }
}

impl State {
    /// Counts the call and pops an injected failure for it.
    fn enter(&mut self, op: &str) -> Result<(), OvsdbError> {
        *self.calls.entry(op.to_string()).or_default() += 1;
        match self.failures.get_mut(op).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn bridge_mut(&mut self, name: &str) -> Result<&mut FakeBridge, OvsdbError> {
        self.bridges
            .get_mut(name)
            .ok_or_else(|| OvsdbError::NoBridge(name.to_string()))
    }

    fn port_mut(&mut self, name: &str) -> Option<&mut FakePort> {
        self.bridges.values_mut().find_map(|b| b.ports.get_mut(name))
    }
}

impl std::fmt::Debug for FakeOvsdb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("FakeOvsdb")
            .field("bridges", &s.bridges.keys().collect::<Vec<_>>())
            .finish()
    }
}

// === impl FakeOvsdb ===

impl FakeOvsdb {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next call of trait method `op` (e.g. `"create_port"`) fails with
    /// `OvsdbError::Transaction(err_msg)`. Several calls queue up.
    pub fn fail_next(&self, op: &str, err_msg: &str) {
        self.fail_next_with(op, OvsdbError::Transaction(err_msg.to_string()));
    }

    /// The next call of trait method `op` fails with `err`.
    pub fn fail_next_with(&self, op: &str, err: OvsdbError) {
        self.lock()
            .failures
            .entry(op.to_string())
            .or_default()
            .push_back(err);
    }

    /// Called (outside the lock) after each successful `create_port`.
    pub fn on_port_created(&self, hook: PortHook) {
        self.lock().created_hooks.push(Arc::from(hook));
    }

    /// Called (outside the lock) with the deleted port's spec after each `delete_port` that
    /// removed something.
    pub fn on_port_deleted(&self, hook: PortHook) {
        self.lock().deleted_hooks.push(Arc::from(hook));
    }

    /// Snapshot of a bridge's ports, sorted by name (empty if the bridge does not exist).
    pub fn ports(&self, bridge: &str) -> Vec<PortRecord> {
        let s = self.lock();
        s.bridges
            .get(bridge)
            .map(|b| b.ports.values().map(FakePort::record).collect())
            .unwrap_or_default()
    }

    /// Sets an interface's ofport: `> 0` assigned, `-1` failed, `0` not assigned yet (then
    /// `wait_ofport` waits). Returns false if no such port.
    pub fn set_ofport(&self, name: &str, n: i64) -> bool {
        match self.lock().port_mut(name) {
            Some(p) => {
                p.ofport = n;
                true
            }
            None => false,
        }
    }

    /// Sets an interface's `error` column. Returns false if no such port.
    pub fn set_iface_error(&self, name: &str, error: Option<&str>) -> bool {
        match self.lock().port_mut(name) {
            Some(p) => {
                p.error = error.map(str::to_string);
                true
            }
            None => false,
        }
    }

    /// The bridge's persistent `other_config:datapath-id`.
    pub fn datapath_id(&self, bridge: &str) -> Option<String> {
        self.lock().bridges.get(bridge).map(|b| b.datapath_id.clone())
    }

    /// The spec of the last `ensure_bridge` for this bridge.
    pub fn bridge_spec(&self, bridge: &str) -> Option<BridgeSpec> {
        self.lock().bridges.get(bridge).map(|b| b.spec.clone())
    }

    /// A bridge's whole `external_ids` map.
    pub fn bridge_external_ids(&self, bridge: &str) -> Option<BTreeMap<String, String>> {
        self.lock().bridges.get(bridge).map(|b| b.external_ids.clone())
    }

    /// Removes a bridge with its ports (as `ovs-vsctl del-br` would); no hooks run.
    pub fn delete_bridge(&self, bridge: &str) -> bool {
        self.lock().bridges.remove(bridge).is_some()
    }

    /// How many times trait method `op` was called (failed calls included).
    pub fn calls(&self, op: &str) -> usize {
        self.lock().calls.get(op).copied().unwrap_or(0)
    }
}

#[async_trait]
impl Ovsdb for FakeOvsdb {
    async fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<(), OvsdbError> {
        let mut s = self.lock();
        s.enter("ensure_bridge")?;
        match s.bridges.get_mut(&spec.name) {
            Some(b) => b.spec = spec.clone(),
            None => {
                let b = FakeBridge {
                    spec: spec.clone(),
                    external_ids: BTreeMap::new(),
                    datapath_id: random_datapath_id(),
                    ports: BTreeMap::new(),
                    next_ofport: 1,
                };
                s.bridges.insert(spec.name.clone(), b);
            }
        }
        Ok(())
    }

    async fn bridge_external_id(&self, bridge: &str, key: &str) -> Result<Option<String>, OvsdbError> {
        let mut s = self.lock();
        s.enter("bridge_external_id")?;
        Ok(s.bridge_mut(bridge)?.external_ids.get(key).cloned())
    }

    async fn ovs_version(&self) -> Result<Option<String>, OvsdbError> {
        let mut s = self.lock();
        s.enter("ovs_version")?;
        Ok(Some(FAKE_OVS_VERSION.to_string()))
    }

    async fn set_bridge_external_id(&self, bridge: &str, key: &str, value: &str) -> Result<(), OvsdbError> {
        let mut s = self.lock();
        s.enter("set_bridge_external_id")?;
        s.bridge_mut(bridge)?
            .external_ids
            .insert(key.to_string(), value.to_string());
        Ok(())
    }

    async fn create_port(&self, bridge: &str, spec: &PortSpec) -> Result<String, OvsdbError> {
        let (uuid, hooks) = {
            let mut s = self.lock();
            s.enter("create_port")?;
            s.bridge_mut(bridge)?;
            if s.bridges.values().any(|b| b.ports.contains_key(&spec.name)) {
                return Err(OvsdbError::Transaction(format!(
                    "port {} already exists",
                    spec.name
                )));
            }
            s.next_uuid += 1;
            let uuid = format!("00000000-0000-4000-8000-{:012x}", s.next_uuid);
            let b = s.bridge_mut(bridge)?;
            let ofport = b.next_ofport;
            b.next_ofport += 1;
            let port = FakePort {
                uuid: uuid.clone(),
                spec: spec.clone(),
                ofport,
                error: None,
            };
            b.ports.insert(spec.name.clone(), port);
            (uuid, s.created_hooks.clone())
        };
        for h in hooks {
            h(spec);
        }
        Ok(uuid)
    }

    async fn wait_ofport(&self, iface: &str, timeout: Duration) -> Result<u32, OvsdbError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut first = true;
        loop {
            {
                let mut s = self.lock();
                if first {
                    s.enter("wait_ofport")?;
                    first = false;
                }
                let p = s
                    .port_mut(iface)
                    .ok_or_else(|| OvsdbError::NoPort(iface.to_string()))?;
                match p.ofport {
                    n if n > 0 => {
                        return u32::try_from(n).map_err(|_| OvsdbError::Ofport {
                            iface: iface.to_string(),
                            why: format!("ofport {n} out of range"),
                        })
                    }
                    0 => {}
                    n => {
                        return Err(OvsdbError::Ofport {
                            iface: iface.to_string(),
                            why: p.error.clone().unwrap_or_else(|| format!("ofport is {n}")),
                        })
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(OvsdbError::Timeout(format!(
                    "interface {iface} got no ofport within {timeout:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn delete_port(&self, bridge: &str, name: &str) -> Result<(), OvsdbError> {
        let (removed, hooks) = {
            let mut s = self.lock();
            s.enter("delete_port")?;
            if !s.bridges.values().any(|b| b.ports.contains_key(name)) {
                return Ok(());
            }
            let b = s.bridge_mut(bridge)?;
            let Some(p) = b.ports.remove(name) else {
                return Err(OvsdbError::Transaction(format!(
                    "port {name} is not on bridge {bridge}"
                )));
            };
            (p.spec, s.deleted_hooks.clone())
        };
        for h in hooks {
            h(&removed);
        }
        Ok(())
    }

    async fn list_ports(&self, bridge: &str) -> Result<Vec<PortRecord>, OvsdbError> {
        let mut s = self.lock();
        s.enter("list_ports")?;
        Ok(s.bridge_mut(bridge)?
            .ports
            .values()
            .map(FakePort::record)
            .collect())
    }

    async fn set_port_external_ids(
        &self,
        name: &str,
        external_ids: &BTreeMap<String, String>,
    ) -> Result<(), OvsdbError> {
        let mut s = self.lock();
        s.enter("set_port_external_ids")?;
        let p = s
            .port_mut(name)
            .ok_or_else(|| OvsdbError::NoPort(name.to_string()))?;
        p.spec.external_ids = external_ids.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn bridge() -> BridgeSpec {
        BridgeSpec {
            name: "br-int".into(),
            datapath_type: "netdev".into(),
            table_names: vec![(0, "Classifier".into())],
        }
    }

    fn port(name: &str, ty: &str) -> PortSpec {
        PortSpec {
            name: name.into(),
            iface_type: ty.into(),
            mac: (ty == "internal").then(|| "02:00:00:00:00:01".to_string()),
            external_ids: [("antrea-type".to_string(), "host".to_string())].into(),
        }
    }

    #[tokio::test]
    async fn bridge_datapath_id_and_external_ids_persist() {
        let f = FakeOvsdb::new();
        assert!(matches!(
            f.bridge_external_id("br-int", "k").await,
            Err(OvsdbError::NoBridge(_))
        ));
        f.ensure_bridge(&bridge()).await.expect("ensure");
        let dpid = f.datapath_id("br-int").expect("dpid");
        assert_eq!(dpid.len(), 16);
        assert!(dpid.starts_with("0000"));
        let first = u8::from_str_radix(&dpid[4..6], 16).expect("hex");
        assert_eq!(first & 0x03, 0x02, "locally administered unicast");
        f.set_bridge_external_id("br-int", "roundNum", "3")
            .await
            .expect("set");
        f.set_bridge_external_id("br-int", "other", "x")
            .await
            .expect("set");
        f.set_bridge_external_id("br-int", "roundNum", "4")
            .await
            .expect("set");
        f.ensure_bridge(&bridge()).await.expect("ensure again");
        assert_eq!(f.datapath_id("br-int"), Some(dpid));
        assert_eq!(
            f.bridge_external_id("br-int", "roundNum").await.expect("get"),
            Some("4".into())
        );
        assert_eq!(
            f.bridge_external_id("br-int", "other").await.expect("get"),
            Some("x".into())
        );
        assert_eq!(f.bridge_external_id("br-int", "none").await.expect("get"), None);
    }

    #[tokio::test]
    async fn ports_get_sequential_ofports_and_hooks_fire() {
        let f = FakeOvsdb::new();
        let created = Arc::new(AtomicUsize::new(0));
        let deleted = Arc::new(Mutex::new(Vec::new()));
        f.on_port_created(Box::new({
            let created = created.clone();
            move |_| {
                created.fetch_add(1, Ordering::SeqCst);
            }
        }));
        f.on_port_deleted(Box::new({
            let deleted = deleted.clone();
            move |p| deleted.lock().expect("lock").push(p.name.clone())
        }));
        assert!(matches!(
            f.create_port("br-int", &port("eth0~", "")).await,
            Err(OvsdbError::NoBridge(_))
        ));
        f.ensure_bridge(&bridge()).await.expect("ensure");
        let up = f.create_port("br-int", &port("eth0~", "")).await.expect("uplink");
        let host = f
            .create_port("br-int", &port("eth0", "internal"))
            .await
            .expect("host");
        assert_ne!(up, host);
        assert!(
            f.create_port("br-int", &port("eth0", "internal")).await.is_err(),
            "duplicate name"
        );
        assert_eq!(
            f.wait_ofport("eth0~", Duration::from_secs(1))
                .await
                .expect("ofport"),
            1
        );
        assert_eq!(
            f.wait_ofport("eth0", Duration::from_secs(1))
                .await
                .expect("ofport"),
            2
        );
        assert_eq!(created.load(Ordering::SeqCst), 2);

        let listed = f.list_ports("br-int").await.expect("list");
        assert_eq!(listed, f.ports("br-int"));
        assert_eq!(
            listed.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["eth0", "eth0~"]
        );
        assert_eq!(listed[0].mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(listed[0].uuid, host);

        let ids: BTreeMap<String, String> = [("entity-name".to_string(), "vm1".to_string())].into();
        f.set_port_external_ids("eth0", &ids).await.expect("set ids");
        assert_eq!(f.ports("br-int")[0].external_ids, ids);
        assert!(matches!(
            f.set_port_external_ids("nope", &ids).await,
            Err(OvsdbError::NoPort(_))
        ));

        f.delete_port("br-int", "eth0").await.expect("delete");
        f.delete_port("br-int", "eth0")
            .await
            .expect("delete missing is ok");
        assert_eq!(*deleted.lock().expect("lock"), vec!["eth0".to_string()]);
        // A new port gets the next ofport, not a reused one.
        f.create_port("br-int", &port("eth1", "internal"))
            .await
            .expect("create");
        assert_eq!(
            f.wait_ofport("eth1", Duration::from_secs(1))
                .await
                .expect("ofport"),
            3
        );
    }

    #[tokio::test]
    async fn failures_ofport_errors_and_timeouts() {
        let f = FakeOvsdb::new();
        f.ensure_bridge(&bridge()).await.expect("ensure");
        f.fail_next("create_port", "boom");
        let e = f.create_port("br-int", &port("p1", "internal")).await;
        assert!(
            matches!(&e, Err(OvsdbError::Transaction(m)) if m == "boom"),
            "{e:?}"
        );
        f.create_port("br-int", &port("p1", "internal"))
            .await
            .expect("second try works");
        assert_eq!(f.calls("create_port"), 2);

        assert!(f.set_ofport("p1", -1));
        assert!(f.set_iface_error("p1", Some("could not open network device p1")));
        let e = f.wait_ofport("p1", Duration::from_secs(1)).await;
        assert!(
            matches!(&e, Err(OvsdbError::Ofport { why, .. }) if why.contains("could not open")),
            "{e:?}"
        );
        assert_eq!(f.ports("br-int")[0].ofport, Some(-1));

        assert!(f.set_ofport("p1", 0));
        assert_eq!(f.ports("br-int")[0].ofport, None);
        let e = f.wait_ofport("p1", Duration::from_millis(20)).await;
        assert!(matches!(e, Err(OvsdbError::Timeout(_))), "{e:?}");
        assert!(matches!(
            f.wait_ofport("nope", Duration::from_millis(20)).await,
            Err(OvsdbError::NoPort(_))
        ));

        // An ofport assigned while waiting is seen.
        let f = Arc::new(f);
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.wait_ofport("p1", Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        f.set_ofport("p1", 42);
        assert_eq!(waiter.await.expect("join").expect("ofport"), 42);

        f.fail_next_with("list_ports", OvsdbError::Closed);
        assert!(matches!(f.list_ports("br-int").await, Err(OvsdbError::Closed)));
        assert!(f.list_ports("br-int").await.is_ok());
        assert!(f.delete_bridge("br-int"));
        assert!(f.ports("br-int").is_empty());
    }
}
