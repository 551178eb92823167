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
//! * attempts start at most every `retry_period` (Go's `NonSlidingUntil(5s)`): immediately if
//!   the previous attempt lasted longer, else `retry_period` after it started;
//! * a malformed event line or object is an `Error` naming the kind, the object and the problem;
//!   that object is skipped (a previously delivered good version stays) and the watch goes on;
//! * with a [`FallbackStore`], every delivered object (after patches) is saved, and when a watch
//!   cannot be opened before its kind ever synced in this subscription, the saved objects are
//!   emitted as that kind's `Replace` (with `Connection{connected: false}`), so an agent started
//!   while the controller is down enforces the last known policies.
//!
//! The watches run as Tokio tasks started on the first poll of the stream and aborted when the
//! stream is dropped.

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

use super::api::{ApiClient, WatchLines};
use super::fallback::FallbackStore;
use crate::policy::controlplane::types::{AddressGroup, AppliedToGroup, GroupMember, GroupPatch, ObjectMeta};
use crate::policy::controlplane::validate::dropped_members;
use crate::policy::controlplane::{
    ControlplaneObject, Group, Kind, MemberKey, MembersPatch, ValidObject, API_VERSION,
};
use crate::sources::{PolicySource, PolicyUpdate};

/// The kinds watched, in the order their watches start.
pub const WATCHED_KINDS: [Kind; 3] = [Kind::NetworkPolicy, Kind::AppliedToGroup, Kind::AddressGroup];

/// Default [`ControlplaneTiming::max_watch_lifetime`]: past antrea-controller's own 2-4 h.
pub const MAX_WATCH_LIFETIME: Duration = Duration::from_secs(5 * 60 * 60);

/// Retry timing of the watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlplaneTiming {
    /// Minimum time between the starts of two attempts of one watch (Go agent: 5 s).
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
            retry_period: Duration::from_secs(5),
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
                    return Poll::Ready(Some(PolicyUpdate::Error(format!(
                        "antrea-controller watches need a Tokio runtime: {e}"
                    ))));
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
        patch_group(g, patch);
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
        loop {
            let started = tokio::time::Instant::now();
            match self.session().await {
                End::Closed => return,
                End::Retry => {}
            }
            if self.tx.is_closed() {
                return;
            }
            tokio::time::sleep_until(started + self.retry_period).await;
        }
    }

    fn send(&self, update: PolicyUpdate) -> Result<(), End> {
        self.tx.send(update).map_err(|_| End::Closed)
    }

    fn error(&self, problem: impl std::fmt::Display) -> Result<(), End> {
        let message = format!("antrea-controller {} watch: {problem}", self.kind);
        self.send(PolicyUpdate::Error(message))
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
        F: FnOnce(&FallbackStore) -> Result<(), super::fallback::FallbackError> + Send + 'static,
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
/// object, or for an error the watch named at the start of the message; `None` otherwise.
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
        PolicyUpdate::Error(e) => WATCHED_KINDS
            .into_iter()
            .find(|k| e.starts_with(&format!("antrea-controller {k} watch"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::fake_api::{FakeApi, WatchFeed};
    use serde_json::json;

    const T: Duration = Duration::from_secs(10);
    const NP: &str = include_str!("../policy/controlplane/testdata/np_annp1.json");
    const ATG: &str = include_str!("../policy/controlplane/testdata/atg.json");
    const ATG_PATCH: &str = include_str!("../policy/controlplane/testdata/atg_patch.json");
    const AG: &str = include_str!("../policy/controlplane/testdata/ag.json");
    const AG_PATCH: &str = include_str!("../policy/controlplane/testdata/ag_patch.json");
    const NPS: &str = "/apis/controlplane.antrea.io/v1beta2/networkpolicies";
    const ATGS: &str = "/apis/controlplane.antrea.io/v1beta2/appliedtogroups";
    const AGS: &str = "/apis/controlplane.antrea.io/v1beta2/addressgroups";

    fn obj(text: &str, name: &str) -> Value {
        let mut v: Value = serde_json::from_str(text).unwrap();
        v["metadata"]["name"] = json!(name);
        v["metadata"]["uid"] = json!(name);
        v
    }

    fn valid(v: &Value) -> ValidObject {
        ControlplaneObject::from_value(v.clone())
            .unwrap()
            .validate()
            .unwrap()
    }

    fn line(kind: &str, object: &Value) -> String {
        json!({"type": kind, "object": object}).to_string()
    }

    fn bookmark(kind: &str) -> String {
        line(
            "BOOKMARK",
            &json!({"kind": kind, "apiVersion": API_VERSION, "metadata": {"resourceVersion": "7"}}),
        )
    }

    fn send(feed: &WatchFeed, lines: &[String]) {
        for l in lines {
            feed.send(Ok(l.clone())).unwrap();
        }
    }

    fn source(api: &FakeApi, fallback: Option<FallbackStore>) -> ControlplaneSource {
        let mut s =
            ControlplaneSource::new(Arc::new(api.clone()), "vm-ns/vm1").with_timing(ControlplaneTiming {
                retry_period: Duration::from_millis(20),
                ..ControlplaneTiming::default()
            });
        s.fallback = fallback;
        s
    }

    /// A subscription whose updates tests read per kind.
    struct Updates {
        stream: BoxStream<'static, PolicyUpdate>,
        /// Updates about other kinds than the one last waited for, in arrival order.
        held: Vec<PolicyUpdate>,
    }

    fn updates(src: &ControlplaneSource) -> Updates {
        Updates {
            stream: src.subscribe(),
            held: Vec::new(),
        }
    }

    /// The next update about `kind` (the three watches are concurrent: updates about other kinds
    /// are held for later), bounded.
    async fn next(updates: &mut Updates, kind: Kind) -> PolicyUpdate {
        if let Some(i) = updates.held.iter().position(|u| update_kind(u) == Some(kind)) {
            return updates.held.remove(i);
        }
        let wait = async {
            loop {
                let u = updates.stream.next().await.expect("the stream ended");
                if update_kind(&u) == Some(kind) {
                    return u;
                }
                updates.held.push(u);
            }
        };
        tokio::time::timeout(T, wait)
            .await
            .unwrap_or_else(|_| panic!("no update about {kind} within {T:?}"))
    }

    fn connection(kind: Kind, connected: bool) -> PolicyUpdate {
        PolicyUpdate::Connection { kind, connected }
    }

    #[test]
    fn watch_paths_filter_on_the_urlencoded_node_key() {
        assert_eq!(
            watch_path(Kind::NetworkPolicy, "vm-ns/vm1"),
            "/apis/controlplane.antrea.io/v1beta2/networkpolicies?fieldSelector=nodeName%3Dvm-ns%2Fvm1&watch=true"
        );
        assert_eq!(
            watch_path(Kind::AppliedToGroup, "vm-ns/vm1"),
            "/apis/controlplane.antrea.io/v1beta2/appliedtogroups?fieldSelector=nodeName%3Dvm-ns%2Fvm1&watch=true"
        );
        assert_eq!(
            watch_path(Kind::AddressGroup, "a&b/c=d"),
            "/apis/controlplane.antrea.io/v1beta2/addressgroups?fieldSelector=nodeName%3Da%26b%2Fc%3Dd&watch=true"
        );
    }

    #[tokio::test]
    async fn opens_the_three_node_filtered_watches() {
        let api = FakeApi::named("https://10.0.0.1:443");
        let src = source(&api, None);
        assert_eq!(
            src.describe(),
            "antrea-controller https://10.0.0.1:443 (node vm-ns/vm1)"
        );
        let mut stream = updates(&src);
        // Nothing answers: each kind reports "not connected" once.
        for kind in WATCHED_KINDS {
            assert_eq!(next(&mut stream, kind).await, connection(kind, false));
        }
        for (prefix, kind) in [
            (NPS, Kind::NetworkPolicy),
            (ATGS, Kind::AppliedToGroup),
            (AGS, Kind::AddressGroup),
        ] {
            let paths = api.wait_for_watches(prefix, 2, T).await.unwrap();
            assert!(
                paths.iter().all(|p| *p == watch_path(kind, "vm-ns/vm1")),
                "{paths:?}"
            );
        }
        assert!(api
            .calls()
            .iter()
            .all(|c| c.watch && c.method == crate::k8s::api::Method::Get));
    }

    #[tokio::test]
    async fn a_watch_is_reopened_at_its_safety_deadline_whether_busy_or_silent() {
        // Hours by default, past antrea-controller's own 2-4 h: silence alone never reopens.
        assert!(ControlplaneTiming::default().max_watch_lifetime >= Duration::from_secs(4 * 3600));
        let api = FakeApi::new();
        // The first watch delivers its snapshot, then a live event, and its body stays open.
        let atgs = api.watch_stream(ATGS);
        let _second = api.watch_stream(ATGS);
        let mut src = source(&api, None);
        src.timing.max_watch_lifetime = Duration::from_millis(400);
        let mut stream = updates(&src);
        send(&atgs, &[bookmark("AppliedToGroup")]);
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AppliedToGroup,
                objects: vec![]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            connection(Kind::AppliedToGroup, true)
        );
        send(&atgs, &[line("ADDED", &obj(ATG, "a"))]);
        assert!(matches!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Upsert(_)
        ));
        // The deadline counts from the open, not from the last event: the watch is reported
        // down and reopened, though the server never closed it.
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            connection(Kind::AppliedToGroup, false)
        );
        api.wait_for_watches(ATGS, 2, T).await.unwrap();
        assert!(atgs.is_closed(), "the silent body was dropped");
    }

    #[tokio::test]
    async fn snapshot_is_buffered_until_the_bookmark_then_live_events_apply() {
        let api = FakeApi::new();
        let atgs = api.watch_stream(ATGS);
        let nps = api.watch_stream(NPS);
        let mut stream = updates(&source(&api, None));

        let (atg_a, atg_b) = (obj(ATG, "atg-a"), obj(ATG, "ns/atg-b"));
        let patch_a = obj(ATG_PATCH, "atg-a");
        send(
            &atgs,
            &[
                // Before the bookmark only ADDED counts.
                line("MODIFIED", &patch_a),
                line("DELETED", &atg_a),
                line("ADDED", &atg_b),
                line("ADDED", &atg_a),
            ],
        );
        tokio::task::yield_now().await;
        send(&atgs, &[bookmark("AppliedToGroup")]);
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AppliedToGroup,
                objects: vec![valid(&atg_a), valid(&atg_b)]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            connection(Kind::AppliedToGroup, true)
        );

        // Live: patch, add, full modify, delete.
        let atg_c = obj(ATG, "atg-c");
        let mut atg_b2 = atg_b.clone();
        atg_b2["groupMembers"] = json!([{"externalEntity": {"name": "vm9", "namespace": "vm-ns"}}]);
        send(
            &atgs,
            &[
                line("MODIFIED", &patch_a),
                line("ADDED", &atg_c),
                line("MODIFIED", &atg_b2),
                line(
                    "DELETED",
                    &json!({"kind": "AppliedToGroup", "metadata": {"name": "atg-c"}}),
                ),
            ],
        );
        let ValidObject::AppliedToGroupPatch(p) = valid(&patch_a) else {
            panic!()
        };
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Patch {
                kind: Kind::AppliedToGroup,
                patch: p
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Upsert(valid(&atg_c))
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Upsert(valid(&atg_b2))
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Delete {
                kind: Kind::AppliedToGroup,
                name: "atg-c".into()
            }
        );

        // NetworkPolicies: empty snapshot, then ADDED, MODIFIED (full object), DELETED.
        let np: Value = serde_json::from_str(NP).unwrap();
        let mut np2 = np.clone();
        np2["metadata"]["generation"] = json!(2);
        let deleted: Value = serde_json::from_str(
            include_str!("../policy/controlplane/testdata/watch_events.jsonl")
                .lines()
                .nth(5)
                .unwrap(),
        )
        .unwrap();
        send(
            &nps,
            &[
                bookmark("NetworkPolicy"),
                line("ADDED", &np),
                line("MODIFIED", &np2),
                deleted.to_string(),
            ],
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Replace {
                kind: Kind::NetworkPolicy,
                objects: vec![]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            connection(Kind::NetworkPolicy, true)
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Upsert(valid(&np))
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Upsert(valid(&np2))
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Delete {
                kind: Kind::NetworkPolicy,
                name: "5d5b6c7e-0f0a-4c43-9d61-2a1f9e3c4b10".into()
            }
        );
        // Still the first session of each watch.
        assert_eq!(api.watch_paths(ATGS).len(), 1);
        assert_eq!(api.watch_paths(NPS).len(), 1);
    }

    #[tokio::test]
    async fn a_closed_body_reconnects_with_a_full_resync() {
        let api = FakeApi::new();
        let first = api.watch_stream(AGS);
        let (ag1, ag2) = (obj(AG, "ag1"), obj(AG, "ag2"));
        send(
            &first,
            &[line("ADDED", &ag1), line("ADDED", &ag2), bookmark("AddressGroup")],
        );
        let mut stream = updates(&source(&api, None));
        assert!(
            matches!(next(&mut stream, Kind::AddressGroup).await, PolicyUpdate::Replace { ref objects, .. } if objects.len() == 2)
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );

        // The controller restarts: the body ends; the next snapshot lacks ag1, so the cache's
        // Replace deletes it.
        let second = api.watch_stream(AGS);
        send(&second, &[line("ADDED", &ag2), bookmark("AddressGroup")]);
        drop(first);
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, false)
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AddressGroup,
                objects: vec![valid(&ag2)]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );
        assert_eq!(api.watch_paths(AGS).len(), 2);

        // A transport error ends the body the same way; a body that ends before its bookmark
        // gives nothing and is retried.
        let third = api.watch_stream(AGS);
        send(&third, &[line("ADDED", &ag1)]);
        drop(third);
        let fourth = api.watch_stream(AGS);
        send(&fourth, &[line("ADDED", &ag1), bookmark("AddressGroup")]);
        second.send(Err(FakeApi::transport("connection reset"))).unwrap();
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, false)
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AddressGroup,
                objects: vec![valid(&ag1)]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );
        assert_eq!(api.watch_paths(AGS).len(), 4);
    }

    #[tokio::test]
    async fn a_patch_for_an_unknown_group_reopens_the_watch() {
        let api = FakeApi::new();
        let first = api.watch_stream(AGS);
        let ag1 = obj(AG, "ag1");
        send(
            &first,
            &[
                line("ADDED", &ag1),
                bookmark("AddressGroup"),
                line("MODIFIED", &obj(AG_PATCH, "nope")),
            ],
        );
        let second = api.watch_stream(AGS);
        send(&second, &[line("ADDED", &ag1), bookmark("AddressGroup")]);
        let mut stream = updates(&source(&api, None));
        assert!(matches!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Replace { .. }
        ));
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );
        let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
            panic!()
        };
        assert_eq!(e, "antrea-controller AddressGroup watch: patch for unknown AddressGroup \"nope\"; reopening the watch to resync");
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, false)
        );
        assert!(matches!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Replace { .. }
        ));
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );
        assert_eq!(api.watch_paths(AGS).len(), 2);
        // The first body was dropped by the watcher.
        assert!(first.is_closed());
    }

    #[tokio::test]
    async fn error_and_late_bookmark_events_reopen_the_watch() {
        let api = FakeApi::new();
        let status = json!({"kind": "Status", "status": "Failure", "message": "too old", "code": 410});
        for end in [
            line("ERROR", &status),
            bookmark("NetworkPolicy"),
            line("SURPRISE", &json!({})),
        ] {
            let feed = api.watch_stream(NPS);
            send(&feed, &[bookmark("NetworkPolicy"), end]);
        }
        let last = api.watch_stream(NPS);
        send(&last, &[bookmark("NetworkPolicy")]);
        let mut stream = updates(&source(&api, None));
        for i in 0..3 {
            if i > 0 {
                // Each of these ends is abnormal: the controller may have lost the statuses.
                assert_eq!(
                    next(&mut stream, Kind::NetworkPolicy).await,
                    PolicyUpdate::ServerMayHaveRestarted
                );
            }
            assert!(matches!(
                next(&mut stream, Kind::NetworkPolicy).await,
                PolicyUpdate::Replace { .. }
            ));
            assert_eq!(
                next(&mut stream, Kind::NetworkPolicy).await,
                connection(Kind::NetworkPolicy, true)
            );
            assert_eq!(
                next(&mut stream, Kind::NetworkPolicy).await,
                connection(Kind::NetworkPolicy, false)
            );
        }
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::ServerMayHaveRestarted
        );
        assert!(matches!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Replace { .. }
        ));
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            connection(Kind::NetworkPolicy, true)
        );
        assert_eq!(api.watch_paths(NPS).len(), 4);
    }

    fn bookmark_at(kind: &str, rv: &str) -> String {
        line(
            "BOOKMARK",
            &json!({"kind": kind, "apiVersion": API_VERSION, "metadata": {"resourceVersion": rv}}),
        )
    }

    #[tokio::test]
    async fn only_a_broken_watch_or_a_new_server_incarnation_says_statuses_may_be_lost() {
        let api = FakeApi::new();
        // 1: synced at rv 7, then closed cleanly by the server.
        let first = api.watch_stream(NPS);
        // 2: rv 9 (still the same server), then the connection breaks.
        let second = api.watch_stream(NPS);
        // 3: rv 9 again after the break; closed cleanly.
        let third = api.watch_stream(NPS);
        // 4: rv 2, lower than before: a restarted controller.
        let fourth = api.watch_stream(NPS);
        send(&first, &[bookmark_at("NetworkPolicy", "7")]);
        send(&second, &[bookmark_at("NetworkPolicy", "9")]);
        send(&third, &[bookmark_at("NetworkPolicy", "9")]);
        send(&fourth, &[bookmark_at("NetworkPolicy", "2")]);
        let mut stream = updates(&source(&api, None));
        let mut seen = Vec::new();
        let mut feeds = vec![first, second, third];
        let ends: [Option<&str>; 3] = [None, Some("connection reset"), None];
        for end in ends {
            loop {
                let u = next(&mut stream, Kind::NetworkPolicy).await;
                let synced = matches!(u, PolicyUpdate::Connection { connected: true, .. });
                seen.push(u);
                if synced {
                    break;
                }
            }
            let feed = feeds.remove(0);
            if let Some(message) = end {
                feed.send(Err(crate::k8s::api::ApiError::Transport {
                    method: "GET",
                    path: NPS.into(),
                    message: message.into(),
                }))
                .unwrap();
            }
            drop(feed);
        }
        loop {
            let u = next(&mut stream, Kind::NetworkPolicy).await;
            let synced = matches!(u, PolicyUpdate::Connection { connected: true, .. });
            seen.push(u);
            if synced {
                break;
            }
        }
        let marks: Vec<&str> = seen
            .iter()
            .filter_map(|u| match u {
                PolicyUpdate::Replace { .. } => Some("replace"),
                PolicyUpdate::ServerMayHaveRestarted => Some("restart?"),
                _ => None,
            })
            .collect();
        assert_eq!(
            marks,
            ["replace", "replace", "restart?", "replace", "restart?", "replace"],
            "{seen:#?}"
        );
        drop(fourth);
    }

    #[tokio::test]
    async fn a_failed_open_is_retried() {
        let api = FakeApi::new();
        api.watch_fails(ATGS, FakeApi::status(500, "InternalError", "etcd down"));
        let feed = api.watch_stream(ATGS);
        send(
            &feed,
            &[line("ADDED", &obj(ATG, "a")), bookmark("AppliedToGroup")],
        );
        let mut stream = updates(&source(&api, None));
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            connection(Kind::AppliedToGroup, false)
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AppliedToGroup,
                objects: vec![valid(&obj(ATG, "a"))]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AppliedToGroup).await,
            connection(Kind::AppliedToGroup, true)
        );
        assert_eq!(api.watch_paths(ATGS).len(), 2);
    }

    #[tokio::test]
    async fn bad_lines_and_objects_are_reported_and_skipped() {
        let api = FakeApi::new();
        let first = api.watch_stream(AGS);
        let good = obj(AG, "good");
        // Not a group at all (a bad member alone would only be left out: see below).
        let mut bad = obj(AG, "bad");
        bad["groupMembers"] = json!("oops");
        send(
            &first,
            &[
                "not json".into(),
                line("ADDED", &bad),
                line("ADDED", &good),
                bookmark("AddressGroup"),
                r#"{"object": {}}"#.into(),
                line(
                    "ADDED",
                    &json!({"kind": "NetworkPolicy", "apiVersion": API_VERSION, "metadata": {"name": "np"}}),
                ),
                line("MODIFIED", &bad),
                line("ADDED", &obj(AG, "after")),
            ],
        );
        let mut stream = updates(&source(&api, None));
        let mut errors = Vec::new();
        let mut updates = Vec::new();
        while updates.len() < 3 {
            match next(&mut stream, Kind::AddressGroup).await {
                PolicyUpdate::Error(e) => errors.push(e),
                u => updates.push(u),
            }
        }
        assert_eq!(
            updates,
            [
                PolicyUpdate::Replace {
                    kind: Kind::AddressGroup,
                    objects: vec![valid(&good)]
                },
                connection(Kind::AddressGroup, true),
                PolicyUpdate::Upsert(valid(&obj(AG, "after")))
            ]
        );
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(
            errors[0].starts_with("antrea-controller AddressGroup watch: event is not JSON"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].starts_with("antrea-controller AddressGroup watch: AddressGroup \"bad\": invalid type"),
            "{}",
            errors[1]
        );
        assert!(errors[2].contains("event without a type"), "{}", errors[2]);
        assert!(
            errors[3].contains("NetworkPolicy \"np\" does not belong on this watch"),
            "{}",
            errors[3]
        );
        assert!(
            errors[4].contains("AddressGroup \"bad\": invalid type"),
            "{}",
            errors[4]
        );

        // A resync where a known object turned bad keeps its last good version.
        let second = api.watch_stream(AGS);
        let mut good_now_bad = bad.clone();
        good_now_bad["metadata"]["name"] = json!("good");
        send(&second, &[line("ADDED", &good_now_bad), bookmark("AddressGroup")]);
        drop(first);
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, false)
        );
        let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
            panic!()
        };
        assert!(
            e.contains("AddressGroup \"good\":") && e.ends_with("keeping its last good version"),
            "{e}"
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AddressGroup,
                objects: vec![valid(&good)]
            }
        );
    }

    #[tokio::test]
    async fn a_bad_member_is_left_out_and_named_and_its_group_stands() {
        let api = FakeApi::new();
        let feed = api.watch_stream(AGS);
        let mut mixed = obj(AG, "mixed");
        let members = mixed["groupMembers"].as_array().unwrap().len();
        assert!(members >= 2, "the fixture has several members");
        mixed["groupMembers"][0]["ips"] = json!(["AAE="]);
        // An unnamed port of port 0, as the controller copies it from an ExternalEntity.
        mixed["groupMembers"][1]["ports"] = json!([{"port": 0, "protocol": "TCP"}]);
        let mut patch = obj(AG_PATCH, "mixed");
        patch["addedGroupMembers"] = json!([
            {"externalEntity": {"name": "vm9", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//rBBkCQ=="]},
            {"externalEntity": {"name": "vm8"}, "ips": ["AAAAAAAAAAAAAP//rBBkCA=="]}
        ]);
        patch["removedGroupMembers"] = json!([]);
        send(
            &feed,
            &[
                line("ADDED", &mixed),
                bookmark("AddressGroup"),
                line("MODIFIED", &patch),
            ],
        );
        let mut stream = updates(&source(&api, None));
        let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
            panic!("the dropped member is named")
        };
        assert!(
            e.contains("AddressGroup mixed: groupMembers[0] (")
                && e.contains("dropped: groupMembers[0].ips[0]"),
            "{e}"
        );
        let PolicyUpdate::Replace { objects, .. } = next(&mut stream, Kind::AddressGroup).await else {
            panic!("the group is delivered")
        };
        let ValidObject::AddressGroup(g) = &objects[0] else {
            panic!()
        };
        assert_eq!(g.members.len(), members - 1);
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );
        let PolicyUpdate::Error(e) = next(&mut stream, Kind::AddressGroup).await else {
            panic!("the patch's bad member is named")
        };
        assert!(
            e.contains("addedGroupMembers[1] (externalEntity /vm8) dropped"),
            "{e}"
        );
        let PolicyUpdate::Patch { patch, .. } = next(&mut stream, Kind::AddressGroup).await else {
            panic!("the rest of the patch applies")
        };
        assert_eq!(patch.added.len(), 1);
    }

    #[tokio::test]
    async fn dropping_the_stream_stops_the_watches() {
        let api = FakeApi::new();
        let feeds: Vec<WatchFeed> = [NPS, ATGS, AGS].iter().map(|p| api.watch_stream(p)).collect();
        let mut stream = updates(&source(&api, None));
        send(&feeds[0], &[bookmark("NetworkPolicy")]);
        assert!(matches!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Replace { .. }
        ));
        api.wait_for_watches("/apis/controlplane.antrea.io/", 3, T)
            .await
            .unwrap();
        drop(stream);
        for feed in &feeds {
            tokio::time::timeout(T, feed.closed())
                .await
                .expect("a watch body stayed open");
        }
        // And no watch is opened again.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(api.watch_paths("/apis/controlplane.antrea.io/").len(), 3);
    }

    fn dir_files(store: &FallbackStore, kind: Kind) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(store.kind_dir(kind).unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn the_fallback_store_is_written_and_used_when_the_controller_is_down_at_start() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FallbackStore::in_state_dir(tmp.path());
        let api = FakeApi::new();
        let (nps, atgs, ags) = (
            api.watch_stream(NPS),
            api.watch_stream(ATGS),
            api.watch_stream(AGS),
        );
        let np: Value = serde_json::from_str(NP).unwrap();
        let np_name = np["metadata"]["name"].as_str().unwrap().to_owned();
        let np_gone = obj(NP, "gone");
        let (atg, ag, ag_old) = (obj(ATG, "ns/atg"), obj(AG, "ag"), obj(AG, "ag-old"));
        let mut stream = updates(&source(&api, Some(store.clone())));
        send(
            &nps,
            &[
                line("ADDED", &np),
                line("ADDED", &np_gone),
                bookmark("NetworkPolicy"),
            ],
        );
        send(&atgs, &[line("ADDED", &atg), bookmark("AppliedToGroup")]);
        send(
            &ags,
            &[
                line("ADDED", &ag),
                line("ADDED", &ag_old),
                bookmark("AddressGroup"),
            ],
        );
        for kind in WATCHED_KINDS {
            assert!(matches!(
                next(&mut stream, kind).await,
                PolicyUpdate::Replace { .. }
            ));
            assert_eq!(next(&mut stream, kind).await, connection(kind, true));
        }
        // Changes: a policy and a group deleted, a group patched.
        send(
            &nps,
            &[line(
                "DELETED",
                &json!({"kind": "NetworkPolicy", "metadata": {"name": "gone"}}),
            )],
        );
        send(
            &ags,
            &[line(
                "DELETED",
                &json!({"kind": "AddressGroup", "metadata": {"name": "ag-old"}}),
            )],
        );
        send(&ags, &[line("MODIFIED", &obj(AG_PATCH, "ag"))]);
        send(&atgs, &[line("MODIFIED", &obj(ATG_PATCH, "ns/atg"))]);
        assert!(matches!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Delete { .. }
        ));
        assert!(matches!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Delete { .. }
        ));
        assert!(matches!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Patch { .. }
        ));
        assert!(matches!(
            next(&mut stream, Kind::AppliedToGroup).await,
            PolicyUpdate::Patch { .. }
        ));
        // Writes follow their update; one more round trip on each watch makes sure they are done.
        for (feed, kind, k) in [
            (&nps, "NetworkPolicy", Kind::NetworkPolicy),
            (&ags, "AddressGroup", Kind::AddressGroup),
            (&atgs, "AppliedToGroup", Kind::AppliedToGroup),
        ] {
            send(feed, &["garbage".to_string()]);
            assert!(
                matches!(next(&mut stream, k).await, PolicyUpdate::Error(_)),
                "{kind}"
            );
        }
        drop(stream);
        assert_eq!(
            dir_files(&store, Kind::NetworkPolicy),
            [format!("{np_name}.json")]
        );
        assert_eq!(dir_files(&store, Kind::AppliedToGroup), ["ns%2Fatg.json"]);
        assert_eq!(dir_files(&store, Kind::AddressGroup), ["ag.json"]);

        // Restart with the controller down: each kind's Replace comes from the store, patched.
        let down = FakeApi::new();
        down.set_default_error(|m, p| crate::k8s::api::ApiError::Transport {
            method: m.as_str(),
            path: p.into(),
            message: "connection refused".into(),
        });
        let mut stream = updates(&source(&down, Some(store.clone())));
        let patched_ag = json!({
            "kind": "AddressGroup", "apiVersion": API_VERSION,
            "metadata": {"name": "ag", "uid": "ag"},
            "groupMembers": [
                {"externalEntity": {"name": "vm2-e8be5", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//rBBkBA=="]},
                {"pod": {"name": "front-7d9f", "namespace": "vm-ns"}, "ips": ["AAAAAAAAAAAAAP//CgoBBQ=="]}
            ]
        });
        let patched_atg = json!({
            "kind": "AppliedToGroup", "apiVersion": API_VERSION,
            "metadata": {"name": "ns/atg", "uid": "ns/atg"},
            "groupMembers": [{"externalEntity": {"name": "vm1-3e616", "namespace": "vm-ns"}}]
        });
        for (kind, expected) in [
            (Kind::NetworkPolicy, vec![valid(&np)]),
            (Kind::AppliedToGroup, vec![valid(&patched_atg)]),
            (Kind::AddressGroup, vec![valid(&patched_ag)]),
        ] {
            assert_eq!(
                next(&mut stream, kind).await,
                PolicyUpdate::Replace {
                    kind,
                    objects: expected
                }
            );
            assert_eq!(next(&mut stream, kind).await, connection(kind, false));
        }
        // The files hold the controller's JSON (members in identity order).
        let saved: Value = serde_json::from_slice(
            &std::fs::read(store.kind_dir(Kind::AddressGroup).unwrap().join("ag.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(saved["groupMembers"].as_array().unwrap().len(), 2);
        // The fallback is read once: later failures do not replay it.
        down.wait_for_watches(AGS, 3, T).await.unwrap();
        let replays = down.watch_paths(AGS).len();
        assert!(replays >= 3);
        // A connection that comes back replaces the fallback view.
        let back = down.watch_stream(AGS);
        send(&back, &[bookmark("AddressGroup")]);
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            PolicyUpdate::Replace {
                kind: Kind::AddressGroup,
                objects: vec![]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, true)
        );
    }

    #[tokio::test]
    async fn a_corrupt_fallback_file_is_reported_and_the_rest_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FallbackStore::new(tmp.path());
        let np: Value = serde_json::from_str(NP).unwrap();
        store.replace(Kind::NetworkPolicy, [("p", &np)]).unwrap();
        let corrupt = store.kind_dir(Kind::NetworkPolicy).unwrap().join("torn.json");
        std::fs::write(&corrupt, "{\"kind\":").unwrap();
        let api = FakeApi::new();
        let mut stream = updates(&source(&api, Some(store)));
        let PolicyUpdate::Error(e) = next(&mut stream, Kind::NetworkPolicy).await else {
            panic!()
        };
        assert!(
            e.starts_with(&format!(
                "antrea-controller NetworkPolicy watch: fallback file {}: not JSON",
                corrupt.display()
            )),
            "{e}"
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            PolicyUpdate::Replace {
                kind: Kind::NetworkPolicy,
                objects: vec![valid(&np)]
            }
        );
        assert_eq!(
            next(&mut stream, Kind::NetworkPolicy).await,
            connection(Kind::NetworkPolicy, false)
        );
        // Kinds never saved give no Replace (nothing to enforce from), only "not connected".
        assert_eq!(
            next(&mut stream, Kind::AddressGroup).await,
            connection(Kind::AddressGroup, false)
        );
    }
}
