//! Where the agent's ExternalNode comes from. A source is a stream of observations of one object:
//! present (with the raw object), absent, or unreadable. The standalone mode reads a local YAML
//! file ([`file::FileSource`]), the Kubernetes mode watches kube-apiserver
//! ([`kube_external_node::KubeExternalNodeSource`]); tests use [`fake::FakeSource`]. The policies
//! come from a [`PolicySource`]: the policy directory ([`policy_dir`]) or antrea-controller's
//! three watches ([`controlplane_watch`]); [`select`] picks both from the configuration.

pub mod bounded;
pub mod controlplane_watch;
pub mod dir_watch;
mod error;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod file;
pub mod file_stat;
pub mod kube_external_node;
#[cfg(test)]
pub(crate) mod mutations;
pub mod native_policies;
pub mod policy_dir;
pub mod select;

use futures::stream::BoxStream;

pub use error::SourceError;

use crate::k8s::external_node::ExternalNodeObject;

/// One observation of the ExternalNode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceEvent {
    Present(Box<ExternalNodeObject>),
    Absent,
    /// The source could not be read or parsed; the error names the object and what is wrong.
    /// The last good state stays in force.
    Error(SourceError),
}

/// A source of ExternalNode observations.
pub trait ExternalNodeSource: Send + Sync {
    /// A new stream of observations; its first item is the current state, then one item per
    /// change. Each call starts an independent stream (a restarted watcher subscribes again).
    fn subscribe(&self) -> BoxStream<'static, SourceEvent>;
    /// Human description for logs, e.g. `file /etc/antrea/external-node.yaml`.
    fn describe(&self) -> String;
}

// === policies ===

use crate::policy::controlplane::{Kind, MembersPatch, ValidObject};
use policy_dir::PolicySnapshot;

/// One thing a policy source tells the policy cache. A standalone directory sends whole
/// [`PolicyUpdate::Snapshot`]s; the antrea-controller watch sends per-kind replaces and deltas.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyUpdate {
    /// The complete state of every kind (a policy directory, or the on-disk fallback store).
    Snapshot(PolicySnapshot),
    /// The complete current set of one kind (a watch's initial snapshot, ended by its BOOKMARK):
    /// objects absent from it are deleted. `kind` is NetworkPolicy, AddressGroup or AppliedToGroup.
    Replace { kind: Kind, objects: Vec<ValidObject> },
    /// An object added or replaced (NetworkPolicy, AddressGroup or AppliedToGroup).
    Upsert(ValidObject),
    /// Members added to / removed from a known group (`kind` is AddressGroup or AppliedToGroup).
    Patch { kind: Kind, patch: MembersPatch },
    /// An object deleted, or no longer relevant to this node.
    Delete { kind: Kind, name: String },
    /// The watch of `kind` is connected (its snapshot arrived) or not.
    Connection { kind: Kind, connected: bool },
    /// A problem naming the watch, the object and field; the last good state stays in force.
    Error(SourceError),
    /// The server may have lost what the agent reported to it (the watch broke or could not be
    /// opened, so the server may have restarted meanwhile): realization statuses are reported
    /// again. A watch the server closed cleanly and that reopened at once does not say this.
    /// Sent right before the NetworkPolicy watch's `Replace`, which then starts the new sync
    /// epoch (the other kinds' items may come in between).
    ServerMayHaveRestarted,
}

/// A source of controlplane policy objects.
pub trait PolicySource: Send + Sync {
    /// A new stream of updates. Its first items bring the current state (a `Snapshot`, or one
    /// `Replace` per kind); each call starts independently (a restarted policy cache subscribes
    /// again and gets everything again).
    fn subscribe(&self) -> BoxStream<'static, PolicyUpdate>;
    /// Human description for logs, e.g. `antrea-controller https://10.0.0.1:443`.
    fn describe(&self) -> String;
}

impl PolicySource for policy_dir::PolicyDirSource {
    fn subscribe(&self) -> BoxStream<'static, PolicyUpdate> {
        use futures::StreamExt;
        policy_dir::PolicyDirSource::subscribe(self)
            .map(PolicyUpdate::Snapshot)
            .boxed()
    }
    fn describe(&self) -> String {
        policy_dir::PolicyDirSource::describe(self)
    }
}
