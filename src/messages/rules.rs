//! Policy cache → flow installer.

use actix::Message;

use crate::policy::rule::CompiledRuleInput;

/// Every NetworkPolicy rule that applies on this node, resolved (full view, sorted by rule id).
/// Sent once both the policies and the attached interfaces are known, and after every change;
/// never while either is unknown, so the switch keeps its last rules meanwhile (fail closed).
#[derive(Clone, Debug, PartialEq, Message)]
#[rtype(result = "()")]
pub struct RulesChanged {
    pub rules: Vec<CompiledRuleInput>,
}
