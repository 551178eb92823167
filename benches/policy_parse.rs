//! Benchmark: what reading a policy directory costs before any flow is built, phase by phase.
//! No OVS, no root: the files go to a temporary directory.
//!
//!     cargo bench --bench policy_parse
//!
//! The texts are `policy_realize`'s fleets (`benches/common/fleet_files.rs`: 2,000 NetworkPolicy
//! files of 5 rules, about 2.5 MB of YAML; `PPBENCH_POLICIES` changes the count). Each round
//! takes every file through the same steps as the policy directory's loader, on one thread, and
//! times each step over all files:
//! 1. the linear pre-scan of nesting and size (`bounded::prescan`);
//! 2. YAML to `serde_json::Value` within the input limits (`bounded::parse_values`, which runs
//!    the pre-scan again, as the loader does, then reads the YAML with `serde_norway`);
//! 3. the value to the wire type (`ControlplaneObject::from_value`);
//! 4. validation into the typed policy (`ControlplaneObject::validate`).
//!
//! Then steps 2 to 4 on every core (at most 4, as the loader spreads them), the same objects as
//! JSON (what `.json` policy files cost), and what the YAML library alone costs for step 2 (the
//! texts through `serde_norway` into `serde_json::Value`, with no limits and no loader steps).
//! Last, the loader's whole first pass (`PolicyDirSource`: read, parse on all cores, snapshot)
//! over the fleet written as YAML files and as JSON files. Medians of 7 rounds, for the
//! fractional and the whole-number fleets. Without the `--bench` argument (as `cargo test
//! --all-targets` starts bench targets) it only prints how to run it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::time::{Duration, Instant};

use antrea_vm_agent::config::InputLimits;
use antrea_vm_agent::policy::controlplane::{ControlplaneObject, Validate as _};
use antrea_vm_agent::sources::bounded::{parse_values, prescan};
use serde_json::Value;

mod common;

use common::fleet_files::{as_json, fleet_policy, Fleet, APPLIED_TO, FRACTIONAL_STEP};

const ROUNDS: usize = 7;

/// The median of `ROUNDS` rounds, each timing itself.
fn median(mut round: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..ROUNDS).map(|_| round()).collect();
    times.sort();
    times[ROUNDS / 2]
}

/// How long `work` takes.
fn time(work: impl FnOnce()) -> Duration {
    let start = Instant::now();
    work();
    start.elapsed()
}

/// Median of `ROUNDS` runs of `step` over every item.
fn timed<I, T>(items: &[I], mut step: impl FnMut(&I) -> T) -> Duration {
    median(|| {
        time(|| {
            for item in items {
                std::hint::black_box(step(item));
            }
        })
    })
}

fn parse(text: &str, limits: &InputLimits) -> Vec<Value> {
    parse_values(text, false, limits).expect("a fleet file parses")
}

/// Steps 2 to 4 for a fleet file (one NetworkPolicy), as the loader takes it.
fn load(text: &str, limits: &InputLimits) -> ControlplaneObject {
    let [value] = <[Value; 1]>::try_from(parse(text, limits)).expect("one document per fleet file");
    let o = ControlplaneObject::from_value(value).expect("decodes");
    o.validate().expect("valid");
    o
}

fn fleet(label: &str, fleet: Fleet, policies: usize) {
    let limits = InputLimits::default();
    let texts: Vec<String> = (0..policies).map(|i| fleet_policy(i, fleet)).collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    let values: Vec<Value> = texts.iter().flat_map(|t| parse(t, &limits)).collect();
    assert_eq!(values.len(), policies, "one object per file");
    let objects: Vec<ControlplaneObject> = values
        .iter()
        .map(|v| ControlplaneObject::from_value(v.clone()).expect("a fleet policy decodes"))
        .collect();
    for o in &objects {
        o.validate().expect("a fleet policy is valid");
    }

    let scan = timed(&texts, |t| prescan(t, &limits).expect("within the limits"));
    let to_value = timed(&texts, |t| parse(t, &limits));
    let library = timed(&texts, |t| {
        serde_norway::from_str::<Value>(t).expect("a fleet file parses")
    });
    // Decoding consumes the value: time it on fresh copies, minus the copying.
    let copy = timed(&values, Value::clone);
    let decode_and_copy = timed(&values, |v| {
        ControlplaneObject::from_value(v.clone()).expect("decodes")
    });
    let decode = decode_and_copy.saturating_sub(copy);
    let validate = timed(&objects, |o| o.validate().expect("valid"));
    // Steps 2 to 4 on every core (at most 4), each thread taking the next file, as the policy
    // directory's loader does.
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(4);
    let parallel = median(|| {
        let next = std::sync::atomic::AtomicUsize::new(0);
        time(|| {
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| loop {
                        let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(text) = texts.get(at) else { break };
                        std::hint::black_box(load(text, &limits));
                    });
                }
            });
        })
    });
    // The same objects as JSON files (`.json`: parsed by serde_json within the same limits).
    let json: Vec<String> = values
        .iter()
        .map(|v| serde_json::to_string(v).expect("JSON"))
        .collect();
    let json_bytes: usize = json.iter().map(String::len).sum();
    let json_total = timed(&json, |t| {
        for v in parse_values(t, true, &limits).expect("a JSON file parses") {
            let o = ControlplaneObject::from_value(v).expect("decodes");
            std::hint::black_box(o.validate().expect("valid"));
        }
    });
    let ms = common::ms;
    let rate = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    let total = to_value + decode + validate;
    println!(
        "{label}: {policies} files, {:.2} MB of YAML; median of {ROUNDS} rounds, one thread",
        bytes as f64 / 1e6
    );
    println!("  1. pre-scan                {:>8.1} ms", ms(scan));
    println!(
        "  2. YAML -> Value (limits)  {:>8.1} ms  ({:.1} MB/s; includes step 1)",
        ms(to_value),
        rate(to_value)
    );
    println!("  3. Value -> wire type      {:>8.1} ms", ms(decode));
    println!("  4. validate                {:>8.1} ms", ms(validate));
    println!(
        "  2 to 4                     {:>8.1} ms  ({:.1} MB/s)",
        ms(total),
        rate(total)
    );
    println!(
        "  2 to 4 on {threads} threads      {:>8.1} ms  ({:.2}x one thread)",
        ms(parallel),
        total.as_secs_f64() / parallel.as_secs_f64()
    );
    println!(
        "  the same objects as JSON ({:.2} MB), 2 to 4 {:>8.1} ms  ({:.2}x faster than YAML)",
        json_bytes as f64 / 1e6,
        ms(json_total),
        total.as_secs_f64() / json_total.as_secs_f64()
    );
    println!(
        "  step 2 by the YAML library alone (serde_norway -> Value, no limits) {:>8.1} ms  ({:.1} MB/s; {:.1}x step 2)",
        ms(library),
        rate(library),
        library.as_secs_f64() / to_value.as_secs_f64()
    );
}

/// The policy directory's first pass over `texts` written as files (read, parse on every core,
/// validate, the snapshot): median of `ROUNDS` fresh sources, from subscribing to the snapshot.
fn first_pass(label: &str, texts: &[String], extension: &str) {
    use antrea_vm_agent::sources::policy_dir::PolicyDirSource;
    use futures::StreamExt;
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("00-atg.yaml"), APPLIED_TO).expect("write");
    for (i, text) in texts.iter().enumerate() {
        std::fs::write(dir.path().join(format!("10-fleet-{i:05}.{extension}")), text).expect("write");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let pass = median(|| {
        let source = PolicyDirSource::new(dir.path(), Duration::from_secs(3600));
        let start = Instant::now();
        let snapshot = runtime.block_on(async { source.subscribe().next().await.expect("a snapshot") });
        let took = start.elapsed();
        assert_eq!(
            snapshot.network_policies.len(),
            texts.len(),
            "every policy loaded"
        );
        assert!(snapshot.errors.is_empty(), "{:?}", snapshot.errors);
        took
    });
    println!(
        "{label}: the policy directory's first pass (read {} {extension} files, parse on all cores, snapshot): {:.1} ms",
        texts.len() + 1,
        common::ms(pass)
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("policy_parse: run with `cargo bench --bench policy_parse`");
        return;
    }
    let policies = common::env_usize("PPBENCH_POLICIES", 2000).max(1);
    for (label, kind) in [
        ("fractional", Fleet::Fractional(FRACTIONAL_STEP)),
        ("whole", Fleet::Whole),
    ] {
        fleet(label, kind, policies);
        let texts: Vec<String> = (0..policies).map(|i| fleet_policy(i, kind)).collect();
        first_pass(label, &texts, "yaml");
        let json: Vec<String> = texts.iter().map(|t| as_json(t)).collect();
        first_pass(label, &json, "json");
    }
}
