//! Change notification for a polled directory ([`DirWatch`]): inotify on the directory and on
//! its parent, so a poller reads the directory as soon as something in it changes instead of at
//! its next tick.
//!
//! The directory is watched where it resolves now, and its parent too, so the ways policy
//! directories are replaced all wake the poller: files written (a rewrite wakes it once closed;
//! a file still being written when another event's read comes may be read half written, and is
//! read again once closed), renamed in or removed; the directory created or removed; a symlink
//! naming it swapped to another directory (how a Kubernetes ConfigMap mount and many deploy
//! tools update it). After each wake the watch moves to wherever the path resolves then. The
//! watch also tells which entries events named since the last read, so a poller can skip the
//! others. The poller keeps polling on a longer period as a safety net (network filesystems
//! deliver no events), and polls on its short period if inotify cannot be used at all.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask, Watches};
use tracing::{debug, warn};

/// How long the directory must stay quiet after an event before it is read, so that one read
/// sees a whole burst (an editor's temporary file and rename, a deploy tool writing many files).
pub const SETTLE: Duration = Duration::from_millis(20);

/// The same after a file of interest was renamed into the directory (how atomic writers, deploy
/// tools and a ConfigMap's files land): what the rename brings is complete, so a single edit is
/// read 18 ms sooner; the short quiet is kept because a tool landing many files renames them one
/// by one, and one read should see them all. Only when nothing in the
/// burst removed a file of interest that has not come back (an editor renaming the old version
/// to a backup name before writing the new one), and only for
/// a rename: a file closed after writing may be appended to by the writer's next command, and a
/// created one is still being written, so those wait the full [`SETTLE`]. A burst of files keeps
/// resetting the quiet.
pub const SETTLE_AFTER_RENAME: Duration = Duration::from_millis(2);

/// The same after the directory itself was renamed into place (a symlink naming it swapped by
/// rename, as deploy tools publish a prepared directory): the rename brings the whole directory,
/// complete, at once, so it is read as soon as the events already queued behind the rename are
/// taken, without waiting for more (2 to 3 ms sooner than [`SETTLE_AFTER_RENAME`], the timer
/// counting whole milliseconds). Only when nothing in the burst removed a file of interest that
/// has not come back, as for a file renamed in.
pub const SETTLE_AFTER_SWAP: Duration = Duration::ZERO;

/// The longest a burst may delay the read.
const MAX_SETTLE: Duration = Duration::from_secs(1);

/// Events on the directory's own watch that mean something in it changed. Not `MODIFY`: a
/// file rewritten in place is read once closed (`CLOSE_WRITE`), never half written.
fn dir_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// Events on the parent's watch: the directory (or the symlink naming it) appearing,
/// disappearing or being swapped. Only events naming the directory count.
fn parent_mask() -> WatchMask {
    WatchMask::CREATE | WatchMask::DELETE | WatchMask::MOVED_TO | WatchMask::MOVED_FROM | WatchMask::ONLYDIR
}

/// Wakes a poller of one directory.
pub struct DirWatch {
    dir: PathBuf,
    stream: Option<EventStream<Vec<u8>>>,
    /// The watch on the directory as the path resolved at the last [`DirWatch::arm`]; `None`
    /// while it is missing or cannot be watched.
    target: Option<WatchDescriptor>,
    parent: Option<WatchDescriptor>,
    /// Set once inotify failed to start: the poller polls on its short period from then on.
    unavailable: bool,
    /// The entries of the directory that events named since [`DirWatch::arm_for_read`]; `None`
    /// when an event may stand for more than the entry it names (the directory itself moved,
    /// an event on the parent, a lost event queue, a subdirectory), or inotify is not in use.
    named: Option<BTreeSet<OsString>>,
    /// The names whose rename into the directory completes them ([`SETTLE_AFTER_RENAME`]; the
    /// directory renamed into place: [`SETTLE_AFTER_SWAP`]); `None`: every event waits [`SETTLE`].
    of_interest: Option<fn(&str) -> bool>,
}

impl DirWatch {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirWatch {
            dir: dir.into(),
            stream: None,
            target: None,
            parent: None,
            unavailable: false,
            named: None,
            of_interest: None,
        }
    }

    /// The same watch, reading the directory 2 ms after a file whose name `of_interest` accepts
    /// was renamed into it ([`SETTLE_AFTER_RENAME`]), and at once after the directory itself was
    /// renamed into place ([`SETTLE_AFTER_SWAP`]), instead of 20 ms.
    pub fn with_files_of_interest(mut self, of_interest: fn(&str) -> bool) -> Self {
        self.of_interest = Some(of_interest);
        self
    }

    /// Like [`DirWatch::arm`], right before a read of the directory: returns the entries of the
    /// directory that changed since the last such call, as far as the events tell (the regular
    /// files not listed are unchanged since then: each change of one queues an event naming
    /// it), and starts recording anew. `None` when that is not known, including when the path
    /// now resolves to another directory than the events were about.
    pub fn arm_for_read(&mut self) -> Option<BTreeSet<OsString>> {
        let moved = self.arm();
        let named = self.named.take().filter(|_| !moved);
        self.named = self.target.is_some().then(BTreeSet::new);
        named
    }

    /// Records what a counted event tells of the changed entries.
    fn note(&mut self, e: &inotify::Event<OsString>) {
        let Some(named) = self.named.as_mut() else { return };
        let on_target = self.target.as_ref() == Some(&e.wd);
        match &e.name {
            Some(name) if on_target && !e.mask.contains(EventMask::ISDIR) => {
                named.insert(name.clone());
            }
            _ => self.named = None,
        }
    }

    /// Whether change events arrive (inotify started); `false` until the first [`DirWatch::arm`].
    pub fn is_active(&self) -> bool {
        self.stream.is_some()
    }

    /// Waits until something changed in or around the directory and it has been quiet for
    /// [`SETTLE`] (or [`SETTLE_AFTER_RENAME`], or only for the events already queued:
    /// [`SETTLE_AFTER_SWAP`]); or until `poll` passed without an event (`fallback` instead if inotify is
    /// unavailable, or while only the parent can be watched). Returns whether a change woke it.
    ///
    /// Call [`DirWatch::arm_for_read`] (or [`DirWatch::arm`]) before each read of the
    /// directory, so that a change made during the read wakes the next wait.
    pub async fn wait(&mut self, poll: Duration, fallback: Duration) -> bool {
        if self.arm() {
            // The path resolves to another directory (or to none) than at the last arm.
            self.named = None;
            return true;
        }
        let deadline = tokio::time::Instant::now()
            + if self.target.is_some() {
                poll
            } else {
                fallback.min(poll)
            };
        if self.stream.is_none() {
            tokio::time::sleep(fallback).await;
            return false;
        }
        let failure = loop {
            let Some(stream) = self.stream.as_mut() else {
                return false;
            };
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(e)) if !counts(&e, &self.target, &self.parent, &self.dir) => continue,
                    Some(Ok(e)) => {
                        self.note(&e);
                        if let Err(failure) = self.settle(&e).await {
                            // Woken all the same; what else changed is unknown (the whole
                            // directory is read).
                            self.reset(&failure);
                        }
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

    /// Waits until no event arrived for the quiet period the burst asks for (see
    /// [`Burst::quiet`]; a zero quiet takes only the events already queued), at most
    /// [`MAX_SETTLE`] in all, recording the entries the events name.
    async fn settle(&mut self, first: &inotify::Event<OsString>) -> Result<(), String> {
        let end = tokio::time::Instant::now() + MAX_SETTLE;
        let mut burst = Burst::default();
        let mut quiet_for = burst.quiet(first, self.of_interest, self.swaps_dir(first));
        loop {
            let Some(stream) = self.stream.as_mut() else {
                return Ok(());
            };
            let next = if quiet_for.is_zero() {
                // Only the events already queued: no timer (it counts whole milliseconds). An
                // event this poll does not see (the task's budget spent) wakes the next wait:
                // one more read, nothing lost.
                stream.next().now_or_never()
            } else {
                let quiet = tokio::time::Instant::now() + quiet_for;
                tokio::time::timeout_at(quiet.min(end), stream.next()).await.ok()
            };
            match next {
                Some(Some(Ok(e))) => {
                    if counts(&e, &self.target, &self.parent, &self.dir) {
                        self.note(&e);
                        quiet_for = burst.quiet(&e, self.of_interest, self.swaps_dir(&e));
                    }
                    if tokio::time::Instant::now() >= end {
                        return Ok(());
                    }
                }
                Some(Some(Err(e))) => return Err(format!("reading inotify events failed: {e}")),
                Some(None) => return Err("the inotify event stream ended".to_owned()),
                None => return Ok(()),
            }
        }
    }

    /// Whether `e` is the directory (or the symlink naming it) renamed into place: a `MOVED_TO`
    /// on the parent's watch that names the directory.
    fn swaps_dir(&self, e: &inotify::Event<OsString>) -> bool {
        e.mask.contains(EventMask::MOVED_TO)
            && self.parent.as_ref() == Some(&e.wd)
            && self.target.as_ref() != Some(&e.wd)
            && e.name.as_deref() == self.dir.file_name()
    }

    /// Starts inotify if needed and points the watches at the directory as it resolves now
    /// (and at its parent); whether that changed the directory watch: another directory at the
    /// path (a swapped symlink, a directory removed and created again), or none. Failures
    /// leave the poller polling on its short period; watches are tried again at every call.
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
        // Adding a watch on an inode already watched returns its descriptor: a different one
        // means another directory (or parent) sits at the path now.
        if let Some(parent) = parent_of(&self.dir) {
            let now = watches.add(&parent, parent_mask()).ok();
            replace_watch(&mut watches, &mut self.parent, now);
        }
        let now = match std::fs::canonicalize(&self.dir) {
            Ok(path) => match watches.add(&path, dir_mask()) {
                Ok(wd) => Some(wd),
                Err(e) => {
                    debug!(dir = %path.display(), "cannot watch: {e}");
                    None
                }
            },
            Err(_) => None,
        };
        replace_watch(&mut watches, &mut self.target, now)
    }

    /// Drops the inotify instance after an error; the next wait starts a new one.
    fn reset(&mut self, why: &str) {
        warn!(dir = %self.dir.display(), "{why}; watching it again");
        self.named = None;
        self.stream = None;
        self.target = None;
        self.parent = None;
    }
}

/// Puts `now` in `slot`, removing the watch it held if that is another one; whether it changed.
fn replace_watch(
    watches: &mut Watches,
    slot: &mut Option<WatchDescriptor>,
    now: Option<WatchDescriptor>,
) -> bool {
    let changed = *slot != now;
    if let Some(old) = slot.take().filter(|_| changed) {
        // Fails harmlessly if the directory (and so its watch) is gone already.
        let _ = watches.remove(old);
    }
    *slot = now;
    changed
}

/// Whether an event tells of a change: anything on the directory's watch but the removal of a
/// watch; on the parent's, only events naming the directory.
fn counts(
    e: &inotify::Event<std::ffi::OsString>,
    target: &Option<WatchDescriptor>,
    parent: &Option<WatchDescriptor>,
    dir: &Path,
) -> bool {
    if e.mask.contains(EventMask::IGNORED) {
        return false;
    }
    if parent.as_ref() == Some(&e.wd) && target.as_ref() != Some(&e.wd) {
        return e.name.as_deref() == dir.file_name();
    }
    true
}

/// The files of interest a burst of events removed and did not bring back.
#[derive(Default)]
struct Burst {
    missing: BTreeSet<OsString>,
}

impl Burst {
    /// How quiet the directory must stay after `e` before it is read; `swaps_dir`: `e` renamed
    /// the directory itself into place ([`DirWatch::swaps_dir`]).
    fn quiet(
        &mut self,
        e: &inotify::Event<OsString>,
        of_interest: Option<fn(&str) -> bool>,
        swaps_dir: bool,
    ) -> Duration {
        // The directory renamed into place is complete at once.
        if swaps_dir && of_interest.is_some() {
            return if self.missing.is_empty() {
                SETTLE_AFTER_SWAP
            } else {
                SETTLE
            };
        }
        self.quiet_for(e.mask, e.name.as_deref(), of_interest)
    }

    /// After a completing rename: the short quiet, unless a file of the burst is missing.
    fn after_rename(&self) -> Duration {
        if self.missing.is_empty() {
            SETTLE_AFTER_RENAME
        } else {
            SETTLE
        }
    }

    fn quiet_for(
        &mut self,
        mask: EventMask,
        name: Option<&std::ffi::OsStr>,
        of_interest: Option<fn(&str) -> bool>,
    ) -> Duration {
        let name = name.filter(|n| of_interest.is_some_and(|f| n.to_str().is_some_and(f)));
        let Some(name) = name else { return SETTLE };
        if mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
            self.missing.insert(name.to_owned());
        } else if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            self.missing.remove(name);
        }
        if mask.contains(EventMask::MOVED_TO) {
            self.after_rename()
        } else {
            SETTLE
        }
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

    /// Starts a wait, makes `change` once the wait is in progress, and asserts that an event
    /// (not the 30 s poll) ends it.
    async fn woken_by(w: &mut DirWatch, change: impl FnOnce()) {
        let wake = woken(w);
        tokio::pin!(wake);
        assert!(futures::poll!(&mut wake).is_pending());
        change();
        assert!(wake.await, "an event woke the poller");
    }

    /// What the poller does before a read (arm), then a wait that times out quickly, with no
    /// event pending.
    async fn arm(w: &mut DirWatch) {
        w.arm();
        assert!(!w.wait(Duration::from_millis(50), Duration::from_millis(50)).await);
    }

    #[test]
    fn only_a_policy_file_renamed_in_shortens_the_quiet() {
        let yaml: Option<fn(&str) -> bool> = Some(|n| n.ends_with(".yaml"));
        let n = |s: &'static str| Some(std::ffi::OsStr::new(s));
        let mut burst = Burst::default();
        // The atomic writer: a hidden temporary file written, then renamed into place.
        assert_eq!(burst.quiet_for(EventMask::CREATE, n(".a.yaml.tmp"), yaml), SETTLE);
        assert_eq!(
            burst.quiet_for(EventMask::CLOSE_WRITE, n(".a.yaml.tmp"), yaml),
            SETTLE
        );
        assert_eq!(
            burst.quiet_for(EventMask::MOVED_FROM, n(".a.yaml.tmp"), yaml),
            SETTLE
        );
        assert_eq!(
            burst.quiet_for(EventMask::MOVED_TO, n("a.yaml"), yaml),
            SETTLE_AFTER_RENAME
        );
        // Written in place, possibly in several commands: the full quiet.
        assert_eq!(burst.quiet_for(EventMask::CLOSE_WRITE, n("b.yaml"), yaml), SETTLE);
        // Without a filter, for another name or without a name: the full quiet.
        assert_eq!(burst.quiet_for(EventMask::MOVED_TO, n("a.yaml"), None), SETTLE);
        assert_eq!(burst.quiet_for(EventMask::MOVED_TO, n("a.yaml~"), yaml), SETTLE);
        assert_eq!(burst.quiet_for(EventMask::MOVE_SELF, None, yaml), SETTLE);

        // An editor's backup: the old file renamed away, the new one not there yet.
        let mut burst = Burst::default();
        assert_eq!(burst.quiet_for(EventMask::MOVED_FROM, n("c.yaml"), yaml), SETTLE);
        assert_eq!(burst.quiet_for(EventMask::MOVED_TO, n("c.yaml~"), yaml), SETTLE);
        assert_eq!(
            burst.quiet_for(EventMask::MOVED_TO, n("d.yaml"), yaml),
            SETTLE,
            "c.yaml is missing"
        );
        assert_eq!(burst.quiet_for(EventMask::CREATE, n("c.yaml"), yaml), SETTLE);
        assert_eq!(burst.quiet_for(EventMask::CLOSE_WRITE, n("c.yaml"), yaml), SETTLE);
        assert_eq!(
            burst.quiet_for(EventMask::MOVED_TO, n("e.yaml"), yaml),
            SETTLE_AFTER_RENAME
        );
        // A removal in the burst.
        assert_eq!(burst.quiet_for(EventMask::DELETE, n("e.yaml"), yaml), SETTLE);
        assert_eq!(burst.quiet_for(EventMask::MOVED_TO, n("f.yaml"), yaml), SETTLE);
    }

    #[tokio::test]
    async fn changed_entries_name_the_files_changed_since_the_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("policies");
        std::fs::create_dir(&dir).expect("mkdir");
        let mut w = DirWatch::new(&dir);
        assert_eq!(w.arm_for_read(), None, "unknown before the first read");
        assert_eq!(w.arm_for_read(), Some(BTreeSet::new()));
        woken_by(&mut w, || {
            std::fs::write(dir.join(".a.yaml.tmp"), "x").expect("write");
            std::fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).expect("rename");
        })
        .await;
        let named = w.arm_for_read().expect("known");
        let named: Vec<&str> = named.iter().filter_map(|n| n.to_str()).collect();
        assert_eq!(named, [".a.yaml.tmp", "a.yaml"]);
        // A subdirectory (whatever it holds), an event on the parent or a lost event queue:
        // anything may have changed.
        woken_by(&mut w, || std::fs::create_dir(dir.join("sub")).expect("mkdir")).await;
        assert_eq!(w.arm_for_read(), None);
        woken_by(&mut w, || {
            std::fs::rename(&dir, tmp.path().join("moved")).expect("move away");
            std::fs::create_dir(&dir).expect("mkdir again");
        })
        .await;
        assert_eq!(w.arm_for_read(), None);
    }

    /// The path starts resolving to another directory while no event reached this watch (an
    /// ancestor symlink swapped): what the events named says nothing of the new directory.
    #[tokio::test]
    async fn a_directory_swapped_without_an_event_here_is_not_known_unchanged() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let v1 = tmp.path().join("v1");
        let v2 = tmp.path().join("v2");
        std::fs::create_dir_all(v1.join("policies")).expect("mkdir");
        std::fs::create_dir_all(v2.join("policies")).expect("mkdir");
        let link = tmp.path().join("current");
        std::os::unix::fs::symlink(&v1, &link).expect("link");
        let mut w = DirWatch::new(link.join("policies"));
        w.arm_for_read();
        assert_eq!(w.arm_for_read(), Some(BTreeSet::new()));
        let new_link = tmp.path().join(".current.new");
        std::os::unix::fs::symlink(&v2, &new_link).expect("new link");
        std::fs::rename(&new_link, &link).expect("swap");
        assert_eq!(w.arm_for_read(), None, "the watch moved to another directory");
        assert_eq!(w.arm_for_read(), Some(BTreeSet::new()));
    }

    /// The next event that counts, straight from the stream (bounded).
    async fn next_counted(w: &mut DirWatch) -> inotify::Event<OsString> {
        loop {
            let stream = w.stream.as_mut().expect("inotify started");
            let e = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .expect("an event within 5 s")
                .expect("the stream goes on")
                .expect("an event");
            if counts(&e, &w.target, &w.parent, &w.dir) {
                return e;
            }
        }
    }

    /// The next `MOVED_TO` that counts; the events before it (the temporary file's) are no swap.
    async fn next_rename_in(w: &mut DirWatch) -> inotify::Event<OsString> {
        loop {
            let e = next_counted(w).await;
            if e.mask.contains(EventMask::MOVED_TO) {
                return e;
            }
            assert!(!w.swaps_dir(&e), "{e:?} is not a swap");
        }
    }

    /// A symlink naming the directory swapped by rename is a completed change (the short
    /// quiet); a file renamed into the directory is not a swap of it, and without files of
    /// interest (or with one missing from the burst) even a swap waits the full quiet.
    #[tokio::test]
    async fn the_directory_renamed_into_place_shortens_the_quiet() {
        let yaml: Option<fn(&str) -> bool> = Some(|n| n.ends_with(".yaml"));
        let tmp = tempfile::tempdir().expect("tempdir");
        let (v1, v2) = (tmp.path().join("v1"), tmp.path().join("v2"));
        std::fs::create_dir(&v1).expect("mkdir v1");
        std::fs::create_dir(&v2).expect("mkdir v2");
        let link = tmp.path().join("policies");
        std::os::unix::fs::symlink(&v1, &link).expect("link");
        let mut w = DirWatch::new(&link).with_files_of_interest(|n| n.ends_with(".yaml"));
        arm(&mut w).await;

        std::fs::write(v1.join(".a.tmp"), "x").expect("write");
        std::fs::rename(v1.join(".a.tmp"), v1.join("a.yaml")).expect("rename in");
        let e = next_rename_in(&mut w).await;
        assert!(
            !w.swaps_dir(&e),
            "a file renamed in is not a swap of the directory"
        );
        // Not even one named like the directory: it is on the directory's own watch.
        std::fs::write(v1.join(".p.tmp"), "x").expect("write");
        std::fs::rename(v1.join(".p.tmp"), v1.join("policies")).expect("rename in");
        let e = next_rename_in(&mut w).await;
        assert_eq!(e.name.as_deref(), Some(std::ffi::OsStr::new("policies")));
        assert!(
            !w.swaps_dir(&e),
            "a file named like the directory renamed into it"
        );

        let staged = tmp.path().join(".policies.new");
        std::os::unix::fs::symlink(&v2, &staged).expect("stage the link");
        std::fs::rename(&staged, &link).expect("swap");
        let e = next_counted(&mut w).await;
        assert!(w.swaps_dir(&e), "the swap: {e:?}");
        let mut burst = Burst::default();
        assert_eq!(burst.quiet(&e, yaml, w.swaps_dir(&e)), SETTLE_AFTER_SWAP);
        assert_eq!(burst.quiet(&e, None, w.swaps_dir(&e)), SETTLE);
        // The same event taken as anything but a swap: a name not of interest, the full quiet.
        assert_eq!(burst.quiet(&e, yaml, false), SETTLE);
        burst.quiet_for(EventMask::DELETE, Some(std::ffi::OsStr::new("b.yaml")), yaml);
        assert_eq!(
            burst.quiet(&e, yaml, true),
            SETTLE,
            "b.yaml went missing in this burst"
        );
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
            woken_by(&mut w, || change(&dir)).await;
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
        woken_by(&mut w, || {
            std::os::unix::fs::symlink(&first, &link).expect("link");
        })
        .await;
        // The watch followed the link: a file written in v1 wakes it.
        arm(&mut w).await;
        woken_by(&mut w, || {
            std::fs::write(first.join("a.yaml"), "x").expect("write");
        })
        .await;
        // Swap the link to v2 (atomically, by renaming a new link over it).
        let second = tmp.path().join("v2");
        std::fs::create_dir(&second).expect("mkdir v2");
        woken_by(&mut w, || {
            let new_link = tmp.path().join(".policies.new");
            std::os::unix::fs::symlink(&second, &new_link).expect("new link");
            std::fs::rename(&new_link, &link).expect("swap");
        })
        .await;
        // A wait that starts after the swap without a read in between reports the move.
        assert!(w.wait(LONG, LONG).await, "the directory moved since the last arm");
        // Now v2 is watched, and v1 no longer wakes it.
        arm(&mut w).await;
        std::fs::write(first.join("b.yaml"), "x").expect("write v1");
        assert!(
            !w.wait(Duration::from_millis(300), LONG).await,
            "a change in the old directory does not wake the poller"
        );
        woken_by(&mut w, || {
            std::fs::write(second.join("a.yaml"), "x").expect("write v2");
        })
        .await;
    }

    #[tokio::test]
    async fn neighbours_do_not_wake_it_and_a_recreated_directory_is_watched_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("policies");
        std::fs::create_dir(&dir).expect("mkdir");
        let mut w = DirWatch::new(&dir);
        arm(&mut w).await;
        // Activity next to the directory, in its parent, is not a change of it.
        std::fs::write(tmp.path().join("other.log"), "x").expect("write neighbour");
        std::fs::create_dir(tmp.path().join("other-dir")).expect("mkdir neighbour");
        assert!(!w.wait(Duration::from_millis(300), LONG).await);

        // Removed and created again at the same path: the new directory is watched.
        woken_by(&mut w, || {
            std::fs::remove_dir(&dir).expect("rmdir");
            std::fs::create_dir(&dir).expect("mkdir again");
        })
        .await;
        arm(&mut w).await;
        woken_by(&mut w, || {
            std::fs::write(dir.join("a.yaml"), "x").expect("write in the new directory");
        })
        .await;
    }

    #[tokio::test]
    async fn a_file_written_slowly_is_read_once_closed() {
        use std::io::Write;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("policies");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("a.yaml"), "old").expect("write");
        let mut w = DirWatch::new(&dir);
        arm(&mut w).await;
        let path = dir.join("a.yaml");
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::File::create(&path).expect("truncate");
            f.write_all(b"first half, ").expect("write");
            f.flush().expect("flush");
            std::thread::sleep(Duration::from_millis(200));
            f.write_all(b"second half").expect("write");
        });
        assert!(woken(&mut w).await);
        assert_eq!(
            std::fs::read_to_string(dir.join("a.yaml")).expect("read"),
            "first half, second half",
            "woken only once the writer closed the file"
        );
        writer.join().expect("writer");
    }
}
