//! The packet-in responder: consumes one OpenFlow connection's packet-ins until the connection
//! ends, and for each NetworkPolicy packet-in (userdata category 1) writes the audit log line
//! (operation bit `0b1`) and/or sends the Reject reply (bit `0b10`). The store-denied-connection
//! bit (`0b100`, FlowExporter) is ignored: there is no flow exporter on a VM.
//!
//! Guards: OVS meter 256 already limits NetworkPolicy packet-ins to `packetInRate` per second;
//! on top of that a token bucket (rate `packetInRate`, burst twice that, as upstream's queue)
//! drops the excess before any parsing, so a flood costs one counter increment per packet. A
//! malformed packet-in is counted and logged (rate-limited), never fatal; the parsing and
//! building run under `catch_unwind` so even a bug there cannot end the loop. Counters are in
//! [`PacketInStats`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use serde::Serialize;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use super::audit::{audit_record, AuditError, AuditLog, AuditRecord};
use super::meta::NpPacketIn;
use super::packet::{self, PacketError};
use super::reject::{reject_parsed, RejectError, RejectOutcome};
use crate::attachment::AttachedInterface;
use crate::ovs::openflow::{Event, PacketIn, Subscription, Switch, SwitchConnector};
use crate::policy::compiler::{ConjunctionMap, SharedConjunctions};
use crate::retry::RetryPolicy;

/// What the responder needs besides the connection. Clone it for each connection.
#[derive(Clone, Debug)]
pub struct PacketInContext {
    /// Every rule that may still send packet-ins, by conjunction id.
    pub rules: watch::Receiver<SharedConjunctions>,
    /// The attached interfaces (for the Reject reply's ports and the audit applied-to).
    pub interfaces: watch::Receiver<Arc<Vec<AttachedInterface>>>,
    /// `None`: logging packet-ins are counted (as `logged`) but not written anywhere.
    pub audit: Option<AuditLog>,
    /// `packetInRate` (packets per second; the burst is twice this). 0 means no limit.
    pub packet_in_rate: u32,
    pub stats: Arc<PacketInStats>,
}

/// Counters over the agent's lifetime (all connections).
#[derive(Debug, Default)]
pub struct PacketInStats {
    received: AtomicU64,
    not_network_policy: AtomicU64,
    rate_limited: AtomicU64,
    malformed: AtomicU64,
    logged: AtomicU64,
    log_failed: AtomicU64,
    rejected: AtomicU64,
    reject_suppressed: AtomicU64,
    reject_failed: AtomicU64,
    panicked: AtomicU64,
}

/// A snapshot of [`PacketInStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PacketInCounts {
    /// Every packet-in seen.
    pub received: u64,
    /// Packet-ins of other categories (Traceflow, DNS, ...), ignored here.
    pub not_network_policy: u64,
    /// Dropped by the token bucket.
    pub rate_limited: u64,
    /// Frames that could not be parsed.
    pub malformed: u64,
    /// Audit lines accepted (Allow written, others collected for deduplication).
    pub logged: u64,
    /// Audit lines that could not be built or written.
    pub log_failed: u64,
    /// Reject replies sent.
    pub rejected: u64,
    /// Rejected packets not answered on purpose (resets, ICMP errors, broadcasts, ...).
    pub reject_suppressed: u64,
    /// Reject replies that could not be built or sent.
    pub reject_failed: u64,
    /// Packet-ins whose handling panicked (a bug; the loop went on).
    pub panicked: u64,
}

impl PacketInCounts {
    /// Every counter with its name as in the JSON (the `outcome` label of
    /// `antrea_vm_agent_packet_ins_total`), in the order of those names.
    pub fn by_outcome(&self) -> [(&'static str, u64); 10] {
        [
            ("logFailed", self.log_failed),
            ("logged", self.logged),
            ("malformed", self.malformed),
            ("notNetworkPolicy", self.not_network_policy),
            ("panicked", self.panicked),
            ("rateLimited", self.rate_limited),
            ("received", self.received),
            ("rejectFailed", self.reject_failed),
            ("rejectSuppressed", self.reject_suppressed),
            ("rejected", self.rejected),
        ]
    }
}

fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

impl PacketInStats {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn snapshot(&self) -> PacketInCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PacketInCounts {
            received: g(&self.received),
            not_network_policy: g(&self.not_network_policy),
            rate_limited: g(&self.rate_limited),
            malformed: g(&self.malformed),
            logged: g(&self.logged),
            log_failed: g(&self.log_failed),
            rejected: g(&self.rejected),
            reject_suppressed: g(&self.reject_suppressed),
            reject_failed: g(&self.reject_failed),
            panicked: g(&self.panicked),
        }
    }
}

/// A token bucket: `rate` tokens per second, at most `burst` saved up.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `rate` per second with a burst of `2 * rate`, full at `now`; `rate` 0 = unlimited.
    pub fn new(rate: u32, now: Instant) -> Self {
        let burst = 2.0 * f64::from(rate);
        TokenBucket {
            rate: f64::from(rate),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token if one is available at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Logs the 1st, 2nd, 4th, 8th, ... occurrence of a recurring problem.
fn warn_sometimes(count: u64, what: &str, err: &dyn std::fmt::Display) {
    if count.is_power_of_two() {
        warn!(count, "{what}: {err}");
    } else {
        debug!(count, "{what}: {err}");
    }
}

/// What the pure part of the handling decided.
struct Prepared {
    record: Option<Result<AuditRecord, AuditError>>,
    reject: Option<Result<RejectOutcome, RejectError>>,
}

fn prepare(
    pi: &PacketIn,
    np: &NpPacketIn,
    rules: &ConjunctionMap,
    interfaces: &[AttachedInterface],
    ip_id: u16,
) -> Result<Prepared, PacketError> {
    let p = packet::parse(&pi.packet)?;
    Ok(Prepared {
        record: np
            .wants_logging()
            .then(|| audit_record(np, &p, rules, interfaces)),
        reject: np
            .wants_reject()
            .then(|| reject_parsed(&p, np.in_port, interfaces, ip_id)),
    })
}

async fn handle(switch: &dyn Switch, ctx: &PacketInContext, bucket: &mut TokenBucket, pi: PacketIn) {
    let stats = &ctx.stats;
    bump(&stats.received);
    let Some(np) = NpPacketIn::from_packet_in(&pi) else {
        bump(&stats.not_network_policy);
        return;
    };
    if !bucket.try_take(Instant::now()) {
        let n = bump(&stats.rate_limited);
        warn_sometimes(n, "NetworkPolicy packet-in dropped", &"over packetInRate");
        return;
    }
    let rules = ctx.rules.borrow().clone();
    let interfaces = ctx.interfaces.borrow().clone();
    let ip_id: u16 = rand::random();
    let prepared = catch_unwind(AssertUnwindSafe(|| prepare(&pi, &np, &rules, &interfaces, ip_id)));
    let prepared = match prepared {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            let n = bump(&stats.malformed);
            warn_sometimes(n, "malformed NetworkPolicy packet-in", &e);
            return;
        }
        Err(_) => {
            let n = bump(&stats.panicked);
            warn_sometimes(n, "NetworkPolicy packet-in handling panicked", &"bug");
            return;
        }
    };
    if let Some(record) = prepared.record {
        let written = record.and_then(|r| match &ctx.audit {
            Some(log) => log.log(&r),
            None => Ok(()),
        });
        match written {
            Ok(()) => {
                bump(&stats.logged);
            }
            Err(e) => {
                let n = bump(&stats.log_failed);
                warn_sometimes(n, "cannot write the NetworkPolicy audit log", &e);
            }
        }
    }
    match prepared.reject {
        None => {}
        Some(Ok(RejectOutcome::Reply(po))) => match switch.packet_out(*po).await {
            Ok(()) => {
                bump(&stats.rejected);
            }
            Err(e) => {
                let n = bump(&stats.reject_failed);
                warn_sometimes(n, "cannot send the Reject reply", &e);
            }
        },
        Some(Ok(RejectOutcome::Suppressed(why))) => {
            bump(&stats.reject_suppressed);
            debug!("no Reject reply: {why}");
        }
        Some(Err(e)) => {
            let n = bump(&stats.reject_failed);
            warn_sometimes(n, "cannot build the Reject reply", &e);
        }
    }
}

/// Flushes the audit lines whose deduplication window is over; returns the next deadline.
fn flush_audit(ctx: &PacketInContext) -> Option<Instant> {
    let log = ctx.audit.as_ref()?;
    match log.flush_due() {
        Ok(next) => next,
        Err(e) => {
            let n = bump(&ctx.stats.log_failed);
            warn_sometimes(n, "cannot write the NetworkPolicy audit log", &e);
            None
        }
    }
}

/// Handles the packet-ins of connections of the responder's own, made by `connector`, for ever:
/// after a connection ends (OVS restarted, the bridge recreated) the next is opened, with a
/// jittered delay doubling from `retry.initial` to `retry.max` while connecting fails.
pub async fn serve_own_connection(
    connector: Arc<dyn SwitchConnector>,
    ctx: PacketInContext,
    retry: RetryPolicy,
) {
    let mut backoff = retry.backoff();
    let mut failures: u64 = 0;
    loop {
        match connector.connect().await {
            Ok(switch) => {
                if failures > 0 {
                    info!(failures, "packet-in responder: connected to the switch again");
                }
                failures = 0;
                backoff.reset();
                let sub = switch.subscribe();
                // On a thread of its own nothing would notice a panic: it is caught here, logged
                // and counted, and the responder starts over on a new connection.
                let served = AssertUnwindSafe(serve(sub, switch, ctx.clone()))
                    .catch_unwind()
                    .await;
                if served.is_err() {
                    let n = bump(&ctx.stats.panicked);
                    error!(count = n, "packet-in responder panicked (a bug); restarting it");
                }
                tokio::time::sleep(retry.initial).await;
            }
            Err(e) => {
                // While it is down OVS drops the Reject and audit packet-ins: a Reject acts as a
                // Drop. Said at the first failure and then sometimes.
                failures += 1;
                if failures.is_power_of_two() {
                    warn!(failures, "packet-in responder: cannot connect to the switch (Reject replies and audit lines wait for it): {e}");
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// Handles `switch`'s packet-ins until its connection closes. Subscribes when first polled.
pub async fn run(switch: Arc<dyn Switch>, ctx: PacketInContext) {
    let sub = switch.subscribe();
    serve(sub, switch, ctx).await
}

/// Handles the packet-ins of `sub` (a subscription to `switch`) until it ends, then writes the
/// audit lines still collecting.
pub async fn serve(mut sub: Subscription, switch: Arc<dyn Switch>, ctx: PacketInContext) {
    let mut bucket = TokenBucket::new(ctx.packet_in_rate, Instant::now());
    loop {
        let next = match flush_audit(&ctx) {
            Some(deadline) => {
                let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline));
                tokio::select! {
                    ev = sub.recv() => Some(ev),
                    () = sleep => None,
                }
            }
            None => Some(sub.recv().await),
        };
        match next {
            // The window of a collected audit line ended: flush at the top of the loop.
            None => continue,
            Some(None) => break,
            Some(Some(Event::PacketIn(pi))) => handle(switch.as_ref(), &ctx, &mut bucket, *pi).await,
            Some(Some(_)) => {}
        }
    }
    if let Some(log) = &ctx.audit {
        if let Err(e) = log.flush_all() {
            warn!("cannot write the NetworkPolicy audit log: {e}");
        }
    }
    debug!(dropped = sub.dropped(), "packet-in subscription ended");
}

#[cfg(test)]
mod tests;
