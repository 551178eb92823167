//! Read-only queries on the flow installer for the agent API: the flows it installed together
//! with what is needed to filter them by policy (conjunction ids → rules) and to render them with
//! port names. A query about some policies builds only the flow groups of their rules, not all
//! 150,000 flows of a large rule set. And what `trace` needs to name the rule a packet matched
//! ([`GetTraceContext`]). A child module so the handler can read the installer's fields.

use std::collections::BTreeSet;

use actix::{Context, Handler, Message};

use super::FlowInstaller;
use crate::messages::AttachedInterface;
use crate::ovs::openflow::Flow;
use crate::policy::compiler::ConjunctionInfo;

/// Everything `/ovsflows` needs, taken at one moment.
#[derive(Clone, Debug, Default)]
pub struct FlowDump {
    /// The flows the installer believes the switch holds.
    pub flows: Vec<Flow>,
    /// Every rule's conjunction (including rules removed a moment ago), by id.
    pub conjunctions: Vec<ConjunctionInfo>,
    /// The attached interfaces, for port names.
    pub interfaces: Vec<AttachedInterface>,
}

/// The installer's flows; with `policy_uids`, the NetworkPolicy flows only of the flow groups
/// holding a rule of those policies (the caller still picks the rules' own flows out of them).
#[derive(Clone, Debug, Default, Message)]
#[rtype(result = "FlowDump")]
pub struct GetFlowDump {
    pub policy_uids: Option<BTreeSet<String>>,
}

impl Handler<GetFlowDump> for FlowInstaller {
    type Result = actix::MessageResult<GetFlowDump>;
    fn handle(&mut self, q: GetFlowDump, _: &mut Context<Self>) -> Self::Result {
        let conjunctions: Vec<ConjunctionInfo> = self
            .conjunctions_tx
            .borrow()
            .values()
            .map(|info| (**info).clone())
            .collect();
        let flows = match &q.policy_uids {
            None => self.installed_flows(),
            Some(uids) => {
                let ids: BTreeSet<u32> = conjunctions
                    .iter()
                    .filter(|c| uids.contains(&c.policy.uid))
                    .map(|c| c.conj_id)
                    .collect();
                self.installed_flows_of(&ids)
            }
        };
        actix::MessageResult(FlowDump {
            flows,
            conjunctions,
            interfaces: self.interfaces.clone().unwrap_or_default(),
        })
    }
}

/// What `trace` needs of the installer: the conjunctions (to name the rule a traced packet
/// matched), the attached interfaces (to pick the port the packet enters by) and whether the
/// conjunctions describe the bridge yet. Cheap: the conjunction map is shared, not copied.
#[derive(Clone, Debug, Default)]
pub struct TraceContext {
    pub conjunctions: crate::policy::compiler::SharedConjunctions,
    pub interfaces: Vec<AttachedInterface>,
    /// Whether the installer committed a sync since the agent started. Before that the bridge
    /// may hold flows (left by the previous agent, or being taken over) whose conjunctions the
    /// installer has not published, so a trace would call every rule unknown.
    pub synced: bool,
}

#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "TraceContext")]
pub struct GetTraceContext;

impl Handler<GetTraceContext> for FlowInstaller {
    type Result = actix::MessageResult<GetTraceContext>;
    fn handle(&mut self, _: GetTraceContext, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(TraceContext {
            conjunctions: self.conjunctions_tx.borrow().clone(),
            interfaces: self.interfaces.clone().unwrap_or_default(),
            synced: self.synced_once,
        })
    }
}
