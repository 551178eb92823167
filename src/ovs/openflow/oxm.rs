//! OXM/NXM match fields: encoding a [`Match`] into an OpenFlow 1.5 `ofp_match` (type OXM) and
//! decoding it back, plus the field headers used by `set_field`, `move`, `output_reg` and `ct`.
//!
//! Standard fields use the OpenFlow basic class 0x8000; the Open vSwitch extension fields
//! (registers, `pkt_mark`, `conj_id`, `ct_state`, `ct_zone`, `ct_mark`, `ct_label`) use the
//! Nicira NXM_NX class 0x0001 with the field numbers of `ovs-fields(7)`; OVS accepts these
//! 32-bit NXM headers inside an OpenFlow 1.5 OXM match.
//!
//! Values are normalized the way OVS stores them: `value & mask`, an all-ones mask is an exact
//! match, an all-zero mask (or a /0 prefix) drops the field. Fields are written in
//! prerequisite order (eth_type before IP fields, ip_proto before ports), because OVS checks
//! prerequisites field by field.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use super::flow::{eth_type, ip_proto, CtStateMatch, Masked, Match};
use super::wire::{pad8, CodecError, Reader, Writer};

/// OpenFlow basic OXM class.
pub const OFPXMC_OPENFLOW_BASIC: u16 = 0x8000;
/// Nicira extension class 1 (NXM_NX_*).
pub const NXM_NX: u16 = 0x0001;
/// `ofp_match.type` for OXM matches.
pub const OFPMT_OXM: u16 = 1;

/// A match/set_field field known to the codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    InPort,
    EthDst,
    EthSrc,
    EthType,
    IpProto,
    Ipv4Src,
    Ipv4Dst,
    TcpSrc,
    TcpDst,
    UdpSrc,
    UdpDst,
    SctpSrc,
    SctpDst,
    Icmpv4Type,
    Icmpv4Code,
    Ipv6Src,
    Ipv6Dst,
    Icmpv6Type,
    Icmpv6Code,
    Reg(u8),
    PktMark,
    ConjId,
    CtState,
    CtZone,
    CtMark,
    CtLabel,
}

impl Field {
    /// (class, field number, value width in bytes).
    pub fn code(self) -> (u16, u8, u8) {
        use Field::*;
        const B: u16 = OFPXMC_OPENFLOW_BASIC;
        match self {
            InPort => (B, 0, 4),
            EthDst => (B, 3, 6),
            EthSrc => (B, 4, 6),
            EthType => (B, 5, 2),
            IpProto => (B, 10, 1),
            Ipv4Src => (B, 11, 4),
            Ipv4Dst => (B, 12, 4),
            TcpSrc => (B, 13, 2),
            TcpDst => (B, 14, 2),
            UdpSrc => (B, 15, 2),
            UdpDst => (B, 16, 2),
            SctpSrc => (B, 17, 2),
            SctpDst => (B, 18, 2),
            Icmpv4Type => (B, 19, 1),
            Icmpv4Code => (B, 20, 1),
            Ipv6Src => (B, 26, 16),
            Ipv6Dst => (B, 27, 16),
            Icmpv6Type => (B, 29, 1),
            Icmpv6Code => (B, 30, 1),
            Reg(n) => (NXM_NX, n, 4),
            PktMark => (NXM_NX, 33, 4),
            ConjId => (NXM_NX, 37, 4),
            CtState => (NXM_NX, 105, 4),
            CtZone => (NXM_NX, 106, 2),
            CtMark => (NXM_NX, 107, 4),
            CtLabel => (NXM_NX, 108, 16),
        }
    }

    /// The 32-bit OXM/NXM header of this field.
    pub fn header(self, masked: bool) -> u32 {
        let (class, field, width) = self.code();
        let len = if masked {
            u32::from(width) * 2
        } else {
            u32::from(width)
        };
        (u32::from(class) << 16) | (u32::from(field) << 9) | (u32::from(masked) << 8) | len
    }

    /// Width in bytes.
    pub fn width(self) -> usize {
        usize::from(self.code().2)
    }

    /// Looks a header up (ignoring the mask bit and length).
    pub fn from_header(h: u32) -> Option<Field> {
        let class = (h >> 16) as u16;
        let field = ((h >> 9) & 0x7f) as u8;
        use Field::*;
        let f = match (class, field) {
            (OFPXMC_OPENFLOW_BASIC, 0) => InPort,
            (OFPXMC_OPENFLOW_BASIC, 3) => EthDst,
            (OFPXMC_OPENFLOW_BASIC, 4) => EthSrc,
            (OFPXMC_OPENFLOW_BASIC, 5) => EthType,
            (OFPXMC_OPENFLOW_BASIC, 10) => IpProto,
            (OFPXMC_OPENFLOW_BASIC, 11) => Ipv4Src,
            (OFPXMC_OPENFLOW_BASIC, 12) => Ipv4Dst,
            (OFPXMC_OPENFLOW_BASIC, 13) => TcpSrc,
            (OFPXMC_OPENFLOW_BASIC, 14) => TcpDst,
            (OFPXMC_OPENFLOW_BASIC, 15) => UdpSrc,
            (OFPXMC_OPENFLOW_BASIC, 16) => UdpDst,
            (OFPXMC_OPENFLOW_BASIC, 17) => SctpSrc,
            (OFPXMC_OPENFLOW_BASIC, 18) => SctpDst,
            (OFPXMC_OPENFLOW_BASIC, 19) => Icmpv4Type,
            (OFPXMC_OPENFLOW_BASIC, 20) => Icmpv4Code,
            (OFPXMC_OPENFLOW_BASIC, 26) => Ipv6Src,
            (OFPXMC_OPENFLOW_BASIC, 27) => Ipv6Dst,
            (OFPXMC_OPENFLOW_BASIC, 29) => Icmpv6Type,
            (OFPXMC_OPENFLOW_BASIC, 30) => Icmpv6Code,
            (NXM_NX, n @ 0..=15) => Reg(n),
            (NXM_NX, 33) => PktMark,
            (NXM_NX, 37) => ConjId,
            (NXM_NX, 105) => CtState,
            (NXM_NX, 106) => CtZone,
            (NXM_NX, 107) => CtMark,
            (NXM_NX, 108) => CtLabel,
            _ => return None,
        };
        Some(f)
    }

    /// The NXM name OVS prints in sub-field syntax (`NXM_NX_REG1[]`).
    pub fn nxm_name(self) -> &'static str {
        use Field::*;
        const REGS: [&str; 16] = [
            "NXM_NX_REG0",
            "NXM_NX_REG1",
            "NXM_NX_REG2",
            "NXM_NX_REG3",
            "NXM_NX_REG4",
            "NXM_NX_REG5",
            "NXM_NX_REG6",
            "NXM_NX_REG7",
            "NXM_NX_REG8",
            "NXM_NX_REG9",
            "NXM_NX_REG10",
            "NXM_NX_REG11",
            "NXM_NX_REG12",
            "NXM_NX_REG13",
            "NXM_NX_REG14",
            "NXM_NX_REG15",
        ];
        match self {
            Reg(n) => REGS.get(usize::from(n)).copied().unwrap_or("NXM_NX_REG?"),
            InPort => "NXM_OF_IN_PORT",
            EthDst => "NXM_OF_ETH_DST",
            EthSrc => "NXM_OF_ETH_SRC",
            EthType => "NXM_OF_ETH_TYPE",
            IpProto => "NXM_OF_IP_PROTO",
            Ipv4Src => "NXM_OF_IP_SRC",
            Ipv4Dst => "NXM_OF_IP_DST",
            TcpSrc => "NXM_OF_TCP_SRC",
            TcpDst => "NXM_OF_TCP_DST",
            UdpSrc => "NXM_OF_UDP_SRC",
            UdpDst => "NXM_OF_UDP_DST",
            SctpSrc => "OXM_OF_SCTP_SRC",
            SctpDst => "OXM_OF_SCTP_DST",
            Icmpv4Type => "NXM_OF_ICMP_TYPE",
            Icmpv4Code => "NXM_OF_ICMP_CODE",
            Ipv6Src => "NXM_NX_IPV6_SRC",
            Ipv6Dst => "NXM_NX_IPV6_DST",
            Icmpv6Type => "NXM_NX_ICMPV6_TYPE",
            Icmpv6Code => "NXM_NX_ICMPV6_CODE",
            PktMark => "NXM_NX_PKT_MARK",
            ConjId => "NXM_NX_CONJ_ID",
            CtState => "NXM_NX_CT_STATE",
            CtZone => "NXM_NX_CT_ZONE",
            CtMark => "NXM_NX_CT_MARK",
            CtLabel => "NXM_NX_CT_LABEL",
        }
    }
}

// === normalization ===

fn norm_u32(m: Masked<u32>) -> Option<Masked<u32>> {
    match m.mask {
        None | Some(u32::MAX) => Some(Masked::exact(m.value)),
        Some(0) => None,
        Some(mask) => Some(Masked::new(m.value & mask, mask)),
    }
}

fn norm_u16(m: Masked<u16>) -> Option<Masked<u16>> {
    match m.mask {
        None | Some(u16::MAX) => Some(Masked::exact(m.value)),
        Some(0) => None,
        Some(mask) => Some(Masked::new(m.value & mask, mask)),
    }
}

fn norm_u128(m: Masked<u128>) -> Option<Masked<u128>> {
    match m.mask {
        None | Some(u128::MAX) => Some(Masked::exact(m.value)),
        Some(0) => None,
        Some(mask) => Some(Masked::new(m.value & mask, mask)),
    }
}

fn norm_eth(m: Masked<[u8; 6]>) -> Option<Masked<[u8; 6]>> {
    match m.mask {
        None => Some(Masked::exact(m.value)),
        Some(mask) if mask == [0xff; 6] => Some(Masked::exact(m.value)),
        Some(mask) if mask == [0; 6] => None,
        Some(mask) => {
            let mut v = m.value;
            for (b, k) in v.iter_mut().zip(mask.iter()) {
                *b &= k;
            }
            Some(Masked::new(v, mask))
        }
    }
}

fn norm_v4(n: Ipv4Net) -> Option<Ipv4Net> {
    (n.prefix_len() > 0).then(|| n.trunc())
}

fn norm_v6(n: Ipv6Net) -> Option<Ipv6Net> {
    (n.prefix_len() > 0).then(|| n.trunc())
}

/// Returns `m` as OVS stores it: masked values ANDed with their mask, all-ones masks turned
/// into exact matches, zero masks and /0 prefixes removed, ct_state bits outside the mask
/// cleared. Encoding then decoding a match yields its normalized form.
pub fn normalize_match(m: &Match) -> Match {
    Match {
        pkt_mark: m.pkt_mark.and_then(norm_u32),
        conj_id: m.conj_id,
        ct_state: m.ct_state.and_then(|s| {
            (s.mask != 0).then_some(CtStateMatch {
                value: s.value & s.mask,
                mask: s.mask,
            })
        }),
        ct_zone: m.ct_zone,
        ct_mark: m.ct_mark.and_then(norm_u32),
        ct_label: m.ct_label.and_then(norm_u128),
        eth_type: m.eth_type,
        ip_proto: m.ip_proto,
        regs: m
            .regs
            .iter()
            .filter_map(|(k, v)| norm_u32(*v).map(|v| (*k, v)))
            .collect(),
        in_port: m.in_port,
        eth_src: m.eth_src.and_then(norm_eth),
        eth_dst: m.eth_dst.and_then(norm_eth),
        ipv4_src: m.ipv4_src.and_then(norm_v4),
        ipv4_dst: m.ipv4_dst.and_then(norm_v4),
        ipv6_src: m.ipv6_src.and_then(norm_v6),
        ipv6_dst: m.ipv6_dst.and_then(norm_v6),
        icmp_type: m.icmp_type,
        icmp_code: m.icmp_code,
        tp_src: m.tp_src.and_then(norm_u16),
        tp_dst: m.tp_dst.and_then(norm_u16),
    }
}

// === encoding ===

fn put_u32(w: &mut Writer, f: Field, m: Masked<u32>) {
    if let Some(m) = norm_u32(m) {
        w.u32(f.header(m.mask.is_some()));
        w.u32(m.value);
        if let Some(k) = m.mask {
            w.u32(k);
        }
    }
}

fn put_u16(w: &mut Writer, f: Field, m: Masked<u16>) {
    if let Some(m) = norm_u16(m) {
        w.u32(f.header(m.mask.is_some()));
        w.u16(m.value);
        if let Some(k) = m.mask {
            w.u16(k);
        }
    }
}

fn put_u8(w: &mut Writer, f: Field, v: u8) {
    w.u32(f.header(false));
    w.u8(v);
}

fn put_eth(w: &mut Writer, f: Field, m: Masked<[u8; 6]>) {
    if let Some(m) = norm_eth(m) {
        w.u32(f.header(m.mask.is_some()));
        w.bytes(&m.value);
        if let Some(k) = m.mask {
            w.bytes(&k);
        }
    }
}

fn prefix_mask_v4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn prefix_mask_v6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

fn put_v4(w: &mut Writer, f: Field, n: Ipv4Net) {
    if let Some(n) = norm_v4(n) {
        let mask = prefix_mask_v4(n.prefix_len());
        put_u32(w, f, Masked::new(u32::from(n.addr()), mask));
    }
}

fn put_v6(w: &mut Writer, f: Field, n: Ipv6Net) {
    if let Some(n) = norm_v6(n) {
        let mask = prefix_mask_v6(n.prefix_len());
        let value = u128::from(n.addr()) & mask;
        if mask == u128::MAX {
            w.u32(f.header(false));
            w.u128(value);
        } else {
            w.u32(f.header(true));
            w.u128(value);
            w.u128(mask);
        }
    }
}

fn is_ip(m: &Match) -> bool {
    matches!(m.eth_type, Some(eth_type::IPV4) | Some(eth_type::IPV6))
}

/// Checks the prerequisites OVS enforces, so that a bad match fails here with a clear message
/// instead of as an OFPBMC_BAD_PREREQ error from the switch.
pub fn check_prereqs(m: &Match) -> Result<(), CodecError> {
    let bad = |what: &str| Err(CodecError::Invalid(format!("match: {what}")));
    if m.ip_proto.is_some() && !is_ip(m) {
        return bad("ip_proto requires eth_type ip or ipv6");
    }
    if (m.ipv4_src.is_some() || m.ipv4_dst.is_some()) && m.eth_type != Some(eth_type::IPV4) {
        return bad("nw_src/nw_dst require eth_type ip");
    }
    if (m.ipv6_src.is_some() || m.ipv6_dst.is_some()) && m.eth_type != Some(eth_type::IPV6) {
        return bad("ipv6_src/ipv6_dst require eth_type ipv6");
    }
    if m.icmp_type.is_some() || m.icmp_code.is_some() {
        let ok = matches!(
            (m.eth_type, m.ip_proto),
            (Some(eth_type::IPV4), Some(ip_proto::ICMP)) | (Some(eth_type::IPV6), Some(ip_proto::ICMPV6))
        );
        if !ok {
            return bad("icmp_type/icmp_code require icmp or icmp6");
        }
    }
    if (m.tp_src.is_some() || m.tp_dst.is_some())
        && !(is_ip(m) && matches!(m.ip_proto, Some(ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP)))
    {
        return bad("tp_src/tp_dst require tcp, udp or sctp");
    }
    if let Some(&r) = m.regs.keys().find(|r| **r > 15) {
        return bad(&format!("reg{r} does not exist (reg0..reg15)"));
    }
    Ok(())
}

/// Writes the OXM TLVs of `m` (no `ofp_match` wrapper).
pub fn encode_oxms(m: &Match, w: &mut Writer) -> Result<(), CodecError> {
    check_prereqs(m)?;
    if let Some(p) = m.in_port {
        put_u32(w, Field::InPort, Masked::exact(p));
    }
    if let Some(e) = m.eth_dst {
        put_eth(w, Field::EthDst, e);
    }
    if let Some(e) = m.eth_src {
        put_eth(w, Field::EthSrc, e);
    }
    if let Some(t) = m.eth_type {
        put_u16(w, Field::EthType, Masked::exact(t));
    }
    if let Some(p) = m.ip_proto {
        put_u8(w, Field::IpProto, p);
    }
    if let Some(n) = m.ipv4_src {
        put_v4(w, Field::Ipv4Src, n);
    }
    if let Some(n) = m.ipv4_dst {
        put_v4(w, Field::Ipv4Dst, n);
    }
    if let Some(n) = m.ipv6_src {
        put_v6(w, Field::Ipv6Src, n);
    }
    if let Some(n) = m.ipv6_dst {
        put_v6(w, Field::Ipv6Dst, n);
    }
    let (src, dst) = match m.ip_proto {
        Some(ip_proto::UDP) => (Field::UdpSrc, Field::UdpDst),
        Some(ip_proto::SCTP) => (Field::SctpSrc, Field::SctpDst),
        _ => (Field::TcpSrc, Field::TcpDst),
    };
    if let Some(p) = m.tp_src {
        put_u16(w, src, p);
    }
    if let Some(p) = m.tp_dst {
        put_u16(w, dst, p);
    }
    let v6 = m.eth_type == Some(eth_type::IPV6);
    if let Some(t) = m.icmp_type {
        put_u8(w, if v6 { Field::Icmpv6Type } else { Field::Icmpv4Type }, t);
    }
    if let Some(c) = m.icmp_code {
        put_u8(w, if v6 { Field::Icmpv6Code } else { Field::Icmpv4Code }, c);
    }
    for (idx, r) in &m.regs {
        put_u32(w, Field::Reg(*idx), *r);
    }
    if let Some(p) = m.pkt_mark {
        put_u32(w, Field::PktMark, p);
    }
    if let Some(c) = m.conj_id {
        put_u32(w, Field::ConjId, Masked::exact(c));
    }
    if let Some(s) = m.ct_state {
        put_u32(w, Field::CtState, Masked::new(s.value, s.mask));
    }
    if let Some(z) = m.ct_zone {
        put_u16(w, Field::CtZone, Masked::exact(z));
    }
    if let Some(k) = m.ct_mark {
        put_u32(w, Field::CtMark, k);
    }
    if let Some(l) = m.ct_label.and_then(norm_u128) {
        w.u32(Field::CtLabel.header(l.mask.is_some()));
        w.u128(l.value);
        if let Some(k) = l.mask {
            w.u128(k);
        }
    }
    Ok(())
}

/// Writes an OpenFlow 1.5 `ofp_match` (type OXM, padded to 8 bytes).
pub fn encode_match(m: &Match, w: &mut Writer) -> Result<(), CodecError> {
    let start = w.len();
    w.u16(OFPMT_OXM);
    w.u16(0);
    encode_oxms(m, w)?;
    w.patch_len16(start + 2, start, "match")?;
    w.pad8_from(start);
    Ok(())
}

// === decoding ===

/// One decoded OXM TLV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oxm<'a> {
    pub field: Field,
    pub value: &'a [u8],
    pub mask: Option<&'a [u8]>,
}

/// Reads one OXM TLV with a known field.
pub fn read_oxm<'a>(r: &mut Reader<'a>) -> Result<Oxm<'a>, CodecError> {
    let h = r.u32()?;
    let class = (h >> 16) as u16;
    let masked = (h >> 8) & 1 == 1;
    let len = (h & 0xff) as usize;
    if class == 0xffff {
        return Err(CodecError::Unsupported(format!(
            "experimenter OXM field (header {h:#010x})"
        )));
    }
    let field = Field::from_header(h)
        .ok_or_else(|| CodecError::Unsupported(format!("OXM field (header {h:#010x})")))?;
    let width = field.width();
    let want = if masked { width * 2 } else { width };
    if len != want {
        return Err(CodecError::BadLength {
            what: "OXM field",
            len,
        });
    }
    let body = r.bytes(len)?;
    let (value, mask) = if masked {
        (&body[..width], Some(&body[width..]))
    } else {
        (body, None)
    };
    Ok(Oxm { field, value, mask })
}

fn be32(b: &[u8]) -> u32 {
    b.iter().fold(0u32, |acc, x| (acc << 8) | u32::from(*x))
}

fn be16(b: &[u8]) -> u16 {
    b.iter().fold(0u16, |acc, x| (acc << 8) | u16::from(*x))
}

fn be128(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |acc, x| (acc << 8) | u128::from(*x))
}

fn mac(b: &[u8]) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(b) {
        *d = *s;
    }
    m
}

fn cidr_len_v4(mask: u32) -> Result<u8, CodecError> {
    let ones = mask.leading_ones();
    if mask.checked_shl(ones).unwrap_or(0) != 0 {
        return Err(CodecError::Unsupported(format!("non-CIDR IPv4 mask {mask:#x}")));
    }
    Ok(ones as u8)
}

fn cidr_len_v6(mask: u128) -> Result<u8, CodecError> {
    let ones = mask.leading_ones();
    if mask.checked_shl(ones).unwrap_or(0) != 0 {
        return Err(CodecError::Unsupported("non-CIDR IPv6 mask".to_string()));
    }
    Ok(ones as u8)
}

/// Decodes OXM TLVs until `r` is empty.
pub fn decode_oxms(r: &mut Reader<'_>) -> Result<Match, CodecError> {
    let mut m = Match {
        regs: BTreeMap::new(),
        ..Match::default()
    };
    let mut seen: Vec<Field> = Vec::new();
    while !r.is_empty() {
        let o = read_oxm(r)?;
        // TCP/UDP/SCTP ports share tp_src/tp_dst; ICMPv4/v6 share icmp_type/code.
        let slot = match o.field {
            Field::UdpSrc | Field::SctpSrc => Field::TcpSrc,
            Field::UdpDst | Field::SctpDst => Field::TcpDst,
            Field::Icmpv6Type => Field::Icmpv4Type,
            Field::Icmpv6Code => Field::Icmpv4Code,
            f => f,
        };
        if seen.contains(&slot) {
            return Err(CodecError::Invalid(format!(
                "duplicate match field {:?}",
                o.field
            )));
        }
        seen.push(slot);
        let exact_only = |o: &Oxm<'_>| {
            if o.mask.is_some() {
                Err(CodecError::Unsupported(format!("masked {:?}", o.field)))
            } else {
                Ok(())
            }
        };
        let m32 = |o: &Oxm<'_>| Masked {
            value: be32(o.value),
            mask: o.mask.map(be32),
        };
        let m16 = |o: &Oxm<'_>| Masked {
            value: be16(o.value),
            mask: o.mask.map(be16),
        };
        match o.field {
            Field::InPort => {
                exact_only(&o)?;
                m.in_port = Some(be32(o.value));
            }
            Field::EthDst => {
                m.eth_dst = Some(Masked {
                    value: mac(o.value),
                    mask: o.mask.map(mac),
                })
            }
            Field::EthSrc => {
                m.eth_src = Some(Masked {
                    value: mac(o.value),
                    mask: o.mask.map(mac),
                })
            }
            Field::EthType => {
                exact_only(&o)?;
                m.eth_type = Some(be16(o.value));
            }
            Field::IpProto => {
                exact_only(&o)?;
                m.ip_proto = o.value.first().copied();
            }
            Field::Ipv4Src | Field::Ipv4Dst => {
                let addr = Ipv4Addr::from(be32(o.value));
                let len = match o.mask {
                    Some(k) => cidr_len_v4(be32(k))?,
                    None => 32,
                };
                let net = Ipv4Net::new(addr, len).map_err(|e| CodecError::Invalid(e.to_string()))?;
                if o.field == Field::Ipv4Src {
                    m.ipv4_src = Some(net);
                } else {
                    m.ipv4_dst = Some(net);
                }
            }
            Field::Ipv6Src | Field::Ipv6Dst => {
                let addr = Ipv6Addr::from(be128(o.value));
                let len = match o.mask {
                    Some(k) => cidr_len_v6(be128(k))?,
                    None => 128,
                };
                let net = Ipv6Net::new(addr, len).map_err(|e| CodecError::Invalid(e.to_string()))?;
                if o.field == Field::Ipv6Src {
                    m.ipv6_src = Some(net);
                } else {
                    m.ipv6_dst = Some(net);
                }
            }
            Field::TcpSrc | Field::UdpSrc | Field::SctpSrc => m.tp_src = Some(m16(&o)),
            Field::TcpDst | Field::UdpDst | Field::SctpDst => m.tp_dst = Some(m16(&o)),
            Field::Icmpv4Type | Field::Icmpv6Type => {
                exact_only(&o)?;
                m.icmp_type = o.value.first().copied();
            }
            Field::Icmpv4Code | Field::Icmpv6Code => {
                exact_only(&o)?;
                m.icmp_code = o.value.first().copied();
            }
            Field::Reg(n) => {
                m.regs.insert(n, m32(&o));
            }
            Field::PktMark => m.pkt_mark = Some(m32(&o)),
            Field::ConjId => {
                exact_only(&o)?;
                m.conj_id = Some(be32(o.value));
            }
            Field::CtState => {
                let v = m32(&o);
                m.ct_state = Some(CtStateMatch {
                    value: v.value,
                    mask: v.mask.unwrap_or(u32::MAX),
                });
            }
            Field::CtZone => {
                exact_only(&o)?;
                m.ct_zone = Some(be16(o.value));
            }
            Field::CtMark => m.ct_mark = Some(m32(&o)),
            Field::CtLabel => {
                m.ct_label = Some(Masked {
                    value: be128(o.value),
                    mask: o.mask.map(be128),
                })
            }
        }
    }
    check_prereqs(&m)?;
    Ok(normalize_match(&m))
}

/// Reads an `ofp_match` (type OXM) including its padding.
pub fn decode_match(r: &mut Reader<'_>) -> Result<Match, CodecError> {
    let ty = r.u16()?;
    let len = usize::from(r.u16()?);
    if ty != OFPMT_OXM {
        return Err(CodecError::Unsupported(format!("match type {ty}")));
    }
    if len < 4 {
        return Err(CodecError::BadLength { what: "match", len });
    }
    let mut body = r.sub(len - 4, "match fields")?;
    let m = decode_oxms(&mut body)?;
    r.skip(pad8(len) - len)?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovs::openflow::flow::{ct_state, v4, v6};
    use proptest::prelude::*;

    fn roundtrip(m: &Match) -> Match {
        let mut w = Writer::new();
        encode_match(m, &mut w).unwrap();
        assert_eq!(w.len() % 8, 0);
        let mut r = Reader::new(&w.buf, "test");
        let back = decode_match(&mut r).unwrap();
        assert!(r.is_empty());
        back
    }

    #[test]
    fn encodes_ip_match_like_ovs() {
        // `ip` as ovs-ofctl encodes it: 00 01 00 0a 80 00 0a 02 08 00 + 6 bytes pad.
        let mut w = Writer::new();
        encode_match(&Match::new().ipv4(), &mut w).unwrap();
        assert_eq!(
            w.buf,
            vec![0, 1, 0, 0x0a, 0x80, 0, 0x0a, 2, 8, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn nxm_headers_match_ovs() {
        assert_eq!(Field::Reg(1).header(true), 0x0001_0308);
        assert_eq!(Field::CtLabel.header(false), 0x0001_d810);
        assert_eq!(Field::CtLabel.header(true), 0x0001_d920);
        assert_eq!(Field::PktMark.header(true), 0x0001_4308);
    }

    #[test]
    fn roundtrips_a_full_match() {
        let mut m = Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .in_port(7)
            .reg(0, 0x200000, Some(0x600000));
        m.ipv4_src = v4("10.1.2.0".parse().unwrap(), 24);
        m.tp_dst = Some(Masked::new(0x50, 0xfff8));
        m.ct_state = Some(CtStateMatch::of(&[(ct_state::NEW, true), (ct_state::TRK, true)]));
        m.ct_label = Some(Masked::new(0xa << 32, 0xffff_ffff << 32));
        m.ct_mark = Some(Masked::exact(4));
        m.pkt_mark = Some(Masked::new(5, 0xff));
        m.conj_id = Some(9);
        m.ct_zone = Some(65520);
        m.eth_src = Some(Masked::exact([0, 1, 2, 3, 4, 5]));
        assert_eq!(roundtrip(&m), m);

        let mut m6 = Match::new().ipv6().ip_proto(ip_proto::ICMPV6);
        m6.ipv6_dst = v6("fd00::".parse().unwrap(), 64);
        m6.icmp_type = Some(135);
        m6.icmp_code = Some(0);
        assert_eq!(roundtrip(&m6), m6);
    }

    #[test]
    fn normalizes_masks() {
        let mut m = Match::new()
            .reg(0, 3, Some(1))
            .reg(1, 5, Some(u32::MAX))
            .reg(2, 5, Some(0));
        m.eth_type = Some(eth_type::IPV4);
        m.ipv4_src = v4("0.0.0.0".parse().unwrap(), 0);
        m.ipv4_dst = v4("10.1.2.3".parse().unwrap(), 16);
        let n = roundtrip(&m);
        assert_eq!(n.regs.get(&0), Some(&Masked::new(1, 1)));
        assert_eq!(n.regs.get(&1), Some(&Masked::exact(5)));
        assert_eq!(n.regs.get(&2), None);
        assert_eq!(n.ipv4_src, None);
        assert_eq!(n.ipv4_dst, v4("10.1.0.0".parse().unwrap(), 16));
        assert_eq!(n, normalize_match(&m));
    }

    #[test]
    fn rejects_missing_prerequisites() {
        let mut m = Match::new();
        m.tp_dst = Some(Masked::exact(80));
        assert!(encode_match(&m, &mut Writer::new()).is_err());
        let m = Match::new().ip_proto(6);
        assert!(encode_match(&m, &mut Writer::new()).is_err());
    }

    proptest! {
        #[test]
        fn decode_match_never_panics(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode_match(&mut Reader::new(&b, "fuzz"));
        }

        #[test]
        fn decode_oxm_fields_never_panics(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            // Also exercise plausible headers: prefix a valid match header.
            let mut buf = vec![0u8, 1, 0, (b.len() + 4).min(255) as u8];
            buf.extend_from_slice(&b);
            let _ = decode_match(&mut Reader::new(&buf, "fuzz"));
        }

        #[test]
        fn roundtrip_random_regs(vals in proptest::collection::btree_map(0u8..16, (any::<u32>(), any::<Option<u32>>()), 0..6)) {
            let mut m = Match::new();
            for (k, (v, mask)) in vals {
                m = m.reg(k, v, mask);
            }
            prop_assert_eq!(roundtrip(&m), normalize_match(&m));
        }
    }
}
