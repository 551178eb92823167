//! The antrea-controller policy source: the three node-filtered controlplane watches
//! (NetworkPolicies, AppliedToGroups, AddressGroups; antrea-apis.md §3) merged into one stream of
//! [`PolicyUpdate`]s, with the Go agent's client behaviour (§3.4, runtime spec §4.1):
//!
//! * each watch first buffers ADDED objects until the first BOOKMARK, then emits
//!   `Replace{kind, objects}` and `Connection{kind, connected: true}`; other events before the
//!   bookmark are ignored;
//! * live: ADDED/MODIFIED with a full object is an `Upsert`, MODIFIED with a group patch a
//!   `Patch`, DELETED a `Delete`. A patch for a group this watch has not delivered, a later
//!   BOOKMARK, an ERROR, an unknown event type or the end of the body closes the watch
//!   (`Connection{connected: false}`) and opens a new one, which starts with a full snapshot;
//! * attempts start at most every `retry_period` (Go's `NonSlidingUntil(5s)`), jittered by up to
//!   as much again ([`RetryPolicy::CONTROLPLANE_WATCH`]) so that agents which lost the controller
//!   together do not retry together: immediately if the previous attempt lasted longer than its
//!   jittered period, else that long after it started;
//! * a malformed event line or object is an `Error` naming the kind, the object and the problem;
//!   that object is skipped (a previously delivered good version stays) and the watch goes on;
//! * with a [`FallbackStore`], every delivered object (after patches) is saved, and when a watch
//!   cannot be opened before its kind ever synced in this subscription, the saved objects are
//!   emitted as that kind's `Replace` (with `Connection{connected: false}`), so an agent started
//!   while the controller is down enforces the last known policies.
//!
//! The watches run as Tokio tasks started on the first poll of the stream and aborted when the
//! stream is dropped.

use crate::policy::controlplane::Validate as _;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::{PolicySource, PolicyUpdate, SourceError};
use crate::k8s::api::{ApiClient, WatchLines};
use crate::k8s::fallback::FallbackStore;
use crate::policy::controlplane::types::{AddressGroup, AppliedToGroup, GroupMember, GroupPatch, ObjectMeta};
use crate::policy::controlplane::validate::dropped_members;
use crate::policy::controlplane::{
    ControlplaneObject, Group, Kind, MemberKey, MembersPatch, ValidObject, API_VERSION,
};
use crate::retry::RetryPolicy;

/// The kinds watched, in the order their watches start.
pub const WATCHED_KINDS: [Kind; 3] = [Kind::NetworkPolicy, Kind::AppliedToGroup, Kind::AddressGroup];

/// Default [`ControlplaneTiming::max_watch_lifetime`]: past antrea-controller's own 2-4 h.
pub const MAX_WATCH_LIFETIME: Duration = Duration::from_secs(5 * 60 * 60);

/// Retry timing of the watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlplaneTiming {
    /// Minimum time between the starts of two attempts of one watch (Go agent: 5 s), before the
    /// jitter (each period is up to twice this).
    pub retry_period: Duration,
    /// Safety deadline: a watch open this long is closed and reopened (with a full resync).
    /// antrea-controller itself ends each watch after 2 to 4 hours, so this fires only if a
    /// server never does; a dead connection is found by the client's TCP liveness
    /// (`client::Liveness`), not by this timer (a silent watch is normal: nothing changed).
    pub max_watch_lifetime: Duration,
}

impl Default for ControlplaneTiming {
    fn default() -> Self {
        ControlplaneTiming {
            retry_period: RetryPolicy::CONTROLPLANE_WATCH.initial,
            max_watch_lifetime: MAX_WATCH_LIFETIME,
        }
    }
}

/// Policies from antrea-controller's controlplane API, for the node `node_key`.
#[derive(Clone)]
pub struct ControlplaneSource {
    /// The antrea-controller connection (`antreaClientConnection`).
    pub api: Arc<dyn ApiClient>,
    /// `<externalNode namespace>/<externalNode name>` (the controller's span key for a VM).
    pub node_key: String,
    /// Where to save the received objects and read them back when the controller is down at
    /// start; `None` = no fallback.
    pub fallback: Option<FallbackStore>,
    pub timing: ControlplaneTiming,
}

impl std::fmt::Debug for ControlplaneSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlplaneSource")
            .field("api", &self.api.describe())
            .field("node_key", &self.node_key)
            .field("fallback", &self.fallback)
            .field("timing", &self.timing)
            .finish()
    }
}

/// The watch path of `kind` for `node_key` (antrea-apis.md §3.1), e.g.
/// `/apis/controlplane.antrea.io/v1beta2/networkpolicies?fieldSelector=nodeName%3Dvm-ns%2Fvm1&watch=true`.
pub fn watch_path(kind: Kind, node_key: &str) -> String {
    let resource = match kind {
        Kind::NetworkPolicy => "networkpolicies",
        Kind::AppliedToGroup | Kind::AppliedToGroupPatch => "appliedtogroups",
        Kind::AddressGroup | Kind::AddressGroupPatch => "addressgroups",
    };
    let query = serde_urlencoded::to_string([
        ("fieldSelector", format!("nodeName={node_key}").as_str()),
        ("watch", "true"),
    ])
    // Encoding string pairs cannot fail; keep a correct path anyway.
    .unwrap_or_else(|_| "watch=true".into());
    format!("/apis/controlplane.antrea.io/v1beta2/{resource}?{query}")
}

impl ControlplaneSource {
    /// A source with the Go agent's timing and no fallback store.
    pub fn new(api: Arc<dyn ApiClient>, node_key: impl Into<String>) -> Self {
        ControlplaneSource {
            api,
            node_key: node_key.into(),
            fallback: None,
            timing: ControlplaneTiming::default(),
        }
    }

    pub fn with_fallback(mut self, fallback: FallbackStore) -> Self {
        self.fallback = Some(fallback);
        self
    }

    pub fn with_timing(mut self, timing: ControlplaneTiming) -> Self {
        self.timing = timing;
        self
    }
}

impl PolicySource for ControlplaneSource {
    fn subscribe(&self) -> BoxStream<'static, PolicyUpdate> {
        let (tx, rx) = mpsc::unbounded_channel();
        let watchers = WATCHED_KINDS
            .iter()
            .map(|&kind| Watcher {
                kind,
                api: self.api.clone(),
                path: watch_path(kind, &self.node_key),
                fallback: self.fallback.clone(),
                retry_period: self.timing.retry_period,
                max_watch_lifetime: self.timing.max_watch_lifetime,
                tx: tx.clone(),
                tracked: BTreeMap::new(),
                synced: false,
                connected: None,
                fallback_failing: false,
                suspect_restart: false,
                last_bookmark_rv: None,
            })
            .collect();
        UpdateStream {
            rx,
            unstarted: Some(watchers),
            tasks: JoinSet::new(),
        }
        .boxed()
    }

    fn describe(&self) -> String {
        format!(
            "antrea-controller {} (node {})",
            self.api.describe(),
            self.node_key
        )
    }
}

/// The merged stream; owns the watch tasks, which end with it.
struct UpdateStream {
    rx: mpsc::UnboundedReceiver<PolicyUpdate>,
    /// Started on the first poll, where a Tokio runtime is guaranteed to be current.
    unstarted: Option<Vec<Watcher>>,
    /// Dropping a `JoinSet` aborts its tasks.
    tasks: JoinSet<()>,
}

impl Stream for UpdateStream {
    type Item = PolicyUpdate;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PolicyUpdate>> {
        if let Some(watchers) = self.unstarted.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    for w in watchers {
                        self.tasks.spawn_on(w.run(), &handle);
                    }
                }
                Err(e) => {
                    return Poll::Ready(Some(PolicyUpdate::Error(SourceError::NoRuntime(e.to_string()))));
                }
            }
        }
        self.rx.poll_recv(cx)
    }
}

/// What the watch knows of one object it delivered, as it stands after patches.
#[derive(Clone, Debug)]
struct Tracked {
    valid: ValidObject,
    wire: Wire,
}

#[derive(Clone, Debug)]
enum Wire {
    /// A NetworkPolicy as received (unknown fields included).
    Policy(Value),
    /// A group's metadata and members by identity.
    Group {
        meta: ObjectMeta,
        members: BTreeMap<MemberKey, GroupMember>,
    },
}

impl Tracked {
    /// The controller's JSON for the fallback store.
    fn to_json(&self, kind: Kind) -> Value {
        match &self.wire {
            Wire::Policy(v) => v.clone(),
            Wire::Group { meta, members } => {
                let group_members: Vec<GroupMember> = members.values().cloned().collect();
                let encoded = if kind == Kind::AddressGroup {
                    serde_json::to_value(AddressGroup {
                        kind: kind.as_str().into(),
                        api_version: API_VERSION.into(),
                        metadata: meta.clone(),
                        group_members,
                    })
                } else {
                    serde_json::to_value(AppliedToGroup {
                        kind: kind.as_str().into(),
                        api_version: API_VERSION.into(),
                        metadata: meta.clone(),
                        group_members,
                    })
                };
                // These types always serialize (string keys, no floats).
                encoded.unwrap_or(Value::Null)
            }
        }
    }
}

/// The identity of one wire member (validating it alone, exactly as in its group).
fn member_key(member: &GroupMember) -> Option<MemberKey> {
    let probe = AddressGroup {
        metadata: ObjectMeta {
            name: "probe".into(),
            ..ObjectMeta::default()
        },
        group_members: vec![member.clone()],
        ..AddressGroup::default()
    };
    probe.validate().ok()?.members.into_keys().next()
}

fn group_wire(meta: &ObjectMeta, list: &[GroupMember]) -> Wire {
    Wire::Group {
        meta: meta.clone(),
        members: list
            .iter()
            .filter_map(|m| member_key(m).map(|k| (k, m.clone())))
            .collect(),
    }
}

/// Builds the tracked form of a full object of the watched kind.
fn track(raw: Value, object: &ControlplaneObject, valid: ValidObject) -> Tracked {
    let wire = match object {
        ControlplaneObject::AddressGroup(g) => group_wire(&g.metadata, &g.group_members),
        ControlplaneObject::AppliedToGroup(g) => group_wire(&g.metadata, &g.group_members),
        _ => Wire::Policy(raw),
    };
    Tracked { valid, wire }
}

fn apply_patch(tracked: &mut Tracked, wire: &GroupPatch, patch: &MembersPatch) {
    if let ValidObject::AddressGroup(g) | ValidObject::AppliedToGroup(g) = &mut tracked.valid {
        patch_group(std::sync::Arc::make_mut(g), patch);
    }
    if let Wire::Group { members, .. } = &mut tracked.wire {
        // Validation drops bad members, so pair each wire member with its own key.
        for w in &wire.added_group_members {
            if let Some(key) = member_key(w) {
                members.insert(key, w.clone());
            }
        }
        for v in &patch.removed {
            members.remove(&v.key());
        }
    }
}

/// Adds then removes, as the policy store does.
fn patch_group(group: &mut Group, patch: &MembersPatch) {
    for m in &patch.added {
        group.members.insert(m.key(), m.clone());
    }
    for m in &patch.removed {
        group.members.remove(&m.key());
    }
}

fn patch_kind(kind: Kind) -> Option<Kind> {
    match kind {
        Kind::AddressGroup => Some(Kind::AddressGroupPatch),
        Kind::AppliedToGroup => Some(Kind::AppliedToGroupPatch),
        _ => None,
    }
}

/// A decoded watch event.
struct Event {
    kind: String,
    object: Value,
}

fn parse_event(line: &str) -> Result<Event, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("event is not JSON ({e}): {}", excerpt(line)))?;
    let Value::Object(mut map) = value else {
        return Err(format!("event is not a JSON object: {}", excerpt(line)));
    };
    let kind = match map.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(format!("event without a type: {}", excerpt(line))),
    };
    let object = map.remove("object").unwrap_or(Value::Null);
    Ok(Event { kind, object })
}

fn excerpt(line: &str) -> String {
    const MAX: usize = 200;
    match line.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line.to_owned(),
    }
}

fn object_name(object: &Value) -> String {
    object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Why a session ended.
enum End {
    /// Open again after the retry delay.
    Retry,
    /// The subscriber is gone.
    Closed,
}

/// An object event, decoded and validated.
enum Decoded {
    Full(Tracked, String),
    Patch(GroupPatch, MembersPatch),
}

/// One watch (one kind) of one subscription.
struct Watcher {
    kind: Kind,
    api: Arc<dyn ApiClient>,
    path: String,
    fallback: Option<FallbackStore>,
    retry_period: Duration,
    max_watch_lifetime: Duration,
    tx: mpsc::UnboundedSender<PolicyUpdate>,
    /// The objects delivered, after patches: by name.
    tracked: BTreeMap<String, Tracked>,
    /// A `Replace` of this kind was emitted (from the controller or the fallback).
    synced: bool,
    /// The last connection state emitted.
    connected: Option<bool>,
    /// The last fallback write failed (reported once until one succeeds).
    fallback_failing: bool,
    /// Since the last snapshot, the watch broke or could not be opened, or the server's
    /// resourceVersion went backwards: the controller may have restarted and lost the statuses.
    suspect_restart: bool,
    /// The resourceVersion of the last BOOKMARK.
    last_bookmark_rv: Option<u64>,
}

impl Watcher {
    async fn run(mut self) {
        let mut periods = RetryPolicy::constant(self.retry_period).backoff();
        loop {
            let started = tokio::time::Instant::now();
            match self.session().await {
                End::Closed => return,
                End::Retry => {}
            }
            if self.tx.is_closed() {
                return;
            }
            tokio::time::sleep_until(started + periods.next_delay()).await;
        }
    }

    fn send(&self, update: PolicyUpdate) -> Result<(), End> {
        self.tx.send(update).map_err(|_| End::Closed)
    }

    fn error(&self, problem: impl std::fmt::Display) -> Result<(), End> {
        self.send(PolicyUpdate::Error(SourceError::ControlplaneWatch {
            kind: self.kind,
            problem: problem.to_string(),
        }))
    }

    fn set_connected(&mut self, connected: bool) -> Result<(), End> {
        if self.connected != Some(connected) {
            self.connected = Some(connected);
            self.send(PolicyUpdate::Connection {
                kind: self.kind,
                connected,
            })?;
        }
        Ok(())
    }

    async fn session(&mut self) -> End {
        match self.session_inner().await {
            Ok(end) | Err(end) => end,
        }
    }

    async fn session_inner(&mut self) -> Result<End, End> {
        let mut lines = match self.api.watch(&self.path).await {
            Ok(lines) => lines,
            Err(e) => {
                warn!(kind = %self.kind, "cannot watch antrea-controller: {e}");
                self.suspect_restart = true;
                if e.is_unserved() {
                    self.error(format!(
                        "{} does not serve controlplane.antrea.io: antreaClientConnection.kubeconfig \
                         must point at antrea-controller (or at kube-apiserver with Antrea's APIService); \
                         are clientConnection and antreaClientConnection swapped?",
                        self.api.describe()
                    ))?;
                }
                if !self.synced {
                    self.load_fallback().await?;
                }
                self.set_connected(false)?;
                return Ok(End::Retry);
            }
        };
        debug!(kind = %self.kind, path = %self.path, "antrea-controller watch opened");
        let deadline = tokio::time::Instant::now() + self.max_watch_lifetime;
        if !self.initial_snapshot(&mut lines, deadline).await? {
            self.set_connected(false)?;
            return Ok(End::Retry);
        }
        self.live(&mut lines, deadline).await?;
        self.set_connected(false)?;
        Ok(End::Retry)
    }

    /// Buffers ADDED objects until the first BOOKMARK, then emits the `Replace`. False if the
    /// body ended first.
    async fn initial_snapshot(
        &mut self,
        lines: &mut WatchLines,
        deadline: tokio::time::Instant,
    ) -> Result<bool, End> {
        let mut snapshot: BTreeMap<String, Tracked> = BTreeMap::new();
        loop {
            let line = tokio::select! {
                line = lines.next() => line,
                _ = self.tx.closed() => return Err(End::Closed),
                _ = tokio::time::sleep_until(deadline) => {
                    warn!(kind = %self.kind, "antrea-controller watch still without its snapshot at its deadline; reopening");
                    return Ok(false);
                }
            };
            let line = match line {
                Some(Ok(line)) => line,
                Some(Err(e)) => {
                    warn!(kind = %self.kind, "antrea-controller watch failed before its snapshot ended: {e}");
                    self.suspect_restart = true;
                    return Ok(false);
                }
                None => {
                    warn!(kind = %self.kind, "antrea-controller watch ended before its snapshot ended");
                    self.suspect_restart = true;
                    return Ok(false);
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let event = match parse_event(&line) {
                Ok(e) => e,
                Err(problem) => {
                    self.error(problem)?;
                    continue;
                }
            };
            match event.kind.as_str() {
                "ADDED" => {
                    let name = object_name(&event.object);
                    match self.decode(event.object) {
                        Ok(Decoded::Full(tracked, name)) => {
                            snapshot.insert(name, tracked);
                        }
                        Ok(Decoded::Patch(..)) => {
                            self.error(format!("ADDED event carries a patch for {name:?}; ignored"))?;
                        }
                        Err(problem) => {
                            // Keep the last good version rather than deleting it.
                            let kept = self.tracked.get(&name).cloned();
                            let suffix = if kept.is_some() {
                                "; keeping its last good version"
                            } else {
                                ""
                            };
                            self.error(format!("{problem}{suffix}"))?;
                            if let Some(kept) = kept {
                                snapshot.insert(name, kept);
                            }
                        }
                    }
                }
                "BOOKMARK" => {
                    self.note_bookmark(&event.object);
                    break;
                }
                other => debug!(kind = %self.kind, "ignoring a {other} event before the initial BOOKMARK"),
            }
        }
        self.tracked = snapshot;
        if std::mem::take(&mut self.suspect_restart) && self.kind == Kind::NetworkPolicy {
            self.send(PolicyUpdate::ServerMayHaveRestarted)?;
        }
        let objects = self.tracked.values().map(|t| t.valid.clone()).collect();
        self.send(PolicyUpdate::Replace {
            kind: self.kind,
            objects,
        })?;
        self.synced = true;
        self.set_connected(true)?;
        info!(kind = %self.kind, objects = self.tracked.len(), "antrea-controller watch synced");
        let saved: Vec<(String, Value)> = self
            .tracked
            .iter()
            .map(|(n, t)| (n.clone(), t.to_json(self.kind)))
            .collect();
        let kind = self.kind;
        self.persist(move |store| store.replace(kind, saved.iter().map(|(n, v)| (n.as_str(), v))))
            .await?;
        Ok(true)
    }

    /// Applies events until the watch must be reopened.
    async fn live(&mut self, lines: &mut WatchLines, deadline: tokio::time::Instant) -> Result<(), End> {
        loop {
            let line = tokio::select! {
                line = lines.next() => line,
                _ = self.tx.closed() => return Err(End::Closed),
                _ = tokio::time::sleep_until(deadline) => {
                    info!(kind = %self.kind, lifetime = ?self.max_watch_lifetime, "antrea-controller watch reached its safety deadline; reopening");
                    return Ok(());
                }
            };
            let line = match line {
                Some(Ok(line)) => line,
                Some(Err(e)) => {
                    warn!(kind = %self.kind, "antrea-controller watch failed: {e}; reopening");
                    self.suspect_restart = true;
                    return Ok(());
                }
                None => {
                    info!(kind = %self.kind, "antrea-controller watch ended; reopening");
                    return Ok(());
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let event = match parse_event(&line) {
                Ok(e) => e,
                Err(problem) => {
                    self.error(problem)?;
                    continue;
                }
            };
            match event.kind.as_str() {
                "ADDED" | "MODIFIED" => {
                    let name = object_name(&event.object);
                    match self.decode(event.object) {
                        Ok(Decoded::Full(tracked, name)) => self.upsert(name, tracked).await?,
                        Ok(Decoded::Patch(wire, patch)) if event.kind == "MODIFIED" => {
                            if !self.patch(wire, patch).await? {
                                return Ok(());
                            }
                        }
                        Ok(Decoded::Patch(..)) => {
                            self.error(format!("ADDED event carries a patch for {name:?}; ignored"))?;
                        }
                        Err(problem) => {
                            let suffix = if self.tracked.contains_key(&name) {
                                "; keeping its last good version"
                            } else {
                                ""
                            };
                            self.error(format!("{problem}{suffix}"))?;
                        }
                    }
                }
                "DELETED" => {
                    let name = object_name(&event.object);
                    if name.is_empty() {
                        self.error("DELETED event without metadata.name; ignored")?;
                        continue;
                    }
                    self.tracked.remove(&name);
                    self.send(PolicyUpdate::Delete {
                        kind: self.kind,
                        name: name.clone(),
                    })?;
                    let kind = self.kind;
                    self.persist(move |store| store.remove(kind, &name)).await?;
                }
                "ERROR" => {
                    let message = event
                        .object
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no message")
                        .to_owned();
                    warn!(kind = %self.kind, "antrea-controller watch sent an ERROR ({message}); reopening");
                    self.suspect_restart = true;
                    return Ok(());
                }
                other => {
                    warn!(kind = %self.kind, "unexpected {other} event on the antrea-controller watch; reopening");
                    self.suspect_restart = true;
                    return Ok(());
                }
            }
        }
    }

    /// Remembers the snapshot's resourceVersion; one lower than the last means a new server
    /// incarnation (antrea-controller's counters restart with the process).
    fn note_bookmark(&mut self, object: &Value) {
        let rv = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<u64>().ok());
        if let (Some(rv), Some(last)) = (rv, self.last_bookmark_rv) {
            if rv < last {
                self.suspect_restart = true;
            }
        }
        if rv.is_some() {
            self.last_bookmark_rv = rv;
        }
    }

    /// Decodes and validates an event object of this watch. Errors name the object.
    fn decode(&self, raw: Value) -> Result<Decoded, String> {
        let object = ControlplaneObject::from_value(raw.clone()).map_err(|e| e.to_string())?;
        let kind = object.kind();
        if kind != self.kind && Some(kind) != patch_kind(self.kind) {
            return Err(format!(
                "{kind} {:?} does not belong on this watch; ignored",
                object.metadata().name
            ));
        }
        let valid = object.validate().map_err(|e| e.to_string())?;
        // One line per member left out (the subscriber logs it); a subscriber gone ends the
        // watch at its next step anyway.
        for note in dropped_members(&object) {
            let _ = self.error(note);
        }
        match (object, valid) {
            (ControlplaneObject::AddressGroupPatch(w), ValidObject::AddressGroupPatch(p))
            | (ControlplaneObject::AppliedToGroupPatch(w), ValidObject::AppliedToGroupPatch(p)) => {
                Ok(Decoded::Patch(w, p))
            }
            (object, valid) => {
                let name = object.metadata().name.clone();
                Ok(Decoded::Full(track(raw, &object, valid), name))
            }
        }
    }

    async fn upsert(&mut self, name: String, tracked: Tracked) -> Result<(), End> {
        self.send(PolicyUpdate::Upsert(tracked.valid.clone()))?;
        let json = tracked.to_json(self.kind);
        self.tracked.insert(name.clone(), tracked);
        let kind = self.kind;
        self.persist(move |store| store.save(kind, &name, &json)).await
    }

    /// Applies a group patch; false when the group is unknown (the watch must resync).
    async fn patch(&mut self, wire: GroupPatch, patch: MembersPatch) -> Result<bool, End> {
        let name = patch.name.clone();
        let Some(tracked) = self.tracked.get_mut(&name) else {
            self.error(format!(
                "patch for unknown {} {name:?}; reopening the watch to resync",
                self.kind
            ))?;
            return Ok(false);
        };
        apply_patch(tracked, &wire, &patch);
        let json = tracked.to_json(self.kind);
        self.send(PolicyUpdate::Patch {
            kind: self.kind,
            patch,
        })?;
        let kind = self.kind;
        self.persist(move |store| store.save(kind, &name, &json)).await?;
        Ok(true)
    }

    /// Runs a fallback store write off the async thread; a failure is reported once until a
    /// write succeeds again (the in-memory state is unaffected).
    async fn persist<F>(&mut self, write: F) -> Result<(), End>
    where
        F: FnOnce(&FallbackStore) -> Result<(), crate::k8s::fallback::FallbackError> + Send + 'static,
    {
        let Some(store) = self.fallback.clone() else {
            return Ok(());
        };
        let result = match tokio::task::spawn_blocking(move || write(&store)).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("fallback store write task failed: {e}")),
        };
        match result {
            Ok(()) => self.fallback_failing = false,
            Err(e) => {
                warn!(kind = %self.kind, "{e}");
                if !self.fallback_failing {
                    self.fallback_failing = true;
                    self.error(e)?;
                }
            }
        }
        Ok(())
    }

    /// Emits the saved objects of this kind as its snapshot (the controller is unreachable and
    /// this kind never synced in this subscription).
    async fn load_fallback(&mut self) -> Result<(), End> {
        let Some(store) = self.fallback.clone() else {
            return Ok(());
        };
        let kind = self.kind;
        let loaded = match tokio::task::spawn_blocking(move || store.load(kind)).await {
            Ok(Ok(loaded)) => loaded,
            Ok(Err(e)) => return self.error(e),
            Err(e) => return self.error(format!("fallback store read task failed: {e}")),
        };
        let Some(loaded) = loaded else {
            info!(kind = %self.kind, "antrea-controller unreachable and no saved objects of this kind");
            return Ok(());
        };
        for e in &loaded.errors {
            self.error(e)?;
        }
        let mut tracked = BTreeMap::new();
        for object in loaded.objects {
            let name = object_name(&object.wire);
            // `load` decoded it already; decode again to the tracked form.
            match ControlplaneObject::from_value(object.wire.clone()) {
                Ok(decoded) => {
                    tracked.insert(name, track(object.wire, &decoded, object.valid));
                }
                Err(e) => self.error(format!("fallback file {}: {e}", object.path.display()))?,
            }
        }
        self.tracked = tracked;
        let objects = self.tracked.values().map(|t| t.valid.clone()).collect();
        self.send(PolicyUpdate::Replace { kind, objects })?;
        self.synced = true;
        info!(kind = %self.kind, objects = self.tracked.len(), "antrea-controller unreachable: using the saved objects");
        Ok(())
    }
}

/// The kind a [`PolicyUpdate`] of this source is about: its own kind, the kind of the upserted
/// object, or for an error the watch it names; `None` otherwise.
pub fn update_kind(update: &PolicyUpdate) -> Option<Kind> {
    match update {
        PolicyUpdate::Replace { kind, .. }
        | PolicyUpdate::Patch { kind, .. }
        | PolicyUpdate::Delete { kind, .. }
        | PolicyUpdate::Connection { kind, .. } => Some(*kind),
        PolicyUpdate::Upsert(ValidObject::NetworkPolicy(_)) | PolicyUpdate::ServerMayHaveRestarted => {
            Some(Kind::NetworkPolicy)
        }
        PolicyUpdate::Upsert(ValidObject::AddressGroup(_)) => Some(Kind::AddressGroup),
        PolicyUpdate::Upsert(ValidObject::AppliedToGroup(_)) => Some(Kind::AppliedToGroup),
        PolicyUpdate::Error(e) => e.watch_kind(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
