use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use etherparse::PacketBuilder;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::*;

pub(crate) fn record(name: &str, ttl: u32, data: RData) -> Record {
    Record::from_rdata(Name::from_str(name).unwrap(), ttl, data)
}

/// A response to `question` with `answers`.
pub(crate) fn response(question: &str, answers: Vec<Record>) -> Vec<u8> {
    let mut m = Message::new(7, MessageType::Response, OpCode::Query);
    m.add_query(Query::query(Name::from_str(question).unwrap(), RecordType::A));
    for a in answers {
        m.add_answer(a);
    }
    m.to_vec().unwrap()
}

pub(crate) fn udp_frame(payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4([10, 99, 0, 1], [10, 99, 0, 2], 64)
        .udp(53, 40000);
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

fn tcp_frame(seq: u32, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv6([0xfd; 16], [0xfe; 16], 64)
        .tcp(53, 40000, seq, 1000)
        .ack(1);
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

#[test]
fn a_and_aaaa_answers_through_a_cname_chain() {
    let msg = response(
        "www.Allowed.test.",
        vec![
            record(
                "www.allowed.test.",
                300,
                RData::CNAME(CNAME(Name::from_str("edge.cdn.test.").unwrap())),
            ),
            record("edge.cdn.test.", 30, RData::A(A(Ipv4Addr::new(10, 0, 0, 7)))),
            record(
                "edge.cdn.test.",
                60,
                RData::AAAA(AAAA(Ipv6Addr::from_str("fd00::7").unwrap())),
            ),
            record("unrelated.test.", 60, RData::A(A(Ipv4Addr::new(10, 0, 0, 8)))),
        ],
    );
    let frame = udp_frame(&msg);
    let Payload::Udp {
        data: bytes,
        dst_port: 40000,
    } = payload(&frame).unwrap()
    else {
        panic!("not UDP to port 40000")
    };
    let got = answers(bytes).unwrap();
    let names: Vec<(&str, String, u32)> = got
        .iter()
        .map(|a| (a.name.as_str(), a.ip.to_string(), a.ttl))
        .collect();
    assert_eq!(
        names,
        vec![
            ("edge.cdn.test", "10.0.0.7".into(), 30),
            ("edge.cdn.test", "fd00::7".into(), 60),
            ("www.allowed.test", "10.0.0.7".into(), 30),
            ("www.allowed.test", "fd00::7".into(), 60),
        ]
    );
}

#[test]
fn cname_loops_end() {
    let msg = response(
        "a.test.",
        vec![
            record(
                "a.test.",
                5,
                RData::CNAME(CNAME(Name::from_str("b.test.").unwrap())),
            ),
            record(
                "b.test.",
                5,
                RData::CNAME(CNAME(Name::from_str("a.test.").unwrap())),
            ),
        ],
    );
    assert!(answers(&msg).unwrap().is_empty());
}

#[test]
fn malformed_input_is_an_error_never_a_panic() {
    let msg = response(
        "a.test.",
        vec![record("a.test.", 5, RData::A(A(Ipv4Addr::new(1, 2, 3, 4))))],
    );
    for cut in 0..msg.len() {
        let _ = answers(&msg[..cut]);
    }
    assert!(answers(&[0xff; 40]).is_err());
    let mut query = msg.clone();
    query[2] &= 0x7f; // QR bit off: a query
    assert_eq!(answers(&query), Err(DnsError::NotResponse));
    let frame = udp_frame(&msg);
    for cut in 0..frame.len() {
        let _ = payload(&frame[..cut]);
    }
    // Random bytes of many sizes.
    let mut x: u32 = 12345;
    for len in 0..300 {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        let _ = answers(&bytes);
        let _ = payload(&bytes);
    }
}

#[test]
fn a_tcp_response_split_across_segments_is_reassembled() {
    let msg = response(
        "a.test.",
        vec![record("a.test.", 5, RData::A(A(Ipv4Addr::new(1, 2, 3, 4))))],
    );
    let mut stream = (msg.len() as u16).to_be_bytes().to_vec();
    stream.extend_from_slice(&msg);
    let (first, second) = stream.split_at(5);
    let mut r = TcpReassembly::new();
    let f1 = tcp_frame(1000, first);
    let Payload::Tcp { key, seq, data, end } = payload(&f1).unwrap() else {
        panic!()
    };
    let out = r.push(key, seq, data, end);
    assert!(out.messages.is_empty() && !out.dropped);
    // A retransmission of the first segment changes nothing.
    assert_eq!(r.push(key, seq, data, end), Segment::default());
    let f2 = tcp_frame(1005, second);
    let Payload::Tcp { key, seq, data, end } = payload(&f2).unwrap() else {
        panic!()
    };
    let out = r.push(key, seq, data, end);
    assert_eq!(out.messages, vec![msg.clone()]);
    assert!(r.is_empty());
    assert_eq!(answers(&out.messages[0]).unwrap().len(), 1);
    // A gap drops the stream.
    r.push(key, 1, first, false);
    let out = r.push(key, 100, second, false);
    assert!(out.dropped && r.is_empty());
}
