//! Test support (compiled for tests with the `lab` feature only: it needs root): a fresh,
//! uniquely named network namespace per test, deleted on drop even when the test fails, and a
//! way to run async test code inside it.
//!
//! How a test gets "into" the namespace: [`NetNs::run`] starts a dedicated thread that enters
//! the namespace with `setns(2)` (nix's safe wrapper) and then builds its own tokio runtime,
//! so every netlink socket created by the test body belongs to the namespace. Only that thread
//! changes namespace; the test harness's threads and the host's own namespace are never
//! touched. (Re-executing the test binary under `ip netns exec` would also work, but needs a
//! second process, an environment flag and output plumbing; a thread is simpler and lets
//! panics and return values flow back directly.) Shell-side setup and oracles use
//! `ip -n <ns> …`.

use std::fs::File;
use std::future::Future;
use std::process::Command;
use std::time::Duration;

use nix::sched::CloneFlags;

/// A network namespace `hn-<random>` that is deleted on drop.
pub(crate) struct NetNs {
    name: String,
}

/// Fails a test that needs root (a namespace, a private OVS) unless its name says so. This
/// harness is compiled only with the `lab` feature, so such a test must be gated too; the name
/// is what `make test-lab` selects (`cargo test --features lab --lib -- lab_`) and what
/// tests/gating.rs checks against the gate. (libtest names each test's thread after its path.)
pub(crate) fn assert_lab_test() {
    if let Some(name) = std::thread::current().name() {
        assert!(
            !name.contains("::") || name.contains("lab_"),
            "{name} needs root: put `lab_` in its name (and gate it with #[cfg(feature = \"lab\")]) \
             so that `make test-lab` runs it"
        );
    }
}

impl NetNs {
    /// Creates the namespace (`ip netns add`). Panics if that fails: the test cannot run.
    pub(crate) fn new() -> Self {
        assert_lab_test();
        let name = format!("hn-{:08x}", rand::random::<u32>());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("run ip netns add");
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        NetNs { name }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A `Send + Clone` handle for running `ip -n <ns> …` from inside a test body.
    pub(crate) fn cmd(&self) -> NsCmd {
        NsCmd {
            name: self.name.clone(),
        }
    }

    /// Runs `ip -n <ns> <args>` and panics with its stderr if it fails.
    pub(crate) fn ip(&self, args: &str) -> String {
        self.cmd().ip(args)
    }

    /// Runs `body` on a new thread inside the namespace, on a fresh current-thread tokio runtime
    /// (time and I/O enabled) driven through a `LocalSet`, like an actix System. The body is
    /// bounded by `limit`; a timeout or a panic in the body fails the calling test.
    pub(crate) fn run<F, Fut, T>(&self, limit: Duration, body: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let path = format!("/run/netns/{}", self.name);
        let thread = std::thread::Builder::new()
            .name(format!("netns-{}", self.name))
            .spawn(move || {
                let ns = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    tokio::time::timeout(limit, body())
                        .await
                        .unwrap_or_else(|_| panic!("test body did not finish within {limit:?}"))
                })
            })
            .expect("spawn the namespace thread");
        match thread.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Runs the synchronous `body` on a new thread inside the namespace (for tests that manage
    /// their own runtimes). A panic in the body fails the calling test.
    pub(crate) fn run_sync<F, T>(&self, body: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = format!("/run/netns/{}", self.name);
        let thread = std::thread::Builder::new()
            .name(format!("netns-sync-{}", self.name))
            .spawn(move || {
                let ns = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
                body()
            })
            .expect("spawn the namespace thread");
        match thread.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Like [`run`](Self::run) but inside an actix `System` (what the agent runs in).
    pub(crate) fn run_actix<F, Fut, T>(&self, limit: Duration, body: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let path = format!("/run/netns/{}", self.name);
        let thread = std::thread::Builder::new()
            .name(format!("netns-actix-{}", self.name))
            .spawn(move || {
                let ns = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
                actix_rt::System::new().block_on(async move {
                    tokio::time::timeout(limit, body())
                        .await
                        .unwrap_or_else(|_| panic!("test body did not finish within {limit:?}"))
                })
            })
            .expect("spawn the namespace thread");
        match thread.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Runs `ip -n <ns> …` commands (setup and oracles); does not own the namespace.
#[derive(Clone, Debug)]
pub(crate) struct NsCmd {
    name: String,
}

impl NsCmd {
    /// Runs `ip -n <ns> <args>`; Ok(stdout) or Err(stderr).
    pub(crate) fn try_ip(&self, args: &str) -> Result<String, String> {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .args(args.split_whitespace())
            .output()
            .map_err(|e| format!("run ip: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "ip -n {} {args}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Runs `ip -n <ns> <args>` and panics with its stderr if it fails.
    pub(crate) fn ip(&self, args: &str) -> String {
        self.try_ip(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `ip -n <ns>` once per line of `script` (blank lines and `#` comments skipped).
    pub(crate) fn ip_script(&self, script: &str) {
        for line in script.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                self.ip(line);
            }
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        match Command::new("ip").args(["netns", "delete", &self.name]).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "warning: ip netns delete {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("warning: ip netns delete {}: {e}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_namespace_is_isolated_and_deleted_on_drop() {
        let name;
        {
            let ns = NetNs::new();
            name = ns.name().to_string();
            ns.ip("link add hn-probe type veth peer name hn-probe-p");
            // The link exists in the namespace and not on the host.
            assert!(ns.ip("link show hn-probe").contains("hn-probe"));
            let host = Command::new("ip")
                .args(["link", "show", "hn-probe"])
                .output()
                .expect("ip");
            assert!(!host.status.success());
            // The thread really runs in the namespace.
            let links = ns.run(Duration::from_secs(20), || async {
                std::fs::read_to_string("/proc/thread-self/net/dev").expect("read net/dev")
            });
            assert!(links.contains("hn-probe"), "{links}");
        }
        let list = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns list");
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&name));
    }

    #[test]
    fn lab_panics_in_the_body_fail_the_test_and_still_clean_up() {
        let ns = NetNs::new();
        let name = ns.name().to_string();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.run(Duration::from_secs(20), || async { panic!("boom") })
        }));
        assert!(result.is_err());
        drop(ns);
        assert!(!std::path::Path::new(&format!("/run/netns/{name}")).exists());
    }
}
