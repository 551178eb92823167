//! Benchmark: how long a Reject reply takes (the VM's SYN → packet-in → the agent's RST
//! packet-out → the VM's `connect` refused) while the flow installer recompiles and installs the
//! 10,000-rule fleet (the flow installer and the packet-in responder each on a thread of its
//! own), next to OVS's own limit.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench reject_latency
//! # options: RJBENCH_POLICIES (default 2000, 5 rules each)
//! ```
//!
//! One agent is started on the fleet plus one Reject rule (TCP port 9 of the
//! outside host, in the Emergency tier so the fleet's reload never moves it); the outside host
//! listens on that port, so a connection that is not rejected succeeds: the bench then fails. A
//! prober in the VM connects back to back (one at a time, 5 ms apart; each waits up to 30 s for
//! its answer, longer than any OVS stall seen):
//! 1. idle, 300 probes;
//! 2. while the 10,000 rules are removed and loaded again (the policy directory swapped to one
//!    without the fleet and back: two full recompiles and two bundles of about 157,000
//!    flow_mods), every probe started during the reload.
//!
//! OVS's own limit: a probe on a connection of its own sends barriers back to back through each
//! reload; ovs-vswitchd answers a barrier, a packet-in and a packet-out from the same main loop,
//! so the longest barrier round trip is how long no Reject reply could have got through,
//! whatever the agent does.
//!
//! `harness = false`: without `--bench` it only prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::agent::write_atomic;
use common::fleet_files::{fleet_policy, Fleet, APPLIED_TO, FRACTIONAL_STEP, RULES_PER_POLICY};
use common::lab_fleet::{flow_count, installed_rules, ovs_stall_probe, swap_policy_dir};
use common::{env_usize, quantile};
use support::*;

const HOW: &str = "cargo bench --bench reject_latency";
const REJECTED_PORT: u16 = 9;

/// TCP to the outside host's port 9 is rejected; in the Emergency tier (the fleet is in
/// Application), so the reload never moves it.
const REJECT_POLICY: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: uid-reject, uid: uid-reject}
sourceRef: {type: AntreaClusterNetworkPolicy, name: reject-probe, uid: uid-reject}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 50
rules:
- direction: Out
  to: {ipBlocks: [{cidr: 10.99.0.1/32}]}
  services: [{protocol: TCP, port: 9}]
  action: Reject
  priority: 0
";

/// How a probe ended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    /// Refused by the agent's RST, after that many milliseconds.
    Refused(f64),
    /// Connected: the Reject rule was not enforced (the bench fails).
    Connected,
    /// No answer within [`PROBE_TIMEOUT`] (longer than any OVS stall seen).
    TimedOut,
}

/// One probe: when it started (since the phase began) and how it ended.
type Probe = (Duration, Outcome);

const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to the rejected port back to back until `stop` (or `max` probes).
fn prober(lab: &Lab, stop: Arc<AtomicBool>, max: usize) -> std::thread::JoinHandle<Vec<Probe>> {
    in_netns(lab.vm_ns(), move || {
        let target = SocketAddr::from(([10, 99, 0, 1], REJECTED_PORT));
        let began = Instant::now();
        let mut probes = Vec::new();
        while !stop.load(Ordering::Relaxed) && probes.len() < max {
            let t = Instant::now();
            let outcome = match TcpStream::connect_timeout(&target, PROBE_TIMEOUT) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    Outcome::Refused(t.elapsed().as_secs_f64() * 1000.0)
                }
                Ok(_) => Outcome::Connected,
                Err(_) => Outcome::TimedOut,
            };
            probes.push((t - began, outcome));
            std::thread::sleep(Duration::from_millis(5));
        }
        probes
    })
}

/// p50, p99, max, and how many of `ms` took over 100 ms and how long those took together.
fn spread(ms: &[f64]) -> String {
    let slow: Vec<f64> = ms.iter().copied().filter(|&m| m > 100.0).collect();
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.0} ms; {} over 100 ms, {:.1} s in those",
        quantile(ms, 0.5),
        quantile(ms, 0.99),
        quantile(ms, 1.0),
        slow.len(),
        // (An empty float sum is -0.0.)
        if slow.is_empty() {
            0.0
        } else {
            slow.iter().sum::<f64>() / 1000.0
        }
    )
}

fn summary(probes: &[Probe]) -> String {
    // A probe that timed out counts as the whole timeout: leaving it out would flatter.
    let ms: Vec<f64> = probes
        .iter()
        .filter_map(|p| match p.1 {
            Outcome::Refused(ms) => Some(ms),
            Outcome::TimedOut => Some(PROBE_TIMEOUT.as_secs_f64() * 1000.0),
            Outcome::Connected => None,
        })
        .collect();
    let count = |o: Outcome| probes.iter().filter(|p| p.1 == o).count();
    format!(
        "{} probes, refused (timeouts counted as 30 s) in {}; connected {}, timed out {}",
        probes.len(),
        spread(&ms),
        count(Outcome::Connected),
        count(Outcome::TimedOut)
    )
}

/// What [`run`] works on.
struct Setup<'a> {
    lab: &'a Lab,
    config: &'a Path,
    dir: &'a Path,
    full: &'a Path,
    empty: &'a Path,
    policies: usize,
}

/// The agent started on the fleet, idle probes, then probes through a reload; how many probes
/// connected (the Reject rule not enforced).
fn run(setup: &Setup) -> usize {
    let Setup {
        lab,
        config,
        dir,
        full,
        empty,
        policies,
    } = *setup;
    let swap = |to: &Path| swap_policy_dir(lab.dir(), dir, to);
    swap(full);
    let agent = lab.start_agent(config);
    lab.isolate_uplink();
    let mgmt = lab.mgmt_sock();
    let started = Instant::now();
    // The agent's first full sync committed, then settled.
    wait_until(Duration::from_secs(600), "the agent's first full commit", || {
        agent
            .log()
            .lines()
            .any(|l| l.contains("flows committed") && l.contains("full=true"))
    });
    std::thread::sleep(Duration::from_secs(2));
    let full_count = flow_count(&mgmt).unwrap_or(0);
    let rules = installed_rules(&lab.dump_flows());
    println!(
        "agent up, {full_count} flows, {rules} rules installed, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The fleet and the Reject rule, every one (a bench that installs fewer rules fails).
    assert_eq!(rules, policies * RULES_PER_POLICY + 1, "rules installed");

    let idle = prober(lab, Arc::new(AtomicBool::new(false)), 300)
        .join()
        .expect("prober");
    println!("idle: {}", summary(&idle));

    let stop = Arc::new(AtomicBool::new(false));
    let probes = prober(lab, stop.clone(), usize::MAX);
    let barrier_stop = Arc::new(AtomicBool::new(false));
    let barriers = ovs_stall_probe(&mgmt, barrier_stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let reload = Instant::now();
    swap(empty);
    wait_until(Duration::from_secs(300), "the fleet removed", || {
        flow_count(&mgmt).is_some_and(|n| n < full_count / 10)
    });
    let removed = reload.elapsed();
    swap(full);
    wait_until(Duration::from_secs(600), "the fleet back", || {
        flow_count(&mgmt).is_some_and(|n| n >= full_count - 5)
    });
    let reloaded = reload.elapsed();
    let rules = installed_rules(&lab.dump_flows());
    assert_eq!(
        rules,
        policies * RULES_PER_POLICY + 1,
        "rules installed after the reload"
    );
    // The installer's last commit may trail the count by its barrier.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    barrier_stop.store(true, Ordering::Relaxed);
    let probes = probes.join().expect("prober");
    let stalls = barriers.join().expect("barrier probe");
    // Only the probes started during the reload (the prober started 300 ms before it).
    let during: Vec<Probe> = probes
        .into_iter()
        .filter(|p| p.0 >= Duration::from_millis(300) && p.0 <= reloaded + Duration::from_millis(300))
        .collect();
    println!(
        "reload: fleet removed in {:.1} s, back in {:.1} s; during it: {}",
        removed.as_secs_f64(),
        reloaded.as_secs_f64(),
        summary(&during)
    );
    println!(
        "OVS's own limit meanwhile: {} barriers back to back, round trip {}",
        stalls.len(),
        spread(&stalls)
    );
    let connected = idle
        .iter()
        .chain(&during)
        .filter(|p| p.1 == Outcome::Connected)
        .count();
    drop(agent);
    connected
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("reject_latency: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("RJBENCH_POLICIES", 2000).max(1);
    println!(
        "reject_latency: {} fleet rules and one Reject rule; command: {HOW}",
        policies * RULES_PER_POLICY
    );
    let lab = Lab::new();
    let dir = lab.dir().join("policies");
    let full = lab.dir().join("policies-full");
    let empty = lab.dir().join("policies-empty");
    for d in [&full, &empty] {
        std::fs::create_dir_all(d).expect("policy dirs");
        write_atomic(d, "00-atg.yaml", APPLIED_TO);
        write_atomic(d, "05-reject.yaml", REJECT_POLICY);
    }
    for i in 0..policies {
        std::fs::write(
            full.join(format!("10-fleet-{i:05}.yaml")),
            fleet_policy(i, Fleet::Fractional(FRACTIONAL_STEP)),
        )
        .expect("write a policy");
    }
    std::os::unix::fs::symlink(&full, &dir).expect("link the policy dir");
    let config = lab.write_config(&format!("standalone:\n  policyDir: {}\n", dir.display()));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    // The outside host accepts on the rejected port: a probe that is not rejected connects.
    let (tx, rx) = std::sync::mpsc::channel();
    in_netns(lab.ext_ns(), move || {
        let listener = TcpListener::bind(("0.0.0.0", REJECTED_PORT)).expect("bind port 9");
        let _ = tx.send(());
        for conn in listener.incoming().flatten() {
            drop(conn);
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("listener up");

    let connected = run(&Setup {
        lab: &lab,
        config: &config,
        dir: &dir,
        full: &full,
        empty: &empty,
        policies,
    });
    if connected > 0 {
        eprintln!("reject_latency: {connected} probes connected: the Reject rule was not enforced");
        std::process::exit(1);
    }
}
