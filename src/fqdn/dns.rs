//! DNS responses in intercepted frames: the transport payload of a packet-in (UDP, or TCP with
//! reassembly of a response split across segments) and the addresses a response gives for each
//! name, CNAME chains followed. Pure; DNS parsing is `hickory-proto`'s, frame parsing
//! `etherparse`'s (through [`crate::packetin::packet`]), both bounds-checked.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use etherparse::{IpSlice, TcpSlice};
use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::RData;

use crate::packetin::packet::{self, proto, Fragment};
use crate::policy::fqdn_selector::normalize;

/// Why an intercepted frame yields no DNS response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("frame: {0}")]
    Frame(#[from] packet::PacketError),
    #[error("IP fragment (DNS responses are not reassembled from IP fragments)")]
    Fragment,
    #[error("not UDP or TCP (IP protocol {0})")]
    Protocol(u8),
    #[error("malformed {0} header: {1}")]
    Transport(&'static str, String),
    #[error("malformed DNS message: {0}")]
    Message(String),
    #[error("DNS message is a query, not a response")]
    NotResponse,
    #[error("truncated packet-in ({got} of {total} bytes)")]
    Truncated { got: usize, total: usize },
}

/// The TCP connection a segment belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// The DNS bytes an intercepted frame carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// One whole DNS message, and the port it goes to.
    Udp { data: &'a [u8], dst_port: u16 },
    /// A TCP segment of a DNS stream (length-prefixed messages, RFC 1035 §4.2.2).
    Tcp {
        key: FlowKey,
        seq: u32,
        data: &'a [u8],
        /// FIN or RST: the stream ends after this segment.
        end: bool,
    },
}

/// Extracts the DNS payload of an Ethernet frame.
pub fn payload(frame: &[u8]) -> Result<Payload<'_>, DnsError> {
    let p = packet::parse(frame)?;
    if p.fragment != Fragment::Unfragmented {
        return Err(DnsError::Fragment);
    }
    let ip = IpSlice::from_slice(p.ip).map_err(|e| DnsError::Transport("IP", e.to_string()))?;
    let l4 = ip.payload().payload;
    match p.protocol {
        proto::UDP => {
            if l4.len() < 8 {
                return Err(DnsError::Transport("UDP", format!("{} bytes", l4.len())));
            }
            let len = usize::from(u16::from_be_bytes([l4[4], l4[5]]));
            if len < 8 || len > l4.len() {
                return Err(DnsError::Transport(
                    "UDP",
                    format!("length {len} of {} bytes", l4.len()),
                ));
            }
            Ok(Payload::Udp {
                data: &l4[8..len],
                dst_port: u16::from_be_bytes([l4[2], l4[3]]),
            })
        }
        proto::TCP => {
            let tcp = TcpSlice::from_slice(l4).map_err(|e| DnsError::Transport("TCP", e.to_string()))?;
            Ok(Payload::Tcp {
                key: FlowKey {
                    src: p.src_ip,
                    dst: p.dst_ip,
                    src_port: tcp.source_port(),
                    dst_port: tcp.destination_port(),
                },
                seq: tcp.sequence_number(),
                data: tcp.payload(),
                end: tcp.fin() || tcp.rst(),
            })
        }
        other => Err(DnsError::Protocol(other)),
    }
}

/// One address a response gives for a name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Answer {
    /// Normalized (lower case, no trailing dot).
    pub name: String,
    pub ip: IpAddr,
    /// Seconds: the smallest TTL along the CNAME chain that led to the address.
    pub ttl: u32,
}

/// Parses a DNS response and returns, for the question names and every alias on their CNAME
/// chains, the A and AAAA addresses the answer section gives. Records that do not hang off a
/// question are ignored (a resolver has no business answering for names not asked about).
pub fn answers(message: &[u8]) -> Result<Vec<Answer>, DnsError> {
    let msg = Message::from_vec(message).map_err(|e| DnsError::Message(e.to_string()))?;
    if msg.metadata.message_type != MessageType::Response {
        return Err(DnsError::NotResponse);
    }
    let mut cnames: BTreeMap<String, (String, u32)> = BTreeMap::new();
    let mut addrs: BTreeMap<String, Vec<(IpAddr, u32)>> = BTreeMap::new();
    for r in &msg.answers {
        let owner = normalize(&r.name.to_ascii());
        match &r.data {
            RData::A(a) => addrs.entry(owner).or_default().push((IpAddr::V4(a.0), r.ttl)),
            RData::AAAA(a) => addrs.entry(owner).or_default().push((IpAddr::V6(a.0), r.ttl)),
            RData::CNAME(c) => {
                cnames.insert(owner, (normalize(&c.0.to_ascii()), r.ttl));
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for q in &msg.queries {
        // Walk the chain: every name on it gets the addresses at its end. A loop or an overly
        // long chain stops the walk (bounded by the number of CNAME records).
        let mut chain = vec![normalize(&q.name.to_ascii())];
        let mut ttl = u32::MAX;
        let mut current = chain[0].clone();
        for _ in 0..=cnames.len() {
            if let Some(ips_of) = addrs.get(&current) {
                for &(ip, t) in ips_of {
                    for name in &chain {
                        out.insert(Answer {
                            name: name.clone(),
                            ip,
                            ttl: t.min(ttl),
                        });
                    }
                }
            }
            match cnames.get(&current) {
                Some((next, t)) if !chain.contains(next) => {
                    ttl = ttl.min(*t);
                    chain.push(next.clone());
                    current = next.clone();
                }
                _ => break,
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Bounds of the TCP reassembly state.
const MAX_TCP_STREAMS: usize = 1024;
const MAX_TCP_BUFFER: usize = 65_537;

/// Reassembles DNS-over-TCP streams from intercepted segments. A stream is kept from its first
/// data segment until its messages are complete; an out-of-order segment, a gap, or a stream
/// over the bounds is dropped (its segments pass through unparsed, counted by the caller).
#[derive(Debug, Default)]
pub struct TcpReassembly {
    streams: BTreeMap<FlowKey, Stream>,
    /// Insertion order, to drop the oldest stream when full.
    order: std::collections::VecDeque<FlowKey>,
}

#[derive(Debug, Default)]
struct Stream {
    next_seq: u32,
    buffer: Vec<u8>,
}

/// What one segment gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Complete DNS messages this segment finished.
    pub messages: Vec<Vec<u8>>,
    /// The segment did not fit the stream (gap, overlap, bound): the stream was dropped.
    pub dropped: bool,
}

impl TcpReassembly {
    pub fn new() -> Self {
        Self::default()
    }

    /// Streams held right now.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Feeds one segment.
    pub fn push(&mut self, key: FlowKey, seq: u32, data: &[u8], end: bool) -> Segment {
        let mut out = Segment::default();
        if data.is_empty() {
            if end {
                self.remove(&key);
            }
            return out;
        }
        let stream = match self.streams.get_mut(&key) {
            Some(s) if s.next_seq == seq => s,
            Some(s) if seq_before(seq, s.next_seq) => {
                // A retransmission of data already seen: nothing new.
                return out;
            }
            Some(_) => {
                self.remove(&key);
                out.dropped = true;
                return out;
            }
            None => {
                if self.streams.len() >= MAX_TCP_STREAMS {
                    if let Some(old) = self.order.pop_front() {
                        self.streams.remove(&old);
                    }
                }
                self.order.push_back(key);
                self.streams.entry(key).or_insert(Stream {
                    next_seq: seq,
                    buffer: Vec::new(),
                })
            }
        };
        stream.buffer.extend_from_slice(data);
        stream.next_seq = seq.wrapping_add(data.len() as u32);
        loop {
            let b = &stream.buffer;
            if b.len() < 2 {
                break;
            }
            let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
            if b.len() < 2 + len {
                break;
            }
            out.messages.push(b[2..2 + len].to_vec());
            stream.buffer.drain(..2 + len);
        }
        let too_big = stream.buffer.len() > MAX_TCP_BUFFER;
        let done = stream.buffer.is_empty();
        if too_big {
            self.remove(&key);
            out.dropped = true;
        } else if end || done {
            // A complete message ends the state: the next one starts a fresh stream at its seq.
            self.remove(&key);
        }
        out
    }

    fn remove(&mut self, key: &FlowKey) {
        if self.streams.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

fn seq_before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

#[cfg(test)]
pub(crate) mod tests;
