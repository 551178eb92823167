//! Multi-interface ExternalNodes in the lab: two NICs attached to one ExternalNode, each with its
//! own uplink, internal port, flows and ExternalEntity; updates to one interface (an IP added,
//! the interface removed from the list) leave the other untouched, without losing a packet.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::time::Duration;

use support::*;

fn ovs_get(lab: &Lab, args: &[&str]) -> String {
    lab.ovs_vsctl(args).trim().trim_matches('"').to_string()
}

fn non_ip_pair_flows(lab: &Lab) -> usize {
    lab.dump_flows()
        .iter()
        .filter(|f| f.contains("table=NonIP, priority=200"))
        .count()
}

#[test]
fn two_interfaces_attach_update_and_detach_independently() {
    let lab = Lab::new();
    lab.add_second_nic();
    let eth1_before = (lab.vm_link(NIC2).expect("eth1"), lab.vm_addrs(NIC2));
    let config = lab.write_config("");
    lab.write_external_node_interfaces(&[(NIC, &[VM_IP4]), (NIC2, &[VM2_IP4])]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    lab.isolate_second_uplink();
    wait_until(
        Duration::from_secs(30),
        "both interfaces attached with their flows",
        || {
            lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
                && lab.vm_addrs(NIC2).iter().any(|a| a.starts_with(VM2_IP4))
                && non_ip_pair_flows(&lab) == 4
        },
    );
    // Each interface is its own ExternalEntity (`<node>-<sha1(name)[..5]>`).
    assert_eq!(
        ovs_get(&lab, &["get", "Port", NIC, "external_ids:entity-name"]),
        "vm1-3e616"
    );
    assert_ne!(
        ovs_get(&lab, &["get", "Port", NIC2, "external_ids:entity-name"]),
        "vm1-3e616"
    );
    assert_eq!(
        ovs_get(&lab, &["get", "Port", NIC2, "external_ids:uplink-name"]),
        UPLINK2
    );
    for ip in [VM_IP4, VM_IP6, VM2_IP4, VM2_IP6] {
        assert!(lab.ping_from_ext(ip, 2).all_received(), "ping {ip} through OVS");
    }
    assert!(lab.tcp_from_ext(VM2_IP4, 6001), "TCP on the second interface");

    // An IP added to eth0's entry: identity updated, no flap on either interface.
    let eth0_index = lab.vm_link(NIC).expect("eth0").index;
    let eth1_index = lab.vm_link(NIC2).expect("eth1").index;
    let flood = lab.start_ping_flood(true, VM2_IP4, 50);
    lab.write_external_node_interfaces(&[(NIC, &[VM_IP4, VM_IP6]), (NIC2, &[VM2_IP4])]);
    wait_until(
        Duration::from_secs(20),
        "eth0's ip-address external_id updated",
        || ovs_get(&lab, &["get", "Port", NIC, "external_ids:ip-address"]) == format!("{VM_IP4},{VM_IP6}"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let (sent, received) = flood.finish();
    assert!(sent >= 5, "the flood ran");
    assert_eq!(received, sent, "no loss on eth1 while eth0 was updated");
    assert_eq!(
        lab.vm_link(NIC).expect("eth0").index,
        eth0_index,
        "eth0 not re-attached"
    );
    assert_eq!(
        lab.vm_link(NIC2).expect("eth1").index,
        eth1_index,
        "eth1 not re-attached"
    );

    // eth1 removed from the list: restored exactly, while eth0 keeps forwarding.
    let flood = lab.start_ping_flood(true, VM_IP4, 50);
    lab.unisolate_second_uplink();
    lab.write_external_node_interfaces(&[(NIC, &[VM_IP4, VM_IP6])]);
    wait_until(Duration::from_secs(30), "eth1 restored", || {
        !lab.vm_link_exists(UPLINK2) && lab.vm_link_driver(NIC2).as_deref() == Some("veth")
    });
    wait_until(Duration::from_secs(10), "eth1 has its addresses", || {
        lab.vm_addrs(NIC2) == eth1_before.1
    });
    wait_until(Duration::from_secs(10), "eth1's flows removed", || {
        non_ip_pair_flows(&lab) == 2
    });
    std::thread::sleep(Duration::from_millis(500));
    let (sent, received) = flood.finish();
    assert!(sent >= 5, "the flood ran");
    assert_eq!(received, sent, "no loss on eth0 while eth1 was detached");
    let mut eth1_after = lab.vm_link(NIC2).expect("eth1");
    eth1_after.index = eth1_before.0.index;
    assert_eq!(eth1_after, eth1_before.0, "eth1's link restored exactly");
    assert_eq!(
        lab.vm_link(NIC).expect("eth0").index,
        eth0_index,
        "eth0 untouched"
    );
    assert!(
        lab.ping_from_ext(VM2_IP4, 2).all_received(),
        "the restored eth1 works"
    );
    agent.stop();
}
