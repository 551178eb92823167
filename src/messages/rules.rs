//! Policy cache → flow installer.

use std::sync::Arc;

use actix::Message;

use super::stats::PolicyGeneration;
pub use crate::policy::resolve::RuleChanges;
use crate::policy::rule::CompiledRuleInput;

/// Every NetworkPolicy rule that applies on this node, resolved (full view, sorted by rule id).
/// Sent once both the policies and the attached interfaces are known, and after every change;
/// never while either is unknown, so the switch keeps its last rules meanwhile (fail closed).
///
/// The view is shared, not copied: unchanged rules keep their `Arc` from one message to the
/// next, so the flow installer finds the changed ones by pointer comparison; with
/// [`RulesChanged::changes`] it need not even compare: only the rules of those ids changed.
#[derive(Clone, Debug, PartialEq, Message)]
#[rtype(result = "()")]
pub struct RulesChanged {
    pub rules: Arc<[Arc<CompiledRuleInput>]>,
    /// Every NetworkPolicy in the cache that has at least one rule effective on this node (so its
    /// status can be reported once these rules are in the switch), sorted by name.
    pub policies: Vec<PolicyGeneration>,
    /// Changes on every full snapshot of the policy source and on the NetworkPolicy resync after
    /// a suspected server restart (see [`super::PoliciesRealized`]).
    pub sync_epoch: u64,
    /// The OpenFlow ports of the interfaces these rules were resolved against
    /// ([`super::InterfacesChanged::ofports`]). The flow installer installs nothing while its own
    /// interface view has other ports: a re-created port must not get its pipeline flows before
    /// the rules that name its new number (that gap let denied connections through).
    pub interface_ofports: Vec<(u32, u32)>,
    /// The rule ids whose rules may differ from those of the sender's previous view (its
    /// version `from`); `None` when not known: the receiver compares the whole view.
    pub changes: Option<RuleChanges>,
}
