//! The ExternalNode watcher: follows the agent's ExternalNode in its source (a file in standalone
//! mode), validates it, and tells the interface manager when its interfaces change (or when it is
//! deleted). Invalid observations are logged once and ignored: the last good state stays in force.

use std::sync::Arc;

use actix::{Actor, AsyncContext, Context, Handler, StreamHandler};
use tracing::{error, info};

use super::{common_handlers, Lifeline, WatcherOutputs};
use crate::k8s::external_node::ExternalNode;
use crate::messages::status_detail::{ExternalNodeState, ExternalNodeWatcherStatus};
use crate::messages::{
    ActorDetail, ActorStatus, ErrorKind, ExternalNodeChanged, Resync, StatusError, StatusQuery,
};
use crate::sources::{ExternalNodeSource, SourceEvent};

/// What the watcher needs from the outside world: its source, and whose ExternalNode to follow.
#[derive(Clone)]
pub struct WatcherDeps {
    /// `externalNodeNamespace`: where the ExternalNode is looked up.
    pub namespace: String,
    pub node_name: String,
    pub source: Arc<dyn ExternalNodeSource>,
}

pub struct ExternalNodeWatcher {
    source: Arc<dyn ExternalNodeSource>,
    node_name: String,
    namespace: String,
    outputs: WatcherOutputs,
    /// The last valid state; `None` inside means "absent"; outer `None` means "not known yet".
    current: Option<Option<ExternalNode>>,
    last_error: Option<StatusError>,
    _lifeline: Lifeline,
}

impl ExternalNodeWatcher {
    pub fn new(deps: WatcherDeps, outputs: WatcherOutputs, lifeline: Lifeline) -> Self {
        ExternalNodeWatcher {
            source: deps.source.clone(),
            node_name: deps.node_name.clone(),
            namespace: deps.namespace.clone(),
            outputs,
            current: None,
            last_error: None,
            _lifeline: lifeline,
        }
    }

    fn publish(&self) {
        if let (Some(current), Some(im)) = (&self.current, &self.outputs.node_changed) {
            im.do_send(ExternalNodeChanged {
                node: current.clone(),
            });
        }
    }

    fn observe(&mut self, event: SourceEvent) {
        let next = match event {
            SourceEvent::Absent => None,
            SourceEvent::Present(obj) => match obj.validate(&self.node_name, &self.namespace) {
                Ok(mut node) => {
                    node.source = self.source.describe();
                    Some(node)
                }
                Err(e) => return self.fail(e.kind(), format!("{} ({})", e, self.source.describe())),
            },
            SourceEvent::Error(e) => return self.fail(e.kind(), e.to_string()),
        };
        if self.last_error.take().is_some() {
            info!("ExternalNode source is readable again");
        }
        if self.current.as_ref() == Some(&next) {
            return;
        }
        match &next {
            Some(node) => info!(name = %node.name, namespace = %node.namespace,
                interfaces = node.interfaces.len(), "ExternalNode present"),
            None => info!(name = %self.node_name, "ExternalNode absent"),
        }
        self.current = Some(next);
        self.publish();
    }

    fn fail(&mut self, kind: ErrorKind, message: String) {
        if self.last_error.as_ref().map(|e| e.message.as_str()) != Some(message.as_str()) {
            error!("{message}; keeping the last valid ExternalNode state");
        }
        self.last_error = Some(StatusError::new(kind, message));
    }
}

impl Actor for ExternalNodeWatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        info!(source = %self.source.describe(), node = %self.node_name, "watching ExternalNode");
        ctx.add_stream(self.source.subscribe());
    }
}

impl StreamHandler<SourceEvent> for ExternalNodeWatcher {
    fn handle(&mut self, event: SourceEvent, _: &mut Context<Self>) {
        self.observe(event);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        // A source stream never ends on its own; if it does, resubscribing is the supervisor's
        // job: stopping makes it restart us.
        error!(source = %self.source.describe(), "ExternalNode source ended");
        actix::ActorContext::stop(ctx);
    }
}

impl Handler<Resync> for ExternalNodeWatcher {
    type Result = ();
    fn handle(&mut self, _: Resync, _: &mut Context<Self>) {
        self.publish();
    }
}

impl Handler<StatusQuery> for ExternalNodeWatcher {
    type Result = actix::MessageResult<StatusQuery>;
    fn handle(&mut self, _: StatusQuery, _: &mut Context<Self>) -> Self::Result {
        let state = match &self.current {
            None => ExternalNodeState::Unknown,
            Some(None) => ExternalNodeState::Absent,
            Some(Some(_)) => ExternalNodeState::Present,
        };
        let detail = ExternalNodeWatcherStatus {
            interfaces: self
                .current
                .as_ref()
                .and_then(|c| c.as_ref())
                .map_or(0, |n| n.interfaces.len()),
            namespace: self.namespace.clone(),
            node_name: self.node_name.clone(),
            source: self.source.describe(),
            state,
        };
        actix::MessageResult(ActorStatus::new(
            self.last_error.is_none(),
            self.last_error.clone(),
            ActorDetail::ExternalNodeWatcher(detail),
        ))
    }
}

common_handlers!(ExternalNodeWatcher, WatcherOutputs);
