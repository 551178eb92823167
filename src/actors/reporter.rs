//! The AntreaAgentInfo reporter: every `report_interval` it asks every actor for its status and
//! publishes one agent-info snapshot (version, node, OVS, interfaces, conditions). In standalone
//! mode the snapshot is written atomically as JSON to the state directory; the Kubernetes writer
//! arrives with the Kubernetes issue.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, ResponseActFuture, WrapFuture};
use serde::Serialize;
use tracing::{debug, warn};

use super::{common_handlers, Deps, Lifeline, Peers};
use crate::messages::{ActorKind, ActorStatus, Resync, StatusQuery};

/// The agent info as the reporter last assembled it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfo {
    pub version: String,
    pub node_name: String,
    pub namespace: String,
    pub ovs_bridge: String,
    /// Unix seconds.
    pub updated_at: u64,
    pub healthy: bool,
    pub actors: Vec<ActorStatus>,
    /// Actors that did not answer the status query.
    pub unresponsive: Vec<ActorKind>,
}

/// "Refresh and publish now."
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "()")]
pub struct Report;

/// Returns the last snapshot.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "Option<AgentInfo>")]
pub struct GetAgentInfo;

pub struct AgentInfoReporter {
    deps: Deps,
    peers: Peers,
    last: Option<AgentInfo>,
    _lifeline: Lifeline,
}

impl AgentInfoReporter {
    pub fn new(deps: Deps, peers: Peers, lifeline: Lifeline) -> Self {
        AgentInfoReporter {
            deps,
            peers,
            last: None,
            _lifeline: lifeline,
        }
    }
}

async fn ask<A>(addr: Option<actix::Addr<A>>, kind: ActorKind) -> Result<ActorStatus, ActorKind>
where
    A: Actor + actix::Handler<StatusQuery>,
    A::Context: actix::dev::ToEnvelope<A, StatusQuery>,
{
    let addr = addr.ok_or(kind)?;
    match tokio::time::timeout(Duration::from_secs(5), addr.send(StatusQuery)).await {
        Ok(Ok(status)) => Ok(status),
        _ => Err(kind),
    }
}

fn write_atomically(path: &PathBuf, info: &AgentInfo) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let body = serde_json::to_vec_pretty(info).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

impl Actor for AgentInfoReporter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.deps.timing.report_interval, |_, ctx| ctx.notify(Report));
    }
}

impl Handler<Report> for AgentInfoReporter {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Report, _: &mut Context<Self>) -> Self::Result {
        let p = self.peers.clone();
        let fut = async move {
            let answers = vec![
                ask(p.watcher, ActorKind::ExternalNodeWatcher).await,
                ask(p.interfaces, ActorKind::InterfaceManager).await,
                ask(p.policy, ActorKind::PolicyCache).await,
                ask(p.flows, ActorKind::FlowInstaller).await,
            ];
            answers
        };
        Box::pin(fut.into_actor(self).map(|answers, act, _| {
            let mut actors = Vec::new();
            let mut unresponsive = Vec::new();
            for a in answers {
                match a {
                    Ok(s) => actors.push(s),
                    Err(kind) => unresponsive.push(kind),
                }
            }
            let healthy = unresponsive.is_empty() && actors.iter().all(|s| s.healthy);
            let info = AgentInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                node_name: act.deps.node_name.clone(),
                namespace: act.deps.config.external_node_namespace.clone(),
                ovs_bridge: act.deps.config.ovs_bridge.clone(),
                updated_at: SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                healthy,
                actors,
                unresponsive,
            };
            if let Some(path) = &act.deps.agent_info_path {
                match write_atomically(path, &info) {
                    Ok(()) => debug!(path = %path.display(), healthy, "agent info written"),
                    Err(e) => warn!(path = %path.display(), "cannot write agent info: {e}"),
                }
            }
            act.last = Some(info);
        }))
    }
}

impl Handler<GetAgentInfo> for AgentInfoReporter {
    type Result = actix::MessageResult<GetAgentInfo>;
    fn handle(&mut self, _: GetAgentInfo, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(self.last.clone())
    }
}

impl Handler<Resync> for AgentInfoReporter {
    type Result = ();
    fn handle(&mut self, _: Resync, ctx: &mut Context<Self>) {
        ctx.notify(Report);
    }
}

impl Handler<StatusQuery> for AgentInfoReporter {
    type Result = actix::MessageResult<StatusQuery>;
    fn handle(&mut self, _: StatusQuery, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(ActorStatus {
            actor: ActorKind::AgentInfoReporter,
            healthy: true,
            last_error: None,
            detail: serde_json::json!({ "lastReport": self.last.as_ref().map(|i| i.updated_at) }),
        })
    }
}

common_handlers!(AgentInfoReporter);

impl Handler<crate::messages::PoliciesRealized> for AgentInfoReporter {
    type Result = ();
    fn handle(&mut self, _: crate::messages::PoliciesRealized, _: &mut Context<Self>) {
        // NetworkPolicyStatus reporting arrives with the Kubernetes writers.
    }
}
