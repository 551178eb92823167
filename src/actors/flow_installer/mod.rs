//! The flow installer: owns the OpenFlow connection and keeps the switch's flows equal to the
//! desired set (init flows, `policyBypassRules`, one cross-connect per attached interface).
//!
//! Round protocol (Antrea's cookie layout): every connection starts a new round `R = persisted+1`.
//! The first sync on a connection waits until the interface view is known, then commits one atomic
//! bundle that removes leftovers of round R, adds every desired flow with round R (replacing
//! same-identity flows in place, so traffic never sees a gap), and deletes what still carries the
//! previous round. Only then is `R` persisted in the bridge's `external_ids:roundNum`. Later changes
//! are minimal diffs. After the connection drops (OVS restarted) it reconnects with backoff and
//! replays everything the same way.
//!
//! Drift (`drift`): a flow monitor on the connection reports flows changed by anyone else; the
//! next sync is then a take-over again (groups and meters re-asserted first), counted in
//! `antrea_vm_agent_datapath_repairs_total{kind="flows"}` when it had anything to put back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, AtomicResponse, Context, Handler, Message, WrapFuture,
};
use tracing::{debug, error, info, warn, Instrument};

use super::{common_handlers, FlowInstallerOutputs, Lifeline, Timing};
use crate::config::{AuditLogging, BypassRule};
use crate::fqdn;
use crate::memory;
use crate::messages::status_detail::FlowInstallerStatus;
use crate::messages::{
    ActorDetail, ActorStatus, AttachedInterface, ErrorKind, InterfacesChanged, RulesChanged, StatusError,
    StatusQuery, Stop,
};
use crate::ovs::openflow::{OfError, Switch, SwitchConnector};
use crate::ovs::ovsdb::Ovsdb;
use crate::ovs::vswitchd::DatapathCache;
use crate::packetin::{self, AuditLog, PacketInContext, PacketInStats};
use crate::policy::compiler::{
    CompileOptions, Compiler, ConjunctionPublisher, FlowDelta, FqdnPlacement, SharedConjunctions,
    SkippedRule, Update,
};
use crate::policy::flowset::{self, FlowSet};
use crate::policy::pipeline::{self, PipelineOptions};
use crate::policy::rule::RuleId;
use crate::retry::{Backoff, RetryPolicy};

mod drift;
mod held;
mod plan;
/// Read-only queries for the agent API (`GetFlowDump`).
pub mod query;
mod removal;
mod stats;
mod stream;
mod view;
// The metric-flow decoding is the policy crate's; the bench and tests reach it here, beside the dump.
pub use crate::policy::stats::{metric_sample, rule_stats_for, rule_stats_from_flows, MetricSample};
pub use stats::{dump_metric_flows, GetLastRealized};

/// How long a removed rule keeps its conjunction id after its flows were removed.
const CONJ_ID_GRACE: Duration = Duration::from_secs(5);

/// Bridge `external_ids` key holding the last committed round.
pub const ROUND_KEY: &str = "roundNum";

/// Internal: (re)connect to the switch.
#[derive(Message)]
#[rtype(result = "()")]
struct Connect;

/// Internal: the connection of `epoch` is gone.
#[derive(Message)]
#[rtype(result = "()")]
struct Disconnected {
    epoch: u64,
}

/// Internal: bring the switch in line with the desired flows.
#[derive(Message)]
#[rtype(result = "()")]
struct Sync;

/// Returns the flows the installer believes the switch holds (for tests and the CLI).
#[derive(Message)]
#[rtype(result = "Vec<crate::ovs::openflow::Flow>")]
pub struct GetInstalledFlows;

/// What the flows besides the NetworkPolicy flows are built from.
#[derive(PartialEq)]
struct BaseFlowsKey {
    opts: PipelineOptions,
    interfaces: Vec<AttachedInterface>,
    dns_ports: std::collections::BTreeSet<u32>,
}

/// A live connection and the round it installs with.
struct Session {
    switch: Arc<dyn Switch>,
    epoch: u64,
    round: u16,
    previous_round: Option<u16>,
    meters: bool,
    /// Set once the first full resync of this session committed.
    synced: bool,
    /// The switch's flows, dumped when the connection came up, for the first sync's take-over.
    prefetched: Option<stream::PrefetchedHeld>,
    /// Stops this connection's packet-in responder when the session ends (dropped with it): on
    /// a thread of its own the responder is not tied to this actor's lifetime, and it holds the
    /// connection open.
    _responder: Option<ResponderStop>,
}

/// What the flow installer needs from the outside world: the switch (and the packet-in
/// responder's own connections), OVSDB, ovs-vswitchd's datapath cache, the FQDN controller, the
/// metrics, the four settings it reads, and the timing.
#[derive(Clone)]
pub struct FlowInstallerDeps {
    /// `ovsBridge`: the bridge whose flows, groups and meters this actor owns.
    pub bridge: String,
    /// `auditLogging`: where and how allowed and denied connections are logged.
    pub audit_logging: AuditLogging,
    /// `packetInRate`: the packet-in meters' rate.
    pub packet_in_rate: u32,
    /// `externalNode.policyBypassRules`: traffic let through before any NetworkPolicy.
    pub policy_bypass_rules: Vec<BypassRule>,
    pub ovsdb: Arc<dyn Ovsdb>,
    pub switch: Arc<dyn SwitchConnector>,
    /// Purged after a repair.
    pub datapath: Arc<dyn DatapathCache>,
    /// Told the FQDN rule placements.
    pub fqdn: fqdn::FqdnHandle,
    pub metrics: crate::telemetry::AgentMetrics,
    /// The packet-in responder's own connections (see `Deps::packet_ins`); `None`: the responder
    /// serves this actor's connection, on its thread.
    pub packet_ins: Option<Arc<dyn SwitchConnector>>,
    pub timing: Timing,
}

pub struct FlowInstaller {
    deps: FlowInstallerDeps,
    outputs: FlowInstallerOutputs,
    session: Option<Session>,
    next_epoch: u64,
    /// `None` until the interface manager's first view arrives.
    interfaces: Option<Vec<AttachedInterface>>,
    /// The policy cache's rules (`None` until its first view arrives), and what changed since
    /// the compiler last moved to them.
    view: view::RuleView,
    /// The interface ports the rules were resolved against ([`RulesChanged::interface_ofports`]).
    rules_ofports: Vec<(u32, u32)>,
    /// Since when the rules name other ports than the interface view (and whether that was
    /// logged): the policy cache normally catches up within milliseconds.
    ports_differ_since: Option<(std::time::Instant, bool)>,
    /// Keeps conjunction ids and rule priorities stable from one compilation to the next, and
    /// knows the NetworkPolicy flows: a rule change is compiled into a delta of flow_mods.
    compiler: Compiler,
    /// Publishes the compiler's conjunctions to the packet-in responder without copying them all.
    publisher: ConjunctionPublisher,
    /// The switch's NetworkPolicy flows may differ from the compiler's (a bundle failed after
    /// the compiler moved on, or the compiler started over): the next sync takes over again.
    policy_resync: bool,
    /// What the packet-in responder needs (conjunction → rule, local interfaces), published on
    /// every change so the responder of the current connection always sees the latest.
    conjunctions_tx: watch::Sender<SharedConjunctions>,
    /// Set once a sync committed since the agent started: before it, the flows on the bridge
    /// (left by the previous agent, or being taken over) have no conjunctions in
    /// `conjunctions_tx`, so `trace` could not name their rules.
    synced_once: bool,
    interfaces_tx: watch::Sender<Arc<Vec<AttachedInterface>>>,
    /// The NetworkPolicy audit log (`np.log`); `None` if it cannot be opened.
    audit: Option<AuditLog>,
    packet_in_stats: Arc<PacketInStats>,
    /// Removed rules hold their conjunction ids until a grace period after the flows are gone.
    reclaim_pending: bool,
    /// When the oldest rule change not yet committed arrived (for the realization latency).
    rules_changed_at: Option<std::time::Instant>,
    /// The policies of the rule view and the last realization notice (see `stats`).
    realization: stats::Realization,
    /// The flows installed besides the NetworkPolicy flows (those are the compiler's, see
    /// [`FlowInstaller::installed_flows`]): init flows, bypass rules, cross-connects.
    installed: Arc<FlowSet>,
    /// The desired flows besides the NetworkPolicy flows, and what they were built from: built
    /// again only when that changes, so a rule change neither rebuilds nor diffs them.
    base_flows: Option<(BaseFlowsKey, Arc<FlowSet>)>,
    /// The switch's flows may have drifted (what was seen): the next sync takes over and repairs.
    pending_audit: Option<drift::Found>,
    /// The FQDN rule placements the switch's rule flows match (committed), to tell which rules
    /// a bundle adds or moves: those carry the address flows of their cached names.
    fqdn_committed: Vec<FqdnPlacement>,
    /// Accepted rules the compiler could not place, and why (logged when they change).
    not_installed: BTreeMap<RuleId, String>,
    /// The delays between attempts to reconnect to the switch; reset once connected.
    reconnect: Backoff,
    connecting: bool,
    last_error: Option<StatusError>,
    /// The thread packet-ins are answered on (Reject replies, audit writes), so they never wait
    /// behind a compile or a bundle; `None`: this actor's own thread.
    packet_in_thread: Option<actix::ArbiterHandle>,
    /// Stops the responder of [`FlowInstallerDeps::packet_ins`] (its own connections) with this actor.
    responder_stop: Option<ResponderStop>,
    _lifeline: Lifeline,
}

impl FlowInstaller {
    pub fn new(deps: FlowInstallerDeps, outputs: FlowInstallerOutputs, lifeline: Lifeline) -> Self {
        let reconnect = RetryPolicy::new(deps.timing.reconnect_min, deps.timing.reconnect_max).backoff();
        let logging = &deps.audit_logging;
        let audit = match AuditLog::open(&logging.log_dir, logging) {
            Ok(log) => Some(log),
            Err(e) => {
                warn!("NetworkPolicy audit logging is off: {e}");
                None
            }
        };
        FlowInstaller {
            deps,
            outputs,
            session: None,
            next_epoch: 1,
            interfaces: None,
            view: view::RuleView::default(),
            rules_ofports: Vec::new(),
            ports_differ_since: None,
            compiler: Compiler::new(CompileOptions::default()),
            publisher: ConjunctionPublisher::new(),
            policy_resync: false,
            conjunctions_tx: watch::channel(Arc::new(BTreeMap::new())).0,
            synced_once: false,
            interfaces_tx: watch::channel(Arc::new(Vec::new())).0,
            audit,
            packet_in_stats: PacketInStats::new(),
            reclaim_pending: false,
            rules_changed_at: None,
            realization: Default::default(),
            installed: Arc::default(),
            base_flows: None,
            pending_audit: None,
            fqdn_committed: Vec::new(),
            not_installed: BTreeMap::new(),
            reconnect,
            connecting: false,
            last_error: None,
            packet_in_thread: None,
            responder_stop: None,
            _lifeline: lifeline,
        }
    }

    /// What the packet-in responder needs, following this actor's rules and interfaces.
    fn packet_in_context(&self) -> PacketInContext {
        PacketInContext {
            rules: self.conjunctions_tx.subscribe(),
            interfaces: self.interfaces_tx.subscribe(),
            audit: self.audit.clone(),
            packet_in_rate: self.deps.packet_in_rate,
            stats: self.packet_in_stats.clone(),
        }
    }

    /// Runs a responder on the packet-in thread (stopped when the returned handle is dropped or
    /// finished), or on this actor's own thread (stopped with it) when there is none.
    fn spawn_responder(
        &mut self,
        serve: impl std::future::Future<Output = ()> + Send + 'static,
        ctx: &mut Context<Self>,
    ) -> Option<ResponderStop> {
        match &self.packet_in_thread {
            Some(thread) => {
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let (flushed, done) = std::sync::mpsc::channel::<()>();
                let audit = self.audit.clone();
                thread.spawn(async move {
                    tokio::select! {
                        () = serve => {}
                        _ = stopped => {}
                    }
                    // The lines the responder was still collecting (their window cut short),
                    // once `serve` is gone, so none is added after this.
                    if let Some(audit) = audit {
                        if let Err(e) = audit.flush_all() {
                            warn!("cannot write the NetworkPolicy audit log: {e}");
                        }
                    }
                    let _ = flushed.send(());
                });
                Some(ResponderStop { stop, done })
            }
            None => {
                ctx.spawn(serve.into_actor(self));
                None
            }
        }
    }

    /// Stops the packet-in responder of [`FlowInstallerDeps::packet_ins`] and writes the audit lines still in
    /// their deduplication window (cut short): a stopping installer loses none. The responder
    /// serving the installer's own connection is a future of this actor: its lines are written
    /// here, and it ends with the actor.
    fn finish_packet_ins(&mut self) {
        if let Some(responder) = self.responder_stop.take() {
            responder.finish();
        }
        if let Some(audit) = &self.audit {
            if let Err(e) = audit.flush_all() {
                warn!("cannot write the NetworkPolicy audit log: {e}");
            }
        }
    }

    /// Answers packet-ins on `thread` instead of this actor's own.
    pub fn with_packet_in_thread(mut self, thread: actix::ArbiterHandle) -> Self {
        self.packet_in_thread = Some(thread);
        self
    }

    fn schedule_reconnect(&mut self, ctx: &mut Context<Self>) {
        let delay = self.reconnect.next_delay();
        ctx.run_later(delay, |_, ctx| ctx.notify(Connect));
    }

    fn fail(&mut self, kind: ErrorKind, what: &str, e: impl std::fmt::Display) {
        let msg = format!("{what}: {e}");
        if self.last_error.as_ref().map(|e| e.message.as_str()) != Some(msg.as_str()) {
            error!("{msg}");
        }
        self.last_error = Some(StatusError::new(kind, msg));
    }

    /// Everything the switch should hold besides the NetworkPolicy flows, and how the
    /// NetworkPolicy flows change (the compiler moves to the current rule view); `None` while
    /// the interfaces or the rules are unknown (the switch then keeps what it has: fail closed,
    /// no gap).
    ///
    /// With `want_delta`, the NetworkPolicy change comes as a [`FlowDelta`] (built when sent);
    /// without, the caller takes over all flows from [`Compiler::plan`].
    fn desired(
        &mut self,
        round: u16,
        meters: bool,
        want_delta: bool,
    ) -> Option<(Arc<FlowSet>, Update, FlowDelta)> {
        let (Some(interfaces), Some(rules)) = (self.interfaces.as_ref(), self.view.rules()) else {
            return None;
        };
        let ports = crate::messages::interfaces::ofports(interfaces);
        if ports != self.rules_ofports {
            // The rules still name other ports (the policy cache has not caught up with a
            // re-created port yet): installing the new port's pipeline now would let its
            // traffic past rules that name its old number.
            let (since, warned) = self
                .ports_differ_since
                .get_or_insert_with(|| (std::time::Instant::now(), false));
            if !*warned && since.elapsed() > std::time::Duration::from_secs(5) {
                *warned = true;
                warn!(
                    interfaces = ?ports,
                    rules = ?self.rules_ofports,
                    "the NetworkPolicy rules still name other interface ports than the attached \
                     interfaces; flows stay as they are until they match"
                );
            }
            return None;
        }
        self.ports_differ_since = None;
        let key = BaseFlowsKey {
            opts: PipelineOptions { round, meters },
            interfaces: interfaces.clone(),
            dns_ports: self.view.dns_ports(),
        };
        let flows = match &self.base_flows {
            Some((built_from, flows)) if *built_from == key => Arc::clone(flows),
            _ => {
                let flows = Arc::new(flowset::desired_flows(
                    key.opts,
                    &self.deps.policy_bypass_rules,
                    &key.interfaces,
                    &key.dns_ports,
                ));
                self.base_flows = Some((key, Arc::clone(&flows)));
                flows
            }
        };
        let (update, delta) =
            self.compiler
                .update_delta_or_rebuild(rules, self.view.changed_ids(), round, want_delta);
        self.view.applied();
        self.report_not_installed(&update.skipped);
        // Rules removed a moment ago stay known, so their late packet-ins still name them.
        self.conjunctions_tx
            .send_replace(self.publisher.publish(&mut self.compiler));
        self.reclaim_pending |= update.released_any;
        Some((flows, update, delta))
    }

    /// Logs the rules that became uninstallable (once each, not per sync) and those that are
    /// installed again, and keeps the `antrea_vm_agent_rules_not_installed` gauge.
    fn report_not_installed(&mut self, skipped: &[SkippedRule]) {
        // Every reason counts (no priority left, a duplicate rule id, a K8s NetworkPolicy rule):
        // each leaves a rule without flows.
        let now: BTreeMap<RuleId, String> = skipped
            .iter()
            .map(|s| (s.id.clone(), s.reason.to_string()))
            .collect();
        let new: Vec<_> = now
            .iter()
            .filter(|(id, _)| !self.not_installed.contains_key(*id))
            .collect();
        if !new.is_empty() {
            let shown: Vec<String> = new
                .iter()
                .take(5)
                .map(|(id, why)| format!("{}/{:?}[{}]: {why}", id.policy_uid, id.direction, id.index))
                .collect();
            warn!(
                count = new.len(),
                total = now.len(),
                first = ?shown,
                "NetworkPolicy rules not installed (they have no flows)"
            );
        }
        let back = self
            .not_installed
            .keys()
            .filter(|id| !now.contains_key(*id))
            .count();
        if back > 0 {
            info!(count = back, "NetworkPolicy rules installed again or gone");
        }
        self.deps.metrics.rules_not_installed.set(now.len() as i64);
        self.not_installed = now;
    }

    /// Every flow the installer believes the switch holds (NetworkPolicy flows once synced).
    fn installed_flows(&mut self) -> Vec<crate::ovs::openflow::Flow> {
        let mut flows: Vec<crate::ovs::openflow::Flow> = self.installed.values().cloned().collect();
        if let Some(s) = self.session.as_ref().filter(|s| s.synced && !self.policy_resync) {
            flows.extend(self.compiler.flows(s.round).into_values());
        }
        flows
    }

    /// [`FlowInstaller::installed_flows`], the NetworkPolicy flows limited to the groups holding
    /// a rule of `conj_ids` (built group by group; the other groups are never built).
    fn installed_flows_of(
        &self,
        conj_ids: &std::collections::BTreeSet<u32>,
    ) -> Vec<crate::ovs::openflow::Flow> {
        let mut flows: Vec<crate::ovs::openflow::Flow> = self.installed.values().cloned().collect();
        if let Some(s) = self.session.as_ref().filter(|s| s.synced && !self.policy_resync) {
            let mut plan = self.compiler.plan(s.round);
            plan.retain_groups_with(conj_ids);
            flows.extend(plan.into_chunks(crate::policy::compiler::CHUNK_RULES).flatten());
        }
        flows
    }

    fn flows_per_table(&self) -> BTreeMap<String, usize> {
        let names: BTreeMap<u8, &str> = pipeline::tables().into_iter().map(|t| (t.id, t.name)).collect();
        let mut counts = BTreeMap::new();
        let policy = self
            .session
            .as_ref()
            .filter(|s| s.synced)
            .map(|_| self.compiler.flow_counts().iter().map(|(t, n)| (*t, *n)))
            .into_iter()
            .flatten();
        let base = self.installed.keys().map(|k| (k.table, 1));
        for (table, n) in base.chain(policy) {
            let name = names
                .get(&table)
                .map_or_else(|| table.to_string(), |n| n.to_string());
            *counts.entry(name).or_insert(0) += n;
        }
        counts
    }
}

/// Reads the persisted round and derives the new one (wrapping at 2^16 like Antrea).
fn next_round(persisted: Option<&str>) -> (u16, Option<u16>) {
    match persisted.and_then(|s| s.trim().parse::<u32>().ok()) {
        Some(prev) => {
            let prev = (prev % 65536) as u16;
            // Round 0 marks flows that are not the agent's (take-over and stats skip them), so
            // the round wraps from 65535 to 1.
            // A persisted 0 names no round of ours: deleting "round 0" would take every
            // foreign flow (the FQDN controller's among them) with it.
            (prev.checked_add(1).unwrap_or(1), (prev != 0).then_some(prev))
        }
        None => (1, None),
    }
}

/// How long a stopping flow installer waits for its responder's last audit lines.
const RESPONDER_STOP_WAIT: Duration = Duration::from_millis(500);

/// A responder running on the packet-in thread: it stops when this is dropped or finished.
struct ResponderStop {
    stop: tokio::sync::oneshot::Sender<()>,
    /// Told once the responder has stopped and written its collected audit lines.
    done: std::sync::mpsc::Receiver<()>,
}

impl ResponderStop {
    /// Tells the responder to stop and waits (on this thread, at most [`RESPONDER_STOP_WAIT`],
    /// at a stop only) until it has written the audit lines it was collecting.
    fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.done.recv_timeout(RESPONDER_STOP_WAIT);
    }
}

impl Actor for FlowInstaller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(connector) = self.deps.packet_ins.clone() {
            // The responder's own connection lives as long as this actor.
            let serve = packetin::serve_own_connection(
                connector,
                self.packet_in_context(),
                RetryPolicy::new(
                    self.deps.timing.reconnect_min.min(Duration::from_millis(100)),
                    self.deps.timing.reconnect_max.min(Duration::from_secs(1)),
                ),
            );
            self.responder_stop = self.spawn_responder(serve, ctx);
        }
        ctx.notify(Connect);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Stopped after an error: the responder and its collected lines end here too.
        self.finish_packet_ins();
    }
}

impl Handler<Connect> for FlowInstaller {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Connect, _: &mut Context<Self>) -> Self::Result {
        if self.session.is_some() || self.connecting {
            return AtomicResponse::new(Box::pin(actix::fut::ready(())));
        }
        self.connecting = true;
        let deps = self.deps.clone();
        let fut = async move {
            let switch = deps
                .switch
                .connect()
                .await
                .map_err(|e| (e.kind(), "cannot connect to OpenFlow switch", e.to_string()))?;
            let bridge = &deps.bridge;
            let persisted = deps
                .ovsdb
                .bridge_external_id(bridge, ROUND_KEY)
                .await
                .map_err(|e| {
                    (
                        ErrorKind::Ovsdb,
                        "cannot read the round number from OVSDB",
                        e.to_string(),
                    )
                })?;
            let (round, previous_round) = next_round(persisted.as_deref());
            switch
                .replace_groups(pipeline::network_policy_groups())
                .await
                .map_err(|e| (e.kind(), "cannot install NetworkPolicy groups", e.to_string()))?;
            let meters = match switch
                .replace_meters(pipeline::packet_in_meters(deps.packet_in_rate))
                .await
            {
                Ok(()) => true,
                Err(OfError::Closed) => {
                    return Err((
                        ErrorKind::OvsConnection,
                        "OpenFlow connection closed",
                        "while adding meters".into(),
                    ))
                }
                Err(e) => {
                    warn!("OVS meters unavailable, packet-in will not be rate-limited by OVS: {e}");
                    false
                }
            };
            // Registered before the session starts, so the early dump below and the drift
            // watch see the same switch: whatever changes after the dump gets reported.
            let monitor = switch.monitor_flows().await;
            if matches!(monitor, Err(OfError::Closed)) {
                return Err((
                    ErrorKind::OvsConnection,
                    "OpenFlow connection closed",
                    "while registering the flow monitor".into(),
                ));
            }
            Ok::<_, (ErrorKind, &'static str, String)>((switch, round, previous_round, meters, monitor))
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(|res, act, ctx| {
            act.connecting = false;
            match res {
                Ok((switch, round, previous_round, meters, monitor)) => {
                    let epoch = act.next_epoch;
                    act.next_epoch += 1;
                    info!(round, ?previous_round, meters, "connected to OpenFlow switch");
                    // Without a connection of its own, the responder serves this one (Reject,
                    // audit log) and ends with it.
                    let stop_responder = if act.deps.packet_ins.is_none() {
                        let packet_ins = switch.subscribe();
                        let serve = packetin::serve(packet_ins, switch.clone(), act.packet_in_context());
                        act.spawn_responder(serve, ctx)
                    } else {
                        None
                    };
                    let audit_every = act.deps.timing.flow_audit;
                    // Without a flow monitor nothing would report a change after the early
                    // dump: the first take-over then dumps the switch itself, as before.
                    let prefetched = monitor.is_ok().then(|| stream::prefetch_held(switch.clone()));
                    ctx.spawn(
                        drift::watch(switch.clone(), epoch, ctx.address(), audit_every, monitor)
                            .into_actor(act),
                    );
                    let closing = switch.clone();
                    ctx.spawn(
                        async move { closing.closed().await }
                            .into_actor(act)
                            .map(move |_, _, ctx| {
                                ctx.notify(Disconnected { epoch });
                            }),
                    );
                    act.session = Some(Session {
                        switch,
                        epoch,
                        round,
                        previous_round,
                        meters,
                        synced: false,
                        prefetched,
                        _responder: stop_responder,
                    });
                    act.installed = Arc::default();
                    act.pending_audit = None;
                    act.reconnect.reset();
                    act.last_error = None;
                    ctx.notify(Sync);
                }
                Err((kind, what, e)) => {
                    act.fail(kind, what, e);
                    act.schedule_reconnect(ctx);
                }
            }
        })))
    }
}

impl Handler<Disconnected> for FlowInstaller {
    type Result = ();

    fn handle(&mut self, msg: Disconnected, ctx: &mut Context<Self>) {
        if self.session.as_ref().is_some_and(|s| s.epoch == msg.epoch) {
            warn!("OpenFlow connection lost; reconnecting");
            self.session = None;
            self.installed = Arc::default();
            self.schedule_reconnect(ctx);
        }
    }
}

impl Handler<Sync> for FlowInstaller {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Sync, _: &mut Context<Self>) -> Self::Result {
        let noop = || AtomicResponse::new(Box::pin(actix::fut::ready(())));
        let Some((round, meters)) = self.session.as_ref().map(|s| (s.round, s.meters)) else {
            return noop();
        };
        let state = plan::SyncState {
            synced: self.session.as_ref().is_some_and(|s| s.synced),
            policy_resync: self.policy_resync,
            drift_pending: self.pending_audit.is_some(),
        };
        let first = !state.synced;
        let planning = std::time::Instant::now();
        // A take-over needs no delta.
        let Some((desired, update, delta)) = self.desired(round, meters, !state.takes_over()) else {
            debug!("waiting for the interface and rule views before syncing");
            return noop();
        };
        // Where a large realization's time goes: this plan (the rules' compile, plus the base
        // flows when they changed and the conjunction map's publication), then the bundle
        // ("flows committed" carries the whole latency).
        debug!(
            plan_ms = format_args!("{:.1}", planning.elapsed().as_secs_f64() * 1e3),
            full = update.full,
            "sync planned"
        );
        let audit = self.pending_audit.take();
        let mode = state.mode(update.full);
        let take_over_all = matches!(mode, plan::Mode::TakeOver { .. });
        let prefetched = self.session.as_mut().and_then(|s| s.prefetched.take());
        let prefetched = prefetched.filter(|_| mode == plan::Mode::TakeOver { use_prefetched: true });
        let Some(session) = &self.session else {
            return noop();
        };
        // A rule with FQDN peers that this bundle adds or moves carries the address flows of
        // the names already cached (a snapshot of the FQDN cache), so it never exists without
        // them: a Drop-to-FQDN rule drops its cached addresses from its first packet. The FQDN
        // controller then re-reads the switch and takes over from there.
        let placements = self.compiler.fqdn_placements();
        let fqdn_mods = if placements.is_empty() {
            Vec::new()
        } else {
            let committed: &[FqdnPlacement] = if take_over_all { &[] } else { &self.fqdn_committed };
            fqdn::flows::flows_for_new_placements(committed, &placements, &self.deps.fqdn.cache_snapshot())
        };
        let wrote_fqdn_flows = !fqdn_mods.is_empty();
        let outgoing = if take_over_all {
            drop(delta);
            stream::Outgoing::TakeOver {
                base: (*desired).clone(),
                plan: self.compiler.plan(round),
                round,
                previous: session.previous_round,
                extra: fqdn_mods,
                prefetched,
            }
        } else {
            let base = if Arc::ptr_eq(&self.installed, &desired) {
                Vec::new()
            } else {
                flowset::diff(&self.installed, &desired)
            };
            let change = plan::Change {
                base_empty: base.is_empty(),
                delta_empty: delta.is_empty(),
                fqdn_empty: fqdn_mods.is_empty(),
            };
            if change.is_nothing() {
                // A rule change that needs no flow change is realized already.
                self.rules_changed_at = None;
                self.fqdn_committed = placements.clone();
                self.deps.fqdn.publish_placements(placements);
                let view = self.realization.current();
                self.notify_realized(view);
                return noop();
            }
            stream::Outgoing::Change {
                base,
                delta,
                extra: fqdn_mods,
            }
        };
        // From here until a commit, what the switch holds is not known to match the compiler.
        self.policy_resync = true;
        // Before the first byte leaves: a DNS answer arriving while the bundle is in flight,
        // or just after its commit, gets address flows for the rules it adds.
        self.deps.fqdn.publish_pending(&placements);
        let view = self.realization.current();
        let switch = session.switch.clone();
        let epoch = session.epoch;
        let round = session.round;
        let ovsdb = self.deps.ovsdb.clone();
        let bridge = self.deps.bridge.clone();
        let changed_at = self.rules_changed_at.take();
        let metrics = self.deps.metrics.clone();
        let repair = audit.clone().map(|found| {
            let groups = pipeline::network_policy_groups();
            let meters = meters.then(|| pipeline::packet_in_meters(self.deps.packet_in_rate));
            (found, groups, meters)
        });
        let fut = async move {
            if let Some((_, groups, meters)) = repair {
                // Flows that use a group or meter cannot go back before it does (and OVS deleted
                // them along with it); both are modified in place when present.
                switch.replace_groups(groups).await?;
                if let Some(meters) = meters {
                    switch.replace_meters(meters).await?;
                }
            }
            let (count, tally) = outgoing.send(switch.as_ref(), &metrics).await?;
            if first {
                if let Err(e) = ovsdb
                    .set_bridge_external_id(&bridge, ROUND_KEY, &round.to_string())
                    .await
                {
                    warn!("flows committed but the round number could not be saved in OVSDB: {e}");
                }
            }
            Ok::<_, OfError>((count, tally))
        }
        .instrument(tracing::info_span!("sync", round, take_over = take_over_all));
        let repaired = audit.is_some();
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            let current = act.session.as_ref().is_some_and(|s| s.epoch == epoch);
            let next = plan::after_bundle(res, repaired, wrote_fqdn_flows, current);
            let sent = Sent {
                desired,
                placements,
                view,
                audit,
                changed_at,
                wrote_fqdn_flows,
                first,
                round,
            };
            act.after_bundle(next, sent, ctx);
        })))
    }
}

/// What a sync's bundle was sent with, kept for when its result arrives.
struct Sent {
    /// The base flows the bundle installs.
    desired: Arc<FlowSet>,
    /// The FQDN rule placements the bundle's flows match.
    placements: Vec<FqdnPlacement>,
    /// The rule view it realizes.
    view: Option<crate::messages::PoliciesRealized>,
    /// The drift it repairs.
    audit: Option<drift::Found>,
    /// When the oldest rule change it carries arrived.
    changed_at: Option<std::time::Instant>,
    /// It carried FQDN address flows.
    wrote_fqdn_flows: bool,
    first: bool,
    round: u16,
}

impl FlowInstaller {
    /// Acts on what the planner decided after a bundle (see [`plan::after_bundle`]).
    fn after_bundle(&mut self, next: plan::AfterBundle<stream::Tally>, sent: Sent, ctx: &mut Context<Self>) {
        let Sent {
            desired,
            placements,
            view,
            audit,
            changed_at,
            wrote_fqdn_flows,
            first,
            round,
        } = sent;
        if next.fqdn_repaired {
            // The FQDN controller's flows (round 0) are not ours to repair: it re-reads them.
            self.deps.fqdn.switch_repaired();
        }
        if next.keep_pending {
            // Not realized: the retry's realization latency still counts from the change.
            self.rules_changed_at = changed_at.or(self.rules_changed_at);
            self.pending_audit = audit.clone().or(self.pending_audit.take());
        }
        let Some(outcome) = next.session else {
            return;
        };
        match outcome {
            plan::Outcome::Committed {
                flow_mods: count,
                tally,
                purge_datapath,
                release_memory,
            } => {
                match tally {
                    stream::Tally::Changes(changes) => self.compiler.adjust_flow_counts(&changes),
                    stream::Tally::All(counts) => self.compiler.set_flow_counts(counts),
                }
                // Realization latency: from the rule change's arrival to the bundle's commit.
                let realization_ms = changed_at.map(|t| t.elapsed().as_secs_f64() * 1000.0);
                info!(
                    flow_mods = count,
                    full = first,
                    round,
                    ?realization_ms,
                    "flows committed"
                );
                if let Some(session) = self.session.as_mut() {
                    session.synced = true;
                }
                self.synced_once = true;
                if let Some(found) = &audit {
                    drift::report_repair(&self.deps.metrics, found, count);
                }
                if purge_datapath {
                    let datapath = self.deps.datapath.clone();
                    // Twice: an upcall translated against the empty tables may still install
                    // its drop megaflow just after the first purge.
                    let purges = async move {
                        drift::purge_datapath_cache(&*datapath).await;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        drift::purge_datapath_cache(&*datapath).await;
                    };
                    ctx.spawn(purges.into_actor(self));
                }
                if release_memory {
                    // The flow_mods and the encoded bundle are freed by now: give the pages
                    // back, or the sync's peak stays resident.
                    let released = memory::release_free_memory();
                    debug!(released, "returned freed memory after a large bundle");
                }
                if let Some(ms) = realization_ms {
                    stats::observe_realization(&self.deps.metrics, ms);
                }
                // The FQDN controller takes over the address flows of the rules as placed now
                // (and re-reads the switch when this bundle wrote address flows itself).
                self.fqdn_committed = placements.clone();
                if wrote_fqdn_flows {
                    self.deps.fqdn.publish_placements_after_flows(placements);
                } else {
                    self.deps.fqdn.publish_placements(placements);
                }
                self.notify_realized(view);
                self.installed = desired;
                self.policy_resync = false;
                self.last_error = None;
                if std::mem::take(&mut self.reclaim_pending) {
                    // Packet-ins of removed rules may still be in flight: free their ids later.
                    ctx.run_later(CONJ_ID_GRACE, |act, _| act.compiler.reclaim_released_ids());
                }
            }
            plan::Outcome::ConnectionLost { fqdn_maybe_written } => {
                if fqdn_maybe_written {
                    self.deps.fqdn.installer_flows_maybe_written();
                }
                self.fail(
                    ErrorKind::OvsConnection,
                    "OpenFlow connection failed during a bundle",
                    "closed",
                );
                self.session = None;
                self.installed = Arc::default();
                self.schedule_reconnect(ctx);
            }
            plan::Outcome::Unknown {
                error,
                fqdn_maybe_written,
            } => {
                if fqdn_maybe_written {
                    self.deps.fqdn.installer_flows_maybe_written();
                }
                self.fail(
                    error.kind(),
                    "flow bundle timed out; outcome unknown, taking over again",
                    error,
                );
                ctx.run_later(self.deps.timing.reconnect_max, |_, ctx| ctx.notify(Sync));
            }
            plan::Outcome::Rejected { error } => {
                self.fail(
                    error.kind(),
                    "switch rejected the flow bundle; nothing was changed, retrying",
                    error,
                );
                // (A closed connection or a timed-out commit leaves the outcome unknown:
                // the pending placements stay until the take-over that follows.)
                self.deps.fqdn.withdraw_pending();
                ctx.run_later(self.deps.timing.reconnect_max, |_, ctx| ctx.notify(Sync));
            }
        }
    }
}

impl Handler<drift::Audit> for FlowInstaller {
    type Result = ();

    fn handle(&mut self, msg: drift::Audit, ctx: &mut Context<Self>) {
        // Before the first sync of a connection there is nothing to audit: that sync takes
        // over, from a fresh dump (the switch changed since the early one). A change reported
        // only once that sync is under way (the watch is a future of this context, polled
        // when the sync's wait ends) arrives after it with `synced` set, and is repaired then.
        if let Some(s) = self
            .session
            .as_mut()
            .filter(|s| s.epoch == msg.epoch && !s.synced)
        {
            if s.prefetched.take().is_some() {
                debug!(found = %msg.found.what, "the switch changed after its early dump; the take-over dumps it again");
            }
        }
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.epoch == msg.epoch && s.synced)
        {
            debug!(found = %msg.found.what, "the switch's flows may have drifted; auditing them");
            self.pending_audit = Some(msg.found);
            ctx.notify(Sync);
        }
    }
}

impl Handler<InterfacesChanged> for FlowInstaller {
    type Result = ();

    fn handle(&mut self, msg: InterfacesChanged, ctx: &mut Context<Self>) {
        if self.interfaces.as_ref() != Some(&msg.interfaces) {
            debug!(interfaces = msg.interfaces.len(), "interface view changed");
            self.interfaces_tx.send_replace(Arc::new(msg.interfaces.clone()));
            self.interfaces = Some(msg.interfaces);
        }
        if self.session.is_none() && !self.connecting {
            // The interface manager may just have re-created the bridge: try now rather than
            // after the backoff.
            self.reconnect.reset();
            ctx.notify(Connect);
        }
        ctx.notify(Sync);
    }
}

impl Handler<RulesChanged> for FlowInstaller {
    type Result = ();

    fn handle(&mut self, msg: RulesChanged, ctx: &mut Context<Self>) {
        self.realization.set_view(msg.policies, msg.sync_epoch);
        self.rules_ofports = msg.interface_ofports;
        let count = msg.rules.len();
        if self.view.set(msg.rules, msg.changes) {
            debug!(rules = count, "rule view changed");
            self.rules_changed_at.get_or_insert_with(std::time::Instant::now);
        }
        ctx.notify(Sync);
    }
}

impl Handler<GetInstalledFlows> for FlowInstaller {
    type Result = actix::MessageResult<GetInstalledFlows>;
    fn handle(&mut self, _: GetInstalledFlows, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(self.installed_flows())
    }
}

impl Handler<crate::messages::Resync> for FlowInstaller {
    type Result = ();
    fn handle(&mut self, _: crate::messages::Resync, _: &mut Context<Self>) {
        // Downstream of the switch is only the reporter: tell it again what is realized.
        self.resend_realized();
    }
}

impl Handler<StatusQuery> for FlowInstaller {
    type Result = actix::MessageResult<StatusQuery>;
    fn handle(&mut self, _: StatusQuery, _: &mut Context<Self>) -> Self::Result {
        let session = self.session.as_ref();
        let synced = session.is_some_and(|s| s.synced);
        let detail = FlowInstallerStatus {
            connected: session.is_some(),
            flow_count: self.installed.len(),
            flows_per_table: self.flows_per_table(),
            fqdn: self.deps.fqdn.stats.snapshot(),
            meters: session.map(|s| s.meters),
            packet_ins: self.packet_in_stats.snapshot(),
            round: session.map(|s| s.round),
            synced,
        };
        actix::MessageResult(ActorStatus::new(
            synced && self.last_error.is_none(),
            self.last_error.clone(),
            ActorDetail::FlowInstaller(detail),
        ))
    }
}

common_handlers!(FlowInstaller, FlowInstallerOutputs, own_stop);

impl Handler<Stop> for FlowInstaller {
    type Result = ();

    /// Answers only after the audit lines still collecting are written, so an agent stopping
    /// right after a Reject or Drop still logs it (the supervisor's shutdown waits for this).
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        self.finish_packet_ins();
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::next_round;

    #[test]
    fn rounds_start_at_one_and_wrap() {
        assert_eq!(next_round(None), (1, None));
        assert_eq!(next_round(Some("garbage")), (1, None));
        assert_eq!(next_round(Some("7")), (8, Some(7)));
        // A persisted 0 (or 65536) names no round of ours: nothing to delete by round.
        assert_eq!(next_round(Some("0")), (1, None));
        assert_eq!(next_round(Some("65536")), (1, None));
        assert_eq!(next_round(Some("65535")), (1, Some(65535)));
    }
}
