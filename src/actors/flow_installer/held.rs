//! The switch's flows as a take-over sees them, held compactly while the desired flows are
//! checked against them: per flow only its identity packed as OVS itself keys a flow (table,
//! priority and the encoded match) and a 128-bit digest of the rest (cookie without the round,
//! timeouts, encoded instructions), both made by the codec (`ovs::openflow::packed`), so this
//! file sees an opaque key and never the bytes. That is about a tenth of a decoded flow, so a
//! restart over 150,000 installed flows does not hold them all decoded. Desired flows leave the
//! set as they are checked; what is left at the end is what the switch holds and nobody wants.

use std::collections::HashMap;

use crate::ovs::openflow::actions::normalize_actions;
use crate::ovs::openflow::packed::{content_digest, PackedFlowKey};
use crate::ovs::openflow::{normalize_flow, Action, Flow, FlowKey};
use crate::policy::flowset::{self, FlowSet};
use crate::policy::pipeline::fields::ROUND_MASK;

/// The switch's flows, keyed by identity.
#[derive(Default)]
pub(super) struct HeldFlows {
    /// Packed identity → digest of the rest. Keyed with foldhash (randomly seeded per process)
    /// rather than SipHash: every flow of the switch is hashed two or three times (insert,
    /// growth, lookup), and a collision here costs only a probe, never a wrong answer (the
    /// content digest stays SipHash).
    packed: HashMap<PackedFlowKey, u128, foldhash::fast::RandomState>,
    /// Flows the encoder refuses (none in practice: the switch sent them, the decoder read
    /// them), kept whole so they are still compared exactly.
    whole: FlowSet,
}

/// The digest of everything but `f`'s identity and round, with `actions` for its own.
fn content_hash(f: &Flow, actions: &[Action]) -> Option<u128> {
    content_digest(f, actions, !ROUND_MASK)
}

impl HeldFlows {
    /// Adds one flow of the switch's dump (put in the form the desired flows are compared in).
    pub(super) fn insert(&mut self, flow: Flow) {
        let flow = normalize_flow(&flow);
        match (PackedFlowKey::of(&flow), content_hash(&flow, &flow.actions)) {
            // Kept packed only if the key unpacks to the same flow: a leftover must be
            // deletable, or a stale (e.g. Allow) flow would silently stay.
            (Some(id), Some(hash)) if id.unpack().is_some_and(|f| f.key() == flow.key()) => {
                self.packed.insert(id, hash);
            }
            _ => {
                self.whole.insert(flow.key(), flow);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.packed.len() + self.whole.len()
    }

    /// Takes the held flow with `flow`'s identity out of the set; whether it was the same as
    /// `flow` apart from the round in its cookie (then nothing needs to be sent for it).
    pub(super) fn take_same(&mut self, flow: &Flow) -> bool {
        // Compared in the form the dump was put in: the compiler's matches already are, its
        // actions may not be (a needless re-add would reset the flow's counters).
        let actions = normalize_actions(&flow.actions);
        if let (Some(id), Some(hash)) = (PackedFlowKey::of(flow), content_hash(flow, &actions)) {
            if let Some(have) = self.packed.remove(&id) {
                return have == hash;
            }
        }
        match self.whole.remove(&flow.key()) {
            Some(have) => flowset::same_but_round(&have, &normalize_flow(flow)),
            None => false,
        }
    }

    /// Up to `max` of the flows left, taken out of the set, with their identity only (what a
    /// DELETE_STRICT needs).
    pub(super) fn take_leftovers(&mut self, max: usize) -> Vec<Flow> {
        let mut out: Vec<Flow> = Vec::new();
        let ids: Vec<PackedFlowKey> = self.packed.keys().take(max).cloned().collect();
        for id in ids {
            self.packed.remove(&id);
            if let Some(flow) = id.unpack() {
                out.push(flow);
            }
        }
        while out.len() < max {
            let Some((
                FlowKey {
                    table,
                    priority,
                    matches,
                },
                _,
            )) = self.whole.pop_first()
            else {
                break;
            };
            out.push(Flow::new(table, priority, matches));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovs::openflow::{Action, Match};

    fn flow(priority: u16, port: u32, out: u32, cookie: u64) -> Flow {
        let mut m = Match::new();
        m.in_port = Some(port);
        let mut f = Flow::new(3, priority, m);
        f.cookie = cookie;
        f.actions = vec![Action::Output(out)];
        f
    }

    #[test]
    fn same_apart_from_the_round_is_kept_and_a_change_is_not() {
        let mut held = HeldFlows::default();
        let round = ROUND_MASK & ROUND_MASK.wrapping_neg(); // lowest bit of the round field
        held.insert(flow(10, 1, 2, 0x77 << 32 | round));
        held.insert(flow(10, 2, 2, 0));
        held.insert(flow(11, 1, 2, 0));
        assert_eq!(held.len(), 3);
        // Same apart from the round.
        assert!(held.take_same(&flow(10, 1, 2, 0x77 << 32 | round.wrapping_shl(1) & ROUND_MASK)));
        // Same identity, other output.
        assert!(!held.take_same(&flow(10, 2, 3, 0)));
        // Not held at all.
        assert!(!held.take_same(&flow(12, 1, 2, 0)));
        assert_eq!(held.len(), 1);
        let left = held.take_leftovers(10);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].key(), flow(11, 1, 2, 0).key());
        assert_eq!(held.len(), 0);
    }

    #[test]
    fn leftovers_come_out_in_bounded_batches_with_their_identity() {
        let mut held = HeldFlows::default();
        for p in 0..10 {
            held.insert(flow(100 + p, 7, 1, 0));
        }
        let mut keys: Vec<FlowKey> = Vec::new();
        loop {
            let batch = held.take_leftovers(4);
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= 4);
            keys.extend(batch.iter().map(Flow::key));
        }
        keys.sort();
        let want: Vec<FlowKey> = (0..10).map(|p| flow(100 + p, 7, 1, 0).key()).collect();
        assert_eq!(keys, want);
    }
}
