//! The incremental local controller against the full translation: random sequences of changes
//! (entities relabelled, moved, deleted; namespaces relabelled; policies, groups and tiers
//! edited, broken and deleted; the local ExternalNode changed) must leave [`NativeState`] with
//! exactly what [`translate`] makes of the same objects, and each [`Delta`] must turn the
//! previous output into the new one.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::controller::{translate, Entity, Inputs, Translation};
use super::incremental::{native_key, Change, Delta, NativeState};
use super::objects::{decode, NativeObject};
use crate::controlplane::types::ControlplaneObject;
use crate::controlplane::Kind;

const APPS: [&str; 3] = ["x", "y", "z"];

fn entity(i: usize, variant: usize) -> Value {
    // Entity 0 has the local entity's name in some variants (a shadowed inventory entry).
    let name = if i == 0 && variant % 4 == 3 {
        "vm1-eth0".to_string()
    } else {
        format!("e{i}")
    };
    json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
           "metadata": {"name": name, "namespace": if (i + variant / 3).is_multiple_of(2) { "a" } else { "b" },
                        "labels": {"app": APPS[variant % 3], "tier": format!("t{}", i % 2)}},
           "spec": {"endpoints": [{"ip": format!("10.0.{i}.{}", variant % 5 + 1)}]}})
}

fn namespace(name: &str, variant: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {"env": if variant.is_multiple_of(2) { "prod" } else { "dev" }}}})
}

fn cluster_group(i: usize, variant: usize) -> Value {
    let spec = match (i, variant % 3) {
        (0, 0) => json!({"externalEntitySelector": {"matchLabels": {"app": "x"}}}),
        (0, 1) => json!({"externalEntitySelector": {"matchLabels": {"app": "y"}},
                         "namespaceSelector": {"matchLabels": {"env": "prod"}}}),
        // cg0 with a child of its own: cg1 as (_, 0) or (_, 2) makes a cycle, which matches
        // nothing (antrea-controller's `childGroupsNestingExceeded`).
        (0, _) if variant >= 6 => json!({"childGroups": ["cg1"]}),
        // Pods, which the agent cannot resolve: a rule naming cg0, or cg1 as its parent, is
        // fail-closed; as an appliedTo it selects nothing.
        (0, _) if variant >= 3 => json!({"podSelector": {"matchLabels": {"app": "x"}}}),
        (0, _) => json!({"ipBlocks": [{"cidr": "192.168.0.0/24"}]}),
        (_, 0) => json!({"childGroups": ["cg0"]}),
        (_, 1) => json!({"externalEntitySelector": {"matchLabels": {"tier": "t1"}}}),
        (_, _) => json!({"childGroups": ["cg0", "cg-missing"]}),
    };
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup",
           "metadata": {"name": format!("cg{i}")}, "spec": spec})
}

fn group(variant: usize) -> Value {
    let spec = match variant % 3 {
        0 => json!({"externalEntitySelector": {"matchLabels": {"app": "z"}}}),
        // Pods of namespace `a`: unresolvable (see `cluster_group`).
        1 if variant >= 6 => json!({"podSelector": {}}),
        1 => json!({"ipBlocks": [{"cidr": "172.16.0.0/16"}]}),
        // Selects in `b` too whenever an entity there has app=z: as an ANNP's appliedTo, the
        // policy is then in error (antrea-controller's `getInternalGroupWorkloads`).
        _ => json!({"externalEntitySelector": {"matchLabels": {"app": "z"}},
                    "namespaceSelector": {"matchLabels": {"env": "prod"}}}),
    };
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Group",
           "metadata": {"name": "g0", "namespace": "a"}, "spec": spec})
}

fn tier(variant: usize) -> Value {
    // 100 overlaps securityops: an error, and policies in the tier are translated fail-closed.
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
           "metadata": {"name": "mytier"}, "spec": {"priority": if variant.is_multiple_of(2) { 120 } else { 100 }}})
}

fn policy(i: usize, variant: usize) -> Value {
    let peer = match variant % 6 {
        0 => json!([{"externalEntitySelector": {"matchLabels": {"app": APPS[i % 3]}}}]),
        1 => json!([{"externalEntitySelector": {"matchLabels": {"app": APPS[(i + 1) % 3]}},
                     "namespaceSelector": {"matchLabels": {"env": "prod"}}}]),
        2 => json!([{"group": if i.is_multiple_of(2) { "g0" } else { "cg1" }}]),
        3 => json!([{"group": "cg0"}, {"ipBlock": {"cidr": "10.9.0.0/16"}}]),
        4 => json!([{"group": "nope"}]),
        _ => json!([]),
    };
    let applied_to = if variant % 5 == 4 {
        json!([{"group": "cg1"}])
    } else if variant % 5 == 3 && i.is_multiple_of(2) {
        json!([{"group": "g0"}])
    } else {
        json!([{"externalEntitySelector": {"matchLabels": {"role": "db"}}}])
    };
    // Some Drops: a fail-closed Drop (a peer group of Pods) differs from a fail-closed Allow.
    let action = if variant % 4 == 3 { "Drop" } else { "Allow" };
    let rule =
        json!({"action": action, "ports": [{"protocol": "TCP", "port": 1000 + variant}], "from": peer});
    if i.is_multiple_of(2) {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
               "metadata": {"name": format!("p{i}"), "namespace": "a"},
               "spec": {"priority": 1 + variant % 3, "appliedTo": applied_to, "ingress": [rule]}})
    } else {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": format!("p{i}")},
               "spec": {"tier": if variant % 4 == 1 { "mytier" } else { "application" },
                        "priority": 1 + variant % 3, "appliedTo": applied_to, "ingress": [rule]}})
    }
}

/// The objects a change can touch: 16 slots of several kinds, each with versions.
const SLOTS: usize = 16;

fn object(slot: usize, variant: usize) -> NativeObject {
    let value = match slot {
        0..=7 => entity(slot, variant),
        8 => namespace("a", variant),
        9 => namespace("b", variant),
        10 | 11 => cluster_group(slot - 10, variant),
        12 => group(variant),
        13 => tier(variant),
        _ => policy(slot - 14 + (variant / 6) % 2 * 2, variant),
    };
    decode(value).expect("test object decodes")
}

fn local(variant: usize) -> Vec<Entity> {
    let labels: BTreeMap<String, String> = match variant % 3 {
        0 => [("role".to_string(), "db".to_string())].into(),
        1 => [
            ("role".to_string(), "db".to_string()),
            ("tier".to_string(), "t1".to_string()),
        ]
        .into(),
        _ => [("app".to_string(), "x".to_string())].into(),
    };
    vec![Entity {
        namespace: "a".into(),
        name: "vm1-eth0".into(),
        labels,
        ips: vec!["10.99.0.2".parse().expect("ip")],
        ports: Vec::new(),
        local: true,
    }]
}

#[derive(Clone, Debug)]
enum Op {
    Upsert(usize, usize),
    Delete(usize),
    Local(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..SLOTS, 0..12usize).prop_map(|(s, v)| Op::Upsert(s, v)),
        2 => (0..SLOTS).prop_map(Op::Delete),
        1 => (0..3usize).prop_map(Op::Local),
    ]
}

/// The full translation of what `state` holds, in key order (as the policy directory hands it).
fn full(state: &NativeState) -> Translation {
    translate(&Inputs {
        objects: state
            .objects()
            .map(|(_, (origin, o))| (origin.clone(), NativeObject::clone(o)))
            .collect(),
        local_entities: state.local_entities().cloned().collect(),
    })
}

type Outputs = BTreeMap<(Kind, String), ControlplaneObject>;

fn outputs(t: &Translation) -> Outputs {
    t.objects()
        .into_iter()
        .map(|o| ((o.kind(), o.metadata().name.clone()), o))
        .collect()
}

fn apply_delta(mut before: Outputs, delta: &Delta) -> Outputs {
    for (kind, name) in &delta.deleted {
        assert!(
            before.remove(&(*kind, name.clone())).is_some(),
            "deleted {kind} {name} was not there"
        );
    }
    for o in &delta.upserted {
        before.insert((o.kind(), o.metadata().name.clone()), o.clone());
    }
    before
}

fn to_change(op: &Op, state: &NativeState) -> Change {
    match op {
        Op::Upsert(slot, variant) => Change::Upsert {
            origin: format!("file{}", variant % 2),
            object: std::sync::Arc::new(object(*slot, *variant)),
        },
        Op::Delete(slot) => {
            // Delete whatever object of the slot is held (its name may vary by version).
            let candidates: Vec<_> = (0..12).map(|v| native_key(&object(*slot, v))).collect();
            let held = state
                .objects()
                .map(|(k, _)| k)
                .find(|k| candidates.contains(k))
                .cloned();
            Change::Delete(held.unwrap_or_else(|| candidates[0].clone()))
        }
        Op::Local(variant) => Change::LocalEntities(local(*variant)),
    }
}

fn initial() -> NativeState {
    // Group g0 with a namespaceSelector (variant 2), applied to by ANNP p0 (slot 14, variant
    // 3): the changes then move p0 in and out of error as entities with app=z come and go in
    // a prod namespace other than `a`.
    let variant = |slot: usize| match slot {
        12 => 2,
        14 => 3,
        _ => slot,
    };
    let objects = (0..SLOTS)
        .map(|slot| (format!("file{}", slot % 2), object(slot, variant(slot))))
        .collect();
    NativeState::new(objects, local(0))
}

#[test]
fn a_fresh_state_equals_the_full_translation() {
    let state = initial();
    let t = state.translation();
    assert_eq!(t, full(&state));
    assert!(!t.network_policies.is_empty() && !t.address_groups.is_empty());
}

/// The first load's delta is the whole translation (groups, then policies, by name), and the
/// state it leaves is the one `new` makes.
#[test]
fn the_first_delta_is_the_full_translation() {
    let objects: Vec<(String, NativeObject)> = (0..SLOTS)
        .map(|slot| (format!("file{}", slot % 2), object(slot, slot % 4)))
        .collect();
    let (state, delta) = NativeState::with_delta(objects.clone(), local(0));
    assert!(delta.deleted.is_empty(), "{delta:?}");
    let t = state.translation();
    assert_eq!(delta.upserted, t.objects());
    assert_eq!(t, NativeState::new(objects, local(0)).translation());
    assert_eq!(t, full(&state));
}

#[test]
fn one_label_change_touches_only_the_groups_selecting_the_entity() {
    let mut state = initial();
    let before = state.translation();
    // Entity 2 (namespace a) moves from app z (Group g0) to app y (ClusterGroup cg0).
    let delta = state.apply([Change::Upsert {
        origin: "file0".into(),
        object: std::sync::Arc::new(object(2, 1)),
    }]);
    assert!(delta.deleted.is_empty(), "{delta:?}");
    assert!(
        delta.upserted.iter().all(|o| o.kind() == Kind::AddressGroup),
        "only groups change: {delta:?}"
    );
    // Exactly the groups that held entity 2 before or hold it now.
    let holds_e2 = |o: &ControlplaneObject| match o {
        ControlplaneObject::AddressGroup(g) => g.group_members.iter().any(|m| {
            m.external_entity
                .as_ref()
                .is_some_and(|e| e.name == "e2" && e.namespace == "a")
        }),
        _ => false,
    };
    let touched: Vec<String> = outputs(&before)
        .into_iter()
        .chain(outputs(&state.translation()))
        .filter(|(_, o)| holds_e2(o))
        .map(|((_, name), _)| name)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let upserted: Vec<String> = delta.upserted.iter().map(|o| o.metadata().name.clone()).collect();
    assert_eq!(upserted, touched);
    assert!(upserted.contains(&"cg0".to_string()), "{upserted:?}");
    assert_eq!(
        apply_delta(outputs(&before), &delta),
        outputs(&state.translation())
    );
    assert_eq!(state.translation(), full(&state));
    // The same object again changes nothing.
    assert!(state
        .apply([Change::Upsert {
            origin: "file0".into(),
            object: std::sync::Arc::new(object(2, 1)),
        }])
        .is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn incremental_updates_equal_a_full_translation(ops in proptest::collection::vec(op(), 1..24)) {
        let mut state = initial();
        let mut previous = outputs(&state.translation());
        for op in &ops {
            let change = to_change(op, &state);
            let delta = state.apply([change]);
            let now = state.translation();
            prop_assert_eq!(&now, &full(&state), "after {:?}", op);
            let current = outputs(&now);
            prop_assert_eq!(&apply_delta(previous, &delta), &current, "delta of {:?}: {:?}", op, delta);
            previous = current;
        }
    }
}

/// A ClusterGroup of Pods appearing, changing and going translates again the policies naming
/// it, as antrea-controller re-syncs them on a ClusterGroup event (`triggerCNPUpdates`): a
/// Drop from it goes from matching nothing (the group does not exist) to any address
/// (fail-closed: its members are Pods), to the group's ExternalEntities, and back.
#[test]
fn a_group_of_pods_appearing_or_going_translates_its_policies_again() {
    let policy = json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "p", "uid": "p"},
        "spec": {"priority": 1, "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                 "ingress": [{"action": "Drop", "name": "d", "from": [{"group": "pods"}]}]}});
    let group = |spec: Value| {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup",
               "metadata": {"name": "pods"}, "spec": spec})
    };
    let mut state = NativeState::new(
        vec![("p.yaml".into(), decode(policy).expect("decodes"))],
        local(0),
    );
    // (the group's spec or None for no group, the `from`'s ipBlocks and AddressGroups)
    let steps: [(Option<Value>, usize, Vec<&str>); 5] = [
        (Some(json!({"podSelector": {}})), 2, vec![]),
        (Some(json!({"externalEntitySelector": {}})), 0, vec!["pods"]),
        (Some(json!({"nodeSelector": {}})), 2, vec![]),
        (None, 0, vec![]),
        (
            Some(json!({"serviceReference": {"name": "s", "namespace": "n"}})),
            2,
            vec![],
        ),
    ];
    for (spec, blocks, groups) in steps {
        let change = match &spec {
            Some(spec) => Change::Upsert {
                origin: "g.yaml".into(),
                object: std::sync::Arc::new(decode(group(spec.clone())).expect("a group of Pods decodes")),
            },
            None => Change::Delete((
                super::objects::NativeKind::ClusterGroup,
                String::new(),
                "pods".into(),
            )),
        };
        let delta = state.apply([change]);
        assert!(
            delta.upserted.iter().any(|o| o.kind() == Kind::NetworkPolicy),
            "{spec:?}: the policy is sent again: {delta:?}"
        );
        let t = state.translation();
        assert_eq!(t, full(&state), "{spec:?}");
        let from = &t.network_policies[0].rules[0].from;
        assert_eq!(from.ip_blocks.len(), blocks, "{spec:?}: {from:?}");
        assert_eq!(from.address_groups, groups, "{spec:?}");
    }
}
