//! The FQDN controller's runtime: it owns the FQDN cache and the FQDN clause flows, and answers
//! the DNS packet-ins. It runs on a thread of its own, with its own OpenFlow connection, so a
//! paused DNS response never waits behind the flow installer's work (a full recompile, a large
//! bundle): the only shared resource is ovs-vswitchd itself.
//!
//! For each intercepted response (paused in the switch by `controller(pause)`):
//! 1. the DNS payload is parsed (UDP, or TCP reassembled across segments); anything malformed
//!    is resumed at once and counted;
//! 2. the answers enter the cache; the addresses new to a rule become clause flows, one per
//!    (rule table and priority, address), committed in one bundle;
//! 3. the datapath's cached flows (megaflows) toward the changed addresses are evicted through
//!    ovs-vswitchd's control socket: OVS revalidates them only asynchronously after a commit,
//!    and a wide drop megaflow left by an earlier blocked connection would otherwise drop the
//!    first packet to the newly allowed address;
//! 4. only then is the response resumed (NXT_RESUME with its continuation). A failed commit is
//!    logged and counted, and the response is still resumed (the flows are retried at the
//!    next reconcile).
//!
//! A name that a new rule names exactly (no wildcard) is asked at once by the same worker, as
//! upstream does when a rule is added, so the first connection after the rule add finds its
//! address flows in place without waiting for the VM's own query.
//!
//! Names in the cache (every one is selected by a rule) are asked again before their first
//! record expires, by the re-query worker on a thread of its own (`resolver.rs`, scheduled by
//! `requery.rs`); its answers take the same path as the VM's (cache, then one bundle). The
//! controller never waits for the worker: names go out and answers come back on unbounded
//! channels, handled like packet-ins. Expired records leave at their expiry (their flows with
//! them; established connections keep flowing through the `-new+est` flows). The rule
//! placements come from the flow installer: those of a rule bundle before it is sent
//! ([`FqdnHandle::publish_pending`]), then the committed ones ([`FqdnHandle::publish_placements`]).
//! Until the commit the controller writes address flows for both, and it reads placement
//! changes before packet-ins, so an answer reaching it after a rule is in the switch always
//! finds the rule known (no first-connection race on a new rule). The installer's bundle
//! already carried the address flows of new or moved rules (from a snapshot of the cache); on
//! a commit the controller re-reads its flows from the switch and reconciles them all. The
//! cache is saved under `stateDir` and loaded at start, expired records dropped, so cached
//! names keep working across a restart without a new DNS query.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::cache::{CacheRecord, Change, EvictionReason, FqdnCache, Source};
use super::dns::{self, Payload, TcpReassembly};
use super::flows::{self, Placements};
use super::requery::Schedule;
use super::resolver::{self, Outcome, OwnPorts, ServerSource};
use crate::ovs::openflow::{Event, FlowFilter, PacketIn, Switch, SwitchConnector};
use crate::ovs::vswitchd::DatapathCache;
use crate::policy::compiler::FqdnPlacement;
use crate::policy::flowset::{self, FlowSet};
use crate::policy::pipeline::fields::{category, FQDN_COOKIE};
use crate::retry::RetryPolicy;

/// File under `stateDir` holding the cache.
pub const CACHE_FILE: &str = "fqdn-cache.json";
/// How many recent hold durations are kept for the API and the benchmark.
const HOLD_SAMPLES: usize = 8192;
/// The cache is saved at most this often.
const SAVE_DELAY: Duration = Duration::from_millis(200);
/// How long the eviction of cached datapath flows may hold an answer in all (each control-socket
/// call has its own timeout too); past it the answer is released and the failure counted.
const EVICTION_DEADLINE: Duration = Duration::from_millis(500);
/// How long a catch-up after a placement change may wait behind queued DNS answers.
const CATCH_UP_DEFERRAL: Duration = Duration::from_millis(20);

/// Counters over the agent's lifetime.
#[derive(Debug, Default)]
pub struct FqdnStats {
    pub responses: AtomicU64,
    pub malformed: AtomicU64,
    pub unwanted_answers: AtomicU64,
    pub ips_added: AtomicU64,
    pub bundles: AtomicU64,
    pub commit_failures: AtomicU64,
    pub resume_failures: AtomicU64,
    pub tcp_streams_dropped: AtomicU64,
    pub cache_size: AtomicU64,
    pub evictions: [AtomicU64; 4],
    pub session_restarts: AtomicU64,
    /// Names handed to the re-query worker.
    pub requeries: AtomicU64,
    /// Re-queries the server answered (possibly with no address).
    pub requeries_answered: AtomicU64,
    /// Re-queries no server answered (retried with a doubling delay while the name is cached).
    pub requery_failures: AtomicU64,
    /// Cached datapath flows toward changed addresses deleted after a commit.
    pub datapath_flows_evicted: AtomicU64,
    /// Commits after which the cached datapath flows could not be evicted.
    pub datapath_evict_failures: AtomicU64,
    /// Recent holds of responses that needed new flows.
    holds: Mutex<std::collections::VecDeque<Hold>>,
    holds_total: AtomicU64,
}

/// A snapshot of [`FqdnStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FqdnCounts {
    pub responses: u64,
    pub malformed: u64,
    pub unwanted_answers: u64,
    pub ips_added: u64,
    pub bundles: u64,
    pub commit_failures: u64,
    pub resume_failures: u64,
    pub tcp_streams_dropped: u64,
    pub cache_size: u64,
    /// By reason: expired, cache_full, selector_full, unselected.
    pub evictions: std::collections::BTreeMap<String, u64>,
    pub session_restarts: u64,
    pub requeries: u64,
    pub requeries_answered: u64,
    pub requery_failures: u64,
    pub datapath_flows_evicted: u64,
    pub datapath_evict_failures: u64,
    /// Responses that needed new flows (each one's hold is sampled).
    pub holds_total: u64,
}

/// One held response: microseconds from the packet-in's arrival to the bundle's commit and to
/// the resume being sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    pub committed_micros: u32,
    pub resumed_micros: u32,
}

fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

impl FqdnStats {
    pub fn snapshot(&self) -> FqdnCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FqdnCounts {
            responses: g(&self.responses),
            malformed: g(&self.malformed),
            unwanted_answers: g(&self.unwanted_answers),
            ips_added: g(&self.ips_added),
            bundles: g(&self.bundles),
            commit_failures: g(&self.commit_failures),
            resume_failures: g(&self.resume_failures),
            tcp_streams_dropped: g(&self.tcp_streams_dropped),
            cache_size: g(&self.cache_size),
            evictions: EvictionReason::ALL
                .iter()
                .enumerate()
                .map(|(i, r)| (r.as_str().to_owned(), g(&self.evictions[i])))
                .collect(),
            session_restarts: g(&self.session_restarts),
            requeries: g(&self.requeries),
            requeries_answered: g(&self.requeries_answered),
            requery_failures: g(&self.requery_failures),
            datapath_flows_evicted: g(&self.datapath_flows_evicted),
            datapath_evict_failures: g(&self.datapath_evict_failures),
            holds_total: g(&self.holds_total),
        }
    }

    /// The recent holds (oldest first; at most the last 8,192).
    pub fn holds(&self) -> Vec<Hold> {
        self.holds
            .lock()
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default()
    }

    fn record_hold(&self, committed: Duration, resumed: Duration) {
        let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        bump(&self.holds_total);
        if let Ok(mut h) = self.holds.lock() {
            if h.len() >= HOLD_SAMPLES {
                h.pop_front();
            }
            h.push_back(Hold {
                committed_micros: us(committed),
                resumed_micros: us(resumed),
            });
        }
    }

    fn count_change(&self, change: &Change) {
        for (_, reason) in &change.evicted {
            if let Some(i) = EvictionReason::ALL.iter().position(|r| r == reason) {
                bump(&self.evictions[i]);
            }
        }
        self.unwanted_answers
            .fetch_add(change.unwanted as u64, Ordering::Relaxed);
        self.ips_added
            .fetch_add(change.added.len() as u64, Ordering::Relaxed);
    }
}

/// The rule placements the flow installer publishes: those the switch's rule flows match
/// (`committed`), and those of a rule bundle on its way to the switch (`pending`), if any.
///
/// The controller writes address flows for both (their union) while a bundle is in flight, so a
/// DNS answer that arrives between the bundle's send and the controller learning of its commit
/// still gets the address flows of the rules the bundle adds: the first connection never races
/// the rule's arrival. Clause flows of a rule whose other clauses are not in yet (or no longer)
/// match nothing, so the union is never wider than what either side of the commit allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishedPlacements {
    pub committed: Option<Arc<Vec<FqdnPlacement>>>,
    pub pending: Option<Arc<Vec<FqdnPlacement>>>,
    /// How many committed bundles of the installer carried FQDN address flows of their own
    /// (from a snapshot of the cache, which may be stale by the commit): each one makes the
    /// controller re-read the switch, even when the placements stayed the same.
    pub installer_flow_commits: u64,
}

impl PublishedPlacements {
    /// Every placement of `committed` and `pending`, each once; `None` until the installer
    /// published anything.
    ///
    /// A rule changed in place (same conjunction, table and priority, other selectors or
    /// clause count) keeps its committed version until the commit: both versions on one flow
    /// would give the rule in the switch the new selectors' addresses early (or a conjunction
    /// action twice). A rule added or moved elsewhere is in the union from the start.
    pub fn union(&self) -> Option<Vec<FqdnPlacement>> {
        if self.committed.is_none() && self.pending.is_none() {
            return None;
        }
        let committed: &[FqdnPlacement] = self.committed.as_deref().map_or(&[], Vec::as_slice);
        let in_place: BTreeSet<(u32, u8, u16)> = committed
            .iter()
            .map(|p| (p.conj_id, p.table, p.priority))
            .collect();
        let pending = self
            .pending
            .iter()
            .flat_map(|p| p.iter())
            .filter(|p| !in_place.contains(&(p.conj_id, p.table, p.priority)));
        let mut all: Vec<FqdnPlacement> = committed.iter().chain(pending).cloned().collect();
        all.sort();
        all.dedup();
        Some(all)
    }
}

/// What the rest of the agent holds of the controller: the placements it publishes, and the
/// counters and cache view it reads. Clone freely.
#[derive(Clone)]
pub struct FqdnHandle {
    placements: Arc<watch::Sender<PublishedPlacements>>,
    /// Bumped by the flow installer after it repaired flows changed under it (a `del-flows`):
    /// the controller then reads back what the switch holds of its own flows and puts back the
    /// missing ones, which the installer's repair leaves alone (round 0).
    repairs: Arc<watch::Sender<u64>>,
    pub stats: Arc<FqdnStats>,
    records: Arc<Mutex<Arc<Vec<CacheRecord>>>>,
}

impl Default for FqdnHandle {
    fn default() -> Self {
        FqdnHandle {
            placements: Arc::new(watch::channel(PublishedPlacements::default()).0),
            repairs: Arc::new(watch::channel(0).0),
            stats: Arc::default(),
            records: Arc::default(),
        }
    }
}

impl std::fmt::Debug for FqdnHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FqdnHandle").finish_non_exhaustive()
    }
}

impl FqdnHandle {
    /// The flow installer's committed rule placements; a pending set is withdrawn (only sent
    /// when something changed).
    pub fn publish_placements(&self, placements: Vec<FqdnPlacement>) {
        self.placements.send_if_modified(|current| {
            if current.committed.as_deref() == Some(&placements) && current.pending.is_none() {
                return false;
            }
            current.committed = Some(Arc::new(placements));
            current.pending = None;
            true
        });
    }

    /// [`FqdnHandle::publish_placements`] after a commit whose bundle also carried FQDN address
    /// flows (a take-over, or a rule added or moved, writes the cached names' flows from a
    /// snapshot of the cache): always told, so the controller takes over from the switch and
    /// removes what the snapshot had but the cache no longer has (or adds what it missed).
    pub fn publish_placements_after_flows(&self, placements: Vec<FqdnPlacement>) {
        self.placements.send_modify(|current| {
            current.committed = Some(Arc::new(placements));
            current.pending = None;
            current.installer_flow_commits = current.installer_flow_commits.wrapping_add(1);
        });
    }

    /// A bundle that carried FQDN address flows ended with its outcome unknown (timed out, or
    /// the connection closed): it may have committed them, so the controller re-reads the
    /// switch as after [`FqdnHandle::publish_placements_after_flows`].
    pub fn installer_flows_maybe_written(&self) {
        self.placements.send_modify(|current| {
            current.installer_flow_commits = current.installer_flow_commits.wrapping_add(1);
        });
    }

    /// The placements of a rule bundle about to be sent, before its first byte leaves: from
    /// now until [`FqdnHandle::publish_placements`] or [`FqdnHandle::withdraw_pending`], answers
    /// get address flows for these rules too.
    pub fn publish_pending(&self, placements: &[FqdnPlacement]) {
        self.placements.send_if_modified(|current| {
            let same_as_committed = current.committed.as_deref().map(Vec::as_slice) == Some(placements);
            let wanted = (!same_as_committed).then_some(placements);
            if current.pending.as_deref().map(Vec::as_slice) == wanted {
                return false;
            }
            current.pending = wanted.map(|p| Arc::new(p.to_vec()));
            true
        });
    }

    /// The switch refused the bundle (nothing changed): only the committed placements stand.
    pub fn withdraw_pending(&self) {
        self.placements
            .send_if_modified(|current| current.pending.take().is_some());
    }

    /// The flow installer repaired the switch: the controller re-reads and re-asserts its flows.
    pub fn switch_repaired(&self) {
        self.repairs.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The cache as of the controller's last change.
    pub fn records(&self) -> Arc<Vec<CacheRecord>> {
        self.records.lock().map(|r| Arc::clone(&r)).unwrap_or_default()
    }

    /// A cache built from [`FqdnHandle::records`] (records expired by now dropped): what the
    /// flow installer compiles into a new rule's bundle. It may miss the answers of the last
    /// moments (the view follows each resume); the controller adds those when it takes over the
    /// rule's placement.
    pub fn cache_snapshot(&self) -> FqdnCache {
        let mut cache = FqdnCache::new(0);
        cache.load(self.records().as_ref().clone(), now_ms());
        cache
    }

    fn set_records(&self, records: Vec<CacheRecord>) {
        self.stats.cache_size.store(
            records.iter().map(|r| &r.name).collect::<BTreeSet<_>>().len() as u64,
            Ordering::Relaxed,
        );
        if let Ok(mut r) = self.records.lock() {
            *r = Arc::new(records);
        }
    }
}

/// What the controller needs to run.
#[derive(Clone)]
pub struct ControllerConfig {
    pub min_ttl_secs: u32,
    /// Where names are asked again before they expire.
    pub dns_server: ServerSource,
    pub state_dir: PathBuf,
    /// Between attempts to open the controller's OpenFlow session.
    pub reconnect: RetryPolicy,
    /// The switch's datapath flow cache: after a commit, the cached flows toward the changed
    /// addresses are evicted before the answer is released (see [`crate::ovs::vswitchd`]).
    pub datapath: Arc<dyn DatapathCache>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The controller's state, kept across OpenFlow sessions.
struct State {
    cache: FqdnCache,
    /// The union of the installer's committed and pending placements (`None` until it
    /// published any).
    placements: Option<Placements>,
    /// The committed placements last seen: a change means the installer's bundle changed the
    /// switch.
    committed_seen: Option<Arc<Vec<FqdnPlacement>>>,
    /// [`PublishedPlacements::installer_flow_commits`] last seen: a change means the installer
    /// wrote FQDN address flows.
    installer_flow_commits_seen: u64,
    catch_up: Option<CatchUp>,
    /// Since when `catch_up` has waited.
    catch_up_since: Option<Instant>,
    /// The FQDN flows the switch holds (as far as the controller knows).
    installed: FlowSet,
    tcp: TcpReassembly,
    /// When each cached name is asked again.
    schedule: Schedule,
    /// Names to the re-query worker.
    requests: mpsc::UnboundedSender<String>,
    /// The re-query worker's local ports (its answers do not make names recently used).
    own_ports: OwnPorts,
    /// Names a rule names exactly, asked once when the rule arrived, whose answer is awaited:
    /// it enters the cache like the VM's (not only refreshing a cached name).
    rule_names: BTreeSet<String>,
    dirty_since: Option<Instant>,
    /// A bundle failed: what the switch holds is unknown until the next take-over.
    resync: bool,
    config: ControllerConfig,
    handle: FqdnHandle,
}

/// Starts the controller on a thread of its own. It connects through `connector` and
/// reconnects (and restarts after a panic) until the process ends.
pub fn spawn(
    handle: FqdnHandle,
    connector: Arc<dyn SwitchConnector>,
    config: ControllerConfig,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let link = spawn_requery(config.dns_server.clone())?;
    std::thread::Builder::new()
        .name("fqdn-controller".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    warn!("FQDN controller cannot start its runtime: {e}; FQDN rules allow nothing new");
                    return;
                }
            };
            rt.block_on(run(handle, connector, config, link));
        })
}

/// The controller's end of the re-query worker.
pub struct RequeryLink {
    pub requests: mpsc::UnboundedSender<String>,
    pub outcomes: mpsc::UnboundedReceiver<Outcome>,
    pub own_ports: OwnPorts,
}

/// Starts the re-query worker on a thread of its own; returns the controller's end.
pub fn spawn_requery(source: ServerSource) -> std::io::Result<RequeryLink> {
    let (requests, requests_rx) = mpsc::unbounded_channel();
    let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
    let own_ports = OwnPorts::default();
    resolver::spawn(source, requests_rx, outcomes_tx, own_ports.clone())?;
    Ok(RequeryLink {
        requests,
        outcomes,
        own_ports,
    })
}

/// The controller loop (for tests: run it on any runtime).
pub async fn run(
    handle: FqdnHandle,
    connector: Arc<dyn SwitchConnector>,
    config: ControllerConfig,
    link: RequeryLink,
) {
    let mut cache = FqdnCache::new(config.min_ttl_secs);
    let path = config.state_dir.join(CACHE_FILE);
    match load(&path) {
        Ok(Some(records)) => {
            let n = cache.load(records, now_ms());
            info!(records = n, file = %path.display(), "FQDN cache loaded");
        }
        Ok(None) => {}
        Err(e) => warn!("FQDN cache not loaded: {e}"),
    }
    handle.set_records(cache.records());
    let mut schedule = Schedule::new();
    let now = now_ms();
    for (name, expiry) in cache.earliest_expiries() {
        schedule.expires(name, now, expiry);
    }
    let outcomes = Arc::new(tokio::sync::Mutex::new(link.outcomes));
    let state = Arc::new(tokio::sync::Mutex::new(State {
        cache,
        placements: None,
        committed_seen: None,
        installer_flow_commits_seen: 0,
        catch_up: None,
        catch_up_since: None,
        installed: FlowSet::new(),
        tcp: TcpReassembly::new(),
        schedule,
        requests: link.requests,
        own_ports: link.own_ports,
        rule_names: BTreeSet::new(),
        dirty_since: None,
        resync: false,
        config: config.clone(),
        handle: handle.clone(),
    }));
    let mut backoff = config.reconnect.backoff();
    loop {
        let switch = match connector.connect().await {
            Ok(s) => s,
            Err(e) => {
                debug!("FQDN controller: cannot connect to the switch: {e}");
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        backoff.reset();
        let session = tokio::spawn(session(
            switch,
            Arc::clone(&state),
            Arc::clone(&outcomes),
            handle.clone(),
        ));
        match session.await {
            Ok(()) => debug!("FQDN controller: OpenFlow session ended; reconnecting"),
            Err(e) => {
                bump(&handle.stats.session_restarts);
                warn!("FQDN controller session failed ({e}); restarting it");
            }
        }
        tokio::time::sleep(config.reconnect.initial).await;
    }
}

fn load(path: &Path) -> Result<Option<Vec<CacheRecord>>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn save(path: &Path, records: &[CacheRecord]) -> Result<(), String> {
    let text = serde_json::to_vec(records).map_err(|e| e.to_string())?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

async fn session(
    switch: Arc<dyn Switch>,
    state: Arc<tokio::sync::Mutex<State>>,
    outcomes: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Outcome>>>,
    handle: FqdnHandle,
) {
    let mut sub = switch.subscribe();
    let mut placements_rx = handle.placements.subscribe();
    let mut repairs_rx = handle.repairs.subscribe();
    repairs_rx.mark_unchanged();
    let mut state = state.lock().await;
    let mut outcomes = outcomes.lock().await;
    // Take over what the switch holds of our flows (an earlier run's, or nothing).
    if !state.take_over(switch.as_ref()).await {
        return;
    }
    placements_rx.mark_changed();
    loop {
        let wake = state.next_wake();
        let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake));
        tokio::select! {
            biased;
            // Placements before packet-ins: the installer publishes a rule bundle's placements
            // before the bundle leaves, so an answer that reaches us after the rules are in
            // the switch finds them known here, whatever else is queued.
            changed = placements_rx.changed() => {
                if changed.is_err() {
                    return;
                }
                let latest = placements_rx.borrow_and_update().clone();
                state.set_placements(&latest);
            }
            // A catch-up waits behind queued answers for at most CATCH_UP_DEFERRAL: under a
            // steady stream of answers, flows of removed rules must not linger (their
            // conjunction ids are reused after a grace period).
            () = std::future::ready(()), if state.catch_up_overdue() => {
                state.catch_up(switch.as_ref()).await;
            }
            ev = sub.recv() => match ev {
                None => return,
                Some(Event::PacketIn(pi)) => state.packet_in(switch.as_ref(), *pi).await,
                Some(_) => {}
            },
            Some(outcome) = outcomes.recv() => state.requeried(switch.as_ref(), outcome).await,
            changed = repairs_rx.changed() => {
                if changed.is_err() {
                    return;
                }
                repairs_rx.mark_unchanged();
                // What the switch holds is no longer what we installed: read it back, then put
                // back what the placements and the cache want.
                state.want(CatchUp::TakeOver);
            }
            // After the answers already queued (they are held in the switch meanwhile), which
            // are answered against the new placements already.
            () = std::future::ready(()), if state.catch_up.is_some() => {
                state.catch_up(switch.as_ref()).await;
            }
            () = sleep => state.tick(switch.as_ref()).await,
        }
    }
}

/// How far the controller must go to bring its flows in line after a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CatchUp {
    /// The placements grew or shrank while the switch is as we left it: diff and commit.
    Reconcile,
    /// The switch changed under us (the installer's rule bundle carried address flows of new or
    /// moved rules, or it repaired a `del-flows`): read our flows back first.
    TakeOver,
}

impl State {
    /// A new publication of the installer's placements: answers from now on get address flows
    /// for every rule of the union of committed and pending; names that a new rule names
    /// exactly are asked at once; the flows catch up after the answers already queued.
    fn set_placements(&mut self, latest: &PublishedPlacements) {
        let Some(all) = latest.union() else {
            return;
        };
        let committed_changed = latest.committed != self.committed_seen
            || latest.installer_flow_commits != self.installer_flow_commits_seen;
        self.committed_seen = latest.committed.clone();
        self.installer_flow_commits_seen = latest.installer_flow_commits;
        let placements = Placements::new(all);
        self.ask_new_rule_names(&placements);
        self.placements = Some(placements);
        self.want(if committed_changed {
            CatchUp::TakeOver
        } else {
            CatchUp::Reconcile
        });
    }

    fn want(&mut self, step: CatchUp) {
        self.catch_up = Some(self.catch_up.map_or(step, |s| s.max(step)));
        self.catch_up_since.get_or_insert_with(Instant::now);
    }

    fn catch_up_overdue(&self) -> bool {
        self.catch_up_since
            .is_some_and(|t| t.elapsed() >= CATCH_UP_DEFERRAL)
    }

    async fn catch_up(&mut self, switch: &dyn Switch) {
        self.catch_up_since = None;
        match self.catch_up.take() {
            Some(CatchUp::TakeOver) => {
                if self.take_over(switch).await {
                    self.reconcile(switch).await;
                } else {
                    self.resync = true;
                }
            }
            Some(CatchUp::Reconcile) => self.reconcile(switch).await,
            None => {}
        }
    }

    /// Reads what the switch holds of the FQDN flows; false if it cannot be read.
    async fn take_over(&mut self, switch: &dyn Switch) -> bool {
        let filter = FlowFilter {
            cookie: FQDN_COOKIE,
            cookie_mask: u64::MAX,
            ..FlowFilter::all()
        };
        match switch.dump_flows(filter).await {
            Ok(stats) => {
                self.installed = flowset::flow_set(stats.into_iter().map(|s| s.flow));
                self.resync = false;
                true
            }
            Err(e) => {
                warn!("FQDN controller: cannot dump its flows: {e}");
                false
            }
        }
    }

    fn next_wake(&self) -> Instant {
        let now_wall = now_ms();
        let now = Instant::now();
        let mut wake = now + Duration::from_secs(3600);
        if let Some(exp) = self.cache.next_expiry() {
            wake = wake.min(now + Duration::from_millis(exp.saturating_sub(now_wall)));
        }
        if let Some(t) = self.dirty_since {
            wake = wake.min(t + SAVE_DELAY);
        }
        if self.resync {
            wake = wake.min(now + SAVE_DELAY);
        }
        if self.placements.is_some() {
            if let Some(due) = self.schedule.next_due() {
                wake = wake.min(now + Duration::from_millis(due.saturating_sub(now_wall)));
            }
        }
        wake
    }

    /// Expiry and saving.
    async fn tick(&mut self, switch: &dyn Switch) {
        if self.resync && self.take_over(switch).await {
            self.reconcile(switch).await;
        }
        let change = self.cache.expire(now_ms());
        if !change.removed.is_empty() {
            self.handle.stats.count_change(&change);
            self.forget_evicted(&change);
            let ips: BTreeSet<IpAddr> = change.removed.iter().map(|(_, ip)| *ip).collect();
            debug!(records = change.removed.len(), "FQDN records expired");
            self.apply(switch, ips).await;
            self.changed();
        }
        self.send_due();
        if self.dirty_since.is_some_and(|t| t.elapsed() >= SAVE_DELAY) {
            self.dirty_since = None;
            let path = self.config.state_dir.join(CACHE_FILE);
            let records = self.cache.records();
            if let Err(e) = save(&path, &records) {
                warn!("cannot save the FQDN cache: {e}");
            }
            self.handle.set_records(records);
        }
    }

    /// Names that left the cache are not asked again.
    fn forget_evicted(&mut self, change: &Change) {
        for (name, _) in &change.evicted {
            self.schedule.remove(name);
        }
    }

    /// (Re)schedules the cached names among `names` from their earliest expiry.
    fn reschedule<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        let now = now_ms();
        for name in names {
            if let Some(expiry) = self.cache.earliest_expiry(name) {
                self.schedule.expires(name, now, expiry);
            }
        }
    }

    /// Hands the names due to the re-query worker (only while rules are known: a name is
    /// asked again because a rule selects it).
    fn send_due(&mut self) {
        if self.placements.is_none() {
            return;
        }
        for name in self.schedule.take_due(now_ms()) {
            if !self.cache.contains(&name) {
                self.schedule.remove(&name);
                continue;
            }
            bump(&self.handle.stats.requeries);
            if self.requests.send(name.clone()).is_err() {
                // The worker is gone (it only stops with the process): let the name expire.
                self.schedule.remove(&name);
            }
        }
    }

    /// Asks at once for every name that a rule of `next` names exactly (no wildcard) and no
    /// rule named before, unless it is cached (upstream queries such a name as soon as the
    /// rule is added): the first connection after the rule add then finds the address flows
    /// in place instead of depending on the VM's own query. The answer comes back through the
    /// re-query worker like a re-query's (see [`State::requeried`]).
    fn ask_new_rule_names(&mut self, next: &Placements) {
        let before: BTreeSet<&str> = self
            .placements
            .as_ref()
            .map(|p| p.selectors().iter().map(String::as_str).collect())
            .unwrap_or_default();
        let new: Vec<String> = next
            .selectors()
            .iter()
            .filter(|s| !s.contains('*') && !before.contains(s.as_str()))
            // A selector no name can have (a trailing dot, an empty label) matches nothing:
            // nothing to ask.
            .filter(|s| crate::policy::fqdn_selector::can_match(s))
            .filter(|s| !self.cache.contains(s) && !self.schedule.contains(s))
            .filter(|s| !self.rule_names.contains(*s))
            .cloned()
            .collect();
        for name in new {
            bump(&self.handle.stats.requeries);
            if self.requests.send(name.clone()).is_err() {
                // The worker is gone (it only stops with the process): the VM's own query
                // still fills the cache.
                break;
            }
            debug!(%name, "FQDN: asking for a name a new rule names");
            self.rule_names.insert(name);
        }
    }

    /// An answer (or a failure) of the re-query worker: the same path as an intercepted
    /// answer, without a packet to release.
    async fn requeried(&mut self, switch: &dyn Switch, outcome: Outcome) {
        let now = now_ms();
        let rule_name = self.rule_names.remove(&outcome.name);
        let source = if rule_name {
            Source::RuleName
        } else {
            Source::Requery
        };
        match outcome.answers {
            Ok(answers) => {
                bump(&self.handle.stats.requeries_answered);
                let selectors = self
                    .placements
                    .as_ref()
                    .map(|p| p.selectors().to_vec())
                    .unwrap_or_default();
                let change = self
                    .cache
                    .record_as(&answers, outcome.received_ms, &selectors, source);
                self.handle.stats.count_change(&change);
                if !change.is_empty() {
                    let ips: BTreeSet<IpAddr> = change
                        .added
                        .iter()
                        .chain(&change.removed)
                        .map(|(_, ip)| *ip)
                        .collect();
                    self.apply(switch, ips).await;
                }
                self.forget_evicted(&change);
                let expiry = self.cache.earliest_expiry(&outcome.name);
                self.schedule.done(&outcome.name, true, now, expiry);
                if rule_name {
                    // Not scheduled before (it was not cached): asked again before it expires.
                    self.reschedule([outcome.name.as_str()]);
                }
                let aliases: BTreeSet<&str> = answers
                    .iter()
                    .map(|a| a.name.as_str())
                    .filter(|n| *n != outcome.name)
                    .collect();
                self.reschedule(aliases);
                if change.is_empty() {
                    // Expiries moved: saved (and shown) with the next save, not at every
                    // re-query (the view is O(cache)).
                    self.dirty_since.get_or_insert_with(Instant::now);
                } else {
                    self.changed();
                }
            }
            Err(e) if rule_name => {
                // Not retried: nothing is cached for it, and the VM's own query is held until
                // its addresses are in, as for any name.
                bump(&self.handle.stats.requery_failures);
                info!(name = %outcome.name, "FQDN: a name a new rule names could not be resolved yet: {e}");
            }
            Err(e) => {
                let n = bump(&self.handle.stats.requery_failures);
                if n.is_power_of_two() {
                    warn!(count = n, name = %outcome.name, "FQDN re-query failed (retried while the name is cached): {e}");
                }
                let expiry = self.cache.earliest_expiry(&outcome.name);
                self.schedule.done(&outcome.name, false, now, expiry);
            }
        }
        self.send_due();
    }

    fn changed(&mut self) {
        self.handle.set_records(self.cache.records());
        self.dirty_since.get_or_insert_with(Instant::now);
    }

    /// Commits the flows of `ips`; returns whether the switch took them.
    async fn apply(&mut self, switch: &dyn Switch, ips: BTreeSet<IpAddr>) -> bool {
        let Some(placements) = &self.placements else {
            return true;
        };
        let mods = flows::delta_for_ips(placements, &self.cache, &ips, &mut self.installed);
        if mods.is_empty() {
            return true;
        }
        bump(&self.handle.stats.bundles);
        match switch.bundle(mods).await {
            Ok(()) => {
                self.evict_cached_paths(&ips).await;
                true
            }
            Err(e) => {
                let n = bump(&self.handle.stats.commit_failures);
                warn!(
                    count = n,
                    "FQDN flows not committed (the DNS response is released anyway): {e}"
                );
                // Off the DNS path: the next tick reads the switch again and reconciles.
                self.resync = true;
                false
            }
        }
    }

    /// Deletes the datapath's cached flows toward `ips`, after their flows changed: OVS
    /// revalidates its cache asynchronously, and until then a wide drop megaflow left by an
    /// earlier blocked connection would drop the first packet to a newly allowed address (a
    /// stale allow would let one through to a newly dropped one). A failure is counted and
    /// logged; the answer is released anyway (revalidation catches up within moments).
    async fn evict_cached_paths(&self, ips: &BTreeSet<IpAddr>) {
        let ips: Vec<IpAddr> = ips.iter().copied().collect();
        let evicted = tokio::time::timeout(EVICTION_DEADLINE, self.config.datapath.evict_toward(&ips))
            .await
            .unwrap_or_else(|_| {
                Err(crate::ovs::vswitchd::VswitchdError::Timeout {
                    socket: "ovs-vswitchd".into(),
                    method: format!("evicting the cached flows toward {} addresses", ips.len()),
                })
            });
        match evicted {
            Ok(n) => {
                self.handle
                    .stats
                    .datapath_flows_evicted
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => {
                let n = bump(&self.handle.stats.datapath_evict_failures);
                if n.is_power_of_two() {
                    warn!(
                        count = n,
                        "cannot evict the datapath's cached flows toward new FQDN addresses: {e}"
                    );
                }
            }
        }
    }

    /// All flows against the placements and the cache (after a placement change or a connect).
    async fn reconcile(&mut self, switch: &dyn Switch) {
        let Some(selectors) = self.placements.as_ref().map(|p| p.selectors().to_vec()) else {
            return;
        };
        let change = self.cache.retain_selected(&selectors);
        if !change.evicted.is_empty() {
            self.handle.stats.count_change(&change);
            self.forget_evicted(&change);
            self.changed();
        }
        let Some(placements) = &self.placements else {
            return;
        };
        let desired = flows::desired(placements, &self.cache);
        let mods = flowset::diff(&self.installed, &desired);
        if mods.is_empty() {
            return;
        }
        bump(&self.handle.stats.bundles);
        match switch.bundle(mods).await {
            Ok(()) => {
                debug!(
                    flows = desired.len(),
                    rules = placements.len(),
                    "FQDN flows reconciled"
                );
                self.installed = desired;
            }
            Err(e) => {
                bump(&self.handle.stats.commit_failures);
                warn!("FQDN flows not reconciled: {e}; reading the switch back and retrying");
                // What the switch holds is unknown now: the next tick takes over and reconciles.
                self.resync = true;
            }
        }
    }

    async fn packet_in(&mut self, switch: &dyn Switch, pi: PacketIn) {
        if pi.userdata.first() != Some(&category::DNS) {
            return;
        }
        let paused_at = Instant::now();
        bump(&self.handle.stats.responses);
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.answers_of(&pi)));
        let (answers, source) = match parsed {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                let n = bump(&self.handle.stats.malformed);
                if n.is_power_of_two() {
                    warn!(count = n, "DNS response passed through unparsed: {e}");
                }
                (Vec::new(), Source::Vm)
            }
            Err(_) => {
                bump(&self.handle.stats.malformed);
                warn!("DNS response parsing panicked (a bug); passed through");
                (Vec::new(), Source::Vm)
            }
        };
        let mut committed_at = None;
        if !answers.is_empty() {
            let selectors = self
                .placements
                .as_ref()
                .map(|p| p.selectors().to_vec())
                .unwrap_or_default();
            let change = self.cache.record_as(&answers, now_ms(), &selectors, source);
            self.handle.stats.count_change(&change);
            self.forget_evicted(&change);
            if !change.added.is_empty() || !change.removed.is_empty() {
                let ips: BTreeSet<IpAddr> = change
                    .added
                    .iter()
                    .chain(&change.removed)
                    .map(|(_, ip)| *ip)
                    .collect();
                self.apply(switch, ips).await;
                committed_at = Some(paused_at.elapsed());
            } else if self.catch_up.is_some() {
                // The placements changed and the flows have not caught up yet: an address
                // already cached may still lack its flow under a new or moved rule (the
                // installer's snapshot of the cache can miss the last answers). Make sure of
                // this answer's addresses before releasing it.
                let ips: BTreeSet<IpAddr> = answers.iter().map(|a| a.ip).collect();
                self.apply(switch, ips).await;
            }
        }
        if pi.continuation.is_some() {
            if let Err(e) = switch.resume(pi).await {
                let n = bump(&self.handle.stats.resume_failures);
                warn!(count = n, "cannot resume a paused DNS response: {e}");
            }
        }
        if let Some(committed) = committed_at {
            self.handle.stats.record_hold(committed, paused_at.elapsed());
        }
        if !answers.is_empty() {
            // After the resume, off the held path: the names' next re-query, the API's view
            // and the save.
            let names: BTreeSet<&str> = answers
                .iter()
                .map(|a| a.name.as_str())
                .filter(|n| self.cache.contains(n))
                .collect();
            let names: Vec<String> = names.into_iter().map(str::to_owned).collect();
            self.reschedule(names.iter().map(String::as_str));
            self.send_due();
            if committed_at.is_some() {
                self.changed();
            } else if !names.is_empty() {
                // Expiries moved: saved (and shown) with the next save. (Answers for names no
                // rule selects change nothing.)
                self.dirty_since.get_or_insert_with(Instant::now);
            }
        }
    }

    /// The answers of a packet-in, and whether they answer the VM or the agent's own re-query.
    fn answers_of(&mut self, pi: &PacketIn) -> Result<(Vec<dns::Answer>, Source), dns::DnsError> {
        if (pi.packet.len() as u32) < pi.total_len {
            return Err(dns::DnsError::Truncated {
                got: pi.packet.len(),
                total: pi.total_len as usize,
            });
        }
        match dns::payload(&pi.packet)? {
            Payload::Udp { data, dst_port } => Ok((dns::answers(data)?, self.source_of(dst_port))),
            Payload::Tcp { key, seq, data, end } => {
                let seg = self.tcp.push(key, seq, data, end);
                if seg.dropped {
                    bump(&self.handle.stats.tcp_streams_dropped);
                }
                let mut all = Vec::new();
                for m in seg.messages {
                    all.extend(dns::answers(&m)?);
                }
                Ok((all, self.source_of(key.dst_port)))
            }
        }
    }

    fn source_of(&self, dst_port: u16) -> Source {
        if self.own_ports.contains(dst_port) {
            Source::Requery
        } else {
            Source::Vm
        }
    }
}

#[cfg(test)]
mod tests;
