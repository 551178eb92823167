//! The agent's Kubernetes-side components, in process, against the HTTPS emulator of
//! kube-apiserver + antrea-controller (`antrea_api_emulator`), each over the real
//! [`KubeApiClient`] built from the kubeconfigs the emulator writes (TLS verified, agent token,
//! RBAC of `deploy/kubernetes/vm-agent-rbac.yml` enforced):
//!
//! * [`KubeExternalNodeSource`]: 404 at start, create, irrelevant and relevant changes, watches
//!   closed by the server, expired history (410), injected 500s, delete;
//! * [`ControlplaneSource`]: snapshots, live ADDED/MODIFIED/patch/DELETED events, a controller
//!   restart with deletions while it is down, a group with a bad member (left out and named, the
//!   group and its patches applied), a 500 on open, and the fallback store written while connected
//!   and read when unreachable; swapped kubeconfigs (a clear error, never an absent ExternalNode);
//! * the reporter's writers: the AntreaAgentInfo heartbeat (never creating the object, 409 on a
//!   stale copy), NetworkPolicyStatus and NodeStatsSummary posts.
//!
//! Every test ends by checking that no request of the agent identity was refused (401/403).
//! The ExternalNode is the lab's: `vm1` in `vm-ns` with interface `eth0`, so its ExternalEntity
//! is `vm1-3e616` and the controller's node key is `vm-ns/vm1`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use antrea_vm_agent::actors::reporter::agent_conditions;
use antrea_vm_agent::k8s::agent_info::{
    self, heartbeat, AgentInfoError, AgentInfoInputs, NetworkPolicyControllerInfo, OvsdbProbe, UpdateKind,
};
use antrea_vm_agent::k8s::api::{ApiClient, Method};
use antrea_vm_agent::k8s::client::KubeApiClient;
use antrea_vm_agent::k8s::external_node::ExternalNodeObject;
use antrea_vm_agent::k8s::fallback::FallbackStore;
use antrea_vm_agent::k8s::{policy_status, stats_summary};
use antrea_vm_agent::messages::{ActorDetail, ActorStatus, FlowInstallerStatus, PolicyCacheStatus};
use antrea_vm_agent::policy::controlplane::Validate as _;
use antrea_vm_agent::policy::controlplane::{
    ControlplaneObject, Group, Kind, Member, MemberRef, MembersPatch, PortMatch, ValidObject,
};
use antrea_vm_agent::sources::controlplane_watch::{
    update_kind, watch_path, ControlplaneSource, ControlplaneTiming, WATCHED_KINDS,
};
use antrea_vm_agent::sources::kube_external_node::{KubeExternalNodeSource, WatchTiming};
use antrea_vm_agent::sources::{ExternalNodeSource, PolicySource, PolicyUpdate, SourceEvent};

use support::emulator::*;

/// Bound on every single wait.
const T: Duration = Duration::from_secs(10);
const NODE: &str = "vm1";
const NODE_KEY: &str = "vm-ns/vm1";
/// The ExternalEntity the controller derives from vm1's `eth0`.
const ENTITY: &str = "vm1-3e616";
/// vm2's ExternalEntity (interface `ens192`), a peer in AddressGroups.
const PEER_ENTITY: &str = "vm2-e8be5";
const CP: &str = "/apis/controlplane.antrea.io/v1beta2";

// === clients and checks common to every test ===

fn kube_api(env: &EmulatorEnv) -> Arc<dyn ApiClient> {
    Arc::new(KubeApiClient::from_kubeconfig(&env.kube_kubeconfig, "kube-apiserver").expect("kube client"))
}

fn controller_api(env: &EmulatorEnv) -> Arc<dyn ApiClient> {
    Arc::new(
        KubeApiClient::from_kubeconfig(&env.antrea_kubeconfig, "antrea-controller")
            .expect("controller client"),
    )
}

/// Every request came with a known token, and none of the agent's was refused: the bundled RBAC
/// allows everything these components do.
fn assert_rbac_allowed_everything(emu: &Emulator) {
    let calls = emu.calls();
    let agent = emu.agent_user();
    assert!(calls
        .iter()
        .any(|c| c.identity.as_deref() == Some(agent.as_str())));
    for c in &calls {
        assert!(c.identity.is_some(), "unauthenticated call: {c:?}");
        assert!(!matches!(c.status, 401 | 403), "refused call: {c:?}");
    }
}

fn ext_node(ips: &[&str], labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNode",
        "metadata": {"name": NODE, "namespace": VM_NS, "labels": labels, "annotations": annotations},
        "spec": {"interfaces": [{"name": "eth0", "ips": ips}]}
    })
}

/// vm2 in vm-ns with `ens192` (entity `vm2-e8be5`).
fn peer_node(ip: &str) -> Value {
    external_node(VM_NS, "vm2", "ens192", &[ip], &[])
}

// === ExternalNode source ===

fn fast_watch() -> WatchTiming {
    WatchTiming {
        initial_retry: Duration::from_millis(50),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        // Long enough that no server-side timeout ends a watch during a test.
        watch_timeout: Duration::from_secs(60),
        idle_grace: Duration::from_secs(30),
    }
}

/// The source's events, pulled continuously by a task as the ExternalNode watcher actor does
/// (the stream only makes progress, e.g. opens its watch, while it is polled).
struct EnEvents {
    rx: mpsc::UnboundedReceiver<SourceEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl EnEvents {
    fn spawn(source: &KubeExternalNodeSource) -> EnEvents {
        let mut stream = source.subscribe();
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        EnEvents { rx, task }
    }

    async fn next(&mut self) -> SourceEvent {
        tokio::time::timeout(T, self.rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no ExternalNode event within {T:?}"))
            .expect("the source stream ended")
    }

    /// Nothing was emitted beyond what the test consumed.
    fn assert_drained(&mut self) {
        if let Ok(event) = self.rx.try_recv() {
            panic!("unexpected ExternalNode event: {event:?}");
        }
    }
}

impl Drop for EnEvents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn present(event: SourceEvent) -> ExternalNodeObject {
    match event {
        SourceEvent::Present(obj) => *obj,
        other => panic!("expected Present, got {other:?}"),
    }
}

fn interface_ips(obj: &ExternalNodeObject) -> Vec<(String, Vec<String>)> {
    obj.spec
        .iter()
        .flat_map(|s| s.interfaces.iter())
        .map(|i| (i.name.clone(), i.ips.clone()))
        .collect()
}

fn eth0(ips: &[&str]) -> Vec<(String, Vec<String>)> {
    vec![("eth0".to_string(), ips.iter().map(|s| s.to_string()).collect())]
}

fn stored_rv(emu: &Emulator) -> String {
    let en = emu.external_node(VM_NS, NODE).expect("vm1 exists");
    en["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

/// The ExternalNode collection requests so far: (watches, lists).
fn en_collection_calls(emu: &Emulator, collection: &str) -> (Vec<RecordedCall>, Vec<RecordedCall>) {
    emu.calls()
        .into_iter()
        .filter(|c| c.path == collection && c.method == "GET")
        .partition(|c| c.query_param("watch").as_deref() == Some("true"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_node_source_follows_vm1_through_the_real_client() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    let source = KubeExternalNodeSource::new(kube_api(&env), VM_NS, NODE).with_timing(fast_watch());
    let collection = source.collection_path();
    let mut events = EnEvents::spawn(&source);

    // 404 at start: Absent, then the source watches for the object to appear.
    assert_eq!(events.next().await, SourceEvent::Absent);
    let get = emu
        .calls()
        .into_iter()
        .find(|c| c.path == source.object_path())
        .expect("the start-up GET");
    assert_eq!((get.method.as_str(), get.status), ("GET", 404));
    wait_for("the ExternalNode watch", T, || {
        !en_collection_calls(emu, &collection).0.is_empty()
    })
    .await;

    // Created: Present, with the object's interfaces and labels.
    emu.create_external_node(ext_node(&["10.99.0.2"], json!({"role": "db"}), json!({})))
        .expect("create vm1");
    let obj = present(events.next().await);
    assert_eq!(
        (obj.metadata.name.as_str(), obj.metadata.namespace.as_str()),
        (NODE, VM_NS)
    );
    assert_eq!(interface_ips(&obj), eth0(&["10.99.0.2"]));
    assert_eq!(obj.metadata.labels.get("role").map(String::as_str), Some("db"));
    let valid = obj.validate(NODE, VM_NS).expect("valid ExternalNode");
    assert_eq!(valid.interfaces[0].entity_name, ENTITY);

    // A change of fields the agent does not read (annotations): no event. The next event is the
    // one of the following change, so nothing was emitted in between.
    emu.apply_external_node(ext_node(
        &["10.99.0.2"],
        json!({"role": "db"}),
        json!({"note": "touched by an operator"}),
    ))
    .expect("annotate vm1");
    // A label change is part of the object as parsed (the source's documented contract), so it
    // is one Present with the interfaces unchanged.
    emu.apply_external_node(ext_node(&["10.99.0.2"], json!({"role": "web"}), json!({})))
        .expect("relabel vm1");
    let obj = present(events.next().await);
    assert_eq!(obj.metadata.labels.get("role").map(String::as_str), Some("web"));
    assert_eq!(interface_ips(&obj), eth0(&["10.99.0.2"]));

    // Interfaces changed: Present with the new IPs.
    emu.apply_external_node(ext_node(
        &["10.99.0.2", "fd00:99::2"],
        json!({"role": "web"}),
        json!({}),
    ))
    .expect("add an IPv6 address");
    let obj = present(events.next().await);
    assert_eq!(interface_ips(&obj), eth0(&["10.99.0.2", "fd00:99::2"]));

    // The server ends the watch: the source resumes from the last resourceVersion it saw, which
    // replays nothing, so the next event is the next change (no duplicate of the last state).
    let seen_rv = stored_rv(emu);
    let (watches_before, lists_before) = en_collection_calls(emu, &collection);
    assert!(emu.close_watches() >= 1);
    wait_for("the watch to be resumed", T, || {
        en_collection_calls(emu, &collection).0.len() > watches_before.len()
    })
    .await;
    let (watches, lists) = en_collection_calls(emu, &collection);
    let resumed = watches.last().expect("a resumed watch");
    assert_eq!(resumed.query_param("resourceVersion"), Some(seen_rv.clone()));
    assert_eq!(
        resumed.query_param("allowWatchBookmarks").as_deref(),
        Some("true")
    );
    assert_eq!(
        lists.len(),
        lists_before.len(),
        "a resumed watch needs no re-list"
    );
    emu.apply_external_node(ext_node(&["10.99.0.3"], json!({"role": "web"}), json!({})))
        .expect("move vm1 to 10.99.0.3");
    assert_eq!(interface_ips(&present(events.next().await)), eth0(&["10.99.0.3"]));

    // History compacted past the version the source holds: resuming answers 410 Expired, the
    // source re-lists (no event: nothing changed for vm1) and watches from the new version.
    let seen_rv = stored_rv(emu);
    emu.create_external_node(peer_node("10.99.0.4"))
        .expect("create vm2");
    emu.compact_kube_history();
    let (_, lists_before) = en_collection_calls(emu, &collection);
    emu.close_watches();
    wait_for("the re-list after 410", T, || {
        en_collection_calls(emu, &collection).1.len() > lists_before.len()
    })
    .await;
    let (watches, _) = en_collection_calls(emu, &collection);
    assert!(
        watches
            .iter()
            .any(|w| w.query_param("resourceVersion") == Some(seen_rv.clone())),
        "the source first tried to resume from {seen_rv}: {watches:?}"
    );
    wait_for("a watch from the re-listed version", T, || {
        en_collection_calls(emu, &collection).0.iter().any(|w| {
            w.query_param("resourceVersion")
                .and_then(|rv| rv.parse::<u64>().ok())
                .zip(seen_rv.parse::<u64>().ok())
                .is_some_and(|(rv, seen)| rv > seen)
        })
    })
    .await;
    emu.apply_external_node(ext_node(&["10.99.0.5"], json!({"role": "web"}), json!({})))
        .expect("move vm1 to 10.99.0.5");
    assert_eq!(interface_ips(&present(events.next().await)), eth0(&["10.99.0.5"]));

    // A 500 on the watch path: an Error naming the object, then the source re-lists and says
    // the (unchanged) state again so its consumer knows it is readable again.
    emu.fail_next(&collection, 1);
    emu.close_watches();
    match events.next().await {
        SourceEvent::Error(error) => {
            let message = error.to_string();
            assert!(message.contains("ExternalNode vm-ns/vm1"), "{message}");
            assert!(message.contains("500"), "{message}");
        }
        other => panic!("expected an Error after the injected 500, got {other:?}"),
    }
    assert_eq!(interface_ips(&present(events.next().await)), eth0(&["10.99.0.5"]));
    let failed: Vec<RecordedCall> = emu
        .calls()
        .into_iter()
        .filter(|c| c.path == collection && c.status == 500)
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].query_param("watch").as_deref(), Some("true"));

    // Deleted: Absent.
    emu.delete_external_node(VM_NS, NODE).expect("delete vm1");
    assert_eq!(events.next().await, SourceEvent::Absent);

    // Nothing else was pending (no duplicate or stray event).
    events.assert_drained();
    drop(events);
    assert_rbac_allowed_everything(emu);
}

// === controlplane source ===

fn fast_controlplane() -> ControlplaneTiming {
    ControlplaneTiming {
        retry_period: Duration::from_millis(100),
        ..ControlplaneTiming::default()
    }
}

/// A subscription read per kind: the three watches run concurrently, so the order between
/// kinds is not defined, only the order within one kind.
struct Updates {
    stream: BoxStream<'static, PolicyUpdate>,
    held: Vec<PolicyUpdate>,
}

impl Updates {
    fn new(source: &ControlplaneSource) -> Updates {
        Updates {
            stream: source.subscribe(),
            held: Vec::new(),
        }
    }

    async fn next(&mut self, kind: Kind) -> PolicyUpdate {
        if let Some(i) = self.held.iter().position(|u| update_kind(u) == Some(kind)) {
            return self.held.remove(i);
        }
        let wait = async {
            loop {
                let u = self.stream.next().await.expect("the policy stream ended");
                if update_kind(&u) == Some(kind) {
                    return u;
                }
                self.held.push(u);
            }
        };
        tokio::time::timeout(T, wait)
            .await
            .unwrap_or_else(|_| panic!("no {kind} update within {T:?}; held: {:?}", self.held))
    }

    async fn replace(&mut self, kind: Kind) -> Vec<ValidObject> {
        match self.next(kind).await {
            PolicyUpdate::Replace { kind: k, objects } if k == kind => objects,
            other => panic!("expected Replace of {kind}, got {other:?}"),
        }
    }

    async fn expect(&mut self, expected: PolicyUpdate) {
        let kind = update_kind(&expected).expect("an update with a kind");
        assert_eq!(self.next(kind).await, expected);
    }

    async fn error(&mut self, kind: Kind) -> String {
        match self.next(kind).await {
            PolicyUpdate::Error(error) => error.to_string(),
            other => panic!("expected an Error about {kind}, got {other:?}"),
        }
    }

    /// Every update was consumed by the test.
    fn assert_drained(&mut self) {
        let mut rest = std::mem::take(&mut self.held);
        while let Some(Some(u)) = self.stream.next().now_or_never() {
            rest.push(u);
        }
        assert!(rest.is_empty(), "unexpected updates: {rest:?}");
    }
}

fn connection(kind: Kind, connected: bool) -> PolicyUpdate {
    PolicyUpdate::Connection { kind, connected }
}

/// The validated form of a NetworkPolicy as the emulator serves it.
fn served_policy(emu: &Emulator, name: &str) -> ValidObject {
    let raw = emu
        .controlplane_object(CpResource::NetworkPolicies, name)
        .unwrap_or_else(|| panic!("policy {name} is stored"));
    ControlplaneObject::from_value(raw)
        .expect("decodes")
        .validate()
        .expect("valid")
}

fn policy(object: &ValidObject) -> &antrea_vm_agent::policy::controlplane::Policy {
    match object {
        ValidObject::NetworkPolicy(p) => p,
        other => panic!("expected a NetworkPolicy, got {other:?}"),
    }
}

fn group(object: &ValidObject) -> &Group {
    match object {
        ValidObject::AddressGroup(g) | ValidObject::AppliedToGroup(g) => g,
        other => panic!("expected a group, got {other:?}"),
    }
}

fn member_text(m: &Member) -> String {
    let who = match &m.entity {
        MemberRef::ExternalEntity { namespace, name } => format!("{namespace}/{name}"),
        other => format!("{other:?}"),
    };
    let ips: Vec<String> = m.ips.iter().map(IpAddr::to_string).collect();
    if ips.is_empty() {
        who
    } else {
        format!("{who} {}", ips.join(","))
    }
}

/// `name: member, member...` (members sorted by identity).
fn group_text(object: &ValidObject) -> String {
    let g = group(object);
    let members: Vec<String> = g.members.values().map(member_text).collect();
    format!("{}: {}", g.name, members.join(" "))
}

fn groups_text(objects: &[ValidObject]) -> Vec<String> {
    objects.iter().map(group_text).collect()
}

fn names(objects: &[ValidObject]) -> Vec<String> {
    objects.iter().map(|o| policy(o).name.clone()).collect()
}

fn patch_text(patch: &MembersPatch) -> (String, Vec<String>, Vec<String>) {
    (
        patch.name.clone(),
        patch.added.iter().map(member_text).collect(),
        patch.removed.iter().map(member_text).collect(),
    )
}

fn ee(name: &str) -> String {
    format!("{VM_NS}/{name}")
}

fn ee_ip(name: &str, ip: &str) -> String {
    format!("{VM_NS}/{name} {ip}")
}

/// The lab's ExternalNode vm1 (eth0) and a peer vm2; AppliedToGroup `atg-vm1` = vm1's entity,
/// AddressGroup `ag-peers` = vm2, and policy `uid-1` dropping TCP 22 from the peers.
fn fixture(emu: &Emulator) {
    emu.create_external_node(ext_node(&["10.99.0.2"], json!({}), json!({})))
        .expect("create vm1");
    emu.create_external_node(peer_node("10.99.0.3"))
        .expect("create vm2");
    emu.upsert_controlplane(json!([
        applied_to_group("atg-vm1", vec![ee_member(VM_NS, ENTITY, &[])]),
        address_group("ag-peers", vec![ee_member(VM_NS, PEER_ENTITY, &["10.99.0.3"])]),
        network_policy(
            "uid-1",
            1,
            &["atg-vm1"],
            vec![ingress_rule(&["ag-peers"], 22, "Drop")]
        ),
    ]))
    .expect("the policy objects");
    assert_eq!(
        emu.span(CpResource::NetworkPolicies, "uid-1"),
        vec![NODE_KEY.to_string()]
    );
}

/// Reads the initial Replace + Connection{true} of each kind; returns the Replaces.
async fn synced(updates: &mut Updates) -> BTreeMap<Kind, Vec<ValidObject>> {
    synced_with(updates, false).await
}

/// [`synced`], after a broken watch or a failed open: the NetworkPolicy snapshot is preceded by
/// the notice that the controller may have lost the statuses.
async fn synced_with(updates: &mut Updates, restart_suspected: bool) -> BTreeMap<Kind, Vec<ValidObject>> {
    let mut out = BTreeMap::new();
    for kind in WATCHED_KINDS {
        if restart_suspected && kind == Kind::NetworkPolicy {
            updates.expect(PolicyUpdate::ServerMayHaveRestarted).await;
        }
        out.insert(kind, updates.replace(kind).await);
        updates.expect(connection(kind, true)).await;
    }
    out
}

fn assert_fixture_snapshot(emu: &Emulator, snapshot: &BTreeMap<Kind, Vec<ValidObject>>) {
    assert_eq!(snapshot[&Kind::NetworkPolicy], vec![served_policy(emu, "uid-1")]);
    assert_eq!(
        groups_text(&snapshot[&Kind::AppliedToGroup]),
        vec![format!("atg-vm1: {}", ee(ENTITY))]
    );
    assert_eq!(
        groups_text(&snapshot[&Kind::AddressGroup]),
        vec![format!("ag-peers: {}", ee_ip(PEER_ENTITY, "10.99.0.3"))]
    );
}

/// Watch calls per resource, in order: (resource, status).
fn cp_watch_calls(emu: &Emulator) -> Vec<(String, u16)> {
    emu.calls()
        .into_iter()
        .filter(|c| c.path.starts_with(CP) && c.query_param("watch").as_deref() == Some("true"))
        .map(|c| {
            (
                c.path.trim_start_matches(CP).trim_start_matches('/').to_string(),
                c.status,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlplane_source_snapshot_and_live_events() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    fixture(emu);
    let source = ControlplaneSource::new(controller_api(&env), NODE_KEY).with_timing(fast_controlplane());
    let mut updates = Updates::new(&source);

    let snapshot = synced(&mut updates).await;
    assert_fixture_snapshot(emu, &snapshot);
    // The three node-filtered watches, exactly as the source builds their paths.
    for kind in WATCHED_KINDS {
        let path = watch_path(kind, NODE_KEY);
        assert!(
            emu.calls()
                .iter()
                .any(|c| format!("{}?{}", c.path, c.query) == path && c.status == 200),
            "no {path}"
        );
    }
    wait_for("three watches for vm-ns/vm1", T, || {
        emu.controlplane_watches(NODE_KEY).len() == 3
    })
    .await;

    // ADDED: a second policy on the same groups.
    emu.upsert_controlplane(network_policy(
        "uid-2",
        1,
        &["atg-vm1"],
        vec![ingress_rule(&["ag-peers"], 80, "Allow")],
    ))
    .expect("add uid-2");
    updates
        .expect(PolicyUpdate::Upsert(served_policy(emu, "uid-2")))
        .await;

    // NetworkPolicy MODIFIED: the whole new version.
    emu.upsert_controlplane(network_policy(
        "uid-1",
        2,
        &["atg-vm1"],
        vec![ingress_rule(&["ag-peers"], 2222, "Drop")],
    ))
    .expect("modify uid-1");
    match updates.next(Kind::NetworkPolicy).await {
        PolicyUpdate::Upsert(object) => {
            assert_eq!(object, served_policy(emu, "uid-1"));
            let p = policy(&object);
            assert_eq!((p.name.as_str(), p.generation), ("uid-1", 2));
            assert_eq!(
                p.rules[0].services[0].port,
                Some(PortMatch::Range(
                    antrea_vm_agent::policy::controlplane::PortRange {
                        start: 2222,
                        end: 2222
                    }
                ))
            );
        }
        other => panic!("expected the modified uid-1, got {other:?}"),
    }

    // AppliedToGroupPatch: a second entity hosted on vm1 joins the group.
    emu.apply_external_entity(json!({"metadata": {"name": "vm1-extra", "namespace": VM_NS},
                                     "spec": {"externalNode": NODE_KEY}}))
        .expect("a hand-made entity on vm1");
    emu.upsert_controlplane(applied_to_group(
        "atg-vm1",
        vec![ee_member(VM_NS, ENTITY, &[]), ee_member(VM_NS, "vm1-extra", &[])],
    ))
    .expect("grow atg-vm1");
    match updates.next(Kind::AppliedToGroup).await {
        PolicyUpdate::Patch { kind, patch } => {
            assert_eq!(kind, Kind::AppliedToGroup);
            assert_eq!(
                patch_text(&patch),
                ("atg-vm1".to_string(), vec![ee("vm1-extra")], vec![])
            );
        }
        other => panic!("expected an AppliedToGroup patch, got {other:?}"),
    }

    // AddressGroupPatch: one peer replaced by another (added and removed in one patch).
    emu.upsert_controlplane(address_group(
        "ag-peers",
        vec![ee_member(VM_NS, "vm3", &["10.99.0.4"])],
    ))
    .expect("swap the peers");
    match updates.next(Kind::AddressGroup).await {
        PolicyUpdate::Patch { kind, patch } => {
            assert_eq!(kind, Kind::AddressGroup);
            assert_eq!(
                patch_text(&patch),
                (
                    "ag-peers".to_string(),
                    vec![ee_ip("vm3", "10.99.0.4")],
                    vec![ee_ip(PEER_ENTITY, "10.99.0.3")]
                )
            );
        }
        other => panic!("expected an AddressGroup patch, got {other:?}"),
    }

    // DELETED.
    emu.delete_controlplane(CpResource::NetworkPolicies, "uid-2")
        .expect("delete uid-2");
    updates
        .expect(PolicyUpdate::Delete {
            kind: Kind::NetworkPolicy,
            name: "uid-2".into(),
        })
        .await;

    updates.assert_drained();
    assert_eq!(cp_watch_calls(emu).len(), 3, "one watch per kind, never reopened");
    assert_rbac_allowed_everything(emu);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlplane_source_resyncs_after_a_controller_restart() {
    // The test makes the restarted controller unreachable itself, with injected faults.
    let env = EmulatorEnv::start_with(EmulatorOptions {
        controller_restart_downtime: Duration::ZERO,
        ..EmulatorOptions::default()
    })
    .await;
    let emu = &env.emu;
    fixture(emu);
    emu.upsert_controlplane(network_policy(
        "uid-2",
        1,
        &["atg-vm1"],
        vec![ingress_rule(&["ag-peers"], 80, "Allow")],
    ))
    .expect("add uid-2");
    let api = controller_api(&env);
    let source = ControlplaneSource::new(api.clone(), NODE_KEY).with_timing(fast_controlplane());
    let mut updates = Updates::new(&source);
    let snapshot = synced(&mut updates).await;
    assert_eq!(names(&snapshot[&Kind::NetworkPolicy]), vec!["uid-1", "uid-2"]);

    // The controller restarts and stays unreachable for a while (every controlplane request
    // fails with 500 until the faults are used up), so what changes now is only seen in the
    // resync's snapshots.
    const DOWN: u32 = 200;
    emu.fail_next(&format!("{CP}/"), DOWN);
    emu.restart_controller();
    for kind in WATCHED_KINDS {
        updates.expect(connection(kind, false)).await;
    }
    emu.delete_controlplane(CpResource::NetworkPolicies, "uid-2")
        .expect("delete uid-2 while the agent is disconnected");
    emu.upsert_controlplane(address_group(
        "ag-peers",
        vec![
            ee_member(VM_NS, PEER_ENTITY, &["10.99.0.3"]),
            ee_member(VM_NS, "vm3", &["10.99.0.4"]),
        ],
    ))
    .expect("grow ag-peers while the agent is disconnected");
    // Every watch meets the outage at least once before the controller comes back (their
    // jittered retry periods differ, so one could otherwise reopen only after the heal).
    wait_for("each watch to fail against the restarted controller", T, || {
        let failed: BTreeSet<String> = cp_watch_calls(emu)
            .into_iter()
            .filter(|(_, status)| *status == 500)
            .map(|(path, _)| path)
            .collect();
        failed.len() == WATCHED_KINDS.len()
    })
    .await;
    // The controller comes back: use up the remaining faults (the watches use some as well).
    let list = format!("{CP}/networkpolicies");
    let mut drained = 0;
    while api.request(Method::Get, &list, None).await.is_err() {
        drained += 1;
        assert!(drained <= DOWN, "the injected faults never ran out");
    }

    // Full resync: the Replaces carry the current state, without the deleted policy.
    let resync = synced_with(&mut updates, true).await;
    assert_eq!(resync[&Kind::NetworkPolicy], vec![served_policy(emu, "uid-1")]);
    assert_eq!(
        groups_text(&resync[&Kind::AppliedToGroup]),
        vec![format!("atg-vm1: {}", ee(ENTITY))]
    );
    assert_eq!(
        groups_text(&resync[&Kind::AddressGroup]),
        vec![format!(
            "ag-peers: {} {}",
            ee_ip(PEER_ENTITY, "10.99.0.3"),
            ee_ip("vm3", "10.99.0.4")
        )]
    );
    // And the new watches are live.
    emu.delete_controlplane(CpResource::NetworkPolicies, "uid-1")
        .expect("delete uid-1");
    updates
        .expect(PolicyUpdate::Delete {
            kind: Kind::NetworkPolicy,
            name: "uid-1".into(),
        })
        .await;
    // uid-1 was the last policy using the peer group: it leaves vm1's span. (The
    // AppliedToGroup stays: its span follows its members.)
    updates
        .expect(PolicyUpdate::Delete {
            kind: Kind::AddressGroup,
            name: "ag-peers".into(),
        })
        .await;
    updates.assert_drained();
    assert_rbac_allowed_everything(emu);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlplane_a_bad_member_never_hides_its_group() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    fixture(emu);
    let source = ControlplaneSource::new(controller_api(&env), NODE_KEY).with_timing(fast_controlplane());
    let mut updates = Updates::new(&source);
    synced(&mut updates).await;

    // The controller sends AddressGroup `ag-legacy` with a member the agent cannot use (an
    // ExternalEntity without namespace): that member is named and left out, the group stands.
    let bad = json!({"externalEntity": {"name": "legacy"}, "ips": ["10.99.0.9"]});
    emu.upsert_controlplane(json!([
        address_group("ag-legacy", vec![bad.clone()]),
        network_policy(
            "uid-3",
            1,
            &["atg-vm1"],
            vec![ingress_rule(&["ag-legacy"], 443, "Drop")]
        ),
    ]))
    .expect("a policy with a group holding a bad member");
    let message = updates.error(Kind::AddressGroup).await;
    assert!(
        message.contains("AddressGroup ag-legacy: groupMembers[0] (externalEntity /legacy) dropped"),
        "{message}"
    );
    match updates.next(Kind::AddressGroup).await {
        PolicyUpdate::Upsert(object) => assert_eq!(group_text(&object), "ag-legacy: "),
        other => panic!("expected the group, got {other:?}"),
    }
    updates
        .expect(PolicyUpdate::Upsert(served_policy(emu, "uid-3")))
        .await;

    // A good member joins: the controller's patch applies to the group the agent holds, with no
    // resync.
    emu.upsert_controlplane(address_group(
        "ag-legacy",
        vec![bad, ee_member(VM_NS, "vm4", &["10.99.0.5"])],
    ))
    .expect("grow ag-legacy");
    match updates.next(Kind::AddressGroup).await {
        PolicyUpdate::Patch { patch, .. } => {
            assert_eq!(
                patch_text(&patch),
                ("ag-legacy".into(), vec![ee_ip("vm4", "10.99.0.5")], vec![])
            )
        }
        other => panic!("expected a patch, got {other:?}"),
    }

    // No watch was reopened.
    let watches = cp_watch_calls(emu);
    let count = |r: &str| watches.iter().filter(|(p, s)| p == r && *s == 200).count();
    assert_eq!(
        (
            count("networkpolicies"),
            count("appliedtogroups"),
            count("addressgroups")
        ),
        (1, 1, 1),
        "{watches:?}"
    );
    updates.assert_drained();
    assert_rbac_allowed_everything(emu);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlplane_watch_open_failure_then_success() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    fixture(emu);
    // The first NetworkPolicy watch is answered 500.
    emu.fail_next(&format!("{CP}/networkpolicies"), 1);
    let source = ControlplaneSource::new(controller_api(&env), NODE_KEY).with_timing(fast_controlplane());
    let mut updates = Updates::new(&source);
    updates.expect(connection(Kind::NetworkPolicy, false)).await;
    let snapshot = synced_with(&mut updates, true).await;
    assert_fixture_snapshot(emu, &snapshot);
    let np_watches: Vec<u16> = cp_watch_calls(emu)
        .into_iter()
        .filter(|(r, _)| r == "networkpolicies")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(np_watches, vec![500, 200]);
    updates.assert_drained();
    assert_rbac_allowed_everything(emu);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlplane_fallback_is_written_then_used_when_the_controller_is_unreachable() {
    let state = tempfile::tempdir().expect("state dir");
    let store = FallbackStore::in_state_dir(state.path());
    let env = EmulatorEnv::start().await;
    fixture(&env.emu);
    let api = controller_api(&env);

    // Connected: every delivered object is saved.
    let source = ControlplaneSource::new(api.clone(), NODE_KEY)
        .with_timing(fast_controlplane())
        .with_fallback(store.clone());
    let mut updates = Updates::new(&source);
    let snapshot = synced(&mut updates).await;
    assert_fixture_snapshot(&env.emu, &snapshot);
    let saved_names = |kind: Kind| -> Vec<String> {
        store
            .load(kind)
            .ok()
            .flatten()
            .map(|l| {
                l.objects
                    .iter()
                    .map(|o| o.wire["metadata"]["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_for("the fallback store to hold the snapshot", T, || {
        saved_names(Kind::NetworkPolicy) == ["uid-1"]
            && saved_names(Kind::AppliedToGroup) == ["atg-vm1"]
            && saved_names(Kind::AddressGroup) == ["ag-peers"]
    })
    .await;
    for kind in WATCHED_KINDS {
        let loaded = store.load(kind).expect("readable").expect("saved");
        assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    }
    updates.assert_drained();
    drop(updates);
    assert_rbac_allowed_everything(&env.emu);

    // The controller goes away; an agent starting now enforces what was saved.
    drop(env);
    let source = ControlplaneSource::new(api, NODE_KEY)
        .with_timing(fast_controlplane())
        .with_fallback(store);
    let mut updates = Updates::new(&source);
    for kind in WATCHED_KINDS {
        assert_eq!(
            updates.replace(kind).await,
            snapshot[&kind],
            "{kind} from the fallback store"
        );
        updates.expect(connection(kind, false)).await;
    }
    updates.assert_drained();
}

// === reporter writers ===

fn heartbeat_inputs() -> AgentInfoInputs {
    let statuses = vec![
        ActorStatus::new(
            true,
            None,
            ActorDetail::PolicyCache(PolicyCacheStatus {
                controller_connected: Some(true),
                network_policies: 1,
                address_groups: 1,
                applied_to_groups: 1,
                ..PolicyCacheStatus::default()
            }),
        ),
        ActorStatus::new(
            true,
            None,
            ActorDetail::FlowInstaller(FlowInstallerStatus {
                connected: true,
                flows_per_table: [("NonIP".to_string(), 2), ("Output".to_string(), 2)].into(),
                ..FlowInstallerStatus::default()
            }),
        ),
    ];
    AgentInfoInputs {
        node_name: NODE.into(),
        version: agent_info::agent_version(),
        bridge_name: "br-int".into(),
        api_port: 10350,
        ovs_version: Some("3.1.2".into()),
        flow_table: agent_conditions::flow_table(&statuses),
        policy_info: agent_conditions::policy_info(&statuses),
        conditions: agent_conditions::conditions(
            &statuses,
            &[],
            &OvsdbProbe::Up { version: None },
            chrono::Utc::now(),
        ),
        api_ca_bundle: Some(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec()),
    }
}

/// The agent's requests on its AntreaAgentInfo, from `since` on: (method, status).
fn aai_calls(emu: &Emulator, since: usize) -> Vec<(String, u16)> {
    let agent = emu.agent_user();
    emu.calls()
        .into_iter()
        .skip(since)
        .filter(|c| c.path.starts_with("/apis/crd.antrea.io/v1beta1/antreaagentinfos"))
        .filter(|c| c.identity.as_deref() == Some(agent.as_str()))
        .map(|c| (c.method, c.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_info_heartbeat_never_creates_and_recovers_from_a_stale_copy() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    let api = kube_api(&env);
    let inputs = heartbeat_inputs();

    // No ExternalNode, so no AntreaAgentInfo: 404, and the agent writes nothing.
    let (cache, result) = heartbeat(api.as_ref(), None, &inputs).await;
    assert_eq!(result, Err(AgentInfoError::NotFound(NODE.into())));
    assert!(cache.is_none());
    assert_eq!(aai_calls(emu, 0), vec![("GET".to_string(), 404)]);
    assert!(emu.agent_info(NODE).is_none());

    // The ExternalNode exists: the controller created the object; GET + PUT fill it.
    emu.create_external_node(ext_node(&["10.99.0.2"], json!({}), json!({})))
        .expect("create vm1");
    let mark = emu.calls().len();
    let (cache, result) = heartbeat(api.as_ref(), None, &inputs).await;
    assert_eq!(result, Ok(UpdateKind::Full));
    assert_eq!(
        aai_calls(emu, mark),
        vec![("GET".to_string(), 200), ("PUT".to_string(), 200)]
    );
    let stored = emu.agent_info(NODE).expect("stored");
    let cache = cache.expect("the server's answer is cached");
    assert_eq!(
        cache.metadata.resource_version,
        stored["metadata"]["resourceVersion"]
    );
    assert_eq!(stored["apiVersion"], "crd.antrea.io/v1beta1");
    assert_eq!(stored["kind"], "AntreaAgentInfo");
    assert_eq!(stored["metadata"]["name"], NODE);
    assert_eq!(stored["version"], agent_info::agent_version().as_str());
    assert_eq!(stored["podRef"], json!({}));
    assert_eq!(stored["nodeRef"], json!({"kind": "Node", "name": NODE}));
    assert_eq!(stored["ovsInfo"]["bridgeName"], "br-int");
    assert_eq!(stored["ovsInfo"]["version"], "3.1.2");
    assert_eq!(stored["ovsInfo"]["flowTable"], json!({"NonIP": 2, "Output": 2}));
    assert_eq!(
        stored["networkPolicyControllerInfo"],
        serde_json::to_value(NetworkPolicyControllerInfo {
            network_policy_num: 1,
            address_group_num: 1,
            applied_to_group_num: 1,
        })
        .expect("encodes")
    );
    assert_eq!(stored["apiPort"], 10350);
    assert!(stored["apiCABundle"].as_str().is_some_and(|s| !s.is_empty()));
    let conditions: Vec<(&str, &str)> = stored["agentConditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        conditions,
        vec![
            ("AgentHealthy", "True"),
            ("ControllerConnectionUp", "True"),
            ("OVSDBConnectionUp", "True"),
            ("OpenflowConnectionUp", "True"),
        ]
    );

    // With a current cached copy: a single PUT.
    let mark = emu.calls().len();
    let (cache, result) = heartbeat(api.as_ref(), Some(cache), &inputs).await;
    assert_eq!(result, Ok(UpdateKind::Partial));
    assert_eq!(aai_calls(emu, mark), vec![("PUT".to_string(), 200)]);
    let cache = cache.expect("cached");

    // Someone else updates the object: the cached copy is stale, its PUT gets 409, the agent
    // re-reads and writes again, keeping what the other writer added.
    let admin = env.admin_client().await;
    let mut other = emu.agent_info(NODE).expect("stored");
    other["metadata"]["labels"] = json!({"touched-by": "operator"});
    let (code, answer) = send_json(&admin, "PUT", &agent_info_path(NODE), Some(&other)).await;
    assert_eq!(code, 200, "{answer}");
    let mark = emu.calls().len();
    let (cache, result) = heartbeat(api.as_ref(), Some(cache), &inputs).await;
    assert_eq!(result, Ok(UpdateKind::Full));
    assert_eq!(
        aai_calls(emu, mark),
        vec![
            ("PUT".to_string(), 409),
            ("GET".to_string(), 200),
            ("PUT".to_string(), 200)
        ]
    );
    let stored = emu.agent_info(NODE).expect("stored");
    assert_eq!(
        cache.expect("cached").metadata.resource_version,
        stored["metadata"]["resourceVersion"]
    );
    assert_eq!(stored["metadata"]["labels"], json!({"touched-by": "operator"}));
    assert_eq!(stored["version"], agent_info::agent_version().as_str());

    // The agent never created (POSTed) an AntreaAgentInfo.
    assert!(
        !emu.calls()
            .iter()
            .any(|c| c.method == "POST" && c.path.contains("antreaagentinfos")),
        "{:?}",
        emu.calls()
    );
    assert_rbac_allowed_everything(emu);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_status_and_stats_summary_posts_are_accepted() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    fixture(emu);
    let api = controller_api(&env);

    // NetworkPolicyStatus, as the reporter posts it.
    let key = policy_status::node_key(VM_NS, NODE);
    assert_eq!(key, NODE_KEY);
    let body = policy_status::status_body("uid-1", &key, 1, None);
    api.request(Method::Post, &policy_status::status_path("uid-1"), Some(&body))
        .await
        .expect("status accepted");
    let statuses = emu.statuses();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    let record = emu.status("uid-1", NODE_KEY).expect("recorded for vm-ns/vm1");
    assert_eq!(
        (record.generation, record.realization_failure, record.count),
        (1, false, 1)
    );

    // NodeStatsSummary: the delta of a rule's counters, named after the bare node name.
    let mut cur = stats_summary::Collection::default();
    cur.annp.entry("uid-1".into()).or_default().insert(
        "drop-ssh".into(),
        stats_summary::Counters {
            packets: 3,
            bytes: 180,
            sessions: 1,
        },
    );
    let summary =
        stats_summary::summary(NODE, &cur, &stats_summary::Collection::default()).expect("traffic to report");
    let body = serde_json::to_value(&summary).expect("encodes");
    api.request(Method::Post, stats_summary::PATH, Some(&body))
        .await
        .expect("summary accepted");
    let posted = emu.stats_summaries();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0]["metadata"]["name"], NODE);
    assert_eq!(posted[0]["kind"], "NodeStatsSummary");
    assert_eq!(
        posted[0]["antreaNetworkPolicies"],
        json!([{"networkPolicy": {"uid": "uid-1"}, "trafficStats": {},
                "ruleTrafficStats": [{"name": "drop-ssh",
                                      "trafficStats": {"packets": 3, "bytes": 180, "sessions": 1}}]}])
    );
    let posts: Vec<(String, u16)> = emu
        .calls()
        .into_iter()
        .filter(|c| c.method == "POST")
        .map(|c| (c.path, c.status))
        .collect();
    assert_eq!(
        posts,
        vec![
            (format!("{CP}/networkpolicies/uid-1/status"), 201),
            (format!("{CP}/nodestatssummaries"), 201),
        ]
    );
    assert_rbac_allowed_everything(emu);
}

// === swapped kubeconfigs ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapped_kubeconfigs_fail_with_a_clear_error() {
    let env = EmulatorEnv::start().await;
    let emu = &env.emu;
    // The fixture holds vm1's ExternalNode and its policies.
    fixture(emu);
    // The two endpoints are distinct servers, as in a cluster.
    assert_ne!(emu.url(), emu.controller_url());

    // The ExternalNode asked of antrea-controller: an error naming the likely mistake, and never
    // "absent" (which would detach the VM's interfaces).
    let swapped_kube =
        KubeExternalNodeSource::new(controller_api(&env), VM_NS, NODE).with_timing(fast_watch());
    let mut events = EnEvents::spawn(&swapped_kube);
    match events.next().await {
        SourceEvent::Error(error) => {
            let message = error.to_string();
            assert!(
                message.contains("is not kube-apiserver")
                    && message.contains("clientConnection.kubeconfig")
                    && message.contains("swapped"),
                "{message}"
            )
        }
        other => panic!("expected an error, got {other:?}"),
    }
    drop(events);

    // The controlplane watches asked of kube-apiserver (no APIService in this cluster).
    let swapped_controller =
        ControlplaneSource::new(kube_api(&env), NODE_KEY).with_timing(fast_controlplane());
    let mut updates = Updates::new(&swapped_controller);
    for kind in WATCHED_KINDS {
        let message = updates.error(kind).await;
        assert!(
            message.contains("does not serve controlplane.antrea.io")
                && message.contains("antreaClientConnection.kubeconfig")
                && message.contains("swapped"),
            "{message}"
        );
        updates.expect(connection(kind, false)).await;
    }
    // Nothing reached the wrong server's handlers: both answered the generic 404.
    let misrouted: Vec<_> = emu
        .calls()
        .into_iter()
        .filter(|c| c.path.contains("externalnodes") || c.path.starts_with(CP))
        .collect();
    assert!(misrouted.iter().all(|c| c.status == 404), "{misrouted:?}");

    // The right way round works.
    let kube = KubeExternalNodeSource::new(kube_api(&env), VM_NS, NODE).with_timing(fast_watch());
    let mut events = EnEvents::spawn(&kube);
    present(events.next().await);
    assert_rbac_allowed_everything(emu);
}
