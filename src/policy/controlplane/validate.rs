//! Validation of controlplane objects into the typed views the agent acts on ([`Policy`],
//! [`Group`], [`MembersPatch`]). Every problem is reported with the object (kind and name, plus
//! the source policy for a NetworkPolicy) and the field path (`rules[1].services[0].endPort`);
//! one bad field rejects the whole object, never its neighbours.
//!
//! What is checked: names present; IP bytes (4 or 16) and prefix lengths (per family); `except`
//! inside its `cidr`; protocols, actions and directions from the known sets; port numbers
//! 1-65535, `endPort >= port`, ranges only on numbered ports, port fields only for TCP/UDP/SCTP,
//! ICMP/IGMP fields only for their protocol; rule peers on the side their direction reads; group
//! members with exactly one reference. Views normalise: IPv4-mapped addresses become IPv4,
//! networks have host bits cleared, an absent protocol is TCP and an absent action Allow.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::types::{
    AddressGroup, AppliedToGroup, ControlplaneObject, GroupMember, GroupPatch, IntOrString, IpBlock, Kind,
    L7Protocol as L7Wire, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyRule, Service,
};

// === errors ===

/// Which object a problem is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: Kind,
    pub name: String,
    /// For a NetworkPolicy: its source policy, e.g. `AntreaNetworkPolicy vm-ns/annp1`.
    pub source: Option<String>,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.name.is_empty() {
            write!(f, "{} <unnamed>", self.kind)?;
        } else {
            write!(f, "{} {}", self.kind, self.name)?;
        }
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

/// One problem: the field path inside the object and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldProblem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// An object that failed validation, with every problem found in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {}", join_problems(.problems))]
pub struct InvalidObject {
    pub object: ObjectRef,
    pub problems: Vec<FieldProblem>,
}

fn join_problems(problems: &[FieldProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Default)]
struct Problems(Vec<FieldProblem>);

impl Problems {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldProblem {
            path: path.into(),
            message: message.into(),
        });
    }

    fn finish<T>(self, object: ObjectRef, value: T) -> Result<T, InvalidObject> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(InvalidObject {
                object,
                problems: self.0,
            })
        }
    }
}

// === views: NetworkPolicy ===

/// A validated NetworkPolicy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `metadata.name`: the store key (the controller sets it to the source policy's UID).
    pub name: String,
    /// `metadata.uid`, or the name when absent (hand-written standalone files).
    pub uid: String,
    pub generation: i64,
    pub source_ref: Option<PolicyRef>,
    /// Policy-level AppliedToGroups; empty when the rules carry their own.
    pub applied_to_groups: Vec<String>,
    /// Lower = higher precedence; `None` for K8s NetworkPolicies.
    pub priority: Option<f64>,
    /// Tier priority (lower = higher precedence); `None` for K8s NetworkPolicies.
    pub tier_priority: Option<i32>,
    pub rules: Vec<Rule>,
}

impl Policy {
    /// True when the AppliedToGroups are given per rule instead of for the whole policy.
    pub fn applied_to_per_rule(&self) -> bool {
        self.applied_to_groups.is_empty()
    }

    /// The AppliedToGroups a rule is evaluated with: its own if any, else the policy's.
    pub fn rule_applied_to_groups<'a>(&'a self, rule: &'a Rule) -> &'a [String] {
        if rule.applied_to_groups.is_empty() {
            &self.applied_to_groups
        } else {
            &rule.applied_to_groups
        }
    }

    /// Every AppliedToGroup the policy refers to (policy level and per rule).
    pub fn applied_to_group_names(&self) -> BTreeSet<&str> {
        self.applied_to_groups
            .iter()
            .chain(self.rules.iter().flat_map(|r| r.applied_to_groups.iter()))
            .map(String::as_str)
            .collect()
    }

    /// Every AddressGroup the rules' peers refer to.
    pub fn address_group_names(&self) -> BTreeSet<&str> {
        self.rules
            .iter()
            .flat_map(|r| r.peer.address_groups.iter())
            .map(String::as_str)
            .collect()
    }

    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            kind: Kind::NetworkPolicy,
            name: self.name.clone(),
            source: self.source_ref.as_ref().map(ToString::to_string),
        }
    }
}

/// The policy an internal NetworkPolicy was computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    pub policy_type: PolicyType,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.policy_type, self.name)
        } else {
            write!(f, "{} {}/{}", self.policy_type, self.namespace, self.name)
        }
    }
}

/// `sourceRef.type`. Types added by newer controllers are kept as [`PolicyType::Other`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyType {
    K8sNetworkPolicy,
    AntreaClusterNetworkPolicy,
    AntreaNetworkPolicy,
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
    K8sClusterNetworkPolicy,
    Other(String),
}

impl PolicyType {
    pub fn parse(s: &str) -> PolicyType {
        match s {
            "K8sNetworkPolicy" => PolicyType::K8sNetworkPolicy,
            "AntreaClusterNetworkPolicy" => PolicyType::AntreaClusterNetworkPolicy,
            "AntreaNetworkPolicy" => PolicyType::AntreaNetworkPolicy,
            "AdminNetworkPolicy" => PolicyType::AdminNetworkPolicy,
            "BaselineAdminNetworkPolicy" => PolicyType::BaselineAdminNetworkPolicy,
            "K8sClusterNetworkPolicy" => PolicyType::K8sClusterNetworkPolicy,
            other => PolicyType::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            PolicyType::K8sNetworkPolicy => "K8sNetworkPolicy",
            PolicyType::AntreaClusterNetworkPolicy => "AntreaClusterNetworkPolicy",
            PolicyType::AntreaNetworkPolicy => "AntreaNetworkPolicy",
            PolicyType::AdminNetworkPolicy => "AdminNetworkPolicy",
            PolicyType::BaselineAdminNetworkPolicy => "BaselineAdminNetworkPolicy",
            PolicyType::K8sClusterNetworkPolicy => "K8sClusterNetworkPolicy",
            PolicyType::Other(s) => s,
        }
    }

    /// ACNP or ANNP: the only types that get status reports.
    pub fn is_antrea_native(&self) -> bool {
        matches!(
            self,
            PolicyType::AntreaClusterNetworkPolicy | PolicyType::AntreaNetworkPolicy
        )
    }
}

impl fmt::Display for PolicyType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    In,
    Out,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::In => "In",
            Direction::Out => "Out",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    Allow,
    Drop,
    Reject,
    Pass,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "Allow",
            Action::Drop => "Drop",
            Action::Reject => "Reject",
            Action::Pass => "Pass",
        }
    }
}

/// A validated rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// May be empty (K8s NetworkPolicies, hand-written files).
    pub name: String,
    pub direction: Direction,
    /// The rule's peer: `from` for `In`, `to` for `Out` (the other side must be empty).
    pub peer: Peer,
    /// Empty = all protocols and ports.
    pub services: Vec<ServiceMatch>,
    /// Index among the source policy's ingress (or egress) rules.
    pub priority: u32,
    pub action: Action,
    pub enable_logging: bool,
    pub log_label: String,
    /// Per-rule AppliedToGroups (only when the policy has none).
    pub applied_to_groups: Vec<String>,
    pub l7_protocols: Vec<L7Protocol>,
}

/// A validated peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    pub address_groups: Vec<String>,
    pub ip_blocks: Vec<CidrBlock>,
    /// Egress only: exact names or `*.` wildcards.
    pub fqdns: Vec<String>,
    /// Egress only.
    pub to_services: Vec<ServiceRef>,
    pub label_identities: Vec<u32>,
}

/// `cidr` minus `except` (each except inside the cidr, same family).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CidrBlock {
    pub cidr: IpNet,
    pub except: Vec<IpNet>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Igmp,
}

impl Protocol {
    pub fn parse(s: &str) -> Option<Protocol> {
        Some(match s {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            "ICMP" => Protocol::Icmp,
            "IGMP" => Protocol::Igmp,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
            Protocol::Icmp => "ICMP",
            Protocol::Igmp => "IGMP",
        }
    }

    /// TCP, UDP and SCTP carry ports.
    pub fn has_ports(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp | Protocol::Sctp)
    }
}

/// An inclusive port range; a single port has `start == end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    pub start: u16,
    pub end: u16,
}

/// Destination port(s): numbers, or a name resolved against the members' named ports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortMatch {
    Range(PortRange),
    Named(String),
}

/// A validated `Service` entry. Port fields are set only for TCP/UDP/SCTP, `icmp_*` only for
/// ICMP, `igmp_type`/`group_address` only for IGMP.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceMatch {
    pub protocol: Protocol,
    /// `None` = every port.
    pub port: Option<PortMatch>,
    /// Source ports (`srcPort`..`srcEndPort`); `None` = any.
    pub src_ports: Option<PortRange>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    pub igmp_type: Option<u8>,
    pub group_address: Option<IpAddr>,
}

/// A validated layer-7 match (empty strings mean "any").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum L7Protocol {
    Http {
        host: String,
        method: String,
        path: String,
    },
    Tls {
        sni: String,
    },
}

// === views: groups ===

/// What a group member stands for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberRef {
    Pod { namespace: String, name: String },
    ExternalEntity { namespace: String, name: String },
    Node { name: String },
    Service { namespace: String, name: String },
}

impl fmt::Display for MemberRef {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            MemberRef::Pod { namespace, name } => write!(f, "Pod {namespace}/{name}"),
            MemberRef::ExternalEntity { namespace, name } => {
                write!(f, "ExternalEntity {namespace}/{name}")
            }
            MemberRef::Node { name } => write!(f, "Node {name}"),
            MemberRef::Service { namespace, name } => write!(f, "Service {namespace}/{name}"),
        }
    }
}

/// A named port of a member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberPort {
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

/// A validated group member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub entity: MemberRef,
    /// In received order; AppliedToGroup members usually have none.
    pub ips: Vec<IpAddr>,
    pub ports: Vec<MemberPort>,
}

impl Member {
    /// The member's identity in a group (the controller's rule: kind, namespace/name and every
    /// IP in order; ports do not count).
    pub fn key(&self) -> MemberKey {
        MemberKey {
            entity: self.entity.clone(),
            ips: self.ips.clone(),
        }
    }
}

/// Member identity: two members with the same key are the same member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberKey {
    pub entity: MemberRef,
    pub ips: Vec<IpAddr>,
}

/// A validated AddressGroup or AppliedToGroup: a set of members by identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub uid: String,
    pub members: BTreeMap<MemberKey, Member>,
}

impl Group {
    pub fn new(name: impl Into<String>, members: impl IntoIterator<Item = Member>) -> Self {
        let name = name.into();
        Group {
            uid: name.clone(),
            name,
            members: members.into_iter().map(|m| (m.key(), m)).collect(),
        }
    }
}

/// A validated group patch: members to add, then members to remove (by identity).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembersPatch {
    /// The group patched.
    pub name: String,
    pub added: Vec<Member>,
    pub removed: Vec<Member>,
}

/// Any validated object.
#[derive(Clone, Debug, PartialEq)]
pub enum ValidObject {
    NetworkPolicy(Arc<Policy>),
    AddressGroup(Group),
    AppliedToGroup(Group),
    AddressGroupPatch(MembersPatch),
    AppliedToGroupPatch(MembersPatch),
}

// === validation ===

impl ControlplaneObject {
    /// Validates the object into its typed view.
    pub fn validate(&self) -> Result<ValidObject, InvalidObject> {
        Ok(match self {
            ControlplaneObject::NetworkPolicy(np) => ValidObject::NetworkPolicy(Arc::new(np.validate()?)),
            ControlplaneObject::AddressGroup(g) => ValidObject::AddressGroup(g.validate()?),
            ControlplaneObject::AppliedToGroup(g) => ValidObject::AppliedToGroup(g.validate()?),
            ControlplaneObject::AddressGroupPatch(p) => {
                ValidObject::AddressGroupPatch(p.validate(Kind::AddressGroupPatch)?)
            }
            ControlplaneObject::AppliedToGroupPatch(p) => {
                ValidObject::AppliedToGroupPatch(p.validate(Kind::AppliedToGroupPatch)?)
            }
        })
    }
}

impl NetworkPolicy {
    /// Validates the policy into a [`Policy`].
    pub fn validate(&self) -> Result<Policy, InvalidObject> {
        let mut p = Problems::default();
        let meta = &self.metadata;
        if meta.name.is_empty() {
            p.add("metadata.name", "missing");
        }
        let source_ref = self.source_ref.as_ref().map(|r| PolicyRef {
            policy_type: PolicyType::parse(&r.policy_type),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        });
        if let Some(priority) = self.priority {
            if !priority.is_finite() {
                p.add("priority", format!("{priority} is not a finite number"));
            }
        }
        group_names(&mut p, "appliedToGroups", &self.applied_to_groups);
        let rules = self
            .rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                rule(
                    &mut p,
                    &format!("rules[{i}]"),
                    r,
                    !self.applied_to_groups.is_empty(),
                )
            })
            .collect();
        let object = ObjectRef {
            kind: Kind::NetworkPolicy,
            name: meta.name.clone(),
            source: source_ref.as_ref().map(ToString::to_string),
        };
        p.finish(
            object,
            Policy {
                name: meta.name.clone(),
                uid: if meta.uid.is_empty() {
                    meta.name.clone()
                } else {
                    meta.uid.clone()
                },
                generation: meta.generation,
                source_ref,
                applied_to_groups: self.applied_to_groups.clone(),
                priority: self.priority,
                tier_priority: self.tier_priority,
                rules,
            },
        )
    }
}

fn group_names(p: &mut Problems, path: &str, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            p.add(format!("{path}[{i}]"), "empty group name");
        }
    }
}

fn rule(p: &mut Problems, path: &str, r: &NetworkPolicyRule, policy_applied_to: bool) -> Option<Rule> {
    let before = p.0.len();
    let direction = match r.direction.as_str() {
        "In" => Some(Direction::In),
        "Out" => Some(Direction::Out),
        "" => {
            p.add(format!("{path}.direction"), "missing (want In or Out)");
            None
        }
        other => {
            p.add(format!("{path}.direction"), format!("{other:?} is not In or Out"));
            None
        }
    };
    let action = match r.action.as_deref() {
        None => Action::Allow,
        Some("Allow") => Action::Allow,
        Some("Drop") => Action::Drop,
        Some("Reject") => Action::Reject,
        Some("Pass") => Action::Pass,
        Some(other) => {
            p.add(
                format!("{path}.action"),
                format!("{other:?} is not one of Allow, Drop, Reject, Pass"),
            );
            Action::Allow
        }
    };
    let priority = u32::try_from(r.priority).unwrap_or_else(|_| {
        p.add(format!("{path}.priority"), format!("{} is negative", r.priority));
        0
    });
    if policy_applied_to && !r.applied_to_groups.is_empty() {
        p.add(
            format!("{path}.appliedToGroups"),
            "set together with the policy's appliedToGroups (use one or the other)",
        );
    }
    group_names(p, &format!("{path}.appliedToGroups"), &r.applied_to_groups);
    let (peer_name, peer, other_name, other) = match direction {
        Some(Direction::Out) => ("to", &r.to, "from", &r.from),
        _ => ("from", &r.from, "to", &r.to),
    };
    if direction.is_some() && !other.is_empty() {
        p.add(
            format!("{path}.{other_name}"),
            format!(
                "must be empty for direction {} (its peer is {peer_name})",
                r.direction
            ),
        );
    }
    let peer = self::peer(p, &format!("{path}.{peer_name}"), peer, direction);
    let services = r
        .services
        .iter()
        .enumerate()
        .filter_map(|(i, s)| service(p, &format!("{path}.services[{i}]"), s))
        .collect();
    let l7_protocols = r
        .l7_protocols
        .iter()
        .enumerate()
        .filter_map(|(i, l)| l7(p, &format!("{path}.l7Protocols[{i}]"), l))
        .collect();
    let direction = direction?;
    (p.0.len() == before).then(|| Rule {
        name: r.name.clone(),
        direction,
        peer,
        services,
        priority,
        action,
        enable_logging: r.enable_logging,
        log_label: r.log_label.clone(),
        applied_to_groups: r.applied_to_groups.clone(),
        l7_protocols,
    })
}

fn peer(p: &mut Problems, path: &str, w: &NetworkPolicyPeer, direction: Option<Direction>) -> Peer {
    group_names(p, &format!("{path}.addressGroups"), &w.address_groups);
    let ip_blocks = w
        .ip_blocks
        .iter()
        .enumerate()
        .filter_map(|(i, b)| ip_block(p, &format!("{path}.ipBlocks[{i}]"), b))
        .collect();
    if direction == Some(Direction::In) {
        if !w.fqdns.is_empty() {
            p.add(format!("{path}.fqdns"), "only allowed in egress (Out) rules");
        }
        if !w.to_services.is_empty() {
            p.add(format!("{path}.toServices"), "only allowed in egress (Out) rules");
        }
    }
    for (i, fqdn) in w.fqdns.iter().enumerate() {
        if let Err(e) = crate::fqdn::selector::validate(fqdn) {
            p.add(format!("{path}.fqdns[{i}]"), e.to_string());
        }
    }
    for (i, s) in w.to_services.iter().enumerate() {
        if s.name.is_empty() {
            p.add(format!("{path}.toServices[{i}].name"), "missing");
        }
    }
    Peer {
        address_groups: w.address_groups.clone(),
        ip_blocks,
        fqdns: w.fqdns.clone(),
        to_services: w
            .to_services
            .iter()
            .map(|s| ServiceRef {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
            })
            .collect(),
        label_identities: w.label_identities.clone(),
    }
}

fn ip_block(p: &mut Problems, path: &str, b: &IpBlock) -> Option<CidrBlock> {
    let cidr = match b.cidr.to_net() {
        Ok(net) => Some(net),
        Err(e) => {
            p.add(format!("{path}.cidr"), e.to_string());
            None
        }
    };
    let mut except = Vec::new();
    for (i, x) in b.except.iter().enumerate() {
        let xpath = format!("{path}.except[{i}]");
        match (x.to_net(), cidr) {
            (Err(e), _) => p.add(xpath, e.to_string()),
            (Ok(x), Some(c)) if !c.contains(&x) => {
                p.add(xpath, format!("{x} is not inside cidr {c}"));
            }
            (Ok(x), _) => except.push(x),
        }
    }
    Some(CidrBlock { cidr: cidr?, except })
}

fn port_number(p: &mut Problems, path: String, v: i32) -> Option<u16> {
    match u16::try_from(v) {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            p.add(path, format!("{v} is out of range (1-65535)"));
            None
        }
    }
}

fn byte_field(p: &mut Problems, path: String, v: i32) -> Option<u8> {
    u8::try_from(v)
        .map_err(|_| p.add(path, format!("{v} is out of range (0-255)")))
        .ok()
}

/// An IANA service name, as Kubernetes requires for port names: 1-15 characters of `a-z`, `0-9`
/// and `-`, at least one letter, no `-` at either end and no `--`.
pub fn is_valid_port_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && name.bytes().any(|c| c.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

fn service(p: &mut Problems, path: &str, s: &Service) -> Option<ServiceMatch> {
    let before = p.0.len();
    let protocol = match s.protocol.as_deref() {
        None => Some(Protocol::Tcp),
        Some(text) => Protocol::parse(text).or_else(|| {
            p.add(
                format!("{path}.protocol"),
                format!("{text:?} is not one of TCP, UDP, SCTP, ICMP, IGMP"),
            );
            None
        }),
    };
    let proto_name = protocol.map_or("this protocol", Protocol::as_str);
    let has_ports = protocol.is_none_or(Protocol::has_ports);
    let not_for = |p: &mut Problems, field: &str, what: &str| {
        p.add(
            format!("{path}.{field}"),
            format!("not allowed with protocol {proto_name} (only for {what})"),
        );
    };

    // Destination ports.
    let mut port = None;
    match (&s.port, s.end_port) {
        (Some(_), _) | (None, Some(_)) if !has_ports => {
            let field = if s.port.is_some() { "port" } else { "endPort" };
            not_for(p, field, "TCP, UDP and SCTP");
        }
        (None, Some(_)) => p.add(format!("{path}.endPort"), "set without port"),
        (None, None) => {}
        (Some(IntOrString::Str(name)), end) => {
            if !is_valid_port_name(name) {
                p.add(
                    format!("{path}.port"),
                    format!("{name:?} is not a valid port name"),
                );
            }
            if end.is_some() {
                p.add(format!("{path}.endPort"), "only allowed with a numbered port");
            }
            port = Some(PortMatch::Named(name.clone()));
        }
        (Some(IntOrString::Int(start)), end) => {
            let start = port_number(p, format!("{path}.port"), *start);
            let end = match end {
                None => start,
                Some(e) => port_number(p, format!("{path}.endPort"), e),
            };
            if let (Some(start), Some(end)) = (start, end) {
                if end < start {
                    p.add(
                        format!("{path}.endPort"),
                        format!("{end} is less than port {start}"),
                    );
                }
                port = Some(PortMatch::Range(PortRange { start, end }));
            }
        }
    }

    // Source ports.
    let mut src_ports = None;
    match (s.src_port, s.src_end_port) {
        (Some(_), _) | (None, Some(_)) if !has_ports => {
            let field = if s.src_port.is_some() {
                "srcPort"
            } else {
                "srcEndPort"
            };
            not_for(p, field, "TCP, UDP and SCTP");
        }
        (None, Some(_)) => p.add(format!("{path}.srcEndPort"), "set without srcPort"),
        (None, None) => {}
        (Some(start), end) => {
            let start = port_number(p, format!("{path}.srcPort"), start);
            let end = match end {
                None => start,
                Some(e) => port_number(p, format!("{path}.srcEndPort"), e),
            };
            if let (Some(start), Some(end)) = (start, end) {
                if end < start {
                    p.add(
                        format!("{path}.srcEndPort"),
                        format!("{end} is less than srcPort {start}"),
                    );
                }
                src_ports = Some(PortRange { start, end });
            }
        }
    }

    // ICMP / IGMP.
    let is = |want: Protocol| protocol.is_none_or(|have| have == want);
    let mut icmp = |field: &str, v: Option<i32>| -> Option<u8> {
        let v = v?;
        if !is(Protocol::Icmp) {
            not_for(p, field, "ICMP");
            return None;
        }
        byte_field(p, format!("{path}.{field}"), v)
    };
    let icmp_type = icmp("icmpType", s.icmp_type);
    let icmp_code = icmp("icmpCode", s.icmp_code);
    let igmp_type = match s.igmp_type {
        Some(_) if !is(Protocol::Igmp) => {
            not_for(p, "igmpType", "IGMP");
            None
        }
        Some(v) => byte_field(p, format!("{path}.igmpType"), v),
        None => None,
    };
    let group_address = match s.group_address.as_str() {
        "" => None,
        _ if !is(Protocol::Igmp) => {
            not_for(p, "groupAddress", "IGMP");
            None
        }
        text => match text.parse::<IpAddr>() {
            Ok(ip) if ip.is_multicast() => Some(ip),
            Ok(ip) => {
                p.add(
                    format!("{path}.groupAddress"),
                    format!("{ip} is not a multicast address"),
                );
                None
            }
            Err(e) => {
                p.add(format!("{path}.groupAddress"), format!("{text:?}: {e}"));
                None
            }
        },
    };
    let protocol = protocol?;
    (p.0.len() == before).then_some(ServiceMatch {
        protocol,
        port,
        src_ports,
        icmp_type,
        icmp_code,
        igmp_type,
        group_address,
    })
}

const HTTP_METHODS: [&str; 9] = [
    "GET", "POST", "PUT", "HEAD", "DELETE", "TRACE", "OPTIONS", "CONNECT", "PATCH",
];

fn l7(p: &mut Problems, path: &str, l: &L7Wire) -> Option<L7Protocol> {
    match (&l.http, &l.tls) {
        (Some(h), None) => {
            if !h.method.is_empty() && !HTTP_METHODS.contains(&h.method.as_str()) {
                p.add(
                    format!("{path}.http.method"),
                    format!("{:?} is not one of {}", h.method, HTTP_METHODS.join(", ")),
                );
                return None;
            }
            Some(L7Protocol::Http {
                host: h.host.clone(),
                method: h.method.clone(),
                path: h.path.clone(),
            })
        }
        (None, Some(t)) => Some(L7Protocol::Tls { sni: t.sni.clone() }),
        (Some(_), Some(_)) => {
            p.add(path.to_owned(), "both http and tls are set (want exactly one)");
            None
        }
        (None, None) => {
            p.add(path.to_owned(), "neither http nor tls is set (want exactly one)");
            None
        }
    }
}

fn member(p: &mut Problems, path: &str, m: &GroupMember) -> Option<Member> {
    let before = p.0.len();
    let mut refs = Vec::new();
    let need_ns = |p: &mut Problems, field: &str, ns: &str, name: &str| {
        if name.is_empty() {
            p.add(format!("{path}.{field}.name"), "missing");
        }
        if ns.is_empty() {
            p.add(format!("{path}.{field}.namespace"), "missing");
        }
    };
    if let Some(r) = &m.pod {
        need_ns(p, "pod", &r.namespace, &r.name);
        refs.push(MemberRef::Pod {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        });
    }
    if let Some(r) = &m.external_entity {
        need_ns(p, "externalEntity", &r.namespace, &r.name);
        refs.push(MemberRef::ExternalEntity {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        });
    }
    if let Some(r) = &m.service {
        need_ns(p, "service", &r.namespace, &r.name);
        refs.push(MemberRef::Service {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        });
    }
    if let Some(r) = &m.node {
        if r.name.is_empty() {
            p.add(format!("{path}.node.name"), "missing");
        }
        refs.push(MemberRef::Node { name: r.name.clone() });
    }
    if refs.len() != 1 {
        p.add(
            path.to_owned(),
            format!(
                "{} of pod, externalEntity, node, service are set (want exactly one)",
                refs.len()
            ),
        );
    }
    let mut ips = Vec::with_capacity(m.ips.len());
    for (i, ip) in m.ips.iter().enumerate() {
        match ip.to_ip() {
            Ok(ip) => ips.push(ip),
            Err(e) => p.add(format!("{path}.ips[{i}]"), e.to_string()),
        }
    }
    let mut ports = Vec::with_capacity(m.ports.len());
    for (i, np) in m.ports.iter().enumerate() {
        let ppath = format!("{path}.ports[{i}]");
        if !is_valid_port_name(&np.name) {
            p.add(
                format!("{ppath}.name"),
                format!("{:?} is not a valid port name", np.name),
            );
        }
        let port = port_number(p, format!("{ppath}.port"), np.port);
        let protocol = match np.protocol.as_str() {
            "" => Some(Protocol::Tcp),
            text => Protocol::parse(text)
                .filter(|proto| proto.has_ports())
                .or_else(|| {
                    p.add(
                        format!("{ppath}.protocol"),
                        format!("{text:?} is not one of TCP, UDP, SCTP"),
                    );
                    None
                }),
        };
        if let (Some(port), Some(protocol)) = (port, protocol) {
            ports.push(MemberPort {
                name: np.name.clone(),
                port,
                protocol,
            });
        }
    }
    let entity = refs.pop()?;
    (p.0.len() == before).then_some(Member { entity, ips, ports })
}

fn members(p: &mut Problems, field: &str, list: &[GroupMember]) -> Vec<Member> {
    list.iter()
        .enumerate()
        .filter_map(|(i, m)| member(p, &format!("{field}[{i}]"), m))
        .collect()
}

fn group(kind: Kind, meta: &super::types::ObjectMeta, list: &[GroupMember]) -> Result<Group, InvalidObject> {
    let mut p = Problems::default();
    if meta.name.is_empty() {
        p.add("metadata.name", "missing");
    }
    let members = members(&mut p, "groupMembers", list);
    let object = ObjectRef {
        kind,
        name: meta.name.clone(),
        source: None,
    };
    p.finish(
        object,
        Group {
            name: meta.name.clone(),
            uid: if meta.uid.is_empty() {
                meta.name.clone()
            } else {
                meta.uid.clone()
            },
            members: members.into_iter().map(|m| (m.key(), m)).collect(),
        },
    )
}

impl AddressGroup {
    /// Validates the group into a [`Group`] (duplicate members collapse, as in a set).
    pub fn validate(&self) -> Result<Group, InvalidObject> {
        group(Kind::AddressGroup, &self.metadata, &self.group_members)
    }
}

impl AppliedToGroup {
    /// Validates the group into a [`Group`] (duplicate members collapse, as in a set).
    pub fn validate(&self) -> Result<Group, InvalidObject> {
        group(Kind::AppliedToGroup, &self.metadata, &self.group_members)
    }
}

impl GroupPatch {
    /// Validates the patch; `kind` is [`Kind::AddressGroupPatch`] or
    /// [`Kind::AppliedToGroupPatch`] (the object's own `kind` field is not trusted for this).
    pub fn validate(&self, kind: Kind) -> Result<MembersPatch, InvalidObject> {
        let mut p = Problems::default();
        if self.metadata.name.is_empty() {
            p.add("metadata.name", "missing");
        }
        let added = members(&mut p, "addedGroupMembers", &self.added_group_members);
        let removed = members(&mut p, "removedGroupMembers", &self.removed_group_members);
        let object = ObjectRef {
            kind,
            name: self.metadata.name.clone(),
            source: None,
        };
        p.finish(
            object,
            MembersPatch {
                name: self.metadata.name.clone(),
                added,
                removed,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn decode(text: &str) -> ControlplaneObject {
        ControlplaneObject::from_value(serde_json::from_str(text).unwrap()).unwrap()
    }

    fn policy(v: Value) -> Result<Policy, InvalidObject> {
        serde_json::from_value::<NetworkPolicy>(v).unwrap().validate()
    }

    /// A valid ANNP-derived policy with one In rule; `rules` replaces its rules.
    fn np_with_rules(rules: Value) -> Value {
        json!({
            "kind": "NetworkPolicy",
            "metadata": {"name": "uid-1", "uid": "uid-1", "generation": 2},
            "appliedToGroups": ["atg"],
            "priority": 10,
            "tierPriority": 250,
            "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": "vm-ns", "name": "annp1", "uid": "uid-1"},
            "rules": rules,
        })
    }

    fn in_rule(extra: Value) -> Value {
        let mut r =
            json!({"direction": "In", "from": {"addressGroups": ["ag"]}, "to": {}, "enableLogging": false});
        if let (Value::Object(r), Value::Object(extra)) = (&mut r, extra) {
            r.extend(extra);
        }
        r
    }

    /// The problems of a policy whose second rule has `extra` merged in.
    fn problems(extra: Value) -> Vec<String> {
        let err = policy(np_with_rules(json!([in_rule(json!({})), in_rule(extra)]))).unwrap_err();
        err.problems.iter().map(ToString::to_string).collect()
    }

    fn one_problem(extra: Value) -> String {
        let p = problems(extra.clone());
        assert_eq!(p.len(), 1, "{extra}: {p:?}");
        p[0].clone()
    }

    #[test]
    fn annp_example_validates_into_its_view() {
        let ValidObject::NetworkPolicy(p) =
            decode(include_str!("testdata/np_annp1.json")).validate().unwrap()
        else {
            panic!("kind");
        };
        assert_eq!(p.name, "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10");
        assert_eq!(p.generation, 1);
        assert_eq!(p.priority, Some(9000.0));
        assert_eq!(p.tier_priority, Some(250));
        let src = p.source_ref.as_ref().unwrap();
        assert_eq!(src.policy_type, PolicyType::AntreaNetworkPolicy);
        assert!(src.policy_type.is_antrea_native());
        assert_eq!(src.to_string(), "AntreaNetworkPolicy vm-ns/annp1");
        assert!(!p.applied_to_per_rule());
        assert_eq!(
            p.rules,
            vec![Rule {
                name: "ingress-reject-3f2a1b9".into(),
                direction: Direction::In,
                peer: Peer {
                    address_groups: vec!["cacccce8-595f-5250-b361-a0ca752b2c72".into()],
                    ip_blocks: vec![CidrBlock {
                        cidr: net("172.16.100.5/32"),
                        except: vec![]
                    }],
                    ..Peer::default()
                },
                services: vec![ServiceMatch {
                    protocol: Protocol::Tcp,
                    port: Some(PortMatch::Range(PortRange { start: 22, end: 22 })),
                    src_ports: None,
                    icmp_type: None,
                    icmp_code: None,
                    igmp_type: None,
                    group_address: None,
                }],
                priority: 0,
                action: Action::Reject,
                enable_logging: false,
                log_label: String::new(),
                applied_to_groups: vec![],
                l7_protocols: vec![],
            }]
        );
        assert_eq!(
            p.rule_applied_to_groups(&p.rules[0]),
            ["9a47b91d-76f1-5b82-a456-3816a3514090".to_string()]
        );
    }

    #[test]
    fn acnp_example_validates_into_its_view() {
        let ValidObject::NetworkPolicy(p) = decode(include_str!("testdata/np_acnp.json")).validate().unwrap()
        else {
            panic!("kind");
        };
        assert!(p.applied_to_per_rule());
        assert_eq!(p.applied_to_group_names(), BTreeSet::from(["cg-db"]));
        assert!(p.address_group_names().is_empty());
        let [allow_web, allow_fqdn, drop] = &p.rules[..] else {
            panic!("3 rules");
        };
        assert_eq!(
            allow_web.peer.ip_blocks,
            [CidrBlock {
                cidr: net("10.0.0.0/8"),
                except: vec![net("10.10.0.0/16")]
            }]
        );
        assert_eq!(
            allow_web.services[0].port,
            Some(PortMatch::Range(PortRange {
                start: 8000,
                end: 9000
            }))
        );
        assert_eq!(allow_web.services[1].protocol, Protocol::Icmp);
        assert_eq!(
            (allow_web.services[1].icmp_type, allow_web.services[1].icmp_code),
            (Some(8), Some(0))
        );
        assert!(allow_web.enable_logging);
        assert_eq!(allow_web.log_label, "vm-ingress");
        assert_eq!(p.rule_applied_to_groups(allow_web), ["cg-db".to_string()]);
        assert_eq!(allow_fqdn.direction, Direction::Out);
        assert_eq!(allow_fqdn.peer.fqdns, ["*.example.com"]);
        assert_eq!(
            allow_fqdn.l7_protocols,
            [L7Protocol::Tls {
                sni: "api.example.com".into()
            }]
        );
        assert_eq!(drop.action, Action::Drop);
        assert_eq!(drop.priority, 1);
        assert!(drop.services.is_empty());
        assert_eq!(
            drop.peer.ip_blocks.iter().map(|b| b.cidr).collect::<Vec<_>>(),
            [net("0.0.0.0/0"), net("::/0")]
        );
    }

    #[test]
    fn group_examples_validate_into_member_sets() {
        let ValidObject::AddressGroup(g) = decode(include_str!("testdata/ag.json")).validate().unwrap()
        else {
            panic!("kind");
        };
        let members: Vec<_> = g.members.values().cloned().collect();
        assert_eq!(
            members,
            [
                Member {
                    entity: MemberRef::ExternalEntity {
                        namespace: "vm-ns".into(),
                        name: "vm2-e8be5".into()
                    },
                    ips: vec![ip("172.16.100.4")],
                    ports: vec![],
                },
                Member {
                    entity: MemberRef::ExternalEntity {
                        namespace: "vm-ns".into(),
                        name: "vm3".into()
                    },
                    ips: vec![ip("172.16.100.6")],
                    ports: vec![],
                },
            ]
        );
        let ValidObject::AppliedToGroup(g) = decode(include_str!("testdata/atg.json")).validate().unwrap()
        else {
            panic!("kind");
        };
        assert_eq!(g.members.len(), 1);
        let ValidObject::AddressGroupPatch(p) =
            decode(include_str!("testdata/ag_patch.json")).validate().unwrap()
        else {
            panic!("kind");
        };
        assert_eq!(p.name, "cacccce8-595f-5250-b361-a0ca752b2c72");
        assert_eq!(
            p.added[0].entity,
            MemberRef::Pod {
                namespace: "vm-ns".into(),
                name: "front-7d9f".into()
            }
        );
        assert_eq!(p.added[0].ips, [ip("10.10.1.5")]);
        assert_eq!(p.removed[0].ips, [ip("172.16.100.6")]);
        let ValidObject::AppliedToGroupPatch(p) = decode(include_str!("testdata/atg_patch.json"))
            .validate()
            .unwrap()
        else {
            panic!("kind");
        };
        assert_eq!(p.added.len() + p.removed.len(), 2);
    }

    #[test]
    fn error_names_object_source_and_field_path() {
        let err = policy(np_with_rules(json!([
            in_rule(json!({})),
            in_rule(json!({"services": [{"protocol": "TCP", "port": 90, "endPort": 80}]})),
        ])))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "NetworkPolicy uid-1 (AntreaNetworkPolicy vm-ns/annp1): rules[1].services[0].endPort: 80 is less than port 90"
        );
        assert_eq!(err.object.kind, Kind::NetworkPolicy);
        assert_eq!(err.problems[0].path, "rules[1].services[0].endPort");
    }

    #[test]
    fn every_problem_is_reported() {
        let p = problems(json!({"direction": "Up", "action": "Deny", "services": [{"protocol": "XTP"}]}));
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("rules[1].direction: \"Up\""), "{p:?}");
        assert!(p[1].starts_with("rules[1].action: \"Deny\""), "{p:?}");
        assert!(
            p[2].starts_with("rules[1].services[0].protocol: \"XTP\""),
            "{p:?}"
        );
    }

    #[test]
    fn bad_cidrs_and_ip_bytes() {
        let block = |b: Value| json!({"from": {"ipBlocks": [b]}});
        assert_eq!(
            one_problem(block(json!({"cidr": {"ip": "AQID", "prefixLength": 8}}))),
            "rules[1].from.ipBlocks[0].cidr: 3 bytes is not an IP address (want 4 or 16)"
        );
        assert_eq!(
            one_problem(block(
                json!({"cidr": {"ip": "AAAAAAAAAAAAAP//CgAAAA==", "prefixLength": 33}})
            )),
            "rules[1].from.ipBlocks[0].cidr: prefix length 33 is out of range for IPv4 (0-32)"
        );
        assert_eq!(
            one_problem(block(json!({"cidr": {"prefixLength": 8}}))),
            "rules[1].from.ipBlocks[0].cidr: missing IP address"
        );
        assert_eq!(
            one_problem(block(
                json!({"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "11.0.0.0/16"]})
            )),
            "rules[1].from.ipBlocks[0].except[1]: 11.0.0.0/16 is not inside cidr 10.0.0.0/8"
        );
        assert_eq!(
            one_problem(block(json!({"cidr": "10.0.0.0/8", "except": ["fd00::/64"]}))),
            "rules[1].from.ipBlocks[0].except[0]: fd00::/64 is not inside cidr 10.0.0.0/8"
        );
        // A 16-byte non-mapped address is IPv6 and may use 128 bits; host bits are cleared.
        let ok = policy(np_with_rules(json!([in_rule(block(
            json!({"cidr": "fd00::5/120"})
        ))])))
        .unwrap();
        assert_eq!(ok.rules[0].peer.ip_blocks[0].cidr, net("fd00::/120"));
    }

    #[test]
    fn bad_ports() {
        let svc = |s: Value| json!({"services": [s]});
        assert_eq!(
            one_problem(svc(json!({"protocol": "TCP", "port": 0}))),
            "rules[1].services[0].port: 0 is out of range (1-65535)"
        );
        assert_eq!(
            one_problem(svc(json!({"protocol": "UDP", "port": 70000}))),
            "rules[1].services[0].port: 70000 is out of range (1-65535)"
        );
        assert_eq!(
            one_problem(svc(json!({"port": 80, "endPort": 65536}))),
            "rules[1].services[0].endPort: 65536 is out of range (1-65535)"
        );
        assert_eq!(
            one_problem(svc(json!({"endPort": 80}))),
            "rules[1].services[0].endPort: set without port"
        );
        assert_eq!(
            one_problem(svc(json!({"port": "http", "endPort": 90}))),
            "rules[1].services[0].endPort: only allowed with a numbered port"
        );
        assert_eq!(
            one_problem(svc(json!({"port": "Not_A_Name"}))),
            "rules[1].services[0].port: \"Not_A_Name\" is not a valid port name"
        );
        assert_eq!(
            one_problem(svc(json!({"srcPort": 1000, "srcEndPort": 999}))),
            "rules[1].services[0].srcEndPort: 999 is less than srcPort 1000"
        );
        assert_eq!(
            one_problem(svc(json!({"srcEndPort": 999}))),
            "rules[1].services[0].srcEndPort: set without srcPort"
        );
        assert_eq!(
            one_problem(svc(json!({"protocol": "ICMP", "port": 22}))),
            "rules[1].services[0].port: not allowed with protocol ICMP (only for TCP, UDP and SCTP)"
        );
        assert_eq!(
            one_problem(svc(json!({"protocol": "TCP", "icmpType": 8}))),
            "rules[1].services[0].icmpType: not allowed with protocol TCP (only for ICMP)"
        );
        assert_eq!(
            one_problem(svc(json!({"protocol": "ICMP", "icmpType": 8, "icmpCode": 256}))),
            "rules[1].services[0].icmpCode: 256 is out of range (0-255)"
        );
        assert_eq!(
            one_problem(svc(json!({"protocol": "UDP", "igmpType": 22}))),
            "rules[1].services[0].igmpType: not allowed with protocol UDP (only for IGMP)"
        );
        assert_eq!(
            one_problem(svc(json!({"protocol": "IGMP", "groupAddress": "10.0.0.1"}))),
            "rules[1].services[0].groupAddress: 10.0.0.1 is not a multicast address"
        );
        // Valid: named port, range, source range, IGMP.
        let ok = policy(np_with_rules(json!([in_rule(json!({"services": [
            {"port": "http"},
            {"protocol": "SCTP", "port": 1, "endPort": 65535, "srcPort": 1024, "srcEndPort": 2048},
            {"protocol": "IGMP", "igmpType": 22, "groupAddress": "224.0.0.251"},
        ]}))])))
        .unwrap();
        let s = &ok.rules[0].services;
        assert_eq!(s[0].protocol, Protocol::Tcp);
        assert_eq!(s[0].port, Some(PortMatch::Named("http".into())));
        assert_eq!(
            s[1].port,
            Some(PortMatch::Range(PortRange { start: 1, end: 65535 }))
        );
        assert_eq!(
            s[1].src_ports,
            Some(PortRange {
                start: 1024,
                end: 2048
            })
        );
        assert_eq!(
            (s[2].igmp_type, s[2].group_address),
            (Some(22), Some(ip("224.0.0.251")))
        );
    }

    #[test]
    fn bad_protocol_action_direction() {
        assert_eq!(
            one_problem(json!({"services": [{"protocol": "tcp"}]})),
            "rules[1].services[0].protocol: \"tcp\" is not one of TCP, UDP, SCTP, ICMP, IGMP"
        );
        assert_eq!(
            one_problem(json!({"action": "Deny"})),
            "rules[1].action: \"Deny\" is not one of Allow, Drop, Reject, Pass"
        );
        assert_eq!(
            one_problem(json!({"direction": "Both"})),
            "rules[1].direction: \"Both\" is not In or Out"
        );
        assert_eq!(
            one_problem(json!({"direction": ""})),
            "rules[1].direction: missing (want In or Out)"
        );
        // Absent action is Allow; Pass is known.
        let ok = policy(np_with_rules(json!([
            in_rule(json!({})),
            in_rule(json!({"action": "Pass"}))
        ])))
        .unwrap();
        assert_eq!(
            (ok.rules[0].action, ok.rules[1].action),
            (Action::Allow, Action::Pass)
        );
    }

    #[test]
    fn rule_shape_problems() {
        assert_eq!(
            one_problem(json!({"to": {"ipBlocks": [{"cidr": "10.0.0.0/8"}]}})),
            "rules[1].to: must be empty for direction In (its peer is from)"
        );
        assert_eq!(
            one_problem(json!({"from": {"fqdns": ["a.example.com"]}})),
            "rules[1].from.fqdns: only allowed in egress (Out) rules"
        );
        assert_eq!(
            one_problem(json!({"direction": "Out", "from": {}, "to": {"fqdns": ["*"]}})),
            "rules[1].to.fqdns[0]: \"*\" has no name part besides wildcards (it would match every name)"
        );
        assert_eq!(
            one_problem(json!({"direction": "Out", "from": {}, "to": {"fqdns": [""]}})),
            "rules[1].to.fqdns[0]: empty name"
        );
        let err = policy(np_with_rules(json!([
            in_rule(json!({})),
            in_rule(json!({"direction": "Out", "from": {}, "to": {"fqdns": ["ok.example.com", "a..b"]}}))
        ])))
        .unwrap_err();
        assert!(
            err.to_string().starts_with("NetworkPolicy ") && err.to_string().contains("rules[1].to.fqdns[1]"),
            "the error names the policy and the field: {err}"
        );
        assert_eq!(
            one_problem(json!({"priority": -1})),
            "rules[1].priority: -1 is negative"
        );
        assert_eq!(
            one_problem(json!({"appliedToGroups": ["other"]})),
            "rules[1].appliedToGroups: set together with the policy's appliedToGroups (use one or the other)"
        );
        assert_eq!(
            one_problem(json!({"from": {"addressGroups": [""]}})),
            "rules[1].from.addressGroups[0]: empty group name"
        );
        assert_eq!(
            one_problem(json!({"l7Protocols": [{"http": {"method": "FETCH"}}]})),
            "rules[1].l7Protocols[0].http.method: \"FETCH\" is not one of GET, POST, PUT, HEAD, DELETE, TRACE, OPTIONS, CONNECT, PATCH"
        );
        assert_eq!(
            one_problem(json!({"l7Protocols": [{}]})),
            "rules[1].l7Protocols[0]: neither http nor tls is set (want exactly one)"
        );
        let err = policy(json!({"metadata": {}, "priority": 1})).unwrap_err();
        assert_eq!(err.to_string(), "NetworkPolicy <unnamed>: metadata.name: missing");
        // Out rule: `to` is the peer and `from` must be empty.
        let ok = policy(np_with_rules(
            json!([{"direction": "Out", "from": {}, "to": {"addressGroups": ["ag"]},
                                               "enableLogging": true}]),
        ))
        .unwrap();
        assert_eq!(ok.rules[0].peer.address_groups, ["ag"]);
        assert_eq!(ok.uid, "uid-1");
        let no_uid = policy(json!({"metadata": {"name": "local"}})).unwrap();
        assert_eq!(no_uid.uid, "local");
        assert!(no_uid.source_ref.is_none());
    }

    #[test]
    fn bad_group_members() {
        let group = |members: Value| {
            serde_json::from_value::<AddressGroup>(
                json!({"metadata": {"name": "g"}, "groupMembers": members}),
            )
            .unwrap()
            .validate()
        };
        let msg = |members: Value| group(members).unwrap_err().to_string();
        assert_eq!(
            msg(json!([{"ips": ["AAAAAAAAAAAAAP//CgAAAQ=="]}])),
            "AddressGroup g: groupMembers[0]: 0 of pod, externalEntity, node, service are set (want exactly one)"
        );
        assert_eq!(
            msg(json!([{"pod": {"name": "a", "namespace": "n"}, "node": {"name": "x"}}])),
            "AddressGroup g: groupMembers[0]: 2 of pod, externalEntity, node, service are set (want exactly one)"
        );
        assert_eq!(
            msg(json!([{"externalEntity": {"name": "vm1", "namespace": "ns"}, "ips": ["AQIDBAU="]}])),
            "AddressGroup g: groupMembers[0].ips[0]: 5 bytes is not an IP address (want 4 or 16)"
        );
        assert_eq!(
            msg(json!([{"externalEntity": {"name": "vm1"}}])),
            "AddressGroup g: groupMembers[0].externalEntity.namespace: missing"
        );
        assert_eq!(
            msg(json!([{"pod": {"name": "p", "namespace": "n"},
                        "ports": [{"name": "http", "port": 80, "protocol": "ICMP"}, {"name": "x", "port": 0}]}])),
            "AddressGroup g: groupMembers[0].ports[0].protocol: \"ICMP\" is not one of TCP, UDP, SCTP; \
             groupMembers[0].ports[1].port: 0 is out of range (1-65535)"
        );
        // Duplicates collapse; a node member has no namespace; 4-byte IPv4 is accepted.
        let g = group(json!([
            {"node": {"name": "n1"}, "ips": ["CgAAAQ=="]},
            {"node": {"name": "n1"}, "ips": ["AAAAAAAAAAAAAP//CgAAAQ=="]},
            {"pod": {"name": "p", "namespace": "n"}, "ports": [{"name": "http", "port": 8080}]},
        ]))
        .unwrap();
        assert_eq!(g.members.len(), 2);
        let pod = g
            .members
            .values()
            .find(|m| matches!(m.entity, MemberRef::Pod { .. }))
            .unwrap();
        assert_eq!(
            pod.ports,
            [MemberPort {
                name: "http".into(),
                port: 8080,
                protocol: Protocol::Tcp
            }]
        );
        let patch = serde_json::from_value::<GroupPatch>(json!({"metadata": {"name": "g"},
            "removedGroupMembers": [{"service": {"name": "s"}}]}))
        .unwrap()
        .validate(Kind::AppliedToGroupPatch)
        .unwrap_err();
        assert_eq!(
            patch.to_string(),
            "AppliedToGroupPatch g: removedGroupMembers[0].service.namespace: missing"
        );
    }

    #[test]
    fn port_names_follow_iana_rules() {
        for good in ["http", "h2c", "web-8080", "a", "abcdefghijklmno"] {
            assert!(is_valid_port_name(good), "{good}");
        }
        for bad in [
            "",
            "8080",
            "HTTP",
            "-http",
            "http-",
            "we--b",
            "abcdefghijklmnop",
            "a_b",
        ] {
            assert!(!is_valid_port_name(bad), "{bad}");
        }
    }
}
