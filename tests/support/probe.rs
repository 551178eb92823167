//! A continuous connection probe for fault tests: TCP connections from the outside host to the VM,
//! one allowed and one denied port, over IPv4 and IPv6, one attempt per target every 50 ms, each
//! recorded with its start time. Tests inject a fault, then ask whether any denied connection
//! got through and how long the allowed ones took to come back.
//!
//! The listeners run in the VM namespace and the probes in the outside host's, each on a thread
//! that entered its namespace with `setns(2)`. A helper thread keeps TX checksum offload off on
//! the VM's internal port when OVS re-creates it (a userspace-datapath lab artifact, see
//! [`super::Lab::isolate_uplink`]).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::lab::{Lab, NIC, VM_IP4, VM_IP6};

/// Time between two attempts of one target.
const PERIOD: Duration = Duration::from_millis(50);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

#[derive(Clone, Debug)]
struct Target {
    label: String,
    addr: SocketAddr,
    allowed: bool,
}

#[derive(Clone, Copy, Debug)]
struct Attempt {
    target: usize,
    /// When the attempt started, from the probe's start.
    at: Duration,
    ok: bool,
}

/// A running probe; stops when dropped.
pub struct ConnProbe {
    started: Instant,
    targets: Vec<Target>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn enter_netns(ns: &str) {
    let path = format!("/run/netns/{ns}");
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
        .unwrap_or_else(|e| panic!("setns {path}: {e}"));
}

impl Lab {
    /// Starts listeners on `allowed` and `denied` in the VM and probes both ports on the VM's IPv4
    /// and IPv6 addresses from the outside host. The test's policy must let `allowed` through and
    /// drop `denied`.
    pub fn start_conn_probe(&self, allowed: u16, denied: u16) -> ConnProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let started = Instant::now();
        let mut threads = Vec::new();
        // Listeners: one dual-stack socket per port, accepting and closing.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        {
            let (ns, stop) = (self.vm_ns().to_string(), stop.clone());
            threads.push(std::thread::spawn(move || {
                enter_netns(&ns);
                let listeners: Vec<TcpListener> = [allowed, denied]
                    .iter()
                    .map(|p| {
                        let l =
                            TcpListener::bind(("::", *p)).unwrap_or_else(|e| panic!("listen on {p}: {e}"));
                        l.set_nonblocking(true).expect("nonblocking listener");
                        l
                    })
                    .collect();
                let _ = ready_tx.send(());
                while !stop.load(Ordering::SeqCst) {
                    for l in &listeners {
                        while let Ok((s, _)) = l.accept() {
                            drop(s);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("probe listeners started");
        let mut targets = Vec::new();
        for (ip, family) in [(VM_IP4, "IPv4"), (VM_IP6, "IPv6")] {
            for (port, allowed) in [(allowed, true), (denied, false)] {
                targets.push(Target {
                    label: format!(
                        "{} {family} port {port}",
                        if allowed { "allowed" } else { "denied" }
                    ),
                    addr: SocketAddr::new(ip.parse().expect("VM IP"), port),
                    allowed,
                });
            }
        }
        for (i, t) in targets.iter().enumerate() {
            let (ns, stop, attempts, addr) =
                (self.ext_ns().to_string(), stop.clone(), attempts.clone(), t.addr);
            threads.push(std::thread::spawn(move || {
                enter_netns(&ns);
                while !stop.load(Ordering::SeqCst) {
                    let at = started.elapsed();
                    let ok = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok();
                    if let Ok(mut a) = attempts.lock() {
                        a.push(Attempt { target: i, at, ok });
                    }
                    std::thread::sleep(PERIOD);
                }
            }));
        }
        // Keeps TX checksum offload off on the internal port (re-created by OVS after some faults).
        {
            let (stop, ns) = (stop.clone(), self.vm_ns().to_string());
            threads.push(std::thread::spawn(move || {
                let fix = format!(
                    "ethtool -k '{NIC}' 2>/dev/null | grep -q '^tx-checksumming: on' && ethtool -K '{NIC}' tx off >/dev/null 2>&1; true"
                );
                while !stop.load(Ordering::SeqCst) {
                    let _ = super::util::cmd("ip")
                        .args(["netns", "exec", &ns, "sh", "-c", &fix])
                        .output();
                    std::thread::sleep(Duration::from_millis(200));
                }
            }));
        }
        ConnProbe {
            started,
            targets,
            attempts,
            stop,
            threads,
        }
    }
}

/// What the probe saw after one fault.
#[derive(Debug)]
pub struct Recovery {
    /// For each allowed target: how long after the fault it last failed before connecting
    /// again for good (zero if it never failed).
    pub allowed_back_after: Vec<(String, Duration)>,
}

impl Recovery {
    pub fn worst(&self) -> Duration {
        self.allowed_back_after
            .iter()
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .allowed_back_after
            .iter()
            .map(|(l, d)| format!("{l}: {:.2} s", d.as_secs_f64()))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

impl ConnProbe {
    /// Now, on the probe's clock (mark a fault with it).
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn snapshot(&self) -> Vec<Attempt> {
        self.attempts.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Every denied connection that got through, as "label at N s".
    pub fn denied_through(&self) -> Vec<String> {
        self.snapshot()
            .iter()
            .filter(|a| a.ok && !self.targets[a.target].allowed)
            .map(|a| format!("{} at {:.2} s", self.targets[a.target].label, a.at.as_secs_f64()))
            .collect()
    }

    /// Waits (up to `timeout`) until every allowed target has connected `streak` times in a row
    /// after `since`, then says how long after `since` each came back.
    pub fn wait_back(&self, since: Duration, timeout: Duration) -> Recovery {
        self.try_wait_back(since, timeout)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ConnProbe::wait_back`], with the failure as an error.
    pub fn try_wait_back(&self, since: Duration, timeout: Duration) -> Result<Recovery, String> {
        const STREAK: usize = 5;
        let deadline = Instant::now() + timeout;
        loop {
            let attempts = self.snapshot();
            let mut back = Vec::new();
            for (i, t) in self.targets.iter().enumerate().filter(|(_, t)| t.allowed) {
                let mine: Vec<&Attempt> = attempts
                    .iter()
                    .filter(|a| a.target == i && a.at >= since)
                    .collect();
                let tail_ok = mine.len() >= STREAK && mine[mine.len() - STREAK..].iter().all(|a| a.ok);
                if !tail_ok {
                    break;
                }
                // The first success after the last failure.
                let last_fail = mine.iter().rposition(|a| !a.ok);
                let back_at = match last_fail {
                    None => since,
                    Some(k) => mine[k + 1].at,
                };
                back.push((t.label.clone(), back_at.saturating_sub(since)));
            }
            if back.len() == self.targets.iter().filter(|t| t.allowed).count() {
                return Ok(Recovery {
                    allowed_back_after: back,
                });
            }
            if Instant::now() > deadline {
                let recent: Vec<String> = attempts
                    .iter()
                    .rev()
                    .take(12)
                    .map(|a| {
                        format!(
                            "{}@{:.2}s={}",
                            self.targets[a.target].label,
                            a.at.as_secs_f64(),
                            a.ok
                        )
                    })
                    .collect();
                return Err(format!(
                    "the allowed connections did not come back within {timeout:?} of the fault; latest attempts: {recent:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many attempts were made in all (to show the probe ran).
    pub fn attempts(&self) -> usize {
        self.snapshot().len()
    }
}

impl Drop for ConnProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
