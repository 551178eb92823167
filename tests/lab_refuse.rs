//! Enforce or refuse, end to end in the lab (Kubernetes mode, policies from the emulator's
//! controller side): an L7 Allow rule the agent cannot inspect allows nothing under a default
//! deny and is reported (NetworkPolicyStatus `realizationFailure` with a message naming the rule,
//! the `antrea_vm_agent_rules_not_enforced` gauge, `get networkpolicy`, one log line), and a named
//! port without a protocol takes the protocol the ExternalEntity declares (UDP 5353) so a Drop
//! on it blocks real UDP datagrams.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use support::emulator::Emulator;
use support::*;

/// The metrics listener in the VM namespace.
const METRICS_PORT: u16 = 10462;
/// The ExternalEntity the controller derives from the ExternalNode's `eth0`.
const ENTITY: &str = "vm1-3e616";
const HTTP_PORT: u16 = 8080;
const MDNS_PORT: u16 = 5353;

/// The emulator in the lab's outside host (see [`support::emulator::start_in_outside_host`]).
fn start_emulator(lab: &Lab) -> Emulator {
    support::emulator::start_in_outside_host(lab)
}

fn k8s_config(lab: &Lab, emu: &Emulator) -> PathBuf {
    support::emulator::lab_agent_config(
        lab,
        emu,
        &format!("metricsServer:\n  bindAddress: \"127.0.0.1:{METRICS_PORT}\"\n"),
    )
}

fn socket(lab: &Lab) -> PathBuf {
    lab.dir().join("agent.sock")
}

fn external_node() -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1alpha1",
        "kind": "ExternalNode",
        "metadata": {"name": NODE_NAME, "namespace": EN_NAMESPACE,
                     "labels": {"antrea-external-node": NODE_NAME}},
        "spec": {"interfaces": [{"name": NIC, "ips": [VM_IP4, VM_IP6]}]}
    })
}

/// The VM's ExternalEntity declares `mdns` as UDP 5353.
fn applied_to_group() -> Value {
    json!({
        "apiVersion": "controlplane.antrea.io/v1beta2",
        "kind": "AppliedToGroup",
        "metadata": {"name": "atg-vm1", "uid": "atg-vm1"},
        "groupMembers": [{"externalEntity": {"name": ENTITY, "namespace": EN_NAMESPACE},
                          "ports": [{"name": "mdns", "port": MDNS_PORT, "protocol": "UDP"}]}]
    })
}

fn from_ext() -> Value {
    json!({"ipBlocks": [{"cidr": {"ip": EXT_IP4, "prefixLength": 32}}]})
}

/// `allow-ok`: HTTP GET /ok on TCP 8080, above a default deny of every TCP connection.
fn l7_policy() -> Value {
    json!({
        "apiVersion": "controlplane.antrea.io/v1beta2",
        "kind": "NetworkPolicy",
        "metadata": {"name": "uid-l7", "uid": "uid-l7", "generation": 1},
        "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": EN_NAMESPACE, "name": "web-l7",
                      "uid": "uid-l7"},
        "appliedToGroups": ["atg-vm1"],
        "priority": 5,
        "tierPriority": 250,
        "rules": [
            {"direction": "In", "name": "allow-ok", "from": from_ext(),
             "services": [{"protocol": "TCP", "port": HTTP_PORT}],
             "l7Protocols": [{"http": {"method": "GET", "path": "/ok"}}],
             "action": "Allow", "priority": 0},
            {"direction": "In", "name": "default-deny-tcp",
             "from": {"ipBlocks": [{"cidr": {"ip": "0.0.0.0", "prefixLength": 0}}]},
             "services": [{"protocol": "TCP"}], "action": "Drop", "priority": 1}
        ]
    })
}

/// `drop-mdns`: a named port with no protocol (as the controller sends (B)ANP named ports).
fn named_port_policy() -> Value {
    json!({
        "apiVersion": "controlplane.antrea.io/v1beta2",
        "kind": "NetworkPolicy",
        "metadata": {"name": "uid-mdns", "uid": "uid-mdns", "generation": 1},
        "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": EN_NAMESPACE, "name": "mdns",
                      "uid": "uid-mdns"},
        "appliedToGroups": ["atg-vm1"],
        "priority": 6,
        "tierPriority": 250,
        "rules": [
            {"direction": "In", "name": "drop-mdns", "from": from_ext(),
             "services": [{"port": "mdns"}], "action": "Drop", "priority": 0}
        ]
    })
}

fn attached(lab: &Lab) -> bool {
    lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
        && lab.vm_link_exists(UPLINK)
        && lab
            .ovs_vsctl_output(&["get", "Bridge", BRIDGE, "external_ids:roundNum"])
            .status
            .success()
}

/// `GET /metrics` from inside the VM namespace; the body.
fn scrape(lab: &Lab) -> String {
    let response = lab.vm_ok(&format!(
        "printf 'GET /metrics HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
    ));
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// `antrea-vm-agent get ARGS --socket S`; asserts success, returns stdout.
fn get(socket: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(agent_binary())
        .arg("get")
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .expect("run antrea-vm-agent get");
    assert!(out.status.success(), "get {args:?}: {}", out.describe());
    out.stdout_text()
}

#[test]
fn rules_not_enforced_as_written_fail_closed_and_are_reported() {
    let lab = Lab::new();
    let emu = start_emulator(&lab);
    let config = k8s_config(&lab, &emu);
    let mut agent = lab.start_agent_with_env(
        &["run", "--config", &config.display().to_string()],
        &[("ANTREA_VM_AGENT_REPORT_INTERVAL", "2s")],
    );
    emu.create_external_node(external_node())
        .expect("create the ExternalNode");
    wait_until(Duration::from_secs(30), "eth0 attached", || attached(&lab));
    lab.isolate_uplink();
    // Without policies both ports are open: what follows is the policies' doing.
    assert!(
        lab.tcp_from_ext(VM_IP4, HTTP_PORT),
        "TCP 8080 passes before any policy"
    );
    assert!(
        lab.udp_from_ext(VM_IP4, MDNS_PORT),
        "UDP 5353 passes before any policy"
    );

    emu.upsert_controlplane(json!([applied_to_group(), l7_policy(), named_port_policy()]))
        .expect("inject the policies");
    wait_until(Duration::from_secs(30), "both policies' flows", || {
        let flows = lab.dump_flows();
        flows
            .iter()
            .any(|f| f.contains("udp") && f.contains("tp_dst=5353"))
            && flows.iter().any(|f| f.contains("tp_dst=8080"))
    });

    // The L7 Allow rule allows nothing: no connection to 8080 (a plain port rule would allow it).
    assert!(!lab.tcp_from_ext(VM_IP4, HTTP_PORT), "no connection to TCP 8080");
    // The named port resolved to the member's UDP 5353: dropped; its neighbour is not.
    assert!(!lab.udp_from_ext(VM_IP4, MDNS_PORT), "UDP 5353 is dropped");
    assert!(lab.udp_from_ext(VM_IP4, MDNS_PORT + 1), "UDP 5354 passes");

    // NetworkPolicyStatus: a failure naming the rule for the L7 policy; the other realized.
    wait_until(Duration::from_secs(30), "both NetworkPolicyStatuses", || {
        emu.status("uid-l7", "vm-ns/vm1").is_some() && emu.status("uid-mdns", "vm-ns/vm1").is_some()
    });
    let l7 = emu.status("uid-l7", "vm-ns/vm1").expect("status");
    assert!(l7.realization_failure, "{l7:?}");
    assert!(
        l7.message.contains("rule \"allow-ok\" (rules[0])") && l7.message.contains("l7Protocols"),
        "{l7:?}"
    );
    let mdns = emu.status("uid-mdns", "vm-ns/vm1").expect("status");
    assert!(!mdns.realization_failure && mdns.message.is_empty(), "{mdns:?}");

    // The gauge.
    let metrics = scrape(&lab);
    assert!(
        metrics.contains("antrea_vm_agent_rules_not_enforced{reason=\"l7_protocols\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("antrea_vm_agent_rules_not_enforced{reason=\"to_services\"} 0\n"));

    // get networkpolicy: each rule's state, the reason in the text output.
    let j: Value =
        serde_json::from_str(&get(&socket(&lab), &["networkpolicy", "web-l7", "-o", "json"])).expect("json");
    let rules = &j[0]["rules"];
    assert_eq!(rules[0]["state"], "NotEnforcedAsWritten", "{j}");
    assert!(
        rules[0]["notEnforced"][0]
            .as_str()
            .is_some_and(|m| m.contains("l7Protocols")),
        "{j}"
    );
    assert_eq!(rules[1]["state"], "Enforced", "{j}");
    let text = get(&socket(&lab), &["networkpolicy", "web-l7"]);
    assert!(
        text.contains("NotEnforcedAsWritten") && text.contains("not enforced as written: allow-ok:"),
        "{text}"
    );
    let j: Value =
        serde_json::from_str(&get(&socket(&lab), &["networkpolicy", "mdns", "-o", "json"])).expect("json");
    assert_eq!(j[0]["rules"][0]["state"], "Enforced", "{j}");

    // One log line for the rule, not one per resync (a controller restart makes the agent
    // resync every policy).
    emu.restart_controller();
    wait_until(
        Duration::from_secs(30),
        "the agent re-watches and re-posts",
        || {
            emu.status("uid-l7", "vm-ns/vm1")
                .is_some_and(|s| s.realization_failure)
        },
    );
    let log = agent.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("not enforced as written") && l.contains("allow-ok"))
        .count();
    assert_eq!(lines, 1, "{log}");
    assert!(
        !lab.tcp_from_ext(VM_IP4, HTTP_PORT),
        "still no connection to TCP 8080"
    );
    agent.stop();
}
