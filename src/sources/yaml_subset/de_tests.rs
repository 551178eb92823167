//! Decoding straight from the fast reader's tree against decoding its value: wherever the tree
//! decodes, the value decodes to the same object, on real control-plane objects, on the bench
//! fleets' policies, and on random and damaged documents; and the real objects do decode from
//! the tree (the comparison is not vacuous).

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde::Deserialize;
use serde_json::Value;

use super::tests::{bench_fleet_policy, document};
use super::{parse_nodes, Node};
use crate::policy::controlplane::{ControlplaneObject, Kind};
use crate::sources::mutations::mutation;

const MAX: usize = 1_000_000;
const DEPTH: usize = 64;

/// The object each document of `text` decodes to from its tree, checked against the value's
/// decoding; `None` when the fast reader does not read the text. An object decoded from a tree
/// must be the value's object; a kind the tree cannot decode is counted as `None` in the list.
fn decode_both(text: &str) -> Option<Vec<Option<ControlplaneObject>>> {
    let parsed = parse_nodes(text, MAX, DEPTH)?;
    Some(
        parsed
            .nodes
            .into_iter()
            .map(|tree| decode_compared(&tree))
            .collect(),
    )
}

/// `tree` decoded as each kind (the kind it names first), compared with its value's decoding.
fn decode_compared(tree: &Node<'_>) -> Option<ControlplaneObject> {
    let value = tree.clone().into_value();
    // Any value, however it came: the tree gives the value it stands for.
    assert_eq!(Value::deserialize(tree).expect("any tree is a value"), value);
    let named = tree.get("kind").and_then(Node::as_str).and_then(Kind::parse);
    let mut decoded = None;
    for kind in named
        .into_iter()
        .chain(ALL_KINDS.into_iter().filter(|k| Some(*k) != named))
    {
        let Ok(from_tree) = ControlplaneObject::from_deserializer(kind, tree) else {
            continue;
        };
        match ControlplaneObject::from_deserializer(kind, value.clone()) {
            Ok(from_value) => assert_eq!(from_tree, from_value, "{kind} from {value}"),
            Err(e) => panic!("{kind}: the tree of {value} decodes as {from_tree:?}, the value not: {e}"),
        }
        if Some(kind) == named && decoded.is_none() {
            decoded = Some(from_tree);
        }
    }
    decoded
}

const ALL_KINDS: [Kind; 5] = [
    Kind::NetworkPolicy,
    Kind::AddressGroup,
    Kind::AppliedToGroup,
    Kind::AddressGroupPatch,
    Kind::AppliedToGroupPatch,
];

/// The reference objects (JSON), written as YAML by the YAML library.
fn reference_texts() -> Vec<String> {
    use antrea_controlplane::testdata::*;
    [NP_ANNP1, NP_ACNP, AG, AG_PATCH, ATG, ATG_PATCH]
        .into_iter()
        .map(|json| {
            let value: Value = serde_json::from_str(json).expect("reference JSON");
            serde_norway::to_string(&value).expect("as YAML")
        })
        .collect()
}

/// Policies in the shapes the benches and the documentation write: flow style, block style,
/// named and numbered ports, ICMP, FQDN, L7, ipBlock exceptions, whole and fractional priorities.
fn policy_texts() -> Vec<String> {
    let mut texts: Vec<String> = (0..40).map(|i| bench_fleet_policy(i).1).collect();
    texts.push(
        "kind: NetworkPolicy
metadata:
  name: uid-1
  uid: uid-1
  labels: {a: b}
sourceRef:
  type: AntreaNetworkPolicy
  namespace: ns
  name: web
  uid: uid-1
appliedToGroups:
- atg-1
priority: 3
tierPriority: 100
rules:
- direction: In
  from:
    addressGroups: [ag-1]
    ipBlocks:
    - cidr: 10.0.0.0/8
      except: [10.1.0.0/16]
  services:
  - protocol: TCP
    port: http
  - protocol: UDP
    port: 53
  - protocol: ICMP
    icmpType: 8
    icmpCode: 0
  action: Drop
  priority: 0
  enableLogging: true
  logLabel: audit
  name: rule-a
- direction: Out
  to:
    fqdns: ['*.example.com', db.example.org]
  l7Protocols:
  - http: {method: GET, path: /api/*}
  action: Allow
  priority: 1
---
apiVersion: controlplane.antrea.io/v1beta2
kind: AddressGroup
metadata: {name: ag-1}
groupMembers:
- ips: [10.0.0.5, \"fd00::5\"]
  ports: [{name: http, port: 8080, protocol: TCP}]
- externalEntity: {name: vm-1, namespace: ns}
  ips: [10.0.0.6]
---
kind: AppliedToGroup
metadata: {name: atg-1}
groupMembers:
- externalEntity: {name: vm-1, namespace: ns}
"
        .to_owned(),
    );
    texts
}

#[test]
fn real_objects_decode_from_the_tree_as_from_the_value() {
    let mut texts = reference_texts();
    texts.extend(policy_texts());
    for text in &texts {
        let decoded = decode_both(text).unwrap_or_else(|| panic!("the fast reader reads {text}"));
        for (object, doc) in decoded.iter().zip(1..) {
            assert!(object.is_some(), "document {doc} of {text} decodes from its tree");
        }
    }
}

/// Damaged texts: values of other types where a field wants one (a port as text, a priority as
/// a sequence, a rule as a scalar), keys dropped or doubled, lines cut. Wherever the tree
/// decodes, the value decodes the same; and most undamaged-type changes still decode.
#[test]
fn damaged_objects_decode_the_same_or_not_from_the_tree() {
    let mut texts = reference_texts();
    texts.extend(policy_texts());
    let mut runner = TestRunner::deterministic();
    let (mut read, mut decoded) = (0, 0);
    for round in 0..3_000 {
        let mut damaged = texts[round % texts.len()].clone();
        for _ in 0..=(round % 3) {
            let edit = mutation().new_tree(&mut runner).expect("an edit").current();
            damaged = edit.apply(&damaged);
        }
        if let Some(objects) = decode_both(&damaged) {
            read += 1;
            decoded += usize::from(objects.iter().any(Option::is_some));
        }
    }
    assert!(
        read >= 300 && decoded >= 100,
        "{read} read fast, {decoded} decoded"
    );
}

/// Random documents of the policy files' shapes: any tree is the value it stands for, and any
/// kind it decodes as, it decodes as from the value.
#[test]
fn random_trees_decode_as_their_values() {
    let mut runner = TestRunner::deterministic();
    let mut read = 0;
    for _ in 0..1_000 {
        let doc = document().new_tree(&mut runner).expect("a document").current();
        read += usize::from(decode_both(&doc).is_some());
    }
    assert!(read >= 500, "{read} of 1000");
}

/// `T` from `tree`, wherever that succeeds, equals `T` from the tree's value; `true` when it
/// succeeded.
fn same_as_value<T>(tree: &Node<'_>) -> bool
where
    T: for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    let Ok(from_tree) = T::deserialize(tree) else {
        return false;
    };
    let value = tree.clone().into_value();
    match T::deserialize(value.clone()) {
        Ok(from_value) => assert_eq!(
            from_tree,
            from_value,
            "{} from {value}",
            std::any::type_name::<T>()
        ),
        Err(e) => panic!(
            "{} from the tree of {value}: {from_tree:?}; from the value: {e}",
            std::any::type_name::<T>()
        ),
    }
    true
}

/// Every kind of tree asked for as every type the wire types are made of: a typed request
/// checks the type as `serde_json` does (a number asked for as text fails, as it does from the
/// value), and what succeeds decodes as from the value.
#[test]
fn every_kind_of_tree_decodes_into_every_type_as_its_value_does() {
    use antrea_controlplane::ip::{IpAddress, IpNetWire};
    use antrea_controlplane::types::{IntOrString, ObjectMeta};
    use std::borrow::Cow;
    use std::collections::BTreeMap;
    let text = |s: &'static str| Node::Str(Cow::Borrowed(s));
    let trees = [
        Node::Null,
        Node::Bool(true),
        Node::Number(80u64.into()),
        Node::Number((-3i64).into()),
        Node::Number(serde_json::Number::from_f64(2.5).expect("finite")),
        text("80"),
        text("http"),
        text("10.0.0.0/8"),
        text("10.1.2.3"),
        Node::Seq(vec![]),
        Node::Seq(vec![text("a"), text("b")]),
        Node::Seq(vec![Node::Number(1u64.into())]),
        Node::Map(vec![]),
        Node::Map(vec![
            (Cow::Borrowed("a"), text("b")),
            (Cow::Borrowed("c"), text("d")),
        ]),
        Node::Map(vec![
            (Cow::Borrowed("prefixLength"), Node::Number(8u64.into())),
            (Cow::Borrowed("ip"), text("CgAAAA==")),
        ]),
        Node::Map(vec![
            (Cow::Borrowed("name"), text("n")),
            (Cow::Borrowed("zone"), Node::Seq(vec![Node::Null])),
            (Cow::Borrowed("generation"), Node::Number(2u64.into())),
        ]),
    ];
    let mut decoded = 0;
    for tree in &trees {
        decoded += [
            same_as_value::<String>(tree),
            same_as_value::<bool>(tree),
            same_as_value::<i32>(tree),
            same_as_value::<u16>(tree),
            same_as_value::<f64>(tree),
            same_as_value::<()>(tree),
            same_as_value::<Vec<String>>(tree),
            same_as_value::<Vec<u8>>(tree),
            same_as_value::<(String, String)>(tree),
            same_as_value::<BTreeMap<String, String>>(tree),
            same_as_value::<Option<String>>(tree),
            same_as_value::<Option<i32>>(tree),
            same_as_value::<IpAddress>(tree),
            same_as_value::<IpNetWire>(tree),
            same_as_value::<IntOrString>(tree),
            same_as_value::<ObjectMeta>(tree),
            same_as_value::<Value>(tree),
        ]
        .into_iter()
        .filter(|ok| *ok)
        .count();
    }
    // Text asked for as a number fails from the tree as from the value.
    assert!(!same_as_value::<i32>(&text("80")));
    assert!(!same_as_value::<String>(&Node::Number(80u64.into())));
    assert!(decoded >= 40, "{decoded} decodes");
}
