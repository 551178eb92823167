//! The walk over the YAML document: [`Parser`] reads typed values by key (strings, paths,
//! booleans, integers, sections), records a problem naming the dotted key for every value of the
//! wrong type, and collects the keys it does not know as ignored. It also records every key path
//! it is told about ([`Parser::declared`]), present or not, so that the list of keys the agent
//! reads comes from the walk itself (`config::known_config_keys`).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde_norway::{Mapping, Value};

use super::rules::RawBypassRule;
use super::{InputLimits, MetricsServer, Problem, TlsFiles, MAX_NESTING_DEPTH_LIMIT};

/// Walks the YAML document, recording type problems and ignored keys.
pub(super) struct Parser<'b> {
    pub(super) problems: Vec<Problem>,
    pub(super) ignored: Vec<String>,
    /// Every key path a section or list item of the walk accepts, whether the document has it
    /// or not; list items as `list[].key`.
    pub(super) declared: BTreeSet<String>,
    pub(super) base: &'b Path,
}

/// The keys of one `externalNode.policyBypassRules` item.
const BYPASS_RULE_KEYS: &[&str] = &["direction", "protocol", "cidr", "port"];

pub(super) type Fields<'a> = BTreeMap<String, &'a Value>;

/// `a.list[3].b` as `a.list[].b`: the declared path of a key of any list item.
pub(super) fn any_item(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

pub(super) fn untag(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => untag(&t.value),
        other => other,
    }
}

pub(super) fn describe(v: &Value) -> String {
    match untag(v) {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(_) => "a tagged value".to_string(),
    }
}

fn key_text(k: &Value) -> String {
    match untag(k) {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "null".to_string(),
        other => describe(other),
    }
}

/// Text of a scalar, as Go's yaml decodes a scalar into a string field.
fn scalar_text(v: &Value) -> Option<String> {
    match untag(v) {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Bool, accepting the YAML 1.1 spellings Go's yaml accepts for bool fields.
fn as_bool(v: &Value) -> Option<bool> {
    match untag(v) {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "y" => Some(true),
            "false" | "no" | "off" | "n" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

impl<'b> Parser<'b> {
    pub(super) fn new(base: &'b Path) -> Self {
        Parser {
            problems: Vec::new(),
            ignored: Vec::new(),
            declared: BTreeSet::new(),
            base,
        }
    }

    /// Records `parent.key` for every known key (see [`Parser::declared`]).
    pub(super) fn declare(&mut self, parent: &str, known: &[&str]) {
        let parent = any_item(parent);
        for key in known {
            self.declared.insert(join(&parent, key));
        }
    }

    pub(super) fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Splits a mapping into the known keys (returned) and the rest (recorded as ignored).
    pub(super) fn fields<'a>(&mut self, map: &'a Mapping, parent: &str, known: &[&str]) -> Fields<'a> {
        self.declare(parent, known);
        let mut out = Fields::new();
        for (k, v) in map {
            let key = key_text(k);
            if known.contains(&key.as_str()) {
                out.insert(key, v);
            } else {
                self.ignored.push(join(parent, &key));
            }
        }
        out
    }

    /// A nested mapping, by its full dotted `path` (its last segment is its key in `fields`);
    /// absent or null gives an empty set of fields. Its keys are declared either way.
    pub(super) fn section<'a>(&mut self, fields: &Fields<'a>, path: &str, known: &[&str]) -> Fields<'a> {
        self.declare(path, known);
        let key = path.rsplit('.').next().unwrap_or(path);
        match fields.get(key).map(|v| untag(v)) {
            None | Some(Value::Null) => Fields::new(),
            Some(Value::Mapping(m)) => self.fields(m, path, known),
            Some(other) => {
                self.problem(path, format!("expected a mapping, got {}", describe(other)));
                Fields::new()
            }
        }
    }

    /// A present, non-null value.
    fn value<'a>(fields: &Fields<'a>, key: &str) -> Option<&'a Value> {
        fields
            .get(key)
            .copied()
            .filter(|v| !matches!(untag(v), Value::Null))
    }

    pub(super) fn string(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<String> {
        let v = Self::value(fields, key)?;
        let text = scalar_text(v);
        if text.is_none() {
            self.problem(
                join(parent, key),
                format!("expected a string, got {}", describe(v)),
            );
        }
        text
    }

    pub(super) fn path(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<PathBuf> {
        let s = self.string(fields, key, parent)?;
        if s.is_empty() {
            return None;
        }
        Some(self.base.join(s))
    }

    pub(super) fn boolean(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<bool> {
        let v = Self::value(fields, key)?;
        let b = as_bool(v);
        if b.is_none() {
            self.problem(
                join(parent, key),
                format!("expected true or false, got {}", describe(v)),
            );
        }
        b
    }

    pub(super) fn integer(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<i64> {
        let v = Self::value(fields, key)?;
        let n = match untag(v) {
            Value::Number(n) => n.as_i64(),
            _ => None,
        };
        if n.is_none() {
            self.problem(
                join(parent, key),
                format!("expected an integer, got {}", describe(v)),
            );
        }
        n
    }

    pub(super) fn unsigned(&mut self, fields: &Fields<'_>, key: &str, parent: &str) -> Option<u32> {
        let n = self.integer(fields, key, parent)?;
        match u32::try_from(n) {
            Ok(v) => Some(v),
            Err(_) => {
                self.problem(
                    join(parent, key),
                    format!("{n} is invalid: must be 0 or a positive number"),
                );
                None
            }
        }
    }

    /// `standalone.inputLimits`; every value must be positive.
    pub(super) fn input_limits(&mut self, standalone: &Fields<'_>) -> InputLimits {
        const PARENT: &str = "standalone.inputLimits";
        let fields = self.section(
            standalone,
            PARENT,
            &["maxFileBytes", "maxNestingDepth", "maxElements"],
        );
        let defaults = InputLimits::default();
        let mut positive = |key: &str, max: i64| -> Option<i64> {
            let n = self.integer(&fields, key, PARENT)?;
            if n < 1 || n > max {
                self.problem(
                    join(PARENT, key),
                    format!("{n} is invalid: must be between 1 and {max}"),
                );
                return None;
            }
            Some(n)
        };
        let max_file_bytes = positive("maxFileBytes", 1 << 40);
        let max_nesting_depth = positive("maxNestingDepth", MAX_NESTING_DEPTH_LIMIT as i64);
        let max_elements = positive("maxElements", 1 << 40);
        InputLimits {
            max_file_bytes: max_file_bytes
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(defaults.max_file_bytes),
            max_nesting_depth: max_nesting_depth
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(defaults.max_nesting_depth),
            max_elements: max_elements
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(defaults.max_elements),
        }
    }

    pub(super) fn feature_gates(&mut self, v: Option<&&Value>) -> BTreeMap<String, bool> {
        let mut gates = BTreeMap::new();
        let map = match v.map(|v| untag(v)) {
            None | Some(Value::Null) => return gates,
            Some(Value::Mapping(m)) => m,
            Some(other) => {
                self.problem(
                    "featureGates",
                    format!(
                        "expected a mapping of gate names to booleans, got {}",
                        describe(other)
                    ),
                );
                return gates;
            }
        };
        for (k, v) in map {
            let name = key_text(k);
            match as_bool(v) {
                Some(b) => {
                    gates.insert(name, b);
                }
                None => self.problem(
                    format!("featureGates.{name}"),
                    format!("expected true or false, got {}", describe(v)),
                ),
            }
        }
        gates
    }

    /// The `metricsServer` section: types, the address syntax, and cert and key given together.
    pub(super) fn metrics_server(&mut self, top: &Fields<'_>) -> MetricsServer {
        const SECTION: &str = "metricsServer";
        let f = self.section(
            top,
            SECTION,
            &["bindAddress", "tlsCertFile", "tlsKeyFile", "bearerTokenFile"],
        );
        let mut server = MetricsServer::default();
        if let Some(text) = self.string(&f, "bindAddress", SECTION) {
            let text = text.trim();
            server.bind_address = if text.is_empty() {
                None
            } else {
                match text.parse::<SocketAddr>() {
                    Ok(addr) => Some(addr),
                    Err(_) => {
                        self.problem(
                            "metricsServer.bindAddress",
                            format!(
                                "{text:?} is not an address: expected IP:port, e.g. 127.0.0.1:10351 or [::1]:10351, \
                                 or \"\" for no listener"
                            ),
                        );
                        None
                    }
                }
            };
        }
        let cert = self.path(&f, "tlsCertFile", SECTION);
        let key = self.path(&f, "tlsKeyFile", SECTION);
        server.tls = match (cert, key) {
            (Some(cert_file), Some(key_file)) => Some(TlsFiles { cert_file, key_file }),
            (None, None) => None,
            (Some(_), None) => {
                self.problem(
                    "metricsServer.tlsKeyFile",
                    "metricsServer.tlsCertFile is set: tlsKeyFile is required too",
                );
                None
            }
            (None, Some(_)) => {
                self.problem(
                    "metricsServer.tlsCertFile",
                    "metricsServer.tlsKeyFile is set: tlsCertFile is required too",
                );
                None
            }
        };
        server.bearer_token_file = self.path(&f, "bearerTokenFile", SECTION);
        server
    }

    pub(super) fn bypass_rules(&mut self, v: Option<&&Value>) -> Vec<RawBypassRule> {
        const BASE: &str = "externalNode.policyBypassRules";
        self.declare(&format!("{BASE}[]"), BYPASS_RULE_KEYS);
        let seq = match v.map(|v| untag(v)) {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Sequence(s)) => s,
            Some(other) => {
                self.problem(BASE, format!("expected a list of rules, got {}", describe(other)));
                return Vec::new();
            }
        };
        let mut rules = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            let path = format!("{BASE}[{i}]");
            let map = match untag(item) {
                Value::Mapping(m) => m,
                other => {
                    self.problem(
                        path,
                        format!(
                            "expected a rule (a mapping with direction, protocol, cidr and port), got {}",
                            describe(other)
                        ),
                    );
                    continue;
                }
            };
            let f = self.fields(map, &path, BYPASS_RULE_KEYS);
            let before = self.problems.len();
            let rule = RawBypassRule {
                direction: self.string(&f, "direction", &path).unwrap_or_default(),
                protocol: self.string(&f, "protocol", &path).unwrap_or_default(),
                cidr: self.string(&f, "cidr", &path).unwrap_or_default(),
                port: self.integer(&f, "port", &path).unwrap_or(0),
            };
            // A rule with a mistyped field is reported as such and not checked further.
            if self.problems.len() == before {
                rules.push(rule);
            }
        }
        rules
    }
}
