//! The host as the network-manager checks see it under a root directory (`/` in production, a
//! temporary directory in tests): files, directory listings, the processes in `<root>/proc`, and
//! what sysfs says of a NIC the agent attaches (its driver and MAC, under either name).

use std::fs;
use std::path::{Path, PathBuf};

use super::{ManagerFinding, UPLINK_SUFFIX};

pub(super) struct Host {
    pub(super) root: PathBuf,
    /// `None` when `<root>/proc` holds no process (not mounted, or a test root without one).
    pub(super) procs: Option<Vec<Proc>>,
}

#[derive(Debug, Clone)]
pub(super) struct Proc {
    pub(super) pid: u32,
    pub(super) comm: String,
    pub(super) args: Vec<String>,
}

/// A NIC the agent attaches, with what sysfs tells about it.
#[derive(Debug, Clone)]
pub(super) struct Nic {
    /// The NIC's own name (`eth0`), also the name of the OVS internal port.
    pub(super) name: String,
    /// The name it has while attached (`eth0~`).
    pub(super) renamed: String,
    pub(super) driver: Option<String>,
    pub(super) mac: Option<String>,
}

impl Host {
    pub(super) fn new(root: &Path) -> Self {
        let mut host = Host {
            root: root.to_path_buf(),
            procs: None,
        };
        host.procs = host.scan_procs();
        host
    }

    pub(super) fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    pub(super) fn read(&self, abs: &str) -> Option<String> {
        fs::read_to_string(self.path(abs)).ok()
    }

    pub(super) fn exists(&self, abs: &str) -> bool {
        fs::symlink_metadata(self.path(abs)).is_ok()
    }

    pub(super) fn is_dir(&self, abs: &str) -> bool {
        self.path(abs).is_dir()
    }

    /// Regular files (or symlinks) of a directory, sorted by name.
    pub(super) fn list(&self, dir: &str) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.path(dir)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().map(|t| !t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    pub(super) fn scan_procs(&self) -> Option<Vec<Proc>> {
        let rd = fs::read_dir(self.path("/proc")).ok()?;
        let mut procs = Vec::new();
        for e in rd.filter_map(Result::ok) {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(comm) = fs::read_to_string(e.path().join("comm")) else {
                continue;
            };
            let args = fs::read(e.path().join("cmdline"))
                .map(|b| {
                    b.split(|c| *c == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect()
                })
                .unwrap_or_default();
            procs.push(Proc {
                pid,
                comm: comm.trim_end_matches('\n').to_string(),
                args,
            });
        }
        if procs.is_empty() {
            return None;
        }
        procs.sort_by_key(|p| p.pid);
        Some(procs)
    }

    /// Processes whose `comm` is `comm` (the kernel keeps 15 bytes of the name).
    pub(super) fn procs_named(&self, comm: &str) -> Vec<&Proc> {
        let want: String = comm.chars().take(15).collect();
        self.procs.iter().flatten().filter(|p| p.comm == want).collect()
    }

    pub(super) fn nic(&self, uplink: &str) -> Nic {
        let name = uplink.trim_end_matches(UPLINK_SUFFIX).to_string();
        let renamed = format!("{name}{UPLINK_SUFFIX}");
        // Before the attach the NIC has its own name; while attached it is the renamed one
        // (and the own name belongs to the OVS internal port).
        let mut driver = None;
        let mut mac = None;
        for candidate in [&renamed, &name] {
            let dir = format!("/sys/class/net/{candidate}");
            if !self.exists(&dir) {
                continue;
            }
            driver = fs::read_link(self.path(&format!("{dir}/device/driver")))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            mac = self
                .read(&format!("{dir}/address"))
                .map(|m| m.trim().to_ascii_lowercase())
                .filter(|m| !m.is_empty());
            break;
        }
        Nic {
            name,
            renamed,
            driver,
            mac,
        }
    }
}

/// Sets whether a daemon runs, with the evidence: its processes when /proc can be read, else
/// the presence of `state_file` (a pid or state file it keeps while running).
pub(super) fn mark_running(f: &mut ManagerFinding, host: &Host, procs: &[&Proc], state_file: &str) {
    f.evidence = evidence_of_procs(procs);
    if host.procs.is_some() {
        f.active = !procs.is_empty();
    } else if host.exists(state_file) {
        f.active = true;
        f.evidence.push(format!("{state_file} exists"));
    }
}

pub(super) fn evidence_of_procs(procs: &[&Proc]) -> Vec<String> {
    procs
        .iter()
        .map(|p| {
            if p.args.is_empty() {
                format!("process {} ({})", p.pid, p.comm)
            } else {
                format!("process {} ({})", p.pid, p.args.join(" "))
            }
        })
        .collect()
}
