//! Packet-in handling for NetworkPolicy: the audit log (`np.log`) and Reject replies (pipeline
//! reference §9, runtime reference §4.10-4.11).
//!
//! | file | what it owns |
//! |---|---|
//! | `packet.rs` | parsing the frame of a packet-in (Ethernet, VLAN tags, IPv4/IPv6, TCP/UDP/ICMP) |
//! | `meta.rs` | what the pipeline tells in a NetworkPolicy packet-in: userdata, registers, table |
//! | `reject.rs` | the Reject reply (TCP RST or ICMP/ICMPv6 unreachable) and where it leaves the bridge |
//! | `audit.rs` | the audit log line, its deduplication, and the `np.log` writer |
//! | `rotate.rs` | size-based rotation of `np.log` (lumberjack's rules: backups, age, gzip) |
//! | `responder.rs` | the loop that consumes a connection's packet-ins and does both |
//! | `lab_tests.rs` | tests against a real ovs-vswitchd and real peers in network namespaces |
//!
//! Everything but `responder.rs` and the file side of `audit.rs`/`rotate.rs` is pure.

pub mod audit;
#[cfg(test)]
#[cfg(feature = "lab")]
mod lab_tests;
pub mod meta;
pub mod packet;
pub mod reject;
pub mod responder;
pub mod rotate;

pub use audit::{AuditError, AuditLog, AuditRecord};
pub use meta::NpPacketIn;
pub use packet::{PacketError, ParsedPacket};
pub use reject::{build_reject, RejectError, RejectOutcome};
pub use responder::{run, serve, serve_own_connection, PacketInContext, PacketInCounts, PacketInStats};
