//! The OpenFlow 1.5 connection to a bridge's management socket (`<ovsRunDir>/<bridge>.mgmt`):
//! [`OfConnector`] opens it, [`OfConnection`] implements [`Switch`] over it.
//!
//! One connection serves many concurrent callers. A writer task owns the socket's write half
//! and writes each caller's batch of messages contiguously; a reader task decodes every
//! message and hands it to the caller that registered its xid (callers register a contiguous
//! xid range, so a bundle of thousands of flow_mods costs one map entry), answers echo
//! requests, and publishes notifications (NXT_PACKET_IN2, port status) to the subscribers of
//! the connection's [`Hub`]. A keepalive task sends an echo request every `echo_interval` and
//! declares the connection dead when one is not answered within `echo_timeout`.
//!
//! A message from the switch that cannot be decoded (truncated, bad lengths, bad framing) is
//! an error on the connection: it is logged with a summary of its bytes and the connection is
//! closed. Then (as after EOF, an I/O error or an echo timeout) [`Switch::closed`] resolves,
//! every subscription ends, and every pending or later call fails with [`OfError::Closed`];
//! reconnecting is the caller's business (the flow installer does it with backoff).
//!
//! At connect the agent announces its controller id, selects NXT_PACKET_IN2, sets
//! `miss_send_len` (a management-socket connection gets no asynchronous messages without it)
//! and sets its async configuration ([`AsyncConfig::agent`]).

mod bundle;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, error, warn};

use super::events::{AsyncConfig, Event, Hub, PacketIn, PacketOut, PortDesc, Subscription};
use super::flow::{AggregateStats, FlowFilter, FlowMod, FlowStats};
use super::messages::{
    self, bytes_summary, multipart, ErrorMsg, Features, GroupCommand, Message, MeterCommand,
};
use super::monitor::{self, FlowUpdate};
use super::render::{render_flow, NameMap};
use super::wire::{msg_type, CodecError, Header, OFP_HEADER_LEN, OFP_VERSION};
use super::{FlowModChunks, Group, Meter, OfError, Switch, SwitchConnector};

/// Timings of a connection.
#[derive(Debug, Clone)]
pub struct ConnOptions {
    /// How long the HELLO/FEATURES handshake may take.
    pub handshake_timeout: Duration,
    /// How often to send an echo request.
    pub echo_interval: Duration,
    /// How long an echo request may stay unanswered before the connection is declared dead.
    pub echo_timeout: Duration,
    /// Upper bound for any single request (a whole bundle counts as one).
    pub request_timeout: Duration,
    /// How many notifications each subscription queues before it starts dropping (and
    /// counting) them.
    pub event_queue: usize,
}

impl Default for ConnOptions {
    fn default() -> Self {
        ConnOptions {
            handshake_timeout: Duration::from_secs(10),
            echo_interval: Duration::from_secs(5),
            // ovs-vswitchd's main loop answers nothing, echoes included, while it commits a
            // bundle: a 10,000-rule removal (157,000 DELETE_STRICTs) held it 28 s on the idle
            // 2-core lab machine and 68 s under load (`benches/fqdn_hold.rs`). A connection
            // declared dead meanwhile loses its in-flight bundle (the installer's, or a held DNS
            // answer's flows) and the reconnect waits on the same busy loop; a switch that is
            // gone shows as EOF on the unix socket at once. So the timeout is long.
            echo_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(300),
            event_queue: 4096,
        }
    }
}

/// Connects to `<path>` (a bridge's `.mgmt` socket) and announces `controller_id`.
#[derive(Debug, Clone)]
pub struct OfConnector {
    pub path: PathBuf,
    pub controller_id: u16,
}

#[async_trait]
impl SwitchConnector for OfConnector {
    async fn connect(&self) -> Result<Arc<dyn Switch>, OfError> {
        let c = OfConnection::connect(&self.path, self.controller_id, ConnOptions::default()).await?;
        Ok(Arc::new(c))
    }
}

type Reply = (Header, Message);

/// Encodes one message given its xid.
type Encoder<'a> = Box<dyn FnOnce(u32) -> Result<Vec<u8>, CodecError> + Send + 'a>;

/// Registered xid ranges: start -> (last xid, where replies go).
#[derive(Default)]
struct Pending {
    next_xid: u32,
    ranges: BTreeMap<u32, (u32, mpsc::UnboundedSender<Reply>)>,
}

struct Inner {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Mutex<Pending>,
    next_bundle: Mutex<u32>,
    closed: watch::Sender<bool>,
    opts: ConnOptions,
    hub: Hub,
    /// Where flow monitor updates go, once [`Switch::monitor_flows`] asked for them.
    flow_updates: Mutex<Option<mpsc::UnboundedSender<Vec<FlowUpdate>>>>,
}

impl Inner {
    fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    fn mark_closed(&self, why: &str) {
        if !self.closed.send_replace(true) {
            debug!(why, "OpenFlow connection closed");
        }
        if let Ok(mut p) = self.pending.lock() {
            p.ranges.clear();
        }
        if let Ok(mut u) = self.flow_updates.lock() {
            u.take();
        }
        self.hub.close();
    }

    /// Registers `n` consecutive xids; replies to any of them arrive on the returned receiver.
    fn register(self: &Arc<Self>, n: u32) -> Result<Registration, OfError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut p = self.pending.lock().map_err(|_| OfError::Closed)?;
        // Checked under the lock: `mark_closed` sets the flag before it clears the ranges.
        if self.is_closed() {
            return Err(OfError::Closed);
        }
        let n = n.max(1);
        let mut start = p.next_xid.max(1);
        if start.checked_add(n).is_none() {
            start = 1;
        }
        p.next_xid = start + n;
        p.ranges.insert(start, (start + n - 1, tx));
        Ok(Registration {
            inner: self.clone(),
            start,
            rx,
        })
    }

    fn dispatch(&self, h: Header, m: Message) -> Option<Message> {
        let Ok(p) = self.pending.lock() else {
            return Some(m);
        };
        if let Some((_, (end, tx))) = p.ranges.range(..=h.xid).next_back() {
            if h.xid <= *end {
                return match tx.send((h, m)) {
                    Ok(()) => None,
                    Err(e) => Some(e.0 .1),
                };
            }
        }
        Some(m)
    }

    /// Hands flow monitor updates to whoever asked for them (dropped when nobody did).
    fn flow_updates(&self, updates: Vec<FlowUpdate>) {
        if let Ok(tx) = self.flow_updates.lock() {
            if let Some(tx) = tx.as_ref() {
                let _ = tx.send(updates);
            }
        }
    }

    fn send(&self, bytes: Vec<u8>) -> Result<(), OfError> {
        self.tx.send(bytes).map_err(|_| OfError::Closed)
    }
}

/// A registered xid range; unregisters on drop (also when the caller is cancelled).
struct Registration {
    inner: Arc<Inner>,
    start: u32,
    rx: mpsc::UnboundedReceiver<Reply>,
}

impl Registration {
    async fn next(&mut self, deadline: Instant, what: &str) -> Result<Reply, OfError> {
        match tokio::time::timeout_at(deadline, self.rx.recv()).await {
            Err(_) => Err(OfError::Timeout(what.to_string())),
            Ok(None) => Err(OfError::Closed),
            Ok(Some(r)) => Ok(r),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut p) = self.inner.pending.lock() {
            p.ranges.remove(&self.start);
        }
    }
}

/// A live OpenFlow 1.5 connection.
pub struct OfConnection {
    inner: Arc<Inner>,
    features: Features,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for OfConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfConnection")
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

impl Drop for OfConnection {
    fn drop(&mut self) {
        self.inner.mark_closed("connection dropped");
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// An encoded request whose xid is filled in when it is sent.
fn with_xid(mut bytes: Vec<u8>) -> impl FnOnce(u32) -> Vec<u8> {
    move |xid| {
        if let Some(slot) = bytes.get_mut(4..8) {
            slot.copy_from_slice(&xid.to_be_bytes());
        }
        bytes
    }
}

fn codec(e: CodecError) -> OfError {
    OfError::Malformed(e.to_string())
}

async fn read_msg(rd: &mut BufReader<OwnedReadHalf>) -> Result<Vec<u8>, OfError> {
    let mut head = [0u8; OFP_HEADER_LEN];
    rd.read_exact(&mut head).await?;
    let h = Header::parse(&head).map_err(codec)?;
    let mut buf = vec![0u8; usize::from(h.length)];
    buf[..OFP_HEADER_LEN].copy_from_slice(&head);
    rd.read_exact(&mut buf[OFP_HEADER_LEN..]).await?;
    Ok(buf)
}

async fn writer_task(inner: Arc<Inner>, mut wr: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut closed = inner.closed.subscribe();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = closed.wait_for(|c| *c) => None,
        };
        let Some(mut buf) = first else { break };
        // Coalesce whatever else is queued into one write.
        while buf.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(more) => buf.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if let Err(e) = wr.write_all(&buf).await {
            inner.mark_closed(&format!("write failed: {e}"));
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// What the reader does with a message nobody waits for.
fn unsolicited(inner: &Inner, h: Header, m: Message) {
    match m {
        Message::PacketIn(pi) => inner.hub.publish(Event::PacketIn(pi)),
        Message::PortStatus(ps) => inner.hub.publish(Event::PortStatus(ps)),
        Message::MultipartReply { mp_type, body, .. } if mp_type == monitor::MP_FLOW_MONITOR => {
            let updates = monitor::decode_flow_updates(&body).unwrap_or_else(|e| {
                warn!(error = %e, body = %bytes_summary(&body), "undecodable flow monitor update");
                vec![FlowUpdate::Undecoded]
            });
            inner.flow_updates(updates);
        }
        Message::Other { msg_type, body } if msg_type == msg_type::REQUESTFORWARD => {
            inner.flow_updates(vec![monitor::forwarded_request(&body)]);
        }
        Message::Error(e) => {
            let request = e.failed_request();
            warn!(
                error = %e.describe(),
                xid = h.xid,
                request = request.map(|r| msg_type::name(r.msg_type)).unwrap_or("unknown"),
                flow = e.failed_flow().map(|f| render_flow(&f, &NameMap::new())).unwrap_or_default(),
                "OpenFlow error from switch for a request nobody waits for"
            );
        }
        m if m.is_async() => debug!(
            msg_type = msg_type::name(h.msg_type),
            "ignoring asynchronous OpenFlow message"
        ),
        _ => debug!(
            msg_type = msg_type::name(h.msg_type),
            xid = h.xid,
            "unsolicited OpenFlow message"
        ),
    }
}

async fn reader_task(inner: Arc<Inner>, mut rd: BufReader<OwnedReadHalf>) {
    let mut closed = inner.closed.subscribe();
    loop {
        let msg = tokio::select! {
            m = read_msg(&mut rd) => m,
            _ = closed.wait_for(|c| *c) => break,
        };
        let bytes = match msg {
            Ok(b) => b,
            Err(e) => {
                inner.mark_closed(&format!("read failed: {e}"));
                break;
            }
        };
        let (h, m) = match messages::decode_message(&bytes) {
            Ok(x) => x,
            Err(e) => {
                // A switch that sends what we cannot parse is not one we can keep talking to:
                // close, so that `closed()` resolves and the owner reconnects.
                error!(
                    error = %e,
                    message = %bytes_summary(&bytes),
                    "malformed OpenFlow message from switch; closing the connection"
                );
                inner.mark_closed("malformed message from switch");
                break;
            }
        };
        if let Message::EchoRequest(data) = &m {
            match messages::echo_reply(h.xid, data) {
                Ok(b) => {
                    if inner.send(b).is_err() {
                        break;
                    }
                }
                Err(e) => warn!(error = %e, "cannot encode echo reply"),
            }
            continue;
        }
        if m.is_async() {
            unsolicited(&inner, h, m);
        } else if let Some(m) = inner.dispatch(h, m) {
            unsolicited(&inner, h, m);
        }
    }
    inner.mark_closed("reader stopped");
}

async fn keepalive_task(inner: Arc<Inner>) {
    loop {
        tokio::time::sleep(inner.opts.echo_interval).await;
        let Ok(mut reg) = inner.register(1) else { return };
        let b = match messages::echo_request(reg.start, b"antrea-vm-agent") {
            Ok(b) => b,
            Err(_) => return,
        };
        if inner.send(b).is_err() {
            return;
        }
        let deadline = Instant::now() + inner.opts.echo_timeout;
        match reg.next(deadline, "echo reply").await {
            Ok(_) => {}
            Err(OfError::Timeout(_)) => {
                inner.mark_closed("echo request not answered");
                return;
            }
            Err(_) => return,
        }
    }
}

/// Negotiates the version from the switch's HELLO.
fn check_hello(h: &Header, m: &Message) -> Result<(), OfError> {
    let Message::Hello { versions } = m else {
        return Err(OfError::Negotiation(format!(
            "expected HELLO, got {}",
            msg_type::name(h.msg_type)
        )));
    };
    let ok = match versions {
        Some(bits) => bits & (1 << OFP_VERSION) != 0,
        None => h.version >= OFP_VERSION,
    };
    if ok {
        return Ok(());
    }
    let offered: Vec<String> = match versions {
        Some(bits) => (1..32u32)
            .filter(|v| bits & (1 << v) != 0)
            .map(|v| format!("1.{}", v - 1))
            .collect(),
        None => vec![format!("1.{}", h.version.saturating_sub(1))],
    };
    Err(OfError::Negotiation(format!(
        "the switch speaks OpenFlow {} but not 1.5; add OpenFlow15 to the bridge's protocols",
        offered.join(", ")
    )))
}

fn rejected(request: impl Into<String>, e: &ErrorMsg, flow: Option<String>) -> OfError {
    OfError::Rejected {
        request: request.into(),
        kind: e.describe(),
        flow,
    }
}

impl OfConnection {
    /// Connects, negotiates OpenFlow 1.5, reads the features, sets the controller id and
    /// selects NXT_PACKET_IN2 for packet-ins.
    pub async fn connect(
        path: &Path,
        controller_id: u16,
        opts: ConnOptions,
    ) -> Result<OfConnection, OfError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| OfError::Connect {
                path: path.display().to_string(),
                source,
            })?;
        let (rd, mut wr) = stream.into_split();
        let mut rd = BufReader::with_capacity(1 << 16, rd);
        let deadline = Instant::now() + opts.handshake_timeout;

        // HELLO exchange, before the tasks start.
        wr.write_all(&messages::hello(0)).await?;
        let first = tokio::time::timeout_at(deadline, read_msg(&mut rd))
            .await
            .map_err(|_| OfError::Timeout("HELLO from switch".into()))??;
        let (h, m) = messages::decode_message(&first).map_err(codec)?;
        check_hello(&h, &m)?;

        let (tx, rx) = mpsc::unbounded_channel();
        let (closed, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            tx,
            pending: Mutex::new(Pending {
                next_xid: 1,
                ranges: BTreeMap::new(),
            }),
            next_bundle: Mutex::new(1),
            closed,
            hub: Hub::new(opts.event_queue),
            flow_updates: Mutex::new(None),
            opts,
        });
        let tasks = vec![
            tokio::spawn(writer_task(inner.clone(), wr, rx)),
            tokio::spawn(reader_task(inner.clone(), rd)),
        ];
        let mut conn = OfConnection {
            inner: inner.clone(),
            features: Features {
                datapath_id: 0,
                n_buffers: 0,
                n_tables: 0,
                auxiliary_id: 0,
                capabilities: 0,
            },
            tasks,
        };

        // FEATURES.
        let mut reg = inner.register(1)?;
        inner.send(messages::features_request(reg.start))?;
        loop {
            let (_, m) = reg.next(deadline, "FEATURES_REPLY").await?;
            match m {
                Message::FeaturesReply(f) => {
                    conn.features = f;
                    break;
                }
                Message::Error(e) => return Err(rejected("features request", &e, None)),
                _ => {}
            }
        }
        drop(reg);

        // Controller id, packet-in format, miss_send_len and async configuration, confirmed by
        // a barrier.
        let mut reg = inner.register(5)?;
        let s = reg.start;
        let mut buf = messages::set_controller_id(s, controller_id);
        buf.extend(messages::set_packet_in_format(
            s + 1,
            messages::NXPIF_NXT_PACKET_IN2,
        ));
        buf.extend(messages::set_config(s + 2, 0, messages::MISS_SEND_LEN_NO_BUFFER));
        buf.extend(messages::set_async(s + 3, &AsyncConfig::agent()));
        buf.extend(messages::barrier_request(s + 4));
        inner.send(buf)?;
        loop {
            let (h, m) = reg.next(deadline, "barrier after controller setup").await?;
            match m {
                Message::Error(e) => {
                    let what = match h.xid.wrapping_sub(s) {
                        0 => "set controller id",
                        1 => "set packet-in format NXT_PACKET_IN2",
                        2 => "set config (miss_send_len)",
                        3 => "set async configuration",
                        _ => "barrier",
                    };
                    return Err(rejected(what, &e, None));
                }
                Message::BarrierReply => break,
                _ => {}
            }
        }
        drop(reg);
        conn.tasks.push(tokio::spawn(keepalive_task(inner)));
        Ok(conn)
    }

    /// What the switch said about itself in FEATURES_REPLY.
    pub fn features(&self) -> Features {
        self.features
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.opts.request_timeout
    }

    fn next_bundle_id(&self) -> u32 {
        match self.inner.next_bundle.lock() {
            Ok(mut b) => {
                let id = *b;
                *b = b.wrapping_add(1).max(1);
                id
            }
            Err(_) => 1,
        }
    }

    /// Sends a multipart request and collects the bodies of all reply parts.
    async fn multipart(&self, build: impl FnOnce(u32) -> Vec<u8>, what: &str) -> Result<Vec<u8>, OfError> {
        let mut body = Vec::new();
        self.multipart_each(Ok(build), what, |b| {
            body.extend_from_slice(b);
            Ok(())
        })
        .await?;
        Ok(body)
    }

    /// Sends a multipart request and hands the body of each reply part to `each` as it
    /// arrives. A decoding error that means the switch sent garbage closes the connection.
    async fn multipart_each(
        &self,
        build: Result<impl FnOnce(u32) -> Vec<u8>, CodecError>,
        what: &str,
        mut each: impl FnMut(&[u8]) -> Result<(), CodecError>,
    ) -> Result<(), OfError> {
        let build = build.map_err(|e| OfError::Encode {
            what: what.to_string(),
            why: e.to_string(),
        })?;
        let mut reg = self.inner.register(1)?;
        self.inner.send(build(reg.start))?;
        let deadline = self.deadline();
        loop {
            let (_, m) = reg.next(deadline, what).await?;
            match m {
                Message::MultipartReply { flags, body, .. } => {
                    if let Err(e) = each(&body) {
                        return Err(self.body_error(what, e, &body));
                    }
                    if flags & multipart::MORE == 0 {
                        return Ok(());
                    }
                }
                Message::Error(e) => return Err(rejected(what, &e, None)),
                _ => {}
            }
        }
    }

    /// Turns a reply-body decoding error into an [`OfError`]: something the codec does not
    /// model is an error for this request only; anything else is a malformed message, which
    /// closes the connection.
    fn body_error(&self, what: &str, e: CodecError, body: &[u8]) -> OfError {
        match e {
            CodecError::Unsupported(why) => OfError::Unsupported(format!("{what} reply: {why}")),
            e => {
                error!(
                    error = %e,
                    reply = what,
                    body = %bytes_summary(body),
                    "malformed OpenFlow reply from switch; closing the connection"
                );
                self.inner.mark_closed("malformed reply from switch");
                OfError::Malformed(format!("{what} reply: {e}"))
            }
        }
    }

    /// The switch's asynchronous-message configuration for this connection.
    pub async fn get_async(&self) -> Result<AsyncConfig, OfError> {
        let mut reg = self.inner.register(1)?;
        self.inner.send(messages::get_async_request(reg.start))?;
        let deadline = self.deadline();
        loop {
            let (_, m) = reg.next(deadline, "async configuration").await?;
            match m {
                Message::Async(c) => return Ok(c),
                Message::Error(e) => return Err(rejected("get async configuration", &e, None)),
                _ => {}
            }
        }
    }

    /// Changes which asynchronous messages the switch sends on this connection.
    pub async fn set_async(&self, c: AsyncConfig) -> Result<(), OfError> {
        let build: Vec<Encoder<'_>> = vec![Box::new(move |xid| Ok(messages::set_async(xid, &c)))];
        self.send_batch(build, |_| "set async configuration".to_string())
            .await
    }

    /// Sends pre-encoded messages occupying `reg`'s xids, the last one being a barrier, and
    /// returns every error received before the barrier reply, with its xid.
    async fn collect_until_barrier(
        &self,
        reg: &mut Registration,
        barrier_xid: u32,
        what: &str,
    ) -> Result<Vec<(u32, ErrorMsg)>, OfError> {
        let deadline = self.deadline();
        let mut errors = Vec::new();
        loop {
            let (h, m) = reg.next(deadline, what).await?;
            match m {
                Message::Error(e) => errors.push((h.xid, e)),
                Message::BarrierReply if h.xid == barrier_xid => return Ok(errors),
                _ => {}
            }
        }
    }

    async fn run_barrier(&self) -> Result<(), OfError> {
        let mut reg = self.inner.register(1)?;
        self.inner.send(messages::barrier_request(reg.start))?;
        let deadline = self.deadline();
        loop {
            let (_, m) = reg.next(deadline, "barrier reply").await?;
            match m {
                Message::BarrierReply => return Ok(()),
                Message::Error(e) => return Err(rejected("barrier", &e, None)),
                _ => {}
            }
        }
    }

    /// Group ids currently on the switch.
    pub async fn group_ids(&self) -> Result<BTreeSet<u32>, OfError> {
        let body = self
            .multipart(messages::group_desc_request, "group description")
            .await?;
        Ok(messages::decode_group_desc_ids(&body)
            .map_err(codec)?
            .into_iter()
            .collect())
    }

    /// Meter ids currently on the switch.
    pub async fn meter_ids(&self) -> Result<BTreeSet<u32>, OfError> {
        let body = self
            .multipart(messages::meter_config_request, "meter configuration")
            .await?;
        Ok(messages::decode_meter_config_ids(&body)
            .map_err(codec)?
            .into_iter()
            .collect())
    }

    /// Sends `msgs` (each with its own xid from `reg`), then a barrier; fails with the first
    /// error, described by `describe(index)`.
    async fn send_batch(
        &self,
        build: Vec<Encoder<'_>>,
        describe: impl Fn(usize) -> String,
    ) -> Result<(), OfError> {
        let n = build.len() as u32;
        let mut reg = self.inner.register(n + 1)?;
        let s = reg.start;
        let mut buf = Vec::new();
        for (i, b) in build.into_iter().enumerate() {
            let bytes = b(s + i as u32).map_err(|e| OfError::Encode {
                what: describe(i),
                why: e.to_string(),
            })?;
            buf.extend(bytes);
        }
        buf.extend(messages::barrier_request(s + n));
        self.inner.send(buf)?;
        let errors = self
            .collect_until_barrier(&mut reg, s + n, "barrier reply")
            .await?;
        match errors.first() {
            Some((xid, e)) if *xid >= s && *xid < s + n => {
                Err(rejected(describe((xid - s) as usize), e, None))
            }
            Some((_, e)) => Err(rejected("barrier", e, None)),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Switch for OfConnection {
    async fn bundle(&self, mods: Vec<FlowMod>) -> Result<(), OfError> {
        if mods.is_empty() {
            return Ok(());
        }
        self.run_bundle(&mods).await
    }

    async fn bundle_chunks(&self, chunks: &mut FlowModChunks<'_>) -> Result<usize, OfError> {
        self.run_bundle_chunks(chunks).await
    }

    /// Makes the switch hold exactly `groups`: each is added or modified in place (flows using
    /// it are kept), then groups not in the list are deleted. (A plain delete-all would make
    /// OVS delete every flow that outputs to a group.)
    async fn replace_groups(&self, groups: Vec<Group>) -> Result<(), OfError> {
        let wanted: BTreeSet<u32> = groups.iter().map(|g| g.group_id).collect();
        let mut build: Vec<Encoder<'_>> = Vec::new();
        let mut names = Vec::new();
        for g in &groups {
            names.push(format!("group_mod add_or_modify group {}", g.group_id));
            build.push(Box::new(move |xid| {
                messages::group_mod(xid, GroupCommand::AddOrModify, g)
            }));
        }
        self.send_batch(build, |i| names.get(i).cloned().unwrap_or_default())
            .await?;
        let stale: Vec<u32> = self
            .group_ids()
            .await?
            .into_iter()
            .filter(|id| !wanted.contains(id))
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let mut build: Vec<Encoder<'_>> = Vec::new();
        for id in &stale {
            let g = Group {
                group_id: *id,
                buckets: vec![],
            };
            build.push(Box::new(move |xid| {
                messages::group_mod(xid, GroupCommand::Delete, &g)
            }));
        }
        self.send_batch(build, |i| {
            format!("group_mod delete group {}", stale.get(i).copied().unwrap_or(0))
        })
        .await
    }

    /// Makes the switch hold exactly `meters`: existing ones are modified in place, missing
    /// ones added, others deleted (OVS deletes the flows that use a deleted meter).
    async fn replace_meters(&self, meters: Vec<Meter>) -> Result<(), OfError> {
        let existing = self.meter_ids().await?;
        let wanted: BTreeSet<u32> = meters.iter().map(|m| m.meter_id).collect();
        let mut build: Vec<Encoder<'_>> = Vec::new();
        let mut names = Vec::new();
        for id in existing.iter().filter(|id| !wanted.contains(id)) {
            let m = Meter {
                meter_id: *id,
                rate_pps: 0,
                burst: 0,
            };
            names.push(format!("meter_mod delete meter {id}"));
            build.push(Box::new(move |xid| {
                messages::meter_mod(xid, MeterCommand::Delete, &m)
            }));
        }
        for m in &meters {
            let cmd = if existing.contains(&m.meter_id) {
                MeterCommand::Modify
            } else {
                MeterCommand::Add
            };
            names.push(format!(
                "meter_mod {} meter {}",
                if cmd == MeterCommand::Add { "add" } else { "modify" },
                m.meter_id
            ));
            build.push(Box::new(move |xid| messages::meter_mod(xid, cmd, m)));
        }
        if build.is_empty() {
            return Ok(());
        }
        self.send_batch(build, |i| names.get(i).cloned().unwrap_or_default())
            .await
    }

    async fn barrier(&self) -> Result<(), OfError> {
        self.run_barrier().await
    }

    async fn closed(&self) {
        let mut rx = self.inner.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    async fn dump_flows(&self, filter: FlowFilter) -> Result<Vec<FlowStats>, OfError> {
        let mut flows = Vec::new();
        self.multipart_each(
            messages::flow_stats_request(0, &filter).map(with_xid),
            "flow stats",
            |body| {
                flows.extend(messages::decode_flow_stats(body)?);
                Ok(())
            },
        )
        .await?;
        Ok(flows)
    }

    async fn dump_flows_each(
        &self,
        filter: FlowFilter,
        each: &mut (dyn FnMut(FlowStats) + Send),
    ) -> Result<(), OfError> {
        self.multipart_each(
            messages::flow_stats_request(0, &filter).map(with_xid),
            "flow stats",
            |body| {
                messages::decode_flow_stats(body)?
                    .into_iter()
                    .for_each(&mut *each);
                Ok(())
            },
        )
        .await
    }

    async fn aggregate_stats(&self, filter: FlowFilter) -> Result<AggregateStats, OfError> {
        let mut agg = AggregateStats::default();
        self.multipart_each(
            messages::aggregate_stats_request(0, &filter).map(with_xid),
            "aggregate stats",
            |body| {
                agg = messages::decode_aggregate(body)?;
                Ok(())
            },
        )
        .await?;
        Ok(agg)
    }

    async fn port_descs(&self) -> Result<Vec<PortDesc>, OfError> {
        let mut ports = Vec::new();
        self.multipart_each(
            Ok::<_, CodecError>(messages::port_desc_request),
            "port description",
            |body| {
                ports.extend(messages::decode_port_descs(body)?);
                Ok(())
            },
        )
        .await?;
        Ok(ports)
    }

    async fn packet_out(&self, po: PacketOut) -> Result<(), OfError> {
        let po = &po;
        let build: Vec<Encoder<'_>> = vec![Box::new(move |xid| messages::packet_out(xid, po))];
        self.send_batch(build, |_| format!("packet-out (in_port {})", po.in_port))
            .await
    }

    async fn resume(&self, pi: PacketIn) -> Result<(), OfError> {
        let pi = &pi;
        let build: Vec<Encoder<'_>> = vec![Box::new(move |xid| messages::resume(xid, pi))];
        self.send_batch(build, |_| {
            format!(
                "resume (packet-in from table {}, cookie {:#x})",
                pi.table_id, pi.cookie
            )
        })
        .await
    }

    fn subscribe(&self) -> Subscription {
        let sub = self.inner.hub.subscribe();
        if self.inner.is_closed() {
            // Closed before or while subscribing: end the subscription at once.
            self.inner.hub.close();
        }
        sub
    }

    async fn monitor_flows(&self) -> Result<mpsc::UnboundedReceiver<Vec<FlowUpdate>>, OfError> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut slot) = self.inner.flow_updates.lock() {
            *slot = Some(tx);
        }
        let body = monitor::flow_monitor_request_body(1);
        let reply = self
            .multipart(
                with_xid(messages::multipart_request(0, monitor::MP_FLOW_MONITOR, &body).map_err(codec)?),
                "flow monitor request",
            )
            .await;
        if let Err(e) = reply {
            if let Ok(mut slot) = self.inner.flow_updates.lock() {
                slot.take();
            }
            return Err(e);
        }
        Ok(rx)
    }

    fn dropped_events(&self) -> u64 {
        self.inner.hub.dropped()
    }
}
