//! Property tests of the whole codec: arbitrary valid flows survive encode → decode (as a
//! flow_mod, inside a bundle_add with any command, and as a flow-stats entry) exactly as
//! [`normalize_flow`] predicts, groups and meters survive their mods, rendering is
//! stable under normalization, and no decoder panics on arbitrary or mutated bytes of any
//! message the switch can send.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnet::{Ipv4Net, Ipv6Net};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

use super::events::{PacketIn, PortDesc, PortReason, PortStatus};
use super::flow::*;
use super::messages::{self, Message};
use super::render::{render_flow, NameMap};
use super::wire::{msg_type, Writer, NX_VENDOR_ID};
use super::{Group, Meter};

// === strategies ===

fn masked32() -> impl Strategy<Value = Masked<u32>> {
    (any::<u32>(), option::of(any::<u32>())).prop_map(|(value, mask)| Masked { value, mask })
}

fn masked16() -> impl Strategy<Value = Masked<u16>> {
    (any::<u16>(), option::of(any::<u16>())).prop_map(|(value, mask)| Masked { value, mask })
}

fn mac() -> impl Strategy<Value = Masked<[u8; 6]>> {
    (any::<[u8; 6]>(), option::of(any::<[u8; 6]>())).prop_map(|(value, mask)| Masked { value, mask })
}

fn net4() -> impl Strategy<Value = Ipv4Net> {
    (any::<u32>(), 0u8..=32).prop_map(|(a, l)| Ipv4Net::new(Ipv4Addr::from(a), l).unwrap_or_default())
}

fn net6() -> impl Strategy<Value = Ipv6Net> {
    (any::<u128>(), 0u8..=128).prop_map(|(a, l)| Ipv6Net::new(Ipv6Addr::from(a), l).unwrap_or_default())
}

fn vlan() -> impl Strategy<Value = Option<Masked<u16>>> {
    prop_oneof![
        Just(None),
        (0u16..4096).prop_map(|v| Match::new().vlan_vid(v).vlan_tci),
        (0u8..8).prop_map(|p| Match::new().vlan_pcp(p).vlan_tci),
        (0u16..4096, 0u8..8).prop_map(|(v, p)| Match::new().vlan_vid(v).vlan_pcp(p).vlan_tci),
        Just(Match::new().no_vlan().vlan_tci),
        (any::<u16>(), 1u16..0x2000).prop_map(|(v, m)| Some(Masked::new(v & 0x1fff, m))),
    ]
}

/// The L3/L4 part of a match, with its prerequisites.
fn l3() -> impl Strategy<Value = Match> {
    let v4 = (
        option::of(net4()),
        option::of(net4()),
        prop_oneof![
            Just(None),
            Just(Some(ip_proto::TCP)),
            Just(Some(ip_proto::UDP)),
            Just(Some(ip_proto::SCTP)),
            Just(Some(ip_proto::ICMP)),
            Just(Some(99u8)),
        ],
        option::of(masked16()),
        option::of(masked16()),
        option::of(masked16()),
        option::of(any::<u8>()),
        option::of(any::<u8>()),
    )
        .prop_map(|(src, dst, proto, tps, tpd, flags, it, ic)| {
            let mut m = Match::new().ipv4();
            m.ipv4_src = src;
            m.ipv4_dst = dst;
            m.ip_proto = proto;
            match proto {
                Some(ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP) => {
                    m.tp_src = tps;
                    m.tp_dst = tpd;
                    if proto == Some(ip_proto::TCP) {
                        m.tcp_flags = flags;
                    }
                }
                Some(ip_proto::ICMP) => {
                    m.icmp_type = it;
                    m.icmp_code = ic;
                }
                _ => {}
            }
            m
        });
    let v6 = (
        option::of(net6()),
        option::of(net6()),
        prop_oneof![
            Just(None),
            Just(Some(ip_proto::TCP)),
            Just(Some(ip_proto::UDP)),
            Just(Some(ip_proto::ICMPV6)),
        ],
        option::of(masked16()),
        option::of(masked16()),
        prop_oneof![Just(None), Just(Some(135u8)), Just(Some(136u8)), Just(Some(1u8))],
        option::of(any::<u8>()),
        (option::of(net6()), option::of(mac())),
    )
        .prop_map(|(src, dst, proto, tps, tpd, it, ic, (target, ll))| {
            let mut m = Match::new().ipv6();
            m.ipv6_src = src;
            m.ipv6_dst = dst;
            m.ip_proto = proto;
            match proto {
                Some(ip_proto::ICMPV6) => {
                    m.icmp_type = it;
                    m.icmp_code = ic;
                    if matches!(it, Some(135 | 136)) {
                        m.nd_target = target;
                        if it == Some(135) {
                            m.nd_sll = ll;
                        } else {
                            m.nd_tll = ll;
                        }
                    }
                }
                Some(_) => {
                    m.tp_src = tps;
                    m.tp_dst = tpd;
                    if proto == Some(ip_proto::TCP) {
                        m.tcp_flags = tps;
                    }
                }
                None => {}
            }
            m
        });
    let arp = (
        option::of(any::<u8>()),
        option::of(net4()),
        option::of(net4()),
        option::of(mac()),
        option::of(mac()),
        any::<bool>(),
    )
        .prop_map(|(op, spa, tpa, sha, tha, rarp)| {
            let mut m = Match::new().eth_type(if rarp { 0x8035 } else { eth_type::ARP });
            m.arp_op = op;
            m.arp_spa = spa;
            m.arp_tpa = tpa;
            m.arp_sha = sha;
            m.arp_tha = tha;
            m
        });
    prop_oneof![
        Just(Match::new()),
        Just(Match::new().eth_type(0x88cc)),
        v4,
        v6,
        arp
    ]
}

/// Any match the codec can encode.
pub fn arb_match() -> impl Strategy<Value = Match> {
    (
        l3(),
        btree_map(0u8..16, masked32(), 0..4),
        (option::of(masked32()), option::of(any::<u32>())),
        (option::of((any::<u32>(), any::<u32>())), option::of(any::<u16>())),
        (
            option::of(masked32()),
            option::of((any::<u128>(), option::of(any::<u128>()))),
        ),
        (
            option::of((any::<u64>(), option::of(any::<u64>()))),
            option::of(any::<u32>()),
        ),
        (vlan(), option::of(mac()), option::of(mac())),
    )
        .prop_map(
            |(
                mut m,
                regs,
                (pkt_mark, conj),
                (ct_state, ct_zone),
                (ct_mark, ct_label),
                (meta, in_port),
                (vlan, src, dst),
            )| {
                m.regs = regs;
                m.pkt_mark = pkt_mark;
                m.conj_id = conj;
                m.ct_state = ct_state.map(|(value, mask)| CtStateMatch { value, mask });
                m.ct_zone = ct_zone;
                m.ct_mark = ct_mark;
                m.ct_label = ct_label.map(|(value, mask)| Masked { value, mask });
                m.metadata = meta.map(|(value, mask)| Masked { value, mask });
                m.in_port = in_port;
                m.vlan_tci = vlan;
                m.eth_src = src;
                m.eth_dst = dst;
                m
            },
        )
}

fn reg_range() -> impl Strategy<Value = RegRange> {
    (0u8..16, 0u8..32)
        .prop_flat_map(|(reg, ofs)| (Just(reg), Just(ofs), 1u8..=(32 - ofs)))
        .prop_map(|(reg, ofs, n_bits)| RegRange { reg, ofs, n_bits })
}

fn nonzero32() -> impl Strategy<Value = Option<u32>> {
    option::of(1u32..)
}

fn set_field() -> impl Strategy<Value = SetField> {
    prop_oneof![
        (0u8..16, any::<u32>(), nonzero32()).prop_map(|(idx, value, mask)| SetField::Reg {
            idx,
            value,
            mask
        }),
        (any::<u32>(), nonzero32()).prop_map(|(value, mask)| SetField::CtMark { value, mask }),
        (any::<u32>(), nonzero32()).prop_map(|(value, mask)| SetField::PktMark { value, mask }),
        (any::<u128>(), option::of(1u128..)).prop_map(|(value, mask)| SetField::CtLabel { value, mask }),
        (any::<u64>(), option::of(1u64..)).prop_map(|(value, mask)| SetField::Metadata { value, mask }),
        any::<[u8; 6]>().prop_map(SetField::EthSrc),
        any::<[u8; 6]>().prop_map(SetField::EthDst),
        any::<u32>().prop_map(|a| SetField::Ipv4Src(a.into())),
        any::<u32>().prop_map(|a| SetField::Ipv4Dst(a.into())),
        any::<u128>().prop_map(|a| SetField::Ipv6Src(a.into())),
        any::<u128>().prop_map(|a| SetField::Ipv6Dst(a.into())),
        any::<u16>().prop_map(SetField::TcpSrc),
        any::<u16>().prop_map(SetField::TcpDst),
        any::<u16>().prop_map(SetField::UdpSrc),
        any::<u16>().prop_map(SetField::UdpDst),
    ]
}

fn port16() -> impl Strategy<Value = u32> {
    prop_oneof![
        1u32..0xff00,
        Just(port::IN_PORT),
        Just(port::LOCAL),
        Just(port::CONTROLLER),
        Just(port::NORMAL)
    ]
}

fn nat() -> impl Strategy<Value = NatAction> {
    let addrs = prop_oneof![
        (1u32.., 1u32..).prop_map(|(a, b)| (IpAddr::V4(a.into()), IpAddr::V4(b.into()))),
        (1u128.., 1u128..).prop_map(|(a, b)| (IpAddr::V6(a.into()), IpAddr::V6(b.into()))),
        (1u32..).prop_map(|a| (IpAddr::V4(a.into()), IpAddr::V4(a.into()))),
    ];
    (
        prop_oneof![Just(None), Just(Some(NatKind::Src)), Just(Some(NatKind::Dst))],
        option::of(addrs),
        option::of((1u16.., 1u16..)),
        any::<(bool, bool, bool)>(),
    )
        .prop_map(|(kind, addrs, ports, (persistent, hash, random))| {
            let addrs = kind.and(addrs);
            NatAction {
                kind,
                addrs,
                ports: addrs.and(ports),
                persistent,
                hash,
                random,
            }
        })
}

fn ct_exec() -> impl Strategy<Value = Vec<Action>> {
    (
        option::of(nat()),
        vec(
            prop_oneof![
                (any::<u32>(), nonzero32()).prop_map(|(value, mask)| SetField::CtMark { value, mask }),
                (any::<u128>(), option::of(1u128..))
                    .prop_map(|(value, mask)| SetField::CtLabel { value, mask }),
            ],
            0..3,
        ),
    )
        .prop_map(|(nat, sets)| {
            nat.map(Action::Nat)
                .into_iter()
                .chain(sets.into_iter().map(Action::SetField))
                .collect()
        })
}

/// Any action the codec can encode (at the top level).
pub fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        any::<u32>().prop_map(Action::Output),
        reg_range().prop_map(Action::OutputReg),
        set_field().prop_map(Action::SetField),
        (
            any::<bool>(),
            option::of(0u8..255),
            prop_oneof![
                any::<u16>().prop_map(CtZone::Immediate),
                reg_range().prop_map(CtZone::Field)
            ],
            ct_exec()
        )
            .prop_map(|(commit, table, zone, exec)| Action::Ct(CtAction {
                commit,
                table,
                zone,
                exec
            })),
        Just(Action::CtClear),
        (any::<u32>(), 2u8..=64)
            .prop_flat_map(|(id, n)| (Just(id), 1u8..=n, Just(n)))
            .prop_map(|(id, clause, n_clauses)| Action::Conjunction {
                id,
                clause,
                n_clauses
            }),
        (
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            vec(any::<u8>(), 0..8),
            any::<bool>(),
            option::of(any::<u32>())
        )
            .prop_map(|(max_len, controller_id, reason, userdata, pause, meter_id)| {
                Action::Controller(ControllerAction {
                    max_len,
                    controller_id,
                    reason,
                    userdata,
                    pause,
                    meter_id,
                })
            }),
        any::<u32>().prop_map(Action::Meter),
        any::<u32>().prop_map(Action::Group),
        (option::of(port16()), option::of(0u8..255))
            .prop_map(|(in_port, table)| Action::Resubmit { in_port, table }),
        (option::of(port16()), option::of(0u8..255))
            .prop_map(|(in_port, table)| Action::ResubmitCt { in_port, table }),
        (reg_range(), 0u8..16, 0u8..32).prop_map(|(src, reg, ofs)| {
            let n_bits = src.n_bits.min(32 - ofs);
            Action::Move {
                src: RegRange { n_bits, ..src },
                dst: RegRange { reg, ofs, n_bits },
            }
        }),
        vec(any::<u8>(), 0..20).prop_map(Action::Note),
    ]
}

/// Any flow the codec can encode.
pub fn arb_flow() -> impl Strategy<Value = Flow> {
    (
        (0u8..255, any::<u16>(), any::<u64>(), any::<u16>(), any::<u16>()),
        arb_match(),
        vec(arb_action(), 0..5),
        option::of(0u8..255),
    )
        .prop_map(
            |((table, priority, cookie, idle, hard), matches, actions, goto_table)| Flow {
                table,
                priority,
                matches,
                cookie,
                idle_timeout: idle,
                hard_timeout: hard,
                actions,
                goto_table,
            },
        )
}

fn packet_in() -> impl Strategy<Value = PacketIn> {
    (
        vec(any::<u8>(), 1..80),
        any::<u8>(),
        any::<u64>(),
        any::<u8>(),
        btree_map(0u8..16, any::<u32>(), 0..4),
        option::of(any::<u32>()),
        vec(any::<u8>(), 0..8),
        option::of(vec(any::<u8>(), 0..40)),
    )
        .prop_map(
            |(packet, table_id, cookie, reason, regs, in_port, userdata, continuation)| {
                let mut metadata = Match::new();
                for (k, v) in regs {
                    metadata = metadata.reg(k, v, None);
                }
                metadata.in_port = in_port;
                PacketIn {
                    total_len: packet.len() as u32,
                    packet,
                    buffer_id: None,
                    table_id,
                    cookie,
                    reason,
                    metadata,
                    other_metadata: Vec::new(),
                    userdata,
                    continuation,
                    metadata_raw: Vec::new(),
                }
            },
        )
}

fn port_desc() -> impl Strategy<Value = PortDesc> {
    (
        any::<u32>(),
        any::<[u8; 6]>(),
        "[a-z0-9~.]{0,15}",
        any::<(u32, u32, u32, u32)>(),
        any::<(u32, u32, u32)>(),
    )
        .prop_map(
            |(
                port_no,
                hw_addr,
                name,
                (config, state, curr, advertised),
                (supported, curr_speed, max_speed),
            )| {
                PortDesc {
                    port_no,
                    hw_addr,
                    name,
                    config,
                    state,
                    curr,
                    advertised,
                    supported,
                    peer: 0,
                    curr_speed,
                    max_speed,
                }
            },
        )
}

/// A multipart reply message around `body`.
fn multipart_reply(mp_type: u16, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    let s = super::wire::begin_msg(&mut w, msg_type::MULTIPART_REPLY, 9);
    w.u16(mp_type);
    w.u16(flags);
    w.zeros(4);
    w.bytes(body);
    super::wire::end_msg(&mut w, s).expect("length");
    w.into_vec()
}

/// Mutates `b`: overwrites `n` bytes and truncates to `cut` (modulo the length).
fn mutate(mut b: Vec<u8>, edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    if b.is_empty() {
        return b;
    }
    let len = b.len();
    for (at, v) in edits {
        b[at % len] = *v;
    }
    b.truncate(len - cut % len.max(1));
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn flow_mod_roundtrip_is_normalization(f in arb_flow()) {
        let fm = FlowMod::add(f.clone());
        let bytes = messages::flow_mod(7, &fm).expect("a generated flow encodes");
        let (_, m) = messages::decode_message(&bytes).expect("our own flow_mod decodes");
        let Message::FlowMod(back) = m else { panic!("not a flow_mod") };
        prop_assert_eq!(&back.flow, &normalize_flow(&f));
        // Normalization is idempotent and rendering does not see it.
        prop_assert_eq!(normalize_flow(&back.flow), back.flow.clone());
        prop_assert_eq!(render_flow(&f, &NameMap::new()), render_flow(&back.flow, &NameMap::new()));
    }

    #[test]
    fn flow_stats_roundtrip_is_normalization(fs in vec((arb_flow(), any::<(u64, u64, u32, u16)>()), 0..4)) {
        let entries: Vec<FlowStats> = fs
            .into_iter()
            .map(|(flow, (packet_count, byte_count, secs, flags))| FlowStats {
                flow,
                packet_count,
                byte_count,
                duration: Duration::new(u64::from(secs), 5),
                idle_age: None,
                flags,
                importance: 0,
            })
            .collect();
        let body = messages::flow_stats_body_of(&entries).expect("encode");
        let back = messages::decode_flow_stats(&body).expect("decode");
        let want: Vec<FlowStats> = entries
            .iter()
            .map(|e| FlowStats { flow: normalize_flow(&e.flow), ..e.clone() })
            .collect();
        prop_assert_eq!(back, want);
    }

    #[test]
    fn packet_in2_and_port_status_roundtrip(pi in packet_in(), p in port_desc(), reason in 0u8..4) {
        let bytes = messages::packet_in2(3, &pi).expect("encode");
        let (_, m) = messages::decode_message(&bytes).expect("decode");
        let Message::PacketIn(back) = m else { panic!("not a packet-in") };
        prop_assert_eq!(&back.packet, &pi.packet);
        prop_assert_eq!((back.table_id, back.cookie, back.reason), (pi.table_id, pi.cookie, pi.reason));
        prop_assert_eq!(&back.metadata, &pi.metadata);
        prop_assert_eq!(&back.userdata, &pi.userdata);
        prop_assert_eq!(&back.continuation, &pi.continuation);
        if pi.continuation.is_some() {
            let r = messages::resume(4, &back).expect("resume");
            let (_, m) = messages::decode_message(&r).expect("decode resume");
            let Message::Resume(res) = m else { panic!("not a resume") };
            prop_assert_eq!(&res.continuation, &pi.continuation);
            prop_assert_eq!(&res.metadata, &pi.metadata);
        }
        let ps = PortStatus { reason: PortReason::from_u8(reason), port: p.clone() };
        let bytes = messages::port_status(0, &ps).expect("encode");
        let (_, m) = messages::decode_message(&bytes).expect("decode");
        prop_assert_eq!(m, Message::PortStatus(ps));
        let body = messages::port_desc_body(std::slice::from_ref(&p)).expect("encode");
        prop_assert_eq!(messages::decode_port_descs(&body).expect("decode"), vec![p]);
    }

    #[test]
    fn reply_bodies_never_panic(b in vec(any::<u8>(), 0..300)) {
        let _ = messages::decode_flow_stats(&b);
        let _ = messages::decode_port_descs(&b);
        let _ = messages::decode_aggregate(&b);
        for mp in [1u16, 2, 7, 10, 13] {
            let _ = messages::decode_message(&multipart_reply(mp, 0, &b));
        }
    }

    #[test]
    fn async_messages_never_panic(b in vec(any::<u8>(), 0..300), which in 0u8..4) {
        let mut w = Writer::new();
        let t = match which {
            0 => msg_type::PORT_STATUS,
            1 => msg_type::PACKET_IN,
            2 => msg_type::GET_ASYNC_REPLY,
            _ => msg_type::EXPERIMENTER,
        };
        let s = super::wire::begin_msg(&mut w, t, 0);
        if t == msg_type::EXPERIMENTER {
            w.u32(NX_VENDOR_ID);
            w.u32(messages::nxt::PACKET_IN2);
        }
        w.bytes(&b);
        if super::wire::end_msg(&mut w, s).is_ok() {
            let _ = messages::decode_message(&w.buf);
        }
    }

    #[test]
    fn mutated_replies_never_panic(
        f in vec(arb_flow(), 1..3),
        pi in packet_in(),
        p in port_desc(),
        edits in vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let entries: Vec<FlowStats> = f
            .into_iter()
            .map(|flow| FlowStats {
                flow,
                packet_count: 1,
                byte_count: 2,
                duration: Duration::ZERO,
                idle_age: Some(Duration::from_secs(1)),
                flags: 0,
                importance: 0,
            })
            .collect();
        let flows = multipart_reply(1, 1, &messages::flow_stats_body_of(&entries).expect("encode"));
        let pin = messages::packet_in2(1, &pi).expect("encode");
        let ps = messages::port_status(0, &PortStatus { reason: PortReason::Modify, port: p }).expect("encode");
        for msg in [flows, pin, ps] {
            let bad = mutate(msg, &edits, cut);
            // Keep the header's length consistent half of the time, so decoding goes deep.
            let _ = messages::decode_message(&bad);
            let mut fixed = bad.clone();
            if fixed.len() >= 8 {
                let len = fixed.len() as u16;
                fixed[2..4].copy_from_slice(&len.to_be_bytes());
                if let Ok((_, Message::MultipartReply { body, .. })) = messages::decode_message(&fixed) {
                    let _ = messages::decode_flow_stats(&body);
                }
            }
        }
    }

    #[test]
    fn bundle_add_of_any_flow_mod_roundtrips(
        f in arb_flow(),
        command in 0u8..5,
        (cookie_mask, out_port, out_group, flags) in any::<(u64, u32, u32, u16)>(),
        (xid, bundle_id, bundle_flags) in any::<(u32, u32, u16)>(),
    ) {
        let command = match command {
            0 => FlowModCommand::Add,
            1 => FlowModCommand::Modify,
            2 => FlowModCommand::ModifyStrict,
            3 => FlowModCommand::Delete,
            _ => FlowModCommand::DeleteStrict,
        };
        let fm = FlowMod { command, flow: f, cookie_mask, out_port, out_group, flags };
        let mut w = Writer::new();
        messages::write_bundle_add_flow_mod(&mut w, xid, bundle_id, bundle_flags, &fm).expect("encode");
        let (h, m) = messages::decode_message(&w.buf).expect("our own bundle_add decodes");
        prop_assert_eq!(h.xid, xid);
        let Message::BundleAdd { bundle_id: id, flags: fl, inner } = m else { panic!("not a bundle_add") };
        prop_assert_eq!((id, fl), (bundle_id, bundle_flags));
        let (ih, im) = messages::decode_message(&inner).expect("the wrapped flow_mod decodes");
        prop_assert_eq!(ih.xid, xid);
        let want = FlowMod { flow: normalize_flow(&fm.flow), ..fm };
        prop_assert_eq!(im, Message::FlowMod(Box::new(want)));
    }

    #[test]
    fn group_and_meter_mods_roundtrip(
        group_id in any::<u32>(),
        buckets in vec(vec(arb_action(), 0..4), 0..4),
        command in 0u8..4,
        (meter_id, rate_pps, burst) in any::<(u32, u32, u32)>(),
        meter_command in 0u8..3,
    ) {
        let (command, code) = match command {
            0 => (messages::GroupCommand::Add, 0),
            1 => (messages::GroupCommand::Modify, 1),
            2 => (messages::GroupCommand::Delete, 2),
            _ => (messages::GroupCommand::AddOrModify, 0x8000),
        };
        let g = Group { group_id, buckets };
        let bytes = messages::group_mod(5, command, &g).expect("a generated group encodes");
        let (_, m) = messages::decode_message(&bytes).expect("our own group_mod decodes");
        let want = Group {
            group_id,
            buckets: g.buckets.iter().map(|b| crate::actions::normalize_actions(b)).collect(),
        };
        prop_assert_eq!(
            m,
            Message::GroupMod(messages::GroupModMsg { command: code, group_type: 0, group: want })
        );

        let (meter_command, meter_code) = match meter_command {
            0 => (messages::MeterCommand::Add, 0),
            1 => (messages::MeterCommand::Modify, 1),
            _ => (messages::MeterCommand::Delete, 2),
        };
        let meter = Meter { meter_id, rate_pps, burst };
        let bytes = messages::meter_mod(6, meter_command, &meter).expect("encode");
        let (_, m) = messages::decode_message(&bytes).expect("our own meter_mod decodes");
        prop_assert_eq!(
            m,
            Message::MeterMod(messages::MeterModMsg {
                command: meter_code,
                flags: 6,
                meter_id,
                // A delete names the meter only; add and modify carry the one drop band.
                bands: if meter_code == 2 { vec![] } else { vec![(1, rate_pps, burst)] },
            })
        );
    }
}
