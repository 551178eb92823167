//! Change notification for a polled directory ([`DirWatch`]): inotify on the directory and on
//! its parent, so a poller reads the directory as soon as something in it changes instead of at
//! its next tick.
//!
//! The directory is watched where it resolves now, and its parent too, so the ways policy
//! directories are replaced all wake the poller: files written, renamed in or removed; the
//! directory created or removed; a symlink naming it swapped to another directory (how a
//! Kubernetes ConfigMap mount and many deploy tools update it). After each wake the watch moves
//! to wherever the path resolves then. The poller keeps polling on a longer period as a safety
//! net (network filesystems deliver no events), and polls on its short period if inotify cannot
//! be used at all.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask};
use tracing::{debug, warn};

/// How long to wait after the first event for the rest of a burst (an editor's temporary file
/// and rename, a deploy tool writing many files) so that one read sees all of it.
pub const SETTLE: Duration = Duration::from_millis(20);

/// Wakes a poller of one directory.
pub struct DirWatch {
    dir: PathBuf,
    stream: Option<EventStream<Vec<u8>>>,
    /// The directory the path resolved to when the watch was set, and its watch.
    target: Option<(PathBuf, WatchDescriptor)>,
    parent: Option<WatchDescriptor>,
    /// Set once inotify failed to start: the poller polls on its short period from then on.
    unavailable: bool,
}

impl DirWatch {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirWatch {
            dir: dir.into(),
            stream: None,
            target: None,
            parent: None,
            unavailable: false,
        }
    }

    /// Whether change events arrive (inotify started); `false` until the first [`DirWatch::wait`].
    pub fn is_active(&self) -> bool {
        self.stream.is_some()
    }

    /// Waits until something changed in or around the directory, then [`SETTLE`]s; or until
    /// `poll` passed without an event (`fallback` instead if inotify is unavailable). Returns
    /// whether an event woke it.
    ///
    /// Call [`DirWatch::arm`] before each read of the directory, so that a change made during
    /// the read wakes the next wait.
    pub async fn wait(&mut self, poll: Duration, fallback: Duration) -> bool {
        if self.arm() {
            // The path resolves elsewhere than when the last read started.
            return true;
        }
        let Some(stream) = self.stream.as_mut() else {
            tokio::time::sleep(fallback).await;
            return false;
        };
        let deadline = tokio::time::Instant::now() + poll;
        let failure = loop {
            tokio::select! {
                event = stream.next() => match event {
                    // A watch this type removed (the directory moved): nothing changed in it.
                    Some(Ok(e)) if e.mask == EventMask::IGNORED => continue,
                    Some(Ok(_)) => {
                        tokio::time::sleep(SETTLE).await;
                        // The rest of the burst is covered by the read that follows.
                        while let Some(Some(Ok(_))) = stream.next().now_or_never() {}
                        return true;
                    }
                    Some(Err(e)) => break format!("reading inotify events failed: {e}"),
                    None => break "the inotify event stream ended".to_owned(),
                },
                _ = tokio::time::sleep_until(deadline) => return false,
            }
        };
        self.reset(&failure);
        false
    }

    /// Starts inotify if needed and points the watches at the directory as it resolves now;
    /// whether that moved the directory watch (to another directory, or away from one that is
    /// gone). Failures leave the poller polling; they are retried at the next call.
    pub fn arm(&mut self) -> bool {
        if self.unavailable {
            return false;
        }
        if self.stream.is_none() {
            match Inotify::init().and_then(|i| i.into_event_stream(vec![0u8; 4096])) {
                Ok(stream) => self.stream = Some(stream),
                Err(e) => {
                    self.unavailable = true;
                    warn!(
                        dir = %self.dir.display(),
                        "inotify is unavailable ({e}); the policy directory is only polled"
                    );
                    return false;
                }
            }
        }
        let Some(stream) = &self.stream else {
            return false;
        };
        let mut watches = stream.watches();
        if self.parent.is_none() {
            if let Some(parent) = parent_of(&self.dir) {
                // The directory itself appearing, disappearing or being swapped (a symlink).
                let mask = WatchMask::CREATE
                    | WatchMask::DELETE
                    | WatchMask::MOVED_TO
                    | WatchMask::MOVED_FROM
                    | WatchMask::ONLYDIR;
                match watches.add(&parent, mask) {
                    Ok(wd) => self.parent = Some(wd),
                    Err(e) => debug!(parent = %parent.display(), "cannot watch: {e}"),
                }
            }
        }
        let resolved = std::fs::canonicalize(&self.dir).ok();
        if resolved.as_ref() == self.target.as_ref().map(|(p, _)| p) {
            return false;
        }
        if let Some((_, wd)) = self.target.take() {
            // Fails harmlessly if the directory (and so its watch) is gone already.
            let _ = watches.remove(wd);
        }
        if let Some(path) = resolved {
            let mask = WatchMask::CREATE
                | WatchMask::DELETE
                | WatchMask::MODIFY
                | WatchMask::CLOSE_WRITE
                | WatchMask::MOVED_TO
                | WatchMask::MOVED_FROM
                | WatchMask::ATTRIB
                | WatchMask::DELETE_SELF
                | WatchMask::MOVE_SELF
                | WatchMask::ONLYDIR;
            match watches.add(&path, mask) {
                Ok(wd) => self.target = Some((path, wd)),
                Err(e) => debug!(dir = %path.display(), "cannot watch: {e}"),
            }
        }
        true
    }

    /// Drops the inotify instance after an error; the next wait starts a new one.
    fn reset(&mut self, why: &str) {
        warn!(dir = %self.dir.display(), "{why}; watching it again");
        self.stream = None;
        self.target = None;
        self.parent = None;
    }
}

/// The directory holding `dir` (`.` for a bare relative name).
fn parent_of(dir: &Path) -> Option<PathBuf> {
    match dir.parent() {
        Some(p) if p.as_os_str().is_empty() => Some(PathBuf::from(".")),
        Some(p) => Some(p.to_path_buf()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    /// `wait` returns because of an event (not the 30 s poll), within a bounded time.
    async fn woken(w: &mut DirWatch) -> bool {
        tokio::time::timeout(Duration::from_secs(10), w.wait(LONG, LONG))
            .await
            .expect("woken within 10 s")
    }

    /// What the poller does before a read (arm), then a wait that times out quickly, with no
    /// event pending.
    async fn arm(w: &mut DirWatch) {
        w.arm();
        assert!(!w.wait(Duration::from_millis(50), Duration::from_millis(50)).await);
    }

    #[tokio::test]
    async fn file_changes_in_the_directory_wake_the_poller() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("policies");
        std::fs::create_dir(&dir).expect("mkdir");
        let mut w = DirWatch::new(&dir);
        arm(&mut w).await;
        assert!(w.is_active());

        let changes: [&dyn Fn(&Path); 4] = [
            &|d| std::fs::write(d.join("a.yaml"), "x").expect("write"),
            &|d| std::fs::write(d.join("a.yaml"), "y").expect("rewrite"),
            &|d| {
                std::fs::write(d.join(".b.tmp"), "z").expect("write tmp");
                std::fs::rename(d.join(".b.tmp"), d.join("b.yaml")).expect("rename");
            },
            &|d| std::fs::remove_file(d.join("a.yaml")).expect("rm"),
        ];
        for change in changes {
            let w = &mut w;
            let wake = woken(w);
            tokio::pin!(wake);
            // Make the change only once the wait is in progress.
            assert!(futures::poll!(&mut wake).is_pending());
            change(&dir);
            assert!(wake.await, "an event woke the poller");
        }
    }

    #[tokio::test]
    async fn creating_the_directory_and_swapping_a_symlink_wake_the_poller() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let link = tmp.path().join("policies");
        let mut w = DirWatch::new(&link);
        // Missing at first: only the parent is watched.
        arm(&mut w).await;
        let first = tmp.path().join("v1");
        std::fs::create_dir(&first).expect("mkdir v1");
        {
            let wake = woken(&mut w);
            tokio::pin!(wake);
            assert!(futures::poll!(&mut wake).is_pending());
            std::os::unix::fs::symlink(&first, &link).expect("link");
            assert!(wake.await);
        }
        // The watch followed the link: a file written in v1 wakes it.
        arm(&mut w).await;
        {
            let wake = woken(&mut w);
            tokio::pin!(wake);
            assert!(futures::poll!(&mut wake).is_pending());
            std::fs::write(first.join("a.yaml"), "x").expect("write");
            assert!(wake.await);
        }
        // Swap the link to v2 (atomically, by renaming a new link over it).
        let second = tmp.path().join("v2");
        std::fs::create_dir(&second).expect("mkdir v2");
        {
            let wake = woken(&mut w);
            tokio::pin!(wake);
            assert!(futures::poll!(&mut wake).is_pending());
            let new_link = tmp.path().join(".policies.new");
            std::os::unix::fs::symlink(&second, &new_link).expect("new link");
            std::fs::rename(&new_link, &link).expect("swap");
            assert!(wake.await);
        }
        // A wait that starts after the swap without a read in between reports the move.
        assert!(w.wait(LONG, LONG).await, "the directory moved since the last arm");
        // Now v2 is watched, and v1 no longer wakes it.
        arm(&mut w).await;
        std::fs::write(first.join("b.yaml"), "x").expect("write v1");
        assert!(
            !w.wait(Duration::from_millis(300), LONG).await,
            "a change in the old directory does not wake the poller"
        );
        let wake = woken(&mut w);
        tokio::pin!(wake);
        assert!(futures::poll!(&mut wake).is_pending());
        std::fs::write(second.join("a.yaml"), "x").expect("write v2");
        assert!(wake.await);
    }
}
