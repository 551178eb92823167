//! Small process helpers for the lab: bounded waits, a PATH that has the sbin directories, and
//! readable failures.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Output},
    thread,
    time::{Duration, Instant},
};

/// Polls `cond` every 100 ms until it returns true; panics naming `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        if cond() {
            return;
        }
        if start.elapsed() >= timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Like [`wait_until`] but returns false on timeout instead of panicking.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for a child to exit, at most `timeout`.
pub(crate) fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if start.elapsed() >= timeout {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// PATH for every command the lab runs: the caller's PATH plus the sbin directories, where `ip`,
/// `nft` and the OVS daemons live (cargo's environment does not always include them).
pub(crate) fn lab_path() -> String {
    let mut path = std::env::var("PATH").unwrap_or_default();
    for dir in [
        "/usr/local/sbin",
        "/usr/sbin",
        "/sbin",
        "/usr/local/bin",
        "/usr/bin",
        "/bin",
    ] {
        if !path.split(':').any(|p| p == dir) {
            if !path.is_empty() {
                path.push(':');
            }
            path.push_str(dir);
        }
    }
    path
}

/// Finds an executable in [`lab_path`].
pub(crate) fn find_tool(name: &str) -> Option<PathBuf> {
    lab_path()
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A command with the lab PATH.
pub(crate) fn cmd(program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("PATH", lab_path());
    c
}

/// Runs a command to completion (callers bound it, e.g. with `timeout`) and returns its output;
/// panics only if it cannot be started.
pub(crate) fn run(mut c: Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"))
}

/// Sends a signal with `kill(1)`; returns whether it was delivered.
pub(crate) fn signal(pid: u32, sig: &str) -> bool {
    cmd("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether a process exists and is not a zombie (daemons we do not parent may stay zombies when
/// PID 1 does not reap).
pub(crate) fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// Kills a process we do not parent: SIGTERM (or the given signal), then SIGKILL if it is still
/// there after `grace`. Waits (bounded) until it is gone.
pub(crate) fn kill_process(pid: u32, first: &str, grace: Duration) {
    if !process_alive(pid) {
        return;
    }
    signal(pid, first);
    if !poll_until(grace, || !process_alive(pid)) {
        signal(pid, "KILL");
        poll_until(Duration::from_secs(5), || !process_alive(pid));
    }
}

/// Readable access to a command's result.
pub trait CommandOutputExt {
    /// stdout as text.
    fn stdout_text(&self) -> String;
    /// stderr as text.
    fn stderr_text(&self) -> String;
    /// A summary for failure messages: status, stdout and stderr.
    fn describe(&self) -> String;
}

impl CommandOutputExt for Output {
    fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    fn describe(&self) -> String {
        format!(
            "{}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.status,
            self.stdout_text(),
            self.stderr_text()
        )
    }
}

/// The last `n` lines of a text.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `f` on a new thread inside network namespace `ns` (panics in that thread if it cannot
/// enter it).
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let handle = std::fs::File::open(&path).expect("open the netns");
        nix::sched::setns(handle, nix::sched::CloneFlags::CLONE_NEWNET).expect("enter the netns");
        f()
    })
}
