//! Audit records from real packets, the line format, deduplication and rotation.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use etherparse::PacketBuilder;

use super::*;
use crate::attachment::EntityRef;
use crate::ovs::openflow::{Masked, Match, PacketIn};
use crate::packetin::packet::parse;
use crate::policy::compiler::ConjunctionInfo;
use crate::policy::pipeline::fields::operation;
use crate::policy::pipeline::table;
use crate::policy::rule::{PolicyType, RuleAction, RuleId};

const PEER_MAC: [u8; 6] = [0x02, 0x42, 0, 0, 0, 0x01];
const VM_MAC: [u8; 6] = [0x02, 0x42, 0, 0, 0, 0x09];

fn interfaces() -> Vec<AttachedInterface> {
    vec![AttachedInterface {
        name: "eth0".into(),
        ofport: 20,
        uplink_name: "eth0~".into(),
        uplink_ofport: 21,
        ips: vec![
            "172.16.100.3".parse().expect("ip"),
            "fd00::3".parse().expect("ip"),
        ],
        entity: EntityRef {
            namespace: "vm-ns".into(),
            name: "vm1-2a3b4".into(),
        },
    }]
}

fn info(
    conj_id: u32,
    policy_type: PolicyType,
    ns: &str,
    name: &str,
    rule: &str,
    label: &str,
) -> ConjunctionInfo {
    ConjunctionInfo {
        conj_id,
        rule_id: RuleId {
            policy_uid: format!("uid-{name}").into(),
            direction: Direction::In,
            index: 0,
            services_key: String::new(),
        },
        policy: PolicyRef {
            policy_type,
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        rule_name: rule.into(),
        direction: Direction::In,
        action: RuleAction::Reject,
        tier_priority: 250,
        policy_priority: 5.0,
        table: table::ANTREA_POLICY_INGRESS_RULE,
        priority: 14900,
        enable_logging: true,
        log_label: label.into(),
    }
}

fn rules() -> ConjunctionMap {
    let mut m = BTreeMap::new();
    m.insert(
        2,
        info(2, PolicyType::AntreaNetworkPolicy, "vm-ns", "annp1", "rule1", ""),
    );
    m.insert(
        3,
        info(
            3,
            PolicyType::AntreaClusterNetworkPolicy,
            "",
            "acnp1",
            "",
            "my-label",
        ),
    );
    m.into_iter().map(|(c, i)| (c, Arc::new(i))).collect()
}

fn packet_in(frame: Vec<u8>, ops: u8, in_port: u32, regs: &[(u8, u32)]) -> PacketIn {
    let mut metadata = Match::new().in_port(in_port);
    for &(i, v) in regs {
        metadata.regs.insert(i, Masked::exact(v));
    }
    PacketIn {
        total_len: frame.len() as u32,
        packet: frame,
        buffer_id: None,
        table_id: table::OUTPUT,
        cookie: u64::MAX,
        reason: 1,
        metadata,
        other_metadata: vec![],
        userdata: vec![1, ops],
        continuation: None,
        metadata_raw: vec![],
    }
}

fn tcp_syn() -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
        .ipv4([172, 16, 100, 5], [172, 16, 100, 3], 64)
        .tcp(53646, 22, 1, 64240)
        .syn()
        .options_raw(&[0; 20])
        .expect("options")
        .write(&mut v, &[])
        .expect("build");
    v
}

fn record(pi: &PacketIn) -> Result<AuditRecord, AuditError> {
    let np = NpPacketIn::from_packet_in(pi).expect("np packet-in");
    let p = parse(&pi.packet).expect("parse");
    audit_record(&np, &p, &rules(), &interfaces())
}

#[test]
fn reject_with_logging_of_an_ingress_rule_matches_the_documented_line() {
    // reg0: APDeny, disposition Reject, output-to-controller, ops 3; reg2: table 10; reg3: conj 2.
    let r0 = 0x400 | 0x1000 | crate::packetin::meta::output_to_controller_reg0(3);
    let pi = packet_in(tcp_syn(), 3, 21, &[(0, r0), (1, 20), (2, 10), (3, 2)]);
    let rec = record(&pi).expect("record");
    assert_eq!(
        rec.message(),
        "AntreaPolicyIngressRule AntreaNetworkPolicy:vm-ns/annp1 rule1 Ingress Reject 14900 \
         vm-ns/vm1-2a3b4 172.16.100.5 53646 172.16.100.3 22 TCP 60 <nil>"
    );
    assert!(!rec.is_allow());
}

#[test]
fn allow_egress_udp_of_a_cluster_policy_names_the_source_interface() {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(VM_MAC, PEER_MAC)
        .ipv4([172, 16, 100, 3], [8, 8, 8, 8], 64)
        .udp(40000, 53)
        .write(&mut f, &[0; 12])
        .expect("build");
    let pi = packet_in(
        f,
        operation::LOGGING,
        20,
        &[(2, u32::from(table::ANTREA_POLICY_EGRESS_RULE)), (5, 3)],
    );
    let rec = record(&pi).expect("record");
    assert_eq!(
        rec.message(),
        "AntreaPolicyEgressRule AntreaClusterNetworkPolicy:acnp1 <nil> Egress Allow 14900 \
         vm-ns/vm1-2a3b4 172.16.100.3 40000 8.8.8.8 53 UDP 40 my-label"
    );
    assert!(rec.is_allow());
}

#[test]
fn icmp_and_icmpv6_have_no_ports_and_the_ipv6_length_includes_the_header() {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
        .ipv4([172, 16, 100, 5], [172, 16, 100, 3], 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut f, &[0; 56])
        .expect("build");
    let pi = packet_in(f, 1, 21, &[(0, 0x400 | 0x800), (2, 10), (3, 2)]);
    let rec = record(&pi).expect("record");
    assert_eq!(
        (
            rec.src_port.as_str(),
            rec.dst_port.as_str(),
            rec.protocol.as_str(),
            rec.ip_length.as_str()
        ),
        ("<nil>", "<nil>", "ICMP", "84")
    );
    assert_eq!(rec.disposition, "Drop");
    let peer: Ipv6Addr = "fd00::5".parse().expect("ip");
    let vm: Ipv6Addr = "fd00::3".parse().expect("ip");
    let mut f = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
        .ipv6(peer.octets(), vm.octets(), 64)
        .icmpv6_echo_request(1, 1)
        .write(&mut f, &[0; 56])
        .expect("build");
    let pi = packet_in(f, 1, 21, &[(0, 0x400 | 0x800), (2, 10), (3, 2)]);
    let rec = record(&pi).expect("record");
    assert_eq!(
        rec.message(),
        "AntreaPolicyIngressRule AntreaNetworkPolicy:vm-ns/annp1 rule1 Ingress Drop 14900 \
         vm-ns/vm1-2a3b4 fd00::5 <nil> fd00::3 <nil> IPv6-ICMP 104 <nil>"
    );
}

#[test]
fn applied_to_falls_back_to_the_port_and_unknown_rules_are_errors() {
    // The VM forwards for another address: found by reg1 (the internal port) instead.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
        .ipv4([172, 16, 100, 5], [10, 1, 1, 1], 64)
        .udp(1, 2)
        .write(&mut f, &[])
        .expect("build");
    let pi = packet_in(f.clone(), 1, 21, &[(0, 0x400 | 0x800), (1, 20), (2, 10), (3, 2)]);
    assert_eq!(record(&pi).expect("record").applied_to, "vm-ns/vm1-2a3b4");
    let pi = packet_in(f.clone(), 1, 21, &[(0, 0x400 | 0x800), (1, 99), (2, 10), (3, 2)]);
    assert_eq!(record(&pi).expect("record").applied_to, "<nil>");
    let pi = packet_in(f.clone(), 1, 21, &[(0, 0x400 | 0x800), (2, 10), (3, 77)]);
    assert_eq!(
        record(&pi).expect_err("unknown").to_string(),
        "networkpolicy not found for conjunction id: 77"
    );
    let pi = packet_in(f.clone(), 1, 21, &[(2, 10)]);
    assert!(matches!(record(&pi), Err(AuditError::NoRule)));
    // Drop disposition without APDeny: a K8s NetworkPolicy's default deny.
    let pi = packet_in(
        f,
        1,
        21,
        &[(0, 0x800), (2, u32::from(table::INGRESS_DEFAULT_RULE))],
    );
    assert_eq!(
        record(&pi).expect("record").message(),
        "IngressDefaultRule K8sNetworkPolicy <nil> Ingress Drop <nil> <nil> 172.16.100.5 1 \
         10.1.1.1 2 UDP 28 <nil>"
    );
}

#[test]
fn durations_print_like_go() {
    let cases = [
        (Duration::ZERO, "0s"),
        (Duration::from_nanos(1), "1ns"),
        (Duration::from_nanos(1500), "1.5µs"),
        (Duration::from_millis(1), "1ms"),
        (Duration::from_micros(100_250), "100.25ms"),
        (Duration::from_secs(1), "1s"),
        (Duration::from_nanos(1_011_379_442), "1.011379442s"),
        (Duration::from_millis(61_500), "1m1.5s"),
        (Duration::from_secs(3600), "1h0m0s"),
        (Duration::from_secs(3723), "1h2m3s"),
    ];
    for (d, s) in cases {
        assert_eq!(go_duration(d), s, "{d:?}");
    }
}

fn rec(disposition: &str, src_port: &str) -> AuditRecord {
    AuditRecord {
        table_name: "AntreaPolicyIngressRule".into(),
        policy_ref: "AntreaNetworkPolicy:vm-ns/annp1".into(),
        rule_name: "rule1".into(),
        direction: "Ingress".into(),
        disposition: disposition.into(),
        of_priority: "14900".into(),
        applied_to: "vm-ns/vm1".into(),
        src_ip: "172.16.100.5".into(),
        src_port: src_port.into(),
        dst_ip: "172.16.100.3".into(),
        dst_port: "22".into(),
        protocol: "TCP".into(),
        ip_length: "60".into(),
        log_label: NIL.into(),
    }
}

fn wall(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").expect("time")
}

#[test]
fn allow_lines_are_written_at_once_and_denials_are_deduplicated_for_a_second() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = AuditLog::open(&dir.path().join("networkpolicy"), &AuditLogging::default()).expect("open");
    assert_eq!(log.path(), dir.path().join("networkpolicy/np.log"));
    let t0 = Instant::now();
    let w = wall("2026-01-05 10:12:01.123456");
    log.log_at(&rec("Allow", "1"), t0, w).expect("log");
    let text = || std::fs::read_to_string(log.path()).expect("read");
    assert_eq!(
        text(),
        "2026/01/05 10:12:01.123456 AntreaPolicyIngressRule AntreaNetworkPolicy:vm-ns/annp1 rule1 \
         Ingress Allow 14900 vm-ns/vm1 172.16.100.5 1 172.16.100.3 22 TCP 60 <nil>\n"
    );
    // Three identical rejects and one other within the window.
    for i in 0..3u64 {
        log.log_at(&rec("Reject", "2"), t0 + Duration::from_millis(100 * i), w)
            .expect("log");
    }
    log.log_at(&rec("Reject", "3"), t0 + Duration::from_millis(500), w)
        .expect("log");
    assert_eq!(log.pending(), 2);
    let next = log
        .flush_due_at(t0 + Duration::from_millis(999), w)
        .expect("flush");
    assert_eq!(next, Some(t0 + Duration::from_secs(1)));
    assert_eq!(text().lines().count(), 1, "nothing before the window ends");
    let w2 = wall("2026-01-05 10:12:02.123456");
    let next = log.flush_due_at(t0 + Duration::from_secs(1), w2).expect("flush");
    assert_eq!(next, Some(t0 + Duration::from_millis(1500)));
    let lines: Vec<String> = text().lines().map(str::to_string).collect();
    assert_eq!(
        lines[1],
        "2026/01/05 10:12:02.123456 AntreaPolicyIngressRule AntreaNetworkPolicy:vm-ns/annp1 rule1 \
         Ingress Reject 14900 vm-ns/vm1 172.16.100.5 2 172.16.100.3 22 TCP 60 <nil> [3 packets in 1s]"
    );
    log.flush_due_at(t0 + Duration::from_secs(2), w2).expect("flush");
    let last = text().lines().last().map(str::to_string).expect("line");
    assert!(
        last.ends_with(" 172.16.100.5 3 172.16.100.3 22 TCP 60 <nil>"),
        "{last}"
    );
    assert_eq!(log.pending(), 0);
    assert_eq!(
        log.flush_due_at(t0 + Duration::from_secs(3), w2).expect("flush"),
        None
    );
    // flush_all writes what is still collecting.
    log.log_at(&rec("Drop", "4"), t0, w).expect("log");
    log.flush_all().expect("flush all");
    assert_eq!(log.pending(), 0);
    assert!(text().lines().last().is_some_and(|l| l.contains(" Drop ")));
}

#[test]
fn the_log_rotates_by_size_and_prunes_backups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = RotationPolicy {
        max_bytes: 400,
        max_backups: 2,
        max_age: None,
        compress: true,
    };
    let log = AuditLog::open_with(dir.path(), policy).expect("open");
    let w = wall("2026-01-05 10:12:01.123456");
    for i in 0..20 {
        log.log_at(&rec("Allow", &i.to_string()), Instant::now(), w)
            .expect("log");
    }
    log.wait_for_maintenance();
    let backups = log.backups().expect("backups");
    assert_eq!(backups.len(), 2, "{backups:?}");
    assert!(backups.iter().all(|b| b.compressed));
    let current = std::fs::read_to_string(log.path()).expect("read");
    assert!(current.len() <= 400);
    assert!(current
        .lines()
        .last()
        .is_some_and(|l| l.contains(" 172.16.100.5 19 ")));
    // The newest backup ends where the current file starts.
    let mut newest = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&backups[0].path).expect("open")),
        &mut newest,
    )
    .expect("gunzip");
    let last_backed_up: usize = newest
        .lines()
        .last()
        .and_then(|l| l.split(' ').nth(10))
        .and_then(|p| p.parse().ok())
        .expect("port field");
    let first_current: usize = current
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(10))
        .and_then(|p| p.parse().ok())
        .expect("port field");
    assert_eq!(last_backed_up + 1, first_current);
}
