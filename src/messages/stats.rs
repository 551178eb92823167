//! Flow installer → reporter and HTTP API: what the switch says each rule did, and which policies
//! are realized. Plain data.

use actix::Message;
use serde::Serialize;

use crate::ovs::openflow::OfError;
use crate::policy::rule::{Direction, PolicyRef, RuleAction};

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

/// Flow installer → reporter: the rules published with `sync_epoch` are now in the switch, so
/// these policies (at these generations) are realized on this node. `sync_epoch` changes on every
/// full resync of the policy source, after which every status is re-posted (a restarted controller
/// forgot them).
#[derive(Clone, Debug, PartialEq, Message)]
#[rtype(result = "()")]
pub struct PoliciesRealized {
    pub policies: Vec<PolicyGeneration>,
    pub sync_epoch: u64,
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

/// "Read the rule counters from the switch now." Fails when the switch is not connected.
#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "Result<RuleStatsSnapshot, RuleStatsError>")]
pub struct GetRuleStats;

/// Why the flow installer could not read the rule counters.
#[derive(Debug, thiserror::Error)]
pub enum RuleStatsError {
    #[error("the OpenFlow switch is not connected")]
    NotConnected,
    /// Before the first sync the switch may hold a previous run's flows, whose conjunction ids
    /// this run has not assigned: their counters would be attributed to the wrong rules.
    #[error("the switch's flows are not synced yet")]
    NotSynced,
    #[error("cannot read the metric flows: {0}")]
    Switch(#[source] OfError),
}
