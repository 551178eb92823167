//! The Reject reply: from the packet a Reject rule stopped, the packet that tells its sender
//! (pipeline reference §9.3, runtime reference §4.10), and the packet-out that delivers it.
//! Pure.
//!
//! **The reply.** Addresses are swapped (MACs, IPs, ports); VLAN tags are kept as they were.
//! IPv4 TTL / IPv6 hop limit 128, a caller-chosen IPv4 identification (upstream: random).
//! * TCP: a reset as a TCP stack sends it (RFC 793 §3.4, what Linux does): to a segment without
//!   ACK, `RST|ACK` with seq 0 and ack = SEG.SEQ + SEG.LEN (SYN and FIN count), window 0; to a
//!   segment with ACK, `RST` with seq = SEG.ACK. For the usual case, a SYN, this is upstream's
//!   reply (ack = seq + 1) except that upstream randomizes the seq, which the peer ignores.
//! * Anything else: ICMP destination unreachable, "host administratively prohibited" (type 3
//!   code 10) for IPv4, "communication administratively prohibited" (type 1 code 1) for IPv6,
//!   with 4 unused zero bytes and the start of the rejected packet: its whole IPv4 header
//!   (options included, RFC 792; upstream assumes 20 bytes) plus 8 bytes, or for IPv6 as much as
//!   keeps the reply within the minimum MTU of 1280 bytes (RFC 4443 §3.1; upstream: 48 bytes).
//!
//! **No reply** (RFC 1122 §3.2.2, §4.2.2.13, RFC 4443 §2.4(e); upstream answers all of these):
//! to a TCP reset, to an ICMP/ICMPv6 error, to a fragment other than the first (and to a
//! fragmented TCP segment: its length is unknown), to a link-layer multicast or broadcast frame,
//! or to a packet whose source or destination address is not unicast. This keeps two rejecting
//! peers from answering each other's replies forever.
//!
//! **Where it goes.** The reply leaves through the port the rejected packet came in on, so it
//! reaches its sender exactly once:
//! * an ingress rule rejected a packet from the network (it entered through the uplink U of an
//!   attached interface whose internal port is H): packet-out `in_port=H`, `output:U`
//!   (upstream's `rejectPodLocalToRemote`, G14);
//! * an egress rule rejected a packet from the VM (it entered through H): `in_port=U`,
//!   `output:H` (`rejectPodRemoteToLocal`); the VM's stack sees `Connection refused` or an ICMP
//!   error.
//!
//! The port comes from the packet-in's `in_port`; when it does not name an attached port, the
//! interface is found by IP like upstream (the reply's source IP local → towards the uplink; its
//! destination IP local → towards the internal port), and if neither IP is local there is no
//! reply. The packet-out outputs directly and does not enter the tables: upstream's
//! ExternalNode ingress case also does `resubmit(,L2ForwardingCalc)`, which runs the reply
//! through the pipeline to `Output` (which sends it to the uplink already) *and* then outputs it
//! to the uplink again: two replies (pipeline quirk 3; the lab test measured two resets per
//! refused connection with that action list on OVS 3.1). A direct output sends one, cannot loop
//! (a packet-out's output never comes back as a packet-in), and cannot be dropped by a policy
//! rule. Conntrack is not involved either way: the rejected packet was never committed. The
//! packet-out still loads GeneratedRejectPacketOutRegMark (reg0[13]) as upstream does, which
//! only matters to a flow that looks for it (none does on a VM).

use std::net::IpAddr;

use etherparse::{IpHeaders, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, PacketBuilder, TcpHeader};

use super::packet::{self, Fragment, PacketError, ParsedPacket, Transport};
use crate::attachment::AttachedInterface;
use crate::ovs::openflow::{Action, Match, PacketIn, PacketOut, SetField};
use crate::policy::pipeline::fields::{reg, reg0};

/// IPv4 TTL and IPv6 hop limit of a reply.
pub const REPLY_TTL: u8 = 128;
pub const ICMPV4_DEST_UNREACHABLE: u8 = 3;
pub const ICMPV4_HOST_ADMIN_PROHIBITED: u8 = 10;
pub const ICMPV6_DEST_UNREACHABLE: u8 = 1;
pub const ICMPV6_ADMIN_PROHIBITED: u8 = 1;
/// The minimum IPv6 MTU, the largest ICMPv6 error (RFC 4443 §2.4(c)).
pub const IPV6_MIN_MTU: usize = 1280;
/// ICMP header: type, code, checksum, 4 unused bytes.
const ICMP_HEADER_LEN: usize = 8;

/// Why no reply could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectError {
    #[error("cannot parse the rejected packet: {0}")]
    Packet(#[from] PacketError),
    #[error("neither source nor destination are on this Node: {src} -> {dst}")]
    NotLocal { src: IpAddr, dst: IpAddr },
    #[error("cannot build the reply: {0}")]
    Build(String),
}

/// Why a rejected packet gets no reply on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suppressed {
    /// A TCP reset is never answered.
    IncomingReset,
    /// An ICMP/ICMPv6 error is never answered with another.
    IcmpError,
    /// A fragment other than the first, or a fragmented TCP segment.
    Fragment,
    /// Sent to a link-layer multicast or broadcast address (or from one).
    LinkMulticast,
    /// Source or destination IP not unicast (unspecified, multicast, broadcast).
    NotUnicast,
}

impl std::fmt::Display for Suppressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Suppressed::IncomingReset => "the rejected packet is a TCP reset",
            Suppressed::IcmpError => "the rejected packet is an ICMP error",
            Suppressed::Fragment => "the rejected packet is a fragment",
            Suppressed::LinkMulticast => "the rejected frame is link-layer multicast or broadcast",
            Suppressed::NotUnicast => "an address of the rejected packet is not unicast",
        })
    }
}

/// What to do about a rejected packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectOutcome {
    Reply(Box<PacketOut>),
    Suppressed(Suppressed),
}

/// Which way the reply travels (upstream's reject types on an ExternalNode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectKind {
    /// From the VM's address to a peer on the network: out of the uplink.
    LocalToRemote,
    /// From a peer to the VM: out of the internal port, into the VM's stack.
    RemoteToLocal,
}

/// The packet-out's ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub kind: RejectKind,
    pub in_port: u32,
    pub out_port: u32,
}

fn local_to_remote(i: &AttachedInterface) -> Route {
    Route {
        kind: RejectKind::LocalToRemote,
        in_port: i.ofport,
        out_port: i.uplink_ofport,
    }
}

fn remote_to_local(i: &AttachedInterface) -> Route {
    Route {
        kind: RejectKind::RemoteToLocal,
        in_port: i.uplink_ofport,
        out_port: i.ofport,
    }
}

/// Where the reply to a packet that entered at `in_port` leaves (see the module documentation).
/// `reply_src`/`reply_dst` are the reply's addresses (the rejected packet's, swapped).
pub fn route(
    in_port: Option<u32>,
    reply_src: IpAddr,
    reply_dst: IpAddr,
    interfaces: &[AttachedInterface],
) -> Result<Route, RejectError> {
    if let Some(p) = in_port {
        if let Some(i) = interfaces.iter().find(|i| i.uplink_ofport == p) {
            return Ok(local_to_remote(i));
        }
        if let Some(i) = interfaces.iter().find(|i| i.ofport == p) {
            return Ok(remote_to_local(i));
        }
    }
    if let Some(i) = interfaces.iter().find(|i| i.ips.contains(&reply_dst)) {
        return Ok(remote_to_local(i));
    }
    if let Some(i) = interfaces.iter().find(|i| i.ips.contains(&reply_src)) {
        return Ok(local_to_remote(i));
    }
    Err(RejectError::NotLocal {
        src: reply_dst,
        dst: reply_src,
    })
}

fn is_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// Why `p` must not be answered, if it must not.
pub fn suppression(p: &ParsedPacket<'_>) -> Option<Suppressed> {
    if p.dst_mac[0] & 1 != 0 || p.src_mac[0] & 1 != 0 {
        return Some(Suppressed::LinkMulticast);
    }
    if !is_unicast(p.src_ip) || !is_unicast(p.dst_ip) {
        return Some(Suppressed::NotUnicast);
    }
    if p.fragment == Fragment::Later {
        return Some(Suppressed::Fragment);
    }
    match p.transport {
        Transport::Tcp { .. } if p.fragment != Fragment::Unfragmented => Some(Suppressed::Fragment),
        Transport::Tcp { rst: true, .. } => Some(Suppressed::IncomingReset),
        Transport::Icmp { icmp_type, .. } => {
            let error = if p.is_ipv6() {
                icmp_type < 128
            } else {
                matches!(icmp_type, 3 | 4 | 5 | 11 | 12 | 31)
            };
            error.then_some(Suppressed::IcmpError)
        }
        _ => None,
    }
}

/// The reply frame to `p` (which must not be suppressed), with IPv4 identification `ip_id`.
pub fn reply_frame(p: &ParsedPacket<'_>, ip_id: u16) -> Result<Vec<u8>, RejectError> {
    let build = |e: &dyn std::fmt::Display| RejectError::Build(e.to_string());
    let ip = match (p.src_ip, p.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h =
                Ipv4Header::new(0, REPLY_TTL, IpNumber(0), d.octets(), s.octets()).map_err(|e| build(&e))?;
            h.identification = ip_id;
            IpHeaders::Ipv4(h, Default::default())
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => IpHeaders::Ipv6(
            Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: 0,
                next_header: IpNumber(0),
                hop_limit: REPLY_TTL,
                source: d.octets(),
                destination: s.octets(),
            },
            Default::default(),
        ),
        _ => return Err(RejectError::Build("mixed IP families".into())),
    };
    let builder = PacketBuilder::ip(ip);
    let mut ip_packet = Vec::with_capacity(IPV6_MIN_MTU);
    match p.transport {
        Transport::Tcp {
            src_port,
            dst_port,
            seq,
            ack,
            syn,
            fin,
            payload_len,
            ..
        } => {
            let mut h = TcpHeader::new(dst_port, src_port, 0, 0);
            h.rst = true;
            match ack {
                Some(a) => h.sequence_number = a,
                None => {
                    let seg_len = payload_len as u32 + u32::from(syn) + u32::from(fin);
                    h.ack = true;
                    h.acknowledgment_number = seq.wrapping_add(seg_len);
                }
            }
            builder
                .tcp_header(h)
                .write(&mut ip_packet, &[])
                .map_err(|e| build(&e))?;
        }
        _ => {
            let quoted = if p.is_ipv6() {
                IPV6_MIN_MTU - 40 - ICMP_HEADER_LEN
            } else {
                p.ip_header_len + 8
            };
            let body = &p.ip[..quoted.min(p.ip.len())];
            if p.is_ipv6() {
                builder
                    .icmpv6_raw(ICMPV6_DEST_UNREACHABLE, ICMPV6_ADMIN_PROHIBITED, [0; 4])
                    .write(&mut ip_packet, body)
            } else {
                builder
                    .icmpv4_raw(ICMPV4_DEST_UNREACHABLE, ICMPV4_HOST_ADMIN_PROHIBITED, [0; 4])
                    .write(&mut ip_packet, body)
            }
            .map_err(|e| build(&e))?;
        }
    }
    let mut frame = Vec::with_capacity(p.l2_header.len() + ip_packet.len());
    frame.extend_from_slice(&p.src_mac);
    frame.extend_from_slice(&p.dst_mac);
    frame.extend_from_slice(p.l2_header.get(12..).unwrap_or_default());
    frame.extend_from_slice(&ip_packet);
    Ok(frame)
}

/// The packet-out that answers the rejected `frame`, which entered the bridge at `in_port`.
pub fn build_reject(
    frame: &[u8],
    in_port: Option<u32>,
    interfaces: &[AttachedInterface],
    ip_id: u16,
) -> Result<RejectOutcome, RejectError> {
    reject_parsed(&packet::parse(frame)?, in_port, interfaces, ip_id)
}

/// [`build_reject`] for a frame already parsed.
pub fn reject_parsed(
    p: &ParsedPacket<'_>,
    in_port: Option<u32>,
    interfaces: &[AttachedInterface],
    ip_id: u16,
) -> Result<RejectOutcome, RejectError> {
    if let Some(s) = suppression(p) {
        return Ok(RejectOutcome::Suppressed(s));
    }
    let r = route(in_port, p.dst_ip, p.src_ip, interfaces)?;
    let (mark, mask) = reg0::GENERATED_REJECT_PACKET_OUT;
    Ok(RejectOutcome::Reply(Box::new(PacketOut {
        in_port: r.in_port,
        metadata: Match::new(),
        actions: vec![
            Action::SetField(SetField::Reg {
                idx: reg::MARKS,
                value: mark,
                mask: Some(mask),
            }),
            Action::Output(r.out_port),
        ],
        packet: reply_frame(p, ip_id)?,
    })))
}

/// [`build_reject`] for a packet-in.
pub fn reject_packet_in(
    pi: &PacketIn,
    interfaces: &[AttachedInterface],
    ip_id: u16,
) -> Result<RejectOutcome, RejectError> {
    build_reject(&pi.packet, pi.metadata.in_port, interfaces, ip_id)
}

#[cfg(test)]
mod tests;
