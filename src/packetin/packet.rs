//! Parsing the frame a packet-in carries: Ethernet (with any VLAN tags), IPv4 or IPv6 (with
//! extension headers) and the transport header fields the audit log and the Reject reply need.
//! Pure; IP and TCP parsing is `etherparse`'s, bounds-checked.

use std::net::IpAddr;

use etherparse::{IpSlice, Ipv6ExtensionSlice, TcpSlice};

/// Length of an Ethernet II header without VLAN tags.
pub const ETH_HEADER_LEN: usize = 14;
/// Tag protocol identifiers of 802.1Q / 802.1ad VLAN tags (each tag is 4 bytes).
const VLAN_TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];
const ETH_TYPE_IPV4: u16 = 0x0800;
const ETH_TYPE_IPV6: u16 = 0x86dd;

/// IP protocol numbers used here.
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const IGMP: u8 = 2;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
}

/// Why a frame could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("frame of {0} bytes is too short for its Ethernet header")]
    TooShort(usize),
    #[error("not an IP packet (ethertype {0:#06x})")]
    NotIp(u16),
    #[error("malformed IP packet: {0}")]
    Ip(String),
    #[error("malformed {proto} header: {why}")]
    Transport { proto: &'static str, why: String },
}

/// Where a packet sits in a fragmented datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// A whole datagram.
    Unfragmented,
    /// The first fragment (offset 0, more fragments follow): it holds the transport header.
    First,
    /// Any later fragment: no transport header.
    Later,
}

/// The transport header fields that matter here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp {
        src_port: u16,
        dst_port: u16,
        seq: u32,
        /// The acknowledgment number when the ACK flag is set.
        ack: Option<u32>,
        syn: bool,
        fin: bool,
        rst: bool,
        /// Payload bytes after the TCP header (of this fragment, for a first fragment).
        payload_len: usize,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Sctp {
        src_port: u16,
        dst_port: u16,
    },
    /// ICMP in IPv4, ICMPv6 in IPv6.
    Icmp {
        icmp_type: u8,
        code: u8,
    },
    /// Another protocol, or a later fragment.
    Other,
}

/// A parsed packet-in frame. Slices borrow from the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedPacket<'a> {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// Everything before the IP header: Ethernet header and VLAN tags.
    pub l2_header: &'a [u8],
    /// The IP packet as far as its length fields say (Ethernet padding cut off).
    pub ip: &'a [u8],
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    /// IPv4: the header with its options (IHL × 4); IPv6: the fixed 40-byte header.
    pub ip_header_len: usize,
    /// The IP packet length as the header states it (IPv6: payload length + 40).
    pub ip_len: u32,
    /// The transport protocol (after any IPv6 extension headers).
    pub protocol: u8,
    pub fragment: Fragment,
    pub transport: Transport,
}

impl ParsedPacket<'_> {
    pub fn is_ipv6(&self) -> bool {
        self.src_ip.is_ipv6()
    }
}

fn mac(b: &[u8]) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[..6]);
    m
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn transport_error(proto: &'static str, why: impl std::fmt::Display) -> PacketError {
    PacketError::Transport {
        proto,
        why: why.to_string(),
    }
}

/// Ports of a UDP/SCTP-like header of at least `min` bytes.
fn ports(payload: &[u8], min: usize, name: &'static str) -> Result<(u16, u16), PacketError> {
    if payload.len() < min {
        return Err(transport_error(
            name,
            format!("{} bytes, need {min}", payload.len()),
        ));
    }
    match (be16(payload, 0), be16(payload, 2)) {
        (Some(s), Some(d)) => Ok((s, d)),
        _ => Err(transport_error(name, "truncated")),
    }
}

fn parse_transport(protocol: u8, v6: bool, payload: &[u8]) -> Result<Transport, PacketError> {
    Ok(match protocol {
        proto::TCP => {
            let tcp = TcpSlice::from_slice(payload).map_err(|e| transport_error("TCP", e))?;
            Transport::Tcp {
                src_port: tcp.source_port(),
                dst_port: tcp.destination_port(),
                seq: tcp.sequence_number(),
                ack: tcp.ack().then(|| tcp.acknowledgment_number()),
                syn: tcp.syn(),
                fin: tcp.fin(),
                rst: tcp.rst(),
                payload_len: tcp.payload().len(),
            }
        }
        proto::UDP => {
            let (src_port, dst_port) = ports(payload, 8, "UDP")?;
            Transport::Udp { src_port, dst_port }
        }
        proto::SCTP => {
            let (src_port, dst_port) = ports(payload, 12, "SCTP")?;
            Transport::Sctp { src_port, dst_port }
        }
        proto::ICMP if !v6 => icmp(payload, "ICMP")?,
        proto::ICMPV6 if v6 => icmp(payload, "ICMPv6")?,
        _ => Transport::Other,
    })
}

fn icmp(payload: &[u8], name: &'static str) -> Result<Transport, PacketError> {
    match payload {
        [icmp_type, code, _, _, _, _, _, _, ..] => Ok(Transport::Icmp {
            icmp_type: *icmp_type,
            code: *code,
        }),
        _ => Err(transport_error(name, format!("{} bytes, need 8", payload.len()))),
    }
}

/// Parses an Ethernet frame carrying IPv4 or IPv6.
pub fn parse(frame: &[u8]) -> Result<ParsedPacket<'_>, PacketError> {
    if frame.len() < ETH_HEADER_LEN {
        return Err(PacketError::TooShort(frame.len()));
    }
    let mut l2_len = 12;
    let mut ether_type = be16(frame, l2_len).ok_or(PacketError::TooShort(frame.len()))?;
    while VLAN_TPIDS.contains(&ether_type) {
        l2_len += 4;
        ether_type = be16(frame, l2_len).ok_or(PacketError::TooShort(frame.len()))?;
    }
    l2_len += 2;
    if ether_type != ETH_TYPE_IPV4 && ether_type != ETH_TYPE_IPV6 {
        return Err(PacketError::NotIp(ether_type));
    }
    let (l2_header, rest) = frame.split_at(l2_len);
    let ip = IpSlice::from_slice(rest).map_err(|e| PacketError::Ip(e.to_string()))?;
    let (ip_header_len, ip_len, fragment) = match &ip {
        IpSlice::Ipv4(v4) => {
            if ether_type != ETH_TYPE_IPV4 {
                return Err(PacketError::Ip("IPv4 packet in an IPv6 frame".into()));
            }
            let h = v4.header();
            let fragment = if h.fragments_offset().value() != 0 {
                Fragment::Later
            } else if h.more_fragments() {
                Fragment::First
            } else {
                Fragment::Unfragmented
            };
            (usize::from(h.ihl()) * 4, u32::from(h.total_len()), fragment)
        }
        IpSlice::Ipv6(v6) => {
            if ether_type != ETH_TYPE_IPV6 {
                return Err(PacketError::Ip("IPv6 packet in an IPv4 frame".into()));
            }
            let mut fragment = Fragment::Unfragmented;
            for ext in v6.extensions().clone() {
                if let Ipv6ExtensionSlice::Fragment(f) = ext {
                    if f.fragment_offset().value() != 0 {
                        fragment = Fragment::Later;
                    } else if f.more_fragments() && fragment == Fragment::Unfragmented {
                        fragment = Fragment::First;
                    }
                }
            }
            let len = u32::from(v6.header().payload_length()) + 40;
            (40, len, fragment)
        }
    };
    let payload = ip.payload();
    let v6 = matches!(ip, IpSlice::Ipv6(_));
    let protocol = payload.ip_number.0;
    let transport = if fragment == Fragment::Later {
        Transport::Other
    } else {
        parse_transport(protocol, v6, payload.payload)?
    };
    // The IP packet without Ethernet padding (the strict parse checked the length fields
    // against the frame; an IPv6 payload length of 0 means "the rest of the frame").
    let ip_bytes = match ip_len {
        40 if v6 => rest,
        n => rest.get(..n as usize).unwrap_or(rest),
    };
    Ok(ParsedPacket {
        dst_mac: mac(&frame[0..6]),
        src_mac: mac(&frame[6..12]),
        l2_header,
        ip: ip_bytes,
        src_ip: ip.source_addr(),
        dst_ip: ip.destination_addr(),
        ip_header_len,
        ip_len,
        protocol,
        fragment,
        transport,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
    const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

    fn tcp_syn() -> Vec<u8> {
        let b = PacketBuilder::ethernet2(A, B)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 22, 1000, 65535)
            .syn();
        let mut v = Vec::new();
        b.write(&mut v, &[]).expect("build");
        v
    }

    #[test]
    fn parses_tcp_over_ipv4_and_cuts_padding() {
        let mut f = tcp_syn();
        let ip_len = f.len() - ETH_HEADER_LEN;
        f.extend_from_slice(&[0; 6]); // Ethernet padding
        let p = parse(&f).expect("parse");
        assert_eq!(p.src_mac, A);
        assert_eq!(p.dst_mac, B);
        assert_eq!(p.src_ip, "10.0.0.1".parse::<IpAddr>().expect("ip"));
        assert_eq!(p.ip.len(), ip_len);
        assert_eq!(p.ip_len as usize, ip_len);
        assert_eq!(p.ip_header_len, 20);
        assert_eq!(p.protocol, proto::TCP);
        assert_eq!(
            p.transport,
            Transport::Tcp {
                src_port: 40000,
                dst_port: 22,
                seq: 1000,
                ack: None,
                syn: true,
                fin: false,
                rst: false,
                payload_len: 0
            }
        );
    }

    #[test]
    fn parses_vlan_tagged_udp_over_ipv6() {
        let b = PacketBuilder::ethernet2(A, B)
            .single_vlan(etherparse::VlanId::try_new(7).expect("vlan"))
            .ipv6([0xfd; 16], [0xfe; 16], 64)
            .udp(5353, 53);
        let mut f = Vec::new();
        b.write(&mut f, &[1, 2, 3]).expect("build");
        let p = parse(&f).expect("parse");
        assert_eq!(p.l2_header.len(), 18);
        assert!(p.is_ipv6());
        assert_eq!(p.ip_len, 40 + 8 + 3);
        assert_eq!(
            p.transport,
            Transport::Udp {
                src_port: 5353,
                dst_port: 53
            }
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert_eq!(parse(&[0; 5]), Err(PacketError::TooShort(5)));
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(parse(&arp), Err(PacketError::NotIp(0x0806)));
        let mut f = tcp_syn();
        f.truncate(40); // cut inside the TCP header
        assert!(matches!(parse(&f), Err(PacketError::Ip(_))));
        // Every prefix of a valid frame parses or fails cleanly.
        let f = tcp_syn();
        for n in 0..f.len() {
            let _ = parse(&f[..n]);
        }
        // A VLAN tag chain that runs off the end.
        let mut v = vec![0u8; 12];
        v.extend_from_slice(&[0x81, 0x00, 0, 1, 0x81, 0x00]);
        assert!(parse(&v).is_err());
    }

    #[test]
    fn later_fragments_have_no_transport() {
        let mut f = tcp_syn();
        // Fragment offset 8 (64 bytes); the header checksum is not checked by the parser.
        f[ETH_HEADER_LEN + 6] = 0;
        f[ETH_HEADER_LEN + 7] = 8;
        let p = parse(&f).expect("parse");
        assert_eq!(p.fragment, Fragment::Later);
        assert_eq!(p.transport, Transport::Other);
    }
}
