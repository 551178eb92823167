//! Typed objects straight from the fast reader's tree, without a `serde_json::Value` in between
//! (building the value and walking it again cost a large fleet's load a third of its parse).
//!
//! Only a shortcut, never a second meaning: the tree is deserialized as `serde_json` deserializes
//! the equal `Value` (scalars, sequences and mappings reach the visitor the same way; options,
//! enums and newtypes too), except that a mapping's entries come in the document's order rather
//! than sorted by key, which no derived or hand-written `Deserialize` of the wire types depends
//! on (no key appears twice). Forms `Value` would accept through a special path (a map key read
//! as a number or a boolean) fail here; the caller then decodes the `Value`, which also gives
//! the error every failure reports.

use serde::de::{
    self, DeserializeSeed, EnumAccess, Error as _, IntoDeserializer, MapAccess, SeqAccess, VariantAccess,
    Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::Error;

use super::Node;

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

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Node::Str(variant) => visitor.visit_enum(Variant {
                name: variant,
                value: None,
            }),
            Node::Map(entries) => match entries.as_slice() {
                [(variant, value)] => visitor.visit_enum(Variant {
                    name: variant,
                    value: Some(value),
                }),
                _ => Err(Error::invalid_value(
                    de::Unexpected::Map,
                    &"map with a single key",
                )),
            },
            _ => Err(Error::invalid_type(
                de::Unexpected::Other("not a string or map"),
                &"string or map",
            )),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct identifier
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

/// A mapping's key: text, whatever type is asked for (a key read as anything else fails, and
/// the caller decodes the `Value` instead).
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

/// An enum's variant: its name, and its value when written as a one-entry mapping.
struct Variant<'n, 't> {
    name: &'n str,
    value: Option<&'n Node<'t>>,
}

impl<'de, 'n, 't> EnumAccess<'de> for Variant<'n, 't> {
    type Error = Error;
    type Variant = VariantValue<'n, 't>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self::Variant), Error> {
        let name: de::value::StrDeserializer<'_, Error> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, VariantValue(self.value)))
    }
}

/// What follows an enum's variant name: its value, if any.
struct VariantValue<'n, 't>(Option<&'n Node<'t>>);

impl<'de> VariantAccess<'de> for VariantValue<'_, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            None | Some(Node::Null) => Ok(()),
            Some(_) => Err(Error::invalid_type(de::Unexpected::Map, &"unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.0 {
            Some(value) => seed.deserialize(value),
            None => Err(Error::invalid_type(
                de::Unexpected::UnitVariant,
                &"newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Some(value @ Node::Seq(_)) => de::Deserializer::deserialize_any(value, visitor),
            _ => Err(Error::invalid_type(de::Unexpected::UnitVariant, &"tuple variant")),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Some(value @ Node::Map(_)) => de::Deserializer::deserialize_any(value, visitor),
            _ => Err(Error::invalid_type(
                de::Unexpected::UnitVariant,
                &"struct variant",
            )),
        }
    }
}
