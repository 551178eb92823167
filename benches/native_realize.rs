//! Benchmark: Antrea-native policies realized end to end by the running agent, in the lab (a VM
//! namespace with a private userspace Open vSwitch, the agent attached to it; see
//! `tests/support/lab.rs`): 2,000 policies over an inventory of 5,000 ExternalEntities (the
//! fleet of `benches/common/native.rs`, which `native_translate` measures without OVS), written
//! into `standalone.policyDir`, then inventory label changes, each timed from the file's write
//! to the agent's bundle commit.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench native_realize
//! # options, as environment variables:
//! #   NRBENCH_POLICIES   Antrea-native policies (default 2000, one rule each)
//! #   NRBENCH_ENTITIES   inventory ExternalEntities (default 5000, one file per namespace: 10)
//! #   NRBENCH_CHANGES    label changes timed (default 50)
//! ```
//!
//! It measures:
//! 1. The fleet (one file per policy, one inventory file per namespace) landing at once (the
//!    policy dir is a symlink swapped to a directory holding them, like a ConfigMap mount): the
//!    time from the swap to the agent's commit that leaves the bridge with exactly the flows
//!    `antrea-vm-agent compile --state S --policies DIR --external-node F` prints (checked with
//!    dump-flows), and the agent's `realization_ms`. The bridge must then hold one action flow
//!    (`conj_id`) for every policy's rule: fewer makes the bench exit non-zero.
//! 2. One inventory ExternalEntity's `app` label changed (its namespace's file rewritten
//!    atomically), `NRBENCH_CHANGES` times, 250 ms apart: from the write to the agent's next
//!    `flows committed` log line (its own timestamp). The first change after the fleet landed
//!    is timed apart: it reads again the files whose last read came within seconds of their
//!    write (see `src/sources/file_stat.rs`). The entity leaves one app's AddressGroup and joins
//!    another's, so each change must commit flow_mods; a commit without any fails the bench, and
//!    after the last change the bridge must again equal `compile`'s output for the directory.
//! 3. The agent's VmRSS before any policy, VmRSS and VmHWM (peak) after all of the above, and
//!    VmRSS once idle past the 5 s safety-net poll (which hands free memory back).
//!
//! Not measured here: the full re-translation that every change cost before the local controller
//! kept its state (it would take a second agent build; `native_translate` measures it without
//! OVS, side by side with the incremental path).
//!
//! This is a `harness = false` bench: `cargo test --all-targets` also builds and starts it,
//! without `--bench`, and then it only prints how to run it. Every wait is bounded; the lab is
//! removed on exit, also after a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::agent::{commit_ms, parse_commit, rss_mb, write_atomic, Commit};
use common::lab_fleet::installed_rules;
use common::native::{entity, next_app, policy, APPS, NAMESPACES};
use common::{env_usize, ms, quantile};
use serde_json::Value;
use support::*;

const HOW: &str = "cargo bench --bench native_realize";
/// Bound for the fleet's realization.
const BIG_TIMEOUT: Duration = Duration::from_secs(600);
/// Bound for the wait for the next commit while the fleet is not realized.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound for one label change.
const SMALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The marker of the flow installer's commit log line.
const COMMITTED: &str = "flows committed";

/// The agent's `flows committed` lines, read incrementally from its log file: the bench polls
/// it every millisecond while a change is timed, and must not take the CPU the agent needs.
struct CommitLog {
    file: std::fs::File,
    /// The text after the last complete line.
    partial: String,
    commits: Vec<Commit>,
}

impl CommitLog {
    fn open(agent: &AgentProcess) -> CommitLog {
        CommitLog {
            file: std::fs::File::open(agent.log_path()).expect("open the agent log"),
            partial: String::new(),
            commits: Vec::new(),
        }
    }

    /// Every commit logged so far.
    fn poll(&mut self) -> &[Commit] {
        use std::io::Read;
        let mut bytes = Vec::new();
        if self.file.read_to_end(&mut bytes).is_ok() && !bytes.is_empty() {
            self.partial.push_str(&String::from_utf8_lossy(&bytes));
            if let Some(end) = self.partial.rfind('\n') {
                let complete: String = self.partial.drain(..=end).collect();
                self.commits.extend(
                    complete
                        .lines()
                        .filter(|l| l.contains(COMMITTED))
                        .map(parse_commit),
                );
            }
        }
        &self.commits
    }

    /// Waits (bounded) until a commit beyond the first `seen` is logged; returns the new ones.
    fn wait(&mut self, agent: &AgentProcess, seen: usize, timeout: Duration) -> Result<Vec<Commit>, String> {
        let end = Instant::now() + timeout;
        loop {
            let all = self.poll();
            if all.len() > seen {
                return Ok(all[seen..].to_vec());
            }
            if Instant::now() > end {
                let log = agent.log();
                let lines: Vec<&str> = log.lines().collect();
                return Err(format!(
                    "no further `{COMMITTED}` within {timeout:?}; agent log tail:\n{}",
                    lines[lines.len().saturating_sub(10)..].join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn flow_count(lab: &Lab) -> usize {
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=60", "dump-aggregate"])
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .output()
        .expect("run ovs-ofctl dump-aggregate");
    let text = out.stdout_text();
    text.split("flow_count=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no flow_count in {text:?}"))
}

/// Moves entity `i` to its next app label (step `n`), rewrites its namespace's inventory file
/// and waits for the agent's next commit: the commit, when the file was written, and when the
/// commit was seen.
fn relabel(
    apps: &mut [usize],
    i: usize,
    n: usize,
    staging: &Path,
    log: &mut CommitLog,
    agent: &AgentProcess,
    what: &str,
) -> (Commit, SystemTime, SystemTime) {
    apps[i] = next_app(apps[i], i, n);
    let (file, text) = inventory_file(i % NAMESPACES, apps);
    let seen = log.poll().len();
    let t0 = SystemTime::now();
    write_atomic(staging, &file, &text);
    let new = log
        .wait(agent, seen, SMALL_TIMEOUT)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let now = SystemTime::now();
    (new.first().cloned().expect("a commit"), t0, now)
}

/// Objects as YAML documents.
fn yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_norway::to_string(o).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The inventory file of namespace `ns`: the entities `i` with `i % NAMESPACES == ns`, each
/// with its current app.
fn inventory_file(ns: usize, apps: &[usize]) -> (String, String) {
    let objects: Vec<Value> = (ns..apps.len())
        .step_by(NAMESPACES)
        .map(|i| entity(i, apps[i]))
        .collect();
    (format!("inventory-ns{ns}.yaml"), yaml(&objects))
}

/// The lab's ExternalNode, labelled `role: db` (the policies' appliedTo).
fn write_db_external_node(lab: &Lab) {
    let text = format!(
        "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
         metadata: {{name: vm1, namespace: vm-ns, labels: {{role: db}}}}\n\
         spec: {{interfaces: [{{name: {NIC}, ips: [\"{VM_IP4}\", \"{VM_IP6}\"]}}]}}\n"
    );
    let tmp = lab.dir().join(".external-node.yaml.tmp");
    std::fs::write(&tmp, text).expect("write the ExternalNode file");
    std::fs::rename(&tmp, lab.en_file()).expect("move the ExternalNode file in place");
}

/// `compile --state` for the lab's interface and the Antrea-native files of `dir`: the flows,
/// sorted as dump-flows lists them.
fn expected_flows(lab: &Lab, dir: &Path) -> Vec<String> {
    let out = lab.compile_state_with_policies(&[], serde_json::json!([]), &[dir], Some(&lab.en_file()));
    let mut flows: Vec<String> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    flows.sort();
    flows
}

fn p50_p99_max(v: &[f64]) -> String {
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        quantile(v, 0.5),
        quantile(v, 0.99),
        quantile(v, 1.0)
    )
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("native_realize: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("NRBENCH_POLICIES", 2000).max(1);
    let entities = env_usize("NRBENCH_ENTITIES", 5000).max(NAMESPACES);
    let changes = env_usize("NRBENCH_CHANGES", 50).max(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "native_realize: {policies} Antrea-native policies over {entities} ExternalEntities \
         ({APPS} apps, {NAMESPACES} namespaces); {changes} label changes; load average at start {}",
        load.trim()
    );
    println!("agent binary: {}", agent_binary());

    let lab = Lab::new();
    let dir = lab.dir().join("policies");
    let first = lab.dir().join("policies-0");
    let staging = lab.dir().join("policies-1");
    for d in [&first, &staging] {
        std::fs::create_dir_all(d).expect("create the policy dirs");
    }
    std::os::unix::fs::symlink(&first, &dir).expect("link the policy dir");
    let config = lab.write_config(&format!("standalone:\n  policyDir: {}\n", dir.display()));
    write_db_external_node(&lab);
    let mut agent = lab.start_agent(&config);
    let mut log = CommitLog::open(&agent);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(60),
        "attached and the first flows committed",
        || lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4)) && !log.poll().is_empty(),
    );
    let (rss0, _) = rss_mb(agent.pid());
    println!(
        "attached; {} flows before any policy; agent VmRSS {rss0:.1} MB",
        flow_count(&lab)
    );

    // === 1. the fleet ===
    let mut apps: Vec<usize> = (0..entities).map(|i| i % APPS).collect();
    let written = Instant::now();
    for i in 0..policies {
        write_atomic(&staging, &format!("policy-{i:05}.yaml"), &yaml(&[policy(i)]));
    }
    for ns in 0..NAMESPACES {
        let (file, text) = inventory_file(ns, &apps);
        write_atomic(&staging, &file, &text);
    }
    println!(
        "staged {} files in {:.0} ms",
        policies + NAMESPACES,
        ms(written.elapsed())
    );
    let compiled = Instant::now();
    let expected = expected_flows(&lab, &staging);
    println!(
        "compile --state --policies: {} flows ({:.0} ms, one process)",
        expected.len(),
        ms(compiled.elapsed())
    );

    let seen = log.poll().len();
    let t0 = SystemTime::now();
    let started = Instant::now();
    let link = lab.dir().join(".policies.new");
    std::os::unix::fs::symlink(&staging, &link).expect("link the new policy dir");
    std::fs::rename(&link, &dir).expect("swap the policy dir link");
    let mut seen_now = seen;
    let mut big: Vec<Commit> = Vec::new();
    let final_commit = loop {
        let left = BIG_TIMEOUT.saturating_sub(started.elapsed()).min(IDLE_TIMEOUT);
        assert!(
            !left.is_zero(),
            "the fleet was not realized within {BIG_TIMEOUT:?}"
        );
        let new = log.wait(&agent, seen_now, left).unwrap_or_else(|e| {
            panic!(
                "{e}\nthe bridge holds {} flows, compile prints {}",
                flow_count(&lab),
                expected.len()
            )
        });
        seen_now += new.len();
        big.extend(new);
        if flow_count(&lab) == expected.len() {
            std::thread::sleep(Duration::from_millis(1500));
            if log.poll().len() == seen_now && flow_count(&lab) == expected.len() {
                break big.last().cloned().expect("a commit");
            }
        }
    };
    let fleet_ms = commit_ms(t0, &final_commit, SystemTime::now());
    let (rss1, hwm1) = rss_mb(agent.pid());
    assert!(
        lab.dump_flows() == expected,
        "the bridge does not hold exactly what compile prints"
    );
    let installed = installed_rules(&lab.dump_flows());
    println!(
        "fleet realized: {} commit(s), flow_mods {:?}; dump-flows equals compile's {} flows; \
         {installed} of {policies} rules have their action flow",
        big.len(),
        big.iter().map(|c| c.flow_mods.unwrap_or(0)).collect::<Vec<_>>(),
        expected.len()
    );

    // === 2. one label change at a time ===
    // The first change after the fleet landed is timed apart: files read within a few seconds of
    // their last write are read again on the next pass (their timestamps cannot yet prove them
    // unchanged), so it re-reads most of the directory once.
    let first_change = {
        let (c, t0, _) = relabel(
            &mut apps,
            entities - 1,
            0,
            &staging,
            &mut log,
            &agent,
            "the first change",
        );
        assert!(
            c.flow_mods.unwrap_or(0) > 0,
            "the first label change committed no flow_mod"
        );
        std::thread::sleep(Duration::from_millis(250));
        commit_ms(t0, &c, SystemTime::now())
    };
    let mut wall = Vec::new();
    let mut realization = Vec::new();
    let mut mods = Vec::new();
    let mut no_flows = 0usize;
    for n in 0..changes {
        let what = format!("change {n}");
        let (c, t0, now) = relabel(&mut apps, n * 97 % entities, n, &staging, &mut log, &agent, &what);
        // The commit timed must be the change's: it carries flow_mods.
        let flow_mods = c.flow_mods.unwrap_or(0);
        if flow_mods == 0 {
            no_flows += 1;
        }
        mods.push(flow_mods);
        wall.push(commit_ms(t0, &c, now));
        if let Some(r) = c.realization_ms {
            realization.push(r);
        }
        // Let the agent go idle, so that each change is timed alone.
        std::thread::sleep(Duration::from_millis(250));
    }
    let after = expected_flows(&lab, &staging);
    let matches = lab.dump_flows() == after;
    let (rss2, hwm2) = rss_mb(agent.pid());
    // Idle past the safety-net poll (5 s): the agent hands free memory back then.
    std::thread::sleep(Duration::from_secs(7));
    let (rss3, _) = rss_mb(agent.pid());
    agent.kill_hard();
    drop(agent);
    drop(lab);

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!();
    println!("=== native_realize: {policies} Antrea-native policies over {entities} ExternalEntities ===");
    println!(
        "1. realize the fleet: {fleet_ms:.0} ms from the files landing to the commit (noticing the \
         change, reading and parsing {} files, translation, resolution, compile, bundle); agent \
         realization_ms {}; {} flows; {installed} of {policies} rules installed",
        policies + NAMESPACES,
        final_commit
            .realization_ms
            .map_or("n/a".into(), |r| format!("{r:.0} ms")),
        expected.len()
    );
    println!(
        "2. one label change -> flows committed, from the inventory file's write ({} entities per \
         file) to the agent's commit: {} ({changes} changes; target p99 < 50 ms); agent \
         realization_ms {}; flow_mods per change {:?}..{:?}",
        entities / NAMESPACES,
        p50_p99_max(&wall),
        p50_p99_max(&realization),
        mods.iter().min(),
        mods.iter().max()
    );
    println!(
        "   the first change after the fleet landed (timed apart: it reads again the files read \
         within seconds of their write): {first_change:.1} ms"
    );
    println!(
        "   after the changes the bridge {} compile's output for the directory",
        if matches { "equals" } else { "DIFFERS FROM" }
    );
    println!(
        "3. agent memory: VmRSS {rss0:.1} MB before any policy; after the fleet VmRSS {rss1:.1} MB, \
         VmHWM {hwm1:.1} MB; after the changes VmRSS {rss2:.1} MB, peak VmHWM {hwm2:.1} MB; \
         idle 7 s later VmRSS {rss3:.1} MB"
    );
    println!("load average at the end: {}", load.trim());
    println!("reproduce: {HOW}");
    let mut failed = Vec::new();
    if installed < policies {
        failed.push(format!("{installed} of {policies} rules installed"));
    }
    if no_flows > 0 {
        failed.push(format!("{no_flows} label change(s) committed no flow_mod"));
    }
    if !matches {
        failed.push("the bridge differs from compile's output after the changes".into());
    }
    if !failed.is_empty() {
        eprintln!("FAILED: {}", failed.join("; "));
        std::process::exit(1);
    }
}
