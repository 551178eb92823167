//! Reject replies built from real packets and parsed back field by field; checksums are
//! verified with an independent RFC 1071 implementation.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder, SlicedPacket, TransportSlice};

use super::*;
use crate::attachment::{AttachedInterface, EntityRef};

const PEER_MAC: [u8; 6] = [0x02, 0x42, 0, 0, 0, 0x01];
const VM_MAC: [u8; 6] = [0x02, 0x42, 0, 0, 0, 0x09];
const PEER4: [u8; 4] = [172, 16, 100, 5];
const VM4: [u8; 4] = [10, 0, 0, 9];
const HOST_PORT: u32 = 20;
const UPLINK_PORT: u32 = 21;

fn peer6() -> [u8; 16] {
    "fd00:99::5".parse::<Ipv6Addr>().expect("ip").octets()
}
fn vm6() -> [u8; 16] {
    "fd00:99::9".parse::<Ipv6Addr>().expect("ip").octets()
}

fn interfaces() -> Vec<AttachedInterface> {
    vec![
        AttachedInterface {
            name: "eth1".into(),
            ofport: 30,
            uplink_name: "eth1~".into(),
            uplink_ofport: 31,
            ips: vec!["192.168.5.5".parse().expect("ip")],
            entity: EntityRef {
                namespace: "vm-ns".into(),
                name: "vm1-11111".into(),
            },
        },
        AttachedInterface {
            name: "eth0".into(),
            ofport: HOST_PORT,
            uplink_name: "eth0~".into(),
            uplink_ofport: UPLINK_PORT,
            ips: vec![IpAddr::from(VM4), IpAddr::from(vm6())],
            entity: EntityRef {
                namespace: "vm-ns".into(),
                name: "vm1-2a3b4".into(),
            },
        },
    ]
}

/// RFC 1071 one's-complement sum of 16-bit words.
fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn folds_to_zero(acc: u32) -> bool {
    let mut a = acc;
    while a > 0xffff {
        a = (a & 0xffff) + (a >> 16);
    }
    a == 0xffff
}

/// Whether the L4 checksum of `segment` (TCP, ICMPv6) is valid for the given pseudo header.
fn l4_checksum_ok(src: &[u8], dst: &[u8], proto: u8, segment: &[u8]) -> bool {
    let mut acc = sum16(src, 0);
    acc = sum16(dst, acc);
    acc += u32::from(proto);
    acc += segment.len() as u32;
    folds_to_zero(sum16(segment, acc))
}

fn frame(b: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = Vec::new();
    b(&mut v);
    v
}

fn tcp_syn_from_peer(seq: u32) -> Vec<u8> {
    frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, VM4, 64)
            .tcp(40000, 22, seq, 64240)
            .syn()
            .write(v, &[])
            .expect("build")
    })
}

fn reply(frame: &[u8], in_port: Option<u32>) -> PacketOut {
    match build_reject(frame, in_port, &interfaces(), 0x1234) {
        Ok(RejectOutcome::Reply(po)) => *po,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn mark() -> Action {
    Action::SetField(SetField::Reg {
        idx: 0,
        value: 0x2000,
        mask: Some(0x2000),
    })
}

/// Checks the IPv4 header of a reply and returns it.
fn check_ipv4(p: &SlicedPacket<'_>, src: [u8; 4], dst: [u8; 4], proto: IpNumber) -> Ipv4Header {
    let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4: {:?}", p.net);
    };
    let h = ip.header().to_header();
    assert_eq!(h.source, src);
    assert_eq!(h.destination, dst);
    assert_eq!(h.time_to_live, 128);
    assert_eq!(h.identification, 0x1234);
    assert_eq!(h.protocol, proto);
    assert_eq!(
        h.header_checksum,
        h.calc_header_checksum(),
        "IPv4 header checksum"
    );
    assert!(
        folds_to_zero(sum16(ip.header().slice(), 0)),
        "IPv4 header checksum (RFC 1071)"
    );
    assert_eq!(
        usize::from(h.total_len),
        ip.header().slice().len() + ip.payload().payload.len()
    );
    h
}

#[test]
fn g17_tcp_syn_rejected_by_an_ingress_rule_gets_rst_ack_out_of_the_uplink() {
    let f = tcp_syn_from_peer(0xfffffff0);
    let po = reply(&f, Some(UPLINK_PORT));
    assert_eq!(po.in_port, HOST_PORT);
    assert_eq!(po.actions, vec![mark(), Action::Output(UPLINK_PORT)]);
    assert_eq!(po.metadata, Match::new());
    let p = SlicedPacket::from_ethernet(&po.packet).expect("reply parses");
    let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else {
        panic!("no Ethernet header");
    };
    assert_eq!(eth.source(), VM_MAC);
    assert_eq!(eth.destination(), PEER_MAC);
    assert_eq!(eth.ether_type(), etherparse::EtherType::IPV4);
    check_ipv4(&p, VM4, PEER4, IpNumber::TCP);
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        panic!("not TCP");
    };
    assert_eq!(tcp.source_port(), 22);
    assert_eq!(tcp.destination_port(), 40000);
    assert!(tcp.rst() && tcp.ack());
    assert!(!tcp.syn() && !tcp.fin() && !tcp.psh() && !tcp.urg());
    assert_eq!(tcp.sequence_number(), 0);
    assert_eq!(tcp.acknowledgment_number(), 0xfffffff1);
    assert_eq!(tcp.window_size(), 0);
    assert_eq!(tcp.data_offset(), 5);
    assert!(tcp.payload().is_empty());
    assert_eq!(
        Some(tcp.checksum()),
        tcp.calc_checksum_ipv4(VM4, PEER4).ok(),
        "TCP checksum (etherparse)"
    );
    assert!(
        l4_checksum_ok(&VM4, &PEER4, 6, tcp.slice()),
        "TCP checksum (RFC 1071)"
    );
    // Exactly the frame size of a 20+20 byte IPv4/TCP packet behind Ethernet.
    assert_eq!(po.packet.len(), 14 + 20 + 20);
}

#[test]
fn egress_rejects_go_back_into_the_vm_and_the_ack_covers_syn_fin_and_data() {
    // The VM sends SYN+FIN with 5 bytes of data to the peer; an egress rule rejects it.
    let f = frame(|v| {
        PacketBuilder::ethernet2(VM_MAC, PEER_MAC)
            .ipv4(VM4, PEER4, 64)
            .tcp(51000, 443, 100, 1000)
            .syn()
            .fin()
            .write(v, b"hello")
            .expect("build")
    });
    let po = reply(&f, Some(HOST_PORT));
    assert_eq!(po.in_port, UPLINK_PORT);
    assert_eq!(po.actions, vec![mark(), Action::Output(HOST_PORT)]);
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    check_ipv4(&p, PEER4, VM4, IpNumber::TCP);
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        panic!("not TCP");
    };
    assert_eq!((tcp.source_port(), tcp.destination_port()), (443, 51000));
    assert_eq!(tcp.acknowledgment_number(), 100 + 5 + 2);
    assert!(l4_checksum_ok(&PEER4, &VM4, 6, tcp.slice()));
}

#[test]
fn a_segment_with_ack_gets_a_bare_reset_at_its_ack_number() {
    let f = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, VM4, 64)
            .tcp(40000, 22, 5000, 500)
            .ack(777_777)
            .psh()
            .write(v, b"data")
            .expect("build")
    });
    let po = reply(&f, Some(UPLINK_PORT));
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        panic!("not TCP");
    };
    assert!(tcp.rst());
    assert!(!tcp.ack());
    assert_eq!(tcp.sequence_number(), 777_777);
    assert_eq!(tcp.acknowledgment_number(), 0);
    assert!(l4_checksum_ok(&VM4, &PEER4, 6, tcp.slice()));
}

#[test]
fn udp_over_ipv4_gets_icmp_host_administratively_prohibited_quoting_header_and_8_bytes() {
    let payload = [0xabu8; 100];
    let f = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, VM4, 64)
            .udp(5353, 53)
            .write(v, &payload)
            .expect("build")
    });
    let po = reply(&f, Some(UPLINK_PORT));
    assert_eq!(po.in_port, HOST_PORT);
    assert_eq!(po.actions, vec![mark(), Action::Output(UPLINK_PORT)]);
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    check_ipv4(&p, VM4, PEER4, IpNumber::ICMP);
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("not ICMP: {:?}", p.transport);
    };
    assert_eq!(icmp.type_u8(), 3);
    assert_eq!(icmp.code_u8(), 10);
    assert_eq!(icmp.bytes5to8(), [0; 4]);
    let original_ip = &f[14..];
    assert_eq!(icmp.payload(), &original_ip[..28], "IPv4 header + 8 bytes");
    assert!(folds_to_zero(sum16(icmp.slice(), 0)), "ICMP checksum");
    assert_eq!(po.packet.len(), 14 + 20 + 8 + 28);
}

#[test]
fn ipv4_options_are_quoted_with_the_header() {
    let mut h = Ipv4Header::new(0, 64, IpNumber::UDP, PEER4, VM4).expect("hdr");
    h.options = [1u8, 1, 1, 1, 1, 1, 1, 0].into(); // NOPs + EOL
    let f = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ip(IpHeaders::Ipv4(h, Default::default()))
            .udp(1, 2)
            .write(v, &[7; 40])
            .expect("build")
    });
    let po = reply(&f, Some(UPLINK_PORT));
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("not ICMP");
    };
    assert_eq!(icmp.payload(), &f[14..14 + 28 + 8]);
    assert!(folds_to_zero(sum16(icmp.slice(), 0)));
}

#[test]
fn ipv6_gets_icmpv6_admin_prohibited_quoting_up_to_the_minimum_mtu() {
    for (len, quoted) in [(10usize, 40 + 8 + 10), (4000, 1232)] {
        let payload = vec![0x5au8; len];
        let f = frame(|v| {
            PacketBuilder::ethernet2(VM_MAC, PEER_MAC)
                .ipv6(vm6(), peer6(), 64)
                .udp(40000, 9999)
                .write(v, &payload)
                .expect("build")
        });
        let po = reply(&f, Some(HOST_PORT));
        assert_eq!(po.in_port, UPLINK_PORT);
        assert_eq!(po.actions, vec![mark(), Action::Output(HOST_PORT)]);
        let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
        let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else {
            panic!("not IPv6");
        };
        let h = ip.header();
        assert_eq!(h.source(), peer6());
        assert_eq!(h.destination(), vm6());
        assert_eq!(h.hop_limit(), 128);
        assert_eq!(h.next_header(), IpNumber::IPV6_ICMP);
        assert_eq!(h.traffic_class(), 0);
        assert_eq!(usize::from(h.payload_length()), 8 + quoted);
        let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
            panic!("not ICMPv6");
        };
        assert_eq!(icmp.type_u8(), 1);
        assert_eq!(icmp.code_u8(), 1);
        assert_eq!(icmp.bytes5to8(), [0; 4]);
        assert_eq!(icmp.payload(), &f[14..14 + quoted]);
        assert!(
            l4_checksum_ok(&peer6(), &vm6(), 58, icmp.slice()),
            "ICMPv6 checksum"
        );
        assert!(po.packet.len() - 14 <= IPV6_MIN_MTU);
    }
}

#[test]
fn tcp_over_ipv6_gets_a_reset() {
    let f = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv6(peer6(), vm6(), 64)
            .tcp(40000, 22, 42, 1000)
            .syn()
            .write(v, &[])
            .expect("build")
    });
    let po = reply(&f, Some(UPLINK_PORT));
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        panic!("not TCP");
    };
    assert!(tcp.rst() && tcp.ack());
    assert_eq!(tcp.acknowledgment_number(), 43);
    assert!(l4_checksum_ok(&vm6(), &peer6(), 6, tcp.slice()));
    assert_eq!(Some(tcp.checksum()), tcp.calc_checksum_ipv6(vm6(), peer6()).ok());
}

#[test]
fn icmp_echo_and_sctp_get_unreachable_but_icmp_errors_do_not() {
    let echo = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, VM4, 64)
            .icmpv4_echo_request(1, 2)
            .write(v, &[0; 16])
            .expect("build")
    });
    let po = reply(&echo, Some(UPLINK_PORT));
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    assert!(matches!(&p.transport, Some(TransportSlice::Icmpv4(i)) if i.type_u8() == 3));

    let mut sctp_hdr = Ipv4Header::new(0, 64, IpNumber::SCTP, PEER4, VM4).expect("hdr");
    sctp_hdr.identification = 9;
    let sctp = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ip(IpHeaders::Ipv4(sctp_hdr, Default::default()))
            .write(
                v,
                IpNumber::SCTP,
                &[0x9c, 0x40, 0x0b, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0],
            )
            .expect("build")
    });
    let po = reply(&sctp, Some(UPLINK_PORT));
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    assert!(matches!(&p.transport, Some(TransportSlice::Icmpv4(i)) if i.code_u8() == 10));

    let unreachable = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, VM4, 64)
            .icmpv4_raw(3, 3, [0; 4])
            .write(v, &[0; 28])
            .expect("build")
    });
    assert_eq!(
        build_reject(&unreachable, Some(UPLINK_PORT), &interfaces(), 1),
        Ok(RejectOutcome::Suppressed(Suppressed::IcmpError))
    );
    let v6_error = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv6(peer6(), vm6(), 64)
            .icmpv6_raw(1, 1, [0; 4])
            .write(v, &[0; 48])
            .expect("build")
    });
    assert_eq!(
        build_reject(&v6_error, Some(UPLINK_PORT), &interfaces(), 1),
        Ok(RejectOutcome::Suppressed(Suppressed::IcmpError))
    );
    let v6_echo = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv6(peer6(), vm6(), 64)
            .icmpv6_echo_request(1, 1)
            .write(v, &[0; 8])
            .expect("build")
    });
    assert!(matches!(
        build_reject(&v6_echo, Some(UPLINK_PORT), &interfaces(), 1),
        Ok(RejectOutcome::Reply(_))
    ));
}

#[test]
fn resets_broadcasts_non_unicast_and_later_fragments_are_not_answered() {
    let rst = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, VM4, 64)
            .tcp(1, 2, 3, 4)
            .rst()
            .write(v, &[])
            .expect("build")
    });
    let cases: Vec<(Vec<u8>, Suppressed)> = vec![
        (rst, Suppressed::IncomingReset),
        (
            frame(|v| {
                PacketBuilder::ethernet2(VM_MAC, [0xff; 6])
                    .ipv4([0, 0, 0, 0], [255, 255, 255, 255], 64)
                    .udp(68, 67)
                    .write(v, &[0; 8])
                    .expect("build")
            }),
            Suppressed::LinkMulticast,
        ),
        (
            frame(|v| {
                PacketBuilder::ethernet2(VM_MAC, PEER_MAC)
                    .ipv4(VM4, [224, 0, 0, 251], 64)
                    .udp(5353, 5353)
                    .write(v, &[0; 8])
                    .expect("build")
            }),
            Suppressed::NotUnicast,
        ),
    ];
    for (f, why) in cases {
        assert_eq!(
            build_reject(&f, Some(HOST_PORT), &interfaces(), 1),
            Ok(RejectOutcome::Suppressed(why))
        );
    }
    let mut frag = tcp_syn_from_peer(1);
    frag[14 + 6] = 0;
    frag[14 + 7] = 4; // offset 32 bytes
    assert_eq!(
        build_reject(&frag, Some(UPLINK_PORT), &interfaces(), 1),
        Ok(RejectOutcome::Suppressed(Suppressed::Fragment))
    );
    let mut first = tcp_syn_from_peer(1);
    first[14 + 6] = 0x20; // more fragments
    assert_eq!(
        build_reject(&first, Some(UPLINK_PORT), &interfaces(), 1),
        Ok(RejectOutcome::Suppressed(Suppressed::Fragment))
    );
    assert_eq!(
        Suppressed::Fragment.to_string(),
        "the rejected packet is a fragment"
    );
}

#[test]
fn vlan_tags_are_kept() {
    let f = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .single_vlan(etherparse::VlanId::try_new(100).expect("vlan"))
            .ipv4(PEER4, VM4, 64)
            .udp(1, 2)
            .write(v, &[1; 8])
            .expect("build")
    });
    let po = reply(&f, Some(UPLINK_PORT));
    assert_eq!(&po.packet[..6], &PEER_MAC);
    assert_eq!(&po.packet[6..12], &VM_MAC);
    assert_eq!(&po.packet[12..18], &f[12..18], "802.1Q tag and inner ethertype");
    let p = SlicedPacket::from_ethernet(&po.packet).expect("parse");
    check_ipv4(&p, VM4, PEER4, IpNumber::ICMP);
}

#[test]
fn the_route_falls_back_to_ip_lookup_and_fails_when_nothing_is_local() {
    let vm = IpAddr::from(VM4);
    let peer = IpAddr::from(PEER4);
    let r = route(None, vm, peer, &interfaces()).expect("route");
    assert_eq!(
        r,
        Route {
            kind: RejectKind::LocalToRemote,
            in_port: HOST_PORT,
            out_port: UPLINK_PORT
        }
    );
    let r = route(Some(99), peer, vm, &interfaces()).expect("route");
    assert_eq!(r.kind, RejectKind::RemoteToLocal);
    assert_eq!((r.in_port, r.out_port), (UPLINK_PORT, HOST_PORT));
    // The second interface's ports win over IPs when the packet came in there.
    let r = route(Some(31), vm, peer, &interfaces()).expect("route");
    assert_eq!((r.in_port, r.out_port), (30, 31));
    let other = IpAddr::from(Ipv4Addr::new(8, 8, 8, 8));
    let err = route(Some(99), other, peer, &interfaces()).expect_err("not local");
    assert_eq!(
        err.to_string(),
        "neither source nor destination are on this Node: 172.16.100.5 -> 8.8.8.8"
    );
    let f = frame(|v| {
        PacketBuilder::ethernet2(PEER_MAC, VM_MAC)
            .ipv4(PEER4, [8, 8, 8, 8], 64)
            .udp(1, 2)
            .write(v, &[])
            .expect("build")
    });
    assert!(matches!(
        build_reject(&f, None, &interfaces(), 1),
        Err(RejectError::NotLocal { .. })
    ));
    assert!(matches!(
        build_reject(&[0u8; 20], None, &interfaces(), 1),
        Err(RejectError::Packet(_))
    ));
}

#[test]
fn never_panics_on_mangled_frames() {
    let good = tcp_syn_from_peer(7);
    for i in 0..good.len() {
        for b in [0x00u8, 0xff, 0x45, 0x60, 0x50] {
            let mut f = good.clone();
            f[i] = b;
            let _ = build_reject(&f, Some(UPLINK_PORT), &interfaces(), 1);
            let _ = build_reject(&f[..i], Some(UPLINK_PORT), &interfaces(), 1);
        }
    }
}
