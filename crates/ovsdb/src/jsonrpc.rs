//! JSON-RPC 1.0 connection to ovsdb-server (RFC 7047 §4) over a unix stream socket.
//!
//! Owns the socket: a reader task splits the byte stream into JSON values ([`JsonFramer`]),
//! matches responses to pending requests by id, answers the server's `echo` requests, and
//! forwards notifications (`update`, `locked`, ...) to an optional channel. A writer task
//! serialises every outgoing message, so any number of callers may have requests in flight.
//! When the socket closes (EOF, I/O or framing error) every pending and later request fails
//! with [`OvsdbError::Closed`]; [`JsonRpcConnection::is_closed`] tells the owner to reconnect.

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        unix::{OwnedReadHalf, OwnedWriteHalf},
        UnixStream,
    },
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

use super::OvsdbError;

/// Largest single JSON value accepted from the server (a full-database monitor reply of a big
/// switch stays far below this).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// A server-to-client notification (a request with a null id), e.g. `update` from a monitor.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

/// Receives the connection's notifications; ends when the connection closes.
pub type Notifications = mpsc::UnboundedReceiver<Notification>;

type Reply = Result<Value, OvsdbError>;

/// State shared between the callers and the reader task.
#[derive(Default)]
struct Pending {
    closed: bool,
    waiters: HashMap<u64, oneshot::Sender<Reply>>,
}

struct Shared {
    pending: Mutex<Pending>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding this lock cannot leave the map inconsistent; keep going.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection closed and fails every pending request.
    fn close(&self) {
        let waiters = {
            let mut p = self.lock();
            p.closed = true;
            std::mem::take(&mut p.waiters)
        };
        for (_, tx) in waiters {
            let _ = tx.send(Err(OvsdbError::Closed));
        }
    }
}

/// One JSON-RPC connection. Cheap to share behind an `Arc`; dropping it stops its tasks and
/// closes the socket.
pub struct JsonRpcConnection {
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    next_id: AtomicU64,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl std::fmt::Debug for JsonRpcConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonRpcConnection")
            .field("closed", &self.is_closed())
            .finish()
    }
}

// === impl JsonRpcConnection ===

impl JsonRpcConnection {
    /// Connects to a unix socket. Notifications are dropped; use [`Self::connect_with_notifications`]
    /// to receive them.
    pub async fn connect(path: &Path) -> Result<Self, OvsdbError> {
        let (conn, _notifications) = Self::connect_with_notifications(path).await?;
        Ok(conn)
    }

    /// Connects to a unix socket and returns the notification stream too.
    pub async fn connect_with_notifications(path: &Path) -> Result<(Self, Notifications), OvsdbError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| OvsdbError::Connect {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Self::from_stream(stream))
    }

    /// Wraps an already connected stream (tests use a socket pair).
    pub fn from_stream(stream: UnixStream) -> (Self, Notifications) {
        let (rd, wr) = stream.into_split();
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
        });
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (note_tx, note_rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_loop(wr, out_rx, shared.clone()));
        let reader = tokio::spawn(read_loop(rd, shared.clone(), out_tx.clone(), note_tx));
        let conn = Self {
            shared,
            out: out_tx,
            next_id: AtomicU64::new(1),
            reader,
            writer,
        };
        (conn, note_rx)
    }

    /// True once the socket has closed; the connection is then useless.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Sends a request and waits for its response. A non-null `error` in the response becomes
    /// [`OvsdbError::Protocol`]. Cancel-safe: dropping the future forgets the request.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, OvsdbError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.shared.lock();
            if p.closed {
                return Err(OvsdbError::Closed);
            }
            p.waiters.insert(id, tx);
        }
        let _forget = ForgetOnDrop {
            shared: &self.shared,
            id,
        };
        let msg = json!({"method": method, "params": params, "id": id});
        let bytes = serde_json::to_vec(&msg).map_err(|e| OvsdbError::Protocol(e.to_string()))?;
        if self.out.send(bytes).is_err() {
            return Err(OvsdbError::Closed);
        }
        let result = rx.await.map_err(|_| OvsdbError::Closed)??;
        Ok(result)
    }

    /// Sends a notification (no id, no response), e.g. `monitor_cancel` does not need one.
    pub fn notify(&self, method: &str, params: Value) -> Result<(), OvsdbError> {
        if self.is_closed() {
            return Err(OvsdbError::Closed);
        }
        let msg = json!({"method": method, "params": params, "id": Value::Null});
        let bytes = serde_json::to_vec(&msg).map_err(|e| OvsdbError::Protocol(e.to_string()))?;
        self.out.send(bytes).map_err(|_| OvsdbError::Closed)
    }
}

impl Drop for JsonRpcConnection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
        self.shared.close();
    }
}

/// Removes a request's waiter when its caller goes away (timeout or cancellation).
struct ForgetOnDrop<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.shared.lock().waiters.remove(&self.id);
    }
}

async fn write_loop(mut wr: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Vec<u8>>, shared: Arc<Shared>) {
    while let Some(bytes) = rx.recv().await {
        if let Err(e) = wr.write_all(&bytes).await {
            tracing::debug!(error = %e, "OVSDB write failed");
            break;
        }
    }
    shared.close();
}

async fn read_loop(
    mut rd: OwnedReadHalf,
    shared: Arc<Shared>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    notes: mpsc::UnboundedSender<Notification>,
) {
    let mut framer = JsonFramer::default();
    let mut buf = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) => {
                tracing::debug!("OVSDB connection closed by the server");
                break;
            }
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "OVSDB read failed");
                break;
            }
        };
        framer.push(&buf[..n]);
        loop {
            match framer.next_value() {
                Ok(Some(v)) => dispatch(v, &shared, &out, &notes),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "OVSDB stream is corrupt; closing the connection");
                    break 'read;
                }
            }
        }
    }
    shared.close();
}

/// Routes one message from the server.
fn dispatch(
    msg: Value,
    shared: &Shared,
    out: &mpsc::UnboundedSender<Vec<u8>>,
    notes: &mpsc::UnboundedSender<Notification>,
) {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    if let Some(method) = msg.get("method").and_then(Value::as_str) {
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        if method == "echo" && !id.is_null() {
            // RFC 7047 §4.1.11: reply with the same params, or the server drops us.
            let reply = json!({"id": id, "result": params, "error": Value::Null});
            if let Ok(bytes) = serde_json::to_vec(&reply) {
                let _ = out.send(bytes);
            }
        } else if id.is_null() {
            let _ = notes.send(Notification {
                method: method.to_string(),
                params,
            });
        } else {
            // A request we do not implement: say so, as JSON-RPC expects.
            let reply = json!({"id": id, "result": Value::Null, "error": format!("unknown method {method}")});
            if let Ok(bytes) = serde_json::to_vec(&reply) {
                let _ = out.send(bytes);
            }
        }
        return;
    }
    let Some(id) = id.as_u64() else {
        tracing::debug!(%msg, "OVSDB response with an id we never use");
        return;
    };
    let Some(tx) = shared.lock().waiters.remove(&id) else {
        return; // caller gave up (timeout)
    };
    let reply = match msg.get("error") {
        Some(e) if !e.is_null() => Err(OvsdbError::Protocol(format!("server error: {e}"))),
        _ => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
    };
    let _ = tx.send(reply);
}

// === JSON stream framing ===

/// Splits a byte stream of concatenated JSON objects/arrays (no separators required) into
/// values. Scans each byte once, tracking nesting depth and string/escape state, so a large
/// value arriving in many reads costs linear time.
#[derive(Debug, Default)]
pub struct JsonFramer {
    buf: Vec<u8>,
    /// Bytes at the front of `buf` already returned as values (dropped on the next push, so a
    /// read holding many small values is not shifted once per value).
    consumed: usize,
    /// Bytes of `buf` already scanned.
    scanned: usize,
    /// Start of the value being scanned, once its first byte has been seen.
    start: Option<usize>,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

/// A framing failure; the stream cannot be resynchronised after it.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    #[error("unexpected byte {0:#04x} between JSON values")]
    Garbage(u8),
    #[error("unbalanced closing bracket")]
    Unbalanced,
    #[error("JSON value larger than {MAX_MESSAGE_BYTES} bytes")]
    TooLarge,
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl JsonFramer {
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.consumed > 0 {
            self.buf.drain(..self.consumed);
            self.scanned -= self.consumed;
            self.start = self.start.map(|s| s - self.consumed);
            self.consumed = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete value, `None` if more bytes are needed.
    pub fn next_value(&mut self) -> Result<Option<Value>, FramingError> {
        while self.scanned < self.buf.len() {
            let b = self.buf[self.scanned];
            let i = self.scanned;
            self.scanned += 1;
            if self.start.is_none() {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => continue,
                    b'{' | b'[' => {
                        self.start = Some(i);
                        self.depth = 1;
                        continue;
                    }
                    _ => return Err(FramingError::Garbage(b)),
                }
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.checked_sub(1).ok_or(FramingError::Unbalanced)?;
                    if self.depth == 0 {
                        let start = self.start.take().unwrap_or(0);
                        self.consumed = self.scanned;
                        return Ok(Some(serde_json::from_slice(&self.buf[start..self.scanned])?));
                    }
                }
                _ => {}
            }
        }
        match self.start {
            // Nothing but whitespace so far: drop it.
            None => {
                self.buf.clear();
                self.scanned = 0;
                self.consumed = 0;
            }
            Some(start) if self.buf.len() - start > MAX_MESSAGE_BYTES => return Err(FramingError::TooLarge),
            Some(_) => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, BufReader};

    use super::*;

    fn drain(f: &mut JsonFramer) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(v) = f.next_value().expect("framing") {
            out.push(v);
        }
        out
    }

    #[test]
    fn framer_splits_concatenated_values() {
        let mut f = JsonFramer::default();
        f.push(br#"{"a":1}{"b":[1,2,{"c":"}"}]}  [3]"#);
        assert_eq!(
            drain(&mut f),
            vec![json!({"a":1}), json!({"b":[1,2,{"c":"}"}]}), json!([3])]
        );
        assert!(f.buf.is_empty());
    }

    #[test]
    fn framer_handles_values_split_across_reads_at_every_byte() {
        let stream = br#"{"id":1,"result":[{"rows":[{"name":"a \"quoted\" {brace"}]}],"error":null}{"id":null,"method":"update","params":["x\\",{"y":"]"}]}"#;
        for cut in 0..stream.len() {
            let mut f = JsonFramer::default();
            f.push(&stream[..cut]);
            let mut got = drain(&mut f);
            f.push(&stream[cut..]);
            got.extend(drain(&mut f));
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(
                got[0]["result"][0]["rows"][0]["name"],
                json!("a \"quoted\" {brace")
            );
            assert_eq!(got[1]["params"], json!(["x\\", {"y": "]"}]));
        }
        // One byte at a time, with whitespace between values.
        let mut f = JsonFramer::default();
        let mut got = Vec::new();
        for b in b" {\"k\":\"v\"}\n\n [ ] " {
            f.push(&[*b]);
            got.extend(drain(&mut f));
        }
        assert_eq!(got, vec![json!({"k":"v"}), json!([])]);
    }

    #[test]
    fn framer_rejects_garbage() {
        let mut f = JsonFramer::default();
        f.push(b"x{}");
        assert!(matches!(f.next_value(), Err(FramingError::Garbage(b'x'))));
        let mut f = JsonFramer::default();
        f.push(b"{\"a\":tru}");
        assert!(matches!(f.next_value(), Err(FramingError::Json(_))));
    }

    /// A scripted server on the other end of a socket pair, reading newline-free JSON.
    async fn server_values(stream: UnixStream) -> (mpsc::UnboundedReceiver<Value>, OwnedWriteHalf) {
        let (mut rd, wr) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut f = JsonFramer::default();
            let mut buf = [0u8; 1024];
            while let Ok(n) = rd.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                f.push(&buf[..n]);
                while let Ok(Some(v)) = f.next_value() {
                    let _ = tx.send(v);
                }
            }
        });
        (rx, wr)
    }

    async fn recv(rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("timely")
            .expect("a value")
    }

    #[tokio::test]
    async fn concurrent_calls_are_matched_by_id_and_echo_is_answered() {
        let (a, b) = UnixStream::pair().expect("pair");
        let (conn, mut notes) = JsonRpcConnection::from_stream(a);
        let conn = Arc::new(conn);
        let (mut from_client, mut to_client) = server_values(b).await;

        let c1 = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call("first", json!([1])).await }
        });
        let r1 = recv(&mut from_client).await;
        let c2 = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call("second", json!([2])).await }
        });
        let r2 = recv(&mut from_client).await;
        assert_eq!(r1["method"], json!("first"));
        assert_eq!(r2["method"], json!("second"));
        assert_ne!(r1["id"], r2["id"]);

        // Server: echo request, a notification, then the answers in reverse order, in one write
        // and with the second answer split in the middle.
        let out = format!(
            r#"{{"id":"echo","method":"echo","params":[]}}{{"id":null,"method":"update","params":["m",{{}}]}}{{"id":{},"result":"two","error":null}}{{"id":{},"result":"#,
            r2["id"], r1["id"]
        );
        to_client.write_all(out.as_bytes()).await.expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        to_client
            .write_all(br#""one","error":null}"#)
            .await
            .expect("write");

        let echo = recv(&mut from_client).await;
        assert_eq!(echo, json!({"id": "echo", "result": [], "error": null}));
        let n = tokio::time::timeout(Duration::from_secs(5), notes.recv())
            .await
            .expect("timely");
        assert_eq!(
            n,
            Some(Notification {
                method: "update".into(),
                params: json!(["m", {}])
            })
        );
        assert_eq!(c2.await.expect("join").expect("ok"), json!("two"));
        assert_eq!(c1.await.expect("join").expect("ok"), json!("one"));

        // A server-side error is reported.
        let c3 = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call("bad", json!([])).await }
        });
        let r3 = recv(&mut from_client).await;
        let out = format!(r#"{{"id":{},"result":null,"error":"unknown method"}}"#, r3["id"]);
        to_client.write_all(out.as_bytes()).await.expect("write");
        assert!(matches!(c3.await.expect("join"), Err(OvsdbError::Protocol(_))));

        // Close: pending calls fail, later calls fail at once, notifications end.
        let c4 = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call("hang", json!([])).await }
        });
        let _ = recv(&mut from_client).await;
        drop(to_client);
        let r4 = tokio::time::timeout(Duration::from_secs(5), c4)
            .await
            .expect("timely")
            .expect("join");
        assert!(matches!(r4, Err(OvsdbError::Closed)), "{r4:?}");
        assert!(conn.is_closed());
        assert!(matches!(
            conn.call("late", json!([])).await,
            Err(OvsdbError::Closed)
        ));
        let end = tokio::time::timeout(Duration::from_secs(5), notes.recv())
            .await
            .expect("timely");
        assert_eq!(end, None);
    }

    #[tokio::test]
    async fn cancelled_call_forgets_its_waiter() {
        let (a, b) = UnixStream::pair().expect("pair");
        let (conn, _notes) = JsonRpcConnection::from_stream(a);
        let mut lines = BufReader::new(b);
        let r = tokio::time::timeout(Duration::from_millis(50), conn.call("slow", json!([]))).await;
        assert!(r.is_err());
        assert!(conn.shared.lock().waiters.is_empty());
        // The request did go out.
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), lines.read_until(b'}', &mut got)).await;
        assert!(String::from_utf8_lossy(&got).contains("\"slow\""));
    }
}
