//! NetworkPolicies enforced on real traffic in the lab: controlplane objects in
//! `standalone.policyDir`, compiled into Antrea's conjunctive flows, and packets from the outside
//! host that are dropped or allowed as the rules say. IPv4 and IPv6.

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
    let ofport = |iface: &str| -> u32 {
        lab.ovs_vsctl(&["get", "Interface", iface, "ofport"])
            .trim()
            .parse()
            .expect("ofport")
    };
    let mut state = serde_json::json!({
        "interfaces": [{
            "name": NIC, "ofport": ofport(NIC), "uplinkOfport": ofport(UPLINK),
            "ips": [VM_IP4, VM_IP6],
            "externalEntity": {"namespace": EN_NAMESPACE, "name": "vm1-3e616"},
        }],
        "networkPolicies": [], "addressGroups": [], "appliedToGroups": [],
    });
    for text in objects {
        let obj: serde_json::Value = serde_norway::from_str(text).expect("object yaml");
        let key = match obj["kind"].as_str() {
            Some("NetworkPolicy") => "networkPolicies",
            Some("AddressGroup") => "addressGroups",
            Some("AppliedToGroup") => "appliedToGroups",
            other => panic!("unexpected kind {other:?}"),
        };
        state[key].as_array_mut().expect("list").push(obj);
    }
    let path = lab.unique_path("state", "json");
    std::fs::write(&path, state.to_string()).expect("write state");
    let out = std::process::Command::new(agent_binary())
        .args(["compile", "--state"])
        .arg(&path)
        .output()
        .expect("run compile");
    assert!(
        out.status.success(),
        "compile failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut flows: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    flows.sort();
    flows
}

fn conj_flows(lab: &Lab) -> usize {
    lab.dump_flows().iter().filter(|f| f.contains("conj_id=")).count()
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
    agent.stop();
}
