//! What a NetworkPolicy packet-in says besides the packet: the controller action's userdata
//! (category, operations) and the registers the rule flows loaded (pipeline reference §3.1-3.4,
//! §9.2). Pure.

use crate::ovs::openflow::PacketIn;
use crate::policy::pipeline::fields::{category, operation, reg, reg0, reg2};
use crate::policy::pipeline::table;
use crate::policy::rule::{is_egress_table, Direction};

/// A rule's disposition as the pipeline records it in reg0[11..12].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Disposition {
    Allow,
    Drop,
    Reject,
    Pass,
}

impl Disposition {
    /// From the 2-bit field value.
    pub fn from_bits(bits: u32) -> Self {
        match bits & (reg0::DISPOSITION_MASK >> reg0::DISPOSITION_SHIFT) {
            reg0::DISPOSITION_ALLOW => Disposition::Allow,
            reg0::DISPOSITION_DROP => Disposition::Drop,
            reg0::DISPOSITION_REJECT => Disposition::Reject,
            _ => Disposition::Pass,
        }
    }

    /// Antrea's `DispositionToString`.
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Allow => "Allow",
            Disposition::Drop => "Drop",
            Disposition::Reject => "Reject",
            Disposition::Pass => "Pass",
        }
    }
}

/// The NetworkPolicy facts of a packet-in (category 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpPacketIn {
    /// [`operation`] bits.
    pub operations: u8,
    /// The rule table that sent the packet: reg2[0..7] if set, else the packet-in's table.
    pub table_id: u8,
    pub disposition: Disposition,
    /// APDenyRegMark: a Drop/Reject rule matched.
    pub ap_deny: bool,
    /// The port the packet entered the bridge on.
    pub in_port: Option<u32>,
    /// reg1: the output port L2ForwardingCalc chose.
    pub target_port: Option<u32>,
    /// reg3: conjunction id of the matched Drop/Reject rule.
    pub deny_conj: Option<u32>,
    /// reg5: conjunction id of the matched egress Allow/Pass rule.
    pub egress_conj: Option<u32>,
    /// reg6: conjunction id of the matched ingress Allow/Pass rule.
    pub ingress_conj: Option<u32>,
}

fn reg_value(pi: &PacketIn, idx: u8) -> Option<u32> {
    pi.metadata
        .regs
        .get(&idx)
        .map(|m| m.value & m.mask.unwrap_or(u32::MAX))
        .filter(|&v| v != 0)
}

impl NpPacketIn {
    /// The NetworkPolicy view of `pi`; `None` unless its userdata is `[1, operations, ..]`.
    pub fn from_packet_in(pi: &PacketIn) -> Option<Self> {
        let (&cat, &ops) = (pi.userdata.first()?, pi.userdata.get(1)?);
        if cat != category::NETWORK_POLICY {
            return None;
        }
        let r0 = reg_value(pi, reg::MARKS).unwrap_or(0);
        let table_id = reg_value(pi, reg::PACKET_IN_TABLE)
            .map(|v| (v & reg2::PACKET_IN_TABLE_MASK) as u8)
            .filter(|&t| t != 0)
            .unwrap_or(pi.table_id);
        Some(NpPacketIn {
            operations: ops,
            table_id,
            disposition: Disposition::from_bits((r0 & reg0::DISPOSITION_MASK) >> reg0::DISPOSITION_SHIFT),
            ap_deny: r0 & reg0::AP_DENY.1 != 0,
            in_port: pi.metadata.in_port,
            target_port: reg_value(pi, reg::TARGET_PORT),
            deny_conj: reg_value(pi, reg::DENY_CONJ),
            egress_conj: reg_value(pi, reg::EGRESS_CONJ),
            ingress_conj: reg_value(pi, reg::INGRESS_CONJ),
        })
    }

    pub fn wants_logging(&self) -> bool {
        self.operations & operation::LOGGING != 0
    }

    pub fn wants_reject(&self) -> bool {
        self.operations & operation::REJECT != 0
    }

    /// The rule's direction, from the table that sent the packet (`None` for any other table).
    pub fn direction(&self) -> Option<Direction> {
        match self.table_id {
            t if is_egress_table(t) => Some(Direction::Out),
            table::ANTREA_POLICY_INGRESS_RULE | table::INGRESS_RULE | table::INGRESS_DEFAULT_RULE => {
                Some(Direction::In)
            }
            _ => None,
        }
    }

    /// Whether the packet was denied (Drop/Reject) by a rule: the rule id is then in reg3.
    pub fn denied(&self) -> bool {
        self.ap_deny || matches!(self.disposition, Disposition::Drop | Disposition::Reject)
    }

    /// The conjunction id of the rule that sent the packet: reg3 for a denied packet, else reg5
    /// (egress table) or reg6 (ingress table).
    pub fn conj_id(&self) -> Option<u32> {
        if self.denied() {
            return self.deny_conj;
        }
        match self.direction() {
            Some(Direction::Out) => self.egress_conj,
            Some(Direction::In) => self.ingress_conj,
            None => None,
        }
    }
}

/// The reg0 bits a NetworkPolicy packet-in flow matched on (for tests that build packet-ins).
pub fn output_to_controller_reg0(ops: u8) -> u32 {
    reg0::OUTPUT_TO_CONTROLLER.0 | (u32::from(ops) << reg0::PACKET_IN_OPERATION_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovs::openflow::{Masked, Match};

    fn pi(userdata: Vec<u8>, regs: &[(u8, u32)]) -> PacketIn {
        let mut metadata = Match::new().in_port(21);
        for &(i, v) in regs {
            metadata.regs.insert(i, Masked::exact(v));
        }
        PacketIn {
            packet: vec![],
            total_len: 0,
            buffer_id: None,
            table_id: table::OUTPUT,
            cookie: u64::MAX,
            reason: 1,
            metadata,
            other_metadata: vec![],
            userdata,
            continuation: None,
            metadata_raw: vec![],
        }
    }

    #[test]
    fn reject_of_an_ingress_rule_g17() {
        // G17: set_field:0x2->reg3, 0x400/0x400->reg0, op 2, reg2=0xa, then group 4 → Output.
        let r0 = 0x400 | output_to_controller_reg0(operation::REJECT);
        let p = pi(vec![1, 2], &[(0, r0), (1, 20), (2, 0xa), (3, 2)]);
        let np = NpPacketIn::from_packet_in(&p).expect("np");
        assert!(np.wants_reject() && !np.wants_logging());
        assert_eq!(np.table_id, table::ANTREA_POLICY_INGRESS_RULE);
        assert_eq!(np.direction(), Some(Direction::In));
        // Plain Reject does not load the disposition (quirk 4): it reads as Allow.
        assert_eq!(np.disposition, Disposition::Allow);
        assert!(np.denied());
        assert_eq!(np.conj_id(), Some(2));
        assert_eq!(np.in_port, Some(21));
        assert_eq!(np.target_port, Some(20));
    }

    #[test]
    fn allow_with_logging_uses_the_direction_register() {
        let p = pi(
            vec![1, 1],
            &[(0, output_to_controller_reg0(1)), (2, 4), (5, 9), (6, 7)],
        );
        let np = NpPacketIn::from_packet_in(&p).expect("np");
        assert_eq!(np.direction(), Some(Direction::Out));
        assert_eq!(np.conj_id(), Some(9));
        let p = pi(vec![1, 1], &[(2, u32::from(table::INGRESS_DEFAULT_RULE)), (6, 7)]);
        assert_eq!(NpPacketIn::from_packet_in(&p).and_then(|n| n.conj_id()), Some(7));
        let drop = pi(vec![1, 1], &[(0, 0x800), (2, 11), (3, 5), (6, 7)]);
        let np = NpPacketIn::from_packet_in(&drop).expect("np");
        assert_eq!(np.disposition, Disposition::Drop);
        assert_eq!(np.conj_id(), Some(5));
    }

    #[test]
    fn other_categories_and_short_userdata_are_not_np() {
        assert!(NpPacketIn::from_packet_in(&pi(vec![2, 1], &[])).is_none());
        assert!(NpPacketIn::from_packet_in(&pi(vec![1], &[])).is_none());
        assert!(NpPacketIn::from_packet_in(&pi(vec![], &[])).is_none());
        // Without reg2 the packet-in's own table is used.
        let np = NpPacketIn::from_packet_in(&pi(vec![1, 3], &[])).expect("np");
        assert_eq!(np.table_id, table::OUTPUT);
        assert_eq!(np.direction(), None);
        assert_eq!(Disposition::from_bits(3).as_str(), "Pass");
    }
}
