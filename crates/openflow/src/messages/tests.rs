//! Codec tests: round trips of every message, golden bytes, and decoders that never panic on
//! arbitrary input.

use super::*;
use crate::flow::{ip_proto, Action, CtAction, CtZone, Match, RegRange, SetField};
use crate::flow::{AggregateStats, Flow, FlowFilter};
use crate::oxm::decode_match;
use crate::{Group, Meter};
use proptest::prelude::*;

fn sample_flow() -> Flow {
    Flow::new(
        10,
        100,
        Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .tp_dst(8080)
            .reg(1, 0x14, None),
    )
    .cookie(0x1020000000000)
    .action(Action::SetField(SetField::Reg {
        idx: 6,
        value: 0xa,
        mask: None,
    }))
    .action(Action::Ct(CtAction {
        commit: true,
        table: Some(13),
        zone: CtZone::Immediate(65520),
        exec: vec![Action::SetField(SetField::CtLabel {
            value: 0xa,
            mask: Some(0xffff_ffff),
        })],
    }))
    .action(Action::OutputReg(RegRange::whole(1)))
    .goto(13)
}

#[test]
fn flow_mod_roundtrips() {
    let fm = FlowMod::add(sample_flow());
    let b = flow_mod(42, &fm).unwrap();
    assert_eq!(b.len() % 8, 0);
    let (h, m) = decode_message(&b).unwrap();
    assert_eq!(h.xid, 42);
    assert_eq!(m, Message::FlowMod(Box::new(fm)));
}

#[test]
fn bundle_add_wraps_flow_mod_with_same_xid() {
    let mut w = Writer::new();
    let fm = FlowMod::delete_strict(sample_flow());
    write_bundle_add_flow_mod(&mut w, 9, 3, bundle_flags::ATOMIC, &fm).unwrap();
    let (h, m) = decode_message(&w.buf).unwrap();
    assert_eq!(h.msg_type, msg_type::BUNDLE_ADD_MESSAGE);
    let Message::BundleAdd {
        bundle_id: 3,
        flags: 1,
        inner,
    } = m
    else {
        panic!("{m:?}")
    };
    let (ih, im) = decode_message(&inner).unwrap();
    assert_eq!(ih.xid, 9);
    assert_eq!(im, Message::FlowMod(Box::new(fm)));
}

#[test]
fn group_and_meter_mods_roundtrip() {
    let g = Group {
        group_id: 4,
        buckets: vec![
            vec![Action::Resubmit {
                in_port: None,
                table: Some(13),
            }],
            vec![
                Action::SetField(SetField::Reg {
                    idx: 0,
                    value: 0x400000,
                    mask: Some(0x600000),
                }),
                Action::Resubmit {
                    in_port: None,
                    table: Some(15),
                },
            ],
        ],
    };
    let b = group_mod(1, GroupCommand::Add, &g).unwrap();
    let (_, m) = decode_message(&b).unwrap();
    assert_eq!(
        m,
        Message::GroupMod(GroupModMsg {
            command: 0,
            group_type: 0,
            group: g
        })
    );
    let (_, m) = decode_message(&group_delete_all(2)).unwrap();
    assert!(matches!(
        m,
        Message::GroupMod(GroupModMsg {
            command: 2,
            group: Group {
                group_id: OFPG_ALL,
                ..
            },
            ..
        })
    ));

    let meter = Meter {
        meter_id: 256,
        rate_pps: 5000,
        burst: 10000,
    };
    let (_, m) = decode_message(&meter_mod(3, MeterCommand::Add, &meter).unwrap()).unwrap();
    assert_eq!(
        m,
        Message::MeterMod(MeterModMsg {
            command: 0,
            flags: 6,
            meter_id: 256,
            bands: vec![(1, 5000, 10000)]
        })
    );
    let (_, m) = decode_message(&meter_delete_all(4)).unwrap();
    assert!(matches!(
        m,
        Message::MeterMod(MeterModMsg {
            command: 2,
            meter_id: OFPM_ALL,
            ..
        })
    ));
}

#[test]
fn decodes_errors_with_names() {
    // OVS's reply to a flow_mod naming a missing group (captured from ovs-ofctl).
    let mut w = Writer::new();
    let s = begin_msg(&mut w, msg_type::ERROR, 0x44);
    w.u16(2);
    w.u16(9);
    w.bytes(&flow_mod(0x44, &FlowMod::add(sample_flow())).unwrap());
    end_msg(&mut w, s).unwrap();
    let (h, m) = decode_message(&w.buf).unwrap();
    assert_eq!(h.xid, 0x44);
    let Message::Error(e) = m else { panic!() };
    assert_eq!(e.name(), "OFPBAC_BAD_OUT_GROUP");
    assert_eq!(e.describe(), "OFPBAC_BAD_OUT_GROUP (type 2, code 9)");
    let fr = e.failed_request().unwrap();
    assert_eq!((fr.msg_type, fr.xid), (msg_type::FLOW_MOD, 0x44));
    let e = ErrorMsg {
        err_type: 17,
        code: 13,
        experimenter: None,
        data: vec![],
    };
    assert_eq!(e.name(), "OFPBFC_MSG_FAILED");
    assert_eq!(e.failed_request(), None);
}

#[test]
fn errors_name_the_flow_they_answer() {
    let fm = FlowMod::add(sample_flow());
    let error = |request: Vec<u8>| {
        let mut w = Writer::new();
        let s = begin_msg(&mut w, msg_type::ERROR, 9);
        w.u16(2);
        w.u16(9);
        w.bytes(&request);
        end_msg(&mut w, s).unwrap();
        match decode_message(&w.buf).unwrap().1 {
            Message::Error(e) => e,
            m => panic!("{m:?}"),
        }
    };
    let e = error(flow_mod(9, &fm).unwrap());
    assert_eq!(e.failed_flow(), Some(fm.flow.clone()));
    let mut w = Writer::new();
    write_bundle_add_flow_mod(&mut w, 9, 1, bundle_flags::ATOMIC, &fm).unwrap();
    let e = error(w.into_vec());
    assert_eq!(
        e.failed_request().map(|h| h.msg_type),
        Some(msg_type::BUNDLE_ADD_MESSAGE)
    );
    assert_eq!(e.failed_flow(), Some(fm.flow));
    // Only the start of a request (or something else entirely): no flow.
    assert_eq!(error(barrier_request(3)).failed_flow(), None);
    assert_eq!(error(vec![6, 14, 0]).failed_flow(), None);
}

#[test]
fn config_async_and_stats_requests() {
    let (_, m) = decode_message(&set_config(1, 0, MISS_SEND_LEN_NO_BUFFER)).unwrap();
    assert_eq!(
        m,
        Message::Config {
            flags: 0,
            miss_send_len: 0xffff
        }
    );
    let cfg = AsyncConfig::agent();
    let (_, m) = decode_message(&set_async(2, &cfg)).unwrap();
    assert_eq!(m, Message::Async(cfg));
    let filter = FlowFilter::table(15)
        .cookie(0x1020000000000, u64::MAX)
        .matching(Match::new().reg(1, 0x14, None));
    let (h, m) = decode_message(&flow_stats_request(3, &filter).unwrap()).unwrap();
    assert_eq!(h.msg_type, msg_type::MULTIPART_REQUEST);
    let Message::MultipartRequest {
        mp_type: multipart::FLOW,
        body,
        ..
    } = m
    else {
        panic!("{m:?}")
    };
    let mut r = Reader::new(&body, "t");
    assert_eq!(r.u8().unwrap(), 15);
    r.skip(3 + 4 + 4 + 4).unwrap();
    assert_eq!(r.u64().unwrap(), 0x1020000000000);
    assert_eq!(r.u64().unwrap(), u64::MAX);
    assert_eq!(decode_match(&mut r).unwrap(), filter.matches);
    let agg = AggregateStats {
        packet_count: 5,
        byte_count: 600,
        flow_count: 7,
    };
    assert_eq!(decode_aggregate(&aggregate_body_of(&agg).unwrap()).unwrap(), agg);
    assert!(resume(
        1,
        &PacketIn {
            packet: vec![1],
            total_len: 1,
            buffer_id: None,
            table_id: 0,
            cookie: 0,
            reason: 0,
            metadata: Match::new(),
            other_metadata: vec![],
            userdata: vec![],
            continuation: None,
            metadata_raw: vec![],
        }
    )
    .is_err());
}

#[test]
fn hello_and_nx_messages() {
    let (h, m) = decode_message(&hello(1)).unwrap();
    assert_eq!(h.version, 6);
    assert_eq!(m, Message::Hello { versions: Some(0x40) });
    let b = set_controller_id(5, 32776);
    assert_eq!(b.len(), 24);
    assert_eq!(&b[16..], &[0, 0, 0, 0, 0, 0, 0x80, 0x08]);
    let b = set_packet_in_format(6, NXPIF_NXT_PACKET_IN2);
    let (_, m) = decode_message(&b).unwrap();
    assert_eq!(
        m,
        Message::Experimenter {
            experimenter: NX_VENDOR_ID,
            exp_type: nxt::SET_PACKET_IN_FORMAT,
            data: vec![0, 0, 0, 2]
        }
    );
    assert_eq!(bundle_control(7, 1, bundle_ctrl::OPEN_REQUEST, 3).len(), 16);
}

#[test]
fn group_add_or_mod_uses_ovs_command() {
    let b = group_mod(
        1,
        GroupCommand::AddOrModify,
        &Group {
            group_id: 9,
            buckets: vec![vec![]],
        },
    )
    .unwrap();
    assert_eq!(&b[8..10], &[0x80, 0]);
}

proptest! {
    #[test]
    fn decode_multipart_bodies_never_panic(b in proptest::collection::vec(any::<u8>(), 0..100)) {
        let _ = decode_group_desc_ids(&b);
        let _ = decode_meter_config_ids(&b);
    }

    #[test]
    fn decode_message_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_message(&b);
    }

    #[test]
    fn decode_typed_bodies_never_panic(t in 0u8..40, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        // A valid OF1.5 header of each type with an arbitrary body.
        let len = body.len() + 8;
        let mut b = vec![6, t, (len >> 8) as u8, len as u8, 0, 0, 0, 1];
        b.extend_from_slice(&body);
        let _ = decode_message(&b);
    }
}
