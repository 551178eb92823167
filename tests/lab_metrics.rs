//! `/metrics` against real traffic in the lab: the agent runs in the VM namespace with a policy of
//! named rules (ingress Allow ICMP from the outside host, Allow TCP 5202, Drop TCP 5201), a known
//! number of pings and TCP connections cross the bridge, and the per-rule series
//! `antrea_vm_agent_rule_{packets,bytes,sessions}_total` must show exactly what crossed:
//!
//! * an Allow rule's metric flows match the connection's `ct_label`, which every packet of the
//!   connection carries in both directions, and every packet goes through `IngressMetric` once:
//!   a ping run of N echoes is 2N packets (requests and replies) and ONE session (ICMP conntrack
//!   keys on the echo id, which stays the same for one `ping` process); a TCP connection is one
//!   session and all of its segments, both ways;
//! * a Drop rule counts every packet it drops, and its sessions are its packets.
//!
//! How many segments a TCP connection made (delayed ACKs, FIN/ACK merging) and how many SYNs a
//! dropped connection sent (retransmits until `nc -w 3` gives up) depend on timing, so the outside
//! host counts them itself: nftables counters in its namespace, on its output and input hooks, for
//! exactly the traffic each rule matches. The bridge counts Ethernet frames, nftables IP packets,
//! so bytes differ by the 14-byte Ethernet header of each packet.
//!
//! The same counters must come back from the agent API (`antrea-vm-agent get networkpolicy NAME
//! -o json --socket S`, and its table), and a rule deleted from the policy must lose its series
//! while the other rules keep theirs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

/// The metrics listener's port in this test's VM namespace (each lab has its own namespace, so
/// the port is private to the test anyway; distinct per test for readable logs).
const METRICS_PORT: u16 = 10461;

/// Pings in the run, TCP connections to the allowed port, attempts on the dropped port.
const PINGS: u64 = 4;
const CONNECTIONS: u64 = 3;
const DROPPED_ATTEMPTS: u64 = 2;
const ALLOWED_PORT: u16 = 5202;
const DROPPED_PORT: u16 = 5201;
/// Ethernet header of each frame the bridge counts (no VLAN tags in the lab).
const ETHERNET_HEADER: u64 = 14;
/// `ping`'s default echo: 56 bytes of data + 8 ICMP + 20 IPv4 = 84 bytes of IP.
const PING_IP_BYTES: u64 = 84;

/// The source policy of the rules, as the series label it.
const POLICY_NAME: &str = "metrics-lab";
const POLICY_UID: &str = "uid-metrics-lab";

const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// The policy with the named rules, in order; `with_drop` = false leaves the Drop rule out.
fn policy_yaml(with_drop: bool) -> String {
    let mut rules = format!(
        "- {{name: allow-ping, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: ICMP}}], action: Allow, priority: 0}}\n\
         - {{name: allow-{ALLOWED_PORT}, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: TCP, port: {ALLOWED_PORT}}}], action: Allow, priority: 1}}\n"
    );
    if with_drop {
        rules.push_str(&format!(
            "- {{name: drop-{DROPPED_PORT}, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: TCP, port: {DROPPED_PORT}}}], action: Drop, priority: 2}}\n"
        ));
    }
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: {POLICY_UID}, uid: {POLICY_UID}, generation: {gen}}}
sourceRef: {{type: AntreaNetworkPolicy, namespace: vm-ns, name: {POLICY_NAME}, uid: {POLICY_UID}}}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
{rules}",
        gen = if with_drop { 1 } else { 2 },
    )
}

fn write_policy(dir: &Path, file: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write policy");
    std::fs::rename(&tmp, dir.join(file)).expect("move policy in place");
}

/// One series: its labels and value.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses `name{k="v",...} value` lines of the Prometheus text format (the label values of this
/// test hold no escaped quotes or commas).
fn parse_series(text: &str, family: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(family) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => {
                let (l, v) = r.split_once("} ").expect("a closing brace and a value");
                (l, v)
            }
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue, // another family sharing the prefix
            },
        };
        let labels = labels
            .split(',')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("label=value");
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        out.push(Series {
            labels,
            value: value.trim().parse().expect("a numeric value"),
        });
    }
    out
}

/// The rule counters of one scrape: rule name → (packets, bytes, sessions), with every label
/// checked against the policy the test wrote.
fn rule_counters(text: &str) -> BTreeMap<String, (u64, u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for (i, family) in [
        "antrea_vm_agent_rule_packets_total",
        "antrea_vm_agent_rule_bytes_total",
        "antrea_vm_agent_rule_sessions_total",
    ]
    .into_iter()
    .enumerate()
    {
        for s in parse_series(text, family) {
            let l = &s.labels;
            let rule = l.get("rule_name").cloned().unwrap_or_default();
            let action = if rule.starts_with("drop-") {
                "Drop"
            } else {
                "Allow"
            };
            let want: BTreeMap<String, String> = [
                ("policy_type", "AntreaNetworkPolicy"),
                ("policy_namespace", EN_NAMESPACE),
                ("policy_name", POLICY_NAME),
                ("policy_uid", POLICY_UID),
                ("rule_name", rule.as_str()),
                ("direction", "Ingress"),
                ("action", action),
                ("tier", "Application"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            assert_eq!(l, &want, "labels of {family} for rule {rule:?}");
            assert!(s.value >= 0.0 && s.value.fract() == 0.0, "{family}: {}", s.value);
            let e = out.entry(rule).or_default();
            let v = s.value as u64;
            match i {
                0 => e.0 = v,
                1 => e.1 = v,
                _ => e.2 = v,
            }
        }
    }
    out
}

/// `GET /metrics` on the metrics listener, from inside the VM namespace (the listener binds the
/// namespace's loopback). A plain HTTP/1.0 request through `nc`, a lab tool; returns the body.
fn scrape(lab: &Lab) -> String {
    let response = lab.vm_ok(&format!(
        "printf 'GET /metrics HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
    ));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    assert!(
        head.starts_with("HTTP/1.") && head.lines().next().is_some_and(|l| l.contains(" 200")),
        "GET /metrics: {head}"
    );
    body.to_string()
}

/// The outside host's nftables counters: for each rule, the packets and bytes (IP) it sends to the
/// VM and receives back, counted on its own output and input hooks.
const NFT_TABLE: &str = "avm_metrics";
const NFT_COUNTERS: [&str; 6] = [
    "icmp_out",
    "icmp_in",
    "tcp_ok_out",
    "tcp_ok_in",
    "tcp_drop_out",
    "tcp_drop_in",
];

fn install_ext_counters(lab: &Lab) {
    lab.ext_ok(&format!(
        "nft -f - <<'EOF'
table inet {NFT_TABLE} {{
  counter icmp_out {{}}
  counter icmp_in {{}}
  counter tcp_ok_out {{}}
  counter tcp_ok_in {{}}
  counter tcp_drop_out {{}}
  counter tcp_drop_in {{}}
  chain out {{
    type filter hook output priority 0; policy accept;
    ip daddr {VM_IP4} ip protocol icmp counter name icmp_out
    ip daddr {VM_IP4} tcp dport {ALLOWED_PORT} counter name tcp_ok_out
    ip daddr {VM_IP4} tcp dport {DROPPED_PORT} counter name tcp_drop_out
  }}
  chain in {{
    type filter hook input priority 0; policy accept;
    ip saddr {VM_IP4} ip protocol icmp counter name icmp_in
    ip saddr {VM_IP4} tcp sport {ALLOWED_PORT} counter name tcp_ok_in
    ip saddr {VM_IP4} tcp sport {DROPPED_PORT} counter name tcp_drop_in
  }}
}}
EOF"
    ));
}

/// Counter name → (packets, IP bytes).
fn ext_counters(lab: &Lab) -> BTreeMap<&'static str, (u64, u64)> {
    let mut out = BTreeMap::new();
    for name in NFT_COUNTERS {
        let text = lab.ext_ok(&format!("nft list counter inet {NFT_TABLE} {name}"));
        // `packets N bytes M` on one line.
        let words: Vec<&str> = text.split_whitespace().collect();
        let number = |key: &str| -> u64 {
            words
                .iter()
                .position(|w| *w == key)
                .and_then(|i| words.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no `{key} N` in nft's counter {name}: {text}"))
        };
        out.insert(name, (number("packets"), number("bytes")));
    }
    out
}

/// `antrea-vm-agent get ARGS --socket S` (run from the root namespace: the socket is a file);
/// asserts success, returns stdout.
fn get(lab: &Lab, socket: &Path, args: &[&str]) -> String {
    let socket = socket.display().to_string();
    let mut all: Vec<&str> = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--socket", &socket]);
    let out = std::process::Command::new(agent_binary())
        .args(&all)
        .output()
        .expect("run antrea-vm-agent get");
    assert!(
        out.status.success(),
        "antrea-vm-agent {all:?} failed: {}\nlab {}",
        out.describe(),
        lab.prefix()
    );
    out.stdout_text()
}

/// Rule name → (packets, bytes, sessions) of `get networkpolicy NAME -o json`.
fn api_counters(lab: &Lab, socket: &Path, name: &str) -> BTreeMap<String, (u64, u64, u64)> {
    let text = get(lab, socket, &["networkpolicy", name, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let list = v.as_array().expect("a list of policies");
    assert_eq!(list.len(), 1, "one policy named {name}: {text}");
    let p = &list[0];
    assert_eq!(p["uid"], POLICY_UID, "{text}");
    assert!(p.get("statsError").is_none(), "counters readable: {text}");
    p["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            let s = &r["stats"];
            let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("stats.{k} of {r}"));
            (
                r["name"].as_str().expect("rule name").to_string(),
                (n("packets"), n("bytes"), n("sessions")),
            )
        })
        .collect()
}

#[test]
fn metrics_count_exactly_the_traffic_and_follow_rule_deletes() {
    let lab = Lab::new();
    let policy_dir: PathBuf = lab.dir().join("policies");
    std::fs::create_dir_all(&policy_dir).expect("create the policy dir");
    let socket = lab.dir().join("agent-api.sock");
    write_policy(&policy_dir, "00-atg.yaml", APPLIED_TO);
    write_policy(&policy_dir, "10-metrics.yaml", &policy_yaml(true));
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\nmetricsServer:\n  bindAddress: \"127.0.0.1:{METRICS_PORT}\"\n\
         agentAPI:\n  socket: {}\n",
        policy_dir.display(),
        socket.display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();

    // The three rules are installed and reported, all at zero before any traffic.
    let rules = |c: &BTreeMap<String, (u64, u64, u64)>| c.keys().cloned().collect::<Vec<_>>();
    let all_rules = vec![
        format!("allow-{ALLOWED_PORT}"),
        "allow-ping".to_string(),
        format!("drop-{DROPPED_PORT}"),
    ];
    wait_until(
        Duration::from_secs(30),
        "attached, and /metrics reporting the three rules",
        || {
            if !lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4)) {
                return false;
            }
            let out = lab.vm(&format!(
                "printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | nc -N -w 5 127.0.0.1 {METRICS_PORT}"
            ));
            rules(&rule_counters(&out.stdout_text())) == all_rules
        },
    );
    let before = rule_counters(&scrape(&lab));
    for (rule, c) in &before {
        assert_eq!(*c, (0, 0, 0), "{rule} counts nothing before any traffic");
    }

    install_ext_counters(&lab);
    let ping = lab.ping_from_ext(VM_IP4, PINGS as u32);
    assert!(ping.all_received(), "pings pass: {}", ping.output);
    for _ in 0..CONNECTIONS {
        assert!(
            lab.tcp_from_ext(VM_IP4, ALLOWED_PORT),
            "TCP {ALLOWED_PORT} passes"
        );
    }
    for _ in 0..DROPPED_ATTEMPTS {
        assert!(
            !lab.tcp_from_ext(VM_IP4, DROPPED_PORT),
            "TCP {DROPPED_PORT} is dropped"
        );
    }

    // What crossed, as the outside host counted it.
    let n = ext_counters(&lab);
    println!("outside host's counters (packets, IP bytes): {n:?}");
    let frame_bytes = |pairs: &[(u64, u64)]| -> (u64, u64) {
        let packets: u64 = pairs.iter().map(|p| p.0).sum();
        let bytes: u64 = pairs.iter().map(|p| p.1).sum();
        (packets, bytes + ETHERNET_HEADER * packets)
    };
    assert_eq!(
        n["icmp_out"],
        (PINGS, PINGS * PING_IP_BYTES),
        "echo requests sent"
    );
    assert_eq!(
        n["icmp_in"],
        (PINGS, PINGS * PING_IP_BYTES),
        "echo replies received"
    );
    assert_eq!(n["tcp_drop_in"].0, 0, "nothing comes back from the dropped port");
    assert!(
        n["tcp_drop_out"].0 >= DROPPED_ATTEMPTS,
        "at least one SYN per dropped attempt: {n:?}"
    );
    // A connection is at least SYN, SYN-ACK, ACK, data, ACK, FIN, FIN, ACK (some may merge).
    assert!(n["tcp_ok_out"].0 + n["tcp_ok_in"].0 >= 7 * CONNECTIONS, "{n:?}");
    let (ping_packets, ping_bytes) = frame_bytes(&[n["icmp_out"], n["icmp_in"]]);
    let (tcp_packets, tcp_bytes) = frame_bytes(&[n["tcp_ok_out"], n["tcp_ok_in"]]);
    let (drop_packets, drop_bytes) = frame_bytes(&[n["tcp_drop_out"]]);
    let want: BTreeMap<String, (u64, u64, u64)> = [
        (
            "allow-ping".to_string(),
            // Requests and replies; one conntrack entry for the whole run.
            (ping_packets, ping_bytes, 1),
        ),
        (
            format!("allow-{ALLOWED_PORT}"),
            // Every segment both ways; one session per connection.
            (tcp_packets, tcp_bytes, CONNECTIONS),
        ),
        (
            format!("drop-{DROPPED_PORT}"),
            // Every SYN (first ones and retransmits) is dropped; sessions = packets.
            (drop_packets, drop_bytes, drop_packets),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(want["allow-ping"].0, 2 * PINGS);

    // The userspace datapath hands its counts to the OpenFlow rules when the revalidator runs
    // (about every 500 ms): wait for them, then check nothing more arrives.
    let mut got = BTreeMap::new();
    let reached = poll_until(Duration::from_secs(30), || {
        got = rule_counters(&scrape(&lab));
        got == want
    });
    assert!(
        reached,
        "/metrics shows exactly the traffic.\n got (packets, bytes, sessions): {got:?}\nwant: {want:?}\n{}",
        ofctl_metric_flows(&lab)
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        rule_counters(&scrape(&lab)),
        want,
        "no packet counted twice or late"
    );

    // The agent API shows the same counters, by any of the policy's names.
    for name in [POLICY_NAME, POLICY_UID, &format!("{EN_NAMESPACE}/{POLICY_NAME}")] {
        assert_eq!(
            api_counters(&lab, &socket, name),
            want,
            "get networkpolicy {name} -o json"
        );
    }
    let table = get(&lab, &socket, &["networkpolicy", POLICY_NAME]);
    for (rule, (packets, bytes, sessions)) in &want {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(rule.as_str()))
            .unwrap_or_else(|| panic!("a row for {rule} in:\n{table}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        let tail = &cells[cells.len() - 3..];
        assert_eq!(
            tail,
            [packets.to_string(), bytes.to_string(), sessions.to_string()],
            "PACKETS BYTES SESSIONS of {rule} in:\n{table}"
        );
    }
    assert!(table.contains("PACKETS"), "{table}");
    let list = get(&lab, &socket, &["networkpolicy"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(POLICY_UID) && l.contains(POLICY_NAME)),
        "the policy is listed:\n{list}"
    );
    // The policy's flows, with their counters, through the same socket.
    let flows = get(&lab, &socket, &["ovsflows", "--policy", POLICY_NAME]);
    assert!(
        flows.lines().any(|l| l.contains("conjunction(")),
        "the policy's flows:\n{flows}"
    );

    // Delete the Drop rule: its series go, the others stay with their counts (their flows are
    // untouched: same rules, same conjunction ids).
    write_policy(&policy_dir, "10-metrics.yaml", &policy_yaml(false));
    let mut after = BTreeMap::new();
    let gone = poll_until(Duration::from_secs(30), || {
        after = rule_counters(&scrape(&lab));
        !after.contains_key(&format!("drop-{DROPPED_PORT}"))
    });
    assert!(gone, "the deleted rule's series disappear: {after:?}");
    let mut kept = want.clone();
    kept.remove(&format!("drop-{DROPPED_PORT}"));
    assert_eq!(after, kept, "the remaining rules keep their series and counts");
    let text = scrape(&lab);
    assert!(
        !text.contains(&format!("rule_name=\"drop-{DROPPED_PORT}\"")),
        "no family keeps a series of the deleted rule:\n{text}"
    );
    assert_eq!(
        api_counters(&lab, &socket, POLICY_NAME),
        kept,
        "get networkpolicy after the delete"
    );
    assert!(
        lab.tcp_from_ext(VM_IP4, DROPPED_PORT),
        "{DROPPED_PORT} passes once its Drop rule is gone"
    );
    agent.stop();
}

/// Polls `f` every 200 ms until it is true or `timeout` passed; whether it became true.
fn poll_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The metric tables' rule flows with their counters, for failure messages.
fn ofctl_metric_flows(lab: &Lab) -> String {
    let out = std::process::Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=10", "--names", "dump-flows"])
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .output()
        .expect("run ovs-ofctl");
    out.stdout_text()
        .lines()
        .filter(|l| l.contains("Metric") && l.contains("priority=200"))
        .collect::<Vec<_>>()
        .join("\n")
}
