//! Each actor sees only typed recipients for its outputs (`actors::wiring`), so a test can plug a
//! probe into any one and read what the actor sends, with no other actor running. These tests
//! do it for the ExternalNode watcher's and the policy cache's outputs, including a re-wiring
//! (`SetOutputs`) and the resend that follows it (`Resync`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::sync::{Arc, Mutex};

use actix::{Actor, Addr, Context, Handler, Message};

use antrea_vm_agent::actors::{
    ExternalNodeWatcher, Lifeline, PolicyCache, PolicyCacheDeps, PolicyCacheOutputs, SetOutputs, WatcherDeps,
    WatcherOutputs,
};
use antrea_vm_agent::host::fake::FakeHost;
use antrea_vm_agent::messages::status_detail::ExternalNodeState;
use antrea_vm_agent::messages::{
    ActorDetail, ActorKind, ExternalNodeChanged, Resync, RulesChanged, StatusQuery,
};
use antrea_vm_agent::policy::controlplane::{ControlplaneObject, Kind, ValidObject, Validate as _};
use antrea_vm_agent::sources::{PolicySource, PolicyUpdate, SourceEvent};

mod fake_world;

use fake_world::{eventually, external_node, Fakes};

/// Records every `M` it receives, in order.
struct Probe<M> {
    seen: Arc<Mutex<Vec<M>>>,
}

impl<M: 'static> Actor for Probe<M> {
    type Context = Context<Self>;
}

impl<M: Message<Result = ()> + 'static> Handler<M> for Probe<M> {
    type Result = ();
    fn handle(&mut self, msg: M, _: &mut Context<Self>) {
        self.seen.lock().expect("probe lock").push(msg);
    }
}

/// A running probe and what it has seen so far.
fn probe<M: Message<Result = ()> + Send + 'static>() -> (Addr<Probe<M>>, Arc<Mutex<Vec<M>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let addr = Probe { seen: seen.clone() }.start();
    (addr, seen)
}

fn count<M>(seen: &Arc<Mutex<Vec<M>>>) -> usize {
    seen.lock().expect("probe lock").len()
}

async fn fakes() -> Fakes {
    Fakes::new(Arc::new(FakeHost::new()), fake_world::ovsdb_with_br_int().await)
}

/// The watcher, alone, sends each valid ExternalNode to whatever its output is wired to; with
/// no recipient it sends nothing, and a new recipient gets the current state on `Resync`.
#[actix_rt::test]
async fn a_probe_on_the_watchers_output_sees_the_external_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fakes = fakes().await;
    let deps = fakes.deps(
        fake_world::standalone_config(dir.path()),
        fake_world::fast_timing(),
    );
    let (first, first_seen) = probe::<ExternalNodeChanged>();
    fakes.source.set(external_node(&["10.0.0.2"]));
    let watcher = ExternalNodeWatcher::new(
        WatcherDeps::from(&deps),
        WatcherOutputs {
            node_changed: Some(first.recipient()),
        },
        Lifeline::detached(ActorKind::ExternalNodeWatcher),
    )
    .start();
    eventually("the first probe sees the ExternalNode", || {
        let seen = first_seen.clone();
        async move { count(&seen) == 1 }
    })
    .await;
    {
        let seen = first_seen.lock().expect("probe lock");
        let node = seen[0].node.as_ref().expect("present");
        assert_eq!(node.name, "vm1");
        assert_eq!(node.interfaces.len(), 1);
        assert_eq!(
            node.interfaces[0].ips,
            vec!["10.0.0.2".parse::<std::net::IpAddr>().unwrap()]
        );
    }

    // Unwired (its receiver is down): the deletion is noted but goes nowhere.
    watcher
        .send(SetOutputs(WatcherOutputs::default()))
        .await
        .expect("watcher alive");
    fakes.source.set(SourceEvent::Absent);
    eventually("the watcher sees the ExternalNode deleted", || {
        let watcher = watcher.clone();
        async move {
            let status = watcher.send(StatusQuery).await.expect("watcher alive");
            matches!(status.detail, ActorDetail::ExternalNodeWatcher(d) if d.state == ExternalNodeState::Absent)
        }
    })
    .await;
    assert_eq!(count(&first_seen), 1, "unwired, the watcher sent nothing");
    // Re-wired to a second probe: the resync after a re-wiring hands it the current state.
    let (second, second_seen) = probe::<ExternalNodeChanged>();
    watcher
        .send(SetOutputs(WatcherOutputs {
            node_changed: Some(second.recipient()),
        }))
        .await
        .expect("watcher alive");
    watcher.do_send(Resync);
    eventually("the second probe sees the ExternalNode deleted", || {
        let seen = second_seen.clone();
        async move { count(&seen) == 1 }
    })
    .await;
    assert!(second_seen.lock().expect("probe lock")[0].node.is_none());
    assert_eq!(count(&first_seen), 1, "the first probe is no longer wired");
}

/// The policy cache, alone and without a policy source, sends its (empty) rules to its output
/// once it knows the interfaces.
#[actix_rt::test]
async fn a_probe_on_the_policy_caches_output_sees_the_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fakes = fakes().await;
    let deps = fakes.deps(
        fake_world::standalone_config(dir.path()),
        fake_world::fast_timing(),
    );
    let (rules, seen) = probe::<RulesChanged>();
    let cache = PolicyCache::new(
        PolicyCacheDeps::from(&deps),
        PolicyCacheOutputs {
            rules_changed: Some(rules.recipient()),
        },
        Lifeline::detached(ActorKind::PolicyCache),
    )
    .start();
    cache.do_send(fake_world::eth0_attached(&["10.0.0.2"]));
    eventually("the probe sees the rules", || {
        let seen = seen.clone();
        async move { count(&seen) == 1 }
    })
    .await;
    let first = seen.lock().expect("probe lock")[0].clone();
    assert!(first.rules.is_empty(), "no policy source: no rules");
    assert_eq!(
        first.interface_ofports,
        vec![(fake_world::HOST_PORT, fake_world::UPLINK_PORT)]
    );
    // A resync sends the same view again (a restarted flow installer converges).
    cache.do_send(Resync);
    eventually("the probe sees the rules again", || {
        let seen = seen.clone();
        async move { count(&seen) == 2 }
    })
    .await;
}

/// A policy source the test feeds by hand (one subscription).
struct HandFed(Mutex<Option<futures::channel::mpsc::UnboundedReceiver<PolicyUpdate>>>);

impl PolicySource for HandFed {
    fn subscribe(&self) -> futures::stream::BoxStream<'static, PolicyUpdate> {
        use futures::StreamExt;
        match self.0.lock().expect("source lock").take() {
            Some(updates) => updates.boxed(),
            None => futures::stream::pending().boxed(),
        }
    }
    fn describe(&self) -> String {
        "hand-fed source".into()
    }
}

fn valid(object: serde_json::Value) -> ValidObject {
    ControlplaneObject::from_value(object)
        .expect("decodes")
        .validate()
        .expect("valid")
}

/// An Antrea-native policy applied to vm1's entity, allowing TCP 22 in from anywhere.
fn policy_at(generation: i64) -> ValidObject {
    valid(serde_json::json!({
        "kind": "NetworkPolicy", "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": "uid-web", "uid": "uid-web", "generation": generation},
        "rules": [{"direction": "In", "from": {}, "to": {},
                   "services": [{"protocol": "TCP", "port": 22}], "action": "Allow"}],
        "appliedToGroups": ["atg-vm1"], "priority": 9000, "tierPriority": 250,
        "sourceRef": {"type": "AntreaNetworkPolicy", "namespace": "vm-ns", "name": "web", "uid": "uid-web"}
    }))
}

/// After a broken watch the controller may have restarted: the watch says so, then resyncs, with
/// the other watches' resyncs possibly in between. The cache publishes the NetworkPolicy resync
/// in a new sync epoch, and never the old policies in it (the reporter would post their statuses
/// again, stale by the time they land).
#[actix_rt::test]
async fn a_suspected_controller_restart_is_published_with_the_resync_not_before_it() {
    let (feed, updates) = futures::channel::mpsc::unbounded();
    let (rules, seen) = probe::<RulesChanged>();
    let source: Arc<dyn PolicySource> = Arc::new(HandFed(Mutex::new(Some(updates))));
    let cache = PolicyCache::new(
        PolicyCacheDeps {
            policy_source: Some(source),
        },
        PolicyCacheOutputs {
            rules_changed: Some(rules.recipient()),
        },
        Lifeline::detached(ActorKind::PolicyCache),
    )
    .start();
    let atg = valid(serde_json::json!({
        "kind": "AppliedToGroup", "apiVersion": "controlplane.antrea.io/v1beta2",
        "metadata": {"name": "atg-vm1"},
        "groupMembers": [{"externalEntity": {"name": "vm1-3e616", "namespace": "vm-ns"}}]
    }));
    let send = |u: PolicyUpdate| feed.unbounded_send(u).expect("the cache listens");
    send(PolicyUpdate::Replace {
        kind: Kind::NetworkPolicy,
        objects: vec![policy_at(1)],
    });
    send(PolicyUpdate::Replace {
        kind: Kind::AddressGroup,
        objects: vec![],
    });
    send(PolicyUpdate::Replace {
        kind: Kind::AppliedToGroup,
        objects: vec![atg.clone()],
    });
    cache.do_send(fake_world::eth0_attached(&["10.0.0.2"]));
    let published = |generation: i64| {
        let seen = seen.clone();
        move || {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .expect("probe lock")
                    .iter()
                    .any(|r| r.policies.iter().any(|p| p.generation == generation))
            }
        }
    };
    eventually("generation 1 published", published(1)).await;
    let first_epoch = seen.lock().expect("probe lock").last().expect("one").sync_epoch;

    // The other watches' resyncs may come between the notice and the NetworkPolicy resync.
    send(PolicyUpdate::ServerMayHaveRestarted);
    send(PolicyUpdate::Replace {
        kind: Kind::AppliedToGroup,
        objects: vec![atg.clone()],
    });
    send(PolicyUpdate::Replace {
        kind: Kind::AddressGroup,
        objects: vec![],
    });
    send(PolicyUpdate::Replace {
        kind: Kind::NetworkPolicy,
        objects: vec![policy_at(2)],
    });
    eventually("generation 2 published", published(2)).await;
    let seen = seen.lock().expect("probe lock").clone();
    let after: Vec<(u64, Vec<i64>)> = seen
        .iter()
        .filter(|r| r.sync_epoch != first_epoch)
        .map(|r| (r.sync_epoch, r.policies.iter().map(|p| p.generation).collect()))
        .collect();
    assert_eq!(
        after,
        vec![(after.first().map_or(0, |a| a.0), vec![2])],
        "generation 2 published once, in a new epoch, and nothing else in it"
    );
    assert!(
        seen.iter()
            .filter(|r| r.sync_epoch == first_epoch)
            .all(|r| r.policies.iter().all(|p| p.generation == 1)),
        "generation 2 never published in the old epoch"
    );
}
