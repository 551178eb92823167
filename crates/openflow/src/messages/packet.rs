//! Packets between switch and controller: OFPT_PACKET_OUT, NXT_PACKET_IN2 (with its
//! properties) and NXT_RESUME, which continues a paused pipeline, with their decoders.

use crate::actions::{decode_actions, encode_actions};
use crate::events::{PacketIn, PacketOut};
use crate::flow::{port, Match};
use crate::oxm::{decode_match, decode_oxms_lenient, encode_match, encode_oxms};
use crate::wire::{begin_msg, msg_type, CodecError, Reader, Writer, NX_VENDOR_ID};

use super::{finish, nxt, read_props, NO_BUFFER};

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

pub(super) fn decode_packet_in2(r: &mut Reader<'_>) -> Result<PacketIn, CodecError> {
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

pub(super) fn decode_packet_out(r: &mut Reader<'_>) -> Result<PacketOut, CodecError> {
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
