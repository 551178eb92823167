//! Tests of the codec, renderer and connection against a real ovs-vswitchd 3.1 (userspace
//! `netdev` datapath) started privately in a temporary directory and network namespace.
//! They need root and the Open vSwitch binaries; every wait is bounded.
//!
//! The tests that do not stop or kill the switch share one private OVS ([`shared_lab`]): each
//! works on a bridge of its own ([`Bridge`], deleted on drop), and the daemons stop when the
//! last of them finishes. The [`Lab`] guard stops the daemons and removes the namespace even
//! when a test fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::conn::{ConnOptions, OfConnection};
use super::events::{Event, PacketOut, PortReason};
use super::flow::*;
use super::golden::*;
use super::messages;
use super::render::{render_flow, render_flows, NameMap};
use super::{OfError, Switch};

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

    fn vsctl_cmd(&self) -> Command {
        let mut c = Command::new("ovs-vsctl");
        c.arg(format!("--db=unix:{}", self.dir().join("db.sock").display()))
            .arg("--timeout=30");
        c
    }

    pub fn vsctl(&self, args: &[&str]) -> String {
        run(self.vsctl_cmd().args(args)).expect("ovs-vsctl")
    }

    /// Adds a netdev bridge speaking `protocols`, with the production table names.
    pub fn add_bridge(self: &Arc<Self>, protocols: &str) -> Bridge {
        let name = format!("ofb{}", BRIDGE_SEQ.fetch_add(1, Ordering::SeqCst));
        let br = Bridge {
            lab: self.clone(),
            name: name.clone(),
        };
        let mut args: Vec<String> = vec![
            "add-br".into(),
            name.clone(),
            "--".into(),
            "set".into(),
            "bridge".into(),
            name.clone(),
            "datapath_type=netdev".into(),
            format!("protocols={protocols}"),
            "fail_mode=secure".into(),
        ];
        for (i, t) in TABLES.iter().enumerate() {
            args.extend([
                "--".to_string(),
                format!("--id=@t{i}"),
                "create".into(),
                "Flow_Table".into(),
                format!("name={t}"),
                "--".into(),
                "set".into(),
                "Bridge".into(),
                name.clone(),
                format!("flow_tables:{i}=@t{i}"),
            ]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.vsctl(&refs);
        let mgmt = br.mgmt();
        wait_for("bridge mgmt socket", Duration::from_secs(20), || mgmt.exists());
        br
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

/// The lab shared by the tests that leave the switch running: started by the first of them,
/// stopped when the last one holding it finishes (or fails).
fn shared_lab() -> Arc<Lab> {
    static SHARED: Mutex<Weak<Lab>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lab) = shared.upgrade() {
        return lab;
    }
    let lab = Arc::new(Lab::start());
    *shared = Arc::downgrade(&lab);
    lab
}

static BRIDGE_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A bridge of one test; deleted (with its ports) on drop.
pub struct Bridge {
    lab: Arc<Lab>,
    name: String,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self
            .lab
            .vsctl_cmd()
            .args(["--no-wait", "--if-exists", "del-br", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Bridge {
    pub fn mgmt(&self) -> PathBuf {
        self.lab.dir().join(format!("{}.mgmt", self.name))
    }

    /// Adds an internal port with a fixed OpenFlow port number.
    pub fn add_port(&self, name: &str, ofport: u32) {
        self.lab.vsctl(&[
            "add-port",
            &self.name,
            name,
            "--",
            "set",
            "Interface",
            name,
            "type=internal",
            &format!("ofport_request={ofport}"),
        ]);
    }

    pub fn del_port(&self, name: &str) {
        self.lab.vsctl(&["del-port", &self.name, name]);
    }

    /// `ovs-ofctl -O OpenFlow15 <cmd> <this bridge> <args>`.
    pub fn ofctl(&self, cmd: &str, args: &[&str]) -> String {
        run(Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow15", cmd])
            .arg(self.mgmt())
            .args(args))
        .expect("ovs-ofctl")
    }

    /// `dump-flows --no-stats`, one trimmed line per flow.
    pub fn dump_flows(&self, names: bool) -> BTreeSet<String> {
        let out = self.ofctl(
            "dump-flows",
            &[if names { "--names" } else { "--no-names" }, "--no-stats"],
        );
        out.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    pub fn dump_groups(&self) -> BTreeSet<String> {
        let out = self.ofctl("dump-groups", &["--names"]);
        out.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("group_id="))
            .map(String::from)
            .collect()
    }

    pub async fn connect(&self, opts: ConnOptions) -> Result<OfConnection, OfError> {
        let path = self.mgmt();
        tokio::time::timeout(
            Duration::from_secs(30),
            OfConnection::connect(&path, CTRL_ID, opts),
        )
        .await
        .map_err(|_| OfError::Timeout("connect".into()))?
    }
}

fn assert_same(what: &str, ovs: &BTreeSet<String>, ours: &BTreeSet<String>) {
    assert!(
        ovs == ours,
        "{what}: rendered but not in OVS:\n  {}\nin OVS but not rendered:\n  {}",
        ours.difference(ovs).cloned().collect::<Vec<_>>().join("\n  "),
        ovs.difference(ours).cloned().collect::<Vec<_>>().join("\n  ")
    );
}

fn text_set(v: Vec<String>) -> BTreeSet<String> {
    v.into_iter().collect()
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// No bundle of `ids` is open on the switch: committing it finds no such bundle.
async fn assert_bundles_gone(sw: &OfConnection, ids: impl IntoIterator<Item = u32>) {
    for id in ids {
        let e = timed("commit", sw.commit_bundle_as_is(id))
            .await
            .expect_err("the bundle must be gone");
        assert!(e.to_string().contains("OFPBFC_BAD_ID"), "bundle {id}: {e}");
    }
}

/// Every flow on the switch, read with our own flow-stats decoder, normalized.
async fn decoded_flows(sw: &OfConnection, filter: FlowFilter) -> BTreeSet<Flow> {
    timed("dump flows", sw.dump_flows(filter))
        .await
        .expect("dump flows")
        .into_iter()
        .map(|s| s.flow)
        .collect()
}

fn normalized(flows: &[Flow]) -> BTreeSet<Flow> {
    flows.iter().map(normalize_flow).collect()
}

/// The next packet-in of a subscription (bounded wait).
async fn next_packet_in(events: &mut super::Subscription) -> super::PacketIn {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), events.recv()).await {
            Ok(Some(Event::PacketIn(pi))) => return *pi,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("subscription ended"),
            Err(_) => panic!("no packet-in within 20 s"),
        }
    }
}

/// The next port status of a subscription for port `name` with `reason` (bounded wait).
async fn port_status(events: &mut super::Subscription, reason: PortReason, name: &str) -> super::PortStatus {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), events.recv()).await {
            Ok(Some(Event::PortStatus(ps))) if ps.reason == reason && ps.port.name == name => return ps,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("subscription ended"),
            Err(_) => panic!("no {reason:?} port status within 20 s"),
        }
    }
}

/// An Ethernet + IPv4 + UDP frame.
fn udp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = 20 + 8 + payload.len();
    let mut ip = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let csum = !(sum as u16);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    let ulen = 8 + payload.len();
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(ulen as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

// === the tests ===

/// The golden round trip: every reference flow (and every other field and action of the
/// model) is encoded, installed in one bundle, dumped by `ovs-ofctl` and compared with the
/// reference text; then dumped through our own flow-stats decoder and compared with what was
/// installed. Groups, meters, filtered stats and deletes are checked on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_reference_flows_round_trip() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    for (ofport, name) in NAMED_PORTS {
        br.add_port(name, ofport);
    }
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    assert_eq!(sw.features().n_tables, 254);

    // The port names come from our own port-description decoder.
    let ports = timed("ports", sw.port_descs()).await.expect("port descs");
    for (ofport, name) in NAMED_PORTS {
        assert!(
            ports.iter().any(|p| p.port_no == ofport && p.name == name),
            "{ports:?}"
        );
    }
    assert!(ports.iter().any(|p| p.port_no == port::LOCAL));
    let names = name_map();

    timed("meters", sw.replace_meters(meters()))
        .await
        .expect("meters");
    timed("groups", sw.replace_groups(np_groups()))
        .await
        .expect("groups");
    assert_same("groups", &br.dump_groups(), &reference_groups_text());

    let coverage = dedup(coverage_flows());
    let model: Vec<(Flow, &str)> = model_coverage();
    let model_flows: Vec<Flow> = model.iter().map(|(f, _)| f.clone()).collect();
    let model_text: BTreeSet<String> = model.iter().map(|(_, t)| t.to_string()).collect();
    let everything = |meters: bool, logging: bool| {
        let mut v = reference_flows(meters, logging);
        v.extend(coverage.iter().cloned());
        v.extend(model_flows.iter().cloned());
        dedup(v)
    };
    let expected_text = |meters: bool, logging: bool| {
        let mut t = reference_text(meters, logging);
        t.extend(render_flows(&coverage, &names));
        t.extend(model_text.iter().cloned());
        t
    };

    // Pass 1: no meter on the packet-in flows, G18 without logging.
    let flows = everything(false, false);
    timed(
        "bundle",
        sw.bundle(flows.iter().cloned().map(FlowMod::add).collect()),
    )
    .await
    .expect("bundle");
    assert_same(
        "dump-flows --names vs the reference text",
        &br.dump_flows(true),
        &expected_text(false, false),
    );
    assert_same(
        "dump-flows --no-names vs our rendering",
        &br.dump_flows(false),
        &text_set(render_flows(&flows, &NameMap::new())),
    );
    let decoded = decoded_flows(&sw, FlowFilter::all()).await;
    assert_eq!(
        decoded,
        normalized(&flows),
        "our flow-stats decoder disagrees with what was installed"
    );

    // Pass 2: ADD replaces flows with the same key (meter:256 on the packet-in flows, G18
    // with logging); nothing else changes.
    let mut changed: Vec<Flow> = np_init_flows(true);
    changed.extend(
        policy_flows(true)
            .into_iter()
            .filter(|f| f.matches.conj_id == Some(3)),
    );
    timed(
        "bundle",
        sw.bundle(changed.into_iter().map(FlowMod::add).collect()),
    )
    .await
    .expect("bundle with meters");
    let flows = everything(true, true);
    assert_same(
        "dump-flows --names with meters and logging",
        &br.dump_flows(true),
        &expected_text(true, true),
    );
    assert_eq!(decoded_flows(&sw, FlowFilter::all()).await, normalized(&flows));

    // Filtered stats: by table, by cookie under a mask, by match.
    for (filter, want) in [
        (
            FlowFilter::table(T_OUTPUT),
            flows.iter().filter(|f| f.table == T_OUTPUT).count(),
        ),
        (
            FlowFilter::all().cookie(COOKIE_NP, u64::MAX),
            flows.iter().filter(|f| f.cookie == COOKIE_NP).count(),
        ),
        (
            FlowFilter::all().cookie(0x1000000000000, 0xffff000000000000),
            flows.iter().filter(|f| f.cookie >> 48 == 1).count(),
        ),
        (
            FlowFilter::table(T_AP_INGRESS).matching(Match::new().reg(1, 0x14, None)),
            2,
        ),
    ] {
        let agg = timed("aggregate", sw.aggregate_stats(filter.clone()))
            .await
            .expect("aggregate");
        assert_eq!(agg.flow_count as usize, want, "{filter:?}");
        assert_eq!((agg.packet_count, agg.byte_count), (0, 0));
        let dumped = timed("dump", sw.dump_flows(filter.clone())).await.expect("dump");
        assert_eq!(dumped.len(), want, "{filter:?}");
    }

    // Re-asserting groups and meters keeps the flows that use them.
    timed("groups", sw.replace_groups(np_groups()))
        .await
        .expect("groups again");
    timed("meters", sw.replace_meters(meters()))
        .await
        .expect("meters again");
    assert_eq!(br.dump_flows(true).len(), flows.len());
    // Dropping meter 258 deletes the flows with a meter:258 action (OVS semantics; a
    // controller(meter_id=258) flow stays), others stay.
    timed("meters", sw.replace_meters(meters()[..2].to_vec()))
        .await
        .expect("fewer meters");
    let left = br.dump_flows(true);
    assert!(left.iter().all(|l| !l.contains("meter:258")), "{left:?}");
    assert!(left.len() < flows.len());

    // Delete by cookie: every NetworkPolicy flow goes, the rest stays.
    timed(
        "delete",
        sw.bundle(vec![FlowMod::delete_by_cookie(COOKIE_NP, u64::MAX)]),
    )
    .await
    .expect("delete by cookie");
    let left = br.dump_flows(true);
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
    assert!(!br.dump_flows(true).contains(&render_flow(&one, &names)));
    timed("barrier", sw.barrier()).await.expect("barrier");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_bundle_changes_nothing_and_names_the_flow() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    let base = default_flows();
    timed(
        "bundle",
        sw.bundle(base.iter().cloned().map(FlowMod::add).collect()),
    )
    .await
    .expect("base");
    let before = br.dump_flows(false);

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
                    Some(render_flow(&bad.flow, &NameMap::new()).as_str()),
                    "{err}"
                );
            }
            e => panic!("unexpected error {e}"),
        }
        assert_eq!(
            br.dump_flows(false),
            before,
            "a failed bundle changed the flows ({err})"
        );
    }
    // The connection is still usable; modify_strict and modify change the instructions in
    // place and keep the cookie (OpenFlow 1.5 modify never changes a cookie).
    timed("bundle", sw.bundle(vec![FlowMod::add(good.clone())]))
        .await
        .expect("good bundle");
    assert_eq!(br.dump_flows(false).len(), before.len() + 1);
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
    let after = br.dump_flows(false);
    assert!(
        after.contains("cookie=0x77, table=5, priority=77,reg1=0x9 actions=goto_table:7"),
        "{after:?}"
    );
    assert!(
        after.contains("cookie=0x1000000000000, table=1, priority=0 actions=goto_table:14"),
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

/// A bundle request cancelled half-way (its future dropped while the connection lives on) leaves
/// no bundle open on the switch, streamed or not: without the discard, what was sent of it
/// stayed open there and could still be committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_bundle_is_discarded_on_the_switch() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    let before = br.dump_flows(false);
    let flow = |i: u32| FlowMod::add(Flow::new(5, 10, Match::new().reg(1, i, None)).goto(6));

    // Streamed: the first poll sends the open and the first chunk, then yields.
    let streamed = sw.peek_next_bundle_id();
    {
        let mut chunks = (0..3u32).map(|c| (0..100).map(|i| flow(c * 100 + i)).collect::<Vec<_>>());
        let mut request = std::pin::pin!(sw.bundle_chunks(&mut chunks));
        assert!(futures::poll!(request.as_mut()).is_pending());
    }
    // Atomic: the first poll sends the whole bundle, then waits for its replies.
    let atomic = sw.peek_next_bundle_id();
    {
        let mut request = std::pin::pin!(sw.bundle((1000..1100).map(flow).collect()));
        assert!(futures::poll!(request.as_mut()).is_pending());
    }
    assert_ne!(streamed, atomic);
    assert_bundles_gone(&sw, [streamed, atomic]).await;
    assert_eq!(br.dump_flows(false), before);
    // The connection goes on.
    timed("bundle", sw.bundle(vec![flow(7)]))
        .await
        .expect("a later bundle");
    assert_eq!(br.dump_flows(false).len(), before.len() + 1);
}

/// A bundle OVS refused a flow_mod of (at add time) is gone from the switch once the request
/// returns, streamed or not, even though nobody waits for the discard's answer: the connection's
/// next message, a commit of the same bundle id, finds no bundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_bundle_is_discarded_on_the_switch() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    let before = br.dump_flows(false);
    let flow = |i: u32| FlowMod::add(Flow::new(5, 10, Match::new().reg(1, i, None)).goto(6));
    // goto_table to an earlier table: refused when added.
    let refused = FlowMod::add(Flow::new(9, 1, Match::new().reg(2, 1, None)).goto(3));

    let streamed = sw.peek_next_bundle_id();
    let mut chunks = [
        (0..100).map(flow).collect::<Vec<_>>(),
        vec![flow(100), refused.clone()],
    ]
    .into_iter();
    let e = timed("streamed", sw.bundle_chunks(&mut chunks))
        .await
        .expect_err("a refused flow_mod fails the streamed bundle");
    assert!(e.to_string().contains("OFPBIC_BAD_TABLE_ID"), "{e}");
    let atomic = sw.peek_next_bundle_id();
    let e = timed("atomic", sw.bundle(vec![flow(200), refused]))
        .await
        .expect_err("a refused flow_mod fails the atomic bundle");
    assert!(e.to_string().contains("OFPBIC_BAD_TABLE_ID"), "{e}");
    assert_ne!(streamed, atomic);
    assert_bundles_gone(&sw, [streamed, atomic]).await;
    assert_eq!(br.dump_flows(false), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_flows_in_one_bundle() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    let flows: Vec<Flow> = (0u32..20_000)
        .map(|i| {
            let mut m = Match::new().ipv4();
            m.ipv4_src =
                Some(ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(0x0a00_0000 + i), 32).expect("net"));
            Flow::new(T_AP_INGRESS, 100, m)
                .cookie(COOKIE_NP)
                .action(Action::Conjunction {
                    id: 1000 + i / 100,
                    clause: 1,
                    n_clauses: 3,
                })
                .action(Action::Conjunction {
                    id: 7,
                    clause: 1,
                    n_clauses: 2,
                })
        })
        .collect();
    let start = Instant::now();
    timed(
        "20k bundle",
        sw.bundle(flows.iter().cloned().map(FlowMod::add).collect()),
    )
    .await
    .expect("20k bundle");
    println!("installed 20000 flows in one bundle in {:?}", start.elapsed());
    let agg = br.ofctl("dump-aggregate", &[]);
    assert!(agg.contains("flow_count=20000"), "{agg}");
    let ours = timed("aggregate", sw.aggregate_stats(FlowFilter::all()))
        .await
        .expect("aggregate");
    assert_eq!(ours.flow_count, 20_000);
    // The dump spans many multipart replies.
    assert_eq!(decoded_flows(&sw, FlowFilter::all()).await, normalized(&flows));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_connection() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = Arc::new(br.connect(ConnOptions::default()).await.expect("connect"));
    let mut tasks = Vec::new();
    for i in 0..16u32 {
        let sw = sw.clone();
        tasks.push(tokio::spawn(async move {
            let mods = (0..50u32)
                .map(|j| FlowMod::add(Flow::new(5, 10, Match::new().reg(1, i * 1000 + j, None)).goto(6)))
                .collect();
            sw.bundle(mods).await?;
            let mine = sw
                .dump_flows(FlowFilter::table(5).matching(Match::new().reg(1, i * 1000, None)))
                .await?;
            assert_eq!(mine.len(), 1);
            sw.barrier().await
        }));
    }
    for t in tasks {
        timed("task", t).await.expect("join").expect("bundle");
    }
    assert_eq!(br.dump_flows(false).len(), 16 * 50);
}

/// Packet-ins reach subscribers with every field decoded; a paused pipeline resumes; counters
/// move. The packet is injected with a packet-out through the tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packet_in2_resume_and_counters() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let seq = BRIDGE_SEQ.load(Ordering::SeqCst);
    let ofport = 7;
    br.add_port(&format!("pi{seq}"), ofport);
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    let mut events = sw.subscribe();

    let controller = |userdata: Vec<u8>, pause: bool| {
        Action::Controller(ControllerAction {
            max_len: 65535,
            controller_id: CTRL_ID,
            reason: 0,
            userdata,
            pause,
            meter_id: None,
        })
    };
    let udp = |dport: u16| {
        Match::new()
            .ipv4()
            .ip_proto(ip_proto::UDP)
            .in_port(ofport)
            .tp_dst(dport)
    };
    let dns = Flow::new(0, 10, udp(53))
        .cookie(0x55)
        .action(Action::SetField(SetField::Reg {
            idx: 3,
            value: 5,
            mask: None,
        }))
        .action(controller(vec![2], true))
        .goto(1);
    let log = Flow::new(0, 10, udp(514))
        .cookie(0x66)
        .action(controller(vec![1, 1], false));
    let after = Flow::new(1, 10, Match::new().ipv4().ip_proto(ip_proto::UDP)).cookie(0x77);
    timed(
        "bundle",
        sw.bundle(vec![
            FlowMod::add(dns.clone()),
            FlowMod::add(log),
            FlowMod::add(after.clone()),
        ]),
    )
    .await
    .expect("bundle");

    let send = |dport: u16| {
        let packet = udp_frame([10, 0, 0, 1], [10, 0, 0, 2], 4000, dport, b"hello");
        PacketOut {
            in_port: ofport,
            metadata: Match::new(),
            actions: vec![Action::Output(port::TABLE)],
            packet,
        }
    };

    // A plain packet-in (logging): no continuation.
    let po = send(514);
    timed("packet-out", sw.packet_out(po.clone()))
        .await
        .expect("packet-out");
    let pi = next_packet_in(&mut events).await;
    assert_eq!(pi.packet, po.packet);
    assert_eq!(pi.total_len as usize, po.packet.len());
    assert_eq!((pi.table_id, pi.cookie, pi.reason), (0, 0x66, 0));
    assert_eq!(pi.userdata, vec![1, 1]);
    assert_eq!(pi.continuation, None);
    assert_eq!(pi.metadata.in_port, Some(ofport));

    // A paused pipeline: the registers set before the pause are in the metadata; the packet
    // reaches table 1 only after resume.
    let po = send(53);
    timed("packet-out", sw.packet_out(po.clone()))
        .await
        .expect("packet-out");
    let pi = next_packet_in(&mut events).await;
    // OVS leaves the cookie out of a paused packet-in.
    assert_eq!((pi.table_id, pi.reason), (0, 0));
    assert_eq!(pi.userdata, vec![2]);
    assert!(pi.continuation.is_some());
    assert_eq!(pi.metadata.in_port, Some(ofport));
    assert_eq!(pi.metadata.regs.get(&3), Some(&Masked::exact(5)));
    let table1 = FlowFilter::table(1);
    let before = timed("dump", sw.dump_flows(table1.clone())).await.expect("dump");
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].packet_count, 0);
    timed("resume", sw.resume(pi)).await.expect("resume");
    timed("barrier", sw.barrier()).await.expect("barrier");
    let end = Instant::now() + Duration::from_secs(20);
    let stats = loop {
        let s = timed("dump", sw.dump_flows(table1.clone())).await.expect("dump");
        if s[0].packet_count > 0 || Instant::now() > end {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stats[0].flow, normalize_flow(&after));
    assert_eq!(stats[0].packet_count, 1, "the resumed packet reached table 1");
    assert_eq!(stats[0].byte_count, po.packet.len() as u64);
    let agg = timed(
        "aggregate",
        sw.aggregate_stats(FlowFilter::table(0).cookie(0x55, u64::MAX)),
    )
    .await
    .expect("aggregate");
    assert_eq!((agg.flow_count, agg.packet_count), (1, 1));
    assert_eq!(sw.dropped_events(), 0);

    // A refused packet-out is an error naming it.
    let bad = PacketOut {
        in_port: ofport,
        metadata: Match::new(),
        actions: vec![Action::Group(77)],
        packet: po.packet.clone(),
    };
    let e = timed("bad packet-out", sw.packet_out(bad))
        .await
        .expect_err("group 77 does not exist");
    assert!(e.to_string().contains("packet-out"), "{e}");
}

/// Port status notifications for added and deleted ports, and the port list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_status_and_port_descriptions() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    let mut events = sw.subscribe();
    let name = format!("ps{}", BRIDGE_SEQ.load(Ordering::SeqCst));
    br.add_port(&name, 9);
    let added = port_status(&mut events, PortReason::Add, &name).await;
    assert_eq!(added.port.port_no, 9);
    let ports = timed("ports", sw.port_descs()).await.expect("ports");
    let p = ports.iter().find(|p| p.name == name).expect("new port listed");
    assert_eq!(p.port_no, 9);
    assert_eq!(p.hw_addr, added.port.hw_addr);
    br.del_port(&name);
    let deleted = port_status(&mut events, PortReason::Delete, &name).await;
    assert_eq!(deleted.port.port_no, 9);
    let ports = timed("ports", sw.port_descs()).await.expect("ports");
    assert!(ports.iter().all(|p| p.name != name));
}

/// A flow this codec cannot model makes a dump fail with `Unsupported`, but the connection
/// stays usable (it is not a malformed message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_flow_fails_the_dump_not_the_connection() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let sw = br.connect(ConnOptions::default()).await.expect("connect");
    br.ofctl(
        "add-flow",
        &["table=3,priority=5,actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]"],
    );
    let e = timed("dump", sw.dump_flows(FlowFilter::all()))
        .await
        .expect_err("unsupported move");
    assert!(matches!(e, OfError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("flow stats entry #1"), "{e}");
    timed("barrier", sw.barrier()).await.expect("still connected");
    assert!(timed("dump", sw.dump_flows(FlowFilter::table(4)))
        .await
        .expect("dump")
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_resolves_on_echo_timeout_and_on_eof() {
    // This test freezes and kills the switch: it has a lab of its own.
    let lab = Arc::new(Lab::start());
    let br = lab.add_bridge("OpenFlow10,OpenFlow15");
    let opts = ConnOptions {
        echo_interval: Duration::from_millis(200),
        echo_timeout: Duration::from_secs(1),
        ..ConnOptions::default()
    };
    // A frozen switch stops answering echo requests.
    let sw = br.connect(opts.clone()).await.expect("connect");
    let mut events = sw.subscribe();
    sw.barrier().await.expect("barrier");
    lab.signal_vswitchd("STOP");
    let r = tokio::time::timeout(Duration::from_secs(20), sw.closed()).await;
    lab.signal_vswitchd("CONT");
    assert!(r.is_ok(), "closed() did not resolve while the switch was frozen");
    assert!(matches!(sw.barrier().await, Err(OfError::Closed)));
    let ended = tokio::time::timeout(Duration::from_secs(5), events.recv()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the subscription ends with the connection"
    );

    // A switch that goes away closes the connection.
    let sw = br.connect(opts).await.expect("reconnect");
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
    assert!(matches!(
        sw.dump_flows(FlowFilter::all()).await,
        Err(OfError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_bridge_without_openflow15() {
    let lab = shared_lab();
    let br = lab.add_bridge("OpenFlow10,OpenFlow13");
    let err = br
        .connect(ConnOptions::default())
        .await
        .expect_err("must not negotiate");
    assert!(matches!(err, OfError::Negotiation(_)), "{err}");
    assert!(err.to_string().contains("OpenFlow15"), "{err}");
}

/// Every message we encode is understood by OVS's own decoder (`ovs-ofctl ofp-print`).
#[test]
fn ovs_ofp_print_decodes_our_messages() {
    let fm = FlowMod::add(policy_flows(false).remove(1));
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
        (
            messages::set_config(15, 0, messages::MISS_SEND_LEN_NO_BUFFER),
            "miss_send_len=65535",
        ),
        (
            messages::set_async(16, &super::events::AsyncConfig::agent()),
            "PACKET_IN: no_match action invalid_ttl action_set group packet_out",
        ),
        (
            messages::flow_stats_request(
                17,
                &FlowFilter::table(T_OUTPUT).cookie(COOKIE_NP, u64::MAX),
            )
            .expect("flow stats request"),
            "OFPST_FLOW request (OF1.5) (xid=0x11): table=15",
        ),
        (
            messages::aggregate_stats_request(
                18,
                &FlowFilter::all().matching(Match::new().reg(1, 0x14, None)),
            )
            .expect("aggregate request"),
            "OFPST_AGGREGATE request (OF1.5) (xid=0x12): reg1=0x14",
        ),
        (messages::port_desc_request(19), "OFPST_PORT_DESC request (OF1.5) (xid=0x13): port=ANY"),
        (
            messages::packet_out(
                20,
                &PacketOut {
                    in_port: 7,
                    metadata: Match::new().reg(0, 0x2000, Some(0x2000)),
                    actions: vec![
                        Action::SetField(SetField::Reg {
                            idx: 8,
                            value: 0,
                            mask: Some(0xffff),
                        }),
                        Action::Resubmit {
                            in_port: None,
                            table: Some(T_L2_CALC),
                        },
                        Action::Output(21),
                    ],
                    packet: udp_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"x"),
                },
            )
            .expect("packet-out"),
            "reg0=0x2000/0x2000,in_port=7 actions=set_field:0/0xffff->reg8,resubmit(,8),output:21 data_len=43",
        ),
        (messages::get_async_request(21), "OFPT_GET_ASYNC_REQUEST"),
    ];
    for (bytes, want) in cases {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let out = run(Command::new("ovs-ofctl").args(["ofp-print", &hex])).expect("ofp-print");
        assert!(!out.contains("decode error") && !out.contains("***"), "{out}");
        assert!(out.contains(want), "expected {want:?} in:\n{out}");
    }
}
