//! Where the agent's ExternalNode comes from. A source is a stream of observations of one object:
//! present (with the raw object), absent, or unreadable. The standalone mode reads a local YAML
//! file ([`file::FileSource`]); the Kubernetes watch will be another implementation; tests use
//! [`fake::FakeSource`].

pub mod fake;
pub mod file;
pub mod policy_dir;

use futures::stream::BoxStream;

use crate::k8s::external_node::ExternalNodeObject;

/// One observation of the ExternalNode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceEvent {
    Present(Box<ExternalNodeObject>),
    Absent,
    /// The source could not be read or parsed; the message names the object and what is wrong.
    /// The last good state stays in force.
    Error(String),
}

/// A source of ExternalNode observations.
pub trait ExternalNodeSource: Send + Sync {
    /// A new stream of observations; its first item is the current state, then one item per
    /// change. Each call starts an independent stream (a restarted watcher subscribes again).
    fn subscribe(&self) -> BoxStream<'static, SourceEvent>;
    /// Human description for logs, e.g. `file /etc/antrea/external-node.yaml`.
    fn describe(&self) -> String;
}
