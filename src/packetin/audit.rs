//! The NetworkPolicy audit log, `np.log` (runtime reference §4.11): the line for a packet-in of
//! a rule with `enableLogging`, its one-second deduplication, and the file it goes to (rotated
//! per `auditLogging`, see `rotate.rs`).
//!
//! A line is Go's `log` prefix (local time, `2006/01/02 15:04:05.000000`) and 14 fields:
//! `<table> <policy-ref> <rule-name> <direction> <action> <of-priority> <applied-to> <src-ip>
//! <src-port> <dst-ip> <dst-port> <protocol> <ip-length> <log-label>`, missing values as `<nil>`.
//! Allow lines are written at once; identical non-Allow lines within one second are written
//! once when the second is over, with ` [<N> packets in <duration>]` if there were several.
//!
//! Departures from upstream (deliberate):
//! * the applied-to field names the ExternalEntity of the VM interface the rule applies to
//!   (`<namespace>/<name>`); upstream only resolves Pods and writes `<nil>` on VMs (D15);
//! * ports are read after IPv6 extension headers, and `<nil>` for later fragments;
//! * the directory is the caller's (default [`DEFAULT_DIR`]) and is created with its parents.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;

use super::meta::NpPacketIn;
use super::packet::{proto, ParsedPacket, Transport};
use super::rotate::{Backup, RotateError, RotatingFile, RotationPolicy};
use crate::attachment::AttachedInterface;
use crate::config::AuditLogging;
use crate::policy::compiler::ConjunctionMap;
use crate::policy::pipeline;
use crate::policy::rule::{Direction, PolicyRef};

/// Where the Go agent writes the audit log.
pub const DEFAULT_DIR: &str = "/var/log/antrea/networkpolicy";
pub const FILE_NAME: &str = "np.log";
/// What a missing value is written as.
pub const NIL: &str = "<nil>";
/// How long identical non-Allow lines are collected before one is written.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(1);
/// Go's `log.Ldate|log.Lmicroseconds` prefix.
const TIME_FORMAT: &str = "%Y/%m/%d %H:%M:%S%.6f";

/// Why a packet-in was not logged.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("the packet-in names no rule (no conjunction id in its registers)")]
    NoRule,
    #[error("networkpolicy not found for conjunction id: {0}")]
    UnknownRule(u32),
    #[error("audit log: {0}")]
    File(#[from] RotateError),
}

/// One audit log entry, field by field (already `<nil>` where missing).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AuditRecord {
    pub table_name: String,
    pub policy_ref: String,
    pub rule_name: String,
    pub direction: String,
    pub disposition: String,
    pub of_priority: String,
    pub applied_to: String,
    pub src_ip: String,
    pub src_port: String,
    pub dst_ip: String,
    pub dst_port: String,
    pub protocol: String,
    pub ip_length: String,
    pub log_label: String,
}

impl AuditRecord {
    /// The line without its time prefix.
    pub fn message(&self) -> String {
        [
            &self.table_name,
            &self.policy_ref,
            &self.rule_name,
            &self.direction,
            &self.disposition,
            &self.of_priority,
            &self.applied_to,
            &self.src_ip,
            &self.src_port,
            &self.dst_ip,
            &self.dst_port,
            &self.protocol,
            &self.ip_length,
            &self.log_label,
        ]
        .map(String::as_str)
        .join(" ")
    }

    pub fn is_allow(&self) -> bool {
        self.disposition == "Allow"
    }
}

fn or_nil(s: &str) -> String {
    if s.is_empty() {
        NIL.to_string()
    } else {
        s.to_string()
    }
}

/// Antrea's `NetworkPolicyReference.ToString()`.
pub fn policy_ref_string(p: &PolicyRef) -> String {
    if p.namespace.is_empty() {
        format!("{}:{}", p.policy_type.as_str(), p.name)
    } else {
        format!("{}:{}/{}", p.policy_type.as_str(), p.namespace, p.name)
    }
}

/// Antrea's `IPProtocolNumberToString` with `UnknownProtocol` as default.
pub fn protocol_name(p: u8) -> &'static str {
    match p {
        proto::ICMP => "ICMP",
        proto::IGMP => "IGMP",
        proto::TCP => "TCP",
        proto::UDP => "UDP",
        proto::ICMPV6 => "IPv6-ICMP",
        proto::SCTP => "SCTP",
        _ => "UnknownProtocol",
    }
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::In => "Ingress",
        Direction::Out => "Egress",
    }
}

fn table_name(id: u8) -> String {
    pipeline::tables()
        .into_iter()
        .find(|t| t.id == id)
        .map_or_else(|| id.to_string(), |t| t.name.to_string())
}

/// The ExternalEntity (`namespace/name`) the packet's rule applies to: the interface holding
/// the local address (ingress: destination, egress: source), else the interface of the local
/// port (ingress: the output port in reg1, egress: the input port).
fn applied_to(
    np: &NpPacketIn,
    direction: Option<Direction>,
    p: &ParsedPacket<'_>,
    interfaces: &[AttachedInterface],
) -> String {
    let (ip, port) = match direction {
        Some(Direction::In) => (p.dst_ip, np.target_port),
        Some(Direction::Out) => (p.src_ip, np.in_port),
        None => return NIL.to_string(),
    };
    interfaces
        .iter()
        .find(|i| i.ips.contains(&ip))
        .or_else(|| port.and_then(|port| interfaces.iter().find(|i| i.ofport == port)))
        .map_or_else(
            || NIL.to_string(),
            |i| format!("{}/{}", i.entity.namespace, i.entity.name),
        )
}

/// The audit record of a NetworkPolicy packet-in (upstream's `getNetworkPolicyInfo` and
/// `getPacketInfo`).
pub fn audit_record(
    np: &NpPacketIn,
    p: &ParsedPacket<'_>,
    rules: &ConjunctionMap,
    interfaces: &[AttachedInterface],
) -> Result<AuditRecord, AuditError> {
    let (src_port, dst_port) = match p.transport {
        Transport::Tcp {
            src_port, dst_port, ..
        }
        | Transport::Udp { src_port, dst_port } => (src_port.to_string(), dst_port.to_string()),
        _ => (NIL.to_string(), NIL.to_string()),
    };
    let mut rec = AuditRecord {
        table_name: table_name(np.table_id),
        policy_ref: NIL.to_string(),
        rule_name: NIL.to_string(),
        direction: NIL.to_string(),
        disposition: np.disposition.as_str().to_string(),
        of_priority: NIL.to_string(),
        applied_to: NIL.to_string(),
        src_ip: p.src_ip.to_string(),
        src_port,
        dst_ip: p.dst_ip.to_string(),
        dst_port,
        protocol: protocol_name(p.protocol).to_string(),
        ip_length: p.ip_len.to_string(),
        log_label: NIL.to_string(),
    };
    if np.denied() && !np.ap_deny {
        // A K8s NetworkPolicy's implicit deny: no rule to name.
        let direction = np.direction();
        rec.direction = direction.map_or(NIL, direction_name).to_string();
        rec.applied_to = applied_to(np, direction, p, interfaces);
        rec.policy_ref = "K8sNetworkPolicy".to_string();
        return Ok(rec);
    }
    let conj = np.conj_id().ok_or(AuditError::NoRule)?;
    let info = rules.get(&conj).ok_or(AuditError::UnknownRule(conj))?;
    let direction = np.direction().or(Some(info.direction));
    rec.direction = direction.map_or(NIL, direction_name).to_string();
    rec.applied_to = applied_to(np, direction, p, interfaces);
    rec.policy_ref = policy_ref_string(&info.policy);
    rec.rule_name = or_nil(&info.rule_name);
    rec.of_priority = info.priority.to_string();
    rec.log_label = or_nil(&info.log_label);
    Ok(rec)
}

/// Go's `time.Duration.String()`, e.g. `1.011379442s`, `1m0.5s`, `250ms`.
pub fn go_duration(d: Duration) -> String {
    fn frac(mut v: u128, prec: u32) -> (String, u128) {
        let mut digits = Vec::new();
        let mut print = false;
        for _ in 0..prec {
            let digit = (v % 10) as u8;
            print = print || digit != 0;
            if print {
                digits.push(char::from(b'0' + digit));
            }
            v /= 10;
        }
        let s = if print {
            std::iter::once('.').chain(digits.into_iter().rev()).collect()
        } else {
            String::new()
        };
        (s, v)
    }
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        let (f, int) = frac(ns, 3);
        return format!("{int}{f}µs");
    }
    if ns < 1_000_000_000 {
        let (f, int) = frac(ns, 6);
        return format!("{int}{f}ms");
    }
    let (f, secs) = frac(ns, 9);
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}{f}s")
    } else if m > 0 {
        format!("{m}m{s}{f}s")
    } else {
        format!("{s}{f}s")
    }
}

struct Pending {
    count: u64,
    first: Instant,
    deadline: Instant,
}

struct Inner {
    file: RotatingFile,
    pending: HashMap<String, Pending>,
    window: Duration,
}

impl Inner {
    fn write(&mut self, wall: NaiveDateTime, msg: &str) -> Result<(), AuditError> {
        let line = format!("{} {msg}\n", wall.format(TIME_FORMAT));
        self.file.write_all(line.as_bytes())?;
        Ok(())
    }

    fn flush(&mut self, now: Option<Instant>, wall: NaiveDateTime) -> Result<Option<Instant>, AuditError> {
        let mut due: Vec<(String, Pending)> = Vec::new();
        let keys: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| now.is_none_or(|n| p.deadline <= n))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(p) = self.pending.remove(&k) {
                due.push((k, p));
            }
        }
        due.sort_by_key(|(_, p)| p.first);
        let at = now.unwrap_or_else(Instant::now);
        let mut result = Ok(());
        for (msg, p) in due {
            let line = if p.count == 1 {
                msg
            } else {
                let took = at.saturating_duration_since(p.first);
                format!("{msg} [{} packets in {}]", p.count, go_duration(took))
            };
            if let Err(e) = self.write(wall, &line) {
                result = Err(e);
            }
        }
        result.map(|()| self.pending.values().map(|p| p.deadline).min())
    }
}

/// The audit log: a cheap handle, clones share the file and the deduplication state.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Mutex<Inner>>,
    path: PathBuf,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn wall_now() -> NaiveDateTime {
    chrono::Local::now().naive_local()
}

impl AuditLog {
    /// Opens `<dir>/np.log` (creating `dir`), rotated per `cfg`.
    pub fn open(dir: &Path, cfg: &AuditLogging) -> Result<Self, AuditError> {
        Self::open_with(dir, RotationPolicy::from(cfg))
    }

    /// Opens `<dir>/np.log` with an explicit rotation policy.
    pub fn open_with(dir: &Path, policy: RotationPolicy) -> Result<Self, AuditError> {
        let path = dir.join(FILE_NAME);
        let file = RotatingFile::open(&path, policy)?;
        Ok(AuditLog {
            inner: Arc::new(Mutex::new(Inner {
                file,
                pending: HashMap::new(),
                window: DEDUP_WINDOW,
            })),
            path,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs `rec` now (Allow) or at the end of its deduplication window.
    pub fn log(&self, rec: &AuditRecord) -> Result<(), AuditError> {
        self.log_at(rec, Instant::now(), wall_now())
    }

    /// [`AuditLog::log`] at a given time (`wall` is the local time written in the line).
    pub fn log_at(&self, rec: &AuditRecord, now: Instant, wall: NaiveDateTime) -> Result<(), AuditError> {
        let msg = rec.message();
        let mut inner = self.lock();
        if rec.is_allow() {
            return inner.write(wall, &msg);
        }
        let window = inner.window;
        inner
            .pending
            .entry(msg)
            .and_modify(|p| p.count += 1)
            .or_insert(Pending {
                count: 1,
                first: now,
                deadline: now + window,
            });
        Ok(())
    }

    /// Writes the lines whose window is over; returns when the next window ends.
    pub fn flush_due(&self) -> Result<Option<Instant>, AuditError> {
        self.flush_due_at(Instant::now(), wall_now())
    }

    /// [`AuditLog::flush_due`] at a given time.
    pub fn flush_due_at(&self, now: Instant, wall: NaiveDateTime) -> Result<Option<Instant>, AuditError> {
        self.lock().flush(Some(now), wall)
    }

    /// Writes every collected line now (at shutdown).
    pub fn flush_all(&self) -> Result<(), AuditError> {
        self.lock().flush(None, wall_now()).map(|_| ())
    }

    /// Lines waiting for the end of their window.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Waits for the background pruning and compression of past rotations.
    pub fn wait_for_maintenance(&self) {
        self.lock().file.wait_for_maintenance();
    }

    /// The rotated files, newest first.
    pub fn backups(&self) -> std::io::Result<Vec<Backup>> {
        self.lock().file.backups()
    }
}

#[cfg(test)]
mod tests;
