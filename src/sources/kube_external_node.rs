//! Kubernetes mode: the agent's ExternalNode (`crd.antrea.io/v1alpha1`) followed on
//! kube-apiserver through an [`ApiClient`]. Owns the start-up GET, the LIST+WATCH loop (resume,
//! re-list, backoff, dead-connection detection) and the translation of what it sees into
//! [`SourceEvent`]s.
//!
//! The protocol, per subscription:
//! 1. `GET .../namespaces/{ns}/externalnodes/{name}` until the server *answers* (an object or a
//!    404), retrying after [`WatchTiming::initial_retry`] (10 s, as the Go agent, jittered by up
//!    to as much again: [`RetryPolicy::EXTERNAL_NODE_GET`]) on anything else (unreachable, 403,
//!    5xx), with an `Error` event each time.
//! 2. LIST with `fieldSelector=metadata.name={name}`, for the current state and the
//!    `resourceVersion` to watch from.
//! 3. WATCH from that version with bookmarks and `timeoutSeconds` drawn anew for each watch
//!    between [`WatchTiming::watch_timeout`] and twice that (5 to 10 minutes, as client-go's
//!    reflector draws it in `ListAndWatch`), so that agents whose watches a kube-apiserver restart
//!    ended together do not all come back in the same second every 5 minutes. A body that ends normally is
//!    resumed from the last version seen (events and bookmarks advance it). `410 Gone` (on open,
//!    or as an `ERROR` event) means the version is too old: re-list. Any other failure is an
//!    `Error` event, a jittered exponential backoff ([`WatchTiming::backoff_min`] to
//!    [`WatchTiming::backoff_max`], [`RetryPolicy::EXTERNAL_NODE_WATCH`] by default: client-go's
//!    reflector) and a re-list; a watch that opens resets it. A watch silent for longer than the timeout
//!    it asked for plus [`WatchTiming::idle_grace`] is presumed dead and replaced.
//!
//! What is emitted: `Present` when the object as parsed ([`ExternalNodeObject`]: name,
//! namespace, labels, interfaces) differs from the last state emitted, so a MODIFIED that only
//! touches other fields (annotations, status, managed fields) emits nothing; `Absent` on DELETED,
//! on a LIST that no longer contains it, or on a 404; `Error` (naming the object) on requests that
//! fail and on objects or events that cannot be decoded, after which the last good state stays in
//! force (the watch goes on). After an `Error`, the next good observation is emitted even when
//! unchanged, so the consumer knows the source is readable again; after a connection error, a
//! watch that opens again re-emits the last state for the same reason (not after an error about
//! the object itself, which only a new version of the object clears).
//!
//! A 404 at start is reported as `Absent`, deliberately unlike the Go agent (which waits for the
//! object before doing anything, runtime spec §9.7): an ExternalNode deleted while the agent was
//! down must still be detached, and only an explicit `Absent` lets the interface manager undo an
//! attachment restored from OVSDB. A 404 is an answer ("no such object"; also when the CRD itself
//! is missing, which deletes every ExternalNode), so the agent then simply watches for the object
//! to be created: the ADDED event attaches it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use serde_json::Value;
use tracing::{debug, info};

use super::{ExternalNodeSource, SourceError, SourceEvent};
use crate::k8s::api::{ApiClient, Method, WatchLines};
use crate::k8s::external_node::{ExternalNodeObject, API_VERSION};
use crate::retry::{Backoff, RetryPolicy};

/// Whether the server answers kube-apiserver's core discovery (`/api`), which antrea-controller
/// does not serve: tells a missing ExternalNode CRD (an answer: the object is absent) from a
/// kubeconfig pointing at the wrong server (an error: nothing is known).
async fn is_kube_apiserver(api: &dyn ApiClient) -> bool {
    match api.request(Method::Get, "/api", None).await {
        Ok(_) => true,
        Err(e) => !e.is_not_found(),
    }
}

/// Delays and timeouts of the watch loop; tests shrink them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchTiming {
    /// Between start-up GETs that got no answer (Go: 10 s), before the jitter.
    pub initial_retry: Duration,
    /// First delay after a failed list or watch; doubled on each further failure, each delay
    /// jittered by up to as much again ([`crate::retry`]).
    pub backoff_min: Duration,
    /// Ceiling of the backoff's base (before the jitter).
    pub backoff_max: Duration,
    /// The shortest `timeoutSeconds` asked of a watch (the server ends it then and the agent
    /// resumes); each watch asks for a random time between this and twice this.
    pub watch_timeout: Duration,
    /// Silence tolerated beyond the timeout a watch asked for before it is presumed dead.
    pub idle_grace: Duration,
}

impl Default for WatchTiming {
    fn default() -> Self {
        WatchTiming {
            initial_retry: RetryPolicy::EXTERNAL_NODE_GET.initial,
            backoff_min: RetryPolicy::EXTERNAL_NODE_WATCH.initial,
            backoff_max: RetryPolicy::EXTERNAL_NODE_WATCH.max,
            watch_timeout: Duration::from_secs(300),
            idle_grace: Duration::from_secs(60),
        }
    }
}

/// The agent's ExternalNode, followed on kube-apiserver.
#[derive(Clone)]
pub struct KubeExternalNodeSource {
    /// kube-apiserver (`clientConnection.kubeconfig`).
    pub api: Arc<dyn ApiClient>,
    /// `externalNode.externalNodeNamespace`.
    pub namespace: String,
    /// The node name (`NODE_NAME` or the hostname).
    pub name: String,
    pub timing: WatchTiming,
}

impl std::fmt::Debug for KubeExternalNodeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeExternalNodeSource")
            .field("api", &self.api.describe())
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("timing", &self.timing)
            .finish()
    }
}

impl KubeExternalNodeSource {
    /// Follows ExternalNode `namespace/name` on `api` with the default timing.
    pub fn new(api: Arc<dyn ApiClient>, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        KubeExternalNodeSource {
            api,
            namespace: namespace.into(),
            name: name.into(),
            timing: WatchTiming::default(),
        }
    }

    /// The same source with other delays (tests).
    pub fn with_timing(mut self, timing: WatchTiming) -> Self {
        self.timing = timing;
        self
    }

    /// `/apis/crd.antrea.io/v1alpha1/namespaces/{ns}/externalnodes`.
    pub fn collection_path(&self) -> String {
        format!(
            "/apis/{API_VERSION}/namespaces/{}/externalnodes",
            path_segment(&self.namespace)
        )
    }

    /// The object's own path (the start-up GET).
    pub fn object_path(&self) -> String {
        format!("{}/{}", self.collection_path(), path_segment(&self.name))
    }

    /// The LIST path, restricted to this object by a field selector.
    pub fn list_path(&self) -> String {
        format!(
            "{}?{}",
            self.collection_path(),
            query(&[("fieldSelector", &self.selector())])
        )
    }

    /// A watch's timeout: [`WatchTiming::watch_timeout`] stretched by `stretch` (in [0, 1)) of
    /// itself, whole seconds, at least 1.
    pub fn watch_timeout(&self, stretch: f64) -> Duration {
        let min = self.timing.watch_timeout.as_secs_f64();
        Duration::from_secs(((min * (1.0 + stretch.clamp(0.0, 1.0))) as u64).max(1))
    }

    /// The WATCH path from `resource_version`, asking the server to end it after `timeout`.
    pub fn watch_path(&self, resource_version: &str, timeout: Duration) -> String {
        let timeout = timeout.as_secs().max(1).to_string();
        format!(
            "{}?{}",
            self.collection_path(),
            query(&[
                ("fieldSelector", &self.selector()),
                ("watch", "true"),
                ("resourceVersion", resource_version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", &timeout),
            ])
        )
    }

    fn selector(&self) -> String {
        format!("metadata.name={}", self.name)
    }
}

/// Percent-encodes a path segment. Kubernetes names need none of it; a node name taken from an
/// odd hostname must still not be able to change the path.
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", path_segment(k), path_segment(v)))
        .collect::<Vec<_>>()
        .join("&")
}

impl ExternalNodeSource for KubeExternalNodeSource {
    fn subscribe(&self) -> BoxStream<'static, SourceEvent> {
        let machine = Machine::new(self.clone());
        stream::unfold(machine, |mut machine| async move {
            let event = machine.next_event().await;
            Some((event, machine))
        })
        .boxed()
    }

    fn describe(&self) -> String {
        format!(
            "ExternalNode {}/{} on kube-apiserver {}",
            self.namespace,
            self.name,
            self.api.describe()
        )
    }
}

/// The last state emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Observed {
    Present(ExternalNodeObject),
    Absent,
}

/// Where the loop is.
#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Initial,
    List,
    Watch,
}

/// One subscription's state machine.
struct Machine {
    source: KubeExternalNodeSource,
    phase: Phase,
    lines: Option<WatchLines>,
    /// Lines received on the current watch: a watch that delivered nothing and ended is treated
    /// as a failure (backoff), so a server that closes at once cannot make us spin.
    lines_in_watch: usize,
    /// The `timeoutSeconds` the current watch asked for.
    watch_timeout: Duration,
    resource_version: String,
    last: Option<Observed>,
    /// An `Error` was emitted since the last state: emit the next good state even if unchanged.
    errored: bool,
    /// The latest `Error` was about reaching the server (not about the object's content): a
    /// watch that opens again proves the last state is still the current one.
    connection_error: bool,
    backoff: Backoff,
    pending: VecDeque<SourceEvent>,
    delay: Option<Duration>,
}

impl Machine {
    fn new(source: KubeExternalNodeSource) -> Self {
        let backoff = RetryPolicy::new(source.timing.backoff_min, source.timing.backoff_max).backoff();
        let watch_timeout = source.timing.watch_timeout;
        Machine {
            source,
            phase: Phase::Initial,
            lines: None,
            lines_in_watch: 0,
            watch_timeout,
            resource_version: String::new(),
            last: None,
            errored: false,
            connection_error: false,
            backoff,
            pending: VecDeque::new(),
            delay: None,
        }
    }

    fn object(&self) -> String {
        format!("ExternalNode {}/{}", self.source.namespace, self.source.name)
    }

    async fn next_event(&mut self) -> SourceEvent {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return event;
            }
            if let Some(delay) = self.delay.take() {
                tokio::time::sleep(delay).await;
            }
            match self.phase {
                Phase::Initial => self.initial().await,
                Phase::List => self.list().await,
                Phase::Watch => self.watch().await,
            }
        }
    }

    fn observe(&mut self, state: Observed) {
        if self.errored || self.last.as_ref() != Some(&state) {
            self.pending.push_back(match &state {
                Observed::Present(obj) => SourceEvent::Present(Box::new(obj.clone())),
                Observed::Absent => SourceEvent::Absent,
            });
            self.last = Some(state);
            self.errored = false;
            self.connection_error = false;
        }
    }

    /// Reports a problem with what the server sent (the object or an event).
    fn error(&mut self, error: SourceError) {
        self.pending.push_back(SourceEvent::Error(error));
        self.errored = true;
        self.connection_error = false;
    }

    /// Reports a failure to reach the server or to keep the watch going.
    fn connection_error(&mut self, error: SourceError) {
        self.error(error);
        self.connection_error = true;
    }

    /// Fails the current list or watch: report, then re-list after a backoff.
    fn fail(&mut self, error: SourceError) {
        self.connection_error(error);
        self.drop_watch();
        self.phase = Phase::List;
        self.delay = Some(self.backoff.next_delay());
    }

    fn drop_watch(&mut self) {
        self.lines = None;
        self.lines_in_watch = 0;
    }

    /// Decodes one object; a shape the agent cannot read is an error naming the object.
    fn parse(&self, object: &Value) -> Result<ExternalNodeObject, SourceError> {
        serde_json::from_value::<ExternalNodeObject>(object.clone()).map_err(|e| {
            SourceError::ExternalNodeUndecodable {
                namespace: self.source.namespace.clone(),
                name: self.source.name.clone(),
                resource_version: resource_version_of(object).unwrap_or_default(),
                cause: e.to_string(),
            }
        })
    }

    /// A problem with the object on kube-apiserver or with reaching it.
    fn problem(&self, problem: String) -> SourceError {
        SourceError::ExternalNodeApi {
            namespace: self.source.namespace.clone(),
            name: self.source.name.clone(),
            problem,
        }
    }

    fn observe_object(&mut self, object: &Value) {
        match self.parse(object) {
            Ok(obj) => self.observe(Observed::Present(obj)),
            Err(error) => self.error(error),
        }
    }

    /// The delay before the next start-up GET: the Go agent's fixed period, jittered.
    fn initial_retry(&self) -> Duration {
        RetryPolicy::constant(self.source.timing.initial_retry).delay_after(1)
    }

    async fn initial(&mut self) {
        let path = self.source.object_path();
        match self.source.api.request(Method::Get, &path, None).await {
            Ok(object) => {
                self.observe_object(&object);
                self.phase = Phase::List;
            }
            Err(e) if e.is_unserved() && !is_kube_apiserver(self.source.api.as_ref()).await => {
                let delay = self.initial_retry();
                self.connection_error(self.problem(format!(
                    "{} does not serve ExternalNodes and is not kube-apiserver (it has no /api): \
                     clientConnection.kubeconfig must point at kube-apiserver (are clientConnection \
                     and antreaClientConnection swapped?); retrying in {delay:?}",
                    self.source.api.describe(),
                )));
                self.delay = Some(delay);
            }
            Err(e) if e.is_not_found() => {
                info!(object = %self.object(), "ExternalNode not found; watching for it to be created");
                self.observe(Observed::Absent);
                self.phase = Phase::List;
            }
            Err(e) => {
                let delay = self.initial_retry();
                self.connection_error(self.problem(format!(
                    "cannot read it from kube-apiserver {} (retrying in {delay:?}): {e}",
                    self.source.api.describe(),
                )));
                self.delay = Some(delay);
            }
        }
    }

    async fn list(&mut self) {
        let path = self.source.list_path();
        let answer = match self.source.api.request(Method::Get, &path, None).await {
            Ok(answer) => answer,
            Err(e) => {
                if e.is_not_found() {
                    // The collection itself is gone (CRD removed): so is the object.
                    self.observe(Observed::Absent);
                }
                return self.fail(self.problem(format!("cannot list: {e}")));
            }
        };
        let Some(items) = answer.get("items").and_then(Value::as_array) else {
            return self.fail(self.problem(format!("the list answer of {path} has no items array")));
        };
        // The field selector should leave only ours; a server that ignores it must not make
        // another object look like ours.
        let mine = items
            .iter()
            .find(|item| item.pointer("/metadata/name").and_then(Value::as_str) == Some(&self.source.name));
        match mine {
            Some(object) => {
                let object = object.clone();
                self.observe_object(&object);
            }
            None => self.observe(Observed::Absent),
        }
        self.resource_version = answer
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.phase = Phase::Watch;
        self.drop_watch();
    }

    async fn watch(&mut self) {
        if self.lines.is_none() {
            self.watch_timeout = self.source.watch_timeout(rand::random::<f64>());
            let path = self.source.watch_path(&self.resource_version, self.watch_timeout);
            match self.source.api.watch(&path).await {
                Ok(lines) => {
                    self.lines = Some(lines);
                    self.lines_in_watch = 0;
                    // The server is reachable again: say so, with the state it knows.
                    if self.connection_error {
                        if let Some(last) = self.last.clone() {
                            self.observe(last);
                        }
                    }
                }
                Err(e) if e.code() == Some(410) => {
                    debug!(object = %self.object(), "watch version expired; re-listing");
                    self.phase = Phase::List;
                    self.delay = Some(self.backoff.next_delay());
                }
                Err(e) => self.fail(self.problem(format!("cannot watch: {e}"))),
            }
            return;
        }
        let idle = self.watch_timeout + self.source.timing.idle_grace;
        let Some(lines) = self.lines.as_mut() else {
            return;
        };
        match tokio::time::timeout(idle, lines.next()).await {
            Err(_) => {
                let error = self.problem(format!("the watch sent nothing for {idle:?}; reconnecting"));
                self.connection_error(error);
                self.drop_watch();
                self.delay = Some(self.backoff.next_delay());
            }
            Ok(None) => {
                // Normal end (timeoutSeconds, server restart): resume from the last version.
                if self.lines_in_watch == 0 {
                    self.delay = Some(self.backoff.next_delay());
                }
                self.drop_watch();
            }
            Ok(Some(Err(e))) => {
                self.connection_error(self.problem(format!("watch interrupted: {e}")));
                self.drop_watch();
                self.delay = Some(self.backoff.next_delay());
            }
            Ok(Some(Ok(line))) => {
                self.lines_in_watch += 1;
                self.backoff.reset();
                self.event(&line);
            }
        }
    }

    /// Handles one watch event line.
    fn event(&mut self, line: &str) {
        let event: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return self.error(self.problem(format!("undecodable watch event: {e}")));
            }
        };
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        let object = event.get("object").cloned().unwrap_or(Value::Null);
        if kind != "ERROR" {
            if let Some(rv) = resource_version_of(&object) {
                self.resource_version = rv;
            }
        }
        let ours = object.pointer("/metadata/name").and_then(Value::as_str) == Some(&self.source.name);
        match kind {
            "ADDED" | "MODIFIED" if ours => self.observe_object(&object),
            "DELETED" if ours => self.observe(Observed::Absent),
            "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" => {}
            "ERROR" => {
                let code = object.get("code").and_then(Value::as_u64);
                let message = object.get("message").and_then(Value::as_str).unwrap_or("");
                if code == Some(410) {
                    debug!(object = %self.object(), message, "watch version expired; re-listing");
                    // Expiry as the very first event again and again would otherwise re-list
                    // in a tight loop.
                    if self.lines_in_watch <= 1 {
                        self.delay = Some(self.backoff.next_delay());
                    }
                    self.drop_watch();
                    self.phase = Phase::List;
                } else {
                    let code = code.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
                    self.fail(self.problem(format!("the watch reported an error (code {code}): {message}")));
                }
            }
            other => self.error(self.problem(format!("unknown watch event type {other:?}"))),
        }
    }
}

fn resource_version_of(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::api::ApiError;
    use crate::k8s::fake_api::FakeApi;
    use serde_json::json;

    const NS: &str = "vm-ns";
    const NAME: &str = "vm1";
    const WAIT: Duration = Duration::from_secs(5);
    const COLLECTION: &str = "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes";
    const OBJECT: &str = "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes/vm1";
    const LIST: &str =
        "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes?fieldSelector=metadata.name%3Dvm1";
    const WATCH: &str = "/apis/crd.antrea.io/v1alpha1/namespaces/vm-ns/externalnodes?fieldSelector=metadata.name%3Dvm1&watch=true";

    fn fast() -> WatchTiming {
        WatchTiming {
            initial_retry: Duration::from_millis(10),
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(20),
            watch_timeout: Duration::from_secs(300),
            idle_grace: Duration::from_secs(60),
        }
    }

    /// A fake whose unscripted calls fail loudly (an `Error` event) rather than as a 404, which
    /// the source would take for "absent".
    fn api() -> FakeApi {
        let api = FakeApi::named("https://10.0.0.1:6443");
        api.set_default_error(|method, path| ApiError::Transport {
            method: method.as_str(),
            path: path.to_string(),
            message: "not scripted".into(),
        });
        api
    }

    fn source(api: &FakeApi) -> KubeExternalNodeSource {
        KubeExternalNodeSource::new(Arc::new(api.clone()), NS, NAME).with_timing(fast())
    }

    fn named(name: &str, ips: &[&str], rv: &str) -> Value {
        json!({
            "apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNode",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": rv, "uid": "u-1"},
            "spec": {"interfaces": [{"name": "", "ips": ips}]}
        })
    }

    fn en(ips: &[&str], rv: &str) -> Value {
        named(NAME, ips, rv)
    }

    fn list(items: Vec<Value>, rv: &str) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNodeList",
               "metadata": {"resourceVersion": rv}, "items": items})
    }

    fn event(kind: &str, object: Value) -> Result<String, ApiError> {
        Ok(json!({"type": kind, "object": object}).to_string())
    }

    /// Polls the stream all the time, as the watcher actor does, and hands over its events.
    struct Events(tokio::sync::mpsc::UnboundedReceiver<SourceEvent>);

    fn subscribe(api: &FakeApi) -> Events {
        let mut stream = source(api).subscribe();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        Events(rx)
    }

    async fn next(events: &mut Events) -> SourceEvent {
        tokio::time::timeout(WAIT, events.0.recv())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
    }

    /// The IPs of a `Present`, or a panic naming what came instead.
    fn ips(event: SourceEvent) -> Vec<String> {
        match event {
            SourceEvent::Present(obj) => {
                assert_eq!(obj.metadata.name, NAME);
                obj.spec.expect("spec").interfaces[0].ips.clone()
            }
            other => panic!("expected Present, got {other:?}"),
        }
    }

    fn error(event: SourceEvent) -> String {
        match event {
            SourceEvent::Error(error) => {
                let message = error.to_string();
                assert!(message.contains("ExternalNode vm-ns/vm1"), "{message}");
                message
            }
            other => panic!("expected Error, got {other:?}"),
        }
    }

    #[test]
    fn paths_and_description() {
        let api = api();
        let s = source(&api);
        assert_eq!(s.object_path(), OBJECT);
        assert_eq!(s.collection_path(), COLLECTION);
        assert_eq!(s.list_path(), LIST);
        assert_eq!(
            s.watch_path("42", Duration::from_secs(437)),
            format!("{WATCH}&resourceVersion=42&allowWatchBookmarks=true&timeoutSeconds=437")
        );
        assert_eq!(
            s.describe(),
            "ExternalNode vm-ns/vm1 on kube-apiserver https://10.0.0.1:6443"
        );
        let odd = KubeExternalNodeSource::new(Arc::new(api), "ns", "a/b c");
        assert!(odd.object_path().ends_with("/externalnodes/a%2Fb%20c"));
    }

    /// client-go's reflector (`ListAndWatch`) asks each watch for the minimum timeout times
    /// (1 + a uniform draw in [0, 1)): 5 to 10 minutes by default, never the same for a fleet.
    #[test]
    fn watch_timeouts_spread_between_the_minimum_and_twice_it() {
        let api = api();
        let s = source(&api);
        assert_eq!(s.watch_timeout(0.0), Duration::from_secs(300));
        assert_eq!(s.watch_timeout(0.5), Duration::from_secs(450));
        assert_eq!(s.watch_timeout(0.9999), Duration::from_secs(599));
        let drawn: std::collections::BTreeSet<u64> = (0..200)
            .map(|_| s.watch_timeout(rand::random::<f64>()).as_secs())
            .collect();
        assert!(drawn.iter().all(|t| (300..600).contains(t)), "{drawn:?}");
        assert!(
            drawn.len() > 50,
            "200 draws gave only {} distinct timeouts",
            drawn.len()
        );
    }

    #[tokio::test]
    async fn not_found_at_start_is_absent_then_added_is_present() {
        let api = api();
        api.respond(
            Method::Get,
            OBJECT,
            Err(FakeApi::status(404, "NotFound", "not found")),
        );
        api.respond(Method::Get, LIST, Ok(list(vec![], "10")));
        let feed = api.watch_stream(WATCH);
        let mut events = subscribe(&api);

        assert_eq!(next(&mut events).await, SourceEvent::Absent);
        let paths = api.wait_for_watches(WATCH, 1, WAIT).await.expect("watch");
        let asked = paths[0]
            .strip_prefix(&format!(
                "{WATCH}&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds="
            ))
            .and_then(|t| t.parse::<u64>().ok());
        assert!(asked.is_some_and(|t| (300..600).contains(&t)), "{}", paths[0]);
        feed.send(event("ADDED", en(&["10.0.0.2"], "11"))).expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        // The start-up GET, then one list.
        assert_eq!(api.requests(Method::Get, OBJECT).len(), 1);
        assert_eq!(api.requests(Method::Get, LIST).len(), 1);
    }

    #[tokio::test]
    async fn start_up_get_is_retried_until_the_server_answers() {
        let api = api();
        api.respond(Method::Get, OBJECT, Err(FakeApi::transport("connection refused")));
        api.respond(
            Method::Get,
            OBJECT,
            Err(FakeApi::status(403, "Forbidden", "RBAC")),
        );
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.2"], "5")], "6")));
        let _feed = api.watch_stream(WATCH);
        let mut events = subscribe(&api);

        assert!(error(next(&mut events).await).contains("connection refused"));
        assert!(error(next(&mut events).await).contains("403"));
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        api.wait_for_watches(WATCH, 1, WAIT).await.expect("watch");
        assert_eq!(api.requests(Method::Get, OBJECT).len(), 3);
    }

    #[tokio::test]
    async fn only_changes_are_emitted_and_deleted_is_absent() {
        let api = api();
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        // A server that ignores the field selector: the other object is not ours.
        api.respond(
            Method::Get,
            LIST,
            Ok(list(
                vec![named("vm2", &["10.9.9.9"], "4"), en(&["10.0.0.2"], "5")],
                "6",
            )),
        );
        let feed = api.watch_stream(WATCH);
        let mut events = subscribe(&api);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);

        // Same interfaces, other resourceVersion and an annotation: nothing to say.
        let mut same = en(&["10.0.0.2"], "7");
        same["metadata"]["annotations"] = json!({"note": "x"});
        feed.send(event("MODIFIED", same)).expect("feed");
        // Another object's events are ignored.
        feed.send(event("MODIFIED", named("vm2", &["10.9.9.8"], "8")))
            .expect("feed");
        feed.send(event("DELETED", named("vm2", &["10.9.9.8"], "9")))
            .expect("feed");
        feed.send(event("MODIFIED", en(&["10.0.0.3"], "10")))
            .expect("feed");
        // The next event is the change: the three before it emitted nothing.
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.3"]);

        feed.send(event("DELETED", en(&["10.0.0.3"], "11")))
            .expect("feed");
        assert_eq!(next(&mut events).await, SourceEvent::Absent);
        feed.send(event("ADDED", en(&["10.0.0.4"], "12"))).expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.4"]);
        assert_eq!(api.watch_paths(WATCH).len(), 1);
    }

    #[tokio::test]
    async fn an_ended_watch_resumes_from_the_last_resource_version() {
        let api = api();
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.2"], "5")], "6")));
        api.watch_lines(
            WATCH,
            [
                event("MODIFIED", en(&["10.0.0.3"], "7")).expect("line"),
                event(
                    "BOOKMARK",
                    json!({"kind": "ExternalNode", "metadata": {"resourceVersion": "9"}}),
                )
                .expect("line"),
            ],
        );
        let feed = api.watch_stream(WATCH);
        let mut events = subscribe(&api);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.3"]);

        let paths = api.wait_for_watches(WATCH, 2, WAIT).await.expect("second watch");
        assert!(paths[0].contains("resourceVersion=6&"), "{}", paths[0]);
        assert!(paths[1].contains("resourceVersion=9&"), "{}", paths[1]);
        feed.send(event("MODIFIED", en(&["10.0.0.4"], "10")))
            .expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.4"]);
        // Resumed, not re-listed.
        assert_eq!(api.requests(Method::Get, LIST).len(), 1);
    }

    #[tokio::test]
    async fn gone_relists_without_reporting_an_error() {
        let api = api();
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.2"], "5")], "6")));
        let feed = api.watch_stream(WATCH);
        // The re-list finds a change made while the watch was expired.
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.7"], "20")], "20")));
        // Then the watch open itself answers 410: list again.
        api.watch_fails(WATCH, FakeApi::status(410, "Expired", "too old resource version"));
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.7"], "20")], "30")));
        let feed3 = api.watch_stream(WATCH);

        let mut events = subscribe(&api);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        api.wait_for_watches(WATCH, 1, WAIT).await.expect("watch");
        feed.send(event(
            "ERROR",
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                   "reason": "Expired", "message": "too old resource version: 6 (15)"}),
        ))
        .expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.7"]);
        let paths = api.wait_for_watches(WATCH, 3, WAIT).await.expect("watches");
        assert!(paths[1].contains("resourceVersion=20&"), "{}", paths[1]);
        assert!(paths[2].contains("resourceVersion=30&"), "{}", paths[2]);
        assert_eq!(api.requests(Method::Get, LIST).len(), 3);
        // No Error event came in between: the next one is this change.
        feed3
            .send(event("MODIFIED", en(&["10.0.0.8"], "31")))
            .expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.8"]);
    }

    #[tokio::test]
    async fn malformed_objects_are_errors_and_the_watch_goes_on() {
        let api = api();
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.2"], "5")], "6")));
        let feed = api.watch_stream(WATCH);
        let mut events = subscribe(&api);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);

        let mut bad = en(&["10.0.0.2"], "7");
        bad["spec"]["interfaces"] = json!("eth0");
        feed.send(event("MODIFIED", bad)).expect("feed");
        let message = error(next(&mut events).await);
        assert!(message.contains("\"7\""), "{message}");
        feed.send(Ok("{not json".into())).expect("feed");
        error(next(&mut events).await);
        feed.send(event("SURPRISE", json!({}))).expect("feed");
        assert!(error(next(&mut events).await).contains("SURPRISE"));

        // The same good state as before is emitted again: the source is readable again.
        feed.send(event("MODIFIED", en(&["10.0.0.2"], "8")))
            .expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        feed.send(event("MODIFIED", en(&["10.0.0.5"], "9")))
            .expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.5"]);
        assert_eq!(api.watch_paths(WATCH).len(), 1, "one watch throughout");
    }

    #[tokio::test]
    async fn failures_are_reported_then_relisted_and_a_deletion_meanwhile_is_seen() {
        let api = api();
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        api.respond(Method::Get, LIST, Ok(list(vec![en(&["10.0.0.2"], "5")], "6")));
        api.watch_fails(WATCH, FakeApi::status(500, "InternalError", "etcd down"));
        api.respond(Method::Get, LIST, Err(FakeApi::transport("connection reset")));
        // Deleted while the watch was down.
        api.respond(Method::Get, LIST, Ok(list(vec![], "9")));
        let feed = api.watch_stream(WATCH);
        let feed2 = api.watch_stream(WATCH);

        let mut events = subscribe(&api);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        assert!(error(next(&mut events).await).contains("etcd down"));
        assert!(error(next(&mut events).await).contains("connection reset"));
        assert_eq!(next(&mut events).await, SourceEvent::Absent);

        // A broken body is reported; the resumed watch says the state again.
        api.wait_for_watches(WATCH, 2, WAIT).await.expect("watch");
        feed.send(Err(FakeApi::transport("stream reset"))).expect("feed");
        assert!(error(next(&mut events).await).contains("stream reset"));
        assert_eq!(next(&mut events).await, SourceEvent::Absent);
        let paths = api.wait_for_watches(WATCH, 3, WAIT).await.expect("watch");
        assert!(paths[2].contains("resourceVersion=9&"), "{}", paths[2]);
        feed2.send(event("ADDED", en(&["10.0.0.6"], "10"))).expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.6"]);
    }

    #[tokio::test]
    async fn a_malformed_object_found_after_a_reconnect_stays_an_error() {
        let api = api();
        api.respond(Method::Get, OBJECT, Ok(en(&["10.0.0.2"], "5")));
        api.respond(Method::Get, LIST, Err(FakeApi::transport("connection refused")));
        let mut bad = en(&["10.0.0.2"], "7");
        bad["spec"] = json!(["not", "an", "object"]);
        api.respond(Method::Get, LIST, Ok(list(vec![bad], "7")));
        let feed = api.watch_stream(WATCH);
        let mut events = subscribe(&api);
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.2"]);
        assert!(error(next(&mut events).await).contains("connection refused"));
        assert!(error(next(&mut events).await).contains("cannot decode"));
        // The watch opening does not re-assert the old state over the bad object.
        api.wait_for_watches(WATCH, 1, WAIT).await.expect("watch");
        feed.send(event("MODIFIED", en(&["10.0.0.3"], "8")))
            .expect("feed");
        assert_eq!(ips(next(&mut events).await), vec!["10.0.0.3"]);
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling_and_resets() {
        let timing = WatchTiming::default();
        let mut b = RetryPolicy::new(timing.backoff_min, timing.backoff_max).backoff();
        // Each delay in [base, 2 * base] (the jitter): bases 0.8, 1.6, 3.2, 6.4, 12.8, 25.6 s,
        // then the 30 s ceiling.
        let bases = [800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000];
        let delays: Vec<Duration> = bases.iter().map(|_| b.next_delay()).collect();
        for (d, base) in delays.iter().zip(bases) {
            let base = Duration::from_millis(base);
            assert!(
                *d >= base && *d <= base * 2 + Duration::from_millis(1),
                "{delays:?}"
            );
        }
        b.reset();
        let first = b.next_delay();
        assert!(
            first >= timing.backoff_min && first <= timing.backoff_min * 2,
            "{first:?}"
        );
    }

    /// The source over the real HTTPS client, against the TLS test server of `k8s::client`'s
    /// tests.
    mod over_https {
        use std::sync::Arc;
        use std::time::Duration;

        use bytes::Bytes;
        use futures::channel::mpsc;
        use futures::stream::{BoxStream, StreamExt};

        use crate::k8s::client::tests::{ca_data, kubeconfig, pki, start_server, token};
        use crate::k8s::client::KubeApiClient;
        use crate::sources::kube_external_node::{KubeExternalNodeSource, WatchTiming};
        use crate::sources::{ExternalNodeSource, SourceEvent};

        async fn next_event(events: &mut BoxStream<'static, SourceEvent>) -> SourceEvent {
            tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .expect("event in time")
                .expect("stream goes on")
        }

        #[actix_rt::test]
        async fn the_external_node_source_works_over_https() {
            let dir = tempfile::tempdir().expect("tempdir");
            let pki = pki();
            let server = start_server(&pki, false);
            let (tx, rx) = mpsc::unbounded();
            *server.feed.lock().expect("feed") = Some(rx);
            let path = kubeconfig(dir.path(), &server.url, &ca_data(&pki), &token("s3cret"));
            let client = KubeApiClient::from_kubeconfig(&path, "kube-apiserver").expect("client");
            let timing = WatchTiming {
                initial_retry: Duration::from_millis(10),
                backoff_min: Duration::from_millis(10),
                backoff_max: Duration::from_millis(50),
                ..WatchTiming::default()
            };
            let source = KubeExternalNodeSource::new(Arc::new(client), "vm-ns", "vm1").with_timing(timing);
            let mut events = source.subscribe();
            // The object's GET answers a 404 Status: absent, then the list and the watch.
            assert_eq!(next_event(&mut events).await, SourceEvent::Absent);
            let added = serde_json::json!({"type": "ADDED", "object": {
                "apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNode",
                "metadata": {"name": "vm1", "namespace": "vm-ns", "resourceVersion": "42"},
                "spec": {"interfaces": [{"name": "", "ips": ["172.16.100.3"]}]}}});
            tx.unbounded_send(Bytes::from(format!("{added}\n")))
                .expect("send");
            match next_event(&mut events).await {
                SourceEvent::Present(obj) => {
                    assert_eq!(obj.metadata.name, "vm1");
                    assert_eq!(obj.spec.expect("spec").interfaces[0].ips, vec!["172.16.100.3"]);
                }
                other => panic!("expected Present, got {other:?}"),
            }
        }
    }
}
