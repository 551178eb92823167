//! Records of attached interfaces, kept as one JSON file per interface under
//! `<stateDir>/interfaces/`. A record is written before the host is touched, holds everything
//! needed to put the NIC back exactly (MAC, MTU, addresses, routes), and says which phase the
//! interface is in, so a start after a crash can finish or roll back what was under way.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::attachment::EntityRef;
use crate::host::{Address, Route};

/// Where an interface is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// The record is saved; the host is being changed.
    Attaching,
    Attached,
    /// Being restored.
    Detaching,
}

/// The step an attach or detach is at; written before the step starts (a journal), so a start
/// after a crash knows where it stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// The record was just written; nothing changed yet.
    #[default]
    Saved,
    // Attach.
    Rename,
    UplinkPort,
    InternalPort,
    ClearSource,
    AddAddresses,
    AddRoutes,
    // Detach.
    DeletePorts,
    RenameBack,
    RestoreLink,
    RestoreAddresses,
    RestoreRoutes,
    /// The phase finished.
    Done,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Saved => "saved",
            Step::Rename => "rename",
            Step::UplinkPort => "uplink-port",
            Step::InternalPort => "internal-port",
            Step::ClearSource => "clear-source",
            Step::AddAddresses => "add-addresses",
            Step::AddRoutes => "add-routes",
            Step::DeletePorts => "delete-ports",
            Step::RenameBack => "rename-back",
            Step::RestoreLink => "restore-link",
            Step::RestoreAddresses => "restore-addresses",
            Step::RestoreRoutes => "restore-routes",
            Step::Done => "done",
        }
    }
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Attaching => "attaching",
            Phase::Attached => "attached",
            Phase::Detaching => "detaching",
        }
    }
}

/// The saved state of one interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceRecord {
    /// The NIC's original name (and the internal port's name).
    pub name: String,
    pub uplink_name: String,
    pub entity: EntityRefRecord,
    pub ips: Vec<IpAddr>,
    pub mac: String,
    pub mtu: u32,
    /// Whether the NIC was promiscuous (OVS makes the uplink promiscuous; detach puts this back).
    #[serde(default)]
    pub promisc: bool,
    /// Addresses the NIC had (link-local excluded: the kernel makes those).
    pub addresses: Vec<Address>,
    /// Routes through the NIC.
    pub routes: Vec<Route>,
    pub phase: Phase,
    /// The step under way within `phase`.
    #[serde(default)]
    pub step: Step,
}

/// Serializable twin of [`EntityRef`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityRefRecord {
    pub namespace: String,
    pub name: String,
}

impl From<&EntityRef> for EntityRefRecord {
    fn from(e: &EntityRef) -> Self {
        EntityRefRecord {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
        }
    }
}

impl From<&EntityRefRecord> for EntityRef {
    fn from(e: &EntityRefRecord) -> Self {
        EntityRef {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("state file {path} is corrupt: {source}")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl StoreError {
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        crate::error_kind::ErrorKind::StateFile
    }
}

/// The directory of interface records.
#[derive(Clone, Debug)]
pub struct RecordStore {
    dir: PathBuf,
    health: Arc<Mutex<WriteHealth>>,
}

/// How writing the records has been going (shared by the clones of a store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteHealth {
    /// Writes (saves and removals) that failed, since the start.
    pub failures: u64,
    /// The last write's error, cleared by the next record (or probe) written successfully.
    pub last_error: Option<String>,
}

impl RecordStore {
    pub fn new(state_dir: &Path) -> Self {
        RecordStore {
            dir: state_dir.join("interfaces"),
            health: Arc::default(),
        }
    }

    /// How writing has been going (for the status, `/readyz` and the metric).
    pub fn write_health(&self) -> WriteHealth {
        self.health.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// After a failed write: whether the directory takes writes again (a small file written,
    /// synced and removed), which clears the error when it does.
    pub fn probe_after_failure(&self) {
        if self.write_health().last_error.is_none() {
            return;
        }
        let path = self.dir.join(".write-probe");
        let probed = std::fs::File::create(&path)
            .and_then(|mut f| {
                use std::io::Write;
                f.write_all(b"probe")?;
                f.sync_all()
            })
            .and_then(|()| std::fs::remove_file(&path));
        match probed {
            // Not counted again: the failure was counted when a record could not be written.
            Err(_) => {
                let _ = std::fs::remove_file(&path);
            }
            Ok(()) => {
                let _ = self.note(Ok(()));
            }
        }
    }

    fn note<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Ok(mut h) = self.health.lock() {
            match &result {
                Ok(_) => h.last_error = None,
                Err(e) => {
                    h.failures += 1;
                    h.last_error = Some(e.to_string());
                }
            }
        }
        result
    }

    /// The record file of interface `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Writes a record atomically (temp file, fsync, rename).
    pub fn save(&self, record: &InterfaceRecord) -> Result<(), StoreError> {
        self.note(self.write(record))
    }

    fn write(&self, record: &InterfaceRecord) -> Result<(), StoreError> {
        let path = self.path(&record.name);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let tmp = path.with_extension("json.tmp");
        let body = serde_json::to_vec_pretty(record).map_err(|e| io(std::io::Error::other(e)))?;
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            use std::io::Write;
            f.write_all(&body)?;
            f.sync_all()
        });
        if let Err(e) = written {
            // A full or broken filesystem must not keep the partial file either.
            let _ = std::fs::remove_file(&tmp);
            return Err(io(e));
        }
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// [`RecordStore::save`] on the blocking pool: the fsync never holds the actor thread, and
    /// the caller still resumes only once the record is on disk (the journal's order holds).
    pub async fn save_off_thread(&self, record: &InterfaceRecord) -> Result<(), StoreError> {
        let (store, owned) = (self.clone(), record.clone());
        tokio::task::spawn_blocking(move || store.save(&owned))
            .await
            .unwrap_or_else(|e| {
                self.note(Err(StoreError::Io {
                    path: self.path(&record.name),
                    source: std::io::Error::other(format!("the record writer failed: {e}")),
                }))
            })
    }

    /// [`RecordStore::remove`] on the blocking pool.
    pub async fn remove_off_thread(&self, name: &str) -> Result<(), StoreError> {
        let (store, owned) = (self.clone(), name.to_string());
        tokio::task::spawn_blocking(move || store.remove(&owned))
            .await
            .unwrap_or_else(|e| {
                self.note(Err(StoreError::Io {
                    path: self.path(name),
                    source: std::io::Error::other(format!("the record writer failed: {e}")),
                }))
            })
    }

    pub fn remove(&self, name: &str) -> Result<(), StoreError> {
        let path = self.path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            // Only a failure counts: a removal works on a full filesystem, so its success says
            // nothing about whether records can be written again.
            Err(source) => self.note(Err(StoreError::Io { path, source })),
        }
    }

    /// Every record; unreadable files are returned as errors beside the good ones.
    pub fn load_all(&self) -> (BTreeMap<String, InterfaceRecord>, Vec<StoreError>) {
        let mut records = BTreeMap::new();
        let mut errors = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (records, errors),
            Err(source) => {
                errors.push(StoreError::Io {
                    path: self.dir.clone(),
                    source,
                });
                return (records, errors);
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            match std::fs::read(&path) {
                Ok(bytes) => match serde_json::from_slice::<InterfaceRecord>(&bytes) {
                    Ok(r) => {
                        records.insert(r.name.clone(), r);
                    }
                    Err(source) => errors.push(StoreError::Corrupt { path, source }),
                },
                Err(source) => errors.push(StoreError::Io { path, source }),
            }
        }
        (records, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_remove() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::new(dir.path());
        let record = InterfaceRecord {
            name: "eth0".into(),
            uplink_name: "eth0~".into(),
            entity: EntityRefRecord {
                namespace: "ns".into(),
                name: "vm1-3e616".into(),
            },
            ips: vec!["10.0.0.2".parse().expect("ip")],
            mac: "02:00:00:00:00:01".into(),
            mtu: 1400,
            promisc: false,
            addresses: vec![],
            routes: vec![],
            phase: Phase::Attaching,
            step: Step::Saved,
        };
        store.save(&record).expect("save");
        let (all, errors) = store.load_all();
        assert!(errors.is_empty());
        assert_eq!(all.get("eth0"), Some(&record));
        std::fs::write(dir.path().join("interfaces/bad.json"), b"{").expect("write");
        let (all, errors) = store.load_all();
        assert_eq!(all.len(), 1);
        assert_eq!(errors.len(), 1);
        store.remove("eth0").expect("remove");
        store.remove("eth0").expect("remove twice");
        assert!(store.load_all().0.is_empty());
    }

    #[test]
    fn write_failures_are_counted_and_cleared_once_writes_work_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RecordStore::new(dir.path());
        let record = InterfaceRecord {
            name: "eth0".into(),
            uplink_name: "eth0~".into(),
            entity: EntityRefRecord {
                namespace: "ns".into(),
                name: "e".into(),
            },
            ips: vec![],
            mac: "02:00:00:00:00:01".into(),
            mtu: 1400,
            promisc: false,
            addresses: vec![],
            routes: vec![],
            phase: Phase::Attaching,
            step: Step::Saved,
        };
        // `interfaces` is a file: nothing can be written under it.
        std::fs::write(dir.path().join("interfaces"), b"").expect("write");
        assert!(store.save(&record).is_err());
        let health = store.write_health();
        assert_eq!(health.failures, 1);
        assert!(
            health
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("eth0.json")),
            "{health:?}"
        );
        store.probe_after_failure();
        assert_eq!(
            store.write_health().failures,
            1,
            "a failing probe is not counted again"
        );
        assert!(store.write_health().last_error.is_some());
        std::fs::remove_file(dir.path().join("interfaces")).expect("rm");
        std::fs::create_dir(dir.path().join("interfaces")).expect("mkdir");
        store.probe_after_failure();
        assert_eq!(store.write_health().last_error, None);
        assert!(!dir.path().join("interfaces/.write-probe").exists());
    }
}
