//! Status queries: any actor → any actor (the reporter and the supervisor ask).

use actix::Message;
use serde::Serialize;

use super::status_detail::ActorDetail;
pub use crate::error_kind::{ErrorKind, StatusError};

/// The five supervised actors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActorKind {
    ExternalNodeWatcher,
    InterfaceManager,
    PolicyCache,
    FlowInstaller,
    AgentInfoReporter,
}

impl ActorKind {
    pub const ALL: [ActorKind; 5] = [
        ActorKind::FlowInstaller,
        ActorKind::PolicyCache,
        ActorKind::InterfaceManager,
        ActorKind::ExternalNodeWatcher,
        ActorKind::AgentInfoReporter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::ExternalNodeWatcher => "external-node-watcher",
            ActorKind::InterfaceManager => "interface-manager",
            ActorKind::PolicyCache => "policy-cache",
            ActorKind::FlowInstaller => "flow-installer",
            ActorKind::AgentInfoReporter => "agent-info-reporter",
        }
    }
}

impl std::fmt::Display for ActorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// "Tell me how you are."
#[derive(Clone, Copy, Debug, Default, Message)]
#[rtype(result = "ActorStatus")]
pub struct StatusQuery;

/// One actor's answer: whether it is doing its job, and its own report ([`ActorDetail`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ActorStatus {
    /// Always `detail.kind()` (see [`ActorStatus::new`]).
    pub actor: ActorKind,
    /// The actor is connected to what it needs and its last attempt succeeded.
    pub healthy: bool,
    /// Last error, if any: its kind and its words.
    pub last_error: Option<StatusError>,
    pub detail: ActorDetail,
}

impl ActorStatus {
    /// The status of the actor `detail` belongs to.
    pub fn new(healthy: bool, last_error: Option<StatusError>, detail: ActorDetail) -> Self {
        ActorStatus {
            actor: detail.kind(),
            healthy,
            last_error,
            detail,
        }
    }
}
