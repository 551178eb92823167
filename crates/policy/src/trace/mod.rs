//! `antrea-vm-agent trace`, the pure part: "why is this connection dropped?" answered from the
//! live bridge. The agent runs one packet through ovs-vswitchd's `ofproto/trace` and hands the
//! text here; nothing here does I/O.
//!
//! * [`packet`]: the packet to follow (direction, local and peer address, protocol, ports, the
//!   OpenFlow port it enters by) and the flow text `ofproto/trace` takes for it.
//! * [`parse`]: the text `ofproto/trace` answers, as the tables it went through (one pass per
//!   conntrack recirculation), the datapath actions and the ports it left by.
//! * [`attribute`]: the verdict OVS reached (allowed, dropped, rejected) and what decided it: the
//!   policy rule (from the conjunction id of the rule table's action flow, looked up in the
//!   compiler's [`crate::compiler::ConjunctionMap`]), a Pass to the baseline tier, a
//!   `policyBypassRules` entry, conntrack's invalid state, or no rule at all (allowed by
//!   default: Antrea-native policies do not isolate what they apply to).
//!
//! The trace follows the first packet of a new connection: every conntrack recirculation resumes
//! with `ct_state=trk|new` (OVS's default, named on the command line as `--ct-next trk,new`),
//! which is what conntrack reports for a packet of no known connection. Packets of established
//! connections skip the rule tables (`AntreaPolicy*Rule` priority 64990), so the rules only ever
//! decide the first packet.

pub mod attribute;
pub mod packet;
pub mod parse;

pub use attribute::{attribute, Reason, RuleRef, TraceAnswer, TraceStepView, Verdict};
pub use packet::{PacketError, TraceDirection, TracePacket, TraceProtocol};
pub use parse::{parse_trace, ParsedTrace, TraceParseError, TraceStep};
