//! Lab tests of the OVSDB client (the `ovs-ovsdb` crate) against a real ovsdb-server and
//! ovs-vswitchd ([`PrivateOvs`]): bridges, ports, external_ids, the change monitor,
//! reconnection and timeouts. They need root, so they live in the agent beside the lab harness,
//! not in the crate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ovs_ovsdb::{BridgeSpec, Ovsdb, OvsdbClient, OvsdbError, PortSpec};

use super::testutil::PrivateOvs;

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

/// Unquotes an `ovs-vsctl get` string.
fn unq(s: String) -> String {
    s.trim_matches('"').to_string()
}

async fn ensure(c: &OvsdbClient, ovs: &PrivateOvs, spec: &BridgeSpec) {
    if let Err(e) = c.ensure_bridge(spec).await {
        panic!("ensure_bridge: {e}\n{}", ovs.logs());
    }
}

#[tokio::test]
async fn lab_ensure_bridge_is_stable_and_sets_everything() {
    let ovs = PrivateOvs::start().expect("private OVS");
    let c = OvsdbClient::new(ovs.db_sock());
    let spec = bridge_spec(&[(0, "Classification"), (1, "SpoofGuard"), (2, "Scratch")]);
    ensure(&c, &ovs, &spec).await;
    let get = |what: &str| ovs.vsctl(&["get", "bridge", "br-int", what]).expect("vsctl get");
    let dpid = unq(get("other_config:datapath-id"));
    assert_eq!(dpid.len(), 16, "{dpid}");
    assert!(dpid.starts_with("0000"));
    // ovs-vswitchd adopted it, so the bridge's OpenFlow datapath id is stable too.
    assert_eq!(unq(get("datapath_id")), dpid);
    assert_eq!(get("fail_mode"), "secure");
    assert_eq!(get("protocols"), "[OpenFlow10, OpenFlow15]");
    assert_eq!(unq(get("datapath_type")), "netdev");
    let features = ovs
        .ofctl("br-int", &["-O", "OpenFlow15", "dump-table-features"], &[])
        .expect("ofctl");
    assert!(features.contains("table 0 (\"Classification\")"), "{features}");
    assert!(features.contains("table 1 (\"SpoofGuard\")"), "{features}");
    assert!(features.contains("table 2 (\"Scratch\")"), "{features}");
    let flow_tables = get("flow_tables");

    // Twice: same datapath-id, same Flow_Table rows.
    ensure(&c, &ovs, &spec).await;
    assert_eq!(unq(get("other_config:datapath-id")), dpid);
    assert_eq!(get("flow_tables"), flow_tables);

    // A fresh client (agent restart) keeps it too; renamed/dropped/foreign tables.
    ovs.vsctl(&[
        "--",
        "--id=@ft",
        "create",
        "Flow_Table",
        "name=Admin",
        "--",
        "set",
        "bridge",
        "br-int",
        "flow_tables:9=@ft",
    ])
    .expect("foreign table");
    let c2 = OvsdbClient::new(ovs.db_sock());
    let spec2 = bridge_spec(&[(0, "Classification"), (1, "SpoofGuardRenamed")]);
    ensure(&c2, &ovs, &spec2).await;
    assert_eq!(unq(get("other_config:datapath-id")), dpid);
    assert_eq!(unq(get("datapath_id")), dpid);
    let features = ovs
        .ofctl("br-int", &["-O", "OpenFlow15", "dump-table-features"], &[])
        .expect("ofctl");
    assert!(features.contains("table 1 (\"SpoofGuardRenamed\")"), "{features}");
    assert!(!features.contains("Scratch"), "{features}");
    assert!(features.contains("table 9 (\"Admin\")"), "{features}");
    assert_eq!(
        ovs.vsctl(&["--columns=name", "list", "Flow_Table"])
            .expect("list")
            .lines()
            .filter(|l| !l.is_empty())
            .count(),
        3
    );

    // A bridge made by someone else (no datapath-id yet) is adopted: settings fixed, id added once.
    ovs.vsctl(&[
        "add-br",
        "br-other",
        "--",
        "set",
        "bridge",
        "br-other",
        "datapath_type=netdev",
    ])
    .expect("add-br");
    let other = BridgeSpec {
        name: "br-other".into(),
        ..spec2.clone()
    };
    ensure(&c2, &ovs, &other).await;
    let dpid_other = unq(ovs
        .vsctl(&["get", "bridge", "br-other", "other_config:datapath-id"])
        .expect("get"));
    assert_ne!(dpid_other, dpid);
    ensure(&c2, &ovs, &other).await;
    assert_eq!(
        unq(ovs
            .vsctl(&["get", "bridge", "br-other", "other_config:datapath-id"])
            .expect("get")),
        dpid_other
    );
    assert_eq!(
        ovs.vsctl(&["get", "bridge", "br-other", "fail_mode"])
            .expect("get"),
        "secure"
    );
}

#[tokio::test]
async fn lab_watch_reports_bridge_and_port_changes_and_ends_with_the_server() {
    async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>, what: &str) -> Option<()> {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no wake-up for {what}"))
    }
    let ovs = PrivateOvs::start().expect("private OVS");
    let c = OvsdbClient::new(ovs.db_sock());
    let mut changes = c.watch_changes().await.expect("watch");
    assert_eq!(next(&mut changes, "the start").await, Some(()));
    ovs.vsctl(&["add-br", "br-w"]).expect("add-br");
    assert_eq!(next(&mut changes, "add-br").await, Some(()));
    while tokio::time::timeout(Duration::from_millis(300), changes.recv())
        .await
        .is_ok()
    {}
    ovs.vsctl(&["set", "bridge", "br-w", "external_ids:k=v"])
        .expect("set");
    assert_eq!(next(&mut changes, "external_ids").await, Some(()));
    while tokio::time::timeout(Duration::from_millis(300), changes.recv())
        .await
        .is_ok()
    {}
    ovs.vsctl(&["del-br", "br-w"]).expect("del-br");
    assert_eq!(next(&mut changes, "del-br").await, Some(()));
    ovs.stop_ovsdb().expect("stop ovsdb-server");
    let mut ended = false;
    for _ in 0..20 {
        if let Ok(None) = tokio::time::timeout(Duration::from_secs(1), changes.recv()).await {
            ended = true;
            break;
        }
    }
    assert!(ended, "the watch ends with the server");
}

#[tokio::test]
async fn lab_ports_and_external_ids() {
    let ovs = PrivateOvs::start().expect("private OVS");
    let c = OvsdbClient::new(ovs.db_sock());
    ensure(&c, &ovs, &bridge_spec(&[(0, "Classification")])).await;

    // Bridge external_ids: one key at a time, others untouched.
    ovs.vsctl(&["set", "bridge", "br-int", "external_ids:keep=me"])
        .expect("vsctl");
    assert_eq!(
        c.bridge_external_id("br-int", "roundNum").await.expect("get"),
        None
    );
    c.set_bridge_external_id("br-int", "roundNum", "1")
        .await
        .expect("set");
    c.set_bridge_external_id("br-int", "roundNum", "2")
        .await
        .expect("set");
    assert_eq!(
        c.bridge_external_id("br-int", "roundNum").await.expect("get"),
        Some("2".into())
    );
    assert_eq!(
        unq(ovs
            .vsctl(&["get", "bridge", "br-int", "external_ids:keep"])
            .expect("get")),
        "me"
    );
    assert!(matches!(
        c.bridge_external_id("br-nope", "k").await,
        Err(OvsdbError::NoBridge(_))
    ));
    assert!(matches!(
        c.set_bridge_external_id("br-nope", "k", "v").await,
        Err(OvsdbError::NoBridge(_))
    ));

    // Internal port with MAC and external_ids.
    let host = PortSpec {
        name: "eth0".into(),
        iface_type: "internal".into(),
        mac: Some("02:11:22:33:44:55".into()),
        external_ids: ids(&[("antrea-type", "host"), ("ip-address", "10.0.0.2")]),
    };
    let uuid = c.create_port("br-int", &host).await.expect("create_port");
    assert_eq!(ovs.vsctl(&["get", "port", "eth0", "_uuid"]).expect("get"), uuid);
    assert_eq!(
        ovs.vsctl(&["get", "port", "eth0", "external_ids"]).expect("get"),
        r#"{antrea-type=host, ip-address="10.0.0.2"}"#
    );
    let ofport = c
        .wait_ofport("eth0", Duration::from_secs(5))
        .await
        .expect("ofport");
    assert!(ofport > 0);
    assert_eq!(
        ovs.vsctl(&["get", "interface", "eth0", "ofport"]).expect("get"),
        ofport.to_string()
    );
    let link = ovs
        .netns_exec(&["ip", "link", "show", "eth0"])
        .expect("internal netdev exists");
    assert!(link.contains("02:11:22:33:44:55"), "{link}");
    let dup = c.create_port("br-int", &host).await;
    assert!(
        matches!(&dup, Err(OvsdbError::Transaction(m)) if m.contains("already exists")),
        "{dup:?}"
    );
    assert!(matches!(
        c.create_port("br-nope", &host).await,
        Err(OvsdbError::NoBridge(_))
    ));

    // A system port whose device does not exist: ofport -1 with the interface error.
    let uplink = PortSpec {
        name: "nodev0~".into(),
        iface_type: String::new(),
        mac: None,
        external_ids: ids(&[("antrea-type", "uplink")]),
    };
    let uplink_uuid = c.create_port("br-int", &uplink).await.expect("create uplink");
    let e = c.wait_ofport("nodev0~", Duration::from_secs(5)).await;
    assert!(
        matches!(&e, Err(OvsdbError::Ofport { why, .. }) if why.contains("No such device")),
        "{e:?}"
    );
    assert!(matches!(
        c.wait_ofport("missing", Duration::from_secs(1)).await,
        Err(OvsdbError::NoPort(_))
    ));

    let ports = c.list_ports("br-int").await.expect("list");
    assert_eq!(ports.len(), 2, "{ports:?}");
    let p = &ports[0];
    assert_eq!(
        (p.uuid.as_str(), p.name.as_str(), p.iface_name.as_str()),
        (uuid.as_str(), "eth0", "eth0")
    );
    assert_eq!(p.iface_type, "internal");
    assert_eq!(p.ofport, Some(i64::from(ofport)));
    assert_eq!(p.mac.as_deref(), Some("02:11:22:33:44:55"));
    assert_eq!(p.error, None);
    assert_eq!(p.external_ids, host.external_ids);
    let u = &ports[1];
    assert_eq!(
        (u.uuid.as_str(), u.name.as_str(), u.iface_type.as_str()),
        (uplink_uuid.as_str(), "nodev0~", "")
    );
    assert_eq!(u.ofport, Some(-1));
    assert!(
        u.error.as_deref().is_some_and(|e| e.contains("No such device")),
        "{u:?}"
    );

    // Replace a port's external_ids.
    let new_ids = ids(&[("antrea-type", "host"), ("entity-name", "vm1")]);
    c.set_port_external_ids("eth0", &new_ids).await.expect("set ids");
    assert_eq!(
        ovs.vsctl(&["get", "port", "eth0", "external_ids"]).expect("get"),
        "{antrea-type=host, entity-name=vm1}"
    );
    assert!(matches!(
        c.set_port_external_ids("missing", &new_ids).await,
        Err(OvsdbError::NoPort(_))
    ));

    // Delete: Port and Interface rows go, the netdev goes, a second delete is fine.
    c.delete_port("br-int", "eth0").await.expect("delete");
    c.delete_port("br-int", "eth0").await.expect("delete again");
    assert_eq!(
        ovs.vsctl(&["list-ports", "br-int"]).expect("list-ports"),
        "nodev0~"
    );
    assert!(
        ovs.vsctl(&["get", "interface", "eth0", "name"]).is_err(),
        "interface row garbage-collected"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ovs.netns_exec(&["ip", "link", "show", "eth0"]).is_ok() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ovs.netns_exec(&["ip", "link", "show", "eth0"]).is_err(),
        "internal netdev removed"
    );
    assert_eq!(c.list_ports("br-int").await.expect("list").len(), 1);
    assert!(matches!(
        c.list_ports("br-nope").await,
        Err(OvsdbError::NoBridge(_))
    ));
}

#[tokio::test]
async fn lab_reconnects_after_ovsdb_restart_and_times_out_on_a_hung_server() {
    let ovs = PrivateOvs::start().expect("private OVS");
    let c = Arc::new(OvsdbClient::new(ovs.db_sock()).with_timeout(Duration::from_secs(2)));
    ensure(&c, &ovs, &bridge_spec(&[])).await;
    c.set_bridge_external_id("br-int", "roundNum", "5")
        .await
        .expect("set");

    // Server gone: an error, not a hang.
    ovs.stop_ovsdb().expect("stop ovsdb");
    let e = c.bridge_external_id("br-int", "roundNum").await;
    assert!(e.is_err(), "{e:?}");
    // Back (same db file): the same client heals.
    ovs.start_ovsdb().expect("start ovsdb");
    assert_eq!(
        c.bridge_external_id("br-int", "roundNum")
            .await
            .expect("after restart"),
        Some("5".into())
    );

    // Restart between two calls, nothing in between: the first call after it already works.
    ovs.stop_ovsdb().expect("stop ovsdb");
    ovs.start_ovsdb().expect("start ovsdb");
    assert_eq!(
        c.bridge_external_id("br-int", "roundNum")
            .await
            .expect("transparent"),
        Some("5".into())
    );
    // And writes work on the new connection (vswitchd reconnected too: ofport assigned).
    let p = PortSpec {
        name: "p0".into(),
        iface_type: "internal".into(),
        mac: None,
        external_ids: ids(&[]),
    };
    c.create_port("br-int", &p).await.expect("create after restart");
    assert!(
        c.wait_ofport("p0", Duration::from_secs(30))
            .await
            .expect("ofport")
            > 0
    );

    // Many concurrent callers share the connection.
    let calls = (0..20).map(|i| {
        let c = c.clone();
        tokio::spawn(async move {
            c.set_bridge_external_id("br-int", &format!("k{i}"), &i.to_string())
                .await?;
            c.bridge_external_id("br-int", &format!("k{i}")).await
        })
    });
    for (i, h) in calls.enumerate() {
        assert_eq!(h.await.expect("join").expect("call"), Some(i.to_string()));
    }

    // A hung server: the call times out, and the client recovers once it answers again.
    ovs.freeze_ovsdb(true).expect("SIGSTOP");
    let e = c.list_ports("br-int").await;
    ovs.freeze_ovsdb(false).expect("SIGCONT");
    assert!(matches!(e, Err(OvsdbError::Timeout(_))), "{e:?}");
    assert_eq!(c.list_ports("br-int").await.expect("after thaw").len(), 1);
}

#[tokio::test]
async fn lab_datapath_id_wait_times_out_without_vswitchd() {
    let ovs = PrivateOvs::start().expect("private OVS");
    ovs.stop_vswitchd().expect("stop vswitchd");
    let c = OvsdbClient::new(ovs.db_sock());
    let e = c.ensure_bridge(&bridge_spec(&[])).await;
    assert!(
        matches!(&e, Err(OvsdbError::Timeout(m)) if m.contains("datapath_id")),
        "{e:?}"
    );
    // The bridge row itself was written, with its datapath-id.
    let dpid = unq(ovs
        .vsctl(&["--no-wait", "get", "bridge", "br-int", "other_config:datapath-id"])
        .expect("get"));
    assert_eq!(dpid.len(), 16);
}
