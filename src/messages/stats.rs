//! Flow installer → reporter and HTTP API: what the switch says each rule did, and which policies
//! are realized. Plain data.

use actix::Message;

use crate::error_kind::ErrorKind;
use crate::ovs::openflow::OfError;
pub use crate::policy::report::{PolicyGeneration, RuleStats, RuleStatsSnapshot};

/// Flow installer → reporter: the rules published with `sync_epoch` are now in the switch, so
/// these policies (at these generations) are realized on this node. `sync_epoch` changes on every
/// full snapshot of the policy source and on the NetworkPolicy resync after a suspected server
/// restart, after which every status is re-posted (a restarted controller forgot them).
/// `policies` is shared: the flow installer keeps the list it sends, and a copy of thousands of
/// policies per commit would cost the thread that realizes the next change.
#[derive(Clone, Debug, PartialEq, Message)]
#[rtype(result = "()")]
pub struct PoliciesRealized {
    pub policies: std::sync::Arc<[PolicyGeneration]>,
    pub sync_epoch: u64,
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

impl RuleStatsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            RuleStatsError::NotConnected => ErrorKind::OvsConnection,
            RuleStatsError::NotSynced => ErrorKind::OvsFlows,
            RuleStatsError::Switch(e) => e.kind(),
        }
    }
}
