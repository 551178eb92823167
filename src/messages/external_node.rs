//! ExternalNode watcher → interface manager.

use actix::Message;

use crate::k8s::external_node::ExternalNode;

/// The agent's ExternalNode as currently known. `None`: it does not exist (never created, or
/// deleted), so every interface must be detached and restored.
#[derive(Clone, Debug, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct ExternalNodeChanged {
    pub node: Option<ExternalNode>,
}
