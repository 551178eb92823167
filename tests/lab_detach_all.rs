//! `antrea-vm-agent detach-all` in the lab: the agent attaches `eth0`, is stopped (SIGTERM leaves
//! the interface attached), and `detach-all` puts the host back without it: refused while the
//! agent runs, exact restore of the NIC and no port of ours left in OVS, a no-op second run, and
//! with OVS down the kernel side restored and the OVS ports reported (removed on a later run).
//! Needs root and Open vSwitch (`make deps`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use support::*;

/// The NIC as `ip` shows it (ifindex and NOARP left out: the lab turns ARP off on the uplink),
/// its addresses and the routes.
#[derive(Debug, PartialEq, Eq)]
struct HostState {
    link: LinkInfo,
    addrs: Vec<String>,
    routes: Vec<String>,
}

fn host_state(lab: &Lab) -> HostState {
    let mut link = lab.vm_link(NIC).expect("eth0 exists");
    link.index = 0;
    link.noarp = false;
    HostState {
        link,
        addrs: lab.vm_addrs(NIC),
        routes: lab.vm_routes(),
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn detach_all(lab: &Lab, config: &Path) -> Output {
    let out = lab.run_agent(&["detach-all", "--config", &config.display().to_string()]);
    // Shown with --nocapture: what an operator sees.
    println!("$ antrea-vm-agent detach-all\n{}", text(&out));
    out
}

fn records(lab: &Lab) -> Vec<String> {
    match std::fs::read_dir(lab.state_dir().join("interfaces")) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Starts the agent, waits until eth0 is attached, then stops it with SIGTERM (the interface
/// stays attached) unless `keep_running`. Returns the config path and the agent.
fn attach(lab: &Lab) -> (std::path::PathBuf, AgentProcess) {
    let config = lab.write_config("");
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(30),
        "eth0 attached with its addresses",
        || {
            let addrs = lab.vm_addrs(NIC);
            addrs.iter().any(|a| a.starts_with(VM_IP4)) && addrs.iter().any(|a| a.starts_with(VM_IP6))
        },
    );
    wait_until(Duration::from_secs(30), "the interface record", || {
        std::fs::read_to_string(lab.state_dir().join("interfaces/eth0.json"))
            .is_ok_and(|r| r.contains("\"attached\""))
    });
    (config, agent)
}

fn assert_restored(lab: &Lab, before: &HostState) {
    assert!(!lab.vm_link_exists(UPLINK), "eth0~ is renamed back");
    assert_eq!(
        lab.vm_link_driver(NIC).as_deref(),
        Some("veth"),
        "eth0 is the NIC again"
    );
    assert_eq!(&host_state(lab), before, "the NIC is back exactly as it was");
}

#[test]
fn detach_all_refuses_while_the_agent_runs_then_restores_exactly_and_is_idempotent() {
    let lab = Lab::new();
    let before = host_state(&lab);
    let (config, mut agent) = attach(&lab);

    // The agent runs: refused, nothing touched.
    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing"), "{}", text(&out));
    assert!(err.contains(&format!("pid {}", agent.pid())), "{}", text(&out));
    assert!(lab.vm_link_exists(UPLINK), "nothing was detached");
    assert_eq!(records(&lab), vec!["eth0.json".to_string()]);

    // SIGTERM leaves the interface attached.
    agent.stop();
    assert!(lab.vm_link_exists(UPLINK), "still attached after SIGTERM");
    lab.unisolate_uplink();

    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("eth0: restored"), "{}", text(&out));
    assert!(
        stdout.contains("OVS ports eth0 and eth0~ deleted from br-int"),
        "{}",
        text(&out)
    );
    assert_restored(&lab, &before);
    assert_eq!(
        lab.ovs_vsctl(&["list-ports", BRIDGE]).trim(),
        "",
        "no ports left on the bridge"
    );
    assert!(records(&lab).is_empty(), "records removed: {:?}", records(&lab));
    assert!(
        lab.ping_from_ext(VM_IP4, 2).all_received(),
        "the restored NIC works (IPv4)"
    );
    assert!(
        lab.ping_from_ext(VM_IP6, 2).all_received(),
        "the restored NIC works (IPv6)"
    );

    // A second run has nothing to do.
    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing to detach"),
        "{}",
        text(&out)
    );
    assert_eq!(&host_state(&lab), &before);
}

#[test]
fn detach_all_with_ovs_down_restores_the_kernel_and_removes_the_ports_later() {
    let lab = Lab::new();
    let before = host_state(&lab);
    let (config, mut agent) = attach(&lab);
    agent.stop();
    lab.unisolate_uplink();
    lab.kill_vswitchd();
    lab.kill_ovsdb();

    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("eth0: kernel side restored"), "{}", text(&out));
    assert!(err.contains("OVS is unreachable"), "{}", text(&out));
    assert!(
        err.contains(&lab.db_sock().display().to_string()),
        "names the OVSDB socket: {}",
        text(&out)
    );
    assert!(err.contains("run detach-all again"), "{}", text(&out));
    assert_restored(&lab, &before);
    assert!(
        lab.ping_from_ext(VM_IP4, 2).all_received(),
        "the restored NIC works"
    );
    // Still down: the same answer, the kernel untouched.
    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_restored(&lab, &before);

    // OVS back (it fails to re-create the internal port over the NIC: harmless): the ports go.
    lab.start_ovsdb();
    lab.start_vswitchd();
    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("eth0: restored"),
        "{}",
        text(&out)
    );
    assert_eq!(
        lab.ovs_vsctl(&["list-ports", BRIDGE]).trim(),
        "",
        "no ports left on the bridge"
    );
    assert!(records(&lab).is_empty(), "records removed: {:?}", records(&lab));
    assert_restored(&lab, &before);
    assert!(lab.ping_from_ext(VM_IP4, 2).all_received(), "the NIC still works");
    let out = detach_all(&lab, &config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing to detach"),
        "{}",
        text(&out)
    );
}
