//! The policy cache: owns the NetworkPolicy state (policies, address groups, applied-to groups)
//! and the set of local ExternalEntities, resolves which rules apply on this node, and tells the
//! flow installer. Policies come from `standalone.policyDir` (the antrea-controller watch is
//! another source to come); without a policy source the node has no policies.

use std::collections::BTreeMap;

use actix::{Actor, AsyncContext, Context, Handler, StreamHandler};
use serde_json::json;
use tracing::{info, warn};

use super::{common_handlers, Deps, Lifeline, Peers};
use crate::messages::{
    ActorKind, ActorStatus, AttachedInterface, EntityRef, InterfacesChanged, Resync, RulesChanged,
    StatusQuery,
};
use crate::policy::controlplane::store::PolicyStore;
use crate::policy::resolve::{resolve, Resolved};
use crate::sources::policy_dir::{PolicyDirSource, PolicySnapshot};

/// How often the policy directory is read.
const POLICY_DIR_POLL: std::time::Duration = std::time::Duration::from_millis(500);

pub struct PolicyCache {
    deps: Deps,
    peers: Peers,
    store: PolicyStore,
    /// Whether the policy source has delivered its first snapshot.
    policies_known: bool,
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
                });
            }
        }
        self.resolved = Some(next);
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
        self.policies_known = true;
    }
}

impl Actor for PolicyCache {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match self
            .deps
            .config
            .standalone
            .as_ref()
            .and_then(|s| s.policy_dir.clone())
        {
            Some(dir) => {
                let source = PolicyDirSource::new(dir, POLICY_DIR_POLL);
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

impl StreamHandler<PolicySnapshot> for PolicyCache {
    fn handle(&mut self, snapshot: PolicySnapshot, _: &mut Context<Self>) {
        self.apply_snapshot(snapshot);
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
