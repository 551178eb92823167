//! Decoding straight from the fast reader's tree against decoding its value: wherever the tree
//! decodes, the value decodes to the same object, on real control-plane objects, on the bench
//! fleets' policies, and on random and damaged documents; and the real objects do decode from
//! the tree (the comparison is not vacuous).

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde::Deserialize;
use serde_json::Value;

use super::tests::document;
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
    for kind in named.into_iter().chain(ALL_KINDS) {
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
    let mut texts = Vec::new();
    for i in 0..40 {
        let priority = [1.0, 2.0, 5.5, 1.0 + f64::from(i) * 0.007][i as usize % 4];
        texts.push(format!(
            "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-fleet-{i}, uid: uid-fleet-{i}}}
sourceRef: {{type: AntreaClusterNetworkPolicy, name: fleet-{i}, uid: uid-fleet-{i}}}
appliedToGroups: [atg-vm1]
priority: {priority}
tierPriority: 250
rules:
- {{direction: In, from: {{ipBlocks: [{{cidr: 10.0.{i}.0/24}}, {{cidr: 192.168.0.0/16}}]}}, services: [{{protocol: TCP, port: 22}}, {{protocol: TCP, port: 8000, endPort: 8081}}], action: Allow, priority: 0}}
- {{direction: Out, to: {{ipBlocks: [{{cidr: 10.1.{i}.0/24}}, {{cidr: \"fd00::/8\"}}]}}, services: [{{protocol: TCP, port: 22}}], action: Reject, priority: 1}}
"
        ));
    }
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
