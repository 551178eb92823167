//! Benchmark: the policy engine end to end, in the lab (a VM namespace with a private userspace
//! Open vSwitch, the agent attached to it; see `tests/support/lab.rs`), side by side with the
//! fastest honest baseline and with OVS's own limit, in one run.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench policy_realize
//! # options, as environment variables:
//! #   PRBENCH_FLEETS     which rule sets, comma-separated (default `fractional,whole`):
//! #                      fractional: Application tier, policy i at priority 1 + 0.07 i (every
//! #                        rule's OpenFlow priority guess distinct; PRBENCH_PRIORITY_STEP);
//! #                      whole: whole-number priorities as real policies use them: five tiers
//! #                        (Emergency .. Application), priorities 1, 2, 5, 10, 20, 50, 100,
//! #                        many policies sharing each (tier, priority);
//! #                      one-tier: Application tier, policy i at the whole priority 1 + i (the
//! #                        50,000-rule case: PRBENCH_POLICIES=10000 PRBENCH_FLEETS=one-tier)
//! #   PRBENCH_POLICIES   NetworkPolicies per fleet (default 2000, 5 rules each)
//! #   PRBENCH_ITERATIONS adds, changes and deletes of one policy (default 20 each)
//! #   PRBENCH_OFCTL_ORDERS  flow orders of the ovs-ofctl baseline (default `ascending`; add
//! #                      `descending` to see what priority order costs OVS)
//! #   PRBENCH_ONE_BY_ONE=1  the policy files are renamed in one by one (see 1.)
//! #   PRBENCH_FORMAT=json   the fleet's policy files are written as JSON (`.json`), the same
//! #                      objects; default YAML (`benches/policy_parse.rs` times the parse of each)
//! ```
//!
//! Per fleet it measures:
//! 1. The fleet (2,000 NetworkPolicies x 5 rules = 10,000 rules: ingress and egress, ipBlocks,
//!    TCP ports and ranges, every action) written as files into `standalone.policyDir` while the
//!    agent runs attached (the policy dir is a symlink swapped to a directory holding them, like
//!    a ConfigMap mount, once ovs-vswitchd has used no CPU for a second, as before each
//!    baseline): the time from the files landing to the agent's bundle commit that leaves
//!    the bridge with exactly the flows `antrea-vm-agent compile --state` prints (checked with
//!    dump-flows), and the agent's own `realization_ms`. The bridge must then hold one action
//!    flow (`conj_id`) for **every rule given**: fewer makes the bench exit non-zero (counted
//!    on the bridge, not against `compile`, which may drop the same rules).
//! 2. With the rules in place: one policy file added, changed, deleted, 20 times each; p50/p99
//!    of the agent's `realization_ms` and of file write to commit. Next to them, OVS's own
//!    limit for the same changes: once the agent is gone (before 4.), the bundles it committed
//!    for them are replayed byte for byte, in order, on one connection, into the switch state
//!    it left, each timed from its first byte to its commit reply.
//! 3. The agent's VmRSS before any policy, and VmRSS and VmHWM (peak) with the rules installed.
//! 4. A restart on the installed rules (SIGKILL, new agent, same config): agent start to the
//!    take-over commit, and the new agent's peak (VmHWM) by then.
//! 5. Baselines, with the agent gone, each into a fresh switch (ovs-vswitchd killed and started
//!    again on the same database, the bridge's default flow deleted, then until ovs-vswitchd has
//!    used no CPU for a second; OVS's own `del-flows` of 784k flows takes over a minute):
//!    * `ovs-ofctl -O OpenFlow15 --bundle add-flows` of the same flows (compile --state output)
//!      sorted by ascending priority per table: the order that is fastest for OVS (a descending
//!      insert walks every flow of the same match at higher priorities; PRBENCH_OFCTL_ORDERS
//!      shows it);
//!    * OVS's own limit: the agent's largest bundle (open, every bundle_add, commit) replayed
//!      byte for byte on a fresh connection. The agent talks to OVS through a recording proxy
//!      (`benches/common/replay.rs`) for this: it costs the agent a copy of its bytes, never
//!      the baselines.
//!
//! This is a `harness = false` bench: `cargo test --all-targets` also builds and starts it,
//! without `--bench`, and then it only prints how to run it. Every wait is bounded; the lab
//! (namespaces, OVS, the agent) is removed on exit, also after a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::agent::{commit_ms, parse_commit, rss_mb, write_atomic, Commit};
use common::fleet_files::{
    as_json, fleet_policy, incremental_policy, Fleet, APPLIED_TO, FRACTIONAL_STEP, RULES_PER_POLICY,
};
use common::lab_fleet::installed_rules;
use common::replay::{bundle_marks, bundles_since, largest_bundle, recording_proxy, replay, replay_each};
use common::{env_usize, ms, quantile};
use support::*;

const HOW: &str = "cargo bench --bench policy_realize";
/// Bound for the 10,000-rule realization.
const BIG_TIMEOUT: Duration = Duration::from_secs(600);
/// Bound for the wait for the next commit while the 10,000 rules are not all realized.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound for one incremental change.
const SMALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The marker of the flow installer's commit log line.
const COMMITTED: &str = "flows committed";

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

/// Fails with `what` unless the bridge holds exactly the flows `compile --state` printed.
fn assert_bridge_holds(lab: &Lab, expected: &str, what: &str) {
    let mut want: Vec<String> = expected.lines().map(str::to_string).collect();
    want.sort();
    assert!(lab.dump_flows() == want, "{what}");
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

/// `(table, priority)` of a flow line printed by `compile --state`.
fn table_priority(line: &str) -> (u32, u32) {
    let get = |key: &str| -> u32 {
        line.split([',', ' '])
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (get("table="), get("priority="))
}

/// Utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which ends with the last ')'): state is field 3, utime 14.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The groups and meters the agent set up, as `ovs-ofctl add-group` / `add-meter` arguments: a
/// freshly started ovs-vswitchd has none, and the flows refer to them.
struct SwitchSetup {
    groups: Vec<String>,
    meters: Vec<String>,
}

impl SwitchSetup {
    fn dump(lab: &Lab) -> SwitchSetup {
        let groups = ofctl(&["dump-groups"], lab)
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("group_id="))
            .map(str::to_string)
            .collect();
        // A meter prints as `meter=N flags bands=` and one line per band.
        let mut meters: Vec<String> = Vec::new();
        for line in ofctl(&["dump-meters"], lab).lines().map(str::trim) {
            if line.starts_with("meter=") {
                meters.push(line.to_string());
            } else if line.starts_with("type=") {
                if let Some(m) = meters.last_mut() {
                    m.push(' ');
                    m.push_str(line);
                }
            }
        }
        SwitchSetup { groups, meters }
    }

    fn restore(&self, lab: &Lab) {
        let switch = format!("unix:{}", lab.mgmt_sock().display());
        let add = |what: &str, spec: &str| {
            // The switch comes before the spec here (`ofctl` appends it).
            let out = Command::new("ovs-ofctl")
                .args(["-O", "OpenFlow15", "--timeout=60", what, &switch, spec])
                .output()
                .unwrap_or_else(|e| panic!("run ovs-ofctl {what}: {e}"));
            assert!(
                out.status.success(),
                "ovs-ofctl {what} {spec:?} failed: {}",
                out.describe()
            );
        };
        for m in &self.meters {
            add("add-meter", m);
        }
        for g in &self.groups {
            add("add-group", g);
        }
    }
}

fn vswitchd_pid(lab: &Lab) -> u32 {
    std::fs::read_to_string(lab.run_dir().join("ovs-vswitchd.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .expect("ovs-vswitchd's pid file")
}

/// Gives a baseline a fresh switch and waits until ovs-vswitchd has settled: ovs-vswitchd is
/// killed (the kernel frees its flow tables at once; OVS's own `del-flows` of the one-tier
/// fleet's 784k flows took over a minute) and started again on the same database, so the bridge
/// comes back with its ports and without the flows; `del-flows` then removes OVS's default flow,
/// the agent's groups and meters are put back (the flows use them; del-flows kept them), and
/// the switch settles ([`settle_vswitchd`]). Every side of the comparison (the agent in its
/// fresh lab, each baseline here) starts from a freshly started, settled ovs-vswitchd. Returns
/// how long it took.
fn fresh_switch_and_settle(lab: &Lab, setup: &SwitchSetup) -> Duration {
    let started = Instant::now();
    let old_pid = vswitchd_pid(lab);
    lab.kill_vswitchd();
    // Its threads still hold the pid file's lock while they exit (the leader can already be a
    // zombie): a new ovs-vswitchd started before they are gone refuses to run.
    wait_until(
        Duration::from_secs(60),
        "the killed ovs-vswitchd's threads gone",
        || std::fs::read_dir(format!("/proc/{old_pid}/task")).map_or(true, |tasks| tasks.count() <= 1),
    );
    lab.start_vswitchd();
    wait_until(
        Duration::from_secs(60),
        "the bridge back after the restart",
        || {
            Command::new("ovs-ofctl")
                .args(["-O", "OpenFlow15", "--timeout=5", "dump-aggregate"])
                .arg(format!("unix:{}", lab.mgmt_sock().display()))
                .output()
                .is_ok_and(|o| o.status.success())
        },
    );
    ofctl(&["del-flows"], lab);
    assert_eq!(flow_count(lab), 0, "del-flows cleared the bridge");
    setup.restore(lab);
    settle_vswitchd(lab);
    started.elapsed()
}

/// Waits until ovs-vswitchd used no CPU for four windows of 250 ms in a row (at most 60 s): no
/// side of a comparison starts while the switch still works on something else (its start, an
/// attach, a baseline before). Returns how long it waited.
fn settle_vswitchd(lab: &Lab) -> Duration {
    let pid = vswitchd_pid(lab);
    let mut quiet = 0;
    let mut last = cpu_ticks(pid).unwrap_or(0);
    let settling = Instant::now();
    while quiet < 4 && settling.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
        let now = cpu_ticks(pid).unwrap_or(0);
        quiet = if now.saturating_sub(last) == 0 {
            quiet + 1
        } else {
            0
        };
        last = now;
    }
    settling.elapsed()
}

/// `ovs-ofctl --bundle add-flows` of `lines` (in that order) into a fresh, settled switch.
fn ofctl_add_flows(lab: &Lab, setup: &SwitchSetup, lines: &[&str], expected_count: usize) -> f64 {
    let file = lab.unique_path("flows", "txt");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write the flow file");
    fresh_switch_and_settle(lab, setup);
    let t = Instant::now();
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=600", "--bundle", "add-flows"])
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .arg(&file)
        .output()
        .expect("run ovs-ofctl add-flows");
    let took = ms(t.elapsed());
    assert!(
        out.status.success(),
        "ovs-ofctl --bundle add-flows failed: {}",
        out.describe()
    );
    assert_eq!(flow_count(lab), expected_count, "ovs-ofctl installed every flow");
    took
}

/// What one fleet measured.
struct Outcome {
    fleet: Fleet,
    rules: usize,
    flows: usize,
    installed: usize,
    ours_wall: f64,
    realization: Option<f64>,
    rss0: f64,
    rss1: f64,
    hwm1: f64,
    rss2: f64,
    hwm2: f64,
    incremental: Vec<(&'static str, Incremental)>,
    takeover_ms: f64,
    takeover_mods: Option<usize>,
    takeover_hwm: f64,
    ofctl: Vec<(String, f64)>,
    replay_ms: f64,
    replay_adds: usize,
    /// Step 2b: OVS's time for each of the agent's change bundles, replayed (ms), and their sizes.
    change_replay: Vec<f64>,
    change_adds: Vec<usize>,
}

/// PRBENCH_FORMAT=json: the fleet's files are written as JSON (`.json`) instead of YAML.
fn json_files() -> bool {
    std::env::var("PRBENCH_FORMAT").is_ok_and(|f| f.trim() == "json")
}

fn run_fleet(fleet: Fleet, policies: usize, iterations: usize, orders: &[String]) -> Outcome {
    let rules = policies * RULES_PER_POLICY;
    println!();
    println!(
        "--- fleet {}: {policies} NetworkPolicies x {RULES_PER_POLICY} rules = {rules} rules ---",
        fleet.describe()
    );
    let lab = Lab::new();
    // The agent reaches OVS through a recording proxy (OVSDB directly): see 5.
    let proxy_dir = lab.dir().join("ofproxy");
    std::fs::create_dir_all(&proxy_dir).expect("create the proxy dir");
    std::os::unix::fs::symlink(lab.db_sock(), proxy_dir.join("db.sock")).expect("link db.sock");
    let recording = recording_proxy(&proxy_dir.join(format!("{BRIDGE}.mgmt")), lab.mgmt_sock());

    // `standalone.policyDir` is a symlink to a directory, like a Kubernetes ConfigMap mount: the
    // files land at once when the link is swapped (PRBENCH_ONE_BY_ONE=1: renamed into the
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
    let config = lab.write_config(&format!(
        "ovsRunDir: {}\nstandalone:\n  policyDir: {}\n",
        proxy_dir.display(),
        dir.display()
    ));
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

    // === 1. the fleet ===
    let texts: Vec<String> = (0..policies).map(|i| fleet_policy(i, fleet)).collect();
    let json = json_files();
    let extension = if json { "json" } else { "yaml" };
    let names: Vec<String> = (0..policies)
        .map(|i| format!("10-fleet-{i:05}.{extension}"))
        .collect();
    for (name, text) in names.iter().zip(&texts) {
        let text = if json { as_json(text) } else { text.clone() };
        std::fs::write(staging.join(name), text).expect("write a staged policy");
    }
    let mut objects = vec![APPLIED_TO.to_string()];
    objects.extend(texts);
    let (expected, compile_time) = compile_flows(&lab, &objects);
    drop(objects);
    let expected_count = expected.lines().filter(|l| !l.trim().is_empty()).count();
    println!(
        "compile --state: {expected_count} flows for {rules} rules ({:.0} ms, one process)",
        ms(compile_time)
    );

    // The switch settles first, as for every baseline below (the attach and the first flows
    // are OVS work of their own).
    let settled = settle_vswitchd(&lab);
    println!(
        "ovs-vswitchd settled in {:.1} s before the files landed",
        settled.as_secs_f64()
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
    assert_bridge_holds(
        &lab,
        &expected,
        "the bridge does not hold exactly what compile --state prints",
    );
    println!("checked: dump-flows equals compile --state output ({expected_count} flows)");
    let installed = installed_rules(&lab.dump_flows());
    println!("installed: {installed} of the {rules} rules given have their action flow on the bridge");

    // === 2. incremental adds, changes, deletes ===
    // Where each connection's committed bundles stand before the changes (see 2b).
    let before_changes = bundle_marks(&recording);
    let new_inc = || Incremental {
        realization: vec![],
        wall: vec![],
    };
    let (mut add, mut change, mut delete, mut all) = (new_inc(), new_inc(), new_inc(), new_inc());
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
    wait_until(Duration::from_secs(30), "back to the fleet's flow count", || {
        flow_count(&lab) == expected_count
    });
    let (rss2, hwm2) = rss_mb(agent.pid());
    // The agent's largest bundle so far (the fleet's), before the restart adds its own.
    let (bundle, replay_adds) = largest_bundle(&recording).expect("the agent's bundles were recorded");

    // The bundles the agent committed for the changes, before a restart adds its own.
    let changes = bundles_since(&recording, &before_changes);
    assert!(
        changes.len() >= 3 * iterations,
        "{} bundles recorded for {} changes",
        changes.len(),
        3 * iterations
    );
    agent.kill_hard();

    // === 2b. OVS's own limit for the changes of step 2: the agent's change bundles replayed
    // byte for byte in the same order on one connection, into the switch state the agent left
    // (its fleet's flows; the agent is gone): the adds, changes and deletes leave the switch
    // where it started, as they did for the agent, which the dump below checks.
    let change_replay: Vec<f64> = replay_each(&lab.mgmt_sock(), &changes)
        .unwrap_or_else(|e| panic!("raw replay of the change bundles: {e}"))
        .into_iter()
        .map(ms)
        .collect();
    let change_adds: Vec<usize> = changes.iter().map(|b| b.adds).collect();
    drop(changes);
    assert_bridge_holds(
        &lab,
        &expected,
        "the replayed change bundles left the switch with other flows than the fleet's",
    );

    // === 4. restart on the installed flows: take-over ===
    let restart_at = SystemTime::now();
    let agent = lab.start_agent(&config);
    let taken =
        wait_commits(&agent, 0, BIG_TIMEOUT, Duration::from_millis(5)).unwrap_or_else(|e| panic!("{e}"));
    let takeover = taken.first().cloned().expect("a commit");
    let takeover_ms = commit_ms(restart_at, &takeover, SystemTime::now());
    let (_, takeover_hwm) = rss_mb(agent.pid());
    wait_until(
        Duration::from_secs(60),
        "the restarted agent's flows equal the fleet's",
        || flow_count(&lab) == expected_count,
    );
    let mut agent = agent;
    agent.kill_hard();

    // === 5. baselines, each into a fresh settled switch, the agent gone ===
    let setup = SwitchSetup::dump(&lab);
    println!(
        "baselines: the agent's {} group(s) and {} meter(s) are set up on each fresh switch",
        setup.groups.len(),
        setup.meters.len()
    );
    let mut lines: Vec<&str> = expected.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut ofctl_times = Vec::new();
    for order in orders {
        match order.as_str() {
            "ascending" => lines.sort_by_key(|l| table_priority(l)),
            "descending" => lines.sort_by_key(|l| {
                let (t, p) = table_priority(l);
                (t, std::cmp::Reverse(p))
            }),
            other => panic!("PRBENCH_OFCTL_ORDERS: unknown order {other:?} (ascending, descending)"),
        }
        ofctl_times.push((
            order.clone(),
            ofctl_add_flows(&lab, &setup, &lines, expected_count),
        ));
    }
    fresh_switch_and_settle(&lab, &setup);
    let replay_time = replay(&lab.mgmt_sock(), &bundle).unwrap_or_else(|e| panic!("raw replay: {e}"));
    println!(
        "raw replay: {replay_adds} bundle_adds ({:.1} MB), bridge now holds {} flows",
        bundle.len() as f64 / 1e6,
        flow_count(&lab)
    );
    drop(agent);
    drop(lab);
    Outcome {
        fleet,
        rules,
        flows: expected_count,
        installed,
        ours_wall,
        realization,
        rss0,
        rss1,
        hwm1,
        rss2,
        hwm2,
        incremental: vec![("add", add), ("change", change), ("delete", delete), ("all", all)],
        takeover_ms,
        takeover_mods: takeover.flow_mods,
        takeover_hwm,
        ofctl: ofctl_times,
        replay_ms: ms(replay_time),
        replay_adds,
        change_replay,
        change_adds,
    }
}

fn report(o: &Outcome, iterations: usize) {
    let (rules, flows) = (o.rules, o.flows);
    println!();
    println!(
        "=== policy_realize: fleet {} ({rules} rules, {flows} flows) ===",
        o.fleet.label()
    );
    println!(
        "1. realize {rules} rules: ours {:.0} ms from the files landing to the commit \
         (includes noticing the change, reading/parsing the files, resolution); \
         agent realization_ms (rule view change -> bundle commit) {}",
        o.ours_wall,
        o.realization.map_or("n/a".to_string(), |r| format!("{r:.0} ms"))
    );
    println!("   installed: {} of {rules} rules (target: all)", o.installed);
    for (order, t) in &o.ofctl {
        println!(
            "   ovs-ofctl --bundle add-flows, same flows, {order} priority, fresh settled switch: {t:.0} ms \
             -> ours/ovs-ofctl {:.2} (wall){}{}",
            o.ours_wall / t,
            o.realization
                .map_or(String::new(), |r| format!(", {:.2} (realization_ms)", r / t)),
            if order == "ascending" {
                "; target <= 1.0"
            } else {
                ""
            }
        );
    }
    println!(
        "   OVS's limit, the agent's bundle ({} bundle_adds) replayed byte for byte: {:.0} ms \
         -> ours/limit {:.2} (wall){}; target <= 1.5",
        o.replay_adds,
        o.replay_ms,
        o.ours_wall / o.replay_ms,
        o.realization.map_or(String::new(), |r| format!(
            ", {:.2} (realization_ms)",
            r / o.replay_ms
        ))
    );
    println!("2. with {rules} rules installed, {iterations} of each (target: p99 < 10 ms):");
    for (what, inc) in &o.incremental {
        println!("   {}", inc.line(what));
    }
    println!(
        "   OVS's limit, the agent's {} change bundles (bundle_adds {}..{}) replayed byte for byte \
         in order on one connection, first byte -> commit reply: p50 {:.2} ms p99 {:.2} ms (max {:.2})",
        o.change_replay.len(),
        o.change_adds.iter().min().copied().unwrap_or(0),
        o.change_adds.iter().max().copied().unwrap_or(0),
        quantile(&o.change_replay, 0.5),
        quantile(&o.change_replay, 0.99),
        quantile(&o.change_replay, 1.0),
    );
    println!(
        "3. agent memory: VmRSS {:.1} MB before any policy; with {rules} rules VmRSS {:.1} MB, \
         peak VmHWM {:.1} MB (target < 80 MB); after step 2 VmRSS {:.1} MB, VmHWM {:.1} MB",
        o.rss0, o.rss1, o.hwm1, o.rss2, o.hwm2
    );
    println!(
        "4. restart with {flows} flows installed: agent start -> take-over committed {:.0} ms \
         (flow_mods {}; target <= 2000 ms), peak VmHWM {:.1} MB (target < 80 MB)",
        o.takeover_ms,
        o.takeover_mods.map_or("?".into(), |n| n.to_string()),
        o.takeover_hwm
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("policy_realize: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("PRBENCH_POLICIES", 2000).max(1);
    let iterations = env_usize("PRBENCH_ITERATIONS", 20).max(1);
    let step: f64 = std::env::var("PRBENCH_PRIORITY_STEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FRACTIONAL_STEP);
    let fleets: Vec<Fleet> = std::env::var("PRBENCH_FLEETS")
        .unwrap_or_else(|_| "fractional,whole".into())
        .split(',')
        .map(|f| Fleet::parse(f, step))
        .collect();
    let orders: Vec<String> = std::env::var("PRBENCH_OFCTL_ORDERS")
        .unwrap_or_else(|_| "ascending".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "policy_realize: {policies} NetworkPolicies x {RULES_PER_POLICY} rules per fleet; fleets {:?}; \
         files in {}; {iterations} adds/changes/deletes; load average at start {}",
        fleets.iter().map(Fleet::label).collect::<Vec<_>>(),
        if json_files() { "JSON" } else { "YAML" },
        load.trim()
    );
    println!("agent binary: {}", agent_binary());
    let outcomes: Vec<Outcome> = fleets
        .iter()
        .map(|&f| run_fleet(f, policies, iterations, &orders))
        .collect();
    for o in &outcomes {
        report(o, iterations);
    }
    if let (Some(frac), Some(whole)) = (
        outcomes.iter().find(|o| matches!(o.fleet, Fleet::Fractional(_))),
        outcomes.iter().find(|o| o.fleet == Fleet::Whole),
    ) {
        println!();
        println!(
            "whole vs fractional priorities: time {:.2}x, peak {:.2}x (target: within 10 %)",
            whole.ours_wall / frac.ours_wall,
            whole.hwm1 / frac.hwm1
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the end: {}", load.trim());
    println!("reproduce: {HOW}");
    let short: Vec<String> = outcomes
        .iter()
        .filter(|o| o.installed < o.rules)
        .map(|o| {
            format!(
                "fleet {}: {} of {} rules installed",
                o.fleet.label(),
                o.installed,
                o.rules
            )
        })
        .collect();
    if !short.is_empty() {
        eprintln!(
            "FAILED: the agent installed fewer rules than it was given: {}",
            short.join("; ")
        );
        std::process::exit(1);
    }
}
