//! Benchmark: installing and dumping about 100,000 policy-like flows through our OpenFlow 1.5
//! codec, side by side with `ovs-ofctl -O OpenFlow15 --bundle add-flows` and `ovs-ofctl
//! dump-flows` of the same flows, against a private userspace Open vSwitch.
//!
//! Run (as root, with the Open vSwitch binaries installed):
//!
//! ```sh
//! cargo bench --bench openflow_install
//! # options, as environment variables: OFBENCH_RULES (default 1000), OFBENCH_CLAUSES (100),
//! # OFBENCH_ROUNDS (3)
//! ```
//!
//! The flows have the shape of `lab-facts.md`: per rule, `OFBENCH_CLAUSES` conjunctive match
//! flows (source addresses, the destination port register and a TCP port), one `conj_id`
//! action flow `set_field:N->reg6,ct(commit,table=IngressMetric,zone=65520,
//! exec(set_field:N/0xffffffff->ct_label))` and two metric flows. Each round installs them
//! once through our codec (one atomic bundle) and once with `ovs-ofctl --bundle add-flows` of
//! a file our renderer wrote, clearing the bridge before each install, then dumps them both
//! ways. Times are wall-clock; the ratio ours/ovs-ofctl is printed per round and for the
//! medians.
//!
//! This is a `harness = false` bench: `cargo test --all-targets` also builds and starts it,
//! without `--bench`, and then it only prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use antrea_vm_agent::ovs::openflow::conn::{ConnOptions, OfConnection};
use antrea_vm_agent::ovs::openflow::render::{render_flows, NameMap};
use antrea_vm_agent::ovs::openflow::{
    ct_state, Action, CtAction, CtStateMatch, CtZone, Flow, FlowFilter, FlowMod, Masked, Match, SetField,
    Switch,
};

const HOW: &str = "cargo bench --bench openflow_install";
const AP_INGRESS: u8 = 10;
const INGRESS_METRIC: u8 = 13;
const CT_COMMIT: u8 = 14;
const COOKIE: u64 = 0x1020000000000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The benchmark flows: `rules` rules of `clauses` conjunctive match flows each, plus one
/// action flow and two metric flows per rule.
fn policy_flows(rules: usize, clauses: usize) -> Vec<Flow> {
    let mut v = Vec::with_capacity(rules * (clauses + 3));
    for r in 0..rules as u32 {
        let id = r + 2;
        let prio = 1000 + r as u16;
        let conj = |clause: u8| Action::Conjunction {
            id,
            clause,
            n_clauses: 3,
        };
        for a in 0..clauses.saturating_sub(2) as u32 {
            let mut m = Match::new().ipv4();
            let addr = 0x0a00_0000 | (r << 8) | a;
            m.ipv4_src = Some(ipnet::Ipv4Net::new(addr.into(), 32).unwrap_or_default());
            v.push(Flow::new(AP_INGRESS, prio, m).cookie(COOKIE).action(conj(1)));
        }
        v.push(
            Flow::new(AP_INGRESS, prio, Match::new().reg(1, 0x14, None))
                .cookie(COOKIE)
                .action(conj(2)),
        );
        v.push(
            Flow::new(
                AP_INGRESS,
                prio,
                Match::new().ipv4().ip_proto(6).tp_dst(1024 + r as u16),
            )
            .cookie(COOKIE)
            .action(conj(3)),
        );
        v.push(
            Flow::new(AP_INGRESS, prio, Match::new().ipv4().conj_id(id))
                .cookie(COOKIE)
                .action(Action::SetField(SetField::Reg {
                    idx: 6,
                    value: id,
                    mask: None,
                }))
                .action(Action::Ct(CtAction {
                    commit: true,
                    table: Some(INGRESS_METRIC),
                    zone: CtZone::Immediate(65520),
                    exec: vec![Action::SetField(SetField::CtLabel {
                        value: u128::from(id),
                        mask: Some(0xffff_ffff),
                    })],
                })),
        );
        for new in [true, false] {
            let mut m = Match::new()
                .ipv4()
                .ct_state(CtStateMatch::of(&[(ct_state::NEW, new)]));
            m.ct_label = Some(Masked::new(u128::from(id), 0xffff_ffff));
            v.push(Flow::new(INGRESS_METRIC, 200, m).cookie(COOKIE).goto(CT_COMMIT));
        }
    }
    v
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A private ovsdb-server + ovs-vswitchd in a temporary directory and a network namespace;
/// stopped and removed on drop.
struct Ovs {
    dir: PathBuf,
    ns: String,
}

impl Ovs {
    fn start() -> Result<Ovs, String> {
        let dir = std::env::temp_dir().join(format!("ofbench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ovs = Ovs {
            dir,
            ns: format!("ofbench{}", std::process::id()),
        };
        let p = |n: &str| ovs.dir.join(n).display().to_string();
        run(Command::new("ip").args(["netns", "add", &ovs.ns]))?;
        run(Command::new("ovsdb-tool").args([
            "create",
            &p("conf.db"),
            "/usr/share/openvswitch/vswitch.ovsschema",
        ]))?;
        run(Command::new("ovsdb-server").args([
            &format!("--remote=punix:{}", p("db.sock")),
            &format!("--pidfile={}", p("ovsdb-server.pid")),
            &format!("--unixctl={}", p("ovsdb-server.ctl")),
            &format!("--log-file={}", p("ovsdb-server.log")),
            "--detach",
            &p("conf.db"),
        ]))?;
        ovs.vsctl(&["--no-wait", "init"])?;
        run(Command::new("ip")
            .args(["netns", "exec", &ovs.ns, "ovs-vswitchd"])
            .arg(format!("unix:{}", p("db.sock")))
            .arg(format!("--pidfile={}", p("ovs-vswitchd.pid")))
            .arg(format!("--unixctl={}", p("ovs-vswitchd.ctl")))
            .arg(format!("--log-file={}", p("ovs-vswitchd.log")))
            .arg("--detach")
            .env("OVS_RUNDIR", &ovs.dir))?;
        ovs.vsctl(&[
            "add-br",
            "bench",
            "--",
            "set",
            "bridge",
            "bench",
            "datapath_type=netdev",
            "protocols=OpenFlow15",
            "fail_mode=secure",
        ])?;
        let mgmt = ovs.mgmt();
        let end = Instant::now() + Duration::from_secs(20);
        while !mgmt.exists() {
            if Instant::now() > end {
                return Err(format!("{} did not appear", mgmt.display()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(ovs)
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new("ovs-vsctl")
            .arg(format!("--db=unix:{}", self.dir.join("db.sock").display()))
            .arg("--timeout=30")
            .args(args))
    }

    fn mgmt(&self) -> PathBuf {
        self.dir.join("bench.mgmt")
    }

    fn ofctl(&self, cmd: &str, args: &[&str]) -> Result<String, String> {
        run(Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow15"])
            .args(args)
            .arg(cmd)
            .arg(self.mgmt()))
    }

    fn flow_count(&self) -> Result<usize, String> {
        let out = self.ofctl("dump-aggregate", &[])?;
        out.split("flow_count=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no flow_count in {out:?}"))
    }

    fn clear(&self) -> Result<(), String> {
        self.ofctl("del-flows", &[])?;
        match self.flow_count()? {
            0 => Ok(()),
            n => Err(format!("{n} flows left after del-flows")),
        }
    }

    /// ovs-vswitchd's resident set size, in MB.
    fn rss_mb(&self) -> Option<f64> {
        let pid = std::fs::read_to_string(self.dir.join("ovs-vswitchd.pid")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).ok()?;
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        for daemon in ["ovs-vswitchd", "ovsdb-server"] {
            let pidfile = self.dir.join(format!("{daemon}.pid"));
            if let Ok(pid) = std::fs::read_to_string(&pidfile) {
                let pid = pid.trim().to_string();
                let _ = Command::new("kill")
                    .args(["-TERM", &pid])
                    .stderr(Stdio::null())
                    .status();
                let end = Instant::now() + Duration::from_secs(5);
                while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = Command::new("kill")
                    .args(["-KILL", &pid])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

struct Round {
    ours_install: Duration,
    ofctl_install: Duration,
    ours_dump: Duration,
    ofctl_dump: Duration,
}

async fn bench(ovs: &Ovs, flows: &[Flow], rounds: usize) -> Result<Vec<Round>, String> {
    let file = ovs.dir.join("flows.txt");
    let mut text = render_flows(flows, &NameMap::new()).join("\n");
    text.push('\n');
    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    let file = file.display().to_string();
    let sw = OfConnection::connect(&ovs.mgmt(), 32776, ConnOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let n = flows.len();
    let mut out = Vec::new();
    for round in 1..=rounds {
        // Our codec: one atomic bundle of ADDs (encoding included).
        ovs.clear()?;
        let mods: Vec<FlowMod> = flows.iter().cloned().map(FlowMod::add).collect();
        let t = Instant::now();
        sw.bundle(mods).await.map_err(|e| e.to_string())?;
        let ours_install = t.elapsed();
        let count = ovs.flow_count()?;
        if count != n {
            return Err(format!("our bundle left {count} flows, expected {n}"));
        }
        let t = Instant::now();
        let dumped = sw
            .dump_flows(FlowFilter::all())
            .await
            .map_err(|e| e.to_string())?;
        let ours_dump = t.elapsed();
        if dumped.len() != n {
            return Err(format!("our dump returned {} flows, expected {n}", dumped.len()));
        }
        let t = Instant::now();
        let text = ovs.ofctl("dump-flows", &[])?;
        let ofctl_dump = t.elapsed();
        let lines = text.lines().filter(|l| l.contains("actions=")).count();
        if lines != n {
            return Err(format!(
                "ovs-ofctl dump-flows printed {lines} flows, expected {n}"
            ));
        }
        let rss = ovs.rss_mb();

        // ovs-ofctl: the same flows, from the file our renderer wrote, in one bundle.
        ovs.clear()?;
        let t = Instant::now();
        run(Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow15", "--bundle", "add-flows"])
            .arg(ovs.mgmt())
            .arg(&file))?;
        let ofctl_install = t.elapsed();
        let count = ovs.flow_count()?;
        if count != n {
            return Err(format!("ovs-ofctl left {count} flows, expected {n}"));
        }
        println!(
            "round {round}: install ours {:.3} s, ovs-ofctl {:.3} s, ratio {:.2}; \
             dump ours {:.3} s, ovs-ofctl {:.3} s, ratio {:.2}{}",
            secs(ours_install),
            secs(ofctl_install),
            secs(ours_install) / secs(ofctl_install),
            secs(ours_dump),
            secs(ofctl_dump),
            secs(ours_dump) / secs(ofctl_dump),
            rss.map(|r| format!("; ovs-vswitchd RSS {r:.0} MB"))
                .unwrap_or_default()
        );
        out.push(Round {
            ours_install,
            ofctl_install,
            ours_dump,
            ofctl_dump,
        });
    }
    ovs.clear()?;
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("openflow_install: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let rules = env_usize("OFBENCH_RULES", 1000);
    let clauses = env_usize("OFBENCH_CLAUSES", 100).max(3);
    let rounds = env_usize("OFBENCH_ROUNDS", 3).max(1);
    let flows = policy_flows(rules, clauses);
    println!(
        "openflow_install: {} flows ({rules} rules x ({clauses} conjunction clauses + 1 action + 2 metric flows)), {rounds} rounds",
        flows.len()
    );
    println!("command: {HOW}");
    let ovs = match Ovs::start() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cannot start a private Open vSwitch (root and openvswitch-switch needed): {e}");
            std::process::exit(1);
        }
    };
    let result = tokio::select! {
        r = bench(&ovs, &flows, rounds) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
    };
    drop(ovs);
    match result {
        Ok(rounds) => {
            let ours = median(rounds.iter().map(|r| r.ours_install).collect());
            let ofctl = median(rounds.iter().map(|r| r.ofctl_install).collect());
            let ours_d = median(rounds.iter().map(|r| r.ours_dump).collect());
            let ofctl_d = median(rounds.iter().map(|r| r.ofctl_dump).collect());
            println!(
                "median install of {} flows: ours {:.3} s ({:.0} flows/s), ovs-ofctl --bundle add-flows {:.3} s ({:.0} flows/s); ours/ovs-ofctl = {:.2}",
                flows.len(),
                secs(ours),
                flows.len() as f64 / secs(ours),
                secs(ofctl),
                flows.len() as f64 / secs(ofctl),
                secs(ours) / secs(ofctl)
            );
            println!(
                "median flow-stats dump of {} flows: ours (decoded) {:.3} s, ovs-ofctl dump-flows {:.3} s; ours/ovs-ofctl = {:.2}",
                flows.len(),
                secs(ours_d),
                secs(ofctl_d),
                secs(ours_d) / secs(ofctl_d)
            );
        }
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            std::process::exit(1);
        }
    }
}
