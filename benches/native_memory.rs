//! Benchmark: the agent's memory and one-rule change latency on the path users write (the
//! Antrea-native fleet of `benches/common/native.rs`, [`mixed`]: custom Tiers, Groups and
//! ClusterGroups, mixed actions, ipBlocks with `except`, port ranges, ingress and egress) side
//! by side with the SAME rules written as controlplane objects, in one run, in the lab (a VM
//! namespace with a private userspace Open vSwitch, the agent attached to it; see
//! `tests/support/lab.rs`).
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench native_memory
//! # options, as environment variables:
//! #   NMBENCH_POLICIES   ANNPs + ACNPs (default 1000, 10 rules each: 10,000 rules)
//! #   NMBENCH_ENTITIES   ExternalEntities (default 420)
//! #   NMBENCH_CHANGES    one-rule changes timed per form (default 40)
//! #   NMBENCH_FORMS      which forms, in order (default `native,controlplane`; repeat a form
//! #                      to interleave: `native,controlplane,native,controlplane`)
//! ```
//!
//! The controlplane form is the native fleet translated by the agent's own local controller
//! (`antrea-vm-agent translate`'s [`translate_paths`]): one file per NetworkPolicy, one for the
//! AddressGroups, one for the AppliedToGroups, so both forms are exactly the same rules; the
//! bench checks that both leave the bridge with the same flows.
//!
//! Per form, each in a fresh lab:
//! 1. The fleet lands at once (the policy dir is a symlink swapped to a directory holding it,
//!    like a ConfigMap mount): the time to the last commit, when the bridge's flow count stays
//!    put, and the agent's VmRSS and VmHWM (the loading peak).
//! 2. One rule changed `NMBENCH_CHANGES` times (the first port of one policy's first rule,
//!    alternating between two values; its file rewritten atomically, 250 ms apart): write to
//!    the agent's commit, by the commit's own log timestamp; p50/p99.
//! 3. The agent idle past the 5 s safety-net poll (which hands free memory back): the steady
//!    VmRSS.
//! 4. A restart on the installed flows (SIGKILL, new agent): the take-over peak (VmHWM).
//!
//! `NMBENCH_SOURCE=1`: instead of the lab (no root needed), the policy directory source alone
//! (what differs between the forms: reading, parsing, the local controller, validation), each
//! form in a child process of its own: VmHWM after the first snapshot, VmRSS after a
//! `malloc_trim` (what the idle agent does), and the one-rule change to the next snapshot.
//!
//! This is a `harness = false` bench: `cargo test --all-targets` also builds and starts it,
//! without `--bench`, and then it only prints how to run it. Every wait is bounded; the lab is
//! removed on exit, also after a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use antrea_vm_agent::cli::translate::{to_yaml, translate_paths};
use antrea_vm_agent::policy::controlplane::ControlplaneObject;
use common::agent::{commit_ms, parse_commit, rss_mb, write_atomic, Commit};
use common::lab_fleet::installed_rules;
use common::native::mixed;
use common::{env_usize, quantile};
use serde_json::Value;
use support::*;

const HOW: &str = "cargo bench --bench native_memory";
const BIG_TIMEOUT: Duration = Duration::from_secs(600);
const SMALL_TIMEOUT: Duration = Duration::from_secs(30);
const COMMITTED: &str = "flows committed";
/// The policy whose first rule the one-rule changes edit.
const CHANGED: usize = 7;

fn commits(agent: &AgentProcess) -> Vec<Commit> {
    agent
        .log()
        .lines()
        .filter(|l| l.contains(COMMITTED))
        .map(parse_commit)
        .collect()
}

/// Waits (bounded) for a commit beyond the first `seen`; returns the new ones.
fn wait_commits(agent: &AgentProcess, seen: usize, timeout: Duration) -> Vec<Commit> {
    let end = Instant::now() + timeout;
    loop {
        let all = commits(agent);
        if all.len() > seen {
            return all[seen..].to_vec();
        }
        if Instant::now() > end {
            let log = agent.log();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "no further `{COMMITTED}` within {timeout:?}; agent log tail:\n{}",
                lines[lines.len().saturating_sub(10)..].join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn flow_count(lab: &Lab) -> usize {
    common::lab_fleet::flow_count(&lab.mgmt_sock()).expect("the switch's flow count")
}

fn yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_norway::to_string(o).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The ExternalNode `vm-ns/vm1`, labelled `role: db` (the policies' appliedTo).
fn db_external_node() -> String {
    format!(
        "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
         metadata: {{name: vm1, namespace: vm-ns, labels: {{role: db}}}}\n\
         spec: {{interfaces: [{{name: {NIC}, ips: [\"{VM_IP4}\", \"{VM_IP6}\"]}}]}}\n"
    )
}

/// The native policy file of policy `i`, its changed rule's port `port`.
fn native_policy_file(i: usize, port: Option<usize>) -> (String, String) {
    (format!("policy-{i:05}.yaml"), yaml(&[mixed::policy(i, port)]))
}

/// Writes the native fleet into `dir`.
fn write_native(dir: &Path, policies: usize, entities: usize) {
    let tiers: Vec<Value> = mixed::TIERS.iter().map(|(n, p)| mixed::tier(n, *p)).collect();
    write_atomic(dir, "00-tiers.yaml", &yaml(&tiers));
    let mut namespaces = vec![mixed::namespace("vm-ns", 0)];
    namespaces.extend((0..mixed::NAMESPACES).map(|n| mixed::namespace(&format!("ns{n}"), n)));
    write_atomic(dir, "01-namespaces.yaml", &yaml(&namespaces));
    let mut groups: Vec<Value> = (0..mixed::CLUSTER_GROUPS).map(mixed::cluster_group).collect();
    groups.extend((0..mixed::GROUPS).map(mixed::group));
    write_atomic(dir, "02-groups.yaml", &yaml(&groups));
    let mut by_ns: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for i in 0..entities {
        by_ns
            .entry(mixed::entity_namespace(i))
            .or_default()
            .push(mixed::entity(i));
    }
    for (ns, list) in by_ns {
        write_atomic(dir, &format!("03-inventory-{ns}.yaml"), &yaml(&list));
    }
    for i in 0..policies {
        let (file, text) = native_policy_file(i, None);
        write_atomic(dir, &file, &text);
    }
}

/// The controlplane objects the agent's local controller makes of the native files in `dir`.
fn translate(dir: &Path, en_file: &Path) -> Vec<ControlplaneObject> {
    let t = translate_paths(&[dir.to_path_buf()], Some(en_file));
    let errors = t.all_errors();
    assert!(
        errors.is_empty(),
        "the native fleet does not translate: {errors:?}"
    );
    t.translation.objects()
}

/// The source policy's name of a controlplane NetworkPolicy.
fn source_name(object: &ControlplaneObject) -> Option<String> {
    let v = object.to_value().ok()?;
    Some(v.get("sourceRef")?.get("name")?.as_str()?.to_owned())
}

fn one_yaml(object: &ControlplaneObject) -> String {
    to_yaml(std::slice::from_ref(object)).expect("YAML")
}

/// Writes the controlplane form of `objects` into `dir`: one file per NetworkPolicy (named after
/// its source policy), the AddressGroups and the AppliedToGroups in one file each.
fn write_controlplane(dir: &Path, objects: &[ControlplaneObject]) {
    let (mut ags, mut atgs) = (Vec::new(), Vec::new());
    for o in objects {
        match o {
            ControlplaneObject::NetworkPolicy(_) => {
                let name = source_name(o).expect("a translated policy names its source");
                write_atomic(dir, &format!("np-{name}.yaml"), &one_yaml(o));
            }
            ControlplaneObject::AddressGroup(_) => ags.push(o.clone()),
            ControlplaneObject::AppliedToGroup(_) => atgs.push(o.clone()),
            _ => panic!("the controller made an unexpected object"),
        }
    }
    write_atomic(dir, "00-address-groups.yaml", &to_yaml(&ags).expect("YAML"));
    write_atomic(dir, "00-applied-to-groups.yaml", &to_yaml(&atgs).expect("YAML"));
}

/// The two versions of the changed policy's file in a form: (file name, [text A, text B]).
struct ChangeFiles {
    file: String,
    texts: [String; 2],
}

/// One form's figures.
struct Outcome {
    form: String,
    load_ms: f64,
    rss0: f64,
    rss_loaded: f64,
    hwm_loaded: f64,
    change_p50: f64,
    change_p99: f64,
    change_max: f64,
    no_flow_mods: usize,
    hwm_changes: f64,
    steady: f64,
    takeover_hwm: f64,
    flows: Vec<String>,
    installed: usize,
}

fn run_form(form: &str, source: &Path, change: &ChangeFiles, changes: usize) -> Outcome {
    println!();
    println!("--- form {form} ---");
    let lab = Lab::new();
    let dir = lab.dir().join("policies");
    let first = lab.dir().join("policies-0");
    let staging = lab.dir().join("policies-1");
    for d in [&first, &staging] {
        std::fs::create_dir_all(d).expect("create the policy dirs");
    }
    for entry in std::fs::read_dir(source).expect("read the form's dir") {
        let entry = entry.expect("a dir entry");
        std::fs::copy(entry.path(), staging.join(entry.file_name())).expect("copy a policy file");
    }
    std::os::unix::fs::symlink(&first, &dir).expect("link the policy dir");
    let config = lab.write_config(&format!("standalone:\n  policyDir: {}\n", dir.display()));
    let en = lab.dir().join(".en.tmp");
    std::fs::write(&en, db_external_node()).expect("write the ExternalNode file");
    std::fs::rename(&en, lab.en_file()).expect("move the ExternalNode file in place");
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(60),
        "attached and the first flows committed",
        || lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4)) && !commits(&agent).is_empty(),
    );
    let (rss0, _) = rss_mb(agent.pid());

    // 1. the fleet lands at once
    let seen = commits(&agent).len();
    let t0 = SystemTime::now();
    let started = Instant::now();
    let link = lab.dir().join(".policies.new");
    std::os::unix::fs::symlink(&staging, &link).expect("link the new policy dir");
    std::fs::rename(&link, &dir).expect("swap the policy dir link");
    let mut seen_now = seen;
    let last = loop {
        assert!(
            started.elapsed() < BIG_TIMEOUT,
            "the fleet was not realized in time"
        );
        let new = wait_commits(&agent, seen_now, BIG_TIMEOUT);
        seen_now += new.len();
        let count = flow_count(&lab);
        std::thread::sleep(Duration::from_millis(2000));
        if commits(&agent).len() == seen_now && flow_count(&lab) == count {
            break new.last().cloned().expect("a commit");
        }
    };
    let load_ms = commit_ms(t0, &last, SystemTime::now());
    let (rss_loaded, hwm_loaded) = rss_mb(agent.pid());
    println!("loaded in {load_ms:.0} ms; VmRSS {rss_loaded:.1} MB, VmHWM {hwm_loaded:.1} MB");

    // 2. one rule changed, again and again
    let mut wall = Vec::new();
    let mut no_flow_mods = 0;
    for n in 0..changes {
        let seen = commits(&agent).len();
        let t0 = SystemTime::now();
        write_atomic(&staging, &change.file, &change.texts[(n + 1) % 2]);
        let c = wait_commits(&agent, seen, SMALL_TIMEOUT)
            .first()
            .cloned()
            .expect("a commit");
        if c.flow_mods.unwrap_or(0) == 0 {
            no_flow_mods += 1;
        }
        wall.push(commit_ms(t0, &c, SystemTime::now()));
        std::thread::sleep(Duration::from_millis(250));
    }
    // Back to version A, so that both forms end on the same rules.
    if changes % 2 == 1 {
        let seen = commits(&agent).len();
        write_atomic(&staging, &change.file, &change.texts[0]);
        wait_commits(&agent, seen, SMALL_TIMEOUT);
    }
    let (_, hwm_changes) = rss_mb(agent.pid());

    // 3. steady
    std::thread::sleep(Duration::from_secs(7));
    let (steady, _) = rss_mb(agent.pid());
    let mut flows = lab.dump_flows();
    flows.sort();
    let installed = installed_rules(&flows);
    agent.kill_hard();

    // 4. take-over
    let agent = lab.start_agent(&config);
    wait_commits(&agent, 0, BIG_TIMEOUT);
    let (_, takeover_hwm) = rss_mb(agent.pid());
    let mut agent = agent;
    agent.kill_hard();
    drop(agent);
    drop(lab);
    Outcome {
        form: form.to_string(),
        load_ms,
        rss0,
        rss_loaded,
        hwm_loaded,
        change_p50: quantile(&wall, 0.5),
        change_p99: quantile(&wall, 0.99),
        change_max: quantile(&wall, 1.0),
        no_flow_mods,
        hwm_changes,
        steady,
        takeover_hwm,
        flows,
        installed,
    }
}

/// The child of `NMBENCH_SOURCE=1`: the policy directory source on `dir`, the changed file's two
/// versions in `a` and `b`; prints one `probe` line.
fn probe(dir: &Path, en: &Path, file: &str, a: &Path, b: &Path, changes: usize) {
    use antrea_vm_agent::sources::policy_dir::PolicyDirSource;
    use futures::StreamExt;
    let texts = [
        std::fs::read_to_string(a).expect("version A"),
        std::fs::read_to_string(b).expect("version B"),
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let started = Instant::now();
        let source = PolicyDirSource::new(dir, Duration::from_secs(3600)).with_external_node_file(en);
        let mut events = source.subscribe();
        let snapshot = events.next().await.expect("a first snapshot");
        let load_ms = common::ms(started.elapsed());
        let hwm = common::status_kib("VmHWM:") as f64 / 1024.0;
        let rules: usize = snapshot.network_policies.iter().map(|p| p.rules.len()).sum();
        let errors = snapshot.errors.len();
        antrea_vm_agent::memory::release_free_memory();
        let rss = common::status_kib("VmRSS:") as f64 / 1024.0;
        let mut held = Some(snapshot);
        let mut wall = Vec::new();
        for n in 0..changes {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let t0 = Instant::now();
            write_atomic(dir, file, &texts[(n + 1) % 2]);
            let next = tokio::time::timeout(SMALL_TIMEOUT, events.next())
                .await
                .expect("a snapshot after the change")
                .expect("a snapshot");
            wall.push(common::ms(t0.elapsed()));
            held = Some(next);
        }
        let hwm2 = common::status_kib("VmHWM:") as f64 / 1024.0;
        antrea_vm_agent::memory::release_free_memory();
        let rss2 = common::status_kib("VmRSS:") as f64 / 1024.0;
        drop(held);
        println!(
            "probe rules={rules} errors={errors} load_ms={load_ms:.0} hwm={hwm:.1} rss={rss:.1} \
             hwm2={hwm2:.1} rss2={rss2:.1} p50={:.2} p99={:.2} max={:.2}",
            quantile(&wall, 0.5),
            quantile(&wall, 0.99),
            quantile(&wall, 1.0)
        );
    });
}

/// `NMBENCH_SOURCE=1`: each form's source in a child process; prints the figures side by side.
fn source_only(forms: &[String], dirs: &[(String, PathBuf, String, [String; 2])], en: &Path, changes: usize) {
    println!();
    println!(
        "{:<13} {:>6} {:>8} {:>9} {:>10} {:>10} {:>10} {:>24}",
        "form", "rules", "errors", "load ms", "peak MB", "trimmed MB", "chg peak", "one-rule p50/p99/max ms"
    );
    for form in forms {
        let (_, dir, file, texts) = dirs.iter().find(|(f, ..)| f == form).expect("a known form");
        let tmp = std::env::temp_dir().join(format!("nm-probe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let copy = tmp.join("dir");
        std::fs::create_dir_all(&copy).expect("probe dir");
        for entry in std::fs::read_dir(dir).expect("read the form's dir") {
            let entry = entry.expect("a dir entry");
            std::fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
        }
        let (a, b) = (tmp.join("a"), tmp.join("b"));
        std::fs::write(&a, &texts[0]).expect("A");
        std::fs::write(&b, &texts[1]).expect("B");
        // Past the racy margin of `src/sources/file_stat.rs`: the first change then reads only
        // its own file, as in a directory that has been there a while.
        std::thread::sleep(Duration::from_millis(3500));
        let out = std::process::Command::new(std::env::current_exe().expect("own path"))
            .args(["--bench", "--probe"])
            .arg(&copy)
            .arg(en)
            .arg(file)
            .arg(&a)
            .arg(&b)
            .arg(changes.to_string())
            .output()
            .expect("run the probe");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("probe "))
            .unwrap_or_else(|| panic!("the probe failed: {}", String::from_utf8_lossy(&out.stderr)));
        let get = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "{:<13} {:>6} {:>8} {:>9} {:>10} {:>10} {:>10} {:>24}",
            form,
            get("rules="),
            get("errors="),
            get("load_ms="),
            get("hwm="),
            get("rss="),
            get("hwm2="),
            format!("{}/{}/{}", get("p50="), get("p99="), get("max="))
        );
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--probe") {
        let arg = |i: usize| PathBuf::from(&args[at + i]);
        probe(
            &arg(1),
            &arg(2),
            &args[at + 3],
            &arg(4),
            &arg(5),
            args[at + 6].parse().expect("changes"),
        );
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        println!("native_memory: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let policies = env_usize("NMBENCH_POLICIES", 1000).max(CHANGED + 1);
    let entities = env_usize("NMBENCH_ENTITIES", 420).max(1);
    let changes = env_usize("NMBENCH_CHANGES", 40).max(1);
    let forms: Vec<String> = std::env::var("NMBENCH_FORMS")
        .unwrap_or_else(|_| "native,controlplane".into())
        .split(',')
        .map(|f| f.trim().to_string())
        .collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "native_memory: {policies} ANNPs/ACNPs x {} rules over {entities} ExternalEntities; {changes} \
         one-rule changes per form; forms {forms:?}; load average at start {}",
        mixed::RULES,
        load.trim()
    );
    println!("agent binary: {}", agent_binary());

    // The fleet in both forms, outside any lab.
    let work = PathBuf::from(format!("/tmp/native_memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let (native_dir, cp_dir) = (work.join("native"), work.join("controlplane"));
    for d in [&native_dir, &cp_dir] {
        std::fs::create_dir_all(d).expect("create the fleet dirs");
    }
    write_native(&native_dir, policies, entities);
    std::fs::write(work.join("en.yaml"), db_external_node()).expect("write the ExternalNode");
    let objects = translate(&native_dir, &work.join("en.yaml"));
    write_controlplane(&cp_dir, &objects);
    // Version B of the changed policy, translated as well.
    let changed_port = mixed::first_port(CHANGED, 0) + 1;
    let (native_file, native_a) = native_policy_file(CHANGED, None);
    let (_, native_b) = native_policy_file(CHANGED, Some(changed_port));
    let np_text = |objects: &[ControlplaneObject]| {
        let name = format!(
            "{}{CHANGED}",
            if CHANGED.is_multiple_of(2) { "annp" } else { "acnp" }
        );
        objects
            .iter()
            .find(|o| source_name(o).as_deref() == Some(name.as_str()))
            .map(one_yaml)
            .expect("the changed policy is translated")
    };
    let cp_a = np_text(&objects);
    write_atomic(&native_dir, &native_file, &native_b);
    let cp_b = np_text(&translate(&native_dir, &work.join("en.yaml")));
    write_atomic(&native_dir, &native_file, &native_a);
    assert_ne!(cp_a, cp_b, "the change changes the controlplane policy");
    let rules: usize = objects
        .iter()
        .filter_map(|o| match o {
            ControlplaneObject::NetworkPolicy(p) => Some(p.rules.len()),
            _ => None,
        })
        .sum();
    let count = |d: &Path| std::fs::read_dir(d).map(|r| r.count()).unwrap_or(0);
    println!(
        "fleet: {rules} rules; native form {} files, controlplane form {} files ({} objects)",
        count(&native_dir),
        count(&cp_dir),
        objects.len()
    );
    drop(objects);

    let cp_file = format!(
        "np-{}{CHANGED}.yaml",
        if CHANGED.is_multiple_of(2) { "annp" } else { "acnp" }
    );
    if std::env::var("NMBENCH_SOURCE").is_ok_and(|v| v == "1") {
        let dirs = vec![
            (
                "native".to_string(),
                native_dir.clone(),
                native_file.clone(),
                [native_a.clone(), native_b.clone()],
            ),
            (
                "controlplane".to_string(),
                cp_dir.clone(),
                cp_file.clone(),
                [cp_a.clone(), cp_b.clone()],
            ),
        ];
        source_only(&forms, &dirs, &work.join("en.yaml"), changes);
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load average at the end: {}", load.trim());
        let _ = std::fs::remove_dir_all(&work);
        return;
    }
    let mut outcomes = Vec::new();
    for form in &forms {
        let (source, change) = match form.as_str() {
            "native" => (
                &native_dir,
                ChangeFiles {
                    file: native_file.clone(),
                    texts: [native_a.clone(), native_b.clone()],
                },
            ),
            "controlplane" => (
                &cp_dir,
                ChangeFiles {
                    file: cp_file.clone(),
                    texts: [cp_a.clone(), cp_b.clone()],
                },
            ),
            other => panic!("NMBENCH_FORMS: unknown form {other:?} (native, controlplane)"),
        };
        outcomes.push(run_form(form, source, &change, changes));
    }
    let _ = std::fs::remove_dir_all(&work);

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!();
    println!(
        "=== native_memory: {rules} rules ({policies} policies x {} rules, {entities} ExternalEntities), \
         native form vs the same rules as controlplane objects ===",
        mixed::RULES
    );
    println!(
        "{:<13} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>22} {:>6}",
        "form",
        "flows",
        "load ms",
        "idle MB",
        "load peak",
        "chg peak",
        "steady MB",
        "takeover",
        "one-rule p50/p99/max",
        "rules"
    );
    for o in &outcomes {
        println!(
            "{:<13} {:>8} {:>9.0} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>9.1} {:>7.1}/{:>6.1}/{:>6.1} ms {:>6}",
            o.form,
            o.flows.len(),
            o.load_ms,
            o.rss0,
            o.hwm_loaded,
            o.hwm_changes,
            o.steady,
            o.takeover_hwm,
            o.change_p50,
            o.change_p99,
            o.change_max,
            o.installed
        );
        let _ = o.rss_loaded;
    }
    println!("load average at the end: {}", load.trim());
    println!("reproduce: {HOW}");
    let mut failed = Vec::new();
    for o in &outcomes {
        if o.installed < rules {
            failed.push(format!("{}: {} of {rules} rules installed", o.form, o.installed));
        }
        if o.no_flow_mods > 0 {
            failed.push(format!(
                "{}: {} change(s) committed no flow_mod",
                o.form, o.no_flow_mods
            ));
        }
    }
    if let Some(first) = outcomes.first() {
        for o in &outcomes[1..] {
            if o.flows != first.flows {
                failed.push(format!("{} and {} leave different flows", first.form, o.form));
            }
        }
    }
    if !failed.is_empty() {
        eprintln!("FAILED: {}", failed.join("; "));
        std::process::exit(1);
    }
}
