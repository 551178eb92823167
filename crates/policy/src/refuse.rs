//! Enforce or refuse: which parts of a NetworkPolicy rule the agent cannot enforce with their
//! exact meaning, why, and the fail-closed form the rule is installed in instead. Pure.
//!
//! The rule of conduct (README, "Enforce or refuse"): a rule is enforced as written, or it is
//! installed fail-closed and reported ([`NotEnforced`]: NetworkPolicyStatus `realizationFailure`,
//! `get networkpolicy`, the `antrea_vm_agent_rules_not_enforced` gauge, one log line). Fail-closed
//! means the rule never lets through traffic its exact meaning would not:
//! * a peer the agent cannot identify (toServices, labelIdentities) matches nothing: an Allow
//!   or Pass rule allows nothing to or from it; a Drop or Reject rule drops what it can identify
//!   (its other peers) and the rest is reported;
//! * a service the agent cannot match (IGMP) matches nothing, the same way;
//! * a rule with `l7Protocols` is installed as a Drop of everything its L3/L4 part matches: without
//!   an L7 engine no request is known to pass, and in Antrea the engine's default for an L7 rule's
//!   traffic is to reject what no L7 match allows.
//!
//! Everything the agent refuses is a [`Reason`]; the per-rule checks are all in [`reasons`] (one
//! arm per reason; FQDN peers are enforced, by the `fqdn` module). A source policy type
//! the agent cannot place in the pipeline is the one refusal decided per policy, by the resolver.

use serde::Serialize;

use crate::controlplane::{Action, Protocol, Rule};

/// Why a rule is not enforced as written. `as_str` is the metric's `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    L7Protocols,
    ToServices,
    LabelIdentities,
    Igmp,
    /// A source policy type the agent cannot place in the pipeline (e.g. a newer controller's).
    PolicyType,
    /// Standalone mode: a peer that selects Pods, Nodes, ServiceAccounts, `namespaces` or a
    /// ClusterSet, which the local controller cannot resolve to addresses (see [`RuleNote`]).
    UnresolvedPeer,
    /// Standalone mode: the policy's Tier does not exist (missing, or refused for its priority
    /// or the 20-tier cap): its rules are translated fail-closed, ahead of every Tier.
    MissingTier,
}

impl Reason {
    /// Every reason, in label order (the gauge is exported for each, 0 included).
    pub const ALL: [Reason; 7] = [
        Reason::Igmp,
        Reason::L7Protocols,
        Reason::LabelIdentities,
        Reason::MissingTier,
        Reason::PolicyType,
        Reason::ToServices,
        Reason::UnresolvedPeer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::L7Protocols => "l7_protocols",
            Reason::ToServices => "to_services",
            Reason::LabelIdentities => "label_identities",
            Reason::Igmp => "igmp",
            Reason::PolicyType => "policy_type",
            Reason::UnresolvedPeer => "unresolved_peer",
            Reason::MissingTier => "missing_tier",
        }
    }
}

/// One rule the agent installed fail-closed instead of as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotEnforced {
    /// The controlplane NetworkPolicy's `metadata.name`.
    pub policy: String,
    /// Index of the rule in the policy's `rules`.
    pub rule_index: usize,
    pub reason: Reason,
    /// Names the rule and says what is not enforced and what the agent does instead.
    pub message: String,
}

/// What the local controller (standalone mode) says of a rule it translated fail-closed rather
/// than as written: the controlplane object already holds the fail-closed form, and this note
/// carries the why to the policy's status and `get networkpolicy`, as [`NotEnforced`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleNote {
    /// Index of the rule in the controlplane policy's `rules`.
    pub rule_index: usize,
    pub reason: Reason,
    /// What is enforced instead and why, without the rule's name.
    pub message: String,
}

/// The rule as a message names it: `rule "allow-ok" (rules[0])`, or `rules[0]` when unnamed.
pub fn rule_label(rule: &Rule, index: usize) -> String {
    if rule.name.is_empty() {
        format!("rules[{index}]")
    } else {
        format!("rule {:?} (rules[{index}])", rule.name)
    }
}

/// What a rule that allows (Allow, Pass) and one that denies (Drop, Reject) does with peers or
/// services the agent cannot identify.
fn unidentified(rule: &Rule, what: &str) -> String {
    match rule.action {
        Action::Allow | Action::Pass => format!("the rule matches no traffic {what}"),
        Action::Drop | Action::Reject => format!(
            "traffic {what} is not {}; only the rule's other peers and services are",
            if rule.action == Action::Drop {
                "dropped"
            } else {
                "rejected"
            }
        ),
    }
}

/// Every reason `rule` cannot be enforced as written, with the sentence that explains it (without
/// the rule's name). Empty for a rule the agent enforces exactly.
pub fn reasons(rule: &Rule) -> Vec<(Reason, String)> {
    let mut out = Vec::new();
    if !rule.l7_protocols.is_empty() {
        let instead = match rule.action {
            Action::Allow | Action::Pass => "all the traffic its ports and peers match is dropped",
            Action::Drop => {
                "all the traffic its ports and peers match is dropped, not only the named requests"
            }
            Action::Reject => {
                "all the traffic its ports and peers match is rejected, not only the named requests"
            }
        };
        out.push((
            Reason::L7Protocols,
            format!("l7Protocols (HTTP/TLS inspection) are not supported on a VM (no L7 engine): {instead}"),
        ));
    }
    if !rule.peer.to_services.is_empty() {
        let services: Vec<String> = rule
            .peer
            .to_services
            .iter()
            .map(|s| format!("{}/{}", s.namespace, s.name))
            .collect();
        out.push((
            Reason::ToServices,
            format!(
                "toServices peers ({}) need AntreaProxy, which does not run on a VM: {}",
                services.join(", "),
                unidentified(rule, "to these Services")
            ),
        ));
    }
    if !rule.peer.label_identities.is_empty() {
        out.push((
            Reason::LabelIdentities,
            format!(
                "labelIdentities peers (multi-cluster stretched policy) cannot be identified on a VM: {}",
                unidentified(rule, "from or to them")
            ),
        ));
    }
    if rule.services.iter().any(|s| s.protocol == Some(Protocol::Igmp)) {
        out.push((
            Reason::Igmp,
            format!(
                "protocol IGMP is not supported on a VM: {}",
                unidentified(rule, "of its IGMP services")
            ),
        ));
    }
    out
}

/// Why a rule of a policy whose source type the agent does not know is not installed: it allows
/// nothing, and what it would drop is not dropped.
pub fn unsupported_policy_type(policy_type: &str) -> String {
    format!(
        "policy type {policy_type} is not supported on a VM: the rule is not installed (it allows \
         nothing; what it would drop or reject is not)"
    )
}

/// The action a rule is installed with: its own, except that a rule with `l7Protocols` drops
/// (or rejects, when written so) everything its L3/L4 part matches.
pub fn installed_action(rule: &Rule) -> Action {
    match rule.action {
        Action::Allow | Action::Pass if !rule.l7_protocols.is_empty() => Action::Drop,
        other => other,
    }
}

/// The NetworkPolicyStatus `message` of a policy with these rules not enforced as written (sorted
/// by rule): one sentence per rule and reason, joined by `; `.
pub fn status_message(list: &[NotEnforced]) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    Some(
        list.iter()
            .map(|n| n.message.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::{Direction, L7Protocol, Peer, ServiceMatch, ServiceRef};

    fn rule(action: Action) -> Rule {
        Rule {
            name: "r".into(),
            direction: Direction::Out,
            peer: Peer::default(),
            services: vec![],
            priority: 0,
            action,
            enable_logging: false,
            log_label: String::new(),
            applied_to_groups: vec![],
            l7_protocols: vec![],
        }
    }

    #[test]
    fn a_plain_rule_is_enforced_as_written() {
        assert!(reasons(&rule(Action::Allow)).is_empty());
        assert_eq!(installed_action(&rule(Action::Pass)), Action::Pass);
    }

    #[test]
    fn each_reason_says_what_the_agent_does_instead() {
        let mut allow = rule(Action::Allow);
        allow.l7_protocols = vec![L7Protocol::Http {
            host: String::new(),
            method: "GET".into(),
            path: "/ok".into(),
        }];
        allow.peer.fqdns = vec!["db.example.com".into()];
        allow.peer.to_services = vec![ServiceRef {
            namespace: "ns".into(),
            name: "svc".into(),
        }];
        allow.peer.label_identities = vec![7];
        allow.services = vec![ServiceMatch {
            protocol: Some(Protocol::Igmp),
            port: None,
            src_ports: None,
            icmp_type: None,
            icmp_code: None,
            igmp_type: None,
            group_address: None,
        }];
        let got: Vec<Reason> = reasons(&allow).into_iter().map(|(r, _)| r).collect();
        assert_eq!(
            got,
            [
                Reason::L7Protocols,
                Reason::ToServices,
                Reason::LabelIdentities,
                Reason::Igmp
            ]
        );
        assert_eq!(installed_action(&allow), Action::Drop);
        let text = reasons(&allow)[1].1.clone();
        assert_eq!(
            text,
            "toServices peers (ns/svc) need AntreaProxy, which does not run on a VM: the rule matches no traffic to these Services"
        );

        let mut drop = rule(Action::Drop);
        drop.peer.label_identities = vec![7];
        assert_eq!(
            reasons(&drop)[0].1,
            "labelIdentities peers (multi-cluster stretched policy) cannot be identified on a VM: \
             traffic from or to them is not dropped; only the rule's other peers and services are"
        );
        let mut reject = rule(Action::Reject);
        reject.l7_protocols = allow.l7_protocols.clone();
        assert_eq!(installed_action(&reject), Action::Reject);
        assert!(reasons(&reject)[0]
            .1
            .ends_with("is rejected, not only the named requests"));
    }
}
