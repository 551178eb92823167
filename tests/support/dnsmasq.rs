//! A real DNS server for the FQDN lab tests and bench: dnsmasq in the outside host, serving the
//! `host-record` lines it is given on the outside host's IPv4 address, over UDP and TCP, and
//! optionally logging every query it receives so a test can count them.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use super::lab::{Lab, EXT_IP4};
use super::util::wait_until;

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
