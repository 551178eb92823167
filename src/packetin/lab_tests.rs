//! The responder against a real ovs-vswitchd 3.1 (userspace datapath) and real kernels: a
//! private OVS in a "VM" network namespace with the production pipeline and Reject rules, an
//! "outside" namespace on the other end of the uplink, and `nc`/`ping` as the peers that get
//! rejected. Needs root and the lab packages (openvswitch-switch, iproute2, nftables, ethtool,
//! iputils-ping, netcat-openbsd); every wait is bounded; the [`RejectLab`] guard stops the
//! daemons and removes the namespaces even when the test fails.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::responder::{run, PacketInContext, PacketInStats};
use super::AuditLog;
use crate::attachment::{AttachedInterface, EntityRef};
use crate::config::AuditLogging;
use crate::ovs::openflow::conn::{ConnOptions, OfConnection};
use crate::ovs::openflow::{FlowMod, Switch};
use crate::policy::compiler::{compile, CompileOptions};
use crate::policy::flowset;
use crate::policy::pipeline::{self, PipelineOptions};
use crate::policy::rule::{
    CompiledRuleInput, Direction, Peer, PolicyRef, PolicyType, Protocol, RuleAction, RuleId, Service,
};

const HOST_PORT: u32 = 20;
const UPLINK_PORT: u32 = 21;
const VM4: &str = "10.77.0.2";
const EXT4: &str = "10.77.0.1";
const VM6: &str = "fd77::2";
const EXT6: &str = "fd77::1";
const STEP: Duration = Duration::from_secs(30);

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn sh_status(ns: &str, script: &str) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns, "timeout", "60", "sh", "-c", script])
        .output()
        .unwrap_or_else(|e| panic!("ip netns exec {ns} sh -c {script:?}: {e}"))
}

fn sh(ns: &str, script: &str) -> String {
    let out = sh_status(ns, script);
    assert!(
        out.status.success(),
        "in {ns}: {script}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces joined by a veth pair, a private OVS in the VM one; removed on drop.
struct RejectLab {
    dir: tempfile::TempDir,
    vm: String,
    ext: String,
}

impl RejectLab {
    fn start() -> RejectLab {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let p = format!("pin{}x{n}", std::process::id() % 100_000);
        let lab = RejectLab {
            dir: tempfile::Builder::new()
                .prefix("pinlab")
                .tempdir()
                .expect("temp dir"),
            vm: format!("{p}v"),
            ext: format!("{p}e"),
        };
        for ns in [&lab.vm, &lab.ext] {
            let ok = Command::new("ip").args(["netns", "add", ns]).status();
            assert!(ok.is_ok_and(|s| s.success()), "ip netns add {ns}");
        }
        let ok = Command::new("ip")
            .args([
                "link", "add", "ext0", "netns", &lab.ext, "type", "veth", "peer", "name",
            ])
            .args(["eth0~", "netns", &lab.vm])
            .status();
        assert!(ok.is_ok_and(|s| s.success()), "veth pair");
        let d = lab.dir.path().display().to_string();
        sh(
            &lab.vm,
            &format!(
                "ovsdb-tool create {d}/conf.db /usr/share/openvswitch/vswitch.ovsschema && \
                 ovsdb-server --remote=punix:{d}/db.sock --pidfile={d}/ovsdb-server.pid \
                   --unixctl={d}/ovsdb-server.ctl --log-file={d}/ovsdb-server.log --detach {d}/conf.db && \
                 ovs-vsctl --db=unix:{d}/db.sock --no-wait init && \
                 OVS_RUNDIR={d} ovs-vswitchd unix:{d}/db.sock --pidfile={d}/ovs-vswitchd.pid \
                   --unixctl={d}/ovs-vswitchd.ctl --log-file={d}/ovs-vswitchd.log --detach"
            ),
        );
        let vsctl = format!("ovs-vsctl --db=unix:{d}/db.sock --timeout=30");
        sh(
            &lab.vm,
            &format!(
                "{vsctl} add-br br-int -- set bridge br-int datapath_type=netdev fail_mode=secure \
                   protocols=OpenFlow15 && \
                 {vsctl} add-port br-int 'eth0~' -- set interface 'eth0~' ofport_request={UPLINK_PORT} && \
                 {vsctl} add-port br-int eth0 -- set interface eth0 type=internal \
                   ofport_request={HOST_PORT}"
            ),
        );
        // The uplink carries no addresses; its kernel stack must not see the frames OVS reads
        // (lab facts: the userspace datapath only taps the uplink).
        sh(
            &lab.vm,
            &format!(
                "sysctl -qw 'net.ipv6.conf.eth0~.disable_ipv6=1' && \
                 ip link set 'eth0~' arp off && ip link set 'eth0~' up && \
                 nft add table netdev iso && \
                 nft add chain netdev iso in '{{ type filter hook ingress device \"eth0~\" priority 0; policy drop; }}' && \
                 ethtool -K 'eth0~' tx off >/dev/null && ethtool -K eth0 tx off >/dev/null && \
                 ip addr add {VM4}/24 dev eth0 && ip addr add {VM6}/64 dev eth0 nodad && \
                 ip link set eth0 up && ip link set lo up"
            ),
        );
        sh(
            &lab.ext,
            &format!(
                "ethtool -K ext0 tx off >/dev/null && ip addr add {EXT4}/24 dev ext0 && \
                 ip addr add {EXT6}/64 dev ext0 nodad && ip link set ext0 up && ip link set lo up"
            ),
        );
        let end = Instant::now() + STEP;
        while !lab.mgmt().exists() {
            assert!(Instant::now() < end, "no {}", lab.mgmt().display());
            std::thread::sleep(Duration::from_millis(50));
        }
        lab
    }

    fn mgmt(&self) -> PathBuf {
        self.dir.path().join("br-int.mgmt")
    }

    fn pid(&self, daemon: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(format!("{daemon}.pid")))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// A counter of `/proc/net/snmp` in `ns` (`proto` is the line prefix, e.g. `Tcp`).
    fn snmp(&self, ns: &str, proto: &str, field: &str) -> u64 {
        let text = sh(ns, "cat /proc/net/snmp");
        let prefix = format!("{proto}:");
        let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
        let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
            panic!("no {proto} in /proc/net/snmp: {text}");
        };
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == field)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no {proto} {field} in /proc/net/snmp"))
    }
}

impl RejectLab {
    /// A counter of `/proc/net/snmp6` in `ns`.
    fn snmp6(&self, ns: &str, field: &str) -> u64 {
        let text = sh(ns, "cat /proc/net/snmp6");
        text.lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(n, _)| *n == field)
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/net/snmp6"))
    }
}

impl Drop for RejectLab {
    fn drop(&mut self) {
        for daemon in ["ovs-vswitchd", "ovsdb-server"] {
            let Some(pid) = self.pid(daemon) else { continue };
            let alive = || Path::new(&format!("/proc/{pid}")).exists();
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
        for ns in [&self.vm, &self.ext] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn rule(
    index: i32,
    direction: Direction,
    name: &str,
    from: Vec<Peer>,
    to: Vec<Peer>,
    services: Vec<Service>,
    log: bool,
) -> CompiledRuleInput {
    CompiledRuleInput {
        id: RuleId {
            policy_uid: "uid-annp1".into(),
            direction,
            index,
            services_key: String::new(),
        },
        policy: PolicyRef {
            policy_type: PolicyType::AntreaNetworkPolicy,
            namespace: "vm-ns".into(),
            name: "annp1".into(),
            uid: "uid-annp1".into(),
        },
        rule_name: name.into(),
        direction,
        action: RuleAction::Reject,
        tier_priority: 250,
        policy_priority: 5.0,
        rule_priority: index,
        max_rule_priority: 3,
        from,
        to,
        services: Some(services),
        enable_logging: log,
        log_label: String::new(),
        fqdn: None,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// Waits (bounded) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + STEP;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_peers_get_exactly_one_reply_and_the_audit_log_names_the_rule() {
    let lab = RejectLab::start();
    let switch: Arc<dyn Switch> = Arc::new(
        OfConnection::connect(&lab.mgmt(), pipeline::CONTROLLER_ID, ConnOptions::default())
            .await
            .expect("connect to br-int"),
    );
    switch
        .replace_groups(pipeline::network_policy_groups())
        .await
        .expect("groups");
    let meters = switch
        .replace_meters(pipeline::packet_in_meters(100))
        .await
        .is_ok();
    let interfaces = vec![AttachedInterface {
        name: "eth0".into(),
        ofport: HOST_PORT,
        uplink_name: "eth0~".into(),
        uplink_ofport: UPLINK_PORT,
        ips: vec![ip(VM4), ip(VM6)],
        entity: EntityRef {
            namespace: "vm-ns".into(),
            name: "vm1-2a3b4".into(),
        },
    }];
    let vm_ips = vec![Peer::host(ip(VM4)), Peer::host(ip(VM6))];
    let ext = vec![Peer::host(ip(EXT4)), Peer::host(ip(EXT6))];
    let rules = vec![
        // Ingress: TCP 22 from the outside host (logged), and ICMP (not logged).
        rule(
            0,
            Direction::In,
            "no-ssh",
            ext.clone(),
            vec![Peer::OfPort(HOST_PORT)],
            vec![Service::port(Protocol::Tcp, 22)],
            true,
        ),
        rule(
            1,
            Direction::In,
            "no-ping",
            ext.clone(),
            vec![Peer::OfPort(HOST_PORT)],
            vec![Service::icmp(None, None)],
            false,
        ),
        // Egress: UDP 9999 (logged) and TCP 8080 to the outside host.
        rule(
            2,
            Direction::Out,
            "no-udp",
            vm_ips.clone(),
            ext.clone(),
            vec![Service::port(Protocol::Udp, 9999)],
            true,
        ),
        rule(
            3,
            Direction::Out,
            "no-web",
            vm_ips,
            ext,
            vec![Service::port(Protocol::Tcp, 8080)],
            false,
        ),
    ];
    let compiled = compile(&rules, 1, CompileOptions::default());
    assert!(compiled.skipped.is_empty(), "{:?}", compiled.skipped);
    let mut flows = flowset::desired_flows(
        PipelineOptions { round: 1, meters },
        &[],
        &interfaces,
        &Default::default(),
    );
    flows.extend(compiled.flows.clone());
    switch
        .bundle(flows.into_values().map(FlowMod::add).collect())
        .await
        .expect("install the pipeline and the Reject rules");

    let audit_dir = lab.dir.path().join("log/networkpolicy");
    let audit = AuditLog::open(&audit_dir, &AuditLogging::default()).expect("audit log");
    let (_rules_tx, rules_rx) = watch::channel(Arc::new(compiled.conjunctions.clone()));
    let (_ifaces_tx, ifaces_rx) = watch::channel(Arc::new(interfaces.clone()));
    let stats = PacketInStats::new();
    let ctx = PacketInContext {
        rules: rules_rx,
        interfaces: ifaces_rx,
        audit: Some(audit.clone()),
        packet_in_rate: 100,
        stats: stats.clone(),
    };
    let responder = tokio::spawn(run(switch.clone(), ctx));

    let ext_ns = lab.ext.clone();
    let vm_ns = lab.vm.clone();
    let blocking = |ns: String, script: String| async move {
        tokio::task::spawn_blocking(move || sh_status(&ns, &script))
            .await
            .expect("command task")
    };
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    // 0. Ingress ICMPv6 (neighbour discovery passes the bridge; the echo request is rejected).
    let unreach6_before = lab.snmp6(&lab.ext, "Icmp6InDestUnreachs");
    let out = blocking(ext_ns.clone(), format!("ping -c 1 -W 5 {VM6}")).await;
    assert!(
        text(&out).to_lowercase().contains("prohibited"),
        "ping the VM over IPv6: {}",
        text(&out)
    );

    // 1. Ingress TCP over IPv4: the connection is refused at once, by exactly one reset.
    let segs_before = lab.snmp(&lab.ext, "Tcp", "InSegs");
    let out = blocking(ext_ns.clone(), format!("nc -z -v -w 10 {VM4} 22")).await;
    assert!(
        text(&out).contains("Connection refused"),
        "nc to the VM's port 22: {}",
        text(&out)
    );
    // 2. Ingress TCP over IPv6.
    let out = blocking(ext_ns.clone(), format!("nc -6 -z -v -w 10 {VM6} 22")).await;
    assert!(
        text(&out).contains("Connection refused"),
        "nc -6 to the VM's port 22: {}",
        text(&out)
    );
    // 3. Ingress ICMP: ping learns the host is administratively prohibited, once.
    let unreach_before = lab.snmp(&lab.ext, "Icmp", "InDestUnreachs");
    let out = blocking(ext_ns.clone(), format!("ping -c 1 -W 5 {VM4}")).await;
    assert!(
        text(&out).to_lowercase().contains("prohibited"),
        "ping the VM: {}",
        text(&out)
    );
    // 4. Egress TCP: the VM's connection to the outside is refused by a reply from the bridge.
    let out = blocking(vm_ns.clone(), format!("nc -z -v -w 10 {EXT4} 8080")).await;
    assert!(
        text(&out).contains("Connection refused"),
        "nc from the VM: {}",
        text(&out)
    );
    // 5. Egress UDP: the VM's stack gets one ICMP unreachable.
    let vm_unreach_before = lab.snmp(&lab.vm, "Icmp", "InDestUnreachs");
    let out = blocking(vm_ns.clone(), format!("echo hi | nc -u -w 2 {EXT4} 9999; true")).await;
    let _ = out;
    eventually("the ICMP error in the VM", || {
        lab.snmp(&lab.vm, "Icmp", "InDestUnreachs") > vm_unreach_before
    })
    .await;

    eventually("five Reject replies and the audit lines", || {
        let s = stats.snapshot();
        let log = std::fs::read_to_string(audit.path()).unwrap_or_default();
        s.rejected >= 6 && log.contains(" no-udp ") && log.contains(" no-ssh ")
    })
    .await;
    // Exactly one reply each: one reset per refused connect (no other TCP reached the outside
    // host), one ICMP error per rejected ping and UDP datagram. Late duplicates would only add.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v4_resets = lab.snmp(&lab.ext, "Tcp", "InSegs") - segs_before;
    assert_eq!(
        v4_resets, 2,
        "TCP segments the outside host received (IPv4 and IPv6 resets)"
    );
    assert_eq!(lab.snmp(&lab.ext, "Icmp", "InDestUnreachs") - unreach_before, 1);
    assert_eq!(lab.snmp6(&lab.ext, "Icmp6InDestUnreachs") - unreach6_before, 1);
    assert_eq!(lab.snmp(&lab.vm, "Icmp", "InDestUnreachs") - vm_unreach_before, 1);

    let s = stats.snapshot();
    assert_eq!(
        (s.malformed, s.reject_failed, s.panicked, s.log_failed),
        (0, 0, 0, 0),
        "{s:?}"
    );
    let log = std::fs::read_to_string(audit.path()).expect("np.log");
    let ssh = log
        .lines()
        .find(|l| l.contains(" no-ssh ") && l.contains(&format!(" {EXT4} ")))
        .unwrap_or_else(|| panic!("no IPv4 ssh line in {log}"));
    let fields: Vec<&str> = ssh.split(' ').collect();
    assert_eq!(fields.len(), 16, "{ssh}");
    let priority = compiled
        .conjunctions
        .values()
        .find(|c| c.rule_name == "no-ssh")
        .map(|c| c.priority.to_string())
        .expect("the rule's conjunction");
    assert_eq!(
        &fields[2..9],
        &[
            "AntreaPolicyIngressRule",
            "AntreaNetworkPolicy:vm-ns/annp1",
            "no-ssh",
            "Ingress",
            "Reject",
            priority.as_str(),
            "vm-ns/vm1-2a3b4"
        ],
        "{ssh}"
    );
    assert_eq!(
        &fields[9..],
        &[EXT4, fields[10], VM4, "22", "TCP", "60", "<nil>"],
        "{ssh}"
    );
    let udp = log
        .lines()
        .find(|l| l.contains(" no-udp "))
        .unwrap_or_else(|| panic!("no udp line in {log}"));
    assert!(
        udp.contains(" Egress Reject ")
            && udp.contains(&format!(" {VM4} "))
            && udp.contains(&format!(" {EXT4} 9999 UDP 31 <nil>")),
        "{udp}"
    );

    drop(switch);
    responder.abort();
}
