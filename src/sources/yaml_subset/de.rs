//! Typed objects straight from the fast reader's tree, without a `serde_json::Value` in between
//! (building the value and walking it again cost a large fleet's load a third of its parse).
//!
//! Only a shortcut, never a second meaning: the tree is deserialized as `serde_json` deserializes
//! the equal `Value` (scalars, sequences and mappings reach the visitor the same way, each typed
//! request checks the type as `serde_json` does; options and newtypes too), except that a
//! mapping's entries come in the document's order rather than sorted by key, which no derived or
//! hand-written `Deserialize` of the wire types depends on (no key appears twice). Forms `Value`
//! would accept through a special path (an enum, none of which the wire types have; a map key
//! read as anything but text) fail here; the caller then decodes the `Value`, which also
//! gives the error every failure reports.

use serde::de::{self, DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Error;

use super::Node;

/// Methods that deserialize as another one does.
macro_rules! forward_typed {
    ($to:ident: $($name:ident)*) => {
        $(fn $name<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.$to(visitor)
        })*
    };
}

impl Node<'_> {
    /// The error `serde_json` gives when a value of another type than `expected` is found.
    fn invalid(&self, expected: &dyn de::Expected) -> Error {
        let unexpected = match self {
            Node::Null => de::Unexpected::Unit,
            Node::Bool(b) => de::Unexpected::Bool(*b),
            Node::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => de::Unexpected::Unsigned(u),
                (None, Some(i)) => de::Unexpected::Signed(i),
                (None, None) => de::Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Node::Str(s) => de::Unexpected::Str(s),
            Node::Seq(_) => de::Unexpected::Seq,
            Node::Map(_) => de::Unexpected::Map,
        };
        Error::invalid_type(unexpected, expected)
    }
}

impl<'de, 'n, 't> de::Deserializer<'de> for &'n Node<'t> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Null => visitor.visit_unit(),
            Node::Bool(b) => visitor.visit_bool(*b),
            Node::Number(n) => de::Deserializer::deserialize_any(n.clone(), visitor),
            Node::Str(s) => visitor.visit_str(s),
            Node::Seq(items) => {
                let mut access = Items(items.iter());
                let value = visitor.visit_seq(&mut access)?;
                match access.0.len() {
                    0 => Ok(value),
                    left => Err(Error::invalid_length(
                        items.len() - left,
                        &"fewer elements in array",
                    )),
                }
            }
            Node::Map(entries) => {
                let mut access = Entries {
                    entries: entries.iter(),
                    value: None,
                };
                let value = visitor.visit_map(&mut access)?;
                match access.entries.len() {
                    0 => Ok(value),
                    left => Err(Error::invalid_length(
                        entries.len() - left,
                        &"fewer elements in map",
                    )),
                }
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// No wire type is an enum: left to the value's decoding.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(Error::custom(format_args!("enum {name}: decoded from the value")))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Bool(b) => visitor.visit_bool(*b),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Str(s) => visitor.visit_str(s),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Str(_) | Node::Seq(_) => self.deserialize_any(visitor),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Null => visitor.visit_unit(),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Seq(_) => self.deserialize_any(visitor),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Map(_) => self.deserialize_any(visitor),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Node::Seq(_) | Node::Map(_) => self.deserialize_any(visitor),
            _ => Err(self.invalid(&visitor)),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Number(n) => de::Deserializer::deserialize_any(n.clone(), visitor),
            _ => Err(self.invalid(&visitor)),
        }
    }

    forward_typed! {deserialize_u64: deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
    deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u128 deserialize_f32
    deserialize_f64}
    forward_typed! {deserialize_str: deserialize_char deserialize_string deserialize_identifier}
    forward_typed! {deserialize_bytes: deserialize_byte_buf}

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

/// A sequence's items, one by one.
struct Items<'n, 't>(std::slice::Iter<'n, Node<'t>>);

impl<'de> SeqAccess<'de> for Items<'_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|item| seed.deserialize(item)).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// A mapping's entries in the document's order.
struct Entries<'n, 't> {
    entries: std::slice::Iter<'n, (std::borrow::Cow<'t, str>, Node<'t>)>,
    value: Option<&'n Node<'t>>,
}

impl<'de> MapAccess<'de> for Entries<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(Key(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => Err(Error::custom("value is missing")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A mapping's key: text, whatever type is asked for (a key read as anything but text, which
/// `serde_json` reads as a number, a boolean, an option, a newtype or an enum, fails, and the
/// caller decodes the `Value` instead).
struct Key<'n>(&'n str);

impl<'de> de::Deserializer<'de> for Key<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str(self.0)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}
