//! Random mutations of a text file, for the property tests of the file loaders: the edits people,
//! editors and tools make by accident (truncation, a stray character, a deleted or repeated slice,
//! thousands of brackets).

use proptest::prelude::*;

/// One edit; positions are fractions of the text's length so that every edit applies.
#[derive(Clone, Debug)]
pub enum Mutation {
    Truncate(u16),
    Insert(u16, String),
    Delete(u16, u16),
    /// Repeats a slice of up to 4 characters many times (deep nesting, huge lists).
    Repeat(u16, u8, u16),
}

fn at(text: &str, fraction: u16) -> usize {
    text.len() * usize::from(fraction) / usize::from(u16::MAX)
}

impl Mutation {
    /// Applies the edit to an ASCII text (every index is a character boundary).
    pub fn apply(&self, text: &str) -> String {
        match self {
            Mutation::Truncate(f) => text[..at(text, *f)].to_string(),
            Mutation::Insert(f, s) => {
                let i = at(text, *f);
                format!("{}{s}{}", &text[..i], &text[i..])
            }
            Mutation::Delete(f, len) => {
                let i = at(text, *f);
                let j = (i + usize::from(*len % 64)).min(text.len());
                format!("{}{}", &text[..i], &text[j..])
            }
            Mutation::Repeat(f, len, times) => {
                let i = at(text, *f);
                let j = (i + usize::from(len % 4) + 1).min(text.len());
                format!(
                    "{}{}{}",
                    &text[..i],
                    text[i..j].repeat(usize::from(*times % 20_000)),
                    &text[j..]
                )
            }
        }
    }
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<u16>().prop_map(Mutation::Truncate),
        (any::<u16>(), "[\\[\\]{}:,\"' \\n#a-z0-9&*!|>.-]{0,8}").prop_map(|(f, s)| Mutation::Insert(f, s)),
        (any::<u16>(), any::<u16>()).prop_map(|(f, n)| Mutation::Delete(f, n)),
        (any::<u16>(), any::<u8>(), any::<u16>()).prop_map(|(f, l, n)| Mutation::Repeat(f, l, n)),
    ]
}
