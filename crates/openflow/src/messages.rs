//! OpenFlow 1.5 messages: encoders for everything the agent sends (hello, echo, features,
//! set-config, async config, barrier, flow_mod, bundle control/add, group_mod, meter_mod,
//! multipart requests for flow/aggregate stats, port, group and meter descriptions,
//! packet-out, Nicira set-controller-id, set-packet-in-format and resume) and a decoder for
//! every message the switch sends (errors with type/code names and the failed request, features
//! reply, bundle replies, multipart replies and their bodies, port status, NXT_PACKET_IN2,
//! async config reply) plus the agent's own requests (so tests can check what is sent).
//!
//! Decoding never panics: malformed input is a [`CodecError`]. A message that is well formed
//! but uses something the codec does not model (e.g. an unknown action in a flow-stats entry) is
//! `CodecError::Unsupported`; everything else is malformed.

use std::time::Duration;

use super::actions::{decode_actions, decode_instructions, encode_actions, encode_instructions};
use super::events::{AsyncConfig, AsyncMasks, PacketIn, PacketOut, PortDesc, PortReason, PortStatus};
use super::flow::{port, AggregateStats, Flow, FlowFilter, FlowMod, FlowModCommand, FlowStats, Match};
use super::oxm::{decode_match, decode_oxms_lenient, encode_match, encode_oxms};
use super::wire::{
    begin_msg, end_msg, msg_type, CodecError, Header, Reader, Writer, NX_VENDOR_ID, OFP_HEADER_LEN,
    OFP_VERSION,
};
use super::{Group, Meter};

/// OFP_NO_BUFFER.
const NO_BUFFER: u32 = 0xffff_ffff;
/// OFPG_ALL: every group (group delete).
pub const OFPG_ALL: u32 = 0xffff_fffc;
/// OFPM_ALL: every meter (meter delete).
pub const OFPM_ALL: u32 = 0xffff_ffff;
/// OFPG15_BUCKET_ALL, the command_bucket_id of add/modify/delete.
const BUCKET_ALL: u32 = 0xffff_ffff;

/// Bundle control types (OFPBCT_*).
pub mod bundle_ctrl {
    pub const OPEN_REQUEST: u16 = 0;
    pub const OPEN_REPLY: u16 = 1;
    pub const CLOSE_REQUEST: u16 = 2;
    pub const CLOSE_REPLY: u16 = 3;
    pub const COMMIT_REQUEST: u16 = 4;
    pub const COMMIT_REPLY: u16 = 5;
    pub const DISCARD_REQUEST: u16 = 6;
    pub const DISCARD_REPLY: u16 = 7;
}

/// Bundle flags (OFPBF_*).
pub mod bundle_flags {
    pub const ATOMIC: u16 = 1;
    pub const ORDERED: u16 = 2;
}

/// Nicira message subtypes (NXT_*).
pub mod nxt {
    pub const SET_PACKET_IN_FORMAT: u32 = 16;
    pub const SET_CONTROLLER_ID: u32 = 20;
    pub const RESUME: u32 = 28;
    pub const PACKET_IN2: u32 = 30;
}

/// NXT_SET_PACKET_IN_FORMAT value selecting NXT_PACKET_IN2.
pub const NXPIF_NXT_PACKET_IN2: u32 = 2;

/// Group mod commands (OFPGC_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupCommand {
    Add,
    Modify,
    Delete,
    /// Open vSwitch extension (OFPGC_ADD_OR_MOD = 0x8000): add, or replace if it exists,
    /// without touching the flows that use the group.
    AddOrModify,
}

/// Meter mod commands (OFPMC_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterCommand {
    Add,
    Modify,
    Delete,
}

/// Meter flags (OFPMF_*).
pub mod meter_flags {
    pub const KBPS: u16 = 1;
    pub const PKTPS: u16 = 2;
    pub const BURST: u16 = 4;
    pub const STATS: u16 = 8;
}

// === encoders ===

fn finish(mut w: Writer, start: usize) -> Result<Vec<u8>, CodecError> {
    end_msg(&mut w, start)?;
    Ok(w.into_vec())
}

/// HELLO offering only OpenFlow 1.5 (header version 6 plus a version-bitmap element).
pub fn hello(xid: u32) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    let s = begin_msg(&mut w, msg_type::HELLO, xid);
    w.u16(1); // OFPHET_VERSIONBITMAP
    w.u16(8);
    w.u32(1 << OFP_VERSION);
    finish(w, s).unwrap_or_default()
}

fn simple(t: u8, xid: u32, body: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(OFP_HEADER_LEN + body.len());
    let s = begin_msg(&mut w, t, xid);
    w.bytes(body);
    finish(w, s)
}

pub fn echo_request(xid: u32, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    simple(msg_type::ECHO_REQUEST, xid, data)
}

pub fn echo_reply(xid: u32, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    simple(msg_type::ECHO_REPLY, xid, data)
}

pub fn features_request(xid: u32) -> Vec<u8> {
    simple(msg_type::FEATURES_REQUEST, xid, &[]).unwrap_or_default()
}

pub fn barrier_request(xid: u32) -> Vec<u8> {
    simple(msg_type::BARRIER_REQUEST, xid, &[]).unwrap_or_default()
}

fn command_code(c: FlowModCommand) -> u8 {
    match c {
        FlowModCommand::Add => 0,
        FlowModCommand::Modify => 1,
        FlowModCommand::ModifyStrict => 2,
        FlowModCommand::Delete => 3,
        FlowModCommand::DeleteStrict => 4,
    }
}

/// Appends a FLOW_MOD to `w`.
pub fn write_flow_mod(w: &mut Writer, xid: u32, fm: &FlowMod) -> Result<(), CodecError> {
    let f = &fm.flow;
    let s = begin_msg(w, msg_type::FLOW_MOD, xid);
    w.u64(f.cookie);
    w.u64(fm.cookie_mask);
    w.u8(f.table);
    w.u8(command_code(fm.command));
    w.u16(f.idle_timeout);
    w.u16(f.hard_timeout);
    w.u16(f.priority);
    w.u32(NO_BUFFER);
    w.u32(fm.out_port);
    w.u32(fm.out_group);
    w.u16(fm.flags);
    w.u16(0); // importance
    encode_match(&f.matches, w)?;
    encode_instructions(&f.actions, f.goto_table, w)?;
    end_msg(w, s)
}

pub fn flow_mod(xid: u32, fm: &FlowMod) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(128);
    write_flow_mod(&mut w, xid, fm)?;
    Ok(w.into_vec())
}

/// Appends an OFPT_BUNDLE_CONTROL to `w`.
pub fn write_bundle_control(w: &mut Writer, xid: u32, bundle_id: u32, ctrl: u16, flags: u16) {
    let s = begin_msg(w, msg_type::BUNDLE_CONTROL, xid);
    w.u32(bundle_id);
    w.u16(ctrl);
    w.u16(flags);
    // Cannot fail: 16 bytes.
    let _ = end_msg(w, s);
}

pub fn bundle_control(xid: u32, bundle_id: u32, ctrl: u16, flags: u16) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    write_bundle_control(&mut w, xid, bundle_id, ctrl, flags);
    w.into_vec()
}

/// Appends an OFPT_BUNDLE_ADD_MESSAGE wrapping a flow_mod. The inner message carries the same
/// xid as the bundle_add (OVS rejects a mismatch with OFPBFC_MSG_BAD_XID).
pub fn write_bundle_add_flow_mod(
    w: &mut Writer,
    xid: u32,
    bundle_id: u32,
    flags: u16,
    fm: &FlowMod,
) -> Result<(), CodecError> {
    let s = begin_msg(w, msg_type::BUNDLE_ADD_MESSAGE, xid);
    w.u32(bundle_id);
    w.u16(0);
    w.u16(flags);
    write_flow_mod(w, xid, fm)?;
    end_msg(w, s)
}

fn group_command_code(c: GroupCommand) -> u16 {
    match c {
        GroupCommand::Add => 0,
        GroupCommand::Modify => 1,
        GroupCommand::Delete => 2,
        GroupCommand::AddOrModify => 0x8000,
    }
}

/// GROUP_MOD of type ALL with OpenFlow 1.5 buckets (bucket ids 0, 1, ...).
pub fn group_mod(xid: u32, command: GroupCommand, g: &Group) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(128);
    let s = begin_msg(&mut w, msg_type::GROUP_MOD, xid);
    w.u16(group_command_code(command));
    w.u8(0); // OFPGT_ALL
    w.u8(0);
    w.u32(g.group_id);
    let len_at = w.len();
    w.u16(0); // bucket_array_len
    w.u16(0);
    w.u32(BUCKET_ALL);
    let buckets_start = w.len();
    for (i, actions) in g.buckets.iter().enumerate() {
        let b = w.len();
        w.u16(0);
        w.u16(0);
        w.u32(u32::try_from(i).map_err(|_| CodecError::Invalid("too many buckets".into()))?);
        let a = w.len();
        encode_actions(actions, &mut w)?;
        w.patch_len16(b + 2, a, "bucket actions")?;
        w.patch_len16(b, b, "bucket")?;
    }
    w.patch_len16(len_at, buckets_start, "bucket array")?;
    finish(w, s)
}

/// GROUP_MOD deleting every group.
pub fn group_delete_all(xid: u32) -> Vec<u8> {
    group_mod(
        xid,
        GroupCommand::Delete,
        &Group {
            group_id: OFPG_ALL,
            buckets: vec![],
        },
    )
    .unwrap_or_default()
}

fn meter_command_code(c: MeterCommand) -> u16 {
    match c {
        MeterCommand::Add => 0,
        MeterCommand::Modify => 1,
        MeterCommand::Delete => 2,
    }
}

/// METER_MOD with one drop band and flags `pktps|burst`.
pub fn meter_mod(xid: u32, command: MeterCommand, m: &Meter) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(32);
    let s = begin_msg(&mut w, msg_type::METER_MOD, xid);
    w.u16(meter_command_code(command));
    w.u16(meter_flags::PKTPS | meter_flags::BURST);
    w.u32(m.meter_id);
    if command != MeterCommand::Delete {
        w.u16(1); // OFPMBT_DROP
        w.u16(16);
        w.u32(m.rate_pps);
        w.u32(m.burst);
        w.zeros(4);
    }
    finish(w, s)
}

/// METER_MOD deleting every meter.
pub fn meter_delete_all(xid: u32) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    let s = begin_msg(&mut w, msg_type::METER_MOD, xid);
    w.u16(meter_command_code(MeterCommand::Delete));
    w.u16(0);
    w.u32(OFPM_ALL);
    finish(w, s).unwrap_or_default()
}

/// Multipart types (OFPMP_*).
pub mod multipart {
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const GROUP_DESC: u16 = 7;
    pub const METER_CONFIG: u16 = 10;
    pub const PORT_DESC: u16 = 13;
    /// OFPMPF_REPLY_MORE / OFPMPF_REQ_MORE.
    pub const MORE: u16 = 1;
}

/// OFPT_MULTIPART_REQUEST.
pub fn multipart_request(xid: u32, mp_type: u16, body: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(16 + body.len());
    let s = begin_msg(&mut w, msg_type::MULTIPART_REQUEST, xid);
    w.u16(mp_type);
    w.u16(0);
    w.zeros(4);
    w.bytes(body);
    finish(w, s)
}

/// Group description request for every group.
pub fn group_desc_request(xid: u32) -> Vec<u8> {
    let mut body = OFPG_ALL.to_be_bytes().to_vec();
    body.extend_from_slice(&[0; 4]);
    multipart_request(xid, multipart::GROUP_DESC, &body).unwrap_or_default()
}

/// Meter configuration request for every meter.
pub fn meter_config_request(xid: u32) -> Vec<u8> {
    let mut body = OFPM_ALL.to_be_bytes().to_vec();
    body.extend_from_slice(&[0; 4]);
    multipart_request(xid, multipart::METER_CONFIG, &body).unwrap_or_default()
}

/// The group ids in an OpenFlow 1.5 group description reply body.
pub fn decode_group_desc_ids(body: &[u8]) -> Result<Vec<u32>, CodecError> {
    decode_entry_ids(body, "group desc", "group desc entry", 16)
}

/// The meter ids in a meter configuration reply body.
pub fn decode_meter_config_ids(body: &[u8]) -> Result<Vec<u32>, CodecError> {
    decode_entry_ids(body, "meter config", "meter config entry", 8)
}

/// The ids of a multipart reply body made of entries that start with a 16-bit length, 2 bytes
/// of padding/flags and a 32-bit id (group descriptions, meter configurations).
fn decode_entry_ids(
    body: &[u8],
    what: &'static str,
    entry: &'static str,
    min_len: usize,
) -> Result<Vec<u32>, CodecError> {
    let mut r = Reader::new(body, what);
    let mut ids = Vec::new();
    while !r.is_empty() {
        let len = usize::from(r.u16()?);
        if len < min_len {
            return Err(CodecError::BadLength { what: entry, len });
        }
        let mut e = r.sub(len - 2, entry)?;
        e.skip(2)?;
        ids.push(e.u32()?);
    }
    Ok(ids)
}

/// OFPT_SET_CONFIG. A management-socket connection gets no asynchronous messages (packet-ins,
/// port status) until it sets a non-zero `miss_send_len`.
pub fn set_config(xid: u32, flags: u16, miss_send_len: u16) -> Vec<u8> {
    let mut body = [0u8; 4];
    body[..2].copy_from_slice(&flags.to_be_bytes());
    body[2..].copy_from_slice(&miss_send_len.to_be_bytes());
    simple(msg_type::SET_CONFIG, xid, &body).unwrap_or_default()
}

/// OFPCML_NO_BUFFER: send whole packets to the controller.
pub const MISS_SEND_LEN_NO_BUFFER: u16 = 0xffff;

/// OFPACPT_* property order: (slave, master) pairs for packet-in, port status, flow removed,
/// role status, table status, request forward.
fn async_props(c: &AsyncConfig) -> [u32; 12] {
    let (s, m) = (&c.slave, &c.master);
    [
        s.packet_in,
        m.packet_in,
        s.port_status,
        m.port_status,
        s.flow_removed,
        m.flow_removed,
        s.role_status,
        m.role_status,
        s.table_status,
        m.table_status,
        s.requestforward,
        m.requestforward,
    ]
}

/// OFPT_SET_ASYNC (OpenFlow 1.4+ properties).
pub fn set_async(xid: u32, c: &AsyncConfig) -> Vec<u8> {
    let mut w = Writer::with_capacity(8 + 12 * 8);
    let s = begin_msg(&mut w, msg_type::SET_ASYNC, xid);
    for (ty, mask) in async_props(c).iter().enumerate() {
        w.u16(ty as u16);
        w.u16(8);
        w.u32(*mask);
    }
    finish(w, s).unwrap_or_default()
}

/// OFPT_GET_ASYNC_REQUEST.
pub fn get_async_request(xid: u32) -> Vec<u8> {
    simple(msg_type::GET_ASYNC_REQUEST, xid, &[]).unwrap_or_default()
}

fn flow_stats_body(f: &FlowFilter) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(64);
    w.u8(f.table);
    w.zeros(3);
    w.u32(f.out_port);
    w.u32(f.out_group);
    w.zeros(4);
    w.u64(f.cookie & f.cookie_mask);
    w.u64(f.cookie_mask);
    encode_match(&f.matches, &mut w)?;
    Ok(w.into_vec())
}

/// Flow statistics request (OFPMP_FLOW): every flow `f` selects, with its match and actions.
pub fn flow_stats_request(xid: u32, f: &FlowFilter) -> Result<Vec<u8>, CodecError> {
    multipart_request(xid, multipart::FLOW, &flow_stats_body(f)?)
}

/// Aggregate statistics request (OFPMP_AGGREGATE) over the flows `f` selects.
pub fn aggregate_stats_request(xid: u32, f: &FlowFilter) -> Result<Vec<u8>, CodecError> {
    multipart_request(xid, multipart::AGGREGATE, &flow_stats_body(f)?)
}

/// Port description request for every port (OpenFlow 1.5 carries a port number).
pub fn port_desc_request(xid: u32) -> Vec<u8> {
    let mut body = port::ANY.to_be_bytes().to_vec();
    body.extend_from_slice(&[0; 4]);
    multipart_request(xid, multipart::PORT_DESC, &body).unwrap_or_default()
}

/// OFPT_PACKET_OUT (OpenFlow 1.5: the in_port and other pipeline fields are a match).
pub fn packet_out(xid: u32, po: &PacketOut) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(64 + po.packet.len());
    let s = begin_msg(&mut w, msg_type::PACKET_OUT, xid);
    w.u32(NO_BUFFER);
    let actions_len_at = w.len();
    w.u16(0);
    w.zeros(2);
    let mut m = po.metadata.clone();
    m.in_port = Some(po.in_port);
    encode_match(&m, &mut w)?;
    let a = w.len();
    encode_actions(&po.actions, &mut w)?;
    w.patch_len16(actions_len_at, a, "packet-out actions")?;
    w.bytes(&po.packet);
    finish(w, s)
}

/// NXT_PACKET_IN2 property types (NXPINT_*).
pub mod nxpint {
    pub const PACKET: u16 = 0;
    pub const FULL_LEN: u16 = 1;
    pub const BUFFER_ID: u16 = 2;
    pub const TABLE_ID: u16 = 3;
    pub const COOKIE: u16 = 4;
    pub const REASON: u16 = 5;
    pub const METADATA: u16 = 6;
    pub const USERDATA: u16 = 7;
    pub const CONTINUATION: u16 = 8;
}

/// Appends a property (type, length, payload, zero padding to 8 bytes).
fn put_prop(w: &mut Writer, ty: u16, payload: &[u8]) -> Result<(), CodecError> {
    let start = w.len();
    w.u16(ty);
    w.u16(0);
    w.bytes(payload);
    w.patch_len16(start + 2, start, "property")?;
    w.pad8_from(start);
    Ok(())
}

/// A 64-bit property value: 4 bytes of padding, then the value.
fn be64_payload(v: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&v.to_be_bytes());
    b
}

fn metadata_payload(pi: &PacketIn) -> Result<Vec<u8>, CodecError> {
    if !pi.metadata_raw.is_empty() {
        return Ok(pi.metadata_raw.clone());
    }
    let mut w = Writer::new();
    encode_oxms(&pi.metadata, &mut w)?;
    Ok(w.into_vec())
}

fn packet_in_props(w: &mut Writer, pi: &PacketIn, resume: bool) -> Result<(), CodecError> {
    put_prop(w, nxpint::PACKET, &pi.packet)?;
    if !resume && pi.total_len as usize != pi.packet.len() {
        put_prop(w, nxpint::FULL_LEN, &pi.total_len.to_be_bytes())?;
    }
    if let (false, Some(b)) = (resume, pi.buffer_id) {
        put_prop(w, nxpint::BUFFER_ID, &b.to_be_bytes())?;
    }
    put_prop(w, nxpint::TABLE_ID, &[pi.table_id])?;
    if pi.cookie != u64::MAX {
        put_prop(w, nxpint::COOKIE, &be64_payload(pi.cookie))?;
    }
    put_prop(w, nxpint::REASON, &[pi.reason])?;
    put_prop(w, nxpint::METADATA, &metadata_payload(pi)?)?;
    if !resume && !pi.userdata.is_empty() {
        put_prop(w, nxpint::USERDATA, &pi.userdata)?;
    }
    if let Some(c) = &pi.continuation {
        put_prop(w, nxpint::CONTINUATION, c)?;
    }
    Ok(())
}

/// NXT_PACKET_IN2 as a switch sends it (used by tests and by fakes of a switch).
pub fn packet_in2(xid: u32, pi: &PacketIn) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(128 + pi.packet.len());
    let s = begin_msg(&mut w, msg_type::EXPERIMENTER, xid);
    w.u32(NX_VENDOR_ID);
    w.u32(nxt::PACKET_IN2);
    packet_in_props(&mut w, pi, false)?;
    finish(w, s)
}

/// NXT_RESUME: continues the pipeline a `controller(pause)` action stopped, with the packet in
/// `pi.packet` (which the controller may have changed). Needs `pi.continuation`.
pub fn resume(xid: u32, pi: &PacketIn) -> Result<Vec<u8>, CodecError> {
    if pi.continuation.is_none() {
        return Err(CodecError::Invalid(
            "resume of a packet-in without continuation (the controller action did not pause)".into(),
        ));
    }
    let mut w = Writer::with_capacity(128 + pi.packet.len());
    let s = begin_msg(&mut w, msg_type::EXPERIMENTER, xid);
    w.u32(NX_VENDOR_ID);
    w.u32(nxt::RESUME);
    packet_in_props(&mut w, pi, true)?;
    finish(w, s)
}

fn put_port(w: &mut Writer, p: &PortDesc) -> Result<(), CodecError> {
    let start = w.len();
    w.u32(p.port_no);
    w.u16(0);
    w.zeros(2);
    w.bytes(&p.hw_addr);
    w.zeros(2);
    let mut name = [0u8; 16];
    for (d, s) in name.iter_mut().zip(p.name.bytes().take(15)) {
        *d = s;
    }
    w.bytes(&name);
    w.u32(p.config);
    w.u32(p.state);
    // OFPPDPT_ETHERNET.
    w.u16(0);
    w.u16(32);
    w.zeros(4);
    for v in [
        p.curr,
        p.advertised,
        p.supported,
        p.peer,
        p.curr_speed,
        p.max_speed,
    ] {
        w.u32(v);
    }
    w.patch_len16(start + 4, start, "port")
}

/// OFPT_PORT_STATUS as a switch sends it (for tests and fakes).
pub fn port_status(xid: u32, ps: &PortStatus) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(96);
    let s = begin_msg(&mut w, msg_type::PORT_STATUS, xid);
    w.u8(match ps.reason {
        PortReason::Add => 0,
        PortReason::Delete => 1,
        PortReason::Modify => 2,
        PortReason::Other(n) => n,
    });
    w.zeros(7);
    put_port(&mut w, &ps.port)?;
    finish(w, s)
}

/// A port-description reply body (for tests and fakes).
pub fn port_desc_body(ports: &[PortDesc]) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(ports.len() * 72);
    for p in ports {
        put_port(&mut w, p)?;
    }
    Ok(w.into_vec())
}

/// A flow-stats reply body as OVS writes it (for tests and fakes).
pub fn flow_stats_body_of(entries: &[FlowStats]) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(entries.len() * 160);
    for e in entries {
        let start = w.len();
        let f = &e.flow;
        w.u16(0);
        w.zeros(2);
        w.u8(f.table);
        w.u8(0);
        w.u16(f.priority);
        w.u16(f.idle_timeout);
        w.u16(f.hard_timeout);
        w.u16(e.flags);
        w.u16(e.importance);
        w.u64(f.cookie);
        encode_match(&f.matches, &mut w)?;
        put_oxs(
            &mut w,
            &Oxs {
                duration: Some(e.duration),
                idle: e.idle_age,
                packet_count: Some(e.packet_count),
                byte_count: Some(e.byte_count),
                ..Oxs::default()
            },
        )?;
        encode_instructions(&f.actions, f.goto_table, &mut w)?;
        w.patch_len16(start, start, "flow stats entry")?;
    }
    Ok(w.into_vec())
}

fn nx_message(xid: u32, subtype: u32, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(16 + body.len());
    let s = begin_msg(&mut w, msg_type::EXPERIMENTER, xid);
    w.u32(NX_VENDOR_ID);
    w.u32(subtype);
    w.bytes(body);
    finish(w, s).unwrap_or_default()
}

/// NXT_SET_CONTROLLER_ID.
pub fn set_controller_id(xid: u32, id: u16) -> Vec<u8> {
    let mut body = [0u8; 8];
    body[6..].copy_from_slice(&id.to_be_bytes());
    nx_message(xid, nxt::SET_CONTROLLER_ID, &body)
}

/// NXT_SET_PACKET_IN_FORMAT.
pub fn set_packet_in_format(xid: u32, format: u32) -> Vec<u8> {
    nx_message(xid, nxt::SET_PACKET_IN_FORMAT, &format.to_be_bytes())
}

// === decoded messages ===

/// An OFPT_ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMsg {
    pub err_type: u16,
    pub code: u16,
    /// Set for OFPET_EXPERIMENTER errors (e.g. Nicira extension errors).
    pub experimenter: Option<u32>,
    /// The start of the request that failed (OVS sends the whole request).
    pub data: Vec<u8>,
}

const ERROR_TYPES: &[(&str, &[&str])] = &[
    ("OFPHFC", &["INCOMPATIBLE", "EPERM"]),
    (
        "OFPBRC",
        &[
            "BAD_VERSION",
            "BAD_TYPE",
            "BAD_MULTIPART",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "EPERM",
            "BAD_LEN",
            "BUFFER_EMPTY",
            "BUFFER_UNKNOWN",
            "BAD_TABLE_ID",
            "IS_SLAVE",
            "BAD_PORT",
            "BAD_PACKET",
            "MULTIPART_BUFFER_OVERFLOW",
            "MULTIPART_REQUEST_TIMEOUT",
            "MULTIPART_REPLY_TIMEOUT",
        ],
    ),
    (
        "OFPBAC",
        &[
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "BAD_OUT_PORT",
            "BAD_ARGUMENT",
            "EPERM",
            "TOO_MANY",
            "BAD_QUEUE",
            "BAD_OUT_GROUP",
            "MATCH_INCONSISTENT",
            "UNSUPPORTED_ORDER",
            "BAD_TAG",
            "BAD_SET_TYPE",
            "BAD_SET_LEN",
            "BAD_SET_ARGUMENT",
            "BAD_SET_MASK",
            "BAD_METER",
        ],
    ),
    (
        "OFPBIC",
        &[
            "UNKNOWN_INST",
            "UNSUP_INST",
            "BAD_TABLE_ID",
            "UNSUP_METADATA",
            "UNSUP_METADATA_MASK",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "BAD_LEN",
            "EPERM",
            "DUP_INST",
        ],
    ),
    (
        "OFPBMC",
        &[
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_TAG",
            "BAD_DL_ADDR_MASK",
            "BAD_NW_ADDR_MASK",
            "BAD_WILDCARDS",
            "BAD_FIELD",
            "BAD_VALUE",
            "BAD_MASK",
            "BAD_PREREQ",
            "DUP_FIELD",
            "EPERM",
        ],
    ),
    (
        "OFPFMFC",
        &[
            "UNKNOWN",
            "TABLE_FULL",
            "BAD_TABLE_ID",
            "OVERLAP",
            "EPERM",
            "BAD_TIMEOUT",
            "BAD_COMMAND",
            "BAD_FLAGS",
            "CANT_SYNC",
            "BAD_PRIORITY",
            "IS_SYNC",
        ],
    ),
    (
        "OFPGMFC",
        &[
            "GROUP_EXISTS",
            "INVALID_GROUP",
            "WEIGHT_UNSUPPORTED",
            "OUT_OF_GROUPS",
            "OUT_OF_BUCKETS",
            "CHAINING_UNSUPPORTED",
            "WATCH_UNSUPPORTED",
            "LOOP",
            "UNKNOWN_GROUP",
            "CHAINED_GROUP",
            "BAD_TYPE",
            "BAD_COMMAND",
            "BAD_BUCKET",
            "BAD_WATCH",
            "EPERM",
            "UNKNOWN_BUCKET",
            "BUCKET_EXISTS",
        ],
    ),
    (
        "OFPPMFC",
        &["BAD_PORT", "BAD_HW_ADDR", "BAD_CONFIG", "BAD_ADVERTISE", "EPERM"],
    ),
    ("OFPTMFC", &["BAD_TABLE", "BAD_CONFIG", "EPERM"]),
    ("OFPQOFC", &["BAD_PORT", "BAD_QUEUE", "EPERM"]),
    ("OFPSCFC", &["BAD_FLAGS", "BAD_LEN", "EPERM"]),
    (
        "OFPRRFC",
        &["STALE", "UNSUP", "BAD_ROLE", "ID_UNSUP", "ID_IN_USE"],
    ),
    (
        "OFPMMFC",
        &[
            "UNKNOWN",
            "METER_EXISTS",
            "INVALID_METER",
            "UNKNOWN_METER",
            "BAD_COMMAND",
            "BAD_FLAGS",
            "BAD_RATE",
            "BAD_BURST",
            "BAD_BAND",
            "BAD_BAND_VALUE",
            "OUT_OF_METERS",
            "OUT_OF_BANDS",
        ],
    ),
    (
        "OFPTFFC",
        &[
            "BAD_TABLE",
            "BAD_METADATA",
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_ARGUMENT",
            "EPERM",
        ],
    ),
    (
        "OFPBPC",
        &[
            "BAD_TYPE",
            "BAD_LEN",
            "BAD_VALUE",
            "TOO_MANY",
            "DUP_TYPE",
            "BAD_EXPERIMENTER",
            "BAD_EXP_TYPE",
            "BAD_EXP_VALUE",
            "EPERM",
        ],
    ),
    ("OFPACFC", &["INVALID", "UNSUPPORTED", "EPERM"]),
    (
        "OFPMOFC",
        &[
            "UNKNOWN",
            "MONITOR_EXISTS",
            "INVALID_MONITOR",
            "UNKNOWN_MONITOR",
            "BAD_COMMAND",
            "BAD_FLAGS",
            "BAD_TABLE_ID",
            "BAD_OUT",
        ],
    ),
    (
        "OFPBFC",
        &[
            "UNKNOWN",
            "EPERM",
            "BAD_ID",
            "BUNDLE_EXIST",
            "BUNDLE_CLOSED",
            "OUT_OF_BUNDLES",
            "BAD_TYPE",
            "BAD_FLAGS",
            "MSG_BAD_LEN",
            "MSG_BAD_XID",
            "MSG_UNSUP",
            "MSG_CONFLICT",
            "MSG_TOO_MANY",
            "MSG_FAILED",
            "TIMEOUT",
            "BUNDLE_IN_PROGRESS",
            "SCHED_NOT_SUPPORTED",
            "SCHED_FUTURE",
            "SCHED_PAST",
        ],
    ),
];

impl ErrorMsg {
    /// The OpenFlow name of the error, e.g. `OFPBAC_BAD_OUT_GROUP`.
    pub fn name(&self) -> String {
        if let Some(exp) = self.experimenter {
            if exp == NX_VENDOR_ID {
                return format!("NX_ERROR_{}", self.code);
            }
            return format!("EXPERIMENTER_{exp:#x}_ERROR_{}", self.code);
        }
        match ERROR_TYPES.get(usize::from(self.err_type)) {
            Some((prefix, codes)) => match codes.get(usize::from(self.code)) {
                Some(c) => format!("{prefix}_{c}"),
                None => format!("{prefix}_CODE_{}", self.code),
            },
            None => format!("OFPET_{}_CODE_{}", self.err_type, self.code),
        }
    }

    /// "OFPBAC_BAD_OUT_GROUP (type 2, code 9)".
    pub fn describe(&self) -> String {
        match self.experimenter {
            Some(exp) => format!("{} (experimenter {exp:#x}, code {})", self.name(), self.code),
            None => format!("{} (type {}, code {})", self.name(), self.err_type, self.code),
        }
    }

    /// The header of the request the error answers, when the data holds one.
    pub fn failed_request(&self) -> Option<Header> {
        Header::parse(&self.data).ok()
    }

    /// The flow the error answers, when the failed request is a flow_mod (alone or inside a
    /// bundle_add) and OVS sent it back whole.
    pub fn failed_flow(&self) -> Option<Flow> {
        let h = Header::parse(&self.data).ok()?;
        let bytes = self.data.get(..usize::from(h.length))?;
        match decode_message(bytes).ok()?.1 {
            Message::FlowMod(fm) => Some(fm.flow),
            Message::BundleAdd { inner, .. } => match decode_message(&inner).ok()?.1 {
                Message::FlowMod(fm) => Some(fm.flow),
                _ => None,
            },
            _ => None,
        }
    }
}

/// FEATURES_REPLY contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub auxiliary_id: u8,
    pub capabilities: u32,
}

/// A decoded group mod (only type ALL buckets are modelled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupModMsg {
    pub command: u16,
    pub group_type: u8,
    pub group: Group,
}

/// A decoded meter mod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterModMsg {
    pub command: u16,
    pub flags: u16,
    pub meter_id: u32,
    /// (band type, rate, burst).
    pub bands: Vec<(u16, u32, u32)>,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// HELLO; `versions` is the version bitmap when the hello carries one.
    Hello {
        versions: Option<u32>,
    },
    Error(ErrorMsg),
    EchoRequest(Vec<u8>),
    EchoReply(Vec<u8>),
    FeaturesReply(Features),
    BarrierReply,
    BarrierRequest,
    BundleControl {
        bundle_id: u32,
        ctrl: u16,
        flags: u16,
    },
    BundleAdd {
        bundle_id: u32,
        flags: u16,
        inner: Vec<u8>,
    },
    FlowMod(Box<FlowMod>),
    GroupMod(GroupModMsg),
    MeterMod(MeterModMsg),
    Experimenter {
        experimenter: u32,
        exp_type: u32,
        data: Vec<u8>,
    },
    MultipartReply {
        mp_type: u16,
        flags: u16,
        body: Vec<u8>,
    },
    MultipartRequest {
        mp_type: u16,
        flags: u16,
        body: Vec<u8>,
    },
    PortStatus(PortStatus),
    /// NXT_PACKET_IN2.
    PacketIn(Box<PacketIn>),
    /// NXT_RESUME (sent by the agent; decoded for tests).
    Resume(Box<PacketIn>),
    PacketOut(Box<PacketOut>),
    /// OFPT_GET_ASYNC_REPLY or OFPT_SET_ASYNC.
    Async(AsyncConfig),
    /// OFPT_GET_CONFIG_REPLY or OFPT_SET_CONFIG.
    Config {
        flags: u16,
        miss_send_len: u16,
    },
    /// Anything else (standard packet-in, flow removed, ...), undecoded.
    Other {
        msg_type: u8,
        body: Vec<u8>,
    },
}

impl Message {
    /// Whether the switch may send this unsolicited (packet-in, port status, ...).
    pub fn is_async(&self) -> bool {
        match self {
            Message::PortStatus(_) | Message::PacketIn(_) => true,
            Message::Other { msg_type, .. } => matches!(
                *msg_type,
                msg_type::PACKET_IN
                    | msg_type::FLOW_REMOVED
                    | msg_type::PORT_STATUS
                    | msg_type::ROLE_STATUS
                    | msg_type::TABLE_STATUS
                    | msg_type::REQUESTFORWARD
                    | msg_type::CONTROLLER_STATUS
            ),
            Message::Experimenter {
                experimenter,
                exp_type,
                ..
            } => *experimenter == NX_VENDOR_ID && *exp_type == nxt::PACKET_IN2,
            _ => false,
        }
    }
}

fn decode_hello(r: &mut Reader<'_>) -> Result<Option<u32>, CodecError> {
    let mut versions = None;
    while r.remaining() >= 4 {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(CodecError::BadLength {
                what: "hello element",
                len,
            });
        }
        let mut body = r.sub(len - 4, "hello element")?;
        let pad = super::wire::pad8(len) - len;
        r.skip(pad.min(r.remaining()))?;
        if ty == 1 {
            let mut bits = 0u32;
            if let Ok(b) = body.u32() {
                bits = b;
            }
            versions = Some(bits);
        }
    }
    Ok(versions)
}

fn decode_flow_mod(r: &mut Reader<'_>) -> Result<FlowMod, CodecError> {
    let cookie = r.u64()?;
    let cookie_mask = r.u64()?;
    let table = r.u8()?;
    let command = match r.u8()? {
        0 => FlowModCommand::Add,
        1 => FlowModCommand::Modify,
        2 => FlowModCommand::ModifyStrict,
        3 => FlowModCommand::Delete,
        4 => FlowModCommand::DeleteStrict,
        c => return Err(CodecError::Invalid(format!("flow_mod command {c}"))),
    };
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let priority = r.u16()?;
    let _buffer_id = r.u32()?;
    let out_port = r.u32()?;
    let out_group = r.u32()?;
    let flags = r.u16()?;
    let _importance = r.u16()?;
    let matches: Match = decode_match(r)?;
    let (actions, goto_table) = decode_instructions(r)?;
    Ok(FlowMod {
        command,
        flow: Flow {
            table,
            priority,
            matches,
            cookie,
            idle_timeout,
            hard_timeout,
            actions,
            goto_table,
        },
        cookie_mask,
        out_port,
        out_group,
        flags,
    })
}

fn decode_group_mod(r: &mut Reader<'_>) -> Result<GroupModMsg, CodecError> {
    let command = r.u16()?;
    let group_type = r.u8()?;
    r.skip(1)?;
    let group_id = r.u32()?;
    let blen = usize::from(r.u16()?);
    r.skip(2)?;
    let _command_bucket_id = r.u32()?;
    let mut br = r.sub(blen, "bucket array")?;
    let mut buckets = Vec::new();
    while !br.is_empty() {
        let len = usize::from(br.u16()?);
        let alen = usize::from(br.u16()?);
        if len < 8 || alen > len - 8 {
            return Err(CodecError::BadLength { what: "bucket", len });
        }
        let _bucket_id = br.u32()?;
        let mut ar = br.sub(alen, "bucket actions")?;
        buckets.push(decode_actions(&mut ar)?);
        br.skip(len - 8 - alen)?; // bucket properties
    }
    Ok(GroupModMsg {
        command,
        group_type,
        group: Group { group_id, buckets },
    })
}

fn decode_meter_mod(r: &mut Reader<'_>) -> Result<MeterModMsg, CodecError> {
    let command = r.u16()?;
    let flags = r.u16()?;
    let meter_id = r.u32()?;
    let mut bands = Vec::new();
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 16 {
            return Err(CodecError::BadLength {
                what: "meter band",
                len,
            });
        }
        let mut b = r.sub(len - 4, "meter band")?;
        bands.push((ty, b.u32()?, b.u32()?));
    }
    Ok(MeterModMsg {
        command,
        flags,
        meter_id,
        bands,
    })
}

/// Reads properties (type, length, payload, padding to 8) until `r` is empty.
fn read_props<'a>(
    r: &mut Reader<'a>,
    what: &'static str,
    mut f: impl FnMut(u16, Reader<'a>) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(CodecError::BadLength { what, len });
        }
        let body = r.sub(len - 4, what)?;
        r.skip(super::wire::pad8(len) - len)?;
        f(ty, body)?;
    }
    Ok(())
}

fn decode_packet_in2(r: &mut Reader<'_>) -> Result<PacketIn, CodecError> {
    let mut pi = PacketIn {
        packet: Vec::new(),
        total_len: 0,
        buffer_id: None,
        table_id: 0,
        cookie: u64::MAX,
        reason: 0,
        metadata: Match::new(),
        other_metadata: Vec::new(),
        userdata: Vec::new(),
        continuation: None,
        metadata_raw: Vec::new(),
    };
    let mut have_packet = false;
    let mut full_len = None;
    read_props(r, "packet-in property", |ty, mut b| {
        match ty {
            nxpint::PACKET => {
                pi.packet = b.rest().to_vec();
                have_packet = true;
            }
            nxpint::FULL_LEN => full_len = Some(b.u32()?),
            nxpint::BUFFER_ID => pi.buffer_id = Some(b.u32()?),
            nxpint::TABLE_ID => pi.table_id = b.u8()?,
            nxpint::COOKIE => {
                if b.remaining() != 12 {
                    return Err(CodecError::BadLength {
                        what: "packet-in cookie property",
                        len: b.remaining() + 4,
                    });
                }
                b.skip(4)?;
                pi.cookie = b.u64()?;
            }
            nxpint::REASON => pi.reason = b.u8()?,
            nxpint::METADATA => {
                pi.metadata_raw = b.rest().to_vec();
                let (m, other) = decode_oxms_lenient(&mut b)?;
                pi.metadata = m;
                pi.other_metadata = other;
            }
            nxpint::USERDATA => pi.userdata = b.rest().to_vec(),
            nxpint::CONTINUATION => pi.continuation = Some(b.rest().to_vec()),
            _ => {} // Properties this codec does not know are skipped.
        }
        Ok(())
    })?;
    if !have_packet {
        return Err(CodecError::Invalid("NXT_PACKET_IN2 without a packet".into()));
    }
    let len = u32::try_from(pi.packet.len()).unwrap_or(u32::MAX);
    pi.total_len = match full_len {
        None | Some(0) => len,
        Some(n) if n < len => {
            return Err(CodecError::Invalid(format!(
                "NXT_PACKET_IN2 full_len {n} < packet length {len}"
            )))
        }
        Some(n) => n,
    };
    Ok(pi)
}

/// Decodes one `ofp_port` (OpenFlow 1.4+ layout with properties).
fn decode_port(r: &mut Reader<'_>) -> Result<PortDesc, CodecError> {
    let port_no = r.peek_u32(0)?;
    let len = usize::from(r.peek_u16(4)?);
    if len < 40 {
        return Err(CodecError::BadLength { what: "port", len });
    }
    let mut p = r.sub(len, "port")?;
    p.skip(8)?;
    let hw_addr = p.array::<6>()?;
    p.skip(2)?;
    let name_bytes = p.array::<16>()?;
    let end = name_bytes.iter().position(|b| *b == 0).unwrap_or(16);
    let mut d = PortDesc {
        port_no,
        hw_addr,
        name: String::from_utf8_lossy(&name_bytes[..end]).into_owned(),
        config: p.u32()?,
        state: p.u32()?,
        ..PortDesc::default()
    };
    read_props(&mut p, "port property", |ty, mut b| {
        if ty == 0 {
            // OFPPDPT_ETHERNET.
            b.skip(4)?;
            d.curr = b.u32()?;
            d.advertised = b.u32()?;
            d.supported = b.u32()?;
            d.peer = b.u32()?;
            d.curr_speed = b.u32()?;
            d.max_speed = b.u32()?;
        }
        Ok(())
    })?;
    Ok(d)
}

/// The ports of a port-description reply body.
pub fn decode_port_descs(body: &[u8]) -> Result<Vec<PortDesc>, CodecError> {
    let mut r = Reader::new(body, "port description");
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(decode_port(&mut r)?);
    }
    Ok(out)
}

fn decode_port_status(r: &mut Reader<'_>) -> Result<PortStatus, CodecError> {
    let reason = PortReason::from_u8(r.u8()?);
    r.skip(7)?;
    let port = decode_port(r)?;
    if !r.is_empty() {
        return Err(CodecError::BadLength {
            what: "port status",
            len: r.remaining(),
        });
    }
    Ok(PortStatus { reason, port })
}

fn decode_async(r: &mut Reader<'_>) -> Result<AsyncConfig, CodecError> {
    let mut v = [0u32; 12];
    read_props(r, "async property", |ty, mut b| {
        if let Some(slot) = v.get_mut(usize::from(ty)) {
            *slot = b.u32()?;
        }
        Ok(())
    })?;
    let masks = |o: usize| AsyncMasks {
        packet_in: v[o],
        port_status: v[o + 2],
        flow_removed: v[o + 4],
        role_status: v[o + 6],
        table_status: v[o + 8],
        requestforward: v[o + 10],
    };
    Ok(AsyncConfig {
        slave: masks(0),
        master: masks(1),
    })
}

fn decode_packet_out(r: &mut Reader<'_>) -> Result<PacketOut, CodecError> {
    let _buffer_id = r.u32()?;
    let actions_len = usize::from(r.u16()?);
    r.skip(2)?;
    let mut m = decode_match(r)?;
    let in_port = m.in_port.take().unwrap_or(port::CONTROLLER);
    let mut a = r.sub(actions_len, "packet-out actions")?;
    let actions = decode_actions(&mut a)?;
    Ok(PacketOut {
        in_port,
        metadata: m,
        actions,
        packet: r.rest().to_vec(),
    })
}

/// OXS statistics (`ofp_stats`, OpenFlow 1.5), as OVS sends them in flow and aggregate stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Oxs {
    duration: Option<Duration>,
    idle: Option<Duration>,
    flow_count: Option<u32>,
    packet_count: Option<u64>,
    byte_count: Option<u64>,
}

/// OXS class of the basic statistics.
const OFPXSC_OPENFLOW_BASIC: u16 = 0x8002;

fn oxs_time(v: u64) -> Duration {
    Duration::new(v >> 32, ((v & 0xffff_ffff) as u32).min(999_999_999))
}

/// Reads an `ofp_stats` (reserved, length, OXS fields, padding to 8).
fn decode_oxs(r: &mut Reader<'_>) -> Result<Oxs, CodecError> {
    let _reserved = r.u16()?;
    let len = usize::from(r.u16()?);
    if len < 4 {
        return Err(CodecError::BadLength {
            what: "ofp_stats",
            len,
        });
    }
    let mut b = r.sub(len - 4, "ofp_stats")?;
    r.skip(super::wire::pad8(len) - len)?;
    let mut st = Oxs::default();
    while !b.is_empty() {
        let h = b.u32()?;
        let class = (h >> 16) as u16;
        let field = ((h >> 9) & 0x7f) as u8;
        let mut n = (h & 0xff) as usize;
        if class == 0xffff {
            if n < 4 {
                return Err(CodecError::BadLength {
                    what: "experimenter OXS field",
                    len: n,
                });
            }
            b.skip(4)?;
            n -= 4;
        }
        let mut v = b.sub(n, "OXS field")?;
        let want = match (class, field) {
            (OFPXSC_OPENFLOW_BASIC, 3) => 4,
            (OFPXSC_OPENFLOW_BASIC, 0 | 1 | 4 | 5) => 8,
            _ => continue, // A statistic this codec does not know.
        };
        if n != want {
            return Err(CodecError::BadLength {
                what: "OXS field",
                len: n,
            });
        }
        match field {
            0 => st.duration = Some(oxs_time(v.u64()?)),
            1 => st.idle = Some(oxs_time(v.u64()?)),
            3 => st.flow_count = Some(v.u32()?),
            4 => st.packet_count = Some(v.u64()?),
            _ => st.byte_count = Some(v.u64()?),
        }
    }
    Ok(st)
}

fn put_oxs(w: &mut Writer, st: &Oxs) -> Result<(), CodecError> {
    let start = w.len();
    w.u16(0);
    w.u16(0);
    let field = |w: &mut Writer, f: u32, len: u32| w.u32((0x8002 << 16) | (f << 9) | len);
    let time = |d: Duration| (d.as_secs().min(u64::from(u32::MAX)) << 32) | u64::from(d.subsec_nanos());
    if let Some(d) = st.duration {
        field(w, 0, 8);
        w.u64(time(d));
    }
    if let Some(d) = st.idle {
        field(w, 1, 8);
        w.u64(time(d));
    }
    if let Some(n) = st.flow_count {
        field(w, 3, 4);
        w.u32(n);
    }
    if let Some(n) = st.packet_count {
        field(w, 4, 8);
        w.u64(n);
    }
    if let Some(n) = st.byte_count {
        field(w, 5, 8);
        w.u64(n);
    }
    w.patch_len16(start + 2, start, "ofp_stats")?;
    w.pad8_from(start);
    Ok(())
}

/// Decodes one flow-stats entry (`ofp_flow_desc`, OpenFlow 1.5: header, match, OXS
/// statistics, instructions).
fn decode_flow_stats_entry(r: &mut Reader<'_>) -> Result<FlowStats, CodecError> {
    let len = usize::from(r.peek_u16(0)?);
    if len < 32 {
        return Err(CodecError::BadLength {
            what: "flow stats entry",
            len,
        });
    }
    let mut e = r.sub(len, "flow stats entry")?;
    e.skip(4)?;
    let table = e.u8()?;
    e.skip(1)?;
    let priority = e.u16()?;
    let idle_timeout = e.u16()?;
    let hard_timeout = e.u16()?;
    let flags = e.u16()?;
    let importance = e.u16()?;
    let cookie = e.u64()?;
    let matches = decode_match(&mut e)?;
    let st = decode_oxs(&mut e)?;
    let (actions, goto_table) = decode_instructions(&mut e)?;
    Ok(FlowStats {
        flow: Flow {
            table,
            priority,
            matches,
            cookie,
            idle_timeout,
            hard_timeout,
            actions,
            goto_table,
        },
        packet_count: st.packet_count.unwrap_or(0),
        byte_count: st.byte_count.unwrap_or(0),
        duration: st.duration.unwrap_or_default(),
        idle_age: st.idle,
        flags,
        importance,
    })
}

/// The entries of one flow-stats reply body. An entry the codec cannot model is
/// `CodecError::Unsupported` (naming the entry); broken framing is malformed.
pub fn decode_flow_stats(body: &[u8]) -> Result<Vec<FlowStats>, CodecError> {
    let mut r = Reader::new(body, "flow stats");
    let mut out = Vec::new();
    while !r.is_empty() {
        let at = body.len() - r.remaining();
        match decode_flow_stats_entry(&mut r) {
            Ok(e) => out.push(e),
            Err(CodecError::Unsupported(what)) => {
                let len = usize::from(Reader::new(&body[at..], "entry").peek_u16(0).unwrap_or(0));
                let entry = body.get(at..at + len).unwrap_or(&body[at..]);
                return Err(CodecError::Unsupported(format!(
                    "{what} in flow stats entry #{} ({})",
                    out.len() + 1,
                    bytes_summary(entry)
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// An aggregate-stats reply body (OpenFlow 1.5: OXS statistics).
pub fn decode_aggregate(body: &[u8]) -> Result<AggregateStats, CodecError> {
    let mut r = Reader::new(body, "aggregate stats");
    let st = decode_oxs(&mut r)?;
    Ok(AggregateStats {
        packet_count: st.packet_count.unwrap_or(0),
        byte_count: st.byte_count.unwrap_or(0),
        flow_count: st.flow_count.unwrap_or(0),
    })
}

/// An aggregate-stats reply body as OVS writes it (for tests and fakes).
pub fn aggregate_body_of(a: &AggregateStats) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(40);
    put_oxs(
        &mut w,
        &Oxs {
            flow_count: Some(a.flow_count),
            packet_count: Some(a.packet_count),
            byte_count: Some(a.byte_count),
            ..Oxs::default()
        },
    )?;
    Ok(w.into_vec())
}

/// A short description of some bytes for logs: length and the first 32 bytes in hex.
pub fn bytes_summary(b: &[u8]) -> String {
    let head: String = b.iter().take(32).map(|x| format!("{x:02x}")).collect();
    format!(
        "{} bytes: {head}{}",
        b.len(),
        if b.len() > 32 { "..." } else { "" }
    )
}

/// Decodes one complete message (`b` holds exactly the bytes its header's length says).
pub fn decode_message(b: &[u8]) -> Result<(Header, Message), CodecError> {
    let h = Header::parse(b)?;
    if usize::from(h.length) != b.len() {
        return Err(CodecError::BadLength {
            what: "OpenFlow message",
            len: b.len(),
        });
    }
    let mut r = Reader::new(b, "OpenFlow message");
    r.skip(OFP_HEADER_LEN)?;
    if h.msg_type == msg_type::HELLO {
        // Any version may say hello; the rest must be OpenFlow 1.5.
        return Ok((
            h,
            Message::Hello {
                versions: decode_hello(&mut r)?,
            },
        ));
    }
    if h.version != OFP_VERSION {
        return Err(CodecError::Unsupported(format!(
            "OpenFlow version {:#04x}",
            h.version
        )));
    }
    let msg = match h.msg_type {
        msg_type::ERROR => {
            let err_type = r.u16()?;
            let code = r.u16()?;
            let experimenter = if err_type == 0xffff { Some(r.u32()?) } else { None };
            Message::Error(ErrorMsg {
                err_type,
                code,
                experimenter,
                data: r.rest().to_vec(),
            })
        }
        msg_type::ECHO_REQUEST => Message::EchoRequest(r.rest().to_vec()),
        msg_type::ECHO_REPLY => Message::EchoReply(r.rest().to_vec()),
        msg_type::FEATURES_REPLY => {
            let datapath_id = r.u64()?;
            let n_buffers = r.u32()?;
            let n_tables = r.u8()?;
            let auxiliary_id = r.u8()?;
            r.skip(2)?;
            let capabilities = r.u32()?;
            Message::FeaturesReply(Features {
                datapath_id,
                n_buffers,
                n_tables,
                auxiliary_id,
                capabilities,
            })
        }
        msg_type::BARRIER_REPLY => Message::BarrierReply,
        msg_type::BARRIER_REQUEST => Message::BarrierRequest,
        msg_type::BUNDLE_CONTROL => {
            let bundle_id = r.u32()?;
            let ctrl = r.u16()?;
            let flags = r.u16()?;
            Message::BundleControl {
                bundle_id,
                ctrl,
                flags,
            }
        }
        msg_type::BUNDLE_ADD_MESSAGE => {
            let bundle_id = r.u32()?;
            r.skip(2)?;
            let flags = r.u16()?;
            let inner = Header::parse(r.rest())?;
            let inner = r.bytes(usize::from(inner.length))?.to_vec();
            Message::BundleAdd {
                bundle_id,
                flags,
                inner,
            }
        }
        msg_type::FLOW_MOD => Message::FlowMod(Box::new(decode_flow_mod(&mut r)?)),
        msg_type::GROUP_MOD => Message::GroupMod(decode_group_mod(&mut r)?),
        msg_type::METER_MOD => Message::MeterMod(decode_meter_mod(&mut r)?),
        msg_type::EXPERIMENTER => {
            let experimenter = r.u32()?;
            let exp_type = r.u32()?;
            match (experimenter, exp_type) {
                (NX_VENDOR_ID, nxt::PACKET_IN2) => Message::PacketIn(Box::new(decode_packet_in2(&mut r)?)),
                (NX_VENDOR_ID, nxt::RESUME) => Message::Resume(Box::new(decode_packet_in2(&mut r)?)),
                _ => Message::Experimenter {
                    experimenter,
                    exp_type,
                    data: r.rest().to_vec(),
                },
            }
        }
        msg_type::MULTIPART_REPLY | msg_type::MULTIPART_REQUEST => {
            let mp_type = r.u16()?;
            let flags = r.u16()?;
            r.skip(4)?;
            let body = r.rest().to_vec();
            if h.msg_type == msg_type::MULTIPART_REPLY {
                Message::MultipartReply { mp_type, flags, body }
            } else {
                Message::MultipartRequest { mp_type, flags, body }
            }
        }
        msg_type::PORT_STATUS => Message::PortStatus(decode_port_status(&mut r)?),
        msg_type::PACKET_OUT => Message::PacketOut(Box::new(decode_packet_out(&mut r)?)),
        msg_type::GET_ASYNC_REPLY | msg_type::SET_ASYNC => Message::Async(decode_async(&mut r)?),
        msg_type::GET_CONFIG_REPLY | msg_type::SET_CONFIG => Message::Config {
            flags: r.u16()?,
            miss_send_len: r.u16()?,
        },
        t => Message::Other {
            msg_type: t,
            body: r.rest().to_vec(),
        },
    };
    Ok((h, msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{ip_proto, Action, CtAction, CtZone, Match, RegRange, SetField};
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
}
