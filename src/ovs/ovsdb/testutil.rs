//! Test-only: a private Open vSwitch (ovsdb-server + ovs-vswitchd, userspace datapath) in a
//! temp dir, with ovs-vswitchd inside its own network namespace so internal ports (tap devices)
//! never touch the host. [`PrivateOvs`] stops everything and removes the namespace on drop, even
//! when the test fails. Needs root and the OVS binaries.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A running private OVS.
pub struct PrivateOvs {
    dir: tempfile::TempDir,
    /// Network namespace ovs-vswitchd runs in.
    pub netns: String,
    netns_created: bool,
}

/// Runs a command, returning trimmed stdout or an error with stderr.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl PrivateOvs {
    /// Creates the database and starts both daemons.
    pub fn start() -> Result<Self, String> {
        crate::host::testns::assert_lab_test();
        let dir = tempfile::Builder::new()
            .prefix("ovsdb-test-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let netns = format!(
            "ovsdbt-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let mut ovs = Self {
            dir,
            netns,
            netns_created: false,
        };
        run(Command::new("ip").args(["netns", "add", &ovs.netns]))?;
        ovs.netns_created = true;
        run(Command::new("ip").args(["netns", "exec", &ovs.netns, "ip", "link", "set", "lo", "up"]))?;
        let db = ovs.path("conf.db");
        run(Command::new("ovsdb-tool").arg("create").arg(&db).arg(SCHEMA))?;
        ovs.start_ovsdb()?;
        run(Command::new("ovs-vsctl")
            .arg(ovs.db_arg())
            .args(["--no-wait", "init"]))?;
        let d = ovs.dir.path().display().to_string();
        run(Command::new("ip")
            .args(["netns", "exec", &ovs.netns, "ovs-vswitchd"])
            .arg(format!("unix:{d}/db.sock"))
            .arg(format!("--pidfile={d}/ovs-vswitchd.pid"))
            .arg(format!("--unixctl={d}/ovs-vswitchd.ctl"))
            .arg(format!("--log-file={d}/ovs-vswitchd.log"))
            .arg("--detach")
            .env("OVS_RUNDIR", &d))?;
        Ok(ovs)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The OVSDB socket.
    pub fn db_sock(&self) -> PathBuf {
        self.path("db.sock")
    }

    fn db_arg(&self) -> String {
        format!("--db=unix:{}", self.db_sock().display())
    }

    /// (Re)starts ovsdb-server on the same database file.
    pub fn start_ovsdb(&self) -> Result<(), String> {
        let d = self.dir.path().display().to_string();
        run(Command::new("ovsdb-server")
            .arg(format!("--remote=punix:{d}/db.sock"))
            .arg(format!("--pidfile={d}/ovsdb-server.pid"))
            .arg(format!("--unixctl={d}/ovsdb-server.ctl"))
            .arg(format!("--log-file={d}/ovsdb-server.log"))
            .arg("--detach")
            .arg(format!("{d}/conf.db"))
            .env("OVS_RUNDIR", &d))
        .map(drop)
    }

    /// Stops ovsdb-server (the database file stays).
    pub fn stop_ovsdb(&self) -> Result<(), String> {
        stop_by_pidfile(&self.path("ovsdb-server.pid"))
    }

    /// Stops ovs-vswitchd.
    pub fn stop_vswitchd(&self) -> Result<(), String> {
        stop_by_pidfile(&self.path("ovs-vswitchd.pid"))
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) ovsdb-server: a hung server.
    pub fn freeze_ovsdb(&self, frozen: bool) -> Result<(), String> {
        let pid = std::fs::read_to_string(self.path("ovsdb-server.pid")).map_err(|e| e.to_string())?;
        let sig = if frozen { "-STOP" } else { "-CONT" };
        run(Command::new("kill").args([sig, pid.trim()])).map(drop)
    }

    /// `ovs-vsctl --db=unix:... --timeout=10 <args>`.
    pub fn vsctl(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new("ovs-vsctl")
            .arg(self.db_arg())
            .arg("--timeout=10")
            .args(args))
    }

    /// `ovs-ofctl <args...> unix:<dir>/<bridge>.mgmt [rest...]`.
    pub fn ofctl(&self, bridge: &str, args: &[&str], rest: &[&str]) -> Result<String, String> {
        let mgmt = format!("unix:{}", self.path(&format!("{bridge}.mgmt")).display());
        run(Command::new("ovs-ofctl").args(args).arg(mgmt).args(rest))
    }

    /// Runs a command inside the namespace.
    pub fn netns_exec(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new("ip").args(["netns", "exec", &self.netns]).args(args))
    }

    /// The daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.path(n)).unwrap_or_default();
        format!(
            "--- ovsdb-server.log\n{}--- ovs-vswitchd.log\n{}",
            read("ovsdb-server.log"),
            read("ovs-vswitchd.log")
        )
    }
}

/// SIGTERM the process named in `pidfile`, wait (bounded) for it to go, SIGKILL if it lingers.
fn stop_by_pidfile(pidfile: &Path) -> Result<(), String> {
    let Ok(pid) = std::fs::read_to_string(pidfile) else {
        return Ok(()); // not running
    };
    let pid = pid.trim().to_string();
    if pid.is_empty() {
        return Ok(());
    }
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    // A frozen process would not act on SIGTERM.
    let _ = Command::new("kill").args(["-CONT", &pid]).output();
    let _ = Command::new("kill").args(["-TERM", &pid]).output();
    let deadline = Instant::now() + Duration::from_secs(5);
    while proc_dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if proc_dir.exists() {
        let _ = Command::new("kill").args(["-KILL", &pid]).output();
        let deadline = Instant::now() + Duration::from_secs(5);
        while proc_dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = std::fs::remove_file(pidfile);
    if proc_dir.exists() {
        return Err(format!("process {pid} did not exit"));
    }
    Ok(())
}

impl Drop for PrivateOvs {
    fn drop(&mut self) {
        let _ = stop_by_pidfile(&self.path("ovs-vswitchd.pid"));
        let _ = stop_by_pidfile(&self.path("ovsdb-server.pid"));
        if self.netns_created {
            let _ = Command::new("ip").args(["netns", "del", &self.netns]).output();
        }
    }
}
