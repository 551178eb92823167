//! Kubernetes mode end to end in the lab: the agent in the VM namespace talks HTTPS to the
//! kube-apiserver + antrea-controller emulator, which runs in the outside host's namespace, so the
//! agent reaches it over its own uplink, through OVS once attached (like a real VM). The
//! ExternalNode comes from the emulator, policies come from the controlplane watches, and the
//! agent writes AntreaAgentInfo, NetworkPolicyStatus and NodeStatsSummary back.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use support::emulator::Emulator;
use support::*;

use support::emulator::{LAB_CONTROLLER_PORT as CONTROLLER_PORT, LAB_KUBE_PORT as EMULATOR_PORT};
/// The ExternalEntity the controller derives from the ExternalNode's `eth0` (antrea-apis §4.2).
const ENTITY: &str = "vm1-3e616";
/// Short report and stats periods so the test sees several within its time.
const FAST_REPORTS: [(&str, &str); 2] = [
    ("ANTREA_VM_AGENT_REPORT_INTERVAL", "2s"),
    ("ANTREA_VM_AGENT_STATS_INTERVAL", "3s"),
];

/// The emulator in the lab's outside host (see [`support::emulator::start_in_outside_host`]).
fn start_emulator(lab: &Lab) -> Emulator {
    support::emulator::start_in_outside_host(lab)
}

/// An agent config for Kubernetes mode with the emulator's kubeconfigs.
fn k8s_config(lab: &Lab, emu: &Emulator) -> PathBuf {
    k8s_config_with(lab, emu, "metricsServer:\n  bindAddress: \"\"\n")
}

/// [`k8s_config`] with `extra` YAML (a `metricsServer` section) in place of no metrics.
fn k8s_config_with(lab: &Lab, emu: &Emulator, extra: &str) -> PathBuf {
    support::emulator::lab_agent_config(lab, emu, extra)
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

fn applied_to_group() -> Value {
    json!({
        "apiVersion": "controlplane.antrea.io/v1beta2",
        "kind": "AppliedToGroup",
        "metadata": {"name": "atg-vm1", "uid": "atg-vm1"},
        "groupMembers": [{"externalEntity": {"name": ENTITY, "namespace": EN_NAMESPACE}}]
    })
}

/// An Antrea-native policy on the VM: drop TCP `drop_port` from the outside host, allow TCP
/// `allow_port` from it (named rules, so their stats are reported by name).
fn policy(generation: i64, drop_port: u16, allow_port: u16) -> Value {
    let from = json!({"ipBlocks": [{"cidr": {"ip": EXT_IP4, "prefixLength": 32}}]});
    json!({
        "apiVersion": "controlplane.antrea.io/v1beta2",
        "kind": "NetworkPolicy",
        "metadata": {"name": "uid-web", "uid": "uid-web", "generation": generation},
        "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": EN_NAMESPACE, "name": "web",
                      "uid": "uid-web"},
        "appliedToGroups": ["atg-vm1"],
        "priority": 5,
        "tierPriority": 250,
        "rules": [
            {"direction": "In", "name": "drop-tcp", "from": from.clone(),
             "services": [{"protocol": "TCP", "port": drop_port}], "action": "Drop", "priority": 0},
            {"direction": "In", "name": "allow-tcp", "from": from,
             "services": [{"protocol": "TCP", "port": allow_port}], "action": "Allow", "priority": 1}
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

/// The flows matching TCP destination port `port` (a policy on that port is installed).
fn port_flows(lab: &Lab, port: u16) -> usize {
    let needle = format!("tp_dst={port}");
    lab.dump_flows().iter().filter(|f| f.contains(&needle)).count()
}

fn condition(info: &Value, kind: &str) -> Option<String> {
    info["agentConditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// Blocks or unblocks the emulator's port in the outside host (TCP reset: "connection refused").
fn set_emulator_reachable(lab: &Lab, reachable: bool) {
    if reachable {
        lab.ext_ok("nft delete table inet emulator_block");
    } else {
        lab.ext_ok(&format!(
            "nft add table inet emulator_block && \
             nft add chain inet emulator_block input '{{ type filter hook input priority 0; }}' && \
             nft add rule inet emulator_block input tcp dport {{ {EMULATOR_PORT}, {CONTROLLER_PORT} }} reject with tcp reset"
        ));
    }
}

/// The `ruleTrafficStats` entries of every summary posted for policy `uid`, summed by rule name.
fn rule_totals(emu: &Emulator, uid: &str) -> std::collections::BTreeMap<String, (u64, u64, u64)> {
    let mut totals = std::collections::BTreeMap::new();
    for summary in emu.stats_summaries() {
        assert_eq!(
            summary["metadata"]["name"], NODE_NAME,
            "NodeStatsSummary is named by the bare node name"
        );
        for policy in summary["antreaNetworkPolicies"].as_array().into_iter().flatten() {
            if policy["networkPolicy"]["uid"] != uid {
                continue;
            }
            for rule in policy["ruleTrafficStats"].as_array().into_iter().flatten() {
                let name = rule["name"].as_str().unwrap_or_default().to_string();
                let stats = &rule["trafficStats"];
                let e = totals.entry(name).or_insert((0, 0, 0));
                e.0 += stats["packets"].as_u64().unwrap_or(0);
                e.1 += stats["bytes"].as_u64().unwrap_or(0);
                e.2 += stats["sessions"].as_u64().unwrap_or(0);
            }
        }
    }
    totals
}

#[test]
fn kubernetes_mode_attaches_enforces_reports_and_survives_controller_outages() {
    let lab = Lab::new();
    let emu = start_emulator(&lab);
    let config = k8s_config(&lab, &emu);
    let mut agent =
        lab.start_agent_with_env(&["run", "--config", &config.display().to_string()], &FAST_REPORTS);

    // No ExternalNode yet: nothing is attached, the agent waits.
    wait_until(
        Duration::from_secs(20),
        "the agent watches its ExternalNode",
        || emu.calls().iter().any(|c| c.path.contains("/externalnodes")),
    );
    assert!(
        !lab.vm_link_exists(UPLINK),
        "nothing attached without an ExternalNode"
    );

    // ExternalNode created → eth0 attached.
    emu.create_external_node(external_node())
        .expect("create the ExternalNode");
    wait_until(Duration::from_secs(30), "eth0 attached", || attached(&lab));
    lab.isolate_uplink();
    assert!(lab.tcp_from_ext(VM_IP4, 5201), "TCP passes before any policy");

    // Policy objects injected → enforced.
    emu.upsert_controlplane(json!([applied_to_group(), policy(1, 5201, 5202)]))
        .expect("inject the policy");
    wait_until(Duration::from_secs(30), "the policy's flows", || {
        port_flows(&lab, 5201) > 0
    });
    assert!(!lab.tcp_from_ext(VM_IP4, 5201), "TCP 5201 is dropped");
    assert!(lab.tcp_from_ext(VM_IP4, 5202), "TCP 5202 is allowed");
    assert!(lab.tcp_from_ext(VM_IP4, 5203), "other ports are not affected");

    // Realization reported: NetworkPolicyStatus with the namespaced node name and the generation.
    wait_until(Duration::from_secs(30), "NetworkPolicyStatus posted", || {
        emu.status("uid-web", "vm-ns/vm1")
            .is_some_and(|s| s.generation == 1)
    });

    // AntreaAgentInfo: every condition true.
    wait_until(
        Duration::from_secs(30),
        "AntreaAgentInfo with healthy conditions",
        || {
            emu.agent_info(NODE_NAME).is_some_and(|info| {
                [
                    "AgentHealthy",
                    "ControllerConnectionUp",
                    "OVSDBConnectionUp",
                    "OpenflowConnectionUp",
                ]
                .iter()
                .all(|c| condition(&info, c).as_deref() == Some("True"))
            })
        },
    );
    let info = emu.agent_info(NODE_NAME).expect("AntreaAgentInfo");
    assert_eq!(info["nodeRef"], json!({"kind": "Node", "name": NODE_NAME}));
    assert_eq!(info["ovsInfo"]["bridgeName"], BRIDGE);
    let version = lab.ovs_vsctl(&["get", "Open_vSwitch", ".", "ovs_version"]);
    assert_eq!(
        info["ovsInfo"]["version"].as_str(),
        Some(version.trim().trim_matches('"')),
        "{info}"
    );
    assert!(
        info["ovsInfo"]["flowTable"]["IngressRule"].as_u64().unwrap_or(0) > 0
            || info["ovsInfo"]["flowTable"]["AntreaPolicyIngressRule"]
                .as_u64()
                .unwrap_or(0)
                > 0,
        "flow counts per table: {info}"
    );
    assert_eq!(info["networkPolicyControllerInfo"]["networkPolicyNum"], 1);

    // Known traffic → the stats summary carries it on the right rules. The baseline was taken
    // when the policy was first realized, before any traffic, so the summaries add up to every
    // connection made since: the one above and these.
    const MORE_CONNECTIONS: u64 = 3;
    for _ in 0..MORE_CONNECTIONS {
        assert!(lab.tcp_from_ext(VM_IP4, 5202), "allowed connection");
    }
    let allowed = MORE_CONNECTIONS + 1;
    wait_until(
        Duration::from_secs(30),
        "stats for the allowed connections",
        || {
            rule_totals(&emu, "uid-web")
                .get("allow-tcp")
                .is_some_and(|a| a.2 >= allowed)
        },
    );
    let totals = rule_totals(&emu, "uid-web");
    let allow = totals.get("allow-tcp").copied().unwrap_or_default();
    assert_eq!(allow.2, allowed, "one session per allowed connection: {totals:?}");
    assert!(
        allow.0 >= 2 * allowed && allow.1 > 0,
        "packets and bytes counted: {totals:?}"
    );
    let drop = totals.get("drop-tcp").copied().unwrap_or_default();
    assert!(
        drop.0 >= 1,
        "the dropped SYNs are counted on the drop rule: {totals:?}"
    );

    // Controller restart: watches dropped, counters reset; enforcement continues, the agent
    // resyncs and follows a later change.
    emu.restart_controller();
    assert!(
        !lab.tcp_from_ext(VM_IP4, 5201),
        "still dropped right after the controller restart"
    );
    wait_until(Duration::from_secs(30), "the agent re-watches", || {
        emu.controlplane_watches("vm-ns/vm1").len() == 3
    });
    // The restarted controller forgot every status: the resync re-posts it, though no rule changed.
    wait_until(
        Duration::from_secs(30),
        "status re-posted after the controller restart",
        || {
            emu.status("uid-web", "vm-ns/vm1")
                .is_some_and(|s| s.generation == 1)
        },
    );
    emu.upsert_controlplane(policy(2, 5203, 5202))
        .expect("change the policy");
    wait_until(Duration::from_secs(30), "the changed policy's flows", || {
        port_flows(&lab, 5203) > 0 && port_flows(&lab, 5201) == 0
    });
    assert!(lab.tcp_from_ext(VM_IP4, 5201), "5201 passes after the change");
    assert!(
        !lab.tcp_from_ext(VM_IP4, 5203),
        "5203 is dropped after the change"
    );
    wait_until(
        Duration::from_secs(30),
        "status of generation 2 re-posted",
        || {
            emu.status("uid-web", "vm-ns/vm1")
                .is_some_and(|s| s.generation == 2)
        },
    );

    // Agent restarted while the controller is unreachable, and OVS restarted too so the flows
    // are gone: the policies come back from the fallback store.
    agent.stop();
    set_emulator_reachable(&lab, false);
    lab.restart_ovs();
    let mut agent =
        lab.start_agent_with_env(&["run", "--config", &config.display().to_string()], &FAST_REPORTS);
    wait_until(
        Duration::from_secs(40),
        "the policy reinstalled from the fallback store",
        || {
            lab.try_dump_flows()
                .is_ok_and(|flows| flows.iter().any(|f| f.contains("tp_dst=5203")))
        },
    );
    assert!(
        !lab.tcp_from_ext(VM_IP4, 5203),
        "5203 still dropped with the controller down"
    );
    assert!(
        lab.tcp_from_ext(VM_IP4, 5202),
        "5202 still allowed with the controller down"
    );
    set_emulator_reachable(&lab, true);
    wait_until(
        Duration::from_secs(40),
        "the agent reconnects to the controller",
        || emu.controlplane_watches("vm-ns/vm1").len() == 3,
    );

    // The agent never made a call its RBAC forbids.
    let refused: Vec<_> = emu
        .calls()
        .into_iter()
        .filter(|c| c.status == 401 || c.status == 403)
        .collect();
    assert!(refused.is_empty(), "calls outside the agent's RBAC: {refused:?}");

    // ExternalNode deleted → detached, the NIC restored.
    emu.delete_external_node(EN_NAMESPACE, NODE_NAME)
        .expect("delete the ExternalNode");
    lab.unisolate_uplink();
    wait_until(Duration::from_secs(30), "eth0 detached", || {
        !lab.vm_link_exists(UPLINK) && lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
    });
    agent.stop();
}

/// The metrics listener in this test's VM namespace.
const METRICS_PORT: u16 = 10462;
/// A short liveness timeout so the test need not wait the default's 35 s (whose values the
/// client's unit tests check).
const FAST_LIVENESS: (&str, &str) = ("ANTREA_VM_AGENT_LIVENESS_TIMEOUT", "6s");

/// `antrea_vm_agent_controller_connected` from `/metrics`, if the agent answered.
fn controller_connected_metric(lab: &Lab) -> Option<f64> {
    let out = lab.vm(&format!(
        "printf 'GET /metrics HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
    ));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("antrea_vm_agent_controller_connected "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// Black-holes one of the emulator's ports in the outside host: every packet to or from it is
/// dropped, so the agent gets no RST and no FIN (a dead host, a load balancer losing the flow).
fn set_black_hole(lab: &Lab, port: u16, on: bool) {
    let table = format!("black_hole_{port}");
    if on {
        lab.ext_ok(&format!(
            "nft add table inet {table} && \
             nft add chain inet {table} input '{{ type filter hook input priority -10; }}' && \
             nft add chain inet {table} output '{{ type filter hook output priority -10; }}' && \
             nft add rule inet {table} input tcp dport {port} drop && \
             nft add rule inet {table} output tcp sport {port} drop"
        ));
    } else {
        lab.ext_ok(&format!("nft delete table inet {table}"));
    }
}

fn set_controller_black_hole(lab: &Lab, on: bool) {
    set_black_hole(lab, CONTROLLER_PORT, on);
}

/// ExternalNode watches the emulator started (answered 200).
fn external_node_watch_opens(emu: &Emulator) -> usize {
    emu.calls()
        .iter()
        .filter(|c| {
            c.path.contains("/externalnodes")
                && c.query_param("watch").as_deref() == Some("true")
                && c.status == 200
        })
        .count()
}

fn status_posts(emu: &Emulator) -> usize {
    emu.calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/status"))
        .count()
}

/// Controlplane watches the emulator started (answered 200).
fn controlplane_watch_opens(emu: &Emulator) -> usize {
    emu.calls()
        .iter()
        .filter(|c| {
            c.path.starts_with("/apis/controlplane.antrea.io/")
                && c.query_param("watch").as_deref() == Some("true")
                && c.status == 200
        })
        .count()
}

fn controller_up(emu: &Emulator) -> Option<String> {
    emu.agent_info(NODE_NAME)
        .and_then(|info| condition(&info, "ControllerConnectionUp"))
}

#[test]
fn a_black_holed_controller_is_seen_down_while_policies_hold_and_the_heal_resyncs() {
    let lab = Lab::new();
    let emu = start_emulator(&lab);
    let config = k8s_config_with(
        &lab,
        &emu,
        &format!("metricsServer:\n  bindAddress: \"127.0.0.1:{METRICS_PORT}\"\n"),
    );
    let mut env = FAST_REPORTS.to_vec();
    env.push(FAST_LIVENESS);
    // The Go agent's command line: no subcommand, klog flags.
    let mut agent = lab.start_agent_with_env(
        &[
            "--config",
            &config.display().to_string(),
            "--v=0",
            "--logtostderr",
        ],
        &env,
    );
    emu.create_external_node(external_node())
        .expect("create the ExternalNode");
    wait_until(Duration::from_secs(30), "eth0 attached", || attached(&lab));
    lab.isolate_uplink();
    emu.upsert_controlplane(json!([applied_to_group(), policy(1, 5201, 5202)]))
        .expect("inject the policy");
    wait_until(Duration::from_secs(30), "the policy's flows", || {
        port_flows(&lab, 5201) > 0
    });
    wait_until(Duration::from_secs(30), "NetworkPolicyStatus posted", || {
        emu.status("uid-web", "vm-ns/vm1")
            .is_some_and(|s| s.generation == 1)
    });
    wait_until(Duration::from_secs(30), "the controller reported up", || {
        controller_up(&emu).as_deref() == Some("True") && controller_connected_metric(&lab) == Some(1.0)
    });

    // The server closes the watches (as antrea-controller does every 2-4 h) three times with
    // nothing changed: each reopen resyncs, and no status is posted again.
    let posts = status_posts(&emu);
    for round in 1..=3 {
        let opened = controlplane_watch_opens(&emu);
        emu.close_watches();
        wait_until(Duration::from_secs(20), "the agent re-watches", || {
            controlplane_watch_opens(&emu) >= opened + 3 && emu.controlplane_watches("vm-ns/vm1").len() == 3
        });
        println!("clean reopen {round}: {} status POSTs in all", status_posts(&emu));
    }
    // A few report periods for any late post to show.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        status_posts(&emu),
        posts,
        "no NetworkPolicyStatus re-posted over reopens that changed nothing"
    );

    // Black hole: the allowed traffic keeps flowing throughout.
    let flood = lab.start_ping_flood(true, VM_IP4, 50);
    let holed = std::time::Instant::now();
    set_controller_black_hole(&lab, true);
    // A change the agent cannot see yet.
    emu.upsert_controlplane(policy(2, 5203, 5202))
        .expect("change the policy");
    wait_until(
        Duration::from_secs(60),
        "ControllerConnectionUp False and the metric 0",
        || controller_up(&emu).as_deref() == Some("False") && controller_connected_metric(&lab) == Some(0.0),
    );
    let detected = holed.elapsed();
    println!("silent controller detected after {detected:?}");
    assert!(detected < Duration::from_secs(60), "{detected:?}");
    // The last policies are still enforced.
    assert!(!lab.tcp_from_ext(VM_IP4, 5201), "5201 still dropped");
    assert!(lab.tcp_from_ext(VM_IP4, 5202), "5202 still allowed");
    assert!(lab.tcp_from_ext(VM_IP4, 5203), "the unseen change is not applied");
    assert!(agent.is_running(), "the agent runs on");

    // Heal: the change is enforced within 10 s.
    set_controller_black_hole(&lab, false);
    let healed = std::time::Instant::now();
    wait_until(Duration::from_secs(10), "the changed policy's flows", || {
        port_flows(&lab, 5203) > 0 && port_flows(&lab, 5201) == 0
    });
    println!("changed policy enforced {:?} after the heal", healed.elapsed());
    assert!(!lab.tcp_from_ext(VM_IP4, 5203), "5203 dropped after the heal");
    assert!(lab.tcp_from_ext(VM_IP4, 5201), "5201 passes after the heal");
    assert!(lab.tcp_from_ext(VM_IP4, 5202), "5202 still allowed");
    wait_until(
        Duration::from_secs(30),
        "the controller reported up again",
        || controller_up(&emu).as_deref() == Some("True") && controller_connected_metric(&lab) == Some(1.0),
    );
    let mut flood = flood;
    let ping = flood.finish_result();
    println!(
        "ping across the outage: {}/{} answered",
        ping.received, ping.transmitted
    );
    assert!(
        ping.transmitted > 100 && ping.received == ping.transmitted && ping.duplicates == 0,
        "allowed traffic lost across the outage: {}",
        ping.output
    );
    // kube-apiserver black-holed in turn: its ExternalNode watch (which asks for 5-minute
    // watches) is found dead by the same TCP liveness and reopened soon after the heal, long
    // before its own timeout would.
    let en_watches = external_node_watch_opens(&emu);
    set_black_hole(&lab, EMULATOR_PORT, true);
    std::thread::sleep(Duration::from_secs(12));
    set_black_hole(&lab, EMULATOR_PORT, false);
    let kube_healed = std::time::Instant::now();
    wait_until(Duration::from_secs(15), "a new ExternalNode watch", || {
        external_node_watch_opens(&emu) > en_watches
    });
    println!(
        "ExternalNode watch reopened {:?} after kube-apiserver's heal",
        kube_healed.elapsed()
    );
    assert!(attached(&lab), "the interface stays attached");
    // The broken watches may hide a controller restart: the statuses went out again, at the
    // new generation.
    wait_until(Duration::from_secs(30), "status of generation 2 posted", || {
        emu.status("uid-web", "vm-ns/vm1")
            .is_some_and(|s| s.generation == 2)
    });
    agent.stop();
}
