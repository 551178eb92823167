//! A real DNS server for the FQDN lab tests and bench: dnsmasq in the outside host, serving the
//! `host-record` lines it is given on the outside host's IPv4 address, over UDP and TCP, and
//! optionally logging every query it receives so a test can count them.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use super::lab::{Lab, EXT_IP4};
use super::util::{in_netns, wait_until};

/// A running dnsmasq; killed on drop.
pub struct Dnsmasq {
    child: Child,
    /// The query log (`--log-queries`), when asked for.
    log: Option<PathBuf>,
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dnsmasq {
    /// Starts dnsmasq in `lab`'s outside host on `EXT_IP4:port` with `conf` (dnsmasq config
    /// lines, e.g. `host-record=name,ip4,ip6,ttl`); `log_queries` logs every query to a file
    /// (costs a write per query: off for the race test and the benchmark). Waits until it listens.
    pub fn start(lab: &Lab, conf: &str, port: u16, log_queries: bool, extra_args: &[&str]) -> Dnsmasq {
        let conf_path = lab.unique_path("dnsmasq", "conf");
        std::fs::write(&conf_path, conf).expect("write the dnsmasq config");
        let log = log_queries.then(|| lab.unique_path("dnsmasq", "log"));
        let mut c = std::process::Command::new("ip");
        c.args([
            "netns",
            "exec",
            lab.ext_ns(),
            "dnsmasq",
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
        ])
        .arg(format!("--conf-file={}", conf_path.display()))
        .args([
            &format!("--port={port}"),
            &format!("--listen-address={EXT_IP4}"),
            "--bind-interfaces",
            "--user=root",
            "--pid-file=",
        ])
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        match &log {
            Some(path) => {
                c.arg("--log-queries")
                    .arg(format!("--log-facility={}", path.display()));
            }
            None => {
                c.arg("--log-facility=-");
            }
        }
        let child = c.spawn().expect("start dnsmasq (apt-get install dnsmasq-base)");
        let dns = Dnsmasq { child, log };
        wait_until(Duration::from_secs(10), "dnsmasq listening", || {
            lab.ext(&format!("ss -Hlun 'sport = :{port}' | grep -q {EXT_IP4}"))
                .status
                .success()
        });
        // Listening is not answering: dnsmasq binds its sockets before it loads the
        // host-records, which takes seconds for tens of thousands (a first query then waits,
        // and a test or bench would blame the agent).
        let addr = format!("{EXT_IP4}:{port}");
        let answered = in_netns(lab.ext_ns(), move || answers_a_query(&addr))
            .join()
            .unwrap_or(false);
        assert!(answered, "dnsmasq did not answer a query within 60 s");
        dns
    }

    /// How many queries of type `qtype` (`A`, `AAAA`) for `name` it logged.
    pub fn queries(&self, qtype: &str, name: &str) -> usize {
        let log = self.log.as_ref().expect("dnsmasq started without a query log");
        let needle = format!("query[{qtype}] {name} from");
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&needle))
            .count()
    }
}

/// Whether the DNS server at `addr` answers a query (any answer: the name is unknown) within
/// 60 s, sent from the calling thread's network namespace.
fn answers_a_query(addr: &str) -> bool {
    let Ok(sock) = std::net::UdpSocket::bind("0.0.0.0:0") else {
        return false;
    };
    let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
    // ID 0x7e57, recursion desired, one question: `ready.probe. A IN`.
    let mut query = vec![0x7e, 0x57, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["ready", "probe"] {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 512];
    while std::time::Instant::now() < deadline {
        if sock.send_to(&query, addr).is_err() {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            if n >= 2 && buf[..2] == [0x7e, 0x57] {
                return true;
            }
        }
    }
    false
}
