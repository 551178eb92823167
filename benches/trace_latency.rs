//! Benchmark: how long `antrea-vm-agent trace` takes with the 10,000-rule fleet installed (the
//! issue's goal: 50 ms), next to what OVS itself needs for the same `ofproto/trace`.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench trace_latency
//! # options: TRBENCH_POLICIES (default 2000, 5 rules each), TRBENCH_ROUNDS (default 50)
//! ```
//!
//! The agent runs attached in the lab with the fractional fleet (`benches/common/fleet_files.rs`,
//! about 150,000 flows). Four packets, each decided at a different depth: the fleet's first rule
//! (from 192.168.1.1, in every even rule's peers), its last ingress rule (from 10.39.14.5, only
//! rule 9,998's /24), no rule at all (from 172.16.0.1: every table searched), and an IPv6 packet
//! out (to fd00::1, dropped by rule 1). Per round and packet, interleaved, three ways:
//! * **OVS**: `ofproto/trace` alone, the agent's control-socket client calling ovs-vswitchd
//!   in-process on a connection kept open (the floor: what ovs-vswitchd needs);
//! * **API**: `GET /trace` on the agent API socket, in-process (the flow installer asked for its
//!   conjunctions and interfaces, `ofproto/trace`, the text read and attributed, JSON);
//! * **CLI**: the `antrea-vm-agent trace ... -o json` process, start to exit (what a user waits).
//!
//! p50, p90 and max per packet and way, with the load average at the start.
//!
//! `harness = false`: without `--bench` it only prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use antrea_vm_agent::cli::client;
use antrea_vm_agent::ovs::vswitchd::Vswitchd;
use antrea_vm_agent::policy::trace::{TraceDirection, TracePacket, TraceProtocol};
use common::agent::write_atomic;
use common::fleet_files::{fleet_policy, Fleet, APPLIED_TO, FRACTIONAL_STEP, RULES_PER_POLICY};
use common::lab_fleet::installed_rules;
use common::{env_usize, ms, quantile};
use support::*;

const HOW: &str = "cargo bench --bench trace_latency";

/// One packet of the bench and the verdict the agent must give it.
struct Probe {
    what: &'static str,
    direction: TraceDirection,
    peer: &'static str,
    port: u16,
    verdict: &'static str,
}

const PROBES: [Probe; 4] = [
    Probe {
        what: "first rule (in, 192.168.1.1)",
        direction: TraceDirection::In,
        peer: "192.168.1.1",
        port: 22,
        verdict: "Allowed",
    },
    Probe {
        what: "last ingress rule (in, 10.39.14.5)",
        direction: TraceDirection::In,
        peer: "10.39.14.5",
        port: 22,
        verdict: "Rejected",
    },
    Probe {
        what: "no rule (in, 172.16.0.1)",
        direction: TraceDirection::In,
        peer: "172.16.0.1",
        port: 22,
        verdict: "Allowed",
    },
    Probe {
        what: "IPv6 out (fd00::1, rule 1)",
        direction: TraceDirection::Out,
        peer: "fd00::1",
        port: 22,
        verdict: "Dropped",
    },
];

fn ofport(lab: &Lab, iface: &str) -> u32 {
    lab.ovs_vsctl(&["get", "Interface", iface, "ofport"])
        .trim()
        .parse()
        .expect("ofport")
}

fn query(p: &Probe) -> String {
    let dir = match p.direction {
        TraceDirection::In => "in",
        TraceDirection::Out => "out",
    };
    format!(
        "/trace?direction={dir}&peer={}&protocol=tcp&port={}",
        p.peer.replace(':', "%3A"),
        p.port
    )
}

fn api_trace(socket: &Path, p: &Probe) -> String {
    let resp = client::get(socket, &query(p), Duration::from_secs(15)).expect("GET /trace");
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v: serde_json::Value = serde_json::from_slice(&resp.body).expect("JSON");
    v["verdict"].as_str().unwrap_or_default().to_string()
}

fn cli_trace(socket: &Path, p: &Probe) {
    let dir = match p.direction {
        TraceDirection::In => "in",
        TraceDirection::Out => "out",
    };
    let out = Command::new(agent_binary())
        .args(["trace", "--direction", dir, "--peer", p.peer, "--protocol", "tcp"])
        .args(["--port", &p.port.to_string(), "-o", "json", "--socket"])
        .arg(socket)
        .output()
        .expect("run trace");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn line(what: &str, v: &[f64]) -> String {
    format!(
        "{what:<6} p50 {:>7.2} ms  p90 {:>7.2} ms  max {:>7.2} ms",
        quantile(v, 0.5),
        quantile(v, 0.9),
        v.iter().copied().fold(0.0, f64::max)
    )
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("trace_latency: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("TRBENCH_POLICIES", 2000).max(1);
    let rounds = env_usize("TRBENCH_ROUNDS", 50).max(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "trace_latency: {} fleet rules, {rounds} rounds; load average {}; command: {HOW}",
        policies * RULES_PER_POLICY,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    let lab = Lab::new();
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("policy dir");
    write_atomic(&dir, "00-atg.yaml", APPLIED_TO);
    for i in 0..policies {
        std::fs::write(
            dir.join(format!("10-fleet-{i:05}.yaml")),
            fleet_policy(i, Fleet::Fractional(FRACTIONAL_STEP)),
        )
        .expect("write a policy");
    }
    let socket = lab.dir().join("agent-api.sock");
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nagentAPI:\n  socket: {}\n",
        dir.display(),
        socket.display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let started = Instant::now();
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(600), "the agent's first full commit", || {
        agent
            .log()
            .lines()
            .any(|l| l.contains("flows committed") && l.contains("full=true"))
    });
    std::thread::sleep(Duration::from_secs(2));
    let rules = installed_rules(&lab.dump_flows());
    println!(
        "agent up with the fleet ({rules} rules installed) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // A trace timed against fewer rules than asked would flatter the agent.
    assert_eq!(rules, policies * RULES_PER_POLICY, "rules installed");
    // Every probe gets the verdict its rule gives (the deepest one only once every rule is in).
    for p in &PROBES {
        if policies < 2000 && p.peer == "10.39.14.5" {
            continue;
        }
        assert_eq!(api_trace(&socket, p), p.verdict, "{}", p.what);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let vswitchd = Vswitchd::new(lab.run_dir().to_path_buf(), "netdev");
    let (host, uplink) = (ofport(&lab, NIC), ofport(&lab, UPLINK));
    let args: Vec<Vec<String>> = PROBES
        .iter()
        .map(|p| {
            let v6 = p.peer.contains(':');
            TracePacket {
                direction: p.direction,
                in_port: if p.direction == TraceDirection::In {
                    uplink
                } else {
                    host
                },
                local: (if v6 { VM_IP6 } else { VM_IP4 }).parse().expect("ip"),
                peer: p.peer.parse().expect("ip"),
                protocol: TraceProtocol::Tcp,
                port: Some(p.port),
                source_port: None,
                icmp_type: None,
                icmp_code: None,
            }
            .trace_args(BRIDGE)
            .expect("trace args")
        })
        .collect();
    let mut times = vec![[Vec::new(), Vec::new(), Vec::new()]; PROBES.len()];
    for _ in 0..rounds {
        for (i, p) in PROBES.iter().enumerate() {
            let t = Instant::now();
            rt.block_on(vswitchd.trace(&args[i])).expect("ofproto/trace");
            times[i][0].push(ms(t.elapsed()));
            let t = Instant::now();
            api_trace(&socket, p);
            times[i][1].push(ms(t.elapsed()));
            let t = Instant::now();
            cli_trace(&socket, p);
            times[i][2].push(ms(t.elapsed()));
        }
    }
    for (p, [ovs, api, cli]) in PROBES.iter().zip(&times) {
        println!("{} ({}):", p.what, p.verdict);
        println!("  {}", line("OVS", ovs));
        println!("  {}", line("API", api));
        println!("  {}", line("CLI", cli));
    }
    agent.stop();
}
