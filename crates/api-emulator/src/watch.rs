//! Watch streams: the registry of open watches, the dispatcher that turns store changes into
//! per-watcher events, and the HTTP body of a watch (initial events, then live events, ending on
//! cancellation, `timeoutSeconds` or the maximum duration).
//!
//! Flow control follows antrea-controller (antrea-apis.md §3.2 item 5): each watcher has a
//! bounded buffer; when a dispatch round finds a buffer full and it stays full until the round's
//! deadline (50 ms by default), that watcher is force-stopped and its stream ends at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::store::{bookmark_object, CpResource, DispatchItem};

/// Locks a mutex, carrying on with the data if a panicking thread poisoned it (the emulator's
/// state stays consistent between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a watch follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "api")]
pub enum WatchTarget {
    /// A controlplane resource, filtered by `nodeName` (None = no node selector) and name.
    Controlplane {
        resource: CpResource,
        node: Option<String>,
        name: Option<String>,
    },
    /// ExternalNodes of a namespace (empty = all), optionally one name.
    ExternalNodes { namespace: String, name: Option<String> },
}

/// An open watch, as listed by [`Registry::list`].
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchInfo {
    pub id: u64,
    pub identity: String,
    pub target: WatchTarget,
}

/// One watch's sending side.
#[derive(Debug)]
pub struct Watcher {
    pub id: u64,
    pub identity: String,
    pub target: WatchTarget,
    /// Only changes above this resourceVersion are sent (the initial events cover the rest).
    pub start_rv: u64,
    /// Controller incarnation this controlplane watch belongs to.
    pub epoch: u64,
    tx: mpsc::Sender<(u64, Bytes)>,
    pub cancel: CancellationToken,
}

/// The open watches.
#[derive(Debug, Default)]
pub struct Registry {
    next_id: AtomicU64,
    watchers: Mutex<Vec<Arc<Watcher>>>,
    slow_stops: AtomicU64,
}

/// The receiving side handed to the HTTP body.
pub struct WatchHandle {
    pub rx: mpsc::Receiver<(u64, Bytes)>,
    pub cancel: CancellationToken,
    pub guard: WatchGuard,
}

/// Removes a watcher from the registry when its HTTP body goes away.
pub struct WatchGuard {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

impl Registry {
    /// Registers a watcher. Call while holding the state lock the initial events were read under,
    /// so that no change can fall between them and the live events.
    pub fn register(
        self: &Arc<Self>,
        identity: String,
        target: WatchTarget,
        start_rv: u64,
        epoch: u64,
        buffer: usize,
    ) -> WatchHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel(buffer.max(1));
        let cancel = CancellationToken::new();
        lock(&self.watchers).push(Arc::new(Watcher {
            id,
            identity,
            target,
            start_rv,
            epoch,
            tx,
            cancel: cancel.clone(),
        }));
        WatchHandle {
            rx,
            cancel,
            guard: WatchGuard {
                registry: self.clone(),
                id,
            },
        }
    }

    fn remove(&self, id: u64) {
        lock(&self.watchers).retain(|w| w.id != id);
    }

    fn snapshot(&self) -> Vec<Arc<Watcher>> {
        lock(&self.watchers).clone()
    }

    pub fn list(&self) -> Vec<WatchInfo> {
        lock(&self.watchers)
            .iter()
            .map(|w| WatchInfo {
                id: w.id,
                identity: w.identity.clone(),
                target: w.target.clone(),
            })
            .collect()
    }

    /// Ends every watch matching `pred` now.
    pub fn close_where(&self, pred: impl Fn(&Watcher) -> bool) -> usize {
        let mut watchers = lock(&self.watchers);
        let mut n = 0;
        watchers.retain(|w| {
            if pred(w) {
                w.cancel.cancel();
                n += 1;
                false
            } else {
                true
            }
        });
        n
    }

    /// How many watchers were force-stopped for not reading.
    pub fn slow_stops(&self) -> u64 {
        self.slow_stops.load(Ordering::Relaxed)
    }
}

/// One line of a JSON watch stream (`metav1.WatchEvent`: `type`, then `object`, the object
/// already serialized).
pub fn event_line(event_type: &str, object: &str) -> Bytes {
    Bytes::from(format!("{{\"type\":\"{event_type}\",\"object\":{object}}}\n"))
}

/// The line a watcher must receive for `item`, with the resourceVersion it stands for.
fn line_for(item: &DispatchItem, w: &Watcher) -> Option<(u64, Bytes)> {
    match (item, &w.target) {
        (DispatchItem::Cp(ev), WatchTarget::Controlplane { resource, node, name }) => {
            if ev.resource != *resource || ev.epoch != w.epoch || ev.rv <= w.start_rv {
                return None;
            }
            if let Some(name) = name {
                let ev_name = ev.cur.as_ref().or(ev.prev.as_ref()).map(|e| e.object.name());
                if ev_name != Some(name.as_str()) {
                    return None;
                }
            }
            let (t, obj) = ev.event_for(node.as_deref())?;
            Some((ev.rv, event_line(t, &obj)))
        }
        (DispatchItem::Kube(ev), WatchTarget::ExternalNodes { namespace, name }) => {
            let selected = ev.rv > w.start_rv
                && (namespace.is_empty() || *namespace == ev.namespace)
                && name.as_ref().is_none_or(|n| *n == ev.name);
            selected.then(|| (ev.rv, event_line(ev.event_type, &ev.object.to_string())))
        }
        _ => None,
    }
}

/// Delivers store changes to watchers until the sending side closes.
pub async fn dispatch_loop(
    mut rx: mpsc::UnboundedReceiver<DispatchItem>,
    registry: Arc<Registry>,
    full_timeout: Duration,
) {
    while let Some(item) = rx.recv().await {
        // One deadline per dispatch round, started by the first full buffer (as Antrea does).
        let mut deadline: Option<Instant> = None;
        for w in registry.snapshot() {
            if w.cancel.is_cancelled() {
                registry.remove(w.id);
                continue;
            }
            let Some(msg) = line_for(&item, &w) else { continue };
            match w.tx.try_send(msg) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Closed(_)) => registry.remove(w.id),
                Err(mpsc::error::TrySendError::Full(msg)) => {
                    let until = *deadline.get_or_insert_with(|| Instant::now() + full_timeout);
                    let sent = tokio::select! {
                        r = w.tx.send(msg) => r.is_ok(),
                        _ = w.cancel.cancelled() => false,
                        _ = tokio::time::sleep_until(until) => {
                            tracing::info!(watch = w.id, target = ?w.target, "force-stopping a watcher whose buffer stayed full");
                            registry.slow_stops.fetch_add(1, Ordering::Relaxed);
                            false
                        }
                    };
                    if !sent {
                        w.cancel.cancel();
                        registry.remove(w.id);
                    }
                }
            }
        }
    }
}

/// Periodic BOOKMARKs of a kube-apiserver watch (`allowWatchBookmarks=true`).
pub struct Bookmarks {
    pub every: Duration,
    pub kind: &'static str,
    pub api_version: &'static str,
}

struct BodyState {
    initial: VecDeque<Bytes>,
    handle: WatchHandle,
    end: Instant,
    last_rv: u64,
    bookmarks: Option<(Bookmarks, Instant)>,
    done: bool,
}

/// The HTTP body of a watch: `initial` lines, then live events until the watch is cancelled, the
/// dispatcher drops it, or `max` elapses.
pub fn body(
    initial: Vec<Bytes>,
    handle: WatchHandle,
    start_rv: u64,
    max: Duration,
    bookmarks: Option<Bookmarks>,
) -> impl Stream<Item = Result<Bytes, actix_web::Error>> {
    let now = Instant::now();
    let state = BodyState {
        initial: initial.into(),
        handle,
        end: now + max,
        last_rv: start_rv,
        bookmarks: bookmarks.map(|b| {
            let first = now + b.every;
            (b, first)
        }),
        done: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        if let Some(line) = s.initial.pop_front() {
            return Some((Ok(line), s));
        }
        let next_bookmark = s.bookmarks.as_ref().map(|(_, at)| *at);
        tokio::select! {
            _ = s.handle.cancel.cancelled() => None,
            _ = tokio::time::sleep_until(s.end) => None,
            msg = s.handle.rx.recv() => match msg {
                Some((rv, line)) => {
                    s.last_rv = s.last_rv.max(rv);
                    Some((Ok(line), s))
                }
                None => None,
            },
            _ = async { match next_bookmark {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            } } => {
                let (b, at) = s.bookmarks.as_mut()?;
                *at = Instant::now() + b.every;
                let line = event_line("BOOKMARK", &bookmark_object(b.kind, b.api_version, s.last_rv));
                Some((Ok(line), s))
            }
        }
    })
}
