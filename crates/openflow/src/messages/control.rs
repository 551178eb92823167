//! Connection set-up and upkeep: HELLO, echo, features, barrier, switch configuration,
//! asynchronous-message configuration and the Nicira controller-id and packet-in-format
//! requests, with the decoders of the replies.

use crate::events::{AsyncConfig, AsyncMasks};
use crate::wire::{begin_msg, msg_type, CodecError, Reader, Writer, NX_VENDOR_ID, OFP_VERSION};

use super::{finish, nxt, read_props, simple};

/// HELLO offering only OpenFlow 1.5 (header version 6 plus a version-bitmap element).
pub fn hello(xid: u32) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    let s = begin_msg(&mut w, msg_type::HELLO, xid);
    w.u16(1); // OFPHET_VERSIONBITMAP
    w.u16(8);
    w.u32(1 << OFP_VERSION);
    finish(w, s).unwrap_or_default()
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

pub(super) fn decode_hello(r: &mut Reader<'_>) -> Result<Option<u32>, CodecError> {
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
        let pad = crate::wire::pad8(len) - len;
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

pub(super) fn decode_async(r: &mut Reader<'_>) -> Result<AsyncConfig, CodecError> {
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
