//! What a source says when it cannot give a state: [`SourceError`], carried by
//! `SourceEvent::Error` and `PolicyUpdate::Error`. Each variant names where the problem is (the
//! ExternalNode file, the ExternalNode on kube-apiserver, one of antrea-controller's watches) and
//! keeps the cause as its text. The rendered message (`Display`) is what the logs, the actors'
//! statuses and the agent API show, word for word as before the type existed.

use std::path::PathBuf;

use crate::error_kind::ErrorKind;
use crate::policy::controlplane::Kind;

/// A problem a source reports; the last good state stays in force.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The ExternalNode file could not be read or parsed (or is not a regular file).
    #[error("ExternalNode file {}: {problem}", path.display())]
    ExternalNodeFile { path: PathBuf, problem: String },
    /// The ExternalNode `namespace/name` on kube-apiserver: the server could not be reached, the
    /// list or watch broke, or a watch event could not be used.
    #[error("ExternalNode {namespace}/{name}: {problem}")]
    ExternalNodeApi {
        namespace: String,
        name: String,
        problem: String,
    },
    /// The ExternalNode `namespace/name` kube-apiserver sent (at `resource_version`) has a shape
    /// the agent cannot decode.
    #[error("ExternalNode {namespace}/{name} (resourceVersion {resource_version:?}): cannot decode the object: {cause}")]
    ExternalNodeUndecodable {
        namespace: String,
        name: String,
        resource_version: String,
        cause: String,
    },
    /// antrea-controller's watch of `kind`: an object it sent that the agent cannot use, or the
    /// watch itself (connection, fallback store).
    #[error("antrea-controller {kind} watch: {problem}")]
    ControlplaneWatch { kind: Kind, problem: String },
    /// The controlplane watches could not be started: no Tokio runtime to run them on.
    #[error("antrea-controller watches need a Tokio runtime: {0}")]
    NoRuntime(String),
}

impl SourceError {
    /// What an operator alerts on: the ExternalNode itself, kube-apiserver, or antrea-controller.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SourceError::ExternalNodeFile { .. } | SourceError::ExternalNodeUndecodable { .. } => {
                ErrorKind::ExternalNode
            }
            SourceError::ExternalNodeApi { .. } => ErrorKind::KubeApi,
            SourceError::ControlplaneWatch { .. } | SourceError::NoRuntime(_) => ErrorKind::AntreaController,
        }
    }

    /// The watch kind a controlplane error concerns.
    pub fn watch_kind(&self) -> Option<Kind> {
        match self {
            SourceError::ControlplaneWatch { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_messages_name_the_place_then_the_cause() {
        let file = SourceError::ExternalNodeFile {
            path: PathBuf::from("/etc/antrea/en.yaml"),
            problem: "file is empty".into(),
        };
        assert_eq!(
            file.to_string(),
            "ExternalNode file /etc/antrea/en.yaml: file is empty"
        );
        let api = SourceError::ExternalNodeApi {
            namespace: "vm-ns".into(),
            name: "vm1".into(),
            problem: "cannot list: 503".into(),
        };
        assert_eq!(api.to_string(), "ExternalNode vm-ns/vm1: cannot list: 503");
        let undecodable = SourceError::ExternalNodeUndecodable {
            namespace: "vm-ns".into(),
            name: "vm1".into(),
            resource_version: "7".into(),
            cause: "missing field `spec`".into(),
        };
        assert_eq!(
            undecodable.to_string(),
            "ExternalNode vm-ns/vm1 (resourceVersion \"7\"): cannot decode the object: missing field `spec`"
        );
        let watch = SourceError::ControlplaneWatch {
            kind: Kind::AddressGroup,
            problem: "bad".into(),
        };
        assert_eq!(
            watch.to_string(),
            format!("antrea-controller {} watch: bad", Kind::AddressGroup)
        );
        assert_eq!(watch.watch_kind(), Some(Kind::AddressGroup));
        assert_eq!(api.watch_kind(), None);
        // The kind says what to look at: the ExternalNode itself, kube-apiserver, antrea-controller.
        assert_eq!(file.kind(), ErrorKind::ExternalNode);
        assert_eq!(undecodable.kind(), ErrorKind::ExternalNode);
        assert_eq!(api.kind(), ErrorKind::KubeApi);
        assert_eq!(watch.kind(), ErrorKind::AntreaController);
    }
}
