//! What each actor reports about itself in its [`ActorStatus`](super::ActorStatus): one struct
//! per actor, gathered in [`ActorDetail`], read by field in `/readyz`, `/metrics`, the agent API
//! and the AntreaAgentInfo heartbeat, so renaming a field breaks its readers at compile time.
//!
//! The JSON keeps camelCase keys in a stable order: [`sorted_json`] orders them as
//! `serde_json`'s map (without `preserve_order`) does. Error fields are `{kind, message}` objects
//! ([`StatusError`](crate::error_kind::StatusError)). The tests below pin each shape.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use super::{ActorKind, AttachedInterface, StatusError};
use crate::fqdn::FqdnCounts;
use crate::k8s::policy_status::PosterSummary;
use crate::k8s::write_log::WriteLog;
use crate::packetin::PacketInCounts;

/// One actor's own report: the variant matches the actor that answered.
#[derive(Clone, Debug, PartialEq)]
// Whether the lint fires depends on the variants' sizes of the moment (they change with the
// counters): allowed, not expected.
#[allow(
    clippy::large_enum_variant,
    reason = "one answer per status query, moved once: boxing would only add noise at every construction"
)]
pub enum ActorDetail {
    ExternalNodeWatcher(ExternalNodeWatcherStatus),
    InterfaceManager(InterfaceManagerStatus),
    PolicyCache(PolicyCacheStatus),
    FlowInstaller(FlowInstallerStatus),
    AgentInfoReporter(ReporterStatus),
}

impl ActorDetail {
    /// The actor this detail belongs to.
    pub fn kind(&self) -> ActorKind {
        match self {
            ActorDetail::ExternalNodeWatcher(_) => ActorKind::ExternalNodeWatcher,
            ActorDetail::InterfaceManager(_) => ActorKind::InterfaceManager,
            ActorDetail::PolicyCache(_) => ActorKind::PolicyCache,
            ActorDetail::FlowInstaller(_) => ActorKind::FlowInstaller,
            ActorDetail::AgentInfoReporter(_) => ActorKind::AgentInfoReporter,
        }
    }

    pub fn external_node_watcher(&self) -> Option<&ExternalNodeWatcherStatus> {
        match self {
            ActorDetail::ExternalNodeWatcher(d) => Some(d),
            _ => None,
        }
    }

    pub fn interface_manager(&self) -> Option<&InterfaceManagerStatus> {
        match self {
            ActorDetail::InterfaceManager(d) => Some(d),
            _ => None,
        }
    }

    pub fn policy_cache(&self) -> Option<&PolicyCacheStatus> {
        match self {
            ActorDetail::PolicyCache(d) => Some(d),
            _ => None,
        }
    }

    pub fn flow_installer(&self) -> Option<&FlowInstallerStatus> {
        match self {
            ActorDetail::FlowInstaller(d) => Some(d),
            _ => None,
        }
    }

    pub fn reporter(&self) -> Option<&ReporterStatus> {
        match self {
            ActorDetail::AgentInfoReporter(d) => Some(d),
            _ => None,
        }
    }
}

/// The inner struct alone, no variant tag: the JSON readers of the API have always seen.
impl Serialize for ActorDetail {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ActorDetail::ExternalNodeWatcher(d) => sorted_json(d, s),
            ActorDetail::InterfaceManager(d) => sorted_json(d, s),
            ActorDetail::PolicyCache(d) => sorted_json(d, s),
            ActorDetail::FlowInstaller(d) => sorted_json(d, s),
            ActorDetail::AgentInfoReporter(d) => sorted_json(d, s),
        }
    }
}

/// Serializes `value` with the keys of every object sorted, at every depth: what a `json!` value
/// gave, so the typed details keep the exact text they had as `serde_json::Value`s. (Passes
/// through a `serde_json::Value`; only `agent-info.json` and the agent API serialize statuses, at
/// most once per report or request, and `/readyz` and `/metrics` read the fields directly.)
pub fn sorted_json<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// The ExternalNode watcher's view of its ExternalNode.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalNodeWatcherStatus {
    /// Interfaces of the current ExternalNode (0 while it is unknown or absent).
    pub interfaces: usize,
    pub namespace: String,
    pub node_name: String,
    /// The source, in words (file path or kube-apiserver).
    pub source: String,
    pub state: ExternalNodeState,
}

/// Whether the ExternalNode has been read, and whether it exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExternalNodeState {
    /// Not read yet.
    #[default]
    Unknown,
    /// Read: there is no such ExternalNode.
    Absent,
    Present,
}

/// The interface manager's attached interfaces and its last errors.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceManagerStatus {
    /// The errors of the last reconcile pass (one per interface that could not be attached).
    pub errors: Vec<StatusError>,
    pub external_node_known: bool,
    pub interfaces: Vec<AttachedInterface>,
    /// The interface records left by the previous run were recovered (finished or rolled back).
    pub recovered: bool,
    /// The last failed write of an interface record, until a write succeeds.
    pub state_write_error: Option<StatusError>,
}

/// The policy cache's store and resolved view.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCacheStatus {
    pub address_groups: usize,
    pub applied_to_groups: usize,
    /// Every antrea-controller watch is connected; `None` when the policies do not come from
    /// antrea-controller (standalone).
    pub controller_connected: Option<bool>,
    pub interfaces_known: bool,
    /// The ExternalEntities (`namespace/name`) of the attached interfaces.
    pub local_entities: Vec<String>,
    pub network_policies: usize,
    /// The policy source delivered its first complete view.
    pub policies_known: bool,
    /// Rules that apply to this node.
    pub rules: usize,
    /// The problems the policy source reports now.
    pub source_errors: Vec<StatusError>,
    pub sync_epoch: u64,
    /// Resolution warnings (kind `policy_resolution`).
    pub warnings: Vec<StatusError>,
}

/// The flow installer's OpenFlow session and what it installed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowInstallerStatus {
    /// It holds an OpenFlow session with the bridge.
    pub connected: bool,
    /// The non-policy flows it installed (cross-connects and the fixed pipeline).
    pub flow_count: usize,
    /// Table name → flows, policy flows included once the session is synced.
    pub flows_per_table: BTreeMap<String, usize>,
    /// The FQDN controller's counters.
    pub fqdn: FqdnCounts,
    /// Whether the switch supports meters; `None` without a session.
    pub meters: Option<bool>,
    /// The NetworkPolicy packet-in counters of the current connection.
    pub packet_ins: PacketInCounts,
    /// The session's round (flow cookies); `None` without a session.
    pub round: Option<u16>,
    /// The first full sync on this session is committed.
    pub synced: bool,
}

/// The reporter's last report and, in Kubernetes mode, its writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReporterStatus {
    /// `None` in standalone mode.
    pub kubernetes: Option<KubernetesWrites>,
    /// Unix seconds of the last assembled agent info.
    pub last_report: Option<u64>,
    pub mode: ReporterMode,
}

/// Where the reporter writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReporterMode {
    /// Local files and the agent API only.
    #[default]
    Standalone,
    /// Also AntreaAgentInfo, NetworkPolicyStatus and NodeStatsSummary.
    Kubernetes,
}

/// The results of the writes to the Kubernetes API (also in `agent-info.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesWrites {
    pub agent_info: AgentInfoWrites,
    pub policy_status: PolicyStatusWrites,
    pub stats: StatsWrites,
}

/// AntreaAgentInfo updates.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfoWrites {
    /// The server's copy from the last successful PUT is held.
    pub cached: bool,
    pub log: WriteLog,
    pub resource_version: Option<String>,
}

/// NetworkPolicyStatus posts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatusWrites {
    pub enabled: bool,
    pub log: WriteLog,
    pub state: PosterSummary,
}

/// NodeStatsSummary posts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsWrites {
    /// The rule counters' baseline is taken (the first read posts nothing).
    pub baseline: bool,
    pub enabled: bool,
    pub log: WriteLog,
}

#[cfg(test)]
mod tests {
    //! Each expected value is written as the actor wrote its detail before it was typed: the
    //! same `json!` keys and values, compared as text (key order included, at every depth).

    use std::net::IpAddr;

    use serde_json::json;

    use super::*;
    use crate::messages::{EntityRef, ErrorKind};

    fn same_text(typed: &impl Serialize, before: serde_json::Value) {
        let typed = serde_json::to_string(typed).expect("serializes");
        let before = serde_json::to_string(&before).expect("serializes");
        assert_eq!(typed, before);
    }

    #[test]
    fn external_node_watcher_json_is_unchanged() {
        let s = ExternalNodeWatcherStatus {
            interfaces: 2,
            namespace: "vm-ns".into(),
            node_name: "vm1".into(),
            source: "file /etc/antrea/external-node.yaml".into(),
            state: ExternalNodeState::Present,
        };
        same_text(
            &ActorDetail::ExternalNodeWatcher(s),
            json!({
                "source": "file /etc/antrea/external-node.yaml",
                "nodeName": "vm1",
                "namespace": "vm-ns",
                "state": "present",
                "interfaces": 2,
            }),
        );
        for (state, word) in [
            (ExternalNodeState::Unknown, "unknown"),
            (ExternalNodeState::Absent, "absent"),
        ] {
            assert_eq!(serde_json::to_value(state).expect("serializes"), json!(word));
        }
    }

    #[test]
    fn interface_manager_json_is_unchanged() {
        let eth0 = AttachedInterface {
            name: "eth0".into(),
            ofport: 3,
            uplink_name: "eth0~".into(),
            uplink_ofport: 2,
            ips: vec!["10.0.0.2".parse::<IpAddr>().expect("ip")],
            entity: EntityRef {
                namespace: "vm-ns".into(),
                name: "vm1-eth0".into(),
            },
        };
        let s = InterfaceManagerStatus {
            errors: vec![StatusError::new(ErrorKind::InterfaceAttach, "eth1: not found")],
            external_node_known: true,
            interfaces: vec![eth0],
            recovered: true,
            state_write_error: Some(StatusError::new(ErrorKind::StateFile, "disk full")),
        };
        same_text(
            &ActorDetail::InterfaceManager(s),
            json!({
                "recovered": true,
                "externalNodeKnown": true,
                "interfaces": [{
                    "name": "eth0", "ofport": 3, "uplink_name": "eth0~", "uplink_ofport": 2,
                    "ips": ["10.0.0.2"], "entity": {"namespace": "vm-ns", "name": "vm1-eth0"}
                }],
                "errors": [{"kind": "interface_attach", "message": "eth1: not found"}],
                "stateWriteError": {"kind": "state_file", "message": "disk full"},
            }),
        );
    }

    #[test]
    fn policy_cache_json_is_unchanged() {
        let s = PolicyCacheStatus {
            address_groups: 4,
            applied_to_groups: 5,
            controller_connected: Some(true),
            interfaces_known: true,
            local_entities: vec!["vm-ns/vm1-eth0".into()],
            network_policies: 6,
            policies_known: true,
            rules: 7,
            source_errors: vec![StatusError::new(
                ErrorKind::PolicySource,
                "policy file /p/a.yaml: holds no objects",
            )],
            sync_epoch: 8,
            warnings: vec![StatusError::new(ErrorKind::PolicyResolution, "w")],
        };
        same_text(
            &ActorDetail::PolicyCache(s),
            json!({
                "policiesKnown": true,
                "controllerConnected": true,
                "addressGroups": 4,
                "appliedToGroups": 5,
                "syncEpoch": 8,
                "interfacesKnown": true,
                "localEntities": ["vm-ns/vm1-eth0"],
                "networkPolicies": 6,
                "rules": 7,
                "warnings": [{"kind": "policy_resolution", "message": "w"}],
                "sourceErrors": [{"kind": "policy_source", "message": "policy file /p/a.yaml: holds no objects"}],
            }),
        );
        let standalone = PolicyCacheStatus::default();
        assert_eq!(
            serde_json::to_value(&standalone).expect("serializes")["controllerConnected"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn flow_installer_json_is_unchanged() {
        let fqdn = FqdnCounts {
            responses: 1,
            cache_size: 2,
            evictions: BTreeMap::from([("expired".to_string(), 3)]),
            ..FqdnCounts::default()
        };
        let packet_ins = PacketInCounts {
            received: 9,
            rejected: 1,
            ..PacketInCounts::default()
        };
        let s = FlowInstallerStatus {
            connected: true,
            flow_count: 11,
            flows_per_table: BTreeMap::from([("Output".to_string(), 2), ("NonIP".to_string(), 3)]),
            fqdn: fqdn.clone(),
            meters: Some(false),
            packet_ins: packet_ins.clone(),
            round: Some(12),
            synced: true,
        };
        let flows_per_table: BTreeMap<String, usize> =
            BTreeMap::from([("Output".to_string(), 2), ("NonIP".to_string(), 3)]);
        same_text(
            &ActorDetail::FlowInstaller(s),
            json!({
                "connected": true,
                "synced": true,
                "round": Some(12u16),
                "meters": Some(false),
                "flowCount": 11,
                "flowsPerTable": flows_per_table,
                "packetIns": packet_ins,
                "fqdn": fqdn,
            }),
        );
        let unconnected = FlowInstallerStatus::default();
        same_text(
            &ActorDetail::FlowInstaller(unconnected),
            json!({
                "connected": false,
                "synced": false,
                "round": None::<u16>,
                "meters": None::<bool>,
                "flowCount": 0,
                "flowsPerTable": {},
                "packetIns": PacketInCounts::default(),
                "fqdn": FqdnCounts::default(),
            }),
        );
    }

    #[test]
    fn reporter_json_is_unchanged() {
        let standalone = ReporterStatus {
            kubernetes: None,
            last_report: Some(1_700_000_000),
            mode: ReporterMode::Standalone,
        };
        same_text(
            &ActorDetail::AgentInfoReporter(standalone),
            json!({
                "lastReport": Some(1_700_000_000u64),
                "mode": "standalone",
                "kubernetes": null,
            }),
        );
        let log = WriteLog {
            last_attempt: Some("2026-08-21T10:15:30Z".into()),
            last_error: Some(StatusError::new(ErrorKind::KubeApi, "refused")),
            failures: 1,
            ..WriteLog::default()
        };
        let summary = PosterSummary {
            epoch: Some(3),
            posted: 1,
            ..PosterSummary::default()
        };
        let writes = KubernetesWrites {
            agent_info: AgentInfoWrites {
                cached: true,
                log: log.clone(),
                resource_version: Some("834411".into()),
            },
            policy_status: PolicyStatusWrites {
                enabled: true,
                log: WriteLog::default(),
                state: summary.clone(),
            },
            stats: StatsWrites {
                baseline: false,
                enabled: false,
                log: log.clone(),
            },
        };
        let kubernetes = ReporterStatus {
            kubernetes: Some(writes),
            last_report: None,
            mode: ReporterMode::Kubernetes,
        };
        same_text(
            &ActorDetail::AgentInfoReporter(kubernetes),
            json!({
                "lastReport": None::<u64>,
                "mode": "kubernetes",
                "kubernetes": {
                    "agentInfo": {
                        "log": log,
                        "cached": true,
                        "resourceVersion": Some("834411"),
                    },
                    "policyStatus": {
                        "enabled": true,
                        "log": WriteLog::default(),
                        "state": summary,
                    },
                    "stats": {
                        "enabled": false,
                        "log": log,
                        "baseline": false,
                    },
                },
            }),
        );
    }
}
