//! The JSON documents of the agent API (`/networkpolicies`, `/appliedtogroups`, `/addressgroups`,
//! `/ovsflows`, `/agentinfo`, `/interfaces`, `/fqdncache`): plain serde types shared by the
//! policy cache and the server, which build them (the policy cache its policy and group views, the
//! server the rest from actor snapshots), and the `get` client, which reads them back. They sit
//! below the actors, beside `messages` (docs/architecture.md §5.3, rule 9); `api::views`
//! re-exports them. Field names are camelCase like Antrea's API; the conversions from the
//! validated controlplane views are pure.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error_kind::StatusError;
use crate::policy::controlplane::{self as cp, Group, MemberRef, PortMatch, ServiceMatch};

/// An error answer: `{"error": "..."}` with a 4xx/5xx status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}

/// The policy a controlplane NetworkPolicy was computed from (`sourceRef`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRefView {
    #[serde(rename = "type")]
    pub policy_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl SourceRefView {
    /// `namespace/name`, or `name` for cluster-scoped policies.
    pub fn qualified_name(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    /// Antrea's short type names, as antctl's SOURCE column shows them.
    pub fn short_type(&self) -> &str {
        match self.policy_type.as_str() {
            "K8sNetworkPolicy" => "K8sNP",
            "AntreaClusterNetworkPolicy" => "AntreaClusterNetworkPolicy",
            "AntreaNetworkPolicy" => "AntreaNetworkPolicy",
            "AdminNetworkPolicy" => "AdminNetworkPolicy",
            "BaselineAdminNetworkPolicy" => "BaselineAdminNetworkPolicy",
            other => other,
        }
    }
}

/// `ipBlocks[]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpBlockView {
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<String>,
}

/// A rule's `from` (ingress) or `to` (egress).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerView {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub address_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_blocks: Vec<IpBlockView>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fqdns: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_services: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub label_identities: Vec<u32>,
}

/// The counters of one rule, from its metric flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleCounters {
    pub packets: u64,
    pub bytes: u64,
    pub sessions: u64,
}

/// One rule of a NetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    #[serde(default)]
    pub name: String,
    /// `In` or `Out`.
    pub direction: String,
    /// `Allow`, `Drop`, `Reject` or `Pass`.
    pub action: String,
    /// Index among the policy's rules of this direction.
    pub priority: u32,
    /// Ingress peers (`direction: In`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<PeerView>,
    /// Egress peers (`direction: Out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<PeerView>,
    /// `TCP/22`, `UDP/6000-6010`, `TCP/http` (named), `ICMP type=8 code=0`, ...; empty = any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_to_groups: Vec<String>,
    #[serde(default)]
    pub enable_logging: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_label: String,
    /// `HTTP GET /ok`, `TLS sni=api.example.com`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub l7_protocols: Vec<String>,
    /// The rule's counters summed over its installed flows; absent when the rule has no flows on
    /// this node or the switch could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<RuleCounters>,
    /// On this node: `Enforced`, `NotEnforcedAsWritten` (installed fail-closed, see
    /// `notEnforced`) or `NotApplied` (no applied-to member is an attached interface here).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Why the rule is not enforced as written, and what the agent does instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_enforced: Vec<String>,
}

/// [`RuleView::state`] values.
pub mod rule_state {
    pub const ENFORCED: &str = "Enforced";
    pub const NOT_ENFORCED_AS_WRITTEN: &str = "NotEnforcedAsWritten";
    pub const NOT_APPLIED: &str = "NotApplied";
}

/// One controlplane NetworkPolicy as the agent holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicyView {
    /// The controlplane `metadata.name` (antrea-controller sets it to the source policy's UID).
    pub name: String,
    pub uid: String,
    #[serde(default)]
    pub generation: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<SourceRefView>,
    #[serde(default)]
    pub applied_to_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_priority: Option<i32>,
    pub rules: Vec<RuleView>,
    /// Rules in effect on this node (their applied-to resolved to attached interfaces).
    #[serde(default)]
    pub effective_rules: usize,
    /// Set when the rule counters could not be read (the switch is not connected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_error: Option<String>,
}

impl NetworkPolicyView {
    /// The UID the rules and their counters name this policy by: the source policy's, else the
    /// controlplane object's.
    pub fn rules_uid(&self) -> &str {
        self.source_ref
            .as_ref()
            .map(|s| s.uid.as_str())
            .filter(|u| !u.is_empty())
            .unwrap_or(self.uid.as_str())
    }

    /// Whether `name` designates this policy: its controlplane name, UID, source name or
    /// `namespace/name` of its source.
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name
            || self.uid == name
            || self
                .source_ref
                .as_ref()
                .is_some_and(|s| s.name == name || s.uid == name || s.qualified_name() == name)
    }
}

/// A named port of a group member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamedPortView {
    pub name: String,
    pub port: u16,
    pub protocol: String,
}

/// One member of an AddressGroup or AppliedToGroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    /// `Pod`, `ExternalEntity`, `Node` or `Service`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<NamedPortView>,
}

impl MemberView {
    /// `Kind namespace/name` (or `Kind name`), never failing whatever the kind.
    pub fn reference(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// An AddressGroup or AppliedToGroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupView {
    pub name: String,
    pub uid: String,
    pub members: Vec<MemberView>,
}

/// An ExternalEntity reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityView {
    pub namespace: String,
    pub name: String,
}

/// One attached interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceView {
    /// The internal port (the NIC's original name).
    pub name: String,
    pub ofport: u32,
    pub uplink_name: String,
    pub uplink_ofport: u32,
    pub ips: Vec<IpAddr>,
    pub external_entity: EntityView,
}

impl From<&crate::attachment::AttachedInterface> for InterfaceView {
    fn from(i: &crate::attachment::AttachedInterface) -> Self {
        InterfaceView {
            name: i.name.clone(),
            ofport: i.ofport,
            uplink_name: i.uplink_name.clone(),
            uplink_ofport: i.uplink_ofport,
            ips: i.ips.clone(),
            external_entity: EntityView {
                namespace: i.entity.namespace.clone(),
                name: i.entity.name.clone(),
            },
        }
    }
}

/// `/ovsflows`: the flows the agent installed, rendered like `ovs-ofctl dump-flows --names
/// --no-stats`, sorted by table then priority (highest first).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowsView {
    /// The policy filter, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The conjunction ids of that policy's rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conjunction_ids: Vec<u32>,
    pub flows: Vec<String>,
}

/// One supervised actor in `/agentinfo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorView {
    pub actor: String,
    pub alive: bool,
    /// `None` when it did not answer the status query.
    #[serde(default)]
    pub healthy: Option<bool>,
    pub restarts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<StatusError>,
}

/// `/agentinfo`: antctl's agentinfo columns plus the agent's own health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfoView {
    pub version: String,
    pub node_name: String,
    pub namespace: String,
    pub ovs_bridge: String,
    /// `Healthy`, `Unhealthy` (an actor is down or unhealthy) or `Unknown` (no answer).
    pub status: String,
    /// `/readyz` would answer 200.
    pub ready: bool,
    pub network_policies: usize,
    pub address_groups: usize,
    pub applied_to_groups: usize,
    /// Always 0 on a VM (antctl's LOCAL-PODS column).
    pub local_pods: usize,
    pub interfaces: usize,
    pub flows: usize,
    /// `true`/`false` with an antrea-controller; absent in standalone mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_connected: Option<bool>,
    pub actors: Vec<ActorView>,
}

/// The tier names of Antrea's default tiers, by priority (`Tier` CRDs `emergency` ... `baseline`).
pub fn tier_name(priority: i32) -> Option<&'static str> {
    Some(match priority {
        50 => "Emergency",
        100 => "SecurityOps",
        150 => "NetworkOps",
        200 => "Platform",
        250 => "Application",
        253 => "Baseline",
        _ => return None,
    })
}

fn service_text(s: &ServiceMatch) -> String {
    // A named port without a protocol takes each member's: shown as `ANY/name`.
    let mut out = s.protocol.map_or("ANY", |p| p.as_str()).to_string();
    match &s.port {
        Some(PortMatch::Range(r)) if r.start == r.end => out.push_str(&format!("/{}", r.start)),
        Some(PortMatch::Range(r)) => out.push_str(&format!("/{}-{}", r.start, r.end)),
        Some(PortMatch::Named(n)) => out.push_str(&format!("/{n}")),
        None => {}
    }
    if let Some(r) = s.src_ports {
        if r.start == r.end {
            out.push_str(&format!(" srcPort={}", r.start));
        } else {
            out.push_str(&format!(" srcPort={}-{}", r.start, r.end));
        }
    }
    if let Some(t) = s.icmp_type {
        out.push_str(&format!(" type={t}"));
    }
    if let Some(c) = s.icmp_code {
        out.push_str(&format!(" code={c}"));
    }
    if let Some(t) = s.igmp_type {
        out.push_str(&format!(" igmpType={t}"));
    }
    if let Some(g) = s.group_address {
        out.push_str(&format!(" group={g}"));
    }
    out
}

fn peer_view(p: &cp::Peer) -> PeerView {
    PeerView {
        address_groups: p.address_groups.clone(),
        ip_blocks: p
            .ip_blocks
            .iter()
            .map(|b| IpBlockView {
                cidr: b.cidr.to_string(),
                except: b.except.iter().map(ToString::to_string).collect(),
            })
            .collect(),
        fqdns: p.fqdns.clone(),
        to_services: p
            .to_services
            .iter()
            .map(|s| format!("{}/{}", s.namespace, s.name))
            .collect(),
        label_identities: p.label_identities.clone(),
    }
}

impl From<&cp::Rule> for RuleView {
    fn from(r: &cp::Rule) -> Self {
        let peer = Some(peer_view(&r.peer));
        let ingress = r.direction == cp::Direction::In;
        RuleView {
            name: r.name.clone(),
            direction: r.direction.as_str().to_string(),
            action: r.action.as_str().to_string(),
            priority: r.priority,
            from: if ingress { peer.clone() } else { None },
            to: if ingress { None } else { peer },
            services: r.services.iter().map(service_text).collect(),
            applied_to_groups: r.applied_to_groups.clone(),
            enable_logging: r.enable_logging,
            log_label: r.log_label.clone(),
            l7_protocols: r.l7_protocols.iter().map(l7_text).collect(),
            stats: None,
            state: String::new(),
            not_enforced: Vec::new(),
        }
    }
}

fn l7_text(l: &cp::L7Protocol) -> String {
    match l {
        cp::L7Protocol::Http { host, method, path } => {
            let mut out = String::from("HTTP");
            for (key, v) in [("host", host), ("method", method), ("path", path)] {
                if !v.is_empty() {
                    out.push_str(&format!(" {key}={v}"));
                }
            }
            out
        }
        cp::L7Protocol::Tls { sni } if sni.is_empty() => "TLS".to_string(),
        cp::L7Protocol::Tls { sni } => format!("TLS sni={sni}"),
    }
}

impl NetworkPolicyView {
    /// The view of a validated policy; `effective_rules` is filled by the caller.
    pub fn from_policy(p: &cp::Policy, effective_rules: usize) -> Self {
        NetworkPolicyView {
            name: p.name.clone(),
            uid: p.uid.clone(),
            generation: p.generation,
            source_ref: p.source_ref.as_ref().map(|s| SourceRefView {
                policy_type: s.policy_type.as_str().to_string(),
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                uid: s.uid.clone(),
            }),
            applied_to_groups: p.applied_to_groups.clone(),
            priority: p.priority,
            tier_priority: p.tier_priority,
            rules: p.rules.iter().map(RuleView::from).collect(),
            effective_rules,
            stats_error: None,
        }
    }
}

impl From<&cp::Member> for MemberView {
    fn from(m: &cp::Member) -> Self {
        let (kind, namespace, name) = match &m.entity {
            MemberRef::Pod { namespace, name } => ("Pod", namespace.clone(), name.clone()),
            MemberRef::ExternalEntity { namespace, name } => {
                ("ExternalEntity", namespace.clone(), name.clone())
            }
            MemberRef::Node { name } => ("Node", String::new(), name.clone()),
            MemberRef::Service { namespace, name } => ("Service", namespace.clone(), name.clone()),
        };
        MemberView {
            kind: kind.to_string(),
            namespace,
            name,
            ips: m.ips.clone(),
            ports: m
                .ports
                .iter()
                .map(|p| NamedPortView {
                    name: p.name.clone(),
                    port: p.port,
                    protocol: p.protocol.as_str().to_string(),
                })
                .collect(),
        }
    }
}

impl From<&Group> for GroupView {
    fn from(g: &Group) -> Self {
        GroupView {
            name: g.name.clone(),
            uid: g.uid.clone(),
            members: g.members.values().map(MemberView::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::controlplane::{Member, MemberPort, PortRange, Protocol};

    #[test]
    fn services_render_compactly() {
        let base = ServiceMatch {
            protocol: Some(Protocol::Tcp),
            port: None,
            src_ports: None,
            icmp_type: None,
            icmp_code: None,
            igmp_type: None,
            group_address: None,
        };
        assert_eq!(service_text(&base), "TCP");
        let one = ServiceMatch {
            port: Some(PortMatch::Range(PortRange { start: 22, end: 22 })),
            ..base.clone()
        };
        assert_eq!(service_text(&one), "TCP/22");
        let range = ServiceMatch {
            protocol: Some(Protocol::Udp),
            port: Some(PortMatch::Range(PortRange {
                start: 6000,
                end: 6010,
            })),
            src_ports: Some(PortRange { start: 1, end: 2 }),
            ..base.clone()
        };
        assert_eq!(service_text(&range), "UDP/6000-6010 srcPort=1-2");
        let named = ServiceMatch {
            port: Some(PortMatch::Named("http".into())),
            ..base.clone()
        };
        assert_eq!(service_text(&named), "TCP/http");
        let any_named = ServiceMatch {
            protocol: None,
            ..named
        };
        assert_eq!(service_text(&any_named), "ANY/http");
        let icmp = ServiceMatch {
            protocol: Some(Protocol::Icmp),
            icmp_type: Some(8),
            icmp_code: Some(0),
            ..base
        };
        assert_eq!(service_text(&icmp), "ICMP type=8 code=0");
    }

    #[test]
    fn members_of_every_kind_have_a_reference() {
        let ee = Member {
            entity: MemberRef::ExternalEntity {
                namespace: "vm-ns".into(),
                name: "vm1-3e616".into(),
            },
            ips: vec!["10.0.0.2".parse().expect("ip")],
            ports: vec![MemberPort {
                name: "http".into(),
                port: 80,
                protocol: Protocol::Tcp,
            }],
        };
        let v = MemberView::from(&ee);
        assert_eq!(v.reference(), "ExternalEntity vm-ns/vm1-3e616");
        assert_eq!(v.ports[0].protocol, "TCP");
        let node = MemberView::from(&Member {
            entity: MemberRef::Node { name: "n1".into() },
            ips: vec![],
            ports: vec![],
        });
        assert_eq!(node.reference(), "Node n1");
        let json = serde_json::to_string(&node).expect("json");
        assert_eq!(json, r#"{"kind":"Node","name":"n1"}"#);
        let back: MemberView = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, node);
    }

    #[test]
    fn policies_are_found_by_any_of_their_names() {
        let v = NetworkPolicyView {
            name: "uid-1".into(),
            uid: "uid-1".into(),
            generation: 1,
            source_ref: Some(SourceRefView {
                policy_type: "AntreaNetworkPolicy".into(),
                namespace: "vm-ns".into(),
                name: "allow-web".into(),
                uid: "uid-1".into(),
            }),
            applied_to_groups: vec![],
            priority: Some(1.0),
            tier_priority: Some(250),
            rules: vec![],
            effective_rules: 0,
            stats_error: None,
        };
        assert!(v.is_named("uid-1"));
        assert!(v.is_named("allow-web"));
        assert!(v.is_named("vm-ns/allow-web"));
        assert!(!v.is_named("other"));
        assert_eq!(tier_name(250), Some("Application"));
        assert_eq!(tier_name(42), None);
    }
}

/// One FQDN cache record (`/fqdncache`; antctl's `get fqdncache` response fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FqdnCacheView {
    pub fqdn_name: String,
    pub ip_address: String,
    /// RFC 3339, UTC.
    pub expiration_time: String,
}
