//! In-process tests of the flow installer's observability, against the fake switch: per-rule
//! counters (`GetRuleStats`) read from faked metric-flow counters, realization notices
//! (`PoliciesRealized`) after each successful commit only, and the flow-operation and
//! realization-latency metrics; and when `trace` may read the conjunctions (`GetTraceContext`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};

use antrea_vm_agent::actors::flow_installer::query::GetTraceContext;
use antrea_vm_agent::actors::flow_installer::{metric_sample, FlowInstaller, GetLastRealized};
use antrea_vm_agent::actors::{FlowInstallerDeps, FlowInstallerOutputs, Lifeline, Timing};
use antrea_vm_agent::host::fake::FakeHost;
use antrea_vm_agent::messages::{
    ActorKind, GetRuleStats, InterfacesChanged, PoliciesRealized, PolicyGeneration, RuleStatsError,
    RulesChanged,
};
use antrea_vm_agent::ovs::openflow::fake::FakeConnector;
use antrea_vm_agent::ovs::openflow::{ct_state, FlowStats};
use antrea_vm_agent::policy::pipeline::table;
use antrea_vm_agent::policy::rule::{
    CompiledRuleInput, Direction, Peer, PolicyRef, PolicyType, Protocol, RuleAction, RuleId, Service,
};
use antrea_vm_agent::telemetry::AgentMetrics;

mod fake_world;

use fake_world::{eventually, Fakes, HOST_PORT};

struct World {
    connector: Arc<FakeConnector>,
    metrics: AgentMetrics,
    installer: Addr<FlowInstaller>,
    _dir: tempfile::TempDir,
}

/// A flow installer alone, on a fake switch and a fake OVSDB holding `br-int`.
async fn start() -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fake_world::standalone_config(dir.path());
    let fakes = Fakes::new(Arc::new(FakeHost::new()), fake_world::ovsdb_with_br_int().await);
    let deps = fakes.deps(
        config,
        Timing {
            report_interval: Duration::from_millis(100),
            ..fake_world::fast_timing()
        },
    );
    let installer = FlowInstaller::new(
        FlowInstallerDeps::from(&deps),
        FlowInstallerOutputs::default(),
        Lifeline::detached(ActorKind::FlowInstaller),
    )
    .start();
    World {
        connector: fakes.switch,
        metrics: fakes.metrics,
        installer,
        _dir: dir,
    }
}

fn interfaces() -> InterfacesChanged {
    fake_world::eth0_attached(&["10.0.0.2", "fd00::2"])
}

/// A rule from or to 10.1.0.0/16 and fd00:1::/64, TCP `port` (unique per rule: the test finds
/// rules by it).
fn rule(
    uid: &str,
    name: &str,
    index: i32,
    direction: Direction,
    action: RuleAction,
    key: &str,
    port: u16,
) -> CompiledRuleInput {
    let ext = Peer::Cidr("10.1.0.0/16".parse().expect("cidr"));
    let ext6 = Peer::Cidr("fd00:1::/64".parse().expect("cidr"));
    let (from, to) = match direction {
        Direction::In => (vec![ext, ext6], vec![Peer::OfPort(HOST_PORT)]),
        Direction::Out => (vec![Peer::OfPort(HOST_PORT)], vec![ext, ext6]),
    };
    CompiledRuleInput {
        id: RuleId {
            policy_uid: uid.into(),
            direction,
            index,
            services_key: key.into(),
        },
        policy: PolicyRef {
            policy_type: PolicyType::AntreaNetworkPolicy,
            namespace: "vm-ns".into(),
            name: format!("name-{uid}"),
            uid: uid.into(),
        },
        rule_name: name.into(),
        direction,
        action,
        tier_priority: if uid == "p2" { 100 } else { 250 },
        policy_priority: 1.0,
        rule_priority: index,
        max_rule_priority: 3,
        from,
        to,
        services: Some(vec![Service::port(Protocol::Tcp, port)]),
        enable_logging: false,
        log_label: String::new(),
        fqdn: None,
    }
}

fn rules() -> Vec<CompiledRuleInput> {
    let mut v = vec![
        rule("p1", "allow-in", 0, Direction::In, RuleAction::Allow, "a", 81),
        rule("p1", "allow-in", 0, Direction::In, RuleAction::Allow, "b", 82),
        rule("p1", "drop-in", 1, Direction::In, RuleAction::Drop, "", 83),
        rule("p1", "allow-out", 0, Direction::Out, RuleAction::Allow, "", 84),
        rule("p2", "reject-out", 0, Direction::Out, RuleAction::Reject, "", 85),
        rule("p2", "pass-in", 0, Direction::In, RuleAction::Pass, "", 86),
    ];
    v.sort_by(|a, b| a.id.cmp(&b.id));
    v
}

/// The rule view as `RulesChanged` carries it.
fn view(rules: Vec<CompiledRuleInput>) -> Arc<[Arc<CompiledRuleInput>]> {
    rules.into_iter().map(Arc::new).collect()
}

fn generations(g1: i64, g2: i64) -> Vec<PolicyGeneration> {
    vec![
        PolicyGeneration {
            name: "p1".into(),
            uid: "p1".into(),
            generation: g1,
            antrea_native: true,
            not_enforced: None,
        },
        PolicyGeneration {
            name: "p2".into(),
            uid: "p2".into(),
            generation: g2,
            antrea_native: true,
            not_enforced: None,
        },
    ]
}

impl World {
    async fn last_realized(&self) -> Option<PoliciesRealized> {
        self.installer
            .send(GetLastRealized)
            .await
            .expect("installer alive")
    }

    async fn wait_realized(&self, want: &PoliciesRealized) {
        eventually(&format!("realized {want:?}"), || async {
            self.last_realized().await.as_ref() == Some(want)
        })
        .await;
    }

    /// The interfaces, then the fixture's rules as sync epoch 1, committed and realized.
    async fn first_sync(&self) {
        self.installer.do_send(interfaces());
        self.installer.do_send(RulesChanged {
            rules: view(rules()),
            policies: generations(1, 1),
            sync_epoch: 1,
            interface_ofports: interfaces().ofports(),
            changes: None,
        });
        self.wait_realized(&PoliciesRealized {
            policies: generations(1, 1).into(),
            sync_epoch: 1,
        })
        .await;
    }
}

fn rule_key(r: &antrea_vm_agent::messages::RuleStats) -> (String, String, Direction) {
    (r.policy.uid.clone(), r.rule_name.clone(), r.direction)
}

#[actix_rt::test]
async fn rule_counters_come_from_the_metric_flows_summed_per_rule() {
    let w = start().await;
    let err = w
        .installer
        .send(GetRuleStats)
        .await
        .expect("installer alive")
        .expect_err("no stats before the first sync");
    assert!(
        matches!(err, RuleStatsError::NotConnected | RuleStatsError::NotSynced),
        "{err}"
    );

    w.first_sync().await;

    // Counters on every metric flow: flow i gets 10 + i packets of 100 bytes. The expected sums
    // come from each flow's own match (conjunction id, +new or not, deny), independently of the
    // agent's code, mapped to rules through the conjunction actions of the action flows.
    let sw = w.connector.switch();
    let flows = sw.flows();
    let metric: Vec<_> = flows
        .iter()
        .filter(|f| {
            (f.table == table::EGRESS_METRIC || f.table == table::INGRESS_METRIC) && f.priority == 200
        })
        .cloned()
        .collect();
    assert_eq!(
        metric.len(),
        3 * 4 + 2,
        "metric flows of 3 Allow conjunctions (dual-stack) + Drop + Reject"
    );
    let mut expected: BTreeMap<(String, String, Direction), (u64, u64, u64)> = BTreeMap::new();
    for (i, f) in metric.iter().enumerate() {
        let packets = 10 + i as u64;
        sw.set_counters(&f.key(), packets, packets * 100);
        // Which rule: the conjunction id is in ct_label (Allow) or reg3 (deny).
        let (conj, sessions) = match f.matches.ct_label {
            Some(l) if f.table == table::EGRESS_METRIC => (
                (l.value >> 32) as u32,
                f.matches.ct_state.is_some_and(|s| s.value & ct_state::NEW != 0),
            ),
            Some(l) => (
                l.value as u32,
                f.matches.ct_state.is_some_and(|s| s.value & ct_state::NEW != 0),
            ),
            None => (f.matches.regs[&3].value, true),
        };
        let rule = rule_of_conj(&flows, conj);
        let e = expected
            .entry((rule.0.clone(), rule.1.clone(), rule.2))
            .or_default();
        e.0 += packets;
        e.1 += packets * 100;
        if sessions {
            e.2 += packets;
        }
    }
    let snap = w
        .installer
        .send(GetRuleStats)
        .await
        .expect("installer alive")
        .expect("stats");
    let got: BTreeMap<_, _> = snap
        .rules
        .iter()
        .map(|r| (rule_key(r), (r.packets, r.bytes, r.sessions)))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        snap.rules
            .iter()
            .map(|r| (r.rule_name.as_str(), r.action, r.tier_priority))
            .collect::<Vec<_>>(),
        vec![
            ("allow-in", RuleAction::Allow, 250),
            ("allow-out", RuleAction::Allow, 250),
            ("drop-in", RuleAction::Drop, 250),
            ("reject-out", RuleAction::Reject, 100),
        ]
    );
    // The mapping helper agrees on every flow of the dump.
    for f in &metric {
        let fs = FlowStats {
            flow: f.clone(),
            packet_count: 1,
            byte_count: 1,
            duration: Duration::ZERO,
            idle_age: None,
            flags: 0,
            importance: 0,
        };
        assert!(metric_sample(&fs).is_some(), "{f:?}");
    }

    // Disconnected (and unable to reconnect): an error, not stale numbers.
    w.connector.set_fail_connects(true);
    w.connector.disconnect();
    eventually("stats fail while disconnected", || async {
        w.installer
            .send(GetRuleStats)
            .await
            .expect("installer alive")
            .is_err()
    })
    .await;
    w.connector.set_fail_connects(false);
    eventually("stats again after reconnecting", || async {
        w.installer
            .send(GetRuleStats)
            .await
            .expect("installer alive")
            .is_ok_and(|s| s.rules.len() == 4)
    })
    .await;
    // The counters survived the reconnect (flows were not replaced).
    let again = w
        .installer
        .send(GetRuleStats)
        .await
        .expect("alive")
        .expect("stats");
    assert_eq!(again, snap);
}

/// The rule of a conjunction id, found independently of the agent's mapping: the service
/// clause flow carrying `conjunction(conj, ...)` matches the rule's unique TCP port.
fn rule_of_conj(flows: &[antrea_vm_agent::ovs::openflow::Flow], conj: u32) -> (String, String, Direction) {
    use antrea_vm_agent::ovs::openflow::Action;
    let clause = flows
        .iter()
        .find(|f| {
            f.matches.tp_dst.is_some()
                && f.actions
                    .iter()
                    .any(|a| matches!(a, Action::Conjunction { id, .. } if *id == conj))
        })
        .unwrap_or_else(|| panic!("no service clause for conjunction {conj}"));
    let port = clause.matches.tp_dst.expect("port").value;
    let r = rules()
        .into_iter()
        .find(|r| r.services.as_ref().is_some_and(|s| s[0].port == Some(port)))
        .unwrap_or_else(|| panic!("no rule with port {port}"));
    (r.policy.uid, r.rule_name, r.direction)
}

#[actix_rt::test]
async fn realization_is_reported_after_each_successful_commit_only() {
    let w = start().await;
    w.first_sync().await;
    let sw = w.connector.switch();
    let adds = w.metrics.ovs_flow_ops.with_label_values(&["add"]).get();
    assert!(
        adds as usize >= sw.flows().len(),
        "every flow of the first sync counted as an add"
    );
    let bundles = sw.bundles_committed();

    // A generation bump without a flow change is realized at once, with no bundle.
    w.installer.do_send(RulesChanged {
        rules: view(rules()),
        policies: generations(2, 1),
        sync_epoch: 1,
        interface_ofports: interfaces().ofports(),
        changes: None,
    });
    w.wait_realized(&PoliciesRealized {
        policies: generations(2, 1).into(),
        sync_epoch: 1,
    })
    .await;
    assert_eq!(sw.bundles_committed(), bundles);

    // A change whose bundle the switch rejects is not realized until the retry commits.
    sw.fail_next_bundle("OFPBFC_MSG_FAILED");
    let mut fewer = rules();
    fewer.retain(|r| r.rule_name != "drop-in");
    w.installer.do_send(RulesChanged {
        rules: view(fewer),
        policies: generations(3, 1),
        sync_epoch: 2,
        interface_ofports: interfaces().ofports(),
        changes: None,
    });
    eventually("the bundle failed", || async {
        w.metrics.ovs_flow_ops_errors.with_label_values(&["delete"]).get() > 0
    })
    .await;
    assert_eq!(
        w.last_realized().await,
        Some(PoliciesRealized {
            policies: generations(2, 1).into(),
            sync_epoch: 1,
        }),
        "nothing new is realized while the bundle failed"
    );
    let want = PoliciesRealized {
        policies: generations(3, 1).into(),
        sync_epoch: 2,
    };
    w.wait_realized(&want).await;
    assert!(w.metrics.ovs_flow_ops.with_label_values(&["delete"]).get() > 0);
    assert!(
        w.metrics
            .ovs_flow_ops_latency
            .with_label_values(&["delete"])
            .get_sample_count()
            >= 2,
        "the failed and the committed bundle's latency"
    );
    assert!(
        w.metrics
            .realization_latency
            .with_label_values::<&str>(&[])
            .get_sample_count()
            >= 2,
        "the first sync's and the retried change's realization latency"
    );
}

/// `trace` is answered only once the installer committed a sync: before it (after a restart or
/// a take-over) the flows on the bridge have no conjunctions the agent published.
#[actix_rt::test]
async fn the_trace_context_is_synced_only_after_the_first_commit() {
    let w = start().await;
    let ctx = w.installer.send(GetTraceContext).await.expect("installer alive");
    assert!(!ctx.synced, "synced before any sync");
    assert!(ctx.conjunctions.is_empty());
    w.first_sync().await;
    let ctx = w.installer.send(GetTraceContext).await.expect("installer alive");
    assert!(ctx.synced, "not synced after the first commit");
    assert!(!ctx.conjunctions.is_empty());
}
