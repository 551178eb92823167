//! Traffic between the lab's namespaces: ping, TCP through `nc`, and a continuous ping that
//! counts losses over a window (e.g. across an agent restart).

use std::{
    path::PathBuf,
    process::{Child, Stdio},
    time::Duration,
};

use super::{
    lab::Lab,
    util::{poll_until, signal, tail, wait_child, CommandOutputExt},
};

/// The summary of one `ping` run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PingResult {
    pub transmitted: u32,
    pub received: u32,
    pub duplicates: u32,
    /// ping's full output, for failure messages.
    pub output: String,
}

impl PingResult {
    /// Every request answered, exactly once.
    pub fn all_received(&self) -> bool {
        self.transmitted > 0 && self.received == self.transmitted && self.duplicates == 0
    }
    /// No answer at all.
    pub fn none_received(&self) -> bool {
        self.transmitted > 0 && self.received == 0
    }
}

/// Parses ping's statistics line: `N packets transmitted, M received, +D duplicates, ...`.
fn parse_ping(output: &str) -> PingResult {
    let mut r = PingResult {
        output: output.to_string(),
        ..PingResult::default()
    };
    if let Some(line) = output.lines().find(|l| l.contains("packets transmitted")) {
        for part in line.split(',') {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let n: u32 = n.trim_start_matches('+').parse().unwrap_or(0);
            match what {
                "packets" => r.transmitted = n,
                "received" => r.received = n,
                w if w.starts_with("duplicate") => r.duplicates = n,
                _ => {}
            }
        }
    }
    r
}

/// A continuous ping started by [`Lab::start_ping_flood`]. Its replies are counted by
/// `icmp_seq`, from the line ping prints for each (in a file, so that a long flood never blocks
/// on a full pipe).
pub struct PingFlood {
    child: Child,
    what: String,
    output: PathBuf,
    interval: Duration,
}

/// How long a request may still be on its way when the ping is stopped: ping's own reply timeout
/// (`-W 1`). On a loaded machine the last few echoes can take that long.
const IN_FLIGHT: Duration = Duration::from_secs(1);

impl PingFlood {
    /// Stops the ping (SIGINT) and returns (sent, answered), counting only the requests that had
    /// time to be answered (see [`count_flood`]).
    pub fn finish(mut self) -> (u32, u32) {
        let r = self.finish_result();
        (r.transmitted, r.received)
    }

    /// Like [`PingFlood::finish`] with the full result.
    pub fn finish_result(&mut self) -> PingResult {
        signal(self.child.id(), "INT");
        if wait_child(&mut self.child, Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!("{} did not stop on SIGINT", self.what);
        }
        let out = std::fs::read_to_string(&self.output).unwrap_or_default();
        let _ = std::fs::remove_file(&self.output);
        let in_flight = IN_FLIGHT.as_millis().div_ceil(self.interval.as_millis().max(1));
        assert!(
            parse_ping(&out).transmitted > 0,
            "{} sent nothing:\n{}",
            self.what,
            tail(&out, 10)
        );
        count_flood(&out, u32::try_from(in_flight).unwrap_or(u32::MAX))
    }
}

/// Counts a continuous ping's output (one `... icmp_seq=N ...` line per reply, then the
/// statistics) by sequence number. A request after the last answered one counts only if more
/// than `in_flight` requests followed it: the last ones may still have been on their way when
/// the ping stopped, and ping's own summary would call them lost. A request before an answered
/// one that got no answer is lost. `transmitted` is the requests counted, `received` the distinct
/// ones answered, `duplicates` the answers beyond the first.
fn count_flood(output: &str, in_flight: u32) -> PingResult {
    let summary = parse_ping(output);
    let mut answered = std::collections::BTreeSet::new();
    let mut duplicates = 0;
    for line in output.lines().filter(|l| l.contains(" bytes from ")) {
        let seq = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("icmp_seq="))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(seq) = seq {
            if !answered.insert(seq) {
                duplicates += 1;
            }
        }
    }
    let last_answered = answered.last().copied().unwrap_or(0);
    let trailing = summary.transmitted.saturating_sub(last_answered);
    let received = u32::try_from(answered.len()).unwrap_or(u32::MAX);
    PingResult {
        transmitted: summary.transmitted - trailing.min(in_flight),
        received,
        duplicates,
        output: summary.output,
    }
}

impl Drop for PingFlood {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Lab {
    /// `count` pings (0.2 s apart, 1 s reply timeout) from the outside host to `ip`.
    pub fn ping_from_ext(&self, ip: &str, count: u32) -> PingResult {
        parse_ping(&self.ext(&ping_cmd(ip, count)).stdout_text())
    }

    /// `count` pings (0.2 s apart, 1 s reply timeout) from the VM to `ip`.
    pub fn ping_from_vm(&self, ip: &str, count: u32) -> PingResult {
        parse_ping(&self.vm(&ping_cmd(ip, count)).stdout_text())
    }

    /// TCP from the outside host to the VM: listens with `nc` in the VM on `ip:port`, connects from
    /// the outside host and sends a token. True if the token arrived.
    pub fn tcp_from_ext(&self, ip: &str, port: u16) -> bool {
        self.tcp_check(true, ip, port)
    }

    /// TCP from the VM to the outside host (listener in the outside host on `ip:port`).
    pub fn tcp_from_vm(&self, ip: &str, port: u16) -> bool {
        self.tcp_check(false, ip, port)
    }

    /// UDP from the outside host to the VM: a `nc -u -l` in the VM on `ip:port`, two datagrams
    /// with a token from the outside host. True if a token arrived within 2 s.
    pub fn udp_from_ext(&self, ip: &str, port: u16) -> bool {
        let out_path = self.unique_path("udp", "out");
        let out = std::fs::File::create(&out_path).expect("create the nc output file");
        let mut server = self.ns_command(self.vm_ns(), "nc");
        server.args(["-u", "-l", "-n", ip, &port.to_string()]);
        server.stdin(Stdio::null()).stdout(out).stderr(Stdio::null());
        let mut server = server.spawn().expect("start nc -u -l");
        let listen_check = format!("ss -Hlunp 'sport = :{port}' | grep -q 'pid={},'", server.id());
        if !poll_until(Duration::from_secs(10), || {
            self.vm(&listen_check).status.success()
        }) {
            let _ = server.kill();
            let _ = server.wait();
            panic!("nc did not start listening on UDP {ip} port {port}");
        }
        let token = format!("avm-udp-{:08x}", rand::random::<u32>());
        for _ in 0..2 {
            self.ext(&format!(
                "printf '%s\\n' '{token}' | timeout 2 nc -u -n -w 0 '{ip}' {port}"
            ));
        }
        let received = poll_until(Duration::from_secs(2), || {
            std::fs::read_to_string(&out_path).is_ok_and(|t| t.contains(&token))
        });
        let _ = server.kill();
        let _ = server.wait();
        let _ = std::fs::remove_file(&out_path);
        received
    }

    fn tcp_check(&self, server_in_vm: bool, ip: &str, port: u16) -> bool {
        let (server_ns, client_ns) = if server_in_vm {
            (self.vm_ns().to_string(), self.ext_ns().to_string())
        } else {
            (self.ext_ns().to_string(), self.vm_ns().to_string())
        };
        let out_path = self.unique_path("tcp", "out");
        let out = std::fs::File::create(&out_path).expect("create the nc output file");
        // nc itself is the child (`ip netns exec` execs it), so that killing the child frees the port.
        let mut server = self.ns_command(&server_ns, "nc");
        server.args(["-l", "-n", ip, &port.to_string()]);
        server.stdin(Stdio::null()).stdout(out).stderr(Stdio::null());
        let mut server = server.spawn().expect("start nc -l");
        // Listening, and it is our nc (not a leftover holding the port).
        let listen_check = format!("ss -Hltnp 'sport = :{port}' | grep -q 'pid={},'", server.id());
        let run_in = |ns: &str, c: &str| {
            if ns == self.vm_ns() {
                self.vm(c)
            } else {
                self.ext(c)
            }
        };
        let mut exited = None;
        let listening = poll_until(Duration::from_secs(10), || {
            exited = server.try_wait().ok().flatten();
            exited.is_none() && run_in(&server_ns, &listen_check).status.success()
        });
        if !listening {
            let _ = server.kill();
            let _ = server.wait();
            let who = run_in(&server_ns, &format!("ss -Hltnp 'sport = :{port}'")).stdout_text();
            panic!(
                "nc did not start listening on {ip} port {port} in {server_ns} (exit: {exited:?}); \
                 listeners on the port: {who}"
            );
        }
        let token = format!("avm-token-{:08x}", rand::random::<u32>());
        let client = run_in(
            &client_ns,
            &format!("printf '%s' '{token}' | nc -n -N -w 3 '{ip}' {port}"),
        );
        // The server exits once the client closed; give it a moment, then make sure it is gone.
        if wait_child(&mut server, Duration::from_secs(5)).is_none() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let received = std::fs::read_to_string(&out_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        client.status.success() && received.contains(&token)
    }

    /// Starts a continuous ping (one request every `interval_ms`) from the outside host
    /// (`from_ext`) or from the VM to `target`. Stop it with [`PingFlood::finish`].
    pub fn start_ping_flood(&self, from_ext: bool, target: &str, interval_ms: u64) -> PingFlood {
        let ns = if from_ext { self.ext_ns() } else { self.vm_ns() };
        let interval = format!("{:.3}", interval_ms as f64 / 1000.0);
        let mut c = self.ns_command(ns, "ping");
        // -w bounds it even if nobody calls finish(). Not -q: the reply lines are counted.
        c.args(["-n", "-i", &interval, "-W", "1", "-w", "3600", target]);
        let output = self.unique_path("ping", "out");
        let file = std::fs::File::create(&output).expect("create the ping output file");
        c.stdin(Stdio::null()).stdout(file).stderr(Stdio::null());
        let child = c.spawn().expect("start ping");
        PingFlood {
            child,
            what: format!("ping from {ns} to {target}"),
            output,
            interval: Duration::from_millis(interval_ms),
        }
    }
}

fn ping_cmd(ip: &str, count: u32) -> String {
    format!("ping -n -q -c {count} -i 0.2 -W 1 '{ip}'")
}

#[cfg(test)]
mod flood_tests {
    use super::count_flood;

    fn output(sent: u32, answered: &[u32]) -> String {
        let mut out: String = answered
            .iter()
            .map(|n| format!("64 bytes from 10.0.0.2: icmp_seq={n} ttl=64 time=0.05 ms\n"))
            .collect();
        out.push_str(&format!(
            "\n--- 10.0.0.2 ping statistics ---\n{sent} packets transmitted, {} received, 0% packet loss, time 300ms\n",
            answered.len()
        ));
        out
    }

    #[test]
    fn the_echoes_still_in_flight_at_the_stop_are_not_lost() {
        let r = count_flood(&output(10, &[1, 2, 3, 4, 5, 6, 7, 8]), 5);
        assert_eq!((r.transmitted, r.received, r.duplicates), (8, 8, 0));
    }

    #[test]
    fn a_gap_before_an_answer_or_a_long_silent_tail_is_lost() {
        let r = count_flood(&output(10, &[1, 2, 4, 5, 6, 7, 8]), 5);
        assert_eq!((r.transmitted, r.received), (8, 7));
        let r = count_flood(&output(20, &[1, 2, 3]), 5);
        assert_eq!((r.transmitted, r.received), (15, 3));
        let r = count_flood(&output(4, &[]), 5);
        assert_eq!((r.transmitted, r.received), (0, 0));
    }

    #[test]
    fn a_second_answer_to_one_request_is_a_duplicate() {
        let r = count_flood(&output(3, &[1, 2, 2, 3]), 5);
        assert_eq!((r.transmitted, r.received, r.duplicates), (3, 3, 1));
    }
}
