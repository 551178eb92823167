//! The state-dir lock that tells whether an agent runs: `<stateDir>/agent.lock`, held with
//! `flock` for the whole life of `run` (and of `detach-all`). The kernel drops it when the holder
//! dies, so a stale file never blocks anything; the pid written inside only serves the error
//! message. A process-list check would not do: agents of other network namespaces (labs,
//! containers) would count, and it cannot tell which state dir an agent uses.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// File name of the agent lock inside `stateDir`.
pub const LOCK_FILE: &str = "agent.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{} is held by {holder}: {what} is running with state dir {}", path.display(), state_dir.display())]
    Held {
        path: PathBuf,
        state_dir: PathBuf,
        /// `pid N` when the file says so.
        holder: String,
        /// What the holder is doing (`an antrea-vm-agent`, `antrea-vm-agent detach-all`).
        what: String,
    },
    #[error("agent lock {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// An exclusive hold on `<stateDir>/agent.lock`; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct AgentLock {
    _file: File,
    path: PathBuf,
}

impl AgentLock {
    /// Takes the lock for `command` (`run`, `detach-all`), creating the state dir if needed.
    pub fn acquire(state_dir: &Path, command: &str) -> Result<AgentLock, LockError> {
        let path = state_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(state_dir).map_err(io)?;
        // Never truncate on open: the holder's pid is in there until we own the lock.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let mut words = text.split_whitespace();
                let holder = match words.next().and_then(|p| p.parse::<u32>().ok()) {
                    Some(pid) => format!("pid {pid}"),
                    None => "another process".to_string(),
                };
                let what = match words.next() {
                    Some("detach-all") => "antrea-vm-agent detach-all".to_string(),
                    _ => "an antrea-vm-agent".to_string(),
                };
                return Err(LockError::Held {
                    path,
                    state_dir: state_dir.to_path_buf(),
                    holder,
                    what,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{} {command}", std::process::id()).map_err(io)?;
        Ok(AgentLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_exclusive_names_its_holder_and_survives_stale_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        // A stale file from a dead holder (garbage inside) does not block.
        std::fs::create_dir_all(&state).expect("mkdir");
        std::fs::write(state.join(LOCK_FILE), "not a pid").expect("write");
        let held = AgentLock::acquire(&state, "run").expect("first lock");
        // flock is per open file: a second open in this process conflicts like another process.
        match AgentLock::acquire(&state, "detach-all") {
            Err(LockError::Held { holder, what, .. }) => {
                assert_eq!(holder, format!("pid {}", std::process::id()));
                assert_eq!(what, "an antrea-vm-agent");
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        let again = AgentLock::acquire(&state, "detach-all").expect("lock after release");
        let text = std::fs::read_to_string(again.path()).expect("read");
        assert_eq!(text, format!("{} detach-all\n", std::process::id()));
    }
}
