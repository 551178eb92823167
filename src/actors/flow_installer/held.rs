//! The switch's flows as a take-over sees them, held compactly while the desired flows are
//! checked against them: per flow only its identity (table, priority and the encoded match, the
//! bytes OVS itself keys a flow by) and a 128-bit hash of the rest (cookie without the round,
//! timeouts, encoded instructions). That is about a tenth of a decoded flow, so a restart over
//! 150,000 installed flows does not hold them all decoded. Desired flows leave the set as they
//! are checked; what is left at the end is what the switch holds and nobody wants.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};

use crate::ovs::openflow::actions::{encode_instructions, normalize_actions};
use crate::ovs::openflow::oxm::{decode_match, encode_match};
use crate::ovs::openflow::wire::{Reader, Writer};
use crate::ovs::openflow::{normalize_flow, Flow, FlowKey};
use crate::policy::flowset::{self, FlowSet};
use crate::policy::pipeline::fields::ROUND_MASK;

/// The switch's flows, keyed by identity.
#[derive(Default)]
pub(super) struct HeldFlows {
    /// Encoded identity → hash of the rest. Keyed with foldhash (randomly seeded per process)
    /// rather than SipHash: every flow of the switch is hashed two or three times (insert,
    /// growth, lookup), and a collision here costs only a probe, never a wrong answer (the
    /// content hash below stays SipHash).
    encoded: HashMap<Box<[u8]>, u128, foldhash::fast::RandomState>,
    /// Flows the encoder refuses (none in practice: the switch sent them, the decoder read
    /// them), kept whole so they are still compared exactly.
    whole: FlowSet,
}

/// `[table, priority (2 bytes)]` + the encoded match.
fn identity(f: &Flow) -> Option<Box<[u8]>> {
    let mut w = Writer::new();
    w.u8(f.table);
    w.u16(f.priority);
    encode_match(&f.matches, &mut w).ok()?;
    Some(w.into_vec().into_boxed_slice())
}

/// Two 64-bit SipHashes (fixed keys, different prefixes) of everything but the identity and
/// the round, with `actions` for the flow's: an accidental false "same" needs a 128-bit
/// collision. Not keyed against crafted input: the switch's flows are the agent's own or its
/// operator's.
fn content_hash(f: &Flow, actions: &[crate::ovs::openflow::Action]) -> Option<u128> {
    let mut w = Writer::new();
    w.u64(f.cookie & !ROUND_MASK);
    w.u16(f.idle_timeout);
    w.u16(f.hard_timeout);
    encode_instructions(actions, f.goto_table, &mut w).ok()?;
    let bytes = w.into_vec();
    let half = |seed: u8| {
        let mut h = DefaultHasher::new();
        h.write_u8(seed);
        h.write(&bytes);
        h.finish()
    };
    Some((u128::from(half(1)) << 64) | u128::from(half(2)))
}

impl HeldFlows {
    /// Adds one flow of the switch's dump (put in the form the desired flows are compared in).
    pub(super) fn insert(&mut self, flow: Flow) {
        let flow = normalize_flow(&flow);
        match (identity(&flow), content_hash(&flow, &flow.actions)) {
            // Kept encoded only if the identity decodes back to the same flow: a leftover must
            // be deletable, or a stale (e.g. Allow) flow would silently stay.
            (Some(id), Some(hash)) if decode_identity(&id).is_some_and(|f| f.key() == flow.key()) => {
                self.encoded.insert(id, hash);
            }
            _ => {
                self.whole.insert(flow.key(), flow);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.encoded.len() + self.whole.len()
    }

    /// Takes the held flow with `flow`'s identity out of the set; whether it was the same as
    /// `flow` apart from the round in its cookie (then nothing needs to be sent for it).
    pub(super) fn take_same(&mut self, flow: &Flow) -> bool {
        // Compared in the form the dump was put in: the compiler's matches already are, its
        // actions may not be (a needless re-add would reset the flow's counters).
        let actions = normalize_actions(&flow.actions);
        if let (Some(id), Some(hash)) = (identity(flow), content_hash(flow, &actions)) {
            if let Some(have) = self.encoded.remove(&id) {
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
        let ids: Vec<Box<[u8]>> = self.encoded.keys().take(max).cloned().collect();
        for id in ids {
            self.encoded.remove(&id);
            if let Some(flow) = decode_identity(&id) {
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

/// The flow an encoded identity stands for (match, table and priority only). The bytes were
/// produced by [`identity`] from a decoded flow, so this cannot fail in practice.
fn decode_identity(id: &[u8]) -> Option<Flow> {
    let (head, rest) = id.split_at_checked(3)?;
    let matches = decode_match(&mut Reader::new(rest, "held flow")).ok()?;
    Some(Flow::new(
        head[0],
        u16::from_be_bytes([head[1], head[2]]),
        matches,
    ))
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
