//! systemd's readiness protocol (`sd_notify`): when the service runs with `Type=notify`, systemd
//! passes a datagram socket in `NOTIFY_SOCKET` and waits for `READY=1`; `STATUS=` lines show up
//! in `systemctl status`; with `WatchdogSec=` it sets `WATCHDOG_USEC` and expects `WATCHDOG=1`
//! at least that often. This module owns the socket side (plain std `UnixDatagram`, filesystem
//! or abstract `@name` addresses) and the loop that reports the agent's readiness
//! ([`run_notifier`]); what "ready" means is decided by [`super::collect::Readiness`].

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

use tracing::{debug, info, warn};

/// Where notifications go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyAddress {
    /// A socket file (`/run/systemd/notify`).
    Path(PathBuf),
    /// A Linux abstract socket (`@name` in `NOTIFY_SOCKET`; the name without the `@`).
    Abstract(Vec<u8>),
}

impl NotifyAddress {
    /// Parses `NOTIFY_SOCKET`'s value; `None` when empty or not a unix address.
    pub fn parse(value: &str) -> Option<NotifyAddress> {
        if let Some(name) = value.strip_prefix('@') {
            return Some(NotifyAddress::Abstract(name.as_bytes().to_vec()));
        }
        // systemd also accepts AF_VSOCK addresses ("vsock:..."); a VM agent has no use for them.
        if value.starts_with('/') {
            return Some(NotifyAddress::Path(PathBuf::from(value)));
        }
        None
    }
}

/// A connection to systemd's notification socket.
#[derive(Debug)]
pub struct Notifier {
    address: NotifyAddress,
    socket: UnixDatagram,
    /// Half of `WATCHDOG_USEC`, when the watchdog is on for this process.
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From the environment: `None` unless `NOTIFY_SOCKET` names a unix socket (not started by
    /// systemd with `Type=notify`). The watchdog is on when `WATCHDOG_USEC` is set and
    /// `WATCHDOG_PID`, if set, is this process.
    pub fn from_env() -> Option<Notifier> {
        let raw = std::env::var("NOTIFY_SOCKET").ok()?;
        let Some(address) = NotifyAddress::parse(&raw) else {
            warn!(NOTIFY_SOCKET = %raw, "NOTIFY_SOCKET is not a unix socket address; not notifying systemd");
            return None;
        };
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .filter(|_| for_us)
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0)
            .map(Duration::from_micros);
        match Notifier::new(address, watchdog) {
            Ok(n) => Some(n),
            Err(e) => {
                warn!("cannot create the systemd notification socket: {e}");
                None
            }
        }
    }

    /// A notifier for `address`; `watchdog_usec` is systemd's `WATCHDOG_USEC` (pings are sent at
    /// half that interval, as sd_watchdog_enabled(3) recommends).
    pub fn new(address: NotifyAddress, watchdog_usec: Option<Duration>) -> io::Result<Notifier> {
        Ok(Notifier {
            address,
            socket: UnixDatagram::unbound()?,
            watchdog: watchdog_usec.map(|d| d / 2),
        })
    }

    /// How often to send `WATCHDOG=1`, if at all.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Sends one notification (`KEY=VALUE` lines).
    pub fn notify(&self, state: &str) -> io::Result<()> {
        let sent = match &self.address {
            NotifyAddress::Path(path) => self.socket.send_to(state.as_bytes(), path)?,
            NotifyAddress::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                self.socket.send_to_addr(state.as_bytes(), &addr)?
            }
        };
        if sent != state.len() {
            return Err(io::Error::other("short write to NOTIFY_SOCKET"));
        }
        Ok(())
    }
}

/// What the notifier loop reports, computed by the caller on each tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// `/readyz` would answer 200.
    pub ready: bool,
    /// The supervisor answered (the process is not wedged): gate for the watchdog ping.
    pub responsive: bool,
    /// One line for `systemctl status`.
    pub status: String,
}

/// Reports readiness to systemd until the returned future is dropped: `STATUS=` whenever the
/// status line changes, `READY=1` the first time the agent is ready (systemd ignores repeats,
/// and a later loss of readiness is visible in `/readyz` and the status line), and `WATCHDOG=1`
/// at half `WATCHDOG_USEC` while the supervisor answers. `check` is evaluated every `tick`
/// (and at least as often as the watchdog needs).
pub async fn run_notifier<F, Fut>(notifier: Notifier, tick: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Health>,
{
    let tick = notifier.watchdog_interval().map_or(tick, |w| w.min(tick));
    let mut last_status: Option<String> = None;
    let mut ready_sent = false;
    let mut last_ping: Option<tokio::time::Instant> = None;
    loop {
        let health = check().await;
        let mut lines = Vec::new();
        if last_status.as_deref() != Some(health.status.as_str()) {
            lines.push(format!("STATUS={}", health.status.replace('\n', " ")));
        }
        if health.ready && !ready_sent {
            lines.push("READY=1".to_string());
        }
        if let Some(every) = notifier.watchdog_interval() {
            let due = last_ping.is_none_or(|t| t.elapsed() + tick / 2 >= every);
            if health.responsive && due {
                lines.push("WATCHDOG=1".to_string());
            }
        }
        if !lines.is_empty() {
            let msg = lines.join("\n");
            match notifier.notify(&msg) {
                Ok(()) => {
                    debug!(message = %msg, "notified systemd");
                    if msg.contains("READY=1") {
                        info!("told systemd the agent is ready");
                        ready_sent = true;
                    }
                    if msg.contains("WATCHDOG=1") {
                        last_ping = Some(tokio::time::Instant::now());
                    }
                    last_status = Some(health.status);
                }
                Err(e) => warn!("cannot notify systemd: {e}"),
            }
        }
        tokio::time::sleep(tick).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv_text(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).expect("datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn parses_addresses() {
        assert_eq!(
            NotifyAddress::parse("/run/systemd/notify"),
            Some(NotifyAddress::Path(PathBuf::from("/run/systemd/notify")))
        );
        assert_eq!(
            NotifyAddress::parse("@/org/freedesktop/systemd1/notify/123"),
            Some(NotifyAddress::Abstract(
                b"/org/freedesktop/systemd1/notify/123".to_vec()
            ))
        );
        assert_eq!(NotifyAddress::parse(""), None);
        assert_eq!(NotifyAddress::parse("vsock:2:1234"), None);
    }

    #[test]
    fn sends_to_a_socket_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).expect("bind");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let n = Notifier::new(NotifyAddress::Path(path), None).expect("notifier");
        n.notify("READY=1\nSTATUS=ok").expect("send");
        assert_eq!(recv_text(&server), "READY=1\nSTATUS=ok");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!(
            "antrea-vm-agent-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let server = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let address = NotifyAddress::parse(&format!("@{name}")).expect("parse");
        let n = Notifier::new(address, None).expect("notifier");
        n.notify("WATCHDOG=1").expect("send");
        assert_eq!(recv_text(&server), "WATCHDOG=1");
    }

    #[test]
    fn a_missing_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let n = Notifier::new(NotifyAddress::Path(dir.path().join("nobody")), None).expect("notifier");
        assert!(n.notify("READY=1").is_err());
    }

    /// The loop: STATUS on change only, READY=1 once when ready, WATCHDOG=1 while responsive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loop_reports_status_ready_and_watchdog() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).expect("bind");
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let n = Notifier::new(NotifyAddress::Path(path), Some(Duration::from_millis(40))).expect("notifier");
        assert_eq!(n.watchdog_interval(), Some(Duration::from_millis(20)));
        let script = std::sync::Arc::new(std::sync::Mutex::new(vec![
            (false, "starting: waiting for the ExternalNode"),
            (false, "starting: waiting for the ExternalNode"),
            (true, "ready: 1 interface attached"),
            (true, "ready: 1 interface attached"),
        ]));
        let s = script.clone();
        let task = tokio::spawn(run_notifier(n, Duration::from_millis(10), move || {
            let s = s.clone();
            async move {
                let mut v = s.lock().expect("lock");
                let (ready, status) = if v.len() > 1 { v.remove(0) } else { v[0] };
                Health {
                    ready,
                    responsive: true,
                    status: status.to_string(),
                }
            }
        }));
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let text = tokio::task::block_in_place(|| recv_text(&server));
            let done = text.contains("READY=1");
            seen.push(text);
            if done {
                break;
            }
        }
        task.abort();
        let all = seen.join("|");
        assert!(
            seen[0].contains("STATUS=starting: waiting for the ExternalNode"),
            "{all}"
        );
        assert!(seen[0].contains("WATCHDOG=1"), "{all}");
        assert_eq!(all.matches("STATUS=starting").count(), 1, "{all}");
        assert_eq!(all.matches("READY=1").count(), 1, "{all}");
        let ready_msg = seen.iter().find(|m| m.contains("READY=1")).expect("ready sent");
        assert!(ready_msg.contains("STATUS=ready: 1 interface attached"), "{all}");
    }
}
