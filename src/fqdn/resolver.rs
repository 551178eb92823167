//! The re-query worker: asks the DNS server for the names the controller hands it (A and AAAA)
//! and hands the answers back. It runs on a thread of its own, so a slow or silent server never
//! delays a paused DNS response; the controller never waits for it either (both directions are
//! unbounded channels).
//!
//! The server is `dnsServerOverride` when set, else the first reachable `nameserver` of the VM's
//! `/etc/resolv.conf` (read again for every name, so an edited file counts at once; glibc's
//! defaults when it names none). The agent runs in the VM's network namespace, so a query leaves
//! through the VM's own interface like any of the VM's DNS traffic: it passes the VM's egress
//! policy, and its answer, when it comes from port 53 through an intercepted interface, is
//! paused and handled by the controller like the VM's own answers. That cannot deadlock: this
//! thread waits for the answer, the controller thread releases it. The local ports of the
//! queries in flight are published ([`OwnPorts`]) so that the controller can tell its own
//! answers from the VM's (an answer to a re-query does not make its name recently used).
//!
//! Queries are encoded and answers decoded with `hickory-proto`; UDP first, TCP when the answer
//! is truncated; 2 s per server and query type.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, warn};

use super::dns::{self, Answer};
use crate::policy::fqdn_selector::normalize;

/// How long one server gets to answer one query.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Queries in flight at once.
const MAX_CONCURRENT: usize = 32;
/// Servers of `/etc/resolv.conf` used, as glibc (MAXNS).
const MAX_NAMESERVERS: usize = 3;

/// Why a name could not be asked again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no DNS server: {0}")]
    NoServer(String),
    #[error("{server}: {why}")]
    Server { server: SocketAddr, why: String },
    #[error("cannot encode the query for {0}: {1}")]
    Encode(String, String),
}

/// Where the re-queries go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerSource {
    /// `dnsServerOverride` (`host:port`).
    Override(String),
    /// A `resolv.conf` file (`/etc/resolv.conf`).
    ResolvConf(PathBuf),
}

/// The answer to one re-query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub name: String,
    /// When the answer arrived (milliseconds since the Unix epoch): expiries count from it.
    pub received_ms: u64,
    /// The addresses (possibly none: the name no longer resolves), or why there is no answer.
    pub answers: Result<Vec<Answer>, ResolveError>,
}

/// Local ports of the re-queries in flight (UDP and TCP).
#[derive(Clone, Debug, Default)]
pub struct OwnPorts(Arc<Mutex<BTreeSet<u16>>>);

impl OwnPorts {
    pub fn contains(&self, port: u16) -> bool {
        self.0.lock().map(|p| p.contains(&port)).unwrap_or(false)
    }

    fn hold(&self, port: u16) -> PortGuard {
        if let Ok(mut p) = self.0.lock() {
            p.insert(port);
        }
        PortGuard {
            ports: self.clone(),
            port,
        }
    }
}

struct PortGuard {
    ports: OwnPorts,
    port: u16,
}

impl Drop for PortGuard {
    fn drop(&mut self) {
        if let Ok(mut p) = self.ports.0.lock() {
            p.remove(&self.port);
        }
    }
}

/// The `nameserver` addresses of a `resolv.conf` (port 53), at most three, in order. Scoped
/// IPv6 addresses (`fe80::1%eth0`) are skipped.
pub fn nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .take(MAX_NAMESERVERS)
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Starts the worker on a thread of its own: it answers every name received on `requests` on
/// `outcomes`, until `requests` closes.
pub fn spawn(
    source: ServerSource,
    requests: mpsc::UnboundedReceiver<String>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    own_ports: OwnPorts,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("fqdn-requery".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    warn!("FQDN re-query worker cannot start its runtime: {e}; names expire unless the VM asks again");
                    return;
                }
            };
            rt.block_on(run(source, requests, outcomes, own_ports));
        })
}

/// The worker loop (for tests: run it on any runtime).
pub async fn run(
    source: ServerSource,
    mut requests: mpsc::UnboundedReceiver<String>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    own_ports: OwnPorts,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    let source = Arc::new(source);
    while let Some(name) = requests.recv().await {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (source, outcomes, own_ports) = (Arc::clone(&source), outcomes.clone(), own_ports.clone());
        tokio::spawn(async move {
            let answers = resolve(&source, &name, &own_ports).await;
            if let Err(e) = &answers {
                debug!(name = %name, "FQDN re-query failed: {e}");
            }
            let _ = outcomes.send(Outcome {
                name,
                received_ms: now_ms(),
                answers,
            });
            drop(permit);
        });
    }
}

/// The servers to ask, in order.
async fn servers(source: &ServerSource) -> Result<Vec<SocketAddr>, ResolveError> {
    match source {
        ServerSource::Override(host_port) => {
            if let Ok(addr) = host_port.parse::<SocketAddr>() {
                return Ok(vec![addr]);
            }
            let found: Vec<SocketAddr> = tokio::net::lookup_host(host_port.as_str())
                .await
                .map_err(|e| ResolveError::NoServer(format!("dnsServerOverride {host_port}: {e}")))?
                .take(MAX_NAMESERVERS)
                .collect();
            if found.is_empty() {
                return Err(ResolveError::NoServer(format!(
                    "dnsServerOverride {host_port} has no address"
                )));
            }
            Ok(found)
        }
        ServerSource::ResolvConf(path) => {
            let text = match tokio::fs::read_to_string(path).await {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(ResolveError::NoServer(format!("{}: {e}", path.display()))),
            };
            let found = nameservers(&text);
            if found.is_empty() {
                // glibc's default when the file names no server.
                return Ok(vec![
                    SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 53),
                    SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 53),
                ]);
            }
            Ok(found)
        }
    }
}

/// Asks for `name`'s A and AAAA records. Succeeds when at least one of the two was answered
/// (an empty answer or NXDOMAIN is an answer: the name has no such address).
pub async fn resolve(
    source: &ServerSource,
    name: &str,
    own_ports: &OwnPorts,
) -> Result<Vec<Answer>, ResolveError> {
    let servers = servers(source).await?;
    let mut all = Vec::new();
    let mut last_error = None;
    let mut answered = false;
    for qtype in [RecordType::A, RecordType::AAAA] {
        let mut this_type = Err(ResolveError::NoServer("none".into()));
        for &server in &servers {
            this_type = ask(server, name, qtype, own_ports).await;
            if this_type.is_ok() {
                break;
            }
        }
        match this_type {
            Ok(a) => {
                answered = true;
                all.extend(a);
            }
            Err(e) => last_error = Some(e),
        }
    }
    match (answered, last_error) {
        (false, Some(e)) => Err(e),
        _ => Ok(all),
    }
}

/// One query to one server: UDP, then TCP if the answer was truncated.
async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    own_ports: &OwnPorts,
) -> Result<Vec<Answer>, ResolveError> {
    let fail = |why: String| ResolveError::Server { server, why };
    let id: u16 = rand::random();
    let query = encode(name, qtype, id)?;
    let mut response = tokio::time::timeout(QUERY_TIMEOUT, udp_exchange(server, &query, id, own_ports))
        .await
        .map_err(|_| fail(format!("no answer within {QUERY_TIMEOUT:?} (UDP)")))?
        .map_err(|e| fail(format!("UDP: {e}")))?;
    if truncated(&response) {
        response = tokio::time::timeout(QUERY_TIMEOUT, tcp_exchange(server, &query, own_ports))
            .await
            .map_err(|_| fail(format!("no answer within {QUERY_TIMEOUT:?} (TCP)")))?
            .map_err(|e| fail(format!("TCP: {e}")))?;
    }
    check_response(&response, id, name).map_err(fail)?;
    dns::answers(&response).map_err(|e| fail(e.to_string()))
}

fn encode(name: &str, qtype: RecordType, id: u16) -> Result<Vec<u8>, ResolveError> {
    let bad = |e: String| ResolveError::Encode(name.to_owned(), e);
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    let fqdn = Name::from_str(&format!("{name}.")).map_err(|e| bad(e.to_string()))?;
    m.add_query(Query::query(fqdn, qtype));
    m.to_vec().map_err(|e| bad(e.to_string()))
}

fn truncated(response: &[u8]) -> bool {
    response.len() >= 3 && response[2] & 0x02 != 0
}

/// The response answers our query: same id, a response, our question, NOERROR or NXDOMAIN.
fn check_response(response: &[u8], id: u16, name: &str) -> Result<(), String> {
    let m = Message::from_vec(response).map_err(|e| format!("malformed answer: {e}"))?;
    if m.metadata.id != id || m.metadata.message_type != MessageType::Response {
        return Err("answer for another query".into());
    }
    if !m.queries.iter().any(|q| normalize(&q.name.to_ascii()) == name) {
        return Err("answer for another name".into());
    }
    match m.metadata.response_code {
        ResponseCode::NoError | ResponseCode::NXDomain => Ok(()),
        other => Err(format!("server answered {other}")),
    }
}

async fn udp_exchange(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    own_ports: &OwnPorts,
) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(bind).await?;
    let _held = own_ports.hold(socket.local_addr()?.port());
    socket.connect(server).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Anything but the answer to this query (a late answer to an earlier one) is ignored.
        if n >= 12 && buf[..2] == id.to_be_bytes() && buf[2] & 0x80 != 0 {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn tcp_exchange(server: SocketAddr, query: &[u8], own_ports: &OwnPorts) -> std::io::Result<Vec<u8>> {
    let socket = if server.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    })?;
    let _held = own_ports.hold(socket.local_addr()?.port());
    let mut stream = socket.connect(server).await?;
    let len = u16::try_from(query.len()).map_err(|_| std::io::Error::other("query too long"))?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    stream.write_all(&framed).await?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_gives_up_to_three_unscoped_servers_in_order() {
        let text = "# generated\nsearch example.test\nnameserver 10.0.0.2\noptions ndots:2\n\
                    nameserver fe80::1%eth0\nnameserver fd00::53 # v6\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n\
                    nameserver\n";
        assert_eq!(
            nameservers(text),
            vec![
                "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
                "[fd00::53]:53".parse().unwrap(),
                "10.0.0.3:53".parse().unwrap(),
            ]
        );
        assert!(nameservers("").is_empty());
    }

    #[test]
    fn responses_must_answer_our_query() {
        use hickory_proto::rr::{rdata::A, RData, Record};
        let query = encode("a.example.test", RecordType::A, 7).unwrap();
        let mut m = Message::from_vec(&query).unwrap();
        m.metadata.message_type = MessageType::Response;
        m.add_answer(Record::from_rdata(
            Name::from_str("a.example.test.").unwrap(),
            30,
            RData::A(A::new(10, 0, 0, 1)),
        ));
        let ok = m.to_vec().unwrap();
        assert_eq!(check_response(&ok, 7, "a.example.test"), Ok(()));
        assert!(check_response(&ok, 8, "a.example.test").is_err());
        assert!(check_response(&ok, 7, "b.example.test").is_err());
        assert_eq!(dns::answers(&ok).unwrap().len(), 1);
        m.metadata.response_code = ResponseCode::ServFail;
        let servfail = m.to_vec().unwrap();
        assert!(check_response(&servfail, 7, "a.example.test").is_err());
        assert!(!truncated(&ok));
    }

    /// A real exchange with a UDP server on the loopback, which answers truncated first, so the
    /// TCP path is taken too.
    #[tokio::test]
    async fn a_truncated_udp_answer_is_asked_again_over_tcp() {
        use hickory_proto::rr::{rdata::A, RData, Record};
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = udp.local_addr().unwrap().port();
        let tcp = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let answer = |q: &[u8], tc: bool| {
            let mut m = Message::from_vec(q).unwrap();
            m.metadata.message_type = MessageType::Response;
            m.metadata.truncation = tc;
            if !tc && m.queries[0].query_type() == RecordType::A {
                m.add_answer(Record::from_rdata(
                    m.queries[0].name().clone(),
                    5,
                    RData::A(A::new(10, 1, 2, 3)),
                ));
            }
            m.to_vec().unwrap()
        };
        let own = OwnPorts::default();
        let own_seen = own.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let (n, from) = udp.recv_from(&mut buf).await.unwrap();
                assert!(own_seen.contains(from.port()), "the query's port is published");
                udp.send_to(&answer(&buf[..n], true), from).await.unwrap();
            }
        });
        tokio::spawn(async move {
            loop {
                let (mut s, _) = tcp.accept().await.unwrap();
                let mut len = [0u8; 2];
                s.read_exact(&mut len).await.unwrap();
                let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                s.read_exact(&mut q).await.unwrap();
                let a = answer(&q, false);
                let mut framed = (a.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&a);
                s.write_all(&framed).await.unwrap();
            }
        });
        let source = ServerSource::Override(format!("127.0.0.1:{port}"));
        let got = resolve(&source, "x.example.test", &own).await.unwrap();
        assert_eq!(
            got,
            vec![Answer {
                name: "x.example.test".into(),
                ip: "10.1.2.3".parse().unwrap(),
                ttl: 5
            }]
        );
        assert!(own.0.lock().unwrap().is_empty(), "ports are released");
        // Nobody listening: an error naming the server.
        let closed = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead = closed.local_addr().unwrap();
        drop(closed);
        let err = resolve(&ServerSource::Override(dead.to_string()), "x.example.test", &own)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ResolveError::Server { server, .. } if server == dead),
            "{err}"
        );
    }
}
