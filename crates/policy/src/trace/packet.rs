//! The packet a trace follows and the flow text `ofproto/trace` takes for it
//! (`ovs-fields(7)` names: `tcp_src`/`udp_dst`/`sctp_dst`, `icmp_type` for ICMP and
//! `icmpv6_type` for ICMPv6; `tp_src` is TCP's alone, OVS refuses it on a UDP flow).
//!
//! A packet *in* comes from the peer to the local address and enters the bridge through the
//! interface's uplink; a packet *out* goes from the local address to the peer and enters through
//! the host's internal port. `port` is the connection's destination port either way (the VM's
//! port for `in`, the peer's for `out`); the source port is an ephemeral one unless given, since
//! rules can match source ports too.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The ephemeral source port a trace uses when none is given.
pub const DEFAULT_SOURCE_PORT: u16 = 50000;
/// How many conntrack recirculations the pipeline can take (conntrack zone, an egress Allow
/// rule's commit, an ingress Allow rule's commit, `ConntrackCommit`): each is told the state
/// of a new connection.
pub const MAX_RECIRCULATIONS: usize = 4;

/// Which way the packet goes, seen from the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceDirection {
    /// From the peer to the VM (ingress rules decide).
    In,
    /// From the VM to the peer (egress rules decide).
    Out,
}

impl std::str::FromStr for TraceDirection {
    type Err = PacketError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "in" | "ingress" => Ok(TraceDirection::In),
            "out" | "egress" => Ok(TraceDirection::Out),
            _ => Err(PacketError::Direction(s.to_string())),
        }
    }
}

/// The packet's protocol (ICMP means ICMPv6 for an IPv6 packet, as in Antrea's rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceProtocol {
    Tcp,
    Udp,
    Sctp,
    Icmp,
}

impl std::str::FromStr for TraceProtocol {
    type Err = PacketError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(TraceProtocol::Tcp),
            "udp" => Ok(TraceProtocol::Udp),
            "sctp" => Ok(TraceProtocol::Sctp),
            "icmp" | "icmpv6" | "icmp6" => Ok(TraceProtocol::Icmp),
            _ => Err(PacketError::Protocol(s.to_string())),
        }
    }
}

impl TraceProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceProtocol::Tcp => "tcp",
            TraceProtocol::Udp => "udp",
            TraceProtocol::Sctp => "sctp",
            TraceProtocol::Icmp => "icmp",
        }
    }
}

/// Why a packet cannot be traced as described.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("direction {0:?}: use in or out")]
    Direction(String),
    #[error("protocol {0:?}: use tcp, udp, sctp or icmp")]
    Protocol(String),
    #[error("the local address {local} and the peer {peer} are not of the same IP family")]
    Family { local: IpAddr, peer: IpAddr },
    #[error("{0} needs a destination port (--port)")]
    PortRequired(&'static str),
    #[error("port 0 is not a port")]
    ZeroPort,
    #[error("icmp has no ports; use --icmp-type and --icmp-code")]
    IcmpPorts,
    #[error("--icmp-type and --icmp-code are for icmp only")]
    IcmpFields,
}

/// One packet to trace: what `ofproto/trace` is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracePacket {
    pub direction: TraceDirection,
    /// The OpenFlow port it enters the bridge by: the uplink for `in`, the internal port for
    /// `out`.
    pub in_port: u32,
    /// The VM's address (on the traced interface).
    pub local: IpAddr,
    pub peer: IpAddr,
    pub protocol: TraceProtocol,
    /// The connection's destination port (TCP, UDP, SCTP).
    pub port: Option<u16>,
    pub source_port: Option<u16>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
}

impl TracePacket {
    /// The packet's source and destination addresses.
    pub fn addresses(&self) -> (IpAddr, IpAddr) {
        match self.direction {
            TraceDirection::In => (self.peer, self.local),
            TraceDirection::Out => (self.local, self.peer),
        }
    }

    /// Checks the description: one IP family, ports for the protocols that have them.
    pub fn validate(&self) -> Result<(), PacketError> {
        if self.local.is_ipv4() != self.peer.is_ipv4() {
            return Err(PacketError::Family {
                local: self.local,
                peer: self.peer,
            });
        }
        if self.port == Some(0) || self.source_port == Some(0) {
            return Err(PacketError::ZeroPort);
        }
        match self.protocol {
            TraceProtocol::Icmp => {
                if self.port.is_some() || self.source_port.is_some() {
                    return Err(PacketError::IcmpPorts);
                }
            }
            p => {
                if self.port.is_none() {
                    return Err(PacketError::PortRequired(p.as_str()));
                }
                if self.icmp_type.is_some() || self.icmp_code.is_some() {
                    return Err(PacketError::IcmpFields);
                }
            }
        }
        Ok(())
    }

    /// The flow `ofproto/trace` follows, e.g.
    /// `in_port=21,tcp,nw_src=10.0.0.8,nw_dst=10.0.0.9,nw_ttl=64,tcp_src=50000,tcp_dst=22`.
    pub fn flow(&self) -> Result<String, PacketError> {
        self.validate()?;
        let v6 = self.local.is_ipv6();
        let (src, dst) = self.addresses();
        let proto = match (self.protocol, v6) {
            (TraceProtocol::Tcp, false) => "tcp",
            (TraceProtocol::Udp, false) => "udp",
            (TraceProtocol::Sctp, false) => "sctp",
            (TraceProtocol::Icmp, false) => "icmp",
            (TraceProtocol::Tcp, true) => "tcp6",
            (TraceProtocol::Udp, true) => "udp6",
            (TraceProtocol::Sctp, true) => "sctp6",
            (TraceProtocol::Icmp, true) => "icmp6",
        };
        let mut f = format!("in_port={},{proto},", self.in_port);
        // Writing to a String cannot fail.
        let _ = if v6 {
            write!(f, "ipv6_src={src},ipv6_dst={dst},nw_ttl=64")
        } else {
            write!(f, "nw_src={src},nw_dst={dst},nw_ttl=64")
        };
        match self.protocol {
            TraceProtocol::Icmp => {
                let (field, echo) = if v6 { ("icmpv6", 128) } else { ("icmp", 8) };
                let _ = write!(
                    f,
                    ",{field}_type={},{field}_code={}",
                    self.icmp_type.unwrap_or(echo),
                    self.icmp_code.unwrap_or(0)
                );
            }
            p => {
                let _ = write!(
                    f,
                    ",{0}_src={1},{0}_dst={2}",
                    p.as_str(),
                    self.source_port.unwrap_or(DEFAULT_SOURCE_PORT),
                    self.port.unwrap_or_default()
                );
            }
        }
        Ok(f)
    }

    /// The arguments of the `ofproto/trace` control command on `bridge`: the flow, then one
    /// `--ct-next trk,new` per possible recirculation (the first packet of a new connection).
    pub fn trace_args(&self, bridge: &str) -> Result<Vec<String>, PacketError> {
        let mut args = vec![bridge.to_string(), self.flow()?];
        for _ in 0..MAX_RECIRCULATIONS {
            args.push("--ct-next".into());
            args.push("trk,new".into());
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(direction: TraceDirection, local: &str, peer: &str, protocol: TraceProtocol) -> TracePacket {
        TracePacket {
            direction,
            in_port: 21,
            local: local.parse().unwrap(),
            peer: peer.parse().unwrap(),
            protocol,
            port: None,
            source_port: None,
            icmp_type: None,
            icmp_code: None,
        }
    }

    #[test]
    fn an_incoming_tcp_packet_goes_from_the_peer_to_the_vm_port() {
        let mut p = packet(TraceDirection::In, "10.0.0.9", "10.0.0.8", TraceProtocol::Tcp);
        p.port = Some(22);
        assert_eq!(
            p.flow().unwrap(),
            "in_port=21,tcp,nw_src=10.0.0.8,nw_dst=10.0.0.9,nw_ttl=64,tcp_src=50000,tcp_dst=22"
        );
        let args = p.trace_args("br-int").unwrap();
        assert_eq!(args[0], "br-int");
        assert_eq!(args.len(), 2 + 2 * MAX_RECIRCULATIONS);
        assert_eq!(&args[2..4], ["--ct-next", "trk,new"]);
    }

    #[test]
    fn an_outgoing_udp6_packet_names_udp_fields() {
        let mut p = packet(TraceDirection::Out, "fd00::2", "fd00::1", TraceProtocol::Udp);
        p.in_port = 20;
        p.port = Some(53);
        p.source_port = Some(4000);
        assert_eq!(
            p.flow().unwrap(),
            "in_port=20,udp6,ipv6_src=fd00::2,ipv6_dst=fd00::1,nw_ttl=64,udp_src=4000,udp_dst=53"
        );
    }

    #[test]
    fn icmp_defaults_to_an_echo_request_of_its_family() {
        let p = packet(TraceDirection::In, "10.0.0.9", "10.0.0.8", TraceProtocol::Icmp);
        assert!(p
            .flow()
            .unwrap()
            .ends_with(",icmp,nw_src=10.0.0.8,nw_dst=10.0.0.9,nw_ttl=64,icmp_type=8,icmp_code=0"));
        let mut p6 = packet(TraceDirection::In, "fd00::2", "fd00::1", TraceProtocol::Icmp);
        p6.icmp_code = Some(0);
        assert!(p6.flow().unwrap().ends_with(",icmpv6_type=128,icmpv6_code=0"));
    }

    #[test]
    fn descriptions_that_make_no_packet_are_refused() {
        let p = packet(TraceDirection::In, "10.0.0.9", "fd00::1", TraceProtocol::Icmp);
        assert!(matches!(p.flow(), Err(PacketError::Family { .. })));
        let p = packet(TraceDirection::In, "10.0.0.9", "10.0.0.1", TraceProtocol::Sctp);
        assert_eq!(p.flow(), Err(PacketError::PortRequired("sctp")));
        let mut p = packet(TraceDirection::In, "10.0.0.9", "10.0.0.1", TraceProtocol::Icmp);
        p.port = Some(1);
        assert_eq!(p.flow(), Err(PacketError::IcmpPorts));
        let mut p = packet(TraceDirection::In, "10.0.0.9", "10.0.0.1", TraceProtocol::Tcp);
        p.port = Some(0);
        assert_eq!(p.flow(), Err(PacketError::ZeroPort));
        p.port = Some(1);
        p.icmp_type = Some(8);
        assert_eq!(p.flow(), Err(PacketError::IcmpFields));
        assert!("sideways".parse::<TraceDirection>().is_err());
        assert_eq!("ICMPv6".parse::<TraceProtocol>(), Ok(TraceProtocol::Icmp));
    }
}
