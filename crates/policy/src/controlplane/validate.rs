//! Validation of controlplane objects into the typed views the agent acts on ([`Policy`],
//! [`Group`], [`MembersPatch`]). Every problem is reported with the object (kind and name, plus
//! the source policy for a NetworkPolicy) and the field path (`rules[1].services[0].endPort`);
//! one bad field rejects the whole object, never its neighbours.
//!
//! What is checked: names present; IP bytes (4 or 16) and prefix lengths (per family); `except`
//! inside its `cidr`; protocols, actions and directions from the known sets; port numbers
//! 1-65535, `endPort >= port`, ranges only on numbered ports, port fields only for TCP/UDP/SCTP,
//! ICMP/IGMP fields only for their protocol; rule peers on the side their direction reads.
//! Groups are lenient, as the controller is: a member without exactly one reference or with bad IP
//! bytes is dropped, a named port that cannot be enforced is left out, and the rest of the group
//! stands ([`dropped_members`] lists what was left out). Views normalise: IPv4-mapped addresses become IPv4,
//! networks have host bits cleared, an absent protocol is TCP (except with a named port, where it
//! stays unset: the member's declared port gives it, as in Antrea) and an absent action Allow.

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
        self.finish_with(|_| object, value)
    }

    /// [`Problems::finish`], naming the object (from its view) only when it is invalid.
    fn finish_with<T>(self, object: impl FnOnce(&T) -> ObjectRef, value: T) -> Result<T, InvalidObject> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(InvalidObject {
                object: object(&value),
                problems: self.0,
            })
        }
    }
}

/// Where a field is (`rules[0].services[1].port`), formatted only when a problem is reported
/// there: most objects are valid, and formatting every field's path took two thirds of a valid
/// policy's validation.
#[derive(Clone, Copy, Debug)]
enum At<'a> {
    Field(&'a str),
    Child(&'a At<'a>, &'a str),
    Item(&'a At<'a>, usize),
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Field(name) => f.write_str(name),
            At::Child(parent, name) => write!(f, "{parent}.{name}"),
            At::Item(parent, i) => write!(f, "{parent}[{i}]"),
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
    /// Rules a local controller (standalone mode) translated fail-closed, not as written. Not
    /// part of the wire form: set by the source after validation, empty for watched objects.
    pub rule_notes: Vec<crate::refuse::RuleNote>,
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
    /// `None` only for a named port without a protocol (as antrea-controller sends AdminNetworkPolicy
    /// and BaselineAdminNetworkPolicy named ports): the protocol is the one each member declares
    /// for that name.
    pub protocol: Option<Protocol>,
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
    /// Groups are shared like policies: a source that hands the same group over again (a policy
    /// directory, the local controller) costs a pointer, not a copy of its members.
    AddressGroup(Arc<Group>),
    AppliedToGroup(Arc<Group>),
    AddressGroupPatch(MembersPatch),
    AppliedToGroupPatch(MembersPatch),
}

// === validation ===

/// Validation of a wire object into its typed view. A trait because the wire types live in the
/// `antrea-controlplane` crate and validation is the agent's; bring it into scope to call
/// `.validate()`.
pub trait Validate {
    /// The typed view of a valid object.
    type Valid;
    /// Validates the object into its typed view.
    fn validate(&self) -> Result<Self::Valid, InvalidObject>;
}

/// Validation of a group patch, whose kind the caller says (see [`GroupPatch`]'s impl).
pub trait ValidatePatch {
    /// Validates the patch; `kind` is [`Kind::AddressGroupPatch`] or
    /// [`Kind::AppliedToGroupPatch`] (the object's own `kind` field is not trusted for this).
    fn validate(&self, kind: Kind) -> Result<MembersPatch, InvalidObject>;
}

impl Validate for ControlplaneObject {
    type Valid = ValidObject;
    /// Validates the object into its typed view.
    fn validate(&self) -> Result<ValidObject, InvalidObject> {
        Ok(match self {
            ControlplaneObject::NetworkPolicy(np) => ValidObject::NetworkPolicy(Arc::new(np.validate()?)),
            ControlplaneObject::AddressGroup(g) => ValidObject::AddressGroup(Arc::new(g.validate()?)),
            ControlplaneObject::AppliedToGroup(g) => ValidObject::AppliedToGroup(Arc::new(g.validate()?)),
            ControlplaneObject::AddressGroupPatch(p) => {
                ValidObject::AddressGroupPatch(p.validate(Kind::AddressGroupPatch)?)
            }
            ControlplaneObject::AppliedToGroupPatch(p) => {
                ValidObject::AppliedToGroupPatch(p.validate(Kind::AppliedToGroupPatch)?)
            }
        })
    }
}

impl Validate for NetworkPolicy {
    type Valid = Policy;
    /// Validates the policy into a [`Policy`].
    fn validate(&self) -> Result<Policy, InvalidObject> {
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
        group_names(&mut p, &At::Field("appliedToGroups"), &self.applied_to_groups);
        let rules = self
            .rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                rule(
                    &mut p,
                    &At::Item(&At::Field("rules"), i),
                    r,
                    !self.applied_to_groups.is_empty(),
                )
            })
            .collect();
        let object = |policy: &Policy| ObjectRef {
            kind: Kind::NetworkPolicy,
            name: policy.name.clone(),
            source: policy.source_ref.as_ref().map(ToString::to_string),
        };
        p.finish_with(
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
                rule_notes: Vec::new(),
            },
        )
    }
}

fn group_names(p: &mut Problems, path: &At<'_>, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            p.add(format!("{path}[{i}]"), "empty group name");
        }
    }
}

fn rule(p: &mut Problems, path: &At<'_>, r: &NetworkPolicyRule, policy_applied_to: bool) -> Option<Rule> {
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
    group_names(p, &At::Child(path, "appliedToGroups"), &r.applied_to_groups);
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
    let peer = self::peer(p, &At::Child(path, peer_name), peer, direction);
    let services = r
        .services
        .iter()
        .enumerate()
        .filter_map(|(i, s)| service(p, &At::Item(&At::Child(path, "services"), i), s))
        .collect();
    let l7_protocols = r
        .l7_protocols
        .iter()
        .enumerate()
        .filter_map(|(i, l)| l7(p, &At::Item(&At::Child(path, "l7Protocols"), i), l))
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

fn peer(p: &mut Problems, path: &At<'_>, w: &NetworkPolicyPeer, direction: Option<Direction>) -> Peer {
    group_names(p, &At::Child(path, "addressGroups"), &w.address_groups);
    let ip_blocks = w
        .ip_blocks
        .iter()
        .enumerate()
        .filter_map(|(i, b)| ip_block(p, &At::Item(&At::Child(path, "ipBlocks"), i), b))
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
        if let Err(e) = crate::fqdn_selector::validate(fqdn) {
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

fn ip_block(p: &mut Problems, path: &At<'_>, b: &IpBlock) -> Option<CidrBlock> {
    let cidr = match b.cidr.to_net() {
        Ok(net) => Some(net),
        Err(e) => {
            p.add(format!("{path}.cidr"), e.to_string());
            None
        }
    };
    let mut except = Vec::new();
    let except_at = At::Child(path, "except");
    for (i, x) in b.except.iter().enumerate() {
        let xpath = At::Item(&except_at, i);
        match (x.to_net(), cidr) {
            (Err(e), _) => p.add(xpath.to_string(), e.to_string()),
            (Ok(x), Some(c)) if !c.contains(&x) => {
                p.add(xpath.to_string(), format!("{x} is not inside cidr {c}"));
            }
            (Ok(x), _) => except.push(x),
        }
    }
    Some(CidrBlock { cidr: cidr?, except })
}

fn port_number(p: &mut Problems, path: At<'_>, v: i32) -> Option<u16> {
    match u16::try_from(v) {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            p.add(path.to_string(), format!("{v} is out of range (1-65535)"));
            None
        }
    }
}

fn byte_field(p: &mut Problems, path: At<'_>, v: i32) -> Option<u8> {
    u8::try_from(v)
        .map_err(|_| p.add(path.to_string(), format!("{v} is out of range (0-255)")))
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

fn service(p: &mut Problems, path: &At<'_>, s: &Service) -> Option<ServiceMatch> {
    let before = p.0.len();
    let named_port = matches!(s.port, Some(IntOrString::Str(_)));
    let protocol = match s.protocol.as_deref() {
        // A named port without a protocol takes the member's (resolved per member).
        None if named_port => None,
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
            let start = port_number(p, At::Child(path, "port"), *start);
            let end = match end {
                None => start,
                Some(e) => port_number(p, At::Child(path, "endPort"), e),
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
            let start = port_number(p, At::Child(path, "srcPort"), start);
            let end = match end {
                None => start,
                Some(e) => port_number(p, At::Child(path, "srcEndPort"), e),
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
        byte_field(p, At::Child(path, field), v)
    };
    let icmp_type = icmp("icmpType", s.icmp_type);
    let icmp_code = icmp("icmpCode", s.icmp_code);
    let igmp_type = match s.igmp_type {
        Some(_) if !is(Protocol::Igmp) => {
            not_for(p, "igmpType", "IGMP");
            None
        }
        Some(v) => byte_field(p, At::Child(path, "igmpType"), v),
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
    if s.protocol.is_some() && protocol.is_none() {
        return None;
    }
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

fn l7(p: &mut Problems, path: &At<'_>, l: &L7Wire) -> Option<L7Protocol> {
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
            p.add(path.to_string(), "both http and tls are set (want exactly one)");
            None
        }
        (None, None) => {
            p.add(path.to_string(), "neither http nor tls is set (want exactly one)");
            None
        }
    }
}

/// How a member names itself in messages: `externalEntity vm-ns/vm2-e8be5`.
fn member_label(m: &GroupMember) -> String {
    let refs = [
        m.pod.as_ref().map(|r| format!("pod {}/{}", r.namespace, r.name)),
        m.external_entity
            .as_ref()
            .map(|r| format!("externalEntity {}/{}", r.namespace, r.name)),
        m.service
            .as_ref()
            .map(|r| format!("service {}/{}", r.namespace, r.name)),
        m.node.as_ref().map(|r| format!("node {}", r.name)),
    ];
    let named: Vec<String> = refs.into_iter().flatten().collect();
    if named.is_empty() {
        "a member without a reference".to_string()
    } else {
        named.join(" + ")
    }
}

/// A member's named ports. antrea-controller copies an ExternalEntity's ports verbatim, so a
/// port without a name (which no rule can refer to) is skipped silently, and a named port the
/// agent cannot enforce with its meaning (number outside 1-65535, a protocol without ports, an
/// invalid name) is left out with a note: rules naming it do not match this member, as with the
/// Go agent, while the member's addresses still count.
fn member_ports(path: &str, m: &GroupMember, notes: &mut Vec<String>) -> Vec<MemberPort> {
    let member_at = At::Field(path);
    let mut ports = Vec::with_capacity(m.ports.len());
    for (i, np) in m.ports.iter().enumerate() {
        if np.name.is_empty() {
            continue;
        }
        let mut p = Problems::default();
        let ports_at = At::Child(&member_at, "ports");
        let ppath = At::Item(&ports_at, i);
        if !is_valid_port_name(&np.name) {
            p.add(
                format!("{ppath}.name"),
                format!("{:?} is not a valid port name", np.name),
            );
        }
        let port = port_number(&mut p, At::Child(&ppath, "port"), np.port);
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
        match (port, protocol) {
            (Some(port), Some(protocol)) if p.0.is_empty() => ports.push(MemberPort {
                name: np.name.clone(),
                port,
                protocol,
            }),
            _ => {
                let why: Vec<String> = p.0.iter().map(|f| format!("{}: {}", f.path, f.message)).collect();
                notes.push(format!(
                    "{path} ({}): named port {:?} left out ({})",
                    member_label(m),
                    np.name,
                    why.join("; ")
                ));
            }
        }
    }
    ports
}

/// Validates one member: `Err` holds why the whole member is unusable (no single reference, a
/// missing name, bad IP bytes); port problems only leave that port out (see [`member_ports`]).
fn member(path: &str, m: &GroupMember, notes: &mut Vec<String>) -> Result<Member, String> {
    let mut p = Problems::default();
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
        need_ns(&mut p, "pod", &r.namespace, &r.name);
        refs.push(MemberRef::Pod {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        });
    }
    if let Some(r) = &m.external_entity {
        need_ns(&mut p, "externalEntity", &r.namespace, &r.name);
        refs.push(MemberRef::ExternalEntity {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        });
    }
    if let Some(r) = &m.service {
        need_ns(&mut p, "service", &r.namespace, &r.name);
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
    match (refs.pop(), p.0.is_empty()) {
        (Some(entity), true) => {
            let ports = member_ports(path, m, notes);
            Ok(Member { entity, ips, ports })
        }
        _ => {
            let why: Vec<String> = p.0.iter().map(|f| format!("{}: {}", f.path, f.message)).collect();
            Err(format!(
                "{path} ({}) dropped: {}",
                member_label(m),
                why.join("; ")
            ))
        }
    }
}

/// The usable members of `list`, and a note for each member dropped or port left out.
fn members(field: &str, list: &[GroupMember]) -> (Vec<Member>, Vec<String>) {
    let mut notes = Vec::new();
    let mut good = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        match member(&format!("{field}[{i}]"), m, &mut notes) {
            Ok(member) => good.push(member),
            Err(note) => notes.push(note),
        }
    }
    (good, notes)
}

/// What lenient group validation left out of `object`, one line per member or port, naming the
/// object; empty for other kinds. The controller copies members from ExternalEntities and Pods
/// as they are, so one bad member must not hide the rest of its group.
pub fn dropped_members(object: &ControlplaneObject) -> Vec<String> {
    let (kind, name, lists): (Kind, &str, Vec<(&str, &[GroupMember])>) = match object {
        ControlplaneObject::AddressGroup(g) => (
            Kind::AddressGroup,
            &g.metadata.name,
            vec![("groupMembers", &g.group_members)],
        ),
        ControlplaneObject::AppliedToGroup(g) => (
            Kind::AppliedToGroup,
            &g.metadata.name,
            vec![("groupMembers", &g.group_members)],
        ),
        ControlplaneObject::AddressGroupPatch(g) | ControlplaneObject::AppliedToGroupPatch(g) => (
            object.kind(),
            &g.metadata.name,
            vec![
                ("addedGroupMembers", &g.added_group_members),
                ("removedGroupMembers", &g.removed_group_members),
            ],
        ),
        _ => return Vec::new(),
    };
    lists
        .into_iter()
        .flat_map(|(field, list)| members(field, list).1)
        .map(|note| format!("{kind} {name}: {note}"))
        .collect()
}

fn group(kind: Kind, meta: &super::types::ObjectMeta, list: &[GroupMember]) -> Result<Group, InvalidObject> {
    let mut p = Problems::default();
    if meta.name.is_empty() {
        p.add("metadata.name", "missing");
    }
    let (members, _dropped) = members("groupMembers", list);
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

impl Validate for AddressGroup {
    type Valid = Group;
    /// Validates the group into a [`Group`] (duplicate members collapse, as in a set).
    fn validate(&self) -> Result<Group, InvalidObject> {
        group(Kind::AddressGroup, &self.metadata, &self.group_members)
    }
}

impl Validate for AppliedToGroup {
    type Valid = Group;
    /// Validates the group into a [`Group`] (duplicate members collapse, as in a set).
    fn validate(&self) -> Result<Group, InvalidObject> {
        group(Kind::AppliedToGroup, &self.metadata, &self.group_members)
    }
}

impl ValidatePatch for GroupPatch {
    /// Validates the patch; `kind` is [`Kind::AddressGroupPatch`] or
    /// [`Kind::AppliedToGroupPatch`] (the object's own `kind` field is not trusted for this).
    fn validate(&self, kind: Kind) -> Result<MembersPatch, InvalidObject> {
        let mut p = Problems::default();
        if self.metadata.name.is_empty() {
            p.add("metadata.name", "missing");
        }
        let (added, _) = members("addedGroupMembers", &self.added_group_members);
        let (removed, _) = members("removedGroupMembers", &self.removed_group_members);
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
mod tests;
