//! `antrea-vm-agent trace`: asks the running agent (`GET /trace` on its API socket) what the
//! bridge does with one packet, and prints the answer in words with the tables the packet went
//! through below it, or the agent's JSON document (`-o json`).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::client::{self, ClientError};
use crate::policy::trace::TraceAnswer;
use crate::views::ApiError;

/// How long the request may take (the agent bounds `ofproto/trace` to 2 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// `--direction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    /// From the peer to the VM: ingress rules decide.
    In,
    /// From the VM to the peer: egress rules decide.
    Out,
}

/// `--protocol` (icmp is ICMPv6 for an IPv6 peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
    Icmp,
}

/// `-o`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceOutput {
    /// The answer in words, then the path.
    #[default]
    Text,
    /// The agent's JSON document.
    Json,
}

/// The arguments of `trace`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct TraceArgs {
    /// in: a packet from the peer to the VM; out: from the VM to the peer.
    #[arg(long, value_enum)]
    pub direction: Direction,
    /// The other end's IP address (IPv4 or IPv6).
    #[arg(long)]
    pub peer: IpAddr,
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// The connection's destination port (the VM's for in, the peer's for out); tcp, udp and
    /// sctp only.
    #[arg(long)]
    pub port: Option<u16>,
    /// The source port (default 50000).
    #[arg(long)]
    pub source_port: Option<u16>,
    /// icmp: the type (default: echo request, 8 or 128 for IPv6).
    #[arg(long)]
    pub icmp_type: Option<u8>,
    /// icmp: the code (default 0).
    #[arg(long)]
    pub icmp_code: Option<u8>,
    /// The attached interface (needed only when several are attached).
    #[arg(long)]
    pub interface: Option<String>,
    /// The VM's address on that interface (default: its first of the peer's family).
    #[arg(long)]
    pub local: Option<IpAddr>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: TraceOutput,
    /// The agent API socket (`agentAPI.socket` in the configuration).
    #[arg(long, default_value = crate::config::DEFAULT_AGENT_API_SOCKET)]
    pub socket: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceCliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The agent's own message (a bad packet description, an unknown interface, OVS's error).
    #[error("{0}")]
    Agent(String),
    #[error("unexpected answer from the agent: {0}")]
    Decode(String),
}

/// The request path and query for `args`.
pub fn request_path(args: &TraceArgs) -> String {
    let mut q: Vec<(&str, String)> = vec![
        (
            "direction",
            match args.direction {
                Direction::In => "in",
                Direction::Out => "out",
            }
            .into(),
        ),
        ("peer", args.peer.to_string()),
        (
            "protocol",
            match args.protocol {
                Protocol::Tcp => "tcp",
                Protocol::Udp => "udp",
                Protocol::Sctp => "sctp",
                Protocol::Icmp => "icmp",
            }
            .into(),
        ),
    ];
    let optional = [
        ("port", args.port.map(|p| p.to_string())),
        ("sourcePort", args.source_port.map(|p| p.to_string())),
        ("icmpType", args.icmp_type.map(|t| t.to_string())),
        ("icmpCode", args.icmp_code.map(|c| c.to_string())),
        ("interface", args.interface.clone()),
        ("local", args.local.map(|l| l.to_string())),
    ];
    q.extend(optional.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
    format!("/trace?{}", serde_urlencoded::to_string(&q).unwrap_or_default())
}

fn fetch(socket: &Path, path: &str) -> Result<(TraceAnswer, String), TraceCliError> {
    let resp = client::get(socket, path, REQUEST_TIMEOUT)?;
    if resp.status != 200 {
        let msg = serde_json::from_slice::<ApiError>(&resp.body)
            .map(|e| e.error)
            .unwrap_or_else(|_| {
                format!(
                    "HTTP {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body).trim()
                )
            });
        return Err(TraceCliError::Agent(msg));
    }
    let answer: TraceAnswer =
        serde_json::from_slice(&resp.body).map_err(|e| TraceCliError::Decode(e.to_string()))?;
    Ok((answer, String::from_utf8_lossy(&resp.body).into_owned()))
}

/// The answer in words, then the path: one line per table (nested steps indented), a line per
/// conntrack recirculation, what each notable step means under it.
pub fn render(a: &TraceAnswer) -> String {
    let mut out = format!("{}\n\nPacket: {}\n\nPath:\n", a.summary, a.flow);
    let mut pass = 0;
    for s in &a.path {
        if s.pass != pass {
            pass = s.pass;
            let _ = writeln!(out, "  -- conntrack: resumed as a new connection (trk,new) --");
        }
        let indent = " ".repeat(2 + 2 * s.depth.min(8));
        let what = match (s.priority, s.matches.as_str()) {
            (None, _) => "no flow matched".to_string(),
            (Some(p), "") => format!("priority {p}"),
            (Some(p), m) => format!("priority {p}, {m}"),
        };
        let _ = writeln!(out, "{indent}{:>2} {:<26} {what}", s.table, s.table_name);
        if let Some(note) = &s.note {
            let _ = writeln!(out, "{indent}   -> {note}");
        }
    }
    let _ = writeln!(out, "Datapath actions: {}", a.datapath_actions.join(" | "));
    out
}

/// Runs one `trace` and returns what to print.
pub fn run_trace(args: &TraceArgs) -> Result<String, TraceCliError> {
    let (answer, raw) = fetch(&args.socket, &request_path(args))?;
    Ok(match args.output {
        TraceOutput::Text => render(&answer),
        TraceOutput::Json => {
            let value: serde_json::Value =
                serde_json::from_str(&raw).map_err(|e| TraceCliError::Decode(e.to_string()))?;
            serde_json::to_string_pretty(&value).map_err(|e| TraceCliError::Decode(e.to_string()))? + "\n"
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::trace::{Reason, TraceStepView, Verdict};

    fn args() -> TraceArgs {
        TraceArgs {
            direction: Direction::In,
            peer: "fd00::1".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: Some(22),
            source_port: None,
            icmp_type: None,
            icmp_code: None,
            interface: Some("eth0".into()),
            local: None,
            output: TraceOutput::Text,
            socket: PathBuf::from("/nonexistent.sock"),
        }
    }

    #[test]
    fn the_request_names_what_was_given() {
        assert_eq!(
            request_path(&args()),
            "/trace?direction=in&peer=fd00%3A%3A1&protocol=tcp&port=22&interface=eth0"
        );
    }

    #[test]
    fn the_text_puts_the_answer_first_and_the_path_below() {
        let step = |pass, table: u8, name: &str, priority, matches: &str, note: Option<&str>| TraceStepView {
            pass,
            depth: 0,
            table,
            table_name: name.into(),
            priority,
            matches: matches.into(),
            actions: vec![],
            note: note.map(str::to_string),
        };
        let a = TraceAnswer {
            verdict: Verdict::Dropped,
            reason: Reason::Rule,
            summary: "Dropped by rule \"x\".".into(),
            decided_by: None,
            passed_by: vec![],
            flow: "in_port=21,tcp".into(),
            path: vec![
                step(0, 0, "PipelineRootClassifier", Some(200), "ip", None),
                step(
                    1,
                    10,
                    "AntreaPolicyIngressRule",
                    Some(14900),
                    "conj_id=7",
                    Some("rule \"x\""),
                ),
                step(1, 13, "IngressMetric", None, "", None),
            ],
            datapath_actions: vec!["ct(zone=65520),recirc(0x1)".into(), "drop".into()],
        };
        let text = render(&a);
        assert_eq!(
            text,
            "Dropped by rule \"x\".\n\nPacket: in_port=21,tcp\n\nPath:\n\
             \x20  0 PipelineRootClassifier     priority 200, ip\n\
             \x20 -- conntrack: resumed as a new connection (trk,new) --\n\
             \x20 10 AntreaPolicyIngressRule    priority 14900, conj_id=7\n\
             \x20    -> rule \"x\"\n\
             \x20 13 IngressMetric              no flow matched\n\
             Datapath actions: ct(zone=65520),recirc(0x1) | drop\n"
        );
    }

    #[test]
    fn no_agent_is_an_error_naming_the_socket() {
        let e = run_trace(&args()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent.sock"), "{e}");
    }
}
