//! The reporter: everything the agent writes back about itself.
//!
//! * Every `report_interval` (first one at start) it asks every actor for its status, probes
//!   OVSDB, decides the four AntreaAgentInfo conditions (see [`agent_conditions::conditions`]) and
//!   publishes one [`AgentInfo`] snapshot: written atomically as JSON to the state directory when
//!   a path is configured (through [`ReporterDeps::state_files`], off the actor's thread, one write at a
//!   time with only the newest waiting), kept for [`GetAgentInfo`] (the local API), and — in
//!   Kubernetes mode — sent as the AntreaAgentInfo heartbeat (GET/PUT with a cached copy, §5.3 of the API
//!   reference; never created by us).
//! * On every [`PoliciesRealized`] from the flow installer (Kubernetes mode, `AntreaPolicy` on)
//!   it posts a NetworkPolicyStatus for each Antrea-native policy not yet posted at that
//!   generation in this sync epoch, at most four at a time, retrying failures with exponential
//!   back-off without ever blocking the actor.
//! * Every `stats_interval` (Kubernetes mode, `NetworkPolicyStats` on) it reads the rule counters
//!   from the flow installer and posts the deltas as a NodeStatsSummary; the first reading is a
//!   baseline, taken as soon as the first policies are realized.
//!
//! Failures are logged once per change of error (a recovery is logged too), never stop the actor,
//! and show in the status detail (`agentInfo`, `policyStatus`, `stats`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, ResponseActFuture, WrapFuture};
use chrono::Utc;
use serde::Serialize;
use tracing::{debug, warn, Instrument};

pub mod agent_conditions;

use super::{common_handlers, Lifeline, ReporterOutputs, Timing};
use crate::host::files::StateFiles;
use crate::k8s::agent_info::{
    self, AgentInfoInputs, AntreaAgentInfo, ConditionReport, ConditionTracker, OvsdbProbe,
};
use crate::k8s::api::{ApiClient, ApiError, Method};
use crate::k8s::policy_status::{self, Post, StatusPoster};
use crate::k8s::stats_summary::{self, Collection, StatsBaseline, StatsStep};
use crate::k8s::write_log::WriteLog;
use crate::k8s::ClusterClients;
use crate::messages::status_detail::{
    sorted_json, AgentInfoWrites, KubernetesWrites, PolicyStatusWrites, ReporterMode, ReporterStatus,
    StatsWrites,
};
use crate::messages::{
    ActorDetail, ActorKind, ActorStatus, GetRuleStats, PoliciesRealized, Resync, StatusQuery,
};
use crate::messages::{ErrorKind, StatusError};
use crate::ovs::ovsdb::Ovsdb;

/// Bound on one status query, the OVSDB probe and the rule-counter read.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
const STATS_READ_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// The four AntreaAgentInfo conditions, with when each last changed status.
    pub conditions: Vec<ConditionReport>,
    /// The AntreaAgentInfo this agent would write (all fields, built locally); the local API
    /// serves it, in standalone mode too.
    pub antrea_agent_info: AntreaAgentInfo,
    /// Results of the writes to the Kubernetes API (absent in standalone mode).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "sorted_json")]
    pub kubernetes: Option<KubernetesWrites>,
}

/// "Refresh and publish now."
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "()")]
pub struct Report;

/// "Read the rule counters and post their deltas now."
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "()")]
pub struct CollectStats;

/// Returns the last snapshot.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "Option<AgentInfo>")]
pub struct GetAgentInfo;

/// Kubernetes-mode state.
struct Writers {
    clients: ClusterClients,
    post_statuses: bool,
    collect_stats: bool,
    /// The server's answer to our last successful PUT.
    agent_info_cache: Option<AntreaAgentInfo>,
    agent_info_busy: bool,
    agent_info: WriteLog,
    statuses: StatusPoster,
    status_log: WriteLog,
    baseline: StatsBaseline,
    stats_busy: bool,
    stats: WriteLog,
}

impl Writers {
    fn report(&self) -> KubernetesWrites {
        KubernetesWrites {
            agent_info: AgentInfoWrites {
                cached: self.agent_info_cache.is_some(),
                log: self.agent_info.clone(),
                resource_version: self
                    .agent_info_cache
                    .as_ref()
                    .map(|c| c.metadata.resource_version.clone()),
            },
            policy_status: PolicyStatusWrites {
                enabled: self.post_statuses,
                log: self.status_log.clone(),
                state: self.statuses.summary(),
            },
            stats: StatsWrites {
                baseline: self.baseline.has_baseline(),
                enabled: self.collect_stats,
                log: self.stats.clone(),
            },
        }
    }

    /// The first failed write of the three (all to kube-apiserver).
    fn first_error(&self) -> Option<StatusError> {
        [&self.agent_info, &self.status_log, &self.stats]
            .iter()
            .find_map(|l| l.last_error.clone())
    }
}

/// What the reporter needs from the outside world: who it reports on, OVSDB (probed), the
/// Kubernetes API connections (Kubernetes mode), where and how it writes `agent-info.json`, the
/// settings it reports or obeys, and the timing.
#[derive(Clone)]
pub struct ReporterDeps {
    /// `ovsBridge`, reported in the agent info.
    pub bridge: String,
    /// `apiPort`, reported in AntreaAgentInfo.
    pub api_port: u16,
    /// `externalNodeNamespace`: the namespace of the node's statuses and agent info.
    pub namespace: String,
    /// Feature gate `AntreaPolicy` (on by default): post NetworkPolicy statuses (Kubernetes mode).
    pub post_statuses: bool,
    /// Feature gate `NetworkPolicyStats` (on by default): post NodeStatsSummaries (Kubernetes
    /// mode).
    pub collect_stats: bool,
    pub node_name: String,
    pub ovsdb: Arc<dyn Ovsdb>,
    /// `None` in standalone mode.
    pub cluster: Option<ClusterClients>,
    /// Where the agent info snapshot goes (standalone mode).
    pub agent_info_path: Option<PathBuf>,
    pub state_files: Arc<dyn StateFiles>,
    pub timing: Timing,
}

pub struct AgentInfoReporter {
    deps: ReporterDeps,
    outputs: ReporterOutputs,
    last: Option<AgentInfo>,
    conditions: ConditionTracker,
    k8s: Option<Writers>,
    /// A write of the agent info file is under way.
    info_file_busy: bool,
    /// The snapshot to write when it ends (the newest only: an older one is never written
    /// after a newer).
    info_file_next: Option<(Vec<u8>, bool)>,
    _lifeline: Lifeline,
}

impl AgentInfoReporter {
    pub fn new(deps: ReporterDeps, outputs: ReporterOutputs, lifeline: Lifeline) -> Self {
        let k8s = deps.cluster.clone().map(|clients| Writers {
            clients,
            post_statuses: deps.post_statuses,
            collect_stats: deps.collect_stats,
            agent_info_cache: None,
            agent_info_busy: false,
            agent_info: WriteLog::default(),
            statuses: StatusPoster::new(deps.timing.status_retry_min),
            status_log: WriteLog::default(),
            baseline: StatsBaseline::default(),
            stats_busy: false,
            stats: WriteLog::default(),
        });
        AgentInfoReporter {
            deps,
            outputs,
            last: None,
            conditions: ConditionTracker::default(),
            k8s,
            info_file_busy: false,
            info_file_next: None,
            _lifeline: lifeline,
        }
    }

    /// Writes `body` (the snapshot's JSON; `healthy` for the log) to the agent info file, or
    /// leaves it for the write under way to start when it ends.
    fn write_info_file(&mut self, body: Vec<u8>, healthy: bool, ctx: &mut Context<Self>) {
        let Some(path) = self.deps.agent_info_path.clone() else {
            return;
        };
        if self.info_file_busy {
            self.info_file_next = Some((body, healthy));
            return;
        }
        self.info_file_busy = true;
        let files = self.deps.state_files.clone();
        let fut = async move {
            let result = files.replace(&path, body).await;
            (path, result)
        };
        ctx.spawn(fut.into_actor(self).map(move |(path, result), act, ctx| {
            match result {
                Ok(()) => debug!(path = %path.display(), healthy, "agent info written"),
                Err(e) => warn!(path = %path.display(), "cannot write agent info: {e}"),
            }
            act.info_file_busy = false;
            if let Some((body, healthy)) = act.info_file_next.take() {
                act.write_info_file(body, healthy, ctx);
            }
        }));
    }

    /// Starts one AntreaAgentInfo heartbeat unless the previous one is still running.
    fn start_heartbeat(&mut self, inputs: AgentInfoInputs, ctx: &mut Context<Self>) {
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        if w.agent_info_busy {
            debug!("previous AntreaAgentInfo update still running; skipping this one");
            return;
        }
        w.agent_info_busy = true;
        let api: Arc<dyn ApiClient> = w.clients.kube.clone();
        let cached = w.agent_info_cache.take();
        let fut = async move { agent_info::heartbeat(api.as_ref(), cached, &inputs).await };
        ctx.spawn(fut.into_actor(self).map(|(cache, result), act, _| {
            let Some(w) = act.k8s.as_mut() else {
                return;
            };
            w.agent_info_busy = false;
            w.agent_info_cache = cache;
            match result {
                Ok(kind) => w.agent_info.ok(
                    "AntreaAgentInfo",
                    match kind {
                        agent_info::UpdateKind::Partial => "partial",
                        agent_info::UpdateKind::Full => "full",
                    },
                ),
                Err(e) => w
                    .agent_info
                    .err("AntreaAgentInfo", StatusError::new(e.kind(), e.to_string())),
            }
        }));
    }

    /// Starts the status posts that are due (never more than four in flight); each completion
    /// pumps again, and a failure also schedules a pump for when its back-off ends.
    fn pump_statuses(&mut self, ctx: &mut Context<Self>) {
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        if !w.post_statuses {
            return;
        }
        let node_key = policy_status::node_key(&self.deps.namespace, &self.deps.node_name);
        let posts = w.statuses.due(Instant::now());
        let controller: Arc<dyn ApiClient> = w.clients.controller.clone();
        for post in posts {
            let api = controller.clone();
            let body = policy_status::status_body(
                &post.name,
                &node_key,
                post.generation,
                post.not_enforced.as_deref(),
            );
            let path = policy_status::status_path(&post.name);
            let fut = async move { api.request(Method::Post, &path, Some(&body)).await };
            ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
                act.status_posted(&post, result.map(|_| ()).map_err(|e| without_path(&e)), ctx);
            }));
        }
    }

    fn status_posted(&mut self, post: &Post, result: Result<(), StatusError>, ctx: &mut Context<Self>) {
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        let retry = w.statuses.finished(post, result.is_ok(), Instant::now());
        match result {
            Ok(()) => {
                debug!(policy = %post.name, generation = post.generation, "NetworkPolicyStatus posted");
                w.status_log.ok("NetworkPolicyStatus", "posted");
            }
            Err(e) => {
                // The error is logged once per kind, not once per policy: after a controller
                // restart every policy fails the same way.
                debug!(policy = %post.name, generation = post.generation, "NetworkPolicyStatus post failed: {}", e.message);
                w.status_log.err("NetworkPolicyStatus posts", e);
            }
        }
        if let Some(delay) = retry {
            ctx.run_later(delay, |act, ctx| act.pump_statuses(ctx));
        }
        self.pump_statuses(ctx);
    }

    fn stats_done(&mut self, result: Result<&'static str, StatusError>) {
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        w.stats_busy = false;
        match result {
            Ok(what) => w.stats.ok("NodeStatsSummary", what),
            Err(e) => w.stats.err("NodeStatsSummary", e),
        }
    }

    /// A fresh collection: baseline, nothing, or POST (the baseline advances only on success).
    fn stats_collected(&mut self, cur: Collection, ctx: &mut Context<Self>) {
        let node_name = self.deps.node_name.clone();
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        match w.baseline.step(&node_name, &cur) {
            StatsStep::Baseline => self.stats_done(Ok("baseline")),
            StatsStep::Nothing => self.stats_done(Ok("nothing to report")),
            StatsStep::Post(summary) => {
                let api: Arc<dyn ApiClient> = w.clients.controller.clone();
                let body = match serde_json::to_value(&*summary) {
                    Ok(b) => b,
                    Err(e) => {
                        return self.stats_done(Err(StatusError::new(
                            ErrorKind::KubeApi,
                            format!("cannot encode the summary: {e}"),
                        )))
                    }
                };
                let fut = async move { api.request(Method::Post, stats_summary::PATH, Some(&body)).await };
                ctx.spawn(fut.into_actor(self).map(move |result, act, _| match result {
                    Ok(_) => {
                        if let Some(w) = act.k8s.as_mut() {
                            w.baseline.reported(cur);
                        }
                        act.stats_done(Ok("posted"));
                    }
                    Err(e) => act.stats_done(Err(StatusError::new(e.kind(), e.to_string()))),
                }));
            }
        }
    }
}

/// The flow installer not answering a read of the rule counters: it does not while it
/// reconnects to the switch or is restarted, so the switch connection is what to look at.
fn no_counters(message: String) -> StatusError {
    StatusError::new(ErrorKind::OvsConnection, message)
}

/// An API error without the request path (which names the policy), so that the same failure
/// of many posts reads the same.
fn without_path(e: &ApiError) -> StatusError {
    let message = match e {
        ApiError::Status {
            code,
            reason,
            message,
            ..
        } => format!("HTTP {code} {reason}: {message}"),
        ApiError::Transport { message, .. } => message.clone(),
        ApiError::Decode { message, .. } => format!("bad response body: {message}"),
    };
    StatusError::new(e.kind(), message)
}

async fn ask(
    actor: Option<actix::Recipient<StatusQuery>>,
    kind: ActorKind,
) -> Result<ActorStatus, ActorKind> {
    let actor = actor.ok_or(kind)?;
    match tokio::time::timeout(ASK_TIMEOUT, actor.send(StatusQuery)).await {
        Ok(Ok(status)) => Ok(status),
        _ => Err(kind),
    }
}

/// Whether OVSDB answers, and the OVS version it reports.
async fn probe_ovsdb(ovsdb: Arc<dyn Ovsdb>, _bridge: String) -> OvsdbProbe {
    match tokio::time::timeout(ASK_TIMEOUT, ovsdb.ovs_version()).await {
        Ok(Ok(version)) => OvsdbProbe::Up { version },
        Ok(Err(e)) => OvsdbProbe::Down(e.to_string()),
        Err(_) => OvsdbProbe::Down(format!("no answer within {} s", ASK_TIMEOUT.as_secs())),
    }
}

impl Actor for AgentInfoReporter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // `run_interval` first fires after one interval; the heartbeat starts at once.
        ctx.notify(Report);
        ctx.run_interval(self.deps.timing.report_interval, |_, ctx| ctx.notify(Report));
        if self.k8s.as_ref().is_some_and(|w| w.collect_stats) {
            ctx.run_interval(self.deps.timing.stats_interval, |_, ctx| ctx.notify(CollectStats));
        }
    }
}

impl Handler<Report> for AgentInfoReporter {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Report, _: &mut Context<Self>) -> Self::Result {
        let p = self.outputs.status.clone();
        let ovsdb = self.deps.ovsdb.clone();
        let bridge = self.deps.bridge.clone();
        let fut = async move {
            let answers = vec![
                ask(p.watcher, ActorKind::ExternalNodeWatcher).await,
                ask(p.interfaces, ActorKind::InterfaceManager).await,
                ask(p.policy, ActorKind::PolicyCache).await,
                ask(p.flows, ActorKind::FlowInstaller).await,
            ];
            (answers, probe_ovsdb(ovsdb, bridge).await)
        }
        .instrument(tracing::info_span!("report"));
        Box::pin(fut.into_actor(self).map(|(answers, probe), act, ctx| {
            let mut actors = Vec::new();
            let mut unresponsive = Vec::new();
            for a in answers {
                match a {
                    Ok(s) => actors.push(s),
                    Err(kind) => unresponsive.push(kind),
                }
            }
            let healthy = unresponsive.is_empty() && actors.iter().all(|s| s.healthy);
            let conditions = agent_conditions::conditions(&actors, &unresponsive, &probe, Utc::now());
            let reports = act.conditions.update(&conditions);
            let inputs = AgentInfoInputs {
                node_name: act.deps.node_name.clone(),
                version: agent_info::agent_version(),
                bridge_name: act.deps.bridge.clone(),
                api_port: act.deps.api_port,
                ovs_version: match &probe {
                    OvsdbProbe::Up { version } => version.clone(),
                    OvsdbProbe::Down(_) => None,
                },
                flow_table: agent_conditions::flow_table(&actors),
                policy_info: agent_conditions::policy_info(&actors),
                conditions,
                api_ca_bundle: None,
            };
            let mut local = AntreaAgentInfo::named(&act.deps.node_name);
            local.apply_full(&inputs);
            let info = AgentInfo {
                version: crate::version::VERSION.to_string(),
                node_name: act.deps.node_name.clone(),
                namespace: act.deps.namespace.clone(),
                ovs_bridge: act.deps.bridge.clone(),
                updated_at: SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                healthy,
                actors,
                unresponsive,
                conditions: reports,
                antrea_agent_info: local,
                kubernetes: act.k8s.as_ref().map(Writers::report),
            };
            if let Some(path) = &act.deps.agent_info_path {
                match serde_json::to_vec_pretty(&info) {
                    Ok(body) => act.write_info_file(body, healthy, ctx),
                    Err(e) => warn!(path = %path.display(), "cannot write agent info: {e}"),
                }
            }
            act.last = Some(info);
            act.start_heartbeat(inputs, ctx);
        }))
    }
}

impl Handler<CollectStats> for AgentInfoReporter {
    type Result = ();

    fn handle(&mut self, _: CollectStats, ctx: &mut Context<Self>) {
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        if !w.collect_stats || w.stats_busy {
            return;
        }
        let Some(flows) = self.outputs.rule_stats.clone() else {
            w.stats.err(
                "NodeStatsSummary",
                no_counters("the flow installer is not running".into()),
            );
            return;
        };
        w.stats_busy = true;
        let fut = async move {
            match tokio::time::timeout(STATS_READ_TIMEOUT, flows.send(GetRuleStats)).await {
                Ok(Ok(Ok(snapshot))) => Ok(snapshot),
                Ok(Ok(Err(e))) => Err(StatusError::new(e.kind(), format!("reading rule counters: {e}"))),
                Ok(Err(e)) => Err(no_counters(format!("reading rule counters: {e}"))),
                Err(_) => Err(no_counters(format!(
                    "reading rule counters: no answer within {} s",
                    STATS_READ_TIMEOUT.as_secs()
                ))),
            }
        };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| match result {
            Ok(snapshot) => act.stats_collected(Collection::from_snapshot(&snapshot), ctx),
            Err(e) => act.stats_done(Err(e)),
        }));
    }
}

impl Handler<PoliciesRealized> for AgentInfoReporter {
    type Result = ();

    fn handle(&mut self, msg: PoliciesRealized, ctx: &mut Context<Self>) {
        self.policies_realized(&msg, ctx);
    }
}

impl AgentInfoReporter {
    fn policies_realized(&mut self, msg: &PoliciesRealized, ctx: &mut Context<Self>) {
        let Some(w) = self.k8s.as_mut() else {
            return;
        };
        if w.post_statuses {
            w.statuses.realized(&msg.policies, msg.sync_epoch, Instant::now());
        }
        // The flows are in: the earliest moment a counter baseline means something.
        let take_baseline = w.collect_stats && !w.baseline.has_baseline() && !w.stats_busy;
        self.pump_statuses(ctx);
        if take_baseline {
            ctx.notify(CollectStats);
        }
    }
}

impl Handler<GetAgentInfo> for AgentInfoReporter {
    type Result = actix::MessageResult<GetAgentInfo>;
    fn handle(&mut self, _: GetAgentInfo, _: &mut Context<Self>) -> Self::Result {
        let mut last = self.last.clone();
        // The write results move on between reports: give the current ones.
        if let (Some(info), Some(w)) = (last.as_mut(), self.k8s.as_ref()) {
            info.kubernetes = Some(w.report());
        }
        actix::MessageResult(last)
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
        let last_error = self.k8s.as_ref().and_then(Writers::first_error);
        let detail = ReporterStatus {
            kubernetes: self.k8s.as_ref().map(Writers::report),
            last_report: self.last.as_ref().map(|i| i.updated_at),
            mode: if self.k8s.is_some() {
                ReporterMode::Kubernetes
            } else {
                ReporterMode::Standalone
            },
        };
        actix::MessageResult(ActorStatus::new(
            last_error.is_none(),
            last_error,
            ActorDetail::AgentInfoReporter(detail),
        ))
    }
}

common_handlers!(AgentInfoReporter, ReporterOutputs);
