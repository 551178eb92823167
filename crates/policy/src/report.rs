//! What the agent reports about its policies once they are in the switch: a policy at the
//! generation it was realized (the input of NetworkPolicyStatus) and the counters of each rule
//! (the input of NodeStatsSummary, the metrics and the agent API). Plain data; the actors' messages
//! (`messages::stats`) carry it and the Kubernetes write-back (`k8s`) reads it.

use serde::Serialize;

use super::rule::{Direction, PolicyRef, RuleAction};

/// One policy as the policy cache last published it: enough to post its NetworkPolicyStatus.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyGeneration {
    /// The controlplane object's `metadata.name` (the status URL uses it).
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// Antrea-native policies get a NetworkPolicyStatus; K8s NetworkPolicies do not.
    pub antrea_native: bool,
    /// `None` when every rule is enforced as written; else the NetworkPolicyStatus `message`
    /// naming each rule installed fail-closed and why (`realizationFailure: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_enforced: Option<String>,
}

/// Counters of one rule, read from its metric flows.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleStats {
    pub policy: PolicyRef,
    pub rule_name: String,
    pub direction: Direction,
    pub action: RuleAction,
    pub tier_priority: i32,
    pub packets: u64,
    pub bytes: u64,
    pub sessions: u64,
}

/// The counters of every installed rule at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RuleStatsSnapshot {
    pub rules: Vec<RuleStats>,
}
