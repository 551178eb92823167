//! Benchmark: the local controller on 2,000 Antrea-native policies over an inventory of 5,000
//! ExternalEntities, as the standalone policy directory runs it (decode + check each object,
//! translate, validate the controlplane output), then one inventory label change carried
//! through to the flows. Pure: no OVS.
//!
//!     cargo bench --bench native_translate
//!
//! Prints, side by side:
//! - a full translation + validation (median of 5): what every change cost before the local
//!   controller kept its state, and what the first read of the directory costs;
//! - one label change → new snapshot by full re-translation (p50/p99 over 10 changes), the old
//!   path, as the baseline;
//! - one label change → flow_mods computed by the incremental path (p50/p99 over 50 changes):
//!   [`NativeState::apply`], validation of the changed objects, the policy store, resolution of
//!   the affected policies and the flow compiler's incremental update, all as the agent runs
//!   them; and the controller's part alone. Sending the flow_mods to OVS is not included
//!   (`policy_realize` measures a single rule's round trip to a real OVS);
//! - one label change → new snapshot as the policy directory's loader makes it
//!   ([`LocalController::translate_into`] handed the changed inventory file, one of 10: its 500
//!   objects compared with the ones held, the controller, validation, the snapshot), p50/p99
//!   over 50 changes; reading and parsing the changed file not included (`native_realize`
//!   measures the whole way from the file's write to the flows in OVS);
//! - the policy cache's side of that snapshot (the whole snapshot replaces the store's objects,
//!   which finds the changed ones), p50/p99 over the same 50 changes;
//! - the peak RSS (VmHWM).
//!
//! Exits 1 when fewer policies or rules come out than went in, or when a change that moves an
//! entity between groups produces no flow_mod.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use antrea_vm_agent::k8s::external_node::{external_entity_name, local_entities};
use antrea_vm_agent::messages::{AttachedInterface, EntityRef};
use antrea_vm_agent::policy::compiler::{CompileOptions, Compiler};
use antrea_vm_agent::policy::controlplane::Validate as _;
use antrea_vm_agent::policy::controlplane::{Changes, PolicyStore, ValidObject};
use antrea_vm_agent::policy::native::{
    decode, native_key, translate, Change, Delta, Inputs, NativeObject, NativeState,
};
use antrea_vm_agent::policy::resolve::ResolvedView;
use antrea_vm_agent::sources::native_policies::{ChangedFile, LocalController};
use antrea_vm_agent::sources::policy_dir::PolicySnapshot;
use serde_json::json;

mod common;

const POLICIES: usize = 2_000;
const ENTITIES: usize = 5_000;

use common::native::{entity, policy, APPS, NAMESPACES};

/// Translation and validation of the output: what the directory source did per change.
fn full_snapshot(inputs: &Inputs) -> (usize, usize) {
    let t = translate(inputs);
    let mut rules = 0;
    for object in t.objects() {
        if let Ok(ValidObject::NetworkPolicy(p)) = object.validate() {
            rules += p.rules.len();
        }
    }
    (t.network_policies.len(), rules)
}

/// The agent's side of a delta: validated, applied to the policy store.
fn store_delta(store: &mut PolicyStore, delta: Delta) -> Changes {
    let mut changes = Changes::default();
    for (kind, name) in delta.deleted {
        changes.merge(store.delete(kind, &name));
    }
    for object in delta.upserted {
        match object.validate().map(|v| store.apply(v)) {
            Ok(Ok(c)) => changes.merge(c),
            Ok(Err(e)) => panic!("store refused a translated object: {e}"),
            Err(e) => panic!("the controller produced an invalid object: {e}"),
        }
    }
    changes
}

fn p50_p99(v: &[Duration]) -> (f64, f64) {
    let ms: Vec<f64> = v.iter().copied().map(common::ms).collect();
    (common::quantile(&ms, 0.5), common::quantile(&ms, 0.99))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("native_translate: run with `cargo bench --bench native_translate`");
        return;
    }
    let rss_start = common::status_kib("VmRSS:");
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
        result = full_snapshot(&inputs);
        full.push(start.elapsed());
    }
    full.sort();
    let (policies, rules) = result;
    println!(
        "native_translate: {POLICIES} policies over {ENTITIES} ExternalEntities: decode+check {:.1} ms, \
         full translate+validate {:.1} ms (median of 5), {policies} policies, {rules} rules",
        common::ms(decode_time),
        common::ms(full[2]),
    );

    // The incremental path, set up as the agent holds it.
    let interfaces = vec![AttachedInterface {
        name: "eth0".into(),
        ofport: 3,
        uplink_name: "eth0~".into(),
        uplink_ofport: 4,
        ips: vec!["10.99.0.2".parse().expect("ip")],
        entity: EntityRef {
            namespace: "vm-ns".into(),
            name: external_entity_name("vm1", "eth0"),
        },
    }];
    let setup = Instant::now();
    let mut state = NativeState::new(inputs.objects.clone(), inputs.local_entities.clone());
    let mut store = PolicyStore::new();
    store_delta(
        &mut store,
        Delta {
            upserted: state.translation().objects(),
            deleted: Vec::new(),
        },
    );
    let mut view = ResolvedView::new();
    view.update(&store, &interfaces, None);
    let mut compiler = Compiler::new(CompileOptions::default());
    compiler.update(&[], 1);
    let initial = compiler.update_or_rebuild(&view.rules, 1);
    println!(
        "native_translate: incremental path set up (controller state, store, {} rules resolved, {} \
         flow_mods compiled) in {:.1} ms",
        view.rules.len(),
        initial.mods.len(),
        common::ms(setup.elapsed())
    );
    let resolved_rules = view.rules.len();

    // Entity i moves to another app: it leaves one AddressGroup and joins another, and the rules
    // of the policies using both change their address flows.
    let relabel = |n: usize| {
        let i = n * 97 % ENTITIES;
        (i, decode(entity(i, (i + n + 1) % APPS)).expect("entity"))
    };

    let mut baseline = Vec::new();
    for n in 0..10 {
        let (i, object) = relabel(n);
        inputs.objects[i].1 = object;
        let start = Instant::now();
        let _ = full_snapshot(&inputs);
        baseline.push(start.elapsed());
    }

    let mut controller_only = Vec::new();
    let mut end_to_end = Vec::new();
    let mut flow_mods = Vec::new();
    let mut groups_touched = BTreeSet::new();
    for n in 10..60 {
        let (_, object) = relabel(n);
        let start = Instant::now();
        let delta = state.apply([Change::Upsert {
            origin: "inventory".into(),
            object: std::sync::Arc::new(object),
        }]);
        controller_only.push(start.elapsed());
        groups_touched.insert(delta.upserted.len());
        let changes = store_delta(&mut store, delta);
        let affected = store.affected_policies(&changes);
        view.update(&store, &interfaces, Some(&affected));
        let update = compiler.update_or_rebuild(&view.rules, 1);
        end_to_end.push(start.elapsed());
        flow_mods.push(update.mods.len());
    }
    let (b50, b99) = p50_p99(&baseline);
    let (c50, c99) = p50_p99(&controller_only);
    let (e50, e99) = p50_p99(&end_to_end);
    println!(
        "native_translate: one label change, full re-translation (the old path): p50 {b50:.1} ms, \
         p99 {b99:.1} ms (10 changes; snapshot only, no flows)"
    );
    println!(
        "native_translate: one label change, incremental -> flow_mods computed: p50 {e50:.2} ms, \
         p99 {e99:.2} ms (50 changes; of which the local controller p50 {c50:.3} ms, p99 {c99:.3} ms); \
         groups changed per change {:?}, flow_mods per change {:?}..{:?}; sending them to OVS not included",
        groups_touched,
        flow_mods.iter().min(),
        flow_mods.iter().max(),
    );

    // The directory loader's pass, the files laid out as a user would keep them: the inventory
    // in one file per namespace, the policies in files of 100. A label change re-reads one
    // inventory file: its objects are handed over, the other files' are not looked at.
    let inventory_file = |i: usize| {
        PathBuf::from(format!(
            "/etc/antrea/policies/inventory-ns{}.yaml",
            i % NAMESPACES
        ))
    };
    let policy_file = |i: usize| PathBuf::from(format!("/etc/antrea/policies/policies-{:02}.yaml", i / 100));
    let mut files: BTreeMap<PathBuf, Vec<std::sync::Arc<NativeObject>>> = BTreeMap::new();
    for (n, (_, object)) in inputs.objects.iter().enumerate() {
        let path = if n < ENTITIES {
            inventory_file(n)
        } else {
            policy_file(n - ENTITIES)
        };
        files
            .entry(path)
            .or_default()
            .push(std::sync::Arc::new(object.clone()));
    }
    let mut loader = LocalController::default();
    // The policy cache's store, fed the whole snapshot as the policy directory sends it.
    let mut cache_store = PolicyStore::new();
    let mut cache_side = Vec::new();
    let mut cache_affected = BTreeSet::new();
    let local = inputs.local_entities.clone();
    let mut snapshot_policies = 0;
    {
        let all: Vec<ChangedFile> = files
            .keys()
            .map(|path| ChangedFile {
                path: path.clone(),
                before: Vec::new(),
            })
            .collect();
        let current = |p: &Path| files.get(p).map_or(&[][..], Vec::as_slice);
        let mut snapshot = PolicySnapshot::default();
        loader.translate_into(&all, &current, &local, &mut snapshot, &mut Vec::new());
        cache_store.replace_all(
            snapshot.network_policies,
            snapshot.address_groups,
            snapshot.applied_to_groups,
        );
    }
    let mut loader_pass = Vec::new();
    for n in 60..110 {
        let (i, object) = relabel(n);
        let path = inventory_file(i);
        let before: Vec<_> = files[&path].iter().map(|o| native_key(o)).collect();
        if let Some(held) = files
            .get_mut(&path)
            .and_then(|objects| objects.iter_mut().find(|o| native_key(o) == native_key(&object)))
        {
            *held = std::sync::Arc::new(object);
        }
        let start = Instant::now();
        let current = |p: &Path| files.get(p).map_or(&[][..], Vec::as_slice);
        let mut snapshot = PolicySnapshot::default();
        let mut errors = Vec::new();
        loader.translate_into(
            &[ChangedFile { path, before }],
            &current,
            &local,
            &mut snapshot,
            &mut errors,
        );
        loader_pass.push(start.elapsed());
        snapshot_policies = snapshot.network_policies.len();
        let start = Instant::now();
        let changes = cache_store.replace_all(
            snapshot.network_policies,
            snapshot.address_groups,
            snapshot.applied_to_groups,
        );
        let affected = cache_store.affected_policies(&changes);
        cache_side.push(start.elapsed());
        cache_affected.insert(affected.len());
    }
    let (l50, l99) = p50_p99(&loader_pass);
    println!(
        "native_translate: one label change, the policy directory loader's pass (the changed \
         inventory file's {} objects compared with the ones held, controller, validation, snapshot \
         of all {} objects' output): p50 {l50:.2} ms, p99 {l99:.2} ms (50 changes; reading and \
         parsing the changed file not included)",
        ENTITIES / NAMESPACES,
        inputs.objects.len()
    );
    let (s50, s99) = p50_p99(&cache_side);
    println!(
        "native_translate: one label change, the policy cache's side of the whole snapshot \
         (PolicyStore::replace_all of {snapshot_policies} policies and their groups, affected \
         policies): p50 {s50:.2} ms, p99 {s99:.2} ms; policies affected per change {cache_affected:?}"
    );
    println!(
        "native_translate: RSS at start {} KiB, peak (VmHWM) {} KiB",
        rss_start,
        common::status_kib("VmHWM:")
    );
    if policies != POLICIES
        || rules != POLICIES
        || resolved_rules != POLICIES
        || snapshot_policies != POLICIES
    {
        eprintln!(
            "native_translate: {policies} policies / {rules} rules / {resolved_rules} resolved rules \
             out of {POLICIES} given"
        );
        std::process::exit(1);
    }
    if flow_mods.contains(&0) {
        eprintln!("native_translate: a label change moving an entity between groups changed no flow");
        std::process::exit(1);
    }
}
