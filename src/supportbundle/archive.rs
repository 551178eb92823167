//! The bundle as files: what one collected file is ([`Item`]), the size bounds ([`Limits`]:
//! per file, and in total; [`Budget`], the total shared by the collectors as they read), the
//! manifest that says what was collected, cut or failed and why
//! ([`Manifest`]), and the tar.gz writer ([`write_tar_gz`]) that applies the total bound in a
//! fixed order and puts the manifest in last.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// Default bound of one file's content in the bundle.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Default bound of the bundle's content, all files together, before compression.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;
/// Default time one collector may take.
pub const DEFAULT_COLLECTOR_TIMEOUT: Duration = Duration::from_secs(20);

/// The manifest's name, at the root of the bundle's directory.
pub const MANIFEST: &str = "manifest.json";

/// The bundle's size and time bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// A file's content beyond this is cut (logs keep their end, the rest their beginning).
    pub max_file_bytes: u64,
    /// The files' content together, before compression; the manifest comes on top.
    pub max_total_bytes: u64,
    /// One collector's time; past it the collector is stopped and recorded as failed.
    #[serde(serialize_with = "millis")]
    pub collector_timeout: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            collector_timeout: DEFAULT_COLLECTOR_TIMEOUT,
        }
    }
}

/// The bytes left under the total bound, shared by the collectors and taken as they read: the
/// command holds about the total bound in memory, however many and large the sources are.
#[derive(Clone, Debug)]
pub struct Budget(Arc<AtomicU64>);

impl Budget {
    pub fn new(total: u64) -> Budget {
        Budget(Arc::new(AtomicU64::new(total)))
    }

    /// Takes up to `want` bytes; returns how many were granted (0 once the budget is spent).
    pub fn take(&self, want: u64) -> u64 {
        let before = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left - left.min(want))
            })
            .unwrap_or(0);
        before.min(want)
    }

    /// Returns bytes taken but not used.
    pub fn give_back(&self, n: u64) {
        self.0.fetch_add(n, Ordering::AcqRel);
    }

    pub fn left(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Which end of an over-long file is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Keep {
    /// The beginning (command outputs, state files).
    Head,
    /// The end: the newest lines of a log.
    Tail,
}

/// How one entry of the manifest ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// In the bundle, whole.
    Collected,
    /// In the bundle, cut to a bound (`note` says which and how much was there).
    Truncated,
    /// Not collected: the tool, file or service failed or is missing (`error` says why).
    Failed,
    /// Not collected by choice (`--since`, the total bound).
    Skipped,
}

/// One entry of the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The file's path inside the bundle's directory (for a failure, where it would have been).
    pub path: String,
    /// What produced it: a command line, a file path, an API path or a control-socket command.
    pub source: String,
    pub status: Status,
    /// Bytes in the bundle.
    pub bytes: u64,
    /// Bytes the source had, when more than `bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Secrets were replaced by `<redacted>` in this file.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub scrubbed: bool,
    pub millis: u64,
}

/// One collected file (or the failure to collect it), before the total bound is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub path: String,
    pub source: String,
    pub data: Result<Vec<u8>, String>,
    /// The source's size when it was cut (by a collector reading only part of it).
    pub original_bytes: Option<u64>,
    pub keep: Keep,
    pub note: Option<String>,
    pub skipped: bool,
    pub scrubbed: bool,
    pub elapsed: Duration,
}

impl Item {
    pub fn ok(path: impl Into<String>, source: impl Into<String>, data: Vec<u8>) -> Item {
        Item {
            path: path.into(),
            source: source.into(),
            data: Ok(data),
            original_bytes: None,
            keep: Keep::Head,
            note: None,
            skipped: false,
            scrubbed: false,
            elapsed: Duration::ZERO,
        }
    }

    pub fn failed(path: impl Into<String>, source: impl Into<String>, why: impl Into<String>) -> Item {
        Item {
            data: Err(why.into()),
            ..Item::ok(path, source, Vec::new())
        }
    }

    pub fn skipped(path: impl Into<String>, source: impl Into<String>, why: impl Into<String>) -> Item {
        Item {
            skipped: true,
            note: Some(why.into()),
            ..Item::ok(path, source, Vec::new())
        }
    }

    pub fn keep(mut self, keep: Keep) -> Item {
        self.keep = keep;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Item {
        self.note = Some(note.into());
        self
    }

    /// Cuts the content to `max` bytes at the end [`Item::keep`] names, recording the size it
    /// had. Returns whether it was cut.
    pub fn bound(&mut self, max: u64) -> bool {
        let Ok(data) = &mut self.data else {
            return false;
        };
        let len = data.len() as u64;
        if len <= max {
            return false;
        }
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        match self.keep {
            Keep::Head => data.truncate(max),
            Keep::Tail => {
                data.drain(..data.len() - max);
            }
        }
        self.original_bytes = Some(self.original_bytes.map_or(len, |o| o.max(len)));
        true
    }
}

/// The manifest: what the bundle holds and what it does not, and why.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The manifest's own format version.
    pub format: u32,
    pub agent_version: String,
    pub node: String,
    /// When the collection started (RFC 3339, UTC).
    pub created: String,
    /// `--since`, in seconds, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_seconds: Option<u64>,
    pub limits: Limits,
    /// Notes about the collection as a whole (the configuration that could not be loaded, the
    /// agent that is not running).
    pub notes: Vec<String>,
    pub entries: Vec<Entry>,
    /// Bytes of content (before compression), the manifest excluded.
    pub total_bytes: u64,
    pub collected: usize,
    pub truncated: usize,
    pub failed: usize,
    pub skipped: usize,
    pub elapsed_millis: u64,
}

impl Manifest {
    pub fn entry(&self, path: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.path == path)
    }
}

/// Why writing the archive failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot write the archive: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot encode the manifest: {0}")]
    Manifest(String),
}

fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Applies the per-file and total bounds to `items` (in their order: the first ones are the
/// most useful) and turns them into manifest entries. An item that would pass the total bound
/// is cut to what remains, or skipped when nothing remains.
pub fn bound_items(items: &mut [Item], limits: &Limits) -> Vec<Entry> {
    let mut remaining = limits.max_total_bytes;
    let mut entries = Vec::with_capacity(items.len());
    for item in items.iter_mut() {
        let mut note = item.note.clone();
        if item.bound(limits.max_file_bytes) {
            note = Some(join_note(
                note,
                format!(
                    "cut to the per-file bound of {} bytes (kept the {})",
                    limits.max_file_bytes,
                    end_name(item.keep)
                ),
            ));
        }
        let len = item.data.as_ref().map_or(0, |d| d.len() as u64);
        if len > remaining {
            let had = len;
            if remaining == 0 {
                item.data = Ok(Vec::new());
                item.skipped = true;
                note = Some(join_note(
                    note,
                    format!(
                        "left out: the bundle reached its total bound of {} bytes",
                        limits.max_total_bytes
                    ),
                ));
            } else {
                item.bound(remaining);
                note = Some(join_note(
                    note,
                    format!(
                        "cut to the {remaining} bytes left under the total bound of {} bytes (kept the {})",
                        limits.max_total_bytes,
                        end_name(item.keep)
                    ),
                ));
            }
            item.original_bytes = Some(item.original_bytes.map_or(had, |o| o.max(had)));
        }
        let bytes = item.data.as_ref().map_or(0, |d| d.len() as u64);
        remaining -= bytes;
        let status = match (&item.data, item.skipped) {
            (Err(_), _) => Status::Failed,
            (Ok(_), true) => Status::Skipped,
            (Ok(_), false) if item.original_bytes.is_some_and(|o| o > bytes) => Status::Truncated,
            (Ok(_), false) => Status::Collected,
        };
        entries.push(Entry {
            path: item.path.clone(),
            source: item.source.clone(),
            status,
            bytes,
            original_bytes: item.original_bytes.filter(|o| *o > bytes),
            error: item.data.as_ref().err().cloned(),
            note,
            scrubbed: item.scrubbed,
            millis: duration_millis(item.elapsed),
        });
    }
    entries
}

fn end_name(keep: Keep) -> &'static str {
    match keep {
        Keep::Head => "beginning",
        Keep::Tail => "end",
    }
}

fn join_note(note: Option<String>, more: String) -> String {
    match note {
        Some(n) => format!("{n}; {more}"),
        None => more,
    }
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    data: &[u8],
    mtime: u64,
) -> Result<(), ArchiveError> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(mtime);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, data)?;
    Ok(())
}

/// Writes `items` (bounded already: [`bound_items`]) and the manifest as a gzip'd tar under
/// the directory `root`, to `out`. Failed and skipped items have no file. Fast compression:
/// the bundle's text compresses well even so, and the time bound matters more.
pub fn write_tar_gz<W: Write>(
    out: W,
    root: &str,
    items: &[Item],
    manifest: &Manifest,
) -> Result<W, ArchiveError> {
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for item in items {
        if let (Ok(data), false) = (&item.data, item.skipped) {
            append(&mut tar, &format!("{root}/{}", item.path), data, mtime)?;
        }
    }
    let text = serde_json::to_vec_pretty(manifest).map_err(|e| ArchiveError::Manifest(e.to_string()))?;
    append(&mut tar, &format!("{root}/{MANIFEST}"), &text, mtime)?;
    let gz = tar.into_inner()?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(file: u64, total: u64) -> Limits {
        Limits {
            max_file_bytes: file,
            max_total_bytes: total,
            collector_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_long_file_keeps_its_head_and_a_log_its_tail() {
        let mut items = vec![
            Item::ok("a.txt", "cmd", b"0123456789".to_vec()),
            Item::ok("log", "file", b"0123456789".to_vec()).keep(Keep::Tail),
            Item::ok("small", "file", b"abc".to_vec()),
        ];
        let entries = bound_items(&mut items, &limits(4, 1000));
        assert_eq!(items[0].data.as_deref().ok(), Some(&b"0123"[..]));
        assert_eq!(items[1].data.as_deref().ok(), Some(&b"6789"[..]));
        assert_eq!(entries[0].status, Status::Truncated);
        assert_eq!(entries[0].original_bytes, Some(10));
        assert_eq!(entries[0].bytes, 4);
        assert!(entries[1].note.as_deref().unwrap_or("").contains("kept the end"));
        assert_eq!(entries[2].status, Status::Collected);
        assert_eq!(entries[2].original_bytes, None);
    }

    #[test]
    fn the_total_bound_cuts_then_skips_in_order_and_failures_cost_nothing() {
        let mut items = vec![
            Item::failed("f", "ovs-ofctl", "not found"),
            Item::ok("a", "x", vec![b'a'; 6]),
            Item::ok("b", "x", vec![b'b'; 6]),
            Item::ok("c", "x", vec![b'c'; 6]),
        ];
        let entries = bound_items(&mut items, &limits(100, 10));
        let statuses: Vec<Status> = entries.iter().map(|e| e.status).collect();
        assert_eq!(
            statuses,
            [
                Status::Failed,
                Status::Collected,
                Status::Truncated,
                Status::Skipped
            ]
        );
        assert_eq!(entries[0].error.as_deref(), Some("not found"));
        assert_eq!(entries[2].bytes, 4);
        assert_eq!(entries[3].bytes, 0);
        assert_eq!(entries[3].original_bytes, Some(6));
        assert!(entries[3].note.as_deref().unwrap_or("").contains("total bound"));
        let total: u64 = entries.iter().map(|e| e.bytes).sum();
        assert_eq!(total, 10);
    }

    #[test]
    fn the_archive_holds_the_files_and_the_manifest_last() {
        use std::io::Read;
        let mut items = vec![
            Item::ok("host/a.txt", "x", b"hello".to_vec()),
            Item::failed("host/b.txt", "y", "missing"),
        ];
        let entries = bound_items(&mut items, &Limits::default());
        let manifest = Manifest {
            format: 1,
            agent_version: "v0".into(),
            node: "n".into(),
            created: "now".into(),
            since_seconds: None,
            limits: Limits::default(),
            notes: vec![],
            entries,
            total_bytes: 5,
            collected: 1,
            truncated: 0,
            failed: 1,
            skipped: 0,
            elapsed_millis: 0,
        };
        let bytes = write_tar_gz(Vec::new(), "root", &items, &manifest).expect("write");
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        let mut seen = Vec::new();
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let mut text = String::new();
            entry.read_to_string(&mut text).expect("read");
            seen.push((entry.path().expect("path").display().to_string(), text));
        }
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], ("root/host/a.txt".to_string(), "hello".to_string()));
        assert_eq!(seen[1].0, "root/manifest.json");
        assert!(seen[1].1.contains("\"status\": \"failed\""), "{}", seen[1].1);
        assert!(seen[1].1.contains("\"error\": \"missing\""), "{}", seen[1].1);
    }
}
