//! FQDN egress rules on real traffic: a real DNS server (dnsmasq) in the outside host, the VM
//! resolving names and connecting at once. The agent pauses each DNS response in OVS until the
//! flows for its addresses are committed, so the first connection never races them.
//!
//! The race test resolves 1,000 fresh names (each with an address of its own, so every answer
//! needs new flows) and connects to each at once with a 700 ms connect timeout, shorter than the
//! first SYN retransmission: one SYN lost to a race fails the test. About 12 s on the lab
//! machine; `FQDN_RACE_ITERATIONS` changes the count. (Resuming the response before the commit
//! instead fails 199 of 200 first connections in this test.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};

use support::*;

const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// Default-deny egress, DNS to the outside host allowed, and `*.allowed.test` allowed.
const ALLOW_POLICY: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: uid-fqdn, uid: uid-fqdn}
sourceRef: {type: AntreaClusterNetworkPolicy, name: fqdn-allow, uid: uid-fqdn}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
- direction: Out
  to: {ipBlocks: [{cidr: 10.99.0.1/32}, {cidr: \"fd00:99::1/128\"}]}
  services: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}, {protocol: UDP, port: 5353}]
  action: Allow
  priority: 0
- direction: Out
  to: {fqdns: [\"*.allowed.test\"]}
  action: Allow
  priority: 1
- direction: Out
  to: {ipBlocks: [{cidr: 0.0.0.0/0}, {cidr: \"::/0\"}]}
  action: Drop
  priority: 2
";

/// Drop to one name that the allow rule's wildcard also selects, at a higher precedence.
const DROP_POLICY: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: uid-fqdn-drop, uid: uid-fqdn-drop}
sourceRef: {type: AntreaClusterNetworkPolicy, name: fqdn-drop, uid: uid-fqdn-drop}
appliedToGroups: [atg-vm1]
priority: 1
tierPriority: 250
rules:
- direction: Out
  to: {fqdns: [\"bad.allowed.test\"]}
  action: Drop
  priority: 0
";

const ECHO_PORT: u16 = 8080;
const METRICS_PORT: u16 = 10391;

fn iterations() -> usize {
    std::env::var("FQDN_RACE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The address dnsmasq gives name `i` (IPv4 and IPv6).
fn addr4(i: usize) -> String {
    format!("10.100.{}.{}", i / 250, i % 250 + 1)
}
fn addr6(i: usize) -> String {
    format!("fd00:100::{:x}", i + 1)
}

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

/// Indexes of the special names (beyond the race test's).
const SHORT: usize = 5000;
const BAD: usize = 5001;
const BLOCKED: usize = 5002;
const KEEP: usize = 5003;
const EXACT: usize = 5004;
/// `many.allowed.test`'s addresses: more than a 512-byte UDP answer holds.
const MANY_FIRST: usize = 7500;
const MANY: usize = 60;

/// Allow to a name that only an exact selector names (no wildcard of the allow policy selects
/// it), in the same tier as the default deny and before it.
const EXACT_POLICY: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: uid-fqdn-exact, uid: uid-fqdn-exact}
sourceRef: {type: AntreaClusterNetworkPolicy, name: fqdn-exact, uid: uid-fqdn-exact}
appliedToGroups: [atg-vm1]
priority: 1
tierPriority: 250
rules:
- direction: Out
  to: {fqdns: [\"exact.test\"]}
  action: Allow
  priority: 0
";

/// The records dnsmasq serves: names `n<i>.allowed.test` (TTL 60), `short.allowed.test`
/// (TTL 2), `bad.allowed.test`, `keep.allowed.test`, `blocked.test` and `exact.test`, A and AAAA.
fn dns_records(names: usize) -> String {
    let mut conf = String::new();
    for i in 0..names {
        conf.push_str(&format!(
            "host-record=n{i}.allowed.test,{},{},60\n",
            addr4(i),
            addr6(i)
        ));
    }
    for (name, i, ttl) in [
        ("short.allowed.test", SHORT, 2),
        ("bad.allowed.test", BAD, 60),
        ("blocked.test", BLOCKED, 60),
        ("keep.allowed.test", KEEP, 600),
        ("exact.test", EXACT, 60),
    ] {
        conf.push_str(&format!("host-record={name},{},{},{ttl}\n", addr4(i), addr6(i)));
    }
    conf
}

/// An echo server on every address of the outside host (10.100.0.0/16 and fd00:100::/64 are
/// local there), port [`ECHO_PORT`]; one dual-stack listener.
fn start_echo(lab: &Lab) {
    lab.ext_ok("ip route add local 10.100.0.0/16 dev lo && ip -6 route add local fd00:100::/64 dev lo");
    let addr: SocketAddr = format!("[::]:{ECHO_PORT}").parse().expect("address");
    let (tx, rx) = std::sync::mpsc::channel();
    in_netns(lab.ext_ns(), move || {
        let listener = TcpListener::bind(addr).expect("bind the echo listener");
        let _ = tx.send(());
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 512];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("echo listener up");
}

/// Builds a query for `name`.
fn query(name: &str, qtype: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(
        Name::from_str(&format!("{name}.")).expect("name"),
        qtype,
    ));
    m.to_vec().expect("encode the query")
}

/// The first address of a response.
fn first_ip(response: &[u8]) -> Option<IpAddr> {
    let m = Message::from_vec(response).ok()?;
    m.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        RData::AAAA(a) => Some(IpAddr::V6(a.0)),
        _ => None,
    })
}

/// Every address of a response, and whether it was truncated (TC).
fn all_ips(response: &[u8]) -> (Vec<IpAddr>, bool) {
    let Ok(m) = Message::from_vec(response) else {
        return (Vec::new(), false);
    };
    let ips = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect();
    (ips, m.metadata.truncation)
}

/// Resolves `name` over UDP (or TCP) from the current namespace.
fn resolve(server: SocketAddr, name: &str, qtype: RecordType, tcp: bool) -> Result<IpAddr, String> {
    let response = exchange(server, name, qtype, tcp)?;
    first_ip(&response).ok_or_else(|| format!("no address for {name}"))
}

/// Asks `server` for `name` over UDP (or TCP) from the current namespace; the raw response.
fn exchange(server: SocketAddr, name: &str, qtype: RecordType, tcp: bool) -> Result<Vec<u8>, String> {
    let id: u16 = rand_id();
    let q = query(name, qtype, id);
    let response = if tcp {
        let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(2))
            .map_err(|e| format!("DNS TCP: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        s.write_all(&framed).map_err(|e| e.to_string())?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).map_err(|e| format!("DNS TCP read: {e}"))?;
        let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut body)
            .map_err(|e| format!("DNS TCP read: {e}"))?;
        body
    } else {
        let bind = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
        let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        s.send_to(&q, server).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 1500];
        let (n, _) = s
            .recv_from(&mut buf)
            .map_err(|e| format!("DNS answer for {name}: {e}"))?;
        buf[..n].to_vec()
    };
    Ok(response)
}

fn rand_id() -> u16 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7)
        & 0xffff) as u16
}

/// A TCP connection with a short timeout (shorter than the first SYN retransmission, so a SYN
/// dropped by a race shows as a failure) and one echo round trip.
fn connect(ip: IpAddr) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::new(ip, ECHO_PORT), Duration::from_millis(700))
        .map_err(|e| format!("connect {ip}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    echo(&mut s).map(|()| s)
}

fn echo(s: &mut TcpStream) -> Result<(), String> {
    s.write_all(b"ping").map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).map_err(|e| format!("echo: {e}"))?;
    Ok(())
}

const DNS4: &str = "10.99.0.1:53";

fn dns4() -> SocketAddr {
    DNS4.parse().expect("address")
}

/// Resolves then connects at once, in the VM.
fn resolve_connect(lab: &Lab, name: &str, qtype: RecordType, tcp: bool) -> Result<IpAddr, String> {
    let name = name.to_string();
    in_netns(lab.vm_ns(), move || {
        let ip = resolve(dns4(), &name, qtype, tcp)?;
        connect(ip).map(|_| ip)
    })
    .join()
    .expect("client thread")
}

fn connect_from_vm(lab: &Lab, ip: IpAddr) -> Result<(), String> {
    in_netns(lab.vm_ns(), move || connect(ip).map(|_| ()))
        .join()
        .expect("client thread")
}

fn api_socket(lab: &Lab) -> PathBuf {
    lab.dir().join("agent-api.sock")
}

/// `antrea-vm-agent get fqdncache ARGS` through the agent API socket; stdout.
fn get_fqdncache(lab: &Lab, args: &[&str]) -> String {
    let socket = api_socket(lab).display().to_string();
    let mut all = vec!["get", "fqdncache"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--socket", &socket]);
    let out = std::process::Command::new(agent_binary())
        .args(&all)
        .output()
        .expect("run antrea-vm-agent get fqdncache");
    assert!(out.status.success(), "get fqdncache: {}", out.describe());
    out.stdout_text()
}

fn scrape(lab: &Lab) -> String {
    lab.vm_ok(&format!(
        "printf 'GET /metrics HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
    ))
}

fn metric(lab: &Lab, line_start: &str) -> u64 {
    scrape(lab)
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn fqdn_flow_count(lab: &Lab, ip: &str) -> usize {
    lab.dump_flows()
        .iter()
        .filter(|f| {
            f.contains("ct_state=+trk")
                && (f.contains(&format!("nw_dst={ip} ")) || f.contains(&format!("ipv6_dst={ip} ")))
        })
        .count()
}

/// The lab with eth0 attached, the policies in place, dnsmasq (the VM's resolver in its
/// `/etc/resolv.conf`) and the echo server running, and routes to the name addresses through
/// the outside host.
fn fqdn_lab(names: usize) -> (Lab, AgentProcess, Dnsmasq, PathBuf) {
    fqdn_lab_with(names, false, "", "")
}

/// [`fqdn_lab`] with dnsmasq's query log on or off, `extra_config` appended to the agent's
/// configuration and `extra_dns` to dnsmasq's.
fn fqdn_lab_with(
    names: usize,
    log_queries: bool,
    extra_config: &str,
    extra_dns: &str,
) -> (Lab, AgentProcess, Dnsmasq, PathBuf) {
    let lab = Lab::new();
    write_policy(&lab, "00-atg.yaml", APPLIED_TO);
    write_policy(&lab, "10-allow.yaml", ALLOW_POLICY);
    lab.set_vm_resolv_conf(&format!("nameserver {EXT_IP4}\n"));
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nmetricsServer:\n  bindAddress: \"127.0.0.1:{METRICS_PORT}\"\n\
         agentAPI:\n  socket: {}\n{extra_config}",
        policy_dir(&lab).display(),
        api_socket(&lab).display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(30),
        "attached and the FQDN interception installed",
        || {
            lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
                && lab.try_dump_flows().is_ok_and(|f| {
                    f.iter()
                        .any(|l| l.contains("reg1=") && l.contains("conjunction(1,2/2)"))
                })
        },
    );
    lab.vm_ok(&format!(
        "ip route add 10.100.0.0/16 via {EXT_IP4} dev {NIC} && ip -6 route add fd00:100::/64 via {EXT_IP6} dev {NIC}"
    ));
    let dns = Dnsmasq::start(
        &lab,
        &format!("{}{extra_dns}", dns_records(names)),
        53,
        log_queries,
        &[],
    );
    start_echo(&lab);
    (lab, agent, dns, config)
}

#[test]
fn fresh_names_connect_at_once_every_time_and_other_names_stay_blocked() {
    let n = iterations();
    let (lab, mut agent, _dns, config) = fqdn_lab(n);
    // The outside host is reachable only through an allowed name.
    assert!(
        connect_from_vm(&lab, addr4(BLOCKED).parse().unwrap()).is_err(),
        "default deny"
    );

    // Zero races, made deterministic: OVS's revalidators are paused for the whole run, so every
    // datapath flow cached before a commit stays as it was (as a late revalidation leaves it).
    // The default-deny connection above left a drop megaflow whose destination is wildcarded,
    // so it covers the fresh names' addresses too: only the agent's eviction of the cached
    // flows toward each new address, after its commit and before the answer's release, lets
    // the first SYN reach the new flows. (Without it, every first connection here fails.)
    let appctl = |args: &[&str]| {
        let out = lab.ovs_appctl(args);
        assert!(out.status.success(), "ovs-appctl {args:?}: {}", out.describe());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    appctl(&["revalidator/pause"]);
    let covering = appctl(&["dpctl/dump-flows", &format!("filter=ip,nw_dst={}", addr4(0))]);
    assert!(
        covering.lines().any(|l| l.ends_with("actions:drop")),
        "precondition: a cached drop flow covers {}:\n{covering}",
        addr4(0)
    );

    // Every fresh name resolves and its first connection succeeds at once.
    let started = std::time::Instant::now();
    let failures: Vec<String> = in_netns(lab.vm_ns(), move || {
        (0..n)
            .filter_map(|i| {
                let name = format!("n{i}.allowed.test");
                match resolve(dns4(), &name, RecordType::A, false).and_then(connect) {
                    Ok(_) => None,
                    Err(e) => Some(format!("{name}: {e}")),
                }
            })
            .collect()
    })
    .join()
    .expect("client thread");
    eprintln!("{n} resolve+connect in {:?}", started.elapsed());
    appctl(&["revalidator/resume"]);
    assert!(
        failures.is_empty(),
        "{} of {n} first connections failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );

    // Flows deleted by hand: the installer repairs its own and the FQDN controller puts back its
    // address flows, so a cached name connects again without a new DNS answer.
    lab.vm_ok(&format!("ovs-ofctl del-flows {}", lab.mgmt_sock().display()));
    wait_until(Duration::from_secs(10), "the FQDN address flow put back", || {
        fqdn_flow_count(&lab, &addr4(0)) == 1
    });
    wait_until(
        Duration::from_secs(10),
        "a cached name connecting after del-flows",
        || connect_from_vm(&lab, addr4(0).parse().unwrap()).is_ok(),
    );

    // IPv6 through AAAA, and a DNS answer over TCP.
    assert_eq!(
        resolve_connect(&lab, "keep.allowed.test", RecordType::AAAA, false),
        Ok(addr6(KEEP).parse().unwrap())
    );
    assert_eq!(
        resolve_connect(&lab, "n0.allowed.test", RecordType::AAAA, true),
        Ok(addr6(0).parse().unwrap()),
        "AAAA over TCP"
    );
    assert_eq!(
        resolve_connect(&lab, "keep.allowed.test", RecordType::A, true),
        Ok(addr4(KEEP).parse().unwrap()),
        "A over TCP"
    );

    // A name no rule selects stays blocked, although it resolves.
    let blocked = resolve_connect(&lab, "blocked.test", RecordType::A, false);
    assert!(
        blocked.is_err_and(|e| e.contains("connect")),
        "blocked.test resolves but stays blocked"
    );
    assert_eq!(fqdn_flow_count(&lab, &addr4(BLOCKED)), 0);

    // A Drop-to-FQDN rule added while its name is cached (the allow rule's wildcard selected it)
    // drops the cached address from the rule's first moment: its address flow comes in the
    // rule's own bundle. Every dump showing the rule shows that flow, and the first connection
    // after it appears (no new DNS query) is dropped.
    let bad_ip = addr4(BAD);
    assert_eq!(
        resolve_connect(&lab, "bad.allowed.test", RecordType::A, false),
        Ok(bad_ip.parse().unwrap()),
        "allowed by the wildcard before the drop rule"
    );
    let rule_flows = |flows: &[String]| {
        flows
            .iter()
            .filter(|f| f.contains("conj_id=") && !f.contains("priority=64991"))
            .count()
    };
    let before = rule_flows(&lab.dump_flows());
    let clause_flows = |flows: &[String]| {
        flows
            .iter()
            .filter(|f| f.contains("ct_state=+trk") && f.contains(&format!("nw_dst={bad_ip} ")))
            .count()
    };
    assert_eq!(
        clause_flows(&lab.dump_flows()),
        1,
        "the allow rule's address flow"
    );
    write_policy(&lab, "20-drop.yaml", DROP_POLICY);
    let mut dumps = 0;
    wait_until(Duration::from_secs(20), "the drop rule's flows", || {
        let Ok(flows) = lab.try_dump_flows() else {
            return false;
        };
        dumps += 1;
        if rule_flows(&flows) <= before {
            return false;
        }
        assert_eq!(
            clause_flows(&flows),
            2,
            "the drop rule is in the switch without its cached address: {flows:#?}"
        );
        true
    });
    assert!(
        connect_from_vm(&lab, bad_ip.parse().unwrap()).is_err(),
        "the first connection to the cached address after the drop rule is dropped"
    );
    eprintln!("the drop rule appeared after {dumps} dumps");
    let bad = resolve_connect(&lab, "bad.allowed.test", RecordType::A, false);
    assert!(
        bad.is_err_and(|e| e.contains("connect")),
        "bad.allowed.test is dropped"
    );
    assert!(
        resolve_connect(&lab, "n1.allowed.test", RecordType::A, false).is_ok(),
        "others still pass"
    );

    // A malformed answer is passed through and counted.
    let before = metric(
        &lab,
        "antrea_vm_agent_fqdn_dns_responses_total{outcome=\"malformed\"}",
    );
    let garbage_server: SocketAddr = format!("[{EXT_IP6}]:53").parse().unwrap();
    in_netns(lab.ext_ns(), move || {
        let s = UdpSocket::bind(garbage_server).expect("bind the fake DNS server");
        let mut buf = [0u8; 512];
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            // The query's id, QR set, one answer claimed and nothing after it.
            let mut reply = buf[..2.min(n)].to_vec();
            reply.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 0xc0]);
            let _ = s.send_to(&reply, from);
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let got = in_netns(lab.vm_ns(), move || {
        let s = UdpSocket::bind("[::]:0").expect("bind");
        s.set_read_timeout(Some(Duration::from_secs(3))).expect("timeout");
        s.send_to(&query("x.allowed.test", RecordType::A, 1), garbage_server)
            .expect("send");
        let mut buf = [0u8; 512];
        s.recv_from(&mut buf).map(|(n, _)| n)
    })
    .join()
    .expect("client thread");
    assert_eq!(got.ok(), Some(13), "the malformed answer reached the VM");
    wait_until(Duration::from_secs(5), "the malformed answer counted", || {
        metric(
            &lab,
            "antrea_vm_agent_fqdn_dns_responses_total{outcome=\"malformed\"}",
        ) > before
    });
    assert!(metric(&lab, "antrea_agent_fqdn_cache_size") >= n as u64);
    // The fresh names' stale datapath flows were evicted through ovs-vswitchd's control socket,
    // never in vain.
    assert!(metric(&lab, "antrea_vm_agent_fqdn_datapath_flows_evicted_total") >= 1);
    assert_eq!(
        metric(&lab, "antrea_vm_agent_fqdn_datapath_evict_failures_total"),
        0
    );
    // The DNS packet-ins went to the FQDN controller's connection only (its own controller id):
    // the flow installer's connection, which handles Reject and audit packet-ins, got none.
    assert!(
        metric(
            &lab,
            "antrea_vm_agent_fqdn_dns_responses_total{outcome=\"received\"}"
        ) > n as u64
    );
    let page = scrape(&lab);
    assert!(
        page.contains("antrea_vm_agent_packet_ins_total{outcome=\"notNetworkPolicy\"} 0\n"),
        "DNS packet-ins seen by the flow installer: {}",
        page.lines()
            .filter(|l| l.starts_with("antrea_vm_agent_packet_ins_total"))
            .collect::<Vec<_>>()
            .join("; ")
    );

    // `get fqdncache`: antctl's columns, filtered by a name or wildcard.
    let table = get_fqdncache(&lab, &["keep.allowed.test"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("FQDN") && lines[0].contains("ADDRESS") && lines[0].contains("EXPIRATION TIME"),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "an IPv4 and an IPv6 row: {table}");
    assert!(
        table.contains(&addr4(KEEP)) && table.contains(&addr6(KEEP)),
        "{table}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&get_fqdncache(&lab, &["*.allowed.test", "-o", "json"])).expect("JSON");
    assert!(json.as_array().is_some_and(|a| a.len() > n), "{json}");
    assert!(
        !get_fqdncache(&lab, &[]).contains("blocked.test"),
        "names no rule selects are not cached"
    );

    // SIGKILL and restart: a cached, unexpired name keeps working without a new DNS query.
    wait_until(Duration::from_secs(5), "the cache saved", || {
        std::fs::read_to_string(lab.state_dir().join("fqdn-cache.json"))
            .is_ok_and(|t| t.contains("keep.allowed.test"))
    });
    agent.kill_hard();
    let agent2 = lab.start_agent(&config);
    wait_until(
        Duration::from_secs(30),
        "the restarted agent serving metrics",
        || {
            lab.vm(&format!("nc -z 127.0.0.1 {METRICS_PORT}"))
                .status
                .success()
        },
    );
    // Past the first sync and the FQDN controller's reconcile.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        connect_from_vm(&lab, addr4(KEEP).parse().unwrap()),
        Ok(()),
        "cached name allowed after restart"
    );
    assert_eq!(
        connect_from_vm(&lab, addr6(KEEP).parse().unwrap()),
        Ok(()),
        "and its IPv6 address"
    );
    assert!(
        connect_from_vm(&lab, addr4(BLOCKED).parse().unwrap()).is_err(),
        "still default deny"
    );
    drop(agent2);
}

/// Opens a connection to `ip` from the VM every 200 ms for `duration`; the failures.
fn keep_connecting(lab: &Lab, ip: IpAddr, duration: Duration) -> Vec<String> {
    in_netns(lab.vm_ns(), move || {
        let until = std::time::Instant::now() + duration;
        let mut failures = Vec::new();
        while std::time::Instant::now() < until {
            if let Err(e) = connect(ip) {
                failures.push(e);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        failures
    })
    .join()
    .expect("client thread")
}

#[test]
fn names_in_use_are_asked_again_before_they_expire_and_leave_once_dns_stops_answering() {
    let (lab, _agent, dns, _config) = fqdn_lab_with(1, true, "", "");
    let ip: IpAddr = addr4(SHORT).parse().unwrap();
    // Resolve once (TTL 2 s) and keep the connection open.
    let mut conn = in_netns(lab.vm_ns(), move || {
        let ip = resolve(dns4(), "short.allowed.test", RecordType::A, false)?;
        connect(ip)
    })
    .join()
    .expect("client thread")
    .expect("first connection");
    assert_eq!(fqdn_flow_count(&lab, &ip.to_string()), 1);

    // The VM never asks again, yet for four TTLs every new connection gets through: the agent
    // re-resolves the name (at the VM's resolver, from its resolv.conf) before each expiry.
    let failures = keep_connecting(&lab, ip, Duration::from_secs(8));
    assert!(
        failures.is_empty(),
        "connections failed across expiries: {failures:?}"
    );
    let asked = dns.queries("A", "short.allowed.test");
    assert!(
        asked >= 5,
        "1 query from the VM and at least 4 re-queries, dnsmasq saw {asked}"
    );
    assert!(
        dns.queries("AAAA", "short.allowed.test") >= 4,
        "AAAA asked again too"
    );
    let answered = metric(&lab, "antrea_vm_agent_fqdn_requeries_total{outcome=\"answered\"}");
    assert!(answered >= 4, "re-queries answered: {answered}");
    // The agent's own answers come from port 53 through the VM's interface: intercepted and
    // held like the VM's (two per re-query, A and AAAA), without deadlocking the agent.
    let received = metric(
        &lab,
        "antrea_vm_agent_fqdn_dns_responses_total{outcome=\"received\"}",
    );
    assert!(
        received > answered,
        "intercepted {received}, re-queries answered {answered}"
    );
    assert_eq!(
        metric(&lab, "antrea_vm_agent_fqdn_requeries_total{outcome=\"failed\"}"),
        0
    );

    // DNS stops answering: the re-queries fail, the name expires and its flow goes, while the
    // established connection keeps flowing (`-new+est`).
    drop(dns);
    wait_until(
        Duration::from_secs(15),
        "the expired address's flow removed",
        || fqdn_flow_count(&lab, &ip.to_string()) == 0,
    );
    assert_eq!(echo(&mut conn), Ok(()), "the established connection still flows");
    assert!(
        connect_from_vm(&lab, ip).is_err(),
        "a new connection to the expired address is dropped"
    );
    assert!(
        metric(
            &lab,
            "antrea_agent_fqdn_cache_evictions_total{reason=\"expired\"}"
        ) >= 1
    );
    assert!(metric(&lab, "antrea_vm_agent_fqdn_requeries_total{outcome=\"failed\"}") >= 1);
}

#[test]
fn dns_server_override_receives_the_requeries() {
    // The VM's resolver is dnsmasq on port 53; the override is a second dnsmasq on port 5353
    // (its answers are not intercepted: they reach the cache from the re-query worker only).
    let (lab, _agent, vm_dns, _config) =
        fqdn_lab_with(1, true, &format!("dnsServerOverride: \"{EXT_IP4}:5353\"\n"), "");
    let override_dns = Dnsmasq::start(&lab, &dns_records(1), 5353, true, &[]);
    let ip: IpAddr = addr4(SHORT).parse().unwrap();
    assert_eq!(
        resolve_connect(&lab, "short.allowed.test", RecordType::A, false),
        Ok(ip)
    );
    let failures = keep_connecting(&lab, ip, Duration::from_secs(6));
    assert!(
        failures.is_empty(),
        "connections failed across expiries: {failures:?}"
    );
    let at_override = override_dns.queries("A", "short.allowed.test");
    assert!(at_override >= 3, "re-queries at the override: {at_override}");
    assert_eq!(
        vm_dns.queries("A", "short.allowed.test"),
        1,
        "the VM's resolver saw the VM's query only"
    );
    assert_eq!(fqdn_flow_count(&lab, &ip.to_string()), 1);
}

#[test]
fn a_name_a_new_rule_names_exactly_is_resolved_at_once_so_its_first_connection_passes() {
    let (lab, _agent, dns, _config) = fqdn_lab_with(1, true, "", "");
    let ip: IpAddr = addr4(EXACT).parse().unwrap();
    assert!(
        connect_from_vm(&lab, ip).is_err(),
        "exact.test's address is denied before the rule"
    );
    write_policy(&lab, "20-exact.yaml", EXACT_POLICY);
    // The agent asks for the name as soon as the rule is placed (as upstream); the VM never
    // asks, yet its first connection to the name's address passes.
    wait_until(
        Duration::from_secs(15),
        "exact.test's address flow from the agent's own query",
        || fqdn_flow_count(&lab, &ip.to_string()) == 1,
    );
    assert_eq!(connect_from_vm(&lab, ip), Ok(()));
    assert!(dns.queries("A", "exact.test") >= 1, "the agent asked dnsmasq");
    let cache = get_fqdncache(&lab, &[]);
    assert!(
        cache.contains("exact.test") && cache.contains(&ip.to_string()),
        "{cache}"
    );
    // Wildcard selectors are not asked for (there is no name to ask), and nothing else was.
    assert_eq!(dns.queries("A", "n0.allowed.test"), 0);
}

#[test]
fn a_truncated_udp_answer_falls_back_to_tcp_and_the_tcp_answer_is_held_too() {
    // 60 addresses for one name: more than a 512-byte UDP answer holds, so dnsmasq answers UDP
    // truncated (TC) and the whole answer comes over TCP. TTL 2 s, so the agent's re-queries
    // must take the TCP path too to keep the addresses the UDP answer lacks.
    let hosts: String = (0..MANY)
        .map(|k| format!("{} many.allowed.test\n", addr4(MANY_FIRST + k)))
        .collect();
    let hosts_path = std::env::temp_dir().join(format!("lab-fqdn-many-{}.hosts", std::process::id()));
    std::fs::write(&hosts_path, hosts).expect("write the hosts file");
    let (lab, _agent, dns, _config) = fqdn_lab_with(
        1,
        true,
        "",
        &format!("addn-hosts={}\nlocal-ttl=2\n", hosts_path.display()),
    );
    let all: Vec<IpAddr> = (0..MANY)
        .map(|k| addr4(MANY_FIRST + k).parse().unwrap())
        .collect();

    // Over UDP the answer is truncated and lacks addresses.
    let udp = in_netns(lab.vm_ns(), || {
        exchange(dns4(), "many.allowed.test", RecordType::A, false)
    })
    .join()
    .expect("client thread")
    .expect("UDP answer");
    let (udp_ips, truncated) = all_ips(&udp);
    assert!(truncated, "the UDP answer is truncated");
    let missing: Vec<IpAddr> = all.iter().filter(|ip| !udp_ips.contains(ip)).copied().collect();
    assert!(!missing.is_empty(), "the UDP answer lacks some addresses");
    let only_tcp = *missing.last().expect("an address only TCP gives");

    // The VM asks again over TCP: that answer is paused and held like a UDP one, so a
    // connection at once to an address only the TCP answer holds passes.
    let got = in_netns(lab.vm_ns(), move || {
        let response = exchange(dns4(), "many.allowed.test", RecordType::A, true)?;
        let (ips, truncated) = all_ips(&response);
        if truncated || !ips.contains(&only_tcp) {
            return Err(format!(
                "TCP answer: truncated {truncated}, {} addresses",
                ips.len()
            ));
        }
        connect(only_tcp).map(|_| ips.len())
    })
    .join()
    .expect("client thread");
    assert_eq!(
        got,
        Ok(MANY),
        "every address over TCP, the first connection passes"
    );
    assert_eq!(fqdn_flow_count(&lab, &only_tcp.to_string()), 1);

    // The VM never asks again; over four TTLs the agent's re-queries (UDP, truncated, then
    // TCP) keep the TCP-only address allowed.
    let failures = keep_connecting(&lab, only_tcp, Duration::from_secs(8));
    assert!(
        failures.is_empty(),
        "connections failed across expiries: {failures:?}"
    );
    let asked = dns.queries("A", "many.allowed.test");
    assert!(
        asked >= 2 + 2 * 3,
        "2 queries from the VM, then a UDP and a TCP query per re-query: dnsmasq saw {asked}"
    );
    assert_eq!(
        metric(&lab, "antrea_vm_agent_fqdn_requeries_total{outcome=\"failed\"}"),
        0
    );
    let _ = std::fs::remove_file(&hosts_path);
}
