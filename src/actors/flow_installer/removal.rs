//! The order in which a bundle's removals reach OVS, chosen for OVS's classifier.
//!
//! OVS keeps the flows of a table that share one match, at different priorities, in one list
//! ordered from the highest priority down, and `classifier_remove` walks that list from its head
//! to the flow it removes; removing the highest-priority flow of a subtable also rescans the
//! subtable for its new maximum. Those removals run in ovs-vswitchd's main loop once the bundle
//! is committed, so while they run the switch answers nobody (no packet-in, no resume of a
//! paused DNS answer, no echo). In the order the compiler produces them (ascending priority)
//! every removal walks its list to the end: 67 s for the 156,799 rule flows of the 10,000-rule
//! fleet (ovs-vswitchd 3.1, load 4.5); OVS's own order, a non-strict delete of the same tables,
//! 29 s. Sent after every other flow_mod of the bundle, lists in ascending order of their
//! highest priority and each list from its head down, the same DELETE_STRICTs took 16 s (all
//! three measured with `ovs-ofctl --bundle` on the same machine, same load).
//!
//! The bundle is atomic, so moving its deletes behind its adds changes nothing a packet can see.
//! The final state is the same too: a held delete is dropped when a later flow_mod adds or
//! replaces the same identity (table, priority, match), which is what applying them in the
//! original order ends with; a delete of an identity added earlier in the bundle still removes
//! it. Only plain DELETE_STRICTs (no cookie, port or group condition) are held.

use std::collections::{BTreeSet, HashMap};

use crate::ovs::openflow::{port, Flow, FlowMod, FlowModCommand, Match};

/// At most this many deletes per chunk sent (the take-over's leftovers too).
pub(super) const DELETE_CHUNK: usize = 4096;
/// OFPFF_RESET_COUNTS.
const RESET_COUNTS: u16 = 1 << 2;

/// Passes the chunks of `inner` through, holding back their plain DELETE_STRICTs, then sends
/// those in OVS's cheap order.
pub(super) struct DeletesLast<I> {
    inner: Option<I>,
    /// table → match → the priorities to delete in that list (nested, so that an add looks
    /// its identity up without a copy of its match).
    held: HashMap<u8, HashMap<Match, BTreeSet<u16>>>,
    /// The held lists in sending order, once `inner` is done.
    sorted: std::vec::IntoIter<((u8, Match), BTreeSet<u16>)>,
    /// The list being sent and the priorities of it still to send, highest first.
    current: Option<(
        u8,
        Match,
        std::iter::Rev<std::collections::btree_set::IntoIter<u16>>,
    )>,
}

impl<I> DeletesLast<I> {
    pub(super) fn new(inner: I) -> Self {
        DeletesLast {
            inner: Some(inner),
            held: HashMap::new(),
            sorted: Vec::new().into_iter(),
            current: None,
        }
    }

    /// Whether `fm` is a delete that may be held: strict, and conditioned on nothing but its
    /// identity.
    fn holdable(fm: &FlowMod) -> bool {
        fm.command == FlowModCommand::DeleteStrict
            && fm.cookie_mask == 0
            && fm.out_port == port::ANY
            && fm.out_group == port::ANY
    }

    /// Holds the chunk's deletes and drops the held deletes its other flow_mods supersede; the
    /// rest of the chunk.
    fn sift(&mut self, chunk: Vec<FlowMod>) -> Vec<FlowMod> {
        if self.held.is_empty() && !chunk.iter().any(Self::holdable) {
            // Nothing to hold and nothing held to supersede (a first load's chunks): the chunk
            // as it is, without moving 1,000 flow_mods into a new vector.
            return chunk;
        }
        let mut pass = Vec::with_capacity(chunk.len());
        for fm in chunk {
            if Self::holdable(&fm) {
                let Flow {
                    table,
                    priority,
                    matches,
                    ..
                } = fm.flow;
                self.held
                    .entry(table)
                    .or_default()
                    .entry(matches)
                    .or_default()
                    .insert(priority);
                continue;
            }
            let mut fm = fm;
            if matches!(fm.command, FlowModCommand::Add) && !self.held.is_empty() {
                // An add replaces a flow of the same identity: a held delete of it came earlier
                // in the bundle and is superseded. The add then starts the flow's counters
                // afresh, as the delete would have.
                if let Some(lists) = self.held.get_mut(&fm.flow.table) {
                    if let Some(list) = lists.get_mut(&fm.flow.matches) {
                        if list.remove(&fm.flow.priority) {
                            fm.flags |= RESET_COUNTS;
                        }
                        if list.is_empty() {
                            lists.remove(&fm.flow.matches);
                        }
                    }
                }
            }
            pass.push(fm);
        }
        pass
    }

    /// Lists by table, then by their highest priority, ascending: no removal takes a
    /// subtable's maximum while a list with a higher head is still there.
    fn sort_held(&mut self) {
        let mut lists: Vec<((u8, Match), BTreeSet<u16>)> = self
            .held
            .drain()
            .flat_map(|(table, lists)| lists.into_iter().map(move |(m, p)| ((table, m), p)))
            .collect();
        lists.sort_by(|((ta, ma), a), ((tb, mb), b)| (ta, a.last(), ma).cmp(&(tb, b.last(), mb)));
        self.sorted = lists.into_iter();
    }

    fn next_deletes(&mut self) -> Option<Vec<FlowMod>> {
        let mut out = Vec::new();
        while out.len() < DELETE_CHUNK {
            if let Some((table, matches, priorities)) = &mut self.current {
                if let Some(priority) = priorities.next() {
                    out.push(FlowMod::delete_strict(Flow::new(
                        *table,
                        priority,
                        matches.clone(),
                    )));
                    continue;
                }
            }
            let Some(((table, matches), priorities)) = self.sorted.next() else {
                self.current = None;
                break;
            };
            self.current = Some((table, matches, priorities.into_iter().rev()));
        }
        (!out.is_empty()).then_some(out)
    }
}

impl<I: Iterator<Item = Vec<FlowMod>>> Iterator for DeletesLast<I> {
    type Item = Vec<FlowMod>;

    fn next(&mut self) -> Option<Vec<FlowMod>> {
        while let Some(inner) = &mut self.inner {
            match inner.next() {
                Some(chunk) => {
                    let pass = self.sift(chunk);
                    if !pass.is_empty() {
                        return Some(pass);
                    }
                }
                None => {
                    self.inner = None;
                    self.sort_held();
                }
            }
        }
        self.next_deletes()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::ovs::openflow::{Action, FlowKey};

    fn flow(table: u8, priority: u16, port_no: u32, out: u32) -> Flow {
        let mut f = Flow::new(table, priority, Match::new().in_port(port_no));
        f.actions = vec![Action::Output(out)];
        f
    }

    /// What the switch ends with after `mods` applied in order: identity → (actions, whether
    /// its counters started afresh after the first `fresh_after` flow_mods).
    fn apply_counting(
        mods: impl IntoIterator<Item = FlowMod>,
        fresh_after: usize,
    ) -> BTreeMap<FlowKey, (Vec<Action>, bool)> {
        let mut state: BTreeMap<FlowKey, (Vec<Action>, bool)> = BTreeMap::new();
        for (i, fm) in mods.into_iter().enumerate() {
            let fresh = i >= fresh_after;
            match fm.command {
                FlowModCommand::Add => {
                    // OVS keeps the counters of a flow an ADD replaces, unless reset_counts.
                    let keep = state
                        .get(&fm.flow.key())
                        .map(|(_, f)| *f)
                        .filter(|_| fm.flags & RESET_COUNTS == 0);
                    state.insert(fm.flow.key(), (fm.flow.actions.clone(), keep.unwrap_or(fresh)));
                }
                FlowModCommand::DeleteStrict => {
                    state.remove(&fm.flow.key());
                }
                other => panic!("not generated: {other:?}"),
            }
        }
        state
    }

    /// What the switch ends with after `mods` applied in order (identity → output).
    fn apply(mods: impl IntoIterator<Item = FlowMod>) -> BTreeMap<FlowKey, Vec<Action>> {
        let mut state = BTreeMap::new();
        for fm in mods {
            match fm.command {
                FlowModCommand::Add => {
                    state.insert(fm.flow.key(), fm.flow.actions.clone());
                }
                FlowModCommand::DeleteStrict => {
                    state.remove(&fm.flow.key());
                }
                other => panic!("not generated: {other:?}"),
            }
        }
        state
    }

    #[test]
    fn deletes_come_last_lists_by_their_head_each_from_the_top() {
        // Two lists in table 4 (ports 1 and 2) and one in table 3; the compiler's order is
        // ascending priority.
        let chunk = vec![
            FlowMod::delete_strict(flow(4, 10, 1, 0)),
            FlowMod::delete_strict(flow(4, 20, 2, 0)),
            FlowMod::add(flow(4, 25, 9, 1)),
            FlowMod::delete_strict(flow(4, 30, 1, 0)),
            FlowMod::delete_strict(flow(3, 5, 1, 0)),
            FlowMod::delete_strict(flow(4, 15, 2, 0)),
        ];
        let out: Vec<Vec<FlowMod>> = DeletesLast::new(vec![chunk].into_iter()).collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], vec![FlowMod::add(flow(4, 25, 9, 1))]);
        let order: Vec<(u8, u16, Option<u32>)> = out[1]
            .iter()
            .map(|fm| (fm.flow.table, fm.flow.priority, fm.flow.matches.in_port))
            .collect();
        // Table 3 first; in table 4 the list headed by 20 (port 2) before the one headed by 30.
        assert_eq!(
            order,
            vec![
                (3, 5, Some(1)),
                (4, 20, Some(2)),
                (4, 15, Some(2)),
                (4, 30, Some(1)),
                (4, 10, Some(1))
            ]
        );
        assert!(out[1].iter().all(|fm| fm.command == FlowModCommand::DeleteStrict));
    }

    #[test]
    fn held_deletes_are_sent_in_bounded_chunks() {
        let chunk: Vec<FlowMod> = (0..10_000u16)
            .map(|p| FlowMod::delete_strict(flow(4, p, u32::from(p % 3), 0)))
            .collect();
        let out: Vec<Vec<FlowMod>> = DeletesLast::new(vec![chunk].into_iter()).collect();
        assert!(out.iter().all(|c| !c.is_empty() && c.len() <= DELETE_CHUNK));
        assert_eq!(out.iter().map(Vec::len).sum::<usize>(), 10_000);
    }

    #[test]
    fn conditional_deletes_are_not_held() {
        let mut by_cookie = FlowMod::delete_strict(flow(4, 1, 1, 0));
        by_cookie.cookie_mask = u64::MAX;
        let chunks = vec![vec![FlowMod::delete_strict(flow(4, 2, 1, 0)), by_cookie.clone()]];
        let out: Vec<Vec<FlowMod>> = DeletesLast::new(chunks.into_iter()).collect();
        assert_eq!(out[0], vec![by_cookie]);
        // Sent with its identity only (all a DELETE_STRICT needs).
        assert_eq!(out[1].len(), 1);
        assert_eq!(out[1][0].command, FlowModCommand::DeleteStrict);
        assert_eq!(out[1][0].flow.key(), flow(4, 2, 1, 0).key());
    }

    fn arb_mod() -> impl Strategy<Value = FlowMod> {
        // A small identity space (2 tables x 4 priorities x 3 matches) so that adds and
        // deletes of the same identity meet often.
        (any::<bool>(), 3u8..5, 0u16..4, 0u32..3, 0u32..3).prop_map(|(add, table, priority, port_no, out)| {
            let f = flow(table, priority, port_no, out);
            if add {
                FlowMod::add(f)
            } else {
                FlowMod::delete_strict(f)
            }
        })
    }

    proptest! {
        /// Whatever the mix, the switch ends with what the original order gives.
        #[test]
        fn reordering_ends_in_the_same_state(
            start in prop::collection::vec(arb_mod(), 0..20),
            chunks in prop::collection::vec(prop::collection::vec(arb_mod(), 0..12), 0..6),
        ) {
            let before = apply(start.iter().filter(|m| m.command == FlowModCommand::Add).cloned());
            let original = apply(
                before.iter().map(|(k, a)| {
                    let mut f = Flow::new(k.table, k.priority, k.matches.clone());
                    f.actions = a.clone();
                    FlowMod::add(f)
                })
                .chain(chunks.iter().flatten().cloned()),
            );
            let reordered = apply(
                before.iter().map(|(k, a)| {
                    let mut f = Flow::new(k.table, k.priority, k.matches.clone());
                    f.actions = a.clone();
                    FlowMod::add(f)
                })
                .chain(DeletesLast::new(chunks.clone().into_iter()).flatten()),
            );
            prop_assert_eq!(original, reordered);
            // Counters too: a flow the bundle deleted and added again starts afresh either way.
            let start_mods: Vec<FlowMod> = before.iter().map(|(k, a)| {
                let mut f = Flow::new(k.table, k.priority, k.matches.clone());
                f.actions = a.clone();
                FlowMod::add(f)
            }).collect();
            let n = start_mods.len();
            let original = apply_counting(
                start_mods.iter().cloned().chain(chunks.iter().flatten().cloned()),
                n,
            );
            let reordered = apply_counting(
                start_mods.into_iter().chain(DeletesLast::new(chunks.clone().into_iter()).flatten()),
                n,
            );
            prop_assert_eq!(original, reordered);
        }
    }
}
