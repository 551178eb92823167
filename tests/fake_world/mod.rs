//! The pieces of "the actors on fakes" shared by the in-process tests (tests/actors.rs,
//! tests/flow_stats.rs, tests/reporter.rs, tests/wiring.rs and tests/api_support/): the fake VM host, the fake
//! OVSDB joined to it, the fake switch, ExternalNode source, state files and datapath cache
//! bundled as [`Fakes`], the `Deps`
//! built from them, fast timing, the ExternalNode `vm-ns/vm1` as its source gives it, the eth0
//! interface record and the bounded `eventually` poll.
//! Each test file keeps its own configuration and world on top of these.

// Every test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use antrea_vm_agent::actors::{Deps, Timing};
use antrea_vm_agent::config::Config;
use antrea_vm_agent::host::fake::FakeHost;
use antrea_vm_agent::host::files::FakeStateFiles;
use antrea_vm_agent::host::Address;
use antrea_vm_agent::k8s::external_node::ExternalNodeObject;
use antrea_vm_agent::messages::{AttachedInterface, EntityRef, InterfacesChanged};
use antrea_vm_agent::ovs::openflow::fake::FakeConnector;
use antrea_vm_agent::ovs::ovsdb::fake::FakeOvsdb;
use antrea_vm_agent::ovs::ovsdb::{BridgeSpec, Ovsdb};
use antrea_vm_agent::ovs::vswitchd::FakeDatapathCache;
use antrea_vm_agent::sources::fake::FakeSource;
use antrea_vm_agent::sources::SourceEvent;
use antrea_vm_agent::telemetry::AgentMetrics;

/// The MAC of the VM's `eth0` on the fake host.
pub const MAC: &str = "02:11:22:33:44:55";
/// The ofports the tests that drive the flow installer directly give eth0 and its uplink.
pub const HOST_PORT: u32 = 3;
pub const UPLINK_PORT: u32 = 4;

/// A permanent address as netlink reports it.
pub fn address(cidr: &str) -> Address {
    Address {
        addr: cidr.parse().expect("test cidr"),
        flags: 0x80, // IFA_F_PERMANENT
        scope: 0,
        valid_lft: u32::MAX,
        preferred_lft: u32::MAX,
        label: None,
        broadcast: None,
        rt_priority: None,
    }
}

/// Backoffs and periods short enough for tests; callers override the report/stats fields they
/// care about, and the rest keep their production values.
pub fn fast_timing() -> Timing {
    Timing {
        restart_backoff_min: Duration::from_millis(20),
        restart_backoff_max: Duration::from_millis(200),
        restart_backoff_reset: Duration::from_secs(60),
        interface_reconcile: Duration::from_millis(50),
        reconnect_min: Duration::from_millis(20),
        reconnect_max: Duration::from_millis(200),
        port_wait: Duration::from_secs(2),
        // The fake switch has no flow monitor: the installer audits it on this period.
        flow_audit: Duration::from_millis(200),
        ..Timing::default()
    }
}

/// A standalone-mode configuration for tests that run single actors: state, audit logs and the
/// (unused) ExternalNode file live in `dir`.
pub fn standalone_config(dir: &Path) -> Config {
    let d = dir.display();
    let yaml = format!(
        "nodeType: externalNode\nfeatureGates: {{ExternalNode: true}}\novsDatapathType: netdev\n\
         externalNode: {{externalNodeNamespace: vm-ns}}\n\
         auditLogging: {{logDir: {d}/audit}}\n\
         standalone: {{externalNodeFile: {d}/en.yaml}}\nstateDir: {d}\n"
    );
    Config::from_yaml_str(&yaml).expect("test config")
}

/// A fake VM: `lo` and `eth0` (MAC [`MAC`], MTU 1400) holding 10.0.0.2/24.
pub fn vm_host() -> Arc<FakeHost> {
    let host = Arc::new(FakeHost::new());
    host.add_link("lo", "00:00:00:00:00:00", 65536);
    host.set_nature(
        "lo",
        antrea_vm_agent::host::LinkNature {
            loopback: true,
            hw_type: Some("LOOPBACK".into()),
            ..Default::default()
        },
    );
    host.add_link("eth0", MAC, 1400);
    host.seed_address("eth0", &address("10.0.0.2/24"))
        .expect("seed v4");
    host
}

/// A fake OVSDB joined to `host`: as in real OVS, every internal port it creates appears as a
/// netdev on the host, and goes away with the port.
pub fn joined_ovsdb(host: &Arc<FakeHost>) -> Arc<FakeOvsdb> {
    let ovsdb = Arc::new(FakeOvsdb::new());
    let h = host.clone();
    ovsdb.on_port_created(Box::new(move |spec| {
        if spec.iface_type == "internal" {
            h.add_link(
                &spec.name,
                spec.mac.as_deref().unwrap_or("02:00:00:00:00:01"),
                1500,
            );
        }
    }));
    let h = host.clone();
    ovsdb.on_port_deleted(Box::new(move |spec| {
        if spec.iface_type == "internal" {
            h.remove_link(&spec.name);
        }
    }));
    ovsdb
}

/// A fake OVSDB that already holds `br-int` (for a flow installer started without the
/// interface manager).
pub async fn ovsdb_with_br_int() -> Arc<FakeOvsdb> {
    let ovsdb = Arc::new(FakeOvsdb::new());
    ovsdb
        .ensure_bridge(&BridgeSpec {
            name: "br-int".into(),
            datapath_type: "netdev".into(),
            table_names: vec![],
        })
        .await
        .expect("fake bridge");
    ovsdb
}

/// The fakes the actors run on; the tests keep them to inspect and drive the system.
pub struct Fakes {
    pub host: Arc<FakeHost>,
    pub ovsdb: Arc<FakeOvsdb>,
    pub switch: Arc<FakeConnector>,
    pub source: FakeSource,
    pub metrics: AgentMetrics,
    /// Where the reporter's agent info file goes.
    pub files: Arc<FakeStateFiles>,
    /// ovs-vswitchd's datapath flow cache, which the flow installer purges after a repair.
    pub datapath: Arc<FakeDatapathCache>,
}

impl Fakes {
    /// A fresh switch, ExternalNode source, metrics registry, state files and datapath cache
    /// around `host` and `ovsdb`.
    pub fn new(host: Arc<FakeHost>, ovsdb: Arc<FakeOvsdb>) -> Fakes {
        Fakes {
            host,
            ovsdb,
            switch: Arc::new(FakeConnector::new()),
            source: FakeSource::default(),
            metrics: AgentMetrics::new(),
            files: Arc::new(FakeStateFiles::default()),
            datapath: Arc::new(FakeDatapathCache::default()),
        }
    }

    /// `Deps` on these fakes for node `vm1`: no policies, no cluster, no agent info file
    /// (callers override those with struct update syntax).
    pub fn deps(&self, config: Config, timing: Timing) -> Deps {
        Deps {
            config: Arc::new(config),
            node_name: "vm1".into(),
            ovsdb: self.ovsdb.clone(),
            host: self.host.clone(),
            switch: self.switch.clone(),
            source: Arc::new(self.source.clone()),
            policy_source: None,
            cluster: None,
            metrics: self.metrics.clone(),
            agent_info_path: None,
            state_files: self.files.clone(),
            datapath: self.datapath.clone(),
            fqdn: Default::default(),
            packet_ins: None,
            timing,
        }
    }
}

/// The ExternalNode `vm-ns/vm1` with one interface, `eth0`, holding `ips`, as the source gives it.
pub fn external_node(ips: &[&str]) -> SourceEvent {
    external_node_named("eth0", ips)
}

/// The same with the interface named `name`.
pub fn external_node_named(name: &str, ips: &[&str]) -> SourceEvent {
    let ips = ips
        .iter()
        .map(|ip| format!("\"{ip}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let yaml = format!(
        "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\nmetadata: {{name: vm1, namespace: vm-ns}}\n\
         spec: {{interfaces: [{{name: {name}, ips: [{ips}]}}]}}\n"
    );
    let obj: ExternalNodeObject = serde_norway::from_str(&yaml).expect("test yaml");
    SourceEvent::Present(Box::new(obj))
}

/// eth0 attached on ofport [`HOST_PORT`] with its uplink on [`UPLINK_PORT`], holding `ips`, as
/// the interface manager announces it.
pub fn eth0_attached(ips: &[&str]) -> InterfacesChanged {
    InterfacesChanged {
        interfaces: vec![AttachedInterface {
            name: "eth0".into(),
            ofport: HOST_PORT,
            uplink_name: "eth0~".into(),
            uplink_ofport: UPLINK_PORT,
            ips: ips.iter().map(|ip| ip.parse().expect("ip")).collect(),
            entity: EntityRef {
                namespace: "vm-ns".into(),
                name: "vm1-3e616".into(),
            },
        }],
    }
}

/// Polls `cond` every 20 ms for up to 10 s; fails the test with `what` when it never holds.
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
