//! Size-based rotation of the audit log, with the rules of lumberjack (what the Go agent uses
//! for `np.log`, configured by `auditLogging`):
//!
//! * a write that would take the file past `maxSize` MB first moves it aside as
//!   `<name>-<UTC time as 2006-01-02T15-04-05.000>.<ext>` (e.g. `np-2024-05-01T10-00-00.000.log`)
//!   and starts a new, empty file with the old one's permissions (0600 for the first one);
//!   `maxSize` 0 means lumberjack's default, 100 MB; a single write larger than the limit fails;
//! * after a rotation, in the background: backups beyond the newest `maxBackups` (0 = all kept)
//!   and backups older than `maxAge` days (0 = no limit, age from the time in the name) are
//!   deleted, and the others are gzipped (`.log.gz`) when `compress` is set.
//!
//! The background work runs on its own thread (compressing hundreds of MB must not stall the
//! async runtime), one rotation's work at a time. Two rotations within the same millisecond get
//! distinct names (lumberjack would overwrite the first backup).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use tracing::warn;

use crate::config::AuditLogging;

/// lumberjack's size limit when `maxSize` is 0, in MB.
pub const DEFAULT_MAX_SIZE_MB: u64 = 100;
const MB: u64 = 1024 * 1024;
const DAY: Duration = Duration::from_secs(24 * 3600);
/// The time in a backup's name (UTC), as Go's `2006-01-02T15-04-05.000`.
const BACKUP_TIME_FORMAT: &str = "%Y-%m-%dT%H-%M-%S%.3f";
const COMPRESS_SUFFIX: &str = ".gz";
const PARTIAL_SUFFIX: &str = ".tmp";

/// When to rotate and what to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Rotate before a write would make the file larger than this.
    pub max_bytes: u64,
    /// Backups to keep, newest first; 0 keeps all.
    pub max_backups: u32,
    /// Delete backups older than this; `None` keeps them.
    pub max_age: Option<Duration>,
    pub compress: bool,
}

impl From<&AuditLogging> for RotationPolicy {
    fn from(c: &AuditLogging) -> Self {
        let mb = match u64::from(c.max_size_mb) {
            0 => DEFAULT_MAX_SIZE_MB,
            n => n,
        };
        RotationPolicy {
            max_bytes: mb * MB,
            max_backups: c.max_backups,
            max_age: (c.max_age_days > 0).then(|| DAY * c.max_age_days),
            compress: c.compress,
        }
    }
}

/// A failure of the rotating file.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("write of {len} bytes exceeds the maximum file size of {max} bytes")]
    TooLong { len: u64, max: u64 },
    #[error("invalid log file path {0}")]
    BadPath(PathBuf),
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RotateError + 'a {
    move |source| RotateError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A rotated-away log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backup {
    pub path: PathBuf,
    /// The rotation time from the name.
    pub time: DateTime<Utc>,
    pub compressed: bool,
}

/// How backups of `<stem>.<ext>` are named.
#[derive(Clone, Debug)]
struct Naming {
    dir: PathBuf,
    /// `np-`
    prefix: String,
    /// `.log`
    ext: String,
}

impl Naming {
    fn backup_path(&self, t: DateTime<Utc>) -> PathBuf {
        self.dir.join(format!(
            "{}{}{}",
            self.prefix,
            t.format(BACKUP_TIME_FORMAT),
            self.ext
        ))
    }

    /// The time in a backup's file name, and whether it is compressed.
    fn parse(&self, name: &str) -> Option<(DateTime<Utc>, bool)> {
        let (rest, compressed) = match name.strip_suffix(COMPRESS_SUFFIX) {
            Some(r) => (r, true),
            None => (name, false),
        };
        let ts = rest.strip_prefix(&self.prefix)?.strip_suffix(&self.ext)?;
        let t = NaiveDateTime::parse_from_str(ts, BACKUP_TIME_FORMAT).ok()?;
        Some((t.and_utc(), compressed))
    }

    /// Every backup in the directory, newest first.
    fn backups(&self) -> io::Result<Vec<Backup>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some((time, compressed)) = self.parse(name) {
                out.push(Backup {
                    path: entry.path(),
                    time,
                    compressed,
                });
            }
        }
        out.sort_by(|a, b| b.time.cmp(&a.time).then(a.compressed.cmp(&b.compressed)));
        Ok(out)
    }
}

/// A log file that rotates itself (see the module documentation).
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    naming: Naming,
    policy: RotationPolicy,
    file: File,
    size: u64,
    /// Serializes the background work of successive rotations.
    mill_lock: Arc<Mutex<()>>,
    workers: Vec<JoinHandle<()>>,
    /// The time in the name of the last backup made.
    last_backup: Option<DateTime<Utc>>,
}

fn open_append(path: &Path, mode: u32) -> Result<File, RotateError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(mode)
        .open(path)
        .map_err(io_err("open", path))
}

impl RotatingFile {
    /// Opens `path` for appending, creating it (0600) and its directory (0755) if needed.
    pub fn open(path: &Path, policy: RotationPolicy) -> Result<Self, RotateError> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .ok_or_else(|| RotateError::BadPath(path.to_path_buf()))?;
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| RotateError::BadPath(path.to_path_buf()))?;
        let (stem, ext) = match file_name.rfind('.') {
            Some(i) if i > 0 => file_name.split_at(i),
            _ => (file_name, ""),
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io_err("create directory", dir))?;
        let file = open_append(path, 0o600)?;
        let size = file.metadata().map_err(io_err("stat", path))?.len();
        let naming = Naming {
            dir: dir.to_path_buf(),
            prefix: format!("{stem}-"),
            ext: ext.to_string(),
        };
        let last_backup = naming.backups().ok().and_then(|b| b.first().map(|b| b.time));
        Ok(RotatingFile {
            path: path.to_path_buf(),
            naming,
            policy,
            file,
            size,
            mill_lock: Arc::new(Mutex::new(())),
            workers: Vec::new(),
            last_backup,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the current file.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Writes `buf` in one `write` call, rotating first if it would not fit.
    pub fn write_all(&mut self, buf: &[u8]) -> Result<(), RotateError> {
        let len = buf.len() as u64;
        if len > self.policy.max_bytes {
            return Err(RotateError::TooLong {
                len,
                max: self.policy.max_bytes,
            });
        }
        if self.size + len > self.policy.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(buf).map_err(io_err("write", &self.path))?;
        self.size += len;
        Ok(())
    }

    /// Moves the current file aside and starts a new one; prunes and compresses in the
    /// background.
    pub fn rotate(&mut self) -> Result<(), RotateError> {
        // Backup names must sort in rotation order even when several rotations fall in one
        // millisecond (and a pruned name must not come back).
        let mut t = Utc::now();
        if let Some(last) = self.last_backup {
            t = t.max(last + chrono::Duration::milliseconds(1));
        }
        let mut backup = self.naming.backup_path(t);
        while backup.exists() || with_suffix(&backup, COMPRESS_SUFFIX).exists() {
            t += chrono::Duration::milliseconds(1);
            backup = self.naming.backup_path(t);
        }
        let perms = self
            .file
            .metadata()
            .map_err(io_err("stat", &self.path))?
            .permissions();
        fs::rename(&self.path, &backup).map_err(io_err("rename", &self.path))?;
        self.last_backup = Some(t);
        let file = open_append(&self.path, 0o600)?;
        if let Err(e) = file.set_permissions(perms) {
            warn!(path = %self.path.display(), "cannot copy the permissions of the rotated log: {e}");
        }
        self.file = file;
        self.size = 0;
        self.spawn_mill();
        Ok(())
    }

    fn spawn_mill(&mut self) {
        self.workers.retain(|w| !w.is_finished());
        let naming = self.naming.clone();
        let policy = self.policy.clone();
        let lock = self.mill_lock.clone();
        let spawned = std::thread::Builder::new()
            .name("audit-log-mill".into())
            .spawn(move || {
                let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = mill(&naming, &policy, Utc::now()) {
                    warn!(dir = %naming.dir.display(), "audit log backup maintenance failed: {e}");
                }
            });
        match spawned {
            Ok(h) => self.workers.push(h),
            Err(e) => warn!("cannot start audit log backup maintenance: {e}"),
        }
    }

    /// Waits until the background work of past rotations is done.
    pub fn wait_for_maintenance(&mut self) {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    /// Every backup, newest first.
    pub fn backups(&self) -> io::Result<Vec<Backup>> {
        self.naming.backups()
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Deletes the backups the policy does not keep and compresses the others.
fn mill(naming: &Naming, policy: &RotationPolicy, now: DateTime<Utc>) -> Result<(), RotateError> {
    // Partial compressions left by a crash.
    if let Ok(entries) = fs::read_dir(&naming.dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&naming.prefix)
                && name.ends_with(&format!("{COMPRESS_SUFFIX}{PARTIAL_SUFFIX}"))
            {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let files = naming.backups().map_err(io_err("list", &naming.dir))?;
    let mut keep = Vec::new();
    let mut remove = Vec::new();
    let mut preserved = std::collections::BTreeSet::new();
    for f in files {
        let base = f
            .path
            .to_string_lossy()
            .trim_end_matches(COMPRESS_SUFFIX)
            .to_string();
        preserved.insert(base);
        if policy.max_backups > 0 && preserved.len() > policy.max_backups as usize {
            remove.push(f);
        } else {
            keep.push(f);
        }
    }
    if let Some(age) = policy.max_age {
        let cutoff = now - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        let (old, young): (Vec<_>, Vec<_>) = keep.into_iter().partition(|f| f.time < cutoff);
        remove.extend(old);
        keep = young;
    }
    for f in &remove {
        if let Err(e) = fs::remove_file(&f.path) {
            if e.kind() != io::ErrorKind::NotFound {
                warn!(path = %f.path.display(), "cannot remove old audit log: {e}");
            }
        }
    }
    if policy.compress {
        for f in keep.iter().filter(|f| !f.compressed) {
            if let Err(e) = compress(&f.path) {
                warn!("{e}");
            }
        }
    }
    Ok(())
}

/// gzips `src` into `src.gz` (through a temporary file) and removes `src`.
fn compress(src: &Path) -> Result<(), RotateError> {
    let dst = with_suffix(src, COMPRESS_SUFFIX);
    let partial = with_suffix(&dst, PARTIAL_SUFFIX);
    let mut input = File::open(src).map_err(io_err("open", src))?;
    let perms = input.metadata().map_err(io_err("stat", src))?.permissions();
    let out = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(io_err("create", &partial))?;
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    io::copy(&mut input, &mut gz).map_err(io_err("compress", src))?;
    let out = gz.finish().map_err(io_err("compress", src))?;
    out.sync_all().map_err(io_err("sync", &partial))?;
    let _ = out.set_permissions(perms);
    fs::rename(&partial, &dst).map_err(io_err("rename", &partial))?;
    fs::remove_file(src).map_err(io_err("remove", src))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    fn policy(max_bytes: u64, max_backups: u32, compress: bool) -> RotationPolicy {
        RotationPolicy {
            max_bytes,
            max_backups,
            max_age: None,
            compress,
        }
    }

    fn read_backup(b: &Backup) -> String {
        let mut s = String::new();
        let f = File::open(&b.path).expect("open backup");
        if b.compressed {
            flate2::read::GzDecoder::new(f)
                .read_to_string(&mut s)
                .expect("gunzip");
        } else {
            let mut f = f;
            f.read_to_string(&mut s).expect("read");
        }
        s
    }

    #[test]
    fn policy_from_config_follows_lumberjack_defaults() {
        let p = RotationPolicy::from(&AuditLogging::default());
        assert_eq!(p.max_bytes, 500 * MB);
        assert_eq!(p.max_backups, 3);
        assert_eq!(p.max_age, Some(DAY * 28));
        assert!(p.compress);
        let p = RotationPolicy::from(&AuditLogging {
            max_size_mb: 0,
            max_backups: 0,
            max_age_days: 0,
            compress: false,
            ..AuditLogging::default()
        });
        assert_eq!(p.max_bytes, 100 * MB);
        assert_eq!(p.max_age, None);
    }

    #[test]
    fn rotates_before_a_write_that_would_not_fit_and_keeps_the_newest_backups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/np.log");
        let mut f = RotatingFile::open(&path, policy(20, 2, false)).expect("open");
        let mode = fs::metadata(dir.path().join("sub"))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            fs::metadata(&path).expect("file").permissions().mode() & 0o777,
            0o600
        );
        for i in 0..5 {
            f.write_all(format!("line {i} 123456\n").as_bytes())
                .expect("write"); // 14 bytes
        }
        f.wait_for_maintenance();
        assert_eq!(fs::read_to_string(&path).expect("read"), "line 4 123456\n");
        let backups = f.backups().expect("list");
        assert_eq!(backups.len(), 2, "{backups:?}");
        assert_eq!(read_backup(&backups[0]), "line 3 123456\n");
        assert_eq!(read_backup(&backups[1]), "line 2 123456\n");
        for b in &backups {
            let name = b.path.file_name().and_then(|n| n.to_str()).expect("name");
            assert!(name.starts_with("np-") && name.ends_with(".log"), "{name}");
            assert_eq!(name.len(), "np-2006-01-02T15-04-05.000.log".len());
        }
        let err = f.write_all(&[b'x'; 21]).expect_err("too long");
        assert_eq!(
            err.to_string(),
            "write of 21 bytes exceeds the maximum file size of 20 bytes"
        );
    }

    #[test]
    fn compresses_backups_and_reopens_appending() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("np.log");
        fs::write(&path, "old\n").expect("seed");
        let mut f = RotatingFile::open(&path, policy(10, 0, true)).expect("open");
        assert_eq!(f.size(), 4);
        f.write_all(b"abcde\n").expect("write"); // 10 bytes: fits exactly
        f.write_all(b"x\n").expect("write"); // rotates
        f.write_all(b"yyyyyyyy\n").expect("write"); // rotates again
        f.wait_for_maintenance();
        let backups = f.backups().expect("list");
        assert_eq!(backups.len(), 2);
        assert!(backups.iter().all(|b| b.compressed), "{backups:?}");
        assert_eq!(read_backup(&backups[1]), "old\nabcde\n");
        assert_eq!(read_backup(&backups[0]), "x\n");
        assert_eq!(fs::read_to_string(&path).expect("read"), "yyyyyyyy\n");
        // Nothing else is left in the directory (no partial or uncompressed copies).
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 3);
    }

    #[test]
    fn old_backups_are_removed_by_age_and_foreign_files_are_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let naming = Naming {
            dir: dir.path().to_path_buf(),
            prefix: "np-".into(),
            ext: ".log".into(),
        };
        let now = Utc::now();
        let old = naming.backup_path(now - chrono::Duration::days(30));
        let young = naming.backup_path(now - chrono::Duration::days(1));
        let young_gz = with_suffix(&naming.backup_path(now - chrono::Duration::days(2)), ".gz");
        let partial = with_suffix(&young_gz, ".tmp");
        let foreign = dir.path().join("np-notatime.log");
        for p in [&old, &young, &young_gz, &partial, &foreign] {
            fs::write(p, "x").expect("write");
        }
        let p = RotationPolicy {
            max_bytes: 100,
            max_backups: 0,
            max_age: Some(DAY * 7),
            compress: false,
        };
        mill(&naming, &p, now).expect("mill");
        assert!(!old.exists());
        assert!(young.exists() && young_gz.exists() && foreign.exists());
        assert!(!partial.exists());
        // max_backups counts a backup once even if both forms exist.
        fs::write(with_suffix(&young, ".gz"), "x").expect("write");
        let p = RotationPolicy { max_backups: 1, ..p };
        mill(&naming, &p, now).expect("mill");
        assert!(young.exists() && with_suffix(&young, ".gz").exists());
        assert!(!young_gz.exists());
    }

    #[test]
    fn names_round_trip_and_bad_paths_fail() {
        let naming = Naming {
            dir: PathBuf::from("/x"),
            prefix: "np-".into(),
            ext: ".log".into(),
        };
        let t = NaiveDateTime::parse_from_str("2024-05-01T10-00-00.123", BACKUP_TIME_FORMAT)
            .expect("time")
            .and_utc();
        let p = naming.backup_path(t);
        assert_eq!(p, PathBuf::from("/x/np-2024-05-01T10-00-00.123.log"));
        assert_eq!(naming.parse("np-2024-05-01T10-00-00.123.log.gz"), Some((t, true)));
        assert_eq!(naming.parse("np.log"), None);
        assert!(matches!(
            RotatingFile::open(Path::new("np.log"), policy(1, 0, false)),
            Err(RotateError::BadPath(_))
        ));
    }
}
