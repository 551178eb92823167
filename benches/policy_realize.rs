//! Benchmark: the policy engine end to end, in the lab (a VM namespace with a private userspace
//! Open vSwitch, the agent attached to it; see `tests/support/lab.rs`).
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench policy_realize
//! # options, as environment variables: PRBENCH_POLICIES (default 2000, 5 rules each),
//! # PRBENCH_ITERATIONS (20 adds, changes and deletes), PRBENCH_PRIORITY_STEP (0.07: policy i
//! # has priority 1 + 0.07 i, so that every rule's initial OpenFlow priority guess is distinct;
//! # with 1, as in benches/policy_compile.rs, the guesses of policies above 149 collapse to the
//! # bottom of the range, and the agent leaves about half the rules uninstalled (NoRoom) although
//! # `compile --state` places them all), PRBENCH_ONE_BY_ONE (see 1.)
//! ```
//!
//! It measures, in one run:
//! 1. 2,000 NetworkPolicies x 5 rules (10,000 rules: ingress and egress, ipBlocks, TCP ports and
//!    ranges, every action) written as files into `standalone.policyDir` while the agent runs
//!    attached (the policy dir is a symlink swapped to a directory holding them, like a
//!    ConfigMap mount; `PRBENCH_ONE_BY_ONE=1` renames them in one by one instead): the time
//!    from the files landing to the agent's bundle commit that leaves the bridge with exactly
//!    the flows `antrea-vm-agent compile --state` prints for that state (checked with
//!    dump-flows), and the agent's own `realization_ms` for it (rule view change to commit:
//!    compilation, diff, encoding and the bundle). Compared with
//!    `ovs-ofctl -O OpenFlow15 --bundle add-flows` of that compile output into the same bridge,
//!    cleared (after the agent is killed, at the end of the run). Ours includes noticing the
//!    change (inotify, then a 20 ms settle), reading and parsing 2,000 files and resolution.
//! 2. With the 10,000 rules in place: one policy file added, changed, deleted, 20 times each;
//!    p50/p99 of the agent's `realization_ms` and of file write to commit (log timestamps:
//!    the whole path, inotify, settle, reading the 2,000 files, parsing the changed one,
//!    resolution, compilation and the bundle).
//! 3. The agent's VmRSS before any policy, and VmRSS and VmHWM with the 10,000 rules installed
//!    (and after step 2).
//!
//! This is a `harness = false` bench: `cargo test --all-targets` also builds and starts it,
//! without `--bench`, and then it only prints how to run it. Every wait is bounded; the lab
//! (namespaces, OVS, the agent) is removed on exit, also after a failure.

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::{env_usize, ms, quantile};
use support::*;

const HOW: &str = "cargo bench --bench policy_realize";
const RULES_PER_POLICY: usize = 5;
/// Bound for the 10,000-rule realization.
const BIG_TIMEOUT: Duration = Duration::from_secs(600);
/// Bound for the wait for the next commit while the 10,000 rules are not all realized.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound for one incremental change.
const SMALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The marker of the flow installer's commit log line.
const COMMITTED: &str = "flows committed";

/// The AppliedToGroup holding this lab VM's eth0 ExternalEntity.
const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// NetworkPolicy `i` of the fleet, at priority `1 + i * step` in the Application tier: 5 rules, alternating ingress and egress, a /24 peer plus a
/// /16 (or an IPv6 /8), TCP 22 plus a port range, actions cycling Allow, Drop, Reject, Pass.
fn fleet_policy(i: usize, step: f64) -> String {
    let mut rules = String::new();
    for r in 0..RULES_PER_POLICY {
        let k = i * RULES_PER_POLICY + r;
        let cidr = format!("10.{}.{}.0/24", (k / 256) % 256, k % 256);
        let peer = if k.is_multiple_of(2) {
            format!("direction: In, from: {{ipBlocks: [{{cidr: {cidr}}}, {{cidr: 192.168.0.0/16}}]}}")
        } else {
            format!("direction: Out, to: {{ipBlocks: [{{cidr: {cidr}}}, {{cidr: \"fd00::/8\"}}]}}")
        };
        let action = ["Allow", "Drop", "Reject", "Pass"][k % 4];
        rules.push_str(&format!(
            "- {{{peer}, services: [{{protocol: TCP, port: 22}}, {{protocol: TCP, port: 8000, endPort: {}}}], \
             action: {action}, priority: {r}}}\n",
            8080 + k % 7
        ));
    }
    policy(&format!("fleet-{i}"), 250, 1.0 + i as f64 * step, &rules)
}

/// The policy added, changed and deleted in step 2 (one ingress rule).
fn incremental_policy(j: usize, port: usize) -> String {
    policy(
        &format!("inc-{j}"),
        250,
        0.5,
        &format!(
            "- {{direction: In, from: {{ipBlocks: [{{cidr: 10.250.{}.0/24}}]}}, \
             services: [{{protocol: TCP, port: {port}}}], action: Drop, priority: 0}}\n",
            j % 256
        ),
    )
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

/// Writes `text` to `dir/file` atomically (a hidden temporary file, then a rename).
fn write_atomic(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, dir.join(file)).unwrap_or_else(|e| panic!("rename into {}: {e}", dir.display()));
}

/// One `flows committed` line of the agent log.
#[derive(Clone, Debug)]
struct Commit {
    /// The log line's timestamp.
    at: Option<SystemTime>,
    flow_mods: Option<usize>,
    realization_ms: Option<f64>,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key))
}

fn parse_commit(line: &str) -> Commit {
    let at = line
        .split_whitespace()
        .next()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(SystemTime::from);
    Commit {
        at,
        flow_mods: field(line, "flow_mods=").and_then(|v| v.parse().ok()),
        realization_ms: field(line, "realization_ms=Some(")
            .and_then(|v| v.strip_suffix(')'))
            .and_then(|v| v.parse().ok()),
    }
}

fn commits(agent: &AgentProcess) -> Vec<Commit> {
    agent
        .log()
        .lines()
        .filter(|l| l.contains(COMMITTED))
        .map(parse_commit)
        .collect()
}

/// Waits (bounded by `timeout`, polling every `every`) until the agent logs a commit beyond the
/// first `seen`, and returns the new ones.
fn wait_commits(
    agent: &AgentProcess,
    seen: usize,
    timeout: Duration,
    every: Duration,
) -> Result<Vec<Commit>, String> {
    let end = Instant::now() + timeout;
    loop {
        let all = commits(agent);
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
        std::thread::sleep(every);
    }
}

fn ofctl(args: &[&str], lab: &Lab) -> String {
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=60"])
        .args(args)
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .output()
        .unwrap_or_else(|e| panic!("run ovs-ofctl {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ovs-ofctl {args:?} failed: {}",
        out.describe()
    );
    out.stdout_text()
}

fn flow_count(lab: &Lab) -> usize {
    let out = ofctl(&["dump-aggregate"], lab);
    out.split("flow_count=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no flow_count in {out:?}"))
}

/// `antrea-vm-agent compile --state` for the lab's interface and these controlplane objects:
/// the flows, one per line, and the compile time.
fn compile_flows(lab: &Lab, objects: &[String]) -> (String, Duration) {
    let objects: Vec<&str> = objects.iter().map(String::as_str).collect();
    let t = Instant::now();
    let flows = lab.compile_state(&objects, serde_json::json!([]));
    (flows, t.elapsed())
}

/// `(VmRSS, VmHWM)` of a process, in MB.
fn rss_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

/// Milliseconds from `t0` to a commit's log timestamp, or to `fallback` without one.
fn commit_ms(t0: SystemTime, c: &Commit, fallback: SystemTime) -> f64 {
    let at = c.at.unwrap_or(fallback);
    at.duration_since(t0).map(ms).unwrap_or(0.0)
}

struct Incremental {
    realization: Vec<f64>,
    wall: Vec<f64>,
}

impl Incremental {
    fn line(&self, what: &str) -> String {
        format!(
            "{what:<7} realization_ms p50 {:.2} p99 {:.2} (max {:.2}); write->commit p50 {:.0} ms p99 {:.0} ms ({} samples)",
            quantile(&self.realization, 0.5),
            quantile(&self.realization, 0.99),
            quantile(&self.realization, 1.0),
            quantile(&self.wall, 0.5),
            quantile(&self.wall, 0.99),
            self.realization.len()
        )
    }
}

/// Applies one change to the policy directory and waits for its commit; records both latencies.
fn timed_change(agent: &AgentProcess, into: &mut [&mut Incremental], change: impl FnOnce()) {
    let seen = commits(agent).len();
    let t0 = SystemTime::now();
    change();
    let new =
        wait_commits(agent, seen, SMALL_TIMEOUT, Duration::from_millis(5)).unwrap_or_else(|e| panic!("{e}"));
    let now = SystemTime::now();
    let c = new.last().cloned().expect("a commit");
    for i in into.iter_mut() {
        if let Some(r) = c.realization_ms {
            i.realization.push(r);
        }
        i.wall.push(commit_ms(t0, &c, now));
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("policy_realize: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("PRBENCH_POLICIES", 2000).max(1);
    let iterations = env_usize("PRBENCH_ITERATIONS", 20).max(1);
    let rules = policies * RULES_PER_POLICY;
    let step: f64 = std::env::var("PRBENCH_PRIORITY_STEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.07);
    println!("policy_realize: {policies} NetworkPolicies x {RULES_PER_POLICY} rules = {rules} rules; {iterations} adds/changes/deletes");
    println!("command: {HOW}  (policy priorities 1 + {step} i, Application tier)");
    println!("agent binary: {}", agent_binary());

    let lab = Lab::new();
    // `standalone.policyDir` is a symlink to a directory, like a Kubernetes ConfigMap mount: the
    // 2,000 files land at once when the link is swapped (PRBENCH_ONE_BY_ONE=1: renamed into the
    // directory one by one instead, so the agent may see them in several snapshots).
    let one_by_one = std::env::var("PRBENCH_ONE_BY_ONE").is_ok_and(|v| v == "1");
    let dir = lab.dir().join("policies");
    let first = lab.dir().join("policies-0");
    let staging = lab.dir().join("policies-1");
    for d in [&first, &staging] {
        std::fs::create_dir_all(d).expect("create the policy dirs");
        write_atomic(d, "00-atg.yaml", APPLIED_TO);
    }
    std::os::unix::fs::symlink(&first, &dir).expect("link the policy dir");
    let config = lab.write_config(&format!("standalone:\n  policyDir: {}\n", dir.display()));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(60),
        "attached and the first flows committed",
        || lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4)) && !commits(&agent).is_empty(),
    );
    let base_flows = flow_count(&lab);
    let (rss0, _) = rss_mb(agent.pid());
    println!("attached; {base_flows} flows before any NetworkPolicy; agent VmRSS {rss0:.1} MB");

    // === 1. 10,000 rules ===
    let texts: Vec<String> = (0..policies).map(|i| fleet_policy(i, step)).collect();
    let names: Vec<String> = (0..policies).map(|i| format!("10-fleet-{i:05}.yaml")).collect();
    for (name, text) in names.iter().zip(&texts) {
        std::fs::write(staging.join(name), text).expect("write a staged policy");
    }
    let mut objects = vec![APPLIED_TO.to_string()];
    objects.extend(texts.iter().cloned());
    let (expected, compile_time) = compile_flows(&lab, &objects);
    let expected_count = expected.lines().filter(|l| !l.trim().is_empty()).count();
    println!(
        "compile --state: {expected_count} flows for {rules} rules ({:.0} ms, one process)",
        ms(compile_time)
    );

    let seen = commits(&agent).len();
    let t0 = SystemTime::now();
    let started = Instant::now();
    if one_by_one {
        for name in &names {
            std::fs::rename(staging.join(name), first.join(name)).expect("move a policy into the policy dir");
        }
    } else {
        let link = lab.dir().join(".policies.new");
        std::os::unix::fs::symlink(&staging, &link).expect("link the new policy dir");
        std::fs::rename(&link, &dir).expect("swap the policy dir link");
    }
    let moved = started.elapsed();
    // Every commit from here on, until the bridge holds exactly the expected flows.
    let mut seen_now = seen;
    let mut big: Vec<Commit> = Vec::new();
    let final_commit = loop {
        let left = BIG_TIMEOUT.saturating_sub(started.elapsed()).min(IDLE_TIMEOUT);
        assert!(
            !left.is_zero(),
            "the {rules} rules were not realized within {BIG_TIMEOUT:?}"
        );
        let new = match wait_commits(&agent, seen_now, left, Duration::from_millis(5)) {
            Ok(new) => new,
            Err(e) => panic!(
                "{e}\nthe bridge holds {} flows, compile --state prints {expected_count}; \
                 {} rule(s) logged as not installed",
                flow_count(&lab),
                agent
                    .log()
                    .lines()
                    .filter(|l| l.contains("not installed"))
                    .count()
            ),
        };
        seen_now += new.len();
        big.extend(new);
        // Only a commit that leaves the bridge at the expected count (and stays there) counts.
        if flow_count(&lab) == expected_count {
            std::thread::sleep(Duration::from_millis(1500));
            let later = commits(&agent).len();
            if later == seen_now && flow_count(&lab) == expected_count {
                break big.last().cloned().expect("a commit");
            }
        }
    };
    let observed = SystemTime::now();
    let ours_wall = commit_ms(t0, &final_commit, observed);
    let realization = final_commit.realization_ms;
    println!(
        "ours: {} commit(s) after the files landed (flow_mods {:?}); files landed in {:.0} ms",
        big.len(),
        big.iter().map(|c| c.flow_mods.unwrap_or(0)).collect::<Vec<_>>(),
        ms(moved)
    );
    let (rss1, hwm1) = rss_mb(agent.pid());
    let mut want: Vec<String> = expected.lines().map(str::to_string).collect();
    want.sort();
    assert!(
        lab.dump_flows() == want,
        "the bridge does not hold exactly what compile --state prints"
    );
    println!("checked: dump-flows equals compile --state output ({expected_count} flows)");

    // === 2. incremental adds, changes, deletes ===
    let mut add = Incremental {
        realization: vec![],
        wall: vec![],
    };
    let mut change = Incremental {
        realization: vec![],
        wall: vec![],
    };
    let mut delete = Incremental {
        realization: vec![],
        wall: vec![],
    };
    let mut all = Incremental {
        realization: vec![],
        wall: vec![],
    };
    for j in 0..iterations {
        let file = "90-inc.yaml";
        timed_change(&agent, &mut [&mut add, &mut all], || {
            write_atomic(&dir, file, &incremental_policy(j, 7000 + j))
        });
        timed_change(&agent, &mut [&mut change, &mut all], || {
            write_atomic(&dir, file, &incremental_policy(j, 17000 + j))
        });
        timed_change(&agent, &mut [&mut delete, &mut all], || {
            std::fs::remove_file(dir.join(file)).expect("delete the policy file")
        });
    }
    wait_until(
        Duration::from_secs(30),
        "back to the 10,000-rule flow count",
        || flow_count(&lab) == expected_count,
    );
    let (rss2, hwm2) = rss_mb(agent.pid());

    // === 1b. ovs-ofctl: the same flows into the same bridge, cleared, with the agent gone ===
    agent.kill_hard();
    let file = lab.dir().join("expected-flows.txt");
    std::fs::write(&file, &expected).expect("write the flow file");
    ofctl(&["del-flows"], &lab);
    assert_eq!(flow_count(&lab), 0, "del-flows cleared the bridge");
    let t = Instant::now();
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=600", "--bundle", "add-flows"])
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .arg(&file)
        .output()
        .expect("run ovs-ofctl add-flows");
    let ofctl_time = t.elapsed();
    assert!(
        out.status.success(),
        "ovs-ofctl --bundle add-flows failed: {}",
        out.describe()
    );
    assert_eq!(flow_count(&lab), expected_count, "ovs-ofctl installed every flow");
    let ofctl_ms = ms(ofctl_time);

    println!();
    println!("=== policy_realize results ({rules} rules, {expected_count} flows) ===");
    println!(
        "1. realize {rules} rules: ours {ours_wall:.0} ms from the files landing to the commit \
         (includes noticing the change, reading/parsing {policies} files, resolution); \
         agent realization_ms (rule view change -> bundle commit) {}",
        realization.map_or("n/a".to_string(), |r| format!("{r:.0} ms"))
    );
    println!(
        "   ovs-ofctl -O OpenFlow15 --bundle add-flows of compile --state output into the cleared bridge: {ofctl_ms:.0} ms"
    );
    println!(
        "   ratio ours/ovs-ofctl: {:.2} (wall, files -> commit); {} (realization_ms); target <= 1.2",
        ours_wall / ofctl_ms,
        realization.map_or("n/a".to_string(), |r| format!("{:.2}", r / ofctl_ms))
    );
    println!("2. with {rules} rules installed, {iterations} of each (realization_ms: rule change reaching the flow installer -> bundle commit; target p99 < 10 ms):");
    for (what, inc) in [
        ("add", &add),
        ("change", &change),
        ("delete", &delete),
        ("all", &all),
    ] {
        println!("   {}", inc.line(what));
    }
    println!(
        "3. agent memory with {rules} rules installed: VmRSS {rss1:.1} MB, VmHWM {hwm1:.1} MB (target < 64 MB); \
         after step 2: VmRSS {rss2:.1} MB, VmHWM {hwm2:.1} MB"
    );
    println!("reproduce: {HOW}");
    drop(agent);
    drop(lab);
}
