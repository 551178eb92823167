//! A fast reader for the plain subset of YAML that policy files are written in, into a tree of
//! [`Node`]s borrowing the text (turned into `serde_json::Value`s, or deserialized into typed
//! objects straight from the tree by [`de`]): the YAML library builds every event of a document
//! before a value is made and reads some 10 MB/s, a quarter of a large fleet's realization; this
//! reads the same subset at JSON speed.
//!
//! It is only a shortcut, never a second meaning. It accepts
//! - documents cut by marker-only `---` lines (as [`split_yaml_documents`] cuts them);
//! - block mappings and block sequences (compact `- key: value` items too), indented by spaces;
//! - flow sequences and mappings that close on their line (`{cidr: 10.0.0.0/8}`);
//! - plain scalars of a conservative alphabet, and double-quoted (escapes `\"`, `\\`, `\n`, `\t`)
//!   or single-quoted scalars on one line;
//! - comments and blank lines;
//!
//! typed exactly as `serde_norway` types them (null, true/false, decimal integers, floats, else
//! strings). Anything else (non-ASCII or tab or carriage return bytes, anchors, aliases, tags,
//! block scalars, multi-line scalars, `0x` numbers, `.inf`, duplicate keys, odd indentation, a
//! limit reached) gives `None`, and the caller parses the text with the YAML library, which then
//! also gives any error. The unit tests compare both readers on the same texts, including
//! thousands of randomly damaged ones: wherever this one answers, the answers are equal.

use std::borrow::Cow;

use serde_json::Number;

use super::bounded::split_yaml_documents;

pub mod de;
mod node;

pub use node::Node;

/// Values deeper than this are left to the YAML library (which stops at 128 levels).
const DEPTH_CAP: usize = 100;

/// Keys longer than this (with their quotes) are left to the YAML library, which refuses a key
/// that starts 1,024 characters or more before its colon.
const KEY_CAP: usize = 1_000;

/// The trees of a stream's documents and the elements they spent (each value counts one, as
/// [`super::bounded`]'s budget counts them).
#[derive(Debug, PartialEq)]
pub struct ParsedNodes<'t> {
    pub nodes: Vec<Node<'t>>,
    pub elements: usize,
}

/// [`parse_nodes`] with the trees turned into values: what the tests compare with the YAML
/// library.
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub struct Parsed {
    pub values: Vec<serde_json::Value>,
    pub elements: usize,
}

#[cfg(test)]
pub fn parse_stream(text: &str, max_elements: usize, max_depth: usize) -> Option<Parsed> {
    let ParsedNodes { nodes, elements } = parse_nodes(text, max_elements, max_depth)?;
    Some(Parsed {
        values: nodes.into_iter().map(Node::into_value).collect(),
        elements,
    })
}

/// Reads `text` if it is within the subset: at most `max_elements` values, none deeper than
/// `max_depth` (the root is depth 0), as trees. `None`: outside the subset or past a limit.
pub fn parse_nodes(text: &str, max_elements: usize, max_depth: usize) -> Option<ParsedNodes<'_>> {
    if !text.bytes().all(|b| b == b'\n' || (b' '..=b'~').contains(&b)) {
        return None;
    }
    let mut reader = Reader {
        elements: 0,
        max_elements,
        max_depth: max_depth.min(DEPTH_CAP),
    };
    let pieces = split_yaml_documents(text)?;
    if pieces.is_empty() {
        // An empty stream: the library reads one null document.
        return None;
    }
    let mut nodes = Vec::new();
    for piece in pieces {
        let body = match piece.strip_prefix("---") {
            // The marker line holds nothing else (the cut guarantees it).
            Some(rest) => rest.split_once('\n').map_or("", |(_, body)| body),
            None => piece,
        };
        let mut lines = content_lines(body);
        if lines.is_empty() {
            // Empty documents: left to the library, which reads some as null and skips others.
            return None;
        }
        let mut pos = 0;
        let value = reader.block_node(&mut lines, &mut pos, None, 0)?;
        if pos != lines.len() {
            return None;
        }
        nodes.push(value);
    }
    Some(ParsedNodes {
        nodes,
        elements: reader.elements,
    })
}

/// A line with content: its indentation and its text after the indentation.
#[derive(Clone, Copy, Debug)]
struct Line<'t> {
    indent: usize,
    text: &'t str,
}

/// The lines of a document that hold more than spaces or a comment.
fn content_lines(body: &str) -> Vec<Line<'_>> {
    body.lines()
        .filter_map(|line| {
            let text = line.trim_start_matches(' ');
            (!text.is_empty() && !text.starts_with('#')).then(|| Line {
                indent: line.len() - text.len(),
                text,
            })
        })
        .collect()
}

struct Reader {
    elements: usize,
    max_elements: usize,
    max_depth: usize,
}

impl Reader {
    /// Counts one value at `depth`; `None` past a limit.
    fn spend(&mut self, depth: usize) -> Option<()> {
        if depth > self.max_depth || self.elements >= self.max_elements {
            return None;
        }
        self.elements += 1;
        Some(())
    }

    /// The block node starting at `lines[*pos]`, inside a block indented `parent` (`None`: the
    /// document's root).
    fn block_node<'t>(
        &mut self,
        lines: &mut [Line<'t>],
        pos: &mut usize,
        parent: Option<usize>,
        depth: usize,
    ) -> Option<Node<'t>> {
        let line = lines[*pos];
        if parent.is_some_and(|p| line.indent <= p) {
            return None;
        }
        if is_sequence_item(line.text) {
            return self.block_sequence(lines, pos, line.indent, depth);
        }
        if mapping_key(line.text).is_some() {
            return self.block_mapping(lines, pos, line.indent, depth);
        }
        // A lone scalar or flow collection: nothing may continue it.
        let value = self.inline_value(line.text, depth)?;
        *pos += 1;
        if lines
            .get(*pos)
            .is_some_and(|next| parent.is_none_or(|p| next.indent > p))
        {
            return None;
        }
        Some(value)
    }

    fn block_mapping<'t>(
        &mut self,
        lines: &mut [Line<'t>],
        pos: &mut usize,
        indent: usize,
        depth: usize,
    ) -> Option<Node<'t>> {
        self.spend(depth)?;
        let mut map = Vec::new();
        while let Some(&line) = lines.get(*pos) {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = mapping_key(line.text)?;
            let rest = rest.trim_start_matches(' ');
            let value = if rest.is_empty() || rest.starts_with('#') {
                // The value is on the next lines: deeper, or a sequence at the key's indentation.
                *pos += 1;
                match lines.get(*pos) {
                    Some(next) if next.indent > indent => {
                        self.block_node(lines, pos, Some(indent), depth + 1)?
                    }
                    Some(next) if next.indent == indent && is_sequence_item(next.text) => {
                        self.block_sequence(lines, pos, indent, depth + 1)?
                    }
                    _ => {
                        self.spend(depth + 1)?;
                        Node::Null
                    }
                }
            } else {
                let value = self.inline_value(rest, depth + 1)?;
                *pos += 1;
                value
            };
            map.push((key, value));
        }
        node::mapping(map)
    }

    fn block_sequence<'t>(
        &mut self,
        lines: &mut [Line<'t>],
        pos: &mut usize,
        indent: usize,
        depth: usize,
    ) -> Option<Node<'t>> {
        self.spend(depth)?;
        let mut items = Vec::new();
        while let Some(&line) = lines.get(*pos) {
            if line.indent < indent || (line.indent == indent && !is_sequence_item(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let after_dash = &line.text[1..];
            let rest = after_dash.trim_start_matches(' ');
            if rest.is_empty() || rest.starts_with('#') {
                *pos += 1;
                match lines.get(*pos) {
                    Some(next) if next.indent > indent => {
                        items.push(self.block_node(lines, pos, Some(indent), depth + 1)?)
                    }
                    _ => {
                        self.spend(depth + 1)?;
                        items.push(Node::Null);
                    }
                }
                continue;
            }
            // The rest of the line is a node of its own, at the column where it starts (a
            // compact mapping's later keys line up with its first).
            lines[*pos] = Line {
                indent: indent + 1 + (after_dash.len() - rest.len()),
                text: rest,
            };
            items.push(self.block_node(lines, pos, Some(indent), depth + 1)?);
        }
        Some(Node::Seq(items))
    }

    /// A value that starts and ends on this line, then spaces and maybe a comment.
    fn inline_value<'t>(&mut self, text: &'t str, depth: usize) -> Option<Node<'t>> {
        let bytes = text.as_bytes();
        let mut at = 0;
        let value = match bytes.first()? {
            b'[' | b'{' | b'"' | b'\'' => self.flow_node(bytes, &mut at, depth)?,
            _ => {
                let scalar = block_plain(text)?;
                at = scalar.len();
                self.spend(depth)?;
                plain_value(scalar)?
            }
        };
        only_comment_after(bytes, at).then_some(value)
    }

    /// A flow node at `bytes[*at]` (spaces before it skipped), leaving `*at` after it.
    fn flow_node<'t>(&mut self, bytes: &'t [u8], at: &mut usize, depth: usize) -> Option<Node<'t>> {
        skip_spaces(bytes, at);
        match *bytes.get(*at)? {
            b'[' => {
                self.spend(depth)?;
                *at += 1;
                let mut items = Vec::new();
                if !closes_at_once(bytes, at, b']') {
                    loop {
                        items.push(self.flow_node(bytes, at, depth + 1)?);
                        if flow_end(bytes, at, b']')? {
                            break;
                        }
                    }
                }
                Some(Node::Seq(items))
            }
            b'{' => {
                self.spend(depth)?;
                *at += 1;
                let mut map = Vec::new();
                if !closes_at_once(bytes, at, b'}') {
                    loop {
                        skip_spaces(bytes, at);
                        let key = flow_key(bytes, at)?;
                        let value = self.flow_node(bytes, at, depth + 1)?;
                        map.push((key, value));
                        if flow_end(bytes, at, b'}')? {
                            break;
                        }
                    }
                }
                node::mapping(map)
            }
            b'"' | b'\'' => {
                let text = quoted(bytes, at)?;
                self.spend(depth)?;
                Some(Node::Str(text))
            }
            _ => {
                let start = *at;
                while bytes.get(*at).is_some_and(|&b| is_flow_plain(b)) {
                    *at += 1;
                }
                // Stopped by anything but the end of the entry: outside the subset.
                if !matches!(bytes.get(*at), Some(b',' | b']' | b'}')) {
                    return None;
                }
                let scalar = std::str::from_utf8(&bytes[start..*at])
                    .ok()?
                    .trim_end_matches(' ');
                if !starts_plain(scalar) {
                    return None;
                }
                self.spend(depth)?;
                plain_value(scalar)
            }
        }
    }
}

/// Whether a collection just opened closes at once (`[]`, `{ }`).
fn closes_at_once(bytes: &[u8], at: &mut usize, close: u8) -> bool {
    skip_spaces(bytes, at);
    let empty = bytes.get(*at) == Some(&close);
    *at += usize::from(empty);
    empty
}

/// After a flow entry: spaces, then `close` (`Some(true)`: the collection ended) or a comma and
/// another entry (`Some(false)`); anything else, a trailing comma included, is `None`.
fn flow_end(bytes: &[u8], at: &mut usize, close: u8) -> Option<bool> {
    skip_spaces(bytes, at);
    match *bytes.get(*at)? {
        b if b == close => {
            *at += 1;
            Some(true)
        }
        b',' => {
            *at += 1;
            skip_spaces(bytes, at);
            matches!(bytes.get(*at), Some(b) if *b != close && *b != b',').then_some(false)
        }
        _ => None,
    }
}

/// A flow mapping's key and the `: ` after it.
fn flow_key<'t>(bytes: &'t [u8], at: &mut usize) -> Option<Cow<'t, str>> {
    let start = *at;
    let key = match *bytes.get(*at)? {
        b'"' | b'\'' => quoted(bytes, at)?,
        _ => {
            while bytes.get(*at).is_some_and(|&b| is_key_byte(b)) {
                *at += 1;
            }
            let key = std::str::from_utf8(&bytes[start..*at]).ok()?;
            if !starts_key(key) {
                return None;
            }
            Cow::Borrowed(key)
        }
    };
    if bytes.get(*at) != Some(&b':') || bytes.get(*at + 1) != Some(&b' ') || *at - start > KEY_CAP {
        return None;
    }
    *at += 2;
    Some(key)
}

fn skip_spaces(bytes: &[u8], at: &mut usize) {
    while bytes.get(*at) == Some(&b' ') {
        *at += 1;
    }
}

/// Whether nothing but spaces and maybe a comment (after at least one space) follows `at`.
fn only_comment_after(bytes: &[u8], at: usize) -> bool {
    let rest = &bytes[at..];
    let spaces = rest.iter().take_while(|&&b| b == b' ').count();
    spaces == rest.len() || (spaces > 0 && rest[spaces] == b'#')
}

/// `- item` or a lone `-`.
fn is_sequence_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// The key of a `key: value` or `key:` line and the text after the colon.
fn mapping_key(text: &str) -> Option<(Cow<'_, str>, &str)> {
    let bytes = text.as_bytes();
    let mut at = 0;
    let key = match *bytes.first()? {
        b'"' | b'\'' => quoted(bytes, &mut at)?,
        _ => {
            at = bytes.iter().take_while(|&&b| is_key_byte(b)).count();
            let key = &text[..at];
            if !starts_key(key) {
                return None;
            }
            Cow::Borrowed(key)
        }
    };
    let rest = text[at..].strip_prefix(':')?;
    (at <= KEY_CAP && (rest.is_empty() || rest.starts_with(' '))).then_some((key, rest))
}

/// A plain key: letters, digits and `-_./`, starting with a letter or digit.
fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/')
}

fn starts_key(key: &str) -> bool {
    key.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
}

/// A plain scalar's bytes in the flow context (no flow indicators, no `:` or `#`).
fn is_flow_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b' ' | b'-'
                | b'_'
                | b'.'
                | b'/'
                | b'+'
                | b'='
                | b'~'
                | b'('
                | b')'
                | b'@'
                | b';'
                | b'?'
                | b'*'
                | b'&'
                | b'!'
                | b'%'
                | b'$'
                | b'^'
        )
}

/// Whether a plain scalar may start as `scalar` does in the subset: never with an indicator,
/// and `-` only before a digit or a dot (a number).
fn starts_plain(scalar: &str) -> bool {
    let bytes = scalar.as_bytes();
    match bytes.first() {
        Some(b) if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'/' | b'~' | b'_' | b'(' | b'+') => true,
        Some(b'-') => bytes.get(1).is_some_and(|b| b.is_ascii_digit() || *b == b'.'),
        _ => false,
    }
}

/// A plain scalar in the block context running to the end of the line or a comment, trailing
/// spaces trimmed. `None` for bytes outside the subset, a `: ` inside (a mapping where none may
/// be) or a `:` at its end.
fn block_plain(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut end = bytes.len();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'#' if i > 0 && bytes[i - 1] == b' ' => {
                end = i;
                break;
            }
            b':' => {
                if bytes.get(i + 1).is_none_or(|&n| n == b' ') {
                    return None;
                }
            }
            b',' => {}
            b if is_flow_plain(b) => {}
            _ => return None,
        }
    }
    let scalar = text[..end].trim_end_matches(' ');
    starts_plain(scalar).then_some(scalar)
}

/// A quoted scalar at `bytes[*at]` that closes on its line; `*at` ends after the closing quote.
fn quoted<'t>(bytes: &'t [u8], at: &mut usize) -> Option<Cow<'t, str>> {
    let quote = *bytes.get(*at)?;
    let mut out = Vec::new();
    let mut i = *at + 1;
    loop {
        let b = *bytes.get(i)?;
        i += 1;
        match b {
            b'\n' => return None,
            b'\'' if quote == b'\'' => {
                if bytes.get(i) == Some(&b'\'') {
                    out.push(b'\'');
                    i += 1;
                } else {
                    break;
                }
            }
            b'"' if quote == b'"' => break,
            b'\\' if quote == b'"' => {
                out.push(match *bytes.get(i)? {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'n' => b'\n',
                    b't' => b'\t',
                    _ => return None,
                });
                i += 1;
            }
            b => out.push(b),
        }
    }
    *at = i;
    String::from_utf8(out).ok().map(Cow::Owned)
}

/// A plain scalar's value, typed as `serde_norway` types it when deserializing into any value:
/// null, a boolean, a decimal integer, a finite float, else the text. `None` for the forms left
/// to the library (other radixes, `.inf`/`.nan`, integers past 64 bits).
fn plain_value(scalar: &str) -> Option<Node<'_>> {
    match scalar {
        "~" | "null" | "Null" | "NULL" => return Some(Node::Null),
        "true" | "True" | "TRUE" => return Some(Node::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Node::Bool(false)),
        _ => {}
    }
    let text = || Some(Node::Str(Cow::Borrowed(scalar)));
    let bytes = scalar.as_bytes();
    // Past the words above, what starts with a letter is text: the float parser's own words
    // (inf, infinity, nan) are not finite, which the library reads as text too.
    if bytes.first().is_none_or(u8::is_ascii_alphabetic)
        || !bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return text();
    }
    let unsigned = scalar.strip_prefix('+').unwrap_or(scalar);
    let digits = unsigned.strip_prefix('-').unwrap_or(unsigned);
    // Any case of `inf` or `nan` anywhere, found without a lowercase copy of every number.
    let names_inf_or_nan = bytes
        .windows(3)
        .any(|w| w.eq_ignore_ascii_case(b"inf") || w.eq_ignore_ascii_case(b"nan"));
    if digits.starts_with("0x") || digits.starts_with("0o") || digits.starts_with("0b") || names_inf_or_nan {
        return None;
    }
    let signs = bytes.len() - digits.len();
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && signs <= 1 {
        // A decimal integer, unless it has leading zeros (text, as YAML 1.2 says).
        if digits.len() > 1 && digits.starts_with('0') {
            return text();
        }
        if digits.len() > 18 {
            return None;
        }
        return if scalar.starts_with('-') {
            scalar.parse::<i64>().ok().map(|n| Node::Number(n.into()))
        } else {
            digits.parse::<u64>().ok().map(|n| Node::Number(n.into()))
        };
    }
    if unsigned.starts_with(['+', '-']) && scalar.starts_with('+') {
        return text();
    }
    match unsigned.parse::<f64>() {
        Ok(float) if float.is_finite() => Some(Number::from_f64(float).map_or(Node::Null, Node::Number)),
        _ => text(),
    }
}

#[cfg(test)]
mod de_tests;
#[cfg(test)]
mod tests;
