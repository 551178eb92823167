//! Tests of the codec, renderer and connection against a real ovs-vswitchd 3.1 (userspace
//! `netdev` datapath) started privately in a temporary directory and network namespace.
//! They need root and the Open vSwitch binaries; every wait is bounded and the [`Lab`] guard
//! stops the daemons and removes the namespace even when a test fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::conn::{ConnOptions, OfConnection};
use super::flow::*;
use super::messages;
use super::render::{render_flows, render_group, NameMap};
use super::{Group, Meter, OfError, Switch};

/// Production table ids and names (antrea-pipeline.md §2.2).
pub const TABLES: [&str; 17] = [
    "PipelineRootClassifier",
    "ConntrackZone",
    "ConntrackState",
    "EgressSecurityClassifier",
    "AntreaPolicyEgressRule",
    "EgressRule",
    "EgressDefaultRule",
    "EgressMetric",
    "L2ForwardingCalc",
    "IngressSecurityClassifier",
    "AntreaPolicyIngressRule",
    "IngressRule",
    "IngressDefaultRule",
    "IngressMetric",
    "ConntrackCommit",
    "Output",
    "NonIP",
];

const T_ROOT: u8 = 0;
const T_CT_ZONE: u8 = 1;
const T_CT_STATE: u8 = 2;
const T_EGRESS_CLASSIFIER: u8 = 3;
const T_AP_EGRESS: u8 = 4;
const T_EGRESS_RULE: u8 = 5;
const T_EGRESS_METRIC: u8 = 7;
const T_L2_CALC: u8 = 8;
const T_INGRESS_CLASSIFIER: u8 = 9;
const T_AP_INGRESS: u8 = 10;
const T_INGRESS_RULE: u8 = 11;
const T_INGRESS_DEFAULT: u8 = 12;
const T_INGRESS_METRIC: u8 = 13;
const T_CT_COMMIT: u8 = 14;
const T_OUTPUT: u8 = 15;
const T_NON_IP: u8 = 16;

const COOKIE_DEFAULT: u64 = 0x1000000000000;
const COOKIE_NP: u64 = 0x1020000000000;
const COOKIE_ENC: u64 = 0x1080000000000;
const CTRL_ID: u16 = 32776;
const HOST_PORT: u32 = 20;
const UPLINK_PORT: u32 = 21;

// === the private OVS ===

static LAB_SEQ: AtomicUsize = AtomicUsize::new(0);

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private ovsdb-server + ovs-vswitchd; stopped and removed on drop.
pub struct Lab {
    dir: tempfile::TempDir,
    ns: String,
}

impl Lab {
    /// Starts OVS inside a new network namespace.
    pub fn start() -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("ofx")
            .tempdir()
            .expect("temp dir");
        let ns = format!(
            "ofx{}-{}",
            std::process::id(),
            LAB_SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let lab = Lab { dir, ns };
        run(Command::new("ip").args(["netns", "add", &lab.ns])).expect("ip netns add");
        let d = lab.dir.path();
        let p = |n: &str| d.join(n).display().to_string();
        run(Command::new("ovsdb-tool").args([
            "create",
            &p("conf.db"),
            "/usr/share/openvswitch/vswitch.ovsschema",
        ]))
        .expect("ovsdb-tool create");
        run(Command::new("ovsdb-server").args([
            &format!("--remote=punix:{}", p("db.sock")),
            &format!("--pidfile={}", p("ovsdb-server.pid")),
            &format!("--unixctl={}", p("ovsdb-server.ctl")),
            &format!("--log-file={}", p("ovsdb-server.log")),
            "--detach",
            &p("conf.db"),
        ]))
        .expect("ovsdb-server");
        lab.vsctl(&["--no-wait", "init"]);
        run(Command::new("ip")
            .args(["netns", "exec", &lab.ns, "ovs-vswitchd"])
            .arg(format!("unix:{}", p("db.sock")))
            .arg(format!("--pidfile={}", p("ovs-vswitchd.pid")))
            .arg(format!("--unixctl={}", p("ovs-vswitchd.ctl")))
            .arg(format!("--log-file={}", p("ovs-vswitchd.log")))
            .arg("--detach")
            .env("OVS_RUNDIR", d))
        .expect("ovs-vswitchd");
        lab
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn vsctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}", self.dir().join("db.sock").display());
        run(Command::new("ovs-vsctl").arg(db).arg("--timeout=30").args(args)).expect("ovs-vsctl")
    }

    /// Adds a netdev bridge speaking `protocols`, with the production table names.
    pub fn add_bridge(&self, br: &str, protocols: &str) -> PathBuf {
        let mut args: Vec<String> = vec![
            "add-br".into(),
            br.into(),
            "--".into(),
            "set".into(),
            "bridge".into(),
            br.into(),
            "datapath_type=netdev".into(),
            format!("protocols={protocols}"),
            "fail_mode=secure".into(),
        ];
        for (i, name) in TABLES.iter().enumerate() {
            args.extend([
                "--".to_string(),
                format!("--id=@t{i}"),
                "create".into(),
                "Flow_Table".into(),
                format!("name={name}"),
                "--".into(),
                "set".into(),
                "Bridge".into(),
                br.into(),
                format!("flow_tables:{i}=@t{i}"),
            ]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.vsctl(&refs);
        let mgmt = self.dir().join(format!("{br}.mgmt"));
        wait_for("bridge mgmt socket", Duration::from_secs(20), || mgmt.exists());
        mgmt
    }

    /// Adds an internal port with a fixed OpenFlow port number.
    pub fn add_port(&self, br: &str, name: &str, ofport: u32) {
        self.vsctl(&[
            "add-port",
            br,
            name,
            "--",
            "set",
            "Interface",
            name,
            "type=internal",
            &format!("ofport_request={ofport}"),
        ]);
    }

    pub fn ofctl(&self, args: &[&str]) -> String {
        run(Command::new("ovs-ofctl").args(["-O", "OpenFlow15"]).args(args)).expect("ovs-ofctl")
    }

    pub fn mgmt(&self, br: &str) -> String {
        self.dir().join(format!("{br}.mgmt")).display().to_string()
    }

    /// `dump-flows --no-stats`, one trimmed line per flow, sorted.
    pub fn dump_flows(&self, br: &str, names: bool) -> Vec<String> {
        let mgmt = self.mgmt(br);
        let out = self.ofctl(&[
            "dump-flows",
            if names { "--names" } else { "--no-names" },
            "--no-stats",
            &mgmt,
        ]);
        let mut v: Vec<String> = out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        v.sort();
        v
    }

    pub fn dump_groups(&self, br: &str) -> Vec<String> {
        let out = self.ofctl(&["dump-groups", "--names", &self.mgmt(br)]);
        let mut v: Vec<String> = out
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("group_id="))
            .map(String::from)
            .collect();
        v.sort();
        v
    }

    fn pid(&self, daemon: &str) -> Option<String> {
        std::fs::read_to_string(self.dir().join(format!("{daemon}.pid")))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// Sends `sig` (e.g. "STOP", "CONT", "KILL") to ovs-vswitchd.
    pub fn signal_vswitchd(&self, sig: &str) {
        if let Some(pid) = self.pid("ovs-vswitchd") {
            let _ = Command::new("kill").args([&format!("-{sig}"), &pid]).status();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for daemon in ["ovs-vswitchd", "ovsdb-server"] {
            if let Some(pid) = self.pid(daemon) {
                let alive = || Path::new(&format!("/proc/{pid}")).exists();
                if !alive() {
                    continue;
                }
                let _ = Command::new("kill")
                    .args(["-CONT", &pid])
                    .stderr(Stdio::null())
                    .status();
                let _ = Command::new("kill")
                    .args(["-TERM", &pid])
                    .stderr(Stdio::null())
                    .status();
                let end = Instant::now() + Duration::from_secs(5);
                while alive() && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if alive() {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid])
                        .stderr(Stdio::null())
                        .status();
                }
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

// === the reference flows (antrea-pipeline.md §6, §7, §8) ===

fn sf_reg(idx: u8, value: u32, mask: Option<u32>) -> Action {
    Action::SetField(SetField::Reg { idx, value, mask })
}

fn ct(commit: bool, table: u8, zone: u16, exec: Vec<Action>) -> Action {
    Action::Ct(CtAction {
        commit,
        table: Some(table),
        zone: CtZone::Immediate(zone),
        exec,
    })
}

fn controller(userdata: Vec<u8>, pause: bool) -> Action {
    Action::Controller(ControllerAction {
        max_len: 65535,
        controller_id: CTRL_ID,
        reason: 0,
        userdata,
        pause,
        meter_id: None,
    })
}

fn conj(id: u32, clause: u8, n_clauses: u8) -> Action {
    Action::Conjunction {
        id,
        clause,
        n_clauses,
    }
}

fn st(flags: &[(u32, bool)]) -> CtStateMatch {
    CtStateMatch::of(flags)
}

fn ip_of(v6: bool) -> Match {
    if v6 {
        Match::new().ipv6()
    } else {
        Match::new().ipv4()
    }
}

fn net4(s: &str) -> ipnet::Ipv4Net {
    s.parse().expect("ipv4 net")
}

fn ct_label(value: u128, mask: u128) -> Action {
    Action::SetField(SetField::CtLabel {
        value,
        mask: Some(mask),
    })
}

/// §6.1 default flows (+ the IPv6 root flow).
fn default_flows() -> Vec<Flow> {
    let c = COOKIE_DEFAULT;
    let mut v = vec![
        Flow::new(T_ROOT, 200, Match::new().ipv4())
            .cookie(c)
            .goto(T_CT_ZONE),
        Flow::new(T_ROOT, 200, Match::new().ipv6())
            .cookie(c)
            .goto(T_CT_ZONE),
        Flow::new(T_ROOT, 190, Match::new()).cookie(c).goto(T_NON_IP),
        Flow::new(T_ROOT, 0, Match::new()).cookie(c),
    ];
    for t in T_CT_ZONE..=T_CT_COMMIT {
        v.push(Flow::new(t, 0, Match::new()).cookie(c).goto(t + 1));
    }
    v.push(Flow::new(T_OUTPUT, 0, Match::new()).cookie(c));
    v.push(Flow::new(T_NON_IP, 0, Match::new()).cookie(c));
    v
}

/// §6.2 ExternalNodeConnectivity init flows, IPv4 and IPv6.
fn enc_flows() -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_ENC;
    let mut v = Vec::new();
    for (v6, zone) in [(false, 65520), (true, 65510)] {
        v.push(
            Flow::new(T_CT_ZONE, 200, ip_of(v6))
                .cookie(c)
                .action(ct(false, T_CT_STATE, zone, vec![])),
        );
        v.push(
            Flow::new(
                T_CT_STATE,
                210,
                ip_of(v6).ct_state(st(&[(INV, true), (TRK, true)])),
            )
            .cookie(c),
        );
        v.push(
            Flow::new(
                T_CT_COMMIT,
                200,
                ip_of(v6).ct_state(st(&[(NEW, true), (TRK, true)])),
            )
            .cookie(c)
            .action(ct(true, T_OUTPUT, zone, vec![])),
        );
    }
    v.push(
        Flow::new(T_OUTPUT, 200, Match::new().reg(0, 0x200000, Some(0x600000)))
            .cookie(c)
            .action(Action::OutputReg(RegRange::whole(1))),
    );
    v
}

/// §6.3 NetworkPolicy init flows (with or without `meter:256`), IPv4 and IPv6 skip flows.
fn np_init_flows(meters: bool) -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_NP;
    let mut v = Vec::new();
    for op in 1u32..=7 {
        let mut f = Flow::new(
            T_OUTPUT,
            200,
            Match::new().reg(0, (op << 25) | 0x400000, Some(0xfe600000)),
        )
        .cookie(c);
        if meters {
            f = f.action(Action::Meter(256));
        }
        v.push(f.action(controller(vec![1, op as u8], false)));
    }
    for v6 in [false, true] {
        for flag in [EST, REL] {
            let m = ip_of(v6).ct_state(st(&[(NEW, false), (flag, true)]));
            v.push(
                Flow::new(T_AP_EGRESS, 64990, m.clone())
                    .cookie(c)
                    .goto(T_EGRESS_METRIC),
            );
            v.push(Flow::new(T_AP_INGRESS, 64990, m).cookie(c).goto(T_INGRESS_METRIC));
        }
    }
    v
}

/// §6.4 groups.
fn np_groups() -> Vec<Group> {
    [T_EGRESS_RULE, T_EGRESS_METRIC, T_INGRESS_RULE, T_INGRESS_METRIC]
        .iter()
        .enumerate()
        .map(|(i, t)| Group {
            group_id: i as u32 + 1,
            buckets: vec![
                vec![Action::Resubmit {
                    in_port: None,
                    table: Some(*t),
                }],
                vec![
                    sf_reg(0, 0x400000, Some(0x600000)),
                    Action::Resubmit {
                        in_port: None,
                        table: Some(T_OUTPUT),
                    },
                ],
            ],
        })
        .collect()
}

/// §7.1 per-pair flows (with IPv6 twins of the L2ForwardingCalc flows).
fn pair_flows(host: u32, uplink: u32) -> Vec<Flow> {
    let c = COOKIE_ENC;
    let mut v = Vec::new();
    for v6 in [false, true] {
        for (from, to) in [(host, uplink), (uplink, host)] {
            v.push(
                Flow::new(T_L2_CALC, 200, ip_of(v6).in_port(from))
                    .cookie(c)
                    .action(sf_reg(0, 0x200000, Some(0x600000)))
                    .action(sf_reg(1, to, None))
                    .goto(T_INGRESS_CLASSIFIER),
            );
        }
    }
    v.push(
        Flow::new(T_NON_IP, 200, Match::new().in_port(host))
            .cookie(c)
            .action(Action::Output(uplink)),
    );
    v.push(
        Flow::new(T_NON_IP, 200, Match::new().in_port(uplink))
            .cookie(c)
            .action(Action::Output(host)),
    );
    v
}

/// §7.2 policy-bypass flows.
fn bypass_flows() -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_ENC;
    let newtrk = st(&[(NEW, true), (TRK, true)]);
    let tcp = || {
        Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .ct_state(newtrk)
            .tp_dst(30000)
    };
    let mut a = tcp();
    a.ipv4_src = Some(net4("10.10.10.0/30"));
    let mut b = tcp();
    b.ipv4_dst = Some(net4("10.10.10.0/30"));
    let mut ipm = Match::new().ipv4().ct_state(newtrk);
    ipm.ipv4_src = Some(net4("1.1.1.1/32"));
    let mut icmp = Match::new().ipv4().ip_proto(ip_proto::ICMP).ct_state(newtrk);
    icmp.ipv4_dst = Some(net4("8.8.8.0/24"));
    vec![
        Flow::new(T_INGRESS_CLASSIFIER, 200, a)
            .cookie(c)
            .goto(T_INGRESS_METRIC),
        Flow::new(T_EGRESS_CLASSIFIER, 200, b)
            .cookie(c)
            .goto(T_EGRESS_METRIC),
        Flow::new(T_INGRESS_CLASSIFIER, 200, ipm)
            .cookie(c)
            .goto(T_INGRESS_METRIC),
        Flow::new(T_EGRESS_CLASSIFIER, 200, icmp)
            .cookie(c)
            .goto(T_EGRESS_METRIC),
    ]
}

/// Policy flows from §8.9 (DNS, IPv4+IPv6), G8, G11, G17, G18 with production table ids.
fn policy_flows() -> Vec<Flow> {
    use ct_state::*;
    let c = COOKIE_NP;
    let mut v = Vec::new();
    // §8.9 / G7: DNS interception.
    v.push(
        Flow::new(T_AP_INGRESS, 64991, Match::new().conj_id(1))
            .cookie(c)
            .action(Action::Meter(258))
            .action(controller(vec![2], true))
            .goto(T_INGRESS_METRIC),
    );
    for v6 in [false, true] {
        for proto in [ip_proto::UDP, ip_proto::TCP] {
            let mut m = ip_of(v6)
                .ip_proto(proto)
                .ct_state(st(&[(RPL, true), (TRK, true)]));
            m.tp_src = Some(Masked::exact(53));
            v.push(Flow::new(T_AP_INGRESS, 64991, m).cookie(c).action(conj(1, 1, 2)));
        }
    }
    v.push(
        Flow::new(T_AP_INGRESS, 64991, Match::new().reg(1, 0x14, None))
            .cookie(c)
            .action(conj(1, 2, 2)),
    );

    // G8: conjunction engine, ingress.
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().conj_id(10).ipv4())
            .cookie(c)
            .action(sf_reg(6, 0xa, None))
            .action(ct(
                true,
                T_INGRESS_METRIC,
                65520,
                vec![ct_label(0xa, 0xffff_ffff)],
            )),
    );
    for (id, prio) in [(11u32, 100u16), (12, 200), (14, 100)] {
        v.push(
            Flow::new(T_AP_INGRESS, prio, Match::new().conj_id(id))
                .cookie(c)
                .action(sf_reg(3, id, None))
                .action(sf_reg(0, 0x400, Some(0x400)))
                .goto(T_INGRESS_METRIC),
        );
        v.push(
            Flow::new(
                T_INGRESS_METRIC,
                200,
                Match::new().reg(0, 0x400, Some(0x400)).reg(3, id, None),
            )
            .cookie(c),
        );
    }
    let src = |s: &str| {
        let mut m = Match::new().ipv4();
        m.ipv4_src = Some(net4(s));
        m
    };
    v.push(
        Flow::new(T_AP_INGRESS, 100, src("192.168.1.40/32"))
            .cookie(c)
            .action(conj(10, 1, 2))
            .action(conj(11, 1, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, src("192.168.1.50/32"))
            .cookie(c)
            .action(conj(10, 1, 2)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, src("192.168.1.51/32"))
            .cookie(c)
            .action(conj(11, 1, 3))
            .action(conj(14, 1, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().reg(1, 1, None))
            .cookie(c)
            .action(conj(11, 2, 3))
            .action(conj(10, 2, 2)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 100, Match::new().reg(1, 2, None))
            .cookie(c)
            .action(conj(10, 2, 2))
            .action(conj(14, 2, 3)),
    );
    v.push(
        Flow::new(
            T_AP_INGRESS,
            100,
            Match::new().ipv4().ip_proto(ip_proto::TCP).tp_dst(8080),
        )
        .cookie(c)
        .action(conj(11, 3, 3)),
    );
    let mut icmp = Match::new().ipv4().ip_proto(ip_proto::ICMP);
    icmp.icmp_type = Some(8);
    icmp.icmp_code = Some(0);
    v.push(
        Flow::new(T_AP_INGRESS, 200, icmp)
            .cookie(c)
            .action(conj(12, 3, 3)),
    );
    let mut sp = Match::new().ipv4().ip_proto(ip_proto::TCP);
    sp.tp_src = Some(Masked::exact(32800));
    v.push(Flow::new(T_AP_INGRESS, 100, sp).cookie(c).action(conj(14, 3, 3)));
    for new in [true, false] {
        let mut m = Match::new().ipv4().ct_state(st(&[(NEW, new)]));
        m.ct_label = Some(Masked::new(0xa, 0xffff_ffff));
        v.push(Flow::new(T_INGRESS_METRIC, 200, m).cookie(c).goto(T_CT_COMMIT));
    }

    // G11 (production ids): drop + logging, and a logging default-drop flow.
    v.push(
        Flow::new(T_INGRESS_RULE, 200, Match::new().conj_id(15))
            .cookie(c)
            .action(sf_reg(3, 0xf, None))
            .action(sf_reg(0, 0x400, Some(0x400)))
            .action(sf_reg(0, 0x800, Some(0x1800)))
            .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
            .action(sf_reg(2, 0xb, Some(0xff)))
            .action(Action::Group(4)),
    );
    v.push(
        Flow::new(T_INGRESS_RULE, 200, Match::new().reg(1, 0x64, None))
            .cookie(c)
            .action(conj(15, 2, 2)),
    );
    v.push(
        Flow::new(T_INGRESS_DEFAULT, 200, Match::new().reg(1, 0x64, None))
            .cookie(c)
            .action(sf_reg(0, 0x800, Some(0x1800)))
            .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
            .action(sf_reg(0, 0x400000, Some(0x600000)))
            .action(sf_reg(2, 0xc, Some(0xff)))
            .goto(T_OUTPUT),
    );

    // G17: ingress Reject.
    v.push(
        Flow::new(T_AP_INGRESS, 106, Match::new().conj_id(2))
            .cookie(c)
            .action(sf_reg(3, 2, None))
            .action(sf_reg(0, 0x400, Some(0x400)))
            .action(sf_reg(0, 0x4000000, Some(0xfe000000)))
            .action(sf_reg(2, 0xa, Some(0xff)))
            .action(Action::Group(4)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 106, src("10.0.0.8/32"))
            .cookie(c)
            .action(conj(2, 1, 3)),
    );
    v.push(
        Flow::new(T_AP_INGRESS, 106, Match::new().reg(1, 0x14, None))
            .cookie(c)
            .action(conj(2, 2, 3)),
    );
    v.push(
        Flow::new(
            T_AP_INGRESS,
            106,
            Match::new().ipv4().ip_proto(ip_proto::TCP).tp_dst(22),
        )
        .cookie(c)
        .action(conj(2, 3, 3)),
    );
    v.push(
        Flow::new(
            T_INGRESS_METRIC,
            200,
            Match::new().reg(0, 0x400, Some(0x400)).reg(3, 2, None),
        )
        .cookie(c),
    );

    // G18: egress Allow with a port range and logging, IPv4 and IPv6.
    for (v6, zone) in [(false, 65520u16), (true, 65510)] {
        v.push(
            Flow::new(T_AP_EGRESS, 14500, ip_of(v6).conj_id(3))
                .cookie(c)
                .action(sf_reg(5, 3, None))
                .action(ct(
                    true,
                    T_EGRESS_METRIC,
                    zone,
                    vec![ct_label(0x3 << 32, 0xffff_ffff << 32)],
                ))
                .action(sf_reg(0, 0, Some(0x1800)))
                .action(sf_reg(0, 0x400000, Some(0x600000)))
                .action(sf_reg(0, 0x2000000, Some(0xfe000000)))
                .action(sf_reg(2, 0x4, Some(0xff)))
                .goto(T_OUTPUT),
        );
        for new in [true, false] {
            let mut m = ip_of(v6).ct_state(st(&[(NEW, new)]));
            m.ct_label = Some(Masked::new(0x3 << 32, 0xffff_ffff << 32));
            v.push(Flow::new(T_EGRESS_METRIC, 200, m).cookie(c).goto(T_L2_CALC));
        }
    }
    let mut dst = Match::new().ipv4();
    dst.ipv4_dst = Some(net4("192.168.10.0/24"));
    v.push(Flow::new(T_AP_EGRESS, 14500, dst).cookie(c).action(conj(3, 2, 3)));
    let mut dst6 = Match::new().ipv6();
    dst6.ipv6_dst = Some("fd00:10::/64".parse().expect("v6 net"));
    v.push(
        Flow::new(T_AP_EGRESS, 14500, dst6)
            .cookie(c)
            .action(conj(3, 2, 3)),
    );
    v.push(
        Flow::new(T_AP_EGRESS, 14500, src("10.0.0.5/32"))
            .cookie(c)
            .action(conj(3, 1, 3)),
    );
    for (value, mask) in [(0x50, 0xfff8), (0x58, 0xfffe), (90, 0xffff)] {
        let m = Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .tp_dst_masked(value, mask);
        v.push(Flow::new(T_AP_EGRESS, 14500, m).cookie(c).action(conj(3, 3, 3)));
        let m = Match::new()
            .ipv6()
            .ip_proto(ip_proto::TCP)
            .tp_dst_masked(value, mask);
        v.push(Flow::new(T_AP_EGRESS, 14500, m).cookie(c).action(conj(3, 3, 3)));
    }
    v
}

/// Flows exercising every other field, action and rendering rule the codec supports.
fn coverage_flows() -> Vec<Flow> {
    let c = 0xabc;
    let mut v = Vec::new();
    let mut m = Match::new().ipv4().ip_proto(ip_proto::UDP);
    m.pkt_mark = Some(Masked::new(5, 0xff));
    m.ct_zone = Some(3);
    m.ct_mark = Some(Masked::new(4, 0xf));
    m.ct_label = Some(Masked::exact(0xffff_ffff_ffff_ffff_ffff_ffff_ffff_ffff));
    m.eth_src = Some(Masked::exact([0, 0x11, 0x22, 0x33, 0x44, 0x55]));
    m.eth_dst = Some(Masked::new([1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]));
    m.tp_src = Some(Masked::new(0, 0xff00));
    m.tp_dst = Some(Masked::exact(53));
    m.ipv4_dst = Some(net4("10.1.2.3/16"));
    v.push(
        Flow::new(20, 5, m)
            .cookie(c)
            .action(Action::SetField(SetField::PktMark {
                value: 3,
                mask: Some(0xf),
            }))
            .action(Action::SetField(SetField::EthSrc([
                0, 0x11, 0x22, 0x33, 0x44, 0x55,
            ])))
            .action(Action::SetField(SetField::EthDst([
                0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
            ])))
            .action(Action::CtClear)
            .action(Action::Note(vec![1, 2, 3]))
            .action(Action::Move {
                src: RegRange {
                    reg: 0,
                    ofs: 0,
                    n_bits: 4,
                },
                dst: RegRange {
                    reg: 1,
                    ofs: 4,
                    n_bits: 4,
                },
            })
            .action(Action::Resubmit {
                in_port: None,
                table: Some(21),
            })
            .action(Action::Resubmit {
                in_port: Some(HOST_PORT),
                table: Some(22),
            })
            .action(Action::Resubmit {
                in_port: Some(UPLINK_PORT),
                table: None,
            })
            .action(Action::Output(port::LOCAL))
            .action(Action::Output(port::IN_PORT))
            .action(Action::Output(port::CONTROLLER))
            .action(Action::Output(22))
            .action(Action::Group(1)),
    );
    let mut f = Flow::new(
        20,
        6,
        Match::new()
            .ipv4()
            .reg(0, 0x3, Some(0x1))
            .reg(1, 5, Some(u32::MAX)),
    )
    .cookie(c)
    .action(Action::Ct(CtAction {
        commit: true,
        table: None,
        zone: CtZone::Field(RegRange {
            reg: 0,
            ofs: 0,
            n_bits: 16,
        }),
        exec: vec![
            Action::SetField(SetField::CtMark { value: 5, mask: None }),
            Action::SetField(SetField::CtLabel {
                value: 0,
                mask: Some(1),
            }),
        ],
    }))
    .action(Action::Ct(CtAction {
        commit: false,
        table: None,
        zone: CtZone::Immediate(0),
        exec: vec![],
    }))
    .action(Action::OutputReg(RegRange {
        reg: 7,
        ofs: 31,
        n_bits: 1,
    }))
    .action(sf_reg(4, 0, None));
    f.idle_timeout = 100;
    f.hard_timeout = 200;
    v.push(f);
    v.push(
        Flow::new(
            20,
            7,
            Match::new()
                .ct_state(CtStateMatch {
                    value: 0x21,
                    mask: 0xff,
                })
                .in_port(22),
        )
        .action(Action::Controller(ControllerAction {
            max_len: 100,
            controller_id: 7,
            reason: 1,
            userdata: vec![0xff],
            pause: true,
            meter_id: Some(258),
        })),
    );
    v.push(
        Flow::new(
            20,
            8,
            Match::new().ct_state(CtStateMatch { value: 0, mask: 0xff }),
        )
        .action(Action::Controller(ControllerAction {
            max_len: 65535,
            controller_id: 0,
            reason: 1,
            userdata: vec![],
            pause: false,
            meter_id: None,
        })),
    );
    v.push(Flow::new(20, 9, Match::new().eth_type(0x88cc)));
    v.push(Flow::new(20, 10, Match::new().ipv4().ip_proto(ip_proto::IGMP)));
    v.push(Flow::new(20, 11, Match::new().ipv6().ip_proto(99)));
    let mut m = Match::new().ipv6().ip_proto(ip_proto::ICMPV6);
    m.icmp_type = Some(135);
    m.icmp_code = Some(0);
    m.ipv6_src = Some("::1.2.3.4/128".parse().expect("v6"));
    v.push(Flow::new(20, 12, m));
    let mut m = Match::new().ipv4().ip_proto(ip_proto::SCTP);
    m.tp_src = Some(Masked::exact(5));
    m.ipv4_src = Some(net4("0.0.0.0/0"));
    v.push(Flow::new(20, 13, m));
    v.push(Flow::new(20, 32768, Match::new().reg(5, 7, None)));
    v.push(Flow::new(21, 32768, Match::new()));
    v.push(Flow::new(0, 32768, Match::new().eth_type(eth_type::ARP)).action(Action::Output(port::NORMAL)));
    v
}

fn name_map() -> NameMap {
    let mut n = NameMap::new();
    for (i, t) in TABLES.iter().enumerate() {
        n.tables.insert(i as u8, t.to_string());
    }
    n.ports.insert(HOST_PORT, "eth0".into());
    n.ports.insert(UPLINK_PORT, "eth0~".into());
    n.ports.insert(22, "p.1".into());
    n
}

fn dedup(flows: Vec<Flow>) -> Vec<Flow> {
    let mut m: BTreeMap<FlowKey, Flow> = BTreeMap::new();
    for f in flows {
        assert!(
            m.insert(f.key(), f.clone()).is_none(),
            "duplicate flow key in test data: {f:?}"
        );
    }
    m.into_values().collect()
}

fn all_flows(meters: bool) -> Vec<Flow> {
    let mut v = default_flows();
    v.extend(enc_flows());
    v.extend(np_init_flows(meters));
    v.extend(pair_flows(HOST_PORT, UPLINK_PORT));
    v.extend(bypass_flows());
    v.extend(policy_flows());
    v.extend(coverage_flows());
    dedup(v)
}

fn assert_same(what: &str, ovs: &[String], ours: &[String]) {
    let missing: Vec<&String> = ours.iter().filter(|l| !ovs.contains(l)).collect();
    let extra: Vec<&String> = ovs.iter().filter(|l| !ours.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && ovs.len() == ours.len(),
        "{what}: rendered but not in OVS:\n  {}\nin OVS but not rendered:\n  {}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
        extra.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
    );
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

async fn connect(lab: &Lab, br: &str, opts: ConnOptions) -> Result<OfConnection, OfError> {
    let path = lab.dir().join(format!("{br}.mgmt"));
    tokio::time::timeout(
        Duration::from_secs(30),
        OfConnection::connect(&path, CTRL_ID, opts),
    )
    .await
    .map_err(|_| OfError::Timeout("connect".into()))?
}

fn meters() -> Vec<Meter> {
    [256, 257, 258]
        .iter()
        .map(|id| Meter {
            meter_id: *id,
            rate_pps: 5000,
            burst: 10000,
        })
        .collect()
}

fn lab_with_ports() -> Lab {
    let lab = Lab::start();
    lab.add_bridge("br", "OpenFlow10,OpenFlow15");
    lab.add_port("br", "eth0", HOST_PORT);
    lab.add_port("br", "eth0~", UPLINK_PORT);
    lab.add_port("br", "p.1", 22);
    lab
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_flows_render_exactly_like_ovs() {
    let lab = lab_with_ports();
    let sw = connect(&lab, "br", ConnOptions::default())
        .await
        .expect("connect");
    assert_eq!(sw.features().n_tables, 254);
    timed("meters", sw.replace_meters(meters()))
        .await
        .expect("meters");
    timed("groups", sw.replace_groups(np_groups()))
        .await
        .expect("groups");
    let names = name_map();

    // Without meter:256 on the Output packet-in flows ...
    let flows = all_flows(false);
    timed(
        "bundle",
        sw.bundle(flows.iter().cloned().map(FlowMod::add).collect()),
    )
    .await
    .expect("bundle");
    assert_same(
        "--names",
        &lab.dump_flows("br", true),
        &sorted(render_flows(&flows, &names)),
    );
    assert_same(
        "--no-names",
        &lab.dump_flows("br", false),
        &sorted(render_flows(&flows, &NameMap::new())),
    );
    let groups: Vec<String> = np_groups().iter().map(|g| render_group(g, &names)).collect();
    assert_same("groups", &lab.dump_groups("br"), &sorted(groups));

    // ... then with it: ADD replaces the flows with the same key.
    let flows = all_flows(true);
    let with_meter: Vec<FlowMod> = np_init_flows(true).into_iter().map(FlowMod::add).collect();
    timed("bundle", sw.bundle(with_meter))
        .await
        .expect("bundle with meters");
    assert_same(
        "--names with meters",
        &lab.dump_flows("br", true),
        &sorted(render_flows(&flows, &names)),
    );

    // Re-asserting groups and meters keeps the flows that use them.
    timed("groups", sw.replace_groups(np_groups()))
        .await
        .expect("groups again");
    timed("meters", sw.replace_meters(meters()))
        .await
        .expect("meters again");
    assert_eq!(lab.dump_flows("br", true).len(), flows.len());
    // Dropping meter 258 deletes the flows with a meter:258 action (OVS semantics; a
    // controller(meter_id=258) flow stays), others stay.
    timed("meters", sw.replace_meters(meters()[..2].to_vec()))
        .await
        .expect("fewer meters");
    let left = lab.dump_flows("br", true);
    assert!(left.iter().all(|l| !l.contains("meter:258")), "{left:?}");
    assert!(left.len() < flows.len());

    // Delete by cookie: every NetworkPolicy flow goes, the rest stays.
    timed(
        "delete",
        sw.bundle(vec![FlowMod::delete_by_cookie(COOKIE_NP, u64::MAX)]),
    )
    .await
    .expect("delete by cookie");
    let left = lab.dump_flows("br", true);
    assert!(
        left.iter().all(|l| !l.starts_with("cookie=0x1020000000000,")),
        "{left:?}"
    );
    assert!(left.iter().any(|l| l.starts_with("cookie=0x1080000000000,")));
    // Delete strict of one flow.
    let one = default_flows().remove(0);
    timed(
        "delete strict",
        sw.bundle(vec![FlowMod::delete_strict(one.clone())]),
    )
    .await
    .expect("delete strict");
    let rendered = render_flows([&one], &names).remove(0);
    assert!(!lab.dump_flows("br", true).contains(&rendered));
    timed("barrier", sw.barrier()).await.expect("barrier");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_bundle_changes_nothing_and_names_the_flow() {
    let lab = lab_with_ports();
    let sw = connect(&lab, "br", ConnOptions::default())
        .await
        .expect("connect");
    let base = default_flows();
    timed(
        "bundle",
        sw.bundle(base.iter().cloned().map(FlowMod::add).collect()),
    )
    .await
    .expect("base");
    let before = lab.dump_flows("br", false);

    let good = Flow::new(5, 77, Match::new().reg(1, 9, None))
        .cookie(0x77)
        .goto(6);
    // An overlapping flow with check_overlap fails only at commit time (OFPFMFC_OVERLAP).
    let overlap = Flow::new(T_ROOT, 200, Match::new().ipv4().reg(1, 5, None))
        .cookie(0x99)
        .goto(T_CT_STATE);
    let mut overlap_mod = FlowMod::add(overlap.clone());
    overlap_mod.flags = 1 << 1; // OFPFF_CHECK_OVERLAP
    let cases = [
        (
            FlowMod::add(Flow::new(9, 1, Match::new().reg(2, 1, None)).goto(3)),
            "OFPBIC_BAD_TABLE_ID",
        ),
        (
            FlowMod::add(Flow::new(9, 2, Match::new()).action(Action::Group(99))),
            "OFPBAC_BAD_OUT_GROUP",
        ),
        (
            FlowMod::add(
                Flow::new(9, 3, Match::new())
                    .action(Action::Meter(999))
                    .action(Action::Output(20)),
            ),
            "OFPMMFC_INVALID_METER",
        ),
        (overlap_mod, "OFPFMFC_OVERLAP"),
    ];
    for (bad, kind_prefix) in cases {
        let mods = vec![
            // A real change that must not survive the failure.
            FlowMod::delete_strict(Flow::new(T_NON_IP, 0, Match::new())),
            FlowMod::add(good.clone()),
            bad.clone(),
            FlowMod::add(good.clone().cookie(0x78)),
        ];
        let err = timed("bad bundle", sw.bundle(mods))
            .await
            .expect_err("bundle must fail");
        match &err {
            OfError::Rejected { request, kind, flow } => {
                assert!(kind.starts_with(kind_prefix), "{err}");
                assert_eq!(request, "bundle message 3 of 4 (flow_mod add)", "{err}");
                assert_eq!(
                    flow.as_deref(),
                    Some(render_flows([&bad.flow], &NameMap::new())[0].as_str()),
                    "{err}"
                );
            }
            e => panic!("unexpected error {e}"),
        }
        assert_eq!(
            lab.dump_flows("br", false),
            before,
            "a failed bundle changed the flows ({err})"
        );
    }
    // The connection is still usable; modify_strict and modify change the instructions in
    // place and keep the cookie (OpenFlow 1.5 modify never changes a cookie).
    timed("bundle", sw.bundle(vec![FlowMod::add(good.clone())]))
        .await
        .expect("good bundle");
    assert_eq!(lab.dump_flows("br", false).len(), before.len() + 1);
    let mut ms = FlowMod::add(good.clone().cookie(0x79));
    ms.flow.goto_table = Some(7);
    ms.command = FlowModCommand::ModifyStrict;
    let mut m = FlowMod::add(Flow::new(T_CT_ZONE, 0, Match::new()).goto(T_CT_COMMIT));
    m.command = FlowModCommand::Modify;
    m.flow.cookie = COOKIE_DEFAULT;
    m.cookie_mask = u64::MAX;
    timed("modify", sw.bundle(vec![ms, m]))
        .await
        .expect("modify bundle");
    let after = lab.dump_flows("br", false);
    assert!(
        after.contains(&"cookie=0x77, table=5, priority=77,reg1=0x9 actions=goto_table:7".to_string()),
        "{after:?}"
    );
    assert!(
        after.contains(&"cookie=0x1000000000000, table=1, priority=0 actions=goto_table:14".to_string()),
        "{after:?}"
    );

    // A flow the codec cannot encode fails before anything is sent.
    let mut m = Match::new();
    m.tp_dst = Some(Masked::exact(80));
    let err = sw
        .bundle(vec![FlowMod::add(Flow::new(1, 1, m))])
        .await
        .expect_err("prereq");
    assert!(matches!(err, OfError::Encode { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_flows_in_one_bundle() {
    let lab = lab_with_ports();
    let sw = connect(&lab, "br", ConnOptions::default())
        .await
        .expect("connect");
    let mods: Vec<FlowMod> = (0u32..20_000)
        .map(|i| {
            let mut m = Match::new().ipv4();
            m.ipv4_src =
                Some(ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(0x0a00_0000 + i), 32).expect("net"));
            FlowMod::add(
                Flow::new(T_AP_INGRESS, 100, m)
                    .cookie(COOKIE_NP)
                    .action(conj(1000 + i / 100, 1, 3))
                    .action(conj(7, 1, 2)),
            )
        })
        .collect();
    let start = Instant::now();
    timed("20k bundle", sw.bundle(mods)).await.expect("20k bundle");
    let took = start.elapsed();
    println!("installed 20000 flows in one bundle in {took:?}");
    let agg = lab.ofctl(&["dump-aggregate", &lab.mgmt("br")]);
    assert!(agg.contains("flow_count=20000"), "{agg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_connection() {
    let lab = lab_with_ports();
    let sw = std::sync::Arc::new(
        connect(&lab, "br", ConnOptions::default())
            .await
            .expect("connect"),
    );
    let mut tasks = Vec::new();
    for i in 0..16u32 {
        let sw = sw.clone();
        tasks.push(tokio::spawn(async move {
            let mods = (0..50u32)
                .map(|j| FlowMod::add(Flow::new(5, 10, Match::new().reg(1, i * 1000 + j, None)).goto(6)))
                .collect();
            sw.bundle(mods).await?;
            sw.barrier().await
        }));
    }
    for t in tasks {
        timed("task", t).await.expect("join").expect("bundle");
    }
    assert_eq!(lab.dump_flows("br", false).len(), 16 * 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_resolves_on_echo_timeout_and_on_eof() {
    let lab = lab_with_ports();
    let opts = ConnOptions {
        echo_interval: Duration::from_millis(200),
        echo_timeout: Duration::from_secs(1),
        ..ConnOptions::default()
    };
    // A frozen switch stops answering echo requests.
    let sw = connect(&lab, "br", opts.clone()).await.expect("connect");
    sw.barrier().await.expect("barrier");
    lab.signal_vswitchd("STOP");
    let r = tokio::time::timeout(Duration::from_secs(20), sw.closed()).await;
    lab.signal_vswitchd("CONT");
    assert!(r.is_ok(), "closed() did not resolve while the switch was frozen");
    assert!(matches!(sw.barrier().await, Err(OfError::Closed)));

    // A switch that goes away closes the connection.
    let sw = connect(&lab, "br", opts).await.expect("reconnect");
    sw.barrier().await.expect("barrier");
    lab.signal_vswitchd("KILL");
    assert!(
        tokio::time::timeout(Duration::from_secs(20), sw.closed())
            .await
            .is_ok(),
        "closed() after kill"
    );
    assert!(matches!(
        sw.bundle(vec![FlowMod::add(Flow::new(1, 1, Match::new()))]).await,
        Err(OfError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_bridge_without_openflow15() {
    let lab = Lab::start();
    lab.add_bridge("br13", "OpenFlow10,OpenFlow13");
    let err = connect(&lab, "br13", ConnOptions::default())
        .await
        .expect_err("must not negotiate");
    assert!(matches!(err, OfError::Negotiation(_)), "{err}");
    assert!(err.to_string().contains("OpenFlow15"), "{err}");
}

/// Every message we encode is understood by OVS's own decoder (`ovs-ofctl ofp-print`).
#[test]
fn ovs_ofp_print_decodes_our_messages() {
    let fm = FlowMod::add(policy_flows().remove(1));
    let mut bundle = super::wire::Writer::new();
    messages::write_bundle_add_flow_mod(&mut bundle, 7, 1, 3, &fm).expect("encode");
    let g = &np_groups()[0];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (messages::hello(1), "version bitmap: 0x06"),
        (messages::features_request(2), "OFPT_FEATURES_REQUEST"),
        (
            messages::set_controller_id(3, CTRL_ID),
            "NXT_SET_CONTROLLER_ID (OF1.5) (xid=0x3): id=32776",
        ),
        (
            messages::set_packet_in_format(4, messages::NXPIF_NXT_PACKET_IN2),
            "format=nxt_packet_in2",
        ),
        (
            messages::bundle_control(5, 1, messages::bundle_ctrl::OPEN_REQUEST, 3),
            "type=OPEN_REQUEST",
        ),
        (bundle.into_vec(), "conjunction(1,1/2)"),
        (
            messages::group_mod(8, messages::GroupCommand::AddOrModify, g).expect("group"),
            "ADD_OR_MOD",
        ),
        (messages::group_delete_all(9), "DEL group_id=4294967292"),
        (
            messages::meter_mod(10, messages::MeterCommand::Add, &meters()[0]).expect("meter"),
            "meter=256 pktps burst",
        ),
        (messages::meter_delete_all(11), "DEL meter=all"),
        (messages::group_desc_request(12), "OFPST_GROUP_DESC request"),
        (messages::meter_config_request(13), "OFPST_METER_CONFIG request"),
        (
            messages::flow_mod(14, &FlowMod::delete_by_cookie(COOKIE_NP, u64::MAX)).expect("fm"),
            "DEL table:255 priority=0 cookie:0x1020000000000/0xffffffffffffffff",
        ),
    ];
    for (bytes, want) in cases {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let out = run(Command::new("ovs-ofctl").args(["ofp-print", &hex])).expect("ofp-print");
        assert!(!out.contains("decode error") && !out.contains("***"), "{out}");
        assert!(out.contains(want), "expected {want:?} in:\n{out}");
    }
}
