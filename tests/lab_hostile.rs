//! Hostile and careless input in the lab: ExternalNode files that point at links that must never
//! become uplinks, and policy files that are empty, conflicting, huge, deeply nested or not files at
//! all. In every case the enforced Drop keeps dropping real packets, the host's interfaces stay as
//! they were, the agent says what it refused (exact log lines), and health keeps answering.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::*;

/// The AppliedToGroup holding this lab VM's eth0 ExternalEntity.
const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// Drops TCP 5201 from the outside host (IPv4 and IPv6).
fn drop_policy() -> String {
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-drop, uid: uid-drop}}
sourceRef: {{type: AntreaNetworkPolicy, namespace: vm-ns, name: drop-5201, uid: uid-drop}}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
- direction: In
  from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}, {{cidr: \"{EXT_IP6}/128\"}}]}}
  services: [{{protocol: TCP, port: 5201}}]
  action: Drop
  priority: 0
"
    )
}

const DENIED_PORT: u16 = 5201;

fn policy_dir(lab: &Lab) -> PathBuf {
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    dir
}

fn write_atomically(path: &std::path::Path, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("f")
    ));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("move in place");
}

fn write_policy(lab: &Lab, file: &str, yaml: &str) {
    write_atomically(&policy_dir(lab).join(file), yaml);
}

/// Writes the ExternalNode with one interface `name` carrying `ips`.
fn write_en(lab: &Lab, name: &str, ips: &[&str]) {
    let ips: Vec<String> = ips.iter().map(|ip| format!("\"{ip}\"")).collect();
    write_atomically(
        &lab.en_file(),
        &format!(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
             metadata: {{name: {NODE_NAME}, namespace: {EN_NAMESPACE}}}\n\
             spec: {{interfaces: [{{name: {name}, ips: [{}]}}]}}\n",
            ips.join(", ")
        ),
    );
}

/// eth0 attached, the Drop on TCP 5201 enforced (checked with real packets).
fn attached_with_drop(lab: &Lab, config_extra: &str) -> AgentProcess {
    write_policy(lab, "00-atg.yaml", APPLIED_TO);
    write_policy(lab, "10-drop.yaml", &drop_policy());
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\n{config_extra}",
        policy_dir(lab).display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "the Drop enforced", || {
        lab.dump_flows().iter().any(|f| f.contains("conj_id="))
    });
    assert_drop_holds(lab, "at the start");
    agent
}

fn assert_drop_holds(lab: &Lab, when: &str) {
    assert!(
        !lab.tcp_from_ext(VM_IP4, DENIED_PORT),
        "TCP {DENIED_PORT} is dropped {when}"
    );
    assert!(
        lab.tcp_from_ext(VM_IP4, DENIED_PORT + 1),
        "another port passes {when}"
    );
}

/// Every link of the VM namespace with its index, kind and flags, and every address: what
/// "the host's interfaces are untouched" compares.
fn vm_interfaces(lab: &Lab) -> (String, String) {
    let links = lab.vm_ok("ip -o link show | sed 's/ link\\/.*//'");
    // Global addresses only: IPv6 link-local ones of the new links finish DAD meanwhile.
    let addrs = lab.vm_ok("ip -o addr show scope global | sed 's/valid_lft.*//'");
    (links, addrs)
}

/// An ExternalNode that lists the loopback address, or whose IPs are on the loopback, a tunnel, a
/// TAP device, a bridge or a bridge port, is refused with a log line naming the file, the entry and the reason;
/// the attached NIC stays attached, no interface changes, and the Drop keeps dropping.
#[test]
fn external_nodes_pointing_at_non_uplinks_change_nothing() {
    let lab = Lab::new();
    let mut agent = attached_with_drop(&lab, "");
    // Links that hold addresses but can never be uplinks.
    lab.vm_ok(
        "ip link add vx7 type vxlan id 7 dstport 4789 && ip addr add 10.77.0.2/24 dev vx7 \
         && ip tuntap add mode tap tap7 && ip addr add 10.76.0.2/24 dev tap7 \
         && ip link add br7 type bridge && ip addr add 10.78.0.2/24 dev br7 && ip link set br7 up \
         && ip link add v7 type veth peer name v7p && ip link set v7 master br7 \
         && ip addr add 10.79.0.2/24 dev v7 && ip link set v7 up \
         && ip addr add 10.80.0.2/32 dev lo",
    );
    let before = vm_interfaces(&lab);
    let file = lab.en_file().display().to_string();

    write_en(&lab, NIC, &["127.0.0.1"]);
    agent.wait_for_log(
        &format!(
            "ExternalNode vm-ns/vm1: spec.interfaces[0].ips[0]: 127.0.0.1 is a loopback address; \
             an uplink needs an address other hosts can reach (file {file}); keeping the last valid \
             ExternalNode state"
        ),
        Duration::from_secs(20),
    );
    const KINDS: &str = "(allowed kinds: none, veth, bond, team, vlan, macvlan, ipvlan)";
    for (name, ip, link, reason) in [
        (
            "vx7",
            "10.77.0.2",
            "vx7",
            &format!("vx7 is a vxlan device, not a physical-like interface {KINDS}"),
        ),
        (
            "tap7",
            "10.76.0.2",
            "tap7",
            &format!("tap7 is a tun device, not a physical-like interface {KINDS}"),
        ),
        ("br7", "10.78.0.2", "br7", &"br7 is a Linux bridge".to_string()),
        (
            "v7",
            "10.79.0.2",
            "v7",
            &"v7 is a port of br7 (a bond slave, bridge port or OVS port)".to_string(),
        ),
        (
            "lo",
            "10.80.0.2",
            "lo",
            &"lo is the loopback interface".to_string(),
        ),
    ] {
        write_en(&lab, name, &[ip]);
        agent.wait_for_log(
            &format!(
                "ExternalNode vm-ns/vm1 (file {file}): spec.interfaces[0] (name \"{name}\", ips [{ip}]): \
                 resolves to {link}, which cannot be an uplink: {reason}; nothing on the host was changed"
            ),
            Duration::from_secs(20),
        );
    }
    assert_eq!(vm_interfaces(&lab), before, "no interface of the host changed");
    assert!(lab.vm_link_exists(UPLINK), "eth0 stays attached");
    assert_drop_holds(&lab, "after the refused ExternalNodes");
    assert!(agent.is_running());
    agent.stop();
}
