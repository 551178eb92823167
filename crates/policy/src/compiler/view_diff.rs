//! What a new rule view changes against the rules the [`Compiler`] holds: the rules it refuses
//! (duplicate ids, K8s NetworkPolicy rules), the held rules that went away and the rules that
//! are new or changed.
//!
//! Two ways to find out, with the same result:
//! * [`Compiler::diff_full`] walks the whole view against the held rules (a merge by
//!   [`RuleId`]): what `compile` and any caller without a change hint get; it costs the size of
//!   the view.
//! * [`Compiler::diff_hinted`] looks only at the rule ids the caller names as possibly changed
//!   since the view the compiler last applied (the policy cache knows them), finding their rules
//!   in the sorted view by binary search: a one-rule change with 50,000 rules present costs a
//!   few lookups instead of a walk over every rule and its heap allocation.
//!
//! The refusals are kept per rule id between passes ([`Compiler::refused`]), so a hinted pass
//! still reports every refused rule of the view.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{CompileError, Compiler, SkippedRule};
use crate::merge_join::{merge_join, Joined};
use crate::rule::{CompiledRuleInput, RuleId};

/// The rules of a view that differ from the held ones.
#[derive(Default)]
pub(super) struct ViewDiff {
    /// Held rules no longer in the view (or now refused).
    pub removed: Vec<RuleId>,
    /// Rules new in the view or different from the held rule of their id, in id order.
    pub changed: Vec<Arc<CompiledRuleInput>>,
}

/// Why a rule of the view is refused before placement: a later rule with an id already seen
/// (the first of duplicates wins), or a K8s NetworkPolicy rule.
fn refusal(r: &CompiledRuleInput, duplicate: bool) -> Option<CompileError> {
    if duplicate {
        Some(CompileError::DuplicateRule)
    } else if !r.is_antrea_native() {
        Some(CompileError::NotAntreaNative)
    } else {
        None
    }
}

impl Compiler {
    fn refuse(&mut self, id: &RuleId, reason: CompileError) {
        self.refused.entry(id.clone()).or_default().push(SkippedRule {
            id: id.clone(),
            reason,
        });
    }

    /// The whole view against the held rules. `rules` in any order (sorted is cheapest).
    pub(super) fn diff_full(&mut self, rules: &[Arc<CompiledRuleInput>]) -> ViewDiff {
        // Accept rules in RuleId order (the first of duplicates wins).
        let sorted = rules.windows(2).all(|w| w[0].id <= w[1].id);
        let mut order: Vec<&Arc<CompiledRuleInput>> = rules.iter().collect();
        if !sorted {
            // Stable: rules with the same id keep the caller's order.
            order.sort_by(|a, b| a.id.cmp(&b.id));
        }
        self.refused.clear();
        let mut accepted: Vec<&Arc<CompiledRuleInput>> = Vec::with_capacity(order.len());
        for (i, r) in order.iter().enumerate() {
            match refusal(r, i > 0 && order[i - 1].id == r.id) {
                Some(reason) => self.refuse(&r.id, reason),
                None => accepted.push(r),
            }
        }

        // A merge of the sorted input with the held rules.
        let mut diff = ViewDiff::default();
        for step in merge_join(self.held.iter_mut(), accepted.iter(), |(id, _), r| {
            (*id).cmp(&r.id)
        }) {
            match step {
                Joined::Old((id, _)) => diff.removed.push(id.clone()),
                Joined::New(r) => diff.changed.push(Arc::clone(r)),
                Joined::Both((_, h), r) => {
                    if Arc::ptr_eq(&h.rule, r) {
                        continue;
                    }
                    if *h.rule == ***r {
                        // Same rule, another allocation: share the caller's.
                        h.rule = Arc::clone(r);
                        if let Some((c, _)) = h.placed {
                            self.placed.insert(c, Arc::clone(r));
                        }
                    } else {
                        diff.changed.push(Arc::clone(r));
                    }
                }
            }
        }
        diff
    }

    /// Only the rules of `ids` against the held rules: every other rule of `rules` must be the
    /// one of the view the compiler last applied. `rules` must be sorted by [`RuleId`] (rules of
    /// one id in the order the first of them wins), as the policy cache sends them.
    pub(super) fn diff_hinted(
        &mut self,
        rules: &[Arc<CompiledRuleInput>],
        ids: &BTreeSet<RuleId>,
    ) -> ViewDiff {
        debug_assert!(
            rules.windows(2).all(|w| w[0].id <= w[1].id),
            "a hinted rule view must be sorted by rule id"
        );
        let mut diff = ViewDiff::default();
        for id in ids {
            let start = rules.partition_point(|r| r.id < *id);
            let same_id = rules[start..].iter().take_while(|r| r.id == *id);
            self.refused.remove(id);
            let mut accepted = None;
            for (i, r) in same_id.enumerate() {
                match refusal(r, i > 0) {
                    Some(reason) => self.refuse(id, reason),
                    None => accepted = Some(r),
                }
            }
            match (self.held.get_mut(id), accepted) {
                (None, None) => {}
                (Some(_), None) => diff.removed.push(id.clone()),
                (None, Some(r)) => diff.changed.push(Arc::clone(r)),
                (Some(h), Some(r)) => {
                    if Arc::ptr_eq(&h.rule, r) {
                        continue;
                    }
                    if *h.rule == **r {
                        h.rule = Arc::clone(r);
                        if let Some((c, _)) = h.placed {
                            self.placed.insert(c, Arc::clone(r));
                        }
                    } else {
                        diff.changed.push(Arc::clone(r));
                    }
                }
            }
        }
        diff
    }

    /// Every refused rule of the current view, in id order.
    pub(super) fn refusals(&self) -> impl Iterator<Item = &SkippedRule> {
        self.refused.values().flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::tests::{anp, ip, many_rules};
    use super::*;
    use crate::compiler::CompileOptions;
    use crate::rule::{FqdnPeers, PolicyType};

    /// The rule ids whose rules differ (by pointer) between two id-sorted views: the hint the
    /// policy cache sends.
    fn hint(before: &[Arc<CompiledRuleInput>], after: &[Arc<CompiledRuleInput>]) -> BTreeSet<RuleId> {
        let group = |v: &[Arc<CompiledRuleInput>]| {
            let mut m: BTreeMap<RuleId, Vec<*const CompiledRuleInput>> = BTreeMap::new();
            for r in v {
                m.entry(r.id.clone()).or_default().push(Arc::as_ptr(r));
            }
            m
        };
        let (b, a) = (group(before), group(after));
        b.keys()
            .chain(a.keys())
            .filter(|id| b.get(*id) != a.get(*id))
            .cloned()
            .collect()
    }

    fn sorted_skips(mut s: Vec<SkippedRule>) -> Vec<(RuleId, String)> {
        s.sort_by(|a, b| {
            a.id.cmp(&b.id)
                .then_with(|| a.reason.to_string().cmp(&b.reason.to_string()))
        });
        s.into_iter().map(|s| (s.id, s.reason.to_string())).collect()
    }

    /// A walk over rule views (rules added, changed, removed, duplicated, refused, all gone)
    /// through two compilers, one comparing every rule and one told only the changed ids:
    /// every step gives the same flow_mods, the same refusals and the same state.
    #[test]
    fn hinted_updates_equal_whole_view_updates() {
        let base: Vec<Arc<CompiledRuleInput>> = many_rules(40).into_iter().map(Arc::new).collect();
        let mut view: Vec<Arc<CompiledRuleInput>> = base.clone();
        let mut whole = Compiler::new(CompileOptions::default());
        let mut hinted = Compiler::new(CompileOptions::default());
        let mut before: Vec<Arc<CompiledRuleInput>> = Vec::new();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for step in 0..120 {
            view.sort_by(|a, b| a.id.cmp(&b.id));
            let ids = hint(&before, &view);
            let a = whole.update_or_rebuild(&view, 1);
            let b = hinted.update_or_rebuild_hinted(&view, Some(&ids), 1);
            assert_eq!(a.full, b.full, "step {step}");
            assert_eq!(a.mods, b.mods, "step {step}: flow_mods");
            assert_eq!(
                sorted_skips(a.skipped),
                sorted_skips(b.skipped),
                "step {step}: skipped"
            );
            assert_eq!(a.priority_updates, b.priority_updates, "step {step}");
            assert_eq!(whole.flows(1), hinted.flows(1), "step {step}: flows");
            assert_eq!(
                whole.known_conjunctions(),
                hinted.known_conjunctions(),
                "step {step}"
            );
            assert_eq!(whole.fqdn_placements(), hinted.fqdn_placements(), "step {step}");
            before = view.clone();
            if step % 30 == 29 {
                // Everything goes, then comes back: the batch placement.
                view.clear();
                continue;
            }
            if view.is_empty() {
                view = base.clone();
                continue;
            }
            let i = next(view.len() as u64) as usize;
            match next(7) {
                0 => {
                    view.remove(i);
                }
                1 => {
                    let mut r = (*view[i]).clone();
                    r.policy_priority = next(12) as f64 / 2.0;
                    view[i] = Arc::new(r);
                }
                2 => {
                    let mut r = (*view[i]).clone();
                    r.to.push(ip(&format!("10.200.{}.0/24", next(4))));
                    view[i] = Arc::new(r);
                }
                3 => {
                    // Another rule of the same id: refused as a duplicate (or, sorted first,
                    // it wins).
                    let mut r = (*view[i]).clone();
                    r.rule_name = format!("dup-{step}");
                    r.from.push(ip("172.16.0.0/12"));
                    view.push(Arc::new(r));
                }
                4 => {
                    let mut r = (*view[i]).clone();
                    r.policy.policy_type = PolicyType::K8sNetworkPolicy;
                    view[i] = Arc::new(r);
                }
                5 => {
                    let mut r = (*view[i]).clone();
                    r.fqdn = Some(FqdnPeers {
                        selectors: vec![format!("s{step}.example.com")],
                        ports: vec![3],
                    });
                    view[i] = Arc::new(r);
                }
                _ => {
                    let k = next(1000) as usize;
                    let mut r = (*base[k % base.len()]).clone();
                    r.id.policy_uid = format!("uid-walk-{k}").into();
                    r.policy = anp(&format!("walk-{k}"));
                    r.policy_priority = next(12) as f64 / 2.0;
                    view.push(Arc::new(r));
                }
            }
            if step % 10 == 5 {
                whole.reclaim_released_ids();
                hinted.reclaim_released_ids();
            }
        }
    }
}
