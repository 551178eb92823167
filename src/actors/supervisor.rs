//! The supervisor: starts the five actors in dependency order (flow installer, policy cache,
//! interface manager, ExternalNode watcher, reporter), restarts any that dies — after an error
//! stop or a panic — with exponential backoff, re-wires every actor to the new addresses, and asks
//! all actors to resend their facts so the restarted one converges. It knows the actors through
//! one table, [`CHILDREN`]: per actor, how to start it, reach it, restart it and stop it.
//!
//! Threads: the flow installer runs on a thread (actix arbiter) of its own, and the packet-ins
//! of its connection (Reject replies, audit writes) are answered on another, so a full compile
//! or a large bundle stalls neither the other actors (health, status) nor a Reject reply. The
//! other four actors share the system thread. The layout is decided once, by whoever builds the
//! [`Deps`]: with [`Deps::packet_ins`] (the responder's own connection, as `main` builds them)
//! the two threads exist; without it (the in-process test worlds) everything shares one thread
//! and one connection.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorContext, Addr, Arbiter, AsyncContext, Context, Handler, Message, Recipient, ResponseFuture,
};
use serde::Serialize;
use tracing::{error, info, warn};

use super::{
    AgentInfoReporter, ChildExited, ExternalNodeWatcher, FlowInstaller, FlowInstallerDeps, InterfaceManager,
    InterfaceManagerDeps, Lifeline, Peers, PolicyCache, PolicyCacheDeps, ReporterDeps, SetOutputs,
    WatcherDeps,
};
use crate::config::Config;
use crate::host::files::StateFiles;
use crate::host::HostNet;
use crate::messages::{ActorKind, Resync, Stop};
use crate::ovs::openflow::SwitchConnector;
use crate::ovs::ovsdb::Ovsdb;
use crate::ovs::vswitchd::DatapathCache;
use crate::retry::RetryPolicy;
use crate::sources::ExternalNodeSource;

/// Intervals and backoffs. Production values come from [`Timing::default`]; tests shrink them.
#[derive(Clone, Debug)]
pub struct Timing {
    /// First restart delay after an actor dies; doubles per consecutive death up to
    /// `restart_backoff_max`, each delay jittered (`crate::retry`).
    pub restart_backoff_min: Duration,
    pub restart_backoff_max: Duration,
    /// An actor that stayed up this long has its backoff reset.
    pub restart_backoff_reset: Duration,
    /// How often the interface manager re-checks OVSDB and the kernel against its records.
    pub interface_reconcile: Duration,
    /// First and maximum base delay between reconnect attempts to OVS (jittered,
    /// `crate::retry`).
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// How long to wait for an ofport or a netdev to appear or disappear.
    pub port_wait: Duration,
    /// How often the reporter refreshes the agent info.
    pub report_interval: Duration,
    /// How often the reporter reads the rule counters and posts a NodeStatsSummary (Kubernetes
    /// mode); also the delay before the first reading, which is only a baseline.
    pub stats_interval: Duration,
    /// First retry delay of a failed NetworkPolicyStatus post; doubles per failure up to 300 s,
    /// jittered (`crate::retry`).
    pub status_retry_min: Duration,
    /// How often the flow installer audits the switch's flows when the switch cannot report
    /// flow changes itself (no OpenFlow flow monitoring).
    pub flow_audit: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            restart_backoff_min: RetryPolicy::ACTOR_RESTART.initial,
            restart_backoff_max: RetryPolicy::ACTOR_RESTART.max,
            restart_backoff_reset: Duration::from_secs(60),
            interface_reconcile: Duration::from_secs(2),
            reconnect_min: RetryPolicy::OVS_RECONNECT.initial,
            reconnect_max: RetryPolicy::OVS_RECONNECT.max,
            port_wait: Duration::from_secs(5),
            report_interval: Duration::from_secs(60),
            stats_interval: Duration::from_secs(60),
            status_retry_min: RetryPolicy::STATUS_POST.initial,
            flow_audit: Duration::from_secs(10),
        }
    }
}

/// Everything the actors need from the outside world, chosen at construction (real adapters in
/// the binary, fakes in tests). The supervisor gives each actor only its part (`WatcherDeps`,
/// `InterfaceManagerDeps`, ...), cut from this by the `From<&Deps>` conversions below.
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
    pub node_name: String,
    pub ovsdb: Arc<dyn Ovsdb>,
    pub host: Arc<dyn HostNet>,
    pub switch: Arc<dyn SwitchConnector>,
    pub source: Arc<dyn ExternalNodeSource>,
    /// Where NetworkPolicies come from; `None` = no policies.
    pub policy_source: Option<Arc<dyn crate::sources::PolicySource>>,
    /// Kubernetes mode: the API connections the reporter writes through; `None` in standalone mode.
    pub cluster: Option<crate::k8s::ClusterClients>,
    pub metrics: crate::telemetry::AgentMetrics,
    /// Where the reporter writes the agent info snapshot (standalone mode).
    pub agent_info_path: Option<PathBuf>,
    /// How the reporter writes it (atomically, off the actor's thread).
    pub state_files: Arc<dyn StateFiles>,
    /// ovs-vswitchd's datapath flow cache, which the flow installer purges after a repair.
    pub datapath: Arc<dyn DatapathCache>,
    pub timing: Timing,
    /// The FQDN controller (its own thread): the flow installer publishes the FQDN rule
    /// placements to it, the API reads its cache and counters.
    pub fqdn: crate::fqdn::FqdnHandle,
    /// Connections of the packet-in responder's own (announcing the controller id the Reject and
    /// audit flows name), kept open by the flow installer while it lives; the flow installer and
    /// the responder then run on threads of their own. `None`: the responder serves the flow
    /// installer's connection (then announcing that id), and every actor shares one thread.
    pub packet_ins: Option<Arc<dyn SwitchConnector>>,
}

// The one place `Deps` is cut into each actor's part: an edge an actor does not use is not in its
// part, so it cannot reach it.

impl From<&Deps> for WatcherDeps {
    fn from(d: &Deps) -> Self {
        WatcherDeps {
            namespace: d.config.external_node_namespace.clone(),
            node_name: d.node_name.clone(),
            source: d.source.clone(),
        }
    }
}

impl From<&Deps> for InterfaceManagerDeps {
    fn from(d: &Deps) -> Self {
        InterfaceManagerDeps {
            bridge: d.config.ovs_bridge.clone(),
            datapath_type: d.config.ovs_datapath_type,
            state_dir: d.config.state_dir.clone(),
            ovsdb: d.ovsdb.clone(),
            host: d.host.clone(),
            metrics: d.metrics.clone(),
            timing: d.timing.clone(),
        }
    }
}

impl From<&Deps> for PolicyCacheDeps {
    fn from(d: &Deps) -> Self {
        PolicyCacheDeps {
            policy_source: d.policy_source.clone(),
        }
    }
}

impl From<&Deps> for FlowInstallerDeps {
    fn from(d: &Deps) -> Self {
        FlowInstallerDeps {
            bridge: d.config.ovs_bridge.clone(),
            audit_logging: d.config.audit_logging.clone(),
            packet_in_rate: d.config.packet_in_rate,
            policy_bypass_rules: d.config.policy_bypass_rules.clone(),
            ovsdb: d.ovsdb.clone(),
            switch: d.switch.clone(),
            datapath: d.datapath.clone(),
            fqdn: d.fqdn.clone(),
            metrics: d.metrics.clone(),
            packet_ins: d.packet_ins.clone(),
            timing: d.timing.clone(),
        }
    }
}

impl From<&Deps> for ReporterDeps {
    fn from(d: &Deps) -> Self {
        ReporterDeps {
            bridge: d.config.ovs_bridge.clone(),
            api_port: d.config.api_port,
            namespace: d.config.external_node_namespace.clone(),
            post_statuses: d.config.gate_on_by_default("AntreaPolicy"),
            collect_stats: d.config.gate_on_by_default("NetworkPolicyStats"),
            node_name: d.node_name.clone(),
            ovsdb: d.ovsdb.clone(),
            cluster: d.cluster.clone(),
            agent_info_path: d.agent_info_path.clone(),
            state_files: d.state_files.clone(),
            timing: d.timing.clone(),
        }
    }
}

/// Environment variables overriding the reporting periods (e.g. `2s`, `500ms`, `5m`): used by the
/// lab tests to see several reports quickly; operators normally keep upstream's 60 s.
pub const REPORT_INTERVAL_ENV: &str = "ANTREA_VM_AGENT_REPORT_INTERVAL";
pub const STATS_INTERVAL_ENV: &str = "ANTREA_VM_AGENT_STATS_INTERVAL";

/// How long a shutdown waits for the flow installer to stop (it writes the audit lines still
/// collecting first).
const INSTALLER_STOP_WAIT: Duration = Duration::from_secs(5);

/// The threads beside the system thread (see the module header). Stopped with the supervisor.
struct Threads {
    flow_installer: Arbiter,
    packet_ins: Arbiter,
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.flow_installer.stop();
        self.packet_ins.stop();
    }
}

impl Timing {
    /// The defaults with the overrides of [`REPORT_INTERVAL_ENV`] and [`STATS_INTERVAL_ENV`]
    /// applied; an unparsable value is an error naming the variable.
    pub fn from_env() -> Result<Timing, String> {
        let mut timing = Timing::default();
        for (var, field) in [
            (REPORT_INTERVAL_ENV, &mut timing.report_interval),
            (STATS_INTERVAL_ENV, &mut timing.stats_interval),
        ] {
            if let Ok(text) = std::env::var(var) {
                *field = crate::config::parse_period(&text)
                    .ok_or_else(|| format!("{var}={text:?} is not a period such as 30s, 500ms or 5m"))?;
            }
        }
        Ok(timing)
    }
}

#[cfg(test)]
mod child_table_tests {
    use super::*;

    #[test]
    fn the_table_has_one_row_per_actor_in_start_order() {
        let kinds: Vec<ActorKind> = CHILDREN.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, ActorKind::ALL.to_vec());
        for kind in ActorKind::ALL {
            assert_eq!(spec(kind).kind, kind);
        }
        let mut stopped = SHUTDOWN_ORDER.to_vec();
        stopped.sort_by_key(|k| k.as_str());
        let mut all = ActorKind::ALL.to_vec();
        all.sort_by_key(|k| k.as_str());
        assert_eq!(stopped, all, "every actor is stopped once");
        // Only the flow installer is waited for, and it is stopped last.
        let awaited: Vec<ActorKind> = CHILDREN
            .iter()
            .filter(|c| matches!(c.on_shutdown, OnShutdown::Await(..)))
            .map(|c| c.kind)
            .collect();
        assert_eq!(awaited, vec![ActorKind::FlowInstaller]);
        assert_eq!(SHUTDOWN_ORDER.last(), Some(&ActorKind::FlowInstaller));
        // Every producer resends its facts; the reporter only consumes.
        let resynced: Vec<ActorKind> = CHILDREN.iter().filter(|c| c.resync).map(|c| c.kind).collect();
        assert_eq!(
            resynced,
            vec![
                ActorKind::FlowInstaller,
                ActorKind::PolicyCache,
                ActorKind::InterfaceManager,
                ActorKind::ExternalNodeWatcher,
            ]
        );
    }
}

#[cfg(test)]
mod timing_tests {
    use super::*;
    use crate::config::parse_period;

    #[test]
    fn periods_parse_with_units_and_refuse_the_rest() {
        assert_eq!(parse_period("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_period("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_period(" 5m "), Some(Duration::from_secs(300)));
        for bad in ["", "0s", "10", "s", "-1s", "1h", "1.5s"] {
            assert_eq!(parse_period(bad), None, "{bad:?}");
        }
    }
}

/// Restart bookkeeping for one actor.
#[derive(Clone, Copy, Debug)]
struct ChildState {
    generation: u64,
    started_at: Instant,
    consecutive_failures: u32,
    restarts: u64,
}

/// What the supervisor does when a child dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    /// Start a new instance after an exponential backoff (`Timing::restart_backoff_*`, reset once
    /// an instance stayed up `restart_backoff_reset`), then re-wire everyone and ask for a resync.
    WithBackoff,
}

/// How a child is stopped at shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnShutdown {
    /// Sent `Stop`, not waited for.
    Tell,
    /// Sent `Stop`, and the shutdown's answer waits for it up to this long; the text says what a
    /// later stop means (logged when it happens).
    Await(Duration, &'static str),
}

/// A running child as the supervisor talks to it, whatever its type.
struct ChildHandle {
    resync: Recipient<Resync>,
    stop: Recipient<Stop>,
    connected: bool,
}

fn handle_of<A>(addr: &Option<Addr<A>>) -> Option<ChildHandle>
where
    A: Actor<Context = Context<A>> + Handler<Resync> + Handler<Stop>,
{
    addr.as_ref().map(|a| ChildHandle {
        resync: a.clone().recipient(),
        stop: a.clone().recipient(),
        connected: a.connected(),
    })
}

/// Sends `outputs` to the actor at `addr`, if it is up.
fn send_outputs<A, O>(addr: &Option<Addr<A>>, outputs: O)
where
    A: Actor<Context = Context<A>> + Handler<SetOutputs<O>>,
    O: Send + 'static,
{
    if let Some(a) = addr {
        a.do_send(SetOutputs(outputs));
    }
}

/// One row of [`CHILDREN`]: how the supervisor starts, addresses, restarts and stops one actor.
struct ChildSpec {
    kind: ActorKind,
    /// Starts a new instance (with its part of the `Deps` and its outputs wired to the current
    /// addresses, on the thread the layout gives it) and records its address in the peers.
    start: fn(&mut Peers, &Deps, Lifeline, Option<&Threads>),
    /// Sends the live instance, if any, its outputs wired to the current addresses.
    rewire: fn(&Peers),
    /// The live instance's address, if any.
    handle: fn(&Peers) -> Option<ChildHandle>,
    /// Forgets the address of a dead instance.
    clear: fn(&mut Peers),
    restart: Restart,
    /// Asked to resend its facts (`Resync`) after every re-wiring.
    resync: bool,
    on_shutdown: OnShutdown,
}

/// The children, in start order ([`ActorKind::ALL`]: each one's consumers start before it).
/// Each row builds its actor's outputs with the `Peers` method of `wiring` that names them.
/// `SetOutputs` goes out in this order, `Resync` in the reverse one (producers first; the flow
/// installer last, re-sending its last realization notice, which a restarted reporter lacks).
const CHILDREN: [ChildSpec; 5] = [
    ChildSpec {
        kind: ActorKind::FlowInstaller,
        start: |peers, deps, lifeline, threads| {
            let outputs = peers.flow_installer_outputs();
            let deps = FlowInstallerDeps::from(deps);
            peers.flows = Some(match threads {
                Some(threads) => {
                    let packet_ins = threads.packet_ins.handle();
                    FlowInstaller::start_in_arbiter(&threads.flow_installer.handle(), move |_| {
                        FlowInstaller::new(deps, outputs, lifeline).with_packet_in_thread(packet_ins)
                    })
                }
                None => FlowInstaller::new(deps, outputs, lifeline).start(),
            });
        },
        rewire: |p| send_outputs(&p.flows, p.flow_installer_outputs()),
        handle: |p| handle_of(&p.flows),
        clear: |p| p.flows = None,
        restart: Restart::WithBackoff,
        resync: true,
        // It writes the audit lines still collecting first; bounded, since a Stop queues behind
        // a bundle in flight, which a stuck ovs-vswitchd could hold for minutes.
        on_shutdown: OnShutdown::Await(
            INSTALLER_STOP_WAIT,
            "a bundle in flight; audit lines still collecting may be lost",
        ),
    },
    ChildSpec {
        kind: ActorKind::PolicyCache,
        start: |peers, deps, lifeline, _| {
            let outputs = peers.policy_cache_outputs();
            peers.policy = Some(PolicyCache::new(deps.into(), outputs, lifeline).start());
        },
        rewire: |p| send_outputs(&p.policy, p.policy_cache_outputs()),
        handle: |p| handle_of(&p.policy),
        clear: |p| p.policy = None,
        restart: Restart::WithBackoff,
        resync: true,
        on_shutdown: OnShutdown::Tell,
    },
    ChildSpec {
        kind: ActorKind::InterfaceManager,
        start: |peers, deps, lifeline, _| {
            let outputs = peers.interface_manager_outputs();
            peers.interfaces = Some(InterfaceManager::new(deps.into(), outputs, lifeline).start());
        },
        rewire: |p| send_outputs(&p.interfaces, p.interface_manager_outputs()),
        handle: |p| handle_of(&p.interfaces),
        clear: |p| p.interfaces = None,
        restart: Restart::WithBackoff,
        resync: true,
        on_shutdown: OnShutdown::Tell,
    },
    ChildSpec {
        kind: ActorKind::ExternalNodeWatcher,
        start: |peers, deps, lifeline, _| {
            let outputs = peers.watcher_outputs();
            peers.watcher = Some(ExternalNodeWatcher::new(deps.into(), outputs, lifeline).start());
        },
        rewire: |p| send_outputs(&p.watcher, p.watcher_outputs()),
        handle: |p| handle_of(&p.watcher),
        clear: |p| p.watcher = None,
        restart: Restart::WithBackoff,
        resync: true,
        on_shutdown: OnShutdown::Tell,
    },
    ChildSpec {
        kind: ActorKind::AgentInfoReporter,
        start: |peers, deps, lifeline, _| {
            let outputs = peers.reporter_outputs();
            peers.reporter = Some(AgentInfoReporter::new(deps.into(), outputs, lifeline).start());
        },
        rewire: |p| send_outputs(&p.reporter, p.reporter_outputs()),
        handle: |p| handle_of(&p.reporter),
        clear: |p| p.reporter = None,
        restart: Restart::WithBackoff,
        // Nothing of its own to resend: it only consumes.
        resync: false,
        on_shutdown: OnShutdown::Tell,
    },
];

/// The order `Stop` goes out at shutdown: the producers of facts first, the flow installer last.
const SHUTDOWN_ORDER: [ActorKind; 5] = [
    ActorKind::ExternalNodeWatcher,
    ActorKind::AgentInfoReporter,
    ActorKind::InterfaceManager,
    ActorKind::PolicyCache,
    ActorKind::FlowInstaller,
];

fn spec(kind: ActorKind) -> &'static ChildSpec {
    // An exhaustive match: a new kind without its row does not compile (and
    // `the_table_has_one_row_per_actor_in_start_order` checks each row is the kind's).
    let row = match kind {
        ActorKind::FlowInstaller => 0,
        ActorKind::PolicyCache => 1,
        ActorKind::InterfaceManager => 2,
        ActorKind::ExternalNodeWatcher => 3,
        ActorKind::AgentInfoReporter => 4,
    };
    &CHILDREN[row]
}

/// Supervision counters, for status and tests.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SupervisorReport {
    pub restarts: HashMap<ActorKind, u64>,
    pub alive: HashMap<ActorKind, bool>,
}

/// Ask the supervisor for the current addresses.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "Peers")]
pub struct GetPeers;

/// Ask the supervisor for its counters.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "SupervisorReport")]
pub struct GetSupervisorReport;

/// Stop supervising (children are not restarted any more) and stop the children.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

pub struct Supervisor {
    deps: Deps,
    peers: Peers,
    children: HashMap<ActorKind, ChildState>,
    next_generation: u64,
    shutting_down: bool,
    /// `None` until started, or without [`Deps::packet_ins`].
    threads: Option<Threads>,
}

impl Supervisor {
    pub fn new(deps: Deps) -> Self {
        Supervisor {
            deps,
            peers: Peers::default(),
            children: HashMap::new(),
            next_generation: 1,
            shutting_down: false,
            threads: None,
        }
    }

    fn start_child(&mut self, kind: ActorKind, ctx: &mut Context<Self>) {
        let generation = self.next_generation;
        self.next_generation += 1;
        let lifeline = Lifeline::new(kind, generation, ctx.address().recipient());
        (spec(kind).start)(&mut self.peers, &self.deps, lifeline, self.threads.as_ref());
        let previous = self.children.get(&kind).copied();
        self.children.insert(
            kind,
            ChildState {
                generation,
                started_at: Instant::now(),
                consecutive_failures: previous.map_or(0, |p| p.consecutive_failures),
                restarts: previous.map_or(0, |p| p.restarts),
            },
        );
    }

    fn clear_peer(&mut self, kind: ActorKind) {
        (spec(kind).clear)(&mut self.peers);
    }

    /// Sends every live actor its outputs wired to the current addresses, then asks them all to
    /// resend their facts.
    fn rewire_and_resync(&self) {
        let p = &self.peers;
        for child in &CHILDREN {
            (child.rewire)(p);
        }
        for child in CHILDREN
            .iter()
            .rev()
            .filter(|c| c.resync)
            .filter_map(|c| (c.handle)(p))
        {
            child.resync.do_send(Resync);
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let t = &self.deps.timing;
        RetryPolicy::new(t.restart_backoff_min, t.restart_backoff_max).delay_after(failures)
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.deps.packet_ins.is_some() {
            self.threads = Some(Threads {
                flow_installer: Arbiter::new(),
                packet_ins: Arbiter::new(),
            });
        }
        for kind in ActorKind::ALL {
            self.start_child(kind, ctx);
        }
        self.rewire_and_resync();
        info!("all actors started");
    }
}

impl Handler<ChildExited> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: ChildExited, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let Some(state) = self.children.get_mut(&msg.kind) else {
            return;
        };
        if state.generation != msg.generation {
            // A late notice from an instance that was already replaced.
            return;
        }
        let uptime = state.started_at.elapsed();
        if uptime >= self.deps.timing.restart_backoff_reset {
            state.consecutive_failures = 0;
        }
        state.consecutive_failures += 1;
        state.restarts += 1;
        let failures = state.consecutive_failures;
        let delay = match spec(msg.kind).restart {
            Restart::WithBackoff => self.backoff(failures),
        };
        error!(actor = %msg.kind, uptime_ms = uptime.as_millis() as u64, restart_in_ms = delay.as_millis() as u64,
            "actor died; restarting");
        self.clear_peer(msg.kind);
        self.rewire_and_resync();
        let kind = msg.kind;
        ctx.run_later(delay, move |act, ctx| {
            if act.shutting_down {
                return;
            }
            act.start_child(kind, ctx);
            act.rewire_and_resync();
            info!(actor = %kind, "actor restarted");
        });
    }
}

impl Handler<GetPeers> for Supervisor {
    type Result = actix::MessageResult<GetPeers>;
    fn handle(&mut self, _: GetPeers, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(self.peers.clone())
    }
}

impl Handler<GetSupervisorReport> for Supervisor {
    type Result = actix::MessageResult<GetSupervisorReport>;
    fn handle(&mut self, _: GetSupervisorReport, _: &mut Context<Self>) -> Self::Result {
        let mut report = SupervisorReport::default();
        for kind in ActorKind::ALL {
            report
                .restarts
                .insert(kind, self.children.get(&kind).map_or(0, |c| c.restarts));
        }
        for child in &CHILDREN {
            let alive = (child.handle)(&self.peers).is_some_and(|h| h.connected);
            report.alive.insert(child.kind, alive);
        }
        actix::MessageResult(report)
    }
}

impl Handler<Shutdown> for Supervisor {
    /// Answered once the flow installer has stopped (it writes the audit lines still collecting
    /// first), so `main` can exit right after.
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> ResponseFuture<()> {
        if self.shutting_down {
            warn!("shutdown already in progress");
            return Box::pin(async {});
        }
        self.shutting_down = true;
        let p = std::mem::take(&mut self.peers);
        let mut awaited = Vec::new();
        for kind in SHUTDOWN_ORDER {
            let child = spec(kind);
            let Some(handle) = (child.handle)(&p) else {
                continue;
            };
            match child.on_shutdown {
                OnShutdown::Tell => handle.stop.do_send(Stop),
                OnShutdown::Await(bound, late) => awaited.push((kind, handle.stop, bound, late)),
            }
        }
        // The installer's and the responder's threads end after its answer, not with this actor.
        let threads = self.threads.take();
        ctx.stop();
        Box::pin(async move {
            for (kind, stop, bound, late) in awaited {
                // Bounded: a Stop queues behind a bundle in flight, which a stuck ovs-vswitchd
                // could hold for minutes (then the lines still collecting are lost).
                if tokio::time::timeout(bound, stop.send(Stop)).await.is_err() {
                    warn!("the {kind} did not stop within {bound:?} ({late})");
                }
            }
            drop(threads);
        })
    }
}
