//! The controller against a fake switch: the order between the installer's placement
//! publications and DNS answers (the first-connection race), and the catch-up after a commit, a
//! withdrawn bundle and a removed rule.

use std::net::Ipv4Addr;
use std::time::Duration;

use hickory_proto::rr::rdata::A;
use hickory_proto::rr::RData;

use super::*;
use crate::fqdn::dns::tests::{record, response, udp_frame};
use crate::ovs::openflow::fake::FakeConnector;
use crate::ovs::openflow::{Action, Flow, Match};
use crate::ovs::vswitchd::FakeDatapathCache;
use crate::policy::pipeline::table;

const RULE_PRIORITY: u16 = 14_000;

fn rule(conj_id: u32, selector: &str) -> FqdnPlacement {
    FqdnPlacement {
        conj_id,
        table: table::ANTREA_POLICY_EGRESS_RULE,
        priority: RULE_PRIORITY,
        n_clauses: 3,
        selectors: vec![selector.to_string()],
    }
}

/// A paused DNS response for `name` with one A record.
fn answer(name: &str, ip: Ipv4Addr) -> Event {
    let dns = response(name, vec![record(name, 300, RData::A(A(ip)))]);
    let frame = udp_frame(&dns);
    Event::PacketIn(Box::new(PacketIn {
        total_len: frame.len() as u32,
        packet: frame,
        buffer_id: None,
        table_id: table::ANTREA_POLICY_INGRESS_RULE,
        cookie: u64::MAX,
        reason: 1,
        metadata: Match::new(),
        other_metadata: vec![],
        userdata: vec![category::DNS],
        continuation: Some(vec![0; 8]),
        metadata_raw: vec![],
    }))
}

/// The conjunction ids of the FQDN clause flow of `ip`, if the switch holds one.
fn clause_conjunctions(switch: &FakeConnector, ip: Ipv4Addr) -> Option<Vec<u32>> {
    let wanted = flows::clause_match(IpAddr::V4(ip));
    switch
        .flows()
        .into_iter()
        .find(|f: &Flow| f.cookie == FQDN_COOKIE && f.priority == RULE_PRIORITY && f.matches == wanted)
        .map(|f| {
            f.actions
                .iter()
                .filter_map(|a| match a {
                    Action::Conjunction { id, .. } => Some(*id),
                    _ => None,
                })
                .collect()
        })
}

/// What the switch showed when the controller evicted the datapath's cached flows toward some
/// addresses: for each address, whether its clause flow was there, and how many answers had been
/// released.
#[derive(Clone, Debug, PartialEq)]
struct Eviction {
    ips: Vec<IpAddr>,
    clause_flows_in: Vec<bool>,
    released_before: usize,
}

struct Running {
    handle: FqdnHandle,
    connector: FakeConnector,
    evictions: Arc<Mutex<Vec<Eviction>>>,
    _requests: mpsc::UnboundedReceiver<String>,
    _outcomes: mpsc::UnboundedSender<Outcome>,
    _state_dir: tempfile::TempDir,
}

async fn start() -> Running {
    let handle = FqdnHandle::default();
    let connector = FakeConnector::new();
    let evictions = Arc::new(Mutex::new(Vec::new()));
    let datapath = {
        let (connector, evictions) = (connector.clone(), Arc::clone(&evictions));
        FakeDatapathCache::with_hook(move |ips| {
            let seen = Eviction {
                ips: ips.to_vec(),
                clause_flows_in: ips
                    .iter()
                    .map(|ip| match ip {
                        IpAddr::V4(v4) => clause_conjunctions(&connector, *v4).is_some(),
                        IpAddr::V6(_) => false,
                    })
                    .collect(),
                released_before: connector.current().map_or(0, |f| f.resumed().len()),
            };
            evictions.lock().expect("evictions").push(seen);
        })
    };
    let state_dir = tempfile::tempdir().expect("tempdir");
    let (requests, requests_rx) = mpsc::unbounded_channel();
    let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
    let link = RequeryLink {
        requests,
        outcomes,
        own_ports: OwnPorts::default(),
    };
    let config = ControllerConfig {
        min_ttl_secs: 0,
        dns_server: ServerSource::Override("127.0.0.1:1".into()),
        state_dir: state_dir.path().to_path_buf(),
        reconnect: RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(50)),
        datapath: Arc::new(datapath),
    };
    tokio::spawn(run(handle.clone(), Arc::new(connector.clone()), config, link));
    wait_for("the controller's connection", || connector.current().is_some()).await;
    Running {
        handle,
        connector,
        evictions,
        _requests: requests_rx,
        _outcomes: outcomes_tx,
        _state_dir: state_dir,
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

fn inject(r: &Running, ev: Event) {
    r.connector.current().expect("connected").inject(ev);
}

#[tokio::test]
async fn an_answer_queued_with_a_placement_change_is_answered_against_the_new_rules() {
    let r = start().await;
    r.handle.publish_placements(vec![]);
    // The rule bundle's placements are published as it leaves, and the VM's answer arrives
    // before the controller had a turn: both are queued when it next looks.
    let ip = Ipv4Addr::new(10, 1, 2, 3);
    r.handle.publish_pending(&[rule(11, "*.allowed.test")]);
    inject(&r, answer("a.allowed.test", ip));
    let fake = r.connector.current().expect("connected");
    wait_for("the answer resumed", || fake.resumed().len() == 1).await;
    // Resumed only after the address flow was committed: it is there now.
    assert_eq!(clause_conjunctions(&r.connector, ip), Some(vec![11]));
    assert_eq!(r.handle.stats.snapshot().holds_total, 1);
}

#[tokio::test]
async fn cached_datapath_flows_toward_a_new_address_go_after_its_commit_and_before_the_release() {
    let r = start().await;
    r.handle.publish_placements(vec![rule(11, "*.allowed.test")]);
    let fake = r.connector.current().expect("connected");
    let first = Ipv4Addr::new(10, 1, 2, 3);
    inject(&r, answer("a.allowed.test", first));
    wait_for("the first answer resumed", || fake.resumed().len() == 1).await;
    // The same answer again changes no flow: nothing to evict.
    inject(&r, answer("a.allowed.test", first));
    let second = Ipv4Addr::new(10, 1, 2, 4);
    inject(&r, answer("b.allowed.test", second));
    wait_for("the answers resumed", || fake.resumed().len() == 3).await;
    let seen = r.evictions.lock().expect("evictions").clone();
    assert_eq!(
        seen,
        vec![
            Eviction {
                ips: vec![IpAddr::V4(first)],
                clause_flows_in: vec![true],
                released_before: 0,
            },
            Eviction {
                ips: vec![IpAddr::V4(second)],
                clause_flows_in: vec![true],
                released_before: 2,
            },
        ]
    );
}

#[tokio::test]
async fn pending_placements_get_flows_until_withdrawn_and_committed_ones_after() {
    let r = start().await;
    let committed = vec![rule(11, "*.allowed.test")];
    r.handle.publish_placements(committed.clone());
    let ip = Ipv4Addr::new(10, 1, 2, 3);
    inject(&r, answer("a.allowed.test", ip));
    let fake = r.connector.current().expect("connected");
    wait_for("the first answer resumed", || fake.resumed().len() == 1).await;
    assert_eq!(clause_conjunctions(&r.connector, ip), Some(vec![11]));

    // A bundle moving the name to a second rule is on its way: the union gets the flows, the
    // committed rule keeps its own.
    let next = vec![rule(12, "a.allowed.test")];
    r.handle.publish_pending(&next);
    wait_for("the pending rule's address flow", || {
        clause_conjunctions(&r.connector, ip) == Some(vec![11, 12])
    })
    .await;
    let other = Ipv4Addr::new(10, 1, 2, 4);
    inject(&r, answer("b.allowed.test", other));
    wait_for("the second answer resumed", || fake.resumed().len() == 2).await;
    assert_eq!(clause_conjunctions(&r.connector, other), Some(vec![11]));

    // The switch refused it: only the committed rule stands.
    r.handle.withdraw_pending();
    wait_for("the withdrawn rule's flow removed", || {
        clause_conjunctions(&r.connector, ip) == Some(vec![11])
    })
    .await;

    // Sent again and committed: the old rule's flows go, the new rule's stay.
    r.handle.publish_pending(&next);
    r.handle.publish_placements(next);
    wait_for("the committed placements reconciled", || {
        clause_conjunctions(&r.connector, ip) == Some(vec![12])
            && clause_conjunctions(&r.connector, other).is_none()
    })
    .await;
}

#[tokio::test]
async fn address_flows_the_installer_wrote_from_a_stale_snapshot_are_taken_over_and_removed() {
    let r = start().await;
    let placements = vec![rule(11, "*.allowed.test")];
    r.handle.publish_placements(placements.clone());
    let fake = r.connector.current().expect("connected");
    let cached = Ipv4Addr::new(10, 1, 2, 3);
    inject(&r, answer("a.allowed.test", cached));
    wait_for("the answer resumed", || fake.resumed().len() == 1).await;

    // The installer's take-over bundle carried the address flows of its snapshot of the cache,
    // which still had a record the cache has dropped since.
    let stale = Ipv4Addr::new(10, 9, 9, 9);
    let record = |name: &str, ip: Ipv4Addr| CacheRecord {
        name: name.into(),
        ip: IpAddr::V4(ip),
        expires_at_ms: now_ms() + 600_000,
    };
    let mut snapshot = FqdnCache::new(0);
    snapshot.load(
        vec![
            record("a.allowed.test", cached),
            record("gone.allowed.test", stale),
        ],
        now_ms(),
    );
    let mods = flows::flows_for_new_placements(&[], &placements, &snapshot);
    fake.bundle(mods).await.expect("the installer's bundle");
    assert_eq!(clause_conjunctions(&r.connector, stale), Some(vec![11]));

    // The placements are the same, so only the notice that the bundle wrote address flows makes
    // the controller re-read the switch: the stale flow goes, the cached name's stays.
    r.handle.publish_placements_after_flows(placements);
    wait_for("the stale address flow removed", || {
        clause_conjunctions(&r.connector, stale).is_none()
    })
    .await;
    assert_eq!(clause_conjunctions(&r.connector, cached), Some(vec![11]));
}

#[test]
fn publications_send_only_changes_and_the_union_counts_each_rule_once() {
    let handle = FqdnHandle::default();
    let mut rx = handle.placements.subscribe();
    assert_eq!(handle.placements.borrow().union(), None);
    let a = vec![rule(1, "a.test")];
    handle.publish_placements(a.clone());
    assert!(rx.has_changed().unwrap_or(false));
    rx.mark_unchanged();
    // Pending equal to committed, or a second withdraw: nothing to tell.
    handle.publish_pending(&a);
    handle.withdraw_pending();
    assert!(!rx.has_changed().unwrap_or(true));
    let b = vec![rule(1, "a.test"), rule(2, "*.b.test")];
    handle.publish_pending(&b);
    assert!(rx.has_changed().unwrap_or(false));
    rx.mark_unchanged();
    handle.publish_pending(&b);
    assert!(!rx.has_changed().unwrap_or(true));
    assert_eq!(handle.placements.borrow().union(), Some(b.clone()));
    handle.publish_placements(b.clone());
    let now = handle.placements.borrow().clone();
    assert_eq!((now.committed.as_deref(), now.pending), (Some(&b), None));
}

#[test]
fn a_rule_changed_in_place_keeps_its_committed_version_until_the_commit() {
    let handle = FqdnHandle::default();
    let old = rule(11, "*.a.test");
    let moved = rule(12, "*.m.test");
    handle.publish_placements(vec![old.clone(), moved.clone()]);
    // Rule 11 changes its selectors in place, rule 12 moves, rule 13 is new.
    let changed = rule(11, "*.b.test");
    let mut moved_to = moved.clone();
    moved_to.priority += 1;
    let new = rule(13, "*.n.test");
    handle.publish_pending(&[changed, moved_to.clone(), new.clone()]);
    let mut want = vec![old, moved.clone(), moved_to, new];
    want.sort();
    assert_eq!(handle.placements.borrow().union(), Some(want));
}
