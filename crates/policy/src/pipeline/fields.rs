//! The pipeline's fields: every register the flows load and match, each bit range and mark value
//! in them, the `ct_label` words, the packet-in userdata and the cookie layout. The one place these
//! numbers are written; the init flows (`pipeline`), the rule compiler, the packet-in side
//! (`packetin::meta`, `reject`), the rule counters and `get ovsflows --policy` name them from here.
//! The values are Antrea's (pipeline reference §3.1-3.4, §9.2), so the flows stay byte-identical to
//! what the compiler's golden tests pin.
//!
//! | field | where | values | loaded by | read by |
//! |---|---|---|---|---|
//! | round | cookie[48..63] | the installer's round (never 0) | every flow ([`cookie`]) | take-over and stale-flow deletes ([`ROUND_MASK`]); round 0 = not the installer's |
//! | category | cookie[40..47] | [`CookieCategory`]: Default 0, NetworkPolicy 2, ExternalNodeConnectivity 8 | every flow | rule counters' dump filter ([`CATEGORY_MASK`]) |
//! | reserved | cookie[32..39] | [`FQDN_COOKIE_TAG`] 0xf0 on the FQDN clause flows | FQDN controller ([`FQDN_COOKIE`]) | FQDN controller |
//! | object id | cookie[0..31] | always 0 | — | — |
//! | APDenyRegMark | `reg0[10]` | [`reg0::AP_DENY`] 0x400 | Drop/Reject action flows | deny metric flows, packet-ins |
//! | APDispositionField | reg0[11..12] | [`reg0::DISPOSITION_ALLOW`] 0 … [`reg0::DISPOSITION_PASS`] 3 | logging rules' action flows | packet-ins (audit log) |
//! | GeneratedRejectPacketOutRegMark | `reg0[13]` | [`reg0::GENERATED_REJECT_PACKET_OUT`] 0x2000 | Reject packet-outs | no flow (as upstream) |
//! | OutputRegField | reg0[21..22] | [`reg0::OUTPUT_TO_PORT`] 1, [`reg0::OUTPUT_TO_CONTROLLER`] 2 | cross-connect flows, logging groups and rules | `Output` |
//! | PacketInOperationField | reg0[25..31] | [`operation`] bits: logging 1, reject 2, store-deny 4 | logging and Reject rules | `Output` packet-in flows (userdata byte 1) |
//! | target port | reg1 (whole) | the OpenFlow port `L2ForwardingCalc` chose | cross-connect flows | `Output` (`output:reg1`), rule clauses on local ports, DNS interception, packet-ins |
//! | PacketInTableField | reg2[0..7] | the rule table that sent the packet | logging and Reject rules | packet-ins |
//! | deny conjunction | reg3 (whole) | a Drop/Reject rule's conjunction id | Drop/Reject action flows | deny metric flows, packet-ins, `get ovsflows --policy` |
//! | egress conjunction | reg5 (whole) | an egress Allow/Pass rule's conjunction id | egress Allow/Pass action flows | packet-ins |
//! | ingress conjunction | reg6 (whole) | an ingress Allow/Pass rule's conjunction id | ingress Allow/Pass action flows | packet-ins |
//! | ingress rule | ct_label[0..31] | an ingress Allow rule's conjunction id | `ct(commit)` of ingress Allow rules | `IngressMetric`, `get ovsflows --policy` |
//! | egress rule | ct_label[32..63] | an egress Allow rule's conjunction id | `ct(commit)` of egress Allow rules | `EgressMetric`, `get ovsflows --policy` |
//! | category | packet-in userdata byte 0 | [`category`]: NetworkPolicy 1, DNS 2, … | `controller(...)` actions | packet-in responder, FQDN controller |
//! | operations | packet-in userdata byte 1 | [`operation`] bits | `Output` packet-in flows | packet-in responder |

/// The registers, by number.
pub mod reg {
    /// reg0: marks and small fields ([`super::reg0`]).
    pub const MARKS: u8 = 0;
    /// reg1: the output port chosen by `L2ForwardingCalc` (TargetOFPortField).
    pub const TARGET_PORT: u8 = 1;
    /// reg2: the rule table that sent a packet to the controller ([`super::reg2`]).
    pub const PACKET_IN_TABLE: u8 = 2;
    /// reg3: the conjunction id of the Drop/Reject rule that matched.
    pub const DENY_CONJ: u8 = 3;
    /// reg5: the conjunction id of the egress Allow/Pass rule that matched.
    pub const EGRESS_CONJ: u8 = 5;
    /// reg6: the conjunction id of the ingress Allow/Pass rule that matched.
    pub const INGRESS_CONJ: u8 = 6;
}

/// reg0's marks and fields, as `(value, mask)` or mask and shift.
pub mod reg0 {
    /// APDenyRegMark, `reg0[10]`: a Drop/Reject rule matched.
    pub const AP_DENY: (u32, u32) = (0x400, 0x400);
    /// APDispositionField, reg0[11..12]: what the rule that sent a packet-in decided.
    pub const DISPOSITION_MASK: u32 = 0x1800;
    pub const DISPOSITION_SHIFT: u32 = 11;
    pub const DISPOSITION_ALLOW: u32 = 0b00;
    pub const DISPOSITION_DROP: u32 = 0b01;
    pub const DISPOSITION_REJECT: u32 = 0b10;
    pub const DISPOSITION_PASS: u32 = 0b11;
    /// GeneratedRejectPacketOutRegMark, `reg0[13]`: loaded by a Reject reply's packet-out.
    pub const GENERATED_REJECT_PACKET_OUT: (u32, u32) = (0x2000, 0x2000);
    /// OutputRegField reg0[21..22]: 1 = output to the port in reg1.
    pub const OUTPUT_TO_PORT: (u32, u32) = (0x20_0000, 0x60_0000);
    /// OutputRegField reg0[21..22]: 2 = send to the controller.
    pub const OUTPUT_TO_CONTROLLER: (u32, u32) = (0x40_0000, 0x60_0000);
    /// PacketInOperationField reg0[25..31]: the [`super::operation`] bits.
    pub const PACKET_IN_OPERATION_MASK: u32 = 0xfe00_0000;
    pub const PACKET_IN_OPERATION_SHIFT: u32 = 25;
}

/// reg2's field.
pub mod reg2 {
    /// PacketInTableField, reg2[0..7].
    pub const PACKET_IN_TABLE_MASK: u32 = 0xff;
}

/// The `ct_label` words holding the conjunction id of the Allow rule that committed a
/// connection: ingress in bits 0..31, egress in bits 32..63.
pub mod ct_label {
    pub const INGRESS_SHIFT: u32 = 0;
    pub const INGRESS_MASK: u128 = 0xffff_ffff;
    pub const EGRESS_SHIFT: u32 = 32;
    pub const EGRESS_MASK: u128 = 0xffff_ffff << 32;
}

/// Packet-in categories (userdata byte 0).
pub mod category {
    pub const TRACEFLOW: u8 = 0;
    pub const NETWORK_POLICY: u8 = 1;
    pub const DNS: u8 = 2;
    pub const IGMP: u8 = 3;
    pub const SVC_REJECT: u8 = 4;
}

/// NetworkPolicy packet-in operations (userdata byte 1 and reg0[25..31], bit flags).
pub mod operation {
    pub const LOGGING: u8 = 0b1;
    pub const REJECT: u8 = 0b10;
    pub const STORE_DENY: u8 = 0b100;
}

/// Cookie categories (bits 40..47 of the cookie).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum CookieCategory {
    Default = 0,
    NetworkPolicy = 2,
    ExternalNodeConnectivity = 8,
}

const ROUND_SHIFT: u32 = 48;
const CATEGORY_SHIFT: u32 = 40;
const RESERVED_SHIFT: u32 = 32;

/// Mask selecting the round number in a cookie.
pub const ROUND_MASK: u64 = 0xffff_0000_0000_0000;
/// Bits of a cookie holding the category (Antrea's `CategoryMask`).
pub const CATEGORY_MASK: u64 = 0x0000_ff00_0000_0000;

/// Antrea's cookie layout: round (16 bits) | category (8) | reserved (8) | object id (32).
pub fn cookie(round: u16, category: CookieCategory) -> u64 {
    (u64::from(round) << ROUND_SHIFT) | (u64::from(category as u8) << CATEGORY_SHIFT)
}

/// The cookie value that selects every flow of `round` under [`ROUND_MASK`].
pub fn round_cookie(round: u16) -> u64 {
    u64::from(round) << ROUND_SHIFT
}

/// Cookie of the FQDN clause flows the DNS path adds: category NetworkPolicy, reserved byte
/// [`FQDN_COOKIE_TAG`], round 0. The flow installer's take-over and the rule statistics skip
/// round-0 flows, so these flows belong to the FQDN controller alone, whatever round the
/// installer is in.
pub const FQDN_COOKIE_TAG: u8 = 0xf0;
pub const FQDN_COOKIE: u64 =
    ((CookieCategory::NetworkPolicy as u64) << CATEGORY_SHIFT) | ((FQDN_COOKIE_TAG as u64) << RESERVED_SHIFT);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masks_cover_their_fields_and_do_not_overlap() {
        assert_eq!(ROUND_MASK, 0xffff << ROUND_SHIFT);
        assert_eq!(CATEGORY_MASK, 0xff << CATEGORY_SHIFT);
        assert_eq!(FQDN_COOKIE & ROUND_MASK, 0);
        assert_eq!(
            FQDN_COOKIE & CATEGORY_MASK,
            cookie(0, CookieCategory::NetworkPolicy)
        );
        let reg0_fields = [
            reg0::AP_DENY.1,
            reg0::DISPOSITION_MASK,
            reg0::GENERATED_REJECT_PACKET_OUT.1,
            reg0::OUTPUT_TO_PORT.1,
            reg0::PACKET_IN_OPERATION_MASK,
        ];
        for (i, a) in reg0_fields.iter().enumerate() {
            for b in &reg0_fields[i + 1..] {
                assert_eq!(a & b, 0, "{a:#x} and {b:#x} overlap");
            }
        }
        assert_eq!(reg0::DISPOSITION_MASK >> reg0::DISPOSITION_SHIFT, 0b11);
        assert_eq!(
            reg0::PACKET_IN_OPERATION_MASK >> reg0::PACKET_IN_OPERATION_SHIFT,
            0x7f
        );
        assert_eq!(ct_label::INGRESS_MASK & ct_label::EGRESS_MASK, 0);
        assert_eq!(
            ct_label::EGRESS_MASK >> ct_label::EGRESS_SHIFT,
            ct_label::INGRESS_MASK
        );
    }
}
