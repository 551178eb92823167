//! Bundles over the connection: one atomic bundle of flow_mods (open, add, commit, with the
//! refused flow named), and a streamed bundle whose flow_mods arrive in chunks, each chunk
//! acknowledged by a barrier so an error names the flow_mod at fault. A bundle whose request
//! fails, or is cancelled half-way (its future dropped), while the connection stays up is
//! discarded on the switch.

use std::time::Duration;

use tokio::time::Instant;

use crate::ovs::openflow::flow::FlowMod;
use crate::ovs::openflow::messages::{self, bundle_ctrl, bundle_flags, ErrorMsg, Message};
use crate::ovs::openflow::render::{render_flow, NameMap};
use crate::ovs::openflow::wire::Writer;
use crate::ovs::openflow::{FlowModChunks, OfError};

use super::{rejected, Inner, OfConnection, Registration};

/// Discards a bundle unless disarmed: armed no later than the bundle's open is queued (before
/// it, for a streamed bundle: a DISCARD that arrives before any OPEN finds no bundle, and
/// changes nothing) until its request ends. A request that fails on a live connection (a
/// refused add, a timeout, a failed commit) leaves it armed, and so does one whose caller is
/// cancelled (its future dropped) half-way: OVS would otherwise keep the half-sent bundle, with
/// every flow_mod sent so far, until its idle timeout.
/// A discard that finds no bundle (OVS dropped it after a failed commit, or committed it just
/// before a cancel) is answered with an error and changes nothing: the commit stands.
struct DiscardUnlessDisarmed {
    inner: std::sync::Arc<Inner>,
    bundle_id: u32,
    flags: u16,
    armed: bool,
}

impl DiscardUnlessDisarmed {
    fn new(conn: &OfConnection, bundle_id: u32, flags: u16) -> Self {
        DiscardUnlessDisarmed {
            inner: conn.inner.clone(),
            bundle_id,
            flags,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for DiscardUnlessDisarmed {
    fn drop(&mut self) {
        if self.armed {
            discard_in_background(&self.inner, self.bundle_id, self.flags);
        }
    }
}

/// Sends a DISCARD for `bundle_id` and returns at once: nobody waits for it (OVS handles a
/// connection's messages in order, so a later bundle on this connection comes after it). The
/// xid stays registered until the answer, for as long as any request may wait (a switch busy
/// with a large commit answers late), so the answer is not logged as unsolicited. A closed
/// connection took the bundle with it: nothing to send.
fn discard_in_background(inner: &std::sync::Arc<Inner>, bundle_id: u32, flags: u16) {
    let Ok(mut reg) = send_control(inner, bundle_id, bundle_ctrl::DISCARD_REQUEST, flags) else {
        return;
    };
    let discard = reg.start;
    tracing::debug!(bundle_id, "bundle failed or cancelled; discarding it");
    let wait = inner.opts.request_timeout;
    // Without a runtime (the process shutting down), the registration simply ends here.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let deadline = Instant::now() + wait;
            while let Ok((h, _)) = reg.next(deadline, "bundle discard").await {
                if h.xid == discard {
                    break;
                }
            }
        });
    }
}

/// How many chunks of a streamed bundle may be sent and not yet acknowledged. Two keep OVS
/// busy: with four, the whole-number fleet's stream (40,215 flow_mods in 35 chunks) took as long
/// (258 to 276 ms in four runs, against 228 to 256 in three with two), and only more memory was
/// in flight.
const CHUNKS_IN_FLIGHT: usize = 2;

/// Sends the bundle control message `ctrl` for `bundle_id` on an xid of its own; its answer
/// arrives on the returned registration.
fn send_control(
    inner: &std::sync::Arc<Inner>,
    bundle_id: u32,
    ctrl: u16,
    flags: u16,
) -> Result<Registration, OfError> {
    let reg = inner.register(1)?;
    inner.send(messages::bundle_control(reg.start, bundle_id, ctrl, flags))?;
    Ok(reg)
}

/// Names a flow_mod of a streamed bundle that OVS refused (`xid` of chunk `chunk`).
fn describe_streamed(sent: &[SentChunk], total: usize, chunk: usize, xid: u32, e: &ErrorMsg) -> OfError {
    let Some(c) = sent.get(chunk) else {
        return rejected("bundle", e, None);
    };
    let i = xid.wrapping_sub(c.reg.start) as usize;
    match c.ops.get(i) {
        Some(op) => rejected(
            format!(
                "bundle message {} of {} (flow_mod {} in table {} at priority {})",
                c.offset + i + 1,
                total,
                op.command,
                op.table,
                op.priority
            ),
            e,
            None,
        ),
        None => rejected("bundle", e, None),
    }
}

/// The next chunk that has flow_mods.
fn next_nonempty(chunks: &mut FlowModChunks<'_>) -> Option<Vec<FlowMod>> {
    loop {
        match chunks.next() {
            Some(c) if c.is_empty() => continue,
            other => return other,
        }
    }
}

/// A chunk of a streamed bundle that was sent: its xids, and enough of each flow_mod to name
/// one OVS refuses.
struct SentChunk {
    reg: Registration,
    /// Index of its first flow_mod in the whole bundle.
    offset: usize,
    ops: Vec<ModSummary>,
    barrier: u32,
    acked: bool,
}

/// What an error message says about a streamed flow_mod.
struct ModSummary {
    command: &'static str,
    table: u8,
    priority: u16,
}

impl ModSummary {
    fn of(fm: &FlowMod) -> Self {
        ModSummary {
            command: command_name(fm),
            table: fm.flow.table,
            priority: fm.flow.priority,
        }
    }
}

fn command_name(fm: &FlowMod) -> &'static str {
    use crate::ovs::openflow::flow::FlowModCommand::*;
    match fm.command {
        Add => "add",
        Modify => "modify",
        ModifyStrict => "modify_strict",
        Delete => "delete",
        DeleteStrict => "delete_strict",
    }
}

impl OfConnection {
    pub(super) async fn run_bundle(&self, mods: &[FlowMod]) -> Result<(), OfError> {
        let n = u32::try_from(mods.len())
            .ok()
            .filter(|n| *n < u32::MAX / 2)
            .ok_or_else(|| OfError::Encode {
                what: "bundle".into(),
                why: "too many flow_mods".into(),
            })?;
        let flags = bundle_flags::ATOMIC | bundle_flags::ORDERED;
        let bundle_id = self.next_bundle_id();

        // Encode everything first, so that an unencodable flow changes nothing on the switch.
        // xids: open = s, adds = s+1..=s+n, barrier = s+n+1, commit = s+n+2.
        let reg = self.inner.register(n + 3)?;
        let s = reg.start;
        let mut w = Writer::with_capacity(mods.len() * 160 + 64);
        messages::write_bundle_control(&mut w, s, bundle_id, bundle_ctrl::OPEN_REQUEST, flags);
        for (i, fm) in mods.iter().enumerate() {
            let xid = s + 1 + i as u32;
            messages::write_bundle_add_flow_mod(&mut w, xid, bundle_id, flags, fm).map_err(|e| {
                OfError::Encode {
                    what: format!(
                        "flow_mod {} ({})",
                        command_name(fm),
                        render_flow(&fm.flow, &NameMap::new())
                    ),
                    why: e.to_string(),
                }
            })?;
        }
        w.bytes(&messages::barrier_request(s + n + 1));
        self.inner.send(w.into_vec())?;
        self.discard_unless_ok(
            bundle_id,
            flags,
            self.finish_bundle(reg, s, n, bundle_id, flags, mods),
        )
        .await
    }

    /// Runs `body`, the request of bundle `bundle_id` from its open on, and discards the bundle
    /// on the switch unless the request succeeded or the connection is gone: whatever failed (a
    /// refused add, a timeout, the commit) or if the caller is cancelled meanwhile, the bundle
    /// must not stay open on a live connection.
    async fn discard_unless_ok<T>(
        &self,
        bundle_id: u32,
        flags: u16,
        body: impl std::future::Future<Output = Result<T, OfError>>,
    ) -> Result<T, OfError> {
        let guard = DiscardUnlessDisarmed::new(self, bundle_id, flags);
        let result = body.await;
        if matches!(result, Ok(_) | Err(OfError::Closed | OfError::Io(_))) {
            guard.disarm();
        }
        result
    }

    /// The rest of [`Self::run_bundle`] once the whole bundle is queued: its replies, the
    /// commit and the commit's answer.
    async fn finish_bundle(
        &self,
        mut reg: Registration,
        s: u32,
        n: u32,
        bundle_id: u32,
        flags: u16,
        mods: &[FlowMod],
    ) -> Result<(), OfError> {
        let describe = |xid: u32, e: &ErrorMsg| -> OfError {
            if xid > s && xid <= s + n {
                let i = (xid - s - 1) as usize;
                let fm = &mods[i];
                rejected(
                    format!(
                        "bundle message {} of {} (flow_mod {})",
                        i + 1,
                        n,
                        command_name(fm)
                    ),
                    e,
                    Some(render_flow(&fm.flow, &NameMap::new())),
                )
            } else if xid == s {
                rejected("bundle open", e, None)
            } else if xid == s + n + 2 {
                rejected("bundle commit", e, None)
            } else {
                rejected("bundle", e, None)
            }
        };

        let errors = self
            .collect_until_barrier(&mut reg, s + n + 1, "bundle add replies")
            .await?;
        if let Some((xid, e)) = errors.first() {
            // Something in the bundle was refused: the whole bundle is thrown away.
            return Err(describe(*xid, e));
        }

        let commit = s + n + 2;
        self.inner.send(messages::bundle_control(
            commit,
            bundle_id,
            bundle_ctrl::COMMIT_REQUEST,
            flags,
        ))?;
        let deadline = self.deadline();
        // Commit-time failures name the failing bundle_add's xid first, then fail the commit
        // itself (OFPBFC_MSG_FAILED); report the former.
        let mut add_error: Option<(u32, ErrorMsg)> = None;
        let mut commit_error: Option<ErrorMsg> = None;
        loop {
            let (h, m) = reg.next(deadline, "bundle commit reply").await?;
            match m {
                Message::Error(e) if h.xid == commit => {
                    commit_error = Some(e);
                    break;
                }
                Message::Error(e) if add_error.is_none() => add_error = Some((h.xid, e)),
                Message::BundleControl {
                    ctrl: bundle_ctrl::COMMIT_REPLY,
                    ..
                } if h.xid == commit => break,
                _ => {}
            }
        }
        match (add_error, commit_error) {
            (Some((xid, e)), _) => Err(describe(xid, &e)),
            (None, Some(e)) => Err(describe(commit, &e)),
            (None, None) => Ok(()),
        }
    }

    /// The id the next bundle of this connection will get.
    #[cfg(test)]
    #[cfg(feature = "lab")]
    pub(in crate::ovs::openflow) fn peek_next_bundle_id(&self) -> u32 {
        self.inner.next_bundle.lock().map(|b| *b).unwrap_or(1)
    }

    /// Commits bundle `bundle_id` as it stands on the switch: what a test uses to see whether
    /// a bundle is still open there.
    #[cfg(test)]
    #[cfg(feature = "lab")]
    pub(in crate::ovs::openflow) async fn commit_bundle_as_is(&self, bundle_id: u32) -> Result<(), OfError> {
        let flags = bundle_flags::ATOMIC | bundle_flags::ORDERED;
        match self.commit_alone(bundle_id, flags).await? {
            Some(e) => Err(rejected("bundle commit", &e, None)),
            None => Ok(()),
        }
    }

    /// Sends the COMMIT of `bundle_id` on an xid of its own and waits for its answer: the
    /// switch's refusal, if it refused.
    async fn commit_alone(&self, bundle_id: u32, flags: u16) -> Result<Option<ErrorMsg>, OfError> {
        let mut reg = send_control(&self.inner, bundle_id, bundle_ctrl::COMMIT_REQUEST, flags)?;
        let commit = reg.start;
        let deadline = self.deadline();
        loop {
            let (h, m) = reg.next(deadline, "bundle commit reply").await?;
            match m {
                Message::Error(e) if h.xid == commit => return Ok(Some(e)),
                Message::BundleControl {
                    ctrl: bundle_ctrl::COMMIT_REPLY,
                    ..
                } if h.xid == commit => return Ok(None),
                _ => {}
            }
        }
    }

    /// [`Switch::bundle_chunks`]: one atomic bundle fed chunk by chunk. Each chunk is encoded
    /// and sent with a barrier behind it; before the next chunk is produced, the barrier of the
    /// chunk [`CHUNKS_IN_FLIGHT`] − 1 before is awaited, so at most that many encoded chunks are
    /// in flight (OVS keeps the bundle's messages itself). Errors OVS reports for an add stop the
    /// stream and discard the bundle; nothing changes on the switch unless the commit succeeds.
    pub(super) async fn run_bundle_chunks(&self, chunks: &mut FlowModChunks<'_>) -> Result<usize, OfError> {
        let Some(first) = next_nonempty(chunks) else {
            return Ok(0);
        };
        let flags = bundle_flags::ATOMIC | bundle_flags::ORDERED;
        let bundle_id = self.next_bundle_id();
        self.discard_unless_ok(
            bundle_id,
            flags,
            self.stream_bundle(bundle_id, flags, first, chunks),
        )
        .await
    }

    /// The body of [`Self::run_bundle_chunks`], from the bundle's open to its commit.
    async fn stream_bundle(
        &self,
        bundle_id: u32,
        flags: u16,
        first: Vec<FlowMod>,
        chunks: &mut FlowModChunks<'_>,
    ) -> Result<usize, OfError> {
        let mut open = self.inner.register(1)?;
        self.inner.send(messages::bundle_control(
            open.start,
            bundle_id,
            bundle_ctrl::OPEN_REQUEST,
            flags,
        ))?;
        let mut sent: Vec<SentChunk> = Vec::new();
        let mut errors: Vec<(usize, u32, ErrorMsg)> = Vec::new();
        let mut total: usize = 0;
        let mut next = Some(first);
        // Where the stream's time goes (logged at debug): producing and encoding chunks here,
        // or waiting for OVS to acknowledge them.
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        let mut last_sent = Duration::ZERO;
        while let Some(chunk) = next.take() {
            let n = u32::try_from(chunk.len())
                .ok()
                .filter(|n| *n < u32::MAX / 4)
                .ok_or_else(|| OfError::Encode {
                    what: "bundle chunk".into(),
                    why: "too many flow_mods".into(),
                })?;
            let reg = self.inner.register(n + 1)?;
            let s = reg.start;
            let mut w = Writer::with_capacity(chunk.len() * 160 + 16);
            let mut ops = Vec::with_capacity(chunk.len());
            for (i, fm) in chunk.iter().enumerate() {
                if let Err(e) =
                    messages::write_bundle_add_flow_mod(&mut w, s + i as u32, bundle_id, flags, fm)
                {
                    // Nothing of this bundle is committed: it is thrown away.
                    let what = format!(
                        "flow_mod {} ({})",
                        command_name(fm),
                        render_flow(&fm.flow, &NameMap::new())
                    );
                    return Err(OfError::Encode {
                        what,
                        why: e.to_string(),
                    });
                }
                ops.push(ModSummary::of(fm));
            }
            w.bytes(&messages::barrier_request(s + n));
            self.inner.send(w.into_vec())?;
            last_sent = started.elapsed();
            sent.push(SentChunk {
                reg,
                offset: total,
                ops,
                barrier: s + n,
                acked: false,
            });
            total += chunk.len();
            drop(chunk);
            // The connection's writer usually runs on this thread (the actor's arbiter): let it
            // hand this chunk to the socket before the next chunk is built (synchronously), or
            // OVS could sit idle meanwhile when the previous chunk's barrier is already answered.
            tokio::task::yield_now().await;
            if sent.len() >= CHUNKS_IN_FLIGHT {
                let idx = sent.len() - CHUNKS_IN_FLIGHT;
                let wait = Instant::now();
                self.ack_chunk(&mut sent, idx, &mut errors).await?;
                waited += wait.elapsed();
            }
            if !errors.is_empty() {
                break;
            }
            next = next_nonempty(chunks);
        }
        for idx in 0..sent.len() {
            if errors.is_empty() {
                self.ack_chunk(&mut sent, idx, &mut errors).await?;
            }
        }
        let acked = started.elapsed();
        let mut open_error = None;
        while let Ok((h, m)) = open.rx.try_recv() {
            if let Message::Error(e) = m {
                if h.xid == open.start {
                    open_error = Some(e);
                }
            }
        }
        if let Some(e) = open_error {
            return Err(rejected("bundle open", &e, None));
        }
        if let Some((chunk, xid, e)) = errors.first() {
            return Err(describe_streamed(&sent, total, *chunk, *xid, e));
        }

        let commit_error = self.commit_alone(bundle_id, flags).await?;
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        tracing::debug!(
            chunks = sent.len(),
            flow_mods = total,
            waited_for_acks_ms = %ms(waited),
            last_sent_ms = %ms(last_sent),
            acked_ms = %ms(acked),
            committed_ms = %ms(started.elapsed()),
            "bundle streamed"
        );
        // A commit-time failure names the failing add first (on that chunk's xids): the reader
        // dispatched it before the commit's answer.
        let mut add_error = None;
        for (idx, c) in sent.iter_mut().enumerate() {
            while let Ok((h, m)) = c.reg.rx.try_recv() {
                if let Message::Error(e) = m {
                    if add_error.is_none() && h.xid != c.barrier {
                        add_error = Some((idx, h.xid, e));
                    }
                }
            }
        }
        match (add_error, commit_error) {
            (Some((chunk, xid, e)), _) => Err(describe_streamed(&sent, total, chunk, xid, &e)),
            (None, Some(e)) => Err(rejected("bundle commit", &e, None)),
            (None, None) => Ok(total),
        }
    }

    /// Waits for the barrier of chunk `idx` (once), collecting the errors OVS sent for its adds.
    async fn ack_chunk(
        &self,
        sent: &mut [SentChunk],
        idx: usize,
        errors: &mut Vec<(usize, u32, ErrorMsg)>,
    ) -> Result<(), OfError> {
        let Some(c) = sent.get_mut(idx).filter(|c| !c.acked) else {
            return Ok(());
        };
        let found = self
            .collect_until_barrier(&mut c.reg, c.barrier, "bundle add replies")
            .await?;
        c.acked = true;
        errors.extend(found.into_iter().map(|(xid, e)| (idx, xid, e)));
        Ok(())
    }
}
