//! Ports: `ofp_port` (OpenFlow 1.4+ layout with its Ethernet property), OFPT_PORT_STATUS and
//! the port-description reply body, encoded (for tests and fakes) and decoded.

use crate::events::{PortDesc, PortReason, PortStatus};
use crate::wire::{begin_msg, msg_type, CodecError, Reader, Writer};

use super::{finish, read_props};

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

pub(super) fn decode_port_status(r: &mut Reader<'_>) -> Result<PortStatus, CodecError> {
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
