//! A small ini reader for NetworkManager keyfiles and systemd units (sections, `key=value`,
//! NetworkManager's `+=`/`-=`, systemd's line continuations), systemd's booleans, and the
//! shell-style globs both use to match interface names.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Set,
    /// NetworkManager `key+=value`.
    Append,
    /// NetworkManager `key-=value`.
    Remove,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) key: String,
    pub(super) op: Op,
    pub(super) value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Section {
    pub(super) name: String,
    pub(super) entries: Vec<Entry>,
}

/// Why an ini file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IniError {
    #[error("line {line}: assignment outside of a [section]")]
    OutsideSection { line: usize },
    #[error("line {line}: expected `key=value`, found {text:?}")]
    NotAnAssignment { line: usize, text: String },
    #[error("line {line}: section header {text:?} is not closed by ']'")]
    BadHeader { line: usize, text: String },
}

pub(super) fn parse_ini(text: &str) -> Result<Vec<Section>, IniError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut pending = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let mut line = raw.trim().to_string();
        if !pending.is_empty() {
            line = format!("{pending} {line}");
            pending.clear();
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        // systemd: a trailing backslash continues the value on the next line.
        if let Some(stripped) = line.strip_suffix('\\') {
            pending = stripped.trim_end().to_string();
            continue;
        }
        if line.starts_with('[') {
            let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
                return Err(IniError::BadHeader {
                    line: line_no,
                    text: line,
                });
            };
            sections.push(Section {
                name: name.trim().to_string(),
                entries: Vec::new(),
            });
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(IniError::NotAnAssignment {
                line: line_no,
                text: line,
            });
        };
        let k = k.trim();
        let (key, op) = if let Some(k) = k.strip_suffix('+') {
            (k.trim_end(), Op::Append)
        } else if let Some(k) = k.strip_suffix('-') {
            (k.trim_end(), Op::Remove)
        } else {
            (k, Op::Set)
        };
        let Some(section) = sections.last_mut() else {
            return Err(IniError::OutsideSection { line: line_no });
        };
        section.entries.push(Entry {
            key: key.to_string(),
            op,
            value: v.trim().to_string(),
        });
    }
    Ok(sections)
}

/// The last value of `key` in the sections named `section`.
pub(super) fn last_value<'a>(sections: &'a [Section], section: &str, key: &str) -> Option<&'a str> {
    sections
        .iter()
        .filter(|s| s.name == section)
        .flat_map(|s| s.entries.iter())
        .rfind(|e| e.key == key)
        .map(|e| e.value.as_str())
}

/// systemd's boolean syntax.
pub(super) fn systemd_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "yes" | "y" | "true" | "t" | "on" => Some(true),
        "0" | "no" | "n" | "false" | "f" | "off" => Some(false),
        _ => None,
    }
}

/// Shell-style glob: `*`, `?` and, when `classes` is set, `[...]` (with `!`/`^` negation and
/// ranges) as fnmatch(3) without flags; a backslash escapes the next character.
pub(super) fn glob_match(pattern: &str, text: &str, classes: bool) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob_at(&p, &t, classes)
}

pub(super) fn glob_at(p: &[char], t: &[char], classes: bool) -> bool {
    let Some((&c, rest)) = p.split_first() else {
        return t.is_empty();
    };
    match c {
        '*' => (0..=t.len()).any(|i| glob_at(rest, &t[i..], classes)),
        '?' => !t.is_empty() && glob_at(rest, &t[1..], classes),
        '[' if classes => {
            let Some((&ch, t_rest)) = t.split_first() else {
                return false;
            };
            match class_match(rest, ch) {
                Some((matched, after)) => matched && glob_at(after, t_rest, classes),
                // No closing bracket: '[' is an ordinary character.
                None => ch == '[' && glob_at(rest, t_rest, classes),
            }
        }
        '\\' if !rest.is_empty() => !t.is_empty() && t[0] == rest[0] && glob_at(&rest[1..], &t[1..], classes),
        _ => !t.is_empty() && t[0] == c && glob_at(rest, &t[1..], classes),
    }
}

/// Matches `ch` against a bracket expression starting after `[`; returns the result and the
/// pattern after the closing `]`.
pub(super) fn class_match(p: &[char], ch: char) -> Option<(bool, &[char])> {
    let (negate, mut i) = match p.first() {
        Some('!') | Some('^') => (true, 1),
        _ => (false, 0),
    };
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        let c = p[i];
        if c == ']' && !first {
            return Some((matched != negate, &p[i + 1..]));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if c <= ch && ch <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if c == ch {
                matched = true;
            }
            i += 1;
        }
    }
    None
}
