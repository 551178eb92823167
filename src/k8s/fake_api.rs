//! An in-process [`ApiClient`] for tests: [`FakeApi`] answers requests and opens watches from
//! scripts the test queues, and records every call so the test can assert on the exact method,
//! path and body the code under test sent. No network, no threads of its own.
//!
//! # Requests
//!
//! * [`FakeApi::respond`] queues one answer for a method and a path prefix. Queued answers are
//!   consumed once each, oldest first, by the first call that matches (same method, path starting
//!   with the prefix).
//! * [`FakeApi::respond_always`] sets a standing answer for a method and prefix, used whenever no
//!   queued answer matches (the most recently set standing answer that matches wins).
//! * Otherwise the call gets the default error: `404 NotFound` unless changed with
//!   [`FakeApi::set_default_error`].
//!
//! An `ApiError` answer whose `path` is empty (as built by [`FakeApi::status`] and
//! [`FakeApi::transport`]) gets the method and path of the call it answers, so errors read as the
//! real client's would.
//!
//! # Watches
//!
//! Each call to `watch(path)` takes the oldest queued watch script whose prefix matches `path`:
//! * [`FakeApi::watch_fails`]: the open fails with that error;
//! * [`FakeApi::watch_stream`]: the open succeeds and the body is fed through the returned
//!   [`WatchFeed`] (an unbounded sender of lines): send `Ok(line)` for a line (one JSON watch
//!   event), `Err(e)` for a transport error ending the body; dropping the feed ends the body.
//!   Lines sent before the watch is opened are buffered. `feed.is_closed()` /
//!   `feed.closed().await` tell the test the watcher dropped the body (stopped watching);
//! * [`FakeApi::watch_lines`]: a body that yields the given lines, then ends.
//!
//! With no matching script the open fails with the default error.
//!
//! # Recording and waiting
//!
//! [`FakeApi::calls`] returns every call (requests and watch opens) in order.
//! [`FakeApi::wait_for_watches`] and [`FakeApi::wait_for_calls`] wait, bounded by a timeout,
//! until enough matching calls were made, so tests never sleep for a guessed time.
//!
//! ```
//! # use antrea_vm_agent::k8s::fake_api::FakeApi;
//! # use antrea_vm_agent::k8s::api::{ApiClient, Method};
//! # use futures::StreamExt;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let api = FakeApi::new();
//! api.respond(Method::Get, "/apis/crd.antrea.io/", Ok(serde_json::json!({"kind": "X"})));
//! let feed = api.watch_stream("/apis/controlplane.antrea.io/v1beta2/addressgroups");
//! feed.send(Ok(r#"{"type":"BOOKMARK","object":{}}"#.to_string())).unwrap();
//!
//! let answer = api.request(Method::Get, "/apis/crd.antrea.io/v1/x", None).await.unwrap();
//! assert_eq!(answer["kind"], "X");
//! let mut lines = api.watch("/apis/controlplane.antrea.io/v1beta2/addressgroups?watch=true").await.unwrap();
//! assert!(lines.next().await.unwrap().unwrap().contains("BOOKMARK"));
//! assert!(api.request(Method::Get, "/other", None).await.unwrap_err().is_not_found());
//! assert_eq!(api.calls().len(), 3);
//! # });
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::api::{ApiClient, ApiError, Method, WatchLines};

/// Feeds the body of one scripted watch; dropping it ends the body.
pub type WatchFeed = mpsc::UnboundedSender<Result<String, ApiError>>;

/// Builds the default error of a call that nothing answers.
pub type DefaultError = Arc<dyn Fn(Method, &str) -> ApiError + Send + Sync>;

/// One call made to the fake.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// `Method::Get` for watches.
    pub method: Method,
    /// The full path, with its query string, as the caller gave it.
    pub path: String,
    pub body: Option<Value>,
    /// True for `watch`, false for `request`.
    pub watch: bool,
}

enum WatchScript {
    Fail(ApiError),
    Stream(mpsc::UnboundedReceiver<Result<String, ApiError>>),
}

struct Answer {
    method: Method,
    prefix: String,
    result: Result<Value, ApiError>,
}

struct State {
    queued: VecDeque<Answer>,
    standing: Vec<Answer>,
    watches: VecDeque<(String, WatchScript)>,
    calls: Vec<Call>,
    default_error: DefaultError,
}

struct Inner {
    state: Mutex<State>,
    /// Bumped after every recorded call; waiters re-check their condition on each change.
    calls_made: tokio::sync::watch::Sender<u64>,
    name: String,
}

/// A scripted, recording [`ApiClient`]. Cheap to clone; clones share the scripts and records.
#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Inner>,
}

impl Default for FakeApi {
    fn default() -> Self {
        FakeApi::new()
    }
}

impl std::fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApi").field("name", &self.inner.name).finish()
    }
}

/// Fills in the method and path of an error built without them.
fn complete(error: ApiError, method: Method, path: &str) -> ApiError {
    match error {
        ApiError::Status {
            path: p,
            code,
            reason,
            message,
            ..
        } if p.is_empty() => ApiError::Status {
            method: method.as_str(),
            path: path.to_owned(),
            code,
            reason,
            message,
        },
        ApiError::Transport { path: p, message, .. } if p.is_empty() => ApiError::Transport {
            method: method.as_str(),
            path: path.to_owned(),
            message,
        },
        ApiError::Decode { path: p, message, .. } if p.is_empty() => ApiError::Decode {
            method: method.as_str(),
            path: path.to_owned(),
            message,
        },
        other => other,
    }
}

impl FakeApi {
    /// A fake that answers nothing yet (every call gets `404 NotFound`); `describe()` is
    /// `fake-api`.
    pub fn new() -> Self {
        FakeApi::named("fake-api")
    }

    /// Like [`FakeApi::new`], with `describe()` returning `name`.
    pub fn named(name: impl Into<String>) -> Self {
        let default_error: DefaultError = Arc::new(|method, path| ApiError::Status {
            method: method.as_str(),
            path: path.to_owned(),
            code: 404,
            reason: "NotFound".into(),
            message: "the fake API has no answer for this call".into(),
        });
        FakeApi {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queued: VecDeque::new(),
                    standing: Vec::new(),
                    watches: VecDeque::new(),
                    calls: Vec::new(),
                    default_error,
                }),
                calls_made: tokio::sync::watch::channel(0).0,
                name: name.into(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock must not hide the original failure
        // behind a poison error.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An HTTP error status (e.g. `status(500, "InternalError", "boom")`); the method and path
    /// are filled in from the call it answers.
    pub fn status(code: u16, reason: &str, message: &str) -> ApiError {
        ApiError::Status {
            method: "",
            path: String::new(),
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A transport error (connection refused, TLS, reset); method and path filled in.
    pub fn transport(message: &str) -> ApiError {
        ApiError::Transport {
            method: "",
            path: String::new(),
            message: message.into(),
        }
    }

    /// Queues one answer for the next `method` call on a path starting with `prefix`.
    pub fn respond(&self, method: Method, prefix: &str, result: Result<Value, ApiError>) {
        self.state().queued.push_back(Answer {
            method,
            prefix: prefix.into(),
            result,
        });
    }

    /// Answers every `method` call on a path starting with `prefix` with `result` when no queued
    /// answer matches. Set again to change it (the latest matching one wins).
    pub fn respond_always(&self, method: Method, prefix: &str, result: Result<Value, ApiError>) {
        self.state().standing.push(Answer {
            method,
            prefix: prefix.into(),
            result,
        });
    }

    /// Changes the error of calls nothing answers (default `404 NotFound`).
    pub fn set_default_error(&self, f: impl Fn(Method, &str) -> ApiError + Send + Sync + 'static) {
        self.state().default_error = Arc::new(f);
    }

    /// Queues a watch open on a path starting with `prefix` that fails with `error`.
    pub fn watch_fails(&self, prefix: &str, error: ApiError) {
        self.state()
            .watches
            .push_back((prefix.into(), WatchScript::Fail(error)));
    }

    /// Queues a watch open on a path starting with `prefix` that succeeds; its body is what the
    /// test sends through the returned feed, and ends when the feed is dropped.
    pub fn watch_stream(&self, prefix: &str) -> WatchFeed {
        let (tx, rx) = mpsc::unbounded_channel();
        self.state()
            .watches
            .push_back((prefix.into(), WatchScript::Stream(rx)));
        tx
    }

    /// Queues a watch open on a path starting with `prefix` whose body is `lines`, then ends.
    pub fn watch_lines<I, S>(&self, prefix: &str, lines: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let feed = self.watch_stream(prefix);
        for line in lines {
            // Cannot fail: the receiver is in the queue, alive.
            let _ = feed.send(Ok(line.into()));
        }
    }

    /// How many queued (unconsumed) watch scripts have a prefix starting with `prefix`.
    pub fn pending_watches(&self, prefix: &str) -> usize {
        self.state()
            .watches
            .iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .count()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The paths of the watches opened so far on paths starting with `prefix`, in order
    /// (including the opens that failed).
    pub fn watch_paths(&self, prefix: &str) -> Vec<String> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.watch && c.path.starts_with(prefix))
            .map(|c| c.path.clone())
            .collect()
    }

    /// The requests (not watches) so far with `method` on paths starting with `prefix`.
    pub fn requests(&self, method: Method, prefix: &str) -> Vec<Call> {
        self.state()
            .calls
            .iter()
            .filter(|c| !c.watch && c.method == method && c.path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Forgets the recorded calls (not the scripts).
    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }

    /// Waits until at least `n` recorded calls satisfy `pred`, at most `timeout`. Returns the
    /// matching calls, or an error describing what was seen.
    pub async fn wait_for_calls(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Call) -> bool,
    ) -> Result<Vec<Call>, String> {
        let mut changes = self.inner.calls_made.subscribe();
        let check = || -> Vec<Call> { self.state().calls.iter().filter(|c| pred(c)).cloned().collect() };
        let wait = async {
            loop {
                changes.borrow_and_update();
                let matching = check();
                if matching.len() >= n {
                    return matching;
                }
                // The sender lives in `self`, so this only returns on a new call.
                if changes.changed().await.is_err() {
                    return matching;
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(matching) if matching.len() >= n => Ok(matching),
            _ => {
                let seen: Vec<String> = self
                    .calls()
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {}{}",
                            c.method.as_str(),
                            c.path,
                            if c.watch { " (watch)" } else { "" }
                        )
                    })
                    .collect();
                Err(format!(
                    "fewer than {n} matching calls after {timeout:?}; calls seen: {seen:?}"
                ))
            }
        }
    }

    /// Waits until watches on paths starting with `prefix` were opened (attempted) at least `n`
    /// times in all, at most `timeout`; returns their paths.
    pub async fn wait_for_watches(
        &self,
        prefix: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<String>, String> {
        let calls = self
            .wait_for_calls(n, timeout, |c| c.watch && c.path.starts_with(prefix))
            .await?;
        Ok(calls.into_iter().map(|c| c.path).collect())
    }

    fn record(&self, state: &mut State, call: Call) {
        state.calls.push(call);
        self.inner.calls_made.send_modify(|n| *n += 1);
    }
}

#[async_trait]
impl ApiClient for FakeApi {
    async fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, ApiError> {
        let mut state = self.state();
        self.record(
            &mut state,
            Call {
                method,
                path: path.to_owned(),
                body: body.cloned(),
                watch: false,
            },
        );
        let matches = |a: &Answer| a.method == method && path.starts_with(&a.prefix);
        let result = if let Some(i) = state.queued.iter().position(matches) {
            state.queued.remove(i).map(|a| a.result)
        } else {
            state
                .standing
                .iter()
                .rev()
                .find(|a| matches(a))
                .map(|a| a.result.clone())
        };
        match result {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(complete(e, method, path)),
            None => Err((state.default_error)(method, path)),
        }
    }

    async fn watch(&self, path: &str) -> Result<WatchLines, ApiError> {
        let mut state = self.state();
        self.record(
            &mut state,
            Call {
                method: Method::Get,
                path: path.to_owned(),
                body: None,
                watch: true,
            },
        );
        let script = state
            .watches
            .iter()
            .position(|(prefix, _)| path.starts_with(prefix.as_str()))
            .and_then(|i| state.watches.remove(i));
        match script {
            Some((_, WatchScript::Fail(e))) => Err(complete(e, Method::Get, path)),
            Some((_, WatchScript::Stream(mut rx))) => {
                let path = path.to_owned();
                Ok(futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
                    .map(move |item| item.map_err(|e| complete(e, Method::Get, &path)))
                    .boxed())
            }
            None => Err((state.default_error)(Method::Get, path)),
        }
    }

    fn describe(&self) -> String {
        self.inner.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn queued_answers_are_used_once_in_order_then_standing_then_default() {
        let api = FakeApi::new();
        api.respond(Method::Get, "/a/", Ok(json!(1)));
        api.respond(Method::Get, "/a/", Ok(json!(2)));
        api.respond(Method::Put, "/a/", Err(FakeApi::status(409, "Conflict", "stale")));
        api.respond_always(Method::Get, "/a/x", Ok(json!("always")));

        assert_eq!(api.request(Method::Get, "/a/x", None).await, Ok(json!(1)));
        // A PUT answer is not used by a GET.
        assert_eq!(api.request(Method::Get, "/a/y", None).await, Ok(json!(2)));
        assert_eq!(api.request(Method::Get, "/a/x", None).await, Ok(json!("always")));
        assert_eq!(api.request(Method::Get, "/a/x", None).await, Ok(json!("always")));
        let e = api.request(Method::Get, "/a/y", None).await.unwrap_err();
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "GET /a/y: HTTP 404 NotFound: the fake API has no answer for this call"
        );

        let body = json!({"metadata": {"name": "n"}});
        let e = api.request(Method::Put, "/a/z", Some(&body)).await.unwrap_err();
        assert!(e.is_conflict());
        assert_eq!(e.to_string(), "PUT /a/z: HTTP 409 Conflict: stale");
        assert_eq!(
            api.requests(Method::Put, "/a/"),
            vec![Call {
                method: Method::Put,
                path: "/a/z".into(),
                body: Some(body),
                watch: false
            }]
        );

        api.set_default_error(|m, p| ApiError::Transport {
            method: m.as_str(),
            path: p.into(),
            message: "refused".into(),
        });
        let e = api.request(Method::Post, "/b", None).await.unwrap_err();
        assert_eq!(e.to_string(), "POST /b: refused");
        assert_eq!(api.calls().len(), 7);
    }

    #[tokio::test]
    async fn watch_scripts_fail_or_stream_and_report_a_dropped_body() {
        let api = FakeApi::named("controller");
        assert_eq!(api.describe(), "controller");
        api.watch_fails("/w/a", FakeApi::status(500, "InternalError", "down"));
        let feed = api.watch_stream("/w/a");
        api.watch_lines("/w/b", ["x", "y"]);
        assert_eq!(api.pending_watches("/w/a"), 2);

        let e = api.watch("/w/a?watch=true").await.err().unwrap();
        assert_eq!(e.to_string(), "GET /w/a?watch=true: HTTP 500 InternalError: down");
        feed.send(Ok("before open".into())).unwrap();
        let mut a = api.watch("/w/a?watch=true").await.unwrap();
        assert_eq!(a.next().await, Some(Ok("before open".into())));
        feed.send(Err(FakeApi::transport("reset"))).unwrap();
        assert_eq!(
            a.next().await.unwrap().unwrap_err().to_string(),
            "GET /w/a?watch=true: reset"
        );

        let b: Vec<_> = api.watch("/w/b").await.unwrap().collect().await;
        assert_eq!(b, vec![Ok("x".to_string()), Ok("y".to_string())]);
        // Nothing scripted any more: the default error.
        assert!(api.watch("/w/b").await.err().unwrap().is_not_found());

        assert!(!feed.is_closed());
        drop(a);
        assert!(feed.is_closed());
        assert_eq!(
            api.watch_paths("/w/"),
            vec!["/w/a?watch=true", "/w/a?watch=true", "/w/b", "/w/b"]
        );
    }

    #[tokio::test]
    async fn waiting_for_watches_is_bounded() {
        let api = FakeApi::new();
        let waiter = {
            let api = api.clone();
            tokio::spawn(async move { api.wait_for_watches("/w", 2, T).await })
        };
        let _ = api.watch("/w/1").await;
        let _ = api.watch("/other").await;
        let _ = api.watch("/w/2").await;
        assert_eq!(
            waiter.await.unwrap(),
            Ok(vec!["/w/1".to_string(), "/w/2".to_string()])
        );

        let e = api
            .wait_for_watches("/w", 3, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert!(e.contains("fewer than 3") && e.contains("/w/2 (watch)"), "{e}");
    }
}
