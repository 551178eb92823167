//! What the lab benches read of a running agent: its `flows committed` log lines, its memory,
//! and the policy files they write for it.

use std::path::Path;
use std::time::SystemTime;

use super::ms;

/// One `flows committed` line of the agent log.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The log line's timestamp.
    pub at: Option<SystemTime>,
    pub flow_mods: Option<usize>,
    pub realization_ms: Option<f64>,
}

/// The value after `key` in the whitespace-separated word starting with it.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key))
}

pub fn parse_commit(line: &str) -> Commit {
    let at = line
        .split_whitespace()
        .next()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(SystemTime::from);
    Commit {
        at,
        flow_mods: field(line, "flow_mods=").and_then(|v| v.parse().ok()),
        realization_ms: field(line, "realization_ms=Some(")
            .and_then(|v| v.strip_suffix(')'))
            .and_then(|v| v.parse().ok()),
    }
}

/// Milliseconds from `t0` to a commit's log timestamp, or to `fallback` without one.
pub fn commit_ms(t0: SystemTime, c: &Commit, fallback: SystemTime) -> f64 {
    c.at.unwrap_or(fallback).duration_since(t0).map(ms).unwrap_or(0.0)
}

/// A process's (VmRSS, VmHWM) in MB (NaN when unreadable).
pub fn rss_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

/// Writes `text` to `dir/file` atomically (a hidden temporary file, then a rename).
pub fn write_atomic(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, dir.join(file)).unwrap_or_else(|e| panic!("rename into {}: {e}", dir.display()));
}
