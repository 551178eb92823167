//! In-process actor tests: the five actors under the supervisor, wired to fakes of OVSDB, the
//! OpenFlow switch, the host's netlink and the ExternalNode source. Each test drives the system to
//! an attached state, injects a fault, and checks it converges again.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};

use antrea_vm_agent::actors::flow_installer::GetInstalledFlows;
use antrea_vm_agent::actors::supervisor::{GetPeers, GetSupervisorReport, Shutdown};
use antrea_vm_agent::actors::{Deps, Peers, Supervisor, Timing};
use antrea_vm_agent::config::Config;
use antrea_vm_agent::host::fake::FakeHost;
use antrea_vm_agent::host::files::FakeStateFiles;
use antrea_vm_agent::host::Route;
use antrea_vm_agent::k8s::external_node::ExternalNodeObject;
use antrea_vm_agent::messages::{ActorKind, Crash, ErrorKind, StatusQuery};
use antrea_vm_agent::ovs::openflow::fake::FakeConnector;
use antrea_vm_agent::ovs::openflow::{Event, Flow, Match, PacketIn};
use antrea_vm_agent::ovs::ovsdb::fake::FakeOvsdb;
use antrea_vm_agent::ovs::vswitchd::FakeDatapathCache;
use antrea_vm_agent::policy::pipeline::{self, table};
use antrea_vm_agent::sources::fake::FakeSource;
use antrea_vm_agent::sources::{SourceError, SourceEvent};

mod fake_world;

use fake_world::{address, eventually, external_node, external_node_named, Fakes, MAC};

/// The fakes and the running supervisor.
struct World {
    ovsdb: Arc<FakeOvsdb>,
    host: Arc<FakeHost>,
    switch: Arc<FakeConnector>,
    /// The packet-in responder's own connection (the production layout: the flow installer and
    /// the responder on threads of their own).
    responder: Arc<FakeConnector>,
    source: FakeSource,
    /// Where the reporter writes `agent-info.json`.
    files: Arc<FakeStateFiles>,
    datapath: Arc<FakeDatapathCache>,
    supervisor: Addr<Supervisor>,
    deps: Deps,
    _dir: tempfile::TempDir,
}

fn default_route(gw: &str, metric: u32, protocol: u8) -> Route {
    let gateway: std::net::IpAddr = gw.parse().expect("test gw");
    Route {
        dst: if gateway.is_ipv4() {
            "0.0.0.0/0".parse()
        } else {
            "::/0".parse()
        }
        .expect("default"),
        gateway: Some(gateway),
        prefsrc: None,
        protocol,
        scope: 0,
        kind: 1,
        table: 254,
        metric: Some(metric),
        oif: 0,
        onlink: false,
    }
}

fn start_world() -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "nodeType: externalNode\nfeatureGates: {{ExternalNode: true}}\novsDatapathType: netdev\n\
         externalNode:\n  externalNodeNamespace: vm-ns\n  policyBypassRules:\n  - {{direction: ingress, protocol: tcp, cidr: 10.0.0.0/24, port: 22}}\n\
         standalone: {{externalNodeFile: {}/en.yaml}}\nstateDir: {}\n",
        dir.path().display(),
        dir.path().display()
    );
    let config = Config::from_yaml_str(&yaml).expect("test config");
    let host = fake_world::vm_host();
    host.seed_address("eth0", &address("fd00::2/64"))
        .expect("seed v6");
    host.seed_route("eth0", &default_route("10.0.0.1", 100, 16))
        .expect("seed route");
    host.seed_route("eth0", &default_route("fd00::1", 1024, 3))
        .expect("seed route6");
    let ovsdb = fake_world::joined_ovsdb(&host);
    let fakes = Fakes::new(host, ovsdb);
    let responder = Arc::new(FakeConnector::new());
    let deps = Deps {
        agent_info_path: Some(dir.path().join("agent-info.json")),
        packet_ins: Some(responder.clone()),
        ..fakes.deps(
            config,
            Timing {
                report_interval: Duration::from_millis(100),
                stats_interval: Duration::from_millis(100),
                status_retry_min: Duration::from_millis(20),
                ..fake_world::fast_timing()
            },
        )
    };
    let supervisor = Supervisor::new(deps.clone()).start();
    World {
        deps,
        ovsdb: fakes.ovsdb,
        host: fakes.host,
        switch: fakes.switch,
        responder,
        source: fakes.source,
        files: fakes.files,
        datapath: fakes.datapath,
        supervisor,
        _dir: dir,
    }
}

impl World {
    /// Stops every actor and starts a new supervisor on the same fakes: an agent restart.
    async fn restart_agent(&mut self) {
        let _ = self.supervisor.send(Shutdown).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.supervisor = Supervisor::new(self.deps.clone()).start();
    }

    fn attached(&self) -> bool {
        let snap = self.host.snapshot();
        let (Some(internal), Some(uplink)) = (snap.link("eth0"), snap.link("eth0~")) else {
            return false;
        };
        let has = |cidr: &str| internal.addresses.iter().any(|a| a.addr.to_string() == cidr);
        internal.link.mac.as_deref() == Some(MAC)
            && internal.link.mtu == 1400
            && has("10.0.0.2/24")
            && has("fd00::2/64")
            && internal
                .routes
                .iter()
                .any(|r| r.is_default() && r.metric == Some(100) && r.protocol == 16)
            && uplink.addresses.iter().all(|a| a.is_link_local())
            && uplink.routes.iter().all(|r| !r.is_default())
    }

    fn switch_flows(&self) -> Vec<Flow> {
        self.switch.flows()
    }

    /// The switch holds the init flows, the bypass flow and the pair flows of eth0.
    fn flows_converged(&self) -> bool {
        let flows = self.switch_flows();
        let ports = self.ovsdb.ports("br-int");
        let ofport = |n: &str| ports.iter().find(|p| p.name == n).and_then(|p| p.ofport);
        let (Some(host_port), Some(uplink_port)) = (ofport("eth0"), ofport("eth0~")) else {
            return false;
        };
        let pair = flows
            .iter()
            .filter(|f| f.table == table::NON_IP && f.priority == 200)
            .count();
        let has_pair_from_host = flows
            .iter()
            .any(|f| f.table == table::NON_IP && f.matches.in_port == Some(host_port as u32));
        let has_pair_from_uplink = flows
            .iter()
            .any(|f| f.table == table::NON_IP && f.matches.in_port == Some(uplink_port as u32));
        let init = pipeline::init_flows(pipeline::PipelineOptions {
            round: 1,
            meters: true,
        })
        .len();
        pair == 2 && has_pair_from_host && has_pair_from_uplink && flows.len() == init + 1 + 6
    }

    async fn peers(&self) -> Peers {
        self.supervisor.send(GetPeers).await.expect("supervisor alive")
    }

    async fn restarts(&self, kind: ActorKind) -> u64 {
        let report = self
            .supervisor
            .send(GetSupervisorReport)
            .await
            .expect("supervisor alive");
        report.restarts.get(&kind).copied().unwrap_or(0)
    }

    async fn crash(&self, kind: ActorKind) {
        let p = self.peers().await;
        let msg = Crash(format!("test crash of {kind}"));
        match kind {
            ActorKind::ExternalNodeWatcher => p.watcher.expect("watcher").do_send(msg),
            ActorKind::InterfaceManager => p.interfaces.expect("interfaces").do_send(msg),
            ActorKind::PolicyCache => p.policy.expect("policy").do_send(msg),
            ActorKind::FlowInstaller => p.flows.expect("flows").do_send(msg),
            ActorKind::AgentInfoReporter => p.reporter.expect("reporter").do_send(msg),
        }
    }

    /// Packet-ins the responder found not to be NetworkPolicy ones, as the flow installer reports.
    async fn packet_ins_not_network_policy(&self) -> u64 {
        let Some(flows) = self.peers().await.flows else {
            return 0;
        };
        match flows.send(StatusQuery).await {
            Ok(status) => status
                .detail
                .flow_installer()
                .map_or(0, |d| d.packet_ins.not_network_policy),
            Err(_) => 0,
        }
    }

    async fn all_healthy(&self) -> bool {
        let p = self.peers().await;
        let mut statuses = Vec::new();
        if let Some(a) = p.watcher {
            statuses.push(a.send(StatusQuery).await);
        }
        if let Some(a) = p.interfaces {
            statuses.push(a.send(StatusQuery).await);
        }
        if let Some(a) = p.policy {
            statuses.push(a.send(StatusQuery).await);
        }
        if let Some(a) = p.flows {
            statuses.push(a.send(StatusQuery).await);
        }
        if let Some(a) = p.reporter {
            statuses.push(a.send(StatusQuery).await);
        }
        statuses.len() == 5 && statuses.iter().all(|s| s.as_ref().is_ok_and(|s| s.healthy))
    }

    async fn converge(&self) {
        eventually("interface attached in the fake host", || async {
            self.attached()
        })
        .await;
        eventually("flows installed in the fake switch", || async {
            self.flows_converged()
        })
        .await;
        eventually("every actor healthy", || self.all_healthy()).await;
    }
}

#[actix_rt::test]
async fn attaches_then_restores_when_the_external_node_goes_away() {
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2", "fd00::2"]));
    w.converge().await;
    assert_eq!(
        w.host
            .max_default_routes_seen(antrea_vm_agent::host::fake::IpFamily::V4),
        1
    );
    assert_eq!(
        w.host
            .max_default_routes_seen(antrea_vm_agent::host::fake::IpFamily::V6),
        1
    );

    w.source.set(SourceEvent::Absent);
    eventually("eth0 restored", || async {
        let snap = w.host.snapshot();
        snap.link("eth0~").is_none()
            && snap.link("eth0").is_some_and(|l| {
                l.link.mac.as_deref() == Some(MAC)
                    && l.link.mtu == 1400
                    && l.addresses.iter().any(|a| a.addr.to_string() == "10.0.0.2/24")
                    && l.routes.iter().any(|r| r.is_default() && r.metric == Some(100))
            })
    })
    .await;
    eventually("pair flows removed", || async {
        w.switch_flows()
            .iter()
            .all(|f| !(f.table == table::NON_IP && f.priority == 200))
    })
    .await;
    assert!(w.ovsdb.ports("br-int").is_empty());
    let _ = w.supervisor.send(Shutdown).await;
}

#[actix_rt::test]
async fn invalid_external_node_keeps_the_last_good_state() {
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2"]));
    w.converge().await;
    let mutations = w.host.mutation_count();
    w.source.set(SourceEvent::Error(SourceError::ExternalNodeFile {
        path: "en.yaml".into(),
        problem: "bad yaml".into(),
    }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(w.attached());
    assert_eq!(
        w.host.mutation_count(),
        mutations,
        "an unreadable source must not change the host"
    );
    let _ = w.supervisor.send(Shutdown).await;
}

/// An ExternalNode whose IPs are on a link that can never be an uplink (a bridge, a tunnel, the
/// loopback) is refused as a whole with an error naming the entry and the reason: the attached
/// NIC stays attached and nothing on the host changes.
#[actix_rt::test]
async fn an_ineligible_uplink_is_refused_and_the_host_is_untouched() {
    use antrea_vm_agent::host::LinkNature;
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2"]));
    w.converge().await;
    w.host.add_link("br0", "02:00:00:00:0b:01", 1500);
    w.host.set_nature(
        "br0",
        LinkNature {
            kind: Some("bridge".into()),
            ..Default::default()
        },
    );
    w.host
        .seed_address("br0", &address("10.5.0.2/24"))
        .expect("seed br0");
    w.host.add_link("vx0", "02:00:00:00:0b:02", 1450);
    w.host.set_nature(
        "vx0",
        LinkNature {
            kind: Some("vxlan".into()),
            ..Default::default()
        },
    );
    w.host
        .seed_address("vx0", &address("10.6.0.2/24"))
        .expect("seed vx0");
    w.host
        .seed_address("lo", &address("10.7.0.2/32"))
        .expect("seed lo");
    let mutations = w.host.mutation_count();
    let im = w.peers().await.interfaces.expect("interface manager");
    for (name, ip, link, reason) in [
        ("br0", "10.5.0.2", "br0", "br0 is a Linux bridge"),
        (
            "vx0",
            "10.6.0.2",
            "vx0",
            "vx0 is a vxlan device, not a physical-like interface",
        ),
        // A name that is no link is only a label: the IPs lead to lo.
        ("nic9", "10.7.0.2", "lo", "lo is the loopback interface"),
    ] {
        w.source.set(external_node_named(name, &[ip]));
        let want = format!(
            "ExternalNode vm-ns/vm1 (fake source): spec.interfaces[0] (name {name:?}, ips [{ip}]): \
             resolves to {link}, which cannot be an uplink: {reason}"
        );
        eventually("the refusal reported", || async {
            let status = im.send(StatusQuery).await.expect("alive");
            status.detail.interface_manager().is_some_and(|s| {
                s.errors
                    .iter()
                    .any(|m| m.kind == ErrorKind::InterfaceAttach && m.message.starts_with(&want))
            })
        })
        .await;
        assert!(w.attached(), "eth0 stays attached");
        assert_eq!(w.host.mutation_count(), mutations, "nothing on the host changed");
    }
    let _ = w.supervisor.send(Shutdown).await;
}

/// For each actor: a panic inside a handler is followed by a restart, and the system converges
/// without touching the host again.
#[actix_rt::test]
async fn every_actor_restarts_after_a_panic_and_the_system_converges() {
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2", "fd00::2"]));
    w.converge().await;
    for kind in ActorKind::ALL {
        let before = w.restarts(kind).await;
        let mutations = w.host.mutation_count();
        w.crash(kind).await;
        eventually(&format!("{kind} restarted"), || async {
            w.restarts(kind).await == before + 1
        })
        .await;
        w.converge().await;
        assert_eq!(
            w.host.mutation_count(),
            mutations,
            "restarting {kind} must not touch the host"
        );
        // The flow installer's own view was rebuilt too.
        if let Some(flows) = w.peers().await.flows {
            let installed = flows.send(GetInstalledFlows).await.expect("flow installer alive");
            assert!(
                !installed.is_empty(),
                "flow installer has its flows after {kind} restarted"
            );
        }
    }
    // The reporter publishes a healthy agent info with every actor's status.
    let path = w._dir.path().join("agent-info.json");
    eventually("agent info written and healthy", || async {
        w.files
            .read(&path)
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v["healthy"] == true && v["actors"].as_array().is_some_and(|a| a.len() == 4))
    })
    .await;
    let _ = w.supervisor.send(Shutdown).await;
}

/// A packet-in that no NetworkPolicy flow sent (empty userdata): the responder counts it.
fn stray_packet_in() -> Event {
    Event::PacketIn(Box::new(PacketIn {
        total_len: 0,
        packet: vec![],
        buffer_id: None,
        table_id: 0,
        cookie: u64::MAX,
        reason: 1,
        metadata: Match::new().in_port(1),
        other_metadata: vec![],
        userdata: vec![],
        continuation: None,
        metadata_raw: vec![],
    }))
}

/// The production layout: the packet-in responder answers on a connection of its own, not on
/// the flow installer's; it reconnects when that connection drops, and comes back with a
/// restarted flow installer.
#[actix_rt::test]
async fn the_packet_in_responder_serves_its_own_connection_and_reconnects() {
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2"]));
    w.converge().await;
    eventually("the responder connected", || async {
        w.responder.current().is_some()
    })
    .await;
    // Served on its own connection (retried: the responder may not have subscribed yet).
    let served = |expected: u64| {
        let w = &w;
        async move {
            for _ in 0..500 {
                if let Some(sw) = w.responder.current() {
                    sw.inject(stray_packet_in());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                if w.packet_ins_not_network_policy().await >= expected {
                    return;
                }
            }
            panic!("no packet-in counted on the responder's connection (wanted {expected})");
        }
    };
    served(1).await;
    // The installer's connection is not served: it announces an id no flow names.
    let counted = w.packet_ins_not_network_policy().await;
    w.switch
        .current()
        .expect("installer connected")
        .inject(stray_packet_in());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(w.packet_ins_not_network_policy().await, counted);

    // Its connection drops (OVS restarted it): it reconnects by itself, the installer's stays.
    let (connects, installer_connects) = (w.responder.connect_count(), w.switch.connect_count());
    w.responder.disconnect();
    eventually("the responder reconnected", || async {
        w.responder.connect_count() > connects
    })
    .await;
    served(counted + 1).await;
    assert_eq!(w.switch.connect_count(), installer_connects);

    // A restarted flow installer starts its responder again, on a new connection.
    let connects = w.responder.connect_count();
    let before = w.restarts(ActorKind::FlowInstaller).await;
    w.crash(ActorKind::FlowInstaller).await;
    eventually("the flow installer restarted", || async {
        w.restarts(ActorKind::FlowInstaller).await == before + 1
    })
    .await;
    eventually("the responder connected again", || async {
        w.responder.connect_count() > connects
    })
    .await;
    served(1).await;
    let _ = w.supervisor.send(Shutdown).await;
}

/// A switch disconnect (OVS restarted) is followed by a reconnect and a full replay.
#[actix_rt::test]
async fn flows_are_replayed_after_the_switch_reconnects() {
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2"]));
    w.converge().await;
    let connects = w.switch.connect_count();
    w.switch.disconnect_and_clear();
    eventually("reconnected", || async { w.switch.connect_count() > connects }).await;
    eventually("flows replayed", || async { w.flows_converged() }).await;
    let _ = w.supervisor.send(Shutdown).await;
}

#[actix_rt::test]
async fn flows_deleted_under_the_agent_are_repaired_by_the_audit() {
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2"]));
    w.converge().await;
    let connects = w.switch.connect_count();
    assert_eq!(w.datapath.purges(), 0, "nothing repaired yet");
    // Everything gone from the switch, the connection kept (a `del-flows`, `del-groups`,
    // `del-meters` by someone else); the fake cannot report it, so the audit finds it.
    w.switch.current().expect("connected").clear();
    eventually("flows repaired", || async { w.flows_converged() }).await;
    let current = w.switch.current().expect("connected");
    assert!(
        !current.groups().is_empty() && !current.meters().is_empty(),
        "groups and meters back"
    );
    assert_eq!(
        w.switch.connect_count(),
        connects,
        "repaired on the same connection"
    );
    // The installer (on a thread of its own) counts the repair after its commit, which the
    // fake shows first.
    let repairs = || {
        w.deps
            .metrics
            .datapath_repairs
            .with_label_values(&["flows"])
            .get()
    };
    eventually("the repair counted", || async { repairs() >= 1 }).await;
    assert_eq!(repairs(), 1, "one repair counted");
    // Then the datapath flow cache is purged twice, 0.5 s apart.
    eventually("the datapath cache purged twice", || async {
        w.datapath.purges() >= 2
    })
    .await;
    assert_eq!(w.datapath.purges(), 2, "one repair, two purges");
    let _ = w.supervisor.send(Shutdown).await;
}

/// The fakes without the actors, and the uplink procedures' environment over them
/// (a bridge made, records in the returned directory): for tests of single procedures.
async fn procedure_world() -> (World, antrea_vm_agent::uplink::procedures::Env, tempfile::TempDir) {
    use antrea_vm_agent::ovs::ovsdb::{BridgeSpec, Ovsdb};
    use antrea_vm_agent::uplink::procedures::Env;
    use antrea_vm_agent::uplink::store::RecordStore;
    let w = start_world();
    let _ = w.supervisor.send(Shutdown).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Env {
        ovsdb: w.ovsdb.clone(),
        host: w.host.clone(),
        bridge: "br-int".into(),
        store: RecordStore::new(dir.path()),
        port_wait: Duration::from_secs(1),
        stale_deleted: Default::default(),
    };
    let spec = BridgeSpec {
        name: "br-int".into(),
        datapath_type: "netdev".into(),
        table_names: vec![],
    };
    w.ovsdb.ensure_bridge(&spec).await.expect("bridge");
    (w, env, dir)
}

/// A failure after the addresses were already moved (upstream leaves the host without them,
/// D11) rolls everything back: name, MTU, addresses, routes, no ports, no record.
#[actix_rt::test]
async fn a_failed_attach_is_rolled_back_with_addresses_and_routes() {
    use antrea_vm_agent::host::HostNet;
    use antrea_vm_agent::messages::EntityRef;
    use antrea_vm_agent::uplink::procedures;
    use antrea_vm_agent::uplink::store::RecordStore;

    let (w, env, dir) = procedure_world().await;
    let before = w.host.snapshot().link("eth0").cloned().expect("eth0");
    let link = w.host.link_by_name("eth0").await.expect("netlink").expect("eth0");
    // The first route added is on the internal port, after every address moved there.
    w.host.fail_next("add_route", "injected route failure");
    let entity = EntityRef {
        namespace: "vm-ns".into(),
        name: "vm1-3e616".into(),
    };
    let ips = ["10.0.0.2".parse().expect("ip")];
    let err = procedures::attach(&env, &link, &entity, &ips)
        .await
        .expect_err("attach must fail");
    assert!(err.to_string().contains("add route"), "{err}");
    let calls = w.host.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("del_address") && c.ends_with("ok")),
        "the failure came after addresses left the NIC: {calls:#?}"
    );

    let snap = w.host.snapshot();
    assert!(snap.link("eth0~").is_none(), "uplink renamed back");
    let after = snap.link("eth0").expect("eth0 is back");
    assert_eq!(after.link.mac, before.link.mac);
    assert_eq!(after.link.mtu, before.link.mtu);
    let addrs = |l: &antrea_vm_agent::host::fake::FakeLinkState| {
        let mut a: Vec<String> = l.addresses.iter().map(|a| a.addr.to_string()).collect();
        a.sort();
        a
    };
    assert_eq!(addrs(after), addrs(&before), "addresses restored");
    let defaults = |l: &antrea_vm_agent::host::fake::FakeLinkState| {
        l.routes
            .iter()
            .filter(|r| r.is_default())
            .map(|r| (r.gateway, r.metric, r.protocol))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        defaults(after),
        defaults(&before),
        "default routes restored with metric and protocol"
    );
    assert!(w.ovsdb.ports("br-int").is_empty(), "no ports left in OVSDB");
    assert!(
        RecordStore::new(dir.path()).load_all().0.is_empty(),
        "no record left"
    );
}

/// An agent started while ovsdb-server is up but ovs-vswitchd is not (no ofports yet) must not
/// give up on the attached interface: recovery is retried until OVS is ready, then the
/// interface is adopted without touching the host.
#[actix_rt::test]
async fn recovery_waits_for_ofports_then_adopts() {
    let mut w = start_world();
    w.source.set(external_node(&["10.0.0.2", "fd00::2"]));
    w.converge().await;
    let host_port = w
        .ovsdb
        .ports("br-int")
        .iter()
        .find(|p| p.name == "eth0")
        .and_then(|p| p.ofport);
    let uplink_port = w
        .ovsdb
        .ports("br-int")
        .iter()
        .find(|p| p.name == "eth0~")
        .and_then(|p| p.ofport);
    assert!(w.ovsdb.set_ofport("eth0", 0) && w.ovsdb.set_ofport("eth0~", 0));
    let mutations = w.host.mutation_count();
    w.restart_agent().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let flows = w.peers().await.flows.expect("flow installer");
    assert!(
        flows.send(GetInstalledFlows).await.expect("alive").is_empty(),
        "no flows are synced while the interface view is unknown"
    );
    assert!(w.ovsdb.set_ofport("eth0", host_port.expect("ofport")));
    assert!(w.ovsdb.set_ofport("eth0~", uplink_port.expect("ofport")));
    w.converge().await;
    assert_eq!(w.host.mutation_count(), mutations, "adopted, not re-attached");
    let _ = w.supervisor.send(Shutdown).await;
}

/// Renaming the interface in the ExternalNode (the name is then only a label) gives it a new
/// ExternalEntity name: OVSDB and the published view change, the host does not.
#[actix_rt::test]
async fn renaming_the_interface_updates_its_identity_without_a_flap() {
    use antrea_vm_agent::k8s::external_node::external_entity_name;
    let w = start_world();
    w.source.set(external_node(&["10.0.0.2"]));
    w.converge().await;
    let mutations = w.host.mutation_count();
    let renamed = external_entity_name("vm1", "nic-a");
    w.source.set(external_node_named("nic-a", &["10.0.0.2"]));
    eventually("entity name updated in OVSDB", || async {
        w.ovsdb
            .ports("br-int")
            .iter()
            .any(|p| p.name == "eth0" && p.external_ids.get("entity-name") == Some(&renamed))
    })
    .await;
    w.converge().await;
    assert_eq!(w.host.mutation_count(), mutations, "no change to the host");
    let _ = w.supervisor.send(Shutdown).await;
}

/// A NIC that vanishes in the middle of its attach: a clear error naming that interface, the
/// other interface of the ExternalNode attaches normally, nothing panics.
#[actix_rt::test]
async fn an_interface_vanishing_mid_attach_fails_alone() {
    let w = start_world();
    w.host.add_link("eth1", "02:11:22:33:44:66", 1500);
    w.host
        .seed_address("eth1", &address("10.1.0.2/24"))
        .expect("seed eth1");
    // The NIC disappears right after its uplink port is created (hot-unplug).
    // OVS then reports the interface with ofport -1 ("No such device").
    let h = w.host.clone();
    let db = w.ovsdb.clone();
    w.ovsdb.on_port_created(Box::new(move |spec| {
        if spec.name == "eth1~" {
            h.remove_link("eth1~");
            db.set_ofport("eth1~", -1);
        }
    }));
    let yaml = "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\nmetadata: {name: vm1, namespace: vm-ns}\n\
                spec: {interfaces: [{name: eth0, ips: [\"10.0.0.2\", \"fd00::2\"]}, {name: eth1, ips: [\"10.1.0.2\"]}]}\n";
    let obj: ExternalNodeObject = serde_norway::from_str(yaml).expect("test yaml");
    w.source.set(SourceEvent::Present(Box::new(obj)));
    eventually("eth0 attached", || async { w.attached() }).await;
    let im = w.peers().await.interfaces.expect("interface manager");
    eventually("an error naming eth1", || async {
        let status = im.send(StatusQuery).await.expect("alive");
        status
            .detail
            .interface_manager()
            .is_some_and(|s| s.errors.iter().any(|m| m.message.contains("eth1")))
    })
    .await;
    let status = im.send(StatusQuery).await.expect("alive");
    let attached: Vec<&str> = status
        .detail
        .interface_manager()
        .map(|s| s.interfaces.iter().map(|i| i.name.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(attached, vec!["eth0"], "only eth0 is attached");
    assert!(
        w.ovsdb
            .ports("br-int")
            .iter()
            .all(|p| !p.name.starts_with("eth1")),
        "no eth1 ports left"
    );
    let _ = w.supervisor.send(Shutdown).await;
}

/// A detach that was interrupted (its record says so) is finished by the next reconcile pass,
/// not only at the next start.
#[actix_rt::test]
async fn an_interrupted_detach_is_finished_by_the_next_pass() {
    use antrea_vm_agent::host::HostNet;
    use antrea_vm_agent::messages::EntityRef;
    use antrea_vm_agent::uplink::procedures;
    use antrea_vm_agent::uplink::store::{Phase, RecordStore, Step};

    let (w, env, dir) = procedure_world().await;
    let store = RecordStore::new(dir.path());
    let link = w.host.link_by_name("eth0").await.expect("netlink").expect("eth0");
    let entity = EntityRef {
        namespace: "vm-ns".into(),
        name: "vm1-3e616".into(),
    };
    let attachment = procedures::attach(&env, &link, &entity, &["10.0.0.2".parse().expect("ip")])
        .await
        .expect("attach");
    // As if a detach had been cut short right after it started.
    let mut record = attachment.record.clone();
    record.phase = Phase::Detaching;
    record.step = Step::DeletePorts;
    store.save(&record).expect("save");

    let errors = procedures::retry_unfinished(&env, &Default::default()).await;
    assert!(errors.is_empty(), "{errors:?}");
    let snap = w.host.snapshot();
    assert!(snap.link("eth0~").is_none(), "renamed back");
    let eth0 = snap.link("eth0").expect("eth0");
    assert!(
        eth0.addresses.iter().any(|a| a.addr.to_string() == "10.0.0.2/24"),
        "addresses back"
    );
    assert!(
        eth0.routes
            .iter()
            .any(|r| r.is_default() && r.metric == Some(100)),
        "default route back"
    );
    assert!(w.ovsdb.ports("br-int").is_empty());
    assert!(store.load_all().0.is_empty(), "record removed");
}
