//! OXM/NXM match fields: encoding a [`Match`] into an OpenFlow 1.5 `ofp_match` (type OXM) and
//! decoding it back, plus the field headers used by `set_field`, `move`, `output_reg` and `ct`.
//!
//! Standard fields use the OpenFlow basic class 0x8000 (the headers OVS itself uses with
//! OpenFlow 1.5); the Open vSwitch extension fields (registers, `pkt_mark`, `conj_id`,
//! `ct_state`, `ct_zone`, `ct_mark`, `ct_label`, `xxreg`) use the Nicira NXM_NX class 0x0001
//! with the field numbers of `ovs-fields(7)`; `xreg` uses the packet-register class 0x8001. OVS
//! accepts these 32-bit NXM headers inside an OpenFlow 1.5 OXM match, and with OpenFlow 1.5 it
//! reports registers back as `xreg` pairs, which the decoder splits into `reg<N>`. The decoder
//! also accepts the older NXM_OF/NXM_NX headers of the same fields.
//!
//! Values are normalized the way OVS stores them: `value & mask`, an all-ones mask is an exact
//! match, an all-zero mask (or a /0 prefix) drops the field. Fields are written in
//! prerequisite order (eth_type before IP fields, ip_proto before ports), because OVS checks
//! prerequisites field by field.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use super::flow::{eth_type, ip_proto, tcp_flags, vlan, CtStateMatch, Masked, Match};
use super::wire::{pad8, CodecError, Reader, Writer};

/// OpenFlow basic OXM class.
pub const OFPXMC_OPENFLOW_BASIC: u16 = 0x8000;
/// OpenFlow 1.5 packet-register class (`xreg0..7`).
pub const OFPXMC_PACKET_REGS: u16 = 0x8001;
/// Experimenter OXM class (a 32-bit experimenter id follows the header).
pub const OFPXMC_EXPERIMENTER: u16 = 0xffff;
/// Nicira extension class 0 (NXM_OF_*).
pub const NXM_OF: u16 = 0x0000;
/// Nicira extension class 1 (NXM_NX_*).
pub const NXM_NX: u16 = 0x0001;
/// `ofp_match.type` for OXM matches.
pub const OFPMT_OXM: u16 = 1;

/// ARP and RARP ethertypes (ARP fields need one of them).
const ETH_TYPE_RARP: u16 = 0x8035;
/// ICMPv6 neighbour solicitation / advertisement.
const ND_SOLICIT: u8 = 135;
const ND_ADVERT: u8 = 136;

/// A match/set_field field known to the codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    InPort,
    Metadata,
    EthDst,
    EthSrc,
    EthType,
    VlanVid,
    VlanPcp,
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
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    Ipv6Src,
    Ipv6Dst,
    Icmpv6Type,
    Icmpv6Code,
    NdTarget,
    NdSll,
    NdTll,
    TcpFlags,
    /// OpenFlow 1.5 packet type; OVS adds `packet_type=(0,0)` (Ethernet) to some matches.
    PacketType,
    Reg(u8),
    /// `xreg0..7` = reg<2n> (high word) and reg<2n+1>.
    Xreg(u8),
    /// `xxreg0..3` = reg<4n> (most significant word) .. reg<4n+3>.
    Xxreg(u8),
    PktMark,
    ConjId,
    CtState,
    CtZone,
    CtMark,
    CtLabel,
}

/// Older headers of the same fields (same width), accepted when decoding.
const ALIASES: &[(u16, u8, Field)] = &[
    (NXM_OF, 1, Field::EthDst),
    (NXM_OF, 2, Field::EthSrc),
    (NXM_OF, 3, Field::EthType),
    (NXM_OF, 6, Field::IpProto),
    (NXM_OF, 7, Field::Ipv4Src),
    (NXM_OF, 8, Field::Ipv4Dst),
    (NXM_OF, 9, Field::TcpSrc),
    (NXM_OF, 10, Field::TcpDst),
    (NXM_OF, 11, Field::UdpSrc),
    (NXM_OF, 12, Field::UdpDst),
    (NXM_OF, 13, Field::Icmpv4Type),
    (NXM_OF, 14, Field::Icmpv4Code),
    (NXM_OF, 15, Field::ArpOp),
    (NXM_OF, 16, Field::ArpSpa),
    (NXM_OF, 17, Field::ArpTpa),
    (NXM_NX, 17, Field::ArpSha),
    (NXM_NX, 18, Field::ArpTha),
    (NXM_NX, 19, Field::Ipv6Src),
    (NXM_NX, 20, Field::Ipv6Dst),
    (NXM_NX, 21, Field::Icmpv6Type),
    (NXM_NX, 22, Field::Icmpv6Code),
    (NXM_NX, 23, Field::NdTarget),
    (NXM_NX, 24, Field::NdSll),
    (NXM_NX, 25, Field::NdTll),
    (NXM_NX, 34, Field::TcpFlags),
];

impl Field {
    /// (class, field number, value width in bytes) of the header the encoder writes.
    pub fn code(self) -> (u16, u8, u8) {
        use Field::*;
        const B: u16 = OFPXMC_OPENFLOW_BASIC;
        match self {
            InPort => (B, 0, 4),
            Metadata => (B, 2, 8),
            EthDst => (B, 3, 6),
            EthSrc => (B, 4, 6),
            EthType => (B, 5, 2),
            VlanVid => (B, 6, 2),
            VlanPcp => (B, 7, 1),
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
            ArpOp => (B, 21, 2),
            ArpSpa => (B, 22, 4),
            ArpTpa => (B, 23, 4),
            ArpSha => (B, 24, 6),
            ArpTha => (B, 25, 6),
            Ipv6Src => (B, 26, 16),
            Ipv6Dst => (B, 27, 16),
            Icmpv6Type => (B, 29, 1),
            Icmpv6Code => (B, 30, 1),
            NdTarget => (B, 31, 16),
            NdSll => (B, 32, 6),
            NdTll => (B, 33, 6),
            TcpFlags => (B, 42, 2),
            PacketType => (B, 44, 4),
            Reg(n) => (NXM_NX, n, 4),
            Xreg(n) => (OFPXMC_PACKET_REGS, n, 8),
            Xxreg(n) => (NXM_NX, 111 + n, 16),
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

    /// Looks a header up (ignoring the mask bit and length); knows the headers the encoder
    /// writes and the older aliases in `ALIASES`.
    pub fn from_header(h: u32) -> Option<Field> {
        let class = (h >> 16) as u16;
        let field = ((h >> 9) & 0x7f) as u8;
        use Field::*;
        let f = match (class, field) {
            (OFPXMC_OPENFLOW_BASIC, n) => match n {
                0 => InPort,
                2 => Metadata,
                3 => EthDst,
                4 => EthSrc,
                5 => EthType,
                6 => VlanVid,
                7 => VlanPcp,
                10 => IpProto,
                11 => Ipv4Src,
                12 => Ipv4Dst,
                13 => TcpSrc,
                14 => TcpDst,
                15 => UdpSrc,
                16 => UdpDst,
                17 => SctpSrc,
                18 => SctpDst,
                19 => Icmpv4Type,
                20 => Icmpv4Code,
                21 => ArpOp,
                22 => ArpSpa,
                23 => ArpTpa,
                24 => ArpSha,
                25 => ArpTha,
                26 => Ipv6Src,
                27 => Ipv6Dst,
                29 => Icmpv6Type,
                30 => Icmpv6Code,
                31 => NdTarget,
                32 => NdSll,
                33 => NdTll,
                42 => TcpFlags,
                44 => PacketType,
                _ => return None,
            },
            (OFPXMC_PACKET_REGS, n @ 0..=7) => Xreg(n),
            (NXM_NX, n @ 0..=15) => Reg(n),
            (NXM_NX, 33) => PktMark,
            (NXM_NX, 37) => ConjId,
            (NXM_NX, 105) => CtState,
            (NXM_NX, 106) => CtZone,
            (NXM_NX, 107) => CtMark,
            (NXM_NX, 108) => CtLabel,
            (NXM_NX, n @ 111..=114) => Xxreg(n - 111),
            (c, n) => return ALIASES.iter().find(|a| a.0 == c && a.1 == n).map(|a| a.2),
        };
        Some(f)
    }

    /// The NXM/OXM name OVS prints in sub-field syntax (`NXM_NX_REG1[]`).
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
        const XREGS: [&str; 8] = [
            "OXM_OF_PKT_REG0",
            "OXM_OF_PKT_REG1",
            "OXM_OF_PKT_REG2",
            "OXM_OF_PKT_REG3",
            "OXM_OF_PKT_REG4",
            "OXM_OF_PKT_REG5",
            "OXM_OF_PKT_REG6",
            "OXM_OF_PKT_REG7",
        ];
        const XXREGS: [&str; 4] = ["NXM_NX_XXREG0", "NXM_NX_XXREG1", "NXM_NX_XXREG2", "NXM_NX_XXREG3"];
        match self {
            Reg(n) => REGS.get(usize::from(n)).copied().unwrap_or("NXM_NX_REG?"),
            Xreg(n) => XREGS.get(usize::from(n)).copied().unwrap_or("OXM_OF_PKT_REG?"),
            Xxreg(n) => XXREGS.get(usize::from(n)).copied().unwrap_or("NXM_NX_XXREG?"),
            InPort => "NXM_OF_IN_PORT",
            Metadata => "OXM_OF_METADATA",
            EthDst => "NXM_OF_ETH_DST",
            EthSrc => "NXM_OF_ETH_SRC",
            EthType => "NXM_OF_ETH_TYPE",
            VlanVid => "OXM_OF_VLAN_VID",
            VlanPcp => "OXM_OF_VLAN_PCP",
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
            ArpOp => "NXM_OF_ARP_OP",
            ArpSpa => "NXM_OF_ARP_SPA",
            ArpTpa => "NXM_OF_ARP_TPA",
            ArpSha => "NXM_NX_ARP_SHA",
            ArpTha => "NXM_NX_ARP_THA",
            Ipv6Src => "NXM_NX_IPV6_SRC",
            Ipv6Dst => "NXM_NX_IPV6_DST",
            Icmpv6Type => "NXM_NX_ICMPV6_TYPE",
            Icmpv6Code => "NXM_NX_ICMPV6_CODE",
            NdTarget => "NXM_NX_ND_TARGET",
            NdSll => "NXM_NX_ND_SLL",
            NdTll => "NXM_NX_ND_TLL",
            TcpFlags => "NXM_NX_TCP_FLAGS",
            PacketType => "OXM_OF_PACKET_TYPE",
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

fn norm_u64(m: Masked<u64>) -> Option<Masked<u64>> {
    match m.mask {
        None | Some(u64::MAX) => Some(Masked::exact(m.value)),
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

/// TCP flags: OVS matches the low 12 bits; a mask covering all of them is an exact match.
fn norm_tcp_flags(m: Masked<u16>) -> Option<Masked<u16>> {
    let mask = m.mask.unwrap_or(u16::MAX) & tcp_flags::ALL;
    match mask {
        0 => None,
        tcp_flags::ALL => Some(Masked::exact(m.value & tcp_flags::ALL)),
        k => Some(Masked::new(m.value & k, k)),
    }
}

/// ct_state: OVS knows 8 state bits; a mask covering all of them is an exact match.
fn norm_ct_state(s: CtStateMatch) -> Option<CtStateMatch> {
    let mask = s.mask & 0xff;
    (mask != 0).then_some(CtStateMatch {
        value: s.value & mask,
        mask,
    })
}

/// Returns `m` as OVS stores it: masked values ANDed with their mask, all-ones masks turned
/// into exact matches, zero masks and /0 prefixes removed, ct_state and tcp_flags bits outside
/// the bits OVS knows cleared. Encoding then decoding a match yields its normalized form.
pub fn normalize_match(m: &Match) -> Match {
    Match {
        pkt_mark: m.pkt_mark.and_then(norm_u32),
        conj_id: m.conj_id,
        ct_state: m.ct_state.and_then(norm_ct_state),
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
        metadata: m.metadata.and_then(norm_u64),
        in_port: m.in_port,
        vlan_tci: m.vlan_tci.and_then(norm_u16),
        eth_src: m.eth_src.and_then(norm_eth),
        eth_dst: m.eth_dst.and_then(norm_eth),
        ipv4_src: m.ipv4_src.and_then(norm_v4),
        ipv4_dst: m.ipv4_dst.and_then(norm_v4),
        ipv6_src: m.ipv6_src.and_then(norm_v6),
        ipv6_dst: m.ipv6_dst.and_then(norm_v6),
        arp_spa: m.arp_spa.and_then(norm_v4),
        arp_tpa: m.arp_tpa.and_then(norm_v4),
        arp_op: m.arp_op,
        arp_sha: m.arp_sha.and_then(norm_eth),
        arp_tha: m.arp_tha.and_then(norm_eth),
        icmp_type: m.icmp_type,
        icmp_code: m.icmp_code,
        nd_target: m.nd_target.and_then(norm_v6),
        nd_sll: m.nd_sll.and_then(norm_eth),
        nd_tll: m.nd_tll.and_then(norm_eth),
        tp_src: m.tp_src.and_then(norm_u16),
        tp_dst: m.tp_dst.and_then(norm_u16),
        tcp_flags: m.tcp_flags.and_then(norm_tcp_flags),
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

fn put_u64(w: &mut Writer, f: Field, m: Masked<u64>) {
    if let Some(m) = norm_u64(m) {
        w.u32(f.header(m.mask.is_some()));
        w.u64(m.value);
        if let Some(k) = m.mask {
            w.u64(k);
        }
    }
}

fn put_u128(w: &mut Writer, f: Field, m: Masked<u128>) {
    if let Some(m) = norm_u128(m) {
        w.u32(f.header(m.mask.is_some()));
        w.u128(m.value);
        if let Some(k) = m.mask {
            w.u128(k);
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

/// The netmask of an IPv4 prefix length.
pub fn prefix_mask_v4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// The netmask of an IPv6 prefix length.
pub fn prefix_mask_v6(len: u8) -> u128 {
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
        put_u128(w, f, Masked::new(u128::from(n.addr()), mask));
    }
}

fn is_ip(m: &Match) -> bool {
    matches!(m.eth_type, Some(eth_type::IPV4) | Some(eth_type::IPV6))
}

fn is_arp(m: &Match) -> bool {
    matches!(m.eth_type, Some(eth_type::ARP) | Some(ETH_TYPE_RARP))
}

/// Checks the prerequisites OVS enforces, so that a bad match fails here with a clear message
/// instead of as an OFPBMC_BAD_PREREQ error from the switch.
pub fn check_prereqs(m: &Match) -> Result<(), CodecError> {
    let bad = |what: &str| Err(CodecError::Invalid(format!("match: {what}")));
    if m.ip_proto.is_some() && !is_ip(m) {
        return bad("ip_proto requires eth_type ip or ipv6 (ARP uses arp_op)");
    }
    if (m.ipv4_src.is_some() || m.ipv4_dst.is_some()) && m.eth_type != Some(eth_type::IPV4) {
        return bad("nw_src/nw_dst require eth_type ip");
    }
    if (m.ipv6_src.is_some() || m.ipv6_dst.is_some()) && m.eth_type != Some(eth_type::IPV6) {
        return bad("ipv6_src/ipv6_dst require eth_type ipv6");
    }
    let arp_fields = m.arp_op.is_some()
        || m.arp_spa.is_some()
        || m.arp_tpa.is_some()
        || m.arp_sha.is_some()
        || m.arp_tha.is_some();
    if arp_fields && !is_arp(m) {
        return bad("arp_op/arp_spa/arp_tpa/arp_sha/arp_tha require eth_type arp or rarp");
    }
    let icmp4 = matches!(
        (m.eth_type, m.ip_proto),
        (Some(eth_type::IPV4), Some(ip_proto::ICMP))
    );
    let icmp6 = matches!(
        (m.eth_type, m.ip_proto),
        (Some(eth_type::IPV6), Some(ip_proto::ICMPV6))
    );
    if (m.icmp_type.is_some() || m.icmp_code.is_some()) && !(icmp4 || icmp6) {
        return bad("icmp_type/icmp_code require icmp or icmp6");
    }
    if m.nd_target.is_some() && !(icmp6 && matches!(m.icmp_type, Some(ND_SOLICIT | ND_ADVERT))) {
        return bad("nd_target requires icmp6 with icmp_type 135 or 136");
    }
    if m.nd_sll.is_some() && !(icmp6 && m.icmp_type == Some(ND_SOLICIT)) {
        return bad("nd_sll requires icmp6 with icmp_type 135");
    }
    if m.nd_tll.is_some() && !(icmp6 && m.icmp_type == Some(ND_ADVERT)) {
        return bad("nd_tll requires icmp6 with icmp_type 136");
    }
    if (m.tp_src.is_some() || m.tp_dst.is_some())
        && !(is_ip(m) && matches!(m.ip_proto, Some(ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP)))
    {
        return bad("tp_src/tp_dst require tcp, udp or sctp");
    }
    if m.tcp_flags.is_some() && !(is_ip(m) && m.ip_proto == Some(ip_proto::TCP)) {
        return bad("tcp_flags requires tcp or tcp6");
    }
    if let Some(&r) = m.regs.keys().find(|r| **r > 15) {
        return bad(&format!("reg{r} does not exist (reg0..reg15)"));
    }
    if let Some(v) = m.vlan_tci.and_then(norm_u16) {
        let mask = v.mask.unwrap_or(u16::MAX);
        let pcp = mask & vlan::PCP_MASK;
        if pcp != 0 && pcp != vlan::PCP_MASK {
            return bad("vlan_tci: the PCP bits can only be matched all together");
        }
        if pcp != 0 && (mask & vlan::PRESENT == 0 || v.value & vlan::PRESENT == 0) {
            return bad("vlan_tci: matching the PCP needs the VLAN-present bit (0x1000) set");
        }
    }
    Ok(())
}

/// The VLAN_VID and VLAN_PCP OXMs of a TCI match.
fn put_vlan(w: &mut Writer, t: Masked<u16>) {
    let Some(t) = norm_u16(t) else { return };
    let mask = t.mask.unwrap_or(u16::MAX);
    let vid_mask = mask & (vlan::PRESENT | vlan::VID_MASK);
    let vid = t.value & (vlan::PRESENT | vlan::VID_MASK);
    if vid_mask == vlan::PRESENT | vlan::VID_MASK {
        put_u16(w, Field::VlanVid, Masked::exact(vid));
    } else if vid_mask != 0 {
        put_u16(w, Field::VlanVid, Masked::new(vid, vid_mask));
    }
    if mask & vlan::PCP_MASK == vlan::PCP_MASK {
        put_u8(w, Field::VlanPcp, (t.value >> 13) as u8);
    }
}

/// Writes the OXM TLVs of `m` (no `ofp_match` wrapper).
pub fn encode_oxms(m: &Match, w: &mut Writer) -> Result<(), CodecError> {
    check_prereqs(m)?;
    if let Some(p) = m.in_port {
        put_u32(w, Field::InPort, Masked::exact(p));
    }
    if let Some(v) = m.metadata {
        put_u64(w, Field::Metadata, v);
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
    if let Some(t) = m.vlan_tci {
        put_vlan(w, t);
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
    if let Some(op) = m.arp_op {
        put_u16(w, Field::ArpOp, Masked::exact(u16::from(op)));
    }
    if let Some(n) = m.arp_spa {
        put_v4(w, Field::ArpSpa, n);
    }
    if let Some(n) = m.arp_tpa {
        put_v4(w, Field::ArpTpa, n);
    }
    if let Some(e) = m.arp_sha {
        put_eth(w, Field::ArpSha, e);
    }
    if let Some(e) = m.arp_tha {
        put_eth(w, Field::ArpTha, e);
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
    if let Some(f) = m.tcp_flags.and_then(norm_tcp_flags) {
        put_u16(w, Field::TcpFlags, f);
    }
    let v6 = m.eth_type == Some(eth_type::IPV6);
    if let Some(t) = m.icmp_type {
        put_u8(w, if v6 { Field::Icmpv6Type } else { Field::Icmpv4Type }, t);
    }
    if let Some(c) = m.icmp_code {
        put_u8(w, if v6 { Field::Icmpv6Code } else { Field::Icmpv4Code }, c);
    }
    if let Some(n) = m.nd_target {
        put_v6(w, Field::NdTarget, n);
    }
    if let Some(e) = m.nd_sll {
        put_eth(w, Field::NdSll, e);
    }
    if let Some(e) = m.nd_tll {
        put_eth(w, Field::NdTll, e);
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
    if let Some(s) = m.ct_state.and_then(norm_ct_state) {
        put_u32(w, Field::CtState, Masked::new(s.value, s.mask));
    }
    if let Some(z) = m.ct_zone {
        put_u16(w, Field::CtZone, Masked::exact(z));
    }
    if let Some(k) = m.ct_mark {
        put_u32(w, Field::CtMark, k);
    }
    if let Some(l) = m.ct_label {
        put_u128(w, Field::CtLabel, l);
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

/// One OXM TLV as it is on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOxm<'a> {
    /// The 32-bit header (class, field, has-mask bit, length).
    pub header: u32,
    /// The experimenter id of an experimenter-class field.
    pub experimenter: Option<u32>,
    pub value: &'a [u8],
    pub mask: Option<&'a [u8]>,
}

impl RawOxm<'_> {
    pub fn class(&self) -> u16 {
        (self.header >> 16) as u16
    }
    pub fn field_number(&self) -> u8 {
        ((self.header >> 9) & 0x7f) as u8
    }
    /// The field, if the codec knows it.
    pub fn field(&self) -> Option<Field> {
        if self.experimenter.is_some() {
            return None;
        }
        Field::from_header(self.header)
    }
}

/// An OXM field the codec does not model (kept as bytes), e.g. in packet-in metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OtherField {
    pub class: u16,
    pub field: u8,
    pub experimenter: Option<u32>,
    pub value: Vec<u8>,
    pub mask: Option<Vec<u8>>,
}

/// Reads one OXM TLV of any field, checking only its framing.
pub fn read_raw_oxm<'a>(r: &mut Reader<'a>) -> Result<RawOxm<'a>, CodecError> {
    let header = r.u32()?;
    let masked = (header >> 8) & 1 == 1;
    let mut len = (header & 0xff) as usize;
    let mut experimenter = None;
    if (header >> 16) as u16 == OFPXMC_EXPERIMENTER {
        if len < 4 {
            return Err(CodecError::BadLength {
                what: "experimenter OXM field",
                len,
            });
        }
        experimenter = Some(r.u32()?);
        len -= 4;
    }
    if masked && !len.is_multiple_of(2) {
        return Err(CodecError::BadLength {
            what: "masked OXM field",
            len,
        });
    }
    let body = r.bytes(len)?;
    let (value, mask) = if masked {
        let (v, k) = body.split_at(len / 2);
        (v, Some(k))
    } else {
        (body, None)
    };
    // A known field must have its width.
    if experimenter.is_none() {
        if let Some(f) = Field::from_header(header) {
            if value.len() != f.width() {
                return Err(CodecError::BadLength {
                    what: "OXM field",
                    len,
                });
            }
        }
    }
    Ok(RawOxm {
        header,
        experimenter,
        value,
        mask,
    })
}

/// One decoded OXM TLV with a known field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oxm<'a> {
    pub field: Field,
    pub value: &'a [u8],
    pub mask: Option<&'a [u8]>,
}

/// Reads one OXM TLV with a known field.
pub fn read_oxm<'a>(r: &mut Reader<'a>) -> Result<Oxm<'a>, CodecError> {
    let raw = read_raw_oxm(r)?;
    match raw.field() {
        Some(field) => Ok(Oxm {
            field,
            value: raw.value,
            mask: raw.mask,
        }),
        None => Err(CodecError::Unsupported(format!(
            "OXM field (header {:#010x}{})",
            raw.header,
            raw.experimenter
                .map(|e| format!(", experimenter {e:#x}"))
                .unwrap_or_default()
        ))),
    }
}

fn be32(b: &[u8]) -> u32 {
    b.iter().fold(0u32, |acc, x| (acc << 8) | u32::from(*x))
}

fn be16(b: &[u8]) -> u16 {
    b.iter().fold(0u16, |acc, x| (acc << 8) | u16::from(*x))
}

fn be64(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
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

fn net4(o: &Oxm<'_>) -> Result<Ipv4Net, CodecError> {
    let len = match o.mask {
        Some(k) => cidr_len_v4(be32(k))?,
        None => 32,
    };
    Ipv4Net::new(Ipv4Addr::from(be32(o.value)), len).map_err(|e| CodecError::Invalid(e.to_string()))
}

fn net6(o: &Oxm<'_>) -> Result<Ipv6Net, CodecError> {
    let len = match o.mask {
        Some(k) => cidr_len_v6(be128(k))?,
        None => 128,
    };
    Ipv6Net::new(Ipv6Addr::from(be128(o.value)), len).map_err(|e| CodecError::Invalid(e.to_string()))
}

fn masked_mac(o: &Oxm<'_>) -> Masked<[u8; 6]> {
    Masked {
        value: mac(o.value),
        mask: o.mask.map(mac),
    }
}

/// Accumulates decoded fields into a [`Match`], rejecting duplicates.
#[derive(Default)]
struct MatchBuilder {
    m: Match,
    seen: Vec<Field>,
    regs_seen: u16,
}

impl MatchBuilder {
    fn reg_word(&mut self, idx: u8, value: u32, mask: u32) -> Result<(), CodecError> {
        if mask == 0 {
            return Ok(());
        }
        let bit = 1u16 << (idx & 15);
        if self.regs_seen & bit != 0 {
            return Err(CodecError::Invalid(format!("duplicate match on reg{idx}")));
        }
        self.regs_seen |= bit;
        self.m.regs.insert(
            idx,
            Masked {
                value,
                mask: (mask != u32::MAX).then_some(mask),
            },
        );
        Ok(())
    }

    fn add(&mut self, o: &Oxm<'_>) -> Result<(), CodecError> {
        use Field::*;
        // TCP/UDP/SCTP ports share tp_src/tp_dst; ICMPv4/v6 share icmp_type/code; registers are
        // checked word by word.
        let slot = match o.field {
            UdpSrc | SctpSrc => Some(TcpSrc),
            UdpDst | SctpDst => Some(TcpDst),
            Icmpv6Type => Some(Icmpv4Type),
            Icmpv6Code => Some(Icmpv4Code),
            Reg(_) | Xreg(_) | Xxreg(_) => None,
            f => Some(f),
        };
        if let Some(slot) = slot {
            if self.seen.contains(&slot) {
                return Err(CodecError::Invalid(format!(
                    "duplicate match field {:?}",
                    o.field
                )));
            }
            self.seen.push(slot);
        }
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
        let byte = |o: &Oxm<'_>| o.value.first().copied().unwrap_or(0);
        let m = &mut self.m;
        match o.field {
            InPort => {
                exact_only(o)?;
                m.in_port = Some(be32(o.value));
            }
            Metadata => {
                m.metadata = Some(Masked {
                    value: be64(o.value),
                    mask: o.mask.map(be64),
                })
            }
            EthDst => m.eth_dst = Some(masked_mac(o)),
            EthSrc => m.eth_src = Some(masked_mac(o)),
            EthType => {
                exact_only(o)?;
                m.eth_type = Some(be16(o.value));
            }
            VlanVid | VlanPcp => {
                let (mut v, mut k) = match m.vlan_tci {
                    Some(t) => (t.value, t.mask.unwrap_or(u16::MAX)),
                    None => (0, 0),
                };
                if o.field == VlanVid {
                    let vk = o.mask.map(be16).unwrap_or(u16::MAX) & (vlan::PRESENT | vlan::VID_MASK);
                    v |= be16(o.value) & vk;
                    k |= vk;
                } else {
                    exact_only(o)?;
                    v |= (u16::from(byte(o)) & 7) << 13;
                    k |= vlan::PCP_MASK;
                }
                m.vlan_tci = Some(Masked {
                    value: v,
                    mask: Some(k),
                });
            }
            IpProto => {
                exact_only(o)?;
                m.ip_proto = Some(byte(o));
            }
            Ipv4Src => m.ipv4_src = Some(net4(o)?),
            Ipv4Dst => m.ipv4_dst = Some(net4(o)?),
            Ipv6Src => m.ipv6_src = Some(net6(o)?),
            Ipv6Dst => m.ipv6_dst = Some(net6(o)?),
            ArpSpa => m.arp_spa = Some(net4(o)?),
            ArpTpa => m.arp_tpa = Some(net4(o)?),
            ArpOp => {
                exact_only(o)?;
                let op = be16(o.value);
                m.arp_op =
                    Some(u8::try_from(op).map_err(|_| CodecError::Unsupported(format!("arp_op {op}")))?);
            }
            ArpSha => m.arp_sha = Some(masked_mac(o)),
            ArpTha => m.arp_tha = Some(masked_mac(o)),
            TcpSrc | UdpSrc | SctpSrc => m.tp_src = Some(m16(o)),
            TcpDst | UdpDst | SctpDst => m.tp_dst = Some(m16(o)),
            TcpFlags => m.tcp_flags = Some(m16(o)),
            Icmpv4Type | Icmpv6Type => {
                exact_only(o)?;
                m.icmp_type = Some(byte(o));
            }
            Icmpv4Code | Icmpv6Code => {
                exact_only(o)?;
                m.icmp_code = Some(byte(o));
            }
            NdTarget => m.nd_target = Some(net6(o)?),
            NdSll => m.nd_sll = Some(masked_mac(o)),
            NdTll => m.nd_tll = Some(masked_mac(o)),
            PacketType => {
                // Only Ethernet (namespace 0, type 0) is modelled; it is the default.
                if be32(o.value) & o.mask.map(be32).unwrap_or(u32::MAX) != 0 {
                    return Err(CodecError::Unsupported(format!(
                        "packet_type {:#010x}",
                        be32(o.value)
                    )));
                }
            }
            Reg(n) => {
                let v = m32(o);
                return self.reg_word(n, v.value, v.mask.unwrap_or(u32::MAX));
            }
            Xreg(n) => {
                let v = be64(o.value);
                let k = o.mask.map(be64).unwrap_or(u64::MAX);
                self.reg_word(2 * n, (v >> 32) as u32, (k >> 32) as u32)?;
                return self.reg_word(2 * n + 1, v as u32, k as u32);
            }
            Xxreg(n) => {
                let v = be128(o.value);
                let k = o.mask.map(be128).unwrap_or(u128::MAX);
                for word in 0u8..4 {
                    let shift = 96 - 32 * u32::from(word);
                    self.reg_word(4 * n + word, (v >> shift) as u32, (k >> shift) as u32)?;
                }
                return Ok(());
            }
            PktMark => m.pkt_mark = Some(m32(o)),
            ConjId => {
                exact_only(o)?;
                m.conj_id = Some(be32(o.value));
            }
            CtState => {
                let v = m32(o);
                m.ct_state = Some(CtStateMatch {
                    value: v.value,
                    mask: v.mask.unwrap_or(u32::MAX),
                });
            }
            CtZone => {
                exact_only(o)?;
                m.ct_zone = Some(be16(o.value));
            }
            CtMark => m.ct_mark = Some(m32(o)),
            CtLabel => {
                m.ct_label = Some(Masked {
                    value: be128(o.value),
                    mask: o.mask.map(be128),
                })
            }
        }
        Ok(())
    }
}

/// Decodes OXM TLVs until `r` is empty. Every field must be one the codec models and the
/// prerequisites must hold; the result is normalized.
pub fn decode_oxms(r: &mut Reader<'_>) -> Result<Match, CodecError> {
    let mut b = MatchBuilder {
        m: Match {
            regs: BTreeMap::new(),
            ..Match::default()
        },
        ..MatchBuilder::default()
    };
    while !r.is_empty() {
        let o = read_oxm(r)?;
        b.add(&o)?;
    }
    check_prereqs(&b.m)?;
    Ok(normalize_match(&b.m))
}

/// Decodes OXM TLVs leniently (packet-in metadata): fields the codec models go into the
/// [`Match`] (prerequisites are not checked), the others are returned as bytes. Only broken
/// framing is an error.
pub fn decode_oxms_lenient(r: &mut Reader<'_>) -> Result<(Match, Vec<OtherField>), CodecError> {
    let mut b = MatchBuilder::default();
    let mut other = Vec::new();
    while !r.is_empty() {
        let raw = read_raw_oxm(r)?;
        let keep = match raw.field() {
            Some(field) => b
                .add(&Oxm {
                    field,
                    value: raw.value,
                    mask: raw.mask,
                })
                .is_err(),
            None => true,
        };
        if keep {
            other.push(OtherField {
                class: raw.class(),
                field: raw.field_number(),
                experimenter: raw.experimenter,
                value: raw.value.to_vec(),
                mask: raw.mask.map(<[u8]>::to_vec),
            });
        }
    }
    Ok((normalize_match(&b.m), other))
}

/// Reads an `ofp_match` (type OXM) including its padding.
pub fn decode_match(r: &mut Reader<'_>) -> Result<Match, CodecError> {
    let mut body = match_body(r)?;
    decode_oxms(&mut body)
}

/// Reads an `ofp_match` header and padding; returns a reader over its OXM TLVs.
pub fn match_body<'a>(r: &mut Reader<'a>) -> Result<Reader<'a>, CodecError> {
    let ty = r.u16()?;
    let len = usize::from(r.u16()?);
    if ty != OFPMT_OXM {
        return Err(CodecError::Unsupported(format!("match type {ty}")));
    }
    if len < 4 {
        return Err(CodecError::BadLength { what: "match", len });
    }
    let body = r.sub(len - 4, "match fields")?;
    r.skip(pad8(len) - len)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{ct_state, v4, v6};
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

    #[test]
    fn decodes_xregs_into_registers() {
        // OVS reports reg0=0x1,reg1=0x2 as xreg0 and reg7=0x1/0x1 as xreg3 (masked low word).
        let mut w = Writer::new();
        w.u16(OFPMT_OXM);
        w.u16(4 + 12 + 20);
        w.u32(Field::Xreg(0).header(false));
        w.u64(0x1_0000_0002);
        w.u32(Field::Xreg(3).header(true));
        w.u64(1);
        w.u64(1);
        w.zeros(4);
        let m = decode_match(&mut Reader::new(&w.buf, "t")).unwrap();
        let want = Match::new().reg(0, 1, None).reg(1, 2, None).reg(7, 1, Some(1));
        assert_eq!(m, want);
        assert_eq!(
            Match::new().xreg(0, 0x1_0000_0002, None),
            Match::new().reg(0, 1, None).reg(1, 2, None)
        );
        assert_eq!(Match::new().xxreg(1, 1, Some(1)), Match::new().reg(7, 1, Some(1)));
        // A register reported twice is malformed.
        let mut w = Writer::new();
        w.u32(Field::Reg(1).header(false));
        w.u32(5);
        w.u32(Field::Xreg(0).header(false));
        w.u64(5);
        assert!(decode_oxms(&mut Reader::new(&w.buf, "t")).is_err());
    }

    #[test]
    fn roundtrips_l2_arp_nd_and_flags() {
        let mut m = Match::new().eth_type(eth_type::ARP);
        m.arp_op = Some(1);
        m.arp_spa = v4("10.0.0.1".parse().unwrap(), 32);
        m.arp_tpa = v4("10.0.0.0".parse().unwrap(), 8);
        m.arp_sha = Some(Masked::exact([0, 0x11, 0x22, 0x33, 0x44, 0x55]));
        m.arp_tha = Some(Masked::new([0; 6], [1, 0, 0, 0, 0, 0]));
        let m = m.vlan_vid(10).vlan_pcp(3).metadata(0x1234, Some(0xffff));
        assert_eq!(roundtrip(&m), normalize_match(&m));
        assert_eq!(roundtrip(&Match::new().no_vlan()), Match::new().no_vlan());
        assert_eq!(roundtrip(&Match::new().vlan_pcp(5)), Match::new().vlan_pcp(5));

        let mut nd = Match::new().ipv6().ip_proto(ip_proto::ICMPV6);
        nd.icmp_type = Some(135);
        nd.nd_target = v6("fe80::1".parse().unwrap(), 128);
        nd.nd_sll = Some(Masked::exact([0, 1, 2, 3, 4, 5]));
        assert_eq!(roundtrip(&nd), nd);
        let mut bad = nd.clone();
        bad.icmp_type = Some(136);
        assert!(
            encode_match(&bad, &mut Writer::new()).is_err(),
            "nd_sll needs type 135"
        );

        let m = Match::new()
            .ipv4()
            .ip_proto(ip_proto::TCP)
            .tcp_flags(0x012, Some(0xffff));
        assert_eq!(roundtrip(&m).tcp_flags, Some(Masked::exact(0x012)));
        let m = Match::new()
            .ipv6()
            .ip_proto(ip_proto::TCP)
            .tcp_flags(0x013, Some(0x0ff));
        assert_eq!(roundtrip(&m).tcp_flags, Some(Masked::new(0x013, 0x0ff)));
        assert!(encode_match(&Match::new().ipv4().tcp_flags(2, None), &mut Writer::new()).is_err());
        let mut m = Match::new().ipv4();
        m.arp_op = Some(1);
        assert!(encode_match(&m, &mut Writer::new()).is_err(), "arp_op needs arp");
        let m = Match::new().eth_type(eth_type::ARP).ip_proto(1);
        assert!(
            encode_match(&m, &mut Writer::new()).is_err(),
            "ARP has no ip_proto"
        );
    }

    #[test]
    fn packet_type_ethernet_is_the_default() {
        let mut w = Writer::new();
        w.u32(Field::PacketType.header(false));
        w.u32(0);
        w.u32(Field::Reg(1).header(false));
        w.u32(7);
        assert_eq!(
            decode_oxms(&mut Reader::new(&w.buf, "t")).unwrap(),
            Match::new().reg(1, 7, None)
        );
        let mut w = Writer::new();
        w.u32(Field::PacketType.header(false));
        w.u32(0x0001_0800);
        assert!(matches!(
            decode_oxms(&mut Reader::new(&w.buf, "t")),
            Err(CodecError::Unsupported(_))
        ));
    }

    #[test]
    fn lenient_decoding_keeps_unknown_fields() {
        let mut w = Writer::new();
        w.u32(Field::InPort.header(false));
        w.u32(20);
        // NXM_NX_CT_NW_SRC (field 120), not modelled.
        w.u32((u32::from(NXM_NX) << 16) | (120 << 9) | 4);
        w.u32(0x0a00_0001);
        // An experimenter field: header, experimenter id, 2 bytes.
        w.u32(0xffff_0206);
        w.u32(0x4f4e_4600);
        w.u16(0xabcd);
        w.u32(Field::Xreg(0).header(false));
        w.u64(0x0000_0400_0000_0014);
        let (m, other) = decode_oxms_lenient(&mut Reader::new(&w.buf, "t")).unwrap();
        assert_eq!(m, Match::new().in_port(20).reg(0, 0x400, None).reg(1, 0x14, None));
        assert_eq!(other.len(), 2);
        assert_eq!((other[0].class, other[0].field), (NXM_NX, 120));
        assert_eq!(other[1].experimenter, Some(0x4f4e_4600));
        assert_eq!(other[1].value, vec![0xab, 0xcd]);
        // Broken framing is still an error.
        assert!(decode_oxms_lenient(&mut Reader::new(&w.buf[..7], "t")).is_err());
    }

    #[test]
    fn accepts_older_nxm_headers() {
        let mut w = Writer::new();
        w.u32(0x0000_0602); // NXM_OF_ETH_TYPE
        w.u16(0x0800);
        w.u32(0x0000_0c01); // NXM_OF_IP_PROTO
        w.u8(6);
        w.u32(0x0000_1402); // NXM_OF_TCP_DST
        w.u16(22);
        let m = decode_oxms(&mut Reader::new(&w.buf, "t")).unwrap();
        assert_eq!(m, Match::new().ipv4().ip_proto(6).tp_dst(22));
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
