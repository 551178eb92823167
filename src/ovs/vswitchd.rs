//! ovs-vswitchd's control socket (unixctl: JSON-RPC over `<ovsRunDir>/ovs-vswitchd.<pid>.ctl`)
//! and the two things the agent asks of it about the datapath flow cache (megaflows): purge it
//! all after a repair (the flow installer), and evict the cached flows that can carry a packet
//! to given addresses before a held DNS answer is released (the FQDN controller). Both sit
//! behind the small [`DatapathCache`] trait with a fake beside it.
//!
//! Why eviction is needed: OVS revalidates its cached datapath flows *asynchronously* after a
//! flow-table change. A connection to a blocked address can leave a drop megaflow whose
//! destination is wildcarded (no flow matched any address yet), and until a revalidator thread
//! gets to it, that megaflow keeps dropping packets to an address the new flows allow: the first
//! SYN after a released DNS answer could still be dropped although the bundle was committed.
//! Deleting the cached flows that cover the new addresses makes the next packet go up to the
//! flow tables, which already hold the new flows.
//!
//! It also runs `ofproto/trace` for `antrea-vm-agent trace` ([`Vswitchd::trace`]).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use serde_json::{json, Value};
use tracing::debug;

use crate::ovs::ovsdb::jsonrpc::JsonRpcConnection;

/// How long one control-socket call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long each of an eviction's two rounds (the dumps, the deletions) may take: both fit in
/// the FQDN controller's 500 ms for the whole eviction, so a slow round ends here, closing the
/// connection, rather than leaving its requests queued in ovs-vswitchd when the caller gives up.
const EVICT_CALL_TIMEOUT: Duration = Duration::from_millis(200);
/// How long one `ofproto/trace` may take (`antrea-vm-agent trace`).
const TRACE_TIMEOUT: Duration = Duration::from_secs(2);

/// What went wrong talking to ovs-vswitchd's control socket.
#[derive(Debug, thiserror::Error)]
pub enum VswitchdError {
    #[error("no ovs-vswitchd control socket in {run_dir} (ovs-vswitchd.<pid>.ctl or ovs-vswitchd.ctl)")]
    NoSocket { run_dir: String },
    #[error("ovs-vswitchd control socket {socket}: {method}: {why}")]
    Call {
        socket: String,
        method: String,
        why: String,
    },
    #[error("ovs-vswitchd control socket {socket}: {method}: timed out")]
    Timeout { socket: String, method: String },
    #[error("ovs-vswitchd control socket: {method} answered {answer}, not text")]
    NotText { method: String, answer: String },
}

/// The switch's datapath flow cache, as the flow installer and the FQDN controller need it.
#[async_trait]
pub trait DatapathCache: Send + Sync {
    /// Drops every cached datapath flow (`revalidator/purge`): the next packets take an upcall
    /// each and are decided by the flow tables as they are now.
    async fn purge(&self) -> Result<(), VswitchdError>;
    /// Deletes every cached datapath flow that can match a packet to one of `ips` (whatever its
    /// verdict: the next packet is decided by the flow tables again). Returns how many were
    /// deleted.
    async fn evict_toward(&self, ips: &[IpAddr]) -> Result<usize, VswitchdError>;
}

/// The control socket's path: `ovs-vswitchd.<pid>.ctl` (the pid from `ovs-vswitchd.pid`) or
/// `ovs-vswitchd.ctl` (a daemon started with `--unixctl`), whichever exists.
pub fn control_socket(run_dir: &Path) -> Option<PathBuf> {
    let pid = std::fs::read_to_string(run_dir.join("ovs-vswitchd.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    pid.map(|p| run_dir.join(format!("ovs-vswitchd.{p}.ctl")))
        .into_iter()
        .chain([run_dir.join("ovs-vswitchd.ctl")])
        .find(|p| p.exists())
}

/// ovs-vswitchd's control socket, one connection kept open between calls (re-opened after a
/// failure, so a restarted ovs-vswitchd is found again). Calls may run concurrently: they are
/// pipelined on the one connection, and ovs-vswitchd answers up to ten of them per turn of its
/// main loop.
pub struct Vswitchd {
    run_dir: PathBuf,
    /// `<type>@ovs-<type>`: named, because dpctl refuses to guess when the daemon has both a
    /// kernel and a userspace datapath.
    datapath: String,
    conn: tokio::sync::Mutex<Option<(PathBuf, Arc<JsonRpcConnection>)>>,
}

impl std::fmt::Debug for Vswitchd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vswitchd")
            .field("run_dir", &self.run_dir)
            .field("datapath", &self.datapath)
            .finish()
    }
}

impl Vswitchd {
    /// `datapath_type` is the bridge's (`system` or `netdev`).
    pub fn new(run_dir: PathBuf, datapath_type: &str) -> Self {
        Vswitchd {
            run_dir,
            datapath: format!("{datapath_type}@ovs-{datapath_type}"),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The open connection, or a new one (the socket is looked up on the blocking pool: it
    /// reads the pid file, and the caller may be a thread that answers packets).
    async fn connection(&self) -> Result<(PathBuf, Arc<JsonRpcConnection>), VswitchdError> {
        let mut conn = self.conn.lock().await;
        if let Some((path, c)) = conn.as_ref() {
            if !c.is_closed() {
                return Ok((path.clone(), c.clone()));
            }
        }
        *conn = None;
        let run_dir = self.run_dir.clone();
        let no_socket = || VswitchdError::NoSocket {
            run_dir: self.run_dir.display().to_string(),
        };
        let path = tokio::task::spawn_blocking(move || control_socket(&run_dir))
            .await
            .ok()
            .flatten()
            .ok_or_else(no_socket)?;
        let c = JsonRpcConnection::connect(&path)
            .await
            .map_err(|e| VswitchdError::Call {
                socket: path.display().to_string(),
                method: "connect".into(),
                why: e.to_string(),
            })?;
        let c = Arc::new(c);
        *conn = Some((path.clone(), c.clone()));
        Ok((path, c))
    }

    /// Forgets `broken` (not a connection opened since by another call).
    async fn forget(&self, broken: &Arc<JsonRpcConnection>) {
        let mut conn = self.conn.lock().await;
        if conn.as_ref().is_some_and(|(_, c)| Arc::ptr_eq(c, broken)) {
            *conn = None;
        }
    }

    /// One unixctl command; its text answer.
    pub async fn call(&self, method: &str, args: &[String]) -> Result<String, VswitchdError> {
        self.call_within(method, args, CALL_TIMEOUT).await
    }

    /// `ofproto/trace` with `args` (the bridge, the flow, options): the text OVS answers, or
    /// its error (a flow it cannot parse, an unknown bridge) in [`VswitchdError::Call`].
    pub async fn trace(&self, args: &[String]) -> Result<String, VswitchdError> {
        self.call_within("ofproto/trace", args, TRACE_TIMEOUT).await
    }

    /// One unixctl command answered within `limit`; after a timeout the connection is closed,
    /// which makes ovs-vswitchd drop the requests still queued on it.
    async fn call_within(
        &self,
        method: &str,
        args: &[String],
        limit: Duration,
    ) -> Result<String, VswitchdError> {
        let (socket, c) = self.connection().await?;
        let answer = match tokio::time::timeout(limit, c.call(method, json!(args))).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                // A refused command keeps the connection; a broken one is re-opened next time.
                if c.is_closed() {
                    self.forget(&c).await;
                }
                return Err(VswitchdError::Call {
                    socket: socket.display().to_string(),
                    method: method.to_string(),
                    why: e.to_string(),
                });
            }
            Err(_) => {
                self.forget(&c).await;
                return Err(VswitchdError::Timeout {
                    socket: socket.display().to_string(),
                    method: method.to_string(),
                });
            }
        };
        match answer {
            Value::String(text) => Ok(text),
            Value::Null => Ok(String::new()),
            other => Err(VswitchdError::NotText {
                method: method.to_string(),
                answer: other.to_string(),
            }),
        }
    }
}

/// The datapath-flow filter (dpctl's `filter=` syntax) that selects flows toward `ip`.
fn filter_toward(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("filter=ip,nw_dst={a}"),
        IpAddr::V6(a) => format!("filter=ipv6,ipv6_dst={a}"),
    }
}

/// The `ufid:` of each flow of a `dpctl/dump-flows -m` answer.
fn ufids(dump: &str) -> Vec<&str> {
    dump.lines()
        .filter_map(|line| line.trim_start().split(',').next())
        .filter(|first| first.starts_with("ufid:"))
        .collect()
}

#[async_trait]
impl DatapathCache for Vswitchd {
    async fn purge(&self) -> Result<(), VswitchdError> {
        self.call("revalidator/purge", &[]).await.map(|_| ())
    }

    async fn evict_toward(&self, ips: &[IpAddr]) -> Result<usize, VswitchdError> {
        // The dumps (one per address), then the deletions (one per flow found), each set sent
        // at once: ovs-vswitchd answers a set in one turn of its main loop, and the DNS answer
        // is held meanwhile. No list file: dpctl/del-flows answers success even when it cannot
        // read one, and ovsRunDir need not be writable by the agent.
        let dumps = join_all(ips.iter().map(|ip| {
            let args = ["-m".to_string(), self.datapath.clone(), filter_toward(*ip)];
            async move {
                self.call_within("dpctl/dump-flows", &args, EVICT_CALL_TIMEOUT)
                    .await
            }
        }))
        .await;
        let mut found: BTreeSet<String> = BTreeSet::new();
        for dump in dumps {
            found.extend(ufids(&dump?).into_iter().map(str::to_owned));
        }
        let deletions = join_all(found.iter().map(|ufid| {
            let args = [self.datapath.clone(), ufid.clone()];
            async move {
                self.call_within("dpctl/del-flow", &args, EVICT_CALL_TIMEOUT)
                    .await
            }
        }))
        .await;
        let mut evicted = 0;
        for deletion in deletions {
            match deletion {
                Ok(_) => evicted += 1,
                // A revalidator got to it first.
                Err(VswitchdError::Call { why, .. }) if is_gone(&why) => {}
                Err(e) => return Err(e),
            }
        }
        if evicted > 0 {
            debug!(
                evicted,
                ?ips,
                "evicted cached datapath flows toward new addresses"
            );
        }
        Ok(evicted)
    }
}

/// How dpctl says a flow to delete is not there (a revalidator got to it first).
const GONE: &str = "No such file or directory";

/// Whether a refused `dpctl/del-flow` only found its flow gone already.
fn is_gone(why: &str) -> bool {
    why.contains("deleting flow") && why.contains(GONE)
}

/// A datapath cache that only records what it was asked (for tests of its callers); `on_evict`
/// runs at each eviction, so a test can look at the rest of the world at that moment.
#[cfg(any(test, feature = "test-util"))]
#[derive(Default)]
pub struct FakeDatapathCache {
    calls: std::sync::Mutex<Vec<Vec<IpAddr>>>,
    purges: std::sync::atomic::AtomicUsize,
    #[allow(clippy::type_complexity)]
    on_evict: Option<Box<dyn Fn(&[IpAddr]) + Send + Sync>>,
}

#[cfg(any(test, feature = "test-util"))]
impl FakeDatapathCache {
    pub fn with_hook(on_evict: impl Fn(&[IpAddr]) + Send + Sync + 'static) -> Self {
        FakeDatapathCache {
            on_evict: Some(Box::new(on_evict)),
            ..FakeDatapathCache::default()
        }
    }

    /// The addresses of every eviction, in order.
    pub fn calls(&self) -> Vec<Vec<IpAddr>> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// How many times the whole cache was purged.
    pub fn purges(&self) -> usize {
        self.purges.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(any(test, feature = "test-util"))]
#[async_trait]
impl DatapathCache for FakeDatapathCache {
    async fn purge(&self) -> Result<(), VswitchdError> {
        self.purges.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn evict_toward(&self, ips: &[IpAddr]) -> Result<usize, VswitchdError> {
        if let Some(hook) = &self.on_evict {
            hook(ips);
        }
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(ips.to_vec());
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flows_of_a_dump_are_named_by_their_ufids() {
        let dump = "flow-dump from the main thread:\n\
            ufid:d42c0ced-8bd1-4021-b6dc-d5091e259a1b, skb_priority(0/0),recirc_id(0),in_port(mfa-br),eth_type(0x0800),ipv4(src=10.0.0.1/0.0.0.0,dst=10.0.0.200/0.0.0.0,frag=no), packets:0, bytes:0, used:never, dp:ovs, actions:drop\n\
            flow-dump from pmd on cpu core: 1\n\
            ufid:16e19b98-17b7-4e09-8b50-732f39abd8ad, recirc_id(0x2),ct_state(+new+trk), packets:1, bytes:66, used:0.1s, actions:2\n";
        assert_eq!(
            ufids(dump),
            vec![
                "ufid:d42c0ced-8bd1-4021-b6dc-d5091e259a1b",
                "ufid:16e19b98-17b7-4e09-8b50-732f39abd8ad"
            ]
        );
        assert!(ufids("flow-dump from the main thread:\n").is_empty());
    }

    #[test]
    fn only_deletions_of_flows_still_there_count_as_failed() {
        // The error text of a `dpctl/del-flow` whose flow a revalidator deleted first.
        assert!(is_gone(
            "ovs-vswitchd: deleting flow (No such file or directory)\nPerhaps you need to specify a UFID?\n"
        ));
        assert!(!is_gone("ovs-vswitchd: deleting flow (Invalid argument)\n"));
        assert!(!is_gone(
            "ovs-vswitchd: datapath not found (No such file or directory)"
        ));
    }

    #[test]
    fn filters_name_the_destination_of_each_family() {
        assert_eq!(
            filter_toward("10.100.0.1".parse().unwrap()),
            "filter=ip,nw_dst=10.100.0.1"
        );
        assert_eq!(
            filter_toward("fd00:100::1".parse().unwrap()),
            "filter=ipv6,ipv6_dst=fd00:100::1"
        );
    }

    #[test]
    fn the_control_socket_is_found_by_pid_or_by_its_fixed_name() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(control_socket(dir.path()), None);
        std::fs::write(dir.path().join("ovs-vswitchd.ctl"), "").unwrap();
        assert_eq!(
            control_socket(dir.path()),
            Some(dir.path().join("ovs-vswitchd.ctl"))
        );
        std::fs::write(dir.path().join("ovs-vswitchd.pid"), "42\n").unwrap();
        std::fs::write(dir.path().join("ovs-vswitchd.42.ctl"), "").unwrap();
        assert_eq!(
            control_socket(dir.path()),
            Some(dir.path().join("ovs-vswitchd.42.ctl"))
        );
    }
}
