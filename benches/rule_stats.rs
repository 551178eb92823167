//! Benchmark: collecting the per-rule counters of 10,000 NetworkPolicy rules from a real Open
//! vSwitch, the way the flow installer answers `GetRuleStats` (a Prometheus scrape): the dump of
//! the two metric tables ([`dump_metric_flows`]) and the mapping of each metric flow to its rule
//! ([`rule_stats_for`]). Target: under 50 ms per scrape.
//!
//! Run (as root, with the lab's tools installed: `make deps`):
//!
//! ```sh
//! cargo bench --bench rule_stats
//! # options, as environment variables: RSBENCH_RULES (default 10000), RSBENCH_RUNS (20)
//! ```
//!
//! Setup: the lab's private userspace OVS (`tests/support/lab.rs`, as `benches/policy_realize.rs`)
//! with a bridge, the NetworkPolicy groups, and the flows the agent's compiler produces for
//! 10,000 rules shaped like `benches/policy_compile.rs` (2,000 policies of 5 rules, ingress and
//! egress, every action, dual-stack: about 150k flows, of which the metric flows are about 15k),
//! installed in one bundle through our OpenFlow connection. Then `RSBENCH_RUNS` collections;
//! each prints the dump time, the mapping time and the total; median and p99 at the end, plus
//! `ovs-ofctl dump-flows` of the same two tables for comparison.
//!
//! This is a `harness = false` bench: `cargo test --all-targets` also builds and starts it,
//! without `--bench`, and then it only prints how to run it. Every wait is bounded; the lab is
//! removed on exit, also after a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use antrea_vm_agent::actors::flow_installer::{dump_metric_flows, rule_stats_for};
use antrea_vm_agent::ovs::openflow::conn::{ConnOptions, OfConnection};
use antrea_vm_agent::ovs::openflow::{FlowMod, Switch};
use antrea_vm_agent::policy::compiler::{CompileOptions, Compiler};
use antrea_vm_agent::policy::pipeline::{self, table};
use antrea_vm_agent::policy::rule::RuleAction;

use common::{env_usize, fleet_rules, ms, quantile};
use support::*;

const HOW: &str = "cargo bench --bench rule_stats";
const TARGET_MS: f64 = 50.0;

/// `ovs-ofctl dump-flows` of one table's NetworkPolicy flows; the number of flow lines.
fn ofctl_dump(lab: &Lab, table: u8) -> usize {
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow15", "--timeout=60", "dump-flows"])
        .arg(format!("unix:{}", lab.mgmt_sock().display()))
        .arg(format!("table={table},cookie=0x20000000000/0xff0000000000"))
        .output()
        .unwrap_or_else(|e| panic!("run ovs-ofctl: {e}"));
    assert!(
        out.status.success(),
        "ovs-ofctl dump-flows failed: {}",
        out.describe()
    );
    out.stdout_text()
        .lines()
        .filter(|l| l.contains("priority="))
        .count()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("rule_stats: a benchmark, not a test; run it with `{HOW}` (as root)");
        return;
    }
    let n = env_usize("RSBENCH_RULES", 10_000).max(1);
    let runs = env_usize("RSBENCH_RUNS", 20).max(1);
    println!("rule_stats: per-rule counters of {n} rules, {runs} collections");
    println!("command: {HOW}");

    let lab = Lab::new();
    lab.ovs_vsctl(&[
        "add-br",
        BRIDGE,
        "--",
        "set",
        "bridge",
        BRIDGE,
        "datapath_type=netdev",
        "protocols=OpenFlow15",
        "fail_mode=secure",
    ]);
    wait_until(Duration::from_secs(20), "the bridge's management socket", || {
        lab.mgmt_sock().exists()
    });
    let switch = OfConnection::connect(&lab.mgmt_sock(), 0x7ab5, ConnOptions::default())
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", lab.mgmt_sock().display()));
    switch
        .replace_groups(pipeline::network_policy_groups())
        .await
        .expect("install the NetworkPolicy groups");

    // Sorted by rule id, as `RulesChanged` delivers them to the flow installer.
    let mut rules = fleet_rules(n);
    rules.sort_by(|a, b| a.id.cmp(&b.id));
    let t = Instant::now();
    let mut compiler = Compiler::new(CompileOptions::default());
    let compiled = compiler.compile(&rules, 1);
    let compile_time = t.elapsed();
    assert!(
        compiled.skipped.is_empty(),
        "{} rules not compiled",
        compiled.skipped.len()
    );
    let total = compiled.flows.len();
    let metric_flows = compiled
        .flows
        .values()
        .filter(|f| f.table == table::EGRESS_METRIC || f.table == table::INGRESS_METRIC)
        .count();
    let t = Instant::now();
    switch
        .bundle(compiled.flows.values().cloned().map(FlowMod::add).collect())
        .await
        .expect("install the flows");
    println!(
        "installed {total} flows ({metric_flows} metric flows) for {n} rules; compiled in {:.0} ms, bundle {:.0} ms",
        ms(compile_time),
        ms(t.elapsed())
    );

    let mut dump = Vec::with_capacity(runs);
    let mut map = Vec::with_capacity(runs);
    let mut all = Vec::with_capacity(runs);
    let mut reported = 0;
    for run in 0..runs {
        let t0 = Instant::now();
        let flows = tokio::time::timeout(Duration::from_secs(60), dump_metric_flows(&switch))
            .await
            .expect("the dump finished within 60 s")
            .expect("dump the metric tables");
        let t1 = Instant::now();
        let snap = rule_stats_for(&flows, &compiled.conjunctions, &rules);
        let t2 = Instant::now();
        assert_eq!(
            flows.len(),
            metric_flows,
            "the dump holds exactly the metric flows"
        );
        reported = snap.rules.len();
        dump.push(ms(t1 - t0));
        map.push(ms(t2 - t1));
        all.push(ms(t2 - t0));
        println!(
            "run {run:>2}: dump {:.1} ms, map {:.1} ms, total {:.1} ms ({} flows, {} rules)",
            ms(t1 - t0),
            ms(t2 - t1),
            ms(t2 - t0),
            flows.len(),
            snap.rules.len()
        );
    }
    // Pass rules have no metric flow; every other rule is reported.
    let expected_rules = rules.iter().filter(|r| r.action != RuleAction::Pass).count();
    assert_eq!(
        reported, expected_rules,
        "every Allow/Drop/Reject rule is reported"
    );

    let t = Instant::now();
    let ofctl_flows = ofctl_dump(&lab, table::EGRESS_METRIC) + ofctl_dump(&lab, table::INGRESS_METRIC);
    let ofctl_time = t.elapsed();
    assert_eq!(ofctl_flows, metric_flows, "ovs-ofctl sees the same metric flows");

    println!();
    println!("=== rule_stats results ({n} rules, {metric_flows} metric flows of {total}) ===");
    for (what, v) in [("dump", &dump), ("map", &map), ("total", &all)] {
        println!(
            "{what:<5} median {:.1} ms, p99 {:.1} ms (min {:.1}, max {:.1})",
            quantile(v, 0.5),
            quantile(v, 0.99),
            quantile(v, 0.0),
            quantile(v, 1.0)
        );
    }
    println!(
        "for comparison: ovs-ofctl dump-flows of the two metric tables (two processes, text): {:.0} ms",
        ms(ofctl_time)
    );
    let p99 = quantile(&all, 0.99);
    println!(
        "target: a scrape of {n} rules under {TARGET_MS:.0} ms: {} (p99 {p99:.1} ms)",
        if p99 < TARGET_MS { "met" } else { "NOT met" }
    );
    println!("reproduce: {HOW}");
    drop(switch);
    drop(lab);
}
