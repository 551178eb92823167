//! The policy cache: owns the NetworkPolicy state (policies, address groups, applied-to groups)
//! and the set of local ExternalEntities, resolves which rules apply on this node, and tells the
//! flow installer. Policies come from a [`PolicySource`]: `standalone.policyDir`, or the
//! antrea-controller watches in Kubernetes mode; without a policy source the node has no policies.
//!
//! Like the Go agent, rules are first published only once every kind has been synced (all three
//! watches delivered their snapshot, or the directory was read), so a partial view never replaces
//! the switch's last rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use actix::{Actor, AsyncContext, Context, Handler, StreamHandler};
use tracing::{debug, info, warn};

use super::{common_handlers, Lifeline, PolicyCacheOutputs};
use crate::messages::status_detail::PolicyCacheStatus;
use crate::messages::{
    ActorDetail, ActorStatus, AttachedInterface, EntityRef, ErrorKind, InterfacesChanged, PolicyGeneration,
    Resync, RulesChanged, StatusError, StatusQuery,
};
use crate::policy::controlplane::store::{Changes, PolicyStore};
use crate::policy::controlplane::{Kind, ValidObject};
use crate::policy::refuse::{self, NotEnforced};
use crate::policy::resolve::ResolvedView;
use crate::policy::rule::CompiledRuleInput;
use crate::sources::policy_dir::PolicySnapshot;
use crate::sources::{PolicySource, PolicyUpdate};

/// Read-only queries for the agent API and `/metrics` (`GetNetworkPolicies`, `GetGroups`, ...).
pub mod query;

/// How many distinct source errors are kept (the latest ones) for status reports.
const MAX_SOURCE_ERRORS: usize = 20;

/// Sync epochs are unique in the process, so a restarted policy cache never repeats an epoch the
/// reporter already saw (which would hide a resync from it).
fn next_sync_epoch() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The kinds a policy source must sync before rules are published.
const SYNCED_KINDS: [Kind; 3] = [Kind::NetworkPolicy, Kind::AddressGroup, Kind::AppliedToGroup];

/// What the last [`RulesChanged`] carried: sync epoch, policies, interface ports.
type Published = (u64, Vec<PolicyGeneration>, Vec<(u32, u32)>);

/// What the policy cache needs from the outside world: where NetworkPolicies come from.
#[derive(Clone)]
pub struct PolicyCacheDeps {
    /// `None`: no policies.
    pub policy_source: Option<Arc<dyn PolicySource>>,
}

pub struct PolicyCache {
    deps: PolicyCacheDeps,
    outputs: PolicyCacheOutputs,
    store: PolicyStore,
    /// Whether the policy source has delivered its first complete view.
    policies_known: bool,
    /// Kinds whose first snapshot arrived (the Go agent's 3-count barrier).
    synced_kinds: BTreeSet<Kind>,
    /// Watch connection state per kind (`None` for a source without connections).
    connections: BTreeMap<Kind, bool>,
    /// Bumped on every full snapshot, and on the NetworkPolicy resync after a suspected server
    /// restart (see `PoliciesRealized`).
    sync_epoch: u64,
    /// The source said the server may have restarted: its next NetworkPolicy resync starts a new
    /// sync epoch. Not at once: the other watches' items may come in between, and publishing them
    /// in the new epoch would report the old policies' statuses again, stale by the time they land.
    restart_suspected: bool,
    /// The epoch and policy generations last published, so a resync or a generation bump that
    /// leaves the rules unchanged is still published (and its statuses re-posted).
    published: Option<Published>,
    /// Local ExternalEntities and their interfaces; `None` until the interface manager reports.
    interfaces: Option<BTreeMap<EntityRef, AttachedInterface>>,
    resolved: Option<ResolvedView>,
    /// What changed in the store since the last resolution: only the policies it affects are
    /// resolved again (all of them when `resolve_all`, e.g. after an interface change).
    changes: Changes,
    resolve_all: bool,
    source_errors: Vec<StatusError>,
    _lifeline: Lifeline,
}

impl PolicyCache {
    pub fn new(deps: PolicyCacheDeps, outputs: PolicyCacheOutputs, lifeline: Lifeline) -> Self {
        PolicyCache {
            deps,
            outputs,
            store: PolicyStore::new(),
            policies_known: false,
            synced_kinds: BTreeSet::new(),
            connections: BTreeMap::new(),
            sync_epoch: next_sync_epoch(),
            restart_suspected: false,
            published: None,
            interfaces: None,
            resolved: None,
            changes: Changes::default(),
            resolve_all: true,
            source_errors: Vec::new(),
            _lifeline: lifeline,
        }
    }

    /// Re-resolves and publishes when both inputs are known and the result changed (or `force`).
    fn update(&mut self, force: bool) {
        let (true, Some(interfaces)) = (self.policies_known, &self.interfaces) else {
            return;
        };
        let started = std::time::Instant::now();
        let interfaces: Vec<AttachedInterface> = interfaces.values().cloned().collect();
        let changes = std::mem::take(&mut self.changes);
        let affected =
            (!std::mem::take(&mut self.resolve_all)).then(|| self.store.affected_policies(&changes));
        let first = self.resolved.is_none();
        let view = self.resolved.get_or_insert_with(|| {
            ResolvedView::new().with_jobs(std::sync::Arc::new(crate::parallel_jobs::Threads::available()))
        });
        let previous_warnings = view.warnings.clone();
        let previous_refusals: BTreeSet<NotEnforced> = view.all_not_enforced().cloned().collect();
        let changed = view.update(&self.store, &interfaces, affected.as_ref().filter(|_| !first)) || first;
        let resolve_ms = started.elapsed().as_secs_f64() * 1e3;
        for w in view.warnings.iter().filter(|w| !previous_warnings.contains(w)) {
            warn!("{w}");
        }
        // One line per rule when it starts being installed fail-closed (or for other reasons),
        // not per resync.
        let mut new_by_rule: BTreeMap<(&str, usize), Vec<&NotEnforced>> = BTreeMap::new();
        for n in view.all_not_enforced().filter(|n| !previous_refusals.contains(n)) {
            new_by_rule.entry((&n.policy, n.rule_index)).or_default().push(n);
        }
        for ((policy, _), list) in new_by_rule {
            let reasons: Vec<&str> = list.iter().map(|n| n.reason.as_str()).collect();
            let messages: Vec<&str> = list.iter().map(|n| n.message.as_str()).collect();
            warn!(
                policy,
                reasons = %reasons.join(","),
                "NetworkPolicy {policy}: not enforced as written: {}",
                messages.join("; ")
            );
        }
        let rules = view.rules.clone();
        if changed {
            info!(rules = rules.len(), "NetworkPolicy rules for this node changed");
        }
        let published = (
            self.sync_epoch,
            self.policies_of(&rules),
            crate::messages::interfaces::ofports(&interfaces),
        );
        let stale = self.published.as_ref() != Some(&published);
        if changed || force || stale {
            if let Some(flows) = &self.outputs.rules_changed {
                let changes = self.resolved.as_mut().map(ResolvedView::take_changes);
                flows.do_send(RulesChanged {
                    policies: published.1.clone(),
                    rules,
                    sync_epoch: self.sync_epoch,
                    interface_ofports: published.2.clone(),
                    changes,
                });
                self.published = Some(published);
            }
        }
        debug!(
            resolve_ms = format_args!("{resolve_ms:.1}"),
            update_ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
            changed,
            "rules resolved"
        );
    }

    /// Notes what an operation on the store changed, for the next resolution.
    fn note(&mut self, changes: Changes) {
        self.changes.merge(changes);
    }

    /// The policies with at least one rule in `rules`, with their generations.
    fn policies_of(&self, rules: &[std::sync::Arc<CompiledRuleInput>]) -> Vec<PolicyGeneration> {
        // Hashed, not sorted: collecting 50,000 uids into a BTreeSet sorts them all, and this
        // runs on every change.
        let uids: std::collections::HashSet<&str, foldhash::fast::RandomState> =
            rules.iter().map(|r| r.policy.uid.as_str()).collect();
        let view = self.resolved.as_ref();
        self.store
            .policies()
            .filter(|p| uids.contains(p.uid.as_str()))
            .map(|p| PolicyGeneration {
                name: p.name.clone(),
                uid: p.uid.clone(),
                generation: p.generation,
                antrea_native: p
                    .source_ref
                    .as_ref()
                    .is_some_and(|r| r.policy_type.is_antrea_native()),
                not_enforced: view.and_then(|v| refuse::status_message(v.not_enforced(&p.name))),
            })
            .collect()
    }

    fn apply_snapshot(&mut self, snapshot: PolicySnapshot) {
        let errors: Vec<StatusError> = snapshot
            .errors
            .into_iter()
            .map(|e| StatusError::new(ErrorKind::PolicySource, e))
            .collect();
        for e in errors.iter().filter(|e| !self.source_errors.contains(e)) {
            warn!("{}", e.message);
        }
        self.source_errors = errors;
        let started = std::time::Instant::now();
        let changes = self.store.replace_all(
            snapshot.network_policies,
            snapshot.address_groups,
            snapshot.applied_to_groups,
        );
        debug!(
            store_ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
            "policy snapshot stored"
        );
        self.note(changes);
        self.synced_kinds.extend(SYNCED_KINDS);
        self.sync_epoch = next_sync_epoch();
        self.restart_suspected = false;
    }

    /// Applies one update to the store.
    fn apply_update(&mut self, update: PolicyUpdate) {
        match update {
            PolicyUpdate::Snapshot(snapshot) => self.apply_snapshot(snapshot),
            PolicyUpdate::Replace { kind, objects } => {
                let mut policies = Vec::new();
                let mut groups = Vec::new();
                for object in objects {
                    match object {
                        ValidObject::NetworkPolicy(p) => policies.push(p),
                        ValidObject::AddressGroup(g) | ValidObject::AppliedToGroup(g) => groups.push(g),
                        other => warn!(kind = %kind, "ignoring {other:?} in a snapshot"),
                    }
                }
                match kind {
                    // A resync alone starts no new sync epoch: statuses already reported stay
                    // reported unless the source says the server may have lost them.
                    Kind::NetworkPolicy => {
                        let changes = self.store.replace_policies(policies);
                        self.note(changes);
                        if std::mem::take(&mut self.restart_suspected) {
                            self.sync_epoch = next_sync_epoch();
                        }
                    }
                    Kind::AddressGroup => {
                        let changes = self.store.replace_address_groups(groups);
                        self.note(changes);
                    }
                    Kind::AppliedToGroup => {
                        let changes = self.store.replace_applied_to_groups(groups);
                        self.note(changes);
                    }
                    other => warn!("ignoring a snapshot of kind {other}"),
                }
                self.synced_kinds.insert(kind);
            }
            PolicyUpdate::Upsert(object) => match self.store.apply(object) {
                Ok(changes) => self.note(changes),
                Err(e) => warn!("{e}"),
            },
            PolicyUpdate::Patch { kind, patch } => {
                let result = match kind {
                    Kind::AddressGroup | Kind::AddressGroupPatch => self.store.patch_address_group(patch),
                    _ => self.store.patch_applied_to_group(patch),
                };
                match result {
                    Ok(changes) => self.note(changes),
                    Err(e) => warn!("{e}"),
                }
            }
            PolicyUpdate::Delete { kind, name } => {
                let changes = self.store.delete(kind, &name);
                self.note(changes);
            }
            PolicyUpdate::Connection { kind, connected } => {
                if self.connections.insert(kind, connected) != Some(connected) {
                    info!(kind = %kind, connected, "antrea-controller watch connection changed");
                }
            }
            PolicyUpdate::ServerMayHaveRestarted => {
                info!("antrea-controller may have restarted: realization statuses will be reported again");
                self.restart_suspected = true;
            }
            PolicyUpdate::Error(e) => {
                warn!("{e}");
                // The status and the API keep the message's words.
                let e = StatusError::new(e.kind(), e.to_string());
                if !self.source_errors.contains(&e) {
                    // A long-running agent sees many distinct errors: keep the latest few.
                    if self.source_errors.len() >= MAX_SOURCE_ERRORS {
                        self.source_errors.remove(0);
                    }
                    self.source_errors.push(e);
                }
            }
        }
        if SYNCED_KINDS.iter().all(|k| self.synced_kinds.contains(k)) {
            self.policies_known = true;
        }
    }

    /// True iff every watch is connected; `None` for a source without connections.
    fn controller_connected(&self) -> Option<bool> {
        if self.connections.is_empty() {
            return None;
        }
        Some(
            SYNCED_KINDS
                .iter()
                .all(|k| self.connections.get(k) == Some(&true)),
        )
    }
}

impl Actor for PolicyCache {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match self.deps.policy_source.clone() {
            Some(source) => {
                info!(source = %source.describe(), "watching NetworkPolicies");
                ctx.add_stream(source.subscribe());
            }
            None => {
                info!("no policy source configured: no NetworkPolicies");
                self.policies_known = true;
            }
        }
    }
}

impl StreamHandler<PolicyUpdate> for PolicyCache {
    fn handle(&mut self, update: PolicyUpdate, _: &mut Context<Self>) {
        self.apply_update(update);
        self.update(false);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        warn!("policy source ended; restarting the policy cache");
        actix::ActorContext::stop(ctx);
    }
}

impl Handler<InterfacesChanged> for PolicyCache {
    type Result = ();
    fn handle(&mut self, msg: InterfacesChanged, _: &mut Context<Self>) {
        let interfaces: BTreeMap<EntityRef, AttachedInterface> = msg
            .interfaces
            .into_iter()
            .map(|i| (i.entity.clone(), i))
            .collect();
        // Which rules apply, and their ports and IPs, depend on every interface.
        self.resolve_all |= self.interfaces.as_ref() != Some(&interfaces);
        self.interfaces = Some(interfaces);
        self.update(false);
    }
}

impl Handler<Resync> for PolicyCache {
    type Result = ();
    fn handle(&mut self, _: Resync, _: &mut Context<Self>) {
        self.update(true);
    }
}

impl Handler<StatusQuery> for PolicyCache {
    type Result = actix::MessageResult<StatusQuery>;
    fn handle(&mut self, _: StatusQuery, _: &mut Context<Self>) -> Self::Result {
        let entities: Vec<String> = self
            .interfaces
            .iter()
            .flat_map(|m| m.keys())
            .map(|e| format!("{}/{}", e.namespace, e.name))
            .collect();
        let resolved = self.resolved.as_ref();
        let detail = PolicyCacheStatus {
            address_groups: self.store.address_groups().count(),
            applied_to_groups: self.store.applied_to_groups().count(),
            controller_connected: self.controller_connected(),
            interfaces_known: self.interfaces.is_some(),
            local_entities: entities,
            network_policies: self.store.policies().count(),
            policies_known: self.policies_known,
            rules: resolved.map_or(0, |r| r.rules.len()),
            source_errors: self.source_errors.clone(),
            sync_epoch: self.sync_epoch,
            warnings: resolved.map_or_else(Vec::new, |r| {
                r.warnings
                    .iter()
                    .map(|w| StatusError::new(ErrorKind::PolicyResolution, w.clone()))
                    .collect()
            }),
        };
        actix::MessageResult(ActorStatus::new(
            true,
            self.source_errors.last().cloned(),
            ActorDetail::PolicyCache(detail),
        ))
    }
}

common_handlers!(PolicyCache, PolicyCacheOutputs);
