//! Multipart requests and reply bodies: flow and aggregate statistics (with the OpenFlow 1.5
//! OXS statistics), port, group and meter descriptions.

use std::time::Duration;

use crate::actions::{decode_instructions, encode_instructions};
use crate::flow::{port, AggregateStats, Flow, FlowFilter, FlowStats};
use crate::oxm::{decode_match, encode_match};
use crate::wire::{begin_msg, msg_type, CodecError, Reader, Writer};

use super::{bytes_summary, finish, multipart, OFPG_ALL, OFPM_ALL};

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

/// A multipart request whose body is one 32-bit id (or `*_ALL`/`ANY`) and 4 bytes of padding:
/// the group, meter and port description requests.
fn one_id_request(xid: u32, mp_type: u16, id: u32) -> Vec<u8> {
    let mut body = id.to_be_bytes().to_vec();
    body.extend_from_slice(&[0; 4]);
    multipart_request(xid, mp_type, &body).unwrap_or_default()
}

/// Group description request for every group.
pub fn group_desc_request(xid: u32) -> Vec<u8> {
    one_id_request(xid, multipart::GROUP_DESC, OFPG_ALL)
}

/// Meter configuration request for every meter.
pub fn meter_config_request(xid: u32) -> Vec<u8> {
    one_id_request(xid, multipart::METER_CONFIG, OFPM_ALL)
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
    one_id_request(xid, multipart::PORT_DESC, port::ANY)
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
    r.skip(crate::wire::pad8(len) - len)?;
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
