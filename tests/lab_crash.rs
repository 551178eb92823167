//! Crash safety of attach and detach: for every step boundary, the agent is frozen there by a
//! failpoint (debug builds, `ANTREA_VM_AGENT_FAILPOINT`), SIGKILLed, and started again. The next
//! start must converge to fully attached (the ExternalNode still exists) or fully restored (it
//! was deleted), with every address and route as expected. Also a simulated reboot.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::time::Duration;

use support::*;

const FAILPOINT_ENV: &str = "ANTREA_VM_AGENT_FAILPOINT";

/// What the VM's NIC looked like before the agent touched it.
#[derive(Debug, PartialEq, Eq)]
struct HostState {
    link: LinkInfo,
    addrs: Vec<String>,
    routes: Vec<String>,
}

fn host_state(lab: &Lab) -> HostState {
    let mut link = lab.vm_link(NIC).expect("eth0 exists");
    link.index = 0;
    HostState {
        link,
        addrs: lab.vm_addrs(NIC),
        routes: lab.vm_routes(),
    }
}

fn start_frozen_at(lab: &Lab, config: &std::path::Path, failpoint: &str) {
    let config = config.display().to_string();
    let mut agent = lab.start_agent_with_env(&["run", "--config", &config], &[(FAILPOINT_ENV, failpoint)]);
    agent.wait_for_log(&format!("failpoint {failpoint} reached"), Duration::from_secs(30));
    agent.kill_hard();
}

/// Fully attached: internal eth0 with the NIC's MAC, MTU, addresses and routes; eth0~ bare;
/// both ports in OVS; traffic passes both ways over IPv4 and IPv6.
fn assert_attached(lab: &Lab, before: &HostState) {
    wait_until(
        Duration::from_secs(30),
        "eth0 attached with its addresses",
        || {
            lab.vm_link_driver(NIC).as_deref() == Some("tun")
                && lab.vm_link_exists(UPLINK)
                && before.addrs.iter().all(|a| lab.vm_addrs(NIC).contains(a))
        },
    );
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "routes on eth0 as before", || {
        lab.vm_routes() == before.routes
    });
    let internal = lab.vm_link(NIC).expect("eth0");
    assert_eq!(
        (internal.mac.as_str(), internal.mtu),
        (before.link.mac.as_str(), before.link.mtu)
    );
    assert!(
        lab.vm_addrs(UPLINK).is_empty(),
        "eth0~ holds no address: {:?}",
        lab.vm_addrs(UPLINK)
    );
    let ports = lab.ovs_vsctl(&["list-ports", BRIDGE]);
    assert_eq!(ports.lines().collect::<Vec<_>>(), vec![NIC, UPLINK]);
    wait_until(Duration::from_secs(30), "flows committed", || {
        lab.ovs_vsctl_output(&["get", "Bridge", BRIDGE, "external_ids:roundNum"])
            .status
            .success()
    });
    wait_until(Duration::from_secs(20), "IPv4 and IPv6 through OVS", || {
        lab.ping_from_ext(VM_IP4, 1).all_received() && lab.ping_from_ext(VM_IP6, 1).all_received()
    });
}

/// Fully restored: the NIC is eth0 again, exactly as before, and OVS has no port.
fn assert_restored(lab: &Lab, before: &HostState) {
    wait_until(Duration::from_secs(30), "eth0 restored", || {
        !lab.vm_link_exists(UPLINK)
            && lab.vm_link_driver(NIC).as_deref() == Some("veth")
            && lab.vm_routes() == before.routes
    });
    assert_eq!(&host_state(lab), before);
    assert_eq!(lab.ovs_vsctl(&["list-ports", BRIDGE]).trim(), "", "no ports left");
    assert!(
        lab.ping_from_ext(VM_IP4, 2).all_received(),
        "the restored NIC works"
    );
}

fn crash_during_attach(step: &str) {
    let lab = Lab::new();
    let before = host_state(&lab);
    let config = lab.write_config("");
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    start_frozen_at(&lab, &config, &format!("attaching:{step}"));
    let mut agent = lab.start_agent(&config);
    assert_attached(&lab, &before);
    agent.stop();
}

fn crash_during_detach(step: &str) {
    let lab = Lab::new();
    let before = host_state(&lab);
    let config = lab.write_config("");
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    assert_attached(&lab, &before);
    agent.stop();
    lab.remove_external_node();
    start_frozen_at(&lab, &config, &format!("detaching:{step}"));
    let mut agent = lab.start_agent(&config);
    assert_restored(&lab, &before);
    agent.stop();
}

macro_rules! crash_tests {
    ($runner:ident: $($name:ident => $step:literal),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $runner($step);
            }
        )+
    };
}

crash_tests!(crash_during_attach:
    sigkill_after_record_saved => "saved",
    sigkill_before_rename => "rename",
    sigkill_before_uplink_port => "uplink-port",
    sigkill_before_internal_port => "internal-port",
    sigkill_before_clearing_the_nic => "clear-source",
    sigkill_before_adding_addresses => "add-addresses",
    sigkill_before_adding_routes => "add-routes",
);

crash_tests!(crash_during_detach:
    sigkill_before_deleting_ports => "delete-ports",
    sigkill_before_renaming_back => "rename-back",
    sigkill_before_restoring_the_link => "restore-link",
    sigkill_before_restoring_addresses => "restore-addresses",
    sigkill_before_restoring_routes => "restore-routes",
);

/// A reboot: OVS keeps its database while the kernel comes up with the plain NIC (upstream
/// #4122 needed a separate cleanup service). The agent's next start must clean up and attach.
#[test]
fn reboot_with_ovs_database_kept_converges() {
    let lab = Lab::new();
    let before = host_state(&lab);
    let config = lab.write_config("");
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    assert_attached(&lab, &before);
    agent.kill_hard();
    // Power off: OVS dies (its internal netdev goes with it); the kernel forgets everything else.
    lab.unisolate_uplink();
    lab.kill_vswitchd();
    lab.kill_ovsdb();
    // OVS makes its internal taps persistent; a reboot does not keep them.
    if lab.vm_link_driver(NIC).as_deref() == Some("tun") {
        lab.vm_ok(&format!("ip link del dev {NIC}"));
    }
    // Power on: the NIC comes up under its own name with its usual configuration…
    lab.vm_ok(&format!(
        "ip link set dev '{UPLINK}' down && ip link set dev '{UPLINK}' name {NIC}"
    ));
    lab.vm_ok(&format!(
        "ip link set dev {NIC} mtu {VM_MTU} up && ip addr add {VM_IP4}/24 dev {NIC} && \
         ip addr add {VM_IP6}/64 dev {NIC} nodad && \
         ip route add default via {EXT_IP4} dev {NIC} proto dhcp metric 100 && \
         ip -6 route add default via {EXT_IP6} dev {NIC} metric 1024"
    ));
    // …and OVS starts again from its database, which still lists eth0 and eth0~.
    lab.start_ovsdb();
    lab.start_vswitchd();
    assert!(
        lab.ping_from_ext(VM_IP4, 1).all_received(),
        "the plain NIC works after the reboot"
    );
    let mut agent = lab.start_agent(&config);
    assert_attached(&lab, &before);
    assert!(
        agent.log().contains("cleaning up"),
        "stale ports were cleaned up:\n{}",
        agent.log()
    );
    agent.stop();
}
