//! End-to-end tests of the agent in the lab: real ovsdb-server and ovs-vswitchd (userspace
//! datapath) in a network namespace, the agent binary in standalone mode, and real packets from an
//! outside host. Needs root and Open vSwitch (`make deps`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use antrea_vm_agent::config::Config;
use antrea_vm_agent::messages::{AttachedInterface, EntityRef};
use antrea_vm_agent::ovs::openflow::render::{render_flow, NameMap};
use antrea_vm_agent::policy::flowset::desired_flows;
use antrea_vm_agent::policy::pipeline::{self, PipelineOptions};
use support::*;

const BYPASS_PORT: u16 = 8080;
const CONFIG_EXTRA: &str = "externalNode:\n  policyBypassRules:\n  - {direction: ingress, protocol: tcp, cidr: 10.99.0.0/24, port: 8080}\n  - {direction: egress, protocol: icmp, cidr: \"fd00:99::/64\"}\n";

/// What the VM's network looked like before the agent touched it.
#[derive(Debug, PartialEq, Eq)]
struct HostState {
    link: LinkInfo,
    addrs: Vec<String>,
    routes: Vec<String>,
}

fn host_state(lab: &Lab, name: &str) -> HostState {
    let mut link = lab.vm_link(name).unwrap_or_else(|| panic!("link {name} exists"));
    // The ifindex of a renamed NIC does not change, but compare names/MAC/MTU/state only.
    link.index = 0;
    link.noarp = false;
    HostState {
        link,
        addrs: lab.vm_addrs(name),
        routes: lab.vm_routes(),
    }
}

fn ovs_get(lab: &Lab, args: &[&str]) -> String {
    lab.ovs_vsctl(args).trim().trim_matches('"').to_string()
}

fn ofport(lab: &Lab, iface: &str) -> u32 {
    ovs_get(lab, &["get", "Interface", iface, "ofport"])
        .parse()
        .expect("numeric ofport")
}

fn round(lab: &Lab) -> Option<u16> {
    let out = lab.ovs_vsctl_output(&["get", "Bridge", BRIDGE, "external_ids:roundNum"]);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_matches('"')
        .parse()
        .ok()
}

/// The flows the agent should own, rendered like `ovs-ofctl dump-flows --names --no-stats`.
fn expected_flows(lab: &Lab, config: &Config) -> Vec<String> {
    let round = round(lab).expect("round number persisted");
    let host = ofport(lab, NIC);
    let uplink = ofport(lab, UPLINK);
    let iface = AttachedInterface {
        name: NIC.into(),
        ofport: host,
        uplink_name: UPLINK.into(),
        uplink_ofport: uplink,
        ips: vec![],
        entity: EntityRef {
            namespace: EN_NAMESPACE.into(),
            name: "vm1-3e616".into(),
        },
    };
    let flows = desired_flows(
        PipelineOptions { round, meters: true },
        &config.policy_bypass_rules,
        &[iface],
        &Default::default(),
    );
    let names = NameMap {
        tables: pipeline::table_names().into_iter().collect(),
        ports: BTreeMap::from([(host, NIC.to_string()), (uplink, UPLINK.to_string())]),
    };
    let mut rendered: Vec<String> = flows.values().map(|f| render_flow(f, &names)).collect();
    rendered.sort();
    rendered
}

/// Flow lines with the round taken out of their cookies: after a restart, flows the new run
/// did not need to change keep the round (and counters) of the run that installed them.
fn without_rounds(flows: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = flows
        .into_iter()
        .map(|line| {
            let Some(rest) = line.strip_prefix("cookie=0x") else {
                return line;
            };
            let (hex, tail) = rest.split_once(',').unwrap_or((rest, ""));
            let cookie = u64::from_str_radix(hex, 16).expect("hex cookie") & !pipeline::fields::ROUND_MASK;
            format!("cookie={cookie:#x},{tail}")
        })
        .collect();
    out.sort();
    out
}

/// Starts the agent on a fresh lab and waits until eth0 is attached and isolated.
fn attach(lab: &Lab) -> (AgentProcess, Config) {
    let config_path = lab.write_config(CONFIG_EXTRA);
    let config = Config::load(&config_path).expect("lab config is valid");
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config_path);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "eth0 to hold the VM's addresses", || {
        let addrs = lab.vm_addrs(NIC);
        addrs.iter().any(|a| a.starts_with(VM_IP4)) && addrs.iter().any(|a| a.starts_with(VM_IP6))
    });
    wait_until(Duration::from_secs(30), "the flows to be committed", || {
        round(lab).is_some()
    });
    (agent, config)
}

fn n_packets(lab: &Lab, table: &str, needle: &str) -> u64 {
    let out = lab.vm_ok(&format!(
        "ovs-ofctl -O OpenFlow15 --names dump-flows unix:{} table={table}",
        lab.mgmt_sock().display()
    ));
    out.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            l.split("n_packets=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn attach_forwards_traffic_counts_bypass_and_restores_on_delete() {
    let lab = Lab::new();
    let before = host_state(&lab, NIC);
    let (mut agent, config) = attach(&lab);

    // OVS: the uplink and the internal port with the original MAC and Antrea's external_ids.
    let ports = lab.ovs_vsctl(&["list-ports", BRIDGE]);
    assert_eq!(
        ports.lines().collect::<Vec<_>>(),
        vec![NIC, UPLINK],
        "ports on br-int"
    );
    assert_eq!(ovs_get(&lab, &["get", "Interface", NIC, "type"]), "internal");
    assert_eq!(ovs_get(&lab, &["get", "Interface", NIC, "mac"]), before.link.mac);
    assert_eq!(
        ovs_get(&lab, &["get", "Port", NIC, "external_ids:antrea-type"]),
        "host"
    );
    assert_eq!(
        ovs_get(&lab, &["get", "Port", NIC, "external_ids:entity-name"]),
        "vm1-3e616"
    );
    assert_eq!(
        ovs_get(&lab, &["get", "Port", UPLINK, "external_ids:antrea-type"]),
        "uplink"
    );
    assert_eq!(ovs_get(&lab, &["get", "Bridge", BRIDGE, "fail_mode"]), "secure");

    // Kernel: eth0 (internal, same MAC and MTU) holds every address; eth0~ holds none but
    // link-local; the default routes kept gateway, metric and protocol.
    let internal = lab.vm_link(NIC).expect("internal eth0");
    assert_eq!(lab.vm_link_driver(NIC).as_deref(), Some("tun"));
    assert_eq!(internal.mac, before.link.mac);
    assert_eq!(internal.mtu, VM_MTU);
    for a in &before.addrs {
        assert!(
            lab.vm_addrs(NIC).contains(a),
            "eth0 has {a}: {:?}",
            lab.vm_addrs(NIC)
        );
    }
    assert!(
        lab.vm_addrs(UPLINK).iter().all(|a| a.starts_with("fe80:")),
        "eth0~ holds no address: {:?}",
        lab.vm_addrs(UPLINK)
    );
    let routes = lab.vm_routes().join("\n");
    assert!(
        routes.contains("default via 10.99.0.1 dev eth0 proto dhcp"),
        "{routes}"
    );
    assert!(routes.contains("metric 100"), "{routes}");
    assert!(routes.contains("default via fd00:99::1 dev eth0"), "{routes}");

    // Traffic both ways, IPv4 and IPv6 (ARP and neighbour discovery have to pass for these).
    assert!(
        lab.ping_from_ext(VM_IP4, 3).all_received(),
        "ping ext → vm over IPv4"
    );
    assert!(
        lab.ping_from_ext(VM_IP6, 3).all_received(),
        "ping ext → vm over IPv6"
    );
    assert!(
        lab.ping_from_vm(EXT_IP4, 3).all_received(),
        "ping vm → ext over IPv4"
    );
    assert!(
        lab.ping_from_vm(EXT_IP6, 3).all_received(),
        "ping vm → ext over IPv6"
    );
    assert!(lab.tcp_from_ext(VM_IP4, 5001), "TCP ext → vm over IPv4");
    assert!(lab.tcp_from_ext(VM_IP6, 5002), "TCP ext → vm over IPv6");
    assert!(lab.tcp_from_vm(EXT_IP4, 5003), "TCP vm → ext over IPv4");
    assert!(lab.tcp_from_vm(EXT_IP6, 5004), "TCP vm → ext over IPv6");
    // ARP and neighbour discovery crossed OVS: the outside host resolved the VM's MAC.
    for ip in [VM_IP4, VM_IP6] {
        let neigh = lab.ext_ok(&format!("ip neigh show {ip} dev {EXT_NIC}"));
        assert!(
            neigh.contains(&before.link.mac),
            "ext resolved {ip} to the VM's MAC: {neigh}"
        );
    }

    // The switch holds exactly the init, pair and bypass flows.
    assert_eq!(lab.dump_flows(), expected_flows(&lab, &config));

    // A bypass rule's flow counts the connections it matches (one per new connection).
    let bypass = "tp_dst=8080";
    let counted = n_packets(&lab, "IngressSecurityClassifier", bypass);
    assert!(lab.tcp_from_ext(VM_IP4, BYPASS_PORT), "TCP to the bypass port");
    assert!(
        lab.tcp_from_ext(VM_IP4, BYPASS_PORT),
        "TCP to the bypass port again"
    );
    wait_until(
        Duration::from_secs(10),
        "the bypass flow to count two new connections",
        || n_packets(&lab, "IngressSecurityClassifier", bypass) >= counted + 2,
    );
    let icmp6_counted = n_packets(&lab, "EgressSecurityClassifier", "icmp6");
    assert!(lab.ping_from_vm(EXT_IP6, 2).all_received());
    wait_until(
        Duration::from_secs(10),
        "the IPv6 egress bypass flow to count pings",
        || n_packets(&lab, "EgressSecurityClassifier", "icmp6") > icmp6_counted,
    );

    // Deleting the ExternalNode restores the NIC exactly.
    lab.remove_external_node();
    wait_until(Duration::from_secs(30), "eth0~ to be renamed back", || {
        !lab.vm_link_exists(UPLINK)
    });
    wait_until(Duration::from_secs(30), "eth0 to get its addresses back", || {
        lab.vm_link_driver(NIC).as_deref() == Some("veth") && lab.vm_addrs(NIC).len() >= before.addrs.len()
    });
    wait_until(Duration::from_secs(10), "routes restored", || {
        lab.vm_routes() == before.routes
    });
    assert_eq!(host_state(&lab, NIC), before);
    assert_eq!(
        lab.ovs_vsctl(&["list-ports", BRIDGE]).trim(),
        "",
        "no ports left on the bridge"
    );
    assert!(
        lab.ping_from_ext(VM_IP4, 2).all_received(),
        "the restored NIC works"
    );
    assert!(
        agent.is_running(),
        "the agent keeps running without an ExternalNode"
    );
    agent.stop();
}

#[test]
fn sigkill_and_restart_adopts_without_losing_a_packet() {
    let lab = Lab::new();
    let (mut agent, config) = attach(&lab);
    let internal_index = lab.vm_link(NIC).expect("eth0").index;
    let port_uuid = ovs_get(&lab, &["get", "Port", NIC, "_uuid"]);
    let first_round = round(&lab).expect("round");

    let flood = lab.start_ping_flood(true, VM_IP4, 50);
    std::thread::sleep(Duration::from_millis(500));
    agent.kill_hard();
    let counted_before = n_packets(&lab, "ConntrackZone", "priority=200,ip ");
    std::thread::sleep(Duration::from_millis(500));
    let config_path = lab.write_config(CONFIG_EXTRA);
    let mut agent = lab.start_agent(&config_path);
    wait_until(
        Duration::from_secs(30),
        "the restarted agent to commit a new round",
        || round(&lab) == Some(first_round.wrapping_add(1)),
    );
    std::thread::sleep(Duration::from_secs(1));
    let (sent, received) = flood.finish();
    assert!(sent >= 20, "the flood ran ({sent} sent)");
    assert_eq!(received, sent, "no packet lost across the SIGKILL and restart");

    // The new run diffed against the switch instead of replacing its flows: counters kept.
    assert!(counted_before > 0, "the conntrack flow counted the flood");
    assert!(
        n_packets(&lab, "ConntrackZone", "priority=200,ip ") >= counted_before,
        "flow counters survive the restart (nothing was flushed or replaced)"
    );
    // Adopted, not re-attached: same netdev and same OVSDB port.
    assert_eq!(lab.vm_link(NIC).expect("eth0").index, internal_index);
    assert_eq!(ovs_get(&lab, &["get", "Port", NIC, "_uuid"]), port_uuid);
    assert_eq!(
        without_rounds(lab.dump_flows()),
        without_rounds(expected_flows(&lab, &config))
    );
    assert!(
        agent.log().contains("adopted attached interface"),
        "log:\n{}",
        agent.log()
    );
    agent.stop();
}

#[test]
fn ovs_restart_is_followed_by_reconnect_and_reinstall() {
    let lab = Lab::new();
    let (mut agent, config) = attach(&lab);
    let first_round = round(&lab).expect("round");
    lab.restart_ovs();
    // ovs-vswitchd re-creates the internal netdev empty; the agent re-applies its configuration
    // and reinstalls its flows at a new round.
    wait_until(
        Duration::from_secs(30),
        "a new round after the OVS restart",
        || round(&lab).is_some_and(|r| r != first_round),
    );
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(30),
        "eth0 to hold its addresses again",
        || lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4)),
    );
    wait_until(Duration::from_secs(30), "flows reinstalled", || {
        lab.try_dump_flows()
            .is_ok_and(|f| without_rounds(f) == without_rounds(expected_flows(&lab, &config)))
    });
    assert!(
        lab.ping_from_ext(VM_IP4, 3).all_received(),
        "IPv4 after the OVS restart"
    );
    assert!(
        lab.ping_from_ext(VM_IP6, 3).all_received(),
        "IPv6 after the OVS restart"
    );
    assert!(lab.tcp_from_ext(VM_IP4, 5005), "TCP after the OVS restart");
    assert!(agent.is_running());
    agent.stop();
}

#[test]
fn agent_started_before_ovs_reports_the_socket_and_attaches_once_ovs_is_up() {
    let lab = Lab::new();
    lab.kill_vswitchd();
    lab.kill_ovsdb();
    let config_path = lab.write_config("");
    lab.write_external_node(&[VM_IP4]);
    let mut agent = lab.start_agent(&config_path);
    // The error names the socket it cannot reach; nothing on the host changes meanwhile.
    agent.wait_for_log(&lab.db_sock().display().to_string(), Duration::from_secs(20));
    agent.wait_for_log(&lab.mgmt_sock().display().to_string(), Duration::from_secs(20));
    assert!(!lab.vm_link_exists(UPLINK));
    assert!(agent.is_running(), "the agent keeps running without OVS");
    lab.start_ovsdb();
    lab.start_vswitchd();
    lab.isolate_uplink();
    wait_until(Duration::from_secs(60), "attached once OVS is up", || {
        lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4)) && round(&lab).is_some()
    });
    assert!(lab.ping_from_ext(VM_IP4, 2).all_received());
    agent.stop();
}

#[test]
fn bad_external_node_and_missing_interface_are_reported_and_survived() {
    let lab = Lab::new();
    let config_path = lab.write_config("");
    std::fs::write(lab.en_file(), "metadata: [not, a, map\n").expect("write bad file");
    let mut agent = lab.start_agent(&config_path);
    agent.wait_for_log("external-node.yaml", Duration::from_secs(20));
    // The named interface does not hold the IPs: a clear error naming both, nothing changes.
    lab.write_external_node(&["192.0.2.77"]);
    agent.wait_for_log(
        "interface eth0 is named in the ExternalNode but holds none of its IPs [192.0.2.77]",
        Duration::from_secs(20),
    );
    assert!(!lab.vm_link_exists(UPLINK));
    assert!(agent.is_running());
    // A good ExternalNode afterwards attaches.
    lab.write_external_node(&[VM_IP4]);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "attached after the bad inputs", || {
        lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
    });
    assert!(lab.ping_from_ext(VM_IP4, 2).all_received());
    agent.stop();
}

/// Every route through the NIC (all tables but local) and every address, with the attributes
/// `ip` shows; lifetimes are left out because they count down.
fn full_config(lab: &Lab, dev: &str) -> (Vec<String>, Vec<String>) {
    let strip_lifetimes = |l: &str| {
        l.split_whitespace()
            .filter(|w| !w.ends_with("sec") && *w != "valid_lft" && *w != "preferred_lft" && *w != "forever")
            .collect::<Vec<_>>()
            .join(" ")
    };
    let addrs = lab
        .vm_ok(&format!("ip -o addr show dev {dev} | grep -v ' fe80::' || true"))
        .lines()
        .map(|l| strip_lifetimes(l.split_once(' ').map_or(l, |(_, rest)| rest)))
        .map(|l| l.replace(&format!("{dev}~"), dev))
        .collect::<Vec<_>>();
    let mut routes = Vec::new();
    for family in ["-4", "-6"] {
        let out = lab.vm_ok(&format!("ip {family} route show table all dev {dev}"));
        routes.extend(
            out.lines()
                .filter(|l| {
                    !l.contains("table local") && !l.starts_with("fe80::") && !l.starts_with("multicast")
                })
                .map(|l| l.trim().to_string()),
        );
    }
    routes.sort();
    let mut addrs = addrs;
    addrs.sort();
    (addrs, routes)
}

#[test]
fn a_rich_configuration_moves_and_comes_back_exactly() {
    let lab = Lab::new();
    lab.vm_ok(&format!(
        "set -e\n\
         ip addr add 10.99.0.3/24 dev {NIC} label {NIC}:1\n\
         ip addr add 10.99.0.4/24 dev {NIC} valid_lft 3600 preferred_lft 1800\n\
         ip -6 addr add fd00:99::4/64 dev {NIC} nodad valid_lft 7200 preferred_lft 3600\n\
         ip route add 192.0.2.0/24 via {EXT_IP4} dev {NIC} proto static metric 50\n\
         ip route add 198.51.100.0/24 dev {NIC} scope link metric 20\n\
         ip route add 203.0.113.0/24 via 10.99.0.254 dev {NIC} onlink\n\
         ip route add default via {EXT_IP4} dev {NIC} table 100 metric 5\n\
         ip -6 route add 2001:db8::/64 via {EXT_IP6} dev {NIC} metric 77 proto boot"
    ));
    let before = full_config(&lab, NIC);
    let config = lab.write_config("");
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(30),
        "the whole configuration on the internal eth0",
        || lab.vm_link_driver(NIC).as_deref() == Some("tun") && full_config(&lab, NIC) == before,
    );
    let (uplink_addrs, uplink_routes) = full_config(&lab, UPLINK);
    assert!(
        uplink_addrs.is_empty(),
        "eth0~ keeps no address: {uplink_addrs:?}"
    );
    assert!(
        uplink_routes.iter().all(|r| r.contains("proto kernel")),
        "eth0~ keeps no route: {uplink_routes:?}"
    );
    assert!(
        lab.ping_from_ext("10.99.0.3", 2).all_received(),
        "the secondary address answers"
    );
    lab.remove_external_node();
    wait_until(
        Duration::from_secs(30),
        "the whole configuration back on the NIC",
        || lab.vm_link_driver(NIC).as_deref() == Some("veth") && full_config(&lab, NIC) == before,
    );
    agent.stop();
}
