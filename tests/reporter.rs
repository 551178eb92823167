//! In-process tests of the reporter's Kubernetes writes against scripted API servers
//! (`FakeApi`): the AntreaAgentInfo heartbeat (404 until the controller creates it, 409 → re-read
//! and full update), NetworkPolicyStatus posts (once per generation and epoch, retried after a
//! server error) and NodeStatsSummary deltas read from a flow installer on a fake switch.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use serde_json::{json, Value};

use antrea_vm_agent::actors::reporter::{AgentInfoReporter, CollectStats};
use antrea_vm_agent::actors::{
    Deps, FlowInstaller, FlowInstallerDeps, FlowInstallerOutputs, Lifeline, ReporterDeps, ReporterOutputs,
    SetOutputs, StatusRecipients, Timing,
};
use antrea_vm_agent::host::fake::FakeHost;
use antrea_vm_agent::k8s::api::Method;
use antrea_vm_agent::k8s::fake_api::{Call, FakeApi};
use antrea_vm_agent::k8s::ClusterClients;
use antrea_vm_agent::messages::{
    ActorKind, ErrorKind, InterfacesChanged, KubernetesWrites, PoliciesRealized, PolicyGeneration,
    RulesChanged, StatusQuery,
};
use antrea_vm_agent::ovs::openflow::fake::FakeConnector;
use antrea_vm_agent::policy::pipeline::table;
use antrea_vm_agent::policy::rule::{
    CompiledRuleInput, Direction, Peer, PolicyRef, PolicyType, RuleAction, RuleId,
};

mod fake_world;

use fake_world::{eventually, Fakes, HOST_PORT};

const AAI: &str = "/apis/crd.antrea.io/v1beta1/antreaagentinfos/vm1";
const STATS: &str = "/apis/controlplane.antrea.io/v1beta2/nodestatssummaries";
const WAIT: Duration = Duration::from_secs(10);

struct World {
    kube: FakeApi,
    controller: FakeApi,
    connector: Arc<FakeConnector>,
    deps: Deps,
    _dir: tempfile::TempDir,
}

async fn world(report_interval: Duration) -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fake_world::standalone_config(dir.path());
    let fakes = Fakes::new(Arc::new(FakeHost::new()), fake_world::ovsdb_with_br_int().await);
    let kube = FakeApi::named("kube");
    let controller = FakeApi::named("controller");
    let deps = Deps {
        cluster: Some(ClusterClients {
            kube: Arc::new(kube.clone()),
            controller: Arc::new(controller.clone()),
        }),
        agent_info_path: Some(dir.path().join("agent-info.json")),
        fqdn: Default::default(),
        packet_ins: None,
        ..fakes.deps(
            config,
            Timing {
                report_interval,
                // Stats are driven by the tests (and the baseline by the first realization).
                stats_interval: Duration::from_secs(3600),
                status_retry_min: Duration::from_millis(20),
                ..Timing::default()
            },
        )
    };
    World {
        kube,
        controller,
        connector: fakes.switch,
        deps,
        _dir: dir,
    }
}

impl World {
    fn reporter(&self, outputs: ReporterOutputs) -> Addr<AgentInfoReporter> {
        AgentInfoReporter::new(
            ReporterDeps::from(&self.deps),
            outputs,
            Lifeline::detached(ActorKind::AgentInfoReporter),
        )
        .start()
    }
}

fn is(method: Method, prefix: &'static str) -> impl Fn(&Call) -> bool {
    move |c: &Call| !c.watch && c.method == method && c.path.starts_with(prefix)
}

fn aai(rv: &str) -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1beta1", "kind": "AntreaAgentInfo",
        "metadata": {"name": "vm1", "resourceVersion": rv, "uid": "u1"}
    })
}

fn rv_of(call: &Call) -> String {
    call.body
        .as_ref()
        .and_then(|b| b["metadata"]["resourceVersion"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The reporter's Kubernetes writes, from its status.
async fn writes(r: &Addr<AgentInfoReporter>) -> KubernetesWrites {
    let status = r.send(StatusQuery).await.expect("reporter alive");
    status
        .detail
        .reporter()
        .and_then(|s| s.kubernetes.clone())
        .expect("the reporter's status has its Kubernetes writes")
}

#[actix_rt::test]
async fn agent_info_waits_for_the_controller_to_create_it_then_updates_it() {
    let w = world(Duration::from_millis(50)).await;
    let r = w.reporter(ReporterOutputs::default());
    // Nothing exists yet: every report reads (404) and writes nothing.
    w.kube
        .wait_for_calls(2, WAIT, is(Method::Get, AAI))
        .await
        .expect("GET retried at each report");
    let err = writes(&r)
        .await
        .agent_info
        .log
        .last_error
        .expect("the 404 is reported");
    assert!(err.message.contains("does not exist yet"), "{err}");
    assert_eq!(err.kind, ErrorKind::KubeApi);

    // The controller creates it.
    w.kube.respond_always(Method::Get, AAI, Ok(aai("1")));
    w.kube.respond_always(Method::Put, AAI, Ok(aai("2")));
    let puts = w
        .kube
        .wait_for_calls(2, WAIT, is(Method::Put, AAI))
        .await
        .expect("full, then partial update");
    let calls = w.kube.calls();
    let first_put = calls.iter().position(|c| c.method == Method::Put).expect("a PUT");
    assert!(
        calls[..first_put].iter().all(|c| c.method == Method::Get),
        "only reads before the first write (never a create)"
    );
    assert!(calls.iter().all(|c| c.method != Method::Post));
    let full = puts[0].body.clone().expect("PUT body");
    assert_eq!(full["metadata"]["resourceVersion"], "1");
    assert_eq!(full["metadata"]["uid"], "u1");
    assert_eq!(full["nodeRef"], json!({"kind": "Node", "name": "vm1"}));
    assert_eq!(full["podRef"], json!({}));
    assert_eq!(full["apiPort"], 10350);
    assert_eq!(full["ovsInfo"]["bridgeName"], "br-int");
    assert!(full["version"].as_str().is_some_and(|v| v.starts_with('v')));
    let types: Vec<&str> = full["agentConditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| c["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        types,
        [
            "AgentHealthy",
            "ControllerConnectionUp",
            "OVSDBConnectionUp",
            "OpenflowConnectionUp"
        ]
    );
    // No actors answered (the reporter runs alone); OVSDB did.
    assert_eq!(full["agentConditions"][0]["status"], "False");
    assert_eq!(full["agentConditions"][2]["status"], "True");
    // The next heartbeat refreshes the cached copy (the PUT answer) without reading again.
    assert_eq!(rv_of(&puts[1]), "2");
    let calls = w.kube.calls();
    let second_put = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.method == Method::Put)
        .nth(1)
        .map(|(i, _)| i)
        .expect("second PUT");
    assert_eq!(calls[second_put - 1].method, Method::Put);
    eventually("the reporter reports the success", || async {
        let a = writes(&r).await.agent_info;
        a.log.last_error.is_none() && a.resource_version.as_deref() == Some("2")
    })
    .await;
}

#[actix_rt::test]
async fn a_conflict_drops_the_cache_and_rereads_at_once() {
    let w = world(Duration::from_millis(50)).await;
    w.kube.respond(Method::Get, AAI, Ok(aai("1")));
    w.kube.respond(Method::Get, AAI, Ok(aai("5")));
    w.kube.respond(Method::Put, AAI, Ok(aai("2")));
    w.kube.respond(
        Method::Put,
        AAI,
        Err(FakeApi::status(409, "Conflict", "the object has been modified")),
    );
    w.kube.respond(Method::Put, AAI, Ok(aai("6")));
    w.kube.respond_always(Method::Put, AAI, Ok(aai("7")));
    let _r = w.reporter(ReporterOutputs::default());
    w.kube
        .wait_for_calls(4, WAIT, is(Method::Put, AAI))
        .await
        .expect("four PUTs");
    let seq: Vec<(Method, String)> = w
        .kube
        .calls()
        .iter()
        .take(6)
        .map(|c| (c.method, rv_of(c)))
        .collect();
    let want = |m: Method, rv: &str| (m, rv.to_string());
    assert_eq!(
        seq,
        vec![
            want(Method::Get, ""),
            want(Method::Put, "1"),
            want(Method::Put, "2"),
            // 409: the same heartbeat reads again and writes everything with the new version.
            want(Method::Get, ""),
            want(Method::Put, "5"),
            want(Method::Put, "6"),
        ]
    );
    let full = w.kube.calls()[4].body.clone().expect("body");
    assert_eq!(full["nodeRef"]["name"], "vm1");
}

fn generation(uid: &str, g: i64, native: bool) -> PolicyGeneration {
    PolicyGeneration {
        name: uid.into(),
        uid: uid.into(),
        generation: g,
        antrea_native: native,
        not_enforced: None,
    }
}

const STATUS_A: &str = "/apis/controlplane.antrea.io/v1beta2/networkpolicies/a/status";

#[actix_rt::test]
async fn statuses_are_posted_once_per_generation_and_again_after_a_resync() {
    let w = world(Duration::from_secs(3600)).await;
    w.controller.respond_always(
        Method::Post,
        "/apis/controlplane.antrea.io/v1beta2/networkpolicies/",
        Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})),
    );
    let r = w.reporter(ReporterOutputs::default());
    let send = |policies: Vec<PolicyGeneration>, epoch: u64| {
        r.do_send(PoliciesRealized {
            policies: policies.into(),
            sync_epoch: epoch,
        })
    };
    let any_status = |c: &Call| c.method == Method::Post && c.path.ends_with("/status");
    send(vec![generation("a", 1, true), generation("k8s", 1, false)], 1);
    let posts = w
        .controller
        .wait_for_calls(1, WAIT, any_status)
        .await
        .expect("one post");
    assert_eq!(posts[0].path, STATUS_A);
    assert_eq!(
        posts[0].body,
        Some(json!({
            "kind": "NetworkPolicyStatus", "apiVersion": "controlplane.antrea.io/v1beta2",
            "metadata": {"name": "a"},
            "nodes": [{"nodeName": "vm-ns/vm1", "generation": 1, "realizationFailure": false}]
        }))
    );
    // The same view again: nothing. A new generation: posted.
    send(vec![generation("a", 1, true), generation("k8s", 1, false)], 1);
    send(vec![generation("a", 2, true), generation("k8s", 1, false)], 1);
    let posts = w
        .controller
        .wait_for_calls(2, WAIT, any_status)
        .await
        .expect("second post");
    assert_eq!(
        posts[1]
            .body
            .as_ref()
            .map(|b| b["nodes"][0]["generation"].clone()),
        Some(json!(2))
    );
    // A resync (new epoch) re-posts the same generation.
    send(vec![generation("a", 2, true), generation("k8s", 1, false)], 2);
    let posts = w
        .controller
        .wait_for_calls(3, WAIT, any_status)
        .await
        .expect("third post");
    assert_eq!(posts[2].path, STATUS_A);
    assert_eq!(posts[2].body, posts[1].body);
    assert!(
        posts.iter().all(|c| c.path == STATUS_A),
        "never the K8s NetworkPolicy"
    );
    eventually("three posts counted", || async {
        writes(&r).await.policy_status.state.posts_ok == 3
    })
    .await;
}

#[actix_rt::test]
async fn a_failed_status_post_is_retried() {
    let w = world(Duration::from_secs(3600)).await;
    w.controller.respond(
        Method::Post,
        STATUS_A,
        Err(FakeApi::status(500, "InternalError", "boom")),
    );
    w.controller.respond_always(
        Method::Post,
        STATUS_A,
        Ok(json!({"kind": "Status", "status": "Success"})),
    );
    let r = w.reporter(ReporterOutputs::default());
    r.do_send(PoliciesRealized {
        policies: vec![generation("a", 3, true)].into(),
        sync_epoch: 1,
    });
    let posts = w
        .controller
        .wait_for_calls(2, WAIT, is(Method::Post, STATUS_A))
        .await
        .expect("a retry");
    assert_eq!(posts[0].body, posts[1].body);
    eventually("the retry succeeded", || async {
        let s = writes(&r).await.policy_status;
        s.state.posted == 1 && s.state.pending == 0 && s.state.posts_failed == 1 && s.log.last_error.is_none()
    })
    .await;
}

fn interfaces() -> InterfacesChanged {
    fake_world::eth0_attached(&["10.0.0.2"])
}

/// One ingress Drop rule of ANNP `p1`: a single metric flow, whose packets are its sessions.
fn drop_rule() -> CompiledRuleInput {
    CompiledRuleInput {
        id: RuleId {
            policy_uid: "p1".into(),
            direction: Direction::In,
            index: 0,
            services_key: String::new(),
        },
        policy: PolicyRef {
            policy_type: PolicyType::AntreaNetworkPolicy,
            namespace: "vm-ns".into(),
            name: "deny-web".into(),
            uid: "p1".into(),
        },
        rule_name: "drop-in".into(),
        direction: Direction::In,
        action: RuleAction::Drop,
        tier_priority: 250,
        policy_priority: 1.0,
        rule_priority: 0,
        max_rule_priority: 0,
        from: vec![Peer::Cidr("10.1.0.0/16".parse().expect("cidr"))],
        to: vec![Peer::OfPort(HOST_PORT)],
        services: None,
        enable_logging: false,
        log_label: String::new(),
        fqdn: None,
    }
}

#[actix_rt::test]
async fn stats_deltas_are_posted_from_the_rule_counters() {
    let w = world(Duration::from_secs(3600)).await;
    w.controller.respond_always(
        Method::Post,
        "/apis/controlplane.antrea.io/v1beta2/networkpolicies/",
        Ok(json!({})),
    );
    w.controller.respond(Method::Post, STATS, Ok(json!({})));
    w.controller.respond(
        Method::Post,
        STATS,
        Err(FakeApi::status(503, "ServiceUnavailable", "busy")),
    );
    w.controller.respond_always(Method::Post, STATS, Ok(json!({})));
    let installer = FlowInstaller::new(
        FlowInstallerDeps::from(&w.deps),
        FlowInstallerOutputs::default(),
        Lifeline::detached(ActorKind::FlowInstaller),
    )
    .start();
    let r = w.reporter(ReporterOutputs {
        status: StatusRecipients {
            flows: Some(installer.clone().recipient()),
            ..StatusRecipients::default()
        },
        rule_stats: Some(installer.clone().recipient()),
    });
    installer.do_send(SetOutputs(FlowInstallerOutputs {
        realized: Some(r.clone().recipient()),
    }));
    installer.do_send(interfaces());
    installer.do_send(RulesChanged {
        rules: vec![Arc::new(drop_rule())].into(),
        policies: vec![PolicyGeneration {
            name: "p1".into(),
            uid: "p1".into(),
            generation: 1,
            antrea_native: true,
            not_enforced: None,
        }],
        sync_epoch: 1,
        interface_ofports: interfaces().ofports(),
        changes: None,
    });
    // The realization triggers the baseline (counters all zero).
    eventually("baseline taken", || async {
        let s = writes(&r).await.stats;
        s.baseline && s.log.last_result.as_deref() == Some("baseline")
    })
    .await;
    let sw = w.connector.switch();
    let metric: Vec<_> = sw
        .flows()
        .into_iter()
        .filter(|f| f.table == table::INGRESS_METRIC && f.priority == 200)
        .collect();
    assert_eq!(metric.len(), 1, "one deny metric flow");
    let key = metric[0].key();
    let stats_posts = |n: usize| {
        let c = w.controller.clone();
        async move {
            c.wait_for_calls(n, WAIT, is(Method::Post, STATS))
                .await
                .expect("stats posts")
        }
    };
    let anp = |call: &Call| call.body.clone().expect("body")["antreaNetworkPolicies"].clone();
    // A collection is ignored while the previous one runs: wait for each to finish.
    let finished = |n: u64| {
        let r = r.clone();
        async move {
            eventually(&format!("{n} stats rounds done"), || async {
                let log = writes(&r).await.stats.log;
                log.successes + log.failures >= n
            })
            .await
        }
    };

    sw.set_counters(&key, 10, 1000);
    r.do_send(CollectStats);
    let posts = stats_posts(1).await;
    let body = posts[0].body.clone().expect("body");
    assert_eq!(body["metadata"], json!({"name": "vm1"}));
    assert_eq!(body["kind"], "NodeStatsSummary");
    assert!(body.get("networkPolicies").is_none());
    assert_eq!(
        anp(&posts[0]),
        json!([{"networkPolicy": {"uid": "p1"}, "trafficStats": {},
                "ruleTrafficStats": [{"name": "drop-in", "trafficStats": {"packets": 10, "bytes": 1000, "sessions": 10}}]}])
    );
    finished(2).await;

    // This one fails (503): the baseline stays, so the next post covers both periods.
    sw.set_counters(&key, 15, 1500);
    r.do_send(CollectStats);
    stats_posts(2).await;
    eventually("failure recorded", || async {
        writes(&r)
            .await
            .stats
            .log
            .last_error
            .is_some_and(|e| e.message.contains("503") && e.kind == ErrorKind::KubeApi)
    })
    .await;
    sw.set_counters(&key, 20, 2000);
    r.do_send(CollectStats);
    let posts = stats_posts(3).await;
    assert_eq!(
        anp(&posts[2])[0]["ruleTrafficStats"][0]["trafficStats"],
        json!({"packets": 10, "bytes": 1000, "sessions": 10})
    );
    finished(4).await;
    // Nothing moved: nothing is posted.
    r.do_send(CollectStats);
    eventually("nothing to report", || async {
        writes(&r).await.stats.log.last_result.as_deref() == Some("nothing to report")
    })
    .await;
    assert_eq!(w.controller.requests(Method::Post, STATS).len(), 3);
}
