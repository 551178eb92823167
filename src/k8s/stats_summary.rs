//! NodeStatsSummary write-back to antrea-controller (feature gate `NetworkPolicyStats`): the
//! wire types, the aggregation of the flow installer's per-rule counters by policy (K8s
//! NetworkPolicies per policy UID; Antrea ClusterNetworkPolicies and NetworkPolicies per UID and
//! rule name), and the pure delta computation against the last successfully reported collection.
//! The reporter actor owns the baseline and does the POST.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::report::RuleStatsSnapshot;
use crate::policy::rule::PolicyType;

/// `POST` path (the controller's `create` on `nodestatssummaries`).
pub const PATH: &str = "/apis/controlplane.antrea.io/v1beta2/nodestatssummaries";

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `stats.antrea.io/v1alpha1` TrafficStats; every counter is omitted when zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficStats {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub packets: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sessions: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleTrafficStats {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default)]
    pub traffic_stats: TrafficStats,
}

/// The agent fills only `uid` (the controller aggregates by UID).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicyReference {
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// `trafficStats` is a Go struct, so it is always present (empty `{}` for Antrea-native
/// policies, whose counters are per rule).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicyStats {
    pub network_policy: NetworkPolicyReference,
    #[serde(default)]
    pub traffic_stats: TrafficStats,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_traffic_stats: Vec<RuleTrafficStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `controlplane.antrea.io/v1beta2` NodeStatsSummary. `metadata.name` is the bare node name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatsSummary {
    pub kind: String,
    pub api_version: String,
    pub metadata: SummaryMeta,
    /// K8s NetworkPolicies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_policies: Vec<NetworkPolicyStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub antrea_cluster_network_policies: Vec<NetworkPolicyStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub antrea_network_policies: Vec<NetworkPolicyStats>,
}

/// Counters of one policy (K8s NP) or one rule (ACNP/ANNP), as read from the switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
    pub sessions: u64,
}

impl Counters {
    fn add(&mut self, packets: u64, bytes: u64, sessions: u64) {
        self.packets = self.packets.saturating_add(packets);
        self.bytes = self.bytes.saturating_add(bytes);
        self.sessions = self.sessions.saturating_add(sessions);
    }

    fn to_wire(self) -> TrafficStats {
        let c = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        TrafficStats {
            packets: c(self.packets),
            bytes: c(self.bytes),
            sessions: c(self.sessions),
        }
    }

    /// What happened since `last`: the difference, or — when the byte counter went down (flows
    /// reinstalled, policy re-created) or there was no `last` — the current value. `None` when no
    /// byte moved.
    fn delta(self, last: Option<Counters>) -> Option<Counters> {
        let d = match last {
            Some(l) if self.bytes >= l.bytes => Counters {
                packets: self.packets.saturating_sub(l.packets),
                bytes: self.bytes - l.bytes,
                sessions: self.sessions.saturating_sub(l.sessions),
            },
            _ => self,
        };
        (d.bytes != 0).then_some(d)
    }
}

/// The switch's counters at one moment, by policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collection {
    /// K8s NetworkPolicy UID → counters summed over its rules.
    pub k8s: BTreeMap<String, Counters>,
    /// ACNP UID → rule name → counters.
    pub acnp: BTreeMap<String, BTreeMap<String, Counters>>,
    /// ANNP UID → rule name → counters.
    pub annp: BTreeMap<String, BTreeMap<String, Counters>>,
}

impl Collection {
    /// Aggregates a snapshot of rule counters. Admin and baseline admin NetworkPolicies have no
    /// place in a NodeStatsSummary and are left out (as upstream).
    pub fn from_snapshot(snapshot: &RuleStatsSnapshot) -> Self {
        let mut c = Collection::default();
        for r in &snapshot.rules {
            let uid = r.policy.uid.clone();
            let per_rule = match r.policy.policy_type {
                PolicyType::K8sNetworkPolicy => {
                    c.k8s.entry(uid).or_default().add(r.packets, r.bytes, r.sessions);
                    continue;
                }
                PolicyType::AntreaClusterNetworkPolicy => &mut c.acnp,
                PolicyType::AntreaNetworkPolicy => &mut c.annp,
                PolicyType::AdminNetworkPolicy | PolicyType::BaselineAdminNetworkPolicy => continue,
            };
            per_rule
                .entry(uid)
                .or_default()
                .entry(r.rule_name.clone())
                .or_default()
                .add(r.packets, r.bytes, r.sessions);
        }
        c
    }
}

fn policy_ref(uid: &str) -> NetworkPolicyReference {
    NetworkPolicyReference {
        uid: uid.to_string(),
        ..NetworkPolicyReference::default()
    }
}

fn rule_deltas(
    cur: &BTreeMap<String, BTreeMap<String, Counters>>,
    last: &BTreeMap<String, BTreeMap<String, Counters>>,
) -> Vec<NetworkPolicyStats> {
    cur.iter()
        .filter_map(|(uid, rules)| {
            let last_rules = last.get(uid);
            let rule_traffic_stats: Vec<RuleTrafficStats> = rules
                .iter()
                .filter_map(|(name, c)| {
                    let l = last_rules.and_then(|m| m.get(name)).copied();
                    c.delta(l).map(|d| RuleTrafficStats {
                        name: name.clone(),
                        traffic_stats: d.to_wire(),
                    })
                })
                .collect();
            (!rule_traffic_stats.is_empty()).then(|| NetworkPolicyStats {
                network_policy: policy_ref(uid),
                traffic_stats: TrafficStats::default(),
                rule_traffic_stats,
            })
        })
        .collect()
}

/// The summary to post for the traffic between `last` (the last successfully reported
/// collection) and `cur`, or `None` when nothing moved. Entries are sorted by UID and rule name.
pub fn summary(node_name: &str, cur: &Collection, last: &Collection) -> Option<NodeStatsSummary> {
    let network_policies: Vec<NetworkPolicyStats> = cur
        .k8s
        .iter()
        .filter_map(|(uid, c)| {
            c.delta(last.k8s.get(uid).copied()).map(|d| NetworkPolicyStats {
                network_policy: policy_ref(uid),
                traffic_stats: d.to_wire(),
                rule_traffic_stats: Vec::new(),
            })
        })
        .collect();
    let antrea_cluster_network_policies = rule_deltas(&cur.acnp, &last.acnp);
    let antrea_network_policies = rule_deltas(&cur.annp, &last.annp);
    if network_policies.is_empty()
        && antrea_cluster_network_policies.is_empty()
        && antrea_network_policies.is_empty()
    {
        return None;
    }
    Some(NodeStatsSummary {
        kind: "NodeStatsSummary".into(),
        api_version: "controlplane.antrea.io/v1beta2".into(),
        metadata: SummaryMeta {
            name: node_name.to_string(),
        },
        network_policies,
        antrea_cluster_network_policies,
        antrea_network_policies,
    })
}

/// The reporting cycle's memory: the first collection is only a baseline; later ones are
/// compared with the last collection that was reported successfully (or had nothing to report),
/// so a failed POST does not lose its period.
#[derive(Clone, Debug, Default)]
pub struct StatsBaseline {
    last: Option<Collection>,
}

/// What to do with a fresh collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsStep {
    /// It became the baseline; nothing to send.
    Baseline,
    /// Nothing moved since the baseline (which is advanced).
    Nothing,
    /// POST this; call [`StatsBaseline::reported`] with the collection if it succeeds.
    Post(Box<NodeStatsSummary>),
}

impl StatsBaseline {
    pub fn has_baseline(&self) -> bool {
        self.last.is_some()
    }

    pub fn step(&mut self, node_name: &str, cur: &Collection) -> StatsStep {
        let Some(last) = &self.last else {
            self.last = Some(cur.clone());
            return StatsStep::Baseline;
        };
        match summary(node_name, cur, last) {
            Some(s) => StatsStep::Post(Box::new(s)),
            None => {
                // Nothing moved by a byte; advancing keeps the comparison with what is installed
                // now (rules that went away no longer matter).
                self.last = Some(cur.clone());
                StatsStep::Nothing
            }
        }
    }

    /// The POST of the summary computed from `cur` succeeded.
    pub fn reported(&mut self, cur: Collection) {
        self.last = Some(cur);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::report::RuleStats;
    use crate::policy::rule::{Direction, PolicyRef, RuleAction};
    use serde_json::{json, Value};

    fn rule(ty: PolicyType, uid: &str, name: &str, packets: u64, bytes: u64, sessions: u64) -> RuleStats {
        RuleStats {
            policy: PolicyRef {
                policy_type: ty,
                namespace: String::new(),
                name: uid.into(),
                uid: uid.into(),
            },
            rule_name: name.into(),
            direction: Direction::In,
            action: RuleAction::Allow,
            tier_priority: 250,
            packets,
            bytes,
            sessions,
        }
    }

    fn collection(rules: Vec<RuleStats>) -> Collection {
        Collection::from_snapshot(&RuleStatsSnapshot { rules })
    }

    #[test]
    fn the_reference_example_decodes_and_reencodes_unchanged() {
        let reference: Value = json!({
          "kind": "NodeStatsSummary",
          "apiVersion": "controlplane.antrea.io/v1beta2",
          "metadata": {"name": "vm1"},
          "antreaNetworkPolicies": [
            {
              "networkPolicy": {"uid": "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10"},
              "trafficStats": {},
              "ruleTrafficStats": [
                {"name": "ingress-reject-3f2a1b9", "trafficStats": {"packets": 12, "bytes": 720, "sessions": 3}}
              ]
            }
          ]
        });
        let s: NodeStatsSummary = serde_json::from_value(reference.clone()).expect("decodes");
        assert_eq!(serde_json::to_value(&s).expect("encodes"), reference);
        // And our computation produces exactly it from a baseline of zero.
        let cur = collection(vec![rule(
            PolicyType::AntreaNetworkPolicy,
            "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10",
            "ingress-reject-3f2a1b9",
            12,
            720,
            3,
        )]);
        let built = summary("vm1", &cur, &Collection::default()).expect("something moved");
        assert_eq!(serde_json::to_value(&built).expect("encodes"), reference);
    }

    #[test]
    fn policies_go_to_their_lists_and_k8s_counters_add_up_per_policy() {
        let cur = collection(vec![
            rule(PolicyType::K8sNetworkPolicy, "k", "r1", 1, 100, 1),
            rule(PolicyType::K8sNetworkPolicy, "k", "r2", 2, 200, 1),
            rule(PolicyType::AntreaClusterNetworkPolicy, "c", "a", 3, 300, 2),
            rule(PolicyType::AntreaClusterNetworkPolicy, "c", "a", 1, 10, 0),
            rule(PolicyType::AntreaNetworkPolicy, "n", "b", 4, 400, 4),
            rule(PolicyType::AdminNetworkPolicy, "anp", "x", 9, 900, 9),
        ]);
        let v = serde_json::to_value(summary("vm1", &cur, &Collection::default()).expect("moved"))
            .expect("encodes");
        assert_eq!(
            v,
            json!({
                "kind": "NodeStatsSummary", "apiVersion": "controlplane.antrea.io/v1beta2",
                "metadata": {"name": "vm1"},
                "networkPolicies": [{"networkPolicy": {"uid": "k"}, "trafficStats": {"packets": 3, "bytes": 300, "sessions": 2}}],
                "antreaClusterNetworkPolicies": [{"networkPolicy": {"uid": "c"}, "trafficStats": {},
                    "ruleTrafficStats": [{"name": "a", "trafficStats": {"packets": 4, "bytes": 310, "sessions": 2}}]}],
                "antreaNetworkPolicies": [{"networkPolicy": {"uid": "n"}, "trafficStats": {},
                    "ruleTrafficStats": [{"name": "b", "trafficStats": {"packets": 4, "bytes": 400, "sessions": 4}}]}]
            })
        );
    }

    #[test]
    fn deltas_skip_unchanged_and_report_the_current_value_after_a_reset() {
        let last = collection(vec![
            rule(PolicyType::K8sNetworkPolicy, "k", "r", 10, 1000, 5),
            rule(PolicyType::AntreaNetworkPolicy, "n", "same", 1, 100, 1),
            rule(PolicyType::AntreaNetworkPolicy, "n", "grew", 1, 100, 1),
            rule(PolicyType::AntreaNetworkPolicy, "n", "reset", 10, 1000, 5),
        ]);
        let cur = collection(vec![
            rule(PolicyType::K8sNetworkPolicy, "k", "r", 10, 1000, 5),
            rule(PolicyType::AntreaNetworkPolicy, "n", "same", 1, 100, 1),
            rule(PolicyType::AntreaNetworkPolicy, "n", "grew", 3, 400, 2),
            rule(PolicyType::AntreaNetworkPolicy, "n", "reset", 2, 80, 1),
            rule(PolicyType::AntreaNetworkPolicy, "n", "zero", 0, 0, 0),
        ]);
        let s = summary("vm1", &cur, &last).expect("moved");
        assert!(s.network_policies.is_empty());
        assert_eq!(s.antrea_network_policies.len(), 1);
        let rules: Vec<(&str, TrafficStats)> = s.antrea_network_policies[0]
            .rule_traffic_stats
            .iter()
            .map(|r| (r.name.as_str(), r.traffic_stats))
            .collect();
        assert_eq!(
            rules,
            vec![
                (
                    "grew",
                    TrafficStats {
                        packets: 2,
                        bytes: 300,
                        sessions: 1
                    }
                ),
                (
                    "reset",
                    TrafficStats {
                        packets: 2,
                        bytes: 80,
                        sessions: 1
                    }
                ),
            ]
        );
        assert_eq!(summary("vm1", &last, &last), None);
    }

    #[test]
    fn the_first_collection_is_a_baseline_and_a_failed_post_keeps_it() {
        let mut b = StatsBaseline::default();
        let c0 = collection(vec![rule(PolicyType::K8sNetworkPolicy, "k", "r", 1, 100, 1)]);
        let c1 = collection(vec![rule(PolicyType::K8sNetworkPolicy, "k", "r", 2, 150, 1)]);
        let c2 = collection(vec![rule(PolicyType::K8sNetworkPolicy, "k", "r", 4, 400, 2)]);
        assert_eq!(b.step("vm1", &c0), StatsStep::Baseline);
        let StatsStep::Post(s1) = b.step("vm1", &c1) else {
            panic!("expected a post")
        };
        assert_eq!(s1.network_policies[0].traffic_stats.bytes, 50);
        // That POST failed: the next one covers both periods.
        let StatsStep::Post(s2) = b.step("vm1", &c2) else {
            panic!("expected a post")
        };
        assert_eq!(
            s2.network_policies[0].traffic_stats,
            TrafficStats {
                packets: 3,
                bytes: 300,
                sessions: 1
            }
        );
        b.reported(c2.clone());
        assert_eq!(b.step("vm1", &c2), StatsStep::Nothing);
    }

    #[test]
    fn an_empty_node_name_leaves_metadata_empty() {
        let cur = collection(vec![rule(PolicyType::K8sNetworkPolicy, "k", "r", 1, 1, 1)]);
        let v =
            serde_json::to_value(summary("", &cur, &Collection::default()).expect("moved")).expect("encodes");
        assert_eq!(v["metadata"], json!({}));
    }
}
