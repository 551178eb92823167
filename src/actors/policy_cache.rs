//! The policy cache: owns the NetworkPolicy state and decides which rules apply to this node.
//! In this slice it tracks the local ExternalEntities (which attached interface stands for which
//! entity), the input that rule resolution keys on; policy sources arrive with the policy engine.

use std::collections::BTreeMap;

use actix::{Actor, Context, Handler};
use serde_json::json;
use tracing::debug;

use super::{common_handlers, Deps, Lifeline, Peers};
use crate::messages::{
    ActorKind, ActorStatus, AttachedInterface, EntityRef, InterfacesChanged, Resync, StatusQuery,
};

pub struct PolicyCache {
    peers: Peers,
    /// Local ExternalEntities and the interface each one is attached as.
    local_entities: BTreeMap<EntityRef, AttachedInterface>,
    /// Whether the interface manager's view has arrived since this instance started.
    interfaces_known: bool,
    _lifeline: Lifeline,
}

impl PolicyCache {
    pub fn new(_deps: Deps, peers: Peers, lifeline: Lifeline) -> Self {
        PolicyCache {
            peers,
            local_entities: BTreeMap::new(),
            interfaces_known: false,
            _lifeline: lifeline,
        }
    }
}

impl Actor for PolicyCache {
    type Context = Context<Self>;
}

impl Handler<InterfacesChanged> for PolicyCache {
    type Result = ();
    fn handle(&mut self, msg: InterfacesChanged, _: &mut Context<Self>) {
        let next: BTreeMap<_, _> = msg
            .interfaces
            .into_iter()
            .map(|i| (i.entity.clone(), i))
            .collect();
        if next != self.local_entities {
            debug!(entities = next.len(), "local ExternalEntities changed");
        }
        self.local_entities = next;
        self.interfaces_known = true;
    }
}

impl Handler<Resync> for PolicyCache {
    type Result = ();
    fn handle(&mut self, _: Resync, _: &mut Context<Self>) {
        // Nothing downstream depends on this actor's facts yet.
    }
}

impl Handler<StatusQuery> for PolicyCache {
    type Result = actix::MessageResult<StatusQuery>;
    fn handle(&mut self, _: StatusQuery, _: &mut Context<Self>) -> Self::Result {
        let entities: Vec<_> = self
            .local_entities
            .keys()
            .map(|e| format!("{}/{}", e.namespace, e.name))
            .collect();
        actix::MessageResult(ActorStatus {
            actor: ActorKind::PolicyCache,
            healthy: true,
            last_error: None,
            detail: json!({ "interfacesKnown": self.interfaces_known, "localEntities": entities }),
        })
    }
}

common_handlers!(PolicyCache);
