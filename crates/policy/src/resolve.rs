//! Rule resolution: from the controlplane objects (policies and their groups) and the interfaces
//! attached on this node to the rules the compiler turns into flows. Pure.
//!
//! A rule applies here when one of its applied-to members is an ExternalEntity that stands for a
//! local interface. Ingress rules match their peers as sources and the applied-to interfaces by
//! their OpenFlow port; egress rules match the applied-to interfaces by their IPs and the peers
//! as destinations (pipeline reference §8.1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::attachment::{AttachedInterface, EntityRef};
use crate::controlplane::store::PolicyStore;
use crate::controlplane::validate::{
    self as cp, Action, Direction, MemberRef, Policy, PortMatch, Protocol, Rule, ServiceMatch,
};
use crate::jobs::{RunJobs, Sequential};
use crate::merge_join::{merge_join, Joined};
use crate::ordered;
use crate::refuse::{self, NotEnforced};
use crate::rule::{
    self, applied_to_ips, applied_to_ports, ip_block_cidrs, CompiledRuleInput, LocalInterface, Peer, RuleId,
    Service, DEFAULT_TIER_PRIORITY,
};

/// From this many policies to resolve in one pass on, they are resolved by the jobs runner of
/// [`ResolvedView::with_jobs`] ([`crate::jobs::for_each_ordered`]); a policy resolves in about
/// 10 µs, a thread costs tens.
const PARALLEL_RESOLVE_FROM: usize = 256;

/// At most this many policies of a pass are resolved ahead of their merge into the view: at most
/// this many fresh resolutions (and the one being merged) exist at once besides the view (a full
/// pass of 10,000 policies would otherwise hold a second copy of every rule).
const RESOLVE_AHEAD: usize = 256;

/// The rules that apply on this node, what could not be used (one line per problem, naming
/// the policy and rule), and the rules installed fail-closed instead of as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    pub rules: Vec<CompiledRuleInput>,
    pub warnings: Vec<String>,
    /// Rules that apply here but are not enforced as written (see [`crate::refuse`]), by
    /// policy name then rule.
    pub not_enforced: Vec<NotEnforced>,
}

/// Resolves every policy in `store` against the `interfaces` attached here.
pub fn resolve(store: &PolicyStore, interfaces: &[AttachedInterface]) -> Resolved {
    let local: BTreeMap<&EntityRef, &AttachedInterface> = interfaces.iter().map(|i| (&i.entity, i)).collect();
    let mut out = Resolved::default();
    for policy in store.policies() {
        resolve_policy(store, policy, &local, &mut out);
    }
    out.rules.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// Incremental resolution, for the policy cache: the resolved rules of every policy are kept
/// (as shared `Arc`s, which the flow installer's compiler compares by pointer), and a change
/// re-resolves only the policies it affects
/// ([`crate::controlplane::store::PolicyStore::affected_policies`]). A re-resolved rule
/// equal to the one it replaces keeps the old allocation.
#[derive(Clone, Debug, Default)]
pub struct ResolvedView {
    /// Every rule that applies on this node, sorted by rule id (then policy name): what
    /// [`resolve`] returns, shared.
    pub rules: Arc<[Arc<CompiledRuleInput>]>,
    /// What could not be used, policy by policy in name order.
    pub warnings: Vec<String>,
    /// Per policy name: its rules, warnings and rules not enforced as written.
    per_policy: BTreeMap<String, PolicyResolution>,
    /// The version of `rules` (unique in the process, 0 before the first change), and the
    /// version and changed rule ids since the last [`ResolvedView::take_changes`].
    version: u64,
    taken: u64,
    changed_ids: BTreeSet<RuleId>,
    /// What runs a large pass's resolutions (`None`: the calling thread alone).
    jobs: Option<Arc<dyn RunJobs>>,
}

/// Which rules may differ between two versions of a [`ResolvedView`]: every rule of another id
/// is the same (the same `Arc`) in both. What lets the flow installer's compiler look at a
/// change instead of at every rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleChanges {
    /// The version the change starts from (0: none known) and the one it leads to.
    pub from: u64,
    pub to: u64,
    pub ids: Arc<BTreeSet<RuleId>>,
}

/// Rule view versions are unique in the process, so a restarted policy cache's changes never
/// chain onto another cache's view.
fn next_view_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One policy's share of a [`ResolvedView`].
#[derive(Clone, Debug, Default)]
struct PolicyResolution {
    rules: Vec<Arc<CompiledRuleInput>>,
    warnings: Vec<String>,
    not_enforced: Vec<NotEnforced>,
}

impl ResolvedView {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets a pass of `PARALLEL_RESOLVE_FROM` or more policies resolve them through `jobs`
    /// (the caller owns the threads: this module stays pure).
    pub fn with_jobs(mut self, jobs: Arc<dyn RunJobs>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// The rules of the policy named `policy` (controlplane name) that apply here but are not
    /// enforced as written, sorted by rule.
    pub fn not_enforced(&self, policy: &str) -> &[NotEnforced] {
        self.per_policy
            .get(policy)
            .map_or(&[], |p| p.not_enforced.as_slice())
    }

    /// The rule ids that may have changed since the previous call (since the view was created,
    /// the first time: `from` is then 0), and the versions between.
    pub fn take_changes(&mut self) -> RuleChanges {
        let changes = RuleChanges {
            from: self.taken,
            to: self.version,
            ids: Arc::new(std::mem::take(&mut self.changed_ids)),
        };
        self.taken = self.version;
        changes
    }

    /// Every rule not enforced as written, policy by policy in name order.
    pub fn all_not_enforced(&self) -> impl Iterator<Item = &NotEnforced> {
        self.per_policy.values().flat_map(|p| p.not_enforced.iter())
    }

    /// Resolves the policies named in `affected` again (every policy if `None`: first use, or
    /// the attached interfaces changed) and returns whether the rules changed.
    pub fn update(
        &mut self,
        store: &PolicyStore,
        interfaces: &[AttachedInterface],
        affected: Option<&BTreeSet<String>>,
    ) -> bool {
        let local: BTreeMap<&EntityRef, &AttachedInterface> =
            interfaces.iter().map(|i| (&i.entity, i)).collect();
        let names: Vec<String> = match affected {
            Some(names) => names.iter().cloned().collect(),
            None => {
                let mut all: BTreeSet<String> = self.per_policy.keys().cloned().collect();
                all.extend(store.policies().map(|p| p.name.clone()));
                all.into_iter().collect()
            }
        };
        let mut changed = false;
        let mut warnings_changed = false;
        // Gathered, then entered at once (a fleet's first pass: 10,000 ids and 2,000 policies,
        // each inserted on its own into the ordered maps, were most of the pass's serial part).
        let mut changed_ids: Vec<RuleId> = Vec::new();
        let mut fresh: Vec<(String, PolicyResolution)> = Vec::new();
        // The rules the re-resolved policies held (kept alive, so their addresses stay theirs
        // until the merge below has skipped them): the rest of the sorted view stays as it is.
        let merge = affected.is_some();
        let mut replaced: Vec<Arc<CompiledRuleInput>> = Vec::new();
        // Each policy resolves on its own (reading the store only): a large pass (a fleet
        // loaded, every policy re-resolved) uses the spare cores.
        let jobs: &dyn RunJobs = match &self.jobs {
            Some(jobs) if names.len() >= PARALLEL_RESOLVE_FROM => jobs.as_ref(),
            _ => &Sequential,
        };
        let resolve_one = |name: &String| {
            let mut out = Resolved::default();
            if let Some(policy) = store.policy(name) {
                resolve_policy(store, policy, &local, &mut out);
            }
            // Each policy's rules in id order (stable: rules sharing an id keep theirs), on the
            // worker. Policies come in name order, which is their uids' order as the controller
            // names them: the merged view below then mostly arrives sorted, and sorting 10,000
            // rule ids (string comparisons) costs little more than a walk.
            out.rules.sort_by(|a, b| a.id.cmp(&b.id));
            out
        };
        // Merged here, in name order, a window of RESOLVE_AHEAD policies resolved at a time.
        crate::jobs::for_each_ordered(jobs, &names, RESOLVE_AHEAD, resolve_one, |at, out: Resolved| {
            let name = &names[at];
            let old = self.per_policy.remove(name);
            let PolicyResolution {
                rules: old_rules,
                warnings: old_warnings,
                ..
            } = old.unwrap_or_default();
            warnings_changed |= old_warnings != out.warnings;
            let mut kept = 0;
            // Built into a fresh vector: collecting from `out.rules.into_iter()` would reuse
            // its buffer (sized for whole rules) to hold the pointers, and keep it.
            let mut rules: Vec<Arc<CompiledRuleInput>> = Vec::with_capacity(out.rules.len());
            // Old and new rules are both in id order: matched by id, a rule added or removed
            // names only its own id, and the rules after it keep their allocations (rules
            // sharing an id pair up in order).
            for step in merge_join(old_rules.iter(), out.rules, |o, r| o.id.cmp(&r.id)) {
                match step {
                    Joined::Both(o, r) if **o == r => {
                        kept += 1;
                        rules.push(Arc::clone(o));
                    }
                    Joined::Both(_, r) | Joined::New(r) => {
                        changed_ids.push(r.id.clone());
                        rules.push(Arc::new(r));
                    }
                    Joined::Old(o) => changed_ids.push(o.id.clone()),
                }
            }
            changed |= kept != rules.len() || kept != old_rules.len();
            if merge {
                replaced.extend(old_rules);
            }
            if !rules.is_empty() || !out.warnings.is_empty() || !out.not_enforced.is_empty() {
                let resolution = PolicyResolution {
                    rules,
                    warnings: out.warnings,
                    not_enforced: out.not_enforced,
                };
                fresh.push((name.clone(), resolution));
            }
        });
        // Each name came once and left `per_policy` above, so entering them now is the same as
        // entering each in the loop (in bulk when the map was empty: a fleet's first pass).
        ordered::extend_map(&mut self.per_policy, fresh);
        ordered::extend_set(&mut self.changed_ids, changed_ids);
        if changed {
            let merged = merge.then(|| self.merged_rules(&replaced, &names)).flatten();
            self.rules = match merged {
                Some(rules) => rules,
                None => self.sorted_rules(),
            };
            self.version = next_view_version();
        }
        if warnings_changed {
            self.warnings = self
                .per_policy
                .values()
                .flat_map(|p| p.warnings.iter().cloned())
                .collect();
        }
        changed
    }
}

impl ResolvedView {
    /// Every rule of every policy, sorted by rule id then policy name (as [`resolve`] sorts).
    fn sorted_rules(&self) -> Arc<[Arc<CompiledRuleInput>]> {
        let mut all: Vec<(&Arc<CompiledRuleInput>, &str)> = self
            .per_policy
            .iter()
            .flat_map(|(name, p)| p.rules.iter().map(move |r| (r, name.as_str())))
            .collect();
        // Stable: rules with the same id stay in policy name order, as in `resolve`.
        all.sort_by(|a, b| a.0.id.cmp(&b.0.id).then_with(|| a.1.cmp(b.1)));
        all.into_iter().map(|(r, _)| Arc::clone(r)).collect()
    }

    /// [`ResolvedView::sorted_rules`] without sorting everything again: the current sorted
    /// rules, less `replaced` (what the policies named in `re_resolved` held), merged with what
    /// those policies hold now. Sorting 50,000 rules on every one-policy change was most of a
    /// change's cost in the policy cache. `None` when a rule id of those policies is also held by
    /// another policy: then the policy names decide the order, and [`sorted_rules`] does that.
    ///
    /// [`sorted_rules`]: ResolvedView::sorted_rules
    fn merged_rules(
        &self,
        replaced: &[Arc<CompiledRuleInput>],
        re_resolved: &[String],
    ) -> Option<Arc<[Arc<CompiledRuleInput>]>> {
        let gone: std::collections::HashSet<*const CompiledRuleInput, foldhash::fast::RandomState> =
            replaced.iter().map(Arc::as_ptr).collect();
        let mut incoming: Vec<(&Arc<CompiledRuleInput>, &str)> = re_resolved
            .iter()
            .filter_map(|name| self.per_policy.get_key_value(name))
            .flat_map(|(name, p)| p.rules.iter().map(move |r| (r, name.as_str())))
            .collect();
        incoming.sort_by(|a, b| a.0.id.cmp(&b.0.id).then_with(|| a.1.cmp(b.1)));
        let mut incoming = incoming.into_iter().map(|(r, _)| r).peekable();
        let mut out: Vec<Arc<CompiledRuleInput>> =
            Vec::with_capacity(self.rules.len() + incoming.len() - replaced.len().min(self.rules.len()));
        for held in self.rules.iter().filter(|r| !gone.contains(&Arc::as_ptr(r))) {
            while let Some(new) = incoming.next_if(|new| new.id < held.id) {
                out.push(Arc::clone(new));
            }
            if incoming.peek().is_some_and(|new| new.id == held.id) {
                return None;
            }
            out.push(Arc::clone(held));
        }
        out.extend(incoming.cloned());
        Some(out.into())
    }
}

/// The rule compiler's view of the policy's source; `Err` names a source type the agent does not
/// know how to place in the pipeline.
fn policy_ref(policy: &Policy) -> Result<rule::PolicyRef, String> {
    let Some(src) = &policy.source_ref else {
        // Hand-written standalone objects may omit sourceRef: an Antrea-native policy of that name.
        return Ok(rule::PolicyRef {
            policy_type: rule::PolicyType::AntreaNetworkPolicy,
            namespace: String::new(),
            name: policy.name.clone(),
            uid: policy.uid.clone(),
        });
    };
    let policy_type = match &src.policy_type {
        cp::PolicyType::K8sNetworkPolicy => rule::PolicyType::K8sNetworkPolicy,
        cp::PolicyType::AntreaClusterNetworkPolicy => rule::PolicyType::AntreaClusterNetworkPolicy,
        cp::PolicyType::AntreaNetworkPolicy => rule::PolicyType::AntreaNetworkPolicy,
        cp::PolicyType::AdminNetworkPolicy => rule::PolicyType::AdminNetworkPolicy,
        cp::PolicyType::BaselineAdminNetworkPolicy => rule::PolicyType::BaselineAdminNetworkPolicy,
        other => return Err(other.as_str().to_owned()),
    };
    Ok(rule::PolicyRef {
        policy_type,
        namespace: src.namespace.clone(),
        name: src.name.clone(),
        uid: if src.uid.is_empty() {
            policy.uid.clone()
        } else {
            src.uid.clone()
        },
    })
}

fn resolve_policy(
    store: &PolicyStore,
    policy: &Policy,
    local: &BTreeMap<&EntityRef, &AttachedInterface>,
    out: &mut Resolved,
) {
    let reference = match policy_ref(policy) {
        Ok(r) => r,
        Err(policy_type) => {
            // Not installed at all; reported for each rule that applies here.
            for (i, rule) in policy.rules.iter().enumerate() {
                if !local_targets(store, policy.rule_applied_to_groups(rule), local).is_empty() {
                    out.not_enforced.push(NotEnforced {
                        policy: policy.name.clone(),
                        rule_index: i,
                        reason: refuse::Reason::PolicyType,
                        message: format!(
                            "{}: {}",
                            refuse::rule_label(rule, i),
                            refuse::unsupported_policy_type(&policy_type)
                        ),
                    });
                }
            }
            return;
        }
    };
    let max_rule_priority = policy.rules.iter().map(|r| r.priority).max().unwrap_or(0);
    let policy_uid: Arc<str> = Arc::from(reference.uid.as_str());
    for (i, rule) in policy.rules.iter().enumerate() {
        let what = || {
            format!(
                "NetworkPolicy {} ({reference_name}) rules[{i}]",
                policy.name,
                reference_name = display(&reference)
            )
        };
        let targets = local_targets(store, policy.rule_applied_to_groups(rule), local);
        if targets.is_empty() {
            // Not for this node (or its members are not attached yet).
            continue;
        }
        // Enforce or refuse: what cannot be enforced as written is installed fail-closed (the
        // peers and services it cannot identify match nothing, an L7 rule drops) and reported.
        for (reason, text) in refuse::reasons(rule) {
            out.not_enforced.push(NotEnforced {
                policy: policy.name.clone(),
                rule_index: i,
                reason,
                message: format!("{}: {text}", refuse::rule_label(rule, i)),
            });
        }
        // What the local controller translated fail-closed (the rule already is in that form).
        for note in policy.rule_notes.iter().filter(|n| n.rule_index == i) {
            out.not_enforced.push(NotEnforced {
                policy: policy.name.clone(),
                rule_index: i,
                reason: note.reason,
                message: format!("{}: {}", refuse::rule_label(rule, i), note.message),
            });
        }
        let rule_priority = i32::try_from(rule.priority).unwrap_or(i32::MAX);
        let direction = match rule.direction {
            Direction::In => rule::Direction::In,
            Direction::Out => rule::Direction::Out,
        };
        let template = CompiledRuleInput {
            id: RuleId {
                policy_uid: Arc::clone(&policy_uid),
                direction,
                index: rule_priority,
                services_key: String::new(),
            },
            policy: reference.clone(),
            rule_name: rule.name.clone(),
            direction,
            action: match refuse::installed_action(rule) {
                Action::Allow => rule::RuleAction::Allow,
                Action::Drop => rule::RuleAction::Drop,
                Action::Reject => rule::RuleAction::Reject,
                Action::Pass => rule::RuleAction::Pass,
            },
            tier_priority: policy.tier_priority.unwrap_or(DEFAULT_TIER_PRIORITY),
            policy_priority: policy.priority.unwrap_or(0.0),
            rule_priority,
            max_rule_priority: i32::try_from(max_rule_priority).unwrap_or(i32::MAX),
            from: Vec::new(),
            to: Vec::new(),
            services: None,
            enable_logging: rule.enable_logging,
            log_label: rule.log_label.clone(),
            fqdn: None,
        };
        for split in split_by_named_ports(store, rule, &targets, &what, &mut out.warnings) {
            let interfaces: Vec<LocalInterface> = split
                .targets
                .iter()
                .map(|t| LocalInterface {
                    ofport: t.iface.ofport,
                    ips: t.iface.ips.clone(),
                })
                .collect();
            let (from, to) = match rule.direction {
                Direction::In => (split.peers, applied_to_ports(&interfaces)),
                Direction::Out => (applied_to_ips(&interfaces), split.peers),
            };
            let mut input = template.clone();
            input.id.services_key = split.services_key;
            input.from = from;
            input.to = to;
            input.services = split.services;
            input.fqdn = fqdn_peers(rule, &interfaces);
            out.rules.push(input);
        }
    }
}

/// The FQDN peers of an egress rule (enforced by the `fqdn` module), with the ports of the
/// interfaces the rule applies to.
fn fqdn_peers(rule: &Rule, interfaces: &[LocalInterface]) -> Option<rule::FqdnPeers> {
    if rule.direction != Direction::Out || rule.peer.fqdns.is_empty() {
        return None;
    }
    let selectors: BTreeSet<String> = rule
        .peer
        .fqdns
        .iter()
        .map(|f| super::fqdn_selector::normalize_selector(f))
        .collect();
    let ports: BTreeSet<u32> = interfaces.iter().map(|i| i.ofport).collect();
    Some(rule::FqdnPeers {
        selectors: selectors.into_iter().collect(),
        ports: ports.into_iter().collect(),
    })
}

/// One compiled rule of a controlplane rule: the applied-to members and peers it covers, with
/// the services they resolve to.
struct Split<'t, 'a> {
    targets: Vec<&'t Target<'a>>,
    peers: Vec<Peer>,
    services: Option<Vec<Service>>,
    /// Empty for a rule without named ports; else the resolved services, rendered.
    services_key: String,
}

/// The compiled rules of one controlplane rule. Without named ports: one, as written. With
/// named ports (Antrea's servicesKey grouping): an ingress rule resolves them against each
/// applied-to member's ports, an egress rule against each `to` group member's ports, and the
/// members that resolve them the same way share one compiled rule, so that a port one member
/// declares is never opened on another. An egress rule's ipBlocks go with the services as
/// resolved against no member (named ports left out).
fn split_by_named_ports<'t, 'a>(
    store: &PolicyStore,
    rule: &Rule,
    targets: &'t [Target<'a>],
    what: &dyn Fn() -> String,
    warnings: &mut Vec<String>,
) -> Vec<Split<'t, 'a>> {
    let has_named = rule
        .services
        .iter()
        .any(|s| matches!(s.port, Some(PortMatch::Named(_))));
    let mut splits = Vec::new();
    if !has_named {
        splits.push(Split {
            targets: targets.iter().collect(),
            peers: peer_addresses(store, rule, what, warnings),
            // Without named ports nothing can be unresolved.
            services: services(rule, &[], &mut BTreeSet::new()),
            services_key: String::new(),
        });
        return splits;
    }
    match rule.direction {
        Direction::In => {
            let peers = peer_addresses(store, rule, what, warnings);
            let members = targets.iter().map(|t| (t.ports.clone(), t));
            let (groups, unresolved) = group_by_services(rule, members);
            for (svc, ts) in groups {
                splits.push(Split {
                    targets: ts,
                    peers: peers.clone(),
                    services_key: services_key(&svc),
                    services: svc,
                });
            }
            report_unresolved(&unresolved, "applied-to", what, warnings);
        }
        Direction::Out => {
            // A member without addresses adds no destination (and no rule of its own); the
            // ipBlocks declare no ports.
            let mut members: Vec<(Vec<&cp::MemberPort>, Vec<Peer>)> =
                address_group_members(store, rule, what, warnings)
                    .into_iter()
                    .filter(|m| !m.ips.is_empty())
                    .map(|m| {
                        let hosts = m.ips.iter().map(|ip| Peer::host(*ip)).collect();
                        (m.ports.iter().collect(), hosts)
                    })
                    .collect();
            if !rule.peer.ip_blocks.is_empty() {
                members.push((Vec::new(), ip_blocks(rule).into_iter().map(Peer::Cidr).collect()));
            }
            let (groups, unresolved) = group_by_services(rule, members);
            for (svc, peers) in groups {
                let peers: BTreeSet<Peer> = peers.into_iter().flatten().collect();
                splits.push(Split {
                    targets: targets.iter().collect(),
                    peers: peers.into_iter().collect(),
                    services_key: services_key(&svc),
                    services: svc,
                });
            }
            report_unresolved(&unresolved, "`to` group", what, warnings);
        }
    }
    splits
}

/// Members grouped by the services a rule resolves to for them.
type ByServices<T> = BTreeMap<Option<Vec<Service>>, Vec<T>>;

/// Groups `members` (each with the named ports it declares) by the services the rule resolves
/// to against those ports, and finds the named ports no member declares.
fn group_by_services<'r, 'p, T>(
    rule: &'r Rule,
    members: impl IntoIterator<Item = (Vec<&'p cp::MemberPort>, T)>,
) -> (ByServices<T>, BTreeSet<&'r str>) {
    let mut groups: ByServices<T> = BTreeMap::new();
    let mut resolved_somewhere = BTreeSet::new();
    for (ports, member) in members {
        let mut missing = BTreeSet::new();
        let svc = services(rule, &ports, &mut missing);
        resolved_somewhere.extend(named_ports(rule).filter(|n| !missing.contains(*n)));
        groups.entry(svc).or_default().push(member);
    }
    let unresolved = named_ports(rule)
        .filter(|n| !resolved_somewhere.contains(*n))
        .collect();
    (groups, unresolved)
}

/// The names of the named ports a rule's services use.
fn named_ports(rule: &Rule) -> impl Iterator<Item = &str> {
    rule.services.iter().filter_map(|s| match &s.port {
        Some(PortMatch::Named(name)) => Some(name.as_str()),
        _ => None,
    })
}

fn report_unresolved(
    names: &BTreeSet<&str>,
    members: &str,
    what: &dyn Fn() -> String,
    warnings: &mut Vec<String>,
) {
    for name in names {
        warnings.push(format!(
            "{}: named port {name} is not declared by any {members} member",
            what()
        ));
    }
}

/// A compact, stable rendering of resolved services: the key that tells the compiled rules of
/// one controlplane rule apart (`*` = every service, `-` = none).
fn services_key(services: &Option<Vec<Service>>) -> String {
    let Some(services) = services else {
        return "*".to_owned();
    };
    if services.is_empty() {
        return "-".to_owned();
    }
    services
        .iter()
        .map(|s| {
            let mut k = format!("{:?}", s.protocol).to_lowercase();
            let range = |k: &mut String, from: Option<u16>, to: Option<u16>| {
                if let Some(p) = from {
                    k.push_str(&format!(":{p}"));
                    if let Some(e) = to.filter(|&e| e > p) {
                        k.push_str(&format!("-{e}"));
                    }
                }
            };
            range(&mut k, s.port, s.end_port);
            if s.src_port.is_some() {
                k.push_str(" src");
                range(&mut k, s.src_port, s.src_end_port);
            }
            if let Some(t) = s.icmp_type {
                k.push_str(&format!(" type {t}"));
            }
            if let Some(c) = s.icmp_code {
                k.push_str(&format!(" code {c}"));
            }
            k
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn display(r: &rule::PolicyRef) -> String {
    if r.namespace.is_empty() {
        format!("{} {}", r.policy_type.as_str(), r.name)
    } else {
        format!("{} {}/{}", r.policy_type.as_str(), r.namespace, r.name)
    }
}

/// A local applied-to member: the attached interface and the named ports its member declares.
struct Target<'a> {
    iface: &'a AttachedInterface,
    ports: Vec<&'a cp::MemberPort>,
}

fn local_targets<'a>(
    store: &'a PolicyStore,
    groups: &[String],
    local: &BTreeMap<&EntityRef, &'a AttachedInterface>,
) -> Vec<Target<'a>> {
    let mut seen = BTreeSet::new();
    let mut targets = Vec::new();
    for group in groups.iter().filter_map(|g| store.applied_to_group(g)) {
        for member in group.members.values() {
            let MemberRef::ExternalEntity { namespace, name } = &member.entity else {
                continue;
            };
            let key = EntityRef {
                namespace: namespace.clone(),
                name: name.clone(),
            };
            if let Some(iface) = local.get(&key) {
                if seen.insert(iface.name.clone()) {
                    targets.push(Target {
                        iface,
                        ports: member.ports.iter().collect(),
                    });
                }
            }
        }
    }
    targets
}

/// The rule's peer side as addresses: group members' IPs and ipBlocks minus their excepts.
fn peer_addresses(
    store: &PolicyStore,
    rule: &Rule,
    what: &dyn Fn() -> String,
    warnings: &mut Vec<String>,
) -> Vec<Peer> {
    let mut peers = BTreeSet::new();
    for member in address_group_members(store, rule, what, warnings) {
        peers.extend(member.ips.iter().map(|ip| Peer::host(*ip)));
    }
    peers.extend(ip_blocks(rule).into_iter().map(Peer::Cidr));
    peers.into_iter().collect()
}

/// The members of the rule's peer AddressGroups; an unknown group is reported and matches
/// nothing.
fn address_group_members<'s>(
    store: &'s PolicyStore,
    rule: &Rule,
    what: &dyn Fn() -> String,
    warnings: &mut Vec<String>,
) -> Vec<&'s cp::Member> {
    let mut members = Vec::new();
    for name in &rule.peer.address_groups {
        match store.address_group(name) {
            Some(group) => members.extend(group.members.values()),
            None => warnings.push(format!(
                "{}: AddressGroup {name} is unknown; it matches nothing",
                what()
            )),
        }
    }
    members
}

/// The rule's ipBlocks as CIDRs, minus their excepts.
fn ip_blocks(rule: &Rule) -> Vec<ipnet::IpNet> {
    rule.peer
        .ip_blocks
        .iter()
        .flat_map(|block| ip_block_cidrs(block.cidr, &block.except))
        .collect()
}

/// The rule's services with numeric ports; named ports are resolved against `ports` (a name
/// that resolves to nothing leaves that service out, and is added to `unresolved`). A named port
/// without a protocol takes the protocol each port of that name declares. An IGMP service
/// matches nothing (reported by [`refuse::reasons`]).
fn services<'r>(
    rule: &'r Rule,
    ports: &[&cp::MemberPort],
    unresolved: &mut BTreeSet<&'r str>,
) -> Option<Vec<Service>> {
    if rule.services.is_empty() {
        return None;
    }
    let mut out = BTreeSet::new();
    for s in &rule.services {
        let protocol = match s.protocol {
            None => None,
            Some(p) => match protocol(p) {
                Some(p) => Some(p),
                None => continue,
            },
        };
        let base = Service {
            protocol: protocol.unwrap_or_default(),
            src_port: s.src_ports.map(|r| r.start),
            src_end_port: s.src_ports.filter(|r| r.end > r.start).map(|r| r.end),
            icmp_type: s.icmp_type,
            icmp_code: s.icmp_code,
            ..Service::default()
        };
        match &s.port {
            None => {
                out.insert(base);
            }
            Some(PortMatch::Range(r)) => {
                out.insert(Service {
                    port: Some(r.start),
                    end_port: (r.end > r.start).then_some(r.end),
                    ..base
                });
            }
            Some(PortMatch::Named(name)) => {
                let resolved = named_port(s, name, ports);
                if resolved.is_empty() {
                    unresolved.insert(name.as_str());
                }
                out.extend(resolved.into_iter().map(|(protocol, port)| Service {
                    protocol,
                    port: Some(port),
                    ..base
                }));
            }
        }
    }
    Some(out.into_iter().collect())
}

/// The (protocol, number) pairs a member's ports give the named port `name` of service `s`: the
/// ports of that name with the service's protocol, or of any protocol when the service has none
/// (Antrea's `resolveService`).
fn named_port(s: &ServiceMatch, name: &str, ports: &[&cp::MemberPort]) -> BTreeSet<(rule::Protocol, u16)> {
    ports
        .iter()
        .filter(|p| p.name == name && s.protocol.is_none_or(|want| p.protocol == want))
        .filter_map(|p| Some((protocol(p.protocol)?, p.port)))
        .collect()
}

fn protocol(p: Protocol) -> Option<rule::Protocol> {
    match p {
        Protocol::Tcp => Some(rule::Protocol::Tcp),
        Protocol::Udp => Some(rule::Protocol::Udp),
        Protocol::Sctp => Some(rule::Protocol::Sctp),
        Protocol::Icmp => Some(rule::Protocol::Icmp),
        Protocol::Igmp => None,
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::controlplane::store::Changes;
    use crate::controlplane::ControlplaneObject;
    use crate::controlplane::Validate as _;

    fn store(yaml: &str) -> PolicyStore {
        let mut store = PolicyStore::new();
        for doc in serde_norway::Deserializer::from_str(yaml) {
            let value = serde_json::Value::deserialize(doc).expect("test yaml");
            let object = ControlplaneObject::from_value(value).expect("decodes");
            store.apply(object.validate().expect("valid")).expect("applies");
        }
        store
    }

    fn iface(name: &str, ofport: u32, ips: &[&str], entity: &str) -> AttachedInterface {
        AttachedInterface {
            name: name.into(),
            ofport,
            uplink_name: format!("{name}~"),
            uplink_ofport: ofport + 100,
            ips: ips.iter().map(|ip| ip.parse().expect("ip")).collect(),
            entity: EntityRef {
                namespace: "vm-ns".into(),
                name: entity.into(),
            },
        }
    }

    const OBJECTS: &str = "\
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers:
- externalEntity: {name: vm1-3e616, namespace: vm-ns}
  ports: [{name: http, port: 8080, protocol: TCP}]
---
kind: AppliedToGroup
metadata: {name: atg-other}
groupMembers: [{externalEntity: {name: other, namespace: vm-ns}}]
---
kind: AddressGroup
metadata: {name: clients}
groupMembers: [{externalEntity: {name: c1, namespace: vm-ns}, ips: [\"10.0.0.7\"]}]
---
kind: NetworkPolicy
metadata: {name: uid-1, uid: uid-1}
sourceRef: {type: AntreaNetworkPolicy, namespace: vm-ns, name: web, uid: uid-1}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 100
rules:
- direction: In
  from: {addressGroups: [clients], ipBlocks: [{cidr: 192.168.0.0/24, except: [192.168.0.128/25]}]}
  services: [{protocol: TCP, port: http}, {protocol: UDP, port: 1000, endPort: 1010}]
  action: Drop
  priority: 0
- direction: Out
  to: {ipBlocks: [{cidr: \"fd00:1::/64\"}]}
  action: Allow
  priority: 0
---
kind: NetworkPolicy
metadata: {name: uid-2}
appliedToGroups: [atg-other]
rules: [{direction: In, from: {ipBlocks: [{cidr: 0.0.0.0/0}]}, action: Drop}]
";

    #[test]
    fn local_rules_resolve_peers_ports_and_named_ports() {
        let store = store(OBJECTS);
        let eth0 = iface("eth0", 3, &["10.99.0.2", "fd00:99::2"], "vm1-3e616");
        let resolved = resolve(&store, &[eth0]);
        assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
        // uid-2 applies to a member that is not attached here.
        assert_eq!(resolved.rules.len(), 2);
        let ingress = &resolved.rules[0];
        assert_eq!(ingress.direction, rule::Direction::In);
        assert_eq!(ingress.action, rule::RuleAction::Drop);
        assert_eq!((ingress.tier_priority, ingress.policy_priority), (100, 5.0));
        assert_eq!(ingress.policy.name, "web");
        assert_eq!(
            ingress.from,
            vec![
                Peer::host("10.0.0.7".parse().expect("ip")),
                Peer::Cidr("192.168.0.0/25".parse().expect("cidr"))
            ]
        );
        assert_eq!(ingress.to, vec![Peer::OfPort(3)]);
        assert_eq!(
            ingress.services,
            Some(vec![
                Service::port(rule::Protocol::Tcp, 8080),
                Service::range(rule::Protocol::Udp, 1000, 1010)
            ])
        );
        let egress = &resolved.rules[1];
        assert_eq!(egress.direction, rule::Direction::Out);
        assert_eq!(
            egress.from,
            vec![
                Peer::host("10.99.0.2".parse().expect("ip")),
                Peer::host("fd00:99::2".parse().expect("ip"))
            ]
        );
        assert_eq!(egress.to, vec![Peer::Cidr("fd00:1::/64".parse().expect("cidr"))]);
        assert_eq!(egress.services, None);
    }

    const NAMED_PORTS: &str = "\
kind: AppliedToGroup
metadata: {name: atg}
groupMembers:
- externalEntity: {name: vm1-a, namespace: vm-ns}
  ports: [{name: http, port: 8080, protocol: TCP}]
- externalEntity: {name: vm1-b, namespace: vm-ns}
  ports: [{name: http, port: 9090, protocol: TCP}]
- externalEntity: {name: vm1-c, namespace: vm-ns}
  ports: [{name: http, port: 8080, protocol: TCP}]
- externalEntity: {name: vm1-d, namespace: vm-ns}
---
kind: AddressGroup
metadata: {name: servers}
groupMembers:
- externalEntity: {name: s1, namespace: vm-ns}
  ips: [\"10.1.0.1\"]
  ports: [{name: api, port: 443, protocol: TCP}]
- externalEntity: {name: s2, namespace: vm-ns}
  ips: [\"10.1.0.2\"]
  ports: [{name: api, port: 8443, protocol: TCP}]
- externalEntity: {name: s3, namespace: vm-ns}
  ips: [\"10.1.0.3\"]
---
kind: NetworkPolicy
metadata: {name: uid-n, uid: uid-n}
sourceRef: {type: AntreaNetworkPolicy, namespace: vm-ns, name: named, uid: uid-n}
appliedToGroups: [atg]
rules:
- direction: In
  from: {ipBlocks: [{cidr: 10.0.0.0/8}]}
  services: [{protocol: TCP, port: http}, {protocol: TCP, port: 22}, {protocol: TCP, port: nosuch}]
  action: Allow
- direction: Out
  to: {addressGroups: [servers], ipBlocks: [{cidr: 192.168.0.0/16}]}
  services: [{protocol: TCP, port: api}]
  action: Allow
";

    #[test]
    fn named_ports_split_rules_by_what_members_resolve_them_to() {
        let store = store(NAMED_PORTS);
        let ifaces = [
            iface("eth0", 1, &["10.99.0.1"], "vm1-a"),
            iface("eth1", 2, &["10.99.0.2"], "vm1-b"),
            iface("eth2", 3, &["10.99.0.3"], "vm1-c"),
            iface("eth3", 4, &["10.99.0.4"], "vm1-d"),
        ];
        let resolved = resolve(&store, &ifaces);
        let tcp = |p| Service::port(rule::Protocol::Tcp, p);
        let ingress: Vec<_> = resolved
            .rules
            .iter()
            .filter(|r| r.direction == rule::Direction::In)
            .map(|r| (r.id.services_key.as_str(), r.to.clone(), r.services.clone()))
            .collect();
        // eth0 and eth2 declare http as 8080, eth1 as 9090, eth3 not at all: each group only
        // opens its own number (and 22).
        assert_eq!(
            ingress,
            [
                ("tcp:22", vec![Peer::OfPort(4)], Some(vec![tcp(22)])),
                (
                    "tcp:22,tcp:8080",
                    vec![Peer::OfPort(1), Peer::OfPort(3)],
                    Some(vec![tcp(22), tcp(8080)])
                ),
                (
                    "tcp:22,tcp:9090",
                    vec![Peer::OfPort(2)],
                    Some(vec![tcp(22), tcp(9090)])
                ),
            ]
        );
        let egress: Vec<_> = resolved
            .rules
            .iter()
            .filter(|r| r.direction == rule::Direction::Out)
            .map(|r| (r.id.services_key.as_str(), r.to.clone(), r.services.clone()))
            .collect();
        // The destination declares the port: s1 and s2 differ; s3 and the ipBlock resolve it to
        // nothing, so their rule matches no traffic (Antrea's "allow no port").
        let host = |ip: &str| Peer::host(ip.parse().expect("ip"));
        assert_eq!(
            egress,
            [
                (
                    "-",
                    vec![
                        host("10.1.0.3"),
                        Peer::Cidr("192.168.0.0/16".parse().expect("cidr"))
                    ],
                    Some(vec![])
                ),
                ("tcp:443", vec![host("10.1.0.1")], Some(vec![tcp(443)])),
                ("tcp:8443", vec![host("10.1.0.2")], Some(vec![tcp(8443)])),
            ]
        );
        for r in resolved
            .rules
            .iter()
            .filter(|r| r.direction == rule::Direction::Out)
        {
            assert_eq!(r.from.len(), 4, "every local interface is the source");
        }
        // Distinct ids, so the compiler keeps each split.
        let ids: BTreeSet<_> = resolved.rules.iter().map(|r| r.id.clone()).collect();
        assert_eq!(ids.len(), resolved.rules.len());
        // A name no member declares is reported once, not per member.
        assert_eq!(
            resolved.warnings,
            [
                "NetworkPolicy uid-n (AntreaNetworkPolicy vm-ns/named) rules[0]: named port nosuch \
              is not declared by any applied-to member"
            ]
        );
    }

    #[test]
    fn nothing_applies_without_local_members_and_unknown_groups_are_reported() {
        let store = store(OBJECTS);
        assert!(resolve(&store, &[]).rules.is_empty());
        let store = super::tests::store(
            "kind: AppliedToGroup\nmetadata: {name: a}\ngroupMembers: [{externalEntity: {name: vm1, namespace: vm-ns}}]\n---\n\
             kind: NetworkPolicy\nmetadata: {name: p}\nappliedToGroups: [a]\n\
             rules: [{direction: In, from: {addressGroups: [missing]}, action: Allow}]\n",
        );
        let resolved = resolve(&store, &[iface("eth0", 1, &["10.0.0.2"], "vm1")]);
        assert_eq!(resolved.rules.len(), 1);
        assert!(
            resolved.rules[0].from.is_empty(),
            "an unknown group matches nothing"
        );
        assert!(
            resolved.warnings[0].contains("AddressGroup missing is unknown"),
            "{:?}",
            resolved.warnings
        );
    }

    const REFUSED: &str = "\
kind: AppliedToGroup
metadata: {name: atg}
groupMembers:
- externalEntity: {name: vm1-a, namespace: vm-ns}
  ports: [{name: mdns, port: 5353, protocol: UDP}, {name: web, port: 8080}]
---
kind: NetworkPolicy
metadata: {name: uid-r, uid: uid-r}
sourceRef: {type: AntreaClusterNetworkPolicy, name: refused, uid: uid-r}
appliedToGroups: [atg]
rules:
- direction: In
  name: allow-ok
  from: {ipBlocks: [{cidr: 0.0.0.0/0}]}
  services: [{protocol: TCP, port: 8080}]
  l7Protocols: [{http: {method: GET, path: /ok}}]
  action: Allow
- direction: In
  name: drop-mdns
  services: [{port: mdns}, {port: web}]
  from: {ipBlocks: [{cidr: 10.0.0.0/8}], labelIdentities: [3]}
  action: Drop
  priority: 1
- direction: Out
  name: to-names
  to: {fqdns: [db.example.com], ipBlocks: [{cidr: 192.168.1.0/24}]}
  action: Allow
- direction: Out
  name: to-svc
  to: {toServices: [{namespace: ns, name: svc}]}
  action: Reject
  priority: 1
- direction: In
  name: igmp
  from: {ipBlocks: [{cidr: 10.0.0.0/8}]}
  services: [{protocol: IGMP}]
  action: Drop
  priority: 2
";

    #[test]
    fn rules_that_cannot_be_enforced_as_written_are_installed_fail_closed_and_reported() {
        let store = store(REFUSED);
        let resolved = resolve(&store, &[iface("eth0", 3, &["10.99.0.2"], "vm1-a")]);
        assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
        let by_name = |n: &str| {
            resolved
                .rules
                .iter()
                .find(|r| r.rule_name == n)
                .unwrap_or_else(|| panic!("rule {n}"))
        };
        // L7 Allow: its L3/L4 part drops.
        let l7 = by_name("allow-ok");
        assert_eq!(l7.action, rule::RuleAction::Drop);
        assert_eq!(l7.services, Some(vec![Service::port(rule::Protocol::Tcp, 8080)]));
        // Named ports without a protocol take the member's: UDP 5353 and TCP 8080; the label
        // identity adds no source, the ipBlock stays.
        let named = by_name("drop-mdns");
        assert_eq!(named.action, rule::RuleAction::Drop);
        assert_eq!(
            named.services,
            Some(vec![
                Service::port(rule::Protocol::Tcp, 8080),
                Service::port(rule::Protocol::Udp, 5353)
            ])
        );
        assert_eq!(named.id.services_key, "tcp:8080,udp:5353");
        assert_eq!(named.from, vec![Peer::Cidr("10.0.0.0/8".parse().expect("cidr"))]);
        // FQDN peers are enforced (their addresses come from the FQDN cache): the ipBlock here,
        // the names through the rule's FQDN selectors.
        assert_eq!(
            by_name("to-names").to,
            vec![Peer::Cidr("192.168.1.0/24".parse().expect("cidr"))]
        );
        // toServices alone: the Reject has no destination (inert), reported.
        assert!(by_name("to-svc").to.is_empty());
        // IGMP matches nothing.
        assert_eq!(by_name("igmp").services, Some(vec![]));
        let reasons: Vec<(usize, refuse::Reason)> = resolved
            .not_enforced
            .iter()
            .map(|n| (n.rule_index, n.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                (0, refuse::Reason::L7Protocols),
                (1, refuse::Reason::LabelIdentities),
                (3, refuse::Reason::ToServices),
                (4, refuse::Reason::Igmp),
            ]
        );
        assert_eq!(
            resolved.not_enforced[0].message,
            "rule \"allow-ok\" (rules[0]): l7Protocols (HTTP/TLS inspection) are not supported on a VM \
             (no L7 engine): all the traffic its ports and peers match is dropped"
        );
        // Not applied here: nothing to report.
        assert!(resolve(&store, &[]).not_enforced.is_empty());
        // The incremental view reports the same, per policy.
        let mut view = ResolvedView::new();
        view.update(&store, &[iface("eth0", 3, &["10.99.0.2"], "vm1-a")], None);
        assert_eq!(view.not_enforced("uid-r"), resolved.not_enforced.as_slice());
        assert_eq!(view.all_not_enforced().count(), 4);
    }

    #[test]
    fn a_policy_type_the_agent_cannot_place_is_reported_for_its_local_rules() {
        let store = store(
            "kind: AppliedToGroup\nmetadata: {name: atg}\ngroupMembers: [{externalEntity: {name: a, namespace: vm-ns}}]\n---\n\
             kind: NetworkPolicy\nmetadata: {name: p, uid: p}\nappliedToGroups: [atg]\n\
             sourceRef: {type: K8sClusterNetworkPolicy, name: cnp, uid: p}\n\
             rules: [{direction: In, name: deny, action: Drop}]\n",
        );
        let resolved = resolve(&store, &[iface("eth0", 1, &["10.0.0.1"], "a")]);
        assert!(resolved.rules.is_empty());
        assert_eq!(resolved.not_enforced.len(), 1);
        assert_eq!(resolved.not_enforced[0].reason, refuse::Reason::PolicyType);
        assert_eq!(
            resolved.not_enforced[0].message,
            "rule \"deny\" (rules[0]): policy type K8sClusterNetworkPolicy is not supported on a VM: the rule \
             is not installed (it allows nothing; what it would drop or reject is not)"
        );
        // Not applied here: nothing to report.
        assert!(resolve(&store, &[iface("eth0", 1, &["10.0.0.1"], "b")])
            .not_enforced
            .is_empty());
    }

    #[test]
    fn a_named_port_without_protocol_resolves_per_member_protocol() {
        let store = store(
            "kind: AppliedToGroup\nmetadata: {name: atg}\ngroupMembers:\n\
             - externalEntity: {name: a, namespace: vm-ns}\n  ports: [{name: dns, port: 53, protocol: UDP}]\n\
             - externalEntity: {name: b, namespace: vm-ns}\n  ports: [{name: dns, port: 5353, protocol: TCP}]\n---\n\
             kind: NetworkPolicy\nmetadata: {name: p, uid: p}\nappliedToGroups: [atg]\n\
             rules: [{direction: In, services: [{port: dns}, {protocol: UDP, port: dns}], action: Drop}]\n",
        );
        let resolved = resolve(
            &store,
            &[
                iface("eth0", 1, &["10.0.0.1"], "a"),
                iface("eth1", 2, &["10.0.0.2"], "b"),
            ],
        );
        let got: Vec<_> = resolved
            .rules
            .iter()
            .map(|r| (r.id.services_key.as_str(), r.to.clone()))
            .collect();
        // a: UDP 53 (both services); b: TCP 5353 only (the UDP one does not resolve for it).
        assert_eq!(
            got,
            [
                ("tcp:5353", vec![Peer::OfPort(2)]),
                ("udp:53", vec![Peer::OfPort(1)])
            ]
        );
    }

    fn same(view: &ResolvedView, full: &Resolved) {
        let rules: Vec<CompiledRuleInput> = view.rules.iter().map(|r| (**r).clone()).collect();
        assert_eq!(rules, full.rules);
        assert_eq!(view.warnings, full.warnings);
    }

    /// [`same`], and the view's changes chain from the last ones (`last`: version and rules)
    /// and name every rule id whose rules are not the same allocations as before.
    fn same_changes(
        view: &mut ResolvedView,
        last: &mut (u64, Arc<[Arc<CompiledRuleInput>]>),
        full: &Resolved,
    ) {
        same(view, full);
        let changes = view.take_changes();
        assert_eq!(changes.from, last.0, "changes chain");
        let by_id = |v: &[Arc<CompiledRuleInput>]| {
            let mut m: BTreeMap<RuleId, Vec<*const CompiledRuleInput>> = BTreeMap::new();
            for r in v {
                m.entry(r.id.clone()).or_default().push(Arc::as_ptr(r));
            }
            m
        };
        let (before, after) = (by_id(&last.1), by_id(&view.rules));
        for id in before.keys().chain(after.keys()) {
            if before.get(id) != after.get(id) {
                assert!(changes.ids.contains(id), "{id:?} changed but is not named");
            }
        }
        *last = (changes.to, view.rules.clone());
    }

    #[test]
    fn a_large_pass_on_several_threads_equals_one_thread() {
        let mut text = OBJECTS.to_string();
        for i in 0..(PARALLEL_RESOLVE_FROM + RESOLVE_AHEAD / 2) {
            text.push_str(&format!(
                "---\nkind: NetworkPolicy\nmetadata: {{name: many-{i}, uid: many-{i}}}\n\
                 appliedToGroups: [atg-vm1]\npriority: {}\n\
                 rules: [{{direction: In, from: {{ipBlocks: [{{cidr: 10.{}.{}.0/24}}]}}, \
                 services: [{{protocol: TCP, port: http}}], action: Allow}}]\n",
                i % 7 + 1,
                i / 256,
                i % 256
            ));
        }
        let store = store(&text);
        let eth0 = iface("eth0", 3, &["10.99.0.2", "fd00:99::2"], "vm1-3e616");
        let mut one = ResolvedView::new();
        assert!(one.update(&store, std::slice::from_ref(&eth0), None));
        let mut several = ResolvedView::new().with_jobs(Arc::new(crate::jobs::Scoped));
        assert!(several.update(&store, std::slice::from_ref(&eth0), None));
        let values = |v: &ResolvedView| v.rules.iter().map(|r| (**r).clone()).collect::<Vec<_>>();
        assert!(
            one.rules.len() > PARALLEL_RESOLVE_FROM,
            "{} rules",
            one.rules.len()
        );
        assert_eq!(values(&one), values(&several));
        assert_eq!(
            values(&several),
            resolve(&store, std::slice::from_ref(&eth0)).rules
        );
        assert_eq!(one.warnings, several.warnings);
        assert_eq!(
            one.all_not_enforced().collect::<Vec<_>>(),
            several.all_not_enforced().collect::<Vec<_>>()
        );
        // Everything resolved again, nothing changed: the same allocations, no change reported.
        let before = several.rules.clone();
        assert!(!several.update(&store, std::slice::from_ref(&eth0), None));
        assert!(before
            .iter()
            .zip(several.rules.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b)));
    }

    #[test]
    fn incremental_view_equals_full_resolution() {
        let mut store = store(OBJECTS);
        let eth0 = iface("eth0", 3, &["10.99.0.2", "fd00:99::2"], "vm1-3e616");
        let other = iface("eth1", 4, &["10.99.0.3"], "other");
        let mut view = ResolvedView::new();
        let mut last = (0, Arc::from(Vec::new()));
        assert!(view.update(&store, std::slice::from_ref(&eth0), None));
        same_changes(
            &mut view,
            &mut last,
            &resolve(&store, std::slice::from_ref(&eth0)),
        );
        let first = view.rules.clone();

        // A new policy that names an unknown group: only it is resolved again.
        let extra = super::tests::store(
            "kind: NetworkPolicy\nmetadata: {name: uid-3, uid: uid-3}\nappliedToGroups: [atg-vm1]\n\
             rules: [{direction: In, from: {addressGroups: [missing]}, action: Drop}]\n",
        );
        let mut changes = Changes::default();
        for p in extra.policies() {
            changes.merge(store.upsert_policy(std::sync::Arc::new(p.clone())));
        }
        assert!(view.update(
            &store,
            std::slice::from_ref(&eth0),
            Some(&store.affected_policies(&changes))
        ));
        same_changes(
            &mut view,
            &mut last,
            &resolve(&store, std::slice::from_ref(&eth0)),
        );
        for r in first.iter() {
            assert!(
                view.rules.iter().any(|n| Arc::ptr_eq(n, r)),
                "unchanged rules keep their allocation"
            );
        }

        // A group change reaches the policies using it; nothing else changes.
        let clients = super::tests::store(
            "kind: AddressGroup\nmetadata: {name: clients}\n\
             groupMembers: [{externalEntity: {name: c1, namespace: vm-ns}, ips: [\"10.0.0.8\"]}]\n",
        );
        let changes = store.upsert_address_group(std::sync::Arc::new(
            clients.address_group("clients").expect("group").clone(),
        ));
        let affected = store.affected_policies(&changes);
        assert_eq!(affected, BTreeSet::from(["uid-1".to_string()]));
        assert!(view.update(&store, std::slice::from_ref(&eth0), Some(&affected)));
        same_changes(
            &mut view,
            &mut last,
            &resolve(&store, std::slice::from_ref(&eth0)),
        );
        assert!(
            !view.update(&store, std::slice::from_ref(&eth0), Some(&affected)),
            "nothing new"
        );

        // Deleting a policy, then other interfaces (everything again).
        let changes = store.delete(crate::controlplane::Kind::NetworkPolicy, "uid-1");
        assert!(view.update(
            &store,
            std::slice::from_ref(&eth0),
            Some(&store.affected_policies(&changes))
        ));
        same_changes(
            &mut view,
            &mut last,
            &resolve(&store, std::slice::from_ref(&eth0)),
        );
        let both = [eth0, other];
        view.update(&store, &both, None);
        same_changes(&mut view, &mut last, &resolve(&store, &both));
    }

    /// One policy per step changes, is added or goes, among policies of which some share a
    /// uid (so equal rule ids in two policies, ordered by name): after every step the view,
    /// merged incrementally, reads exactly as a full resolution.
    #[test]
    fn merged_changes_keep_the_order_of_a_full_resolution() {
        let atg = "kind: AppliedToGroup\nmetadata: {name: atg}\n\
                   groupMembers: [{externalEntity: {name: vm, namespace: vm-ns}}]\n";
        let policy = |name: &str, uid: &str, rules: usize, port: usize| {
            let rules: Vec<String> = (0..rules)
                .map(|r| {
                    format!(
                        "{{direction: In, services: [{{protocol: TCP, port: {}}}], action: Drop}}",
                        port + r
                    )
                })
                .collect();
            format!(
                "kind: NetworkPolicy\nmetadata: {{name: {name}, uid: {uid}}}\nappliedToGroups: [atg]\n\
                 rules: [{}]\n",
                rules.join(", ")
            )
        };
        let eth0 = [iface("eth0", 3, &["10.0.0.1"], "vm")];
        let mut docs = vec![atg.to_string()];
        for i in 0..30 {
            // p05/p06, p15/p16, p25/p26 share a uid.
            let uid = if i % 10 == 6 {
                format!("u{:02}", i - 1)
            } else {
                format!("u{i:02}")
            };
            docs.push(policy(&format!("p{i:02}"), &uid, 1 + i % 3, 100 * i + 1));
        }
        let mut store = store(&docs.join("---\n"));
        let mut view = ResolvedView::new();
        let mut last = (0, Arc::from(Vec::new()));
        view.update(&store, &eth0, None);
        same_changes(&mut view, &mut last, &resolve(&store, &eth0));
        let steps: Vec<(String, Option<String>)> = vec![
            // More rules, then fewer; a new policy between others; one sharing a uid changes.
            ("p03".into(), Some(policy("p03", "u03", 3, 300))),
            ("p03".into(), Some(policy("p03", "u03", 1, 300))),
            ("p101".into(), Some(policy("p101", "u101", 2, 50))),
            ("p06".into(), Some(policy("p06", "u05", 3, 7))),
            ("p05".into(), None),
            ("p05".into(), Some(policy("p05", "u05", 2, 9))),
            ("p40".into(), Some(policy("p40", "u15", 2, 1500))),
            ("p29".into(), None),
            ("p00".into(), Some(policy("p00", "u00", 3, 1))),
        ];
        for (name, text) in steps {
            let changes = match text {
                Some(text) => {
                    let one = super::tests::store(&format!("{atg}---\n{text}"));
                    let p = one.policy(&name).expect("policy").clone();
                    store.upsert_policy(Arc::new(p))
                }
                None => store.delete(crate::controlplane::Kind::NetworkPolicy, &name),
            };
            assert!(
                view.update(&store, &eth0, Some(&store.affected_policies(&changes))),
                "{name}"
            );
            same_changes(&mut view, &mut last, &resolve(&store, &eth0));
        }
    }

    /// A rule added in front of others of its policy names only itself as changed: the rules
    /// after it (an egress rule behind a new ingress one, a later ingress rule) keep their
    /// allocations, so the compiler leaves their flows alone.
    #[test]
    fn a_rule_added_in_front_names_only_itself() {
        let atg = "kind: AppliedToGroup\nmetadata: {name: atg}\n\
                   groupMembers: [{externalEntity: {name: vm, namespace: vm-ns}}]\n";
        let rule = |direction: &str, priority: i32, port: u16| {
            format!(
                "{{direction: {direction}, priority: {priority}, \
                 services: [{{protocol: TCP, port: {port}}}], action: Drop}}"
            )
        };
        let policy = |rules: &[String]| {
            format!(
                "kind: NetworkPolicy\nmetadata: {{name: p, uid: u}}\nappliedToGroups: [atg]\n\
                 rules: [{}]\n",
                rules.join(", ")
            )
        };
        let eth0 = [iface("eth0", 3, &["10.0.0.1"], "vm")];
        let before = policy(&[rule("In", 0, 80), rule("In", 2, 81), rule("Out", 0, 53)]);
        let mut store = store(&format!("{atg}---\n{before}"));
        let mut view = ResolvedView::new();
        let mut last = (0, Arc::from(Vec::new()));
        view.update(&store, &eth0, None);
        same_changes(&mut view, &mut last, &resolve(&store, &eth0));
        let old = view.rules.clone();
        assert_eq!(old.len(), 3);

        let after = policy(&[
            rule("In", 0, 80),
            rule("In", 1, 443),
            rule("In", 2, 81),
            rule("Out", 0, 53),
        ]);
        let one = super::tests::store(&format!("{atg}---\n{after}"));
        let changes = store.upsert_policy(Arc::new(one.policy("p").expect("policy").clone()));
        assert!(view.update(&store, &eth0, Some(&store.affected_policies(&changes))));
        same(&view, &resolve(&store, &eth0));
        let added = RuleId {
            policy_uid: "u".into(),
            direction: crate::rule::Direction::In,
            index: 1,
            services_key: String::new(),
        };
        let ids = view.take_changes().ids;
        assert_eq!(*ids, BTreeSet::from([added.clone()]));
        for r in old.iter() {
            assert!(
                view.rules.iter().any(|n| Arc::ptr_eq(n, r)),
                "{:?} keeps its allocation",
                r.id
            );
        }
        assert_eq!(view.rules.len(), 4);
    }
}
