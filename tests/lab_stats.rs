//! Per-rule counters against a real Open vSwitch: the agent runs in the lab with a policy of
//! known rules, known traffic crosses it (pings, TCP connections in both directions, IPv4 and
//! IPv6, allowed, dropped and rejected), then the flow installer's collection code
//! ([`dump_metric_flows`] + [`rule_stats_for`]), run in-process over a second OpenFlow
//! connection to the bridge, is compared with
//! * an independent reading of `ovs-ofctl dump-flows` of the two metric tables, parsed the way
//!   Antrea's stats collector parses it (`priority=200,` lines; `reg0` → deny, id in `reg3`,
//!   sessions = packets; else id from `ct_label`, sessions = packets of `+new` flows), and
//! * what the traffic must have produced (sessions = connections made, packets of a ping).
//!
//! The rule metadata comes from compiling the same controlplane objects in-process (a fresh
//! compiler gives the same conjunction ids for the same rule set; the test checks that by
//! comparing the compiled metric flows with the bridge's).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use antrea_vm_agent::actors::flow_installer::{dump_metric_flows, rule_stats_for};
use antrea_vm_agent::messages::{AttachedInterface, EntityRef, RuleStats};
use antrea_vm_agent::ovs::openflow::conn::{ConnOptions, OfConnection};
use antrea_vm_agent::ovs::openflow::FlowStats;
use antrea_vm_agent::policy::compiler::{CompileOptions, Compiler};
use antrea_vm_agent::policy::controlplane::store::PolicyStore;
use antrea_vm_agent::policy::controlplane::ControlplaneObject;
use antrea_vm_agent::policy::controlplane::Validate as _;
use antrea_vm_agent::policy::pipeline::table;
use antrea_vm_agent::policy::resolve::resolve;
use antrea_vm_agent::policy::rule::{CompiledRuleInput, Direction};

use support::*;

const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// Pings, IPv4 connections to the allowed port, IPv6 connections to it, and attempts on the
/// dropped and the rejected port, connections out through the egress rule.
const PINGS: u32 = 5;
const TCP_V4: u32 = 3;
const TCP_V6: u32 = 2;
const DROPPED: u32 = 2;
const REJECTED: u32 = 2;
const EGRESS: u32 = 2;
/// How often ovs-vswitchd's revalidator pushes datapath counters to the OpenFlow rules (its
/// default `max-revalidator` is 500 ms).
const REVALIDATION: Duration = Duration::from_millis(500);

fn policy_yaml() -> String {
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-stats, uid: uid-stats, generation: 1}}
sourceRef: {{type: AntreaNetworkPolicy, namespace: vm-ns, name: stats, uid: uid-stats}}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
- {{name: allow-ping, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: ICMP}}], action: Allow, priority: 0}}
- {{name: allow-tcp, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}, {{cidr: \"{EXT_IP6}/128\"}}]}}, services: [{{protocol: TCP, port: 5301}}], action: Allow, priority: 1}}
- {{name: drop-tcp, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: TCP, port: 5302}}], action: Drop, priority: 2}}
- {{name: reject-tcp, direction: In, from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: TCP, port: 5303}}], action: Reject, priority: 3}}
- {{name: allow-out, direction: Out, to: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}]}}, services: [{{protocol: TCP, port: 5304}}], action: Allow, priority: 0}}
"
    )
}

fn write_policy(dir: &std::path::Path, file: &str, yaml: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write policy");
    std::fs::rename(&tmp, dir.join(file)).expect("move policy in place");
}

fn ofport(lab: &Lab, iface: &str) -> u32 {
    lab.ovs_vsctl(&["get", "Interface", iface, "ofport"])
        .trim()
        .parse()
        .expect("ofport")
}

/// The rules the agent resolves for the lab's eth0 from `objects`, and their conjunctions.
fn compile_in_process(
    lab: &Lab,
    objects: &[&str],
) -> (
    Vec<CompiledRuleInput>,
    antrea_vm_agent::policy::compiler::CompileOutput,
) {
    let mut store = PolicyStore::new();
    for text in objects {
        let value: serde_json::Value = serde_norway::from_str(text).expect("object yaml");
        let obj = ControlplaneObject::from_value(value).expect("decode object");
        let valid = obj.validate().expect("valid object");
        store.apply(valid).expect("apply object");
    }
    let interfaces = vec![AttachedInterface {
        name: NIC.into(),
        ofport: ofport(lab, NIC),
        uplink_name: UPLINK.into(),
        uplink_ofport: ofport(lab, UPLINK),
        ips: vec![VM_IP4.parse().expect("ip"), VM_IP6.parse().expect("ip")],
        entity: EntityRef {
            namespace: EN_NAMESPACE.into(),
            name: "vm1-3e616".into(),
        },
    }];
    let resolved = resolve(&store, &interfaces);
    assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
    let mut rules = resolved.rules;
    rules.sort_by(|a, b| a.id.cmp(&b.id));
    let compiled = Compiler::new(CompileOptions::default()).compile(&rules, 1);
    assert!(compiled.skipped.is_empty(), "{:?}", compiled.skipped);
    (rules, compiled)
}

/// The metric tables as `ovs-ofctl dump-flows` prints them (NetworkPolicy cookie category).
fn ofctl_metric_lines(lab: &Lab) -> Vec<String> {
    let mut lines = Vec::new();
    for t in [table::EGRESS_METRIC, table::INGRESS_METRIC] {
        let out = Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow15", "--timeout=10", "--no-names", "dump-flows"])
            .arg(format!("unix:{}", lab.mgmt_sock().display()))
            .arg(format!("table={t},cookie=0x20000000000/0xff0000000000"))
            .output()
            .expect("run ovs-ofctl");
        assert!(
            out.status.success(),
            "ovs-ofctl dump-flows failed: {}",
            out.describe()
        );
        lines.extend(
            out.stdout_text()
                .lines()
                .filter(|l| l.contains("priority=200,"))
                .map(without_ages),
        );
    }
    lines.sort();
    lines
}

/// A flow line without the fields that change while nothing happens (`duration`, `idle_age`,
/// `hard_age`), so two readings compare equal when no packet hit the flows in between.
fn without_ages(line: &str) -> String {
    line.trim()
        .split(' ')
        .map(|part| {
            part.split(',')
                .filter(|f| {
                    !["duration=", "idle_age=", "hard_age="]
                        .iter()
                        .any(|k| f.starts_with(k))
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of `key=` in an ovs-ofctl flow line (fields end at ',' or ' ').
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split([',', ' '])
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

fn hex(v: &str) -> u128 {
    u128::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("hex {v}: {e}"))
}

/// Antrea's reading of the metric flow lines: rule id → (packets, bytes, sessions).
fn parse_like_antrea(lines: &[String]) -> BTreeMap<u32, (u64, u64, u64)> {
    let mut out: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    for l in lines {
        let packets: u64 = field(l, "n_packets")
            .expect("n_packets")
            .parse()
            .expect("n_packets");
        let bytes: u64 = field(l, "n_bytes").expect("n_bytes").parse().expect("n_bytes");
        let (id, sessions) = if l.contains("reg0") {
            let id = hex(field(l, "reg3").expect("deny flow has reg3")) as u32;
            (id, packets)
        } else {
            let label = field(l, "ct_label").expect("allow flow has ct_label");
            let digits = label.split('/').next().expect("label").trim_start_matches("0x");
            // An egress label is the id shifted by 32 bits: drop the last 8 hex digits.
            let id = if digits.len() > 8 {
                &digits[..digits.len() - 8]
            } else {
                digits
            };
            let new = field(l, "ct_state").is_some_and(|s| s.contains('+'));
            (hex(id) as u32, if new { packets } else { 0 })
        };
        let e = out.entry(id).or_default();
        e.0 += packets;
        e.1 += bytes;
        e.2 += sessions;
    }
    out
}

fn by_name(stats: &[RuleStats]) -> BTreeMap<String, &RuleStats> {
    stats.iter().map(|r| (r.rule_name.clone(), r)).collect()
}

#[test]
fn rule_counters_match_ovs_and_the_traffic_sent() {
    let lab = Lab::new();
    let dir: PathBuf = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    let policy = policy_yaml();
    // Both objects are there before the agent starts: its first compilation sees every rule,
    // as the in-process one does.
    write_policy(&dir, "00-atg.yaml", APPLIED_TO);
    write_policy(&dir, "10-stats.yaml", &policy);
    let config = lab.write_config(&format!("standalone:\n  policyDir: {}\n", dir.display()));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let mut agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(
        Duration::from_secs(30),
        "attached and the rules' flows committed",
        || {
            lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
                && lab.try_dump_flows().is_ok_and(|f| {
                    f.iter()
                        .filter(|l| l.contains("conj_id=") && !l.contains("priority=64991"))
                        .count()
                        >= 5
                })
        },
    );

    let (rules, compiled) = compile_in_process(&lab, &[APPLIED_TO, &policy]);
    assert_eq!(rules.len(), 5, "five rules apply to eth0");

    // Traffic of known shape.
    let ping = lab.ping_from_ext(VM_IP4, PINGS);
    assert!(ping.all_received(), "pings pass: {}", ping.output);
    for _ in 0..TCP_V4 {
        assert!(lab.tcp_from_ext(VM_IP4, 5301), "TCP 5301 over IPv4 is allowed");
    }
    for _ in 0..TCP_V6 {
        assert!(lab.tcp_from_ext(VM_IP6, 5301), "TCP 5301 over IPv6 is allowed");
    }
    for _ in 0..DROPPED {
        assert!(!lab.tcp_from_ext(VM_IP4, 5302), "TCP 5302 is dropped");
    }
    for _ in 0..REJECTED {
        assert!(!lab.tcp_from_ext(VM_IP4, 5303), "TCP 5303 is rejected");
    }
    for _ in 0..EGRESS {
        assert!(lab.tcp_from_vm(EXT_IP4, 5304), "TCP 5304 out is allowed");
    }

    // The userspace datapath hands packet counts to the OpenFlow rules when its revalidator
    // runs (every half second or so), so wait until two readings some time apart agree; then
    // our collection, bracketed by readings that must still agree.
    let settle = REVALIDATION * 3;
    let mut stable = ofctl_metric_lines(&lab);
    wait_until(Duration::from_secs(30), "the metric counters settle", || {
        std::thread::sleep(settle);
        let now = ofctl_metric_lines(&lab);
        std::mem::replace(&mut stable, now) == stable
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dump: Vec<FlowStats> = rt.block_on(async {
        let sw = OfConnection::connect(&lab.mgmt_sock(), 0x57a7, ConnOptions::default())
            .await
            .expect("connect to the lab bridge");
        tokio::time::timeout(Duration::from_secs(10), dump_metric_flows(&sw))
            .await
            .expect("dump within 10 s")
            .expect("dump the metric tables")
    });
    std::thread::sleep(settle);
    let ofctl = ofctl_metric_lines(&lab);
    assert_eq!(ofctl, stable, "no packet hit a metric flow during the collection");

    // The in-process compilation describes the bridge's metric flows (same conjunction ids).
    let mut want_keys: Vec<_> = compiled
        .flows
        .values()
        .filter(|f| f.table == table::EGRESS_METRIC || f.table == table::INGRESS_METRIC)
        .map(|f| f.key())
        .collect();
    want_keys.sort();
    let mut got_keys: Vec<_> = dump.iter().map(|s| s.flow.key()).collect();
    got_keys.sort();
    assert_eq!(got_keys, want_keys, "the bridge holds the compiled metric flows");
    assert_eq!(dump.len(), ofctl.len(), "ovs-ofctl shows the same metric flows");

    let ours = rule_stats_for(&dump, &compiled.conjunctions, &rules);
    // Antrea's reading of ovs-ofctl's text, by conjunction id, then summed per rule name.
    let antrea = parse_like_antrea(&ofctl);
    let mut antrea_rules: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for (id, c) in &antrea {
        let info = compiled
            .conjunctions
            .get(id)
            .unwrap_or_else(|| panic!("ovs-ofctl shows a metric flow of unknown conjunction {id}"));
        let e = antrea_rules.entry(info.rule_name.clone()).or_default();
        e.0 += c.0;
        e.1 += c.1;
        e.2 += c.2;
    }
    let ours_rules: BTreeMap<String, (u64, u64, u64)> = ours
        .rules
        .iter()
        .map(|r| (r.rule_name.clone(), (r.packets, r.bytes, r.sessions)))
        .collect();
    println!("per-rule counters (packets, bytes, sessions): {ours_rules:?}");
    assert_eq!(
        ours_rules, antrea_rules,
        "our mapping equals Antrea's reading of ovs-ofctl"
    );

    // And the counters are what the traffic produced.
    let r = by_name(&ours.rules);
    assert_eq!(
        r.keys().cloned().collect::<Vec<_>>(),
        ["allow-out", "allow-ping", "allow-tcp", "drop-tcp", "reject-tcp"],
        "every rule is reported once"
    );
    for rs in ours.rules.iter() {
        assert_eq!(rs.policy.uid, "uid-stats");
        assert_eq!(rs.tier_priority, 250);
    }
    assert_eq!(r["allow-out"].direction, Direction::Out);
    let ping_rule = r["allow-ping"];
    assert_eq!(
        ping_rule.packets,
        2 * u64::from(PINGS),
        "each echo request and its reply cross IngressMetric"
    );
    assert!(
        (1..=u64::from(PINGS)).contains(&ping_rule.sessions),
        "one ping run is one or a few conntrack sessions: {}",
        ping_rule.sessions
    );
    let tcp = r["allow-tcp"];
    assert_eq!(
        tcp.sessions,
        u64::from(TCP_V4 + TCP_V6),
        "one session per TCP connection, IPv4 and IPv6 summed"
    );
    assert!(tcp.packets >= 3 * u64::from(TCP_V4 + TCP_V6), "{tcp:?}");
    assert!(tcp.bytes > tcp.packets * 40, "{tcp:?}");
    let out = r["allow-out"];
    assert_eq!(
        out.sessions,
        u64::from(EGRESS),
        "egress connections, from ct_label's high word"
    );
    assert!(out.packets >= 3 * u64::from(EGRESS), "{out:?}");
    let drop = r["drop-tcp"];
    assert_eq!(
        drop.sessions, drop.packets,
        "a deny rule's sessions are its packets"
    );
    assert!(
        drop.packets >= u64::from(DROPPED),
        "every SYN (and its retries) is dropped: {drop:?}"
    );
    let reject = r["reject-tcp"];
    assert_eq!(reject.sessions, reject.packets);
    assert!(reject.packets >= u64::from(REJECTED), "{reject:?}");
    agent.stop();
}
