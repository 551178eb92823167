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

mod control;
mod error;
mod flow_mod;
mod group_meter;
mod packet;
mod port;
mod stats;
#[cfg(test)]
mod tests;

use crate::events::{AsyncConfig, PacketIn, PacketOut, PortStatus};
use crate::flow::FlowMod;
use crate::wire::{
    begin_msg, end_msg, msg_type, CodecError, Header, Reader, Writer, NX_VENDOR_ID, OFP_HEADER_LEN,
    OFP_VERSION,
};

use control::{decode_async, decode_hello};
use flow_mod::decode_flow_mod;
use group_meter::{decode_group_mod, decode_meter_mod};
use packet::{decode_packet_in2, decode_packet_out};
use port::decode_port_status;

pub use control::{
    barrier_request, echo_reply, echo_request, features_request, get_async_request, hello, set_async,
    set_config, set_controller_id, set_packet_in_format, MISS_SEND_LEN_NO_BUFFER,
};
pub use error::ErrorMsg;
pub use flow_mod::{
    bundle_control, flow_mod, write_bundle_add_flow_mod, write_bundle_control, write_flow_mod,
};
pub use group_meter::{
    group_delete_all, group_mod, meter_delete_all, meter_flags, meter_mod, GroupCommand, GroupModMsg,
    MeterCommand, MeterModMsg,
};
pub use packet::{nxpint, packet_in2, packet_out, resume};
pub use port::{decode_port_descs, port_desc_body, port_status};
pub use stats::{
    aggregate_body_of, aggregate_stats_request, decode_aggregate, decode_flow_stats, decode_group_desc_ids,
    decode_meter_config_ids, flow_stats_body_of, flow_stats_request, group_desc_request,
    meter_config_request, multipart_request, port_desc_request,
};

/// OFP_NO_BUFFER.
const NO_BUFFER: u32 = 0xffff_ffff;
/// OFPG_ALL: every group (group delete).
pub const OFPG_ALL: u32 = 0xffff_fffc;
/// OFPM_ALL: every meter (meter delete).
pub const OFPM_ALL: u32 = 0xffff_ffff;

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

fn finish(mut w: Writer, start: usize) -> Result<Vec<u8>, CodecError> {
    end_msg(&mut w, start)?;
    Ok(w.into_vec())
}

fn simple(t: u8, xid: u32, body: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut w = Writer::with_capacity(OFP_HEADER_LEN + body.len());
    let s = begin_msg(&mut w, t, xid);
    w.bytes(body);
    finish(w, s)
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
        r.skip(crate::wire::pad8(len) - len)?;
        f(ty, body)?;
    }
    Ok(())
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
