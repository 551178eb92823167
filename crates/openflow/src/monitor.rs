//! OpenFlow 1.4+ flow monitoring (`OFPMP_FLOW_MONITOR`): the request that asks the switch to
//! report flow table changes on this connection, and the decoder of the updates it then sends
//! unasked (multipart replies with xid 0).
//!
//! Only what drift detection needs is decoded: the event, and for a full update the table,
//! priority, cookie and removal reason. The match and instructions that follow are skipped by
//! length (the request does not ask for instructions). Changes made by the monitoring
//! connection itself arrive abbreviated (`OFPFME_ABBREV`, the xid of the request), so the owner
//! can tell its own changes from anyone else's. Group and meter changes are not flow updates:
//! the switch forwards other controllers' group_mods and meter_mods (OFPT_REQUESTFORWARD, asked
//! for in the async config) and they are handed on with the flow updates.

use super::wire::{CodecError, Reader, Writer};

/// `ofp_multipart_type` OFPMP_FLOW_MONITOR.
pub const MP_FLOW_MONITOR: u16 = 16;

/// `ofp14_flow_monitor_flags`.
pub mod flags {
    pub const INITIAL: u16 = 1 << 0;
    pub const ADD: u16 = 1 << 1;
    pub const REMOVED: u16 = 1 << 2;
    pub const MODIFY: u16 = 1 << 3;
}

const OFPP_ANY: u32 = 0xffff_ffff;
const OFPG_ANY: u32 = 0xffff_ffff;
const OFPTT_ALL: u8 = 0xff;
const OFPFMC_ADD: u8 = 0;
/// The fixed part of `ofp_flow_update_full`.
const FULL_LEN: usize = 24;

/// What happened to a flow (`ofp_flow_update_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowEvent {
    Initial,
    Added,
    Removed,
    Modified,
}

/// One entry of a flow monitor reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FlowUpdate {
    /// A flow changed by another connection (or by the switch itself).
    Full {
        event: FlowEvent,
        table_id: u8,
        /// OFPRR_* for a removal, else 0.
        reason: u8,
        priority: u16,
        cookie: u64,
    },
    /// Changes made by this connection's request `xid`.
    Abbrev {
        xid: u32,
    },
    /// The switch stopped sending updates (its buffer for this connection is full): changes
    /// until [`FlowUpdate::Resumed`] are not reported.
    Paused,
    Resumed,
    /// An update the codec could not decode (the owner should assume anything changed).
    Undecoded,
    /// Another controller changed a group or meter (OFPT_REQUESTFORWARD, which carries its
    /// request; `msg_type` is that request's type: GROUP_MOD or METER_MOD).
    ForwardedRequest {
        msg_type: u8,
    },
}

/// The update a forwarded request (the body of OFPT_REQUESTFORWARD: the other controller's
/// message, header first) stands for.
pub fn forwarded_request(body: &[u8]) -> FlowUpdate {
    match body.get(1) {
        Some(&msg_type) => FlowUpdate::ForwardedRequest { msg_type },
        None => FlowUpdate::Undecoded,
    }
}

/// The body of a flow monitor request watching every table for added, removed and modified
/// flows, without the initial flows and without instructions.
pub fn flow_monitor_request_body(monitor_id: u32) -> Vec<u8> {
    let mut w = Writer::new();
    w.u32(monitor_id);
    w.u32(OFPP_ANY);
    w.u32(OFPG_ANY);
    w.u16(flags::ADD | flags::REMOVED | flags::MODIFY);
    w.u8(OFPTT_ALL);
    w.u8(OFPFMC_ADD);
    // An empty OXM match: type OFPMT_OXM, length 4, padded to 8.
    w.u16(1);
    w.u16(4);
    w.zeros(4);
    w.buf
}

/// Decodes the body of a flow monitor reply (one or more updates).
pub fn decode_flow_updates(body: &[u8]) -> Result<Vec<FlowUpdate>, CodecError> {
    let mut r = Reader::new(body, "flow monitor reply");
    let mut updates = Vec::new();
    while r.remaining() > 0 {
        let mut head = r.clone();
        let length = usize::from(head.u16()?);
        let event = head.u16()?;
        if length < 8 || length % 8 != 0 {
            return Err(CodecError::BadLength {
                what: "flow update",
                len: length,
            });
        }
        let entry = r.bytes(length)?;
        let mut e = Reader::new(entry, "flow update");
        e.skip(4)?;
        let update = match event {
            0..=3 => {
                if length < FULL_LEN {
                    return Err(CodecError::BadLength {
                        what: "full flow update",
                        len: length,
                    });
                }
                let table_id = e.u8()?;
                let reason = e.u8()?;
                e.skip(4)?; // idle and hard timeouts
                let priority = e.u16()?;
                e.skip(4)?;
                let cookie = e.u64()?;
                let event = match event {
                    0 => FlowEvent::Initial,
                    1 => FlowEvent::Added,
                    2 => FlowEvent::Removed,
                    _ => FlowEvent::Modified,
                };
                FlowUpdate::Full {
                    event,
                    table_id,
                    reason,
                    priority,
                    cookie,
                }
            }
            4 => FlowUpdate::Abbrev { xid: e.u32()? },
            5 => FlowUpdate::Paused,
            6 => FlowUpdate::Resumed,
            other => return Err(CodecError::Unsupported(format!("flow update event {other}"))),
        };
        updates.push(update);
    }
    Ok(updates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(event: u16, table: u8, cookie: u64, extra: usize) -> Vec<u8> {
        let mut w = Writer::new();
        w.u16((FULL_LEN + extra) as u16);
        w.u16(event);
        w.u8(table);
        w.u8(if event == 2 { 1 } else { 0 });
        w.u16(0);
        w.u16(0);
        w.u16(200);
        w.zeros(4);
        w.u64(cookie);
        w.zeros(extra);
        w.buf
    }

    #[test]
    fn request_watches_every_table_without_initial_flows() {
        let b = flow_monitor_request_body(7);
        assert_eq!(b.len(), 24);
        assert_eq!(&b[0..4], &7u32.to_be_bytes());
        assert_eq!(u16::from_be_bytes([b[12], b[13]]), 0b1110);
        assert_eq!(b[14], 0xff);
        assert_eq!(b[15], 0);
        assert_eq!(&b[16..20], &[0, 1, 0, 4]);
    }

    #[test]
    fn decodes_full_abbrev_and_pause_updates() {
        let mut body = full(2, 10, 0x0001_0000_0000_0005, 8);
        body.extend(full(1, 3, 42, 16));
        body.extend([0, 8, 0, 4, 0, 0, 0, 9]);
        body.extend([0, 8, 0, 5, 0, 0, 0, 0]);
        body.extend([0, 8, 0, 6, 0, 0, 0, 0]);
        let got = decode_flow_updates(&body).unwrap();
        assert_eq!(
            got,
            vec![
                FlowUpdate::Full {
                    event: FlowEvent::Removed,
                    table_id: 10,
                    reason: 1,
                    priority: 200,
                    cookie: 0x0001_0000_0000_0005
                },
                FlowUpdate::Full {
                    event: FlowEvent::Added,
                    table_id: 3,
                    reason: 0,
                    priority: 200,
                    cookie: 42
                },
                FlowUpdate::Abbrev { xid: 9 },
                FlowUpdate::Paused,
                FlowUpdate::Resumed,
            ]
        );
    }

    #[test]
    fn rejects_bad_lengths_and_unknown_events() {
        assert!(decode_flow_updates(&[0, 6, 0, 4, 0, 0]).is_err());
        assert!(decode_flow_updates(&[0, 16, 0, 4, 0, 0, 0, 9]).is_err());
        assert!(decode_flow_updates(&[0, 8, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(matches!(
            decode_flow_updates(&[0, 8, 0, 9, 0, 0, 0, 0]),
            Err(CodecError::Unsupported(_))
        ));
        assert_eq!(decode_flow_updates(&[]).unwrap(), vec![]);
    }
}
