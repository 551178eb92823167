//! Tests of the connection against a scripted switch on a unix socket: echo, EOF,
//! notifications to every subscriber, a full subscriber queue, malformed messages and version
//! negotiation.

use super::*;
use crate::ovs::openflow::wire::{begin_msg, end_msg, Writer};
use tokio::net::UnixListener;

fn reply(t: u8, xid: u32, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    let s = begin_msg(&mut w, t, xid);
    w.bytes(body);
    end_msg(&mut w, s).unwrap();
    w.into_vec()
}

/// A scripted switch: answers the handshake, barriers and echoes; after the first barrier
/// that follows the handshake it sends a packet-in and an echo request, checks the echo
/// reply, and hangs up.
async fn scripted_switch(listener: UnixListener) -> Result<(), String> {
    let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut barriers = 0;
    loop {
        let m = read_msg(&mut rd).await.map_err(|e| e.to_string())?;
        let (h, msg) = messages::decode_message(&m).map_err(|e| e.to_string())?;
        let out = match msg {
            Message::Hello { .. } => reply(msg_type::HELLO, h.xid, &[0, 1, 0, 8, 0, 0, 0, 0x42]),
            Message::Other {
                msg_type: msg_type::FEATURES_REQUEST,
                ..
            } => {
                let mut body = vec![0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 254, 0, 0, 0];
                body.extend_from_slice(&[0, 0, 0, 0x4f, 0, 0, 0, 0]);
                reply(msg_type::FEATURES_REPLY, h.xid, &body)
            }
            Message::EchoRequest(d) => reply(msg_type::ECHO_REPLY, h.xid, &d),
            Message::EchoReply(d) => {
                if h.xid != 0x55 || d != b"hi" {
                    return Err(format!("bad echo reply {h:?} {d:?}"));
                }
                return Ok(()); // hang up
            }
            Message::BarrierRequest => {
                barriers += 1;
                let mut out = reply(msg_type::BARRIER_REPLY, h.xid, &[]);
                if barriers == 2 {
                    out.extend(reply(msg_type::PACKET_IN, 0, &[1, 2, 3]));
                    out.extend(reply(msg_type::ECHO_REQUEST, 0x55, b"hi"));
                }
                out
            }
            _ => continue,
        };
        wr.write_all(&out).await.map_err(|e| e.to_string())?;
    }
}

#[tokio::test]
async fn answers_echo_ignores_async_and_notices_eof() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("br.mgmt");
    let listener = UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(scripted_switch(listener));
    let sw = tokio::time::timeout(
        Duration::from_secs(10),
        OfConnection::connect(&path, 9, ConnOptions::default()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(sw.features().datapath_id, 7);
    assert_eq!(sw.features().n_tables, 254);
    tokio::time::timeout(Duration::from_secs(10), sw.barrier())
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), sw.closed())
        .await
        .unwrap();
    assert!(matches!(sw.barrier().await, Err(OfError::Closed)));
}

#[tokio::test]
async fn connect_error_names_the_socket() {
    let e = OfConnection::connect(Path::new("/nonexistent/br.mgmt"), 1, ConnOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/br.mgmt"), "{e}");
}

/// A scripted switch that completes the handshake and, at the first barrier after it,
/// sends `script` (then the barrier reply), then keeps answering barriers and echoes.
async fn script_switch(listener: UnixListener, script: Vec<Vec<u8>>) -> Result<(), String> {
    let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut barriers = 0;
    let mut script = Some(script);
    loop {
        let Ok(m) = read_msg(&mut rd).await else {
            return Ok(()); // the client hung up
        };
        let (h, msg) = messages::decode_message(&m).map_err(|e| e.to_string())?;
        let out = match msg {
            Message::Hello { .. } => reply(msg_type::HELLO, h.xid, &[0, 1, 0, 8, 0, 0, 0, 0x40]),
            Message::Other {
                msg_type: msg_type::FEATURES_REQUEST,
                ..
            } => reply(msg_type::FEATURES_REPLY, h.xid, &[0; 24]),
            Message::EchoRequest(d) => reply(msg_type::ECHO_REPLY, h.xid, &d),
            Message::BarrierRequest => {
                barriers += 1;
                let mut out = Vec::new();
                if barriers == 2 {
                    for m in script.take().unwrap_or_default() {
                        out.extend(m);
                    }
                }
                out.extend(reply(msg_type::BARRIER_REPLY, h.xid, &[]));
                out
            }
            _ => continue,
        };
        wr.write_all(&out).await.map_err(|e| e.to_string())?;
    }
}

fn port(n: u32) -> super::super::events::PortStatus {
    super::super::events::PortStatus {
        reason: super::super::events::PortReason::Add,
        port: PortDesc {
            port_no: n,
            name: format!("p{n}"),
            ..PortDesc::default()
        },
    }
}

async fn scripted(
    script: Vec<Vec<u8>>,
    opts: ConnOptions,
) -> (tempfile::TempDir, OfConnection, JoinHandle<Result<(), String>>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("br.mgmt");
    let listener = UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(script_switch(listener, script));
    let sw = tokio::time::timeout(Duration::from_secs(10), OfConnection::connect(&path, 9, opts))
        .await
        .unwrap()
        .unwrap();
    (dir, sw, server)
}

#[tokio::test]
async fn notifications_reach_every_subscriber() {
    let pi = PacketIn {
        packet: vec![1, 2, 3],
        total_len: 3,
        buffer_id: None,
        table_id: 10,
        cookie: 0x1020000000000,
        reason: 0,
        metadata: super::super::flow::Match::new().in_port(20).reg(0, 0x400, None),
        other_metadata: Vec::new(),
        userdata: vec![1, 2],
        continuation: None,
        metadata_raw: Vec::new(),
    };
    let script = vec![
        messages::port_status(0, &port(5)).unwrap(),
        messages::packet_in2(0, &pi).unwrap(),
    ];
    let (_dir, sw, _server) = scripted(script, ConnOptions::default()).await;
    let mut a = sw.subscribe();
    let mut b = sw.subscribe();
    sw.barrier().await.unwrap();
    for sub in [&mut a, &mut b] {
        assert_eq!(sub.try_recv(), Some(Event::PortStatus(port(5))));
        match sub.try_recv() {
            Some(Event::PacketIn(got)) => {
                assert_eq!(got.metadata, pi.metadata);
                assert_eq!(
                    (got.table_id, got.cookie, got.userdata.clone()),
                    (10, pi.cookie, vec![1, 2])
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(sub.try_recv(), None);
    }
    assert_eq!(sw.dropped_events(), 0);
}

#[tokio::test]
async fn a_full_subscriber_queue_drops_and_counts() {
    let script = (1..=5)
        .map(|n| messages::port_status(0, &port(n)).unwrap())
        .collect();
    let opts = ConnOptions {
        event_queue: 2,
        ..ConnOptions::default()
    };
    let (_dir, sw, _server) = scripted(script, opts).await;
    let mut slow = sw.subscribe();
    sw.barrier().await.unwrap();
    assert_eq!(slow.dropped(), 3);
    assert_eq!(sw.dropped_events(), 3);
    assert_eq!(slow.try_recv(), Some(Event::PortStatus(port(1))));
    assert_eq!(slow.try_recv(), Some(Event::PortStatus(port(2))));
    assert_eq!(slow.try_recv(), None);
}

#[tokio::test]
async fn a_malformed_message_closes_the_connection() {
    // A port status whose port claims 80 bytes but the message holds 48.
    let mut bad = messages::port_status(0, &port(1)).unwrap();
    bad.truncate(8 + 8 + 40);
    let len = bad.len() as u16;
    bad[2..4].copy_from_slice(&len.to_be_bytes());
    bad[16 + 4..16 + 6].copy_from_slice(&80u16.to_be_bytes());
    assert!(messages::decode_message(&bad).is_err());
    let script = vec![messages::port_status(0, &port(7)).unwrap(), bad];
    let (_dir, sw, _server) = scripted(script, ConnOptions::default()).await;
    let mut sub = sw.subscribe();
    // The barrier reply follows the malformed message, so it never arrives.
    assert!(matches!(sw.barrier().await, Err(OfError::Closed)));
    tokio::time::timeout(Duration::from_secs(10), sw.closed())
        .await
        .unwrap();
    assert_eq!(sub.recv().await, Some(Event::PortStatus(port(7))));
    assert_eq!(
        sub.recv().await,
        None,
        "the subscription ends with the connection"
    );
    assert!(matches!(
        sw.dump_flows(super::super::flow::FlowFilter::all()).await,
        Err(OfError::Closed)
    ));
    // A subscription taken after the close ends at once.
    let mut late = sw.subscribe();
    assert_eq!(late.recv().await, None);
}

#[test]
fn hello_negotiation() {
    let h = |v| Header {
        version: v,
        msg_type: 0,
        length: 8,
        xid: 1,
    };
    assert!(check_hello(&h(6), &Message::Hello { versions: Some(0x42) }).is_ok());
    assert!(check_hello(&h(6), &Message::Hello { versions: None }).is_ok());
    let e = check_hello(&h(4), &Message::Hello { versions: Some(0x12) }).unwrap_err();
    assert!(e.to_string().contains("OpenFlow 1.0, 1.3 but not 1.5"), "{e}");
    assert!(check_hello(&h(1), &Message::Hello { versions: None }).is_err());
}
