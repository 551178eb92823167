//! What decided a traced packet, from the tables it went through ([`super::parse`]).
//!
//! **The verdict is OVS's**: forwarded when the datapath was told to output the packet to a
//! port, rejected when it was not but a NetworkPolicy packet-in asked the agent for a Reject
//! reply (userdata category 1 with the reject operation bit, [`operation::REJECT`]),
//! dropped otherwise. **The reason is the rules'**: the action flow of a rule table that
//! matched (`conj_id=N`) names the rule through the compiler's conjunction map. A Pass rule is
//! remembered and the search goes on (Antrea's Pass skips the other Antrea-native tiers and
//! continues in the baseline tables, the `EgressRule`/`IngressRule` tables in between being
//! empty on a VM). A packet that no rule matched is allowed by default: Antrea-native policies
//! do not isolate what they apply to (only K8s NetworkPolicies do, and a VM gets none), so the
//! `*DefaultRule` tables hold baseline rules only. When the two disagree (a rule says Allow but
//! the packet was dropped, or a conjunction the agent does not know decided), the answer says
//! so: the bridge differs from the agent's rules.

use serde::{Deserialize, Serialize};

use super::parse::{ParsedTrace, TraceStep};
use crate::compiler::{ConjunctionInfo, ConjunctionMap};
use crate::native::controller::DEFAULT_TIERS;
use crate::pipeline::fields::{category, operation};
use crate::pipeline::{self, priority, table};
use crate::rule::{Direction, PolicyType, RuleAction, BANP_TIER_PRIORITY};

/// What happened to the packet, as OVS decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verdict {
    /// Sent out of the bridge to its destination.
    Allowed,
    /// Dropped without a reply.
    Dropped,
    /// Dropped, and the agent answers the sender (TCP reset or ICMP unreachable).
    Rejected,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "Allowed",
            Verdict::Dropped => "Dropped",
            Verdict::Rejected => "Rejected",
        }
    }
}

/// What decided the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// A policy rule (`decidedBy`).
    Rule,
    /// No rule matched (or a Pass and then no baseline rule): allowed by default.
    NoRule,
    /// A `policyBypassRules` entry skipped the rule tables.
    Bypass,
    /// Conntrack found the packet invalid (`ConntrackState`).
    InvalidConnection,
    /// Not traffic the policies see (IPv6 neighbour discovery and MLD go through `NonIP`).
    NotPoliced,
    /// The verdict is not what the agent's rules say: the bridge differs from them.
    Unexplained,
}

/// A rule whose action flow the packet matched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleRef {
    pub conj_id: u32,
    pub table: u8,
    pub table_name: String,
    /// The OpenFlow priority of the rule's flows.
    pub of_priority: u16,
    /// Whether the agent knows the conjunction (if not, the fields below are empty).
    pub known: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule: String,
    /// `In` or `Out`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub direction: String,
    /// `Allow`, `Drop`, `Reject` or `Pass`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub action: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_priority: Option<f64>,
}

impl RuleRef {
    fn new(step: &TraceStep, conj_id: u32, info: Option<&ConjunctionInfo>) -> RuleRef {
        let mut r = RuleRef {
            conj_id,
            table: step.table,
            table_name: table_name(step.table),
            of_priority: step.flow.as_ref().map_or(0, |f| f.priority),
            known: info.is_some(),
            policy_type: String::new(),
            namespace: String::new(),
            policy: String::new(),
            policy_uid: String::new(),
            rule: String::new(),
            direction: String::new(),
            action: String::new(),
            tier: String::new(),
            tier_priority: None,
            policy_priority: None,
        };
        if let Some(i) = info {
            r.policy_type = i.policy.policy_type.as_str().to_string();
            r.namespace = i.policy.namespace.clone();
            r.policy = i.policy.name.clone();
            r.policy_uid = i.policy.uid.clone();
            r.rule = i.rule_name.clone();
            r.direction = match i.direction {
                Direction::In => "In",
                Direction::Out => "Out",
            }
            .to_string();
            r.action = action_str(i.action).to_string();
            r.tier = tier_name(i.policy.policy_type, i.tier_priority);
            r.tier_priority = Some(i.tier_priority);
            r.policy_priority = Some(i.policy_priority);
        }
        r
    }

    fn rule_action(&self) -> Option<RuleAction> {
        match self.action.as_str() {
            "Allow" => Some(RuleAction::Allow),
            "Drop" => Some(RuleAction::Drop),
            "Reject" => Some(RuleAction::Reject),
            "Pass" => Some(RuleAction::Pass),
            _ => None,
        }
    }

    /// `rule "allow-ssh" (Allow, ingress) of AntreaNetworkPolicy vm-ns/web, tier application
    /// (250), policy priority 5`.
    pub fn describe(&self) -> String {
        if !self.known {
            return format!(
                "conjunction {} in {} (priority {}), which is not a rule the agent installed",
                self.conj_id, self.table_name, self.of_priority
            );
        }
        let name = if self.namespace.is_empty() {
            self.policy.clone()
        } else {
            format!("{}/{}", self.namespace, self.policy)
        };
        let rule = if self.rule.is_empty() {
            "an unnamed rule".to_string()
        } else {
            format!("rule {:?}", self.rule)
        };
        let direction = if self.direction == "In" {
            "ingress"
        } else {
            "egress"
        };
        let mut s = format!(
            "{rule} ({}, {direction}) of {} {name}, tier {}",
            self.action, self.policy_type, self.tier
        );
        if let Some(p) = self.policy_priority {
            s.push_str(&format!(", policy priority {p}"));
        }
        s
    }
}

/// One table of the path, for people and tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceStepView {
    /// 0, then one more after each conntrack recirculation.
    pub pass: usize,
    /// Nesting (group buckets, resubmits).
    pub depth: usize,
    pub table: u8,
    pub table_name: String,
    /// `None`: no flow matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u16>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub matches: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    /// What this step means (the rule it is, a bypass, a Reject packet-in, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The answer of `trace`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceAnswer {
    pub verdict: Verdict,
    pub reason: Reason,
    /// The answer in words.
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<RuleRef>,
    /// Pass rules the packet matched before the decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed_by: Vec<RuleRef>,
    /// The flow traced (`ofproto/trace` syntax).
    pub flow: String,
    pub path: Vec<TraceStepView>,
    pub datapath_actions: Vec<String>,
}

/// The name of a pipeline table.
pub fn table_name(id: u8) -> String {
    pipeline::tables()
        .into_iter()
        .find(|t| t.id == id)
        .map_or_else(|| format!("table {id}"), |t| t.name.to_string())
}

fn action_str(a: RuleAction) -> &'static str {
    match a {
        RuleAction::Allow => "Allow",
        RuleAction::Drop => "Drop",
        RuleAction::Reject => "Reject",
        RuleAction::Pass => "Pass",
    }
}

/// A tier's name from its priority: the default tiers by name, a (Baseline)AdminNetworkPolicy
/// by kind, any other as its priority (the flow installer knows no names of custom tiers).
fn tier_name(policy_type: PolicyType, tier_priority: i32) -> String {
    let name = match policy_type {
        PolicyType::AdminNetworkPolicy => Some("AdminNetworkPolicy"),
        PolicyType::BaselineAdminNetworkPolicy => Some("BaselineAdminNetworkPolicy"),
        _ if tier_priority == BANP_TIER_PRIORITY => Some("BaselineAdminNetworkPolicy"),
        _ => DEFAULT_TIERS
            .iter()
            .find(|(_, p)| *p == tier_priority)
            .map(|(n, _)| *n),
    };
    match name {
        Some(n) => format!("{n} ({tier_priority})"),
        None => format!("with priority {tier_priority}"),
    }
}

fn is_rule_table(id: u8) -> bool {
    matches!(
        id,
        table::ANTREA_POLICY_EGRESS_RULE
            | table::EGRESS_RULE
            | table::EGRESS_DEFAULT_RULE
            | table::ANTREA_POLICY_INGRESS_RULE
            | table::INGRESS_RULE
            | table::INGRESS_DEFAULT_RULE
    )
}

/// Whether `step` is a `policyBypassRules` flow (a non-miss flow of a security classifier).
fn is_bypass(step: &TraceStep) -> bool {
    matches!(
        step.table,
        table::EGRESS_SECURITY_CLASSIFIER | table::INGRESS_SECURITY_CLASSIFIER
    ) && step.flow.as_ref().is_some_and(|f| f.priority != priority::MISS)
}

fn is_invalid_drop(step: &TraceStep) -> bool {
    step.table == table::CONNTRACK_STATE && step.flow.as_ref().is_some_and(|f| f.priority == priority::HIGH)
}

/// Whether `step` asks the agent for a Reject reply.
fn asks_reject(step: &TraceStep) -> bool {
    step.controller_userdata().iter().any(|u| {
        u.first() == Some(&category::NETWORK_POLICY) && u.get(1).is_some_and(|op| op & operation::REJECT != 0)
    })
}

fn verdict_of(t: &ParsedTrace) -> Verdict {
    if t.datapath_outputs() {
        Verdict::Allowed
    } else if t.steps.iter().any(asks_reject) {
        Verdict::Rejected
    } else {
        Verdict::Dropped
    }
}

/// A readable line for the last step the packet took (where a drop happened).
fn where_it_ended(t: &ParsedTrace) -> String {
    match t.steps.last() {
        Some(s) => match &s.flow {
            Some(f) if f.matches.is_empty() => {
                format!("{} (priority {})", table_name(s.table), f.priority)
            }
            Some(f) => format!(
                "{} (flow {}, priority {})",
                table_name(s.table),
                f.matches,
                f.priority
            ),
            None => format!("{} (no flow matched)", table_name(s.table)),
        },
        None => "the first table".to_string(),
    }
}

/// The verdict OVS reached for `trace` and what decided it; `conjunctions` are the compiler's
/// (current rules and those removed a moment ago), `flow` the flow that was traced.
pub fn attribute(trace: &ParsedTrace, flow: &str, conjunctions: &ConjunctionMap) -> TraceAnswer {
    let verdict = verdict_of(trace);
    let mut rules: Vec<RuleRef> = Vec::new();
    let mut path: Vec<TraceStepView> = Vec::with_capacity(trace.steps.len());
    let (mut bypass, mut invalid, mut non_ip) = (false, false, false);
    for step in &trace.steps {
        let mut note = None;
        if let Some(conj_id) = step.conj_id().filter(|_| is_rule_table(step.table)) {
            let r = RuleRef::new(step, conj_id, conjunctions.get(&conj_id).map(|a| &**a));
            note = Some(r.describe());
            rules.push(r);
        } else if is_bypass(step) {
            bypass = true;
            note = Some("a policyBypassRules entry: the rule tables are skipped".into());
        } else if is_invalid_drop(step) {
            invalid = true;
            note = Some("conntrack: invalid packet, dropped".into());
        } else if step.table == table::NON_IP {
            non_ip = true;
            note = Some("not policed: cross-connected as is".into());
        } else if asks_reject(step) {
            note = Some("sent to the agent, which answers with a Reject reply".into());
        } else if step
            .actions
            .iter()
            .any(|a| a.starts_with("-> output port is") || a.starts_with("output:"))
        {
            note = Some("sent out".into());
        }
        path.push(TraceStepView {
            pass: step.pass,
            depth: step.depth,
            table: step.table,
            table_name: table_name(step.table),
            priority: step.flow.as_ref().map(|f| f.priority),
            matches: step.flow.as_ref().map(|f| f.matches.clone()).unwrap_or_default(),
            actions: step.actions.clone(),
            note,
        });
    }
    let (passed_by, deciders): (Vec<RuleRef>, Vec<RuleRef>) = rules
        .into_iter()
        .partition(|r| r.rule_action() == Some(RuleAction::Pass));
    // A Drop or Reject ends the packet where it matched; otherwise the last Allow decided.
    let decided_by = deciders
        .iter()
        .find(|r| {
            matches!(
                r.rule_action(),
                Some(RuleAction::Drop | RuleAction::Reject) | None
            )
        })
        .or_else(|| deciders.last())
        .cloned();
    let (mut reason, expected) = if non_ip {
        (Reason::NotPoliced, Some(Verdict::Allowed))
    } else if invalid {
        (Reason::InvalidConnection, Some(Verdict::Dropped))
    } else if let Some(r) = &decided_by {
        let expected = match r.rule_action() {
            Some(RuleAction::Allow) => Some(Verdict::Allowed),
            Some(RuleAction::Drop) => Some(Verdict::Dropped),
            Some(RuleAction::Reject) => Some(Verdict::Rejected),
            _ => None,
        };
        (Reason::Rule, expected)
    } else if bypass {
        (Reason::Bypass, Some(Verdict::Allowed))
    } else {
        (Reason::NoRule, Some(Verdict::Allowed))
    };
    let agrees = expected == Some(verdict);
    let words = verdict.as_str();
    let passed = passed_by
        .iter()
        .map(RuleRef::describe)
        .collect::<Vec<_>>()
        .join("; then ");
    let mut summary = match (reason, &decided_by) {
        (Reason::Rule, Some(r)) if agrees => format!("{words} by {}.", r.describe()),
        // The bridge and the agent's rule disagree: name both, and say the answer is not the
        // rule's (the same `Unexplained` as a drop no rule accounts for, below).
        (Reason::Rule, Some(r)) => {
            reason = Reason::Unexplained;
            let rule_says = match expected {
                Some(v) => format!("the agent's rules say {}", v.as_str()),
                None => "the agent's rules give no verdict for it".to_string(),
            };
            format!(
                "{words} by the bridge, although the packet matched {} ({rule_says}): it ended \
                 in {}. The flows on the bridge differ from the agent's rules (compare `get \
                 ovsflows`).",
                r.describe(),
                where_it_ended(trace)
            )
        }
        (Reason::NoRule, _) if agrees && passed_by.is_empty() => format!(
            "{words}: no rule matches, so the default applies (Antrea-native policies allow what \
             none of their rules drops; they do not isolate the VM)."
        ),
        (Reason::NoRule, _) if agrees => format!(
            "{words}: passed to the baseline tier by {passed}, and no baseline rule matches, so \
             the default applies (allowed)."
        ),
        (Reason::NoRule, _) => {
            reason = Reason::Unexplained;
            format!(
                "{words} in {}, although no policy rule matches the packet: the flows on the \
                 bridge differ from the agent's rules (compare `get ovsflows`).",
                where_it_ended(trace)
            )
        }
        (Reason::Bypass, _) if agrees => {
            format!("{words}: a policyBypassRules entry lets it skip the policy rules.")
        }
        (Reason::InvalidConnection, _) if agrees => {
            format!("{words}: conntrack finds the packet invalid (table ConntrackState).")
        }
        (Reason::NotPoliced, _) if agrees => format!(
            "{words}: not traffic the policies see (IPv6 neighbour discovery and MLD are \
             cross-connected like ARP)."
        ),
        _ => {
            reason = Reason::Unexplained;
            format!(
                "{words} in {}; the flows on the bridge differ from the agent's rules.",
                where_it_ended(trace)
            )
        }
    };
    if reason == Reason::Rule && !passed_by.is_empty() {
        summary.push_str(&format!(" Before that it was passed on by {passed}."));
    }
    TraceAnswer {
        verdict,
        reason,
        summary,
        decided_by,
        passed_by,
        flow: flow.to_string(),
        path,
        datapath_actions: trace.datapath_actions.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::rule::{PolicyRef, RuleId};
    use crate::trace::parse::{parse_trace, samples};

    fn info(conj_id: u32, action: RuleAction, table: u8, tier_priority: i32) -> (u32, Arc<ConjunctionInfo>) {
        let direction = if crate::rule::is_egress_table(table) {
            Direction::Out
        } else {
            Direction::In
        };
        (
            conj_id,
            Arc::new(ConjunctionInfo {
                conj_id,
                rule_id: RuleId {
                    policy_uid: format!("uid-{conj_id}").into(),
                    direction,
                    index: 0,
                    services_key: String::new(),
                },
                policy: PolicyRef {
                    policy_type: PolicyType::AntreaNetworkPolicy,
                    namespace: "vm-ns".into(),
                    name: format!("p{conj_id}"),
                    uid: format!("uid-{conj_id}"),
                },
                rule_name: format!("r{conj_id}"),
                direction,
                action,
                tier_priority,
                policy_priority: 5.0,
                table,
                priority: 106,
                enable_logging: false,
                log_label: String::new(),
            }),
        )
    }

    #[test]
    fn a_reject_is_attributed_to_its_rule() {
        let t = parse_trace(samples::REJECTED).unwrap();
        let map: ConjunctionMap = [info(
            2,
            RuleAction::Reject,
            table::ANTREA_POLICY_INGRESS_RULE,
            250,
        )]
        .into_iter()
        .collect();
        let a = attribute(&t, "in_port=21,tcp", &map);
        assert_eq!(a.verdict, Verdict::Rejected);
        assert_eq!(a.reason, Reason::Rule);
        let r = a.decided_by.as_ref().unwrap();
        assert_eq!(
            (r.policy.as_str(), r.rule.as_str(), r.action.as_str()),
            ("p2", "r2", "Reject")
        );
        assert_eq!(r.tier, "application (250)");
        assert_eq!(r.table_name, "AntreaPolicyIngressRule");
        assert_eq!(
            a.summary,
            "Rejected by rule \"r2\" (Reject, ingress) of AntreaNetworkPolicy vm-ns/p2, tier \
             application (250), policy priority 5."
        );
        assert!(a
            .path
            .iter()
            .any(|s| s.note.as_deref() == Some("sent to the agent, which answers with a Reject reply")));
        // Serialized for tools and read back by the CLI.
        let json = serde_json::to_string(&a).unwrap();
        assert!(json.contains("\"decidedBy\""), "{json}");
        assert_eq!(serde_json::from_str::<TraceAnswer>(&json).unwrap(), a);
    }

    #[test]
    fn a_pass_then_no_baseline_rule_is_the_default_allow() {
        let t = parse_trace(samples::PASSED_AND_FORWARDED).unwrap();
        let map: ConjunctionMap = [info(5, RuleAction::Pass, table::ANTREA_POLICY_INGRESS_RULE, 100)]
            .into_iter()
            .collect();
        let a = attribute(&t, "f", &map);
        assert_eq!(a.verdict, Verdict::Allowed);
        assert_eq!(a.reason, Reason::NoRule);
        assert_eq!(a.decided_by, None);
        assert_eq!(a.passed_by.len(), 1);
        assert_eq!(a.passed_by[0].tier, "securityops (100)");
        assert!(
            a.summary
                .starts_with("Allowed: passed to the baseline tier by rule \"r5\" (Pass, ingress)"),
            "{}",
            a.summary
        );
    }

    #[test]
    fn a_verdict_the_rules_do_not_explain_says_so() {
        // The rule the bridge rejected with is an Allow in the agent's view (drift).
        let t = parse_trace(samples::REJECTED).unwrap();
        let map: ConjunctionMap = [info(2, RuleAction::Allow, table::ANTREA_POLICY_INGRESS_RULE, 250)]
            .into_iter()
            .collect();
        let a = attribute(&t, "f", &map);
        assert_eq!(a.verdict, Verdict::Rejected);
        assert_eq!(a.reason, Reason::Unexplained);
        // Both sides are named: the bridge's verdict and the rule's.
        assert!(
            a.summary
                .starts_with("Rejected by the bridge, although the packet matched rule"),
            "{}",
            a.summary
        );
        assert!(
            a.summary.contains("(Allow, ingress)")
                && a.summary.contains("the agent's rules say Allowed")
                && a.summary.contains("differ from the agent's rules"),
            "{}",
            a.summary
        );
        // The rule is still reported, as what the packet matched.
        assert_eq!(a.decided_by.as_ref().map(|r| r.conj_id), Some(2));
        // A conjunction the agent does not know.
        let a = attribute(&t, "f", &ConjunctionMap::new());
        assert_eq!(a.reason, Reason::Unexplained);
        assert!(!a.decided_by.as_ref().unwrap().known);
        assert!(
            a.summary.contains("not a rule the agent installed"),
            "{}",
            a.summary
        );
    }

    #[test]
    fn no_rule_at_all_is_the_default_allow_and_an_unexplained_drop_is_not() {
        let allowed = parse_trace(
            " 0. ip, priority 200\n    goto_table:1\n15. reg0=0x200000/0x600000, priority 200\n    output:NXM_NX_REG1[]\n     -> output port is 20\nDatapath actions: 2\n",
        )
        .unwrap();
        let a = attribute(&allowed, "f", &ConjunctionMap::new());
        assert_eq!((a.verdict, a.reason), (Verdict::Allowed, Reason::NoRule));
        assert!(a.summary.contains("no rule matches"), "{}", a.summary);
        let dropped = parse_trace(" 0. ip, priority 200\n    goto_table:1\n12. ip,nw_src=10.0.0.1, priority 300\n    drop\nDatapath actions: drop\n").unwrap();
        let a = attribute(&dropped, "f", &ConjunctionMap::new());
        assert_eq!((a.verdict, a.reason), (Verdict::Dropped, Reason::Unexplained));
        assert!(
            a.summary
                .contains("IngressDefaultRule (flow ip,nw_src=10.0.0.1, priority 300)"),
            "{}",
            a.summary
        );
    }

    #[test]
    fn bypass_invalid_and_non_ip_paths() {
        let bypass = parse_trace(" 3. ct_state=+new+trk,ip,nw_dst=8.8.8.0/24, priority 200\n    goto_table:7\n15. reg0=0x200000/0x600000, priority 200\n     -> output port is 21\nDatapath actions: 1\n").unwrap();
        assert_eq!(
            attribute(&bypass, "f", &ConjunctionMap::new()).reason,
            Reason::Bypass
        );
        let invalid =
            parse_trace(" 2. ct_state=+inv+trk,ip, priority 210\n    drop\nDatapath actions: drop\n")
                .unwrap();
        let a = attribute(&invalid, "f", &ConjunctionMap::new());
        assert_eq!(
            (a.verdict, a.reason),
            (Verdict::Dropped, Reason::InvalidConnection)
        );
        // A direct output has no "-> output port" note: the datapath's actions say it left.
        let nd = parse_trace(" 0. icmp6,icmp_type=135, priority 210\n    goto_table:16\n16. in_port=21, priority 200\n    output:20\nDatapath actions: 2\n").unwrap();
        let a = attribute(&nd, "f", &ConjunctionMap::new());
        assert_eq!((a.verdict, a.reason), (Verdict::Allowed, Reason::NotPoliced));
        assert_eq!(nd.output_ports, [20]);
        assert_eq!(
            a.path[1].note.as_deref(),
            Some("not policed: cross-connected as is")
        );
    }

    #[test]
    fn a_drop_after_a_pass_names_both() {
        // Pass in securityops (table 10), then a baseline Drop (table 12).
        let text = "10. conj_id=5, priority 14300\n    goto_table:11\n12. conj_id=9, priority 64000\n    set_field:0x9->reg3\n    goto_table:13\n13. reg0=0x400/0x400,reg3=0x9, priority 200\n    drop\nDatapath actions: drop\n";
        let map: ConjunctionMap = [
            info(5, RuleAction::Pass, table::ANTREA_POLICY_INGRESS_RULE, 100),
            info(9, RuleAction::Drop, table::INGRESS_DEFAULT_RULE, 253),
        ]
        .into_iter()
        .collect();
        let a = attribute(&parse_trace(text).unwrap(), "f", &map);
        assert_eq!((a.verdict, a.reason), (Verdict::Dropped, Reason::Rule));
        assert_eq!(
            a.decided_by.as_ref().map(|r| r.tier.as_str()),
            Some("baseline (253)")
        );
        assert!(a.summary.ends_with("Before that it was passed on by rule \"r5\" (Pass, ingress) of AntreaNetworkPolicy vm-ns/p5, tier securityops (100), policy priority 5."), "{}", a.summary);
    }
}
