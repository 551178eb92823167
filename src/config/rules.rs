//! Checks of single values, in Antrea's words where Antrea checks them: a policy bypass rule,
//! `dnsServerOverride`, the bridge name and the ExternalNode's Namespace.

use std::net::SocketAddr;

use ipnet::IpNet;

use super::{BypassProtocol, BypassRule, Direction};

/// `dnsServerOverride` as `host:port`: an IP address or host name, with an optional port (53
/// when missing, as upstream's `AppendPortIfMissing`); IPv6 with a port needs brackets.
pub(super) fn dns_server_host_port(v: &str) -> Result<String, String> {
    if let Ok(ip) = v.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 53).to_string());
    }
    let (host, port) = match v.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || (h.starts_with('[') && h.ends_with(']')) => (h, Some(p)),
        Some(_) => return Err("an IPv6 address with a port needs brackets ([addr]:port)".into()),
        None => (v, None),
    };
    let port = match port {
        None => 53,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("port {p:?} must be a number between 1 and 65535")),
        },
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        if host.starts_with('[') != ip.is_ipv6() {
            return Err("only an IPv6 address goes between brackets".into());
        }
        return Ok(SocketAddr::new(ip, port).to_string());
    }
    let name_ok = !bare.is_empty()
        && bare.len() <= 253
        && !host.starts_with('[')
        && bare.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if !name_ok {
        return Err("expected an IP address or a host name, with an optional :port".into());
    }
    Ok(format!("{bare}:{port}"))
}

/// A policy bypass rule as written, before Antrea's checks. Scalars are kept as text (Go's yaml
/// decodes any scalar into a string field); `port` is an integer.
#[derive(Debug, Default)]
pub(super) struct RawBypassRule {
    pub(super) direction: String,
    pub(super) protocol: String,
    pub(super) cidr: String,
    pub(super) port: i64,
}

impl RawBypassRule {
    /// Antrea's checks in Antrea's order; the first failure wins. On error returns the field at
    /// fault and Antrea's message.
    pub(super) fn validate(&self) -> Result<BypassRule, (&'static str, String)> {
        let direction = match self.direction.as_str() {
            "ingress" => Direction::Ingress,
            "egress" => Direction::Egress,
            d => {
                return Err((
                    "direction",
                    format!("direction {d} for policyBypassRule is invalid"),
                ))
            }
        };
        let protocol = match self.protocol.as_str() {
            "tcp" => BypassProtocol::Tcp,
            "udp" => BypassProtocol::Udp,
            "icmp" => BypassProtocol::Icmp,
            "ip" => BypassProtocol::Ip,
            p => {
                return Err((
                    "protocol",
                    format!("protocol {p} for policyBypassRule is invalid"),
                ))
            }
        };
        let cidr = match self.cidr.parse::<IpNet>() {
            Ok(net) => net.trunc(),
            Err(_) => {
                return Err((
                    "cidr",
                    format!("cidr {} for policyBypassRule is invalid", self.cidr),
                ))
            }
        };
        if self.port == 0 && matches!(protocol, BypassProtocol::Tcp | BypassProtocol::Udp) {
            return Err((
                "port",
                format!(
                    "missing port for policyBypassRule when protocol is {}",
                    self.protocol
                ),
            ));
        }
        let port = u16::try_from(self.port).map_err(|_| {
            (
                "port",
                format!("port {} for policyBypassRule is invalid", self.port),
            )
        })?;
        // Not an Antrea check: upstream builds a flow OVS refuses (a port match without L4), and
        // installing the rule without its port would bypass more than written.
        if port != 0 && matches!(protocol, BypassProtocol::Icmp | BypassProtocol::Ip) {
            return Err((
                "port",
                format!(
                    "port {port} for policyBypassRule is not allowed when protocol is {} \
                     (only tcp and udp have ports)",
                    self.protocol
                ),
            ));
        }
        Ok(BypassRule {
            direction,
            protocol,
            cidr,
            port,
        })
    }
}

/// Linux interface name rules (IFNAMSIZ): 1 to 15 bytes, no `/`, no whitespace, not `.`/`..`.
pub(super) fn check_interface_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it must not be empty");
    }
    if name.len() > 15 {
        return Err("it must be at most 15 characters long");
    }
    if name == "." || name == ".." || name.contains('/') || name.chars().any(char::is_whitespace) {
        return Err("it must not contain '/' or whitespace");
    }
    Ok(())
}

pub(super) fn check_dns1123_label(s: &str) -> Result<(), &'static str> {
    const WHY: &str =
        "a DNS-1123 label must consist of lower case alphanumeric characters or '-', start and end with \
         an alphanumeric character, and be at most 63 characters long";
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(WHY)
    }
}
