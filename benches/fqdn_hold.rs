//! Benchmark: how long the agent holds a paused DNS response (packet-in → bundle with the new
//! addresses committed → NXT_RESUME sent), in the lab with a real dnsmasq, with 10,000 other
//! rules installed, and while those 10,000 rules are reloaded.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench fqdn_hold
//! # options: FHBENCH_POLICIES (default 2000, 5 rules each), FHBENCH_NAMES (default 1000 fresh
//! # names per phase), FHBENCH_FLOOD_SECS (default 3)
//! ```
//!
//! It prints, in one run:
//! 1. with the 10,000 rules installed and idle: 1,000 fresh names resolved by the VM (each with
//!    an address of its own, so each answer needs a bundle) and connected to at once: the
//!    agent's own hold figures (microseconds from the DNS packet-in's arrival to the commit, and
//!    to the resume sent, from `/fqdnstats`), the client's query → answer time, and connection
//!    failures (expected 0);
//! 2. the same while the 10,000 rules are removed and loaded again (the policy directory swapped
//!    to an empty one and back: two full bundles of about 157,000 flow_mods each on the flow
//!    installer's connection), only the answers that arrived during the reload;
//!    next to OVS's own limit: a probe on a connection of its own sends barriers back to back
//!    all through the reload, and the longest barrier round trip is the longest time
//!    ovs-vswitchd's main loop answered no OpenFlow message at all (committing a large bundle,
//!    or dumping all flows for the agent's take-over). No paused packet can be resumed faster
//!    than that, whatever the agent does;
//! 3. the new names per second sustained by 64 concurrent resolvers for a few seconds, and how
//!    many DNS packet-ins OVS's meter 258 dropped meanwhile (`packetInRate`, default 5,000/s).
//!
//! The reload's progress is polled with `dump-aggregate` (a flow count), not a full
//! `dump-flows`: rendering 157,000 flows ten times a second would load the switch and the two
//! cores more than the work measured.
//!
//! `harness = false`: without `--bench` it only prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use antrea_vm_agent::fqdn::Hold;
use common::agent::write_atomic;
use common::fleet_files::{fleet_policy, Fleet, APPLIED_TO, FRACTIONAL_STEP, RULES_PER_POLICY};
use common::lab_fleet::{flow_count, installed_rules, ovs_stall_probe, swap_policy_dir};
use common::{env_usize, quantile};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use support::*;

const HOW: &str = "cargo bench --bench fqdn_hold";
const ECHO_PORT: u16 = 8080;

/// In the Emergency tier, so the fleet's reload never moves its priorities.
const FQDN_POLICY: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: uid-fqdn, uid: uid-fqdn}
sourceRef: {type: AntreaClusterNetworkPolicy, name: fqdn-allow, uid: uid-fqdn}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 50
rules:
- direction: Out
  to: {ipBlocks: [{cidr: 10.99.0.1/32}]}
  services: [{protocol: UDP, port: 53}]
  action: Allow
  priority: 0
- direction: Out
  to: {fqdns: [\"*.allowed.test\"]}
  action: Allow
  priority: 1
- direction: Out
  to: {ipBlocks: [{cidr: 10.100.0.0/16}]}
  action: Drop
  priority: 2
";

/// The rules of [`FQDN_POLICY`].
const FQDN_POLICY_RULES: usize = 3;

fn addr4(i: usize) -> String {
    format!("10.100.{}.{}", i / 250, i % 250 + 1)
}

fn start_dnsmasq(lab: &Lab, names: usize) -> Dnsmasq {
    let mut conf = String::new();
    for i in 0..names {
        conf.push_str(&format!("host-record=n{i}.allowed.test,{},600\n", addr4(i)));
    }
    Dnsmasq::start(lab, &conf, 53, false, &["--dns-forward-max=1000"])
}

fn start_echo(lab: &Lab) {
    lab.ext_ok("ip route add local 10.100.0.0/16 dev lo");
    let (tx, rx) = std::sync::mpsc::channel();
    in_netns(lab.ext_ns(), move || {
        let listener = TcpListener::bind(("0.0.0.0", ECHO_PORT)).expect("bind the echo listener");
        let _ = tx.send(());
        for conn in listener.incoming().flatten() {
            drop(conn);
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("echo listener up");
}

fn query(name: &str, id: u16) -> Vec<u8> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(
        Name::from_str(&format!("{name}.")).expect("name"),
        RecordType::A,
    ));
    m.to_vec().expect("encode the query")
}

fn first_ip(response: &[u8]) -> Option<IpAddr> {
    let m = Message::from_vec(response).ok()?;
    m.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        _ => None,
    })
}

fn dns4() -> SocketAddr {
    SocketAddr::from(([10, 99, 0, 1], 53))
}

/// Resolves `name` and connects to the answer at once; the query → answer time.
fn resolve_connect(sock: &UdpSocket, name: &str, id: u16) -> Result<Duration, String> {
    let t = Instant::now();
    sock.send_to(&query(name, id), dns4())
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 1500];
    let (n, _) = sock.recv_from(&mut buf).map_err(|e| format!("{name}: {e}"))?;
    let rtt = t.elapsed();
    let ip = first_ip(&buf[..n]).ok_or_else(|| format!("{name}: no address"))?;
    TcpStream::connect_timeout(&SocketAddr::new(ip, ECHO_PORT), Duration::from_millis(700))
        .map_err(|e| format!("connect {ip} ({name}): {e}"))?;
    Ok(rtt)
}

fn stats(socket: &Path) -> (u64, Vec<Hold>, serde_json::Value) {
    let resp = antrea_vm_agent::cli::client::get(socket, "/fqdnstats", Duration::from_secs(10))
        .expect("GET /fqdnstats");
    let v: serde_json::Value = serde_json::from_slice(&resp.body).expect("fqdnstats JSON");
    let total = v["counts"]["holdsTotal"].as_u64().unwrap_or(0);
    let holds: Vec<Hold> = serde_json::from_value(v["holds"].clone()).expect("holds");
    (total, holds, v["counts"].clone())
}

/// The holds recorded since `before` (the ring keeps the last 8,192).
fn holds_since(socket: &Path, before: u64) -> Vec<Hold> {
    let (total, holds, _) = stats(socket);
    let n = (total - before) as usize;
    holds[holds.len().saturating_sub(n)..].to_vec()
}

fn report(what: &str, holds: &[Hold], rtts: &[f64], failures: usize) {
    let commit: Vec<f64> = holds
        .iter()
        .map(|h| f64::from(h.committed_micros) / 1000.0)
        .collect();
    let resume: Vec<f64> = holds
        .iter()
        .map(|h| f64::from(h.resumed_micros) / 1000.0)
        .collect();
    println!(
        "{what}: {} held answers: paused->committed p50 {:.2} ms p99 {:.2} ms; paused->resumed p50 {:.2} ms p99 {:.2} ms (max {:.2}); \
         client query->answer p50 {:.2} ms p99 {:.2} ms ({} queries); connect failures {failures}",
        holds.len(),
        quantile(&commit, 0.5),
        quantile(&commit, 0.99),
        quantile(&resume, 0.5),
        quantile(&resume, 0.99),
        quantile(&resume, 1.0),
        quantile(rtts, 0.5),
        quantile(rtts, 0.99),
        rtts.len(),
    );
}

fn meter_258_drops(lab: &Lab) -> u64 {
    let out = std::process::Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "meter-stats"])
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .arg("meter=258")
        .output()
        .map(|o| o.stdout_text())
        .unwrap_or_default();
    // "... bands:\n0: packet_count:N byte_count:M"
    out.split("bands:")
        .nth(1)
        .and_then(|b| b.split("packet_count:").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("fqdn_hold: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("FHBENCH_POLICIES", 2000).max(1);
    let names = env_usize("FHBENCH_NAMES", 1000).max(10);
    let flood_secs = env_usize("FHBENCH_FLOOD_SECS", 3).max(1) as u64;
    let flood_names = 40_000;
    println!(
        "fqdn_hold: {} other rules, {names} fresh names per phase; command: {HOW}",
        policies * RULES_PER_POLICY
    );

    let lab = Lab::new();
    let dir = lab.dir().join("policies");
    let full = lab.dir().join("policies-full");
    let empty = lab.dir().join("policies-empty");
    for d in [&full, &empty] {
        std::fs::create_dir_all(d).expect("policy dirs");
        write_atomic(d, "00-atg.yaml", APPLIED_TO);
        write_atomic(d, "05-fqdn.yaml", FQDN_POLICY);
    }
    for i in 0..policies {
        std::fs::write(
            full.join(format!("10-fleet-{i:05}.yaml")),
            fleet_policy(i, Fleet::Fractional(FRACTIONAL_STEP)),
        )
        .expect("write a policy");
    }
    std::os::unix::fs::symlink(&full, &dir).expect("link the policy dir");
    let socket = lab.dir().join("agent-api.sock");
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nagentAPI:\n  socket: {}\n",
        dir.display(),
        socket.display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    let started = Instant::now();
    wait_until(Duration::from_secs(600), "the 10,000 rules installed", || {
        lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
            && lab
                .try_dump_flows()
                .is_ok_and(|f| installed_rules(&f) >= policies * RULES_PER_POLICY)
    });
    // Settle: no commit for 2 s.
    std::thread::sleep(Duration::from_secs(3));
    let rules_before = installed_rules(&lab.dump_flows());
    println!(
        "{rules_before} rules installed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    lab.vm_ok(&format!("ip route add 10.100.0.0/16 via {EXT_IP4} dev {NIC}"));
    let _dns = start_dnsmasq(&lab, 3 * names + flood_names);
    start_echo(&lab);

    // === 1. idle ===
    let (before, _, _) = stats(&socket);
    let (rtts, failures) = in_netns(lab.vm_ns(), move || {
        let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
        sock.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut rtts = Vec::new();
        let mut failures = 0;
        for i in 0..names {
            match resolve_connect(&sock, &format!("n{i}.allowed.test"), i as u16) {
                Ok(rtt) => rtts.push(rtt.as_secs_f64() * 1000.0),
                Err(e) => {
                    failures += 1;
                    eprintln!("{e}");
                }
            }
        }
        (rtts, failures)
    })
    .join()
    .expect("client");
    report(
        "idle, 10,000 rules installed",
        &holds_since(&socket, before),
        &rtts,
        failures,
    );

    // === 2. during a 10,000-rule reload ===
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(names as u64));
    let client = {
        let (stop, next) = (stop.clone(), next.clone());
        in_netns(lab.vm_ns(), move || {
            let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
            sock.set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            let mut rtts = Vec::new();
            let mut failures = 0;
            while !stop.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= 3 * names {
                    break;
                }
                match resolve_connect(&sock, &format!("n{i}.allowed.test"), i as u16) {
                    Ok(rtt) => rtts.push(rtt.as_secs_f64() * 1000.0),
                    Err(e) => {
                        failures += 1;
                        eprintln!("{e}");
                    }
                }
            }
            (rtts, failures)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (before, _, _) = stats(&socket);
    let reload = Instant::now();
    let swap = |to: &Path| swap_policy_dir(lab.dir(), &dir, to);
    let full_count = flow_count(&lab.mgmt_sock()).expect("flow count");
    let probe_stop = Arc::new(AtomicBool::new(false));
    let probe = ovs_stall_probe(&lab.mgmt_sock(), probe_stop.clone());
    swap(&empty);
    wait_until(Duration::from_secs(300), "the 10,000 rules removed", || {
        flow_count(&lab.mgmt_sock()).is_some_and(|n| n < full_count / 10)
    });
    let removed = reload.elapsed();
    swap(&full);
    wait_until(Duration::from_secs(600), "the 10,000 rules back", || {
        flow_count(&lab.mgmt_sock()).is_some_and(|n| n >= full_count - 5)
    });
    let reloaded = reload.elapsed();
    // Every rule given, before and after the reload: the fleet's plus the FQDN policy's. A
    // bench that installs fewer fails.
    let after = installed_rules(&lab.dump_flows());
    let expected = policies * RULES_PER_POLICY + FQDN_POLICY_RULES;
    println!("rules installed: {rules_before} before the reload, {after} after, {expected} given");
    if rules_before != expected || after != expected {
        eprintln!("fqdn_hold: FAILED: fewer or other rules installed than given");
        std::process::exit(1);
    }
    let during = holds_since(&socket, before);
    stop.store(true, Ordering::Relaxed);
    probe_stop.store(true, Ordering::Relaxed);
    let (rtts, failures) = client.join().expect("client");
    let stalls = probe.join().expect("probe");
    let (_, _, counts) = stats(&socket);
    println!(
        "reload: 10,000 rules removed in {:.1} s and back in {:.1} s (wall, polled with dump-aggregate)",
        removed.as_secs_f64(),
        reloaded.as_secs_f64()
    );
    println!(
        "OVS's own limit during the reload: barrier round trip p50 {:.2} ms p99 {:.2} ms max {:.0} ms \
         ({} barriers; {} over 100 ms, {:.1} s in those): the switch's main loop answered nothing for that long",
        quantile(&stalls, 0.5),
        quantile(&stalls, 0.99),
        quantile(&stalls, 1.0),
        stalls.len(),
        stalls.iter().filter(|&&ms| ms > 100.0).count(),
        // (Folded from +0.0: an empty float sum is -0.0.)
        stalls.iter().filter(|&&ms| ms > 100.0).fold(0.0, |a, ms| a + ms) / 1000.0,
    );
    println!(
        "DNS bundles during the whole run so far: {} committed or tried, {} failed to commit",
        counts["bundles"], counts["commitFailures"]
    );
    report("during the 10,000-rule reload", &during, &rtts, failures);

    // === 3. flood: new names per second ===
    let drops0 = meter_258_drops(&lab);
    let (_, _, counts0) = stats(&socket);
    let added0 = counts0["ipsAdded"].as_u64().unwrap_or(0);
    let base = 3 * names;
    let deadline = Instant::now() + Duration::from_secs(flood_secs);
    let answered = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..64)
        .map(|_| {
            let (answered, sent, next) = (answered.clone(), sent.clone(), next.clone());
            in_netns(lab.vm_ns(), move || {
                let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
                sock.set_read_timeout(Some(Duration::from_millis(500)))
                    .expect("timeout");
                let mut buf = [0u8; 1500];
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= flood_names {
                        break;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    if sock
                        .send_to(&query(&format!("n{}.allowed.test", base + i), i as u16), dns4())
                        .is_ok()
                        && sock.recv_from(&mut buf).is_ok()
                    {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let t = Instant::now();
    for w in workers {
        let _ = w.join();
    }
    let secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    let (_, _, counts1) = stats(&socket);
    let added = counts1["ipsAdded"].as_u64().unwrap_or(0) - added0;
    println!(
        "flood (64 concurrent resolvers, {secs:.1} s): {} queries sent, {} answered, {:.0} new names/s added to the rules; meter 258 dropped {} DNS packet-ins",
        sent.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed),
        added as f64 / secs,
        meter_258_drops(&lab) - drops0
    );
    println!("counters: {counts1}");
    // What the agent did meanwhile: its commits and anything it warned about (the first few).
    let log = agent.log();
    let commits: Vec<&str> = log.lines().filter(|l| l.contains("flows committed")).collect();
    println!(
        "agent: {} flow installer commits; the last ones and every warning:",
        commits.len()
    );
    for l in commits.iter().rev().take(8).rev() {
        println!("  {l}");
    }
    let mut warned = 0;
    for l in log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")) {
        warned += 1;
        if warned <= 25 {
            println!("  {l}");
        }
    }
    println!("agent: {warned} warning/error lines");
    drop(agent);
}
