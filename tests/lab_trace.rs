//! `antrea-vm-agent trace` against real packets: a VM with three Antrea-native policies in
//! three tiers (securityops with Allow, Pass and Drop rules, application with Allow, Drop and
//! Reject rules, baseline with Drop and Reject rules), and a matrix of packets (TCP, UDP and
//! ICMP, IPv4 and IPv6, in and out, from three peer addresses) each traced with the CLI and then
//! sent for real. The verdict of the trace must be what the packet does every time: allowed (a
//! TCP connection, a UDP answer, a ping reply), rejected (connection refused, an ICMP error) or
//! dropped (nothing back). The matrix covers every verdict, every reason (a rule, a Pass to the
//! baseline tier decided there, no rule) and both families.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use support::*;

/// More addresses of the outside host, on the VM's link.
const PEER_REJECTED4: &str = "10.99.0.11";
const PEER_PASSED4: &str = "10.99.0.12";
const PEER_REJECTED6: &str = "fd00:99::11";
const PEER_PASSED6: &str = "fd00:99::12";

/// securityops: HTTPS allowed from the link, everything from .12 passed to the baseline tier,
/// mDNS dropped; out: TCP 9000 rejected.
const ACNP_SECURITYOPS: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: trace-secops}
spec:
  tier: securityops
  priority: 1
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Allow, name: allow-https, ports: [{protocol: TCP, port: 8443}], from: [{ipBlock: {cidr: 10.99.0.0/24}}, {ipBlock: {cidr: 'fd00:99::/64'}}]}
  - {action: Pass, name: pass-12, from: [{ipBlock: {cidr: 10.99.0.12/32}}, {ipBlock: {cidr: 'fd00:99::12/128'}}]}
  - {action: Drop, name: drop-mdns, ports: [{protocol: UDP, port: 5353}], from: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]}
  egress:
  - {action: Reject, name: reject-9000, ports: [{protocol: TCP, port: 9000}], to: [{ipBlock: {cidr: 10.99.0.0/24}}, {ipBlock: {cidr: 'fd00:99::/64'}}]}
";

/// application (the ANNP's default tier).
const ANNP_APPLICATION: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: trace-app, namespace: vm-ns}
spec:
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Reject, name: reject-ssh, ports: [{protocol: TCP, port: 22}], from: [{ipBlock: {cidr: 10.99.0.11/32}}, {ipBlock: {cidr: 'fd00:99::11/128'}}]}
  - {action: Allow, name: allow-ssh, ports: [{protocol: TCP, port: 22}], from: [{ipBlock: {cidr: 10.99.0.0/24}}, {ipBlock: {cidr: 'fd00:99::/64'}}]}
  - {action: Drop, name: drop-8080, ports: [{protocol: TCP, port: 8080}], from: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]}
  - {action: Reject, name: reject-udp-6000, ports: [{protocol: UDP, port: 6000}], from: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]}
  - {action: Drop, name: drop-ping-11, protocols: [{icmp: {}}], from: [{ipBlock: {cidr: 10.99.0.11/32}}, {ipBlock: {cidr: 'fd00:99::11/128'}}]}
  - {action: Drop, name: drop-all-12, from: [{ipBlock: {cidr: 10.99.0.12/32}}, {ipBlock: {cidr: 'fd00:99::12/128'}}]}
  egress:
  - {action: Drop, name: drop-udp-7000, ports: [{protocol: UDP, port: 7000}], to: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]}
  - {action: Reject, name: reject-ping-11, protocols: [{icmp: {}}], to: [{ipBlock: {cidr: 10.99.0.11/32}}, {ipBlock: {cidr: 'fd00:99::11/128'}}]}
  - {action: Allow, name: allow-9100, ports: [{protocol: TCP, port: 9100}], to: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]}
";

/// baseline: what .12 meets after its Pass.
const ACNP_BASELINE: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: trace-baseline}
spec:
  tier: baseline
  priority: 1
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Drop, name: baseline-drop-8080, ports: [{protocol: TCP, port: 8080}], from: [{ipBlock: {cidr: 10.99.0.12/32}}, {ipBlock: {cidr: 'fd00:99::12/128'}}]}
  - {action: Reject, name: baseline-reject-9443, ports: [{protocol: TCP, port: 9443}], from: [{ipBlock: {cidr: 10.99.0.12/32}}, {ipBlock: {cidr: 'fd00:99::12/128'}}]}
";

/// Echo servers on every port of the matrix, both families: a dual-stack TCP listener that
/// accepts, and a UDP socket per address (the first argument, comma-separated) that answers each
/// datagram (bound to the address, so the answer comes from the address the datagram went to).
const SERVER_PY: &str = r#"
import socket, sys, threading
def tcp(port, addrs):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port)); s.listen(64)
    while True:
        c, _ = s.accept(); c.close()
def udp_one(s):
    while True:
        d, a = s.recvfrom(2048); s.sendto(d, a)
def udp(port, addrs):
    for addr in addrs:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, port))
        threading.Thread(target=udp_one, args=(s,), daemon=True).start()
addrs = sys.argv[1].split(",")
for kind, port in (a.split("/") for a in sys.argv[2:]):
    threading.Thread(target=tcp if kind == "tcp" else udp, args=(int(port), addrs), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// One real packet (a TCP connect, a UDP datagram and its answer): prints allowed, rejected
/// (refused or an ICMP error) or dropped (nothing back in 2 s).
const PROBE_PY: &str = r#"
import errno, socket, sys
proto, src, dst, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
s.bind((src, 0)); s.settimeout(2)
refused = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.EACCES, errno.ENETUNREACH, errno.EPERM)
try:
    s.connect((dst, port))
    if proto == "udp":
        s.send(b"trace-probe"); s.recv(100)
    print("allowed")
except socket.timeout:
    print("dropped")
except OSError as e:
    print("rejected" if e.errno in refused else "error %s" % e)
"#;

const PYTHON: &str = "/usr/bin/python3";

/// TCP 8080 from the outside host's IPv6 address skips the rule tables (the application tier
/// drops 8080 from everywhere else).
const BYPASS: &str = "externalNode:\n  policyBypassRules:\n  - {direction: ingress, protocol: tcp, cidr: \"fd00:99::1/128\", port: 8080}\n";

fn policy_dir(lab: &Lab) -> PathBuf {
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    dir
}

fn write_policy(lab: &Lab, file: &str, yaml: &str) {
    let dir = policy_dir(lab);
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write policy");
    std::fs::rename(&tmp, dir.join(file)).expect("move policy in place");
}

fn write_db_external_node(lab: &Lab) {
    let text = format!(
        "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
         metadata: {{name: {NODE_NAME}, namespace: {EN_NAMESPACE}, labels: {{role: db}}}}\n\
         spec: {{interfaces: [{{name: {NIC}, ips: [\"{VM_IP4}\", \"{VM_IP6}\"]}}]}}\n"
    );
    let tmp = lab.dir().join(".en.tmp");
    std::fs::write(&tmp, text).expect("write the ExternalNode file");
    std::fs::rename(&tmp, lab.en_file()).expect("move the ExternalNode file in place");
}

fn api_socket(lab: &Lab) -> PathBuf {
    lab.dir().join("agent-api.sock")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    In,
    Out,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Tcp(u16),
    Udp(u16),
    Icmp,
}

/// One packet of the matrix: `peer` is the outside host's address (the source for `In`, the
/// destination for `Out`).
#[derive(Clone, Copy, Debug)]
struct Case {
    dir: Dir,
    peer: &'static str,
    proto: Proto,
}

impl Case {
    fn local(&self) -> &'static str {
        if self.peer.contains(':') {
            VM_IP6
        } else {
            VM_IP4
        }
    }
}

/// What the trace said.
#[derive(Debug)]
struct Traced {
    verdict: String,
    reason: String,
    decided_by: Option<(String, String)>,
    passed: usize,
    summary: String,
}

fn trace(lab: &Lab, c: &Case) -> Traced {
    let mut args = vec![
        "trace".to_string(),
        "--direction".into(),
        if c.dir == Dir::In { "in" } else { "out" }.into(),
        "--peer".into(),
        c.peer.into(),
        "-o".into(),
        "json".into(),
        "--socket".into(),
        api_socket(lab).display().to_string(),
    ];
    match c.proto {
        Proto::Tcp(p) => args.extend(["--protocol".into(), "tcp".into(), "--port".into(), p.to_string()]),
        Proto::Udp(p) => args.extend(["--protocol".into(), "udp".into(), "--port".into(), p.to_string()]),
        Proto::Icmp => args.extend(["--protocol".into(), "icmp".into()]),
    }
    let out = std::process::Command::new(agent_binary())
        .args(&args)
        .output()
        .expect("run trace");
    assert!(
        out.status.success(),
        "trace {c:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("trace -o json is JSON");
    Traced {
        verdict: v["verdict"].as_str().unwrap_or_default().to_string(),
        reason: v["reason"].as_str().unwrap_or_default().to_string(),
        decided_by: v["decidedBy"]["rule"].as_str().map(|r| {
            (
                v["decidedBy"]["policy"].as_str().unwrap_or_default().to_string(),
                r.to_string(),
            )
        }),
        passed: v["passedBy"].as_array().map_or(0, Vec::len),
        summary: v["summary"].as_str().unwrap_or_default().to_string(),
    }
}

/// What a real packet does: `Allowed`, `Rejected` or `Dropped` (the trace's words).
fn real(lab: &Lab, c: &Case) -> String {
    let (src, dst) = match c.dir {
        Dir::In => (c.peer, c.local()),
        Dir::Out => (c.local(), c.peer),
    };
    let run = |cmd: &str| match c.dir {
        Dir::In => lab.ext(cmd),
        Dir::Out => lab.vm(cmd),
    };
    let word = match c.proto {
        Proto::Tcp(p) | Proto::Udp(p) => {
            let proto = if matches!(c.proto, Proto::Tcp(_)) {
                "tcp"
            } else {
                "udp"
            };
            let out = run(&format!(
                "{PYTHON} {} {proto} {src} {dst} {p}",
                lab.dir().join("probe.py").display()
            ));
            out.stdout_text().trim().to_string()
        }
        Proto::Icmp => {
            let out = run(&format!("ping -n -c 1 -W 2 -I {src} {dst}")).stdout_text();
            if out.contains(" 1 received") {
                "allowed".into()
            } else if out.contains("errors") {
                "rejected".into()
            } else {
                "dropped".into()
            }
        }
    };
    match word.as_str() {
        "allowed" => "Allowed".into(),
        "rejected" => "Rejected".into(),
        "dropped" => "Dropped".into(),
        other => panic!("probe {c:?}: {other}"),
    }
}

/// How many times a packet the trace lets through (or rejects) is sent before its silence counts.
const ATTEMPTS: usize = 3;

/// What a real packet does, sent again (up to [`ATTEMPTS`] times) while it reads as `Dropped`
/// and the trace says otherwise: under load a lost reply or a slow IPv6 neighbour discovery
/// looks like a drop, whereas a real drop stays dropped every time and a real allow or reject
/// needs one answer. Only silence is retried, so a disagreement still fails the test.
fn real_settled(lab: &Lab, c: &Case, traced: &str) -> String {
    let mut r = real(lab, c);
    for _ in 1..ATTEMPTS {
        if r != "Dropped" || traced == "Dropped" {
            break;
        }
        r = real(lab, c);
    }
    r
}

fn start_server(lab: &Lab, ns: &str, addrs: &[&str], ports: &[&str]) -> Child {
    let script = lab.dir().join("server.py");
    let mut c = lab.ns_command(ns, PYTHON);
    c.arg(&script).arg(addrs.join(",")).args(ports);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("start the echo server");
    let mut line = String::new();
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("server stdout");
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the server's first line");
    assert_eq!(line.trim(), "ready", "the echo server in {ns} did not start");
    child
}

fn matrix() -> Vec<Case> {
    let mut cases = Vec::new();
    for peer in [
        EXT_IP4,
        PEER_REJECTED4,
        PEER_PASSED4,
        EXT_IP6,
        PEER_REJECTED6,
        PEER_PASSED6,
    ] {
        for proto in [
            Proto::Tcp(22),
            Proto::Tcp(8080),
            Proto::Tcp(8443),
            Proto::Tcp(9443),
            Proto::Tcp(7777),
            Proto::Udp(6000),
            Proto::Udp(5353),
            Proto::Udp(7777),
            Proto::Icmp,
        ] {
            cases.push(Case {
                dir: Dir::In,
                peer,
                proto,
            });
        }
    }
    for peer in [EXT_IP4, PEER_REJECTED4, EXT_IP6, PEER_REJECTED6] {
        for proto in [
            Proto::Tcp(9000),
            Proto::Tcp(9100),
            Proto::Tcp(9200),
            Proto::Udp(7000),
            Proto::Udp(7001),
            Proto::Icmp,
        ] {
            cases.push(Case {
                dir: Dir::Out,
                peer,
                proto,
            });
        }
    }
    cases
}

#[test]
fn trace_agrees_with_real_packets() {
    let lab = Lab::new();
    lab.ext_ok(&format!(
        "ip addr add {PEER_REJECTED4}/24 dev {EXT_NIC} && ip addr add {PEER_PASSED4}/24 dev {EXT_NIC} && \
         ip -6 addr add {PEER_REJECTED6}/64 dev {EXT_NIC} nodad && ip -6 addr add {PEER_PASSED6}/64 dev {EXT_NIC} nodad"
    ));
    write_policy(&lab, "secops.yaml", ACNP_SECURITYOPS);
    write_policy(&lab, "app.yaml", ANNP_APPLICATION);
    write_policy(&lab, "baseline.yaml", ACNP_BASELINE);
    std::fs::write(lab.dir().join("server.py"), SERVER_PY).expect("write server.py");
    std::fs::write(lab.dir().join("probe.py"), PROBE_PY).expect("write probe.py");
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nagentAPI:\n  socket: {}\n{BYPASS}",
        policy_dir(&lab).display(),
        api_socket(&lab).display()
    ));
    write_db_external_node(&lab);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "attached", || {
        lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
    });
    // Every rule installed: the baseline's Reject is the last to be seen from .12.
    let probe = Case {
        dir: Dir::In,
        peer: PEER_PASSED6,
        proto: Proto::Tcp(9443),
    };
    let app = Case {
        dir: Dir::In,
        peer: PEER_REJECTED4,
        proto: Proto::Icmp,
    };
    wait_until(Duration::from_secs(30), "the policies installed", || {
        let t = trace(&lab, &probe);
        let a = trace(&lab, &app);
        t.verdict == "Rejected" && t.passed == 1 && a.verdict == "Dropped"
    });
    let mut servers = vec![
        start_server(
            &lab,
            lab.vm_ns(),
            &[VM_IP4, VM_IP6],
            &[
                "tcp/22", "tcp/8080", "tcp/8443", "tcp/9443", "tcp/7777", "udp/6000", "udp/5353", "udp/7777",
            ],
        ),
        start_server(
            &lab,
            lab.ext_ns(),
            &[
                EXT_IP4,
                PEER_REJECTED4,
                PEER_PASSED4,
                EXT_IP6,
                PEER_REJECTED6,
                PEER_PASSED6,
            ],
            &["tcp/9000", "tcp/9100", "tcp/9200", "udp/7000", "udp/7001"],
        ),
    ];

    let cases = matrix();
    assert!(cases.len() >= 50, "the matrix has {} packets", cases.len());
    let mut report = Vec::new();
    let mut disagreements = Vec::new();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for c in &cases {
        let t = trace(&lab, c);
        let r = real_settled(&lab, c, &t.verdict);
        *seen.entry(format!("{} {}", t.verdict, t.reason)).or_default() += 1;
        let line = format!(
            "{:?} {:<12} {:<10} trace {:<8} ({:<6} {:?}) real {r}",
            c.dir,
            c.peer,
            format!("{:?}", c.proto),
            t.verdict,
            t.reason,
            t.decided_by,
        );
        if t.verdict != r {
            disagreements.push(format!("{line}\n    {}", t.summary));
        }
        report.push(line);
    }
    println!("{}", report.join("\n"));
    println!("verdicts and reasons: {seen:?}");
    assert!(
        disagreements.is_empty(),
        "trace and real packets disagree on {} of {} packets:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n")
    );
    // The matrix exercised every verdict and reason it is meant to.
    for want in [
        "Allowed rule",
        "Allowed noRule",
        "Allowed bypass",
        "Dropped rule",
        "Rejected rule",
    ] {
        assert!(
            seen.get(want).is_some_and(|n| *n > 0),
            "no packet gave {want}: {seen:?}"
        );
    }

    // Spot checks of the attribution: a Pass then the baseline's Drop, a Pass then nothing,
    // an application-tier Reject, an egress Reject in securityops.
    let t = trace(
        &lab,
        &Case {
            dir: Dir::In,
            peer: PEER_PASSED4,
            proto: Proto::Tcp(8080),
        },
    );
    assert_eq!(
        (t.verdict.as_str(), t.decided_by.clone(), t.passed),
        (
            "Dropped",
            Some(("trace-baseline".to_string(), "baseline-drop-8080".to_string())),
            1
        ),
        "{}",
        t.summary
    );
    let t = trace(
        &lab,
        &Case {
            dir: Dir::In,
            peer: PEER_PASSED6,
            proto: Proto::Udp(7777),
        },
    );
    assert_eq!(
        (t.verdict.as_str(), t.reason.as_str(), t.passed),
        ("Allowed", "noRule", 1),
        "{}",
        t.summary
    );
    let t = trace(
        &lab,
        &Case {
            dir: Dir::In,
            peer: PEER_REJECTED6,
            proto: Proto::Tcp(22),
        },
    );
    assert_eq!(
        t.decided_by,
        Some(("trace-app".to_string(), "reject-ssh".to_string())),
        "{}",
        t.summary
    );
    assert!(t.summary.contains("tier application (250)"), "{}", t.summary);
    let t = trace(
        &lab,
        &Case {
            dir: Dir::Out,
            peer: EXT_IP4,
            proto: Proto::Tcp(9000),
        },
    );
    assert_eq!(
        (t.verdict.as_str(), t.decided_by.clone()),
        (
            "Rejected",
            Some(("trace-secops".to_string(), "reject-9000".to_string()))
        ),
        "{}",
        t.summary
    );

    // The text form: the answer in words first, the path below.
    let out = std::process::Command::new(agent_binary())
        .args([
            "trace",
            "--direction",
            "in",
            "--peer",
            PEER_REJECTED4,
            "--protocol",
            "tcp",
            "--port",
            "22",
            "--socket",
        ])
        .arg(api_socket(&lab))
        .output()
        .expect("run trace");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        text.starts_with(
            "Rejected by rule \"reject-ssh\" (Reject, ingress) of AntreaNetworkPolicy vm-ns/trace-app"
        ),
        "{text}"
    );
    assert!(text.contains("AntreaPolicyIngressRule"), "{text}");
    // A bad description is refused with the agent's reason.
    let out = std::process::Command::new(agent_binary())
        .args([
            "trace",
            "--direction",
            "in",
            "--peer",
            EXT_IP4,
            "--protocol",
            "udp",
            "--socket",
        ])
        .arg(api_socket(&lab))
        .output()
        .expect("run trace");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("udp needs a destination port"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    agent.stop();
}
