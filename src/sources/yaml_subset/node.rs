//! The fast reader's tree: a document's values as read, borrowing the text where they can, with
//! mappings in the document's order. It becomes the `serde_json::Value` the YAML library would
//! have given ([`Node::into_value`]), or is deserialized straight into typed objects
//! ([`super::de`]).

use std::borrow::Cow;

use serde_json::{Map, Number, Value};

/// A value read by the fast reader, typed as `serde_norway` types it (see [`super::plain_value`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Node<'t> {
    Null,
    Bool(bool),
    Number(Number),
    Str(Cow<'t, str>),
    Seq(Vec<Node<'t>>),
    /// In the document's order; no key twice ([`mapping`] refuses that).
    Map(Vec<(Cow<'t, str>, Node<'t>)>),
}

/// Above this many entries, a mapping's keys are checked for duplicates by sorting them, not
/// pair by pair.
const PAIRWISE_KEY_CHECK_UP_TO: usize = 16;

/// A mapping of `entries`; `None` when a key appears twice (left to the YAML library, which
/// refuses it).
pub(super) fn mapping<'t>(entries: Vec<(Cow<'t, str>, Node<'t>)>) -> Option<Node<'t>> {
    let unique = if entries.len() <= PAIRWISE_KEY_CHECK_UP_TO {
        entries
            .iter()
            .enumerate()
            .all(|(i, (key, _))| entries[..i].iter().all(|(earlier, _)| earlier != key))
    } else {
        let mut keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_ref()).collect();
        keys.sort_unstable();
        keys.windows(2).all(|w| w[0] != w[1])
    };
    unique.then_some(Node::Map(entries))
}

impl<'t> Node<'t> {
    /// The value the YAML library gives for the same text.
    pub fn into_value(self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(b),
            Node::Number(n) => Value::Number(n),
            Node::Str(s) => Value::String(s.into_owned()),
            Node::Seq(items) => Value::Array(items.into_iter().map(Node::into_value).collect()),
            Node::Map(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }

    /// The value of `key`, when this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node<'t>> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text, when this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_is_no_mapping_however_many_keys() {
        for n in [2, PAIRWISE_KEY_CHECK_UP_TO, PAIRWISE_KEY_CHECK_UP_TO + 5] {
            let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            let entries = |dup: bool| {
                keys.iter()
                    .enumerate()
                    .map(|(i, k)| {
                        let key = if dup && i == n - 1 {
                            keys[0].clone()
                        } else {
                            k.clone()
                        };
                        (Cow::Owned(key), Node::Null)
                    })
                    .collect::<Vec<_>>()
            };
            assert!(mapping(entries(false)).is_some(), "{n} keys");
            assert!(mapping(entries(true)).is_none(), "{n} keys, one twice");
        }
    }

    #[test]
    fn a_tree_becomes_the_value_with_its_keys_sorted() {
        let node = Node::Map(vec![
            (
                Cow::Borrowed("b"),
                Node::Seq(vec![Node::Number(1.into()), Node::Null]),
            ),
            (Cow::Borrowed("a"), Node::Str(Cow::Owned("x".into()))),
        ]);
        assert_eq!(node.get("a").and_then(Node::as_str), Some("x"));
        assert_eq!(node.into_value(), serde_json::json!({"a": "x", "b": [1, null]}));
    }
}
