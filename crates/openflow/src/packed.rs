//! Flows packed small, for a caller that holds many switch flows at once only to compare them
//! (the agent's take-over holds every flow of the switch while it checks the desired ones
//! against them): a flow's identity as the bytes OVS itself keys a flow by ([`PackedFlowKey`]:
//! table, priority, encoded match) and a 128-bit digest of the rest ([`content_digest`]: cookie,
//! timeouts, encoded instructions). Together about a tenth of a decoded [`Flow`]. The bytes stay
//! in here: the caller sees an opaque key it can hash, compare and unpack.

use std::hash::{DefaultHasher, Hasher};

use crate::actions::encode_instructions;
use crate::flow::{Action, Flow};
use crate::oxm::{decode_match, encode_match};
use crate::wire::{Reader, Writer};

/// A flow's identity, packed: `[table, priority (2 bytes, big-endian)]` + the encoded match.
/// For matches in the form OVS stores them (as [`crate::flow::normalize_flow`] leaves them), two
/// flows have equal keys exactly when OVS would take them for the same flow;
/// a caller that compares flows from different writers normalizes them first.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PackedFlowKey(Box<[u8]>);

impl PackedFlowKey {
    /// The key of `flow`'s table, priority and match; `None` when the encoder refuses the match
    /// (none in practice for a flow a switch sent and the decoder read).
    pub fn of(flow: &Flow) -> Option<PackedFlowKey> {
        let mut w = Writer::new();
        w.u8(flow.table);
        w.u16(flow.priority);
        encode_match(&flow.matches, &mut w).ok()?;
        Some(PackedFlowKey(w.into_vec().into_boxed_slice()))
    }

    /// The flow this key stands for: table, priority and match only (what a DELETE_STRICT
    /// needs). The bytes were made by [`PackedFlowKey::of`], so this fails only if the codec's
    /// encoder and decoder disagree; a caller that must be able to delete the flow checks the
    /// round trip when it packs.
    pub fn unpack(&self) -> Option<Flow> {
        let (head, rest) = self.0.split_at_checked(3)?;
        let matches = decode_match(&mut Reader::new(rest, "packed flow key")).ok()?;
        Some(Flow::new(
            head[0],
            u16::from_be_bytes([head[1], head[2]]),
            matches,
        ))
    }
}

/// Two 64-bit SipHashes (fixed keys, different prefixes) of everything of `flow` but its
/// identity: the cookie bits of `cookie_mask`, the idle and hard timeouts, and the encoded
/// instructions, with `actions` standing for the flow's own (a caller compares in a normalized
/// form). An accidental false "same" needs a 128-bit collision. Not keyed against crafted input:
/// meant for flows the caller or its operator installed. `None` when the encoder refuses the
/// instructions. The hasher is the standard library's `DefaultHasher`, whose output may change
/// between Rust releases: compare digests made by one build, never persist them.
pub fn content_digest(flow: &Flow, actions: &[Action], cookie_mask: u64) -> Option<u128> {
    let mut w = Writer::new();
    w.u64(flow.cookie & cookie_mask);
    w.u16(flow.idle_timeout);
    w.u16(flow.hard_timeout);
    encode_instructions(actions, flow.goto_table, &mut w).ok()?;
    let bytes = w.into_vec();
    let half = |seed: u8| {
        let mut h = DefaultHasher::new();
        h.write_u8(seed);
        h.write(&bytes);
        h.finish()
    };
    Some((u128::from(half(1)) << 64) | u128::from(half(2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Match;

    fn flow(priority: u16, port: u32, out: u32, cookie: u64) -> Flow {
        let mut m = Match::new();
        m.in_port = Some(port);
        let mut f = Flow::new(3, priority, m);
        f.cookie = cookie;
        f.actions = vec![Action::Output(out)];
        f
    }

    #[test]
    fn a_key_unpacks_to_its_flows_identity() {
        let f = flow(10, 7, 2, 0x55);
        let key = PackedFlowKey::of(&f).expect("encodable");
        let back = key.unpack().expect("decodable");
        assert_eq!(back.key(), f.key());
        assert!(back.actions.is_empty() && back.cookie == 0);
        // Identity only: another cookie or output has the same key, another match does not.
        assert_eq!(PackedFlowKey::of(&flow(10, 7, 3, 0x66)), Some(key.clone()));
        assert_ne!(PackedFlowKey::of(&flow(10, 8, 2, 0x55)), Some(key.clone()));
        assert_ne!(PackedFlowKey::of(&flow(11, 7, 2, 0x55)), Some(key));
    }

    #[test]
    fn the_digest_covers_the_rest_but_the_masked_cookie_bits() {
        let digest = |f: &Flow, mask: u64| content_digest(f, &f.actions, mask).expect("encodable");
        let a = flow(10, 7, 2, 0xff00);
        assert_eq!(digest(&a, 0xff00), digest(&flow(10, 7, 2, 0xff01), 0xff00));
        assert_ne!(digest(&a, 0xff00), digest(&flow(10, 7, 2, 0xfe00), 0xff00));
        assert_ne!(digest(&a, 0xff00), digest(&flow(10, 7, 3, 0xff00), 0xff00));
        let mut timed = a.clone();
        timed.idle_timeout = 5;
        assert_ne!(digest(&a, 0xff00), digest(&timed, 0xff00));
        // The identity is not part of it.
        assert_eq!(digest(&a, 0xff00), digest(&flow(11, 8, 2, 0xff00), 0xff00));
    }
}
