//! The lab harness on its own (no agent): topology, connectivity before any OVS attachment, the
//! private OVS, and the userspace-datapath fixes (uplink isolation) with a hand-made attach that does
//! what the agent does.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::time::Duration;

use support::*;

#[test]
fn lab_has_connectivity_and_ovs() {
    let lab = Lab::new();

    // The VM as the agent will find it.
    assert_eq!(lab.vm_addrs(NIC), ["10.99.0.2/24", "fd00:99::2/64"]);
    let eth0 = lab.vm_link(NIC).expect("eth0 exists");
    assert_eq!(eth0.mtu, VM_MTU);
    assert!(eth0.up && !eth0.noarp);
    assert_eq!(lab.vm_link_driver(NIC).as_deref(), Some("veth"));
    let routes = lab.vm_routes();
    assert!(
        routes.contains(&"default via 10.99.0.1 dev eth0 proto dhcp metric 100".to_string()),
        "{routes:?}"
    );
    assert!(
        routes
            .iter()
            .any(|r| r.starts_with("default via fd00:99::1 dev eth0 metric 1024")),
        "{routes:?}"
    );

    // Both directions, both families, before any OVS attachment.
    for (from_ext, ip) in [(true, VM_IP4), (true, VM_IP6), (false, EXT_IP4), (false, EXT_IP6)] {
        let r = if from_ext {
            lab.ping_from_ext(ip, 3)
        } else {
            lab.ping_from_vm(ip, 3)
        };
        assert!(
            r.all_received(),
            "ping {ip} (from ext: {from_ext}):\n{}",
            r.output
        );
    }
    assert!(lab.tcp_from_ext(VM_IP4, 8080));
    assert!(lab.tcp_from_ext(VM_IP6, 8080));
    assert!(lab.tcp_from_vm(EXT_IP4, 8081));
    assert!(lab.tcp_from_vm(EXT_IP6, 8081));
    // Nobody listens on the other side: a connection must not count as success.
    assert!(!lab.ext(&format!("nc -n -z -w 2 {VM_IP4} 9")).status.success());

    // A continuous ping sees every reply while nothing changes.
    let flood = lab.start_ping_flood(true, VM_IP4, 20);
    assert!(lab.ping_from_vm(EXT_IP4, 5).all_received());
    let (sent, received) = flood.finish();
    assert!(
        sent >= 1 && received == sent,
        "flood: sent {sent}, received {received}"
    );

    // OVS is up in the VM namespace with its sockets in the lab run dir.
    let show = lab.ovs_vsctl(&["show"]);
    assert!(show.contains("ovs_version"), "{show}");
    assert!(lab.db_sock().exists());
    assert!(lab.daemon_running("ovsdb-server") && lab.daemon_running("ovs-vswitchd"));
}

#[test]
fn ovs_restart_and_crash() {
    let lab = Lab::new();
    lab.ovs_vsctl(&[
        "add-br",
        BRIDGE,
        "--",
        "set",
        "bridge",
        BRIDGE,
        "datapath_type=netdev",
    ]);
    wait_until(Duration::from_secs(10), "br-int.mgmt in the run dir", || {
        lab.mgmt_sock().exists()
    });
    assert_eq!(lab.dump_flows(), ["priority=0 actions=NORMAL"]);
    // The bridge is a tap in the VM namespace (the datapath runs there).
    assert!(lab.vm_link_exists(BRIDGE));

    lab.restart_ovs();
    assert!(lab.ovs_vsctl(&["list-br"]).lines().any(|b| b == BRIDGE));
    wait_until(
        Duration::from_secs(10),
        "the bridge to answer OpenFlow after a restart",
        || lab.try_dump_flows().is_ok(),
    );

    lab.kill_vswitchd();
    assert!(!lab.daemon_running("ovs-vswitchd"));
    assert!(lab.try_dump_flows().is_err());
    lab.start_vswitchd();
    wait_until(
        Duration::from_secs(10),
        "the bridge to answer OpenFlow after a crash",
        || lab.try_dump_flows().is_ok(),
    );

    lab.kill_ovsdb();
    assert!(!lab.ovs_vsctl_output(&["--no-wait", "list-br"]).status.success());
    lab.start_ovsdb();
    assert!(lab.ovs_vsctl(&["list-br"]).contains(BRIDGE));
}

/// What the agent does on attach, by hand: rename, two OVS ports, move MTU, addresses and routes.
fn attach_by_hand(lab: &Lab) {
    let db = format!("--db=unix:{}", lab.db_sock().display());
    lab.vm_ok(&format!(
        "set -e\n\
         MAC=$(cat /sys/class/net/eth0/address)\n\
         ip link set dev eth0 down\n\
         ip link set dev eth0 name 'eth0~'\n\
         ip link set dev 'eth0~' up\n\
         ovs-vsctl {db} add-br br-int -- set bridge br-int datapath_type=netdev protocols=OpenFlow10,OpenFlow15\n\
         ovs-vsctl {db} add-port br-int 'eth0~' -- add-port br-int eth0 -- set interface eth0 type=internal \"mac=\\\"$MAC\\\"\"\n\
         i=0; while ! ip link show dev eth0 >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done\n\
         ip addr flush dev 'eth0~'\n\
         ip link set dev eth0 mtu 1400 up\n\
         ip addr add 10.99.0.2/24 dev eth0\n\
         ip addr add fd00:99::2/64 dev eth0 nodad\n\
         ip route add default via 10.99.0.1 dev eth0 proto dhcp metric 100\n\
         ip -6 route add default via fd00:99::1 dev eth0 metric 1024"
    ));
}

/// What the agent does on detach, by hand.
fn detach_by_hand(lab: &Lab) {
    let db = format!("--db=unix:{}", lab.db_sock().display());
    lab.vm_ok(&format!(
        "set -e\n\
         ovs-vsctl {db} del-port br-int eth0 -- del-port br-int 'eth0~'\n\
         i=0; while ip link show dev eth0 >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done\n\
         ip link set dev 'eth0~' down\n\
         ip link set dev 'eth0~' name eth0\n\
         ip link set dev eth0 up\n\
         ip addr add 10.99.0.2/24 dev eth0\n\
         ip addr add fd00:99::2/64 dev eth0 nodad\n\
         ip route add default via 10.99.0.1 dev eth0 proto dhcp metric 100\n\
         ip -6 route add default via fd00:99::1 dev eth0 metric 1024"
    ));
}

#[test]
fn uplink_isolation_makes_ovs_the_only_path() {
    let lab = Lab::new();
    let mac = lab.vm_link(NIC).expect("eth0").mac;
    attach_by_hand(&lab);
    lab.isolate_uplink();
    assert!(lab.vm_link(UPLINK).expect("eth0~").noarp);
    assert_eq!(lab.vm_link(NIC).expect("internal eth0").mac, mac);

    // Exactly one answer per request: only the OVS path answers.
    for ip in [VM_IP4, VM_IP6] {
        let r = lab.ping_from_ext(ip, 3);
        assert!(r.all_received(), "ping {ip} through OVS:\n{}", r.output);
    }
    for ip in [EXT_IP4, EXT_IP6] {
        let r = lab.ping_from_vm(ip, 3);
        assert!(
            r.all_received(),
            "ping {ip} from the VM through OVS:\n{}",
            r.output
        );
    }

    // A drop flow in OVS really blocks (the VM's stack does not answer behind OVS's back), and TCP
    // through the userspace datapath works (checksum offload off).
    let mgmt = format!("unix:{}", lab.mgmt_sock().display());
    lab.vm_ok(&format!(
        "ovs-ofctl add-flow {mgmt} 'priority=100,tcp,nw_dst=10.99.0.2,tp_dst=22,actions=drop' && \
         ovs-ofctl add-flow {mgmt} 'priority=100,tcp6,ipv6_dst=fd00:99::2,tp_dst=22,actions=drop'"
    ));
    for ip in [VM_IP4, VM_IP6] {
        assert!(
            !lab.tcp_from_ext(ip, 22),
            "port 22 on {ip} must be blocked by OVS"
        );
        assert!(lab.tcp_from_ext(ip, 80), "port 80 on {ip} must pass through OVS");
    }
    assert!(lab.tcp_from_vm(EXT_IP4, 80));
    assert!(lab.tcp_from_vm(EXT_IP6, 80));
    assert!(lab
        .dump_flows()
        .iter()
        .any(|f| f.contains("tp_dst=22") && f.contains("actions=drop")));

    // Isolation is idempotent.
    lab.isolate_uplink();
    assert!(lab.uplink_isolated());

    // Detach: the restored NIC is neither filtered nor without ARP.
    lab.unisolate_uplink();
    detach_by_hand(&lab);
    let eth0 = lab.vm_link(NIC).expect("restored eth0");
    assert!(!eth0.noarp && eth0.up);
    assert_eq!(eth0.mac, mac);
    assert_eq!(lab.vm_link_driver(NIC).as_deref(), Some("veth"));
    for ip in [VM_IP4, VM_IP6] {
        let r = lab.ping_from_ext(ip, 3);
        assert!(r.all_received(), "ping {ip} after the detach:\n{}", r.output);
        assert!(lab.tcp_from_ext(ip, 22), "port 22 on {ip} after the detach");
    }

    // Attach again: isolation applies to the new eth0~.
    attach_by_hand_again(&lab);
    lab.isolate_uplink();
    let r = lab.ping_from_ext(VM_IP4, 3);
    assert!(r.all_received(), "ping after a second attach:\n{}", r.output);
}

/// A second attach: the bridge already exists.
fn attach_by_hand_again(lab: &Lab) {
    let db = format!("--db=unix:{}", lab.db_sock().display());
    lab.vm_ok(&format!(
        "set -e\n\
         MAC=$(cat /sys/class/net/eth0/address)\n\
         ip link set dev eth0 down\n\
         ip link set dev eth0 name 'eth0~'\n\
         ip link set dev 'eth0~' up\n\
         ovs-vsctl {db} add-port br-int 'eth0~' -- add-port br-int eth0 -- set interface eth0 type=internal \"mac=\\\"$MAC\\\"\"\n\
         i=0; while ! ip link show dev eth0 >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done\n\
         ip addr flush dev 'eth0~'\n\
         ip link set dev eth0 mtu 1400 up\n\
         ip addr add 10.99.0.2/24 dev eth0\n\
         ip addr add fd00:99::2/64 dev eth0 nodad\n\
         ip route add default via 10.99.0.1 dev eth0 proto dhcp metric 100"
    ));
}

#[test]
fn two_labs_side_by_side() {
    let a = Lab::new();
    let b = Lab::new();
    assert_ne!(a.vm_ns(), b.vm_ns());
    assert_ne!(a.run_dir(), b.run_dir());
    // Same addresses, separate worlds.
    assert!(a.ping_from_ext(VM_IP4, 2).all_received());
    assert!(b.ping_from_ext(VM_IP4, 2).all_received());
    a.ovs_vsctl(&[
        "add-br",
        "br-a",
        "--",
        "set",
        "bridge",
        "br-a",
        "datapath_type=netdev",
    ]);
    assert!(!b.ovs_vsctl(&["list-br"]).contains("br-a"));

    // Dropping one lab leaves the other intact.
    let a_ns = a.vm_ns().to_string();
    drop(a);
    assert!(
        !std::path::Path::new("/run/netns").join(&a_ns).exists(),
        "{a_ns} still exists"
    );
    assert!(b.ping_from_ext(VM_IP6, 2).all_received());
}
