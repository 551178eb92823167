//! IP addresses and networks as `controlplane.antrea.io/v1beta2` carries them: `IPAddress` is a
//! byte string (base64 in JSON; IPv4 normally as 16 bytes in `::ffff:a.b.c.d` form, 4 bytes also
//! accepted) and `IPNet` is `{ip, prefixLength}` with a missing prefix meaning 0. This module owns
//! the base64 codec, the wire newtypes [`IpAddress`] and [`IpNetWire`], and their conversion to
//! `std::net::IpAddr` / `ipnet::IpNet` following the agent's family rule (antrea-apis.md §2.3).
//!
//! For hand-written standalone files, an `ip` may also be given as text (`"10.0.0.1"`,
//! `"fd00::1"`) and an `IPNet` as a CIDR string (`"10.0.0.0/8"`). Neither `.` nor `:` nor `/`
//! followed by digits only is ambiguous with base64 of an address, so this never changes how wire
//! data decodes; encoding always produces the wire form.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why bytes or text are not an IP address or network.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpError {
    #[error("invalid base64: {0}")]
    Base64(String),
    #[error("missing IP address")]
    Empty,
    #[error("{0} bytes is not an IP address (want 4 or 16)")]
    Length(usize),
    #[error("prefix length {prefix} is out of range for {family} (0-{max})")]
    Prefix {
        prefix: i64,
        family: &'static str,
        max: u8,
    },
}

// === base64 (RFC 4648, standard alphabet) ===

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as Go's `encoding/json` writes `[]byte`.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn sextet(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some(u32::from(c - b'A')),
        b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Standard base64; padding is optional, anything else outside the alphabet is an error.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, IpError> {
    let raw = text.as_bytes();
    let body_len = raw.iter().rposition(|&c| c != b'=').map_or(0, |p| p + 1);
    let (body, padding) = raw.split_at(body_len);
    if padding.len() > 2 || (!padding.is_empty() && !raw.len().is_multiple_of(4)) {
        return Err(IpError::Base64(format!("bad padding in {text:?}")));
    }
    if body.len() % 4 == 1 {
        return Err(IpError::Base64(format!("bad length in {text:?}")));
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let v = sextet(c)
                .ok_or_else(|| IpError::Base64(format!("character {:?} in {text:?}", char::from(c))))?;
            n |= v << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Ok(out)
}

// === IPAddress ===

/// The wire `IPAddress`: the raw bytes exactly as received (so member identity can follow the
/// controller's byte-wise rule), base64 in JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpAddress(pub Vec<u8>);

impl IpAddress {
    /// The controller's form: IPv4 as 16 bytes `::ffff:a.b.c.d`, IPv6 as 16 bytes.
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => IpAddress(v4.to_ipv6_mapped().octets().to_vec()),
            IpAddr::V6(v6) => IpAddress(v6.octets().to_vec()),
        }
    }

    /// The address, by the agent's family rule: 4 bytes, or 16 bytes starting with
    /// `00×10 ff ff`, are IPv4; other 16-byte values are IPv6 (`::` included).
    pub fn to_ip(&self) -> Result<IpAddr, IpError> {
        bytes_to_ip(&self.0)
    }
}

/// See [`IpAddress::to_ip`].
pub fn bytes_to_ip(bytes: &[u8]) -> Result<IpAddr, IpError> {
    match bytes.len() {
        0 => Err(IpError::Empty),
        4 => Ok(IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(bytes);
            let v6 = Ipv6Addr::from(octets);
            Ok(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        n => Err(IpError::Length(n)),
    }
}

impl Serialize for IpAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64_encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for IpAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IpAddress;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an IP address as a base64 byte string (or as text)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IpAddress, E> {
                parse_ip_address(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Base64 bytes, or (standalone files) an address in text form.
fn parse_ip_address(v: &str) -> Result<IpAddress, IpError> {
    if v.contains(['.', ':']) {
        return v
            .parse::<IpAddr>()
            .map(IpAddress::from_ip)
            .map_err(|e| IpError::Base64(format!("{v:?} is neither base64 nor an IP address: {e}")));
    }
    base64_decode(v).map(IpAddress)
}

// === IPNet ===

/// The wire `IPNet`: `{"ip": <IPAddress>, "prefixLength": <int32>}`, both omitted when empty/0.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpNetWire {
    pub ip: IpAddress,
    pub prefix_length: i32,
}

impl IpNetWire {
    /// The controller's form of a network (IPv4 in 16-byte mapped form).
    pub fn from_net(net: IpNet) -> Self {
        IpNetWire {
            ip: IpAddress::from_ip(net.addr()),
            prefix_length: i32::from(net.prefix_len()),
        }
    }

    /// The network, host bits cleared. The prefix counts IPv4 bits (0-32) when the address is
    /// IPv4 (also in 16-byte mapped form), IPv6 bits (0-128) otherwise.
    pub fn to_net(&self) -> Result<IpNet, IpError> {
        let ip = self.ip.to_ip()?;
        let (family, max) = match ip {
            IpAddr::V4(_) => ("IPv4", 32u8),
            IpAddr::V6(_) => ("IPv6", 128u8),
        };
        let prefix = u8::try_from(self.prefix_length)
            .ok()
            .filter(|p| *p <= max)
            .ok_or(IpError::Prefix {
                prefix: i64::from(self.prefix_length),
                family,
                max,
            })?;
        IpNet::new(ip, prefix)
            .map(|n| n.trunc())
            .map_err(|_| IpError::Prefix {
                prefix: i64::from(self.prefix_length),
                family,
                max,
            })
    }
}

impl Serialize for IpNetWire {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let len = usize::from(!self.ip.0.is_empty()) + usize::from(self.prefix_length != 0);
        let mut m = s.serialize_map(Some(len))?;
        if !self.ip.0.is_empty() {
            m.serialize_entry("ip", &self.ip)?;
        }
        if self.prefix_length != 0 {
            m.serialize_entry("prefixLength", &self.prefix_length)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for IpNetWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IpNetWire;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an IPNet {ip, prefixLength} (or a CIDR string)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IpNetWire, E> {
                let net = match v.parse::<IpNet>() {
                    Ok(net) => net,
                    Err(_) => v
                        .parse::<IpAddr>()
                        .map(IpNet::from)
                        .map_err(|e| E::custom(format!("{v:?} is not a CIDR: {e}")))?,
                };
                Ok(IpNetWire::from_net(net))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IpNetWire, A::Error> {
                let mut out = IpNetWire::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "ip" => out.ip = map.next_value()?,
                        "prefixLength" => out.prefix_length = map.next_value()?,
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, enc) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), enc);
            assert_eq!(base64_decode(enc).unwrap(), plain.as_bytes());
        }
        assert_eq!(base64_decode("Zm9vYg").unwrap(), b"foob");
        assert_eq!(base64_decode("+/8=").unwrap(), [0xfb, 0xff]);
        for bad in ["Zm9vY", "Zm9v!g==", "Zg===", "Z=g=", "Zg=", "=="] {
            assert!(base64_decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spec_examples_decode_by_family_rule() {
        let cases = [
            ("AAAAAAAAAAAAAP//rBBkAw==", "172.16.100.3"),
            ("AAAAAAAAAAAAAP//rBBkBQ==", "172.16.100.5"),
            ("AAAAAAAAAAAAAP//AAAAAA==", "0.0.0.0"),
            ("AAAAAAAAAAAAAAAAAAAAAA==", "::"),
            ("rBBkAw==", "172.16.100.3"),
        ];
        for (b64, text) in cases {
            let ip: IpAddress = serde_json::from_value(serde_json::json!(b64)).unwrap();
            assert_eq!(ip.to_ip().unwrap(), text.parse::<IpAddr>().unwrap(), "{b64}");
        }
        let v4: IpAddr = "172.16.100.3".parse().unwrap();
        assert_eq!(
            base64_encode(&IpAddress::from_ip(v4).0),
            "AAAAAAAAAAAAAP//rBBkAw=="
        );
        assert_eq!(bytes_to_ip(&[1, 2, 3]), Err(IpError::Length(3)));
        assert_eq!(bytes_to_ip(&[]), Err(IpError::Empty));
    }

    #[test]
    fn ipnet_prefix_rules() {
        let v4 = |p| IpNetWire {
            ip: IpAddress::from_ip("10.1.2.3".parse().unwrap()),
            prefix_length: p,
        };
        assert_eq!(v4(8).to_net().unwrap(), "10.0.0.0/8".parse::<IpNet>().unwrap());
        assert_eq!(v4(0).to_net().unwrap(), "0.0.0.0/0".parse::<IpNet>().unwrap());
        assert!(matches!(v4(33).to_net(), Err(IpError::Prefix { max: 32, .. })));
        assert!(matches!(v4(-1).to_net(), Err(IpError::Prefix { .. })));
        let v6 = IpNetWire {
            ip: IpAddress::from_ip("fd00::1".parse().unwrap()),
            prefix_length: 128,
        };
        assert_eq!(v6.to_net().unwrap(), "fd00::1/128".parse::<IpNet>().unwrap());
        assert!(IpNetWire::default().to_net().is_err());
    }

    #[test]
    fn ipnet_json_omits_zero_prefix_and_accepts_text() {
        let any: IpNetWire = serde_json::from_str(r#"{"ip":"AAAAAAAAAAAAAP//AAAAAA=="}"#).unwrap();
        assert_eq!(any.prefix_length, 0);
        assert_eq!(
            serde_json::to_string(&any).unwrap(),
            r#"{"ip":"AAAAAAAAAAAAAP//AAAAAA=="}"#
        );
        let text: IpNetWire = serde_json::from_str(r#""10.0.0.0/8""#).unwrap();
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            serde_json::json!({"ip": "AAAAAAAAAAAAAP//CgAAAA==", "prefixLength": 8})
        );
        let host: IpNetWire = serde_json::from_str(r#"{"ip":"fd00::1","prefixLength":64}"#).unwrap();
        assert_eq!(host.to_net().unwrap(), "fd00::/64".parse::<IpNet>().unwrap());
        assert!(serde_json::from_str::<IpNetWire>(r#"{"ip":"10.0.0.300"}"#).is_err());
        assert!(serde_json::from_str::<IpNetWire>(r#"{"ip":"%%%"}"#).is_err());
    }
}
