//! Read-only queries on the flow installer for the agent API: the flows it installed together
//! with what is needed to filter them by policy (conjunction ids → rules) and to render them with
//! port names. A child module so the handler can read the installer's fields.

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

#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "FlowDump")]
pub struct GetFlowDump;

impl Handler<GetFlowDump> for FlowInstaller {
    type Result = actix::MessageResult<GetFlowDump>;
    fn handle(&mut self, _: GetFlowDump, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(FlowDump {
            flows: self.installed_flows(),
            conjunctions: self
                .conjunctions_tx
                .borrow()
                .values()
                .map(|info| (**info).clone())
                .collect(),
            interfaces: self.interfaces.clone().unwrap_or_default(),
        })
    }
}
