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

/// A tree of every kind: null, a boolean, numbers of each sign and a float, texts (a number's, a
/// name's, a CIDR's, an address's), sequences and mappings, empty or not.
fn sample_trees() -> Vec<Node<'static>> {
    use std::borrow::Cow;
    let text = |s: &'static str| Node::Str(Cow::Borrowed(s));
    vec![
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
    ]
}

/// Every kind of tree asked for as every type the wire types are made of: what succeeds decodes
/// as from the value (the requests themselves are held to the value's by
/// `every_request_on_every_tree_is_answered_as_the_value_answers_it`).
#[test]
fn every_kind_of_tree_decodes_into_every_type_as_its_value_does() {
    use antrea_controlplane::ip::{IpAddress, IpNetWire};
    use antrea_controlplane::types::{IntOrString, ObjectMeta};
    use std::collections::BTreeMap;
    let trees = sample_trees();
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
    assert!(decoded >= 40, "{decoded} decodes");
}

/// What a visitor was called with: text of any kind is one (`'de` is never borrowed), and a
/// mapping's entries are sorted by key (the value's are).
#[derive(Debug, PartialEq)]
enum Visit {
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(u64),
    Str(String),
    Unit,
    None,
    Some(Box<Visit>),
    Newtype(Box<Visit>),
    Seq(Vec<Visit>),
    Map(Vec<(Visit, Visit)>),
    Enum,
}

/// A visitor that takes whatever it is given and records it.
struct Probe;

impl<'de> Deserialize<'de> for Visit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Visit, D::Error> {
        d.deserialize_any(Probe)
    }
}

impl<'de> serde::de::Visitor<'de> for Probe {
    type Value = Visit;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("anything")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Visit, E> {
        Ok(Visit::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Visit, E> {
        Ok(Visit::U64(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Visit, E> {
        Ok(Visit::I64(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Visit, E> {
        Ok(Visit::F64(v.to_bits()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Visit, E> {
        Ok(Visit::Str(v.to_owned()))
    }
    fn visit_unit<E>(self) -> Result<Visit, E> {
        Ok(Visit::Unit)
    }
    fn visit_none<E>(self) -> Result<Visit, E> {
        Ok(Visit::None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Visit, D::Error> {
        Ok(Visit::Some(Box::new(Visit::deserialize(d)?)))
    }
    fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<Visit, D::Error> {
        Ok(Visit::Newtype(Box::new(Visit::deserialize(d)?)))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Visit, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = a.next_element::<Visit>()? {
            items.push(item);
        }
        Ok(Visit::Seq(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Visit, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = a.next_entry::<Visit, Visit>()? {
            entries.push(entry);
        }
        entries.sort_by_key(|(k, _)| format!("{k:?}"));
        Ok(Visit::Map(entries))
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, _: A) -> Result<Visit, A::Error> {
        Ok(Visit::Enum)
    }
}

/// Every request a `Deserialize` can make, with a visitor that accepts anything, on every kind
/// of tree: wherever the tree answers, the value answers with the same visit. This is what holds
/// the typed requests to `serde_json`'s type checks (a text asked for as a number, or a number
/// as text, must fail from the tree, since it fails from the value).
#[test]
fn every_request_on_every_tree_is_answered_as_the_value_answers_it() {
    use serde::Deserializer as _;
    let mut answered = 0;
    let mut refused = 0;
    for tree in &sample_trees() {
        let value = tree.clone().into_value();
        macro_rules! probe {
            ($($method:ident($($arg:expr),*);)*) => {$(
                match tree.$method($($arg,)* Probe) {
                    Ok(from_tree) => {
                        match value.clone().$method($($arg,)* Probe) {
                            Ok(from_value) => assert_eq!(from_tree, from_value, "{} of {value}", stringify!($method)),
                            Err(e) => panic!("{} of {value}: {from_tree:?} from the tree; from the value: {e}", stringify!($method)),
                        }
                        answered += 1;
                    }
                    Err(_) => refused += 1,
                }
            )*};
        }
        probe! {
            deserialize_any(); deserialize_bool(); deserialize_i8(); deserialize_i16();
            deserialize_i32(); deserialize_i64(); deserialize_i128(); deserialize_u8();
            deserialize_u16(); deserialize_u32(); deserialize_u64(); deserialize_u128();
            deserialize_f32(); deserialize_f64(); deserialize_char(); deserialize_str();
            deserialize_string(); deserialize_bytes(); deserialize_byte_buf(); deserialize_option();
            deserialize_unit(); deserialize_unit_struct("S"); deserialize_newtype_struct("S");
            deserialize_seq(); deserialize_tuple(2); deserialize_tuple_struct("S", 2);
            deserialize_map(); deserialize_struct("S", &["a"]); deserialize_enum("E", &["A"]);
            deserialize_identifier(); deserialize_ignored_any();
        }
    }
    // Both happen: the checks are not vacuous either way.
    assert!(
        answered >= 100 && refused >= 100,
        "{answered} answered, {refused} refused"
    );
    // A text asked for as a number, and a number asked for as text: refused by both.
    let text = Node::Str(std::borrow::Cow::Borrowed("80"));
    assert!(serde::Deserializer::deserialize_u16(&text, Probe).is_err());
    assert!(serde_json::Value::from("80").deserialize_u16(Probe).is_err());
    let number = Node::Number(80u64.into());
    assert!(serde::Deserializer::deserialize_str(&number, Probe).is_err());
    assert!(serde_json::Value::from(80u64).deserialize_str(Probe).is_err());
}

/// Derived types beyond the wire types': a struct read from a sequence or a mapping decodes as
/// from the value; an enum is left to the value (it always fails from the tree).
#[test]
fn derived_structs_decode_as_from_the_value_and_enums_are_left_to_it() {
    #[derive(Debug, Deserialize, PartialEq)]
    struct Pair {
        a: Option<String>,
        #[serde(default)]
        b: Vec<i32>,
    }
    #[derive(Debug, Deserialize, PartialEq)]
    enum Choice {
        A,
        B(i32),
    }
    let mut decoded = 0;
    for tree in &sample_trees() {
        decoded += usize::from(same_as_value::<Pair>(tree));
        assert!(Choice::deserialize(tree).is_err(), "{tree:?}");
    }
    assert!(decoded >= 2, "{decoded}");
    let choice = Node::Str(std::borrow::Cow::Borrowed("A"));
    assert!(Choice::deserialize(&choice).is_err());
    assert_eq!(Choice::deserialize(choice.into_value()).ok(), Some(Choice::A));
}
