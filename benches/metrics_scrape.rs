//! `cargo bench --bench metrics_scrape`: the scrape-time cost of the per-rule metric families
//! for 10,000 rules: building and encoding them from a `RuleStatsSnapshot` (pure, no actors,
//! no switch), and the whole `/metrics` page built from the same answers (registry included).
//! Prints median and p99 over the runs. The budget is < 50 ms per scrape including
//! the switch-side collection, which is measured separately in benches/rule_stats.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::time::{Duration, Instant};

use antrea_vm_agent::actors::policy_cache::query::PolicyCounts;
use antrea_vm_agent::actors::supervisor::SupervisorReport;
use antrea_vm_agent::api::collect::{render_rule_families, Collected};
use antrea_vm_agent::api::handlers::metrics_text;
use antrea_vm_agent::messages::{RuleStats, RuleStatsSnapshot};
use antrea_vm_agent::policy::rule::{Direction, PolicyRef, PolicyType, RuleAction};
use antrea_vm_agent::telemetry::AgentMetrics;

const RULES: usize = 10_000;
const RUNS: usize = 60;

fn snapshot() -> RuleStatsSnapshot {
    let tiers = [50, 100, 150, 200, 250, 253, 42];
    let actions = [
        RuleAction::Allow,
        RuleAction::Drop,
        RuleAction::Reject,
        RuleAction::Pass,
    ];
    RuleStatsSnapshot {
        rules: (0..RULES)
            .map(|i| RuleStats {
                policy: PolicyRef {
                    policy_type: if i % 3 == 0 {
                        PolicyType::AntreaClusterNetworkPolicy
                    } else {
                        PolicyType::AntreaNetworkPolicy
                    },
                    namespace: if i % 3 == 0 {
                        String::new()
                    } else {
                        format!("ns-{}", i % 40)
                    },
                    name: format!("policy-{}", i / 10),
                    uid: format!("6f1c2d3e-0000-4000-8000-{:012x}", i / 10),
                },
                rule_name: format!("rule-{}-allow-from-frontend", i % 10),
                direction: if i % 2 == 0 { Direction::In } else { Direction::Out },
                action: actions[i % actions.len()],
                tier_priority: tiers[i % tiers.len()],
                packets: (i as u64) * 1_000_003,
                bytes: (i as u64) * 1_500_000_007,
                sessions: (i as u64) * 17,
            })
            .collect(),
    }
}

fn report(name: &str, mut samples: Vec<Duration>, bytes: usize) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    println!(
        "{name:<48} median {:>7.2} ms   p99 {:>7.2} ms   ({} KiB of text)",
        median.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0,
        bytes / 1024
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("metrics_scrape: a benchmark, not a test; run it with `cargo bench --bench metrics_scrape`");
        return;
    }
    let stats = snapshot();
    let mut samples = Vec::with_capacity(RUNS);
    let mut size = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut out = String::new();
        render_rule_families(&stats, &mut out);
        samples.push(t.elapsed());
        size = out.len();
        std::hint::black_box(&out);
    }
    println!("metrics_scrape: {RULES} rules, {RUNS} runs");
    report("per-rule families (build + encode)", samples, size);

    let metrics = AgentMetrics::new();
    metrics.ovs_flow_ops.with_label_values(&["add"]).inc_by(50_000);
    let collected = Collected {
        report: Some(SupervisorReport::default()),
        counts: Some(PolicyCounts {
            network_policies: RULES / 10,
            ingress_rules: RULES / 2,
            egress_rules: RULES / 2,
            effective_rules: RULES,
            policies_known: true,
            ..PolicyCounts::default()
        }),
        rule_stats: Some(stats),
        ..Collected::default()
    };
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        let page = metrics_text(&metrics, &collected);
        samples.push(t.elapsed());
        size = page.len();
        std::hint::black_box(&page);
    }
    report("whole /metrics page from the answers", samples, size);
}
