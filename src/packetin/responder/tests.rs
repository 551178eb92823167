//! The responder against the in-process fake switch: packet-ins in, packet-outs and audit
//! lines out, every bad input counted.

use std::collections::BTreeMap;
use std::time::Duration;

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

use super::*;
use crate::attachment::EntityRef;
use crate::ovs::openflow::events::Hub;
use crate::ovs::openflow::fake::FakeSwitch;
use crate::ovs::openflow::{Action, Masked, Match, PortDesc, PortReason, PortStatus, SetField};
use crate::packetin::meta::output_to_controller_reg0;
use crate::policy::compiler::ConjunctionInfo;
use crate::policy::pipeline::table;
use crate::policy::rule::{Direction, PolicyRef, PolicyType, RuleAction, RuleId};

const PEER_MAC: [u8; 6] = [0x02, 0x42, 0, 0, 0, 0x01];
const VM_MAC: [u8; 6] = [0x02, 0x42, 0, 0, 0, 0x09];
const LIMIT: Duration = Duration::from_secs(20);

fn interfaces() -> Vec<AttachedInterface> {
    vec![AttachedInterface {
        name: "eth0".into(),
        ofport: 20,
        uplink_name: "eth0~".into(),
        uplink_ofport: 21,
        ips: vec!["10.0.0.9".parse().expect("ip")],
        entity: EntityRef {
            namespace: "vm-ns".into(),
            name: "vm1-2a3b4".into(),
        },
    }]
}

fn rules() -> ConjunctionMap {
    let mut m = BTreeMap::new();
    m.insert(
        2,
        Arc::new(ConjunctionInfo {
            conj_id: 2,
            rule_id: RuleId {
                policy_uid: "uid-1".into(),
                direction: Direction::In,
                index: 0,
                services_key: String::new(),
            },
            policy: PolicyRef {
                policy_type: PolicyType::AntreaNetworkPolicy,
                namespace: "vm-ns".into(),
                name: "annp1".into(),
                uid: "uid-1".into(),
            },
            rule_name: "rule1".into(),
            direction: Direction::In,
            action: RuleAction::Reject,
            tier_priority: 250,
            policy_priority: 5.0,
            table: table::ANTREA_POLICY_INGRESS_RULE,
            priority: 106,
            enable_logging: true,
            log_label: "lbl".into(),
        }),
    );
    m
}

struct Harness {
    ctx: PacketInContext,
    _dir: tempfile::TempDir,
    _rules: watch::Sender<SharedConjunctions>,
    _ifaces: watch::Sender<Arc<Vec<AttachedInterface>>>,
}

fn harness() -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = AuditLog::open(dir.path(), &crate::config::AuditLogging::default()).expect("audit");
    let (rules_tx, rules_rx) = watch::channel(Arc::new(rules()));
    let (ifaces_tx, ifaces_rx) = watch::channel(Arc::new(interfaces()));
    Harness {
        ctx: PacketInContext {
            rules: rules_rx,
            interfaces: ifaces_rx,
            audit: Some(audit),
            packet_in_rate: 5000,
            stats: PacketInStats::new(),
        },
        _dir: dir,
        _rules: rules_tx,
        _ifaces: ifaces_tx,
    }
}

fn tcp_syn(src: [u8; 4], dst: [u8; 4], dst_mac: [u8; 6]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, dst_mac)
        .ipv4(src, dst, 64)
        .tcp(40000, 22, 1000, 64240)
        .syn()
        .write(&mut v, &[])
        .expect("build");
    v
}

fn packet_in(frame: Vec<u8>, userdata: Vec<u8>, in_port: u32, regs: &[(u8, u32)]) -> Event {
    let mut metadata = Match::new().in_port(in_port);
    for &(i, v) in regs {
        metadata.regs.insert(i, Masked::exact(v));
    }
    Event::PacketIn(Box::new(PacketIn {
        total_len: frame.len() as u32,
        packet: frame,
        buffer_id: None,
        table_id: table::OUTPUT,
        cookie: u64::MAX,
        reason: 1,
        metadata,
        other_metadata: vec![],
        userdata,
        continuation: None,
        metadata_raw: vec![],
    }))
}

/// reg0/reg2/reg3 of a packet-in from the G17 reject rule with operations `ops`.
fn reject_regs(ops: u8, disposition: u32) -> Vec<(u8, u32)> {
    vec![
        (0, 0x400 | disposition | output_to_controller_reg0(ops)),
        (1, 20),
        (2, u32::from(table::ANTREA_POLICY_INGRESS_RULE)),
        (3, 2),
    ]
}

#[tokio::test]
async fn rejects_are_answered_logs_written_and_bad_input_counted() {
    let h = harness();
    let fake = FakeSwitch::new();
    let switch: Arc<dyn Switch> = Arc::new(fake.clone());
    let hub = Hub::new(64);
    let sub = hub.subscribe();
    let vm = [10, 0, 0, 9];
    let peer = [172, 16, 100, 5];
    // G17: plain Reject.
    hub.publish(packet_in(
        tcp_syn(peer, vm, VM_MAC),
        vec![1, 2],
        21,
        &reject_regs(2, 0),
    ));
    // Reject with logging (disposition Reject).
    hub.publish(packet_in(
        tcp_syn(peer, vm, VM_MAC),
        vec![1, 3],
        21,
        &reject_regs(3, 0x1000),
    ));
    // Allow with logging, ingress: conj id in reg6.
    hub.publish(packet_in(
        tcp_syn(peer, vm, VM_MAC),
        vec![1, 1],
        21,
        &[(1, 20), (2, u32::from(table::ANTREA_POLICY_INGRESS_RULE)), (6, 2)],
    ));
    // Not ours: a DNS packet-in and a port status.
    hub.publish(packet_in(tcp_syn(peer, vm, VM_MAC), vec![2, 0], 21, &[]));
    hub.publish(Event::PortStatus(PortStatus {
        reason: PortReason::Add,
        port: PortDesc::default(),
    }));
    // Malformed frame.
    hub.publish(packet_in(
        vec![0xde, 0xad],
        vec![1, 3],
        21,
        &reject_regs(3, 0x1000),
    ));
    // A broadcast frame is not answered.
    hub.publish(packet_in(
        tcp_syn(peer, vm, [0xff; 6]),
        vec![1, 2],
        21,
        &reject_regs(2, 0),
    ));
    // Neither side local and an unknown port: no reply, counted.
    hub.publish(packet_in(
        tcp_syn(peer, [8, 8, 8, 8], VM_MAC),
        vec![1, 2],
        99,
        &reject_regs(2, 0),
    ));
    // A logging packet-in of an unknown rule.
    hub.publish(packet_in(
        tcp_syn(peer, vm, VM_MAC),
        vec![1, 1],
        21,
        &[(2, u32::from(table::ANTREA_POLICY_INGRESS_RULE)), (6, 42)],
    ));
    hub.close();
    tokio::time::timeout(LIMIT, serve(sub, switch, h.ctx.clone()))
        .await
        .expect("serve ends when the subscription ends");

    let outs = fake.packet_outs();
    assert_eq!(outs.len(), 2, "{outs:?}");
    for po in &outs {
        assert_eq!(po.in_port, 20);
        assert_eq!(
            po.actions,
            vec![
                Action::SetField(SetField::Reg {
                    idx: 0,
                    value: 0x2000,
                    mask: Some(0x2000)
                }),
                Action::Output(21)
            ]
        );
        let p = SlicedPacket::from_ethernet(&po.packet).expect("reply parses");
        let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
            panic!("not TCP");
        };
        assert!(tcp.rst() && tcp.ack());
        assert_eq!((tcp.source_port(), tcp.destination_port()), (22, 40000));
        assert_eq!(tcp.acknowledgment_number(), 1001);
    }
    assert_eq!(
        h.ctx.stats.snapshot(),
        PacketInCounts {
            received: 8,
            not_network_policy: 1,
            rate_limited: 0,
            malformed: 1,
            logged: 2,
            log_failed: 1,
            rejected: 2,
            reject_suppressed: 1,
            reject_failed: 1,
            panicked: 0,
        }
    );
    let audit = h.ctx.audit.as_ref().expect("audit");
    let text = std::fs::read_to_string(audit.path()).expect("read np.log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    // Allow is written at once; the Reject line was collected and written at the end.
    assert!(lines[0].ends_with(
        " AntreaPolicyIngressRule AntreaNetworkPolicy:vm-ns/annp1 rule1 Ingress Allow 106 \
         vm-ns/vm1-2a3b4 172.16.100.5 40000 10.0.0.9 22 TCP 40 lbl"
    ));
    assert!(lines[1].ends_with(
        " AntreaPolicyIngressRule AntreaNetworkPolicy:vm-ns/annp1 rule1 Ingress Reject 106 \
         vm-ns/vm1-2a3b4 172.16.100.5 40000 10.0.0.9 22 TCP 40 lbl"
    ));
}

#[tokio::test]
async fn run_subscribes_itself_and_ends_with_the_connection() {
    let h = harness();
    let fake = FakeSwitch::new();
    let task = tokio::spawn(run(Arc::new(fake.clone()), h.ctx.clone()));
    let ev = packet_in(
        tcp_syn([172, 16, 100, 5], [10, 0, 0, 9], VM_MAC),
        vec![1, 1],
        21,
        &[(2, u32::from(table::ANTREA_POLICY_INGRESS_RULE)), (6, 2)],
    );
    // Until the task has subscribed, an injected event finds no subscriber and is counted.
    let mut delivered = false;
    for _ in 0..1000 {
        tokio::task::yield_now().await;
        let before = fake.dropped_events();
        fake.inject(ev.clone());
        if fake.dropped_events() == before {
            delivered = true;
            break;
        }
    }
    assert!(delivered, "the responder never subscribed");
    fake.disconnect();
    tokio::time::timeout(LIMIT, task)
        .await
        .expect("run ends when the connection closes")
        .expect("no panic");
    assert_eq!(h.ctx.stats.snapshot().logged, 1);
    let audit = h.ctx.audit.as_ref().expect("audit");
    let text = std::fs::read_to_string(audit.path()).expect("read");
    assert!(text.contains(" Ingress Allow 106 vm-ns/vm1-2a3b4 "), "{text}");
}

#[tokio::test]
async fn a_flood_beyond_the_bucket_is_dropped_before_parsing() {
    let mut h = harness();
    h.ctx.packet_in_rate = 1; // burst 2
    h.ctx.audit = None;
    let fake = FakeSwitch::new();
    let hub = Hub::new(64);
    let sub = hub.subscribe();
    for _ in 0..50 {
        hub.publish(packet_in(vec![0; 4], vec![1, 1], 21, &[]));
    }
    hub.close();
    tokio::time::timeout(LIMIT, serve(sub, Arc::new(fake), h.ctx.clone()))
        .await
        .expect("serve ends");
    let s = h.ctx.stats.snapshot();
    assert_eq!(s.received, 50);
    // The burst of 2 gets through (to fail parsing); at 1 per second the rest of a burst of 50
    // is dropped before any parsing.
    assert!(s.malformed >= 2 && s.malformed + s.rate_limited == 50, "{s:?}");
    assert!(s.rate_limited > 0, "{s:?}");
}

#[test]
fn token_bucket_refills_at_its_rate_up_to_the_burst() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(2, t0);
    for _ in 0..4 {
        assert!(b.try_take(t0));
    }
    assert!(!b.try_take(t0));
    assert!(b.try_take(t0 + Duration::from_millis(500)));
    assert!(!b.try_take(t0 + Duration::from_millis(500)));
    // An earlier instant does not refill or move time backwards.
    assert!(!b.try_take(t0));
    let later = t0 + Duration::from_secs(100);
    for _ in 0..4 {
        assert!(b.try_take(later));
    }
    assert!(!b.try_take(later));
    let mut unlimited = TokenBucket::new(0, t0);
    assert!((0..10_000).all(|_| unlimited.try_take(t0)));
}

#[test]
fn outcome_names_are_the_json_keys_in_their_order() {
    // Distinct values, so a name paired with the wrong counter shows.
    let counts = PacketInCounts {
        received: 1,
        not_network_policy: 2,
        rate_limited: 3,
        malformed: 4,
        logged: 5,
        log_failed: 6,
        rejected: 7,
        reject_suppressed: 8,
        reject_failed: 9,
        panicked: 10,
    };
    let json = serde_json::to_value(&counts).expect("serializes");
    let from_json: Vec<(String, u64)> = json
        .as_object()
        .expect("an object")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("a count")))
        .collect();
    let typed: Vec<(String, u64)> = counts
        .by_outcome()
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(typed, from_json);
}
