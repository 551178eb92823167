//! Benchmark: `antrea-vm-agent supportbundle` against a running agent enforcing the 10,000-rule
//! fleet (2,000 policies of 5 rules, `benches/common/fleet_files.rs`: about 157,000 flows). The
//! issue's goal: the bundle within 5 s.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench supportbundle
//! # options: SBBENCH_POLICIES (default 2000, 5 rules each), SBBENCH_RUNS (5)
//! ```
//!
//! Setup: the lab's private userspace OVS and the agent on the fleet (standalone policy
//! directory), its log in a file. Then, interleaved, `SBBENCH_RUNS` times: the whole command (a
//! process of its own in the VM's namespace, as an operator runs it), and `ovs-ofctl dump-flows`
//! of the same bridge alone (what the largest part needs from OVS itself). Prints each run's
//! time, the archive's size and the manifest's counts, the median and the worst, and the load
//! average (other work on the machine slows both).
//!
//! `harness = false`: without `--bench` it only prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use common::agent::write_atomic;
use common::fleet_files::{fleet_policy, Fleet, APPLIED_TO, FRACTIONAL_STEP, RULES_PER_POLICY};
use common::lab_fleet::{flow_count, installed_rules};
use common::{env_usize, ms, quantile};
use support::*;

const HOW: &str = "cargo bench --bench supportbundle";
const TARGET_MS: f64 = 5000.0;

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The manifest of the archive at `path`.
fn manifest(path: &std::path::Path) -> serde_json::Value {
    let file = std::fs::File::open(path).expect("open the bundle");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        if entry.path().expect("path").ends_with("manifest.json") {
            let mut text = String::new();
            entry.read_to_string(&mut text).expect("read the manifest");
            return serde_json::from_str(&text).expect("the manifest is JSON");
        }
    }
    panic!("no manifest in {}", path.display());
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("supportbundle: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("SBBENCH_POLICIES", 2000).max(1);
    let runs = env_usize("SBBENCH_RUNS", 5).max(1);
    println!(
        "supportbundle: {} fleet rules, {runs} runs; command: {HOW}",
        policies * RULES_PER_POLICY
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
    let log = lab.dir().join("antrea-agent.log");
    let config_arg = config.display().to_string();
    let log_arg = format!("--log_file={}", log.display());
    let agent = lab.start_agent_with_args(&["run", "--config", &config_arg, "--logtostderr=false", &log_arg]);
    lab.isolate_uplink();
    let started = Instant::now();
    wait_until(Duration::from_secs(900), "the agent's first full commit", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("flows committed") && l.contains("full=true"))
    });
    std::thread::sleep(Duration::from_secs(2));
    let mgmt = lab.mgmt_sock();
    let flows = flow_count(&mgmt).unwrap_or(0);
    let rules = installed_rules(&lab.dump_flows());
    println!(
        "agent up, {flows} flows, {rules} rules installed, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(rules, policies * RULES_PER_POLICY, "rules installed");

    let mut bundle_ms = Vec::new();
    let mut ofctl_ms = Vec::new();
    for run in 0..runs {
        let out = lab.dir().join(format!("bundle-{run}.tar.gz"));
        let out_arg = out.display().to_string();
        let load = loadavg();
        let t0 = Instant::now();
        let result = lab.run_agent(&["supportbundle", "--config", &config_arg, "--output", &out_arg]);
        let took = ms(t0.elapsed());
        assert!(
            result.status.success(),
            "supportbundle failed: {}",
            result.describe()
        );
        let m = manifest(&out);
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let flows_entry = m["entries"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["path"] == "ovs/flows.txt"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(flows_entry["status"], "collected", "{flows_entry}");

        let t1 = Instant::now();
        let dump = Command::new("ip")
            .args([
                "netns",
                "exec",
                lab.vm_ns(),
                "ovs-ofctl",
                "-O",
                "OpenFlow15",
                "--timeout=60",
            ])
            .args(["dump-flows", "--names"])
            .arg(format!("unix:{}", mgmt.display()))
            .output()
            .expect("run ovs-ofctl");
        let dump_took = ms(t1.elapsed());
        assert!(dump.status.success(), "ovs-ofctl: {}", dump.describe());
        println!(
            "run {run}: bundle {took:.0} ms ({size} bytes; content {} bytes; {} collected, {} truncated, \
             {} failed, {} skipped; flows.txt {} bytes in {} ms); ovs-ofctl dump-flows alone \
             {dump_took:.0} ms ({} bytes); load {load}",
            m["totalBytes"],
            m["collected"],
            m["truncated"],
            m["failed"],
            m["skipped"],
            flows_entry["bytes"],
            flows_entry["millis"],
            dump.stdout.len(),
        );
        // Where the time went: the collection (concurrent), then compression and writing.
        let mut slowest: Vec<(u64, String)> = m["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["millis"].as_u64().unwrap_or(0),
                    format!("{} {} B", e["path"].as_str().unwrap_or(""), e["bytes"]),
                )
            })
            .collect();
        slowest.sort();
        slowest.dedup_by_key(|(ms, _)| *ms);
        let slowest: Vec<String> = slowest
            .iter()
            .rev()
            .take(4)
            .map(|(ms, what)| format!("{what}: {ms} ms"))
            .collect();
        println!(
            "  collection {} ms (slowest collectors, by one file of each: {}); compression and writing the rest",
            m["elapsedMillis"],
            slowest.join(", ")
        );
        bundle_ms.push(took);
        ofctl_ms.push(dump_took);
        let _ = std::fs::remove_file(&out);
    }
    bundle_ms.sort_by(f64::total_cmp);
    ofctl_ms.sort_by(f64::total_cmp);
    let worst = bundle_ms.last().copied().unwrap_or(0.0);
    println!(
        "bundle: median {:.0} ms, worst {worst:.0} ms (target {TARGET_MS:.0} ms); ovs-ofctl \
         dump-flows alone: median {:.0} ms; load average {}",
        quantile(&bundle_ms, 0.5),
        quantile(&ofctl_ms, 0.5),
        loadavg()
    );
    drop(agent);
}
