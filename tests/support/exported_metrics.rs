//! What the agent exports to Prometheus, read from its source: the metric and label names that
//! `src/api/` and `src/telemetry.rs` can produce (a `METRIC_NAMES` list when there is one, else
//! the metric-name string literals there). Shared by the tests that hold operator-facing text
//! against it (`tests/operator_assets.rs`: dashboards, alerts; `tests/docs_drift.rs`:
//! docs/metrics.md); they include this file with `#[path = "support/exported_metrics.rs"]`.
// Each including test uses part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Metric names and label names the agent's `src/api/` and `src/telemetry.rs` code can produce.
pub struct Exported {
    pub metrics: BTreeSet<String>,
    pub labels: BTreeSet<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The double-quoted string literals of a piece of Rust (escapes are irrelevant for names).
fn string_literals(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '/' && chars.peek() == Some(&'/') {
            // A comment: metric names mentioned in docs are not exports.
            for c in chars.by_ref() {
                if c == '\n' {
                    break;
                }
            }
        } else if c == '\'' {
            // A char literal ('"') or a lifetime; skip a char literal whole.
            let mut ahead = chars.clone();
            let first = ahead.next();
            let second = if first == Some('\\') {
                ahead.nth(1)
            } else {
                ahead.next()
            };
            if second == Some('\'') {
                chars = ahead;
            }
        } else if c == '"' {
            let mut s = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => break,
                    c => s.push(c),
                }
            }
            out.push(s);
        }
    }
    out
}

fn is_metric_name(s: &str) -> bool {
    s.starts_with("antrea_")
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

pub fn exported() -> Exported {
    let mut files = Vec::new();
    // The API serves the metrics; the registry that names them is `src/telemetry.rs`.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    rust_files(&repo.join("src/api"), &mut files);
    files.push(repo.join("src/telemetry.rs"));
    files.sort();
    let sources: Vec<String> = files
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("read source"))
        .collect();
    let mut metrics = BTreeSet::new();
    // The canonical list, when the API exports one: the literals between `METRIC_NAMES` and `];`.
    for src in &sources {
        if let Some(at) = src.find("METRIC_NAMES") {
            let rest = &src[at..];
            if let (Some(open), Some(close)) = (rest.find('['), rest.find("];")) {
                if open < close {
                    metrics.extend(
                        string_literals(&rest[open..close])
                            .into_iter()
                            .filter(|s| is_metric_name(s)),
                    );
                }
            }
        }
    }
    if metrics.is_empty() {
        for src in &sources {
            metrics.extend(string_literals(src).into_iter().filter(|s| is_metric_name(s)));
        }
    }
    let mut labels: BTreeSet<String> = sources
        .iter()
        .flat_map(|s| string_literals(s))
        .filter(|s| is_label_name(s))
        .collect();
    // Labels Prometheus adds itself.
    labels.extend(["job", "instance", "le", "__name__"].map(String::from));
    assert!(
        !metrics.is_empty(),
        "no metric names found under src/api and src/telemetry.rs"
    );
    Exported { metrics, labels }
}
