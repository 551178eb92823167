//! Benchmark: compile 10,000 NetworkPolicy rules (about 100,000+ flows, dual-stack) into the
//! agent's flows, and report the time and the memory it takes. Pure: no OVS needed.
//!
//!     cargo bench --bench policy_compile
//!
//! Prints the median of 5 compilations and the process's peak RSS growth (VmHWM) over the run,
//! the plan from no rules to all of them with no flow built (what the flow installer pays before
//! a large bundle's first byte; `PCBENCH_PLAN_ROUNDS`, default 5, for more rounds), then the
//! flow installer's incremental path in-process: [`Compiler::update`] from no rules to
//! the 10,000 (all adds), and one single-rule policy added, changed and deleted 20 times each
//! with the 10,000 in place (p50/p99 of the update, flow_mods per change), once comparing the
//! whole rule view and once told the changed rule id (as the policy cache tells the flow
//! installer). `PCBENCH_RULES=50000` for the 50,000-rule case (the rules are in one tier).
//! Without the `--bench` argument (as `cargo test --all-targets` starts bench targets) it only
//! prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use antrea_vm_agent::policy::compiler::{compile, CompileOptions, Compiler};
use antrea_vm_agent::policy::rule::{CompiledRuleInput, Protocol, RuleId, Service};

mod common;

const DEFAULT_RULES: usize = 10_000;
const ROUNDS: usize = 5;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("policy_compile: run with `cargo bench --bench policy_compile`");
        return;
    }
    let rules = common::env_usize("PCBENCH_RULES", DEFAULT_RULES).max(1);
    let input = common::fleet_rules(rules);
    let rss_before = common::status_kib("VmRSS:");
    let mut times: Vec<Duration> = Vec::with_capacity(ROUNDS);
    let mut flows = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let out = compile(&input, 1, CompileOptions::default());
        times.push(start.elapsed());
        flows = out.flows.len();
        assert_eq!(out.conjunctions.len(), rules, "every rule compiled");
    }
    times.sort();
    let peak = common::status_kib("VmHWM:");
    println!("compile {rules} rules -> {flows} flows (IPv4 + IPv6)");
    println!(
        "  median {:?}  (min {:?}, max {:?}, {ROUNDS} rounds)",
        times[ROUNDS / 2],
        times[0],
        times[ROUNDS - 1]
    );
    println!(
        "  peak RSS {:.1} MB, of which {:.1} MB above the process's size before compiling",
        peak as f64 / 1024.0,
        peak.saturating_sub(rss_before) as f64 / 1024.0
    );
    incremental(&input);
}

/// The `q` quantile (nearest rank) of sorted `v`.
fn quantile(v: &[Duration], q: f64) -> Duration {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied().unwrap_or_default()
}

/// The flow installer's path: a shared rule view, updated one policy at a time.
fn incremental(input: &[CompiledRuleInput]) {
    let mut view: Vec<Arc<CompiledRuleInput>> = input.iter().cloned().map(Arc::new).collect();
    view.sort_by(|a, b| a.id.cmp(&b.id));
    // What the flow installer does before a large bundle's first byte: move the compiler to the
    // new rules (placement, ids, groups) without building any flow (built while streaming).
    let plan_rounds = common::env_usize("PCBENCH_PLAN_ROUNDS", ROUNDS).max(1);
    let mut plans: Vec<Duration> = Vec::with_capacity(plan_rounds);
    for _ in 0..plan_rounds {
        let mut c = Compiler::new(CompileOptions::default());
        c.update(&[], 1);
        let start = Instant::now();
        let (up, delta) = c.update_delta(&view, None, 1, true);
        plans.push(start.elapsed());
        assert!(up.skipped.is_empty() && !delta.is_empty(), "every rule placed");
    }
    plans.sort();
    println!(
        "plan from 0 to {} rules (placement, ids and groups; no flow built): median {:?} (min {:?}, {plan_rounds} rounds)",
        view.len(),
        plans[plans.len() / 2],
        plans[0]
    );
    let mut c = Compiler::new(CompileOptions::default());
    c.update(&[], 1);
    let start = Instant::now();
    let all = c.update_or_rebuild(&view, 1);
    let load = start.elapsed();
    println!(
        "update from 0 to {} rules: {:?}, {} flow_mods{}",
        view.len(),
        load,
        all.mods.len(),
        if all.full {
            " (rebuilt from scratch: a full resync)"
        } else {
            ""
        }
    );
    drop(all);
    let mut hinted = c.clone();
    for with_hint in [false, true] {
        let c = if with_hint { &mut hinted } else { &mut c };
        let mut times: Vec<Duration> = Vec::new();
        let mut mods: Vec<usize> = Vec::new();
        let template = input[0].clone();
        let mut previous_id = None;
        for j in 0..20u16 {
            for port in [Some(7000 + j), Some(17000 + j), None] {
                let mut next = view.clone();
                let mut r = template.clone();
                r.id.policy_uid = "uid-inc".into();
                r.policy.uid = "uid-inc".into();
                r.policy.name = "inc".into();
                r.policy_priority = 0.5;
                if let Some(port) = port {
                    r.services = Some(vec![Service::port(Protocol::Tcp, port)]);
                    next.push(Arc::new(r.clone()));
                    next.sort_by(|a, b| a.id.cmp(&b.id));
                }
                // The ids the policy cache names: the rule's, before and after.
                let ids: BTreeSet<RuleId> = previous_id.take().into_iter().chain([r.id.clone()]).collect();
                previous_id = port.map(|_| r.id.clone());
                let start = Instant::now();
                let up = if with_hint {
                    c.update_or_rebuild_hinted(&next, Some(&ids), 1)
                } else {
                    c.update_or_rebuild(&next, 1)
                };
                times.push(start.elapsed());
                mods.push(up.mods.len());
            }
        }
        times.sort();
        println!(
            "one rule added/changed/deleted with {} rules, {}: update p50 {:?} p99 {:?} max {:?}; flow_mods {:?}..{:?}",
            view.len(),
            if with_hint {
                "told the changed rule id"
            } else {
                "comparing the whole view"
            },
            quantile(&times, 0.5),
            quantile(&times, 0.99),
            quantile(&times, 1.0),
            mods.iter().min(),
            mods.iter().max()
        );
    }
    println!(
        "  VmRSS now {:.1} MB (input, compiler state and allocator slack)",
        common::status_kib("VmRSS:") as f64 / 1024.0
    );
}
