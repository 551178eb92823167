//! The local controller: Antrea-native policies, groups, tiers and the ExternalEntity inventory
//! in, controlplane NetworkPolicy/AddressGroup/AppliedToGroup out, with antrea-controller's
//! semantics (read from its `pkg/controller/networkpolicy`): default tiers and their
//! priorities, per-rule appliedTo, rule priorities by position, generated rule names, match-all
//! peers for empty `from`/`to`, groups named by the UUID of their normalized selector (or by the
//! ClusterGroup/Group key), and ClusterGroup/Group ipBlocks folded into the rule's peer.
//!
//! Pure: no I/O. Every group is resolved once per translation, however many policies use it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::objects::IpBlockError;
use super::objects::{
    check_ip_block, outside_vm, unresolvable_group, unsupported_peer, NativeKind, NativeObject, Unresolvable,
};
use super::selector::{Selector, SelectorError};
use super::types::{AppliedTo, IpBlock, LabelSelector, Meta, Peer, PolicySpec, Rule};
use crate::controlplane::types as cp;
use crate::refuse::{Reason, RuleNote};

mod tiers;
pub use tiers::FAIL_CLOSED_TIER_PRIORITY;

/// antrea-controller's namespace for the UUIDs it derives from names.
const UUID_NAMESPACE: [u8; 16] = [
    0xe4, 0xf2, 0x4a, 0x48, 0xca, 0x1f, 0x4d, 0x5b, 0x81, 0x9c, 0xea, 0x76, 0x32, 0xb2, 0x21, 0x15,
];

/// The tiers that always exist, with their priorities.
pub const DEFAULT_TIERS: [(&str, i32); 6] = [
    ("emergency", 50),
    ("securityops", 100),
    ("networkops", 150),
    ("platform", 200),
    ("application", 250),
    ("baseline", 253),
];

/// The names of the static tiers of old releases, still accepted for the default tiers.
const STATIC_TIER_NAMES: [&str; 6] = [
    "Emergency",
    "SecurityOps",
    "NetworkOps",
    "Platform",
    "Application",
    "Baseline",
];

/// The tier of a policy that names none.
const DEFAULT_TIER_PRIORITY: i32 = 250;

/// Antrea's limit on the number of tiers.
const MAX_TIERS: usize = 20;

/// `uuid.NewV5(namespace, name)`.
pub fn uuid_v5(name: &str) -> String {
    let mut hasher = sha1_smol::Sha1::new();
    hasher.update(&UUID_NAMESPACE);
    hasher.update(name.as_bytes());
    let digest = hasher.digest().bytes();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The uid of a policy, which names its controlplane NetworkPolicy: antrea-controller keys its
/// internal policies by the CRD object's UID (`internalNetworkPolicyKeyFunc`). An object with
/// no `metadata.uid` (written by hand, never stored by an apiserver) gets one derived from its
/// kind, namespace and name.
pub fn policy_uid(kind: NativeKind, meta: &Meta) -> String {
    if meta.uid.is_empty() {
        uuid_v5(&format!("{kind}/{}/{}", meta.namespace, meta.name))
    } else {
        meta.uid.clone()
    }
}

/// The controlplane name `object` would take: its uid when it is a policy.
pub fn policy_name(object: &NativeObject) -> Option<String> {
    match object {
        NativeObject::Policy { kind, meta, .. } => Some(policy_uid(*kind, meta)),
        _ => None,
    }
}

/// The name antrea-controller's mutating webhook gives an unnamed rule:
/// `<ingress|egress>-<action>-<first 7 hex digits of sha1(the rule's JSON)>`.
pub fn generated_rule_name(direction: &str, rule: &Rule) -> String {
    let json = serde_json::to_vec(rule).unwrap_or_default();
    let digest = sha1_smol::Sha1::from(&json).digest().to_string();
    let action = rule.action.as_deref().unwrap_or("allow").to_ascii_lowercase();
    format!("{direction}-{action}-{}", &digest[..7])
}

/// An ExternalEntity: from the inventory, or derived from the local ExternalNode (by
/// `k8s::external_node::local_entities`, which the callers pass in as [`Inputs::local_entities`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entity {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ips: Vec<IpAddr>,
    pub ports: Vec<cp::NamedPort>,
    /// Derived from this agent's ExternalNode: the only members an AppliedToGroup carries (the
    /// controller sends an agent only its own members).
    pub local: bool,
}

/// Everything the local controller reads; `origin` of each object (e.g. its file) names it in
/// errors.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub objects: Vec<(String, NativeObject)>,
    pub local_entities: Vec<Entity>,
}

/// Why a policy is refused: antrea-controller would hold it in error and send it to no agent.
/// Each names the field within the policy (the caller names the policy).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `NetworkPolicyAppliedToUnsupportedGroup` (see `Controller::applied_to`).
    #[error(
        "{at}.group: Group {key} with ExternalEntities in other Namespaces can not be used as \
         AppliedTo (antrea-controller's NetworkPolicyAppliedToUnsupportedGroup): the policy is in \
         error and sent to no agent; not enforced"
    )]
    AppliedToForeignGroup { at: String, key: String },
    #[error("{at}: externalEntitySelector is required (standalone mode selects ExternalEntities only)")]
    NoEntitySelector { at: String },
    #[error("{at}: {field}: {error}")]
    Selector {
        at: String,
        field: &'static str,
        error: SelectorError,
    },
    #[error("{at}.ipBlock: {error}")]
    IpBlock { at: String, error: IpBlockError },
}

/// The controlplane objects, sorted by name, and one line per problem.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Translation {
    pub network_policies: Vec<cp::NetworkPolicy>,
    pub address_groups: Vec<cp::AddressGroup>,
    pub applied_to_groups: Vec<cp::AppliedToGroup>,
    pub errors: Vec<String>,
}

impl Translation {
    /// Every object, as antrea-controller would send them.
    pub fn objects(&self) -> Vec<cp::ControlplaneObject> {
        let mut out: Vec<cp::ControlplaneObject> = Vec::new();
        out.extend(
            self.applied_to_groups
                .iter()
                .cloned()
                .map(cp::ControlplaneObject::AppliedToGroup),
        );
        out.extend(
            self.address_groups
                .iter()
                .cloned()
                .map(cp::ControlplaneObject::AddressGroup),
        );
        out.extend(
            self.network_policies
                .iter()
                .cloned()
                .map(|p| cp::ControlplaneObject::NetworkPolicy(Box::new(p))),
        );
        out
    }
}

/// Where a selector looks for ExternalEntities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    All,
    Namespace(String),
    Namespaces(Selector),
}

/// What a group's members come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// `externalEntitySelector` within a scope.
    Selector { scope: Scope, entities: Selector },
    /// A ClusterGroup (`namespace` empty) or Group, by key.
    Named { namespace: String, name: String },
}

/// A ClusterGroup or Group, checked against the others.
struct GroupDef<'a> {
    origin: &'a str,
    meta: &'a Meta,
    kind: NativeKind,
    spec: &'a super::types::GroupSpec,
}

pub(super) struct Controller<'a> {
    entities: Vec<&'a Entity>,
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    tiers: BTreeMap<String, i32>,
    /// The user Tiers refused (for their priority or the 20-tier cap), with why (named in the
    /// notes of their policies, which are translated fail-closed: see `tiers`).
    refused_tiers: BTreeMap<String, String>,
    /// The Groups (namespaced) that select ExternalEntities outside their namespace, which
    /// cannot be an appliedTo (see [`Controller::applied_to`]); keyed `namespace/name`.
    pub(super) foreign_groups: BTreeSet<String>,
    /// Keyed like antrea-controller: `name` for a ClusterGroup, `namespace/name` for a Group.
    groups: BTreeMap<String, GroupDef<'a>>,
    /// The groups the policies use, by controlplane name.
    address_groups: BTreeMap<String, Source>,
    applied_to_groups: BTreeMap<String, Source>,
    /// What the policy being translated has that matches nothing (it is translated still).
    notes: Vec<String>,
    /// The rules of the policy being translated that are fail-closed, not as written.
    rule_notes: Vec<RuleNote>,
    pub(super) errors: Vec<String>,
}

/// One policy translated, with the groups its rules use (none when it is rejected: a rejected
/// policy creates no group), and the notes of a translated one: the references that match
/// nothing (a group that does not exist, or cannot be an appliedTo), which antrea-controller
/// realizes the policy without.
pub(super) struct PolicyOutput {
    pub result: Result<cp::NetworkPolicy, PolicyError>,
    pub notes: Vec<String>,
    /// The rules translated fail-closed, for the policy's status (the notes say it too).
    pub rule_notes: Vec<RuleNote>,
    pub address_groups: BTreeMap<String, Source>,
    pub applied_to_groups: BTreeMap<String, Source>,
}

/// The ExternalEntity an inventory object describes.
pub(super) fn inventory_entity(
    meta: &Meta,
    spec: &super::types::ExternalEntitySpec,
    ips: &[IpAddr],
) -> Entity {
    Entity {
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        labels: meta.labels.clone(),
        ips: ips.to_vec(),
        ports: spec
            .ports
            .iter()
            .map(|p| cp::NamedPort {
                port: p.port,
                name: p.name.clone(),
                protocol: p.protocol.clone(),
            })
            .collect(),
        local: false,
    }
}

/// The error of an inventory ExternalEntity that has a local one's name.
pub(super) fn shadowed_entity_error(origin: &str, object: &NativeObject) -> String {
    format!(
        "{origin}: {}: has the name of an ExternalEntity of this agent's ExternalNode; \
         the one derived from the ExternalNode is used",
        object.describe()
    )
}

/// Translates `inputs`. An object that cannot be translated is left out with an error naming
/// it; the others are translated.
pub fn translate(inputs: &Inputs) -> Translation {
    let mut c = Controller::new();
    let local: BTreeSet<(&str, &str)> = inputs
        .local_entities
        .iter()
        .map(|e| (e.namespace.as_str(), e.name.as_str()))
        .collect();
    let mut inventory: Vec<Entity> = Vec::new();
    for (origin, object) in &inputs.objects {
        match object {
            NativeObject::ExternalEntity { meta, spec, ips } => {
                if local.contains(&(meta.namespace.as_str(), meta.name.as_str())) {
                    c.errors.push(shadowed_entity_error(origin, object));
                    continue;
                }
                inventory.push(inventory_entity(meta, spec, ips));
            }
            NativeObject::Namespace { meta } => {
                c.namespace_labels.insert(meta.name.clone(), meta.labels.clone());
            }
            _ => {}
        }
    }
    c.entities = inputs.local_entities.iter().chain(inventory.iter()).collect();
    // Sorted once: a group's members come out in this order, by index.
    c.entities.sort_by(|a, b| {
        (a.namespace.as_str(), a.name.as_str()).cmp(&(b.namespace.as_str(), b.name.as_str()))
    });
    // Every namespace that holds an entity exists, labelled with its name as the apiserver does.
    for e in &c.entities {
        c.namespace_labels.entry(e.namespace.clone()).or_default();
    }
    for (name, labels) in c.namespace_labels.iter_mut() {
        labels.insert("kubernetes.io/metadata.name".into(), name.clone());
    }
    c.read_tiers(inputs.objects.iter().map(|(origin, object)| (origin, object)));
    c.read_groups(inputs.objects.iter().map(|(origin, object)| (origin, object)));
    c.foreign_groups = c.groups_selecting_other_namespaces();

    let mut policies = Vec::new();
    for (origin, object) in &inputs.objects {
        if let Some(out) = c.translate_policy(object) {
            match out.result {
                Ok(p) => {
                    for note in out.notes {
                        c.errors.push(format!("{origin}: {}: {note}", object.describe()));
                    }
                    policies.push(p);
                    c.address_groups.extend(out.address_groups);
                    c.applied_to_groups.extend(out.applied_to_groups);
                }
                Err(e) => c.errors.push(format!("{origin}: {}: {e}", object.describe())),
            }
        }
    }
    policies.sort_by(|a: &cp::NetworkPolicy, b| a.metadata.name.cmp(&b.metadata.name));
    let address_groups = c
        .address_groups
        .iter()
        .map(|(name, source)| cp::AddressGroup {
            metadata: cp::ObjectMeta {
                name: name.clone(),
                ..Default::default()
            },
            group_members: c.members(source, true),
            ..Default::default()
        })
        .collect();
    let applied_to_groups = c
        .applied_to_groups
        .iter()
        .map(|(name, source)| cp::AppliedToGroup {
            metadata: cp::ObjectMeta {
                name: name.clone(),
                ..Default::default()
            },
            group_members: c.members(source, false),
            ..Default::default()
        })
        .collect();
    Translation {
        network_policies: policies,
        address_groups,
        applied_to_groups,
        errors: c.errors,
    }
}

impl<'a> Controller<'a> {
    pub(super) fn new() -> Self {
        Controller {
            entities: Vec::new(),
            namespace_labels: BTreeMap::new(),
            tiers: DEFAULT_TIERS.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
            refused_tiers: BTreeMap::new(),
            foreign_groups: BTreeSet::new(),
            groups: BTreeMap::new(),
            address_groups: BTreeMap::new(),
            applied_to_groups: BTreeMap::new(),
            notes: Vec::new(),
            rule_notes: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Translates `object` when it is a policy, with the groups it uses; `None` for other kinds.
    pub(super) fn translate_policy(&mut self, object: &NativeObject) -> Option<PolicyOutput> {
        let NativeObject::Policy { kind, meta, spec } = object else {
            return None;
        };
        let outer_ags = std::mem::take(&mut self.address_groups);
        let outer_atgs = std::mem::take(&mut self.applied_to_groups);
        let result = self.policy(*kind, meta, spec);
        let address_groups = std::mem::replace(&mut self.address_groups, outer_ags);
        let applied_to_groups = std::mem::replace(&mut self.applied_to_groups, outer_atgs);
        let notes = std::mem::take(&mut self.notes);
        let rule_notes = std::mem::take(&mut self.rule_notes);
        let ok = result.is_ok();
        Some(PolicyOutput {
            notes: if ok { notes } else { Vec::new() },
            rule_notes: if ok { rule_notes } else { Vec::new() },
            result,
            address_groups: if ok { address_groups } else { BTreeMap::new() },
            applied_to_groups: if ok { applied_to_groups } else { BTreeMap::new() },
        })
    }

    pub(super) fn read_groups(&mut self, objects: impl Iterator<Item = (&'a String, &'a NativeObject)>) {
        for (origin, object) in objects {
            if let NativeObject::Group { kind, meta, spec } = object {
                let key = group_key(&meta.namespace, &meta.name);
                self.groups.insert(
                    key,
                    GroupDef {
                        origin,
                        meta,
                        kind: *kind,
                        spec,
                    },
                );
            }
        }
        // The webhook's checks between groups: a child must not have children itself. Such a
        // group is not realized (`childGroupsNestingExceeded`): see `nesting_exceeded`.
        let mut problems = Vec::new();
        for group in self.groups.values() {
            for child in &group.spec.child_groups {
                let child_key = group_key(&group.meta.namespace, child);
                if let Some(c) = self.groups.get(&child_key) {
                    if !c.spec.child_groups.is_empty() {
                        let what = if group.kind == NativeKind::ClusterGroup {
                            format!("cannot set ClusterGroup {child} as childGroup, who has {} childGroups itself", c.spec.child_groups.len())
                        } else {
                            format!(
                                "cannot set Group {}/{child} as childGroup, who has {} childGroups itself",
                                group.meta.namespace,
                                c.spec.child_groups.len()
                            )
                        };
                        problems.push(format!(
                            "{}: {} {}: spec.childGroups: {what}; the childGroups of this {} must not \
                             have childGroups of their own: it is not realized and matches nothing",
                            group.origin,
                            group.kind,
                            group_key(&group.meta.namespace, &group.meta.name),
                            group.kind,
                        ));
                    }
                }
            }
        }
        self.errors.extend(problems);
    }

    fn policy(
        &mut self,
        kind: NativeKind,
        meta: &Meta,
        spec: &PolicySpec,
    ) -> Result<cp::NetworkPolicy, PolicyError> {
        // A Tier that does not exist here (missing, or refused) does not refuse the policy: a
        // cluster would keep its Drops, so it is translated fail-closed (`tier_fail_closed`).
        let (tier_priority, missing_tier) = match self.tier_priority(&spec.tier) {
            Ok(priority) => (priority, None),
            Err(why) => (FAIL_CLOSED_TIER_PRIORITY, Some(why)),
        };
        let cluster = kind == NativeKind::ClusterNetworkPolicy;
        // Selectors without a namespaceSelector look in the policy's namespace (none for an ACNP:
        // every namespace).
        let namespace = if cluster { "" } else { meta.namespace.as_str() };
        let uid = policy_uid(kind, meta);
        let applied_to_per_rule = spec.applied_to.is_empty();
        let mut all_atgs = BTreeSet::new();
        let spec_atgs = self.applied_to(namespace, &spec.applied_to, "spec.appliedTo")?;
        all_atgs.extend(spec_atgs.iter().cloned());
        let mut rules = Vec::new();
        for (direction, list, prefix) in [("In", &spec.ingress, "ingress"), ("Out", &spec.egress, "egress")] {
            for (idx, rule) in list.iter().enumerate() {
                let at = format!("spec.{prefix}[{idx}]");
                let atgs = self.applied_to(namespace, &rule.applied_to, &format!("{at}.appliedTo"))?;
                all_atgs.extend(atgs.iter().cloned());
                let peers = if direction == "In" { &rule.from } else { &rule.to };
                // `ToServices != nil` picks the Service peer (`svcRefToPeerForCRD`), even for an
                // empty list, whose peer then matches nothing. An ANNP reads it on egress rules
                // only; an ACNP on both directions (objects checks refuse a non-empty list on
                // ingress).
                let to_services = rule
                    .to_services
                    .as_ref()
                    .filter(|_| direction == "Out" || cluster);
                let name = if rule.name.is_empty() {
                    generated_rule_name(prefix, rule)
                } else {
                    rule.name.clone()
                };
                let side = if direction == "In" { "from" } else { "to" };
                let (peer, action) = if let Some(to_services) = to_services {
                    (
                        cp::NetworkPolicyPeer {
                            to_services: to_services
                                .iter()
                                .map(|s| cp::ServiceReference {
                                    name: s.name.clone(),
                                    namespace: if s.namespace.is_empty() {
                                        meta.namespace.clone()
                                    } else {
                                        s.namespace.clone()
                                    },
                                })
                                .collect(),
                            ..Default::default()
                        },
                        rule.action.clone(),
                    )
                } else {
                    self.rule_peer(
                        namespace,
                        peers,
                        &format!("{at}.{side}"),
                        (rules.len(), &name),
                        rule,
                    )?
                };
                let mut out = cp::NetworkPolicyRule {
                    direction: direction.into(),
                    services: services(rule),
                    priority: idx as i32,
                    action,
                    enable_logging: rule.enable_logging,
                    applied_to_groups: atgs,
                    name,
                    l7_protocols: rule
                        .l7_protocols
                        .iter()
                        .map(|l| cp::L7Protocol {
                            http: l.http.as_ref().map(|h| cp::HttpProtocol {
                                host: h.host.clone(),
                                method: h.method.clone(),
                                path: h.path.clone(),
                            }),
                            tls: l.tls.as_ref().map(|t| cp::TlsProtocol { sni: t.sni.clone() }),
                        })
                        .collect(),
                    log_label: rule.log_label.clone(),
                    ..Default::default()
                };
                if direction == "In" {
                    out.from = peer;
                } else {
                    out.to = peer;
                }
                if let Some(why) = &missing_tier {
                    self.tier_fail_closed(&mut out, &at, rules.len(), why);
                }
                rules.push(out);
            }
        }
        if let (Some(why), true) = (&missing_tier, rules.is_empty()) {
            // No rule to report it on; a CI gate still hears of the missing Tier.
            self.notes
                .push(format!("{why}: the policy has no rules, so nothing is enforced"));
        }
        Ok(cp::NetworkPolicy {
            metadata: cp::ObjectMeta {
                name: uid.clone(),
                uid: uid.clone(),
                generation: meta.generation,
                ..Default::default()
            },
            rules,
            // With appliedTo per rule, the policy-level list only tells the span, which the
            // agent does not read: antrea-controller leaves it out of what it sends.
            applied_to_groups: if applied_to_per_rule {
                Vec::new()
            } else {
                all_atgs.into_iter().collect()
            },
            priority: Some(spec.priority),
            tier_priority: Some(tier_priority),
            source_ref: Some(cp::NetworkPolicyReference {
                policy_type: if cluster {
                    "AntreaClusterNetworkPolicy".into()
                } else {
                    "AntreaNetworkPolicy".into()
                },
                namespace: if cluster {
                    String::new()
                } else {
                    meta.namespace.clone()
                },
                name: meta.name.clone(),
                uid,
            }),
            ..Default::default()
        })
    }

    /// The AppliedToGroup names of an appliedTo list (objects checks left only
    /// externalEntitySelector, namespaceSelector with it, and group).
    fn applied_to(
        &mut self,
        namespace: &str,
        list: &[AppliedTo],
        at: &str,
    ) -> Result<Vec<String>, PolicyError> {
        let mut names = Vec::new();
        for (i, a) in list.iter().enumerate() {
            if let Some((field, what)) = outside_vm(a) {
                // Antrea accepts it, and it never selects an ExternalEntity: on this VM, as
                // in a cluster, the entry selects nothing and the policy stands on the others.
                self.notes.push(format!(
                    "{at}[{i}].{field}: selects {what}, never an ExternalEntity: this appliedTo \
                     selects nothing on this VM (the policy is enforced without it)"
                ));
                continue;
            }
            if !a.group.is_empty() {
                let key = group_key(namespace, &a.group);
                // `createAppliedToGroupForGroup` gives no AppliedToGroup for a group that does
                // not exist or holds ipBlocks: that appliedTo selects nothing, the others stand.
                let Some(group) = self.groups.get(&key) else {
                    self.notes.push(format!(
                        "{at}[{i}].group: {} {key} does not exist: this appliedTo selects nothing \
                         (the policy is enforced without it)",
                        group_kind(namespace)
                    ));
                    continue;
                };
                if group.spec.ip_block.is_some() || !group.spec.ip_blocks.is_empty() {
                    self.notes.push(format!(
                        "{at}[{i}].group: {} {key} has ipBlocks and cannot be used as appliedTo: this \
                         appliedTo selects nothing (the policy is enforced without it)",
                        group_kind(namespace)
                    ));
                    continue;
                }
                // A group of Pods, Nodes or a Service: antrea-controller's AppliedToGroup for it
                // (`createAppliedToGroupForGroup`) spans Pods or Nodes (`getAppliedToWorkloads`),
                // never an ExternalEntity. On this VM it selects nothing, as `outside_vm`'s
                // entries; a child of that kind adds nothing to its parent, whose other
                // members stand.
                if let Some(u) = unresolvable_group(group.spec) {
                    self.notes.push(format!(
                        "{at}[{i}].group: {} {key} selects {} (spec.{}), never an ExternalEntity: \
                         this appliedTo selects nothing on this VM (the policy is enforced without it)",
                        group_kind(namespace),
                        u.selects,
                        u.field
                    ));
                    continue;
                }
                let mut unknown = Vec::new();
                self.unresolvable_members(group, 1, "", &mut unknown);
                for (path, u) in unknown {
                    self.notes.push(format!(
                        "{at}[{i}].group: {path} selects {} (spec.{}), never an ExternalEntity: it \
                         adds nothing to this appliedTo on this VM (the group's other members stand)",
                        u.selects, u.field
                    ));
                }
                // `getInternalGroupWorkloads`: a Group (namespaced) may select only entities in
                // its own namespace when it is an appliedTo; one that selects any elsewhere (by
                // its namespaceSelector or a child's) fails its AppliedToGroup's sync, and every
                // policy using that AppliedToGroup gets the error (`syncInternalNetworkPolicy`):
                // it spans no Node, so no agent enforces any of its rules. Its other policies,
                // and this Group as a rule peer, are not affected.
                if self.foreign_groups.contains(&key) {
                    return Err(PolicyError::AppliedToForeignGroup {
                        at: format!("{at}[{i}]"),
                        key,
                    });
                }
                self.applied_to_groups.insert(
                    key.clone(),
                    Source::Named {
                        namespace: namespace.to_string(),
                        name: a.group.clone(),
                    },
                );
                names.push(key);
                continue;
            }
            let (name, source) = selector_group(
                &format!("{at}[{i}]"),
                namespace,
                a.namespace_selector.as_ref(),
                a.external_entity_selector.as_ref(),
            )?;
            self.applied_to_groups.insert(name.clone(), source);
            names.push(name);
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The peer and action of a rule whose peers are `peers`. Where a peer is one the agent
    /// cannot know the addresses of (Antrea accepts it: see `unsupported_peer`), the rule is
    /// translated fail-closed, never weaker than Antrea, and a note says so:
    /// * an Allow rule goes on without that peer (it matches nothing): it allows less;
    /// * a Drop or Reject rule applies to every address (its ports and protocols kept): it
    ///   denies more;
    /// * a Pass rule becomes a Drop of every address. Pass hands traffic to the Baseline tier,
    ///   so a Pass that matches less or more can let a lower rule allow what the Baseline tier
    ///   drops; a Drop of more denies only more.
    fn rule_peer(
        &mut self,
        namespace: &str,
        peers: &[Peer],
        at: &str,
        (index, name): (usize, &str),
        rule: &Rule,
    ) -> Result<(cp::NetworkPolicyPeer, Option<String>), PolicyError> {
        let unsupported: Vec<String> = peers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                self.unresolved_peer(namespace, p)
                    .map(|why| format!("{at}[{i}].{why}"))
            })
            .collect();
        if unsupported.is_empty() {
            return Ok((self.peer(namespace, peers, at)?, rule.action.clone()));
        }
        let action = rule.action.as_deref().unwrap_or("Allow");
        let rule_at = at.rsplit_once('.').map_or(at, |(r, _)| r);
        let any = if at.ends_with(".from") {
            "from any address"
        } else {
            "to any address"
        };
        let ports = if rule.ports.as_deref().unwrap_or_default().is_empty()
            && rule.protocols.as_deref().unwrap_or_default().is_empty()
        {
            ""
        } else {
            " on its ports and protocols"
        };
        let (peer, installed, what) = match action {
            "Allow" => {
                let supported: Vec<Peer> = peers
                    .iter()
                    .filter(|p| self.unresolved_peer(namespace, p).is_none())
                    .cloned()
                    .collect();
                if supported.is_empty() {
                    (
                        cp::NetworkPolicyPeer::default(),
                        rule.action.clone(),
                        "not enforced: the rule allows nothing (dropping an Allow rule never \
                         opens traffic)"
                            .to_string(),
                    )
                } else {
                    (
                        self.peer(namespace, &supported, at)?,
                        rule.action.clone(),
                        "enforced fail-closed: the rule allows only its other peers".to_string(),
                    )
                }
            }
            "Pass" => (
                match_all_peer(),
                Some("Drop".to_string()),
                format!(
                    "enforced fail-closed: the Pass rule is installed as a Drop of all traffic \
                     {any}{ports} (a Pass that matches less or more could let a lower rule allow \
                     what the Baseline tier drops)"
                ),
            ),
            _ => (
                match_all_peer(),
                rule.action.clone(),
                format!(
                    "enforced fail-closed: the rule {} all traffic {any}{ports}",
                    if action == "Reject" { "rejects" } else { "drops" }
                ),
            ),
        };
        let because = unsupported.join("; ");
        self.notes
            .push(format!("{rule_at} (rule {name:?}): {what}, because {because}"));
        self.rule_notes.push(RuleNote {
            rule_index: index,
            reason: Reason::UnresolvedPeer,
            message: format!("{what}, because {because}"),
        });
        Ok((peer, installed))
    }

    /// Why the agent cannot know the addresses `peer` stands for although Antrea accepts it, as
    /// `field: reason`: a field of the peer itself (`unsupported_peer`), or the ClusterGroup or
    /// Group it names, when that group or a child of it selects Pods, Nodes or a Service
    /// (`processRefGroupOrClusterGroup` gives such a group an AddressGroup of Pods or Nodes).
    /// `None` for a peer the local controller translates.
    fn unresolved_peer(&self, namespace: &str, peer: &Peer) -> Option<String> {
        if let Some((field, why)) = unsupported_peer(peer) {
            return Some(format!("{field}: {why}"));
        }
        if peer.group.is_empty() {
            return None;
        }
        let group = self.groups.get(&group_key(namespace, &peer.group))?;
        let mut found = Vec::new();
        self.unresolvable_members(group, 1, "", &mut found);
        found
            .into_iter()
            .next()
            .map(|(path, u)| format!("group: {path}: spec.{}: {}", u.field, u.why))
    }

    /// The groups realized as part of `group` (itself, its children) whose members the agent
    /// cannot know (see `unresolvable_group`), each with its path from the named group
    /// (`ClusterGroup parent: spec.childGroups: ClusterGroup pods`); `level` is 1 for the named
    /// group. Walks like `processInternalGroupForRuleAtLevel`: a group nested too deep is not
    /// realized by antrea-controller either, and matches nothing there as here.
    fn unresolvable_members(
        &self,
        group: &GroupDef,
        level: usize,
        parent: &str,
        out: &mut Vec<(String, Unresolvable)>,
    ) {
        if level > MAX_GROUP_NESTING_LEVEL || self.nesting_exceeded(group) {
            return;
        }
        let path = format!(
            "{parent}{} {}",
            group.kind,
            group_key(&group.meta.namespace, &group.meta.name)
        );
        if let Some(u) = unresolvable_group(group.spec) {
            out.push((path.clone(), u));
        }
        for child in &group.spec.child_groups {
            if let Some(c) = self.groups.get(&group_key(&group.meta.namespace, child)) {
                self.unresolvable_members(c, level + 1, &format!("{path}: spec.childGroups: "), out);
            }
        }
    }

    /// `toAntreaPeerForCRD`: an empty list is every address; otherwise AddressGroups for
    /// selectors and groups, ipBlocks (a group's included), FQDNs.
    fn peer(
        &mut self,
        namespace: &str,
        peers: &[Peer],
        at: &str,
    ) -> Result<cp::NetworkPolicyPeer, PolicyError> {
        if peers.is_empty() {
            return Ok(match_all_peer());
        }
        let mut out = cp::NetworkPolicyPeer::default();
        for (i, peer) in peers.iter().enumerate() {
            let here = format!("{at}[{i}]");
            if let Some(ipb) = &peer.ip_block {
                out.ip_blocks
                    .push(ip_block(ipb).map_err(|error| PolicyError::IpBlock { at: here, error })?);
            } else if !peer.group.is_empty() {
                let key = group_key(namespace, &peer.group);
                // `processRefGroupOrClusterGroup`: a group that does not exist gives no
                // AddressGroup and no ipBlock; the rule stands with this peer matching nothing.
                let Some(group) = self.groups.get(&key) else {
                    self.notes.push(format!(
                        "{here}.group: {} {key} does not exist: this peer matches nothing (the \
                         policy is enforced without it)",
                        group_kind(namespace)
                    ));
                    continue;
                };
                let (has_selectors, blocks) = self.group_for_rule(group, 1);
                out.ip_blocks.extend(blocks);
                if has_selectors {
                    self.address_groups.insert(
                        key.clone(),
                        Source::Named {
                            namespace: namespace.to_string(),
                            name: peer.group.clone(),
                        },
                    );
                    out.address_groups.push(key);
                }
            } else if !peer.fqdn.is_empty() {
                out.fqdns.push(peer.fqdn.clone());
            } else {
                let (name, source) = selector_group(
                    &here,
                    namespace,
                    peer.namespace_selector.as_ref(),
                    peer.external_entity_selector.as_ref(),
                )?;
                self.address_groups.insert(name.clone(), source);
                out.address_groups.push(name);
            }
        }
        Ok(out)
    }

    /// `processInternalGroupForRule`: whether the group selects entities (needs an
    /// AddressGroup), and the ipBlocks it (or its children) holds.
    fn group_for_rule(&self, group: &GroupDef, level: usize) -> (bool, Vec<cp::IpBlock>) {
        if level > MAX_GROUP_NESTING_LEVEL || self.nesting_exceeded(group) {
            return (false, Vec::new());
        }
        let spec = group.spec;
        let blocks: Vec<&IpBlock> = spec.ip_block.iter().chain(&spec.ip_blocks).collect();
        if !blocks.is_empty() {
            return (
                false,
                blocks.into_iter().filter_map(|b| ip_block(b).ok()).collect(),
            );
        }
        if spec.child_groups.is_empty() {
            return (true, Vec::new());
        }
        let mut selects = false;
        let mut out = Vec::new();
        for child in &spec.child_groups {
            if let Some(c) = self.groups.get(&group_key(&group.meta.namespace, child)) {
                let (s, b) = self.group_for_rule(c, level + 1);
                selects |= s;
                out.extend(b);
            }
        }
        (selects, out)
    }

    /// Whether `group` is not realized for its nesting (see [`nesting_exceeded`]).
    fn nesting_exceeded(&self, group: &GroupDef) -> bool {
        nesting_exceeded(&group.spec.child_groups, |child| {
            self.groups
                .get(&group_key(&group.meta.namespace, child))
                .is_some_and(|c| !c.spec.child_groups.is_empty())
        })
    }

    /// The keys of the Groups (namespaced) that select an ExternalEntity outside their own
    /// namespace, from every entity (not only this agent's: antrea-controller looks at all of
    /// a Group's members).
    fn groups_selecting_other_namespaces(&self) -> BTreeSet<String> {
        self.groups
            .iter()
            .filter(|(_, g)| g.kind == NativeKind::Group)
            .filter(|(_, g)| {
                let mut selected = BTreeSet::new();
                self.select(
                    &Source::Named {
                        namespace: g.meta.namespace.clone(),
                        name: g.meta.name.clone(),
                    },
                    1,
                    &mut selected,
                );
                selected
                    .into_iter()
                    .filter_map(|i| self.entities.get(i))
                    .any(|e| e.namespace != g.meta.namespace)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The members of a group: ExternalEntities (with IPs for an AddressGroup, only this
    /// agent's for an AppliedToGroup), sorted.
    fn members(&self, source: &Source, address_group: bool) -> Vec<cp::GroupMember> {
        let mut selected: BTreeSet<usize> = BTreeSet::new();
        self.select(source, 1, &mut selected);
        selected
            .into_iter()
            .filter_map(|i| self.entities.get(i))
            .filter(|e| address_group || e.local)
            .map(|e| cp::GroupMember {
                external_entity: Some(cp::ObjectReference {
                    name: e.name.clone(),
                    namespace: e.namespace.clone(),
                }),
                ips: if address_group {
                    e.ips.iter().map(|ip| cp::IpAddress::from_ip(*ip)).collect()
                } else {
                    Vec::new()
                },
                ports: e.ports.clone(),
                ..Default::default()
            })
            .collect()
    }

    /// Adds the indices (in `entities`) of what `source` selects to `out`.
    fn select(&self, source: &Source, level: usize, out: &mut BTreeSet<usize>) {
        match source {
            Source::Selector { scope, entities } => {
                // The namespaces in scope, decided once per group rather than per entity.
                let namespaces: Option<BTreeSet<&str>> = match scope {
                    Scope::All => None,
                    Scope::Namespace(ns) => Some([ns.as_str()].into()),
                    Scope::Namespaces(sel) => Some(
                        self.namespace_labels
                            .iter()
                            .filter(|(_, labels)| sel.matches(labels))
                            .map(|(name, _)| name.as_str())
                            .collect(),
                    ),
                };
                for (i, e) in self.entities.iter().enumerate() {
                    let in_scope = namespaces
                        .as_ref()
                        .is_none_or(|set| set.contains(e.namespace.as_str()));
                    if in_scope && entities.matches(&e.labels) {
                        out.insert(i);
                    }
                }
            }
            Source::Named { namespace, name } => {
                let Some(group) = self.groups.get(&group_key(namespace, name)) else {
                    return;
                };
                if level > MAX_GROUP_NESTING_LEVEL || self.nesting_exceeded(group) {
                    return;
                }
                let spec = group.spec;
                if let Some(ee) = &spec.external_entity_selector {
                    // Checked when decoded.
                    let Ok(entities) = Selector::parse(ee) else { return };
                    let scope = match &spec.namespace_selector {
                        Some(ns) => match Selector::parse(ns) {
                            Ok(s) => Scope::Namespaces(s),
                            Err(_) => return,
                        },
                        None if group.kind == NativeKind::Group => {
                            Scope::Namespace(group.meta.namespace.clone())
                        }
                        None => Scope::All,
                    };
                    self.select(&Source::Selector { scope, entities }, level, out);
                }
                for child in &spec.child_groups {
                    self.select(
                        &Source::Named {
                            namespace: group.meta.namespace.clone(),
                            name: child.clone(),
                        },
                        level + 1,
                        out,
                    );
                }
            }
        }
    }
}

/// How deep childGroups go: a group (level 1) and its children (level 2), which have none.
const MAX_GROUP_NESTING_LEVEL: usize = 2;

/// antrea-controller's `childGroupsNestingExceeded`: a group one of whose (existing) children
/// lists childGroups of its own (whether or not those exist) is not realized. It matches nothing
/// as a peer (`processInternalGroupForRuleAtLevel`), has no members
/// (`getInternalGroupMembersAtLevel`) and selects nothing as an appliedTo
/// (`getInternalGroupWorkloads`): its other children are not kept. A cycle is a case of it.
/// `has_children` tells, by name (a child is in its parent's namespace), whether an existing
/// group lists childGroups.
pub(super) fn nesting_exceeded(children: &[String], has_children: impl Fn(&str) -> bool) -> bool {
    children.iter().any(|child| has_children(child))
}

/// Antrea's key of a ClusterGroup (`name`) or Group (`namespace/name`).
pub(super) fn group_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

fn group_kind(namespace: &str) -> &'static str {
    if namespace.is_empty() {
        "ClusterGroup"
    } else {
        "Group"
    }
}

/// The group of a selector peer or appliedTo, named as antrea-controller names it: the UUID of
/// its normalized selector text (`GenerateNormalizedName`). `at` is the peer or appliedTo.
fn selector_group(
    at: &str,
    namespace: &str,
    namespace_selector: Option<&LabelSelector>,
    entity_selector: Option<&LabelSelector>,
) -> Result<(String, Source), PolicyError> {
    let parse = |field: &'static str, selector: &LabelSelector| {
        Selector::parse(selector).map_err(|error| PolicyError::Selector {
            at: at.to_string(),
            field,
            error,
        })
    };
    let Some(ee) = entity_selector else {
        return Err(PolicyError::NoEntitySelector { at: at.to_string() });
    };
    let entities = parse("externalEntitySelector", ee)?;
    let mut parts = Vec::new();
    let scope = match namespace_selector {
        Some(ns) => {
            let sel = parse("namespaceSelector", ns)?;
            parts.push(format!("namespaceSelector={}", sel.text()));
            Scope::Namespaces(sel)
        }
        None if namespace.is_empty() => Scope::All,
        None => {
            parts.push(format!("namespace={namespace}"));
            Scope::Namespace(namespace.to_string())
        }
    };
    parts.push(format!("eeSelector={}", entities.text()));
    parts.sort();
    let name = uuid_v5(&parts.join(" And "));
    Ok((name, Source::Selector { scope, entities }))
}

/// `matchAllPeer`: 0.0.0.0/0 and ::/0.
fn match_all_peer() -> cp::NetworkPolicyPeer {
    let any = |net: &str| cp::IpBlock {
        cidr: cp::IpNetWire::from_net(net.parse().unwrap_or_else(|_| IpNet::default())),
        except: Vec::new(),
    };
    cp::NetworkPolicyPeer {
        ip_blocks: vec![any("0.0.0.0/0"), any("::/0")],
        ..Default::default()
    }
}

fn ip_block(ipb: &IpBlock) -> Result<cp::IpBlock, IpBlockError> {
    let cidr = check_ip_block(ipb)?;
    let except = ipb
        .except
        .iter()
        .filter_map(|e| e.parse::<IpNet>().ok())
        .map(cp::IpNetWire::from_net)
        .collect();
    Ok(cp::IpBlock {
        // As written (the controller keeps the address of `10.0.0.1/8`); the agent clears host bits.
        cidr: cp::IpNetWire::from_net(cidr),
        except,
    })
}

/// `toAntreaServicesForCRD`: ports (protocol defaults to TCP), then ICMP/IGMP matches.
fn services(rule: &Rule) -> Vec<cp::Service> {
    let mut out: Vec<cp::Service> = rule
        .ports
        .iter()
        .flatten()
        .map(|p| cp::Service {
            protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            port: p.port.clone(),
            end_port: p.end_port,
            src_port: p.source_port,
            src_end_port: p.source_end_port,
            ..Default::default()
        })
        .collect();
    for p in rule.protocols.iter().flatten() {
        if let Some(icmp) = &p.icmp {
            out.push(cp::Service {
                protocol: Some("ICMP".into()),
                icmp_type: icmp.icmp_type,
                icmp_code: icmp.icmp_code,
                ..Default::default()
            });
        }
        if let Some(igmp) = &p.igmp {
            out.push(cp::Service {
                protocol: Some("IGMP".into()),
                igmp_type: igmp.igmp_type,
                group_address: igmp.group_address.clone(),
                ..Default::default()
            });
        }
    }
    out
}
