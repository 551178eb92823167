//! The policy cache: owns the NetworkPolicy state (policies, address groups, applied-to groups)
//! and the set of local ExternalEntities, resolves which rules apply on this node, and tells the
//! flow installer. Policies come from a [`PolicySource`]: `standalone.policyDir`, or the
//! antrea-controller watches in Kubernetes mode; without a policy source the node has no policies.
//!
//! Like the Go agent, rules are first published only once every kind has been synced (all three
//! watches delivered their snapshot, or the directory was read), so a partial view never replaces
//! the switch's last rules.

use std::collections::{BTreeMap, BTreeSet};

use actix::{Actor, AsyncContext, Context, Handler, StreamHandler};
use serde_json::json;
use tracing::{info, warn};

use super::{common_handlers, Deps, Lifeline, Peers};
use crate::messages::{
    ActorKind, ActorStatus, AttachedInterface, EntityRef, InterfacesChanged, PolicyGeneration, Resync,
    RulesChanged, StatusQuery,
};
use crate::policy::controlplane::store::PolicyStore;
use crate::policy::controlplane::{Kind, ValidObject};
use crate::policy::resolve::{resolve, Resolved};
use crate::sources::policy_dir::PolicySnapshot;
use crate::sources::PolicyUpdate;

/// The kinds a policy source must sync before rules are published.
const SYNCED_KINDS: [Kind; 3] = [Kind::NetworkPolicy, Kind::AddressGroup, Kind::AppliedToGroup];

pub struct PolicyCache {
    deps: Deps,
    peers: Peers,
    store: PolicyStore,
    /// Whether the policy source has delivered its first complete view.
    policies_known: bool,
    /// Kinds whose first snapshot arrived (the Go agent's 3-count barrier).
    synced_kinds: BTreeSet<Kind>,
    /// Watch connection state per kind (`None` for a source without connections).
    connections: BTreeMap<Kind, bool>,
    /// Bumped on every full resync of the policies (see `PoliciesRealized`).
    sync_epoch: u64,
    /// Local ExternalEntities and their interfaces; `None` until the interface manager reports.
    interfaces: Option<BTreeMap<EntityRef, AttachedInterface>>,
    resolved: Option<Resolved>,
    source_errors: Vec<String>,
    _lifeline: Lifeline,
}

impl PolicyCache {
    pub fn new(deps: Deps, peers: Peers, lifeline: Lifeline) -> Self {
        PolicyCache {
            deps,
            peers,
            store: PolicyStore::new(),
            policies_known: false,
            synced_kinds: BTreeSet::new(),
            connections: BTreeMap::new(),
            sync_epoch: 0,
            interfaces: None,
            resolved: None,
            source_errors: Vec::new(),
            _lifeline: lifeline,
        }
    }

    /// Re-resolves and publishes when both inputs are known and the result changed (or `force`).
    fn update(&mut self, force: bool) {
        let (true, Some(interfaces)) = (self.policies_known, &self.interfaces) else {
            return;
        };
        let interfaces: Vec<AttachedInterface> = interfaces.values().cloned().collect();
        let next = resolve(&self.store, &interfaces);
        let previous_warnings = self
            .resolved
            .as_ref()
            .map(|r| r.warnings.clone())
            .unwrap_or_default();
        for w in next.warnings.iter().filter(|w| !previous_warnings.contains(w)) {
            warn!("{w}");
        }
        let changed = self.resolved.as_ref().map(|r| &r.rules) != Some(&next.rules);
        if changed {
            info!(
                rules = next.rules.len(),
                "NetworkPolicy rules for this node changed"
            );
        }
        if changed || force {
            if let Some(flows) = &self.peers.flows {
                flows.do_send(RulesChanged {
                    rules: next.rules.clone(),
                    policies: self.policies_of(&next),
                    sync_epoch: self.sync_epoch,
                });
            }
        }
        self.resolved = Some(next);
    }

    /// The policies with at least one rule in `resolved`, with their generations.
    fn policies_of(&self, resolved: &Resolved) -> Vec<PolicyGeneration> {
        let uids: BTreeSet<&str> = resolved.rules.iter().map(|r| r.policy.uid.as_str()).collect();
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
            })
            .collect()
    }

    fn apply_snapshot(&mut self, snapshot: PolicySnapshot) {
        for e in snapshot.errors.iter().filter(|e| !self.source_errors.contains(e)) {
            warn!("{e}");
        }
        self.source_errors = snapshot.errors;
        self.store.replace_all(
            snapshot.network_policies,
            snapshot.address_groups,
            snapshot.applied_to_groups,
        );
        self.synced_kinds.extend(SYNCED_KINDS);
        self.sync_epoch += 1;
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
                        ValidObject::NetworkPolicy(p) => policies.push(*p),
                        ValidObject::AddressGroup(g) | ValidObject::AppliedToGroup(g) => groups.push(g),
                        other => warn!(kind = %kind, "ignoring {other:?} in a snapshot"),
                    }
                }
                match kind {
                    Kind::NetworkPolicy => {
                        self.store.replace_policies(policies);
                        self.sync_epoch += 1;
                    }
                    Kind::AddressGroup => {
                        self.store.replace_address_groups(groups);
                    }
                    Kind::AppliedToGroup => {
                        self.store.replace_applied_to_groups(groups);
                    }
                    other => warn!("ignoring a snapshot of kind {other}"),
                }
                self.synced_kinds.insert(kind);
            }
            PolicyUpdate::Upsert(object) => {
                if let Err(e) = self.store.apply(object) {
                    warn!("{e}");
                }
            }
            PolicyUpdate::Patch { kind, patch } => {
                let result = match kind {
                    Kind::AddressGroup | Kind::AddressGroupPatch => self.store.patch_address_group(patch),
                    _ => self.store.patch_applied_to_group(patch),
                };
                if let Err(e) = result {
                    warn!("{e}");
                }
            }
            PolicyUpdate::Delete { kind, name } => {
                self.store.delete(kind, &name);
            }
            PolicyUpdate::Connection { kind, connected } => {
                if self.connections.insert(kind, connected) != Some(connected) {
                    info!(kind = %kind, connected, "antrea-controller watch connection changed");
                }
            }
            PolicyUpdate::Error(e) => {
                warn!("{e}");
                if !self.source_errors.contains(&e) {
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
        self.interfaces = Some(
            msg.interfaces
                .into_iter()
                .map(|i| (i.entity.clone(), i))
                .collect(),
        );
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
        actix::MessageResult(ActorStatus {
            actor: ActorKind::PolicyCache,
            healthy: true,
            last_error: self.source_errors.first().cloned(),
            detail: json!({
                "policiesKnown": self.policies_known,
                "controllerConnected": self.controller_connected(),
                "addressGroups": self.store.address_groups().count(),
                "appliedToGroups": self.store.applied_to_groups().count(),
                "syncEpoch": self.sync_epoch,
                "interfacesKnown": self.interfaces.is_some(),
                "localEntities": entities,
                "networkPolicies": self.store.policies().count(),
                "rules": resolved.map_or(0, |r| r.rules.len()),
                "warnings": resolved.map(|r| r.warnings.clone()).unwrap_or_default(),
                "sourceErrors": self.source_errors,
            }),
        })
    }
}

common_handlers!(PolicyCache);
