//! OVS's own limit for the lab benches: a recording proxy in front of a bridge's OpenFlow
//! management socket (the agent talks to OVS through it, every byte it sends is kept), the
//! extraction of one bundle's exact messages from that recording, and their raw replay into
//! the switch (hello, then every byte in one go, then wait for the commit reply). Nothing is
//! decoded beyond the OpenFlow header and the bundle id, so the replay costs OVS exactly what
//! the agent's bundle cost it, and our process next to nothing.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OFP15: u8 = 6;
const T_HELLO: u8 = 0;
const T_ERROR: u8 = 1;
const T_ECHO_REQUEST: u8 = 2;
const T_ECHO_REPLY: u8 = 3;
const T_BUNDLE_CONTROL: u8 = 33;
const T_BUNDLE_ADD: u8 = 34;
const BUNDLE_OPEN_REQUEST: u16 = 0;
const BUNDLE_COMMIT_REQUEST: u16 = 4;
const BUNDLE_COMMIT_REPLY: u16 = 5;

/// Everything clients sent through the proxy, one buffer per connection, in accept order.
pub type Recording = Arc<Mutex<Vec<Vec<u8>>>>;

/// A unix socket at `path` that forwards every connection to `target` and records what the
/// client sends. Runs until the process exits (its threads are detached).
pub fn recording_proxy(path: &Path, target: PathBuf) -> Recording {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).unwrap_or_else(|e| panic!("bind {}: {e}", path.display()));
    let rec: Recording = Arc::default();
    let shared = rec.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = UnixStream::connect(&target) else {
                continue;
            };
            let slot = {
                let mut all = shared.lock().unwrap_or_else(|e| e.into_inner());
                all.push(Vec::new());
                all.len() - 1
            };
            let (Ok(mut c_rd), Ok(mut s_wr)) = (client.try_clone(), server.try_clone()) else {
                continue;
            };
            let (mut s_rd, mut c_wr) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s_rd, &mut c_wr);
                let _ = c_wr.shutdown(std::net::Shutdown::Both);
            });
            let rec = shared.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    match c_rd.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s_wr.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            let mut all = rec.lock().unwrap_or_else(|e| e.into_inner());
                            all[slot].extend_from_slice(&buf[..n]);
                        }
                    }
                }
                let _ = s_wr.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    rec
}

/// The OpenFlow messages of a byte stream (a trailing partial message is ignored).
fn messages(stream: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = stream.get(at..at + 8)?;
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let msg = stream.get(at..at + len.max(8))?;
        at += len.max(8);
        Some(msg)
    })
}

fn bundle_id(msg: &[u8]) -> Option<u32> {
    msg.get(8..12)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn control_type(msg: &[u8]) -> Option<u16> {
    msg.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// One committed bundle of the recording: its open, adds and commit, byte for byte.
pub struct RecordedBundle {
    pub bytes: Vec<u8>,
    /// Its bundle_add messages.
    pub adds: usize,
}

/// Every committed bundle of the recording, per connection (in accept order), each connection's
/// in the order their commits were sent.
pub fn committed_bundles(rec: &Recording) -> Vec<Vec<RecordedBundle>> {
    let all = rec.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for stream in all.iter() {
        let mut committed = Vec::new();
        // Per bundle id on this connection: the bytes so far and the number of adds.
        let mut open: std::collections::HashMap<u32, RecordedBundle> = Default::default();
        for msg in messages(stream) {
            match msg[1] {
                T_BUNDLE_CONTROL => {
                    let (Some(id), Some(ctrl)) = (bundle_id(msg), control_type(msg)) else {
                        continue;
                    };
                    if ctrl == BUNDLE_OPEN_REQUEST {
                        let bytes = msg.to_vec();
                        open.insert(id, RecordedBundle { bytes, adds: 0 });
                    } else if ctrl == BUNDLE_COMMIT_REQUEST {
                        if let Some(mut bundle) = open.remove(&id) {
                            bundle.bytes.extend_from_slice(msg);
                            committed.push(bundle);
                        }
                    } else {
                        open.remove(&id);
                    }
                }
                T_BUNDLE_ADD => {
                    if let Some(bundle) = bundle_id(msg).and_then(|id| open.get_mut(&id)) {
                        bundle.bytes.extend_from_slice(msg);
                        bundle.adds += 1;
                    }
                }
                _ => {}
            }
        }
        out.push(committed);
    }
    out
}

/// The largest committed bundle of the recording (by number of bundle_add messages): its open,
/// adds and commit, byte for byte, and the number of adds.
pub fn largest_bundle(rec: &Recording) -> Option<(Vec<u8>, usize)> {
    committed_bundles(rec)
        .into_iter()
        .flatten()
        .fold(None::<RecordedBundle>, |best, b| match best {
            Some(best) if best.adds >= b.adds => Some(best),
            _ => Some(b),
        })
        .map(|b| (b.bytes, b.adds))
}

/// How many bundles each connection of the recording has committed so far.
pub fn bundle_marks(rec: &Recording) -> Vec<usize> {
    committed_bundles(rec).iter().map(Vec::len).collect()
}

/// The bundles committed since `marks` ([`bundle_marks`]), connection by connection, each
/// connection's in order.
pub fn bundles_since(rec: &Recording, marks: &[usize]) -> Vec<RecordedBundle> {
    committed_bundles(rec)
        .into_iter()
        .enumerate()
        .flat_map(|(c, bundles)| bundles.into_iter().skip(marks.get(c).copied().unwrap_or(0)))
        .collect()
}

fn read_msg(s: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head)?;
    let len = usize::from(u16::from_be_bytes([head[2], head[3]])).max(8);
    let mut msg = head.to_vec();
    msg.resize(len, 0);
    s.read_exact(&mut msg[8..])?;
    Ok(msg)
}

/// A fresh OpenFlow 1.5 connection to the switch at `mgmt`, hellos exchanged.
fn connect(mgmt: &Path) -> Result<UnixStream, String> {
    let mut s = UnixStream::connect(mgmt).map_err(|e| format!("connect {}: {e}", mgmt.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(600)))
        .map_err(|e| e.to_string())?;
    s.write_all(&[OFP15, T_HELLO, 0, 8, 0, 0, 0, 1])
        .map_err(|e| format!("hello: {e}"))?;
    loop {
        let m = read_msg(&mut s).map_err(|e| format!("read hello: {e}"))?;
        if m[1] == T_HELLO {
            return Ok(s);
        }
    }
}

/// Sends `bundle` (open, adds, commit) to the switch at `mgmt` on a fresh connection and waits
/// for the commit reply: the time from the first byte sent to the reply. Fails on any error
/// message from the switch.
pub fn replay(mgmt: &Path, bundle: &[u8]) -> Result<Duration, String> {
    let s = connect(mgmt)?;
    send_and_await_commit(s, bundle)
}

/// Replays `bundles` one after the other on one connection (as the agent sends them: the next
/// only once the previous commit was answered) and returns each one's time from its first byte
/// to its commit reply.
pub fn replay_each(mgmt: &Path, bundles: &[RecordedBundle]) -> Result<Vec<Duration>, String> {
    let s = connect(mgmt)?;
    let mut times = Vec::with_capacity(bundles.len());
    for b in bundles {
        let s = s.try_clone().map_err(|e| e.to_string())?;
        times.push(send_and_await_commit(s, &b.bytes)?);
    }
    Ok(times)
}

/// Writes `bundle` on `s` (from another thread, so a large bundle cannot deadlock against the
/// switch's replies) and reads until its commit reply.
fn send_and_await_commit(mut s: UnixStream, bundle: &[u8]) -> Result<Duration, String> {
    let mut writer = s.try_clone().map_err(|e| e.to_string())?;
    let bytes = bundle.to_vec();
    let started = Instant::now();
    let sender = std::thread::spawn(move || writer.write_all(&bytes));
    let result = loop {
        let m = match read_msg(&mut s) {
            Ok(m) => m,
            Err(e) => break Err(format!("read: {e}")),
        };
        match m[1] {
            T_ECHO_REQUEST => {
                let mut reply = m.clone();
                reply[1] = T_ECHO_REPLY;
                if let Err(e) = s.write_all(&reply) {
                    break Err(format!("echo reply: {e}"));
                }
            }
            T_ERROR => break Err(format!("the switch refused a replayed message: {m:02x?}")),
            T_BUNDLE_CONTROL if control_type(&m) == Some(BUNDLE_COMMIT_REPLY) => break Ok(started.elapsed()),
            _ => {}
        }
    };
    match sender.join() {
        Ok(Ok(())) => result,
        Ok(Err(e)) => Err(format!("send the bundle: {e}")),
        Err(_) => Err("the sender thread panicked".into()),
    }
}
