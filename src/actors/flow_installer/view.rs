//! The rule view the flow installer works from: the policy cache's latest rules, which rule ids
//! changed since the compiler last moved to a view (the hint that lets a one-rule change cost
//! one rule, not a walk over all of them), and the DNS ports the view's FQDN rules intercept.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::messages::rules::RuleChanges;
use crate::policy::compiler::same_rules;
use crate::policy::rule::{CompiledRuleInput, RuleId};

/// The rules as a shared, id-sorted view.
pub(super) type Rules = Arc<[Arc<CompiledRuleInput>]>;

#[derive(Debug, Default)]
pub(super) struct RuleView {
    /// `None` until the policy cache's first view arrives.
    rules: Option<Rules>,
    /// The sender's version of `rules` (0: unknown).
    version: u64,
    /// The rule ids that may differ between the view the compiler last moved to and `rules`;
    /// `None`: not known (the compiler compares every rule).
    pending: Option<BTreeSet<RuleId>>,
    /// DNS port → number of (rule, port) uses among the FQDN rules of `rules`.
    dns_port_uses: BTreeMap<u32, usize>,
}

impl RuleView {
    pub(super) fn rules(&self) -> Option<&Rules> {
        self.rules.as_ref()
    }

    /// Takes the policy cache's new view; whether its rules differ from the current ones.
    pub(super) fn set(&mut self, rules: Rules, changes: Option<RuleChanges>) -> bool {
        let chained = match (&self.rules, &changes) {
            (Some(_), Some(c)) => c.from != 0 && c.from == self.version,
            _ => false,
        };
        self.version = changes.as_ref().map_or(0, |c| c.to);
        let ids = changes.map(|c| c.ids).unwrap_or_default();
        let same = if chained {
            ids.is_empty()
        } else {
            self.rules.as_ref().is_some_and(|r| same_rules(r, &rules))
        };
        if same {
            return false;
        }
        match (&self.rules, chained) {
            (Some(old), true) => {
                for id in ids.iter() {
                    for r in with_id(old, id) {
                        count_dns_ports(&mut self.dns_port_uses, r, false);
                    }
                    for r in with_id(&rules, id) {
                        count_dns_ports(&mut self.dns_port_uses, r, true);
                    }
                }
                if let Some(pending) = &mut self.pending {
                    pending.extend(ids.iter().cloned());
                }
            }
            _ => {
                self.dns_port_uses.clear();
                for r in rules.iter() {
                    count_dns_ports(&mut self.dns_port_uses, r, true);
                }
                self.pending = None;
            }
        }
        self.rules = Some(rules);
        true
    }

    /// The rule ids that may have changed since the compiler last moved to a view (see
    /// [`crate::policy::compiler::Compiler::update_delta`]).
    pub(super) fn changed_ids(&self) -> Option<&BTreeSet<RuleId>> {
        self.pending.as_ref()
    }

    /// The compiler moved to the current view.
    pub(super) fn applied(&mut self) {
        self.pending = Some(BTreeSet::new());
    }

    /// The DNS ports the FQDN rules of the view intercept.
    pub(super) fn dns_ports(&self) -> BTreeSet<u32> {
        self.dns_port_uses.keys().copied().collect()
    }
}

/// The rules of `id` in an id-sorted view.
fn with_id<'a>(
    rules: &'a [Arc<CompiledRuleInput>],
    id: &'a RuleId,
) -> impl Iterator<Item = &'a CompiledRuleInput> {
    let start = rules.partition_point(|r| r.id < *id);
    rules[start..]
        .iter()
        .take_while(move |r| r.id == *id)
        .map(|r| &**r)
}

fn count_dns_ports(uses: &mut BTreeMap<u32, usize>, rule: &CompiledRuleInput, add: bool) {
    let Some(fqdn) = &rule.fqdn else { return };
    for &port in &fqdn.ports {
        if add {
            *uses.entry(port).or_insert(0) += 1;
        } else if let Some(n) = uses.get_mut(&port) {
            *n -= 1;
            if *n == 0 {
                uses.remove(&port);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::rule::{Direction, FqdnPeers, PolicyRef, PolicyType, RuleAction};

    fn rule(uid: &str, dns_port: Option<u32>) -> Arc<CompiledRuleInput> {
        Arc::new(CompiledRuleInput {
            id: RuleId {
                policy_uid: uid.into(),
                direction: Direction::Out,
                index: 0,
                services_key: String::new(),
            },
            policy: PolicyRef {
                policy_type: PolicyType::AntreaClusterNetworkPolicy,
                namespace: String::new(),
                name: uid.into(),
                uid: uid.into(),
            },
            rule_name: String::new(),
            direction: Direction::Out,
            action: RuleAction::Drop,
            tier_priority: 250,
            policy_priority: 1.0,
            rule_priority: 0,
            max_rule_priority: 0,
            from: Vec::new(),
            to: Vec::new(),
            services: None,
            enable_logging: false,
            log_label: String::new(),
            fqdn: dns_port.map(|p| FqdnPeers {
                selectors: vec!["example.com".into()],
                ports: vec![p],
            }),
        })
    }

    fn view(rules: Vec<Arc<CompiledRuleInput>>) -> Rules {
        rules.into()
    }

    #[test]
    fn a_chained_change_names_only_its_ids_and_keeps_the_dns_ports() {
        let (a, b) = (rule("a", Some(53)), rule("b", None));
        let mut v = RuleView::default();
        let first = RuleChanges {
            from: 0,
            to: 7,
            ids: Arc::default(),
        };
        assert!(v.set(view(vec![a.clone(), b.clone()]), Some(first)));
        assert_eq!(v.changed_ids(), None, "the first view is compared whole");
        assert_eq!(v.dns_ports(), BTreeSet::from([53]));
        v.applied();

        let b2 = rule("b", Some(5353));
        let ids: BTreeSet<RuleId> = [b2.id.clone()].into();
        let next = RuleChanges {
            from: 7,
            to: 9,
            ids: Arc::new(ids.clone()),
        };
        assert!(v.set(view(vec![a.clone(), b2.clone()]), Some(next)));
        assert_eq!(v.changed_ids(), Some(&ids));
        assert_eq!(v.dns_ports(), BTreeSet::from([53, 5353]));

        // A change that does not start from the current version breaks the chain.
        let broken = RuleChanges {
            from: 8,
            to: 10,
            ids: Arc::default(),
        };
        assert!(v.set(view(vec![b2.clone()]), Some(broken)));
        assert_eq!(v.changed_ids(), None);
        assert_eq!(v.dns_ports(), BTreeSet::from([5353]));

        // No change at all.
        let none = RuleChanges {
            from: 10,
            to: 10,
            ids: Arc::default(),
        };
        assert!(!v.set(view(vec![b2]), Some(none)));
    }
}
