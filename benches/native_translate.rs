//! Benchmark: the local controller on 2,000 Antrea-native policies over an inventory of 5,000
//! ExternalEntities, as the standalone policy directory runs it (decode + check each object,
//! translate, validate the controlplane output). Pure: no OVS.
//!
//!     cargo bench --bench native_translate
//!
//! Prints the time of a full translation (median of 5), the peak RSS (VmHWM), and the latency
//! of one inventory label change to a new snapshot (re-translation, as the directory source does
//! on every change; p50/p99 over 50 changes). Flows are not committed here: the flow installer's
//! incremental cost is what `policy_compile`/`policy_realize` measure. Exits 1 when fewer
//! policies or rules come out than went in.

use std::time::{Duration, Instant};

use antrea_vm_agent::policy::native::{decode, local_entities, translate, Inputs, NativeObject};
use serde_json::{json, Value};

const POLICIES: usize = 2_000;
const ENTITIES: usize = 5_000;
const APPS: usize = 500;

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn entity(i: usize, app: usize) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
           "metadata": {"name": format!("host{i}"), "namespace": format!("ns{}", i % 10),
                        "labels": {"app": format!("a{app}"), "tier": format!("t{}", i % 5)}},
           "spec": {"endpoints": [{"ip": format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256)}]}})
}

fn policy(i: usize) -> Value {
    let rule = json!({"action": if i.is_multiple_of(3) { "Drop" } else { "Allow" },
                      "ports": [{"protocol": "TCP", "port": 1000 + (i % 1000)}],
                      "from": [{"externalEntitySelector": {"matchLabels": {"app": format!("a{}", i % APPS)}},
                                "namespaceSelector": {}},
                               {"ipBlock": {"cidr": format!("192.168.{}.0/24", i % 256)}}]});
    if i.is_multiple_of(2) {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
               "metadata": {"name": format!("annp{i}"), "namespace": "vm-ns"},
               "spec": {"priority": 1 + (i % 100), "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                        "ingress": [rule]}})
    } else {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": format!("acnp{i}")},
               "spec": {"tier": "securityops", "priority": 1 + (i % 100),
                        "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                        "ingress": [rule]}})
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Translation and validation of the output: what the directory source does per change.
fn snapshot(inputs: &Inputs) -> (usize, usize) {
    let t = translate(inputs);
    let mut rules = 0;
    for object in t.objects() {
        if let Ok(antrea_vm_agent::policy::controlplane::ValidObject::NetworkPolicy(p)) = object.validate() {
            rules += p.rules.len();
        }
    }
    (t.network_policies.len(), rules)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("native_translate: run with `cargo bench --bench native_translate`");
        return;
    }
    let rss_start = status_kib("VmRSS:");
    let node: antrea_vm_agent::k8s::external_node::ExternalNodeObject = serde_json::from_value(json!({
        "apiVersion": "crd.antrea.io/v1alpha1", "kind": "ExternalNode",
        "metadata": {"name": "vm1", "namespace": "vm-ns", "labels": {"role": "db"}},
        "spec": {"interfaces": [{"name": "eth0", "ips": ["10.99.0.2"]}]}}))
    .expect("node");
    let decode_start = Instant::now();
    let mut objects: Vec<(String, NativeObject)> = Vec::with_capacity(POLICIES + ENTITIES);
    for i in 0..ENTITIES {
        objects.push(("inventory".into(), decode(entity(i, i % APPS)).expect("entity")));
    }
    for i in 0..POLICIES {
        objects.push(("policies".into(), decode(policy(i)).expect("policy")));
    }
    let decode_time = decode_start.elapsed();
    let mut inputs = Inputs {
        objects,
        local_entities: local_entities(&node),
    };

    let mut full = Vec::new();
    let mut result = (0, 0);
    for _ in 0..5 {
        let start = Instant::now();
        result = snapshot(&inputs);
        full.push(start.elapsed());
    }
    full.sort();
    let (policies, rules) = result;
    println!(
        "native_translate: {POLICIES} policies over {ENTITIES} ExternalEntities: decode+check {:.1} ms, \
         translate+validate {:.1} ms (median of 5), {policies} policies, {rules} rules",
        decode_time.as_secs_f64() * 1e3,
        full[2].as_secs_f64() * 1e3
    );

    let mut changes = Vec::new();
    for n in 0..50 {
        let i = n * 97 % ENTITIES;
        inputs.objects[i].1 = decode(entity(i, (i + n + 1) % APPS)).expect("entity");
        let start = Instant::now();
        let _ = snapshot(&inputs);
        changes.push(start.elapsed());
    }
    changes.sort();
    println!(
        "native_translate: one label change -> new snapshot: p50 {:.1} ms, p99 {:.1} ms (50 changes; \
         flows commit not included)",
        percentile(&changes, 0.5).as_secs_f64() * 1e3,
        percentile(&changes, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "native_translate: RSS at start {} KiB, peak (VmHWM) {} KiB",
        rss_start,
        status_kib("VmHWM:")
    );
    if policies != POLICIES || rules != POLICIES {
        eprintln!("native_translate: {policies} policies / {rules} rules out of {POLICIES} given");
        std::process::exit(1);
    }
}
