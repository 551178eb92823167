//! Self-healing under a continuous probe: each fault (flows deleted, bridge deleted, OVS
//! restarted on a fresh database, a port deleted, the uplink renamed by hand, the state
//! directory full during an attach and a detach) is injected while TCP connections to an
//! allowed and a denied port are tried every 50 ms over IPv4 and IPv6. For each: no denied
//! connection ever gets through, the allowed ones are back within 5 s (printed), and the host
//! keeps its addresses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::*;

const ALLOWED: u16 = 8080;
const DENIED: u16 = 9090;
const METRICS_PORT: u16 = 10471;
/// The issue's bound for the allowed connection to come back after a fault.
const BACK_WITHIN: Duration = Duration::from_secs(5);

const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

fn deny_policy() -> String {
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-deny, uid: uid-deny}}
sourceRef: {{type: AntreaClusterNetworkPolicy, name: deny-{DENIED}, uid: uid-deny}}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
- direction: In
  from: {{ipBlocks: [{{cidr: 0.0.0.0/0}}, {{cidr: \"::/0\"}}]}}
  services: [{{protocol: TCP, port: {DENIED}}}]
  action: Drop
  priority: 0
"
    )
}

fn policy_dir(lab: &Lab) -> PathBuf {
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    dir
}

/// eth0 attached with the deny policy enforced, the probe running and seeing the allowed port
/// open and the denied one closed.
fn enforced(lab: &Lab) -> (AgentProcess, ConnProbe) {
    std::fs::write(policy_dir(lab).join("00-atg.yaml"), APPLIED_TO).expect("write policy");
    std::fs::write(policy_dir(lab).join("10-deny.yaml"), deny_policy()).expect("write policy");
    let config = agent_config(lab);
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(30),
        "attached with the policy's flows",
        || {
            lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
                && lab
                    .try_dump_flows()
                    .is_ok_and(|f| f.iter().any(|l| l.contains("conj_id=")))
        },
    );
    let probe = lab.start_conn_probe(ALLOWED, DENIED);
    let since = probe.now();
    probe.wait_back(since, Duration::from_secs(20));
    (agent, probe)
}

/// The agent's configuration: the policy directory, metrics and API socket of the lab.
fn agent_config(lab: &Lab) -> PathBuf {
    lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nmetricsServer:\n  bindAddress: \"127.0.0.1:{METRICS_PORT}\"\nagentAPI:\n  socket: {}\n",
        policy_dir(lab).display(),
        api_socket(lab).display()
    ))
}

fn api_socket(lab: &Lab) -> PathBuf {
    lab.dir().join("api.sock")
}

fn scrape(lab: &Lab) -> String {
    lab.vm(&format!(
        "printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
    ))
    .stdout_text()
}

fn repairs(lab: &Lab, kind: &str) -> u64 {
    let needle = format!("antrea_vm_agent_datapath_repairs_total{{kind=\"{kind}\"}} ");
    scrape(lab)
        .lines()
        .find_map(|l| l.strip_prefix(needle.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What the datapath looks like when the allowed connections do not come back.
fn diagnose(lab: &Lab) -> String {
    let appctl = |args: &[&str]| {
        let out = lab.ovs_appctl(args);
        format!("{}{}", out.stdout_text(), String::from_utf8_lossy(&out.stderr))
    };
    let vswitchd_log = std::fs::read_to_string(lab.run_dir().join("ovs-vswitchd.log")).unwrap_or_default();
    let warnings: Vec<&str> = vswitchd_log
        .lines()
        .filter(|l| l.contains("|WARN|") || l.contains("|ERR|"))
        .collect();
    let conntrack = appctl(&["dpctl/dump-conntrack"]);
    let conntrack6: Vec<&str> = conntrack
        .lines()
        .filter(|l| l.contains("fd00"))
        .take(10)
        .collect();
    format!(
        "VM neighbours and sockets:\n{}\noutside neighbours and sockets:\n{}\n\
         ovs-vswitchd warnings:\n{}\nIPv6 conntrack:\n{}\nupcalls:\n{}\n\
         trace of an IPv6 SYN:\n{}\ndatapath flows:\n{}\nflows:\n{}",
        lab.vm("ip neigh; ss -tan | head -20").stdout_text(),
        lab.ext("ip neigh; ss -tan | head -20").stdout_text(),
        warnings.join("\n"),
        conntrack6.join("\n"),
        appctl(&["upcall/show"]),
        appctl(&[
            "ofproto/trace",
            BRIDGE,
            "in_port=eth0~,tcp6,ipv6_src=fd00:99::1,ipv6_dst=fd00:99::2,tcp_src=40000,tcp_dst=8080,tcp_flags=0x002",
        ]),
        appctl(&["dpctl/dump-flows", "-m"]),
        lab.try_dump_flows().unwrap_or_default().join("\n")
    )
}

/// Injects a fault under the probe and checks the three promises; returns the recovery.
fn survive(lab: &Lab, probe: &ConnProbe, name: &str, inject: impl FnOnce()) -> Recovery {
    let since = probe.now();
    inject();
    let rec = probe
        .try_wait_back(since, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{name}: {e}\n{}", diagnose(lab)));
    println!("{name}: allowed connections back after {rec}");
    assert!(
        rec.worst() <= BACK_WITHIN,
        "{name}: the allowed connections took longer than {BACK_WITHIN:?}: {rec}"
    );
    let through = probe.denied_through();
    assert!(
        through.is_empty(),
        "{name}: denied connections got through: {through:?}"
    );
    let addrs = lab.vm_addrs(NIC);
    assert!(
        addrs.iter().any(|a| a.starts_with(VM_IP4)) && addrs.iter().any(|a| a.starts_with(VM_IP6)),
        "{name}: eth0 holds its addresses: {addrs:?}"
    );
    rec
}

#[test]
fn deleted_flows_groups_and_meters_are_repaired_under_traffic() {
    let lab = Lab::new();
    let (mut agent, probe) = enforced(&lab);
    let mgmt = format!("unix:{}", lab.mgmt_sock().display());
    let expected = lab.dump_flows();
    survive(&lab, &probe, "del-flows", || {
        lab.vm_ok(&format!("ovs-ofctl -O OpenFlow15 del-flows {mgmt}"));
    });
    wait_until(Duration::from_secs(10), "the same flows as before", || {
        lab.try_dump_flows().is_ok_and(|f| f == expected)
    });
    assert_eq!(repairs(&lab, "flows"), 1, "one repair counted");
    assert!(agent.log().contains("repaired"), "the repair is logged");
    // OVS deletes the flows that use a deleted group or meter: both come back with them.
    for (what, dump) in [("groups", "dump-groups"), ("meters", "dump-meters")] {
        let dump = format!("ovs-ofctl -O OpenFlow15 {dump} {mgmt} | sort");
        let before = lab.vm_ok(&dump);
        let repaired = repairs(&lab, "flows");
        survive(&lab, &probe, &format!("del-{what}"), || {
            lab.vm_ok(&format!("ovs-ofctl -O OpenFlow15 del-{what} {mgmt}"));
        });
        let back =
            |lab: &Lab| lab.vm_ok(&dump) == before && lab.try_dump_flows().is_ok_and(|f| f == expected);
        if !poll_until(Duration::from_secs(10), || back(&lab)) {
            assert_eq!(lab.vm_ok(&dump), before, "the {what} are back");
            assert_eq!(lab.dump_flows(), expected, "the flows are back");
        }
        assert_eq!(
            repairs(&lab, "flows"),
            repaired + 1,
            "the {what} repair is counted"
        );
    }
    println!("probe attempts: {}", probe.attempts());
    drop(probe);
    agent.stop();
}

#[test]
fn bridge_ports_and_uplink_are_rebuilt_under_traffic() {
    let lab = Lab::new();
    let (mut agent, probe) = enforced(&lab);
    let ports = || lab.ovs_vsctl(&["list-ports", BRIDGE]);
    let attached = |lab: &Lab| {
        lab.ovs_vsctl_output(&["list-ports", BRIDGE])
            .stdout_text()
            .lines()
            .collect::<Vec<_>>()
            == vec![NIC, UPLINK]
    };
    assert!(attached(&lab), "ports: {}", ports());
    survive(&lab, &probe, "del-port of the internal port", || {
        lab.ovs_vsctl(&["del-port", BRIDGE, NIC]);
    });
    survive(&lab, &probe, "del-port of the uplink", || {
        lab.ovs_vsctl(&["del-port", BRIDGE, UPLINK]);
    });
    assert!(repairs(&lab, "port") >= 2, "port repairs counted");
    survive(&lab, &probe, "uplink renamed by hand", || {
        lab.vm_ok(&format!(
            "ip link set '{UPLINK}' down && ip link set '{UPLINK}' name upl-hand && ip link set upl-hand up"
        ));
    });
    // The userspace datapath keeps its socket on the renamed link, so traffic may not even
    // stop; the name still comes back (OVS would lose the port at its next reconfiguration).
    wait_until(Duration::from_secs(5), "the uplink's name back", || {
        lab.vm_link_exists(UPLINK) && !lab.vm_link_exists("upl-hand")
    });
    survive(&lab, &probe, "del-br", || {
        lab.ovs_vsctl(&["del-br", BRIDGE]);
    });
    assert!(repairs(&lab, "bridge") >= 1, "the bridge repair is counted");
    survive(&lab, &probe, "OVS restarted with a fresh database", || {
        lab.restart_ovs_with_fresh_db();
    });
    assert!(attached(&lab), "ports after everything: {}", ports());
    assert!(agent.is_running());
    println!("probe attempts: {}", probe.attempts());
    drop(probe);
    agent.stop();
}

/// The netdev datapath's internal ports are persistent taps: when ovs-vswitchd stops, `eth0`
/// stays behind with the VM's addresses and MAC and nothing attached to it (no carrier). With the
/// agent down while OVS comes back on a fresh database, the agent finds its record, no ports, the
/// uplink `eth0~` and that leftover holding the NIC's name. Before the fix it rolled the record
/// back and stuck there for good ("netdev did not disappear"), the host without its addresses
/// until the tap was deleted by hand. Now the interface is re-attached from its record (OVS
/// re-opens the tap, so the addresses never leave it): enforced again within 5 s of the start,
/// no denied connection through, the uplink untouched.
#[test]
fn a_fresh_database_while_the_agent_is_down_reattaches_over_the_stale_tap() {
    let lab = Lab::new();
    let (mut agent, probe) = enforced(&lab);
    agent.kill_hard();
    lab.restart_ovs_with_fresh_db();
    // The leftover: a tap named eth0, holding the addresses, owned by no OVS port.
    assert_eq!(
        lab.vm_link_driver(NIC).as_deref(),
        Some("tun"),
        "the stale tap is there"
    );
    assert_eq!(
        lab.ovs_vsctl_output(&["br-exists", BRIDGE]).status.code(),
        Some(2),
        "no bridge"
    );
    let uplink_before = lab.vm_link(UPLINK).expect("the uplink");
    let since = probe.now();
    let mut agent = lab.start_agent(&agent_config(&lab));
    let rec = probe
        .try_wait_back(since, Duration::from_secs(30))
        .unwrap_or_else(|e| {
            panic!(
                "agent started on a fresh database: {e}\n{}\nagent log:\n{}",
                diagnose(&lab),
                agent.log()
            )
        });
    println!("agent started on a fresh database with the stale tap: allowed connections back after {rec} (from the start)");
    assert!(
        rec.worst() <= BACK_WITHIN,
        "took longer than {BACK_WITHIN:?}: {rec}"
    );
    let through = probe.denied_through();
    assert!(through.is_empty(), "denied connections got through: {through:?}");
    let addrs = lab.vm_addrs(NIC);
    assert!(
        addrs.iter().any(|a| a.starts_with(VM_IP4)) && addrs.iter().any(|a| a.starts_with(VM_IP6)),
        "eth0 holds its addresses: {addrs:?}"
    );
    let uplink_after = lab.vm_link(UPLINK).expect("the uplink");
    assert_eq!(
        uplink_after.index, uplink_before.index,
        "the uplink was never deleted"
    );
    assert!(agent.log().contains("re-attaching it from its record"), "logged");
    assert!(agent.is_running());
    drop(probe);
    agent.stop();
}

/// The same leftover in the way of a detach: ovs-vswitchd is gone (killed, not restarted) when
/// the ExternalNode stops listing the interface. OVSDB drops the ports, but nobody closes the
/// persistent tap, so before the fix the detach waited for it forever and the NIC never got its
/// name back. Now the tap (persistent, the record's MAC, no carrier, no OVS port) is deleted,
/// logged and counted, and the NIC is itself again with its addresses.
#[test]
fn a_stale_tap_in_the_way_of_a_detach_is_deleted() {
    let lab = Lab::new();
    let (mut agent, probe) = enforced(&lab);
    drop(probe);
    let nic_mac = lab.vm_link(UPLINK).expect("the uplink").mac;
    lab.kill_vswitchd();
    let tap = lab.vm_link(NIC).expect("the stale tap");
    assert_eq!(lab.vm_link_driver(NIC).as_deref(), Some("tun"));
    let started = std::time::Instant::now();
    lab.remove_external_node();
    let restored = |lab: &Lab| {
        lab.vm_link_driver(NIC).as_deref() == Some("veth")
            && !lab.vm_link_exists(UPLINK)
            && lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
            && lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP6))
    };
    if !poll_until(Duration::from_secs(15), || restored(&lab)) {
        panic!(
            "eth0 not restored: links\n{}\nagent log:\n{}",
            lab.vm("ip -d link").stdout_text(),
            agent.log()
        );
    }
    println!(
        "stale tap #{} deleted and eth0 restored {:.2} s after the ExternalNode changed",
        tap.index,
        started.elapsed().as_secs_f64()
    );
    let nic = lab.vm_link(NIC).expect("eth0");
    assert_eq!(nic.mac, nic_mac, "the NIC itself is back");
    assert_ne!(nic.index, tap.index, "the tap is gone");
    assert!(
        agent.log().contains("leftover internal port"),
        "the deletion is logged"
    );
    wait_until(Duration::from_secs(5), "the deletion counted", || {
        repairs(&lab, "stale_device") == 1
    });
    assert!(agent.is_running());
    agent.stop();
}

/// A small tmpfs mounted on a directory for the length of a test.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&dir).expect("create the mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        Tmpfs(dir)
    }

    /// Fills the filesystem up to the last byte.
    fn fill(&self) {
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "head -c 64M /dev/zero > '{}/fill' 2>/dev/null",
                self.0.display()
            ))
            .status();
        let probe = std::fs::write(self.0.join("probe"), vec![0u8; 4096]);
        assert!(probe.is_err(), "the tmpfs is full");
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("fill")).expect("free the tmpfs");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn get(lab: &Lab, path: &str) -> String {
    lab.vm(&format!(
        "printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
    ))
    .stdout_text()
}

fn state_write_errors(lab: &Lab) -> u64 {
    scrape(lab)
        .lines()
        .find_map(|l| l.strip_prefix("antrea_vm_agent_state_write_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_full_state_directory_refuses_attaches_and_detaches_from_memory() {
    let lab = Lab::new();
    lab.add_second_nic();
    let eth1_before = (lab.vm_link(NIC2).expect("eth1"), lab.vm_addrs(NIC2));
    let state = Tmpfs::mount(lab.state_dir(), "256k");
    let (mut agent, probe) = enforced(&lab);
    let since = probe.now();
    let eth1_untouched = |lab: &Lab| {
        lab.vm_link_driver(NIC2).as_deref() == Some("veth")
            && !lab.vm_link_exists(UPLINK2)
            && lab.vm_addrs(NIC2) == eth1_before.1
    };

    // Attach of eth1 with the state directory full: refused before anything is touched.
    state.fill();
    lab.write_external_node_interfaces(&[(NIC, &[VM_IP4, VM_IP6]), (NIC2, &[VM2_IP4])]);
    wait_until(
        Duration::from_secs(15),
        "/readyz to name the state directory",
        || get(&lab, "/readyz").contains("state directory"),
    );
    assert!(eth1_untouched(&lab), "eth1 is left as it was");
    std::thread::sleep(Duration::from_secs(3));
    assert!(eth1_untouched(&lab), "eth1 is still left as it was");
    assert!(state_write_errors(&lab) >= 1, "the failed writes are counted");
    let info = lab
        .agent_command(&[
            "get",
            "agentinfo",
            "--socket",
            &api_socket(&lab).display().to_string(),
            "-o",
            "json",
        ])
        .output()
        .expect("run get agentinfo")
        .stdout_text();
    assert!(
        info.contains("state directory"),
        "agentinfo shows the error: {info}"
    );
    // The error carries its kind, in the API and as the metric's label.
    let parsed: serde_json::Value = serde_json::from_str(&info).expect("agentinfo JSON");
    let manager_error = parsed["actors"]
        .as_array()
        .and_then(|actors| actors.iter().find(|a| a["actor"] == "interface-manager"))
        .map(|a| a["lastError"].clone());
    assert_eq!(
        manager_error.as_ref().map(|e| &e["kind"]),
        Some(&serde_json::json!("state_file")),
        "the interface manager's lastError is a state_file error: {info}"
    );
    println!(
        "interface manager lastError: {}",
        manager_error.unwrap_or_default()
    );
    let metrics = scrape(&lab);
    assert!(
        metrics
            .contains("antrea_vm_agent_actor_last_error{actor=\"interface-manager\",kind=\"state_file\"} 1"),
        "the metric names the kind: {metrics}"
    );
    let readyz = get(&lab, "/readyz");
    println!(
        "/readyz with the state directory full: {}",
        readyz
            .lines()
            .find(|l| l.contains("state directory"))
            .unwrap_or("")
    );

    // Space back: the attach goes through.
    state.free();
    wait_until(
        Duration::from_secs(15),
        "eth1 attached once there is space",
        || {
            lab.vm_link_driver(NIC2).as_deref() == Some("tun")
                && lab.vm_addrs(NIC2).iter().any(|a| a.starts_with(VM2_IP4))
        },
    );
    lab.isolate_second_uplink();
    wait_until(Duration::from_secs(15), "/readyz to be OK again", || {
        get(&lab, "/readyz").starts_with("HTTP/1.0 200") || get(&lab, "/readyz").starts_with("HTTP/1.1 200")
    });

    // Detach of eth1 with the state directory full: completes from memory.
    state.fill();
    let failures = state_write_errors(&lab);
    lab.unisolate_second_uplink();
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    wait_until(
        Duration::from_secs(15),
        "eth1 restored without the journal",
        || eth1_untouched(&lab),
    );
    // (/readyz may already be OK again here: removing eth1's record freed enough of the tmpfs
    // for the write probe.)
    assert!(
        state_write_errors(&lab) > failures,
        "the failed journal writes are counted"
    );
    state.free();
    wait_until(
        Duration::from_secs(15),
        "/readyz OK once the directory takes writes",
        || !get(&lab, "/readyz").contains("state directory"),
    );

    // eth0 was enforced all along.
    let rec = probe.wait_back(since, Duration::from_secs(10));
    println!("state directory full during attach and detach: eth0 {rec}");
    let through = probe.denied_through();
    assert!(through.is_empty(), "denied connections got through: {through:?}");
    assert!(
        rec.worst() == Duration::ZERO,
        "eth0 never lost its allowed connection: {rec}"
    );
    drop(probe);
    agent.stop();
    drop(state);
}

/// Resident memory (kB) and open file descriptors of a process.
fn rss_kb_and_fds(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss, fds)
}

/// Cycles every datapath fault under the probe, `AVM_SOAK_CYCLES` times (2 by default, for CI;
/// e.g. 40 for a soak of about ten minutes), and bounds the agent's growth: RSS by
/// `RSS_GROWTH_KB` and open descriptors by `FD_GROWTH`, measured after a first warm-up cycle.
#[test]
fn soak_cycling_faults_keeps_memory_and_descriptors_bounded() {
    const RSS_GROWTH_KB: u64 = 8 * 1024;
    const FD_GROWTH: usize = 4;
    let cycles: usize = std::env::var("AVM_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
        .max(2);
    let lab = Lab::new();
    let (mut agent, probe) = enforced(&lab);
    let mgmt = format!("unix:{}", lab.mgmt_sock().display());
    let mut start = None;
    let began = std::time::Instant::now();
    let mut worst = Duration::ZERO;
    for cycle in 0..cycles {
        for (name, fault) in [
            ("del-flows", format!("ovs-ofctl -O OpenFlow15 del-flows {mgmt}")),
            (
                "del-port",
                format!(
                    "ovs-vsctl --db=unix:{} del-port {BRIDGE} {NIC}",
                    lab.db_sock().display()
                ),
            ),
            (
                "del-br",
                format!("ovs-vsctl --db=unix:{} del-br {BRIDGE}", lab.db_sock().display()),
            ),
        ] {
            let rec = survive(&lab, &probe, &format!("cycle {cycle} {name}"), || {
                lab.vm_ok(&fault);
            });
            worst = worst.max(rec.worst());
        }
        let rec = survive(&lab, &probe, &format!("cycle {cycle} fresh database"), || {
            lab.restart_ovs_with_fresh_db();
        });
        worst = worst.max(rec.worst());
        if cycle == 0 {
            start = Some(rss_kb_and_fds(agent.pid()));
        }
    }
    let (rss0, fds0) = start.expect("measured after the first cycle");
    let (rss1, fds1) = rss_kb_and_fds(agent.pid());
    println!(
        "soak: {cycles} cycles in {:.0} s, worst recovery {:.2} s; RSS {rss0} kB -> {rss1} kB (bound +{RSS_GROWTH_KB} kB), open fds {fds0} -> {fds1} (bound +{FD_GROWTH})",
        began.elapsed().as_secs_f64(),
        worst.as_secs_f64()
    );
    assert!(
        rss1 <= rss0 + RSS_GROWTH_KB,
        "RSS grew from {rss0} kB to {rss1} kB"
    );
    assert!(fds1 <= fds0 + FD_GROWTH, "open fds grew from {fds0} to {fds1}");
    assert!(probe.denied_through().is_empty());
    drop(probe);
    agent.stop();
}
