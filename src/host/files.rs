//! Files the agent publishes on the host for others to read (the reporter's `agent-info.json` in
//! the state directory), behind the small [`StateFiles`] trait: [`DiskFiles`] writes them on the
//! host's filesystem, atomically and on the blocking pool; [`FakeStateFiles`] keeps them in
//! memory for tests of the actors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

/// Where the agent publishes whole files.
#[async_trait]
pub trait StateFiles: Send + Sync {
    /// Replaces the file at `path` with `body` in one step: a reader sees the old content or the
    /// new, never a part of it. Creates the file's directory when it is missing.
    async fn replace(&self, path: &Path, body: Vec<u8>) -> std::io::Result<()>;
}

/// The host's filesystem. Each write runs on the blocking pool, so the caller's thread (an
/// actor's, which also answers health and status) never waits on the disk; the writes run one at
/// a time, since two at once to one path would share its temporary file (a write left running by
/// an actor that was restarted meanwhile, say), and in the order they were asked for (the turn is
/// taken before the write leaves for the pool, from a fair lock), so an older snapshot never
/// lands after a newer one.
#[derive(Default)]
pub struct DiskFiles {
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
}

#[async_trait]
impl StateFiles for DiskFiles {
    async fn replace(&self, path: &Path, body: Vec<u8>) -> std::io::Result<()> {
        let path = path.to_path_buf();
        let turn = self.one_at_a_time.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            write_atomically(&path, &body)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// `body` to `<path>.tmp`, then renamed over `path` (no fsync: the file is a snapshot that the
/// next report replaces anyway).
fn write_atomically(path: &Path, body: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = temporary_for(path);
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

/// `agent-info.json` → `agent-info.json.tmp`, beside it (a rename does not cross filesystems).
fn temporary_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Files kept in memory, by path (for tests of the actors that publish them).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
pub struct FakeStateFiles {
    files: std::sync::Mutex<std::collections::BTreeMap<PathBuf, Vec<u8>>>,
}

#[cfg(any(test, feature = "test-util"))]
impl FakeStateFiles {
    /// The content last written at `path`, if any.
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        self.files.lock().ok()?.get(path).cloned()
    }
}

#[cfg(any(test, feature = "test-util"))]
#[async_trait]
impl StateFiles for FakeStateFiles {
    async fn replace(&self, path: &Path, body: Vec<u8>) -> std::io::Result<()> {
        let mut files = self
            .files
            .lock()
            .map_err(|_| std::io::Error::other("fake state files poisoned"))?;
        files.insert(path.to_path_buf(), body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_replace_creates_the_directory_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/agent-info.json");
        let files = DiskFiles::default();
        files.replace(&path, b"{\"a\":1}".to_vec()).await.unwrap();
        files.replace(&path, b"{\"a\":2}".to_vec()).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":2}");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("agent-info.json")]);
        assert_eq!(temporary_for(&path), dir.path().join("state/agent-info.json.tmp"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_land_in_the_order_they_were_asked_for() {
        // As when a restarted reporter writes while its predecessor's write still waits: every
        // write is asked for before any runs, and the last one asked for must be what stays.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-info.json");
        let files = DiskFiles::default();
        for round in 0..20 {
            let writes = (0..8).map(|i| files.replace(&path, format!("{round}-{i}").into_bytes()));
            for result in futures::future::join_all(writes).await {
                result.unwrap();
            }
            assert_eq!(std::fs::read(&path).unwrap(), format!("{round}-7").into_bytes());
        }
    }

    #[tokio::test]
    async fn the_fake_keeps_the_last_content_of_each_path() {
        let files = FakeStateFiles::default();
        assert_eq!(files.read(Path::new("/x")), None);
        files.replace(Path::new("/x"), b"1".to_vec()).await.unwrap();
        files.replace(Path::new("/x"), b"2".to_vec()).await.unwrap();
        assert_eq!(files.read(Path::new("/x")), Some(b"2".to_vec()));
    }
}
