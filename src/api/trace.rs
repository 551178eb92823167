//! `GET /trace`: the agent API's side of `antrea-vm-agent trace`. Query parameters:
//! `direction` (`in`|`out`), `peer` (an IP address), `protocol` (`tcp`|`udp`|`sctp`|`icmp`),
//! `port`, `sourcePort`, `icmpType`, `icmpCode`, `interface` (the attached interface; needed
//! only when several are attached), `local` (the VM's address on it; default its first address
//! of the peer's family).
//!
//! It takes the conjunctions and the attached interfaces from the flow installer, builds the
//! packet (the port it enters by: the uplink for `in`, the internal port for `out`), runs
//! `ofproto/trace` on the bridge through ovs-vswitchd's control socket (2 s at most), and answers
//! the [`TraceAnswer`](crate::policy::trace::TraceAnswer) of [`crate::policy::trace`]: the
//! verdict OVS reached, the rule or default that decided it, and the tables the packet went
//! through. It reads the live bridge, so the answer holds even when the flows drifted from what
//! the agent meant to install. `ofproto/trace` is given a flow, not a packet: nothing is sent,
//! no packet-in reaches the agent and no connection is committed.

use std::net::IpAddr;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::collect;
use super::handlers::{ask, error, unavailable, ApiState};
use crate::actors::flow_installer::query::{GetTraceContext, TraceContext};
use crate::attachment::AttachedInterface;
use crate::ovs::vswitchd::VswitchdError;
use crate::policy::trace::{
    attribute, parse_trace, PacketError, TraceDirection, TracePacket, TraceParseError,
};

/// The query of `/trace`, as the CLI sends it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceQuery {
    pub direction: String,
    pub peer: String,
    pub protocol: String,
    pub port: Option<u16>,
    pub source_port: Option<u16>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    pub interface: Option<String>,
    pub local: Option<String>,
}

/// Why a trace could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Packet(#[from] PacketError),
    #[error("{what} {value:?} is not an IP address")]
    Address { what: &'static str, value: String },
    #[error("no interface is attached to the bridge yet")]
    NoInterface,
    #[error("the agent has not yet installed its flows; try again")]
    NotSynced,
    #[error("interface {name:?} is not attached (attached: {attached})")]
    UnknownInterface { name: String, attached: String },
    #[error("{attached} are attached: name one with --interface")]
    AmbiguousInterface { attached: String },
    #[error("interface {name} has no {family} address")]
    NoLocalAddress { name: String, family: &'static str },
    #[error("{local} is not an address of interface {name}")]
    NotLocal { local: IpAddr, name: String },
    #[error(transparent)]
    Vswitchd(#[from] VswitchdError),
    #[error("cannot read the answer of ofproto/trace: {0}")]
    Parse(#[from] TraceParseError),
}

impl TraceError {
    fn status(&self) -> StatusCode {
        match self {
            TraceError::UnknownInterface { .. } => StatusCode::NOT_FOUND,
            TraceError::NoInterface | TraceError::NotSynced => StatusCode::SERVICE_UNAVAILABLE,
            TraceError::Vswitchd(VswitchdError::Call { .. }) => StatusCode::BAD_GATEWAY,
            TraceError::Vswitchd(_) => StatusCode::SERVICE_UNAVAILABLE,
            TraceError::Parse(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

fn address(what: &'static str, value: &str) -> Result<IpAddr, TraceError> {
    value.trim().parse().map_err(|_| TraceError::Address {
        what,
        value: value.to_string(),
    })
}

/// The packet `q` describes, entering through the interface it names (or the only one).
pub fn build_packet(q: &TraceQuery, interfaces: &[AttachedInterface]) -> Result<TracePacket, TraceError> {
    let direction: TraceDirection = q.direction.parse()?;
    let protocol = q.protocol.parse()?;
    let peer = address("peer", &q.peer)?;
    let names = || {
        interfaces
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let iface = match (&q.interface, interfaces) {
        (_, []) => return Err(TraceError::NoInterface),
        (Some(name), all) => {
            all.iter()
                .find(|i| &i.name == name)
                .ok_or_else(|| TraceError::UnknownInterface {
                    name: name.clone(),
                    attached: names(),
                })?
        }
        (None, [one]) => one,
        (None, _) => return Err(TraceError::AmbiguousInterface { attached: names() }),
    };
    let local = match &q.local {
        Some(l) => {
            let l = address("local", l)?;
            if !iface.ips.contains(&l) {
                return Err(TraceError::NotLocal {
                    local: l,
                    name: iface.name.clone(),
                });
            }
            l
        }
        None => *iface
            .ips
            .iter()
            .find(|ip| ip.is_ipv4() == peer.is_ipv4())
            .ok_or_else(|| TraceError::NoLocalAddress {
                name: iface.name.clone(),
                family: if peer.is_ipv4() { "IPv4" } else { "IPv6" },
            })?,
    };
    let packet = TracePacket {
        direction,
        in_port: match direction {
            TraceDirection::In => iface.uplink_ofport,
            TraceDirection::Out => iface.ofport,
        },
        local,
        peer,
        protocol,
        port: q.port,
        source_port: q.source_port,
        icmp_type: q.icmp_type,
        icmp_code: q.icmp_code,
    };
    packet.validate()?;
    Ok(packet)
}

/// Refuses a trace before the flow installer's first sync: the flows on the bridge then are
/// not ones whose rules the agent knows yet, and every rule would read as drift.
pub fn ready(ctx: &TraceContext) -> Result<(), TraceError> {
    if ctx.synced {
        Ok(())
    } else {
        Err(TraceError::NotSynced)
    }
}

fn failed(e: TraceError) -> HttpResponse {
    error(e.status(), e.to_string())
}

/// `GET /trace`.
pub async fn trace(state: web::Data<ApiState>, q: web::Query<TraceQuery>) -> HttpResponse {
    let Some(vswitchd) = state.vswitchd.clone() else {
        return unavailable("ovs-vswitchd's control socket");
    };
    let Some(flows) = collect::peers(&state.supervisor).await.and_then(|p| p.flows) else {
        return unavailable("the flow installer");
    };
    let Some(ctx) = ask(flows.send(GetTraceContext)).await else {
        return unavailable("the flow installer");
    };
    if let Err(e) = ready(&ctx) {
        return failed(e);
    }
    let packet = match build_packet(&q, &ctx.interfaces) {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let args = match packet.trace_args(&state.ovs_bridge) {
        Ok(a) => a,
        Err(e) => return failed(e.into()),
    };
    let text = match vswitchd.trace(&args).await {
        Ok(t) => t,
        Err(e) => return failed(e.into()),
    };
    let parsed = match parse_trace(&text) {
        Ok(p) => p,
        Err(e) => return failed(e.into()),
    };
    let flow = args.get(1).map(String::as_str).unwrap_or_default();
    HttpResponse::Ok().json(attribute(&parsed, flow, &ctx.conjunctions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attachment::EntityRef;
    use crate::policy::trace::TraceProtocol;

    fn iface(name: &str, ofport: u32, ips: &[&str]) -> AttachedInterface {
        AttachedInterface {
            name: name.into(),
            ofport,
            uplink_name: format!("{name}~"),
            uplink_ofport: ofport + 1,
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            entity: EntityRef {
                namespace: "vm-ns".into(),
                name: "vm1".into(),
            },
        }
    }

    fn query(direction: &str, peer: &str, protocol: &str) -> TraceQuery {
        TraceQuery {
            direction: direction.into(),
            peer: peer.into(),
            protocol: protocol.into(),
            ..TraceQuery::default()
        }
    }

    #[test]
    fn the_packet_enters_by_the_uplink_or_the_internal_port() {
        let all = [iface("eth0", 20, &["10.0.0.2", "fd00::2"])];
        let mut q = query("in", "10.0.0.1", "tcp");
        q.port = Some(22);
        let p = build_packet(&q, &all).unwrap();
        assert_eq!((p.in_port, p.local), (21, "10.0.0.2".parse().unwrap()));
        let mut q = query("out", "fd00::1", "icmp");
        q.icmp_type = Some(128);
        let p = build_packet(&q, &all).unwrap();
        assert_eq!(
            (p.in_port, p.local, p.protocol),
            (20, "fd00::2".parse().unwrap(), TraceProtocol::Icmp)
        );
    }

    #[test]
    fn the_interface_and_local_address_must_make_sense() {
        let two = [iface("eth0", 20, &["10.0.0.2"]), iface("eth1", 30, &["10.1.0.2"])];
        let q = query("in", "10.0.0.1", "icmp");
        assert!(matches!(build_packet(&q, &[]), Err(TraceError::NoInterface)));
        let e = build_packet(&q, &two).unwrap_err();
        assert_eq!(
            e.to_string(),
            "eth0, eth1 are attached: name one with --interface"
        );
        let mut q2 = q.clone();
        q2.interface = Some("eth9".into());
        assert_eq!(
            build_packet(&q2, &two).unwrap_err().status(),
            StatusCode::NOT_FOUND
        );
        q2.interface = Some("eth1".into());
        assert_eq!(build_packet(&q2, &two).unwrap().in_port, 31);
        q2.local = Some("10.0.0.2".into());
        assert!(matches!(
            build_packet(&q2, &two),
            Err(TraceError::NotLocal { .. })
        ));
        let q6 = query("in", "fd00::1", "icmp");
        assert_eq!(
            build_packet(&q6, &two[..1]).unwrap_err().to_string(),
            "interface eth0 has no IPv6 address"
        );
        let bad = query("in", "host.example", "icmp");
        assert_eq!(
            build_packet(&bad, &two[..1]).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let no_port = query("in", "10.0.0.1", "udp");
        assert_eq!(
            build_packet(&no_port, &two[..1]).unwrap_err().to_string(),
            "udp needs a destination port (--port)"
        );
    }

    #[test]
    fn a_trace_before_the_first_sync_is_refused_with_503() {
        let mut ctx = TraceContext {
            interfaces: vec![iface("eth0", 20, &["10.0.0.2"])],
            ..TraceContext::default()
        };
        let e = ready(&ctx).unwrap_err();
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            e.to_string(),
            "the agent has not yet installed its flows; try again"
        );
        ctx.synced = true;
        assert!(ready(&ctx).is_ok());
    }
}
