//! NetworkPolicies enforced on real traffic in the lab: controlplane objects in
//! `standalone.policyDir`, compiled into Antrea's conjunctive flows, and packets from the outside
//! host that are dropped or allowed as the rules say. IPv4 and IPv6.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

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

fn policy_dir(lab: &Lab) -> PathBuf {
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    dir
}

fn write_policy(lab: &Lab, file: &str, yaml: &str) {
    let dir = policy_dir(lab);
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write policy");
    std::fs::rename(&tmp, dir.join(file)).expect("move policy in place");
}

/// A lab with eth0 attached, the agent watching a policy directory that holds `APPLIED_TO`.
fn attached_with_policies(lab: &Lab) -> AgentProcess {
    write_policy(lab, "00-atg.yaml", APPLIED_TO);
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\n",
        policy_dir(lab).display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "attached and flows committed", || {
        lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
            && lab
                .ovs_vsctl_output(&["get", "Bridge", BRIDGE, "external_ids:roundNum"])
                .status
                .success()
    });
    agent
}

/// `antrea-vm-agent compile` for the lab's interface and the given controlplane objects.
fn compile_flows(lab: &Lab, objects: &[&str]) -> Vec<String> {
    compile_flows_with(lab, objects, serde_json::json!([]))
}

/// [`compile_flows`] with `policyBypassRules`, sorted like [`Lab::dump_flows`].
fn compile_flows_with(lab: &Lab, objects: &[&str], bypass: serde_json::Value) -> Vec<String> {
    let mut flows: Vec<String> = lab
        .compile_state(objects, bypass)
        .lines()
        .map(str::to_string)
        .collect();
    flows.sort();
    flows
}

fn conj_flows(lab: &Lab) -> usize {
    // The DNS interception (conjunction 1, priority 64991) is always there.
    lab.dump_flows()
        .iter()
        .filter(|f| f.contains("conj_id=") && !f.contains("priority=64991"))
        .count()
}

#[test]
fn ingress_tcp_drop_by_ip_block_then_delete_the_policy() {
    let lab = Lab::new();
    let mut agent = attached_with_policies(&lab);
    assert!(lab.tcp_from_ext(VM_IP4, 5201), "TCP passes before any policy");
    write_policy(
        &lab,
        "10-drop.yaml",
        &format!(
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
        ),
    );
    wait_until(Duration::from_secs(20), "the policy's flows", || {
        conj_flows(&lab) > 0
    });
    let policy = std::fs::read_to_string(policy_dir(&lab).join("10-drop.yaml")).expect("read policy");
    assert_eq!(
        lab.dump_flows(),
        compile_flows(&lab, &[APPLIED_TO, &policy]),
        "OVS holds what compile prints"
    );
    assert!(
        !lab.tcp_from_ext(VM_IP4, 5201),
        "TCP to 5201 over IPv4 is dropped"
    );
    assert!(
        !lab.tcp_from_ext(VM_IP6, 5201),
        "TCP to 5201 over IPv6 is dropped"
    );
    assert!(lab.tcp_from_ext(VM_IP4, 5202), "another port still passes");
    assert!(
        lab.tcp_from_vm(EXT_IP4, 5201),
        "egress is not affected by an ingress rule"
    );
    assert!(
        lab.ping_from_ext(VM_IP4, 2).all_received(),
        "ICMP is not matched by a TCP rule"
    );

    std::fs::remove_file(policy_dir(&lab).join("10-drop.yaml")).expect("delete the policy");
    wait_until(Duration::from_secs(20), "the policy's flows removed", || {
        conj_flows(&lab) == 0
    });
    assert!(
        lab.tcp_from_ext(VM_IP4, 5201),
        "TCP to 5201 passes again after the delete"
    );
    assert_ovs_equals_compile(&lab, serde_json::json!([]));
    agent.stop();
}

/// Every object in the policy directory.
fn policy_files(lab: &Lab) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(policy_dir(lab))
        .expect("policy dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("read policy"))
        .collect()
}

/// OVS holds exactly what `compile` prints for the current state.
fn assert_ovs_equals_compile(lab: &Lab, bypass: serde_json::Value) {
    let files = policy_files(lab);
    let objects: Vec<&str> = files.iter().map(String::as_str).collect();
    assert_eq!(
        lab.dump_flows(),
        compile_flows_with(lab, &objects, bypass),
        "OVS holds what compile prints"
    );
}

/// A NetworkPolicy object applied to the lab VM, in YAML.
fn policy(name: &str, tier_priority: i32, priority: f64, rules: &str) -> String {
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-{name}, uid: uid-{name}}}
sourceRef: {{type: AntreaClusterNetworkPolicy, name: {name}, uid: uid-{name}}}
appliedToGroups: [atg-vm1]
priority: {priority}
tierPriority: {tier_priority}
rules:
{rules}"
    )
}

fn ping_from(lab: &Lab, source: &str, target: &str) -> bool {
    lab.ext(&format!("ping -n -c 2 -i 0.2 -W 1 -I {source} {target}"))
        .status
        .success()
}

#[test]
fn port_range_priorities_tiers_and_pass() {
    let lab = Lab::new();
    let mut agent = attached_with_policies(&lab);
    let any = "{ipBlocks: [{cidr: 0.0.0.0/0}, {cidr: \"::/0\"}]}";
    // Application tier: drop 6000-6010 (a range), but a higher-priority policy allows 6001 and 6003.
    write_policy(&lab, "20-app-drop.yaml", &policy("app-drop", 250, 10.0, &format!(
        "- {{direction: In, from: {any}, services: [{{protocol: TCP, port: 6000, endPort: 6010}}], action: Drop, priority: 0}}\n")));
    write_policy(&lab, "21-app-allow.yaml", &policy("app-allow", 250, 1.0, &format!(
        "- {{direction: In, from: {any}, services: [{{protocol: TCP, port: 6001}}, {{protocol: TCP, port: 6003}}], action: Allow, priority: 0}}\n")));
    // Emergency tier (evaluated first): drop 6003 whatever the application tier says; pass 6004
    // (skip the remaining tiers, so the application-tier drop does not apply to it).
    write_policy(&lab, "22-emergency.yaml", &policy("emergency", 50, 100.0, &format!(
        "- {{direction: In, from: {any}, services: [{{protocol: TCP, port: 6003}}], action: Drop, priority: 0}}\n\
         - {{direction: In, from: {any}, services: [{{protocol: TCP, port: 6004}}], action: Pass, priority: 1}}\n")));
    wait_until(Duration::from_secs(20), "the policies' flows", || {
        conj_flows(&lab) >= 5
    });
    assert!(!lab.tcp_from_ext(VM_IP4, 6002), "6002 is in the dropped range");
    assert!(
        !lab.tcp_from_ext(VM_IP6, 6010),
        "6010 is in the dropped range (IPv6)"
    );
    assert!(lab.tcp_from_ext(VM_IP4, 6011), "6011 is outside the range");
    assert!(
        lab.tcp_from_ext(VM_IP4, 6001),
        "a higher-priority Allow beats a lower-priority Drop"
    );
    assert!(
        !lab.tcp_from_ext(VM_IP4, 6003),
        "a higher tier's Drop beats a lower tier's Allow"
    );
    assert!(
        lab.tcp_from_ext(VM_IP4, 6004),
        "Pass skips the application tier's Drop"
    );
    assert_ovs_equals_compile(&lab, serde_json::json!([]));
    agent.stop();
}

#[test]
fn ip_block_except_icmp_from_one_source_and_egress_drop() {
    let lab = Lab::new();
    lab.ext_ok(&format!("ip addr add 10.99.0.9/24 dev {EXT_NIC}"));
    let mut agent = attached_with_policies(&lab);
    write_policy(&lab, "30-icmp.yaml", &policy("icmp", 250, 1.0,
        "- {direction: In, from: {ipBlocks: [{cidr: 10.99.0.0/24, except: [10.99.0.1/32]}]}, services: [{protocol: ICMP}], action: Drop, priority: 0}\n"));
    write_policy(&lab, "31-egress.yaml", &policy("egress", 250, 2.0, &format!(
        "- {{direction: Out, to: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: TCP, port: 6200}}], action: Drop, priority: 0}}\n")));
    wait_until(Duration::from_secs(20), "the policies' flows", || {
        conj_flows(&lab) >= 2
    });
    assert!(
        !ping_from(&lab, "10.99.0.9", VM_IP4),
        "ICMP from 10.99.0.9 is dropped"
    );
    assert!(
        ping_from(&lab, EXT_IP4, VM_IP4),
        "ICMP from the excepted 10.99.0.1 passes"
    );
    assert!(
        lab.ping_from_ext(VM_IP6, 2).all_received(),
        "IPv6 ICMP is outside the IPv4 block"
    );
    assert!(
        !lab.tcp_from_vm(EXT_IP4, 6200),
        "egress TCP to the blocked destination port is dropped"
    );
    assert!(
        lab.tcp_from_vm(EXT_IP4, 6201),
        "egress TCP to another port passes"
    );
    assert_ovs_equals_compile(&lab, serde_json::json!([]));
    agent.stop();
}

#[test]
fn bypass_beats_deny_all_established_connections_survive_and_updates_apply() {
    let lab = Lab::new();
    write_policy(&lab, "00-atg.yaml", APPLIED_TO);
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nexternalNode:\n  policyBypassRules:\n  \
         - {{direction: ingress, protocol: tcp, cidr: 10.99.0.0/24, port: 6300}}\n",
        policy_dir(&lab).display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "attached", || {
        lab.ping_from_ext(VM_IP4, 1).all_received()
    });

    // A connection established before the deny-all policy: its later data still flows.
    let out = lab.dir().join("established.out");
    let mut server = lab.ns_command(lab.vm_ns(), "nc");
    server.args(["-l", "-n", VM_IP4, "6400"]);
    server
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).expect("out file"));
    let mut server = server.spawn().expect("start the listener");
    wait_until(Duration::from_secs(5), "the listener", || {
        lab.vm("ss -Hltn 'sport = :6400' | grep -q 6400").status.success()
    });
    let mut client = lab.ns_command(lab.ext_ns(), "sh");
    client.args([
        "-c",
        &format!("(echo first; sleep 4; echo second) | nc -N -n {VM_IP4} 6400"),
    ]);
    client
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let mut client = client.spawn().expect("start the client");
    wait_until(Duration::from_secs(5), "the first line before the policy", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("first"))
    });
    let deny_all = |action: &str| {
        policy("deny-all", 250, 5.0, &format!(
            "- {{direction: In, from: {{ipBlocks: [{{cidr: 0.0.0.0/0}}, {{cidr: \"::/0\"}}]}}, action: {action}, priority: 0}}\n"
        ))
    };
    write_policy(&lab, "40-deny-all.yaml", &deny_all("Drop"));
    wait_until(
        Duration::from_secs(3),
        "deny-all enforced (new pings dropped)",
        || !lab.ping_from_ext(VM_IP4, 1).all_received(),
    );
    let arrived = || std::fs::read_to_string(&out).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !arrived().contains("second") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        arrived().contains("second"),
        "the established connection's data after the policy: {:?}\n{}",
        arrived(),
        lab.dump_flows()
            .iter()
            .filter(|f| f.contains("AntreaPolicyIngressRule"))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    let _ = (client.kill(), client.wait(), server.kill(), server.wait());
    assert!(
        lab.tcp_from_ext(VM_IP4, 6300),
        "the bypass rule wins over deny-all"
    );
    assert!(!lab.tcp_from_ext(VM_IP4, 6301), "everything else is denied");
    // An update takes effect on the next connection.
    write_policy(&lab, "40-deny-all.yaml", &deny_all("Allow"));
    wait_until(Duration::from_secs(20), "the update applied", || {
        lab.ping_from_ext(VM_IP4, 1).all_received()
    });
    assert!(lab.tcp_from_ext(VM_IP4, 6301), "allowed after the update");
    assert_ovs_equals_compile(
        &lab,
        serde_json::json!([{"direction": "ingress", "protocol": "tcp", "cidr": "10.99.0.0/24", "port": 6300}]),
    );
    agent.stop();
}

/// The outside host's count of received ICMP (or ICMPv6) destination-unreachable messages.
fn ext_dest_unreachs(lab: &Lab, v6: bool) -> u64 {
    let (file, key) = if v6 {
        ("/proc/net/snmp6", "Icmp6InDestUnreachs")
    } else {
        ("/proc/net/snmp", "InDestUnreachs")
    };
    let text = lab.ext_ok(&format!("cat {file}"));
    if v6 {
        return text
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0);
    }
    // /proc/net/snmp: a header line of names followed by a line of values, per protocol.
    let icmp: Vec<&str> = text.lines().filter(|l| l.starts_with("Icmp:")).collect();
    let (Some(names), Some(values)) = (icmp.first(), icmp.get(1)) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn reject_answers_tcp_with_rst_and_udp_with_one_icmp_error_and_logs() {
    let lab = Lab::new();
    write_policy(&lab, "00-atg.yaml", APPLIED_TO);
    let audit_dir = lab.dir().join("audit");
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nauditLogging:\n  logDir: {}\n",
        policy_dir(&lab).display(),
        audit_dir.display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    let any = "{ipBlocks: [{cidr: 0.0.0.0/0}, {cidr: \"::/0\"}]}";
    write_policy(&lab, "50-reject.yaml", &policy("reject", 250, 1.0, &format!(
        "- {{name: no-6500, direction: In, from: {any}, services: [{{protocol: TCP, port: 6500}}], action: Reject, enableLogging: true, priority: 0}}\n\
         - {{direction: In, from: {any}, services: [{{protocol: UDP, port: 6501}}], action: Reject, priority: 1}}\n")));
    wait_until(Duration::from_secs(30), "the reject rules", || {
        conj_flows(&lab) >= 2
    });
    // The packet-in responder has a connection of its own, which may come up after the flows
    // (it retries with a backoff while the bridge is being created): until it is there, a
    // rejected packet is only dropped. Probe until the first reply proves it answers.
    wait_until(
        Duration::from_secs(30),
        "the packet-in responder's first reply",
        || {
            let before = ext_dest_unreachs(&lab, false);
            lab.ext(&format!("echo warm-up | nc -u -n -w 1 {VM_IP4} 6501"));
            std::thread::sleep(Duration::from_millis(200));
            ext_dest_unreachs(&lab, false) > before
        },
    );

    for (ip, v6) in [(VM_IP4, false), (VM_IP6, true)] {
        let before = ext_dest_unreachs(&lab, v6);
        lab.ext(&format!("echo probe | nc -u -n -w 1 {ip} 6501"));
        wait_until(Duration::from_secs(5), "an ICMP destination unreachable", || {
            ext_dest_unreachs(&lab, v6) > before
        });
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            ext_dest_unreachs(&lab, v6),
            before + 1,
            "exactly one reply to one UDP datagram to {ip}"
        );
    }

    for ip in [VM_IP4, VM_IP6] {
        let out = lab.ext(&format!("nc -v -z -n -w 3 {ip} 6500"));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !out.status.success() && err.contains("refused"),
            "TCP to {ip}:6500 is refused by a RST: {err}"
        );
    }
    // Stopped at once, within the Reject lines' one-second deduplication window: the agent
    // writes the lines it was still collecting before it exits.
    agent.stop();
    assert!(
        lab.tcp_from_ext(VM_IP4, 6502),
        "other ports pass (the flows stay)"
    );

    let log_path = audit_dir.join("np.log");
    let log = std::fs::read_to_string(&log_path).expect("np.log");
    for ip in [VM_IP4, VM_IP6] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!(" {ip} 6500 ")))
            .unwrap_or_else(|| panic!("a line for the rejected connection to {ip}:\n{log}"));
        assert!(line.contains("Reject"), "{line}");
        assert!(line.contains("reject"), "names the policy: {line}");
        assert!(
            line.contains("vm-ns/vm1-3e616"),
            "names the applied-to ExternalEntity: {line}"
        );
    }
    assert_ovs_equals_compile(&lab, serde_json::json!([]));
}
