//! Read-only queries on the policy cache for the agent API and `/metrics`: the NetworkPolicies
//! and groups it holds (as API views), and the counts upstream exports as metrics. A child module
//! so the handlers can read the cache's fields; they never change them.

use std::collections::{BTreeMap, BTreeSet};

use actix::{Context, Handler, Message};

use super::PolicyCache;
use crate::policy::controlplane::Direction;
use crate::policy::refuse::Reason;
use crate::policy::rule;
use crate::views::{rule_state, GroupView, NetworkPolicyView};

/// The NetworkPolicies the cache holds, sorted by name; with `name`, only those it designates
/// (controlplane name, UID, source name or `namespace/name`).
#[derive(Clone, Debug, Default, Message)]
#[rtype(result = "Vec<NetworkPolicyView>")]
pub struct GetNetworkPolicies {
    pub name: Option<String>,
}

/// Which group kind [`GetGroups`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    AddressGroup,
    AppliedToGroup,
}

/// The AddressGroups or AppliedToGroups the cache holds, sorted by name (only `name`, if given).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Vec<GroupView>")]
pub struct GetGroups {
    pub kind: GroupKind,
    pub name: Option<String>,
}

/// Counts for `/metrics` and `/agentinfo`, taken at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyCounts {
    pub network_policies: usize,
    /// Rules of every held policy, by direction (upstream's rule cache counts).
    pub ingress_rules: usize,
    pub egress_rules: usize,
    pub address_groups: usize,
    pub applied_to_groups: usize,
    /// Rules in effect on this node.
    pub effective_rules: usize,
    /// Rules in effect on this node but installed fail-closed instead of as written, by reason
    /// (every reason present, 0 included; a rule with two reasons counts under both).
    pub not_enforced: BTreeMap<Reason, usize>,
    /// Whether the policy source delivered its first complete view.
    pub policies_known: bool,
    /// Every antrea-controller watch connected; `None` for a source without connections.
    pub controller_connected: Option<bool>,
}

#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "PolicyCounts")]
pub struct GetPolicyCounts;

impl PolicyCache {
    /// Effective rules per policy UID.
    fn effective_rules_by_uid(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for r in self.resolved.iter().flat_map(|r| r.rules.iter()) {
            *counts.entry(r.policy.uid.as_str()).or_insert(0) += 1;
        }
        counts
    }

    /// The controlplane rules in effect here, as (policy UID, direction, index in direction).
    fn effective_rule_keys(&self) -> BTreeSet<(&str, rule::Direction, i32)> {
        self.resolved
            .iter()
            .flat_map(|r| r.rules.iter())
            .map(|r| (r.policy.uid.as_str(), r.direction, r.rule_priority))
            .collect()
    }
}

impl Handler<GetNetworkPolicies> for PolicyCache {
    type Result = actix::MessageResult<GetNetworkPolicies>;
    fn handle(&mut self, msg: GetNetworkPolicies, _: &mut Context<Self>) -> Self::Result {
        let effective = self.effective_rules_by_uid();
        let effective_keys = self.effective_rule_keys();
        let views = self
            .store
            .policies()
            .map(|p| {
                // Resolved rules name their policy by the source's UID when it has one.
                let uid = p
                    .source_ref
                    .as_ref()
                    .map(|s| s.uid.as_str())
                    .filter(|u| !u.is_empty())
                    .unwrap_or(p.uid.as_str());
                let mut view = NetworkPolicyView::from_policy(p, effective.get(uid).copied().unwrap_or(0));
                let not_enforced = self
                    .resolved
                    .as_ref()
                    .map_or(&[][..], |r| r.not_enforced(&p.name));
                for (i, (rule, rv)) in p.rules.iter().zip(view.rules.iter_mut()).enumerate() {
                    let direction = match rule.direction {
                        Direction::In => rule::Direction::In,
                        Direction::Out => rule::Direction::Out,
                    };
                    let index = i32::try_from(rule.priority).unwrap_or(i32::MAX);
                    rv.not_enforced = not_enforced
                        .iter()
                        .filter(|n| n.rule_index == i)
                        .map(|n| n.message.clone())
                        .collect();
                    rv.state = if !rv.not_enforced.is_empty() {
                        rule_state::NOT_ENFORCED_AS_WRITTEN
                    } else if effective_keys.contains(&(uid, direction, index)) {
                        rule_state::ENFORCED
                    } else {
                        rule_state::NOT_APPLIED
                    }
                    .to_string();
                }
                view
            })
            .filter(|v| msg.name.as_deref().is_none_or(|n| v.is_named(n)))
            .collect();
        actix::MessageResult(views)
    }
}

impl Handler<GetGroups> for PolicyCache {
    type Result = actix::MessageResult<GetGroups>;
    fn handle(&mut self, msg: GetGroups, _: &mut Context<Self>) -> Self::Result {
        let groups: Vec<GroupView> = match msg.kind {
            GroupKind::AddressGroup => self
                .store
                .address_groups()
                .filter(|g| msg.name.as_deref().is_none_or(|n| g.name == n))
                .map(GroupView::from)
                .collect(),
            GroupKind::AppliedToGroup => self
                .store
                .applied_to_groups()
                .filter(|g| msg.name.as_deref().is_none_or(|n| g.name == n))
                .map(GroupView::from)
                .collect(),
        };
        actix::MessageResult(groups)
    }
}

impl Handler<GetPolicyCounts> for PolicyCache {
    type Result = actix::MessageResult<GetPolicyCounts>;
    fn handle(&mut self, _: GetPolicyCounts, _: &mut Context<Self>) -> Self::Result {
        let mut counts = PolicyCounts {
            address_groups: self.store.address_groups().count(),
            applied_to_groups: self.store.applied_to_groups().count(),
            effective_rules: self.resolved.as_ref().map_or(0, |r| r.rules.len()),
            not_enforced: Reason::ALL.into_iter().map(|r| (r, 0)).collect(),
            policies_known: self.policies_known,
            controller_connected: self.controller_connected(),
            ..PolicyCounts::default()
        };
        for n in self.resolved.iter().flat_map(|r| r.all_not_enforced()) {
            *counts.not_enforced.entry(n.reason).or_insert(0) += 1;
        }
        for p in self.store.policies() {
            counts.network_policies += 1;
            for r in &p.rules {
                match r.direction {
                    Direction::In => counts.ingress_rules += 1,
                    Direction::Out => counts.egress_rules += 1,
                }
            }
        }
        actix::MessageResult(counts)
    }
}
