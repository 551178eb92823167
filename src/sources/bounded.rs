//! Reading and parsing untrusted local files within limits: the policy files and the ExternalNode
//! file are written by people and tools, so a FIFO, a device, a 5 MB accident or a 60,000-level
//! nested document must cost a bounded amount of time and memory and end in a clear error.
//!
//! - [`read_regular_file`] reads only regular files (after following symlinks): it stats first,
//!   opens with `O_NONBLOCK` (a FIFO swapped in meanwhile cannot block the open or the read),
//!   checks the opened file again, and never reads more than the size limit. [`read_checked`]
//!   skips the stat for a file the directory listing names as a regular file (opened without
//!   following symlinks) and gives the opened file's metadata.
//! - [`parse_values`] parses YAML documents or JSON into `serde_json::Value`s after a linear
//!   pre-scan of the flow nesting depth (the YAML parser is quadratic in deep flow collections:
//!   60,000 nested `{a: ` take tens of seconds), counting every element while it builds the values
//!   so an oversized document stops early.
//!
//! Both are blocking: callers run them on the blocking pool, never on an actor's thread.

use std::cell::Cell;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::config::InputLimits;

/// What reading a path found.
#[derive(Debug, PartialEq, Eq)]
pub enum FileRead {
    Text(String),
    /// Nothing at the path.
    Missing,
    /// Something that is not a regular file (after following symlinks): what it is.
    NotRegular(&'static str),
}

/// Why a file could not be read or parsed within the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("cannot read: {0}")]
    Io(String),
    #[error("is {size} bytes, more than the {max} bytes allowed (standalone.inputLimits.maxFileBytes)")]
    TooLarge { size: u64, max: u64 },
    #[error("is not UTF-8 text")]
    NotUtf8,
    #[error("nesting deeper than {max} levels at line {line} (standalone.inputLimits.maxNestingDepth)")]
    TooDeep { max: usize, line: usize },
    /// Found while building the values (block nesting), where the line is not known.
    #[error("nesting deeper than {max} levels (standalone.inputLimits.maxNestingDepth)")]
    TooDeepBlock { max: usize },
    #[error("more than {max} elements (standalone.inputLimits.maxElements)")]
    TooManyElements { max: usize },
    #[error("cannot parse: {0}")]
    Parse(String),
}

/// Why a named file (a policy file, the ExternalNode file) gives no text: it is not a regular
/// file, or it cannot be read within the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// What it is instead (e.g. `a FIFO`): never opened for reading.
    #[error("skipped: it is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error(transparent)]
    Input(#[from] InputError),
}

fn file_kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Reads `path` if it is a regular file (symlinks followed) of at most `max_bytes`.
pub fn read_regular_file(path: &Path, max_bytes: u64) -> Result<FileRead, InputError> {
    read_checked(path, max_bytes, Listed::Unknown).map(|(read, _)| read)
}

/// What the directory listing said about a file about to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// A regular file itself (not a symlink): it is opened without a stat first.
    RegularFile,
    /// Anything else, or not listed: stat first, so that nothing but a regular file is opened.
    Unknown,
}

/// [`read_regular_file`], with the metadata of the file read, taken from the opened file before
/// reading it (for a regular file). A file the listing named as a regular file is opened without
/// a stat first, and without following a symlink (`O_NOFOLLOW`): replaced since the listing by
/// a FIFO or a device node, it is opened (never blocking: `O_NONBLOCK`, `O_NOCTTY`), found to be
/// no regular file and not read; by a symlink (to a device, say), it is not opened at all. Any
/// failure to open it that way (a symlink, a socket, a file gone) is answered as for a file the
/// listing did not know: the stat first.
pub fn read_checked(
    path: &Path,
    max_bytes: u64,
    listed: Listed,
) -> Result<(FileRead, Option<std::fs::Metadata>), InputError> {
    if listed == Listed::RegularFile {
        return match open_nonblocking(path, libc::O_NOFOLLOW) {
            Ok(file) => read_opened(file, max_bytes),
            Err(_) => read_checked(path, max_bytes, Listed::Unknown),
        };
    }
    let io = |e: std::io::Error| InputError::Io(e.to_string());
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return Ok((FileRead::NotRegular(file_kind(m.file_type())), None)),
        Ok(m) if m.len() > max_bytes => {
            return Err(InputError::TooLarge {
                size: m.len(),
                max: max_bytes,
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((missing_or_dangling(path), None)),
        Err(e) => return Err(io(e)),
    }
    // Replaced between the stat and the open? O_NONBLOCK keeps a FIFO from blocking, and the
    // opened file is checked again.
    match open_nonblocking(path, 0) {
        Ok(file) => read_opened(file, max_bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((missing_or_dangling(path), None)),
        Err(e) => Err(io(e)),
    }
}

/// Opens `path` for reading, never blocking on a FIFO nor taking a terminal, with `flags` more.
fn open_nonblocking(path: &Path, flags: i32) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | flags)
        .open(path)
}

/// The text of an opened file, if it is a regular file of at most `max_bytes`, with its
/// metadata (taken before the read).
fn read_opened(
    file: std::fs::File,
    max_bytes: u64,
) -> Result<(FileRead, Option<std::fs::Metadata>), InputError> {
    let io = |e: std::io::Error| InputError::Io(e.to_string());
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Ok((FileRead::NotRegular(file_kind(meta.file_type())), None));
    }
    if meta.len() > max_bytes {
        return Err(InputError::TooLarge {
            size: meta.len(),
            max: max_bytes,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > max_bytes {
        // It grew while being read.
        return Err(InputError::TooLarge { size, max: max_bytes });
    }
    let text = String::from_utf8(bytes).map_err(|_| InputError::NotUtf8)?;
    Ok((FileRead::Text(text), Some(meta)))
}

/// What a path that cannot be found is: gone, or a symlink whose target is gone (there, but
/// unusable: said so).
fn missing_or_dangling(path: &Path) -> FileRead {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => FileRead::NotRegular("a dangling symlink"),
        _ => FileRead::Missing,
    }
}

/// The bytes [`prescan`] treats as plain content: everything but line ends, spaces, quotes,
/// brackets and the indicators `#`, `,`, `:`, `-`, `?` (bytes of non-ASCII characters included).
const ORDINARY: [bool; 256] = {
    let mut table = [true; 256];
    let special = b"\n \t\r#\"'[]{},:-?";
    let mut i = 0;
    while i < special.len() {
        table[special[i] as usize] = false;
        i += 1;
    }
    table
};

/// A linear pre-scan of a YAML or JSON text, before any parser runs: the flow nesting (`[`, `{`)
/// may not go past `limits.max_nesting_depth` (stopping at the first line that does), and the
/// text may not hold more than `limits.max_elements` values by a cheap count (commas inside flow
/// collections, mapping colons and lines with content: about two thirds of the real count),
/// because the YAML parser builds every event of a document (some 270 bytes per value) before a
/// value is made. Quoted scalars and comments are skipped; brackets inside
/// plain or block scalars may count too, so the depth found is an upper bound.
pub fn prescan(text: &str, limits: &InputLimits) -> Result<(), InputError> {
    // Byte by byte: every character that matters is ASCII, and the bytes of any other
    // character (all 0x80 or above) act as the non-space character they form would.
    let max = limits.max_nesting_depth;
    let too_many = || InputError::TooManyElements {
        max: limits.max_elements,
    };
    let bytes = text.as_bytes();
    let mut elements = 0usize;
    let mut line_has_content = false;
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut at = 0usize;
    // Whether the previous significant character lets a node start here.
    let mut node_start = true;
    let mut after_space = true;
    while let Some(&c) = bytes.get(at) {
        at += 1;
        if ORDINARY[usize::from(c)] {
            // A run of bytes that only say "content, no node starts here" (most of a policy
            // file: names, numbers, addresses), skipped at once.
            at += bytes[at..]
                .iter()
                .take_while(|&&b| ORDINARY[usize::from(b)])
                .count();
            node_start = false;
            line_has_content = true;
            after_space = false;
            continue;
        }
        match c {
            b'\n' => {
                line += 1;
                elements += usize::from(std::mem::take(&mut line_has_content));
                if elements > limits.max_elements {
                    return Err(too_many());
                }
                node_start = true;
                after_space = true;
                continue;
            }
            b'#' if after_space => {
                // A comment, to the end of the line.
                at = bytes[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |n| at + n);
                continue;
            }
            b'"' | b'\'' if node_start => {
                let quote = c;
                while let Some(&q) = bytes.get(at) {
                    at += 1;
                    match q {
                        // An escaped character is skipped (an escaped newline still counts).
                        b'\\' if quote == b'"' => {
                            if bytes.get(at) == Some(&b'\n') {
                                line += 1;
                            }
                            at += 1;
                        }
                        b'\n' => line += 1,
                        q if q == quote => break,
                        _ => {}
                    }
                }
                node_start = false;
            }
            b'[' | b'{' if node_start => {
                depth += 1;
                if depth > max {
                    return Err(InputError::TooDeep { max, line });
                }
                node_start = true;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                node_start = false;
            }
            b',' => {
                node_start = true;
                if depth > 0 {
                    elements += 1;
                    if elements > limits.max_elements {
                        return Err(too_many());
                    }
                }
            }
            b':' => {
                node_start = true;
                if bytes
                    .get(at)
                    .is_none_or(|&n| matches!(n, b' ' | b'\t' | b'\n' | b'\r'))
                {
                    elements += 1;
                }
            }
            b'-' | b'?' => node_start = true,
            b' ' | b'\t' | b'\r' => {}
            _ => node_start = false,
        }
        let space = matches!(c, b' ' | b'\t' | b'\r');
        line_has_content |= !space;
        after_space = space;
    }
    Ok(())
}

/// Parses `text` (JSON when `json`, else YAML documents separated by `---`) into values within
/// the limits. Empty YAML documents give `Value::Null`.
pub fn parse_values(text: &str, json: bool, limits: &InputLimits) -> Result<Vec<Value>, InputError> {
    prescan(text, limits)?;
    let budget = Budget {
        elements: Cell::new(0),
        max_elements: limits.max_elements,
        max_depth: limits.max_nesting_depth,
        exceeded: Cell::new(None),
    };
    let parse_error = |e: String| budget.exceeded.take().unwrap_or(InputError::Parse(e));
    if json {
        let mut de = serde_json::Deserializer::from_str(text);
        let value = Bounded {
            budget: &budget,
            depth: 0,
        }
        .deserialize(&mut de)
        .map_err(|e| parse_error(e.to_string()))?;
        de.end().map_err(|e| parse_error(e.to_string()))?;
        Ok(vec![value])
    } else {
        parse_yaml_stream(text, &budget)
    }
}

/// The values of YAML `text`'s documents as the YAML library reads them, spending from `budget`.
fn parse_yaml_stream(text: &str, budget: &Budget) -> Result<Vec<Value>, InputError> {
    let parse_error = |e: String| budget.exceeded.take().unwrap_or(InputError::Parse(e));
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let value = Bounded { budget, depth: 0 }
            .deserialize(doc)
            .map_err(|e| parse_error(e.to_string()))?;
        out.push(value);
    }
    Ok(out)
}

/// Parses one YAML document's text (a piece of a file cut by [`split_yaml_documents`]; the file
/// as a whole passed [`prescan`]) within `max_elements`; returns its values (none or one) and the
/// elements they spent, so the pieces of one file share the file's budget.
pub fn parse_yaml_piece(
    text: &str,
    max_elements: usize,
    limits: &InputLimits,
) -> Result<(Vec<Value>, usize), InputError> {
    let budget = Budget {
        elements: Cell::new(0),
        max_elements,
        max_depth: limits.max_nesting_depth,
        exceeded: Cell::new(None),
    };
    let out = parse_yaml_stream(text, &budget)?;
    Ok((out, budget.elements.get()))
}

/// Cuts YAML text into the texts of its documents, each starting at its `---` line (the first
/// may have none): what lets a file whose documents mostly did not change be parsed only where
/// it did. `None` when a line-based cut could differ from the parser's view: a directive (`%`),
/// a document end marker (`...`), or a `---` line with content after it. A `---` at the start
/// of a line always starts a document (YAML forbids it inside any scalar), so the cut is exact
/// otherwise.
pub fn split_yaml_documents(text: &str) -> Option<Vec<&str>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.starts_with('%') || bare.starts_with("...") {
            return None;
        }
        if let Some(rest) = bare.strip_prefix("---") {
            let after = rest.trim_start_matches([' ', '\t']);
            let marker_only = (rest.is_empty() || rest.starts_with([' ', '\t']))
                && (after.is_empty() || after.starts_with('#'));
            if !marker_only {
                return None;
            }
            if offset > start {
                pieces.push(&text[start..offset]);
            }
            start = offset;
        }
        offset += line.len();
    }
    if offset > start {
        pieces.push(&text[start..offset]);
    }
    Some(pieces)
}

/// What one parse may still spend; shared by every document of a file.
struct Budget {
    elements: Cell<usize>,
    max_elements: usize,
    max_depth: usize,
    /// The limit that stopped the parse (the deserializer's own error wraps our message).
    exceeded: Cell<Option<InputError>>,
}

impl Budget {
    fn spend<E: serde::de::Error>(&self) -> Result<(), E> {
        let n = self.elements.get() + 1;
        self.elements.set(n);
        if n > self.max_elements {
            let err = InputError::TooManyElements {
                max: self.max_elements,
            };
            let msg = err.to_string();
            self.exceeded.set(Some(err));
            return Err(E::custom(msg));
        }
        Ok(())
    }
}

/// Deserializes one `Value`, counting its elements and depth against the budget.
struct Bounded<'b> {
    budget: &'b Budget,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if self.depth > self.budget.max_depth {
            let err = InputError::TooDeepBlock {
                max: self.budget.max_depth,
            };
            self.budget.exceeded.set(Some(err));
            return Err(D::Error::custom("nesting too deep"));
        }
        self.budget.spend::<D::Error>()?;
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Bounded {
            budget: self.budget,
            depth: self.depth,
        }
        .deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Bounded {
            budget: self.budget,
            depth: self.depth + 1,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Bounded {
                budget: self.budget,
                depth: self.depth + 1,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {

    /// Go's encoding/json writes the shortest text that reads back as the same float64 (as
    /// YAML's and Rust's printers do); a priority read from JSON must be that float, not a
    /// neighbour: the same policy as JSON and as YAML orders (and compiles) the same.
    #[test]
    fn json_floats_read_back_exactly_as_yaml_does() {
        let limits = InputLimits::default();
        for i in 0..2000u32 {
            let priority = 1.0 + f64::from(i) * 0.07;
            let json = parse_values(&format!("{{\"priority\": {priority}}}"), true, &limits).expect("JSON");
            let yaml = parse_values(&format!("priority: {priority}\n"), false, &limits).expect("YAML");
            assert_eq!(json, yaml, "{priority}");
            assert_eq!(json[0]["priority"].as_f64(), Some(priority), "{priority}");
        }
    }

    #[test]
    fn yaml_pieces_parse_as_the_whole_stream_does() {
        let limits = InputLimits::default();
        let texts = [
            "a: 1\n---\nb: 2\n--- # second\nc: [3, 4]\n",
            "---\nkind: X\n---\n\n---\nkind: Y\ntext: |\n  ---indented is content\n",
            "# only a comment\n",
            "",
            "k: v\r\n---\r\nk: w\r\n",
            "---\n--- \nx: 1\n---\t\n",
        ];
        for text in texts {
            let pieces = split_yaml_documents(text).expect("cut");
            assert_eq!(pieces.concat(), text, "the pieces are the text");
            let whole: Vec<Value> = parse_values(text, false, &limits)
                .expect("whole")
                .into_iter()
                .filter(|v| !v.is_null())
                .collect();
            let mut parts = Vec::new();
            for piece in pieces {
                let (values, _) = parse_yaml_piece(piece, limits.max_elements, &limits).expect("piece");
                parts.extend(values.into_iter().filter(|v| !v.is_null()));
            }
            assert_eq!(parts, whole, "{text:?}");
        }
        // Where a line-based cut could be wrong: not cut.
        for text in [
            "%YAML 1.2\n---\na: 1\n",
            "a: 1\n...\n---\nb: 2\n",
            "--- {a: 1}\n",
            "----\n",
        ] {
            assert_eq!(split_yaml_documents(text), None, "{text:?}");
        }
        // A piece spends from the budget it is given.
        let (_, spent) = parse_yaml_piece("a: [1, 2, 3]\n", 100, &limits).expect("piece");
        assert!(spent >= 4, "{spent}");
        assert!(parse_yaml_piece("a: [1, 2, 3]\n", 2, &limits).is_err());
    }
    use super::*;
    use std::time::{Duration, Instant};

    fn limits() -> InputLimits {
        InputLimits::default()
    }

    #[test]
    fn ordinary_documents_parse_like_serde() {
        let yaml = "a: [1, {b: \"x]\"}]  # c [\n---\n- 'it''s [' \n- {k: v}\n---\n";
        let values = parse_values(yaml, false, &limits()).expect("parses");
        assert_eq!(values.len(), 3);
        assert_eq!(values[0]["a"][1]["b"], "x]");
        assert_eq!(values[1][0], "it's [");
        assert_eq!(values[2], Value::Null);
        let json = r#"[{"a": "[[[", "b": [1, 2.5, null, true]}]"#;
        let values = parse_values(json, true, &limits()).expect("parses");
        assert_eq!(values[0][0]["b"][1], 2.5);
        assert!(matches!(
            parse_values("{\"a\": 1} x", true, &limits()),
            Err(InputError::Parse(_))
        ));
    }

    #[test]
    fn deep_nesting_is_refused_at_once() {
        let started = Instant::now();
        for text in [
            "{a: ".repeat(60_000),
            "[".repeat(60_000),
            format!("x: {}", "[".repeat(100)),
            format!("- {}", "{\"a\": ".repeat(100)),
        ] {
            let err = parse_values(&text, false, &limits()).expect_err("too deep");
            assert_eq!(
                err.to_string(),
                "nesting deeper than 64 levels at line 1 (standalone.inputLimits.maxNestingDepth)"
            );
        }
        assert!(matches!(
            parse_values(&"[".repeat(60_000), true, &limits()),
            Err(InputError::TooDeep { .. })
        ));
        // Block nesting is linear to parse and bounded while building.
        let block = format!("{}x\n", "- ".repeat(60_000));
        assert!(matches!(
            parse_values(&block, false, &limits()),
            Err(InputError::TooDeepBlock { max: 64 })
        ));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// The pre-scan as it was written over chars: the byte scan must agree with it.
    fn prescan_by_chars(text: &str, limits: &InputLimits) -> Result<(), InputError> {
        let max = limits.max_nesting_depth;
        let mut elements = 0usize;
        let mut line_has_content = false;
        let mut depth = 0usize;
        let mut line = 1usize;
        let mut chars = text.chars().peekable();
        // Whether the previous significant character lets a node start here.
        let mut node_start = true;
        let mut after_space = true;
        while let Some(c) = chars.next() {
            match c {
                '\n' => {
                    line += 1;
                    elements += usize::from(std::mem::take(&mut line_has_content));
                    if elements > limits.max_elements {
                        return Err(InputError::TooManyElements {
                            max: limits.max_elements,
                        });
                    }
                    node_start = true;
                    after_space = true;
                    continue;
                }
                '#' if after_space => {
                    // A comment, to the end of the line.
                    while chars.peek().is_some_and(|&c| c != '\n') {
                        chars.next();
                    }
                    continue;
                }
                '"' | '\'' if node_start => {
                    let quote = c;
                    while let Some(q) = chars.next() {
                        match q {
                            // An escaped character is skipped (an escaped newline still counts).
                            '\\' if quote == '"' && chars.next() == Some('\n') => line += 1,
                            '\n' => line += 1,
                            q if q == quote => break,
                            _ => {}
                        }
                    }
                    node_start = false;
                }
                '[' | '{' if node_start => {
                    depth += 1;
                    if depth > max {
                        return Err(InputError::TooDeep { max, line });
                    }
                    node_start = true;
                }
                ']' | '}' => {
                    depth = depth.saturating_sub(1);
                    node_start = false;
                }
                ',' => {
                    node_start = true;
                    if depth > 0 {
                        elements += 1;
                        if elements > limits.max_elements {
                            return Err(InputError::TooManyElements {
                                max: limits.max_elements,
                            });
                        }
                    }
                }
                ':' => {
                    node_start = true;
                    if chars
                        .peek()
                        .is_none_or(|&n| matches!(n, ' ' | '\t' | '\n' | '\r'))
                    {
                        elements += 1;
                    }
                }
                '-' | '?' => node_start = true,
                ' ' | '\t' | '\r' => {}
                _ => node_start = false,
            }
            if !matches!(c, ' ' | '\t' | '\r') {
                line_has_content = true;
            }
            after_space = matches!(c, ' ' | '\t' | '\r');
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn the_byte_scan_agrees_with_the_char_scan(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "[", "]", "{", "}", ",", ":", ": ", "-", "?", "#", "\"", "'", "\\", "\n",
                    " ", "\t", "\r", "a", "é", "€", "😀", "\u{a0}", "x: ", "- [", "abc",
                    "10.0.0.0/8", "ü-x",
                ]),
                0..120,
            ),
            max_depth in 1usize..6,
            max_elements in 1usize..40,
        ) {
            let text: String = pieces.concat();
            let limits = InputLimits {
                max_nesting_depth: max_depth,
                max_elements,
                ..limits()
            };
            proptest::prop_assert_eq!(prescan(&text, &limits), prescan_by_chars(&text, &limits));
        }
    }

    #[test]
    fn brackets_in_scalars_and_comments_do_not_count() {
        let deep_looking = format!(
            "a: \"{open}\"\nb: '{open}'\n# {open}\nc: x{open}\n",
            open = "[".repeat(200)
        );
        assert_eq!(prescan(&deep_looking, &limits()), Ok(()));
        assert_eq!(prescan(&"[".repeat(64), &limits()), Ok(()));
        // Other characters, in and out of scalars (the scan goes byte by byte), and escapes:
        // an escaped quote or a multi-byte escaped character does not end the scalar.
        let mixed = format!(
            "é: \"ü\\\"{open}\\é{open}\"\nß{open}: '{open}ñ'\n# ä{open}\n",
            open = "[".repeat(200)
        );
        assert_eq!(prescan(&mixed, &limits()), Ok(()));
        // A line past an escaped newline inside a quoted scalar is counted: the depth error
        // names line 3.
        let deep = format!("a: \"x\\\ny\"\nb: {}", "[".repeat(65));
        assert_eq!(
            prescan(&deep, &limits()),
            Err(InputError::TooDeep { max: 64, line: 3 })
        );
        assert_eq!(
            prescan(&format!("ö: {}", "[".repeat(65)), &limits()),
            Err(InputError::TooDeep { max: 64, line: 1 })
        );
    }

    #[test]
    fn element_counts_are_bounded() {
        let small = InputLimits {
            max_elements: 1_000,
            ..limits()
        };
        let big = format!("[{}]", vec!["1"; 5_000].join(","));
        for json in [true, false] {
            assert_eq!(
                parse_values(&big, json, &small)
                    .expect_err("too many")
                    .to_string(),
                "more than 1000 elements (standalone.inputLimits.maxElements)"
            );
        }
        // Counted before parsing too: a YAML list of a million items is refused without building
        // a million parser events.
        let started = Instant::now();
        let huge = format!("[{}]", vec!["1"; 1_000_000].join(","));
        assert_eq!(
            prescan(&huge, &small),
            Err(InputError::TooManyElements { max: 1_000 })
        );
        let block = "- 1\n".repeat(5_000);
        assert_eq!(
            prescan(&block, &small),
            Err(InputError::TooManyElements { max: 1_000 })
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // Across the documents of one file.
        let docs = vec!["[1, 2, 3]"; 400].join("\n---\n");
        assert!(matches!(
            parse_values(&docs, false, &small),
            Err(InputError::TooManyElements { max: 1_000 })
        ));
    }

    /// A FIFO named `fifo.yaml` in `dir`.
    fn make_fifo(dir: &Path) -> std::path::PathBuf {
        let fifo = dir.join("fifo.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        fifo
    }

    #[test]
    fn only_regular_files_are_read_and_never_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "a: 1\n").expect("write");
        assert_eq!(read_regular_file(&file, 100), Ok(FileRead::Text("a: 1\n".into())));
        assert_eq!(
            read_regular_file(&file, 3),
            Err(InputError::TooLarge { size: 5, max: 3 })
        );
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(matches!(read_regular_file(&link, 100), Ok(FileRead::Text(_))));
        let dangling = dir.path().join("dangling.yaml");
        std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).expect("symlink");
        assert_eq!(
            read_regular_file(&dangling, 100),
            Ok(FileRead::NotRegular("a dangling symlink"))
        );
        assert_eq!(
            read_regular_file(&dir.path().join("nope"), 100),
            Ok(FileRead::Missing)
        );
        assert_eq!(
            read_regular_file(dir.path(), 100),
            Ok(FileRead::NotRegular("a directory"))
        );
        let fifo = make_fifo(dir.path());
        assert_eq!(read_regular_file(&fifo, 100), Ok(FileRead::NotRegular("a FIFO")));
        assert_eq!(
            read_regular_file(Path::new("/dev/null"), 100),
            Ok(FileRead::NotRegular("a character device"))
        );
        std::fs::write(&file, [0xff, 0xfe]).expect("write");
        assert_eq!(read_regular_file(&file, 100), Err(InputError::NotUtf8));
    }

    /// A file listed as a regular file is opened without a stat first: whatever replaced it
    /// since the listing is still found out on the opened file, and never blocks the read.
    #[test]
    fn files_listed_as_regular_are_checked_once_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "a: 1\n").expect("write");
        // What was read, and whether the metadata came with it.
        let checked = |path: &Path, max: u64, how: Listed| {
            read_checked(path, max, how).map(|(read, meta)| (read, meta.is_some()))
        };
        let listed = |path: &Path, max: u64| checked(path, max, Listed::RegularFile);
        let (read, meta) = read_checked(&file, 100, Listed::RegularFile).expect("a regular file");
        assert_eq!(read, FileRead::Text("a: 1\n".into()));
        // The metadata of the file read, as a stat of its path gives it: what tells later that
        // the file is unchanged.
        let meta = meta.expect("the opened file's metadata");
        assert_eq!(
            Some(crate::sources::file_stat::FileStat::from_metadata(&meta)),
            crate::sources::file_stat::FileStat::of(&file)
        );
        assert_eq!(listed(&file, 3), Err(InputError::TooLarge { size: 5, max: 3 }));
        // Replaced since the listing by a FIFO, a directory, a device; removed; left dangling.
        let fifo = make_fifo(dir.path());
        assert_eq!(listed(&fifo, 100), Ok((FileRead::NotRegular("a FIFO"), false)));
        assert_eq!(
            listed(dir.path(), 100),
            Ok((FileRead::NotRegular("a directory"), false))
        );
        assert_eq!(
            listed(Path::new("/dev/null"), 100),
            Ok((FileRead::NotRegular("a character device"), false))
        );
        assert_eq!(
            listed(&dir.path().join("nope"), 100),
            Ok((FileRead::Missing, false))
        );
        let dangling = dir.path().join("dangling.yaml");
        std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).expect("symlink");
        assert_eq!(
            listed(&dangling, 100),
            Ok((FileRead::NotRegular("a dangling symlink"), false))
        );
        // A symlink is not followed by the open: stat'ed first, to a device it is not opened,
        // to a regular file it is read.
        let to_device = dir.path().join("device.yaml");
        std::os::unix::fs::symlink("/dev/null", &to_device).expect("symlink");
        assert_eq!(
            listed(&to_device, 100),
            Ok((FileRead::NotRegular("a character device"), false))
        );
        let to_file = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &to_file).expect("symlink");
        assert_eq!(listed(&to_file, 100), Ok((FileRead::Text("a: 1\n".into()), true)));
        // A socket cannot be opened: said to be one, as for a file the listing did not know.
        let socket = dir.path().join("socket.yaml");
        let _bound = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        assert_eq!(
            listed(&socket, 100),
            Ok((FileRead::NotRegular("a socket"), false))
        );
        // Unknown to the listing: the same answers, the stat first.
        assert_eq!(
            checked(&fifo, 100, Listed::Unknown),
            Ok((FileRead::NotRegular("a FIFO"), false))
        );
        assert_eq!(
            checked(&file, 100, Listed::Unknown),
            Ok((FileRead::Text("a: 1\n".into()), true))
        );
    }
}
