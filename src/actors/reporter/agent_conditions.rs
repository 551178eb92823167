//! The reporter's reading of the actors' answers for AntreaAgentInfo: the four conditions, the
//! flow count per table and the policy cache's sizes, decided from their [`ActorStatus`]es. Pure;
//! it sits with the reporter (above `messages`) so the Kubernetes side (`k8s::agent_info`) takes
//! its inputs as plain values and knows nothing of the actors.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::k8s::agent_info::{
    rfc3339, AgentCondition, ConditionStatus, ConditionType, NetworkPolicyControllerInfo, OvsdbProbe,
};
use crate::messages::{ActorKind, ActorStatus};

/// The four conditions, decided from the actors' answers:
/// * `AgentHealthy`: True iff every queried actor answered its status query (the actor system is
///   alive and responsive); False otherwise, naming the silent ones. Upstream always sends True and
///   relies on the heartbeat time; a False here is strictly more information.
/// * `ControllerConnectionUp`: the policy cache's `controllerConnected` — True iff all three
///   controlplane watches are connected, False if any is not, Unknown when the policy source has no
///   connection (standalone) or the policy cache did not answer.
/// * `OVSDBConnectionUp`: True iff OVSDB answered the reporter's probe at this report.
/// * `OpenflowConnectionUp`: the flow installer's `connected` (it holds an OpenFlow session);
///   Unknown when the flow installer did not answer.
pub fn conditions(
    statuses: &[ActorStatus],
    unresponsive: &[ActorKind],
    ovsdb: &OvsdbProbe,
    now: DateTime<Utc>,
) -> Vec<AgentCondition> {
    let heartbeat = rfc3339(now);
    let policy_cache = statuses.iter().find_map(|s| s.detail.policy_cache());
    let flow_installer = statuses.iter().find_map(|s| s.detail.flow_installer());
    let make = |type_, status, reason: &str, message: String| AgentCondition {
        type_,
        status,
        last_heartbeat_time: heartbeat.clone(),
        reason: reason.into(),
        message,
    };
    let healthy = if unresponsive.is_empty() {
        make(
            ConditionType::AgentHealthy,
            ConditionStatus::True,
            "",
            String::new(),
        )
    } else {
        let names: Vec<&str> = unresponsive.iter().map(|k| k.as_str()).collect();
        make(
            ConditionType::AgentHealthy,
            ConditionStatus::False,
            "ActorsUnresponsive",
            format!("no status from {}", names.join(", ")),
        )
    };
    let controller = match policy_cache.map(|p| p.controller_connected) {
        Some(Some(true)) => make(
            ConditionType::ControllerConnectionUp,
            ConditionStatus::True,
            "",
            String::new(),
        ),
        Some(Some(false)) => make(
            ConditionType::ControllerConnectionUp,
            ConditionStatus::False,
            "WatchesDisconnected",
            "not every controlplane watch is connected".into(),
        ),
        Some(None) => make(
            ConditionType::ControllerConnectionUp,
            ConditionStatus::Unknown,
            "NoController",
            "policies do not come from antrea-controller".into(),
        ),
        None => make(
            ConditionType::ControllerConnectionUp,
            ConditionStatus::Unknown,
            "PolicyCacheUnresponsive",
            String::new(),
        ),
    };
    let ovsdb = match ovsdb {
        OvsdbProbe::Up { .. } => make(
            ConditionType::OvsdbConnectionUp,
            ConditionStatus::True,
            "",
            String::new(),
        ),
        OvsdbProbe::Down(e) => make(
            ConditionType::OvsdbConnectionUp,
            ConditionStatus::False,
            "OVSDBUnreachable",
            e.clone(),
        ),
    };
    let openflow = match flow_installer.map(|f| f.connected) {
        Some(true) => make(
            ConditionType::OpenflowConnectionUp,
            ConditionStatus::True,
            "",
            String::new(),
        ),
        Some(false) => make(
            ConditionType::OpenflowConnectionUp,
            ConditionStatus::False,
            "SwitchDisconnected",
            "no OpenFlow session with the bridge".into(),
        ),
        None => make(
            ConditionType::OpenflowConnectionUp,
            ConditionStatus::Unknown,
            "FlowInstallerUnresponsive",
            String::new(),
        ),
    };
    vec![healthy, controller, ovsdb, openflow]
}

/// Table name → flow count from the flow installer's `flowsPerTable` detail.
pub fn flow_table(statuses: &[ActorStatus]) -> BTreeMap<String, i32> {
    statuses
        .iter()
        .find_map(|s| s.detail.flow_installer())
        .map(|f| {
            f.flows_per_table
                .iter()
                .map(|(k, n)| (k.clone(), i32::try_from(*n).unwrap_or(i32::MAX)))
                .collect()
        })
        .unwrap_or_default()
}

/// The policy cache's three cache sizes.
pub fn policy_info(statuses: &[ActorStatus]) -> NetworkPolicyControllerInfo {
    let Some(p) = statuses.iter().find_map(|s| s.detail.policy_cache()) else {
        return NetworkPolicyControllerInfo::default();
    };
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    NetworkPolicyControllerInfo {
        network_policy_num: count(p.network_policies),
        address_group_num: count(p.address_groups),
        applied_to_group_num: count(p.applied_to_groups),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::agent_info::ConditionTracker;
    use crate::messages::{ActorDetail, FlowInstallerStatus, PolicyCacheStatus};

    fn time() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-08-21T10:15:30Z")
            .expect("test time")
            .with_timezone(&Utc)
    }

    fn statuses() -> Vec<ActorStatus> {
        vec![
            ActorStatus::new(
                true,
                None,
                ActorDetail::PolicyCache(PolicyCacheStatus {
                    controller_connected: Some(true),
                    network_policies: 1,
                    address_groups: 1,
                    applied_to_groups: 1,
                    ..PolicyCacheStatus::default()
                }),
            ),
            ActorStatus::new(
                true,
                None,
                ActorDetail::FlowInstaller(FlowInstallerStatus {
                    connected: true,
                    flows_per_table: BTreeMap::from([("NonIP".to_string(), 2), ("Output".to_string(), 2)]),
                    ..FlowInstallerStatus::default()
                }),
            ),
        ]
    }

    fn policy_cache(s: &mut ActorStatus) -> &mut PolicyCacheStatus {
        match &mut s.detail {
            ActorDetail::PolicyCache(p) => p,
            other => panic!("not the policy cache: {other:?}"),
        }
    }

    fn flow_installer(s: &mut ActorStatus) -> &mut FlowInstallerStatus {
        match &mut s.detail {
            ActorDetail::FlowInstaller(f) => f,
            other => panic!("not the flow installer: {other:?}"),
        }
    }

    #[test]
    fn flow_table_and_policy_info_read_the_flow_installer_and_the_policy_cache() {
        let st = statuses();
        assert_eq!(
            flow_table(&st),
            BTreeMap::from([("NonIP".to_string(), 2), ("Output".to_string(), 2)])
        );
        assert_eq!(
            policy_info(&st),
            NetworkPolicyControllerInfo {
                network_policy_num: 1,
                address_group_num: 1,
                applied_to_group_num: 1,
            }
        );
        assert!(flow_table(&st[..1]).is_empty());
        assert_eq!(policy_info(&st[1..]), NetworkPolicyControllerInfo::default());
    }

    #[test]
    fn conditions_follow_the_actors() {
        let mut st = statuses();
        policy_cache(&mut st[0]).controller_connected = Some(false);
        flow_installer(&mut st[1]).connected = false;
        let c = conditions(
            &st,
            &[ActorKind::InterfaceManager],
            &OvsdbProbe::Down("refused".into()),
            time(),
        );
        let got: Vec<_> = c.iter().map(|c| (c.type_, c.status)).collect();
        assert_eq!(
            got,
            vec![
                (ConditionType::AgentHealthy, ConditionStatus::False),
                (ConditionType::ControllerConnectionUp, ConditionStatus::False),
                (ConditionType::OvsdbConnectionUp, ConditionStatus::False),
                (ConditionType::OpenflowConnectionUp, ConditionStatus::False),
            ]
        );
        assert!(c[0].message.contains("interface-manager"));
        assert_eq!(c[2].message, "refused");
        // Standalone policy source: no controller connection at all.
        policy_cache(&mut st[0]).controller_connected = None;
        let c = conditions(&st[..1], &[], &OvsdbProbe::Up { version: None }, time());
        assert_eq!(c[1].status, ConditionStatus::Unknown);
        assert_eq!(c[3].status, ConditionStatus::Unknown);
    }

    #[test]
    fn transition_times_move_only_when_the_status_changes() {
        let mut tracker = ConditionTracker::default();
        let t0 = time();
        let t1 = t0 + chrono::Duration::seconds(60);
        let t2 = t1 + chrono::Duration::seconds(60);
        let up = OvsdbProbe::Up { version: None };
        let down = OvsdbProbe::Down("x".into());
        let st = statuses();
        let r0 = tracker.update(&conditions(&st, &[], &up, t0));
        assert_eq!(r0[2].last_transition_time, "2026-08-21T10:15:30Z");
        let r1 = tracker.update(&conditions(&st, &[], &up, t1));
        assert_eq!(r1[2].last_transition_time, "2026-08-21T10:15:30Z");
        assert_eq!(r1[2].condition.last_heartbeat_time, "2026-08-21T10:16:30Z");
        let r2 = tracker.update(&conditions(&st, &[], &down, t2));
        assert_eq!(r2[2].last_transition_time, "2026-08-21T10:17:30Z");
        assert_eq!(r2[0].last_transition_time, "2026-08-21T10:15:30Z");
        let v = serde_json::to_value(&r2[2]).expect("encodes");
        assert_eq!(v["type"], "OVSDBConnectionUp");
        assert_eq!(v["lastTransitionTime"], "2026-08-21T10:17:30Z");
    }
}
