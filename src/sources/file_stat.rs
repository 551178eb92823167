//! Telling that a file has not changed since it was last read, without reading it again: its
//! metadata (device, inode, size, modification and change times) is what it was just before
//! that read, and that read started long enough after the last change the times record that no
//! later write can carry the same times. Filesystems keep coarse timestamps (a kernel tick on
//! ext4, 2 s on FAT), so two writes close together can leave identical metadata; a file read
//! within [`RACY_MARGIN`] of its last change is read again next time (git calls such index
//! entries "racily clean"). The change time cannot be set by a user, so restoring the
//! modification time after an edit does not hide it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longer than the coarsest timestamp granularity a policy directory may live on (FAT: 2 s).
pub const RACY_MARGIN: Duration = Duration::from_secs(3);

/// What the metadata tells about a regular file's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    dev: u64,
    ino: u64,
    len: u64,
    /// Nanoseconds since the epoch.
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileStat {
    /// The metadata of `path` (symlinks followed), when it is a regular file.
    pub fn of(path: &Path) -> Option<FileStat> {
        let m = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file)?;
        Some(FileStat::from_metadata(&m))
    }

    /// What `m`, a regular file's metadata, tells.
    pub fn from_metadata(m: &std::fs::Metadata) -> FileStat {
        let ns = |secs: i64, nsecs: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsecs);
        FileStat {
            dev: m.dev(),
            ino: m.ino(),
            len: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A file's metadata taken just before it was read, and when that read started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadStamp {
    stat: FileStat,
    read_at: SystemTime,
}

impl ReadStamp {
    /// Takes the clock, then the metadata: call right before reading the file (metadata taken
    /// after the read could belong to a write the read did not see). The policy directory's
    /// reads take the metadata from the opened file instead ([`ReadStamp::new`]): the file read.
    #[cfg(test)]
    pub fn before_read(path: &Path) -> Option<ReadStamp> {
        let read_at = SystemTime::now();
        FileStat::of(path).map(|stat| ReadStamp { stat, read_at })
    }

    /// The stamp of a read that started at `read_at` (the clock taken before the metadata) and
    /// saw `stat` (taken before the read: from the opened file, say).
    pub fn new(read_at: SystemTime, stat: FileStat) -> ReadStamp {
        ReadStamp { stat, read_at }
    }

    /// Whether the file, whose metadata is `now`, is proven unchanged since this read.
    pub fn unchanged(&self, now: &FileStat) -> bool {
        let read_at = self
            .read_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
        let margin = i128::try_from(RACY_MARGIN.as_nanos()).unwrap_or(i128::MAX);
        self.stat == *now && self.stat.mtime_ns.max(self.stat.ctime_ns).saturating_add(margin) <= read_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read made long after the file's last change.
    fn read_later(path: &Path) -> ReadStamp {
        let mut stamp = ReadStamp::before_read(path).expect("a regular file");
        stamp.read_at += RACY_MARGIN * 2;
        stamp
    }

    #[test]
    fn unchanged_only_with_the_same_metadata_and_outside_the_racy_margin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.yaml");
        std::fs::write(&path, "one").expect("write");

        // Read right after the write: the times could be shared by a write in the same tick.
        let fresh = ReadStamp::before_read(&path).expect("a regular file");
        assert!(!fresh.unchanged(&FileStat::of(&path).expect("stat")));

        let settled = read_later(&path);
        assert!(settled.unchanged(&FileStat::of(&path).expect("stat")));

        // Rewritten in place with the same size (a tick later), replaced by a rename, grown:
        // changed each time.
        std::thread::sleep(Duration::from_millis(30));
        std::fs::write(&path, "two").expect("write");
        assert!(!settled.unchanged(&FileStat::of(&path).expect("stat")));
        let settled = read_later(&path);
        let tmp = dir.path().join(".a.tmp");
        std::fs::write(&tmp, "two").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert!(!settled.unchanged(&FileStat::of(&path).expect("stat")));
        let settled = read_later(&path);
        std::fs::write(&path, "three").expect("write");
        assert!(!settled.unchanged(&FileStat::of(&path).expect("stat")));
    }

    #[test]
    fn only_regular_files_have_a_stat() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(FileStat::of(dir.path()).is_none());
        assert!(FileStat::of(&dir.path().join("missing")).is_none());
        let target = dir.path().join("t.yaml");
        std::fs::write(&target, "x").expect("write");
        let link = dir.path().join("l.yaml");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert_eq!(FileStat::of(&link), FileStat::of(&target));
    }
}
