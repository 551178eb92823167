//! Actions and instructions: encoding [`Action`] lists into OpenFlow 1.5 actions (standard
//! `output`, `group`, `set_field`, `meter`, and the Nicira `NXAST_*` extensions OVS needs:
//! resubmit, output_reg, reg_move, ct, ct_clear, conjunction, controller2, note), wrapping them
//! in Apply-Actions / Goto-Table instructions, and decoding them back.
//!
//! Encodings mirror what `ovs-ofctl -O OpenFlow15` sends for the same action text, so that
//! `ovs-ofctl dump-flows` prints what `render.rs` predicts.

use std::net::IpAddr;

use super::flow::{port, Action, ControllerAction, CtAction, CtZone, NatAction, NatKind, RegRange, SetField};
use super::oxm::{read_oxm, Field};
use super::wire::{pad8, CodecError, Reader, Writer, NX_VENDOR_ID};

/// Standard action types (OFPAT_*).
pub mod ofpat {
    pub const OUTPUT: u16 = 0;
    pub const GROUP: u16 = 22;
    pub const SET_FIELD: u16 = 25;
    pub const COPY_FIELD: u16 = 28;
    pub const METER: u16 = 29;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Nicira action subtypes (NXAST_*).
pub mod nxast {
    pub const RESUBMIT: u16 = 1;
    pub const REG_MOVE: u16 = 6;
    pub const NOTE: u16 = 8;
    pub const RESUBMIT_TABLE: u16 = 14;
    pub const OUTPUT_REG: u16 = 15;
    pub const CONJUNCTION: u16 = 34;
    pub const CT: u16 = 35;
    pub const NAT: u16 = 36;
    pub const CONTROLLER2: u16 = 37;
    pub const CT_CLEAR: u16 = 43;
    pub const RESUBMIT_TABLE_CT: u16 = 44;
}

/// Instruction types (OFPIT_*).
pub mod ofpit {
    pub const GOTO_TABLE: u16 = 1;
    pub const APPLY_ACTIONS: u16 = 4;
}

/// NXAC2PT_* properties of NXAST_CONTROLLER2.
mod nxac2pt {
    pub const MAX_LEN: u16 = 0;
    pub const CONTROLLER_ID: u16 = 1;
    pub const REASON: u16 = 2;
    pub const USERDATA: u16 = 3;
    pub const PAUSE: u16 = 4;
    pub const METER_ID: u16 = 5;
}

/// `ofp_packet_in_reason` value OVS assumes when a controller action has no reason property.
pub const OFPR_ACTION: u8 = 1;
/// `ct` flag: commit the connection.
const NX_CT_F_COMMIT: u16 = 1;
/// NXAST_NAT flags (NX_NAT_F_*).
mod nat_flags {
    pub const SRC: u16 = 1;
    pub const DST: u16 = 2;
    pub const PERSISTENT: u16 = 4;
    pub const PROTO_HASH: u16 = 8;
    pub const PROTO_RANDOM: u16 = 16;
}
/// NXAST_NAT range_present bits (NX_NAT_RANGE_*).
mod nat_range {
    pub const IPV4_MIN: u16 = 1;
    pub const IPV4_MAX: u16 = 2;
    pub const IPV6_MIN: u16 = 4;
    pub const IPV6_MAX: u16 = 8;
    pub const PROTO_MIN: u16 = 16;
    pub const PROTO_MAX: u16 = 32;
}
/// `ct` recirculation table meaning "no recirculation".
const NX_CT_RECIRC_NONE: u8 = 0xff;
/// The 16-bit OpenFlow 1.0 port number of OFPP_IN_PORT (used by NXAST_RESUBMIT*).
const OFPP10_IN_PORT: u16 = 0xfff8;
/// Every table (used by NXAST_RESUBMIT_TABLE as "no table").
const TABLE_NONE: u8 = 0xff;

/// Converts a 32-bit OpenFlow 1.1+ port number to OVS's 16-bit space (as in `resubmit`).
pub fn port_to_16(p: u32) -> Result<u16, CodecError> {
    if p < 0xff00 {
        Ok(p as u16)
    } else if p >= 0xffff_ff00 {
        Ok((p - 0xffff_0000) as u16)
    } else {
        Err(CodecError::Invalid(format!(
            "port {p} outside the 16-bit port space"
        )))
    }
}

/// Converts a 16-bit port number back to the 32-bit space.
pub fn port_from_16(p: u16) -> u32 {
    if p >= 0xff00 {
        u32::from(p) + 0xffff_0000
    } else {
        u32::from(p)
    }
}

fn check_range(r: &RegRange) -> Result<(), CodecError> {
    if r.reg > 15 || r.n_bits == 0 || u32::from(r.ofs) + u32::from(r.n_bits) > 32 {
        return Err(CodecError::Invalid(format!(
            "register range reg{}[{}..+{}] (need reg0..15, 1..32 bits inside the register)",
            r.reg, r.ofs, r.n_bits
        )));
    }
    Ok(())
}

fn ofs_nbits(r: &RegRange) -> u16 {
    (u16::from(r.ofs) << 6) | u16::from(r.n_bits.saturating_sub(1))
}

fn range_from(header: u32, ofs: u16, n_bits: u16) -> Result<RegRange, CodecError> {
    match Field::from_header(header) {
        Some(Field::Reg(reg)) if n_bits >= 1 && u32::from(ofs) + u32::from(n_bits) <= 32 => Ok(RegRange {
            reg,
            ofs: ofs as u8,
            n_bits: n_bits as u8,
        }),
        _ => Err(CodecError::Unsupported(format!(
            "sub-field {header:#010x}[{ofs}..+{n_bits}] (only registers are supported)"
        ))),
    }
}

fn range_from_ofs_nbits(header: u32, v: u16) -> Result<RegRange, CodecError> {
    range_from(header, v >> 6, (v & 0x3f) + 1)
}

/// Starts a Nicira action; returns its start offset for [`end_action`].
fn begin_nx(w: &mut Writer, subtype: u16) -> usize {
    let start = w.len();
    w.u16(ofpat::EXPERIMENTER);
    w.u16(0);
    w.u32(NX_VENDOR_ID);
    w.u16(subtype);
    start
}

fn end_action(w: &mut Writer, start: usize) -> Result<(), CodecError> {
    w.pad8_from(start);
    w.patch_len16(start + 2, start, "action")
}

/// A set_field's field, value bytes and optional mask bytes.
type FieldValue = (Field, Vec<u8>, Option<Vec<u8>>);

fn set_field_value(sf: &SetField) -> Result<FieldValue, CodecError> {
    fn masked32(v: u32, m: Option<u32>) -> Result<(Vec<u8>, Option<Vec<u8>>), CodecError> {
        match m {
            None | Some(u32::MAX) => Ok((v.to_be_bytes().to_vec(), None)),
            Some(0) => Err(CodecError::Invalid("set_field with an all-zero mask".into())),
            Some(m) => Ok(((v & m).to_be_bytes().to_vec(), Some(m.to_be_bytes().to_vec()))),
        }
    }
    Ok(match sf {
        SetField::Reg { idx, value, mask } => {
            if *idx > 15 {
                return Err(CodecError::Invalid(format!("set_field to reg{idx}")));
            }
            let (v, m) = masked32(*value, *mask)?;
            (Field::Reg(*idx), v, m)
        }
        SetField::CtMark { value, mask } => {
            let (v, m) = masked32(*value, *mask)?;
            (Field::CtMark, v, m)
        }
        SetField::PktMark { value, mask } => {
            let (v, m) = masked32(*value, *mask)?;
            (Field::PktMark, v, m)
        }
        SetField::CtLabel { value, mask } => match mask {
            None | Some(u128::MAX) => (Field::CtLabel, value.to_be_bytes().to_vec(), None),
            Some(0) => return Err(CodecError::Invalid("set_field with an all-zero mask".into())),
            Some(m) => (
                Field::CtLabel,
                (value & m).to_be_bytes().to_vec(),
                Some(m.to_be_bytes().to_vec()),
            ),
        },
        SetField::Metadata { value, mask } => match mask {
            None | Some(u64::MAX) => (Field::Metadata, value.to_be_bytes().to_vec(), None),
            Some(0) => return Err(CodecError::Invalid("set_field with an all-zero mask".into())),
            Some(m) => (
                Field::Metadata,
                (value & m).to_be_bytes().to_vec(),
                Some(m.to_be_bytes().to_vec()),
            ),
        },
        SetField::EthSrc(mac) => (Field::EthSrc, mac.to_vec(), None),
        SetField::EthDst(mac) => (Field::EthDst, mac.to_vec(), None),
        SetField::Ipv4Src(a) => (Field::Ipv4Src, a.octets().to_vec(), None),
        SetField::Ipv4Dst(a) => (Field::Ipv4Dst, a.octets().to_vec(), None),
        SetField::Ipv6Src(a) => (Field::Ipv6Src, a.octets().to_vec(), None),
        SetField::Ipv6Dst(a) => (Field::Ipv6Dst, a.octets().to_vec(), None),
        SetField::TcpSrc(p) => (Field::TcpSrc, p.to_be_bytes().to_vec(), None),
        SetField::TcpDst(p) => (Field::TcpDst, p.to_be_bytes().to_vec(), None),
        SetField::UdpSrc(p) => (Field::UdpSrc, p.to_be_bytes().to_vec(), None),
        SetField::UdpDst(p) => (Field::UdpDst, p.to_be_bytes().to_vec(), None),
    })
}

fn put_prop(w: &mut Writer, ty: u16, value: &[u8]) -> Result<(), CodecError> {
    let start = w.len();
    w.u16(ty);
    w.u16(0);
    w.bytes(value);
    w.patch_len16(start + 2, start, "controller property")?;
    w.pad8_from(start);
    Ok(())
}

fn encode_controller(c: &ControllerAction, w: &mut Writer) -> Result<(), CodecError> {
    let start = begin_nx(w, nxast::CONTROLLER2);
    w.zeros(6);
    if c.max_len != u16::MAX {
        put_prop(w, nxac2pt::MAX_LEN, &c.max_len.to_be_bytes())?;
    }
    if c.controller_id != 0 {
        put_prop(w, nxac2pt::CONTROLLER_ID, &c.controller_id.to_be_bytes())?;
    }
    if c.reason != OFPR_ACTION {
        put_prop(w, nxac2pt::REASON, &[c.reason])?;
    }
    if !c.userdata.is_empty() {
        put_prop(w, nxac2pt::USERDATA, &c.userdata)?;
    }
    if c.pause {
        put_prop(w, nxac2pt::PAUSE, &[])?;
    }
    if let Some(m) = c.meter_id.filter(|m| *m != 0) {
        put_prop(w, nxac2pt::METER_ID, &m.to_be_bytes())?;
    }
    end_action(w, start)
}

fn encode_ct(ct: &CtAction, w: &mut Writer) -> Result<(), CodecError> {
    let start = begin_nx(w, nxast::CT);
    w.u16(if ct.commit { NX_CT_F_COMMIT } else { 0 });
    match ct.zone {
        CtZone::Immediate(z) => {
            w.u32(0);
            w.u16(z);
        }
        CtZone::Field(r) => {
            check_range(&r)?;
            w.u32(Field::Reg(r.reg).header(false));
            w.u16(ofs_nbits(&r));
        }
    }
    match ct.table {
        Some(TABLE_NONE) => return Err(CodecError::Invalid("ct(table=255) is not a table".into())),
        Some(t) => w.u8(t),
        None => w.u8(NX_CT_RECIRC_NONE),
    }
    w.zeros(3);
    w.u16(0); // alg
    for (i, a) in ct.exec.iter().enumerate() {
        match a {
            Action::Nat(n) if i == 0 => encode_nat(n, w)?,
            Action::Nat(_) => {
                return Err(CodecError::Invalid(
                    "nat must be the first action inside ct".into(),
                ))
            }
            Action::Ct(_) => return Err(CodecError::Invalid("ct inside ct".into())),
            a => encode_action(a, w)?,
        }
    }
    end_action(w, start)
}

fn encode_nat(n: &NatAction, w: &mut Writer) -> Result<(), CodecError> {
    let mut flags = match n.kind {
        None => 0,
        Some(NatKind::Src) => nat_flags::SRC,
        Some(NatKind::Dst) => nat_flags::DST,
    };
    if n.persistent {
        flags |= nat_flags::PERSISTENT;
    }
    if n.hash {
        flags |= nat_flags::PROTO_HASH;
    }
    if n.random {
        flags |= nat_flags::PROTO_RANDOM;
    }
    if n.kind.is_none() && (n.addrs.is_some() || n.ports.is_some()) {
        return Err(CodecError::Invalid("nat with a range needs src or dst".into()));
    }
    if n.ports.is_some() && n.addrs.is_none() {
        return Err(CodecError::Invalid(
            "nat port range without an address range".into(),
        ));
    }
    let start = begin_nx(w, nxast::NAT);
    w.zeros(2);
    w.u16(flags);
    let present_at = w.len();
    w.u16(0);
    let mut present = 0;
    match n.addrs {
        None => {}
        Some((IpAddr::V4(min), IpAddr::V4(max))) => {
            if !min.is_unspecified() {
                w.bytes(&min.octets());
                present |= nat_range::IPV4_MIN;
            }
            if !max.is_unspecified() && max != min {
                w.bytes(&max.octets());
                present |= nat_range::IPV4_MAX;
            }
        }
        Some((IpAddr::V6(min), IpAddr::V6(max))) => {
            if !min.is_unspecified() {
                w.bytes(&min.octets());
                present |= nat_range::IPV6_MIN;
            }
            if !max.is_unspecified() && max != min {
                w.bytes(&max.octets());
                present |= nat_range::IPV6_MAX;
            }
        }
        Some(_) => {
            return Err(CodecError::Invalid(
                "nat address range mixes IPv4 and IPv6".into(),
            ))
        }
    }
    if let Some((min, max)) = n.ports {
        if min != 0 {
            w.u16(min);
            present |= nat_range::PROTO_MIN;
        }
        if max != 0 && max != min {
            w.u16(max);
            present |= nat_range::PROTO_MAX;
        }
    }
    if let Some(slot) = w.buf.get_mut(present_at..present_at + 2) {
        slot.copy_from_slice(&u16::to_be_bytes(present));
    }
    end_action(w, start)
}

/// Encodes one action.
pub fn encode_action(a: &Action, w: &mut Writer) -> Result<(), CodecError> {
    match a {
        Action::Output(p) => {
            w.u16(ofpat::OUTPUT);
            w.u16(16);
            w.u32(*p);
            w.u16(if *p == port::CONTROLLER { u16::MAX } else { 0 });
            w.zeros(6);
        }
        Action::Group(g) => {
            w.u16(ofpat::GROUP);
            w.u16(8);
            w.u32(*g);
        }
        Action::Meter(m) => {
            w.u16(ofpat::METER);
            w.u16(8);
            w.u32(*m);
        }
        Action::SetField(sf) => {
            let (field, value, mask) = set_field_value(sf)?;
            let start = w.len();
            w.u16(ofpat::SET_FIELD);
            w.u16(0);
            w.u32(field.header(mask.is_some()));
            w.bytes(&value);
            if let Some(m) = mask {
                w.bytes(&m);
            }
            end_action(w, start)?;
        }
        Action::OutputReg(r) => {
            check_range(r)?;
            let start = begin_nx(w, nxast::OUTPUT_REG);
            w.u16(ofs_nbits(r));
            w.u32(Field::Reg(r.reg).header(false));
            w.u16(u16::MAX);
            w.zeros(6);
            end_action(w, start)?;
        }
        Action::Move { src, dst } => {
            check_range(src)?;
            check_range(dst)?;
            if src.n_bits != dst.n_bits {
                return Err(CodecError::Invalid(format!(
                    "move of {} bits into {} bits",
                    src.n_bits, dst.n_bits
                )));
            }
            // OpenFlow 1.5 copy_field (OVS refuses NXAST_REG_MOVE in OpenFlow 1.5).
            let start = w.len();
            w.u16(ofpat::COPY_FIELD);
            w.u16(0);
            w.u16(u16::from(src.n_bits));
            w.u16(u16::from(src.ofs));
            w.u16(u16::from(dst.ofs));
            w.zeros(2);
            w.u32(Field::Reg(src.reg).header(false));
            w.u32(Field::Reg(dst.reg).header(false));
            end_action(w, start)?;
        }
        Action::Ct(ct) => encode_ct(ct, w)?,
        Action::CtClear => {
            let start = begin_nx(w, nxast::CT_CLEAR);
            w.zeros(6);
            end_action(w, start)?;
        }
        Action::Conjunction {
            id,
            clause,
            n_clauses,
        } => {
            if !(2..=64).contains(n_clauses) || *clause == 0 || clause > n_clauses {
                return Err(CodecError::Invalid(format!(
                    "conjunction({id},{clause}/{n_clauses}): need 1 <= clause <= n_clauses, 2 <= n_clauses <= 64"
                )));
            }
            let start = begin_nx(w, nxast::CONJUNCTION);
            w.u8(clause - 1);
            w.u8(*n_clauses);
            w.u32(*id);
            end_action(w, start)?;
        }
        Action::Controller(c) => encode_controller(c, w)?,
        Action::Resubmit { in_port, table } | Action::ResubmitCt { in_port, table } => {
            let ct = matches!(a, Action::ResubmitCt { .. });
            let start = begin_nx(
                w,
                if ct {
                    nxast::RESUBMIT_TABLE_CT
                } else {
                    nxast::RESUBMIT_TABLE
                },
            );
            w.u16(match in_port {
                Some(p) => port_to_16(*p)?,
                None => OFPP10_IN_PORT,
            });
            match table {
                Some(TABLE_NONE) => {
                    return Err(CodecError::Invalid("resubmit to table 255 is not a table".into()))
                }
                Some(t) => w.u8(*t),
                None => w.u8(TABLE_NONE),
            }
            w.zeros(3);
            end_action(w, start)?;
        }
        Action::Note(bytes) => {
            let start = begin_nx(w, nxast::NOTE);
            w.bytes(bytes);
            // OVS pads notes with zeros to a multiple of 8 (at least 6 bytes of note).
            if w.len() - start < 16 {
                w.zeros(16 - (w.len() - start));
            }
            end_action(w, start)?;
        }
        Action::Nat(_) => {
            return Err(CodecError::Invalid(
                "nat is only valid as the first action inside ct".into(),
            ))
        }
    }
    Ok(())
}

/// Encodes a list of actions.
pub fn encode_actions(actions: &[Action], w: &mut Writer) -> Result<(), CodecError> {
    for a in actions {
        encode_action(a, w)?;
    }
    Ok(())
}

/// Encodes the instructions of a flow: Apply-Actions (if any action) then Goto-Table.
pub fn encode_instructions(actions: &[Action], goto: Option<u8>, w: &mut Writer) -> Result<(), CodecError> {
    if !actions.is_empty() {
        let start = w.len();
        w.u16(ofpit::APPLY_ACTIONS);
        w.u16(0);
        w.zeros(4);
        encode_actions(actions, w)?;
        w.patch_len16(start + 2, start, "apply_actions instruction")?;
    }
    if let Some(t) = goto {
        if t == TABLE_NONE {
            return Err(CodecError::Invalid("goto_table:255 is not a table".into()));
        }
        w.u16(ofpit::GOTO_TABLE);
        w.u16(8);
        w.u8(t);
        w.zeros(3);
    }
    Ok(())
}

// === decoding ===

fn decode_set_field(r: &mut Reader<'_>) -> Result<Action, CodecError> {
    let o = read_oxm(r)?;
    let be = |b: &[u8]| b.iter().fold(0u128, |acc, x| (acc << 8) | u128::from(*x));
    let v = be(o.value);
    let m = o.mask.map(be);
    let sf = match o.field {
        Field::Reg(idx) => SetField::Reg {
            idx,
            value: v as u32,
            mask: m.map(|m| m as u32),
        },
        Field::CtMark => SetField::CtMark {
            value: v as u32,
            mask: m.map(|m| m as u32),
        },
        Field::PktMark => SetField::PktMark {
            value: v as u32,
            mask: m.map(|m| m as u32),
        },
        Field::CtLabel => SetField::CtLabel { value: v, mask: m },
        Field::Metadata => SetField::Metadata {
            value: v as u64,
            mask: m.map(|m| m as u64),
        },
        Field::Ipv4Src if m.is_none() => SetField::Ipv4Src((v as u32).into()),
        Field::Ipv4Dst if m.is_none() => SetField::Ipv4Dst((v as u32).into()),
        Field::Ipv6Src if m.is_none() => SetField::Ipv6Src(v.into()),
        Field::Ipv6Dst if m.is_none() => SetField::Ipv6Dst(v.into()),
        Field::TcpSrc if m.is_none() => SetField::TcpSrc(v as u16),
        Field::TcpDst if m.is_none() => SetField::TcpDst(v as u16),
        Field::UdpSrc if m.is_none() => SetField::UdpSrc(v as u16),
        Field::UdpDst if m.is_none() => SetField::UdpDst(v as u16),
        Field::EthSrc | Field::EthDst if m.is_none() => {
            let mut mac = [0u8; 6];
            for (d, s) in mac.iter_mut().zip(o.value) {
                *d = *s;
            }
            if o.field == Field::EthSrc {
                SetField::EthSrc(mac)
            } else {
                SetField::EthDst(mac)
            }
        }
        f => return Err(CodecError::Unsupported(format!("set_field of {f:?}"))),
    };
    // The rest of the action is padding.
    Ok(Action::SetField(sf))
}

fn decode_controller(r: &mut Reader<'_>) -> Result<Action, CodecError> {
    r.skip(6)?;
    let mut c = ControllerAction {
        max_len: u16::MAX,
        controller_id: 0,
        reason: OFPR_ACTION,
        userdata: Vec::new(),
        pause: false,
        meter_id: None,
    };
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(CodecError::BadLength {
                what: "controller property",
                len,
            });
        }
        let mut body = r.sub(len - 4, "controller property")?;
        r.skip(pad8(len) - len)?;
        match ty {
            nxac2pt::MAX_LEN => c.max_len = body.u16()?,
            nxac2pt::CONTROLLER_ID => c.controller_id = body.u16()?,
            nxac2pt::REASON => c.reason = body.u8()?,
            nxac2pt::USERDATA => c.userdata = body.rest().to_vec(),
            nxac2pt::PAUSE => c.pause = true,
            nxac2pt::METER_ID => c.meter_id = Some(body.u32()?).filter(|m| *m != 0),
            other => return Err(CodecError::Unsupported(format!("controller property {other}"))),
        }
    }
    Ok(Action::Controller(c))
}

fn decode_nx(subtype: u16, r: &mut Reader<'_>, depth: usize) -> Result<Action, CodecError> {
    Ok(match subtype {
        nxast::RESUBMIT | nxast::RESUBMIT_TABLE | nxast::RESUBMIT_TABLE_CT => {
            let p = r.u16()?;
            let t = if subtype == nxast::RESUBMIT {
                TABLE_NONE
            } else {
                r.u8()?
            };
            let in_port = (p != OFPP10_IN_PORT).then(|| port_from_16(p));
            let table = (t != TABLE_NONE).then_some(t);
            if subtype == nxast::RESUBMIT_TABLE_CT {
                Action::ResubmitCt { in_port, table }
            } else {
                Action::Resubmit { in_port, table }
            }
        }
        nxast::NAT => {
            if depth == 0 {
                return Err(CodecError::Invalid("nat outside ct".into()));
            }
            decode_nat(r)?
        }
        nxast::REG_MOVE => {
            let n_bits = r.u16()?;
            let src_ofs = r.u16()?;
            let dst_ofs = r.u16()?;
            let src = r.u32()?;
            let dst = r.u32()?;
            Action::Move {
                src: range_from(src, src_ofs, n_bits)?,
                dst: range_from(dst, dst_ofs, n_bits)?,
            }
        }
        nxast::NOTE => Action::Note(r.rest().to_vec()),
        nxast::OUTPUT_REG => {
            let on = r.u16()?;
            let src = r.u32()?;
            Action::OutputReg(range_from_ofs_nbits(src, on)?)
        }
        nxast::CONJUNCTION => {
            let clause = r.u8()?;
            let n_clauses = r.u8()?;
            let id = r.u32()?;
            if !(2..=64).contains(&n_clauses) || clause >= n_clauses {
                return Err(CodecError::Invalid(format!(
                    "conjunction clause {clause}/{n_clauses}"
                )));
            }
            Action::Conjunction {
                id,
                clause: clause + 1,
                n_clauses,
            }
        }
        nxast::CT => {
            let flags = r.u16()?;
            let zone_src = r.u32()?;
            let zone = r.u16()?;
            let table = r.u8()?;
            r.skip(3)?;
            let _alg = r.u16()?;
            if depth > 0 {
                return Err(CodecError::Invalid("nested ct action".into()));
            }
            let exec = decode_actions_depth(r, depth + 1)?;
            if exec.iter().skip(1).any(|a| matches!(a, Action::Nat(_))) {
                return Err(CodecError::Invalid("nat after other actions inside ct".into()));
            }
            Action::Ct(CtAction {
                commit: flags & NX_CT_F_COMMIT != 0,
                table: (table != NX_CT_RECIRC_NONE).then_some(table),
                zone: if zone_src == 0 {
                    CtZone::Immediate(zone)
                } else {
                    CtZone::Field(range_from_ofs_nbits(zone_src, zone)?)
                },
                exec,
            })
        }
        nxast::CT_CLEAR => Action::CtClear,
        nxast::CONTROLLER2 => decode_controller(r)?,
        other => return Err(CodecError::Unsupported(format!("Nicira action subtype {other}"))),
    })
}

fn decode_actions_depth(r: &mut Reader<'_>, depth: usize) -> Result<Vec<Action>, CodecError> {
    let mut out = Vec::new();
    while !r.is_empty() {
        let ty = r.peek_u16(0)?;
        let len = usize::from(r.peek_u16(2)?);
        if len < 8 || len % 8 != 0 {
            return Err(CodecError::BadLength { what: "action", len });
        }
        let mut a = r.sub(len, "action")?;
        a.skip(4)?;
        let action = match ty {
            ofpat::OUTPUT => {
                let p = a.u32()?;
                let max_len = a.u16()?;
                if p == port::CONTROLLER && max_len != u16::MAX {
                    // `controller(max_len=N)` with every other setting at its default: OVS
                    // sends it back as an output action.
                    Action::Controller(ControllerAction {
                        max_len,
                        controller_id: 0,
                        reason: OFPR_ACTION,
                        userdata: Vec::new(),
                        pause: false,
                        meter_id: None,
                    })
                } else {
                    Action::Output(p)
                }
            }
            ofpat::GROUP => Action::Group(a.u32()?),
            ofpat::METER => Action::Meter(a.u32()?),
            ofpat::SET_FIELD => decode_set_field(&mut a)?,
            ofpat::COPY_FIELD => {
                let n_bits = a.u16()?;
                let src_ofs = a.u16()?;
                let dst_ofs = a.u16()?;
                a.skip(2)?;
                let src = a.u32()?;
                let dst = a.u32()?;
                Action::Move {
                    src: range_from(src, src_ofs, n_bits)?,
                    dst: range_from(dst, dst_ofs, n_bits)?,
                }
            }
            ofpat::EXPERIMENTER => {
                let vendor = a.u32()?;
                if vendor != NX_VENDOR_ID {
                    return Err(CodecError::Unsupported(format!(
                        "experimenter action {vendor:#x}"
                    )));
                }
                let subtype = a.u16()?;
                decode_nx(subtype, &mut a, depth)?
            }
            other => return Err(CodecError::Unsupported(format!("action type {other}"))),
        };
        out.push(action);
    }
    Ok(out)
}

fn decode_nat(r: &mut Reader<'_>) -> Result<Action, CodecError> {
    r.skip(2)?;
    let flags = r.u16()?;
    let present = r.u16()?;
    let kind = match flags & (nat_flags::SRC | nat_flags::DST) {
        0 => None,
        nat_flags::SRC => Some(NatKind::Src),
        nat_flags::DST => Some(NatKind::Dst),
        _ => return Err(CodecError::Invalid("nat with both src and dst".into())),
    };
    let has = |bit: u16| present & bit != 0;
    let mut addrs = None;
    if has(nat_range::IPV4_MIN) || has(nat_range::IPV4_MAX) {
        let min = if has(nat_range::IPV4_MIN) { r.u32()? } else { 0 };
        let max = if has(nat_range::IPV4_MAX) { r.u32()? } else { min };
        addrs = Some((IpAddr::V4(min.into()), IpAddr::V4(max.into())));
    }
    if has(nat_range::IPV6_MIN) || has(nat_range::IPV6_MAX) {
        if addrs.is_some() {
            return Err(CodecError::Invalid("nat with IPv4 and IPv6 ranges".into()));
        }
        let min = if has(nat_range::IPV6_MIN) { r.u128()? } else { 0 };
        let max = if has(nat_range::IPV6_MAX) { r.u128()? } else { min };
        addrs = Some((IpAddr::V6(min.into()), IpAddr::V6(max.into())));
    }
    let mut ports = None;
    if has(nat_range::PROTO_MIN) || has(nat_range::PROTO_MAX) {
        let min = if has(nat_range::PROTO_MIN) { r.u16()? } else { 0 };
        let max = if has(nat_range::PROTO_MAX) { r.u16()? } else { min };
        ports = Some((min, max));
    }
    // The rest is padding.
    Ok(Action::Nat(NatAction {
        kind,
        addrs,
        ports,
        persistent: flags & nat_flags::PERSISTENT != 0,
        hash: flags & nat_flags::PROTO_HASH != 0,
        random: flags & nat_flags::PROTO_RANDOM != 0,
    }))
}

/// The bytes OVS keeps for a `note`: the given bytes zero-padded so the action fills a
/// multiple of 8 bytes (at least 6 bytes of note).
pub fn padded_note(bytes: &[u8]) -> Vec<u8> {
    let total = pad8(10 + bytes.len()).max(16);
    let mut b = bytes.to_vec();
    b.resize(total - 10, 0);
    b
}

fn normalize_set_field(sf: &SetField) -> SetField {
    fn m32(value: u32, mask: Option<u32>) -> (u32, Option<u32>) {
        match mask {
            None | Some(u32::MAX) => (value, None),
            Some(m) => (value & m, Some(m)),
        }
    }
    match *sf {
        SetField::Reg { idx, value, mask } => {
            let (value, mask) = m32(value, mask);
            SetField::Reg { idx, value, mask }
        }
        SetField::CtMark { value, mask } => {
            let (value, mask) = m32(value, mask);
            SetField::CtMark { value, mask }
        }
        SetField::PktMark { value, mask } => {
            let (value, mask) = m32(value, mask);
            SetField::PktMark { value, mask }
        }
        SetField::CtLabel { value, mask } => match mask {
            None | Some(u128::MAX) => SetField::CtLabel { value, mask: None },
            Some(m) => SetField::CtLabel {
                value: value & m,
                mask: Some(m),
            },
        },
        SetField::Metadata { value, mask } => match mask {
            None | Some(u64::MAX) => SetField::Metadata { value, mask: None },
            Some(m) => SetField::Metadata {
                value: value & m,
                mask: Some(m),
            },
        },
        ref other => other.clone(),
    }
}

fn normalize_action(a: &Action) -> Action {
    match a {
        Action::SetField(sf) => Action::SetField(normalize_set_field(sf)),
        Action::Ct(ct) => Action::Ct(CtAction {
            exec: normalize_actions(&ct.exec),
            ..ct.clone()
        }),
        Action::Controller(c) => Action::Controller(ControllerAction {
            meter_id: c.meter_id.filter(|m| *m != 0),
            ..c.clone()
        }),
        Action::Resubmit { in_port, table } => Action::Resubmit {
            in_port: in_port.filter(|p| *p != port::IN_PORT),
            table: *table,
        },
        Action::ResubmitCt { in_port, table } => Action::ResubmitCt {
            in_port: in_port.filter(|p| *p != port::IN_PORT),
            table: *table,
        },
        Action::Note(b) => Action::Note(padded_note(b)),
        other => other.clone(),
    }
}

/// Returns `actions` in the form OVS keeps and reports them: masked set_field values ANDed
/// with their mask and all-ones masks dropped, `resubmit(IN_PORT,..)` as `resubmit(,..)`,
/// notes zero-padded, a controller meter id 0 as none.
pub fn normalize_actions(actions: &[Action]) -> Vec<Action> {
    actions.iter().map(normalize_action).collect()
}

/// Decodes a list of actions filling all of `r`.
pub fn decode_actions(r: &mut Reader<'_>) -> Result<Vec<Action>, CodecError> {
    decode_actions_depth(r, 0)
}

/// Decodes instructions filling all of `r` into (apply-actions, goto-table).
pub fn decode_instructions(r: &mut Reader<'_>) -> Result<(Vec<Action>, Option<u8>), CodecError> {
    let mut actions = None;
    let mut goto = None;
    while !r.is_empty() {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 8 || len % 8 != 0 {
            return Err(CodecError::BadLength {
                what: "instruction",
                len,
            });
        }
        let mut body = r.sub(len - 4, "instruction")?;
        match ty {
            ofpit::APPLY_ACTIONS if actions.is_none() => {
                body.skip(4)?;
                actions = Some(decode_actions(&mut body)?);
            }
            ofpit::GOTO_TABLE if goto.is_none() => goto = Some(body.u8()?),
            other => return Err(CodecError::Unsupported(format!("instruction type {other} here"))),
        }
    }
    Ok((actions.unwrap_or_default(), goto))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rt(actions: Vec<Action>) {
        let mut w = Writer::new();
        encode_actions(&actions, &mut w).unwrap();
        assert_eq!(w.len() % 8, 0);
        let back = decode_actions(&mut Reader::new(&w.buf, "test")).unwrap();
        assert_eq!(back, actions);
    }

    fn ct_action() -> Action {
        Action::Ct(CtAction {
            commit: true,
            table: Some(4),
            zone: CtZone::Immediate(65520),
            exec: vec![Action::SetField(SetField::CtLabel {
                value: 0xa << 32,
                mask: Some(0xffff_ffff << 32),
            })],
        })
    }

    #[test]
    fn ct_encoding_matches_ovs() {
        // ovs-ofctl's bytes for ct(commit,exec(set_field:0xff..ff->ct_label)) start like this.
        let mut w = Writer::new();
        encode_action(
            &Action::Ct(CtAction {
                commit: true,
                table: None,
                zone: CtZone::Immediate(0),
                exec: vec![],
            }),
            &mut w,
        )
        .unwrap();
        assert_eq!(
            w.buf,
            vec![0xff, 0xff, 0, 0x18, 0, 0, 0x23, 0x20, 0, 0x23, 0, 1, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn masked_set_field_is_normalized() {
        let mut w = Writer::new();
        encode_action(
            &Action::SetField(SetField::Reg {
                idx: 1,
                value: 3,
                mask: Some(1),
            }),
            &mut w,
        )
        .unwrap();
        assert_eq!(w.buf, vec![0, 0x19, 0, 0x10, 0, 1, 3, 8, 0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn roundtrips_every_action() {
        rt(vec![
            Action::Meter(256),
            Action::Output(21),
            Action::Output(port::CONTROLLER),
            Action::OutputReg(RegRange::whole(1)),
            Action::OutputReg(RegRange {
                reg: 7,
                ofs: 31,
                n_bits: 1,
            }),
            Action::SetField(SetField::Reg {
                idx: 0,
                value: 0x200000,
                mask: Some(0x600000),
            }),
            Action::SetField(SetField::Reg {
                idx: 1,
                value: 0x15,
                mask: None,
            }),
            Action::SetField(SetField::PktMark {
                value: 3,
                mask: Some(0xf),
            }),
            Action::SetField(SetField::EthSrc([0, 1, 2, 3, 4, 5])),
            Action::SetField(SetField::EthDst([6, 1, 2, 3, 4, 5])),
            ct_action(),
            Action::Ct(CtAction {
                commit: false,
                table: None,
                zone: CtZone::Field(RegRange {
                    reg: 0,
                    ofs: 0,
                    n_bits: 16,
                }),
                exec: vec![Action::SetField(SetField::CtMark { value: 5, mask: None })],
            }),
            Action::CtClear,
            Action::Conjunction {
                id: 10,
                clause: 2,
                n_clauses: 3,
            },
            Action::Controller(ControllerAction {
                max_len: 65535,
                controller_id: 32776,
                reason: 0,
                userdata: vec![1, 2],
                pause: true,
                meter_id: Some(258),
            }),
            Action::Controller(ControllerAction {
                max_len: 100,
                controller_id: 0,
                reason: OFPR_ACTION,
                userdata: vec![],
                pause: false,
                meter_id: None,
            }),
            Action::Group(4),
            Action::Resubmit {
                in_port: None,
                table: Some(5),
            },
            Action::Resubmit {
                in_port: Some(20),
                table: None,
            },
            Action::Resubmit {
                in_port: Some(port::LOCAL),
                table: Some(3),
            },
            Action::Move {
                src: RegRange {
                    reg: 0,
                    ofs: 0,
                    n_bits: 4,
                },
                dst: RegRange {
                    reg: 1,
                    ofs: 4,
                    n_bits: 4,
                },
            },
            Action::Note(vec![1, 2, 3, 4, 5, 6]),
        ]);
    }

    #[test]
    fn instructions_roundtrip() {
        let mut w = Writer::new();
        encode_instructions(&[Action::Output(3)], Some(7), &mut w).unwrap();
        let (a, g) = decode_instructions(&mut Reader::new(&w.buf, "t")).unwrap();
        assert_eq!(a, vec![Action::Output(3)]);
        assert_eq!(g, Some(7));
        let mut w = Writer::new();
        encode_instructions(&[], None, &mut w).unwrap();
        assert!(w.is_empty());
    }

    #[test]
    fn rejects_bad_actions() {
        let bad = [
            Action::Conjunction {
                id: 1,
                clause: 0,
                n_clauses: 2,
            },
            Action::Conjunction {
                id: 1,
                clause: 2,
                n_clauses: 1,
            },
            Action::OutputReg(RegRange {
                reg: 16,
                ofs: 0,
                n_bits: 32,
            }),
            Action::OutputReg(RegRange {
                reg: 1,
                ofs: 8,
                n_bits: 32,
            }),
            Action::Resubmit {
                in_port: Some(0x1_0000),
                table: None,
            },
            Action::SetField(SetField::Reg {
                idx: 0,
                value: 1,
                mask: Some(0),
            }),
        ];
        for a in bad {
            assert!(encode_action(&a, &mut Writer::new()).is_err(), "{a:?}");
        }
    }

    proptest! {
        #[test]
        fn decode_actions_never_panics(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_actions(&mut Reader::new(&b, "fuzz"));
        }

        #[test]
        fn decode_nx_actions_never_panics(sub in 0u16..48, tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            // A well-formed Nicira action header with an arbitrary body.
            let len = pad8(10 + tail.len()).max(16);
            let mut b = vec![0xff, 0xff, (len >> 8) as u8, len as u8, 0, 0, 0x23, 0x20, (sub >> 8) as u8, sub as u8];
            b.extend_from_slice(&tail);
            b.resize(len, 0);
            let _ = decode_actions(&mut Reader::new(&b, "fuzz"));
        }

        #[test]
        fn decode_copy_field_never_panics(n_bits: u16, src_ofs: u16, dst_ofs: u16, src in 0u8..20, dst in 0u8..20, nx: bool) {
            let mut w = Writer::new();
            if nx {
                let start = begin_nx(&mut w, nxast::REG_MOVE);
                w.u16(n_bits);
                w.u16(src_ofs);
                w.u16(dst_ofs);
                w.u32(0x0001_0004 | (u32::from(src) << 9));
                w.u32(0x0001_0004 | (u32::from(dst) << 9));
                end_action(&mut w, start).unwrap();
            } else {
                w.u16(ofpat::COPY_FIELD);
                w.u16(24);
                w.u16(n_bits);
                w.u16(src_ofs);
                w.u16(dst_ofs);
                w.zeros(2);
                w.u32(0x0001_0004 | (u32::from(src) << 9));
                w.u32(0x0001_0004 | (u32::from(dst) << 9));
                w.zeros(4);
            }
            let _ = decode_actions(&mut Reader::new(&w.buf, "fuzz"));
        }

        #[test]
        fn decode_instructions_never_panics(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_instructions(&mut Reader::new(&b, "fuzz"));
        }
    }
}
