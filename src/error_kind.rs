//! The kinds of error the agent reports in its statuses: [`ErrorKind`], a closed set an operator
//! can alert on (it is the `kind` label of `antrea_vm_agent_actor_last_error`), and
//! [`StatusError`], a kind with the message in words. Each error enum whose errors reach an
//! actor's status says its kind (`fn kind(&self) -> ErrorKind`); the actors put the result in
//! their statuses. Errors that only stop the start-up or are only logged have no kind.
//!
//! A leaf: it names no other module of the agent, so every module can say its kind.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where an error comes from, as the statuses, the agent API and the metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// kube-apiserver: reads, watches and writes (ExternalNode, AntreaAgentInfo, statuses).
    KubeApi,
    /// antrea-controller's NetworkPolicy watches.
    AntreaController,
    /// The ExternalNode (file or object) is unreadable or invalid.
    ExternalNode,
    /// The local policy source: directory, files or objects that cannot be used.
    PolicySource,
    /// A policy resolves with a warning (e.g. a rule that cannot apply here).
    PolicyResolution,
    /// The OpenFlow session with the bridge: connecting, or the connection failing.
    OvsConnection,
    /// The switch refused flows, groups or meters.
    OvsFlows,
    /// OVSDB: reading or changing the Open_vSwitch database.
    Ovsdb,
    /// Attaching a host interface to the bridge (links, addresses, routes, ports).
    InterfaceAttach,
    /// The files kept under `stateDir`: the interface records, the lock, the policy fallback store.
    StateFile,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::KubeApi,
        ErrorKind::AntreaController,
        ErrorKind::ExternalNode,
        ErrorKind::PolicySource,
        ErrorKind::PolicyResolution,
        ErrorKind::OvsConnection,
        ErrorKind::OvsFlows,
        ErrorKind::Ovsdb,
        ErrorKind::InterfaceAttach,
        ErrorKind::StateFile,
    ];

    /// The snake_case name (the JSON value and the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::KubeApi => "kube_api",
            ErrorKind::AntreaController => "antrea_controller",
            ErrorKind::ExternalNode => "external_node",
            ErrorKind::PolicySource => "policy_source",
            ErrorKind::PolicyResolution => "policy_resolution",
            ErrorKind::OvsConnection => "ovs_connection",
            ErrorKind::OvsFlows => "ovs_flows",
            ErrorKind::Ovsdb => "ovsdb",
            ErrorKind::InterfaceAttach => "interface_attach",
            ErrorKind::StateFile => "state_file",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as a status shows it: `{"kind": "ovsdb", "message": "…"}` in JSON, `kind: message`
/// in words.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StatusError {
    pub kind: ErrorKind,
    pub message: String,
}

impl StatusError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        StatusError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialise_as_their_snake_case_names() {
        for kind in ErrorKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).ok(),
                Some(serde_json::json!(kind.as_str()))
            );
        }
    }

    #[test]
    fn a_status_error_is_an_object_in_json_and_kind_colon_message_in_words() {
        let e = StatusError::new(
            ErrorKind::Ovsdb,
            "cannot read the round number from OVSDB: refused",
        );
        assert_eq!(
            serde_json::to_value(&e).ok(),
            Some(
                serde_json::json!({"kind": "ovsdb", "message": "cannot read the round number from OVSDB: refused"})
            )
        );
        assert_eq!(
            e.to_string(),
            "ovsdb: cannot read the round number from OVSDB: refused"
        );
    }
}
